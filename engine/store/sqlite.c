/* engine/store/sqlite.c — the SQLite store's writer: records queued by
 * any thread, committed by one writer thread in one BEGIN IMMEDIATE
 * transaction for everything queued (group commit), then answered; and
 * closing. Opening and reading back are engine/store/sqlite_open.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/store/sqlite.h"
#include "process/fault.h"

/* The most bytes a record puts in one row: SQLite's own limit on a row
 * is 1,000,000,000 bytes (SQLITE_MAX_LENGTH), past which the insert fails
 * and with it the whole group commit, every other record of the batch
 * included. So a record that could pass it is refused when it is queued
 * (SX_EINVAL), alone. */
#define ROW_MAX ((size_t)900000000)

/* Runs st once (bindings already made) and resets it. */
static int run(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* Inserts m as an inbox row. */
static int put_msg(sx__store *s, const rec_msg *m)
{
    sqlite3_bind_int64(s->inbox_ins, 1, (sqlite3_int64)m->seq);
    sqlite3_bind_int64(s->inbox_ins, 2, (sqlite3_int64)m->to);
    sqlite3_bind_int64(s->inbox_ins, 3, m->from.node);
    sqlite3_bind_int64(s->inbox_ins, 4, m->from.host);
    sqlite3_bind_int64(s->inbox_ins, 5, (sqlite3_int64)m->from.id);
    sqlite3_bind_text(s->inbox_ins, 6, m->topic, (int)m->topic_len,
                      SQLITE_STATIC);
    sqlite3_bind_blob(s->inbox_ins, 7, m->data != NULL ? m->data : (void *)"",
                      (int)m->data_len, SQLITE_STATIC);
    return run(s->inbox_ins);
}

/* Deletes job id's checkpoint and stored messages (a finish, a restart). */
static int drop_ckpt(sx__store *s, uint64_t id)
{
    sqlite3_bind_int64(s->ck_del, 1, (sqlite3_int64)id);
    int rc = run(s->ck_del);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(s->inbox_del, 1, (sqlite3_int64)id);
    return run(s->inbox_del);
}

static int write_ckpt(sx__store *s, rec *r)
{
    int rc;
    sqlite3_bind_int64(s->ck_put, 1, (sqlite3_int64)r->id);
    sqlite3_bind_int64(s->ck_put, 2, (sqlite3_int64)r->steps);
    sqlite3_bind_int(s->ck_put, 3, r->want);
    sqlite3_bind_blob(s->ck_put, 4, r->blob != NULL ? r->blob : (void *)"",
                      (int)r->blob_len, SQLITE_STATIC);
    sqlite3_bind_blob(s->ck_put, 5,
                      r->inflight != NULL ? r->inflight : (void *)"",
                      (int)r->inflight_len, SQLITE_STATIC);
    if ((rc = run(s->ck_put)) != SQLITE_OK)
        return rc;
    for (size_t i = 0; i < r->n_consumed; i++) {
        sqlite3_bind_int64(s->inbox_eat, 1, (sqlite3_int64)r->id);
        sqlite3_bind_int64(s->inbox_eat, 2, (sqlite3_int64)r->consumed[i]);
        if ((rc = run(s->inbox_eat)) != SQLITE_OK)
            return rc;
    }
    for (size_t i = 0; i < r->n_msgs; i++)
        if ((rc = put_msg(s, &r->msgs[i])) != SQLITE_OK)
            return rc;
    return SQLITE_OK;
}

/* Writes one record inside the open transaction. Returns SQLite's code
 * for a failure that ends the transaction; a record-level answer (a key
 * already stored) goes into r->rc. */
static int write_rec(sx__store *s, rec *r)
{
    int rc;
    r->rc = 0;
    if (r->kind == REC_JOB) {
        if (r->key != NULL) {
            sqlite3_bind_blob(s->key_ins, 1, r->key, (int)r->key_len,
                              SQLITE_STATIC);
            sqlite3_bind_int64(s->key_ins, 2, (sqlite3_int64)r->id);
            if ((rc = run(s->key_ins)) != SQLITE_OK)
                return rc;
            if (sqlite3_changes(s->db) == 0) {
                sqlite3_bind_blob(s->key_get, 1, r->key, (int)r->key_len,
                                  SQLITE_STATIC);
                rc = sqlite3_step(s->key_get);
                if (rc == SQLITE_ROW)
                    r->id = (uint64_t)sqlite3_column_int64(s->key_get, 0);
                sqlite3_reset(s->key_get);
                sqlite3_clear_bindings(s->key_get);
                if (rc != SQLITE_ROW)
                    return rc == SQLITE_DONE ? SQLITE_CORRUPT : rc;
                r->rc = SX_EEXIST;
                return SQLITE_OK;
            }
        }
        sqlite3_bind_int64(s->job_ins, 1, (sqlite3_int64)r->id);
        sqlite3_bind_text(s->job_ins, 2, r->type, -1, SQLITE_STATIC);
        sqlite3_bind_text(s->job_ins, 3, r->method, -1, SQLITE_STATIC);
        sqlite3_bind_blob(s->job_ins, 4, r->blob, (int)r->blob_len,
                          SQLITE_STATIC);
        sqlite3_bind_int64(s->job_ins, 5, r->attempt);
        if (r->policy_len > 0)
            sqlite3_bind_blob(s->job_ins, 6, r->policy, (int)r->policy_len,
                              SQLITE_STATIC);
        return run(s->job_ins);
    }
    if (r->kind == REC_CKPT)
        return write_ckpt(s, r);
    if (r->kind == REC_MSG)
        return put_msg(s, &r->msgs[0]);
    if (r->kind == REC_RESTART) {
        if ((rc = drop_ckpt(s, r->id)) != SQLITE_OK)
            return rc;
        sqlite3_bind_int64(s->job_restart, 1, r->attempt);
        sqlite3_bind_int64(s->job_restart, 2, r->restart_at);
        if (r->blob_len > 0)
            sqlite3_bind_blob(s->job_restart, 3, r->blob, (int)r->blob_len,
                              SQLITE_STATIC);
        sqlite3_bind_int64(s->job_restart, 4, (sqlite3_int64)r->id);
        return run(s->job_restart);
    }
    sqlite3_bind_int64(s->job_del, 1, (sqlite3_int64)r->id);
    if ((rc = run(s->job_del)) != SQLITE_OK ||
        (rc = drop_ckpt(s, r->id)) != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(s->out_ins, 1, (sqlite3_int64)r->id);
    sqlite3_bind_int(s->out_ins, 2, r->error);
    if (r->msg != NULL)
        sqlite3_bind_text(s->out_ins, 3, r->msg, -1, SQLITE_STATIC);
    sqlite3_bind_blob(s->out_ins, 4, r->blob != NULL ? r->blob : (void *)"",
                      (int)r->blob_len, SQLITE_STATIC);
    sqlite3_bind_int64(s->out_ins, 5, (sqlite3_int64)r->steps);
    sqlite3_bind_int64(s->out_ins, 6, r->attempt);
    if ((rc = run(s->out_ins)) != SQLITE_OK)
        return rc;
    for (size_t i = 0; i < r->n_msgs; i++) /* its last step's messages */
        if ((rc = put_msg(s, &r->msgs[i])) != SQLITE_OK)
            return rc;
    return SQLITE_OK;
}

/* Calls each record's done and frees it. */
static void answer_all(rec *list)
{
    while (list != NULL) {
        rec *r = list;
        list = r->next;
        if (r->done != NULL)
            r->done(r->user, r->rc, r->id);
        free(r);
    }
}

/* Commits batch (a list) in one transaction; its answers go to the
 * answerer ("Answers" below). */
static void commit_batch(sx__store *s, rec *batch)
{
    bool finishes = false;
    int rc = sx__sq_exec(s->db, "BEGIN IMMEDIATE");
    for (rec *r = batch; rc == SQLITE_OK && r != NULL; r = r->next) {
        rc = write_rec(s, r);
        finishes |= r->kind == REC_FINISH;
    }
    if (rc == SQLITE_OK && finishes) {
        /* The oldest outcomes past keep go, with their keys. */
        sqlite3_bind_int64(s->trim_keys, 1, (sqlite3_int64)s->keep);
        if ((rc = run(s->trim_keys)) == SQLITE_OK) {
            sqlite3_bind_int64(s->trim_outs, 1, (sqlite3_int64)s->keep);
            rc = run(s->trim_outs);
        }
    }
    if (rc == SQLITE_OK)
        rc = sx__sq_exec(s->db, "COMMIT");
    int code = sx__sq_code_of(rc);
    if (rc != SQLITE_OK)
        sx__sq_exec(s->db, "ROLLBACK"); /* nothing of the batch stays */
    uint64_t n = 0, bad = 0;
    for (rec *r = batch; r != NULL; r = r->next) {
        if (code != 0)
            r->rc = code;
        n++;
        bad += r->rc != 0 && r->rc != SX_EEXIST;
    }
    /* The figures first, so that whoever an answer wakes sees them.
     * relaxed: figures; the writer is their only writer. */
    if (code == 0)
        atomic_fetch_add_explicit(&s->commits, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->records, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->failed, bad, memory_order_relaxed);
    if (!s->answering) {
        answer_all(batch);
        return;
    }
    rec *last = batch;
    while (last->next != NULL)
        last = last->next;
    pthread_mutex_lock(&s->ans_mu);
    *s->ans_tail = batch;
    s->ans_tail = &last->next;
    pthread_cond_signal(&s->ans_cv);
    pthread_mutex_unlock(&s->ans_mu);
}

/* ---- Answers ----
 *
 * A committed batch's answers (the done callbacks: a stored submit's
 * process queued and its client told, a stored outcome made visible) run
 * on a thread of their own, in commit order, while the writer commits the
 * next batch: run on the writer, they took about a quarter of its time
 * between two commits (bench/FINDINGS.md, relay-durable). */

/* Set on the store's own threads: a call that would wait for the store
 * there would wait for itself (sx__store_on_thread). */
static _Thread_local bool on_store_thread;

bool sx__store_on_thread(void)
{
    return on_store_thread;
}

static void *answerer_main(void *arg)
{
    sx__store *s = arg;
    on_store_thread = true;
    pthread_mutex_lock(&s->ans_mu);
    for (;;) {
        while (s->ans_head == NULL && !s->ans_closing)
            pthread_cond_wait(&s->ans_cv, &s->ans_mu);
        rec *list = s->ans_head;
        s->ans_head = NULL;
        s->ans_tail = &s->ans_head;
        bool closing = s->ans_closing;
        pthread_mutex_unlock(&s->ans_mu);
        answer_all(list);
        pthread_mutex_lock(&s->ans_mu);
        if (closing && s->ans_head == NULL)
            break;
    }
    pthread_mutex_unlock(&s->ans_mu);
    return NULL;
}

static void *answerer_main(void *arg);

void *sx__sq_writer_main(void *arg)
{
    sx__store *s = arg;
    on_store_thread = true;
    s->ans_head = NULL;
    s->ans_tail = &s->ans_head;
    s->ans_closing = false;
    /* Without the thread (out of resources) the writer answers itself. */
    s->answering = pthread_mutex_init(&s->ans_mu, NULL) == 0;
    if (s->answering && pthread_cond_init(&s->ans_cv, NULL) != 0) {
        pthread_mutex_destroy(&s->ans_mu);
        s->answering = false;
    }
    if (s->answering &&
        pthread_create(&s->answerer, NULL, answerer_main, s) != 0) {
        pthread_cond_destroy(&s->ans_cv);
        pthread_mutex_destroy(&s->ans_mu);
        s->answering = false;
    }
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->head == NULL && !s->closing)
            pthread_cond_wait(&s->cv, &s->mu);
        rec *batch = s->head;
        s->head = NULL;
        s->tail = &s->head;
        bool closing = s->closing;
        pthread_mutex_unlock(&s->mu);
        if (batch != NULL)
            commit_batch(s, batch);
        pthread_mutex_lock(&s->mu);
        if (closing && s->head == NULL)
            break;
    }
    pthread_mutex_unlock(&s->mu);
    if (s->answering) {
        /* Every answer is given before close returns. */
        pthread_mutex_lock(&s->ans_mu);
        s->ans_closing = true;
        pthread_cond_signal(&s->ans_cv);
        pthread_mutex_unlock(&s->ans_mu);
        pthread_join(s->answerer, NULL);
        pthread_cond_destroy(&s->ans_cv);
        pthread_mutex_destroy(&s->ans_mu);
    }
    return NULL;
}

static int enqueue(sx__store *s, rec *r)
{
    pthread_mutex_lock(&s->mu);
    if (s->closing) {
        pthread_mutex_unlock(&s->mu);
        free(r);
        return SX_ESTATE;
    }
    if (s->lazy) {
        /* First record: the writer thread takes the connection over. */
        if (pthread_create(&s->writer, NULL, sx__sq_writer_main, s) != 0) {
            pthread_mutex_unlock(&s->mu);
            free(r);
            return SX_ENOMEM;
        }
        s->lazy = false;
    }
    /* The caller's copies get their seqs here, under the lock: once r is
     * queued the writer may answer and free it at any moment. */
    for (size_t i = 0; i < r->n_msgs; i++)
        r->msgs[i].seq = r->seq_out[i].seq = s->next_seq++;
    *s->tail = r;
    s->tail = &r->next;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* A record with room for n bytes of strings and blob after it. */
/* A record of kind for job id, answered through done, with room for n
 * bytes of strings and blobs after it. */
static rec *rec_new(int kind, uint64_t id, size_t n, sx__store_done_fn done,
                    void *user)
{
    rec *r = SX__FAULT(SX__FAULT_STORE_REC) ? NULL : calloc(1, sizeof(rec) + n);
    if (r != NULL) {
        r->kind = kind;
        r->id = id;
        r->done = done;
        r->user = user;
    }
    return r;
}

static char *put(char **p, const void *src, size_t n, bool nul)
{
    char *at = *p;
    if (n > 0)
        memcpy(at, src, n);
    if (nul)
        at[n++] = '\0';
    *p += n;
    return at;
}

int sx__store_submit(sx__store *s, const sx__store_job *job,
                     sx__store_done_fn done, void *user)
{
    if (s == NULL || job == NULL || job->type == NULL || job->method == NULL ||
        (job->input.len > 0 && job->input.data == NULL) ||
        job->input.len > ROW_MAX || job->key_len > ROW_MAX ||
        job->policy.len > 256 || (job->policy.len > 0 && !job->policy.data))
        return SX_EINVAL;
    size_t tl = strlen(job->type), ml = strlen(job->method);
    rec *r =
        rec_new(REC_JOB, job->id,
                job->key_len + tl + ml + 2 + job->input.len + job->policy.len,
                done, user);
    if (r == NULL)
        return SX_ENOMEM;
    char *p = (char *)(r + 1);
    r->attempt = job->attempt;
    if (job->key != NULL) {
        r->key = put(&p, job->key, job->key_len, false);
        r->key_len = job->key_len;
    }
    r->type = put(&p, job->type, tl, true);
    r->method = put(&p, job->method, ml, true);
    r->blob = (const uint8_t *)put(&p, job->input.data, job->input.len, false);
    r->blob_len = job->input.len;
    if (job->policy.len > 0) {
        r->policy =
            (const uint8_t *)put(&p, job->policy.data, job->policy.len, false);
        r->policy_len = job->policy.len;
    }
    return enqueue(s, r);
}

int sx__store_restart(sx__store *s, uint64_t id, uint32_t attempt,
                      int64_t restart_at, sx_payload restarts)
{
    if (s == NULL || restarts.len > 65536 ||
        (restarts.len > 0 && restarts.data == NULL))
        return SX_EINVAL;
    rec *r = rec_new(REC_RESTART, id, restarts.len, NULL, NULL);
    if (r == NULL)
        return SX_ENOMEM;
    char *p = (char *)(r + 1);
    r->attempt = attempt;
    r->restart_at = restart_at;
    r->blob = (const uint8_t *)put(&p, restarts.data, restarts.len, false);
    r->blob_len = restarts.len;
    return enqueue(s, r);
}

static size_t msgs_size(const sx__store_msg *m, size_t n);
static bool msgs_ok(const sx__store_msg *m, size_t n);
static void msgs_put(rec *r, char **p, const sx__store_msg *m, size_t n);

int sx__store_finish(sx__store *s, uint64_t id, int error, const char *msg,
                     sx_payload value, uint64_t steps, uint32_t attempts,
                     sx__store_done_fn done, void *user)
{
    return sx__store_finish_msgs(s, id, error, msg, value, steps, attempts,
                                 NULL, 0, done, user);
}

int sx__store_finish_msgs(sx__store *s, uint64_t id, int error, const char *msg,
                          sx_payload value, uint64_t steps, uint32_t attempts,
                          sx__store_msg *msgs, size_t n_msgs,
                          sx__store_done_fn done, void *user)
{
    if (s == NULL || (value.len > 0 && value.data == NULL) ||
        value.len > ROW_MAX || (n_msgs > 0 && msgs == NULL) ||
        !msgs_ok(msgs, n_msgs))
        return SX_EINVAL;
    size_t ml = msg != NULL ? strlen(msg) : 0;
    rec *r = rec_new(REC_FINISH, id,
                     msgs_size(msgs, n_msgs) + ml + 1 + value.len, done, user);
    if (r == NULL)
        return SX_ENOMEM;
    char *p = (char *)(r + 1);
    if (n_msgs > 0) { /* first: aligned */
        msgs_put(r, &p, msgs, n_msgs);
        r->seq_out = msgs;
    }
    r->error = error;
    r->steps = steps;
    r->attempt = attempts;
    if (msg != NULL)
        r->msg = put(&p, msg, ml, true);
    r->blob = (const uint8_t *)put(&p, value.data, value.len, false);
    r->blob_len = value.len;
    return enqueue(s, r);
}

/* Copies n messages into the record's allocation at *p (rec_msg array
 * first, aligned, then their bytes). */
static size_t msgs_size(const sx__store_msg *m, size_t n)
{
    size_t z = n * sizeof(rec_msg);
    for (size_t i = 0; i < n; i++)
        z += m[i].topic_len + m[i].data.len;
    return z;
}

static bool msgs_ok(const sx__store_msg *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].topic == NULL || m[i].topic_len > 255 ||
            m[i].data.len > ROW_MAX ||
            (m[i].data.len > 0 && m[i].data.data == NULL))
            return false;
    return true;
}

static void msgs_put(rec *r, char **p, const sx__store_msg *m, size_t n)
{
    r->msgs = (rec_msg *)*p;
    r->n_msgs = n;
    *p += n * sizeof(rec_msg);
    for (size_t i = 0; i < n; i++) {
        rec_msg *x = &r->msgs[i];
        x->to = m[i].to;
        x->from = m[i].from;
        x->topic_len = m[i].topic_len;
        x->topic = put(p, m[i].topic, m[i].topic_len, false);
        x->data_len = m[i].data.len;
        x->data = (const uint8_t *)put(p, m[i].data.data, m[i].data.len, false);
    }
}

int sx__store_checkpoint(sx__store *s, sx__store_ckpt *ck,
                         sx__store_done_fn done, void *user)
{
    if (s == NULL || ck == NULL || ck->state.len > ROW_MAX ||
        ck->inflight.len > ROW_MAX - ck->state.len ||
        (ck->n_consumed > 0 && ck->consumed == NULL) ||
        (ck->state.len > 0 && ck->state.data == NULL) ||
        (ck->inflight.len > 0 && ck->inflight.data == NULL) ||
        (ck->n_msgs > 0 && ck->msgs == NULL) || !msgs_ok(ck->msgs, ck->n_msgs))
        return SX_EINVAL;
    rec *r = rec_new(REC_CKPT, ck->id,
                     ck->n_consumed * sizeof(uint64_t) +
                         msgs_size(ck->msgs, ck->n_msgs) + ck->state.len +
                         ck->inflight.len + 8,
                     done, user);
    if (r == NULL)
        return SX_ENOMEM;
    char *p = (char *)(r + 1);
    if (ck->n_consumed > 0) { /* first: aligned */
        r->consumed = (const uint64_t *)put(
            &p, ck->consumed, ck->n_consumed * sizeof(uint64_t), false);
        r->n_consumed = ck->n_consumed;
    }
    r->steps = ck->steps;
    r->want = ck->want;
    if (ck->n_msgs > 0) {
        msgs_put(r, &p, ck->msgs, ck->n_msgs);
        r->seq_out = ck->msgs;
    }
    r->blob = (const uint8_t *)put(&p, ck->state.data, ck->state.len, false);
    r->blob_len = ck->state.len;
    r->inflight =
        (const uint8_t *)put(&p, ck->inflight.data, ck->inflight.len, false);
    r->inflight_len = ck->inflight.len;
    return enqueue(s, r);
}

int sx__store_message(sx__store *s, sx__store_msg *m, sx__store_done_fn done,
                      void *user)
{
    if (s == NULL || m == NULL || !msgs_ok(m, 1))
        return SX_EINVAL;
    rec *r = rec_new(REC_MSG, m->to, msgs_size(m, 1) + 8, done, user);
    if (r == NULL)
        return SX_ENOMEM;
    char *p = (char *)(r + 1);
    msgs_put(r, &p, m, 1);
    r->seq_out = m;
    return enqueue(s, r);
}

/* SX_ESTATE once the writer has started: until then the caller's thread
 * is the only one using the connection. */
static int before_records(sx__store *s)
{
    pthread_mutex_lock(&s->mu);
    bool lazy = s->lazy;
    pthread_mutex_unlock(&s->mu);
    return lazy ? 0 : SX_ESTATE;
}

int sx__store_meta_get(sx__store *s, const char *name, int64_t *value)
{
    if (s == NULL || name == NULL || value == NULL)
        return SX_EINVAL;
    int rc = before_records(s);
    if (rc != 0)
        return rc;
    sqlite3_stmt *st;
    rc = sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE name = ?", -1,
                            &st, NULL);
    if (rc != SQLITE_OK)
        return sx__sq_code_of(rc);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *value = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW    ? 0
           : rc == SQLITE_DONE ? SX_ENOTFOUND
                               : sx__sq_code_of(rc);
}

int sx__store_meta_set(sx__store *s, const char *name, int64_t value)
{
    if (s == NULL || name == NULL)
        return SX_EINVAL;
    int rc = before_records(s);
    if (rc != 0)
        return rc;
    sqlite3_stmt *st;
    rc = sqlite3_prepare_v2(
        s->db, "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", -1,
        &st, NULL);
    if (rc != SQLITE_OK)
        return sx__sq_code_of(rc);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, value);
    rc = SX__FAULT(SX__FAULT_STORE_REC) ? SQLITE_IOERR : sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : sx__sq_code_of(rc);
}

void sx__store_stats_get(sx__store *s, sx__store_stats *out)
{
    /* relaxed: figures, each a recent value. */
    out->commits = atomic_load_explicit(&s->commits, memory_order_relaxed);
    out->records = atomic_load_explicit(&s->records, memory_order_relaxed);
    out->failed = atomic_load_explicit(&s->failed, memory_order_relaxed);
}

void sx__store_shutdown(sx__store *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    bool again = s->shut;
    s->closing = true;
    s->shut = true;
    bool started = !s->lazy;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (again)
        return;
    if (started)
        pthread_join(s->writer, NULL); /* it commits what is queued first */
    sx__sq_finalize_all(s);
    sqlite3_close(s->db);
    s->db = NULL;
    close(s->lock_fd); /* drops the flock: another program may open it */
    s->lock_fd = -1;
}

void sx__store_close(sx__store *s)
{
    if (s == NULL)
        return;
    sx__store_shutdown(s);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

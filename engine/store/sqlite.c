/* engine/store/sqlite.c — the store (engine/store/store.h) on SQLite.
 *
 * One database, DIR/stepx.db, in WAL mode; synchronous NORMAL (a crash of
 * the program loses nothing committed) or FULL. One writer: the store's
 * own thread, which takes everything queued, commits it in one
 * BEGIN IMMEDIATE transaction (group commit: one WAL sync for the lot)
 * and then answers each record. DIR/lock is held with flock for the
 * store's life, so that a second daemon on the same directory is refused
 * at open instead of writing beside the first.
 *
 * Schema (user_version = SX__STORE_SCHEMA, application_id = 'STPX'):
 *   jobs(id, type, method, input, attempt)      jobs without an outcome
 *   keys(key, id)                               idempotency keys
 *   outcomes(seq, id, error, msg, value, steps, attempts)
 * A key lives as long as its job or its kept outcome.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "engine/store/store.h"
#include "process/fault.h"

#define APP_ID 0x53545058 /* 'STPX' */

enum { REC_JOB, REC_FINISH };

typedef struct rec {
    struct rec *next;
    int kind;
    sx__store_done_fn done;
    void *user;
    uint64_t id;
    uint32_t attempt; /* REC_JOB: attempt; REC_FINISH: attempts */
    int error;
    uint64_t steps;
    int rc; /* the answer, set by the writer */
    /* One allocation after the record: key, type, method, msg, blob. */
    const char *key, *type, *method, *msg;
    size_t key_len, blob_len;
    const uint8_t *blob;
} rec;

struct sx__store {
    sqlite3 *db;
    int lock_fd;
    uint64_t keep;
    sqlite3_stmt *key_ins, *key_get, *job_ins, *job_del, *out_ins, *trim_keys,
        *trim_outs;
    pthread_t writer;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rec *head, **tail; /* under mu */
    bool closing;      /* under mu */
    /* Open and the writer not started yet: recover may still run on the
     * caller's thread (the first record starts the writer). Under mu. */
    bool lazy;
    /* Figures: written by the writer only, read by stats (relaxed). */
    _Atomic uint64_t commits, records, failed;
};

/* The SX_E* code for an SQLite result. */
static int code_of(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return 0;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return SX_ECORRUPT;
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
        return rc == SQLITE_CANTOPEN ? -EACCES : -EROFS;
    case SQLITE_NOMEM:
        return SX_ENOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    default:
        return -EIO;
    }
}

/* Writes "what: sqlite's message" into msg. */
static int fail(char *msg, size_t cap, int code, const char *what, sqlite3 *db)
{
    if (msg != NULL && cap > 0)
        snprintf(msg, cap, "%s%s%s", what, db != NULL ? ": " : "",
                 db != NULL ? sqlite3_errmsg(db) : "");
    return code;
}

static int exec(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* One integer from a single-row query; SQLite's result code. */
static int query_int(sqlite3 *db, const char *sql, int64_t *out)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

/* mkdir -p with mode 0700 for what it creates. 0 or -errno. */
static int make_dir(const char *dir)
{
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path)
        return -ENAMETOOLONG;
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return -errno;
        path[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static const char *const SCHEMA_V1[] = {
    "CREATE TABLE jobs (id INTEGER PRIMARY KEY, type TEXT NOT NULL, "
    "method TEXT NOT NULL, input BLOB NOT NULL, attempt INTEGER NOT NULL)",
    "CREATE TABLE keys (key BLOB PRIMARY KEY, id INTEGER NOT NULL) "
    "WITHOUT ROWID",
    "CREATE TABLE outcomes (seq INTEGER PRIMARY KEY, id INTEGER NOT NULL "
    "UNIQUE, error INTEGER NOT NULL, msg TEXT, value BLOB NOT NULL, "
    "steps INTEGER NOT NULL, attempts INTEGER NOT NULL)",
};

/* Brings an empty database (version 0) to SX__STORE_SCHEMA in one
 * transaction: all or nothing. */
static int migrate(sqlite3 *db, int64_t version)
{
    if (version == SX__STORE_SCHEMA)
        return SQLITE_OK;
    int rc = exec(db, "BEGIN IMMEDIATE");
    if (rc != SQLITE_OK)
        return rc;
    if (version == 0) {
        for (size_t i = 0; i < sizeof SCHEMA_V1 / sizeof SCHEMA_V1[0]; i++)
            if ((rc = exec(db, SCHEMA_V1[i])) != SQLITE_OK)
                goto undo;
    }
    char sql[96];
    snprintf(sql, sizeof sql, "PRAGMA application_id = %d", APP_ID);
    if ((rc = exec(db, sql)) != SQLITE_OK)
        goto undo;
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", SX__STORE_SCHEMA);
    if ((rc = exec(db, sql)) != SQLITE_OK)
        goto undo;
    if ((rc = exec(db, "COMMIT")) == SQLITE_OK)
        return SQLITE_OK;
undo:
    exec(db, "ROLLBACK");
    return rc;
}

static int prepare(sx__store *s)
{
    static const struct {
        size_t off;
        const char *sql;
    } stmts[] = {
        { offsetof(sx__store, key_ins),
          "INSERT INTO keys (key, id) VALUES (?, ?) ON CONFLICT DO NOTHING" },
        { offsetof(sx__store, key_get), "SELECT id FROM keys WHERE key = ?" },
        { offsetof(sx__store, job_ins),
          "INSERT INTO jobs (id, type, method, input, attempt) "
          "VALUES (?, ?, ?, ?, ?)" },
        { offsetof(sx__store, job_del), "DELETE FROM jobs WHERE id = ?" },
        { offsetof(sx__store, out_ins),
          "INSERT OR REPLACE INTO outcomes (id, error, msg, value, steps, "
          "attempts) VALUES (?, ?, ?, ?, ?, ?)" },
        { offsetof(sx__store, trim_keys),
          "DELETE FROM keys WHERE id IN (SELECT id FROM outcomes WHERE seq <= "
          "(SELECT max(seq) FROM outcomes) - ?)" },
        { offsetof(sx__store, trim_outs),
          "DELETE FROM outcomes WHERE seq <= (SELECT max(seq) FROM outcomes) "
          "- ?" },
    };
    for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; i++) {
        sqlite3_stmt **st = (sqlite3_stmt **)((char *)s + stmts[i].off);
        int rc = sqlite3_prepare_v3(s->db, stmts[i].sql, -1,
                                    SQLITE_PREPARE_PERSISTENT, st, NULL);
        if (rc != SQLITE_OK)
            return rc;
    }
    return SQLITE_OK;
}

static void finalize_all(sx__store *s)
{
    sqlite3_stmt *all[] = { s->key_ins, s->key_get,   s->job_ins,  s->job_del,
                            s->out_ins, s->trim_keys, s->trim_outs };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sqlite3_finalize(all[i]); /* NULL is a no-op */
}

/* Runs st once (bindings already made) and resets it. */
static int run(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
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
        return run(s->job_ins);
    }
    sqlite3_bind_int64(s->job_del, 1, (sqlite3_int64)r->id);
    if ((rc = run(s->job_del)) != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(s->out_ins, 1, (sqlite3_int64)r->id);
    sqlite3_bind_int(s->out_ins, 2, r->error);
    if (r->msg != NULL)
        sqlite3_bind_text(s->out_ins, 3, r->msg, -1, SQLITE_STATIC);
    sqlite3_bind_blob(s->out_ins, 4, r->blob != NULL ? r->blob : (void *)"",
                      (int)r->blob_len, SQLITE_STATIC);
    sqlite3_bind_int64(s->out_ins, 5, (sqlite3_int64)r->steps);
    sqlite3_bind_int64(s->out_ins, 6, r->attempt);
    return run(s->out_ins);
}

/* Commits batch (a list) in one transaction and answers each record. */
static void commit_batch(sx__store *s, rec *batch)
{
    bool finishes = false;
    int rc = exec(s->db, "BEGIN IMMEDIATE");
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
        rc = exec(s->db, "COMMIT");
    int code = code_of(rc);
    if (rc != SQLITE_OK)
        exec(s->db, "ROLLBACK"); /* nothing of the batch stays */
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
    while (batch != NULL) {
        rec *r = batch;
        batch = r->next;
        if (r->done != NULL)
            r->done(r->user, r->rc, r->id);
        free(r);
    }
}

static void *writer_main(void *arg)
{
    sx__store *s = arg;
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
    return NULL;
}

int sx__store_open(const sx__store_config *cfg, sx__store **out, char *msg,
                   size_t cap)
{
    if (msg != NULL && cap > 0)
        msg[0] = '\0';
    if (cfg == NULL || cfg->dir == NULL || out == NULL)
        return fail(msg, cap, SX_EINVAL, "store: no directory", NULL);
    char path[4200];
    int rc = make_dir(cfg->dir);
    if (rc != 0) {
        snprintf(msg, cap, "store: cannot create the state directory %s: %s",
                 cfg->dir, strerror(-rc));
        return rc == -EACCES || rc == -EPERM ? -EROFS : rc;
    }
    sx__store *s =
        SX__FAULT(SX__FAULT_STORE_OPEN) ? NULL : calloc(1, sizeof(*s));
    if (s == NULL)
        return fail(msg, cap, SX_ENOMEM, "store: out of memory", NULL);
    s->lock_fd = -1;
    s->keep = cfg->keep_outcomes != 0 ? cfg->keep_outcomes : 10000;
    s->tail = &s->head;

    snprintf(path, sizeof path, "%s/lock", cfg->dir);
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd < 0) {
        rc = errno == EACCES || errno == EPERM || errno == EROFS ? -EROFS
                                                                 : -errno;
        snprintf(msg, cap, "store: cannot open %s: %s", path, strerror(errno));
        goto out;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        snprintf(msg, cap,
                 "store: %s is in use by another process (its lock %s is "
                 "held): one daemon per state directory",
                 cfg->dir, path);
        goto out;
    }
    snprintf(path, sizeof path, "%s/stepx.db", cfg->dir);
    if (access(path, F_OK) == 0 && access(path, W_OK) != 0) {
        rc = -EROFS;
        snprintf(msg, cap, "store: %s cannot be written", path);
        goto out;
    }
    rc = sqlite3_open_v2(
        path, &s->db,
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        rc = fail(msg, cap, code_of(rc), "store: cannot open the database",
                  s->db);
        goto out;
    }
    if (sqlite3_db_readonly(s->db, "main") == 1) {
        rc = fail(msg, cap, -EROFS, "store: the database is read-only", NULL);
        goto out;
    }
    sqlite3_busy_timeout(s->db, 5000);
    int64_t app = 0, version = 0, tables = 0;
    if ((rc = query_int(s->db, "PRAGMA application_id", &app)) != SQLITE_OK ||
        (rc = query_int(s->db, "PRAGMA user_version", &version)) != SQLITE_OK ||
        (rc = query_int(s->db, "SELECT count(*) FROM sqlite_schema",
                        &tables)) != SQLITE_OK) {
        rc = fail(msg, cap, code_of(rc),
                  "store: the database cannot be read (damaged, or not a "
                  "database)",
                  s->db);
        goto out;
    }
    if (tables > 0 && app != APP_ID) {
        rc = fail(msg, cap, SX_ECORRUPT,
                  "store: stepx.db is not a stepx database (another "
                  "program's SQLite file?)",
                  NULL);
        goto out;
    }
    if (version > SX__STORE_SCHEMA) {
        snprintf(msg, cap,
                 "store: the database has schema %lld, written by a newer "
                 "stepx; this one reads up to %d (nothing was changed)",
                 (long long)version, SX__STORE_SCHEMA);
        rc = SX_EVERSION;
        goto out;
    }
    if (tables > 0) {
        sqlite3_stmt *st;
        rc = sqlite3_prepare_v2(s->db, "PRAGMA quick_check(1)", -1, &st, NULL);
        if (rc == SQLITE_OK) {
            rc = sqlite3_step(st);
            const unsigned char *t = sqlite3_column_text(st, 0);
            bool ok = rc == SQLITE_ROW && t != NULL &&
                      strcmp((const char *)t, "ok") == 0;
            if (!ok && rc == SQLITE_ROW && t != NULL)
                snprintf(msg, cap, "store: the database is damaged: %s",
                         (const char *)t);
            sqlite3_finalize(st);
            rc = ok ? SQLITE_OK : rc == SQLITE_ROW ? SQLITE_CORRUPT : rc;
        }
        if (rc != SQLITE_OK) {
            if (msg == NULL || msg[0] == '\0')
                fail(msg, cap, 0, "store: the database is damaged", s->db);
            rc = code_of(rc);
            goto out;
        }
    }
    if ((rc = exec(s->db, "PRAGMA journal_mode = WAL")) != SQLITE_OK ||
        (rc = exec(s->db, cfg->sync_full ? "PRAGMA synchronous = FULL"
                                         : "PRAGMA synchronous = NORMAL")) !=
            SQLITE_OK) {
        rc =
            fail(msg, cap, code_of(rc), "store: cannot set the journal", s->db);
        goto out;
    }
    if (cfg->max_bytes != 0) {
        int64_t page = 4096;
        query_int(s->db, "PRAGMA page_size", &page);
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA max_page_count = %llu",
                 (unsigned long long)(cfg->max_bytes / (uint64_t)page));
        exec(s->db, sql);
    }
    if ((rc = migrate(s->db, version)) != SQLITE_OK) {
        rc = fail(msg, cap, code_of(rc),
                  "store: cannot create or migrate the schema (nothing was "
                  "changed)",
                  s->db);
        goto out;
    }
    if ((rc = prepare(s)) != SQLITE_OK) {
        rc = fail(msg, cap, code_of(rc), "store: cannot prepare statements",
                  s->db);
        goto out;
    }
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        rc = fail(msg, cap, SX_ENOMEM, "store: out of memory", NULL);
        goto out;
    }
    if (pthread_cond_init(&s->cv, NULL) != 0) {
        pthread_mutex_destroy(&s->mu);
        rc = fail(msg, cap, SX_ENOMEM, "store: out of memory", NULL);
        goto out;
    }
    s->lazy = true;
    *out = s;
    return 0;
out:
    finalize_all(s);
    if (s->db != NULL)
        sqlite3_close(s->db);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* drops the flock */
    free(s);
    return rc;
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
        if (pthread_create(&s->writer, NULL, writer_main, s) != 0) {
            pthread_mutex_unlock(&s->mu);
            free(r);
            return SX_ENOMEM;
        }
        s->lazy = false;
    }
    *s->tail = r;
    s->tail = &r->next;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* A record with room for n bytes of strings and blob after it. */
static rec *rec_new(size_t n)
{
    return SX__FAULT(SX__FAULT_STORE_REC) ? NULL : calloc(1, sizeof(rec) + n);
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
        job->input.len > INT32_MAX || job->key_len > INT32_MAX)
        return SX_EINVAL;
    size_t tl = strlen(job->type), ml = strlen(job->method);
    rec *r = rec_new(job->key_len + tl + ml + 2 + job->input.len);
    if (r == NULL)
        return SX_ENOMEM;
    char *p = (char *)(r + 1);
    r->kind = REC_JOB;
    r->done = done;
    r->user = user;
    r->id = job->id;
    r->attempt = job->attempt;
    if (job->key != NULL) {
        r->key = put(&p, job->key, job->key_len, false);
        r->key_len = job->key_len;
    }
    r->type = put(&p, job->type, tl, true);
    r->method = put(&p, job->method, ml, true);
    r->blob = (const uint8_t *)put(&p, job->input.data, job->input.len, false);
    r->blob_len = job->input.len;
    return enqueue(s, r);
}

int sx__store_finish(sx__store *s, uint64_t id, int error, const char *msg,
                     sx_payload value, uint64_t steps, uint32_t attempts,
                     sx__store_done_fn done, void *user)
{
    if (s == NULL || (value.len > 0 && value.data == NULL) ||
        value.len > INT32_MAX)
        return SX_EINVAL;
    size_t ml = msg != NULL ? strlen(msg) : 0;
    rec *r = rec_new(ml + 1 + value.len);
    if (r == NULL)
        return SX_ENOMEM;
    char *p = (char *)(r + 1);
    r->kind = REC_FINISH;
    r->done = done;
    r->user = user;
    r->id = id;
    r->error = error;
    r->steps = steps;
    r->attempt = attempts;
    if (msg != NULL)
        r->msg = put(&p, msg, ml, true);
    r->blob = (const uint8_t *)put(&p, value.data, value.len, false);
    r->blob_len = value.len;
    return enqueue(s, r);
}

int sx__store_recover(sx__store *s,
                      int (*job)(void *user, const sx__store_job *j),
                      int (*outcome)(void *user, const sx__store_outcome *o),
                      void *user)
{
    if (s == NULL)
        return SX_EINVAL;
    pthread_mutex_lock(&s->mu);
    bool before = s->lazy; /* no record queued yet */
    pthread_mutex_unlock(&s->mu);
    if (!before)
        return SX_ESTATE;
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(
        s->db,
        "SELECT j.id, j.type, j.method, j.input, j.attempt, k.key FROM jobs j "
        "LEFT JOIN keys k ON k.id = j.id ORDER BY j.id",
        -1, &st, NULL);
    if (rc != SQLITE_OK)
        return code_of(rc);
    int cb = 0;
    while (cb == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (job == NULL)
            continue;
        sx__store_job j = {
            .id = (uint64_t)sqlite3_column_int64(st, 0),
            .type = (const char *)sqlite3_column_text(st, 1),
            .method = (const char *)sqlite3_column_text(st, 2),
            .input = { sqlite3_column_blob(st, 3),
                       (size_t)sqlite3_column_bytes(st, 3) },
            .attempt = (uint32_t)sqlite3_column_int64(st, 4),
            .key = sqlite3_column_blob(st, 5),
            .key_len = (size_t)sqlite3_column_bytes(st, 5),
        };
        if (j.type == NULL || j.method == NULL ||
            (j.input.len > 0 && j.input.data == NULL)) {
            /* NOT NULL columns read as NULL: memory, or a damaged file. */
            cb = sqlite3_errcode(s->db) == SQLITE_NOMEM ? SX_ENOMEM
                                                        : SX_ECORRUPT;
            break;
        }
        cb = job(user, &j);
    }
    sqlite3_finalize(st);
    if (cb != 0)
        return cb;
    if (rc != SQLITE_DONE)
        return code_of(rc);
    rc = sqlite3_prepare_v2(s->db,
                            "SELECT id, error, msg, value, steps, attempts "
                            "FROM outcomes ORDER BY seq",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return code_of(rc);
    while (cb == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (outcome == NULL)
            continue;
        sx__store_outcome o = {
            .id = (uint64_t)sqlite3_column_int64(st, 0),
            .error = sqlite3_column_int(st, 1),
            .msg = (const char *)sqlite3_column_text(st, 2),
            .value = { sqlite3_column_blob(st, 3),
                       (size_t)sqlite3_column_bytes(st, 3) },
            .steps = (uint64_t)sqlite3_column_int64(st, 4),
            .attempts = (uint32_t)sqlite3_column_int64(st, 5),
        };
        cb = outcome(user, &o);
    }
    sqlite3_finalize(st);
    if (cb != 0)
        return cb;
    return rc == SQLITE_DONE ? 0 : code_of(rc);
}

void sx__store_stats_get(sx__store *s, sx__store_stats *out)
{
    /* relaxed: figures, each a recent value. */
    out->commits = atomic_load_explicit(&s->commits, memory_order_relaxed);
    out->records = atomic_load_explicit(&s->records, memory_order_relaxed);
    out->failed = atomic_load_explicit(&s->failed, memory_order_relaxed);
}

void sx__store_close(sx__store *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->closing = true;
    bool started = !s->lazy;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (started)
        pthread_join(s->writer, NULL); /* it commits what is queued first */
    finalize_all(s);
    sqlite3_close(s->db);
    close(s->lock_fd);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

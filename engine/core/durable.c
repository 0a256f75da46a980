/* engine/core/durable.c — the engine's side of its state store
 * (engine/store/store.h): opening it at start and running again the jobs
 * it holds, storing an outcome before wait can see it, and closing it
 * (a job is stored before submit answers in engine/core/submit.c).
 * docs/DURABILITY.md says what this guarantees.
 *
 * A stored job keeps its PID across restarts: the host part is the
 * store's (kept in its meta table from the first run on), and a job read
 * back takes back its own slot and generation (sx__ptable_reserve before
 * the workers start, sx__ptable_claim when it is spawned again). Each run
 * takes its own range of generations for new processes (ptable.c,
 * "Generations"), recorded before any PID is handed out, so that no PID
 * an earlier run handed out names a process of this one.
 *
 * Threads: open and resume [start's caller]; close [stop's caller];
 * sx__job_finish [the finishing worker]; the store's answer to a finish
 * (finish_done) [the store's answering thread].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/core/core.h"
#include "engine/core/job.h"
#include "engine/core/live.h"
#include "engine/store/store.h"

/* A job read back from the store, until it is spawned again. */
typedef struct sx__rjob {
    uint64_t id;
    uint32_t attempt;
    bool dup;        /* another stored job has the same slot (see open) */
    bool has_policy; /* its own restart policy was stored */
    sx_restart_policy policy;
    int64_t restart_at; /* waiting for a restart: when (wall-clock ms) */
    char *type, *method;
    uint8_t *input;
    size_t input_len;
    uint8_t *restarts; /* its restart times, as stored (NULL: none) */
    size_t restarts_len;
    /* Its last checkpoint (checkpointed: one was stored). */
    bool checkpointed;
    uint64_t steps;
    int want;
    uint8_t *state, *inflight;
    size_t state_len, inflight_len;
    sx__proc *p; /* resumed from it: held until its messages are in */
} sx__rjob;

/* A stored message read back, until it is delivered. */
typedef struct sx__rmsg {
    struct sx__rmsg *next;
    sx__store_msg m; /* its bytes after the struct */
} sx__rmsg;

const char *sx_engine_state_error(const sx_engine *e)
{
    return e != NULL ? e->state_err : "";
}

/* ---- open and recovery ----------------------------------------------------
 */

typedef struct {
    sx_engine *e;
    sx__rjob *jobs;
    size_t n, cap;
    bool used[SX__GEN_RANGES]; /* ranges holding a stored PID's generation */
} recovery;

static void mark_range(recovery *r, uint64_t id)
{
    uint32_t g = (uint32_t)(id >> 32);
    if (g >= 1 && g <= SX__GEN_RANGES * SX__GEN_RANGE)
        r->used[(g - 1) / SX__GEN_RANGE] = true;
}

static char *dup_bytes(const void *p, size_t n, bool nul)
{
    char *d = malloc(n + (nul ? 1 : 0) + (n == 0 && !nul ? 1 : 0));
    if (d == NULL)
        return NULL;
    if (n > 0)
        memcpy(d, p, n);
    if (nul)
        d[n] = '\0';
    return d;
}

static void rjob_free(sx__rjob *j)
{
    free(j->state);
    free(j->inflight);
    free(j->type);
    free(j->method);
    free(j->input);
    free(j->restarts);
}

static int on_job(void *user, const sx__store_job *j)
{
    recovery *r = user;
    if (r->n == r->cap) {
        size_t cap = r->cap != 0 ? r->cap * 2 : 64;
        sx__rjob *jobs = realloc(r->jobs, cap * sizeof(*jobs));
        if (jobs == NULL)
            return SX_ENOMEM;
        r->jobs = jobs;
        r->cap = cap;
    }
    sx__rjob *x = &r->jobs[r->n];
    memset(x, 0, sizeof(*x));
    x->id = j->id;
    x->attempt = j->attempt;
    x->type = dup_bytes(j->type, strlen(j->type), true);
    x->method = dup_bytes(j->method, strlen(j->method), true);
    x->input = (uint8_t *)dup_bytes(j->input.data, j->input.len, false);
    x->input_len = j->input.len;
    x->has_policy =
        j->policy.len > 0 && sx__policy_unpack(j->policy, &x->policy) == 0;
    x->restart_at = x->has_policy ? j->restart_at : 0;
    if (j->restarts.len > 0) {
        x->restarts =
            (uint8_t *)dup_bytes(j->restarts.data, j->restarts.len, false);
        x->restarts_len = x->restarts != NULL ? j->restarts.len : 0;
    }
    if (j->checkpointed) {
        x->checkpointed = true;
        x->steps = j->steps;
        x->want = j->want;
        x->state = (uint8_t *)dup_bytes(j->state.data, j->state.len, false);
        x->state_len = j->state.len;
        x->inflight =
            (uint8_t *)dup_bytes(j->inflight.data, j->inflight.len, false);
        x->inflight_len = j->inflight.len;
        if (x->state == NULL || x->inflight == NULL) {
            rjob_free(x);
            return SX_ENOMEM;
        }
    }
    if (x->type == NULL || x->method == NULL || x->input == NULL) {
        rjob_free(x);
        return SX_ENOMEM;
    }
    r->n++;
    mark_range(r, j->id);
    return 0;
}

static int on_msg(void *user, const sx__store_msg *m)
{
    sx_engine *e = user;
    sx__rmsg *r = malloc(sizeof(*r) + m->topic_len + m->data.len + 1);
    if (r == NULL)
        return SX_ENOMEM;
    char *b = (char *)(r + 1);
    memcpy(b, m->topic, m->topic_len);
    if (m->data.len > 0)
        memcpy(b + m->topic_len, m->data.data, m->data.len);
    r->m = *m;
    r->m.topic = b;
    r->m.data.data = m->data.len > 0 ? (uint8_t *)b + m->topic_len : NULL;
    r->next = NULL;
    *e->rmsgs_tail = r;
    e->rmsgs_tail = &r->next;
    return 0;
}

static void rmsgs_free(sx_engine *e)
{
    while (e->rmsgs != NULL) {
        sx__rmsg *r = e->rmsgs;
        e->rmsgs = r->next;
        free(r);
    }
    e->rmsgs_tail = &e->rmsgs;
}

static int on_outcome(void *user, const sx__store_outcome *o)
{
    recovery *r = user;
    sx__outcomes_put_cold(r->e, NULL, NULL, o->id, o->error, o->msg, o->value,
                          o->steps, o->attempts);
    mark_range(r, o->id);
    return 0;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int fail(sx_engine *e, int rc, const char *what)
{
    if (e->state_err[0] == '\0')
        snprintf(e->state_err, sizeof e->state_err, "store %s: %s: %s",
                 e->cfg.state_dir, what, sx_strerror(rc));
    return rc;
}

/* The host part of PIDs: the store's, or this engine's on a new store. */
static int take_host(sx_engine *e)
{
    int64_t host = 0;
    int rc = sx__store_meta_get(e->store, "host", &host);
    if (rc == SX_ENOTFOUND)
        return sx__store_meta_set(e->store, "host", e->cfg.host);
    if (rc != 0)
        return rc;
    if (host < 1 || host > (int64_t)UINT32_MAX)
        return SX_ECORRUPT;
    e->cfg.host = (uint32_t)host;
    return 0;
}

/* This run's generation range: the one after the last run's that holds no
 * stored PID's generation, recorded before any PID is handed out. */
static int take_range(sx_engine *e, const recovery *r)
{
    int64_t last = -1;
    int rc = sx__store_meta_get(e->store, "gen_range", &last);
    if (rc != 0 && rc != SX_ENOTFOUND)
        return rc;
    if (last < -1 || last >= (int64_t)SX__GEN_RANGES)
        return SX_ECORRUPT;
    for (uint32_t i = 1; i <= SX__GEN_RANGES; i++) {
        uint32_t c = (uint32_t)((last + (int64_t)i) % SX__GEN_RANGES);
        if (r->used[c])
            continue;
        if ((rc = sx__store_meta_set(e->store, "gen_range", c)) != 0)
            return rc;
        e->gen_lo = 1 + c * SX__GEN_RANGE;
        e->gen_span = SX__GEN_RANGE;
        return 0;
    }
    snprintf(e->state_err, sizeof e->state_err,
             "store %s: every one of the %u generation ranges holds a "
             "stored job or outcome; finish or drop old jobs first",
             e->cfg.state_dir, SX__GEN_RANGES);
    return SX_ELIMIT;
}

/* Reserves the slots of the jobs read back; a second job on a slot (its
 * first one's finish was never stored) is marked dup and runs nowhere. */
static int reserve(sx_engine *e, recovery *r)
{
    if (r->n == 0)
        return 0;
    uint32_t *idx = malloc(r->n * sizeof(*idx));
    if (idx == NULL)
        return SX_ENOMEM;
    for (size_t i = 0; i < r->n; i++)
        idx[i] = (uint32_t)r->jobs[i].id;
    qsort(idx, r->n, sizeof(*idx), cmp_u32);
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        if (n == 0 || idx[n - 1] != idx[i])
            idx[n++] = idx[i];
    if (n != r->n) {
        /* Jobs come in id order; the last of a slot (the newest
         * generation within a run) keeps it. Rare: see above. */
        for (size_t i = 0; i < r->n; i++)
            for (size_t k = i + 1; k < r->n; k++)
                if ((uint32_t)r->jobs[k].id == (uint32_t)r->jobs[i].id) {
                    r->jobs[i].dup = true;
                    break;
                }
    }
    int rc = sx__ptable_reserve(e, idx, n);
    free(idx);
    if (rc == SX_ELIMIT)
        snprintf(e->state_err, sizeof e->state_err,
                 "store %s: the %zu stored jobs need slots past max_slots "
                 "(%zu)",
                 e->cfg.state_dir, r->n, e->cfg.max_slots);
    return rc;
}

int sx__durable_open(sx_engine *e)
{
    e->state_err[0] = '\0';
    if (e->cfg.state_dir == NULL)
        return 0;
    sx__store_config sc = {
        .dir = e->cfg.state_dir,
        .sync_full = e->cfg.state_sync_full,
        .keep_outcomes = e->cfg.keep_outcomes,
        .max_bytes = e->cfg.state_max_bytes,
    };
    int rc = sx__store_open(&sc, &e->store, e->state_err, sizeof e->state_err);
    if (rc != 0) {
        e->store = NULL;
        return rc;
    }
    recovery r;
    memset(&r, 0, sizeof r);
    r.e = e;
    if ((rc = take_host(e)) != 0) {
        fail(e, rc, "cannot read or write the PIDs' host part");
        goto out;
    }
    if ((rc = sx__store_recover(e->store, on_job, on_outcome, &r)) != 0) {
        fail(e, rc, "cannot read the stored jobs back");
        goto out;
    }
    e->rmsgs = NULL;
    e->rmsgs_tail = &e->rmsgs;
    if ((rc = sx__store_messages(e->store, on_msg, e)) != 0) {
        fail(e, rc, "cannot read the stored messages back");
        goto out;
    }
    if ((rc = take_range(e, &r)) != 0) {
        fail(e, rc, "cannot record this run's generation range");
        goto out;
    }
    if ((rc = reserve(e, &r)) != 0) {
        fail(e, rc, "cannot reserve the stored jobs' slots");
        goto out;
    }
    e->recovered = r.jobs;
    e->n_recovered = r.n;
    e->jobs = true;
    return 0;
out:
    rmsgs_free(e);
    for (size_t i = 0; i < r.n; i++)
        rjob_free(&r.jobs[i]);
    free(r.jobs);
    sx__store_close(e->store);
    e->store = NULL;
    return rc;
}

/* A job read back that cannot run: its outcome, stored and kept. */
static void finish_unrun(sx_engine *e, const sx__rjob *j, int rc,
                         const char *msg)
{
    sx_payload none = { NULL, 0 };
    sx__store_finish(e->store, j->id, rc, msg, none, 0, j->attempt, NULL, NULL);
    sx__outcomes_put_cold(e, NULL, NULL, j->id, rc, msg, none, 0, j->attempt);
}

/* Whether j resumes from its checkpoint: one was stored and its type is
 * (still) checkpointed. A checkpoint that does not fit its type is
 * refused with a message. */
static int resumes(sx_engine *e, const sx__rjob *j, char *msg, size_t cap)
{
    const sx_process_type *t = sx__type_find(e, j->type);
    if (!j->checkpointed || t == NULL || !(t->flags & SX_TYPE_CHECKPOINTED))
        return 0;
    if (j->state_len != t->state_size) {
        snprintf(msg, cap,
                 "not resumed: its checkpoint holds %zu bytes of state, its "
                 "type \"%.64s\" has %zu",
                 j->state_len, t->name, t->state_size);
        return SX_ECORRUPT;
    }
    return 1;
}

void sx__durable_resume(sx_engine *e)
{
    /* Every job read back is spawned held, then the messages stored for
     * checkpointed ones are delivered (every addressee is in the table by
     * then, and nothing has run yet, so they are ahead of anything sent
     * from now on), then they are all queued. */
    sx__proc **held =
        e->n_recovered > 0 ? calloc(e->n_recovered, sizeof(*held)) : NULL;
    size_t n_held = 0;
    for (size_t i = 0; i < e->n_recovered; i++) {
        sx__rjob *j = &e->recovered[i];
        char msg[160];
        int ck = j->dup ? 0 : resumes(e, j, msg, sizeof msg);
        if (ck < 0) {
            finish_unrun(e, j, SX_EFAILED, msg);
            rjob_free(j);
            continue;
        }
        if (ck == 1 && held == NULL) {
            finish_unrun(e, j, SX_ENOMEM, "not resumed: out of memory");
            rjob_free(j);
            continue;
        }
        sx_payload *in = NULL;
        size_t n = 0;
        int rc = j->dup ? SX_EFAILED
                        : sx__inputs_split(
                              (sx_payload){ j->input, j->input_len }, &in, &n);
        /* Its own policy as stored, else its type's. */
        const sx_restart_policy *pol =
            j->has_policy ? &j->policy : sx__type_restart(e, j->type);
        bool waiting = rc == 0 && pol != NULL && j->restart_at > 0;
        sx__job *job = rc == 0
                           ? sx__job_new(j->id, pol, j->method,
                                         (sx_payload){ j->input, j->input_len })
                           : NULL;
        if (rc == 0 && job == NULL)
            rc = SX_ENOMEM;
        sx__proc *p = NULL;
        if (rc == 0)
            rc = waiting ? sx__spawn_waiting(e, j->type, j->method, j->id, &p)
                 : ck == 1
                     ? sx__spawn_restored(e, j->type, j->method, j->id, &p)
                     : sx__spawn_held(e, j->type, j->method, in, n, j->id, &p,
                                      NULL);
        free(in);
        if (rc == 0) {
            job->attempt = j->attempt;
            sx__restarts_unpack(job,
                                (sx_payload){ j->restarts, j->restarts_len });
            sx__job_attach(e, p, job, true);
            if (ck == 1 && !waiting) {
                int r2 = sx__ckpt_restore(
                    e, p, j->steps, j->want,
                    (sx_payload){ j->state, j->state_len },
                    (sx_payload){ j->inflight, j->inflight_len }, msg,
                    sizeof msg);
                if (r2 != 0) {
                    sx__spawn_drop(e, p, r2, msg);
                    finish_unrun(e, j, r2 == SX_ECORRUPT ? SX_EFAILED : r2,
                                 msg);
                } else {
                    held[n_held++] = p;
                }
            } else if (waiting) {
                /* Its backoff goes on: due when it was, at once if that
                 * passed while the engine was down. */
                int64_t left = j->restart_at -
                               ((int64_t)sx__mono_ms() + sx__wall_offset_ms());
                job->due_ms = sx__mono_ms() + (left > 0 ? (uint64_t)left : 0);
                sx__sup_add(e, job);
            } else if (held != NULL) {
                held[n_held++] = p; /* queued below */
            } else {
                sx__enqueue_new(e, p); /* out of memory for the list */
            }
        } else {
            sx__job_free(job);
            if (j->dup)
                snprintf(msg, sizeof msg,
                         "not run again: another stored job has its slot");
            else if (rc == SX_EUNKNOWN_TYPE)
                snprintf(msg, sizeof msg,
                         "not run again: no process type \"%.64s\" is "
                         "registered",
                         j->type);
            else if (rc == SX_ECORRUPT)
                snprintf(msg, sizeof msg,
                         "not run again: its stored input is not a msgpack "
                         "array");
            else
                snprintf(msg, sizeof msg, "not run again: %s", sx_strerror(rc));
            finish_unrun(e, j, rc == SX_ECORRUPT ? SX_EFAILED : rc, msg);
        }
        rjob_free(j);
    }
    free(e->recovered);
    e->recovered = NULL;
    e->n_recovered = 0;
    /* The stored messages, in seq order (one to a job that is gone is
     * dropped: its finish deletes the rest), then the resumed jobs'
     * commands in flight, and they run. */
    for (sx__rmsg *m = e->rmsgs; m != NULL; m = m->next)
        sx__ckpt_deliver_stored(e, &m->m);
    rmsgs_free(e);
    for (size_t i = 0; i < n_held; i++) {
        sx__ckpt_rearm(e, held[i]);  /* a resumed one's commands in flight */
        sx__enqueue_new(e, held[i]); /* may run and finish from here on */
    }
    free(held);
}

void sx__durable_free(sx_engine *e)
{
    sx__store_close(e->store); /* NULL is a no-op */
    e->store = NULL;
}

void sx__durable_close(sx_engine *e)
{
    if (e->store == NULL)
        return;
    /* Answers what is queued first. The store itself stays until
     * sx_engine_free (sx__durable_free): threads that look at e->store
     * (a late submit, the figures) never find it freed. */
    sx__store_shutdown(e->store);
    for (size_t i = 0; i < e->n_recovered; i++)
        rjob_free(&e->recovered[i]);
    free(e->recovered);
    e->recovered = NULL;
    e->n_recovered = 0;
    rmsgs_free(e);
}

/* ---- finish ----------------------------------------------------------------
 */

typedef struct {
    sx_engine *e;
    sx__proc *p;
    sx_pid pid;
    int error;
    uint32_t attempts;
    uint64_t steps;
    char *msg;             /* in the same allocation, or NULL */
    sx_payload value;      /* in the same allocation */
    sx__ckpt_sends *sends; /* a checkpointed job's last messages, or NULL */
} pending_finish;

/* [the store's thread, or the finishing worker when the store could not
 * take it] The outcome is stored: it becomes visible. An outcome the
 * store failed to write is still given to waiters; the job stays stored
 * and runs again at the next start (docs/DURABILITY.md). */
static void finish_done(void *user, int rc, uint64_t id)
{
    (void)id;
    pending_finish *f = user;
    /* Before the outcome is visible: whoever waits for the outcome and
     * then for a message the job sent last finds it there. Stored with
     * the outcome (rc 0): with their seqs. */
    sx__ckpt_final_send(f->e, f->pid, f->sends, rc == 0);
    sx__finish_tail(f->e, f->p, f->pid, f->error, f->msg, f->value, f->steps,
                    f->attempts);
    free(f);
}

/* The outcome of job j (p): stored first when j is, then visible. A stored
 * job that the engine's stop ends with an error is not finished: it stays
 * stored and runs again at the next start; its watchers learn that. */
static void job_outcome(sx_engine *e, sx__proc *p, sx__job *j, sx_pid pid,
                        int error, const char *msg, sx_payload value,
                        uint64_t steps, sx__ckpt_sends *sends,
                        sx__store_msg *msgs, size_t n_msgs)
{
    uint32_t attempts = j->attempt;
    /* relaxed: stop set it long before it cancelled this process; a
     * failure just as stop begins counts either way. */
    if (j->stored && error != 0 &&
        atomic_load_explicit(&e->stopping, memory_order_relaxed)) {
        /* release: look-ups of the job's PID miss from here on. */
        atomic_store_explicit(&sx__ptable_pext(e, p)->alias_gen, 0,
                              memory_order_release);
        /* Its last step runs again at the next start, and sends again. */
        sx__ckpt_final_drop(sends);
        sx__outcomes_retire(e, sx__current_worker(e), p, pid.id);
        if (p->sleeps > 0) /* release: as in finish_tail (proc.c) */
            atomic_fetch_add_explicit(&e->tm_dead, p->sleeps,
                                      memory_order_release);
        sx__watchers_fire(e, p, pid, SX_ESTOPPING,
                          "the engine stopped; the job runs again at its next "
                          "start",
                          (sx_payload){ NULL, 0 }, steps, attempts);
        sx__proc_release(e, p);
        return;
    }
    if (!j->stored) {
        sx__ckpt_final_send(e, pid, sends, false);
        sx__finish_tail(e, p, pid, error, msg, value, steps, attempts);
        return;
    }
    size_t ml = msg != NULL ? strlen(msg) + 1 : 0;
    pending_finish *f = malloc(sizeof(*f) + ml + value.len);
    if (f == NULL) {
        /* Not stored: waiters still get it (as for a failed write). */
        sx__ckpt_final_send(e, pid, sends, false);
        sx__finish_tail(e, p, pid, error, msg, value, steps, attempts);
        return;
    }
    *f = (pending_finish){ .e = e,
                           .p = p,
                           .pid = pid,
                           .error = error,
                           .attempts = attempts,
                           .steps = steps,
                           .sends = sends };
    uint8_t *b = (uint8_t *)(f + 1);
    if (value.len > 0)
        memcpy(b, value.data, value.len);
    f->value = (sx_payload){ value.len > 0 ? b : NULL, value.len };
    if (ml > 0) {
        f->msg = (char *)b + value.len;
        memcpy(f->msg, msg, ml);
    }
    if (sx__store_finish_msgs(e->store, pid.id, error, msg, value, steps,
                              attempts, msgs, n_msgs, finish_done, f) != 0)
        finish_done(f, SX_ENOMEM, pid.id);
}

void sx__job_finish(sx_engine *e, sx__proc *p, sx_pid pid, int error,
                    const char *msg, sx_payload value, uint64_t steps)
{
    /* relaxed: this thread's own, or published by the queueing. */
    sx__job *j =
        atomic_load_explicit(&sx__ptable_pext(e, p)->job, memory_order_relaxed);
    char buf[256];
    sx__store_msg *msgs;
    size_t n_msgs;
    sx__ckpt_sends *sends = sx__ckpt_final_take(e, p, &msgs, &n_msgs);
    /* Not once stop has begun (relaxed: as in job_outcome). */
    if (!atomic_load_explicit(&e->stopping, memory_order_relaxed) &&
        sx__job_restart_maybe(e, p, j, &error, &msg, buf, sizeof buf)) {
        /* Still live: the supervisor runs it again from init. Its last
         * messages go as a step's do (not stored); its scoped children
         * get this attempt's end, as they would the job's. */
        sx__ckpt_final_send(e, pid, sends, false);
        sx__scope_end(e, p, error);
        return;
    }
    sx__live_died(e, sx__current_worker(e));
    job_outcome(e, p, j, pid, error, msg, value, steps, sends, msgs, n_msgs);
}

void sx__job_end(sx_engine *e, sx__proc *p, int error, const char *msg)
{
    /* relaxed: the caller has the job (supervise.c). */
    sx__job *j =
        atomic_load_explicit(&sx__ptable_pext(e, p)->job, memory_order_relaxed);
    sx_pid pid = { e->cfg.node, e->cfg.host, j->id };
    /* relaxed: a figure. */
    uint64_t steps = atomic_load_explicit(&p->steps, memory_order_relaxed);
    /* A cancel of a job waiting for its restart is counted as a cancelled
     * end (engine.h); its attempt's own end was counted when it came, and
     * other ends here (a restart that could not be made) follow one.
     * relaxed: a figure. */
    if (error == SX_ECANCELLED)
        atomic_fetch_add_explicit(&e->cancelled, 1, memory_order_relaxed);
    sx__live_died(e, sx__current_worker(e));
    job_outcome(e, p, j, pid, error, msg, (sx_payload){ NULL, 0 }, steps, NULL,
                NULL, 0);
}

/* engine/core/submit.c — submitting a job: a process the engine keeps a
 * record of, because the engine has a state store (the job is stored
 * before submit answers; docs/DURABILITY.md) or the job has a restart
 * policy (engine/core/supervise.c). sx_engine_submit_async, the blocking
 * submit built on it, and making a process a job (sx__job_attach). The
 * store's side at start, at finish and at stop is engine/core/durable.c.
 *
 * Threads: submit [any thread]; submit_done [the store's answering
 * thread].
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"
#include "engine/core/job.h"
#include "engine/store/store.h"

/* What the store's failure codes mean for a request. */
const char *sx__storage_msg(int rc)
{
    switch (rc) {
    case -ENOSPC:
        return "no space left for the state store (its disk, or "
               "state_max_bytes, is full); nothing was stored";
    case SX_ECORRUPT:
        return "the state store's database is damaged; nothing was stored";
    case -EROFS:
        return "the state store cannot be written (read-only); nothing was "
               "stored";
    case -EBUSY:
        return "the state store's database is locked by another program; "
               "nothing was stored";
    case SX_ENOMEM:
        return "out of memory in the state store; nothing was stored";
    default:
        return "the state store failed to write (an I/O error); nothing was "
               "stored";
    }
}

void sx__job_attach(sx_engine *e, sx__proc *p, sx__job *j, bool stored)
{
    j->p = p;
    j->stored = stored;
    p->job = 1;
    /* release: pairs with the acquire loads of cancel, terminate and the
     * listings, which then see the job's fields. */
    atomic_store_explicit(&sx__ptable_pext(e, p)->job, j, memory_order_release);
    /* relaxed: see had_jobs (core.h). */
    atomic_store_explicit(&e->had_jobs, true, memory_order_relaxed);
}

typedef struct {
    sx_engine *e;
    sx__proc *p; /* held until the store answers */
    sx__job *job;
    sx_pid pid;
    sx_submit_fn fn;
    void *user;
} pending_submit;

/* [the store's thread] The job is stored (or not): run it, or drop it. */
static void submit_done(void *user, int rc, uint64_t id)
{
    pending_submit *ps = user;
    sx_engine *e = ps->e;
    if (rc == 0) {
        sx__job_attach(e, ps->p, ps->job, true);
        /* Stored, so acknowledged; once stop has begun it runs at the next
         * start instead. relaxed: stop waits for this process (it counts
         * as live) until it is dropped or has finished, either way. */
        if (atomic_load_explicit(&e->stopping, memory_order_relaxed))
            sx__spawn_drop(e, ps->p, SX_ESTOPPING,
                           "the engine stopped; the job runs at its next "
                           "start");
        else
            sx__enqueue_new(e, ps->p); /* may run and finish from here on */
        ps->fn(ps->user, 0, ps->pid, false, NULL);
    } else if (rc == SX_EEXIST) {
        sx__job_free(ps->job);
        sx__spawn_drop(e, ps->p, SX_EEXIST, "an earlier job has the same key");
        sx_pid first = { e->cfg.node, e->cfg.host, id };
        ps->fn(ps->user, 0, first, true, NULL);
    } else {
        const char *msg = sx__storage_msg(rc);
        sx__job_free(ps->job);
        sx__spawn_drop(e, ps->p, SX_ESTORAGE, msg);
        ps->fn(ps->user, SX_ESTORAGE, SX_PID_NONE, false, msg);
    }
    free(ps);
}

static int submit_async(sx_engine *e, const char *type, const char *method,
                        const sx_payload *input, size_t n_input,
                        const sx_submit_opts *opts, sx_submit_fn fn,
                        void *user);

int sx_engine_submit_async(sx_engine *e, const char *type, const char *method,
                           const sx_payload *input, size_t n_input,
                           const sx_submit_opts *opts, sx_submit_fn fn,
                           void *user)
{
    sx__init_forget();
    int rc = submit_async(e, type, method, input, n_input, opts, fn, user);
    if (rc != 0 && opts != NULL && opts->init_error != NULL &&
        opts->init_error_cap > 0) {
        /* init's own message when it refused (sx_init_error), else "". */
        const char *m = sx_engine_init_error();
        size_t n = strlen(m);
        if (n >= opts->init_error_cap)
            n = opts->init_error_cap - 1;
        memcpy(opts->init_error, m, n);
        opts->init_error[n] = '\0';
    }
    return rc;
}

static int submit_async(sx_engine *e, const char *type, const char *method,
                        const sx_payload *input, size_t n_input,
                        const sx_submit_opts *opts, sx_submit_fn fn, void *user)
{
    if (e == NULL || fn == NULL || (input == NULL && n_input > 0) ||
        n_input > UINT32_MAX || method == NULL ||
        (opts != NULL && opts->deadline_ms < 0))
        return SX_EINVAL;
    if (opts != NULL && (opts->place != SX_PLACE_HERE ||
                         (opts->node != 0 && opts->node != e->cfg.node))) {
        int rc = sx__remote_submit(e, type, method, input, n_input, opts, fn,
                                   user, NULL);
        if (rc != 1)
            return rc; /* 1: the placement picked this engine */
    }
    int64_t deadline = opts != NULL ? opts->deadline_ms : 0;
    const void *key = opts != NULL ? opts->key : NULL;
    size_t key_len = opts != NULL ? opts->key_len : 0;
    if (key != NULL && (key_len == 0 || e->store == NULL))
        return SX_EINVAL;
    const sx_restart_policy *policy = opts != NULL && opts->restart != NULL
                                          ? opts->restart
                                          : sx__type_restart(e, type);
    if (policy != NULL) {
        sx_restart_policy check = *policy;
        if (sx_restart_policy_check(&check) != 0)
            return SX_EINVAL;
        if (check.mode == SX_RESTART_NEVER)
            policy = NULL;
    }
    if (e->store == NULL && policy == NULL) {
        sx_pid pid;
        sx__spawnx x = { .deadline_ms = deadline > 0 ? deadline : -1 };
        int rc = deadline > 0
                     ? sx__spawn_opt(e, SX_PID_NONE, type, method, input,
                                     n_input, NULL, &pid, &x)
                     : sx__spawn_api(e, type, method, input, n_input, &pid);
        if (rc == 0)
            fn(user, 0, pid, false, NULL);
        return rc;
    }
    sx__proc *p;
    sx_pid pid;
    sx__spawnx x = { .deadline_ms = deadline > 0 ? deadline : -1, .held = &p };
    int rc = sx__spawn_opt(e, SX_PID_NONE, type, method, input, n_input, NULL,
                           &pid, &x);
    if (rc != 0)
        return rc;
    /* The inputs as the store and a restart keep them: one msgpack
     * array. */
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_array(&pk, (uint32_t)n_input);
    for (size_t i = 0; i < n_input; i++)
        sx_pack_raw(&pk, input[i]);
    sx__job *job =
        pk.err == 0 ? sx__job_new(pid.id, policy, method, sx_pack_payload(&pk))
                    : NULL;
    if (job == NULL) {
        sx_pack_fini(&pk);
        sx__spawn_drop(e, p, SX_ENOMEM, "out of memory");
        return SX_ENOMEM;
    }
    job->deadline_ms = deadline;
    if (e->store == NULL) {
        sx_pack_fini(&pk);
        sx__job_attach(e, p, job, false);
        sx__enqueue_new(e, p); /* may run and finish from here on */
        fn(user, 0, pid, false, NULL);
        return 0;
    }
    pending_submit *ps = malloc(sizeof(*ps));
    if (ps == NULL) {
        sx_pack_fini(&pk);
        sx__job_free(job);
        sx__spawn_drop(e, p, SX_ENOMEM, "out of memory");
        return SX_ENOMEM;
    }
    *ps = (pending_submit){
        .e = e, .p = p, .job = job, .pid = pid, .fn = fn, .user = user
    };
    uint8_t pol[64];
    size_t pl = job->policy.mode != SX_RESTART_NEVER
                    ? sx__policy_pack(&job->policy, pol, sizeof pol)
                    : 0;
    sx__store_job sj = {
        .id = pid.id,
        .key = key,
        .key_len = key_len,
        .type = type,
        .method = method,
        .input = sx_pack_payload(&pk),
        .attempt = 1,
        .policy = { pol, pl },
    };
    rc = sx__store_submit(e->store, &sj, submit_done, ps);
    sx_pack_fini(&pk);
    if (rc != 0) {
        /* The store is closing (stop) or out of memory: never stored. */
        rc = rc == SX_ESTATE ? SX_ESTOPPING : rc;
        sx__job_free(job);
        sx__spawn_drop(e, p, rc, "not stored");
        free(ps);
    }
    return rc;
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rc;
    sx_pid pid;
} submit_wait;

static void submit_wait_done(void *user, int rc, sx_pid pid, bool existing,
                             const char *msg)
{
    (void)existing;
    (void)msg;
    submit_wait *w = user;
    pthread_mutex_lock(&w->mu);
    w->rc = rc;
    w->pid = pid;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void submit_now_done(void *user, int rc, sx_pid pid, bool existing,
                            const char *msg)
{
    (void)existing;
    (void)msg;
    submit_wait *w = user;
    w->rc = rc;
    w->pid = pid;
}

int sx__durable_submit(sx_engine *e, const char *type, const char *method,
                       const sx_payload *input, size_t n_input, sx_pid *out_pid)
{
    submit_wait w = { .done = false };
    if (e->store == NULL) {
        /* Supervision only: answered before submit_async returns. */
        int rc = sx_engine_submit_async(e, type, method, input, n_input, NULL,
                                        submit_now_done, &w);
        if (rc == 0 && (rc = w.rc) == 0 && out_pid != NULL)
            *out_pid = w.pid;
        return rc;
    }
    if (sx__store_on_thread())
        return SX_ESTATE; /* a callback of the store's: it would wait for
                           * itself (sx_engine_submit_async does not) */
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    int rc = sx_engine_submit_async(e, type, method, input, n_input, NULL,
                                    submit_wait_done, &w);
    if (rc == 0) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        rc = w.rc;
        if (rc == 0 && out_pid != NULL)
            *out_pid = w.pid;
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}

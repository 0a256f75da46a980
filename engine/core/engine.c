/* engine/core/engine.c — the engine's life cycle: the machine's facts
 * (CPUs, memory), new, start, stop and free. Processes' own life (spawn,
 * send, terminate, finish) is engine/core/proc.c; stats and introspection
 * engine/core/stats.c.
 *
 * Threads: see engine.h; stop and free block and must not run in a step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/core/core.h"
#include "engine/core/job.h"
#include "engine/core/live.h"
#include "engine/io/io.h"
#include "process/fault.h"
#include "process/utf8.h"

/* ---- life cycle ---------------------------------------------------------- */

static unsigned online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

/* The lowest memory limit file named `file` in dir and the directories
 * above it up to root (inclusive), or UINT64_MAX when none has a number
 * ("max" has none). dir is cut short on the way. */
static uint64_t least_limit(char *dir, const char *root, const char *file)
{
    uint64_t least = UINT64_MAX;
    for (;;) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        FILE *m = fopen(path, "re");
        if (m != NULL) {
            unsigned long long v;
            if (fscanf(m, "%llu", &v) == 1 && v < least)
                least = v;
            fclose(m);
        }
        char *slash = strrchr(dir, '/');
        if (slash == NULL || strcmp(dir, root) == 0)
            return least;
        *slash = 0;
    }
}

/* The lowest memory limit of this program's cgroup and those above it:
 * memory.max (v2) or memory.limit_in_bytes (v1); UINT64_MAX when none is
 * set or readable. A directory that is not there (a cgroup namespace may
 * show paths of another mount) is skipped. */
static uint64_t cgroup_memory_max(void)
{
    char line[4096];
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f == NULL)
        return UINT64_MAX;
    uint64_t least = UINT64_MAX;
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = 0;
        /* "0::/path" (v2) or "N:memory:/path" (v1, perhaps with other
         * controllers: "N:cpu,memory:/path"). */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL || c2[1] != '/')
            continue;
        *c2 = 0;
        const char *root, *file;
        if (strcmp(line, "0") == 0 && c1 + 1 == c2) {
            root = "/sys/fs/cgroup";
            file = "memory.max";
        } else if (strstr(c1 + 1, "memory") != NULL) {
            root = "/sys/fs/cgroup/memory";
            file = "memory.limit_in_bytes";
        } else {
            continue;
        }
        char dir[sizeof line + 32];
        snprintf(dir, sizeof dir, "%s%s", root,
                 strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1);
        uint64_t v = least_limit(dir, root, file);
        if (v < least)
            least = v;
    }
    fclose(f);
    return least;
}

uint64_t sx_memory_size(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t phys =
        pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
    uint64_t cg = cgroup_memory_max();
    uint64_t m = cg < phys ? cg : phys;
    return m == UINT64_MAX ? 0 : m;
}

static int workers_init(sx_engine *e)
{
    e->workers = calloc(e->n_workers, sizeof(*e->workers));
    if (e->workers == NULL)
        return SX_ENOMEM;
    for (unsigned i = 0; i < e->n_workers; i++) {
        sx__worker *w = &e->workers[i];
        w->engine = e;
        w->id = i;
        w->rng = 0x9E3779B97F4A7C15ULL * (i + 1);
        sx__slotcache_init(&w->slots);
        sx__output_init(&w->out);
        w->out.hooks = &sx__worker_send_hooks;
        /* A bundle always fits one step's batch (engine/sched/turn.c, collect).
         */
        w->out.bundle_max = e->throughput;
        /* sx_done refuses a bigger result without copying it. */
        w->out.result_max = e->cfg.max_result;
        w->batch = calloc(e->throughput, sizeof(*w->batch));
        w->batch_ev = calloc(e->throughput, sizeof(*w->batch_ev));
        w->batch_cap = e->throughput;
        if (w->batch == NULL || w->batch_ev == NULL ||
            sx__deque_init(&w->dq, SX__DEQUE_CAP) != 0 ||
            sx__timers_init(&w->tm) != 0)
            return SX_ENOMEM;
        w->tm_ok = true;
        w->dq_old_top = -1; /* worker.c fair_look: no oldest item seen */
        atomic_init(&w->parked, false);
    }
    return 0;
}

static void workers_fini(sx_engine *e)
{
    if (e->workers == NULL)
        return;
    for (unsigned i = 0; i < e->n_workers; i++) {
        sx__worker *w = &e->workers[i];
        sx__output_fini(&w->out);
        free(w->batch);
        free(w->batch_ev);
        sx__deque_fini(&w->dq);
        if (w->tm_ok)
            sx__timers_fini(&w->tm);
    }
    free(e->workers);
    e->workers = NULL;
}

int sx_engine_new(const sx_engine_config *cfg, sx_engine **out)
{
    if (out == NULL)
        return SX_EINVAL;
    *out = NULL;
    sx_engine_config c = { 0 };
    if (cfg != NULL)
        c = *cfg;
    if (c.workers > SX_MAX_WORKERS || c.throughput > 1u << 20 ||
        c.io_loops > SX_MAX_IO_LOOPS || c.keep_outcomes > SX_MAX_KEEP_OUTCOMES)
        return SX_EINVAL;
    if (c.workers == 0)
        c.workers =
            online_cpus() < SX_MAX_WORKERS ? online_cpus() : SX_MAX_WORKERS;
    if (c.throughput == 0)
        c.throughput = 32;
    if (c.io_loops == 0)
        c.io_loops = 1;
    if (c.keep_outcomes == 0)
        c.keep_outcomes = 10000;
    if (c.keep_outcome_bytes == 0)
        c.keep_outcome_bytes = SX_KEEP_OUTCOME_BYTES_DEFAULT;
    if (c.max_result == 0)
        c.max_result = SX_MAX_RESULT_DEFAULT;
    if (c.host == 0)
        c.host = 1;
    sx_engine *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return SX_ENOMEM;
    e->cfg = c;
    e->n_workers = c.workers;
    e->throughput = c.throughput;
    int rc = SX_ENOMEM;
    if (pthread_mutex_init(&e->life_mu, NULL) != 0)
        goto fail_life_mu;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int crc = pthread_cond_init(&e->life_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (crc != 0)
        goto fail_life_cv;
    if ((rc = sx__ptable_init(e)) != 0)
        goto fail_ptable;
    if (pthread_mutex_init(&e->sup_mu, NULL) != 0) {
        rc = SX_ENOMEM;
        goto fail_sup_mu;
    }
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    crc = pthread_cond_init(&e->sup_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (crc != 0) {
        rc = SX_ENOMEM;
        goto fail_sup_cv;
    }
    if ((rc = sx__globalq_init(&e->gq)) != 0)
        goto fail_gq;
    if ((rc = sx__globalq_init(&e->wq)) != 0)
        goto fail_wq;
    if ((rc = sx__injq_init(&e->inj, SX__INJQ_CAP)) != 0)
        goto fail_inj;
    if ((rc = sx__park_init(&e->park)) != 0)
        goto fail_park;
    if ((rc = sx__outcomes_init(&e->outcomes, c.keep_outcomes,
                                c.keep_outcome_bytes, c.workers)) != 0)
        goto fail_outcomes;
    if ((rc = workers_init(e)) != 0)
        goto fail_workers;
    sx__commands_builtin(e);
    *out = e;
    return 0;

fail_workers:
    workers_fini(e);
    sx__outcomes_fini(&e->outcomes);
fail_outcomes:
    sx__park_fini(&e->park);
fail_park:
    sx__injq_fini(&e->inj);
fail_inj:
    sx__globalq_fini(&e->wq);
fail_wq:
    sx__globalq_fini(&e->gq);
fail_gq:
    pthread_cond_destroy(&e->sup_cv);
fail_sup_cv:
    pthread_mutex_destroy(&e->sup_mu);
fail_sup_mu:
    sx__ptable_fini(e);
fail_ptable:
    pthread_cond_destroy(&e->life_cv);
fail_life_cv:
    pthread_mutex_destroy(&e->life_mu);
fail_life_mu:
    free(e);
    return rc;
}

int sx_engine_start(sx_engine *e)
{
    if (e == NULL)
        return SX_EINVAL;
    pthread_mutex_lock(&e->life_mu);
    if (sx__started(e) || e->stopped) {
        pthread_mutex_unlock(&e->life_mu);
        return SX_ESTATE;
    }
    /* The state store first: its host part and generation range hold
     * before any PID is made. */
    int rc = sx__durable_open(e);
    if (rc != 0) {
        e->stopped = 1;
        pthread_mutex_unlock(&e->life_mu);
        return rc;
    }
    /* release: publishes the registries to every thread that sees
     * started (submit, the workers via thread creation anyway). */
    atomic_store_explicit(&e->started, 1, memory_order_release);
    rc = sx__io_start(e);
    if (rc == 0) {
        rc = sx__workers_start(e);
        if (rc != 0)
            sx__io_stop(e);
    }
    if (rc != 0) {
        atomic_store_explicit(&e->started, 0, memory_order_release);
        e->stopped = 1;
        sx__durable_close(e);
    }
    pthread_mutex_unlock(&e->life_mu);
    if (rc == 0)
        sx__durable_resume(e); /* the stored jobs run again */
    return rc;
}

/* ---- stop and free ---- */

static void cancel_one(sx_engine *e, sx__proc *p, void *arg)
{
    (void)arg;
    sx_engine_cancel(e, sx__proc_pid_raw(e, p), "stop");
}

static void terminate_one(sx_engine *e, sx__proc *p, void *arg)
{
    (void)arg;
    sx_engine_terminate(e, sx__proc_pid_raw(e, p));
}

int sx_engine_stop(sx_engine *e, int64_t deadline_ms)
{
    if (e == NULL)
        return SX_EINVAL;
    pthread_mutex_lock(&e->life_mu);
    /* A second stop waits for the first: life_mu is let go while the
     * first cancels, terminates and joins. */
    while (e->stop_busy && !e->stopped)
        pthread_cond_wait(&e->life_cv, &e->life_mu);
    if (e->stopped) {
        pthread_mutex_unlock(&e->life_mu);
        return 0;
    }
    if (!sx__started(e)) {
        pthread_mutex_unlock(&e->life_mu);
        return SX_ESTATE;
    }
    e->stop_busy = 1;
    /* seq_cst: see sx__spawn. */
    atomic_store_explicit(&e->stopping, 1, memory_order_seq_cst);
    /* Jobs waiting for a restart end now (they are not in the table's
     * walk: their state is COMPLETE). */
    pthread_mutex_unlock(&e->life_mu);
    sx__sup_end_all(e);
    pthread_mutex_lock(&e->life_mu);
    if (sx__live_now(e) > 0) {
        pthread_mutex_unlock(&e->life_mu);
        sx__ptable_each(e, cancel_one, NULL);
        pthread_mutex_lock(&e->life_mu);
    }
    struct timespec dl, now;
    sx__deadline_after(&dl, deadline_ms > 0 ? deadline_ms : 0);
    for (;;) {
        if (sx__live_now(e) == 0)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!sx__ts_before(&now, &dl))
            break;
        /* Looks again every millisecond: the last death may not broadcast
         * (see "live"). */
        struct timespec t;
        sx__deadline_after(&t, 1);
        pthread_cond_timedwait(&e->life_cv, &e->life_mu,
                               sx__ts_before(&dl, &t) ? &dl : &t);
    }
    /* release: a worker finishing a process terminated from here on (its
     * TERM flag set by terminate_one or by a link fired by one) reads it
     * with acquire after the state word's acquire. */
    atomic_store_explicit(&e->stop_killing, 1, memory_order_release);
    while (sx__live_now(e) > 0) {
        pthread_mutex_unlock(&e->life_mu);
        /* A job whose end decided on a restart just before stop began
         * may have joined the waiting list after the first look. */
        sx__sup_end_all(e);
        sx__ptable_each(e, terminate_one, NULL);
        pthread_mutex_lock(&e->life_mu);
        struct timespec t;
        sx__deadline_after(&t, 10);
        if (sx__live_now(e) > 0)
            pthread_cond_timedwait(&e->life_cv, &e->life_mu, &t);
    }
    /* Nothing is alive: sx_engine_wait_all's waiters return (a worker
     * that ended the last process once quit was set does not park, so it
     * does not look for them; live.h). */
    pthread_cond_broadcast(&e->life_cv);
    /* Not under life_mu: the worker that finished the last process may
     * still be on its way to life_mu to broadcast (sx__finish), and it
     * must get there for the join to return. Holding the mutex here
     * would deadlock test_api about once in 30 runs under TSan. */
    pthread_mutex_unlock(&e->life_mu);
    sx__workers_join(e);
    sx__sup_stop(e);
    /* Sleeps whose processes were terminated: their answers go nowhere
     * (before the loops stop: an answer may disarm a yield's deadline). */
    sx__timers_drain(e);
    /* No process is alive: every op still on a loop is being cancelled;
     * the loops finish them (subprocesses killed) and exit. */
    sx__io_stop(e);
    /* Outcomes still being stored are stored and made visible. */
    sx__durable_close(e);
    pthread_mutex_lock(&e->life_mu);
    e->stopped = 1;
    pthread_cond_broadcast(&e->life_cv); /* a second stop waiting */
    pthread_mutex_unlock(&e->life_mu);
    return 0;
}

void sx_engine_free(sx_engine *e)
{
    if (e == NULL)
        return;
    if (sx__started(e))
        sx_engine_stop(e, 0);
    /* Mailboxes the caller left open (made before or after stop): their
     * hooks and the watchers on them were lost. */
    sx__mailboxes_close(e);
    /* The remote route is called no more: its user may go. */
    if (e->remote.release != NULL)
        e->remote.release(e->remote_user);
    workers_fini(e);
    sx__outcomes_fini(&e->outcomes);
    sx__park_fini(&e->park);
    sx__injq_fini(&e->inj);
    sx__globalq_fini(&e->wq);
    sx__globalq_fini(&e->gq);
    sx__ptable_fini(e);
    pthread_cond_destroy(&e->sup_cv);
    pthread_mutex_destroy(&e->sup_mu);
    pthread_cond_destroy(&e->life_cv);
    pthread_mutex_destroy(&e->life_mu);
    sx__durable_free(e);
    free(e->type_restart);
    free(e->types);
    free(e->type_hash);
    free(e->type_addr_hash);
    free(e->ext_cmds);
    free(e);
}

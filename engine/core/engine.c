/* engine/core/engine.c — the engine's public API: life cycle, registries,
 * submit / spawn, send, cancel, terminate, finish, stop, introspection.
 *
 * Threads: see engine.h; internal sx__finish runs on the worker that ran
 * the process's last step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "process/fault.h"
#include "engine/core/core.h"
#include "engine/io/io.h"
#include "process/utf8.h"

struct sx_init_ctx {
    sx_pid pid;
    sx_pid parent;
    sx_engine *engine;
    void *user;
};

sx_pid sx_init_pid(const sx_init_ctx *ctx)
{
    return ctx != NULL ? ctx->pid : SX_PID_NONE;
}

sx_engine *sx_init_engine(const sx_init_ctx *ctx)
{
    return ctx != NULL ? ctx->engine : NULL;
}

void *sx_init_user(const sx_init_ctx *ctx)
{
    return ctx != NULL ? ctx->user : NULL;
}

sx_pid sx_init_parent(const sx_init_ctx *ctx)
{
    return ctx != NULL ? ctx->parent : SX_PID_NONE;
}

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
        /* A bundle always fits one step's batch (worker.c, collect). */
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
    sx__ptable_fini(e);
fail_ptable:
    pthread_cond_destroy(&e->life_cv);
fail_life_cv:
    pthread_mutex_destroy(&e->life_mu);
fail_life_mu:
    free(e);
    return rc;
}

/* Type names hash into an open-addressed table of indices + 1 (0 =
 * empty), at most half full, rebuilt by register (before start; read-only
 * after): a submit costs one hash and one strcmp, not one strcmp per type
 * registered before its own (100 of ~1,000 instructions per submit with
 * five types, callgrind). */
static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s != 0; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static const sx_process_type *type_find(sx_engine *e, const char *name)
{
    if (e->type_hash == NULL)
        return NULL;
    size_t mask = e->type_hash_cap - 1;
    for (size_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
        uint32_t k = e->type_hash[i];
        if (k == 0)
            return NULL;
        /* The same pointer first: callers often pass the very literal the
         * type was registered with (the strcmp was ~9 % of a submit). */
        const char *tn = e->types[k - 1]->name;
        if (tn == name || strcmp(tn, name) == 0)
            return e->types[k - 1];
    }
}

static int type_hash_build(sx_engine *e)
{
    size_t cap = 16;
    while (cap < 2 * e->n_types)
        cap *= 2;
    uint32_t *h = calloc(cap, sizeof(*h));
    if (h == NULL)
        return SX_ENOMEM;
    for (size_t j = 0; j < e->n_types; j++) {
        size_t i = name_hash(e->types[j]->name) & (cap - 1);
        while (h[i] != 0)
            i = (i + 1) & (cap - 1);
        h[i] = (uint32_t)j + 1;
    }
    free(e->type_hash);
    e->type_hash = h;
    e->type_hash_cap = cap;
    return 0;
}

static bool started(sx_engine *e)
{
    /* acquire: pairs with the release store in start; registries written
     * before start are visible. */
    return atomic_load_explicit(&e->started, memory_order_acquire) != 0;
}

int sx_engine_register(sx_engine *e, const sx_process_type *type)
{
    if (e == NULL || type == NULL || type->name == NULL || type->name[0] == 0 ||
        type->init == NULL || type->step == NULL)
        return SX_EINVAL;
    /* A state no allocation can give (each process gets its own, zeroed
     * at spawn): refused here, once, rather than SX_ENOMEM at every
     * submit (and an abort under AddressSanitizer, whose allocator
     * rejects such sizes). */
    if (type->state_size > SX_STATE_SIZE_MAX)
        return SX_EINVAL;
    if (started(e))
        return SX_ESTATE;
    if (type_find(e, type->name) != NULL)
        return SX_EEXIST;
    if (e->n_types == e->cap_types) {
        size_t cap = e->cap_types ? e->cap_types * 2 : 16;
        const sx_process_type **t = realloc(e->types, cap * sizeof(*t));
        if (t == NULL)
            return SX_ENOMEM;
        e->types = t;
        e->cap_types = cap;
    }
    e->types[e->n_types++] = type;
    if (type_hash_build(e) != 0) {
        e->n_types--;
        return SX_ENOMEM;
    }
    return 0;
}

int sx_engine_start(sx_engine *e)
{
    if (e == NULL)
        return SX_EINVAL;
    pthread_mutex_lock(&e->life_mu);
    if (started(e) || e->stopped) {
        pthread_mutex_unlock(&e->life_mu);
        return SX_ESTATE;
    }
    /* release: publishes the registries to every thread that sees
     * started (submit, the workers via thread creation anyway). */
    atomic_store_explicit(&e->started, 1, memory_order_release);
    int rc = sx__io_start(e);
    if (rc == 0) {
        rc = sx__workers_start(e);
        if (rc != 0)
            sx__io_stop(e);
    }
    if (rc != 0) {
        atomic_store_explicit(&e->started, 0, memory_order_release);
        e->stopped = 1;
    }
    pthread_mutex_unlock(&e->life_mu);
    return rc;
}

/* ---- live ---------------------------------------------------------------
 *
 * The live count is not one shared counter: a submit on one core and a
 * finish on the other would bounce its cache line on every process (12 %
 * of the submit benchmark's time was that one `lock sub`). Each worker
 * counts the processes it began to spawn (born) and those it finished or
 * failed to spawn (died), one writer each; threads that are not workers
 * share ext_born and ext_died. live = sum(born) - sum(died).
 *
 * Reading every died before any born keeps the figure from going below
 * the truth for a process the reader knows of: a death it sees (acquire)
 * brings that process's birth with it (its spawn happens before its
 * finish), and a process it spawned itself or whose outcome it saw was
 * counted before that. Someone else's spawn under way may be missed,
 * as if read a moment earlier.
 *
 * Stop's handshake (seq_cst): a spawner takes its slot, counts its
 * birth, then reads `stopping`; stop sets `stopping`, then reads the
 * counts, then walks the table to cancel. Either the spawn sees stopping
 * (and backs out) or stop counts it and its walk finds the slot. A death is
 * counted, then `stopping` read; if set and the sum is 0, life_cv is
 * broadcast. A worker counts a death with a release store, not a seq_cst
 * one (an exchange on x86, which waits for every store before it: the
 * finish path's stores to cold lines made it ~2 % of the timers
 * benchmark), so a death may miss a `stopping` just set while stop misses
 * the death: then nobody broadcasts, and stop finds the count at 0 on its
 * next look (once a millisecond while it waits for the processes to end,
 * every 10 ms while it terminates them). A birth's store stays
 * seq_cst: a spawn that stop missed would run on a stopped engine.
 *
 * max_processes, when set, is checked against one shared counter,
 * `admitted` (exact under concurrent submits, as a sum would not be). */

static uint64_t live_now(sx_engine *e)
{
    /* seq_cst (all): stop's half of the handshake above; acquire would
     * do for the figure alone. */
    uint64_t died = atomic_load_explicit(&e->ext_died, memory_order_seq_cst);
    for (unsigned i = 0; i < e->n_workers; i++)
        died +=
            atomic_load_explicit(&e->workers[i].st.died, memory_order_seq_cst);
    uint64_t born = atomic_load_explicit(&e->ext_born, memory_order_seq_cst);
    for (unsigned i = 0; i < e->n_workers; i++)
        born +=
            atomic_load_explicit(&e->workers[i].st.born, memory_order_seq_cst);
    return born >= died ? born - died : 0;
}

/* Adds 1 to a single-writer counter: a store of the given order, not a
 * locked RMW. Births use seq_cst (an exchange on x86: the store half of
 * the handshake above), deaths release (see above). */
static void count_own(_Atomic uint64_t *c, memory_order order)
{
    /* relaxed load: only the calling worker writes c. */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          order);
}

static void live_born(sx_engine *e, sx__worker *w)
{
    if (w != NULL)
        count_own(&w->st.born, memory_order_seq_cst);
    else /* seq_cst: see above */
        atomic_fetch_add_explicit(&e->ext_born, 1, memory_order_seq_cst);
}

static void live_died(sx_engine *e, sx__worker *w)
{
    if (w != NULL)
        /* release: a reader that sees the death sees the process's last
         * writes (live_now's figure; stop's handshake needs no more). */
        count_own(&w->st.died, memory_order_release);
    else /* seq_cst: see above */
        atomic_fetch_add_explicit(&e->ext_died, 1, memory_order_seq_cst);
    if (e->cfg.max_processes != 0) /* relaxed: a count, see above */
        atomic_fetch_sub_explicit(&e->admitted, 1, memory_order_relaxed);
    /* seq_cst: see above. */
    if (atomic_load_explicit(&e->stopping, memory_order_seq_cst) &&
        live_now(e) == 0) {
        pthread_mutex_lock(&e->life_mu);
        pthread_cond_broadcast(&e->life_cv);
        pthread_mutex_unlock(&e->life_mu);
    }
}

/* ---- submit and spawn ---------------------------------------------------- */

/* Marks p COMPLETE (sx__finish, and a spawn whose init failed). release:
 * producers that see COMPLETE leave their events queued (freed with the
 * slot); nothing is delivered after this. A link's failure reason
 * (sx__pext) is written only before a TERM flag is raised: seen here (the
 * flag's release, this acquire), it is reset for the slot's next process;
 * raised after this, its writer finds COMPLETE and resets it itself
 * (dispatch.c). relaxed store: the slot is recycled only after our
 * release of refs. */
static void mark_complete(sx_engine *e, sx__proc *p)
{
    uint32_t old = atomic_exchange_explicit(&p->state, SX_PSTATE_COMPLETE,
                                            memory_order_acq_rel);
    if (old & SX__F_TERM)
        atomic_store_explicit(&sx__ptable_pext(e, p)->link_failed, 0,
                              memory_order_relaxed);
}

/* Closes p's watcher list and fires every watcher on it with the outcome.
 * acq_rel: acquire the watchers registered (release CAS in sx__watch);
 * CLOSED tells later registrants to look at the outcome instead. */
/* Whether the list from n on holds another link to w's partner. Two
 * processes that link each other at the same moment on two workers both
 * find no link (cmd_link's look and its pushes are not one step) and both
 * make one: each then has two link watchers for the other, and a trapping
 * partner would get two @exits. The second is dropped here, at the one
 * place that sees the whole list. O(links^2) per finish, links only. */
static bool link_again(const sx__ev *n, const sx__ev *w)
{
    for (; n != NULL && n != SX__WATCH_CLOSED;
         /* relaxed: the list is ours (fire_watchers). */
         n = (const sx__ev *)atomic_load_explicit(&n->node.next,
                                                  memory_order_relaxed))
        if (n->watch == SX__WATCH_LINK && n->to == w->to &&
            n->to_gen == w->to_gen)
            return true;
    return false;
}

static void fire_watchers(sx_engine *e, sx__proc *p, sx_pid pid, int error,
                          const char *msg, sx_payload value, uint64_t steps)
{
    sx__ev *w = atomic_exchange_explicit(&p->watchers, SX__WATCH_CLOSED,
                                         memory_order_acq_rel);
    while (w != NULL && w != SX__WATCH_CLOSED) {
        /* relaxed: the list is ours now. */
        sx__ev *next =
            (sx__ev *)atomic_load_explicit(&w->node.next, memory_order_relaxed);
        if (w->watch == SX__WATCH_LINK && link_again(next, w))
            sx__ev_free(w); /* the same link, made twice at once */
        else
            sx__watch_fire(e, w, pid, error, msg, value, steps);
        w = next;
    }
}

/* Checks method against t's list; *idx is its place + 1 there (0: t has
 * no list, or a place past 65,534, which listings then show as none). */
static int method_check(const sx_process_type *t, const char *method,
                        uint16_t *idx)
{
    *idx = 0;
    if (t->methods == NULL)
        return 0;
    for (size_t k = 0; t->methods[k] != NULL; k++) {
        if (t->methods[k] == method || strcmp(t->methods[k], method) == 0) {
            *idx = k + 1 < UINT16_MAX ? (uint16_t)(k + 1) : 0;
            return 0;
        }
    }
    return SX_EUNKNOWN_METHOD;
}

int sx__spawn(sx_engine *e, sx_pid parent, const char *type, const char *method,
              const sx_payload *input, size_t n_input, sx__ev *watcher,
              sx_pid *out_pid)
{
    if (type == NULL || method == NULL || (input == NULL && n_input > 0))
        return SX_EINVAL;
    if (!started(e))
        return SX_ESTATE;
    const sx_process_type *t = type_find(e, type);
    if (t == NULL)
        return SX_EUNKNOWN_TYPE;
    uint16_t interned;
    int rc = method_check(t, method, &interned);
    if (rc != 0)
        return rc;
    /* Once stop has begun, refused here, before a slot is taken: a
     * submit after stop must not show in listings, even for an instant.
     * relaxed: a fast refusal; the seq_cst read after the birth below is
     * the one stop's handshake relies on. */
    if (atomic_load_explicit(&e->stopping, memory_order_relaxed))
        return SX_ESTOPPING;
    sx__worker *w = sx__current_worker(e);
    if (e->cfg.max_processes != 0 &&
        /* relaxed: a count; see "live" above. */
        atomic_fetch_add_explicit(&e->admitted, 1, memory_order_relaxed) >=
            e->cfg.max_processes) {
        atomic_fetch_sub_explicit(&e->admitted, 1, memory_order_relaxed);
        return SX_ELIMIT;
    }
    sx__proc *p =
        SX__FAULT(SX__FAULT_SPAWN) ? NULL : sx__ptable_alloc(e, t, interned);
    if (p == NULL) {
        if (e->cfg.max_processes != 0) /* relaxed: as above */
            atomic_fetch_sub_explicit(&e->admitted, 1, memory_order_relaxed);
        return sx__ptable_full(e) ? SX_ELIMIT : SX_ENOMEM;
    }
    /* The birth is counted after the slot is in the table and before
     * stopping is read (see "live"): either this spawn sees stopping and
     * backs out, or stop's read of the count sees the birth, and with it
     * (the seq_cst store's release) the slot, which its cancel walk then
     * finds. Counted before the alloc, a spawn that read stopping just
     * before stop set it could take its slot after the walk had passed
     * it: a process that never got stop's cancel, terminated at the
     * deadline (test_api stop_cancels_racing_submits). The price: a
     * spawn refused here was in the table for a moment, so a listing
     * may show it (as `live` may count it), during stop, or after it
     * for a spawn whose thread stalled between the check above and
     * this one for the whole stop. */
    live_born(e, w);
    /* seq_cst: see "live". */
    if (atomic_load_explicit(&e->stopping, memory_order_seq_cst)) {
        rc = SX_ESTOPPING;
        goto fail_slot;
    }
    /* A type without state gets a shared, never written placeholder: no
     * allocation per process (the spawnidle and submit workloads); a small
     * state goes in the slot's cell (internal.h, SX__CELL). */
    if (t->state_size == 0) {
        p->user_state = (void *)&sx__no_state;
    } else if (t->state_size <= SX__CELL) {
        p->user_state = p->cell;
        memset(p->user_state, 0, t->state_size);
    } else {
        p->user_state = calloc(1, t->state_size);
    }
    if (p->user_state == NULL) {
        rc = SX_ENOMEM;
        goto fail_slot;
    }
    sx_init_ctx ctx = { sx__proc_pid(e, p), parent, e, t->user };
    rc = t->init(p->user_state, &ctx, method, input, n_input);
    if (rc != 0) {
        if (rc > 0)
            rc = SX_EFAILED;
        goto fail_slot;
    }
    if (watcher != NULL) {
        /* Pushed, not stored: p's PID resolved while init ran, so a
         * monitor, link or sx_engine_watch may have registered watchers
         * meanwhile (sx__watch), which a plain store would drop (never
         * fired, never freed). The list cannot be CLOSED: p has not been
         * queued, so nothing has finished it. relaxed (load): the CAS
         * re-reads it. */
        sx__ev *old = atomic_load_explicit(&p->watchers, memory_order_relaxed);
        do {
            /* relaxed: published by the CAS. */
            atomic_store_explicit(&watcher->node.next,
                                  old != NULL ? &old->node : NULL,
                                  memory_order_relaxed);
            /* release: as in sx__watch (the finish's acquire exchange
             * sees the node); the queue hand-off publishes it too. */
        } while (!atomic_compare_exchange_weak_explicit(
            &p->watchers, &old, watcher, memory_order_release,
            memory_order_relaxed));
    }
    if (w != NULL)
        sx__wstat_add(&w->st.spawned, 1);
    else
        atomic_fetch_add_explicit(&e->submitted, 1, memory_order_relaxed);
    if (out_pid != NULL)
        *out_pid = ctx.pid;
    sx__enqueue_new(e, p); /* p may run and finish from here on */
    return 0;

fail_slot:;
    /* Never queued: retire it so no look-up finds it, then drop the
     * table's reference (frees the state and the slot). Its PID resolved
     * during init, so a link may have named a reason and raised TERM
     * meanwhile (mark_complete resets it), and watchers registered then (a
     * link or a monitor from a process that had the PID) learn that it
     * failed; they were once left unfired and unfreed. */
    mark_complete(e, p);
    sx_pid self = sx__proc_pid(e, p); /* before retire moves gen on */
    /* Retired under a shard lock, and its waiters (sx_engine_wait on the
     * PID, which resolved) woken: no outcome will come for them. */
    sx__outcomes_retire(e, w, p, self.id);
    fire_watchers(e, p, self, rc, "init failed", (sx_payload){ NULL, 0 }, 0);
    sx__proc_release(e, p);
    live_died(e, w);
    return rc;
}

int sx_engine_submit(sx_engine *e, const char *type, const char *method,
                     const sx_payload *input, size_t n_input, sx_pid *out_pid)
{
    if (e == NULL)
        return SX_EINVAL;
    return sx__spawn(e, SX_PID_NONE, type, method, input, n_input, NULL,
                     out_pid);
}

/* ---- messages ------------------------------------------------------------ */

/* Counts n messages sent (take back: uncounts them after a failed
 * delivery). Counted before the delivery, so that a receiver that saw a
 * message also sees it counted. A worker's counter has one writer
 * (sx__wstat_add); outside threads share ext_messages (relaxed: figures
 * only). */
static void count_messages(sx_engine *e, sx__worker *w, uint64_t n,
                           bool take_back)
{
    if (w != NULL)
        sx__wstat_add(&w->st.messages, take_back ? (uint64_t)0 - n : n);
    else if (take_back)
        atomic_fetch_sub_explicit(&e->ext_messages, n, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&e->ext_messages, n, memory_order_relaxed);
}

static int send_ev(sx_engine *e, sx_pid to, sx__ev *ev)
{
    sx__proc *p = sx__ptable_get(e, to);
    if (p == NULL) {
        sx__ev_free(ev);
        return SX_ENOTFOUND;
    }
    sx__worker *w = sx__current_worker(e);
    count_messages(e, w, 1, false);
    int rc = sx__deliver(e, p, ev);
    if (rc != 0)
        count_messages(e, w, 1, true);
    sx__proc_release(e, p);
    return rc;
}

/* send_ev for a cold caller (a ticker's stop notice, cmd_clock.c). Apart
 * and not inlined: one more call of sx__send_chain made GCC's LTO stop
 * inlining it into direct_sends, pingpong's send path (+22 instructions
 * per message in callgrind). */
__attribute__((noinline)) int sx__send_note(sx_engine *e, sx_pid to, sx__ev *ev)
{
    return send_ev(e, to, ev);
}

/* Like send_ev for a chain of n messages (first..last, linked). */
int sx__send_chain(sx_engine *e, sx_pid to, sx__ev *first, sx__ev *last,
                   size_t n)
{
    sx__proc *p = sx__ptable_get(e, to);
    if (p == NULL) {
        sx__ev_free_chain(first);
        return SX_ENOTFOUND;
    }
    sx__worker *w = sx__current_worker(e);
    count_messages(e, w, n, false);
    int rc = sx__deliver_chain(e, p, first, last);
    if (rc != 0)
        count_messages(e, w, n, true);
    sx__proc_release(e, p);
    return rc;
}

int sx__send(sx_engine *e, sx_pid from, sx_pid to, const char *topic,
             size_t topic_len, sx_payload data, bool ctl)
{
    if (topic_len > 255 || (data.data == NULL && data.len > 0))
        return SX_EINVAL;
    sx__ev *ev = SX__FAULT(SX__FAULT_SEND)
                     ? NULL
                     : sx__ev_alloc_sized((topic != NULL ? topic_len + 1 : 0) +
                                          data.len);
    if (ev == NULL)
        return SX_ENOMEM;
    ev->kind = SX__EV_MESSAGE;
    ev->ctl = ctl;
    ev->from = from;
    int rc = sx__ev_set(ev, topic, topic_len, data, NULL);
    if (rc != 0) {
        sx__ev_free(ev);
        return rc;
    }
    return send_ev(e, to, ev);
}

int sx_engine_send(sx_engine *e, sx_pid from, sx_pid to, const char *topic,
                   sx_payload data)
{
    if (e == NULL || topic == NULL)
        return SX_EINVAL;
    size_t tl = sx__topic_len(topic);
    if (tl == SIZE_MAX)
        return SX_EINVAL;
    return sx__send(e, from, to, topic, tl, data, false);
}

int sx_engine_cancel(sx_engine *e, sx_pid pid, const char *reason)
{
    if (e == NULL)
        return SX_EINVAL;
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_str(&pk, reason != NULL ? reason : "cancelled");
    if (pk.err != 0) {
        sx_pack_fini(&pk);
        return pk.err;
    }
    int rc = sx__send(e, SX_PID_NONE, pid, SX_TOPIC_CANCEL,
                      sizeof(SX_TOPIC_CANCEL) - 1, sx_pack_payload(&pk), true);
    sx_pack_fini(&pk);
    return rc;
}

int sx__terminate(sx_engine *e, sx__proc *p)
{
    if (p->type == NULL)
        return SX_ENOTFOUND; /* a mailbox, not a process */
    /* acq_rel: as in sx__deliver; the worker sees TERM at its next CAS. */
    uint32_t old =
        atomic_fetch_or_explicit(&p->state, SX__F_TERM, memory_order_acq_rel);
    uint32_t st = old & SX__S_MASK;
    if (st == SX_PSTATE_COMPLETE)
        return SX_ENOTFOUND;
    uint32_t cur = old | SX__F_TERM;
    for (;;) {
        st = cur & SX__S_MASK;
        if (st != SX_PSTATE_BLOCKED && st != SX_PSTATE_IDLE)
            break;
        /* acq_rel: as in sx__deliver. */
        if (atomic_compare_exchange_weak_explicit(
                &p->state, &cur, SX_PSTATE_READY | SX__F_TERM,
                memory_order_acq_rel, memory_order_acquire)) {
            sx__enqueue(e, p);
            break;
        }
    }
    return 0;
}

int sx_engine_terminate(sx_engine *e, sx_pid pid)
{
    if (e == NULL)
        return SX_EINVAL;
    sx__proc *p = sx__ptable_get(e, pid);
    if (p == NULL)
        return SX_ENOTFOUND;
    int rc = sx__terminate(e, p);
    sx__proc_release(e, p);
    return rc;
}

void sx__finish_terminated(sx_engine *e, sx__proc *p)
{
    /* relaxed: published by the TERM flag's release, which the worker's
     * acquire load of the state word saw. */
    uint64_t by = atomic_load_explicit(&sx__ptable_pext(e, p)->link_failed,
                                       memory_order_relaxed);
    /* Past stop's deadline every process left is terminated (API.md
     * meaning 9): one a linked partner's termination reached first is no
     * different. acquire: pairs with the release in sx_engine_stop. */
    if (by == 0 ||
        atomic_load_explicit(&e->stop_killing, memory_order_acquire)) {
        sx__finish(e, p, SX_ETERMINATED, "terminated", (sx_payload){ NULL, 0 });
        return;
    }
    char pid[64], msg[128];
    sx_pid_format((sx_pid){ e->cfg.node, e->cfg.host, by }, pid, sizeof pid);
    snprintf(msg, sizeof msg, "linked process %s failed", pid);
    sx__finish(e, p, SX_EFAILED, msg, (sx_payload){ NULL, 0 });
}

/* ---- finishing ---- */

void sx__finish(sx_engine *e, sx__proc *p, int error, const char *msg,
                sx_payload value)
{
    mark_complete(e, p);
    /* Commands still running on a loop are cancelled (timers stopped,
     * subprocesses killed, sockets closed); relaxed gen: ours. */
    sx__io_proc_finished(e, p,
                         atomic_load_explicit(&p->gen, memory_order_relaxed));
    if (p->type->close != NULL)
        p->type->close(p->user_state);
    sx_pid pid = sx__proc_pid(e, p);
    /* relaxed: only this worker wrote steps. */
    uint64_t steps = atomic_load_explicit(&p->steps, memory_order_relaxed);
    /* The figures and `live` change before the outcome is visible, so a
     * waiter that sees the outcome also sees them. */
    sx__worker *self = sx__current_worker(e);
    if (self != NULL) {
        sx__wstat_add(error == 0                ? &self->st.completed
                      : error == SX_ETERMINATED ? &self->st.terminated
                                                : &self->st.failed,
                      1);
    } else {
        atomic_fetch_add_explicit(error == 0                ? &e->completed
                                  : error == SX_ETERMINATED ? &e->terminated
                                                            : &e->failed,
                                  1, memory_order_relaxed);
    }
    live_died(e, self);
    /* close has returned before the outcome is visible to wait; the PID
     * stops resolving right after it is (outcome.c). */
    sx__outcomes_put(e, self, p, pid.id, error, msg, value, steps);
    /* Sleeps still in a timer set are dropped there lazily (timers.c),
     * counted only now that the slot's generation has moved on. release:
     * a purge that reads the count (acquire) then sees the new generation
     * and finds these entries dead; counted earlier, a purge could take
     * the count off without finding them, leaving them unpurged. */
    if (p->sleeps > 0)
        atomic_fetch_add_explicit(&e->tm_dead, p->sleeps, memory_order_release);
    fire_watchers(e, p, pid, error, msg, value, steps);
    sx__proc_release(e, p); /* the table's reference */
}

int sx__watch(sx_engine *e, sx_pid target, sx__ev *w)
{
    sx__proc *p = sx__ptable_get(e, target);
    if (p != NULL) {
        /* acquire: see the list head as it is. */
        sx__ev *old = atomic_load_explicit(&p->watchers, memory_order_acquire);
        while (old != SX__WATCH_CLOSED) {
            /* relaxed: published by the release CAS. */
            atomic_store_explicit(&w->node.next,
                                  old != NULL ? &old->node : NULL,
                                  memory_order_relaxed);
            /* release: pairs with the acquire exchange in sx__finish. */
            if (atomic_compare_exchange_weak_explicit(&p->watchers, &old, w,
                                                      memory_order_release,
                                                      memory_order_acquire)) {
                sx__proc_release(e, p);
                return 0;
            }
        }
        sx__proc_release(e, p);
    }
    /* Finished (or never known): answer from the kept outcome. The node
     * and host first: a PID of another engine with the id of a kept local
     * outcome is not that process, and the copy would be left behind. */
    sx_result r;
    if (target.node == e->cfg.node && target.host == e->cfg.host &&
        sx__outcomes_get(e, target.id, &r)) {
        sx__watch_fire(e, w, target, r.error, r.error_msg, r.value, r.steps);
        sx_result_free(&r);
    } else {
        sx__watch_fire(e, w, target, SX_ENOTFOUND, "no such process",
                       (sx_payload){ NULL, 0 }, 0);
    }
    return 0;
}

/* ---- stop and free ---- */

static void cancel_one(sx_engine *e, sx__proc *p, void *arg)
{
    (void)arg;
    sx_engine_cancel(e, sx__proc_pid(e, p), "stop");
}

static void terminate_one(sx_engine *e, sx__proc *p, void *arg)
{
    (void)arg;
    sx_engine_terminate(e, sx__proc_pid(e, p));
}

static void deadline_after(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static bool before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec ||
           (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
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
    if (!started(e)) {
        pthread_mutex_unlock(&e->life_mu);
        return SX_ESTATE;
    }
    e->stop_busy = 1;
    /* seq_cst: see sx__spawn. */
    atomic_store_explicit(&e->stopping, 1, memory_order_seq_cst);
    if (live_now(e) > 0) {
        pthread_mutex_unlock(&e->life_mu);
        sx__ptable_each(e, cancel_one, NULL);
        pthread_mutex_lock(&e->life_mu);
    }
    struct timespec dl, now;
    deadline_after(&dl, deadline_ms > 0 ? deadline_ms : 0);
    for (;;) {
        if (live_now(e) == 0)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!before(&now, &dl))
            break;
        /* Looks again every millisecond: the last death may not broadcast
         * (see "live"). */
        struct timespec t;
        deadline_after(&t, 1);
        pthread_cond_timedwait(&e->life_cv, &e->life_mu,
                               before(&dl, &t) ? &dl : &t);
    }
    /* release: a worker finishing a process terminated from here on (its
     * TERM flag set by terminate_one or by a link fired by one) reads it
     * with acquire after the state word's acquire. */
    atomic_store_explicit(&e->stop_killing, 1, memory_order_release);
    while (live_now(e) > 0) {
        pthread_mutex_unlock(&e->life_mu);
        sx__ptable_each(e, terminate_one, NULL);
        pthread_mutex_lock(&e->life_mu);
        struct timespec t;
        deadline_after(&t, 10);
        if (live_now(e) > 0)
            pthread_cond_timedwait(&e->life_cv, &e->life_mu, &t);
    }
    /* Not under life_mu: the worker that finished the last process may
     * still be on its way to life_mu to broadcast (sx__finish), and it
     * must get there for the join to return. Holding the mutex here
     * deadlocked test_api about once in 30 runs under TSan. */
    pthread_mutex_unlock(&e->life_mu);
    sx__workers_join(e);
    /* Sleeps whose processes were terminated: their answers go nowhere
     * (before the loops stop: an answer may disarm a yield's deadline). */
    sx__timers_drain(e);
    /* No process is alive: every op still on a loop is being cancelled;
     * the loops finish them (subprocesses killed) and exit. */
    sx__io_stop(e);
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
    if (started(e))
        sx_engine_stop(e, 0);
    /* Mailboxes the caller left open (made before or after stop): their
     * hooks and the watchers on them were lost. */
    sx__mailboxes_close(e);
    workers_fini(e);
    sx__outcomes_fini(&e->outcomes);
    sx__park_fini(&e->park);
    sx__injq_fini(&e->inj);
    sx__globalq_fini(&e->wq);
    sx__globalq_fini(&e->gq);
    sx__ptable_fini(e);
    pthread_cond_destroy(&e->life_cv);
    pthread_mutex_destroy(&e->life_mu);
    free(e->types);
    free(e->type_hash);
    free(e->ext_cmds);
    free(e);
}

/* ---- introspection ---- */

int sx_engine_config_get(const sx_engine *e, sx_engine_config *out)
{
    if (e == NULL || out == NULL)
        return SX_EINVAL;
    *out = e->cfg; /* written once by sx_engine_new, read-only since */
    return 0;
}

int sx_engine_stats_get(sx_engine *e, sx_engine_stats *out,
                        sx_worker_stats *workers, size_t cap)
{
    if (e == NULL || out == NULL)
        return SX_EINVAL;
    memset(out, 0, sizeof(*out));
    /* relaxed (all but live and the ring's size, which read with their
     * own orders): figures, not synchronisation. */
    out->live = live_now(e);
    out->submitted = atomic_load_explicit(&e->submitted, memory_order_relaxed);
    out->completed = atomic_load_explicit(&e->completed, memory_order_relaxed);
    out->failed = atomic_load_explicit(&e->failed, memory_order_relaxed);
    out->terminated =
        atomic_load_explicit(&e->terminated, memory_order_relaxed);
    out->dead_letters =
        atomic_load_explicit(&e->dead_letters, memory_order_relaxed);
    out->messages =
        atomic_load_explicit(&e->ext_messages, memory_order_relaxed);
    out->global_queue = atomic_load_explicit(&e->gq.len, memory_order_relaxed) +
                        atomic_load_explicit(&e->wq.len, memory_order_relaxed) +
                        sx__injq_size(&e->inj);
    out->workers = e->n_workers;
    out->io_inflight =
        atomic_load_explicit(&e->io_inflight, memory_order_relaxed);
    out->io_ops = atomic_load_explicit(&e->io_ops, memory_order_relaxed);
    out->timeouts = atomic_load_explicit(&e->io_timeouts, memory_order_relaxed);
    out->sleeps = e->workers != NULL ? sx__timers_count(e) : 0;
    out->slots = sx__ptable_slots(e);
    sx__outcomes_count(&e->outcomes, &out->outcomes, &out->outcome_bytes);
    for (unsigned k = 0; k < SX_LATENCY_BUCKETS; k++)
        out->latency_us[k] =
            atomic_load_explicit(&e->latency[k], memory_order_relaxed);
    /* relaxed: a figure (see dispatch.c). */
    out->latency_sum_us =
        atomic_load_explicit(&e->latency_sum, memory_order_relaxed);
    out->parked = atomic_load_explicit(&e->park.n_parked, memory_order_relaxed);
    for (unsigned i = 0; i < e->n_workers; i++) {
        sx__wstats *s = &e->workers[i].st;
        out->messages +=
            atomic_load_explicit(&s->messages, memory_order_relaxed);
        out->submitted +=
            atomic_load_explicit(&s->spawned, memory_order_relaxed);
        out->completed +=
            atomic_load_explicit(&s->completed, memory_order_relaxed);
        out->failed += atomic_load_explicit(&s->failed, memory_order_relaxed);
        out->terminated +=
            atomic_load_explicit(&s->terminated, memory_order_relaxed);
        if (workers == NULL || i >= cap)
            continue;
        sx_worker_stats *o = &workers[i];
        o->steps = atomic_load_explicit(&s->steps, memory_order_relaxed);
        o->steals = atomic_load_explicit(&s->steals, memory_order_relaxed);
        o->stolen = atomic_load_explicit(&s->stolen, memory_order_relaxed);
        o->parks = atomic_load_explicit(&s->parks, memory_order_relaxed);
        o->wakeups = atomic_load_explicit(&s->wakeups, memory_order_relaxed);
        o->global_pops =
            atomic_load_explicit(&s->global_pops, memory_order_relaxed);
        o->timeout_finds =
            atomic_load_explicit(&s->timeout_finds, memory_order_relaxed);
    }
    return 0;
}

const char *sx_pstate_name(int state)
{
    switch (state) {
    case SX_PSTATE_READY:
        return "ready";
    case SX_PSTATE_RUNNING:
        return "running";
    case SX_PSTATE_BLOCKED:
        return "blocked";
    case SX_PSTATE_IDLE:
        return "idle";
    case SX_PSTATE_COMPLETE:
        return "complete";
    default:
        return "unknown";
    }
}

typedef struct {
    sx_process_info *out;
    size_t cap, n;
} list_ctx;

static void list_one(sx_engine *e, sx__proc *p, void *arg)
{
    list_ctx *c = arg;
    if (c->n >= c->cap)
        return;
    sx_process_info *i = &c->out[c->n++];
    i->pid = sx__proc_pid(e, p);
    /* The type and method pointers are set before the process is
     * published and never change while we hold a reference. */
    i->type = p->type != NULL ? p->type->name : "?";
    i->method = p->method != 0 ? p->type->methods[p->method - 1] : NULL;
    /* relaxed: a snapshot for listings. */
    i->state = (int)(atomic_load_explicit(&p->state, memory_order_relaxed) &
                     SX__S_MASK);
    i->steps = atomic_load_explicit(&p->steps, memory_order_relaxed);
}

static void count_one(sx_engine *e, sx__proc *p, void *arg)
{
    (void)e;
    uint64_t *out = arg;
    /* relaxed: a figure; the state may change right after. */
    uint32_t s = atomic_load_explicit(&p->state, memory_order_relaxed);
    s &= SX__S_MASK;
    if (s >= 1 && s <= SX_PSTATE_COMPLETE)
        out[s]++;
}

int sx_engine_count_states(sx_engine *e, uint64_t out[SX_PSTATE_COMPLETE + 1])
{
    if (e == NULL || out == NULL)
        return SX_EINVAL;
    memset(out, 0, sizeof(uint64_t) * (SX_PSTATE_COMPLETE + 1));
    sx__ptable_each(e, count_one, out);
    return 0;
}

int sx_engine_list(sx_engine *e, sx_process_info *out, size_t cap)
{
    if (e == NULL || (out == NULL && cap > 0))
        return SX_EINVAL;
    list_ctx c = { out, cap, 0 };
    if (cap > 0)
        sx__ptable_each(e, list_one, &c);
    return (int)(c.n > INT32_MAX ? INT32_MAX : c.n);
}

size_t sx_engine_types(sx_engine *e, const sx_process_type **out, size_t cap)
{
    if (e == NULL)
        return 0;
    if (out == NULL) /* count only (it wrote through NULL when cap > 0) */
        cap = 0;
    for (size_t i = 0; i < e->n_types && i < cap; i++)
        out[i] = e->types[i];
    return e->n_types;
}

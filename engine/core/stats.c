/* engine/core/stats.c — introspection: the configuration, the stats, the
 * process list and the state counts.
 *
 * Threads: [any thread]; figures are relaxed reads, each a recent value.
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
#include "engine/store/store.h"
#include "process/fault.h"
#include "process/utf8.h"

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
    out->live = sx__live_now(e);
    out->submitted = atomic_load_explicit(&e->submitted, memory_order_relaxed);
    out->completed = atomic_load_explicit(&e->completed, memory_order_relaxed);
    out->failed = atomic_load_explicit(&e->failed, memory_order_relaxed);
    out->terminated =
        atomic_load_explicit(&e->terminated, memory_order_relaxed);
    out->cancelled = atomic_load_explicit(&e->cancelled, memory_order_relaxed);
    out->deadlines = atomic_load_explicit(&e->deadlines, memory_order_relaxed);
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
    /* The store stays until sx_engine_free (durable.c): its figures are
     * atomics, read whether it runs or has been shut down. */
    if (e->store != NULL) {
        sx__store_stats ss;
        sx__store_stats_get(e->store, &ss);
        out->store_commits = ss.commits;
        out->store_records = ss.records;
        out->store_failed = ss.failed;
    }
    out->restarting = sx__sup_waiting(e);
    /* relaxed: figures (checkpoint.c). */
    out->checkpoints =
        atomic_load_explicit(&e->checkpoints, memory_order_relaxed);
    out->checkpoint_us =
        atomic_load_explicit(&e->checkpoint_ns, memory_order_relaxed) / 1000u;
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
        out->cancelled +=
            atomic_load_explicit(&s->cancelled, memory_order_relaxed);
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
    case SX_PSTATE_RESTARTING:
        return "restarting";
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
    memset(i, 0, sizeof(*i));
    i->restart_in_ms = -1;
    i->pid = sx__proc_pid_raw(e, p);
    /* A job: its PID and attempt (acquire: pairs with the release store
     * that made it one; the job lives while we hold the reference). */
    sx__job *j =
        atomic_load_explicit(&sx__ptable_pext(e, p)->job, memory_order_acquire);
    if (j != NULL) {
        i->pid.id = j->id;
        i->attempts = j->attempt;
    }
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
    /* Jobs waiting for a restart are not in the table's walk (their state
     * word is COMPLETE until they run again). */
    c.n += sx__sup_list(e, out + c.n, cap - c.n);
    return (int)(c.n > INT32_MAX ? INT32_MAX : c.n);
}

size_t sx_engine_types(sx_engine *e, const sx_process_type **out, size_t cap)
{
    if (e == NULL)
        return 0;
    if (out == NULL) /* count only (it wrote through NULL when cap > 0) */
        cap = 0;
    /* The engine's own types ("@retry", "@all": names a user's cannot
     * take) are left out. */
    size_t n = 0;
    for (size_t i = 0; i < e->n_types; i++) {
        if (e->types[i]->name[0] == '@')
            continue;
        if (n < cap)
            out[n] = e->types[i];
        n++;
    }
    return n;
}

/* engine/core/wait.c — the waiters of the outcome store: sx_engine_wait,
 * which sleeps until the outcome of a live process is put, and the wake-up
 * that a finish sends it. The store is engine/core/outcome.c; the fields
 * both use (`wmu`, `waiters`, `n_waiting`) are in engine/core/outcome.h.
 *
 * Waiting. A waiter for a live process sleeps on its own condition
 * variable in a list under `wmu`. Waiters are counted by a hash of their
 * PID in `n_waiting` (256 slots), and a put reads its PID's slot under
 * its shard lock: only if it is not 0 does the finish take `wmu` (after
 * the retire) and signal the PID's waiters. A finish touches no line that
 * a waiter writes, unless their PIDs hash to the same 64-byte line of
 * slots (1 in 16), and takes wmu only if they hash alike (1 in 256).
 *
 * A waiter counts itself under wmu, then looks in every shard under its
 * lock, then for the live process, and sleeps only if the process is
 * live, holding wmu until the sleep releases it. Nothing is lost, by the
 * finisher's shard lock alone: if the waiter took it first, its count was
 * made before, so the put reads it, and signals, which needs wmu, which
 * it gets only once the waiter sleeps (or has returned); if the put took
 * it first, the waiter's look finds the record, and the process retired
 * (the retire is under the lock too), so a record that could not be
 * allocated gives SX_ENOTFOUND rather than a sleep nobody ends.
 *
 * A look (timeout_ms 0) takes neither wmu nor a count, and never sleeps:
 * the table first, then the outcome. A finish puts the outcome before it
 * retires the slot, both under its shard lock: a look that finds the
 * slot retired (the acquire load of its generation) or already free (the
 * shard locks that the outcome's look-up then takes) finds the record
 * too, unless it is no longer kept.
 *
 * sx_engine_wait_all sleeps on life_cv until no process is alive; the
 * handshake that wakes it is in engine/core/live.h ("waiting for all").
 *
 * Threads: [any thread]; sx_engine_wait and sx_engine_wait_all block, so
 * not from a step; sx__live_idle_check [worker] (as it parks).
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "engine/core/core.h"
#include "engine/core/live.h"

/* Signals the waiters for id (see "Waiting"). */
void sx__outcomes_wake(sx__outcomes *o, uint64_t id)
{
    pthread_mutex_lock(&o->wmu);
    for (sx__waiter *w = o->waiters; w != NULL; w = w->next)
        if (w->id == id)
            pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&o->wmu);
}

/* 0 with the outcome, or SX_ENOMEM, or `none` when it is not kept. */
static int answer(sx__outcomes *o, uint64_t id, sx_result *out, int none)
{
    int f = sx__outcomes_find(o, id, out);
    return f == 1 ? 0 : f == 0 ? none : f;
}

int sx_engine_wait(sx_engine *e, sx_pid pid, int64_t timeout_ms, sx_result *out)
{
    if (e == NULL || out == NULL)
        return SX_EINVAL;
    memset(out, 0, sizeof(*out));
    /* Outcomes are kept by id alone: a PID of another node or host with
     * the id of a local process is not that process (sx__watch and
     * sx_engine_watch check the same). */
    if (pid.node != e->cfg.node || pid.host != e->cfg.host)
        return SX_ENOTFOUND;
    sx__outcomes *o = &e->outcomes;
    if (timeout_ms == 0) {
        /* A look (see "Waiting"): a live process costs a reference
         * taken and dropped (no waiter, no condition variable, no lock,
         * no system call; the relay looks before every wait's watch,
         * relay/ops.c); a gone one, its outcome. */
        sx__proc *p = sx__ptable_get(e, pid);
        if (p != NULL) {
            /* A mailbox (no type) has no outcome ever; see below. */
            bool mailbox = p->type == NULL;
            sx__proc_release(e, p);
            return mailbox ? SX_ENOTFOUND : SX_ETIMEDOUT;
        }
        return answer(o, pid.id, out, SX_ENOTFOUND);
    }
    sx__waiter w;
    w.id = pid.id;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&w.cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        return -rc;
    struct timespec dl;
    if (timeout_ms >= 0)
        sx__deadline_after(&dl, timeout_ms);
    pthread_mutex_lock(&o->wmu);
    _Atomic uint32_t *slot =
        &o->n_waiting[sx__outcome_hash(pid.id, SX__WAIT_SLOTS - 1)];
    /* relaxed: changed only under wmu; the shard locks that find_copy
     * takes next order it for puts (see "Waiting"). */
    atomic_fetch_add_explicit(slot, 1, memory_order_relaxed);
    for (;;) {
        int f = sx__outcomes_find(o, pid.id, out);
        if (f != 0) {
            rc = f == 1 ? 0 : f;
            break;
        }
        sx__proc *p = sx__ptable_get(e, pid);
        if (p == NULL) {
            /* Finished since the look (its outcome was put before the
             * retire that the table's acquire load saw), or unknown. */
            rc = answer(o, pid.id, out, SX_ENOTFOUND);
            break;
        }
        /* A mailbox is the slot with no type (outside.c), not the state
         * MAILBOX: sx_engine_mailbox_free makes that COMPLETE before it
         * retires the PID, and retires it with no wake-up, so a wait that
         * took its reference in between and read COMPLETE would sleep until
         * its limit, or for ever (test_outside wait_mailbox_closing). The
         * type was written before the slot was published and stays while we
         * hold a reference. */
        bool mailbox = p->type == NULL;
        sx__proc_release(e, p);
        if (mailbox) {
            /* Not a process: no outcome will ever come (engine.h). */
            rc = SX_ENOTFOUND;
            break;
        }
        w.next = o->waiters;
        o->waiters = &w;
        int wr = timeout_ms >= 0 ? pthread_cond_timedwait(&w.cv, &o->wmu, &dl)
                                 : pthread_cond_wait(&w.cv, &o->wmu);
        sx__waiter **pp = &o->waiters;
        while (*pp != &w)
            pp = &(*pp)->next;
        *pp = w.next;
        if (wr == ETIMEDOUT) {
            rc = answer(o, pid.id, out, SX_ETIMEDOUT);
            break;
        }
    }
    /* relaxed: under wmu; a finish that still reads our count takes wmu
     * for nothing. */
    atomic_fetch_sub_explicit(slot, 1, memory_order_relaxed);
    pthread_mutex_unlock(&o->wmu);
    pthread_cond_destroy(&w.cv);
    return rc;
}

/* ---- waiting for all ---- */

/* Out of line: inlined into the park path, which LTO inlines into the
 * workers' loop, it changed gcc's register allocation of the message
 * path there (more instructions a message, bench/icount.sh). */
__attribute__((noinline)) void sx__live_idle_check(sx_engine *e)
{
    /* seq_cst RMW (+0), the looker's half of the handshake in live.h:
     * our death counts are release stores, so a load here could miss a
     * waiter that came in meanwhile while the waiter missed our deaths.
     * The RMW reads the last value: if it reads no waiter, the waiter's
     * own RMW comes after ours, reads it, and synchronises with it, so
     * the waiter's read of live sees our deaths. */
    if (atomic_fetch_add_explicit(&e->park.all_waiters, 0,
                                  memory_order_seq_cst) == 0 ||
        sx__live_now(e) != 0)
        return;
    pthread_mutex_lock(&e->life_mu);
    pthread_cond_broadcast(&e->life_cv);
    pthread_mutex_unlock(&e->life_mu);
}

int sx_engine_wait_all(sx_engine *e, int64_t timeout_ms)
{
    if (e == NULL)
        return SX_EINVAL;
    /* A step waiting for every process would wait for itself. */
    if (sx__current_worker(e) != NULL)
        return SX_ESTATE;
    /* A look: no lock, no count. */
    if (timeout_ms == 0)
        return sx__live_now(e) == 0 ? 0 : SX_ETIMEDOUT;
    struct timespec dl, now, t;
    if (timeout_ms > 0)
        sx__deadline_after(&dl, timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&e->life_mu);
    /* seq_cst: the waiter's half of the handshake (live.h); under
     * life_mu, so a looker's broadcast comes after our sleep began. */
    atomic_fetch_add_explicit(&e->park.all_waiters, 1, memory_order_seq_cst);
    while (sx__live_now(e) != 0) {
        /* Looks again every 2 s: a safety net; the handshake leaves no
         * death unlooked at (test_api wait_all fails should a wake-up
         * take that long). */
        sx__deadline_after(&t, 2000);
        if (timeout_ms > 0) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (!sx__ts_before(&now, &dl)) {
                rc = SX_ETIMEDOUT;
                break;
            }
            if (sx__ts_before(&dl, &t))
                t = dl;
        }
        pthread_cond_timedwait(&e->life_cv, &e->life_mu, &t);
    }
    /* relaxed: a hint from here on; the lookers re-read live. */
    atomic_fetch_sub_explicit(&e->park.all_waiters, 1, memory_order_relaxed);
    pthread_mutex_unlock(&e->life_mu);
    return rc;
}

/* engine/sched/park.c — parking idle workers without losing a wake-up.
 *
 * The protocol (docs/SCHEDULER.md has the full argument):
 *
 *   producer:  publish work (seq_cst RMW: the global queue's len; or the
 *              seq_cst store of the injection ring's tail)
 *              load n_parked (seq_cst); if > 0: grant a token, signal
 *   parker:    n_parked += 1 (seq_cst RMW)
 *              re-scan every queue (seq_cst loads)
 *              work seen -> n_parked -= 1, go run it
 *              none      -> sleep until a token (or shutdown)
 *
 * Both sides write one location and then read the other's with seq_cst
 * operations, so in the single total order either the producer's load sees
 * the parker's increment (and a token is granted: the sleep ends), or the
 * parker's re-scan comes after the producer's publish (and sees the work).
 * Tokens are counted under the mutex, so a signal sent before the parker
 * reaches pthread_cond_wait is not lost either.
 *
 * Work pushed by a worker into its own deque needs no wake-up for
 * liveness (that worker runs it); it wakes a parked worker only as a hint
 * for parallelism (sx__enqueue).
 *
 * Threads: notify [any thread]; wait [worker]; shutdown [stopper].
 */
#include <errno.h>
#include <time.h>

#include "engine/core/core.h"
#include "engine/io/io.h" /* sx__now_ns */

/* A parked worker re-checks the queues this often even without a token:
 * the safety net. A park that ends that way is counted as a lost wake-up
 * (timeout_finds, asserted 0 by the tests) when it finds work beside
 * every worker asleep and no wake-up comes for it: see wakeup_lost. */
#define PARK_TIMEOUT_MS 500

/* Work in a queue that every worker reads (not a deque: local pushes wake
 * only as a hint). seq_cst loads (the queues' own): the parker's re-scan
 * in the handshake. */
static bool global_work_visible(sx_engine *e)
{
    return sx__globalq_len(&e->wq) > 0 || sx__globalq_len(&e->gq) > 0 ||
           sx__injq_size(&e->inj) > 0;
}

/* [holding mu, counted in n_parked] Every worker asleep (counted, past
 * its re-scan) with no token pending, and work in the global queues. */
static bool asleep_with_work(sx_engine *e)
{
    sx__park *pk = &e->park;
    if (pk->tokens != 0)
        return false;
    /* acquire: a parker's increment is a seq_cst RMW outside mu, and every
     * write of n_parked is an RMW (one release sequence), so reading
     * n_workers synchronises with every worker's latest increment; the
     * decrements are under mu, held here, so that count is not stale.
     * Each worker's earlier stores are then visible, among them the clear
     * of its `parked` flag after its previous park, so the flag read next
     * is not a stale `true` from before its current re-scan. */
    if (atomic_load_explicit(&pk->n_parked, memory_order_acquire) !=
        e->n_workers)
        return false;
    for (unsigned i = 0; i < e->n_workers; i++)
        /* relaxed, after the acquire above: a worker sets its flag after
         * its re-scan found nothing and before it takes mu; one not seen
         * set may be re-scanning and about to take the work. */
        if (!atomic_load_explicit(&e->workers[i].parked, memory_order_relaxed))
            return false;
    /* A diagnostic: work not seen here is not counted. */
    return global_work_visible(e);
}

/* [holding mu, counted in n_parked, a timed park ended with no token]
 * Counts a lost wake-up in w's timeout_finds: work waits in the global queues
 * while every worker sleeps and none is woken for it. The protocol promises
 * that this never lasts: a producer that publishes while a worker is counted
 * grants a token to some parked worker (not to a given one), so work seen while
 * another worker is awake, or is on its way to it, is not a lost wake-up. A
 * producer that saw us counted can be anywhere between its publish and its lock
 * of mu (descheduled, on a host with fewer CPUs than threads; in inject_full,
 * also behind the global queue's lock), so this waits one more safety-net
 * period for a token, still counted, and counts only if no token was granted to
 * anyone meanwhile and every worker still sleeps beside the work. A
 * producer held up longer than that would be counted too. While a sleep
 * falls due within that period there is no look (the wait would hold the
 * sleep back: the park that just ended may have been for it); a token
 * that comes ends the wait and is taken by the caller as any other. Out
 * of line and cold: it runs only after a timed park, and sx__park_wait
 * is inlined into the workers' loop. */
static __attribute__((noinline, cold)) void wakeup_lost(sx_engine *e,
                                                        sx__worker *w)
{
    sx__park *pk = &e->park;
    if (!asleep_with_work(e))
        return;
    uint64_t grants = pk->grants;
    uint64_t until = sx__now_ns() + (uint64_t)PARK_TIMEOUT_MS * 1000000u;
    if (sx__timers_park_until(e, w) <= until)
        return;
    struct timespec ts = { (time_t)(until / 1000000000u),
                           (long)(until % 1000000000u) };
    while (pk->tokens == 0 && !pk->shutdown && pk->grants == grants)
        if (pthread_cond_timedwait(&pk->cv, &pk->mu, &ts) == ETIMEDOUT)
            break;
    if (!pk->shutdown && pk->grants == grants && asleep_with_work(e))
        /* relaxed: only this worker writes its counters. */
        sx__wstat_add(&w->st.timeout_finds, 1);
}

int sx__park_init(sx__park *pk)
{
    int rc = pthread_mutex_init(&pk->mu, NULL);
    if (rc != 0)
        return -rc;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&pk->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        pthread_mutex_destroy(&pk->mu);
        return -rc;
    }
    atomic_init(&pk->n_parked, 0);
    atomic_init(&pk->n_spinning, 0);
    atomic_init(&pk->all_waiters, 0);
    atomic_init(&pk->quit, false);
    pk->tokens = 0;
    pk->grants = 0;
    pk->shutdown = false;
    return 0;
}

void sx__park_fini(sx__park *pk)
{
    pthread_cond_destroy(&pk->cv);
    pthread_mutex_destroy(&pk->mu);
}

void sx__park_notify(sx_engine *e)
{
    sx__park *pk = &e->park;
    /* seq_cst: the producer's read half of the handshake; it follows the
     * seq_cst RMW that published the work. */
    if (atomic_load_explicit(&pk->n_parked, memory_order_seq_cst) == 0)
        return;
    pthread_mutex_lock(&pk->mu);
    /* relaxed: under mu, which orders it with the parker's decrement. */
    unsigned parked = atomic_load_explicit(&pk->n_parked, memory_order_relaxed);
    if (pk->tokens < parked) {
        pk->tokens++;
        pk->grants++;
        pthread_cond_signal(&pk->cv);
    }
    pthread_mutex_unlock(&pk->mu);
}

bool sx__work_visible(sx_engine *e)
{
    if (global_work_visible(e))
        return true;
    for (unsigned i = 0; i < e->n_workers; i++) {
        sx__deque *d = &e->workers[i].dq;
        /* seq_cst: the parker's read half of the handshake. */
        int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
        int64_t b = atomic_load_explicit(&d->bottom, memory_order_seq_cst);
        if (b > t)
            return true;
    }
    return false;
}

bool sx__park_wait(sx_engine *e, sx__worker *w, uint64_t until_ns)
{
    sx__park *pk = &e->park;
    /* seq_cst: the parker's write half of the handshake. */
    atomic_fetch_add_explicit(&pk->n_parked, 1, memory_order_seq_cst);
    if (sx__work_visible(e)) {
        pthread_mutex_lock(&pk->mu);
        atomic_fetch_sub_explicit(&pk->n_parked, 1, memory_order_relaxed);
        /* A token granted for us meanwhile may now exceed the parked
         * count; drop the excess so tokens <= n_parked holds. */
        unsigned parked =
            atomic_load_explicit(&pk->n_parked, memory_order_relaxed);
        if (pk->tokens > parked)
            pk->tokens = parked;
        pthread_mutex_unlock(&pk->mu);
        return true;
    }
    /* relaxed: only this worker writes its counters. */
    sx__wstat_add(&w->st.parks, 1);
    /* A worker that ended the last process parks once it finds nothing
     * else to do: here it wakes sx_engine_wait_all's waiters. */
    sx__live_idle_check(e);
    /* The sleeps' bound again, now that we are counted: until_ns was taken
     * before, and a worker that added a sleep earlier than its set's others
     * in between saw n_parked at 0 and woke nobody (sx__timer_add); it
     * would then have had no one to fire its sleeps for up to
     * PARK_TIMEOUT_MS should it get stuck in a long step. With this second
     * look, either its next_due is seen here or it sees us counted and
     * notifies (seq_cst both). */
    uint64_t again = sx__timers_park_until(e, w);
    if (again < until_ns)
        until_ns = again;
    /* The periodic re-check, or a sleep's deadline if that comes first
     * (engine/timer/sleep.c): sx__now_ns is CLOCK_MONOTONIC, the clock of cv.
     */
    uint64_t until = sx__now_ns() + (uint64_t)PARK_TIMEOUT_MS * 1000000u;
    if (until_ns < until)
        until = until_ns;
    struct timespec ts = { (time_t)(until / 1000000000u),
                           (long)(until % 1000000000u) };
    /* relaxed: a hint for other parkers (sx__timers_park_until). */
    atomic_store_explicit(&w->parked, true, memory_order_relaxed);
    pthread_mutex_lock(&pk->mu);
    bool timed_out = false;
    while (pk->tokens == 0 && !pk->shutdown) {
        if (pthread_cond_timedwait(&pk->cv, &pk->mu, &ts) == ETIMEDOUT) {
            timed_out = true;
            break;
        }
    }
    if (timed_out)
        wakeup_lost(e, w);
    bool woke = pk->tokens > 0;
    if (woke)
        pk->tokens--;
    bool quit = pk->shutdown;
    /* relaxed: under mu (see notify). */
    atomic_fetch_sub_explicit(&pk->n_parked, 1, memory_order_relaxed);
    pthread_mutex_unlock(&pk->mu);
    /* relaxed: the same hint, withdrawn. */
    atomic_store_explicit(&w->parked, false, memory_order_relaxed);
    if (woke)
        sx__wstat_add(&w->st.wakeups, 1);
    return !quit;
}

void sx__park_shutdown(sx_engine *e)
{
    sx__park *pk = &e->park;
    pthread_mutex_lock(&pk->mu);
    pk->shutdown = true;
    /* release: pairs with the acquire load in the worker loop. */
    atomic_store_explicit(&pk->quit, true, memory_order_release);
    pthread_cond_broadcast(&pk->cv);
    pthread_mutex_unlock(&pk->mu);
}

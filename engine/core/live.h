/* engine/core/live.h — the live count (how many processes are alive) and
 * whether the engine has started: read by spawn and finish on every
 * process (so inline), and by stop's handshake. Internal to engine/core/.
 */
#ifndef SX_ENGINE_CORE_LIVE_H
#define SX_ENGINE_CORE_LIVE_H

#include "engine/core/core.h"

static inline bool sx__started(sx_engine *e)
{
    /* acquire: pairs with the release store in start; registries written
     * before start are visible. */
    return atomic_load_explicit(&e->started, memory_order_acquire) != 0;
}

/* ---- live ---------------------------------------------------------------
 *
 * The live count is not one shared counter: a submit on one core and a
 * finish on the other would bounce its cache line on every process (that
 * one `lock sub` would be 12 % of the submit benchmark's time). Each worker
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
 * finish path's stores to cold lines make it ~2 % of the timers
 * benchmark), so a death may miss a `stopping` just set while stop misses
 * the death: then nobody broadcasts, and stop finds the count at 0 on its
 * next look (once a millisecond while it waits for the processes to end,
 * every 10 ms while it terminates them). A birth's store stays
 * seq_cst: a spawn that stop missed would run on a stopped engine.
 *
 * max_processes, when set, is checked against one shared counter,
 * `admitted` (exact under concurrent submits, as a sum would not be).
 *
 * Waiting for all (sx_engine_wait_all): the waiter counts itself in
 * park.all_waiters (seq_cst RMW, under life_mu), then reads the live count
 * (seq_cst loads), and sleeps on life_cv. Whoever may have ended the last
 * process looks the other way round: a thread that is not a worker
 * after its seq_cst death count (sx__live_died), a worker as it parks,
 * with an RMW (+0) of all_waiters behind its release death counts
 * (sx__live_idle_check, from sx__park_wait): every worker that finished a
 * process parks once it finds nothing else to do, so the last death is
 * looked at within a spin's time, and no finish pays for a waiter (a
 * look at every finish would read every worker's counters, lines the
 * other cores write all the time). Every change of all_waiters is an RMW,
 * so the worker's RMW and the waiter's fall in one order: either the
 * waiter's comes later, reads a value at or after ours and synchronises
 * with it (then its read of live sees our deaths), or ours comes later
 * and reads the waiter's count (then we read live, and broadcast under
 * life_mu, which the waiter holds from its count to its sleep). The
 * non-worker's pair is all seq_cst. Of several lookers the last in that
 * order sees every death before it. A plain store to all_waiters would
 * break the chain. Stop broadcasts too once nothing is alive: a worker
 * that ends the last process after quit is set does not park. */

static inline uint64_t sx__live_now(sx_engine *e)
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
static inline void sx__live_count_own(_Atomic uint64_t *c, memory_order order)
{
    /* relaxed load: only the calling worker writes c. */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          order);
}

static inline void sx__live_born(sx_engine *e, sx__worker *w)
{
    if (w != NULL)
        sx__live_count_own(&w->st.born, memory_order_seq_cst);
    else /* seq_cst: see above */
        atomic_fetch_add_explicit(&e->ext_born, 1, memory_order_seq_cst);
}

static inline void sx__live_died(sx_engine *e, sx__worker *w)
{
    if (w != NULL)
        /* release: a reader that sees the death sees the process's last
         * writes (live_now's figure; stop's handshake needs no more). */
        sx__live_count_own(&w->st.died, memory_order_release);
    else { /* seq_cst: see above */
        atomic_fetch_add_explicit(&e->ext_died, 1, memory_order_seq_cst);
        /* seq_cst: see "waiting for all". */
        if (atomic_load_explicit(&e->park.all_waiters, memory_order_seq_cst) !=
                0 &&
            sx__live_now(e) == 0) {
            pthread_mutex_lock(&e->life_mu);
            pthread_cond_broadcast(&e->life_cv);
            pthread_mutex_unlock(&e->life_mu);
        }
    }
    if (e->cfg.max_processes != 0) /* relaxed: a count, see above */
        atomic_fetch_sub_explicit(&e->admitted, 1, memory_order_relaxed);
    /* seq_cst: see above. */
    if (atomic_load_explicit(&e->stopping, memory_order_seq_cst) &&
        sx__live_now(e) == 0) {
        pthread_mutex_lock(&e->life_mu);
        pthread_cond_broadcast(&e->life_cv);
        pthread_mutex_unlock(&e->life_mu);
    }
}

#endif

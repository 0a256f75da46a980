/* engine/sched/deque.c — Chase-Lev work-stealing deque; see deque.h for the
 * contract and the memory-order argument. */
#include "engine/sched/deque.h"

#include <stdlib.h>

#include <stepx/process.h>

int sx__deque_init(sx__deque *d, size_t cap)
{
    if (cap < 2 || (cap & (cap - 1)) != 0)
        return SX_EINVAL;
    d->buf = calloc(cap, sizeof(*d->buf));
    if (d->buf == NULL)
        return SX_ENOMEM;
    d->mask = (int64_t)cap - 1;
    /* relaxed: the deque is not yet shared; publication of the worker that
     * owns it (thread creation) orders these stores. */
    atomic_store_explicit(&d->top, 0, memory_order_relaxed);
    atomic_store_explicit(&d->bottom, 0, memory_order_relaxed);
    return 0;
}

void sx__deque_fini(sx__deque *d)
{
    free(d->buf);
    d->buf = NULL;
}

bool sx__deque_push(sx__deque *d, void *item)
{
    /* relaxed: only the owner writes bottom. */
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    /* acquire: pairs with the CAS on top in steal, so a slot a thief has
     * claimed (and read) is not overwritten before the thief read it. A
     * stale (smaller) top only makes the ring look fuller. */
    int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
    if (b - t > d->mask)
        return false;
    /* relaxed: published by the release store of bottom below. */
    atomic_store_explicit(&d->buf[b & d->mask], item, memory_order_relaxed);
    /* release: pairs with the seq_cst (acquire) load of bottom in steal; a
     * thief that sees b + 1 sees the slot and everything the owner wrote to
     * the item before pushing it. */
    atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
    return true;
}

void *sx__deque_pop(sx__deque *d)
{
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
    /* seq_cst exchange = the store of bottom followed by the full fence of
     * Lê et al.: a thief that reads top after this sees the smaller bottom,
     * or we see its increment of top below (Dekker-style). */
    atomic_exchange_explicit(&d->bottom, b, memory_order_seq_cst);
    /* seq_cst: the other half of the same argument. */
    int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
    if (t > b) {
        /* Empty: restore. relaxed: only the owner writes bottom, and no
         * thief can take anything from an empty ring. */
        atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
        return NULL;
    }
    void *item =
        atomic_load_explicit(&d->buf[b & d->mask], memory_order_relaxed);
    if (t == b) {
        /* The last item: race the thieves for it with the same CAS they use.
         * seq_cst: ordered with the thieves' CAS and loads. */
        if (!atomic_compare_exchange_strong_explicit(
                &d->top, &t, t + 1, memory_order_seq_cst, memory_order_relaxed))
            item = NULL;
        /* relaxed: the deque is empty either way (top == b + 1). */
        atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
    }
    return item;
}

void *sx__deque_steal(sx__deque *d)
{
    /* seq_cst loads of top then bottom: the thief's side of the Dekker
     * argument with the exchange in pop (replaces the paper's fence). The
     * load of bottom also acquires the owner's release store in push. */
    int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_seq_cst);
    if (t >= b)
        return NULL;
    /* Read the slot before the CAS that claims it: after the CAS the owner
     * may reuse the slot. relaxed: made visible by the load of bottom. */
    void *item =
        atomic_load_explicit(&d->buf[t & d->mask], memory_order_relaxed);
    /* seq_cst: claims index t against other thieves and the owner's CAS on
     * the last item; release half pairs with the acquire load in push. */
    if (!atomic_compare_exchange_strong_explicit(
            &d->top, &t, t + 1, memory_order_seq_cst, memory_order_relaxed))
        return SX__DEQUE_ABORT;
    return item;
}

size_t sx__deque_steal_half(sx__deque *victim, void **out, size_t max)
{
    size_t want = (sx__deque_size(victim) + 1) / 2;
    if (want > max)
        want = max;
    size_t n = 0;
    int aborts = 0;
    while (n < want) {
        void *item = sx__deque_steal(victim);
        if (item == NULL)
            break;
        if (item == SX__DEQUE_ABORT) {
            /* Contended: give up after a few tries rather than fight the
             * owner or other thieves for every item. */
            if (++aborts > 4)
                break;
            continue;
        }
        out[n++] = item;
    }
    return n;
}

size_t sx__deque_size(sx__deque *d)
{
    /* relaxed: an estimate for heuristics and stats; steal re-checks with
     * seq_cst loads before claiming anything. */
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    return b > t ? (size_t)(b - t) : 0;
}

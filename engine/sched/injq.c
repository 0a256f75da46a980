/* engine/sched/injq.c — the injection ring; see injq.h. */
#include "engine/sched/injq.h"

#include <stdlib.h>

#include <stepx/process.h>

int sx__injq_init(sx__injq *q, size_t cap)
{
    if (cap < 2 || (cap & (cap - 1)) != 0)
        return SX_EINVAL;
    q->buf = calloc(cap, sizeof(*q->buf));
    if (q->buf == NULL)
        return SX_ENOMEM;
    sx__spin_init(&q->mu);
    q->mask = cap - 1;
    /* No atomic_init loop: calloc's zero bytes are a null pointer, and the
     * ring's pages stay untouched until a burst of submits reaches them
     * (SX__INJQ_CAP is 64 Ki slots: 512 KiB). */
    atomic_init(&q->head, 0);
    atomic_init(&q->tail, 0);
    q->head_seen = 0;
    return 0;
}

void sx__injq_fini(sx__injq *q)
{
    if (q->buf == NULL)
        return;
    free(q->buf);
    q->buf = NULL;
}

bool sx__injq_push(sx__injq *q, void *item)
{
    /* relaxed: tail is written only under mu, which we hold. */
    uint64_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
    if (t - q->head_seen > q->mask) {
        /* acquire: pairs with the release CAS in grab; the consumers that
         * moved head past a slot have read it before we write it again
         * (a slot below the head_seen of an earlier acquire load was read
         * before that load too). */
        q->head_seen = atomic_load_explicit(&q->head, memory_order_acquire);
        if (t - q->head_seen > q->mask)
            return false;
    }
    /* relaxed: published by the store of tail below. */
    atomic_store_explicit(&q->buf[t & q->mask], item, memory_order_relaxed);
    /* seq_cst: release for the item (and everything written to it before,
     * such as a new process's slot), which a consumer's acquire load of
     * tail then sees; seq_cst for the producer's half of the park
     * handshake, whose load of n_parked follows (engine/sched/park.c). */
    atomic_store_explicit(&q->tail, t + 1, memory_order_seq_cst);
    return true;
}

size_t sx__injq_grab(sx__injq *q, void **out, size_t max)
{
    /* acquire: pairs with the release CAS of another consumer (not needed
     * for the items, which tail publishes, but cheap on x86). */
    uint64_t h = atomic_load_explicit(&q->head, memory_order_acquire);
    for (;;) {
        /* acquire: pairs with the seq_cst (release) store in push: the
         * items below tail and what they point to are visible. */
        uint64_t t = atomic_load_explicit(&q->tail, memory_order_acquire);
        uint64_t n = t - h;
        if (n == 0)
            return 0; /* (t >= h: head never passes tail, t is read later) */
        n -= n / 2;
        if (n > max)
            n = max;
        for (uint64_t i = 0; i < n; i++)
            /* relaxed: the slot is not rewritten before head passes it,
             * and head passes it only by a CAS that we or another
             * consumer win; if another one won, ours fails below. */
            out[i] = atomic_load_explicit(&q->buf[(h + i) & q->mask],
                                          memory_order_relaxed);
        /* release: pairs with the acquire load of head in push (our reads
         * of the slots come before the producer rewrites them). acquire
         * on failure: h is re-read and the loop goes on with it. */
        if (atomic_compare_exchange_weak_explicit(&q->head, &h, h + n,
                                                  memory_order_release,
                                                  memory_order_acquire))
            return (size_t)n;
    }
}

size_t sx__injq_size(sx__injq *q)
{
    /* seq_cst (both): also the parker's re-scan (engine/sched/park.c), ordered
     * after its announcement. head first: then tail >= head. */
    uint64_t h = atomic_load_explicit(&q->head, memory_order_seq_cst);
    uint64_t t = atomic_load_explicit(&q->tail, memory_order_seq_cst);
    /* Between the two loads the consumers can take items and the producer
     * push new ones into the slots they freed, so t - h can exceed the
     * capacity (by thousands in test_injq's ring of 64): cap it. */
    uint64_t n = t > h ? t - h : 0;
    return n > q->mask + 1 ? (size_t)(q->mask + 1) : (size_t)n;
}

/* engine/sched/injq.h — the injection ring: where threads that are not workers
 * put the processes they submit.
 *
 * A bounded ring with one producer at a time and any number of consumers.
 * Producers (the submitting threads) are serialised by `mu`; a push is a
 * plain store into the ring and a store of `tail`, no read-modify-write
 * and no lock shared with the workers. A consumer (a worker) takes the
 * oldest half of what is there, up to a maximum, with one CAS on `head`,
 * as Go's runqgrab does: a single CAS can claim several items here (unlike
 * sx__deque_steal_half) because the producer never takes items back, so
 * nothing but other consumers moves `head`.
 *
 * This is the front of the global FIFO (docs/SCHEDULER.md): when the ring
 * is full the producer moves its oldest (up to 2,048) to the global queue
 * in one lock (engine/sched/inject.c, inject_full), and workers look at
 * the global queue before the
 * ring, so the processes of one submitting thread start in about the order
 * it submitted them: a worker's batches reorder a little, and a worker can
 * take newer items from the ring while a move is under way (the moved
 * items are then in neither queue for a moment).
 *
 * Threads: push [any thread, holding mu]; grab and size [any thread].
 */
#ifndef SX_ENGINE_INJQ_H
#define SX_ENGINE_INJQ_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sched/spin.h"

typedef struct {
    /* Advanced by consumers (CAS); read by a producer when its copy
     * (head_seen) shows the ring full. */
    alignas(64) _Atomic uint64_t head;
    /* Written by the producer under mu; read by consumers. */
    alignas(64) _Atomic uint64_t tail;
    sx__spin mu; /* serialises producers (engine/sched/spin.h) */
    /* A value head had, read by a producer under mu: the producers' room
     * check uses it and reads head again only when it shows the ring full.
     * head only grows, so the room it shows is never more than there is;
     * and head is the consumers' hottest line (each grab's CAS), which a
     * producer would otherwise pull over on every push. */
    uint64_t head_seen;
    uint64_t mask; /* capacity - 1; immutable after init */
    _Atomic(void *) *buf;
} sx__injq;

/* cap must be a power of two >= 2. Returns 0 or SX_EINVAL / SX_ENOMEM. */
int sx__injq_init(sx__injq *q, size_t cap);
void sx__injq_fini(sx__injq *q);
/* [holding mu] Appends item; false when the ring is full. The store of tail
 * is seq_cst: the producer's publish in the park protocol
 * (engine/sched/park.c). */
bool sx__injq_push(sx__injq *q, void *item);
/* [any thread] Takes the oldest half of the items (rounded up), at most
 * max, oldest first, into out. Returns how many (0: empty). */
size_t sx__injq_grab(sx__injq *q, void **out, size_t max);
/* [any thread] About how many items are in the ring, from 0 to its
 * capacity: 0 only if it was empty when tail was read (then head had
 * caught up with it), and otherwise a count that may be off by what moved
 * between the loads of head and tail. seq_cst loads: the parker's re-scan
 * in the park protocol. */
size_t sx__injq_size(sx__injq *q);

#endif

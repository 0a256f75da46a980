/* engine/sched/deque.h — the Chase-Lev work-stealing deque (fixed ring).
 *
 * After Chase & Lev (SPAA 2005) and the C11 formulation of Lê, Pop, Cohen and
 * Zappa Nardelli (PPoPP 2013), with one change: the fences of that paper are
 * replaced by seq_cst operations on `top` and `bottom` (an exchange in pop,
 * seq_cst loads in steal), which cost the same on x86 and which
 * ThreadSanitizer models (it does not model atomic_thread_fence).
 *
 * The ring never grows: a push into a full deque fails and the caller sends
 * the item to the global queue instead (a house rule, docs/CONTRIBUTING.md:
 * resizing is where the published C11 version and crossbeam both had bugs).
 *
 * Threads: push and pop are [owner] only; steal, steal_half and size are
 * [any thread].
 */
#ifndef SX_ENGINE_DEQUE_H
#define SX_ENGINE_DEQUE_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Indices are signed 64-bit and only grow; slot = index & mask.
 * Invariant: top <= bottom + 1 transiently (during pop), items live in
 * [top, bottom). */
typedef struct sx__deque {
    /* Written by thieves (CAS) and by the owner (CAS on the last item);
     * read by everyone. Own cache line: thieves hammer it. */
    alignas(64) _Atomic int64_t top;
    /* Written by the owner only; read by thieves. */
    alignas(64) _Atomic int64_t bottom;
    int64_t mask;         /* capacity - 1; immutable after init */
    _Atomic(void *) *buf; /* owned by the deque */
} sx__deque;

/* A steal that lost a race (another thief or the owner got the item first);
 * the deque may still hold items. */
#define SX__DEQUE_ABORT ((void *)1)

/* cap must be a power of two >= 2. Returns 0 or SX_EINVAL / SX_ENOMEM. */
int sx__deque_init(sx__deque *d, size_t cap);
void sx__deque_fini(sx__deque *d);

/* [owner] Pushes at the bottom. Returns false when the ring is full. */
bool sx__deque_push(sx__deque *d, void *item);
/* [owner] Pops the newest item (LIFO); NULL when empty. */
void *sx__deque_pop(sx__deque *d);
/* [any thread] Takes the oldest item (FIFO); NULL when empty, or
 * SX__DEQUE_ABORT when it lost a race. */
void *sx__deque_steal(sx__deque *d);
/* [any thread] Moves up to half of the victim's items (rounded up, at most
 * max), oldest first, into out. Returns how many. Each item is claimed with
 * its own CAS on top: a single CAS claiming several items would race with
 * the owner's CAS-free pop (see docs/SCHEDULER.md, "steal half"). */
size_t sx__deque_steal_half(sx__deque *victim, void **out, size_t max);
/* [any thread] Number of items at some recent moment (never negative). */
size_t sx__deque_size(sx__deque *d);

#endif

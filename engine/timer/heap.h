/* engine/timer/heap.h — a binary min-heap of absolute deadlines: each
 * libuv loop keeps one behind a single uv timer (engine/io/deadline.c), so
 * that a sleep or a yield's timeout costs a heap insert and no libuv
 * handle (no uv_close round trip, no allocation). The workers' own sleeps
 * use a timer wheel instead (engine/timer/twheel.h).
 *
 * Threads: a heap belongs to one thread (its loop's); no locks.
 */
#ifndef SX_ENGINE_TIMER_HEAP_H
#define SX_ENGINE_TIMER_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A deadline on a heap. [loop] */
typedef struct sx__iotimer {
    uint64_t due_ns; /* absolute, sx__now_ns's clock */
    uint32_t idx;    /* position in the heap + 1; 0 = not armed */
    void (*fire)(struct sx__iotimer *t);
} sx__iotimer;

typedef struct {
    sx__iotimer **a; /* a[0] is the earliest */
    size_t n, cap;
} sx__theap;

/* Adds t (not armed) with its due_ns set. false: no memory to grow (the
 * heap is unchanged). */
bool sx__theap_add(sx__theap *h, sx__iotimer *t);
/* Takes t (armed) off the heap; t->idx becomes 0. Never fails. */
void sx__theap_remove(sx__theap *h, sx__iotimer *t);
/* The earliest deadline, or NULL when empty. */
static inline sx__iotimer *sx__theap_min(const sx__theap *h)
{
    return h->n > 0 ? h->a[0] : NULL;
}
void sx__theap_fini(sx__theap *h);

#endif

/* engine/sched/globalq.h — the global FIFO run queue.
 *
 * Takes new submissions, wake-ups from threads that are not workers, and
 * processes that used up their turn. Intrusive (the node lives in the
 * process), unbounded, protected by one mutex: every operation is a few
 * pointer moves under it, and workers take up to 17 items per lock (one to
 * run, 16 into their deque), so the lock is taken far less often than the
 * deques are touched. `len` lets workers skip the lock when it is empty.
 *
 * Threads: all functions [any thread].
 */
#ifndef SX_ENGINE_GLOBALQ_H
#define SX_ENGINE_GLOBALQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

typedef struct sx__gq_node {
    struct sx__gq_node *next; /* guarded by the queue's mutex */
} sx__gq_node;

typedef struct {
    pthread_mutex_t mu;
    sx__gq_node *head; /* oldest; guarded by mu */
    sx__gq_node *tail; /* newest; guarded by mu */
    /* Written under mu; read without it as a hint (relaxed) and by the park
     * protocol (seq_cst, see engine/sched/park.c). */
    _Atomic size_t len;
} sx__globalq;

int sx__globalq_init(sx__globalq *q);
void sx__globalq_fini(sx__globalq *q);
void sx__globalq_push(sx__globalq *q, sx__gq_node *n);
/* Appends the list first..last (n nodes, linked through next) in order. */
void sx__globalq_push_list(sx__globalq *q, sx__gq_node *first,
                           sx__gq_node *last, size_t n);
/* Takes up to max oldest nodes into out, oldest first. Returns how many. */
size_t sx__globalq_pop_batch(sx__globalq *q, sx__gq_node **out, size_t max);
size_t sx__globalq_len(sx__globalq *q);

#endif

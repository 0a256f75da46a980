/* engine/sched/globalq.h — the global FIFO run queue.
 *
 * Takes new submissions, wake-ups from threads that are not workers, and
 * processes that used up their turn. Intrusive (the node lives in the
 * process), unbounded, protected by one mutex: every operation is a few
 * pointer moves under it, and workers take up to 17 items per lock (one to
 * run, 16 into their deque), so the lock is taken far less often than the
 * deques are touched. `len` lets workers skip the lock when it is empty.
 *
 * Besides single nodes and lists of them, the FIFO takes chunks: arrays of
 * node addresses, one element of the list, taken from in order. A batch
 * taken from a chunk reads no node (a list is walked one node at a time,
 * each a cache miss when the nodes are cold: the injection ring's
 * overflow, engine/sched/inject.c, inject_full). A link to a chunk has its
 * low bit set (nodes are pointer-aligned); only globalq.c sees it.
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

/* A chunk: items[head..n) are queued, oldest first. */
typedef struct {
    sx__gq_node link; /* its place in the queue */
    size_t head, n;
    sx__gq_node *items[];
} sx__gq_chunk;

int sx__globalq_init(sx__globalq *q);
/* Frees the chunks still queued (the nodes are the caller's). */
void sx__globalq_fini(sx__globalq *q);
/* An empty chunk for up to cap nodes (malloc), or NULL. */
sx__gq_chunk *sx__globalq_chunk_new(size_t cap);
/* Appends c's nodes (items[0..n), n > 0) in order, as one element: the
 * queue owns c from now on and frees it once its last node is taken. */
void sx__globalq_push_chunk(sx__globalq *q, sx__gq_chunk *c);
void sx__globalq_push(sx__globalq *q, sx__gq_node *n);
/* Appends the list first..last (n nodes, linked through next) in order. */
void sx__globalq_push_list(sx__globalq *q, sx__gq_node *first,
                           sx__gq_node *last, size_t n);
/* Takes up to max oldest nodes into out, oldest first. Returns how many. */
size_t sx__globalq_pop_batch(sx__globalq *q, sx__gq_node **out, size_t max);
size_t sx__globalq_len(sx__globalq *q);

#endif

/* engine/sched/globalq.c — the global FIFO run queue; see globalq.h. */
/* For PTHREAD_MUTEX_ADAPTIVE_NP (glibc). Defined here only, before any
 * header: the rest of the project stays on _POSIX_C_SOURCE
 * (docs/CONTRIBUTING.md). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "engine/sched/globalq.h"

#include <stepx/process.h>

int sx__globalq_init(sx__globalq *q)
{
    /* Adaptive: a contended lock spins briefly before it sleeps. The
     * critical sections are a few pointer moves, but the submitting
     * thread, the workers and their sched_yield searches all take this
     * lock; with a plain mutex a burst of contention turns into futex
     * sleeps and wakes (a few µs each on a VM) and the submit benchmark
     * falls into a slow mode: 1.4-1.8 µs per submit instead of ~0.45,
     * 45 % of its samples in the kernel's futex paths. */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    int rc = pthread_mutex_init(&q->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    if (rc != 0)
        return -rc;
    q->head = q->tail = NULL;
    /* relaxed: not shared yet. */
    atomic_store_explicit(&q->len, 0, memory_order_relaxed);
    return 0;
}

void sx__globalq_fini(sx__globalq *q)
{
    pthread_mutex_destroy(&q->mu);
}

void sx__globalq_push_list(sx__globalq *q, sx__gq_node *first,
                           sx__gq_node *last, size_t n)
{
    if (n == 0)
        return;
    last->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail != NULL)
        q->tail->next = first;
    else
        q->head = first;
    q->tail = last;
    /* seq_cst: the producer's half of the park protocol reads "is anyone
     * parked" after this; a parking worker reads len after announcing
     * itself (docs/SCHEDULER.md). Modified only under mu, so a plain
     * load + store would do for the value itself. */
    atomic_fetch_add_explicit(&q->len, n, memory_order_seq_cst);
    pthread_mutex_unlock(&q->mu);
}

void sx__globalq_push(sx__globalq *q, sx__gq_node *n)
{
    sx__globalq_push_list(q, n, n, 1);
}

size_t sx__globalq_pop_batch(sx__globalq *q, sx__gq_node **out, size_t max)
{
    /* relaxed: a hint to skip the lock; re-checked under it. */
    if (max == 0 || atomic_load_explicit(&q->len, memory_order_relaxed) == 0)
        return 0;
    size_t n = 0;
    pthread_mutex_lock(&q->mu);
    while (n < max && q->head != NULL) {
        sx__gq_node *node = q->head;
        q->head = node->next;
        node->next = NULL;
        out[n++] = node;
    }
    if (q->head == NULL)
        q->tail = NULL;
    /* relaxed: modified only under mu; readers use it as a hint or after
     * their own seq_cst announcement (park protocol). */
    atomic_fetch_sub_explicit(&q->len, n, memory_order_relaxed);
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t sx__globalq_len(sx__globalq *q)
{
    /* seq_cst: also used by the parking worker's re-scan, which must be
     * ordered after its announcement (see engine/sched/park.c). */
    return atomic_load_explicit(&q->len, memory_order_seq_cst);
}

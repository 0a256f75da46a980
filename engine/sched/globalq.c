/* engine/sched/globalq.c — the global FIFO run queue; see globalq.h. */
/* For PTHREAD_MUTEX_ADAPTIVE_NP (glibc). Defined here only, before any
 * header: the rest of the project stays on _POSIX_C_SOURCE
 * (docs/CONTRIBUTING.md). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "engine/sched/globalq.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <stepx/process.h>

#include "process/fault.h"

/* A link to a chunk carries this bit (see globalq.h). */
#define CHUNK_BIT ((uintptr_t)1)

static bool is_chunk(const sx__gq_node *n)
{
    return ((uintptr_t)n & CHUNK_BIT) != 0;
}

static sx__gq_chunk *chunk_of(sx__gq_node *n)
{
    return (sx__gq_chunk *)((uintptr_t)n & ~CHUNK_BIT);
}

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
    sx__gq_node *n = q->head;
    while (n != NULL) {
        if (is_chunk(n)) {
            sx__gq_chunk *c = chunk_of(n);
            n = c->link.next;
            free(c);
        } else {
            n = n->next;
        }
    }
    q->head = q->tail = NULL;
    pthread_mutex_destroy(&q->mu);
}

sx__gq_chunk *sx__globalq_chunk_new(size_t cap)
{
    if (SX__FAULT(SX__FAULT_GQ_CHUNK))
        return NULL;
    sx__gq_chunk *c = malloc(sizeof(*c) + cap * sizeof(c->items[0]));
    if (c != NULL) {
        c->link.next = NULL;
        c->head = c->n = 0;
    }
    return c;
}

/* [holding mu] Appends the element at `link` (its link as the list holds
 * it: tagged for a chunk) whose last node is last, n nodes in all. */
static void append_locked(sx__globalq *q, sx__gq_node *link, sx__gq_node *last,
                          size_t n)
{
    if (q->tail != NULL)
        q->tail->next = link;
    else
        q->head = link;
    q->tail = last;
    /* seq_cst: the producer's half of the park protocol reads "is anyone
     * parked" after this; a parking worker reads len after announcing
     * itself (docs/SCHEDULER.md). Modified only under mu, so a plain
     * load + store would do for the value itself. */
    atomic_fetch_add_explicit(&q->len, n, memory_order_seq_cst);
}

void sx__globalq_push_chunk(sx__globalq *q, sx__gq_chunk *c)
{
    c->link.next = NULL;
    pthread_mutex_lock(&q->mu);
    append_locked(q, (sx__gq_node *)((uintptr_t)&c->link | CHUNK_BIT), &c->link,
                  c->n - c->head);
    pthread_mutex_unlock(&q->mu);
}

void sx__globalq_push_list(sx__globalq *q, sx__gq_node *first,
                           sx__gq_node *last, size_t n)
{
    if (n == 0)
        return;
    last->next = NULL;
    pthread_mutex_lock(&q->mu);
    append_locked(q, first, last, n);
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
    sx__gq_chunk *done = NULL; /* emptied chunks, freed after the lock */
    pthread_mutex_lock(&q->mu);
    while (n < max && q->head != NULL) {
        sx__gq_node *node = q->head;
        if (is_chunk(node)) {
            sx__gq_chunk *c = chunk_of(node);
            while (n < max && c->head < c->n)
                out[n++] = c->items[c->head++];
            if (c->head < c->n)
                break; /* max taken; the rest stays in front */
            q->head = c->link.next;
            c->link.next = (sx__gq_node *)done;
            done = c;
            continue;
        }
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
    while (done != NULL) {
        sx__gq_chunk *next = (sx__gq_chunk *)done->link.next;
        free(done);
        done = next;
    }
    return n;
}

size_t sx__globalq_len(sx__globalq *q)
{
    /* seq_cst: also used by the parking worker's re-scan, which must be
     * ordered after its announcement (see engine/sched/park.c). */
    return atomic_load_explicit(&q->len, memory_order_seq_cst);
}

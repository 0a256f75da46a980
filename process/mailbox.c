/* process/mailbox.c — the per-process event queue (Vyukov intrusive MPSC)
 * and the control stack; see mailbox.h for the contract. */
#include "process/mailbox.h"

#include <sched.h>

void sx__mpsc_init(sx__mpsc *q)
{
    /* relaxed: the queue is not shared yet; whoever publishes it (the
     * process table) orders these stores. */
    atomic_store_explicit(&q->stub.next, NULL, memory_order_relaxed);
    atomic_store_explicit(&q->head, &q->stub, memory_order_relaxed);
    q->tail = &q->stub;
}

void sx__mpsc_push(sx__mpsc *q, sx__mpsc_node *n)
{
    /* relaxed: published together with the node by the release store of
     * prev->next below. */
    atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
    /* acq_rel: release orders n's contents (and n->next = NULL) before any
     * later producer links onto n; acquire orders our store into prev->next
     * after the earlier producer's initialisation of prev. */
    sx__mpsc_node *prev =
        atomic_exchange_explicit(&q->head, n, memory_order_acq_rel);
    /* release: pairs with the acquire loads of next in pop; the consumer
     * that follows the link sees everything written to n before the push. */
    atomic_store_explicit(&prev->next, n, memory_order_release);
}

void sx__mpsc_push_chain(sx__mpsc *q, sx__mpsc_node *first, sx__mpsc_node *last)
{
    /* relaxed: as in push; the links inside the chain were written before
     * and are published with it by the release store below. */
    atomic_store_explicit(&last->next, NULL, memory_order_relaxed);
    /* acq_rel: as in push, for the whole chain at once. */
    sx__mpsc_node *prev =
        atomic_exchange_explicit(&q->head, last, memory_order_acq_rel);
    /* release: the consumer that follows prev->next to first sees the
     * chain's nodes and their links. */
    atomic_store_explicit(&prev->next, first, memory_order_release);
}

sx__mpsc_node *sx__mpsc_pop(sx__mpsc *q)
{
    sx__mpsc_node *tail = q->tail;
    /* acquire: pairs with the release store of next in push. */
    sx__mpsc_node *next =
        atomic_load_explicit(&tail->next, memory_order_acquire);
    if (tail == &q->stub) {
        if (next == NULL)
            return NULL;
        q->tail = next;
        tail = next;
        next = atomic_load_explicit(&tail->next, memory_order_acquire);
    }
    if (next != NULL) {
        q->tail = next;
        return tail;
    }
    /* tail has no successor: it is the last node, or a push after it is
     * half done. acquire: pairs with the exchange in push. */
    sx__mpsc_node *head = atomic_load_explicit(&q->head, memory_order_acquire);
    if (tail != head)
        return NULL; /* a producer is between its exchange and its link */
    /* tail is the only node: put the stub behind it so tail can be
     * returned while the queue stays well formed. */
    sx__mpsc_push(q, &q->stub);
    next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (next != NULL) {
        q->tail = next;
        return tail;
    }
    return NULL; /* another push slipped in before the stub: later */
}

bool sx__mpsc_empty(sx__mpsc *q)
{
    sx__mpsc_node *tail = q->tail;
    /* acquire: as in pop. Empty means the stub is the tail, nothing is
     * linked after it, and no push has exchanged head since. */
    return tail == &q->stub &&
           atomic_load_explicit(&tail->next, memory_order_acquire) == NULL &&
           atomic_load_explicit(&q->head, memory_order_acquire) == &q->stub;
}

bool sx__mpsc_find(sx__mpsc *q, bool (*pred)(const sx__mpsc_node *))
{
    /* acquire: pairs with the exchange in push: every push whose exchange
     * is ordered before this load is waited for below. */
    sx__mpsc_node *h = atomic_load_explicit(&q->head, memory_order_acquire);
    sx__mpsc_node *n = q->tail;
    for (;;) {
        /* h has no successor to wait for: pop takes it with the stub. */
        if (n == h)
            return n != &q->stub && pred(n);
        /* Any other node is tested only once its link is stored, i.e.
         * once pop can return it. Testing it first would let the worker
         * find a node that pop cannot hand over yet (the tail, behind a
         * push half done): the worker would run the process again at
         * once, collect nothing, find the node again, and so on, a hot
         * loop without a yield for as long as that producer is
         * preempted. */
        sx__mpsc_node *next;
        unsigned spins = 0;
        /* acquire: pairs with the release store of next in push. */
        while ((next = atomic_load_explicit(&n->next, memory_order_acquire)) ==
               NULL) {
            if (++spins > 64)
                sched_yield(); /* the producer was preempted mid-push */
        }
        if (n != &q->stub && pred(n))
            return true;
        n = next;
    }
}

void sx__ctlstack_init(sx__ctlstack *s)
{
    /* relaxed: not shared yet. */
    atomic_store_explicit(&s->top, NULL, memory_order_relaxed);
}

void sx__ctlstack_push(sx__ctlstack *s, sx__mpsc_node *n)
{
    /* relaxed: the first guess; the CAS re-reads it. */
    sx__mpsc_node *top = atomic_load_explicit(&s->top, memory_order_relaxed);
    do {
        /* relaxed: published by the release CAS below. */
        atomic_store_explicit(&n->next, top, memory_order_relaxed);
        /* release: pairs with the acquire exchange in take, which then sees
         * n's contents and its next. No ABA: nodes are only ever pushed,
         * and the consumer takes the whole list at once. */
    } while (!atomic_compare_exchange_weak_explicit(
        &s->top, &top, n, memory_order_release, memory_order_relaxed));
}

sx__mpsc_node *sx__ctlstack_take(sx__ctlstack *s)
{
    /* acquire: pairs with the release CAS in push. */
    sx__mpsc_node *n =
        atomic_exchange_explicit(&s->top, NULL, memory_order_acquire);
    sx__mpsc_node *rev = NULL;
    while (n != NULL) {
        /* relaxed: ordered by the acquire exchange above. */
        sx__mpsc_node *next =
            atomic_load_explicit(&n->next, memory_order_relaxed);
        atomic_store_explicit(&n->next, rev, memory_order_relaxed);
        rev = n;
        n = next;
    }
    return rev;
}

bool sx__ctlstack_nonempty(sx__ctlstack *s)
{
    /* relaxed: a hint only; take is the real check. */
    return atomic_load_explicit(&s->top, memory_order_relaxed) != NULL;
}

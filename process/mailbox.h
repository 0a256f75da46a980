/* process/mailbox.h — the per-process event queue.
 *
 * Two lock-free structures:
 *  - an intrusive multi-producer single-consumer FIFO after Dmitry Vyukov's
 *    "intrusive MPSC node-based queue": push is one exchange and one store,
 *    pop touches only consumer-owned fields in the common case. FIFO per
 *    producer; no event is ever lost.
 *  - a control stack (Treiber push, consumer takes everything at once and
 *    reverses it) for control events that must overtake queued user
 *    messages (cancel).
 *
 * Threads: push functions are [any thread]; pop / take are [consumer] (the
 * one worker running the process's step, or whoever owns the queue after
 * the process finished).
 *
 * A push is "half done" between its exchange of head and its store of the
 * predecessor's next. While it is, pop returns NULL even though later
 * pushes may be complete: the consumer must not treat NULL as "nothing will
 * ever come". The engine relies on every producer ringing the process's
 * state word after its push completes (engine/sched/worker.c). A
 * producer that won the state word before queueing anything (the
 * hand-off there) owns the consumer end until it queues the process, and
 * may add nodes at that end instead.
 */
#ifndef SX_PROCESS_MAILBOX_H
#define SX_PROCESS_MAILBOX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct sx__mpsc_node {
    /* Written by the producer that pushed the successor (release), read by
     * the consumer (acquire). */
    _Atomic(struct sx__mpsc_node *) next;
} sx__mpsc_node;

typedef struct {
    /* The most recently pushed node. Exchanged by producers. */
    _Atomic(sx__mpsc_node *) head;
    /* A producer writes its next when it is the newest node (the consumer
     * put it back behind the last node it took): head and stub are what
     * a push touches (a process slot keeps them on its send path's line:
     * engine/core/proc.h). */
    sx__mpsc_node stub;
    /* The oldest node not yet popped. Consumer only. */
    sx__mpsc_node *tail;
} sx__mpsc;

void sx__mpsc_init(sx__mpsc *q);
/* [any thread] n must not be in any queue. */
void sx__mpsc_push(sx__mpsc *q, sx__mpsc_node *n);
/* [any thread] Pushes first..last, already linked through next (relaxed
 * stores suffice) and in no queue, with one exchange: they arrive together,
 * in chain order, like that many pushes by one producer. */
void sx__mpsc_push_chain(sx__mpsc *q, sx__mpsc_node *first,
                         sx__mpsc_node *last);
/* [consumer] The oldest node, or NULL when empty or a push is half done. */
sx__mpsc_node *sx__mpsc_pop(sx__mpsc *q);
/* [consumer] Puts n back at the front: n must be the node the consumer's
 * last pop returned, with no pop since. Sound because pop returns a node
 * only once its successor is linked (so n->next is set and no producer
 * writes it again) and only the consumer moves tail. */
static inline void sx__mpsc_unpop(sx__mpsc *q, sx__mpsc_node *n)
{
    q->tail = n;
}
/* [consumer, or the owner of a process not yet queued: the hand-off]
 * Puts first..last, linked through next (relaxed stores
 * suffice) and in no queue, at the front: they are popped, in chain order,
 * before everything queued. Sound for the reason unpop is: only the
 * consumer moves tail, and every node the chain now leads to (the old
 * tail) is one pop could return or the stub. */
static inline void sx__mpsc_unpop_chain(sx__mpsc *q, sx__mpsc_node *first,
                                        sx__mpsc_node *last)
{
    /* relaxed: the chain is the consumer's; producers never read it. */
    atomic_store_explicit(&last->next, q->tail, memory_order_relaxed);
    q->tail = first;
}
/* [consumer] True when there is nothing to pop and no push in progress. */
bool sx__mpsc_empty(sx__mpsc *q);

/* [consumer] Walks the queued nodes oldest first, without popping, until
 * pred returns true (then true). Every push that had exchanged head when
 * the walk began is waited for: if such a push is half done, the walk
 * spins (then yields the CPU) until its link appears, so no node queued
 * before the call is missed. A node is tested only once pop can return
 * it (its successor is linked, or it is the head the walk read), so a
 * true answer means the next pop returns a node (unless a push that began
 * after the walk slips in beside pop's stub: that pop returns NULL, and
 * the next walk waits for the push). The wait is bounded by a producer
 * finishing two instructions (longer only if it is preempted between them). */
bool sx__mpsc_find(sx__mpsc *q, bool (*pred)(const sx__mpsc_node *));

/* The control stack: a singly linked list through sx__mpsc_node.next. */
typedef struct {
    _Atomic(sx__mpsc_node *) top;
} sx__ctlstack;

void sx__ctlstack_init(sx__ctlstack *s);
/* [any thread] */
void sx__ctlstack_push(sx__ctlstack *s, sx__mpsc_node *n);
/* [consumer] Takes every pushed node, returned oldest first as a list
 * linked through next (NULL-terminated); NULL when empty. */
sx__mpsc_node *sx__ctlstack_take(sx__ctlstack *s);
/* [any thread] A hint: true when something may be there. */
bool sx__ctlstack_nonempty(sx__ctlstack *s);

#endif

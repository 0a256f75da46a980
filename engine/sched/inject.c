/* engine/sched/inject.c — putting a process at the back of the line:
 * into the injection ring (engine/sched/injq.h), and when that is full,
 * moving the ring's oldest to the global queue (engine/sched/globalq.h)
 * to make room. docs/SCHEDULER.md §2 has the whole FIFO.
 *
 * Threads: sx__inject [any thread].
 */
#include <stdlib.h>

#include "engine/core/core.h"
#include "process/fault.h"

/* Adds n to what inject_full moves: chunk c, or the list first..last when
 * there is no chunk. */
static void move_add(sx__gq_chunk *c, sx__gq_node **first, sx__gq_node **last,
                     sx__gq_node *n)
{
    if (c != NULL) {
        c->items[c->n++] = n;
        return;
    }
    n->next = NULL;
    if (*last != NULL)
        (*last)->next = n;
    else
        *first = n;
    *last = n;
}

/* sx__inject when the ring is full: its oldest (up to SX__INJ_MOVE) move to
 * the global queue, and p into the room made (or behind them, should
 * there be none). They go as one chunk, an array of their addresses
 * (engine/sched/globalq.h) allocated before the spinlock is taken: the
 * move writes nothing into the moved slots, and a worker takes a batch of
 * them without reading one, then prefetches the batch's slots together
 * (deque_take_in). As a list through the slots (what is left when the
 * allocation fails) a worker walks a batch one cold slot at a time under
 * the queue's lock, slower than a submitter fills the ring: once a run
 * overflowed, nearly every later submit went that way, at twice the time
 * (submit 10,000,000: 95-105 ns against 47). */
static __attribute__((noinline)) void inject_full(sx_engine *e, sx__proc *p)
{
    sx__injq *q = &e->inj;
    sx__gq_chunk *c = sx__globalq_chunk_new(SX__INJ_MOVE + 1);
    sx__gq_node *first = NULL, *last = NULL;
    size_t moved = 0, m;
    void *got[SX__INJQ_GRAB];
    sx__spin_lock(&q->mu);
    if (!sx__injq_push(q, p)) {
        /* Each grab at most what the chunk has room for: the workers'
         * grabs (half of what is there, up to 17 or 64, without this
         * lock) leave the ring at any count, so a grab can come back with
         * fewer than asked, and the next one must not run past
         * SX__INJ_MOVE. */
        while (moved < SX__INJ_MOVE &&
               (m = sx__injq_grab(q, got,
                                  SX__INJ_MOVE - moved < SX__INJQ_GRAB
                                      ? SX__INJ_MOVE - moved
                                      : SX__INJQ_GRAB)) > 0) {
            for (size_t i = 0; i < m; i++)
                move_add(c, &first, &last, &((sx__proc *)got[i])->gq);
            moved += m;
            SX__FAULT_HOOK(SX__HOOK_INJECT_MOVE, moved);
        }
        /* Room now: we took at least one, or workers emptied it. If not,
         * p goes behind the moved, in order. */
        if (!sx__injq_push(q, p)) {
            move_add(c, &first, &last, &p->gq);
            moved++;
        }
    }
    sx__spin_unlock(&q->mu);
    if (c != NULL && c->n > 0)
        sx__globalq_push_chunk(&e->gq, c);
    else
        free(c);
    if (first != NULL)
        sx__globalq_push_list(&e->gq, first, last, moved);
}

/* Into the injection ring: new processes from threads that are not
 * workers, processes that used up their turn, and what does not fit a
 * worker's deque. When it is full the workers are behind; its oldest
 * then move to the global queue (Go's runqputslow; inject_full), where
 * workers look first, so the order of submission about holds. Nothing
 * else goes to the global queue, so what is there is older than anything
 * in the ring and reading it first cannot starve the ring for long. */
void sx__inject(sx_engine *e, sx__proc *p)
{
    sx__injq *q = &e->inj;
    sx__spin_lock(&q->mu);
    bool in = sx__injq_push(q, p);
    sx__spin_unlock(&q->mu);
    if (!in)
        inject_full(e, p);
#ifndef SX_NEGATIVE_CONTROL_NO_INJECT_NOTIFY /* meson_options.txt */
    sx__park_notify(e);
#endif
}

/* engine/sched/worker.c — the workers: finding work, running steps, and the
 * process state machine.
 *
 * A worker looks for a process in this order (docs/SCHEDULER.md):
 *   1. its own deque (LIFO pop);
 *   2. the global queue: take one, and up to 16 more into its own deque;
 *      every 61st search looks here first (fair_look), so that the global
 *      queue cannot starve behind a busy deque, and before that at the
 *      deque's oldest item when the deque was not popped since the last
 *      such search while the next slot was busy, so that the deque cannot
 *      starve behind the next slot;
 *   3. steal half of a random victim's deque;
 *   4. spin: < 4 failed rounds retry at once, 4-15 sched_yield, then park.
 *
 * Running a process (run): CAS READY -> RUNNING, then up to `throughput`
 * turns of: collect events (control first, then the mailbox, at most
 * `throughput`), step, dispatch yields, and decide with a CAS on the state
 * word whether it runs again (a wake-up flag is set, or CONTINUE), goes to
 * BLOCKED / IDLE, or used up its turn and goes to the back of the global
 * queue. Every CAS that fails because a producer set a flag re-evaluates.
 *
 * Threads: worker_main runs on the worker threads; sx__enqueue and
 * sx__deliver are [any thread].
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"
#include "engine/io/io.h" /* sx__now_ns */

/* initial-exec: the library's objects are built as PIC (also the static
 * ones), where the default TLS model calls __tls_get_addr on every
 * access; this variable is read on every send and enqueue. glibc keeps
 * static TLS room for libraries loaded later too. */
static _Thread_local sx__worker *tls_worker
    __attribute__((tls_model("initial-exec")));

sx__worker *sx__current_worker(sx_engine *e)
{
    sx__worker *w = tls_worker;
    return w != NULL && w->engine == e ? w : NULL;
}

/* ---- queues -------------------------------------------------------------- */

static void queue_push(sx_engine *e, sx__globalq *q, sx__proc *p)
{
    sx__globalq_push(q, &p->gq); /* its len update is a seq_cst RMW */
    sx__park_notify(e);
}

static void enqueue(sx_engine *e, sx__proc *p, bool fresh);

void sx__enqueue(sx_engine *e, sx__proc *p)
{
    enqueue(e, p, false);
}

/* Into the injection ring: new processes from threads that are not
 * workers, processes that used up their turn, and what does not fit a
 * worker's deque. When it is full the workers are behind; its oldest half
 * then moves to the global queue (Go's runqputslow), where workers look
 * first, so the order of submission about holds. Nothing else goes to the
 * global queue, so what is there is older than anything in the ring and
 * reading it first cannot starve the ring for long. The move's push to the
 * global queue (a mutex that can sleep) is made after the ring's spinlock
 * is released. */
static void inject(sx_engine *e, sx__proc *p)
{
    sx__injq *q = &e->inj;
    sx__gq_node *first = NULL, *last = NULL;
    size_t moved = 0;
    sx__spin_lock(&q->mu);
    if (!sx__injq_push(q, p)) {
        size_t m;
        void *got[SX__INJQ_GRAB];
        /* At most the oldest 2,048: the move holds the ring's spinlock and
         * writes each moved slot's link, so half of a 64 Ki ring would
         * keep other pushers spinning for milliseconds (helper-34). */
        while (moved < 2048 && (m = sx__injq_grab(q, got, SX__INJQ_GRAB)) > 0) {
            for (size_t i = 0; i < m; i++) {
                sx__gq_node *n = &((sx__proc *)got[i])->gq;
                n->next = NULL;
                if (last != NULL)
                    last->next = n;
                else
                    first = n;
                last = n;
            }
            moved += m;
        }
        /* Room now: we took at least one, or workers emptied it. */
        if (!sx__injq_push(q, p)) {
            p->gq.next = NULL; /* never; kept in order behind the moved */
            if (last != NULL)
                last->next = &p->gq;
            else
                first = &p->gq;
            last = &p->gq;
            moved++;
        }
    }
    sx__spin_unlock(&q->mu);
    if (moved > 0)
        sx__globalq_push_list(&e->gq, first, last, moved);
    sx__park_notify(e);
}

void sx__enqueue_new(sx_engine *e, sx__proc *p)
{
    enqueue(e, p, true);
}

/* On a worker: the next slot (what it held moves to the deque). Elsewhere:
 * a new process (fresh) to the injection ring, a wake-up to wq. */
static void enqueue(sx_engine *e, sx__proc *p, bool fresh)
{
    sx__worker *w = sx__current_worker(e);
    if (w == NULL) {
        if (fresh)
            inject(e, p);
        else
            queue_push(e, &e->wq, p);
        return;
    }
    sx__proc *old = w->next;
    w->next = p;
    if (old == NULL)
        return; /* the one item we run next: no wake-up needed */
    if (!sx__deque_push(&w->dq, old)) {
        inject(e, old);
        return;
    }
    /* Work in our own deque needs no wake-up for liveness (we run it).
     * Wake a parked worker only when there is more than the one item we
     * will run next and nobody is spinning, so another core can steal it:
     * a chain of single hand-offs (a ring, a ping-pong) then stays on this
     * core instead of paying a futex wake per message. relaxed: a hint;
     * see park.c. */
    if (sx__deque_size(&w->dq) > 0 &&
        atomic_load_explicit(&e->park.n_parked, memory_order_relaxed) > 0 &&
        atomic_load_explicit(&e->park.n_spinning, memory_order_relaxed) == 0)
        sx__park_notify(e);
}

static sx__proc *proc_of(sx__gq_node *n)
{
    return (sx__proc *)((char *)n - offsetof(sx__proc, gq));
}

/* Pushes items (oldest first) into w's deque so that the oldest is popped
 * first; what does not fit goes to the injection ring (see inject). */
static void deque_take_in(sx_engine *e, sx__worker *w, sx__proc **items,
                          size_t n)
{
    for (size_t i = n; i-- > 0;) {
        if (!sx__deque_push(&w->dq, items[i])) {
            for (size_t j = 0; j <= i; j++)
                inject(e, items[j]);
            return;
        }
    }
}

static sx__proc *from_queue(sx_engine *e, sx__worker *w, sx__globalq *q)
{
    sx__gq_node *nodes[SX__GQ_BATCH + 1];
    size_t n = sx__globalq_pop_batch(q, nodes, SX__GQ_BATCH + 1);
    if (n == 0)
        return NULL;
    sx__proc *items[SX__GQ_BATCH + 1];
    for (size_t i = 0; i < n; i++)
        items[i] = proc_of(nodes[i]);
    deque_take_in(e, w, items + 1, n - 1);
    /* relaxed: only this worker writes its counters. */
    sx__wstat_add(&w->st.global_pops, n);
    return items[0];
}

/* The oldest half of the injection ring, at most max (<= SX__INJQ_GRAB):
 * one to run, the rest into w's deque. */
static sx__proc *from_ring(sx_engine *e, sx__worker *w, size_t max)
{
    void *got[SX__INJQ_GRAB];
    size_t n = sx__injq_grab(&e->inj, got, max);
    if (n == 0)
        return NULL;
    deque_take_in(e, w, (sx__proc **)got + 1, n - 1);
    /* relaxed: only this worker writes its counters. */
    sx__wstat_add(&w->st.global_pops, n);
    return got[0];
}

/* Wake-ups first (see sx_engine.wq), then new processes: the global
 * queue before the injection ring (what the ring moved there is older). */
static sx__proc *from_global(sx_engine *e, sx__worker *w)
{
    sx__proc *p = from_queue(e, w, &e->wq);
    if (p == NULL)
        p = from_queue(e, w, &e->gq);
    return p != NULL ? p : from_ring(e, w, SX__INJQ_GRAB);
}

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64: victim choice only needs to be cheap and spread out. */
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static sx__proc *from_victims(sx_engine *e, sx__worker *w)
{
    unsigned n = e->n_workers;
    if (n < 2)
        return NULL;
    unsigned start = (unsigned)(rng_next(&w->rng) % n);
    void *got[64];
    for (unsigned k = 0; k < n; k++) {
        sx__worker *v = &e->workers[(start + k) % n];
        if (v == w)
            continue;
        size_t m = sx__deque_steal_half(&v->dq, got, 64);
        if (m == 0)
            continue;
        sx__wstat_add(&w->st.steals, 1);
        sx__wstat_add(&w->st.stolen, m);
        deque_take_in(e, w, (sx__proc **)got + 1, m - 1);
        return got[0];
    }
    return NULL;
}

/* Fires due sleeps (engine/timer/sleep.c): w's own on every 8th look for work
 * and on every look while spinning; the other workers' on every 64th look
 * and while spinning (a worker descheduled by the OS, or in a long step,
 * would otherwise hold its sleepers back: with three runnable threads on
 * two cores that left the timers benchmark's p99 at 20 ms). The deadlines
 * read first are relaxed hints, re-read under each set's lock; the clock
 * is read only when a deadline exists. */
static void fire_timers(sx_engine *e, sx__worker *w, uint64_t tick,
                        unsigned spins)
{
    if (spins == 0 && (tick & 7) != 0)
        return;
    bool others = spins > 0 || (tick & 63) == 0;
    if (others)
        sx__timers_purge_maybe(e);
    /* relaxed: a hint, see timers.c. */
    uint64_t mine = atomic_load_explicit(&w->tm.next_due, memory_order_relaxed);
    uint64_t any = others ? sx__timers_earliest(e) : mine;
    if (any == UINT64_MAX)
        return;
    uint64_t now = sx__now_ns();
    if (mine <= now)
        sx__timers_run(&w->tm, now, true);
    /* relaxed: a hint. The sleeps this worker added since its last look
     * go into its set now (if the lock is free), while their nodes are
     * still in its cache, and the nodes go back to its cache for the next
     * sleeps (timers.c, "the inbox"). */
    else if (atomic_load_explicit(&w->tm.inbox, memory_order_relaxed) != NULL)
        sx__timers_run(&w->tm, now, false);
    if (others && any <= now)
        sx__timers_steal(e, w, now);
}

/* Fair looks in a row that find the same oldest item in the deque before
 * it is taken regardless (fair_look): 16 x 61 searches. */
#define DQ_STUCK_LOOKS 16u

/* Every 61st search, ahead of the next slot and the deque.
 *
 * First, the deque's oldest item when the deque was not popped since the
 * last such search while the next slot is busy: two processes that wake
 * each other take turns in the next slot for as long as they like, and
 * the deque behind it was never popped (on one worker nobody steals from
 * it: a process there waited for good, test_sched next_slot_chain). It
 * is taken oldest first, with the thieves' CAS (steal is [any thread],
 * its owner included), so that every item gets its turn even while the
 * looks below keep adding to the deque's top (next_slot_chain_busy); and
 * only then: taking the oldest at every such search ran the oldest items
 * of a depth-first workload early (skynet's siblings of its top nodes)
 * and made it breadth-first (skynet 0.14 -> 0.25 s).
 *
 * Then the queues from outside, new processes before wake-ups, so that
 * neither a worker that keeps its deque full nor a stream of wake-ups
 * starves them. Not inlined: the hot loop stays as small as it was. */
static __attribute__((noinline)) sx__proc *fair_look(sx_engine *e,
                                                     sx__worker *w)
{
    bool starved = w->next != NULL && !w->dq_popped;
    w->dq_popped = false;
    /* Nor can LIFO pops starve the oldest item for good: a deque popped
     * between every two looks (always at its top, the items above the
     * oldest) kept the oldest there while the pops went on, on one worker
     * for ever (test_sched deque_popped_chain: a pair whose every ball
     * also wakes a third process). Top moves each time the oldest item
     * leaves (a steal, or the pop of the last item), so the same top at
     * DQ_STUCK_LOOKS looks in a row, the deque never empty at one, is the
     * same item waiting ~1,000 searches: taken then. A depth-first
     * workload (skynet) keeps its order between such takes. relaxed
     * (top): a hint; the steal below claims with its own CAS. */
    if (sx__deque_size(&w->dq) == 0) {
        w->dq_old_top = -1;
        w->dq_stuck = 0;
    } else {
        int64_t top = atomic_load_explicit(&w->dq.top, memory_order_relaxed);
        if (top != w->dq_old_top) {
            w->dq_old_top = top;
            w->dq_stuck = 0;
        } else if (++w->dq_stuck >= DQ_STUCK_LOOKS) {
            w->dq_stuck = 0;
            starved = true;
        }
    }
    if (starved) {
        void *old = sx__deque_steal(&w->dq);
        if (old != NULL && old != SX__DEQUE_ABORT)
            return old; /* the next slot's process stays there */
    }
    sx__proc *p = from_queue(e, w, &e->gq);
    /* No more than the global queue's batch: what this look takes goes on
     * top of the deque, ahead of what is there; taking more than the 61
     * looks until the next one run would keep the deque's oldest items
     * waiting until the ring is empty (test_sched submit_order: 3,800
     * places late with 64). */
    if (p == NULL)
        p = from_ring(e, w, SX__GQ_BATCH + 1);
    if (p == NULL)
        p = from_queue(e, w, &e->wq);
    return p;
}

static sx__proc *find_work(sx_engine *e, sx__worker *w, uint64_t *tick)
{
    unsigned spins = 0;
    for (;;) {
        sx__proc *p = NULL;
        fire_timers(e, w, *tick + 1, spins);
        if (++*tick % 61 == 0)
            p = fair_look(e, w);
        if (p == NULL && w->next != NULL) {
            p = w->next;
            w->next = NULL;
        }
        if (p == NULL) {
            p = sx__deque_pop(&w->dq);
            w->dq_popped = true; /* see fair_look */
        }
        if (p == NULL)
            p = from_global(e, w);
        if (p == NULL)
            p = from_victims(e, w);
        if (p != NULL) {
            if (spins > 0)
                /* relaxed: a hint for producers (see sx__enqueue). */
                atomic_fetch_sub_explicit(&e->park.n_spinning, 1,
                                          memory_order_relaxed);
            return p;
        }
        /* acquire: pairs with the release store in sx__park_shutdown. */
        if (atomic_load_explicit(&e->park.quit, memory_order_acquire)) {
            if (spins > 0)
                atomic_fetch_sub_explicit(&e->park.n_spinning, 1,
                                          memory_order_relaxed);
            return NULL;
        }
        if (spins == 0)
            atomic_fetch_add_explicit(&e->park.n_spinning, 1,
                                      memory_order_relaxed);
        spins++;
        if (spins < 4)
            continue;
        if (spins < 16) {
            sched_yield();
            continue;
        }
        atomic_fetch_sub_explicit(&e->park.n_spinning, 1, memory_order_relaxed);
        spins = 0;
        if (!sx__park_wait(e, w, sx__timers_park_until(e, w)))
            return NULL;
    }
}

/* ---- delivering events ---- */

/* After a push: sets the wake-up flags and, when p waits for them, wins
 * the wake-up and queues it. */
static void wake_after_push(sx_engine *e, sx__proc *p, bool msg)
{
    /* The common hand-off (a ping-pong, a ring, a completion): the
     * receiver waits with no flag set. Then one CAS makes it READY, one
     * locked instruction instead of the fetch_or and the CAS below: no
     * worker runs it, so nobody needs the flags (the worker that runs it
     * next drains the mailbox after its READY -> RUNNING CAS). relaxed
     * load: the CAS checks it. acq_rel on success: release publishes our
     * push to that worker's acquire CAS; failure (relaxed): a flag, a
     * terminate or another waker got there first; the general path below
     * re-reads the state. */
    uint32_t cur = atomic_load_explicit(&p->state, memory_order_relaxed);
    if ((cur == SX_PSTATE_BLOCKED || (msg && cur == SX_PSTATE_IDLE)) &&
        atomic_compare_exchange_strong_explicit(
            &p->state, &cur, SX_PSTATE_READY, memory_order_acq_rel,
            memory_order_relaxed)) {
        sx__enqueue(e, p);
        return;
    }
    uint32_t bits = SX__F_WAKE | (msg ? SX__F_MSG : 0);
    /* acq_rel: always a write, so that the worker's next CAS on the state
     * word (which clears the flags, then drains the mailbox) synchronises
     * with us and sees our push; acquire to read the current state. */
    uint32_t old =
        atomic_fetch_or_explicit(&p->state, bits, memory_order_acq_rel);
    uint32_t st = old & SX__S_MASK;
    if (st == SX_PSTATE_COMPLETE || st == 0 || (old & SX__F_TERM))
        return; /* finished meanwhile: the events stay queued, freed with
                 * the slot */
    cur = old | bits;
    for (;;) {
        st = cur & SX__S_MASK;
        if (!(st == SX_PSTATE_BLOCKED || (st == SX_PSTATE_IDLE && msg))) {
            /* Running, ready, or idle and this is no message. Ready: it
             * waits in a run queue with work we gave it already; a
             * sender on a worker ends its turn after this step (run_turn)
             * so that the receiver gets the CPU rather than a backlog. */
            if (st == SX_PSTATE_READY && msg) {
                sx__worker *w = sx__current_worker(e);
                if (w != NULL)
                    w->send_penalty = true;
            }
            return;
        }
        /* acq_rel: we win the wake-up and hand the process to a queue;
         * the worker's CAS READY -> RUNNING acquires it. A failure means a
         * flag flipped or someone else woke it: re-evaluate. */
        if (atomic_compare_exchange_weak_explicit(
                &p->state, &cur, SX_PSTATE_READY | (cur & SX__F_TERM),
                memory_order_acq_rel, memory_order_acquire)) {
            sx__enqueue(e, p);
            return;
        }
    }
}

/* The state before a push. Errors are decided here, never after the push:
 * once an event is queued a running step may collect it at any moment, so
 * a send that returned SX_ECLOSED or SX_ENOTFOUND must not have queued
 * anything (the stress test's pings_recv <= pings_sent caught a ping that
 * was reported closed and delivered all the same). A finish or terminate
 * that races past this check finds the event queued, like a message left
 * unread at DONE: accepted (0), then dropped. Returns 1 for a mailbox. */
static int deliver_check(sx__proc *p, bool msg)
{
    /* acquire: a mailbox's callback and user pointer were published by
     * the release store that made it a mailbox (engine/core/outside.c). */
    uint32_t now = atomic_load_explicit(&p->state, memory_order_acquire);
    uint32_t st = now & SX__S_MASK;
    if (st == SX__PSTATE_MAILBOX && msg)
        return 1;
    if (st == SX_PSTATE_COMPLETE || st == 0)
        return SX_ENOTFOUND;
    if ((now & SX__F_TERM) && msg)
        return SX_ECLOSED;
    return 0;
}

int sx__deliver(sx_engine *e, sx__proc *p, sx__ev *ev)
{
    bool msg = ev->kind == SX__EV_MESSAGE;
    int rc = deliver_check(p, msg);
    if (rc == 1) {
        sx__mailbox_deliver(e, p, ev);
        return 0;
    }
    if (rc != 0) {
        sx__ev_free(ev);
        return rc;
    }
    if (ev->ctl)
        sx__ctlstack_push(&p->ctl, &ev->node);
    else
        sx__mpsc_push(&p->mbox, &ev->node);
    wake_after_push(e, p, msg);
    return 0;
}

int sx__deliver_chain(sx_engine *e, sx__proc *p, sx__ev *first, sx__ev *last)
{
    int rc = deliver_check(p, true);
    if (rc == 1) {
        /* An outside mailbox takes them one at a time. */
        while (first != NULL) {
            /* relaxed: the chain is ours until delivered. */
            sx__ev *next = (sx__ev *)atomic_load_explicit(&first->node.next,
                                                          memory_order_relaxed);
            sx__mailbox_deliver(e, p, first);
            first = next;
        }
        return 0;
    }
    if (rc != 0) {
        sx__ev_free_chain(first);
        return rc;
    }
    sx__mpsc_push_chain(&p->mbox, &first->node, &last->node);
    wake_after_push(e, p, true);
    return 0;
}

/* ---- running a process --------------------------------------------------- */

/* Fills out from the single event ev. */
static inline __attribute__((always_inline)) void
event_of(sx__proc *p, const sx__ev *ev, sx_event *out)
{
    if (ev->watch == SX__WATCH_SLEEP)
        p->sleeps--; /* a sleep's answer (timers.c) */
    out->type =
        ev->kind == SX__EV_MESSAGE ? SX_EVENT_MESSAGE : SX_EVENT_YIELD_COMPLETE;
    out->tag = ev->tag;
    out->error = ev->error;
    out->error_msg = ev->error != 0 ? sx__ev_msg(ev) : NULL;
    if (out->error != 0 && out->error_msg == NULL)
        out->error_msg = sx_strerror(ev->error);
    out->data = sx__ev_data(ev);
    out->topic = sx__ev_topic(ev);
    out->from = ev->from;
}

/* Takes up to room messages of bundle ev (event.c) into the batch, from
 * its cursor on (to_gen: messages taken by earlier steps, tag: their
 * bytes; both 0 when it was made). true when some are left: the rest is
 * the next step's first, back at the front of the mailbox (backlog finds
 * it there), kept alive meanwhile for this step's events, which point
 * into it. Otherwise the node joins the batch's, to free after the step. */
static inline __attribute__((always_inline)) bool
bundle_take(sx__worker *w, sx__proc *p, sx__ev *ev, size_t *n, size_t *k,
            size_t room)
{
    unsigned taken = ev->to_gen, left = ev->nmsg - taken;
    unsigned take = left <= room ? left : (unsigned)room;
    size_t off = (size_t)ev->tag;
    /* Its records were written on the producer's core: ask for all their
     * lines at once rather than miss on each in turn. */
    const char *rec = (const char *)sx__ev_inl(ev);
    for (size_t b = off + 64; b < ev->data_len; b += 64)
        __builtin_prefetch(rec + b);
    for (unsigned i = 0; i < take; i++) {
        sx_event *out = &w->batch[(*n)++];
        out->type = SX_EVENT_MESSAGE;
        out->tag = 0;
        out->error = 0;
        out->error_msg = NULL;
        out->from = ev->from;
        sx__ev_bundle_next(ev, &off, &out->topic, &out->data);
    }
    if (take < left) {
        ev->to_gen = taken + take;
        ev->tag = off;
        sx__mpsc_unpop(&p->mbox, &ev->node);
        return true;
    }
    w->batch_ev[(*k)++] = ev;
    return false;
}

/* Makes room for one more event past the batch's size: doubles both
 * arrays (kept for later steps). false when memory is short. */
static bool batch_grow(sx__worker *w)
{
    size_t cap = w->batch_cap * 2;
    sx_event *b = realloc(w->batch, cap * sizeof(*b));
    if (b == NULL)
        return false;
    w->batch = b;
    sx__ev **be = realloc(w->batch_ev, cap * sizeof(*be));
    if (be == NULL)
        return false;
    w->batch_ev = be;
    w->batch_cap = cap;
    return true;
}

/* A full batch of a process woken from IDLE (a message, cancel or stop
 * does that) that holds no message from its mailbox: more than
 * `throughput` completions piled up while it was idle. API.md meaning 5
 * puts them in one batch with the waking message, so the batch goes on
 * past the budget, in arrival order, to the first message; out of memory
 * it stops where it is. The control events (batch[0 .. ctl), cancels)
 * do not count as that message: woken by a cancel, the process gets every
 * completion that arrived meanwhile too (with them counted, it got the
 * first throughput - 1 and the rest stayed queued behind an IDLE process,
 * which no completion wakes). Rare, hence apart from collect's loop.
 * Returns the new count. */
static __attribute__((noinline)) size_t
past_budget(sx__worker *w, sx__proc *p, size_t ctl, size_t n, size_t *k)
{
    bool msg = false;
    for (size_t i = ctl; i < n && !msg; i++)
        msg = w->batch[i].type == SX_EVENT_MESSAGE;
    while (!msg && (n < w->batch_cap || batch_grow(w))) {
        sx__ev *ev = (sx__ev *)sx__mpsc_pop(&p->mbox);
        if (ev == NULL)
            break;
        if (ev->nmsg > 0) { /* a bundle: messages only */
            bundle_take(w, p, ev, &n, k, 1);
            break;
        }
        msg = ev->kind == SX__EV_MESSAGE;
        w->batch_ev[(*k)++] = ev;
        event_of(p, ev, &w->batch[n++]);
    }
    return n;
}

/* Collects up to `throughput` events: control events first (all of them,
 * even past the budget), then the mailbox. A bundle (event.c) gives one event
 * per message; when it has more than the batch has room for, the step gets the
 * first of them and the bundle goes back to the front of the mailbox
 * (sx__mpsc_unpop) with a cursor, for the next step. So a step gets exactly
 * what it got with one node per message: the same events, in the same order, as
 * many as fit (API.md meaning 5: the messages that wake an IDLE process share
 * its batch with the completions that arrived before them; past_budget when
 * those are more than the budget). The nodes behind the events, to free
 * after the step, are w->batch_ev[0 .. w->n_nodes). */
static size_t collect(sx_engine *e, sx__worker *w, sx__proc *p)
{
    size_t n = 0, k = 0, cap = e->throughput;
    if (sx__ctlstack_nonempty(&p->ctl)) {
        sx__mpsc_node *c = sx__ctlstack_take(&p->ctl);
        while (c != NULL) {
            /* relaxed: the taken list is ours. */
            sx__mpsc_node *next =
                atomic_load_explicit(&c->next, memory_order_relaxed);
            if (n < w->batch_cap || batch_grow(w)) {
                /* Every one, past the budget if need be (cancels, rare):
                 * pushed back on the stack, the rest would come after any
                 * pushed meanwhile, newer ones first. */
                w->batch_ev[k++] = (sx__ev *)c;
                event_of(p, (sx__ev *)c, &w->batch[n++]);
            } else {
                /* Out of memory: back on the stack, oldest first. */
                sx__ctlstack_push(&p->ctl, c);
            }
            c = next;
        }
    }
    size_t ctl = n;
    bool bundles = false, full = false;
    while (n < cap) {
        sx__ev *ev = (sx__ev *)sx__mpsc_pop(&p->mbox);
        if (ev == NULL)
            break;
        if (ev->nmsg == 0) {
            w->batch_ev[k++] = ev;
            event_of(p, ev, &w->batch[n++]);
            continue;
        }
        /* A bundle: as many of its messages as the batch has room for. */
        if (bundle_take(w, p, ev, &n, &k, cap - n)) {
            full = true;
            break;
        }
        bundles = true;
    }
    if (n >= cap && !full && p->wait_kind == SX_PSTATE_IDLE)
        n = past_budget(w, p, ctl, n, &k);
    /* The next node, which the next step will read: its lines were
     * written on another core, so start fetching them while this step
     * runs (a bundle's records follow its head; a hint, never read). */
    const char *nx = (const char *)p->mbox.tail;
    if (bundles && !full && nx != (const char *)&p->mbox.stub)
        for (size_t b = 0; b < sizeof(sx__ev) + SX__EV_BUNDLE; b += 64)
            __builtin_prefetch(nx + b);
    w->n_nodes = k;
    return n;
}

static bool is_message(const sx__mpsc_node *n)
{
    return ((const sx__ev *)n)->kind == SX__EV_MESSAGE;
}

static bool is_any(const sx__mpsc_node *n)
{
    (void)n;
    return true;
}

/* After a step (or a wake-up with nothing collected): is something still
 * queued that should run the process again? For IDLE only a message
 * counts. This also covers the wake-up that collected nothing because an
 * earlier producer's push was half done (mailbox.h): the walk waits for
 * that push, so the event behind it is not left queued while the process
 * sleeps. */
static bool backlog(sx__proc *p, uint8_t want)
{
    if (sx__ctlstack_nonempty(&p->ctl))
        return true;
    if (want == SX_PSTATE_READY)
        return false; /* it runs again anyway */
    return sx__mpsc_find(&p->mbox,
                         want == SX_PSTATE_IDLE ? is_message : is_any);
}

/* Runs one step. Returns the state the process wants next (READY to run
 * again at once, BLOCKED, IDLE), or 0 when it finished. */
static uint8_t step_once(sx_engine *e, sx__worker *w, sx__proc *p, size_t n)
{
    sx_step_output *out = &w->out;
    sx__output_reset(out);
    int rc = p->type->step(p->user_state, w->batch, n, out);
    /* relaxed: a figure for listings; only this worker writes it now. */
    atomic_store_explicit(
        &p->steps, atomic_load_explicit(&p->steps, memory_order_relaxed) + 1,
        memory_order_relaxed);
    sx__wstat_add(&w->st.steps, 1);
    for (size_t i = 0; i < w->n_nodes; i++)
        sx__ev_free(w->batch_ev[i]);
    if (rc != 0) {
        /* A positive code is SX_EFAILED (docs/ERRORS.md), with its
         * message. */
        rc = rc < 0 ? rc : SX_EFAILED;
        sx__finish(e, p, rc, sx_strerror(rc), (sx_payload){ NULL, 0 });
        return 0;
    }
    if (out->err != 0 && out->status != SX__ST_DONE) {
        sx__finish(e, p, out->err, "step output: out of memory",
                   (sx_payload){ NULL, 0 });
        return 0;
    }
    if ((out->status == SX__ST_DONE || out->status == SX__ST_FAIL) &&
        out->n_yields > 0)
        sx__dispatch_sends(e, p, out); /* messages go; yields are dropped */
    if (out->status == SX__ST_DONE && out->too_large > 0) {
        /* sx_done refused a result over max_result (engine.h). */
        char m[128];
        snprintf(m, sizeof m,
                 "result of %zu bytes is over the limit of %zu (max_result)",
                 out->too_large, e->cfg.max_result);
        sx__finish(e, p, SX_ETOOLARGE, m, (sx_payload){ NULL, 0 });
        return 0;
    }
    if (out->status == SX__ST_DONE) {
        sx_payload v = { NULL, 0 };
        if (out->result_len > 0)
            v = (sx_payload){ sx__output_bytes(out, out->result_off),
                              out->result_len };
        sx__finish(e, p, 0, NULL, v);
        return 0;
    }
    if (out->status == SX__ST_FAIL) {
        const char *m =
            out->result_len > 0
                ? (const char *)sx__output_bytes(out, out->result_off)
                : "failed";
        sx__finish(e, p, out->fail_code != 0 ? out->fail_code : SX_EFAILED, m,
                   (sx_payload){ NULL, 0 });
        return 0;
    }
    size_t n_yields = out->n_yields;
    if (n_yields > 0 && sx__dispatch(e, p, out) != 0) {
        sx__finish(e, p, SX_ENOMEM, "dispatch: out of memory",
                   (sx_payload){ NULL, 0 });
        return 0;
    }
    /* A step that wrote yields waits for an answer or a message (DESIGN.md
     * §2), except CONTINUE whose yields are all fire-and-forget
     * (SX_TAG_NONE): no answer will come, so it runs again, as CONTINUE
     * says (docs/COMMANDS.md, "Fire and forget"). */
    bool answers = false, commands = false;
    for (size_t i = 0; i < n_yields && !answers; i++) {
        answers = out->yields[i].tag != SX_TAG_NONE;
        commands |= out->yields[i].cmd != SX__CMD_DIRECT_SEND;
    }
    /* sx_send writes no yield as far as the status goes. */
    if (out->status == SX__ST_WAIT ||
        (commands && (answers || out->status == SX__ST_IDLE)))
        return SX_PSTATE_BLOCKED;
    if (out->status == SX__ST_IDLE)
        return SX_PSTATE_IDLE;
    return SX_PSTATE_READY;
}

/* True when no other process is waiting for this worker (its deque and
 * the global queue are empty). relaxed: a fairness heuristic; a process
 * queued right after this check waits at most one more turn. */
static bool nothing_else(sx_engine *e, sx__worker *w)
{
    return w->next == NULL && sx__deque_size(&w->dq) == 0 &&
           atomic_load_explicit(&e->gq.len, memory_order_relaxed) == 0 &&
           atomic_load_explicit(&e->wq.len, memory_order_relaxed) == 0 &&
           sx__injq_size(&e->inj) == 0;
}

static void run_turn(sx_engine *e, sx__worker *w, sx__proc *p);

static void run(sx_engine *e, sx__worker *w, sx__proc *p)
{
    w->running = p;
    /* A penalty is the sender's own: one left by the last process (set by
     * a step that then blocked, idled or finished, by a finish's @exit
     * messages) must not cut this one's turn (test_sched
     * penalty_is_the_senders). */
    w->send_penalty = false;
    run_turn(e, w, p);
    w->running = NULL;
}

static void run_turn(sx_engine *e, sx__worker *w, sx__proc *p)
{
    /* acquire: pairs with the release half of the CAS that made it READY
     * (and the publication of a new process). */
    uint32_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    do {
        if ((s & SX__S_MASK) != SX_PSTATE_READY)
            return; /* stale queue entry */
        /* acquire: we now own the process's worker-side fields. Clearing
         * the wake flags here is safe: the events behind them are drained
         * below, after this CAS. */
    } while (!atomic_compare_exchange_weak_explicit(
        &p->state, &s, SX_PSTATE_RUNNING | (s & SX__F_TERM),
        memory_order_acquire, memory_order_acquire));

    unsigned turns = 0;
    for (;;) {
        if (s & SX__F_TERM) {
            sx__finish_terminated(e, p);
            return;
        }
        size_t n = collect(e, w, p);
        uint8_t want;
        /* relaxed (steps): only this worker writes it now; 0 until the
         * first step ran. */
        if (n > 0 ||
            atomic_load_explicit(&p->steps, memory_order_relaxed) == 0 ||
            p->wait_kind == SX_PSTATE_READY) {
            want = step_once(e, w, p, n);
            if (want == 0)
                return;
            p->wait_kind = want;
        } else {
            want = p->wait_kind; /* woken, but nothing to deliver yet */
        }
        bool more = backlog(p, want);

        /* acquire: see the flags producers set (their fetch_or is a
         * release) and the events they pushed before. */
        s = atomic_load_explicit(&p->state, memory_order_acquire);
        for (;;) {
            if (s & SX__F_TERM) {
                sx__finish_terminated(e, p);
                return;
            }
            bool again = want == SX_PSTATE_READY || more || (s & SX__F_MSG) ||
                         (want == SX_PSTATE_BLOCKED && (s & SX__F_WAKE));
            if (!again) {
#ifdef SX_NEGATIVE_CONTROL_NO_RECHECK
                /* Negative control: a plain store drops a flag set since
                 * our load, losing that wake-up. Stress tests hang. */
                atomic_store_explicit(&p->state, want, memory_order_release);
                return;
#else
                /* release: hands the process to whoever wakes it next;
                 * failure (a flag flipped) re-evaluates with the new s. */
                if (atomic_compare_exchange_weak_explicit(&p->state, &s, want,
                                                          memory_order_release,
                                                          memory_order_acquire))
                    return;
                continue;
#endif
            }
            if (w->send_penalty) {
                /* A message of this step went to a process still waiting
                 * for a worker with earlier ones (wake_after_push): this
                 * turn is over, if anyone else waits for the worker. */
                w->send_penalty = false;
                turns = e->throughput - 1;
            }
            if (++turns >= e->throughput && nothing_else(e, w)) {
                /* Due sleeps first (this worker's and the others'): they
                 * are fired only between turns (find_work), so a process
                 * that keeps running with nothing else queued held every
                 * due sleeper back for as long as it ran, on one worker
                 * for good. A woken sleeper lands in our next slot. */
                fire_timers(e, w, 0, 0);
                /* Nobody is waiting for this worker: keep going rather
                 * than pay a trip through the global queue. */
                if (nothing_else(e, w))
                    turns = 0;
            }
            if (turns >= e->throughput) {
                /* Turn used up: to the back of the global FIFO, behind the
                 * processes submitted meanwhile (the injection ring: put
                 * in the global queue, which is looked at first, it would
                 * starve them; test_sched fairness). release: the next
                 * worker's CAS READY -> RUNNING acquires it. */
                if (atomic_compare_exchange_weak_explicit(
                        &p->state, &s, SX_PSTATE_READY, memory_order_release,
                        memory_order_acquire)) {
                    inject(e, p);
                    return;
                }
                turns--;
                continue;
            }
            /* acq_rel: clear the flags; the events behind them are
             * collected next. */
            if (atomic_compare_exchange_weak_explicit(
                    &p->state, &s, SX_PSTATE_RUNNING, memory_order_acq_rel,
                    memory_order_acquire)) {
                s = SX_PSTATE_RUNNING;
                break;
            }
        }
    }
}

static void *worker_main(void *arg)
{
    sx__worker *w = arg;
    sx_engine *e = w->engine;
    tls_worker = w;
    sx__ev_cache_enable();
    uint64_t tick = 0;
    for (;;) {
        sx__proc *p = find_work(e, w, &tick);
        if (p == NULL)
            break;
        run(e, w, p);
    }
    sx__ev_cache_flush();
    tls_worker = NULL;
    return NULL;
}

int sx__workers_start(sx_engine *e)
{
    unsigned i;
    int rc = 0;
    for (i = 0; i < e->n_workers; i++) {
        rc = -pthread_create(&e->workers[i].thread, NULL, worker_main,
                             &e->workers[i]);
        if (rc != 0)
            break;
    }
    if (rc == 0)
        return 0;
    sx__park_shutdown(e);
    while (i-- > 0)
        pthread_join(e->workers[i].thread, NULL);
    return rc;
}

void sx__workers_join(sx_engine *e)
{
    sx__park_shutdown(e);
    for (unsigned i = 0; i < e->n_workers; i++)
        pthread_join(e->workers[i].thread, NULL);
}

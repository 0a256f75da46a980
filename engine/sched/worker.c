/* engine/sched/worker.c — the workers: their threads, finding work, and
 * queueing and waking processes. Running the process found is
 * engine/sched/turn.c.
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
 *   4. spin: < 4 failed rounds retry at once, 4-15 fault in the process
 *      table's next pages (sx__ptable_prefault) or sched_yield, then park.
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
#include "engine/sched/prefetch.h"

/* initial-exec: the library's objects are built as PIC (also the static
 * ones), where the default TLS model calls __tls_get_addr on every
 * access; this variable is read on every send and enqueue. glibc keeps
 * static TLS room for libraries loaded later too. */
static _Thread_local sx__worker *tls_worker
    __attribute__((tls_model("initial-exec")));

/* The references a worker's sends keep (sx__prefs; w->prefs points
 * here). Thread-local rather than in sx__worker, whose size, with them
 * inside, moved the engine's later allocations: the ring ran ~10 % slower
 * with two workers (bench/FINDINGS.md, "Kept references"). initial-exec:
 * as tls_worker. */
static _Thread_local sx__prefs tls_prefs
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

void sx__enqueue_new(sx_engine *e, sx__proc *p)
{
    enqueue(e, p, true);
}

/* enqueue past its fast path: not on a worker, or the next slot held
 * another process (old). */
static __attribute__((noinline)) void
enqueue_any(sx_engine *e, sx__worker *w, sx__proc *p, sx__proc *old, bool fresh)
{
    if (w == NULL) {
        if (fresh)
            sx__inject(e, p);
        else
            queue_push(e, &e->wq, p);
        return;
    }
    if (!sx__deque_push(&w->dq, old)) {
        sx__inject(e, old);
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

/* On a worker: the next slot (what it held moves to the deque). Elsewhere:
 * a new process (fresh) to the injection ring, a wake-up to wq. The slot
 * found empty (a chain of hand-offs) is the fast path, with no call and
 * so no registers saved; enqueue_any has the rest. */
static void enqueue(sx_engine *e, sx__proc *p, bool fresh)
{
    sx__worker *w = sx__current_worker(e);
    if (w != NULL) {
        sx__proc *old = w->next;
        w->next = p;
        if (old == NULL)
            return; /* the one item we run next: no wake-up needed */
        enqueue_any(e, w, p, old, fresh);
        return;
    }
    enqueue_any(e, NULL, p, NULL, fresh);
}

/* Not inlined: a process that steps again with the slot filled is the
 * rare case (a chain of hand-offs empties the slot before each step). */
__attribute__((noinline)) void sx__next_spill(sx_engine *e, sx__worker *w)
{
    /* One worker: nobody else could take it; it runs from the slot. */
    if (e->n_workers == 1)
        return;
    /* A full deque: it stays in the slot and runs after this turn, not
     * behind everything in the injection ring. */
    if (!sx__deque_push(&w->dq, w->next))
        return;
    w->spilled = w->next;
    w->next = NULL;
    /* seq_cst RMW (+0) of n_parked after the push: the producer's half of
     * the park handshake, not a hint as in enqueue (docs/SCHEDULER.md §3
     * says why it holds; an RMW, not a fence, which ThreadSanitizer does
     * not model). A missed wake-up would leave the process waiting for
     * this turn to end, which is what the spill is for. */
    if (atomic_fetch_add_explicit(&e->park.n_parked, 0, memory_order_seq_cst) >
        0)
        sx__park_notify(e);
}

static sx__proc *proc_of(sx__gq_node *n)
{
    return (sx__proc *)((char *)n - offsetof(sx__proc, gq));
}

/* Pushes items (oldest first) into w's deque so that the oldest is popped
 * first; what does not fit goes to the injection ring (see inject).
 *
 * Each item's slot and state are prefetched first, for writing (the
 * turn's CAS and the step write them). Items taken in a batch
 * (from the global queue, the injection ring, a victim's deque) were last
 * written on another core: a new process's slot and state by the thread
 * that spawned or submitted it and ran its init. Its turn's first loads
 * (the state word's CAS, the mailbox, the state pointer, then its step's
 * first look at its state) would each wait for those lines in turn, one
 * process after another; asked for here, the whole batch's lines travel
 * at once while the first item runs. The loads of user_state are
 * independent of each other, so the core overlaps their misses too. The
 * slot is read before it is pushed, while only this worker holds it. */
static void deque_take_in(sx_engine *e, sx__worker *w, sx__proc **items,
                          size_t n)
{
    bool on = sx__prefetch_w_on();
    for (size_t i = 0; i < n; i++) {
        const char *p = (const char *)items[i];
        /* A slot (96 bytes, 32-aligned) spans the lines of its first and
         * its last byte. */
        sx__prefetch_w(on, p);
        sx__prefetch_w(on, p + sizeof(sx__proc) - 1);
        /* A state that a step may write; not the shared placeholder of
         * the types without one, which nothing writes (prefetch.h). */
        const void *st = items[i]->user_state;
        if (st != &sx__no_state)
            sx__prefetch_w(on, st);
    }
    for (size_t i = n; i-- > 0;) {
        if (!sx__deque_push(&w->dq, items[i])) {
            for (size_t j = 0; j <= i; j++)
                sx__inject(e, items[j]);
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

/* Fires due sleeps (engine/timer/sleep.c) on a look for work that
 * sx__fire_timers let through (every 8th, and every look while spinning):
 * w's own always; the other workers' on every 64th look and while
 * spinning (a worker descheduled by the OS, or in a long step,
 * would otherwise hold its sleepers back: with three runnable threads on
 * two cores that left the timers benchmark's p99 at 20 ms). The deadlines
 * read first are relaxed hints, re-read under each set's lock; the clock
 * is read only when a deadline exists. */
void sx__fire_timers_now(sx_engine *e, sx__worker *w, uint64_t tick,
                         unsigned spins)
{
    bool others = spins > 0 || (tick & 63) == 0;
    if (others)
        sx__timers_purge_maybe(e);
    /* relaxed: a hint, see sleep.c. */
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
     * sleeps (sleep.c, "the inbox"). */
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
 * only then: taking the oldest at every such search would run the oldest
 * items of a depth-first workload early (skynet's siblings of its top
 * nodes) and make it breadth-first (skynet 0.25 s against 0.14).
 *
 * Then the queues from outside, new processes before wake-ups, so that
 * neither a worker that keeps its deque full nor a stream of wake-ups
 * starves them. Not inlined, so that the hot loop stays small. */
static sx__proc *fair_take(sx_engine *e, sx__worker *w);

static __attribute__((noinline)) sx__proc *fair_look(sx_engine *e,
                                                     sx__worker *w)
{
    sx__proc *p = fair_take(e, w);
    /* p runs ahead of the next slot's process, for a whole turn, one long
     * step included: that process goes where another worker can take it
     * (sx__next_spill; test_sched pair_beside_fair_look). This worker, if
     * nobody takes it, pops it right after p, as it would have run it
     * from the slot. */
    if (p != NULL && w->next != NULL)
        sx__next_spill(e, w);
    return p;
}

/* fair_look's choice. */
static inline sx__proc *fair_take(sx_engine *e, sx__worker *w)
{
    /* The references its sends keep: let go now and then, so that a
     * worker that never parks does not keep a finished process's slot
     * for good (sx__prefs). */
    sx__prefs_flush(e, w->prefs);
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
            return old; /* fair_look spills the next slot */
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
        sx__fire_timers(e, w, *tick + 1, spins);
        if (++*tick % 61 == 0)
            p = fair_look(e, w);
        if (p == NULL && w->next != NULL) {
            p = w->next;
            w->next = NULL;
        }
        if (p == NULL) {
            p = sx__deque_pop(&w->dq);
            /* See fair_look; the pop of what the slot spilled is the
             * slot's turn (sx__worker.spilled). */
            if (p == NULL || p != w->spilled)
                w->dq_popped = true;
            w->spilled = NULL;
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
            /* Idle time that pays: the table's next pages (each a fault
             * the spawning thread would take otherwise). */
            if (!sx__ptable_prefault(e))
                sched_yield();
            continue;
        }
        atomic_fetch_sub_explicit(&e->park.n_spinning, 1, memory_order_relaxed);
        spins = 0;
        sx__prefs_flush(e, w->prefs); /* nothing kept while parked */
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

/* The hand-off to a process that waits for these events: BLOCKED, or IDLE
 * and they are messages, with no flag set (a ping-pong's or a ring's
 * receiver, a parent woken by a child's answer). One CAS makes it READY,
 * as in wake_after_push's fast path, but before the events are queued:
 * whoever wins it owns the process until it queues it, consumer end of
 * the mailbox included, so when the mailbox is empty the events go in at
 * the consumer's end (sx__mpsc_unpop_chain: plain stores, and the stub
 * already behind them, so their pop puts no stub back either) instead of
 * a producer's exchange: two locked instructions fewer per hand-off. Not
 * empty (completions that came while it waited): pushed behind them, as
 * any other event. acq_rel: acquire sees the owner's release of the
 * process (its CAS to BLOCKED or IDLE, the mailbox's consumer end with
 * it); the events' stores come after the CAS, and the queueing's own
 * release (a deque push, the ring's lock, wq's mutex, or this worker
 * running it next) publishes them to whoever runs it. false: it was not
 * waiting so (the general path then queues them). hand_off_take wins the
 * process and places the events; the caller queues it (hand_off,
 * sx__hand_off_next). */
static inline __attribute__((always_inline)) bool
hand_off_take(sx__proc *p, sx__mpsc_node *first, sx__mpsc_node *last, bool msg)
{
    /* relaxed: the CAS checks it. */
    uint32_t cur = atomic_load_explicit(&p->state, memory_order_relaxed);
    if (!(cur == SX_PSTATE_BLOCKED || (msg && cur == SX_PSTATE_IDLE)) ||
        !atomic_compare_exchange_strong_explicit(
            &p->state, &cur, SX_PSTATE_READY, memory_order_acq_rel,
            memory_order_relaxed))
        return false;
    if (sx__mpsc_empty(&p->mbox))
        sx__mpsc_unpop_chain(&p->mbox, first, last);
    else
        sx__mpsc_push_chain(&p->mbox, first, last);
    return true;
}

static inline __attribute__((always_inline)) bool
hand_off(sx_engine *e, sx__proc *p, sx__mpsc_node *first, sx__mpsc_node *last,
         bool msg)
{
    if (!hand_off_take(p, first, last, msg))
        return false;
    sx__enqueue(e, p);
    return true;
}

bool sx__hand_off_next(sx__worker *w, sx__proc *p, sx__ev *first, sx__ev *last)
{
    /* Only this worker writes its next slot, so it stays empty across the
     * CAS; the slot is then what enqueue's fast path fills. */
    if (w->next != NULL || !hand_off_take(p, &first->node, &last->node, true))
        return false;
    w->next = p;
    return true;
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
    if (!ev->ctl && hand_off(e, p, &ev->node, &ev->node, msg))
        return 0;
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
    if (hand_off(e, p, &first->node, &last->node, true))
        return 0;
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

static void *worker_main(void *arg)
{
    sx__worker *w = arg;
    sx_engine *e = w->engine;
    w->prefs = &tls_prefs;
    tls_worker = w;
    sx__ev_cache_enable();
    uint64_t tick = 0;
    for (;;) {
        sx__proc *p = find_work(e, w, &tick);
        if (p == NULL)
            break;
        sx__run(e, w, p);
    }
    sx__prefs_flush(e, w->prefs);
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

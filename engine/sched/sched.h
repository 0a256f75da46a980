/* engine/sched/sched.h — the scheduler: workers, their statistics, the
 * park, and how a READY process is queued and an event delivered.
 * Internal to engine/; never installed. docs/SCHEDULER.md has the
 * protocol.
 */
#ifndef SX_ENGINE_SCHED_SCHED_H
#define SX_ENGINE_SCHED_SCHED_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/proc.h"
#include "engine/sched/deque.h"
#include "engine/sched/globalq.h"
#include "engine/sched/injq.h"
#include "engine/sched/spin.h"
#include "engine/timer/timer.h"

/* ---- workers ------------------------------------------------------------ */

#define SX__DEQUE_CAP 4096
#define SX__GQ_BATCH 16
/* The injection ring (engine/sched/injq.h): 64 Ki slots, big enough for
 * a burst. When it is full the submitter moves its oldest SX__INJ_MOVE to
 * the global queue (engine/sched/inject.c, inject_full). With 4 Ki slots,
 * 100,000 sleepers submitted at once would mostly go that way (then a
 * list linked through the slots, which workers walked one cold slot after
 * another: 6 % of the timers benchmark, 0.095 s against 0.084). */
#define SX__INJQ_CAP 65536
#define SX__INJQ_GRAB 64 /* most a worker takes from it at once */
/* The most a full ring moves to the global queue at once: its oldest
 * 2,048 (one chunk of ~16 KiB), under the ring's spinlock. */
#define SX__INJ_MOVE 2048u

typedef struct {
    /* Written by the worker only (sx__wstat_add); read by stats (relaxed). */
    _Atomic uint64_t steps, steals, stolen, parks, wakeups, global_pops;
    _Atomic uint64_t messages, timeout_finds;
    /* Processes this worker spawned (sx_spawn in its steps) and finished:
     * per worker so that a submit and a finish on two cores touch no
     * shared counter line (stats sums them with the engine's). */
    _Atomic uint64_t spawned, completed, failed, terminated, cancelled;
    /* The live count's share of this worker (engine/core/live.h): processes
     * it began to spawn, and processes it finished or failed to spawn.
     * Single writer, seq_cst stores: the stop handshake. */
    _Atomic uint64_t born, died;
} sx__wstats;

/* Adds n to a counter that only the calling worker writes. relaxed load and
 * store, not a fetch_add: with a single writer nothing can slip between the
 * two, readers (stats, relaxed) see some recent value either way, and a
 * fetch_add would be a locked instruction (~20 cycles) on every step and
 * every message. */
static inline void sx__wstat_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

typedef struct sx__worker {
    alignas(64) sx__deque dq;
    alignas(64) sx_engine *engine;
    unsigned id;
    pthread_t thread;
    uint64_t rng;       /* victim selection */
    sx_step_output out; /* reused for every step */
    sx__proc *running;  /* the process this worker runs now */
    /* The process the worker's own steps woke last, run before the deque
     * (Go's runnext). Owner only, not stealable: a chain of hand-offs (a
     * ring, a ping-pong, a spawn) skips the deque's release store and the
     * fence of its pop. Whatever it held before goes to the deque, where
     * thieves see it, and so does what it holds when the process that
     * filled it steps again in the same turn (sx__next_spill). */
    sx__proc *next;
    /* The deque was popped since the last fair look (worker.c,
     * fair_look). */
    bool dq_popped;
    /* The deque's top index at the last fair look (-1: it was empty
     * then), and for how many fair looks in a row the same oldest item
     * has sat there (fair_look). Owner only. */
    int64_t dq_old_top;
    unsigned dq_stuck;
    sx__slotcache slots; /* free process slots (ptable.c) */
    sx_event *batch;     /* event array, throughput-sized at first */
    sx__ev **batch_ev;   /* the nodes behind batch */
    size_t batch_cap;    /* entries in both (grown by collect, rarely) */
    size_t n_nodes;      /* how many (collect) */
    bool send_penalty;   /* a send found its receiver READY (worker.c) */
    sx__wstats st;
    uint32_t lat_sample; /* dispatches since the last latency sample */
    /* The answers given on this worker to the process it runs, during
     * that process's dispatch (loc_on: a handler answering at once, or a
     * callback it set off answering an earlier yield) and while its
     * mailbox was empty (engine/core/dispatch.c,
     * sx_complete): oldest first, linked through node.next. Its next step
     * takes them before the mailbox (engine/sched/turn.c, collect); when
     * the process leaves the worker first, they go to the front of its
     * mailbox (sx__loc_flush). Owner only. */
    sx__ev *loc_first, *loc_last;
    bool loc_on;
    alignas(64) sx__timers tm; /* sleeps (engine/timer/sleep.c) */
    bool tm_ok;                /* tm initialised (workers_fini) */
    /* In sx__park_wait's sleep, set after the re-scan found nothing and
     * cleared after the sleep (relaxed; read by parking workers to bound
     * their own sleep while this one may sit on due timers: sleep.c; and
     * by a timed-out one's look for a lost wake-up, after an acquire load
     * of n_parked: park.c). */
    _Atomic bool parked;
    /* The references its sends keep (sx__prefs): its thread's, set while
     * the thread runs as this worker (worker.c, tls_prefs). */
    sx__prefs *prefs;
    /* The process sx__next_spill last moved from the next slot to the
     * deque, until the next pop: popping it is the slot's turn, not the
     * deque's, and does not count as a pop for fair_look (dq_popped).
     * Owner only. Last in the struct, in what was its end padding: a
     * field inside it moves the engine's later allocations (bench/
     * FINDINGS.md, "Kept references"). */
    sx__proc *spilled;
} sx__worker;

/* [owner of p] Puts the answers w holds for p (loc_first..loc_last) at the
 * front of p's mailbox, where its next pop finds them first: they are
 * older than anything queued there, since sx_complete holds an answer only
 * while the mailbox is empty. */
static inline void sx__loc_flush(sx__worker *w, sx__proc *p)
{
    if (w->loc_first == NULL)
        return;
    sx__mpsc_unpop_chain(&p->mbox, &w->loc_first->node, &w->loc_last->node);
    w->loc_first = w->loc_last = NULL;
}

/* ---- park ---------------------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Workers parked or about to park. seq_cst RMW by the parker, seq_cst
     * load by producers: the two halves of the Dekker-style handshake in
     * docs/SCHEDULER.md. */
    alignas(64) _Atomic unsigned n_parked;
    /* Workers in the spin phase (relaxed hint for local pushes). */
    _Atomic unsigned n_spinning;
    /* Threads in sx_engine_wait_all. RMWs only (the waiters' +1 under
     * life_mu, a parking worker's +0, the waiter's -1): engine/core/live.h,
     * "waiting for all". Beside n_parked, whose line a parker writes
     * anyway. */
    _Atomic unsigned all_waiters;
    unsigned tokens; /* wake-ups granted, not yet taken; under mu */
    uint64_t grants; /* wake-ups ever granted; under mu (park.c) */
    bool shutdown;   /* under mu; also read relaxed-atomically below */
    _Atomic bool quit;
} sx__park;

/* engine/sched/worker.c */
int sx__workers_start(sx_engine *e);
void sx__workers_join(sx_engine *e);
/* Queues a READY process (the caller won the transition to READY). */
void sx__enqueue(sx_engine *e, sx__proc *p);
/* A process new to the engine: like sx__enqueue, but from a thread that
 * is not a worker it goes to the submission queue (gq), not wq. */
void sx__enqueue_new(sx_engine *e, sx__proc *p);
/* Delivers ev (a filled event) to p, which the caller holds a reference
 * on: push + wake. Returns 0, or SX_ENOTFOUND / SX_ECLOSED when p finished
 * or is terminating (ev then stays queued and is freed with the slot). */
int sx__deliver(sx_engine *e, sx__proc *p, sx__ev *ev);
/* Messages first..last (linked through node.next, not control events) to
 * p in one push; consumes them. The same results as sx__deliver. */
int sx__deliver_chain(sx_engine *e, sx__proc *p, sx__ev *first, sx__ev *last);
sx__worker *sx__current_worker(sx_engine *e);
/* [worker w] sx__deliver_chain's hand-off with no call, for a send from a
 * step to a process that waits for a message, when w's next slot is
 * empty: p (a reference the caller holds) gets the messages and goes to
 * the slot. false, nothing done, in every other case: the caller then
 * delivers them as sx__deliver_chain does. */
bool sx__hand_off_next(sx__worker *w, sx__proc *p, sx__ev *first, sx__ev *last);
/* [worker] Moves the process in w's next slot (not NULL) to w's deque,
 * where other workers can take it, and wakes a parked worker; it stays in
 * the slot on a one-worker engine or when the deque is full (worker.c). */
void sx__next_spill(sx_engine *e, sx__worker *w);
/* [any thread] Puts p (READY, owned by the caller) at the back of the
 * line: the injection ring in front of the global queue (inject.c). */
void sx__inject(sx_engine *e, sx__proc *p);
/* [worker] Fires due sleeps: w's own, and the others' when tick is a
 * multiple of 64 or while spinning (worker.c). */
void sx__fire_timers_now(sx_engine *e, sx__worker *w, uint64_t tick,
                         unsigned spins);
/* sx__fire_timers_now on the looks that fire (tick a multiple of 8, or
 * spinning): the other seven in eight return here, without a call (whose
 * frame was ~20 instructions of every pingpong hop). */
static inline void sx__fire_timers(sx_engine *e, sx__worker *w, uint64_t tick,
                                   unsigned spins)
{
    if (spins == 0 && (tick & 7) != 0)
        return;
    sx__fire_timers_now(e, w, tick, spins);
}
/* engine/sched/turn.c: [worker] Runs p, which w took from a queue, for
 * up to `throughput` turns (or until it waits or finishes). */
void sx__run(sx_engine *e, sx__worker *w, sx__proc *p);
/* engine/core/dispatch.c: sx_send builds its event at once on a worker. */
extern const sx__send_hooks sx__worker_send_hooks;

/* engine/sched/park.c */
int sx__park_init(sx__park *pk);
void sx__park_fini(sx__park *pk);
void sx__park_notify(sx_engine *e);
/* Parks w until a token, shutdown, or until_ns (absolute, sx__now_ns's
 * clock; the park's own periodic re-check if that comes first). false:
 * shutting down. */
bool sx__park_wait(sx_engine *e, sx__worker *w, uint64_t until_ns);
void sx__park_shutdown(sx_engine *e);
bool sx__work_visible(sx_engine *e);

#endif

/* engine/sched/turn.c — running a process: a turn of collecting its
 * events, stepping it and dispatching its yields, and the process state
 * machine that decides what it does next.
 *
 * sx__run: CAS READY -> RUNNING, then up to `throughput` turns of: collect
 * events (control first, then the mailbox, at most `throughput`), step,
 * dispatch yields, and decide with a CAS on the state word whether it runs
 * again (a wake-up flag is set, or CONTINUE), goes to BLOCKED / IDLE, or
 * used up its turn and goes to the back of the line (the injection ring).
 * Every CAS that fails because a producer set a flag re-evaluates.
 * Finding the process to run is engine/sched/worker.c.
 *
 * Threads: [worker] only.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"
#include "engine/core/job.h" /* sx__ckpt_* */
#include "engine/io/io.h"    /* sx__now_ns */

/* ---- running a process --------------------------------------------------- */

/* Fills out from the single event ev. */
static inline __attribute__((always_inline)) void
event_of(sx__proc *p, const sx__ev *ev, sx_event *out)
{
    if (ev->watch == SX__WATCH_SLEEP)
        p->sleeps--; /* a sleep's answer (sleep.c) */
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
 * `throughput` completions piled up while it was idle. docs/API.md, pinned
 * behaviour 5, puts them in one batch with the waking message, so the batch
 * goes on past the budget, in arrival order, to the first message; out of
 * memory it stops where it is. The control events (batch[0 .. ctl), cancels) do
 * not count as that message: woken by a cancel, the process gets every
 * completion that arrived meanwhile too (with them counted, it would get
 * the first throughput - 1 and the rest would stay queued behind an IDLE
 * process, which no completion wakes). Rare, hence apart from collect's loop.
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
 * what it would get with one node per message: the same events, in the same
 * order, as many as fit (docs/API.md, pinned behaviour 5: the messages that
 * wake an IDLE process share its batch with the completions that arrived before
 * them; past_budget when those are more than the budget). The nodes behind the
 * events, to free after the step, are w->batch_ev[0 .. w->n_nodes). */
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
    if (w->loc_first != NULL) {
        /* The answers held at the last dispatch (sx_complete): older than
         * everything in the mailbox. What the batch has no room for (cap;
         * the batch holds at least that many, as it only grows) goes to
         * the mailbox's front, for the next step. */
        sx__ev *ev = w->loc_first;
        while (ev != NULL && n < cap) {
            /* relaxed: the held list is this worker's alone. */
            sx__ev *next = (sx__ev *)atomic_load_explicit(&ev->node.next,
                                                          memory_order_relaxed);
            w->batch_ev[k++] = ev;
            event_of(p, ev, &w->batch[n++]);
            ev = next;
        }
        w->loc_first = ev;
        if (ev != NULL)
            sx__loc_flush(w, p);
        else
            w->loc_last = NULL;
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

/* What a step that did not end its process wants next. A step that wrote
 * yields waits for an answer or a message (docs/SCHEDULER.md §2), except
 * CONTINUE whose yields are all fire-and-forget (SX_TAG_NONE): no answer
 * will come, so it runs again, as CONTINUE says (docs/COMMANDS.md, "Fire
 * and forget"). sx_send writes no yield as far as the status goes. */
static inline __attribute__((always_inline)) uint8_t
want_of(const sx_step_output *out)
{
    /* Counted as the step wrote them (process/output.c, put_yield): a
     * send has no tag, so every answer is a command's. */
    bool answers = out->n_answers > 0, commands = out->n_cmds > 0;
    if (out->status == SX__ST_WAIT ||
        (commands && (answers || out->status == SX__ST_IDLE)))
        return SX_PSTATE_BLOCKED;
    if (out->status == SX__ST_IDLE)
        return SX_PSTATE_IDLE;
    return SX_PSTATE_READY;
}

/* The end of step_once for a job: a checkpointed job's output goes once
 * its checkpoint is stored (engine/core/checkpoint.c; p is the store's
 * then), any other job's at once. Apart from the turn: jobs are few, and
 * the turn of every other process only tests p->job. */
static __attribute__((cold, noinline)) uint8_t
job_tail(sx_engine *e, sx__proc *p, const sx_step_output *out)
{
    uint8_t want = want_of(out);
    int ck = sx__ckpt_park(e, p, out, want);
    if (ck == 1)
        return 0;
    if (ck < 0) {
        /* Nothing of the step went out. Out of memory and a stop say so;
         * a record the store refuses (a state or message too large for
         * it) is a storage failure. */
        sx__finish(e, p,
                   ck == SX_ENOMEM || ck == SX_ESTOPPING ? ck : SX_ESTORAGE,
                   ck == SX_ENOMEM      ? "checkpoint: out of memory"
                   : ck == SX_ESTOPPING ? "checkpoint: the engine is stopping"
                                        : "checkpoint: too large for the state "
                                          "store (a row holds at most "
                                          "900,000,000 bytes)",
                   (sx_payload){ NULL, 0 });
        return 0;
    }
    if (out->n_yields > 0 && sx__dispatch_job(e, p, out) != 0) {
        sx__finish(e, p, SX_ENOMEM, "dispatch: out of memory",
                   (sx_payload){ NULL, 0 });
        return 0;
    }
    return want;
}

/* What follows a step that returned rc: its events freed, its output
 * dispatched or its process finished; step_once's answer. job: p is a
 * job (a constant in each copy). */
static inline __attribute__((always_inline)) uint8_t
step_end(sx_engine *e, sx__worker *w, sx__proc *p, int rc, bool job)
{
    sx_step_output *out = &w->out;
    /* relaxed: a figure for listings; only this worker writes it now. */
    atomic_store_explicit(
        &p->steps, atomic_load_explicit(&p->steps, memory_order_relaxed) + 1,
        memory_order_relaxed);
    sx__wstat_add(&w->st.steps, 1);
    if (job)
        sx__ckpt_consumed(e, p, w->batch_ev, w->n_nodes);
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
        out->n_yields > 0 && !(job && sx__ckpt_final(e, p, out)))
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
    if (job)
        return job_tail(e, p, out);
    size_t n_yields = out->n_yields;
    if (n_yields > 0) {
        /* The handlers' answers given at once are held for the next step
         * (sx_complete, w->loc_first). */
        w->loc_on = true;
        int drc = sx__dispatch(e, p, out);
        w->loc_on = false;
        /* sx__dispatch took every send's node, on each of its paths
         * (engine/core/dispatch.c, dispatch_as). */
        out->sends_gone = true;
        if (drc != 0) {
            sx__loc_flush(w, p); /* freed with the mailbox */
            sx__finish(e, p, SX_ENOMEM, "dispatch: out of memory",
                       (sx_payload){ NULL, 0 });
            return 0;
        }
    }
    return want_of(out);
}

/* step_once for a job (p->job): apart from the turn, so that every other
 * process's step only tests p->job once, before the step (after it the
 * test would keep p in a register across the step's call: 8 more
 * instructions per pingpong message in callgrind). */
static __attribute__((cold, noinline)) uint8_t
step_job(sx_engine *e, sx__worker *w, sx__proc *p, size_t n)
{
    sx__output_reset(&w->out);
    int rc = p->type->step(p->user_state, w->batch, n, &w->out);
    return step_end(e, w, p, rc, true);
}

/* Runs one step. Returns the state the process wants next (READY to run
 * again at once, BLOCKED, IDLE), or 0 when it finished (or, a checkpointed
 * job, when its checkpoint took it: checkpoint.c). */
static uint8_t step_once(sx_engine *e, sx__worker *w, sx__proc *p, size_t n)
{
    if (__builtin_expect(p->job, 0))
        return step_job(e, w, p, n);
    sx_step_output *out = &w->out;
    sx__output_reset(out);
    int rc = p->type->step(p->user_state, w->batch, n, out);
    return step_end(e, w, p, rc, false);
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

void sx__run(sx_engine *e, sx__worker *w, sx__proc *p)
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
        &p->state, &s, SX_PSTATE_RUNNING | (s & (SX__F_TERM | SX__F_CKPT)),
        memory_order_acquire, memory_order_acquire));

    unsigned turns = 0;
    for (;;) {
        uint8_t want;
        if (__builtin_expect(s & (SX__F_TERM | SX__F_CKPT), 0)) {
            if (s & SX__F_TERM) {
                sx__finish_terminated(e, p);
                return;
            }
            /* A checkpointed job whose checkpoint is stored (or that
             * resumed at a start): its step's output goes now, then it
             * waits as that step said (engine/core/checkpoint.c). */
            if (sx__ckpt_resume(e, p) != 0) {
                sx__finish(e, p, SX_ENOMEM, "dispatch: out of memory",
                           (sx_payload){ NULL, 0 });
                return;
            }
            want = p->wait_kind;
        } else {
            size_t n = collect(e, w, p);
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
        }
        /* Answers held for the next step (step_end) wake a process that
         * waits for one; an IDLE one waits for a message, so they wait
         * in its mailbox. */
        bool more;
        if (w->loc_first != NULL && want != SX_PSTATE_IDLE) {
            more = true;
        } else {
            sx__loc_flush(w, p);
            more = backlog(p, want);
        }

        /* acquire: see the flags producers set (their fetch_or is a
         * release) and the events they pushed before. */
        s = atomic_load_explicit(&p->state, memory_order_acquire);
        for (;;) {
            if (s & SX__F_TERM) {
                sx__loc_flush(w, p); /* freed with the mailbox */
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
                sx__fire_timers(e, w, 0, 0);
                /* Nor does it look for work, where the references its
                 * sends keep are let go now and then (sx__prefs): here
                 * instead, so that the slot of a process it sent to and
                 * that finished meanwhile is not kept for as long as this
                 * process runs (test_sched
                 * kept_slot_freed_beside_lone_runner). */
                sx__prefs_flush(e, w->prefs);
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
                 * worker's CAS READY -> RUNNING acquires it, with the
                 * held answers put in the mailbox before it. */
                sx__loc_flush(w, p);
                if (atomic_compare_exchange_weak_explicit(
                        &p->state, &s, SX_PSTATE_READY, memory_order_release,
                        memory_order_acquire)) {
                    sx__inject(e, p);
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
        /* p keeps this worker for another step, as long as that step
         * takes: a process its last step woke (the next slot) goes to the
         * deque, where an idle worker can take it, instead of waiting out
         * p's turn (up to `throughput` steps; test_sched
         * woken_beside_long_steps). */
        if (w->next != NULL)
            sx__next_spill(e, w);
    }
}

/* engine/io/loop.c — libuv loop threads: the hand-off from workers, op
 * bookkeeping, cancellation when a process finishes, per-yield deadlines,
 * shutdown. The families (engine/commands/) build on this. See io.h.
 *
 * Threads: each loop's uv handles, lists and ops are touched by that
 * loop's thread only; workers reach a loop only through its request queue
 * (a Vyukov MPSC, process/mailbox.h) and uv_async_send, the one libuv call
 * that is safe from any thread.
 */
#include "engine/io/io.h"
#include "process/fault.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sx__ioloop {
    sx_engine *engine;
    unsigned id;
    pthread_t thread;
    bool thread_started;
    uv_loop_t uv;
    uv_async_t bell; /* the doorbell: uv_async_send from any thread */
    sx__mpsc q;      /* requests; consumer: this loop's thread */
    /* [loop] every op and handle alive on this loop */
    sx__ioop *all;
    size_t n_all;
    uint64_t next_handle;
    bool quitting, bell_closed;
    unsigned walking; /* list walks in progress: releases are deferred */
    sx__ioop *grave;  /* released during a walk, freed after it */
    sx__ioreq quit;   /* the QUIT request */
    /* The SWEEP request, posted by a finishing worker that could not
     * allocate its CANCEL (sx__io_proc_finished), and whether it is on
     * the queue (then later finishers only leave their io_dead_gen). */
    sx__ioreq sweep;
    _Atomic int sweep_queued;
    /* The deadline heap (engine/timer/heap.h) and the one uv timer behind
     * it, armed for tick_due (UINT64_MAX: stopped). */
    sx__theap heap;
    uv_timer_t tick;
    uint64_t tick_due;
};

/* A process finished with ops or handles alive. Owned by the queue, then
 * by the loop (freed when handled). */
typedef struct {
    sx__ioreq req;
    sx__proc *proc;
    uint32_t gen;
} sx__iocancel;

uint64_t sx__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t sx_clock_now_ns(void)
{
    return sx__now_ns();
}

static sx__ioloop *loop_of(sx_engine *e, sx__proc *p)
{
    return &e->loops[p->index % e->n_loops];
}

static void post(sx__ioloop *l, sx__ioreq *r)
{
    sx__mpsc_push(&l->q, &r->node);
    /* uv_async_send is safe from any thread; a call while a ring is still
     * pending coalesces with it, and libuv runs the callback at least once
     * after this call, so the request is seen. */
    uv_async_send(&l->bell);
}

/* ---- lists [loop] ---- */

static void link_op(sx__ioloop *l, sx__ioop *op)
{
    sx__pext *x = sx__ptable_pext(l->engine, op->proc);
    op->pprev = NULL;
    op->pnext = x->io_head;
    if (x->io_head != NULL)
        x->io_head->pprev = op;
    x->io_head = op;
    op->aprev = NULL;
    op->anext = l->all;
    if (l->all != NULL)
        l->all->aprev = op;
    l->all = op;
    l->n_all++;
    /* relaxed: figures only. */
    atomic_fetch_add_explicit(&l->engine->io_inflight, 1, memory_order_relaxed);
}

static void unlink_op(sx__ioloop *l, sx__ioop *op)
{
    sx__pext *x = sx__ptable_pext(l->engine, op->proc);
    if (op->pprev != NULL)
        op->pprev->pnext = op->pnext;
    else
        x->io_head = op->pnext;
    if (op->pnext != NULL)
        op->pnext->pprev = op->pprev;
    if (op->aprev != NULL)
        op->aprev->anext = op->anext;
    else
        l->all = op->anext;
    if (op->anext != NULL)
        op->anext->aprev = op->aprev;
    l->n_all--;
    /* relaxed: figures only. */
    atomic_fetch_sub_explicit(&l->engine->io_inflight, 1, memory_order_relaxed);
    /* relaxed: a hint for sx__finish, which only needs to see non-zero
     * while something is alive; every increment happens before (on the
     * owner's chain of steps, or on this thread while another op lives). */
    atomic_fetch_sub_explicit(&x->io_live, 1, memory_order_relaxed);
}

static void maybe_exit(sx__ioloop *l)
{
    if (l->quitting && l->all == NULL && !l->bell_closed) {
        l->bell_closed = true;
        uv_close((uv_handle_t *)&l->bell, NULL);
        uv_close((uv_handle_t *)&l->tick, NULL);
    }
}

static void op_free(sx__ioop *op)
{
    if (op->vt != NULL && op->vt->fini != NULL)
        op->vt->fini(op);
    free(op);
}

static void walk_begin(sx__ioloop *l)
{
    l->walking++;
}

static void walk_end(sx__ioloop *l)
{
    if (--l->walking > 0)
        return;
    while (l->grave != NULL) {
        sx__ioop *op = l->grave;
        l->grave = op->pnext;
        op_free(op);
    }
    maybe_exit(l);
}

/* Milliseconds from the loop's clock to an absolute deadline, rounded so
 * that the timer never fires before it: libuv fires a timer when its
 * millisecond clock (floor of the monotonic ns) reaches now + timeout. */
static uint64_t ms_until(uv_loop_t *uv, uint64_t deadline_ns)
{
    /* Rounded up without overflow: a deadline within 1 ms of UINT64_MAX
     * must not wrap around to "now" (the timer would fire at once, find
     * nothing due and be armed again, spinning the loop). */
    uint64_t due_ms =
        deadline_ns / 1000000u + (deadline_ns % 1000000u != 0 ? 1 : 0);
    uint64_t now_ms = uv_now(uv);
    return due_ms > now_ms ? due_ms - now_ms : 0;
}

/* ---- deadlines [loop]: the heap (engine/timer/heap.c) behind one uv timer */

static void on_tick(uv_timer_t *h);

/* Points the uv timer at the earliest deadline. */
static void tick_arm(sx__ioloop *l)
{
    sx__iotimer *first = sx__theap_min(&l->heap);
    if (first == NULL) {
        if (l->tick_due != UINT64_MAX) {
            uv_timer_stop(&l->tick);
            l->tick_due = UINT64_MAX;
        }
        return;
    }
    uint64_t due = first->due_ns;
    if (due == l->tick_due)
        return;
    l->tick_due = due;
    uv_update_time(&l->uv);
    uv_timer_start(&l->tick, on_tick, ms_until(&l->uv, due), 0);
}

static void on_tick(uv_timer_t *h)
{
    sx__ioloop *l = h->data;
    l->tick_due = UINT64_MAX;
    uint64_t now = sx__now_ns();
    sx__iotimer *t;
    while ((t = sx__theap_min(&l->heap)) != NULL && t->due_ns <= now) {
        sx__theap_remove(&l->heap, t);
        t->fire(t);
    }
    tick_arm(l);
}

static int timer_set(sx__ioloop *l, sx__iotimer *t, uint64_t due_ns)
{
    if (t->idx != 0)
        sx__theap_remove(&l->heap,
                         t); /* then the add cannot fail: there is room */
    else if (SX__FAULT(SX__FAULT_IO_TIMER))
        return SX_ENOMEM; /* as a full heap that cannot grow */
    t->due_ns = due_ns;
    if (!sx__theap_add(&l->heap, t))
        return SX_ENOMEM;
    if (due_ns < l->tick_due)
        tick_arm(l);
    return 0;
}

int sx__io_timer_set(sx__ioop *op, sx__iotimer *t, uint64_t due_ns)
{
    return timer_set(op->loop, t, due_ns);
}

void sx__io_timer_del(sx__ioop *op, sx__iotimer *t)
{
    if (t->idx != 0)
        sx__theap_remove(&op->loop->heap, t);
}

/* ---- ops [loop] ---- */

sx__ioop *sx__io_op_new(size_t size, const sx__ioop_vt *vt, sx_completer *done)
{
    if (size < sizeof(sx__ioop) || done == NULL)
        return NULL;
    sx__ioop *op = calloc(1, size);
    if (op == NULL)
        return NULL;
    sx__ev *ev = &done->ev;
    op->req.kind = SX__IOREQ_START;
    op->vt = vt;
    op->engine = ev->engine;
    op->proc = ev->to;
    op->gen = ev->to_gen;
    op->loop = loop_of(ev->engine, ev->to);
    op->done = done;
    op->dl = ev->dl;
    return op;
}

void sx__io_submit(sx__ioop *op)
{
    /* This worker runs the owner now: its finish will look (p->io). */
    op->proc->io = 1;
    /* relaxed: see unlink_op. */
    atomic_fetch_add_explicit(&sx__ptable_pext(op->engine, op->proc)->io_live,
                              1, memory_order_relaxed);
    post(op->loop, &op->req);
}

sx__ioop *sx__io_handle_new(sx__ioop *op, size_t size, const sx__ioop_vt *vt)
{
    sx__ioop *h = calloc(1, size);
    if (h == NULL)
        return NULL;
    h->vt = vt;
    h->engine = op->engine;
    h->loop = op->loop;
    h->proc = op->proc;
    h->gen = op->gen;
    h->started = true;
    h->handle = ++op->loop->next_handle;
    /* relaxed: see unlink_op (op is alive, so the count is non-zero). */
    atomic_fetch_add_explicit(&sx__ptable_pext(h->engine, h->proc)->io_live, 1,
                              memory_order_relaxed);
    link_op(op->loop, h);
    return h;
}

sx__ioop *sx__io_handle_find(sx__ioop *op, uint64_t id)
{
    for (sx__ioop *h = sx__ptable_pext(op->engine, op->proc)->io_head;
         h != NULL; h = h->pnext)
        if (h->handle == id && h->gen == op->gen && !h->released &&
            !h->cancelled)
            return h;
    return NULL;
}

void sx__io_answer(sx__ioop *op, sx_payload result, int error, const char *msg)
{
    sx_completer *done = op->done;
    if (done == NULL)
        return;
    op->done = NULL;
    if (op->dl != NULL && op->dl->target == op)
        op->dl->target = NULL;
    op->dl = NULL; /* sx_complete takes it from the completer */
    sx_complete(done, result, error, msg);
}

void sx__io_finish(sx__ioop *op, sx_payload result, int error, const char *msg)
{
    sx_completer *done = op->done;
    op->done = NULL;
    if (op->dl != NULL && op->dl->target == op)
        op->dl->target = NULL;
    op->dl = NULL;
    sx__io_release(op);
    if (done != NULL)
        sx_complete(done, result, error, msg);
}

void sx__io_release(sx__ioop *op)
{
    if (op->released)
        return;
    if (op->done != NULL)
        sx__io_answer(op, (sx_payload){ NULL, 0 }, SX_ECANCELLED, NULL);
    sx__ioloop *l = op->loop;
    op->released = true;
    unlink_op(l, op);
    if (l->walking > 0) {
        op->pnext = l->grave;
        l->grave = op;
        return;
    }
    op_free(op);
    maybe_exit(l);
}

void sx__io_cancel(sx__ioop *op)
{
    if (op->cancelled || op->released)
        return;
    op->cancelled = true;
    if (op->vt != NULL && op->vt->cancel != NULL)
        op->vt->cancel(op);
}

bool sx__io_quitting(const sx__ioop *op)
{
    return op->loop->quitting;
}

uv_loop_t *sx__io_uv(const sx__ioop *op)
{
    return &op->loop->uv;
}

sx_pid sx__io_pid(const sx__ioop *op)
{
    sx_engine *e = op->engine;
    sx_pid pid = { e->cfg.node, e->cfg.host,
                   ((uint64_t)op->gen << 32) | op->proc->index };
    return pid;
}

/* ---- deadlines ---- */

static void dl_unref(sx__iodl *dl)
{
    /* acq_rel: the last owner sees everything the other one wrote. */
    if (atomic_fetch_sub_explicit(&dl->refs, 1, memory_order_acq_rel) == 1) {
        sx__ev_free(dl->tev);
        free(dl);
    }
}

/* [loop] The loop is done with dl: off the lists and the heap, the
 * loop's reference dropped. Once only. */
static void dl_close(sx__iodl *dl)
{
    if (dl->closing)
        return;
    dl->closing = true;
    sx__ioloop *l = dl->op.loop;
    if (dl->timer.idx != 0)
        sx__theap_remove(&l->heap, &dl->timer);
    if (dl->op.started) {
        dl->op.released = true;
        unlink_op(l, &dl->op);
    }
    dl_unref(dl);
    maybe_exit(l);
}

static void dl_cancel(sx__ioop *op)
{
    dl_close((sx__iodl *)op);
}

static const sx__ioop_vt dl_vt = { "deadline", NULL, dl_cancel, NULL };

/* Answers dl's yield with error (unless the command answered first),
 * cancels the op it guards, and closes dl. */
static void dl_expire(sx__iodl *dl, int error, const char *msg)
{
    /* acq_rel: the claim orders this answer against the completer's. */
    if (atomic_exchange_explicit(&dl->claimed, 1, memory_order_acq_rel) == 0) {
        /* relaxed: a figure. */
        if (error == SX_ETIMEDOUT)
            atomic_fetch_add_explicit(&dl->op.engine->io_timeouts, 1,
                                      memory_order_relaxed);
        sx__ev *ev = dl->tev; /* ownership passes to sx_complete */
        dl->tev = NULL;
        ev->kind = SX__EV_COMPLETION;
        ev->tag = dl->tag;
        ev->to = dl->op.proc;
        ev->to_gen = dl->op.gen;
        ev->engine = dl->op.engine;
        sx_complete((sx_completer *)ev, (sx_payload){ NULL, 0 }, error, msg);
        if (dl->target != NULL) {
            sx__ioop *target = dl->target;
            dl->target = NULL;
            sx__io_cancel(target);
        }
    }
    dl_close(dl);
}

static void dl_fire(sx__iotimer *t)
{
    sx__iodl *dl = (sx__iodl *)((char *)t - offsetof(sx__iodl, timer));
    dl_expire(dl, SX_ETIMEDOUT, "the yield's timeout passed");
}

int sx__io_deadline(sx_engine *e, sx_completer *done, int64_t timeout_ms)
{
    sx__iodl *dl = calloc(1, sizeof(*dl));
    if (dl == NULL)
        return SX_ENOMEM;
    dl->tev = sx__ev_alloc();
    if (dl->tev == NULL) {
        free(dl);
        return SX_ENOMEM;
    }
    sx__ev *ev = &done->ev;
    dl->op.req.kind = SX__IOREQ_DL_START;
    dl->op.vt = &dl_vt;
    dl->op.engine = e;
    dl->op.proc = ev->to;
    dl->op.gen = ev->to_gen;
    dl->op.loop = loop_of(e, ev->to);
    dl->stop.kind = SX__IOREQ_DL_STOP;
    dl->tag = ev->tag;
    /* Saturating: timeout_ms is any int64 > 0, and a product that wraps
     * around would put the deadline in the past (INT64_MAX ms: 1 ms ago)
     * and time the yield out at once. UINT64_MAX never fires. */
    uint64_t now = sx__now_ns();
    dl->deadline_ns = (uint64_t)timeout_ms > (UINT64_MAX - now) / 1000000u
                          ? UINT64_MAX
                          : now + (uint64_t)timeout_ms * 1000000u;
    /* relaxed: published to the loop by the queue push (release). */
    atomic_init(&dl->refs, 2);
    atomic_init(&dl->claimed, 0);
    ev->dl = dl;
    ev->to->io = 1; /* as in sx__io_submit */
    /* relaxed: see unlink_op. */
    atomic_fetch_add_explicit(&sx__ptable_pext(e, ev->to)->io_live, 1,
                              memory_order_relaxed);
    post(dl->op.loop, &dl->op.req);
    return 0;
}

bool sx__io_dl_claim(sx__iodl *dl)
{
    /* acq_rel: see dl_fire. */
    return atomic_exchange_explicit(&dl->claimed, 1, memory_order_acq_rel) == 0;
}

/* Drops what a DL_STOP carries without a loop: the completer's reference,
 * and the loop's if the loop never closed dl (its DL_START was still
 * queued when the loop quit). Only once the loop thread is gone (its
 * writes to dl->closing happen before: joined, then io_closed). */
static void dl_stop_unref(sx__iodl *dl)
{
    if (!dl->closing) {
        dl->closing = true;
        dl_unref(dl);
    }
    dl_unref(dl);
}

void sx__io_dl_done(sx_engine *e, sx__iodl *dl, bool answered)
{
    if (!answered) {
        dl_unref(dl);
        return;
    }
    /* The answer's DL_STOP goes to dl's loop, unless the engine has
     * stopped: a user command may be answered after sx_engine_stop
     * (THREADING.md: a no-op), when the loops are gone. seq_cst (both):
     * the Dekker pattern with sx__io_stop, which sets io_closed, then
     * reads io_posters: either it sees us counted and waits for the post
     * (into a queue it then drains), or we see the flag and post nothing. */
    atomic_fetch_add_explicit(&e->io_posters, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&e->io_closed, memory_order_seq_cst)) {
        /* relaxed: the flag's synchronisation is done. */
        atomic_fetch_sub_explicit(&e->io_posters, 1, memory_order_relaxed);
        dl_stop_unref(dl);
        return;
    }
    post(dl->op.loop, &dl->stop); /* our reference goes with it */
    /* release: the stopper's acquire load sees the post done. */
    atomic_fetch_sub_explicit(&e->io_posters, 1, memory_order_release);
}

uint64_t sx__io_ms_until(const sx__ioop *op, uint64_t deadline_ns)
{
    return ms_until(&op->loop->uv, deadline_ns);
}

static bool op_dead(sx__ioloop *l, const sx__ioop *op);

static void dl_start(sx__ioloop *l, sx__iodl *dl)
{
    dl->op.started = true;
    link_op(l, &dl->op);
    /* acquire: a completion claimed it already; DL_STOP follows. */
    if (atomic_load_explicit(&dl->claimed, memory_order_acquire) != 0)
        return;
    if (l->quitting || op_dead(l, &dl->op)) {
        sx__io_cancel(&dl->op);
        return;
    }
    dl->timer.fire = dl_fire;
    if (timer_set(l, &dl->timer, dl->deadline_ns) != 0)
        dl_expire(dl, SX_ENOMEM, "no memory for the yield's timeout");
}

/* ---- the request queue ---- */

/* True when op's process has finished: its slot's generation moved on,
 * or it finished without a CANCEL request (io_dead_gen, see
 * sx__io_proc_finished); the latter is seen here once a SWEEP that
 * synchronised with that finish has been handled. */
static bool op_dead(sx__ioloop *l, const sx__ioop *op)
{
    /* acquire: pairs with the release store of gen in retire. */
    if (atomic_load_explicit(&op->proc->gen, memory_order_acquire) != op->gen)
        return true;
    /* relaxed: published by the sweep flag (see sx__io_proc_finished). */
    return atomic_load_explicit(
               &sx__ptable_pext(l->engine, op->proc)->io_dead_gen,
               memory_order_relaxed) == op->gen;
}

static void op_start(sx__ioloop *l, sx__ioop *op)
{
    link_op(l, op);
    op->started = true;
    /* The owner may have finished before the loop got here; its
     * CANCEL_PROC is queued behind this request (or a SWEEP ran before
     * it), but there is no point starting. Likewise when the yield
     * already timed out. */
    bool dead = op_dead(l, op);
    bool timed_out =
        op->dl != NULL &&
        atomic_load_explicit(&op->dl->claimed, memory_order_acquire) != 0;
    if (dead || timed_out || l->quitting) {
        op->cancelled = true;
        sx__io_release(op);
        return;
    }
    if (op->dl != NULL)
        op->dl->target = op;
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&l->engine->io_ops, 1, memory_order_relaxed);
    op->vt->start(op);
}

static void proc_cancel(sx__ioloop *l, sx__proc *p, uint32_t gen)
{
    walk_begin(l);
    for (sx__ioop *op = sx__ptable_pext(l->engine, p)->io_head, *next;
         op != NULL; op = next) {
        next = op->pnext;
        if (op->gen == gen && !op->released)
            sx__io_cancel(op);
    }
    walk_end(l);
}

/* Cancels every op and handle on l whose process has finished (the
 * SWEEP request). */
static void sweep(sx__ioloop *l)
{
    walk_begin(l);
    for (sx__ioop *op = l->all, *next; op != NULL; op = next) {
        next = op->anext;
        if (!op->released && op_dead(l, op))
            sx__io_cancel(op);
    }
    walk_end(l);
}

static void quit_all(sx__ioloop *l)
{
    l->quitting = true;
    walk_begin(l);
    for (sx__ioop *op = l->all, *next; op != NULL; op = next) {
        next = op->anext;
        if (!op->released)
            sx__io_cancel(op);
    }
    walk_end(l);
    maybe_exit(l);
}

#define BELL_BATCH 256u

static void on_bell(uv_async_t *a)
{
    sx__ioloop *l = a->data;
    /* Deadlines computed below are measured from a fresh clock. */
    uv_update_time(&l->uv);
    sx__mpsc_node *n;
    /* At most BELL_BATCH requests per call: a burst of 100,000 sleeps would
     * otherwise keep the loop here while timers that are due wait. When
     * the batch is used up the bell rings itself (uv_async_send is safe
     * from the loop thread too) and the loop runs its due timers first. */
    unsigned left = BELL_BATCH;
    while (left-- > 0 && (n = sx__mpsc_pop(&l->q)) != NULL) {
        sx__ioreq *r = (sx__ioreq *)n;
        switch ((sx__ioreq_kind)r->kind) {
        case SX__IOREQ_START:
            op_start(l, (sx__ioop *)r);
            break;
        case SX__IOREQ_CANCEL: {
            sx__iocancel *c = (sx__iocancel *)r;
            proc_cancel(l, c->proc, c->gen);
            free(c);
            break;
        }
        case SX__IOREQ_DL_START:
            dl_start(l, (sx__iodl *)r);
            break;
        case SX__IOREQ_DL_STOP: {
            sx__iodl *dl = (sx__iodl *)((char *)r - offsetof(sx__iodl, stop));
            dl_close(dl);
            dl_unref(dl); /* the completer's reference */
            break;
        }
        case SX__IOREQ_QUIT:
            quit_all(l);
            break;
        case SX__IOREQ_SWEEP:
            /* acq_rel: the acquire synchronises with every finisher that
             * found the flag set (their io_dead_gen stores are seen by
             * the sweep and by the ops started after it); a finisher
             * ordered after this clear posts the request again. */
            atomic_exchange_explicit(&l->sweep_queued, 0, memory_order_acq_rel);
            sweep(l);
            break;
        }
    }
    if (left != UINT_MAX)
        return; /* the queue ran dry (or a push is half done: its producer
                 * rings after it) */
    if (!sx__mpsc_empty(&l->q))
        uv_async_send(a); /* the batch ran out first: come back */
}

void sx__io_proc_finished(sx_engine *e, sx__proc *p, uint32_t gen)
{
    /* p->io: set by the owner's own dispatches, which this finish follows;
     * without it the slot's sx__pext is not touched. relaxed: see
     * unlink_op. */
    if (e->loops == NULL || !p->io ||
        atomic_load_explicit(&sx__ptable_pext(e, p)->io_live,
                             memory_order_relaxed) == 0)
        return;
    sx__iocancel *c =
        SX__FAULT(SX__FAULT_IO_CANCEL) ? NULL : malloc(sizeof(*c));
    if (c == NULL) {
        /* Without the request the ops and handles would run on until
         * their natural end, and a handle (a timer, a ticker, a
         * connection) has none before sx_engine_stop. The loop's SWEEP
         * request, never allocated, cancels every op whose process has
         * finished: the generation moved on, or it is the slot's
         * io_dead_gen, which says so before the slot is retired. relaxed:
         * published by the queue push, or by the exchange below. */
        atomic_store_explicit(&sx__ptable_pext(e, p)->io_dead_gen, gen,
                              memory_order_relaxed);
        sx__ioloop *l = loop_of(e, p);
        /* acq_rel: release publishes io_dead_gen to the loop's clear of
         * the flag when it is already set (the SWEEP queued, not yet
         * handled: it covers us); acquire pairs with that clear, so a
         * finisher that finds it clear posts a SWEEP of its own. */
        if (atomic_exchange_explicit(&l->sweep_queued, 1,
                                     memory_order_acq_rel) == 0)
            post(l, &l->sweep);
        return;
    }
    c->req.kind = SX__IOREQ_CANCEL;
    c->proc = p;
    c->gen = gen;
    post(loop_of(e, p), &c->req);
}

/* ---- loop threads ---- */

static void *loop_main(void *arg)
{
    sx__ioloop *l = arg;
    /* A write to a socket or pipe whose reader is gone must fail with
     * EPIPE on this thread, not kill the whole host with SIGPIPE. */
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    /* libuv learns that an exec's child exited only from its SIGCHLD
     * handler. This thread inherits the mask of the one that started the
     * engine, and a host that blocked SIGCHLD there (blocking signals
     * before sigwait in main is common) would leave the signal pending
     * for good: no child reaped, no exec answered, no stop returning.
     * SIGCHLD is process-directed, so one unblocked thread is enough. */
    sigset_t chld_set;
    sigemptyset(&chld_set);
    sigaddset(&chld_set, SIGCHLD);
    pthread_sigmask(SIG_UNBLOCK, &chld_set, NULL);
    uv_run(&l->uv, UV_RUN_DEFAULT);
    return NULL;
}

static void loop_fini(sx__ioloop *l)
{
    /* Requests left behind (posted after quit): free them. */
    sx__mpsc_node *n;
    while ((n = sx__mpsc_pop(&l->q)) != NULL) {
        sx__ioreq *r = (sx__ioreq *)n;
        if (r->kind == SX__IOREQ_CANCEL)
            free(r);
        else if (r->kind == SX__IOREQ_START) {
            sx__ioop *op = (sx__ioop *)r;
            if (op->done != NULL)
                sx_complete(op->done, (sx_payload){ NULL, 0 }, SX_ECANCELLED,
                            NULL);
            op_free(op);
        } else if (r->kind == SX__IOREQ_DL_STOP) {
            /* The completer's reference, handed back after the loop began
             * to quit: a guarded op (an exec killed after a grace period,
             * a pool request) whose process finished before the quit
             * answered as the loop's last op, and sx_complete posts
             * DL_STOP whether or not the process is alive. The loop's own
             * reference went in dl_close (every op was closed before the
             * loop exited), unless DL_START never ran. */
            dl_stop_unref((sx__iodl *)((char *)r - offsetof(sx__iodl, stop)));
        }
        /* DL_START: only posted by live processes, which are all finished
         * before quit (its DL_STOP, if any, follows it here). SWEEP: the
         * loop's own, nothing to free. */
    }
    uv_loop_close(&l->uv);
    sx__theap_fini(&l->heap);
}

int sx__io_start(sx_engine *e)
{
    unsigned n = e->cfg.io_loops;
    e->loops = calloc(n, sizeof(*e->loops));
    if (e->loops == NULL)
        return SX_ENOMEM;
    e->n_loops = n;
    for (unsigned i = 0; i < n; i++) {
        sx__ioloop *l = &e->loops[i];
        l->engine = e;
        l->id = i;
        l->sweep.kind = SX__IOREQ_SWEEP;
        atomic_init(&l->sweep_queued, 0);
        sx__mpsc_init(&l->q);
        int rc = uv_loop_init(&l->uv);
        if (rc == 0) {
            rc = uv_async_init(&l->uv, &l->bell, on_bell);
            if (rc == 0) {
                uv_timer_init(&l->uv, &l->tick); /* cannot fail */
                l->tick.data = l;
                l->tick_due = UINT64_MAX;
            } else {
                uv_loop_close(&l->uv);
            }
        }
        if (rc != 0) {
            e->n_loops = i;
            sx__io_stop(e);
            /* libuv's codes are -errno on Unix (UV_EMFILE, ...). */
            return rc == UV_ENOMEM ? SX_ENOMEM : rc;
        }
        l->bell.data = l;
        rc = pthread_create(&l->thread, NULL, loop_main, l);
        if (rc != 0) {
            uv_close((uv_handle_t *)&l->bell, NULL);
            uv_close((uv_handle_t *)&l->tick, NULL);
            uv_run(&l->uv, UV_RUN_DEFAULT);
            uv_loop_close(&l->uv);
            e->n_loops = i;
            sx__io_stop(e);
            return -rc;
        }
        l->thread_started = true;
    }
    return 0;
}

void sx__io_stop(sx_engine *e)
{
    if (e->loops == NULL)
        return;
    for (unsigned i = 0; i < e->n_loops; i++) {
        sx__ioloop *l = &e->loops[i];
        if (!l->thread_started)
            continue;
        l->quit.kind = SX__IOREQ_QUIT;
        post(l, &l->quit);
    }
    for (unsigned i = 0; i < e->n_loops; i++) {
        sx__ioloop *l = &e->loops[i];
        if (l->thread_started)
            pthread_join(l->thread, NULL);
    }
    /* From here a late answer's DL_STOP is dropped where it is made
     * (sx__io_dl_done); one already being posted goes into a queue that
     * loop_fini drains. seq_cst: see sx__io_dl_done. */
    atomic_store_explicit(&e->io_closed, true, memory_order_seq_cst);
    while (atomic_load_explicit(&e->io_posters, memory_order_seq_cst) != 0)
        sched_yield();
    for (unsigned i = 0; i < e->n_loops; i++) {
        sx__ioloop *l = &e->loops[i];
        if (l->thread_started)
            loop_fini(l);
    }
    free(e->loops);
    e->loops = NULL;
    e->n_loops = 0;
}

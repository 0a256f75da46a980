/* engine/io/loop.c — the libuv loop threads: their life (start, the
 * thread, quit, stop), the request queue that workers post to and its
 * doorbell, and cancellation when a process finishes (the CANCEL and
 * SWEEP requests). The ops and handles a loop keeps are engine/io/ops.c;
 * its deadlines (the timer heap, per-yield timeouts) engine/io/deadline.c.
 * The families (engine/commands/) build on these. See io.h.
 *
 * Threads: each loop's uv handles, lists and ops are touched by that
 * loop's thread only; workers reach a loop only through its request queue
 * (a Vyukov MPSC, process/mailbox.h) and uv_async_send, the one libuv call
 * that is safe from any thread (sx__io_post, io.h).
 */
#include "engine/io/io.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SX_IO_TSAN 1
#endif
#endif
#include "process/fault.h"

#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>

/* A process finished with ops or handles alive. Owned by the queue, then
 * by the loop (freed when handled). */
typedef struct {
    sx__ioreq req;
    sx__proc *proc;
    uint32_t gen;
} sx__iocancel;

/* ---- the request queue ---- */

/* True when op's process has finished: its slot's generation moved on,
 * or it finished without a CANCEL request (io_dead_gen, see
 * sx__io_proc_finished); the latter is seen here once a SWEEP that
 * synchronised with that finish has been handled. */
bool sx__io_op_dead(sx__ioloop *l, const sx__ioop *op)
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
    sx__io_link(l, op);
    op->started = true;
    /* The owner may have finished before the loop got here; its
     * CANCEL_PROC is queued behind this request (or a SWEEP ran before
     * it), but there is no point starting. Likewise when the yield
     * already timed out. */
    bool dead = sx__io_op_dead(l, op);
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
    sx__io_walk_begin(l);
    for (sx__ioop *op = sx__ptable_pext(l->engine, p)->io_head, *next;
         op != NULL; op = next) {
        next = op->pnext;
        if (op->gen == gen && !op->released)
            sx__io_cancel(op);
    }
    sx__io_walk_end(l);
}

/* Cancels every op and handle on l whose process has finished (the
 * SWEEP request). */
static void sweep(sx__ioloop *l)
{
    sx__io_walk_begin(l);
    for (sx__ioop *op = l->all, *next; op != NULL; op = next) {
        next = op->anext;
        if (!op->released && sx__io_op_dead(l, op))
            sx__io_cancel(op);
    }
    sx__io_walk_end(l);
}

static void quit_all(sx__ioloop *l)
{
    l->quitting = true;
    sx__io_walk_begin(l);
    for (sx__ioop *op = l->all, *next; op != NULL; op = next) {
        next = op->anext;
        if (!op->released)
            sx__io_cancel(op);
    }
    sx__io_walk_end(l);
    sx__io_maybe_exit(l);
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
            sx__io_dl_start(l, (sx__iodl *)r);
            break;
        case SX__IOREQ_DL_STOP:
            sx__io_dl_stop((sx__iodl *)((char *)r - offsetof(sx__iodl, stop)));
            break;
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

/* sx__io_proc_finished for a process with ops or handles alive on its
 * loop: out of line, so that the common case (a process that never used
 * its loop) saves no registers for the request's allocation. */
static __attribute__((noinline)) void
proc_finished_live(sx_engine *e, sx__proc *p, uint32_t gen)
{
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
        sx__ioloop *l = sx__io_loop_of(e, p);
        /* acq_rel: release publishes io_dead_gen to the loop's clear of
         * the flag when it is already set (the SWEEP queued, not yet
         * handled: it covers us); acquire pairs with that clear, so a
         * finisher that finds it clear posts a SWEEP of its own. */
        if (atomic_exchange_explicit(&l->sweep_queued, 1,
                                     memory_order_acq_rel) == 0)
            sx__io_post(l, &l->sweep);
        return;
    }
    c->req.kind = SX__IOREQ_CANCEL;
    c->proc = p;
    c->gen = gen;
    sx__io_post(sx__io_loop_of(e, p), &c->req);
}

void sx__io_proc_finished(sx_engine *e, sx__proc *p, uint32_t gen)
{
    /* p->io: set by the owner's own dispatches, which this finish follows;
     * without it the slot's sx__pext is not touched. relaxed: see
     * sx__io_unlink. */
    if (e->loops == NULL || !p->io ||
        atomic_load_explicit(&sx__ptable_pext(e, p)->io_live,
                             memory_order_relaxed) == 0)
        return;
    proc_finished_live(e, p, gen);
}

/* ---- loop threads ---- */

/* Closes the loop's own handles once it quits and holds no op, so that
 * uv_run returns. */
void sx__io_maybe_exit(sx__ioloop *l)
{
    if (l->quitting && l->all == NULL && !l->bell_closed) {
        l->bell_closed = true;
        uv_close((uv_handle_t *)&l->bell, NULL);
        uv_close((uv_handle_t *)&l->tick, NULL);
    }
}

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
            sx__io_op_free(op);
        } else if (r->kind == SX__IOREQ_DL_STOP) {
            /* The completer's reference, handed back after the loop began
             * to quit: a guarded op (an exec killed after a grace period,
             * a pool request) whose process finished before the quit
             * answered as the loop's last op, and sx_complete posts
             * DL_STOP whether or not the process is alive. The loop's own
             * reference went in dl_close (every op was closed before the
             * loop exited), unless DL_START never ran. */
            sx__io_dl_stop_unref(
                (sx__iodl *)((char *)r - offsetof(sx__iodl, stop)));
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
#if defined(__SANITIZE_THREAD__) || defined(SX_IO_TSAN)
    /* A ThreadSanitizer build takes engine/io/tsan_close.c (see there). */
    extern const char sx__tsan_close_here;
    (void)*(const volatile char *)&sx__tsan_close_here;
#endif
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
        sx__io_post(l, &l->quit);
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

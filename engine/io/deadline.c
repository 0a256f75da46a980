/* engine/io/deadline.c — deadlines on a loop: the heap of timers
 * (engine/timer/heap.h) behind the loop's one uv timer, always armed for
 * the earliest, which clock, exec and the per-yield timeouts use
 * (sx__io_timer_set); and the per-yield deadlines (sx__iodl), a timer and
 * a claim word shared with the yield's completer: whoever claims first
 * answers, the command's own completion or the timer with SX_ETIMEDOUT
 * (which then cancels the op the deadline guards, if it is an io op).
 * Also the engine's monotonic clock (sx__now_ns). See io.h.
 *
 * Threads: sx__io_deadline [worker]; sx__io_dl_claim and sx__io_dl_done
 * [any thread] (the completer's); sx__now_ns [any thread]; everything
 * else [loop].
 */
#include "engine/io/io.h"
#include "process/fault.h"

#include <stdlib.h>
#include <time.h>

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

/* ---- the timer heap [loop]: engine/timer/heap.c behind one uv timer ---- */

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

/* ---- per-yield deadlines ---- */

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
        sx__io_unlink(l, &dl->op);
    }
    dl_unref(dl);
    sx__io_maybe_exit(l);
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
    dl->op.loop = sx__io_loop_of(e, ev->to);
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
    /* relaxed: see sx__io_unlink. */
    atomic_fetch_add_explicit(&sx__ptable_pext(e, ev->to)->io_live, 1,
                              memory_order_relaxed);
    sx__io_post(dl->op.loop, &dl->op.req);
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
void sx__io_dl_stop_unref(sx__iodl *dl)
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
        sx__io_dl_stop_unref(dl);
        return;
    }
    sx__io_post(dl->op.loop, &dl->stop); /* our reference goes with it */
    /* release: the stopper's acquire load sees the post done. */
    atomic_fetch_sub_explicit(&e->io_posters, 1, memory_order_release);
}

uint64_t sx__io_ms_until(const sx__ioop *op, uint64_t deadline_ns)
{
    return ms_until(&op->loop->uv, deadline_ns);
}

void sx__io_dl_start(sx__ioloop *l, sx__iodl *dl)
{
    dl->op.started = true;
    sx__io_link(l, &dl->op);
    /* acquire: a completion claimed it already; DL_STOP follows. */
    if (atomic_load_explicit(&dl->claimed, memory_order_acquire) != 0)
        return;
    if (l->quitting || sx__io_op_dead(l, &dl->op)) {
        sx__io_cancel(&dl->op);
        return;
    }
    dl->timer.fire = dl_fire;
    if (timer_set(l, &dl->timer, dl->deadline_ns) != 0)
        dl_expire(dl, SX_ENOMEM, "no memory for the yield's timeout");
}

void sx__io_dl_stop(sx__iodl *dl)
{
    dl_close(dl);
    dl_unref(dl); /* the completer's reference */
}

/* engine/io/expire.c — process deadlines (sx_process_type.deadline_ms,
 * sx_submit_opts.deadline_ms, sx_spawn_opts.deadline_ms): one op per
 * process with a deadline, on the process's loop, that terminates it when
 * the deadline passes first. The op belongs to the process like a
 * command's (io.h): its finish cancels it (CANCEL_PROC), so a process that
 * ends in time leaves nothing behind; the terminate goes through the TERM
 * flag as sx_engine_terminate's does, with the deadline noted in the
 * slot's sx__pext (expired_ms) so that the finish says SX_ETIMEDOUT.
 *
 * Threads: sx__expire_arm [the thread that creates or restarts the
 * process, before it is queued]; the rest [loop].
 */
#include <stdlib.h>

#include "engine/core/core.h"
#include "engine/io/io.h"

typedef struct {
    sx__ioop op; /* first; op.done == NULL */
    sx__iotimer timer;
    uint64_t due_ns;
    uint32_t ms; /* the deadline as expired_ms notes it (core.h) */
} expire_op;

static expire_op *of_timer(sx__iotimer *t)
{
    return (expire_op *)((char *)t - offsetof(expire_op, timer));
}

/* Notes the deadline in the slot and raises TERM (as terminate does). */
static void expire(sx_engine *e, sx__proc *p, uint32_t gen, uint32_t ms)
{
    if (!sx__proc_acquire(e, p, gen))
        return; /* it ended meanwhile */
    _Atomic uint32_t *hit = &sx__ptable_pext(e, p)->expired_ms;
    /* relaxed: published by the TERM flag's release in sx__terminate,
     * read after the finishing worker's acquire of the state word
     * (sx__finish_terminated). */
    atomic_store_explicit(hit, ms, memory_order_relaxed);
    if (sx__terminate(e, p) != 0)
        /* Finishing already: it ends as it was going to; the note is
         * ours to take back (the finish reset its own when it saw TERM,
         * but this TERM never came). */
        atomic_store_explicit(hit, 0, memory_order_relaxed);
    sx__proc_release(e, p);
}

static void expire_fire(sx__iotimer *t)
{
    expire_op *x = of_timer(t);
    expire(x->op.engine, x->op.proc, x->op.gen, x->ms);
    sx__io_release(&x->op);
}

static void expire_start(sx__ioop *op)
{
    expire_op *x = (expire_op *)op;
    x->timer.fire = expire_fire;
    if (sx__io_timer_set(op, &x->timer, x->due_ns) != 0) {
        /* No memory for the loop's heap: a deadline that cannot be kept
         * ends the process now rather than never. */
        expire(op->engine, op->proc, op->gen, UINT32_MAX);
        sx__io_release(op);
    }
}

static void expire_cancel(sx__ioop *op)
{
    expire_op *x = (expire_op *)op;
    sx__io_timer_del(op, &x->timer);
    sx__io_release(op);
}

static const sx__ioop_vt expire_vt = { "deadline", expire_start, expire_cancel,
                                       NULL };

int sx__expire_arm(sx_engine *e, sx__proc *p, int64_t ms)
{
    if (ms <= 0 || e->loops == NULL)
        return 0;
    expire_op *x = calloc(1, sizeof *x);
    if (x == NULL)
        return SX_ENOMEM;
    x->op.req.kind = SX__IOREQ_START;
    x->op.vt = &expire_vt;
    x->op.engine = e;
    x->op.proc = p;
    /* relaxed: the caller holds p before it is queued: its gen is set. */
    x->op.gen = atomic_load_explicit(&p->gen, memory_order_relaxed);
    x->op.loop = sx__io_loop_of(e, p);
    /* Saturating, as a yield's timeout (deadline.c): UINT64_MAX never
     * fires. */
    uint64_t now = sx__now_ns();
    x->due_ns = (uint64_t)ms > (UINT64_MAX - now) / 1000000u
                    ? UINT64_MAX
                    : now + (uint64_t)ms * 1000000u;
    /* Below 2^31 ms as it is; longer in whole seconds with the top bit
     * set (sx__finish_terminated's message says which); UINT32_MAX is
     * kept for "could not be armed". */
    if ((uint64_t)ms < ((uint64_t)1 << 31)) {
        x->ms = (uint32_t)ms;
    } else {
        uint64_t sec = (uint64_t)ms / 1000u;
        x->ms =
            (uint32_t)(((uint64_t)1 << 31) | (sec < ((uint64_t)1 << 31) - 2
                                                  ? sec
                                                  : ((uint64_t)1 << 31) - 2));
    }
    /* Its finish will look for ops (as sx__io_submit's owner does): p is
     * not queued yet, and the queueing publishes this. */
    p->io = 1;
    /* relaxed: see sx__io_unlink. */
    atomic_fetch_add_explicit(&sx__ptable_pext(e, p)->io_live, 1,
                              memory_order_relaxed);
    sx__io_post(x->op.loop, &x->op.req);
    return 0;
}

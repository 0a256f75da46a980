/* engine/io/ops.c — the ops and handles a loop keeps for commands: making
 * an op (on the worker) and handing it to its loop, the two lists every op
 * and handle is on (its process's, for cancel-on-finish and handle
 * look-up, and the loop's, for shutdown), answering, releasing and
 * cancelling. The loop thread's life and its request queue are
 * engine/io/loop.c. See io.h.
 *
 * Threads: sx__io_op_new and sx__io_submit [worker]; everything else
 * [loop]. The atomics are counts and hints, each with its order below.
 */
#include "engine/io/io.h"

#include <stdlib.h>

/* ---- lists [loop] ---- */

void sx__io_link(sx__ioloop *l, sx__ioop *op)
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

void sx__io_unlink(sx__ioloop *l, sx__ioop *op)
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

void sx__io_op_free(sx__ioop *op)
{
    if (op->vt != NULL && op->vt->fini != NULL)
        op->vt->fini(op);
    free(op);
}

void sx__io_walk_begin(sx__ioloop *l)
{
    l->walking++;
}

void sx__io_walk_end(sx__ioloop *l)
{
    if (--l->walking > 0)
        return;
    while (l->grave != NULL) {
        sx__ioop *op = l->grave;
        l->grave = op->pnext;
        sx__io_op_free(op);
    }
    sx__io_maybe_exit(l);
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
    op->loop = sx__io_loop_of(ev->engine, ev->to);
    op->done = done;
    op->dl = ev->dl;
    return op;
}

void sx__io_submit(sx__ioop *op)
{
    /* This worker runs the owner now: its finish will look (p->io). */
    op->proc->io = 1;
    /* relaxed: see sx__io_unlink. */
    atomic_fetch_add_explicit(&sx__ptable_pext(op->engine, op->proc)->io_live,
                              1, memory_order_relaxed);
    sx__io_post(op->loop, &op->req);
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
    /* relaxed: see sx__io_unlink (op is alive, so the count is non-zero). */
    atomic_fetch_add_explicit(&sx__ptable_pext(h->engine, h->proc)->io_live, 1,
                              memory_order_relaxed);
    sx__io_link(op->loop, h);
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
    sx__io_unlink(l, op);
    if (l->walking > 0) {
        op->pnext = l->grave;
        l->grave = op;
        return;
    }
    sx__io_op_free(op);
    sx__io_maybe_exit(l);
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

/* engine/core/control.c — what a process is told from outside its steps:
 * the context its init reads (PID, parent, engine, the type's user
 * pointer) and the message init may give with its error; a cancel and a
 * terminate, and the error a terminated process finishes with (by
 * terminate, a linked partner's failure, its deadline); messages for PIDs
 * of other nodes, handed to the remote route. Spawning and finishing are
 * engine/core/proc.c.
 *
 * Threads: the init functions inside init (on the submitting or spawning
 * thread); cancel and terminate [any thread]; sx__finish_terminated on
 * the worker that finishes the process.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/core.h"
#include "engine/core/job.h"
#include "engine/core/live.h"

sx_pid sx_init_pid(const sx_init_ctx *ctx)
{
    return ctx != NULL ? ctx->pid : SX_PID_NONE;
}

sx_engine *sx_init_engine(const sx_init_ctx *ctx)
{
    return ctx != NULL ? ctx->engine : NULL;
}

void *sx_init_user(const sx_init_ctx *ctx)
{
    return ctx != NULL ? ctx->user : NULL;
}

sx_pid sx_init_parent(const sx_init_ctx *ctx)
{
    return ctx != NULL ? ctx->parent : SX_PID_NONE;
}

/* init's message (sx_init_error), per thread: init runs on the thread
 * that submits or spawns, and the failed spawn reads it there. The ctx's
 * said flag and the code tie it to the init that gave it: a failed init
 * that did not call sx_init_error, or returned another code, gave none. */
static _Thread_local struct {
    int code;
    char msg[SX_INIT_ERROR_MAX];
} init_msg;
/* The message of the last init refused on this thread
 * (sx_engine_init_error), and that refusal's code until a caller takes it
 * (sx__init_take; 0: taken, or none). */
static _Thread_local char init_last[SX_INIT_ERROR_MAX];
static _Thread_local int init_last_code;

int sx_init_error(const sx_init_ctx *ctx, int code, const char *fmt, ...)
{
    if (code >= 0)
        code = SX_EFAILED;
    if (ctx == NULL || fmt == NULL)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(init_msg.msg, sizeof init_msg.msg, fmt, ap);
    va_end(ap);
    init_msg.code = code;
    /* Every ctx is one of the engine's own (proc.c), never a const
     * object: the flag may be written through the const pointer. */
    ((sx_init_ctx *)ctx)->said = true;
    return code;
}

const char *sx_engine_init_error(void)
{
    return init_last;
}

const char *sx__init_refused(const sx_init_ctx *ctx, int code)
{
    if (ctx->said && init_msg.code == code)
        memcpy(init_last, init_msg.msg, sizeof init_last);
    else
        init_last[0] = '\0';
    init_last_code = code;
    return init_last;
}

void sx__init_forget(void)
{
    init_last[0] = '\0';
    init_last_code = 0;
}

const char *sx__init_take(int code)
{
    if (code == 0 || init_last_code != code || init_last[0] == '\0')
        return NULL;
    init_last_code = 0;
    return init_last;
}

/* Whether pid names another node (the remote route's business). */
static bool remote_pid(const sx_engine *e, sx_pid pid)
{
    return pid.node != e->cfg.node;
}

int sx_engine_cancel(sx_engine *e, sx_pid pid, const char *reason)
{
    if (e == NULL)
        return SX_EINVAL;
    /* A job's cancel is final; one waiting for its restart ends now. */
    if (sx__job_request_end(e, pid, SX_ECANCELLED,
                            reason != NULL ? reason : "cancelled"))
        return 0;
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_str(&pk, reason != NULL ? reason : "cancelled");
    if (pk.err != 0) {
        sx_pack_fini(&pk);
        return pk.err;
    }
    int rc = sx__send(e, SX_PID_NONE, pid, SX_TOPIC_CANCEL,
                      sizeof(SX_TOPIC_CANCEL) - 1, sx_pack_payload(&pk), true);
    sx_pack_fini(&pk);
    return rc;
}

int sx__terminate(sx_engine *e, sx__proc *p)
{
    if (p->type == NULL)
        return SX_ENOTFOUND; /* a mailbox, not a process */
    /* acq_rel: as in sx__deliver; the worker sees TERM at its next CAS. */
    uint32_t old =
        atomic_fetch_or_explicit(&p->state, SX__F_TERM, memory_order_acq_rel);
    uint32_t st = old & SX__S_MASK;
    if (st == SX_PSTATE_COMPLETE)
        return SX_ENOTFOUND;
    uint32_t cur = old | SX__F_TERM;
    for (;;) {
        st = cur & SX__S_MASK;
        if (st != SX_PSTATE_BLOCKED && st != SX_PSTATE_IDLE)
            break;
        /* acq_rel: as in sx__deliver. */
        if (atomic_compare_exchange_weak_explicit(
                &p->state, &cur, SX_PSTATE_READY | SX__F_TERM,
                memory_order_acq_rel, memory_order_acquire)) {
            sx__enqueue(e, p);
            break;
        }
    }
    return 0;
}

int sx_engine_terminate(sx_engine *e, sx_pid pid)
{
    if (e == NULL)
        return SX_EINVAL;
    /* As in sx_engine_cancel. */
    if (sx__job_request_end(e, pid, SX_ETERMINATED, "terminated"))
        return 0;
    sx__proc *p = sx__ptable_get(e, pid);
    if (p == NULL)
        return e->remote.terminate != NULL && remote_pid(e, pid)
                   ? e->remote.terminate(e->remote_user, pid)
                   : SX_ENOTFOUND;
    int rc = sx__terminate(e, p);
    sx__proc_release(e, p);
    return rc;
}

void sx__finish_terminated(sx_engine *e, sx__proc *p)
{
    int ck_err;
    const char *ck_msg;
    if (p->job && sx__ckpt_failed(e, p, &ck_err, &ck_msg)) {
        /* Its checkpoint could not be stored (checkpoint.c). */
        sx__finish(e, p, ck_err, ck_msg, (sx_payload){ NULL, 0 });
        return;
    }
    /* relaxed (both): published by the TERM flag's release, which the
     * worker's acquire load of the state word saw. */
    uint32_t ms = atomic_load_explicit(&sx__ptable_pext(e, p)->expired_ms,
                                       memory_order_relaxed);
    if (ms != 0 &&
        /* acquire: as below. */
        !atomic_load_explicit(&e->stop_killing, memory_order_acquire)) {
        char msg[96];
        if (ms == UINT32_MAX)
            snprintf(msg, sizeof msg, "no memory to keep the deadline");
        else if (ms & 0x80000000u)
            snprintf(msg, sizeof msg, "deadline of %u s passed",
                     ms & 0x7fffffffu);
        else
            snprintf(msg, sizeof msg, "deadline of %u ms passed", ms);
        if (ms != UINT32_MAX)
            /* relaxed: a figure. */
            atomic_fetch_add_explicit(&e->deadlines, 1, memory_order_relaxed);
        sx__finish(e, p, ms == UINT32_MAX ? SX_ENOMEM : SX_ETIMEDOUT, msg,
                   (sx_payload){ NULL, 0 });
        return;
    }
    uint64_t by = atomic_load_explicit(&sx__ptable_pext(e, p)->link_failed,
                                       memory_order_relaxed);
    /* Past stop's deadline every process left is terminated (API.md
     * meaning 9): one a linked partner's termination reached first is no
     * different. acquire: pairs with the release in sx_engine_stop. */
    if (by == 0 ||
        atomic_load_explicit(&e->stop_killing, memory_order_acquire)) {
        sx__finish(e, p, SX_ETERMINATED, "terminated", (sx_payload){ NULL, 0 });
        return;
    }
    if (by == SX__LINK_NOCONN) {
        sx__finish(e, p, SX_ENOCONNECTION,
                   "the node of a linked process went down or could not be "
                   "reached",
                   (sx_payload){ NULL, 0 });
        return;
    }
    if (by == SX__LINK_GONE) {
        sx__finish(e, p, SX_EFAILED,
                   "the process it linked to on another node does not exist",
                   (sx_payload){ NULL, 0 });
        return;
    }
    if (by == SX__LINK_REMOTE) {
        sx__finish(e, p, SX_EFAILED, "a linked process of another node failed",
                   (sx_payload){ NULL, 0 });
        return;
    }
    char pid[64], msg[128];
    sx_pid_format((sx_pid){ e->cfg.node, e->cfg.host, by }, pid, sizeof pid);
    snprintf(msg, sizeof msg, "linked process %s failed", pid);
    sx__finish(e, p, SX_EFAILED, msg, (sx_payload){ NULL, 0 });
}

/* Messages first.. (a chain through node.next, each one message or a
 * bundle) for to, a PID of another node: handed to the remote route in
 * order, up to REMOTE_BATCH per call (a step's sends to one PID are one
 * bundle: one call, one batch on the wire), then freed. The first error
 * is the send's. */
#define REMOTE_BATCH 64
int sx__remote_send(sx_engine *e, sx_pid to, sx__ev *first)
{
    int rc = 0;
    sx_message m[REMOTE_BATCH];
    size_t k = 0;
    sx__ev *held = first; /* the nodes whose bytes m[] points into */
    for (sx__ev *ev = first, *next; ev != NULL; ev = next) {
        /* relaxed: the chain is ours. */
        next = (sx__ev *)atomic_load_explicit(&ev->node.next,
                                              memory_order_relaxed);
        if (ev->ctl && ev->nmsg == 0 && e->remote.cancel != NULL) {
            /* A cancel (a control event): after what came before it. */
            if (k > 0) {
                int r = e->remote.send(e->remote_user, m, k);
                rc = rc != 0 ? rc : r;
                k = 0;
            }
            int r = e->remote.cancel(e->remote_user, to, sx__ev_data(ev));
            rc = rc != 0 ? rc : r;
            for (sx__ev *x = held, *xn; x != next; x = xn) {
                /* relaxed: the chain is ours. */
                xn = (sx__ev *)atomic_load_explicit(&x->node.next,
                                                    memory_order_relaxed);
                sx__ev_free(x);
            }
            held = next;
            continue;
        }
        size_t off = 0;
        unsigned n = ev->nmsg > 0 ? ev->nmsg : 1;
        for (unsigned i = 0; i < n; i++) {
            m[k] = (sx_message){ ev->from, to, NULL, { NULL, 0 } };
            if (ev->nmsg > 0) {
                sx__ev_bundle_next(ev, &off, &m[k].topic, &m[k].data);
            } else {
                m[k].topic = sx__ev_topic(ev);
                m[k].data = sx__ev_data(ev);
            }
            if (m[k].topic == NULL)
                m[k].topic = "";
            if (++k == REMOTE_BATCH) {
                int r = e->remote.send(e->remote_user, m, k);
                rc = rc != 0 ? rc : r;
                k = 0;
            }
        }
        if (k == 0) {
            /* Everything up to ev is handed over: free it. */
            for (sx__ev *x = held, *xn; x != next; x = xn) {
                /* relaxed: the chain is ours. */
                xn = (sx__ev *)atomic_load_explicit(&x->node.next,
                                                    memory_order_relaxed);
                sx__ev_free(x);
            }
            held = next;
        }
    }
    if (k > 0) {
        int r = e->remote.send(e->remote_user, m, k);
        rc = rc != 0 ? rc : r;
    }
    for (sx__ev *x = held, *xn; x != NULL; x = xn) {
        /* relaxed: the chain is ours. */
        xn =
            (sx__ev *)atomic_load_explicit(&x->node.next, memory_order_relaxed);
        sx__ev_free(x);
    }
    return rc;
}

int sx_engine_set_remote(sx_engine *e, const sx_remote_ops *ops, void *user)
{
    if (e == NULL)
        return SX_EINVAL;
    if (sx__started(e))
        return SX_ESTATE;
    if (e->remote.release != NULL) /* the route replaced: done with */
        e->remote.release(e->remote_user);
    if (ops != NULL)
        e->remote = *ops;
    else
        e->remote = (sx_remote_ops){ 0 };
    e->remote_user = user;
    return 0;
}

void sx_engine_remote_fire(sx_engine *e, sx_remote_watch *w, sx_pid target,
                           const sx_result *r)
{
    if (e == NULL || w == NULL || r == NULL)
        return;
    sx__watch_fire(e, (sx__ev *)w, target, r->error, r->error_msg, r->value,
                   r->steps, r->attempts);
}

int sx__remote_watch(sx_engine *e, sx_pid target, sx__ev *w)
{
    if (e->remote.watch == NULL || !remote_pid(e, target))
        return SX_ENOTFOUND;
    return e->remote.watch(e->remote_user, target, (sx_remote_watch *)w);
}

int sx__remote_link(sx_engine *e, sx_pid target, sx_pid partner)
{
    if (e->remote.link == NULL || e->remote.watch == NULL ||
        !remote_pid(e, target))
        return SX_ENOTFOUND;
    return e->remote.link(e->remote_user, target, partner);
}

int sx__remote_submit(sx_engine *e, const char *type, const char *method,
                      const sx_payload *input, size_t n_input,
                      const sx_submit_opts *opts, sx_submit_fn fn, void *user,
                      sx__ev *w)
{
    bool named = opts->node != 0 && opts->node != e->cfg.node;
    if (opts->place < SX_PLACE_HERE || opts->place > SX_PLACE_LEAST_LOADED ||
        (named && opts->place != SX_PLACE_HERE) || opts->key != NULL ||
        opts->restart != NULL || type == NULL)
        return SX_EINVAL;
    /* The engine's own types ('@') are not for placing: a user cannot
     * submit them here either. */
    if (type[0] == '@')
        return SX_EUNKNOWN_TYPE;
    if (e->remote.submit == NULL)
        return named ? SX_ENOCONNECTION : 1;
    return e->remote.submit(e->remote_user, opts, type, method, input, n_input,
                            fn, user, (sx_remote_watch *)w);
}

int sx_engine_link_from(sx_engine *e, sx_pid local, sx_pid partner)
{
    if (e == NULL || local.node != e->cfg.node || !remote_pid(e, partner))
        return SX_EINVAL;
    return sx__watch_for(e, local, SX__WATCH_LINK, partner);
}

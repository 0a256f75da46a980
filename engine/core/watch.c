/* engine/core/watch.c — watchers: registering one on a process (a parent
 * waiting in spawn-wait, a monitor, a link, an outside watch callback),
 * and firing them all with the outcome when it finishes.
 *
 * A process's watchers are a lock-free list on its slot: sx__watch pushes
 * with a release CAS, the finish closes it with one exchange
 * (SX__WATCH_CLOSED) and fires what it took; a watcher that comes after
 * the close is answered from the outcome instead.
 *
 * Threads: sx__watch [any thread]; firing on the worker that finishes
 * the process.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"
#include "engine/io/io.h"
#include "process/utf8.h"

/* Whether the list from n on holds another link to w's partner. Two
 * processes that link each other at the same moment on two workers both
 * find no link (cmd_link's look and its pushes are not one step) and both
 * make one: each then has two link watchers for the other, and a trapping
 * partner would get two @exits. The second is dropped here, at the one
 * place that sees the whole list. O(links^2) per finish, links only. */
static bool link_again(const sx__ev *n, const sx__ev *w)
{
    for (; n != NULL && n != SX__WATCH_CLOSED;
         /* relaxed: the list is ours (sx__watchers_fire). */
         n = (const sx__ev *)atomic_load_explicit(&n->node.next,
                                                  memory_order_relaxed))
        if (n->watch == SX__WATCH_LINK && n->to == w->to &&
            n->to_gen == w->to_gen)
            return true;
    return false;
}

/* Closes p's watcher list and fires every watcher on it with the outcome.
 * acq_rel: acquire the watchers registered (release CAS in sx__watch);
 * CLOSED tells later registrants to look at the outcome instead. */
void sx__watchers_fire(sx_engine *e, sx__proc *p, sx_pid pid, int error,
                       const char *msg, sx_payload value, uint64_t steps,
                       uint32_t attempts)
{
    sx__ev *w = atomic_exchange_explicit(&p->watchers, SX__WATCH_CLOSED,
                                         memory_order_acq_rel);
    while (w != NULL && w != SX__WATCH_CLOSED) {
        /* relaxed: the list is ours now. */
        sx__ev *next =
            (sx__ev *)atomic_load_explicit(&w->node.next, memory_order_relaxed);
        if (w->watch == SX__WATCH_LINK && link_again(next, w))
            sx__ev_free(w); /* the same link, made twice at once */
        else
            sx__watch_fire(e, w, pid, error, msg, value, steps, attempts);
        w = next;
    }
}

int sx__watch(sx_engine *e, sx_pid target, sx__ev *w)
{
    sx__proc *p = sx__ptable_get(e, target);
    if (p != NULL) {
        /* acquire: see the list head as it is. */
        sx__ev *old = atomic_load_explicit(&p->watchers, memory_order_acquire);
        while (old != SX__WATCH_CLOSED) {
            /* relaxed: published by the release CAS. */
            atomic_store_explicit(&w->node.next,
                                  old != NULL ? &old->node : NULL,
                                  memory_order_relaxed);
            /* release: pairs with the acquire exchange in sx__finish. */
            if (atomic_compare_exchange_weak_explicit(&p->watchers, &old, w,
                                                      memory_order_release,
                                                      memory_order_acquire)) {
                sx__proc_release(e, p);
                return 0;
            }
        }
        sx__proc_release(e, p);
    }
    if (target.node != e->cfg.node) {
        /* A process of another node: the remote route watches it, or
         * answers why it cannot (SX_ENOTFOUND without a route). */
        int rc = sx__remote_watch(e, target, w);
        if (rc != 0)
            sx__watch_fire(e, w, target, rc,
                           rc == SX_ENOCONNECTION
                               ? "its node is down or not in the cluster"
                           : rc == SX_ENOTFOUND ? "no such process"
                                                : NULL,
                           (sx_payload){ NULL, 0 }, 0, 0);
        return 0;
    }
    /* Finished (or never known): answer from the kept outcome. The node
     * and host first: a PID of another engine with the id of a kept local
     * outcome is not that process, and the copy would be left behind. */
    sx_result r;
    if (target.node == e->cfg.node && target.host == e->cfg.host &&
        sx__outcomes_get(e, target.id, &r)) {
        sx__watch_fire(e, w, target, r.error, r.error_msg, r.value, r.steps,
                       r.attempts);
        sx_result_free(&r);
    } else {
        sx__watch_fire(e, w, target, SX_ENOTFOUND, "no such process",
                       (sx_payload){ NULL, 0 }, 0, 0);
    }
    return 0;
}

/* A scoped child's parent ended (with error): the child gets a @cancel
 * saying so, or is terminated (sx_spawn_opts.scope). A child that has
 * ended already is not there to reach: nothing happens. A watcher whose
 * scope is SX_SCOPE_NONE has done this already (an attempt of a job
 * ended, sx__scope_end) and is inert. */
static void scope_act(sx_engine *e, const sx__ev *w, int error)
{
    sx_pid child = w->from;
    int scope = (int)w->tag;
    if (scope == SX_SCOPE_NONE)
        return;
    if (scope == SX_SCOPE_TERMINATE) {
        sx__proc *p = sx__ptable_get(e, child);
        if (p != NULL) {
            sx__terminate(e, p);
            sx__proc_release(e, p);
        } else if (child.node != e->cfg.node) {
            sx_engine_terminate(e, child); /* a child of another node */
        }
        return;
    }
    uint8_t buf[64];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    sx_pack_str(&pk, error == 0                ? "parent ended"
                     : error == SX_ECANCELLED  ? "parent ended: cancelled"
                     : error == SX_ETIMEDOUT   ? "parent ended: timed out"
                     : error == SX_ETERMINATED ? "parent ended: terminated"
                                               : "parent ended: failed");
    sx__send(e, SX_PID_NONE, child, SX_TOPIC_CANCEL,
             sizeof(SX_TOPIC_CANCEL) - 1, sx_pack_payload(&pk), true);
}

static __attribute__((cold, noinline)) void scope_fire(sx_engine *e, sx__ev *w,
                                                       int error)
{
    scope_act(e, w, error);
    sx__ev_free(w);
}

/* Whether scope watcher w is spent: inert, or its child here has ended (its
 * slot's generation moved on; acquire: pairs with the release store of
 * gen in retire, so the child's end is seen whole). */
static bool scope_spent(const sx__ev *w)
{
    /* A child of another node (to NULL) has no slot here to tell its end:
     * its watcher stays until the parent ends. */
    return w->tag == SX_SCOPE_NONE ||
           (w->to != NULL &&
            atomic_load_explicit(&w->to->gen, memory_order_acquire) !=
                w->to_gen);
}

/* The scope watchers of p after its head (see sx__scope_prune): spent ones
 * unlinked and freed when prune, else each live one acted on and made
 * inert. At most `most` nodes visited (0: all). The head stays: another
 * thread's push may have read it as its next (sx__watch). Node links:
 * relaxed, as only the thread that runs p changes or frees a node past
 * the head. */
static void scope_walk(sx_engine *e, sx__proc *p, bool prune, int error,
                       size_t most)
{
    /* acquire: pairs with the release CAS of each push (sx__watch): the
     * nodes seen through the head have their fields set. */
    sx__ev *prev = atomic_load_explicit(&p->watchers, memory_order_acquire);
    if (prev == NULL || prev == SX__WATCH_CLOSED)
        return;
    if (!prune && prev->watch == SX__WATCH_SCOPE) {
        scope_act(e, prev, error);
        prev->tag = SX_SCOPE_NONE;
    }
    size_t seen = 0;
    for (;;) {
        sx__ev *w = (sx__ev *)atomic_load_explicit(&prev->node.next,
                                                   memory_order_relaxed);
        if (w == NULL || (most != 0 && seen++ >= most))
            return;
        if (w->watch != SX__WATCH_SCOPE) {
            prev = w;
        } else if (!prune) {
            scope_act(e, w, error);
            w->tag = SX_SCOPE_NONE;
            prev = w;
        } else if (scope_spent(w)) {
            atomic_store_explicit(
                &prev->node.next,
                atomic_load_explicit(&w->node.next, memory_order_relaxed),
                memory_order_relaxed);
            sx__ev_free(w);
        } else {
            prev = w;
        }
    }
}

void sx__scope_prune(sx_engine *e, sx__proc *p)
{
    scope_walk(e, p, true, 0, 16);
}

void sx__scope_end(sx_engine *e, sx__proc *p, int error)
{
    scope_walk(e, p, false, error, 0);
}

/* sx__watch_fire for every kind but a spawn-wait's: out of line, so that
 * the spawn-wait (the most common watcher, one per child) completes its
 * yield with no registers saved for the other kinds. */
static __attribute__((noinline)) void
watch_fire_other(sx_engine *e, sx__ev *w, sx_pid target, int error,
                 const char *msg, sx_payload value, uint64_t steps,
                 uint32_t attempts)
{
    if (w->watch == SX__WATCH_FN) {
        sx__watch_fn_fire(e, w, target, error, msg, value, steps, attempts);
        return;
    }
    if (w->watch == SX__WATCH_SCOPE) {
        scope_fire(e, w, error);
        return;
    }
    if (w->watch == SX__WATCH_LINK) {
        /* The partner of a link finished. Unless the owner traps exits, a
         * failure terminates it (as failed, naming the partner) and a
         * normal finish does nothing; a trapping owner gets @exit. */
        sx__proc *p = w->to;
        if (!sx__proc_acquire(e, p, w->to_gen)) {
            sx__ev_free(w);
            return;
        }
        /* relaxed: see trap_exit in core.h. */
        if (!atomic_load_explicit(&p->trap_exit, memory_order_relaxed)) {
            if (error != 0) {
                uint64_t none = 0;
                _Atomic uint64_t *why = &sx__ptable_pext(e, p)->link_failed;
                /* A partner of another node has no local id to name. */
                uint64_t by = target.node == e->cfg.node  ? target.id
                              : error == SX_ENOCONNECTION ? SX__LINK_NOCONN
                              : error == SX_ENOTFOUND     ? SX__LINK_GONE
                                                          : SX__LINK_REMOTE;
                /* relaxed: the first failure names the reason; the TERM
                 * flag's release (sx__terminate) publishes it. */
                bool named = atomic_compare_exchange_strong_explicit(
                    why, &none, by, memory_order_relaxed, memory_order_relaxed);
                /* Finished already (its finish took no TERM from us, and
                 * did not reset the reason): reset it here, before our
                 * reference lets the slot go to another process (see
                 * link_failed in core.h). relaxed: as above. */
                if (sx__terminate(e, p) == SX_ENOTFOUND && named)
                    atomic_store_explicit(why, 0, memory_order_relaxed);
            }
            sx__proc_release(e, p);
            sx__ev_free(w);
            return;
        }
        sx__proc_release(e, p);
    }
    /* An @exit message: {"ok": true, "result": v} or {"ok": false,
     * "error": name, "code": n, "message": text}. */
    uint8_t small[256];
    sx_pack pk;
    sx_pack_init_fixed(&pk, small, sizeof(small));
    for (int pass = 0; pass < 2; pass++) {
        if (error == 0) {
            sx_pack_map(&pk, 2);
            sx_pack_str(&pk, "ok");
            sx_pack_bool(&pk, true);
            sx_pack_str(&pk, "result");
            sx_pack_raw(&pk, value);
        } else {
            sx_pack_map(&pk, 4);
            sx_pack_str(&pk, "ok");
            sx_pack_bool(&pk, false);
            sx_pack_str(&pk, "error");
            sx_pack_str(&pk, sx_errname(error));
            sx_pack_str(&pk, "code");
            sx_pack_int(&pk, error);
            sx_pack_str(&pk, "message");
            sx_pack_str(&pk, msg != NULL ? msg : sx_strerror(error));
        }
        if (pk.err == 0 || pass == 1)
            break;
        sx_pack_init(&pk); /* too big for the stack buffer: heap */
    }
    w->kind = SX__EV_MESSAGE;
    w->from = target;
    int rc = pk.err;
    if (rc == 0)
        rc = sx__ev_set(w, SX_TOPIC_EXIT, sizeof(SX_TOPIC_EXIT) - 1,
                        sx_pack_payload(&pk), NULL);
    sx_pack_fini(&pk);
    sx__proc *p = w->to;
    if (rc != 0 || !sx__proc_acquire(e, p, w->to_gen)) {
        sx__ev_free(w);
        return;
    }
    sx__deliver(e, p, w);
    sx__proc_release(e, p);
}

void sx__watch_fire(sx_engine *e, sx__ev *w, sx_pid target, int error,
                    const char *msg, sx_payload value, uint64_t steps,
                    uint32_t attempts)
{
    if (w->watch == SX__WATCH_RESULT) {
        sx_complete((sx_completer *)w, value, error, msg);
        return;
    }
    watch_fire_other(e, w, target, error, msg, value, steps, attempts);
}

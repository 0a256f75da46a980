/* engine/commands/process.c — the built-in "process" command family:
 * noop, send, spawn, spawn-wait, terminate, cancel, monitor, link and
 * trap-exit (docs/COMMANDS.md). Each handler runs on the worker that
 * dispatched the yield and answers at once.
 *
 * Threads: [worker].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/commands/commands.h"
#include "engine/core/core.h"
#include "engine/core/job.h"
#include "process/utf8.h"

static const sx_payload nil = { NULL, 0 };

static int cmd_noop(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                    sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag, (void)args;
    sx_complete(done, nil, 0, NULL);
    return 0;
}

static int cmd_send(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                    sx_payload args, sx_completer *done)
{
    (void)user, (void)tag;
    sx_unpack u;
    sx_unpack_init(&u, args);
    uint32_t n;
    sx_pid to;
    const char *topic;
    size_t tl;
    sx_payload data;
    if (sx_unpack_array(&u, &n) != 0 || n != 3 || sx_unpack_pid(&u, &to) != 0 ||
        sx_unpack_str(&u, &topic, &tl) != 0 || sx_unpack_raw(&u, &data) != 0)
        return SX_EINVAL;
    /* The receiver sees the topic as a C string (sx_event.topic): one with
     * a NUL inside would arrive cut short, so it is refused, as sx_send's
     * (a C string), ticker-start's and the relay's are. One that is not
     * UTF-8 is refused too, as sx_send's and the relay's are: a client's
     * strict reader would refuse the push that carries it. */
    if (!sx__topic_ok(topic, tl)) {
        sx_complete(done, nil, SX_EINVAL,
                    "send: the topic must be at most 255 bytes of UTF-8, "
                    "without NUL");
        return 0;
    }
    int rc = sx__send(e, pid, to, topic, tl, data, false);
    sx_complete(done, nil, rc, NULL);
    return 0;
}

/* Answers a spawn or spawn-wait whose args sx__spawn_args_decode
 * (commands/spawn_opts.c) refused. Not
 * inlined: its message buffer would widen the spawn path's frame. */
static __attribute__((noinline)) int spawn_bad_args(sx_completer *done,
                                                    const char *cmd)
{
    char msg[160];
    snprintf(msg, sizeof msg,
             "%s: args must be [type, method, [input...]]: type and method "
             "strings under 256 bytes, without NUL; up to %d inputs",
             cmd, SX__SPAWN_MAX_INPUT);
    sx_complete(done, nil, SX_EINVAL, msg);
    return 0;
}

/* Answers a spawn with the child's PID. */
static int answer_pid(sx_completer *done, sx_pid child)
{
    uint8_t buf[32];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof(buf));
    sx_pack_pid(&pk, child);
    sx_complete(done, sx_pack_payload(&pk), 0, NULL);
    return 0;
}

/* Answers a spawn that init refused, with init's message when it gave
 * one (sx_init_error). */
static __attribute__((cold, noinline)) int spawn_refused(sx_completer *done,
                                                         int rc)
{
    sx_complete(done, nil, rc, sx__init_take(rc));
    return 0;
}

/* A spawn, spawn-wait or spawn-all with an options map: decoded into x
 * (and *retry when it has one, *has_retry then true). Answers done with
 * the reason and returns SX_EINVAL when the map is bad. */
static __attribute__((cold, noinline)) int
spawn_opts(sx_payload opts, const char *cmd, sx__spawnx *x,
           sx_restart_policy *retry, bool *has_retry, sx_completer *done)
{
    char why[200];
    int rc = sx__spawn_opts_decode(opts, x, retry, has_retry, why, sizeof why);
    if (rc != 0) {
        char msg[260];
        snprintf(msg, sizeof msg, "%s: %s", cmd, why);
        sx_complete(done, nil, rc, msg);
    }
    return rc;
}

/* A spawn placed on another node, waiting for that node's answer. */
typedef struct {
    sx_engine *e;
    sx_completer *done;
    sx_pid parent;
    int scope;
    bool wait, notify;
    uint64_t tag;
} away_ctx;

/* The placed child's PID (or why there is none), on whichever thread
 * the remote route answers on: its scope watcher on the parent, its
 * @spawned notice, and a plain spawn's answer. spawn-wait's answer is the
 * child's outcome, through the watcher the route holds. */
static void away_answered(void *user, int rc, sx_pid child, bool existing,
                          const char *msg)
{
    (void)existing;
    away_ctx *a = user;
    if (rc == 0 && a->scope != SX_SCOPE_NONE) {
        sx__ev *w = sx__ev_alloc();
        if (w != NULL) {
            /* No local slot to look at: kept until the parent ends. */
            w->watch = SX__WATCH_SCOPE;
            w->engine = a->e;
            w->to = NULL;
            w->from = child;
            w->tag = (uint64_t)a->scope;
            sx__watch(a->e, a->parent, w);
        } else {
            /* Cannot keep the scope's promise: the child does not run on
             * unbound. */
            sx_engine_terminate(a->e, child);
            rc = SX_ENOMEM;
            msg = "out of memory for the child's scope";
        }
    }
    if (rc == 0 && a->notify)
        sx__spawned_notice(a->e, a->parent, child, a->tag);
    if (!a->wait) {
        uint8_t buf[32];
        sx_pack pk;
        sx_pack_init_fixed(&pk, buf, sizeof(buf));
        sx_pack_pid(&pk, child);
        sx_complete(a->done, rc == 0 ? sx_pack_payload(&pk) : nil, rc,
                    rc != 0 ? msg : NULL);
    }
    free(a);
}

/* A spawn or spawn-wait whose options place the child on another node
 * (x->node, x->place). Returns 1 when the placement picked this node
 * (the caller spawns here), else 0 with done answered or on its way. */
static __attribute__((cold, noinline)) int
spawn_away(sx_engine *e, sx_pid pid, uint64_t tag, const sx__spawn_args *a,
           const sx__spawnx *x, bool wait, sx_completer *done)
{
    away_ctx *ctx = malloc(sizeof *ctx);
    if (ctx == NULL) {
        sx_complete(done, nil, SX_ENOMEM, "out of memory");
        return 0;
    }
    *ctx = (away_ctx){ e, done, pid, x->scope, wait, x->notify, tag };
    sx_submit_opts so = { .deadline_ms =
                              x->deadline_ms > 0 ? x->deadline_ms : 0,
                          .node = x->node,
                          .place = x->place };
    if (wait)
        done->ev.watch = SX__WATCH_RESULT;
    int rc = sx__remote_submit(e, a->type, a->method, a->input, a->n_input, &so,
                               away_answered, ctx, wait ? &done->ev : NULL);
    if (rc == 0)
        return 0;
    done->ev.watch = 0;
    free(ctx);
    if (rc == 1)
        return 1;
    sx_complete(done, nil, rc,
                rc == SX_ENOCONNECTION
                    ? "spawn: that node is not in the cluster (down, or "
                      "never seen)"
                    : NULL);
    return 0;
}

static bool placed_away(const sx_engine *e, const sx__spawnx *x)
{
    return x->place != SX_PLACE_HERE ||
           (x->node != 0 && x->node != e->cfg.node);
}

/* spawn with options: cold, apart from the plain spawn's path. */
static __attribute__((cold, noinline)) int
spawn_opt(sx_engine *e, sx_pid pid, const sx__spawn_args *a, sx_completer *done)
{
    sx__spawnx x;
    sx_restart_policy retry;
    bool has_retry;
    if (spawn_opts(a->opts, "spawn", &x, &retry, &has_retry, done) != 0)
        return 0;
    if (has_retry || x.notify) {
        sx_complete(done, nil, SX_EINVAL,
                    "spawn: retry and notify are options of spawn-wait");
        return 0;
    }
    if (placed_away(e, &x) && spawn_away(e, pid, 0, a, &x, false, done) == 0)
        return 0;
    sx_pid child;
    int rc = sx__spawn_opt(e, pid, a->type, a->method, a->input, a->n_input,
                           NULL, &child, &x);
    if (rc != 0)
        return spawn_refused(done, rc);
    return answer_pid(done, child);
}

static int cmd_spawn(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)user, (void)tag;
    sx__spawn_args a;
    int rc = sx__spawn_args_decode(args, &a, SX__SPAWN_READ_ANY);
    if (rc != 0)
        return spawn_bad_args(done, "spawn");
    if (a.opts.data != NULL)
        return spawn_opt(e, pid, &a, done);
    sx_pid child;
    rc = sx__spawn(e, pid, a.type, a.method, a.input, a.n_input, NULL, &child);
    if (rc != 0)
        return spawn_refused(done, rc);
    return answer_pid(done, child);
}

/* spawn-wait with options: cold, apart from the plain path. With a
 * retry, an "@retry" child (engine/commands/helpers.c) runs the
 * spawn-wait, options less retry, until it succeeds or runs out. */
static __attribute__((cold, noinline)) int
spawn_wait_opt(sx_engine *e, sx_pid pid, uint64_t tag, const sx__spawn_args *a,
               sx_completer *done)
{
    sx__spawnx x;
    sx_restart_policy retry;
    bool has_retry;
    if (spawn_opts(a->opts, "spawn-wait", &x, &retry, &has_retry, done) != 0)
        return 0;
    int rc;
    if (has_retry) {
        sx_pack pk;
        sx_pack_init(&pk);
        sx_pack_array(&pk, 4);
        sx_pack_str(&pk, a->type);
        sx_pack_str(&pk, a->method);
        sx_pack_array(&pk, (uint32_t)a->n_input);
        for (size_t i = 0; i < a->n_input; i++)
            sx_pack_raw(&pk, a->input[i]);
        sx__spawn_opts_pack(&pk, &x);
        rc = pk.err;
        if (rc == 0)
            rc = sx__retry_spawn(e, pid, tag, SX_CMD_SPAWN_WAIT,
                                 sx_pack_payload(&pk), &retry, 0, done);
        sx_pack_fini(&pk);
        return rc != 0 ? spawn_refused(done, rc) : 0;
    }
    x.notify_tag = tag;
    if (placed_away(e, &x) && spawn_away(e, pid, tag, a, &x, true, done) == 0)
        return 0;
    done->ev.watch = SX__WATCH_RESULT;
    rc = sx__spawn_opt(e, pid, a->type, a->method, a->input, a->n_input,
                       &done->ev, NULL, &x);
    if (rc != 0) {
        done->ev.watch = 0;
        return spawn_refused(done, rc);
    }
    return 0;
}

static int cmd_spawn_wait(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                          sx_payload args, sx_completer *done)
{
    (void)user, (void)tag;
    sx__spawn_args a;
    int rc = sx__spawn_args_decode(args, &a, SX__SPAWN_READ_ANY);
    if (rc != 0)
        return spawn_bad_args(done, "spawn-wait");
    if (a.opts.data != NULL)
        return spawn_wait_opt(e, pid, tag, &a, done);
    /* The completer waits on the child: its finish completes it. */
    done->ev.watch = SX__WATCH_RESULT;
    rc = sx__spawn(e, pid, a.type, a.method, a.input, a.n_input, &done->ev,
                   NULL);
    if (rc != 0) {
        done->ev.watch = 0;
        return spawn_refused(done, rc);
    }
    return 0;
}

/* spawn-all: {"children": [...], options...}: an "@all" child
 * (engine/commands/helpers.c) spawns and waits for them; its outcome is
 * the answer. */
static int cmd_spawn_all(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                         sx_payload args, sx_completer *done)
{
    (void)user, (void)tag;
    sx_payload children;
    sx_pack opts;
    char why[200];
    sx_pack_init(&opts);
    int rc = sx__spawn_all_split(args, &children, &opts, why, sizeof why);
    if (rc != 0) {
        sx_pack_fini(&opts);
        if (rc != SX_EINVAL)
            return rc;
        char msg[260];
        snprintf(msg, sizeof msg, "spawn-all: %s", why);
        sx_complete(done, nil, rc, msg);
        return 0;
    }
    if (opts.len > 0) { /* checked now, not once per child */
        sx__spawnx x;
        sx_restart_policy retry;
        bool has_retry;
        if (spawn_opts(sx_pack_payload(&opts), "spawn-all", &x, &retry,
                       &has_retry, done) != 0) {
            sx_pack_fini(&opts);
            return 0;
        }
        if (x.notify) { /* the children's PIDs come in the answer's order */
            sx_pack_fini(&opts);
            sx_complete(done, nil, SX_EINVAL,
                        "spawn-all: notify is an option of spawn-wait");
            return 0;
        }
    }
    /* nil when no options: an empty payload reads as nil. */
    sx_payload in[2] = { children, sx_pack_payload(&opts) };
    sx__spawnx x = { .deadline_ms = -1, .scope = SX_SCOPE_TERMINATE };
    done->ev.watch = SX__WATCH_RESULT;
    rc = sx__spawn_opt(e, pid, "@all", "run", in, 2, &done->ev, NULL, &x);
    sx_pack_fini(&opts);
    if (rc != 0) {
        done->ev.watch = 0;
        return spawn_refused(done, rc);
    }
    return 0;
}

static int one_pid(sx_payload args, sx_pid *out, sx_unpack *u, uint32_t *n)
{
    sx_unpack_init(u, args);
    if (sx_unpack_array(u, n) != 0 || *n < 1 || sx_unpack_pid(u, out) != 0)
        return SX_EINVAL;
    return 0;
}

static int cmd_terminate(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                         sx_payload args, sx_completer *done)
{
    (void)user, (void)pid, (void)tag;
    sx_unpack u;
    uint32_t n;
    sx_pid target;
    if (one_pid(args, &target, &u, &n) != 0 || n != 1)
        return SX_EINVAL;
    sx_complete(done, nil, sx_engine_terminate(e, target), NULL);
    return 0;
}

static int cmd_cancel(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                      sx_payload args, sx_completer *done)
{
    (void)user, (void)pid, (void)tag;
    sx_unpack u;
    uint32_t n;
    sx_pid target;
    const char *reason = "cancelled";
    size_t rl = strlen(reason);
    if (one_pid(args, &target, &u, &n) != 0 || n > 2 ||
        (n == 2 && sx_unpack_str(&u, &reason, &rl) != 0))
        return SX_EINVAL;
    /* The reason goes as given, of any length and whatever its bytes, as
     * sx_engine_cancel's does (a C string would cut it at a NUL). */
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_strn(&pk, reason, rl);
    int rc = pk.err;
    /* A job's cancel is final; one waiting for its restart ends now. */
    if (rc == 0 && sx__job_request_end(e, target, SX_ECANCELLED, "cancelled")) {
        sx_pack_fini(&pk);
        sx_complete(done, nil, 0, NULL);
        return 0;
    }
    if (rc == 0)
        rc = sx__send(e, SX_PID_NONE, target, SX_TOPIC_CANCEL,
                      sizeof(SX_TOPIC_CANCEL) - 1, sx_pack_payload(&pk), true);
    sx_pack_fini(&pk);
    sx_complete(done, nil, rc, NULL);
    return 0;
}

static int cmd_monitor(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                       sx_payload args, sx_completer *done)
{
    (void)user, (void)pid, (void)tag;
    sx_unpack u;
    uint32_t n;
    sx_pid target;
    if (one_pid(args, &target, &u, &n) != 0 || n != 1)
        return SX_EINVAL;
    sx__ev *w = sx__ev_alloc();
    if (w == NULL)
        return SX_ENOMEM;
    w->watch = SX__WATCH_EXIT;
    w->to = done->ev.to;
    w->to_gen = done->ev.to_gen;
    w->engine = e;
    /* Acknowledge first so the ack precedes an immediate @exit. */
    sx_complete(done, nil, 0, NULL);
    sx__watch(e, target, w);
    return 0;
}

/* Whether the caller p is linked to the process t of generation gen
 * already: a link, made by either side, leaves on each side's watcher list
 * a link watcher addressed to the other. Only the worker running p fires
 * p's list (sx__finish), so its nodes stay put while p runs; other threads
 * only push at the head. Costs a walk of p's watchers (its links, and the
 * monitors and watches of it) per link made. */
static bool linked_already(sx__proc *p, const sx__proc *t, uint32_t gen)
{
    /* acquire: pairs with the release CAS of each push (sx__watch, and
     * sx__spawn's): a node seen through the head has its fields set. */
    sx__ev *w = atomic_load_explicit(&p->watchers, memory_order_acquire);
    while (w != NULL && w != SX__WATCH_CLOSED) {
        if (w->watch == SX__WATCH_LINK && w->to == t && w->to_gen == gen)
            return true;
        /* relaxed: set before the node was published (above). */
        w = (sx__ev *)atomic_load_explicit(&w->node.next, memory_order_relaxed);
    }
    return false;
}

/* A link with a process of another node: the caller watches target
 * there (a link watcher, answered by the remote route), and target's node
 * is asked for the other half (sx_engine_link_from). A target that is not
 * there ends the link as its failure would (SX_ENOTFOUND); a node that is
 * down or unknown refuses the link (SX_ENOCONNECTION). */
static __attribute__((cold, noinline)) int
link_remote(sx_engine *e, sx_pid pid, sx_pid target, sx_completer *done)
{
    sx__ev *mine = sx__ev_alloc();
    if (mine == NULL)
        return SX_ENOMEM;
    int rc = sx__remote_link(e, target, pid);
    if (rc != 0) {
        sx__ev_free(mine);
        sx_complete(done, nil, rc,
                    rc == SX_ENOCONNECTION
                        ? "link: its node is down or not in the cluster"
                        : "link: no such process");
        return 0;
    }
    mine->watch = SX__WATCH_LINK;
    mine->engine = e;
    mine->to = done->ev.to;
    mine->to_gen = done->ev.to_gen;
    /* Acknowledge first so the ack precedes an immediate @exit. */
    sx_complete(done, nil, 0, NULL);
    sx__watch(e, target, mine);
    return 0;
}

/* [pid]: links the caller and pid both ways (see docs/COMMANDS.md); a
 * second link of the same two processes, by either, is the same link. */
static int cmd_link(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                    sx_payload args, sx_completer *done)
{
    (void)user, (void)tag;
    sx_unpack u;
    uint32_t n;
    sx_pid target;
    if (one_pid(args, &target, &u, &n) != 0 || n != 1)
        return SX_EINVAL;
    if (sx_pid_eq(target, pid)) {
        sx_complete(done, nil, SX_EINVAL,
                    "link: a process cannot link to "
                    "itself");
        return 0;
    }
    sx__proc *t = sx__ptable_get(e, target);
    if (t == NULL && target.node != e->cfg.node)
        return link_remote(e, pid, target, done);
    if (t == NULL) {
        sx_complete(done, nil, SX_ENOTFOUND, "link: no such process");
        return 0;
    }
    uint32_t gen = (uint32_t)(target.id >> 32);
    if (linked_already(done->ev.to, t, gen)) {
        sx__proc_release(e, t);
        sx_complete(done, nil, 0, NULL);
        return 0;
    }
    sx__ev *mine = sx__ev_alloc(), *theirs = sx__ev_alloc();
    if (mine == NULL || theirs == NULL) {
        sx__ev_free(mine);
        sx__ev_free(theirs);
        sx__proc_release(e, t);
        return SX_ENOMEM;
    }
    /* mine: tells the caller when target finishes; theirs: the reverse. */
    mine->watch = theirs->watch = SX__WATCH_LINK;
    mine->engine = theirs->engine = e;
    mine->to = done->ev.to;
    mine->to_gen = done->ev.to_gen;
    theirs->to = t;
    theirs->to_gen = gen;
    /* Acknowledge first so the ack precedes an immediate @exit. */
    sx_complete(done, nil, 0, NULL);
    sx__watch(e, target, mine);
    sx__watch(e, pid, theirs);
    sx__proc_release(e, t);
    return 0;
}

/* bool (or [bool]): whether link exits arrive as @exit messages. */
static int cmd_trap_exit(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                         sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    sx_unpack u;
    uint32_t n;
    bool on;
    sx_unpack_init(&u, args);
    if (sx_unpack_array(&u, &n) == 0 && n != 1)
        return SX_EINVAL;
    if (sx_unpack_bool(&u, &on) != 0 || !sx_unpack_done(&u))
        return SX_EINVAL;
    /* relaxed: see trap_exit in core.h. */
    atomic_store_explicit(&done->ev.to->trap_exit, on, memory_order_relaxed);
    sx_complete(done, nil, 0, NULL);
    return 0;
}

void sx__cmd_process_register(sx_engine *e)
{
    e->cmds[SX_CMD_NOOP] = (sx__cmd){ cmd_noop, NULL, "noop", false };
    e->cmds[SX_CMD_SEND] = (sx__cmd){ cmd_send, NULL, "send", false };
    e->cmds[SX_CMD_SPAWN] = (sx__cmd){ cmd_spawn, NULL, "spawn", false };
    e->cmds[SX_CMD_SPAWN_WAIT] =
        (sx__cmd){ cmd_spawn_wait, NULL, "spawn-wait", false };
    e->cmds[SX_CMD_SPAWN_ALL] =
        (sx__cmd){ cmd_spawn_all, NULL, "spawn-all", false };
    e->cmds[SX_CMD_TERMINATE] =
        (sx__cmd){ cmd_terminate, NULL, "terminate", false };
    e->cmds[SX_CMD_CANCEL] = (sx__cmd){ cmd_cancel, NULL, "cancel", false };
    e->cmds[SX_CMD_MONITOR] = (sx__cmd){ cmd_monitor, NULL, "monitor", false };
    e->cmds[SX_CMD_LINK] = (sx__cmd){ cmd_link, NULL, "link", false };
    e->cmds[SX_CMD_TRAP_EXIT] =
        (sx__cmd){ cmd_trap_exit, NULL, "trap-exit", false };
}

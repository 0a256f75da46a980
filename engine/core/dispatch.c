/* engine/core/dispatch.c — the command registry, dispatch of a step's
 * yields (and of its direct sends) and sx_complete. The command families
 * themselves are engine/commands/; watchers are engine/core/watch.c.
 *
 * The registry is filled before start and frozen: ids below 256 index an
 * array, user ids (>= 256) are binary-searched in a sorted array; neither
 * takes a lock. Dispatch runs on the worker right after the step. Each
 * yield gets a completer (an event node, engine/core/event.c) that becomes its
 * completion event when sx_complete fills it: exactly one answer per
 * yield, whether the handler completes at once, later from another thread,
 * or fails.
 *
 * Threads: dispatch [worker]; sx_complete [any thread].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/commands/commands.h"
#include "engine/core/core.h"
#include "engine/io/io.h"
#include "process/fault.h"
#include "process/utf8.h"

/* ---- registry ------------------------------------------------------------ */

static const sx__cmd *cmd_find(sx_engine *e, uint16_t id)
{
    if (id < SX__CMD_DIRECT)
        return e->cmds[id].fn != NULL ? &e->cmds[id] : NULL;
    size_t lo = 0, hi = e->n_ext_cmds;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (e->ext_cmds[mid].id == id)
            return &e->ext_cmds[mid].cmd;
        if (e->ext_cmds[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int sx_engine_register_command(sx_engine *e, uint16_t id, const char *name,
                               sx_command_fn fn, void *user)
{
    if (e == NULL || fn == NULL || id < SX_CMD_USER_MIN)
        return SX_EINVAL;
    /* acquire: see started() in engine.c. */
    if (atomic_load_explicit(&e->started, memory_order_acquire))
        return SX_ESTATE;
    if (cmd_find(e, id) != NULL)
        return SX_EEXIST;
    sx__cmd c = { fn, user, name != NULL ? name : "?", false };
    if (id < SX__CMD_DIRECT) {
        e->cmds[id] = c;
        return 0;
    }
    if (e->n_ext_cmds == e->cap_ext_cmds) {
        size_t cap = e->cap_ext_cmds ? e->cap_ext_cmds * 2 : 16;
        sx__cmd_ext *x = realloc(e->ext_cmds, cap * sizeof(*x));
        if (x == NULL)
            return SX_ENOMEM;
        e->ext_cmds = x;
        e->cap_ext_cmds = cap;
    }
    size_t i = e->n_ext_cmds;
    while (i > 0 && e->ext_cmds[i - 1].id > id) {
        e->ext_cmds[i] = e->ext_cmds[i - 1];
        i--;
    }
    e->ext_cmds[i].id = id;
    e->ext_cmds[i].cmd = c;
    e->n_ext_cmds++;
    return 0;
}

/* ---- completion ---- */

bool sx_completer_resumed(const sx_completer *done)
{
    return done != NULL && done->ev.watch == SX__WATCH_RESUMED;
}

/* True when w, the calling thread's worker (or NULL), is running p, the
 * addressee of ev. relaxed gen: only this thread changes it while it runs
 * p. */
static inline bool runs_here(const sx__worker *w, sx__proc *p, const sx__ev *ev)
{
    return w != NULL && w->running == p &&
           atomic_load_explicit(&p->gen, memory_order_relaxed) == ev->to_gen;
}

/* The answer ev, complete, to p on w, the worker running p (runs_here).
 * p cannot finish under us, and this worker checks the mailbox before it
 * blocks or idles the process (engine/sched/turn.c, backlog), so neither a
 * reference nor the state word's wake-up flag is needed — only the push.
 * During the process's dispatch (loc_on), while its mailbox is empty, not
 * even that: the worker holds the answer for its next step (w->loc_first,
 * engine/sched/sched.h), which takes it before anything that arrives in
 * the mailbox later, as a push would have queued it. Once the mailbox
 * holds something (an event that arrived after the answers held so far),
 * those answers go to its front and this one behind it, in the order of
 * their arrival. */
static inline void answer_here(sx__worker *w, sx__proc *p, sx__ev *ev)
{
    if (w->loc_on) {
        if (sx__mpsc_empty(&p->mbox)) {
            /* relaxed: the held list is this worker's alone. */
            atomic_store_explicit(&ev->node.next, NULL, memory_order_relaxed);
            if (w->loc_last != NULL)
                atomic_store_explicit(&w->loc_last->node.next, &ev->node,
                                      memory_order_relaxed);
            else
                w->loc_first = ev;
            w->loc_last = ev;
            return;
        }
        sx__loc_flush(w, p);
        w->loc_on = false;
    }
    sx__mpsc_push(&p->mbox, &ev->node);
}

/* No bytes: sx__ev_set's effect without its sizing and copies (ev->heap
 * must be NULL). */
static inline void set_empty(sx__ev *ev)
{
    ev->topic_len = 0;
    ev->has_topic = 0;
    ev->data_len = 0;
    ev->msg_len = 0;
}

/* sx_complete past its first case. */
static __attribute__((noinline)) void
complete_any(sx__ev *ev, sx_payload result, int error, const char *error_msg)
{
    sx_engine *e = ev->engine;
    if (ev->dl != NULL) {
        /* A yield with a timeout: the first of this answer and the
         * deadline's claims wins; the other is dropped. */
        sx__iodl *dl = ev->dl;
        ev->dl = NULL;
        bool mine = sx__io_dl_claim(dl);
        sx__io_dl_done(e, dl, mine);
        if (!mine) {
            sx__ev_free(ev);
            return;
        }
    }
    if (ev->t0 != 0) {
        uint64_t us = (sx__now_ns() - ev->t0) / 1000u;
        unsigned k = us == 0 ? 0 : 64u - (unsigned)__builtin_clzll(us);
        if (k >= SX_LATENCY_BUCKETS)
            k = SX_LATENCY_BUCKETS - 1;
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&e->latency[k], 1, memory_order_relaxed);
        /* relaxed: a figure, read apart from the buckets (stats are not
         * a snapshot, engine.h). */
        atomic_fetch_add_explicit(&e->latency_sum, us, memory_order_relaxed);
    }
    if (ev->tag == SX_TAG_NONE) {
        /* Fire and forget: nobody waits for the answer. */
        if (error != 0)
            atomic_fetch_add_explicit(&e->dead_letters, 1,
                                      memory_order_relaxed);
        sx__ev_free(ev);
        return;
    }
    if (error > 0)
        error = SX_EFAILED;
    if (error != 0 && error_msg == NULL)
        error_msg = sx_strerror(error);
    if (error != 0)
        result = (sx_payload){ NULL, 0 };
    /* Read before the answer's bytes are set: in a small completer they
     * overlay `to` (core.h). */
    sx__proc *p = ev->to;
    if (result.len == 0 && error_msg == NULL && ev->heap == NULL) {
        set_empty(ev);
    } else if (SX__FAULT(SX__FAULT_RESULT) ||
               (!(error_msg == NULL && sx__ev_set_data_quick(ev, result)) &&
                sx__ev_set(ev, NULL, 0, result, error_msg) != 0)) {
        /* The result cannot be copied: the process still gets its one
         * answer, as an error. */
        error = SX_ENOMEM;
        sx__ev_set(ev, NULL, 0, (sx_payload){ NULL, 0 }, NULL);
    }
    ev->kind = SX__EV_COMPLETION;
    ev->error = error;
    sx__worker *w = sx__current_worker(e);
    if (runs_here(w, p, ev)) {
        answer_here(w, p, ev);
        return;
    }
    /* On a worker the reference may be one its sends keep (sx__prefs). */
    uint64_t id = ((uint64_t)ev->to_gen << 32) | p->index;
    sx__prefs_slot ps = sx__prefs_find(w != NULL ? w->prefs : NULL, id);
    if (ps.p == NULL && !sx__proc_acquire(e, p, ev->to_gen)) {
        sx__ev_free(ev); /* the process finished: a silent no-op */
        return;
    }
    bool kept = sx__prefs_keep(e, &ps, id, p);
    sx__deliver(e, p, ev);
    if (!kept)
        sx__proc_release(e, p);
}

void sx_complete(sx_completer *done, sx_payload result, int error,
                 const char *error_msg)
{
    if (done == NULL)
        return;
    sx__ev *ev = &done->ev;
    /* The answer of a cheap command given by its handler at once (or a
     * sleep fired during the process's own turn): no bytes, no error, no
     * deadline, not a sampled one, on the worker running the process.
     * What complete_any would do, with none of its tests that fail here. */
    if (result.len == 0 && error == 0 && error_msg == NULL && ev->dl == NULL &&
        ev->t0 == 0 && ev->heap == NULL && ev->tag != SX_TAG_NONE) {
        sx__proc *p = ev->to;
        sx__worker *w = sx__current_worker(ev->engine);
        if (runs_here(w, p, ev)) {
            set_empty(ev);
            ev->kind = SX__EV_COMPLETION;
            ev->error = 0;
            answer_here(w, p, ev);
            return;
        }
    }
    complete_any(ev, result, error, error_msg);
}

/* An sx_send record in the output arena: the PID, the topic length, the
 * topic, the data. */
static sx_pid send_to(const sx_step_output *out, const sx__yield *y)
{
    if (y->ev != NULL)
        return y->to;
    sx_pid to;
    memcpy(&to, sx__output_bytes(out, y->off), sizeof to);
    return to;
}

/* The send hooks of the workers' outputs (process/output.h): an sx_send
 * in a step builds its event node at once, one copy of its bytes. Both
 * check the topic (UTF-8) first. send_make_any is the general path of
 * send_make (below). flatten: with the check in it, GCC's LTO inliner
 * otherwise leaves sx__ev_set out of it (~45 more instructions per
 * message); flattened, it builds the node inline, and the check's slow
 * path stays a call (sx__topic_ok is noinline). cold: rare, and kept out
 * of the hot code's way (with it in the hot text, fanin ran 8 % slower
 * at the same instruction count). */
static __attribute__((flatten, noinline, cold)) void *
send_make_any(const char *topic, size_t topic_len, sx_payload data)
{
    if (!sx__topic_cstr_ok(topic, topic_len))
        return SX__SEND_BAD_TOPIC;
    sx__ev *ev = sx__ev_alloc_sized(topic_len + 1 + data.len);
    if (ev == NULL)
        return NULL;
    ev->kind = SX__EV_MESSAGE;
    if (sx__ev_set(ev, topic, topic_len, data, NULL) != 0) {
        sx__ev_free(ev);
        return NULL;
    }
    return ev;
}

/* Most messages are sx__ev_message_quick's, built with no call, so that
 * send_make saves no registers for the general path's calls (malloc,
 * strlen, the topic's full check). */
static void *send_make(const char *topic, size_t topic_len, sx_payload data)
{
    sx__ev *ev = sx__ev_message_quick(topic, topic_len, data);
    return ev != NULL ? ev : send_make_any(topic, topic_len, data);
}

static void send_drop(void *ev)
{
    sx__ev_free(ev);
}

/* The general path of send_merge: noinline, so that send_merge's common
 * case (sx__ev_bundle_append) keeps no registers for the general path's
 * calls and reaches it by a tail call. */
static __attribute__((noinline)) int
send_merge_any(void **ev, const char *topic, size_t topic_len, sx_payload data,
               unsigned max)
{
    if (!sx__topic_cstr_ok(topic, topic_len))
        return -1; /* send_make says why */
    return sx__ev_bundle_add((sx__ev **)ev, topic, topic_len, data, max);
}

static int send_merge(void **ev, const char *topic, size_t topic_len,
                      sx_payload data, unsigned max)
{
    if (sx__ev_bundle_append(*ev, topic, topic_len, data, max) == 0)
        return 0;
    return send_merge_any(ev, topic, topic_len, data, max);
}

const sx__send_hooks sx__worker_send_hooks = { send_make, send_drop,
                                               send_merge };

/* A message node about to go out as `from`'s (not a control event);
 * returns how many messages it holds (a bundle: its records). */
static inline __attribute__((always_inline)) size_t send_ready(sx__ev *ev,
                                                               sx_pid from)
{
    ev->ctl = false;
    ev->from = from;
    return ev->nmsg > 0 ? ev->nmsg : 1;
}

/* sx_send: no completer, no argument decoding. The run of consecutive
 * sends that starts at yield i and goes to one process travels as one
 * chain: one look-up, one push, one wake-up for the lot (a producer that
 * sends 32 messages per step to one consumer pays the consumer's cache
 * lines once, not 32 times). Returns the index after the run. */
static size_t direct_sends(sx_engine *e, sx_pid from, const sx_step_output *out,
                           size_t i)
{
    sx_pid to = send_to(out, &out->yields[i]);
    sx__ev *first = NULL, *last = NULL;
    size_t n = 0, lost = 0, j = i;
    for (; j < out->n_yields; j++) {
        const sx__yield *y = &out->yields[j];
        if (y->cmd != SX__CMD_DIRECT_SEND ||
            (j > i && !sx_pid_eq(send_to(out, y), to)))
            break;
        sx__ev *ev = y->ev;
        if (ev != NULL) {
            /* Built by sx_send; ours now (the output must not drop it). */
            ((sx__yield *)y)->ev = NULL;
        } else {
            const uint8_t *b = sx__output_bytes(out, y->off);
            size_t tl = b[sizeof to];
            const char *topic = (const char *)b + sizeof to + 1;
            size_t dl = y->len - sizeof to - 1 - tl;
            sx_payload data = { dl > 0 ? (const uint8_t *)topic + tl : NULL,
                                dl };
            ev = sx__ev_alloc_sized(tl + 1 + dl);
            if (ev == NULL) {
                lost++;
                continue;
            }
            ev->kind = SX__EV_MESSAGE;
            if (sx__ev_set(ev, topic, tl, data, NULL) != 0) {
                sx__ev_free(ev);
                lost++;
                continue;
            }
        }
        size_t k = send_ready(ev, from);
        if (last != NULL)
            /* relaxed: the chain is ours until the push publishes it. */
            atomic_store_explicit(&last->node.next, &ev->node,
                                  memory_order_relaxed);
        else
            first = ev;
        last = ev;
        n += k;
    }
    if (n > 0 && sx__send_chain(e, to, first, last, n) != 0)
        lost += n;
    if (lost > 0)
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&e->dead_letters, lost, memory_order_relaxed);
    return j;
}

/* Yield i is a send whose node sx_send built, and the next yield is no
 * send: a run of one, the common case (a ping-pong's, a ring's, a reply). */
static inline __attribute__((always_inline)) bool
lone_send(const sx_step_output *out, size_t i)
{
    return out->yields[i].ev != NULL &&
           (i + 1 == out->n_yields ||
            out->yields[i + 1].cmd != SX__CMD_DIRECT_SEND);
}

/* direct_sends for a lone send (lone_send), inline in the dispatch: no
 * loop and none of direct_sends' saved registers, and a receiver whose
 * reference the worker keeps takes it with no call (sx__send_kept). */
static inline __attribute__((always_inline)) void
send_one(sx_engine *e, sx__worker *w, sx_pid from, sx__yield *y)
{
    sx__ev *ev = y->ev;
    y->ev = NULL; /* ours now (the output must not drop it) */
    size_t k = send_ready(ev, from);
    if (!sx__send_kept(e, w, y->to, ev, ev, k) &&
        sx__send_chain_any(e, y->to, ev, ev, k) != 0)
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&e->dead_letters, k, memory_order_relaxed);
}

/* The sends among yields i.. (the commands are dropped). */
static void sends_from(sx_engine *e, sx_pid pid, const sx_step_output *out,
                       size_t i)
{
    while (i < out->n_yields) {
        if (out->yields[i].cmd == SX__CMD_DIRECT_SEND)
            i = direct_sends(e, pid, out, i);
        else
            i++;
    }
}

void sx__dispatch_sends(sx_engine *e, sx__proc *p, const sx_step_output *out)
{
    sends_from(e, sx__proc_pid(e, p), out, 0);
}

/* sx__dispatch for p, whose PID is pid and generation gen; job: p is a
 * job (a constant in each copy). Every send's node is taken from the
 * output (direct_sends, send_one) on every path, out of memory included:
 * the turn then tells the output's reset it has none to drop
 * (sends_gone). */
static inline __attribute__((always_inline)) int
dispatch_as(sx_engine *e, sx__proc *p, const sx_step_output *out, sx_pid pid,
            uint32_t gen, bool job)
{
    sx__worker *w = sx__current_worker(e);
    /* yields[0] is initialised memory even with no yield (the output's
     * inline array, zeroed at init; a grown array holds at least one), so
     * its command is tested before the count. */
    if (out->yields[0].cmd == SX__CMD_DIRECT_SEND && out->n_yields == 1 &&
        out->yields[0].ev != NULL) {
        /* A step's one yield, a send (a reply, a forward): with no loop. */
        send_one(e, w, pid, (sx__yield *)&out->yields[0]);
        return 0;
    }
    for (size_t i = 0; i < out->n_yields; i++) {
        const sx__yield *y = &out->yields[i];
        if (y->cmd == SX__CMD_DIRECT_SEND) {
            if (lone_send(out, i))
                send_one(e, w, pid, (sx__yield *)y);
            else
                i = direct_sends(e, pid, out, i) - 1;
            continue;
        }
        const sx__cmd *c = cmd_find(e, (uint16_t)y->cmd); /* not a send */
        sx__ev *ev = SX__FAULT(SX__FAULT_DISPATCH) ? NULL
                     : c != NULL && c->small ? sx__ev_alloc_small_completer()
                                             : sx__ev_alloc();
        if (ev == NULL) {
            /* The process finishes SX_ENOMEM (worker.c); the step's later
             * messages still go, as for a step that ends FAIL. */
            sends_from(e, pid, out, i + 1);
            return SX_ENOMEM;
        }
        ev->kind = SX__EV_COMPLETION;
        ev->tag = y->tag;
        ev->to = p;
        ev->to_gen = gen;
        ev->engine = e;
        if (job && out->resumed)
            ev->watch = SX__WATCH_RESUMED;
        if (w != NULL && (++w->lat_sample & 63) == 0)
            ev->t0 = sx__now_ns(); /* one yield in 64 is timed */
        sx_completer *done = (sx_completer *)ev;
        if (y->timeout_ms > 0 && sx__io_deadline(e, done, y->timeout_ms) != 0) {
            sx_complete(done, (sx_payload){ NULL, 0 }, SX_ENOMEM,
                        "no memory for the yield's timeout");
            continue;
        }
        if (c == NULL) {
            sx_complete(done, (sx_payload){ NULL, 0 }, SX_EUNKNOWN_COMMAND,
                        NULL);
            continue;
        }
        sx_payload args = { sx__output_bytes(out, y->off), y->len };
        if (y->len == 0)
            args.data = NULL;
        int rc = c->fn(c->user, e, pid, y->tag, args, done);
        if (rc != 0)
            sx_complete(done, (sx_payload){ NULL, 0 }, rc < 0 ? rc : SX_EFAILED,
                        NULL);
    }
    return 0;
}

/* sx__dispatch for a job, whose PID is the job's (sx__proc_pid): apart,
 * so that the path of every other process only tests p->job. */
static __attribute__((cold, noinline)) int
dispatch_job(sx_engine *e, sx__proc *p, const sx_step_output *out, uint32_t gen)
{
    return dispatch_as(e, p, out, sx__proc_pid(e, p), gen, true);
}

int sx__dispatch(sx_engine *e, sx__proc *p, const sx_step_output *out)
{
    /* relaxed: we run p, so its gen is stable. */
    uint32_t gen = atomic_load_explicit(&p->gen, memory_order_relaxed);
    /* Not a job (the turn sends jobs to sx__dispatch_job): its PID is
     * its slot's. */
    sx_pid pid = { e->cfg.node, e->cfg.host, ((uint64_t)gen << 32) | p->index };
    return dispatch_as(e, p, out, pid, gen, false);
}

int sx__dispatch_job(sx_engine *e, sx__proc *p, const sx_step_output *out)
{
    /* relaxed: the caller owns p, so its gen is stable. */
    return dispatch_job(e, p, out,
                        atomic_load_explicit(&p->gen, memory_order_relaxed));
}

void sx__commands_builtin(sx_engine *e)
{
    sx__cmd_process_register(e);
    sx__cmd_clock_register(e);
    sx__cmd_exec_register(e);
    sx__cmd_fs_register(e);
    sx__cmd_net_register(e);
    sx__helpers_register(e);
}

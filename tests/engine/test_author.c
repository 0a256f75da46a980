/* tests/engine/test_author.c — the engine side of C authoring, through a
 * real engine: init's error messages (sx_init_error, sx_engine_init_error,
 * sx_submit_opts.init_error, a refused spawn's answer), sx_cancelled and
 * its count, process deadlines (a type's, a submit's, a spawn's; what they
 * leave behind, and a parent's children when one fires), spawn scopes,
 * spawn-wait's notify, spawn-all, retries (sx_yield_with, spawn-wait's
 * and exec's retry option) and their helper process's end with its
 * parent, exec's check and sx_exec_result_get, sx_yield_spawn and the
 * spawn-all builders, the batch walker on real batches, and the engine's
 * own types kept out of the user's reach.
 *
 * Each case builds its own engine. Processes report what they saw through
 * C11 atomics and the mutex rec_mu; a process whose own check fails fails
 * with a message naming it, which the case then prints. Waits are long
 * (WAIT_MS); no upper time bound is tighter than a few seconds.
 *
 * Threads: cases run one at a time on the main thread; inits run on the
 * submitting thread or on the worker that runs a spawn; steps, closes and
 * the user commands on the workers.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stepx/engine.h>

#include "tests/support/engine.h"
#include "tests/support/harness.h"
#include "tests/support/timing.h"
#include "tests/support/tmp.h"

#define WAIT_MS 20000 /* for anything that should happen */

static const sx_payload nil = { NULL, 0 };

/* ---- what the processes report ------------------------------------------- */

/* Every counter and flag below is read by the main thread after a wait or
 * a poll; seq_cst (the plain atomic_* calls) throughout: cost does not
 * matter here. The arrays are guarded by rec_mu. */
static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;

/* "forever": the PIDs in init order, and the closes. */
#define FV_MAX 64
static sx_pid fv_pids[FV_MAX];
static int fv_n;
static _Atomic int fv_closes;

/* "parent": the child each spawn answered, by tag. */
static sx_pid kid_pid[8];
static _Atomic int kids_answered;

/* "once": the order of its @spawned and its answer, and the @spawned. */
static _Atomic int seq, spawned_at, completed_at;
static sx_pid spawned_pid, spawned_from;
static uint64_t spawned_tag;

/* "flaky_child": inits of any. */
static _Atomic int flaky_inits;

/* The user commands: calls, and when each came. */
static _Atomic int cmd_calls;
static _Atomic uint64_t call_ns[16];

/* "blocker": running its step, and told to end it. */
static _Atomic int blocker_running, blocker_release;

/* "walker": the kinds sx_batch_next gave, in order, and each step's
 * event count. */
static int walk_kinds[16], walk_nk;
static size_t walk_batch[16];
static int walk_nb;

static void reset(void)
{
    pthread_mutex_lock(&rec_mu);
    fv_n = 0;
    memset(kid_pid, 0, sizeof kid_pid);
    spawned_pid = spawned_from = SX_PID_NONE;
    spawned_tag = 0;
    walk_nk = walk_nb = 0;
    pthread_mutex_unlock(&rec_mu);
    atomic_store(&fv_closes, 0);
    atomic_store(&kids_answered, 0);
    atomic_store(&seq, 0);
    atomic_store(&spawned_at, 0);
    atomic_store(&completed_at, 0);
    atomic_store(&flaky_inits, 0);
    atomic_store(&cmd_calls, 0);
    atomic_store(&blocker_running, 0);
    atomic_store(&blocker_release, 0);
}

static sx_pid fv_pid(int i)
{
    pthread_mutex_lock(&rec_mu);
    sx_pid p = i < fv_n ? fv_pids[i] : SX_PID_NONE;
    pthread_mutex_unlock(&rec_mu);
    return p;
}

static int fv_count(void)
{
    pthread_mutex_lock(&rec_mu);
    int n = fv_n;
    pthread_mutex_unlock(&rec_mu);
    return n;
}

static sx_pid kid(int i)
{
    pthread_mutex_lock(&rec_mu);
    sx_pid p = kid_pid[i];
    pthread_mutex_unlock(&rec_mu);
    return p;
}

/* ---- process types ------------------------------------------------------- */

static const char *mp_name(int t)
{
    switch (t) {
    case SX_MP_NIL:
        return "nil";
    case SX_MP_BOOL:
        return "bool";
    case SX_MP_INT:
        return "int";
    case SX_MP_STR:
        return "str";
    case SX_MP_ARRAY:
        return "array";
    case SX_MP_MAP:
        return "map";
    default:
        return "other";
    }
}

/* "picky": method "run" wants an int as its second input and says so when
 * it is not; "plain" refuses with SX_EINVAL and no message; "half" gives a
 * message for SX_EINVAL but returns SX_EPROTO (so: no message); "mind"
 * gives a message and then succeeds (it finishes with nil). */
static int picky_init(void *st, const sx_init_ctx *ctx, const char *method,
                      const sx_payload *in, size_t n)
{
    (void)st;
    if (strcmp(method, "plain") == 0)
        return SX_EINVAL;
    if (strcmp(method, "half") == 0) {
        sx_init_error(ctx, SX_EINVAL, "half a message");
        return SX_EPROTO;
    }
    if (strcmp(method, "mind") == 0) {
        sx_init_error(ctx, SX_EINVAL, "changed its mind");
        return 0;
    }
    if (n < 2)
        return sx_init_error(ctx, SX_EINVAL, "needs 2 inputs, got %zu", n);
    sx_unpack u;
    sx_unpack_init(&u, in[1]);
    int t = sx_unpack_type(&u);
    if (t != SX_MP_INT)
        return sx_init_error(ctx, SX_EINVAL, "input 2 must be an int, got %s",
                             mp_name(t));
    return 0;
}

static int done_nil_step(void *st, const sx_event *ev, size_t n,
                         sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    sx_done(out, nil);
    return 0;
}

/* "forever" (and its variants with a type deadline): idle until a
 * message "end" (finishes with its data) or a @cancel (ends cancelled
 * with its reason). Its init records its PID; its close is counted. */
typedef struct {
    bool started;
} fv_state;

static int fv_init(void *st, const sx_init_ctx *ctx, const char *method,
                   const sx_payload *in, size_t n)
{
    (void)st, (void)method, (void)in, (void)n;
    pthread_mutex_lock(&rec_mu);
    if (fv_n < FV_MAX)
        fv_pids[fv_n++] = sx_init_pid(ctx);
    pthread_mutex_unlock(&rec_mu);
    return 0;
}

static int fv_step(void *st, const sx_event *events, size_t n,
                   sx_step_output *out)
{
    fv_state *s = st;
    sx_batch b;
    const sx_event *ev;
    sx_idle(out); /* unless an event ends it */
    sx_batch_init(&b, events, n, &s->started, out);
    for (sx_event_kind k; (k = sx_batch_next(&b, &ev)) != SX_EV_END;) {
        if (k == SX_EV_CANCEL)
            sx_cancelled_by(out, ev);
        else if (k == SX_EV_MESSAGE && strcmp(ev->topic, "end") == 0)
            sx_done(out, ev->data);
    }
    return sx_batch_wait(&b);
}

static void fv_close(void *st)
{
    (void)st;
    atomic_fetch_add(&fv_closes, 1);
}

/* "echo": finishes with its first input (up to 256 bytes). */
typedef struct {
    uint8_t v[256];
    size_t len;
} echo_state;

static int echo_init(void *st, const sx_init_ctx *ctx, const char *method,
                     const sx_payload *in, size_t n)
{
    (void)method;
    echo_state *s = st;
    if (n < 1 || in[0].len > sizeof s->v)
        return sx_init_error(ctx, SX_EINVAL, "echo: one input, up to 256 B");
    if (in[0].len > 0)
        memcpy(s->v, in[0].data, in[0].len);
    s->len = in[0].len;
    return 0;
}

static int echo_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)ev, (void)n;
    echo_state *s = st;
    sx_done(out, (sx_payload){ s->v, s->len });
    return 0;
}

/* "adder": finishes with the sum of its two int inputs. */
typedef struct {
    int64_t a, b;
} adder_state;

static int adder_init(void *st, const sx_init_ctx *ctx, const char *method,
                      const sx_payload *in, size_t n)
{
    (void)method;
    adder_state *s = st;
    if (n != 2 || sx_payload_get_int(in[0], &s->a) != 0 ||
        sx_payload_get_int(in[1], &s->b) != 0)
        return sx_init_error(ctx, SX_EINVAL, "adder: two ints");
    return 0;
}

static int adder_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)ev, (void)n;
    adder_state *s = st;
    return sx_donef(out, "I", s->a + s->b);
}

/* The init of the types below, which need none. */
static int noop_init(void *st, const sx_init_ctx *ctx, const char *method,
                     const sx_payload *in, size_t n)
{
    (void)st, (void)ctx, (void)method, (void)in, (void)n;
    return 0;
}

/* "failer": fails "nope". */
static int failer_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    sx_fail(out, "nope");
    return 0;
}

/* "flaky_child": the first two inits (of the case) make processes that
 * fail; later ones finish with their init's number. */
typedef struct {
    int attempt;
} flaky_state;

static int flaky_init(void *st, const sx_init_ctx *ctx, const char *method,
                      const sx_payload *in, size_t n)
{
    (void)ctx, (void)method, (void)in, (void)n;
    ((flaky_state *)st)->attempt = atomic_fetch_add(&flaky_inits, 1) + 1;
    return 0;
}

static int flaky_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)ev, (void)n;
    flaky_state *s = st;
    if (s->attempt <= 2) {
        sx_fail(out, "flaky child");
        return 0;
    }
    return sx_donef(out, "i", s->attempt);
}

/* "blocker": its first step holds its worker until blocker_release (at
 * most WAIT_MS). */
static int blocker_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    atomic_store(&blocker_running, 1);
    double end = sx_test_now_ms() + WAIT_MS;
    while (!atomic_load(&blocker_release) && sx_test_now_ms() < end)
        tx_sleep_us(200);
    sx_done(out, nil);
    return 0;
}

/* "walker": one loop over sx_batch_next in process.h's shape (no return
 * inside), logging each kind the walk gives: at the start it yields two
 * noops, and it finishes with 2 once both answered; a @cancel ends it
 * cancelled (and the walk with it). */
typedef struct {
    bool started;
    int completes;
} walk_state;

static void walk_log(int kind)
{
    pthread_mutex_lock(&rec_mu);
    if (walk_nk < 16)
        walk_kinds[walk_nk++] = kind;
    pthread_mutex_unlock(&rec_mu);
}

static int walker_step(void *st, const sx_event *events, size_t n,
                       sx_step_output *out)
{
    walk_state *s = st;
    pthread_mutex_lock(&rec_mu);
    if (walk_nb < 16)
        walk_batch[walk_nb++] = n;
    pthread_mutex_unlock(&rec_mu);
    sx_batch b;
    const sx_event *ev;
    sx_batch_init(&b, events, n, &s->started, out);
    for (sx_event_kind k; (k = sx_batch_next(&b, &ev)) != SX_EV_END;) {
        walk_log(k);
        if (k == SX_EV_CANCEL) {
            sx_cancelled_by(out, ev);
        } else if (k == SX_EV_START) {
            if (sx_yield(out, SX_CMD_NOOP, 1, nil) != 0 ||
                sx_yield(out, SX_CMD_NOOP, 2, nil) != 0)
                return SX_ENOMEM;
        } else if (k == SX_EV_COMPLETE) {
            if (ev->error != 0)
                sx_fail(out, "walker: a noop failed");
            else if (++s->completes == 2)
                sx_donef(out, "i", s->completes);
        }
    }
    return sx_batch_wait(&b);
}

/* "parent": inputs [end, scope...]: spawns a "forever" child per scope
 * (sx_scope), tag i for the i-th, and records each child's PID. end 1:
 * it finishes with the count once all are answered; end 0: it waits
 * (for a @cancel, which ends it cancelled, or its deadline). */
typedef struct {
    bool started;
    int64_t end;
    int64_t scope[6];
    int n, answered;
} parent_state;

static int parent_init(void *st, const sx_init_ctx *ctx, const char *method,
                       const sx_payload *in, size_t n)
{
    (void)method;
    parent_state *s = st;
    if (n < 1 || n > 7 || sx_payload_get_int(in[0], &s->end) != 0)
        return sx_init_error(ctx, SX_EINVAL, "parent: [end, scope...]");
    s->n = (int)n - 1;
    for (int i = 0; i < s->n; i++)
        if (sx_payload_get_int(in[i + 1], &s->scope[i]) != 0)
            return sx_init_error(ctx, SX_EINVAL, "parent: scope %d", i);
    return 0;
}

/* A spawn's answer: the child's PID recorded, or the parent fails. */
static void parent_answer(parent_state *s, const sx_event *ev,
                          sx_step_output *out)
{
    sx_unpack u;
    sx_pid child;
    sx_unpack_init(&u, ev->data);
    if (ev->error != 0 || ev->tag >= 8 || sx_unpack_pid(&u, &child) != 0) {
        sx_fail_code(out, ev->error != 0 ? ev->error : SX_EPROTO,
                     ev->error_msg ? ev->error_msg
                                   : "parent: bad spawn answer");
        return;
    }
    pthread_mutex_lock(&rec_mu);
    kid_pid[ev->tag] = child;
    pthread_mutex_unlock(&rec_mu);
    atomic_fetch_add(&kids_answered, 1);
    if (++s->answered == s->n && s->end == 1)
        sx_donef(out, "i", s->n);
    else if (s->answered == s->n && s->end == 2)
        sx_fail(out, "parent: failing");
}

static int parent_step(void *st, const sx_event *events, size_t n,
                       sx_step_output *out)
{
    parent_state *s = st;
    sx_batch b;
    const sx_event *ev;
    sx_batch_init(&b, events, n, &s->started, out);
    for (sx_event_kind k; (k = sx_batch_next(&b, &ev)) != SX_EV_END;) {
        if (k == SX_EV_CANCEL) {
            sx_cancelled_by(out, ev);
        } else if (k == SX_EV_START) {
            for (int i = 0; i < s->n; i++) {
                sx_spawn_opts o = { .scope = (int)s->scope[i] };
                int rc = sx_yield_spawn(out, SX_CMD_SPAWN, (uint64_t)i, &o,
                                        "forever", "run", NULL);
                if (rc != 0) {
                    sx_fail_code(out, rc, "parent: sx_yield_spawn");
                    break;
                }
            }
        } else if (k == SX_EV_COMPLETE) {
            parent_answer(s, ev, out);
        }
    }
    return sx_batch_wait(&b);
}

/* "once": inputs [cmd, args, opts, flags]: yields cmd with args (tag 1)
 * through sx_yield_with, opts nil or {timeout_ms, max_restarts,
 * backoff_min_ms, backoff_max_ms} (a retry policy when max_restarts is
 * there), and finishes with the answer: its value, or its error and
 * message ("(none)" when it has none). It records a @spawned; with flags
 * 1 it cancels the child the @spawned names ("stop it"). A @cancel ends
 * it cancelled. */
typedef struct {
    bool started;
    uint16_t cmd;
    int64_t flags;
    bool has_retry;
    sx_restart_policy pol;
    int64_t timeout_ms;
    size_t args_len;
    uint8_t args[4096];
} once_state;

static int once_init(void *st, const sx_init_ctx *ctx, const char *method,
                     const sx_payload *in, size_t n)
{
    (void)method;
    once_state *s = st;
    int64_t cmd;
    if (n < 2 || sx_payload_get_int(in[0], &cmd) != 0 || cmd < 1 ||
        cmd > UINT16_MAX || in[1].len > sizeof s->args)
        return sx_init_error(ctx, SX_EINVAL, "once: [cmd, args, opts]");
    s->cmd = (uint16_t)cmd;
    if (in[1].len > 0)
        memcpy(s->args, in[1].data, in[1].len);
    s->args_len = in[1].len;
    if (n >= 3) {
        s->timeout_ms = sx_get_int(in[2], "timeout_ms", 0);
        s->has_retry = sx_get(in[2], "max_restarts", NULL) == 0;
        s->pol = (sx_restart_policy){
            .mode = SX_RESTART_ON_FAILURE,
            .max_restarts = (uint32_t)sx_get_int(in[2], "max_restarts", 0),
            .backoff_min_ms = (uint32_t)sx_get_int(in[2], "backoff_min_ms", 0),
            .backoff_max_ms = (uint32_t)sx_get_int(in[2], "backoff_max_ms", 0),
        };
    }
    if (n >= 4 && sx_payload_get_int(in[3], &s->flags) != 0)
        return sx_init_error(ctx, SX_EINVAL, "once: flags");
    return 0;
}

static int once_spawned(once_state *s, const sx_event *ev, sx_step_output *out)
{
    sx_payload pv;
    sx_pid child = SX_PID_NONE;
    sx_unpack u;
    if (sx_get(ev->data, "pid", &pv) != 0)
        return SX_EPROTO;
    sx_unpack_init(&u, pv);
    if (sx_unpack_pid(&u, &child) != 0)
        return SX_EPROTO;
    pthread_mutex_lock(&rec_mu);
    spawned_pid = child;
    spawned_from = ev->from;
    spawned_tag = (uint64_t)sx_get_int(ev->data, "tag", -1);
    pthread_mutex_unlock(&rec_mu);
    atomic_store(&spawned_at, atomic_fetch_add(&seq, 1) + 1);
    if (s->flags & 1)
        return sx_yieldf(out, SX_CMD_CANCEL, 2, "[p, s]", child, "stop it");
    return 0;
}

static int once_step(void *st, const sx_event *events, size_t n,
                     sx_step_output *out)
{
    once_state *s = st;
    sx_batch b;
    const sx_event *ev;
    int rc;
    sx_batch_init(&b, events, n, &s->started, out);
    for (sx_event_kind k; (k = sx_batch_next(&b, &ev)) != SX_EV_END;) {
        if (k == SX_EV_CANCEL) {
            sx_cancelled_by(out, ev);
        } else if (k == SX_EV_START) {
            sx_yield_opts yo = { .timeout_ms = s->timeout_ms,
                                 .retry = s->has_retry ? &s->pol : NULL };
            rc = sx_yield_with(
                out, s->cmd, 1,
                (sx_payload){ s->args_len ? s->args : NULL, s->args_len }, &yo);
            if (rc != 0)
                sx_fail_code(out, rc, "once: yield refused");
        } else if (k == SX_EV_SPAWNED) {
            rc = once_spawned(s, ev, out);
            if (rc != 0)
                sx_fail_code(out, rc, "once: bad @spawned");
        } else if (k == SX_EV_COMPLETE && ev->tag == 1) { /* 2: cancel's */
            atomic_store(&completed_at, atomic_fetch_add(&seq, 1) + 1);
            if (ev->error != 0)
                sx_fail_code(out, ev->error,
                             ev->error_msg != NULL ? ev->error_msg : "(none)");
            else
                sx_done(out, ev->data);
        }
    }
    return sx_batch_wait(&b);
}

/* "spawner": method "wait": checks that sx_yield_spawn refuses misuse,
 * then spawn-waits "adder" with 2 and 3 (inputs from a format, with
 * options) and finishes with its answer; method "spawn": spawns "echo"
 * with "hello" and finishes with the child's PID. */
typedef struct {
    bool started;
    bool wait; /* method "wait" */
} spawner_state;

static int spawner_misuse(sx_step_output *out)
{
    sx_spawn_opts bad_dl = { .deadline_ms = -1 };
    sx_spawn_opts bad_scope = { .scope = 7 };
    sx_restart_policy bad_pol = { .mode = SX_RESTART_ON_FAILURE,
                                  .backoff_min_ms = 10,
                                  .backoff_max_ms = 5 };
    sx_spawn_opts bad_retry = { .retry = &bad_pol };
    if (sx_yield_spawn(out, SX_CMD_NOOP, 9, NULL, "adder", "run", "") !=
            SX_EINVAL ||
        sx_yield_spawn(out, SX_CMD_SPAWN, 9, NULL, NULL, "run", "") !=
            SX_EINVAL ||
        sx_yield_spawn(out, SX_CMD_SPAWN, 9, NULL, "adder", NULL, "") !=
            SX_EINVAL ||
        sx_yield_spawn(out, SX_CMD_SPAWN, 9, NULL, "adder", "run", "q") !=
            SX_EINVAL ||
        sx_yield_spawn(out, SX_CMD_SPAWN, 9, &bad_dl, "adder", "run", "") !=
            SX_EINVAL ||
        sx_yield_spawn(out, SX_CMD_SPAWN, 9, &bad_scope, "adder", "run", "") !=
            SX_EINVAL ||
        sx_yield_spawn(out, SX_CMD_SPAWN_WAIT, 9, &bad_retry, "adder", "run",
                       "") != SX_EINVAL)
        return -1;
    /* sx_yield_with: a policy sx_restart_policy_check refuses, a negative
     * timeout. */
    sx_yield_opts yo = { .retry = &bad_pol };
    if (sx_yield_with(out, SX_CMD_NOOP, 9, nil, &yo) != SX_EINVAL)
        return -1;
    sx_restart_policy ok_pol = { .mode = SX_RESTART_ON_FAILURE };
    yo = (sx_yield_opts){ .timeout_ms = -1, .retry = &ok_pol };
    if (sx_yield_with(out, SX_CMD_NOOP, 9, nil, &yo) != SX_EINVAL)
        return -1;
    return 0;
}

static int spawner_init(void *st, const sx_init_ctx *ctx, const char *method,
                        const sx_payload *in, size_t n)
{
    (void)ctx, (void)in, (void)n;
    ((spawner_state *)st)->wait = strcmp(method, "wait") == 0;
    return 0;
}

static int spawner_step(void *st, const sx_event *events, size_t n,
                        sx_step_output *out)
{
    spawner_state *s = st;
    if (!s->started) {
        s->started = true;
        int rc;
        if (s->wait) {
            if (spawner_misuse(out) != 0) {
                sx_fail(out, "spawner: sx_yield_spawn took a misuse");
                return 0;
            }
            sx_spawn_opts o = { .deadline_ms = 5000,
                                .scope = SX_SCOPE_TERMINATE };
            rc = sx_yield_spawn(out, SX_CMD_SPAWN_WAIT, 1, &o, "adder", "run",
                                "i, I", 2, (int64_t)3);
        } else {
            rc = sx_yield_spawn(out, SX_CMD_SPAWN, 1, NULL, "echo", "run", "s",
                                "hello");
        }
        if (rc != 0) {
            sx_fail_code(out, rc, "spawner: sx_yield_spawn");
            return 0;
        }
        sx_wait(out);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        const sx_event *ev = &events[i];
        if (ev->type != SX_EVENT_YIELD_COMPLETE || ev->tag != 1)
            continue;
        if (ev->error != 0)
            sx_fail_code(out, ev->error, ev->error_msg);
        else
            sx_done(out, ev->data);
        return 0;
    }
    sx_wait(out);
    return 0;
}

static const char *const picky_methods[] = { "run", "plain", "half", "mind",
                                             NULL };

#define FOREVER(nm, dl)                                                        \
    {                                                                          \
        .name = nm, .state_size = sizeof(fv_state), .init = fv_init,           \
        .step = fv_step, .close = fv_close, .deadline_ms = dl                  \
    }

static const sx_process_type types[] = {
    { .name = "picky",
      .init = picky_init,
      .step = done_nil_step,
      .methods = picky_methods },
    FOREVER("forever", 0),
    FOREVER("forever_dl", 250),
    FOREVER("forever_long", 60000),
    { .name = "echo",
      .state_size = sizeof(echo_state),
      .init = echo_init,
      .step = echo_step },
    { .name = "adder",
      .state_size = sizeof(adder_state),
      .init = adder_init,
      .step = adder_step },
    { .name = "failer", .init = noop_init, .step = failer_step },
    { .name = "flaky_child",
      .state_size = sizeof(flaky_state),
      .init = flaky_init,
      .step = flaky_step },
    { .name = "blocker", .init = noop_init, .step = blocker_step },
    { .name = "walker",
      .state_size = sizeof(walk_state),
      .init = noop_init,
      .step = walker_step },
    { .name = "parent",
      .state_size = sizeof(parent_state),
      .init = parent_init,
      .step = parent_step },
    { .name = "once",
      .state_size = sizeof(once_state),
      .init = once_init,
      .step = once_step },
    { .name = "spawner",
      .state_size = sizeof(spawner_state),
      .init = spawner_init,
      .step = spawner_step },
};
#define N_TYPES (sizeof types / sizeof types[0])

/* ---- user commands ------------------------------------------------------- */

#define CMD_FLAKY 300
#define CMD_REFUSE 301

/* CMD_FLAKY, args an int k: the first k calls of the case answer -EIO
 * "flaky failure N" (N: the call's number), later ones answer N. */
static int cmd_flaky(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    int k = atomic_fetch_add(&cmd_calls, 1) + 1;
    if (k <= 16)
        atomic_store(&call_ns[k - 1], tx_now_ns());
    int64_t fail;
    if (sx_payload_get_int(args, &fail) != 0) {
        sx_complete(done, nil, SX_EPROTO, "flaky: args must be an int");
        return 0;
    }
    if (k <= fail) {
        char msg[64];
        snprintf(msg, sizeof msg, "flaky failure %d", k);
        sx_complete(done, nil, -EIO, msg);
        return 0;
    }
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_complete(done, sx_payload_int(b, k), 0, NULL);
    return 0;
}

/* CMD_REFUSE: counted, and answered SX_EINVAL "bad arg". */
static int cmd_refuse(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                      sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag, (void)args;
    atomic_fetch_add(&cmd_calls, 1);
    sx_complete(done, nil, SX_EINVAL, "bad arg");
    return 0;
}

/* ---- the fixture --------------------------------------------------------- */

static sx_engine *up(unsigned workers)
{
    reset();
    sx_engine_config cfg = { .workers = workers };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, types, N_TYPES);
    tx_engine_command(e, CMD_FLAKY, "flaky", cmd_flaky, NULL);
    tx_engine_command(e, CMD_REFUSE, "refuse", cmd_refuse, NULL);
    tx_engine_start(e);
    return e;
}

/* Without a state store the answer comes before submit_async returns. */
static void on_answer(void *user, int rc, sx_pid pid, bool existing,
                      const char *msg)
{
    (void)existing, (void)msg;
    CHECK_RC(rc, 0);
    *(sx_pid *)user = pid;
}

static sx_pid submit0(sx_engine *e, const char *type)
{
    sx_pid pid = SX_PID_NONE;
    CHECK_RC(sx_engine_submit(e, type, "run", NULL, 0, &pid), 0);
    return pid;
}

/* type with no inputs and opts.deadline_ms = deadline_ms. */
static sx_pid submit_dl(sx_engine *e, const char *type, const sx_payload *in,
                        size_t n, int64_t deadline_ms)
{
    sx_submit_opts o = { .deadline_ms = deadline_ms };
    sx_pid pid = SX_PID_NONE;
    CHECK_RC(sx_engine_submit_async(e, type, "run", in, n, &o, on_answer, &pid),
             0);
    return pid;
}

/* A "once" of cmd with args, opts (nil: none) and flags. */
static sx_pid once(sx_engine *e, uint16_t cmd, sx_payload args, sx_payload opts,
                   int flags)
{
    uint8_t cb[SX_PAYLOAD_INT_MAX], fb[SX_PAYLOAD_INT_MAX];
    sx_payload in[4] = { sx_payload_int(cb, cmd), args, opts,
                         sx_payload_int(fb, flags) };
    sx_pid pid = SX_PID_NONE;
    CHECK_RC(sx_engine_submit(e, "once", "run", in, 4, &pid), 0);
    return pid;
}

/* Packs fmt into pk (sx_pack_init'ed here; the caller finis it). */
static sx_payload packf(sx_pack *pk, const char *fmt, ...)
{
    sx_pack_init(pk);
    va_list ap;
    va_start(ap, fmt);
    int rc = sx_pack_vfmt(pk, fmt, ap);
    va_end(ap);
    CHECK_RC(rc, 0);
    return sx_pack_payload(pk);
}

static sx_result wait_r(sx_engine *e, sx_pid pid)
{
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pid, WAIT_MS, &r), 0);
    return r;
}

/* Fails unless r ended with error and (msg not NULL) the message msg. */
static void check_end_at(int line, const sx_result *r, int error,
                         const char *msg)
{
    if (r->error != error)
        SX_FAILF("line %d: ended %s (\"%s\"), not %s", line,
                 sx_errname(r->error), r->error_msg ? r->error_msg : "(null)",
                 sx_errname(error));
    if (msg != NULL && (r->error_msg == NULL || strcmp(r->error_msg, msg) != 0))
        SX_FAILF("line %d: %s with \"%s\", not \"%s\"", line,
                 sx_errname(r->error), r->error_msg ? r->error_msg : "(null)",
                 msg);
}
#define check_end(r, error, msg) check_end_at(__LINE__, r, error, msg)

/* Waits for pid and checks its end (check_end). */
static void wait_end_at(int line, sx_engine *e, sx_pid pid, int error,
                        const char *msg)
{
    sx_result r = wait_r(e, pid);
    check_end_at(line, &r, error, msg);
    sx_result_free(&r);
}
#define wait_end(e, pid, error, msg) wait_end_at(__LINE__, e, pid, error, msg)

/* Fails unless s starts with prefix. */
#define CHECK_PREFIX(s, prefix)                                                \
    do {                                                                       \
        const char *s_ = (s), *p_ = (prefix);                                  \
        if (s_ == NULL || strncmp(s_, p_, strlen(p_)) != 0)                    \
            SX_FAILF("\"%s\" does not start with \"%s\"", s_ ? s_ : "(null)",  \
                     p_);                                                      \
    } while (0)

/* Waits for pid, which must finish DONE with an int; returns it. */
static int64_t wait_int(sx_engine *e, sx_pid pid)
{
    return tx_wait_int(e, pid, WAIT_MS);
}

/* Whether pid is listed live. */
static bool listed(sx_engine *e, sx_pid pid)
{
    sx_process_info info[64];
    int n = sx_engine_list(e, info, 64);
    for (int i = 0; i < n; i++)
        if (sx_pid_eq(info[i].pid, pid))
            return true;
    return false;
}

/* ---- 1. init's error message --------------------------------------------- */

static void t_init_error(void)
{
    sx_engine *e = up(2);
    sx_pack pk;
    uint8_t ib[SX_PAYLOAD_INT_MAX];
    sx_payload in[2] = { sx_payload_int(ib, 1), packf(&pk, "s", "x") };
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "picky", "run", in, 2, &pid), SX_EINVAL);
    CHECK_STR(sx_engine_init_error(), "input 2 must be an int, got str");
    /* A refusal without a message: "", not the one before. */
    CHECK_RC(sx_engine_submit(e, "picky", "plain", in, 2, &pid), SX_EINVAL);
    CHECK_STR(sx_engine_init_error(), "");
    CHECK_RC(sx_engine_submit(e, "picky", "run", in, 2, &pid), SX_EINVAL);
    CHECK_STR(sx_engine_init_error(), "input 2 must be an int, got str");
    /* A message given for another code than init returned is none, and
     * is not left for a later refusal either. */
    CHECK_RC(sx_engine_submit(e, "picky", "half", in, 2, &pid), SX_EPROTO);
    CHECK_STR(sx_engine_init_error(), "");
    CHECK_RC(sx_engine_submit(e, "picky", "plain", in, 2, &pid), SX_EINVAL);
    CHECK_STR(sx_engine_init_error(), "");
    /* Nor is the message of an init that went on to succeed. */
    CHECK_RC(sx_engine_submit(e, "picky", "mind", in, 2, &pid), 0);
    tx_wait_done(e, pid, WAIT_MS, NULL);
    CHECK_RC(sx_engine_submit(e, "picky", "plain", in, 2, &pid), SX_EINVAL);
    CHECK_STR(sx_engine_init_error(), "");

    /* sx_submit_opts.init_error: the message, cut to its room. */
    char buf[64];
    sx_submit_opts o = { .init_error = buf, .init_error_cap = sizeof buf };
    memset(buf, 'z', sizeof buf);
    CHECK_RC(
        sx_engine_submit_async(e, "picky", "run", in, 2, &o, on_answer, &pid),
        SX_EINVAL);
    CHECK_STR(buf, "input 2 must be an int, got str");
    CHECK_STR(sx_engine_init_error(), "input 2 must be an int, got str");
    o.init_error_cap = 6;
    CHECK_RC(
        sx_engine_submit_async(e, "picky", "run", in, 2, &o, on_answer, &pid),
        SX_EINVAL);
    CHECK_STR(buf, "input");
    o.init_error_cap = sizeof buf;
    memset(buf, 'z', sizeof buf);
    CHECK_RC(
        sx_engine_submit_async(e, "picky", "plain", in, 2, &o, on_answer, &pid),
        SX_EINVAL);
    CHECK_STR(buf, "");
    /* A submit that fails before init runs: no init message either. */
    CHECK_RC(
        sx_engine_submit_async(e, "picky", "run", in, 2, &o, on_answer, &pid),
        SX_EINVAL);
    memset(buf, 'z', sizeof buf);
    CHECK_RC(
        sx_engine_submit_async(e, "nosuch", "run", in, 2, &o, on_answer, &pid),
        SX_EUNKNOWN_TYPE);
    CHECK_STR(buf, "");
    CHECK_RC(sx_engine_submit_async(e, "picky", "nomethod", in, 2, &o,
                                    on_answer, &pid),
             SX_EUNKNOWN_METHOD);
    CHECK_STR(buf, "");
    /* ... and a submit that succeeds leaves the buffer alone. */
    memset(buf, 'z', sizeof buf);
    CHECK_RC(
        sx_engine_submit_async(e, "picky", "mind", in, 2, &o, on_answer, &pid),
        0);
    CHECK(buf[0] == 'z');
    tx_wait_done(e, pid, WAIT_MS, NULL);

    /* Inside a process: a spawn-wait and a spawn of the refused type
     * answer init's code and message. */
    sx_pack a;
    pid = once(e, SX_CMD_SPAWN_WAIT,
               packf(&a, "[s, s, [i, s]]", "picky", "run", 1, "x"), nil, 0);
    wait_end(e, pid, SX_EINVAL, "input 2 must be an int, got str");
    pid = once(e, SX_CMD_SPAWN, sx_pack_payload(&a), nil, 0);
    wait_end(e, pid, SX_EINVAL, "input 2 must be an int, got str");
    sx_pack_fini(&a);
    pid = once(e, SX_CMD_SPAWN_WAIT,
               packf(&a, "[s, s, [i, i]]", "picky", "run", 1, 2), nil, 0);
    tx_wait_done(e, pid, WAIT_MS, NULL);
    sx_pack_fini(&a);
    sx_pack_fini(&pk);
    CHECK_EQ_U64(tx_engine_stats(e).live, 0);
    tx_engine_down(e);
}

/* On one worker: a spawn refused without a message (init gave none, or
 * never ran) does not answer with the message of an earlier refusal on
 * that worker, but with its code's own text. */
static void t_init_error_stale(void)
{
    sx_engine *e = up(1);
    sx_pack a;
    static const struct {
        const char *type, *method;
        int error;
        const char *msg;
    } seq_[] = {
        { "picky", "run", SX_EINVAL, "input 2 must be an int, got str" },
        { "nosuch", "run", SX_EUNKNOWN_TYPE, NULL },
        { "picky", "run", SX_EINVAL, "input 2 must be an int, got str" },
        { "picky", "nomethod", SX_EUNKNOWN_METHOD, NULL },
        { "picky", "run", SX_EINVAL, "input 2 must be an int, got str" },
        { "picky", "plain", SX_EINVAL, NULL },
        { "picky", "half", SX_EPROTO, NULL },
        { "picky", "plain", SX_EINVAL, NULL },
    };
    for (size_t i = 0; i < sizeof seq_ / sizeof seq_[0]; i++) {
        printf("spawn-wait %s.%s\n", seq_[i].type, seq_[i].method);
        sx_pid pid = once(
            e, SX_CMD_SPAWN_WAIT,
            packf(&a, "[s, s, [i, s]]", seq_[i].type, seq_[i].method, 1, "x"),
            nil, 0);
        /* No message: the code's own text. */
        wait_end(e, pid, seq_[i].error,
                 seq_[i].msg ? seq_[i].msg : sx_strerror(seq_[i].error));
        sx_pack_fini(&a);
    }
    tx_engine_down(e);
}

/* ---- 2. sx_cancelled ----------------------------------------------------- */

static void t_cancelled(void)
{
    sx_engine *e = up(2);
    sx_pid p = submit0(e, "forever");
    CHECK_RC(sx_engine_cancel(e, p, "user asked"), 0);
    wait_end(e, p, SX_ECANCELLED, "user asked");
    sx_engine_stats st = tx_engine_stats(e);
    CHECK_EQ_U64(st.cancelled, 1);
    CHECK_EQ_U64(st.failed, 0);
    CHECK_EQ_U64(st.completed, 0);
    CHECK_EQ_U64(st.terminated, 0);
    /* No reason: "cancelled". */
    p = submit0(e, "forever");
    CHECK_RC(sx_engine_cancel(e, p, NULL), 0);
    wait_end(e, p, SX_ECANCELLED, "cancelled");
    /* The cancel command, from a process, with its reason. */
    p = submit0(e, "forever");
    sx_pack a;
    sx_pid c =
        once(e, SX_CMD_CANCEL, packf(&a, "[p, s]", p, "by a process"), nil, 0);
    sx_pack_fini(&a);
    tx_wait_done(e, c, WAIT_MS, NULL);
    wait_end(e, p, SX_ECANCELLED, "by a process");
    TX_WAIT_UNTIL(atomic_load(&fv_closes) == 3, WAIT_MS, 1000);
    st = tx_engine_stats(e);
    CHECK_EQ_U64(st.cancelled, 3);
    CHECK_EQ_U64(st.failed, 0);
    CHECK_EQ_U64(st.completed, 1); /* the "once" */
    tx_engine_down(e);
}

/* ---- 3. deadlines -------------------------------------------------------- */

/* Submits type (opts.deadline_ms = dl, 0: none) and checks that it ends
 * SX_ETIMEDOUT with "deadline of want ms passed", not before want ms. */
static void deadline_case(sx_engine *e, const char *type, int64_t dl,
                          int64_t want)
{
    char msg[64];
    snprintf(msg, sizeof msg, "deadline of %lld ms passed", (long long)want);
    double t0 = sx_test_now_ms();
    sx_pid p = submit_dl(e, type, NULL, 0, dl);
    sx_result r = wait_r(e, p);
    double ms = sx_test_now_ms() - t0;
    printf("%s, deadline %lld: ended after %.1f ms\n", type, (long long)dl, ms);
    check_end(&r, SX_ETIMEDOUT, msg);
    sx_result_free(&r);
    /* Never early (1 ms for the loop timer's rounding); late only by as
     * much as a loaded machine may delay it. */
    if (ms < (double)want - 1 || ms > (double)want + 5000)
        SX_FAILF("%s ended after %.1f ms, deadline %lld ms", type, ms,
                 (long long)want);
}

static void t_deadline_type(void)
{
    sx_engine *e = up(2);
    deadline_case(e, "forever_dl", 0, 250);
    TX_WAIT_UNTIL(atomic_load(&fv_closes) == 1, WAIT_MS, 1000);
    sx_engine_stats st = tx_engine_stats(e);
    CHECK_EQ_U64(st.deadlines, 1);
    CHECK_EQ_U64(st.failed, 1); /* counted in failed too */
    CHECK_EQ_U64(st.cancelled, 0);
    CHECK_EQ_U64(st.terminated, 0);
    CHECK_EQ_U64(st.live, 0);
    TX_WAIT_UNTIL(tx_engine_stats(e).io_inflight == 0, WAIT_MS, 1000);
    tx_engine_down_io(e);
}

static void t_deadline_submit(void)
{
    sx_engine *e = up(2);
    /* The submit's overrides the type's, longer or shorter. */
    deadline_case(e, "forever_dl", 700, 700);
    deadline_case(e, "forever_long", 150, 150);
    /* A type without one gets the submit's. */
    deadline_case(e, "forever", 200, 200);
    CHECK_EQ_U64(tx_engine_stats(e).deadlines, 3);
    TX_WAIT_UNTIL(atomic_load(&fv_closes) == 3, WAIT_MS, 1000);
    tx_engine_down_io(e);
}

/* Ends in time: normally, and its deadline's op goes with it (io_inflight
 * back to 0, not waiting out its minute). */
static void t_deadline_in_time(void)
{
    sx_engine *e = up(2);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_pid p = submit0(e, "forever_long");
    TX_WAIT_UNTIL(tx_engine_stats(e).io_inflight == 1, WAIT_MS, 1000);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, p, "end", sx_payload_int(b, 5)), 0);
    CHECK_EQ_INT(wait_int(e, p), 5);
    TX_WAIT_UNTIL(tx_engine_stats(e).io_inflight == 0, 5000, 1000);

    p = submit_dl(e, "forever", NULL, 0, 60000);
    TX_WAIT_UNTIL(tx_engine_stats(e).io_inflight == 1, WAIT_MS, 1000);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, p, "end", sx_payload_int(b, 6)), 0);
    CHECK_EQ_INT(wait_int(e, p), 6);
    TX_WAIT_UNTIL(tx_engine_stats(e).io_inflight == 0, 5000, 1000);

    /* Ended otherwise (terminated, cancelled): the same. */
    p = submit0(e, "forever_long");
    TX_WAIT_UNTIL(tx_engine_stats(e).io_inflight == 1, WAIT_MS, 1000);
    CHECK_RC(sx_engine_terminate(e, p), 0);
    wait_end(e, p, SX_ETERMINATED, "terminated");
    TX_WAIT_UNTIL(tx_engine_stats(e).io_inflight == 0, 5000, 1000);
    p = submit0(e, "forever_long");
    CHECK_RC(sx_engine_cancel(e, p, "bye"), 0);
    wait_end(e, p, SX_ECANCELLED, "bye");
    TX_WAIT_UNTIL(tx_engine_stats(e).io_inflight == 0, 5000, 1000);

    CHECK_EQ_U64(tx_engine_stats(e).deadlines, 0);
    tx_engine_down_io(e);
}

/* A deadline fires while the process has children: those spawned with
 * scope cancel or terminate end with it; scope none runs on. A spawn's
 * own deadline (spawn option) applies to its child. */
static void t_deadline_children(void)
{
    sx_engine *e = up(2);
    uint8_t b[4][SX_PAYLOAD_INT_MAX];
    sx_payload in[4] = { sx_payload_int(b[0], 0),
                         sx_payload_int(b[1], SX_SCOPE_CANCEL),
                         sx_payload_int(b[2], SX_SCOPE_TERMINATE),
                         sx_payload_int(b[3], SX_SCOPE_NONE) };
    sx_pid par = submit_dl(e, "parent", in, 4, 400);
    TX_WAIT_UNTIL(atomic_load(&kids_answered) == 3, WAIT_MS, 1000);
    wait_end(e, par, SX_ETIMEDOUT, "deadline of 400 ms passed");
    wait_end(e, kid(0), SX_ECANCELLED, "parent ended: timed out");
    wait_end(e, kid(1), SX_ETERMINATED, "terminated");
    sx_result r;
    CHECK_RC(sx_engine_wait(e, kid(2), 200, &r), SX_ETIMEDOUT);
    CHECK(listed(e, kid(2)));
    CHECK_RC(sx_engine_terminate(e, kid(2)), 0);
    wait_end(e, kid(2), SX_ETERMINATED, "terminated");
    CHECK_EQ_U64(tx_engine_stats(e).deadlines, 1);

    /* The spawn option: the child's deadline, over its type's (none, or
     * 250 ms); 0 is the type's. */
    sx_pack a;
    sx_pid p = once(
        e, SX_CMD_SPAWN_WAIT,
        packf(&a, "[s, s, [], {s: i}]", "forever", "run", "deadline_ms", 200),
        nil, 0);
    sx_pack_fini(&a);
    wait_end(e, p, SX_ETIMEDOUT, "deadline of 200 ms passed");
    p = once(
        e, SX_CMD_SPAWN_WAIT,
        packf(&a, "[s, s, [], {s: i}]", "forever_dl", "run", "deadline_ms", 0),
        nil, 0);
    sx_pack_fini(&a);
    wait_end(e, p, SX_ETIMEDOUT, "deadline of 250 ms passed");
    p = once(e, SX_CMD_SPAWN_WAIT,
             packf(&a, "[s, s, [], {s: i}]", "forever_dl", "run", "deadline_ms",
                   600),
             nil, 0);
    sx_pack_fini(&a);
    wait_end(e, p, SX_ETIMEDOUT, "deadline of 600 ms passed");
    CHECK_EQ_U64(tx_engine_stats(e).deadlines, 4);
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);
    tx_engine_down_io(e);
}

/* A negative deadline is refused everywhere. */
static void t_deadline_negative(void)
{
    sx_engine *e = tx_engine_new(&(sx_engine_config){ .workers = 1 });
    sx_process_type bad = types[1];
    bad.name = "bad_deadline";
    bad.deadline_ms = -5;
    CHECK_RC(sx_engine_register(e, &bad), SX_EINVAL);
    sx_engine_free(e);

    e = up(2);
    sx_submit_opts o = { .deadline_ms = -1 };
    sx_pid pid = SX_PID_NONE;
    CHECK_RC(sx_engine_submit_async(e, "forever", "run", NULL, 0, &o, on_answer,
                                    &pid),
             SX_EINVAL);
    CHECK_EQ_U64(tx_engine_stats(e).submitted, 0);
    CHECK_EQ_U64(tx_engine_stats(e).live, 0);
    CHECK_EQ_INT(fv_count(), 0); /* refused before init */
    sx_pack a;
    static const uint16_t cmds[] = { SX_CMD_SPAWN, SX_CMD_SPAWN_WAIT };
    static const char *const msgs[] = {
        "spawn: deadline_ms must be an integer from 0 to 2^40 (0: the type's)",
        "spawn-wait: deadline_ms must be an integer from 0 to 2^40 (0: the "
        "type's)"
    };
    for (int i = 0; i < 2; i++) {
        pid = once(e, cmds[i],
                   packf(&a, "[s, s, [], {s: i}]", "forever", "run",
                         "deadline_ms", -1),
                   nil, 0);
        sx_pack_fini(&a);
        wait_end(e, pid, SX_EINVAL, msgs[i]);
    }
    CHECK_EQ_INT(fv_count(), 0);
    tx_engine_down(e);
}

/* ---- 4. scopes ----------------------------------------------------------- */

static void t_scope_restart(void);

/* A "parent" with end and the scopes; returns its PID once every child
 * is answered. */
static sx_pid parent_with(sx_engine *e, int end, const int *scopes, int n)
{
    uint8_t b[7][SX_PAYLOAD_INT_MAX];
    sx_payload in[7];
    in[0] = sx_payload_int(b[0], end);
    for (int i = 0; i < n; i++)
        in[i + 1] = sx_payload_int(b[i + 1], scopes[i]);
    atomic_store(&kids_answered, 0);
    sx_pid p = SX_PID_NONE;
    CHECK_RC(sx_engine_submit(e, "parent", "run", in, (size_t)n + 1, &p), 0);
    TX_WAIT_UNTIL(atomic_load(&kids_answered) == n, WAIT_MS, 1000);
    return p;
}

/* A supervised job whose attempt fails: its scoped children get that
 * attempt's end at once (terminated, or "parent ended: failed"), not
 * only at the job's last end, a backoff later. */
static void t_scope_restart(void)
{
    sx_engine *e = up(2);
    uint8_t b[3][SX_PAYLOAD_INT_MAX];
    sx_payload in[3] = { sx_payload_int(b[0], 2),
                         sx_payload_int(b[1], SX_SCOPE_TERMINATE),
                         sx_payload_int(b[2], SX_SCOPE_CANCEL) };
    sx_restart_policy pol = { .mode = SX_RESTART_ON_FAILURE,
                              .max_restarts = 1,
                              .backoff_min_ms = 3000,
                              .backoff_max_ms = 3000 };
    sx_submit_opts o = { .restart = &pol };
    sx_pid pid = SX_PID_NONE;
    atomic_store(&kids_answered, 0);
    CHECK_RC(
        sx_engine_submit_async(e, "parent", "run", in, 3, &o, on_answer, &pid),
        0);
    TX_WAIT_UNTIL(atomic_load(&kids_answered) == 2, WAIT_MS, 1000);
    sx_pid k0 = kid(0), k1 = kid(1);
    /* Within the 3 s backoff: the first attempt's children have ended. */
    sx_result r;
    CHECK_RC(sx_engine_wait(e, k0, 2000, &r), 0);
    CHECK_RC(r.error, SX_ETERMINATED);
    sx_result_free(&r);
    CHECK_RC(sx_engine_wait(e, k1, 2000, &r), 0);
    CHECK_RC(r.error, SX_ECANCELLED);
    CHECK_STR(r.error_msg, "parent ended: failed");
    sx_result_free(&r);
    /* The second attempt fails too: the job's end, its children's. */
    CHECK_RC(sx_engine_wait(e, pid, 10000, &r), 0);
    CHECK_RC(r.error, SX_ERESTART_LIMIT);
    sx_result_free(&r);
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);
    tx_engine_down(e);
}

static void t_scope(void)
{
    sx_engine *e = up(2);
    /* cancel: the parent finishes DONE; each child gets "parent ended". */
    static const int cancel2[] = { SX_SCOPE_CANCEL, SX_SCOPE_CANCEL };
    sx_pid p = parent_with(e, 1, cancel2, 2);
    CHECK_EQ_INT(wait_int(e, p), 2);
    wait_end(e, kid(0), SX_ECANCELLED, "parent ended");
    wait_end(e, kid(1), SX_ECANCELLED, "parent ended");
    CHECK_EQ_U64(tx_engine_stats(e).cancelled, 2);

    /* terminate. */
    static const int term1[] = { SX_SCOPE_TERMINATE };
    p = parent_with(e, 1, term1, 1);
    CHECK_EQ_INT(wait_int(e, p), 1);
    wait_end(e, kid(0), SX_ETERMINATED, "terminated");

    /* none: they run on after their parent. */
    static const int none2[] = { SX_SCOPE_NONE, SX_SCOPE_NONE };
    p = parent_with(e, 1, none2, 2);
    CHECK_EQ_INT(wait_int(e, p), 2);
    tx_sleep_ms(100);
    sx_result r;
    for (int i = 0; i < 2; i++) {
        CHECK_RC(sx_engine_wait(e, kid(i), 100, &r), SX_ETIMEDOUT);
        CHECK(listed(e, kid(i)));
    }
    CHECK_EQ_U64(tx_engine_stats(e).live, 2);
    for (int i = 0; i < 2; i++) {
        CHECK_RC(sx_engine_terminate(e, kid(i)), 0);
        wait_end(e, kid(i), SX_ETERMINATED, "terminated");
    }

    /* The reason says how the parent ended. */
    static const int cancel1[] = { SX_SCOPE_CANCEL };
    p = parent_with(e, 0, cancel1, 1);
    CHECK_RC(sx_engine_cancel(e, p, "go away"), 0);
    wait_end(e, p, SX_ECANCELLED, "go away");
    wait_end(e, kid(0), SX_ECANCELLED, "parent ended: cancelled");
    p = parent_with(e, 0, cancel1, 1);
    CHECK_RC(sx_engine_terminate(e, p), 0);
    wait_end(e, p, SX_ETERMINATED, "terminated");
    wait_end(e, kid(0), SX_ECANCELLED, "parent ended: terminated");
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);

    /* A scope that is not one of the three. */
    sx_pack a;
    static const char *const bad[] = { "[s, s, [], {s: s}]",
                                       "[s, s, [], {s: i}]" };
    for (int i = 0; i < 2; i++) {
        p = i == 0
                ? once(e, SX_CMD_SPAWN,
                       packf(&a, bad[0], "forever", "run", "scope", "all"), nil,
                       0)
                : once(e, SX_CMD_SPAWN,
                       packf(&a, bad[1], "forever", "run", "scope", 1), nil, 0);
        sx_pack_fini(&a);
        wait_end(e, p, SX_EINVAL,
                 "spawn: scope must be \"none\", \"cancel\" or \"terminate\"");
    }
    CHECK_EQ_INT(fv_count(), 7);
    tx_engine_down(e);
}

/* ---- 5. notify ----------------------------------------------------------- */

static void spawned_get(sx_pid *pid, sx_pid *from, uint64_t *tag)
{
    pthread_mutex_lock(&rec_mu);
    *pid = spawned_pid;
    *from = spawned_from;
    *tag = spawned_tag;
    pthread_mutex_unlock(&rec_mu);
}

static void t_notify(void)
{
    sx_engine *e = up(2);
    sx_pack a;
    sx_pid pid, from;
    uint64_t tag;

    /* The @spawned comes before the answer, and names the child. */
    sx_pid p =
        once(e, SX_CMD_SPAWN_WAIT,
             packf(&a, "[s, s, [i], {s: b}]", "echo", "run", 5, "notify", 1),
             nil, 0);
    sx_pack_fini(&a);
    CHECK_EQ_INT(wait_int(e, p), 5);
    CHECK(atomic_load(&spawned_at) > 0);
    CHECK(atomic_load(&spawned_at) < atomic_load(&completed_at));
    spawned_get(&pid, &from, &tag);
    CHECK_EQ_U64(tag, 1);
    CHECK(sx_pid_eq(pid, from));
    tx_wait_done(e, pid, WAIT_MS, NULL); /* the echo that finished */

    /* The parent cancels the child it was told of: the spawn-wait
     * answers with the child's end. */
    reset();
    p = once(e, SX_CMD_SPAWN_WAIT,
             packf(&a, "[s, s, [], {s: b}]", "forever", "run", "notify", 1),
             nil, 1);
    sx_pack_fini(&a);
    wait_end(e, p, SX_ECANCELLED, "stop it");
    CHECK(atomic_load(&spawned_at) > 0 &&
          atomic_load(&spawned_at) < atomic_load(&completed_at));
    spawned_get(&pid, &from, &tag);
    CHECK_EQ_U64(tag, 1);
    CHECK(sx_pid_eq(pid, fv_pid(0)));
    CHECK_EQ_INT(fv_count(), 1);
    wait_end(e, pid, SX_ECANCELLED, "stop it");

    /* With a retry: the @spawned still names the child (it comes from the
     * helper in between), with the parent's tag; a cancel is not retried. */
    reset();
    p = once(e, SX_CMD_SPAWN_WAIT,
             packf(&a, "[s, s, [], {s: b, s: {s: i, s: i, s: i}}]", "forever",
                   "run", "notify", 1, "retry", "max_restarts", 2,
                   "backoff_min_ms", 1, "backoff_max_ms", 2),
             nil, 1);
    sx_pack_fini(&a);
    wait_end(e, p, SX_ECANCELLED, "stop it");
    spawned_get(&pid, &from, &tag);
    CHECK_EQ_U64(tag, 1);
    CHECK(sx_pid_eq(pid, fv_pid(0)));
    CHECK(!sx_pid_eq(from, pid)); /* the @retry */
    CHECK_EQ_INT(fv_count(), 1);
    wait_end(e, pid, SX_ECANCELLED, "stop it");

    /* notify and retry are spawn-wait's. */
    p = once(e, SX_CMD_SPAWN,
             packf(&a, "[s, s, [], {s: b}]", "forever", "run", "notify", 1),
             nil, 0);
    sx_pack_fini(&a);
    wait_end(e, p, SX_EINVAL,
             "spawn: retry and notify are options of spawn-wait");
    p = once(e, SX_CMD_SPAWN_WAIT,
             packf(&a, "[s, s, [], {s: i}]", "forever", "run", "notify", 1),
             nil, 0);
    sx_pack_fini(&a);
    wait_end(e, p, SX_EINVAL, "spawn-wait: notify must be a bool");
    p = once(e, SX_CMD_SPAWN_WAIT,
             packf(&a, "[s, s, [], {s: i}]", "forever", "run", "colour", 1),
             nil, 0);
    sx_pack_fini(&a);
    wait_end(e, p, SX_EINVAL, "spawn-wait: unknown option \"colour\"");
    CHECK_EQ_INT(fv_count(), 1);
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);
    tx_engine_down(e);
}

/* ---- 6. spawn-all -------------------------------------------------------- */

/* Checks element i of a spawn-all answer: an int value v (error 0), or
 * error and message. */
static void outcome_int(sx_payload all, size_t i, int64_t v)
{
    sx_outcome o;
    CHECK_RC(sx_outcome_at(all, i, &o), 0);
    if (o.error != 0)
        SX_FAILF("element %zu: %s (%.*s)", i, sx_errname(o.error),
                 (int)o.message.len, o.message.ptr ? o.message.ptr : "");
    int64_t got = -1;
    CHECK_RC(sx_payload_get_int(o.value, &got), 0);
    CHECK_EQ_INT(got, v);
}

static void outcome_err(sx_payload all, size_t i, int error, const char *msg)
{
    sx_outcome o;
    CHECK_RC(sx_outcome_at(all, i, &o), 0);
    CHECK_RC(o.error, error);
    if (o.message.len != strlen(msg) ||
        memcmp(o.message.ptr, msg, o.message.len) != 0)
        SX_FAILF("element %zu: \"%.*s\", not \"%s\"", i, (int)o.message.len,
                 o.message.ptr ? o.message.ptr : "", msg);
}

static void t_spawn_all(void)
{
    sx_engine *e = up(2);
    sx_pack pk;
    sx_pack_init(&pk);
    CHECK_RC(sx_spawn_all_begin(&pk, 6, NULL), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "echo", "run", "i", 7), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "echo", "run", "s", "hi"), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "failer", "run", NULL), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "nosuch", "run", ""), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "adder", "run", "i, i", 20, 22), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "picky", "run", "i, s", 1, "x"), 0);
    sx_pid p = once(e, SX_CMD_SPAWN_ALL, sx_pack_payload(&pk), nil, 0);
    sx_pack_fini(&pk);
    sx_result r = wait_r(e, p);
    check_end(&r, 0, NULL);
    CHECK_EQ_U64(sx_get_len(r.value, NULL), 6);
    outcome_int(r.value, 0, 7);
    sx_outcome o;
    CHECK_RC(sx_outcome_at(r.value, 1, &o), 0);
    char s[8];
    CHECK_RC(sx_payload_get_str(o.value, s, sizeof s), 0);
    CHECK_STR(s, "hi");
    outcome_err(r.value, 2, SX_EFAILED, "nope");
    outcome_err(r.value, 3, SX_EUNKNOWN_TYPE, sx_strerror(SX_EUNKNOWN_TYPE));
    outcome_int(r.value, 4, 42);
    outcome_err(r.value, 5, SX_EINVAL, "input 2 must be an int, got str");
    CHECK_RC(sx_outcome_at(r.value, 6, &o), SX_ENOTFOUND);
    sx_result_free(&r);

    /* No children: []. */
    sx_pack_init(&pk);
    CHECK_RC(sx_spawn_all_begin(&pk, 0, NULL), 0);
    p = once(e, SX_CMD_SPAWN_ALL, sx_pack_payload(&pk), nil, 0);
    sx_pack_fini(&pk);
    r = wait_r(e, p);
    check_end(&r, 0, NULL);
    sx_unpack u;
    uint32_t n = 99;
    sx_unpack_init(&u, r.value);
    CHECK_RC(sx_unpack_array(&u, &n), 0);
    CHECK_EQ_U64(n, 0);
    CHECK(sx_unpack_done(&u));
    sx_result_free(&r);

    /* A child's own options (a deadline) over the shared ones. */
    sx_pack_init(&pk);
    sx_spawn_opts so = { .scope = SX_SCOPE_TERMINATE };
    CHECK_RC(sx_spawn_all_begin(&pk, 2, &so), 0);
    CHECK_RC(sx_pack_fmt(&pk, "[s, s, [], {s: i}]", "forever", "run",
                         "deadline_ms", 150),
             0);
    CHECK_RC(sx_spawn_all_child(&pk, "echo", "run", "i", 3), 0);
    p = once(e, SX_CMD_SPAWN_ALL, sx_pack_payload(&pk), nil, 0);
    sx_pack_fini(&pk);
    r = wait_r(e, p);
    check_end(&r, 0, NULL);
    outcome_err(r.value, 0, SX_ETIMEDOUT, "deadline of 150 ms passed");
    outcome_int(r.value, 1, 3);
    sx_result_free(&r);
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);

    /* ... whole: the shared scope does not reach a child with its own
     * options (docs/COMMANDS.md); the other child ends with the parent. */
    reset();
    sx_pack_init(&pk);
    CHECK_RC(sx_spawn_all_begin(&pk, 2, &so), 0);
    CHECK_RC(sx_pack_fmt(&pk, "[s, s, [], {s: i}]", "forever", "run",
                         "deadline_ms", 60000),
             0);
    CHECK_RC(sx_spawn_all_child(&pk, "forever", "run", NULL), 0);
    p = once(e, SX_CMD_SPAWN_ALL, sx_pack_payload(&pk), nil, 0);
    sx_pack_fini(&pk);
    TX_WAIT_UNTIL(fv_count() == 2, WAIT_MS, 1000);
    CHECK_RC(sx_engine_cancel(e, p, "enough"), 0);
    wait_end(e, p, SX_ECANCELLED, "enough");
    /* The helper spawns them in child order, on one worker: inits too. */
    sx_pid own = fv_pid(0), shared = fv_pid(1);
    wait_end(e, shared, SX_ETERMINATED, "terminated");
    tx_sleep_ms(100);
    CHECK(listed(e, own));
    CHECK_RC(sx_engine_terminate(e, own), 0);
    wait_end(e, own, SX_ETERMINATED, "terminated");
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);
    tx_engine_down(e);
}

static void t_spawn_all_bad(void)
{
    sx_engine *e = up(2);
    static const char *const map_msg =
        "spawn-all: args must be one map {children: [[type, method, "
        "[input...], opts]...], options...}";
    static const struct {
        const char *fmt;
        const char *msg;
    } bad[] = {
        { "i", NULL },
        { "{}", NULL },
        { "[s]", NULL },
        { "{s: s}", NULL },
        { "{s: [i]}", "spawn-all: child 0 must be [type, method, [input...], "
                      "opts]" },
        { "{s: i}", "spawn-all: children must be an array of at most 100000 "
                    "children" },
    };
    sx_pack a;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sx_payload args;
        switch (i) {
        case 0:
            args = packf(&a, bad[i].fmt, 5);
            break;
        case 2:
            args = packf(&a, bad[i].fmt, "children");
            break;
        case 3:
            args = packf(&a, bad[i].fmt, "scope", "cancel");
            break;
        case 4:
            args = packf(&a, bad[i].fmt, "children", 5);
            break;
        case 5:
            args = packf(&a, bad[i].fmt, "children", 5);
            break;
        default:
            args = packf(&a, bad[i].fmt);
            break;
        }
        printf("spawn-all args %zu: %s\n", i, bad[i].fmt);
        sx_pid p = once(e, SX_CMD_SPAWN_ALL, args, nil, 0);
        sx_pack_fini(&a);
        wait_end(e, p, SX_EINVAL, bad[i].msg ? bad[i].msg : map_msg);
    }
    /* Options are checked before any child starts. */
    sx_pid p = once(e, SX_CMD_SPAWN_ALL,
                    packf(&a, "{s: [[s, s, []]], s: i}", "children", "forever",
                          "run", "bogus", 1),
                    nil, 0);
    sx_pack_fini(&a);
    wait_end(e, p, SX_EINVAL, "spawn-all: unknown option \"bogus\"");
    p = once(e, SX_CMD_SPAWN_ALL,
             packf(&a, "{s: [[s, s, []]], s: i}", "children", "forever", "run",
                   "deadline_ms", -4),
             nil, 0);
    sx_pack_fini(&a);
    wait_end(e, p, SX_EINVAL,
             "spawn-all: deadline_ms must be an integer from 0 to 2^40 (0: the "
             "type's)");
    CHECK_EQ_INT(fv_count(), 0);
    /* The builders refuse misuse. */
    sx_pack pk;
    sx_pack_init(&pk);
    CHECK_RC(sx_spawn_all_begin(NULL, 1, NULL), SX_EINVAL);
    CHECK_RC(sx_spawn_all_begin(&pk, SX_SPAWN_ALL_MAX + 1, NULL), SX_EINVAL);
    sx_spawn_opts bad_dl = { .deadline_ms = -1 };
    CHECK_RC(sx_spawn_all_begin(&pk, 1, &bad_dl), SX_EINVAL);
    sx_spawn_opts bad_scope = { .scope = 3 };
    CHECK_RC(sx_spawn_all_begin(&pk, 1, &bad_scope), SX_EINVAL);
    CHECK_RC(sx_spawn_all_child(NULL, "echo", "run", ""), SX_EINVAL);
    CHECK_RC(sx_spawn_all_child(&pk, NULL, "run", ""), SX_EINVAL);
    CHECK_RC(sx_spawn_all_child(&pk, "echo", NULL, ""), SX_EINVAL);
    CHECK_RC(sx_spawn_all_child(&pk, "echo", "run", "i q", 1), SX_EINVAL);
    sx_pack_fini(&pk);
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);
    tx_engine_down(e);
}

/* Shared options: a retry makes a child that fails twice succeed; the
 * scope ends the children with the spawn-all's parent. */
static void t_spawn_all_opts(void)
{
    sx_engine *e = up(2);
    sx_pack pk;
    sx_restart_policy pol = { .mode = SX_RESTART_ON_FAILURE,
                              .max_restarts = 3,
                              .backoff_min_ms = 1,
                              .backoff_max_ms = 2 };
    sx_spawn_opts so = { .retry = &pol };
    sx_pack_init(&pk);
    CHECK_RC(sx_spawn_all_begin(&pk, 2, &so), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "flaky_child", "run", NULL), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "echo", "run", "i", 1), 0);
    sx_pid p = once(e, SX_CMD_SPAWN_ALL, sx_pack_payload(&pk), nil, 0);
    sx_pack_fini(&pk);
    sx_result r = wait_r(e, p);
    check_end(&r, 0, NULL);
    outcome_int(r.value, 0, 3);
    outcome_int(r.value, 1, 1);
    sx_result_free(&r);
    CHECK_EQ_INT(atomic_load(&flaky_inits), 3);

    /* Without the retry the failure is the answer. */
    atomic_store(&flaky_inits, 0);
    sx_pack_init(&pk);
    CHECK_RC(sx_spawn_all_begin(&pk, 1, NULL), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "flaky_child", "run", NULL), 0);
    p = once(e, SX_CMD_SPAWN_ALL, sx_pack_payload(&pk), nil, 0);
    sx_pack_fini(&pk);
    r = wait_r(e, p);
    check_end(&r, 0, NULL);
    outcome_err(r.value, 0, SX_EFAILED, "flaky child");
    sx_result_free(&r);
    CHECK_EQ_INT(atomic_load(&flaky_inits), 1);

    /* Scope cancel and terminate: the children end when the parent that
     * yielded the spawn-all does (the helper in between ends with it). */
    static const int scopes[] = { SX_SCOPE_CANCEL, SX_SCOPE_TERMINATE };
    for (int k = 0; k < 2; k++) {
        reset();
        so = (sx_spawn_opts){ .scope = scopes[k] };
        sx_pack_init(&pk);
        CHECK_RC(sx_spawn_all_begin(&pk, 2, &so), 0);
        CHECK_RC(sx_spawn_all_child(&pk, "forever", "run", NULL), 0);
        CHECK_RC(sx_spawn_all_child(&pk, "forever", "run", NULL), 0);
        p = once(e, SX_CMD_SPAWN_ALL, sx_pack_payload(&pk), nil, 0);
        sx_pack_fini(&pk);
        TX_WAIT_UNTIL(fv_count() == 2, WAIT_MS, 1000);
        CHECK_RC(sx_engine_cancel(e, p, "enough"), 0);
        wait_end(e, p, SX_ECANCELLED, "enough");
        for (int i = 0; i < 2; i++)
            if (k == 0)
                wait_end(e, fv_pid(i), SX_ECANCELLED,
                         "parent ended: terminated");
            else
                wait_end(e, fv_pid(i), SX_ETERMINATED, "terminated");
        TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);
    }
    /* Scope none: they run on. */
    reset();
    sx_pack_init(&pk);
    CHECK_RC(sx_spawn_all_begin(&pk, 1, NULL), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "forever", "run", NULL), 0);
    p = once(e, SX_CMD_SPAWN_ALL, sx_pack_payload(&pk), nil, 0);
    sx_pack_fini(&pk);
    TX_WAIT_UNTIL(fv_count() == 1, WAIT_MS, 1000);
    CHECK_RC(sx_engine_cancel(e, p, "enough"), 0);
    wait_end(e, p, SX_ECANCELLED, "enough");
    tx_sleep_ms(100);
    CHECK(listed(e, fv_pid(0)));
    CHECK_RC(sx_engine_terminate(e, fv_pid(0)), 0);
    wait_end(e, fv_pid(0), SX_ETERMINATED, "terminated");
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);
    tx_engine_down(e);
}

/* ---- 7. retries ---------------------------------------------------------- */

/* A "once" of CMD_FLAKY failing its first fail calls, with a retry of
 * max_restarts (< 0: none) and the backoff bounds. */
static sx_pid flaky_once(sx_engine *e, uint16_t cmd, int fail, int max,
                         int bmin, int bmax)
{
    sx_pack o;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload opts = nil;
    if (max >= 0)
        opts = packf(&o, "{s: i, s: i, s: i}", "max_restarts", max,
                     "backoff_min_ms", bmin, "backoff_max_ms", bmax);
    else
        sx_pack_init(&o);
    atomic_store(&cmd_calls, 0); /* this case's calls from here */
    sx_pid p = once(e, cmd, sx_payload_int(b, fail), opts, 0);
    sx_pack_fini(&o);
    return p;
}

static void t_retry_yield(void)
{
    sx_engine *e = up(2);
    /* Fails twice, then succeeds: the third call's answer. */
    sx_pid p = flaky_once(e, CMD_FLAKY, 2, 2, 1, 2);
    CHECK_EQ_INT(wait_int(e, p), 3);
    CHECK_EQ_INT(atomic_load(&cmd_calls), 3);
    /* Always fails: the last error, after 3 attempts. */
    p = flaky_once(e, CMD_FLAKY, 100, 2, 1, 2);
    wait_end(e, p, -EIO, "after 3 attempts: flaky failure 3");
    CHECK_EQ_INT(atomic_load(&cmd_calls), 3);
    /* No retry: the first error as it is. */
    p = flaky_once(e, CMD_FLAKY, 1, -1, 0, 0);
    wait_end(e, p, -EIO, "flaky failure 1");
    CHECK_EQ_INT(atomic_load(&cmd_calls), 1);
    /* SX_EINVAL is answered at once. */
    p = flaky_once(e, CMD_REFUSE, 0, 3, 1, 2);
    wait_end(e, p, SX_EINVAL, "bad arg");
    CHECK_EQ_INT(atomic_load(&cmd_calls), 1);
    /* The backoff: at least backoff_min_ms between attempts. */
    p = flaky_once(e, CMD_FLAKY, 2, 3, 100, 100);
    CHECK_EQ_INT(wait_int(e, p), 3);
    for (int k = 1; k < 3; k++) {
        double ms =
            (double)(atomic_load(&call_ns[k]) - atomic_load(&call_ns[k - 1])) /
            1e6;
        printf("backoff %d: %.1f ms\n", k, ms);
        if (ms < 99 || ms > 100 + 25 + 5000)
            SX_FAILF("attempt %d came %.1f ms after the one before", k + 1, ms);
    }
    /* A timeout per attempt, and retried: "after 2 attempts". */
    sx_pack o;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    double t0 = sx_test_now_ms();
    p = once(e, SX_CMD_SLEEP, sx_payload_int(b, 60000),
             packf(&o, "{s: i, s: i, s: i, s: i}", "timeout_ms", 50,
                   "max_restarts", 1, "backoff_min_ms", 1, "backoff_max_ms", 1),
             0);
    sx_pack_fini(&o);
    sx_result r = wait_r(e, p);
    check_end(&r, SX_ETIMEDOUT, NULL);
    CHECK_PREFIX(r.error_msg, "after 2 attempts: ");
    sx_result_free(&r);
    CHECK(sx_test_now_ms() - t0 >= 99);
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);
    tx_engine_down(e);
}

/* spawn-wait's retry option: the child is spawned again (init too). */
static void t_retry_spawn_wait(void)
{
    sx_engine *e = up(2);
    sx_pack a;
    sx_pid p = once(e, SX_CMD_SPAWN_WAIT,
                    packf(&a, "[s, s, [], {s: {s: i, s: i, s: i}}]",
                          "flaky_child", "run", "retry", "max_restarts", 3,
                          "backoff_min_ms", 1, "backoff_max_ms", 2),
                    nil, 0);
    sx_pack_fini(&a);
    CHECK_EQ_INT(wait_int(e, p), 3);
    CHECK_EQ_INT(atomic_load(&flaky_inits), 3);
    /* Runs out: the last failure (inits from -99 on all fail). */
    atomic_store(&flaky_inits, -100);
    p = once(e, SX_CMD_SPAWN_WAIT,
             packf(&a, "[s, s, [], {s: {s: i, s: i, s: i}}]", "flaky_child",
                   "run", "retry", "max_restarts", 1, "backoff_min_ms", 1,
                   "backoff_max_ms", 1),
             nil, 0);
    sx_pack_fini(&a);
    wait_end(e, p, SX_EFAILED, "after 2 attempts: flaky child");
    CHECK_EQ_INT(atomic_load(&flaky_inits), -98);
    /* retry nil: none. */
    atomic_store(&flaky_inits, 0);
    p = once(e, SX_CMD_SPAWN_WAIT,
             packf(&a, "[s, s, [], {s: n}]", "flaky_child", "run", "retry"),
             nil, 0);
    sx_pack_fini(&a);
    wait_end(e, p, SX_EFAILED, "flaky child");
    /* A bad policy. */
    p = once(e, SX_CMD_SPAWN_WAIT,
             packf(&a, "[s, s, [], {s: {s: i}}]", "flaky_child", "run", "retry",
                   "max_restarts", 0),
             nil, 0);
    sx_pack_fini(&a);
    sx_result r = wait_r(e, p);
    check_end(&r, SX_EINVAL, NULL);
    CHECK_PREFIX(r.error_msg, "spawn-wait: retry must be nil or a map");
    sx_result_free(&r);
    CHECK_EQ_INT(atomic_load(&flaky_inits), 1);
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);
    tx_engine_down(e);
}

/* A parent terminated (or cancelled) while its @retry backs off: the
 * helper ends too, and nothing is retried after. */
static void t_retry_parent_ends(void)
{
    sx_engine *e = up(2);
    for (int k = 0; k < 2; k++) {
        sx_pid p = flaky_once(e, CMD_FLAKY, 100, 5, 20000, 20000);
        TX_WAIT_UNTIL(atomic_load(&cmd_calls) == 1, WAIT_MS, 1000);
        TX_WAIT_UNTIL(tx_engine_stats(e).live == 2, WAIT_MS, 1000);
        if (k == 0) {
            CHECK_RC(sx_engine_terminate(e, p), 0);
            wait_end(e, p, SX_ETERMINATED, "terminated");
        } else {
            CHECK_RC(sx_engine_cancel(e, p, "no more"), 0);
            wait_end(e, p, SX_ECANCELLED, "no more");
        }
        TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, 5000, 1000);
        CHECK_EQ_INT(atomic_load(&cmd_calls), 1);
    }
    tx_engine_down(e);
}

/* ---- exec: check and retry ----------------------------------------------- */

/* A "once" of exec of sh -c script, with check, and a retry of max
 * restarts when max >= 0 ("retry": nil when max == -2). */
static sx_pid exec_once(sx_engine *e, const char *script, bool check, int max)
{
    sx_pack a;
    sx_payload args;
    if (max >= 0)
        args = packf(&a, "{s: [s, s, s], s: b, s: {s: i, s: i, s: i}}", "argv",
                     "sh", "-c", script, "check", (int)check, "retry",
                     "max_restarts", max, "backoff_min_ms", 1, "backoff_max_ms",
                     2);
    else if (max == -2)
        args = packf(&a, "{s: [s, s, s], s: b, s: n}", "argv", "sh", "-c",
                     script, "check", (int)check, "retry");
    else
        args = packf(&a, "{s: [s, s, s], s: b}", "argv", "sh", "-c", script,
                     "check", (int)check);
    sx_pid p = once(e, SX_CMD_EXEC, args, nil, 0);
    sx_pack_fini(&a);
    return p;
}

static int count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* The exec answer of a process that finished DONE with one, read. */
static void exec_value(sx_engine *e, sx_pid p, sx_exec_result *x, sx_result *r)
{
    *r = wait_r(e, p);
    check_end(r, 0, NULL);
    CHECK_RC(sx_exec_result_get(r->value, x), 0);
}

static bool str_is(sx_str s, const char *want)
{
    return s.ptr != NULL && s.len == strlen(want) &&
           memcmp(s.ptr, want, s.len) == 0;
}

static void t_exec_check_retry(void)
{
    sx_engine *e = up(2);
    char dir[64], path[128], script[512];
    tx_mkdtemp(dir, sizeof dir, "sx_author_");

    /* Fails every time: 3 runs, the last one's error. */
    snprintf(path, sizeof path, "%s/count", dir);
    snprintf(script, sizeof script, "echo x >> %s; exit 3", path);
    sx_pid p = exec_once(e, script, true, 2);
    wait_end(e, p, SX_EFAILED, "after 3 attempts: exec: exit status 3");
    CHECK_EQ_INT(count_lines(path), 3);

    /* Succeeds on the second run. */
    snprintf(path, sizeof path, "%s/flag", dir);
    snprintf(script, sizeof script,
             "if [ -e %s ]; then echo ok; exit 0; fi; touch %s; "
             "echo first >&2; exit 1",
             path, path);
    p = exec_once(e, script, true, 2);
    sx_exec_result x;
    sx_result r;
    exec_value(e, p, &x, &r);
    CHECK(x.exited);
    CHECK_EQ_INT(x.status, 0);
    CHECK(str_is(x.out, "ok\n"));
    CHECK(str_is(x.err, ""));
    sx_result_free(&r);

    /* check without a retry: 0 is the answer, 7 an error with the last
     * line of stderr; a signal too. Without check, 7 is an answer. */
    p = exec_once(e, "echo fine", true, -1);
    exec_value(e, p, &x, &r);
    CHECK(x.exited && x.status == 0 && str_is(x.out, "fine\n"));
    sx_result_free(&r);
    p = exec_once(e, "echo first >&2; echo boom >&2; exit 7", true, -1);
    wait_end(e, p, SX_EFAILED, "exec: exit status 7: boom");
    p = exec_once(e, "exit 7", true, -1);
    wait_end(e, p, SX_EFAILED, "exec: exit status 7");
    p = exec_once(e, "kill -9 $$", true, -1);
    wait_end(e, p, SX_EFAILED, "exec: killed by signal 9");
    p = exec_once(e, "echo boom >&2; exit 7", false, -1);
    exec_value(e, p, &x, &r);
    CHECK(x.exited && x.status == 7 && str_is(x.err, "boom\n"));
    sx_result_free(&r);
    /* retry nil: none. */
    snprintf(path, sizeof path, "%s/count2", dir);
    snprintf(script, sizeof script, "echo x >> %s; exit 3", path);
    p = exec_once(e, script, true, -2);
    wait_end(e, p, SX_EFAILED, "exec: exit status 3");
    CHECK_EQ_INT(count_lines(path), 1);

    /* Bad values. */
    sx_pack a;
    p = once(e, SX_CMD_EXEC,
             packf(&a, "{s: [s, s], s: i}", "argv", "sh", "-c", "retry", 5),
             nil, 0);
    sx_pack_fini(&a);
    r = wait_r(e, p);
    check_end(&r, SX_EINVAL, NULL);
    CHECK_PREFIX(r.error_msg, "exec: retry must be nil or a map");
    sx_result_free(&r);
    p = once(e, SX_CMD_EXEC,
             packf(&a, "{s: [s, s, s], s: i}", "argv", "sh", "-c", "true",
                   "check", 1),
             nil, 0);
    sx_pack_fini(&a);
    wait_end(e, p, SX_EINVAL, "exec: check must be a bool, or nil");

    CHECK_EQ_INT(tx_rm_tree(dir), 0);
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);
    tx_engine_down_io(e);
}

/* ---- 8. sx_exec_result_get ----------------------------------------------- */

static void t_exec_result(void)
{
    sx_engine *e = up(2);
    sx_exec_result x;
    sx_result r;
    sx_pid p = exec_once(e, "echo out; echo err >&2; exit 5", false, -1);
    exec_value(e, p, &x, &r);
    CHECK(x.exited);
    CHECK_EQ_INT(x.status, 5);
    CHECK_EQ_INT(x.signal, 0);
    CHECK(str_is(x.out, "out\n"));
    CHECK(str_is(x.err, "err\n"));
    CHECK(!x.truncated);
    sx_result_free(&r);

    p = exec_once(e, "kill -9 $$", false, -1);
    exec_value(e, p, &x, &r);
    CHECK(!x.exited);
    CHECK_EQ_INT(x.signal, 9);
    CHECK(str_is(x.out, "") && str_is(x.err, ""));
    sx_result_free(&r);

    /* truncate: the totals. */
    sx_pack a;
    p = once(e, SX_CMD_EXEC,
             packf(&a, "{s: [s, s, s], s: i, s: b}", "argv", "sh", "-c",
                   "printf 0123456789", "max_output", 4, "truncate", 1),
             nil, 0);
    sx_pack_fini(&a);
    exec_value(e, p, &x, &r);
    CHECK(x.exited && x.status == 0);
    CHECK(x.truncated);
    CHECK_EQ_U64(x.out_total, 10);
    CHECK_EQ_U64(x.err_total, 0);
    CHECK_EQ_U64(x.out.len, 4);
    sx_result_free(&r);

    /* Not an exec answer: SX_EPROTO, and r zeroed. */
    uint8_t b[SX_PAYLOAD_INT_MAX];
    memset(&x, 0x5a, sizeof x);
    CHECK_RC(sx_exec_result_get(sx_payload_int(b, 5), &x), SX_EPROTO);
    CHECK(x.out.ptr == NULL && x.status == 0 && !x.exited);
    CHECK_RC(sx_exec_result_get(nil, &x), SX_EPROTO);
    static const uint8_t junk[] = { 0x81, 0xa6, 's', 't', 'a', 't', 'u' };
    CHECK_RC(sx_exec_result_get((sx_payload){ junk, sizeof junk }, &x),
             SX_EPROTO);
    CHECK_RC(sx_exec_result_get(packf(&a, "{s: i, s: n, s: y}", "status", 0,
                                      "signal", "stdout", "", (size_t)0),
                                &x),
             SX_EPROTO); /* no stderr */
    sx_pack_fini(&a);
    CHECK_RC(sx_exec_result_get(packf(&a, "{s: n, s: n, s: y, s: y}", "status",
                                      "signal", "stdout", "", (size_t)0,
                                      "stderr", "", (size_t)0),
                                &x),
             SX_EPROTO); /* neither a status nor a signal */
    sx_pack_fini(&a);
    CHECK_RC(sx_exec_result_get(packf(&a, "{s: i, s: i, s: y, s: y}", "status",
                                      0, "signal", 9, "stdout", "", (size_t)0,
                                      "stderr", "", (size_t)0),
                                &x),
             SX_EPROTO); /* both */
    sx_pack_fini(&a);
    CHECK_RC(sx_exec_result_get(packf(&a, "{s: s, s: n, s: y, s: y}", "status",
                                      "0", "signal", "stdout", "", (size_t)0,
                                      "stderr", "", (size_t)0),
                                &x),
             SX_EPROTO); /* a status that is not an int */
    sx_pack_fini(&a);
    /* A well-formed one built by hand reads. */
    CHECK_RC(sx_exec_result_get(packf(&a, "{s: i, s: n, s: s, s: y}", "status",
                                      1, "signal", "stdout", "o", "stderr",
                                      "ee", (size_t)2),
                                &x),
             0);
    CHECK(x.exited && x.status == 1 && str_is(x.out, "o") &&
          str_is(x.err, "ee"));
    sx_pack_fini(&a);
    CHECK_RC(sx_exec_result_get(nil, NULL), SX_EINVAL);
    tx_engine_down_io(e);
}

/* ---- 9. sx_yield_spawn, sx_yield_with's misuse, the builders' args ------- */

static void t_yield_spawn(void)
{
    sx_engine *e = up(2);
    sx_pid p;
    CHECK_RC(sx_engine_submit(e, "spawner", "wait", NULL, 0, &p), 0);
    CHECK_EQ_INT(wait_int(e, p), 5);

    CHECK_RC(sx_engine_submit(e, "spawner", "spawn", NULL, 0, &p), 0);
    sx_result r = wait_r(e, p);
    check_end(&r, 0, NULL);
    sx_unpack u;
    sx_pid child;
    sx_unpack_init(&u, r.value);
    CHECK_RC(sx_unpack_pid(&u, &child), 0);
    sx_result_free(&r);
    r = wait_r(e, child);
    check_end(&r, 0, NULL);
    char s[16];
    CHECK_RC(sx_payload_get_str(r.value, s, sizeof s), 0);
    CHECK_STR(s, "hello");
    sx_result_free(&r);

    /* The spawn-all builders with every shared option: the map holds
     * them, and the engine takes it. */
    sx_pack pk;
    sx_restart_policy pol = { .mode = SX_RESTART_ON_FAILURE,
                              .max_restarts = 2 };
    sx_spawn_opts so = { .deadline_ms = 5000,
                         .scope = SX_SCOPE_TERMINATE,
                         .notify = true,
                         .retry = &pol };
    /* notify is spawn-wait's: spawn-all's answer gives the outcomes in
     * order instead. */
    sx_pack_init(&pk);
    CHECK_RC(sx_spawn_all_begin(&pk, 2, &so), SX_EINVAL);
    sx_pack_fini(&pk);
    so.notify = false;
    sx_pack_init(&pk);
    CHECK_RC(sx_spawn_all_begin(&pk, 2, &so), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "adder", "run", "i, i", 1, 2), 0);
    CHECK_RC(sx_spawn_all_child(&pk, "echo", "run", "[s, i]", "a", 1), 0);
    sx_payload args = sx_pack_payload(&pk);
    CHECK_EQ_INT(sx_get_int(args, "deadline_ms", 0), 5000);
    sx_str sc = sx_get_str(args, "scope");
    CHECK(str_is(sc, "terminate"));
    CHECK(!sx_get_bool(args, "notify", false));
    CHECK_EQ_INT(sx_get_int(args, "retry.max_restarts", 0), 2);
    CHECK_EQ_INT(sx_get_int(args, "retry.backoff_min_ms", 0),
                 SX_RESTART_BACKOFF_MIN_DEFAULT_MS);
    CHECK_EQ_U64(sx_get_len(args, "children"), 2);
    CHECK_EQ_U64(sx_get_len(args, "children.0.2"), 2);
    CHECK_EQ_U64(sx_get_len(args, "children.1.2"), 1);
    CHECK_EQ_U64(sx_get_len(args, "children.1.2.0"), 2);
    p = once(e, SX_CMD_SPAWN_ALL, args, nil, 0);
    sx_pack_fini(&pk);
    r = wait_r(e, p);
    check_end(&r, 0, NULL);
    outcome_int(r.value, 0, 3);
    sx_outcome o;
    CHECK_RC(sx_outcome_at(r.value, 1, &o), 0);
    CHECK_EQ_U64(sx_get_len(o.value, NULL), 2);
    CHECK_EQ_INT(sx_get_int(o.value, "1", 0), 1);
    sx_result_free(&r);
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 0, WAIT_MS, 1000);
    tx_engine_down(e);
}

/* ---- 10. the batch walker on real batches -------------------------------- */

static void walk_get(int *kinds, int *nk, size_t *batch, int *nb)
{
    pthread_mutex_lock(&rec_mu);
    memcpy(kinds, walk_kinds, sizeof walk_kinds);
    *nk = walk_nk;
    memcpy(batch, walk_batch, sizeof walk_batch);
    *nb = walk_nb;
    pthread_mutex_unlock(&rec_mu);
}

static void t_batch_cancel_first(void)
{
    /* One worker, held by a blocker: the walker's first step comes after
     * its cancel has arrived. */
    sx_engine *e = up(1);
    sx_pid blk = submit0(e, "blocker");
    TX_WAIT_UNTIL(atomic_load(&blocker_running), WAIT_MS, 1000);
    sx_pid w = submit0(e, "walker");
    CHECK_RC(sx_engine_cancel(e, w, "early"), 0);
    atomic_store(&blocker_release, 1);
    tx_wait_done(e, blk, WAIT_MS, NULL);
    wait_end(e, w, SX_ECANCELLED, "early");
    int kinds[16], nk, nb;
    size_t batch[16];
    walk_get(kinds, &nk, batch, &nb);
    CHECK_EQ_INT(nb, 1);
    CHECK_EQ_U64(batch[0], 1);
    CHECK_EQ_INT(nk, 1);
    CHECK_EQ_INT(kinds[0], SX_EV_CANCEL);
    CHECK_EQ_U64(tx_engine_stats(e).cancelled, 1);
    tx_engine_down(e);
}

static void t_batch_two(void)
{
    sx_engine *e = up(1);
    sx_pid w = submit0(e, "walker");
    CHECK_EQ_INT(wait_int(e, w), 2);
    int kinds[16], nk, nb;
    size_t batch[16];
    walk_get(kinds, &nk, batch, &nb);
    CHECK_EQ_INT(nk, 3);
    CHECK_EQ_INT(kinds[0], SX_EV_START);
    CHECK_EQ_INT(kinds[1], SX_EV_COMPLETE);
    CHECK_EQ_INT(kinds[2], SX_EV_COMPLETE);
    CHECK_EQ_INT(nb, 2);
    CHECK_EQ_U64(batch[0], 0);
    CHECK_EQ_U64(batch[1], 2); /* both answers in one step */
    tx_engine_down(e);
}

/* ---- 11. the engine's own types ------------------------------------------ */

static void t_own_types(void)
{
    sx_engine *e = tx_engine_new(&(sx_engine_config){ .workers = 1 });
    sx_process_type t = types[1];
    static const char *const names[] = { "@x", "@retry", "@all", "@" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        t.name = names[i];
        CHECK_RC(sx_engine_register(e, &t), SX_EINVAL);
    }
    tx_engine_register(e, types, N_TYPES);
    tx_engine_start(e);
    const sx_process_type *got[64];
    size_t n = sx_engine_types(e, got, 64);
    CHECK_EQ_U64(n, N_TYPES);
    CHECK_EQ_U64(sx_engine_types(e, NULL, 0), N_TYPES);
    for (size_t i = 0; i < n; i++) {
        CHECK(got[i]->name[0] != '@');
        CHECK_STR(got[i]->name, types[i].name);
    }
    tx_engine_down(e);
}

static const sx_test_case cases[] = {
    { "init_error", t_init_error },
    { "init_error_stale", t_init_error_stale },
    { "cancelled", t_cancelled },
    { "deadline_type", t_deadline_type },
    { "deadline_submit", t_deadline_submit },
    { "deadline_in_time", t_deadline_in_time },
    { "deadline_children", t_deadline_children },
    { "deadline_negative", t_deadline_negative },
    { "scope", t_scope },
    { "scope_restart", t_scope_restart },
    { "notify", t_notify },
    { "spawn_all", t_spawn_all },
    { "spawn_all_bad", t_spawn_all_bad },
    { "spawn_all_opts", t_spawn_all_opts },
    { "retry_yield", t_retry_yield },
    { "retry_spawn_wait", t_retry_spawn_wait },
    { "retry_parent_ends", t_retry_parent_ends },
    { "exec_check_retry", t_exec_check_retry },
    { "exec_result", t_exec_result },
    { "yield_spawn", t_yield_spawn },
    { "batch_cancel_first", t_batch_cancel_first },
    { "batch_two", t_batch_two },
    { "own_types", t_own_types },
};

SX_TEST_MAIN(cases)

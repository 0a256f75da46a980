/* tests/engine/test_supervise.c — restart policies (sx_restart_policy,
 * docs/DURABILITY.md "Supervision"): each mode, the limit within a window
 * and its error, the backoff's bounds, the PID kept across restarts, and
 * that cancel, terminate and stop never restart (also while a job waits
 * for its restart).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stepx/engine.h>

#include "tests/support/engine.h"
#include "tests/support/harness.h"
#include "tests/support/timing.h"

/* Every init of any type below, with its time. */
static _Atomic int inits;
static _Atomic uint64_t init_ns[64];

static void count_init(void)
{
    /* relaxed: read after wait, which orders everything before the
     * finish that made the outcome. */
    int k = atomic_fetch_add_explicit(&inits, 1, memory_order_relaxed);
    if (k < 64)
        atomic_store_explicit(&init_ns[k], tx_now_ns(), memory_order_relaxed);
}

/* "flaky": fails while fewer than its input's count of inits have run
 * (of any process: one job per case), then finishes with the attempt. */
typedef struct {
    int64_t fail_until;
} flaky_state;

static int flaky_init(void *st, const sx_init_ctx *ctx, const char *method,
                      const sx_payload *in, size_t n)
{
    (void)ctx, (void)method;
    flaky_state *f = st;
    if (n != 1 || sx_payload_get_int(in[0], &f->fail_until) != 0)
        return SX_EINVAL;
    count_init();
    return 0;
}

static int flaky_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)ev, (void)n;
    flaky_state *f = st;
    /* relaxed: this case's own count (see count_init). */
    if (atomic_load_explicit(&inits, memory_order_relaxed) <= f->fail_until) {
        sx_fail(out, "boom");
        return 0;
    }
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(
                     b, atomic_load_explicit(&inits, memory_order_relaxed)));
    return 0;
}

/* "hold": waits for messages: "crash" fails it, "ping" is answered with
 * "pong" to its sender, anything else finishes it; a cancel fails it. */
static int hold_init(void *st, const sx_init_ctx *ctx, const char *method,
                     const sx_payload *in, size_t n)
{
    (void)st, (void)ctx, (void)method, (void)in, (void)n;
    count_init();
    return 0;
}

static int hold_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type != SX_EVENT_MESSAGE)
            continue;
        if (strcmp(ev[i].topic, "crash") == 0 ||
            strcmp(ev[i].topic, SX_TOPIC_CANCEL) == 0) {
            sx_fail(out, ev[i].topic);
            return 0;
        }
        if (strcmp(ev[i].topic, "ping") == 0) {
            if (sx_send(out, ev[i].from, "pong", (sx_payload){ 0 }) != 0)
                return SX_ENOMEM;
            continue;
        }
        sx_done(out, ev[i].data);
        return 0;
    }
    sx_idle(out);
    return 0;
}

/* "pest": sends its input's PID "ping" in its first two steps and
 * "crash" in its third, then spends its fourth in a sleep of PEST_MS
 * (saying so in pest_asleep), and finishes with how many steps it ran.
 * Were a worker to keep the reference its sends take on a job's slot
 * (engine/core/proc.h, sx__prefs), it would keep it through that step. */
#define PEST_MS 2000
static atomic_int pest_asleep;

typedef struct {
    sx_pid to;
    int64_t steps;
} pest_state;

static int pest_init(void *st, const sx_init_ctx *ctx, const char *method,
                     const sx_payload *in, size_t n)
{
    (void)ctx, (void)method;
    pest_state *s = st;
    sx_unpack u;
    if (n != 1)
        return SX_EINVAL;
    sx_unpack_init(&u, in[0]);
    return sx_unpack_pid(&u, &s->to) == 0 ? 0 : SX_EINVAL;
}

static int pest_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)ev, (void)n;
    pest_state *s = st;
    if (s->steps < 2 && sx_send(out, s->to, "ping", (sx_payload){ 0 }) != 0)
        return SX_ENOMEM;
    if (s->steps++ < 2) {
        sx_continue(out);
        return 0;
    }
    atomic_store(&pest_asleep, 1);
    tx_sleep_ms(PEST_MS);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(b, s->steps));
    return 0;
}

static const sx_process_type types[] = {
    { .name = "flaky",
      .state_size = sizeof(flaky_state),
      .init = flaky_init,
      .step = flaky_step },
    { .name = "hold", .init = hold_init, .step = hold_step },
    { .name = "pest",
      .state_size = sizeof(pest_state),
      .init = pest_init,
      .step = pest_step },
};

static sx_engine *up(void)
{
    atomic_store(&inits, 0);
    sx_engine_config cfg = { .workers = 2 };
    return tx_engine_up(&cfg, types, 3);
}

/* Without a state store the answer comes before submit_async returns. */
static void on_answer(void *user, int rc, sx_pid pid, bool existing,
                      const char *msg)
{
    (void)existing, (void)msg;
    CHECK_RC(rc, 0);
    *(sx_pid *)user = pid;
}

static sx_pid submit(sx_engine *e, const char *type, int64_t arg,
                     const sx_restart_policy *pol)
{
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(b, arg);
    sx_submit_opts o = { .restart = pol };
    sx_pid pid = SX_PID_NONE;
    CHECK_RC(
        sx_engine_submit_async(e, type, "run", &in, 1, &o, on_answer, &pid), 0);
    return pid;
}

static sx_result wait_for(sx_engine *e, sx_pid pid)
{
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pid, 10000, &r), 0);
    return r;
}

/* The state listings give pid (0 when it is not listed). */
static int state_of(sx_engine *e, sx_pid pid, sx_process_info *got)
{
    sx_process_info info[16];
    int n = sx_engine_list(e, info, 16);
    for (int i = 0; i < n; i++)
        if (sx_pid_eq(info[i].pid, pid)) {
            if (got != NULL)
                *got = info[i];
            return info[i].state;
        }
    return 0;
}

/* on-failure: two failures, then done; the same PID all along, attempt
 * 3, and the listing showed it waiting with its last failure. */
static void t_on_failure(void)
{
    sx_engine *e = up();
    sx_restart_policy pol = { .mode = SX_RESTART_ON_FAILURE,
                              .backoff_min_ms = 150,
                              .backoff_max_ms = 150 };
    sx_pid pid = submit(e, "flaky", 2, &pol);
    sx_process_info info;
    TX_WAIT_UNTIL(state_of(e, pid, &info) == SX_PSTATE_RESTARTING, 5000, 200);
    CHECK_EQ_U64(tx_engine_stats(e).restarting, 1);
    CHECK_EQ_U64(tx_engine_stats(e).store_commits, 0); /* no store */
    /* At most the backoff, and the millisecond a restart rounds up by. */
    CHECK(info.attempts == 1 && info.restart_in_ms >= 0 &&
          info.restart_in_ms <= 151);
    if (strstr(info.last_error, "boom") == NULL)
        SX_FAILF("last_error: %s", info.last_error);
    CHECK_STR(sx_pstate_name(SX_PSTATE_RESTARTING), "restarting");
    sx_result r = wait_for(e, pid);
    CHECK_EQ_INT(r.error, 0);
    CHECK_EQ_U64(r.attempts, 3);
    sx_result_free(&r);
    CHECK_EQ_INT(atomic_load(&inits), 3);
    tx_engine_down(e);
}

/* never (and no policy): the failure is final. */
static void t_never(void)
{
    sx_engine *e = up();
    sx_restart_policy pol = { .mode = SX_RESTART_NEVER };
    sx_pid a = submit(e, "flaky", 5, &pol);
    sx_result r = wait_for(e, a);
    CHECK_EQ_INT(r.error, SX_EFAILED);
    CHECK_EQ_U64(r.attempts, 1);
    sx_result_free(&r);
    tx_engine_down(e);
}

/* always: a job that finishes is started again until the limit; the
 * error says so, with its last end. on-failure past the limit carries the
 * last failure's message. */
static void t_limits(void)
{
    sx_engine *e = up();
    sx_restart_policy pol = { .mode = SX_RESTART_ALWAYS,
                              .max_restarts = 2,
                              .backoff_min_ms = 1,
                              .backoff_max_ms = 2 };
    sx_pid pid = submit(e, "flaky", 0, &pol);
    sx_result r = wait_for(e, pid);
    CHECK_EQ_INT(r.error, SX_ERESTART_LIMIT);
    CHECK_EQ_U64(r.attempts, 3);
    if (r.error_msg == NULL ||
        strstr(r.error_msg, "restart limit (2 in 60000 ms)") == NULL ||
        strstr(r.error_msg, "finished") == NULL)
        SX_FAILF("message: %s", r.error_msg ? r.error_msg : "(none)");
    sx_result_free(&r);
    tx_engine_down(e);

    e = up();
    pol = (sx_restart_policy){ .mode = SX_RESTART_ON_FAILURE,
                               .max_restarts = 3,
                               .backoff_min_ms = 1,
                               .backoff_max_ms = 1 };
    pid = submit(e, "flaky", 1000, &pol);
    r = wait_for(e, pid);
    CHECK_EQ_INT(r.error, SX_ERESTART_LIMIT);
    CHECK_EQ_U64(r.attempts, 4);
    CHECK(r.error_msg != NULL && strstr(r.error_msg, "boom") != NULL);
    sx_result_free(&r);
    tx_engine_down(e);
}

/* The window: with restarts further apart than window_ms, a limit of 1
 * never trips. */
static void t_window(void)
{
    sx_engine *e = up();
    sx_restart_policy pol = { .mode = SX_RESTART_ON_FAILURE,
                              .max_restarts = 1,
                              .window_ms = 40,
                              .backoff_min_ms = 60,
                              .backoff_max_ms = 60 };
    sx_pid pid = submit(e, "flaky", 4, &pol);
    sx_result r = wait_for(e, pid);
    CHECK_EQ_INT(r.error, 0);
    CHECK_EQ_U64(r.attempts, 5);
    sx_result_free(&r);
    tx_engine_down(e);
}

/* Backoff: 40 ms doubled per restart up to 160, with at most a quarter
 * more, never past the maximum; measured between inits, with room for a
 * slow machine above. */
static void t_backoff_bounds(void)
{
    sx_engine *e = up();
    sx_restart_policy pol = { .mode = SX_RESTART_ON_FAILURE,
                              .max_restarts = 10,
                              .backoff_min_ms = 40,
                              .backoff_max_ms = 160 };
    sx_pid pid = submit(e, "flaky", 5, &pol);
    sx_result r = wait_for(e, pid);
    CHECK_EQ_INT(r.error, 0);
    CHECK_EQ_U64(r.attempts, 6);
    sx_result_free(&r);
    static const double lo[] = { 40, 80, 160, 160, 160 };
    static const double hi[] = { 50, 100, 160, 160, 160 };
    double slack = 80; /* scheduling, and sanitizers */
    for (int k = 0; k < 5; k++) {
        double ms =
            (double)(atomic_load(&init_ns[k + 1]) - atomic_load(&init_ns[k])) /
            1e6;
        printf("backoff %d: %.1f ms (%.0f to %.0f)\n", k + 1, ms, lo[k], hi[k]);
        if (ms < lo[k] || ms > hi[k] + slack)
            SX_FAILF("backoff %d took %.1f ms, not %.0f to %.0f", k + 1, ms,
                     lo[k], hi[k]);
    }
    tx_engine_down(e);
}

/* The messages a mailbox got (box_fn), and the sender of each. */
static _Atomic int box_n;
static sx_pid box_from[4];

static void box_fn(void *user, const sx_message *msg)
{
    (void)user;
    /* relaxed: only this fn writes it, one message at a time (one sender:
     * the job). */
    int k = atomic_load_explicit(&box_n, memory_order_relaxed);
    if (k < 4)
        box_from[k] = msg->from;
    /* release: publishes box_from[k] (acquire in ping). */
    atomic_store_explicit(&box_n, k + 1, memory_order_release);
}

/* Sends "ping" from mailbox mb to pid and checks that the "pong" came
 * from pid. */
static void ping(sx_engine *e, sx_pid mb, sx_pid pid)
{
    /* relaxed: box_fn runs only for our ping, sent below. */
    int k = atomic_load_explicit(&box_n, memory_order_relaxed);
    CHECK_RC(sx_engine_send(e, mb, pid, "ping", (sx_payload){ 0 }), 0);
    /* acquire: pairs with the release in box_fn. */
    TX_WAIT_UNTIL(atomic_load_explicit(&box_n, memory_order_acquire) > k, 5000,
                  200);
    CHECK(k < 4 && sx_pid_eq(box_from[k], pid));
}

/* The PID stays: a message sent to it after a restart reaches the new
 * attempt, and what the job sends comes from it in every attempt. */
static void t_same_pid(void)
{
    sx_engine *e = up();
    sx_restart_policy pol = { .mode = SX_RESTART_ON_FAILURE,
                              .backoff_min_ms = 1,
                              .backoff_max_ms = 1 };
    sx_pid pid = submit(e, "hold", 0, &pol);
    /* relaxed: no mailbox runs box_fn yet. */
    atomic_store_explicit(&box_n, 0, memory_order_relaxed);
    sx_pid mb;
    CHECK_RC(sx_engine_mailbox_new(e, box_fn, NULL, &mb), 0);
    ping(e, mb, pid);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, pid, "crash", (sx_payload){ 0 }),
             0);
    TX_WAIT_UNTIL(atomic_load(&inits) == 2 &&
                      state_of(e, pid, NULL) == SX_PSTATE_IDLE,
                  5000, 200);
    ping(e, mb, pid);
    CHECK_RC(sx_engine_mailbox_free(e, mb), 0);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, pid, "go", sx_payload_int(b, 42)),
             0);
    sx_result r = wait_for(e, pid);
    CHECK_EQ_INT(r.error, 0);
    CHECK_EQ_U64(r.attempts, 2);
    int64_t v = 0;
    CHECK_RC(sx_payload_get_int(r.value, &v), 0);
    CHECK_EQ_U64((uint64_t)v, 42);
    sx_result_free(&r);
    /* Finished: the PID names nothing live now. */
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, pid, "go", (sx_payload){ 0 }),
             SX_ENOTFOUND);
    tx_engine_down(e);
}

/* sx_engine_wait_all on another thread, its return time kept. */
typedef struct {
    sx_engine *e;
    atomic_int rc, done;
    double at;
} wait_all_job;

static void *wait_all_main(void *arg)
{
    wait_all_job *j = arg;
    int rc = sx_engine_wait_all(j->e, -1);
    j->at = sx_test_now_ms();
    atomic_store(&j->rc, rc);
    atomic_store(&j->done, 1);
    return NULL;
}

/* A job waiting for its restart is alive (sx_engine_wait_all waits for
 * it); cancelled, it ends on the cancelling thread, not on a worker, and
 * that thread wakes the waiter (engine/core/live.h, "waiting for all").
 * Were it not to, the waiter would wake at the next look of a worker
 * re-parking (every 500 ms) or its own safety net (2 s): over 250 ms in
 * most rounds (one worker, so one park's timer). */
static void t_wait_all_restarting(void)
{
    atomic_store(&inits, 0);
    sx_engine_config cfg = { .workers = 1 };
    sx_engine *e = tx_engine_up(&cfg, types, 3);
    sx_restart_policy pol = { .mode = SX_RESTART_ALWAYS,
                              .backoff_min_ms = 20000,
                              .backoff_max_ms = 20000 };
    for (int k = 0; k < 8; k++) {
        sx_pid b = submit(e, "hold", 0, &pol);
        CHECK_RC(sx_engine_send(e, SX_PID_NONE, b, "crash", (sx_payload){ 0 }),
                 0);
        TX_WAIT_UNTIL(state_of(e, b, NULL) == SX_PSTATE_RESTARTING, 5000, 200);
        CHECK_RC(sx_engine_wait_all(e, 0), SX_ETIMEDOUT);
        wait_all_job j = { .e = e };
        pthread_t th;
        CHECK(pthread_create(&th, NULL, wait_all_main, &j) == 0);
        tx_sleep_ms(30);
        CHECK_EQ_INT(atomic_load(&j.done), 0); /* it waits for the job */
        double t0 = sx_test_now_ms();
        CHECK_RC(sx_engine_cancel(e, b, "while waiting"), 0);
        CHECK(pthread_join(th, NULL) == 0);
        CHECK_RC(atomic_load(&j.rc), 0);
        if (j.at - t0 >= 250)
            SX_FAILF("round %d: the waiter woke %.0f ms after the cancel", k,
                     j.at - t0);
        sx_result r = wait_for(e, b);
        CHECK_EQ_INT(r.error, SX_ECANCELLED);
        sx_result_free(&r);
    }
    tx_engine_down(e);
}

/* Cancel and terminate never restart: while it runs, and while it waits
 * for its restart (it ends at once, not after the backoff). */
static void t_cancel_terminate(void)
{
    sx_engine *e = up();
    sx_restart_policy pol = { .mode = SX_RESTART_ALWAYS,
                              .backoff_min_ms = 20000,
                              .backoff_max_ms = 20000 };
    sx_pid a = submit(e, "hold", 0, &pol);
    TX_WAIT_UNTIL(state_of(e, a, NULL) == SX_PSTATE_IDLE, 5000, 200);
    CHECK_RC(sx_engine_cancel(e, a, "enough"), 0);
    sx_result r = wait_for(e, a);
    CHECK_EQ_INT(r.error, SX_EFAILED); /* it failed on the cancel */
    CHECK_EQ_U64(r.attempts, 1);
    sx_result_free(&r);

    sx_pid b = submit(e, "hold", 0, &pol);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, b, "crash", (sx_payload){ 0 }), 0);
    TX_WAIT_UNTIL(state_of(e, b, NULL) == SX_PSTATE_RESTARTING, 5000, 200);
    double t0 = sx_test_now_ms();
    CHECK_RC(sx_engine_cancel(e, b, "while waiting"), 0);
    r = wait_for(e, b);
    CHECK_EQ_INT(r.error, SX_ECANCELLED);
    CHECK(sx_test_now_ms() - t0 < 5000);
    sx_result_free(&r);

    sx_pid c = submit(e, "hold", 0, &pol);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, c, "crash", (sx_payload){ 0 }), 0);
    TX_WAIT_UNTIL(state_of(e, c, NULL) == SX_PSTATE_RESTARTING, 5000, 200);
    CHECK_RC(sx_engine_terminate(e, c), 0);
    r = wait_for(e, c);
    CHECK_EQ_INT(r.error, SX_ETERMINATED);
    sx_result_free(&r);
    CHECK_EQ_U64(tx_engine_stats(e).live, 0);

    /* Stop with a job waiting 20 s for its restart: it ends now. */
    sx_pid d = submit(e, "hold", 0, &pol);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, d, "crash", (sx_payload){ 0 }), 0);
    TX_WAIT_UNTIL(state_of(e, d, NULL) == SX_PSTATE_RESTARTING, 5000, 200);
    t0 = sx_test_now_ms();
    CHECK_RC(sx_engine_stop(e, 5000), 0);
    CHECK(sx_test_now_ms() - t0 < 3000);
    CHECK_EQ_U64(tx_engine_stats(e).live, 0);
    sx_engine_free(e);
}

/* A type's default policy applies to plain sx_engine_submit; bad
 * policies are refused. */
static void t_type_default(void)
{
    atomic_store(&inits, 0);
    sx_engine *e = tx_engine_new(&(sx_engine_config){ .workers = 2 });
    tx_engine_register(e, types, 2);
    sx_restart_policy pol = { .mode = SX_RESTART_ON_FAILURE,
                              .backoff_min_ms = 1,
                              .backoff_max_ms = 1 };
    CHECK_RC(sx_engine_set_restart(e, "nope", &pol), SX_EINVAL);
    sx_restart_policy bad = { .mode = 7 };
    CHECK_RC(sx_engine_set_restart(e, "flaky", &bad), SX_EINVAL);
    bad = (sx_restart_policy){ .mode = SX_RESTART_ON_FAILURE,
                               .backoff_min_ms = 10,
                               .backoff_max_ms = 5 };
    CHECK_RC(sx_engine_set_restart(e, "flaky", &bad), SX_EINVAL);
    CHECK_RC(sx_engine_set_restart(e, "flaky", &pol), 0);
    tx_engine_start(e);
    CHECK_RC(sx_engine_set_restart(e, "flaky", &pol), SX_ESTATE);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(b, 1);
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "flaky", "run", &in, 1, &pid), 0);
    sx_result r = wait_for(e, pid);
    CHECK_EQ_INT(r.error, 0);
    CHECK_EQ_U64(r.attempts, 2);
    sx_result_free(&r);
    sx_submit_opts o = { .restart = &bad };
    CHECK_RC(
        sx_engine_submit_async(e, "flaky", "run", &in, 1, &o, on_answer, &pid),
        SX_EINVAL);
    tx_engine_down(e);
}

/* A job fails and restarts while a process that sent it messages is in a
 * long step on one worker: that worker keeps no reference on a job's
 * slot, which the restart waits for (supervise.c, restart_now), on the
 * thread that restarts every job in turn. Kept, the restart would come
 * only after that step's PEST_MS. */
static void t_restart_past_a_busy_sender(void)
{
    atomic_store(&inits, 0);
    atomic_store(&pest_asleep, 0);
    sx_engine_config cfg = { .workers = 2 };
    sx_engine *e = tx_engine_up(&cfg, types, 3);
    sx_restart_policy pol = { .mode = SX_RESTART_ON_FAILURE,
                              .backoff_min_ms = 1,
                              .backoff_max_ms = 1 };
    sx_pid job = submit(e, "hold", 0, &pol);
    uint8_t pb[64];
    sx_pack pk;
    sx_pack_init_fixed(&pk, pb, sizeof(pb));
    sx_pack_pid(&pk, job);
    sx_payload in = sx_pack_payload(&pk);
    sx_pid pest;
    CHECK_RC(sx_engine_submit(e, "pest", "run", &in, 1, &pest), 0);
    TX_WAIT_UNTIL(atomic_load(&pest_asleep) == 1, 10000, 200);
    /* From outside: the other worker runs the job on it, and it fails. */
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, job, "crash", (sx_payload){ 0 }),
             0);
    /* The second attempt's init, well within the pest's sleep. */
    TX_WAIT_UNTIL(atomic_load(&inits) == 2, PEST_MS / 2, 200);
    sx_result r = wait_for(e, pest);
    CHECK_EQ_INT(r.error, 0);
    sx_result_free(&r);
    /* The job runs its second attempt, under its one PID. */
    TX_WAIT_UNTIL(state_of(e, job, NULL) == SX_PSTATE_IDLE, 5000, 200);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, job, "bye", (sx_payload){ 0 }), 0);
    r = wait_for(e, job);
    CHECK_EQ_INT(r.error, 0);
    CHECK_EQ_U64(r.attempts, 2);
    sx_result_free(&r);
    tx_engine_down(e);
}

static const sx_test_case cases[] = {
    { "on_failure", t_on_failure },
    { "never", t_never },
    { "limits", t_limits },
    { "window", t_window },
    { "backoff_bounds", t_backoff_bounds },
    { "same_pid", t_same_pid },
    { "cancel_terminate", t_cancel_terminate },
    { "wait_all_restarting", t_wait_all_restarting },
    { "type_default", t_type_default },
    { "restart_past_a_busy_sender", t_restart_past_a_busy_sender },
};

SX_TEST_MAIN(cases)

/* tests/engine/test_sched.c — scheduler behaviours beyond the pinned
 * behaviours of docs/API.md: the throughput budget (fairness and batch
 * size), work stealing across workers, parking when idle and waking on new
 * work, and the process listing's states. Each case opens with the property
 * it checks. */
/* mincore is not in POSIX.1-2008. */
#define _DEFAULT_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <stepx/stepx.h>

#include "engine/core/core.h"
#include "engine/core/proc.h"
#include "tests/support/support.h"

static const sx_payload nil = { NULL, 0 };

static sx_engine *up(unsigned workers, unsigned throughput,
                     const sx_process_type *types, size_t n)
{
    sx_engine_config cfg = { .workers = workers, .throughput = throughput };
    return tx_engine_up(&cfg, types, n);
}

static int no_init(void *st, const sx_init_ctx *c, const char *m,
                   const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

static bool wait_done(sx_engine *e, sx_pid pid, int64_t ms, int *err)
{
    sx_result r;
    int rc = sx_engine_wait(e, pid, ms, &r);
    if (rc != 0)
        return false;
    *err = r.error;
    sx_result_free(&r);
    return true;
}

/* ---- fairness --------------------------------------------------------- */

static _Atomic int hog_steps;

/* Runs forever (CONTINUE without yields) until any message arrives. */
static int hog_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    (void)st, (void)ev;
    atomic_fetch_add(&hog_steps, 1);
    if (n > 0)
        sx_done(out, nil);
    return 0;
}

static int quick_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    sx_done(out, nil);
    return 0;
}

/* A process that never waits cannot starve others: on one worker with a
 * throughput of 4, a process submitted after a hog that CONTINUEs forever
 * still runs and finishes while the hog keeps running, and the hog's own
 * message still reaches it. */
static void test_fairness(void)
{
    const sx_process_type t[] = {
        { .name = "hog", .init = no_init, .step = hog_step },
        { .name = "quick", .init = no_init, .step = quick_step },
    };
    sx_engine *e = up(1, 4, t, 2);
    sx_pid hog, quick;
    CHECK_RC(sx_engine_submit(e, "hog", "run", NULL, 0, &hog), 0);
    while (atomic_load(&hog_steps) < 100)
        tx_sleep_us(100);
    CHECK_RC(sx_engine_submit(e, "quick", "run", NULL, 0, &quick), 0);
    int err = -1;
    CHECK(wait_done(e, quick, 5000, &err));
    CHECK_EQ_INT(err, 0);
    /* Still running (polled: a fixed 20 ms is not always enough for a
     * loaded machine to run the worker again). */
    int before = atomic_load(&hog_steps);
    double t0 = sx_test_now_ms();
    while (atomic_load(&hog_steps) <= before && sx_test_now_ms() - t0 < 5000)
        tx_sleep_us(1000);
    CHECK(atomic_load(&hog_steps) > before);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, hog, "stop", nil), 0);
    CHECK(wait_done(e, hog, 5000, &err));
    CHECK_EQ_INT(err, 0);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

/* Sleeps 10 ms once, then finishes. */
static int nap_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    int *k = st;
    (void)ev, (void)n;
    if ((*k)++ > 0) {
        sx_done(out, nil);
        return 0;
    }
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_yield(out, SX_CMD_SLEEP, 1, sx_payload_int(b, 10));
    return 0;
}

/* A process that never waits cannot hold a sleeper back either: on one
 * worker with a throughput of 4, a 10 ms sleep yielded before a hog
 * started still comes due and its process finishes while the hog keeps
 * running. Sleeps are fired by the workers between turns; a hog with
 * nothing else queued kept its turn for good, and the sleep never fired. */
static void test_sleep_beside_hog(void)
{
    const sx_process_type t[] = {
        { .name = "hog", .init = no_init, .step = hog_step },
        { .name = "nap",
          .state_size = sizeof(int),
          .init = no_init,
          .step = nap_step },
    };
    atomic_store(&hog_steps, 0);
    sx_engine *e = up(1, 4, t, 2);
    sx_pid hog, nap;
    CHECK_RC(sx_engine_submit(e, "nap", "run", NULL, 0, &nap), 0);
    tx_sleep_us(2000); /* nap has yielded its sleep */
    CHECK_RC(sx_engine_submit(e, "hog", "run", NULL, 0, &hog), 0);
    while (atomic_load(&hog_steps) < 100)
        tx_sleep_us(100);
    int err = -1;
    CHECK(wait_done(e, nap, 3000, &err));
    CHECK_EQ_INT(err, 0);
    /* Still running (polled: a loaded machine may not run it at once). */
    int before = atomic_load(&hog_steps);
    double t0 = sx_test_now_ms();
    while (atomic_load(&hog_steps) <= before && sx_test_now_ms() - t0 < 5000)
        tx_sleep_us(1000);
    CHECK(atomic_load(&hog_steps) > before);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, hog, "stop", nil), 0);
    CHECK(wait_done(e, hog, 5000, &err));
    CHECK_EQ_INT(err, 0);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

/* ---- sleeps beside a long step ---- */

static void busy_ms(int ms)
{
    uint64_t t0 = sx_clock_now_ns();
    while (sx_clock_now_ns() - t0 < (uint64_t)ms * 1000000u)
        ;
}

/* Busy 20 ms (so that the workers share the four of them), then sleeps a
 * minute: every worker holds a far sleep. Terminated by stop. */
static int far_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    int *k = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    (void)ev, (void)n;
    if ((*k)++ == 0)
        busy_ms(20);
    sx_yield(out, SX_CMD_SLEEP, 1, sx_payload_int(b, 60000));
    return 0;
}

static sx_pid long_pid;
static _Atomic int64_t nap_late_ns;

typedef struct {
    uint64_t t0;
} napper_st;

/* On a message: sleeps 5 ms and sends long_pid a message (which then
 * runs next on this worker); on the sleep's answer: how late it was. */
static int napper_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    napper_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type == SX_EVENT_MESSAGE) {
            s->t0 = sx_clock_now_ns();
            sx_yield(out, SX_CMD_SLEEP, 1, sx_payload_int(b, 5));
            sx_send(out, long_pid, "work", nil);
            return 0;
        }
        atomic_store(&nap_late_ns,
                     (int64_t)(sx_clock_now_ns() - s->t0) - 5000000);
    }
    sx_idle(out);
    return 0;
}

/* A step of 1000 ms per message. */
static int long_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st, (void)ev;
    if (n > 0)
        busy_ms(1000);
    sx_idle(out);
    return 0;
}

/* A worker stuck in a long step delays its sleepers by about
 * SX__TIMER_RECHECK_MS (10 ms) at most when another worker idles
 * (engine/timer/sleep.c): with two parked workers that both hold far sleeps, a
 * message wakes one; its step sleeps 5 ms and hands that worker a 1000 ms
 * step. The other worker fires the sleep: under 250 ms late. It parked
 * while the first was parked, bounded by the far sleeps alone; were the
 * 5 ms sleep to wake nobody (a wake-up for a set's first entry only), it
 * would sleep on until its park timed out or the long step ended
 * (150-300 ms late with a 300 ms step; about 460 ms, what is left of the
 * 500 ms park, with this one). The bound is far above the 0.1-10 ms the
 * case sees (TSan, 2 cores under load) and far below the ~460 ms of a
 * missed wake-up: a 100 ms bound with a 300 ms step fails about one TSan
 * run in 30 beside TSan's stress suite (182.5 ms late). */
static void test_sleep_beside_long_step(void)
{
    const sx_process_type t[] = {
        { .name = "far",
          .state_size = sizeof(int),
          .init = no_init,
          .step = far_step },
        { .name = "napper",
          .state_size = sizeof(napper_st),
          .init = no_init,
          .step = napper_step },
        { .name = "long", .init = no_init, .step = long_step },
    };
    sx_engine *e = up(2, 0, t, 3);
    sx_pid napper, far;
    CHECK_RC(sx_engine_submit(e, "long", "run", NULL, 0, &long_pid), 0);
    CHECK_RC(sx_engine_submit(e, "napper", "run", NULL, 0, &napper), 0);
    for (int i = 0; i < 4; i++)
        CHECK_RC(sx_engine_submit(e, "far", "run", NULL, 0, &far), 0);
    for (int round = 0; round < 3; round++) {
        sx_engine_stats st;
        double t0 = sx_test_now_ms();
        /* Up to 20 s: under TSan beside other suites, about one run in
         * eight does not see both parked within 5 s (CPU starvation, as
         * far as can be told). The lateness bound below is what the case
         * checks. */
        do {
            tx_sleep_us(1000);
            CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
        } while (st.parked < 2 && sx_test_now_ms() - t0 < 20000);
        CHECK_EQ_INT(st.parked, 2);
        tx_sleep_us(30000); /* both parked for good, not for a re-check */
        atomic_store(&nap_late_ns, -1);
        CHECK_RC(sx_engine_send(e, SX_PID_NONE, napper, "go", nil), 0);
        t0 = sx_test_now_ms();
        while (atomic_load(&nap_late_ns) < 0 && sx_test_now_ms() - t0 < 5000)
            tx_sleep_us(1000);
        int64_t late = atomic_load(&nap_late_ns);
        if (late < 0 || late > 250 * 1000000LL)
            SX_FAILF("round %d: the 5 ms sleep was %.1f ms late", round,
                     (double)late / 1e6);
    }
    sx_engine_stop(e, 100);
    sx_engine_free(e);
}

/* ---- batch size --------------------------------------------------------- */

static _Atomic int batch_max, batch_total, batch_steps;

static int batch_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st;
    int m = atomic_load(&batch_max);
    if ((int)n > m)
        atomic_store(&batch_max, (int)n);
    atomic_fetch_add(&batch_steps, 1);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].topic, "end") == 0) {
            sx_done(out, nil);
            return 0;
        }
        atomic_fetch_add(&batch_total, 1);
    }
    sx_idle(out);
    return 0;
}

/* A step receives at most `throughput` events: 25 messages queued while a
 * process is idle arrive in batches of at most 4 (throughput 4), all of
 * them, in at least 7 steps. */
static void test_batch_limit(void)
{
    const sx_process_type t[] = {
        { .name = "batch", .init = no_init, .step = batch_step },
    };
    sx_engine *e = up(1, 4, t, 1);
    sx_pid p;
    CHECK_RC(sx_engine_submit(e, "batch", "run", NULL, 0, &p), 0);
    while (atomic_load(&batch_steps) < 1)
        tx_sleep_us(100);
    for (int i = 0; i < 25; i++)
        CHECK_RC(sx_engine_send(e, SX_PID_NONE, p, "m", nil), 0);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, p, "end", nil), 0);
    int err = -1;
    CHECK(wait_done(e, p, 5000, &err));
    CHECK_EQ_INT(err, 0);
    CHECK_EQ_INT(atomic_load(&batch_total), 25);
    CHECK(atomic_load(&batch_max) <= 4);
    CHECK(atomic_load(&batch_steps) >= 1 + 7);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

/* ---- stealing ---- */

static int busy_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    double t0 = sx_test_now_ms();
    while (sx_test_now_ms() - t0 < 2.0) {
    }
    sx_done(out, nil);
    return 0;
}

typedef struct {
    int got;
} fan_state;

static int fan_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    fan_state *s = st;
    if (n == 0 && s->got == 0) {
        uint8_t buf[64];
        sx_pack pk;
        for (int i = 0; i < 64; i++) {
            sx_pack_init_fixed(&pk, buf, sizeof(buf));
            sx_pack_array(&pk, 2);
            sx_pack_str(&pk, "busy");
            sx_pack_str(&pk, "run");
            sx_yield(out, SX_CMD_SPAWN_WAIT, (uint64_t)i, sx_pack_payload(&pk));
        }
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (ev[i].error == 0)
            s->got++;
    if (s->got == 64)
        sx_done(out, nil);
    else
        sx_wait(out);
    return 0;
}

/* Work spawned on one worker is stolen by the other: 64 children of 2 ms
 * each, spawned by one process, run on both workers (each ran steps, and
 * at least one steal moved processes), and all 64 results come back. */
static void test_stealing(void)
{
    const sx_process_type t[] = {
        { .name = "busy", .init = no_init, .step = busy_step },
        { .name = "fan",
          .state_size = sizeof(fan_state),
          .init = no_init,
          .step = fan_step },
    };
    sx_engine *e = up(2, 0, t, 2);
    sx_pid p;
    CHECK_RC(sx_engine_submit(e, "fan", "run", NULL, 0, &p), 0);
    int err = -1;
    CHECK(wait_done(e, p, 20000, &err));
    CHECK_EQ_INT(err, 0);
    sx_engine_stats st;
    sx_worker_stats ws[2];
    CHECK_RC(sx_engine_stats_get(e, &st, ws, 2), 0);
    printf("steps %llu / %llu, steals %llu / %llu, stolen %llu / %llu\n",
           (unsigned long long)ws[0].steps, (unsigned long long)ws[1].steps,
           (unsigned long long)ws[0].steals, (unsigned long long)ws[1].steals,
           (unsigned long long)ws[0].stolen, (unsigned long long)ws[1].stolen);
    CHECK(ws[0].steps > 0 && ws[1].steps > 0);
    CHECK(ws[0].stolen + ws[1].stolen > 0);
    CHECK_EQ_U64(st.completed, 65);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

/* ---- parking ---- */

static _Atomic int woke;

static int sleeper_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    (void)st, (void)ev;
    if (n > 0) {
        atomic_fetch_add(&woke, 1);
        sx_done(out, nil);
    } else {
        sx_idle(out);
    }
    return 0;
}

/* An engine with nothing to do parks every worker and runs no steps; a
 * message sent from outside then wakes a worker (counted as a wake-up) and
 * the process runs at once; no lost wake-up was counted (a park that
 * timed out beside queued work while every worker slept). */
static void test_park_and_wake(void)
{
    const sx_process_type t[] = {
        { .name = "sleeper", .init = no_init, .step = sleeper_step },
    };
    sx_engine *e = up(2, 0, t, 1);
    sx_pid p;
    CHECK_RC(sx_engine_submit(e, "sleeper", "run", NULL, 0, &p), 0);
    sx_engine_stats st;
    sx_worker_stats ws[2];
    double t0 = sx_test_now_ms();
    do {
        tx_sleep_us(1000);
        CHECK_RC(sx_engine_stats_get(e, &st, ws, 2), 0);
    } while (st.parked < 2 && sx_test_now_ms() - t0 < 5000);
    CHECK_EQ_INT(st.parked, 2);
    uint64_t steps = ws[0].steps + ws[1].steps;
    tx_sleep_us(50000);
    CHECK_RC(sx_engine_stats_get(e, &st, ws, 2), 0);
    CHECK_EQ_U64(ws[0].steps + ws[1].steps, steps);
    uint64_t wakeups = ws[0].wakeups + ws[1].wakeups;

    CHECK_RC(sx_engine_send(e, SX_PID_NONE, p, "go", nil), 0);
    int err = -1;
    CHECK(wait_done(e, p, 5000, &err));
    CHECK_EQ_INT(err, 0);
    CHECK_EQ_INT(atomic_load(&woke), 1);
    CHECK_RC(sx_engine_stats_get(e, &st, ws, 2), 0);
    CHECK(ws[0].wakeups + ws[1].wakeups > wakeups);
    CHECK_EQ_U64(ws[0].timeout_finds + ws[1].timeout_finds, 0);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

/* ---- listing ------------------------------------------------------------ */

static int idler_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    sx_idle(out);
    return 0;
}

static int blocker_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    sx_yield(out, 300, 1, nil); /* a command nobody completes */
    return 0;
}

static int hold(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                sx_payload args, sx_completer *done)
{
    (void)e, (void)pid, (void)tag, (void)args;
    *(sx_completer **)user = done;
    return 0;
}

static const char *const methods[] = { "run", "other", NULL };

/* The listing shows each live process with its type, method, state
 * (idle, blocked) and steps; finished processes disappear from it. */
static void test_listing(void)
{
    const sx_process_type t[] = {
        { .name = "idler",
          .init = no_init,
          .step = idler_step,
          .methods = methods },
        { .name = "blocker", .init = no_init, .step = blocker_step },
    };
    sx_engine_config cfg = { .workers = 1 };
    sx_completer *held = NULL;
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, t, 2);
    tx_engine_command(e, 300, "hold", hold, &held);
    tx_engine_start(e);
    sx_pid a, b;
    CHECK_RC(sx_engine_submit(e, "idler", "other", NULL, 0, &a), 0);
    CHECK_RC(sx_engine_submit(e, "blocker", "run", NULL, 0, &b), 0);
    sx_process_info info[4];
    int n = 0, idle = 0, blocked = 0;
    double t0 = sx_test_now_ms();
    while ((idle != 1 || blocked != 1) && sx_test_now_ms() - t0 < 5000) {
        tx_sleep_us(1000);
        n = sx_engine_list(e, info, 4);
        idle = blocked = 0;
        for (int i = 0; i < n; i++) {
            if (info[i].state == SX_PSTATE_IDLE && sx_pid_eq(info[i].pid, a) &&
                strcmp(info[i].type, "idler") == 0 && info[i].method != NULL &&
                strcmp(info[i].method, "other") == 0 && info[i].steps == 1)
                idle++;
            if (info[i].state == SX_PSTATE_BLOCKED &&
                sx_pid_eq(info[i].pid, b) &&
                strcmp(info[i].type, "blocker") == 0 && info[i].steps == 1)
                blocked++;
        }
    }
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(idle, 1);
    CHECK_EQ_INT(blocked, 1);
    CHECK_STR(sx_pstate_name(SX_PSTATE_IDLE), "idle");
    CHECK_RC(sx_engine_terminate(e, a), 0);
    CHECK_RC(sx_engine_terminate(e, b), 0);
    int err = 0;
    CHECK(wait_done(e, a, 5000, &err));
    CHECK_RC(err, SX_ETERMINATED);
    CHECK(wait_done(e, b, 5000, &err));
    CHECK_EQ_INT(sx_engine_list(e, info, 4), 0);
    CHECK(held != NULL);
    sx_complete(held, nil, 0, NULL); /* late: a no-op */
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

/* ---- submission order ------------------------------------------------- */

enum { ORDER_N = 150000 }; /* over 2 x SX__INJQ_CAP (65,536) */
static _Atomic int gate_open, gate_in;
static _Atomic int order_pos;
static int order_seen[ORDER_N];

/* Holds the only worker until gate_open. */
static int gate_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    atomic_store(&gate_in, 1);
    while (!atomic_load(&gate_open))
        tx_sleep_us(200);
    sx_done(out, nil);
    return 0;
}

static int rec_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    int64_t v;
    if (n != 1 || sx_payload_get_int(in[0], &v) != 0)
        return SX_EINVAL;
    *(int64_t *)st = v;
    return 0;
}

/* Records its number in the order the first steps run. */
static int rec_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    (void)ev, (void)n;
    int at = atomic_fetch_add(&order_pos, 1);
    if (at < ORDER_N)
        order_seen[at] = (int)*(int64_t *)st;
    sx_done(out, nil);
    return 0;
}

/* The processes one thread submits start about in the order it submitted
 * them (one worker), also past the injection ring's capacity (65,536):
 * 150,000 submits while the only worker is held overflow it, each time
 * moving its oldest 2,048 to the global queue, which workers look at
 * first.
 * "About": a worker's batches reorder a little (it takes up to 17 from the
 * global queue or 64 from the ring into its deque, and every 61st look
 * takes from the global queue before its deque), so each process must
 * start within 256 places of its number. Read the ring before the global
 * queue and thousands of the newest start first. */
static void test_submit_order(void)
{
    const sx_process_type t[] = {
        { .name = "gate", .init = no_init, .step = gate_step },
        { .name = "rec",
          .state_size = sizeof(int64_t),
          .init = rec_init,
          .step = rec_step },
    };
    /* keep_outcomes above ORDER_N + 1: with the default (10,000) the
     * worker can finish the gate and all ORDER_N processes before the
     * wait below, which would then find the gate's outcome evicted. */
    sx_engine_config cfg = { .workers = 1, .keep_outcomes = 2 * ORDER_N };
    sx_engine *e = tx_engine_up(&cfg, t, 2);
    sx_pid gate;
    CHECK_RC(sx_engine_submit(e, "gate", "run", NULL, 0, &gate), 0);
    while (!atomic_load(&gate_in))
        tx_sleep_us(100);
    for (int i = 0; i < ORDER_N; i++) {
        uint8_t b[SX_PAYLOAD_INT_MAX];
        sx_payload in = sx_payload_int(b, i);
        CHECK_RC(sx_engine_submit(e, "rec", "run", &in, 1, NULL), 0);
    }
    sx_engine_stats st;
    CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
    CHECK_EQ_U64(st.global_queue, ORDER_N);
    atomic_store(&gate_open, 1);
    int err = -1;
    CHECK(wait_done(e, gate, 5000, &err));
    for (int k = 0; k < 10000 && atomic_load(&order_pos) < ORDER_N; k++)
        tx_sleep_us(1000);
    CHECK_EQ_INT(atomic_load(&order_pos), ORDER_N);
    /* Stop joins the workers: their writes to order_seen are ours now. */
    CHECK_RC(sx_engine_stop(e, 1000), 0);
    int worst = 0, at = 0;
    for (int i = 0; i < ORDER_N; i++) {
        int d = abs(order_seen[i] - i);
        if (d > worst) {
            worst = d;
            at = i;
        }
    }
    printf("# farthest from its place: start %d was process %d\n", at,
           order_seen[at]);
    CHECK(worst <= 256);
    sx_engine_free(e);
}

/* ---- the send penalty (worker.c, wake_after_push; SCHEDULER.md) ------- */

/* The order in which steps ran, one letter per step: the tests below use
 * one worker, so the letters are written by one thread, and read by the
 * test's after a wait for a process that finished after them. */
static char plog[1 << 20];
static _Atomic int plog_n;

static void plog_put(char c)
{
    /* seq_cst (the default) is more than needed: one worker writes, and
     * the test reads after a wait, which orders the letters before it. */
    int i = atomic_fetch_add(&plog_n, 1);
    if (i < (int)sizeof plog)
        plog[i] = c;
}

typedef struct {
    int64_t letter, left;
    sx_pid to, to2;
} pen_st;

static int pen_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    pen_st *s = st;
    if (n < 2 || sx_payload_get_int(in[0], &s->letter) != 0 ||
        sx_payload_get_int(in[1], &s->left) != 0)
        return SX_EINVAL;
    for (size_t i = 2; i < n && i < 4; i++) {
        sx_unpack u;
        sx_unpack_init(&u, in[i]);
        if (sx_unpack_pid(&u, i == 2 ? &s->to : &s->to2) != 0)
            return SX_EINVAL;
    }
    return 0;
}

/* tick [letter, 0]: CONTINUEs, one letter per step, until a message. */
static int tick_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)ev;
    plog_put((char)((pen_st *)st)->letter);
    if (n > 0)
        sx_done(out, nil);
    return 0;
}

/* sink [letter, want]: IDLE; a letter per step that got messages; DONE
 * once it has `want`. */
static int sink_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)ev;
    pen_st *s = st;
    if (n > 0) {
        plog_put((char)s->letter);
        s->left -= (int64_t)n;
    }
    if (s->left <= 0)
        sx_done(out, nil);
    else
        sx_idle(out);
    return 0;
}

/* src [letter, k, to]: sends one message to `to` per step, k steps
 * (CONTINUE), then DONE. */
static int src_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    (void)ev, (void)n;
    pen_st *s = st;
    plog_put((char)s->letter);
    sx_send(out, s->to, "m", nil);
    if (--s->left == 0)
        sx_done(out, nil);
    return 0;
}

/* s3 [letter, 0, to, to2]: one step: sends to `to`, `to2`, `to` again
 * (the third push finds `to` READY: a penalty), then DONE. */
static int s3_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    (void)ev, (void)n;
    pen_st *s = st;
    plog_put((char)s->letter);
    sx_send(out, s->to, "m", nil);
    sx_send(out, s->to2, "m", nil);
    sx_send(out, s->to, "m", nil);
    sx_done(out, nil);
    return 0;
}

static const sx_process_type pen_types[] = {
    { .name = "tick",
      .state_size = sizeof(pen_st),
      .init = pen_init,
      .step = tick_step },
    { .name = "sink",
      .state_size = sizeof(pen_st),
      .init = pen_init,
      .step = sink_step },
    { .name = "src",
      .state_size = sizeof(pen_st),
      .init = pen_init,
      .step = src_step },
    { .name = "s3",
      .state_size = sizeof(pen_st),
      .init = pen_init,
      .step = s3_step },
};

static sx_pid pen_submit(sx_engine *e, const char *type, char letter, int64_t k,
                         const sx_pid *to, const sx_pid *to2)
{
    uint8_t lb[SX_PAYLOAD_INT_MAX], kb[SX_PAYLOAD_INT_MAX], tb[2][64];
    sx_payload in[4] = { sx_payload_int(lb, letter), sx_payload_int(kb, k) };
    size_t n = 2;
    const sx_pid *pids[2] = { to, to2 };
    for (int i = 0; i < 2 && pids[i] != NULL; i++) {
        sx_pack pk;
        sx_pack_init_fixed(&pk, tb[i], sizeof tb[i]);
        sx_pack_pid(&pk, *pids[i]);
        in[n++] = sx_pack_payload(&pk);
    }
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, type, "run", in, n, &pid), 0);
    return pid;
}

/* Property: a sender whose message finds its receiver READY (woken, not
 * yet run: it has earlier messages to read) ends its turn, so the
 * receiver runs. One worker, throughput 8: a producer sends one message
 * per step to an IDLE consumer, 6 steps; its first message wakes the
 * consumer (no penalty: it waited), its second finds it READY, so the
 * consumer's first step comes after 2 producer steps (without the penalty,
 * after all 6: the turn allows 8; negative control, penalty never set:
 * "PPPPPPC", fails). */
static void test_penalty_yields_turn(void)
{
    sx_engine *e = up(1, 8, pen_types, 4);
    atomic_store(&plog_n, 0);
    sx_pid c = pen_submit(e, "sink", 'C', 6, NULL, NULL);
    sx_process_info info;
    do { /* IDLE after its first step */
        tx_sleep_us(100);
        CHECK_EQ_INT(sx_engine_list(e, &info, 1), 1);
    } while (info.state != SX_PSTATE_IDLE);
    sx_pid p = pen_submit(e, "src", 'P', 6, &c, NULL);
    tx_wait_done(e, p, 5000, NULL);
    tx_wait_done(e, c, 5000, NULL);
    int n = atomic_load(&plog_n);
    plog[n < (int)sizeof plog ? n : (int)sizeof plog - 1] = 0;
    printf("# steps: %s\n", plog);
    CHECK(strncmp(plog, "PPC", 3) == 0);
    tx_engine_down(e);
}

/* Property: the penalty ends only the turn of the sender that incurred
 * it. One worker, throughput 4, two processes X and Y that CONTINUE for
 * ever take turns of exactly 4 steps; a process S sends to R, Z, R in its
 * one step and finishes (the third send finds R READY); after that, X's
 * and Y's turns are still 4 steps each. A penalty left set on the worker
 * would cut the next turn that ran to 1 step; it is cleared when a
 * process starts its turn (without that, this case fails 3 runs of 3:
 * "turn 0 after S: 1 steps of Y"). */
static void test_penalty_is_the_senders(void)
{
    sx_engine *e = up(1, 4, pen_types, 4);
    atomic_store(&plog_n, 0);
    sx_pid r = pen_submit(e, "sink", 'r', 2, NULL, NULL);
    sx_pid z = pen_submit(e, "sink", 'z', 1, NULL, NULL);
    sx_pid x = pen_submit(e, "tick", 'X', 0, NULL, NULL);
    sx_pid y = pen_submit(e, "tick", 'Y', 0, NULL, NULL);
    while (atomic_load(&plog_n) < 100)
        tx_sleep_us(100);
    sx_pid s = pen_submit(e, "s3", 'S', 0, &r, &z);
    tx_wait_done(e, s, 5000, NULL);
    tx_wait_done(e, r, 5000, NULL);
    tx_wait_done(e, z, 5000, NULL);
    int at = atomic_load(&plog_n);
    while (atomic_load(&plog_n) < at + 200)
        tx_sleep_us(100);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, x, "stop", nil), 0);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, y, "stop", nil), 0);
    tx_wait_done(e, x, 5000, NULL);
    tx_wait_done(e, y, 5000, NULL);
    int n = atomic_load(&plog_n);
    plog[n < (int)sizeof plog ? n : (int)sizeof plog - 1] = 0;
    const char *sp = strchr(plog, 'S');
    CHECK(sp != NULL);
    /* The first 8 runs of X or Y after S: each exactly 4 steps. */
    const char *q = sp + 1;
    for (int run = 0; run < 8; run++) {
        while (*q != 0 && *q != 'X' && *q != 'Y')
            q++;
        CHECK(*q != 0);
        char c = *q;
        int len = 0;
        while (*q == c) {
            len++;
            q++;
        }
        if (len != 4)
            SX_FAILF("turn %d after S: %d steps of %c, not 4 (log after S: "
                     "%.60s)",
                     run, len, c, sp);
    }
    tx_engine_down(e);
}

/* ---- a chain of hand-offs through the next slot ------------------------ */

/* How many balls the pair below has exchanged, and the count at which the
 * bystander ran (-1: not yet). */
static _Atomic int64_t chain_balls;
static _Atomic int64_t chain_bystander_at;

#define CHAIN_LIMIT 200000

/* bystander: IDLE; on a message, notes when it ran and finishes. */
static int bystander_step(void *st, const sx_event *ev, size_t n,
                          sx_step_output *out)
{
    (void)st, (void)ev;
    if (n == 0) {
        sx_idle(out);
        return 0;
    }
    atomic_store(&chain_bystander_at, atomic_load(&chain_balls));
    sx_done(out, nil);
    return 0;
}

/* echo: IDLE; sends every message back to its sender; DONE on "stop". */
static int echo_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].topic, "stop") == 0) {
            sx_done(out, nil);
            return 0;
        }
        sx_send(out, ev[i].from, "ball", nil);
    }
    sx_idle(out);
    return 0;
}

/* server [letter, 0, bystander, echo]: its first step wakes the bystander
 * and then serves the ball to echo (so the bystander leaves the worker's
 * next slot for its deque); then it returns the ball until the bystander
 * ran or CHAIN_LIMIT balls went by, and stops echo. */
static int server_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    (void)ev;
    pen_st *s = st;
    if (n == 0) {
        sx_send(out, s->to, "wake", nil);
        sx_send(out, s->to2, "ball", nil);
        sx_idle(out);
        return 0;
    }
    int64_t k = atomic_fetch_add(&chain_balls, (int64_t)n) + (int64_t)n;
    if (atomic_load(&chain_bystander_at) >= 0 || k >= CHAIN_LIMIT) {
        sx_send(out, s->to2, "stop", nil);
        sx_done(out, nil);
        return 0;
    }
    sx_send(out, s->to2, "ball", nil);
    sx_idle(out);
    return 0;
}

static const sx_process_type chain_types[] = {
    { .name = "bystander", .init = no_init, .step = bystander_step },
    { .name = "echo", .init = no_init, .step = echo_step },
    { .name = "server",
      .state_size = sizeof(pen_st),
      .init = pen_init,
      .step = server_step },
};

/* Waits until want listed processes are IDLE and `others` more are
 * listed (in any state). */
static void wait_idle_beside(sx_engine *e, size_t want, size_t others)
{
    double t0 = sx_test_now_ms();
    for (;;) {
        sx_process_info info[4];
        int n = sx_engine_list(e, info, 4);
        int idle = 0;
        for (int i = 0; i < n && i < 4; i++)
            idle += info[i].state == SX_PSTATE_IDLE;
        if (n == (int)(want + others) && idle == (int)want)
            return;
        if (sx_test_now_ms() - t0 > 5000)
            SX_FAILF("processes not idle after 5 s (%d listed)", n);
        tx_sleep_us(100);
    }
}

/* Waits until every listed process is IDLE. */
static void wait_all_idle(sx_engine *e, size_t want)
{
    wait_idle_beside(e, want, 0);
}

/* hold: one step that keeps its worker until hold_release (at most 60 s),
 * then done; hold_running says it began, hold_over that it is ending. */
static _Atomic bool hold_running, hold_release, hold_over;

static int hold_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    atomic_store(&hold_running, true);
    tx_spin_until(&hold_release, 60000);
    atomic_store(&hold_over, true);
    sx_done(out, nil);
    return 0;
}

/* Property: a process woken on a worker runs even while two others keep
 * handing a message to each other through that worker's next slot. One
 * worker: the server's first step wakes the bystander (next slot) and
 * then serves echo (next slot; the bystander moves to the deque); from
 * then on server and echo wake each other, each taking the next slot
 * that the other left empty, and the worker finds its next slot full on
 * every search. Without a look past the next slot the deque (the
 * bystander) would never be looked at again, and no other worker exists
 * to steal it: the bystander would run only when the pair stopped on its
 * own, after CHAIN_LIMIT balls, 5 runs of 5 (with more workers it waits
 * until another worker steals it). */
static void chain_run(bool busy, unsigned workers)
{
    const sx_process_type t[] = {
        chain_types[0],
        chain_types[1],
        chain_types[2],
        { .name = "quick", .init = no_init, .step = quick_step },
        { .name = "hold", .init = no_init, .step = hold_step },
    };
    sx_engine *e = up(workers, 8, t, 5);
    atomic_store(&chain_balls, 0);
    atomic_store(&chain_bystander_at, -1);
    atomic_store(&hold_running, false);
    atomic_store(&hold_release, false);
    atomic_store(&hold_over, false);
    /* Two workers: one held by a single step from the start, so that the
     * other plays alone, as one worker does, with a worker beside it
     * (the next slot's spills then go to its deque). */
    sx_pid hold = SX_PID_NONE;
    if (workers > 1) {
        CHECK_RC(sx_engine_submit(e, "hold", "run", NULL, 0, &hold), 0);
        TX_WAIT_UNTIL(atomic_load(&hold_running), 5000, 100);
    }
    sx_pid c, b, a;
    CHECK_RC(sx_engine_submit(e, "bystander", "run", NULL, 0, &c), 0);
    CHECK_RC(sx_engine_submit(e, "echo", "run", NULL, 0, &b), 0);
    wait_idle_beside(e, 2, workers > 1);
    a = pen_submit(e, "server", 'S', 0, &c, &b);
    /* busy: new processes keep coming from outside while the pair plays,
     * so that the worker's every 61st search finds the injection ring
     * non-empty (what it takes goes onto its deque, too). */
    unsigned submitted = 0;
    double t0 = sx_test_now_ms();
    while (atomic_load(&chain_bystander_at) < 0 &&
           atomic_load(&chain_balls) < CHAIN_LIMIT) {
        if (busy && submitted < 100000) {
            sx_pid q;
            CHECK_RC(sx_engine_submit(e, "quick", "run", NULL, 0, &q), 0);
            submitted++;
        } else {
            tx_sleep_us(100);
        }
        if (sx_test_now_ms() - t0 > 60000)
            SX_FAILF("no end after 60 s: %lld balls",
                     (long long)atomic_load(&chain_balls));
    }
    atomic_store(&hold_release, true);
    /* Not sx_engine_wait for hold: when busy, its outcome may no longer
     * be kept once the quick processes still queued have finished. */
    if (workers > 1)
        TX_WAIT_UNTIL(atomic_load(&hold_over), 10000, 100);
    if (!busy) {
        tx_wait_done(e, a, 5000, NULL);
        tx_wait_done(e, b, 5000, NULL);
        tx_wait_done(e, c, 5000, NULL);
    }
    int64_t at = atomic_load(&chain_bystander_at);
    printf("# the bystander ran after %lld balls (%u submitted meanwhile)\n",
           (long long)at, submitted);
    CHECK(at >= 0);
    /* Quiet: a look past the next slot every 61st search, the bystander
     * first in the deque: within 61 searches, ~30 balls. Busy: every
     * other such look takes the deque's oldest, and up to 63 processes
     * that the worker took from the ring with the server (one grab, 64 at
     * most) are older than the bystander: within 64 x 122 searches, ~3,900
     * balls (3,800 seen). Without the look: CHAIN_LIMIT. */
    CHECK(at < (busy ? 5000 : 100));
    CHECK_RC(sx_engine_stop(e, 10000), 0);
    sx_engine_free(e);
}

static void test_next_slot_chain(void)
{
    chain_run(false, 1);
}

/* Property: the same while new processes keep coming from outside: the
 * search that looks past the next slot must not always find the global
 * queues first. */
static void test_next_slot_chain_busy(void)
{
    chain_run(true, 1);
}

/* Property: the same on a worker beside another that a long step keeps
 * busy: the next slot's process that a look past it spills to the deque
 * (docs/SCHEDULER.md §2), popped right after, does not count as the
 * deque's turn, so the deque's oldest is still taken as often. */
static void test_next_slot_chain_busy_two(void)
{
    chain_run(true, 2);
}

/* poker [letter, 0, bystander, echo, sink]: as server, but each ball it
 * returns to echo is followed by a message to sink, which idles on every
 * message. So echo, woken into the next slot, goes to the deque's top
 * when sink takes the slot; sink's step wakes nobody, and the next search
 * finds the next slot empty and pops echo: the worker pops its deque once
 * per ball, always echo, never the bystander below it. */
typedef struct {
    pen_st pen;
    sx_pid sink;
} poker_st;

static int poker_init(void *st, const sx_init_ctx *c, const char *m,
                      const sx_payload *in, size_t n)
{
    poker_st *s = st;
    if (n != 5)
        return SX_EINVAL;
    sx_unpack u;
    sx_unpack_init(&u, in[4]);
    if (sx_unpack_pid(&u, &s->sink) != 0)
        return SX_EINVAL;
    return pen_init(&s->pen, c, m, in, 4);
}

static int poker_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)ev;
    poker_st *s = st;
    if (n == 0) {
        sx_send(out, s->pen.to, "wake", nil);
        sx_send(out, s->pen.to2, "ball", nil);
        sx_idle(out);
        return 0;
    }
    int64_t k = atomic_fetch_add(&chain_balls, (int64_t)n) + (int64_t)n;
    if (atomic_load(&chain_bystander_at) >= 0 || k >= CHAIN_LIMIT) {
        sx_send(out, s->pen.to2, "stop", nil);
        sx_send(out, s->sink, "stop", nil);
        sx_done(out, nil);
        return 0;
    }
    sx_send(out, s->pen.to2, "ball", nil);
    sx_send(out, s->sink, "poke", nil);
    sx_idle(out);
    return 0;
}

/* poked: IDLE on every message; DONE on "stop". */
static int poked_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].topic, "stop") == 0) {
            sx_done(out, nil);
            return 0;
        }
    }
    sx_idle(out);
    return 0;
}

/* Property: the bystander below the deque's top runs too when the deque
 * is popped between the every-61st looks (LIFO: always the item above
 * it, echo) and nobody steals (one worker). A look at the deque's oldest
 * only when the deque went unpopped while the next slot was busy would
 * never take it: the bystander would run only when the pair stopped on
 * its own, after CHAIN_LIMIT balls. */
static void test_deque_popped_chain(void)
{
    const sx_process_type t[] = {
        chain_types[0],
        chain_types[1],
        { .name = "poker",
          .state_size = sizeof(poker_st),
          .init = poker_init,
          .step = poker_step },
        { .name = "sink", .init = no_init, .step = poked_step },
    };
    sx_engine *e = up(1, 8, t, 4);
    atomic_store(&chain_balls, 0);
    atomic_store(&chain_bystander_at, -1);
    sx_pid c, b, k;
    CHECK_RC(sx_engine_submit(e, "bystander", "run", NULL, 0, &c), 0);
    CHECK_RC(sx_engine_submit(e, "echo", "run", NULL, 0, &b), 0);
    CHECK_RC(sx_engine_submit(e, "sink", "run", NULL, 0, &k), 0);
    wait_all_idle(e, 3);
    uint8_t lb[SX_PAYLOAD_INT_MAX], kb[SX_PAYLOAD_INT_MAX], tb[3][64];
    sx_payload in[5] = { sx_payload_int(lb, 'P'), sx_payload_int(kb, 0) };
    const sx_pid *pids[3] = { &c, &b, &k };
    for (int i = 0; i < 3; i++) {
        sx_pack pk;
        sx_pack_init_fixed(&pk, tb[i], sizeof tb[i]);
        sx_pack_pid(&pk, *pids[i]);
        in[2 + i] = sx_pack_payload(&pk);
    }
    sx_pid a;
    CHECK_RC(sx_engine_submit(e, "poker", "run", in, 5, &a), 0);
    tx_wait_done(e, a, 5000, NULL);
    tx_wait_done(e, b, 5000, NULL);
    tx_wait_done(e, c, 5000, NULL);
    tx_wait_done(e, k, 5000, NULL);
    int64_t at = atomic_load(&chain_bystander_at);
    printf("# the bystander ran after %lld balls\n", (long long)at);
    CHECK(at >= 0);
    /* The same oldest item at 16 fair looks in a row is taken: ~16 x 61
     * searches, three a ball, ~330 balls (339 seen). Without that rule:
     * CHAIN_LIMIT (200,000). */
    CHECK(at < 1000);
    CHECK_RC(sx_engine_stop(e, 10000), 0);
    sx_engine_free(e);
}

/* ---- answers given at once ------------------------------------------
 *
 * A handler that answers at once, on the worker running the process, has
 * its answer held by that worker for the process's next step instead of
 * pushed into the mailbox (engine/core/dispatch.c, sx_complete). Each case
 * checks that the step still gets what the mailbox would have given it. */

#define CMD_NOW 300       /* answers at once: its tag, or nothing if even */
#define CMD_SEND_THEN 301 /* sends "m<tag>" to the process, then answers */
#define CMD_THEN_SEND 302 /* answers, then sends "m<tag>" */
#define CMD_KILL_SELF 303 /* terminates the process, then answers */

static int cmd_now(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                   sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)args;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_complete(done, tag & 1 ? sx_payload_int(b, (int64_t)tag) : nil, 0, NULL);
    return 0;
}

static void send_tag(sx_engine *e, sx_pid pid, uint64_t tag)
{
    char topic[32];
    snprintf(topic, sizeof topic, "m%llu", (unsigned long long)tag);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, pid, topic, nil), 0);
}

static int cmd_send_then(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                         sx_payload args, sx_completer *done)
{
    (void)user, (void)args;
    send_tag(e, pid, tag);
    sx_complete(done, nil, 0, NULL);
    return 0;
}

static int cmd_then_send(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                         sx_payload args, sx_completer *done)
{
    (void)user, (void)args;
    sx_complete(done, nil, 0, NULL);
    send_tag(e, pid, tag);
    return 0;
}

static int cmd_kill_self(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                         sx_payload args, sx_completer *done)
{
    (void)user, (void)tag, (void)args;
    CHECK_RC(sx_engine_terminate(e, pid), 0);
    /* Larger than a node's inline bytes: the answer owns a heap block. */
    uint8_t big[300];
    memset(big, 0xab, sizeof big);
    sx_complete(done, (sx_payload){ big, sizeof big }, 0, NULL);
    return 0;
}

static sx_engine *up_held(unsigned throughput, const sx_process_type *t,
                          size_t n)
{
    sx_engine_config cfg = { .workers = 1, .throughput = throughput };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, t, n);
    tx_engine_command(e, CMD_NOW, "now", cmd_now, NULL);
    tx_engine_command(e, CMD_SEND_THEN, "send_then", cmd_send_then, NULL);
    tx_engine_command(e, CMD_THEN_SEND, "then_send", cmd_then_send, NULL);
    tx_engine_command(e, CMD_KILL_SELF, "kill_self", cmd_kill_self, NULL);
    tx_engine_start(e);
    return e;
}

#define NOW_YIELDS 50

typedef struct {
    uint64_t next; /* the tag expected next */
    size_t max_batch;
    int bad;
} now_state;

static _Atomic int now_bad = -1;
static _Atomic size_t now_max_batch;

/* Step 1 yields CMD_NOW with tags 1..NOW_YIELDS; every later step checks
 * that its answers come in tag order, each once, with its bytes. */
static int now_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    now_state *s = st;
    if (s->next == 0) {
        s->next = 1;
        for (uint64_t t = 1; t <= NOW_YIELDS; t++)
            sx_yield(out, CMD_NOW, t, nil);
        sx_wait(out);
        return 0;
    }
    if (n > s->max_batch)
        s->max_batch = n;
    for (size_t i = 0; i < n; i++) {
        int64_t v = 0;
        bool ok = ev[i].type == SX_EVENT_YIELD_COMPLETE && ev[i].error == 0 &&
                  ev[i].tag == s->next &&
                  (s->next & 1 ? sx_payload_get_int(ev[i].data, &v) == 0 &&
                                     v == (int64_t)s->next
                               : ev[i].data.len == 0);
        if (!ok && s->bad == 0)
            s->bad = (int)s->next;
        s->next++;
    }
    if (s->next > NOW_YIELDS) {
        atomic_store(&now_bad, s->bad);
        atomic_store(&now_max_batch, s->max_batch);
        sx_done(out, nil);
    } else {
        sx_wait(out);
    }
    return 0;
}

/* 50 answers given at once in one dispatch, on one worker beside a
 * process that never waits: with a throughput of 1 the turn ends with
 * every answer held, with 4 after the step that took the first 4. The
 * step gets all 50, in order, each once, with its bytes, never more than
 * the throughput at a time. */
static void test_held_answers_order(void)
{
    const sx_process_type t[] = {
        { .name = "now",
          .state_size = sizeof(now_state),
          .init = no_init,
          .step = now_step },
        { .name = "hog", .init = no_init, .step = hog_step },
    };
    for (unsigned tp = 1; tp <= 4; tp += 3) {
        sx_engine *e = up_held(tp, t, 2);
        sx_pid hog, p;
        CHECK_RC(sx_engine_submit(e, "hog", "run", NULL, 0, &hog), 0);
        CHECK_RC(sx_engine_submit(e, "now", "run", NULL, 0, &p), 0);
        int err = -1;
        atomic_store(&now_bad, -1);
        CHECK(wait_done(e, p, 5000, &err));
        CHECK_EQ_INT(err, 0);
        CHECK_EQ_INT(atomic_load(&now_bad), 0);
        CHECK(atomic_load(&now_max_batch) >= 1 &&
              atomic_load(&now_max_batch) <= tp);
        CHECK_RC(sx_engine_send(e, SX_PID_NONE, hog, "stop", nil), 0);
        CHECK(wait_done(e, hog, 5000, &err));
        sx_engine_stop(e, 1000);
        sx_engine_free(e);
    }
}

typedef struct {
    int phase;
    char seq[64];
    size_t len;
} order_state;

static char order_seq[2][64];

/* Round 0 yields [answer then send 1, send then answer 2]; round 1
 * [send then answer 3, answer then send 4]. Each round waits for its four
 * events and notes them in order: "c<tag>" an answer, "m<tag>" a
 * message. */
static int mixed_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    order_state *s = st;
    if (s->phase == 0) {
        s->phase = 1;
        sx_yield(out, CMD_THEN_SEND, 1, nil);
        sx_yield(out, CMD_SEND_THEN, 2, nil);
        sx_wait(out);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int w = 0;
        if (ev[i].type == SX_EVENT_YIELD_COMPLETE)
            w = snprintf(s->seq + s->len, sizeof s->seq - s->len, "c%llu ",
                         (unsigned long long)ev[i].tag);
        else if (ev[i].type == SX_EVENT_MESSAGE && ev[i].topic != NULL)
            w = snprintf(s->seq + s->len, sizeof s->seq - s->len, "%s ",
                         ev[i].topic);
        if (w > 0 && (size_t)w < sizeof s->seq - s->len)
            s->len += (size_t)w;
    }
    if (s->len < 12) {
        sx_wait(out);
        return 0;
    }
    memcpy(order_seq[s->phase - 1], s->seq, s->len + 1);
    s->len = 0;
    s->seq[0] = 0;
    if (s->phase == 2) {
        sx_done(out, nil);
        return 0;
    }
    s->phase = 2;
    sx_yield(out, CMD_SEND_THEN, 3, nil);
    sx_yield(out, CMD_THEN_SEND, 4, nil);
    sx_wait(out);
    return 0;
}

/* Handlers that also send to the process they answer: the step sees each
 * answer and each message in the order they were given, as if every one
 * had gone through the mailbox. An answer given after a message is not
 * held ahead of it (held regardless, round 0 reads "c1 c2 m1 m2"). */
static void test_held_answers_beside_sends(void)
{
    const sx_process_type t[] = {
        { .name = "mixed",
          .state_size = sizeof(order_state),
          .init = no_init,
          .step = mixed_step },
    };
    sx_engine *e = up_held(32, t, 1);
    sx_pid p;
    CHECK_RC(sx_engine_submit(e, "mixed", "run", NULL, 0, &p), 0);
    int err = -1;
    CHECK(wait_done(e, p, 5000, &err));
    CHECK_EQ_INT(err, 0);
    CHECK_STR(order_seq[0], "c1 m1 m2 c2 ");
    CHECK_STR(order_seq[1], "m3 c3 c4 m4 ");
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

static _Atomic int kill_events;

/* Its one step is its first: it gets no events. */
static int kill_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st, (void)ev;
    atomic_fetch_add(&kill_events, (int)n);
    for (uint64_t t = 1; t <= 3; t++)
        sx_yield(out, CMD_KILL_SELF, t, nil);
    sx_wait(out);
    return 0;
}

/* A process terminated while the worker holds answers for it ends
 * SX_ETERMINATED, and the held answers are freed with it (ASan's leak
 * check); the processes after it on the worker get none of them. */
static void test_held_answers_terminated(void)
{
    const sx_process_type t[] = {
        { .name = "kill", .init = no_init, .step = kill_step },
        { .name = "now",
          .state_size = sizeof(now_state),
          .init = no_init,
          .step = now_step },
    };
    sx_engine *e = up_held(32, t, 2);
    for (int i = 0; i < 20; i++) {
        sx_pid k;
        CHECK_RC(sx_engine_submit(e, "kill", "run", NULL, 0, &k), 0);
        int err = 0;
        CHECK(wait_done(e, k, 5000, &err));
        CHECK_EQ_INT(err, SX_ETERMINATED);
    }
    CHECK_EQ_INT(atomic_load(&kill_events), 0);
    atomic_store(&now_bad, -1);
    sx_pid p;
    CHECK_RC(sx_engine_submit(e, "now", "run", NULL, 0, &p), 0);
    int err = -1;
    CHECK(wait_done(e, p, 5000, &err));
    CHECK_EQ_INT(err, 0);
    CHECK_EQ_INT(atomic_load(&now_bad), 0);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

#define CMD_STASH 304 /* keeps its completer in `stashed`, answers later */

static sx_completer *_Atomic stashed;
static _Atomic int idle_steps;
static char idle_seq[64];
static sx_pid idle_box;

static int cmd_stash(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag, (void)args;
    atomic_store(&stashed, done);
    return 0;
}

/* The outside mailbox: runs on the sender's thread, and answers the
 * stashed yield there. */
static void idle_box_fn(void *user, const sx_message *msg)
{
    (void)user, (void)msg;
    sx_completer *c = atomic_exchange(&stashed, NULL);
    if (c != NULL)
        sx_complete(c, nil, 0, NULL);
}

/* Step 1 yields CMD_STASH (tag 7) and waits; the message "go" runs step
 * 2, which sends to the outside mailbox (whose fn answers tag 7 on this
 * worker, during this dispatch) and goes IDLE; "wake" runs step 3. Steps
 * 2 and 3 note their events. */
static int stasher_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    (void)st;
    int k = atomic_fetch_add(&idle_steps, 1) + 1;
    if (k == 1) {
        sx_yield(out, CMD_STASH, 7, nil);
        sx_wait(out);
        return 0;
    }
    size_t len = strlen(idle_seq);
    for (size_t i = 0; i < n; i++) {
        int w = ev[i].type == SX_EVENT_YIELD_COMPLETE
                    ? snprintf(idle_seq + len, sizeof idle_seq - len, "c%llu ",
                               (unsigned long long)ev[i].tag)
                    : snprintf(idle_seq + len, sizeof idle_seq - len, "%s ",
                               ev[i].topic != NULL ? ev[i].topic : "?");
        if (w > 0 && (size_t)w < sizeof idle_seq - len)
            len += (size_t)w;
    }
    if (k == 2) {
        sx_send(out, idle_box, "x", nil);
        sx_idle(out);
        return 0;
    }
    sx_done(out, nil);
    return 0;
}

/* An answer held during the dispatch of a step that goes IDLE (a send to
 * an outside mailbox whose fn answers an earlier yield) does not wake the
 * process, as an answer in its mailbox would not; the message that wakes
 * it next gets that answer first, in one batch. */
static void test_held_answers_idle(void)
{
    const sx_process_type t[] = {
        { .name = "stasher", .init = no_init, .step = stasher_step },
    };
    sx_engine_config cfg = { .workers = 1 };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, t, 1);
    tx_engine_command(e, CMD_STASH, "stash", cmd_stash, NULL);
    tx_engine_start(e);
    CHECK_RC(sx_engine_mailbox_new(e, idle_box_fn, NULL, &idle_box), 0);
    sx_pid p;
    CHECK_RC(sx_engine_submit(e, "stasher", "run", NULL, 0, &p), 0);
    TX_WAIT_UNTIL(atomic_load(&stashed) != NULL, 5000, 100);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, p, "go", nil), 0);
    TX_WAIT_UNTIL(atomic_load(&idle_steps) >= 2, 5000, 100);
    tx_sleep_ms(50);
    CHECK_EQ_INT(atomic_load(&idle_steps), 2);
    CHECK(atomic_load(&stashed) == NULL);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, p, "wake", nil), 0);
    int err = -1;
    CHECK(wait_done(e, p, 5000, &err));
    CHECK_EQ_INT(err, 0);
    CHECK_STR(idle_seq, "go c7 wake ");
    CHECK_RC(sx_engine_mailbox_free(e, idle_box), 0);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

/* ---- slot order ------------------------------------------------------ */

/* Processes spawned one after another share no cache line of their slots:
 * among the first 64 processes one thread submits to a fresh engine, any
 * four in a row sit on slots whose lines are pairwise apart. Two 96-byte
 * neighbours share a line (docs/ARCHITECTURE.md, "Memory"), so handing
 * slots out in address order would put every second pair on one line
 * (the first two processes, say a consumer and its first producer). */
static void test_spawn_order_lines(void)
{
    const sx_process_type t[] = {
        { .name = "idler", .init = no_init, .step = idler_step },
    };
    enum { N = 64, WINDOW = 4, LINE = 64 };
    sx_engine *e = up(1, 0, t, 1);
    sx_pid pid[N];
    uintptr_t lo[N], hi[N]; /* first and last line of each slot */
    for (int i = 0; i < N; i++) {
        CHECK_RC(sx_engine_submit(e, "idler", "run", NULL, 0, &pid[i]), 0);
        sx__proc *p = sx__ptable_get(e, pid[i]);
        CHECK(p != NULL);
        if (p == NULL)
            return;
        lo[i] = (uintptr_t)p / LINE;
        hi[i] = ((uintptr_t)p + sizeof(*p) - 1) / LINE;
        sx__proc_release(e, p);
    }
    int shared = 0;
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N && j < i + WINDOW; j++)
            if (lo[i] <= hi[j] && lo[j] <= hi[i]) {
                if (shared++ < 4)
                    fprintf(stderr, "  processes %d and %d share a line\n", i,
                            j);
            }
    CHECK_EQ_INT(shared, 0);
    for (int i = 0; i < N; i++)
        CHECK_RC(sx_engine_terminate(e, pid[i]), 0);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

/* ---- pages faulted in ahead --------------------------------------------- */

static bool resident(const void *from, const void *to, size_t *missing)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)from & ~(uintptr_t)(pg - 1);
    uintptr_t b = ((uintptr_t)to + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    size_t n = (b - a) / (size_t)pg;
    unsigned char *vec = malloc(n);
    if (vec == NULL || mincore((void *)a, b - a, vec) != 0) {
        free(vec);
        *missing = n;
        return false;
    }
    *missing = 0;
    for (size_t i = 0; i < n; i++)
        *missing += (vec[i] & 1) == 0;
    free(vec);
    return *missing == 0;
}

/* The slot of index idx in e's table, or NULL where its segment is not
 * mapped (the segments as engine/core/ptable.c lays them out). */
static const sx__proc *slot_of(sx_engine *e, uint32_t idx)
{
    uint64_t q = (uint64_t)idx / SX__SEG_BASE + 1;
    unsigned k = 63u - (unsigned)__builtin_clzll(q);
    uint64_t off = (uint64_t)idx - (uint64_t)SX__SEG_BASE * ((1ull << k) - 1);
    const sx__proc *seg =
        atomic_load_explicit(&e->segs[k], memory_order_acquire);
    return seg != NULL ? seg + off : NULL;
}

/* Pages of the slots [from, to) of e's table not resident (a slot in an
 * unmapped segment counts as one). */
static size_t missing_slots(sx_engine *e, uint32_t from, uint32_t to)
{
    size_t missing = 0;
    for (uint32_t i = from; i < to; i++) {
        const sx__proc *p = slot_of(e, i);
        size_t m = 1;
        if (p != NULL)
            resident(p, p + 1, &m);
        missing += m;
    }
    return missing;
}

/* Idle workers fault in the process table's next pages ahead of where
 * slots are carved (sx__ptable_prefault), mapping the next segment when
 * the window reaches into it, so that the next burst of spawns does not
 * fault on the spawning thread. Nothing else touches the slots beyond the
 * frontier: without it they stay not resident (or not even mapped). n
 * processes are submitted; then the slots from 64 to 1024 past the
 * carving's frontier must become resident. */
static void prefault_after(uint32_t n)
{
    const sx_process_type t[] = {
        { .name = "idler", .init = no_init, .step = idler_step },
    };
    sx_engine *e = up(2, 0, t, 1);
    sx_pid *pid = calloc(n, sizeof(*pid));
    CHECK(pid != NULL);
    if (pid == NULL)
        return;
    for (uint32_t i = 0; i < n; i++)
        CHECK_RC(sx_engine_submit(e, "idler", "run", NULL, 0, &pid[i]), 0);
    /* relaxed: the submits above carved on this thread. */
    uint32_t end = atomic_load_explicit(&e->carved_end, memory_order_relaxed);
    CHECK(end >= n && end < n + 64);
    size_t missing = 0;
    for (int i = 0; i < 500; i++) {
        missing = missing_slots(e, end + 64, end + 1024);
        if (missing == 0)
            break;
        tx_sleep_ms(10);
    }
    if (missing != 0)
        fprintf(stderr, "  %zu slots' pages ahead of %u not resident\n",
                missing, end);
    CHECK_EQ_INT((int)missing, 0);
    for (uint32_t i = 0; i < n; i++)
        CHECK_RC(sx_engine_terminate(e, pid[i]), 0);
    free(pid);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

static void test_prefault_ahead(void)
{
    /* The window inside one segment: the third (slots 3 * SEG_BASE to
     * 7 * SEG_BASE), mapped on its own. */
    prefault_after(3 * SX__SEG_BASE + 32);
    /* The window past the end of the second segment, into the third,
     * which no carving has needed yet. */
    prefault_after(3 * SX__SEG_BASE - 96);
}

/* Nothing past max_slots is faulted in: those slots are never carved.
 * The table is carved to its cap; after the idle workers have had ten
 * times what prefault_after's window takes, no page wholly past the cap
 * is resident (slots 64 to 1024 past it, in the segment the cap ends
 * in). */
static void test_prefault_stops_at_cap(void)
{
    const sx_process_type t[] = {
        { .name = "idler", .init = no_init, .step = idler_step },
    };
    enum { CAP = 3 * SX__SEG_BASE + 64, N = CAP };
    sx_engine_config cfg = { .workers = 2, .max_slots = CAP };
    sx_engine *e = tx_engine_up(&cfg, t, 1);
    sx_pid *pid = calloc(N, sizeof(*pid));
    CHECK(pid != NULL);
    if (pid == NULL)
        return;
    size_t n = 0;
    while (n < N && sx_engine_submit(e, "idler", "run", NULL, 0, &pid[n]) == 0)
        n++;
    /* relaxed: the submits above carved on this thread. */
    uint32_t end = atomic_load_explicit(&e->carved_end, memory_order_relaxed);
    CHECK_EQ_INT((int)end, CAP);
    tx_sleep_ms(200);
    int in = 0; /* slots past the cap whose pages are all resident */
    for (uint32_t i = CAP + 64; i < CAP + 1024; i++) {
        const sx__proc *p = slot_of(e, i);
        size_t m = 1;
        if (p != NULL)
            resident(p, p + 1, &m);
        in += m == 0;
    }
    if (in != 0)
        fprintf(stderr, "  %d slots past the cap resident\n", in);
    CHECK_EQ_INT(in, 0);
    for (size_t i = 0; i < n; i++)
        CHECK_RC(sx_engine_terminate(e, pid[i]), 0);
    free(pid);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

/* ---- what a long-running process woke ---------------------------------- */

/* The process that sender's first step woke, the time that step ended and
 * the time the woken one ran (ns on tx_now_ns; 0: not yet). */
static sx_pid woken_pid;
static _Atomic int64_t woke_sent_ns, woke_ran_ns;

#define SENDER_STEPS 12
#define SENDER_STEP_MS 30

/* sender: SENDER_STEPS steps of SENDER_STEP_MS each, always READY for
 * the next; the first sends "go" to woken_pid. */
static int sender_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    (void)ev, (void)n;
    int *k = st;
    if (*k == 0)
        sx_send(out, woken_pid, "go", nil);
    busy_ms(SENDER_STEP_MS);
    if (*k == 0)
        atomic_store(&woke_sent_ns, (int64_t)tx_now_ns());
    if (++*k == SENDER_STEPS)
        sx_done(out, nil);
    return 0;
}

/* woken: IDLE until a message; notes when it came and finishes. */
static int woken_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st, (void)ev;
    if (n == 0) {
        sx_idle(out);
        return 0;
    }
    atomic_store(&woke_ran_ns, (int64_t)tx_now_ns());
    sx_done(out, nil);
    return 0;
}

/* Submits "woken" (woken_pid) on e, the engine's only process, and waits
 * until it is IDLE: the next message to it wakes it. */
static void submit_woken(sx_engine *e)
{
    sx_process_info info = { .state = 0 };
    CHECK_RC(sx_engine_submit(e, "woken", "run", NULL, 0, &woken_pid), 0);
    TX_WAIT_UNTIL(sx_engine_list(e, &info, 1) == 1 &&
                      info.state == SX_PSTATE_IDLE,
                  5000, 1000);
}

/* Property: a process woken by a step of one that keeps its worker (it
 * steps again at once, each step 30 ms long) runs on the other, idle
 * worker within 150 ms, not once the sender's turn is over (its 12 steps,
 * 330 ms after the message): a worker that keeps running a process does
 * not keep what that process woke where no other worker can take it. */
static void test_woken_beside_long_steps(void)
{
    const sx_process_type t[] = {
        { .name = "sender",
          .state_size = sizeof(int),
          .init = no_init,
          .step = sender_step },
        { .name = "woken", .init = no_init, .step = woken_step },
    };
    sx_engine *e = up(2, 0, t, 2);
    atomic_store(&woke_sent_ns, 0);
    atomic_store(&woke_ran_ns, 0);
    submit_woken(e);
    sx_pid sender;
    CHECK_RC(sx_engine_submit(e, "sender", "run", NULL, 0, &sender), 0);
    tx_wait_done(e, sender, 10000, NULL);
    tx_wait_done(e, woken_pid, 10000, NULL);
    int64_t sent = atomic_load(&woke_sent_ns), ran = atomic_load(&woke_ran_ns);
    CHECK(sent != 0 && ran != 0);
    if (ran - sent > 150 * 1000000LL)
        SX_FAILF("the woken process ran %.1f ms after the message",
                 (double)(ran - sent) / 1e6);
    tx_engine_down(e);
}

/* ---- a finished process's slot beside a lone runner ---------------------- */

static _Atomic int64_t lone_steps;

/* lone: always READY; its first step sends "go" to woken_pid; finishes on
 * any message. */
static int lone_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)ev;
    int *k = st;
    if ((*k)++ == 0)
        sx_send(out, woken_pid, "go", nil);
    atomic_fetch_add(&lone_steps, 1);
    if (n > 0)
        sx_done(out, nil);
    return 0;
}

/* Property: the reference a worker keeps on a process its step sent to
 * (sx__prefs) does not outlive that process for as long as the sender
 * runs alone on the worker, never looking for other work: the finished
 * process's slot is free (no reference left) within 2 s while the sender
 * keeps stepping. */
static void test_kept_slot_freed_beside_lone_runner(void)
{
    const sx_process_type t[] = {
        { .name = "lone",
          .state_size = sizeof(int),
          .init = no_init,
          .step = lone_step },
        { .name = "woken", .init = no_init, .step = woken_step },
    };
    sx_engine *e = up(1, 4, t, 2);
    atomic_store(&lone_steps, 0);
    submit_woken(e);
    sx_pid lone;
    CHECK_RC(sx_engine_submit(e, "lone", "run", NULL, 0, &lone), 0);
    tx_wait_done(e, woken_pid, 10000, NULL);
    const sx__proc *slot = slot_of(e, (uint32_t)woken_pid.id);
    CHECK(slot != NULL);
    double t0 = sx_test_now_ms();
    uint32_t refs;
    /* relaxed: a figure the worker settles; polled. */
    while ((refs = atomic_load_explicit(&slot->refs, memory_order_relaxed)) !=
               0 &&
           sx_test_now_ms() - t0 < 2000)
        tx_sleep_us(1000);
    int64_t before = atomic_load(&lone_steps);
    tx_sleep_us(20000);
    /* Still running alone: the slot was let go beside it, not after it. */
    CHECK(atomic_load(&lone_steps) > before);
    if (refs != 0)
        SX_FAILF("the finished process's slot still has %u reference(s)", refs);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, lone, "stop", nil), 0);
    tx_wait_done(e, lone, 10000, NULL);
    tx_engine_down(e);
}

/* ---- the next slot at a fair look ------------------------------------- */

/* The last hop of the pair below (ns on tx_now_ns), the longest gap
 * between two of its hops, and whether its steps should stop. */
static _Atomic int64_t pair_last_ns, pair_gap_ns, pair_hops;
static _Atomic bool pair_stop;

/* hopper [to]: on each "ball", notes the gap since the last hop and
 * sends the ball back to `to` (the other hopper, learnt from the first
 * ball's sender when not given); once pair_stop is set it sends "stop"
 * instead and is done, as is the one that gets it. The one given `to`
 * serves in its first step. */
typedef struct {
    sx_pid to;
    bool has_to;
} hopper_st;

static int hopper_init(void *st, const sx_init_ctx *c, const char *m,
                       const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    hopper_st *s = st;
    if (n == 1) {
        sx_unpack u;
        sx_unpack_init(&u, in[0]);
        if (sx_unpack_pid(&u, &s->to) != 0)
            return SX_EINVAL;
        s->has_to = true;
    }
    return 0;
}

static int hopper_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    hopper_st *s = st;
    if (n == 0 && s->has_to) {
        sx_send(out, s->to, "ball", nil); /* the serve */
        sx_wait(out);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].topic, "stop") == 0) {
            sx_done(out, nil);
            return 0;
        }
        if (!s->has_to) {
            s->to = ev[i].from;
            s->has_to = true;
        }
        if (atomic_load(&pair_stop)) {
            sx_send(out, s->to, "stop", nil);
            sx_done(out, nil);
            return 0;
        }
        int64_t now = (int64_t)tx_now_ns();
        int64_t last = atomic_exchange(&pair_last_ns, now);
        if (last != 0 && now - last > atomic_load(&pair_gap_ns))
            atomic_store(&pair_gap_ns, now - last);
        atomic_fetch_add(&pair_hops, 1);
        sx_send(out, s->to, "ball", nil);
    }
    sx_wait(out);
    return 0;
}

/* spin [ms]: one step that busy-waits ms milliseconds, then done. */
static int spin_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    return n == 1 && sx_payload_get_int(in[0], (int64_t *)st) == 0 ? 0
                                                                   : SX_EINVAL;
}

/* When the short (150 ms) and the long spin of pair_beside_fair_look
 * began and ended (ns on tx_now_ns): [long?][0 began, 1 ended]. */
static _Atomic int64_t spin_at[2][2];

static int spin_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)ev, (void)n;
    int64_t ms = *(int64_t *)st, t0 = (int64_t)tx_now_ns();
    busy_ms((int)ms);
    atomic_store(&spin_at[ms > 150][0], t0);
    atomic_store(&spin_at[ms > 150][1], (int64_t)tx_now_ns());
    sx_done(out, nil);
    return 0;
}

static sx_pid submit_spin(sx_engine *e, int64_t ms)
{
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(b, ms);
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "spin", "run", &in, 1, &pid), 0);
    return pid;
}

/* One try of pair_beside_fair_look: the pair's longest gap (ns) in
 * *gap; false when the long spin did not start while the short one ran
 * (a stall of the test's own thread let the free worker take it), so
 * that the try showed nothing. */
static bool pair_try(int64_t *gap)
{
    const sx_process_type t[] = {
        { .name = "hopper",
          .state_size = sizeof(hopper_st),
          .init = hopper_init,
          .step = hopper_step },
        { .name = "spin",
          .state_size = sizeof(int64_t),
          .init = spin_init,
          .step = spin_step },
    };
    sx_engine *e = up(2, 0, t, 2);
    atomic_store(&pair_last_ns, 0);
    atomic_store(&pair_gap_ns, 0);
    atomic_store(&pair_hops, 0);
    atomic_store(&pair_stop, false);
    /* One worker busy for 150 ms from now; the pair on the other. */
    sx_pid hog = submit_spin(e, 150);
    tx_sleep_ms(10);
    sx_pid a, b;
    CHECK_RC(sx_engine_submit(e, "hopper", "run", NULL, 0, &a), 0);
    uint8_t pidbuf[64];
    sx_pack pk;
    sx_pack_init_fixed(&pk, pidbuf, sizeof pidbuf);
    sx_pack_pid(&pk, a);
    sx_payload in = sx_pack_payload(&pk);
    CHECK_RC(sx_engine_submit(e, "hopper", "run", &in, 1, &b), 0);
    TX_WAIT_UNTIL(atomic_load(&pair_hops) > 1000, 5000, 1000);
    /* Taken by the pair's worker at its next fair look. */
    sx_pid lng = submit_spin(e, 600);
    tx_wait_done(e, hog, 10000, NULL);
    tx_wait_done(e, lng, 10000, NULL);
    atomic_store(&pair_stop, true);
    tx_wait_done(e, a, 10000, NULL);
    tx_wait_done(e, b, 10000, NULL);
    *gap = atomic_load(&pair_gap_ns);
    tx_engine_down(e);
    return atomic_load(&spin_at[1][0]) < atomic_load(&spin_at[0][1]);
}

/* Property: a pair that hands a ball back and forth through one worker's
 * next slot does not stall for the whole of a long step that worker took
 * at a fair look (a process submitted while the other worker was busy):
 * once the other worker is free it takes the pair's waiting half. Here
 * the other worker is busy for 150 ms, the fair look's step takes 600
 * ms, and the pair's longest gap must stay under 400 ms. Up to three
 * tries, for one in which the long step began while the other worker
 * was still busy. */
static void test_pair_beside_fair_look(void)
{
    for (int i = 0; i < 3; i++) {
        int64_t gap;
        if (!pair_try(&gap))
            continue;
        if (gap > 400 * 1000000LL)
            SX_FAILF("the pair stalled for %.1f ms", (double)gap / 1e6);
        return;
    }
    printf("pair_beside_fair_look: skipped: in three tries the long step "
           "never began while the other worker was busy (a loaded "
           "machine stalled the test's thread)\n");
}

/* ---- the free slots' marks ahead ----------------------------------------
 *
 * Slots freed on the workers reach an outside submitter as whole
 * magazines through the free stack, each slot naming the one a few places
 * further down its magazine (free_ahead), which the submitter fetches
 * ahead of its takes (engine/core/ptable.c). Rounds of one-step processes
 * submitted from this thread, each round finished before the next: after
 * every round every magazine on the stack and the submitter's loaded one
 * hold free slots only, with their marks right, and between them all but
 * what the two workers may keep (two magazines of 32 each) of the slots
 * carved so far. Negative controls (gcc): a worker's full magazine pushed
 * without its marks ("magazine at 943 (32 slots): slot 943, place 0, has
 * free_ahead 0, not 891"); a carved magazine pushed without its marks
 * ("magazine at 1000 (24 slots): slot 1000, place 0, has free_ahead 0,
 * not 1001"). */
static void test_free_marks_ahead(void)
{
    const sx_process_type t[] = {
        { .name = "quick", .init = no_init, .step = quick_step },
    };
    sx_engine *e = up(2, 0, t, 1);
    uint64_t done = 0;
    for (int round = 0; round < 8; round++) {
        /* Rounds of different sizes end magazines at different places. */
        int n = 1000 + 377 * round;
        for (int i = 0; i < n; i++)
            CHECK_RC(sx_engine_submit(e, "quick", "run", NULL, 0, NULL), 0);
        done += (uint64_t)n;
        sx_engine_stats st;
        TX_WAIT_UNTIL((sx_engine_stats_get(e, &st, NULL, 0),
                       st.completed == done && st.live == 0),
                      10000, 1000);
        /* relaxed: a count this thread's carving set. */
        uint64_t carved =
            atomic_load_explicit(&e->carved_end, memory_order_relaxed);
        uint64_t n_free = 0;
        char why[160] = "";
        /* A finished process's slot is freed just after it is counted:
         * looked at until they are all back (or 10 s have passed; the
         * workers may go on freeing meanwhile, which the check allows). */
        double end = sx_test_now_ms() + 10000;
        for (;;) {
            if (sx__ptable_free_check(e, &n_free, why, sizeof why) != 0)
                SX_FAILF("round %d: %s", round, why);
            if (n_free + 2 * 2 * 32 >= carved || sx_test_now_ms() > end)
                break;
            tx_sleep_ms(5);
        }
        if (n_free + 2 * 2 * 32 < carved)
            SX_FAILF("round %d: %llu of %llu carved slots free and checked",
                     round, (unsigned long long)n_free,
                     (unsigned long long)carved);
    }
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
}

static const sx_test_case cases[] = {
    { "fairness", test_fairness },
    { "sleep_beside_hog", test_sleep_beside_hog },
    { "sleep_beside_long_step", test_sleep_beside_long_step },
    { "batch_limit", test_batch_limit },
    { "stealing", test_stealing },
    { "park_and_wake", test_park_and_wake },
    { "listing", test_listing },
    { "spawn_order_lines", test_spawn_order_lines },
    { "prefault_ahead", test_prefault_ahead },
    { "prefault_stops_at_cap", test_prefault_stops_at_cap },
    { "free_marks_ahead", test_free_marks_ahead },
    { "submit_order", test_submit_order },
    { "penalty_yields_turn", test_penalty_yields_turn },
    { "penalty_is_the_senders", test_penalty_is_the_senders },
    { "next_slot_chain", test_next_slot_chain },
    { "next_slot_chain_busy", test_next_slot_chain_busy },
    { "next_slot_chain_busy_two", test_next_slot_chain_busy_two },
    { "deque_popped_chain", test_deque_popped_chain },
    { "held_answers_order", test_held_answers_order },
    { "held_answers_beside_sends", test_held_answers_beside_sends },
    { "held_answers_terminated", test_held_answers_terminated },
    { "held_answers_idle", test_held_answers_idle },
    { "woken_beside_long_steps", test_woken_beside_long_steps },
    { "kept_slot_freed_beside_lone_runner",
      test_kept_slot_freed_beside_lone_runner },
    { "pair_beside_fair_look", test_pair_beside_fair_look },
};

SX_TEST_MAIN(cases)

/* tests/io/test_timeout.c — per-yield timeouts (sx_yield_timeout): the
 * command that answers first wins and the other answer is dropped, so a
 * timed yield gets exactly one answer; a timed-out libuv command is
 * cancelled; a timed-out user command's late sx_complete is a no-op; a
 * fire-and-forget yield that times out counts a dead letter; deadlines of
 * finished processes are cleaned up.
 *
 * Processes report through their DONE value or FAIL message; each case
 * reads it with sx_engine_wait. Bounds are generous: a timeout of 20 ms
 * must answer within seconds, and "no second answer" is checked by
 * waiting 50-100 ms more.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stepx/stepx.h>

#include "tests/support/support.h"

static const sx_payload nil = { NULL, 0 };

#define FAILIF(out, cond, ...)                                                 \
    do {                                                                       \
        if (cond) {                                                            \
            char m_[256];                                                      \
            snprintf(m_, sizeof m_, __VA_ARGS__);                              \
            sx_fail(out, m_);                                                  \
            return 0;                                                          \
        }                                                                      \
    } while (0)

/* ---- a user command that keeps its completer ---- */

#define CMD_HOLD 300
#define CMD_LATER 301 /* answers from a helper thread after arg ms */

#define HELD_MAX 256
static _Atomic(sx_completer *) held[HELD_MAX];
static atomic_int n_held;

static int cmd_hold(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                    sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag, (void)args;
    int i = atomic_fetch_add(&n_held, 1);
    if (i >= HELD_MAX)
        return SX_ELIMIT;
    /* release: the test thread takes it with an acquire exchange. */
    atomic_store_explicit(&held[i], done, memory_order_release);
    return 0;
}

/* Completes every held completer (late answers: all no-ops). */
static void complete_held(void)
{
    int n = atomic_exchange(&n_held, 0);
    for (int i = 0; i < n && i < HELD_MAX; i++) {
        sx_completer *c;
        /* acquire: pairs with the release store in cmd_hold. */
        while ((c = atomic_exchange_explicit(&held[i], NULL,
                                             memory_order_acquire)) == NULL)
            tx_sleep_ms(1);
        sx_complete(c, nil, 0, NULL);
    }
}

typedef struct {
    sx_completer *done;
    int64_t ms;
} later_job;

static void *later_main(void *arg)
{
    later_job *j = arg;
    tx_sleep_ms((long)j->ms);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_complete(j->done, sx_payload_int(b, 7), 0, NULL);
    free(j);
    return NULL;
}

static atomic_int later_threads;

static int cmd_later(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    later_job *j = malloc(sizeof(*j));
    if (j == NULL || sx_payload_get_int(args, &j->ms) != 0) {
        free(j);
        return SX_EINVAL;
    }
    j->done = done;
    pthread_t t;
    if (pthread_create(&t, NULL, later_main, j) != 0) {
        free(j);
        return SX_ENOMEM;
    }
    pthread_detach(t);
    atomic_fetch_add(&later_threads, 1);
    return 0;
}

/* ---- the process: yields one command with a timeout, then reports ---- */

typedef struct {
    int64_t cmd, arg, timeout_ms, linger_ms;
    int k, answers, first_error;
    uint64_t t0;
} one_st;

static int one_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    one_st *s = st;
    if (n != 4 || sx_payload_get_int(in[0], &s->cmd) != 0 ||
        sx_payload_get_int(in[1], &s->arg) != 0 ||
        sx_payload_get_int(in[2], &s->timeout_ms) != 0 ||
        sx_payload_get_int(in[3], &s->linger_ms) != 0)
        return SX_EINVAL;
    return 0;
}

/* Yields (cmd, arg) with the timeout, tag 1; on the first answer, sleeps
 * linger_ms (tag 2) to see whether a second answer for tag 1 arrives; DONE
 * with the first answer's error code (0 = the command answered). */
static int one_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    one_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    if (s->k++ == 0) {
        s->t0 = sx_clock_now_ns();
        FAILIF(out,
               sx_yield_timeout(out, (uint16_t)s->cmd, 1,
                                sx_payload_int(b, s->arg), s->timeout_ms) != 0,
               "sx_yield_timeout refused");
        sx_wait(out);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        FAILIF(out, ev[i].type != SX_EVENT_YIELD_COMPLETE, "a message?");
        if (ev[i].tag == 1) {
            s->answers++;
            FAILIF(out, s->answers > 1, "a second answer for tag 1 (%d)",
                   ev[i].error);
            s->first_error = ev[i].error;
            if (ev[i].error == SX_ETIMEDOUT) {
                uint64_t el = sx_clock_now_ns() - s->t0;
                FAILIF(out, el < (uint64_t)s->timeout_ms * 1000000u,
                       "timed out early: %llu ns", (unsigned long long)el);
                FAILIF(out, ev[i].error_msg == NULL, "no message");
            }
            sx_yield(out, SX_CMD_SLEEP, 2, sx_payload_int(b, s->linger_ms));
        } else if (ev[i].tag == 2) {
            sx_done(out, sx_payload_int(b, s->first_error));
            return 0;
        }
    }
    sx_wait(out);
    return 0;
}

static const sx_process_type one_t = { .name = "one",
                                       .state_size = sizeof(one_st),
                                       .init = one_init,
                                       .step = one_step };

static sx_engine *up(unsigned workers)
{
    sx_engine_config cfg = { .workers = workers };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, &one_t, 1);
    tx_engine_command(e, CMD_HOLD, "hold", cmd_hold, NULL);
    tx_engine_command(e, CMD_LATER, "later", cmd_later, NULL);
    tx_engine_start(e);
    return e;
}

static sx_pid one(sx_engine *e, int64_t cmd, int64_t arg, int64_t timeout_ms,
                  int64_t linger_ms)
{
    uint8_t b[4][SX_PAYLOAD_INT_MAX];
    sx_payload in[4] = { sx_payload_int(b[0], cmd), sx_payload_int(b[1], arg),
                         sx_payload_int(b[2], timeout_ms),
                         sx_payload_int(b[3], linger_ms) };
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "one", "run", in, 4, &pid), 0);
    return pid;
}

/* The first answer's error code (the process's DONE value). */
static int first_error(sx_engine *e, sx_pid pid)
{
    return (int)tx_wait_int(e, pid, 30000);
}

/* Property: a 10 s sleep with a 20 ms timeout answers SX_ETIMEDOUT (not
 * before 20 ms), the sleep is cancelled on the loop (nothing of it stays
 * in flight), and no second answer follows in the next 100 ms. */
static void test_sleep_times_out(void)
{
    sx_engine *e = up(2);
    double t0 = sx_test_now_ms();
    CHECK_RC(first_error(e, one(e, SX_CMD_SLEEP, 10000, 20, 100)),
             SX_ETIMEDOUT);
    CHECK(sx_test_now_ms() - t0 < 5000);
    CHECK_EQ_U64(tx_engine_stats(e).timeouts, 1);
    CHECK_EQ_U64(tx_engine_stats(e).io_inflight, 0);
    tx_engine_down_io(e);
}

/* Property: a 10 ms sleep with a 5 s timeout answers normally, and the
 * timeout never fires afterwards (checked 100 ms on; the deadline is
 * disarmed, so nothing stays in flight). */
static void test_answer_first(void)
{
    sx_engine *e = up(2);
    CHECK_RC(first_error(e, one(e, SX_CMD_SLEEP, 10, 5000, 100)), 0);
    CHECK_EQ_U64(tx_engine_stats(e).timeouts, 0);
    CHECK_EQ_U64(tx_engine_stats(e).io_inflight, 0);
    tx_engine_down_io(e);
}

/* Property: a huge timeout_ms (sx_yield_timeout takes any int64 >= 0)
 * means "not for a very long time", not "at once": a 20 ms sleep under
 * timeouts of INT64_MAX, 2^62 and 2^44 ms answers normally and no
 * timeout fires. Were timeout_ms * 10^6 to wrap around in
 * sx__io_deadline, INT64_MAX would put the deadline 1 ms in the past and
 * 2^62 at the dispatch itself, and both yields would answer SX_ETIMEDOUT
 * at once. */
static void test_huge_timeout(void)
{
    sx_engine *e = up(2);
    static const int64_t huge[] = { INT64_MAX, (int64_t)1 << 62,
                                    (int64_t)1 << 44 };
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++)
        CHECK_RC(first_error(e, one(e, SX_CMD_SLEEP, 20, huge[i], 50)), 0);
    CHECK_EQ_U64(tx_engine_stats(e).timeouts, 0);
    CHECK_EQ_U64(tx_engine_stats(e).io_inflight, 0);
    tx_engine_down_io(e);
}

/* Property: a user command that never answers by itself times out with
 * SX_ETIMEDOUT; when its handler completes it afterwards, that late
 * answer is dropped (the process, lingering 100 ms, sees no second
 * answer; LeakSanitizer sees the completer freed). */
static void test_user_command_late(void)
{
    sx_engine *e = up(2);
    sx_pid pid = one(e, CMD_HOLD, 0, 20, 300);
    TX_WAIT_UNTIL(atomic_load(&n_held) != 0, 10000, 1000);
    tx_sleep_ms(100); /* past the timeout, inside the linger */
    complete_held();
    CHECK_RC(first_error(e, pid), SX_ETIMEDOUT);
    tx_engine_down_io(e);
}

/* Property: a user command's completion that comes after sx_engine_stop
 * is a no-op (docs/THREADING.md), also for a yield with a timeout, whose
 * deadline lives on a libuv loop that the stop has ended: the process
 * (terminated by the stop) holds a 60 s timeout on a held completer, which
 * the test completes between stop and free. */
static void test_user_command_after_stop(void)
{
    sx_engine *e = up(2);
    atomic_store(&n_held, 0);
    (void)one(e, CMD_HOLD, 0, 60000, 0);
    TX_WAIT_UNTIL(atomic_load(&n_held) != 0, 10000, 1000);
    CHECK_RC(sx_engine_stop(e, 200), 0);
    complete_held(); /* late: after stop, before free */
    CHECK_EQ_U64(tx_engine_stats(e).io_inflight, 0);
    sx_engine_free(e);
}

/* Property: when answers and timeouts race (a helper thread answers after
 * 0, 10, 20 or 30 ms, the timeout is 20 ms), each of 400 yields gets
 * exactly one answer, either one; both outcomes happen. The steps are
 * wide so that both still happen where starting a helper thread takes
 * milliseconds (ASan on a loaded 2-core machine: with answers after 0-3
 * ms against a 2 ms timeout, a run saw none answered first). */
static void test_race(void)
{
    sx_engine *e = up(2);
    enum { N = 400 };
    sx_pid pids[N];
    for (int i = 0; i < N; i++)
        pids[i] = one(e, CMD_LATER, (i % 4) * 10, 20, 60);
    int ok = 0, timed_out = 0;
    for (int i = 0; i < N; i++) {
        int rc = first_error(e, pids[i]);
        if (rc == 0)
            ok++;
        else if (rc == SX_ETIMEDOUT)
            timed_out++;
        else
            SX_FAILF("yield %d answered %d", i, rc);
    }
    printf("# %d answered first, %d timed out first\n", ok, timed_out);
    CHECK(ok > 0);
    CHECK(timed_out > 0);
    CHECK_EQ_U64(tx_engine_stats(e).timeouts, (uint64_t)timed_out);
    /* Let the helper threads' late answers land before the engine goes. */
    tx_sleep_ms(100);
    tx_engine_down_io(e);
}

/* Property: an unknown command with a timeout still answers
 * SX_EUNKNOWN_COMMAND at once (the deadline is disarmed unused). */
static void test_unknown_command(void)
{
    sx_engine *e = up(1);
    CHECK_RC(first_error(e, one(e, 999, 0, 5000, 1)), SX_EUNKNOWN_COMMAND);
    CHECK_EQ_U64(tx_engine_stats(e).timeouts, 0);
    tx_engine_down_io(e);
}

/* ---- fire and forget, misuse ---- */

typedef struct {
    int k;
} ff_st;

static int ff_init(void *st, const sx_init_ctx *c, const char *m,
                   const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

/* A timed fire-and-forget sleep (no answer expected), and misuse of
 * sx_yield_timeout; then a sleep long enough for the timeout to pass. */
static int ff_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    ff_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    (void)ev;
    if (s->k++ == 0) {
        FAILIF(out,
               sx_yield_timeout(out, SX_CMD_SLEEP, 1, sx_payload_int(b, 1),
                                -1) != SX_EINVAL,
               "negative timeout accepted");
        FAILIF(out,
               sx_yield_timeout(NULL, SX_CMD_SLEEP, 1, sx_payload_int(b, 1),
                                5) != SX_EINVAL,
               "NULL output accepted");
        sx_yield_timeout(out, SX_CMD_SLEEP, SX_TAG_NONE,
                         sx_payload_int(b, 10000), 10);
        /* timeout 0 means none: this sleep answers normally. */
        sx_yield_timeout(out, SX_CMD_SLEEP, 2, sx_payload_int(b, 60), 0);
        sx_wait(out);
        return 0;
    }
    FAILIF(out, n != 1 || ev[0].tag != 2 || ev[0].error != 0,
           "expected only the answer of tag 2 (n=%zu)", n);
    sx_done(out, nil);
    return 0;
}

/* Property: a fire-and-forget yield (SX_TAG_NONE) that times out delivers
 * nothing to the process and counts one dead letter; sx_yield_timeout
 * rejects a negative timeout and a NULL output; timeout 0 is no timeout. */
static void test_fire_and_forget(void)
{
    const sx_process_type t = { .name = "ff",
                                .state_size = sizeof(ff_st),
                                .init = ff_init,
                                .step = ff_step };
    sx_engine_config cfg = { .workers = 1 };
    sx_engine *e = tx_engine_up(&cfg, &t, 1);
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "ff", "run", NULL, 0, &pid), 0);
    tx_wait_done(e, pid, 30000, NULL);
    sx_engine_stats st = tx_engine_stats(e);
    CHECK_EQ_U64(st.dead_letters, 1);
    CHECK_EQ_U64(st.timeouts, 1);
    tx_engine_down_io(e);
}

/* Property: processes that finish (here: terminated) while their timed
 * yields are pending leave nothing behind: the deadlines and the ops are
 * cancelled on the loop, the in-flight count returns to 0, no timeout
 * fires afterwards, and LeakSanitizer finds nothing. */
static void test_finish_cleans_up(void)
{
    sx_engine *e = up(2);
    enum { N = 200 };
    sx_pid pids[N];
    for (int i = 0; i < N; i++)
        pids[i] = one(e, i % 2 ? SX_CMD_SLEEP : CMD_HOLD, 60000, 60000, 1);
    double end = sx_test_now_ms() + 10000;
    /* deadlines + sleeps */
    while (tx_engine_stats(e).io_inflight < N + N / 2) {
        CHECK(sx_test_now_ms() < end);
        tx_sleep_ms(1);
    }
    for (int i = 0; i < N; i++)
        CHECK_RC(sx_engine_terminate(e, pids[i]), 0);
    for (int i = 0; i < N; i++) {
        sx_result r;
        CHECK_RC(sx_engine_wait(e, pids[i], 30000, &r), 0);
        CHECK_RC(r.error, SX_ETERMINATED);
        sx_result_free(&r);
    }
    while (tx_engine_stats(e).io_inflight != 0) {
        CHECK(sx_test_now_ms() < end);
        tx_sleep_ms(1);
    }
    CHECK_EQ_U64(tx_engine_stats(e).timeouts, 0);
    CHECK_EQ_INT(atomic_load(&n_held), N / 2);
    complete_held(); /* their processes are gone: no-ops */
    tx_engine_down_io(e);
}

static const sx_test_case cases[] = {
    { "sleep_times_out", test_sleep_times_out },
    { "answer_first", test_answer_first },
    { "huge_timeout", test_huge_timeout },
    { "user_command_after_stop", test_user_command_after_stop },
    { "user_command_late", test_user_command_late },
    { "race", test_race },
    { "unknown_command", test_unknown_command },
    { "fire_and_forget", test_fire_and_forget },
    { "finish_cleans_up", test_finish_cleans_up },
};

SX_TEST_MAIN(cases)

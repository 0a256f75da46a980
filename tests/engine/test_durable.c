/* tests/engine/test_durable.c — an engine with a state store
 * (sx_engine_config.state_dir, docs/DURABILITY.md): jobs stored before
 * submit answers run again after a crash with the same PID and the next
 * attempt, kept outcomes answer wait after it, a stop leaves unfinished
 * jobs for the next start, keys answer the first job, each run takes
 * generations no earlier run handed out, and a second engine on the same
 * directory is refused.
 *
 * A crash is a child process (fork, before any engine of the parent's
 * exists) that sets up jobs and is killed with SIGKILL: nothing of the
 * engine is shut down, as when stepxd is killed -9 (tests/support/
 * crash.h).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stepx/engine.h>

#include "tests/support/crash.h"
#include "tests/support/engine.h"
#include "tests/support/harness.h"
#include "tests/support/threads.h"
#include "tests/support/timing.h"
#include "tests/support/tmp.h"

static char dir[256];

/* "hold": waits for one message and finishes with its data; fails on a
 * cancel (as stop sends). */
static int hold_init(void *st, const sx_init_ctx *ctx, const char *method,
                     const sx_payload *in, size_t n)
{
    (void)st, (void)ctx, (void)method, (void)in, (void)n;
    return 0;
}

static int hold_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type == SX_EVENT_MESSAGE &&
            strcmp(ev[i].topic, SX_TOPIC_CANCEL) == 0) {
            sx_fail(out, "cancelled");
            return 0;
        }
        if (ev[i].type == SX_EVENT_MESSAGE) {
            sx_done(out, ev[i].data);
            return 0;
        }
    }
    sx_idle(out);
    return 0;
}

/* "quick": finishes at its first step with its first input. */
typedef struct {
    uint8_t v[16];
    size_t len;
} quick_state;

static int quick_init(void *st, const sx_init_ctx *ctx, const char *method,
                      const sx_payload *in, size_t n)
{
    (void)ctx, (void)method;
    quick_state *q = st;
    if (n != 1 || in[0].len > sizeof q->v)
        return SX_EINVAL;
    memcpy(q->v, in[0].data, in[0].len);
    q->len = in[0].len;
    return 0;
}

static int quick_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)ev, (void)n;
    quick_state *q = st;
    sx_done(out, (sx_payload){ q->v, q->len });
    return 0;
}

/* "doomed": fails at its first step, every attempt. */
static int doomed_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    sx_fail(out, "doomed");
    return 0;
}

static const sx_process_type types[] = {
    { .name = "hold", .init = hold_init, .step = hold_step },
    { .name = "quick",
      .state_size = sizeof(quick_state),
      .init = quick_init,
      .step = quick_step },
    /* Registered by the crashing child only: its job cannot run again. */
    { .name = "gone", .init = hold_init, .step = hold_step },
    { .name = "doomed", .init = hold_init, .step = doomed_step },
};

static sx_engine *up(size_t n_types)
{
    sx_engine_config cfg = { .workers = 2, .state_dir = dir };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, types, n_types);
    int rc = sx_engine_start(e);
    if (rc != 0)
        SX_FAILF("start: %s: %s", sx_errname(rc), sx_engine_state_error(e));
    return e;
}

static sx_payload int_payload(uint8_t *buf, int v)
{
    buf[0] = (uint8_t)v; /* a positive fixint */
    return (sx_payload){ buf, 1 };
}

/* What the crashing child hands back through a pipe. */
typedef struct {
    sx_pid hold, quick, gone;
    uint32_t host;
} handed;

/* Runs in the child: jobs, then (tx_crash_child) SIGKILL. */
static void child_crash(int fd, void *arg)
{
    (void)arg;
    sx_engine *e = up(3);
    handed h;
    uint8_t b[1];
    sx_payload in = int_payload(b, 7);
    if (sx_engine_submit(e, "hold", "run", NULL, 0, &h.hold) != 0 ||
        sx_engine_submit(e, "quick", "run", &in, 1, &h.quick) != 0 ||
        sx_engine_submit(e, "gone", "run", NULL, 0, &h.gone) != 0)
        _exit(2);
    sx_result r;
    if (sx_engine_wait(e, h.quick, 5000, &r) != 0 || r.error != 0)
        _exit(3);
    sx_engine_config c;
    sx_engine_config_get(e, &c);
    h.host = c.host;
    if (write(fd, &h, sizeof h) != (ssize_t)sizeof h)
        _exit(4);
}

static handed crash(void)
{
    handed h;
    if (tx_crash_child(child_crash, NULL, &h, sizeof h) != sizeof h)
        SX_FAILF("the child did not report its jobs");
    return h;
}

/* After a kill -9: the running job runs again with its PID (attempt 2),
 * the finished one's outcome answers wait (attempt 1), the job of a type
 * no longer registered gets an outcome saying so, the host part is the
 * store's, and new PIDs come from another generation range. */
static void t_crash_recovery(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-durable.");
    handed h = crash();
    sx_engine *e = up(2);
    sx_engine_config c;
    CHECK_RC(sx_engine_config_get(e, &c), 0);
    CHECK_EQ_U64(c.host, h.host);

    sx_result r;
    CHECK_RC(sx_engine_wait(e, h.quick, 0, &r), 0);
    CHECK_EQ_INT(r.error, 0);
    CHECK_EQ_U64(r.attempts, 1);
    int64_t v = -1;
    CHECK_RC(sx_payload_get_int(r.value, &v), 0);
    CHECK_EQ_U64((uint64_t)v, 7);
    sx_result_free(&r);

    CHECK_RC(sx_engine_wait(e, h.gone, 5000, &r), 0);
    CHECK_EQ_INT(r.error, SX_EUNKNOWN_TYPE);
    CHECK(r.error_msg != NULL && strstr(r.error_msg, "\"gone\"") != NULL);
    sx_result_free(&r);

    /* The held job runs again: the same PID takes a message. */
    uint8_t b[1];
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, h.hold, "go", int_payload(b, 9)),
             0);
    CHECK_RC(sx_engine_wait(e, h.hold, 5000, &r), 0);
    CHECK_EQ_INT(r.error, 0);
    CHECK_EQ_U64(r.attempts, 2);
    sx_result_free(&r);

    sx_pid fresh;
    CHECK_RC(sx_engine_submit(e, "hold", "run", NULL, 0, &fresh), 0);
    uint32_t g_old = (uint32_t)(h.hold.id >> 32);
    uint32_t g_new = (uint32_t)(fresh.id >> 32);
    if ((g_old - 1) / (1u << 24) == (g_new - 1) / (1u << 24))
        SX_FAILF("generation %u of this run is in the range of %u of the "
                 "last",
                 g_new, g_old);
    CHECK_EQ_U64(fresh.host, h.host);
    sx_engine_free(e);

    /* Once more: the finished outcomes are still kept; the job left
     * running by the stop above runs again (attempt 2 of its own). */
    e = up(2);
    CHECK_RC(sx_engine_wait(e, h.hold, 0, &r), 0);
    CHECK_EQ_U64(r.attempts, 2);
    sx_result_free(&r);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, fresh, "go", int_payload(b, 1)), 0);
    CHECK_RC(sx_engine_wait(e, fresh, 5000, &r), 0);
    CHECK_EQ_INT(r.error, 0);
    CHECK_EQ_U64(r.attempts, 2);
    sx_result_free(&r);
    sx_engine_free(e);
    CHECK(tx_rm_tree(dir) == 0);
}

/* An answer of sx_engine_submit_async. */
typedef struct {
    int rc;
    sx_pid pid;
    bool existing;
    _Atomic int done;
} answer;

static void on_submit(void *user, int rc, sx_pid pid, bool existing,
                      const char *msg)
{
    (void)msg;
    answer *a = user;
    a->rc = rc;
    a->pid = pid;
    a->existing = existing;
    /* release: the fields above, for the waiting test thread. */
    atomic_store_explicit(&a->done, 1, memory_order_release);
}

/* A key answers its first job's PID, live or finished, across a restart;
 * without a store a key is refused. */
static void t_keys(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-durable.");
    sx_engine *e = up(2);
    answer a[3];
    memset(a, 0, sizeof a);
    sx_submit_opts o = { .key = "order-17", .key_len = 8 };
    for (int i = 0; i < 2; i++) {
        CHECK_RC(sx_engine_submit_async(e, "hold", "run", NULL, 0, &o,
                                        on_submit, &a[i]),
                 0);
        /* acquire: pairs with on_submit's release. */
        TX_WAIT_UNTIL(atomic_load_explicit(&a[i].done, memory_order_acquire),
                      5000, 200);
        CHECK_RC(a[i].rc, 0);
    }
    CHECK(!a[0].existing && a[1].existing);
    CHECK(sx_pid_eq(a[0].pid, a[1].pid));
    CHECK_EQ_U64(tx_engine_stats(e).live, 1);
    sx_engine_free(e);

    e = up(2);
    CHECK_RC(
        sx_engine_submit_async(e, "hold", "run", NULL, 0, &o, on_submit, &a[2]),
        0);
    TX_WAIT_UNTIL(atomic_load_explicit(&a[2].done, memory_order_acquire), 5000,
                  200);
    CHECK(a[2].existing && sx_pid_eq(a[2].pid, a[0].pid));
    sx_engine_free(e);
    CHECK(tx_rm_tree(dir) == 0);

    sx_engine *mem = tx_engine_up(NULL, types, 2);
    CHECK_RC(sx_engine_submit_async(mem, "hold", "run", NULL, 0, &o, on_submit,
                                    &a[0]),
             SX_EINVAL);
    tx_engine_down(mem);
}

/* One engine per state directory: the second is refused at start with
 * the store's message, and the first goes on. */
static void t_second_engine(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-durable.");
    sx_engine *e = up(2);
    sx_engine_config cfg = { .workers = 1, .state_dir = dir };
    sx_engine *e2 = tx_engine_new(&cfg);
    tx_engine_register(e2, types, 1);
    CHECK_RC(sx_engine_start(e2), -EBUSY);
    if (strstr(sx_engine_state_error(e2), "in use by another process") == NULL)
        SX_FAILF("message: %s", sx_engine_state_error(e2));
    sx_engine_free(e2);
    uint8_t b[1];
    sx_payload in = int_payload(b, 3);
    sx_pid p;
    CHECK_RC(sx_engine_submit(e, "quick", "run", &in, 1, &p), 0);
    CHECK_EQ_U64((uint64_t)tx_wait_int(e, p, 5000), 3);
    sx_engine_free(e);
    CHECK_STR(sx_engine_state_error(NULL), "");
    CHECK(tx_rm_tree(dir) == 0);
}

/* Many jobs through the blocking submit from two threads' worth of
 * traffic: every one finishes once, with its input. */
static void t_many(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-durable.");
    sx_engine *e = up(2);
    enum { N = 500 };
    static sx_pid pids[N];
    for (int i = 0; i < N; i++) {
        uint8_t b[1];
        sx_payload in = int_payload(b, i % 100);
        CHECK_RC(sx_engine_submit(e, "quick", "run", &in, 1, &pids[i]), 0);
    }
    for (int i = 0; i < N; i++)
        CHECK_EQ_U64((uint64_t)tx_wait_int(e, pids[i], 5000),
                     (uint64_t)(i % 100));
    /* The store's figures: each job a submit and a finish record, in
     * fewer transactions than records (group commit) once it ran. */
    sx_engine_stats st = tx_engine_stats(e);
    CHECK(st.store_records >= 2 * N && st.store_commits >= 1 &&
          st.store_commits <= st.store_records && st.store_failed == 0);
    CHECK_RC(sx_engine_stop(e, 1000), 0);
    CHECK(tx_engine_stats(e).store_records >= 2 * N); /* after stop too */
    sx_engine_free(e);
    e = up(2);
    CHECK_EQ_U64(tx_engine_stats(e).live, 0);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pids[N - 1], 0, &r), 0);
    CHECK_EQ_U64(r.attempts, 1);
    sx_result_free(&r);
    sx_engine_free(e);
    CHECK(tx_rm_tree(dir) == 0);
}

static void on_submit(void *user, int rc, sx_pid pid, bool existing,
                      const char *msg);

/* The job's listing entry, or state 0 when it is not listed. */
static sx_process_info listed(sx_engine *e, sx_pid pid)
{
    sx_process_info info[16], none = { .state = 0 };
    int n = sx_engine_list(e, info, 16);
    for (int i = 0; i < n; i++)
        if (sx_pid_eq(info[i].pid, pid))
            return info[i];
    return none;
}

/* A kill -9 while a job waits for its restart: after the restart of the
 * engine it still waits (its backoff goes on, it does not run at once),
 * then runs, and the restart it had already used counts against its
 * limit (max_restarts 1: its next failure is SX_ERESTART_LIMIT). */
static void backoff_child(int fd, void *arg)
{
    (void)arg;
    sx_engine *e = up(4);
    sx_restart_policy pol = { .mode = SX_RESTART_ON_FAILURE,
                              .max_restarts = 1,
                              .backoff_min_ms = 1500,
                              .backoff_max_ms = 1500 };
    sx_submit_opts o = { .restart = &pol };
    answer a;
    memset(&a, 0, sizeof a);
    if (sx_engine_submit_async(e, "doomed", "run", NULL, 0, &o, on_submit,
                               &a) != 0)
        _exit(2);
    while (!atomic_load_explicit(&a.done, memory_order_acquire))
        tx_sleep_ms(1);
    /* Waiting for its restart, and that is stored: a commit follows the
     * restart's record within a group commit's time. */
    for (int i = 0; i < 5000 && listed(e, a.pid).state != SX_PSTATE_RESTARTING;
         i++)
        tx_sleep_ms(1);
    tx_sleep_ms(200);
    if (write(fd, &a.pid, sizeof a.pid) != (ssize_t)sizeof a.pid)
        _exit(4);
}

static void t_crash_in_backoff(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-durable.");
    sx_pid pid;
    CHECK(tx_crash_child(backoff_child, NULL, &pid, sizeof pid) == sizeof pid);

    double t0 = sx_test_now_ms();
    sx_engine *e = up(4);
    sx_process_info i = listed(e, pid);
    CHECK_EQ_INT(i.state, SX_PSTATE_RESTARTING);
    CHECK_EQ_U64(i.attempts, 1);
    if (i.restart_in_ms <= 0 || i.restart_in_ms > 1501)
        SX_FAILF("restart in %lld ms after the crash, not within (0, 1501]",
                 (long long)i.restart_in_ms);
    CHECK(strstr(i.last_error, "doomed") != NULL);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pid, 10000, &r), 0);
    CHECK_EQ_INT(r.error, SX_ERESTART_LIMIT);
    CHECK_EQ_U64(r.attempts, 2);
    CHECK(sx_test_now_ms() - t0 >= (double)i.restart_in_ms - 50);
    sx_result_free(&r);
    sx_engine_free(e);
    CHECK(tx_rm_tree(dir) == 0);
}

/* A thread submits (blocking) while the engine stops: every submit is
 * answered 0 or SX_ESTOPPING, a submit after the stop is SX_ESTOPPING
 * too, and after the next start every acknowledged job reaches its
 * outcome (the ones the stop caught run again). */
typedef struct {
    sx_engine *e;
    sx_pid pids[4096];
    _Atomic int n;
    int last_rc;
} racer;

static void *submit_until_refused(void *arg)
{
    racer *r = arg;
    for (int i = 0; i < 4096; i++) {
        uint8_t b[1];
        sx_payload in = int_payload(b, i % 100);
        sx_pid pid;
        int rc = sx_engine_submit(r->e, "quick", "run", &in, 1, &pid);
        if (rc != 0) {
            r->last_rc = rc;
            break;
        }
        r->pids[i] = pid;
        /* release: the main thread reads the PIDs after the join anyway. */
        atomic_store_explicit(&r->n, i + 1, memory_order_release);
    }
    return NULL;
}

static void t_stop_with_submits(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-durable.");
    sx_engine *e = up(2);
    static racer r;
    memset(&r, 0, sizeof r);
    r.e = e;
    pthread_t t = tx_thread_start(submit_until_refused, &r);
    TX_WAIT_UNTIL(atomic_load_explicit(&r.n, memory_order_acquire) >= 50, 10000,
                  200);
    CHECK_RC(sx_engine_stop(e, 1000), 0);
    tx_thread_join(t);
    int n = atomic_load(&r.n);
    if (n < 4096)
        CHECK_EQ_INT(r.last_rc, SX_ESTOPPING);
    sx_pid late;
    CHECK_RC(sx_engine_submit(e, "quick", "run", NULL, 0, &late), SX_ESTOPPING);
    sx_engine_free(e);
    e = up(2);
    for (int i = 0; i < n; i++) {
        sx_result res;
        CHECK_RC(sx_engine_wait(e, r.pids[i], 10000, &res), 0);
        CHECK_EQ_INT(res.error, 0);
        sx_result_free(&res);
    }
    printf("%d jobs acknowledged before the stop refused one\n", n);
    sx_engine_free(e);
    CHECK(tx_rm_tree(dir) == 0);
}

static const sx_test_case cases[] = {
    { "crash_in_backoff", t_crash_in_backoff },
    { "stop_with_submits", t_stop_with_submits },
    { "crash_recovery", t_crash_recovery },
    { "keys", t_keys },
    { "second_engine", t_second_engine },
    { "many", t_many },
};

SX_TEST_MAIN(cases)

/* tests/relay/test_submit_wait.c — submit with "wait": true, one request
 * per job (docs/PROTOCOL.md, submit): the outcome with wait's fields and
 * the pid, a failed job's error with its pid, a timeout that names the
 * job (which goes on), refusals that start nothing, the fields checked,
 * many pipelined on one connection, the limit on waits checked before a
 * job starts (also for submits answered later), a connection that leaves with
 * its jobs running, a submit the engine answers later (a deadline, a state
 * store and its keys), and an outcome that fits a wait's answer but not with
 * the pid beside it.
 *
 * Threads: the test's thread and the C client; the engine's own.
 */
#include "tests/relay/relay_fixture.h"

#include <sys/resource.h>

/* ---- a type of its own: blob.run [size] finishes with a bin of size
 * bytes (the frame-limit case) ---- */

static int blob_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    int64_t *size = st;
    if (n != 1 || sx_payload_get_int(in[0], size) != 0 || *size < 0 ||
        *size > (64 << 20))
        return SX_EINVAL;
    return 0;
}

static int blob_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)ev, (void)n;
    size_t size = (size_t) * (int64_t *)st;
    char *b = calloc(1, size + 1);
    CHECK(b != NULL);
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_bin(&pk, b, size);
    sx_done(out, sx_pack_payload(&pk));
    sx_pack_fini(&pk);
    free(b);
    return 0;
}

static const sx_process_type blob_type = { .name = "blob",
                                           .state_size = sizeof(int64_t),
                                           .init = blob_init,
                                           .step = blob_step,
                                           .methods = run_m };

/* fx_up_engine with the blob type too. */
static void up(fixture *f, const sx_engine_config *ec,
               const sx_server_config *sc)
{
    memset(f, 0, sizeof(*f));
    f->e = tx_engine_new(ec);
    CHECK_RC(sx_types_register_builtin(f->e), 0);
    tx_engine_register(f->e, fx_types, FX_NTYPES);
    CHECK_RC(sx_engine_register(f->e, &blob_type), 0);
    tx_engine_start(f->e);
    fx_serve(f, sc);
}

static sx_client *connect_ok(const fixture *f)
{
    sx_client *c = NULL;
    CHECK_RC(sx_client_connect(f->unix_addr, NULL, 5000, &c), 0);
    return c;
}

static sx_payload int_in(uint8_t *b, int64_t x)
{
    return sx_payload_int(b, x);
}

/* The reply's "pid", which must be there. */
static sx_pid reply_pid_ok(const sx_reply *r)
{
    sx_pid pid = SX_PID_NONE;
    CHECK_RC(sx_reply_pid(r, &pid), 0);
    return pid;
}

static bool has(const sx_reply *r, const char *key)
{
    sx_payload v;
    return sx_map_get(r->body, key, &v) == 0;
}

static bool same_pid(sx_pid a, sx_pid b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

static bool pid_none(sx_pid p)
{
    return same_pid(p, SX_PID_NONE);
}

/* Live processes of the engine. */
static uint64_t live(const fixture *f)
{
    sx_engine_stats st;
    sx_engine_stats_get(f->e, &st, NULL, 0);
    return st.live;
}

/* Property: one request answers with the outcome, wait's fields (result,
 * steps, attempts) and the job's pid; a later wait on that pid gives the
 * same outcome. */
static void test_ok(void)
{
    fixture f;
    up(&f, &(sx_engine_config){ .workers = 2 }, NULL);
    sx_client *c = connect_ok(&f);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = int_in(b, 5);
    sx_pid pid = SX_PID_NONE;
    uint64_t steps = 0;
    sx_reply r;
    CHECK_RC(sx_client_submit_wait(c, "counter", "run", &in, 1, -1, &pid,
                                   &steps, &r),
             0);
    CHECK(r.ok);
    CHECK(!pid_none(pid));
    CHECK(same_pid(reply_pid_ok(&r), pid));
    CHECK_EQ_INT(reply_int(&r, "result"), 5);
    CHECK_EQ_U64(steps, 6);
    CHECK_EQ_INT(reply_int(&r, "steps"), 6);
    CHECK_EQ_INT(reply_int(&r, "attempts"), 1);
    CHECK(!has(&r, "existing"));
    sx_reply_free(&r);
    CHECK_RC(sx_client_wait(c, pid, 5000, &steps, &r), 0);
    CHECK_EQ_INT(reply_int(&r, "result"), 5);
    CHECK_EQ_U64(steps, 6);
    sx_reply_free(&r);
    /* With a timeout_ms that is not reached. */
    in = int_in(b, 2);
    CHECK_RC(sx_client_submit_wait(c, "counter", "run", &in, 1, 10000, &pid,
                                   NULL, &r),
             0);
    CHECK_EQ_INT(reply_int(&r, "result"), 2);
    CHECK(!pid_none(pid));
    sx_reply_free(&r);
    /* out and out_pid may be NULL. */
    CHECK_RC(sx_client_submit_wait(c, "counter", "run", &in, 1, -1, NULL, NULL,
                                   NULL),
             0);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: a job that fails answers ok false with its own error and its
 * pid; one cancelled or terminated the same with its code. */
static void test_failed(void)
{
    fixture f;
    up(&f, &(sx_engine_config){ .workers = 2 }, NULL);
    sx_client *c = connect_ok(&f);
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_str(&pk, "card declined");
    sx_payload in = sx_pack_payload(&pk);
    sx_pid pid = SX_PID_NONE;
    sx_reply r;
    CHECK_RC(
        sx_client_submit_wait(c, "fail", "run", &in, 1, -1, &pid, NULL, &r),
        sx_wire_error("failed", 6));
    CHECK(!r.ok);
    CHECK(!pid_none(pid));
    CHECK(same_pid(reply_pid_ok(&r), pid));
    CHECK(strcmp(r.code, "failed") == 0);
    CHECK(strstr(r.message, "card declined") != NULL);
    CHECK(!has(&r, "result"));
    CHECK_EQ_INT(reply_int(&r, "attempts"), 1);
    sx_reply_free(&r);
    sx_pack_fini(&pk);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: timeout_ms passing answers `timeout` with the pid; the job
 * goes on (it can be waited for, and terminated, by that pid). */
static void test_timeout(void)
{
    fixture f;
    up(&f, &(sx_engine_config){ .workers = 2 }, NULL);
    sx_client *c = connect_ok(&f);
    sx_pid pid = SX_PID_NONE;
    sx_reply r;
    double t0 = sx_test_now_ms();
    CHECK_RC(
        sx_client_submit_wait(c, "idle", "serve", NULL, 0, 50, &pid, NULL, &r),
        SX_ETIMEDOUT);
    CHECK(sx_test_now_ms() - t0 >= 45);
    CHECK(strcmp(r.code, "timeout") == 0);
    CHECK(!pid_none(pid));
    CHECK(same_pid(reply_pid_ok(&r), pid));
    sx_reply_free(&r);
    CHECK_EQ_U64(live(&f), 1);
    CHECK_RC(sx_client_wait(c, pid, 0, NULL, NULL), SX_ETIMEDOUT);
    CHECK_RC(sx_client_terminate(c, pid, NULL), 0);
    CHECK_RC(sx_client_wait(c, pid, 5000, NULL, &r),
             sx_wire_error("terminated", 10));
    sx_reply_free(&r);
    /* timeout_ms 0: answered at once, the job started all the same. */
    CHECK_RC(
        sx_client_submit_wait(c, "idle", "serve", NULL, 0, 0, &pid, NULL, NULL),
        SX_ETIMEDOUT);
    CHECK(!pid_none(pid));
    CHECK_RC(sx_client_terminate(c, pid, NULL), 0);
    sx_client_close(c);
    fx_down(&f);
}

/* CPU time of the whole process (every thread), in ms. */
static double cpu_ms(void)
{
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* Property: an open wait does not keep the server's loop busy. While
 * waits are open the loop polls without blocking for a short while after
 * it last had something to do (relay/hub.c, "the doorbell"), then sleeps:
 * a submit that waits 400 ms for a job that does not finish costs the
 * process a few ms of CPU, not the 400 ms of a loop that kept polling.
 * The answer still comes, on time. */
static void test_open_wait_sleeps(void)
{
    fixture f;
    up(&f, &(sx_engine_config){ .workers = 2 }, NULL);
    sx_client *c = connect_ok(&f);
    sx_pid pid = SX_PID_NONE;
    double cpu0 = cpu_ms(), t0 = sx_test_now_ms();
    CHECK_RC(sx_client_submit_wait(c, "idle", "serve", NULL, 0, 400, &pid, NULL,
                                   NULL),
             SX_ETIMEDOUT);
    double cpu = cpu_ms() - cpu0, wall = sx_test_now_ms() - t0;
    CHECK(wall >= 395);
    /* Sanitizer builds included, everything but the loop's bounded spin
     * is well under this: engine and client sleep meanwhile. */
    if (cpu >= 100)
        fprintf(stderr, "open_wait_sleeps: %.1f ms of CPU in %.0f ms\n", cpu,
                wall);
    CHECK(cpu < 100);
    CHECK_RC(sx_client_terminate(c, pid, NULL), 0);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: a submit refused (unknown type or method, init's refusal)
 * answers as a plain submit does: no pid, nothing started. */
static void test_refused(void)
{
    fixture f;
    up(&f, &(sx_engine_config){ .workers = 2 }, NULL);
    sx_client *c = connect_ok(&f);
    sx_pid pid = SX_PID_NONE;
    sx_reply r;
    CHECK_RC(
        sx_client_submit_wait(c, "nope", "run", NULL, 0, -1, &pid, NULL, &r),
        sx_wire_error("unknown_type", 12));
    CHECK(pid_none(pid));
    CHECK(!has(&r, "pid"));
    sx_reply_free(&r);
    CHECK_RC(sx_client_submit_wait(c, "counter", "nope", NULL, 0, -1, &pid,
                                   NULL, &r),
             sx_wire_error("unknown_method", 14));
    CHECK(pid_none(pid));
    sx_reply_free(&r);
    CHECK_RC(
        sx_client_submit_wait(c, "square", "run", NULL, 0, -1, &pid, NULL, &r),
        sx_wire_error("init_failed", 11));
    CHECK(pid_none(pid));
    CHECK(!has(&r, "pid"));
    sx_reply_free(&r);
    CHECK_EQ_U64(live(&f), 0);
    sx_client_close(c);
    fx_down(&f);
}

/* A submit of counter [1] with extra fields (after type, method, input):
 * the pairs packed by fill. */
static int call_submit(sx_client *c, uint32_t extra, void (*fill)(sx_pack *pk),
                       sx_reply *r)
{
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_map(&pk, 4 + extra);
    sx_pack_str(&pk, "op");
    sx_pack_str(&pk, "submit");
    sx_pack_str(&pk, "type");
    sx_pack_str(&pk, "counter");
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, "run");
    sx_pack_str(&pk, "input");
    sx_pack_array(&pk, 1);
    sx_pack_int(&pk, 1);
    fill(&pk);
    CHECK_RC(pk.err, 0);
    int rc = sx_client_call(c, sx_pack_payload(&pk), 10000, r);
    sx_pack_fini(&pk);
    return rc;
}

static void f_wait_str(sx_pack *pk)
{
    sx_pack_str(pk, "wait");
    sx_pack_str(pk, "yes");
}
static void f_wait_int(sx_pack *pk)
{
    sx_pack_str(pk, "wait");
    sx_pack_int(pk, 1);
}
static void f_timeout_alone(sx_pack *pk)
{
    sx_pack_str(pk, "timeout_ms");
    sx_pack_int(pk, 100);
}
static void f_timeout_neg(sx_pack *pk)
{
    sx_pack_str(pk, "wait");
    sx_pack_bool(pk, true);
    sx_pack_str(pk, "timeout_ms");
    sx_pack_int(pk, -1);
}
static void f_timeout_str(sx_pack *pk)
{
    sx_pack_str(pk, "wait");
    sx_pack_bool(pk, true);
    sx_pack_str(pk, "timeout_ms");
    sx_pack_str(pk, "10");
}
static void f_wait_false(sx_pack *pk)
{
    sx_pack_str(pk, "wait");
    sx_pack_bool(pk, false);
}
static void f_wait_nil(sx_pack *pk)
{
    sx_pack_str(pk, "wait");
    sx_pack_nil(pk);
    sx_pack_str(pk, "timeout_ms");
    sx_pack_nil(pk);
}
static void f_deadline(sx_pack *pk)
{
    sx_pack_str(pk, "wait");
    sx_pack_bool(pk, true);
    sx_pack_str(pk, "deadline_ms");
    sx_pack_int(pk, 60000);
}

/* Property: "wait" must be a bool and "timeout_ms" goes with wait: true
 * (bad_request, nothing started); wait false or nil is a plain submit
 * (its reply has the pid and no outcome). */
static void test_fields(void)
{
    fixture f;
    up(&f, &(sx_engine_config){ .workers = 2 }, NULL);
    sx_client *c = connect_ok(&f);
    void (*bad[])(sx_pack *) = { f_wait_str, f_wait_int, f_timeout_alone,
                                 f_timeout_neg, f_timeout_str };
    sx_reply r;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_RC(call_submit(c, i == 2 ? 1 : i < 2 ? 1 : 2, bad[i], &r), 0);
        CHECK(!r.ok);
        CHECK(strcmp(r.code, "bad_request") == 0);
        CHECK(strstr(r.message, i < 2 ? "\"wait\"" : "\"timeout_ms\"") != NULL);
        sx_reply_free(&r);
    }
    CHECK_RC(call_submit(c, 1, f_wait_false, &r), 0);
    CHECK(r.ok && has(&r, "pid") && !has(&r, "result"));
    sx_reply_free(&r);
    CHECK_RC(call_submit(c, 2, f_wait_nil, &r), 0);
    CHECK(r.ok && has(&r, "pid") && !has(&r, "result"));
    sx_reply_free(&r);
    /* With a deadline: the engine answers the submit later (the path of
     * a state store's), and the wait starts then. */
    CHECK_RC(call_submit(c, 2, f_deadline, &r), 0);
    CHECK(r.ok && has(&r, "pid"));
    CHECK_EQ_INT(reply_int(&r, "result"), 1);
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: many submits with wait in flight on one connection are each
 * answered once, with their own pid and result (square x -> x * x), in
 * whatever order they finish. */
static void test_pipelined(void)
{
    fixture f;
    up(&f, &(sx_engine_config){ .workers = 2 }, NULL);
    sx_client *c = connect_ok(&f);
    enum { N = 2000 };
    static int64_t want[N + 1];
    static bool got[N + 1];
    uint64_t first = 0;
    for (int64_t i = 0; i < N; i++) {
        uint8_t b[SX_PAYLOAD_INT_MAX];
        sx_payload in = int_in(b, i);
        uint64_t id;
        CHECK_RC(
            sx_client_post_submit_wait(c, "square", "run", &in, 1, -1, &id), 0);
        if (i == 0)
            first = id;
        CHECK(id - first == (uint64_t)i);
        want[i] = i * i;
    }
    sx_pid seen_first = SX_PID_NONE;
    for (int i = 0; i < N; i++) {
        uint64_t id;
        sx_reply r;
        CHECK_RC(sx_client_next_reply(c, 20000, &id, &r), 0);
        CHECK(r.ok);
        uint64_t k = id - first;
        CHECK(k < N && !got[k]);
        got[k] = true;
        CHECK_EQ_INT(reply_int(&r, "result"), want[k]);
        sx_pid p = reply_pid_ok(&r);
        CHECK(!pid_none(p));
        if (k == 0)
            seen_first = p;
        sx_reply_free(&r);
    }
    CHECK(!pid_none(seen_first));
    sx_reply none;
    CHECK_RC(sx_client_next_reply(c, 0, NULL, &none), SX_ENOTFOUND);
    CHECK_EQ_U64(sx_client_in_flight(c), 0);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: with no room for one more wait the submit is refused `limit`
 * before its job starts; once there is room it goes through. */
static void test_limit(void)
{
    fixture f;
    sx_server_config sc = { .max_waits = 2 };
    up(&f, &(sx_engine_config){ .workers = 2 }, &sc);
    sx_client *c = connect_ok(&f);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = int_in(b, 1000); /* sleeper: 1 s */
    uint64_t ids[2];
    for (int i = 0; i < 2; i++)
        CHECK_RC(sx_client_post_submit_wait(c, "sleeper", "run", &in, 1, -1,
                                            &ids[i]),
                 0);
    CHECK_RC(sx_client_flush(c, 5000), 0);
    /* Both jobs run and their waits are pending. */
    double until = sx_test_now_ms() + 10000;
    sx_server_stats st;
    do {
        sx_server_stats_get(f.s, &st);
    } while (st.waits < 2 && sx_test_now_ms() < until);
    CHECK_EQ_U64(st.waits, 2);
    sx_pid pid = SX_PID_NONE;
    sx_reply r;
    CHECK_RC(
        sx_client_submit_wait(c, "counter", "run", &in, 1, -1, &pid, NULL, &r),
        sx_wire_error("limit", 5));
    CHECK(strstr(r.message, "--max-waits") != NULL);
    CHECK(pid_none(pid));
    sx_reply_free(&r);
    CHECK_EQ_U64(live(&f), 2); /* the refused one never started */
    for (int i = 0; i < 2; i++) {
        uint64_t id;
        CHECK_RC(sx_client_next_reply(c, 10000, &id, &r), 0);
        CHECK(id == ids[0] || id == ids[1]);
        CHECK(r.ok);
        CHECK_EQ_INT(reply_int(&r, "result"), 1000);
        CHECK(!pid_none(reply_pid_ok(&r)));
        sx_reply_free(&r);
    }
    in = int_in(b, 3);
    CHECK_RC(
        sx_client_submit_wait(c, "counter", "run", &in, 1, -1, &pid, NULL, &r),
        0);
    CHECK_EQ_INT(reply_int(&r, "result"), 3);
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
}

/* A submit of sleeper [ms] with "wait" and a deadline (answered later,
 * through the engine's answer path, like a state store's), posted. */
static void post_deadline_wait(sx_client *c, int64_t ms, uint64_t *id)
{
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_map(&pk, 6);
    sx_pack_str(&pk, "op");
    sx_pack_str(&pk, "submit");
    sx_pack_str(&pk, "type");
    sx_pack_str(&pk, "sleeper");
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, "run");
    sx_pack_str(&pk, "input");
    sx_pack_array(&pk, 1);
    sx_pack_int(&pk, ms);
    sx_pack_str(&pk, "wait");
    sx_pack_bool(&pk, true);
    sx_pack_str(&pk, "deadline_ms");
    sx_pack_int(&pk, 60000);
    CHECK_RC(sx_client_post(c, sx_pack_payload(&pk), id), 0);
    sx_pack_fini(&pk);
}

/* Property: submits with "wait" answered later (a deadline: the engine
 * answers the submit after it; a state store's the same) hold their
 * wait's room from the request on: with room for one, the second of two
 * sent together is refused `limit` without a pid and never starts, and
 * the first is answered with its outcome. */
static void test_limit_later(void)
{
    fixture f;
    sx_server_config sc = { .max_waits = 1 };
    up(&f, &(sx_engine_config){ .workers = 2 }, &sc);
    sx_client *c = connect_ok(&f);
    uint64_t a, b;
    post_deadline_wait(c, 300, &a);
    post_deadline_wait(c, 300, &b);
    CHECK_RC(sx_client_flush(c, 5000), 0);
    bool got_a = false, got_b = false;
    for (int i = 0; i < 2; i++) {
        uint64_t id;
        sx_reply r;
        CHECK_RC(sx_client_next_reply(c, 10000, &id, &r), 0);
        if (id == b) {
            got_b = true;
            CHECK(!r.ok && strcmp(r.code, "limit") == 0);
            CHECK(!has(&r, "pid"));
            CHECK(live(&f) <= 1);
        } else {
            CHECK(id == a);
            got_a = true;
            CHECK(r.ok);
            CHECK_EQ_INT(reply_int(&r, "result"), 300);
            CHECK(!pid_none(reply_pid_ok(&r)));
        }
        sx_reply_free(&r);
    }
    CHECK(got_a && got_b);
    /* The room came back: the next one goes through. */
    uint64_t d;
    post_deadline_wait(c, 1, &d);
    sx_reply r;
    uint64_t id;
    CHECK_RC(sx_client_next_reply(c, 10000, &id, &r), 0);
    CHECK(id == d && r.ok);
    sx_reply_free(&r);
    sx_server_stats st;
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.waits, 0);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: a client that leaves with submits still waiting leaves no
 * record behind; its jobs go on and the server serves others. */
static void test_client_leaves(void)
{
    fixture f;
    up(&f, &(sx_engine_config){ .workers = 2 }, NULL);
    sx_client *c = connect_ok(&f);
    for (int i = 0; i < 100; i++)
        CHECK_RC(sx_client_post_submit_wait(c, "idle", "serve", NULL, 0,
                                            i % 2 ? 60000 : -1, NULL),
                 0);
    CHECK_RC(sx_client_flush(c, 5000), 0);
    double until = sx_test_now_ms() + 10000;
    sx_server_stats st;
    do {
        sx_server_stats_get(f.s, &st);
    } while (st.waits < 100 && sx_test_now_ms() < until);
    CHECK_EQ_U64(st.waits, 100);
    sx_client_close(c);
    until = sx_test_now_ms() + 10000;
    do {
        sx_server_stats_get(f.s, &st);
    } while (st.waits > 0 && sx_test_now_ms() < until);
    CHECK_EQ_U64(st.waits, 0);
    CHECK_EQ_U64(live(&f), 100);
    sx_client *d = connect_ok(&f);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = int_in(b, 4);
    sx_reply r;
    CHECK_RC(
        sx_client_submit_wait(d, "square", "run", &in, 1, -1, NULL, NULL, &r),
        0);
    CHECK_EQ_INT(reply_int(&r, "result"), 16);
    sx_reply_free(&r);
    sx_client_close(d);
    fx_down(&f); /* stops the idle jobs */
}

static void f_key(sx_pack *pk)
{
    sx_pack_str(pk, "wait");
    sx_pack_bool(pk, true);
    sx_pack_str(pk, "key");
    sx_pack_str(pk, "order-17");
}

/* Property: on an engine with a state store the submit is answered once
 * the job is stored and has finished; the same key again answers with
 * the same pid, "existing", and the first job's outcome. */
static void test_stored(void)
{
    char dir[64];
    tx_mkdtemp(dir, sizeof dir, "sxsw");
    fixture f;
    up(&f, &(sx_engine_config){ .workers = 2, .state_dir = dir }, NULL);
    sx_client *c = connect_ok(&f);
    sx_reply r;
    CHECK_RC(call_submit(c, 2, f_key, &r), 0);
    CHECK(r.ok);
    CHECK_EQ_INT(reply_int(&r, "result"), 1);
    CHECK(!has(&r, "existing"));
    sx_pid first = reply_pid_ok(&r);
    sx_reply_free(&r);
    CHECK_RC(call_submit(c, 2, f_key, &r), 0);
    CHECK(r.ok);
    CHECK(same_pid(reply_pid_ok(&r), first));
    CHECK(has(&r, "existing"));
    CHECK_EQ_INT(reply_int(&r, "result"), 1);
    sx_reply_free(&r);
    /* Without a key, through the store too. */
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = int_in(b, 3);
    CHECK_RC(sx_client_submit_wait(c, "counter", "run", &in, 1, 10000, NULL,
                                   NULL, &r),
             0);
    CHECK_EQ_INT(reply_int(&r, "result"), 3);
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
    tx_rm_tree(dir);
}

/* Property: an outcome whose wait answer fits a frame but not with the
 * pid beside it answers too_large with the pid (a wait on that pid still
 * gets the outcome); never a frame the client refuses. */
static void test_frame_limit(void)
{
    fixture f;
    enum { FRAME = 4096 };
    sx_server_config sc = { .max_frame = FRAME };
    up(&f, &(sx_engine_config){ .workers = 2, .max_result = 2 * FRAME }, &sc);
    sx_client *c = connect_ok(&f);
    int too_large = 0, wait_ok_then = 0;
    for (int64_t size = FRAME - 160; size <= FRAME - 20; size++) {
        uint8_t b[SX_PAYLOAD_INT_MAX];
        sx_payload in = int_in(b, size);
        sx_pid pid = SX_PID_NONE;
        sx_reply r;
        int rc =
            sx_client_submit_wait(c, "blob", "run", &in, 1, -1, &pid, NULL, &r);
        CHECK(!pid_none(pid));
        if (rc != 0) {
            CHECK(strcmp(r.code, "too_large") == 0);
            too_large++;
            sx_reply r2;
            if (sx_client_wait(c, pid, 5000, NULL, &r2) == 0)
                wait_ok_then++;
            sx_reply_free(&r2);
        }
        sx_reply_free(&r);
    }
    CHECK(too_large > 0);
    CHECK(wait_ok_then > 0); /* the outcome fit a wait's answer */
    sx_client_close(c);
    fx_down(&f);
}

static const sx_test_case cases[] = {
    { "ok", test_ok },
    { "failed", test_failed },
    { "timeout", test_timeout },
    { "open_wait_sleeps", test_open_wait_sleeps },
    { "refused", test_refused },
    { "fields", test_fields },
    { "pipelined", test_pipelined },
    { "limit", test_limit },
    { "limit_later", test_limit_later },
    { "client_leaves", test_client_leaves },
    { "stored", test_stored },
    { "frame_limit", test_frame_limit },
};

SX_TEST_MAIN(cases)

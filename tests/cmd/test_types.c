/* tests/cmd/test_types.c — the process types stepxd ships (cmd/types/types.c)
 * behave as PROTOCOL.md says, driven through the engine API: counter,
 * sleeper, echo (with a mailbox as the sender), fail, exec, fanout, and
 * their bad inputs. Each case opens with the property it checks. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include <stepx/stepx.h>

#include "cmd/types/types.h"
#include "tests/support/support.h"

#define WAIT_MS 30000

/* An engine of 2 workers with max_result (0: the default) and the shipped
 * types. */
static sx_engine *up_max(size_t max_result)
{
    sx_engine_config cfg = { .workers = 2, .max_result = max_result };
    sx_engine *e = tx_engine_new(&cfg);
    CHECK_RC(sx_types_register_builtin(e), 0);
    tx_engine_start(e);
    return e;
}

static sx_engine *up(void)
{
    return up_max(0);
}

static int64_t result_int(const sx_result *r)
{
    int64_t v = -1;
    CHECK_RC(sx_payload_get_int(r->value, &v), 0);
    return v;
}

static sx_pid submit(sx_engine *e, const char *type, const char *method,
                     const sx_payload *in, size_t n)
{
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, type, method, in, n, &pid), 0);
    return pid;
}

/* Property: counter(5) runs 6 steps and finishes with 5; sleeper(20)
 * finishes with 20 after at least 20 ms; bad inputs are submit errors. */
static void test_counter_sleeper(void)
{
    sx_engine *e = up();
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload five = sx_payload_int(b, 5);
    sx_result r;
    tx_wait_done(e, submit(e, "counter", "run", &five, 1), WAIT_MS, &r);
    CHECK_EQ_INT(result_int(&r), 5);
    CHECK_EQ_U64(r.steps, 6);
    sx_result_free(&r);
    uint8_t c[SX_PAYLOAD_INT_MAX];
    sx_payload twenty = sx_payload_int(c, 20);
    double t0 = sx_test_now_ms();
    tx_wait_done(e, submit(e, "sleeper", "run", &twenty, 1), WAIT_MS, &r);
    CHECK(sx_test_now_ms() - t0 >= 20.0);
    CHECK_EQ_INT(result_int(&r), 20);
    sx_result_free(&r);
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "counter", "run", NULL, 0, &pid), SX_EINVAL);
    CHECK_RC(sx_engine_submit(e, "counter", "go", &five, 1, &pid),
             SX_EUNKNOWN_METHOD);
    tx_engine_down(e);
}

/* Property: sleeper refuses ms above 2^40 (the sleep command's bound) at
 * submit with SX_EINVAL, as counter refuses a negative n, rather than
 * accept it and fail at its first step with "sleep: args must be an
 * integer number of ms" (which it is). 2^40 itself is taken (and
 * terminated here); a negative ms sleeps not at all and finishes with
 * that ms (PROTOCOL.md: DONE with ms). */
static void test_sleeper_bounds(void)
{
    sx_engine *e = up();
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(b, ((int64_t)1 << 40) + 1);
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "sleeper", "run", &in, 1, &pid), SX_EINVAL);
    in = sx_payload_int(b, (int64_t)1 << 40);
    pid = submit(e, "sleeper", "run", &in, 1);
    CHECK_RC(sx_engine_terminate(e, pid), 0);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pid, 10000, &r), 0);
    CHECK_RC(r.error, SX_ETERMINATED);
    sx_result_free(&r);
    in = sx_payload_int(b, -5);
    tx_wait_done(e, submit(e, "sleeper", "run", &in, 1), WAIT_MS, &r);
    CHECK_EQ_INT(result_int(&r), -5);
    sx_result_free(&r);
    tx_engine_down(e);
}

/* ---- echo, seen from a mailbox ---- */

typedef struct {
    pthread_mutex_t mu;
    int64_t got, next, bad;
} echo_box;

static void box_fn(void *user, const sx_message *m)
{
    echo_box *b = user;
    int64_t v = -1;
    sx_payload_get_int(m->data, &v);
    pthread_mutex_lock(&b->mu);
    if (strcmp(m->topic, "t") != 0 || v != b->next)
        b->bad++;
    b->next++;
    b->got++;
    pthread_mutex_unlock(&b->mu);
}

static int64_t box_got(echo_box *b)
{
    pthread_mutex_lock(&b->mu);
    int64_t got = b->got;
    pthread_mutex_unlock(&b->mu);
    return got;
}

/* Property: echo sends each message back to its sender with the same
 * topic and data, in order; "stop" finishes it with the number echoed. */
static void test_echo(void)
{
    sx_engine *e = up();
    static echo_box box = { .mu = PTHREAD_MUTEX_INITIALIZER };
    sx_pid mb;
    CHECK_RC(sx_engine_mailbox_new(e, box_fn, &box, &mb), 0);
    sx_pid echo = submit(e, "echo", "serve", NULL, 0);
    for (int i = 0; i < 500; i++) {
        uint8_t b[SX_PAYLOAD_INT_MAX];
        CHECK_RC(sx_engine_send(e, mb, echo, "t", sx_payload_int(b, i)), 0);
    }
    TX_WAIT_UNTIL(box_got(&box) == 500, 10000, 0);
    CHECK_RC(sx_engine_send(e, mb, echo, "stop", (sx_payload){ NULL, 0 }), 0);
    sx_result r;
    tx_wait_done(e, echo, WAIT_MS, &r);
    CHECK_EQ_INT(result_int(&r), 500);
    sx_result_free(&r);
    CHECK_EQ_INT(box.bad, 0);
    /* A cancel finishes it the same way. */
    sx_pid echo2 = submit(e, "echo", "serve", NULL, 0);
    CHECK_RC(sx_engine_cancel(e, echo2, "enough"), 0);
    tx_wait_done(e, echo2, WAIT_MS, &r);
    CHECK_EQ_INT(result_int(&r), 0);
    sx_result_free(&r);
    CHECK_RC(sx_engine_mailbox_free(e, mb), 0);
    tx_engine_down(e);
}

/* Property: messages that arrive together with "stop" (one step sees them
 * all) are still echoed, and before the outcome: every one counted in the
 * result has reached the sender by the time wait returns. (A yielded send
 * is dropped when the step ends DONE; echo uses sx_send.) */
static void test_echo_then_stop(void)
{
    sx_engine *e = up();
    for (int round = 0; round < 20; round++) {
        static echo_box box = { .mu = PTHREAD_MUTEX_INITIALIZER };
        pthread_mutex_lock(&box.mu);
        box.got = box.next = box.bad = 0;
        pthread_mutex_unlock(&box.mu);
        sx_pid mb;
        CHECK_RC(sx_engine_mailbox_new(e, box_fn, &box, &mb), 0);
        sx_pid echo = submit(e, "echo", "serve", NULL, 0);
        for (int i = 0; i < 50; i++) {
            uint8_t b[SX_PAYLOAD_INT_MAX];
            CHECK_RC(sx_engine_send(e, mb, echo, "t", sx_payload_int(b, i)), 0);
        }
        CHECK_RC(sx_engine_send(e, mb, echo, "stop", (sx_payload){ NULL, 0 }),
                 0);
        sx_result r;
        tx_wait_done(e, echo, WAIT_MS, &r);
        CHECK_EQ_INT(result_int(&r), 50);
        sx_result_free(&r);
        pthread_mutex_lock(&box.mu);
        int64_t got = box.got, bad = box.bad;
        pthread_mutex_unlock(&box.mu);
        CHECK_EQ_INT(got, 50);
        CHECK_EQ_INT(bad, 0);
        CHECK_RC(sx_engine_mailbox_free(e, mb), 0);
    }
    tx_engine_down(e);
}

/* Property: fail finishes SX_EFAILED with its message at once. */
static void test_fail(void)
{
    sx_engine *e = up();
    uint8_t buf[64];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    sx_pack_str(&pk, "boom");
    sx_payload in = sx_pack_payload(&pk);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, submit(e, "fail", "run", &in, 1), 10000, &r), 0);
    CHECK_RC(r.error, SX_EFAILED);
    CHECK_STR(r.error_msg, "boom");
    sx_result_free(&r);
    tx_engine_down(e);
}

/* Reads {status, stdout, ...} from an exec result. */
static void exec_result(const sx_result *r, int64_t *status, char *out,
                        size_t cap)
{
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, r->value);
    CHECK_RC(sx_unpack_map(&u, &n), 0);
    *status = -1;
    out[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        CHECK_RC(sx_unpack_str(&u, &k, &kl), 0);
        if (kl == 6 && memcmp(k, "status", 6) == 0 &&
            sx_unpack_int(&u, status) == 0)
            continue;
        const void *p;
        size_t len;
        if (kl == 6 && memcmp(k, "stdout", 6) == 0 &&
            sx_unpack_bin(&u, &p, &len) == 0) {
            CHECK(len < cap);
            memcpy(out, p, len);
            out[len] = 0;
            continue;
        }
        CHECK_RC(sx_unpack_skip(&u), 0);
    }
}

/* Property: exec runs argv with the given stdin and finishes with its
 * exit status and captured stdout; a missing binary fails the process. */
static void test_exec(void)
{
    sx_engine *e = up();
    uint8_t a[128], s[32];
    sx_pack pk, ps;
    sx_pack_init_fixed(&pk, a, sizeof a);
    sx_pack_array(&pk, 3);
    sx_pack_str(&pk, "/bin/sh");
    sx_pack_str(&pk, "-c");
    sx_pack_str(&pk, "tr a-z A-Z; exit 3");
    sx_pack_init_fixed(&ps, s, sizeof s);
    sx_pack_str(&ps, "hello");
    sx_payload in[2] = { sx_pack_payload(&pk), sx_pack_payload(&ps) };
    sx_result r;
    tx_wait_done(e, submit(e, "exec", "run", in, 2), WAIT_MS, &r);
    int64_t status;
    char out[64];
    exec_result(&r, &status, out, sizeof out);
    CHECK_EQ_INT(status, 3);
    CHECK_STR(out, "HELLO");
    sx_result_free(&r);
    sx_pack_init_fixed(&pk, a, sizeof a);
    sx_pack_array(&pk, 1);
    sx_pack_str(&pk, "/nonexistent/stepx-test-binary");
    in[0] = sx_pack_payload(&pk);
    CHECK_RC(sx_engine_wait(e, submit(e, "exec", "run", in, 1), 10000, &r), 0);
    CHECK(r.error != 0);
    sx_result_free(&r);
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "exec", "run", in + 1, 1, &pid), SX_EINVAL);
    tx_engine_down(e);
}

/* Reads the keys truncate adds and the length of stdout from an exec
 * type's result. */
static void exec_truncation(const sx_result *r, size_t *out_len,
                            bool *truncated, uint64_t *out_total)
{
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, r->value);
    CHECK_RC(sx_unpack_map(&u, &n), 0);
    CHECK_EQ_INT(n, 7);
    *out_len = SIZE_MAX;
    *out_total = UINT64_MAX;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        const void *p;
        CHECK_RC(sx_unpack_str(&u, &k, &kl), 0);
        if (kl == 6 && memcmp(k, "stdout", 6) == 0)
            CHECK_RC(sx_unpack_bin(&u, &p, out_len), 0);
        else if (kl == 9 && memcmp(k, "truncated", 9) == 0)
            CHECK_RC(sx_unpack_bool(&u, truncated), 0);
        else if (kl == 12 && memcmp(k, "stdout_total", 12) == 0)
            CHECK_RC(sx_unpack_uint(&u, out_total), 0);
        else
            CHECK_RC(sx_unpack_skip(&u), 0);
    }
}

/* Property: exec keeps at most 1 MiB of each stream by default and drops
 * the rest without killing the program (it fails the process no more):
 * head -c 3000000 finishes with 1 MiB, truncated, stdout_total 3000000,
 * status 0; a third input sets the cap (nil: the default); a cap the
 * exec command would refuse, and a fourth input, are submit errors. */
static void test_exec_truncate(void)
{
    sx_engine *e = up();
    uint8_t a[128], c[16];
    sx_pack pk, pc;
    sx_pack_init_fixed(&pk, a, sizeof a);
    sx_pack_array(&pk, 4);
    sx_pack_str(&pk, "head");
    sx_pack_str(&pk, "-c");
    sx_pack_str(&pk, "3000000");
    sx_pack_str(&pk, "/dev/zero");
    sx_payload in[4] = {
        sx_pack_payload(&pk), { NULL, 0 }, { NULL, 0 }, { NULL, 0 }
    };
    sx_result r;
    size_t len;
    bool cut = false;
    uint64_t total;
    int64_t status;
    char out[128];
    tx_wait_done(e, submit(e, "exec", "run", in, 1), WAIT_MS, &r);
    exec_truncation(&r, &len, &cut, &total);
    CHECK_EQ_U64(len, (size_t)1 << 20);
    CHECK(cut);
    CHECK_EQ_U64(total, 3000000);
    sx_result_free(&r);
    /* [argv, nil, 100] */
    sx_pack_init_fixed(&pc, c, sizeof c);
    sx_pack_nil(&pc);
    in[1] = sx_pack_payload(&pc);
    uint8_t cb[SX_PAYLOAD_INT_MAX];
    in[2] = sx_payload_int(cb, 100);
    tx_wait_done(e, submit(e, "exec", "run", in, 3), WAIT_MS, &r);
    exec_truncation(&r, &len, &cut, &total);
    CHECK_EQ_U64(len, 100);
    CHECK(cut);
    CHECK_EQ_U64(total, 3000000);
    exec_result(&r, &status, out, sizeof out);
    CHECK_EQ_INT(status, 0);
    sx_result_free(&r);
    /* [argv, nil, nil]: the default cap. */
    in[2] = sx_pack_payload(&pc);
    tx_wait_done(e, submit(e, "exec", "run", in, 3), WAIT_MS, &r);
    exec_truncation(&r, &len, &cut, &total);
    CHECK_EQ_U64(len, (size_t)1 << 20);
    sx_result_free(&r);
    sx_pid pid;
    static const int64_t bad[] = { -1, ((int64_t)64 << 20) + 1 };
    for (size_t i = 0; i < 2; i++) {
        in[2] = sx_payload_int(cb, bad[i]);
        CHECK_RC(sx_engine_submit(e, "exec", "run", in, 3, &pid), SX_EINVAL);
    }
    in[2] = sx_pack_payload(&pk); /* not an int */
    CHECK_RC(sx_engine_submit(e, "exec", "run", in, 3, &pid), SX_EINVAL);
    in[2] = sx_payload_int(cb, 100);
    in[3] = sx_payload_int(cb, 100);
    CHECK_RC(sx_engine_submit(e, "exec", "run", in, 4, &pid), SX_EINVAL);
    tx_engine_down(e);
}

/* fanout n exec head -c bytes /dev/zero, with inputs in in[4]. */
static void fanout_heads(sx_pack pk[4], uint8_t b[4][96], sx_payload in[4],
                         int64_t n, const char *bytes)
{
    for (int i = 0; i < 4; i++)
        sx_pack_init_fixed(&pk[i], b[i], sizeof b[i]);
    sx_pack_int(&pk[0], n);
    sx_pack_str(&pk[1], "exec");
    sx_pack_str(&pk[2], "run");
    sx_pack_array(&pk[3], 1); /* child_input: [argv] */
    sx_pack_array(&pk[3], 4);
    sx_pack_str(&pk[3], "head");
    sx_pack_str(&pk[3], "-c");
    sx_pack_str(&pk[3], bytes);
    sx_pack_str(&pk[3], "/dev/zero");
    for (int i = 0; i < 4; i++) {
        CHECK_RC(pk[i].err, 0);
        in[i] = sx_pack_payload(&pk[i]);
    }
}

/* Property: a fanout's result is bounded by max_result (10,000 bytes
 * here): children whose results add up to more make it fail with
 * SX_ETOOLARGE as soon as they do ("result of at least N bytes", before
 * it holds them all); a child whose own result is over the limit makes it
 * fail with SX_ETOOLARGE too, naming the child; under the limit it
 * finishes with the children's results. */
static void test_fanout_max_result(void)
{
    sx_engine *e = up_max(10000);
    uint8_t b[4][96];
    sx_pack pk[4];
    sx_payload in[4];
    sx_result r;
    fanout_heads(pk, b, in, 4, "3000"); /* ~3,100 bytes per child */
    CHECK_RC(sx_engine_wait(e, submit(e, "fanout", "run", in, 4), 30000, &r),
             0);
    CHECK_RC(r.error, SX_ETOOLARGE);
    CHECK(strncmp(r.error_msg, "result of at least ", 19) == 0);
    CHECK(strstr(r.error_msg, " bytes is over the limit of 10000 "
                              "(max_result)") != NULL);
    sx_result_free(&r);
    fanout_heads(pk, b, in, 2, "20000");
    CHECK_RC(sx_engine_wait(e, submit(e, "fanout", "run", in, 4), 30000, &r),
             0);
    CHECK_RC(r.error, SX_ETOOLARGE);
    CHECK(strncmp(r.error_msg, "child ", 6) == 0);
    CHECK(strstr(r.error_msg, ": result of ") != NULL);
    CHECK(strstr(r.error_msg, " bytes is over the limit of 10000 "
                              "(max_result)") != NULL);
    sx_result_free(&r);
    fanout_heads(pk, b, in, 2, "3000");
    tx_wait_done(e, submit(e, "fanout", "run", in, 4), WAIT_MS, &r);
    CHECK(r.value.len <= 10000);
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, r.value);
    CHECK_RC(sx_unpack_array(&u, &n), 0);
    CHECK_EQ_INT(n, 2);
    sx_result_free(&r);
    tx_engine_down(e);
}

/* Property: fanout(5, counter, run, [3]) finishes with [3,3,3,3,3];
 * fanout of a failing child fails naming the child. */
static void test_fanout(void)
{
    sx_engine *e = up();
    uint8_t b[4][64];
    sx_pack pk[4];
    for (int i = 0; i < 4; i++)
        sx_pack_init_fixed(&pk[i], b[i], sizeof b[i]);
    sx_pack_int(&pk[0], 5);
    sx_pack_str(&pk[1], "counter");
    sx_pack_str(&pk[2], "run");
    sx_pack_array(&pk[3], 1);
    sx_pack_int(&pk[3], 3);
    sx_payload in[4];
    for (int i = 0; i < 4; i++)
        in[i] = sx_pack_payload(&pk[i]);
    sx_result r;
    tx_wait_done(e, submit(e, "fanout", "run", in, 4), WAIT_MS, &r);
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, r.value);
    CHECK_RC(sx_unpack_array(&u, &n), 0);
    CHECK_EQ_INT(n, 5);
    for (uint32_t i = 0; i < n; i++) {
        int64_t v;
        CHECK_RC(sx_unpack_int(&u, &v), 0);
        CHECK_EQ_INT(v, 3);
    }
    sx_result_free(&r);
    sx_pack_init_fixed(&pk[1], b[1], sizeof b[1]);
    sx_pack_str(&pk[1], "fail");
    sx_pack_init_fixed(&pk[3], b[3], sizeof b[3]);
    sx_pack_array(&pk[3], 1);
    sx_pack_str(&pk[3], "child says no");
    in[1] = sx_pack_payload(&pk[1]);
    in[3] = sx_pack_payload(&pk[3]);
    CHECK_RC(sx_engine_wait(e, submit(e, "fanout", "run", in, 4), 10000, &r),
             0);
    CHECK_RC(r.error, SX_EFAILED);
    CHECK(strstr(r.error_msg, "child says no") != NULL);
    sx_result_free(&r);
    tx_engine_down(e);
}

/* Property: fanout refuses at submit (SX_EINVAL) a child input the spawn
 * command cannot take, more than 64 values, and a child type or method
 * name over 255 bytes, or one with a NUL byte inside, rather than accept
 * them and have every child's spawn fail, the fanout with "child 0:
 * invalid argument" (with a NUL, a spawn of the type named by the bytes
 * before it, unless the spawn command refuses it too). */
static void test_fanout_bounds(void)
{
    sx_engine *e = up();
    char longname[300];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    for (int bad = 0; bad < 5; bad++) {
        sx_pack pk[4];
        for (int i = 0; i < 4; i++)
            sx_pack_init(&pk[i]);
        sx_pack_int(&pk[0], 2);
        if (bad == 3)
            sx_pack_strn(&pk[1], "counter\0x", 9);
        else
            sx_pack_str(&pk[1], bad == 1 ? longname : "counter");
        if (bad == 4)
            sx_pack_strn(&pk[2], "run\0x", 5);
        else
            sx_pack_str(&pk[2], bad == 2 ? longname : "run");
        sx_pack_array(&pk[3], bad == 0 ? 65 : 1);
        for (int i = 0; i < (bad == 0 ? 65 : 1); i++)
            sx_pack_int(&pk[3], 1);
        sx_payload in[4];
        for (int i = 0; i < 4; i++)
            in[i] = sx_pack_payload(&pk[i]);
        sx_pid pid;
        CHECK_RC(sx_engine_submit(e, "fanout", "run", in, 4, &pid), SX_EINVAL);
        for (int i = 0; i < 4; i++)
            sx_pack_fini(&pk[i]);
    }
    tx_engine_down(e);
}

/* Property: a fanout that fails passes its child's message on whole, as
 * "child i: " + that message, however long. Written into a 300-byte
 * buffer, five fanouts nested over a fail with 85 "€" (255 bytes) would
 * give "child 0: " x 5 and 84 and a third "€" (299 bytes, the last
 * character cut in half). That is not UTF-8, which a msgpack str must be:
 * `stepx --json` would then print {"pid":..,"ok":false} with no "error"
 * at all (jansson refuses such a string). */
static void test_fanout_long_message(void)
{
    sx_engine *e = up();
    char msg[256] = "";
    for (int i = 0; i < 85; i++)
        strcat(msg, "\xe2\x82\xac"); /* U+20AC, 3 bytes in UTF-8 */
    /* [1, "fanout", "run", [... [1, "fail", "run", [msg]]]]: five fanouts,
     * each the only child of the one above. */
    sx_pack inner;
    sx_pack_init(&inner);
    sx_pack_array(&inner, 1);
    sx_pack_str(&inner, msg);
    const char *child = "fail";
    for (int level = 0; level < 5; level++) {
        sx_pack pk[4];
        for (int i = 0; i < 4; i++)
            sx_pack_init(&pk[i]);
        sx_pack_int(&pk[0], 1);
        sx_pack_str(&pk[1], child);
        sx_pack_str(&pk[2], "run");
        sx_pack_raw(&pk[3], sx_pack_payload(&inner));
        sx_payload in[4];
        for (int i = 0; i < 4; i++)
            in[i] = sx_pack_payload(&pk[i]);
        if (level == 4) {
            sx_result r;
            CHECK_RC(
                sx_engine_wait(e, submit(e, "fanout", "run", in, 4), 10000, &r),
                0);
            CHECK_RC(r.error, SX_EFAILED);
            char want[512];
            snprintf(want, sizeof want, "%s%s",
                     "child 0: child 0: child 0: child 0: child 0: ", msg);
            CHECK_STR(r.error_msg, want);
            sx_result_free(&r);
        }
        /* This level's whole input, as the next level's child input. */
        sx_pack_reset(&inner);
        sx_pack_array(&inner, 4);
        for (int i = 0; i < 4; i++)
            sx_pack_raw(&inner, in[i]);
        CHECK_RC(inner.err, 0);
        for (int i = 0; i < 4; i++)
            sx_pack_fini(&pk[i]);
        child = "fanout";
    }
    sx_pack_fini(&inner);
    tx_engine_down(e);
}

static const sx_test_case cases[] = {
    { "counter_sleeper", test_counter_sleeper },
    { "sleeper_bounds", test_sleeper_bounds },
    { "echo", test_echo },
    { "echo_then_stop", test_echo_then_stop },
    { "fail", test_fail },
    { "exec", test_exec },
    { "exec_truncate", test_exec_truncate },
    { "fanout", test_fanout },
    { "fanout_bounds", test_fanout_bounds },
    { "fanout_long_message", test_fanout_long_message },
    { "fanout_max_result", test_fanout_max_result },
};

SX_TEST_MAIN(cases)

/* tests/relay/test_server.c — the relay server end to end: a server on a
 * temporary Unix socket and on TCP 127.0.0.1:0 over an engine with the
 * shipped and the test process types (relay_fixture.h), driven through the
 * C client (and raw frames where the client would hide something). Every
 * op of PROTOCOL.md, every error code the server can produce, pushes in
 * per-sender order, subscribe and wait on finished PIDs, the token rules,
 * the socket file's rules. Each case opens with the property it checks.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <stepx/relay.h>

#include "tests/support/support.h"

#include "tests/relay/relay_fixture.h"

/* ==== fixture helpers ================================================== */

static sx_client *connect_ok(const char *addr)
{
    sx_client *c = NULL;
    CHECK_RC(sx_client_connect(addr, NULL, 10000, &c), 0);
    return c;
}

/* ==== payload helpers =================================================== */

/* The string at key, copied into buf. */
static const char *map_str(sx_payload m, const char *key, char *buf, size_t cap)
{
    sx_payload v;
    CHECK_RC(sx_map_get(m, key, &v), 0);
    CHECK_RC(sx_payload_get_str(v, buf, cap), 0);
    return buf;
}

static bool map_bool(sx_payload m, const char *key)
{
    sx_payload v;
    bool b = false;
    CHECK_RC(sx_map_get(m, key, &v), 0);
    sx_unpack u;
    sx_unpack_init(&u, v);
    CHECK_RC(sx_unpack_bool(&u, &b), 0);
    return b;
}

/* The error code of a reply or push map ({"error": {"code": ...}}). */
static const char *err_code(sx_payload m, char *buf, size_t cap)
{
    sx_payload e;
    CHECK_RC(sx_map_get(m, "error", &e), 0);
    return map_str(e, "code", buf, cap);
}

static sx_pid map_pid(sx_payload m, const char *key)
{
    char buf[SX_PID_TEXT_MAX];
    sx_pid p;
    map_str(m, key, buf, sizeof(buf));
    CHECK_RC(sx_pid_parse(buf, &p), 0);
    return p;
}

static sx_pid submit_ok(sx_client *c, const char *type, const char *method,
                        const sx_payload *in, size_t n)
{
    sx_pid pid;
    CHECK_RC(sx_client_submit(c, type, method, in, n, &pid, NULL), 0);
    return pid;
}

static sx_pid submit_int(sx_client *c, const char *type, int64_t v)
{
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(b, v);
    return submit_ok(c, type, "run", &in, 1);
}

/* Calls with a request built in pk (freed), expecting ok = false with
 * code; returns nothing, checks everything. */
static void call_expect(sx_client *c, sx_pack *pk, const char *code)
{
    sx_reply r;
    CHECK_RC(pk->err, 0);
    CHECK_RC(sx_client_call(c, sx_pack_payload(pk), 10000, &r), 0);
    sx_pack_fini(pk);
    if (code == NULL) {
        CHECK(r.ok);
    } else {
        CHECK(!r.ok);
        CHECK_STR(r.code, code);
        CHECK(r.message != NULL && r.message[0] != '\0');
        CHECK(r.error != 0);
    }
    sx_reply_free(&r);
}

static void pk_op(sx_pack *pk, uint32_t n, const char *op)
{
    sx_pack_init(pk);
    sx_pack_map(pk, n);
    sx_pack_str(pk, "op");
    sx_pack_str(pk, op);
}

static void pk_pid(sx_pack *pk, const char *key, sx_pid pid)
{
    char t[SX_PID_TEXT_MAX];
    sx_pid_format(pid, t, sizeof(t));
    sx_pack_str(pk, key);
    sx_pack_str(pk, t);
}

/* ==== cases ============================================================= */

/* Property: hello answers version 1, the node, the configured server name,
 * the connection's own mailbox PID (the client keeps it) and the server's
 * frame limit (max_frame, an extension; the default here); two
 * connections get different mailboxes; both transports answer. */
static void test_hello(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *a = connect_ok(f.unix_addr);
    sx_client *b = connect_ok(f.tcp_addr);
    CHECK(!sx_pid_eq(sx_client_mailbox(a), sx_client_mailbox(b)));
    CHECK(!sx_pid_eq(sx_client_mailbox(a), SX_PID_NONE));
    sx_pack pk;
    pk_op(&pk, 2, "hello");
    sx_pack_str(&pk, "version");
    sx_pack_uint(&pk, 1);
    sx_reply r;
    CHECK_RC(sx_client_call(a, sx_pack_payload(&pk), 10000, &r), 0);
    sx_pack_fini(&pk);
    CHECK(r.ok);
    char buf[64];
    CHECK_EQ_INT(map_int(r.body, "version"), 1);
    CHECK_EQ_INT(map_int(r.body, "node"), 0);
    CHECK_STR(map_str(r.body, "server", buf, sizeof(buf)), FX_SERVER_NAME);
    CHECK(sx_pid_eq(map_pid(r.body, "mailbox"), sx_client_mailbox(a)));
    CHECK_EQ_INT(map_int(r.body, "max_frame"), SX_WIRE_MAX_FRAME_DEFAULT);
    sx_reply_free(&r);
    /* A version this server does not speak is bad_request; the connection
     * stays usable. */
    pk_op(&pk, 2, "hello");
    sx_pack_str(&pk, "version");
    sx_pack_uint(&pk, 2);
    call_expect(a, &pk, "bad_request");
    pk_op(&pk, 1, "hello");
    call_expect(a, &pk, "bad_request");
    pk_op(&pk, 1, "types");
    call_expect(a, &pk, NULL);
    sx_client_close(a);
    sx_client_close(b);
    fx_down(&f);
}

/* Property: submit + wait over both transports returns the process's
 * result and its step count (counter(5): result 5, 6 steps). */
static void test_submit_wait(void)
{
    fixture f;
    fx_up_tcp(&f);
    const char *addrs[2] = { f.unix_addr, f.tcp_addr };
    for (int i = 0; i < 2; i++) {
        sx_client *c = connect_ok(addrs[i]);
        sx_pid pid = submit_int(c, "counter", 5);
        uint64_t steps = 0;
        sx_reply r;
        CHECK_RC(sx_client_wait(c, pid, -1, &steps, &r), 0);
        CHECK(r.ok);
        CHECK_EQ_INT(map_int(r.body, "result"), 5);
        CHECK_EQ_U64(steps, 6);
        CHECK_EQ_INT(map_int(r.body, "steps"), 6);
        sx_reply_free(&r);
        sx_client_close(c);
    }
    fx_down(&f);
}

/* Property: wait on a PID that finished before the wait began still
 * returns its outcome (kept outcomes), successful or failed. */
static void test_wait_after_finish(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pid pid = submit_int(c, "counter", 3);
    sx_result res;
    CHECK_RC(sx_engine_wait(f.e, pid, 10000, &res), 0);
    sx_result_free(&res);
    sx_reply r;
    uint64_t steps = 0;
    CHECK_RC(sx_client_wait(c, pid, 1000, &steps, &r), 0);
    CHECK_EQ_INT(map_int(r.body, "result"), 3);
    CHECK_EQ_U64(steps, 4);
    sx_reply_free(&r);
    /* A 0 ms timeout on a finished PID still gets the outcome. */
    CHECK_RC(sx_client_wait(c, pid, 0, NULL, &r), 0);
    sx_reply_free(&r);
    /* A failed one, after it finished. */
    sx_payload m;
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_str(&pk, "it broke");
    m = sx_pack_payload(&pk);
    sx_pid fp = submit_ok(c, "fail", "run", &m, 1);
    sx_pack_fini(&pk);
    CHECK_RC(sx_engine_wait(f.e, fp, 10000, &res), 0);
    sx_result_free(&res);
    CHECK(sx_client_wait(c, fp, -1, NULL, &r) != 0);
    CHECK_STR(r.code, "failed");
    CHECK_STR(r.message, "it broke");
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: failed, terminated and cancelled processes answer wait with
 * ok = false and codes failed / terminated / cancelled and their
 * messages; wait's timeout_ms gives timeout while the process lives. */
static void test_wait_errors(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_reply r;
    /* failed */
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_str(&pk, "no luck");
    sx_payload m = sx_pack_payload(&pk);
    sx_pid fp = submit_ok(c, "fail", "run", &m, 1);
    sx_pack_fini(&pk);
    CHECK_RC(sx_client_wait(c, fp, -1, NULL, &r), sx_wire_error("failed", 6));
    CHECK(!r.ok);
    CHECK_STR(r.code, "failed");
    CHECK_STR(r.message, "no luck");
    sx_reply_free(&r);
    /* timeout, then terminated */
    sx_pid ip = submit_ok(c, "idle", "serve", NULL, 0);
    double t0 = sx_test_now_ms();
    CHECK_RC(sx_client_wait(c, ip, 50, NULL, &r), SX_ETIMEDOUT);
    CHECK(sx_test_now_ms() - t0 >= 45);
    CHECK_STR(r.code, "timeout");
    sx_reply_free(&r);
    CHECK_RC(sx_client_terminate(c, ip, NULL), 0);
    CHECK_RC(sx_client_wait(c, ip, -1, NULL, &r),
             sx_wire_error("terminated", 10));
    CHECK_STR(r.code, "terminated");
    sx_reply_free(&r);
    /* cancelled: the process's own SX_ECANCELLED on a cancel */
    sx_pid cp = submit_ok(c, "idle", "serve", NULL, 0);
    CHECK_RC(sx_client_cancel(c, cp, "enough", NULL), 0);
    CHECK(sx_client_wait(c, cp, -1, NULL, &r) != 0);
    CHECK_STR(r.code, "cancelled");
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: cancel delivers the soft cancel (echo finishes with its
 * count); terminate ends a process at once; both answer not_found for
 * an unknown PID. */
static void test_cancel_terminate(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.tcp_addr);
    sx_pid ep = submit_ok(c, "echo", "serve", NULL, 0);
    CHECK_RC(sx_client_cancel(c, ep, NULL, NULL), 0);
    sx_reply r;
    CHECK_RC(sx_client_wait(c, ep, -1, NULL, &r), 0);
    CHECK_EQ_INT(map_int(r.body, "result"), 0);
    sx_reply_free(&r);
    sx_pid none = { 0, 1, 999999 };
    CHECK_RC(sx_client_cancel(c, none, "x", &r), SX_ENOTFOUND);
    CHECK_STR(r.code, "not_found");
    sx_reply_free(&r);
    CHECK_RC(sx_client_terminate(c, none, &r), SX_ENOTFOUND);
    CHECK_STR(r.code, "not_found");
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: messages a process sends to a connection's mailbox arrive as
 * pushes {push: message, from, topic, data}, once each, in order; send
 * uses the mailbox as `from` (echo answers to it). */
static void test_send_echo(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pid ep = submit_ok(c, "echo", "serve", NULL, 0);
    const int n = 200;
    for (int i = 0; i < n; i++) {
        uint8_t b[SX_PAYLOAD_INT_MAX];
        CHECK_RC(sx_client_send(c, ep, i % 2 ? "odd" : "even",
                                sx_payload_int(b, i), NULL),
                 0);
    }
    for (int i = 0; i < n; i++) {
        sx_reply p;
        CHECK_RC(sx_client_next_push(c, 10000, &p), 0);
        char buf[32];
        CHECK_STR(map_str(p.body, "push", buf, sizeof(buf)), "message");
        CHECK(sx_pid_eq(map_pid(p.body, "from"), ep));
        CHECK_STR(map_str(p.body, "topic", buf, sizeof(buf)),
                  i % 2 ? "odd" : "even");
        CHECK_EQ_INT(map_int(p.body, "data"), i);
        sx_reply_free(&p);
    }
    sx_reply p;
    CHECK_RC(sx_client_next_push(c, 50, &p), SX_ETIMEDOUT);
    CHECK_RC(sx_client_send(c, ep, "stop", nil, NULL), 0);
    sx_reply r;
    CHECK_RC(sx_client_wait(c, ep, -1, NULL, &r), 0);
    CHECK_EQ_INT(map_int(r.body, "result"), n);
    sx_reply_free(&r);
    /* send errors: unknown PID, bad topic */
    CHECK_RC(sx_client_send(c, ep, "late", nil, &r), SX_ENOTFOUND);
    CHECK_STR(r.code, "not_found");
    sx_reply_free(&r);
    char long_topic[300];
    memset(long_topic, 'a', sizeof(long_topic) - 1);
    long_topic[299] = '\0';
    CHECK(sx_client_send(c, ep, long_topic, nil, &r) != 0);
    CHECK_STR(r.code, "bad_request");
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: per-sender FIFO: two processes flooding one connection's
 * mailbox interleave, but each one's messages arrive exactly once and in
 * the order it sent them. */
static void test_push_order(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    char mb[SX_PID_TEXT_MAX];
    sx_pid_format(sx_client_mailbox(c), mb, sizeof(mb));
    const int n = 3000;
    sx_pid senders[2];
    for (int k = 0; k < 2; k++) {
        sx_pack a, b2, c2;
        sx_pack_init(&a);
        sx_pack_init(&b2);
        sx_pack_init(&c2);
        sx_pack_str(&a, mb);
        sx_pack_int(&b2, n);
        sx_pack_int(&c2, 16);
        sx_payload in[3] = { sx_pack_payload(&a), sx_pack_payload(&b2),
                             sx_pack_payload(&c2) };
        senders[k] = submit_ok(c, "flood", "run", in, 3);
        sx_pack_fini(&a);
        sx_pack_fini(&b2);
        sx_pack_fini(&c2);
    }
    int64_t next[2] = { 0, 0 };
    for (int i = 0; i < 2 * n; i++) {
        sx_reply p;
        CHECK_RC(sx_client_next_push(c, 20000, &p), 0);
        sx_pid from = map_pid(p.body, "from");
        int k = sx_pid_eq(from, senders[0]) ? 0 : 1;
        CHECK(sx_pid_eq(from, senders[k]));
        sx_payload d;
        CHECK_RC(sx_map_get(p.body, "data", &d), 0);
        sx_unpack u;
        uint32_t len;
        int64_t seq;
        sx_unpack_init(&u, d);
        CHECK_RC(sx_unpack_array(&u, &len), 0);
        CHECK_RC(sx_unpack_int(&u, &seq), 0);
        CHECK_EQ_INT(seq, next[k]);
        next[k]++;
        sx_reply_free(&p);
    }
    CHECK_EQ_INT(next[0], n);
    CHECK_EQ_INT(next[1], n);
    sx_server_stats st;
    sx_server_stats_get(f.s, &st);
    CHECK(st.pushes >= (uint64_t)(2 * n));
    sx_client_close(c);
    fx_down(&f);
}

/* Property: subscribe replies ok, then one exit push when the process
 * finishes (result or error); at once for a PID that already finished;
 * not_found for an unknown PID. */
static void test_subscribe(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pid sp = submit_int(c, "sleeper", 30);
    CHECK_RC(sx_client_subscribe(c, sp, NULL), 0);
    sx_reply p;
    char buf[32];
    CHECK_RC(sx_client_next_push(c, 10000, &p), 0);
    CHECK_STR(map_str(p.body, "push", buf, sizeof(buf)), "exit");
    CHECK(sx_pid_eq(map_pid(p.body, "pid"), sp));
    CHECK(map_bool(p.body, "ok"));
    CHECK_EQ_INT(map_int(p.body, "result"), 30);
    sx_reply_free(&p);
    /* Exactly once: no second push. */
    CHECK_RC(sx_client_next_push(c, 50, &p), SX_ETIMEDOUT);
    /* Already finished: the push comes at once. */
    CHECK_RC(sx_client_subscribe(c, sp, NULL), 0);
    CHECK_RC(sx_client_next_push(c, 10000, &p), 0);
    CHECK_EQ_INT(map_int(p.body, "result"), 30);
    sx_reply_free(&p);
    /* A failure: ok false and the error. */
    sx_pid ip = submit_ok(c, "idle", "serve", NULL, 0);
    CHECK_RC(sx_client_subscribe(c, ip, NULL), 0);
    CHECK_RC(sx_client_terminate(c, ip, NULL), 0);
    CHECK_RC(sx_client_next_push(c, 10000, &p), 0);
    CHECK(!map_bool(p.body, "ok"));
    CHECK_STR(err_code(p.body, buf, sizeof(buf)), "terminated");
    CHECK(sx_map_get(p.body, "result", NULL) == SX_ENOTFOUND);
    sx_reply_free(&p);
    sx_reply r;
    sx_pid none = { 0, 1, 777777 };
    CHECK_RC(sx_client_subscribe(c, none, &r), SX_ENOTFOUND);
    CHECK_STR(r.code, "not_found");
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: ps lists live processes {pid, type, method, state, steps} up
 * to limit; stats is a map of counters that moves with the work; types
 * lists every registered type with its methods, in the engine's order
 * (the shipped types, then the fixture's). */
static void test_ps_stats_types(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pid a = submit_ok(c, "idle", "serve", NULL, 0);
    sx_pid b = submit_ok(c, "echo", "serve", NULL, 0);
    sx_pack pk;
    sx_reply r;
    pk_op(&pk, 1, "ps");
    CHECK_RC(sx_client_call(c, sx_pack_payload(&pk), 10000, &r), 0);
    sx_pack_fini(&pk);
    CHECK(r.ok);
    sx_payload list;
    CHECK_RC(sx_map_get(r.body, "processes", &list), 0);
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, list);
    CHECK_RC(sx_unpack_array(&u, &n), 0);
    CHECK_EQ_INT(n, 2);
    int seen = 0;
    for (uint32_t i = 0; i < n; i++) {
        sx_payload e;
        CHECK_RC(sx_unpack_raw(&u, &e), 0);
        char t[32], m[32], s[32];
        sx_pid pid = map_pid(e, "pid");
        map_str(e, "type", t, sizeof(t));
        map_str(e, "method", m, sizeof(m));
        map_str(e, "state", s, sizeof(s));
        CHECK(map_int(e, "steps") >= 0);
        CHECK_STR(m, "serve");
        if (sx_pid_eq(pid, a)) {
            CHECK_STR(t, "idle");
            seen |= 1;
        } else if (sx_pid_eq(pid, b)) {
            CHECK_STR(t, "echo");
            seen |= 2;
        }
    }
    CHECK_EQ_INT(seen, 3);
    sx_reply_free(&r);
    pk_op(&pk, 2, "ps");
    sx_pack_str(&pk, "limit");
    sx_pack_uint(&pk, 1);
    CHECK_RC(sx_client_call(c, sx_pack_payload(&pk), 10000, &r), 0);
    sx_pack_fini(&pk);
    CHECK_RC(sx_map_get(r.body, "processes", &list), 0);
    sx_unpack_init(&u, list);
    CHECK_RC(sx_unpack_array(&u, &n), 0);
    CHECK_EQ_INT(n, 1);
    sx_reply_free(&r);
    pk_op(&pk, 2, "ps");
    sx_pack_str(&pk, "limit");
    sx_pack_int(&pk, -1);
    call_expect(c, &pk, "bad_request");

    pk_op(&pk, 1, "stats");
    CHECK_RC(sx_client_call(c, sx_pack_payload(&pk), 10000, &r), 0);
    sx_pack_fini(&pk);
    sx_payload st;
    CHECK_RC(sx_map_get(r.body, "stats", &st), 0);
    CHECK_EQ_INT(map_int(st, "live"), 2);
    CHECK_EQ_INT(map_int(st, "submitted"), 2);
    CHECK_EQ_INT(map_int(st, "workers"), 2);
    CHECK(map_int(st, "steps") >= 0);
    CHECK(map_int(st, "completed") == 0);
    CHECK(map_int(st, "failed") == 0);
    CHECK(map_int(st, "messages") >= 0);
    CHECK(map_int(st, "steals") >= 0);
    CHECK(map_int(st, "parks") >= 0);
    CHECK_EQ_INT(map_int(st, "relay_connections"), 1);
    sx_payload pw;
    CHECK_RC(sx_map_get(st, "per_worker", &pw), 0);
    sx_unpack_init(&u, pw);
    CHECK_RC(sx_unpack_array(&u, &n), 0);
    CHECK_EQ_INT(n, 2);
    sx_payload w0;
    CHECK_RC(sx_unpack_raw(&u, &w0), 0);
    CHECK(map_int(w0, "steps") >= 0);
    sx_reply_free(&r);

    pk_op(&pk, 1, "types");
    CHECK_RC(sx_client_call(c, sx_pack_payload(&pk), 10000, &r), 0);
    sx_pack_fini(&pk);
    sx_payload ty;
    CHECK_RC(sx_map_get(r.body, "types", &ty), 0);
    sx_unpack_init(&u, ty);
    CHECK_RC(sx_unpack_array(&u, &n), 0);
    const sx_process_type *reg[32];
    size_t nreg = sx_engine_types(f.e, reg, 32);
    CHECK(nreg > FX_NTYPES && nreg <= 32);
    CHECK_EQ_INT(n, nreg);
    for (size_t i = 0; i < FX_NTYPES; i++) /* registered last */
        CHECK_STR(reg[nreg - FX_NTYPES + i]->name, fx_types[i].name);
    for (uint32_t i = 0; i < n; i++) {
        sx_payload e, ms;
        char name[32], m0[32];
        CHECK_RC(sx_unpack_raw(&u, &e), 0);
        map_str(e, "name", name, sizeof(name));
        CHECK_STR(name, reg[i]->name);
        CHECK_RC(sx_map_get(e, "methods", &ms), 0);
        sx_unpack mu;
        uint32_t nm;
        sx_unpack_init(&mu, ms);
        CHECK_RC(sx_unpack_array(&mu, &nm), 0);
        uint32_t want = 0; /* the type's methods list, NULL-ended */
        while (reg[i]->methods[want] != NULL)
            want++;
        CHECK_EQ_INT(nm, want);
        sx_payload s0;
        CHECK_RC(sx_unpack_raw(&mu, &s0), 0);
        CHECK_RC(sx_payload_get_str(s0, m0, sizeof(m0)), 0);
        CHECK_STR(m0, reg[i]->methods[0]);
    }
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: each request error has its code and a message, and the
 * connection stays usable after every one: bad_request (missing and
 * wrongly typed fields), unknown_op, unknown_type, unknown_method,
 * init_failed, not_found. */
static void test_request_errors(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pack pk;
    /* An optional field given as nil counts as absent (wait's timeout_ms,
     * ps's limit, cancel's reason): clients send null for "not given",
     * and it is not bad_request. A required one given as nil is still
     * missing. */
    sx_pid fin = submit_int(c, "counter", 1);
    pk_op(&pk, 3, "wait");
    pk_pid(&pk, "pid", fin);
    sx_pack_str(&pk, "timeout_ms");
    sx_pack_nil(&pk);
    call_expect(c, &pk, NULL);
    pk_op(&pk, 2, "ps");
    sx_pack_str(&pk, "limit");
    sx_pack_nil(&pk);
    call_expect(c, &pk, NULL);
    sx_pid idle = submit_ok(c, "echo", "serve", NULL, 0);
    pk_op(&pk, 3, "cancel");
    pk_pid(&pk, "pid", idle);
    sx_pack_str(&pk, "reason");
    sx_pack_nil(&pk);
    call_expect(c, &pk, NULL);
    pk_op(&pk, 2, "wait");
    sx_pack_str(&pk, "pid");
    sx_pack_nil(&pk);
    call_expect(c, &pk, "bad_request");
    /* bad_request: missing fields, wrong types */
    pk_op(&pk, 1, "submit");
    call_expect(c, &pk, "bad_request");
    pk_op(&pk, 4, "submit");
    sx_pack_str(&pk, "type");
    sx_pack_int(&pk, 5);
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, "run");
    sx_pack_str(&pk, "input");
    sx_pack_array(&pk, 0);
    call_expect(c, &pk, "bad_request");
    pk_op(&pk, 3, "submit");
    sx_pack_str(&pk, "type");
    sx_pack_str(&pk, "counter");
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, "run");
    call_expect(c, &pk, "bad_request"); /* no input */
    pk_op(&pk, 4, "submit");
    sx_pack_str(&pk, "type");
    sx_pack_str(&pk, "counter");
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, "run");
    sx_pack_str(&pk, "input");
    sx_pack_int(&pk, 3);
    call_expect(c, &pk, "bad_request"); /* input not an array */
    pk_op(&pk, 2, "wait");
    sx_pack_str(&pk, "pid");
    sx_pack_str(&pk, "not a pid");
    call_expect(c, &pk, "bad_request");
    pk_op(&pk, 3, "wait");
    pk_pid(&pk, "pid", (sx_pid){ 0, 1, 1 });
    sx_pack_str(&pk, "timeout_ms");
    sx_pack_str(&pk, "soon");
    call_expect(c, &pk, "bad_request");
    pk_op(&pk, 3, "send");
    pk_pid(&pk, "to", (sx_pid){ 0, 1, 1 });
    sx_pack_str(&pk, "topic");
    sx_pack_str(&pk, "t");
    call_expect(c, &pk, "bad_request"); /* no data */
    pk_op(&pk, 1, "cancel");
    call_expect(c, &pk, "bad_request");
    pk_op(&pk, 3, "cancel");
    pk_pid(&pk, "pid", (sx_pid){ 0, 1, 1 });
    sx_pack_str(&pk, "reason");
    sx_pack_int(&pk, 1);
    call_expect(c, &pk, "bad_request");
    pk_op(&pk, 2, "terminate");
    sx_pack_str(&pk, "pid");
    sx_pack_array(&pk, 0);
    call_expect(c, &pk, "bad_request");
    pk_op(&pk, 1, "subscribe");
    call_expect(c, &pk, "bad_request");
    /* op wrongly typed, and op missing */
    sx_pack_init(&pk);
    sx_pack_map(&pk, 1);
    sx_pack_str(&pk, "op");
    sx_pack_int(&pk, 3);
    call_expect(c, &pk, "bad_request");
    sx_pack_init(&pk);
    sx_pack_map(&pk, 1);
    sx_pack_str(&pk, "hi");
    sx_pack_int(&pk, 3);
    call_expect(c, &pk, "bad_request");
    /* unknown_op */
    pk_op(&pk, 1, "reboot");
    call_expect(c, &pk, "unknown_op");
    /* unknown_type, unknown_method, init_failed */
    sx_reply r;
    CHECK_RC(sx_client_submit(c, "nosuch", "run", NULL, 0, NULL, &r),
             sx_wire_error("unknown_type", 12));
    CHECK_STR(r.code, "unknown_type");
    sx_reply_free(&r);
    CHECK_RC(sx_client_submit(c, "counter", "jump", NULL, 0, NULL, &r),
             sx_wire_error("unknown_method", 14));
    CHECK_STR(r.code, "unknown_method");
    sx_reply_free(&r);
    CHECK(sx_client_submit(c, "badinit", "run", NULL, 0, NULL, &r) != 0);
    CHECK_STR(r.code, "init_failed");
    sx_reply_free(&r);
    CHECK(sx_client_submit(c, "counter", "run", NULL, 0, NULL, &r) != 0);
    CHECK_STR(r.code, "init_failed"); /* counter's init wants [n] */
    sx_reply_free(&r);
    /* not_found */
    sx_pid none = { 0, 1, 424242 };
    CHECK_RC(sx_client_wait(c, none, 100, NULL, &r), SX_ENOTFOUND);
    CHECK_STR(r.code, "not_found");
    sx_reply_free(&r);
    /* still usable */
    sx_pid pid = submit_int(c, "counter", 1);
    CHECK_RC(sx_client_wait(c, pid, -1, NULL, NULL), 0);
    sx_client_close(c);
    fx_down(&f);
}

static void *open_gate_later(void *arg)
{
    (void)arg;
    tx_sleep_ms(20);
    pthread_mutex_lock(&gate_mu);
    gate_open = 1;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
    return NULL;
}

/* Property: closed — a send to a process that is finishing (terminate
 * requested while its step runs) is refused with code closed; the process
 * then ends terminated. */
static void test_closed(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    gate_open = gate_entered = 0;
    sx_pid bp = submit_ok(c, "blocker", "run", NULL, 0);
    pthread_mutex_lock(&gate_mu);
    while (!gate_entered)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    CHECK_RC(sx_client_terminate(c, bp, NULL), 0);
    sx_reply r;
    CHECK_RC(sx_client_send(c, bp, "hi", nil, &r), SX_ECLOSED);
    CHECK_STR(r.code, "closed");
    sx_reply_free(&r);
    pthread_t t;
    pthread_create(&t, NULL, open_gate_later, NULL);
    CHECK(sx_client_wait(c, bp, -1, NULL, &r) != 0);
    CHECK_STR(r.code, "terminated");
    sx_reply_free(&r);
    pthread_join(t, NULL);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: limit — with max_processes 2 the third submit gets code
 * limit; stopping — after the engine stops, submit gets code stopping
 * (the server keeps answering). */
static void test_limit_stopping(void)
{
    fixture f;
    sx_server_config sc = { .listen = FX_LISTEN,
                            .server_name = FX_SERVER_NAME };
    fx_up_cfg(&f, 2, &sc);
    sx_client *c = connect_ok(f.unix_addr);
    submit_ok(c, "idle", "serve", NULL, 0);
    submit_ok(c, "idle", "serve", NULL, 0);
    sx_reply r;
    CHECK_RC(sx_client_submit(c, "idle", "serve", NULL, 0, NULL, &r),
             SX_ELIMIT);
    CHECK_STR(r.code, "limit");
    sx_reply_free(&r);
    CHECK_RC(sx_engine_stop(f.e, 0), 0);
    CHECK(sx_client_submit(c, "idle", "serve", NULL, 0, NULL, &r) != 0);
    CHECK_STR(r.code, "stopping");
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: replies may come out of order: a wait sent first is answered
 * after a ps sent behind it on the same connection (raw frames, which the
 * one-call-at-a-time client cannot show). */
static void test_out_of_order(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pid sp = submit_int(c, "sleeper", 200);
    int fd = raw_connect(f.path);
    sx_pack pk;
    req_begin(&pk, 3, "wait", 1);
    pk_pid(&pk, "pid", sp);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    req_begin(&pk, 2, "ps", 2);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    sx_payload b1, b2;
    CHECK_RC(raw_read(fd, 10000, &b1), 0);
    CHECK_RC(raw_read(fd, 10000, &b2), 0);
    CHECK_EQ_INT(map_int(b1, "id"), 2);
    CHECK_EQ_INT(map_int(b2, "id"), 1);
    CHECK_EQ_INT(map_int(b2, "result"), 200);
    free((void *)b1.data);
    free((void *)b2.data);
    close(fd);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: a wait whose process finished within timeout_ms gets the
 * outcome, not timeout, even when the loop only gets to it after the
 * deadline: here a type's init (slowinit, which runs on the loop) holds
 * the loop past the deadline while the answer is already in the hub, and
 * the timer runs first in the next loop iteration. */
static void test_wait_answer_beats_timer(void)
{
    fixture f;
    fx_up(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pid sp = submit_int(c, "sleeper", 150);
    int fd = raw_connect(f.path);
    sx_pack pk;
    req_begin(&pk, 4, "wait", 1);
    pk_pid(&pk, "pid", sp);
    sx_pack_str(&pk, "timeout_ms");
    sx_pack_uint(&pk, 300);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    req_begin(&pk, 2, "ps", 2); /* answered: the wait is registered */
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    sx_payload b;
    CHECK_RC(raw_read(fd, 10000, &b), 0);
    CHECK_EQ_INT(map_int(b, "id"), 2);
    free((void *)b.data);
    /* The loop is held 800 ms: the sleeper finishes at 150 ms, the
     * wait's deadline passes at 300 ms. */
    sx_pid si = submit_int(c, "slowinit", 800);
    CHECK_RC(raw_read(fd, 10000, &b), 0);
    CHECK_EQ_INT(map_int(b, "id"), 1);
    CHECK(map_bool(b, "ok"));
    CHECK_EQ_INT(map_int(b, "result"), 150);
    free((void *)b.data);
    CHECK_RC(sx_client_wait(c, si, 10000, NULL, NULL), 0);
    close(fd);
    sx_client_close(c);
    fx_down(&f);
}

/* A plain TCP connection to 127.0.0.1:port (no hello). */
static int raw_connect_tcp(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in sa = { 0 };
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(0x7f000001);
    CHECK_RC(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Property: a client that shuts down its sending side (a half-close)
 * after pipelining requests still gets every reply the server produced
 * for them, each frame whole, in order, then EOF: over both transports,
 * with more output than the socket buffers hold when the EOF is read (so
 * replies still wait to be written then). */
static void test_half_close(void)
{
    fixture f;
    fx_up_tcp(&f);
    enum { N = 20000 };
    for (int t = 0; t < 2; t++) {
        int fd =
            t == 0 ? raw_connect(f.path) : raw_connect_tcp(sx_server_port(f.s));
        /* {"op": "types", "id": id}, N frames in one buffer */
        uint8_t *all = malloc((size_t)N * 32);
        CHECK(all != NULL);
        size_t len = 0;
        for (uint64_t id = 1; id <= N; id++) {
            sx_pack pk;
            req_begin(&pk, 2, "types", id);
            CHECK_RC(pk.err, 0);
            be32(all + len, (uint32_t)pk.len);
            memcpy(all + len + 4, pk.data, pk.len);
            len += 4 + pk.len;
            sx_pack_fini(&pk);
        }
        CHECK_RC(raw_write(fd, all, len), 0);
        free(all);
        CHECK_RC(shutdown(fd, SHUT_WR), 0);
        tx_sleep_ms(300); /* the server reads the EOF before we read */
        for (int64_t id = 1; id <= N; id++) {
            sx_payload b;
            CHECK_RC(raw_read(fd, 10000, &b), 0);
            CHECK_EQ_INT(map_int(b, "id"), id);
            CHECK(map_bool(b, "ok"));
            free((void *)b.data);
        }
        sx_payload b;
        CHECK_RC(raw_read(fd, 10000, &b), 1);
        close(fd);
    }
    fx_wait_connections(&f, 0, 10000);
    fx_down(&f);
}

/* Sends {"op": op, "id": id, "pid": txt} on fd. */
static void raw_pid_request(int fd, const char *op, uint64_t id,
                            const char *txt)
{
    sx_pack pk;
    req_begin(&pk, 3, op, id);
    sx_pack_str(&pk, "pid");
    sx_pack_str(&pk, txt);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
}

/* Property: a client that shuts down its sending side with a wait and a
 * subscribe pending (a script: requests, then EOF, then read) still gets
 * both answers, then the end (PROTOCOL.md: each request gets exactly one
 * reply); one that closes outright while waiting is let go within ~2 s,
 * its wait abandoned. (At EOF the server abandoned every pending record:
 * the half-closed client read the subscribe's reply and then the end.) */
static void test_half_close_keeps_waits(void)
{
    fixture f;
    fx_up(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pid pid = submit_int(c, "sleeper", 300);
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(pid, txt, sizeof(txt));
    int fd = raw_connect(f.path);
    raw_pid_request(fd, "subscribe", 1, txt);
    raw_pid_request(fd, "wait", 2, txt);
    CHECK_RC(shutdown(fd, SHUT_WR), 0);
    bool subscribed = false, waited = false, pushed = false;
    for (int k = 0; k < 3; k++) {
        sx_payload b;
        CHECK_RC(raw_read(fd, 10000, &b), 0);
        if (b.data == NULL)
            break;
        if (sx_map_get(b, "push", NULL) == 0) {
            CHECK(map_bool(b, "ok"));
            CHECK_EQ_INT(map_int(b, "result"), 300);
            pushed = true;
        } else if (map_int(b, "id") == 1) {
            CHECK(map_bool(b, "ok"));
            subscribed = true;
        } else {
            CHECK_EQ_INT(map_int(b, "id"), 2);
            CHECK(map_bool(b, "ok"));
            CHECK_EQ_INT(map_int(b, "result"), 300);
            waited = true;
        }
        free((void *)b.data);
    }
    CHECK(subscribed && waited && pushed);
    sx_payload b;
    CHECK_RC(raw_read(fd, 10000, &b), 1); /* then the end */
    close(fd);
    fx_wait_connections(&f, 1, 10000); /* c's */

    /* Half-closed, then closed while its wait is pending: released. */
    sx_pid longp = submit_int(c, "sleeper", 60000);
    sx_pid_format(longp, txt, sizeof(txt));
    fd = raw_connect(f.path);
    raw_pid_request(fd, "wait", 3, txt);
    CHECK_RC(shutdown(fd, SHUT_WR), 0);
    tx_sleep_ms(200); /* the server sees the EOF, keeps the connection */
    sx_server_stats st;
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.connections, 2);
    close(fd);
    fx_wait_connections(&f, 1, 5000);
    CHECK_RC(sx_engine_terminate(f.e, longp), 0);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: a half-closed client whose wait has timeout_ms gets the
 * `timeout` reply (the record ends by its timer), then the end. */
static void test_half_close_timeout(void)
{
    fixture f;
    fx_up(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pid longp = submit_int(c, "sleeper", 60000);
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(longp, txt, sizeof(txt));
    int fd = raw_connect(f.path);
    sx_pack pk;
    req_begin(&pk, 4, "wait", 7);
    sx_pack_str(&pk, "pid");
    sx_pack_str(&pk, txt);
    sx_pack_str(&pk, "timeout_ms");
    sx_pack_int(&pk, 200);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    CHECK_RC(shutdown(fd, SHUT_WR), 0);
    sx_payload b;
    CHECK_RC(raw_read(fd, 5000, &b), 0);
    CHECK_EQ_INT(map_int(b, "id"), 7);
    char code[32];
    CHECK_STR(err_code(b, code, sizeof(code)), "timeout");
    free((void *)b.data);
    CHECK_RC(raw_read(fd, 5000, &b), 1);
    close(fd);
    fx_wait_connections(&f, 1, 5000);
    CHECK_RC(sx_engine_terminate(f.e, longp), 0);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: the server stops cleanly (no leak, no use after free: ASan)
 * while a connection is half-closed with a wait and a subscribe pending
 * (the hup timer running); the client reads to the end. */
static void test_half_close_stop(void)
{
    fixture f;
    fx_up(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pid longp = submit_int(c, "sleeper", 60000);
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(longp, txt, sizeof(txt));
    int fd = raw_connect(f.path);
    raw_pid_request(fd, "wait", 3, txt);
    raw_pid_request(fd, "subscribe", 4, txt);
    CHECK_RC(shutdown(fd, SHUT_WR), 0);
    tx_sleep_ms(300);
    sx_server_stats st;
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.connections, 2);
    sx_client_close(c);
    sx_server_stop(f.s);
    f.s = NULL;
    sx_payload b;
    int rc;
    while ((rc = raw_read(fd, 5000, &b)) == 0)
        free((void *)b.data); /* whatever the stop answered */
    CHECK_RC(rc, 1);
    close(fd);
    fx_down(&f);
}

/* Property: a half-closed connection with a subscribe pending whose
 * mailbox is flooded past max_output while the client does not read
 * loses messages (counted in push_drops), as an open one does, not its
 * connection; once the client is gone the hup timer closes it. */
static void test_half_close_slow(void)
{
    fixture f;
    fx_up_out(&f, 64 << 10);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pid ip = submit_ok(c, "idle", "serve", NULL, 0);
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(ip, txt, sizeof(txt));
    int fd = raw_connect(f.path);
    sx_pack pk;
    req_begin(&pk, 3, "hello", 1);
    sx_pack_str(&pk, "version");
    sx_pack_int(&pk, 1);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    sx_payload b;
    CHECK_RC(raw_read(fd, 5000, &b), 0);
    char mb[SX_PID_TEXT_MAX];
    map_str(b, "mailbox", mb, sizeof(mb));
    free((void *)b.data);
    raw_pid_request(fd, "subscribe", 2, txt);
    CHECK_RC(raw_read(fd, 5000, &b), 0);
    free((void *)b.data);
    CHECK_RC(shutdown(fd, SHUT_WR), 0);
    tx_sleep_ms(200);
    sx_pack a, b2, c2;
    sx_pack_init(&a);
    sx_pack_init(&b2);
    sx_pack_init(&c2);
    sx_pack_str(&a, mb);
    sx_pack_int(&b2, 2000);
    sx_pack_int(&c2, 1024);
    sx_payload in[3] = { sx_pack_payload(&a), sx_pack_payload(&b2),
                         sx_pack_payload(&c2) };
    submit_ok(c, "flood", "run", in, 3);
    sx_pack_fini(&a);
    sx_pack_fini(&b2);
    sx_pack_fini(&c2);
    /* Over its limit the connection loses messages (counted), not
     * itself; once the client is gone the hup timer closes it. */
    sx_server_stats st;
    double until = sx_test_now_ms() + 10000;
    do {
        sx_server_stats_get(f.s, &st);
        if (st.push_drops > 0)
            break;
        tx_sleep_ms(2);
    } while (sx_test_now_ms() < until);
    CHECK(st.push_drops >= 1);
    CHECK_EQ_U64(st.slow_drops, 0);
    fx_wait_connections(&f, 2, 1000);
    close(fd);
    fx_wait_connections(&f, 1, 10000);
    CHECK_RC(sx_engine_terminate(f.e, ip), 0);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: a half-closed client whose wait's answer is bigger than the
 * socket takes at once (written by uv_write, the close then comes from
 * write_cb) gets the whole answer, then the end. */
static void test_half_close_big(void)
{
    fixture f;
    fx_up(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pack a;
    sx_pack_init(&a);
    sx_pack_array(&a, 3);
    sx_pack_str(&a, "sh");
    sx_pack_str(&a, "-c");
    sx_pack_str(&a, "sleep 0.3; head -c 900000 /dev/zero");
    sx_payload in = sx_pack_payload(&a);
    sx_pid pid = submit_ok(c, "exec", "run", &in, 1);
    sx_pack_fini(&a);
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(pid, txt, sizeof(txt));
    int fd = raw_connect(f.path);
    raw_pid_request(fd, "wait", 5, txt);
    CHECK_RC(shutdown(fd, SHUT_WR), 0);
    tx_sleep_ms(1000); /* the answer is produced; the socket is full */
    sx_payload b;
    CHECK_RC(raw_read(fd, 5000, &b), 0);
    CHECK_EQ_INT(map_int(b, "id"), 5);
    CHECK(map_bool(b, "ok"));
    free((void *)b.data);
    CHECK_RC(raw_read(fd, 5000, &b), 1);
    close(fd);
    fx_wait_connections(&f, 1, 5000);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: a non-loopback listen address without a token is refused
 * (SX_EINVAL) and so are bad addresses; with a token configured, a
 * connection must say hello with it before anything else: a request
 * first, a missing or wrong token get an error reply and the connection
 * closed; the right token works. */
static void test_token(void)
{
    sx_engine_config ec = { .workers = 1 };
    sx_engine *e;
    CHECK_RC(sx_engine_new(&ec, &e), 0);
    CHECK_RC(sx_types_register_builtin(e), 0);
    sx_server *s;
    sx_server_config bad = { .listen = "127.0.0.1:0" };
    CHECK_RC(sx_server_start(e, &bad, &s), SX_ESTATE); /* not started */
    CHECK_RC(sx_engine_start(e), 0);
    sx_server_config nl = { .listen = "0.0.0.0:0" };
    CHECK_RC(sx_server_start(e, &nl, &s), SX_EINVAL);
    nl.token = "";
    CHECK_RC(sx_server_start(e, &nl, &s), SX_EINVAL);
    sx_server_config none = { 0 };
    CHECK_RC(sx_server_start(e, &none, &s), SX_EINVAL);
    const char *bad_addrs[] = { "127.0.0.1", "127.0.0.1:", ":80",
                                "127.0.0.1:99999", "127.0.0.1:x" };
    for (size_t i = 0; i < sizeof(bad_addrs) / sizeof(bad_addrs[0]); i++) {
        sx_server_config b = { .listen = bad_addrs[i] };
        CHECK_RC(sx_server_start(e, &b, &s), SX_EINVAL);
    }
    sx_server_config ok = { .listen = "0.0.0.0:0", .token = "s3cret" };
    CHECK_RC(sx_server_start(e, &ok, &s), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", sx_server_port(s));
    sx_client *c = NULL;
    CHECK_RC(sx_client_connect(addr, NULL, 10000, &c),
             sx_wire_error("bad_request", 11));
    CHECK_RC(sx_client_connect(addr, "wrong", 10000, &c),
             sx_wire_error("bad_request", 11));
    CHECK_RC(sx_client_connect(addr, "s3cret", 10000, &c), 0);
    sx_pid pid = submit_int(c, "counter", 2);
    CHECK_RC(sx_client_wait(c, pid, -1, NULL, NULL), 0);
    sx_client_close(c);
    /* Raw: a request before hello gets an error and the connection
     * closes. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { 0 };
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)sx_server_port(s));
    sa.sin_addr.s_addr = htonl(0x7f000001);
    CHECK_RC(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    sx_pack pk;
    req_begin(&pk, 2, "ps", 9);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    sx_payload b;
    CHECK_RC(raw_read(fd, 10000, &b), 0);
    CHECK(!map_bool(b, "ok"));
    char code[32];
    CHECK_STR(err_code(b, code, sizeof(code)), "bad_request");
    free((void *)b.data);
    CHECK_RC(raw_read(fd, 10000, &b), 1); /* closed */
    close(fd);
    sx_server_stop(s);
    sx_engine_free(e);
}

/* Property: the listen address and the client's TCP address are read by
 * the HOST:PORT rules every part of stepx shares (process/hostport.h).
 * Forms that a split at the last ':' with strtoul would take are
 * SX_EINVAL at both ends: a bare IPv6 address (is "::1:7000" a port?), a
 * port with a space, a sign or junk, a name in brackets; the client also
 * refuses port 0, which only a listener takes. "localhost:0" listens on
 * loopback with no token, and the client reaches the server as 127.0.0.1,
 * as localhost and with leading zeros in the port. */
static void test_addresses(void)
{
    sx_engine_config ec = { .workers = 1 };
    sx_engine *e;
    CHECK_RC(sx_engine_new(&ec, &e), 0);
    CHECK_RC(sx_types_register_builtin(e), 0);
    CHECK_RC(sx_engine_start(e), 0);
    sx_server *s;
    const char *bad_listen[] = {
        "::1:0",        "[::1:0",       "[localhost]:0", "[127.0.0.1]:0",
        "127.0.0.1: 0", "127.0.0.1:+0", "127.0.0.1:0 ",  " 127.0.0.1:0",
        "[]:0",         "127.0.0.1:-1", "127.0.0.1:0:0", "localhost:65536"
    };
    for (size_t i = 0; i < sizeof bad_listen / sizeof bad_listen[0]; i++) {
        sx_server_config b = { .listen = bad_listen[i] };
        int rc = sx_server_start(e, &b, &s);
        if (rc != SX_EINVAL)
            SX_FAILF("listen '%s': %d %s", bad_listen[i], rc, sx_errname(rc));
    }
    sx_server_config ok = { .listen = "localhost:0" };
    CHECK_RC(sx_server_start(e, &ok, &s), 0);
    int port = sx_server_port(s);
    CHECK(port > 0);
    char addr[64];
    const char *good[] = { "127.0.0.1:%d", "localhost:%d", "127.0.0.1:000%d" };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(addr, sizeof addr, good[i], port);
        sx_client *c = NULL;
        int rc = sx_client_connect(addr, NULL, 10000, &c);
        if (rc != 0)
            SX_FAILF("connect '%s': %d %s", addr, rc, sx_errname(rc));
        sx_client_close(c);
    }
    const char *bad_connect[] = { "127.0.0.1:0",     "::1:%d",
                                  "[127.0.0.1]:%d",  "127.0.0.1: %d",
                                  "127.0.0.1:+%d",   "127.0.0.1:%d ",
                                  "[::1]%d",         ":%d",
                                  "127.0.0.1:%d:%d", "127.0.0.1:%d0000" };
    for (size_t i = 0; i < sizeof bad_connect / sizeof bad_connect[0]; i++) {
        snprintf(addr, sizeof addr, bad_connect[i], port, port);
        sx_client *c = NULL;
        int rc = sx_client_connect(addr, NULL, 10000, &c);
        if (rc != SX_EINVAL)
            SX_FAILF("connect '%s': %d %s", addr, rc, sx_errname(rc));
    }
    sx_server_stop(s);
    sx_engine_free(e);
}

/* Property: the socket file is mode 0600; a second server on the same
 * path while the first lives is refused with -EADDRINUSE (and the first
 * keeps its file); a stale file nobody answers on is replaced; a path
 * that is not a socket is left alone. */
static void test_socket_file(void)
{
    fixture f;
    fx_up_tcp(&f);
    struct stat st;
    CHECK_RC(stat(f.path, &st), 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK_EQ_INT(st.st_mode & 0777, 0600);
    sx_server *s2;
    sx_server_config sc = { .socket_path = f.path };
    CHECK_RC(sx_server_start(f.e, &sc, &s2), -EADDRINUSE);
    CHECK_RC(stat(f.path, &st), 0);
    sx_client *c = connect_ok(f.unix_addr);
    sx_client_close(c);
    sx_server_stop(f.s);
    /* A stale socket file: bound, never listened, closed. */
    close(unix_bound(f.path, false));
    CHECK_RC(sx_server_start(f.e, &sc, &f.s), 0);
    c = connect_ok(f.unix_addr);
    sx_client_close(c);
    sx_server_stop(f.s);
    /* Not a socket: refused, and the file is not touched. */
    FILE *fp = fopen(f.path, "w");
    CHECK(fp != NULL);
    fclose(fp);
    CHECK(sx_server_start(f.e, &sc, &s2) < 0);
    CHECK_RC(stat(f.path, &st), 0);
    CHECK(S_ISREG(st.st_mode));
    unlink(f.path);
    CHECK_RC(sx_client_connect(f.unix_addr, NULL, 1000, &c), -ENOENT);
    sx_engine_free(f.e);
    rmdir(f.dir);
}

/* Property: a server between bind and listen owns its path. Binding and
 * listening are two steps; a second server (a second stepxd on the same
 * --socket) starting in between sees a socket file that refuses
 * connections; taking it for a dead server's, unlinking it and binding its
 * own would leave both daemons running, the first unreachable, and its stop
 * would then remove the second's file (two stepxd started together: both
 * alive 2 times in 150). The owner holds "PATH.lock" (flock) for the
 * server's life, so a peer that holds it and has bound but not yet listened
 * keeps its file: start answers -EADDRINUSE. With the lock free, the same
 * file is stale and replaced; a stopped server leaves neither file behind. */
static void test_socket_owner(void)
{
    fixture f;
    fx_up(&f);
    sx_server_stop(f.s);
    f.s = NULL;
    char lock[160];
    snprintf(lock, sizeof(lock), "%s.lock", f.path);
    int lk = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    CHECK(lk >= 0);
    CHECK_RC(flock(lk, LOCK_EX | LOCK_NB), 0);
    int fd = unix_bound(f.path, false);
    struct stat before, after;
    CHECK_RC(stat(f.path, &before), 0);
    sx_server *s2;
    sx_server_config sc = { .socket_path = f.path };
    CHECK_RC(sx_server_start(f.e, &sc, &s2), -EADDRINUSE);
    CHECK_RC(stat(f.path, &after), 0);
    CHECK_EQ_U64(after.st_ino, before.st_ino);
    /* The peer dies before listening: its lock goes, its file is stale. */
    close(fd);
    close(lk);
    CHECK_RC(sx_server_start(f.e, &sc, &f.s), 0);
    sx_client *c = connect_ok(f.unix_addr);
    sx_client_close(c);
    sx_server_stop(f.s);
    f.s = NULL;
    CHECK(stat(lock, &after) != 0);
    fx_down(&f);
    CHECK(stat(f.dir, &after) != 0);
}

/* A thread that looks for the socket file without pause while a server
 * starts, and connects the moment it sees it: during is 1 when it found
 * the file after a look that did not, before start had returned (the
 * case the property is about); connected is 1 when that connect was
 * accepted, 0 when refused (errno in err). */
typedef struct {
    const char *path;
    /* Set once start has returned. release (the store) / acquire (the
     * load before each look): a look after the load has seen it set also
     * sees what start did before (its file, when it succeeded). */
    atomic_bool quit;
    /* Set after the first look that did not find the file: start is
     * called once the watcher is looking. relaxed: a flag alone. */
    atomic_bool looking;
    int during, connected, err;
} file_watch;

static void *file_watch_main(void *arg)
{
    file_watch *w = arg;
    struct stat st;
    bool looked = false;
    for (;;) {
        bool quit = atomic_load_explicit(&w->quit, memory_order_acquire);
        if (lstat(w->path, &st) == 0) {
            w->during = looked && !quit;
            break;
        }
        if (quit)
            return NULL;
        if (!looked)
            atomic_store_explicit(&w->looking, true, memory_order_relaxed);
        looked = true;
    }
    w->err = unix_try_connect(w->path);
    w->connected = w->err == 0;
    return NULL;
}

/* Property: the socket file appears only once the server listens on it,
 * so a client may take the file's presence for a server ready to connect
 * to (stepxd's callers and tests wait for the file). The server binds at
 * "PATH.new", listens, then links the socket at PATH; bound at PATH itself
 * the file would refuse connections between bind and listen, and a
 * watcher that connects the moment it sees the file, without pause on the
 * other core, is refused in some of 1,000 starts. Start is called once
 * the watcher is looking, and some watchers must have seen the file come
 * while start ran, or the run proves nothing. A socket
 * nobody answers on at PATH.new is cleared; a live one, or a PATH.new
 * that is not a socket, is left alone (the server binds at PATH). No
 * start leaves PATH.new behind, and stop removes PATH. (A file made at
 * PATH while the socket is at PATH.new: tests/relay/test_fault.c.) */
static void test_socket_ready(void)
{
    fixture f;
    fx_up(&f);
    sx_server_stop(f.s);
    f.s = NULL;
    char aside[160];
    snprintf(aside, sizeof(aside), "%s.new", f.path);
    sx_server_config sc = { .socket_path = f.path };
    struct stat st;
    int refused = 0, during = 0;
    for (int round = 0; round < 1000; round++) {
        file_watch w = { .path = f.path, .connected = -1 };
        atomic_init(&w.quit, false);
        atomic_init(&w.looking, false);
        pthread_t t;
        CHECK_RC(pthread_create(&t, NULL, file_watch_main, &w), 0);
        /* relaxed: see file_watch. */
        while (!atomic_load_explicit(&w.looking, memory_order_relaxed))
            sched_yield();
        CHECK_RC(sx_server_start(f.e, &sc, &f.s), 0);
        /* release: see file_watch. */
        atomic_store_explicit(&w.quit, true, memory_order_release);
        pthread_join(t, NULL);
        during += w.during;
        CHECK_EQ_INT(w.connected >= 0, 1);
        if (w.connected == 0) {
            refused++;
            fprintf(stderr, "round %d: the file was there, connect: %s\n",
                    round, strerror(w.err));
        }
        CHECK(lstat(aside, &st) != 0);
        sx_server_stop(f.s);
        f.s = NULL;
        CHECK(lstat(f.path, &st) != 0);
    }
    fprintf(stderr, "the file came while start ran: %d of 1000 starts\n",
            during);
    CHECK_EQ_INT(refused, 0);
    CHECK(during > 0);
    /* A socket nobody answers on at PATH.new. */
    close(unix_bound(aside, false));
    CHECK_RC(sx_server_start(f.e, &sc, &f.s), 0);
    CHECK(lstat(aside, &st) != 0);
    sx_client *c = connect_ok(f.unix_addr);
    sx_client_close(c);
    sx_server_stop(f.s);
    f.s = NULL;
    /* A live one (another program's): kept, and still its after stop. */
    int fd = unix_bound(aside, true);
    CHECK_RC(sx_server_start(f.e, &sc, &f.s), 0);
    c = connect_ok(f.unix_addr);
    sx_client_close(c);
    sx_server_stop(f.s);
    f.s = NULL;
    CHECK_RC(lstat(aside, &st), 0);
    CHECK_RC(unix_try_connect(aside), 0);
    close(fd);
    unlink(aside);
    /* Not a socket at PATH.new: untouched; the server binds at PATH. */
    FILE *fp = fopen(aside, "w");
    CHECK(fp != NULL);
    fclose(fp);
    CHECK_RC(sx_server_start(f.e, &sc, &f.s), 0);
    CHECK_RC(lstat(aside, &st), 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK_RC(lstat(f.path, &st), 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK_EQ_INT(st.st_mode & 0777, 0600);
    c = connect_ok(f.unix_addr);
    sx_client_close(c);
    sx_server_stop(f.s);
    f.s = NULL;
    unlink(aside);
    fx_down(&f);
}

/* Property: stopping the server with waits and subscriptions pending on
 * an IDLE process closes the connections (the client sees closed), and
 * the engine's later watch callbacks find nothing to free twice (LSan
 * and ASan check the rest when the engine is freed). */
static void test_stop_with_pending(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_pid ip = submit_ok(c, "idle", "serve", NULL, 0);
    CHECK_RC(sx_client_subscribe(c, ip, NULL), 0);
    int fd = raw_connect(f.path);
    sx_pack pk;
    req_begin(&pk, 4, "wait", 1);
    pk_pid(&pk, "pid", ip);
    sx_pack_str(&pk, "timeout_ms");
    sx_pack_uint(&pk, 100000);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    /* The wait is registered once a later request is answered. */
    CHECK_RC(sx_client_wait(c, submit_int(c, "counter", 1), -1, NULL, NULL), 0);
    sx_server_stop(f.s);
    sx_payload b;
    CHECK_RC(raw_read(fd, 10000, &b), 1);
    close(fd);
    sx_reply r;
    CHECK_RC(sx_client_next_push(c, 10000, &r), SX_ECLOSED);
    sx_client_close(c);
    /* The engine finishes ip now: the watches fire into a closed hub. */
    CHECK_RC(sx_engine_stop(f.e, 1000), 0);
    sx_engine_free(f.e);
    rmdir(f.dir);
}

/* Property: the server's figures count connections open and accepted and
 * requests answered. */
static void test_server_stats(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_server_stats st;
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.connections, 0);
    sx_client *a = connect_ok(f.unix_addr);
    sx_client *b = connect_ok(f.tcp_addr);
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.connections, 2);
    CHECK_EQ_U64(st.accepted, 2);
    CHECK(st.requests >= 2); /* two hellos */
    sx_client_close(a);
    sx_client_close(b);
    fx_wait_connections(&f, 0, 10000);
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.accepted, 2);
    fx_down(&f);
}

/* The server's watch records once they reach want (10 s at most; the
 * loop lets a record go after the answer that ends it is written). */
static uint64_t watches_after(fixture *f, uint64_t want)
{
    sx_server_stats st;
    double end = sx_test_now_ms() + 10000;
    do {
        sx_server_stats_get(f->s, &st);
    } while (st.watches != want && sx_test_now_ms() < end);
    return st.watches;
}

/* Property: a poll (wait with timeout_ms 0) of a live process answers
 * timeout at once and leaves nothing behind: after 2,000 polls of an idle
 * process the server holds no watch (a poll that kept a record and an
 * engine watch until the process finished would let a client polling an
 * idle process grow the daemon without bound). A wait with a positive
 * timeout_ms that runs out leaves the PID's one watch until the process
 * finishes (the engine cannot cancel it; RELAY.md), and relay_watches
 * counts it. A poll of a finished process gets its outcome, of an
 * unknown PID not_found. Control: without the poll path in op_wait, watches is
 * 2,000 after the polls. */
static void test_poll_leaves_no_watch(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_reply r;
    sx_server_stats st;
    sx_pid ip = submit_ok(c, "idle", "serve", NULL, 0);
    for (int i = 0; i < 2000; i++) {
        CHECK_RC(sx_client_wait(c, ip, 0, NULL, &r), SX_ETIMEDOUT);
        CHECK_STR(r.code, "timeout");
        sx_reply_free(&r);
    }
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.watches, 0);
    CHECK_RC(sx_client_wait(c, ip, 1, NULL, &r), SX_ETIMEDOUT);
    sx_reply_free(&r);
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.watches, 1);
    /* The process finishes: its record goes with it. */
    CHECK_RC(sx_client_terminate(c, ip, NULL), 0);
    CHECK_EQ_U64(watches_after(&f, 0), 0);
    /* A finished process: a poll gets its outcome. */
    sx_pid cp = submit_int(c, "counter", 3);
    CHECK_RC(sx_client_wait(c, cp, -1, NULL, &r), 0);
    sx_reply_free(&r);
    CHECK_RC(sx_client_wait(c, cp, 0, NULL, &r), 0);
    CHECK(r.ok);
    sx_reply_free(&r);
    /* An unknown PID: not_found. */
    sx_pid bogus = cp;
    bogus.id = ((uint64_t)1 << 32) | 9999999u;
    CHECK(sx_client_wait(c, bogus, 0, NULL, &r) != 0);
    CHECK_STR(r.code, "not_found");
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: waits with a positive timeout_ms on a process that goes on
 * leave nothing of their own once answered: 300 sequential waits of 1 ms
 * (alternating two connections) on an idle process keep relay_watches at
 * 1 (the one engine watch on its PID, which the engine cannot cancel) and
 * relay_waits at 0; two waits posted together time out as two, each
 * under its own id; a wait with no limit and a 60 s one are both answered
 * under their own ids when the process is terminated (waits 2, watches
 * 1 before). Once it has finished neither is left, and a watch left at
 * stop is let go of. Control: with a record per wait kept until its
 * process finishes, watches is 300 after the loop. */
static void test_timed_out_waits_reused(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    sx_client *d = connect_ok(f.tcp_addr);
    sx_reply r;
    sx_server_stats st;
    sx_pid ip = submit_ok(c, "idle", "serve", NULL, 0);
    for (int i = 0; i < 300; i++) {
        CHECK_RC(sx_client_wait(i % 2 ? d : c, ip, 1, NULL, &r), SX_ETIMEDOUT);
        CHECK_STR(r.code, "timeout");
        sx_reply_free(&r);
    }
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.watches, 1);
    CHECK_EQ_U64(st.waits, 0);
    /* Two at once: both time out, each under its own id. */
    uint64_t a, b, got;
    CHECK_RC(sx_client_post_wait(c, ip, 20, &a), 0);
    CHECK_RC(sx_client_post_wait(c, ip, 20, &b), 0);
    for (int k = 0; k < 2; k++) {
        CHECK_RC(sx_client_next_reply(c, 10000, &got, &r), 0);
        CHECK(got == a || got == b);
        CHECK_STR(r.code, "timeout");
        sx_reply_free(&r);
    }
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.watches, 1);
    CHECK_EQ_U64(st.waits, 0);
    /* Two more on the same watch: answered under their ids when it ends. */
    CHECK_RC(sx_client_post_wait(c, ip, -1, &a), 0);
    CHECK_RC(sx_client_post_wait(c, ip, 60000, &b), 0);
    /* A stats request after them: its reply means the server has read
     * both waits (one connection's requests are handled in order). */
    sx_pack pk;
    pk_op(&pk, 1, "stats");
    uint64_t sid;
    CHECK_RC(sx_client_post(c, sx_pack_payload(&pk), &sid), 0);
    sx_pack_fini(&pk);
    CHECK_RC(sx_client_next_reply(c, 10000, &got, &r), 0);
    CHECK_EQ_U64(got, sid);
    sx_reply_free(&r);
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.watches, 1); /* one watch, two waits on it */
    CHECK_EQ_U64(st.waits, 2);
    CHECK_RC(sx_client_terminate(d, ip, NULL), 0);
    bool seen_a = false, seen_b = false;
    for (int k = 0; k < 2; k++) {
        CHECK_RC(sx_client_next_reply(c, 10000, &got, &r), 0);
        CHECK(!r.ok);
        CHECK_STR(r.code, "terminated");
        seen_a |= got == a;
        seen_b |= got == b;
        sx_reply_free(&r);
    }
    CHECK(seen_a && seen_b);
    CHECK_EQ_U64(watches_after(&f, 0), 0);
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.waits, 0);
    /* A watch with no wait left whose process then finishes goes too. */
    sx_pid jp = submit_ok(c, "idle", "serve", NULL, 0);
    CHECK_RC(sx_client_wait(c, jp, 1, NULL, &r), SX_ETIMEDOUT);
    sx_reply_free(&r);
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.watches, 1);
    CHECK_RC(sx_client_terminate(c, jp, NULL), 0);
    CHECK_EQ_U64(watches_after(&f, 0), 0);
    /* One left at stop: the server lets go of it, the engine's stop
     * fires its watch into the closed hub, and nothing leaks
     * (LeakSanitizer) or stays open (a timer). */
    sx_pid kp = submit_ok(c, "idle", "serve", NULL, 0);
    CHECK_RC(sx_client_wait(d, kp, 1, NULL, &r), SX_ETIMEDOUT);
    sx_reply_free(&r);
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.watches, 1);
    sx_client_close(c);
    sx_client_close(d);
    fx_down(&f);
}

/* Property: a result or a pushed message the client could not read
 * (nested deeper than SX_WIRE_MAX_DEPTH allows inside a frame) is never
 * sent: wait answers code too_large and the connection stays usable; the
 * message is dropped, counted (push_drops) and told of with a `dropped`
 * push, and the connection stays usable too (a sender must not be able to
 * cut another client off). Within the limit both arrive intact. */
static void test_unsendable(void)
{
    fixture f;
    fx_up_tcp(&f);
    sx_client *c = connect_ok(f.unix_addr);
    char mb[SX_PID_TEXT_MAX];
    sx_pid_format(sx_client_mailbox(c), mb, sizeof(mb));
    sx_pack a, b;
    sx_pack_init(&a);
    sx_pack_init(&b);
    sx_pack_str(&b, mb);
    /* within: depth 30 under a frame's map (2 levels) */
    sx_pack_int(&a, SX_WIRE_MAX_DEPTH - 2);
    sx_payload in[2] = { sx_pack_payload(&a), sx_pack_payload(&b) };
    sx_pid pid = submit_ok(c, "deep", "run", in, 2);
    sx_reply r;
    CHECK_RC(sx_client_wait(c, pid, -1, NULL, &r), 0);
    sx_reply_free(&r);
    CHECK_RC(sx_client_next_push(c, 10000, &r), 0);
    sx_reply_free(&r);
    /* beyond, as a result */
    sx_pack_reset(&a);
    sx_pack_int(&a, SX_WIRE_MAX_DEPTH + 8);
    in[0] = sx_pack_payload(&a);
    pid = submit_ok(c, "deep", "run", in, 1);
    CHECK(sx_client_wait(c, pid, -1, NULL, &r) != 0);
    CHECK_STR(r.code, "too_large");
    sx_reply_free(&r);
    sx_pid ok = submit_int(c, "counter", 1);
    CHECK_RC(sx_client_wait(c, ok, -1, NULL, NULL), 0);
    /* beyond, as a message: dropped and told of */
    pid = submit_ok(c, "deep", "run", in, 2);
    CHECK_RC(sx_client_next_push(c, 10000, &r), 0);
    char kind[16];
    CHECK_STR(map_str(r.body, "push", kind, sizeof(kind)), "dropped");
    CHECK_EQ_INT(map_int(r.body, "count"), 1);
    sx_reply_free(&r);
    ok = submit_int(c, "counter", 1);
    CHECK_RC(sx_client_wait(c, ok, -1, NULL, NULL), 0);
    sx_pack_fini(&a);
    sx_pack_fini(&b);
    sx_client_close(c);
    sx_server_stats st;
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.slow_drops, 0);
    CHECK_EQ_U64(st.push_drops, 1);
    fx_down(&f);
}

/* Property: a ps reply never passes max_frame (a client refuses a longer
 * frame and loses its connection): 2,000 live processes at about 70
 * bytes each do not fit in 64 KiB, so the listing is cut to those that
 * fit; a listing that fits (limit 10) is whole. */
static void test_ps_fits_frame(void)
{
    const size_t max_frame = 64 << 10;
    fixture f;
    sx_server_config sc = { .max_frame = max_frame };
    fx_up_cfg(&f, 0, &sc);
    for (int i = 0; i < 2000; i++) {
        sx_pid p;
        CHECK_RC(sx_engine_submit(f.e, "idle", "serve", NULL, 0, &p), 0);
    }
    int fd = raw_connect(f.path);
    for (uint64_t limit = 10; limit <= 100000; limit *= 10000) {
        sx_pack pk;
        req_begin(&pk, 3, "ps", limit);
        sx_pack_str(&pk, "limit");
        sx_pack_uint(&pk, limit);
        CHECK_RC(raw_frame(fd, &pk), 0);
        sx_pack_fini(&pk);
        sx_payload b, v;
        CHECK_RC(raw_read(fd, 10000, &b), 0);
        if (b.len > max_frame)
            SX_FAILF("ps reply of %zu bytes, over max_frame %zu", b.len,
                     max_frame);
        CHECK(map_bool(b, "ok"));
        CHECK_RC(sx_map_get(b, "processes", &v), 0);
        sx_unpack u;
        uint32_t n;
        sx_unpack_init(&u, v);
        CHECK_RC(sx_unpack_array(&u, &n), 0);
        if (limit == 10)
            CHECK_EQ_U64(n, 10);
        else
            CHECK(n > 500 && n < 2000);
        free((void *)b.data);
    }
    close(fd);
    fx_down(&f);
}

/* Property: past max_connections a new connection gets an error frame
 * with code limit and is closed (the client's connect returns
 * SX_ELIMIT); once one closes, a new one is served again. */
static void test_max_connections(void)
{
    fixture f;
    sx_server_config sc = { .listen = FX_LISTEN,
                            .server_name = FX_SERVER_NAME,
                            .max_connections = 2 };
    fx_up_cfg(&f, 0, &sc);
    sx_client *a = connect_ok(f.unix_addr);
    sx_client *b = connect_ok(f.tcp_addr);
    sx_client *c = NULL;
    CHECK_RC(sx_client_connect(f.unix_addr, NULL, 10000, &c), SX_ELIMIT);
    sx_client_close(a);
    double until = sx_test_now_ms() + 10000;
    int rc;
    while ((rc = sx_client_connect(f.unix_addr, NULL, 10000, &c)) ==
               SX_ELIMIT &&
           sx_test_now_ms() < until)
        tx_sleep_ms(1);
    CHECK_RC(rc, 0);
    sx_client_close(b);
    sx_client_close(c);
    fx_down(&f);
}

/* The stats op's map (in *r, to free). */
static sx_payload stats_of(sx_client *c, sx_reply *r)
{
    sx_pack pk;
    pk_op(&pk, 1, "stats");
    CHECK_RC(sx_client_call(c, sx_pack_payload(&pk), 10000, r), 0);
    sx_pack_fini(&pk);
    CHECK(r->ok);
    sx_payload st;
    CHECK_RC(sx_map_get(r->body, "stats", &st), 0);
    return st;
}

/* fanout n x exec head -c 1000000 /dev/zero, as submit's input. */
static sx_pid submit_heads(sx_client *c, int64_t n)
{
    uint8_t b[4][96];
    sx_pack pk[4];
    sx_payload in[4];
    for (int i = 0; i < 4; i++)
        sx_pack_init_fixed(&pk[i], b[i], sizeof b[i]);
    sx_pack_int(&pk[0], n);
    sx_pack_str(&pk[1], "exec");
    sx_pack_str(&pk[2], "run");
    sx_pack_array(&pk[3], 1);
    sx_pack_array(&pk[3], 4);
    sx_pack_str(&pk[3], "head");
    sx_pack_str(&pk[3], "-c");
    sx_pack_str(&pk[3], "1000000");
    sx_pack_str(&pk[3], "/dev/zero");
    for (int i = 0; i < 4; i++) {
        CHECK_RC(pk[i].err, 0);
        in[i] = sx_pack_payload(&pk[i]);
    }
    return submit_ok(c, "fanout", "run", in, 4);
}

/* Property: one small request does not pin hundreds of MB. A fanout of
 * 100 execs of head -c 1000000 /dev/zero (30 under sanitizers), submitted
 * and waited over the relay, answers too_large, not internal: the
 * children's results (1 MB each) add up past max_result (4 MiB, the
 * default); its children still run to their ends, and once they have,
 * the outcomes held (the stats op's outcome_bytes and outcomes) stay
 * within keep_outcome_bytes (8 MiB here) and its small slack (64 KiB per
 * shard), the oldest 1 MB results pushed out; a fanout of 3 (3 MB) is
 * within the limits and answers its result. Without the byte budget all
 * the children's results stayed: ~100 MB. */
static void test_fanout_pins_no_memory(void)
{
    fixture f;
    sx_engine_config ec = { .workers = 2,
                            .keep_outcome_bytes = (size_t)8 << 20 };
    fx_up_engine(&f, &ec, NULL);
    sx_client *c = connect_ok(f.unix_addr);
#ifdef SX_TEST_SANITIZED
    const int64_t n = 30;
#else
    const int64_t n = 100;
#endif
    sx_pid pid = submit_heads(c, n);
    sx_reply r;
    int wrc = sx_client_wait(c, pid, 120000, NULL, &r);
    if (wrc != SX_ETOOLARGE)
        SX_FAILF("wait: %s %s: %s", sx_errname(wrc), r.code, r.message);
    CHECK_STR(r.code, "too_large");
    CHECK(strstr(r.message, "is over the limit of 4194304 (max_result)") !=
          NULL);
    sx_reply_free(&r);
    double end = sx_test_now_ms() + 120000;
    for (;;) { /* the children, left running, finish */
        sx_payload st = stats_of(c, &r);
        int64_t live = map_int(st, "live");
        sx_reply_free(&r);
        if (live == 0)
            break;
        CHECK(sx_test_now_ms() < end);
        tx_sleep_ms(20);
    }
    sx_payload st = stats_of(c, &r);
    int64_t held = map_int(st, "outcome_bytes");
    int64_t kept = map_int(st, "outcomes");
    CHECK(held <= (8 << 20) + 3 * (64 << 10));
    CHECK(held >= 4 << 20); /* the newest children's results */
    CHECK(kept >= 4 && kept <= n + 2);
    sx_reply_free(&r);
    pid = submit_heads(c, 3);
    CHECK_RC(sx_client_wait(c, pid, 60000, NULL, &r), 0);
    CHECK(r.ok);
    sx_payload res;
    CHECK_RC(sx_map_get(r.body, "result", &res), 0);
    sx_unpack u;
    uint32_t k;
    sx_unpack_init(&u, res);
    CHECK_RC(sx_unpack_array(&u, &k), 0);
    CHECK_EQ_INT(k, 3);
    CHECK(res.len > 3000000);
    sx_reply_free(&r);
    sx_client_close(c);
    fx_down(&f);
}

static const sx_test_case cases[] = {
    { "hello", test_hello },
    { "half_close_keeps_waits", test_half_close_keeps_waits },
    { "half_close_timeout", test_half_close_timeout },
    { "half_close_stop", test_half_close_stop },
    { "half_close_slow", test_half_close_slow },
    { "half_close_big", test_half_close_big },
    { "submit_wait", test_submit_wait },
    { "wait_after_finish", test_wait_after_finish },
    { "wait_errors", test_wait_errors },
    { "cancel_terminate", test_cancel_terminate },
    { "send_echo", test_send_echo },
    { "push_order", test_push_order },
    { "subscribe", test_subscribe },
    { "ps_stats_types", test_ps_stats_types },
    { "request_errors", test_request_errors },
    { "closed", test_closed },
    { "limit_stopping", test_limit_stopping },
    { "out_of_order", test_out_of_order },
    { "half_close", test_half_close },
    { "wait_answer_beats_timer", test_wait_answer_beats_timer },
    { "token", test_token },
    { "addresses", test_addresses },
    { "socket_file", test_socket_file },
    { "socket_owner", test_socket_owner },
    { "socket_ready", test_socket_ready },
    { "stop_with_pending", test_stop_with_pending },
    { "server_stats", test_server_stats },
    { "unsendable", test_unsendable },
    { "max_connections", test_max_connections },
    { "ps_fits_frame", test_ps_fits_frame },
    { "poll_leaves_no_watch", test_poll_leaves_no_watch },
    { "timed_out_waits_reused", test_timed_out_waits_reused },
    { "fanout_pins_no_memory", test_fanout_pins_no_memory },
};

SX_TEST_MAIN(cases)

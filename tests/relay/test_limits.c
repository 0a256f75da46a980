/* tests/relay/test_limits.c — what one client can make the relay server
 * hold or do, and that other clients keep their service meanwhile: many
 * waits that time out on one PID, subscribes left behind by a client that
 * hangs up, the server-wide cap on waits, and the token gate (the frame
 * limit before hello, the deadline to authenticate, the cap on
 * connections that have not, a hello with a bad version). A server on a
 * temporary Unix socket (and TCP for the token cases) over an engine with
 * the shipped and the test types (relay_fixture.h). Each case opens with
 * the property it checks and the control that shows it can fail.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stepx/relay.h>

#include "tests/support/support.h"

#include "tests/relay/relay_fixture.h"

/* Sanitizer builds run everything several times slower; the sizes below
 * shrink there so the suite keeps its time, the properties unchanged. */
#ifdef SX_TEST_SANITIZED
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static sx_client *connect_ok(const char *addr, const char *token)
{
    sx_client *c = NULL;
    CHECK_RC(sx_client_connect(addr, token, 10000, &c), 0);
    return c;
}

static sx_pid submit_ok(sx_client *c, const char *type, const char *method,
                        const sx_payload *in, size_t n)
{
    sx_pid pid;
    CHECK_RC(sx_client_submit(c, type, method, in, n, &pid, NULL), 0);
    return pid;
}

static sx_server_stats stats_of(const fixture *f)
{
    sx_server_stats st;
    sx_server_stats_get(f->s, &st);
    return st;
}

/* Waits up to 10 s for the server's waits figure to be want. */
static uint64_t waits_after(const fixture *f, uint64_t want)
{
    sx_server_stats st;
    double end = sx_test_now_ms() + 10000;
    do {
        st = stats_of(f);
        if (st.waits == want)
            break;
        tx_sleep_ms(1);
    } while (sx_test_now_ms() < end);
    return st.waits;
}

/* A bystander: a second client whose submit + wait round trips are timed
 * while another client misbehaves. Returns the slowest in ms. */
static double bystander(sx_client *c, int rounds)
{
    double worst = 0;
    for (int i = 0; i < rounds; i++) {
        double t0 = sx_test_now_ms();
        square_ok(c, 3 + i, 20000);
        double dt = sx_test_now_ms() - t0;
        if (dt > worst)
            worst = dt;
    }
    return worst;
}

/* The error code of an error frame's body, into buf. */
static const char *frame_code(sx_payload b, char *buf, size_t cap)
{
    sx_payload e, v;
    buf[0] = 0;
    if (sx_map_get(b, "error", &e) == 0 && sx_map_get(e, "code", &v) == 0)
        sx_payload_get_str(v, buf, cap);
    return buf;
}

/* Property: many waits with a short timeout_ms on one long-lived PID cost
 * nothing once they have timed out, and the process's end costs O(1): a
 * client pipelines N waits of 1 ms on an idle process; all time out
 * (each under its own id); the server then holds one watch (the PID's)
 * and no wait record; the process is terminated and a second client's
 * round trips stay fast throughout. Control: with a record (and engine
 * watch) per wait kept until the process ends, relay_watches is N after
 * the timeouts, and the end walked them one chain per record (O(N^2):
 * 22-37 s for 65,000). */
static void test_many_timeouts_one_pid(void)
{
    const int n = SANITIZED ? 8000 : 40000;
    fixture f;
    fx_up(&f);
    sx_client *a = connect_ok(f.unix_addr, NULL);
    sx_client *b = connect_ok(f.unix_addr, NULL);
    sx_pid ip = submit_ok(a, "idle", "serve", NULL, 0);
    int posted = 0, answered = 0;
    while (answered < n) {
        while (posted < n && posted - answered < 20000) {
            uint64_t id;
            int rc = sx_client_post_wait(a, ip, 1, &id);
            if (rc == SX_ELIMIT)
                break; /* the client's own output buffer: read first */
            CHECK_RC(rc, 0);
            posted++;
        }
        uint64_t got;
        sx_reply r;
        CHECK_RC(sx_client_next_reply(a, 20000, &got, &r), 0);
        CHECK_STR(r.code, "timeout");
        sx_reply_free(&r);
        answered++;
    }
    sx_server_stats st = stats_of(&f);
    CHECK_EQ_U64(st.watches, 1);
    CHECK_EQ_U64(waits_after(&f, 0), 0);
    double worst = bystander(b, 20);
    /* The end of the process, with a wait from b on it: answered. */
    uint64_t wid;
    CHECK_RC(sx_client_post_wait(b, ip, -1, &wid), 0);
    CHECK_RC(sx_client_flush(b, 5000), 0);
    CHECK_EQ_U64(waits_after(&f, 1), 1);
    double t0 = sx_test_now_ms();
    CHECK_RC(sx_client_terminate(a, ip, NULL), 0);
    uint64_t got;
    sx_reply r;
    CHECK_RC(sx_client_next_reply(b, 20000, &got, &r), 0);
    CHECK_EQ_U64(got, wid);
    CHECK_STR(r.code, "terminated");
    sx_reply_free(&r);
    double end_ms = sx_test_now_ms() - t0;
    double worst2 = bystander(b, 20);
    printf("# %d timed-out waits: bystander worst %.1f ms, then %.1f ms; "
           "the end answered in %.1f ms\n",
           n, worst, worst2, end_ms);
    CHECK(end_ms < 2000);
    CHECK(worst < 2000 && worst2 < 2000);
    st = stats_of(&f);
    CHECK_EQ_U64(st.watches, 0);
    CHECK_EQ_U64(st.waits, 0);
    sx_client_close(a);
    sx_client_close(b);
    fx_down(&f);
}

/* Property: the waits and subscribes of a client that hangs up are
 * released with its connection: rounds of (connect, N subscribes and N
 * waits spread over 16 idle processes, close) leave no record behind
 * (relay_waits back to 0) and one watch per watched process (16), not
 * one per request. Control: with the records kept until their processes
 * end, relay_watches grows by 2N every round (six rounds of 65,536
 * subscribes hold 393,000 records, +313 MB). */
static void test_abandoned_released(void)
{
    const int n = SANITIZED ? 4000 : 20000;
    const int rounds = SANITIZED ? 2 : 3;
    fixture f;
    fx_up(&f);
    sx_client *keep = connect_ok(f.unix_addr, NULL);
    sx_pid procs[16];
    for (int i = 0; i < 16; i++)
        procs[i] = submit_ok(keep, "idle", "serve", NULL, 0);
    for (int round = 0; round < rounds; round++) {
        sx_client *c = connect_ok(f.unix_addr, NULL);
        int sent = 0, acked = 0;
        while (acked < n) {
            while (sent < n && sent - acked < 8000) {
                sx_pack pk;
                char txt[SX_PID_TEXT_MAX];
                sx_pid_format(procs[sent % 16], txt, sizeof(txt));
                sx_pack_init(&pk);
                sx_pack_map(&pk, 2);
                sx_pack_str(&pk, "op");
                sx_pack_str(&pk, "subscribe");
                sx_pack_str(&pk, "pid");
                sx_pack_str(&pk, txt);
                uint64_t id;
                int rc = sx_client_post(c, sx_pack_payload(&pk), &id);
                sx_pack_fini(&pk);
                if (rc == SX_ELIMIT)
                    break;
                CHECK_RC(rc, 0);
                uint64_t wid;
                CHECK_RC(sx_client_post_wait(c, procs[sent % 16], -1, &wid), 0);
                sent++;
            }
            uint64_t got;
            sx_reply r;
            CHECK_RC(sx_client_next_reply(c, 20000, &got, &r), 0);
            CHECK(r.ok);
            sx_reply_free(&r);
            acked++;
        }
        /* Every subscribe answered ok, so every wait has been read too. */
        CHECK_EQ_U64(waits_after(&f, 2 * (uint64_t)n), 2 * (uint64_t)n);
        CHECK_EQ_U64(stats_of(&f).watches, 16);
        sx_client_close(c);
        CHECK_EQ_U64(waits_after(&f, 0), 0);
        CHECK_EQ_U64(stats_of(&f).watches, 16);
    }
    for (int i = 0; i < 16; i++)
        CHECK_RC(sx_client_terminate(keep, procs[i], NULL), 0);
    sx_client_close(keep);
    fx_down(&f);
}

/* Property: max_waits bounds the waits and subscribes of the whole
 * server: with 100, the 101st pending one (on another connection) gets
 * `limit` and the connection stays usable; once some are answered there
 * is room again. Control: without the cap the 101st is accepted. */
static void test_max_waits(void)
{
    fixture f;
    sx_server_config sc = { .max_waits = 100 };
    fx_up_cfg(&f, 0, &sc);
    sx_client *a = connect_ok(f.unix_addr, NULL);
    sx_client *b = connect_ok(f.unix_addr, NULL);
    sx_pid ip = submit_ok(a, "idle", "serve", NULL, 0);
    for (int i = 0; i < 100; i++) {
        uint64_t id;
        CHECK_RC(sx_client_post_wait(a, ip, -1, &id), 0);
    }
    CHECK_RC(sx_client_flush(a, 5000), 0);
    CHECK_EQ_U64(waits_after(&f, 100), 100);
    sx_reply r;
    CHECK_RC(sx_client_subscribe(b, ip, &r), SX_ELIMIT);
    CHECK_STR(r.code, "limit");
    sx_reply_free(&r);
    CHECK_RC(sx_client_wait(b, ip, 5, NULL, &r), SX_ELIMIT);
    sx_reply_free(&r);
    sx_pid cp = submit_ok(b, "idle", "serve", NULL, 0); /* still usable */
    CHECK_RC(sx_client_terminate(b, cp, NULL), 0);
    CHECK_RC(sx_client_terminate(b, ip, NULL), 0);
    for (int i = 0; i < 100; i++) {
        uint64_t got;
        CHECK_RC(sx_client_next_reply(a, 20000, &got, &r), 0);
        CHECK_STR(r.code, "terminated");
        sx_reply_free(&r);
    }
    sx_pid jp = submit_ok(b, "idle", "serve", NULL, 0);
    CHECK_RC(sx_client_wait(b, jp, 5, NULL, &r), SX_ETIMEDOUT);
    sx_reply_free(&r);
    CHECK_RC(sx_client_terminate(b, jp, NULL), 0);
    square_ok(b, 4, 20000);
    sx_client_close(a);
    sx_client_close(b);
    fx_down(&f);
}

/* ==== the token gate ==================================================== */

#define TOKEN "s3cret-token"

static int tcp_connect(const fixture *f)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in sa = { 0 };
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)sx_server_port(f->s));
    sa.sin_addr.s_addr = htonl(0x7f000001);
    CHECK_RC(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void gate_up(fixture *f, size_t max_unauth, uint64_t auth_ms,
                    size_t max_conns)
{
    sx_server_config sc = { .listen = "127.0.0.1:0",
                            .token = TOKEN,
                            .max_unauthenticated = max_unauth,
                            .auth_timeout_ms = auth_ms,
                            .max_connections = max_conns };
    fx_up_cfg(f, 0, &sc);
}

/* Reads frames until an error frame with id 0 or the end: its code in
 * buf ("" at the end without one), then checks the connection closes. */
static const char *refusal(int fd, int timeout_ms, char *buf, size_t cap)
{
    sx_payload b;
    buf[0] = 0;
    int rc = raw_read(fd, timeout_ms, &b);
    CHECK(rc >= 0); /* an answer or the end, not silence */
    if (rc == 0) {
        frame_code(b, buf, cap);
        free((void *)b.data);
        CHECK_RC(raw_read(fd, timeout_ms, &b), 1); /* then closed */
    }
    return buf;
}

/* Property: before hello with the token a connection may send frames of
 * at most SX_RELAY_HELLO_MAX_FRAME bytes: a 15 MiB frame's header gets
 * bad_frame and the connection closes before its body is read, so 20
 * such clients cost the server nothing (the decoder held stays small); a
 * token holder still gets in. A hello that is a little big but within
 * the limit is answered. Control: with the server's 16 MiB limit before
 * hello, each such connection buffers its frame (~300 MB for 20). */
static void test_gate_frame_limit(void)
{
    fixture f;
    gate_up(&f, 0, 0, 0);
    int fds[20];
    for (int i = 0; i < 20; i++) {
        fds[i] = tcp_connect(&f);
        uint8_t h[4];
        be32(h, 15u << 20);
        CHECK_RC(raw_write(fds[i], h, 4), 0);
        static uint8_t junk[8192];
        (void)raw_write(fds[i], junk, sizeof(junk)); /* may be refused */
    }
    char code[32];
    for (int i = 0; i < 20; i++) {
        CHECK_STR(refusal(fds[i], 10000, code, sizeof(code)), "bad_frame");
        close(fds[i]);
    }
    sx_client *c = connect_ok(f.tcp_addr, TOKEN);
    square_ok(c, 5, 20000);
    /* After hello the server's own limit holds: a 1 MiB frame is fine. */
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_map(&pk, 3);
    sx_pack_str(&pk, "op");
    sx_pack_str(&pk, "send");
    sx_pack_str(&pk, "to");
    sx_pack_str(&pk, "{0@1|1}");
    sx_pack_str(&pk, "pad");
    static uint8_t big[1 << 20];
    sx_pack_bin(&pk, big, sizeof(big));
    sx_reply r;
    CHECK(sx_client_call(c, sx_pack_payload(&pk), 10000, &r) == 0);
    sx_pack_fini(&pk);
    CHECK(!r.ok); /* answered (bad_request: no topic), not refused */
    sx_reply_free(&r);
    square_ok(c, 6, 20000);
    sx_client_close(c);
    CHECK(stats_of(&f).bad_frames >= 20);
    fx_down(&f);
}

/* Property: connections that never authenticate cannot lock out a token
 * holder: with max_unauthenticated 8 and max_connections 4, 40 idle
 * token-less connections leave at most 8 waiting (each newcomer past the
 * cap closes the oldest, which reads an error frame with code limit; at
 * most 4 are accepted per loop iteration),
 * take none of the 4 slots, and a client with the token gets in at once.
 * Control: with every connection counted against max_connections, 1,030
 * idle connections against 1,024 get the token holder refused `limit`. */
static void test_gate_lockout(void)
{
    fixture f;
    gate_up(&f, 8, 60000, 4);
    int fds[40];
    for (int i = 0; i < 40; i++)
        fds[i] = tcp_connect(&f);
    /* The 32 oldest are closed with `limit`, in order. */
    char code[32];
    for (int i = 0; i < 32; i++)
        CHECK_STR(refusal(fds[i], 10000, code, sizeof(code)), "limit");
    sx_server_stats st = stats_of(&f);
    CHECK_EQ_U64(st.unauthenticated, 8);
    CHECK(st.auth_closed >= 32);
    sx_client *c[4];
    for (int i = 0; i < 4; i++) {
        c[i] = connect_ok(f.tcp_addr, TOKEN);
        square_ok(c[i], 7 + i, 20000);
    }
    /* max_connections counts the authenticated: a fifth is refused at
     * its hello, with limit. */
    sx_client *x = NULL;
    CHECK_RC(sx_client_connect(f.tcp_addr, TOKEN, 10000, &x), SX_ELIMIT);
    for (int i = 0; i < 4; i++)
        sx_client_close(c[i]);
    for (int i = 32; i < 40; i++)
        close(fds[i]);
    fx_down(&f);
}

/* Property: a connection that does not say hello with the token within
 * auth_timeout_ms gets an error frame (id 0, code timeout) and is closed;
 * one that does in time stays. Control: without the deadline the idle
 * connection is still open after it. */
static void test_gate_deadline(void)
{
    fixture f;
    gate_up(&f, 0, 300, 0);
    int idle = tcp_connect(&f);
    sx_client *c = connect_ok(f.tcp_addr, TOKEN);
    double t0 = sx_test_now_ms();
    char code[32];
    CHECK_STR(refusal(idle, 10000, code, sizeof(code)), "timeout");
    double dt = sx_test_now_ms() - t0;
    CHECK(dt >= 200 && dt < 5000);
    close(idle);
    square_ok(c, 9, 20000); /* past its deadline: authenticated */
    CHECK_EQ_U64(stats_of(&f).unauthenticated, 0);
    sx_client_close(c);
    fx_down(&f);
}

/* Property: a hello with the right token and a version the server does
 * not speak is refused (bad_request) and closes the connection: it does
 * not leave the connection authenticated. Control: the old hello set
 * authed before checking the version, so a following stats succeeded. */
static void test_gate_bad_version(void)
{
    fixture f;
    gate_up(&f, 0, 0, 0);
    int fd = tcp_connect(&f);
    sx_pack pk;
    req_begin(&pk, 4, "hello", 1);
    sx_pack_str(&pk, "version");
    sx_pack_int(&pk, 2);
    sx_pack_str(&pk, "token");
    sx_pack_str(&pk, TOKEN);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    req_begin(&pk, 2, "stats", 2);
    (void)raw_frame(fd, &pk); /* may find the connection closed */
    sx_pack_fini(&pk);
    sx_payload b;
    CHECK_RC(raw_read(fd, 10000, &b), 0);
    char code[32];
    CHECK_STR(frame_code(b, code, sizeof(code)), "bad_request");
    free((void *)b.data);
    CHECK_RC(raw_read(fd, 10000, &b), 1); /* closed: no stats reply */
    close(fd);
    fx_down(&f);
}

/* Property: a token longer than SX_RELAY_TOKEN_MAX is refused at start
 * (its hello would not fit the frame limit before hello). */
static void test_gate_token_max(void)
{
    sx_engine_config ec = { .workers = 1 };
    sx_engine *e = tx_engine_up(&ec, NULL, 0);
    char tok[SX_RELAY_TOKEN_MAX + 2];
    memset(tok, 'k', sizeof(tok) - 1);
    tok[sizeof(tok) - 1] = 0;
    sx_server_config sc = { .listen = "127.0.0.1:0", .token = tok };
    sx_server *s = NULL;
    CHECK_RC(sx_server_start(e, &sc, &s), SX_EINVAL);
    tok[SX_RELAY_TOKEN_MAX] = 0;
    CHECK_RC(sx_server_start(e, &sc, &s), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", sx_server_port(s));
    sx_client *c = NULL;
    CHECK_RC(sx_client_connect(addr, tok, 10000, &c), 0);
    sx_client_close(c);
    sx_server_stop(s);
    sx_engine_free(e);
}

static const sx_test_case cases[] = {
    { "many_timeouts_one_pid", test_many_timeouts_one_pid },
    { "abandoned_released", test_abandoned_released },
    { "max_waits", test_max_waits },
    { "gate_frame_limit", test_gate_frame_limit },
    { "gate_lockout", test_gate_lockout },
    { "gate_deadline", test_gate_deadline },
    { "gate_bad_version", test_gate_bad_version },
    { "gate_token_max", test_gate_token_max },
};

SX_TEST_MAIN(cases)

/* tests/relay/test_fair.c — one client's turn and frames against the
 * others': a subscribe's exit push never passes the frame limit (it is
 * built on the loop from the wait answer's frame, and is longer than it);
 * a connection that pipelines many requests answers at most
 * SX_RELAY_PUMP_BATCH of them before another connection's request is
 * read; a burst of connections without the token behind a token holder
 * cannot close the holder before its hello is read. Each case opens with
 * the property it checks and the control that shows it can fail.
 */
#include "tests/relay/relay_fixture.h"

/* blob.run [n]: DONE at once with a binary of n bytes. */
static int blob_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    int64_t *len = st;
    if (n != 1 || sx_payload_get_int(in[0], len) != 0 || *len < 0)
        return SX_EINVAL;
    return 0;
}

static int blob_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)ev, (void)n;
    int64_t len = *(int64_t *)st;
    uint8_t *z = calloc(1, (size_t)len + 1);
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_bin(&pk, z, (size_t)len);
    sx_done(out, sx_pack_payload(&pk));
    sx_pack_fini(&pk);
    free(z);
    return 0;
}

static const sx_process_type blob_type = { .name = "blob",
                                           .state_size = sizeof(int64_t),
                                           .init = blob_init,
                                           .step = blob_step,
                                           .methods = run_m };

static void up(fixture *f, size_t max_frame)
{
    memset(f, 0, sizeof(*f));
    f->e = tx_engine_up_workers(2, &blob_type, 1);
    sx_server_config sc = { .max_frame = max_frame };
    fx_serve(f, &sc);
}

/* Sends {op, id, pid} on fd. */
static void raw_pid_req(int fd, const char *op, uint64_t id, const char *pid)
{
    sx_pack pk;
    req_begin(&pk, 3, op, id);
    sx_pack_str(&pk, "pid");
    sx_pack_str(&pk, pid);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
}

/* Property: a result whose wait answer is exactly max_frame is sent to a
 * wait whole, and a subscribe, whose exit push would be longer than
 * max_frame, gets an exit push with ok false and code too_large instead
 * of a frame no client takes. Control: without exit_push's size check the
 * push is 8,194 bytes against a limit of 8,192. */
static void test_exit_push_fits_frame(void)
{
    const size_t max_frame = 8192;
    fixture f;
    up(&f, max_frame);
    sx_client *c = NULL;
    CHECK_RC(sx_client_connect(f.unix_addr, NULL, 10000, &c), 0);
    /* A wait answer {id: u64, ok, result: bin16(n), steps: 1, attempts:
     * 1} is n + 44 bytes: n = max_frame - 44 makes it exactly max_frame. */
    int64_t n = (int64_t)max_frame - 44;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(b, n);
    sx_pid pid;
    CHECK_RC(sx_client_submit(c, "blob", "run", &in, 1, &pid, NULL), 0);
    CHECK_RC(sx_client_wait(c, pid, 10000, NULL, NULL), 0); /* fits */
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(pid, txt, sizeof(txt));

    int fd = raw_connect(f.path);
    raw_pid_req(fd, "wait", 1, txt);
    sx_payload w;
    CHECK_RC(raw_read(fd, 5000, &w), 0);
    printf("wait answer: %zu bytes (max_frame %zu)\n", w.len, max_frame);
    CHECK(w.len <= max_frame);
    free((void *)w.data);

    raw_pid_req(fd, "subscribe", 2, txt);
    sx_payload ok, push;
    CHECK_RC(raw_read(fd, 5000, &ok), 0);
    free((void *)ok.data);
    CHECK_RC(raw_read(fd, 5000, &push), 0);
    printf("exit push:   %zu bytes (max_frame %zu)\n", push.len, max_frame);
    CHECK(push.len <= max_frame);
    sx_payload e, cv;
    char code[32] = "";
    CHECK_RC(sx_map_get(push, "error", &e), 0);
    CHECK_RC(sx_map_get(e, "code", &cv), 0);
    CHECK_RC(sx_payload_get_str(cv, code, sizeof(code)), 0);
    CHECK_STR(code, "too_large");
    free((void *)push.data);
    close(fd);
    sx_client_close(c);
    sx_server_stop(f.s);
    tx_engine_down(f.e);
    rmdir(f.dir);
}

/* Property: a connection that pipelines many requests in one write (900
 * submits whose init takes 1 ms on the loop) answers SX_RELAY_PUMP_BATCH
 * (512) of them, then the loop reads the other connections before it
 * goes on: a second client's request sent meanwhile is answered after
 * 512 of them, not after all 900. Control: continuing in an idle handle
 * (which runs before the poll), or letting a flush pump the connection
 * again, answers it after 900. */
static void test_pump_turn_yields(void)
{
    fixture f;
    fx_up(&f);
    enum { N = 900 };
    int a = raw_connect(f.path), b = raw_connect(f.path);
    static uint8_t all[65536];
    size_t all_len = 0;
    for (uint64_t i = 1; i <= N; i++) {
        sx_pack pk;
        req_begin(&pk, 5, "submit", i);
        sx_pack_str(&pk, "type");
        sx_pack_str(&pk, "slowinit");
        sx_pack_str(&pk, "method");
        sx_pack_str(&pk, "run");
        sx_pack_str(&pk, "input");
        sx_pack_array(&pk, 1);
        sx_pack_int(&pk, 1);
        CHECK(all_len + 4 + pk.len <= sizeof(all));
        be32(all + all_len, (uint32_t)pk.len);
        memcpy(all + all_len + 4, pk.data, pk.len);
        all_len += 4 + pk.len;
        sx_pack_fini(&pk);
    }
    printf("A sends %zu bytes in one write\n", all_len);
    CHECK_RC(raw_write(a, all, all_len), 0);
    tx_sleep_ms(100); /* A's first turn is running (512 x 1 ms) */
    /* B asks for stats: `submitted` says how many of A's submits the
     * loop had answered by the time it got to B. */
    sx_pack q;
    req_begin(&q, 2, "stats", 7);
    CHECK_RC(raw_frame(b, &q), 0);
    sx_pack_fini(&q);
    sx_payload r, st;
    CHECK_RC(raw_read(b, 10000, &r), 0);
    CHECK_RC(sx_map_get(r, "stats", &st), 0);
    int64_t done_a = map_int(st, "submitted");
    free((void *)r.data);
    printf("B answered after %" PRId64 " of A's %d submits (turn: %d)\n",
           done_a, N, 512);
    for (int i = 0; i < N; i++) { /* every one of A's answered */
        CHECK_RC(raw_read(a, 10000, &r), 0);
        free((void *)r.data);
    }
    CHECK(done_a < 700);
    close(a);
    close(b);
    fx_down(&f);
}

/* Property: with a token, a burst of connections that queued up behind a
 * token holder while the loop was busy (here a 300 ms init; a connect
 * flood does the same) cannot close the holder before its hello is read:
 * at most max_unauthenticated / 2 are accepted per loop iteration, so the
 * oldest is closed to make room only after a poll has read it. The
 * holder's hello is answered ok. Control: accepting the whole backlog at
 * once (libuv's accept loop) with max_unauthenticated 8 closes the holder
 * with `limit`, its hello never read. */
static void test_gate_burst_evicts_holder(void)
{
    fixture f;
    sx_server_config sc = { .token = "tok", .max_unauthenticated = 8 };
    fx_up_cfg(&f, 0, &sc);
    /* Hold the loop: hello with the token, then submit slowinit [300]. */
    int hold = raw_connect(f.path);
    sx_pack pk;
    req_begin(&pk, 4, "hello", 1);
    sx_pack_str(&pk, "version");
    sx_pack_uint(&pk, 1);
    sx_pack_str(&pk, "token");
    sx_pack_str(&pk, "tok");
    CHECK_RC(raw_frame(hold, &pk), 0);
    sx_payload r;
    CHECK_RC(raw_read(hold, 5000, &r), 0);
    free((void *)r.data);
    sx_pack_fini(&pk);
    req_begin(&pk, 5, "submit", 2);
    sx_pack_str(&pk, "type");
    sx_pack_str(&pk, "slowinit");
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, "run");
    sx_pack_str(&pk, "input");
    sx_pack_array(&pk, 1);
    sx_pack_int(&pk, 300);
    CHECK_RC(raw_frame(hold, &pk), 0);
    sx_pack_fini(&pk);
    tx_sleep_ms(50);
    /* The token holder connects and says hello at once... */
    int legit = raw_connect(f.path);
    req_begin(&pk, 4, "hello", 1);
    sx_pack_str(&pk, "version");
    sx_pack_uint(&pk, 1);
    sx_pack_str(&pk, "token");
    sx_pack_str(&pk, "tok");
    CHECK_RC(raw_frame(legit, &pk), 0);
    sx_pack_fini(&pk);
    /* ...and 8 token-less connections arrive right after it. */
    int junk[8];
    for (int i = 0; i < 8; i++)
        junk[i] = raw_connect(f.path);
    CHECK_RC(raw_read(legit, 5000, &r), 0);
    sx_payload v;
    bool ok = sx_map_get(r, "ok", &v) == 0 && v.len == 1 && v.data[0] == 0xc3;
    char code[32] = "";
    sx_payload e, cv;
    if (!ok && sx_map_get(r, "error", &e) == 0 &&
        sx_map_get(e, "code", &cv) == 0)
        sx_payload_get_str(cv, code, sizeof(code));
    printf("token holder's hello: %s %s\n", ok ? "ok" : "refused", code);
    free((void *)r.data);
    CHECK(ok);
    close(legit);
    for (int i = 0; i < 8; i++)
        close(junk[i]);
    CHECK_RC(raw_read(hold, 5000, &r), 0); /* the submit's reply */
    free((void *)r.data);
    close(hold);
    fx_down(&f);
}

static const sx_test_case cases[] = {
    { "gate_burst_evicts_holder", test_gate_burst_evicts_holder },
    { "exit_push_fits_frame", test_exit_push_fits_frame },
    { "pump_turn_yields", test_pump_turn_yields },
};

SX_TEST_MAIN(cases)

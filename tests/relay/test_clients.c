/* tests/relay/test_clients.c — many clients at once on one relay server:
 * 50 concurrent clients (threads) x 200 jobs each (submit + wait) over the
 * Unix socket, every one of the 10,000 results checked and none lost; and
 * clients that disconnect mid-wait and mid-subscribe, which must leak
 * nothing (LSan checks at exit, after the engine is freed) while the
 * server keeps serving. Each case opens with the property it checks.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stepx/relay.h>

#include "tests/support/support.h"

#include "tests/relay/relay_fixture.h"

/* ==== many clients ====================================================== */

#define N_CLIENTS 50
#define N_JOBS 200

typedef struct {
    const fixture *f;
    int index;
    int ok;      /* jobs whose result was right */
    int failure; /* first error seen, 0 if none */
} client_job;

static atomic_int clients_ready;

static void *client_main(void *arg)
{
    client_job *j = arg;
    sx_client *c = NULL;
    int rc = sx_client_connect(j->f->path, NULL, 30000, &c);
    atomic_fetch_add_explicit(&clients_ready, 1, memory_order_relaxed);
    if (rc != 0) {
        j->failure = rc;
        return NULL;
    }
    for (int k = 0; k < N_JOBS; k++) {
        int64_t x = (int64_t)j->index * 100000 + k;
        uint8_t b[SX_PAYLOAD_INT_MAX];
        sx_payload in = sx_payload_int(b, x);
        sx_pid pid;
        rc = sx_client_submit(c, "square", "run", &in, 1, &pid, NULL);
        if (rc != 0) {
            j->failure = rc;
            break;
        }
        sx_reply r;
        uint64_t steps = 0;
        rc = sx_client_wait(c, pid, 60000, &steps, &r);
        if (rc != 0) {
            j->failure = rc;
            sx_reply_free(&r);
            break;
        }
        sx_payload v;
        int64_t got = -1;
        if (sx_map_get(r.body, "result", &v) == 0 &&
            sx_payload_get_int(v, &got) == 0 && got == x * x &&
            steps == (uint64_t)(x % 3) + 1)
            j->ok++;
        sx_reply_free(&r);
    }
    sx_client_close(c);
    return NULL;
}

/* Property: 50 clients on their own threads, 200 submit + wait each over
 * the Unix socket: all 10,000 results are right (value and step count),
 * none is lost, and the engine and server figures agree. */
static void test_many_clients(void)
{
    fixture f;
    fx_up(&f);
    static client_job jobs[N_CLIENTS];
    pthread_t th[N_CLIENTS];
    atomic_store_explicit(&clients_ready, 0, memory_order_relaxed);
    for (int i = 0; i < N_CLIENTS; i++) {
        jobs[i] = (client_job){ &f, i, 0, 0 };
        CHECK_RC(pthread_create(&th[i], NULL, client_main, &jobs[i]), 0);
    }
    int total = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        pthread_join(th[i], NULL);
        if (jobs[i].failure != 0)
            SX_FAILF("client %d: %s (%s)", i, sx_strerror(jobs[i].failure),
                     sx_errname(jobs[i].failure));
        total += jobs[i].ok;
    }
    CHECK_EQ_INT(total, N_CLIENTS * N_JOBS);
    sx_engine_stats es;
    CHECK_RC(sx_engine_stats_get(f.e, &es, NULL, 0), 0);
    CHECK_EQ_U64(es.completed, N_CLIENTS * N_JOBS);
    CHECK_EQ_U64(es.live, 0);
    sx_server_stats ss;
    sx_server_stats_get(f.s, &ss);
    CHECK_EQ_U64(ss.accepted, N_CLIENTS);
    /* hello + submit + wait per job, at least */
    CHECK(ss.requests >= (uint64_t)N_CLIENTS * (1 + 2 * N_JOBS));
    CHECK_EQ_U64(ss.bad_frames, 0);
    fx_down(&f);
}

/* ==== clients that go away ============================================== */

/* Sends {op, id, pid[, timeout_ms]} as one frame. */
static void raw_request(int fd, const char *op, uint64_t id, sx_pid pid,
                        int64_t timeout_ms)
{
    sx_pack body;
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(pid, txt, sizeof(txt));
    req_begin(&body, timeout_ms >= 0 ? 4 : 3, op, id);
    sx_pack_str(&body, "pid");
    sx_pack_str(&body, txt);
    if (timeout_ms >= 0) {
        sx_pack_str(&body, "timeout_ms");
        sx_pack_int(&body, timeout_ms);
    }
    CHECK_RC(raw_frame(fd, &body), 0);
    sx_pack_fini(&body);
}

/* Property: clients that disconnect with waits (with and without a
 * timeout) and subscriptions pending — on processes that finish soon
 * after, on processes that never finish until the engine stops, and with
 * the close racing the request itself — leave nothing behind: the server
 * keeps serving (a fresh client's job is right after each round), its
 * connection count returns to zero, and LSan finds no leak once the
 * engine is freed. */
static void test_disconnect_mid_wait(void)
{
    fixture f;
    fx_up(&f);
    sx_client *good;
    CHECK_RC(sx_client_connect(f.path, NULL, 10000, &good), 0);
    sx_pid idle;
    CHECK_RC(sx_client_submit(good, "idle", "serve", NULL, 0, &idle, NULL), 0);
    for (int round = 0; round < 200; round++) {
        uint8_t b[SX_PAYLOAD_INT_MAX];
        sx_payload in = sx_payload_int(b, 1 + round % 20);
        sx_pid sp;
        CHECK_RC(sx_client_submit(good, "sleeper", "run", &in, 1, &sp, NULL),
                 0);
        int fd = raw_connect(f.path);
        switch (round % 4) {
        case 0: /* wait, no timeout; subscribe; on a sleeper */
            raw_request(fd, "wait", 1, sp, -1);
            raw_request(fd, "subscribe", 2, sp, -1);
            break;
        case 1: /* wait with a timeout, on the idle process */
            raw_request(fd, "wait", 1, idle, 100000);
            raw_request(fd, "subscribe", 2, idle, -1);
            break;
        case 2: /* both at once, on both */
            raw_request(fd, "wait", 1, idle, -1);
            raw_request(fd, "wait", 2, sp, 5);
            raw_request(fd, "subscribe", 3, sp, -1);
            raw_request(fd, "subscribe", 4, idle, -1);
            break;
        default: /* the close races the requests: no sleep */
            raw_request(fd, "wait", 1, sp, 1);
            break;
        }
        if (round % 4 != 3 && round % 3 == 0)
            tx_sleep_ms(2); /* let the server register them first */
        close(fd);
        if (round % 10 == 0) {
            sx_reply r;
            CHECK_RC(sx_client_wait(good, sp, 30000, NULL, &r), 0);
            CHECK_EQ_INT(reply_int(&r, "result"), 1 + round % 20);
            sx_reply_free(&r);
        }
    }
    fx_wait_connections(&f, 1, 20000);
    /* The server is fine: a fresh client's job. */
    sx_client *c;
    CHECK_RC(sx_client_connect(f.path, NULL, 10000, &c), 0);
    square_ok(c, 7, 30000);
    sx_client_close(c);
    sx_reply r;
    /* The idle process finishes now, while the server runs: every watch
     * left by a gone client fires into nothing. */
    CHECK_RC(sx_client_terminate(good, idle, NULL), 0);
    CHECK(sx_client_wait(good, idle, 30000, NULL, &r) != 0);
    sx_reply_free(&r);
    sx_client_close(good);
    fx_wait_connections(&f, 0, 20000);
    fx_down(&f);
}

/* Property: a client that disconnects with pushes still queued for it (an
 * echo would answer, a subscribe would fire) leaves nothing behind; a
 * client closed through the C client mid-subscribe too. */
static void test_disconnect_mid_subscribe(void)
{
    fixture f;
    fx_up(&f);
    for (int round = 0; round < 100; round++) {
        sx_client *c;
        CHECK_RC(sx_client_connect(f.path, NULL, 10000, &c), 0);
        uint8_t b[SX_PAYLOAD_INT_MAX];
        sx_payload in = sx_payload_int(b, 1 + round % 5);
        sx_pid sp;
        CHECK_RC(sx_client_submit(c, "sleeper", "run", &in, 1, &sp, NULL), 0);
        CHECK_RC(sx_client_subscribe(c, sp, NULL), 0);
        if (round % 2 == 0)
            tx_sleep_ms(1 + round % 5);
        sx_client_close(c);
    }
    fx_wait_connections(&f, 0, 20000);
    /* Every sleeper has finished or will; the server still serves. */
    sx_client *c;
    CHECK_RC(sx_client_connect(f.path, NULL, 10000, &c), 0);
    square_ok(c, 5, 30000);
    sx_client_close(c);
    fx_down(&f);
}

static const sx_test_case cases[] = {
    { "many_clients", test_many_clients },
    { "disconnect_mid_wait", test_disconnect_mid_wait },
    { "disconnect_mid_subscribe", test_disconnect_mid_subscribe },
};

SX_TEST_MAIN(cases)

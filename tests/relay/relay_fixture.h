/* tests/relay/relay_fixture.h — what the relay server and client tests
 * share (test_server.c, test_bad_input.c, test_clients.c, test_pipeline.c):
 * an engine with the daemon's shipped process types (cmd/types/types.c:
 * counter, sleeper, echo, fail, exec, fanout; each test binary links it) and
 * the test types below, a relay server on a Unix socket in a fresh temporary
 * directory (and on TCP when asked), raw-socket helpers for frames the C
 * client would not send, and small payload helpers. Included once per test
 * file; everything here is static, the functions inline.
 *
 * Threads: the fixture and the helpers run on the test's threads; the
 * types' init and step run on the engine's (engine rules).
 */
#ifndef SX_TESTS_RELAY_FIXTURE_H
#define SX_TESTS_RELAY_FIXTURE_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <stepx/relay.h>

#include "cmd/types/types.h"
#include "tests/support/support.h"

/* ==== process types ===================================================== */

/* The shipped types are registered first (sx_types_register_builtin);
 * these are the ones the tests need besides, with behaviour of their own. */

static const sx_payload nil = { NULL, 0 };
static const char *const run_m[] = { "run", NULL };
static const char *const serve_m[] = { "serve", NULL };

/* square.run [x]: x % 3 no-op yields, DONE x * x (so the step count, x % 3
 * + 1, checks that every step was run exactly once). */
typedef struct {
    int64_t x, left;
} square_st;

static int square_init(void *st, const sx_init_ctx *c, const char *m,
                       const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    square_st *s = st;
    if (n != 1 || sx_payload_get_int(in[0], &s->x) != 0)
        return SX_EINVAL;
    s->left = s->x % 3;
    return 0;
}

static int square_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    (void)ev, (void)n;
    square_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    if (s->left-- > 0) {
        sx_yield(out, SX_CMD_NOOP, 1, nil);
        sx_wait(out);
        return 0;
    }
    sx_done(out, sx_payload_int(b, s->x * s->x));
    return 0;
}

/* idle.serve: IDLE until terminated; a cancel (and so an engine stop)
 * ends it with SX_ECANCELLED, the process's own error. */
static int idle_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

static int idle_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st;
    for (size_t i = 0; i < n; i++)
        if (ev[i].type == SX_EVENT_MESSAGE &&
            strcmp(ev[i].topic, SX_TOPIC_CANCEL) == 0)
            return SX_ECANCELLED;
    sx_idle(out);
    return 0;
}

/* badinit.run: init refuses with -EIO (an init's own error). */
static int badinit_init(void *st, const sx_init_ctx *c, const char *m,
                        const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return -EIO;
}

/* slowinit.run [ms]: init sleeps ms (on the server's loop thread, which
 * runs submit: every client of the server waits meanwhile), then DONE
 * with ms at its first step. */
static int slowinit_init(void *st, const sx_init_ctx *c, const char *m,
                         const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    int64_t *ms = st;
    if (n != 1 || sx_payload_get_int(in[0], ms) != 0 || *ms < 0)
        return SX_EINVAL;
    tx_sleep_ms((long)*ms);
    return 0;
}

static int slowinit_step(void *st, const sx_event *ev, size_t n,
                         sx_step_output *out)
{
    (void)ev, (void)n;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(b, *(int64_t *)st));
    return 0;
}

/* blocker.run: its first step blocks until the test opens the gate (so
 * that a terminate leaves it "finishing" for a while), then IDLE. The test
 * resets gate_open and gate_entered before submitting one. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open, gate_entered; /* under gate_mu */

static int blocker_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    pthread_mutex_lock(&gate_mu);
    gate_entered = 1;
    pthread_cond_broadcast(&gate_cv);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    sx_idle(out);
    return 0;
}

/* flood.run [to, n, size]: sends n messages to the PID text `to`, topic
 * "seq", data [i, bin(size)], 64 per step; DONE n. A send to a closed
 * mailbox is a dead letter, not an error. */
typedef struct {
    sx_pid to;
    int64_t n, i, size;
    uint8_t *pad;
} flood_st;

static int flood_init(void *st, const sx_init_ctx *c, const char *m,
                      const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    flood_st *s = st;
    char txt[SX_PID_TEXT_MAX];
    if (n != 3 || sx_payload_get_str(in[0], txt, sizeof(txt)) != 0 ||
        sx_pid_parse(txt, &s->to) != 0 ||
        sx_payload_get_int(in[1], &s->n) != 0 ||
        sx_payload_get_int(in[2], &s->size) != 0 || s->size < 0)
        return SX_EINVAL;
    s->pad = calloc(1, (size_t)s->size + 1);
    return s->pad != NULL ? 0 : SX_ENOMEM;
}

static void flood_close(void *st)
{
    free(((flood_st *)st)->pad);
}

static int flood_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)ev, (void)n;
    flood_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    for (int k = 0; k < 64 && s->i < s->n; k++, s->i++) {
        sx_pack pk;
        sx_pack_init(&pk);
        sx_pack_array(&pk, 2);
        sx_pack_int(&pk, s->i);
        sx_pack_bin(&pk, s->pad, (size_t)s->size);
        sx_send(out, s->to, "seq", sx_pack_payload(&pk));
        sx_pack_fini(&pk);
    }
    if (s->i >= s->n)
        sx_done(out, sx_payload_int(b, s->n));
    else
        sx_continue(out);
    return 0;
}

/* deep.run [d] or [d, to]: sends d-deep nested arrays to the PID text
 * `to` (when given), then DONE with them. */
typedef struct {
    int64_t d;
    sx_pid to; /* SX_PID_NONE (zeroed state) when not given */
} deep_st;

static int deep_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    deep_st *s = st;
    char txt[SX_PID_TEXT_MAX];
    if (n < 1 || n > 2 || sx_payload_get_int(in[0], &s->d) != 0 || s->d < 0)
        return SX_EINVAL;
    if (n == 2 && (sx_payload_get_str(in[1], txt, sizeof(txt)) != 0 ||
                   sx_pid_parse(txt, &s->to) != 0))
        return SX_EINVAL;
    return 0;
}

static int deep_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)ev, (void)n;
    deep_st *s = st;
    sx_pack pk;
    sx_pack_init(&pk);
    for (int64_t i = 0; i < s->d; i++)
        sx_pack_array(&pk, 1);
    sx_pack_nil(&pk);
    if (!sx_pid_eq(s->to, SX_PID_NONE))
        sx_send(out, s->to, "deep", sx_pack_payload(&pk));
    sx_done(out, sx_pack_payload(&pk));
    sx_pack_fini(&pk);
    return 0;
}

/* same.run [x]: DONE with x, the client's bytes untouched (a result the
 * server must pass through); same.run []: IDLE until cancelled
 * (SX_ECANCELLED) or terminated. */
typedef struct {
    uint8_t *v;
    size_t n;
    bool has;
} same_st;

static int same_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    same_st *s = st;
    if (n > 1)
        return SX_EINVAL;
    if (n == 1) {
        s->v = malloc(in[0].len > 0 ? in[0].len : 1);
        if (s->v == NULL)
            return SX_ENOMEM;
        memcpy(s->v, in[0].data, in[0].len);
        s->n = in[0].len;
        s->has = true;
    }
    return 0;
}

static void same_close(void *st)
{
    free(((same_st *)st)->v);
}

static int same_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    same_st *s = st;
    if (!s->has)
        return idle_step(st, ev, n, out);
    sx_done(out, (sx_payload){ s->v, s->n });
    return 0;
}

/* "sum": finishes with the sum of its inputs (integers, however many),
 * each weighed by its place (1 x the first, 2 x the second, ...), so that
 * inputs out of order change the sum. */
typedef struct {
    int64_t total;
} sum_st;

static int sum_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    sum_st *s = st;
    for (size_t i = 0; i < n; i++) {
        int64_t x;
        if (sx_payload_get_int(in[i], &x) != 0)
            return SX_EINVAL;
        s->total += (int64_t)(i + 1) * x;
    }
    return 0;
}

static int sum_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    (void)ev, (void)n;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(b, ((sum_st *)st)->total));
    return 0;
}

static const sx_process_type fx_types[] = {
    { .name = "sum",
      .state_size = sizeof(sum_st),
      .init = sum_init,
      .step = sum_step,
      .methods = run_m },
    { .name = "square",
      .state_size = sizeof(square_st),
      .init = square_init,
      .step = square_step,
      .methods = run_m },
    { .name = "idle",
      .state_size = 8,
      .init = idle_init,
      .step = idle_step,
      .methods = serve_m },
    { .name = "badinit",
      .state_size = 8,
      .init = badinit_init,
      .step = idle_step,
      .methods = run_m },
    { .name = "slowinit",
      .state_size = sizeof(int64_t),
      .init = slowinit_init,
      .step = slowinit_step,
      .methods = run_m },
    { .name = "blocker",
      .state_size = 8,
      .init = idle_init,
      .step = blocker_step,
      .methods = run_m },
    { .name = "flood",
      .state_size = sizeof(flood_st),
      .init = flood_init,
      .step = flood_step,
      .close = flood_close,
      .methods = run_m },
    { .name = "deep",
      .state_size = sizeof(deep_st),
      .init = deep_init,
      .step = deep_step,
      .methods = run_m },
    { .name = "same",
      .state_size = sizeof(same_st),
      .init = same_init,
      .step = same_step,
      .close = same_close,
      .methods = run_m },
};

#define FX_NTYPES (sizeof(fx_types) / sizeof(fx_types[0]))

/* ==== fixture =========================================================== */

/* The TCP listener and server name of fx_up_tcp (test_server.c). */
#define FX_LISTEN "127.0.0.1:0"
#define FX_SERVER_NAME "test-server/1"

typedef struct {
    sx_engine *e;
    sx_server *s; /* NULL once a test stopped it itself */
    char dir[64];
    char path[128];      /* the Unix socket */
    char unix_addr[140]; /* "unix:" path */
    char tcp_addr[64];   /* "127.0.0.1:PORT"; empty without a listener */
} fixture;

/* Starts a server for the started engine f->e, configured as *extra
 * (NULL: defaults), on the socket f->path in a new temporary directory
 * (and on TCP when extra has a listener). */
static inline void fx_serve(fixture *f, const sx_server_config *extra)
{
    tx_mkdtemp(f->dir, sizeof(f->dir), "sxrel");
    snprintf(f->path, sizeof(f->path), "%s/s.sock", f->dir);
    snprintf(f->unix_addr, sizeof(f->unix_addr), "unix:%s", f->path);
    sx_server_config sc = { 0 };
    if (extra != NULL)
        sc = *extra;
    sc.socket_path = f->path;
    CHECK_RC(sx_server_start(f->e, &sc, &f->s), 0);
    if (sc.listen != NULL)
        snprintf(f->tcp_addr, sizeof(f->tcp_addr), "127.0.0.1:%d",
                 sx_server_port(f->s));
}

/* Starts an engine configured as *ec with the shipped and the test types,
 * and a server configured as *extra (fx_serve). */
static inline void fx_up_engine(fixture *f, const sx_engine_config *ec,
                                const sx_server_config *extra)
{
    memset(f, 0, sizeof(*f));
    f->e = tx_engine_new(ec);
    CHECK_RC(sx_types_register_builtin(f->e), 0);
    tx_engine_register(f->e, fx_types, FX_NTYPES);
    tx_engine_start(f->e);
    fx_serve(f, extra);
}

/* An engine of 2 workers (max_processes 0: the default). */
static inline void fx_up_cfg(fixture *f, size_t max_processes,
                             const sx_server_config *extra)
{
    sx_engine_config ec = { .workers = 2, .max_processes = max_processes };
    fx_up_engine(f, &ec, extra);
}

static inline void fx_up(fixture *f)
{
    fx_up_cfg(f, 0, NULL);
}

/* With max_output unsent bytes per connection. */
static inline void fx_up_out(fixture *f, size_t max_output)
{
    sx_server_config sc = { .max_output = max_output };
    fx_up_cfg(f, 0, &sc);
}

/* Also on TCP (FX_LISTEN, f->tcp_addr), named FX_SERVER_NAME. */
static inline void fx_up_tcp(fixture *f)
{
    sx_server_config sc = { .listen = FX_LISTEN,
                            .server_name = FX_SERVER_NAME };
    fx_up_cfg(f, 0, &sc);
}

/* Stops the server (unless the test did) and checks that it removed its
 * socket file, then stops and frees the engine. */
static inline void fx_down(fixture *f)
{
    if (f->s != NULL)
        sx_server_stop(f->s);
    struct stat st;
    CHECK(stat(f->path, &st) != 0);
    tx_engine_down(f->e);
    rmdir(f->dir);
}

/* Waits up to timeout_ms until the server has want connections open; then
 * checks that it has. */
static inline void fx_wait_connections(const fixture *f, uint64_t want,
                                       double timeout_ms)
{
    sx_server_stats st;
    double until = sx_test_now_ms() + timeout_ms;
    do {
        sx_server_stats_get(f->s, &st);
        if (st.connections == want)
            return;
        tx_sleep_ms(1);
    } while (sx_test_now_ms() < until);
    CHECK_EQ_U64(st.connections, want);
}

/* ==== payload helpers =================================================== */

static inline int64_t map_int(sx_payload m, const char *key)
{
    sx_payload v;
    int64_t x = -1;
    CHECK_RC(sx_map_get(m, key, &v), 0);
    CHECK_RC(sx_payload_get_int(v, &x), 0);
    return x;
}

static inline int64_t reply_int(const sx_reply *r, const char *key)
{
    return map_int(r->body, key);
}

/* Submits square [x] on c and waits up to timeout_ms: the result must be
 * x * x. */
static inline void square_ok(sx_client *c, int64_t x, int64_t timeout_ms)
{
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(b, x);
    sx_pid pid;
    CHECK_RC(sx_client_submit(c, "square", "run", &in, 1, &pid, NULL), 0);
    sx_reply r;
    CHECK_RC(sx_client_wait(c, pid, timeout_ms, NULL, &r), 0);
    CHECK_EQ_INT(reply_int(&r, "result"), x * x);
    sx_reply_free(&r);
}

/* ==== raw sockets ======================================================= */

/* The address of the Unix socket at path. */
static inline struct sockaddr_un unix_sa(const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    CHECK(strlen(path) < sizeof(sa.sun_path));
    strcpy(sa.sun_path, path);
    return sa;
}

/* A Unix stream socket bound at path (a file like the one a dead server
 * leaves, once closed), listening when asked (another program's live
 * socket): its fd. */
static inline int unix_bound(const char *path, bool listening)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un sa = unix_sa(path);
    CHECK_RC(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    if (listening)
        CHECK_RC(listen(fd, 4), 0);
    return fd;
}

/* One connect to the Unix socket at path, closed at once: 0 when it was
 * accepted, else its errno. */
static inline int unix_try_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un sa = unix_sa(path);
    int err = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : errno;
    close(fd);
    return err;
}

/* A plain connection to the Unix socket at path (no hello). */
static inline int raw_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un sa = unix_sa(path);
    CHECK_RC(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Writes n bytes: 0, or 1 when the server closed its end first (EPIPE,
 * ECONNRESET; the rest is not sent). Cases that send hostile input may
 * ignore the 1; the others check for 0. */
static inline int raw_write(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
            return 1;
        CHECK(w > 0);
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static inline void be32(uint8_t h[4], uint32_t n)
{
    h[0] = (uint8_t)(n >> 24);
    h[1] = (uint8_t)(n >> 16);
    h[2] = (uint8_t)(n >> 8);
    h[3] = (uint8_t)n;
}

/* A frame header saying len, then these n body bytes (any: nothing is
 * checked). As raw_write. */
static inline int raw_frame_bytes(int fd, uint32_t len, const void *body,
                                  size_t n)
{
    uint8_t h[4];
    be32(h, len);
    if (raw_write(fd, h, 4) != 0)
        return 1;
    return raw_write(fd, body, n);
}

/* pk's bytes as one frame. As raw_write. */
static inline int raw_frame(int fd, const sx_pack *pk)
{
    return raw_frame_bytes(fd, (uint32_t)pk->len, pk->data, pk->len);
}

/* Reads exactly n bytes: 0, 1 at EOF, -1 on timeout. */
static inline int raw_read_n(int fd, uint8_t *b, size_t n, int timeout_ms)
{
    double until = sx_test_now_ms() + timeout_ms;
    while (n > 0) {
        struct pollfd p = { fd, POLLIN, 0 };
        int left = (int)(until - sx_test_now_ms());
        if (left < 0 || poll(&p, 1, left) == 0)
            return -1;
        ssize_t r = recv(fd, b, n, 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET))
            return 1;
        CHECK(r > 0);
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* One frame's body into *out (malloc'd), checked as a frame the protocol
 * allows (not empty, sx_wire_check): 0, 1 at EOF, -1 on timeout. */
static inline int raw_read(int fd, int timeout_ms, sx_payload *out)
{
    uint8_t h[4];
    int rc = raw_read_n(fd, h, 4, timeout_ms);
    if (rc != 0)
        return rc;
    size_t n =
        (size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];
    CHECK(n > 0);
    uint8_t *b = malloc(n);
    CHECK(b != NULL);
    CHECK_RC(raw_read_n(fd, b, n, timeout_ms), 0);
    CHECK_RC(sx_wire_check(b, n), 0);
    *out = (sx_payload){ b, n };
    return 0;
}

/* Starts a request in pk: a map of n pairs, the first two op and id. */
static inline void req_begin(sx_pack *pk, uint32_t n, const char *op,
                             uint64_t id)
{
    sx_pack_init(pk);
    sx_pack_map(pk, n);
    sx_pack_str(pk, "op");
    sx_pack_str(pk, op);
    sx_pack_str(pk, "id");
    sx_pack_uint(pk, id);
}

#endif

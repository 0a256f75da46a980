/* tests/io/test_io_stress.c — every command family at once, with random
 * terminates.
 *
 * Each process runs rounds of 1-3 random yields: sleeps, sleeps with a
 * timeout that may win, timers, fs writes in a temp directory,
 * subprocesses, sends to itself, spawn-and-wait, user commands answered
 * from a helper thread, and net conversations with a loopback server (see
 * "net" below). Every yield has a tag of its own (never reused, and no
 * other process's), and the
 * process keeps the tags in flight: an answer for a tag that is not in
 * flight (a second answer, or one for a tag never issued) fails it at
 * once, and it finishes only when nothing is in flight, so a lost answer
 * shows as a process that never finishes. The main thread keeps a third
 * of them alive at a time (a new one usually takes the slot of the one
 * just collected) and terminates a random tenth while they work.
 *
 * Afterwards: no process failed; the survivors finished DONE; the loops
 * hold nothing; every family ran; the server saw every connection it
 * accepted closed by the engine (connections are closed when their
 * process ends, terminated or not); the count of open fds is what it was
 * before the engine started; and under ASan nothing leaked.
 *
 * net: one conversation at a time per process, one of
 *   echo      connect, write a line, read it back (delimiter), close;
 *   timeout   connect, a read with a 1-3 ms yield timeout while nothing
 *             was written (must time out), then write a line and read it
 *             back whole: the timed-out read consumed nothing and left the
 *             connection usable;
 *   race      connect, write, a delimiter read with a 1-3 ms yield
 *             timeout that may or may not win; after a timeout another
 *             read gets the whole line;
 *   open      connect and write, then leave the connection for the end
 *             of the process to close;
 *   http      net.http GET (sometimes with timeout_ms) for a fixed reply;
 *   refused   connect to a port where nothing listens: -ECONNREFUSED.
 *
 * Negative controls (done once, in a scratch copy of engine/io/): with
 * io answers sent to the slot's current generation instead of the op's,
 * the case fails 3 runs of 3 ("an answer for tag 4294967297, which is
 * not in flight": process 0's answer reaches process 10 in its slot);
 * with no cancel when a process finishes, it fails with 1756 ops and
 * handles left on the loops.
 *
 * Sizes: 600 processes x 12 rounds on 2 workers and 2 loops (about 4 s);
 * 400 x 10 under sanitizers (about 10 s under TSan on 2 loaded cores).
 * Subprocesses are about 1 yield in 40 (they cost ~1 ms each).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <stepx/stepx.h>

#include "tests/support/support.h"
#include "tests/support/tsan_fd.h"

#ifdef SX_TEST_SANITIZED
#define N_PROCS 400
#define ROUNDS 10
#else
#define N_PROCS 600
#define ROUNDS 12
#endif

#define WAIT_MS 60000
#define LIVE (N_PROCS / 3) /* processes alive at a time, at most */
#define CMD_LATER 300      /* answered by a helper thread after 0-2 ms */
#define MAX_FLIGHT 16      /* yields in flight per process, at most */

static char tmpdir[64];

/* ---- the loopback server: one thread, poll(2), non-blocking sockets ----
 *
 * A connection whose first bytes are "GET " gets a fixed HTTP response and
 * is closed; any other is echoed. The server closes its end when the
 * engine closes its own (EOF or an error), and counts accepted and closed
 * connections. Written by the server thread only, except `stop` (the
 * test's) and the counters (read by the test). */

#define SRV_CONNS 2048
#define SRV_BUF 4096

static const char http_reply[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                 "Connection: close\r\n\r\nok";

typedef struct {
    int fd;
    bool http, flushed_close; /* close once out is written */
    size_t in_len, out_len;
    char in[SRV_BUF], out[SRV_BUF];
} srv_conn;

static struct {
    int lfd, wake[2];
    uint16_t port, refused_port;
    int refused_fd; /* bound, never listening: connects are refused */
    pthread_t thread;
    srv_conn *conns[SRV_CONNS];
    int n;
    /* Connections accepted, and those the engine ended (EOF or an error;
     * not those the server closes when it stops). relaxed: the test polls
     * them only as a progress hint, and checks them after joining the
     * server thread (the join orders them). */
    atomic_int accepted, ended;
} srv;

/* Closes connection i; `ended`: the engine ended it. */
static void srv_drop(int i, bool ended)
{
    close(srv.conns[i]->fd);
    free(srv.conns[i]);
    srv.conns[i] = srv.conns[--srv.n];
    /* relaxed: see the struct. */
    if (ended)
        atomic_fetch_add_explicit(&srv.ended, 1, memory_order_relaxed);
}

/* Has the request head ended ("\r\n\r\n")? */
static bool head_ended(const char *p, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i++)
        if (memcmp(p + i, "\r\n\r\n", 4) == 0)
            return true;
    return false;
}

/* Reads what there is; false when the connection is done with. */
static bool srv_in(srv_conn *c)
{
    if (c->in_len + c->out_len >= SRV_BUF)
        return true; /* full: wait for the writes (POLLIN is off) */
    size_t room = SRV_BUF - (c->in_len > c->out_len ? c->in_len : c->out_len);
    ssize_t k = recv(c->fd, c->in + c->in_len, room, 0);
    if (k < 0)
        return errno == EAGAIN || errno == EINTR;
    if (k == 0)
        return false; /* EOF: the engine closed its end */
    c->in_len += (size_t)k;
    if (c->in_len >= 4 && memcmp(c->in, "GET ", 4) == 0)
        c->http = true;
    if (c->http) {
        if (!c->flushed_close && c->out_len == 0 &&
            head_ended(c->in, c->in_len)) {
            memcpy(c->out, http_reply, sizeof http_reply - 1);
            c->out_len = sizeof http_reply - 1;
            c->flushed_close = true;
        }
        if (c->in_len == SRV_BUF)
            return false; /* not a request we understand */
        return true;
    }
    memcpy(c->out + c->out_len, c->in, c->in_len); /* echo */
    c->out_len += c->in_len;
    c->in_len = 0;
    return true;
}

/* Writes what it can; false when the connection is done with. */
static bool srv_out(srv_conn *c)
{
    while (c->out_len > 0) {
        ssize_t k = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);
        if (k < 0)
            return errno == EAGAIN || errno == EINTR;
        memmove(c->out, c->out + k, c->out_len - (size_t)k);
        c->out_len -= (size_t)k;
    }
    if (c->flushed_close) {
        shutdown(c->fd, SHUT_WR); /* the body ends with the connection */
        c->flushed_close = false;
    }
    return true;
}

static void *srv_main(void *arg)
{
    (void)arg;
    static struct pollfd pf[SRV_CONNS + 2];
    for (;;) {
        pf[0] = (struct pollfd){ .fd = srv.wake[0], .events = POLLIN };
        pf[1] = (struct pollfd){ .fd = srv.lfd, .events = POLLIN };
        for (int i = 0; i < srv.n; i++) {
            srv_conn *c = srv.conns[i];
            short ev = c->in_len + c->out_len < SRV_BUF ? POLLIN : 0;
            pf[2 + i] = (struct pollfd){
                .fd = c->fd,
                .events = (short)(ev | (c->out_len > 0 ? POLLOUT : 0))
            };
        }
        int n = srv.n;
        if (poll(pf, (nfds_t)n + 2, -1) < 0) {
            CHECK(errno == EINTR);
            continue;
        }
        if (pf[0].revents != 0)
            break;
        /* Backwards, so that srv_drop's swap with the last one only moves
         * a connection already handled. */
        for (int i = n - 1; i >= 0; i--) {
            short re = pf[2 + i].revents;
            if (re == 0)
                continue;
            srv_conn *c = srv.conns[i];
            bool ok = true;
            if (re & (POLLIN | POLLHUP | POLLERR))
                ok = srv_in(c);
            if (ok)
                ok = srv_out(c);
            if (!ok)
                srv_drop(i, true);
        }
        if (pf[1].revents & POLLIN) {
            int fd = accept(srv.lfd, NULL, NULL);
            if (fd >= 0) {
                CHECK(srv.n < SRV_CONNS);
                CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
                srv_conn *c = calloc(1, sizeof *c);
                CHECK(c != NULL);
                c->fd = fd;
                srv.conns[srv.n++] = c;
                /* relaxed: see the struct. */
                atomic_fetch_add_explicit(&srv.accepted, 1,
                                          memory_order_relaxed);
            }
        }
    }
    while (srv.n > 0)
        srv_drop(srv.n - 1, false);
    return NULL;
}

static uint16_t bound_port(int fd)
{
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    CHECK(getsockname(fd, (struct sockaddr *)&a, &l) == 0);
    return ntohs(a.sin_port);
}

static int loopback_socket(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    return fd;
}

static void srv_start(void)
{
    srv.lfd = loopback_socket();
    CHECK(listen(srv.lfd, 1024) == 0);
    srv.port = bound_port(srv.lfd);
    srv.refused_fd = loopback_socket();
    srv.refused_port = bound_port(srv.refused_fd);
    CHECK(pipe(srv.wake) == 0);
    CHECK(pthread_create(&srv.thread, NULL, srv_main, NULL) == 0);
}

static void srv_stop(void)
{
    CHECK(write(srv.wake[1], "x", 1) == 1);
    CHECK(pthread_join(srv.thread, NULL) == 0);
    close(srv.wake[0]);
    close(srv.wake[1]);
    close(srv.lfd);
    close(srv.refused_fd);
}

/* ---- a user command answered from another thread ---- */

typedef struct later_job {
    sx_completer *done;
    struct later_job *next;
} later_job;

static pthread_mutex_t later_mu = PTHREAD_MUTEX_INITIALIZER;
static later_job *later_head; /* guarded by later_mu */
/* release/acquire: set after the engine stopped; the helper then answers
 * what is left and exits (the mutex orders the jobs themselves). */
static atomic_int later_quit;

static int cmd_later(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag, (void)args;
    later_job *j = malloc(sizeof(*j));
    if (j == NULL)
        return SX_ENOMEM;
    j->done = done;
    pthread_mutex_lock(&later_mu);
    j->next = later_head;
    later_head = j;
    pthread_mutex_unlock(&later_mu);
    return 0;
}

/* Answers queued jobs every 0-2 ms until told to quit (then drains). */
static void *later_main(void *arg)
{
    (void)arg;
    unsigned seed = 7;
    for (;;) {
        /* acquire: pairs with the release store in test_mix. */
        bool quit = atomic_load_explicit(&later_quit, memory_order_acquire);
        pthread_mutex_lock(&later_mu);
        later_job *j = later_head;
        later_head = NULL;
        pthread_mutex_unlock(&later_mu);
        while (j != NULL) {
            later_job *next = j->next;
            uint8_t b[SX_PAYLOAD_INT_MAX];
            sx_complete(j->done, sx_payload_int(b, 7), 0, NULL);
            free(j);
            j = next;
        }
        if (quit)
            break;
        seed = seed * 1103515245u + 12345u;
        struct timespec ts = { 0, (long)((seed >> 8) % 2000000) };
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* ---- the stressor ---- */

enum {
    K_SLEEP,
    K_SLEEP_TIMEOUT,
    K_TIMER,
    K_FS,
    K_EXEC,
    K_SELF_SEND,
    K_SPAWN_WAIT,
    K_NET,
    K_LATER,
    K_KINDS
};

/* net conversations (see the file comment) and their phases */
enum { V_ECHO, V_TIMEOUT, V_RACE, V_OPEN, V_HTTP, V_REFUSED, V_KINDS };
enum {
    P_NONE,
    P_CONNECT,
    P_PROBE, /* V_TIMEOUT's read that must time out */
    P_WRITE,
    P_READ,
    P_REREAD, /* V_RACE's read after its timed-out one */
    P_CLOSE,
    P_HTTP
};

typedef struct {
    uint64_t tag;
    int kind;
} flight;

typedef struct {
    uint64_t rng;
    int64_t id;
    int round;
    uint64_t next_tag;
    flight fl[MAX_FLIGHT]; /* yields in flight */
    int n_fl;
    int net_v, net_phase;
    int64_t conn;
    int self_msgs_expected, self_msgs_got;
    sx_pid self;
    uint64_t answers;
    sx_pack pk;
} st_t;

/* Counters by kind. relaxed: figures, read by the main thread after
 * sx_engine_wait has returned for every process (the outcome store's
 * mutex orders them). */
static atomic_int kinds_done[K_KINDS];
static atomic_int net_done[V_KINDS];
static atomic_int race_timeouts;

static void count(atomic_int *c)
{
    /* relaxed: see above. */
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static int counted(atomic_int *c)
{
    /* relaxed: see above. */
    return atomic_load_explicit(c, memory_order_relaxed);
}

static uint64_t rnd(st_t *s)
{
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return s->rng;
}

static int st_init(void *st, const sx_init_ctx *c, const char *m,
                   const sx_payload *in, size_t n)
{
    (void)m;
    st_t *s = st;
    if (n != 1 || sx_payload_get_int(in[0], &s->id) != 0)
        return SX_EINVAL;
    s->rng = 0x9e3779b97f4a7c15u ^ (uint64_t)(s->id + 1) * 0x100000001b3u;
    s->self = sx_init_pid(c);
    /* Tags are unique across processes too (the id in the upper half), so
     * that an answer meant for another process (say, the previous
     * occupant of this slot) can never pass for one of ours. */
    s->next_tag = ((uint64_t)(s->id + 1) << 32) | 1;
    sx_pack_init(&s->pk);
    return 0;
}

static void st_close(void *st)
{
    st_t *s = st;
    sx_pack_fini(&s->pk);
}

static int child_init(void *st, const sx_init_ctx *c, const char *m,
                      const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

static int child_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(b, 42));
    return 0;
}

/* Yields cmd with a new tag (and a timeout when > 0) and records it as
 * in flight for `kind`. 0, or an error that fails the step. */
static int put(st_t *s, sx_step_output *out, int kind, uint16_t cmd,
               sx_payload args, int64_t timeout)
{
    if (s->n_fl == MAX_FLIGHT)
        return SX_ELIMIT; /* not reached: at most ~4 are in flight */
    uint64_t tag = s->next_tag++;
    int rc = timeout > 0 ? sx_yield_timeout(out, cmd, tag, args, timeout)
                         : sx_yield(out, cmd, tag, args);
    if (rc != 0)
        return rc;
    s->fl[s->n_fl++] = (flight){ tag, kind };
    return 0;
}

/* Takes tag off the in-flight list: its kind, or -1 when it was not in
 * flight (a second answer, or an answer for a tag never issued). */
static int take(st_t *s, uint64_t tag)
{
    for (int i = 0; i < s->n_fl; i++) {
        if (s->fl[i].tag == tag) {
            int kind = s->fl[i].kind;
            s->fl[i] = s->fl[--s->n_fl];
            return kind;
        }
    }
    return -1;
}

static sx_payload pk_done(st_t *s)
{
    return sx_pack_payload(&s->pk);
}

/* ---- net conversations ---- */

static void net_line(st_t *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "ping %lld %d\n", (long long)s->id, s->round);
}

static int net_put(st_t *s, sx_step_output *out, int phase, uint16_t cmd,
                   int64_t timeout)
{
    s->net_phase = phase;
    return put(s, out, K_NET, cmd, pk_done(s), timeout);
}

static int net_connect(st_t *s, sx_step_output *out)
{
    sx_pack *pk = &s->pk;
    sx_pack_reset(pk);
    s->net_v = (int)(rnd(s) % V_KINDS);
    if (s->net_v == V_HTTP) {
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/x", (int)srv.port);
        bool limit = rnd(s) % 2 == 0;
        sx_pack_map(pk, limit ? 2 : 1);
        sx_pack_str(pk, "url");
        sx_pack_str(pk, url);
        if (limit) {
            sx_pack_str(pk, "timeout_ms");
            sx_pack_int(pk, 20000);
        }
        return net_put(s, out, P_HTTP, SX_CMD_NET_HTTP, 0);
    }
    sx_pack_array(pk, 2);
    sx_pack_str(pk, "127.0.0.1");
    sx_pack_int(pk, s->net_v == V_REFUSED ? srv.refused_port : srv.port);
    return net_put(s, out, P_CONNECT, SX_CMD_NET_CONNECT, 0);
}

static int net_write(st_t *s, sx_step_output *out)
{
    char line[64];
    net_line(s, line, sizeof line);
    sx_pack_reset(&s->pk);
    sx_pack_array(&s->pk, 2);
    sx_pack_int(&s->pk, s->conn);
    sx_pack_str(&s->pk, line);
    return net_put(s, out, P_WRITE, SX_CMD_NET_WRITE, 0);
}

static int net_read(st_t *s, sx_step_output *out, int phase, int64_t timeout)
{
    sx_pack_reset(&s->pk);
    sx_pack_array(&s->pk, 3);
    sx_pack_int(&s->pk, s->conn);
    sx_pack_int(&s->pk, 64);
    sx_pack_str(&s->pk, "\n");
    return net_put(s, out, phase, SX_CMD_NET_READ, timeout);
}

static int net_close(st_t *s, sx_step_output *out)
{
    sx_pack_reset(&s->pk);
    sx_pack_int(&s->pk, s->conn);
    return net_put(s, out, P_CLOSE, SX_CMD_NET_CLOSE, 0);
}

/* The conversation is over. */
static int net_end(st_t *s)
{
    count(&net_done[s->net_v]);
    count(&kinds_done[K_NET]);
    s->net_phase = P_NONE;
    return 0;
}

/* Is v the echo of this round's line? */
static bool net_echoed(st_t *s, const sx_event *v)
{
    char line[64];
    const void *p;
    size_t len;
    sx_unpack u;
    net_line(s, line, sizeof line);
    sx_unpack_init(&u, v->data);
    return sx_unpack_bin(&u, &p, &len) == 0 && len == strlen(line) &&
           memcmp(p, line, len) == 0;
}

static bool http_ok(const sx_event *v)
{
    sx_unpack u;
    uint32_t n;
    int64_t status = 0;
    const void *body = NULL;
    size_t body_len = 0;
    sx_unpack_init(&u, v->data);
    if (sx_unpack_map(&u, &n) != 0)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        if (sx_unpack_str(&u, &k, &kl) != 0)
            return false;
        if (kl == 6 && memcmp(k, "status", 6) == 0) {
            if (sx_unpack_int(&u, &status) != 0)
                return false;
        } else if (kl == 4 && memcmp(k, "body", 4) == 0) {
            if (sx_unpack_bin(&u, &body, &body_len) != 0)
                return false;
        } else if (sx_unpack_skip(&u) != 0) {
            return false;
        }
    }
    return status == 200 && body_len == 2 && memcmp(body, "ok", 2) == 0;
}

/* The next step of the conversation after the answer v. Returns 0, or a
 * message that fails the process. */
static const char *net_next(st_t *s, sx_step_output *out, const sx_event *v)
{
    int err = v->error;
    int64_t ms = 1 + (int64_t)(rnd(s) % 3);
    switch (s->net_phase) {
    case P_HTTP:
        if (err != 0 || !http_ok(v))
            return "net.http: not the reply";
        net_end(s);
        return NULL;
    case P_CONNECT:
        if (s->net_v == V_REFUSED) {
            if (err != -ECONNREFUSED)
                return "net.connect: not refused";
            net_end(s);
            return NULL;
        }
        if (err != 0 || sx_payload_get_int(v->data, &s->conn) != 0)
            return "net.connect failed";
        if (s->net_v == V_TIMEOUT)
            return net_read(s, out, P_PROBE, ms) ? "yield" : NULL;
        return net_write(s, out) ? "yield" : NULL;
    case P_PROBE:
        if (err != SX_ETIMEDOUT)
            return "net.read: answered with nothing written";
        return net_write(s, out) ? "yield" : NULL;
    case P_WRITE:
        if (err != 0)
            return "net.write failed";
        if (s->net_v == V_OPEN) {
            net_end(s); /* the connection stays open: the finish closes */
            return NULL;
        }
        return net_read(s, out, P_READ, s->net_v == V_RACE ? ms : 0) ? "yield"
                                                                     : NULL;
    case P_READ:
    case P_REREAD:
        if (err == SX_ETIMEDOUT && s->net_v == V_RACE &&
            s->net_phase == P_READ) {
            count(&race_timeouts);
            return net_read(s, out, P_REREAD, 0) ? "yield" : NULL;
        }
        if (err != 0 || !net_echoed(s, v))
            return "net.read: not the line written";
        return net_close(s, out) ? "yield" : NULL;
    case P_CLOSE:
        if (err != 0)
            return "net.close failed";
        net_end(s);
        return NULL;
    }
    return "net: an answer out of turn";
}

/* ---- the other kinds ---- */

static int issue(st_t *s, sx_step_output *out, int kind)
{
    sx_pack *pk = &s->pk;
    sx_pack_reset(pk);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    switch (kind) {
    case K_SLEEP:
        return put(s, out, kind, SX_CMD_SLEEP,
                   sx_payload_int(b, (int64_t)(rnd(s) % 4)), 0);
    case K_SLEEP_TIMEOUT:
        return put(s, out, kind, SX_CMD_SLEEP,
                   sx_payload_int(b, 1 + (int64_t)(rnd(s) % 4)),
                   1 + (int64_t)(rnd(s) % 4));
    case K_TIMER:
        return put(s, out, kind, SX_CMD_TIMER_START,
                   sx_payload_int(b, (int64_t)(rnd(s) % 3)), 0);
    case K_FS: {
        char path[128];
        snprintf(path, sizeof path, "%s/f%lld", tmpdir, (long long)s->id);
        sx_pack_array(pk, 2);
        sx_pack_str(pk, path);
        sx_pack_str(pk, "some bytes for the file");
        return put(s, out, kind, SX_CMD_FS_WRITE, pk_done(s), 0);
    }
    case K_EXEC:
        sx_pack_map(pk, 1);
        sx_pack_str(pk, "argv");
        sx_pack_array(pk, 2);
        sx_pack_str(pk, "echo");
        sx_pack_str(pk, "hi");
        return put(s, out, kind, SX_CMD_EXEC, pk_done(s), 0);
    case K_SELF_SEND:
        sx_pack_array(pk, 3);
        sx_pack_pid(pk, s->self);
        sx_pack_str(pk, "self");
        sx_pack_int(pk, s->self_msgs_expected++);
        return put(s, out, kind, SX_CMD_SEND, pk_done(s), 0);
    case K_SPAWN_WAIT:
        sx_pack_array(pk, 3);
        sx_pack_str(pk, "child");
        sx_pack_str(pk, "run");
        sx_pack_array(pk, 0);
        return put(s, out, kind, SX_CMD_SPAWN_WAIT, pk_done(s), 0);
    case K_NET:
        if (s->net_phase != P_NONE)
            return put(s, out, K_SLEEP, SX_CMD_SLEEP, sx_payload_int(b, 0), 0);
        return net_connect(s, out);
    case K_LATER:
        return put(s, out, kind, CMD_LATER, (sx_payload){ NULL, 0 }, 0);
    }
    return SX_EINVAL;
}

/* One answer. Returns NULL, or a message that fails the process. */
static const char *answer(st_t *s, sx_step_output *out, const sx_event *v,
                          char *m, size_t cap)
{
    int kind = take(s, v->tag);
    if (kind < 0) {
        snprintf(m, cap, "an answer for tag %llu, which is not in flight",
                 (unsigned long long)v->tag);
        return m;
    }
    s->answers++;
    if (kind == K_NET)
        return net_next(s, out, v);
    if (v->error != 0 &&
        !(kind == K_SLEEP_TIMEOUT && v->error == SX_ETIMEDOUT)) {
        snprintf(m, cap, "kind %d answered %s: %s", kind, sx_errname(v->error),
                 v->error_msg);
        return m;
    }
    if (kind == K_TIMER) { /* a timer handle: wait for it to fire */
        int64_t h = 0;
        uint8_t b[SX_PAYLOAD_INT_MAX];
        if (sx_payload_get_int(v->data, &h) != 0)
            return "timer-start: no handle";
        /* Its answer is plain nil, like a sleep's; counted as a timer. */
        if (put(s, out, K_SLEEP, SX_CMD_TIMER_WAIT, sx_payload_int(b, h), 0))
            return "yield";
    }
    count(&kinds_done[kind]);
    return NULL;
}

static int st_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    st_t *s = st;
    char m[200];
    for (size_t i = 0; i < n; i++) {
        const sx_event *v = &ev[i];
        if (v->type == SX_EVENT_MESSAGE) {
            if (strcmp(v->topic, "self") == 0) {
                int64_t k = -1;
                sx_payload_get_int(v->data, &k);
                if (k != s->self_msgs_got) {
                    sx_fail(out, "self messages out of order");
                    return 0;
                }
                s->self_msgs_got++;
            }
            continue; /* @cancel from stop: ignored */
        }
        const char *bad = answer(s, out, v, m, sizeof m);
        if (bad != NULL) {
            sx_fail(out, bad);
            return 0;
        }
    }
    if (s->n_fl > 0 || s->net_phase != P_NONE) {
        sx_wait(out);
        return 0;
    }
    if (s->round == ROUNDS) {
        if (s->self_msgs_got != s->self_msgs_expected) {
            sx_wait(out); /* self messages still on their way */
            return 0;
        }
        uint8_t b[SX_PAYLOAD_INT_MAX];
        sx_done(out, sx_payload_int(b, (int64_t)s->answers));
        return 0;
    }
    s->round++;
    int k = 1 + (int)(rnd(s) % 3);
    for (int i = 0; i < k; i++) {
        int kind = (int)(rnd(s) % K_KINDS);
        if (kind == K_EXEC && rnd(s) % 12 != 0)
            kind = K_SLEEP; /* subprocesses are dear: 1 in ~40 */
        int rc = issue(s, out, kind);
        if (rc != 0)
            return rc;
    }
    sx_wait(out);
    return 0;
}

/* Waits for process i and counts its outcome (DONE or terminated; any
 * other fails the case). */
static void collect(sx_engine *e, sx_pid pid, int i, int *done, int *term)
{
    sx_result r;
    int rc = sx_engine_wait(e, pid, WAIT_MS, &r);
    if (rc == SX_ETIMEDOUT)
        SX_FAILF("process %d did not finish in %d ms (an answer lost?)", i,
                 WAIT_MS);
    CHECK_RC(rc, 0);
    if (r.error == SX_ETERMINATED)
        (*term)++;
    else if (r.error == 0)
        (*done)++;
    else
        SX_FAILF("process %d failed: %s (%s)", i, r.error_msg,
                 sx_errname(r.error));
    sx_result_free(&r);
}

static void test_mix(void)
{
    tx_mkdtemp(tmpdir, sizeof tmpdir, "stepx-io-stress-");
    /* libuv keeps a few fds per process once a loop has existed (a global
     * pipe for signals): let them be made before the baseline. */
    {
        sx_engine *w = tx_engine_up(NULL, NULL, 0);
        tx_engine_stop(w, 0);
        sx_engine_free(w);
    }
    tx_tsan_fd_warm(); /* see tests/support/tsan_fd.h */
    int fds_before = tx_count_fds();
    srv_start();
    pthread_t later;
    CHECK(pthread_create(&later, NULL, later_main, NULL) == 0);

    sx_engine_config cfg = { .workers = 2, .io_loops = 2 };
    const sx_process_type types[] = {
        { .name = "stress",
          .state_size = sizeof(st_t),
          .init = st_init,
          .step = st_step,
          .close = st_close },
        { .name = "child", .init = child_init, .step = child_step },
    };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, types, 2);
    tx_engine_command(e, CMD_LATER, "later", cmd_later, NULL);
    tx_engine_start(e);

    /* At most LIVE at a time: the next is submitted when the oldest has
     * been collected, so it usually takes the slot just freed, and
     * answers that went astray from one process to the next occupant of
     * its slot would show. A tenth of them are terminated while they
     * work, picked at random among those alive. */
    double t0 = sx_test_now_ms();
    static sx_pid pids[N_PROCS];
    uint64_t rng = 12345;
    int terminated = 0, done = 0, term = 0;
    for (int i = 0; i < N_PROCS + LIVE; i++) {
        if (i >= LIVE)
            collect(e, pids[i - LIVE], i - LIVE, &done, &term);
        if (i >= N_PROCS)
            continue;
        uint8_t b[SX_PAYLOAD_INT_MAX];
        sx_payload in = sx_payload_int(b, i);
        CHECK_RC(sx_engine_submit(e, "stress", "run", &in, 1, &pids[i]), 0);
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        if (rng % 10 == 0) {
            int lo = i >= LIVE ? i - LIVE + 1 : 0;
            int k = lo + (int)(rng / 10 % (uint64_t)(i - lo + 1));
            struct timespec ts = { 0, (long)(rng % 1000000) };
            nanosleep(&ts, NULL);
            if (sx_engine_terminate(e, pids[k]) == 0)
                terminated++;
        }
    }
    double t1 = sx_test_now_ms();
    CHECK_EQ_INT(done + term, N_PROCS);
    CHECK(term <= terminated);
    CHECK(term > 0); /* the terminates did land on running processes */
    /* Every process has finished: the loops must empty (the connections
     * left open are closed, the timers stopped, ...). */
    sx_engine_stats st;
    double end = sx_test_now_ms() + WAIT_MS;
    do {
        CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
        if (sx_test_now_ms() > end)
            SX_FAILF("%llu ops and handles still on the loops",
                     (unsigned long long)st.io_inflight);
        sched_yield();
    } while (st.io_inflight != 0);
    printf("# %d done, %d terminated in %.0f ms; answers by kind:", done, term,
           t1 - t0);
    for (int k = 0; k < K_KINDS; k++)
        printf(" %d", counted(&kinds_done[k]));
    printf("; net by conversation:");
    for (int v = 0; v < V_KINDS; v++)
        printf(" %d", counted(&net_done[v]));
    printf(" (race timeouts %d); yield timeouts %llu\n",
           counted(&race_timeouts), (unsigned long long)st.timeouts);
    for (int k = 0; k < K_KINDS; k++)
        CHECK(counted(&kinds_done[k]) > 0); /* every family ran */
    for (int v = 0; v < V_KINDS; v++)
        CHECK(counted(&net_done[v]) > 0); /* every conversation ran */

    CHECK_RC(sx_engine_stop(e, 2000), 0);
    /* release: pairs with the acquire in later_main. */
    atomic_store_explicit(&later_quit, 1, memory_order_release);
    CHECK(pthread_join(later, NULL) == 0);
    sx_engine_free(e);
    /* The engine closed every connection it made: the server sees each
     * one end (EOF, or a reset when unread bytes were pending). */
    end = sx_test_now_ms() + WAIT_MS;
    while (counted(&srv.ended) != counted(&srv.accepted) &&
           sx_test_now_ms() < end)
        tx_sleep_ms(5);
    srv_stop();
    CHECK_EQ_INT(counted(&srv.ended), counted(&srv.accepted));
    CHECK(counted(&srv.accepted) > 0);
    CHECK_EQ_INT(tx_count_fds(), fds_before);
    for (int i = 0; i < N_PROCS; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/f%d", tmpdir, i);
        unlink(path);
    }
    CHECK(rmdir(tmpdir) == 0);
}

static const sx_test_case cases[] = {
    { "mix", test_mix },
};

SX_TEST_MAIN(cases)

/* tests/relay/test_fault.c — the relay server's accept without memory,
 * reached with allocations that fail on cue (process/fault.h; this test
 * links the stepx_fault build of the library).
 *
 * libuv hands the server one connection at a time: until the connection
 * callback takes it off the listener (uv_accept), the listener stops
 * polling, and no later client is ever accepted. So a connection the
 * server has no memory for must still be taken and closed.
 *
 * Properties:
 *  - no_conn: with no memory for a connection record, every client (Unix
 *    socket and TCP) is refused cleanly (it reads end of file at once,
 *    nothing is counted accepted), and once memory is back the next
 *    client on each listener is accepted and served.
 *  - no_refuse: the same with no memory for the handle that takes a
 *    refused connection off its listener either; 8 clients at once on
 *    each listener, so that refusals queue behind the one being closed.
 *    (A connection left on the listener would make the first client wait
 *    for ever, and every later one.)
 *
 *  - socket_link: the Unix socket listens at "PATH.new" before it is
 *    linked at PATH (docs/RELAY.md, Listening). At that moment (the hook
 *    SX__HOOK_RELAY_LINK) a client already connects to PATH.new. A
 *    regular file another program makes at PATH then is kept and start
 *    answers -EEXIST; a live socket made there is kept (still answers)
 *    and start answers -EADDRINUSE; each leaves no PATH.new and no lock
 *    file, and the next start succeeds. PATH.new taken away then (the
 *    link fails with ENOENT, as where links cannot be made) has the
 *    server bind at PATH itself, and it serves.
 *
 * Each case checks that its fault sites failed (or its hook ran), so that
 * a build where they are not reached cannot pass it.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stepx/relay.h>

#include "process/fault.h"
#include "tests/support/harness.h"

#include "tests/relay/relay_fixture.h"

#define N_AT_ONCE 8

static int raw_connect_tcp(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_RC(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Opens n raw clients on the Unix socket (tcp 0) or on TCP, all before
 * reading, then checks that each is closed by the server within 5 s
 * without a byte. */
static void refused_all(const fixture *f, bool tcp, int n)
{
    int fds[N_AT_ONCE];
    CHECK(n <= N_AT_ONCE);
    for (int i = 0; i < n; i++)
        fds[i] =
            tcp ? raw_connect_tcp(sx_server_port(f->s)) : raw_connect(f->path);
    for (int i = 0; i < n; i++) {
        uint8_t b;
        int rc = raw_read_n(fds[i], &b, 1, 5000);
        if (rc != 1)
            SX_FAILF("%s client %d of %d: %s", tcp ? "TCP" : "Unix", i, n,
                     rc < 0 ? "not refused within 5 s (left pending)"
                            : "got a byte instead of a refusal");
        close(fds[i]);
    }
}

/* A client on addr is accepted and served (within 5 s each). */
static void served(const char *addr)
{
    sx_client *c = NULL;
    int rc = sx_client_connect(addr, NULL, 5000, &c);
    if (rc != 0)
        SX_FAILF("connect %s after the fault: %s (%s)", addr, sx_strerror(rc),
                 sx_errname(rc));
    square_ok(c, 7, 5000);
    sx_client_close(c);
}

static void run_case(unsigned sites, int at_once)
{
    fixture f;
    fx_up_tcp(&f);
    uint64_t conn0 = sx__fault_hits(SX__FAULT_RELAY_CONN);
    uint64_t ref0 = sx__fault_hits(SX__FAULT_RELAY_REFUSE);
    sx__fault_arm(sites);
    for (int round = 0; round < 3; round++) {
        refused_all(&f, false, at_once);
        refused_all(&f, true, at_once);
    }
    sx__fault_arm(0);
    CHECK(sx__fault_hits(SX__FAULT_RELAY_CONN) - conn0 >=
          (uint64_t)(6 * at_once));
    if (sites & SX__FAULT_RELAY_REFUSE)
        CHECK(sx__fault_hits(SX__FAULT_RELAY_REFUSE) - ref0 >=
              (uint64_t)(6 * at_once));
    sx_server_stats st;
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.accepted, 0);
    served(f.unix_addr);
    served(f.tcp_addr);
    sx_server_stats_get(f.s, &st);
    CHECK_EQ_U64(st.accepted, 2);
    fx_down(&f);
}

static void test_no_conn(void)
{
    run_case(SX__FAULT_RELAY_CONN, 1);
    run_case(SX__FAULT_RELAY_CONN, N_AT_ONCE);
}

static void test_no_refuse(void)
{
    run_case(SX__FAULT_RELAY_CONN | SX__FAULT_RELAY_REFUSE, 1);
    run_case(SX__FAULT_RELAY_CONN | SX__FAULT_RELAY_REFUSE, N_AT_ONCE);
}

/* What the link hook does: 'f' a regular file at PATH, 's' a listening
 * socket at PATH (its fd in peer), 'r' removes PATH.new. Every call
 * checks that PATH.new accepts a connection. */
typedef struct {
    const char *path, *aside;
    char what;
    int calls, peer;
} link_hook;

static void on_link(void *arg, size_t n)
{
    (void)n;
    link_hook *h = arg;
    h->calls++;
    CHECK_RC(unix_try_connect(h->aside), 0);
    if (h->what == 'f') {
        int fd = open(h->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        CHECK(fd >= 0);
        close(fd);
    } else if (h->what == 's') {
        h->peer = unix_bound(h->path, true);
    } else {
        CHECK_RC(unlink(h->aside), 0);
    }
}

static void test_socket_link(void)
{
    fixture f;
    fx_up(&f);
    sx_server_stop(f.s);
    f.s = NULL;
    char aside[160], lock[160];
    snprintf(aside, sizeof(aside), "%s.new", f.path);
    snprintf(lock, sizeof(lock), "%s.lock", f.path);
    sx_server_config sc = { .socket_path = f.path };
    struct stat st;
    const char whats[] = { 'f', 's', 'r' };
    for (size_t i = 0; i < sizeof(whats); i++) {
        link_hook h = {
            .path = f.path, .aside = aside, .what = whats[i], .peer = -1
        };
        sx__fault_hook_set(SX__HOOK_RELAY_LINK, on_link, &h);
        int rc = sx_server_start(f.e, &sc, &f.s);
        sx__fault_hook_set(SX__HOOK_RELAY_LINK, NULL, NULL);
        CHECK_EQ_INT(h.calls, 1);
        CHECK(lstat(aside, &st) != 0);
        if (h.what == 'r') {
            CHECK_RC(rc, 0);
            CHECK_RC(lstat(f.path, &st), 0);
            CHECK(S_ISSOCK(st.st_mode));
            CHECK_EQ_INT(st.st_mode & 0777, 0600);
            served(f.unix_addr);
            sx_server_stop(f.s);
            f.s = NULL;
            CHECK(lstat(f.path, &st) != 0);
            continue;
        }
        f.s = rc == 0 ? f.s : NULL;
        CHECK_RC(rc, h.what == 'f' ? -EEXIST : -EADDRINUSE);
        CHECK(lstat(lock, &st) != 0);
        CHECK_RC(lstat(f.path, &st), 0);
        if (h.what == 'f') {
            CHECK(S_ISREG(st.st_mode));
        } else {
            CHECK(S_ISSOCK(st.st_mode));
            CHECK_RC(unix_try_connect(f.path), 0);
            close(h.peer);
        }
        CHECK_RC(unlink(f.path), 0);
        /* The next start, with nobody in the way, succeeds. */
        CHECK_RC(sx_server_start(f.e, &sc, &f.s), 0);
        served(f.unix_addr);
        sx_server_stop(f.s);
        f.s = NULL;
    }
    fx_down(&f);
}

static const sx_test_case cases[] = {
    { "no_conn", test_no_conn },
    { "no_refuse", test_no_refuse },
    { "socket_link", test_socket_link },
};

SX_TEST_MAIN(cases)

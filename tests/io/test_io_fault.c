/* tests/io/test_io_fault.c — out of memory in the fs, net.http and exec
 * commands (engine/commands/fs.c, engine/commands/http.c,
 * engine/commands/exec.c), reached with allocations that fail on cue
 * (process/fault.h; this test links the stepx_fault build of the library).
 *
 * Every case yields one command from a process of type "one" and checks
 * the answer: SX_ENOMEM with a message, no fd left open (counted with
 * poll(2), as tests/io/test_fs.c does), nothing leaked (LeakSanitizer, in
 * the sanitizer builds), the answer within a bound well below the
 * command's own waits (no hang), and the same command working again once
 * memory is back. Each case checks that its site failed at least once, so
 * that a build where the site is not reached cannot pass it.
 *
 * Properties:
 *  - fs_read_buf: fs.read of a regular file with no buffer for its bytes.
 *  - fs_read_grow: fs.read of /dev/zero (size unknown: a buffer that
 *    grows) whose second, bigger buffer cannot be had; its fd is closed.
 *  - fs_list: fs.list with no room for the names array, or for a copy of
 *    any name, the last one included (whose scandir entry leaks unless
 *    the walk goes on to UV_EOF).
 *  - fs_req: open, lstat, scandir, unlink and the rmdir after an unlink of
 *    a directory each fail to copy their path (UV_ENOMEM); the directory
 *    is still there.
 *  - http: net.http with no room for the response head, the body, a
 *    joined header value, or a later growth of a 1 MiB body.
 *  - exec_out: exec whose stdout buffer cannot grow kills the child (in
 *    its grace period even when it ignores SIGTERM) and answers once it
 *    is reaped.
 *  - exec_args: each copy of exec's arguments (strings, argv, env, stdin)
 *    failing in turn answers SX_ENOMEM and starts no child.
 *
 * Threads: cases run one at a time on the main thread; steps on engine
 * workers; the HTTP server on a thread of its own.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <stepx/stepx.h>

#include "process/fault.h"
#include "tests/support/support.h"
#include "tests/support/tsan_fd.h"

#define ARGS_MAX 4096
#define WAIT_MS 20000

static char dir[64];

/* ---- the process: one yield, its answer as the DONE value ---- */

typedef struct {
    uint64_t cmd;
    size_t len;
    uint8_t args[ARGS_MAX];
    int k;
} one;

static int one_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    one *o = st;
    const void *p;
    sx_unpack u;
    if (n != 2)
        return SX_EINVAL;
    sx_unpack_init(&u, in[0]);
    if (sx_unpack_uint(&u, &o->cmd) != 0)
        return SX_EINVAL;
    sx_unpack_init(&u, in[1]);
    if (sx_unpack_bin(&u, &p, &o->len) != 0 || o->len > ARGS_MAX)
        return SX_EINVAL;
    memcpy(o->args, p, o->len);
    return 0;
}

/* DONE with [error, message or nil, result bytes]. */
static int one_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    one *o = st;
    if (o->k++ == 0)
        return sx_yield(out, (uint16_t)o->cmd, 1,
                        (sx_payload){ o->len ? o->args : NULL, o->len });
    if (n != 1 || ev[0].tag != 1) {
        sx_fail(out, "not one answer");
        return 0;
    }
    uint8_t b[512];
    sx_pack pk;
    sx_pack_init_fixed(&pk, b, sizeof b);
    sx_pack_array(&pk, 3);
    sx_pack_int(&pk, ev[0].error);
    if (ev[0].error_msg != NULL)
        sx_pack_strn(&pk, ev[0].error_msg,
                     strlen(ev[0].error_msg) < 400 ? strlen(ev[0].error_msg)
                                                   : 400);
    else
        sx_pack_nil(&pk);
    sx_pack_uint(&pk, ev[0].data.len);
    sx_done(out, sx_pack_payload(&pk));
    return 0;
}

static const sx_process_type types[] = {
    { .name = "one",
      .state_size = sizeof(one),
      .init = one_init,
      .step = one_step },
};

static void setup_dir(void);

static sx_engine *up(void)
{
    setup_dir();
    return tx_engine_up_workers(2, types, 1);
}

/* Disarms every site, stops e (a 5 s deadline) and frees it. */
static void down(sx_engine *e)
{
    sx__fault_arm(0);
    tx_engine_stop(e, 5000);
    sx_engine_free(e);
}

typedef struct {
    int err;
    char msg[512];
    uint64_t len; /* the result's bytes */
    double ms;    /* from submit to the outcome */
} answer;

/* Runs cmd with args (a packed payload) in a process of its own. */
static answer run(sx_engine *e, uint16_t cmd, sx_payload args)
{
    uint8_t cb[SX_PAYLOAD_INT_MAX], ab[ARGS_MAX + 8];
    sx_pack pk;
    sx_pack_init_fixed(&pk, ab, sizeof ab);
    CHECK_RC(
        sx_pack_bin(&pk, args.data ? (const void *)args.data : "", args.len),
        0);
    sx_payload in[2] = { sx_payload_int(cb, cmd), sx_pack_payload(&pk) };
    sx_pid pid;
    double t0 = sx_test_now_ms();
    CHECK_RC(sx_engine_submit(e, "one", "run", in, 2, &pid), 0);
    sx_result r;
    tx_wait_done(e, pid, WAIT_MS, &r);
    answer a = { 0 };
    a.ms = sx_test_now_ms() - t0;
    sx_unpack u;
    uint32_t n;
    int64_t err;
    sx_unpack_init(&u, r.value);
    CHECK_RC(sx_unpack_array(&u, &n), 0);
    CHECK_EQ_INT(n, 3);
    CHECK_RC(sx_unpack_int(&u, &err), 0);
    a.err = (int)err;
    if (sx_unpack_nil(&u) != 0) {
        const char *s;
        size_t sl;
        CHECK_RC(sx_unpack_str(&u, &s, &sl), 0);
        snprintf(a.msg, sizeof a.msg, "%.*s", (int)sl, s);
    }
    CHECK_RC(sx_unpack_uint(&u, &a.len), 0);
    sx_result_free(&r);
    return a;
}

/* One string as a payload, packed into buf. */
static sx_payload str_args(uint8_t *buf, size_t cap, const char *s)
{
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, cap);
    CHECK_RC(sx_pack_str(&pk, s), 0);
    return sx_pack_payload(&pk);
}

/* An SX_ENOMEM answer, with a message containing want. */
static void check_nomem(const answer *a, const char *want)
{
    if (a->err != SX_ENOMEM)
        SX_FAILF("answer %s (%s), want SX_ENOMEM", sx_errname(a->err), a->msg);
    if (a->msg[0] == 0 || strstr(a->msg, want) == NULL)
        SX_FAILF("message \"%s\", want one with \"%s\"", a->msg, want);
    CHECK(a->len == 0 || a->len == 1); /* nil at most */
}

static void put_file(const char *path, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (size_t i = 0; i < n; i++)
        CHECK(fputc((int)(i & 0xff), f) != EOF);
    CHECK(fclose(f) == 0);
}

/* ---- fs ---- */

static void test_fs_read_buf(void)
{
    sx_engine *e = up();
    char path[128];
    uint8_t b[256];
    snprintf(path, sizeof path, "%s/big", dir);
    put_file(path, 100000);
    int fds = tx_count_fds();
    uint64_t before = sx__fault_hits(SX__FAULT_FS_BUF);
    sx__fault_arm(SX__FAULT_FS_BUF);
    answer a = run(e, SX_CMD_FS_READ, str_args(b, sizeof b, path));
    sx__fault_arm(0);
    check_nomem(&a, "fs.read");
    CHECK(strstr(a.msg, path) != NULL);
    CHECK(sx__fault_hits(SX__FAULT_FS_BUF) > before);
    /* none left open (a socket of the count's own time may close since) */
    CHECK(tx_settle_fds(fds, 5000) <= fds);
    a = run(e, SX_CMD_FS_READ, str_args(b, sizeof b, path));
    CHECK_RC(a.err, 0);
    CHECK_EQ_U64(a.len, 100000 + 5);
    down(e);
}

static void test_fs_read_grow(void)
{
    sx_engine *e = up();
    uint8_t b[256];
    sx_pack pk;
    sx_pack_init_fixed(&pk, b, sizeof b);
    sx_pack_map(&pk, 2);
    sx_pack_str(&pk, "path");
    sx_pack_str(&pk, "/dev/zero");
    sx_pack_str(&pk, "max");
    sx_pack_int(&pk, 200000); /* > the first buffer's 64 KiB */
    int fds = tx_count_fds();
    uint64_t before = sx__fault_hits(SX__FAULT_FS_BUF);
    sx__fault_arm_after(SX__FAULT_FS_BUF, 1); /* the first buffer passes */
    answer a = run(e, SX_CMD_FS_READ, sx_pack_payload(&pk));
    sx__fault_arm(0);
    check_nomem(&a, "fs.read: /dev/zero");
    CHECK_EQ_U64(sx__fault_hits(SX__FAULT_FS_BUF) - before, 1);
    /* none left open (a socket of the count's own time may close since) */
    CHECK(tx_settle_fds(fds, 5000) <= fds);
    a = run(e, SX_CMD_FS_READ, sx_pack_payload(&pk));
    CHECK_RC(a.err, 0);
    CHECK_EQ_U64(a.len, 200000 + 5);
    down(e);
}

static void test_fs_list(void)
{
    sx_engine *e = up();
    char sub[128], path[192];
    uint8_t b[256];
    snprintf(sub, sizeof sub, "%s/list", dir);
    CHECK(mkdir(sub, 0755) == 0);
    static const char *const names[] = { "a", "b", "c" };
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", sub, names[i]);
        put_file(path, 1);
    }
    /* 0: the names array; 1: the first name's copy; 3: the last name's
     * copy (libuv 1.44's uv_fs_req_cleanup leaks the entry
     * uv_fs_scandir_next returned last when that was the final one). */
    for (unsigned pass = 0; pass < 4; pass++) {
        uint64_t before = sx__fault_hits(SX__FAULT_FS_BUF);
        sx__fault_arm_after(SX__FAULT_FS_BUF, pass);
        answer a = run(e, SX_CMD_FS_LIST, str_args(b, sizeof b, sub));
        sx__fault_arm(0);
        check_nomem(&a, "fs.list");
        CHECK(sx__fault_hits(SX__FAULT_FS_BUF) > before);
    }
    answer a = run(e, SX_CMD_FS_LIST, str_args(b, sizeof b, sub));
    CHECK_RC(a.err, 0);
    CHECK_EQ_U64(a.len, 7); /* ["a", "b", "c"] */
    down(e);
}

static void test_fs_req(void)
{
    sx_engine *e = up();
    char path[128], sub[128];
    uint8_t b[256];
    snprintf(path, sizeof path, "%s/req", dir);
    snprintf(sub, sizeof sub, "%s/reqdir", dir);
    put_file(path, 10);
    CHECK(mkdir(sub, 0755) == 0);
    int fds = tx_count_fds();
    static const struct {
        uint16_t cmd;
        const char *name;
    } cmds[] = {
        { SX_CMD_FS_READ, "fs.read" },   { SX_CMD_FS_STAT, "fs.stat" },
        { SX_CMD_FS_LIST, "fs.list" },   { SX_CMD_FS_REMOVE, "fs.remove" },
        { SX_CMD_FS_WRITE, "fs.write" }, { SX_CMD_FS_APPEND, "fs.append" },
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        sx_payload args;
        sx_pack pk;
        const char *p = cmds[i].cmd == SX_CMD_FS_LIST ? sub : path;
        if (cmds[i].cmd == SX_CMD_FS_WRITE || cmds[i].cmd == SX_CMD_FS_APPEND) {
            sx_pack_init_fixed(&pk, b, sizeof b);
            sx_pack_array(&pk, 2);
            sx_pack_str(&pk, p);
            sx_pack_str(&pk, "data");
            args = sx_pack_payload(&pk);
        } else {
            args = str_args(b, sizeof b, p);
        }
        uint64_t before = sx__fault_hits(SX__FAULT_FS_REQ);
        sx__fault_arm(SX__FAULT_FS_REQ);
        answer a = run(e, cmds[i].cmd, args);
        sx__fault_arm(0);
        check_nomem(&a, cmds[i].name);
        CHECK(strstr(a.msg, p) != NULL);
        CHECK_EQ_U64(sx__fault_hits(SX__FAULT_FS_REQ) - before, 1);
    }
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size == 10); /* untouched */
    /* The unlink passes (EISDIR), the rmdir after it cannot be made. */
    sx__fault_arm_after(SX__FAULT_FS_REQ, 1);
    answer a = run(e, SX_CMD_FS_REMOVE, str_args(b, sizeof b, sub));
    sx__fault_arm(0);
    check_nomem(&a, "fs.remove");
    CHECK(stat(sub, &st) == 0 && S_ISDIR(st.st_mode));
    /* none left open (a socket of the count's own time may close since) */
    CHECK(tx_settle_fds(fds, 5000) <= fds);
    a = run(e, SX_CMD_FS_REMOVE, str_args(b, sizeof b, sub));
    CHECK_RC(a.err, 0);
    CHECK(stat(sub, &st) != 0);
    down(e);
}

/* ---- net.http ---- */

static int srv_fd, srv_port;
/* The body's bytes in every response. relaxed (both sides): the main
 * thread sets it before it submits the request the server answers with
 * it, and the connection (through the kernel, which TSan does not see)
 * orders that store before the server's load after accept; atomic
 * because a server still sending the previous response, its client gone,
 * may be reading it while it changes. */
static _Atomic size_t srv_body;
static atomic_int srv_stop;
static pthread_t srv_thread;

static void serve_one(int c)
{
    size_t body = atomic_load_explicit(&srv_body, memory_order_relaxed);
    char req[8192];
    size_t got = 0;
    while (got < sizeof req - 1) {
        ssize_t r = recv(c, req + got, sizeof req - 1 - got, 0);
        if (r <= 0)
            return;
        got += (size_t)r;
        req[got] = 0;
        if (strstr(req, "\r\n\r\n") != NULL)
            break;
    }
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
                      "X-Twice: 1\r\nX-Twice: 2\r\n\r\n",
                      body);
    if (send(c, head, (size_t)hl, MSG_NOSIGNAL) != hl)
        return;
    static char chunk[65536];
    memset(chunk, 'b', sizeof chunk);
    for (size_t sent = 0; sent < body;) {
        size_t k = body - sent < sizeof chunk ? body - sent : sizeof chunk;
        ssize_t r = send(c, chunk, k, MSG_NOSIGNAL);
        if (r <= 0)
            return; /* the client gave up: fine */
        sent += (size_t)r;
    }
}

static void *serve(void *arg)
{
    (void)arg;
    /* relaxed: a stop flag polled every 20 ms; join orders the rest. */
    while (!atomic_load_explicit(&srv_stop, memory_order_relaxed)) {
        struct pollfd p = { srv_fd, POLLIN, 0 };
        if (poll(&p, 1, 20) <= 0)
            continue;
        int c = accept(srv_fd, NULL, NULL);
        if (c < 0)
            continue;
        serve_one(c);
        close(c);
    }
    return NULL;
}

static void srv_start(void)
{
    srv_fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(srv_fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(srv_fd, (struct sockaddr *)&a, sizeof a) == 0);
    socklen_t al = sizeof a;
    CHECK(getsockname(srv_fd, (struct sockaddr *)&a, &al) == 0);
    srv_port = ntohs(a.sin_port);
    CHECK(listen(srv_fd, 16) == 0);
    /* relaxed: pthread_create orders it before the server's loads. */
    atomic_store_explicit(&srv_stop, 0, memory_order_relaxed);
    CHECK(pthread_create(&srv_thread, NULL, serve, NULL) == 0);
}

static void srv_end(void)
{
    /* relaxed: only a flag; pthread_join orders the rest. */
    atomic_store_explicit(&srv_stop, 1, memory_order_relaxed);
    CHECK(pthread_join(srv_thread, NULL) == 0);
    close(srv_fd);
}

static sx_payload http_args(uint8_t *buf, size_t cap)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/x", srv_port);
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, cap);
    sx_pack_map(&pk, 1);
    sx_pack_str(&pk, "url");
    sx_pack_str(&pk, url);
    return sx_pack_payload(&pk);
}

static void test_http(void)
{
    srv_start();
    sx_engine *e = up();
    uint8_t b[256];
    sx_payload args = http_args(b, sizeof b);
    /* A first request makes what a loop makes once, before the count. */
    atomic_store_explicit(&srv_body, 10, memory_order_relaxed);
    CHECK_RC(run(e, SX_CMD_NET_HTTP, args).err, 0);
    int fds = tx_count_fds();
    /* 0: the head; 1: the body; 2 and 3: the result's header values
     * (content-length, then x-twice joined from its two fields). */
    atomic_store_explicit(&srv_body, 100, memory_order_relaxed);
    for (unsigned pass = 0; pass < 4; pass++) {
        uint64_t before = sx__fault_hits(SX__FAULT_HTTP_BODY);
        sx__fault_arm_after(SX__FAULT_HTTP_BODY, pass);
        answer a = run(e, SX_CMD_NET_HTTP, args);
        sx__fault_arm(0);
        check_nomem(&a, "net.http: 127.0.0.1:");
        CHECK(a.ms < 5000);
        CHECK(sx__fault_hits(SX__FAULT_HTTP_BODY) > before);
    }
    /* A 1 MiB body: its growth fails half way. */
    atomic_store_explicit(&srv_body, (size_t)1 << 20, memory_order_relaxed);
    sx__fault_arm_after(SX__FAULT_HTTP_BODY, 6);
    answer a = run(e, SX_CMD_NET_HTTP, args);
    sx__fault_arm(0);
    check_nomem(&a, "out of memory");
    /* none left open (a socket of the count's own time may close since) */
    CHECK(tx_settle_fds(fds, 5000) <= fds);
    a = run(e, SX_CMD_NET_HTTP, args);
    CHECK_RC(a.err, 0);
    CHECK(a.len > (size_t)1 << 20);
    down(e);
    srv_end();
}

/* ---- exec ---- */

static sx_payload exec_args(uint8_t *buf, size_t cap, const char *script,
                            int64_t grace_ms, bool env_stdin)
{
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, cap);
    sx_pack_map(&pk, env_stdin ? 4 : 2);
    sx_pack_str(&pk, "argv");
    sx_pack_array(&pk, 3);
    sx_pack_str(&pk, "/bin/sh");
    sx_pack_str(&pk, "-c");
    sx_pack_str(&pk, script);
    sx_pack_str(&pk, "grace_ms");
    sx_pack_int(&pk, grace_ms);
    if (env_stdin) {
        sx_pack_str(&pk, "env");
        sx_pack_map(&pk, 1);
        sx_pack_str(&pk, "PATH");
        sx_pack_str(&pk, "/usr/bin:/bin");
        sx_pack_str(&pk, "stdin");
        sx_pack_str(&pk, "in");
    }
    return sx_pack_payload(&pk);
}

static void test_exec_out(void)
{
    sx_engine *e = up();
    uint8_t b[512];
    /* A first child makes what a loop makes once, before the count. */
    CHECK_RC(run(e, SX_CMD_EXEC, exec_args(b, sizeof b, "true", 0, false)).err,
             0);
    int fds = tx_count_fds();
    /* The first 4 KiB buffer passes; the 8 KiB one cannot be had. */
    sx_payload args =
        exec_args(b, sizeof b, "head -c 1000000 /dev/zero", 10000, false);
    uint64_t before = sx__fault_hits(SX__FAULT_EXEC_OUT);
    sx__fault_arm_after(SX__FAULT_EXEC_OUT, 1);
    answer a = run(e, SX_CMD_EXEC, args);
    sx__fault_arm(0);
    check_nomem(&a, "exec: out of memory for stdout");
    CHECK(sx__fault_hits(SX__FAULT_EXEC_OUT) > before);
    CHECK(a.ms < 5000); /* SIGTERM ends head at once */
    /* A child that ignores SIGTERM and lives on: killed after grace_ms. */
    args = exec_args(b, sizeof b,
                     "trap '' TERM; head -c 100000 /dev/zero; sleep 30", 200,
                     false);
    sx__fault_arm_after(SX__FAULT_EXEC_OUT, 1);
    a = run(e, SX_CMD_EXEC, args);
    sx__fault_arm(0);
    check_nomem(&a, "exec: out of memory for stdout");
    CHECK(a.ms < 10000);
    /* none left open (a socket of the count's own time may close since) */
    CHECK(tx_settle_fds(fds, 5000) <= fds);
    a = run(e, SX_CMD_EXEC,
            args =
                exec_args(b, sizeof b, "head -c 100000 /dev/zero", 0, false));
    CHECK_RC(a.err, 0);
    CHECK(a.len > 100000);
    /* truncate with max_output 0: the first read of either stream needs
     * the buffer that output past the cap is dropped into, which cannot
     * be had; then it can. */
    sx_pack pk;
    sx_pack_init_fixed(&pk, b, sizeof b);
    sx_pack_map(&pk, 3);
    sx_pack_str(&pk, "argv");
    sx_pack_array(&pk, 3);
    sx_pack_str(&pk, "/bin/sh");
    sx_pack_str(&pk, "-c");
    sx_pack_str(&pk, "head -c 100000 /dev/zero");
    sx_pack_str(&pk, "max_output");
    sx_pack_int(&pk, 0);
    sx_pack_str(&pk, "truncate");
    sx_pack_bool(&pk, true);
    CHECK_RC(pk.err, 0);
    args = sx_pack_payload(&pk);
    before = sx__fault_hits(SX__FAULT_EXEC_OUT);
    sx__fault_arm_after(SX__FAULT_EXEC_OUT, 0);
    a = run(e, SX_CMD_EXEC, args);
    sx__fault_arm(0);
    check_nomem(&a, "exec: out of memory for std");
    CHECK(sx__fault_hits(SX__FAULT_EXEC_OUT) > before);
    a = run(e, SX_CMD_EXEC, args);
    CHECK_RC(a.err, 0);
    down(e);
}

static void test_exec_args(void)
{
    sx_engine *e = up();
    uint8_t b[512];
    char mark[128], script[256];
    snprintf(mark, sizeof mark, "%s/ran", dir);
    snprintf(script, sizeof script, "echo > %s", mark);
    CHECK_RC(run(e, SX_CMD_EXEC, exec_args(b, sizeof b, "true", 0, false)).err,
             0);
    sx_payload args = exec_args(b, sizeof b, script, 0, true);
    int fds = tx_count_fds();
    /* strs, argv, env, stdin: each one failing in turn. */
    for (unsigned pass = 0; pass < 4; pass++) {
        uint64_t before = sx__fault_hits(SX__FAULT_EXEC_ARGS);
        sx__fault_arm_after(SX__FAULT_EXEC_ARGS, pass);
        answer a = run(e, SX_CMD_EXEC, args);
        sx__fault_arm(0);
        check_nomem(&a, "");
        CHECK_EQ_U64(sx__fault_hits(SX__FAULT_EXEC_ARGS) - before, 1);
        struct stat st;
        CHECK(stat(mark, &st) != 0); /* no child ran */
    }
    /* none left open (a socket of the count's own time may close since) */
    CHECK(tx_settle_fds(fds, 5000) <= fds);
    answer a = run(e, SX_CMD_EXEC, args);
    CHECK_RC(a.err, 0);
    struct stat st;
    CHECK(stat(mark, &st) == 0);
    down(e);
}

static void cleanup(void)
{
    if (tx_rm_tree(dir) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Makes the cases' directory (once) before the first engine starts. */
static void setup_dir(void)
{
    if (dir[0] != 0)
        return;
    tx_mkdtemp(dir, sizeof dir, "sx_io_fault_");
    atexit(cleanup);
    tx_tsan_fd_warm();
}

static const sx_test_case cases[] = {
    { "fs_read_buf", test_fs_read_buf },
    { "fs_read_grow", test_fs_read_grow },
    { "fs_list", test_fs_list },
    { "fs_req", test_fs_req },
    { "http", test_http },
    { "exec_out", test_exec_out },
    { "exec_args", test_exec_args },
};

SX_TEST_MAIN(cases)

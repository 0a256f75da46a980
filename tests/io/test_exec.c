/* tests/io/test_exec.c — the exec family (SX_CMD_EXEC): output and exit
 * status, stdin, env and cwd, spawn failures, bad arguments, max_output
 * (killing, or truncating with `truncate`), the command's own timeout_ms and
 * grace_ms, per-yield timeouts, terminate and engine stop while children run,
 * the process-group clean-up, 64 concurrent children, and no leaked descriptor.
 *
 * A test process ("ex") runs the exec yields it was given one after the
 * other and finishes DONE with every answer, as [error, message, result];
 * the case reads them with sx_engine_wait. Children that must be killed
 * write their pid to a file first (`echo $$ > F; exec sleep 30`), so the
 * case can check with kill(pid, 0) that they are gone: ESRCH means dead
 * and reaped (a zombie still answers 0), so it also proves we left no
 * zombie. A grandchild (the child's own child) is reaped by init once its
 * parent died, in init's own time: for those the check accepts a zombie
 * whose parent is not this process. Upper time bounds are generous
 * (seconds); lower bounds are exact because timers never fire early.
 *
 * Threads: cases run one at a time on the main thread; steps run on the
 * engine's workers and only touch their own state.
 *
 * Descriptors and TSan: ThreadSanitizer treats a descriptor number as an
 * object, and reports a race when the main thread opens a file (fopen,
 * opendir) on a number a loop thread closed without a happens-before
 * between the two. An answer comes after the op closed its pipes, so
 * after sx_engine_wait the main thread may open files; after a terminate
 * or a yield timeout the op closes its pipes on its own time (io_inflight
 * is a relaxed figure, no synchronisation), so files are only opened
 * once the engine is stopped (joined) or before the close can happen.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <stepx/stepx.h>

#include "tests/support/support.h"

#define WAIT_MS 10000 /* generous bound for anything that should happen */
#define MAXX 24       /* execs per test process */

/* ---- the test process ---- */

typedef struct {
    size_t n, next;
    bool started;
    int64_t yield_timeout_ms; /* 0: sx_yield */
    uint8_t *args[MAXX];      /* owned copies of the inputs */
    size_t len[MAXX];
    sx_pack res[MAXX]; /* answer i, as [error, message, result] */
} ex_state;

/* Methods: "run" (inputs: exec args...), "yto" (inputs: timeout ms, then
 * exec args...). */
static int ex_init(void *st, const sx_init_ctx *c, const char *method,
                   const sx_payload *in, size_t n)
{
    (void)c;
    ex_state *s = st;
    size_t first = 0;
    if (strcmp(method, "yto") == 0) {
        if (n < 1 || sx_payload_get_int(in[0], &s->yield_timeout_ms) != 0)
            return SX_EINVAL;
        first = 1;
    } else if (strcmp(method, "run") != 0) {
        return SX_EUNKNOWN_METHOD;
    }
    if (n - first > MAXX)
        return SX_ELIMIT;
    for (size_t i = first; i < n; i++) {
        s->args[s->n] = malloc(in[i].len > 0 ? in[i].len : 1);
        if (s->args[s->n] == NULL)
            return SX_ENOMEM; /* close is not called: a test would leak */
        memcpy(s->args[s->n], in[i].data, in[i].len);
        s->len[s->n] = in[i].len;
        sx_pack_init(&s->res[s->n]);
        s->n++;
    }
    return 0;
}

static int ex_yield(ex_state *s, sx_step_output *out)
{
    sx_payload a = { s->args[s->next], s->len[s->next] };
    if (s->yield_timeout_ms > 0)
        return sx_yield_timeout(out, SX_CMD_EXEC, s->next, a,
                                s->yield_timeout_ms);
    return sx_yield(out, SX_CMD_EXEC, s->next, a);
}

static int ex_step(void *st, const sx_event *evs, size_t n, sx_step_output *out)
{
    ex_state *s = st;
    bool answered = false;
    for (size_t i = 0; i < n; i++) {
        const sx_event *ev = &evs[i];
        if (ev->type != SX_EVENT_YIELD_COMPLETE)
            continue; /* @cancel from stop: ignored on purpose */
        if (ev->tag != s->next) {
            sx_fail(out, "answer for an unexpected tag");
            return 0;
        }
        sx_pack *pk = &s->res[s->next];
        sx_pack_array(pk, 3);
        sx_pack_int(pk, ev->error);
        sx_pack_str(pk, ev->error_msg);
        sx_pack_raw(pk, ev->data);
        if (pk->err != 0)
            return pk->err;
        s->next++;
        answered = true;
    }
    if (!s->started) {
        s->started = true;
        if (s->n > 0)
            return ex_yield(s, out);
    }
    if (!answered) {
        sx_wait(out); /* a message only: keep waiting */
        return 0;
    }
    if (s->next < s->n)
        return ex_yield(s, out);
    sx_pack all;
    sx_pack_init(&all);
    sx_pack_array(&all, (uint32_t)s->n);
    for (size_t i = 0; i < s->n; i++)
        sx_pack_raw(&all, sx_pack_payload(&s->res[i]));
    int rc = all.err;
    if (rc == 0)
        sx_done(out, sx_pack_payload(&all));
    sx_pack_fini(&all);
    return rc;
}

static void ex_close(void *st)
{
    ex_state *s = st;
    for (size_t i = 0; i < s->n; i++) {
        free(s->args[i]);
        sx_pack_fini(&s->res[i]);
    }
}

static const sx_process_type ex_type = { .name = "ex",
                                         .state_size = sizeof(ex_state),
                                         .init = ex_init,
                                         .step = ex_step,
                                         .close = ex_close };

/* ---- building exec args ---- */

typedef struct {
    const char *argv[8]; /* NULL-terminated */
    const char *env[8];  /* name, value, ..., NULL; used when has_env */
    bool has_env;
    const char *cwd;
    const void *in;
    size_t in_len;
    bool has_in;
    int64_t max_output, timeout_ms, grace_ms; /* -1: absent */
    int truncate;                             /* -1: absent; 0, 1 */
} xargs;

static xargs sh(const char *script)
{
    xargs a;
    memset(&a, 0, sizeof a);
    a.argv[0] = "/bin/sh";
    a.argv[1] = "-c";
    a.argv[2] = script;
    a.max_output = a.timeout_ms = a.grace_ms = -1;
    a.truncate = -1;
    return a;
}

/* Packs a into pk (reset first) and returns the payload. */
static sx_payload pack_args(sx_pack *pk, const xargs *a)
{
    uint32_t fields = 1 + (a->has_env ? 1 : 0) + (a->cwd != NULL) +
                      (a->has_in ? 1 : 0) + (a->max_output >= 0) +
                      (a->timeout_ms >= 0) + (a->grace_ms >= 0) +
                      (a->truncate >= 0);
    uint32_t argc = 0, envc = 0;
    while (a->argv[argc] != NULL)
        argc++;
    while (a->has_env && a->env[2 * envc] != NULL)
        envc++;
    sx_pack_reset(pk);
    sx_pack_map(pk, fields);
    sx_pack_str(pk, "argv");
    sx_pack_array(pk, argc);
    for (uint32_t i = 0; i < argc; i++)
        sx_pack_str(pk, a->argv[i]);
    if (a->has_env) {
        sx_pack_str(pk, "env");
        sx_pack_map(pk, envc);
        for (uint32_t i = 0; i < 2 * envc; i++)
            sx_pack_str(pk, a->env[i]);
    }
    if (a->cwd != NULL) {
        sx_pack_str(pk, "cwd");
        sx_pack_str(pk, a->cwd);
    }
    if (a->has_in) {
        sx_pack_str(pk, "stdin");
        sx_pack_bin(pk, a->in, a->in_len);
    }
    if (a->max_output >= 0) {
        sx_pack_str(pk, "max_output");
        sx_pack_int(pk, a->max_output);
    }
    if (a->truncate >= 0) {
        sx_pack_str(pk, "truncate");
        sx_pack_bool(pk, a->truncate != 0);
    }
    if (a->timeout_ms >= 0) {
        sx_pack_str(pk, "timeout_ms");
        sx_pack_int(pk, a->timeout_ms);
    }
    if (a->grace_ms >= 0) {
        sx_pack_str(pk, "grace_ms");
        sx_pack_int(pk, a->grace_ms);
    }
    CHECK_RC(pk->err, 0);
    return sx_pack_payload(pk);
}

/* ---- reading answers ---- */

typedef struct {
    int err;
    char msg[256];
    bool has_status, has_signal;
    int64_t status, sig;
    char *out, *errb; /* NUL-terminated copies (malloc) */
    size_t out_len, err_len;
    /* With truncate: the three keys it adds. */
    bool has_trunc, truncated;
    uint64_t out_total, err_total;
} xres;

static char *copy_bin(const void *p, size_t n)
{
    char *s = malloc(n + 1);
    CHECK(s != NULL);
    if (n > 0)
        memcpy(s, p, n);
    s[n] = 0;
    return s;
}

static void read_result(sx_unpack *u, xres *r)
{
    uint32_t n;
    CHECK_RC(sx_unpack_map(u, &n), 0);
    CHECK(n == 4 || n == 7);
    r->has_trunc = n == 7;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kn;
        CHECK_RC(sx_unpack_str(u, &k, &kn), 0);
        if (kn == 9 && memcmp(k, "truncated", 9) == 0) {
            CHECK_RC(sx_unpack_bool(u, &r->truncated), 0);
        } else if (kn == 12 && memcmp(k, "stdout_total", 12) == 0) {
            CHECK_RC(sx_unpack_uint(u, &r->out_total), 0);
        } else if (kn == 12 && memcmp(k, "stderr_total", 12) == 0) {
            CHECK_RC(sx_unpack_uint(u, &r->err_total), 0);
        } else if (kn == 6 && memcmp(k, "status", 6) == 0) {
            r->has_status = sx_unpack_type(u) != SX_MP_NIL;
            if (r->has_status)
                CHECK_RC(sx_unpack_int(u, &r->status), 0);
            else
                CHECK_RC(sx_unpack_nil(u), 0);
        } else if (kn == 6 && memcmp(k, "signal", 6) == 0) {
            r->has_signal = sx_unpack_type(u) != SX_MP_NIL;
            if (r->has_signal)
                CHECK_RC(sx_unpack_int(u, &r->sig), 0);
            else
                CHECK_RC(sx_unpack_nil(u), 0);
        } else {
            const void *p;
            size_t len;
            CHECK_RC(sx_unpack_bin(u, &p, &len), 0);
            if (kn == 6 && memcmp(k, "stdout", 6) == 0) {
                r->out = copy_bin(p, len);
                r->out_len = len;
            } else {
                CHECK(kn == 6 && memcmp(k, "stderr", 6) == 0);
                r->errb = copy_bin(p, len);
                r->err_len = len;
            }
        }
    }
    CHECK(r->out != NULL && r->errb != NULL);
}

/* Waits for pid (DONE expected) and decodes its n answers into r. */
static void expect_answers(sx_engine *e, sx_pid pid, xres *r, size_t n)
{
    sx_result res;
    tx_wait_done(e, pid, 30000, &res);
    sx_unpack u;
    uint32_t k;
    sx_unpack_init(&u, res.value);
    CHECK_RC(sx_unpack_array(&u, &k), 0);
    CHECK_EQ_INT(k, n);
    for (size_t i = 0; i < n; i++) {
        memset(&r[i], 0, sizeof r[i]);
        uint32_t three;
        int64_t err;
        CHECK_RC(sx_unpack_array(&u, &three), 0);
        CHECK_EQ_INT(three, 3);
        CHECK_RC(sx_unpack_int(&u, &err), 0);
        r[i].err = (int)err;
        if (sx_unpack_type(&u) == SX_MP_NIL) {
            CHECK_RC(sx_unpack_nil(&u), 0);
        } else {
            const char *m;
            size_t mn;
            CHECK_RC(sx_unpack_str(&u, &m, &mn), 0);
            snprintf(r[i].msg, sizeof r[i].msg, "%.*s", (int)mn, m);
        }
        if (r[i].err == 0)
            read_result(&u, &r[i]);
        else
            CHECK_RC(sx_unpack_nil(&u), 0);
    }
    CHECK(sx_unpack_done(&u));
    sx_result_free(&res);
}

static void xres_free(xres *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(r[i].out);
        free(r[i].errb);
    }
}

/* Fails unless r succeeded with exit status `status`. */
static void expect_status(const xres *r, int64_t status)
{
    if (r->err != 0)
        SX_FAILF("exec failed: %s (%s)", r->msg, sx_errname(r->err));
    CHECK(r->has_status);
    CHECK(!r->has_signal);
    CHECK_EQ_INT(r->status, status);
}

/* ---- the engine and the host ---- */

static sx_engine *up(void)
{
    return tx_engine_up_workers(2, &ex_type, 1);
}

static uint64_t inflight(sx_engine *e)
{
    sx_engine_stats st;
    CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
    return st.io_inflight;
}

/* Every op has ended: pipes and handles closed, children reaped. */
static void await_idle(sx_engine *e)
{
    double end = sx_test_now_ms() + WAIT_MS;
    while (inflight(e) != 0) {
        if (sx_test_now_ms() > end)
            SX_FAILF("io ops still alive after %d ms: %llu", WAIT_MS,
                     (unsigned long long)inflight(e));
        tx_sleep_ms(2);
    }
}

static sx_pid submit(sx_engine *e, const char *method, const sx_payload *in,
                     size_t n)
{
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "ex", method, in, n, &pid), 0);
    return pid;
}

/* Runs one exec in a fresh process and returns its answer. */
static void run1(sx_engine *e, const xargs *a, xres *r)
{
    sx_pack pk;
    sx_pack_init(&pk);
    sx_payload in = pack_args(&pk, a);
    sx_pid pid = submit(e, "run", &in, 1);
    sx_pack_fini(&pk);
    expect_answers(e, pid, r, 1);
}

/* A scratch directory, removed with everything in it by tmp_done. */
typedef struct {
    char dir[64];
} tmpdir;

static void tmp_new(tmpdir *t)
{
    tx_mkdtemp(t->dir, sizeof t->dir, "sx-exec-");
}

static void tmp_path(const tmpdir *t, const char *name, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s/%s", t->dir, name);
    CHECK(n > 0 && (size_t)n < cap);
}

static void tmp_done(tmpdir *t)
{
    CHECK(tx_rm_tree(t->dir) == 0);
}

/* The pid a child wrote to path ("N\n"); waits for it up to WAIT_MS. */
static pid_t read_pid(const char *path)
{
    double end = sx_test_now_ms() + WAIT_MS;
    for (;;) {
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            char line[32] = { 0 };
            bool got = fgets(line, sizeof line, f) != NULL &&
                       strchr(line, '\n') != NULL;
            fclose(f);
            if (got) {
                long v = strtol(line, NULL, 10);
                CHECK(v > 1);
                return (pid_t)v;
            }
        }
        if (sx_test_now_ms() > end)
            SX_FAILF("no pid in %s after %d ms", path, WAIT_MS);
        tx_sleep_ms(2);
    }
}

static bool pid_gone_now(pid_t pid)
{
    return kill(pid, 0) != 0 && errno == ESRCH;
}

/* Polls until pid is gone (dead and reaped: a zombie answers kill). */
static void await_gone(pid_t pid)
{
    double end = sx_test_now_ms() + WAIT_MS;
    while (!pid_gone_now(pid)) {
        if (sx_test_now_ms() > end)
            SX_FAILF("pid %d still exists after %d ms", (int)pid, WAIT_MS);
        tx_sleep_ms(2);
    }
}

/* True when pid is dead: gone, or a zombie that is not ours. A grandchild
 * whose parent died is reparented to init (or a subreaper), which reaps it
 * in its own time; a zombie whose parent is this process would be our
 * leak, and never counts as dead. */
static bool pid_dead_now(pid_t pid)
{
    if (pid_gone_now(pid))
        return true;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return errno == ENOENT;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* after "pid (comm" */
    char state;
    int ppid;
    if (p == NULL || sscanf(p + 1, " %c %d", &state, &ppid) != 2)
        return false;
    return state == 'Z' && ppid != (int)getpid();
}

static void await_dead(pid_t pid)
{
    double end = sx_test_now_ms() + WAIT_MS;
    while (!pid_dead_now(pid)) {
        if (sx_test_now_ms() > end)
            SX_FAILF("pid %d still alive after %d ms", (int)pid, WAIT_MS);
        tx_sleep_ms(2);
    }
}

/* ---- cases ---- */

/* Output and status: stdout and stderr are captured separately and a
 * non-zero exit status is a result, not an error. */
static void test_output_and_status(void)
{
    sx_engine *e = up();
    xres r;
    xargs a = sh("echo out; echo err >&2; exit 3");
    run1(e, &a, &r);
    expect_status(&r, 3);
    CHECK_STR(r.out, "out\n");
    CHECK_STR(r.errb, "err\n");
    xres_free(&r, 1);
    a = sh("printf 'a\\0b'");
    run1(e, &a, &r); /* binary-safe: the NUL arrives */
    expect_status(&r, 0);
    CHECK_EQ_INT(r.out_len, 3);
    CHECK(memcmp(r.out, "a\0b", 3) == 0);
    CHECK_EQ_INT(r.err_len, 0);
    xres_free(&r, 1);
    tx_engine_down_io(e);
}

/* A child killed by a signal has status nil and its signal number. */
static void test_killed_by_signal(void)
{
    sx_engine *e = up();
    xres r;
    xargs a = sh("echo before; kill -9 $$");
    run1(e, &a, &r);
    CHECK_RC(r.err, 0);
    CHECK(!r.has_status);
    CHECK(r.has_signal);
    CHECK_EQ_INT(r.sig, SIGKILL);
    CHECK_STR(r.out, "before\n");
    xres_free(&r, 1);
    tx_engine_down_io(e);
}

/* Stdin: the bytes reach the child (binary, larger than a pipe buffer,
 * while its output flows back) and then end of file; argv[0] is looked up
 * in PATH. Without stdin the child reads /dev/null (cat ends at once). */
static void test_stdin(void)
{
    sx_engine *e = up();
    size_t big = 300 * 1024;
    uint8_t *data = malloc(big);
    CHECK(data != NULL);
    for (size_t i = 0; i < big; i++)
        data[i] = (uint8_t)(i * 7 + i / 251);
    xres r;
    xargs a = sh("");
    a.argv[0] = "cat";
    a.argv[1] = NULL;
    a.has_in = true;
    a.in = data;
    a.in_len = big;
    run1(e, &a, &r);
    expect_status(&r, 0);
    CHECK_EQ_INT(r.out_len, big);
    CHECK(memcmp(r.out, data, big) == 0);
    xres_free(&r, 1);
    a.has_in = false;
    run1(e, &a, &r);
    expect_status(&r, 0);
    CHECK_EQ_INT(r.out_len, 0);
    xres_free(&r, 1);
    free(data);
    tx_engine_down_io(e);
}

/* Stdin the child never reads: the write fails (EPIPE, and SIGPIPE on the
 * loop thread, which must not kill the host) and the command still
 * succeeds with the child's status. Negative control: without the loop
 * thread's SIGPIPE block this binary dies here (checked once by hand). */
static void test_stdin_unread(void)
{
    sx_engine *e = up();
    size_t big = 4 << 20;
    uint8_t *data = calloc(1, big);
    CHECK(data != NULL);
    xres r;
    xargs a = sh("exit 7");
    a.has_in = true;
    a.in = data;
    a.in_len = big;
    run1(e, &a, &r);
    expect_status(&r, 7);
    xres_free(&r, 1);
    free(data);
    tx_engine_down_io(e);
}

/* env is the child's whole environment (nothing inherited); without env
 * the child inherits the host's; cwd is honoured. */
static void test_env_and_cwd(void)
{
    CHECK(setenv("SX_EXEC_PARENT", "inherited", 1) == 0); /* no threads yet */
    tmpdir t;
    tmp_new(&t);
    sx_engine *e = up();
    xres r;
    xargs a = sh("printf '%s|%s|%s|' \"$SX_A\" \"${SX_B-unset}\" "
                 "\"${SX_EXEC_PARENT-unset}\"; pwd -P");
    a.has_env = true;
    a.env[0] = "SX_A";
    a.env[1] = "one two";
    a.env[2] = "SX_B";
    a.env[3] = "";
    a.cwd = t.dir;
    run1(e, &a, &r);
    expect_status(&r, 0);
    const char *want = "one two||unset|";
    CHECK(strncmp(r.out, want, strlen(want)) == 0);
    /* The directory the child was in is t.dir (compared by inode: /tmp
     * may be reached through a symbolic link). */
    char *cwd = r.out + strlen(want);
    CHECK(r.out_len > strlen(want) && r.out[r.out_len - 1] == '\n');
    r.out[r.out_len - 1] = 0;
    struct stat st_child, st_dir;
    CHECK(stat(cwd, &st_child) == 0);
    CHECK(stat(t.dir, &st_dir) == 0);
    CHECK(st_child.st_dev == st_dir.st_dev && st_child.st_ino == st_dir.st_ino);
    xres_free(&r, 1);
    a = sh("printf '%s|%s' \"${SX_A-unset}\" \"$SX_EXEC_PARENT\"");
    run1(e, &a, &r);
    expect_status(&r, 0);
    CHECK_STR(r.out, "unset|inherited");
    xres_free(&r, 1);
    tx_engine_down_io(e);
    tmp_done(&t);
    CHECK(unsetenv("SX_EXEC_PARENT") == 0);
}

/* A spawn failure is the -errno code with a message naming argv[0] (or
 * the cwd), and the process keeps running: its next exec succeeds. */
static void test_spawn_failure(void)
{
    sx_engine *e = up();
    sx_pack pk[4];
    sx_payload in[4];
    for (int i = 0; i < 4; i++)
        sx_pack_init(&pk[i]);
    xargs a = sh("");
    a.argv[0] = "sx-no-such-binary";
    a.argv[1] = NULL;
    in[0] = pack_args(&pk[0], &a);
    a.argv[0] = "/etc/passwd"; /* exists, not executable */
    in[1] = pack_args(&pk[1], &a);
    a = sh("echo x");
    a.cwd = "/sx-no-such-dir";
    in[2] = pack_args(&pk[2], &a);
    a = sh("echo still here");
    in[3] = pack_args(&pk[3], &a);
    sx_pid pid = submit(e, "run", in, 4);
    for (int i = 0; i < 4; i++)
        sx_pack_fini(&pk[i]);
    xres r[4];
    expect_answers(e, pid, r, 4);
    CHECK_RC(r[0].err, -ENOENT);
    CHECK_STR(r[0].msg, "exec: sx-no-such-binary: no such file or directory");
    CHECK_RC(r[1].err, -EACCES);
    CHECK_STR(r[1].msg, "exec: /etc/passwd: permission denied");
    CHECK_RC(r[2].err, -ENOENT);
    CHECK_STR(r[2].msg, "exec: cwd /sx-no-such-dir: no such file or directory");
    expect_status(&r[3], 0);
    CHECK_STR(r[3].out, "still here\n");
    xres_free(r, 4);
    await_idle(e);
    tx_engine_down_io(e);
}

/* A spawn failure's message for a long name keeps its reason and is valid
 * UTF-8: the name is cut at a character boundary, with "...". (Cut
 * mid-character by a 256-byte message, a name of 80 "€" would lose the
 * reason: "exec: €€...\xe2\x82", which strict readers such as the CLI's
 * JSON drop whole.) */
static void test_spawn_failure_long_name(void)
{
    sx_engine *e = up();
    char name[1 + 80 * 3 + 1];
    name[0] = 'x';
    for (int i = 0; i < 80; i++) /* 241 bytes: one path component */
        memcpy(name + 1 + 3 * i, "\xe2\x82\xac", 3);
    name[sizeof name - 1] = 0;
    sx_pack pk;
    sx_pack_init(&pk);
    xargs a = sh("");
    a.argv[0] = name;
    a.argv[1] = NULL;
    sx_payload in = pack_args(&pk, &a);
    sx_pid pid = submit(e, "run", &in, 1);
    sx_pack_fini(&pk);
    xres r;
    expect_answers(e, pid, &r, 1);
    CHECK_RC(r.err, -ENOENT);
    size_t n = strlen(r.msg);
    const char *tail = "...: no such file or directory";
    CHECK(n > strlen(tail) && strcmp(r.msg + n - strlen(tail), tail) == 0);
    /* Valid UTF-8: every lead byte is followed by its continuations. */
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)r.msg[i];
        size_t k = c < 0x80             ? 1
                   : (c & 0xe0) == 0xc0 ? 2
                   : (c & 0xf0) == 0xe0 ? 3
                                        : 4;
        CHECK(i + k <= n);
        for (size_t j = 1; j < k && i + j < n; j++)
            CHECK(((unsigned char)r.msg[i + j] & 0xc0) == 0x80);
        i += k;
    }
    xres_free(&r, 1);
    await_idle(e);
    tx_engine_down_io(e);
}

/* Bad arguments answer SX_EINVAL at once, with a message naming the
 * field; nothing is spawned. */
static void test_bad_args(void)
{
    static const struct {
        const char *what; /* built below */
        const char *needle;
    } bad[] = {
        { "not a map", "args must be one map" },
        { "no argv", "argv is required" },
        { "empty argv", "argv must be" },
        { "argv of ints", "argv must be" },
        { "empty argv[0]", "argv must be" },
        { "env not a map", "env must be" },
        { "env name with =", "env must be" },
        { "env value int", "env must be" },
        { "cwd int", "cwd must be" },
        { "stdin int", "stdin must be" },
        { "max_output too big", "max_output must be" },
        { "max_output negative", "max_output must be" },
        { "timeout_ms negative",
          "timeout_ms must be an integer from 0 to 2^40" },
        { "grace_ms string", "grace_ms must be an integer from 0 to 2^40" },
        { "unknown key", "unknown argument \"argx\"" },
        { "argv twice", "argument \"argv\" given twice" },
        { "truncate int", "truncate must be a bool, or nil" },
    };
    enum { N = sizeof bad / sizeof bad[0] };
    sx_pack pk[N];
    sx_payload in[N];
    for (int i = 0; i < N; i++) {
        sx_pack *p = &pk[i];
        sx_pack_init(p);
        if (i == 0) { /* not a map */
            sx_pack_array(p, 1);
            sx_pack_str(p, "true");
            in[i] = sx_pack_payload(p);
            continue;
        }
        if (i == 1) { /* no argv */
            sx_pack_map(p, 1);
            sx_pack_str(p, "cwd");
            sx_pack_str(p, "/");
            in[i] = sx_pack_payload(p);
            continue;
        }
        sx_pack_map(p, i >= 5 ? 2 : 1);
        sx_pack_str(p, "argv");
        if (i == 2) {
            sx_pack_array(p, 0);
        } else if (i == 3) {
            sx_pack_array(p, 1);
            sx_pack_int(p, 1);
        } else {
            sx_pack_array(p, 1);
            sx_pack_str(p, i == 4 ? "" : "true");
        }
        switch (i) {
        case 5:
            sx_pack_str(p, "env");
            sx_pack_str(p, "A=1");
            break;
        case 6:
            sx_pack_str(p, "env");
            sx_pack_map(p, 1);
            sx_pack_str(p, "A=B");
            sx_pack_str(p, "1");
            break;
        case 7:
            sx_pack_str(p, "env");
            sx_pack_map(p, 1);
            sx_pack_str(p, "A");
            sx_pack_int(p, 1);
            break;
        case 8:
            sx_pack_str(p, "cwd");
            sx_pack_int(p, 1);
            break;
        case 9:
            sx_pack_str(p, "stdin");
            sx_pack_int(p, 1);
            break;
        case 10:
            sx_pack_str(p, "max_output");
            sx_pack_int(p, ((int64_t)64 << 20) + 1);
            break;
        case 11:
            sx_pack_str(p, "max_output");
            sx_pack_int(p, -1);
            break;
        case 12:
            sx_pack_str(p, "timeout_ms");
            sx_pack_int(p, -5);
            break;
        case 13:
            sx_pack_str(p, "grace_ms");
            sx_pack_str(p, "10");
            break;
        case 14:
            sx_pack_str(p, "argx");
            sx_pack_nil(p);
            break;
        case 15:
            sx_pack_str(p, "argv");
            sx_pack_array(p, 1);
            sx_pack_str(p, "true");
            break;
        case 16:
            sx_pack_str(p, "truncate");
            sx_pack_int(p, 1);
            break;
        default:
            break;
        }
        CHECK_RC(p->err, 0);
        in[i] = sx_pack_payload(p);
    }
    sx_engine *e = up();
    sx_pid pid = submit(e, "run", in, N);
    for (int i = 0; i < N; i++)
        sx_pack_fini(&pk[i]);
    xres r[N];
    expect_answers(e, pid, r, N);
    for (int i = 0; i < N; i++) {
        if (r[i].err != SX_EINVAL || strstr(r[i].msg, bad[i].needle) == NULL)
            SX_FAILF("%s: got %s \"%s\", want SX_EINVAL with \"%s\"",
                     bad[i].what, sx_errname(r[i].err), r[i].msg,
                     bad[i].needle);
    }
    xres_free(r, N);
    tx_engine_down_io(e);
}

/* Every optional key takes nil for its default (COMMANDS.md's table):
 * env, cwd and stdin, and the integers max_output, timeout_ms and
 * grace_ms too, and truncate (false: the result has its 4 keys); an empty
 * cwd is SX_EINVAL, not the engine's directory. */
static void test_nil_defaults(void)
{
    static const char *const keys[] = { "env",        "cwd",      "stdin",
                                        "max_output", "truncate", "timeout_ms",
                                        "grace_ms" };
    enum { K = sizeof keys / sizeof keys[0] };
    sx_pack pk[2];
    sx_payload in[2];
    for (int i = 0; i < 2; i++) {
        sx_pack *p = &pk[i];
        sx_pack_init(p);
        sx_pack_map(p, i == 0 ? 1 + K : 2);
        sx_pack_str(p, "argv");
        sx_pack_array(p, 3);
        sx_pack_str(p, "/bin/sh");
        sx_pack_str(p, "-c");
        sx_pack_str(p, "echo ok");
        if (i == 0) {
            for (int k = 0; k < K; k++) {
                sx_pack_str(p, keys[k]);
                sx_pack_nil(p);
            }
        } else {
            sx_pack_str(p, "cwd");
            sx_pack_str(p, "");
        }
        CHECK_RC(p->err, 0);
        in[i] = sx_pack_payload(p);
    }
    sx_engine *e = up();
    sx_pid pid = submit(e, "run", in, 2);
    for (int i = 0; i < 2; i++)
        sx_pack_fini(&pk[i]);
    xres r[2];
    expect_answers(e, pid, r, 2);
    expect_status(&r[0], 0);
    CHECK_STR(r[0].out, "ok\n");
    CHECK(!r[0].has_trunc);
    CHECK_RC(r[1].err, SX_EINVAL);
    CHECK_STR(r[1].msg, "exec: cwd must be a non-empty string without NUL "
                        "bytes");
    xres_free(r, 2);
    tx_engine_down_io(e);
}

/* max_output: exactly max_output bytes is fine; one more is SX_ELIMIT
 * naming the stream, and the child (which would write forever) is killed
 * and reaped before the answer arrives. */
static void test_max_output(void)
{
    tmpdir t;
    tmp_new(&t);
    char pidf[128], script[256];
    tmp_path(&t, "pid", pidf, sizeof pidf);
    sx_engine *e = up();
    xres r;
    xargs a = sh("printf '%01000d' 0; printf '%01001d' 0 >&2");
    a.max_output = 1001;
    run1(e, &a, &r);
    expect_status(&r, 0);
    CHECK_EQ_INT(r.out_len, 1000);
    CHECK_EQ_INT(r.err_len, 1001);
    xres_free(&r, 1);
    a.max_output = 1000;
    run1(e, &a, &r);
    CHECK_RC(r.err, SX_ELIMIT);
    CHECK_STR(r.msg, "exec: stderr exceeded max_output (1000 bytes)");
    xres_free(&r, 1);
    snprintf(script, sizeof script, "echo $$ > %s; exec yes", pidf);
    a = sh(script);
    a.max_output = 100000;
    run1(e, &a, &r);
    CHECK_RC(r.err, SX_ELIMIT);
    CHECK_STR(r.msg, "exec: stdout exceeded max_output (100000 bytes)");
    CHECK(pid_gone_now(read_pid(pidf))); /* answered after the reaping */
    xres_free(&r, 1);
    await_idle(e);
    tx_engine_down_io(e);
    tmp_done(&t);
}

/* truncate: output past max_output (default 1 MiB) is read and dropped,
 * not a failure: the child runs to its own end (a 20 MB writer exits 7,
 * not killed), each stream keeps its first max_output bytes, and the
 * result says so (truncated, and what each stream carried in all); a
 * stream of exactly max_output bytes is not truncated. Without truncate
 * (false) the old rule holds: SX_ELIMIT. */
static void test_truncate(void)
{
    sx_engine *e = up();
    xres r;
    xargs a;
    memset(&a, 0, sizeof a);
    a.argv[0] = "head";
    a.argv[1] = "-c";
    a.argv[2] = "3000000";
    a.argv[3] = "/dev/zero";
    a.max_output = a.timeout_ms = a.grace_ms = -1;
    a.truncate = 1;
    run1(e, &a, &r);
    expect_status(&r, 0);
    CHECK(r.has_trunc);
    CHECK(r.truncated);
    CHECK_EQ_U64(r.out_len, (size_t)1 << 20);
    CHECK_EQ_U64(r.out_total, 3000000);
    CHECK_EQ_U64(r.err_len, 0);
    CHECK_EQ_U64(r.err_total, 0);
    xres_free(&r, 1);
    a = sh("head -c 20000000 /dev/zero; echo done >&2; exit 7");
    a.truncate = 1;
    a.max_output = 4096;
    run1(e, &a, &r);
    expect_status(&r, 7);
    CHECK(r.truncated);
    CHECK_EQ_U64(r.out_len, 4096);
    CHECK_EQ_U64(r.out_total, 20000000);
    CHECK_STR(r.errb, "done\n");
    CHECK_EQ_U64(r.err_total, 5);
    xres_free(&r, 1);
    /* One stream at the cap exactly, the other one byte over. */
    a = sh("printf '%01000d' 0; printf '%01001d' 1 >&2");
    a.truncate = 1;
    a.max_output = 1000;
    run1(e, &a, &r);
    expect_status(&r, 0);
    CHECK(r.truncated);
    CHECK_EQ_U64(r.out_len, 1000);
    CHECK_EQ_U64(r.out_total, 1000);
    CHECK_EQ_U64(r.err_len, 1000);
    CHECK_EQ_U64(r.err_total, 1001);
    xres_free(&r, 1);
    /* Both at the cap: nothing dropped. */
    a = sh("printf '%01000d' 0; printf '%01000d' 1 >&2");
    a.truncate = 1;
    a.max_output = 1000;
    run1(e, &a, &r);
    expect_status(&r, 0);
    CHECK(!r.truncated);
    CHECK_EQ_U64(r.out_total, 1000);
    CHECK_EQ_U64(r.err_total, 1000);
    xres_free(&r, 1);
    /* A cap of 0 keeps nothing. */
    a = sh("echo hi");
    a.truncate = 1;
    a.max_output = 0;
    run1(e, &a, &r);
    expect_status(&r, 0);
    CHECK(r.truncated);
    CHECK_EQ_U64(r.out_len, 0);
    CHECK_EQ_U64(r.out_total, 3);
    xres_free(&r, 1);
    /* truncate false: past the cap is an error, as without it. */
    a = sh("printf '%01001d' 0");
    a.truncate = 0;
    a.max_output = 1000;
    run1(e, &a, &r);
    CHECK_RC(r.err, SX_ELIMIT);
    CHECK_STR(r.msg, "exec: stdout exceeded max_output (1000 bytes)");
    xres_free(&r, 1);
    await_idle(e);
    tx_engine_down_io(e);
}

/* timeout_ms: the child is killed (SIGTERM) and reaped, then the answer
 * is SX_ETIMEDOUT, never before the timeout. */
static void test_own_timeout(void)
{
    tmpdir t;
    tmp_new(&t);
    char pidf[128], script[256];
    tmp_path(&t, "pid", pidf, sizeof pidf);
    snprintf(script, sizeof script, "echo $$ > %s; exec sleep 30", pidf);
    sx_engine *e = up();
    xres r;
    xargs a = sh(script);
    a.timeout_ms = 300;
    double t0 = sx_test_now_ms();
    run1(e, &a, &r);
    double took = sx_test_now_ms() - t0;
    CHECK_RC(r.err, SX_ETIMEDOUT);
    CHECK(strstr(r.msg, "timeout_ms") != NULL);
    CHECK(took >= 300);
    CHECK(took < WAIT_MS);
    CHECK(pid_gone_now(read_pid(pidf)));
    xres_free(&r, 1);
    tx_engine_down_io(e);
    tmp_done(&t);
}

/* A shell script that ignores SIGTERM, writes its PID to t's file "pid"
 * (its path into pidf) and sleeps 30 s: a child only SIGKILL ends. */
static void term_ignorer(tmpdir *t, char *pidf, size_t pcap, char *script,
                         size_t scap)
{
    tmp_path(t, "pid", pidf, pcap);
    snprintf(script, scap, "trap '' TERM; echo $$ > %s; exec sleep 30", pidf);
}

/* grace_ms: a child group that ignores SIGTERM gets SIGKILL once grace_ms
 * has passed, not before (the answer comes after timeout + grace). The
 * timeout is long enough for the shell to set its trap first: at 200 ms, a
 * shell started slowly on a loaded machine (load average 14) can take the
 * SIGTERM before its trap and die at once, failing the check. */
static void test_grace_then_kill(void)
{
    tmpdir t;
    tmp_new(&t);
    char pidf[128], script[256];
    term_ignorer(&t, pidf, sizeof pidf, script, sizeof script);
    sx_engine *e = up();
    xres r;
    xargs a = sh(script);
    a.timeout_ms = 1000;
    a.grace_ms = 400;
    double t0 = sx_test_now_ms();
    run1(e, &a, &r);
    double took = sx_test_now_ms() - t0;
    CHECK_RC(r.err, SX_ETIMEDOUT);
    CHECK(took >= 1400);
    CHECK(took < WAIT_MS);
    CHECK(pid_gone_now(read_pid(pidf)));
    xres_free(&r, 1);
    tx_engine_down_io(e);
    tmp_done(&t);
}

/* sx_yield_timeout on exec: the process gets SX_ETIMEDOUT at the yield's
 * deadline, and the child is killed and reaped afterwards. */
static void test_yield_timeout(void)
{
    tmpdir t;
    tmp_new(&t);
    char pidf[128], script[256];
    tmp_path(&t, "pid", pidf, sizeof pidf);
    snprintf(script, sizeof script, "echo $$ > %s; exec sleep 30", pidf);
    sx_engine *e = up();
    sx_pack pk;
    sx_pack_init(&pk);
    xargs a = sh(script);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in[2] = { sx_payload_int(b, 300), pack_args(&pk, &a) };
    double t0 = sx_test_now_ms();
    sx_pid pid = submit(e, "yto", in, 2);
    sx_pack_fini(&pk);
    pid_t child = read_pid(pidf); /* see "Descriptors and TSan" */
    xres r;
    expect_answers(e, pid, &r, 1);
    double took = sx_test_now_ms() - t0;
    CHECK_RC(r.err, SX_ETIMEDOUT);
    CHECK(took >= 300);
    CHECK(took < WAIT_MS);
    await_gone(child);
    await_idle(e);
    xres_free(&r, 1);
    tx_engine_down_io(e);
    tmp_done(&t);
}

/* Terminating the owner kills the child and what it started (its process
 * group): both are dead and reaped within the bound, every op has ended,
 * and the late answer to the finished process is a silent no-op. */
static void test_terminate_kills_group(void)
{
    tmpdir t;
    tmp_new(&t);
    char pidf[128], kidf[128], script[512];
    tmp_path(&t, "pid", pidf, sizeof pidf);
    tmp_path(&t, "kid", kidf, sizeof kidf);
    snprintf(script, sizeof script,
             "echo $$ > %s; sleep 30 & echo $! > %s; wait", pidf, kidf);
    sx_engine *e = up();
    sx_pack pk;
    sx_pack_init(&pk);
    xargs a = sh(script);
    sx_payload in = pack_args(&pk, &a);
    sx_pid pid = submit(e, "run", &in, 1);
    sx_pack_fini(&pk);
    pid_t child = read_pid(pidf), kid = read_pid(kidf);
    CHECK(!pid_gone_now(child));
    CHECK(!pid_gone_now(kid));
    CHECK_RC(sx_engine_terminate(e, pid), 0);
    sx_result res;
    CHECK_RC(sx_engine_wait(e, pid, WAIT_MS, &res), 0);
    CHECK_RC(res.error, SX_ETERMINATED);
    sx_result_free(&res);
    await_gone(child);
    await_idle(e);
    tx_engine_down_io(e);
    await_dead(kid); /* reads /proc: after down (see "Descriptors and TSan") */
    tmp_done(&t);
}

/* When the child exits, what it left running in its group is killed, so
 * the command ends with the child even though a leftover holds stdout. */
static void test_leftovers_killed(void)
{
    tmpdir t;
    tmp_new(&t);
    char kidf[128], script[256];
    tmp_path(&t, "kid", kidf, sizeof kidf);
    snprintf(script, sizeof script, "sleep 30 & echo $! > %s; echo done", kidf);
    sx_engine *e = up();
    xres r;
    xargs a = sh(script);
    double t0 = sx_test_now_ms();
    run1(e, &a, &r);
    CHECK(sx_test_now_ms() - t0 < WAIT_MS); /* not the 30 s of sleep */
    expect_status(&r, 0);
    CHECK_STR(r.out, "done\n");
    await_dead(read_pid(kidf));
    xres_free(&r, 1);
    tx_engine_down_io(e);
    tmp_done(&t);
}

/* Engine stop with children running, even children that ignore SIGTERM
 * and have a long grace_ms: stop returns within the bound and, when it
 * does, every child is dead and reaped (SIGKILL once the loop quits). */
static void test_stop_kills(void)
{
    tmpdir t;
    tmp_new(&t);
    enum { K = 3 };
    char pidf[K][128], script[256];
    sx_engine *e = up();
    for (int i = 0; i < K; i++) {
        char name[16];
        snprintf(name, sizeof name, "pid%d", i);
        tmp_path(&t, name, pidf[i], sizeof pidf[i]);
        snprintf(script, sizeof script,
                 "trap '' TERM; echo $$ > %s; exec sleep 30", pidf[i]);
        sx_pack pk;
        sx_pack_init(&pk);
        xargs a = sh(script);
        a.grace_ms = 60000;
        sx_payload in = pack_args(&pk, &a);
        submit(e, "run", &in, 1);
        sx_pack_fini(&pk);
    }
    pid_t pids[K];
    for (int i = 0; i < K; i++)
        pids[i] = read_pid(pidf[i]);
    double t0 = sx_test_now_ms();
    CHECK_RC(sx_engine_stop(e, 100), 0);
    CHECK(sx_test_now_ms() - t0 < WAIT_MS);
    CHECK_EQ_U64(inflight(e), 0);
    for (int i = 0; i < K; i++)
        CHECK(pid_gone_now(pids[i]));
    sx_engine_free(e);
    tmp_done(&t);
}

/* Stopping the engine while an exec guarded by a yield timeout runs: the
 * stop finishes the process (its loop cancels the exec and closes the
 * deadline), the child is killed, and the exec's answer, the last op on
 * its loop, comes after the loop began to quit: sx_complete still hands
 * the deadline's last reference back to the loop (DL_STOP), which must
 * free it even though the loop no longer runs its queue. Nothing may leak
 * (LeakSanitizer, in the sanitizer builds, at exit): not the deadline,
 * nor its prepared SX_ETIMEDOUT event. */
static void test_stop_with_yield_timeout(void)
{
    tmpdir t;
    tmp_new(&t);
    char pidf[128], script[256];
    term_ignorer(&t, pidf, sizeof pidf, script, sizeof script);
    sx_engine *e = up();
    sx_pack pk;
    sx_pack_init(&pk);
    xargs a = sh(script);
    a.grace_ms = 60000; /* still running when the loop quits */
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in[2] = { sx_payload_int(b, 60000), pack_args(&pk, &a) };
    submit(e, "yto", in, 2);
    sx_pack_fini(&pk);
    pid_t child = read_pid(pidf);
    CHECK_RC(sx_engine_stop(e, 100), 0);
    CHECK_EQ_U64(inflight(e), 0);
    CHECK(pid_gone_now(child));
    sx_engine_free(e);
    tmp_done(&t);
}

/* 64 processes each run a child, and the 64 children are alive at the
 * same time: each marks its start in a shared directory and counts the
 * marks; the one that sees all 64 writes 64 lines into a FIFO, and every
 * child waits for its line before it prints its number (a barrier with no
 * polling: the host holds the FIFO open read-write from before the engine
 * starts, so no child sees its end). Every child exits 0 and each process
 * gets its own child's output. */
static void test_concurrent_64(void)
{
    enum { N = 64 };
    tmpdir t;
    tmp_new(&t);
    char fifo[128];
    tmp_path(&t, "fifo", fifo, sizeof fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    int keep = open(fifo, O_RDWR); /* before the engine: see TSan note */
    CHECK(keep >= 0);
    sx_engine *e = up();
    sx_pid pids[N];
    for (int i = 0; i < N; i++) {
        char script[512];
        int len = snprintf(script, sizeof script,
                           ": > %s/m.%d; set -- %s/m.*; if [ $# -ge %d ]; "
                           "then i=0; while [ $i -lt %d ]; do echo; "
                           "i=$((i+1)); done > %s; fi; read x < %s; echo %d",
                           t.dir, i, t.dir, N, N, fifo, fifo, i);
        CHECK(len > 0 && (size_t)len < sizeof script);
        sx_pack pk;
        sx_pack_init(&pk);
        xargs a = sh(script);
        sx_payload in = pack_args(&pk, &a);
        pids[i] = submit(e, "run", &in, 1);
        sx_pack_fini(&pk);
    }
    for (int i = 0; i < N; i++) {
        xres r;
        char want[16];
        expect_answers(e, pids[i], &r, 1);
        expect_status(&r, 0);
        snprintf(want, sizeof want, "%d\n", i);
        CHECK_STR(r.out, want);
        xres_free(&r, 1);
    }
    await_idle(e);
    tx_engine_down_io(e);
    CHECK(close(keep) == 0);
    tmp_done(&t);
}

/* No descriptor leaks: after an engine ran a mix of successes and every
 * failure path (spawn failure, output limit, timeout, unread stdin,
 * terminate, a child still running at stop), the host has the same
 * descriptors open as before it. */
static void test_no_fd_leak(void)
{
    /* Warm-up: libuv opens some descriptors once per host (its signal
     * lock pipe); the count is taken after an engine has run a child. */
    sx_engine *e = up();
    xres r;
    xargs a = sh("true");
    run1(e, &a, &r);
    xres_free(&r, 1);
    tx_engine_down_io(e);
    int before = tx_count_fds();
    uint8_t data[200000];
    memset(data, 'x', sizeof data);
    e = up();
    for (int round = 0; round < 2; round++) {
        a = sh("echo ok; cat >/dev/null");
        a.has_in = true;
        a.in = data;
        a.in_len = sizeof data;
        run1(e, &a, &r);
        expect_status(&r, 0);
        xres_free(&r, 1);
        a = sh("");
        a.argv[0] = "sx-no-such-binary";
        a.argv[1] = NULL;
        run1(e, &a, &r);
        CHECK_RC(r.err, -ENOENT);
        xres_free(&r, 1);
        a = sh("exec yes");
        a.max_output = 10;
        run1(e, &a, &r);
        CHECK_RC(r.err, SX_ELIMIT);
        xres_free(&r, 1);
        a = sh("exec sleep 30");
        a.timeout_ms = 50;
        run1(e, &a, &r);
        CHECK_RC(r.err, SX_ETIMEDOUT);
        xres_free(&r, 1);
        a = sh("exit 0");
        a.has_in = true;
        a.in = data;
        a.in_len = sizeof data;
        run1(e, &a, &r);
        expect_status(&r, 0);
        xres_free(&r, 1);
        sx_pack pk;
        sx_pack_init(&pk);
        a = sh("exec sleep 30");
        sx_payload in = pack_args(&pk, &a);
        sx_pid pid = submit(e, "run", &in, 1);
        sx_pack_fini(&pk);
        tx_sleep_ms(50);
        CHECK_RC(sx_engine_terminate(e, pid), 0);
        await_idle(e);
    }
    /* Still alive: a child of the engine being stopped must not leak
     * either (stop kills it). */
    sx_pack pk;
    sx_pack_init(&pk);
    a = sh("exec sleep 30");
    sx_payload in = pack_args(&pk, &a);
    submit(e, "run", &in, 1);
    sx_pack_fini(&pk);
    tx_sleep_ms(50);
    tx_engine_down_io(e);
    CHECK_EQ_INT(tx_count_fds(), before);
}

/* A host that blocks SIGCHLD before it starts the engine (the usual
 * "block the signals, then sigwait for SIGINT/SIGTERM in main" pattern;
 * every thread created after it inherits the mask) still gets its exec
 * answers: libuv learns of a child's exit only from its SIGCHLD handler,
 * so a loop thread must take the signal. Negative control: without the
 * unblock in the loop threads (engine/io/loop.c loop_main) the child exits, is
 * never reaped, and the wait below times out (checked once by hand). */
static void test_sigchld_blocked(void)
{
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    CHECK(pthread_sigmask(SIG_BLOCK, &chld, &old) == 0);
    sx_engine *e = up(); /* its threads inherit the mask */
    sx_pack pk;
    sx_pack_init(&pk);
    xargs a = sh("echo ok; exit 3");
    sx_payload in = pack_args(&pk, &a);
    sx_pid pid = submit(e, "run", &in, 1);
    sx_pack_fini(&pk);
    sx_result res; /* a bounded wait first; then read the kept outcome */
    CHECK_RC(sx_engine_wait(e, pid, WAIT_MS, &res), 0);
    sx_result_free(&res);
    xres r;
    expect_answers(e, pid, &r, 1);
    expect_status(&r, 3);
    CHECK_STR(r.out, "ok\n");
    xres_free(&r, 1);
    tx_engine_down_io(e);
    CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL) == 0);
}

static const sx_test_case cases[] = {
    { "output_and_status", test_output_and_status },
    { "spawn_failure_long_name", test_spawn_failure_long_name },
    { "killed_by_signal", test_killed_by_signal },
    { "stdin", test_stdin },
    { "stdin_unread", test_stdin_unread },
    { "env_and_cwd", test_env_and_cwd },
    { "spawn_failure", test_spawn_failure },
    { "bad_args", test_bad_args },
    { "nil_defaults", test_nil_defaults },
    { "max_output", test_max_output },
    { "truncate", test_truncate },
    { "own_timeout", test_own_timeout },
    { "grace_then_kill", test_grace_then_kill },
    { "yield_timeout", test_yield_timeout },
    { "terminate_kills_group", test_terminate_kills_group },
    { "leftovers_killed", test_leftovers_killed },
    { "stop_kills", test_stop_kills },
    { "stop_with_yield_timeout", test_stop_with_yield_timeout },
    { "concurrent_64", test_concurrent_64 },
    { "no_fd_leak", test_no_fd_leak },
    { "sigchld_blocked", test_sigchld_blocked },
};

SX_TEST_MAIN(cases)

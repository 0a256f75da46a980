/* engine/commands/exec.c — the exec family: one OS subprocess per yield, run
 * with uv_spawn on the owner's libuv loop (engine/io/io.h). Arguments,
 * result, errors and cancellation are in docs/COMMANDS.md.
 *
 * Life of an op. The handler parses the arguments on the worker
 * (engine/commands/exec_args.c) into storage the op owns (argv, env, cwd,
 * a copy of stdin). On the loop, start spawns the child in a session and
 * process group of its own (UV_PROCESS_DETACHED: setsid in the child),
 * reads stdout and stderr into buffers capped at max_output (past it: the
 * child is killed, or with `truncate` the rest is read into a scratch
 * buffer and dropped, so the child never blocks on a full pipe), writes
 * stdin and closes it. The op ends once the child has been reaped
 * (libuv's exit callback), both output pipes are closed (end of file, or
 * closed by us) and every libuv handle it opened (the process, two or
 * three pipes) has run its close callback (`pending` counts them); only
 * then does it answer, with sx__io_finish: when the process sees the
 * answer, the child is gone and so are its descriptors. Timeouts and
 * grace periods use the loop's timer heap (sx__iotimer), which needs no
 * handle.
 *
 * Why a process group: `sh -c '...'` and many tools fork; signalling the
 * child's pid alone would leave its children running as orphans that
 * still hold our pipes. Every signal goes to the group (kill(-pid)), and
 * when the child exits, whatever it left running in its group is sent
 * SIGKILL, so the command ends when the child does. The cost: a child in
 * its own session no longer gets the terminal's SIGINT or SIGHUP (the
 * engine owns its lifetime instead), and a descendant that leaves the
 * group (setsid, setpgid) is out of our reach; if it keeps stdout open,
 * the command waits for it until timeout_ms or cancellation.
 *
 * Killing (its timeout_ms, output past max_output without truncate,
 * cancellation) sends SIGTERM to the group and SIGKILL once grace_ms has
 * passed, or SIGKILL at once when grace_ms is 0 or the engine is stopping. The
 * engine's stop finishes every process before it quits the loops, so an op is
 * usually cancelled before sx__io_quitting turns true; the grace period
 * therefore wakes every KILL_SLICE_MS to look again, which bounds how long a
 * stopping engine waits for a child that ignores SIGTERM.
 *
 * SIGPIPE: writing stdin to a child that exited without reading it raises
 * SIGPIPE in the writing thread (libuv writes with write(2), and its
 * pipes are socketpairs), whose default action ends the whole host. The
 * loop thread blocks SIGPIPE for itself (the write then fails with EPIPE,
 * which we ignore) and consumes the pending signal. The child starts with
 * libuv's reset: default dispositions and an empty signal mask.
 *
 * Threads: cmd_exec [worker]; everything else [loop]. Nothing here is
 * shared between threads except through the hand-off in loop.c (the queue's
 * release/acquire publishes the parsed arguments to the loop), so there
 * are no atomics in this file.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/commands/commands.h"
#include "engine/commands/exec.h"
#include "engine/io/io.h"
#include "process/fault.h"

#define KILL_SLICE_NS (50 * 1000000u)
#define FIRST_READ 4096    /* first output buffer; then it doubles */
#define DISCARD_SIZE 16384 /* the scratch buffer for output dropped */

static const sx_payload nil = { NULL, 0 };

/* One captured output stream. */
typedef struct {
    uv_pipe_t pipe;
    uint8_t *buf; /* owned by the op (exec_fini); len <= max_output */
    size_t len, cap;
    uint64_t total; /* bytes the child wrote, kept or dropped (truncate) */
    bool open;      /* uv_close not called yet */
} exec_out;

typedef struct {
    sx__ioop op; /* first */
    /* Arguments, parsed on the worker; owned by the op (exec_fini). */
    char **argv; /* NULL-terminated; the strings live in strs */
    char **env;  /* NULL-terminated "NAME=value", or NULL: inherit */
    char *cwd;   /* in strs, or NULL */
    char *strs;
    uint8_t *in; /* stdin bytes, or NULL: /dev/null */
    size_t in_len;
    size_t max_output;
    bool truncate;        /* past max_output: drop the rest, not kill */
    bool check;           /* a non-zero exit or a signal is an error */
    uint64_t deadline_ns; /* the op's own timeout, absolute; 0 = none */
    int64_t timeout_ms;
    int64_t grace_ms;
    /* [loop] */
    uv_process_t child;
    uv_pipe_t pin;
    exec_out out[2]; /* stdout, stderr */
    /* truncate: where output past max_output is read to be dropped
     * (both streams: each read's alloc and callback come in one go);
     * allocated at the first such read. */
    uint8_t *discard;
    uv_write_t wreq;
    sx__iotimer timer; /* timeout_ms, then the kill's grace period */
    unsigned pending;  /* handles opened whose close callback has not run */
    bool in_open, child_open;
    bool exited;         /* reaped (or never spawned) */
    bool killing;        /* SIGTERM sent, SIGKILL due at kill_at_ns */
    bool killed;         /* SIGKILL sent */
    uint64_t kill_at_ns; /* monotonic */
    int64_t status;
    int term_signal;
    int error; /* the first failure; answered instead of the result */
    char msg[256];
} exec_op;

static void progress(exec_op *x);

/* ---- signals ---- */

/* [loop] Blocks SIGPIPE in this loop thread (once per thread). */
static void sigpipe_block(void)
{
    static _Thread_local bool blocked;
    if (blocked)
        return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    blocked = true;
}

/* [loop] Consumes a SIGPIPE left pending by a failed write, so that it is
 * not delivered if someone unblocks the signal later. */
static void sigpipe_drain(void)
{
    sigset_t set, pend;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    if (sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE) == 1) {
        struct timespec zero = { 0, 0 };
        sigtimedwait(&set, NULL, &zero);
    }
}

/* Signals the child's process group. Only before the child is reaped:
 * until then its pid (= the group id) cannot be reused. */
static void child_signal(exec_op *x, int sig)
{
    if (kill(-(pid_t)x->child.pid, sig) != 0)
        kill((pid_t)x->child.pid, sig);
}

static void kill_now(exec_op *x)
{
    child_signal(x, SIGKILL);
    x->killed = true;
    sx__io_timer_del(&x->op, &x->timer);
}

/* Arms the timer for the end of the grace period, or sooner to look at
 * sx__io_quitting again (see the file comment). Without memory for the
 * timer, the grace period ends at once. */
static void arm_grace(exec_op *x)
{
    uint64_t due = sx__now_ns() + KILL_SLICE_NS;
    if (due > x->kill_at_ns)
        due = x->kill_at_ns;
    if (sx__io_timer_set(&x->op, &x->timer, due) != 0)
        kill_now(x);
}

/* Starts killing the child: SIGTERM, then SIGKILL after grace_ms; SIGKILL
 * at once when grace_ms is 0 or the loop is quitting (also when called
 * again during the grace period, once quitting). */
static void kill_start(exec_op *x)
{
    if (x->exited || x->killed)
        return;
    bool now = x->grace_ms == 0 || sx__io_quitting(&x->op);
    if (!x->killing) {
        x->killing = true;
        x->kill_at_ns = sx__now_ns() + (uint64_t)x->grace_ms * 1000000u;
        if (!now) {
            child_signal(x, SIGTERM);
            arm_grace(x);
            return;
        }
    } else if (!now) {
        return; /* already in the grace period */
    }
    kill_now(x);
}

/* ---- handles ---- */

static void on_closed(uv_handle_t *h)
{
    exec_op *x = h->data;
    x->pending--;
    progress(x);
}

static void close_handle(uv_handle_t *h, bool *open)
{
    if (!*open)
        return;
    *open = false;
    uv_close(h, on_closed);
}

static void close_pipes(exec_op *x)
{
    for (int i = 0; i < 2; i++)
        close_handle((uv_handle_t *)&x->out[i].pipe, &x->out[i].open);
    close_handle((uv_handle_t *)&x->pin, &x->in_open);
}

/* Ends the command early with error (the first one recorded wins): stop
 * reading and writing, kill the child; the answer follows the reaping.
 * x may be gone when it returns. */
static void exec_abort(exec_op *x, int error, const char *msg)
{
    if (x->error == 0) {
        x->error = error;
        snprintf(x->msg, sizeof x->msg, "%s", msg);
    }
    close_pipes(x);
    kill_start(x);
    progress(x);
}

/* ---- the answer ---- */

static void pack_out(sx_pack *pk, const char *key, const exec_out *o)
{
    sx_pack_str(pk, key);
    /* An empty output has no buffer; msgpack wants a pointer anyway. */
    sx_pack_bin(pk, o->buf != NULL ? (const void *)o->buf : "", o->len);
}

/* With check: a child that exited non-zero or was killed is an error,
 * SX_EFAILED, its message the exit and the last line of its stderr. */
static int check_failed(exec_op *x)
{
    const exec_out *o = &x->out[1];
    size_t end = o->len;
    while (end > 0 && (o->buf[end - 1] == '\n' || o->buf[end - 1] == '\r'))
        end--;
    size_t start = end;
    while (start > 0 && o->buf[start - 1] != '\n')
        start--;
    if (end - start > 160)
        start = end - 160;
    int n = x->term_signal != 0
                ? snprintf(x->msg, sizeof x->msg, "exec: killed by signal %d",
                           x->term_signal)
                : snprintf(x->msg, sizeof x->msg, "exec: exit status %d",
                           (int)x->status);
    if (end > start && n > 0 && (size_t)n < sizeof x->msg)
        snprintf(x->msg + n, sizeof x->msg - (size_t)n, ": %.*s",
                 (int)(end - start), (const char *)o->buf + start);
    return SX_EFAILED;
}

/* Releases the op and answers (sx__io_finish: the result and message
 * are copied out of the op first). */
static void finish(exec_op *x)
{
    char msg[sizeof x->msg];
    int error = x->error;
    if (error == 0 && x->op.cancelled) {
        error = SX_ECANCELLED; /* nobody reads it: the owner is gone */
        snprintf(x->msg, sizeof x->msg, "exec: cancelled");
    }
    sx__io_timer_del(&x->op, &x->timer);
    if (error == 0 && x->check && (x->term_signal != 0 || x->status != 0))
        error = check_failed(x);
    if (error != 0) {
        memcpy(msg, x->msg, sizeof msg);
        sx__io_finish(&x->op, nil, error, msg);
        return;
    }
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_map(&pk, x->truncate ? 7 : 4);
    sx_pack_str(&pk, "status");
    if (x->term_signal != 0)
        sx_pack_nil(&pk);
    else
        sx_pack_int(&pk, x->status);
    sx_pack_str(&pk, "signal");
    if (x->term_signal != 0)
        sx_pack_int(&pk, x->term_signal);
    else
        sx_pack_nil(&pk);
    pack_out(&pk, "stdout", &x->out[0]);
    pack_out(&pk, "stderr", &x->out[1]);
    if (x->truncate) {
        sx_pack_str(&pk, "truncated");
        sx_pack_bool(&pk, x->out[0].total > x->out[0].len ||
                              x->out[1].total > x->out[1].len);
        sx_pack_str(&pk, "stdout_total");
        sx_pack_uint(&pk, x->out[0].total);
        sx_pack_str(&pk, "stderr_total");
        sx_pack_uint(&pk, x->out[1].total);
    }
    if (pk.err != 0)
        sx__io_finish(&x->op, nil, SX_ENOMEM,
                      "exec: out of memory for the result");
    else
        sx__io_finish(&x->op, sx_pack_payload(&pk), 0, NULL);
    sx_pack_fini(&pk);
}

/* Moves the op on: once the child is reaped and the output pipes are
 * closed, close what is left; once every close callback has run, finish.
 * Called last by every callback: x may be gone when it returns. */
static void progress(exec_op *x)
{
    if (!x->exited || x->out[0].open || x->out[1].open)
        return;
    close_handle((uv_handle_t *)&x->pin, &x->in_open);
    close_handle((uv_handle_t *)&x->child, &x->child_open);
    if (x->pending == 0)
        finish(x);
}

/* ---- callbacks ---- */

static void on_child_exit(uv_process_t *p, int64_t status, int term_signal)
{
    exec_op *x = p->data;
    /* Whatever the child left running in its group goes too (the group
     * id stays reserved while it has members, so this reaches no one
     * else). ESRCH when nothing is left: the usual case. */
    kill(-(pid_t)p->pid, SIGKILL);
    x->exited = true;
    x->status = status;
    x->term_signal = term_signal;
    if (x->killing)
        sx__io_timer_del(&x->op, &x->timer); /* no grace period left */
    close_handle((uv_handle_t *)&x->child, &x->child_open);
    if (x->error != 0 || x->op.cancelled)
        close_pipes(x); /* the output is not wanted */
    progress(x);
}

static exec_out *out_of(exec_op *x, const void *h)
{
    return h == (const void *)&x->out[0].pipe ? &x->out[0] : &x->out[1];
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    exec_op *x = h->data;
    exec_out *o = out_of(x, h);
    /* Room for one byte past max_output, to see it being exceeded; with
     * truncate, for max_output, and then the discard buffer. */
    size_t limit = x->truncate ? x->max_output : x->max_output + 1;
    if (x->truncate && o->len == limit) {
        if (x->discard == NULL)
            x->discard =
                SX__FAULT(SX__FAULT_EXEC_OUT) ? NULL : malloc(DISCARD_SIZE);
        *buf = x->discard != NULL
                   ? uv_buf_init((char *)x->discard, DISCARD_SIZE)
                   : uv_buf_init(NULL, 0); /* UV_ENOBUFS */
        return;
    }
    if (o->len == o->cap) {
        size_t ncap = o->cap > 0 ? o->cap * 2 : FIRST_READ;
        if (ncap > limit)
            ncap = limit;
        uint8_t *nb =
            SX__FAULT(SX__FAULT_EXEC_OUT) ? NULL : realloc(o->buf, ncap);
        if (nb == NULL) {
            *buf = uv_buf_init(NULL, 0); /* on_read gets UV_ENOBUFS */
            return;
        }
        o->buf = nb;
        o->cap = ncap;
    }
    *buf = uv_buf_init((char *)o->buf + o->len, (unsigned)(o->cap - o->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    exec_op *x = s->data;
    exec_out *o = out_of(x, s);
    const char *name = o == &x->out[0] ? "stdout" : "stderr";
    char msg[128];
    if (n > 0) {
        o->total += (uint64_t)n;
        if (buf->base == (char *)x->discard)
            return; /* past max_output with truncate: dropped */
        o->len += (size_t)n;
        if (o->len > x->max_output) {
            o->len = x->max_output;
            snprintf(msg, sizeof msg,
                     "exec: %s exceeded max_output (%zu bytes)", name,
                     x->max_output);
            exec_abort(x, SX_ELIMIT, msg);
        }
        return;
    }
    if (n == 0)
        return; /* EAGAIN */
    if (n == UV_ENOBUFS) {
        snprintf(msg, sizeof msg, "exec: out of memory for %s", name);
        exec_abort(x, SX_ENOMEM, msg);
        return;
    }
    /* End of file, or an error on the pipe: nothing more comes. */
    close_handle((uv_handle_t *)&o->pipe, &o->open);
    progress(x);
}

static void on_written(uv_write_t *w, int status)
{
    exec_op *x = w->data;
    if (status == UV_EPIPE)
        sigpipe_drain(); /* the child did not read it all: its business */
    /* Closing stdin is the child's end of file. A pipe already closing
     * (status UV_ECANCELED) is left alone. */
    close_handle((uv_handle_t *)&x->pin, &x->in_open);
}

static void on_timer(sx__iotimer *t)
{
    exec_op *x = (exec_op *)((char *)t - offsetof(exec_op, timer));
    if (!x->killing) {
        char msg[128];
        snprintf(msg, sizeof msg,
                 "exec: timeout_ms passed (%" PRId64 " ms); the child was "
                 "killed",
                 x->timeout_ms);
        exec_abort(x, SX_ETIMEDOUT, msg);
        return;
    }
    if (x->exited || x->killed)
        return;
    if (sx__io_quitting(&x->op) || sx__now_ns() >= x->kill_at_ns)
        kill_now(x);
    else
        arm_grace(x);
}

/* ---- the op ---- */

/* How many bytes of s to show in a message: all of it up to max bytes,
 * else at most max - 3 (for "...") cut at a UTF-8 character boundary (a
 * message travels as a msgpack str, and half a character makes strict
 * readers drop it). */
static int shown(const char *s, size_t max, const char **dots)
{
    size_t n = strlen(s);
    *dots = "";
    if (n <= max)
        return (int)n;
    n = max - 3;
    for (int back = 0; back < 3 && ((unsigned char)s[n] & 0xc0) == 0x80; back++)
        n--;
    *dots = "...";
    return (int)n;
}

static void spawn_failed(exec_op *x, int rc)
{
    char why[96];
    uv_strerror_r(rc, why, sizeof why);
    x->error = rc;
    struct stat st;
    const char *dots;
    /* The name is cut so that the reason always fits. */
    if (x->cwd != NULL && (stat(x->cwd, &st) != 0 || !S_ISDIR(st.st_mode))) {
        /* chdir in the child failed: name the directory, not argv[0]. */
        int n = shown(x->cwd, 128, &dots);
        snprintf(x->msg, sizeof x->msg, "exec: cwd %.*s%s: %s", n, x->cwd, dots,
                 why);
    } else {
        int n = shown(x->argv[0], 128, &dots);
        snprintf(x->msg, sizeof x->msg, "exec: %.*s%s: %s", n, x->argv[0], dots,
                 why);
    }
    x->exited = true; /* nothing to wait for */
    close_pipes(x);
    progress(x);
}

static void exec_start(sx__ioop *op)
{
    exec_op *x = (exec_op *)op;
    uv_loop_t *uv = sx__io_uv(op);
    sigpipe_block();
    x->timer.fire = on_timer;
    /* Every handle is counted as it is initialised; libuv needs each one
     * closed, even when the spawn fails. */
    uv_stdio_container_t stdio[3];
    stdio[0].flags = UV_IGNORE; /* the child reads /dev/null */
    if (x->in != NULL) {
        uv_pipe_init(uv, &x->pin, 0);
        x->pin.data = x;
        x->in_open = true;
        x->pending++;
        stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
        stdio[0].data.stream = (uv_stream_t *)&x->pin;
    }
    for (int i = 0; i < 2; i++) {
        uv_pipe_init(uv, &x->out[i].pipe, 0);
        x->out[i].pipe.data = x;
        x->out[i].open = true;
        x->pending++;
        stdio[1 + i].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
        stdio[1 + i].data.stream = (uv_stream_t *)&x->out[i].pipe;
    }
    uv_process_options_t o;
    memset(&o, 0, sizeof o);
    o.exit_cb = on_child_exit;
    o.file = x->argv[0];
    o.args = x->argv;
    o.env = x->env;
    o.cwd = x->cwd;
    o.flags = UV_PROCESS_DETACHED;
    o.stdio_count = 3;
    o.stdio = stdio;
    int rc = uv_spawn(uv, &x->child, &o);
    /* The process handle is initialised even when the spawn fails. */
    x->child.data = x;
    x->child_open = true;
    x->pending++;
    if (rc != 0) {
        spawn_failed(x, rc);
        return;
    }
    for (int i = 0; i < 2; i++)
        if (uv_read_start((uv_stream_t *)&x->out[i].pipe, on_alloc, on_read) !=
            0)
            close_handle((uv_handle_t *)&x->out[i].pipe, &x->out[i].open);
    if (x->in != NULL) {
        uv_buf_t b = uv_buf_init((char *)x->in, (unsigned)x->in_len);
        x->wreq.data = x;
        if (uv_write(&x->wreq, (uv_stream_t *)&x->pin, &b, 1, on_written) != 0)
            close_handle((uv_handle_t *)&x->pin, &x->in_open);
    }
    if (x->deadline_ns != 0 &&
        sx__io_timer_set(op, &x->timer, x->deadline_ns) != 0) {
        exec_abort(x, SX_ENOMEM, "exec: no memory for timeout_ms");
        return;
    }
    progress(x); /* a pipe may have closed above */
}

static void exec_cancel(sx__ioop *op)
{
    exec_abort((exec_op *)op, SX_ECANCELLED, "exec: cancelled");
}

static void exec_fini(sx__ioop *op)
{
    exec_op *x = (exec_op *)op;
    free(x->argv);
    free(x->env);
    free(x->strs);
    free(x->in);
    free(x->out[0].buf);
    free(x->out[1].buf);
    free(x->discard);
}

static const sx__ioop_vt exec_vt = { "exec", exec_start, exec_cancel,
                                     exec_fini };

/* ---- the handler [worker] ---- */

/* Parses the arguments (exec_args.c) and hands the op to the loop. */
static int cmd_exec(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                    sx_payload args, sx_completer *done)
{
    (void)user;
    sx__exec_args a;
    char msg[192];
    memset(&a, 0, sizeof a);
    /* With a retry policy, an "@retry" child runs the exec (the map less
     * "retry") until it succeeds or runs out (commands/helpers.c). */
    if (sx_map_get(args, "retry", NULL) == 0)
        return sx__retry_args(e, pid, tag, SX_CMD_EXEC, args, "exec", done);
    int rc = sx__exec_parse(args, &a, msg, sizeof msg);
    if (rc != 0) {
        sx__exec_args_free(&a);
        if (rc != SX_EINVAL)
            return rc;
        sx_complete(done, nil, SX_EINVAL, msg);
        return 0;
    }
    exec_op *x = (exec_op *)sx__io_op_new(sizeof(exec_op), &exec_vt, done);
    if (x == NULL) {
        sx__exec_args_free(&a);
        return SX_ENOMEM;
    }
    /* The op owns the arguments from here (exec_fini frees them). */
    x->argv = a.argv;
    x->env = a.env;
    x->cwd = a.cwd;
    x->strs = a.strs;
    x->in = a.in;
    x->in_len = a.in_len;
    x->max_output = (size_t)a.max_output;
    x->truncate = a.truncate;
    x->check = a.check;
    x->timeout_ms = a.timeout_ms;
    x->deadline_ns = a.timeout_ms > 0 ? sx__after_ms(a.timeout_ms) : 0;
    x->grace_ms = a.grace_ms;
    sx__io_submit(&x->op);
    return 0;
}

void sx__cmd_exec_register(sx_engine *e)
{
    e->cmds[SX_CMD_EXEC] = (sx__cmd){ cmd_exec, NULL, "exec", false };
}

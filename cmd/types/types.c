/* cmd/types/types.c — the process types stepxd ships, exactly as PROTOCOL.md
 * describes them (for examples, tests and benchmarks):
 *
 *   counter.run [n]            n no-op yields, one per step; DONE n
 *   sleeper.run [ms]           one sleep of ms; DONE ms (ms > 2^40: init
 *                              refuses it)
 *   echo.serve  []             IDLE; echoes each message to its sender;
 *                              topic "stop" or a cancel: DONE with the count
 *   fail.run    [message]      fails at once with message
 *   exec.run    [argv, stdin?, max_output?]
 *                              runs argv; DONE {status, signal, stdout,
 *                              stderr, truncated, stdout_total,
 *                              stderr_total}: each stream cut at
 *                              max_output (default 1 MiB), the rest
 *                              read and dropped
 *   tally.run   [n, ms]        checkpointed (SX_TYPE_CHECKPOINTED): n
 *                              steps, a sleep of ms in each; a message
 *                              "add" with an int adds it to a sum; DONE
 *                              [n, init_ms, sum], init_ms the wall-clock
 *                              time (ms since the epoch) its init ran:
 *                              on a daemon with a store it resumes from
 *                              its last step after a crash, so init_ms
 *                              stays that of its first run
 *   fanout.run  [n, type, method, input, opts?]
 *                              spawn-and-waits n children of type.method
 *                              with input (an array of values) and the
 *                              spawn options opts (docs/COMMANDS.md: node,
 *                              place, deadline_ms, ...); DONE with
 *                              their results in child order; fails
 *                              SX_ETOOLARGE as soon as they add up to
 *                              more than the engine's max_result
 *   watcher.monitor [pid]      monitors pid (of any node); DONE with the
 *                              @exit message's data ({ok, result} or
 *                              {ok: false, error, code, message})
 *   watcher.link    [pid]      links to pid and stays IDLE: pid's failure
 *                              (or its node's loss: noconnection) ends
 *                              it; "stop": DONE nil
 *   watcher.trap    [pid]      traps exits, links to pid; DONE with the
 *                              @exit message's data
 *
 * Threads: init on the submitting thread, steps on workers (engine rules).
 */
#include "cmd/types/types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const sx_payload nil = { NULL, 0 };

static const char *const run_methods[] = { "run", NULL };
static const char *const serve_methods[] = { "serve", NULL };

/* ---- counter ---- */

typedef struct {
    int64_t n, left;
} counter_st;

static int counter_init(void *st, const sx_init_ctx *c, const char *m,
                        const sx_payload *in, size_t n)
{
    counter_st *s = st;
    if (n != 1 || sx_payload_get_int(in[0], &s->n) != 0 || s->n < 0)
        return sx_init_error(c, SX_EINVAL,
                             "counter.%s takes [n]: one integer, 0 or more", m);
    s->left = s->n;
    return 0;
}

static int counter_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    counter_st *s = st;
    (void)ev, (void)n;
    if (s->left-- > 0) {
        sx_yield(out, SX_CMD_NOOP, 1, nil);
        return 0;
    }
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(b, s->n));
    return 0;
}

/* ---- tally ---- */

typedef struct {
    int64_t n, done, ms, init_ms, sum;
    int64_t sleeping; /* 1 while its sleep is in flight */
} tally_st;

static int tally_init(void *st, const sx_init_ctx *c, const char *m,
                      const sx_payload *in, size_t n)
{
    tally_st *s = st;
    if (n != 2 || sx_payload_get_int(in[0], &s->n) != 0 || s->n < 0 ||
        sx_payload_get_int(in[1], &s->ms) != 0 || s->ms < 0 || s->ms > 3600000)
        return sx_init_error(c, SX_EINVAL,
                             "tally.%s takes [n, ms]: n an integer, 0 or "
                             "more; ms from 0 to 3600000",
                             m);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->init_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    return 0;
}

static int tally_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    tally_st *s = st;
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (ev[i].type == SX_EVENT_YIELD_COMPLETE)
            s->sleeping = 0;
        if (ev[i].type == SX_EVENT_MESSAGE &&
            strcmp(ev[i].topic, SX_TOPIC_CANCEL) == 0) {
            sx_fail_code(out, SX_ECANCELLED, "cancelled");
            return 0;
        }
        if (ev[i].type == SX_EVENT_MESSAGE && strcmp(ev[i].topic, "add") == 0 &&
            sx_payload_get_int(ev[i].data, &v) == 0)
            s->sum += v;
    }
    if (s->sleeping) { /* a message came: its sleep goes on */
        sx_wait(out);
        return 0;
    }
    if (s->done >= s->n) {
        sx_pack pk;
        sx_pack_init(&pk);
        sx_pack_array(&pk, 3);
        sx_pack_int(&pk, s->n);
        sx_pack_int(&pk, s->init_ms);
        sx_pack_int(&pk, s->sum);
        int rc = pk.err;
        if (rc == 0)
            sx_done(out, sx_pack_payload(&pk));
        sx_pack_fini(&pk);
        return rc;
    }
    s->done++;
    s->sleeping = 1;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_yield(out, SX_CMD_SLEEP, 1, sx_payload_int(b, s->ms));
    sx_wait(out);
    return 0;
}

/* ---- sleeper ---- */

typedef struct {
    int64_t ms;
    int slept;
} sleeper_st;

/* The sleep command's bound (docs/COMMANDS.md): a longer sleep is refused
 * here, at submit, rather than failing the process at its first step. */
#define SLEEPER_MAX_MS ((int64_t)1 << 40)

static int sleeper_init(void *st, const sx_init_ctx *c, const char *m,
                        const sx_payload *in, size_t n)
{
    sleeper_st *s = st;
    if (n != 1 || sx_payload_get_int(in[0], &s->ms) != 0 ||
        s->ms > SLEEPER_MAX_MS)
        return sx_init_error(c, SX_EINVAL,
                             "sleeper.%s takes [ms]: one integer up to "
                             "2^40",
                             m);
    return 0;
}

static int sleeper_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    sleeper_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    if (!s->slept) {
        s->slept = 1;
        sx_yield(out, SX_CMD_SLEEP, 1, sx_payload_int(b, s->ms));
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type != SX_EVENT_YIELD_COMPLETE)
            continue; /* messages (a cancel) do not cut the sleep short */
        if (ev[i].error != 0) {
            sx_fail(out, ev[i].error_msg);
            return 0;
        }
        sx_done(out, sx_payload_int(b, s->ms));
        return 0;
    }
    sx_wait(out);
    return 0;
}

/* ---- echo ---- */

typedef struct {
    int64_t echoed;
} echo_st;

static int echo_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in;
    return n == 0 ? 0 : SX_EINVAL;
}

static int echo_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    echo_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    for (size_t i = 0; i < n; i++) {
        const sx_event *v = &ev[i];
        if (v->type != SX_EVENT_MESSAGE)
            continue;
        if (strcmp(v->topic, "stop") == 0 ||
            strcmp(v->topic, SX_TOPIC_CANCEL) == 0) {
            sx_done(out, sx_payload_int(b, s->echoed));
            return 0;
        }
        /* sx_send, not a yielded SX_CMD_SEND: a step that ends DONE drops
         * its yields but not its sends, so messages that arrive in the
         * same batch as "stop" are echoed too, and before the outcome is
         * published. A sender that is gone makes it a dead letter. */
        int rc = sx_send(out, v->from, v->topic, v->data);
        if (rc != 0)
            return rc;
        s->echoed++;
    }
    sx_idle(out);
    return 0;
}

/* ---- fail ---- */

typedef struct {
    char msg[256];
} fail_st;

static int fail_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    fail_st *s = st;
    if (n != 1)
        return SX_EINVAL;
    int rc = sx_payload_get_str(in[0], s->msg, sizeof s->msg);
    if (rc == SX_ELIMIT) { /* a long message is cut, not refused */
        sx_unpack u;
        const char *p;
        size_t len;
        sx_unpack_init(&u, in[0]);
        if (sx_unpack_str(&u, &p, &len) != 0)
            return SX_EINVAL;
        /* Cut at a character boundary: the message travels as a msgpack
         * str (UTF-8), and half a character makes strict readers fail. */
        size_t k = sizeof s->msg - 1;
        for (int back = 0; back < 3 && ((unsigned char)p[k] & 0xc0) == 0x80;
             back++)
            k--;
        if (((unsigned char)p[k] & 0xc0) == 0x80)
            k = sizeof s->msg - 1; /* not UTF-8: cut where it falls */
        memcpy(s->msg, p, k);
        s->msg[k] = 0;
        return 0;
    }
    return rc == 0 ? 0 : SX_EINVAL;
}

static int fail_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    fail_st *s = st;
    (void)ev, (void)n;
    sx_fail(out, s->msg);
    return 0;
}

/* ---- exec ---- */

/* The exec command's largest max_output (docs/COMMANDS.md). */
#define EXEC_MAX_OUTPUT ((int64_t)64 << 20)

typedef struct {
    uint8_t *args; /* owned: the SX_CMD_EXEC argument map */
    size_t len;
    int started;
} exec_st;

static int exec_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    exec_st *s = st;
    if (n < 1 || n > 3)
        return SX_EINVAL;
    sx_unpack u;
    uint32_t argc;
    sx_unpack_init(&u, in[0]);
    if (sx_unpack_array(&u, &argc) != 0 || argc == 0)
        return SX_EINVAL;
    for (uint32_t i = 0; i < argc; i++)
        if (sx_unpack_str(&u, NULL, NULL) != 0)
            return SX_EINVAL;
    if (!sx_unpack_done(&u))
        return SX_EINVAL;
    if (n >= 2) {
        sx_unpack_init(&u, in[1]);
        int t = sx_unpack_type(&u);
        if (t != SX_MP_STR && t != SX_MP_BIN && t != SX_MP_NIL)
            return SX_EINVAL;
    }
    /* The cap per stream: what the exec command takes (COMMANDS.md), or
     * nil for its default. */
    bool cap = false;
    if (n == 3) {
        int64_t v;
        sx_unpack_init(&u, in[2]);
        if (sx_unpack_type(&u) != SX_MP_NIL) {
            if (sx_payload_get_int(in[2], &v) != 0 || v < 0 ||
                v > EXEC_MAX_OUTPUT)
                return SX_EINVAL;
            cap = true;
        }
    }
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_map(&pk, 2 + (n >= 2) + cap);
    sx_pack_str(&pk, "argv");
    sx_pack_raw(&pk, in[0]);
    if (n >= 2) {
        sx_pack_str(&pk, "stdin");
        sx_pack_raw(&pk, in[1]);
    }
    if (cap) {
        sx_pack_str(&pk, "max_output");
        sx_pack_raw(&pk, in[2]);
    }
    /* Output past the cap is dropped, not a failure: a chatty program
     * still finishes with its status, and its result stays bounded. */
    sx_pack_str(&pk, "truncate");
    sx_pack_bool(&pk, true);
    if (pk.err != 0) {
        int rc = pk.err;
        sx_pack_fini(&pk);
        return rc;
    }
    s->args = pk.data; /* ownership passes to the state */
    s->len = pk.len;
    return 0;
}

static void exec_close(void *st)
{
    exec_st *s = st;
    free(s->args);
}

/* Finishes with the exec command's whole answer, {status, signal, stdout,
 * stderr, truncated, stdout_total, stderr_total} (PROTOCOL.md); a command
 * error fails the process. */
static int exec_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    exec_st *s = st;
    if (!s->started) {
        s->started = 1;
        sx_yield(out, SX_CMD_EXEC, 1, (sx_payload){ s->args, s->len });
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type != SX_EVENT_YIELD_COMPLETE)
            continue;
        if (ev[i].error != 0) {
            sx_fail(out, ev[i].error_msg);
            return 0;
        }
        sx_done(out, ev[i].data);
        return 0;
    }
    sx_wait(out);
    return 0;
}

/* ---- fanout ---- */

typedef struct {
    int64_t n, got;
    uint8_t *spawn; /* owned: [type, method, input] for SX_CMD_SPAWN_WAIT */
    size_t spawn_len;
    sx_payload *results; /* owned copies, in child order */
    /* The result's size so far: the array's header and the results in;
     * past max_result (the engine's) the fanout fails at once rather
     * than hold more that it could never finish with. */
    size_t bytes, max_result;
    int started;
} fanout_st;

#define FANOUT_MAX 100000
#define FANOUT_NAME_MAX 255 /* a child type or method name, bytes */
#define FANOUT_INPUT_MAX 64 /* values in child_input */

static int fanout_init(void *st, const sx_init_ctx *c, const char *m,
                       const sx_payload *in, size_t n)
{
    (void)m;
    fanout_st *s = st;
    if ((n != 4 && n != 5) || sx_payload_get_int(in[0], &s->n) != 0 ||
        s->n < 0 || s->n > FANOUT_MAX)
        return SX_EINVAL;
    sx_engine_config cfg;
    if (sx_engine_config_get(sx_init_engine(c), &cfg) != 0)
        return SX_EINVAL;
    s->max_result = cfg.max_result;
    s->bytes = s->n < 16 ? 1 : s->n < 65536 ? 3 : 5; /* msgpack array */
    /* What the spawn command takes (docs/COMMANDS.md): refused here, not
     * as every child's spawn failing. */
    sx_unpack u;
    const char *p;
    size_t len;
    for (size_t i = 1; i <= 2; i++) {
        sx_unpack_init(&u, in[i]);
        if (sx_unpack_str(&u, &p, &len) != 0 || len > FANOUT_NAME_MAX ||
            memchr(p, 0, len) != NULL)
            return SX_EINVAL;
    }
    uint32_t k;
    sx_unpack_init(&u, in[3]);
    if (sx_unpack_array(&u, &k) != 0 || k > FANOUT_INPUT_MAX)
        return SX_EINVAL;
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_array(&pk, (uint32_t)(n - 1));
    sx_pack_raw(&pk, in[1]);
    sx_pack_raw(&pk, in[2]);
    sx_pack_raw(&pk, in[3]);
    if (n == 5)
        sx_pack_raw(&pk, in[4]); /* the spawn options: checked per spawn */
    if (pk.err != 0) {
        int rc = pk.err;
        sx_pack_fini(&pk);
        return rc;
    }
    s->results = calloc(s->n > 0 ? (size_t)s->n : 1, sizeof(sx_payload));
    if (s->results == NULL) {
        sx_pack_fini(&pk);
        return SX_ENOMEM;
    }
    s->spawn = pk.data; /* ownership passes to the state */
    s->spawn_len = pk.len;
    return 0;
}

static void fanout_close(void *st)
{
    fanout_st *s = st;
    if (s->results != NULL)
        for (int64_t i = 0; i < s->n; i++)
            free((void *)s->results[i].data);
    free(s->results);
    free(s->spawn);
}

static int fanout_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    fanout_st *s = st;
    if (!s->started) {
        s->started = 1;
        for (int64_t i = 0; i < s->n; i++) {
            int rc = sx_yield(out, SX_CMD_SPAWN_WAIT, (uint64_t)i,
                              (sx_payload){ s->spawn, s->spawn_len });
            if (rc != 0)
                return rc;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const sx_event *v = &ev[i];
        if (v->type != SX_EVENT_YIELD_COMPLETE || v->tag >= (uint64_t)s->n)
            continue;
        if (v->error != 0) {
            /* The child's message whole: a fixed buffer would cut it, at
             * times in the middle of a UTF-8 character. */
            const char *why = v->error_msg != NULL ? v->error_msg : "failed";
            size_t len = strlen(why) + 32; /* "child <u64>: " fits in 32 */
            char *msg = malloc(len);
            if (msg == NULL)
                return SX_ENOMEM;
            snprintf(msg, len, "child %llu: %s", (unsigned long long)v->tag,
                     why);
            /* A child's result over max_result makes the fanout's own
             * too large: that code passes on; any other is a failure. */
            sx_fail_code(out,
                         v->error == SX_ETOOLARGE ? SX_ETOOLARGE : SX_EFAILED,
                         msg); /* copies it */
            free(msg);
            return 0;
        }
        /* An empty result packs as nil, one byte. */
        size_t add = v->data.len > 0 ? v->data.len : 1;
        if (s->bytes > s->max_result || add > s->max_result - s->bytes) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "result of at least %zu bytes is over the limit of %zu "
                     "(max_result)",
                     s->bytes + add, s->max_result);
            sx_fail_code(out, SX_ETOOLARGE, msg);
            return 0;
        }
        s->bytes += add;
        uint8_t *copy = NULL;
        if (v->data.len > 0) {
            copy = malloc(v->data.len);
            if (copy == NULL)
                return SX_ENOMEM;
            memcpy(copy, v->data.data, v->data.len);
        }
        s->results[v->tag] = (sx_payload){ copy, v->data.len };
        s->got++;
    }
    if (s->got < s->n) {
        sx_wait(out);
        return 0;
    }
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_array(&pk, (uint32_t)s->n);
    for (int64_t i = 0; i < s->n; i++)
        sx_pack_raw(&pk, s->results[i]);
    int rc = pk.err;
    if (rc == 0)
        sx_done(out, sx_pack_payload(&pk));
    sx_pack_fini(&pk);
    return rc;
}

/* ---- watcher ---- */

typedef struct {
    sx_pid target;
    char method[8];
    int phase; /* 0: start; 1: set up */
} watcher_st;

static const char *const watcher_methods[] = { "monitor", "link", "trap",
                                               NULL };

static int watcher_init(void *st, const sx_init_ctx *c, const char *m,
                        const sx_payload *in, size_t n)
{
    watcher_st *s = st;
    sx_unpack u;
    if (n == 1)
        sx_unpack_init(&u, in[0]);
    if (n != 1 || sx_unpack_pid(&u, &s->target) != 0)
        return sx_init_error(c, SX_EINVAL,
                             "watcher.%s takes [pid]: a PID, as text or "
                             "[node, host, id]",
                             m);
    snprintf(s->method, sizeof s->method, "%s", m);
    return 0;
}

static int watcher_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    watcher_st *s = st;
    bool link = strcmp(s->method, "monitor") != 0;
    bool trap = strcmp(s->method, "trap") == 0;
    if (s->phase == 0) {
        s->phase = 1;
        if (trap) {
            int rc = sx_yieldf(out, SX_CMD_TRAP_EXIT, 1, "[b]", true);
            if (rc != 0)
                return rc;
        }
        return sx_yieldf(out, link ? SX_CMD_LINK : SX_CMD_MONITOR, 2, "[p]",
                         s->target);
    }
    for (size_t i = 0; i < n; i++) {
        const sx_event *v = &ev[i];
        if (v->type == SX_EVENT_YIELD_COMPLETE && v->error != 0) {
            sx_fail(out, v->error_msg != NULL ? v->error_msg
                                              : sx_strerror(v->error));
            return 0;
        }
        if (v->type != SX_EVENT_MESSAGE)
            continue;
        if (strcmp(v->topic, SX_TOPIC_EXIT) == 0) {
            sx_done(out, v->data);
            return 0;
        }
        if (strcmp(v->topic, "stop") == 0 ||
            strcmp(v->topic, SX_TOPIC_CANCEL) == 0) {
            sx_done(out, nil);
            return 0;
        }
    }
    sx_idle(out);
    return 0;
}

static const sx_process_type types[] = {
    { .name = "counter",
      .state_size = sizeof(counter_st),
      .init = counter_init,
      .step = counter_step,
      .methods = run_methods },
    { .name = "sleeper",
      .state_size = sizeof(sleeper_st),
      .init = sleeper_init,
      .step = sleeper_step,
      .methods = run_methods },
    { .name = "echo",
      .state_size = sizeof(echo_st),
      .init = echo_init,
      .step = echo_step,
      .methods = serve_methods },
    { .name = "fail",
      .state_size = sizeof(fail_st),
      .init = fail_init,
      .step = fail_step,
      .methods = run_methods },
    { .name = "exec",
      .state_size = sizeof(exec_st),
      .init = exec_init,
      .step = exec_step,
      .close = exec_close,
      .methods = run_methods },
    { .name = "tally",
      .state_size = sizeof(tally_st),
      .init = tally_init,
      .step = tally_step,
      .methods = run_methods,
      .flags = SX_TYPE_CHECKPOINTED },
    { .name = "fanout",
      .state_size = sizeof(fanout_st),
      .init = fanout_init,
      .step = fanout_step,
      .close = fanout_close,
      .methods = run_methods },
    { .name = "watcher",
      .state_size = sizeof(watcher_st),
      .init = watcher_init,
      .step = watcher_step,
      .methods = watcher_methods },
};

int sx_types_register_builtin(sx_engine *e)
{
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        int rc = sx_engine_register(e, &types[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

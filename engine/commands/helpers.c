/* engine/commands/helpers.c — the engine's own process types behind two
 * commands that take more than one answer to make theirs (docs/
 * COMMANDS.md, "Retries" and spawn-all):
 *
 * - "@retry" runs one command (a spawn-wait, an exec, any other) again
 *   after a backoff while it answers an error, up to a restart policy's
 *   max_restarts more times; it finishes with the first success, or with
 *   the last error ("after N attempts: ..."). A yield with a retry policy
 *   (sx_yield_with, the "retry" option of spawn-wait and exec) is a
 *   spawn-wait of one of these.
 * - "@all" spawns every child of a spawn-all with spawn-wait, collects
 *   each one's outcome and finishes with all of them, in child order.
 *
 * Both are children of the process that yielded, terminated when it ends
 * (SX_SCOPE_TERMINATE), so that nothing they started outlives it unasked.
 * They are plain processes: listings show them, stats count them.
 *
 * Threads: init on the spawning thread, step on a worker (as any type).
 */
#define _DEFAULT_SOURCE /* random() */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/commands/commands.h"
#include "process/output.h"

/* A @cancel anywhere in the batch ends the helper as cancelled, with its
 * reason, before anything else in it is looked at (both helpers'
 * steps begin so). */
static bool ended_by_cancel(const sx_event *events, size_t n,
                            sx_step_output *out)
{
    for (size_t i = 0; i < n; i++)
        if (sx_event_kind_of(&events[i]) == SX_EV_CANCEL) {
            sx_cancelled_by(out, &events[i]);
            return true;
        }
    return false;
}

/* ---- @retry ---------------------------------------------------------- */

enum { TAG_RUN = 1, TAG_BACKOFF = 2 };

typedef struct {
    uint8_t *args; /* the command's arguments (owned) */
    size_t args_len;
    uint16_t cmd;
    bool started;
    uint32_t max_restarts, backoff_min_ms, backoff_max_ms;
    uint32_t attempt; /* 1 while the first runs */
    uint32_t backoff_ms;
    int64_t timeout_ms;
    sx_pid parent;
    uint64_t user_tag; /* the tag of the parent's yield, for @spawned */
} retry_state;

/* [cmd, args, [max_restarts, backoff_min_ms, backoff_max_ms], timeout_ms,
 * user_tag] */
static int retry_init(void *st, const sx_init_ctx *ctx, const char *method,
                      const sx_payload *in, size_t n)
{
    (void)method;
    retry_state *r = st;
    int64_t cmd, timeout;
    uint64_t tag;
    sx_unpack u;
    uint32_t m;
    uint64_t a, b, c;
    if (n != 5 || sx_payload_get_int(in[0], &cmd) != 0 || cmd < 1 ||
        cmd > UINT16_MAX || sx_payload_get_int(in[3], &timeout) != 0 ||
        timeout < 0)
        return sx_init_error(ctx, SX_EINVAL, "@retry: bad input");
    sx_unpack_init(&u, in[2]);
    if (sx_unpack_array(&u, &m) != 0 || m != 3 || sx_unpack_uint(&u, &a) != 0 ||
        sx_unpack_uint(&u, &b) != 0 || sx_unpack_uint(&u, &c) != 0 ||
        a > 1000000 || b > UINT32_MAX || c > UINT32_MAX || b > c)
        return sx_init_error(ctx, SX_EINVAL, "@retry: bad policy");
    sx_unpack_init(&u, in[4]);
    if (sx_unpack_uint(&u, &tag) != 0)
        return sx_init_error(ctx, SX_EINVAL, "@retry: bad tag");
    r->args = malloc(in[1].len > 0 ? in[1].len : 1);
    if (r->args == NULL)
        return SX_ENOMEM;
    if (in[1].len > 0)
        memcpy(r->args, in[1].data, in[1].len);
    r->args_len = in[1].len;
    r->cmd = (uint16_t)cmd;
    r->max_restarts = (uint32_t)a;
    r->backoff_min_ms = (uint32_t)b;
    r->backoff_max_ms = (uint32_t)c;
    r->timeout_ms = timeout;
    r->parent = sx_init_parent(ctx);
    r->user_tag = tag;
    return 0;
}

static void retry_close(void *st)
{
    free(((retry_state *)st)->args);
}

static int retry_run(retry_state *r, sx_step_output *out)
{
    r->attempt++;
    return sx_yield_timeout(
        out, r->cmd, TAG_RUN,
        (sx_payload){ r->args_len ? r->args : NULL, r->args_len },
        r->timeout_ms);
}

/* Errors that another attempt would answer the same way, or that say the
 * command was stopped on purpose. */
static bool retryable(int error)
{
    return error != SX_EINVAL && error != SX_EUNKNOWN_COMMAND &&
           error != SX_EUNKNOWN_TYPE && error != SX_EUNKNOWN_METHOD &&
           error != SX_ECANCELLED && error != SX_ETERMINATED &&
           error != SX_ESTOPPING;
}

/* min * 2^(attempt - 1), at most max, plus up to a quarter at random (as
 * supervision's restarts, engine/core/supervise.c). */
static uint32_t next_backoff(retry_state *r)
{
    uint64_t b =
        r->backoff_ms == 0 ? r->backoff_min_ms : (uint64_t)r->backoff_ms * 2;
    if (b > r->backoff_max_ms)
        b = r->backoff_max_ms;
    r->backoff_ms = (uint32_t)b;
    /* random(): a jitter needs no quality. In 64 bits, and never past
     * backoff_max_ms (as supervise.c's backoff). */
    uint64_t jitter = b / 4 > 0 ? (uint64_t)random() % (b / 4 + 1) : 0;
    b += jitter;
    return (uint32_t)(b > r->backoff_max_ms ? r->backoff_max_ms : b);
}

static void retry_answer(retry_state *r, const sx_event *ev,
                         sx_step_output *out)
{
    if (ev->error == 0) {
        sx_done(out, ev->data);
        return;
    }
    if (!retryable(ev->error) || r->attempt > r->max_restarts) {
        char msg[512];
        if (r->attempt > 1)
            snprintf(msg, sizeof msg, "after %u attempts: %s", r->attempt,
                     ev->error_msg != NULL ? ev->error_msg
                                           : sx_strerror(ev->error));
        else
            snprintf(msg, sizeof msg, "%s",
                     ev->error_msg != NULL ? ev->error_msg
                                           : sx_strerror(ev->error));
        sx_fail_code(out, ev->error, msg);
        return;
    }
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    if (sx_yield(out, SX_CMD_SLEEP, TAG_BACKOFF,
                 sx_payload_int(buf, next_backoff(r))) != 0)
        sx_fail_code(out, SX_ENOMEM, "@retry: out of memory");
}

static int retry_step(void *st, const sx_event *events, size_t n,
                      sx_step_output *out)
{
    retry_state *r = st;
    if (ended_by_cancel(events, n, out))
        return 0;
    if (!r->started) {
        r->started = true;
        return retry_run(r, out);
    }
    for (size_t i = 0; i < n; i++) {
        const sx_event *ev = &events[i];
        if (ev->type == SX_EVENT_MESSAGE) {
            /* A child of the command (spawn-wait with notify) started:
             * the parent hears of it, with its own yield's tag. */
            if (strcmp(ev->topic, SX_TOPIC_SPAWNED) == 0) {
                uint8_t buf[96];
                sx_pack pk;
                sx_pack_init_fixed(&pk, buf, sizeof buf);
                sx_pack_map(&pk, 2);
                sx_pack_str(&pk, "tag");
                sx_pack_uint(&pk, r->user_tag);
                sx_pack_str(&pk, "pid");
                sx_pack_pid(&pk, ev->from);
                sx_send(out, r->parent, SX_TOPIC_SPAWNED, sx_pack_payload(&pk));
            }
            continue;
        }
        if (ev->tag == TAG_RUN) {
            retry_answer(r, ev, out);
            if (out->status == SX__ST_DONE || out->status == SX__ST_FAIL)
                return 0; /* it ended: no WAIT over it */
        } else if (ev->tag == TAG_BACKOFF && retry_run(r, out) != 0) {
            sx_fail_code(out, SX_ENOMEM, "@retry: out of memory");
            return 0;
        }
    }
    sx_wait(out);
    return 0;
}

static const sx_process_type retry_type = {
    .name = "@retry",
    .state_size = sizeof(retry_state),
    .init = retry_init,
    .step = retry_step,
    .close = retry_close,
};

/* ---- @all ------------------------------------------------------------ */

typedef struct {
    int error;
    uint8_t *bytes; /* the value, or the error's message (owned) */
    size_t len;
    bool answered;
} all_child;

typedef struct {
    uint8_t *children; /* the children array as given (owned) */
    size_t children_len;
    uint8_t *opts; /* the shared options map, or NULL (owned) */
    size_t opts_len;
    uint32_t n, left;
    bool started;
    all_child *out;
} all_state;

static uint8_t *dup_bytes(sx_payload p)
{
    uint8_t *b = malloc(p.len > 0 ? p.len : 1);
    if (b != NULL && p.len > 0)
        memcpy(b, p.data, p.len);
    return b;
}

/* [children, opts-or-nil]; children an array of [type, method,
 * [input...], opts?] (checked by spawn-wait as each child starts). */
static int all_init(void *st, const sx_init_ctx *ctx, const char *method,
                    const sx_payload *in, size_t n)
{
    (void)method;
    all_state *a = st;
    sx_unpack u;
    uint32_t m;
    if (n != 2)
        return sx_init_error(ctx, SX_EINVAL, "@all: bad input");
    sx_unpack_init(&u, in[0]);
    if (sx_unpack_array(&u, &m) != 0 || m > SX_SPAWN_ALL_MAX)
        return sx_init_error(ctx, SX_EINVAL,
                             "spawn-all: children must be an array of at "
                             "most %u children",
                             (unsigned)SX_SPAWN_ALL_MAX);
    for (uint32_t i = 0; i < m; i++) {
        uint32_t k;
        sx_unpack c = u;
        if (sx_unpack_array(&c, &k) != 0 || k < 2 || k > 4 ||
            sx_unpack_skip(&u) != 0)
            return sx_init_error(ctx, SX_EINVAL,
                                 "spawn-all: child %u must be [type, "
                                 "method, [input...], opts]",
                                 (unsigned)i);
    }
    a->n = a->left = m;
    a->out = calloc(m > 0 ? m : 1, sizeof(*a->out));
    a->children = dup_bytes(in[0]);
    a->children_len = in[0].len;
    sx_unpack_init(&u, in[1]);
    if (sx_unpack_nil(&u) != 0) { /* a map (spawn-wait checks it) */
        a->opts = dup_bytes(in[1]);
        a->opts_len = in[1].len;
    }
    if (a->out == NULL || a->children == NULL ||
        (a->opts == NULL && a->opts_len > 0)) {
        /* A refused init never runs close: free here. */
        free(a->out);
        free(a->children);
        free(a->opts);
        return SX_ENOMEM;
    }
    return 0;
}

static void all_close(void *st)
{
    all_state *a = st;
    for (uint32_t i = 0; a->out != NULL && i < a->n; i++)
        free(a->out[i].bytes);
    free(a->out);
    free(a->children);
    free(a->opts);
}

/* Yields a spawn-wait per child: the child's own options map when it has
 * one (whole), else the shared one. */
static int all_start(all_state *a, sx_step_output *out)
{
    sx_unpack u;
    uint32_t m;
    sx_unpack_init(&u, (sx_payload){ a->children, a->children_len });
    if (sx_unpack_array(&u, &m) != 0)
        return SX_EPROTO;
    sx_pack pk;
    sx_pack_init(&pk);
    for (uint32_t i = 0; i < m; i++) {
        uint32_t k;
        sx_payload part[4];
        if (sx_unpack_array(&u, &k) != 0)
            break;
        for (uint32_t j = 0; j < k; j++)
            if (sx_unpack_raw(&u, &part[j]) != 0)
                k = 0;
        sx_pack_reset(&pk);
        bool own = k == 4;
        bool shared = !own && a->opts != NULL;
        sx_pack_array(&pk, k == 2 ? (shared ? 4 : 2) : (shared ? 4 : k));
        for (uint32_t j = 0; j < k && j < 3; j++)
            sx_pack_raw(&pk, part[j]);
        if (k == 2 && shared)
            sx_pack_array(&pk, 0);
        if (own)
            sx_pack_raw(&pk, part[3]);
        else if (shared)
            sx_pack_raw(&pk, (sx_payload){ a->opts, a->opts_len });
        int rc = pk.err;
        if (rc == 0)
            rc = sx_yield(out, SX_CMD_SPAWN_WAIT, i, sx_pack_payload(&pk));
        if (rc != 0) {
            sx_pack_fini(&pk);
            return rc;
        }
    }
    sx_pack_fini(&pk);
    return 0;
}

static void all_finish(all_state *a, sx_step_output *out)
{
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_array(&pk, a->n);
    for (uint32_t i = 0; i < a->n; i++) {
        all_child *c = &a->out[i];
        sx_payload b = { c->bytes, c->len };
        if (c->error == 0) {
            sx_pack_map(&pk, 1);
            sx_pack_str(&pk, "value");
            sx_pack_raw(&pk, b);
        } else {
            sx_pack_map(&pk, 2);
            sx_pack_str(&pk, "error");
            sx_pack_int(&pk, c->error);
            sx_pack_str(&pk, "message");
            sx_pack_strn(&pk, (const char *)c->bytes, c->len);
        }
    }
    if (pk.err != 0)
        sx_fail_code(out, pk.err, "spawn-all: out of memory");
    else
        sx_done(out, sx_pack_payload(&pk));
    sx_pack_fini(&pk);
}

static int all_step(void *st, const sx_event *events, size_t n,
                    sx_step_output *out)
{
    all_state *a = st;
    if (ended_by_cancel(events, n, out))
        return 0;
    if (!a->started) {
        a->started = true;
        if (a->n == 0) {
            all_finish(a, out);
            return 0;
        }
        int rc = all_start(a, out);
        if (rc != 0) {
            sx_fail_code(out, rc, "spawn-all: out of memory");
            return 0;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const sx_event *ev = &events[i];
        if (ev->type != SX_EVENT_YIELD_COMPLETE || ev->tag >= a->n ||
            a->out[ev->tag].answered)
            continue;
        all_child *c = &a->out[ev->tag];
        c->answered = true;
        c->error = ev->error;
        sx_payload b = ev->data;
        if (ev->error != 0) {
            const char *m =
                ev->error_msg != NULL ? ev->error_msg : sx_strerror(ev->error);
            b = (sx_payload){ (const uint8_t *)m, strlen(m) };
        }
        c->bytes = dup_bytes(b);
        c->len = b.len;
        if (c->bytes == NULL) {
            sx_fail_code(out, SX_ENOMEM, "spawn-all: out of memory");
            return 0;
        }
        a->left--;
    }
    if (a->left == 0)
        all_finish(a, out);
    else
        sx_wait(out);
    return 0;
}

static const sx_process_type all_type = {
    .name = "@all",
    .state_size = sizeof(all_state),
    .init = all_init,
    .step = all_step,
    .close = all_close,
};

void sx__helpers_register(sx_engine *e)
{
    sx__type_add(e, &retry_type);
    sx__type_add(e, &all_type);
}

/* process/output.c — the step output: status, yields, result, and the
 * ends (sx_fail_code, sx_cancelled, sx_cancelled_by) (see
 * output.h). [owner] only. */
#include "process/output.h"
#include "process/utf8.h"

#include <stdlib.h>
#include <string.h>

void sx__output_init(sx_step_output *out)
{
    memset(out, 0, sizeof(*out));
    out->yields = out->inl;
    out->cap_yields = 2;
}

/* Frees the built messages dispatch did not take. */
static void drop_sends(sx_step_output *out)
{
    if (out->hooks == NULL)
        return;
    for (size_t i = 0; i < out->n_yields; i++) {
        sx__yield *y = &out->yields[i];
        if (y->cmd == SX__CMD_DIRECT_SEND && y->ev != NULL) {
            out->hooks->drop(y->ev);
            y->ev = NULL;
        }
    }
}

void sx__output_fini(sx_step_output *out)
{
    drop_sends(out);
    free(out->more);
    free(out->arena);
    memset(out, 0, sizeof(*out));
}

void sx__output_reset(sx_step_output *out)
{
    if (!out->sends_gone)
        drop_sends(out);
    out->sends_gone = false;
    out->status = SX__ST_CONTINUE;
    out->err = 0;
    out->n_yields = 0;
    out->n_cmds = out->n_answers = 0;
    out->result_off = out->result_len = 0;
    out->too_large = 0;
    out->fail_code = 0;
    out->arena_len = 0;
    out->yields = out->inl;
    out->cap_yields = 2;
}

/* Copies n bytes into the arena (or, with p NULL, reserves them);
 * returns the offset or SIZE_MAX. */
static size_t arena_put(sx_step_output *out, const void *p, size_t n)
{
    if (n > out->arena_cap - out->arena_len) {
        size_t cap = out->arena_cap ? out->arena_cap : 256;
        while (cap - out->arena_len < n) {
            if (cap > SIZE_MAX / 2)
                return SIZE_MAX;
            cap *= 2;
        }
        uint8_t *a = realloc(out->arena, cap);
        if (a == NULL)
            return SIZE_MAX;
        out->arena = a;
        out->arena_cap = cap;
    }
    size_t off = out->arena_len;
    if (n > 0 && p != NULL) /* p NULL: reserve only */
        memcpy(out->arena + off, p, n);
    out->arena_len += n;
    return off;
}

/* Makes room for one more yield; 0 or SX_ENOMEM. */
static int yields_grow(sx_step_output *out)
{
    if (out->yields == out->inl && out->more_cap > out->cap_yields) {
        /* Reuse the array kept from an earlier step. */
        memcpy(out->more, out->inl, sizeof(out->inl));
        out->yields = out->more;
        out->cap_yields = out->more_cap;
        return 0;
    }
    size_t cap = out->cap_yields * 2;
    sx__yield *y = realloc(out->more, cap * sizeof(*y));
    if (y == NULL)
        return SX_ENOMEM;
    if (out->yields == out->inl)
        memcpy(y, out->inl, sizeof(out->inl));
    out->more = y;
    out->more_cap = cap;
    out->yields = y;
    out->cap_yields = cap;
    return 0;
}

/* The yield record, its arguments at off in the arena; there is room. */
static inline void put_yield(sx_step_output *out, uint16_t cmd, uint64_t tag,
                             size_t off, size_t len)
{
    sx__yield *y = &out->yields[out->n_yields++];
    y->cmd = cmd;
    y->tag = tag;
    y->off = off;
    y->len = len;
    y->timeout_ms = 0;
    out->n_cmds++;
    out->n_answers += tag != SX_TAG_NONE;
}

/* sx_yield when the yields' array or the arena must grow first. */
static __attribute__((noinline)) int
yield_grow(sx_step_output *out, uint16_t cmd, uint64_t tag, sx_payload args)
{
    if (out->n_yields == out->cap_yields && yields_grow(out) != 0)
        return out->err = SX_ENOMEM;
    size_t off = arena_put(out, args.data, args.len);
    if (off == SIZE_MAX)
        return out->err = SX_ENOMEM;
    put_yield(out, cmd, tag, off, args.len);
    return 0;
}

int sx_yield(sx_step_output *out, uint16_t cmd, uint64_t tag, sx_payload args)
{
    if (out == NULL || (args.data == NULL && args.len > 0))
        return SX_EINVAL;
    /* Room in both (every step but the few that need more): no call that
     * could grow them, and the copy last, so that nothing is kept across
     * it: none of the registers a call needs. */
    if (out->n_yields == out->cap_yields ||
        args.len > out->arena_cap - out->arena_len)
        return yield_grow(out, cmd, tag, args);
    size_t off = out->arena_len;
    out->arena_len += args.len;
    put_yield(out, cmd, tag, off, args.len);
    if (args.len > 0)
        memcpy(out->arena + off, args.data, args.len);
    return 0;
}

int sx_send(sx_step_output *out, sx_pid to, const char *topic, sx_payload data)
{
    if (out == NULL || topic == NULL || (data.data == NULL && data.len > 0) ||
        data.len > SX_MESSAGE_MAX)
        return SX_EINVAL;
    /* The topic's bytes (UTF-8) are checked where they are copied: by the
     * hooks, or below for the arena. */
    size_t tl = strlen(topic);
    if (tl > 255)
        return SX_EINVAL;
    if (out->bundle_max > 1 && out->n_yields > 0) {
        /* The same addressee as the previous send: into its bundle. */
        sx__yield *py = &out->yields[out->n_yields - 1];
        if (py->cmd == SX__CMD_DIRECT_SEND && py->ev != NULL &&
            sx_pid_eq(py->to, to) &&
            out->hooks->merge(&py->ev, topic, tl, data, out->bundle_max) == 0)
            return 0;
    }
    if (out->n_yields == out->cap_yields && yields_grow(out) != 0)
        return out->err = SX_ENOMEM;
    if (out->hooks != NULL) {
        void *ev = out->hooks->make(topic, tl, data);
        if (ev == NULL)
            return out->err = SX_ENOMEM;
        if (ev == SX__SEND_BAD_TOPIC)
            return SX_EINVAL;
        sx__yield *y = &out->yields[out->n_yields++];
        y->cmd = SX__CMD_DIRECT_SEND;
        y->tag = SX_TAG_NONE;
        y->off = y->len = 0;
        y->timeout_ms = 0;
        y->ev = ev;
        y->to = to;
        return 0;
    }
    if (!sx__topic_ok(topic, tl))
        return SX_EINVAL;
    size_t len = sizeof to + 1 + tl + data.len;
    size_t off = arena_put(out, NULL, len); /* one reservation, then fill */
    if (off == SIZE_MAX)
        return out->err = SX_ENOMEM;
    uint8_t *b = out->arena + off;
    memcpy(b, &to, sizeof to);
    b[sizeof to] = (uint8_t)tl;
    memcpy(b + sizeof to + 1, topic, tl);
    if (data.len > 0)
        memcpy(b + sizeof to + 1 + tl, data.data, data.len);
    sx__yield *y = &out->yields[out->n_yields++];
    y->cmd = SX__CMD_DIRECT_SEND;
    y->tag = SX_TAG_NONE;
    y->off = off;
    y->len = len;
    y->timeout_ms = 0;
    y->ev = NULL;
    return 0;
}

int sx_yield_timeout(sx_step_output *out, uint16_t cmd, uint64_t tag,
                     sx_payload args, int64_t timeout_ms)
{
    if (out == NULL || timeout_ms < 0)
        return SX_EINVAL;
    int rc = sx_yield(out, cmd, tag, args);
    if (rc == 0)
        out->yields[out->n_yields - 1].timeout_ms = timeout_ms;
    return rc;
}

void sx_continue(sx_step_output *out)
{
    if (out != NULL)
        out->status = SX__ST_CONTINUE;
}

void sx_wait(sx_step_output *out)
{
    if (out != NULL)
        out->status = SX__ST_WAIT;
}

void sx_idle(sx_step_output *out)
{
    if (out != NULL)
        out->status = SX__ST_IDLE;
}

/* sx_done's result when the arena must grow first. */
static __attribute__((noinline)) void done_grow(sx_step_output *out,
                                                sx_payload result)
{
    size_t off = arena_put(out, result.data, result.len);
    if (off == SIZE_MAX) {
        /* The process still finishes; it fails rather than losing data. */
        out->status = SX__ST_FAIL;
        out->err = SX_ENOMEM;
        return;
    }
    out->result_off = off;
    out->result_len = result.len;
}

void sx_done(sx_step_output *out, sx_payload result)
{
    if (out == NULL)
        return;
    out->status = SX__ST_DONE;
    out->result_len = 0;
    out->too_large = 0;
    out->fail_code = 0;
    if (result.data == NULL || result.len == 0)
        return;
    if (out->result_max != 0 && result.len > out->result_max) {
        /* Not copied: the process finishes with SX_ETOOLARGE
         * (engine/sched/turn.c), and the arena does not grow to hold what
         * nobody will read. */
        out->too_large = result.len;
        return;
    }
    if (result.len <= out->arena_cap - out->arena_len) {
        /* Room: the copy is the last call, made as a jump (no registers
         * saved for it). */
        size_t off = out->arena_len;
        out->arena_len += result.len;
        out->result_off = off;
        out->result_len = result.len;
        memcpy(out->arena + off, result.data, result.len);
        return;
    }
    done_grow(out, result);
}

void sx_fail(sx_step_output *out, const char *message)
{
    sx_fail_code(out, SX_EFAILED, message);
}

void sx_fail_code(sx_step_output *out, int code, const char *message)
{
    if (out == NULL)
        return;
    out->status = SX__ST_FAIL;
    out->result_len = 0;
    out->too_large = 0;
    out->fail_code = code < 0 ? code : SX_EFAILED;
    if (message == NULL)
        message = "failed";
    size_t n = strlen(message) + 1;
    size_t off = arena_put(out, message, n);
    if (off == SIZE_MAX) {
        out->err = SX_ENOMEM;
        return;
    }
    out->result_off = off;
    out->result_len = n;
}

void sx_cancelled(sx_step_output *out, const char *reason)
{
    sx_fail_code(out, SX_ECANCELLED, reason != NULL ? reason : "cancelled");
}

/* The most bytes of a cancel's reason kept as the message (its NUL
 * included). */
#define CANCEL_REASON_MAX 1024

/* The reason is the event's data when that is a string that is not
 * empty, else "cancelled". It need not end in a NUL and may be of any
 * length: at most CANCEL_REASON_MAX - 1 bytes are kept, cut before a
 * UTF-8 sequence that would not fit whole, with the bytes that start no
 * valid sequence replaced by U+FFFD (the message reaches clients as a
 * msgpack str); a NUL inside ends it. */
void sx_cancelled_by(sx_step_output *out, const sx_event *cancel)
{
    char reason[CANCEL_REASON_MAX];
    const char *s;
    size_t n;
    sx_unpack u;

    if (out == NULL)
        return;
    if (cancel == NULL) {
        sx_cancelled(out, NULL);
        return;
    }
    sx_unpack_init(&u, cancel->data);
    if (sx_unpack_str(&u, &s, &n) != 0 || n == 0) {
        sx_cancelled(out, NULL);
        return;
    }
    n = sx__utf8_replace((const unsigned char *)s, n, reason,
                         sizeof(reason) - 1);
    reason[n] = '\0';
    sx_cancelled(out, reason[0] != '\0' ? reason : NULL);
}

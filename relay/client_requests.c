/* relay/client_requests.c — the C client's requests: pipelined ones
 * (sx_client_post*: many requests in flight, their replies taken with
 * sx_client_next_reply in arrival order, matched by id), pushes taken in
 * arrival order (sx_client_next_push), and the sync shortcuts, one per op,
 * over sx_client_call (relay/client.c).
 *
 * Threads: a client belongs to one thread at a time (relay/client.h).
 */
#include "process/pack.h"
#include "relay/client.h"
#include "relay/wire.h"

#include <string.h>

/* ---- pushes ---- */

int sx_client_next_push(sx_client *c, int64_t timeout_ms, sx_reply *out)
{
    if (c == NULL || out == NULL)
        return SX_EINVAL;
    memset(out, 0, sizeof(*out));
    if (c->pushes.head == NULL) {
        if (c->broken != 0)
            return c->broken;
        int rc =
            sx__relay_client_run_io(c, sx__relay_client_deadline(timeout_ms),
                                    SX__RELAY_CLIENT_WANT_PUSH);
        if (c->pushes.head == NULL)
            return rc != 0 ? rc : SX_EPROTO;
    }
    sx__relay_client_queue_take(&c->pushes, NULL, out);
    return 0;
}

/* ---- pipelined requests ---- */

/* Queues the frame built in c->body under id (which the caller reserved
 * as c->next_id + 1): refuses with SX_ELIMIT when the output buffer is
 * over its bound, and writes when enough is queued to fill a segment.
 * built: as sx__relay_client_append's. */
static int post_body(sx_client *c, uint64_t id, uint64_t *out_id, bool built)
{
    if (sx__relay_client_unsent(c) >= SX_CLIENT_MAX_QUEUED) {
        int rc = sx__relay_client_send(c); /* once, without waiting */
        if (rc != 0)
            return rc;
        if (sx__relay_client_unsent(c) >= SX_CLIENT_MAX_QUEUED)
            return SX_ELIMIT;
    }
    int rc = sx__relay_client_set_add(c, id);
    if (rc != 0)
        return rc;
    if ((rc = sx__relay_client_append(c, built)) != 0) {
        sx__relay_client_set_take(c, id);
        return rc;
    }
    c->next_id = id;
    if (out_id != NULL)
        *out_id = id;
    if (sx__relay_client_unsent(c) >= SX_CLIENT_FLUSH_AT)
        return sx__relay_client_send(c);
    return 0;
}

int sx_client_post(sx_client *c, sx_payload request, uint64_t *out_id)
{
    if (c == NULL)
        return SX_EINVAL;
    if (c->broken != 0)
        return c->broken;
    uint64_t id = c->next_id + 1;
    int rc = sx__relay_client_body_with_id(c, request, id);
    if (rc != 0)
        return rc;
    return post_body(c, id, out_id, false);
}

/* A name of the protocol's (a key, an op; ASCII, under 32 bytes) as the
 * fixstr sx_pack_str would write, in one append: the length folds to a
 * constant where the name is a literal. */
static inline void pack_name(sx_pack *pk, const char *name)
{
    size_t n = __builtin_strlen(name);
    uint8_t b[32];
    if (n >= sizeof(b)) {
        sx_pack_strn(pk, name, n);
        return;
    }
    b[0] = (uint8_t)(0xa0 | n);
    memcpy(b + 1, name, n);
    sx__pack_bytes(pk, b, n + 1);
}

/* Starts c->body as a request map of n fields (id first, then op). */
static void body_op(sx_client *c, uint32_t n, uint64_t id, const char *op)
{
    sx_pack_reset(&c->body);
    sx_pack_map(&c->body, n + 1);
    pack_name(&c->body, "id");
    sx_pack_uint(&c->body, id);
    pack_name(&c->body, "op");
    pack_name(&c->body, op);
}

static void pack_pid(sx_pack *pk, const char *key, sx_pid pid);

/* How many fields a submit has besides "op" (and "id"): type, method,
 * input, then "wait" and any "timeout_ms" (wait: 0 none, 1 no limit, 2
 * with timeout_ms). */
static uint32_t submit_fields(int wait)
{
    return 3u + (wait > 0) + (wait > 1);
}

/* Whether every input is one msgpack value that fits where a submit puts
 * it (an element of the "input" array, which is at depth 2 of the frame:
 * an input may nest SX_WIRE_MAX_DEPTH - 2 levels), walked as a reader
 * will; then pack_submit copies them as they are, and the frame needs no
 * walk of its own (sx__relay_client_append's built). */
static bool inputs_walked(const sx_payload *input, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (input[i].len > 0 &&
            sx__wire_value_check(input[i].data, input[i].len,
                                 SX_WIRE_MAX_DEPTH - 2) != 0)
            return false;
    return true;
}

/* A submit's fields after "op" (submit_fields(wait) of them). walked:
 * inputs_walked passed them. */
static void pack_submit(sx_pack *pk, const char *type, const char *method,
                        const sx_payload *input, size_t n, bool walked,
                        int wait, int64_t timeout_ms)
{
    pack_name(pk, "type");
    sx_pack_str(pk, type);
    pack_name(pk, "method");
    sx_pack_str(pk, method);
    pack_name(pk, "input");
    sx_pack_array(pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        if (walked && input[i].len > 0)
            sx__pack_bytes(pk, input[i].data, input[i].len);
        else
            sx_pack_raw(pk, input[i]); /* nil when empty */
    }
    if (wait > 0) {
        pack_name(pk, "wait");
        sx_pack_bool(pk, true);
    }
    if (wait > 1) {
        pack_name(pk, "timeout_ms");
        sx_pack_int(pk, timeout_ms);
    }
}

static bool submit_args_bad(const sx_client *c, const char *type,
                            const char *method, const sx_payload *input,
                            size_t n)
{
    return c == NULL || type == NULL || method == NULL ||
           (input == NULL && n > 0) || n > UINT32_MAX;
}

static int post_submit(sx_client *c, const char *type, const char *method,
                       const sx_payload *input, size_t n, int wait,
                       int64_t timeout_ms, uint64_t *out_id)
{
    if (submit_args_bad(c, type, method, input, n))
        return SX_EINVAL;
    if (c->broken != 0)
        return c->broken;
    uint64_t id = c->next_id + 1;
    bool walked = inputs_walked(input, n);
    body_op(c, 1 + submit_fields(wait), id, "submit");
    pack_submit(&c->body, type, method, input, n, walked, wait, timeout_ms);
    return post_body(c, id, out_id, walked);
}

int sx_client_post_submit(sx_client *c, const char *type, const char *method,
                          const sx_payload *input, size_t n, uint64_t *out_id)
{
    return post_submit(c, type, method, input, n, 0, -1, out_id);
}

int sx_client_post_submit_wait(sx_client *c, const char *type,
                               const char *method, const sx_payload *input,
                               size_t n, int64_t timeout_ms, uint64_t *out_id)
{
    return post_submit(c, type, method, input, n, timeout_ms >= 0 ? 2 : 1,
                       timeout_ms, out_id);
}

int sx_client_post_wait(sx_client *c, sx_pid pid, int64_t timeout_ms,
                        uint64_t *out_id)
{
    if (c == NULL)
        return SX_EINVAL;
    if (c->broken != 0)
        return c->broken;
    uint64_t id = c->next_id + 1;
    body_op(c, timeout_ms >= 0 ? 3 : 2, id, "wait");
    pack_pid(&c->body, "pid", pid);
    if (timeout_ms >= 0) {
        pack_name(&c->body, "timeout_ms");
        sx_pack_int(&c->body, timeout_ms);
    }
    return post_body(c, id, out_id, true); /* no value but ours */
}

int sx_client_flush(sx_client *c, int64_t timeout_ms)
{
    if (c == NULL)
        return SX_EINVAL;
    if (c->broken != 0)
        return c->broken;
    return sx__relay_client_run_io(c, sx__relay_client_deadline(timeout_ms),
                                   SX__RELAY_CLIENT_WANT_FLUSH);
}

int sx_client_next_reply(sx_client *c, int64_t timeout_ms, uint64_t *out_id,
                         sx_reply *out)
{
    if (c == NULL || out == NULL)
        return SX_EINVAL;
    memset(out, 0, sizeof(*out));
    if (out_id != NULL)
        *out_id = 0;
    if (c->replies.head == NULL) {
        if (c->broken != 0)
            return c->broken;
        if (c->set_n == 0)
            return SX_ENOTFOUND; /* nothing posted is waiting */
        int rc =
            sx__relay_client_run_io(c, sx__relay_client_deadline(timeout_ms),
                                    SX__RELAY_CLIENT_WANT_REPLY);
        if (c->replies.head == NULL)
            return rc != 0 ? rc : SX_EPROTO;
    }
    sx__relay_client_queue_take(&c->replies, out_id, out);
    return 0;
}

size_t sx_client_in_flight(const sx_client *c)
{
    return c != NULL ? c->set_n : 0;
}

int sx_reply_pid(const sx_reply *r, sx_pid *out)
{
    if (r == NULL || out == NULL)
        return SX_EINVAL;
    const char *s;
    size_t l;
    char buf[SX_PID_TEXT_MAX];
    int rc = sx__relay_client_get_str(r->body, "pid", &s, &l);
    if (rc != 0)
        return rc == SX_ENOTFOUND ? rc : SX_EPROTO;
    if (l >= sizeof(buf))
        return SX_EPROTO;
    memcpy(buf, s, l);
    buf[l] = '\0';
    return sx_pid_parse(buf, out) == 0 ? 0 : SX_EPROTO;
}

/* ---- shortcuts ---- */

/* Sends the request built in pk (and finishes pk), then keeps the reply
 * in out when keep is not NULL, or frees it: the shortcuts' promise. out
 * is emptied first, so that it can be freed on every path (a request pk
 * could not build never reaches sx_client_call, which empties it too). */
static int call_pk(sx_client *c, sx_pack *pk, int64_t timeout_ms, sx_reply *out,
                   sx_reply *keep)
{
    memset(out, 0, sizeof(*out));
    int rc = pk->err;
    if (rc == 0)
        rc = sx_client_call(c, sx_pack_payload(pk), timeout_ms, out);
    sx_pack_fini(pk);
    if (rc != 0)
        return rc;
    rc = out->ok ? 0 : out->error;
    if (keep == NULL)
        sx_reply_free(out);
    return rc;
}

static void pack_pid(sx_pack *pk, const char *key, sx_pid pid)
{
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(pid, txt, sizeof(txt));
    sx_pack_str(pk, key);
    sx_pack_str(pk, txt);
}

static void pack_op(sx_pack *pk, uint32_t n, const char *op)
{
    sx_pack_init(pk);
    sx_pack_map(pk, n);
    sx_pack_str(pk, "op");
    sx_pack_str(pk, op);
}

int sx_client_submit(sx_client *c, const char *type, const char *method,
                     const sx_payload *input, size_t n, sx_pid *out_pid,
                     sx_reply *out)
{
    if (submit_args_bad(c, type, method, input, n))
        return SX_EINVAL;
    sx_pack pk;
    pack_op(&pk, 1 + submit_fields(0), "submit");
    pack_submit(&pk, type, method, input, n, false, 0, -1);
    sx_reply local, *r = out != NULL ? out : &local;
    int rc = call_pk(c, &pk, -1, r, r);
    if (rc == 0 && out_pid != NULL)
        rc = sx_reply_pid(r, out_pid) == 0 ? 0 : SX_EPROTO;
    if (out == NULL)
        sx_reply_free(&local);
    return rc;
}

/* A wait answer's "steps" into *out (0 when it has none). */
static void reply_steps(const sx_reply *r, uint64_t *out)
{
    sx_payload v;
    sx_unpack u;
    *out = 0;
    if (sx_map_get(r->body, "steps", &v) == 0) {
        sx_unpack_init(&u, v);
        sx_unpack_uint(&u, out);
    }
}

/* The call's own limit for a request the server answers `timeout` to
 * after timeout_ms (< 0: none): a margin for the server to say so. */
static int64_t call_limit(int64_t timeout_ms)
{
    return timeout_ms >= 0 && timeout_ms < INT64_MAX - 10000
               ? timeout_ms + 10000
               : -1;
}

int sx_client_submit_wait(sx_client *c, const char *type, const char *method,
                          const sx_payload *input, size_t n, int64_t timeout_ms,
                          sx_pid *out_pid, uint64_t *out_steps, sx_reply *out)
{
    if (out_pid != NULL)
        *out_pid = SX_PID_NONE;
    if (submit_args_bad(c, type, method, input, n))
        return SX_EINVAL;
    int wait = timeout_ms >= 0 ? 2 : 1;
    sx_pack pk;
    pack_op(&pk, 1 + submit_fields(wait), "submit");
    pack_submit(&pk, type, method, input, n, false, wait, timeout_ms);
    sx_reply local, *r = out != NULL ? out : &local;
    int rc = call_pk(c, &pk, call_limit(timeout_ms), r, r);
    /* A reply (ok or not) names the job when it started. */
    if (out_pid != NULL && r->body.len > 0 && sx_reply_pid(r, out_pid) != 0)
        *out_pid = SX_PID_NONE;
    sx_payload res;
    if (rc == 0 && sx_map_get(r->body, "result", &res) != 0)
        rc = SX_EPROTO; /* the pid alone: the server did not wait */
    if (rc == 0 && out_steps != NULL)
        reply_steps(r, out_steps);
    if (out == NULL)
        sx_reply_free(&local);
    return rc;
}

int sx_client_send(sx_client *c, sx_pid to, const char *topic, sx_payload data,
                   sx_reply *out)
{
    if (c == NULL || topic == NULL)
        return SX_EINVAL;
    sx_pack pk;
    pack_op(&pk, 4, "send");
    pack_pid(&pk, "to", to);
    sx_pack_str(&pk, "topic");
    sx_pack_str(&pk, topic);
    sx_pack_str(&pk, "data");
    sx_pack_raw(&pk, data);
    sx_reply local;
    return call_pk(c, &pk, -1, out != NULL ? out : &local, out);
}

int sx_client_wait(sx_client *c, sx_pid pid, int64_t timeout_ms,
                   uint64_t *out_steps, sx_reply *out)
{
    if (c == NULL)
        return SX_EINVAL;
    sx_pack pk;
    pack_op(&pk, timeout_ms >= 0 ? 3 : 2, "wait");
    pack_pid(&pk, "pid", pid);
    if (timeout_ms >= 0) {
        sx_pack_str(&pk, "timeout_ms");
        sx_pack_int(&pk, timeout_ms);
    }
    sx_reply local, *r = out != NULL ? out : &local;
    /* The server answers `timeout` itself; the call allows it a margin
     * to say so before giving up on its own. */
    int rc = call_pk(c, &pk, call_limit(timeout_ms), r, r);
    if (rc == 0 && out_steps != NULL)
        reply_steps(r, out_steps);
    if (out == NULL)
        sx_reply_free(&local);
    return rc;
}

int sx_client_cancel(sx_client *c, sx_pid pid, const char *reason,
                     sx_reply *out)
{
    if (c == NULL)
        return SX_EINVAL;
    sx_pack pk;
    pack_op(&pk, reason != NULL ? 3 : 2, "cancel");
    pack_pid(&pk, "pid", pid);
    if (reason != NULL) {
        sx_pack_str(&pk, "reason");
        sx_pack_str(&pk, reason);
    }
    sx_reply local;
    return call_pk(c, &pk, -1, out != NULL ? out : &local, out);
}

int sx_client_terminate(sx_client *c, sx_pid pid, sx_reply *out)
{
    if (c == NULL)
        return SX_EINVAL;
    sx_pack pk;
    pack_op(&pk, 2, "terminate");
    pack_pid(&pk, "pid", pid);
    sx_reply local;
    return call_pk(c, &pk, -1, out != NULL ? out : &local, out);
}

int sx_client_subscribe(sx_client *c, sx_pid pid, sx_reply *out)
{
    if (c == NULL)
        return SX_EINVAL;
    sx_pack pk;
    pack_op(&pk, 2, "subscribe");
    pack_pid(&pk, "pid", pid);
    sx_reply local;
    return call_pk(c, &pk, -1, out != NULL ? out : &local, out);
}

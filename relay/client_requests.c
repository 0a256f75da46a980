/* relay/client_requests.c — the C client's requests: pipelined ones
 * (sx_client_post*: many requests in flight, their replies taken with
 * sx_client_next_reply in arrival order, matched by id), pushes taken in
 * arrival order (sx_client_next_push), and the sync shortcuts, one per op,
 * over sx_client_call (relay/client.c).
 *
 * Threads: a client belongs to one thread at a time (relay/client.h).
 */
#include "relay/client.h"

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
 * over its bound, and writes when enough is queued to fill a segment. */
static int post_body(sx_client *c, uint64_t id, uint64_t *out_id)
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
    if ((rc = sx__relay_client_append(c)) != 0) {
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
    return post_body(c, id, out_id);
}

/* Starts c->body as a request map of n fields (id first, then op). */
static void body_op(sx_client *c, uint32_t n, uint64_t id, const char *op)
{
    sx_pack_reset(&c->body);
    sx_pack_map(&c->body, n + 1);
    sx_pack_str(&c->body, "id");
    sx_pack_uint(&c->body, id);
    sx_pack_str(&c->body, "op");
    sx_pack_str(&c->body, op);
}

static void pack_pid(sx_pack *pk, const char *key, sx_pid pid);

int sx_client_post_submit(sx_client *c, const char *type, const char *method,
                          const sx_payload *input, size_t n, uint64_t *out_id)
{
    if (c == NULL || type == NULL || method == NULL ||
        (input == NULL && n > 0) || n > UINT32_MAX)
        return SX_EINVAL;
    if (c->broken != 0)
        return c->broken;
    uint64_t id = c->next_id + 1;
    body_op(c, 4, id, "submit");
    sx_pack_str(&c->body, "type");
    sx_pack_str(&c->body, type);
    sx_pack_str(&c->body, "method");
    sx_pack_str(&c->body, method);
    sx_pack_str(&c->body, "input");
    sx_pack_array(&c->body, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        sx_pack_raw(&c->body, input[i]);
    return post_body(c, id, out_id);
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
        sx_pack_str(&c->body, "timeout_ms");
        sx_pack_int(&c->body, timeout_ms);
    }
    return post_body(c, id, out_id);
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
    if (c == NULL || type == NULL || method == NULL ||
        (input == NULL && n > 0) || n > UINT32_MAX)
        return SX_EINVAL;
    sx_pack pk;
    pack_op(&pk, 4, "submit");
    sx_pack_str(&pk, "type");
    sx_pack_str(&pk, type);
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, method);
    sx_pack_str(&pk, "input");
    sx_pack_array(&pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        sx_pack_raw(&pk, input[i]);
    sx_reply local, *r = out != NULL ? out : &local;
    int rc = call_pk(c, &pk, -1, r, r);
    if (rc == 0 && out_pid != NULL) {
        const char *s;
        size_t l;
        char buf[SX_PID_TEXT_MAX];
        if (sx__relay_client_get_str(r->body, "pid", &s, &l) != 0 ||
            l >= sizeof(buf)) {
            rc = SX_EPROTO;
        } else {
            memcpy(buf, s, l);
            buf[l] = '\0';
            rc = sx_pid_parse(buf, out_pid) == 0 ? 0 : SX_EPROTO;
        }
    }
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
    int64_t call_ms = timeout_ms >= 0 && timeout_ms < INT64_MAX - 10000
                          ? timeout_ms + 10000
                          : -1;
    int rc = call_pk(c, &pk, call_ms, r, r);
    if (rc == 0 && out_steps != NULL) {
        sx_payload v;
        sx_unpack u;
        *out_steps = 0;
        if (sx_map_get(r->body, "steps", &v) == 0) {
            sx_unpack_init(&u, v);
            sx_unpack_uint(&u, out_steps);
        }
    }
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

/* engine/commands/http.c — net.http: one HTTP/1.1 request on a connection
 * of its own (engine/commands/net.c makes it), closed afterwards. Arguments,
 * result, limits and errors are in docs/COMMANDS.md ("net.http").
 *
 * This file is the libuv glue; the URL parser, the request builder and the
 * response parser are pure code in engine/commands/http_parse.c. The
 * handler parses the arguments and builds the whole request (head and
 * body, one allocation) on the worker, so that bad input is SX_EINVAL at
 * once and the loop only writes bytes. On the loop the op connects (as
 * net.connect does), writes the request, and is its connection's reader:
 * sx__net_http_feed runs the response parser over the connection's buffer
 * whenever bytes, the end of the stream or an error arrive, consuming what
 * it has parsed. The op ends (sx__net_end closes the connection) when the
 * response is complete, malformed, over a limit or cut short, when
 * timeout_ms passes (a deadline on the loop's timer heap), or when it is
 * cancelled.
 *
 * Limits bound memory whatever the server sends (http_parse.h): the head
 * is at most 64 KiB (kept, with at most 200 fields), the body at most 8
 * MiB, a chunk size or trailer line at most 1 KiB.
 *
 * Threads: sx__net_cmd_http [worker]; everything else [loop]. No atomics.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/commands/http_parse.h"
#include "engine/commands/net.h"

#define HTTP_TIMEOUT_MAX ((int64_t)1 << 40)

_Static_assert(SX__HTTP_HOST_MAX == NET_HOST_MAX,
               "a URL's host has net.connect's bounds");

/* An HTTP op's request and response state; owned by the op (op_fini in
 * engine/commands/net.c frees it with sx__net_http_free). */
struct sx__net_http {
    uint64_t timeout_ms; /* 0: none (the yield's timeout still applies) */
    uint64_t due_ns;     /* timeout_ms from the dispatch of the yield */
    sx__iotimer timer;   /* on the loop's timer heap while armed */
    sx__net_op *owner;   /* the op this belongs to (for the timer) */
    int write_err;       /* the request's write failed (-errno); 0 = fine */
    sx__http_resp resp;  /* the response parser and what it has parsed */
};

static const sx_payload nil = { NULL, 0 };

void sx__net_http_free(sx__net_http *hs)
{
    if (hs == NULL)
        return;
    sx__http_resp_fini(&hs->resp);
    free(hs);
}

void sx__net_http_stop(sx__net_op *c)
{
    if (c->http != NULL)
        sx__io_timer_del(&c->op, &c->http->timer);
}

/* ---- HTTP: sending and the response ---- */

static void http_timeout(sx__iotimer *t)
{
    sx__net_http *hs =
        (sx__net_http *)((char *)t - offsetof(sx__net_http, timer));
    sx__net_op *c = hs->owner;
    char msg[NET_MSG_MAX];
    snprintf(msg, sizeof msg,
             "net.http: %s: no complete response within %llu ms", c->where,
             (unsigned long long)c->http->timeout_ms);
    sx__net_end(c, nil, SX_ETIMEDOUT, msg);
}

void sx__net_http_start(sx__net_op *c)
{
    sx__net_http *hs = c->http;
    hs->owner = c;
    if (hs->timeout_ms > 0) {
        hs->timer.fire = http_timeout;
        if (sx__io_timer_set(&c->op, &hs->timer, hs->due_ns) != 0) {
            sx__net_end(c, nil, SX_ENOMEM, NULL);
            return;
        }
    }
    sx__net_connect_start(c);
}

static void http_write_done(uv_write_t *req, int status)
{
    sx__net_op *c = req->data;
    c->pending--;
    if (c->finished) {
        sx__net_try_release(c);
        return;
    }
    if (status != 0 && status != UV_ECANCELED) {
        /* A server may answer and close before reading the whole
         * request: let the response decide, and report this only if
         * none comes. (c is still its connection's reader; the feed may
         * end and free c.) */
        c->http->write_err = status;
        sx__net_http_feed(c);
    }
}

void sx__net_http_send(sx__net_op *c)
{
    sx__net_conn *n = c->conn;
    uv_buf_t b = uv_buf_init((char *)c->data, (unsigned)c->data_len);
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, (uv_stream_t *)&n->tcp, &b, 1, http_write_done);
    if (rc != 0) {
        sx__net_fail_uv(c, "net.http", c->where, rc);
        return;
    }
    c->pending++;
    n->reader = c;
    sx__net_conn_update_reading(n);
}

static void http_fail(sx__net_op *c, int err, const char *what)
{
    char msg[NET_MSG_MAX];
    snprintf(msg, sizeof msg, "net.http: %s: %s", c->where, what);
    sx__net_end(c, nil, err, msg);
}

/* {"status": int, "headers": {name: value}, "body": bin}; repeated names
 * are joined with ", ". */
static int http_pack(const sx__http_resp *r, sx_pack *pk)
{
    const char *h = r->head;
    bool dup[SX__HTTP_FIELDS_MAX];
    uint32_t distinct = sx__http_resp_distinct(r, dup);
    sx_pack_map(pk, 3);
    sx_pack_str(pk, "status");
    sx_pack_int(pk, r->status);
    sx_pack_str(pk, "headers");
    sx_pack_map(pk, distinct);
    for (unsigned i = 0; i < r->n_fields; i++) {
        if (dup[i])
            continue;
        char *v;
        size_t vl;
        if (sx__http_resp_join(r, i, &v, &vl) != 0)
            return SX_ENOMEM;
        sx_pack_strn(pk, h + r->fields[i].name, r->fields[i].name_len);
        sx_pack_strn(pk, v, vl);
        free(v);
    }
    sx_pack_str(pk, "body");
    sx_pack_bin(pk, r->body != NULL ? r->body : (const uint8_t *)"",
                r->body_len);
    return pk->err;
}

/* Runs the parser over what the connection has; answers when the response
 * is complete, malformed, over a limit, or cut short. */
void sx__net_http_feed(sx__net_op *c)
{
    sx__net_http *hs = c->http;
    sx__net_conn *n = c->conn;
    const char *what = NULL;
    size_t used;
    int rc = sx__http_resp_feed(&hs->resp, sx__net_conn_data(n), n->len, n->eof,
                                &used, &what);
    if (used > 0)
        sx__net_conn_consume(n, used);
    if (rc < 0) {
        http_fail(c, rc, what);
        return;
    }
    if (rc == 1) {
        sx_pack pk;
        sx_pack_init(&pk);
        if (http_pack(&hs->resp, &pk) != 0)
            http_fail(c, SX_ENOMEM, "out of memory");
        else
            sx__net_end(c, sx_pack_payload(&pk), 0, NULL);
        sx_pack_fini(&pk);
        return;
    }
    /* More bytes are needed: are more coming? */
    if (n->err != 0) {
        sx__net_fail_uv(c, "net.http", c->where, n->err);
    } else if (n->eof) {
        if (hs->write_err != 0)
            sx__net_fail_uv(c, "net.http", c->where, hs->write_err);
        else
            http_fail(c, SX_ECLOSED,
                      hs->resp.phase == SX__HTTP_HEAD
                          ? "connection closed before a complete response "
                            "head"
                          : "connection closed before the body ended");
    }
}

/* ---- net.http: the arguments and the request [worker] ---- */

/* What net.http's args say; the pointers point into the args payload,
 * valid during the handler. */
typedef struct {
    const char *method, *url;
    size_t method_len, url_len;
    const void *body;
    size_t body_len;
    bool has_body;
    int64_t timeout_ms;
    sx_payload headers; /* the raw map, or empty */
} http_args;

static bool key_is(const char *k, size_t kl, const char *name)
{
    return strlen(name) == kl && memcmp(k, name, kl) == 0;
}

/* One key's value into a. NULL or the SX_EINVAL message. */
static const char *http_arg(sx_unpack *u, const char *k, size_t kl,
                            http_args *a)
{
    if (key_is(k, kl, "method"))
        return sx_unpack_str(u, &a->method, &a->method_len) == 0
                   ? NULL
                   : "net.http: method must be a string";
    if (key_is(k, kl, "url"))
        return sx_unpack_str(u, &a->url, &a->url_len) == 0
                   ? NULL
                   : "net.http: url must be a string";
    if (key_is(k, kl, "headers"))
        return sx_unpack_raw(u, &a->headers) == 0
                   ? NULL
                   : "net.http: malformed headers";
    if (key_is(k, kl, "body")) {
        if (sx_unpack_nil(u) == 0)
            return NULL;
        a->has_body = true;
        return sx_unpack_bin(u, &a->body, &a->body_len) == 0 ||
                       sx_unpack_str(u, (const char **)&a->body,
                                     &a->body_len) == 0
                   ? NULL
                   : "net.http: body must be a str, bin or nil";
    }
    if (key_is(k, kl, "timeout_ms"))
        return sx_unpack_int(u, &a->timeout_ms) == 0 && a->timeout_ms >= 0 &&
                       a->timeout_ms <= HTTP_TIMEOUT_MAX
                   ? NULL
                   : "net.http: timeout_ms must be an integer from 0 to 2^40 "
                     "(ms)";
    return "net.http: unknown key in args (method, url, headers, body, "
           "timeout_ms)";
}

/* Parses net.http's args (one map; each key at most once). NULL or the
 * SX_EINVAL message. */
static const char *http_args_parse(sx_payload args, http_args *a)
{
    static const char *const keys[] = { "method", "url", "headers", "body",
                                        "timeout_ms" };
    sx_unpack u;
    uint32_t n;
    unsigned seen = 0;
    memset(a, 0, sizeof *a);
    a->method = "GET";
    a->method_len = 3;
    sx_unpack_init(&u, args);
    if (sx_unpack_map(&u, &n) != 0)
        return "net.http: args must be a map {method, url, headers, body, "
               "timeout_ms}";
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        if (sx_unpack_str(&u, &k, &kl) != 0)
            return "net.http: args keys must be strings";
        for (unsigned j = 0; j < sizeof keys / sizeof keys[0]; j++) {
            if (!key_is(k, kl, keys[j]))
                continue;
            if (seen & (1u << j))
                return "net.http: a key is given twice in args";
            seen |= 1u << j;
        }
        const char *err = http_arg(&u, k, kl, a);
        if (err != NULL)
            return err;
    }
    if (!sx_unpack_done(&u))
        return "net.http: malformed args";
    if (a->url == NULL)
        return "net.http: args need a url";
    if (a->method_len > 32 || !sx__http_token(a->method, a->method_len))
        return "net.http: method must be 1-32 token characters";
    return NULL;
}

/* Builds the request (head and body) into c->data. Returns 0, SX_EINVAL
 * (bad headers; *msg set), SX_ELIMIT (over 4 GiB; *msg set) or
 * SX_ENOMEM. */
static int http_build(sx__net_op *c, const http_args *a,
                      const sx__http_url *url, const char **msg)
{
    sx__http_request rq = { .method = a->method,
                            .method_len = a->method_len,
                            .url = url,
                            .headers = a->headers,
                            .body = a->body,
                            .body_len = a->body_len,
                            .has_body = a->has_body };
    uint8_t *req;
    size_t len;
    int rc = sx__http_request_build(&rq, &req, &len, msg);
    if (rc != 0)
        return rc;
    c->data = req; /* owned by c: freed in op_fini */
    c->data_len = len;
    return 0;
}

int sx__net_cmd_http(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    http_args a;
    sx__http_url url;
    const char *msg = http_args_parse(args, &a);
    if (msg == NULL)
        msg = sx__http_url_parse(a.url, a.url_len, &url);
    if (msg != NULL) {
        sx_complete(done, nil, SX_EINVAL, msg);
        return 0;
    }
    sx__net_op *c = sx__net_op_new(done, SX__NET_HTTP);
    if (c == NULL)
        return SX_ENOMEM;
    c->http = calloc(1, sizeof(sx__net_http)); /* owned by c (op_fini) */
    if (c->http == NULL) {
        sx__net_op_discard(c);
        return SX_ENOMEM;
    }
    sx__net_target_set(c, url.host, url.host_len, url.port);
    int rc = http_build(c, &a, &url, &msg);
    if (rc != 0) {
        sx__net_op_discard(c); /* frees c->http too; done is untouched */
        if (rc == SX_ENOMEM)
            return rc; /* dispatch answers it */
        sx_complete(done, nil, rc, msg);
        return 0;
    }
    c->http->timeout_ms = (uint64_t)a.timeout_ms;
    c->http->due_ns = sx__now_ns() + (uint64_t)a.timeout_ms * 1000000u;
    c->http->resp.head_only =
        a.method_len == 4 && strncasecmp(a.method, "HEAD", 4) == 0;
    sx__io_submit(&c->op); /* the loop owns c */
    return 0;
}

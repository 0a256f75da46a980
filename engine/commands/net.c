/* engine/commands/net.c — the net family's connections: TCP connections owned
 * by a process on the libuv loops (engine/io/io.h), made by net.connect
 * (with name resolution) and closed by net.close, and the life of the
 * family's ops. What flows over a connection (its read buffer, net.read
 * and net.write) is engine/commands/net_stream.c; net.http builds on both
 * in engine/commands/http.c; engine/commands/net.h has the types they
 * share. Arguments, results, errors and what a timeout does to each
 * command are in docs/COMMANDS.md ("The net family").
 *
 * A connection is a handle (sx__net_conn): the process's, from the
 * connect that made it until net.close, a write's timeout or the end of
 * the process closes it. An HTTP op makes its own internal connection (no
 * command finds it by id) and is its reader.
 *
 * Lifetimes. An op is released when it is finished (answered or
 * cancelled) and no libuv request or close of its is in flight (`pending`
 * counts them). A connection is released in its uv_close callback; libuv
 * runs the callbacks of the connect and write requests on the stream
 * (UV_ECANCELED when they had not finished) before that one, so an op with
 * a request in flight can rely on its connection being alive. A read or
 * HTTP op that a closing connection answers is released from the
 * connection's close callback, never from inside the cancel that closed
 * it: loop.c walks a process's op list while it cancels them (proc_cancel),
 * and a neighbour freed inside that walk would end the walk early (its
 * pnext is reused for the loop's list of ops to free after the walk:
 * engine/io/ops.c, sx__io_release). So no
 * cancel here releases any op but its own.
 *
 * Exactly one answer per yield: every path that ends an op goes through
 * sx__net_end, which answers once (`finished`); engine/io/ops.c answers
 * SX_ECANCELLED
 * for an op released unanswered, and drops answers that lose to the
 * yield's timeout or reach a finished process.
 *
 * Threads: the cmd_* handlers run on the worker that dispatched the
 * yield; everything else runs on the process's loop thread. No atomics
 * (net.h).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/commands/commands.h"
#include "engine/commands/net.h"

static const sx_payload nil = { NULL, 0 };

/* ---- ops ---- */

void sx__net_try_release(sx__net_op *c)
{
    if (c->finished && c->pending == 0)
        sx__io_release(&c->op);
}

/* Frees what the op owns. One more duty: loop.c releases an op without
 * starting it when its yield's timeout passed before the loop got to it
 * (or its process finished). For a write or a close that still has to
 * close the connection, so that a write's timeout always leaves the
 * connection closed and a close always closes, whichever came first. */
static void op_fini(sx__ioop *op)
{
    sx__net_op *c = (sx__net_op *)op;
    if ((c->kind == SX__NET_WRITE || c->kind == SX__NET_CLOSE) && op->started &&
        !c->ran) {
        sx__net_conn *n = sx__net_conn_find(c, c->hid);
        if (n != NULL)
            sx__io_cancel(&n->h);
    }
    free(c->data);
    if (c->ai != NULL)
        uv_freeaddrinfo(c->ai);
    sx__net_http_free(c->http);
}

/* Answers with an error message "<prefix>: <where>: <libuv's text>". */
void sx__net_fail_uv(sx__net_op *c, const char *prefix, const char *where,
                     int err)
{
    char msg[NET_MSG_MAX], why[128];
    /* uv_strerror_r: uv_strerror leaks for codes libuv does not know. */
    snprintf(msg, sizeof msg, "%s: %s: %s", prefix, where,
             uv_strerror_r(err, why, sizeof why));
    sx__net_end(c, nil, err, msg);
}

/* ---- connections ---- */

static void conn_closed(uv_handle_t *hd)
{
    sx__net_conn *n = hd->data;
    while (n->orphans != NULL) {
        sx__net_op *r = n->orphans;
        n->orphans = r->next;
        r->pending--;
        sx__net_try_release(r);
    }
    sx__io_release(&n->h);
}

/* The connection's cancel: net.close, a write's timeout, an HTTP op that
 * ended, a failed connect attempt, or its process finished. */
static void conn_cancel(sx__ioop *h)
{
    sx__net_conn *n = (sx__net_conn *)h;
    if (n->closing)
        return;
    n->closing = true;
    n->reading = false; /* uv_close stops reading */
    sx__net_op *r = n->reader;
    if (r != NULL) {
        /* Answered now, released when the close has run (see the file
         * comment: not from inside a walk). */
        n->reader = NULL;
        r->pending++;
        r->next = n->orphans;
        n->orphans = r;
        sx__net_end(r, nil, SX_ECLOSED,
                    r->kind == SX__NET_HTTP
                        ? "net.http: the connection was closed"
                        : "net.read: the connection was closed");
    }
    uv_close((uv_handle_t *)&n->tcp, conn_closed);
}

static void conn_fini(sx__ioop *h)
{
    free(((sx__net_conn *)h)->buf);
}

static const sx__ioop_vt conn_vt = { "net-conn", NULL, conn_cancel, conn_fini };

/* A new connection handle with an open (unconnected) uv_tcp_t, or NULL
 * (out of memory, or uv_tcp_init failed: c->last_err says which). */
static sx__net_conn *conn_new(sx__net_op *c)
{
    sx__net_conn *n = (sx__net_conn *)sx__io_handle_new(
        &c->op, sizeof(sx__net_conn), &conn_vt);
    if (n == NULL) {
        c->last_err = SX_ENOMEM;
        return NULL;
    }
    int rc = uv_tcp_init(sx__io_uv(&c->op), &n->tcp);
    if (rc != 0) {
        c->last_err = rc;
        n->closing = true;
        sx__io_release(&n->h); /* no uv handle to close */
        return NULL;
    }
    n->tcp.data = n;
    memcpy(n->where, c->where, sizeof n->where);
    return n;
}

/* The connection `id` of c's process that a command may use, or NULL. */
sx__net_conn *sx__net_conn_find(sx__net_op *c, uint64_t id)
{
    sx__net_conn *n = (sx__net_conn *)sx__io_handle_find(&c->op, id);
    if (n == NULL || n->h.vt != &conn_vt || !n->connected || n->internal ||
        n->closing)
        return NULL;
    return n;
}

/* ---- connect (also the first part of an HTTP request) ---- */

static void connect_next(sx__net_op *c);

static void connect_done(uv_connect_t *req, int status)
{
    sx__net_op *c = req->data;
    c->pending--;
    if (c->finished) { /* cancelled: the connection is closing */
        sx__net_try_release(c);
        return;
    }
    sx__net_conn *n = c->conn;
    if (status == UV_ECANCELED) {
        /* Closed by somebody else (its process finished). */
        c->conn = NULL;
        sx__net_end(c, nil, SX_ECANCELLED, "net.connect: cancelled");
        return;
    }
    if (status != 0) {
        c->last_err = status;
        c->conn = NULL;
        sx__io_cancel(&n->h);
        connect_next(c);
        return;
    }
    n->connected = true;
    uv_tcp_nodelay(&n->tcp, 1); /* request / response: no Nagle delay */
    if (c->kind == SX__NET_HTTP) {
        n->internal = true;
        sx__net_http_send(c);
        return;
    }
    sx__net_conn_update_reading(n);
    c->conn = NULL; /* the process owns it now */
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    sx__net_end(c, sx_payload_int(buf, (int64_t)n->h.handle), 0, NULL);
}

/* Starts a connect to addr on a new connection; false when it could not
 * start (c->last_err says why). */
static bool connect_try(sx__net_op *c, const struct sockaddr *addr)
{
    sx__net_conn *n = conn_new(c);
    if (n == NULL)
        return false;
    c->creq.data = c;
    int rc = uv_tcp_connect(&c->creq, &n->tcp, addr, connect_done);
    if (rc != 0) {
        c->last_err = rc;
        sx__io_cancel(&n->h);
        return false;
    }
    c->conn = n;
    c->pending++;
    return true;
}

/* Tries the resolved addresses in order until one connects. */
static void connect_next(sx__net_op *c)
{
    while (c->ai_next != NULL) {
        struct addrinfo *ai = c->ai_next;
        c->ai_next = ai->ai_next;
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
            continue;
        if (connect_try(c, ai->ai_addr))
            return;
    }
    sx__net_fail_uv(c, c->kind == SX__NET_HTTP ? "net.http" : "net.connect",
                    c->where, c->last_err);
}

/* libuv's resolver statuses (UV_EAI_*) are not errno values: map them. */
static int resolve_err(int status)
{
    switch (status) {
    case UV_EAI_NONAME:
    case UV_EAI_NODATA:
    case UV_EAI_ADDRFAMILY:
    case UV_EAI_SERVICE:
        return SX_ENOTFOUND;
    case UV_EAI_AGAIN:
        return -EAGAIN;
    case UV_EAI_MEMORY:
        return SX_ENOMEM;
    case UV_EAI_CANCELED:
        return SX_ECANCELLED;
    case UV_EAI_FAIL:
    case UV_EAI_BADFLAGS:
    case UV_EAI_BADHINTS:
    case UV_EAI_FAMILY:
    case UV_EAI_OVERFLOW:
    case UV_EAI_PROTOCOL:
    case UV_EAI_SOCKTYPE:
        return -EIO;
    default:
        return status; /* already -errno */
    }
}

static void resolve_failed(sx__net_op *c, int status)
{
    char msg[NET_MSG_MAX], why[128];
    snprintf(msg, sizeof msg, "%s: cannot resolve \"%s\": %s",
             c->kind == SX__NET_HTTP ? "net.http" : "net.connect", c->host,
             uv_strerror_r(status, why, sizeof why));
    sx__net_end(c, nil, resolve_err(status), msg);
}

static void connect_resolved(uv_getaddrinfo_t *req, int status,
                             struct addrinfo *res)
{
    sx__net_op *c = req->data;
    c->pending--;
    c->resolving = false;
    c->ai = res; /* freed in op_fini */
    c->ai_next = res;
    if (c->finished) {
        sx__net_try_release(c);
        return;
    }
    if (status != 0) {
        resolve_failed(c, status);
        return;
    }
    c->last_err = UV_EADDRNOTAVAIL; /* in case no address is usable */
    connect_next(c);
}

void sx__net_connect_start(sx__net_op *c)
{
    union {
        struct sockaddr sa;
        struct sockaddr_in v4;
        struct sockaddr_in6 v6;
    } a;
    memset(&a, 0, sizeof a);
    if (uv_ip4_addr(c->host, c->port, &a.v4) == 0 ||
        uv_ip6_addr(c->host, c->port, &a.v6) == 0) {
        if (!connect_try(c, &a.sa))
            sx__net_fail_uv(
                c, c->kind == SX__NET_HTTP ? "net.http" : "net.connect",
                c->where, c->last_err);
        return;
    }
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)c->port);
    c->gai.data = c;
    int rc = uv_getaddrinfo(sx__io_uv(&c->op), &c->gai, connect_resolved,
                            c->host, port, &hints);
    if (rc != 0) {
        resolve_failed(c, rc);
        return;
    }
    c->resolving = true;
    c->pending++;
}

/* ---- the op ---- */

/* Answers c (once), ends its work and releases it when nothing of it is
 * in flight any more. An op that still holds a connection when it ends
 * closes it, unless it is a read: that is a connect not yet answered (a
 * half-open connection), a write still in flight (cancelled: a partial
 * write leaves the stream undefined) or an HTTP exchange (done). A read
 * only gives up the reader slot. */
void sx__net_end(sx__net_op *c, sx_payload result, int err, const char *msg)
{
    if (c->finished)
        return; /* answered already */
    c->finished = true;
    if (c->resolving)
        uv_cancel((uv_req_t *)&c->gai); /* its callback still runs */
    if (c->kind == SX__NET_HTTP)
        sx__net_http_stop(c);
    sx__net_conn *n = c->conn;
    c->conn = NULL;
    if (n != NULL) {
        bool was_reader = n->reader == c;
        if (was_reader)
            n->reader = NULL;
        if (c->kind != SX__NET_READ)
            sx__io_cancel(&n->h);
        else if (was_reader)
            sx__net_conn_update_reading(n);
    }
    if (c->pending == 0)
        sx__io_finish(&c->op, result, err, msg); /* frees c */
    else
        sx__io_answer(&c->op, result, err, msg); /* released when idle */
}

static void net_start(sx__ioop *op)
{
    sx__net_op *c = (sx__net_op *)op;
    c->ran = true;
    switch (c->kind) {
    case SX__NET_CONNECT:
        sx__net_connect_start(c);
        break;
    case SX__NET_HTTP:
        sx__net_http_start(c);
        break;
    case SX__NET_READ:
        sx__net_read_start(c);
        break;
    case SX__NET_WRITE:
        sx__net_write_start(c);
        break;
    case SX__NET_CLOSE: {
        sx__net_conn *n = sx__net_conn_find(c, c->hid);
        if (n == NULL) {
            sx__net_end(c, nil, SX_ENOTFOUND, "net.close: no such connection");
            break;
        }
        sx__io_cancel(&n->h); /* its read and writes answer SX_ECLOSED */
        sx__net_end(c, nil, 0, NULL);
        break;
    }
    }
}

/* The owner finished, the yield's timeout passed, or the engine stops. */
static void net_cancel(sx__ioop *op)
{
    sx__net_end((sx__net_op *)op, nil, SX_ECANCELLED, NULL);
}

static const sx__ioop_vt net_vt = { "net", net_start, net_cancel, op_fini };

/* ---- handlers [worker] ---- */

sx__net_op *sx__net_op_new(sx_completer *done, sx__net_kind kind)
{
    sx__net_op *c =
        (sx__net_op *)sx__io_op_new(sizeof(sx__net_op), &net_vt, done);
    if (c != NULL)
        c->kind = kind;
    return c;
}

void sx__net_op_discard(sx__net_op *c)
{
    op_fini(&c->op);
    free(c);
}

/* Copies a checked host and port into c, with the "host:port" text used
 * in messages. */
void sx__net_target_set(sx__net_op *c, const char *host, size_t len,
                        int64_t port)
{
    memcpy(c->host, host, len);
    c->host[len] = 0;
    c->port = (uint16_t)port;
    bool v6 = memchr(host, ':', len) != NULL;
    snprintf(c->where, sizeof c->where, v6 ? "[%s]:%u" : "%s:%u", c->host,
             (unsigned)c->port);
}

static int cmd_connect(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                       sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    sx_unpack u;
    uint32_t n;
    const char *host;
    size_t host_len;
    int64_t port;
    sx_unpack_init(&u, args);
    if (sx_unpack_array(&u, &n) != 0 || n != 2 ||
        sx_unpack_str(&u, &host, &host_len) != 0 ||
        sx_unpack_int(&u, &port) != 0 || !sx_unpack_done(&u))
        return sx__net_bad_args(done, "net.connect: args must be [host, port]");
    /* The host and port rules every part of stepx shares
     * (process/hostport.h); the host may be a bare IPv6 address here. */
    sx__hostport t;
    const char *why = sx__host_parse(host, host_len, &t);
    if (why == NULL)
        why = sx__port_check(port, 0);
    if (why != NULL) {
        char msg[NET_MSG_MAX];
        snprintf(msg, sizeof msg, "net.connect: %s", why);
        return sx__net_bad_args(done, msg);
    }
    sx__net_op *c = sx__net_op_new(done, SX__NET_CONNECT);
    if (c == NULL)
        return SX_ENOMEM;
    sx__net_target_set(c, t.host, strlen(t.host), port);
    sx__io_submit(&c->op); /* the loop owns c */
    return 0;
}

static int cmd_close(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    sx_unpack u;
    uint32_t n;
    uint64_t hid;
    sx_unpack_init(&u, args);
    bool ok = sx__net_get_handle(&u, &hid);
    if (!ok && sx_unpack_array(&u, &n) == 0 && n == 1)
        ok = sx__net_get_handle(&u, &hid);
    if (!ok || !sx_unpack_done(&u))
        return sx__net_bad_args(done,
                                "net.close: args must be a connection handle");
    sx__net_op *c = sx__net_op_new(done, SX__NET_CLOSE);
    if (c == NULL)
        return SX_ENOMEM;
    c->hid = hid;
    sx__io_submit(&c->op);
    return 0;
}

void sx__cmd_net_register(sx_engine *e)
{
    e->cmds[SX_CMD_NET_CONNECT] =
        (sx__cmd){ cmd_connect, NULL, "net.connect", false };
    e->cmds[SX_CMD_NET_WRITE] =
        (sx__cmd){ sx__net_cmd_write, NULL, "net.write", false };
    e->cmds[SX_CMD_NET_READ] =
        (sx__cmd){ sx__net_cmd_read, NULL, "net.read", false };
    e->cmds[SX_CMD_NET_CLOSE] =
        (sx__cmd){ cmd_close, NULL, "net.close", false };
    e->cmds[SX_CMD_NET_HTTP] =
        (sx__cmd){ sx__net_cmd_http, NULL, "net.http", false };
}

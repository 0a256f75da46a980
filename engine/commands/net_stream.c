/* engine/commands/net_stream.c — the bytes on a net connection: its read
 * buffer and back-pressure, net.read (with or without a delimiter) and
 * net.write, and their handlers. Connections, connect, close and the ops'
 * life are engine/commands/net.c; engine/commands/net.h has the types.
 *
 * Once connected a connection reads eagerly into its own buffer, so that
 * data, EOF and errors are seen without a read pending, and it stops
 * reading (back-pressure) while more than NET_HIGH_WATER bytes wait with
 * no read pending. A read op is the connection's one reader until it is
 * answered (an HTTP op is its connection's reader too, and is fed from
 * the same buffer: sx__net_http_feed); writes are queued by libuv in
 * order, each with its own copy of the data.
 *
 * Threads: the sx__net_cmd_* handlers run on the worker that dispatched
 * the yield; everything else runs on the process's loop thread. No
 * atomics (net.h).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/commands/net.h"

#define NET_HIGH_WATER ((size_t)1 << 20)  /* stop reading above this  */
#define NET_READ_MAX ((size_t)64 << 20)   /* largest `max` of a read   */
#define NET_CHUNK ((size_t)64 << 10)      /* least room offered a read */
#define NET_CHUNK_MAX ((size_t)256 << 10) /* most offered per read     */
#define NET_KEEP ((size_t)256 << 10)      /* larger empty buffers go   */

static const sx_payload nil = { NULL, 0 };

/* ---- the read buffer ---- */

static void conn_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *out)
{
    sx__net_conn *n = hd->data;
    (void)suggested;
    if (n->cap - n->off - n->len < NET_CHUNK) {
        if (n->off > 0 && n->cap - n->len >= NET_CHUNK) {
            memmove(n->buf, n->buf + n->off, n->len);
            n->off = 0;
        } else {
            size_t cap = n->cap > 0 ? n->cap : NET_CHUNK;
            while (cap < n->len + NET_CHUNK)
                cap *= 2;
            uint8_t *b = malloc(cap);
            if (b == NULL) {
                *out = uv_buf_init(NULL, 0); /* on_read gets UV_ENOBUFS */
                return;
            }
            if (n->len > 0)
                memcpy(b, n->buf + n->off, n->len);
            free(n->buf);
            n->buf = b;
            n->off = 0;
            n->cap = cap;
        }
    }
    size_t room = n->cap - n->off - n->len;
    if (room > NET_CHUNK_MAX)
        room = NET_CHUNK_MAX; /* bounds the overshoot past the high water */
    *out = uv_buf_init((char *)n->buf + n->off + n->len, (unsigned)room);
}

/* The unread bytes (never a null pointer, even with no buffer). */
const uint8_t *sx__net_conn_data(const sx__net_conn *n)
{
    return n->buf != NULL ? n->buf + n->off : (const uint8_t *)"";
}

/* Drops k bytes from the front of the buffer. */
void sx__net_conn_consume(sx__net_conn *n, size_t k)
{
    n->off += k;
    n->len -= k;
    if (n->len == 0) {
        n->off = 0;
        if (n->cap > NET_KEEP) {
            free(n->buf);
            n->buf = NULL;
            n->cap = 0;
        }
    }
}

static void read_try(sx__net_op *r);

static void reader_try(sx__net_conn *n)
{
    sx__net_op *r = n->reader;
    if (r == NULL)
        return;
    if (r->kind == SX__NET_HTTP)
        sx__net_http_feed(r);
    else
        read_try(r);
}

static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    sx__net_conn *n = s->data;
    (void)buf; /* it points into n->buf */
    if (nread > 0) {
        n->len += (size_t)nread;
    } else if (nread < 0) {
        if (nread == UV_EOF)
            n->eof = true;
        else
            n->err = nread == UV_ENOBUFS ? SX_ENOMEM : (int)nread;
        uv_read_stop(s);
        n->reading = false;
    }
    reader_try(n);
    sx__net_conn_update_reading(n);
}

/* Reads from the socket while something may want the bytes: a reader is
 * pending, or the buffer is below the high water mark. */
void sx__net_conn_update_reading(sx__net_conn *n)
{
    if (n->closing || !n->connected)
        return;
    bool want = !n->eof && n->err == 0 &&
                (n->reader != NULL || n->len < NET_HIGH_WATER);
    if (want && !n->reading) {
        int rc =
            uv_read_start((uv_stream_t *)&n->tcp, conn_alloc, conn_on_read);
        if (rc != 0) {
            n->err = rc;
            reader_try(n);
            return;
        }
        n->reading = true;
    } else if (!want && n->reading) {
        uv_read_stop((uv_stream_t *)&n->tcp);
        n->reading = false;
    }
}

/* ---- read ---- */

/* Answers r with the first k buffered bytes (a bin) and drops them. */
static void read_give(sx__net_op *r, size_t k)
{
    sx__net_conn *n = r->conn;
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_bin(&pk, sx__net_conn_data(n), k);
    if (pk.err != 0) {
        sx_pack_fini(&pk);
        sx__net_end(r, nil, SX_ENOMEM, NULL); /* the bytes stay */
        return;
    }
    sx__net_conn_consume(n, k);
    sx__net_end(r, sx_pack_payload(&pk), 0, NULL); /* sx_complete copies */
    sx_pack_fini(&pk);
}

/* Answers the pending read r if it can be answered now. */
static void read_try(sx__net_op *r)
{
    sx__net_conn *n = r->conn;
    const uint8_t *p = sx__net_conn_data(n);
    if (r->delim_len == 0) {
        if (n->len > 0) {
            read_give(r, n->len < r->max ? n->len : r->max);
            return;
        }
    } else {
        /* The delimiter must end within the first max bytes. */
        size_t lim = n->len < r->max ? n->len : r->max;
        size_t d = r->delim_len;
        for (size_t i = r->scanned; i + d <= lim; i++) {
            const uint8_t *q = memchr(p + i, r->delim[0], lim - d + 1 - i);
            if (q == NULL)
                break;
            i = (size_t)(q - p);
            if (memcmp(q, r->delim, d) == 0) {
                read_give(r, i + d);
                return;
            }
        }
        r->scanned = lim >= d ? lim - d + 1 : 0;
        if (n->len >= r->max) {
            sx__net_end(r, nil, SX_ELIMIT,
                        "net.read: no delimiter within max bytes (they stay "
                        "buffered)");
            return;
        }
    }
    if (n->err != 0) {
        sx__net_fail_uv(r, "net.read", n->where, n->err);
    } else if (n->eof) {
        sx__net_end(r, nil, SX_ECLOSED,
                    n->len == 0
                        ? "net.read: connection closed by peer"
                        : "net.read: connection closed by peer before the "
                          "delimiter (the bytes stay buffered)");
    }
}

void sx__net_read_start(sx__net_op *c)
{
    sx__net_conn *n = sx__net_conn_find(c, c->hid);
    if (n == NULL) {
        sx__net_end(c, nil, SX_ENOTFOUND, "net.read: no such connection");
        return;
    }
    if (n->reader != NULL) {
        sx__net_end(c, nil, SX_ESTATE,
                    "net.read: another read is pending on this connection");
        return;
    }
    c->conn = n;
    n->reader = c;
    read_try(c);
    sx__net_conn_update_reading(n);
}

/* ---- write ---- */

static void write_done(uv_write_t *req, int status)
{
    sx__net_op *c = req->data;
    c->pending--;
    if (c->finished) {
        sx__net_try_release(c);
        return;
    }
    /* Done with the connection: it stays open (sx__net_end would close it). */
    sx__net_conn *n = c->conn;
    c->conn = NULL;
    if (status == 0)
        sx__net_end(c, nil, 0, NULL);
    else if (status == UV_ECANCELED)
        sx__net_end(c, nil, SX_ECLOSED,
                    "net.write: the connection was closed before the write "
                    "finished");
    else
        sx__net_fail_uv(c, "net.write", n->where, status);
}

void sx__net_write_start(sx__net_op *c)
{
    sx__net_conn *n = sx__net_conn_find(c, c->hid);
    if (n == NULL) {
        sx__net_end(c, nil, SX_ENOTFOUND, "net.write: no such connection");
        return;
    }
    if (c->data_len == 0) {
        sx__net_end(c, nil, 0, NULL);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)c->data, (unsigned)c->data_len);
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, (uv_stream_t *)&n->tcp, &b, 1, write_done);
    if (rc != 0) {
        sx__net_fail_uv(c, "net.write", n->where, rc);
        return;
    }
    c->conn = n;
    c->pending++;
}

/* ---- handlers [worker] ---- */

int sx__net_cmd_write(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                      sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    sx_unpack u;
    uint32_t n;
    uint64_t hid;
    const void *data = NULL;
    size_t len = 0;
    sx_unpack_init(&u, args);
    bool ok =
        sx_unpack_array(&u, &n) == 0 && n == 2 && sx__net_get_handle(&u, &hid);
    if (ok && sx_unpack_bin(&u, &data, &len) != 0)
        ok = sx_unpack_str(&u, (const char **)&data, &len) == 0;
    if (!ok || !sx_unpack_done(&u) || len > UINT32_MAX)
        return sx__net_bad_args(done,
                                "net.write: args must be [handle, data (str or "
                                "bin)]");
    sx__net_op *c = sx__net_op_new(done, SX__NET_WRITE);
    if (c == NULL)
        return SX_ENOMEM;
    if (len > 0) {
        c->data = malloc(len); /* owned by c: freed in op_fini */
        if (c->data == NULL) {
            free(c);
            return SX_ENOMEM;
        }
        memcpy(c->data, data, len);
    }
    c->data_len = len;
    c->hid = hid;
    sx__io_submit(&c->op);
    return 0;
}

int sx__net_cmd_read(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    sx_unpack u;
    uint32_t n;
    uint64_t hid, max;
    const void *delim = NULL;
    size_t delim_len = 0;
    sx_unpack_init(&u, args);
    bool ok = sx_unpack_array(&u, &n) == 0 && (n == 2 || n == 3) &&
              sx__net_get_handle(&u, &hid) && sx_unpack_uint(&u, &max) == 0;
    if (ok && n == 3 && sx_unpack_bin(&u, &delim, &delim_len) != 0)
        ok = sx_unpack_str(&u, (const char **)&delim, &delim_len) == 0;
    if (!ok || !sx_unpack_done(&u))
        return sx__net_bad_args(done, "net.read: args must be [handle, max] or "
                                      "[handle, max, delimiter]");
    if (max < 1 || max > NET_READ_MAX)
        return sx__net_bad_args(done, "net.read: max must be 1 to 64 MiB");
    if (n == 3 && (delim_len < 1 || delim_len > NET_DELIM_MAX))
        return sx__net_bad_args(done,
                                "net.read: the delimiter must be 1-64 bytes");
    if (delim_len > max)
        return sx__net_bad_args(done,
                                "net.read: the delimiter is longer than max");
    sx__net_op *c = sx__net_op_new(done, SX__NET_READ);
    if (c == NULL)
        return SX_ENOMEM;
    c->hid = hid;
    c->max = (size_t)max;
    if (delim_len > 0)
        memcpy(c->delim, delim, delim_len);
    c->delim_len = delim_len;
    sx__io_submit(&c->op);
    return 0;
}

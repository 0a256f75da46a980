/* engine/commands/net.h — what the files of the net family share: the
 * connection handle and the op (one yield's work). Internal.
 *
 * engine/commands/net.c has connections (making, finding, closing),
 * connect (with name resolution), close, and the ops' life;
 * engine/commands/net_stream.c what flows over a connection (its read
 * buffer and back-pressure, read with its delimiter, write);
 * engine/commands/http.c has net.http (building the request on the
 * worker, parsing the response on the loop). An HTTP op makes its own
 * connection through net.c and is that connection's reader.
 *
 * Threads: functions are [loop] (the op's loop thread) unless tagged
 * [worker]. Nothing here is shared between threads except through loop.c's
 * hand-off (the request queue publishes what a handler filled in), so
 * there are no atomics in the net family.
 */
#ifndef SX_ENGINE_CMD_NET_H
#define SX_ENGINE_CMD_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/io/io.h"
#include "process/hostport.h"

#define NET_HOST_MAX SX__HOST_MAX
#define NET_WHERE_MAX (NET_HOST_MAX + 16) /* "[host]:port" */
#define NET_DELIM_MAX 64
#define NET_MSG_MAX 512

typedef struct sx__net_conn sx__net_conn;
typedef struct sx__net_op sx__net_op;
typedef struct sx__net_http sx__net_http; /* http.c */

typedef enum {
    SX__NET_CONNECT = 1,
    SX__NET_WRITE,
    SX__NET_READ,
    SX__NET_CLOSE,
    SX__NET_HTTP
} sx__net_kind;

/* A connection: a handle owned by the process that connected (or by an
 * HTTP op, `internal`). Released in its uv_close callback. [loop] */
struct sx__net_conn {
    sx__ioop h; /* first; a handle (h.done == NULL) */
    uv_tcp_t tcp;
    bool connected; /* the connect succeeded */
    bool internal;  /* an HTTP op's own: no command finds it */
    bool reading;   /* uv_read_start is in effect */
    bool eof;       /* the peer closed its side */
    bool closing;   /* uv_close was called */
    int err;        /* a read error (-errno or SX_ENOMEM), sticky */
    /* Unread bytes are buf[off, off + len); buf (cap bytes) is owned. */
    uint8_t *buf;
    size_t off, len, cap;
    sx__net_op *reader;        /* the pending read or HTTP op, or NULL */
    sx__net_op *orphans;       /* readers answered by the close, released
                                  in conn_closed (linked by next) */
    char where[NET_WHERE_MAX]; /* "host:port", for messages */
};

/* One yield's work. The handler fills in the arguments on the worker;
 * everything else is [loop]. Released once `finished` (answered or
 * cancelled) and `pending` is 0. */
struct sx__net_op {
    sx__ioop op; /* first */
    sx__net_kind kind;
    unsigned pending;   /* gai, connect, write, or the close of the
                           connection that answered it, in flight */
    bool finished;      /* answered (or cancelled): release once idle */
    bool resolving;     /* the uv_getaddrinfo request is in flight */
    bool ran;           /* net_start ran (see op_fini) */
    uint64_t hid;       /* write, read, close: the handle named in args */
    sx__net_conn *conn; /* the connection this op works on or makes */
    sx__net_op *next;   /* on conn->orphans */
    /* connect, http */
    char host[NET_HOST_MAX + 1];
    uint16_t port;
    char where[NET_WHERE_MAX];
    uv_getaddrinfo_t gai;
    struct addrinfo *ai, *ai_next; /* resolved; owned (op_fini) */
    uv_connect_t creq;
    int last_err; /* the last connect attempt's error */
    /* write, http: the bytes to send, owned (op_fini) */
    uint8_t *data;
    size_t data_len;
    uv_write_t wreq;
    /* read */
    size_t max;
    size_t scanned; /* delimiter search: starts before this were tried */
    uint8_t delim[NET_DELIM_MAX];
    size_t delim_len;
    sx__net_http *http; /* SX__NET_HTTP; owned (op_fini) */
};

/* ---- net.c ---- */

/* Answers c (once), ends its work and releases it when nothing of it is
 * in flight any more; c may be gone when it returns. See net.c. */
void sx__net_end(sx__net_op *c, sx_payload result, int err, const char *msg);
/* sx__net_end with "<prefix>: <where>: <libuv's text for err>". */
void sx__net_fail_uv(sx__net_op *c, const char *prefix, const char *where,
                     int err);
/* Releases c if it is finished and idle. */
void sx__net_try_release(sx__net_op *c);
/* Resolves c->host if needed and connects to c->port; ends c on failure.
 * On success an HTTP op goes on in sx__net_http_send. */
void sx__net_connect_start(sx__net_op *c);
/* The connection `id` of c's process that a command may use (connected,
 * not an HTTP op's, not closing), or NULL. */
sx__net_conn *sx__net_conn_find(sx__net_op *c, uint64_t id);
/* [worker] A new op answering done, or NULL (out of memory). */
sx__net_op *sx__net_op_new(sx_completer *done, sx__net_kind kind);
/* [worker] Frees an op that was never submitted (done is untouched). */
void sx__net_op_discard(sx__net_op *c);
/* [worker] Copies a host and port checked by process/hostport.h (the host
 * without brackets) into c, with c->where. */
void sx__net_target_set(sx__net_op *c, const char *host, size_t len,
                        int64_t port);

/* [worker] Answers a handler's bad arguments: SX_EINVAL with msg. Returns
 * 0, the handler's own return (the yield is answered). */
static inline int sx__net_bad_args(sx_completer *done, const char *msg)
{
    sx_complete(done, (sx_payload){ NULL, 0 }, SX_EINVAL, msg);
    return 0;
}

/* [worker] Reads a connection handle (an unsigned integer) into *hid. */
static inline bool sx__net_get_handle(sx_unpack *u, uint64_t *hid)
{
    return sx_unpack_uint(u, hid) == 0;
}

/* ---- net_stream.c ---- */

/* The unread bytes of n (never a null pointer) and dropping k of them. */
const uint8_t *sx__net_conn_data(const sx__net_conn *n);
void sx__net_conn_consume(sx__net_conn *n, size_t k);
/* Starts or stops reading from n's socket as its reader and buffer need. */
void sx__net_conn_update_reading(sx__net_conn *n);
/* net.read and net.write on the loop: the op's start. */
void sx__net_read_start(sx__net_op *c);
void sx__net_write_start(sx__net_op *c);
/* [worker] The net.read and net.write handlers. */
int sx__net_cmd_read(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done);
int sx__net_cmd_write(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                      sx_payload args, sx_completer *done);

/* ---- http.c ---- */

/* Arms net.http's timeout_ms and starts the connect. */
void sx__net_http_start(sx__net_op *c);
/* The connection is up: send the request and read the response. */
void sx__net_http_send(sx__net_op *c);
/* Parses what the connection has buffered; answers when it can. */
void sx__net_http_feed(sx__net_op *c);
/* c is ending: disarm its timeout. */
void sx__net_http_stop(sx__net_op *c);
/* [any thread] Frees an HTTP op's state (NULL is fine). */
void sx__net_http_free(sx__net_http *hs);
/* [worker] The net.http handler. */
int sx__net_cmd_http(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done);

#endif

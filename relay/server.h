/* relay/server.h — the relay server's internal data, shared by
 * relay/server.c (start, stop, listeners, the hand-off queue),
 * relay/conn.c (one client connection: reads, writes, back-pressure, its
 * mailbox), relay/ops.c (the protocol's operations) and relay/pending.c
 * (the records behind wait and subscribe). Never installed.
 *
 * Threads: the server runs one libuv loop thread of its own. Everything
 * marked [loop] is touched by that thread only. Engine threads (workers,
 * io loops, callers of sx_engine_send) reach the server only through the
 * hub (a mutex-guarded FIFO of relay_out items plus a uv_async doorbell),
 * from mailbox callbacks and watch callbacks. The big picture and every
 * lifetime rule are in docs/RELAY.md.
 */
#ifndef SX_RELAY_SERVER_H
#define SX_RELAY_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include <stepx/relay.h>

#include "relay/wire.h"

#define SX_RELAY_SERVER_NAME "stepxd/0.1.0"
#define SX_RELAY_MAX_OUTPUT_DEFAULT ((size_t)64 << 20)
#define SX_RELAY_MAX_CONNECTIONS_DEFAULT 1024
#define SX_RELAY_READ_BUF 65536
#define SX_RELAY_WRITE_BUFS 64    /* frames per writev when flushing */
#define SX_RELAY_PS_DEFAULT 10000 /* `ps` without `limit` */
#define SX_RELAY_MAX_PENDING                                                   \
    (1u << 16) /* waits + subscribes per connection                            \
                */

typedef struct relay_conn relay_conn;
typedef struct relay_pending relay_pending;
typedef struct relay_hub relay_hub;

/* What an item is for. */
enum {
    RELAY_OUT_REPLY = 0, /* a reply built on the loop                      */
    RELAY_OUT_PUSH = 1,  /* a message push built by a mailbox callback     */
    RELAY_OUT_DONE = 2,  /* a wait's reply or a subscribe's push, built by
                            a watch callback                               */
    RELAY_OUT_SLOW = 3,  /* the connection went over its output limit, or
                            a callback could not build a push: drop it    */
};

/* One frame on its way to a client, and the hub's unit of hand-off. Built
 * (header and body) by whoever makes it; owned by the hub while queued,
 * then by the loop, then by libuv while written (req), then freed in the
 * write callback. Items embedded in a connection or a pending record
 * (`embedded`) carry no bytes and are never freed on their own. */
typedef struct relay_out {
    uv_write_t req;         /* [loop] while being written              */
    struct relay_out *next; /* hub FIFO link (hub mutex)               */
    uint8_t kind;           /* RELAY_OUT_*                             */
    uint8_t embedded;
    uint8_t slow;        /* SLOW: 1 too slow, 0 a push that cannot
                            be framed (counted apart)               */
    size_t wlen;         /* [loop] the first item of a write request:
                            the bytes that request covers (the items
                            after it hang off `next`)                */
    relay_conn *conn;    /* PUSH, SLOW: a reference to the connection */
    relay_pending *pend; /* DONE: the watch's reference to the record */
    size_t len;          /* bytes used in data (header included)       */
    size_t cap;          /* bytes allocated at data                    */
    uint8_t *data;       /* the frame: 4-byte length, then the map;
                            allocated with the item (NULL if embedded) */
} relay_out;

/* Allocates an item with room for cap frame bytes (len 0). NULL when out
 * of memory. [any thread] */
relay_out *sx__relay_out_new(uint8_t kind, size_t cap);
/* Frees an item that is not embedded (NULL is a no-op). [any thread] */
void sx__relay_out_free(relay_out *o);
/* Writes the 4-byte length header for a body packed at data + 4. */
void sx__relay_out_seal(relay_out *o, size_t body_len);
/* A sealed item whose body sx__wire_check_utf8 passed with *fixed_len =
 * fixed_len > 0: a new item of the same kind holding the body with its
 * strs that are not UTF-8 as bin (sx__wire_utf8_fix), sealed; o is freed
 * either way. NULL when out of memory. [any thread] */
relay_out *sx__relay_out_utf8(relay_out *o, size_t fixed_len);

/* The hand-off from engine threads to the loop. Refcounted because a
 * watch callback may fire after the server has stopped (an IDLE process
 * finishes when the engine stops): it then finds the hub closed and frees
 * what it built. References: the server's, and one per pending record. */
struct relay_hub {
    pthread_mutex_t mu;
    relay_out *head, *tail; /* (mu) FIFO: per-sender order is kept      */
    bool closed;            /* (mu) set by the loop on its way out      */
    bool stop;              /* (mu) sx_server_stop asked the loop to end */
    uv_async_t *bell;       /* (mu) rung under mu while !closed         */
    /* Writers: whoever takes or drops a reference (acq_rel on the drop
     * that may free). */
    _Atomic uint32_t refs;
};

void sx__relay_hub_ref(relay_hub *h);
void sx__relay_hub_unref(relay_hub *h);
/* Queues o and rings the loop: 0, or SX_ECLOSED when the hub is closed
 * (the caller still owns o). [any thread] */
int sx__relay_hub_post(relay_hub *h, relay_out *o);

/* A wait or a subscribe in progress: what the watch callback needs to
 * answer, and what the loop needs to time it out or abandon it.
 * References: the watch's (until its answer is drained from the hub, or
 * dropped because the hub closed) and the loop's (until the record is done
 * and its timer, if any, is closed). Holds one reference to its
 * connection and one to the hub, dropped when it is freed. */
enum { RELAY_PEND_WAIT = 1, RELAY_PEND_SUBSCRIBE = 2 };
struct relay_pending {
    _Atomic uint32_t refs;
    uint8_t kind; /* RELAY_PEND_*                                        */
    uint64_t id;  /* the wait request's id                               */
    sx_pid pid;
    relay_conn *conn; /* a reference (NULL while dormant)                 */
    relay_hub *hub;   /* a reference                                     */
    sx_server *srv;   /* [loop] the server (its dormant table)           */
    size_t max_frame; /* answers bigger than this become an error        */
    /* Set (release) by the watch callback once it has built its answer;
     * read (acquire) by the loop right after sx_engine_watch returns, so
     * that a wait whose answer is already on its way arms no timer. */
    _Atomic bool fired;
    bool done; /* [loop] answered, timed out or abandoned                */
    /* [loop] A wait that timed out while its process went on: in the
     * server's dormant table (keeping the loop's reference and its timer)
     * until its watch fires or a new wait on the same PID takes it over
     * (pending.c, "dormant waits"). */
    bool dormant;
    relay_pending *dnext; /* [loop] the dormant table's chain */
    bool has_timer;
    uv_timer_t timer;           /* [loop] wait's timeout_ms    */
    relay_pending *prev, *next; /* [loop] the connection's list */
    relay_out oom;              /* the answer when building one
                                   ran out of memory (embedded) */
    /* [loop] The answer watch_cb built inline, inside sx_engine_watch on
     * the loop thread (the process had finished already): watch_start
     * answers it at once, without the hub's hop. */
    relay_out *inline_out;
};

void sx__relay_pending_unref(relay_pending *p);

/* A client connection. References: the loop's (from accept until its
 * handle's close callback), one per PUSH or SLOW item in flight, one per
 * pending record. The last one frees it, on whichever thread drops it:
 * by then only plain memory is left. */
enum { RELAY_CONN_OPEN = 0, RELAY_CONN_DRAINING = 1, RELAY_CONN_CLOSED = 2 };
struct relay_conn {
    _Atomic uint32_t refs;
    sx_server *srv; /* [loop]; also read by the mailbox callback, which
                       the mailbox's lifetime keeps inside the server's  */
    union {
        uv_stream_t stream;
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } h;
    sx_wire_decoder *dec; /* [loop]                                      */
    sx_pid mailbox;       /* immutable once the mailbox exists           */
    bool has_mailbox;     /* [loop]                                      */
    int state;            /* [loop] RELAY_CONN_*                         */
    bool reading;         /* [loop] uv_read_start is in force            */
    bool authed;          /* [loop] hello carried the token (or none set) */
    bool pumping;         /* [loop] inside conn_pump (no re-entry)       */
    size_t unsent;        /* [loop] bytes handed to uv_write, not done   */
    size_t max_output;    /* immutable copy of the server's limit        */
    /* Mirror of unsent for mailbox callbacks: written by the loop, read
     * by callbacks (relaxed: a limit check, no data behind it). */
    _Atomic size_t unsent_pub;
    /* Push bytes queued in the hub, not yet taken by the loop: added by
     * mailbox callbacks, taken off by the loop (relaxed: a limit check). */
    _Atomic size_t queued;
    /* 0 -> 1 once (exchange, acq_rel) by the first callback that finds
     * the connection over its limit; it alone posts slow_item. */
    _Atomic uint8_t slow;
    relay_out slow_item; /* embedded, kind SLOW               */
    /* [loop] Frames written this loop iteration, not yet handed to
     * libuv (counted in unsent): the server's prepare handle writes them
     * all at once (one writev) before the loop next waits. */
    relay_out *batch, *batch_tail;
    bool dirty;             /* [loop] on the server's dirty list */
    relay_conn *dirty_next; /* [loop] */
    relay_pending *pending; /* [loop] waits and subscribes       */
    size_t n_pending;       /* [loop] how many                   */
    /* [loop] The client shut down its sending side (a Unix socket, still
     * open for reading) with waits or subscribes pending: the connection
     * stays OPEN, not reading, until they are answered and written, or
     * until the client goes away (the server's hup timer). */
    bool half_closed;
    relay_conn *prev, *next; /* [loop] the server's list          */
};

void sx__relay_conn_ref(relay_conn *c);
void sx__relay_conn_unref(relay_conn *c);

struct sx_server {
    sx_engine *engine;
    relay_hub *hub; /* one reference                                    */
    uv_loop_t loop;
    uv_async_t bell;      /* the hub's doorbell                               */
    uv_prepare_t flusher; /* writes every dirty connection's batch      */
    relay_conn *dirty;    /* [loop] connections with a batch to write   */
    uv_pipe_t pipe;
    uv_tcp_t tcp;
    bool has_pipe, has_tcp;
    /* [loop] Refusing without memory (conn.c refuse): a connection must
     * always be taken off its listener (libuv stops polling a listener
     * until the connection it holds is taken, and then no later client is
     * ever accepted). With no memory for a handle, the listener's spare
     * here takes it and closes it. While a spare is closing, a further
     * connection is owed: it stays on the listener (which stops polling),
     * and the spare's close callback runs the accept again. Index 0: the
     * Unix listener's, 1: the TCP listener's. */
    struct relay_spare {
        union {
            uv_handle_t handle;
            uv_stream_t stream;
            uv_pipe_t pipe;
            uv_tcp_t tcp;
        } h;
        bool busy; /* initialised, closing */
        bool owed; /* a connection waits on the listener */
    } spare[2];
    int port;
    pthread_t thread;
    /* "socket_path.lock", held with flock for the server's life (-1:
     * none): only its holder creates or removes socket_path. */
    int lock_fd;
    char *socket_path; /* owned copy, or NULL                            */
    char *token;       /* owned copy, or NULL                            */
    size_t token_len;
    char *server_name; /* owned copy                                     */
    size_t max_frame, max_output, max_connections;
    /* The engine's types, fixed at start (types register before the
     * engine starts). Owned. */
    const sx_process_type **types;
    size_t n_types;
    relay_conn *conns; /* [loop] open (or draining) connections         */
    /* [loop] Half-closed connections (relay_conn.half_closed), and the
     * timer that looks every second whether their clients went away
     * (runs only while there are some). */
    size_t n_half;
    uv_timer_t hup;
    /* [loop] Dormant waits by PID (pending.c): a hash table of chains,
     * dorm_cap buckets (a power of 2, or 0), dorm_n records. */
    relay_pending **dorm;
    size_t dorm_cap, dorm_n;
    bool stopping; /* [loop]                                        */
    sx_pack pk;    /* [loop] reply bodies are built here            */
    char rbuf[SX_RELAY_READ_BUF]; /* [loop] read buffer (the decoder copies) */
    /* Figures: written by the loop, read by sx_server_stats_get on any
     * thread (relaxed: counters with no data behind them). */
    _Atomic uint64_t st_connections, st_accepted, st_requests, st_bad_frames,
        st_slow_drops, st_pushes, st_output_peak;
};

/* ---- relay/conn.c [loop] ---- */

/* Accepts one connection from a listener. */
void sx__relay_accept(uv_stream_t *listener, int status);
/* Hands a finished frame to the connection (it takes o): queued in the
 * connection's batch, written with everything else produced this loop
 * iteration before the loop next waits (sx__relay_flush_cb), or freed
 * when the connection is closing. A PUSH over the output limit drops the
 * connection as slow; so does any frame over twice the limit. */
void sx__relay_conn_write(relay_conn *c, relay_out *o);
/* Builds a frame from srv->pk (a reply body) and writes it; out of memory
 * closes the connection. Counts one answered request. */
void sx__relay_conn_reply(relay_conn *c);
/* Writes what is queued, stops reading, and closes the connection once
 * everything is written (after a bad frame or a refused hello). */
void sx__relay_conn_drain(relay_conn *c);
/* Closes at once: mailbox freed, waits abandoned, handle closed. */
void sx__relay_conn_close(relay_conn *c);
/* Takes one item from the hub (it owns it from now on). */
void sx__relay_conn_take(sx_server *s, relay_out *o);
/* The prepare callback: writes the batch of every dirty connection, each
 * in as few writes as it takes (uv_try_write of up to
 * SX_RELAY_WRITE_BUFS frames; a uv_write for what the socket did not
 * take). */
void sx__relay_flush_cb(uv_prepare_t *h);

/* ---- relay/ops.c [loop] ---- */

/* Reply builders (in srv->pk, then written): an error with code and
 * message; ok with no fields; an engine error rc about pid (its protocol
 * code by sx_wire_code). */
void sx__relay_reply_error(relay_conn *c, uint64_t id, const char *code,
                           const char *message);
void sx__relay_reply_ok(relay_conn *c, uint64_t id);
void sx__relay_reply_engine(relay_conn *c, uint64_t id, int rc, sx_pid pid);
/* Packs "error": {code, message} (a key and its value) into pk. */
void sx__relay_pack_error(sx_pack *pk, const char *code, const char *message);

/* Answers one request (a checked frame body, valid during the call). */
void sx__relay_handle(relay_conn *c, sx_payload body);
/* The decoder rejected the stream (rc): an error frame with id 0 and code
 * bad_frame, then the connection drains and closes. */
void sx__relay_bad_frame(relay_conn *c, int rc);
/* An error frame with id 0 and code, then the connection drains and
 * closes (too many connections). */
void sx__relay_refuse(relay_conn *c, const char *code, const char *message);
/* ---- relay/pending.c ---- */

/* Starts a wait (timeout_ms < 0: none) or a subscribe (kind) on pid for
 * request id; replies at once on errors (and to a subscribe). [loop] */
void sx__relay_watch_start(relay_conn *c, uint64_t id, uint8_t kind, sx_pid pid,
                           int64_t timeout_ms);
/* A DONE item arrived for p: answers it unless it is done already. */
void sx__relay_pending_done(relay_pending *p, relay_out *o);
/* The connection closes: every pending record is abandoned. */
void sx__relay_pending_abandon_all(relay_conn *c);
/* The server stops: every dormant wait lets go of the loop's reference
 * (its watch's reference goes when its callback finds the hub closed). */
void sx__relay_dormant_close_all(sx_server *s);

#endif

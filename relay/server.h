/* relay/server.h — the relay server's internal data, shared by
 * relay/server.c (start, stop, listeners, the hand-off queue),
 * relay/accept.c (new connections and the token gate), relay/conn.c (one
 * client connection: its life, reads and turns), relay/conn_output.c (its
 * writes, back-pressure and mailbox pushes), relay/reply.c (the reply
 * builders), relay/ops.c and relay/ops_info.c (the protocol's operations)
 * and relay/pending.c (the records behind wait and subscribe). Never
 * installed.
 *
 * Threads: the server runs one libuv loop thread of its own. Everything
 * marked [loop] is touched by that thread only. Engine threads (workers,
 * io loops, callers of sx_engine_send) reach the server only through the
 * hub (a mutex-guarded FIFO of sx__relay_out items plus a doorbell rung
 * only while the loop sleeps),
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
/* Requests answered from one connection before the loop turns to the
 * others (one client pipelining 65,000 waits does not hold everyone else
 * for the whole batch). */
#define SX_RELAY_PUMP_BATCH 512
#define SX_RELAY_MAX_PENDING                                                   \
    (1u << 16) /* waits + subscribes per connection                            \
                */
#define SX_RELAY_MAX_UNAUTH_DEFAULT 64
#define SX_RELAY_REC_CACHE 1024
/* A reply frame the loop builds holds up to SX_RELAY_OUT_SMALL bytes
 * (header and body) in an item of one size, which the loop keeps for the
 * next reply when it is written (at most SX_RELAY_OUT_CACHE of them): a
 * job's replies cost no allocation in steady state. */
#define SX_RELAY_OUT_SMALL 256
#define SX_RELAY_OUT_CACHE 1024
#define SX_RELAY_AUTH_TIMEOUT_DEFAULT 10000 /* ms */
#define SX_RELAY_MAX_WAITS_DEFAULT                                             \
    ((size_t)1 << 18) /* waits + subscribes in the server */

typedef struct sx__relay_conn sx__relay_conn;
typedef struct sx__relay_pending sx__relay_pending;
typedef struct sx__relay_watch sx__relay_watch;
typedef struct sx__relay_hub sx__relay_hub;

/* What an item is for. */
enum {
    SX__RELAY_OUT_REPLY = 0,  /* a reply built on the loop */
    SX__RELAY_OUT_PUSH = 1,   /* a message push (and any `dropped` notice) */
    SX__RELAY_OUT_DONE = 2,   /* a wait's reply or a subscribe's push, built by
                                 a watch callback */
    SX__RELAY_OUT_ANSWER = 3, /* a reply built off the loop (a submit the
                                 state store answered): never dropped */
};

/* One frame on its way to a client, and the hub's unit of hand-off. Built
 * (header and body) by whoever makes it; owned by the hub while queued,
 * then by the loop, then by libuv while written (req), then freed once
 * written, or kept for the next reply when it is a small one
 * (sx__relay_out_done). Items embedded in a watch (its `oom`,
 * `embedded`) carry no bytes and are never freed on their own. */
typedef struct sx__relay_out {
    uv_write_t req;             /* [loop] while being written */
    struct sx__relay_out *next; /* hub FIFO link (hub mutex) */
    uint8_t kind;               /* SX__RELAY_OUT_* */
    uint8_t embedded;
    uint8_t small;     /* from sx__relay_reply_new: SX_RELAY_OUT_SMALL bytes */
    uint8_t note_only; /* PUSH: only a `dropped` notice (never
                          dropped itself) */
    uint64_t dropped;  /* PUSH: a `dropped` notice for this many
                          messages comes before the message in
                          data (0: none) */
    size_t wlen;       /* [loop] the first item of a write request:
                          the bytes that request covers (the items
                          after it hang off `next`) */
    sx__relay_conn *conn;   /* PUSH, ANSWER: a reference to the
                               connection */
    sx__relay_watch *watch; /* DONE: the engine watch's reference */
    /* ANSWER with then_wait: a submit with "wait" that the state store (or
     * another node) accepted; the loop starts its wait instead of writing
     * data (relay/stored.c): the request's id, the job's PID, whether it
     * was an earlier job (`existing`) and the wait's timeout_ms (< 0:
     * none). */
    uint8_t then_wait;
    uint8_t wait_existing;
    /* ANSWER to a submit with "wait" answered later: it holds a wait's
     * room (sx__relay_wait_reserve), given back when the loop takes it. */
    uint8_t reserved;
    /* ANSWER with no bytes: the store's answer could not be built (out
     * of memory); the loop replies `internal` to wait_id. */
    uint8_t oom_reply;
    uint64_t wait_id;
    sx_pid wait_pid;
    int64_t wait_ms;
    size_t off;    /* where the bytes to write start in data (0,
                      or a message push's room for a notice) */
    size_t len;    /* bytes to write, from data + off */
    size_t cap;    /* bytes allocated at data */
    uint8_t *data; /* the frame: 4-byte length, then the map;
                      allocated with the item (NULL if embedded) */
} sx__relay_out;

/* Allocates an item with room for cap frame bytes (len 0). NULL when out
 * of memory. [any thread] */
sx__relay_out *sx__relay_out_new(uint8_t kind, size_t cap);
/* Frees an item that is not embedded (NULL is a no-op). [any thread] */
void sx__relay_out_free(sx__relay_out *o);
/* A REPLY item with room for cap frame bytes (len 0), from the server's
 * cache of small items when cap fits one. NULL when out of memory. [loop] */
sx__relay_out *sx__relay_reply_new(sx_server *s, size_t cap);
/* Frees an item as sx__relay_out_free does, or keeps a small one for the
 * next reply. [loop] */
void sx__relay_out_done(sx_server *s, sx__relay_out *o);
/* Writes the 4-byte length header for a body packed at data + 4. */
void sx__relay_out_seal(sx__relay_out *o, size_t body_len);
/* The same for a frame that starts at data + off (its body at off + 4). */
void sx__relay_out_seal_at(sx__relay_out *o, size_t off, size_t body_len);
/* A sealed item whose body sx__wire_check_utf8 passed with *fixed_len =
 * fixed_len > 0: a new item of the same kind holding the body with its
 * strs that are not UTF-8 as bin (sx__wire_utf8_fix), sealed; o is freed
 * either way. NULL when out of memory. [any thread] */
sx__relay_out *sx__relay_out_utf8(sx__relay_out *o, size_t fixed_len);

/* The hand-off from engine threads to the loop. Refcounted because a
 * watch callback may fire after the server has stopped (an IDLE process
 * finishes when the engine stops): it then finds the hub closed and frees
 * what it built. References: the server's, and one per watch. */
struct sx__relay_hub {
    pthread_mutex_t mu;
    sx__relay_out *head, *tail; /* (mu) FIFO: per-sender order is kept */
    bool closed;                /* (mu) set by the loop on its way out */
    bool stop;                  /* (mu) sx_server_stop asked the loop to end */
    /* (mu) The loop is on its way into its poll with the FIFO seen empty
     * (set by the server's gate, cleared by its drain): the next append
     * rings the doorbell, and only while this is set does anyone ring. */
    bool asleep;
    /* The doorbell, an eventfd the loop polls: written under mu while
     * !closed; closed with the server once the loop has ended. Set at
     * creation. */
    int bell_fd;
    /* Writers: whoever takes or drops a reference (acq_rel on the drop
     * that may free). */
    _Atomic uint32_t refs;
};

void sx__relay_hub_ref(sx__relay_hub *h);
void sx__relay_hub_unref(sx__relay_hub *h);
/* Queues o and rings the loop: 0, or SX_ECLOSED when the hub is closed
 * (the caller still owns o). [any thread] */
int sx__relay_hub_post(sx__relay_hub *h, sx__relay_out *o);
/* {"push": "dropped", "count": n} as a whole frame (header first) at
 * dst, which has room for SX_RELAY_DROPPED_MAX bytes: its length. */
#define SX_RELAY_DROPPED_MAX 40
size_t sx__relay_pack_dropped(uint8_t *dst, uint64_t n);
/* Queues a PUSH item o for connection c (o->off is its room in front,
 * at least SX_RELAY_DROPPED_MAX) and, in the same hold of the hub's
 * mutex, takes c->drops_unsaid: when it is not 0, a `dropped` notice for
 * it goes into that room, in front of o's message. So a notice lands in
 * the hub's order exactly where the count was taken: behind every
 * message posted before, ahead of every one posted after. An o with len
 * 0 is a notice alone: posted only when there is a count. 0: posted;
 * 1: nothing to post (the caller still owns o); SX_ECLOSED as above. */
int sx__relay_hub_post_push(sx__relay_hub *h, sx__relay_out *o,
                            sx__relay_conn *c);

/* One engine watch per watched PID, shared by every wait and subscribe on
 * that PID (relay/pending.c). The engine cannot cancel a watch, so the
 * watch lives until its process finishes or the engine stops; the
 * records (sx__relay_pending) that hang off it are the loop's alone and go as
 * soon as they are answered, time out or their connection closes. So what
 * outlives a request is at most one of these per watched live process,
 * whatever clients do. References: the table's [loop] (until the answer
 * is drained, or the server stops) and the engine watch's (until its
 * answer is drained from the hub, or dropped because the hub closed).
 * Holds one reference to the hub, dropped when it is freed. */
struct sx__relay_watch {
    _Atomic uint32_t refs;
    sx_pid pid;
    sx__relay_hub *hub; /* a reference */
    sx_server *srv;     /* [loop] the server (its table) */
    size_t max_frame;   /* answers bigger than this become too_large */
    /* Set (release) by the watch callback once it has built its answer;
     * read (acquire) by the loop right after sx_engine_watch returns and
     * by wait timers, so that a wait whose answer is already on its way
     * is not answered `timeout` (and arms no timer). */
    _Atomic bool fired;
    bool in_table;              /* [loop] in the server's table by PID */
    sx__relay_watch *hnext;     /* [loop] the table's chain */
    sx__relay_pending *waiters; /* [loop] waits and subscribes on this PID */
    sx__relay_out oom;          /* the answer when building one ran out of
                                   memory (embedded) */
    /* [loop] The answer the callback built inline, inside sx_engine_watch
     * on the loop thread (the process had finished already): answered at
     * once, without the hub's hop. */
    sx__relay_out *inline_out;
};

void sx__relay_watch_unref(sx__relay_watch *w);

/* A wait or a subscribe in progress [loop only]: in its watch's list and
 * its connection's list until it is answered, times out or the
 * connection closes; then freed (once its timer, if any, is closed). A
 * record without a timer is allocated without the timer's bytes. */
/* SUBMIT: a submit with "wait": a wait whose answers (the outcome, a
 * timeout, an error after the job started) carry the job's "pid", and
 * "existing" when its key named an earlier job (docs/PROTOCOL.md, submit). */
enum {
    SX__RELAY_PEND_WAIT = 1,
    SX__RELAY_PEND_SUBSCRIBE = 2,
    SX__RELAY_PEND_SUBMIT = 3
};
struct sx__relay_pending {
    uint8_t kind; /* SX__RELAY_PEND_* */
    bool has_timer;
    bool existing;                    /* SUBMIT: the key named an earlier job */
    uint64_t id;                      /* the request's id */
    sx__relay_conn *conn;             /* no reference: the connection frees
                                         its records when it closes */
    sx__relay_watch *w;               /* no reference: the table's outlives
                                         every record on it */
    sx__relay_pending *wprev, *wnext; /* the watch's list */
    sx__relay_pending *prev, *next;   /* the connection's list */
    uv_timer_t timer;                 /* wait's timeout_ms (last: see above) */
};

/* A client connection. References: the loop's (from accept until its
 * handle's close callback) and one per PUSH item in flight (its pending
 * records hold none: it frees them as it closes). The last one frees it, on
 * whichever thread drops it: by then only plain memory is left. */
enum {
    SX__RELAY_CONN_OPEN = 0,
    SX__RELAY_CONN_DRAINING = 1,
    SX__RELAY_CONN_CLOSED = 2
};

struct sx__relay_conn {
    _Atomic uint32_t refs;
    sx_server *srv; /* [loop]; also read by the mailbox callback, which
                       the mailbox's lifetime keeps inside the server's */
    union {
        uv_stream_t stream;
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } h;
    sx_wire_decoder *dec; /* [loop] */
    sx_pid mailbox;       /* immutable once the mailbox exists */
    bool has_mailbox;     /* [loop] */
    int state;            /* [loop] SX__RELAY_CONN_* */
    bool reading;         /* [loop] uv_read_start is in force */
    bool authed;          /* [loop] hello carried the token (or none set) */
    bool pumping;         /* [loop] inside sx__relay_conn_pump (no re-entry) */
    bool in_more;         /* [loop] on the server's more list */
    uint64_t more_at;     /* [loop] the iteration it went there in */
    sx__relay_conn *more_next; /* [loop] */
    size_t unsent;             /* [loop] bytes handed to uv_write, not done */
    size_t max_output;         /* immutable copy of the server's limit */
    /* Mirror of unsent for mailbox callbacks: written by the loop, read
     * by callbacks (relaxed: a limit check, no data behind it). */
    _Atomic size_t unsent_pub;
    /* Push bytes queued in the hub, not yet taken by the loop: added by
     * mailbox callbacks, taken off by the loop (relaxed: a limit check). */
    _Atomic size_t queued;
    /* Messages dropped by mailbox callbacks (the connection over
     * max_output, or a push that could not be built) that the client has
     * not been told of yet: added by the callbacks, taken (exchange) under
     * the hub's mutex by whoever posts the next push for the connection
     * (sx__relay_hub_post_push). Relaxed: the mutex orders the exchange
     * among the posts; the count has no data behind it. */
    _Atomic uint64_t drops_unsaid;
    /* [loop] Message items the loop itself dropped (found the connection
     * over max_output when it took them), with the notices they carried:
     * told in front of the next push the loop writes for it, or when its
     * output drains. */
    uint64_t loop_unsaid;
    /* [loop] With a token: not yet through hello with it. Such
     * connections are on the server's unauth list, oldest first, and are
     * closed at auth_deadline (loop time, ms). */
    bool in_unauth;
    uint64_t auth_deadline;
    sx__relay_conn *uprev, *unext;
    /* [loop] Frames written this loop iteration, not yet handed to
     * libuv (counted in unsent): the server's prepare handle writes them
     * all at once (one writev) before the loop next waits. */
    sx__relay_out *batch, *batch_tail;
    bool dirty;                 /* [loop] on the server's dirty list */
    sx__relay_conn *dirty_next; /* [loop] */
    sx__relay_pending *pending; /* [loop] waits and subscribes */
    size_t n_pending;           /* [loop] how many */
    /* [loop] Room held for the waits of submits with "wait" whose jobs
     * the store (or another node) has not answered yet: counted with
     * n_pending against the limits, so that such a submit is refused
     * `limit` before its job starts, never after. */
    size_t n_reserved;
    /* [loop] The client shut down its sending side (a Unix socket, still
     * open for reading) with waits or subscribes pending: the connection
     * stays OPEN, not reading, until they are answered and written, or
     * until the client goes away (the server's hup timer). */
    bool half_closed;
    sx__relay_conn *prev, *next; /* [loop] the server's list */
};

void sx__relay_conn_ref(sx__relay_conn *c);
void sx__relay_conn_unref(sx__relay_conn *c);

struct sx_server {
    sx_engine *engine;
    sx_cluster *cluster; /* cfg.cluster: `nodes` (ops_info.c); or NULL */
    /* The engine has a state store: a submit is answered once the job is
     * stored (relay/ops.c, stored_answer), and takes a key. */
    bool stored;
    uint32_t node;      /* the engine's node number */
    sx__relay_hub *hub; /* one reference */
    uv_loop_t loop;
    /* The hub's doorbell and the two ends of each loop iteration that
     * decide whether it rings (hub.c, "the doorbell"): gate (before
     * the poll), drain (after it), and bell_again, which keeps the poll
     * from blocking when the gate finds the hub not empty. */
    uv_poll_t bell; /* on the hub's bell_fd */
    uv_prepare_t gate;
    uv_check_t drain;
    uv_idle_t bell_again;
    /* [loop] The gate's spin (hub.c): since when (uv_hrtime; 0: not
     * spinning) and for how long at most (0: never); after a yield that
     * found the core taken, no spin until spin_off_until, for a pause of
     * spin_off ns that doubles while yields keep finding it so, halved
     * at most once per spin window (spin_halved: that window's
     * spin_since). */
    uint64_t spin_since, spin_ns, spin_off_until, spin_off, spin_halved;
    uv_prepare_t flusher; /* writes every dirty connection's batch */
    /* [loop] Turns. A connection that used its turn (SX_RELAY_PUMP_BATCH
     * requests) with more frames in hand goes on the more list (holding a
     * reference), and with a token, a listener that handed over
     * max_unauth / 2 connections in this loop iteration keeps the next
     * one waiting (accept_owed): the check handle (tick, after the
     * loop's poll: every other socket's input of this iteration has been
     * read) gives them their next turn, and the idle handle (a no-op
     * while either waits) keeps the poll from blocking meanwhile. Both
     * run only while something is held back (or, with a token, until
     * accepted_now has had its reset); iter counts the ticks, so "held
     * back in this iteration" is more_at == iter. */
    sx__relay_conn *more;
    bool accept_owed[2];        /* index as spare[] */
    uint64_t accept_owed_at[2]; /* the iteration it was held back in */
    size_t accepted_now;
    uint64_t iter; /* ticks so far */
    uv_check_t tick;
    uv_idle_t again;
    sx__relay_conn *dirty; /* [loop] connections with a batch to write */
    uv_pipe_t pipe;
    uv_tcp_t tcp;
    bool has_pipe, has_tcp;
    /* [loop] Refusing without memory (accept.c refuse): a connection must
     * always be taken off its listener (libuv stops polling a listener
     * until the connection it holds is taken, and then no later client is
     * ever accepted). With no memory for a handle, the listener's spare
     * here takes it and closes it. While a spare is closing, a further
     * connection is owed: it stays on the listener (which stops polling),
     * and the spare's close callback runs the accept again. Index 0: the
     * Unix listener's, 1: the TCP listener's. */
    struct sx__relay_spare {
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
    char *socket_path; /* owned copy, or NULL */
    /* The file at socket_path is this server's socket: the one file there
     * it removes (start's fail path, or the loop as it closes the
     * listener). */
    bool path_ours;
    char *token; /* owned copy, or NULL */
    size_t token_len;
    char *server_name; /* owned copy */
    size_t max_frame, max_output, max_connections;
    /* The engine's types, fixed at start (types register before the
     * engine starts). Owned. */
    const sx_process_type **types;
    size_t *type_lens; /* strlen of each type's name. Owned. */
    size_t n_types;
    sx__relay_conn *conns; /* [loop] open (or draining) connections */
    /* [loop] Connections through hello with the token (all of them
     * without one), at most max_connections; with a token, those not yet
     * through it, oldest first (n_unauth, at most max_unauth), and the
     * timer that closes them at their deadline (auth_timeout_ms after
     * accept; runs only while there are some). */
    size_t n_authed, n_unauth, max_unauth;
    uint64_t auth_timeout_ms;
    sx__relay_conn *unauth_head, *unauth_tail;
    uv_timer_t auth_timer;
    /* [loop] Half-closed connections (sx__relay_conn.half_closed), and the
     * timer that looks every second whether their clients went away
     * (runs only while there are some). */
    size_t n_half;
    uv_timer_t hup;
    /* [loop] Engine watches by PID (pending.c): a hash table of chains,
     * wt_cap buckets (a power of 2, or 0), wt_n watches in it; n_waits
     * wait and subscribe records alive in the whole server, at most
     * max_waits. */
    sx__relay_watch **wt;
    size_t wt_cap, wt_n, n_waits, max_waits;
    size_t n_reserved; /* [loop] the connections' n_reserved, summed */
    /* [loop] Records without a timer, free for the next wait (at most
     * SX_RELAY_REC_CACHE): a wait costs no allocation of its own in
     * steady state. Chained through next. */
    sx__relay_pending *rec_free;
    size_t rec_free_n;
    /* [loop] Written small reply items kept for the next ones (at most
     * SX_RELAY_OUT_CACHE; sx__relay_reply_new), chained through next. */
    sx__relay_out *out_free;
    size_t out_free_n;
    bool stopping;                /* [loop] */
    sx_pack pk;                   /* [loop] reply bodies are built here */
    char rbuf[SX_RELAY_READ_BUF]; /* [loop] read buffer (the decoder copies) */
    /* Figures: written by the loop, read by sx_server_stats_get on any
     * thread (relaxed: counters with no data behind them). */
    _Atomic uint64_t st_connections, st_accepted, st_requests, st_bad_frames,
        st_slow_drops, st_pushes, st_output_peak, st_waits, st_watches,
        st_push_drops, st_unauth, st_auth_closed;
};

/* ---- relay/accept.c [loop] ---- */

/* Accepts one connection from a listener. */
void sx__relay_accept(uv_stream_t *listener, int status);
/* Readies the server's auth timer's data (the timer is initialised with
 * the loop). */
void sx__relay_auth_init(sx_server *s);
/* The largest frame c may send now: max_frame, or before hello with the
 * token SX_RELAY_HELLO_MAX_FRAME (when that is less). */
size_t sx__relay_frame_limit(const sx__relay_conn *c);
/* With a token: c has sent hello with it. False when the server has
 * max_connections such connections already (c is then refused). */
bool sx__relay_conn_authed(sx__relay_conn *c);
/* Takes c off the server's unauth list, if it is on it (its deadline and
 * its place there go). */
void sx__relay_unauth_remove(sx__relay_conn *c);

/* ---- relay/conn.c [loop] ---- */

/* Starts (on) or stops reading c; a read that cannot start closes c. */
void sx__relay_conn_reading(sx__relay_conn *c, bool on);
/* Answers the frames c's decoder holds, at most SX_RELAY_PUMP_BATCH in
 * this turn (then c goes on the more list) and only while c is under its
 * output limit; then reads more. Not re-entered (c->pumping). */
void sx__relay_conn_pump(sx__relay_conn *c);
/* Answers nothing more: what is queued is written, what the client sends
 * is read and dropped, and the connection closes once everything is
 * written (after a bad frame or a refused hello). */
void sx__relay_conn_drain(sx__relay_conn *c);
/* Closes at once: mailbox freed, waits abandoned, handle closed. */
void sx__relay_conn_close(sx__relay_conn *c);
/* The check callback: connections that used their turn go on, and
 * listeners held back accept again. */
void sx__relay_tick_cb(uv_check_t *h);

/* relay/hub.c: the hub (its reference is the server's) with its
 * doorbell's eventfd. [before the loop runs] */
int sx__relay_hub_new(sx_server *s);
/* Wakes the loop from its poll; the caller holds the hub's mutex and
 * found it open. [any thread] */
void sx__relay_hub_ring(sx__relay_hub *h);
/* The doorbell's handles (hub.c, "the doorbell"): the eventfd's poll, the
 * gate before each poll, the drain after it. [loop] */
void sx__relay_bell_cb(uv_poll_t *p, int status, int events);
void sx__relay_gate_cb(uv_prepare_t *g);
void sx__relay_drain_cb(uv_check_t *d);
/* Sets how long the gate may keep the loop polling (s->spin_ns). */
void sx__relay_spin_init(sx_server *s);
/* The gate yielded from uv_hrtime `before` to `after`: a late return
 * pauses the spin (s->spin_off_until), a prompt one shortens the next
 * pause (hub.c, "the doorbell"). [loop] */
void sx__relay_spin_yielded(sx_server *s, uint64_t before, uint64_t after);
/* Drops an item the loop will not write (the hub closed, or its
 * connection is gone), with the reference it carries. [loop or the
 * poster] */
void sx__relay_item_discard(sx__relay_out *o);
/* relay/server.c: closes the listeners, the connections and the hub, and
 * every handle of the server: uv_run returns once their close callbacks
 * have run. [loop] */
void sx__relay_close_all(sx_server *s);
/* The idle callback: nothing (its being active keeps the poll short). */
void sx__relay_again_cb(uv_idle_t *h);

/* ---- relay/conn_output.c ---- */

/* The connection's mailbox callback (user is the connection): the
 * message becomes a push frame posted to the hub, or is dropped and
 * counted for a `dropped` notice. [any thread] */
void sx__relay_mailbox_cb(void *user, const sx_message *m);
/* Hands a finished frame to the connection (it takes o): queued in the
 * connection's batch, written with everything else produced this loop
 * iteration before the loop next waits (sx__relay_flush_cb), or freed
 * when the connection is closing. A message PUSH onto a connection over
 * its output limit is dropped and counted (the client is told later);
 * any frame past twice the limit drops the connection as slow. [loop] */
void sx__relay_conn_write(sx__relay_conn *c, sx__relay_out *o);
/* Builds a frame from srv->pk (a reply body) and writes it; out of memory
 * closes the connection. Counts one answered request. [loop] */
void sx__relay_conn_reply(sx__relay_conn *c);
/* The same for a body that needs no check: one the caller has checked as
 * a reader would (sx_wire_check), or packed from the server's own
 * scalars and strs alone (no raw value from anyone). [loop] */
void sx__relay_conn_reply_checked(sx__relay_conn *c);
/* The same for a push that answers a request (a subscribe's exit push):
 * written as a reply is (never dropped as a message push over the output
 * limit is), counted as a push. [loop] */
void sx__relay_conn_push(sx__relay_conn *c);
/* Frees the frames of c's batch not yet handed to libuv and takes c off
 * the server's dirty list (c is closing). [loop] */
void sx__relay_conn_batch_drop(sx__relay_conn *c);
/* Takes one item from the hub (it owns it from now on). [loop] */
void sx__relay_conn_take(sx_server *s, sx__relay_out *o);
/* The prepare callback: writes the batch of every dirty connection, each
 * in as few writes as it takes (uv_try_write of up to
 * SX_RELAY_WRITE_BUFS frames; a uv_write for what the socket did not
 * take). [loop] */
void sx__relay_flush_cb(uv_prepare_t *h);

/* ---- relay/reply.c [loop] ---- */

/* Starts a reply in srv->pk: {id, ok, ...} with room for extra more
 * pairs, which the caller packs before sx__relay_conn_reply. */
sx_pack *sx__relay_reply_begin(sx__relay_conn *c, uint64_t id, bool ok,
                               uint32_t extra);
/* Reply builders (in srv->pk, then written): an error with code and
 * message; ok with no fields; an engine error rc about pid (its protocol
 * code by sx_wire_code). */
void sx__relay_reply_error(sx__relay_conn *c, uint64_t id, const char *code,
                           const char *message);
void sx__relay_reply_ok(sx__relay_conn *c, uint64_t id);
void sx__relay_reply_engine(sx__relay_conn *c, uint64_t id, int rc, sx_pid pid);
/* bad_request for field key of request id, missing (rc 1) or wrongly
 * typed (any other rc), naming what was wanted. */
void sx__relay_reply_bad_field(sx__relay_conn *c, uint64_t id, const char *key,
                               int rc, const char *want);
/* Packs "error": {code, message} (a key and its value) into pk, the
 * message as valid UTF-8. [any thread] */
void sx__relay_pack_error(sx_pack *pk, const char *code, const char *message);

/* relay/stored.c [loop]: a submit answered once its job is stored (0:
 * the store's answer replies; else sx_engine_submit_async's error, and
 * the caller replies), and a send, answered at once or, to a checkpointed
 * job, once its message is stored. */
/* A submit's "wait" and "timeout_ms" (docs/PROTOCOL.md, submit): answered
 * once the job has finished. timeout_ms < 0: no limit. */
typedef struct {
    bool on;
    int64_t timeout_ms;
} sx__relay_then_wait;
/* relay/stored.c: [any thread] Posts the reply in pk to connection c
 * through the hub, and lets go of both references and of pk. */
void sx__relay_post_answer(sx__relay_conn *c, sx__relay_hub *hub, sx_pack *pk);
/* relay/stored.c: a submit placed on another node (o->node or
 * o->place) whose type this node lacks: answered by that node, or now
 * with the error. */
void sx__relay_submit_away(sx__relay_conn *c, uint64_t id, const char *tn,
                           size_t tl, const char *mn, size_t ml,
                           const sx_payload *in, size_t n,
                           const sx_submit_opts *o,
                           const sx__relay_then_wait *wait);
/* relay/ops.c: request fields. A field's value: 0 and *v, 1 when
 * absent. A field given as nil counts as absent for the typed readers
 * (sx__relay_is_nil). A str field: 0 (*s, *n point into req), 1 (absent
 * or nil), SX_EPROTO (wrong type). */
int sx__relay_fieldn(sx_payload req, const char *key, size_t kl, sx_payload *v);
bool sx__relay_is_nil(sx_payload v);
int sx__relay_field_strn(sx_payload req, const char *key, size_t kl,
                         const char **s, size_t *n);
/* The same with key's length taken at the call, where __builtin_strlen
 * of a literal key is a constant (a submit reads about ten fields). key
 * is evaluated twice: a literal or a plain variable. */
#define sx__relay_field(req, key, v)                                           \
    sx__relay_fieldn((req), (key), __builtin_strlen(key), (v))
#define sx__relay_field_str(req, key, s, n)                                    \
    sx__relay_field_strn((req), (key), __builtin_strlen(key), (s), (n))
/* A name the client sent (n bytes at s) quoted for a message: at most max
 * bytes, invalid UTF-8 and NUL bytes as \xHH; buf holds 4 * max + 1. */
const char *sx__relay_quoted(char *buf, const char *s, size_t n, size_t max);
/* relay/ops_submit.c: the submit op. */
void sx__relay_op_submit(sx__relay_conn *c, uint64_t id, sx_payload req);
/* relay/ops_submit.c: the wire code of a submit's error (init's refusals,
 * of whatever code, are init_failed). */
const char *sx__relay_submit_code(int rc);
/* wait: the submit's wait, or NULL for a plain submit. */
int sx__relay_submit_stored(sx__relay_conn *c, uint64_t id, const char *type,
                            const char *method, const sx_payload *in, size_t n,
                            const sx_submit_opts *o,
                            const sx__relay_then_wait *wait);
void sx__relay_send(sx__relay_conn *c, uint64_t id, sx_pid to,
                    const char *topic, sx_payload data);
/* Packs a name the server did not choose (a type's or a method's): a str
 * when it is valid UTF-8, else a bin of the same bytes; NULL packs nil. */
void sx__relay_pack_name(sx_pack *pk, const char *name);
/* Packs message as a str of valid UTF-8 (a byte that starts no valid
 * sequence becomes U+FFFD); NULL packs nil. [any thread] */
void sx__relay_pack_text(sx_pack *pk, const char *message);
/* The decoder rejected the stream (rc): an error frame with id 0 and code
 * bad_frame, then the connection drains and closes. */
void sx__relay_bad_frame(sx__relay_conn *c, int rc);
/* An error frame with id 0 and code, then the connection drains and
 * closes (too many connections). */
void sx__relay_refuse(sx__relay_conn *c, const char *code, const char *message);

/* ---- relay/ops.c [loop] ---- */

/* Answers one request (a checked frame body, valid during the call). */
void sx__relay_handle(sx__relay_conn *c, sx_payload body);
/* An unsigned integer field of a request: 0 (read), 1 (absent, or nil),
 * or SX_EPROTO (wrong type). */
int sx__relay_field_uintn(sx_payload req, const char *key, size_t kl,
                          uint64_t *out);
#define sx__relay_field_uint(req, key, out)                                    \
    sx__relay_field_uintn((req), (key), __builtin_strlen(key), (out))

/* ---- relay/ops_info.c [loop] ---- */

/* The ops ps, stats and types: request id's reply, from req's fields. */
void sx__relay_op_ps(sx__relay_conn *c, uint64_t id, sx_payload req);
void sx__relay_op_stats(sx__relay_conn *c, uint64_t id, sx_payload req);
void sx__relay_op_nodes(sx__relay_conn *c, uint64_t id, sx_payload req);
void sx__relay_op_types(sx__relay_conn *c, uint64_t id, sx_payload req);

/* ---- relay/pending.c ---- */

/* Starts a wait (timeout_ms < 0: none) or a subscribe (kind) on pid for
 * request id; replies at once on errors (and to a subscribe). [loop] */
void sx__relay_watch_start(sx__relay_conn *c, uint64_t id, uint8_t kind,
                           sx_pid pid, int64_t timeout_ms);
/* Starts the wait of a submit with "wait" whose job pid has started
 * (existing: its key named an earlier job): every answer carries the pid.
 * [loop] */
void sx__relay_submit_wait(sx__relay_conn *c, uint64_t id, sx_pid pid,
                           bool existing, int64_t timeout_ms);
/* Whether connection c and the server have room for one more wait: else
 * replies `limit` to request id and returns false. [loop] */
bool sx__relay_wait_room(sx__relay_conn *c, uint64_t id);
/* Holds / gives back the room of one wait on c (a submit with "wait"
 * answered later: its wait starts when the answer reaches the loop). */
void sx__relay_wait_reserve(sx__relay_conn *c);
void sx__relay_wait_unreserve(sx__relay_conn *c);
/* Answers wait request id with the outcome r at once (a poll of a
 * process that has finished). */
void sx__relay_reply_outcome(sx__relay_conn *c, uint64_t id,
                             const sx_result *r);
/* A DONE item arrived for w: every wait and subscribe on it is answered. */
void sx__relay_watch_done(sx__relay_watch *w, sx__relay_out *o);
/* The connection closes: every pending record is dropped. */
void sx__relay_pending_abandon_all(sx__relay_conn *c);
/* The server stops: the table lets go of every watch (a watch's own
 * reference goes when its callback finds the hub closed). */
void sx__relay_watches_close_all(sx_server *s);
/* Frees the cache of free records (at the server's end). [loop] */
void sx__relay_records_free(sx_server *s);

#endif

/* relay/stepx/relay.h — the relay: the wire codec of the stepx protocol
 * (docs/PROTOCOL.md), the router, the relay server that lets outside
 * clients drive an engine over a Unix socket or TCP, and a C client.
 *
 * Threads: wire and router functions are [any thread] unless marked; the
 * server runs its own libuv loop thread; a client is used by one thread
 * at a time.
 */
#ifndef STEPX_RELAY_H
#define STEPX_RELAY_H

#include <stepx/engine.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the wire: frames ------------------------------------------------- */

/* A frame is a 4-byte big-endian length N, then N bytes holding exactly
 * one msgpack map with string keys. */
#define SX_WIRE_HEADER 4
#define SX_WIRE_MAX_FRAME_DEFAULT (16u << 20) /* 16 MiB */
#define SX_WIRE_MAX_DEPTH 32                  /* nesting of arrays/maps  */

/* Checks that body[0, len) is exactly one well-formed msgpack map (string
 * keys, nesting at most SX_WIRE_MAX_DEPTH, every declared string, binary,
 * array and map length backed by bytes present, no trailing bytes). Never
 * allocates, never recurses without bound. 0, or SX_EPROTO. */
int sx_wire_check(const uint8_t *body, size_t len);

/* A streaming decoder: feed it bytes as they arrive from a socket, in any
 * split; it hands out whole frame bodies. Its buffer is bounded by the
 * frame limit plus one read. */
typedef struct sx_wire_decoder sx_wire_decoder;
/* max_frame 0 = SX_WIRE_MAX_FRAME_DEFAULT. Errors: SX_EINVAL (out NULL),
 * SX_ENOMEM. */
int sx_wire_decoder_new(size_t max_frame, sx_wire_decoder **out);
/* Changes the limit (0 = SX_WIRE_MAX_FRAME_DEFAULT) for every frame whose
 * length is checked from now on, the one being read included; a broken
 * decoder stays broken. Errors: SX_EINVAL (d NULL). An extension: the
 * client raises its limit to the server's (hello's max_frame). */
int sx_wire_decoder_set_max(sx_wire_decoder *d, size_t max_frame);
void sx_wire_decoder_free(sx_wire_decoder *d);
/* Appends bytes (copied). Errors: SX_EINVAL (d NULL, or bytes NULL with
 * n > 0), SX_ENOMEM (nothing was appended), or,
 * on a decoder already broken (see next), that same error (the bytes are
 * dropped). The buffer bound above holds when the caller calls next until
 * it returns 0 between feeds. */
int sx_wire_decoder_feed(sx_wire_decoder *d, const void *bytes, size_t n);
/* The next whole frame body, checked with sx_wire_check: returns 1 and
 * sets *body (valid until the next call on d) when there is one, 0 when
 * more bytes are needed, or a negative code when the stream is broken:
 * SX_EPROTO (length 0, or a body that is not one map) or SX_ELIMIT
 * (length above max_frame). After an error the decoder stays broken
 * (every call returns the same error): the connection must be closed. */
int sx_wire_decoder_next(sx_wire_decoder *d, sx_payload *body);
/* Bytes of buffer d holds now (an extension: for figures and tests). */
size_t sx_wire_decoder_footprint(const sx_wire_decoder *d);

/* Appends one frame holding body (already a msgpack map) to pk: the
 * header, then the bytes. Errors (sticky in pk, as every sx_pack error;
 * nothing is appended): SX_EINVAL (body fails sx_wire_check), SX_ELIMIT
 * (body over 2^32 - 1 bytes, or a fixed writer is full), SX_ENOMEM. */
int sx_wire_frame(sx_pack *pk, sx_payload body);

/* Protocol error codes as strings (docs/PROTOCOL.md): "bad_frame",
 * "bad_request", "unknown_op", "unknown_type", "unknown_method",
 * "init_failed", "not_found", "closed", "limit", "stopping", "timeout",
 * "failed", "terminated", "cancelled", "internal". */
/* The protocol code for an SX_E* code (e.g. SX_ENOTFOUND -> "not_found";
 * anything unmapped -> "internal"). Never NULL. */
const char *sx_wire_code(int error);
/* The SX_E* code for a protocol code string (unknown -> SX_EPROTO). */
int sx_wire_error(const char *code, size_t len);

/* ---- the router ----------------------------------------------------- */

/* Delivers messages by PID: the local engine's node first, then a peer
 * registered for the PID's node, then the remote transport (the seam for
 * a multi-node bridge; none by default). Per-sender FIFO holds end to end
 * as long as each hop keeps it. */
typedef struct sx_router sx_router;
/* Called for a message to another node; must not block; returns 0 or a
 * negative code (the sender's send fails with it). */
typedef int (*sx_route_fn)(void *user, const sx_message *msg);
/* Errors: SX_EINVAL, SX_ENOMEM. */
int sx_router_new(sx_engine *local, sx_router **out);
void sx_router_free(sx_router *r);
/* Routes messages for `node` to fn; replaces an earlier peer for it.
 * Errors: SX_EINVAL (node is the local node's), SX_ENOMEM. */
int sx_router_add_peer(sx_router *r, uint32_t node, sx_route_fn fn, void *user);
/* Removes the peer for `node`; its messages then go to the transport.
 * When add_peer (replacing) or remove_peer returns, the old fn is running
 * nowhere and is never called again (its user may be freed). A route fn
 * must not call add/remove_peer or set_transport on its own router.
 * Errors: SX_EINVAL, SX_ENOTFOUND (no peer for node). */
int sx_router_remove_peer(sx_router *r, uint32_t node);
/* The fallback for nodes without a peer (NULL fn: none). When it returns,
 * the old transport is running nowhere and is never called again. */
void sx_router_set_transport(sx_router *r, sx_route_fn fn, void *user);
/* Errors: the engine's send errors for local PIDs; SX_ENOTFOUND for a
 * node with no peer and no transport; the route's own error. */
int sx_router_send(sx_router *r, sx_pid from, sx_pid to, const char *topic,
                   sx_payload data);

/* ---- the cluster (docs/CLUSTER.md) ----------------------------------- */

/* Membership over NATS: a node announces itself, hears the others and
 * declares a silent one down. */
typedef struct sx_cluster sx_cluster;

#define SX_CLUSTER_NAME_MAX 64

typedef struct {
    const char *url;        /* the NATS server, e.g. "nats://127.0.0.1:4222" */
    const char *name;       /* the cluster: 1 to SX_CLUSTER_NAME_MAX bytes of
                               [A-Za-z0-9_-]; subjects begin stepx.<name>.  */
    uint32_t node;          /* this node's number, from 1, unique in it       */
    const char *address;    /* what peers are told to reach us at (the relay's
                               listen address), or NULL                    */
    uint32_t heartbeat_ms;  /* 0 = 500; 10 to 60000                     */
    uint32_t down_after_ms; /* silent this long: down; 0 = 4 heartbeats;
                               at least 2 heartbeats                    */
    const char *token;      /* NATS token, or NULL                     */
    const char *credentials; /* NATS credentials file, or NULL          */
    /* Told of each member that joins or goes down, one line of text
     * ("node 3 (incarnation N) down: silent for 1180 ms"); NULL: nobody.
     * Called on nats.c's or the heartbeat thread with the member table's
     * lock held: it must not call sx_cluster_* and should be quick. */
    void (*log)(void *user, const char *line);
    void *log_user;
} sx_cluster_config;

typedef struct {
    uint32_t node;
    uint64_t incarnation; /* drawn at each start of the node */
    char address[128];
    uint64_t processes;     /* live, at its last heartbeat */
    double load;            /* live processes per worker, then */
    uint64_t last_heard_ms; /* ms since its last heartbeat */
    /* The link with it, since it joined: messages for processes sent to
     * it, and received from its processes. */
    uint64_t messages_out, messages_in;
    bool self;
    /* Its reconnects to NATS so far, as its last heartbeat said (ours:
     * now). For a peer: when it grows, what waited for that node's
     * answers was answered noconnection (docs/CLUSTER.md, "A node that
     * reconnects"). */
    uint64_t reconnects;
} sx_cluster_member;

typedef struct {
    char name[SX_CLUSTER_NAME_MAX + 1];
    uint32_t node;
    uint64_t incarnation;
    bool connected; /* to NATS, now */
    uint64_t heartbeats_sent, heartbeats_received;
    uint64_t bad_messages; /* dropped: not a heartbeat, another cluster's,
                              or another node with our number          */
    uint64_t downs;        /* members declared down (silent, bye, or a
                              new incarnation)                         */
    uint64_t reconnects;   /* to NATS */
    /* Messages for processes: sent to other nodes, received for ours,
     * and received ones the engine refused (no such process, ...). */
    uint64_t messages_out, messages_in, messages_undelivered;
    /* The NATS messages that carried them (a step's sends to one process
     * travel as one). */
    uint64_t batches_out, batches_in;
    /* Frames for this node that NATS's client dropped because the node
     * fell too far behind (over 4 Mi frames or 1 GiB waiting): messages
     * lost, watches and submits that will then answer only when their
     * node goes down. 0 on a node that keeps up. */
    uint64_t dropped;
    /* Watches (waits, monitors, links) of processes of other nodes: set,
     * answered by their node, answered noconnection (node down, NATS
     * lost); and set by other nodes on ours. */
    uint64_t watches_out, watches_answered, watches_lost, watches_in;
} sx_cluster_stats;

/* Connects to NATS and joins the cluster with engine e, before
 * sx_engine_start: its figures go into the heartbeats, and it becomes e's
 * remote route (sx_engine_set_remote), so that sends, cancels,
 * terminates, waits, monitors and links of processes of other nodes go
 * over NATS. Errors: SX_EINVAL (cfg), SX_ESTATE (e has started),
 * SX_ENOMEM, -ECONNREFUSED (no NATS server answers; err says so), -EIO;
 * err (cap bytes) says why. */
int sx_cluster_start(sx_engine *e, const sx_cluster_config *cfg,
                     sx_cluster **out, char *err, size_t cap);
/* The members now, this node first: fills up to cap, returns how many
 * there are. Any thread. */
size_t sx_cluster_members(sx_cluster *c, sx_cluster_member *out, size_t cap);
void sx_cluster_stats_get(sx_cluster *c, sx_cluster_stats *out);

/* The live processes of node (a member; this node's own too), as ps
 * lists them: fn is called once, on a nats.c thread (or this one), with
 * up to limit entries (fewer when they would not fit in one NATS
 * message), or with rc SX_ENOCONNECTION (msg says why) when the node is
 * not a member or goes down before it answers. info and its strings are
 * valid only during the call. Returns 0 (fn will be called) or SX_ENOMEM. */
typedef void (*sx_cluster_ps_fn)(void *user, int rc,
                                 const sx_process_info *info, size_t n,
                                 const char *msg);
int sx_cluster_ps(sx_cluster *c, uint32_t node, uint64_t limit,
                  sx_cluster_ps_fn fn, void *user);

/* Says goodbye (the peers declare this node down at once) and leaves:
 * watches still waiting for another node are answered noconnection. Call
 * it after sx_engine_stop, so that the outcomes of our processes that
 * other nodes watch still reach them; the memory lives on until the last
 * such answer is out. NULL is a no-op. */
void sx_cluster_stop(sx_cluster *c);

/* ---- the server ------------------------------------------------------ */

typedef struct {
    const char *socket_path; /* Unix socket (mode 0600); NULL = none       */
    const char *listen;      /* "HOST:PORT" for TCP; NULL = none. HOST:
                                an IPv4 address, a name, or an IPv6
                                address in brackets ("[::1]:7000"); PORT:
                                0 to 65535, 0 picks a free one. A host
                                other than 127.0.0.0/8 / ::1 / localhost
                                needs token                               */
    const char *token;       /* when set, `hello` must carry it as "token" */
    size_t max_frame;        /* 0 = SX_WIRE_MAX_FRAME_DEFAULT              */
    size_t max_output;       /* unsent bytes per connection past which
                                messages pushed to its mailbox are dropped
                                (and counted, and the client told); twice
                                this drops the connection; 0 = 64 MiB.
                                Keep it at least max_frame: a reply that
                                big onto a flooded connection would pass
                                twice it                                   */
    size_t max_connections;  /* connections past hello (with a token) or
                                open (without); 0 = 1024                   */
    size_t max_waits;        /* waits + subscribes pending in the whole
                                server; past it `limit`; 0 = 262,144       */
    /* With a token only: connections that have not yet sent hello with it
     * are at most max_unauthenticated (0 = 64; they take none of
     * max_connections: the oldest is closed to make room for a new one),
     * may send frames of at most SX_RELAY_HELLO_MAX_FRAME bytes, and are
     * closed when auth_timeout_ms (0 = 10,000) passes without it. */
    size_t max_unauthenticated;
    uint64_t auth_timeout_ms;
    const char *server_name; /* `hello`'s "server" (UTF-8); NULL =
                                "stepxd/<ver>"                             */
    /* The cluster this node is in (outliving the server), for `nodes`;
     * NULL: none. */
    sx_cluster *cluster;
} sx_server_config;

/* The largest frame body a connection may send before hello with the
 * server's token: a hello is small. */
#define SX_RELAY_HELLO_MAX_FRAME 4096
/* The longest token a server takes (a hello must fit in the frame above). */
#define SX_RELAY_TOKEN_MAX 1024

typedef struct sx_server sx_server;

/* Creates a server for engine e (started, outliving the server) and starts
 * its loop thread listening where cfg says (at least one of socket_path
 * and listen). Errors: SX_EINVAL (bad config, e.g. a non-loopback listen
 * address without a token, a bad HOST:PORT, a server_name that is not
 * UTF-8), SX_ESTATE (engine not
 * started), SX_ENOMEM, or -errno from bind/listen (e.g. -EADDRINUSE). */
int sx_server_start(sx_engine *e, const sx_server_config *cfg, sx_server **out);
/* The TCP port actually bound (useful with port 0), or 0. */
int sx_server_port(const sx_server *s);
/* The cluster given in its config (sx_server_config.cluster), or NULL. */
sx_cluster *sx_server_cluster(const sx_server *s);
typedef struct {
    uint64_t connections; /* open now                     */
    uint64_t accepted;    /* since start                  */
    uint64_t requests;    /* requests answered            */
    uint64_t bad_frames;  /* connections closed for them  */
    uint64_t slow_drops;  /* connections dropped: output past twice
                             max_output (replies to their own requests) */
    uint64_t pushes;      /* pushes sent                  */
    /* Extension: the most bytes one connection ever held unsent (queued
     * for writing and not yet taken by the kernel); back-pressure keeps
     * it within about twice max_output plus one frame. */
    uint64_t output_peak;
    /* Extension: PIDs with an engine watch of the server's (one per
     * watched PID, shared by every wait and subscribe on it; the engine
     * cannot cancel a watch, so it lives until its process finishes:
     * docs/RELAY.md). */
    uint64_t watches;
    /* Extension: wait and subscribe records pending (each answered, timed
     * out or dropped with its connection, at most max_waits). */
    uint64_t waits;
    /* Extension: messages to client mailboxes dropped because their
     * connection was over max_output, or could not be framed. */
    uint64_t push_drops;
    /* Extension: connections open and not yet through hello with the
     * token (0 without a token), and those closed for it (evicted to make
     * room, or auth_timeout_ms passed). */
    uint64_t unauthenticated;
    uint64_t auth_closed;
} sx_server_stats;
void sx_server_stats_get(const sx_server *s, sx_server_stats *out);
/* Closes the listeners and every connection (their mailboxes close,
 * pending waits are dropped), joins the loop thread, frees s; removes the
 * socket file. Does not stop the engine. [not from a step] */
void sx_server_stop(sx_server *s);

/* ---- the client ------------------------------------------------------ */

/* A blocking client for one connection; one thread at a time. Requests
 * and replies are msgpack maps; the helpers below build and read the
 * common ones. Pushes that arrive while waiting for a reply are queued
 * for sx_client_next_push. Besides one call at a time, requests can be
 * pipelined (sx_client_post*, below). */
typedef struct sx_client sx_client;

/* Connects to "unix:PATH", a plain PATH (contains a '/'), or "HOST:PORT"
 * (HOST: an IPv4 address, a name, or an IPv6 address in brackets,
 * "[::1]:7000"; PORT: 1 to 65535; another form, or a host that does not
 * resolve, is SX_EINVAL), and says hello (with token when not NULL).
 * timeout_ms < 0: no limit. Errors: -errno from connect (e.g. -ENOENT,
 * -ECONNREFUSED), SX_ETIMEDOUT, SX_EPROTO (not a stepx server), SX_EINVAL,
 * SX_ENOMEM, and the server's refusal of hello as its code. */
int sx_client_connect(const char *address, const char *token,
                      int64_t timeout_ms, sx_client **out);
void sx_client_close(sx_client *c);
/* The connection's mailbox PID (from hello). */
sx_pid sx_client_mailbox(const sx_client *c);
/* The connection's socket (an extension), for one thread that drives many
 * clients with poll(2) or epoll: POLLIN on it means the server sent
 * something, and sx_client_next_reply / sx_client_next_push with timeout
 * 0 then read it. The client still does every read and write itself:
 * never read, write or close the socket directly. One read can bring
 * several frames, and the ones not yet taken do not make the socket
 * readable again: take them with timeout 0 until SX_ETIMEDOUT (or
 * SX_ENOTFOUND) before polling again. Posted requests go out with
 * sx_client_flush(c, 0) (or the next read). -1 for NULL. */
int sx_client_fd(const sx_client *c);

/* A reply: ok, and either the reply map's bytes or the error. Owned by
 * the caller; free with sx_reply_free. */
typedef struct {
    bool ok;
    int error;       /* ok: 0; else the SX_E* code for error.code       */
    char *code;      /* ok: NULL; else the protocol code, e.g. "not_found" */
    char *message;   /* ok: NULL; else the error's message               */
    sx_payload body; /* the whole reply map (owned)                      */
} sx_reply;
void sx_reply_free(sx_reply *r);

/* Sends one request (a msgpack map without "id": the client adds it) and
 * waits for its reply. timeout_ms < 0: no limit. Returns 0 when a reply
 * arrived (its own success or error is in *out), or SX_ETIMEDOUT,
 * SX_ECLOSED (the server closed the connection), SX_EPROTO, -errno; or
 * SX_EINVAL, sending nothing, for a request that is not one map or that
 * carries "id" itself. */
int sx_client_call(sx_client *c, sx_payload request, int64_t timeout_ms,
                   sx_reply *out);

/* Shortcuts (each returns what sx_client_call returns; on a reply with
 * ok = false they return its error code and leave the reply in out when
 * out is not NULL). input: an array of n payloads. */
int sx_client_submit(sx_client *c, const char *type, const char *method,
                     const sx_payload *input, size_t n, sx_pid *out_pid,
                     sx_reply *out);
int sx_client_send(sx_client *c, sx_pid to, const char *topic, sx_payload data,
                   sx_reply *out);
/* The reply's "result" is in *out (body); steps in *out_steps. */
int sx_client_wait(sx_client *c, sx_pid pid, int64_t timeout_ms,
                   uint64_t *out_steps, sx_reply *out);
/* submit with "wait" (docs/PROTOCOL.md, submit): starts a process and
 * answers once it has finished, one request per job. Returns as
 * sx_client_wait does (0: it finished ok, its "result" in *out; its own
 * error; SX_ETIMEDOUT once timeout_ms (< 0: no limit) passed, the job
 * going on) or as sx_client_submit does for a submit refused (nothing
 * started). *out_pid (may be NULL): the job's PID whenever a reply
 * named it (every reply of a job that started does), else SX_PID_NONE:
 * refused, or no reply (a transport error: the job may have started);
 * *out_steps (may be NULL) as for wait. SX_EPROTO: a reply ok without a
 * "result" (a server that does not wait in submit; *out_pid is set). */
int sx_client_submit_wait(sx_client *c, const char *type, const char *method,
                          const sx_payload *input, size_t n, int64_t timeout_ms,
                          sx_pid *out_pid, uint64_t *out_steps, sx_reply *out);
int sx_client_cancel(sx_client *c, sx_pid pid, const char *reason,
                     sx_reply *out);
int sx_client_terminate(sx_client *c, sx_pid pid, sx_reply *out);
int sx_client_subscribe(sx_client *c, sx_pid pid, sx_reply *out);

/* The next push (a msgpack map: {"push": "message"|"exit"|"dropped", ...}),
 * waiting up to timeout_ms (< 0: no limit). 0 and *out (owned: free with
 * sx_reply_free; ok = true, body = the push) or SX_ETIMEDOUT, SX_ECLOSED. */
int sx_client_next_push(sx_client *c, int64_t timeout_ms, sx_reply *out);

/* ---- the client: pipelined requests (an extension) ----
 *
 * Many requests in flight on one connection (PROTOCOL.md lets replies to
 * different requests come in any order). sx_client_post* queues a request
 * and returns its id at once; sx_client_next_reply returns the next reply
 * to a posted request, whichever it is, with its id. Posted requests wait
 * in the client's output buffer and go out together, in one send, the
 * next time the client waits on the socket (any call that reads, or
 * sx_client_flush), or as soon as SX_CLIENT_FLUSH_AT bytes are queued.
 *
 * The rules when sync calls, posted requests and pushes mix:
 * - Order on the wire is the order of the calls: a sync call's request
 *   goes out after everything posted before it.
 * - Every posted request gets exactly one reply through
 *   sx_client_next_reply, never through a sync call or next_push; the
 *   replies come in the order they arrive. A sync call returns only its
 *   own reply; replies to posted requests that arrive while it waits are
 *   kept for next_reply. Pushes only ever go to sx_client_next_push,
 *   whichever call read them.
 * - An error frame with id 0 (the server refusing the connection, e.g.
 *   bad_frame) answers the sync call in progress if there is one, else it
 *   is returned by next_reply with id 0; either way the connection is
 *   done (later calls return SX_ECLOSED).
 * - When the connection breaks (the server closes or dies), replies and
 *   pushes that arrived before are still returned, then every call
 *   returns the error (SX_ECLOSED); sx_client_in_flight says how many
 *   posted requests got no reply. Nothing blocks past its timeout.
 * - Memory: at most SX_CLIENT_MAX_QUEUED bytes of requests wait unsent
 *   (post refuses with SX_ELIMIT beyond that: read replies, which sends
 *   as it waits, then post again); replies are kept only for requests the
 *   caller posted. The client reads while it writes, so a server that
 *   stops reading until its replies are read cannot deadlock it. */
#define SX_CLIENT_FLUSH_AT (64u << 10)  /* queued bytes that trigger a send */
#define SX_CLIENT_MAX_QUEUED (1u << 20) /* unsent bytes before SX_ELIMIT    */

/* Queues one request (a msgpack map without "id": the client adds it)
 * and sets *out_id (may be NULL) to its id. Never waits: at most it
 * tries one non-blocking send. Errors: SX_EINVAL (not a map, or not one
 * the wire accepts), SX_ELIMIT (output buffer full; nothing queued),
 * SX_ENOMEM, or the broken connection's error. */
int sx_client_post(sx_client *c, sx_payload request, uint64_t *out_id);
/* The same for submit and wait (as sx_client_submit and sx_client_wait
 * build them; wait's timeout_ms < 0: none, the server answers `timeout`
 * itself otherwise). */
int sx_client_post_submit(sx_client *c, const char *type, const char *method,
                          const sx_payload *input, size_t n, uint64_t *out_id);
int sx_client_post_wait(sx_client *c, sx_pid pid, int64_t timeout_ms,
                        uint64_t *out_id);
/* A submit with "wait", as sx_client_submit_wait builds it: one reply, once
 * the job has finished (sx_reply_pid reads its PID from that reply). */
int sx_client_post_submit_wait(sx_client *c, const char *type,
                               const char *method, const sx_payload *input,
                               size_t n, int64_t timeout_ms, uint64_t *out_id);
/* Writes everything queued, waiting up to timeout_ms (< 0: no limit) and
 * reading meanwhile (replies and pushes are kept). 0, SX_ETIMEDOUT (the
 * connection stays usable: the rest goes later), or the broken error. */
int sx_client_flush(sx_client *c, int64_t timeout_ms);
/* The next reply to a posted request (any id, arrival order), sending
 * what is queued and waiting up to timeout_ms (< 0: no limit). 0 with
 * *out_id (may be NULL) and *out (owned: free with sx_reply_free; its own
 * success or error is in it, as sx_client_call's), or SX_ENOTFOUND (no
 * posted request is waiting for a reply: nothing to wait for),
 * SX_ETIMEDOUT (usable), SX_ECLOSED, SX_EPROTO, -errno. */
int sx_client_next_reply(sx_client *c, int64_t timeout_ms, uint64_t *out_id,
                         sx_reply *out);
/* Posted requests whose replies have not arrived yet (taken or not). */
size_t sx_client_in_flight(const sx_client *c);
/* The "pid" of a reply (submit's): 0, SX_ENOTFOUND, SX_EPROTO. */
int sx_reply_pid(const sx_reply *r, sx_pid *out);

#ifdef __cplusplus
}
#endif
#endif

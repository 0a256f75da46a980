/* relay/client.h — the C client's internal data, shared by relay/client.c
 * (its core: the output buffer, the set of posted ids, reading and
 * dispatch, the one I/O loop, sync calls), relay/client_connect.c
 * (connecting, hello, closing) and relay/client_requests.c (pipelined
 * requests, replies and pushes taken, the shortcuts). Never installed.
 *
 * Threads: a client belongs to one thread at a time (no locks inside);
 * everything here runs on that thread.
 */
#ifndef SX_RELAY_CLIENT_H
#define SX_RELAY_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stepx/relay.h>

/* A reply or a push read and not yet taken. */
typedef struct sx__relay_client_item {
    struct sx__relay_client_item *next;
    uint64_t id; /* a reply's id (0 for pushes and refusals) */
    sx_reply r;  /* owned */
} sx__relay_client_item;

typedef struct {
    sx__relay_client_item *head, *tail; /* oldest first */
} sx__relay_client_queue;

struct sx_client {
    int fd;
    sx_wire_decoder *dec; /* owned */
    uint64_t next_id;     /* ids of our requests: 1, 2, ... */
    sx_pid mailbox;
    int broken; /* 0, or the error every later call returns */
    /* Pushes not yet taken, and replies to posted requests not yet taken
     * (owned). */
    sx__relay_client_queue pushes, replies;
    sx_pack body; /* request bodies are built here */
    /* Frames not yet written: out.data[out_off, out.len). appended and
     * written count bytes since connect (written <= appended). */
    sx_pack out;
    size_t out_off;
    uint64_t appended, written;
    bool wr_closed; /* the server closed: we only read from now on */
    /* Ids of posted requests whose replies have not arrived: a set with
     * open addressing (0 = empty slot); set_cap is a power of two. */
    uint64_t *set;
    size_t set_cap, set_n;
    /* The sync call in progress: its id (0: none), and where its reply
     * goes once it arrives. */
    uint64_t sync_id;
    bool sync_got;
    sx_reply *sync_out;
};

/* ---- relay/client.c ---- */

/* The monotonic clock in ms. */
int64_t sx__relay_client_now_ms(void);
/* A deadline from a timeout (< 0: none, as -1). One too far to add to
 * the clock (up to INT64_MAX ms) saturates: as good as never. */
int64_t sx__relay_client_deadline(int64_t timeout_ms);
/* The poll timeout left until deadline (-1: none; at most 1,000,000). */
int sx__relay_client_left_ms(int64_t deadline);
/* Waits for events on fd: 0, SX_ETIMEDOUT, or -errno. */
int sx__relay_client_wait_fd(int fd, short events, int64_t deadline);

/* The string under key in a map payload: 0 (*s, *n point into map),
 * SX_ENOTFOUND, or SX_EPROTO (not a map, or not a string). */
int sx__relay_client_get_str(sx_payload map, const char *key, const char **s,
                             size_t *n);

/* Bytes framed into the output buffer and not yet written. */
static inline size_t sx__relay_client_unsent(const sx_client *c)
{
    return c->out.len - c->out_off;
}
/* Appends the request body in c->body (a map whose first key is "id") as
 * one frame to the output buffer. Nothing is appended on an error. built:
 * the library built the body from its own keys and values, every value
 * it did not write itself walked (sx__wire_frame_built): not walked
 * again. */
int sx__relay_client_append(sx_client *c, bool built);
/* Rebuilds request (a map without "id") in c->body with id first: 0,
 * SX_EINVAL (not one whole map, or one with a key "id"), or the packer's
 * error (SX_ENOMEM). */
int sx__relay_client_body_with_id(sx_client *c, sx_payload request,
                                  uint64_t id);
/* One non-blocking send of what is unsent: 0 (some, all or nothing
 * written), or the broken code. */
int sx__relay_client_send(sx_client *c);
/* The set of posted ids: add (0 or SX_ENOMEM), take (true if id was
 * there). */
int sx__relay_client_set_add(sx_client *c, uint64_t id);
bool sx__relay_client_set_take(sx_client *c, uint64_t id);

/* Takes the oldest item of a queue that is not empty: its id (id may be
 * NULL) and its reply (the caller owns it). */
void sx__relay_client_queue_take(sx__relay_client_queue *q, uint64_t *id,
                                 sx_reply *out);
/* Frees every item of a queue. */
void sx__relay_client_queue_free(sx__relay_client_queue *q);

/* What sx__relay_client_run_io waits for: the sync call's reply, a reply
 * to a posted request, a push, or everything written. */
enum {
    SX__RELAY_CLIENT_WANT_SYNC,
    SX__RELAY_CLIENT_WANT_REPLY,
    SX__RELAY_CLIENT_WANT_PUSH,
    SX__RELAY_CLIENT_WANT_FLUSH
};
/* The one I/O loop of the client: writes what is unsent whenever the
 * socket takes it and reads (and dispatches) whatever arrives, until what
 * want names is there or the deadline passes. 0, SX_ETIMEDOUT (the
 * connection stays usable), or the broken code. */
int sx__relay_client_run_io(sx_client *c, int64_t deadline, int want);

#endif

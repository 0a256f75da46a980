/* relay/client.c — the C client of the relay protocol (PROTOCOL.md), its
 * core: the output buffer (requests are framed into it and go out
 * together, one send for everything queued, when the client next waits
 * on the socket), the set of posted ids, reading (every frame goes where
 * it belongs: the sync call's reply, the reply queue, the push queue),
 * the one I/O loop every call waits in, and sync calls (sx_client_call).
 * Connecting is relay/client_connect.c; the pipelined requests, the
 * replies and pushes taken and the shortcuts are relay/client_requests.c.
 *
 * Threads: a client belongs to one thread at a time (no locks inside).
 * The socket is non-blocking and every wait is a poll with the time left,
 * so each call honours its timeout; writes use MSG_NOSIGNAL (a gone
 * server is SX_ECLOSED, not SIGPIPE).
 */
#include "relay/client.h"
#include "process/mapentry.h"
#include "relay/wire.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* ---- time ---- */

int64_t sx__relay_client_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A deadline from a timeout (< 0: none, as -1). One too far to add to
 * the clock (up to INT64_MAX ms) saturates: as good as never. */
int64_t sx__relay_client_deadline(int64_t timeout_ms)
{
    if (timeout_ms < 0)
        return -1;
    int64_t now = sx__relay_client_now_ms();
    return timeout_ms > INT64_MAX - now ? INT64_MAX : now + timeout_ms;
}

/* The poll timeout left until deadline (-1: none). */
int sx__relay_client_left_ms(int64_t deadline)
{
    if (deadline < 0)
        return -1;
    int64_t l = deadline - sx__relay_client_now_ms();
    if (l <= 0)
        return 0;
    return l > 1000000 ? 1000000 : (int)l;
}

/* Waits for events on fd: 0, SX_ETIMEDOUT, or -errno. */
int sx__relay_client_wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd p = { fd, events, 0 };
        int ms = sx__relay_client_left_ms(deadline);
        int rc = poll(&p, 1, ms);
        if (rc > 0)
            return 0;
        if (rc == 0) {
            if (ms == 0)
                return SX_ETIMEDOUT;
            continue;
        }
        if (errno != EINTR)
            return -errno;
    }
}

/* ---- replies ---- */

void sx_reply_free(sx_reply *r)
{
    if (r == NULL)
        return;
    free(r->code);
    free(r->message);
    free((void *)r->body.data);
    memset(r, 0, sizeof(*r));
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

int sx__relay_client_get_str(sx_payload map, const char *key, const char **s,
                             size_t *n)
{
    sx_payload v;
    int rc = sx_map_get(map, key, &v);
    if (rc != 0)
        return rc;
    sx_unpack u;
    sx_unpack_init(&u, v);
    return sx_unpack_str(&u, s, n);
}

/* The top-level fields every frame is sorted by ("push", "id", "ok"),
 * found in one pass over its map: three sx_map_get calls would scan it
 * three times, and "push" is absent from every reply, a whole scan to
 * find nothing. The first of equal keys counts, as for sx_map_get.
 * SX_EPROTO when the map does not decode. */
typedef struct {
    bool push, has_id, has_ok;
    sx_payload id, ok;
} frame_head;

static int head_scan(sx_payload body, frame_head *h)
{
    memset(h, 0, sizeof(*h));
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, body);
    if (sx_unpack_map(&u, &n) != 0)
        return SX_EPROTO;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        sx_payload v;
        if (sx__map_entry(&u, &k, &kl, &v) != 0)
            return SX_EPROTO;
        if (k == NULL)
            continue;
        if (kl == 4 && memcmp(k, "push", 4) == 0) {
            h->push = true;
        } else if (kl == 2 && memcmp(k, "id", 2) == 0 && !h->has_id) {
            h->has_id = true;
            h->id = v;
        } else if (kl == 2 && memcmp(k, "ok", 2) == 0 && !h->has_ok) {
            h->has_ok = true;
            h->ok = v;
        }
    }
    return 0;
}

/* Fills *out from a reply or push map (copied); ok: the reply's "ok"
 * value, found by head_scan in body, or NULL when it has none. */
static int reply_make(sx_payload body, bool is_push, const sx_payload *ok,
                      sx_reply *out)
{
    memset(out, 0, sizeof(*out));
    uint8_t *copy = malloc(body.len > 0 ? body.len : 1);
    if (copy == NULL)
        return SX_ENOMEM;
    memcpy(copy, body.data, body.len);
    out->body = (sx_payload){ copy, body.len };
    if (is_push) {
        out->ok = true;
        return 0;
    }
    sx_unpack u;
    if (ok == NULL)
        goto bad;
    sx_unpack_init(&u, *ok);
    if (sx_unpack_bool(&u, &out->ok) != 0)
        goto bad;
    if (out->ok)
        return 0;
    sx_payload err;
    const char *s = "internal", *m = "";
    size_t sl = 8, ml = 0;
    if (sx_map_get(out->body, "error", &err) == 0) {
        sx__relay_client_get_str(err, "code", &s, &sl);
        sx__relay_client_get_str(err, "message", &m, &ml);
    }
    out->code = dup_n(s, sl);
    out->message = dup_n(m, ml);
    if (out->code == NULL || out->message == NULL) {
        sx_reply_free(out);
        return SX_ENOMEM;
    }
    out->error = sx_wire_error(s, sl);
    if (out->error == 0)
        out->error = SX_EPROTO;
    return 0;
bad:
    sx_reply_free(out);
    return SX_EPROTO;
}

/* ---- the output buffer and the posted-id set ---- */

static int fail(sx_client *c, int rc)
{
    if (c->broken == 0)
        c->broken = rc;
    return rc;
}

/* Forgets what is written: the buffer restarts at 0 when empty, and
 * moves its tail to the front when more than half of it is written. */
static void out_compact(sx_client *c)
{
    if (c->out_off == 0)
        return;
    size_t left = sx__relay_client_unsent(c);
    if (left == 0) {
        c->out.len = 0;
        c->out_off = 0;
    } else if (c->out_off >= left) {
        memmove(c->out.data, c->out.data + c->out_off, left);
        c->out.len = left;
        c->out_off = 0;
    }
}

/* Open addressing with linear probing over ids (never 0), at most half
 * full. An id's home slot is a multiplicative hash of it (the high half
 * of id * 2^64/phi): ids come in sequence, and homed at id & mask they
 * would fill one run of consecutive slots, which every removal's
 * backward shift walks to its end (the relay benchmark's 64 requests in
 * flight: ~2,400 instructions a job, callgrind). Scattered, a run is a
 * few slots long. */
static size_t set_home(uint64_t id, size_t mask)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

static int set_grow(sx_client *c)
{
    size_t cap = c->set_cap != 0 ? c->set_cap * 2 : 64;
    uint64_t *s = calloc(cap, sizeof(*s));
    if (s == NULL)
        return SX_ENOMEM;
    for (size_t i = 0; i < c->set_cap; i++) {
        uint64_t id = c->set[i];
        if (id == 0)
            continue;
        size_t j = set_home(id, cap - 1);
        while (s[j] != 0)
            j = (j + 1) & (cap - 1);
        s[j] = id;
    }
    free(c->set);
    c->set = s;
    c->set_cap = cap;
    return 0;
}

int sx__relay_client_set_add(sx_client *c, uint64_t id)
{
    if (2 * (c->set_n + 1) > c->set_cap) {
        int rc = set_grow(c);
        if (rc != 0)
            return rc;
    }
    size_t m = c->set_cap - 1, j = set_home(id, m);
    while (c->set[j] != 0)
        j = (j + 1) & m;
    c->set[j] = id;
    c->set_n++;
    return 0;
}

/* Removes id: true if it was there. Backward-shift deletion keeps every
 * probe chain unbroken without tombstones. */
bool sx__relay_client_set_take(sx_client *c, uint64_t id)
{
    if (c->set_n == 0)
        return false;
    size_t m = c->set_cap - 1, j = set_home(id, m);
    while (c->set[j] != id) {
        if (c->set[j] == 0)
            return false;
        j = (j + 1) & m;
    }
    c->set_n--;
    for (size_t k = (j + 1) & m;; k = (k + 1) & m) {
        uint64_t o = c->set[k];
        if (o == 0)
            break;
        size_t home = set_home(o, m);
        /* o may fill the hole at j unless its home lies in (j, k]. */
        bool stays = j <= k ? (home > j && home <= k) : (home > j || home <= k);
        if (!stays) {
            c->set[j] = o;
            j = k;
        }
    }
    c->set[j] = 0;
    return true;
}

/* Appends the request body in c->body (a map whose first key is "id") as
 * one frame to the output buffer. Nothing is appended on an error. */
int sx__relay_client_append(sx_client *c, bool built)
{
    if (c->body.err != 0)
        return c->body.err;
    out_compact(c);
    size_t mark = c->out.len;
    sx_payload body = sx_pack_payload(&c->body);
    int rc = built ? sx__wire_frame_built(&c->out, body)
                   : sx_wire_frame(&c->out, body);
    if (rc != 0) {
        c->out.err = 0; /* sx_pack errors are sticky: undo it */
        c->out.len = mark;
        return rc;
    }
    c->appended += c->out.len - mark;
    return 0;
}

/* Whether a map key (its msgpack) is the string "id", in any encoding. */
static bool is_id_key(sx_payload key)
{
    sx_unpack k;
    const char *s;
    size_t n;
    sx_unpack_init(&k, key);
    return sx_unpack_str(&k, &s, &n) == 0 && n == 2 && memcmp(s, "id", 2) == 0;
}

/* Rebuilds request (a map without "id") in c->body with id first. */
int sx__relay_client_body_with_id(sx_client *c, sx_payload request, uint64_t id)
{
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, request);
    if (sx_unpack_map(&u, &n) != 0 || n == UINT32_MAX)
        return SX_EINVAL;
    sx_pack_reset(&c->body);
    sx_pack_map(&c->body, n + 1);
    sx_pack_str(&c->body, "id");
    sx_pack_uint(&c->body, id);
    for (uint32_t i = 0; i < 2 * n; i++) {
        sx_payload v;
        if (sx_unpack_raw(&u, &v) != 0)
            return SX_EINVAL;
        /* A key "id" of the caller's would go out beside ours: the server
         * reads one of the two, and a reply under the other id (or an
         * id-0 bad_request, which reads as the connection refused) is
         * lost to the caller. */
        if (i % 2 == 0 && is_id_key(v))
            return SX_EINVAL;
        sx_pack_raw(&c->body, v);
    }
    if (!sx_unpack_done(&u))
        return SX_EINVAL;
    return c->body.err;
}

/* One non-blocking send of what is unsent: 0 (some, all or nothing
 * written: EAGAIN is 0 too), or the broken code. A connection the server
 * has closed (EPIPE, ECONNRESET) stops writing but stays readable: the
 * server may have said why (an error frame with id 0) before it closed,
 * and the reads find that, then the end. */
int sx__relay_client_send(sx_client *c)
{
    while (sx__relay_client_unsent(c) > 0 && !c->wr_closed) {
        ssize_t n =
            send(c->fd, c->out.data + c->out_off, sx__relay_client_unsent(c),
                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
            c->written += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            c->wr_closed = true;
            break;
        }
        return fail(c, -errno);
    }
    if (c->wr_closed) {
        c->out.len = 0; /* nothing more will be written */
        c->out_off = 0;
        c->written = c->appended;
    }
    out_compact(c);
    return 0;
}

/* ---- reading: every frame lands where it belongs ---- */

static int queue_item(sx__relay_client_queue *q, uint64_t id, sx_payload body,
                      bool is_push, const sx_payload *ok)
{
    sx__relay_client_item *p = malloc(sizeof(*p));
    if (p == NULL)
        return SX_ENOMEM;
    int rc = reply_make(body, is_push, ok, &p->r);
    if (rc != 0) {
        free(p);
        return rc;
    }
    p->id = id;
    p->next = NULL;
    if (q->tail != NULL)
        q->tail->next = p;
    else
        q->head = p;
    q->tail = p;
    return 0;
}

void sx__relay_client_queue_take(sx__relay_client_queue *q, uint64_t *id,
                                 sx_reply *out)
{
    sx__relay_client_item *p = q->head;
    q->head = p->next;
    if (q->head == NULL)
        q->tail = NULL;
    if (id != NULL)
        *id = p->id;
    *out = p->r;
    free(p);
}

void sx__relay_client_queue_free(sx__relay_client_queue *q)
{
    while (q->head != NULL) {
        sx__relay_client_item *p = q->head;
        q->head = p->next;
        sx_reply_free(&p->r);
        free(p);
    }
    q->tail = NULL;
}

/* Sends one frame body where it belongs (the rules are in relay.h): a
 * push to the push queue; the reply to the sync call in progress to it;
 * a reply to a posted request to the reply queue; an error frame with
 * id 0 (the server refusing the connection) to the sync call, or else to
 * the reply queue, and the connection is done; anything else is a reply
 * to a sync call that gave up: dropped. */
static int dispatch(sx_client *c, sx_payload body)
{
    int rc;
    frame_head h;
    if (head_scan(body, &h) != 0)
        return fail(c, SX_EPROTO);
    const sx_payload *ok = h.has_ok ? &h.ok : NULL;
    if (h.push) {
        if ((rc = queue_item(&c->pushes, 0, body, true, NULL)) != 0)
            return fail(c, rc);
        return 0;
    }
    uint64_t got;
    sx_unpack u;
    if (!h.has_id)
        return fail(c, SX_EPROTO);
    sx_unpack_init(&u, h.id);
    if (sx_unpack_uint(&u, &got) != 0)
        return fail(c, SX_EPROTO);
    bool refusal = got == 0;
    if (c->sync_id != 0 && !c->sync_got && (got == c->sync_id || refusal)) {
        if ((rc = reply_make(body, false, ok, c->sync_out)) != 0)
            return fail(c, rc);
        c->sync_got = true;
        if (refusal && !c->sync_out->ok)
            fail(c, SX_ECLOSED);
        return 0;
    }
    if (refusal || sx__relay_client_set_take(c, got)) {
        if ((rc = queue_item(&c->replies, got, body, false, ok)) != 0)
            return fail(c, rc);
        if (refusal)
            fail(c, SX_ECLOSED);
    }
    return 0;
}

static bool wanted(const sx_client *c, int want)
{
    switch (want) {
    case SX__RELAY_CLIENT_WANT_SYNC:
        return c->sync_got;
    case SX__RELAY_CLIENT_WANT_REPLY:
        return c->replies.head != NULL;
    case SX__RELAY_CLIENT_WANT_PUSH:
        return c->pushes.head != NULL;
    default:
        return sx__relay_client_unsent(c) == 0 && !c->wr_closed;
    }
}

/* The one I/O loop of the client: writes what is unsent whenever the
 * socket takes it and reads (and dispatches) whatever arrives, until what
 * `want` names is there or the deadline passes. Reading while writing
 * matters: a server over its output limit stops reading until we read.
 * 0, SX_ETIMEDOUT (the connection stays usable), or the broken code. */
int sx__relay_client_run_io(sx_client *c, int64_t deadline, int want)
{
    uint8_t buf[65536];
    bool sent = false;
    /* Set when a read that got bytes ends past the deadline. The clock is
     * read there too, not only when poll waits: a peer that keeps the
     * socket readable with frames that are not what we want (pushes during
     * a call, replies nobody waits for) would otherwise hold the call for
     * as long as it goes on. After the frames read are dispatched, the
     * call gives up; what is left stays for the next call. */
    bool late = false;
    for (;;) {
        /* Frames already read first: no system call for them. */
        while (!wanted(c, want)) {
            sx_payload body;
            int rc = sx_wire_decoder_next(c->dec, &body);
            if (rc == 0)
                break;
            if (rc < 0)
                return fail(c, SX_EPROTO);
            if ((rc = dispatch(c, body)) != 0)
                return rc;
        }
        if (wanted(c, want))
            return 0;
        if (c->broken != 0)
            return c->broken;
        if (late)
            return SX_ETIMEDOUT;
        if (sx__relay_client_unsent(c) > 0 && !c->wr_closed) {
            uint64_t before = c->written;
            int rc = sx__relay_client_send(c);
            if (rc != 0)
                return rc;
            sent = c->written != before;
            if (wanted(c, want))
                return 0;
        }
        /* Right after a write the answer is rarely there yet: poll
         * before reading rather than spend a recv on EAGAIN. */
        bool try_read = !sent;
        sent = false;
        if (try_read) {
            ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (n > 0) {
                int rc = sx_wire_decoder_feed(c->dec, buf, (size_t)n);
                if (rc != 0)
                    return fail(c, rc);
                late = deadline >= 0 && sx__relay_client_now_ms() > deadline;
                continue;
            }
            if (n == 0)
                return fail(c, SX_ECLOSED);
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return fail(c, errno == ECONNRESET ? SX_ECLOSED : -errno);
            /* Nothing to read, nothing to write and no time left (a
             * timeout of 0, as one thread polling many clients uses):
             * the poll below could only say so again. */
            if (sx__relay_client_unsent(c) == 0 && deadline >= 0 &&
                sx__relay_client_left_ms(deadline) == 0)
                return SX_ETIMEDOUT;
        }
        short ev = POLLIN;
        if (sx__relay_client_unsent(c) > 0 && !c->wr_closed)
            ev |= POLLOUT;
        int rc = sx__relay_client_wait_fd(c->fd, ev, deadline);
        if (rc != 0)
            return rc == SX_ETIMEDOUT ? rc : fail(c, rc);
        if (!try_read) {
            /* poll said something is ready: read it (or write) now. */
            ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (n > 0) {
                if ((rc = sx_wire_decoder_feed(c->dec, buf, (size_t)n)) != 0)
                    return fail(c, rc);
                late = deadline >= 0 && sx__relay_client_now_ms() > deadline;
            } else if (n == 0) {
                return fail(c, SX_ECLOSED);
            } else if (errno != EINTR && errno != EAGAIN &&
                       errno != EWOULDBLOCK) {
                return fail(c, errno == ECONNRESET ? SX_ECLOSED : -errno);
            }
        }
    }
}

int sx_client_call(sx_client *c, sx_payload request, int64_t timeout_ms,
                   sx_reply *out)
{
    if (c == NULL || out == NULL)
        return SX_EINVAL;
    memset(out, 0, sizeof(*out));
    if (c->broken != 0)
        return c->broken;
    int64_t deadline = sx__relay_client_deadline(timeout_ms);
    uint64_t id = c->next_id + 1;
    int rc = sx__relay_client_body_with_id(c, request, id);
    if (rc == 0)
        rc = sx__relay_client_append(c, false);
    if (rc != 0)
        return rc;
    c->next_id = id;
    /* Till all of our frame is written, giving up would leave a frame cut
     * short (or one that goes out later, unasked): that ends the client,
     * as it always has. */
    uint64_t frame_end = c->appended;
    c->sync_id = id;
    c->sync_got = false;
    c->sync_out = out;
    rc = sx__relay_client_run_io(c, deadline, SX__RELAY_CLIENT_WANT_SYNC);
    bool got = c->sync_got;
    c->sync_id = 0;
    c->sync_got = false;
    c->sync_out = NULL;
    if (got)
        return 0; /* even when the answer was the server's refusal */
    if (rc == SX_ETIMEDOUT && c->written < frame_end)
        return fail(c, rc);
    return rc;
}

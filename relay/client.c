/* relay/client.c — the C client of the relay protocol (PROTOCOL.md): one
 * connection; sync calls (a request, then its reply) and pipelined ones
 * (sx_client_post*: many requests in flight, their replies taken with
 * sx_client_next_reply in arrival order, matched by id); pushes queued in
 * arrival order for sx_client_next_push. Requests are buffered and go out
 * together (one send for everything queued) when the client next waits on
 * the socket.
 *
 * Threads: a client belongs to one thread at a time (no locks inside).
 * The socket is non-blocking and every wait is a poll with the time left,
 * so each call honours its timeout; writes use MSG_NOSIGNAL (a gone
 * server is SX_ECLOSED, not SIGPIPE).
 */
#include <stepx/relay.h>

#include "process/hostport.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef struct client_item {
    struct client_item *next;
    uint64_t id; /* a reply's id (0 for pushes and refusals) */
    sx_reply r;  /* owned */
} client_item;

typedef struct {
    client_item *head, *tail; /* oldest first */
} client_queue;

struct sx_client {
    int fd;
    sx_wire_decoder *dec; /* owned */
    uint64_t next_id;     /* ids of our requests: 1, 2, ... */
    sx_pid mailbox;
    int broken;           /* 0, or the error every later call returns */
    client_queue pushes;  /* pushes not yet taken (owned) */
    client_queue replies; /* replies to posted requests not yet taken */
    sx_pack body;         /* request bodies are built here */
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

/* ---- time ---- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A deadline from a timeout (< 0: none, as -1). One too far to add to
 * the clock (up to INT64_MAX ms) saturates: as good as never. */
static int64_t deadline_of(int64_t timeout_ms)
{
    if (timeout_ms < 0)
        return -1;
    int64_t now = now_ms();
    return timeout_ms > INT64_MAX - now ? INT64_MAX : now + timeout_ms;
}

/* The poll timeout left until deadline (-1: none). */
static int left_ms(int64_t deadline)
{
    if (deadline < 0)
        return -1;
    int64_t l = deadline - now_ms();
    if (l <= 0)
        return 0;
    return l > 1000000 ? 1000000 : (int)l;
}

/* Waits for events on fd: 0, SX_ETIMEDOUT, or -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd p = { fd, events, 0 };
        int ms = left_ms(deadline);
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

static int get_str(sx_payload map, const char *key, const char **s, size_t *n)
{
    sx_payload v;
    int rc = sx_map_get(map, key, &v);
    if (rc != 0)
        return rc;
    sx_unpack u;
    sx_unpack_init(&u, v);
    return sx_unpack_str(&u, s, n);
}

/* Fills *out from a reply or push map (copied). */
static int reply_make(sx_payload body, bool is_push, sx_reply *out)
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
    sx_payload v;
    sx_unpack u;
    if (sx_map_get(out->body, "ok", &v) != 0)
        goto bad;
    sx_unpack_init(&u, v);
    if (sx_unpack_bool(&u, &out->ok) != 0)
        goto bad;
    if (out->ok)
        return 0;
    sx_payload err;
    const char *s = "internal", *m = "";
    size_t sl = 8, ml = 0;
    if (sx_map_get(out->body, "error", &err) == 0) {
        get_str(err, "code", &s, &sl);
        get_str(err, "message", &m, &ml);
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

static size_t out_unsent(const sx_client *c)
{
    return c->out.len - c->out_off;
}

/* Forgets what is written: the buffer restarts at 0 when empty, and
 * moves its tail to the front when more than half of it is written. */
static void out_compact(sx_client *c)
{
    if (c->out_off == 0)
        return;
    size_t left = out_unsent(c);
    if (left == 0) {
        c->out.len = 0;
        c->out_off = 0;
    } else if (c->out_off >= left) {
        memmove(c->out.data, c->out.data + c->out_off, left);
        c->out.len = left;
        c->out_off = 0;
    }
}

/* Open addressing with linear probing over ids (never 0). Ids come in
 * sequence, so id & mask spreads a window of them without collisions. */
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
        size_t j = (size_t)id & (cap - 1);
        while (s[j] != 0)
            j = (j + 1) & (cap - 1);
        s[j] = id;
    }
    free(c->set);
    c->set = s;
    c->set_cap = cap;
    return 0;
}

static int set_add(sx_client *c, uint64_t id)
{
    if (2 * (c->set_n + 1) > c->set_cap) {
        int rc = set_grow(c);
        if (rc != 0)
            return rc;
    }
    size_t m = c->set_cap - 1, j = (size_t)id & m;
    while (c->set[j] != 0)
        j = (j + 1) & m;
    c->set[j] = id;
    c->set_n++;
    return 0;
}

/* Removes id: true if it was there. Backward-shift deletion keeps every
 * probe chain unbroken without tombstones. */
static bool set_take(sx_client *c, uint64_t id)
{
    if (c->set_n == 0)
        return false;
    size_t m = c->set_cap - 1, j = (size_t)id & m;
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
        size_t home = (size_t)o & m;
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
static int out_append(sx_client *c)
{
    if (c->body.err != 0)
        return c->body.err;
    out_compact(c);
    size_t mark = c->out.len;
    int rc = sx_wire_frame(&c->out, sx_pack_payload(&c->body));
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
static int body_with_id(sx_client *c, sx_payload request, uint64_t id)
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
static int out_send(sx_client *c)
{
    while (out_unsent(c) > 0 && !c->wr_closed) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, out_unsent(c),
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

static int queue_item(client_queue *q, uint64_t id, sx_payload body,
                      bool is_push)
{
    client_item *p = malloc(sizeof(*p));
    if (p == NULL)
        return SX_ENOMEM;
    int rc = reply_make(body, is_push, &p->r);
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

static void take_item(client_queue *q, uint64_t *id, sx_reply *out)
{
    client_item *p = q->head;
    q->head = p->next;
    if (q->head == NULL)
        q->tail = NULL;
    if (id != NULL)
        *id = p->id;
    *out = p->r;
    free(p);
}

static void queue_free(client_queue *q)
{
    while (q->head != NULL) {
        client_item *p = q->head;
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
    if (sx_map_get(body, "push", NULL) == 0) {
        if ((rc = queue_item(&c->pushes, 0, body, true)) != 0)
            return fail(c, rc);
        return 0;
    }
    sx_payload v;
    uint64_t got;
    sx_unpack u;
    if (sx_map_get(body, "id", &v) != 0)
        return fail(c, SX_EPROTO);
    sx_unpack_init(&u, v);
    if (sx_unpack_uint(&u, &got) != 0)
        return fail(c, SX_EPROTO);
    bool refusal = got == 0;
    if (c->sync_id != 0 && !c->sync_got && (got == c->sync_id || refusal)) {
        if ((rc = reply_make(body, false, c->sync_out)) != 0)
            return fail(c, rc);
        c->sync_got = true;
        if (refusal && !c->sync_out->ok)
            fail(c, SX_ECLOSED);
        return 0;
    }
    if (refusal || set_take(c, got)) {
        if ((rc = queue_item(&c->replies, got, body, false)) != 0)
            return fail(c, rc);
        if (refusal)
            fail(c, SX_ECLOSED);
    }
    return 0;
}

enum { WANT_SYNC, WANT_REPLY, WANT_PUSH, WANT_FLUSH };

static bool wanted(const sx_client *c, int want)
{
    switch (want) {
    case WANT_SYNC:
        return c->sync_got;
    case WANT_REPLY:
        return c->replies.head != NULL;
    case WANT_PUSH:
        return c->pushes.head != NULL;
    default:
        return out_unsent(c) == 0 && !c->wr_closed;
    }
}

/* The one I/O loop of the client: writes what is unsent whenever the
 * socket takes it and reads (and dispatches) whatever arrives, until what
 * `want` names is there or the deadline passes. Reading while writing
 * matters: a server over its output limit stops reading until we read.
 * 0, SX_ETIMEDOUT (the connection stays usable), or the broken code. */
static int run_io(sx_client *c, int64_t deadline, int want)
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
        if (out_unsent(c) > 0 && !c->wr_closed) {
            uint64_t before = c->written;
            int rc = out_send(c);
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
                late = deadline >= 0 && now_ms() > deadline;
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
            if (out_unsent(c) == 0 && deadline >= 0 && left_ms(deadline) == 0)
                return SX_ETIMEDOUT;
        }
        short ev = POLLIN;
        if (out_unsent(c) > 0 && !c->wr_closed)
            ev |= POLLOUT;
        int rc = wait_fd(c->fd, ev, deadline);
        if (rc != 0)
            return rc == SX_ETIMEDOUT ? rc : fail(c, rc);
        if (!try_read) {
            /* poll said something is ready: read it (or write) now. */
            ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (n > 0) {
                if ((rc = sx_wire_decoder_feed(c->dec, buf, (size_t)n)) != 0)
                    return fail(c, rc);
                late = deadline >= 0 && now_ms() > deadline;
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
    int64_t deadline = deadline_of(timeout_ms);
    uint64_t id = c->next_id + 1;
    int rc = body_with_id(c, request, id);
    if (rc == 0)
        rc = out_append(c);
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
    rc = run_io(c, deadline, WANT_SYNC);
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

/* ---- connect ---- */

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

/* Connects fd to sa before deadline. */
static int connect_fd(int fd, const struct sockaddr *sa, socklen_t len,
                      int64_t deadline)
{
    int rc = set_nonblock(fd);
    if (rc != 0)
        return rc;
    /* A Unix socket whose listen backlog is full refuses a non-blocking
     * connect with EAGAIN and starts nothing: there is nothing to poll
     * for (an unconnected socket polls writable at once). Try again every
     * few ms until the deadline, as a blocking connect would wait. */
    while ((rc = connect(fd, sa, len) == 0 ? 0 : -errno) == -EAGAIN) {
        int ms = left_ms(deadline);
        if (ms == 0)
            return SX_ETIMEDOUT;
        struct timespec ts = { 0, (ms < 0 || ms > 10 ? 10 : ms) * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (rc != -EINPROGRESS)
        return rc; /* 0: connected at once */
    if ((rc = wait_fd(fd, POLLOUT, deadline)) != 0)
        return rc;
    int err = 0;
    socklen_t el = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
        return -errno;
    return err == 0 ? 0 : -err;
}

static int open_unix(const char *path, int64_t deadline, int *out)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(sa.sun_path))
        return SX_EINVAL;
    memcpy(sa.sun_path, path, n + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = connect_fd(fd, (struct sockaddr *)&sa, sizeof(sa), deadline);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    *out = fd;
    return 0;
}

/* "HOST:PORT" by the shared rules (process/hostport.h), every address the
 * host resolves to tried in turn. */
static int open_tcp(const char *address, int64_t deadline, int *out)
{
    sx__hostport hp;
    if (sx__hostport_parse(address, strlen(address), 0, 0, &hp) != NULL)
        return SX_EINVAL;
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)hp.port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = hp.ipv6 ? AF_INET6 : AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (hp.ipv6 ? AI_NUMERICHOST : 0);
    if (getaddrinfo(hp.host, port, &hints, &ai) != 0 || ai == NULL)
        return SX_EINVAL;
    int rc = SX_EINVAL;
    for (struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
        int fd =
            socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        rc = connect_fd(fd, a->ai_addr, a->ai_addrlen, deadline);
        if (rc == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            *out = fd;
            break;
        }
        close(fd);
        if (rc == SX_ETIMEDOUT)
            break;
    }
    freeaddrinfo(ai);
    return rc;
}

/* The largest frame a client takes, whatever its server says: stepxd's
 * --max-frame goes up to 1 GiB. */
#define CLIENT_MAX_FRAME ((size_t)1 << 30)

static int hello(sx_client *c, const char *token, int64_t deadline)
{
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_map(&pk, token != NULL ? 3 : 2);
    sx_pack_str(&pk, "op");
    sx_pack_str(&pk, "hello");
    sx_pack_str(&pk, "version");
    sx_pack_uint(&pk, 1);
    if (token != NULL) {
        sx_pack_str(&pk, "token");
        sx_pack_str(&pk, token);
    }
    int rc = pk.err;
    sx_reply r;
    memset(&r, 0, sizeof(r));
    if (rc == 0) {
        /* What is left of connect's timeout (not left_ms, which caps it
         * at one poll's 1,000 s). */
        int64_t left = -1;
        if (deadline >= 0) {
            left = deadline - now_ms();
            if (left < 0)
                left = 0;
        }
        rc = sx_client_call(c, sx_pack_payload(&pk), left, &r);
    }
    sx_pack_fini(&pk);
    if (rc != 0)
        return rc;
    if (!r.ok) {
        rc = r.error;
        sx_reply_free(&r);
        return rc;
    }
    const char *s;
    size_t n;
    char buf[SX_PID_TEXT_MAX];
    rc = get_str(r.body, "mailbox", &s, &n);
    if (rc != 0 || n >= sizeof(buf)) {
        sx_reply_free(&r);
        return SX_EPROTO;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    rc = sx_pid_parse(buf, &c->mailbox) == 0 ? 0 : SX_EPROTO;
    /* A server that sends frames over the default limit says so (hello's
     * max_frame, an extension; stepxd --max-frame): take them, up to
     * CLIENT_MAX_FRAME. Without the field, the default. */
    sx_payload v;
    sx_unpack u;
    uint64_t mf = 0;
    if (rc == 0 && sx_map_get(r.body, "max_frame", &v) == 0) {
        sx_unpack_init(&u, v);
        if (sx_unpack_uint(&u, &mf) != 0)
            mf = 0;
    }
    if (mf > SX_WIRE_MAX_FRAME_DEFAULT)
        sx_wire_decoder_set_max(
            c->dec, mf < CLIENT_MAX_FRAME ? (size_t)mf : CLIENT_MAX_FRAME);
    sx_reply_free(&r);
    return rc;
}

int sx_client_connect(const char *address, const char *token,
                      int64_t timeout_ms, sx_client **out)
{
    if (address == NULL || out == NULL)
        return SX_EINVAL;
    int64_t deadline = deadline_of(timeout_ms);
    sx_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return SX_ENOMEM;
    c->fd = -1;
    sx_pack_init(&c->body);
    sx_pack_init(&c->out);
    int rc = sx_wire_decoder_new(0, &c->dec);
    if (rc != 0)
        goto fail;
    if (strncmp(address, "unix:", 5) == 0)
        rc = open_unix(address + 5, deadline, &c->fd);
    else if (strchr(address, '/') != NULL)
        rc = open_unix(address, deadline, &c->fd);
    else
        rc = open_tcp(address, deadline, &c->fd);
    if (rc != 0)
        goto fail;
    if ((rc = hello(c, token, deadline)) != 0)
        goto fail;
    *out = c;
    return 0;
fail:
    sx_client_close(c);
    return rc;
}

void sx_client_close(sx_client *c)
{
    if (c == NULL)
        return;
    if (c->fd >= 0)
        close(c->fd);
    if (c->dec != NULL)
        sx_wire_decoder_free(c->dec);
    queue_free(&c->pushes);
    queue_free(&c->replies);
    free(c->set);
    sx_pack_fini(&c->body);
    sx_pack_fini(&c->out);
    free(c);
}

sx_pid sx_client_mailbox(const sx_client *c)
{
    return c != NULL ? c->mailbox : SX_PID_NONE;
}

int sx_client_fd(const sx_client *c)
{
    return c != NULL ? c->fd : -1;
}

/* ---- pushes ---- */

int sx_client_next_push(sx_client *c, int64_t timeout_ms, sx_reply *out)
{
    if (c == NULL || out == NULL)
        return SX_EINVAL;
    memset(out, 0, sizeof(*out));
    if (c->pushes.head == NULL) {
        if (c->broken != 0)
            return c->broken;
        int rc = run_io(c, deadline_of(timeout_ms), WANT_PUSH);
        if (c->pushes.head == NULL)
            return rc != 0 ? rc : SX_EPROTO;
    }
    take_item(&c->pushes, NULL, out);
    return 0;
}

/* ---- pipelined requests ---- */

/* Queues the frame built in c->body under id (which the caller reserved
 * as c->next_id + 1): refuses with SX_ELIMIT when the output buffer is
 * over its bound, and writes when enough is queued to fill a segment. */
static int post_body(sx_client *c, uint64_t id, uint64_t *out_id)
{
    if (out_unsent(c) >= SX_CLIENT_MAX_QUEUED) {
        int rc = out_send(c); /* once, without waiting */
        if (rc != 0)
            return rc;
        if (out_unsent(c) >= SX_CLIENT_MAX_QUEUED)
            return SX_ELIMIT;
    }
    int rc = set_add(c, id);
    if (rc != 0)
        return rc;
    if ((rc = out_append(c)) != 0) {
        set_take(c, id);
        return rc;
    }
    c->next_id = id;
    if (out_id != NULL)
        *out_id = id;
    if (out_unsent(c) >= SX_CLIENT_FLUSH_AT)
        return out_send(c);
    return 0;
}

int sx_client_post(sx_client *c, sx_payload request, uint64_t *out_id)
{
    if (c == NULL)
        return SX_EINVAL;
    if (c->broken != 0)
        return c->broken;
    uint64_t id = c->next_id + 1;
    int rc = body_with_id(c, request, id);
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
    return run_io(c, deadline_of(timeout_ms), WANT_FLUSH);
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
        int rc = run_io(c, deadline_of(timeout_ms), WANT_REPLY);
        if (c->replies.head == NULL)
            return rc != 0 ? rc : SX_EPROTO;
    }
    take_item(&c->replies, out_id, out);
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
    int rc = get_str(r->body, "pid", &s, &l);
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
        if (get_str(r->body, "pid", &s, &l) != 0 || l >= sizeof(buf)) {
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

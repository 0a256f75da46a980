/* relay/client.c — the C client of the relay protocol (PROTOCOL.md): one
 * connection, requests answered one at a time, pushes queued in arrival
 * order for sx_client_next_push; and sx_map_get, which the server uses
 * too.
 *
 * Threads: a client belongs to one thread at a time (no locks inside).
 * The socket is non-blocking and every wait is a poll with the time left,
 * so each call honours its timeout; writes use MSG_NOSIGNAL (a gone
 * server is SX_ECLOSED, not SIGPIPE).
 */
#include <stepx/relay.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef struct client_push {
    struct client_push *next;
    sx_reply r; /* owned */
} client_push;

struct sx_client {
    int fd;
    sx_wire_decoder *dec; /* owned */
    uint64_t next_id;     /* ids of our requests: 1, 2, ... */
    sx_pid mailbox;
    int broken;        /* 0, or the error every later call returns */
    client_push *head; /* pushes not yet taken (owned), oldest first */
    client_push *tail;
    sx_pack body; /* request bodies are built here */
    sx_pack frame;
};

/* ---- time ---- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A deadline from a timeout (< 0: none, as -1). */
static int64_t deadline_of(int64_t timeout_ms)
{
    return timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
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

/* ---- sx_map_get ---- */

int sx_map_get(sx_payload map, const char *key, sx_payload *value)
{
    if (key == NULL)
        return SX_EINVAL;
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, map);
    if (sx_unpack_map(&u, &n) != 0)
        return SX_EPROTO;
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t l;
        bool match = false;
        if (sx_unpack_type(&u) == SX_MP_STR) {
            if (sx_unpack_str(&u, &k, &l) != 0)
                return SX_EPROTO;
            match = l == kl && memcmp(k, key, kl) == 0;
        } else if (sx_unpack_skip(&u) != 0) {
            return SX_EPROTO;
        }
        sx_payload v;
        if (sx_unpack_raw(&u, &v) != 0)
            return SX_EPROTO;
        if (match) {
            if (value != NULL)
                *value = v;
            return 0;
        }
    }
    return SX_ENOTFOUND;
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

/* ---- frames ---- */

static int fail(sx_client *c, int rc)
{
    if (c->broken == 0)
        c->broken = rc;
    return rc;
}

/* Writes all of buf before deadline. */
static int write_all(sx_client *c, const uint8_t *buf, size_t len,
                     int64_t deadline)
{
    while (len > 0) {
        ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(c->fd, POLLOUT, deadline);
            if (rc != 0)
                return fail(c, rc); /* a frame cut short: unusable */
            continue;
        }
        return fail(c, errno == EPIPE || errno == ECONNRESET ? SX_ECLOSED
                                                             : -errno);
    }
    return 0;
}

/* The next frame body (valid until the next decoder call): 0, or
 * SX_ETIMEDOUT (the connection stays usable), SX_ECLOSED, SX_EPROTO,
 * -errno. */
static int read_frame(sx_client *c, int64_t deadline, sx_payload *body)
{
    uint8_t buf[65536];
    for (;;) {
        int rc = sx_wire_decoder_next(c->dec, body);
        if (rc == 1)
            return 0;
        if (rc < 0)
            return fail(c, SX_EPROTO);
        ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
        if (n > 0) {
            if ((rc = sx_wire_decoder_feed(c->dec, buf, (size_t)n)) != 0)
                return fail(c, rc);
            continue;
        }
        if (n == 0)
            return fail(c, SX_ECLOSED);
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if ((rc = wait_fd(c->fd, POLLIN, deadline)) != 0)
                return rc == SX_ETIMEDOUT ? rc : fail(c, rc);
            continue;
        }
        return fail(c, errno == ECONNRESET ? SX_ECLOSED : -errno);
    }
}

static int queue_push(sx_client *c, sx_payload body)
{
    client_push *p = malloc(sizeof(*p));
    if (p == NULL)
        return SX_ENOMEM;
    int rc = reply_make(body, true, &p->r);
    if (rc != 0) {
        free(p);
        return rc;
    }
    p->next = NULL;
    if (c->tail != NULL)
        c->tail->next = p;
    else
        c->head = p;
    c->tail = p;
    return 0;
}

/* Reads frames until the reply with id arrives (pushes are queued,
 * replies to abandoned calls dropped). An error frame with id 0 is the
 * server refusing the connection: it is the answer, and the connection
 * is done. */
static int read_reply(sx_client *c, uint64_t id, int64_t deadline,
                      sx_reply *out)
{
    for (;;) {
        sx_payload body;
        int rc = read_frame(c, deadline, &body);
        if (rc != 0)
            return rc;
        if (sx_map_get(body, "push", NULL) == 0) {
            if ((rc = queue_push(c, body)) != 0)
                return fail(c, rc);
            continue;
        }
        sx_payload v;
        uint64_t got;
        sx_unpack u;
        if (sx_map_get(body, "id", &v) != 0)
            return fail(c, SX_EPROTO);
        sx_unpack_init(&u, v);
        if (sx_unpack_uint(&u, &got) != 0)
            return fail(c, SX_EPROTO);
        if (got != id && got != 0)
            continue;
        if ((rc = reply_make(body, false, out)) != 0)
            return fail(c, rc);
        if (got == 0 && !out->ok)
            fail(c, SX_ECLOSED);
        return 0;
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
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, request);
    if (sx_unpack_map(&u, &n) != 0 || n == UINT32_MAX)
        return SX_EINVAL;
    uint64_t id = ++c->next_id;
    sx_pack_reset(&c->body);
    sx_pack_map(&c->body, n + 1);
    sx_pack_str(&c->body, "id");
    sx_pack_uint(&c->body, id);
    for (uint32_t i = 0; i < 2 * n; i++) {
        sx_payload v;
        if (sx_unpack_raw(&u, &v) != 0)
            return SX_EINVAL;
        sx_pack_raw(&c->body, v);
    }
    if (!sx_unpack_done(&u))
        return SX_EINVAL;
    sx_pack_reset(&c->frame);
    sx_wire_frame(&c->frame, sx_pack_payload(&c->body));
    if (c->body.err != 0 || c->frame.err != 0)
        return c->body.err != 0 ? c->body.err : c->frame.err;
    int rc = write_all(c, c->frame.data, c->frame.len, deadline);
    if (rc == SX_ECLOSED) {
        /* The server may have said why before it closed (an error frame
         * with id 0): that is the answer if it is there. */
        c->broken = 0;
        if (read_reply(c, id, deadline, out) == 0)
            return 0;
        c->broken = rc;
    }
    if (rc != 0)
        return rc;
    return read_reply(c, id, deadline, out);
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
    if (connect(fd, sa, len) == 0)
        return 0;
    if (errno != EINPROGRESS && errno != EAGAIN)
        return -errno;
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

static int open_tcp(const char *address, int64_t deadline, int *out)
{
    const char *colon = strrchr(address, ':');
    if (colon == NULL || colon == address || colon[1] == '\0')
        return SX_EINVAL;
    char host[256];
    const char *h = address;
    size_t hl = (size_t)(colon - address);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= sizeof(host))
        return SX_EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || ai == NULL)
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
        int64_t left = deadline < 0 ? -1 : left_ms(deadline);
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
    sx_pack_init(&c->frame);
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
    while (c->head != NULL) {
        client_push *p = c->head;
        c->head = p->next;
        sx_reply_free(&p->r);
        free(p);
    }
    sx_pack_fini(&c->body);
    sx_pack_fini(&c->frame);
    free(c);
}

sx_pid sx_client_mailbox(const sx_client *c)
{
    return c != NULL ? c->mailbox : SX_PID_NONE;
}

/* ---- pushes ---- */

int sx_client_next_push(sx_client *c, int64_t timeout_ms, sx_reply *out)
{
    if (c == NULL || out == NULL)
        return SX_EINVAL;
    memset(out, 0, sizeof(*out));
    int64_t deadline = deadline_of(timeout_ms);
    while (c->head == NULL) {
        if (c->broken != 0)
            return c->broken;
        sx_payload body;
        int rc = read_frame(c, deadline, &body);
        if (rc != 0)
            return rc;
        if (sx_map_get(body, "push", NULL) == 0 &&
            (rc = queue_push(c, body)) != 0)
            return fail(c, rc);
        /* Anything else is a reply to a call that gave up: dropped. */
    }
    client_push *p = c->head;
    c->head = p->next;
    if (c->head == NULL)
        c->tail = NULL;
    *out = p->r;
    free(p);
    return 0;
}

/* ---- shortcuts ---- */

/* Sends the request built in pk (and finishes pk), then keeps the reply
 * in out when keep is not NULL, or frees it: the shortcuts' promise. */
static int call_pk(sx_client *c, sx_pack *pk, int64_t timeout_ms, sx_reply *out,
                   sx_reply *keep)
{
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

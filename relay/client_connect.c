/* relay/client_connect.c — the C client's connection: a Unix socket (a
 * path, or "unix:PATH") or TCP ("HOST:PORT", every address the host
 * resolves to tried in turn), connected without blocking past the
 * deadline; the hello that starts every connection (with the token, when
 * given); and closing.
 *
 * Threads: a client belongs to one thread at a time (relay/client.h).
 */
#include "process/hostport.h"
#include "relay/client.h"

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
        int ms = sx__relay_client_left_ms(deadline);
        if (ms == 0)
            return SX_ETIMEDOUT;
        struct timespec ts = { 0, (ms < 0 || ms > 10 ? 10 : ms) * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (rc != -EINPROGRESS)
        return rc; /* 0: connected at once */
    if ((rc = sx__relay_client_wait_fd(fd, POLLOUT, deadline)) != 0)
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
        /* What is left of connect's timeout (not sx__relay_client_left_ms,
         * which caps it at one poll's 1,000 s). */
        int64_t left = -1;
        if (deadline >= 0) {
            left = deadline - sx__relay_client_now_ms();
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
    rc = sx__relay_client_get_str(r.body, "mailbox", &s, &n);
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
    int64_t deadline = sx__relay_client_deadline(timeout_ms);
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
    sx__relay_client_queue_free(&c->pushes);
    sx__relay_client_queue_free(&c->replies);
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

/* relay/server.c — the relay server: start and stop, its loop thread, the
 * listeners (a Unix socket and/or TCP), and the hub through which engine
 * threads hand frames to the loop.
 *
 * Threads: sx_server_start binds the listeners on the caller's thread
 * before the loop thread exists (so bind errors come back at once), then
 * hands every uv handle to the loop thread, which alone touches them from
 * then on. sx_server_stop asks the loop to finish through the hub and
 * joins it. sx_server_stats_get and sx_server_port are [any thread].
 * Connections are accepted in relay/accept.c, read in relay/conn.c and
 * written in relay/conn_output.c; the operations are in relay/ops.c and
 * relay/ops_info.c, their replies in relay/reply.c; the whole design is in
 * docs/RELAY.md.
 */
#include "relay/server.h"

#include "process/fault.h"
#include "process/hostport.h"
#include "process/utf8.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- items ---- */

sx__relay_out *sx__relay_out_new(uint8_t kind, size_t cap)
{
    sx__relay_out *o = malloc(sizeof(*o) + cap);
    if (o == NULL)
        return NULL;
    memset(o, 0, sizeof(*o));
    o->kind = kind;
    o->cap = cap;
    o->data = (uint8_t *)(o + 1);
    return o;
}

void sx__relay_out_free(sx__relay_out *o)
{
    if (o != NULL && !o->embedded)
        free(o);
}

sx__relay_out *sx__relay_reply_new(sx_server *s, size_t cap)
{
    if (cap > SX_RELAY_OUT_SMALL)
        return sx__relay_out_new(SX__RELAY_OUT_REPLY, cap);
    sx__relay_out *o = s->out_free;
    if (o != NULL) {
        s->out_free = o->next;
        s->out_free_n--;
    } else {
        o = malloc(sizeof(*o) + SX_RELAY_OUT_SMALL);
        if (o == NULL)
            return NULL;
    }
    memset(o, 0, sizeof(*o));
    o->kind = SX__RELAY_OUT_REPLY;
    o->small = 1;
    o->cap = SX_RELAY_OUT_SMALL;
    o->data = (uint8_t *)(o + 1);
    return o;
}

void sx__relay_out_done(sx_server *s, sx__relay_out *o)
{
    if (o != NULL && o->small && s->out_free_n < SX_RELAY_OUT_CACHE) {
        o->next = s->out_free;
        s->out_free = o;
        s->out_free_n++;
        return;
    }
    sx__relay_out_free(o);
}

void sx__relay_out_seal(sx__relay_out *o, size_t body_len)
{
    /* The frame header (PROTOCOL.md "Frames"): big-endian body length,
     * written by hand: callbacks pack the body in place, and a reply
     * built apart is copied in behind it (conn_output.c), one item per
     * frame either way. */
    o->data[0] = (uint8_t)(body_len >> 24);
    o->data[1] = (uint8_t)(body_len >> 16);
    o->data[2] = (uint8_t)(body_len >> 8);
    o->data[3] = (uint8_t)body_len;
    o->len = SX_WIRE_HEADER + body_len;
}

void sx__relay_out_seal_at(sx__relay_out *o, size_t off, size_t body_len)
{
    o->off = off;
    o->data[off] = (uint8_t)(body_len >> 24);
    o->data[off + 1] = (uint8_t)(body_len >> 16);
    o->data[off + 2] = (uint8_t)(body_len >> 8);
    o->data[off + 3] = (uint8_t)body_len;
    o->len = SX_WIRE_HEADER + body_len;
}

sx__relay_out *sx__relay_out_utf8(sx__relay_out *o, size_t fixed_len)
{
    /* The rare path (a str that is not UTF-8): a second item, not a
     * rewrite in place, since the body may grow. */
    sx__relay_out *n = sx__relay_out_new(o->kind, SX_WIRE_HEADER + fixed_len);
    if (n != NULL) {
        sx__wire_utf8_fix(o->data + SX_WIRE_HEADER, o->len - SX_WIRE_HEADER,
                          n->data + SX_WIRE_HEADER);
        sx__relay_out_seal(n, fixed_len);
    }
    sx__relay_out_free(o);
    return n;
}

size_t sx__relay_pack_dropped(uint8_t *dst, uint64_t n)
{
    sx_pack pk;
    sx_pack_init_fixed(&pk, dst + SX_WIRE_HEADER,
                       SX_RELAY_DROPPED_MAX - SX_WIRE_HEADER);
    sx_pack_map(&pk, 2);
    sx_pack_str(&pk, "push");
    sx_pack_str(&pk, "dropped");
    sx_pack_str(&pk, "count");
    sx_pack_uint(&pk, n);
    for (int i = 0; i < SX_WIRE_HEADER; i++)
        dst[i] = (uint8_t)(pk.len >> (8 * (SX_WIRE_HEADER - 1 - i)));
    return SX_WIRE_HEADER + pk.len;
}

/* ---- stop ---- */

static void listener_closed(uv_handle_t *h)
{
    (void)h;
}

/* Ends the loop: listeners and connections close (each connection frees
 * its mailbox, abandons its waits), then the hub closes, what is still
 * queued is dropped, and the bell closes. uv_run returns once every
 * handle's close callback has run. */
/* The server's own handles (not the listeners). */
static void close_handles(sx_server *s)
{
    uv_close((uv_handle_t *)&s->bell, listener_closed);
    uv_close((uv_handle_t *)&s->gate, listener_closed);
    uv_close((uv_handle_t *)&s->drain, listener_closed);
    uv_close((uv_handle_t *)&s->bell_again, listener_closed);
    uv_close((uv_handle_t *)&s->flusher, listener_closed);
    uv_close((uv_handle_t *)&s->hup, listener_closed);
    uv_close((uv_handle_t *)&s->auth_timer, listener_closed);
    uv_close((uv_handle_t *)&s->again, listener_closed);
    uv_close((uv_handle_t *)&s->tick, listener_closed);
}

void sx__relay_close_all(sx_server *s)
{
    /* Replies produced in this loop iteration wait for the flusher (a
     * uv_prepare that would run before the next poll): write them now, or
     * closing the connections below drops them. The bell can hand over the
     * last outcomes (a process terminated at the stop deadline, whose
     * waiting client must get that outcome) and the stop flag in one call;
     * stepxd stops the engine first for exactly that reason. What the
     * socket takes at once goes out; a write still pending when the
     * connection closes is cancelled (a client that does not read). */
    s->stopping = true; /* first: the flush below answers no new request */
    sx__relay_flush_cb(&s->flusher);
    if (s->has_pipe) {
        /* The name before the socket: a file that refuses connections
         * would look stale to a server starting meanwhile. */
        if (s->path_ours)
            unlink(s->socket_path);
        uv_close((uv_handle_t *)&s->pipe, listener_closed);
    }
    if (s->has_tcp)
        uv_close((uv_handle_t *)&s->tcp, listener_closed);
    while (s->conns != NULL)
        sx__relay_conn_close(s->conns);
    while (s->more != NULL) { /* their turns are over for good */
        sx__relay_conn *c = s->more;
        s->more = c->more_next;
        c->in_more = false;
        sx__relay_conn_unref(c);
    }
    sx__relay_watches_close_all(s);
    sx__relay_records_free(s);
    pthread_mutex_lock(&s->hub->mu);
    s->hub->closed = true;
    s->hub->asleep = false;
    sx__relay_out *o = s->hub->head;
    s->hub->head = s->hub->tail = NULL;
    pthread_mutex_unlock(&s->hub->mu);
    while (o != NULL) {
        sx__relay_out *next = o->next;
        sx__relay_item_discard(o);
        o = next;
    }
    close_handles(s);
}

static void *loop_main(void *arg)
{
    sx_server *s = arg;
    /* A write to a client that has gone must fail with EPIPE, not raise
     * SIGPIPE in the whole process. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* ---- configuration ---- */

/* Reads "HOST:PORT" by the shared rules (process/hostport.h; port 0: the
 * system picks one, sx_server_port says which) and resolves it into *ss. */
static int parse_listen(const char *listen, struct sockaddr_storage *ss)
{
    sx__hostport hp;
    socklen_t len;
    if (sx__hostport_parse(listen, strlen(listen), SX__HOSTPORT_PORT_ZERO, 0,
                           &hp) != NULL)
        return SX_EINVAL;
    return sx__hostport_bind_addr(&hp, ss, &len);
}

static bool is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)ss;
        return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    }
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)ss;
    return IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
}

/* The address of the Unix socket at path (shorter than sun_path: the
 * caller checked). */
static struct sockaddr_un unix_addr(const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    return sa;
}

/* A socket file at path: free to bind (0, a stale file removed), owned
 * by a live server (-EADDRINUSE), or something else (-EEXIST). */
static int clear_stale(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST;
    /* Non-blocking: a listener with a full backlog answers EAGAIN at
     * once where a blocking connect would wait for it. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un sa = unix_addr(path);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    int err = rc == 0 ? 0 : errno;
    close(fd);
    if (rc == 0 || err == EAGAIN)
        return -EADDRINUSE; /* someone listens: a live server */
    if (err != ECONNREFUSED)
        return -err;
    /* Nobody listens: a file left by a server that died. */
    if (unlink(path) != 0 && errno != ENOENT)
        return -errno;
    return 0;
}

/* Takes "PATH.lock" (flock, held until unlock_path): -EADDRINUSE when
 * another server holds it. Binding and listening are two steps, and in
 * between the socket file (PATH.new, or PATH where listen_unix binds
 * there) refuses connections as a dead server's does: a second server
 * probing it then would unlink it and bind its own, leaving two servers
 * of which the first is unreachable (and removes the second's file when
 * it stops). Under the lock, a file that refuses is stale. The
 * holder removes the lock file before it lets go, so a lock taken on a
 * file no longer at that path is let go and taken again. */
static int lock_path(sx_server *s)
{
    char lock[PATH_MAX];
    if (snprintf(lock, sizeof(lock), "%s.lock", s->socket_path) >=
        (int)sizeof(lock))
        return SX_EINVAL;
    for (;;) {
        int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
            return -errno;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int err = errno;
            close(fd);
            return err == EWOULDBLOCK ? -EADDRINUSE : -err;
        }
        struct stat held, named;
        if (fstat(fd, &held) == 0 && stat(lock, &named) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
            s->lock_fd = fd;
            return 0;
        }
        close(fd);
    }
}

/* Removes the lock file, then lets go of the lock (the order lock_path
 * relies on). After the socket file is removed. */
static void unlock_path(sx_server *s)
{
    if (s->lock_fd < 0)
        return;
    char lock[PATH_MAX];
    snprintf(lock, sizeof(lock), "%s.lock", s->socket_path);
    unlink(lock);
    close(s->lock_fd);
    s->lock_fd = -1;
}

/* A Unix stream socket bound at path, made 0600 before it listens
 * (nobody can connect before listen, so there is no window with a wider
 * mode), listening: its fd, or -errno with nothing left at path. */
static int bound_listening(const char *path)
{
    struct sockaddr_un sa = unix_addr(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    if (chmod(path, 0600) != 0 || listen(fd, SOMAXCONN) != 0) {
        int err = errno;
        unlink(path); /* bind made it: ours */
        close(fd);
        return -err;
    }
    return fd;
}

/* The socket is bound at "PATH.new", made 0600, set listening, and only
 * then linked at PATH: a client that sees the file can connect, so
 * waiting for the file is waiting for the server. link, not rename: a
 * file made at PATH since clear_stale is neither replaced nor removed
 * (-EADDRINUSE when it is a socket, -EEXIST when not). PATH.new is
 * probed as PATH is (a socket nobody answers on is removed); where it is
 * something else, does not fit a socket address, or the link fails
 * otherwise (a file system without hard links), the socket is bound at
 * PATH itself, which refuses connections between bind and listen.
 * path_ours is set once the file at PATH is this server's socket: stop
 * and a failed start remove PATH only then. The fd is handed to libuv
 * already bound, so libuv holds no name to unlink when it closes it. */
static int listen_unix(sx_server *s)
{
    const char *path = s->socket_path;
    char aside[sizeof(((struct sockaddr_un *)0)->sun_path)];
    if (strlen(path) >= sizeof(aside))
        return SX_EINVAL;
    int rc = lock_path(s);
    if (rc != 0)
        return rc;
    rc = clear_stale(path);
    if (rc != 0)
        return rc;
    int fd = -1;
    if (snprintf(aside, sizeof(aside), "%s.new", path) < (int)sizeof(aside) &&
        clear_stale(aside) == 0 && (fd = bound_listening(aside)) >= 0) {
        SX__FAULT_HOOK(SX__HOOK_RELAY_LINK, 0);
        int err = link(aside, path) == 0 ? 0 : errno;
        unlink(aside); /* before close: the name is ours until then */
        if (err == EEXIST) {
            close(fd);
            struct stat st;
            return lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) ? -EADDRINUSE
                                                                 : -EEXIST;
        }
        if (err != 0) {
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0 && (fd = bound_listening(path)) < 0)
        return fd;
    s->path_ours = true;
    if ((rc = uv_pipe_init(&s->loop, &s->pipe, 0)) == 0) {
        s->has_pipe = true;
        s->pipe.data = s;
        rc = uv_pipe_open(&s->pipe, fd);
    }
    if (rc != 0) {
        /* uv_pipe_open fails before the handle takes fd. The name before
         * the socket, as at stop. */
        unlink(path);
        s->path_ours = false;
        close(fd);
        return rc;
    }
    return uv_listen((uv_stream_t *)&s->pipe, SOMAXCONN, sx__relay_accept);
}

static int listen_tcp(sx_server *s, const struct sockaddr_storage *ss)
{
    int rc = uv_tcp_init(&s->loop, &s->tcp);
    if (rc != 0)
        return rc;
    s->has_tcp = true;
    s->tcp.data = s;
    if ((rc = uv_tcp_bind(&s->tcp, (const struct sockaddr *)ss, 0)) != 0)
        return rc;
    if ((rc = uv_listen((uv_stream_t *)&s->tcp, SOMAXCONN, sx__relay_accept)) !=
        0)
        return rc;
    struct sockaddr_storage got;
    int len = sizeof(got);
    if ((rc = uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&got, &len)) != 0)
        return rc;
    s->port = got.ss_family == AF_INET
                  ? ntohs(((struct sockaddr_in *)&got)->sin_port)
                  : ntohs(((struct sockaddr_in6 *)&got)->sin6_port);
    return 0;
}

static char *dup_str(const char *x)
{
    size_t n = strlen(x) + 1;
    char *d = malloc(n);
    if (d != NULL)
        memcpy(d, x, n);
    return d;
}

static void probe_fn(void *user, const sx_message *m)
{
    (void)user, (void)m;
}

/* Is the engine started? A mailbox can only be made when it is. */
static int engine_started(sx_engine *e)
{
    sx_pid pid;
    int rc = sx_engine_mailbox_new(e, probe_fn, NULL, &pid);
    if (rc != 0)
        return rc;
    sx_engine_mailbox_free(e, pid);
    return 0;
}

static void server_free(sx_server *s)
{
    sx_pack_fini(&s->pk);
    while (s->out_free != NULL) { /* the loop has ended (or never ran) */
        sx__relay_out *o = s->out_free;
        s->out_free = o->next;
        free(o);
    }
    free(s->types);
    free(s->type_lens);
    free(s->socket_path);
    free(s->token);
    free(s->server_name);
    if (s->hub != NULL) {
        /* The loop has ended (or never ran): nobody rings any more, as
         * the hub is closed or was never shared; a watch may still hold
         * the hub itself. */
        close(s->hub->bell_fd);
        sx__relay_hub_unref(s->hub);
    }
    free(s);
}

static int config_copy(sx_server *s, const sx_server_config *cfg)
{
    sx_engine_config ec;
    s->stored =
        sx_engine_config_get(s->engine, &ec) == 0 && ec.state_dir != NULL;
    s->node = ec.node;
    s->max_frame =
        cfg->max_frame != 0 ? cfg->max_frame : SX_WIRE_MAX_FRAME_DEFAULT;
    s->max_output =
        cfg->max_output != 0 ? cfg->max_output : SX_RELAY_MAX_OUTPUT_DEFAULT;
    s->max_connections = cfg->max_connections != 0
                             ? cfg->max_connections
                             : SX_RELAY_MAX_CONNECTIONS_DEFAULT;
    s->server_name = dup_str(cfg->server_name != NULL ? cfg->server_name
                                                      : SX_RELAY_SERVER_NAME);
    if (s->server_name == NULL)
        return SX_ENOMEM;
    if (cfg->socket_path != NULL &&
        (s->socket_path = dup_str(cfg->socket_path)) == NULL)
        return SX_ENOMEM;
    s->max_waits =
        cfg->max_waits != 0 ? cfg->max_waits : SX_RELAY_MAX_WAITS_DEFAULT;
    s->max_unauth = cfg->max_unauthenticated != 0 ? cfg->max_unauthenticated
                                                  : SX_RELAY_MAX_UNAUTH_DEFAULT;
    s->auth_timeout_ms = cfg->auth_timeout_ms != 0
                             ? cfg->auth_timeout_ms
                             : SX_RELAY_AUTH_TIMEOUT_DEFAULT;
    if (cfg->token != NULL && strlen(cfg->token) > SX_RELAY_TOKEN_MAX)
        return SX_EINVAL; /* a hello with it would not fit its frame */
    if (cfg->token != NULL) {
        if ((s->token = dup_str(cfg->token)) == NULL)
            return SX_ENOMEM;
        s->token_len = strlen(s->token);
    }
    size_t n = sx_engine_types(s->engine, NULL, 0);
    s->types = calloc(n + 1, sizeof(*s->types));
    if (s->types == NULL)
        return SX_ENOMEM;
    s->n_types = sx_engine_types(s->engine, s->types, n);
    s->type_lens = calloc(s->n_types + 1, sizeof(*s->type_lens));
    if (s->type_lens == NULL)
        return SX_ENOMEM;
    for (size_t i = 0; i < s->n_types; i++)
        s->type_lens[i] = strlen(s->types[i]->name);
    return 0;
}

int sx_server_start(sx_engine *e, const sx_server_config *cfg, sx_server **out)
{
    if (e == NULL || cfg == NULL || out == NULL ||
        (cfg->socket_path == NULL && cfg->listen == NULL) ||
        (cfg->socket_path != NULL && cfg->socket_path[0] == '\0') ||
        (cfg->server_name != NULL &&
         !sx__utf8_valid((const unsigned char *)cfg->server_name,
                         strlen(cfg->server_name))))
        return SX_EINVAL;
    struct sockaddr_storage ss;
    if (cfg->listen != NULL) {
        if (parse_listen(cfg->listen, &ss) != 0)
            return SX_EINVAL;
        bool has_token = cfg->token != NULL && cfg->token[0] != '\0';
        if (!is_loopback(&ss) && !has_token)
            return SX_EINVAL;
    }
    int rc = engine_started(e);
    if (rc != 0)
        return rc;
    sx_server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return SX_ENOMEM;
    s->engine = e;
    s->cluster = cfg->cluster;
    s->lock_fd = -1;
    sx_pack_init(&s->pk);
    if ((rc = config_copy(s, cfg)) != 0 || (rc = sx__relay_hub_new(s)) != 0)
        goto fail_alloc;
    if ((rc = uv_loop_init(&s->loop)) != 0)
        goto fail_alloc;
    if ((rc = uv_poll_init(&s->loop, &s->bell, s->hub->bell_fd)) != 0)
        goto fail_loop;
    s->bell.data = s;
    uv_poll_start(&s->bell, UV_READABLE,
                  sx__relay_bell_cb);    /* cannot fail: new */
    uv_prepare_init(&s->loop, &s->gate); /* cannot fail */
    s->gate.data = s;
    uv_prepare_start(&s->gate, sx__relay_gate_cb);
    uv_check_init(&s->loop, &s->drain); /* cannot fail */
    s->drain.data = s;
    uv_check_start(&s->drain, sx__relay_drain_cb);
    uv_idle_init(&s->loop, &s->bell_again); /* cannot fail */
    sx__relay_spin_init(s);
    uv_prepare_init(&s->loop, &s->flusher); /* cannot fail */
    s->flusher.data = s;
    uv_timer_init(&s->loop, &s->hup); /* cannot fail */
    s->hup.data = s;
    uv_timer_init(&s->loop, &s->auth_timer); /* cannot fail */
    sx__relay_auth_init(s);
    uv_idle_init(&s->loop, &s->again); /* cannot fail */
    s->again.data = s;
    uv_check_init(&s->loop, &s->tick); /* cannot fail */
    s->tick.data = s;
    if (s->socket_path != NULL && (rc = listen_unix(s)) != 0)
        goto fail_handles;
    if (cfg->listen != NULL && (rc = listen_tcp(s, &ss)) != 0)
        goto fail_handles;
    if ((rc = pthread_create(&s->thread, NULL, loop_main, s)) != 0) {
        rc = -rc;
        goto fail_handles;
    }
    *out = s;
    return 0;

fail_handles:
    /* The name before the socket, the lock after both (lock_path). */
    if (s->path_ours)
        unlink(s->socket_path);
    if (s->has_pipe)
        uv_close((uv_handle_t *)&s->pipe, listener_closed);
    if (s->has_tcp)
        uv_close((uv_handle_t *)&s->tcp, listener_closed);
    close_handles(s);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    if (s->socket_path != NULL)
        unlock_path(s);
fail_loop:
    uv_loop_close(&s->loop);
fail_alloc:
    server_free(s);
    return rc;
}

sx_cluster *sx_server_cluster(const sx_server *s)
{
    return s != NULL ? s->cluster : NULL;
}

int sx_server_port(const sx_server *s)
{
    return s != NULL ? s->port : 0;
}

void sx_server_stats_get(const sx_server *s, sx_server_stats *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    if (s == NULL)
        return;
    /* relaxed: figures only (see the fields). */
    out->connections =
        atomic_load_explicit(&s->st_connections, memory_order_relaxed);
    out->accepted = atomic_load_explicit(&s->st_accepted, memory_order_relaxed);
    out->requests = atomic_load_explicit(&s->st_requests, memory_order_relaxed);
    out->bad_frames =
        atomic_load_explicit(&s->st_bad_frames, memory_order_relaxed);
    out->slow_drops =
        atomic_load_explicit(&s->st_slow_drops, memory_order_relaxed);
    out->pushes = atomic_load_explicit(&s->st_pushes, memory_order_relaxed);
    out->output_peak =
        atomic_load_explicit(&s->st_output_peak, memory_order_relaxed);
    out->watches = atomic_load_explicit(&s->st_watches, memory_order_relaxed);
    out->waits = atomic_load_explicit(&s->st_waits, memory_order_relaxed);
    out->push_drops =
        atomic_load_explicit(&s->st_push_drops, memory_order_relaxed);
    out->unauthenticated =
        atomic_load_explicit(&s->st_unauth, memory_order_relaxed);
    out->auth_closed =
        atomic_load_explicit(&s->st_auth_closed, memory_order_relaxed);
}

void sx_server_stop(sx_server *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->hub->mu);
    s->hub->stop = true;
    /* The loop is open here (only this call ends it): the gate sees stop
     * if the loop is awake, the ring wakes it if not. */
    sx__relay_hub_ring(s->hub);
    pthread_mutex_unlock(&s->hub->mu);
    pthread_join(s->thread, NULL);
    uv_loop_close(&s->loop);
    /* The loop ends only once its listeners are closed, and it removed
     * the file before closing the socket (sx__relay_close_all): what is
     * left is the lock. */
    if (s->socket_path != NULL)
        unlock_path(s);
    server_free(s);
}

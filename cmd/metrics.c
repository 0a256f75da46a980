/* cmd/metrics.c — Prometheus text metrics for stepxd (GET /metrics).
 *
 * One thread with a blocking listener: poll(2) on the listening socket and
 * a self-pipe (for stop); each request is read (up to 8 KiB, 2 s in all,
 * cut short by a stop), answered (writes give up after 2 s) and closed.
 * Scrapes are rare, so a connection at a time is plenty, and the engine's
 * figures are read with its own lock-free getters.
 */
/* For accept4 and pipe2 (glibc): every descriptor here is close-on-exec
 * from its creation, or an exec process started meanwhile inherits it.
 * Defined here only, before any header: the rest of the project stays on
 * _POSIX_C_SOURCE (docs/CONTRIBUTING.md). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cmd/metrics.h"
#include "process/hostport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct sx_metrics {
    sx_engine *engine;
    sx_server *server;
    int listen_fd;
    int stop_pipe[2];
    pthread_t thread;
};

/* ---- rendering ---- */

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} text;

static void put(text *t, const char *fmt, ...)
{
    if (t->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap * 2 + (size_t)n + 1;
        char *b = realloc(t->buf, cap);
        if (b == NULL) {
            t->oom = true;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
}

static void counter(text *t, const char *name, const char *help, uint64_t v)
{
    put(t, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

static void gauge(text *t, const char *name, const char *help, uint64_t v)
{
    put(t, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

/* One family with a line per peer (not this node): the integer field at
 * off of each member, of Prometheus type `type`. */
_Static_assert(sizeof(((sx_cluster_member *)0)->processes) == 8 &&
                   sizeof(((sx_cluster_member *)0)->reconnects) == 8,
               "per_peer reads a uint64_t at each offset");
static void per_peer(text *t, const sx_cluster_member *m, size_t n,
                     const char *name, const char *type, const char *help,
                     size_t off)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (size_t i = 0; i < n; i++)
        if (!m[i].self) {
            uint64_t v;
            memcpy(&v, (const char *)&m[i] + off, sizeof v);
            put(t, "%s{node=\"%u\"} %llu\n", name, m[i].node,
                (unsigned long long)v);
        }
}

/* The cluster's membership figures, and one line per peer: how long ago
 * it was last heard from, its processes and its load (docs/CLUSTER.md). */
static void cluster_metrics(text *t, sx_cluster *cl)
{
    sx_cluster_stats cs;
    sx_cluster_stats_get(cl, &cs);
    gauge(t, "stepx_cluster_connected", "1 while connected to NATS.",
          cs.connected ? 1 : 0);
    counter(t, "stepx_cluster_heartbeats_sent_total",
            "Heartbeats this node published.", cs.heartbeats_sent);
    counter(t, "stepx_cluster_heartbeats_received_total",
            "Heartbeats heard from other nodes.", cs.heartbeats_received);
    counter(t, "stepx_cluster_bad_messages_total",
            "Messages on the cluster's subjects dropped (malformed, "
            "another cluster's, a conflicting node number).",
            cs.bad_messages);
    counter(t, "stepx_cluster_downs_total",
            "Nodes declared down (silent, goodbye, new incarnation).",
            cs.downs);
    counter(t, "stepx_cluster_reconnects_total", "Reconnects to NATS.",
            cs.reconnects);
    counter(t, "stepx_cluster_messages_out_total",
            "Messages sent to processes of other nodes.", cs.messages_out);
    counter(t, "stepx_cluster_messages_in_total",
            "Messages received for processes of this node.", cs.messages_in);
    counter(t, "stepx_cluster_messages_undelivered_total",
            "Received messages the engine refused (no such process, ...).",
            cs.messages_undelivered);
    counter(t, "stepx_cluster_batches_out_total",
            "NATS messages that carried messages to other nodes.",
            cs.batches_out);
    counter(t, "stepx_cluster_batches_in_total",
            "NATS messages that carried messages to this node.", cs.batches_in);
    counter(t, "stepx_cluster_watches_out_total",
            "Waits, monitors and links set on processes of other nodes.",
            cs.watches_out);
    counter(t, "stepx_cluster_watches_answered_total",
            "Of those, answered by their node.", cs.watches_answered);
    counter(t, "stepx_cluster_watches_lost_total",
            "Of those, answered noconnection (node down, NATS lost).",
            cs.watches_lost);
    counter(t, "stepx_cluster_dropped_total",
            "Frames for this node dropped by the NATS client: the node fell "
            "too far behind.",
            cs.dropped);
    counter(t, "stepx_cluster_watches_in_total",
            "Watches other nodes set on processes of this node.",
            cs.watches_in);
    sx_cluster_member m[256];
    size_t n = sx_cluster_members(cl, m, 256);
    if (n > 256)
        n = 256;
    put(t, "# HELP stepx_cluster_peer_last_heard_seconds Time since a "
           "member's last heartbeat.\n"
           "# TYPE stepx_cluster_peer_last_heard_seconds gauge\n");
    for (size_t i = 0; i < n; i++)
        if (!m[i].self)
            put(t, "stepx_cluster_peer_last_heard_seconds{node=\"%u\"} %.3f\n",
                m[i].node, (double)m[i].last_heard_ms / 1000.0);
    per_peer(t, m, n, "stepx_cluster_peer_processes", "gauge",
             "A member's live processes at its last heartbeat.",
             offsetof(sx_cluster_member, processes));
    per_peer(t, m, n, "stepx_cluster_peer_reconnects_total", "counter",
             "A member's reconnects to NATS, as its last heartbeat said.",
             offsetof(sx_cluster_member, reconnects));
    put(t, "# HELP stepx_cluster_peer_messages_total Messages for processes "
           "on the link with a member since it joined, by direction.\n"
           "# TYPE stepx_cluster_peer_messages_total counter\n");
    for (size_t i = 0; i < n; i++)
        if (!m[i].self)
            put(t,
                "stepx_cluster_peer_messages_total{node=\"%u\",dir=\"out\"} "
                "%llu\n"
                "stepx_cluster_peer_messages_total{node=\"%u\",dir=\"in\"} "
                "%llu\n",
                m[i].node, (unsigned long long)m[i].messages_out, m[i].node,
                (unsigned long long)m[i].messages_in);
}

char *sx_metrics_render(sx_engine *e, sx_server *srv, size_t *len)
{
    text t = { malloc(4096), 0, 4096, false };
    if (t.buf == NULL)
        return NULL;
    sx_engine_stats st;
    sx_worker_stats ws[SX_MAX_WORKERS];
    sx_engine_stats_get(e, &st, ws, SX_MAX_WORKERS);
    uint64_t states[SX_PSTATE_COMPLETE + 1];
    sx_engine_count_states(e, states);

    put(&t, "# HELP stepx_processes Live processes by state.\n"
            "# TYPE stepx_processes gauge\n");
    for (int s = SX_PSTATE_READY; s < SX_PSTATE_COMPLETE; s++)
        put(&t, "stepx_processes{state=\"%s\"} %llu\n", sx_pstate_name(s),
            (unsigned long long)states[s]);
    gauge(&t, "stepx_processes_live", "Processes not yet finished.", st.live);
    counter(&t, "stepx_processes_submitted_total",
            "Submits and spawns that succeeded.", st.submitted);
    counter(&t, "stepx_processes_completed_total",
            "Processes that finished "
            "DONE.",
            st.completed);
    counter(&t, "stepx_processes_failed_total", "Processes that failed.",
            st.failed);
    counter(&t, "stepx_processes_cancelled_total",
            "Processes that ended cancelled (with the reason they were "
            "given).",
            st.cancelled);
    counter(&t, "stepx_processes_deadline_total",
            "Processes ended by their deadline (also counted as failed).",
            st.deadlines);
    counter(&t, "stepx_processes_terminated_total",
            "Processes terminated (terminate, stop, a linked failure).",
            st.terminated);
    counter(&t, "stepx_messages_total", "Messages delivered to mailboxes.",
            st.messages);
    counter(&t, "stepx_dead_letters_total",
            "Fire-and-forget yields whose command failed.", st.dead_letters);
    gauge(&t, "stepx_global_queue_depth", "Processes in the global queue.",
          st.global_queue);
    gauge(&t, "stepx_workers_parked", "Workers parked now.", st.parked);
    gauge(&t, "stepx_io_inflight",
          "Commands, deadlines and handles alive "
          "on the libuv loops.",
          st.io_inflight);
    counter(&t, "stepx_io_ops_total", "Commands started on the libuv loops.",
            st.io_ops);
    gauge(&t, "stepx_sleeps", "Sleeps waiting on the workers' timer heaps.",
          st.sleeps);
    gauge(&t, "stepx_process_slots",
          "Process slots in the table, in use or free.", st.slots);
    gauge(&t, "stepx_outcomes", "Finished outcomes held for wait.",
          st.outcomes);
    gauge(&t, "stepx_outcome_bytes",
          "Bytes of results and error messages held for wait "
          "(--keep-outcome-bytes).",
          st.outcome_bytes);
    counter(&t, "stepx_yield_timeouts_total",
            "Yields answered SX_ETIMEDOUT by their timeout.", st.timeouts);

    static const struct {
        const char *name, *help;
        size_t off;
    } per[] = {
        { "stepx_worker_steps_total", "Steps run by the worker.",
          offsetof(sx_worker_stats, steps) },
        { "stepx_worker_steals_total", "Successful steal-half operations.",
          offsetof(sx_worker_stats, steals) },
        { "stepx_worker_stolen_total", "Processes moved by steals.",
          offsetof(sx_worker_stats, stolen) },
        { "stepx_worker_parks_total", "Times the worker parked.",
          offsetof(sx_worker_stats, parks) },
        { "stepx_worker_wakeups_total", "Times a producer woke the worker.",
          offsetof(sx_worker_stats, wakeups) },
        { "stepx_worker_global_pops_total",
          "Processes taken from the global queue.",
          offsetof(sx_worker_stats, global_pops) },
    };
    unsigned nw = st.workers < SX_MAX_WORKERS ? st.workers : SX_MAX_WORKERS;
    for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
        put(&t, "# HELP %s %s\n# TYPE %s counter\n", per[k].name, per[k].help,
            per[k].name);
        for (unsigned i = 0; i < nw; i++) {
            uint64_t v;
            memcpy(&v, (const char *)&ws[i] + per[k].off, sizeof v);
            put(&t, "%s{worker=\"%u\"} %llu\n", per[k].name, i,
                (unsigned long long)v);
        }
    }

    /* The sampled latency histogram: bucket k holds samples under 2^k us. */
    put(&t, "# HELP stepx_command_latency_seconds Command latency, dispatch "
            "to answer (one yield in 64 sampled).\n"
            "# TYPE stepx_command_latency_seconds histogram\n");
    uint64_t cum = 0;
    for (unsigned k = 0; k < SX_LATENCY_BUCKETS; k++) {
        cum += st.latency_us[k];
        if (k + 1 < SX_LATENCY_BUCKETS)
            put(&t, "stepx_command_latency_seconds_bucket{le=\"%.9g\"} %llu\n",
                (double)(1ull << k) / 1e6, (unsigned long long)cum);
    }
    put(&t, "stepx_command_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
        (unsigned long long)cum);
    put(&t, "stepx_command_latency_seconds_sum %.6f\n",
        (double)st.latency_sum_us / 1e6);
    put(&t, "stepx_command_latency_seconds_count %llu\n",
        (unsigned long long)cum);

    if (srv != NULL) {
        sx_server_stats ss;
        sx_server_stats_get(srv, &ss);
        gauge(&t, "stepx_relay_connections", "Open relay connections.",
              ss.connections);
        counter(&t, "stepx_relay_accepted_total",
                "Relay connections "
                "accepted.",
                ss.accepted);
        counter(&t, "stepx_relay_requests_total", "Relay requests answered.",
                ss.requests);
        counter(&t, "stepx_relay_bad_frames_total",
                "Connections closed for a bad frame.", ss.bad_frames);
        counter(&t, "stepx_relay_slow_drops_total",
                "Connections dropped for output past twice max_output.",
                ss.slow_drops);
        counter(&t, "stepx_relay_push_drops_total",
                "Messages to client mailboxes dropped (output over "
                "max_output, or unframeable).",
                ss.push_drops);
        counter(&t, "stepx_relay_pushes_total", "Pushes sent to clients.",
                ss.pushes);
        gauge(&t, "stepx_relay_watches",
              "Processes with an engine watch of the relay's.", ss.watches);
        gauge(&t, "stepx_relay_waits", "Waits and subscribes pending.",
              ss.waits);
        gauge(&t, "stepx_relay_unauthenticated",
              "Connections not yet past hello with the token.",
              ss.unauthenticated);
        counter(&t, "stepx_relay_auth_closed_total",
                "Connections closed before hello with the token (evicted "
                "or past the deadline).",
                ss.auth_closed);
        sx_cluster *cl = sx_server_cluster(srv);
        if (cl != NULL)
            cluster_metrics(&t, cl);
    }
    if (t.oom) {
        free(t.buf);
        return NULL;
    }
    *len = t.len;
    return t.buf;
}

/* ---- serving ---- */

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define REQUEST_MS 2000 /* to read a request head, and for each write */

/* True when req's request line is a GET of path itself, with or without a
 * query ("/metrics?x" is /metrics; "/metricsfoo" and "/metrics/x" are not). */
static bool request_is(const char *req, const char *path)
{
    size_t n = strlen(path);
    if (strncmp(req, "GET ", 4) != 0 || strncmp(req + 4, path, n) != 0)
        return false;
    char next = req[4 + n];
    return next != 0 && strchr(" ?\r\n", next) != NULL;
}

static void serve_one(sx_metrics *m, int fd)
{
    char req[8192];
    size_t got = 0;
    /* A client that does not read cannot hold the thread either. */
    struct timeval tv = { REQUEST_MS / 1000, 0 };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    /* Read the request head: 2 s in all (a client that sends a byte now
     * and then must not hold the one thread, and with it every other
     * scrape and the daemon's stop), and not past a stop. */
    int64_t deadline = now_ms() + REQUEST_MS;
    while (got < sizeof req - 1) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return;
        struct pollfd p[2] = { { fd, POLLIN, 0 },
                               { m->stop_pipe[0], POLLIN, 0 } };
        int n = poll(p, 2, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || p[1].revents != 0)
            return;
        ssize_t r = read(fd, req + got, sizeof req - 1 - got);
        if (r <= 0)
            return;
        got += (size_t)r;
        req[got] = 0;
        if (strstr(req, "\r\n\r\n") != NULL || strstr(req, "\n\n") != NULL)
            break;
    }
    char head[256];
    if (!request_is(req, "/metrics") && !request_is(req, "/")) {
        static const char nf[] = "not found: try /metrics\n";
        int n = snprintf(head, sizeof head,
                         "HTTP/1.1 404 Not Found\r\nContent-Type: "
                         "text/plain\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n\r\n",
                         sizeof nf - 1);
        write_all(fd, head, (size_t)n);
        write_all(fd, nf, sizeof nf - 1);
        return;
    }
    size_t len = 0;
    char *body = sx_metrics_render(m->engine, m->server, &len);
    if (body == NULL) {
        static const char err[] = "HTTP/1.1 500 Internal Server Error\r\n"
                                  "Content-Length: 0\r\nConnection: "
                                  "close\r\n\r\n";
        write_all(fd, err, sizeof err - 1);
        return;
    }
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain; "
                     "version=0.0.4\r\nContent-Length: %zu\r\nConnection: "
                     "close\r\n\r\n",
                     len);
    write_all(fd, head, (size_t)n);
    write_all(fd, body, len);
    free(body);
}

static void *metrics_main(void *arg)
{
    sx_metrics *m = arg;
    for (;;) {
        struct pollfd p[2] = { { m->listen_fd, POLLIN, 0 },
                               { m->stop_pipe[0], POLLIN, 0 } };
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents != 0)
            break;
        if (p[0].revents & POLLIN) {
            int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) {
                serve_one(m, fd);
                close(fd);
            }
        }
    }
    return NULL;
}

/* "HOST:PORT" by the shared rules (process/hostport.h; port 0: the
 * system picks one) into the address to bind. */
static int parse_address(const char *a, struct sockaddr_storage *ss,
                         socklen_t *len)
{
    sx__hostport hp;
    if (sx__hostport_parse(a, strlen(a), SX__HOSTPORT_PORT_ZERO, 0, &hp) !=
        NULL)
        return SX_EINVAL;
    return sx__hostport_bind_addr(&hp, ss, len);
}

int sx_metrics_start(sx_engine *e, sx_server *srv, const char *address,
                     sx_metrics **out)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (e == NULL || address == NULL || out == NULL ||
        parse_address(address, &ss, &sl) != 0)
        return SX_EINVAL;
    sx_metrics *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return SX_ENOMEM;
    m->engine = e;
    m->server = srv;
    int rc;
    m->listen_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (m->listen_fd < 0) {
        rc = -errno;
        goto fail_socket;
    }
    int one = 1;
    setsockopt(m->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(m->listen_fd, (struct sockaddr *)&ss, sl) != 0 ||
        listen(m->listen_fd, 16) != 0) {
        rc = -errno;
        goto fail_bind;
    }
    if (pipe2(m->stop_pipe, O_CLOEXEC) != 0) {
        rc = -errno;
        goto fail_bind;
    }
    if ((rc = pthread_create(&m->thread, NULL, metrics_main, m)) != 0) {
        rc = -rc;
        goto fail_thread;
    }
    *out = m;
    return 0;

fail_thread:
    close(m->stop_pipe[0]);
    close(m->stop_pipe[1]);
fail_bind:
    close(m->listen_fd);
fail_socket:
    free(m);
    return rc;
}

int sx_metrics_port(const sx_metrics *m)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (m == NULL ||
        getsockname(m->listen_fd, (struct sockaddr *)&ss, &sl) != 0)
        return 0;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return 0;
}

void sx_metrics_stop(sx_metrics *m)
{
    if (m == NULL)
        return;
    char c = 0;
    write_all(m->stop_pipe[1], &c, 1);
    pthread_join(m->thread, NULL);
    close(m->stop_pipe[0]);
    close(m->stop_pipe[1]);
    close(m->listen_fd);
    free(m);
}

/* bench/xnode_bench.c — stepx-xnode: the cluster's benchmark rows
 * (docs/CLUSTER.md; bench/cluster.sh runs them). One OS process is one
 * node: an engine joined to a cluster over NATS (sx_cluster_start, which
 * makes the cluster the engine's remote route). Modes:
 *
 *   stepx-xnode serve --nats URL --cluster C --node N
 *       A node with a `pong` process (answers each message to its sender
 *       with the same topic and data) and a `sink` process (counts the
 *       "t" messages of each sender and checks that each sender's
 *       sequence numbers arrive in order 0, 1, 2, ...; answers "report"
 *       with its figures once it has the count the report asks for).
 *       Prints one line, "pong=<pid> sink=<pid>", then runs until SIGTERM
 *       or SIGINT (or stdin's end with --stdin; at most --lifetime S).
 *   stepx-xnode pingpong [--nats URL --cluster C --node N --to PONG]
 *                        --n N [--warmup W]
 *       A pinger process sends a sequence number to the pong, waits for
 *       it back, and times each round trip (CLOCK_MONOTONIC, in the step
 *       that sends and the step that receives); prints p50/p99/mean.
 *       Without --nats, the pong is a process of the same engine (the
 *       one-node row: no NATS hop).
 *   stepx-xnode fanin [--nats URL --cluster C --node N --to SINK]
 *                     --n N [--producers P] [--total T] [--senders S]
 *                     [--go-file F]
 *       P producer processes (default: 1 with --nats, 2 without) send
 *       N/P sequence-numbered messages each to the sink, up to 32 per
 *       step (sx_send, then CONTINUE: the suite's fanin producers,
 *       bench/stepx_bench.c). Then a report asks the sink for its figures
 *       once it has T messages (default N) from S senders (default P):
 *       the figure is the sink's messages per second from its first
 *       message to its last. Several fanin processes (nodes) can feed one
 *       sink: each is told the total T and the senders S of all of them,
 *       and --go-file makes each wait, after printing "ready", until that
 *       file exists, so that they start together. Without --nats, the
 *       sink is a process of the same engine (the one-node row).
 *
 * Every mode but serve prints one result line in the suite's format
 * (bench/stepx_bench.c):
 *   bench=<xpingpong|xfanin> runtime=<stepx-xnode|stepx-1node> n=<n>
 *   secs=<s> ns_per_op=<ns> ops_per_sec=<ops> ok=<1|0> [key=value ...]
 * and exits 0 only when its checks passed: every round trip answered with
 * its own sequence number; every message arrived, in order per sender.
 * Nothing waits for ever: each wait has a deadline (--timeout S, default
 * 30), and alarm() ends a process that overstays its whole budget.
 *
 * Common options: --workers K (default 1: several nodes share this
 * machine's cores), --heartbeat MS (the cluster's period, default 500).
 * Uses the public API only (stepx/stepx.h).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stepx/stepx.h>

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static _Noreturn void die(const char *fmt, const char *what)
{
    fprintf(stderr, "stepx-xnode: ");
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    exit(1);
}

/* ---- options ------------------------------------------------------------ */

typedef struct {
    const char *mode;
    const char *nats, *cluster, *to, *go_file;
    uint32_t node, heartbeat_ms;
    unsigned workers;
    int64_t n, warmup, total, producers, senders;
    int timeout_s, lifetime_s;
    bool use_stdin;
} options;

static options opt = { .cluster = "bench",
                       .node = 1,
                       .heartbeat_ms = 500,
                       .workers = 1,
                       .warmup = -1,
                       .timeout_s = 30,
                       .lifetime_s = 600 };

static void usage(void)
{
    fprintf(stderr,
            "usage: stepx-xnode serve --nats URL [--cluster C] --node N\n"
            "       stepx-xnode pingpong [--nats URL [--cluster C] --node N "
            "--to PONG] --n N [--warmup W]\n"
            "       stepx-xnode fanin [--nats URL [--cluster C] --node N --to "
            "SINK] --n N [--producers P] [--total T] [--senders S] "
            "[--go-file F]\n"
            "       common: [--workers K] [--heartbeat MS] [--timeout S] "
            "[--lifetime S] [--stdin]\n");
    exit(2);
}

static void parse(int argc, char **argv)
{
    if (argc < 2)
        usage();
    opt.mode = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--stdin") == 0) {
            opt.use_stdin = true;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (strcmp(a, "--nats") == 0)
            opt.nats = v;
        else if (strcmp(a, "--cluster") == 0)
            opt.cluster = v;
        else if (strcmp(a, "--to") == 0)
            opt.to = v;
        else if (strcmp(a, "--go-file") == 0)
            opt.go_file = v;
        else if (strcmp(a, "--node") == 0)
            opt.node = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--heartbeat") == 0)
            opt.heartbeat_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--workers") == 0)
            opt.workers = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--n") == 0)
            opt.n = atoll(v);
        else if (strcmp(a, "--warmup") == 0)
            opt.warmup = atoll(v);
        else if (strcmp(a, "--total") == 0)
            opt.total = atoll(v);
        else if (strcmp(a, "--producers") == 0)
            opt.producers = atoll(v);
        else if (strcmp(a, "--senders") == 0)
            opt.senders = atoll(v);
        else if (strcmp(a, "--timeout") == 0)
            opt.timeout_s = atoi(v);
        else if (strcmp(a, "--lifetime") == 0)
            opt.lifetime_s = atoi(v);
        else
            usage();
    }
}

/* ---- pong: answers every message to its sender --------------------------- */

static int none_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

static int pong_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type != SX_EVENT_MESSAGE ||
            strcmp(ev[i].topic, SX_TOPIC_CANCEL) == 0)
            continue;
        int rc = sx_send(out, ev[i].from, ev[i].topic, ev[i].data);
        if (rc != 0)
            return rc;
    }
    sx_idle(out);
    return 0;
}

/* ---- sink: counts each sender's sequence, checks its order -------------- */

#define SINK_SENDERS 64
#define SINK_REPORTS 8

typedef struct {
    int64_t got, bad, first_ns, last_ns;
    int64_t bad_from, bad_want, bad_saw; /* the first message out of order */
    int senders, overflow; /* senders seen; messages from senders past 64 */
    sx_pid from[SINK_SENDERS];
    int64_t next[SINK_SENDERS]; /* the value expected next from from[i] */
    int reports;                /* reports waiting for their count */
    sx_pid report_to[SINK_REPORTS];
    int64_t report_want[SINK_REPORTS];
} sink_state;

static int sink_answer(sink_state *s, sx_step_output *out, sx_pid to)
{
    uint8_t buf[256];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    sx_pack_fmt(&pk, "{s:I, s:I, s:i, s:i, s:I, s:I, s:I, s:I, s:I}", "got",
                s->got, "bad", s->bad, "senders", s->senders, "overflow",
                s->overflow, "first_ns", s->first_ns, "last_ns", s->last_ns,
                "bad_from", s->bad_from, "bad_want", s->bad_want, "bad_saw",
                s->bad_saw);
    return pk.err != 0 ? pk.err
                       : sx_send(out, to, "figures", sx_pack_payload(&pk));
}

static int sink_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    sink_state *s = st;
    bool counted = false;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type != SX_EVENT_MESSAGE)
            continue;
        const char *topic = ev[i].topic;
        if (strcmp(topic, "t") == 0) {
            int k = 0;
            while (k < s->senders && !sx_pid_eq(s->from[k], ev[i].from))
                k++;
            if (k == s->senders) {
                if (k == SINK_SENDERS) {
                    s->overflow++;
                    s->got++;
                    continue;
                }
                s->from[s->senders++] = ev[i].from;
            }
            int64_t v = -1;
            if (sx_payload_get_int(ev[i].data, &v) != 0 || v != s->next[k]) {
                if (s->bad++ == 0) {
                    s->bad_from = k;
                    s->bad_want = s->next[k];
                    s->bad_saw = v;
                }
                if (v >= 0)
                    s->next[k] = v + 1; /* count each gap once */
            } else {
                s->next[k]++;
            }
            s->got++;
            counted = true;
        } else if (strcmp(topic, "report") == 0) {
            int64_t want = 0;
            sx_payload_get_int(ev[i].data, &want);
            if (s->got >= want) {
                int rc = sink_answer(s, out, ev[i].from);
                if (rc != 0)
                    return rc;
            } else if (s->reports < SINK_REPORTS) {
                s->report_to[s->reports] = ev[i].from;
                s->report_want[s->reports++] = want;
            }
        } else if (strcmp(topic, SX_TOPIC_CANCEL) != 0) {
            /* "hello" and anything else: answered as the pong does, so a
             * client can tell that the way there and back works. */
            int rc = sx_send(out, ev[i].from, topic, ev[i].data);
            if (rc != 0)
                return rc;
        }
    }
    if (counted) {
        int64_t t = now_ns();
        if (s->first_ns == 0)
            s->first_ns = t;
        s->last_ns = t;
    }
    for (int r = 0; r < s->reports;) {
        if (s->got >= s->report_want[r]) {
            int rc = sink_answer(s, out, s->report_to[r]);
            if (rc != 0)
                return rc;
            s->report_to[r] = s->report_to[--s->reports];
            s->report_want[r] = s->report_want[s->reports];
        } else {
            r++;
        }
    }
    sx_idle(out);
    return 0;
}

/* ---- src: a fanin producer ------------------------------------------------
 */

#define FANIN_BATCH 32

typedef struct {
    sx_pid to;
    int64_t left, next;
} src_state;

static int src_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    src_state *s = st;
    sx_unpack u;
    if (n != 2)
        return SX_EINVAL;
    sx_unpack_init(&u, in[0]);
    if (sx_unpack_pid(&u, &s->to) != 0 ||
        sx_payload_get_int(in[1], &s->left) != 0)
        return SX_EINVAL;
    return 0;
}

static int src_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    (void)ev, (void)n;
    src_state *s = st;
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    if (s->left == 0) {
        sx_done(out, sx_payload_int(buf, s->next));
        return 0;
    }
    int64_t k = s->left < FANIN_BATCH ? s->left : FANIN_BATCH;
    for (int64_t i = 0; i < k; i++) {
        int rc = sx_send(out, s->to, "t", sx_payload_int(buf, s->next++));
        if (rc != 0)
            return rc;
    }
    s->left -= k;
    sx_continue(out);
    return 0;
}

/* ---- pinger: n + warmup round trips to the pong -------------------------- */

static int64_t *rtt_ns; /* one per measured round trip; read after wait */

typedef struct {
    sx_pid to;
    int64_t n, warmup, i, sent_ns;
    bool started;
} ping_state;

static int ping_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    ping_state *s = st;
    sx_unpack u;
    if (n != 3)
        return SX_EINVAL;
    sx_unpack_init(&u, in[0]);
    if (sx_unpack_pid(&u, &s->to) != 0 ||
        sx_payload_get_int(in[1], &s->n) != 0 ||
        sx_payload_get_int(in[2], &s->warmup) != 0)
        return SX_EINVAL;
    return 0;
}

static int ping_send(ping_state *s, sx_step_output *out)
{
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    s->sent_ns = now_ns();
    return sx_send(out, s->to, "t", sx_payload_int(buf, s->i));
}

static int ping_step(void *st, const sx_event *events, size_t n_events,
                     sx_step_output *out)
{
    ping_state *s = st;
    sx_batch b;
    const sx_event *ev;
    int rc = 0;
    sx_batch_init(&b, events, n_events, &s->started, out);
    for (sx_event_kind k;
         rc == 0 && (k = sx_batch_next(&b, &ev)) != SX_EV_END;) {
        if (k == SX_EV_CANCEL) {
            sx_cancelled_by(out, ev);
        } else if (k == SX_EV_START) {
            rc = ping_send(s, out);
        } else if (k == SX_EV_MESSAGE && strcmp(ev->topic, "t") == 0) {
            int64_t t = now_ns(), v = -1;
            if (sx_payload_get_int(ev->data, &v) != 0 || v != s->i) {
                sx_fail(out, "a round trip came back with another sequence "
                             "number (lost or out of order)");
                continue;
            }
            if (s->i >= s->warmup)
                rtt_ns[s->i - s->warmup] = t - s->sent_ns;
            if (++s->i == s->n + s->warmup) {
                uint8_t buf[SX_PAYLOAD_INT_MAX];
                sx_done(out, sx_payload_int(buf, s->i));
            } else {
                rc = ping_send(s, out);
            }
        }
    }
    if (rc != 0)
        return rc;
    return sx_batch_wait(&b); /* WAIT: for the next answer */
}

static const sx_process_type types[] = {
    { .name = "pong", .init = none_init, .step = pong_step },
    { .name = "sink",
      .state_size = sizeof(sink_state),
      .init = none_init,
      .step = sink_step },
    { .name = "src",
      .state_size = sizeof(src_state),
      .init = src_init,
      .step = src_step },
    { .name = "ping",
      .state_size = sizeof(ping_state),
      .init = ping_init,
      .step = ping_step },
};

/* ---- a node -----------------------------------------------------------------
 */

static sx_engine *engine;
static sx_cluster *cluster;

static void node_start(void)
{
    sx_engine_config cfg = { .workers = opt.workers,
                             .node = opt.nats != NULL ? opt.node : 0 };
    if (sx_engine_new(&cfg, &engine) != 0)
        die("%s", "cannot create an engine");
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (sx_engine_register(engine, &types[i]) != 0)
            die("cannot register type %s", types[i].name);
    if (opt.nats != NULL) {
        char err[256];
        sx_cluster_config cc = { .url = opt.nats,
                                 .name = opt.cluster,
                                 .node = opt.node,
                                 .heartbeat_ms = opt.heartbeat_ms };
        if (sx_cluster_start(engine, &cc, &cluster, err, sizeof err) != 0)
            die("%s", err);
    }
    if (sx_engine_start(engine) != 0)
        die("%s", "cannot start the engine");
}

static void node_stop(void)
{
    sx_engine_stop(engine, 1000);
    /* The cluster after the engine: no step sends through it any more. */
    sx_cluster_stop(cluster);
    sx_engine_free(engine);
}

/* The workers the engine runs (--workers 0: one per CPU). */
static unsigned workers_now(void)
{
    sx_engine_config c;
    return sx_engine_config_get(engine, &c) == 0 ? c.workers : 0;
}

static sx_pid submit(const char *type, const sx_payload *in, size_t n)
{
    sx_pid p;
    int rc = sx_engine_submit(engine, type, "run", in, n, &p);
    if (rc != 0)
        die("cannot submit: %s", sx_strerror(rc));
    return p;
}

static sx_payload pid_payload(uint8_t buf[64], sx_pid p)
{
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, 64);
    sx_pack_pid(&pk, p);
    return sx_pack_payload(&pk);
}

/* ---- the outside end: a mailbox that keeps the last answer -------------- */

/* The mailbox's fn (a worker, or nats.c's thread for an answer from
 * another node) keeps one answer: answered goes 0 (empty) -> 2 (being
 * written; a compare-exchange, so that two answers at once never write
 * together) -> 1 (full; a release store after the copy). The main thread
 * reads answered with acquire before it reads the copy, so it sees the
 * whole copy, and empties it again (1 -> 0) to drop a stale answer. */
static _Atomic int answered;
/* The topic the main thread waits for now ("hello", "figures"): answers
 * with another (a late "hello" of a retry) are dropped. The main thread
 * stores it with release before it sends; fn loads it with acquire, so
 * it reads the whole string. */
static _Atomic(const char *) wanted;
static char answer_topic[64];
static uint8_t answer_data[512];
static size_t answer_len;
static sx_pid inbox;

static void on_answer(void *user, const sx_message *m)
{
    (void)user;
    /* acquire: pairs with ask's release store of the string's pointer. */
    const char *want = atomic_load_explicit(&wanted, memory_order_acquire);
    int empty = 0;
    /* acquire on success: the main thread's reads of the previous answer
     * (before its release store of 0) are done before this write. */
    if (want == NULL || strcmp(m->topic, want) != 0 ||
        !atomic_compare_exchange_strong_explicit(
            &answered, &empty, 2, memory_order_acquire, memory_order_relaxed))
        return; /* not what is waited for, or one is kept already */
    snprintf(answer_topic, sizeof answer_topic, "%s", m->topic);
    answer_len =
        m->data.len < sizeof answer_data ? m->data.len : sizeof answer_data;
    memcpy(answer_data, m->data.data, answer_len);
    /* release: the copy above is complete before the flag says so. */
    atomic_store_explicit(&answered, 1, memory_order_release);
}

/* Sends topic/data to `to` from the inbox every retry_ms (0: once) until
 * an answer with topic want comes or deadline_ns passes; true if it
 * came (answer_data holds it). */
static bool ask(sx_pid to, const char *topic, sx_payload data, const char *want,
                int retry_ms, int64_t deadline_ns)
{
    int64_t next = 0;
    /* release: fn reads the string want points to after its acquire
     * load. */
    atomic_store_explicit(&wanted, want, memory_order_release);
    for (;;) {
        /* acquire: pairs with on_answer's release (answer_* are read). */
        if (atomic_load_explicit(&answered, memory_order_acquire) == 1) {
            if (strcmp(answer_topic, want) == 0)
                return true;
            /* A stale answer (its fn read the earlier want): emptied;
             * release: the read above is done before fn writes again. */
            atomic_store_explicit(&answered, 0, memory_order_release);
        }
        int64_t t = now_ns();
        if (t > deadline_ns)
            return false;
        if (t >= next && (next == 0 || retry_ms > 0)) {
            /* SX_ENOCONNECTION until the other node is a member here:
             * tried again at the next retry. */
            sx_engine_send(engine, inbox, to, topic, data);
            next = t + (int64_t)(retry_ms > 0 ? retry_ms : 1) * 1000000;
        }
        sleep_ms(1);
    }
}

/* Waits until the way to `to` and back works: a "hello" answered. */
static void handshake(sx_pid to)
{
    if (sx_engine_mailbox_new(engine, on_answer, NULL, &inbox) != 0)
        die("%s", "cannot create a mailbox");
    if (!ask(to, "hello", (sx_payload){ NULL, 0 }, "hello", 100,
             now_ns() + (int64_t)opt.timeout_s * 1000000000))
        die("no answer to hello from %s (is its node up and in the same "
            "cluster?)",
            opt.to != NULL ? opt.to : "the local process");
    /* release: handshake's reads of the answer are done (as in ask). */
    atomic_store_explicit(&answered, 0, memory_order_release);
}

static sx_pid target(void)
{
    sx_pid p = SX_PID_NONE;
    if (opt.to == NULL || sx_pid_parse(opt.to, &p) != 0)
        die("--to wants a PID such as {1@1|2}, not '%s'",
            opt.to != NULL ? opt.to : "");
    return p;
}

static const char *runtime_name(void)
{
    return opt.nats != NULL ? "stepx-xnode" : "stepx-1node";
}

/* ---- serve
 * -------------------------------------------------------------------- */

static void *stdin_reader(void *arg)
{
    (void)arg;
    char buf[256];
    while (fread(buf, 1, sizeof buf, stdin) > 0)
        ;
    kill(getpid(), SIGTERM);
    return NULL;
}

static int serve(sigset_t *stop)
{
    if (opt.nats == NULL)
        die("%s", "serve wants --nats URL");
    node_start();
    sx_pid pong = submit("pong", NULL, 0), sink = submit("sink", NULL, 0);
    char a[SX_PID_TEXT_MAX], b[SX_PID_TEXT_MAX];
    sx_pid_format(pong, a, sizeof a);
    sx_pid_format(sink, b, sizeof b);
    printf("pong=%s sink=%s\n", a, b);
    fflush(stdout);
    pthread_t t;
    if (opt.use_stdin)
        pthread_create(&t, NULL, stdin_reader, NULL);
    int sig;
    sigwait(stop, &sig);
    sx_cluster_stats cs;
    sx_cluster_stats_get(cluster, &cs);
    fprintf(stderr,
            "stepx-xnode: node %u: messages in %llu out %llu undelivered "
            "%llu\n",
            opt.node, (unsigned long long)cs.messages_in,
            (unsigned long long)cs.messages_out,
            (unsigned long long)cs.messages_undelivered);
    node_stop();
    return 0;
}

/* ---- pingpong
 * ------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double quantile_us(const int64_t *v, int64_t n, double q)
{
    int64_t i = (int64_t)(q * (double)(n - 1) + 0.5);
    return (double)v[i] / 1e3;
}

static int pingpong(void)
{
    int64_t n = opt.n, w = opt.warmup >= 0 ? opt.warmup : n / 10;
    rtt_ns = calloc((size_t)n, sizeof *rtt_ns);
    if (rtt_ns == NULL)
        die("%s", "out of memory");
    node_start();
    sx_pid pong = opt.nats != NULL ? target() : submit("pong", NULL, 0);
    handshake(pong);
    uint8_t pb[64], nb[SX_PAYLOAD_INT_MAX], wb[SX_PAYLOAD_INT_MAX];
    sx_payload in[3] = { pid_payload(pb, pong), sx_payload_int(nb, n),
                         sx_payload_int(wb, w) };
    int64_t t0 = now_ns();
    sx_pid pinger = submit("ping", in, 3);
    sx_result r;
    int rc = sx_engine_wait(engine, pinger, (int64_t)opt.timeout_s * 1000, &r);
    double secs = (double)(now_ns() - t0) / 1e9;
    int ok = rc == 0 && r.error == 0;
    if (rc != 0) {
        fprintf(stderr,
                "stepx-xnode: pingpong: no outcome within %d s (%s): a "
                "round trip was lost or never answered\n",
                opt.timeout_s, sx_strerror(rc));
        /* The pinger still waits: the process ends without a clean stop
         * (the engine would cancel it; the cluster says goodbye). */
    } else if (r.error != 0) {
        fprintf(stderr, "stepx-xnode: pingpong: %s\n",
                r.error_msg != NULL ? r.error_msg : sx_strerror(r.error));
    }
    if (rc == 0)
        sx_result_free(&r);
    double p50 = 0, p99 = 0, mean = 0, max = 0;
    if (ok) {
        int64_t sum = 0;
        for (int64_t i = 0; i < n; i++)
            sum += rtt_ns[i];
        qsort(rtt_ns, (size_t)n, sizeof *rtt_ns, cmp_i64);
        p50 = quantile_us(rtt_ns, n, 0.50);
        p99 = quantile_us(rtt_ns, n, 0.99);
        max = (double)rtt_ns[n - 1] / 1e3;
        mean = (double)sum / (double)n / 1e3;
    }
    printf("bench=xpingpong runtime=%s n=%lld secs=%.6f ns_per_op=%.1f "
           "ops_per_sec=%.0f ok=%d p50_us=%.2f p99_us=%.2f mean_us=%.2f "
           "max_us=%.1f warmup=%lld workers=%u\n",
           runtime_name(), (long long)n, secs, mean * 1e3,
           mean > 0 ? 1e6 / mean : 0.0, ok, p50, p99, mean, max, (long long)w,
           workers_now());
    fflush(stdout);
    if (rc != 0)
        _exit(1);
    node_stop();
    free(rtt_ns);
    return ok ? 0 : 1;
}

/* ---- fanin
 * ---------------------------------------------------------------------- */

static int64_t figure_of(const char *key)
{
    sx_payload p = { answer_data, answer_len };
    return sx_get_int(p, key, -1);
}

static int fanin(void)
{
    bool local = opt.nats == NULL;
    int64_t np = opt.producers > 0 ? opt.producers : local ? 2 : 1;
    int64_t n = opt.n, total = opt.total > 0 ? opt.total : n;
    int64_t senders = opt.senders > 0 ? opt.senders : np;
    node_start();
    sx_pid sink = local ? submit("sink", NULL, 0) : target();
    handshake(sink);
    if (opt.go_file != NULL) {
        printf("ready\n");
        fflush(stdout);
        int64_t deadline = now_ns() + (int64_t)opt.timeout_s * 1000000000;
        while (access(opt.go_file, F_OK) != 0) {
            if (now_ns() > deadline)
                die("%s never appeared", opt.go_file);
            sleep_ms(1);
        }
    }
    int64_t t0 = now_ns();
    sx_pid src[64];
    if (np > 64)
        die("%s", "at most 64 producers");
    for (int64_t i = 0; i < np; i++) {
        uint8_t pb[64], nb[SX_PAYLOAD_INT_MAX];
        int64_t share = n / np + (i < n % np ? 1 : 0);
        sx_payload in[2] = { pid_payload(pb, sink), sx_payload_int(nb, share) };
        src[i] = submit("src", in, 2);
    }
    int64_t sent = 0;
    for (int64_t i = 0; i < np; i++) {
        sx_result r;
        int64_t v = 0;
        int rc =
            sx_engine_wait(engine, src[i], (int64_t)opt.timeout_s * 1000, &r);
        if (rc != 0 || r.error != 0 || sx_payload_get_int(r.value, &v) != 0)
            die("a producer did not finish: %s", rc != 0 ? sx_strerror(rc)
                                                 : r.error_msg != NULL
                                                     ? r.error_msg
                                                     : "bad result");
        sx_result_free(&r);
        sent += v;
    }
    double send_secs = (double)(now_ns() - t0) / 1e9;
    uint8_t tb[SX_PAYLOAD_INT_MAX];
    int64_t deadline = now_ns() + (int64_t)opt.timeout_s * 1000000000;
    bool all =
        ask(sink, "report", sx_payload_int(tb, total), "figures", 0, deadline);
    if (!all) {
        /* What did arrive: a report that asks for nothing is answered at
         * once. */
        /* release: as in ask, the slot is emptied for the next answer. */
        atomic_store_explicit(&answered, 0, memory_order_release);
        if (!ask(sink, "report", sx_payload_int(tb, 0), "figures", 0,
                 now_ns() + 5000000000))
            die("%s", "the sink does not answer a report");
    }
    int64_t got = figure_of("got"), bad = figure_of("bad");
    int64_t seen = figure_of("senders"), first = figure_of("first_ns");
    int64_t last = figure_of("last_ns");
    double secs = last > first ? (double)(last - first) / 1e9 : 0.0;
    int ok = all && got == total && bad == 0 && seen == senders &&
             figure_of("overflow") == 0 && sent == n;
    if (!all || got != total)
        fprintf(stderr,
                "stepx-xnode: fanin: %lld of %lld messages arrived within "
                "%d s (lost)\n",
                (long long)got, (long long)total, opt.timeout_s);
    if (bad != 0)
        fprintf(stderr,
                "stepx-xnode: fanin: %lld messages out of sequence, after "
                "a gap or out of order (first: sender %lld wanted %lld, saw "
                "%lld)\n",
                (long long)bad, (long long)figure_of("bad_from"),
                (long long)figure_of("bad_want"),
                (long long)figure_of("bad_saw"));
    if (seen != senders)
        fprintf(stderr, "stepx-xnode: fanin: %lld senders, want %lld\n",
                (long long)seen, (long long)senders);
    sx_engine_stats st;
    sx_engine_stats_get(engine, &st, NULL, 0);
    printf("bench=xfanin runtime=%s n=%lld secs=%.6f ns_per_op=%.1f "
           "ops_per_sec=%.0f ok=%d got=%lld bad=%lld senders=%lld "
           "producers=%lld send_secs=%.6f dead_letters=%llu workers=%u\n",
           runtime_name(), (long long)total, secs,
           got > 0 ? secs * 1e9 / (double)got : 0.0,
           secs > 0 ? (double)got / secs : 0.0, ok, (long long)got,
           (long long)bad, (long long)seen, (long long)np, send_secs,
           (unsigned long long)st.dead_letters, workers_now());
    fflush(stdout);
    node_stop();
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    parse(argc, argv);
    /* The whole budget: nothing outlives it, whatever hangs. */
    alarm((unsigned)(opt.lifetime_s > 0 ? opt.lifetime_s : 600));
    /* SIGTERM and SIGINT are taken by serve's sigwait: blocked before any
     * thread starts, so that every thread inherits the mask. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    if (strcmp(opt.mode, "serve") == 0) {
        pthread_sigmask(SIG_BLOCK, &stop, NULL);
        return serve(&stop);
    }
    if (opt.n <= 0)
        usage();
    if ((opt.nats != NULL) != (opt.to != NULL))
        die("%s", "--nats and --to go together (without both: one node)");
    if (strcmp(opt.mode, "pingpong") == 0)
        return pingpong();
    if (strcmp(opt.mode, "fanin") == 0)
        return fanin();
    usage();
    return 2;
}

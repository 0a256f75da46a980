/* bench/peers/nats/reqrep.c — stepx-nats-peer: plain NATS between OS
 * processes on this machine, the reference for the cluster's rows
 * (bench/cluster.sh). nats.c only, no stepx. Modes:
 *
 *   stepx-nats-peer responder --nats URL --subject S
 *       Subscribes to S and answers each request to its reply subject
 *       with the same bytes. Prints "ready" once subscribed, runs until
 *       SIGTERM or SIGINT.
 *   stepx-nats-peer requester --nats URL --subject S --n N [--warmup W]
 *       natsConnection_Request in a loop (8-byte sequence number), times
 *       each request to its reply (CLOCK_MONOTONIC), checks that each
 *       reply carries its request's number; prints p50/p99/mean.
 *   stepx-nats-peer subscriber --nats URL --subject S --total T
 *                              --senders K
 *       Counts the messages on S (each: a sender number and a sequence
 *       number), checks that each sender's arrive in order 0, 1, 2, ...;
 *       prints "ready" once subscribed, and the messages per second from
 *       the first message to the last once T have come.
 *   stepx-nats-peer publisher --nats URL --subject S --n N --sender I
 *                             [--go-file F]
 *       Publishes N messages on S as fast as natsConnection_Publish takes
 *       them, then flushes. With --go-file: prints "ready" and waits for
 *       the file to exist first (so that two publishers start together).
 *
 * Every connection sets natsOptions_SetSendAsap unless --buffered is
 * given: a publish is written to the socket at once instead of waiting
 * for nats.c's flusher thread, which batches writes for up to about a
 * millisecond. That is the low-latency way to use nats.c (the round-trip
 * reference); --buffered measures nats.c's defaults. The subscriber's
 * pending limits are lifted (natsSubscription_SetPendingLimits -1, -1),
 * so that it never drops a message as a slow consumer: the figure is
 * what the transport carries. Result lines are the suite's
 * (bench/stepx_bench.c), with runtime=nats; a failed check prints ok=0
 * and exits 1. alarm() bounds every run (--timeout S, default 60).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nats/nats.h>

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

static const char *mode, *url, *subject = "bench.reqrep", *go_file;
static int64_t n, warmup = -1, total, senders = 1, sender;
static int timeout_s = 60;
static bool buffered;

static void usage(void)
{
    fprintf(stderr,
            "usage: stepx-nats-peer responder|requester|subscriber|publisher "
            "--nats URL [--subject S] [--n N] [--warmup W] [--total T] "
            "[--senders K] [--sender I] [--go-file F] [--timeout S] "
            "[--buffered]\n");
    exit(2);
}

static void check(natsStatus s, const char *what)
{
    if (s != NATS_OK) {
        fprintf(stderr, "stepx-nats-peer: %s: %s\n", what,
                natsStatus_GetText(s));
        exit(1);
    }
}

static natsConnection *connect_to(void)
{
    natsOptions *o;
    natsConnection *nc;
    check(natsOptions_Create(&o), "options");
    check(natsOptions_SetURL(o, url), "URL");
    check(natsOptions_SetSendAsap(o, !buffered), "send asap");
    check(natsConnection_Connect(&nc, o), "connect");
    natsOptions_Destroy(o);
    return nc;
}

static void put64(uint8_t *p, int64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

static int64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return (int64_t)v;
}

/* ---- responder ------------------------------------------------------------
 */

static void on_request(natsConnection *nc, natsSubscription *sub, natsMsg *m,
                       void *closure)
{
    (void)sub, (void)closure;
    const char *reply = natsMsg_GetReply(m);
    if (reply != NULL)
        natsConnection_Publish(nc, reply, natsMsg_GetData(m),
                               natsMsg_GetDataLength(m));
    natsMsg_Destroy(m);
}

static int responder(void)
{
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    /* Blocked before nats.c starts its threads, which inherit the mask:
     * only sigwait takes them. */
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    natsConnection *nc = connect_to();
    natsSubscription *sub;
    check(natsConnection_Subscribe(&sub, nc, subject, on_request, NULL),
          "subscribe");
    check(natsConnection_Flush(nc), "flush");
    printf("ready\n");
    fflush(stdout);
    int sig;
    sigwait(&stop, &sig);
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    return 0;
}

/* ---- requester ------------------------------------------------------------
 */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int requester(void)
{
    int64_t w = warmup >= 0 ? warmup : n / 10;
    int64_t *lat = calloc((size_t)n, sizeof *lat);
    if (lat == NULL)
        return 1;
    natsConnection *nc = connect_to();
    int ok = 1;
    int64_t t0 = now_ns();
    for (int64_t i = 0; i < n + w && ok; i++) {
        uint8_t b[8];
        put64(b, i);
        natsMsg *reply = NULL;
        int64_t t = now_ns();
        natsStatus s = natsConnection_Request(&reply, nc, subject, b, 8, 5000);
        int64_t d = now_ns() - t;
        if (s != NATS_OK) {
            fprintf(stderr, "stepx-nats-peer: request %lld: %s\n", (long long)i,
                    natsStatus_GetText(s));
            ok = 0;
        } else if (natsMsg_GetDataLength(reply) != 8 ||
                   get64((const uint8_t *)natsMsg_GetData(reply)) != i) {
            fprintf(stderr,
                    "stepx-nats-peer: reply %lld carries another "
                    "number\n",
                    (long long)i);
            ok = 0;
        } else if (i >= w) {
            lat[i - w] = d;
        }
        natsMsg_Destroy(reply);
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    double p50 = 0, p99 = 0, mean = 0, max = 0;
    if (ok) {
        int64_t sum = 0;
        for (int64_t i = 0; i < n; i++)
            sum += lat[i];
        qsort(lat, (size_t)n, sizeof *lat, cmp_i64);
        p50 = (double)lat[(int64_t)(0.50 * (double)(n - 1) + 0.5)] / 1e3;
        p99 = (double)lat[(int64_t)(0.99 * (double)(n - 1) + 0.5)] / 1e3;
        max = (double)lat[n - 1] / 1e3;
        mean = (double)sum / (double)n / 1e3;
    }
    printf("bench=xpingpong runtime=nats n=%lld secs=%.6f ns_per_op=%.1f "
           "ops_per_sec=%.0f ok=%d p50_us=%.2f p99_us=%.2f mean_us=%.2f "
           "max_us=%.1f warmup=%lld send_asap=%d\n",
           (long long)n, secs, mean * 1e3, mean > 0 ? 1e6 / mean : 0.0, ok, p50,
           p99, mean, max, (long long)w, !buffered);
    natsConnection_Destroy(nc);
    free(lat);
    return ok ? 0 : 1;
}

/* ---- subscriber -----------------------------------------------------------
 */

#define MAX_SENDERS 64

/* Only the subscription's delivery thread (one, nats.c's per
 * subscription) writes these; the main thread reads them after done. */
static int64_t got, bad, first_ns, last_ns, next_seq[MAX_SENDERS];
static bool seen[MAX_SENDERS];
/* Set with release by the delivery thread once total have come; the main
 * thread loads it with acquire before it reads the figures above. */
static _Atomic int done;

static void on_message(natsConnection *nc, natsSubscription *sub, natsMsg *m,
                       void *closure)
{
    (void)nc, (void)sub, (void)closure;
    int64_t t = now_ns();
    const uint8_t *p = (const uint8_t *)natsMsg_GetData(m);
    if (natsMsg_GetDataLength(m) != 16) {
        bad++;
    } else {
        int64_t who = get64(p), seq = get64(p + 8);
        if (who < 0 || who >= MAX_SENDERS || seq != next_seq[who]) {
            bad++;
            if (who >= 0 && who < MAX_SENDERS && seq >= 0)
                next_seq[who] = seq + 1;
        } else {
            seen[who] = true;
            next_seq[who]++;
        }
    }
    if (got++ == 0)
        first_ns = t;
    last_ns = t;
    natsMsg_Destroy(m);
    if (got == total)
        /* release: the figures above are written before done says so. */
        atomic_store_explicit(&done, 1, memory_order_release);
}

static int subscriber(void)
{
    natsConnection *nc = connect_to();
    natsSubscription *sub;
    check(natsConnection_Subscribe(&sub, nc, subject, on_message, NULL),
          "subscribe");
    check(natsSubscription_SetPendingLimits(sub, -1, -1), "pending limits");
    check(natsConnection_Flush(nc), "flush");
    printf("ready\n");
    fflush(stdout);
    int64_t deadline = now_ns() + (int64_t)timeout_s * 1000000000;
    /* acquire: pairs with on_message's release. */
    while (!atomic_load_explicit(&done, memory_order_acquire) &&
           now_ns() < deadline)
        sleep_ms(1);
    int all = atomic_load_explicit(&done, memory_order_acquire);
    int64_t dropped = 0;
    natsSubscription_GetDropped(sub, &dropped);
    natsSubscription_Unsubscribe(sub);
    /* Unsubscribe leaves the delivery thread free to finish a call in
     * progress; the figures are read once done said so (all), else
     * reported as they stand, to say what arrived. */
    int k = 0;
    for (int i = 0; i < MAX_SENDERS; i++)
        k += seen[i];
    double secs = last_ns > first_ns ? (double)(last_ns - first_ns) / 1e9 : 0;
    int ok = all && bad == 0 && k == senders && dropped == 0;
    if (!all)
        fprintf(stderr,
                "stepx-nats-peer: %lld of %lld messages within %d s "
                "(dropped %lld)\n",
                (long long)got, (long long)total, timeout_s,
                (long long)dropped);
    printf("bench=xfanin runtime=nats n=%lld secs=%.6f ns_per_op=%.1f "
           "ops_per_sec=%.0f ok=%d got=%lld bad=%lld senders=%d "
           "dropped=%lld send_asap=%d\n",
           (long long)total, secs, got > 0 ? secs * 1e9 / (double)got : 0.0,
           secs > 0 ? (double)got / secs : 0.0, ok, (long long)got,
           (long long)bad, k, (long long)dropped, !buffered);
    fflush(stdout);
    if (!all)
        _exit(1); /* the delivery thread may still be in on_message */
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    return ok ? 0 : 1;
}

/* ---- publisher ------------------------------------------------------------
 */

static int publisher(void)
{
    natsConnection *nc = connect_to();
    if (go_file != NULL) {
        printf("ready\n");
        fflush(stdout);
        int64_t deadline = now_ns() + (int64_t)timeout_s * 1000000000;
        while (access(go_file, F_OK) != 0) {
            if (now_ns() > deadline) {
                fprintf(stderr, "stepx-nats-peer: %s never appeared\n",
                        go_file);
                return 1;
            }
            sleep_ms(1);
        }
    }
    int64_t t0 = now_ns();
    uint8_t b[16];
    put64(b, sender);
    for (int64_t i = 0; i < n; i++) {
        put64(b + 8, i);
        check(natsConnection_Publish(nc, subject, b, 16), "publish");
    }
    check(natsConnection_FlushTimeout(nc, (int64_t)timeout_s * 1000), "flush");
    fprintf(stderr, "stepx-nats-peer: publisher %lld: %lld in %.3f s\n",
            (long long)sender, (long long)n, (double)(now_ns() - t0) / 1e9);
    natsConnection_Destroy(nc);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    mode = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--buffered") == 0) {
            buffered = true;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (strcmp(a, "--nats") == 0)
            url = v;
        else if (strcmp(a, "--subject") == 0)
            subject = v;
        else if (strcmp(a, "--go-file") == 0)
            go_file = v;
        else if (strcmp(a, "--n") == 0)
            n = atoll(v);
        else if (strcmp(a, "--warmup") == 0)
            warmup = atoll(v);
        else if (strcmp(a, "--total") == 0)
            total = atoll(v);
        else if (strcmp(a, "--senders") == 0)
            senders = atoll(v);
        else if (strcmp(a, "--sender") == 0)
            sender = atoll(v);
        else if (strcmp(a, "--timeout") == 0)
            timeout_s = atoi(v);
        else
            usage();
    }
    if (url == NULL)
        usage();
    /* Nothing outlives its budget, whatever hangs. */
    alarm((unsigned)timeout_s + 30);
    if (strcmp(mode, "responder") == 0)
        return responder();
    if (strcmp(mode, "requester") == 0 && n > 0)
        return requester();
    if (strcmp(mode, "subscriber") == 0 && total > 0)
        return subscriber();
    if (strcmp(mode, "publisher") == 0 && n > 0)
        return publisher();
    usage();
    return 2;
}

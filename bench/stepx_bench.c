/* bench/stepx_bench.c — stepx-bench: the stepx side of the benchmark suite
 * (docs/BENCHMARKS.md) and of the cost curves (bench/curves.sh). One
 * workload per run:
 *
 *   stepx-bench <name> <n> [--workers K] [--window W] [--idle K]
 *               [--reps R]
 *
 * prints one line
 *   bench=<name> runtime=stepx n=<n> secs=<s> ns_per_op=<ns>
 *   ops_per_sec=<ops> ok=<1|0> [key=value ...]
 * and nothing else on stdout. ok=1 only when the workload checked its own
 * result. Workloads: yield, ring, pingpong, skynet, fanin, spawnidle,
 * submit, wake, idle, timers, relay, relay-durable (relay on an engine
 * with a state store), store (the durable store alone), recover (a start
 * on a state store of n stored jobs), checkpoint (the time a checkpoint
 * adds to a step of a checkpointed job), idlemsg (round trips to idle
 * processes picked at random among the --idle K).
 *
 * --idle K: K processes submitted before the workload, each IDLE (waiting
 * for a message) through it, ended by sx_engine_stop after it; not part
 * of the timed figure. The line then also says idle=K, the time they took
 * to spawn, the resident set after, and that all K were still live after
 * the workload (ok=0 otherwise). The engine's default configuration
 * holds them: max_slots 0 puts no cap below the process table's largest
 * size (~4.3 billion slots), and 10^7 idle processes take ~1.4 GB. Not
 * with the workloads that wait until no process is alive (spawnidle,
 * submit, timers), count every live one (idle) or run engines of their
 * own (store, recover).
 *
 * --reps R: pingpong, fanin and idlemsg run R times in the one engine, and
 * the line gives the median repetition (repeated).
 *
 * Each workload has the same program shape as its peers in bench/peers/
 * (go, erlang, caf); bench/run.sh runs them side by side and writes
 * docs/BENCHMARKS.md; bench/curves.sh runs some at sizes 10^3 .. 10^7.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <stepx/stepx.h>

#include "cmd/types/types.h" /* the shipped types: relay runs counter(1) */
/* store drives the durable store alone, through the engine's internal
 * API: not in stepx-bench-shared (bench/meson.build), which links the
 * shared library and so only the public API, as a program linking
 * stepx.pc does. */
#ifndef SX_BENCH_SHARED
#include "engine/store/store.h"
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(int64_t ns)
{
    struct timespec ts = { (time_t)(ns / 1000000000), (long)(ns % 1000000000) };
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static const sx_payload nil = { NULL, 0 };
static int64_t arg_n;

/* A message from a step: sx_send, the direct send (no argument packing, no
 * completer, no answer; delivered even when the step ends DONE). */
static int send_int(sx_step_output *out, sx_pid to, int64_t v)
{
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    return sx_send(out, to, "t", sx_payload_int(buf, v));
}

static int done_int(sx_step_output *out, int64_t v)
{
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(buf, v));
    return 0;
}

/* ---- yield: one process, n yields completed at once by a handler ---- */

static int complete_now(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                        sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag, (void)args;
    sx_complete(done, nil, 0, NULL);
    return 0;
}

typedef struct {
    int64_t left, got;
} yield_state;

static int yield_init(void *st, const sx_init_ctx *c, const char *m,
                      const sx_payload *in, size_t n)
{
    (void)c, (void)m, (void)in, (void)n;
    ((yield_state *)st)->left = arg_n;
    return 0;
}

static int yield_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    yield_state *s = st;
    for (size_t i = 0; i < n; i++)
        if (ev[i].type == SX_EVENT_YIELD_COMPLETE && ev[i].error == 0)
            s->got++;
    if (s->left-- > 0)
        return sx_yield(out, 256, 7, nil);
    return done_int(out, s->got);
}

/* ---- ring / pingpong: a token passed between processes ----
 *
 * The token starts at n-1 at process 0; each hop forwards t-1. Whoever
 * sees 0 sends a stop (-1) on and finishes; whoever sees the stop forwards
 * it and finishes (the last stop reaches a finished process and counts as
 * a dead letter). Each process finishes with how many messages it saw:
 * n tokens + m-1 stops in all. The same program as the peers'. */

typedef struct {
    sx_pid next;
    int64_t seen;
} ring_state;

static int ring_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

static int ring_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    ring_state *s = st;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type != SX_EVENT_MESSAGE)
            continue;
        if (ev[i].topic[0] == 'n') { /* "next": who to forward to */
            sx_unpack u;
            sx_unpack_init(&u, ev[i].data);
            if (sx_unpack_pid(&u, &s->next) != 0)
                return SX_EINVAL;
            continue;
        }
        int64_t t = 0;
        if (sx_payload_get_int(ev[i].data, &t) != 0)
            return SX_EINVAL;
        s->seen++;
        if (t <= 0) {
            /* The end: pass the stop on and finish (sx_send's message
             * goes even though the step ends DONE). A batch never holds
             * more after this: the ring has one token. */
            int rc = send_int(out, s->next, -1);
            return rc != 0 ? rc : done_int(out, s->seen);
        }
        int rc = send_int(out, s->next, t - 1);
        if (rc != 0)
            return rc;
    }
    sx_idle(out);
    return 0;
}

/* ---- skynet: a 10-ary tree of spawn-and-wait ---- */

typedef struct {
    int64_t num, size, sum;
    int got;
} sky_state;

static int sky_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    sky_state *s = st;
    if (n != 2 || sx_payload_get_int(in[0], &s->num) != 0 ||
        sx_payload_get_int(in[1], &s->size) != 0)
        return SX_EINVAL;
    return 0;
}

static int sky_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    sky_state *s = st;
    if (s->size == 1)
        return done_int(out, s->num);
    if (s->got == 0 && n == 0) {
        int64_t sub = s->size / 10;
        for (int i = 0; i < 10; i++) {
            uint8_t buf[64];
            sx_pack pk;
            sx_pack_init_fixed(&pk, buf, sizeof(buf));
            sx_pack_array(&pk, 3);
            sx_pack_str(&pk, "sky");
            sx_pack_str(&pk, "run");
            sx_pack_array(&pk, 2);
            sx_pack_int(&pk, s->num + i * sub);
            sx_pack_int(&pk, sub);
            int rc = sx_yield(out, SX_CMD_SPAWN_WAIT, (uint64_t)i,
                              sx_pack_payload(&pk));
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t v = 0;
        if (ev[i].error != 0 || sx_payload_get_int(ev[i].data, &v) != 0)
            return SX_EFAILED;
        s->sum += v;
        s->got++;
    }
    if (s->got == 10)
        return done_int(out, s->sum);
    sx_wait(out);
    return 0;
}

/* ---- spawnidle / submit: processes that wait for one message, or run
 * one step ---- */

static int one_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

/* An idle process: IDLE until a message. idlemsg's "p" (a ping) it
 * answers and stays IDLE; any other message (spawnidle's "go", the
 * cancel of sx_engine_stop) ends it. */
static int idle_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type != SX_EVENT_MESSAGE)
            continue;
        if (strcmp(ev[i].topic, "p") != 0)
            return done_int(out, 1);
        int rc = send_int(out, ev[i].from, 1);
        if (rc != 0)
            return rc;
    }
    sx_idle(out);
    return 0;
}

static int once_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    sx_done(out, nil);
    return 0;
}

/* ---- --idle K and idlemsg: messages to processes among K idle ones ----
 *
 * With --idle K the driver submits K idle processes before the workload
 * and waits until each has run its first step (and gone IDLE); they sit
 * through the timed part and are ended by sx_engine_stop's cancel after
 * it. idlemsg's pinger sends pings one at a time, each to one of the K,
 * and waits for its answer before the next: first n round trips to idle
 * processes picked at random (a fixed xorshift sequence; the figure),
 * then n to them in submit order (a control: the same work, with the
 * slots and the PIDs read in address order, so that the caches and the
 * TLB serve them as K grows). */
static sx_pid *idle_pids; /* the K idle processes, in submit order */
static int64_t idle_k;
/* The pinger's clocks at its first send, the n-th answer and the 2n-th:
 * the time, and the CPU time of the whole process (every thread). Read by
 * the driver after sx_engine_wait answers, which orders it after the
 * pinger's last step. */
static int64_t ping_ns[3], ping_cpu_ns[3];
static uint64_t ping_seed; /* the repetition (--reps), for ping_init */

static int64_t cpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct {
    uint64_t x; /* xorshift state: which idle process next */
    int64_t sent, got;
} ping_state;

static int ping_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)c, (void)m, (void)in, (void)n;
    /* Each repetition (--reps) its own sequence of targets: a second pass
     * over the same ones would find some still cached. */
    ((ping_state *)st)->x =
        88172645463325252ull + ping_seed * 0x9e3779b97f4a7c15ull;
    return idle_k > 0 ? 0 : SX_EINVAL;
}

static int ping_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    ping_state *s = st;
    int64_t answers = 0;
    for (size_t i = 0; i < n; i++)
        answers += ev[i].type == SX_EVENT_MESSAGE;
    s->got += answers;
    if (s->sent > s->got) { /* not an answer: still waiting */
        sx_idle(out);
        return 0;
    }
    if (s->got == arg_n)
        ping_ns[1] = now_ns(), ping_cpu_ns[1] = cpu_now_ns();
    if (s->got == 2 * arg_n) {
        ping_ns[2] = now_ns(), ping_cpu_ns[2] = cpu_now_ns();
        return done_int(out, s->got);
    }
    if (s->sent == 0)
        ping_ns[0] = now_ns(), ping_cpu_ns[0] = cpu_now_ns();
    uint64_t k;
    if (s->sent < arg_n) {
        s->x ^= s->x << 13, s->x ^= s->x >> 7, s->x ^= s->x << 17;
        k = s->x % (uint64_t)idle_k;
    } else {
        k = (uint64_t)(s->sent - arg_n) % (uint64_t)idle_k;
    }
    s->sent++;
    int rc = sx_send(out, idle_pids[k], "p", nil);
    if (rc != 0)
        return rc;
    sx_idle(out);
    return 0;
}

/* ---- fanin: 2 producers send n/2 messages each to one consumer ---- */

/* A producer sends up to FANIN_BATCH messages per step with sx_send and
 * continues (sx_send writes no yield, so CONTINUE runs the step again at
 * once). The batch is the producer's loop body between two scheduling
 * points, as in the peers' send loops. The consumer counts the messages
 * and checks that each producer's arrive in the order sent (0, 1, 2, ...). */
#ifndef FANIN_BATCH
#define FANIN_BATCH 32
#endif

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
    if (s->left == 0)
        return done_int(out, s->next);
    int64_t k = s->left < FANIN_BATCH ? s->left : FANIN_BATCH;
    for (int64_t i = 0; i < k; i++) {
        int rc = send_int(out, s->to, s->next++);
        if (rc != 0)
            return rc;
    }
    s->left -= k;
    sx_continue(out);
    return 0;
}

typedef struct {
    int64_t got, bad;
    sx_pid from[2];
    int64_t next[2]; /* the value expected next from from[i] */
    int senders;
} sink_state;

static int sink_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    sink_state *s = st;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type != SX_EVENT_MESSAGE)
            continue;
        int64_t v = -1;
        int k = 0;
        while (k < s->senders && !sx_pid_eq(s->from[k], ev[i].from))
            k++;
        if (k == s->senders && k < 2)
            s->from[s->senders++] = ev[i].from;
        if (k == 2 || sx_payload_get_int(ev[i].data, &v) != 0 ||
            v != s->next[k])
            s->bad++;
        else
            s->next[k]++;
        s->got++;
    }
    if (s->got >= arg_n)
        return done_int(out, s->bad == 0 ? s->got : -1);
    sx_idle(out);
    return 0;
}

/* ---- wake: an IDLE process woken by one outside message ---- */

static int64_t *wake_lat; /* ns from sx_engine_send to the step */
static _Atomic int64_t wake_got;

static int wake_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st;
    int64_t t1 = now_ns();
    for (size_t i = 0; i < n; i++) {
        int64_t t0 = 0;
        if (ev[i].type != SX_EVENT_MESSAGE ||
            sx_payload_get_int(ev[i].data, &t0) != 0)
            continue;
        int64_t k = atomic_load_explicit(&wake_got, memory_order_relaxed);
        if (k < arg_n)
            wake_lat[k] = t1 - t0;
        /* release: the sample is written before the count says so. */
        atomic_store_explicit(&wake_got, k + 1, memory_order_release);
    }
    if (atomic_load_explicit(&wake_got, memory_order_relaxed) >= arg_n)
        return done_int(out, arg_n);
    sx_idle(out);
    return 0;
}

/* ---- timers: n processes each sleep a random 1-50 ms, then finish ----
 *
 * A process notes the time in its first step and yields SX_CMD_SLEEP; the
 * step that gets the completion records its lateness: now - (then + ms).
 * The deadline is fixed when the engine dispatches the yield, just after
 * the step, so a wake-up before then + ms would be a timer firing early
 * (a failed check).
 *
 * The driver blocks in sx_engine_wait_all until no sleeper is alive, as
 * the Go peer blocks in its WaitGroup's Wait: the engine counts the
 * finishes anyway (each worker its own), so the sleepers share no
 * counter, where each of Go's goroutines takes the WaitGroup's in its
 * Done. The driver does not poll the engine meanwhile (a 20 us poll would
 * wake the driver ~1,000 times a run, each time taking a core from a
 * worker). */

static int64_t *timer_late;  /* ns late, one per process */
static int64_t *timer_start; /* its first step, ns on now_ns */

typedef struct {
    int64_t ms, idx, t0;
} timer_state;

static int timer_init(void *st, const sx_init_ctx *c, const char *m,
                      const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    timer_state *s = st;
    if (n != 2 || sx_payload_get_int(in[0], &s->ms) != 0 ||
        sx_payload_get_int(in[1], &s->idx) != 0 || s->idx < 0 ||
        s->idx >= arg_n)
        return SX_EINVAL;
    return 0;
}

static int timer_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    timer_state *s = st;
    if (s->t0 == 0) {
        uint8_t b[SX_PAYLOAD_INT_MAX];
        s->t0 = now_ns();
        timer_start[s->idx] = s->t0;
        sx_wait(out);
        return sx_yield(out, SX_CMD_SLEEP, 1, sx_payload_int(b, s->ms));
    }
    for (size_t i = 0; i < n; i++)
        if (ev[i].type == SX_EVENT_YIELD_COMPLETE && ev[i].tag == 1) {
            if (ev[i].error != 0)
                return ev[i].error; /* fails; the driver's check sees it */
            timer_late[s->idx] = now_ns() - (s->t0 + s->ms * 1000000);
            return done_int(out, s->ms);
        }
    sx_wait(out);
    return 0;
}

static const sx_process_type types[] = {
    { .name = "yield",
      .state_size = sizeof(yield_state),
      .init = yield_init,
      .step = yield_step },
    { .name = "ring",
      .state_size = sizeof(ring_state),
      .init = ring_init,
      .step = ring_step },
    { .name = "sky",
      .state_size = sizeof(sky_state),
      .init = sky_init,
      .step = sky_step },
    { .name = "idle", .state_size = 0, .init = one_init, .step = idle_step },
    { .name = "once", .state_size = 0, .init = one_init, .step = once_step },
    { .name = "src",
      .state_size = sizeof(src_state),
      .init = src_init,
      .step = src_step },
    { .name = "sink",
      .state_size = sizeof(sink_state),
      .init = one_init,
      .step = sink_step },
    { .name = "wake", .state_size = 0, .init = one_init, .step = wake_step },
    { .name = "timer",
      .state_size = sizeof(timer_state),
      .init = timer_init,
      .step = timer_step },
    { .name = "ping",
      .state_size = sizeof(ping_state),
      .init = ping_init,
      .step = ping_step },
};

static int wait_int(sx_engine *e, sx_pid pid, int64_t *v)
{
    sx_result r;
    int rc = sx_engine_wait(e, pid, -1, &r);
    if (rc == 0 && (r.error != 0 || sx_payload_get_int(r.value, v) != 0))
        rc = SX_EFAILED;
    sx_result_free(&r);
    return rc;
}

static int send_next(sx_engine *e, sx_pid to, sx_pid next)
{
    uint8_t buf[64];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof(buf));
    sx_pack_pid(&pk, next);
    return sx_engine_send(e, SX_PID_NONE, to, "next", sx_pack_payload(&pk));
}

/* A ring of m processes passing a token n hops; returns ok. */
static int token_ring(sx_engine *e, int64_t m, int64_t n)
{
    sx_pid *p = calloc((size_t)m, sizeof(*p));
    int ok = p != NULL;
    for (int64_t i = 0; ok && i < m; i++)
        ok = sx_engine_submit(e, "ring", "run", NULL, 0, &p[i]) == 0;
    for (int64_t i = 0; ok && i < m; i++)
        ok = send_next(e, p[i], p[(i + 1) % m]) == 0;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    ok = ok && sx_engine_send(e, SX_PID_NONE, p[0], "t",
                              sx_payload_int(b, n - 1)) == 0;
    /* Every process sees the n tokens between them, and all but the one
     * that saw 0 see the stop once. */
    int64_t total = 0;
    for (int64_t i = 0; ok && i < m; i++) {
        int64_t v = 0;
        ok = wait_int(e, p[i], &v) == 0;
        total += v;
    }
    free(p);
    return ok && total == n + m - 1;
}

/* Waits until no process is alive (the driver blocked, as Go's wg.Wait
 * blocks; no poll), then whether all n finished DONE: a finish counts
 * itself before the live count drops, so the figures are complete. */
static int wait_all_done(sx_engine *e, int64_t n)
{
    if (sx_engine_wait_all(e, -1) != 0)
        return 0;
    sx_engine_stats st;
    sx_engine_stats_get(e, &st, NULL, 0);
    return st.completed == (uint64_t)n && st.failed == 0 && st.terminated == 0;
}

/* spawnidle: n processes that each wait for one message, then one message
 * each; submit: n one-step processes. */
static int spawn_many(sx_engine *e, int64_t n, int idle)
{
    /* Only spawnidle needs the PIDs (to send to); submit keeps none, as the
     * Go peer keeps no handle to its goroutines. */
    sx_pid *p = idle ? calloc((size_t)n, sizeof(*p)) : NULL;
    int ok = !idle || p != NULL;
    for (int64_t i = 0; ok && i < n; i++)
        ok = sx_engine_submit(e, idle ? "idle" : "once", "run", NULL, 0,
                              idle ? &p[i] : NULL) == 0;
    for (int64_t i = 0; ok && idle && i < n; i++)
        ok = sx_engine_send(e, SX_PID_NONE, p[i], "go", nil) == 0;
    ok = ok && wait_all_done(e, n);
    free(p);
    return ok;
}

static int fanin(sx_engine *e, int64_t n)
{
    sx_pid sink, src[2];
    int64_t got = 0, sent = 0;
    if (sx_engine_submit(e, "sink", "run", NULL, 0, &sink) != 0)
        return 0;
    for (int i = 0; i < 2; i++) {
        uint8_t pb[64], nb[SX_PAYLOAD_INT_MAX];
        sx_pack pk;
        sx_pack_init_fixed(&pk, pb, sizeof(pb));
        sx_pack_pid(&pk, sink);
        sx_payload in[2] = { sx_pack_payload(&pk),
                             sx_payload_int(nb, i == 0 ? n - n / 2 : n / 2) };
        if (sx_engine_submit(e, "src", "run", in, 2, &src[i]) != 0)
            return 0;
    }
    for (int i = 0; i < 2; i++) {
        int64_t v = 0;
        if (wait_int(e, src[i], &v) != 0)
            return 0;
        sent += v;
    }
    return wait_int(e, sink, &got) == 0 && got == n && sent == n;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* wake: every 1 ms (after the previous sample was seen) an outside thread
 * sends one message, carrying the send time, to an IDLE process; the step
 * records now - then. Reports p50 (the figure) and p99 in us, and how many
 * sends found every worker parked. */
static int wake(sx_engine *e, int64_t n, char *extra, size_t cap,
                double *figure)
{
    wake_lat = calloc((size_t)n, sizeof(*wake_lat));
    sx_pid p;
    if (wake_lat == NULL)
        return 0;
    if (sx_engine_submit(e, "wake", "run", NULL, 0, &p) != 0) {
        free(wake_lat);
        return 0;
    }
    int64_t all_parked = 0;
    for (int64_t i = 0; i < n; i++) {
        do
            sleep_ns(1000000);
        while (atomic_load_explicit(&wake_got, memory_order_acquire) < i);
        sx_engine_stats st;
        sx_engine_stats_get(e, &st, NULL, 0);
        all_parked += st.parked == st.workers;
        uint8_t b[SX_PAYLOAD_INT_MAX];
        if (sx_engine_send(e, SX_PID_NONE, p, "t",
                           sx_payload_int(b, now_ns())) != 0)
            return 0;
    }
    int64_t v = 0;
    int ok = wait_int(e, p, &v) == 0 && v == n &&
             atomic_load_explicit(&wake_got, memory_order_acquire) == n;
    qsort(wake_lat, (size_t)n, sizeof(*wake_lat), cmp_i64);
    double p50 = (double)wake_lat[(n - 1) / 2];
    double p99 = (double)wake_lat[(n * 99 + 99) / 100 - 1];
    double max = (double)wake_lat[n - 1];
    ok = ok && wake_lat[0] > 0;
    snprintf(extra, cap,
             " p50_us=%.2f p99_us=%.2f max_us=%.2f all_parked_pct=%.1f",
             p50 / 1e3, p99 / 1e3, max / 1e3,
             100.0 * (double)all_parked / (double)n);
    *figure = p50;
    free(wake_lat);
    return ok;
}

/* timers: the driver submits the n sleepers (sleeps drawn from a fixed
 * xorshift sequence, uniform in 1..50 ms) and waits for all to finish,
 * blocked in sx_engine_wait_all (the Go peer's wg.Wait). The figure is
 * the whole time, from the first submit to the last finish (ideal: about
 * the longest sleep, 50 ms); lateness percentiles in ms. The arrays the
 * sleepers write their figures to are allocated and written once before
 * the clock starts, here and in the Go peer: they are the measurement,
 * not the workload (1.6 MB of first-touch page faults on the driver's
 * thread, which would otherwise be timed in front of the first submit). */
static double cpu_secs(void);

static int timers(sx_engine *e, int64_t n, char *extra, size_t cap,
                  double *secs_own)
{
    timer_late = malloc((size_t)n * sizeof(*timer_late));
    timer_start = malloc((size_t)n * sizeof(*timer_start));
    if (timer_late == NULL || timer_start == NULL) {
        free(timer_late);
        free(timer_start);
        return 0;
    }
    for (int64_t i = 0; i < n; i++)
        timer_late[i] = INT64_MIN, timer_start[i] = 0; /* not yet woken */
    uint64_t x = 88172645463325252ull;
    int64_t max_ms = 0;
    int ok = 1;
    double cpu0 = cpu_secs();
    double t0 = now_s(); /* the clock starts here */
    int64_t t0_ns = now_ns();
    for (int64_t i = 0; ok && i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t ms = 1 + (int64_t)(x % 50);
        max_ms = ms > max_ms ? ms : max_ms;
        uint8_t b0[SX_PAYLOAD_INT_MAX], b1[SX_PAYLOAD_INT_MAX];
        sx_payload in[2] = { sx_payload_int(b0, ms), sx_payload_int(b1, i) };
        ok = sx_engine_submit(e, "timer", "run", in, 2, NULL) == 0;
    }
    double submitted = now_s() - t0;
    /* Every sleeper finished (each one's figures written before its
     * finish, which the wait's reads of the live count acquire); then
     * the engine's count says whether each finished as it should. Waited
     * for after a failed submit too: the sleepers submitted before it
     * write to the arrays freed below. */
    ok = wait_all_done(e, n) && ok;
    /* The clock stops when every sleeper has finished: sorting the
     * lateness figures below is analysis, not the workload (the Go peer
     * stops its clock at the same point). */
    *secs_own = now_s() - t0;
    double cpu = cpu_secs() - cpu0; /* the whole process's, all threads */
    int64_t early = 0;
    for (int64_t i = 0; ok && i < n; i++)
        early += timer_late[i] < 0; /* early, or never woke */
    ok = ok && early == 0;
    if (ok) {
        /* When the sleepers began to sleep (their first steps), from the
         * first submit: how far the workers lagged the submitter. */
        qsort(timer_start, (size_t)n, sizeof(*timer_start), cmp_i64);
        qsort(timer_late, (size_t)n, sizeof(*timer_late), cmp_i64);
        snprintf(extra, cap,
                 " p50_late_ms=%.3f p99_late_ms=%.3f max_late_ms=%.3f"
                 " longest_sleep_ms=%lld submit_secs=%.4f"
                 " p50_start_ms=%.1f last_start_ms=%.1f cpu_secs=%.3f",
                 (double)timer_late[(n - 1) / 2] / 1e6,
                 (double)timer_late[(n * 99 + 99) / 100 - 1] / 1e6,
                 (double)timer_late[n - 1] / 1e6, (long long)max_ms, submitted,
                 (double)(timer_start[(n - 1) / 2] - t0_ns) / 1e6,
                 (double)(timer_start[n - 1] - t0_ns) / 1e6, cpu);
    } else {
        snprintf(extra, cap, " early_or_missing=%lld", (long long)early);
    }
    free(timer_late);
    free(timer_start);
    return ok;
}

/* relay: a relay server in this process (the one stepxd runs, on a Unix
 * socket in a fresh temporary directory) and one client with RELAY_CONNS
 * connections through the C client, each doing its share of the n jobs
 * of counter(1). A job counts only when its outcome says result 1 in 2
 * steps. With --window 1 (relay1 in the report) each connection has one
 * request at a time, and a job is one request: a submit with "wait"
 * (docs/PROTOCOL.md, submit), answered with the outcome, then the next
 * job's. With a window W > 1 (the default, RELAY_WINDOW) each connection
 * keeps up to W jobs in flight with the pipelined API, each job a submit
 * and then a wait: a job's wait is posted when its submit's reply arrives,
 * and a new job starts when one finishes.
 *
 * The client is one thread that polls the eight sockets (sx_client_fd)
 * and answers whichever connection has a reply, as a load generator
 * does: one blocking thread per connection would, on two cores, spend
 * more CPU switching its own eight threads than the server spends
 * serving them (bench/FINDINGS.md). The clock runs from when
 * every connection has said hello to the last answer.
 *
 * relay-durable is the same program on an engine with a state store
 * (docs/DURABILITY.md) in a fresh temporary directory: each job's submit
 * is answered once the job is stored, and its wait once its outcome is,
 * so a job is two records in the store's group commits. */
#define RELAY_CONNS 8
#define RELAY_WINDOW 64

static int relay_window = RELAY_WINDOW;

typedef struct {
    int64_t jobs, started, done, good;
    int rc;
    sx_client *c;
} relay_conn;

/* A job's outcome (a wait's reply, or a submit's with "wait"): result 1
 * after 2 steps. */
static int relay_good(const sx_reply *r)
{
    sx_payload res, st;
    int64_t v = -1;
    uint64_t steps = 0;
    sx_unpack u;
    if (sx_map_get(r->body, "steps", &st) != 0)
        return 0;
    sx_unpack_init(&u, st);
    return sx_unpack_uint(&u, &steps) == 0 && steps == 2 &&
           sx_map_get(r->body, "result", &res) == 0 &&
           sx_payload_get_int(res, &v) == 0 && v == 1;
}

/* Posts the next job's submit (with "wait" when one request at a time). */
static int relay_start(relay_conn *rc, sx_payload one)
{
    rc->started++;
    if (relay_window == 1)
        return sx_client_post_submit_wait(rc->c, "counter", "run", &one, 1, -1,
                                          NULL);
    return sx_client_post_submit(rc->c, "counter", "run", &one, 1, NULL);
}

/* Sends what was posted: 0 with *events POLLIN, plus POLLOUT when some of
 * it is still unsent (the socket was full), or the error. */
static int relay_flush(relay_conn *rc, short *events)
{
    int e = sx_client_flush(rc->c, 0);
    *events = (short)(POLLIN | (e == SX_ETIMEDOUT ? POLLOUT : 0));
    return e == SX_ETIMEDOUT ? 0 : e;
}

/* Takes every reply conn has read: a submit's without an outcome posts
 * that job's wait; an outcome (a wait's, or a submit's with "wait") ends
 * the job and starts the next. Then sends what was posted. 0 while the
 * connection goes on, else its error. */
static int relay_take(relay_conn *rc, sx_payload one, short *events)
{
    for (;;) {
        sx_reply r;
        sx_pid pid;
        int e = sx_client_next_reply(rc->c, 0, NULL, &r);
        if (e == SX_ETIMEDOUT || e == SX_ENOTFOUND)
            break; /* nothing more read yet / nothing in flight */
        if (e != 0)
            return e;
        sx_payload steps;
        if (!r.ok) {
            e = r.error;
        } else if (sx_map_get(r.body, "steps", &steps) != 0 &&
                   sx_reply_pid(&r, &pid) == 0) {
            e = sx_client_post_wait(rc->c, pid, -1, NULL);
        } else {
            rc->good += relay_good(&r);
            rc->done++;
            if (rc->started < rc->jobs)
                e = relay_start(rc, one);
        }
        sx_reply_free(&r);
        if (e != 0)
            return e;
    }
    return relay_flush(rc, events);
}

/* Drives every connection until each has done its jobs or failed. */
static void relay_drive(relay_conn *conn, int nc, sx_payload one)
{
    struct pollfd pf[RELAY_CONNS];
    int live = 0;
    for (int i = 0; i < nc; i++) {
        relay_conn *rc = &conn[i];
        pf[i] = (struct pollfd){ .fd = -1, .events = POLLIN };
        if (rc->rc != 0)
            continue;
        while (rc->rc == 0 && rc->started < rc->jobs &&
               rc->started < relay_window)
            rc->rc = relay_start(rc, one);
        if (rc->rc == 0)
            rc->rc = relay_flush(rc, &pf[i].events);
        if (rc->rc == 0 && rc->done < rc->jobs) {
            pf[i].fd = sx_client_fd(rc->c);
            live++;
        }
    }
    while (live > 0) {
        int n = poll(pf, (nfds_t)nc, 30000);
        if (n < 0 && errno == EINTR)
            continue;
        for (int i = 0; i < nc; i++) {
            relay_conn *rc = &conn[i];
            if (pf[i].fd < 0)
                continue;
            if (n <= 0) /* poll failed, or 30 s without a reply: give up */
                rc->rc = n == 0 ? SX_ETIMEDOUT : -errno;
            else if (pf[i].revents != 0)
                rc->rc = relay_take(rc, one, &pf[i].events);
            if (rc->rc != 0 || rc->done == rc->jobs) {
                pf[i].fd = -1;
                live--;
            }
        }
    }
}

/* Per-thread times from the kernel (/proc/self/task/TID/schedstat): ns on
 * a core and ns runnable but waiting for one. relay-durable takes them
 * before and after its run, to tell a thread that is the bound (on a core
 * or waiting for one nearly all the run) from one that waits for work. */
#define THREADS_MAX 64

typedef struct {
    int tid;
    uint64_t run_ns, wait_ns;
} thread_time;

static int thread_times(thread_time *t, int cap)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (d == NULL)
        return 0;
    for (struct dirent *de; n < cap && (de = readdir(d)) != NULL;) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", de->d_name);
        FILE *f = fopen(path, "r");
        unsigned long long run = 0, wait = 0;
        if (f == NULL)
            continue;
        if (fscanf(f, "%llu %llu", &run, &wait) == 2)
            t[n++] = (thread_time){ atoi(de->d_name), run, wait };
        fclose(f);
    }
    closedir(d);
    return n;
}

/* Appends, for the time between two thread_times samples: the process's
 * CPU seconds, and the busiest thread's CPU and run-queue seconds. */
static void thread_figures(const thread_time *a, int na, const thread_time *b,
                           int nb, char *extra, size_t cap)
{
    uint64_t all = 0, best_run = 0, best_wait = 0;
    for (int i = 0; i < nb; i++) {
        uint64_t run = b[i].run_ns, wait = b[i].wait_ns;
        for (int k = 0; k < na; k++)
            if (a[k].tid == b[i].tid) {
                run -= a[k].run_ns;
                wait -= a[k].wait_ns;
                break;
            }
        all += run;
        if (run > best_run)
            best_run = run, best_wait = wait;
    }
    size_t l = strlen(extra);
    snprintf(extra + l, cap - l,
             " cpu_secs=%.3f busiest_thread_cpu_secs=%.3f"
             " busiest_thread_runq_secs=%.3f",
             (double)all / 1e9, (double)best_run / 1e9,
             (double)best_wait / 1e9);
}

static int relay_threads; /* relay-durable: thread figures on the line */

static int relay(sx_engine *e, int64_t n, char *extra, size_t cap, double *secs)
{
    char dir[] = "/tmp/stepx-bench-XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 0;
    char path[128];
    snprintf(path, sizeof(path), "%s/relay.sock", dir);
    sx_server_config sc = { .socket_path = path };
    sx_server *srv;
    if (sx_server_start(e, &sc, &srv) != 0) {
        rmdir(dir);
        return 0;
    }
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload one = sx_payload_int(b, 1);
    relay_conn conn[RELAY_CONNS];
    int ok = 1;
    for (int i = 0; i < RELAY_CONNS; i++) {
        conn[i] = (relay_conn){ .jobs = n / RELAY_CONNS +
                                        (i < n % RELAY_CONNS ? 1 : 0) };
        if (sx_client_connect(path, NULL, 5000, &conn[i].c) != 0)
            ok = 0, conn[i].c = NULL, conn[i].rc = SX_ECLOSED;
    }
    thread_time ta[THREADS_MAX], tb[THREADS_MAX];
    int na = relay_threads ? thread_times(ta, THREADS_MAX) : 0;
    double t0 = now_s(); /* connections open: the jobs begin */
    relay_drive(conn, RELAY_CONNS, one);
    *secs = now_s() - t0; /* the last answer is in */
    int nb = relay_threads ? thread_times(tb, THREADS_MAX) : 0;
    int64_t good = 0;
    for (int i = 0; i < RELAY_CONNS; i++) {
        good += conn[i].good;
        ok = ok && conn[i].rc == 0;
        if (conn[i].c != NULL)
            sx_client_close(conn[i].c);
    }
    sx_server_stats ss;
    sx_server_stats_get(srv, &ss);
    sx_server_stop(srv);
    rmdir(dir);
    snprintf(extra, cap,
             " conns=%d window=%d client_threads=1 jobs_ok=%lld requests=%llu",
             RELAY_CONNS, relay_window > 1 ? relay_window : 1, (long long)good,
             (unsigned long long)ss.requests);
    if (relay_threads)
        thread_figures(ta, na, tb, nb, extra, cap);
    return ok && good == n;
}

static double cpu_secs(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Sums per-worker figures: parks and steps. */
static void worker_sums(sx_engine *e, uint64_t *parks, uint64_t *steps)
{
    sx_worker_stats w[SX_MAX_WORKERS];
    sx_engine_stats st;
    sx_engine_stats_get(e, &st, w, SX_MAX_WORKERS);
    *parks = *steps = 0;
    for (unsigned i = 0; i < st.workers && i < SX_MAX_WORKERS; i++) {
        *parks += w[i].parks;
        *steps += w[i].steps;
    }
}

/* idle: a started engine with no work for n seconds; the CPU time the
 * process used in that window (user + sys). */
static int idle(sx_engine *e, int64_t n, char *extra, size_t cap,
                double *figure)
{
    sleep_ns(10000000); /* let start-up settle: workers park */
    uint64_t k0, k1, s0, s1;
    worker_sums(e, &k0, &s0);
    double c0 = cpu_secs();
    sleep_ns(n * 1000000000);
    double c1 = cpu_secs();
    worker_sums(e, &k1, &s1);
    sx_engine_stats st;
    sx_engine_stats_get(e, &st, NULL, 0);
    double cpu = c1 - c0;
    snprintf(extra, cap, " cpu_secs=%.4f parks=%llu parked_at_end=%u", cpu,
             (unsigned long long)(k1 - k0), st.parked);
    *figure = cpu * 1e9 / (double)n; /* CPU ns per idle second */
    /* The check: no step ran and nothing is live. (Not "every worker
     * parked": a worker re-checks the queues every 500 ms, so at any
     * instant one may be between two parks.) */
    return c0 >= 0 && c1 >= 0 && s1 == 0 && st.live == 0;
}

/* Removes a temporary directory made by mkdtemp and what it holds. */
static void remove_dir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "stepx-bench: could not remove %s\n", dir);
}

static int64_t store_window; /* store --window: jobs in flight, 0: no bound */

#ifndef SX_BENCH_SHARED
/* store: the durable store alone (engine/store/), the upper bound for a
 * durable job: n jobs submitted as fast as one thread can queue them,
 * each job's finish queued when its submit is on disk (the writer's
 * callback), timed until the last finish is on disk; a job is two
 * records, each acknowledged only once committed (WAL, synchronous
 * NORMAL, group commit). In a temporary directory, removed after. */

typedef struct {
    sx__store *s;
    _Atomic int64_t finished, failed;
} store_run;

static void store_finished(void *user, int rc, uint64_t id)
{
    store_run *r = user;
    (void)id;
    /* relaxed: counts; the driver's acquire poll below sees them. */
    if (rc != 0)
        atomic_fetch_add_explicit(&r->failed, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->finished, 1, memory_order_release);
}

static void store_submitted(void *user, int rc, uint64_t id)
{
    store_run *r = user;
    static const uint8_t v[] = { 0x01 };
    if (rc != 0 || sx__store_finish(r->s, id, 0, NULL, (sx_payload){ v, 1 }, 1,
                                    1, store_finished, r) != 0) {
        /* As store_finished: a failed job counts as finished (release,
         * for the driver's acquire poll), its failure relaxed before it. */
        atomic_fetch_add_explicit(&r->failed, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&r->finished, 1, memory_order_release);
    }
}

static int store_bench(int64_t n, int64_t window, char *extra, size_t cap,
                       double *secs)
{
    char dir[] = "/tmp/stepx-bench-store-XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 0;
    sx__store_config cfg = { .dir = dir, .keep_outcomes = 10000 };
    store_run r = { 0 };
    char msg[256];
    int ok = 0;
    if (sx__store_open(&cfg, &r.s, msg, sizeof msg) != 0) {
        fprintf(stderr, "stepx-bench: store: %s\n", msg);
        goto out;
    }
    double t0 = now_s();
    uint8_t in[] = { 0x90 }; /* [] */
    for (int64_t i = 1; i <= n; i++) {
        sx__store_job j = { .id = (uint64_t)i,
                            .type = "counter",
                            .method = "run",
                            .input = { in, 1 },
                            .attempt = 1 };
        /* At most window jobs in flight (0: no bound), as a client
         * pipelining with a window would keep. */
        while (window > 0 &&
               i - atomic_load_explicit(&r.finished, memory_order_acquire) >
                   window)
            sleep_ns(10000);
        if (sx__store_submit(r.s, &j, store_submitted, &r) != 0)
            break;
    }
    while (atomic_load_explicit(&r.finished, memory_order_acquire) < n)
        sleep_ns(100000);
    *secs = now_s() - t0;
    sx__store_stats st;
    sx__store_stats_get(r.s, &st);
    snprintf(extra, cap, " window=%lld commits=%llu records=%llu",
             (long long)window, (unsigned long long)st.commits,
             (unsigned long long)st.records);
    ok = atomic_load_explicit(&r.failed, memory_order_relaxed) == 0;
    sx__store_close(r.s);
out:
    remove_dir(dir);
    return ok;
}

#endif

/* relay-durable: the engine's store figures so far (transactions and the
 * records in them), appended to extra. Before stop, which closes it. */
static void store_figures(sx_engine *e, char *extra, size_t cap)
{
    size_t l = strlen(extra);
    sx_engine_stats st;
    if (sx_engine_stats_get(e, &st, NULL, 0) != 0 || st.store_commits == 0) {
        snprintf(extra + l, cap - l, " commits=-1");
        return;
    }
    snprintf(extra + l, cap - l,
             " commits=%llu records=%llu records_per_commit=%.1f",
             (unsigned long long)st.store_commits,
             (unsigned long long)st.store_records,
             (double)st.store_records / (double)st.store_commits);
}

/* ---- checkpoint: the time a checkpoint adds to a step ----
 *
 * On an engine with a state store, CK_PROCS jobs at once step n /
 * CK_PROCS times each, yielding a no-op command per step, first of a
 * plain type, then of the same type checkpointed (SX_TYPE_CHECKPOINTED):
 * a checkpointed job's no-op goes out, and its next step comes, only once
 * its checkpoint is committed (docs/DURABILITY.md). Each job times the
 * gap from the end of one step to the start of the next into a histogram
 * of CK_US-wide buckets; the figure is the checkpointed gaps' median
 * minus the plain gaps' median (the time a checkpoint adds to a step
 * under this load), with both medians and the checkpointed p99 beside
 * it. */
#define CK_PROCS 64
#define CK_US 5
#define CK_BUCKETS 40000 /* 200 ms */

static _Atomic uint64_t ck_hist[2][CK_BUCKETS];

typedef struct {
    int64_t left, last_ns, which;
} ck_state;

static int ck_init(void *st, const sx_init_ctx *c, const char *m,
                   const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    ck_state *s = st;
    if (n != 2 || sx_payload_get_int(in[0], &s->left) != 0 ||
        sx_payload_get_int(in[1], &s->which) != 0)
        return SX_EINVAL;
    return 0;
}

static int ck_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    (void)ev, (void)n;
    ck_state *s = st;
    if (s->last_ns != 0) {
        int64_t b = (now_ns() - s->last_ns) / (CK_US * 1000);
        /* relaxed: a histogram, read once every job has finished. */
        atomic_fetch_add_explicit(
            &ck_hist[s->which][b < CK_BUCKETS ? b : CK_BUCKETS - 1], 1,
            memory_order_relaxed);
    }
    if (s->left-- <= 0) {
        sx_done(out, (sx_payload){ NULL, 0 });
        return 0;
    }
    sx_yield(out, SX_CMD_NOOP, 1, (sx_payload){ NULL, 0 });
    s->last_ns = now_ns();
    return 0;
}

static const sx_process_type ck_types[2] = {
    { .name = "ck-plain",
      .state_size = sizeof(ck_state),
      .init = ck_init,
      .step = ck_step },
    { .name = "ck-checkpointed",
      .state_size = sizeof(ck_state),
      .init = ck_init,
      .step = ck_step,
      .flags = SX_TYPE_CHECKPOINTED },
};

/* The q-quantile of histogram h, in µs (a bucket's middle). */
static double ck_quantile(int which, double q)
{
    uint64_t total = 0, seen = 0;
    for (size_t i = 0; i < CK_BUCKETS; i++)
        total += atomic_load_explicit(&ck_hist[which][i], memory_order_relaxed);
    for (size_t i = 0; i < CK_BUCKETS; i++) {
        seen += atomic_load_explicit(&ck_hist[which][i], memory_order_relaxed);
        if (total > 0 && (double)seen >= q * (double)total)
            return ((double)i + 0.5) * CK_US;
    }
    return -1;
}

static int checkpoint_bench(sx_engine *e, int64_t n, char *extra, size_t cap,
                            double *figure)
{
    int64_t per = n / CK_PROCS > 0 ? n / CK_PROCS : 1;
    int ok = 1;
    double secs[2];
    for (int which = 0; which < 2 && ok; which++) {
        sx_pid pids[CK_PROCS];
        double t0 = now_s();
        for (int i = 0; i < CK_PROCS && ok; i++) {
            uint8_t b0[SX_PAYLOAD_INT_MAX], b1[SX_PAYLOAD_INT_MAX];
            sx_payload in[2] = { sx_payload_int(b0, per),
                                 sx_payload_int(b1, which) };
            ok = sx_engine_submit(e, ck_types[which].name, "run", in, 2,
                                  &pids[i]) == 0;
        }
        for (int i = 0; i < CK_PROCS && ok; i++) {
            sx_result r;
            ok = sx_engine_wait(e, pids[i], -1, &r) == 0 && r.error == 0 &&
                 r.steps == (uint64_t)per + 1;
            sx_result_free(&r);
        }
        secs[which] = now_s() - t0;
    }
    sx_engine_stats st;
    sx_engine_stats_get(e, &st, NULL, 0);
    double base = ck_quantile(0, 0.5), p50 = ck_quantile(1, 0.5),
           p99 = ck_quantile(1, 0.99);
    *figure = (p50 - base) * 1000.0; /* ns */
    snprintf(extra, cap,
             " added_p50_us=%.1f added_p99_us=%.1f p50_us=%.1f p99_us=%.1f"
             " base_p50_us=%.1f base_p99_us=%.1f procs=%d steps_each=%lld"
             " plain_secs=%.3f checkpointed_secs=%.3f store_commits=%llu"
             " store_records=%llu",
             p50 - base, p99 - base, p50, p99, base, ck_quantile(0, 0.99),
             CK_PROCS, (long long)per, secs[0], secs[1],
             (unsigned long long)st.store_commits,
             (unsigned long long)st.store_records);
    return ok && p50 >= 0 && base >= 0;
}

/* ---- recover: an engine starting on a state store of n stored jobs ----
 *
 * A child process (forked before this process has any thread) starts an
 * engine with a state store in a fresh temporary directory, submits n
 * "hold" jobs (no inputs; each goes IDLE in its first step and stays so)
 * with sx_engine_submit_async, at most RECOVER_WINDOW unanswered, and
 * once every submit is answered (stored) it _exits with the engine still
 * running: to the store, a crash with n acknowledged jobs that have no
 * outcome. The parent then times sx_engine_start of a new engine on that
 * directory: open the store, read back the n jobs (counting one more
 * attempt for each, committed), reserve their slots, spawn each again
 * (its init runs) and queue it. The figure is from the call until the
 * engine counts n live processes (start has spawned them all by the time
 * it returns); first_step_secs is until n steps have run (each job's
 * first step of its run again). Stop after the clock cancels the jobs:
 * a hold job ends with an error on any message, which stop leaves
 * unstored, so stop writes nothing. */
#define RECOVER_WINDOW 4096

static int hold_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st;
    for (size_t i = 0; i < n; i++)
        if (ev[i].type == SX_EVENT_MESSAGE)
            return SX_ECANCELLED;
    sx_idle(out);
    return 0;
}

static const sx_process_type hold_type = {
    .name = "hold", .state_size = 0, .init = one_init, .step = hold_step
};

/* What the filling child hands the parent through a pipe. */
typedef struct {
    double secs; /* from the first submit to the last answer */
    uint64_t commits, records;
} recover_fill;

static _Atomic int64_t fill_answered, fill_failed;

/* [the store's thread] A submit's answer. */
static void fill_answer(void *user, int rc, sx_pid pid, bool existing,
                        const char *msg)
{
    (void)user, (void)pid, (void)existing, (void)msg;
    /* relaxed: a count, published by the release add below. */
    if (rc != 0)
        atomic_fetch_add_explicit(&fill_failed, 1, memory_order_relaxed);
    /* release: pairs with the submitter's acquire loads (window, end). */
    atomic_fetch_add_explicit(&fill_answered, 1, memory_order_release);
}

/* [the child] Stores n jobs, reports, and dies without stopping. */
static void recover_fill_child(const char *dir, int64_t n, unsigned workers,
                               int fd)
{
    sx_engine_config cfg = { .workers = workers, .state_dir = dir };
    sx_engine *e;
    if (sx_engine_new(&cfg, &e) != 0 || sx_engine_register(e, &hold_type) != 0)
        _exit(2);
    if (sx_engine_start(e) != 0) {
        fprintf(stderr, "stepx-bench: recover: %s\n", sx_engine_state_error(e));
        _exit(2);
    }
    double t0 = now_s();
    for (int64_t i = 0; i < n; i++) {
        while (i - atomic_load_explicit(&fill_answered, memory_order_acquire) >=
               RECOVER_WINDOW)
            sleep_ns(20000);
        if (sx_engine_submit_async(e, "hold", "run", NULL, 0, NULL, fill_answer,
                                   NULL) != 0)
            _exit(3);
    }
    while (atomic_load_explicit(&fill_answered, memory_order_acquire) < n)
        sleep_ns(100000);
    recover_fill r = { .secs = now_s() - t0 };
    sx_engine_stats st;
    sx_engine_stats_get(e, &st, NULL, 0);
    r.commits = st.store_commits;
    r.records = st.store_records;
    if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
        _exit(4);
    /* The acquire load above saw every answer, and with it every failure
     * counted before it. */
    _exit(atomic_load_explicit(&fill_failed, memory_order_relaxed) == 0 ? 0
                                                                        : 5);
}

/* The calling thread's times (as thread_times). */
static void read_thread_self(thread_time *t)
{
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    unsigned long long run = 0, wait = 0;
    if (f != NULL) {
        if (fscanf(f, "%llu %llu", &run, &wait) == 2)
            *t = (thread_time){ 0, run, wait };
        fclose(f);
    }
}

/* Sums the steps run on every worker. */
static uint64_t steps_run(sx_engine *e)
{
    uint64_t parks, steps;
    worker_sums(e, &parks, &steps);
    return steps;
}

static int recover(int64_t n, unsigned workers, char *extra, size_t cap,
                   double *secs, unsigned *n_workers)
{
    char dir[] = "/tmp/stepx-bench-recover-XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 0;
    int ok = 0, fds[2];
    if (pipe(fds) != 0) {
        remove_dir(dir);
        return 0;
    }
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        close(fds[0]);
        recover_fill_child(dir, n, workers, fds[1]);
    }
    close(fds[1]);
    recover_fill fill = { 0 };
    ssize_t got = child > 0 ? read(fds[0], &fill, sizeof fill) : -1;
    close(fds[0]);
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child ||
        got != (ssize_t)sizeof fill || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        fprintf(stderr,
                "stepx-bench: recover: filling the store failed "
                "(status %d)\n",
                status);
        remove_dir(dir);
        return 0;
    }
    sx_engine_config cfg = { .workers = workers, .state_dir = dir };
    sx_engine *e;
    if (sx_engine_new(&cfg, &e) != 0 ||
        sx_engine_register(e, &hold_type) != 0) {
        remove_dir(dir);
        return 0;
    }
    sx_engine_stats st;
    thread_time me0 = { 0 }, me1 = { 0 };
    read_thread_self(&me0);
    double t0 = now_s(); /* the clock starts: open, read back, spawn */
    int rc = sx_engine_start(e);
    double t_start = now_s() - t0;
    read_thread_self(&me1);
    if (rc != 0) {
        fprintf(stderr, "stepx-bench: recover: start: %s: %s\n",
                sx_strerror(rc), sx_engine_state_error(e));
    } else {
        for (;;) {
            sx_engine_stats_get(e, &st, NULL, 0);
            if (st.live >= (uint64_t)n || st.failed != 0)
                break;
            sched_yield();
        }
        *secs = now_s() - t0; /* every job is spawned again */
        while (st.failed == 0 && steps_run(e) < (uint64_t)n) {
            sleep_ns(1000000);
            sx_engine_stats_get(e, &st, NULL, 0);
        }
        double t_steps = now_s() - t0;
        sx_engine_stats_get(e, &st, NULL, 0);
        ok = st.live == (uint64_t)n && st.failed == 0 && st.completed == 0 &&
             st.terminated == 0;
        *n_workers = st.workers;
        double s0 = now_s();
        sx_engine_stop(e, 0);
        snprintf(extra, cap,
                 " start_secs=%.4f start_cpu_secs=%.4f start_runq_secs=%.4f"
                 " first_step_secs=%.4f stop_secs=%.3f"
                 " fill_secs=%.3f fill_jobs_per_sec=%.0f fill_commits=%llu"
                 " fill_records=%llu live=%llu",
                 t_start, (double)(me1.run_ns - me0.run_ns) / 1e9,
                 (double)(me1.wait_ns - me0.wait_ns) / 1e9, t_steps,
                 now_s() - s0, fill.secs,
                 fill.secs > 0 ? (double)n / fill.secs : 0.0,
                 (unsigned long long)fill.commits,
                 (unsigned long long)fill.records, (unsigned long long)st.live);
    }
    sx_engine_free(e);
    remove_dir(dir);
    return ok;
}

/* The resident set now, in kB (VmRSS of /proc/self/status); -1 if
 * unknown. */
static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kb;
}

/* --idle K: submits K idle processes, keeping their PIDs (16 bytes each,
 * in the figure below), and waits until each has run its first step and
 * gone IDLE. Reports the time that took, the resident set after it, and
 * its growth per idle process. */
static int idle_spawn(sx_engine *e, int64_t k, char *extra, size_t cap)
{
    long rss0 = rss_kb();
    double t0 = now_s();
    uint64_t steps0 = steps_run(e);
    idle_pids = malloc((size_t)k * sizeof(*idle_pids));
    int ok = idle_pids != NULL;
    for (int64_t i = 0; ok && i < k; i++)
        ok = sx_engine_submit(e, "idle", "run", NULL, 0, &idle_pids[i]) == 0;
    while (ok && steps_run(e) - steps0 < (uint64_t)k)
        sleep_ns(20000);
    double secs = now_s() - t0;
    long rss1 = rss_kb();
    sx_engine_stats st;
    sx_engine_stats_get(e, &st, NULL, 0);
    ok = ok && st.live == (uint64_t)k;
    snprintf(extra, cap,
             " idle=%lld idle_spawn_secs=%.6f idle_rss_kb=%ld"
             " idle_bytes_per_proc=%.1f",
             (long long)k, secs, rss1,
             (double)(rss1 - rss0) * 1024.0 / (double)k);
    if (!ok)
        fprintf(stderr, "stepx-bench: --idle %lld: spawning failed\n",
                (long long)k);
    return ok;
}

/* After the workload: every idle process is still live (and nothing
 * else is), and sx_engine_stop's cancel ends each (it finishes DONE on
 * the message). Reports how long the stop took. */
static int idle_end(sx_engine *e, char *extra, size_t cap)
{
    sx_engine_stats a, b;
    sx_engine_stats_get(e, &a, NULL, 0);
    double t0 = now_s();
    sx_engine_stop(e, 600000);
    double secs = now_s() - t0;
    sx_engine_stats_get(e, &b, NULL, 0);
    int ok = a.live == (uint64_t)idle_k &&
             b.completed - a.completed == (uint64_t)idle_k &&
             b.terminated == a.terminated && b.failed == a.failed;
    size_t l = strlen(extra);
    snprintf(extra + l, cap - l, " idle_live_after=%llu idle_end_secs=%.6f",
             (unsigned long long)a.live, secs);
    free(idle_pids);
    return ok;
}

/* idlemsg: n round trips to idle processes picked at random (the
 * figure), then n in submit order (ping_step). Sets the time and the CPU
 * time of each phase, in seconds: random in t[0] and cpu[0], in order in
 * t[1] and cpu[1]. */
static int idlemsg(sx_engine *e, int64_t n, double t[2], double cpu[2])
{
    sx_pid p;
    int64_t got = 0;
    int ok = idle_k > 0 &&
             sx_engine_submit(e, "ping", "run", NULL, 0, &p) == 0 &&
             wait_int(e, p, &got) == 0 && got == 2 * n;
    for (int i = 0; ok && i < 2; i++) {
        t[i] = (double)(ping_ns[i + 1] - ping_ns[i]) / 1e9;
        cpu[i] = (double)(ping_cpu_ns[i + 1] - ping_cpu_ns[i]) / 1e9;
    }
    return ok;
}

/* --reps R: pingpong, fanin and idlemsg run R times in the one engine
 * (beside the same --idle processes, spawned once), and the line gives
 * the median repetition: secs and ns_per_op from the median time,
 * cpu_secs the median CPU time, and the fastest and slowest repetition's
 * ns per operation. On a shared host one repetition may fall in a busy
 * spell; R of them cost R times the workload, not R times the spawning
 * of the idle processes. */
#define MAX_REPS 64
static int reps = 1;

static double median_of(double *v, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: n <= MAX_REPS */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double x = v[j];
            v[j] = v[j - 1], v[j - 1] = x;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int repeated(sx_engine *e, const char *name, int64_t n, char *extra,
                    size_t cap, double *secs_own)
{
    double t[MAX_REPS], cpu[MAX_REPS], t_in[MAX_REPS], cpu_in[MAX_REPS];
    int ok = 1;
    for (int r = 0; ok && r < reps; r++) {
        double c0 = cpu_secs(), t0 = now_s();
        if (strcmp(name, "pingpong") == 0) {
            ok = token_ring(e, 2, n);
        } else if (strcmp(name, "fanin") == 0) {
            ok = fanin(e, n);
        } else {
            double tt[2] = { 0, 0 }, cc[2] = { 0, 0 };
            ping_seed = (uint64_t)r;
            ok = idlemsg(e, n, tt, cc);
            t_in[r] = tt[1], cpu_in[r] = cc[1];
            t[r] = tt[0], cpu[r] = cc[0];
            continue;
        }
        t[r] = now_s() - t0;
        cpu[r] = cpu_secs() - c0;
    }
    if (!ok)
        return 0;
    double lo = t[0], hi = t[0];
    for (int r = 1; r < reps; r++)
        lo = t[r] < lo ? t[r] : lo, hi = t[r] > hi ? t[r] : hi;
    *secs_own = median_of(t, reps);
    size_t l = strlen(extra);
    l += (size_t)snprintf(extra + l, cap - l,
                          " cpu_secs=%.6f reps=%d rep_min_ns_per_op=%.2f"
                          " rep_max_ns_per_op=%.2f",
                          median_of(cpu, reps), reps, lo * 1e9 / (double)n,
                          hi * 1e9 / (double)n);
    if (strcmp(name, "idlemsg") == 0 && l < cap)
        snprintf(extra + l, cap - l,
                 " in_order_ns_per_op=%.2f in_order_cpu_ns_per_op=%.2f",
                 median_of(t_in, reps) * 1e9 / (double)n,
                 median_of(cpu_in, reps) * 1e9 / (double)n);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr,
                "usage: stepx-bench <yield|ring|pingpong|skynet|fanin|"
                "spawnidle|submit|wake|idle|timers|relay|"
                "relay-durable|store|recover|checkpoint|idlemsg> <n> "
                "[--workers K] [--window W (relay, relay-durable, store)] "
                "[--idle K] [--reps R (pingpong, fanin, idlemsg)]\n");
        return 2;
    }
    const char *name = argv[1];
    arg_n = atoll(argv[2]);
    unsigned workers = 0;
    for (int i = 3; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--workers") == 0)
            workers = (unsigned)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--window") == 0) /* relay*, store */
            relay_window = store_window = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--idle") == 0)
            idle_k = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]);
    }
    if (arg_n <= 0) {
        fprintf(stderr, "stepx-bench: n must be positive\n");
        return 2;
    }
    static const char *const known[] = {
        "yield",  "ring",    "pingpong",   "skynet", "fanin", "spawnidle",
        "submit", "wake",    "idle",       "timers", "relay", "relay-durable",
        "store",  "recover", "checkpoint", "idlemsg"
    };
    int found = 0;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        found |= strcmp(name, known[i]) == 0;
    if (!found) {
        fprintf(stderr, "stepx-bench: unknown workload '%s'\n", name);
        return 2;
    }
    /* --idle: processes sitting IDLE beside the workload; idlemsg needs
     * them, and the workloads that run no engine of their own kind (store,
     * recover), count every live process (idle) or wait until none is
     * alive (spawnidle, submit, timers: sx_engine_wait_all) take none. */
    int repeatable = strcmp(name, "pingpong") == 0 ||
                     strcmp(name, "fanin") == 0 || strcmp(name, "idlemsg") == 0;
    if (reps < 1 || reps > MAX_REPS || (reps > 1 && !repeatable)) {
        fprintf(stderr,
                "stepx-bench: --reps R: 1 to %d, and only with pingpong, "
                "fanin or idlemsg\n",
                MAX_REPS);
        return 2;
    }
    if (idle_k < 0 || (idle_k == 0 && strcmp(name, "idlemsg") == 0) ||
        (idle_k > 0 &&
         (strcmp(name, "store") == 0 || strcmp(name, "recover") == 0 ||
          strcmp(name, "idle") == 0 || strcmp(name, "spawnidle") == 0 ||
          strcmp(name, "submit") == 0 || strcmp(name, "timers") == 0))) {
        fprintf(stderr, "stepx-bench: %s: --idle K %s\n", name,
                idle_k == 0 ? "(K >= 1) is needed" : "does not apply");
        return 2;
    }
    if (strcmp(name, "recover") == 0) {
        /* Its own engines, the first in a child: before any thread here. */
        char extra[512] = "";
        double secs = 0;
        unsigned nw = 0;
        int ok = recover(arg_n, workers, extra, sizeof extra, &secs, &nw);
        double ns = secs * 1e9 / (double)arg_n;
        printf("bench=%s runtime=stepx n=%lld secs=%.6f ns_per_op=%.2f "
               "ops_per_sec=%.0f ok=%d workers=%u%s\n",
               name, (long long)arg_n, secs, ns, ns > 0 ? 1e9 / ns : 0.0, ok,
               nw, extra);
        return ok ? 0 : 1;
    }
    /* relay-durable: the relay workload on an engine with a state store in
     * a fresh temporary directory, removed after. */
    int checkpoint = strcmp(name, "checkpoint") == 0;
    int durable = strcmp(name, "relay-durable") == 0 || checkpoint;
    char state_dir[] = "/tmp/stepx-bench-state-XXXXXX";
    if (durable && mkdtemp(state_dir) == NULL)
        return 1;
    sx_engine_config cfg = { .workers = workers,
                             .state_dir = durable ? state_dir : NULL };
    if (strcmp(name, "spawnidle") == 0 || strcmp(name, "submit") == 0 ||
        strcmp(name, "timers") == 0)
        cfg.keep_outcomes = 16;
    sx_engine *e;
    if (sx_engine_new(&cfg, &e) != 0)
        return 1;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        sx_engine_register(e, &types[i]);
    if ((strcmp(name, "relay") == 0 || (durable && !checkpoint)) &&
        sx_types_register_builtin(e) != 0)
        return 1;
    if (checkpoint && (sx_engine_register(e, &ck_types[0]) != 0 ||
                       sx_engine_register(e, &ck_types[1]) != 0))
        return 1;
    sx_engine_register_command(e, 256, "complete-now", complete_now, NULL);
    if (sx_engine_start(e) != 0) {
        if (durable) {
            fprintf(stderr, "stepx-bench: %s\n", sx_engine_state_error(e));
            remove_dir(state_dir);
        }
        return 1;
    }
    char idle_extra[256] = "";
    if (idle_k > 0 && !idle_spawn(e, idle_k, idle_extra, sizeof idle_extra))
        return 1;
    /* The scheduler figures below are the workload's: from here. */
    uint64_t steps0 = 0, parks0 = 0, steals0 = 0;
    {
        sx_worker_stats w[SX_MAX_WORKERS];
        sx_engine_stats st;
        sx_engine_stats_get(e, &st, w, SX_MAX_WORKERS);
        for (unsigned i = 0; i < st.workers && i < SX_MAX_WORKERS; i++) {
            parks0 += w[i].parks;
            steals0 += w[i].steals;
            steps0 += w[i].steps;
        }
    }
    sx_engine_stats st0;
    sx_engine_stats_get(e, &st0, NULL, 0);
    int64_t n = arg_n;
    int ok = 0;
    char extra[512] = "";
    double figure = -1;   /* ns_per_op when the workload sets its own */
    double secs_own = -1; /* the time, when the workload takes its own */
    double cpu0 = cpu_secs();
    double t0 = now_s();
    if (strcmp(name, "yield") == 0) {
        sx_pid p;
        int64_t got = 0;
        ok = sx_engine_submit(e, "yield", "run", NULL, 0, &p) == 0 &&
             wait_int(e, p, &got) == 0 && got == n;
    } else if (strcmp(name, "ring") == 0) {
        ok = token_ring(e, 503, n);
    } else if (repeatable) {
        ok = repeated(e, name, n, extra, sizeof(extra), &secs_own);
    } else if (strcmp(name, "skynet") == 0) {
        uint8_t b0[SX_PAYLOAD_INT_MAX], b1[SX_PAYLOAD_INT_MAX];
        sx_payload in[2] = { sx_payload_int(b0, 0), sx_payload_int(b1, n) };
        sx_pid root;
        int64_t sum = 0;
        ok = sx_engine_submit(e, "sky", "run", in, 2, &root) == 0 &&
             wait_int(e, root, &sum) == 0 && sum == n * (n - 1) / 2;
    } else if (strcmp(name, "spawnidle") == 0) {
        ok = spawn_many(e, n, 1);
    } else if (strcmp(name, "submit") == 0) {
        ok = spawn_many(e, n, 0);
    } else if (strcmp(name, "wake") == 0) {
        ok = wake(e, n, extra, sizeof(extra), &figure);
    } else if (strcmp(name, "timers") == 0) {
        ok = timers(e, n, extra, sizeof(extra), &secs_own);
    } else if (checkpoint) {
        ok = checkpoint_bench(e, n, extra, sizeof(extra), &figure);
    } else if (strcmp(name, "relay") == 0 || durable) {
        relay_threads = durable;
        ok = relay(e, n, extra, sizeof(extra), &secs_own);
        if (durable)
            store_figures(e, extra, sizeof(extra));
    } else if (strcmp(name, "store") == 0) {
#ifdef SX_BENCH_SHARED
        fprintf(stderr, "stepx-bench: store drives the engine's internal "
                        "store: it is in stepx-bench, not in this build\n");
        ok = 0;
#else
        ok = store_bench(n, store_window, extra, sizeof(extra), &secs_own);
#endif
    } else {
        ok = idle(e, n, extra, sizeof(extra), &figure);
    }
    double secs = secs_own >= 0 ? secs_own : now_s() - t0;
    /* The CPU time of the whole process (every thread) over the workload,
     * unless the workload reports its own: on a shared host the time of a
     * run stretches while its threads wait for a core, its CPU time much
     * less. */
    double cpu = cpu_secs() - cpu0;
    if (strstr(extra, " cpu_secs=") == NULL) {
        size_t l = strlen(extra);
        snprintf(extra + l, sizeof(extra) - l, " cpu_secs=%.6f", cpu);
    }
    if (strcmp(name, "idle") != 0) {
        /* Scheduler figures for the whole workload: how often workers
         * parked (each park after the first is a wake-up) and stole. */
        sx_worker_stats w[SX_MAX_WORKERS];
        sx_engine_stats st;
        sx_engine_stats_get(e, &st, w, SX_MAX_WORKERS);
        uint64_t parks = 0, steals = 0, steps = 0;
        for (unsigned i = 0; i < st.workers && i < SX_MAX_WORKERS; i++) {
            parks += w[i].parks;
            steals += w[i].steals;
            steps += w[i].steps;
        }
        parks -= parks0, steals -= steals0, steps -= steps0;
        size_t l = strlen(extra);
        snprintf(extra + l, sizeof(extra) - l,
                 " steps=%llu parks=%llu steals=%llu",
                 (unsigned long long)steps, (unsigned long long)parks,
                 (unsigned long long)steals);
    }
    if (idle_k > 0)
        ok = idle_end(e, idle_extra, sizeof idle_extra) && ok;
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
    if (durable)
        remove_dir(state_dir);
    double ns = figure >= 0 ? figure : secs * 1e9 / (double)n;
    printf("bench=%s runtime=stepx n=%lld secs=%.6f ns_per_op=%.2f "
           "ops_per_sec=%.0f ok=%d workers=%u%s%s\n",
           name, (long long)n, secs, ns, ns > 0 ? 1e9 / ns : 0.0, ok,
           st0.workers, extra, idle_extra);
    return ok ? 0 : 1;
}

/* examples/demo.c — stepx-demo: the engine API without the daemon (the
 * README's run command drives stepxd with scripts/demo.sh instead). It
 * runs three small workloads of processes on one engine and prints what
 * happened, checking each result:
 *   counters — 10,000 processes that each yield a no-op 10 times;
 *   ring     — 100 processes pass a token 100,000 hops with SX_CMD_SEND;
 *   tree     — a 10-ary tree of depth 4 built with SX_CMD_SPAWN_WAIT
 *              (11,111 processes) that sums its 10,000 leaves.
 * Exit status 0 only if every check passed. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <stepx/stepx.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const sx_payload nil = { NULL, 0 };

/* ---- counter: yields a no-op n times, then DONE with n ---- */

typedef struct {
    int64_t n, left;
} counter_state;

static int counter_init(void *st, const sx_init_ctx *ctx, const char *method,
                        const sx_payload *in, size_t n_in)
{
    (void)ctx, (void)method;
    counter_state *s = st;
    if (n_in != 1 || sx_payload_get_int(in[0], &s->n) != 0 || s->n < 0)
        return SX_EINVAL;
    s->left = s->n;
    return 0;
}

static int counter_step(void *st, const sx_event *ev, size_t n_ev,
                        sx_step_output *out)
{
    (void)ev, (void)n_ev;
    counter_state *s = st;
    if (s->left-- > 0)
        return sx_yield(out, SX_CMD_NOOP, 0, nil);
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(buf, s->n));
    return 0;
}

static const char *const run_only[] = { "run", NULL };
static const sx_process_type counter = { .name = "counter",
                                         .state_size = sizeof(counter_state),
                                         .init = counter_init,
                                         .step = counter_step,
                                         .methods = run_only };

/* ---- ring node: forwards a decremented token to the next node ---- */

typedef struct {
    sx_pid self, next;
    int64_t hops;
    int stopping;
} ring_state;

static int ring_init(void *st, const sx_init_ctx *ctx, const char *method,
                     const sx_payload *in, size_t n_in)
{
    (void)method, (void)in, (void)n_in;
    ring_state *s = st;
    s->self = sx_init_pid(ctx);
    return 0;
}

static int ring_send(sx_step_output *out, sx_pid to, const char *topic,
                     int64_t v, uint64_t tag)
{
    uint8_t buf[96];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof(buf));
    sx_pack_array(&pk, 3);
    sx_pack_pid(&pk, to);
    sx_pack_str(&pk, topic);
    sx_pack_int(&pk, v);
    return sx_yield(out, SX_CMD_SEND, tag, sx_pack_payload(&pk));
}

static int ring_step(void *st, const sx_event *ev, size_t n_ev,
                     sx_step_output *out)
{
    ring_state *s = st;
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    for (size_t i = 0; i < n_ev; i++) {
        if (ev[i].type == SX_EVENT_YIELD_COMPLETE && s->stopping) {
            /* The stop was passed on: finish. */
            sx_done(out, sx_payload_int(buf, s->hops));
            return 0;
        }
        if (ev[i].type != SX_EVENT_MESSAGE)
            continue;
        if (strcmp(ev[i].topic, "next") == 0) {
            sx_unpack u;
            sx_unpack_init(&u, ev[i].data);
            sx_unpack_pid(&u, &s->next);
        } else if (strcmp(ev[i].topic, "token") == 0) {
            int64_t t = 0;
            sx_payload_get_int(ev[i].data, &t);
            s->hops++;
            /* SX_TAG_NONE: fire and forget, no completion step. */
            ring_send(out, s->next, t > 1 ? "token" : "stop", t - 1,
                      SX_TAG_NONE);
        } else if (strcmp(ev[i].topic, "stop") == 0 ||
                   strcmp(ev[i].topic, SX_TOPIC_CANCEL) == 0) {
            /* Pass the stop on and finish when that send is done: DONE
             * in this step would discard the yield. */
            s->stopping = 1;
            sx_wait(out);
            return ring_send(out, s->next, "stop", 0, 1);
        }
    }
    sx_idle(out);
    return 0;
}

static const sx_process_type ring = { .name = "ring",
                                      .state_size = sizeof(ring_state),
                                      .init = ring_init,
                                      .step = ring_step };

/* ---- tree: spawns 10 children and sums their numbers ---- */

typedef struct {
    int64_t depth, num, sum;
    int got;
} tree_state;

static int tree_init(void *st, const sx_init_ctx *ctx, const char *method,
                     const sx_payload *in, size_t n_in)
{
    (void)ctx, (void)method;
    tree_state *s = st;
    if (n_in != 2 || sx_payload_get_int(in[0], &s->depth) != 0 ||
        sx_payload_get_int(in[1], &s->num) != 0)
        return SX_EINVAL;
    return 0;
}

static int tree_step(void *st, const sx_event *ev, size_t n_ev,
                     sx_step_output *out)
{
    tree_state *s = st;
    uint8_t buf[64];
    if (s->depth == 0) {
        sx_done(out, sx_payload_int(buf, s->num));
        return 0;
    }
    if (n_ev == 0 && s->got == 0) {
        for (int i = 0; i < 10; i++) {
            sx_pack pk;
            sx_pack_init_fixed(&pk, buf, sizeof(buf));
            sx_pack_array(&pk, 3);
            sx_pack_str(&pk, "tree");
            sx_pack_str(&pk, "run");
            sx_pack_array(&pk, 2);
            sx_pack_int(&pk, s->depth - 1);
            sx_pack_int(&pk, s->num * 10 + i);
            int rc = sx_yield(out, SX_CMD_SPAWN_WAIT, (uint64_t)i,
                              sx_pack_payload(&pk));
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    for (size_t i = 0; i < n_ev; i++) {
        int64_t v = 0;
        if (ev[i].error != 0 || sx_payload_get_int(ev[i].data, &v) != 0) {
            sx_fail(out, "a child failed");
            return 0;
        }
        s->sum += v;
        s->got++;
    }
    if (s->got == 10)
        sx_done(out, sx_payload_int(buf, s->sum));
    else
        sx_wait(out);
    return 0;
}

static const sx_process_type tree = { .name = "tree",
                                      .state_size = sizeof(tree_state),
                                      .init = tree_init,
                                      .step = tree_step };

/* ---- the workloads ---- */

static int run_counters(sx_engine *e)
{
    enum { N = 10000, STEPS = 10 };
    static sx_pid pids[N];
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(buf, STEPS);
    double t0 = now_s();
    for (int i = 0; i < N; i++)
        if (sx_engine_submit(e, "counter", "run", &in, 1, &pids[i]) != 0)
            return 1;
    int bad = 0;
    for (int i = 0; i < N; i++) {
        sx_result r;
        int64_t v = -1;
        if (sx_engine_wait(e, pids[i], 10000, &r) != 0 || r.error != 0 ||
            sx_payload_get_int(r.value, &v) != 0 || v != STEPS ||
            r.steps != STEPS + 1)
            bad++;
        sx_result_free(&r);
    }
    printf("counters: %d processes x %d yields in %.3f s, %d wrong\n", N, STEPS,
           now_s() - t0, bad);
    return bad != 0;
}

static int run_ring(sx_engine *e)
{
    enum { N = 100, HOPS = 100000 };
    sx_pid pids[N];
    double t0 = now_s();
    for (int i = 0; i < N; i++)
        if (sx_engine_submit(e, "ring", "run", NULL, 0, &pids[i]) != 0)
            return 1;
    for (int i = 0; i < N; i++) {
        uint8_t buf[64];
        sx_pack pk;
        sx_pack_init_fixed(&pk, buf, sizeof(buf));
        sx_pack_pid(&pk, pids[(i + 1) % N]);
        if (sx_engine_send(e, SX_PID_NONE, pids[i], "next",
                           sx_pack_payload(&pk)) != 0)
            return 1;
    }
    uint8_t tb[SX_PAYLOAD_INT_MAX];
    if (sx_engine_send(e, SX_PID_NONE, pids[0], "token",
                       sx_payload_int(tb, HOPS)) != 0)
        return 1;
    int64_t total = 0;
    for (int i = 0; i < N; i++) {
        sx_result r;
        int64_t v = 0;
        if (sx_engine_wait(e, pids[i], 10000, &r) == 0 && r.error == 0 &&
            sx_payload_get_int(r.value, &v) == 0)
            total += v;
        sx_result_free(&r);
    }
    double dt = now_s() - t0;
    printf("ring: %d processes passed a token %lld hops in %.3f s "
           "(%.0f ns/hop)\n",
           N, (long long)total, dt, dt * 1e9 / (double)HOPS);
    return total != HOPS;
}

static int run_tree(sx_engine *e)
{
    uint8_t b0[SX_PAYLOAD_INT_MAX], b1[SX_PAYLOAD_INT_MAX];
    sx_payload in[2] = { sx_payload_int(b0, 4), sx_payload_int(b1, 0) };
    sx_pid root;
    double t0 = now_s();
    if (sx_engine_submit(e, "tree", "run", in, 2, &root) != 0)
        return 1;
    sx_result r;
    int64_t sum = -1;
    if (sx_engine_wait(e, root, 30000, &r) != 0)
        return 1;
    sx_payload_get_int(r.value, &sum);
    sx_result_free(&r);
    printf("tree: 11111 processes, sum of 10000 leaves = %lld (expected "
           "49995000) in %.3f s\n",
           (long long)sum, now_s() - t0);
    return sum != 49995000;
}

int main(void)
{
    sx_engine *e;
    if (sx_engine_new(NULL, &e) != 0 || sx_engine_register(e, &counter) != 0 ||
        sx_engine_register(e, &ring) != 0 ||
        sx_engine_register(e, &tree) != 0 || sx_engine_start(e) != 0) {
        fprintf(stderr, "stepx-demo: engine set-up failed\n");
        return 1;
    }
    int bad = run_counters(e) + run_ring(e) + run_tree(e);
    sx_engine_stats st;
    sx_worker_stats ws[SX_MAX_WORKERS];
    sx_engine_stats_get(e, &st, ws, SX_MAX_WORKERS);
    printf("engine: %u workers, %llu processes submitted, %llu completed, "
           "%llu failed, %llu messages, %llu live\n",
           st.workers, (unsigned long long)st.submitted,
           (unsigned long long)st.completed, (unsigned long long)st.failed,
           (unsigned long long)st.messages, (unsigned long long)st.live);
    for (unsigned i = 0; i < st.workers; i++)
        printf(
            "  worker %u: %llu steps, %llu steals (%llu processes), %llu "
            "parks, %llu wake-ups\n",
            i, (unsigned long long)ws[i].steps,
            (unsigned long long)ws[i].steals, (unsigned long long)ws[i].stolen,
            (unsigned long long)ws[i].parks, (unsigned long long)ws[i].wakeups);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
    printf(bad ? "stepx-demo: FAILED\n" : "stepx-demo: all checks passed\n");
    return bad ? 1 : 0;
}

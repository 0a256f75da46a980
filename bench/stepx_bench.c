/* bench/stepx_bench.c — stepx-bench: the stepx side of the benchmark suite
 * (../shared/design/BENCHMARKS.md). One workload per run:
 *
 *   stepx-bench <name> <n> [--workers K]
 *
 * prints one line
 *   bench=<name> runtime=stepx n=<n> secs=<s> ns_per_op=<ns>
 *   ops_per_sec=<ops> ok=<1|0> [key=value ...]
 * and nothing else on stdout. ok=1 only when the workload checked its own
 * result. Workloads: yield, ring, pingpong, skynet, spawnidle, submit.
 */
#include <stdio.h>
#include <stdlib.h>
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
static int64_t arg_n;

static int send_tagged(sx_step_output *out, sx_pid to, int64_t v, uint64_t tag)
{
    uint8_t buf[64];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof(buf));
    sx_pack_array(&pk, 3);
    sx_pack_pid(&pk, to);
    sx_pack_str(&pk, "t");
    sx_pack_int(&pk, v);
    return sx_yield(out, SX_CMD_SEND, tag, sx_pack_payload(&pk));
}

/* Fire and forget: no completion step for the sender. */
static int send_int(sx_step_output *out, sx_pid to, int64_t v)
{
    return send_tagged(out, to, v, SX_TAG_NONE);
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

/* ---- ring / pingpong: a token passed between processes ---- */

typedef struct {
    sx_pid next;
    int64_t seen;
    int stopping;
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
        if (ev[i].type == SX_EVENT_YIELD_COMPLETE && s->stopping)
            return done_int(out, s->seen); /* the stop was passed on */
        if (ev[i].type != SX_EVENT_MESSAGE)
            continue;
        if (ev[i].topic[0] == 'n') { /* "next": who to forward to */
            sx_unpack u;
            sx_unpack_init(&u, ev[i].data);
            sx_unpack_pid(&u, &s->next);
            continue;
        }
        int64_t t = 0;
        sx_payload_get_int(ev[i].data, &t);
        s->seen++;
        if (t <= 0) {
            /* The end: pass the stop on, and finish once that send is
             * done (DONE in this step would discard the yield). */
            s->stopping = 1;
            sx_wait(out);
            return send_tagged(out, s->next, -1, 1);
        }
        send_int(out, s->next, t - 1);
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

static int idle_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st;
    for (size_t i = 0; i < n; i++)
        if (ev[i].type == SX_EVENT_MESSAGE)
            return done_int(out, 1);
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
    if (p == NULL)
        return 0;
    for (int64_t i = 0; i < m; i++)
        if (sx_engine_submit(e, "ring", "run", NULL, 0, &p[i]) != 0)
            return 0;
    for (int64_t i = 0; i < m; i++)
        send_next(e, p[i], p[(i + 1) % m]);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_engine_send(e, SX_PID_NONE, p[0], "t", sx_payload_int(b, n - 1));
    /* Every process sees the n tokens between them plus the final stop
     * (the first to see t = 0 sends the stop around once more). */
    int64_t total = 0;
    for (int64_t i = 0; i < m; i++) {
        int64_t v = 0;
        if (wait_int(e, p[i], &v) != 0)
            return 0;
        total += v;
    }
    free(p);
    return total == n + m - 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: stepx-bench <yield|ring|pingpong|skynet|"
                        "spawnidle|submit> <n> [--workers K]\n");
        return 2;
    }
    const char *name = argv[1];
    arg_n = atoll(argv[2]);
    unsigned workers = 0;
    for (int i = 3; i + 1 < argc; i++)
        if (strcmp(argv[i], "--workers") == 0)
            workers = (unsigned)atoi(argv[i + 1]);
    if (arg_n <= 0) {
        fprintf(stderr, "stepx-bench: n must be positive\n");
        return 2;
    }
    sx_engine_config cfg = { .workers = workers };
    if (strcmp(name, "spawnidle") == 0 || strcmp(name, "submit") == 0)
        cfg.keep_outcomes = 16;
    sx_engine *e;
    if (sx_engine_new(&cfg, &e) != 0)
        return 1;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        sx_engine_register(e, &types[i]);
    sx_engine_register_command(e, 256, "complete-now", complete_now, NULL);
    if (sx_engine_start(e) != 0)
        return 1;
    int64_t n = arg_n;
    int ok = 0;
    double t0 = now_s();
    if (strcmp(name, "yield") == 0) {
        sx_pid p;
        int64_t got = 0;
        ok = sx_engine_submit(e, "yield", "run", NULL, 0, &p) == 0 &&
             wait_int(e, p, &got) == 0 && got == n;
    } else if (strcmp(name, "ring") == 0) {
        ok = token_ring(e, 503, n);
    } else if (strcmp(name, "pingpong") == 0) {
        ok = token_ring(e, 2, n);
    } else if (strcmp(name, "skynet") == 0) {
        uint8_t b0[SX_PAYLOAD_INT_MAX], b1[SX_PAYLOAD_INT_MAX];
        sx_payload in[2] = { sx_payload_int(b0, 0), sx_payload_int(b1, n) };
        sx_pid root;
        int64_t sum = 0;
        ok = sx_engine_submit(e, "sky", "run", in, 2, &root) == 0 &&
             wait_int(e, root, &sum) == 0 && sum == n * (n - 1) / 2;
    } else if (strcmp(name, "spawnidle") == 0 || strcmp(name, "submit") == 0) {
        int idle = name[1] == 'p';
        sx_pid *p = calloc((size_t)n, sizeof(*p));
        ok = p != NULL;
        for (int64_t i = 0; ok && i < n; i++)
            ok = sx_engine_submit(e, idle ? "idle" : "once", "run", NULL, 0,
                                  &p[i]) == 0;
        for (int64_t i = 0; ok && idle && i < n; i++)
            ok = sx_engine_send(e, SX_PID_NONE, p[i], "go", nil) == 0;
        sx_engine_stats st;
        do {
            sx_engine_stats_get(e, &st, NULL, 0);
        } while (ok && st.completed < (uint64_t)n);
        ok = ok && st.completed == (uint64_t)n && st.failed == 0;
        free(p);
    } else {
        fprintf(stderr, "stepx-bench: unknown workload '%s'\n", name);
        return 2;
    }
    double secs = now_s() - t0;
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
    printf("bench=%s runtime=stepx n=%lld secs=%.6f ns_per_op=%.2f "
           "ops_per_sec=%.0f ok=%d workers=%u\n",
           name, (long long)n, secs, secs * 1e9 / (double)n, (double)n / secs,
           ok, cfg.workers);
    return ok ? 0 : 1;
}

/* tests/engine/test_limits.c — the engine's size limits: max_result (a
 * result over it finishes the process with SX_ETOOLARGE, which wait,
 * watch, spawn-and-wait and @exit all see) and the outcome store's byte
 * budget, keep_outcome_bytes (the oldest outcomes go first while the
 * bytes held are over it; the newest stays even when it alone is over).
 *
 * A "sized" process finishes DONE with a result of exactly the number of
 * bytes it was given (a msgpack bin of that total size), or fails with a
 * message of that many bytes (method "fail"), or waits for a message
 * before it finishes (method "idle"). A "parent" spawn-and-waits one
 * sized child and finishes with [error, message, result length] of the
 * answer it got. A "gate" process holds its worker in its step until the
 * case opens its gate, to make every other process run on the other
 * worker.
 *
 * Threads: cases run one at a time on the main thread; steps run on the
 * engine's workers; the mailbox and watch callbacks on the finishing
 * worker. What they share is atomic or under a mutex.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stepx/stepx.h>

#include "tests/support/support.h"

#define WAIT_MS 10000

/* ---- sized ---- */

typedef struct {
    int64_t len;
    bool fail;
} sized_st;

static int sized_init(void *st, const sx_init_ctx *c, const char *m,
                      const sx_payload *in, size_t n)
{
    (void)c;
    sized_st *s = st;
    if (n != 1 || sx_payload_get_int(in[0], &s->len) != 0 || s->len < 0)
        return SX_EINVAL;
    s->fail = strcmp(m, "fail") == 0;
    return 0;
}

/* A payload of exactly len bytes (len >= 3: a bin; 1: the int 1; 2: an
 * empty bin; 0: nil), written with malloc; the caller frees p->data. */
static sx_payload sized_payload(size_t len)
{
    uint8_t *b = malloc(len > 0 ? len : 1);
    CHECK(b != NULL);
    size_t h;
    if (len == 0)
        return (sx_payload){ b, 0 };
    if (len == 1) {
        b[0] = 1;
        return (sx_payload){ b, 1 };
    }
    if (len - 2 <= 0xff) {
        b[0] = 0xc4, b[1] = (uint8_t)(len - 2), h = 2;
    } else if (len - 3 <= 0xffff) {
        b[0] = 0xc5, b[1] = (uint8_t)((len - 3) >> 8);
        b[2] = (uint8_t)(len - 3), h = 3;
    } else {
        size_t d = len - 5;
        b[0] = 0xc6, b[1] = (uint8_t)(d >> 24), b[2] = (uint8_t)(d >> 16);
        b[3] = (uint8_t)(d >> 8), b[4] = (uint8_t)d, h = 5;
    }
    memset(b + h, 0x5a, len - h);
    return (sx_payload){ b, len };
}

static int sized_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    sized_st *s = st;
    bool go = true;
    if (s->len < 0) { /* "idle": after the first message */
        go = false;
        for (size_t i = 0; i < n; i++)
            go = go || ev[i].type == SX_EVENT_MESSAGE;
        if (!go) {
            sx_idle(out);
            return 0;
        }
        s->len = -s->len;
    }
    if (s->fail) {
        char *m = malloc((size_t)s->len + 1);
        CHECK(m != NULL);
        memset(m, 'm', (size_t)s->len);
        m[s->len] = 0;
        sx_fail(out, m);
        free(m);
        return 0;
    }
    sx_payload v = sized_payload((size_t)s->len);
    sx_done(out, v);
    free((void *)v.data);
    return 0;
}

static int idle_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    int rc = sized_init(st, c, m, in, n);
    ((sized_st *)st)->len = -((sized_st *)st)->len;
    ((sized_st *)st)->fail = false;
    return rc;
}

/* ---- parent: spawn-and-wait one sized child ---- */

typedef struct {
    int64_t len;
    bool started;
} parent_st;

static int parent_init(void *st, const sx_init_ctx *c, const char *m,
                       const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    parent_st *s = st;
    if (n != 1 || sx_payload_get_int(in[0], &s->len) != 0)
        return SX_EINVAL;
    return 0;
}

static int parent_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    parent_st *s = st;
    uint8_t b[64];
    sx_pack pk;
    if (!s->started) {
        s->started = true;
        sx_pack_init_fixed(&pk, b, sizeof b);
        sx_pack_array(&pk, 3);
        sx_pack_str(&pk, "sized");
        sx_pack_str(&pk, "run");
        sx_pack_array(&pk, 1);
        sx_pack_int(&pk, s->len);
        CHECK_RC(pk.err, 0);
        return sx_yield(out, SX_CMD_SPAWN_WAIT, 1, sx_pack_payload(&pk));
    }
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type != SX_EVENT_YIELD_COMPLETE)
            continue;
        uint8_t r[512];
        sx_pack_init_fixed(&pk, r, sizeof r);
        sx_pack_array(&pk, 3);
        sx_pack_int(&pk, ev[i].error);
        sx_pack_str(&pk, ev[i].error_msg);
        sx_pack_uint(&pk, ev[i].data.len);
        CHECK_RC(pk.err, 0);
        sx_done(out, sx_pack_payload(&pk));
        return 0;
    }
    sx_wait(out);
    return 0;
}

/* ---- gate: holds its worker until opened ---- */

static atomic_int gate_open[2], gate_in[2];

static int gate_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    int64_t *k = st;
    if (n != 1 || sx_payload_get_int(in[0], k) != 0 || *k < 0 || *k > 1)
        return SX_EINVAL;
    return 0;
}

static int gate_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)ev, (void)n;
    int64_t k = *(int64_t *)st;
    /* release/acquire: the case's view of the worker being held. */
    atomic_store_explicit(&gate_in[k], 1, memory_order_release);
    double end = sx_test_now_ms() + 30000;
    while (!atomic_load_explicit(&gate_open[k], memory_order_acquire) &&
           sx_test_now_ms() < end)
        tx_sleep_ms(1);
    sx_done(out, (sx_payload){ NULL, 0 });
    return 0;
}

/* ---- coder: fails with sx_fail_code and the code it was given ---- */

static int coder_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)ev, (void)n;
    sx_fail_code(out, (int)*(int64_t *)st, "coded");
    return 0;
}

static const char *const sized_m[] = { "run", "fail", NULL };
static const char *const run_m[] = { "run", NULL };

static const sx_process_type types[] = {
    { .name = "sized",
      .state_size = sizeof(sized_st),
      .init = sized_init,
      .step = sized_step,
      .methods = sized_m },
    { .name = "sized_idle",
      .state_size = sizeof(sized_st),
      .init = idle_init,
      .step = sized_step,
      .methods = run_m },
    { .name = "parent",
      .state_size = sizeof(parent_st),
      .init = parent_init,
      .step = parent_step,
      .methods = run_m },
    { .name = "gate",
      .state_size = sizeof(int64_t),
      .init = gate_init,
      .step = gate_step,
      .methods = run_m },
    { .name = "coder",
      .state_size = sizeof(int64_t),
      .init = parent_init, /* [int] into the state's first int64 */
      .step = coder_step,
      .methods = run_m },
};

static sx_engine *up(const sx_engine_config *cfg)
{
    return tx_engine_up(cfg, types, sizeof types / sizeof types[0]);
}

static sx_pid submit(sx_engine *e, const char *type, const char *method,
                     int64_t len)
{
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(b, len);
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, type, method, &in, 1, &pid), 0);
    return pid;
}

/* Runs sized.method with len and waits for its outcome into *r. */
static void run_sized(sx_engine *e, const char *method, int64_t len,
                      sx_pid *pid, sx_result *r)
{
    *pid = submit(e, "sized", method, len);
    CHECK_RC(sx_engine_wait(e, *pid, WAIT_MS, r), 0);
}

static uint64_t bytes_held(sx_engine *e, uint64_t *records)
{
    sx_engine_stats st;
    CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
    if (records != NULL)
        *records = st.outcomes;
    return st.outcome_bytes;
}

/* ---- max_result ---- */

/* Property: a result of exactly max_result bytes is the outcome; one byte
 * more finishes the process with SX_ETOOLARGE, no value, and a message
 * naming both sizes; it counts as failed. */
static void test_max_result_exact(void)
{
    sx_engine_config cfg = { .workers = 1, .max_result = 1000 };
    sx_engine *e = up(&cfg);
    sx_pid pid;
    sx_result r;
    run_sized(e, "run", 1000, &pid, &r);
    CHECK_RC(r.error, 0);
    CHECK_EQ_U64(r.value.len, 1000);
    sx_result_free(&r);
    run_sized(e, "run", 1001, &pid, &r);
    CHECK_RC(r.error, SX_ETOOLARGE);
    CHECK_EQ_U64(r.value.len, 0);
    CHECK_STR(r.error_msg,
              "result of 1001 bytes is over the limit of 1000 (max_result)");
    sx_result_free(&r);
    run_sized(e, "run", 5 << 20, &pid, &r);
    CHECK_RC(r.error, SX_ETOOLARGE);
    CHECK_STR(r.error_msg, "result of 5242880 bytes is over the limit of "
                           "1000 (max_result)");
    sx_result_free(&r);
    sx_engine_stats st;
    CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
    CHECK_EQ_U64(st.completed, 1);
    CHECK_EQ_U64(st.failed, 2);
    tx_engine_down(e);
}

/* The last @exit a mailbox got: its code (0 for ok) and message. */
typedef struct {
    pthread_mutex_t mu;
    int exits;
    int64_t code;
    char msg[160];
} exit_box;

static void exit_fn(void *user, const sx_message *m)
{
    exit_box *b = user;
    if (strcmp(m->topic, SX_TOPIC_EXIT) != 0)
        return;
    int64_t code = 0;
    char msg[160] = "";
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, m->data);
    if (sx_unpack_map(&u, &n) == 0) {
        for (uint32_t i = 0; i < n; i++) {
            const char *k;
            size_t kn;
            if (sx_unpack_str(&u, &k, &kn) != 0)
                break;
            const char *v;
            size_t vn;
            if (kn == 4 && memcmp(k, "code", 4) == 0)
                sx_unpack_int(&u, &code);
            else if (kn == 7 && memcmp(k, "message", 7) == 0 &&
                     sx_unpack_str(&u, &v, &vn) == 0)
                snprintf(msg, sizeof msg, "%.*s", (int)vn, v);
            else
                sx_unpack_skip(&u);
        }
    }
    pthread_mutex_lock(&b->mu);
    b->code = code;
    snprintf(b->msg, sizeof b->msg, "%s", msg);
    b->exits++;
    pthread_mutex_unlock(&b->mu);
}

typedef struct {
    atomic_int calls;
    atomic_int error;
    _Atomic size_t len;
} watch_seen;

static void watch_fn(void *user, sx_pid target, const sx_result *r)
{
    (void)target;
    watch_seen *w = user;
    /* relaxed stores, then a release count: the case reads after it. */
    atomic_store_explicit(&w->error, r->error, memory_order_relaxed);
    atomic_store_explicit(&w->len, r->value.len, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->calls, 1, memory_order_release);
}

/* Property: every observer of a process whose result is over max_result
 * sees SX_ETOOLARGE: a watch and a monitor set while it runs, a parent
 * in spawn-and-wait (its completion's error and message), and wait. */
static void test_max_result_seen_by_all(void)
{
    sx_engine_config cfg = { .workers = 2, .max_result = 4096 };
    sx_engine *e = up(&cfg);
    static exit_box b = { .mu = PTHREAD_MUTEX_INITIALIZER };
    watch_seen w = { 0 };
    sx_pid mb;
    CHECK_RC(sx_engine_mailbox_new(e, exit_fn, &b, &mb), 0);
    sx_pid p = submit(e, "sized_idle", "run", 5000);
    CHECK_RC(sx_engine_monitor(e, mb, p), 0);
    CHECK_RC(sx_engine_watch(e, p, watch_fn, &w), 0);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, p, "go", (sx_payload){ NULL, 0 }),
             0);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, p, WAIT_MS, &r), 0);
    CHECK_RC(r.error, SX_ETOOLARGE);
    sx_result_free(&r);
    double end = sx_test_now_ms() + WAIT_MS;
    for (;;) {
        pthread_mutex_lock(&b.mu);
        int exits = b.exits;
        pthread_mutex_unlock(&b.mu);
        /* acquire: pairs with watch_fn's release. */
        if (exits == 1 &&
            atomic_load_explicit(&w.calls, memory_order_acquire) == 1)
            break;
        CHECK(sx_test_now_ms() < end);
        tx_sleep_ms(1);
    }
    CHECK_RC(atomic_load_explicit(&w.error, memory_order_relaxed),
             SX_ETOOLARGE);
    CHECK_EQ_U64(atomic_load_explicit(&w.len, memory_order_relaxed), 0);
    pthread_mutex_lock(&b.mu);
    CHECK_RC((int)b.code, SX_ETOOLARGE);
    CHECK_STR(b.msg,
              "result of 5000 bytes is over the limit of 4096 (max_result)");
    pthread_mutex_unlock(&b.mu);
    /* spawn-and-wait: the parent's completion. */
    sx_pid q = submit(e, "parent", "run", 4097);
    CHECK_RC(sx_engine_wait(e, q, WAIT_MS, &r), 0);
    CHECK_RC(r.error, 0);
    sx_unpack u;
    uint32_t three;
    int64_t err;
    const char *m;
    size_t mn;
    uint64_t len;
    sx_unpack_init(&u, r.value);
    CHECK_RC(sx_unpack_array(&u, &three), 0);
    CHECK_RC(sx_unpack_int(&u, &err), 0);
    CHECK_RC(sx_unpack_str(&u, &m, &mn), 0);
    CHECK_RC(sx_unpack_uint(&u, &len), 0);
    CHECK_RC((int)err, SX_ETOOLARGE);
    char msg[160];
    snprintf(msg, sizeof msg, "%.*s", (int)mn, m);
    CHECK_STR(msg, "result of 4097 bytes is over the limit of 4096 "
                   "(max_result)");
    CHECK_EQ_U64(len, 0);
    sx_result_free(&r);
    /* The same parent with a child within the limit gets its result. */
    q = submit(e, "parent", "run", 4096);
    CHECK_RC(sx_engine_wait(e, q, WAIT_MS, &r), 0);
    sx_unpack_init(&u, r.value);
    CHECK_RC(sx_unpack_array(&u, &three), 0);
    CHECK_RC(sx_unpack_int(&u, &err), 0);
    CHECK_RC(sx_unpack_nil(&u), 0);
    CHECK_RC(sx_unpack_uint(&u, &len), 0);
    CHECK_EQ_INT(err, 0);
    CHECK_EQ_U64(len, 4096);
    sx_result_free(&r);
    CHECK_RC(sx_engine_mailbox_free(e, mb), 0);
    tx_engine_down(e);
}

/* Property: 0 in the configuration stands for the defaults (4 MiB for
 * max_result, 64 MiB for keep_outcome_bytes), which sx_engine_config_get
 * reports, and a result of 4 MiB + 1 is too large by default; SIZE_MAX
 * means no limit. */
static void test_limit_defaults(void)
{
    sx_engine_config cfg = { .workers = 1 }, got;
    sx_engine *e = up(&cfg);
    CHECK_RC(sx_engine_config_get(e, &got), 0);
    CHECK_EQ_U64(got.max_result, SX_MAX_RESULT_DEFAULT);
    CHECK_EQ_U64(got.keep_outcome_bytes, SX_KEEP_OUTCOME_BYTES_DEFAULT);
    CHECK_EQ_U64(got.keep_outcomes, 10000);
    CHECK_RC(sx_engine_config_get(NULL, &got), SX_EINVAL);
    CHECK_RC(sx_engine_config_get(e, NULL), SX_EINVAL);
    sx_pid pid;
    sx_result r;
    run_sized(e, "run", (int64_t)SX_MAX_RESULT_DEFAULT, &pid, &r);
    CHECK_RC(r.error, 0);
    sx_result_free(&r);
    run_sized(e, "run", (int64_t)SX_MAX_RESULT_DEFAULT + 1, &pid, &r);
    CHECK_RC(r.error, SX_ETOOLARGE);
    sx_result_free(&r);
    tx_engine_down(e);
    cfg.max_result = SIZE_MAX;
    e = up(&cfg);
    run_sized(e, "run", (int64_t)SX_MAX_RESULT_DEFAULT * 2, &pid, &r);
    CHECK_RC(r.error, 0);
    CHECK_EQ_U64(r.value.len, SX_MAX_RESULT_DEFAULT * 2);
    sx_result_free(&r);
    tx_engine_down(e);
}

/* Property: sx_fail_code finishes the process with a negative code it is
 * given (SX_ETOOLARGE, -EIO) and with the message; 0 or a positive code is
 * SX_EFAILED. */
static void test_fail_code(void)
{
    sx_engine_config cfg = { .workers = 1 };
    sx_engine *e = up(&cfg);
    static const struct {
        int64_t code;
        int want;
    } cases[] = { { SX_ETOOLARGE, SX_ETOOLARGE },
                  { -EIO, -EIO },
                  { 0, SX_EFAILED },
                  { 7, SX_EFAILED } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sx_result r;
        CHECK_RC(sx_engine_wait(e, submit(e, "coder", "run", cases[i].code),
                                WAIT_MS, &r),
                 0);
        CHECK_RC(r.error, cases[i].want);
        CHECK_STR(r.error_msg, "coded");
        sx_result_free(&r);
    }
    tx_engine_down(e);
}

/* ---- keep_outcome_bytes ---- */

#define BUDGET ((size_t)1 << 20)
#define BIG ((int64_t)64 << 10)
/* What the store may run over its budget: the lag of each shard's count
 * (64 KiB, engine/core/outcome.c "Bytes") for 3 shards, and one outcome that a
 * put in flight has not pushed its share out for yet. */
#define SLACK ((uint64_t)4 * BIG)

/* Property: with a budget of 1 MiB and keep_outcomes far above, 200
 * outcomes of 64 KiB (results, and every 4th a failure message of 64 KiB,
 * which counts the same) never leave more than the budget held (and a
 * little slack); the oldest are gone (SX_ENOTFOUND) and the newest are
 * kept whole. Without the budget all 200 (12.5 MiB) would be kept. */
static void test_outcome_bytes_budget(void)
{
    sx_engine_config cfg = { .workers = 2, .keep_outcome_bytes = BUDGET };
    sx_engine *e = up(&cfg);
    enum { N = 200 };
    sx_pid pids[N];
    uint64_t peak = 0;
    for (int i = 0; i < N; i++) {
        sx_result r;
        run_sized(e, i % 4 == 3 ? "fail" : "run", BIG, &pids[i], &r);
        CHECK_RC(r.error, i % 4 == 3 ? SX_EFAILED : 0);
        sx_result_free(&r);
        uint64_t b = bytes_held(e, NULL);
        peak = b > peak ? b : peak;
    }
    CHECK(peak <= BUDGET + SLACK);
    uint64_t records;
    uint64_t held = bytes_held(e, &records);
    CHECK(held <= BUDGET + SLACK);
    CHECK(held >= BUDGET / 2);
    CHECK(records <= BUDGET / (size_t)BIG + 4);
    for (int i = 0; i < N - 40; i++) {
        sx_result r;
        CHECK_RC(sx_engine_wait(e, pids[i], 0, &r), SX_ENOTFOUND);
    }
    for (int i = N - 8; i < N; i++) {
        sx_result r;
        CHECK_RC(sx_engine_wait(e, pids[i], 0, &r), 0);
        if (i % 4 == 3)
            CHECK_EQ_U64(strlen(r.error_msg), (size_t)BIG);
        else
            CHECK_EQ_U64(r.value.len, (size_t)BIG);
        sx_result_free(&r);
    }
    tx_engine_down(e);
}

/* Property: the newest outcome stays even when it alone is over the
 * budget (3 MiB against 1 MiB), and goes with the next finish. */
static void test_outcome_bytes_newest_kept(void)
{
    sx_engine_config cfg = { .workers = 1,
                             .keep_outcome_bytes = BUDGET,
                             .max_result = SIZE_MAX };
    sx_engine *e = up(&cfg);
    sx_pid big, small;
    sx_result r;
    run_sized(e, "run", 3 << 20, &big, &r);
    sx_result_free(&r);
    CHECK_RC(sx_engine_wait(e, big, 0, &r), 0);
    CHECK_EQ_U64(r.value.len, (size_t)3 << 20);
    sx_result_free(&r);
    CHECK_EQ_U64(bytes_held(e, NULL), (uint64_t)3 << 20);
    run_sized(e, "run", 100, &small, &r);
    sx_result_free(&r);
    CHECK_RC(sx_engine_wait(e, big, 0, &r), SX_ENOTFOUND);
    CHECK_RC(sx_engine_wait(e, small, 0, &r), 0);
    sx_result_free(&r);
    CHECK_EQ_U64(bytes_held(e, NULL), 100);
    tx_engine_down(e);
}

/* Opens gate k and waits until its process has finished. */
static void gate_release(sx_engine *e, int k, sx_pid pid)
{
    atomic_store_explicit(&gate_open[k], 1, memory_order_release);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pid, WAIT_MS, &r), 0);
    sx_result_free(&r);
}

static sx_pid gate_hold(sx_engine *e, int k)
{
    atomic_store_explicit(&gate_open[k], 0, memory_order_relaxed);
    atomic_store_explicit(&gate_in[k], 0, memory_order_relaxed);
    sx_pid pid = submit(e, "gate", "run", k);
    /* acquire: pairs with gate_step's release. */
    TX_WAIT_UNTIL(atomic_load_explicit(&gate_in[k], memory_order_acquire),
                  WAIT_MS, 1000);
    return pid;
}

/* Property: the oldest outcomes go first across the workers' shards. 2
 * workers; a gate holds worker X, so 40 outcomes of 64 KiB finish on
 * worker Y and fill the budget; a second gate then holds Y (X is still
 * held, so Y runs it), the first opens, and 40 more finish on X. Those
 * push out Y's older ones, which no put of Y's own will ever evict: the
 * bytes held stay within the budget, every outcome of the first 40 is
 * gone and the newest of the second 40 are kept. Evicting only within
 * the putting shard would keep Y's 1 MiB and grow X's to 2.5 MiB. */
static void test_outcome_bytes_across_shards(void)
{
    sx_engine_config cfg = { .workers = 2, .keep_outcome_bytes = BUDGET };
    sx_engine *e = up(&cfg);
    enum { N = 40 };
    sx_pid first[N], second[N];
    sx_result r;
    sx_pid g0 = gate_hold(e, 0);
    for (int i = 0; i < N; i++) {
        run_sized(e, "run", BIG, &first[i], &r);
        sx_result_free(&r);
    }
    CHECK(bytes_held(e, NULL) <= BUDGET + SLACK);
    sx_pid g1 = gate_hold(e, 1);
    gate_release(e, 0, g0);
    for (int i = 0; i < N; i++) {
        run_sized(e, "run", BIG, &second[i], &r);
        sx_result_free(&r);
        CHECK(bytes_held(e, NULL) <= BUDGET + SLACK);
    }
    for (int i = 0; i < N; i++)
        CHECK_RC(sx_engine_wait(e, first[i], 0, &r), SX_ENOTFOUND);
    for (int i = N - 8; i < N; i++) {
        CHECK_RC(sx_engine_wait(e, second[i], 0, &r), 0);
        CHECK_EQ_U64(r.value.len, (size_t)BIG);
        sx_result_free(&r);
    }
    gate_release(e, 1, g1);
    tx_engine_down(e);
}

typedef struct {
    sx_engine *e;
    uint64_t seed;
    int bad;
} racer;

/* Submits and waits for 100 outcomes of 1 to 128 KiB, one at a time. */
static void *race_main(void *arg)
{
    racer *r = arg;
    for (int i = 0; i < 100; i++) {
        int64_t len = 1 + (int64_t)(sx_test_rng(&r->seed) % (128 << 10));
        bool fail = sx_test_rng(&r->seed) % 4 == 0;
        sx_pid pid;
        sx_result res;
        uint8_t b[SX_PAYLOAD_INT_MAX];
        sx_payload in = sx_payload_int(b, len);
        if (sx_engine_submit(r->e, "sized", fail ? "fail" : "run", &in, 1,
                             &pid) != 0) {
            r->bad++;
            continue;
        }
        int rc = sx_engine_wait(r->e, pid, WAIT_MS, &res);
        if (rc == SX_ENOTFOUND)
            continue; /* finished and pushed out before the wait looked */
        if (rc != 0 || res.error != (fail ? SX_EFAILED : 0) ||
            (fail ? strlen(res.error_msg) : res.value.len) != (size_t)len)
            r->bad++;
        if (rc == 0)
            sx_result_free(&res);
    }
    return NULL;
}

/* Property: 4 threads finishing outcomes of up to 128 KiB at once on 2
 * workers, with a budget of 512 KiB, get every outcome they wait for
 * whole (or SX_ENOTFOUND when it was pushed out first), and the bytes
 * held end within the budget and its slack: evictions across shards race
 * each other's and the owners' puts. */
static void test_outcome_bytes_concurrent(void)
{
    sx_engine_config cfg = { .workers = 2, .keep_outcome_bytes = BUDGET / 2 };
    sx_engine *e = up(&cfg);
    racer r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (racer){ e, 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1), 0 };
        CHECK(pthread_create(&th[i], NULL, race_main, &r[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(r[i].bad, 0);
    }
    CHECK(bytes_held(e, NULL) <= BUDGET / 2 + SLACK + (128 << 10));
    tx_engine_down(e);
}

static const sx_test_case cases[] = {
    { "max_result_exact", test_max_result_exact },
    { "max_result_seen_by_all", test_max_result_seen_by_all },
    { "limit_defaults", test_limit_defaults },
    { "fail_code", test_fail_code },
    { "outcome_bytes_budget", test_outcome_bytes_budget },
    { "outcome_bytes_newest_kept", test_outcome_bytes_newest_kept },
    { "outcome_bytes_across_shards", test_outcome_bytes_across_shards },
    { "outcome_bytes_concurrent", test_outcome_bytes_concurrent },
};

SX_TEST_MAIN(cases)

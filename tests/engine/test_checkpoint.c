/* tests/engine/test_checkpoint.c — checkpointed jobs (SX_TYPE_CHECKPOINTED
 * on an engine with a state store; docs/DURABILITY.md, "Checkpointed
 * types"): after a kill -9 a job resumes from its last step (init does not
 * run again, its state and step count go on), its sleeps keep their
 * deadlines (one due during the downtime fires at the start), messages
 * between checkpointed jobs and acknowledged messages from outside arrive
 * exactly once and in order, a command in flight at the crash runs again
 * and its handler can tell, and a stop leaves them to resume at the next
 * start.
 *
 * A crash is a child process killed with SIGKILL (tests/support/crash.h).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stepx/engine.h>

#include "tests/support/crash.h"
#include "tests/support/engine.h"
#include "tests/support/harness.h"
#include "tests/support/timing.h"
#include "tests/support/tmp.h"

static char dir[256];

/* What the types saw in this process (the parent's, after a crash). */
static _Atomic int g_inits;
static _Atomic int64_t g_first_count = -1;

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static sx_payload int_of(uint8_t buf[SX_PAYLOAD_INT_MAX], int64_t v)
{
    return sx_payload_int(buf, v);
}

static bool cancelled(const sx_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ev[i].type == SX_EVENT_MESSAGE &&
            strcmp(ev[i].topic, SX_TOPIC_CANCEL) == 0)
            return true;
    return false;
}

/* "counter": counts its steps up to its input, a 2 ms sleep between two;
 * finishes with the count. */
typedef struct {
    uint32_t count, target;
} counter_state;

static int counter_init(void *st, const sx_init_ctx *ctx, const char *method,
                        const sx_payload *in, size_t n)
{
    (void)ctx, (void)method;
    counter_state *c = st;
    int64_t t;
    if (n != 1 || sx_payload_get_int(in[0], &t) != 0 || t < 1)
        return SX_EINVAL;
    c->target = (uint32_t)t;
    atomic_fetch_add(&g_inits, 1);
    return 0;
}

static int counter_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    counter_state *c = st;
    if (cancelled(ev, n)) {
        sx_fail(out, "cancelled");
        return 0;
    }
    int64_t none = -1;
    atomic_compare_exchange_strong(&g_first_count, &none, (int64_t)c->count);
    c->count++;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    if (c->count >= c->target) {
        sx_done(out, int_of(b, c->count));
        return 0;
    }
    sx_yield(out, SX_CMD_SLEEP, 1, int_of(b, 2));
    sx_wait(out);
    return 0;
}

/* "napper": sleeps its input's ms, then finishes. */
typedef struct {
    int64_t ms;
    uint32_t phase;
} napper_state;

static int napper_init(void *st, const sx_init_ctx *ctx, const char *method,
                       const sx_payload *in, size_t n)
{
    (void)ctx, (void)method;
    napper_state *s = st;
    if (n != 1 || sx_payload_get_int(in[0], &s->ms) != 0)
        return SX_EINVAL;
    return 0;
}

static int napper_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    napper_state *s = st;
    if (cancelled(ev, n)) {
        sx_fail(out, "cancelled");
        return 0;
    }
    if (s->phase == 0) {
        uint8_t b[SX_PAYLOAD_INT_MAX];
        s->phase = 1;
        sx_yield(out, SX_CMD_SLEEP, 7, int_of(b, s->ms));
        sx_wait(out);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (ev[i].type == SX_EVENT_YIELD_COMPLETE && ev[i].tag == 7) {
            sx_done(out, (sx_payload){ NULL, 0 });
            return 0;
        }
    sx_wait(out);
    return 0;
}

/* "acc": takes messages "f" and "o" carrying 1, 2, 3, ... each (any
 * other order marks it bad); "end" finishes it with
 * [n_f, n_o, last_f, last_o, bad]. A step takes 4 ms: slower than its
 * senders, so that a crash finds messages delivered to its mailbox that
 * no checkpoint of it consumed yet (they are stored; lost otherwise). */
typedef struct {
    uint32_t n_f, n_o;
    int64_t last_f, last_o;
    uint32_t bad;
} acc_state;

static int acc_init(void *st, const sx_init_ctx *ctx, const char *method,
                    const sx_payload *in, size_t n)
{
    (void)st, (void)ctx, (void)method, (void)in, (void)n;
    return 0;
}

static int acc_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    acc_state *a = st;
    tx_sleep_ms(4);
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type != SX_EVENT_MESSAGE)
            continue;
        int64_t v = -1;
        sx_payload_get_int(ev[i].data, &v);
        if (strcmp(ev[i].topic, "f") == 0) {
            a->bad |= v != a->last_f + 1;
            a->last_f = v;
            a->n_f++;
        } else if (strcmp(ev[i].topic, "o") == 0) {
            a->bad |= v != a->last_o + 1;
            a->last_o = v;
            a->n_o++;
        } else if (strcmp(ev[i].topic, "end") == 0) {
            sx_pack pk;
            sx_pack_init(&pk);
            sx_pack_array(&pk, 5);
            sx_pack_uint(&pk, a->n_f);
            sx_pack_uint(&pk, a->n_o);
            sx_pack_int(&pk, a->last_f);
            sx_pack_int(&pk, a->last_o);
            sx_pack_uint(&pk, a->bad);
            sx_done(out, sx_pack_payload(&pk));
            sx_pack_fini(&pk);
            return 0;
        } else {
            sx_fail(out, ev[i].topic);
            return 0;
        }
    }
    sx_idle(out);
    return 0;
}

/* "feeder": sends "f" 1..n to its addressee, one per step, with a 1 ms
 * sleep after each; then finishes. Input: [to, n]. */
typedef struct {
    sx_pid to;
    uint32_t i, n;
} feeder_state;

static int feeder_init(void *st, const sx_init_ctx *ctx, const char *method,
                       const sx_payload *in, size_t n)
{
    (void)ctx, (void)method;
    feeder_state *f = st;
    sx_unpack u;
    int64_t k;
    if (n != 2)
        return SX_EINVAL;
    sx_unpack_init(&u, in[0]);
    if (sx_unpack_pid(&u, &f->to) != 0 || sx_payload_get_int(in[1], &k) != 0)
        return SX_EINVAL;
    f->n = (uint32_t)k;
    return 0;
}

static int feeder_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    feeder_state *f = st;
    if (cancelled(ev, n)) {
        sx_fail(out, "cancelled");
        return 0;
    }
    if (f->i >= f->n) {
        sx_done(out, (sx_payload){ NULL, 0 });
        return 0;
    }
    uint8_t b[SX_PAYLOAD_INT_MAX], c[SX_PAYLOAD_INT_MAX];
    f->i++;
    sx_send(out, f->to, "f", int_of(b, f->i));
    sx_yield(out, SX_CMD_SLEEP, 1, int_of(c, 1));
    sx_wait(out);
    return 0;
}

/* "effector": yields the test's command EFFECT once and finishes with
 * its answer. The command's handler keeps its completer (the command
 * stays in flight) in a crashing child; in the parent it answers at once
 * with whether it runs again after a resume (sx_completer_resumed). */
enum { EFFECT = 300 };
static _Atomic int g_effect_calls, g_effect_resumed;
static _Atomic bool g_effect_hold;

static int effect_cmd(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                      sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag, (void)args;
    atomic_fetch_add(&g_effect_calls, 1);
    bool resumed = sx_completer_resumed(done);
    if (resumed)
        atomic_fetch_add(&g_effect_resumed, 1);
    if (atomic_load(&g_effect_hold))
        return 0; /* in flight until the crash */
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_complete(done, int_of(b, resumed ? 1 : 0), 0, NULL);
    return 0;
}

typedef struct {
    uint32_t yielded;
} effector_state;

static int effector_init(void *st, const sx_init_ctx *ctx, const char *method,
                         const sx_payload *in, size_t n)
{
    (void)st, (void)ctx, (void)method, (void)in, (void)n;
    return 0;
}

static int effector_step(void *st, const sx_event *ev, size_t n,
                         sx_step_output *out)
{
    effector_state *s = st;
    if (!s->yielded) {
        s->yielded = 1;
        sx_yield(out, EFFECT, 5, (sx_payload){ NULL, 0 });
        sx_wait(out);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (ev[i].type == SX_EVENT_YIELD_COMPLETE && ev[i].tag == 5) {
            sx_done(out, ev[i].data);
            return 0;
        }
    sx_wait(out);
    return 0;
}

/* "parting": sends "f" 1 to its addressee in its only step, which
 * finishes it. Input: [to]. */
static int parting_init(void *st, const sx_init_ctx *ctx, const char *method,
                        const sx_payload *in, size_t n)
{
    (void)ctx, (void)method;
    sx_unpack u;
    if (n != 1)
        return SX_EINVAL;
    sx_unpack_init(&u, in[0]);
    return sx_unpack_pid(&u, (sx_pid *)st) == 0 ? 0 : SX_EINVAL;
}

static int parting_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    (void)ev, (void)n;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_send(out, *(const sx_pid *)st, "f", int_of(b, 1));
    sx_done(out, (sx_payload){ NULL, 0 });
    return 0;
}

static const sx_process_type types[] = {
    { .name = "effector",
      .state_size = sizeof(effector_state),
      .init = effector_init,
      .step = effector_step,
      .flags = SX_TYPE_CHECKPOINTED },
    { .name = "counter",
      .state_size = sizeof(counter_state),
      .init = counter_init,
      .step = counter_step,
      .flags = SX_TYPE_CHECKPOINTED },
    { .name = "napper",
      .state_size = sizeof(napper_state),
      .init = napper_init,
      .step = napper_step,
      .flags = SX_TYPE_CHECKPOINTED },
    { .name = "acc",
      .state_size = sizeof(acc_state),
      .init = acc_init,
      .step = acc_step,
      .flags = SX_TYPE_CHECKPOINTED },
    { .name = "parting",
      .state_size = sizeof(sx_pid),
      .init = parting_init,
      .step = parting_step,
      .flags = SX_TYPE_CHECKPOINTED },
    { .name = "feeder",
      .state_size = sizeof(feeder_state),
      .init = feeder_init,
      .step = feeder_step,
      .flags = SX_TYPE_CHECKPOINTED },
};

static sx_engine *up(void)
{
    sx_engine_config cfg = { .workers = 2, .state_dir = dir };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, types, sizeof types / sizeof types[0]);
    tx_engine_command(e, EFFECT, "effect", effect_cmd, NULL);
    int rc = sx_engine_start(e);
    if (rc != 0)
        SX_FAILF("start: %s: %s", sx_errname(rc), sx_engine_state_error(e));
    return e;
}

static uint64_t steps_of(sx_engine *e, sx_pid pid)
{
    sx_process_info info[64];
    int n = sx_engine_list(e, info, 64);
    for (int i = 0; i < n; i++)
        if (sx_pid_eq(info[i].pid, pid))
            return info[i].steps;
    return 0;
}

static void write_all(int fd, const void *b, size_t n)
{
    if (write(fd, b, n) != (ssize_t)n)
        _exit(4);
}

/* ---- resume from the last step ---- */

typedef struct {
    sx_pid pid;
    uint64_t steps;
} counted;

static void counter_child(int fd, void *arg)
{
    (void)arg;
    sx_engine *e = up();
    counted c;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = int_of(b, 150);
    if (sx_engine_submit(e, "counter", "run", &in, 1, &c.pid) != 0)
        _exit(2);
    while ((c.steps = steps_of(e, c.pid)) < 40)
        tx_sleep_ms(1);
    write_all(fd, &c, sizeof c);
}

/* The counter killed at 40-odd steps of 150 resumes where its last
 * checkpoint left it: init never runs again, its first step here sees
 * about the count the crash interrupted, and the engine's step count and
 * attempts go on (150 steps, attempt 1). */
static void t_resume(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-ckpt.");
    counted c;
    CHECK(tx_crash_child(counter_child, NULL, &c, sizeof c) == sizeof c);
    atomic_store(&g_inits, 0);
    atomic_store(&g_first_count, -1);
    sx_engine *e = up();
    sx_result r;
    CHECK_RC(sx_engine_wait(e, c.pid, 20000, &r), 0);
    CHECK_EQ_INT(r.error, 0);
    int64_t v = -1;
    CHECK_RC(sx_payload_get_int(r.value, &v), 0);
    CHECK_EQ_U64((uint64_t)v, 150);
    CHECK_EQ_U64(r.steps, 150);
    CHECK_EQ_U64(r.attempts, 1);
    sx_result_free(&r);
    CHECK_EQ_INT(atomic_load(&g_inits), 0);
    int64_t first = atomic_load(&g_first_count);
    /* The listing counts a step before its checkpoint is stored: the
     * checkpoint is that step's or a later one. */
    if (first + 1 < (int64_t)c.steps || first > (int64_t)c.steps + 30)
        SX_FAILF("resumed at count %lld; the crash came at step %llu",
                 (long long)first, (unsigned long long)c.steps);
    /* Each step after the resume but the last was checkpointed. */
    sx_engine_stats st = tx_engine_stats(e);
    CHECK(st.store_failed == 0);
    CHECK_EQ_U64(st.checkpoints, (uint64_t)(150 - first - 1));
    CHECK(st.checkpoint_us > 0);
    sx_engine_free(e);
    CHECK(tx_rm_tree(dir) == 0);
}

/* ---- sleeps keep their deadlines ---- */

typedef struct {
    sx_pid pid;
    int64_t at; /* the submit's wall-clock time, ms */
} napped;

typedef struct {
    int64_t ms, crash_after;
} nap_plan;

static void napper_child(int fd, void *arg)
{
    const nap_plan *np = arg;
    sx_engine *e = up();
    napped x;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = int_of(b, np->ms);
    x.at = wall_ms();
    if (sx_engine_submit(e, "napper", "run", &in, 1, &x.pid) != 0)
        _exit(2);
    tx_sleep_ms(np->crash_after);
    write_all(fd, &x, sizeof x);
}

/* A 1,500 ms sleep interrupted at 300 ms by a crash, with 800 ms of
 * downtime: it fires 1,500 ms after it was yielded, not 1,500 ms after the
 * start (which would be past 2,600 ms). A 400 ms sleep whose deadline
 * passes during the downtime fires at the start. */
static void t_timers(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-ckpt.");
    nap_plan long_nap = { 1500, 300 };
    napped x;
    CHECK(tx_crash_child(napper_child, &long_nap, &x, sizeof x) == sizeof x);
    tx_sleep_ms(800);
    sx_engine *e = up();
    sx_result r;
    CHECK_RC(sx_engine_wait(e, x.pid, 10000, &r), 0);
    int64_t took = wall_ms() - x.at;
    CHECK_EQ_INT(r.error, 0);
    sx_result_free(&r);
    if (took < 1500 || took > 2400)
        SX_FAILF("the 1,500 ms sleep ended %lld ms after it was yielded",
                 (long long)took);
    sx_engine_free(e);

    nap_plan short_nap = { 400, 150 };
    CHECK(tx_crash_child(napper_child, &short_nap, &x, sizeof x) == sizeof x);
    tx_sleep_ms(700);
    int64_t start = wall_ms();
    e = up();
    CHECK_RC(sx_engine_wait(e, x.pid, 10000, &r), 0);
    CHECK_EQ_INT(r.error, 0);
    sx_result_free(&r);
    int64_t late = wall_ms() - start;
    if (late > 400)
        SX_FAILF("the overdue sleep fired %lld ms after the start",
                 (long long)late);
    sx_engine_free(e);
    CHECK(tx_rm_tree(dir) == 0);
}

/* ---- messages exactly once ---- */

enum { N_FEED = 300, N_OUT = 100 };

typedef struct {
    sx_pid acc, feeder;
    int64_t sent; /* outside messages acknowledged before the crash */
} fed;

static void send_o(sx_engine *e, sx_pid to, int64_t v)
{
    uint8_t b[SX_PAYLOAD_INT_MAX];
    int rc = sx_engine_send(e, SX_PID_NONE, to, "o", int_of(b, v));
    if (rc != 0)
        SX_FAILF("send o %lld: %s", (long long)v, sx_errname(rc));
}

static void feed_child(int fd, void *arg)
{
    int64_t round = *(const int64_t *)arg;
    sx_engine *e = up();
    fed f;
    if (sx_engine_submit(e, "acc", "run", NULL, 0, &f.acc) != 0)
        _exit(2);
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_pid(&pk, f.acc);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in[2] = { sx_pack_payload(&pk), int_of(b, N_FEED) };
    if (sx_engine_submit(e, "feeder", "run", in, 2, &f.feeder) != 0)
        _exit(3);
    sx_pack_fini(&pk);
    /* Outside messages, each acknowledged once stored, while the feeder
     * runs; the crash comes after the round's share of them. */
    f.sent = 10 + round * 20;
    for (int64_t v = 1; v <= f.sent; v++) {
        uint8_t c[SX_PAYLOAD_INT_MAX];
        if (sx_engine_send(e, SX_PID_NONE, f.acc, "o", int_of(c, v)) != 0)
            _exit(5);
        tx_sleep_us(300);
    }
    tx_sleep_ms(5 + round * 25);
    write_all(fd, &f, sizeof f);
}

/* The feeder's 300 messages and 100 from outside reach the accumulator
 * exactly once and in order across a crash in the middle (three rounds,
 * the crash at another moment each): the outside messages acknowledged
 * before it are sent no more, the rest after it. */
static void t_messages(void)
{
    for (int64_t round = 0; round < 3; round++) {
        tx_mkdtemp(dir, sizeof dir, "stepx-ckpt.");
        fed f;
        CHECK(tx_crash_child(feed_child, &round, &f, sizeof f) == sizeof f);
        sx_engine *e = up();
        for (int64_t v = f.sent + 1; v <= N_OUT; v++)
            send_o(e, f.acc, v);
        sx_result r;
        CHECK_RC(sx_engine_wait(e, f.feeder, 20000, &r), 0);
        CHECK_EQ_INT(r.error, 0);
        sx_result_free(&r);
        CHECK_RC(sx_engine_send(e, SX_PID_NONE, f.acc, "end",
                                (sx_payload){ NULL, 0 }),
                 0);
        CHECK_RC(sx_engine_wait(e, f.acc, 20000, &r), 0);
        CHECK_EQ_INT(r.error, 0);
        sx_unpack u;
        uint32_t len;
        uint64_t nf, no, bad;
        int64_t lf, lo;
        sx_unpack_init(&u, r.value);
        CHECK_RC(sx_unpack_array(&u, &len), 0);
        CHECK_RC(sx_unpack_uint(&u, &nf), 0);
        CHECK_RC(sx_unpack_uint(&u, &no), 0);
        CHECK_RC(sx_unpack_int(&u, &lf), 0);
        CHECK_RC(sx_unpack_int(&u, &lo), 0);
        CHECK_RC(sx_unpack_uint(&u, &bad), 0);
        sx_result_free(&r);
        if (nf != N_FEED || no != N_OUT || lf != N_FEED || lo != N_OUT ||
            bad != 0)
            SX_FAILF("round %lld: got %llu f (last %lld), %llu o (last "
                     "%lld), out of order: %llu; want %d and %d in order",
                     (long long)round, (unsigned long long)nf, (long long)lf,
                     (unsigned long long)no, (long long)lo,
                     (unsigned long long)bad, N_FEED, N_OUT);
        sx_engine_free(e);
        CHECK(tx_rm_tree(dir) == 0);
    }
}

/* ---- a command in flight runs again ---- */

typedef struct {
    sx_pid pid;
    int calls, resumed; /* in the child */
} effected;

static void effect_child(int fd, void *arg)
{
    (void)arg;
    atomic_store(&g_effect_hold, true);
    sx_engine *e = up();
    effected x;
    if (sx_engine_submit(e, "effector", "run", NULL, 0, &x.pid) != 0)
        _exit(2);
    while (atomic_load(&g_effect_calls) == 0)
        tx_sleep_ms(1);
    x.calls = atomic_load(&g_effect_calls);
    x.resumed = atomic_load(&g_effect_resumed);
    write_all(fd, &x, sizeof x);
}

/* The command the effector had in flight at the crash (it runs only once
 * its step's checkpoint is stored) runs again as it resumes, and its
 * handler can tell (sx_completer_resumed): false the first time, true the
 * second. */
static void t_command_again(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-ckpt.");
    effected x;
    CHECK(tx_crash_child(effect_child, NULL, &x, sizeof x) == sizeof x);
    CHECK_EQ_INT(x.calls, 1);
    CHECK_EQ_INT(x.resumed, 0);
    atomic_store(&g_effect_hold, false);
    atomic_store(&g_effect_calls, 0);
    sx_engine *e = up();
    CHECK_EQ_U64((uint64_t)tx_wait_int(e, x.pid, 10000), 1);
    CHECK_EQ_INT(atomic_load(&g_effect_calls), 1);
    CHECK_EQ_INT(atomic_load(&g_effect_resumed), 1);
    sx_engine_free(e);
    CHECK(tx_rm_tree(dir) == 0);
}

/* ---- a last step's message ---- */

typedef struct {
    sx_pid acc;
} parted;

static void parting_child(int fd, void *arg)
{
    (void)arg;
    sx_engine *e = up();
    parted x;
    sx_pid sender;
    if (sx_engine_submit(e, "acc", "run", NULL, 0, &x.acc) != 0)
        _exit(2);
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_pid(&pk, x.acc);
    sx_payload in = sx_pack_payload(&pk);
    if (sx_engine_submit(e, "parting", "run", &in, 1, &sender) != 0)
        _exit(3);
    sx_pack_fini(&pk);
    sx_result r;
    /* Its outcome is stored; the crash comes before the accumulator (4 ms
     * a step) has checkpointed taking the message. */
    if (sx_engine_wait(e, sender, 5000, &r) != 0 || r.error != 0)
        _exit(4);
    write_all(fd, &x, sizeof x);
}

/* The message a job sends in the step that finishes it is stored with
 * its outcome: after a crash right after that outcome, the receiver gets
 * it exactly once (not lost with its mailbox, not sent twice). */
static void t_last_send(void)
{
    for (int round = 0; round < 3; round++) {
        tx_mkdtemp(dir, sizeof dir, "stepx-ckpt.");
        parted x;
        CHECK(tx_crash_child(parting_child, NULL, &x, sizeof x) == sizeof x);
        sx_engine *e = up();
        CHECK_RC(sx_engine_send(e, SX_PID_NONE, x.acc, "end",
                                (sx_payload){ NULL, 0 }),
                 0);
        sx_result r;
        CHECK_RC(sx_engine_wait(e, x.acc, 20000, &r), 0);
        CHECK_EQ_INT(r.error, 0);
        sx_unpack u;
        uint32_t len;
        uint64_t nf;
        sx_unpack_init(&u, r.value);
        CHECK_RC(sx_unpack_array(&u, &len), 0);
        CHECK_RC(sx_unpack_uint(&u, &nf), 0);
        sx_result_free(&r);
        if (nf != 1)
            SX_FAILF("round %d: the accumulator got %llu messages, not 1",
                     round, (unsigned long long)nf);
        sx_engine_free(e);
        CHECK(tx_rm_tree(dir) == 0);
    }
}

/* ---- the store's own thread ---- */

typedef struct {
    sx_engine *e;
    sx_pid acc;
    _Atomic int send_rc, submit_rc, async_rc;
    _Atomic bool called, async_done;
} watcher;

static void async_sent(void *user, int rc)
{
    watcher *w = user;
    atomic_store(&w->async_rc, rc);
    atomic_store(&w->async_done, true);
}

/* Runs on the store's answering thread (the outcome of a stored job is
 * made visible there): a blocking send to a checkpointed job or a
 * blocking submit would wait for that very thread. */
static void on_stored_end(void *user, sx_pid target, const sx_result *r)
{
    (void)target, (void)r;
    watcher *w = user;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_pid pid;
    atomic_store(&w->send_rc,
                 sx_engine_send(w->e, SX_PID_NONE, w->acc, "o", int_of(b, 1)));
    atomic_store(&w->submit_rc,
                 sx_engine_submit(w->e, "acc", "run", NULL, 0, &pid));
    if (sx_engine_send_async(w->e, SX_PID_NONE, w->acc, "o", int_of(b, 1),
                             async_sent, w) != 0)
        atomic_store(&w->async_done, true);
    atomic_store(&w->called, true);
}

/* In a callback the store's thread runs, sx_engine_send to a checkpointed
 * job and sx_engine_submit answer SX_ESTATE at once instead of waiting
 * for themselves; sx_engine_send_async works (its answer comes later on
 * the same thread), and the engine goes on. */
static void t_store_thread(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-ckpt.");
    sx_engine *e = up();
    watcher w = { .e = e };
    CHECK_RC(sx_engine_submit(e, "acc", "run", NULL, 0, &w.acc), 0);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = int_of(b, 2);
    sx_pid c;
    CHECK_RC(sx_engine_submit(e, "counter", "run", &in, 1, &c), 0);
    CHECK_RC(sx_engine_watch(e, c, on_stored_end, &w), 0);
    TX_WAIT_UNTIL(atomic_load(&w.called) && atomic_load(&w.async_done), 10000,
                  100);
    CHECK_RC(atomic_load(&w.send_rc), SX_ESTATE);
    CHECK_RC(atomic_load(&w.submit_rc), SX_ESTATE);
    CHECK_RC(atomic_load(&w.async_rc), 0);
    /* The engine goes on: the stored message reached the accumulator. */
    CHECK_RC(
        sx_engine_send(e, SX_PID_NONE, w.acc, "end", (sx_payload){ NULL, 0 }),
        0);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, w.acc, 10000, &r), 0);
    sx_unpack u;
    uint32_t len;
    uint64_t nf, no;
    sx_unpack_init(&u, r.value);
    CHECK_RC(sx_unpack_array(&u, &len), 0);
    CHECK_RC(sx_unpack_uint(&u, &nf), 0);
    CHECK_RC(sx_unpack_uint(&u, &no), 0);
    CHECK_EQ_U64(no, 1);
    sx_result_free(&r);
    sx_engine_free(e);
    CHECK(tx_rm_tree(dir) == 0);
}

/* ---- stop ---- */

/* A stop in the middle ends the counter for this run only: at the next
 * start it resumes from its checkpoint and finishes with 150 steps. */
static void t_stop_resumes(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-ckpt.");
    sx_engine *e = up();
    sx_pid pid;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = int_of(b, 150);
    CHECK_RC(sx_engine_submit(e, "counter", "run", &in, 1, &pid), 0);
    while (steps_of(e, pid) < 30)
        tx_sleep_ms(1);
    CHECK_RC(sx_engine_stop(e, 2000), 0);
    sx_engine_free(e);
    atomic_store(&g_inits, 0);
    e = up();
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pid, 20000, &r), 0);
    CHECK_EQ_INT(r.error, 0);
    CHECK_EQ_U64(r.steps, 150);
    sx_result_free(&r);
    CHECK_EQ_INT(atomic_load(&g_inits), 0);
    sx_engine_free(e);
    CHECK(tx_rm_tree(dir) == 0);
}

/* Without a store the flag changes nothing: the counter runs as any
 * process, and the checkpoints figure stays 0. */
static void t_no_store(void)
{
    sx_engine_config cfg = { .workers = 2 };
    sx_engine *e = tx_engine_up(&cfg, &types[1], 1); /* the counter */
    sx_pid pid;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = int_of(b, 20);
    CHECK_RC(sx_engine_submit(e, "counter", "run", &in, 1, &pid), 0);
    CHECK_EQ_U64((uint64_t)tx_wait_int(e, pid, 5000), 20);
    CHECK_EQ_U64(tx_engine_stats(e).checkpoints, 0);
    tx_engine_down(e);
}

static const sx_test_case cases[] = {
    { "resume", t_resume },
    { "timers", t_timers },
    { "messages", t_messages },
    { "command_again", t_command_again },
    { "last_send", t_last_send },
    { "store_thread", t_store_thread },
    { "stop_resumes", t_stop_resumes },
    { "no_store", t_no_store },
};

SX_TEST_MAIN(cases)

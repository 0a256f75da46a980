/* tests/engine/test_send.c — sx_send, the direct message send of a step
 * (no argument packing, no completer): delivery with from/topic/data, per
 * sender order, dead letters, the step's status applying as if no yield
 * had been written, delivery even when the step ends DONE, bad arguments.
 * Each case opens with the property it checks. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include <stepx/stepx.h>

#include "tests/harness.h"

static const sx_payload nil = { NULL, 0 };

typedef struct {
    pthread_mutex_t mu;
    int64_t got, next, bad;
    sx_pid from;
} box;

static void box_fn(void *user, const sx_message *m)
{
    box *b = user;
    int64_t v = -1;
    sx_payload_get_int(m->data, &v);
    pthread_mutex_lock(&b->mu);
    if (strcmp(m->topic, "n") != 0 || v != b->next ||
        (b->got > 0 && !sx_pid_eq(b->from, m->from)))
        b->bad++;
    b->from = m->from;
    b->next++;
    b->got++;
    pthread_mutex_unlock(&b->mu);
}

static int64_t box_got(box *b)
{
    pthread_mutex_lock(&b->mu);
    int64_t v = b->got;
    pthread_mutex_unlock(&b->mu);
    return v;
}

/* mode 0: sends 0..n-1 to `to`, 4 per step with CONTINUE, then DONE in a
 *         step that also sends n (which must arrive);
 * mode 1: one step: sx_send to a dead PID, then IDLE (must idle: a later
 *         message wakes it and it finishes);
 * mode 2: misuse checks;
 * mode 3: sends 0..n-1 in one step, then sx_fail (the messages go);
 * mode 4: sends 0..n-1 in one step, then returns SX_EINVAL. */
typedef struct {
    sx_pid to;
    int64_t n, sent, mode;
    int k;
} snd_st;

static int snd_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    snd_st *s = st;
    sx_unpack u;
    if (n != 3 || sx_payload_get_int(in[1], &s->n) != 0 ||
        sx_payload_get_int(in[2], &s->mode) != 0)
        return SX_EINVAL;
    sx_unpack_init(&u, in[0]);
    return sx_unpack_pid(&u, &s->to) == 0 ? 0 : SX_EINVAL;
}

static int snd_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    snd_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    (void)ev;
    if (s->mode == 0) {
        for (int i = 0; i < 4 && s->sent < s->n; i++, s->sent++)
            if (sx_send(out, s->to, "n", sx_payload_int(b, s->sent)) != 0)
                return SX_EFAILED;
        if (s->sent == s->n) {
            sx_send(out, s->to, "n", sx_payload_int(b, s->sent));
            sx_done(out, nil);
        }
        return 0; /* CONTINUE: only sx_send written, so it runs again */
    }
    if (s->mode == 3 || s->mode == 4) {
        for (int64_t i = 0; i < s->n; i++)
            sx_send(out, s->to, "n", sx_payload_int(b, i));
        if (s->mode == 4)
            return SX_EINVAL;
        sx_fail(out, "failed after sending");
        return 0;
    }
    if (s->mode == 1) {
        if (s->k++ == 0) {
            sx_pid ghost = { 0, 1, ((uint64_t)5 << 32) | 99999 };
            sx_send(out, ghost, "n", nil);
            sx_idle(out);
            return 0;
        }
        if (n == 1 && ev[0].type == SX_EVENT_MESSAGE)
            sx_done(out, nil);
        else
            sx_fail(out, "woken by something other than the message");
        return 0;
    }
    char big[300];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    if (sx_send(out, s->to, NULL, nil) != SX_EINVAL ||
        sx_send(out, s->to, big, nil) != SX_EINVAL ||
        sx_send(NULL, s->to, "n", nil) != SX_EINVAL) {
        sx_fail(out, "misuse accepted");
        return 0;
    }
    sx_done(out, nil);
    return 0;
}

/* rcv.run [n]: takes messages "n" 0, 1, 2, ... from one sender in order
 * and finishes with how many it took once it has n + 1; any gap, repeat or
 * other sender fails it. */
typedef struct {
    int64_t want, next;
    sx_pid from;
} rcv_st;

static int rcv_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    rcv_st *s = st;
    return n == 1 && sx_payload_get_int(in[0], &s->want) == 0 ? 0 : SX_EINVAL;
}

static int rcv_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    rcv_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    for (size_t i = 0; i < n; i++) {
        int64_t v = -1;
        if (ev[i].type != SX_EVENT_MESSAGE || strcmp(ev[i].topic, "n") != 0 ||
            sx_payload_get_int(ev[i].data, &v) != 0 || v != s->next ||
            (s->next > 0 && !sx_pid_eq(s->from, ev[i].from))) {
            sx_fail(out, "out of order, repeated or from another sender");
            return 0;
        }
        s->from = ev[i].from;
        if (s->next++ == s->want) {
            sx_done(out, sx_payload_int(b, s->next));
            return 0;
        }
    }
    sx_idle(out);
    return 0;
}

static const sx_process_type rcv_t = { .name = "rcv",
                                       .state_size = sizeof(rcv_st),
                                       .init = rcv_init,
                                       .step = rcv_step };

static const sx_process_type snd_t = { .name = "snd",
                                       .state_size = sizeof(snd_st),
                                       .init = snd_init,
                                       .step = snd_step };

static sx_engine *up(void)
{
    sx_engine_config cfg = { .workers = 2 };
    sx_engine *e;
    CHECK_RC(sx_engine_new(&cfg, &e), 0);
    CHECK_RC(sx_engine_register(e, &snd_t), 0);
    CHECK_RC(sx_engine_register(e, &rcv_t), 0);
    CHECK_RC(sx_engine_start(e), 0);
    return e;
}

static sx_pid snd(sx_engine *e, sx_pid to, int64_t n, int64_t mode)
{
    uint8_t pb[64], nb[SX_PAYLOAD_INT_MAX], mb[SX_PAYLOAD_INT_MAX];
    sx_pack pk;
    sx_pack_init_fixed(&pk, pb, sizeof pb);
    sx_pack_pid(&pk, to);
    sx_payload in[3] = { sx_pack_payload(&pk), sx_payload_int(nb, n),
                         sx_payload_int(mb, mode) };
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "snd", "run", in, 3, &pid), 0);
    return pid;
}

static void wait_ok(sx_engine *e, sx_pid pid)
{
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pid, 10000, &r), 0);
    if (r.error != 0)
        SX_FAILF("process failed: %s", r.error_msg);
    sx_result_free(&r);
}

/* Property: 10,000 sx_send messages (4 per step, CONTINUE) arrive once
 * each, in order, from the sender, with topic and data; the one sent in
 * the DONE step arrives too; nothing counts as a dead letter. */
static void test_order_and_done(void)
{
    sx_engine *e = up();
    static box b = { .mu = PTHREAD_MUTEX_INITIALIZER };
    sx_pid mb;
    CHECK_RC(sx_engine_mailbox_new(e, box_fn, &b, &mb), 0);
    sx_pid p = snd(e, mb, 10000, 0);
    wait_ok(e, p);
    double end = sx_test_now_ms() + 10000;
    while (box_got(&b) < 10001) {
        CHECK(sx_test_now_ms() < end);
        sched_yield();
    }
    CHECK_EQ_INT(b.bad, 0);
    CHECK(sx_pid_eq(b.from, p));
    sx_engine_stats st;
    CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
    CHECK_EQ_U64(st.dead_letters, 0);
    CHECK_RC(sx_engine_mailbox_free(e, mb), 0);
    CHECK_RC(sx_engine_stop(e, 1000), 0);
    sx_engine_free(e);
}

/* Property: the sends of one step to one process travel as one chain
 * (engine/dispatch.c) and still arrive once each, in order, from the
 * sender: a receiving process (not an outside mailbox, which takes chains
 * one message at a time) sees 0..10,000 without a gap; and a chain sent
 * to a process that is gone counts one dead letter per message. */
static void test_chain_to_process(void)
{
    sx_engine *e = up();
    uint8_t nb[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(nb, 10000);
    sx_pid r;
    CHECK_RC(sx_engine_submit(e, "rcv", "run", &in, 1, &r), 0);
    sx_pid p = snd(e, r, 10000, 0);
    wait_ok(e, p);
    sx_result res;
    CHECK_RC(sx_engine_wait(e, r, 10000, &res), 0);
    CHECK_EQ_INT(res.error, 0);
    int64_t got = -1;
    CHECK_RC(sx_payload_get_int(res.value, &got), 0);
    CHECK_EQ_INT(got, 10001);
    sx_result_free(&res);
    sx_engine_stats st;
    CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
    CHECK_EQ_U64(st.dead_letters, 0);
    /* r is done: 8 more messages, 4 per step, 2 chains, 8 dead letters
     * (the final DONE step's send makes 9). */
    wait_ok(e, snd(e, r, 8, 0));
    CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
    CHECK_EQ_U64(st.dead_letters, 9);
    CHECK_RC(sx_engine_stop(e, 1000), 0);
    sx_engine_free(e);
}

/* Property: sx_send to an unknown PID counts one dead letter and the step
 * that wrote it goes IDLE as asked (only a message wakes it); misuse of
 * sx_send is SX_EINVAL. */
static void test_dead_letter_and_idle(void)
{
    sx_engine *e = up();
    sx_pid p = snd(e, SX_PID_NONE, 0, 1);
    sx_engine_stats st;
    double end = sx_test_now_ms() + 10000;
    do {
        CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
        CHECK(sx_test_now_ms() < end);
        sched_yield();
    } while (st.dead_letters == 0);
    sx_process_info info;
    do {
        CHECK_EQ_INT(sx_engine_list(e, &info, 1), 1);
        CHECK(sx_test_now_ms() < end);
    } while (info.state != SX_PSTATE_IDLE);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, p, "go", nil), 0);
    wait_ok(e, p);
    CHECK_EQ_U64(st.dead_letters, 1);
    wait_ok(e, snd(e, SX_PID_NONE, 0, 2));
    CHECK_RC(sx_engine_stop(e, 1000), 0);
    sx_engine_free(e);
}

/* Property: the messages of a step that FAILs are delivered (as with
 * DONE: "messages go, yields are dropped"), once each and in order; a
 * step that returns an error after sending finishes SX_EINVAL and the
 * engine goes on (its messages, built when sx_send was called, are freed
 * with the output: LeakSanitizer checks). Both 1 and 100 messages, so the
 * built messages sit in the output's inline yields and in its array. */
static void test_sends_then_fail(void)
{
    sx_engine *e = up();
    for (int64_t n = 1; n <= 100; n += 99) {
        static box b = { .mu = PTHREAD_MUTEX_INITIALIZER };
        pthread_mutex_lock(&b.mu);
        b.got = b.next = b.bad = 0;
        pthread_mutex_unlock(&b.mu);
        sx_pid mb;
        CHECK_RC(sx_engine_mailbox_new(e, box_fn, &b, &mb), 0);
        sx_result r;
        CHECK_RC(sx_engine_wait(e, snd(e, mb, n, 3), 10000, &r), 0);
        CHECK_RC(r.error, SX_EFAILED);
        CHECK_STR(r.error_msg, "failed after sending");
        sx_result_free(&r);
        double end = sx_test_now_ms() + 10000;
        while (box_got(&b) < n) {
            CHECK(sx_test_now_ms() < end);
            sched_yield();
        }
        CHECK_EQ_INT(b.bad, 0);
        CHECK_RC(sx_engine_wait(e, snd(e, mb, n, 4), 10000, &r), 0);
        CHECK_RC(r.error, SX_EINVAL);
        sx_result_free(&r);
        CHECK_RC(sx_engine_mailbox_free(e, mb), 0);
    }
    wait_ok(e, snd(e, SX_PID_NONE, 0, 2)); /* still running steps */
    CHECK_RC(sx_engine_stop(e, 1000), 0);
    sx_engine_free(e);
}

static const sx_test_case cases[] = {
    { "order_and_done", test_order_and_done },
    { "chain_to_process", test_chain_to_process },
    { "dead_letter_and_idle", test_dead_letter_and_idle },
    { "sends_then_fail", test_sends_then_fail },
};

SX_TEST_MAIN(cases)

/* tests/engine/test_send.c — sx_send, the direct message send of a step
 * (no argument packing, no completer): delivery with from/topic/data, per
 * sender order, dead letters, the step's status applying as if no yield
 * had been written, delivery even when the step ends DONE, bad arguments.
 * Each case opens with the property it checks. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <stepx/stepx.h>

#include "tests/support/support.h"

#define WAIT_MS 10000 /* for a process to finish */

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
 * mode 2: misuse checks (topics that are not UTF-8 among them);
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
    /* Data over SX_MESSAGE_MAX (never read: refused first): SX_EINVAL,
     * as sx_engine_send says, not SX_ENOMEM. */
    sx_payload huge = { (const uint8_t *)big, (size_t)SX_MESSAGE_MAX + 1 };
    /* A topic that is not UTF-8: a stray byte, a cut sequence after
     * ASCII, an overlong NUL. */
    if (sx_send(out, s->to, NULL, nil) != SX_EINVAL ||
        sx_send(out, s->to, big, nil) != SX_EINVAL ||
        sx_send(out, s->to, "\xff", nil) != SX_EINVAL ||
        sx_send(out, s->to, "topic\xe2\x82", nil) != SX_EINVAL ||
        sx_send(out, s->to, "\xc0\x80", nil) != SX_EINVAL ||
        sx_send(NULL, s->to, "n", nil) != SX_EINVAL ||
        sx_send(out, s->to, "n", huge) != SX_EINVAL) {
        sx_fail(out, "misuse accepted");
        return 0;
    }
    /* After a good send to the same PID a bad topic takes the bundle path
     * (merge), which refuses it too (the good one is a dead letter). */
    if (sx_send(out, s->to, "n", nil) != 0 ||
        sx_send(out, s->to, "n\xff", nil) != SX_EINVAL) {
        sx_fail(out, "a bad topic after a good one accepted");
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
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, &snd_t, 1);
    tx_engine_register(e, &rcv_t, 1);
    tx_engine_start(e);
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
    tx_wait_done(e, p, WAIT_MS, NULL);
    TX_WAIT_UNTIL(box_got(&b) >= 10001, 10000, 0);
    CHECK_EQ_INT(b.bad, 0);
    CHECK(sx_pid_eq(b.from, p));
    sx_engine_stats st;
    CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
    CHECK_EQ_U64(st.dead_letters, 0);
    CHECK_RC(sx_engine_mailbox_free(e, mb), 0);
    tx_engine_down(e);
}

/* Property: the sends of one step to one process travel as one chain
 * (engine/core/dispatch.c) and still arrive once each, in order, from the
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
    tx_wait_done(e, p, WAIT_MS, NULL);
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
    tx_wait_done(e, snd(e, r, 8, 0), WAIT_MS, NULL);
    CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
    CHECK_EQ_U64(st.dead_letters, 9);
    tx_engine_down(e);
}

/* Property: sx_send to an unknown PID counts one dead letter and the step
 * that wrote it goes IDLE as asked (only a message wakes it); misuse of
 * sx_send is SX_EINVAL, and data over SX_MESSAGE_MAX is SX_EINVAL from
 * both sx_send and sx_engine_send. */
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
    char small[8] = { 0 };
    sx_payload huge = { (const uint8_t *)small, (size_t)SX_MESSAGE_MAX + 1 };
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, p, "go", huge), SX_EINVAL);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, p, "go", nil), 0);
    tx_wait_done(e, p, WAIT_MS, NULL);
    CHECK_EQ_U64(st.dead_letters, 1);
    tx_wait_done(e, snd(e, SX_PID_NONE, 0, 2), WAIT_MS, NULL);
    tx_engine_down(e);
}

/* Property: sx_send to a PID of this engine's node with id 0 (generation
 * 0, never live) is a dead letter like any unknown PID, also when it is
 * sent again from the same worker: an empty entry of the references a
 * worker keeps (engine/core/proc.h, sx__prefs) has id 0 too, and must
 * not be taken for that PID's. */
static void test_dead_letter_id_zero(void)
{
    sx_engine *e = up();
    sx_engine_config cfg;
    sx_engine_config_get(e, &cfg);
    sx_pid zero = { cfg.node, cfg.host, 0 };
    sx_pid p = snd(e, zero, 3, 0);
    tx_wait_done(e, p, WAIT_MS, NULL);
    /* 3 sends and the one of the DONE step. */
    CHECK_EQ_U64(tx_engine_stats(e).dead_letters, 4);
    tx_engine_down(e);
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
        TX_WAIT_UNTIL(box_got(&b) >= n, 10000, 0);
        CHECK_EQ_INT(b.bad, 0);
        CHECK_RC(sx_engine_wait(e, snd(e, mb, n, 4), 10000, &r), 0);
        CHECK_RC(r.error, SX_EINVAL);
        sx_result_free(&r);
        CHECK_RC(sx_engine_mailbox_free(e, mb), 0);
    }
    /* still running steps */
    tx_wait_done(e, snd(e, SX_PID_NONE, 0, 2), WAIT_MS, NULL);
    tx_engine_down(e);
}

/* ---- bundles (engine/core/event.c): a step's consecutive sends to one process
 * travel as records in one node and come out as one event each ---- */

/* Message i of the "mix" sequence: three small ones (a topic of up to 4
 * bytes, up to 12 bytes of data: together they fit a large node, so they
 * make a bundle), then one of the sizes below: topics up to the 255-byte
 * limit, data around the record's 255-byte length limit, the large node's
 * 104 inline bytes and the bundle node's 896, and past them; so that each
 * of those joins a bundle (moving it to a bundle node) when it fits one,
 * and travels alone when it does not. Every byte derived from i. */
static const size_t mix_tls[] = { 0, 1, 40, 41, 100, 254, 255 };
static const size_t mix_dls[] = { 0,   1,   5,   9,   60,  90,  100,
                                  103, 104, 105, 254, 255, 256, 600,
                                  880, 885, 890, 896, 900, 3000 };
#define MIX_N 560 /* 4 x 20 x 7: every topic size with every data size */

static size_t mix_tl(int64_t i)
{
    if (i % 4 != 3)
        return (size_t)(i % 5);
    int64_t j = i / 4;
    size_t nd = sizeof mix_dls / sizeof mix_dls[0];
    return mix_tls[(size_t)(j / (int64_t)nd) %
                   (sizeof mix_tls / sizeof mix_tls[0])];
}

static size_t mix_dl(int64_t i)
{
    if (i % 4 != 3)
        return (size_t)(i * 7 % 13);
    return mix_dls[(size_t)(i / 4) % (sizeof mix_dls / sizeof mix_dls[0])];
}

static uint8_t mix_byte(int64_t i, size_t j)
{
    return (uint8_t)(i * 31 + (int64_t)j * 7 + 1);
}

/* Whether (topic, data) is message i of the mix sequence. */
static bool mix_ok(int64_t i, const char *topic, sx_payload data)
{
    size_t tl = mix_tl(i), dl = mix_dl(i);
    if (topic == NULL || strlen(topic) != tl || data.len != dl ||
        (dl > 0 && data.data == NULL))
        return false;
    for (size_t j = 0; j < tl; j++)
        if (topic[j] != (char)('a' + (i + (int64_t)j) % 26))
            return false;
    for (size_t j = 0; j < dl; j++)
        if (data.data[j] != mix_byte(i, j))
            return false;
    return true;
}

/* mix.run [to, other, n, brk]: sends messages 0..n-1 of the mix sequence
 * to `to` in one step, and a message "x" to `other` after each message i
 * with i % brk == 0 (which ends a run of sends to `to`), then finishes. */
typedef struct {
    sx_pid to, other;
    int64_t n, brk;
} mix_st;

static int mix_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    mix_st *s = st;
    sx_unpack u, v;
    if (n != 4 || sx_payload_get_int(in[2], &s->n) != 0 ||
        sx_payload_get_int(in[3], &s->brk) != 0 || s->brk < 1)
        return SX_EINVAL;
    sx_unpack_init(&u, in[0]);
    sx_unpack_init(&v, in[1]);
    return sx_unpack_pid(&u, &s->to) == 0 && sx_unpack_pid(&v, &s->other) == 0
               ? 0
               : SX_EINVAL;
}

static int mix_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    (void)ev, (void)n;
    mix_st *s = st;
    static uint8_t data[3000];
    char topic[256];
    for (int64_t i = 0; i < s->n; i++) {
        size_t tl = mix_tl(i), dl = mix_dl(i);
        for (size_t j = 0; j < tl; j++)
            topic[j] = (char)('a' + (i + (int64_t)j) % 26);
        topic[tl] = 0;
        for (size_t j = 0; j < dl; j++)
            data[j] = mix_byte(i, j);
        sx_payload d = { dl > 0 ? data : NULL, dl };
        if (sx_send(out, s->to, topic, d) != 0)
            return SX_EFAILED;
        if (i % s->brk == 0 && sx_send(out, s->other, "x", nil) != 0)
            return SX_EFAILED;
    }
    sx_done(out, nil);
    return 0;
}

/* chk.run [n, cap]: takes messages, checks each against the mix sequence
 * (in order, exact topic and data) and that no step gets more than cap
 * events; finishes with how many it took once it has n. */
typedef struct {
    int64_t want, cap, next, seq; /* seq: 0 the mix sequence, 1 tiny's */
} chk_st;

static bool tiny_ok(int64_t i, const char *topic, sx_payload data);

static int chk_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    chk_st *s = st;
    s->seq = 0;
    return (n == 2 || n == 3) && sx_payload_get_int(in[0], &s->want) == 0 &&
                   sx_payload_get_int(in[1], &s->cap) == 0 &&
                   (n == 2 || sx_payload_get_int(in[2], &s->seq) == 0)
               ? 0
               : SX_EINVAL;
}

/* The sizes of the batches of the steps of chk processes, in order, for
 * a test that runs one chk on one worker (read after its wait). */
static size_t chk_sizes[64];
static int chk_steps;

static int chk_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    chk_st *s = st;
    char why[128];
    if (chk_steps < 64)
        chk_sizes[chk_steps++] = n;
    if ((int64_t)n > s->cap) {
        snprintf(why, sizeof why, "a step got %zu events (cap %lld)", n,
                 (long long)s->cap);
        sx_fail(out, why);
        return 0;
    }
    for (size_t k = 0; k < n; k++) {
        int64_t i = s->next++;
        if (ev[k].type != SX_EVENT_MESSAGE ||
            !(s->seq == 1 ? tiny_ok : mix_ok)(i, ev[k].topic, ev[k].data)) {
            snprintf(why, sizeof why, "message %lld arrived wrong",
                     (long long)i);
            sx_fail(out, why);
            return 0;
        }
    }
    if (s->next >= s->want) {
        uint8_t b[SX_PAYLOAD_INT_MAX];
        sx_done(out, sx_payload_int(b, s->next));
        return 0;
    }
    sx_idle(out);
    return 0;
}

static const sx_process_type mix_t = { .name = "mix",
                                       .state_size = sizeof(mix_st),
                                       .init = mix_init,
                                       .step = mix_step };
static const sx_process_type chk_t = { .name = "chk",
                                       .state_size = sizeof(chk_st),
                                       .init = chk_init,
                                       .step = chk_step };

/* An outside mailbox that checks the mix sequence ("x" messages only
 * counted). */
typedef struct {
    pthread_mutex_t mu;
    int64_t next, bad, x;
} mixbox;

static void mixbox_fn(void *user, const sx_message *m)
{
    mixbox *b = user;
    pthread_mutex_lock(&b->mu);
    if (strcmp(m->topic, "x") == 0 && m->data.len == 0)
        b->x++;
    else if (!mix_ok(b->next++, m->topic, m->data))
        b->bad++;
    pthread_mutex_unlock(&b->mu);
}

static int64_t mixbox_total(mixbox *b)
{
    pthread_mutex_lock(&b->mu);
    int64_t v = b->next + b->x;
    pthread_mutex_unlock(&b->mu);
    return v;
}

static const sx_process_type tiny_t;

static sx_engine *up_with(unsigned workers, unsigned throughput)
{
    sx_engine_config cfg = { .workers = workers, .throughput = throughput };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, &mix_t, 1);
    tx_engine_register(e, &chk_t, 1);
    tx_engine_register(e, &tiny_t, 1);
    tx_engine_start(e);
    return e;
}

static sx_pid submit_chk(sx_engine *e, int64_t n, int64_t cap)
{
    uint8_t nb[SX_PAYLOAD_INT_MAX], cb[SX_PAYLOAD_INT_MAX];
    sx_payload in[2] = { sx_payload_int(nb, n), sx_payload_int(cb, cap) };
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "chk", "run", in, 2, &pid), 0);
    return pid;
}

static sx_pid submit_mix(sx_engine *e, sx_pid to, sx_pid other, int64_t n,
                         int64_t brk)
{
    uint8_t pb[64], ob[64], nb[SX_PAYLOAD_INT_MAX], bb[SX_PAYLOAD_INT_MAX];
    sx_pack pk, po;
    sx_pack_init_fixed(&pk, pb, sizeof pb);
    sx_pack_pid(&pk, to);
    sx_pack_init_fixed(&po, ob, sizeof ob);
    sx_pack_pid(&po, other);
    sx_payload in[4] = { sx_pack_payload(&pk), sx_pack_payload(&po),
                         sx_payload_int(nb, n), sx_payload_int(bb, brk) };
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "mix", "run", in, 4, &pid), 0);
    return pid;
}

static void mixbox_wait(mixbox *b, int64_t total)
{
    TX_WAIT_UNTIL(mixbox_total(b) >= total, 10000, 0);
}

#define MIX_BRK 37
#define MIX_X ((MIX_N - 1) / MIX_BRK + 1) /* "x" messages: i = 0, 37, ... */

/* Property: 560 messages of one step to one process, of every size
 * (topics of 0..255 bytes; no data, a few bytes, around the record's
 * 255-byte length limit and the large and bundle nodes' sizes, bigger than
 * any node), each big one right after three small ones (so that it goes
 * into their bundle when it fits), with a message to an outside mailbox after
 * every 37th (ending a run of sends), arrive once each, in order, with exact
 * topic and data, and no step gets more events than the throughput; the
 * mailbox gets its 16. The stats count each message once (576), not each
 * node. Throughputs 32 (the default), 8, 3 and 1 (no bundle forms). */
static void test_bundles_exact(void)
{
    const unsigned caps[] = { 32, 8, 3, 1 };
    for (size_t c = 0; c < 4; c++) {
        sx_engine *e = up_with(2, caps[c]);
        static mixbox b = { .mu = PTHREAD_MUTEX_INITIALIZER };
        b.next = b.bad = b.x = 0;
        sx_pid other;
        CHECK_RC(sx_engine_mailbox_new(e, mixbox_fn, &b, &other), 0);
        sx_pid r = submit_chk(e, MIX_N, caps[c]);
        tx_wait_done(e, submit_mix(e, r, other, MIX_N, MIX_BRK), WAIT_MS, NULL);
        CHECK_EQ_INT(tx_wait_int(e, r, WAIT_MS), MIX_N);
        mixbox_wait(&b, MIX_X);
        CHECK_EQ_INT(b.x, MIX_X);
        CHECK_EQ_INT(b.bad, 0);
        sx_engine_stats st;
        CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
        CHECK_EQ_U64(st.dead_letters, 0);
        CHECK_EQ_U64(st.messages, MIX_N + MIX_X);
        CHECK_RC(sx_engine_mailbox_free(e, other), 0);
        tx_engine_down(e);
    }
}

/* Message i of the "tiny" sequence: every topic length 0..20 with every
 * data length 0..20 (each side of the 16 bytes that sx_send's quick paths
 * copy inline, engine/core/event.c), topics of i % 5 == 4 starting with a
 * two-byte UTF-8 letter (valid, but not the quick paths' ASCII), every byte
 * derived from i. */
#define TINY_N (21 * 21)
static size_t tiny_tl(int64_t i)
{
    return (size_t)(i % 21);
}

static size_t tiny_dl(int64_t i)
{
    return (size_t)(i / 21 % 21);
}

static void tiny_topic(int64_t i, char *t)
{
    size_t tl = tiny_tl(i), j = 0;
    if (i % 5 == 4 && tl >= 2) {
        t[0] = (char)0xc3, t[1] = (char)0xa9; /* U+00E9 */
        j = 2;
    }
    for (; j < tl; j++)
        t[j] = (char)('A' + (i * 3 + (int64_t)j) % 26);
    t[tl] = 0;
}

static bool tiny_ok(int64_t i, const char *topic, sx_payload data)
{
    char want[32];
    tiny_topic(i, want);
    size_t dl = tiny_dl(i);
    if (topic == NULL || strcmp(topic, want) != 0 || data.len != dl ||
        (dl > 0 && data.data == NULL))
        return false;
    for (size_t j = 0; j < dl; j++)
        if (data.data[j] != mix_byte(i + 1000, j))
            return false;
    return true;
}

/* tiny.run [to]: sends the tiny sequence to `to` in one step; after every
 * 7th message a send with a topic that is not UTF-8 (ASCII, then 0xff),
 * which must fail with SX_EINVAL and leave the run of sends as it was. */
static int tiny_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    sx_unpack u;
    if (n != 1)
        return SX_EINVAL;
    sx_unpack_init(&u, in[0]);
    return sx_unpack_pid(&u, (sx_pid *)st);
}

static int tiny_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)ev, (void)n;
    sx_pid to = *(sx_pid *)st;
    uint8_t data[32];
    char topic[32];
    for (int64_t i = 0; i < TINY_N; i++) {
        tiny_topic(i, topic);
        size_t dl = tiny_dl(i);
        for (size_t j = 0; j < dl; j++)
            data[j] = mix_byte(i + 1000, j);
        sx_payload d = { dl > 0 ? data : NULL, dl };
        if (sx_send(out, to, topic, d) != 0)
            return SX_EFAILED;
        if (i % 7 == 6) {
            char bad[8] = "ab\xff";
            if (sx_send(out, to, i % 2 ? bad : bad + 2, d) != SX_EINVAL)
                return SX_EFAILED;
        }
    }
    sx_done(out, nil);
    return 0;
}

static const sx_process_type tiny_t = { .name = "tiny",
                                        .state_size = sizeof(sx_pid),
                                        .init = tiny_init,
                                        .step = tiny_step };

/* Property: a step's small messages to one process, every topic length
 * 0..20 with every data length 0..20, some topics UTF-8 beyond ASCII, with
 * sends of bad topics in between (refused), arrive once each, in order,
 * exact, whether they join a bundle by the quick path or the general one:
 * throughputs 32 (bundles of up to 32) and 1 (none). */
static void test_bundle_small_records(void)
{
    const unsigned caps[] = { 32, 1 };
    for (size_t c = 0; c < 2; c++) {
        sx_engine *e = up_with(2, caps[c]);
        uint8_t nb[SX_PAYLOAD_INT_MAX], cb[SX_PAYLOAD_INT_MAX],
            sb[SX_PAYLOAD_INT_MAX];
        sx_payload cin[3] = { sx_payload_int(nb, TINY_N),
                              sx_payload_int(cb, caps[c]),
                              sx_payload_int(sb, 1) };
        sx_pid r;
        CHECK_RC(sx_engine_submit(e, "chk", "run", cin, 3, &r), 0);
        uint8_t pb[64];
        sx_pack pk;
        sx_pack_init_fixed(&pk, pb, sizeof pb);
        sx_pack_pid(&pk, r);
        sx_payload tin[1] = { sx_pack_payload(&pk) };
        sx_pid t;
        CHECK_RC(sx_engine_submit(e, "tiny", "run", tin, 1, &t), 0);
        tx_wait_done(e, t, WAIT_MS, NULL);
        CHECK_EQ_INT(tx_wait_int(e, r, WAIT_MS), TINY_N);
        sx_engine_stats st;
        CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
        CHECK_EQ_U64(st.dead_letters, 0);
        CHECK_EQ_U64(st.messages, TINY_N);
        tx_engine_down(e);
    }
}

/* Property: an outside mailbox gets a bundle one message at a time, in
 * order and exact (the same 560 messages, all to the mailbox); a process
 * that has finished gets none of them and counts each as a dead letter. */
static void test_bundles_to_mailbox_and_dead(void)
{
    sx_engine *e = up_with(2, 32);
    static mixbox b = { .mu = PTHREAD_MUTEX_INITIALIZER };
    b.next = b.bad = b.x = 0;
    sx_pid mb;
    CHECK_RC(sx_engine_mailbox_new(e, mixbox_fn, &b, &mb), 0);
    tx_wait_done(e, submit_mix(e, mb, mb, MIX_N, MIX_BRK), WAIT_MS, NULL);
    mixbox_wait(&b, MIX_N + MIX_X);
    CHECK_EQ_INT(b.bad, 0);
    CHECK_EQ_INT(b.next, MIX_N);
    /* A finished process: every message is a dead letter, whichever node
     * it travelled in. */
    sx_pid gone = submit_chk(e, 1, 32);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, gone, "", nil), 0);
    CHECK_EQ_INT(tx_wait_int(e, gone, WAIT_MS), 1);
    tx_wait_done(e, submit_mix(e, gone, gone, MIX_N, MIX_BRK), WAIT_MS, NULL);
    sx_engine_stats st;
    CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
    CHECK_EQ_U64(st.dead_letters, MIX_N + MIX_X);
    CHECK_RC(sx_engine_mailbox_free(e, mb), 0);
    tx_engine_down(e);
}

/* Property: a bundle with more messages than a step's batch has room for
 * gives the step the first of them and the rest to the next step, even
 * when the process goes IDLE in between (nothing else wakes it: a lost
 * rest makes the wait time out). With 1 worker and throughput 8, one step
 * sends message 0, then a message elsewhere, then messages 1..8 (a bundle
 * of 8) to an IDLE process: its steps get 0 (its first), then 8 (message
 * 0 and 7 of the bundle: a full batch, as with one node per message),
 * then the last 1. */
static void test_bundle_split(void)
{
    sx_engine *e = up_with(1, 8);
    static mixbox b = { .mu = PTHREAD_MUTEX_INITIALIZER };
    b.next = b.bad = b.x = 0;
    sx_pid other;
    CHECK_RC(sx_engine_mailbox_new(e, mixbox_fn, &b, &other), 0);
    chk_steps = 0;
    sx_pid r = submit_chk(e, 9, 8);
    tx_wait_done(e, submit_mix(e, r, other, 9, 9), WAIT_MS, NULL);
    CHECK_EQ_INT(tx_wait_int(e, r, WAIT_MS), 9);
    CHECK_EQ_INT(chk_steps, 3);
    CHECK_EQ_INT(chk_sizes[0], 0);
    CHECK_EQ_INT(chk_sizes[1], 8);
    CHECK_EQ_INT(chk_sizes[2], 1);
    CHECK_RC(sx_engine_mailbox_free(e, other), 0);
    tx_engine_down(e);
}

/* docs/API.md, pinned behaviour 5, with a bundle: an IDLE process woken by
 * messages gets the completion that arrived while it was idle in the same
 * batch as the waking message, even when the messages came as one bundle of
 * a whole batch (1 worker, throughput 8: the completion and 7 of the 8
 * messages, then the last). A held command (hold) is answered by the test
 * while the process is IDLE; then a second process sends it 8 messages in
 * one step. */
#define CMD_HOLD 300
/* Both seq_cst (the default): written on the worker, polled by the test
 * thread, which then uses the completer; no ordering finer than that is
 * worth reasoning about in a test. */
static sx_completer *_Atomic held;
static atomic_int idler_steps;
static sx_pid idler_pid;
static int idler_batch_msgs, idler_batch_comps, idler_msgs;

static int cmd_hold(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                    sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag, (void)args;
    atomic_store(&held, done);
    return 0;
}

static int idler_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st;
    int k = atomic_fetch_add(&idler_steps, 1) + 1;
    if (k == 1) {
        sx_yield(out, CMD_HOLD, 1, nil);
        sx_yield(out, SX_CMD_NOOP, 2, nil);
        return 0; /* waits for an answer */
    }
    if (k == 2) { /* the NOOP's answer; hold's is still out */
        sx_idle(out);
        return 0;
    }
    int msgs = 0, comps = 0;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].type == SX_EVENT_MESSAGE)
            msgs++;
        else
            comps++;
    }
    if (k == 3) {
        idler_batch_msgs = msgs;
        idler_batch_comps = comps;
    }
    idler_msgs += msgs;
    if (idler_msgs >= 8)
        sx_done(out, nil);
    else
        sx_idle(out);
    return 0;
}

static int eight_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    for (int i = 0; i < 8; i++)
        sx_send(out, idler_pid, "m", sx_payload_int(b, i));
    sx_done(out, nil);
    return 0;
}

static int no_init(void *st, const sx_init_ctx *c, const char *m,
                   const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

static void test_idle_wake_batch_bundle(void)
{
    const sx_process_type idler_t = { .name = "idler",
                                      .init = no_init,
                                      .step = idler_step };
    const sx_process_type eight_t = { .name = "eight",
                                      .init = no_init,
                                      .step = eight_step };
    sx_engine_config cfg = { .workers = 1, .throughput = 8 };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, &idler_t, 1);
    tx_engine_register(e, &eight_t, 1);
    tx_engine_command(e, CMD_HOLD, "hold", cmd_hold, NULL);
    tx_engine_start(e);
    CHECK_RC(sx_engine_submit(e, "idler", "run", NULL, 0, &idler_pid), 0);
    double end = sx_test_now_ms() + 10000;
    sx_process_info info;
    do { /* IDLE after its second step */
        CHECK(sx_test_now_ms() < end);
        sched_yield();
        CHECK_EQ_INT(sx_engine_list(e, &info, 1), 1);
    } while (atomic_load(&idler_steps) < 2 || info.state != SX_PSTATE_IDLE ||
             atomic_load(&held) == NULL);
    sx_complete(atomic_load(&held), nil, 0, NULL);
    CHECK_RC(sx_engine_submit(e, "eight", "run", NULL, 0, NULL), 0);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, idler_pid, 10000, &r), 0);
    CHECK_EQ_INT(r.error, 0);
    sx_result_free(&r);
    CHECK_EQ_INT(idler_batch_comps, 1);
    CHECK_EQ_INT(idler_batch_msgs, 7);
    CHECK_EQ_INT(atomic_load(&idler_steps), 4);
    tx_engine_down(e);
}

/* docs/API.md, pinned behaviour 5, when more than a batch of completions
 * piled up while the process was IDLE (throughput 8, 20 held commands
 * answered while it idles): the step the waking message starts gets all 20
 * completions, in the order they were answered, and the message after them,
 * in one batch past the budget, not the first 8 completions alone, an IDLE
 * process woken with no message in its batch. */
#define CMD_HOLDN 301
#define HOLDN 20
static sx_completer *_Atomic holdn[HOLDN];
static atomic_int holdn_count;
static atomic_int piler_steps;
static size_t piler_n;
static int piler_order_ok;

static int cmd_holdn(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)args;
    if (tag < 1 || tag > HOLDN)
        return SX_EINVAL;
    atomic_store(&holdn[tag - 1], done);
    atomic_fetch_add(&holdn_count, 1);
    return 0;
}

static int piler_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st;
    int k = atomic_fetch_add(&piler_steps, 1) + 1;
    if (k == 1) {
        for (uint64_t t = 1; t <= HOLDN; t++)
            sx_yield(out, CMD_HOLDN, t, nil);
        sx_yield(out, SX_CMD_NOOP, 100, nil);
        return 0; /* waits for an answer */
    }
    if (k == 2) { /* the NOOP's answer; the holds are still out */
        sx_idle(out);
        return 0;
    }
    piler_n = n;
    int ok = n == HOLDN + 1 && ev[HOLDN].type == SX_EVENT_MESSAGE &&
             strcmp(ev[HOLDN].topic, "wake") == 0;
    for (size_t i = 0; ok && i < HOLDN; i++)
        ok = ev[i].type == SX_EVENT_YIELD_COMPLETE && ev[i].tag == i + 1;
    piler_order_ok = ok;
    sx_done(out, nil);
    return 0;
}

static void test_idle_wake_past_budget(void)
{
    const sx_process_type piler_t = { .name = "piler",
                                      .init = no_init,
                                      .step = piler_step };
    sx_engine_config cfg = { .workers = 1, .throughput = 8 };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, &piler_t, 1);
    tx_engine_command(e, CMD_HOLDN, "holdn", cmd_holdn, NULL);
    tx_engine_start(e);
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "piler", "run", NULL, 0, &pid), 0);
    double end = sx_test_now_ms() + 10000;
    sx_process_info info;
    do { /* IDLE after its second step, every hold registered */
        CHECK(sx_test_now_ms() < end);
        sched_yield();
        CHECK_EQ_INT(sx_engine_list(e, &info, 1), 1);
    } while (atomic_load(&piler_steps) < 2 || info.state != SX_PSTATE_IDLE ||
             atomic_load(&holdn_count) < HOLDN);
    for (int i = 0; i < HOLDN; i++)
        sx_complete(atomic_load(&holdn[i]), nil, 0, NULL);
    CHECK_EQ_INT(atomic_load(&piler_steps), 2); /* completions: no wake */
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, pid, "wake", nil), 0);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pid, 10000, &r), 0);
    CHECK_EQ_INT(r.error, 0);
    sx_result_free(&r);
    CHECK_EQ_U64(piler_n, HOLDN + 1);
    CHECK(piler_order_ok);
    CHECK_EQ_INT(atomic_load(&piler_steps), 3);
    tx_engine_down(e);
}

/* docs/API.md, pinned behaviour 5, when the waking event is a cancel (a
 * control event, which comes first in its batch) and more than a batch of
 * completions piled up while the process was IDLE (throughput 8, 20 held
 * commands answered while it idles): the cancel's step gets all 20
 * completions after it, in the order they were answered, in one batch past
 * the budget. Were the cancel counted as the waking message already in the
 * batch, the step would get the cancel and the first 7 completions only,
 * and the other 13 would stay queued behind an IDLE process that no
 * completion wakes; with 10 cancels (more than the budget) it would get no
 * completion at all. */
static atomic_int cpiler_steps;
static size_t cpiler_ncancel;
static atomic_int cgate_go, cgate_in;

static int cgate_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    atomic_store(&cgate_in, 1);
    while (!atomic_load(&cgate_go))
        sched_yield();
    sx_done(out, nil);
    return 0;
}
static size_t cpiler_n;
static int cpiler_order_ok;

static int cpiler_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    (void)st;
    int k = atomic_fetch_add(&cpiler_steps, 1) + 1;
    if (k == 1) {
        for (uint64_t t = 1; t <= HOLDN; t++)
            sx_yield(out, CMD_HOLDN, t, nil);
        sx_yield(out, SX_CMD_NOOP, 100, nil);
        return 0; /* waits for an answer */
    }
    if (k == 2) { /* the NOOP's answer; the holds are still out */
        sx_idle(out);
        return 0;
    }
    cpiler_n = n;
    size_t c = cpiler_ncancel;
    int ok = n == HOLDN + c;
    for (size_t i = 0; ok && i < c; i++)
        ok = ev[i].type == SX_EVENT_MESSAGE &&
             strcmp(ev[i].topic, SX_TOPIC_CANCEL) == 0;
    for (size_t i = 0; ok && i < HOLDN; i++)
        ok =
            ev[c + i].type == SX_EVENT_YIELD_COMPLETE && ev[c + i].tag == i + 1;
    cpiler_order_ok = ok;
    sx_done(out, nil);
    return 0;
}

static void idle_cancel_past_budget(size_t ncancel)
{
    const sx_process_type cpiler_t = { .name = "cpiler",
                                       .init = no_init,
                                       .step = cpiler_step };
    sx_engine_config cfg = { .workers = 1, .throughput = 8 };
    sx_engine *e = tx_engine_new(&cfg);
    const sx_process_type cgate_t = { .name = "cgate",
                                      .init = no_init,
                                      .step = cgate_step };
    tx_engine_register(e, &cpiler_t, 1);
    tx_engine_register(e, &cgate_t, 1);
    tx_engine_command(e, CMD_HOLDN, "holdn", cmd_holdn, NULL);
    tx_engine_start(e);
    for (int i = 0; i < HOLDN; i++)
        atomic_store(&holdn[i], NULL);
    atomic_store(&holdn_count, 0);
    atomic_store(&cpiler_steps, 0);
    cpiler_ncancel = ncancel;
    cpiler_n = 0;
    cpiler_order_ok = 0;
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "cpiler", "run", NULL, 0, &pid), 0);
    double end = sx_test_now_ms() + 10000;
    sx_process_info info;
    do { /* IDLE after its second step, every hold registered */
        CHECK(sx_test_now_ms() < end);
        sched_yield();
        CHECK_EQ_INT(sx_engine_list(e, &info, 1), 1);
    } while (atomic_load(&cpiler_steps) < 2 || info.state != SX_PSTATE_IDLE ||
             atomic_load(&holdn_count) < HOLDN);
    for (int i = 0; i < HOLDN; i++)
        sx_complete(atomic_load(&holdn[i]), nil, 0, NULL);
    CHECK_EQ_INT(atomic_load(&cpiler_steps), 2); /* completions: no wake */
    /* The one worker is held by a gate process while the cancels go in,
     * so that all of them are queued before the step that takes them. */
    atomic_store(&cgate_go, 0);
    atomic_store(&cgate_in, 0);
    sx_pid gate;
    CHECK_RC(sx_engine_submit(e, "cgate", "run", NULL, 0, &gate), 0);
    while (!atomic_load(&cgate_in)) {
        CHECK(sx_test_now_ms() < end);
        sched_yield();
    }
    for (size_t i = 0; i < ncancel; i++)
        CHECK_RC(sx_engine_cancel(e, pid, "go"), 0);
    atomic_store(&cgate_go, 1);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pid, 10000, &r), 0);
    CHECK_EQ_INT(r.error, 0);
    sx_result_free(&r);
    CHECK_EQ_U64(cpiler_n, HOLDN + ncancel);
    CHECK(cpiler_order_ok);
    CHECK_EQ_INT(atomic_load(&cpiler_steps), 3);
    tx_engine_down(e);
}

static void test_idle_cancel_past_budget(void)
{
    idle_cancel_past_budget(1);
    idle_cancel_past_budget(10);
}

/* Control events (cancels) are never split across batches: ten cancels
 * pending when a process runs (throughput 4) all come in its next step, in
 * the order they were sent. Split, the ones left over would go back on the
 * control stack, where any cancel pushed meanwhile could overtake them. The
 * single worker is held by a spinning step while the cancels arrive. */
static atomic_int spin_go, spinning;
static int canceled_batches[16], canceled_nb, canceled_seen;
static int canceled_in_order = 1;

static int spinner_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    atomic_store(&spinning, 1);
    while (!atomic_load(&spin_go))
        sched_yield();
    sx_done(out, nil);
    return 0;
}

static int canceled_step(void *st, const sx_event *ev, size_t n,
                         sx_step_output *out)
{
    (void)st;
    if (n == 0) { /* first step */
        sx_idle(out);
        return 0;
    }
    if (canceled_nb < 16)
        canceled_batches[canceled_nb++] = (int)n;
    for (size_t i = 0; i < n; i++) {
        char want[8], got[8];
        snprintf(want, sizeof want, "r%d", canceled_seen++);
        if (ev[i].type != SX_EVENT_MESSAGE ||
            strcmp(ev[i].topic, SX_TOPIC_CANCEL) != 0 ||
            sx_payload_get_str(ev[i].data, got, sizeof got) != 0 ||
            strcmp(got, want) != 0)
            canceled_in_order = 0;
    }
    if (canceled_seen >= 10)
        sx_done(out, nil);
    else
        sx_idle(out);
    return 0;
}

static void test_cancels_one_batch(void)
{
    const sx_process_type spinner_t = { .name = "spinner",
                                        .init = no_init,
                                        .step = spinner_step };
    const sx_process_type canceled_t = { .name = "canceled",
                                         .init = no_init,
                                         .step = canceled_step };
    sx_engine_config cfg = { .workers = 1, .throughput = 4 };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, &spinner_t, 1);
    tx_engine_register(e, &canceled_t, 1);
    tx_engine_start(e);
    sx_pid target;
    CHECK_RC(sx_engine_submit(e, "canceled", "run", NULL, 0, &target), 0);
    double end = sx_test_now_ms() + 10000;
    sx_process_info info;
    do { /* IDLE after its first step */
        CHECK(sx_test_now_ms() < end);
        sched_yield();
        CHECK_EQ_INT(sx_engine_list(e, &info, 1), 1);
    } while (info.steps < 1 || info.state != SX_PSTATE_IDLE);
    CHECK_RC(sx_engine_submit(e, "spinner", "run", NULL, 0, NULL), 0);
    while (!atomic_load(&spinning)) {
        CHECK(sx_test_now_ms() < end);
        sched_yield();
    }
    for (int i = 0; i < 10; i++) {
        char reason[8];
        snprintf(reason, sizeof reason, "r%d", i);
        CHECK_RC(sx_engine_cancel(e, target, reason), 0);
    }
    atomic_store(&spin_go, 1);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, target, 10000, &r), 0);
    CHECK_EQ_INT(r.error, 0);
    sx_result_free(&r);
    CHECK_EQ_INT(canceled_nb, 1);
    CHECK_EQ_INT(canceled_batches[0], 10);
    CHECK(canceled_in_order);
    tx_engine_down(e);
}

static const sx_test_case cases[] = {
    { "order_and_done", test_order_and_done },
    { "chain_to_process", test_chain_to_process },
    { "dead_letter_and_idle", test_dead_letter_and_idle },
    { "sends_then_fail", test_sends_then_fail },
    { "bundles_exact", test_bundles_exact },
    { "bundles_to_mailbox_and_dead", test_bundles_to_mailbox_and_dead },
    { "bundle_split", test_bundle_split },
    { "bundle_small_records", test_bundle_small_records },
    { "idle_wake_batch_bundle", test_idle_wake_batch_bundle },
    { "idle_wake_past_budget", test_idle_wake_past_budget },
    { "idle_cancel_past_budget", test_idle_cancel_past_budget },
    { "cancels_one_batch", test_cancels_one_batch },
    { "dead_letter_id_zero", test_dead_letter_id_zero },
};

SX_TEST_MAIN(cases)

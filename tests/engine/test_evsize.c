/* tests/engine/test_evsize.c — event bytes of every size arrive intact.
 *
 * Event nodes come in two sizes (engine/core/event.c): a small node for a
 * message whose bytes (topic, its NUL, data) fit a small inline room, a
 * large node for everything else and for every completion, and a heap
 * block when the bytes outgrow even the large room. These cases send
 * messages and complete yields whose byte counts run without a gap from 1
 * past both inline rooms (and a few far beyond), and check each one byte
 * for byte, in order, on every path that builds a node: sx_send from a
 * step (chains), sx_engine_send from an outside thread, delivery to a
 * process and to an outside mailbox, and sx_complete with a result or an
 * error message.
 *
 * Negative controls (each run once, not kept): a small node's bytes
 * addressed 8 bytes further on, or freed small nodes put on the large
 * nodes' list (and so reused as large ones), make ASan report a
 * heap-buffer-overflow here; completers allocated as small nodes make
 * UBSan report a misaligned deadline pointer (the ASan build) and crash
 * the completions case (the gcc build).
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stepx/stepx.h>

#include "engine/core/core.h"
#include "tests/support/support.h"

#define WAIT_MS 20000 /* for a process to finish */

static const sx_payload nil = { NULL, 0 };

/* ---- the expected bytes of event k ---- */

/* Byte counts: k < N_RUN run through every data length 0..159 with topic
 * lengths 0..5 (so a message's bytes, topic + NUL + data, cover 1..165
 * with no gap); the last few go far past any inline room. */
#define N_RUN (6 * 160)
static const size_t big_len[] = { 255, 1000, 4096, 70000 };
#define N_EV (N_RUN + sizeof(big_len) / sizeof(big_len[0]))

static size_t topic_len(int64_t k)
{
    return k < N_RUN ? (size_t)(k % 6) : 3;
}

static size_t data_len(int64_t k)
{
    return k < N_RUN ? (size_t)(k / 6) : big_len[k - N_RUN];
}

static void topic_of(int64_t k, char *t)
{
    size_t n = topic_len(k);
    for (size_t i = 0; i < n; i++)
        t[i] = (char)('a' + (k + (int64_t)i) % 26);
    t[n] = 0;
}

static uint8_t *data_of(int64_t k)
{
    size_t n = data_len(k);
    uint8_t *d = malloc(n > 0 ? n : 1);
    CHECK(d != NULL);
    for (size_t i = 0; i < n; i++)
        d[i] = (uint8_t)(k * 131 + (int64_t)i * 7 + 3);
    return d;
}

/* 0 if topic and data are event k's, else a reason. */
static const char *mismatch(int64_t k, const char *topic, sx_payload data)
{
    char t[8];
    topic_of(k, t);
    if (topic == NULL || strcmp(topic, t) != 0)
        return "topic";
    if (data.len != data_len(k))
        return "data length";
    if (data.len == 0)
        return data.data == NULL ? NULL : "empty data not NULL";
    uint8_t *d = data_of(k);
    int same = memcmp(d, data.data, data.len) == 0;
    free(d);
    return same ? NULL : "data bytes";
}

/* ---- gen.run [to, first, n]: sx_sends events first..first+n-1 to `to`,
 * 1 to 7 per step (chains of varied length), then DONE ---- */

typedef struct {
    sx_pid to;
    int64_t next, end, step;
} gen_st;

static int gen_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    gen_st *s = st;
    int64_t cnt;
    sx_unpack u;
    if (n != 3 || sx_payload_get_int(in[1], &s->next) != 0 ||
        sx_payload_get_int(in[2], &cnt) != 0)
        return SX_EINVAL;
    s->end = s->next + cnt;
    sx_unpack_init(&u, in[0]);
    return sx_unpack_pid(&u, &s->to) == 0 ? 0 : SX_EINVAL;
}

static int gen_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    (void)ev, (void)n;
    gen_st *s = st;
    int64_t burst = 1 + s->step++ % 7;
    for (int64_t i = 0; i < burst && s->next < s->end; i++, s->next++) {
        char t[8];
        topic_of(s->next, t);
        uint8_t *d = data_of(s->next);
        int rc = sx_send(out, s->to, t, (sx_payload){ d, data_len(s->next) });
        free(d);
        if (rc != 0)
            return rc;
    }
    if (s->next == s->end)
        sx_done(out, nil);
    return 0; /* CONTINUE otherwise: only sx_send written */
}

/* ---- chk.run [n]: takes events 0..n-1 (messages, from one sender) and
 * finishes with n; any other byte, order or sender fails it ---- */

typedef struct {
    int64_t want, next;
    sx_pid from;
} chk_st;

static int chk_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    chk_st *s = st;
    return n == 1 && sx_payload_get_int(in[0], &s->want) == 0 ? 0 : SX_EINVAL;
}

static int chk_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    chk_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    for (size_t i = 0; i < n; i++) {
        const char *why = ev[i].type != SX_EVENT_MESSAGE
                              ? "not a message"
                              : mismatch(s->next, ev[i].topic, ev[i].data);
        if (why == NULL && s->next > 0 && !sx_pid_eq(s->from, ev[i].from))
            why = "another sender";
        if (why != NULL) {
            char msg[96];
            snprintf(msg, sizeof msg, "event %lld: %s", (long long)s->next,
                     why);
            sx_fail(out, msg);
            return 0;
        }
        s->from = ev[i].from;
        if (++s->next == s->want) {
            sx_done(out, sx_payload_int(b, s->next));
            return 0;
        }
    }
    sx_idle(out);
    return 0;
}

/* ---- echo (command 300): completes at once with its args as the result
 * when the tag is even, with error SX_EFAILED and the args as the error
 * message (a string) when it is odd ---- */

#define CMD_ECHO 300

static int echo(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid;
    if (tag % 2 == 0) {
        sx_complete(done, args, 0, NULL);
        return 0;
    }
    char *msg = malloc(args.len + 1);
    if (msg == NULL)
        return SX_ENOMEM;
    if (args.len > 0)
        memcpy(msg, args.data, args.len);
    msg[args.len] = 0;
    sx_complete(done, nil, SX_EFAILED, msg);
    free(msg);
    return 0;
}

/* ---- yld.run: yields echo for every event k (args: event k's data, as a
 * string of printable bytes for the odd ones) and checks each answer ---- */

typedef struct {
    int64_t k;
} yld_st;

static int yld_init(void *st, const sx_init_ctx *c, const char *m,
                    const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

/* Odd events travel as an error message: printable, no NUL. */
static void printable(uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = (uint8_t)(' ' + 1 + d[i] % 90);
}

static int yld_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    yld_st *s = st;
    if (n > 0) {
        int64_t k = s->k - 1;
        size_t len = data_len(k);
        uint8_t *d = data_of(k);
        const char *why = NULL;
        if (n != 1 || ev[0].type != SX_EVENT_YIELD_COMPLETE ||
            ev[0].tag != (uint64_t)k) {
            why = "not the one completion";
        } else if (k % 2 == 0) {
            if (ev[0].error != 0 || ev[0].data.len != len ||
                (len > 0 && memcmp(ev[0].data.data, d, len) != 0))
                why = "result bytes";
        } else {
            printable(d, len);
            if (ev[0].error != SX_EFAILED || ev[0].error_msg == NULL ||
                strlen(ev[0].error_msg) != len ||
                memcmp(ev[0].error_msg, d, len) != 0)
                why = "error message bytes";
        }
        free(d);
        if (why != NULL) {
            char msg[96];
            snprintf(msg, sizeof msg, "completion %lld: %s", (long long)k, why);
            sx_fail(out, msg);
            return 0;
        }
    }
    if (s->k == (int64_t)N_EV) {
        sx_done(out, nil);
        return 0;
    }
    size_t len = data_len(s->k);
    uint8_t *d = data_of(s->k);
    if (s->k % 2 == 1)
        printable(d, len);
    int rc = sx_yield(out, CMD_ECHO, (uint64_t)s->k, (sx_payload){ d, len });
    free(d);
    s->k++;
    return rc;
}

static const sx_process_type types[] = {
    { .name = "gen",
      .state_size = sizeof(gen_st),
      .init = gen_init,
      .step = gen_step },
    { .name = "chk",
      .state_size = sizeof(chk_st),
      .init = chk_init,
      .step = chk_step },
    { .name = "yld",
      .state_size = sizeof(yld_st),
      .init = yld_init,
      .step = yld_step },
};

/* ---- an outside mailbox that checks like chk ---- */

typedef struct {
    pthread_mutex_t mu;
    int64_t next, bad;
    char why[96];
} box;

static void box_fn(void *user, const sx_message *m)
{
    box *b = user;
    pthread_mutex_lock(&b->mu);
    const char *why = mismatch(b->next, m->topic, m->data);
    if (why != NULL && b->bad++ == 0)
        snprintf(b->why, sizeof b->why, "event %lld: %s", (long long)b->next,
                 why);
    b->next++;
    pthread_mutex_unlock(&b->mu);
}

static void box_wait(box *b, int64_t n)
{
    double end = sx_test_now_ms() + 20000;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        int64_t got = b->next, bad = b->bad;
        pthread_mutex_unlock(&b->mu);
        if (bad != 0)
            SX_FAILF("mailbox: %s", b->why);
        if (got == n)
            return;
        CHECK(got < n);
        CHECK(sx_test_now_ms() < end);
        sched_yield();
    }
}

/* ---- helpers ---- */

static sx_engine *up(void)
{
    sx_engine_config cfg = { .workers = 2 };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, types, sizeof(types) / sizeof(types[0]));
    tx_engine_command(e, CMD_ECHO, "echo", echo, NULL);
    tx_engine_start(e);
    return e;
}

/* No message was a dead letter; then stopped and freed. */
static void down(sx_engine *e)
{
    CHECK_EQ_U64(tx_engine_stats(e).dead_letters, 0);
    tx_engine_down(e);
}

static sx_pid gen(sx_engine *e, sx_pid to)
{
    uint8_t pb[64], fb[SX_PAYLOAD_INT_MAX], nb[SX_PAYLOAD_INT_MAX];
    sx_pack pk;
    sx_pack_init_fixed(&pk, pb, sizeof pb);
    sx_pack_pid(&pk, to);
    sx_payload in[3] = { sx_pack_payload(&pk), sx_payload_int(fb, 0),
                         sx_payload_int(nb, (int64_t)N_EV) };
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "gen", "run", in, 3, &pid), 0);
    return pid;
}

static sx_pid chk(sx_engine *e)
{
    uint8_t nb[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(nb, (int64_t)N_EV);
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "chk", "run", &in, 1, &pid), 0);
    return pid;
}

/* The outside thread sends every event to `to` with sx_engine_send. */
static void send_all(sx_engine *e, sx_pid to)
{
    for (int64_t k = 0; k < (int64_t)N_EV; k++) {
        char t[8];
        topic_of(k, t);
        uint8_t *d = data_of(k);
        CHECK_RC(sx_engine_send(e, SX_PID_NONE, to, t,
                                (sx_payload){ d, data_len(k) }),
                 0);
        free(d);
    }
}

/* ---- cases ---- */

/* Property: messages of every byte count from 1 past both inline rooms,
 * and a few far beyond, sent with sx_send (in chains of 1 to 7) to a
 * process, arrive once each, in order, byte for byte, from the sender. */
static void test_step_to_process(void)
{
    sx_engine *e = up();
    sx_pid r = chk(e);
    sx_pid g = gen(e, r);
    tx_wait_done(e, g, WAIT_MS, NULL);
    tx_wait_done(e, r, WAIT_MS, NULL);
    down(e);
}

/* Property: the same messages sent with sx_engine_send from a thread that
 * is not a worker (nodes from malloc, freed into a worker's cache) arrive
 * the same way; then a second round reuses the freed nodes of both sizes
 * from the workers' caches and still arrives intact. */
static void test_outside_to_process(void)
{
    sx_engine *e = up();
    for (int round = 0; round < 2; round++) {
        sx_pid r = chk(e);
        send_all(e, r);
        tx_wait_done(e, r, WAIT_MS, NULL);
        /* A worker's sends now take the freed nodes back. */
        sx_pid r2 = chk(e);
        tx_wait_done(e, gen(e, r2), WAIT_MS, NULL);
        tx_wait_done(e, r2, WAIT_MS, NULL);
    }
    down(e);
}

/* Property: an outside mailbox gets every message intact and in order,
 * whether it came from a step (sx_send) or from an outside thread. */
static void test_to_mailbox(void)
{
    sx_engine *e = up();
    static box b1 = { .mu = PTHREAD_MUTEX_INITIALIZER };
    static box b2 = { .mu = PTHREAD_MUTEX_INITIALIZER };
    sx_pid m1, m2;
    CHECK_RC(sx_engine_mailbox_new(e, box_fn, &b1, &m1), 0);
    CHECK_RC(sx_engine_mailbox_new(e, box_fn, &b2, &m2), 0);
    tx_wait_done(e, gen(e, m1), WAIT_MS, NULL);
    box_wait(&b1, (int64_t)N_EV);
    send_all(e, m2);
    box_wait(&b2, (int64_t)N_EV);
    CHECK_RC(sx_engine_mailbox_free(e, m1), 0);
    CHECK_RC(sx_engine_mailbox_free(e, m2), 0);
    down(e);
}

/* Property: a completion carries a result (even tags) or an error message
 * (odd tags) of every length from 0 past the large node's inline room,
 * and a few far beyond, byte for byte, to the yield that asked. */
static void test_completions(void)
{
    sx_engine *e = up();
    sx_pid p;
    CHECK_RC(sx_engine_submit(e, "yld", "run", NULL, 0, &p), 0);
    tx_wait_done(e, p, WAIT_MS, NULL);
    down(e);
}

/* ---- a bundle's quick append against the general one ---- */

/* A bundle in a node of size class big (1: large, 2: bundle) whose records
 * take exactly `used` bytes: a first message (topic "a", no data, 4 bytes),
 * a 3-byte record (so that the two make a bundle in a large node), then
 * records of an empty topic and up to 254 bytes of data. */
static sx__ev *bundle_of(int big, size_t used)
{
    static const uint8_t fill[300];
    sx__ev *ev = sx__ev_alloc_sized(2);
    CHECK(ev != NULL);
    ev->kind = SX__EV_MESSAGE;
    CHECK_RC(sx__ev_set(ev, "a", 1, nil, NULL), 0);
    CHECK(used >= 7);
    CHECK_RC(sx__ev_bundle_add(&ev, "", 0, nil, 1000), 0);
    size_t left = used - 7;
    while (left > 0) {
        size_t r = left < 257 ? left : 257;
        if (left - r > 0 && left - r < 3)
            r = left - 3; /* no record is under 3 bytes */
        sx_payload d = { fill, r - 3 };
        CHECK_RC(sx__ev_bundle_add(&ev, "", 0, d, 1000), 0);
        left -= r;
    }
    CHECK_EQ_INT(ev->big, big);
    CHECK_EQ_INT(ev->data_len, used);
    return ev;
}

/* a and b hold the same records (count, length, bytes); frees both. */
static void check_same_bundle(sx__ev *a, sx__ev *b)
{
    CHECK_EQ_INT(a->nmsg, b->nmsg);
    CHECK_EQ_INT(a->data_len, b->data_len);
    CHECK(memcmp(sx__ev_inl(a), sx__ev_inl(b), a->data_len) == 0);
    sx__ev_free(a);
    sx__ev_free(b);
}

/* Property: sx__ev_bundle_append (sx_send's quick path into a bundle)
 * takes a record exactly when it is small (topic and data of up to 16
 * bytes), its topic ASCII, the bundle under its count and the record
 * within the node's room, and then writes the bytes sx__ev_bundle_add
 * writes; anything else it refuses with the bundle unchanged. Every topic
 * and data length 0..17, a bundle in either node size ending 1 byte short
 * of its room, on it and 1 byte past it, at and under its count. */
static void test_bundle_append_exact(void)
{
    uint8_t data[32];
    char topic[32];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(0x91 + 7 * i);
    for (int big = 1; big <= 2; big++) {
        size_t cap = big == 1 ? SX__EV_INLINE : SX__EV_BUNDLE;
        for (size_t tl = 0; tl <= 17; tl++) {
            for (size_t dl = 0; dl <= 17; dl++) {
                size_t rs = 2 + tl + 1 + dl;
                for (int v = 0; v < 8; v++) {
                    /* v 0-2: end at cap - 1, cap, cap + 1; 3: a bundle
                     * at its count; 4-7: the topic's last byte, or its
                     * first, not ASCII (0xc3, 0x80) */
                    size_t used = cap - rs + (v <= 2 ? (size_t)v : 0) - 1;
                    for (size_t j = 0; j < tl; j++)
                        topic[j] = (char)('A' + (tl + dl + j) % 26);
                    topic[tl] = 0;
                    if (v >= 4 && tl == 0)
                        continue;
                    if (v >= 4)
                        topic[(v & 1) ? tl - 1 : 0] =
                            (char)((v & 2) ? 0x80 : 0xc3);
                    sx__ev *a = bundle_of(big, used), *b = bundle_of(big, used);
                    unsigned max = v == 3 ? a->nmsg : a->nmsg + 1;
                    sx_payload d = { dl > 0 ? data : NULL, dl };
                    bool fits = tl <= 16 && dl <= 16 && used + rs <= cap &&
                                v != 3 && v < 4;
                    int rc = sx__ev_bundle_append(a, topic, tl, d, max);
                    if (rc != (fits ? 0 : -1)) {
                        fprintf(stderr, "big %d tl %zu dl %zu v %d: %d\n", big,
                                tl, dl, v, rc);
                        CHECK(false);
                    }
                    if (fits) {
                        sx__ev *b0 = b;
                        CHECK_RC(sx__ev_bundle_add(&b, topic, tl, d, max), 0);
                        CHECK(b == b0);
                    }
                    check_same_bundle(a, b);
                }
            }
        }
    }
}

/* Property: the quick append's topic check refuses a topic with a NUL
 * or a byte of 0x80 and up at any position, and takes one of bytes
 * 0x01-0x7f: every length 1..16, every position, bytes 0x00, 0x01, 0x7f,
 * 0x80, 0xc3 and 0xff, the rest of the topic 0x01, 0x7f or a letter (the
 * ends of the ASCII range, where a check on whole words would borrow or
 * carry). */
static void test_bundle_append_topic_bytes(void)
{
    static const uint8_t put[] = { 0x00, 0x01, 0x7f, 0x80, 0xc3, 0xff };
    static const uint8_t rest[] = { 0x01, 0x7f, 'm' };
    char topic[17];
    for (size_t tl = 1; tl <= 16; tl++) {
        for (size_t j = 0; j < tl; j++) {
            for (size_t x = 0; x < sizeof put; x++) {
                for (size_t r = 0; r < sizeof rest; r++) {
                    memset(topic, rest[r], tl);
                    topic[j] = (char)put[x];
                    topic[tl] = 0;
                    bool ok = put[x] >= 0x01 && put[x] <= 0x7f;
                    sx__ev *a = bundle_of(1, 7);
                    int rc = sx__ev_bundle_append(a, topic, tl, nil, 64);
                    if (rc != (ok ? 0 : -1)) {
                        fprintf(stderr,
                                "length %zu, byte %zu = 0x%02x (rest 0x%02x): "
                                "%d\n",
                                tl, j, put[x], rest[r], rc);
                        CHECK(false);
                    }
                    CHECK_EQ_INT(a->nmsg, ok ? 3 : 2);
                    /* Refused: the bundle as it was; taken: the bytes
                     * the general path writes. */
                    sx__ev *b = bundle_of(1, 7);
                    if (ok)
                        CHECK_RC(sx__ev_bundle_add(&b, topic, tl, nil, 64), 0);
                    check_same_bundle(a, b);
                }
            }
        }
    }
}

/* ---- the depot's cap ---- */

/* Property: the shared depot of free nodes keeps, of each size, the most
 * it ever kept (256 Ki small, 256 Ki large, 16 Ki bundle nodes: 96 MiB)
 * on a machine of 13 GiB or more, or when the memory is unknown; below
 * that no size keeps more than 1/256 of the memory, and never fewer than
 * one batch (256). A fixed 96 MiB cap would be ~10 % of a 1 GiB
 * machine. */
static void test_depot_cap(void)
{
    const size_t size[3] = { offsetof(sx__ev, small) + SX__EV_SMALL,
                             sizeof(sx__ev) + SX__EV_INLINE,
                             sizeof(sx__ev) + SX__EV_BUNDLE };
    const size_t top[3] = { 256 * 1024, 256 * 1024, 16 * 1024 };
    const uint64_t gib = (uint64_t)1 << 30;
    for (int big = 0; big < 3; big++) {
        CHECK_EQ_U64(sx__ev_depot_cap(big, 0), top[big]);
        CHECK_EQ_U64(sx__ev_depot_cap(big, 14 * gib), top[big]);
        CHECK_EQ_U64(sx__ev_depot_cap(big, 1024 * gib), top[big]);
        CHECK_EQ_U64(sx__ev_depot_cap(big, 4 << 20), 256);
        for (uint64_t mem = gib / 2; mem <= 4 * gib; mem += gib / 2) {
            size_t n = sx__ev_depot_cap(big, mem);
            if (n * size[big] > mem / 256 ||
                (n < top[big] && (n + 1) * size[big] <= mem / 256))
                SX_FAILF("size %d, %llu bytes of memory: %zu nodes of %zu "
                         "bytes",
                         big, (unsigned long long)mem, n, size[big]);
        }
    }
}

static const sx_test_case cases[] = {
    { "step_to_process", test_step_to_process },
    { "outside_to_process", test_outside_to_process },
    { "to_mailbox", test_to_mailbox },
    { "completions", test_completions },
    { "depot_cap", test_depot_cap },
    { "bundle_append_exact", test_bundle_append_exact },
    { "bundle_append_topic_bytes", test_bundle_append_topic_bytes },
};

SX_TEST_MAIN(cases)

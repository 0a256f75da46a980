/* tests/engine/test_twheel.c — the timer set of the workers' sleeps
 * (engine/timer/twheel.c): a hashed wheel in front of two heaps.
 *
 * Every case checks the set against a plain model (an array of live
 * entries) after each operation: take(now) returns exactly the entries due
 * at now, never one that is not due, earliest first (a take cut short by
 * max leaves nothing due earlier than what it took); earliest() is the
 * model's minimum; filter removes exactly what its predicate rejects.
 * The clock moves in steps of every size the wheel distinguishes: within
 * a bucket, across a few, past the wheel's whole span (~268 ms), and
 * hours; dues land in the past, in near, in every bucket and far beyond.
 *
 * Negative controls, each run once on a scratch copy of engine/timer/twheel.c:
 *  W1. advance moves only the bucket of now's slot (`k = steps` start):
 *      entries of skipped buckets come out late or never; random_ops fails
 *      ("not taken although due").
 *  W2. earliest ignores the buckets: random_ops fails ("earliest after
 *      add").
 *  W3. filter does not recompute a bucket's min: filter_keeps fails
 *      (earliest 5 ns early).
 *  W4. take does not advance first (no advance call): random_ops fails
 *      ("not taken although due").
 */
#include "engine/timer/twheel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <stepx/process.h>

#include "tests/support/harness.h"

#define W ((uint64_t)1 << SX__TW_SHIFT) /* one bucket's width, ns */
#define SPAN (W * SX__TW_BUCKETS)

/* The model: every entry ever added, by id (item = id + 1), and a list of
 * the ids that may still be live (compacted now and then). */
typedef struct {
    uint64_t *due;
    uint8_t *live;
    uint32_t *ids;
    size_t n_ids, cap, live_n;
    uint32_t next_id;
} model;

static void model_add(model *md, uint64_t due)
{
    if (md->next_id == md->cap) {
        md->cap = md->cap ? md->cap * 2 : 1024;
        md->due = realloc(md->due, md->cap * sizeof(*md->due));
        md->live = realloc(md->live, md->cap);
        md->ids = realloc(md->ids, md->cap * sizeof(*md->ids));
        if (md->due == NULL || md->live == NULL || md->ids == NULL)
            abort();
    }
    uint32_t id = md->next_id++;
    md->due[id] = due;
    md->live[id] = 1;
    md->ids[md->n_ids++] = id;
    md->live_n++;
}

static void model_kill(model *md, uint32_t id)
{
    md->live[id] = 0;
    md->live_n--;
    if (md->n_ids > 2 * md->live_n + 1024) {
        size_t j = 0;
        for (size_t i = 0; i < md->n_ids; i++)
            if (md->live[md->ids[i]])
                md->ids[j++] = md->ids[i];
        md->n_ids = j;
    }
}

static uint64_t model_min(const model *md)
{
    uint64_t m = UINT64_MAX;
    for (size_t i = 0; i < md->n_ids; i++) {
        uint32_t id = md->ids[i];
        if (md->live[id] && md->due[id] < m)
            m = md->due[id];
    }
    return m;
}

static void model_free(model *md)
{
    free(md->due);
    free(md->live);
    free(md->ids);
}

/* Takes from tw at now with max, checking the result against the model. */
static int check_take(sx__twheel *tw, model *md, uint64_t now, size_t max)
{
    sx__twent out[256];
    if (max > 256)
        max = 256;
    size_t k = sx__tw_take(tw, now, out, max);
    uint64_t last = 0, worst = 0;
    for (size_t i = 0; i < k; i++) {
        uintptr_t item = (uintptr_t)out[i].v.item;
        if (item == 0 || item > md->next_id || !md->live[item - 1]) {
            SX_FAILF("take: item %zu unknown or taken twice", (size_t)item);
            return 0;
        }
        if (out[i].v.tag != item * 3 ||
            out[i].v.gen != ((uint32_t)item ^ 0x5a5a) ||
            out[i].v.aux != (uint32_t)(item >> 3) ||
            out[i].due != md->due[item - 1]) {
            SX_FAILF("take: item %zu came out with other values", (size_t)item);
            return 0;
        }
        uint64_t due = md->due[item - 1];
        if (due > now) {
            SX_FAILF("take: due %llu not due at %llu (early)",
                     (unsigned long long)due, (unsigned long long)now);
            return 0;
        }
        if (due < last) {
            SX_FAILF("take: out of order");
            return 0;
        }
        last = due;
        worst = due > worst ? due : worst;
        model_kill(md, (uint32_t)(item - 1));
    }
    /* Whatever stayed and is due must not be earlier than what was taken,
     * and if the take was not cut short nothing due may stay. */
    for (size_t i = 0; i < md->n_ids; i++) {
        uint32_t id = md->ids[i];
        if (!md->live[id] || md->due[id] > now)
            continue;
        if (k < max) {
            SX_FAILF("take: id %u due %llu not taken although due at %llu", id,
                     (unsigned long long)md->due[id], (unsigned long long)now);
            return 0;
        }
        if (md->due[id] < worst) {
            SX_FAILF("take: left an earlier due behind");
            return 0;
        }
    }
    if (tw->n != md->live_n) {
        SX_FAILF("count: %zu vs %zu", tw->n, md->live_n);
        return 0;
    }
    if (sx__tw_earliest(tw) != model_min(md)) {
        SX_FAILF("earliest: %llu vs %llu",
                 (unsigned long long)sx__tw_earliest(tw),
                 (unsigned long long)model_min(md));
        return 0;
    }
    return 1;
}

/* Adds item with its due; the other values are derived from item, and
 * checked when it comes out. */
static int add(sx__twheel *tw, uint64_t due, uintptr_t item)
{
    sx__twval v = { (void *)item, item * 3, (uint32_t)item ^ 0x5a5a,
                    (uint32_t)(item >> 3) };
    return sx__tw_add(tw, due, &v);
}

static uint64_t pick_due(uint64_t *rng, uint64_t now)
{
    uint64_t r = sx_test_rng(rng);
    switch (r % 8) {
    case 0: /* past (not below 0) */
        return now - ((r >> 8) % (3 * W)) % (now + 1);
    case 1: /* in the current bucket or the next */
        return now + (r >> 8) % (2 * W);
    case 2:
    case 3:
    case 4: /* anywhere in the wheel's span */
        return now + (r >> 8) % SPAN;
    case 5: /* just past the span, or a few spans */
        return now + SPAN - W + (r >> 8) % (3 * SPAN);
    case 6: /* far: up to an hour */
        return now + (r >> 8) % (3600ull * 1000000000ull);
    default: /* bucket edges */
        return ((now / W) + 1 + (r >> 8) % 8) * W - (r >> 12) % 2;
    }
}

static uint64_t pick_step(uint64_t *rng)
{
    uint64_t r = sx_test_rng(rng);
    switch (r % 6) {
    case 0:
        return 0;
    case 1:
        return (r >> 8) % W; /* within a bucket */
    case 2:
    case 3:
        return (r >> 8) % (8 * W); /* a few buckets */
    case 4:
        return (r >> 8) % (2 * SPAN); /* up to two spans */
    default:
        return (r >> 8) % (4000ull * 1000000000ull); /* up to ~an hour */
    }
}

/* Property: under a random mix of adds, takes (with small and large max)
 * and clock steps, the set agrees with the model after every operation,
 * and at the end a take far in the future empties it. */
static void test_random_ops(void)
{
    uint64_t rng = 0x2545f4914f6cdd1dull;
    int rounds = (int)(100000 * sx_test_stress_scale());
    for (int seed = 0; seed < 4; seed++) {
        sx__twheel *tw = malloc(sizeof(*tw));
        CHECK(tw != NULL);
        model md = { 0 };
        uint64_t now = seed == 0 ? 0 : (uint64_t)seed * 977 * SPAN + 12345;
        sx__tw_init(tw, now);
        int ok = 1;
        for (int r = 0; ok && r < rounds; r++) {
            uint64_t x = sx_test_rng(&rng) % 10;
            if (x < 6) {
                uint64_t due = pick_due(&rng, now);
                sx__tw_sync(tw, now); /* as sleep.c does */
                CHECK_RC(add(tw, due, (uintptr_t)(md.next_id + 1)), 0);
                model_add(&md, due);
                if (sx__tw_earliest(tw) != model_min(&md)) {
                    SX_FAILF("earliest after add: %llu vs %llu",
                             (unsigned long long)sx__tw_earliest(tw),
                             (unsigned long long)model_min(&md));
                    ok = 0;
                }
            } else {
                now += pick_step(&rng);
                size_t max = sx_test_rng(&rng) % 4 == 0 ? 3 : 256;
                ok = check_take(tw, &md, now, max);
            }
        }
        CHECK(ok);
        /* Drain: an hour past the latest due. */
        now += 3 * 3600ull * 1000000000ull;
        while (ok && md.live_n > 0) {
            size_t before = md.live_n;
            ok = check_take(tw, &md, now, 256);
            if (ok && md.live_n >= before) {
                SX_FAILF("drain: nothing taken an hour past every due");
                ok = 0;
            }
        }
        CHECK(ok);
        CHECK_EQ_U64(tw->n, 0);
        CHECK_EQ_U64(sx__tw_earliest(tw), UINT64_MAX);
        sx__tw_fini(tw);
        free(tw);
        model_free(&md);
    }
}

/* Property: earliest sees each part on its own: an entry in near only, in
 * a bucket only (also the last bucket of the span), and in far only. */
static void test_earliest_parts(void)
{
    sx__twheel *tw = malloc(sizeof(*tw));
    CHECK(tw != NULL);
    uint64_t now = 1000 * W + 7;
    uint64_t dues[] = { now - 5, now + 3 * W, now + SPAN - 2 * W,
                        now + 5 * SPAN };
    for (size_t i = 0; i < sizeof(dues) / sizeof(dues[0]); i++) {
        sx__tw_init(tw, now);
        /* A later entry first, so the one under test is not the first
         * add of an empty set (which restarts the clock). */
        CHECK_RC(add(tw, now + 100 * SPAN, 1), 0);
        CHECK_RC(add(tw, dues[i], 2), 0);
        if (sx__tw_earliest(tw) != dues[i])
            SX_FAILF("earliest: part %zu: %llu vs %llu", i,
                     (unsigned long long)sx__tw_earliest(tw),
                     (unsigned long long)dues[i]);
        sx__twent out[4];
        /* One ns before: nothing (except the past entry, due at once). */
        size_t k =
            sx__tw_take(tw, dues[i] - 1 < now ? now : dues[i] - 1, out, 4);
        CHECK_EQ_U64(k, dues[i] <= now ? 1u : 0u);
        if (k == 0) {
            CHECK_EQ_U64(sx__tw_take(tw, dues[i], out, 4), 1);
        }
        CHECK(out[0].v.item == (void *)2);
        CHECK_EQ_U64(sx__tw_earliest(tw), now + 100 * SPAN);
        sx__tw_fini(tw);
    }
    free(tw);
}

static bool keep_odd(const sx__twval *v, void *arg)
{
    (void)arg;
    return ((uintptr_t)v->item & 1) != 0;
}

static bool keep_none(const sx__twval *v, void *arg)
{
    (*(size_t *)arg)++;
    (void)v;
    return false;
}

/* Property: filter removes exactly the entries its predicate rejects, from
 * near, every bucket and far alike; what stays comes out when due and in
 * order; a filter that keeps nothing empties the set and reports each
 * entry once. */
static void test_filter_keeps(void)
{
    sx__twheel *tw = malloc(sizeof(*tw));
    CHECK(tw != NULL);
    uint64_t rng = 99;
    uint64_t now = 5 * SPAN;
    sx__tw_init(tw, now);
    model md = { 0 };
    for (uint32_t id = 0; id < 20000; id++) {
        uint64_t due = pick_due(&rng, now);
        CHECK_RC(add(tw, due, (uintptr_t)(id + 1)), 0);
        model_add(&md, due);
    }
    /* Items are id + 1: keep_odd keeps the even ids. */
    size_t gone = sx__tw_filter(tw, keep_odd, NULL);
    size_t want = 0;
    for (uint32_t id = 0; id < 20000; id++)
        if (((id + 1) & 1) == 0) {
            model_kill(&md, id);
            want++;
        }
    CHECK_EQ_U64(gone, want);
    CHECK_EQ_U64(tw->n, md.live_n);
    CHECK_EQ_U64(sx__tw_earliest(tw), model_min(&md));
    int ok = 1;
    for (int r = 0; ok && r < 3000; r++) {
        now += pick_step(&rng) / 64;
        ok = check_take(tw, &md, now, 256);
    }
    CHECK(ok);
    size_t seen = 0;
    size_t left = tw->n;
    CHECK_EQ_U64(sx__tw_filter(tw, keep_none, &seen), left);
    CHECK_EQ_U64(seen, left);
    CHECK_EQ_U64(tw->n, 0);
    CHECK_EQ_U64(sx__tw_earliest(tw), UINT64_MAX);
    /* Reusable after: the spare chunks come back into use. */
    CHECK_RC(add(tw, now + 2 * W, 7), 0);
    sx__twent out[2];
    CHECK_EQ_U64(sx__tw_take(tw, now + 2 * W, out, 2), 1);
    /* Buckets only (near and far empty): a filter that drops a bucket's
     * earliest entry must leave earliest at the next one. */
    now += 2 * W;                         /* the clock of the last take */
    CHECK_RC(add(tw, now + 3 * W, 2), 0); /* dropped */
    CHECK_RC(add(tw, now + 3 * W + 5, 3), 0);
    CHECK_RC(add(tw, now + 9 * W, 5), 0);
    CHECK_EQ_U64(tw->near_n + tw->far_n, 0);
    CHECK_EQ_U64(sx__tw_filter(tw, keep_odd, NULL), 1);
    CHECK_EQ_U64(sx__tw_earliest(tw), now + 3 * W + 5);
    CHECK_EQ_U64(sx__tw_filter(tw, keep_none, &seen), 2);
    CHECK_EQ_U64(sx__tw_earliest(tw), UINT64_MAX);
    sx__tw_fini(tw);
    free(tw);
    model_free(&md);
}

/* Property: a set that stays empty for a long time (its clock is not
 * moved while empty) and is synced to now puts a new near-term entry in a
 * bucket, not in far, and fires it on time; a sync never moves the clock
 * past now, so after a first entry an hour away the entries that follow,
 * due in 1-100 ms, go to buckets and not to near (restarting the clock
 * at the first entry's due would send them all to near). */
static void test_stale_clock(void)
{
    sx__twheel *tw = malloc(sizeof(*tw));
    CHECK(tw != NULL);
    sx__tw_init(tw, 0);
    uint64_t now = 1000 * SPAN; /* the set never saw this clock */
    sx__tw_sync(tw, now);
    CHECK_RC(add(tw, now + 3 * W, 1), 0);
    CHECK_EQ_U64(tw->far_n, 0);
    CHECK_EQ_U64(sx__tw_earliest(tw), now + 3 * W);
    sx__twent out[2];
    CHECK_EQ_U64(sx__tw_take(tw, now + 3 * W - 1, out, 2), 0);
    CHECK_EQ_U64(sx__tw_take(tw, now + 3 * W, out, 2), 1);
    CHECK_EQ_U64(tw->n, 0);
    now += 2 * SPAN;
    sx__tw_sync(tw, now);
    CHECK_RC(add(tw, now + 3600ull * 1000000000ull, 2), 0);
    sx__tw_sync(tw, now); /* not empty: does nothing */
    uint64_t rng = 7;
    for (uintptr_t i = 0; i < 1000; i++)
        CHECK_RC(add(tw, now + 2 * W + sx_test_rng(&rng) % (100 * 1000000ull),
                     10 + i),
                 0);
    CHECK_EQ_U64(tw->near_n, 0);
    CHECK_EQ_U64(tw->far_n, 1);
    sx__tw_fini(tw);
    free(tw);
}

static size_t slab_chunks(const sx__twheel *tw, size_t *slabs)
{
    size_t n = 0;
    *slabs = 0;
    for (const sx__twslab *s = tw->slabs; s != NULL; s = s->next)
        n += s->n, ++*slabs;
    return n;
}

/* Chunks come from slabs that double (SX__TW_SLAB_MIN .. SX__TW_SLAB_MAX
 * chunks), not one malloc each: 20,000 sleeps spread over 200 buckets (a
 * 1-50 ms sleeper run's shape) take a few slabs, not ~800 allocations;
 * once taken out, the same load again reuses the spares and allocates
 * nothing; every entry still comes out as added. Control: one chunk per
 * slab (chunk_get with n = 1) fails the slab count. */
static void test_slabs(void)
{
    sx__twheel *tw = malloc(sizeof(*tw));
    CHECK(tw != NULL);
    sx__tw_init(tw, 0);
    uint64_t rng = 11, now = 0;
    size_t chunks0 = 0, slabs0 = 0;
    for (int round = 0; round < 2; round++) {
        model md = { 0 };
        for (uintptr_t i = 0; i < 20000; i++) {
            uint64_t due = now + W + sx_test_rng(&rng) % (200 * W);
            CHECK_RC(add(tw, due, (uintptr_t)(md.next_id + 1)), 0);
            model_add(&md, due);
        }
        size_t slabs, chunks = slab_chunks(tw, &slabs);
        /* At least the 20,000 / 31 full chunks; each slab but the first
         * twice the last or the largest: 8+16+...+256 covers 504. */
        CHECK(chunks >= 20000 / SX__TW_CHUNK);
        CHECK(slabs <= 6 + chunks / SX__TW_SLAB_MAX);
        if (round == 0) {
            chunks0 = chunks, slabs0 = slabs;
        } else {
            CHECK_EQ_U64(chunks, chunks0); /* the spares, reused */
            CHECK_EQ_U64(slabs, slabs0);
        }
        int ok = 1;
        while (ok && md.live_n > 0) {
            now += W / 2;
            ok = check_take(tw, &md, now, 256);
        }
        CHECK(ok);
        model_free(&md);
    }
    sx__tw_fini(tw);
    CHECK(tw->slabs == NULL);
    free(tw);
}

static const sx_test_case cases[] = {
    { "slabs", test_slabs },
    { "random_ops", test_random_ops },
    { "earliest_parts", test_earliest_parts },
    { "filter_keeps", test_filter_keeps },
    { "stale_clock", test_stale_clock },
};

SX_TEST_MAIN(cases)

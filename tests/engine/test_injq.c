/* tests/engine/test_injq.c — tests for the injection ring
 * (engine/sched/injq.c): a bounded ring with one producer at a time (serialised
 * by q->mu, a spinlock the caller holds around push) and any number of
 * consumers, each taking the oldest half (rounded up, at most max) with one CAS
 * on head.
 *
 * Single-threaded cases pin the contract: init takes only powers of two,
 * from 2 up; an empty ring grabs nothing; exactly cap items fit; a grab
 * takes ceil(half) capped at max, oldest first; the ring wraps around
 * thousands of times with its order kept and size equal to its contents
 * (checked against a model). Concurrent cases run 1 to 4 producers (taking
 * q->mu around their pushes, as engine/sched/worker.c's inject does; in one
 * case they also grab the oldest half of a full ring themselves, as inject
 * does) and 1 to 4 consumers on rings of 2 to 2^18 slots. The producers number
 * their pushes with one ticket taken under q->mu, which is then the item's
 * position in the ring: every ticket must come out exactly once, each grab
 * must hold consecutive tickets, each consumer must see them increase (the
 * ring is FIFO) and each producer's items in push order, no grab may take
 * more than half the ring, head never passes tail, and sx__injq_size never
 * exceeds the capacity.
 *
 * On a machine with fewer cores than threads (and other work), threads
 * mostly take turns, so the cases are built for the OS to preempt a thread
 * inside sx__injq_grab or sx__injq_size while others go on: rounds on a
 * ring too big to drain in one time slice (concurrent_rounds), consumers
 * that spin without yielding (concurrent_busy), a thread that reads the
 * size without yielding (the watcher of two cases), and cheap bookkeeping
 * between grabs (a private bitmap per thread, no atomic operation).
 *
 * Threads: each concurrent case starts its producers and consumers (and
 * watcher) and joins them before checking. SX_STRESS_SCALE=<factor> (e.g.
 * 0.2) scales the iteration counts of the concurrent cases; under a
 * sanitizer they are 0.4 times as long (see SX_TEST_SANITIZED).
 *
 * What the watchers guard: sx__injq_size reads head, then tail; between
 * the two loads consumers can take items and the producer refill the
 * slots, so t - h alone reaches up to 145 times the capacity (uncapped,
 * the watchers fail 8 runs of 8 and 2 of 2 under TSan: "size 24 in a ring
 * of 8", "size 9263 in a ring of 64"). sx__injq_size caps it at the
 * capacity.
 *
 * Negative controls, each run on a scratch copy of engine/sched/injq.c (never
 * the real file), gcc -O2 (and clang TSan where said) on a 2-core VM
 * under load 5 to 15, running the whole binary 3 to 8 times:
 *  N1. grab claims head with a plain store of h + n instead of the CAS:
 *      caught in 22 of 24 runs, by whichever concurrent case came first:
 *      concurrent_1p_2c ("consumer 1 took ticket 327835 twice", "dup == 0
 *      (87 vs 0)"), concurrent_1p_4c_small, concurrent_3p_3c,
 *      concurrent_4p_2c_spill ("dup == 0 (223 vs 0)"), concurrent_rounds
 *      ("dup == 0 (424205 vs 0)"; that case alone: 18 of 18 runs);
 *  N2. push does not check for a full ring: full_at_capacity
 *      ("sx__injq_push(&q, &it[cap]) == false"), and alone every
 *      concurrent case ("consumer 0: a grab of 57 holds ticket 6722 after
 *      7745", "grab took more than half the ring (8 of 2 slots)");
 *  N3. grab takes all it sees (at most max) instead of the half:
 *      full_at_capacity ("got == n (2 vs 1)"), and alone the concurrent
 *      cases with a max above half the ring ("grab took more than half the
 *      ring (51 of 64 slots)");
 *  N4. grab reads tail, then head (head re-read after tail in the loop),
 *      so head can be past the tail it read: caught in 3 of 8 runs only,
 *      by concurrent_rounds ("consumer 0 took ticket 6478012 after
 *      6736799"), concurrent_4p_2c_spill and concurrent_1p_4c_small ("grab
 *      took more than half the ring (5 of 8 slots)"); it needs a
 *      preemption between two adjacent loads;
 *  N5. push publishes tail with a relaxed store instead of seq_cst (no
 *      release for the item): not caught by gcc (x86 keeps stores in
 *      order); ThreadSanitizer, 2 runs of 2: "data race" between the
 *      producer's writes of the item in iq_produce and the consumer's
 *      reads in iq_take (concurrent_1p_2c);
 *  N6. push's fullness test off by one (t - h >= mask: cap - 1 fit):
 *      full_at_capacity ("capacity 2: push 1 found the ring full");
 *  N7. grab's CAS relaxed instead of release (on success) and acquire (on
 *      failure), and N8. push's load of head relaxed instead of acquire:
 *      not caught, by gcc or TSan (3 and 2 runs each). They order the
 *      consumers' reads of a slot before the producer's rewrite of it;
 *      the slots are atomics, which TSan does not report, and x86 does
 *      not reorder those accesses (nor did gcc);
 *  N9. grab rounds the half down: empty_grab ("got == n (0 vs 1)"), and
 *      alone every concurrent case ("lost == 0 (1 vs 0)").
 *  N10. push never reads head again after its first head_seen (the room
 *      check's copy): full_at_capacity ("test_injq.c:229: FAIL:
 *      sx__injq_push(&q, &it[cap + i])": the room grabs made is not seen).
 */
#include "engine/sched/injq.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <stepx/process.h>

#include "tests/support/support.h"

/* Under a sanitizer an atomic operation costs about 100 times more: the
 * concurrent cases then run 0.4 times the items, and concurrent_rounds one
 * round on a ring of 2^16 instead of 16 rounds on 2^18 (a round alone
 * still takes longer than a time slice there). */
#ifdef SX_TEST_SANITIZED
#define IQ_SCALE 0.4
#define IQ_ROUNDS 1
#define IQ_ROUNDS_CAP (1u << 16)
#else
#define IQ_SCALE 1.0
#define IQ_ROUNDS 16
#define IQ_ROUNDS_CAP (1u << 18)
#endif

/* ---- helpers ----------------------------------------------------------- */

/* A test item. ticket: its position in the ring (assigned under q->mu in
 * the concurrent cases, so pushes in ticket order). */
typedef struct {
    uint32_t producer;
    uint32_t seq;
    uint64_t ticket;
} iq_item;

static uint32_t scaled(uint32_t n)
{
    return tx_scaled((double)n * IQ_SCALE);
}

static void iq_new(sx__injq *q, size_t cap)
{
    CHECK_RC(sx__injq_init(q, cap), 0);
    CHECK_EQ_U64(sx__injq_size(q), 0);
}

/* Pushes it[from..from+n) under q->mu; each must fit. */
static void push_range(sx__injq *q, iq_item *it, size_t from, size_t n)
{
    sx__spin_lock(&q->mu);
    for (size_t i = 0; i < n; i++)
        if (!sx__injq_push(q, &it[from + i]))
            SX_FAILF("push of item %zu found the ring full", from + i);
    sx__spin_unlock(&q->mu);
}

/* Grabs up to max and checks it is exactly it[from..from+n). */
static void expect_grab(sx__injq *q, size_t max, iq_item *it, size_t from,
                        size_t n)
{
    void *out[80];
    CHECK(max <= 64);
    /* Sentinels past max: grab must not write there. */
    for (size_t i = 0; i < 80; i++)
        out[i] = &out[i];
    size_t got = sx__injq_grab(q, out, max);
    CHECK_EQ_U64(got, n);
    for (size_t i = 0; i < n; i++)
        if (out[i] != &it[from + i])
            SX_FAILF("grab[%zu] is %p, expected item %zu (%p)", i, out[i],
                     from + i, (void *)&it[from + i]);
    for (size_t i = max; i < 80; i++)
        CHECK(out[i] == &out[i]);
}

/* ceil(k / 2), at most max: what one grab from k items takes. */
static size_t half_of(size_t k, size_t max)
{
    size_t n = k - k / 2;
    return n < max ? n : max;
}

/* ---- single thread ----------------------------------------------------- */

/* Property: init accepts exactly the powers of two >= 2 and rejects the
 * rest with SX_EINVAL; an accepted ring is empty. */
static void test_init_rejects(void)
{
    static const size_t bad[] = { 0, 1, 3, 5, 6, 7, 12, 100, 1023, 4097 };
    static const size_t good[] = { 2, 4, 8, 64, 1024, 4096 };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sx__injq q = { 0 };
        if (sx__injq_init(&q, bad[i]) != SX_EINVAL)
            SX_FAILF("init with capacity %zu did not return SX_EINVAL", bad[i]);
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        sx__injq q;
        iq_new(&q, good[i]);
        void *out[1];
        CHECK_EQ_U64(sx__injq_grab(&q, out, 1), 0);
        sx__injq_fini(&q);
    }
}

/* Property: an empty ring grabs nothing, whatever max, and stays empty;
 * so does a ring emptied by grabs. */
static void test_empty_grab(void)
{
    static iq_item it[4];
    sx__injq q;
    iq_new(&q, 8);
    expect_grab(&q, 1, it, 0, 0);
    expect_grab(&q, 64, it, 0, 0);
    CHECK_EQ_U64(sx__injq_size(&q), 0);
    push_range(&q, it, 0, 1);
    expect_grab(&q, 64, it, 0, 1);
    expect_grab(&q, 64, it, 0, 0);
    expect_grab(&q, 1, it, 0, 0);
    CHECK_EQ_U64(sx__injq_size(&q), 0);
    sx__injq_fini(&q);
}

/* Property: for capacities 2 to 1024, cap pushes fit and the next one
 * fails (and leaves the ring as it was); one grab makes room for exactly
 * as many items as it took; the contents come out in push order. */
static void test_full_at_capacity(void)
{
    static iq_item it[1024 + 1024];
    for (size_t cap = 2; cap <= 1024; cap *= 2) {
        sx__injq q;
        iq_new(&q, cap);
        sx__spin_lock(&q.mu);
        for (size_t i = 0; i < cap; i++) {
            if (!sx__injq_push(&q, &it[i]))
                SX_FAILF("capacity %zu: push %zu found the ring full", cap, i);
            CHECK_EQ_U64(sx__injq_size(&q), i + 1);
        }
        CHECK(sx__injq_push(&q, &it[cap]) == false);
        CHECK(sx__injq_push(&q, &it[cap]) == false);
        CHECK_EQ_U64(sx__injq_size(&q), cap);
        sx__spin_unlock(&q.mu);
        /* Take 3 (or 1 when cap == 2): exactly that many fit again. */
        size_t k = half_of(cap, 3);
        expect_grab(&q, 3, it, 0, k);
        sx__spin_lock(&q.mu);
        for (size_t i = 0; i < k; i++)
            CHECK(sx__injq_push(&q, &it[cap + i]));
        CHECK(sx__injq_push(&q, &it[cap + k]) == false);
        sx__spin_unlock(&q.mu);
        CHECK_EQ_U64(sx__injq_size(&q), cap);
        /* Everything, in order: it[k..cap+k). */
        size_t from = k;
        while (from < cap + k) {
            size_t n = half_of(cap + k - from, 64);
            expect_grab(&q, 64, it, from, n);
            from += n;
        }
        expect_grab(&q, 64, it, 0, 0);
        CHECK_EQ_U64(sx__injq_size(&q), 0);
        sx__injq_fini(&q);
    }
}

/* Property: from k items a grab takes ceil(k / 2), at most max, oldest
 * first: 40 items with max 64 go as 20, 10, 5, 3, 1, 1; with max 7 as
 * 7, 7, 7, 7, 6, 3, 2, 1; max 0 takes nothing; and every k from 1 to 64
 * with every max from 1 to 64 takes half_of(k, max). */
static void test_grab_half(void)
{
    static iq_item it[64];
    static const size_t by64[] = { 20, 10, 5, 3, 1, 1 };
    static const size_t by7[] = { 7, 7, 7, 7, 6, 3, 2, 1 };
    sx__injq q;
    iq_new(&q, 64);

    push_range(&q, it, 0, 40);
    expect_grab(&q, 0, it, 0, 0);
    CHECK_EQ_U64(sx__injq_size(&q), 40);
    size_t from = 0;
    for (size_t i = 0; i < sizeof(by64) / sizeof(by64[0]); i++) {
        expect_grab(&q, 64, it, from, by64[i]);
        from += by64[i];
        CHECK_EQ_U64(sx__injq_size(&q), 40 - from);
    }
    CHECK_EQ_U64(from, 40);
    expect_grab(&q, 64, it, 0, 0);
    sx__injq_fini(&q);

    iq_new(&q, 64);
    push_range(&q, it, 0, 40);
    from = 0;
    for (size_t i = 0; i < sizeof(by7) / sizeof(by7[0]); i++) {
        expect_grab(&q, 7, it, from, by7[i]);
        from += by7[i];
    }
    CHECK_EQ_U64(from, 40);
    expect_grab(&q, 7, it, 0, 0);
    sx__injq_fini(&q);

    for (size_t k = 1; k <= 64; k++)
        for (size_t max = 1; max <= 64; max++) {
            iq_new(&q, 64);
            push_range(&q, it, 0, k);
            expect_grab(&q, max, it, 0, half_of(k, max));
            CHECK_EQ_U64(sx__injq_size(&q), k - half_of(k, max));
            sx__injq_fini(&q);
        }
}

/* Property: against a model (the items in, the items out), in rings of 2
 * to 64 slots over 20000 random pushes and grabs each, so that head and
 * tail wrap around the ring thousands of times: a push succeeds exactly
 * when fewer than cap items are in; a grab takes the next half_of(in -
 * out, max) items in push order; size is in - out after every step. */
static void test_wrap_around(void)
{
    enum { N = 20000 };
    static iq_item it[N];
    for (size_t cap = 2; cap <= 64; cap *= 2) {
        sx__injq q;
        iq_new(&q, cap);
        size_t in = 0, out = 0;
        uint64_t seed = 7 + cap;
        while (out < N) {
            uint64_t x = sx_test_rng(&seed);
            size_t k = 1 + (size_t)(x >> 8) % (cap + 2);
            if (x % 2 == 0 && in < N) {
                /* Push up to k, one past the room now and then. */
                sx__spin_lock(&q.mu);
                for (size_t i = 0; i < k && in < N; i++) {
                    bool room = in - out < cap;
                    bool ok = sx__injq_push(&q, &it[in]);
                    if (ok != room)
                        SX_FAILF("cap %zu with %zu in: push returned %d", cap,
                                 in - out, ok);
                    if (!ok)
                        break;
                    in++;
                }
                sx__spin_unlock(&q.mu);
            } else {
                size_t max = k < 64 ? k : 64;
                size_t n = half_of(in - out, max);
                expect_grab(&q, max, it, out, n);
                out += n;
            }
            CHECK_EQ_U64(sx__injq_size(&q), in - out);
        }
        /* 20000 items went through cap slots. */
        CHECK_EQ_U64(in, N);
        sx__injq_fini(&q);
    }
}

/* ---- concurrent -------------------------------------------------------- */

enum {
    IQ_MAX_PRODUCERS = 4,
    IQ_MAX_CONSUMERS = 4,
    IQ_MAX_GRAB = 64,
    IQ_WATCH_MS = 150 /* how long the watcher spins, at most */
};

typedef struct iq_stress iq_stress;

/* One thread's record. A producer that spills (see iq_stress.spill) is a
 * consumer too, so both use the consumer fields. */
typedef struct {
    iq_stress *s;
    const char *role; /* "producer" or "consumer", for messages */
    uint32_t id;
    uint64_t seed;
    /* max of every grab, or 0: random from 1 to IQ_MAX_GRAB. */
    size_t max;
    /* last: one past the last ticket this thread took (0 = none);
     * next[p]: one past the last seq it took from producer p. */
    uint64_t last;
    uint32_t next[IQ_MAX_PRODUCERS];
    uint64_t received, grabs, full;
    /* A bit per ticket, set when this thread takes it. Private, so that
     * the bookkeeping between two grabs has no atomic operation and stays
     * short: a preemption then lands inside a grab more often. */
    uint64_t *seen;
} iq_worker;

struct iq_stress {
    sx__injq q;
    size_t cap;
    uint32_t nprod, ncons, per;
    /* Items per producer: per, or in rounds the items of one round, used
     * again in every round (the barrier orders the reuse). */
    uint32_t pool;
    /* On a full ring the producer grabs the oldest half itself, as
     * engine/sched/worker.c's inject does (into the global queue), and its push
     * must then succeed. Otherwise it lets go of mu, yields, retries. */
    bool spill;
    /* One consumer and no spill: tickets consecutive across grabs too. */
    bool strict;
    /* 0: the producers and consumers run free. Otherwise (one producer)
     * per is pushed in that many rounds: the producer fills the ring, all
     * threads meet at a barrier, then the consumers grab from the full
     * ring together while the producer pushes as much again, and all meet
     * again. With fewer cores than threads and other work on the machine,
     * free-running consumers mostly take turns (the producer cannot keep
     * them all fed); a big full ring keeps every consumer grabbing for
     * longer than a time slice. */
    uint32_t rounds;
    /* Empty grabs between two sched_yield of a consumer (64 if 0). */
    uint32_t idle_spins;
    /* One more thread reads sx__injq_size in a loop while the others run
     * (for IQ_WATCH_MS at most), without yielding, so that the OS preempts
     * it, also between its loads of head and tail: the size must never
     * exceed the capacity. */
    bool watch;
    pthread_t watcher;
    _Atomic bool watch_stop; /* relaxed: the join orders what matters */
    uint64_t watched;        /* sizes the watcher read; after its join */
    /* Next ticket. Written and read only under q.mu. */
    uint64_t ticket;
    iq_item *items[IQ_MAX_PRODUCERS];
    /* Producers that finished, and rounds whose pushes are complete.
     * release by the producers, acquire by consumers: once a consumer
     * reads nprod (or a round past its own), those pushes are complete. */
    _Atomic uint32_t finished, round_done;
    /* Start gate: every thread counts itself in ready, then waits for go,
     * so that producers and consumers really run at the same time. */
    _Atomic uint32_t ready, go;
    /* The barrier of the rounds: arrivals, and the generation. */
    _Atomic uint32_t bar_count, bar_gen;
    iq_worker prod[IQ_MAX_PRODUCERS], cons[IQ_MAX_CONSUMERS];
};

/* Counts the caller in ready and waits for go. */
static void iq_start_gate(iq_stress *s)
{
    unsigned n = 0;
    /* relaxed: a count; go publishes what the threads need. */
    atomic_fetch_add_explicit(&s->ready, 1, memory_order_relaxed);
    /* acquire: pairs with the release store of go. */
    while (!atomic_load_explicit(&s->go, memory_order_acquire))
        if (++n % 64 == 0)
            sched_yield();
}

/* Waits until all nprod + ncons threads have called it (as often). */
static void iq_barrier(iq_stress *s)
{
    unsigned n = 0;
    /* acquire: pairs with the release store of the last arrival. */
    uint32_t gen = atomic_load_explicit(&s->bar_gen, memory_order_acquire);
    /* acq_rel: the last arrival sees what the others did before. */
    if (atomic_fetch_add_explicit(&s->bar_count, 1, memory_order_acq_rel) ==
        s->nprod + s->ncons - 1) {
        /* relaxed: nobody arrives again before the store below. */
        atomic_store_explicit(&s->bar_count, 0, memory_order_relaxed);
        /* release: pairs with the acquire loads of the waiters. */
        atomic_store_explicit(&s->bar_gen, gen + 1, memory_order_release);
        return;
    }
    while (atomic_load_explicit(&s->bar_gen, memory_order_acquire) == gen)
        if (++n % 64 == 0)
            sched_yield();
}

/* Checks and counts the n items of one grab by w, failing at once on an
 * item out of order (a broken ring could otherwise hand out stale slots
 * forever). Reading the item's fields is what the release store of tail
 * in push must make safe (a negative control that weakens it shows up
 * here under TSan). */
static void iq_take(iq_worker *w, void **out, size_t n, size_t max)
{
    iq_stress *s = w->s;
    if (n > max)
        SX_FAILF("grab of at most %zu returned %zu", max, n);
    if (n > s->cap / 2)
        SX_FAILF("grab took more than half the ring (%zu of %zu slots)", n,
                 s->cap);
    for (size_t i = 0; i < n; i++) {
        iq_item *e = out[i];
        /* A pointer into one of the producers' arrays, or it is a slot
         * that was never written (or garbage): fail before using it. */
        uint32_t p = 0;
        while (p < s->nprod &&
               !((uintptr_t)e >= (uintptr_t)s->items[p] &&
                 (uintptr_t)e < (uintptr_t)(s->items[p] + s->pool)))
            p++;
        if (p == s->nprod)
            SX_FAILF("grab[%zu] of %zu is %p, not an item", i, n, (void *)e);
        /* pool is per, or (in rounds) a power of two. */
        uint32_t idx = (uint32_t)(e - s->items[p]);
        uint32_t want = s->rounds == 0 ? e->seq : e->seq & (s->pool - 1);
        if (e->producer != p || want != idx ||
            e->ticket >= (uint64_t)s->nprod * s->per)
            SX_FAILF("bad item %p (producer %u, seq %u, ticket %" PRIu64 ")",
                     (void *)e, e->producer, e->seq, e->ticket);
        uint64_t bit = UINT64_C(1) << (e->ticket % 64);
        if (w->seen[e->ticket / 64] & bit)
            SX_FAILF("%s %u took ticket %" PRIu64 " twice", w->role, w->id,
                     e->ticket);
        w->seen[e->ticket / 64] |= bit;
        if (i > 0 && e->ticket != ((iq_item *)out[i - 1])->ticket + 1)
            SX_FAILF(
                "%s %u: a grab of %zu holds ticket %" PRIu64 " after %" PRIu64,
                w->role, w->id, n, e->ticket, ((iq_item *)out[i - 1])->ticket);
        if (s->strict ? e->ticket != w->last : e->ticket + 1 <= w->last)
            SX_FAILF("%s %u took ticket %" PRIu64 " after %" PRIu64, w->role,
                     w->id, e->ticket, w->last - 1);
        if (e->seq + 1 <= w->next[p])
            SX_FAILF("%s %u took seq %u of producer %u after %u", w->role,
                     w->id, e->seq, p, w->next[p] - 1);
        w->last = e->ticket + 1;
        w->next[p] = e->seq + 1;
    }
    w->received += n;
    w->grabs += n > 0;
}

static size_t iq_max(iq_worker *w)
{
    return w->max != 0 ? w->max
                       : 1 + (size_t)(sx_test_rng(&w->seed) % IQ_MAX_GRAB);
}

/* Pushes w's items seq..end-1 (up to 16 per hold of mu) and returns the
 * next seq: end, or where the ring was full if fill_only. */
static uint32_t iq_produce(iq_worker *w, uint32_t seq, uint32_t end,
                           bool fill_only)
{
    iq_stress *s = w->s;
    iq_item *it = s->items[w->id];
    void *out[IQ_MAX_GRAB];
    unsigned spins = 0;
    while (seq < end) {
        uint32_t k = 1 + (uint32_t)(sx_test_rng(&w->seed) >> 8) % 16;
        bool full = false;
        sx__spin_lock(&s->q.mu);
        for (uint32_t i = 0; i < k && seq < end; i++) {
            /* Plain writes, published by push's store of tail. */
            iq_item *e = &it[s->rounds == 0 ? seq : seq & (s->pool - 1)];
            e->producer = w->id;
            e->seq = seq;
            e->ticket = s->ticket;
            if (!sx__injq_push(&s->q, e)) {
                w->full++;
                if (!s->spill) {
                    full = true;
                    break;
                }
                /* The oldest half (or less if the consumers were quicker),
                 * in grabs of up to max, as inject does. */
                size_t moved = 0, m;
                while (moved < s->cap / 2 &&
                       (m = sx__injq_grab(&s->q, out, w->max)) > 0) {
                    iq_take(w, out, m, w->max);
                    moved += m;
                }
                if (!sx__injq_push(&s->q, e))
                    SX_FAILF("push after a spill of %zu found the ring full",
                             moved);
            }
            s->ticket++;
            seq++;
        }
        sx__spin_unlock(&s->q.mu);
        if (full && fill_only)
            break;
        if (full && ++spins % 4 == 0)
            sched_yield();
    }
    return seq;
}

static void *iq_producer_main(void *arg)
{
    iq_worker *w = arg;
    iq_stress *s = w->s;
    iq_start_gate(s);
    if (s->rounds == 0) {
        iq_produce(w, 0, s->per, false);
    } else {
        uint32_t seq = 0, per_round = s->per / s->rounds;
        for (uint32_t r = 0; r < s->rounds; r++) {
            uint32_t end = (r + 1) * per_round;
            seq = iq_produce(w, seq, end, true);
            iq_barrier(s);
            seq = iq_produce(w, seq, end, false);
            /* release: pairs with the consumers' acquire load. */
            atomic_store_explicit(&s->round_done, r + 1, memory_order_release);
            iq_barrier(s);
        }
    }
    /* release: pairs with the consumers' acquire load. */
    atomic_fetch_add_explicit(&s->finished, 1, memory_order_release);
    return NULL;
}

/* Grabs until a grab finds nothing after the pushes were complete: all of
 * them (free run) or those of round r. */
static void iq_drain(iq_worker *w, uint32_t r)
{
    iq_stress *s = w->s;
    void *out[IQ_MAX_GRAB];
    unsigned idle = 0, k = 0;
    for (;;) {
        /* acquire: pairs with the producers' release. Read before the
         * grab: if it says done and the grab finds nothing, nothing can
         * come any more. */
        bool done = s->rounds == 0
                        ? atomic_load_explicit(&s->finished,
                                               memory_order_acquire) == s->nprod
                        : atomic_load_explicit(&s->round_done,
                                               memory_order_acquire) > r;
        size_t max = iq_max(w);
        size_t n = sx__injq_grab(&s->q, out, max);
        iq_take(w, out, n, max);
        if (++k % 16 == 0) {
            size_t sz = sx__injq_size(&s->q);
            if (sz > s->cap)
                SX_FAILF("size %zu in a ring of %zu", sz, s->cap);
            /* White box: head never passes tail (head read first). */
            uint64_t h = atomic_load_explicit(&s->q.head, memory_order_acquire);
            uint64_t t = atomic_load_explicit(&s->q.tail, memory_order_acquire);
            if (h > t)
                SX_FAILF("head %" PRIu64 " passed tail %" PRIu64, h, t);
        }
        if (n == 0) {
            if (done)
                break;
            if (++idle % s->idle_spins == 0)
                sched_yield();
        }
    }
}

static void *iq_consumer_main(void *arg)
{
    iq_worker *w = arg;
    iq_stress *s = w->s;
    iq_start_gate(s);
    if (s->rounds == 0) {
        iq_drain(w, 0);
    } else {
        for (uint32_t r = 0; r < s->rounds; r++) {
            iq_barrier(s);
            iq_drain(w, r);
            iq_barrier(s);
        }
    }
    return NULL;
}

static void *iq_watcher_main(void *arg)
{
    iq_stress *s = arg;
    uint64_t n = 0;
    double until = sx_test_now_ms() + IQ_WATCH_MS;
    while (!atomic_load_explicit(&s->watch_stop, memory_order_relaxed)) {
        size_t sz = sx__injq_size(&s->q);
        if (sz > s->cap)
            SX_FAILF("size %zu in a ring of %zu", sz, s->cap);
        if (++n % 4096 == 0 && sx_test_now_ms() > until)
            break;
    }
    s->watched = n;
    return NULL;
}

static void iq_report(iq_worker *w)
{
    printf("#   %s %u: %" PRIu64 " items in %" PRIu64 " grabs", w->role, w->id,
           w->received, w->grabs);
    if (w->full > 0)
        printf(", found the ring full %" PRIu64 " times", w->full);
    printf("\n");
}

static void iq_stress_run(iq_stress *s)
{
    pthread_t pt[IQ_MAX_PRODUCERS], ct[IQ_MAX_CONSUMERS];
    CHECK(s->nprod >= 1 && s->nprod <= IQ_MAX_PRODUCERS);
    CHECK(s->ncons >= 1 && s->ncons <= IQ_MAX_CONSUMERS);
    CHECK(s->rounds == 0 || (s->nprod == 1 && s->per % s->rounds == 0));
    iq_new(&s->q, s->cap);
    uint64_t total = (uint64_t)s->nprod * s->per;
    s->pool = s->rounds == 0 ? s->per : s->per / s->rounds;
    CHECK(s->rounds == 0 || (s->pool & (s->pool - 1)) == 0);
    if (s->idle_spins == 0)
        s->idle_spins = 64;
    size_t words = (size_t)(total + 63) / 64;
    iq_worker *all[IQ_MAX_PRODUCERS + IQ_MAX_CONSUMERS];
    size_t nall = 0;
    for (uint32_t p = 0; p < s->nprod; p++) {
        s->items[p] = calloc(s->pool, sizeof(iq_item));
        CHECK(s->items[p] != NULL);
        s->prod[p].s = s;
        s->prod[p].role = "producer";
        s->prod[p].id = p;
        s->prod[p].seed = 1 + p;
        s->prod[p].max = IQ_MAX_GRAB;
        all[nall++] = &s->prod[p];
    }
    for (uint32_t c = 0; c < s->ncons; c++) {
        s->cons[c].s = s;
        s->cons[c].role = "consumer";
        s->cons[c].id = c;
        s->cons[c].seed = 1000 + c;
        all[nall++] = &s->cons[c];
    }
    for (size_t i = 0; i < nall; i++) {
        all[i]->seen = calloc(words, sizeof(uint64_t));
        CHECK(all[i]->seen != NULL);
    }
    for (uint32_t c = 0; c < s->ncons; c++)
        ct[c] = tx_thread_start(iq_consumer_main, &s->cons[c]);
    for (uint32_t p = 0; p < s->nprod; p++)
        pt[p] = tx_thread_start(iq_producer_main, &s->prod[p]);
    unsigned n = 0;
    while (atomic_load_explicit(&s->ready, memory_order_relaxed) <
           s->nprod + s->ncons)
        if (++n % 64 == 0)
            sched_yield();
    atomic_store_explicit(&s->go, 1, memory_order_release);
    if (s->watch)
        s->watcher = tx_thread_start(iq_watcher_main, s);
    for (uint32_t p = 0; p < s->nprod; p++)
        tx_thread_join(pt[p]);
    for (uint32_t c = 0; c < s->ncons; c++)
        tx_thread_join(ct[c]);
    if (s->watch) {
        atomic_store_explicit(&s->watch_stop, true, memory_order_relaxed);
        tx_thread_join(s->watcher);
        printf("#   watcher: %" PRIu64 " sizes read\n", s->watched);
    }

    /* dup: tickets taken by two threads or more (one thread taking one
     * twice failed at once); lost: tickets nobody took. */
    uint64_t received = 0, dup = 0, lost = 0;
    for (size_t i = 0; i < nall; i++) {
        iq_report(all[i]);
        received += all[i]->received;
    }
    for (size_t k = 0; k < words; k++) {
        uint64_t any = 0, again = 0;
        for (size_t i = 0; i < nall; i++) {
            again |= any & all[i]->seen[k];
            any |= all[i]->seen[k];
        }
        uint64_t valid = total - 64 * (uint64_t)k >= 64
                             ? ~UINT64_C(0)
                             : (UINT64_C(1) << (total - 64 * k)) - 1;
        for (uint64_t bits = again; bits != 0; bits &= bits - 1)
            dup++;
        for (uint64_t bits = ~any & valid; bits != 0; bits &= bits - 1)
            lost++;
    }
    for (size_t i = 0; i < nall; i++)
        free(all[i]->seen);
    for (uint32_t p = 0; p < s->nprod; p++)
        free(s->items[p]);
    CHECK_EQ_U64(dup, 0);
    CHECK_EQ_U64(lost, 0);
    CHECK_EQ_U64(received, total);
    CHECK_EQ_U64(s->ticket, total);
    CHECK_EQ_U64(sx__injq_size(&s->q), 0);
    sx__injq_fini(&s->q);
}

/* Property: 1 producer, 2 consumers (max 1..64 at random, and max 64), a
 * ring of 1024: every item comes out exactly once, each grab holds
 * consecutive items and each consumer sees them in increasing order. */
static void test_concurrent_1p_2c(void)
{
    static iq_stress s;
    s = (iq_stress){ .cap = 1024, .nprod = 1, .ncons = 2 };
    s.per = scaled(600000);
    s.cons[1].max = 64;
    iq_stress_run(&s);
}

/* Property: as concurrent_1p_2c with 4 consumers (max 1, 3, 5 and 1..64)
 * and a ring of 8, which is full most of the time: the producer's acquire
 * of head races with the consumers' CAS on it, and slots are rewritten
 * right after they are claimed. A watcher checks that the size never
 * exceeds 8. */
static void test_concurrent_1p_4c_small(void)
{
    static iq_stress s;
    s = (iq_stress){ .cap = 8, .nprod = 1, .ncons = 4, .watch = true };
    s.per = scaled(100000);
    s.cons[0].max = 1;
    s.cons[1].max = 3;
    s.cons[2].max = 5;
    iq_stress_run(&s);
}

/* Property: 3 producers serialised by q->mu (the real usage), 3 consumers
 * (max 1, 2 and 1..64), a ring of 64: exactly once, consecutive tickets in
 * each grab, and each consumer sees every producer's items in push order.
 * A watcher checks that the size never exceeds 64. */
static void test_concurrent_3p_3c(void)
{
    static iq_stress s;
    s = (iq_stress){ .cap = 64, .nprod = 3, .ncons = 3, .watch = true };
    s.per = scaled(150000);
    s.cons[0].max = 1;
    s.cons[1].max = 2;
    iq_stress_run(&s);
}

/* Property: 4 producers that, on a full ring of 16, grab its oldest half
 * themselves (as engine/sched/worker.c's inject moves it to the global queue)
 * and then always find room; 2 consumers grab beside them. Exactly once
 * and in order, for the producers' grabs too. */
static void test_concurrent_4p_2c_spill(void)
{
    static iq_stress s;
    s = (iq_stress){ .cap = 16, .nprod = 4, .ncons = 2, .spill = true };
    s.per = scaled(150000);
    iq_stress_run(&s);
}

/* Property: 1 producer and 3 consumers (max 1, 2 and 3) in 16 rounds on
 * a ring of 2^18 (one round on 2^16 under a sanitizer): each round the
 * producer fills the ring, then the consumers all grab from it at once
 * while the producer pushes as much again. Draining a round takes longer
 * than a time slice, so consumers are preempted inside a grab and others
 * grab meanwhile even when all the threads share one core. Exactly once,
 * consecutive in each grab, in order per consumer. */
static void test_concurrent_rounds(void)
{
    static iq_stress s;
    double r = IQ_ROUNDS * sx_test_stress_scale();
    s = (iq_stress){ .cap = IQ_ROUNDS_CAP, .nprod = 1, .ncons = 3 };
    s.rounds = r < 1 ? 1 : r > 256 ? 256 : (uint32_t)r;
    s.per = s.rounds * 2 * IQ_ROUNDS_CAP;
    s.cons[0].max = 1;
    s.cons[1].max = 2;
    s.cons[2].max = 3;
    iq_stress_run(&s);
}

/* Property: 1 producer and 3 consumers (max 1, 2 and 1..64) that spin
 * on an empty ring of 1024 without yielding (16384 empty grabs between two
 * sched_yield): they are preempted anywhere in a grab, also between its
 * loads of head and tail, while the producer and the other consumers move
 * on. Exactly once and in order, and head never passes tail. */
static void test_concurrent_busy(void)
{
    static iq_stress s;
    s = (iq_stress){ .cap = 1024, .nprod = 1, .ncons = 3, .idle_spins = 16384 };
    s.per = scaled(200000);
    s.cons[0].max = 1;
    s.cons[1].max = 2;
    iq_stress_run(&s);
}

/* Property: 2 producers and a single consumer on a ring of 2 (one item
 * per grab): the consumer takes every ticket in order, with none skipped,
 * exactly once. */
static void test_concurrent_2p_1c_fifo(void)
{
    static iq_stress s;
    s = (iq_stress){ .cap = 2, .nprod = 2, .ncons = 1, .strict = true };
    s.per = scaled(20000);
    iq_stress_run(&s);
}

static const sx_test_case cases[] = {
    { "init_rejects", test_init_rejects },
    { "empty_grab", test_empty_grab },
    { "full_at_capacity", test_full_at_capacity },
    { "grab_half", test_grab_half },
    { "wrap_around", test_wrap_around },
    { "concurrent_1p_2c", test_concurrent_1p_2c },
    { "concurrent_1p_4c_small", test_concurrent_1p_4c_small },
    { "concurrent_3p_3c", test_concurrent_3p_3c },
    { "concurrent_4p_2c_spill", test_concurrent_4p_2c_spill },
    { "concurrent_rounds", test_concurrent_rounds },
    { "concurrent_busy", test_concurrent_busy },
    { "concurrent_2p_1c_fifo", test_concurrent_2p_1c_fifo },
};

SX_TEST_MAIN(cases)

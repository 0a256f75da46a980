/* tests/engine/test_globalq.c — tests for the global run queue
 * (engine/sched/globalq.c): a mutex-protected intrusive FIFO with batch pop.
 *
 * Single-threaded cases pin the contract (FIFO, pop_batch takes the oldest
 * first and at most max, push_list appends in order, chunks are elements
 * of the same FIFO, len tracks the contents, the queue is reusable after
 * being drained); concurrent cases
 * check exactly-once delivery with 4 producers and 2 batch-popping
 * consumers, each consumer seeing every producer's items in push order, and
 * strict per-producer FIFO with a single consumer.
 *
 * Threads: each concurrent case starts its producers and consumers and
 * joins them before checking. SX_STRESS_SCALE=<factor> (e.g. 0.2) scales
 * the iteration counts of the concurrent cases.
 *
 * Negative controls (the queue is not lock-free; these only show that the
 * cases see its steps), each run once on a scratch copy of
 * engine/sched/globalq.c:
 *  G1. pop_batch does not reset tail when it empties the queue: caught by
 *      drain_and_reuse ("got == n (0 vs 1)"), len_tracks and
 *      concurrent_4p_2c ("lost == 0 (999750 vs 0)");
 *  G2. pop_batch without the mutex: caught by concurrent_4p_2c ("dup == 0
 *      (178 vs 0)") and concurrent_4p_1c_fifo ("lost == 0 (23020 vs 0)").
 */
#include "engine/sched/globalq.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/support/support.h"

/* ---- helpers ----------------------------------------------------------- */

/* A test item: the link first, so a node pointer converts to the item. */
typedef struct {
    sx__gq_node link;
    uint32_t producer;
    uint32_t seq;
} gq_item;

static void gq_new(sx__globalq *q)
{
    CHECK_EQ_INT(sx__globalq_init(q), 0);
    CHECK_EQ_U64(sx__globalq_len(q), 0);
}

/* Pops a batch of up to max and checks it is exactly items[from..from+n). */
static void expect_batch(sx__globalq *q, size_t max, gq_item *items,
                         size_t from, size_t n)
{
    sx__gq_node *out[64];
    CHECK(max <= 64);
    size_t got = sx__globalq_pop_batch(q, out, max);
    CHECK_EQ_U64(got, n);
    for (size_t i = 0; i < n; i++) {
        if (out[i] != &items[from + i].link)
            SX_FAILF("batch[%zu] is %p, expected item %zu", i, (void *)out[i],
                     from + i);
        CHECK(out[i]->next == NULL);
    }
}

/* ---- single thread ----------------------------------------------------- */

/* Property: items come out in push order, one at a time; an empty queue
 * pops nothing. */
static void test_fifo(void)
{
    static gq_item it[10];
    sx__globalq q;
    gq_new(&q);
    expect_batch(&q, 1, it, 0, 0);
    for (size_t i = 0; i < 10; i++)
        sx__globalq_push(&q, &it[i].link);
    for (size_t i = 0; i < 10; i++)
        expect_batch(&q, 1, it, i, 1);
    expect_batch(&q, 1, it, 0, 0);
    sx__globalq_fini(&q);
}

/* Property: pop_batch of up to 17 from 40 returns the 17 oldest, oldest
 * first, then the next 17, then the last 6; max 0 takes nothing; len
 * follows. */
static void test_pop_batch(void)
{
    static gq_item it[40];
    sx__globalq q;
    gq_new(&q);
    for (size_t i = 0; i < 40; i++)
        sx__globalq_push(&q, &it[i].link);
    CHECK_EQ_U64(sx__globalq_len(&q), 40);
    expect_batch(&q, 0, it, 0, 0);
    CHECK_EQ_U64(sx__globalq_len(&q), 40);
    expect_batch(&q, 17, it, 0, 17);
    CHECK_EQ_U64(sx__globalq_len(&q), 23);
    expect_batch(&q, 17, it, 17, 17);
    CHECK_EQ_U64(sx__globalq_len(&q), 6);
    expect_batch(&q, 17, it, 34, 6);
    CHECK_EQ_U64(sx__globalq_len(&q), 0);
    expect_batch(&q, 17, it, 0, 0);
    sx__globalq_fini(&q);
}

/* Property: push_list appends a linked list in order behind what is
 * queued (and into an empty queue), n = 0 is a no-op, and a list whose last
 * node has a stale next is terminated by the queue. */
static void test_push_list(void)
{
    static gq_item it[12];
    sx__globalq q;
    gq_new(&q);
    /* it[0..4] as a list into the empty queue; last->next left stale. */
    for (size_t i = 0; i < 4; i++)
        it[i].link.next = &it[i + 1].link;
    it[4].link.next = &it[11].link;
    sx__globalq_push_list(&q, &it[0].link, &it[4].link, 5);
    CHECK_EQ_U64(sx__globalq_len(&q), 5);
    sx__globalq_push_list(&q, NULL, NULL, 0);
    CHECK_EQ_U64(sx__globalq_len(&q), 5);
    sx__globalq_push(&q, &it[5].link);
    /* it[6..10] behind it. */
    for (size_t i = 6; i < 10; i++)
        it[i].link.next = &it[i + 1].link;
    sx__globalq_push_list(&q, &it[6].link, &it[10].link, 5);
    /* A list of one. */
    sx__globalq_push_list(&q, &it[11].link, &it[11].link, 1);
    CHECK_EQ_U64(sx__globalq_len(&q), 12);
    expect_batch(&q, 3, it, 0, 3);
    expect_batch(&q, 64, it, 3, 9);
    CHECK_EQ_U64(sx__globalq_len(&q), 0);
    sx__globalq_fini(&q);
}

/* Property: a queue drained exactly (max == len) or by a larger max is
 * usable again: the next push is the only item, and push_list into it
 * keeps order. */
static void test_drain_and_reuse(void)
{
    static gq_item it[8];
    sx__globalq q;
    gq_new(&q);
    for (int round = 0; round < 3; round++) {
        sx__globalq_push(&q, &it[0].link);
        sx__globalq_push(&q, &it[1].link);
        expect_batch(&q, 2, it, 0, 2); /* exactly drained */
        sx__globalq_push(&q, &it[2].link);
        expect_batch(&q, 8, it, 2, 1); /* drained with room to spare */
        it[3].link.next = &it[4].link;
        sx__globalq_push_list(&q, &it[3].link, &it[4].link, 2);
        sx__globalq_push(&q, &it[5].link);
        expect_batch(&q, 8, it, 3, 3);
        CHECK_EQ_U64(sx__globalq_len(&q), 0);
    }
    sx__globalq_fini(&q);
}

/* Pushes items[from..from+n) as one chunk. */
static void push_chunk(sx__globalq *q, gq_item *items, size_t from, size_t n)
{
    sx__gq_chunk *c = sx__globalq_chunk_new(n);
    CHECK(c != NULL);
    for (size_t i = 0; i < n; i++)
        c->items[c->n++] = &items[from + i].link;
    sx__globalq_push_chunk(q, c);
}

/* Property: chunks are elements of the same FIFO as nodes and lists: a
 * batch runs across a list, a chunk and single nodes in the order they
 * were pushed, a batch that ends inside a chunk leaves the rest of it in
 * front, len counts a chunk's nodes, an emptied queue is usable again,
 * and fini frees the chunks still queued (LeakSanitizer checks that in
 * the ASan build). */
static void test_chunks(void)
{
    static gq_item it[16];
    sx__globalq q;
    gq_new(&q);
    it[0].link.next = &it[1].link;
    it[1].link.next = &it[2].link;
    sx__globalq_push_list(&q, &it[0].link, &it[2].link, 3);
    push_chunk(&q, it, 3, 5); /* 3..7 */
    sx__globalq_push(&q, &it[8].link);
    push_chunk(&q, it, 9, 2); /* 9, 10 */
    push_chunk(&q, it, 11, 1);
    sx__globalq_push(&q, &it[12].link);
    CHECK_EQ_U64(sx__globalq_len(&q), 13);
    expect_batch(&q, 2, it, 0, 2);
    expect_batch(&q, 4, it, 2, 4); /* ends inside the first chunk */
    CHECK_EQ_U64(sx__globalq_len(&q), 7);
    expect_batch(&q, 1, it, 6, 1);
    expect_batch(&q, 3, it, 7, 3); /* the chunk's last, a node, a chunk */
    expect_batch(&q, 64, it, 10, 3);
    CHECK_EQ_U64(sx__globalq_len(&q), 0);
    expect_batch(&q, 8, it, 0, 0);
    /* Emptied by a chunk that was the last element: usable again. */
    push_chunk(&q, it, 0, 2);
    expect_batch(&q, 2, it, 0, 2);
    sx__globalq_push(&q, &it[2].link);
    push_chunk(&q, it, 3, 3);
    expect_batch(&q, 2, it, 2, 2);
    CHECK_EQ_U64(sx__globalq_len(&q), 2);
    /* Left queued: a chunk half taken and a whole one. */
    push_chunk(&q, it, 6, 4);
    sx__globalq_fini(&q);
}

/* Property: len equals the number of queued items after every push,
 * push_list and pop_batch of a random sequence, and the items come out in
 * the order they went in. */
static void test_len_tracks(void)
{
    enum { N = 4096 };
    static gq_item it[N];
    sx__globalq q;
    gq_new(&q);
    size_t in = 0, out = 0;
    uint64_t seed = 5;
    while (out < N) {
        uint64_t x = sx_test_rng(&seed);
        size_t k = 1 + (size_t)(x >> 8) % 17;
        if (x % 3 == 0 && in < N) {
            sx__globalq_push(&q, &it[in++].link);
        } else if (x % 3 == 1 && in < N) {
            if (k > N - in)
                k = N - in;
            for (size_t i = 0; i + 1 < k; i++)
                it[in + i].link.next = &it[in + i + 1].link;
            sx__globalq_push_list(&q, &it[in].link, &it[in + k - 1].link, k);
            in += k;
        } else {
            size_t n = in - out < k ? in - out : k;
            expect_batch(&q, k, it, out, n);
            out += n;
        }
        CHECK_EQ_U64(sx__globalq_len(&q), in - out);
    }
    sx__globalq_fini(&q);
}

/* ---- concurrent -------------------------------------------------------- */

enum { GQ_MAX_PRODUCERS = 8, GQ_MAX_CONSUMERS = 4 };

typedef struct gq_stress gq_stress;

typedef struct {
    gq_stress *s;
    uint32_t id;
    uint64_t seed;
    /* Consumers only: next[p] is one past the last seq seen from producer
     * p (0 = none yet); errors counts a seq not larger than that. */
    uint32_t next[GQ_MAX_PRODUCERS];
    uint64_t received, batches, errors;
} gq_worker;

struct gq_stress {
    sx__globalq q;
    uint32_t nprod, ncons, per;
    bool strict; /* one consumer: each producer's seqs must be consecutive */
    gq_item *items[GQ_MAX_PRODUCERS];
    /* taken[p][seq]: how many times that item came out. Must end at 1. */
    _Atomic uint32_t *taken[GQ_MAX_PRODUCERS];
    /* Producers that finished. release by each, acquire by consumers: once
     * a consumer reads nprod, every push is complete. */
    _Atomic uint32_t finished;
    /* Start gate: every thread counts itself in ready, then waits for go,
     * so that producers and consumers really run at the same time. */
    _Atomic uint32_t ready, go;
    gq_worker prod[GQ_MAX_PRODUCERS], cons[GQ_MAX_CONSUMERS];
};

/* Counts the caller in ready and waits for go. */
static void gq_start_gate(gq_stress *s)
{
    unsigned n = 0;
    /* relaxed: a count; go publishes what the threads need. */
    atomic_fetch_add_explicit(&s->ready, 1, memory_order_relaxed);
    /* acquire: pairs with the release store of go. */
    while (!atomic_load_explicit(&s->go, memory_order_acquire))
        if (++n % 64 == 0)
            sched_yield();
}

static void *gq_producer_main(void *arg)
{
    gq_worker *w = arg;
    gq_stress *s = w->s;
    gq_start_gate(s);
    gq_item *it = s->items[w->id];
    uint32_t seq = 0;
    while (seq < s->per) {
        uint64_t x = sx_test_rng(&w->seed);
        uint32_t k = 1 + (uint32_t)(x >> 8) % 16;
        if (k > s->per - seq)
            k = s->per - seq;
        for (uint32_t i = 0; i < k; i++) {
            it[seq + i].producer = w->id;
            it[seq + i].seq = seq + i;
        }
        if (x % 3 == 0) {
            for (uint32_t i = 0; i < k; i++)
                sx__globalq_push(&s->q, &it[seq + i].link);
        } else if (x % 3 == 1) {
            sx__gq_chunk *c = sx__globalq_chunk_new(k);
            CHECK(c != NULL);
            for (uint32_t i = 0; i < k; i++)
                c->items[c->n++] = &it[seq + i].link;
            sx__globalq_push_chunk(&s->q, c);
        } else {
            for (uint32_t i = 0; i + 1 < k; i++)
                it[seq + i].link.next = &it[seq + i + 1].link;
            sx__globalq_push_list(&s->q, &it[seq].link, &it[seq + k - 1].link,
                                  k);
        }
        seq += k;
    }
    atomic_fetch_add_explicit(&s->finished, 1, memory_order_release);
    return NULL;
}

static void gq_consume(gq_worker *w, sx__gq_node *n)
{
    gq_stress *s = w->s;
    gq_item *e = (gq_item *)n;
    if (e->producer >= s->nprod || e->seq >= s->per)
        SX_FAILF("bad item %p (producer %u, seq %u)", (void *)n, e->producer,
                 e->seq);
    uint32_t p = e->producer;
    if (s->strict ? e->seq != w->next[p] : e->seq + 1 <= w->next[p])
        w->errors++;
    w->next[p] = e->seq + 1;
    /* relaxed: a tally read after the join. */
    atomic_fetch_add_explicit(&s->taken[p][e->seq], 1, memory_order_relaxed);
    w->received++;
}

static void *gq_consumer_main(void *arg)
{
    gq_worker *w = arg;
    gq_stress *s = w->s;
    sx__gq_node *out[17];
    unsigned idle = 0;
    gq_start_gate(s);
    for (;;) {
        /* acquire: pairs with the producers' release increment. Read
         * before the pop: if it says all done and the pop finds nothing,
         * nothing can come any more. */
        bool all_done = atomic_load_explicit(&s->finished,
                                             memory_order_acquire) == s->nprod;
        size_t max = 1 + (size_t)(sx_test_rng(&w->seed) % 17);
        size_t n = sx__globalq_pop_batch(&s->q, out, max);
        CHECK(n <= max);
        for (size_t i = 0; i < n; i++)
            gq_consume(w, out[i]);
        w->batches += n > 0;
        if (n == 0) {
            if (all_done)
                break;
            if (++idle % 64 == 0)
                sched_yield();
        }
    }
    return NULL;
}

static void gq_stress_run(gq_stress *s)
{
    pthread_t pt[GQ_MAX_PRODUCERS], ct[GQ_MAX_CONSUMERS];
    CHECK(s->nprod <= GQ_MAX_PRODUCERS && s->ncons <= GQ_MAX_CONSUMERS);
    gq_new(&s->q);
    for (uint32_t p = 0; p < s->nprod; p++) {
        s->items[p] = calloc(s->per, sizeof(gq_item));
        s->taken[p] = calloc(s->per, sizeof(*s->taken[p]));
        CHECK(s->items[p] != NULL && s->taken[p] != NULL);
    }
    for (uint32_t c = 0; c < s->ncons; c++) {
        s->cons[c] = (gq_worker){ .s = s, .id = c, .seed = 1000 + c };
        ct[c] = tx_thread_start(gq_consumer_main, &s->cons[c]);
    }
    for (uint32_t p = 0; p < s->nprod; p++) {
        s->prod[p] = (gq_worker){ .s = s, .id = p, .seed = 1 + p };
        pt[p] = tx_thread_start(gq_producer_main, &s->prod[p]);
    }
    unsigned n = 0;
    while (atomic_load_explicit(&s->ready, memory_order_relaxed) <
           s->nprod + s->ncons)
        if (++n % 64 == 0)
            sched_yield();
    atomic_store_explicit(&s->go, 1, memory_order_release);
    for (uint32_t p = 0; p < s->nprod; p++)
        tx_thread_join(pt[p]);
    for (uint32_t c = 0; c < s->ncons; c++)
        tx_thread_join(ct[c]);

    uint64_t received = 0, errors = 0, dup = 0, lost = 0;
    for (uint32_t c = 0; c < s->ncons; c++) {
        printf("#   consumer %u: %" PRIu64 " items in %" PRIu64 " batches\n", c,
               s->cons[c].received, s->cons[c].batches);
        received += s->cons[c].received;
        errors += s->cons[c].errors;
    }
    for (uint32_t p = 0; p < s->nprod; p++) {
        for (uint32_t i = 0; i < s->per; i++) {
            uint32_t c =
                atomic_load_explicit(&s->taken[p][i], memory_order_relaxed);
            dup += c > 1;
            lost += c == 0;
        }
        free(s->items[p]);
        free(s->taken[p]);
    }
    CHECK_EQ_U64(dup, 0);
    CHECK_EQ_U64(lost, 0);
    CHECK_EQ_U64(received, (uint64_t)s->nprod * s->per);
    CHECK_EQ_U64(errors, 0);
    CHECK_EQ_U64(sx__globalq_len(&s->q), 0);
    sx__globalq_fini(&s->q);
}

/* Property: 4 producers (single pushes, lists and chunks) and 2 consumers
 * (batches of 1..17): every item comes out exactly once, and each consumer sees
 * each producer's items in increasing order (the queue is FIFO, so a consumer's
 * later batch holds later items; which consumer gets which is not
 * observable, so the order is checked per consumer). */
static void test_concurrent_4p_2c(void)
{
    static gq_stress s;
    s = (gq_stress){ .nprod = 4, .ncons = 2, .per = tx_scaled(250000) };
    gq_stress_run(&s);
}

/* Property: 4 producers and a single consumer: each producer's items arrive
 * consecutively in push order (strict FIFO per producer), exactly once. */
static void test_concurrent_4p_1c_fifo(void)
{
    static gq_stress s;
    s = (gq_stress){
        .nprod = 4, .ncons = 1, .per = tx_scaled(250000), .strict = true
    };
    gq_stress_run(&s);
}

static const sx_test_case cases[] = {
    { "fifo", test_fifo },
    { "pop_batch", test_pop_batch },
    { "push_list", test_push_list },
    { "drain_and_reuse", test_drain_and_reuse },
    { "chunks", test_chunks },
    { "len_tracks", test_len_tracks },
    { "concurrent_4p_2c", test_concurrent_4p_2c },
    { "concurrent_4p_1c_fifo", test_concurrent_4p_1c_fifo },
};

SX_TEST_MAIN(cases)

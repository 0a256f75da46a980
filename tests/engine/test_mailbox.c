/* tests/engine/test_mailbox.c — tests for the mailbox's two lock-free
 * structures (process/mailbox.c): the Vyukov intrusive MPSC queue and the
 * control stack.
 *
 * Single-threaded cases pin the contract (FIFO, NULL and "empty" on an empty
 * queue, the stub re-insertion path, a push that is half done, find's wait
 * for it); concurrent cases check that every node comes out exactly once and
 * in each producer's order (each node carries its producer id and sequence
 * number, and a plain payload that ThreadSanitizer watches), both with a long
 * queue and with a queue kept near empty so that the consumer keeps meeting
 * producers at the stub.
 *
 * Threads: each concurrent case starts its producers and consumes on the
 * test's own thread (the single consumer). SX_STRESS_SCALE=<factor> (e.g.
 * 0.2) scales the iteration counts of the concurrent cases.
 *
 * Negative controls, each run on a scratch copy of process/mailbox.c (never
 * the real file) with gcc -O2, on a 2-core x86-64 VM (M1 also 3 times
 * on an idle machine pinned to 2 cores); what the test reported is written
 * at the case that caught it:
 *  M1. pop without the `tail != head` check (re-inserts the stub although
 *      a push is half done; a second pop then pushes the stub twice);
 *  M2. push stores prev->next relaxed instead of release;
 *  C1. control stack push with a load + store of top instead of the CAS;
 *  C2. take returns the list without reversing it;
 *  C3. control stack push CAS relaxed instead of release.
 *  F1. find tests a node before it waits for the node's link:
 *      mpsc_find_waits_for_link fails with "find returned true before the
 *      half-done push was linked" (gcc, debugoptimized).
 * M1, C1 and C2 are caught by the cases' checks; M2 and C3 only by
 * ThreadSanitizer (x86 keeps stores in order).
 */
#include "process/mailbox.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/support/support.h"

/* ---- helpers ----------------------------------------------------------- */

/* A test event: the link first, so a node pointer converts to the event. */
typedef struct {
    sx__mpsc_node link;
    uint32_t producer;
    uint32_t seq;
    uint64_t payload; /* plain: written by the producer before the push */
} mb_ev;

static uint64_t ev_payload(uint32_t producer, uint32_t seq)
{
    return ((uint64_t)producer << 40) ^ ((uint64_t)seq * 0x9E3779B97F4A7C15ULL);
}

/* Yields every 64th call: spinning threads on a small (or loaded) machine
 * must leave the others time to run. */
static void backoff(unsigned *n)
{
    if (++*n % 64 == 0)
        sched_yield();
}

static mb_ev *ev_of(sx__mpsc_node *n)
{
    return (mb_ev *)n;
}

/* Pops and checks that the result is ev (NULL for none). */
static void expect_pop(sx__mpsc *q, mb_ev *ev)
{
    sx__mpsc_node *n = sx__mpsc_pop(q);
    if (n != (ev ? &ev->link : NULL))
        SX_FAILF("pop returned %p, expected %p (seq %d)", (void *)n, (void *)ev,
                 ev ? (int)ev->seq : -1);
}

/* ---- MPSC: single thread ----------------------------------------------- */

/* Property: a new queue is empty: pop returns NULL (repeatedly, without
 * changing anything) and sx__mpsc_empty is true. */
static void test_mpsc_empty(void)
{
    sx__mpsc q;
    sx__mpsc_init(&q);
    for (int i = 0; i < 10; i++) {
        CHECK(sx__mpsc_empty(&q));
        expect_pop(&q, NULL);
    }
    CHECK(sx__mpsc_empty(&q));
}

/* Property: one thread's pushes come out in push order; then pop returns
 * NULL and the queue reports empty again. */
static void test_mpsc_fifo(void)
{
    enum { N = 100 };
    static mb_ev ev[N];
    sx__mpsc q;
    sx__mpsc_init(&q);
    for (uint32_t i = 0; i < N; i++) {
        ev[i].seq = i;
        sx__mpsc_push(&q, &ev[i].link);
        CHECK(!sx__mpsc_empty(&q));
    }
    for (uint32_t i = 0; i < N; i++) {
        CHECK(!sx__mpsc_empty(&q));
        expect_pop(&q, &ev[i]);
    }
    expect_pop(&q, NULL);
    CHECK(sx__mpsc_empty(&q));
}

/* Property: the stub re-insertion path (popping the last node puts the
 * stub back behind it) keeps the queue well formed: push k then pop k,
 * for k = 1..6, a thousand times each, re-using the same nodes as soon as
 * they are popped; every round comes out in order and ends empty. */
static void test_mpsc_stub_reinsertion(void)
{
    static mb_ev ev[6];
    sx__mpsc q;
    sx__mpsc_init(&q);
    for (int k = 1; k <= 6; k++) {
        for (int round = 0; round < 1000; round++) {
            for (int i = 0; i < k; i++) {
                ev[i].seq = (uint32_t)i;
                sx__mpsc_push(&q, &ev[i].link);
            }
            for (int i = 0; i < k; i++)
                expect_pop(&q, &ev[i]);
            expect_pop(&q, NULL);
            CHECK(sx__mpsc_empty(&q));
        }
    }
    /* A node popped as the last one and pushed again at once. */
    for (int round = 0; round < 10000; round++) {
        sx__mpsc_push(&q, &ev[0].link);
        expect_pop(&q, &ev[0]);
        CHECK(sx__mpsc_empty(&q));
    }
}

/* Property: random pushes and pops match a FIFO model: pop returns the
 * model's oldest, NULL exactly when the model is empty, and empty() agrees
 * with the model after every step. Nodes are re-used once popped. */
static void test_mpsc_model(void)
{
    enum { POOL = 16, STEPS = 200000 };
    static mb_ev ev[POOL];
    mb_ev *model[POOL];
    size_t head = 0, len = 0; /* model ring: model[(head + i) % POOL] */
    mb_ev *free_list[POOL];
    size_t nfree = POOL;
    for (size_t i = 0; i < POOL; i++)
        free_list[i] = &ev[i];
    sx__mpsc q;
    sx__mpsc_init(&q);
    uint64_t seed = 99;
    for (uint32_t step = 0; step < STEPS; step++) {
        if (sx_test_rng(&seed) % 2 == 0 && nfree > 0) {
            mb_ev *e = free_list[--nfree];
            e->seq = step;
            sx__mpsc_push(&q, &e->link);
            model[(head + len++) % POOL] = e;
        } else if (len == 0) {
            expect_pop(&q, NULL);
        } else {
            mb_ev *e = model[head];
            head = (head + 1) % POOL;
            len--;
            expect_pop(&q, e);
            free_list[nfree++] = e;
        }
        CHECK_EQ_INT(sx__mpsc_empty(&q), len == 0);
    }
}

/* Property: while a push is half done (head exchanged, predecessor not yet
 * linked), pop returns NULL and the queue is not empty, even though an
 * earlier and a later push are complete; once the link lands, all three
 * come out in order. The first half of push is done by hand here, with the
 * same two steps as sx__mpsc_push, to stop a producer in the window. */
static void test_mpsc_half_done_push(void)
{
    static mb_ev a, b, c;
    sx__mpsc q;
    sx__mpsc_init(&q);
    sx__mpsc_push(&q, &a.link);
    /* b's push, first half. */
    atomic_store_explicit(&b.link.next, NULL, memory_order_relaxed);
    sx__mpsc_node *prev =
        atomic_exchange_explicit(&q.head, &b.link, memory_order_acq_rel);
    CHECK(prev == &a.link);
    expect_pop(&q, NULL);
    CHECK(!sx__mpsc_empty(&q));
    sx__mpsc_push(&q, &c.link); /* complete, behind the half-done b */
    expect_pop(&q, NULL);
    expect_pop(&q, NULL);
    CHECK(!sx__mpsc_empty(&q));
    /* b's push, second half. */
    atomic_store_explicit(&prev->next, &b.link, memory_order_release);
    expect_pop(&q, &a);
    expect_pop(&q, &b);
    expect_pop(&q, &c);
    expect_pop(&q, NULL);
    CHECK(sx__mpsc_empty(&q));

    /* The same with a popped-to-empty queue: the half-done push follows
     * the stub. */
    atomic_store_explicit(&a.link.next, NULL, memory_order_relaxed);
    prev = atomic_exchange_explicit(&q.head, &a.link, memory_order_acq_rel);
    CHECK(prev == &q.stub);
    expect_pop(&q, NULL);
    CHECK(!sx__mpsc_empty(&q));
    atomic_store_explicit(&prev->next, &a.link, memory_order_release);
    expect_pop(&q, &a);
    expect_pop(&q, NULL);
    CHECK(sx__mpsc_empty(&q));
}

/* find_waits_for_link: the producer that finishes a half-done push after
 * a delay (the second half of sx__mpsc_push), and says when it has. */
typedef struct {
    sx__mpsc_node *prev, *node;
    _Atomic bool linked;
} late_link;

static void *late_link_main(void *arg)
{
    late_link *l = arg;
    tx_sleep_ms(30);
    /* Set just before the link, not after it: a find that waited for the
     * link may return (and the test read the flag) before a store made
     * after the link, which would make this test fail spuriously under
     * TSan (in 4 runs of 5). relaxed: the link's release store below
     * publishes it. */
    atomic_store_explicit(&l->linked, true, memory_order_relaxed);
    /* release: as the second half of sx__mpsc_push; a find that saw the
     * link (acquire) sees the flag set. */
    atomic_store_explicit(&l->prev->next, l->node, memory_order_release);
    return NULL;
}

static bool pred_any(const sx__mpsc_node *n)
{
    (void)n;
    return true;
}

static bool pred_none(const sx__mpsc_node *n)
{
    (void)n;
    return false;
}

/* Property: find says true only for a node that pop can hand over. The
 * worker relies on it (engine/sched/turn.c, backlog): a true answer runs the
 * process again, whose next collect pops. Here a is the tail after a pop
 * that met b's half-done push (so pop returns NULL), and find must wait
 * for b's link before it says true, after which pop returns a. A find
 * that tested a at once would say true while pop still returned NULL, and
 * the worker would loop on the process without a yield (a hot loop for
 * as long as the producer stays preempted). */
static void test_mpsc_find_waits_for_link(void)
{
    static mb_ev a, b;
    sx__mpsc q;
    sx__mpsc_init(&q);
    sx__mpsc_push(&q, &a.link);
    /* b's push, first half. */
    atomic_store_explicit(&b.link.next, NULL, memory_order_relaxed);
    late_link l = { NULL, &b.link, false };
    l.prev = atomic_exchange_explicit(&q.head, &b.link, memory_order_acq_rel);
    CHECK(l.prev == &a.link);
    expect_pop(&q, NULL); /* moves the tail onto a, which it cannot take */
    pthread_t t;
    CHECK_EQ_INT(pthread_create(&t, NULL, late_link_main, &l), 0);
    CHECK(sx__mpsc_find(&q, pred_any));
    /* relaxed: find's acquire load of the link ordered the flag's store
     * before this read. */
    bool linked = atomic_load_explicit(&l.linked, memory_order_relaxed);
    if (!linked)
        SX_FAILF("find returned true before the half-done push was linked");
    expect_pop(&q, &a);
    CHECK_EQ_INT(pthread_join(t, NULL), 0);
    /* A walk that finds nothing still goes to the head, b. */
    CHECK(!sx__mpsc_find(&q, pred_none));
    CHECK(sx__mpsc_find(&q, pred_any));
    expect_pop(&q, &b);
    expect_pop(&q, NULL);
    CHECK(sx__mpsc_empty(&q));
    CHECK(!sx__mpsc_find(&q, pred_any));
}

/* ---- MPSC: concurrent -------------------------------------------------- */

enum { MB_MAX_PRODUCERS = 8 };

typedef struct mb_stress mb_stress;

typedef struct {
    mb_stress *s;
    uint32_t id;
    mb_ev *pool;
} mb_producer;

struct mb_stress {
    sx__mpsc q;
    sx__ctlstack ctl;
    bool use_ctl;       /* push to the control stack instead of q */
    uint32_t unpop;     /* put every unpop-th popped node back (0: never) */
    uint32_t nprod;     /* producers */
    uint32_t per;       /* events per producer */
    uint32_t pool_size; /* nodes per producer; < per means recycling */
    mb_producer prod[MB_MAX_PRODUCERS];
    /* consumed[p]: events of producer p the consumer has seen. release by
     * the consumer, acquire by producer p before it re-uses a node. */
    _Atomic uint32_t consumed[MB_MAX_PRODUCERS];
    /* Producers that finished every push. release by each producer, acquire
     * by the consumer: once it reads nprod, every push is complete. */
    _Atomic uint32_t finished;
    /* Start gate: each producer counts itself in ready, then waits for go,
     * so that producers really run at the same time. */
    _Atomic uint32_t ready, go;
};

static void *mb_producer_main(void *arg)
{
    mb_producer *p = arg;
    mb_stress *s = p->s;
    unsigned spins = 0;
    /* relaxed: a count; go publishes what the producer needs. */
    atomic_fetch_add_explicit(&s->ready, 1, memory_order_relaxed);
    /* acquire: pairs with the release store of go. */
    while (!atomic_load_explicit(&s->go, memory_order_acquire))
        backoff(&spins);
    for (uint32_t seq = 0; seq < s->per; seq++) {
        if (seq >= s->pool_size) {
            /* Re-use the node of seq - pool_size once the consumer is done
             * with it. acquire: pairs with the consumer's release store. */
            while (atomic_load_explicit(&s->consumed[p->id],
                                        memory_order_acquire) <=
                   seq - s->pool_size)
                backoff(&spins);
        }
        mb_ev *e = &p->pool[seq % s->pool_size];
        e->producer = p->id;
        e->seq = seq;
        e->payload = ev_payload(p->id, seq);
        if (s->use_ctl)
            sx__ctlstack_push(&s->ctl, &e->link);
        else
            sx__mpsc_push(&s->q, &e->link);
    }
    /* release: pairs with the consumer's acquire load of finished. */
    atomic_fetch_add_explicit(&s->finished, 1, memory_order_release);
    return NULL;
}

/* Checks one received event: a node of some producer's pool, the next in
 * that producer's order, carrying the payload written before the push. */
static void mb_receive(mb_stress *s, uint32_t *expect, sx__mpsc_node *n)
{
    mb_ev *e = ev_of(n);
    bool in_pool = false;
    /* Compared as integers: n may point anywhere (the stub, garbage). */
    uintptr_t a = (uintptr_t)n;
    for (uint32_t p = 0; p < s->nprod && !in_pool; p++) {
        uintptr_t lo = (uintptr_t)s->prod[p].pool;
        in_pool = a >= lo && a < lo + s->pool_size * sizeof(mb_ev) &&
                  (a - lo) % sizeof(mb_ev) == 0;
    }
    if (!in_pool)
        SX_FAILF("received %p, not a pushed node (the stub is %p)", (void *)n,
                 (void *)&s->q.stub);
    if (e->producer >= s->nprod)
        SX_FAILF("bad producer id %u", e->producer);
    if (e->seq != expect[e->producer])
        SX_FAILF("producer %u: got seq %u, expected %u (lost, duplicated or "
                 "reordered)",
                 e->producer, e->seq, expect[e->producer]);
    if (e->payload != ev_payload(e->producer, e->seq))
        SX_FAILF("producer %u seq %u: payload not visible", e->producer,
                 e->seq);
    uint32_t p = e->producer;
    expect[p]++;
    /* release: the producer re-uses the node only after this (our reads of
     * it come first). */
    atomic_store_explicit(&s->consumed[p], expect[p], memory_order_release);
}

/* Runs the producers and consumes on this thread until every producer has
 * finished and the queue is drained; a lost node therefore ends the loop
 * (and fails the count) instead of hanging it. */
static void mb_stress_run(mb_stress *s)
{
    uint32_t expect[MB_MAX_PRODUCERS] = { 0 };
    pthread_t tids[MB_MAX_PRODUCERS];
    CHECK(s->nprod <= MB_MAX_PRODUCERS);
    sx__mpsc_init(&s->q);
    sx__ctlstack_init(&s->ctl);
    for (uint32_t p = 0; p < s->nprod; p++) {
        s->prod[p] = (mb_producer){ .s = s, .id = p };
        s->prod[p].pool = calloc(s->pool_size, sizeof(mb_ev));
        CHECK(s->prod[p].pool != NULL);
        tids[p] = tx_thread_start(mb_producer_main, &s->prod[p]);
    }
    unsigned spins = 0;
    while (atomic_load_explicit(&s->ready, memory_order_relaxed) < s->nprod)
        backoff(&spins);
    atomic_store_explicit(&s->go, 1, memory_order_release);

    uint64_t received = 0, nulls = 0, half_done = 0, takes = 0, unpops = 0;
    for (;;) {
        /* acquire: pairs with the producers' release increment; read before
         * the pop, so that a NULL after it means truly empty. */
        bool all_done = atomic_load_explicit(&s->finished,
                                             memory_order_acquire) == s->nprod;
        bool got = false;
        if (s->use_ctl) {
            sx__mpsc_node *n = sx__ctlstack_take(&s->ctl);
            takes += n != NULL;
            while (n != NULL) {
                /* Read next before mb_receive lets the producer re-use n. */
                sx__mpsc_node *next =
                    atomic_load_explicit(&n->next, memory_order_relaxed);
                mb_receive(s, expect, n);
                received++;
                got = true;
                n = next;
            }
        } else {
            sx__mpsc_node *n = sx__mpsc_pop(&s->q);
            if (n != NULL && s->unpop != 0 && ++unpops % s->unpop == 0) {
                /* Put back while producers push: the next pop must
                 * return the same node, whatever was pushed meanwhile. */
                sx__mpsc_unpop(&s->q, n);
                CHECK(!sx__mpsc_empty(&s->q));
                sx__mpsc_node *again = sx__mpsc_pop(&s->q);
                if (again != n)
                    SX_FAILF("pop after unpop returned %p, not %p",
                             (void *)again, (void *)n);
            }
            if (n != NULL) {
                mb_receive(s, expect, n);
                received++;
                got = true;
            } else {
                nulls++;
                /* Not empty although pop said NULL: a push was half done
                 * (or completed in between). A tally, not a check. */
                half_done += !sx__mpsc_empty(&s->q);
            }
        }
        if (!got) {
            if (all_done)
                break;
            backoff(&spins);
        }
    }
    for (uint32_t p = 0; p < s->nprod; p++)
        tx_thread_join(tids[p]);
    if (s->use_ctl) {
        printf("#   %" PRIu64 " events in %" PRIu64 " takes\n", received,
               takes);
        CHECK(sx__ctlstack_take(&s->ctl) == NULL);
        CHECK(!sx__ctlstack_nonempty(&s->ctl));
    } else {
        printf("#   %" PRIu64 " events, %" PRIu64 " empty pops, %" PRIu64
               " of them with a push in flight\n",
               received, nulls, half_done);
        CHECK(sx__mpsc_pop(&s->q) == NULL);
        CHECK(sx__mpsc_empty(&s->q));
    }
    for (uint32_t p = 0; p < s->nprod; p++) {
        CHECK_EQ_U64(expect[p], s->per);
        free(s->prod[p].pool);
    }
    CHECK_EQ_U64(received, (uint64_t)s->nprod * s->per);
}

/* Property: 4 producers push 500k events each (from 4096 nodes each, so
 * the queue can grow thousands long) while one consumer pops: every event
 * arrives exactly once, in its producer's order, with the payload written
 * before the push.
 * Negative controls (see the file comment): M1 fails here on a loaded
 * 2-core VM ("received 0x...ecd0, not a pushed node (the stub is
 * 0x...ecd0)", or "producer 0: got seq 143257, expected 139162") but
 * passes on an idle machine: it needs a producer preempted inside its push
 * (mpsc_near_empty catches M1 everywhere). M2 makes ThreadSanitizer report
 * data races on the event's fields in mb_receive (the plain build
 * passes). */
static void test_mpsc_producers(void)
{
    static mb_stress s;
    s = (mb_stress){ .nprod = 4, .per = tx_scaled(500000), .pool_size = 4096 };
    mb_stress_run(&s);
}

/* Property: 3 producers with 2 nodes each re-use a node as soon as the
 * consumer has taken it, so the queue stays near empty and the consumer
 * keeps taking the last node (stub re-insertion) while producers push:
 * 900k events, each exactly once and in its producer's order.
 * Negative control M1 (see the file comment): "received 0x...d70, not a
 * pushed node (the stub is 0x...d70)", 3 runs out of 3 on each machine. */
static void test_mpsc_near_empty(void)
{
    static mb_stress s;
    s = (mb_stress){ .nprod = 3, .per = tx_scaled(300000), .pool_size = 2 };
    mb_stress_run(&s);
}

/* Property: unpop puts the node the last pop returned back at the front
 * (turn.c: a bundle that does not fit a step's batch): with 1..6 nodes
 * queued, pop, unpop, and the queue gives all of them in order, the put
 * back one first; with one node (pop re-inserted the stub behind it) the
 * queue is not empty, find sees it, and pops give it, then NULL; nodes
 * pushed after the unpop come after it. */
static bool is_any_node(const sx__mpsc_node *n)
{
    (void)n;
    return true;
}

static void test_mpsc_unpop(void)
{
    static mb_ev ev[8];
    sx__mpsc q;
    sx__mpsc_init(&q);
    for (int k = 1; k <= 6; k++) {
        for (int i = 0; i < k; i++) {
            ev[i].seq = (uint32_t)i;
            sx__mpsc_push(&q, &ev[i].link);
        }
        for (int i = 0; i < k; i++) {
            sx__mpsc_node *n = sx__mpsc_pop(&q);
            CHECK(n == &ev[i].link);
            sx__mpsc_unpop(&q, n);
            CHECK(!sx__mpsc_empty(&q));
            CHECK(sx__mpsc_find(&q, is_any_node));
            if (i == k - 1) {
                /* Pushed after the unpop: behind it. */
                sx__mpsc_push(&q, &ev[6].link);
                sx__mpsc_push(&q, &ev[7].link);
            }
            expect_pop(&q, &ev[i]);
        }
        expect_pop(&q, &ev[6]);
        sx__mpsc_unpop(&q, &ev[6].link);
        expect_pop(&q, &ev[6]);
        expect_pop(&q, &ev[7]);
        sx__mpsc_unpop(&q, &ev[7].link);
        CHECK(!sx__mpsc_empty(&q));
        expect_pop(&q, &ev[7]);
        expect_pop(&q, NULL);
        CHECK(sx__mpsc_empty(&q));
        CHECK(!sx__mpsc_find(&q, is_any_node));
    }
}

/* Property: as mpsc_near_empty, with every 3rd popped node put back and
 * popped again at once while the producers push: still each event exactly
 * once, in order (the put-back node is the next pop's, whatever was pushed
 * meanwhile, and the stub re-insertion path is crossed all the time). */
static void test_mpsc_unpop_concurrent(void)
{
    static mb_stress s;
    s = (mb_stress){
        .nprod = 3, .per = tx_scaled(200000), .pool_size = 2, .unpop = 3
    };
    mb_stress_run(&s);
}

/* ---- control stack ----------------------------------------------------- */

/* Property: take returns every pushed node, oldest first, as a
 * NULL-terminated list, and leaves the stack empty; nonempty is a correct
 * hint when nothing runs concurrently.
 * Negative control C2 (see the file comment): "n == &ev[i].link". */
static void test_ctl_take_oldest_first(void)
{
    static mb_ev ev[5];
    sx__ctlstack s;
    sx__ctlstack_init(&s);
    CHECK(!sx__ctlstack_nonempty(&s));
    CHECK(sx__ctlstack_take(&s) == NULL);
    for (int round = 0; round < 3; round++) {
        for (uint32_t i = 0; i < 5; i++) {
            ev[i].seq = i;
            sx__ctlstack_push(&s, &ev[i].link);
            CHECK(sx__ctlstack_nonempty(&s));
        }
        sx__mpsc_node *n = sx__ctlstack_take(&s);
        for (uint32_t i = 0; i < 5; i++) {
            CHECK(n == &ev[i].link);
            n = atomic_load_explicit(&n->next, memory_order_relaxed);
        }
        CHECK(n == NULL);
        CHECK(!sx__ctlstack_nonempty(&s));
        CHECK(sx__ctlstack_take(&s) == NULL);
    }
    /* One node: a list of one. */
    sx__ctlstack_push(&s, &ev[0].link);
    sx__mpsc_node *n = sx__ctlstack_take(&s);
    CHECK(n == &ev[0].link);
    CHECK(atomic_load_explicit(&n->next, memory_order_relaxed) == NULL);
}

/* Property: 4 producers push 500k nodes each (from 4096 nodes each) onto
 * the control stack while one consumer takes repeatedly: every node arrives
 * exactly once, and each producer's nodes arrive in push order, within a take
 * and across takes. Negative controls (see the file comment): C1 "producer 0:
 * got seq 12782, expected 10279 (lost, ...)"; C2 "producer 3: got seq 4095,
 * expected 0"; C3 makes ThreadSanitizer report data races in mb_receive. */
static void test_ctl_concurrent(void)
{
    static mb_stress s;
    s = (mb_stress){
        .nprod = 4, .per = tx_scaled(500000), .pool_size = 4096, .use_ctl = true
    };
    mb_stress_run(&s);
}

/* Property: as ctl_concurrent, with 2 nodes per producer re-used as soon as
 * they are taken, so nodes are pushed again right after a take (the ABA
 * pattern the comment at push rules out).
 * Negative controls (see the file comment): C1 "producer 2: got seq 4256,
 * expected 4255"; C2 "producer 2: got seq 1, expected 0". */
static void test_ctl_recycled(void)
{
    static mb_stress s;
    s = (mb_stress){
        .nprod = 3, .per = tx_scaled(200000), .pool_size = 2, .use_ctl = true
    };
    mb_stress_run(&s);
}

static const sx_test_case cases[] = {
    { "mpsc_empty", test_mpsc_empty },
    { "mpsc_fifo", test_mpsc_fifo },
    { "mpsc_stub_reinsertion", test_mpsc_stub_reinsertion },
    { "mpsc_model", test_mpsc_model },
    { "mpsc_half_done_push", test_mpsc_half_done_push },
    { "mpsc_find_waits_for_link", test_mpsc_find_waits_for_link },
    { "mpsc_producers", test_mpsc_producers },
    { "mpsc_near_empty", test_mpsc_near_empty },
    { "mpsc_unpop", test_mpsc_unpop },
    { "mpsc_unpop_concurrent", test_mpsc_unpop_concurrent },
    { "ctl_take_oldest_first", test_ctl_take_oldest_first },
    { "ctl_concurrent", test_ctl_concurrent },
    { "ctl_recycled", test_ctl_recycled },
};

SX_TEST_MAIN(cases)

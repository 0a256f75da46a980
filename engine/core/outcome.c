/* engine/core/outcome.c — finished processes' outcomes, kept for wait (the
 * store; its waiters are engine/core/wait.c).
 *
 * The contract (docs/API.md, sx_engine_wait): wait finds the outcome of
 * any of the most recent `keep_outcomes` finished processes.
 *
 * Shards. Every finish puts one record, so the store is on the hottest
 * path there is: skynet finishes 1.1 million processes a second per
 * worker. One store under one mutex would make every finish move the
 * mutex, the ring's head and the hash chains between the cores, and under
 * two workers the mutex convoys into futex sleeps: skynet then spends
 * 89 % of its time in the store (1.26 s with it, 0.14 s without).
 * So each worker has its own shard, and every other thread shares one
 * more; a put touches only its own shard, under a spinlock that only
 * readers (wait, watch) ever contend for.
 *
 * Which records a shard keeps. Two rules, each enough on its own for the
 * contract; a record goes when either says so.
 *  1. A shard keeps at most its own `keep` most recent. Every outcome
 *     among the engine's `keep` most recent is among its shard's, so this
 *     alone keeps the contract, at up to (workers + 1) x keep records.
 *  2. The count. Each shard counts its puts and adds them to the shared
 *     `counted` in batches of COUNT_BATCH (one shared write per 64 puts
 *     instead of one per put: a shared counter RMW per finish would be
 *     15 % of skynet). A record is stamped with `counted` as the put read
 *     it. When a later put of the shard reads a `counted` at least
 *     `window` = keep + COUNT_BATCH x shards above a record's stamp, that
 *     many puts were counted since. Of those, at most COUNT_BATCH per
 *     shard were done before the record's put and counted after its read:
 *     its own shard's unflushed ones (< COUNT_BATCH; the put reads after
 *     its own flush), and per other shard the one batch whose add the
 *     read may have missed (a later batch of that shard holds only puts
 *     that did not happen before ours, or the read would have seen the
 *     add). So at least `keep` came after it (or raced with it, where
 *     either order is right), and it goes. This bounds the whole store to
 *     about keep + COUNT_BATCH x shards records while the shards are
 *     busy; a shard that stops putting keeps its records (at most `keep`)
 *     until it puts again.
 * So wait finds at least every one of the `keep` most recent outcomes,
 * and sometimes a few older ones, unless the byte budget (below) pushed
 * them out first.
 *
 * Bytes. A record counts its result's bytes plus its message's with the
 * NUL (len + msg_len: what it holds past its header). Each shard knows
 * its own exactly (`bytes`, under its lock) and adds what changed to the
 * store's shared `bytes` once the change reaches BYTES_BATCH either way
 * (`dbytes`), so that a stream of small outcomes, whose puts and
 * evictions cancel out, never writes the shared line; one big outcome
 * flushes at once. A put reads the shared figure plus its own unflushed
 * change: the total, give or take BYTES_BATCH per other shard.
 *
 * Which is oldest. The count's stamps are too coarse to say (a shard
 * counts its puts in batches of 64, so a burst of big outcomes shares one
 * stamp), so a record also has an `order`: a record of more than
 * ORDER_MIN bytes takes the next number of the shared `seq` (an atomic
 * add, beside the malloc and the copy that such a record costs anyway:
 * none is kept as a spare), a smaller one the number seq is at (a load of
 * a line that only big puts write). Big records are thus in put order
 * across shards, small ones tie with the last big one before them, and
 * within a shard orders never decrease (taken under its lock).
 *
 * While the total is over `budget`, the put evicts, oldest order first:
 *  - under its own lock, its own oldest, as long as that is no younger
 *    than the oldest of every other shard (their `head_order`s: a hint,
 *    exact or smaller than the shard's head's, never bigger), and never
 *    the record it is putting;
 *  - after its lock is let go, if the total is still over, the oldest of
 *    the other shards by their head orders, one at a time under that
 *    shard's lock (the evicted bytes come off the shared figure at once),
 *    and its own again when that is the oldest, but never its last
 *    record.
 * A shard that stopped putting is thus emptied by the others' puts, as
 * far as the budget needs. The put's own record stays even when it alone
 * is over the budget, until a later put evicts it. So the bytes held stay
 * under budget + the newest record + BYTES_BATCH x shards, save for puts
 * in flight (and records evicted while a reader copies them, freed when it
 * is done). The byte check costs a put one relaxed load of a line that
 * only flushes and big puts write; the cross-shard work happens only over
 * the budget.
 *
 * Reads of `counted` are relaxed: a put that happens before this one is
 * counted in what we read, or its batch is still unflushed, which the
 * window allows for; puts that race are unordered anyway.
 *
 * Waiting (engine/core/wait.c, "Waiting"): a put reads the count of its
 * PID's waiters under its shard lock, after the retire, and wakes them
 * (sx__outcomes_wake) only when it is not 0.
 *
 * Threads: [any thread].
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"

/* A shard's ring and index start with this many entries. */
#define SHARD_MIN_CAP 64
/* Puts a shard counts before adding them to `counted`. */
#define COUNT_BATCH 64
/* Room for small values and messages, so that records are reusable. */
#define OUTCOME_MIN_CAP 48
#define SPARES_MAX 64 /* evicted records a worker's shard keeps for reuse */
/* Only records this small are kept as spares: 64 spares of a 1 MiB result
 * would hold 64 MiB per worker for nothing. */
#define SPARE_CAP_MAX 512
/* A shard's change in bytes held that it adds to the shared count at once. */
#define BYTES_BATCH ((int64_t)64 << 10)
/* Records of more than this many bytes take a number of their own from
 * `seq` (see "Bytes"); it is SPARE_CAP_MAX: no bigger record is reused. */
#define ORDER_MIN SPARE_CAP_MAX

int sx__outcomes_init(sx__outcomes *o, size_t keep, size_t keep_bytes,
                      unsigned workers)
{
    memset(o, 0, sizeof(*o));
    o->keep = keep;
    o->budget =
        keep_bytes > (size_t)INT64_MAX ? INT64_MAX : (int64_t)keep_bytes;
    size_t cm = SHARD_MIN_CAP;
    while (cm < keep)
        cm *= 2;
    o->cap_max = cm;
    o->n_shards = workers + 1;
    o->window = (uint64_t)keep + (uint64_t)COUNT_BATCH * o->n_shards;
    o->shards = aligned_alloc(64, sizeof(*o->shards) * o->n_shards);
    if (o->shards == NULL)
        return SX_ENOMEM;
    memset(o->shards, 0, sizeof(*o->shards) * o->n_shards);
    for (unsigned i = 0; i < o->n_shards; i++) {
        sx__spin_init(&o->shards[i].mu);
        atomic_init(&o->shards[i].head_order, UINT64_MAX);
    }
    atomic_init(&o->counted, 0);
    atomic_init(&o->bytes, 0);
    atomic_init(&o->seq, 0);
    for (unsigned i = 0; i < SX__WAIT_SLOTS; i++)
        atomic_init(&o->n_waiting[i], 0);
    int rc = pthread_mutex_init(&o->wmu, NULL);
    if (rc != 0) {
        free(o->shards);
        return -rc;
    }
    return 0;
}

void sx__outcomes_fini(sx__outcomes *o)
{
    for (unsigned i = 0; i < o->n_shards; i++) {
        sx__oshard *s = &o->shards[i];
        for (size_t k = 0; k < s->n; k++)
            free(s->ring[(s->head + k) & (s->cap - 1)]);
        free(s->ring);
        free(s->buckets);
        while (s->spare != NULL) {
            sx__outcome *next = s->spare->hnext;
            free(s->spare);
            s->spare = next;
        }
    }
    free(o->shards);
    pthread_mutex_destroy(&o->wmu);
}

/* ---- one shard (under its lock) ---- */

static sx__outcome *shard_find(sx__oshard *s, uint64_t id)
{
    if (s->cap == 0)
        return NULL;
    for (sx__outcome *x = s->buckets[sx__outcome_hash(id, s->cap - 1)];
         x != NULL; x = x->hnext)
        if (x->id == id)
            return x;
    return NULL;
}

static size_t record_bytes(const sx__outcome *x)
{
    return x->len + x->msg_len;
}

/* Publishes the order of the ring's oldest record (see "Bytes"). */
static void head_order_set(sx__oshard *s)
{
    /* relaxed: a hint for other puts' choice of where to evict; it
     * publishes nothing. */
    atomic_store_explicit(&s->head_order,
                          s->n > 0 ? s->ring[s->head]->order : UINT64_MAX,
                          memory_order_relaxed);
}

/* Takes the oldest record out of the ring and the index, and its bytes
 * off the shard's; the caller settles the store's count (dbytes, or the
 * shared count for another shard's record) and the head order. */
static sx__outcome *shard_evict(sx__oshard *s)
{
    sx__outcome *x = s->ring[s->head];
    sx__outcome **pp = &s->buckets[sx__outcome_hash(x->id, s->cap - 1)];
    while (*pp != x)
        pp = &(*pp)->hnext;
    *pp = x->hnext;
    s->ring[s->head] = NULL;
    s->head = (s->head + 1) & (s->cap - 1);
    s->n--;
    s->bytes -= record_bytes(x);
    return x;
}

/* A record out of the ring: freed by its caller (chained on *gone), or
 * by its last reader when one is copying it. */
static void retire_record(sx__outcome *x, sx__outcome **gone)
{
    if (x->pins > 0) {
        x->evicted = true; /* its last reader frees it */
        return;
    }
    x->hnext = *gone;
    *gone = x;
}

/* Doubles the ring and the index (to at least SHARD_MIN_CAP), keeping the
 * order. Rare: log2(keep / 64) times per shard at most. */
static bool shard_grow(sx__oshard *s, size_t cap_max)
{
    size_t cap = s->cap == 0 ? SHARD_MIN_CAP : s->cap * 2;
    if (cap > cap_max)
        cap = cap_max;
    sx__outcome **ring = calloc(cap, sizeof(*ring));
    sx__outcome **buckets = calloc(cap, sizeof(*buckets));
    if (ring == NULL || buckets == NULL) {
        free(ring);
        free(buckets);
        return false;
    }
    for (size_t k = 0; k < s->n; k++) {
        sx__outcome *x = s->ring[(s->head + k) & (s->cap - 1)];
        ring[k] = x;
        size_t b = sx__outcome_hash(x->id, cap - 1);
        x->hnext = buckets[b];
        buckets[b] = x;
    }
    free(s->ring);
    free(s->buckets);
    s->ring = ring;
    s->buckets = buckets;
    s->head = 0;
    s->cap = cap;
    return true;
}

/* ---- put ---- */

static sx__outcome *record_new(sx__oshard *s, bool own, size_t need)
{
    if (own && s->spare != NULL && s->spare->cap >= need) {
        sx__outcome *x = s->spare;
        s->spare = x->hnext;
        s->n_spare--;
        return x;
    }
    size_t cap = need > OUTCOME_MIN_CAP ? need : OUTCOME_MIN_CAP;
    sx__outcome *x = malloc(sizeof(*x) + cap);
    if (x != NULL)
        x->cap = cap;
    return x;
}

static void record_fill(sx__outcome *x, uint64_t id, int error, const char *msg,
                        size_t ml, sx_payload value, uint64_t steps,
                        uint32_t attempts)
{
    x->id = id;
    x->error = error;
    x->attempts = attempts;
    x->steps = steps;
    x->pins = 0;
    x->evicted = false;
    x->len = value.len;
    x->value = (uint8_t *)(x + 1);
    if (value.len > 0)
        memcpy(x->value, value.data, value.len);
    x->msg = ml > 0 ? (char *)x->value + value.len : NULL;
    x->msg_len = ml;
    if (ml > 0)
        memcpy(x->msg, msg, ml);
}

/* The bytes held, as far as shard s can tell under its lock: the shared
 * count plus its own change not yet added (see "Bytes"). */
static int64_t bytes_seen(sx__outcomes *o, const sx__oshard *s)
{
    /* relaxed: a figure; a stale one evicts a little late or early. */
    return atomic_load_explicit(&o->bytes, memory_order_relaxed) + s->dbytes;
}

/* The smallest head order among the shards other than s (UINT64_MAX when
 * they are all empty), and which shard has it. */
static uint64_t oldest_other(sx__outcomes *o, const sx__oshard *s,
                             unsigned *which)
{
    uint64_t min = UINT64_MAX;
    for (unsigned i = 0; i < o->n_shards; i++) {
        if (&o->shards[i] == s)
            continue;
        /* relaxed: a hint (see head_order_set). */
        uint64_t h = atomic_load_explicit(&o->shards[i].head_order,
                                          memory_order_relaxed);
        if (h < min) {
            min = h;
            *which = i;
        }
    }
    return min;
}

/* After a put into shard s found the store over its byte budget and
 * evicted what it could of its own: evicts the oldest records of every
 * shard, one at a time under that shard's lock, until the bytes held are
 * within the budget, never taking s's last record (the put's own, or
 * younger). See "Bytes". */
static void shed(sx__outcomes *o, sx__oshard *s)
{
    /* relaxed: see bytes_seen; every eviction here subtracts at once. */
    while (atomic_load_explicit(&o->bytes, memory_order_relaxed) > o->budget) {
        unsigned i = 0;
        uint64_t other = oldest_other(o, s, &i);
        /* relaxed: a hint, as above. */
        uint64_t own =
            atomic_load_explicit(&s->head_order, memory_order_relaxed);
        sx__oshard *t = own < other ? s : &o->shards[i];
        if (own == UINT64_MAX && other == UINT64_MAX)
            return;
        sx__outcome *gone = NULL;
        size_t freed = 0;
        bool took = false;
        sx__spin_lock(&t->mu);
        if (t->n > (t == s ? 1u : 0u)) {
            sx__outcome *x = shard_evict(t);
            freed = record_bytes(x);
            retire_record(x, &gone);
            took = true;
        }
        head_order_set(t); /* exact again, whatever it was */
        sx__spin_unlock(&t->mu);
        if (!took) {
            if (t == s)
                return; /* only its newest left, which stays */
            continue;   /* emptied meanwhile; its order says so now */
        }
        /* relaxed: a count (see bytes_seen). */
        atomic_fetch_sub_explicit(&o->bytes, (int64_t)freed,
                                  memory_order_relaxed);
        free(gone); /* one record, or none when a reader frees it */
    }
}

static inline __attribute__((always_inline)) void
outcomes_put(sx_engine *e, sx__worker *self, sx__proc *p, uint64_t id,
             int error, const char *msg, sx_payload value, uint64_t steps,
             uint32_t attempts, bool cold)
{
    sx__outcomes *o = &e->outcomes;
    /* A worker's shard is its own: it alone puts there, so its spare
     * (below) needs no lock. Every other thread shares the last shard. */
    bool own = self != NULL;
    sx__oshard *s = &o->shards[own ? self->id : o->n_shards - 1];
    /* The record that this put will likely evict was put ~keep finishes
     * ago and is cold; fetch it while the new one is filled. `victim` is
     * the owner's own field; the record may have been evicted and freed
     * by another put since, which a prefetch does not mind (it never
     * faults). */
    if (own && s->victim != NULL)
        __builtin_prefetch(s->victim);
    size_t ml = msg != NULL ? strlen(msg) + 1 : 0;
    /* Allocated (or reused) before the lock: the lock is held only for
     * the ring and the index. */
    sx__outcome *x = record_new(s, own, ml + value.len);
    if (x != NULL)
        record_fill(x, id, error, msg, ml, value, steps, attempts);
    sx__outcome *gone = NULL; /* evicted, chained by hnext */
    sx__spin_lock(&s->mu);
    if (++s->uncounted == COUNT_BATCH) {
        /* relaxed: a count, which publishes nothing (see "Which records a
         * shard keeps"). */
        atomic_fetch_add_explicit(&o->counted, COUNT_BATCH,
                                  memory_order_relaxed);
        s->uncounted = 0;
    }
    /* relaxed: as above. */
    uint64_t now = atomic_load_explicit(&o->counted, memory_order_relaxed);
    size_t before = s->bytes;
    while (s->n > 0 &&
           (s->n >= o->keep || now - s->ring[s->head]->stamp >= o->window))
        retire_record(shard_evict(s), &gone);
    if (x != NULL) {
        x->stamp = now;
        /* relaxed: a number, unique for big records, which publishes
         * nothing (see "Bytes"). */
        x->order =
            record_bytes(x) > ORDER_MIN
                ? atomic_fetch_add_explicit(&o->seq, 1, memory_order_relaxed) +
                      1
                : atomic_load_explicit(&o->seq, memory_order_relaxed);
    }
    if (x != NULL && s->n == s->cap && !shard_grow(s, o->cap_max)) {
        /* Out of memory: this outcome is not kept; waiters are still
         * woken and then find neither outcome nor process (SX_ENOTFOUND). */
        x->hnext = gone;
        gone = x;
        x = NULL;
    }
    if (x != NULL) {
        s->ring[(s->head + s->n) & (s->cap - 1)] = x;
        s->n++;
        size_t b = sx__outcome_hash(id, s->cap - 1);
        x->hnext = s->buckets[b];
        s->buckets[b] = x;
        s->bytes += record_bytes(x);
    }
    /* Over the byte budget: the shard's own oldest while they are the
     * oldest anywhere, never the one just put (see "Bytes"). */
    s->dbytes += (int64_t)s->bytes - (int64_t)before;
    bool over = bytes_seen(o, s) > o->budget;
    if (over) {
        unsigned i;
        uint64_t other = oldest_other(o, s, &i);
        while (s->n > 1 && s->ring[s->head]->order <= other) {
            size_t b = s->bytes;
            retire_record(shard_evict(s), &gone);
            s->dbytes -= (int64_t)(b - s->bytes);
            if (bytes_seen(o, s) <= o->budget) {
                over = false;
                break;
            }
        }
    }
    if (over || s->dbytes >= BYTES_BATCH || s->dbytes <= -BYTES_BATCH) {
        /* relaxed: a count (see bytes_seen). */
        atomic_fetch_add_explicit(&o->bytes, s->dbytes, memory_order_relaxed);
        s->dbytes = 0;
    }
    /* The published order is exact when the ring is empty or holds one
     * record, and after a put over the budget; otherwise it may be smaller
     * than the head's, which only makes another put's choice of where to
     * evict a little off (and that eviction sets it exact). Reading the
     * head's order at every put would be a cache miss on a record put
     * ~keep finishes ago. */
    if (over || s->n <= 1)
        head_order_set(s);
    if (own)
        s->victim = s->n > 0 ? s->ring[s->head] : NULL;
    /* After the put, under the same lock: a look-up that misses the live
     * PID finds the outcome (the retire's release store orders the put
     * before it), and a waiter that takes this lock after us sees both. */
    if (p != NULL) {
        /* A restarted job's PID stops resolving with its slot's (release:
         * pairs with the acquire in sx__ptable_get's alias path). */
        if (cold && p->job)
            atomic_store_explicit(&sx__ptable_pext(e, p)->alias_gen, 0,
                                  memory_order_release);
        sx__ptable_retire(e, p);
    }
    /* relaxed, and read under the shard lock: that lock orders it with a
     * waiter's count (wait.c, "Waiting"). */
    bool waited = atomic_load_explicit(
                      &o->n_waiting[sx__outcome_hash(id, SX__WAIT_SLOTS - 1)],
                      memory_order_relaxed) != 0;
    sx__spin_unlock(&s->mu);
    while (gone != NULL) {
        sx__outcome *next = gone->hnext;
        if (own && s->n_spare < SPARES_MAX && gone->cap <= SPARE_CAP_MAX) {
            gone->hnext = s->spare;
            s->spare = gone;
            s->n_spare++;
        } else {
            free(gone);
        }
        gone = next;
    }
    if (over)
        shed(o, s);
    if (waited)
        sx__outcomes_wake(o, id);
}

/* Two entries with one body: sx__outcomes_put has one caller, sx__finish,
 * into which link-time optimisation inlines it (40 instructions less per
 * finish than a call, callgrind, bench submit); every other caller takes
 * the out-of-line copy. */
void sx__outcomes_put(sx_engine *e, sx__worker *self, sx__proc *p, uint64_t id,
                      int error, const char *msg, sx_payload value,
                      uint64_t steps, uint32_t attempts)
{
    outcomes_put(e, self, p, id, error, msg, value, steps, attempts, false);
}

__attribute__((noinline)) void
sx__outcomes_put_cold(sx_engine *e, sx__worker *self, sx__proc *p, uint64_t id,
                      int error, const char *msg, sx_payload value,
                      uint64_t steps, uint32_t attempts)
{
    outcomes_put(e, self, p, id, error, msg, value, steps, attempts, true);
}

void sx__outcomes_count(sx__outcomes *o, uint64_t *records, uint64_t *bytes)
{
    uint64_t n = 0, b = 0;
    for (unsigned i = 0; i < o->n_shards; i++) {
        sx__oshard *s = &o->shards[i];
        sx__spin_lock(&s->mu);
        n += s->n;
        b += s->bytes;
        sx__spin_unlock(&s->mu);
    }
    *records = n;
    *bytes = b;
}

void sx__outcomes_retire(sx_engine *e, sx__worker *self, sx__proc *p,
                         uint64_t id)
{
    sx__outcomes *o = &e->outcomes;
    sx__oshard *s = &o->shards[self != NULL ? self->id : o->n_shards - 1];
    /* As in sx__outcomes_put, with no record: the retire and the read of
     * the waiters' count under a shard lock that every waiter's look takes
     * (wait.c, "Waiting"), so a waiter either sees the PID gone or is
     * counted, and signalled once it sleeps. */
    sx__spin_lock(&s->mu);
    sx__ptable_retire(e, p);
    /* relaxed: see sx__outcomes_put. */
    bool waited = atomic_load_explicit(
                      &o->n_waiting[sx__outcome_hash(id, SX__WAIT_SLOTS - 1)],
                      memory_order_relaxed) != 0;
    sx__spin_unlock(&s->mu);
    if (waited)
        sx__outcomes_wake(o, id);
}

/* ---- get ---- */

static bool copy_out(const sx__outcome *x, sx_result *out)
{
    memset(out, 0, sizeof(*out));
    out->error = x->error;
    out->steps = x->steps;
    out->attempts = x->attempts;
    if (x->len > 0) {
        uint8_t *v = malloc(x->len);
        if (v == NULL)
            return false;
        memcpy(v, x->value, x->len);
        out->value = (sx_payload){ v, x->len };
    }
    if (x->msg != NULL) {
        size_t n = strlen(x->msg) + 1;
        out->error_msg = malloc(n);
        if (out->error_msg == NULL) {
            sx_result_free(out);
            return false;
        }
        memcpy(out->error_msg, x->msg, n);
    }
    return true;
}

/* Outcomes up to this many bytes (value and message) are copied under the
 * shard lock; bigger ones are pinned and copied outside it, so that a wait
 * for a process with a large result does not hold up the finishes of the
 * worker that owns the shard for the length of a malloc and a memcpy
 * (test_api big_outcomes_under_eviction). */
#define COPY_UNDER_LOCK_MAX 4096

/* 1: found and copied; 0: not kept; SX_ENOMEM: found, no memory to copy. */
int sx__outcomes_find(sx__outcomes *o, uint64_t id, sx_result *out)
{
    for (unsigned i = 0; i < o->n_shards; i++) {
        sx__oshard *s = &o->shards[i];
        sx__spin_lock(&s->mu);
        sx__outcome *x = shard_find(s, id);
        int rc = 0;
        /* relaxed: see "Which records a shard keeps"; a record that its
         * shard has not yet evicted by the count (the shard has not put
         * since) is not kept either. A stale read only keeps more. */
        bool kept =
            x != NULL &&
            atomic_load_explicit(&o->counted, memory_order_relaxed) - x->stamp <
                o->window;
        if (kept && x->len + x->msg_len <= COPY_UNDER_LOCK_MAX) {
            rc = copy_out(x, out) ? 1 : SX_ENOMEM;
        } else if (kept) {
            /* Pinned, the record stays allocated and unchanged (records
             * are written only before they are put) while it is copied
             * without the lock; an eviction meanwhile leaves it to us. */
            x->pins++;
            sx__spin_unlock(&s->mu);
            rc = copy_out(x, out) ? 1 : SX_ENOMEM;
            sx__spin_lock(&s->mu);
            bool last = --x->pins == 0 && x->evicted;
            sx__spin_unlock(&s->mu);
            if (last)
                free(x);
            return rc;
        }
        sx__spin_unlock(&s->mu);
        /* A live record is in one shard at most; an expired one with the
         * same id (the slot's 32-bit generation wrapped while that shard
         * sat idle) must not hide it, so only a kept record ends the
         * search. */
        if (rc != 0)
            return rc;
    }
    return 0;
}

bool sx__outcomes_get(sx_engine *e, uint64_t id, sx_result *out)
{
    return sx__outcomes_find(&e->outcomes, id, out) == 1;
}

void sx_result_free(sx_result *r)
{
    if (r == NULL)
        return;
    free((void *)r->value.data);
    free(r->error_msg);
    memset(r, 0, sizeof(*r));
}

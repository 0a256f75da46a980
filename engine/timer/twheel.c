/* engine/timer/twheel.c — a timer set: a hashed wheel in front of two heaps.
 *
 * See twheel.h for the layout. The invariants, with a due's slot being
 * due >> SX__TW_SHIFT:
 *   - near: every entry whose slot is <= cur (a 4-ary min-heap);
 *   - bucket s % BUCKETS: the entries whose slot s is in
 *     (cur, cur + BUCKETS), so one slot per bucket, and in ring order from
 *     cur + 1 the buckets are in slot order;
 *   - far: every entry whose slot is >= cur + BUCKETS (a 4-ary min-heap);
 *   - near_cap >= n: whatever moves into near has room there, so taking
 *     never allocates and never fails (a far entry whose bucket cannot
 *     get a chunk goes to near early, which only makes near bigger:
 *     earliest looks at all three parts, and take still checks each due).
 * take(now) first advances cur to now's slot, moving the buckets it
 * passes into near and the far entries that come within the wheel's
 * span into their buckets; then every entry due at now is in near.
 *
 * Threads: none; see twheel.h.
 */
#include "engine/timer/twheel.h"

#include <stdlib.h>

#include <stepx/process.h>

#define ARITY 4
#define MASK ((uint64_t)SX__TW_BUCKETS - 1)
#define WORDS (SX__TW_BUCKETS / 64)
#define NONE SIZE_MAX

_Static_assert((SX__TW_BUCKETS & (SX__TW_BUCKETS - 1)) == 0 &&
                   SX__TW_BUCKETS % 64 == 0,
               "the bucket count is a power of two and a whole bitmap");

static void sift_up(sx__twent *h, size_t i)
{
    sx__twent x = h[i];
    while (i > 0) {
        size_t parent = (i - 1) / ARITY;
        if (h[parent].due <= x.due)
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = x;
}

static void sift_down(sx__twent *h, size_t n, size_t i)
{
    sx__twent x = h[i];
    for (;;) {
        size_t c = i * ARITY + 1;
        if (c >= n)
            break;
        size_t best = c, end = c + ARITY < n ? c + ARITY : n;
        for (size_t k = c + 1; k < end; k++)
            if (h[k].due < h[best].due)
                best = k;
        if (h[best].due >= x.due)
            break;
        h[i] = h[best];
        i = best;
    }
    h[i] = x;
}

static void heapify(sx__twent *h, size_t n)
{
    for (size_t j = n / ARITY + 1; j-- > 0;)
        if (j < n)
            sift_down(h, n, j);
}

/* Room for at least want entries in *h (doubling); 0 or SX_ENOMEM. */
static int reserve(sx__twent **h, size_t *cap, size_t want)
{
    if (want <= *cap)
        return 0;
    size_t c = *cap > 0 ? *cap : 64;
    while (c < want)
        c *= 2;
    sx__twent *m = realloc(*h, c * sizeof(*m));
    if (m == NULL)
        return SX_ENOMEM;
    *h = m;
    *cap = c;
    return 0;
}

static sx__twent pop(sx__twent *h, size_t *n)
{
    sx__twent top = h[0];
    h[0] = h[--*n];
    if (*n > 0)
        sift_down(h, *n, 0);
    return top;
}

static void near_push(sx__twheel *w, sx__twent x)
{
    /* near_cap >= n covers it (see the invariants). */
    w->near[w->near_n] = x;
    sift_up(w->near, w->near_n++);
}

static void bit_set(sx__twheel *w, size_t i)
{
    w->bits[i / 64] |= (uint64_t)1 << (i % 64);
}

static void bit_clear(sx__twheel *w, size_t i)
{
    w->bits[i / 64] &= ~((uint64_t)1 << (i % 64));
}

/* The first non-empty bucket in ring order from start, or NONE. */
static size_t first_set(const uint64_t *bits, size_t start)
{
    for (size_t k = 0; k <= WORDS; k++) {
        size_t wi = (start / 64 + k) % WORDS;
        uint64_t x = bits[wi];
        if (k == 0)
            x &= ~(uint64_t)0 << (start % 64);
        else if (k == WORDS)
            x &= ((uint64_t)1 << (start % 64)) - 1; /* what k == 0 left */
        if (x != 0)
            return wi * 64 + (size_t)__builtin_ctzll(x);
    }
    return NONE;
}

/* A chunk: a spare, else the newest slab's next unused one (untouched
 * memory until then), else the first of a new slab twice the size of the
 * last (or of one chunk, if that much memory is not to be had); NULL when
 * not even that. */
static sx__twchunk *chunk_get(sx__twheel *w)
{
    sx__twchunk *c = w->spare;
    if (c != NULL) {
        w->spare = c->next;
        return c;
    }
    if (w->slabs == NULL || w->fresh == w->slabs->n) {
        size_t n = w->slabs == NULL ? SX__TW_SLAB_MIN : 2 * w->slabs->n;
        if (n > SX__TW_SLAB_MAX)
            n = SX__TW_SLAB_MAX;
        sx__twslab *s = malloc(sizeof(*s) + n * sizeof(sx__twchunk));
        if (s == NULL && (s = malloc(sizeof(*s) + sizeof(sx__twchunk))) != NULL)
            n = 1;
        if (s == NULL)
            return NULL;
        s->n = n;
        s->next = w->slabs;
        w->slabs = s;
        w->fresh = 0;
    }
    return &w->slabs->c[w->fresh++];
}

static int bucket_add(sx__twheel *w, size_t i, sx__twent x)
{
    sx__twbucket *b = &w->b[i];
    sx__twchunk *c = b->head;
    if (c == NULL || c->n == SX__TW_CHUNK) {
        sx__twchunk *fresh = chunk_get(w);
        if (fresh == NULL)
            return SX_ENOMEM;
        fresh->n = 0;
        fresh->next = c;
        b->head = c = fresh;
    }
    c->e[c->n++] = x;
    if (x.due < b->min)
        b->min = x.due;
    bit_set(w, i);
    return 0;
}

/* Moves bucket i's entries into near and its chunks to the spare list. */
static void bucket_to_near(sx__twheel *w, size_t i)
{
    sx__twbucket *b = &w->b[i];
    bool was_empty = w->near_n == 0;
    sx__twchunk *c = b->head;
    while (c != NULL) {
        for (uint32_t k = 0; k < c->n; k++) {
            /* Into an empty near: append all, then heapify once. */
            w->near[w->near_n] = c->e[k];
            if (!was_empty)
                sift_up(w->near, w->near_n);
            w->near_n++;
        }
        sx__twchunk *next = c->next;
        c->next = w->spare;
        w->spare = c;
        c = next;
    }
    if (was_empty)
        heapify(w->near, w->near_n);
    b->head = NULL;
    b->min = UINT64_MAX;
    bit_clear(w, i);
}

/* Puts x where its slot says; near if its bucket cannot get a chunk. */
static void place(sx__twheel *w, sx__twent x)
{
    uint64_t s = x.due >> SX__TW_SHIFT;
    if (s <= w->cur || bucket_add(w, (size_t)(s & MASK), x) != 0)
        near_push(w, x);
}

static void advance(sx__twheel *w, uint64_t now)
{
    uint64_t s = now >> SX__TW_SHIFT;
    if (s <= w->cur)
        return;
    /* The buckets hold slots cur + 1 .. cur + BUCKETS - 1: move the ones
     * now reached (all of them after a long gap). */
    uint64_t steps = s - w->cur;
    if (steps > SX__TW_BUCKETS - 1)
        steps = SX__TW_BUCKETS - 1;
    for (uint64_t k = 1; k <= steps; k++) {
        size_t i = (size_t)((w->cur + k) & MASK);
        if (w->b[i].head != NULL)
            bucket_to_near(w, i);
    }
    w->cur = s;
    while (w->far_n > 0 &&
           (w->far[0].due >> SX__TW_SHIFT) < w->cur + SX__TW_BUCKETS)
        place(w, pop(w->far, &w->far_n));
}

void sx__tw_init(sx__twheel *w, uint64_t now)
{
    w->cur = now >> SX__TW_SHIFT;
    w->near = w->far = NULL;
    w->near_n = w->near_cap = w->far_n = w->far_cap = 0;
    w->n = 0;
    for (size_t i = 0; i < SX__TW_BUCKETS; i++)
        w->b[i] = (sx__twbucket){ NULL, UINT64_MAX };
    for (size_t i = 0; i < WORDS; i++)
        w->bits[i] = 0;
    w->spare = NULL;
    w->slabs = NULL;
    w->fresh = 0;
}

void sx__tw_fini(sx__twheel *w)
{
    /* Every chunk, in a bucket or spare, is in a slab. */
    while (w->slabs != NULL) {
        sx__twslab *next = w->slabs->next;
        free(w->slabs);
        w->slabs = next;
    }
    free(w->near);
    free(w->far);
    sx__tw_init(w, 0);
}

int sx__tw_reserve(sx__twheel *w, size_t extra)
{
    return reserve(&w->near, &w->near_cap, w->n + extra);
}

int sx__tw_add(sx__twheel *w, uint64_t due, const sx__twval *v)
{
    if (reserve(&w->near, &w->near_cap, w->n + 1) != 0)
        return SX_ENOMEM;
    uint64_t s = due >> SX__TW_SHIFT;
    sx__twent x = { due, *v };
    if (s <= w->cur) {
        near_push(w, x);
    } else if (s - w->cur < SX__TW_BUCKETS) {
        if (bucket_add(w, (size_t)(s & MASK), x) != 0)
            return SX_ENOMEM;
    } else {
        if (reserve(&w->far, &w->far_cap, w->far_n + 1) != 0)
            return SX_ENOMEM;
        w->far[w->far_n] = x;
        sift_up(w->far, w->far_n++);
    }
    w->n++;
    return 0;
}

void sx__tw_sync(sx__twheel *w, uint64_t now)
{
    /* Only an empty set: a set with entries is moved by take, which moves
     * buckets into near as it goes. Never past now: a clock set ahead
     * (say to a due an hour away) would send every nearer entry to near,
     * which is to stay one bucket's worth. */
    if (w->n == 0 && (now >> SX__TW_SHIFT) > w->cur)
        w->cur = now >> SX__TW_SHIFT;
}

size_t sx__tw_take(sx__twheel *w, uint64_t now, sx__twent *out, size_t max)
{
    if (w->n == 0)
        return 0;
    advance(w, now);
    size_t k = 0;
    while (k < max && w->near_n > 0 && w->near[0].due <= now)
        out[k++] = pop(w->near, &w->near_n);
    w->n -= k;
    return k;
}

uint64_t sx__tw_earliest(const sx__twheel *w)
{
    uint64_t m = w->near_n > 0 ? w->near[0].due : UINT64_MAX;
    /* In ring order from cur + 1 the buckets are in slot order: the first
     * non-empty one holds the buckets' earliest. */
    size_t i = first_set(w->bits, (size_t)((w->cur + 1) & MASK));
    if (i != NONE && w->b[i].min < m)
        m = w->b[i].min;
    if (w->far_n > 0 && w->far[0].due < m)
        m = w->far[0].due;
    return m;
}

static size_t heap_filter(sx__twent *h, size_t *n,
                          bool (*keep)(const sx__twval *v, void *arg),
                          void *arg)
{
    size_t j = 0, was = *n;
    for (size_t i = 0; i < was; i++)
        if (keep(&h[i].v, arg))
            h[j++] = h[i];
    *n = j;
    heapify(h, j);
    return was - j;
}

size_t sx__tw_filter(sx__twheel *w, bool (*keep)(const sx__twval *v, void *arg),
                     void *arg)
{
    size_t gone = heap_filter(w->near, &w->near_n, keep, arg) +
                  heap_filter(w->far, &w->far_n, keep, arg);
    for (size_t i = 0; i < SX__TW_BUCKETS; i++) {
        sx__twbucket *b = &w->b[i];
        if (b->head == NULL)
            continue;
        b->min = UINT64_MAX;
        sx__twchunk **link = &b->head;
        while (*link != NULL) {
            sx__twchunk *c = *link;
            uint32_t j = 0;
            for (uint32_t k = 0; k < c->n; k++) {
                if (keep(&c->e[k].v, arg)) {
                    if (c->e[k].due < b->min)
                        b->min = c->e[k].due;
                    c->e[j++] = c->e[k];
                } else {
                    gone++;
                }
            }
            c->n = j;
            if (j == 0) { /* an empty chunk goes back to the spares */
                *link = c->next;
                c->next = w->spare;
                w->spare = c;
            } else {
                link = &c->next;
            }
        }
        if (b->head == NULL)
            bit_clear(w, i);
    }
    w->n -= gone;
    return gone;
}

/* engine/core/event.c — event nodes: allocation and their bytes.
 *
 * Every send, completion and watcher uses one node. Worker threads keep a
 * private free list of nodes (bounded), so that steady-state messaging does
 * not call malloc: a node freed by the consumer goes back on the consumer's
 * list and is reused for its next send.
 *
 * When messages flow one way between workers (fan-in: producers on one
 * worker, the consumer on another) the consumer's list fills while the
 * producer's stays empty. A shared depot evens that out: a full list hands
 * a batch of DEPOT_BATCH nodes to the depot, an empty one takes a batch
 * back, one mutex acquisition per batch (the magazine scheme of Bonwick's
 * slab allocator). Other threads (callers of the engine API, libuv loops)
 * keep no list: they take one node at a time from the depot when it has
 * one (depot_take), else malloc, and free() what they free. Bytes that do
 * not fit the node's inline area go into one extra heap block.
 *
 * An outside thread that sends to processes (spawnidle's driver, an
 * outside mailbox's owner) thus reuses the nodes its messages came back
 * as: malloc'd on its own, they would pile up in the depot (up to its
 * cap) while it mallocs fresh memory for every send.
 *
 * Nodes come in three sizes (core.h): small for messages whose bytes
 * fit SX__EV_SMALL (104 bytes, a 112-byte malloc chunk), large for the rest
 * and for every completer and watcher (200 bytes, 208), and bundle nodes
 * (992 bytes: "Bundles" below). Each size has its own cache list and depot
 * list; a node goes back to the lists of its size (sx__ev.big). A message
 * in flight thus takes about half the memory of a large node.
 *
 * Threads: [any thread]; the cache is thread-local; the depot is global
 * (nodes are not tied to an engine) and guarded by its mutex.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"
#include "engine/sched/prefetch.h"

#define DEPOT_BATCH 256
/* Nodes of one size a thread keeps; beyond that, batches go to the depot.
 * Bundles (~1 KiB each) are kept in smaller numbers. At most 1.8 MiB per
 * thread: 4096 x 112 + 4096 x 208 + 512 x 992 bytes. */
static const unsigned cache_max[3] = { 4096, 4096, 2 * DEPOT_BATCH };
/* Nodes of one size the depot keeps at most; beyond that, free(). These
 * are 28 + 52 + 15.5 MiB (96 MiB in all), and no size keeps more than
 * 1/256 of the program's memory (sx_memory_size, sx__ev_depot_cap): the
 * figures hold from 13 GiB up, and below that the depot takes at most
 * ~1.2 % of the memory. */
static const size_t depot_max_top[3] = { 256 * 1024, 256 * 1024, 16 * 1024 };
#define DEPOT_MEMORY_SHARE 256

/* The three sizes (core.h): a small node is a message whose bytes fit
 * SX__EV_SMALL; a bundle node holds a bundle's records; a large one is
 * everything else. Each size has its own cache list and depot list,
 * indexed by sx__ev.big. */
#define SMALL_SIZE (offsetof(sx__ev, small) + SX__EV_SMALL)
#define LARGE_SIZE (sizeof(sx__ev) + SX__EV_INLINE)
#define BUNDLE_SIZE (sizeof(sx__ev) + SX__EV_BUNDLE)
#define CLASSES 3
_Static_assert(SMALL_SIZE >= sizeof(sx__ev),
               "a small node must still hold a whole sx__ev");
_Static_assert(SX__EV_SMALL < SX__EV_INLINE,
               "a small node must be the smaller one");
_Static_assert(sizeof(void *) != 8 || SMALL_SIZE + 8 <= 112,
               "a small node fits a 112-byte malloc chunk on LP64");

static const size_t node_size[CLASSES] = { SMALL_SIZE, LARGE_SIZE,
                                           BUNDLE_SIZE };

typedef struct {
    sx__ev *head;
    unsigned n;
} ev_list;

/* initial-exec: see tls_worker in worker.c. */
static _Thread_local struct {
    ev_list l[CLASSES]; /* [big] */
    bool on;
} cache __attribute__((tls_model("initial-exec")));

static struct {
    pthread_mutex_t mu;
    sx__ev *head[CLASSES]; /* [big]; under mu */
    /* Written under mu; read under mu, or without it as a hint
     * (depot_take). Relaxed throughout: the mutex orders the writes and
     * the nodes; the hint needs no order (a stale 0 means a malloc, a
     * stale non-zero a try of the mutex). */
    _Atomic size_t n[CLASSES];
    size_t max[CLASSES]; /* set by the first cache enabled; under mu */
    unsigned caches;     /* enabled caches (workers alive); under mu */
} depot = {
    PTHREAD_MUTEX_INITIALIZER, { NULL, NULL, NULL }, { 0, 0, 0 }, { 0, 0, 0 }, 0
};

size_t sx__ev_depot_cap(int big, uint64_t memory)
{
    size_t top = depot_max_top[big];
    if (memory == 0)
        return top; /* unknown */
    uint64_t n = memory / DEPOT_MEMORY_SHARE / node_size[big];
    if (n < DEPOT_BATCH)
        n = DEPOT_BATCH;
    return n < top ? (size_t)n : top;
}

static sx__ev *next_of(const sx__ev *ev)
{
    /* relaxed: free lists are private (a thread's, or the depot's under
     * its mutex). */
    return (sx__ev *)atomic_load_explicit(&ev->node.next, memory_order_relaxed);
}

static void set_next(sx__ev *ev, sx__ev *next)
{
    /* relaxed: as in next_of. */
    atomic_store_explicit(&ev->node.next, (sx__mpsc_node *)next,
                          memory_order_relaxed);
}

static void free_chain(sx__ev *ev)
{
    while (ev != NULL) {
        sx__ev *next = next_of(ev);
        free(ev);
        ev = next;
    }
}

void sx__ev_cache_enable(void)
{
    cache.on = true;
    pthread_mutex_lock(&depot.mu);
    if (depot.max[0] == 0) {
        /* Once per program (a few small file reads): the figures do not
         * change while it runs. */
        uint64_t mem = sx_memory_size();
        for (int big = 0; big < CLASSES; big++)
            depot.max[big] = sx__ev_depot_cap(big, mem);
    }
    depot.caches++;
    pthread_mutex_unlock(&depot.mu);
}

void sx__ev_cache_flush(void)
{
    for (int big = 0; big < CLASSES; big++) {
        free_chain(cache.l[big].head);
        cache.l[big].head = NULL;
        cache.l[big].n = 0;
    }
    cache.on = false;
    /* The last worker to go empties the depot: nothing outlives the
     * engines. */
    sx__ev *drop[CLASSES] = { NULL, NULL, NULL };
    pthread_mutex_lock(&depot.mu);
    if (--depot.caches == 0) {
        for (int big = 0; big < CLASSES; big++) {
            drop[big] = depot.head[big];
            depot.head[big] = NULL;
            atomic_store_explicit(&depot.n[big], 0, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&depot.mu);
    for (int big = 0; big < CLASSES; big++)
        free_chain(drop[big]);
}

/* An empty cache list takes a batch from the depot; false if it has
 * none. Out of line (as spill is): the fast paths of alloc and free then
 * save no registers. */
static __attribute__((noinline, cold)) bool refill(int big)
{
    pthread_mutex_lock(&depot.mu);
    sx__ev *first = depot.head[big], *last = NULL;
    unsigned k = 0;
    for (sx__ev *ev = first; ev != NULL && k < DEPOT_BATCH; ev = next_of(ev)) {
        last = ev;
        k++;
    }
    if (k > 0) {
        depot.head[big] = next_of(last);
        atomic_store_explicit(
            &depot.n[big],
            atomic_load_explicit(&depot.n[big], memory_order_relaxed) - k,
            memory_order_relaxed);
    }
    pthread_mutex_unlock(&depot.mu);
    if (k == 0)
        return false;
    set_next(last, NULL);
    cache.l[big].head = first;
    cache.l[big].n = k;
    return true;
}

/* A full cache list hands its newest DEPOT_BATCH nodes to the depot. */
static __attribute__((noinline, cold)) void spill(int big)
{
    ev_list *l = &cache.l[big];
    sx__ev *first = l->head, *last = first;
    for (unsigned k = 1; k < DEPOT_BATCH; k++)
        last = next_of(last);
    l->head = next_of(last);
    l->n -= DEPOT_BATCH;
    pthread_mutex_lock(&depot.mu);
    /* relaxed: see depot.n. */
    size_t have = atomic_load_explicit(&depot.n[big], memory_order_relaxed);
    bool keep = have < depot.max[big];
    if (keep) {
        set_next(last, depot.head[big]);
        depot.head[big] = first;
        atomic_store_explicit(&depot.n[big], have + DEPOT_BATCH,
                              memory_order_relaxed);
    }
    pthread_mutex_unlock(&depot.mu);
    if (!keep) {
        set_next(last, NULL);
        free_chain(first);
    }
}

/* One node from the depot for a thread without a cache (not a worker), or
 * NULL: the depot is empty, or its mutex is held (then malloc is the
 * cheaper wait, and several outside threads do not convoy on it). */
static __attribute__((noinline)) sx__ev *depot_take(int big)
{
    /* relaxed: a hint (see depot.n). */
    if (atomic_load_explicit(&depot.n[big], memory_order_relaxed) == 0)
        return NULL;
    if (pthread_mutex_trylock(&depot.mu) != 0)
        return NULL;
    sx__ev *ev = depot.head[big];
    if (ev != NULL) {
        depot.head[big] = next_of(ev);
        /* relaxed: see depot.n. */
        atomic_store_explicit(
            &depot.n[big],
            atomic_load_explicit(&depot.n[big], memory_order_relaxed) - 1,
            memory_order_relaxed);
    }
    pthread_mutex_unlock(&depot.mu);
    return ev;
}

/* Clears a node's fields (a small node's stop at its bytes): the inline
 * bytes are written before they are read. Always inlined, so that big is
 * a constant and each clear has a constant size (a size known only as one
 * of two compiles to `rep stos`, whose start-up cost is most of an
 * allocation). The small header is a memset: stores of a zeroed register.
 * The large one is a copy of a zeroed node: as a memset it changed what
 * link-time optimisation inlines around it, for more instructions on the
 * hot paths (bench/icount.sh). */
static inline __attribute__((always_inline)) void ev_clear(sx__ev *ev, int big)
{
    static const sx__ev zero;
    if (big)
        memcpy(ev, &zero, sizeof(sx__ev));
    else
        memset(ev, 0, offsetof(sx__ev, small));
}

/* Puts ev at the head of this thread's list l. */
static inline void list_push(ev_list *l, sx__ev *ev)
{
    set_next(ev, l->head);
    l->head = ev;
    l->n++;
}

/* Always inlined, so that each caller's `big` is a constant: the memset
 * then compiles to a few stores (a variable length costs ~17 instructions
 * per node in callgrind). */
static inline __attribute__((always_inline)) sx__ev *ev_alloc(int big)
{
    ev_list *l = &cache.l[big];
    sx__ev *ev = l->head;
    if (ev == NULL && cache.on && refill(big))
        ev = l->head;
    if (ev != NULL) {
        l->head = next_of(ev);
        l->n--;
    } else if (cache.on || (ev = depot_take(big)) == NULL) {
        ev = malloc(node_size[big]);
        if (ev == NULL)
            return NULL;
    }
    ev_clear(ev, big);
    ev->big = (uint8_t)big;
    return ev;
}

sx__ev *sx__ev_alloc(void)
{
    return ev_alloc(1);
}

sx__ev *sx__ev_alloc_sized(size_t n)
{
    return n > SX__EV_SMALL ? ev_alloc(1) : ev_alloc(0);
}

sx__ev *sx__ev_alloc_small_completer(void)
{
    _Static_assert(SMALL_SIZE >= sizeof(sx__ev),
                   "a small node holds the completer fields");
    sx__ev *ev = ev_alloc(0);
    if (ev != NULL) {
        ev->to = NULL;
        ev->engine = NULL;
        ev->dl = NULL;
        ev->t0 = 0;
    }
    return ev;
}

/* sx__ev_free past its fast path: a node with heap bytes, a thread
 * without a cache, or a full cache list. */
static __attribute__((noinline)) void ev_free_any(sx__ev *ev)
{
    /* Tested first: most nodes hold their bytes inline, and free(NULL) is
     * still a call through the PLT (two per pingpong message, here and in
     * sx__ev_set). */
    if (ev->heap != NULL) {
        free(ev->heap);
        ev->heap = NULL;
    }
    if (!cache.on) {
        free(ev);
        return;
    }
    ev_list *l = &cache.l[ev->big];
    if (l->n >= cache_max[ev->big])
        spill(ev->big);
    list_push(l, ev);
}

/* Out of line on purpose: with LTO, inlined into the worker loop it
 * crowds sx__proc_release out of the inliner's budget, 6 more
 * instructions per pingpong message in callgrind. Most nodes go straight
 * onto this thread's list with no call, so that the fast path saves no
 * registers (ev_free_any has the rest). */
__attribute__((noinline)) void sx__ev_free(sx__ev *ev)
{
    if (ev == NULL)
        return;
    ev_list *l = &cache.l[ev->big];
    if (ev->heap == NULL && cache.on && l->n < cache_max[ev->big]) {
        list_push(l, ev);
        return;
    }
    ev_free_any(ev);
}

/* ---- bundles ----
 *
 * A step that sends several messages in a row to one process (a producer
 * feeding a consumer) writes them into one node as records instead of one
 * node each: one allocation, one push and one free per bundle, and the
 * consumer reads consecutive bytes instead of a node per message, each
 * written on another core. Nothing else changes: the consumer's step gets
 * one event per message, in order, with the same from, topic and data
 * (engine/sched/turn.c, collect), and an outside mailbox one callback per
 * message (outside.c). A bundle holds at most the engine's throughput messages
 * (one step's worth; a step with less room takes part of it: turn.c,
 * collect). It starts in a large node, from two messages whose records fit
 * one, and moves to a bundle node (SX__EV_BUNDLE record bytes) when it
 * outgrows that, so two messages never take a kilobyte. A message too big for a
 * bundle gets its own node, after the bundle.
 *
 * A record: its head (rec_size), the topic and its NUL, the data. */

/* Small copies (a topic, an int payload) inline, not a call to memcpy for
 * a few bytes. The first byte alone, then the rest as two loads of one
 * width that may overlap (the widest of 8, 4, 2 that fits): the bytes were
 * usually just written by the sender, and msgpack writes a number as a
 * type byte then one store of the value (process/mpformat.h, sx__mp_put),
 * so both loads are that store and are forwarded from the store buffer; a
 * load spanning the type byte and the value would stall on forwarding
 * (bench/FINDINGS.md, "fanin", *Store forwarding*). No loops: the compiler
 * turns none into a vector loop or a call to memmove. */
static inline void copy_small(uint8_t *d, const uint8_t *s, size_t n)
{
    if (n == 0)
        return;
    if (n > 17) {
        memcpy(d, s, n);
        return;
    }
    d[0] = s[0];
    size_t m = n - 1;
    d++, s++;
    if (m >= 8) {
        uint64_t a, b;
        memcpy(&a, s, 8);
        memcpy(&b, s + m - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + m - 8, &b, 8);
    } else if (m >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + m - 4, 4);
        memcpy(d, &a, 4);
        memcpy(d + m - 4, &b, 4);
    } else if (m >= 2) {
        uint16_t a, b;
        memcpy(&a, s, 2);
        memcpy(&b, s + m - 2, 2);
        memcpy(d, &a, 2);
        memcpy(d + m - 2, &b, 2);
    } else if (m == 1) {
        d[0] = s[0];
    }
}

/* ASCII and no NUL before n: a valid topic (process/utf8.h) that the
 * quick paths take; anything else goes to the general check. */
static inline bool topic_ascii(const char *topic, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((signed char)topic[i] <= 0)
            return false;
    return true;
}

sx__ev *sx__ev_message_quick(const char *topic, size_t topic_len,
                             sx_payload data)
{
    _Static_assert(16 + 1 + 16 <= SX__EV_SMALL,
                   "a small node holds a quick message");
    ev_list *l = &cache.l[0];
    sx__ev *ev = l->head;
    if (ev == NULL || topic_len > 16 || data.len > 16)
        return NULL;
    if (!topic_ascii(topic, topic_len))
        return NULL;
    l->head = next_of(ev);
    l->n--;
    ev_clear(ev, 0);
    ev->kind = SX__EV_MESSAGE;
    uint8_t *b = (uint8_t *)ev + offsetof(sx__ev, small);
    copy_small(b, (const uint8_t *)topic, topic_len);
    b[topic_len] = 0;
    if (data.len > 0)
        copy_small(b + topic_len + 1, data.data, data.len);
    ev->topic_len = (uint8_t)topic_len;
    ev->data_len = (uint32_t)data.len;
    ev->has_topic = true;
    return ev;
}

/* A record's head: the topic length, then the data length in one byte
 * when below 255, else 255 and four bytes (host order). */
static size_t rec_size(size_t topic_len, size_t data_len)
{
    return 2 + (data_len >= 255 ? 4 : 0) + topic_len + 1 + data_len;
}

static inline __attribute__((always_inline)) void
rec_put(uint8_t *b, const char *topic, size_t topic_len, const uint8_t *data,
        uint32_t data_len)
{
    b[0] = (uint8_t)topic_len;
    if (data_len < 255) {
        b[1] = (uint8_t)data_len;
        b += 2;
    } else {
        b[1] = 255;
        memcpy(b + 2, &data_len, sizeof data_len);
        b += 6;
    }
    copy_small(b, (const uint8_t *)topic, topic_len);
    b[topic_len] = 0;
    if (data_len > 0)
        copy_small(b + topic_len + 1, data, data_len);
}

static size_t class_bytes(int big)
{
    return big == 2 ? SX__EV_BUNDLE : SX__EV_INLINE;
}

int sx__ev_bundle_add(sx__ev **evp, const char *topic, size_t topic_len,
                      sx_payload data, unsigned max)
{
    sx__ev *ev = *evp;
    if (data.len > SX__EV_BUNDLE)
        return -1; /* (and rec_size cannot wrap) */
    size_t add = rec_size(topic_len, data.len);
    if (ev->nmsg == 0) {
        /* A message (its bytes inline: a heap block means it is big). */
        if (max < 2 || ev->heap != NULL || !ev->has_topic || ev->msg_len != 0)
            return -1;
        size_t first = rec_size(ev->topic_len, ev->data_len);
        /* Into a large node only: two messages that do not fit one stay
         * two nodes (a bundle node for two would be ~1 KiB), and the
         * next send may bundle with the second. */
        if (first + add > SX__EV_INLINE)
            return -1;
        sx__ev *b = ev_alloc(1);
        if (b == NULL)
            return -1;
        sx_payload d0 = sx__ev_data(ev);
        uint8_t *r = sx__ev_inl(b);
        rec_put(r, sx__ev_topic(ev), ev->topic_len, d0.data, ev->data_len);
        rec_put(r + first, topic, topic_len, data.data, (uint32_t)data.len);
        b->kind = SX__EV_MESSAGE;
        b->nmsg = 2;
        b->data_len = (uint32_t)(first + add);
        sx__ev_free(ev);
        *evp = b;
        return 0;
    }
    /* No record is under 3 bytes (rec_size), so the node's room keeps the
     * count below what nmsg holds. */
    _Static_assert(SX__EV_BUNDLE / 3 < UINT16_MAX, "a bundle's count fits");
    if (ev->nmsg >= max)
        return -1;
    size_t used = ev->data_len;
    if (used + add > class_bytes(ev->big)) {
        if (ev->big == 2 || used + add > SX__EV_BUNDLE)
            return -1;
        /* A large bundle outgrew its node: move to a bundle node. */
        sx__ev *b = ev_alloc(2);
        if (b == NULL)
            return -1;
        /* Its lines were last read by a consumer on another core: ask for
         * them all now, for writing, not one miss per record. */
        bool on = sx__prefetch_w_on();
        for (size_t o = 64; o < BUNDLE_SIZE; o += 64)
            sx__prefetch_w(on, (const char *)b + o);
        memcpy(sx__ev_inl(b), sx__ev_inl(ev), used);
        b->kind = SX__EV_MESSAGE;
        b->nmsg = ev->nmsg;
        b->data_len = ev->data_len;
        sx__ev_free(ev);
        *evp = ev = b;
    }
    rec_put(sx__ev_inl(ev) + used, topic, topic_len, data.data,
            (uint32_t)data.len);
    ev->nmsg++;
    ev->data_len = (uint32_t)(used + add);
    return 0;
}

int sx__ev_bundle_append(sx__ev *ev, const char *topic, size_t topic_len,
                         sx_payload data, unsigned max)
{
    unsigned n = ev->nmsg;
    if (n == 0 || n >= max || topic_len > 16 || data.len > 16)
        return -1;
    size_t end = ev->data_len + rec_size(topic_len, data.len);
    if (end > SX__EV_INLINE && (ev->big != 2 || end > SX__EV_BUNDLE))
        return -1;
    if (!topic_ascii(topic, topic_len))
        return -1;
    rec_put(sx__ev_inl(ev) + ev->data_len, topic, topic_len, data.data,
            (uint32_t)data.len);
    ev->nmsg = (uint16_t)(n + 1);
    ev->data_len = (uint32_t)end;
    return 0;
}

void sx__ev_bundle_next(const sx__ev *ev, size_t *off, const char **topic,
                        sx_payload *data)
{
    const uint8_t *r = sx__ev_inl((sx__ev *)ev) + *off;
    size_t tl = r[0];
    uint32_t dl = r[1];
    size_t head = 2;
    if (dl == 255) {
        memcpy(&dl, r + 2, sizeof dl);
        head = 6;
    }
    *topic = (const char *)r + head;
    data->data = dl > 0 ? r + head + tl + 1 : NULL;
    data->len = dl;
    *off += head + tl + 1 + dl;
}

void sx__ev_free_chain(sx__ev *ev)
{
    while (ev != NULL) {
        /* relaxed: the chain is in no queue; its links are ours. */
        sx__ev *next = (sx__ev *)atomic_load_explicit(&ev->node.next,
                                                      memory_order_relaxed);
        sx__ev_free(ev);
        ev = next;
    }
}

/* The bytes: in the heap block, or inline (a small node's from `small`
 * on, addressed from the node's start since they run past the struct). */
static uint8_t *ev_bytes(const sx__ev *ev)
{
    if (ev->heap != NULL)
        return ev->heap;
    if (ev->big)
        return sx__ev_inl((sx__ev *)ev);
    return (uint8_t *)ev + offsetof(sx__ev, small);
}

int sx__ev_set(sx__ev *ev, const char *topic, size_t topic_len, sx_payload data,
               const char *msg)
{
    size_t msg_len = msg != NULL ? strlen(msg) + 1 : 0;
    if (topic_len > 255 || data.len > UINT32_MAX || msg_len > UINT32_MAX)
        return SX_EINVAL;
    size_t tl = topic != NULL ? topic_len + 1 : 0;
    size_t total = tl + data.len + msg_len;
    if (ev->heap != NULL) { /* see sx__ev_free */
        free(ev->heap);
        ev->heap = NULL;
    }
    if (total > (ev->big ? SX__EV_INLINE : SX__EV_SMALL)) {
        ev->heap = malloc(total);
        if (ev->heap == NULL)
            return SX_ENOMEM;
    }
    uint8_t *b = ev_bytes(ev);
    /* copy_small: a message's topic and data are mostly a few bytes,
     * for which a call to memcpy costs more than the copy. */
    if (tl > 0) {
        copy_small(b, (const uint8_t *)topic, topic_len);
        b[topic_len] = 0;
    }
    if (data.len > 0)
        copy_small(b + tl, data.data, data.len);
    if (msg_len > 0)
        memcpy(b + tl + data.len, msg, msg_len);
    ev->topic_len = (uint8_t)topic_len;
    ev->data_len = (uint32_t)data.len;
    ev->msg_len = (uint32_t)msg_len;
    ev->has_topic = topic != NULL;
    return 0;
}

bool sx__ev_set_data_quick(sx__ev *ev, sx_payload data)
{
    _Static_assert(16 <= SX__EV_SMALL, "a small node holds quick data");
    if (ev->heap != NULL || data.len > 16)
        return false;
    copy_small(ev_bytes(ev), data.data, data.len);
    ev->topic_len = 0;
    ev->has_topic = 0;
    ev->data_len = (uint32_t)data.len;
    ev->msg_len = 0;
    return true;
}

const char *sx__ev_topic(const sx__ev *ev)
{
    return ev->has_topic ? (const char *)ev_bytes(ev) : NULL;
}

sx_payload sx__ev_data(const sx__ev *ev)
{
    size_t tl = ev->has_topic ? (size_t)ev->topic_len + 1 : 0;
    sx_payload pl = { ev_bytes(ev) + tl, ev->data_len };
    if (ev->data_len == 0)
        pl.data = NULL;
    return pl;
}

const char *sx__ev_msg(const sx__ev *ev)
{
    if (ev->msg_len == 0)
        return NULL;
    size_t tl = ev->has_topic ? (size_t)ev->topic_len + 1 : 0;
    return (const char *)ev_bytes(ev) + tl + ev->data_len;
}

/* engine/event.c — event nodes: allocation and their bytes.
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
 * use malloc directly. Bytes that do not fit the node's inline area go
 * into one extra heap block.
 *
 * Threads: [any thread]; the cache is thread-local; the depot is global
 * (nodes are not tied to an engine) and guarded by its mutex.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

#define CACHE_MAX 4096
#define DEPOT_BATCH 256
#define DEPOT_MAX (256 * 1024) /* nodes; beyond it, free() */

/* initial-exec: see tls_worker in worker.c. */
static _Thread_local struct {
    sx__ev *head;
    unsigned n;
    bool on;
} cache __attribute__((tls_model("initial-exec")));

static struct {
    pthread_mutex_t mu;
    sx__ev *head;    /* under mu */
    size_t n;        /* under mu */
    unsigned caches; /* enabled caches (workers alive); under mu */
} depot = { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0 };

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
    depot.caches++;
    pthread_mutex_unlock(&depot.mu);
}

void sx__ev_cache_flush(void)
{
    free_chain(cache.head);
    cache.head = NULL;
    cache.n = 0;
    cache.on = false;
    /* The last worker to go empties the depot: nothing outlives the
     * engines. */
    sx__ev *drop = NULL;
    pthread_mutex_lock(&depot.mu);
    if (--depot.caches == 0) {
        drop = depot.head;
        depot.head = NULL;
        depot.n = 0;
    }
    pthread_mutex_unlock(&depot.mu);
    free_chain(drop);
}

/* An empty cache takes a batch from the depot; false if it has none. */
static bool refill(void)
{
    pthread_mutex_lock(&depot.mu);
    sx__ev *first = depot.head, *last = NULL;
    unsigned k = 0;
    for (sx__ev *ev = first; ev != NULL && k < DEPOT_BATCH; ev = next_of(ev)) {
        last = ev;
        k++;
    }
    if (k > 0) {
        depot.head = next_of(last);
        depot.n -= k;
    }
    pthread_mutex_unlock(&depot.mu);
    if (k == 0)
        return false;
    set_next(last, NULL);
    cache.head = first;
    cache.n = k;
    return true;
}

/* A full cache hands its newest DEPOT_BATCH nodes to the depot. */
static void spill(void)
{
    sx__ev *first = cache.head, *last = first;
    for (unsigned k = 1; k < DEPOT_BATCH; k++)
        last = next_of(last);
    cache.head = next_of(last);
    cache.n -= DEPOT_BATCH;
    pthread_mutex_lock(&depot.mu);
    bool keep = depot.n < DEPOT_MAX;
    if (keep) {
        set_next(last, depot.head);
        depot.head = first;
        depot.n += DEPOT_BATCH;
    }
    pthread_mutex_unlock(&depot.mu);
    if (!keep) {
        set_next(last, NULL);
        free_chain(first);
    }
}

sx__ev *sx__ev_alloc(void)
{
    sx__ev *ev = cache.head;
    if (ev == NULL && cache.on && refill())
        ev = cache.head;
    if (ev != NULL) {
        cache.head = next_of(ev);
        cache.n--;
    } else {
        ev = malloc(sizeof(*ev));
        if (ev == NULL)
            return NULL;
    }
    /* Only the header is cleared: the inline bytes are written before they
     * are read. */
    memset(ev, 0, offsetof(sx__ev, inl));
    return ev;
}

void sx__ev_free(sx__ev *ev)
{
    if (ev == NULL)
        return;
    free(ev->heap);
    ev->heap = NULL;
    if (!cache.on) {
        free(ev);
        return;
    }
    if (cache.n >= CACHE_MAX)
        spill();
    set_next(ev, cache.head);
    cache.head = ev;
    cache.n++;
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

static uint8_t *ev_bytes(const sx__ev *ev)
{
    return ev->heap != NULL ? ev->heap : (uint8_t *)ev->inl;
}

int sx__ev_set(sx__ev *ev, const char *topic, size_t topic_len, sx_payload data,
               const char *msg)
{
    size_t msg_len = msg != NULL ? strlen(msg) + 1 : 0;
    if (topic_len > 255 || data.len > UINT32_MAX || msg_len > UINT32_MAX)
        return SX_EINVAL;
    size_t tl = topic != NULL ? topic_len + 1 : 0;
    size_t total = tl + data.len + msg_len;
    free(ev->heap);
    ev->heap = NULL;
    if (total > SX__EV_INLINE) {
        ev->heap = malloc(total);
        if (ev->heap == NULL)
            return SX_ENOMEM;
    }
    uint8_t *b = ev_bytes(ev);
    if (tl > 0) {
        memcpy(b, topic, topic_len);
        b[topic_len] = 0;
    }
    if (data.len > 0)
        memcpy(b + tl, data.data, data.len);
    if (msg_len > 0)
        memcpy(b + tl + data.len, msg, msg_len);
    ev->topic_len = (uint8_t)topic_len;
    ev->data_len = (uint32_t)data.len;
    ev->msg_len = (uint32_t)msg_len;
    ev->has_topic = topic != NULL;
    return 0;
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

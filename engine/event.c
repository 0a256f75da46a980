/* engine/event.c — event nodes: allocation and their bytes.
 *
 * Every send, completion and watcher uses one node. Worker threads keep a
 * private free list of nodes (bounded), so that steady-state messaging does
 * not call malloc: a node freed by the consumer goes back on the consumer's
 * list and is reused for its next send. Other threads (callers of the
 * engine API, libuv loops) use malloc directly. Bytes that do not fit the
 * node's inline area go into one extra heap block.
 *
 * Threads: [any thread]; the cache is thread-local.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

#define CACHE_MAX 4096

/* initial-exec: see tls_worker in worker.c. */
static _Thread_local struct {
    sx__ev *head;
    unsigned n;
    bool on;
} cache __attribute__((tls_model("initial-exec")));

void sx__ev_cache_enable(void)
{
    cache.on = true;
}

void sx__ev_cache_flush(void)
{
    while (cache.head != NULL) {
        sx__ev *ev = cache.head;
        /* relaxed: a thread-private list. */
        cache.head = (sx__ev *)atomic_load_explicit(&ev->node.next,
                                                    memory_order_relaxed);
        free(ev);
    }
    cache.n = 0;
    cache.on = false;
}

sx__ev *sx__ev_alloc(void)
{
    sx__ev *ev = cache.head;
    if (ev != NULL) {
        /* relaxed: a thread-private list. */
        cache.head = (sx__ev *)atomic_load_explicit(&ev->node.next,
                                                    memory_order_relaxed);
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
    if (cache.on && cache.n < CACHE_MAX) {
        /* relaxed: a thread-private list. */
        atomic_store_explicit(&ev->node.next, (sx__mpsc_node *)cache.head,
                              memory_order_relaxed);
        cache.head = ev;
        cache.n++;
        return;
    }
    free(ev);
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

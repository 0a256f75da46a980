/* relay/router.c — the router: delivers a message by PID to the local
 * engine when the PID's node is the local one, else to the peer registered
 * for that node, else to the remote transport.
 *
 * Threads: sx_router_send, add_peer, remove_peer and set_transport may run
 * on any thread, concurrently; new and free on one thread with no other
 * call in flight.
 *
 * The peer table is a sorted array behind a pthread rwlock:
 * - The local path takes no lock at all: local_node is immutable, so a send
 *   to a local PID costs one compare before sx_engine_send.
 * - Remote sends take the lock shared and call the route under it, so
 *   they run in parallel with each other, and add/remove/set (exclusive)
 *   wait for the calls in flight: when one of them returns, the route it
 *   replaced is running nowhere and is never called again, so its owner
 *   may free what `user` points to. Routes must not block, so the writer's
 *   wait is short.
 * An atomically swapped immutable array would spare remote sends the
 * lock's shared atomic, but then freeing the old array and giving the same
 * "old route no longer called" promise need deferred reclamation (epochs or
 * hazard pointers); a remote send goes to a network, where one uncontended
 * atomic is lost in the noise. glibc's default rwlock prefers readers: a
 * writer waits while remote sends overlap without pause; the table changes
 * rarely (a node joins or leaves).
 */
#include "relay/stepx/relay.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t node;
    sx_route_fn fn;
    void *user;
} router_peer;

struct sx_router {
    sx_engine *local; /* not owned; outlives the router                   */
    /* The local engine's node number: immutable (read from its config,
     * which is fixed at sx_engine_new; the engine has no public getter). */
    uint32_t local_node;
    pthread_rwlock_t lock; /* guards everything below                   */
    router_peer *peers;    /* (lock) owned, sorted by node, n_peers used */
    size_t n_peers, cap_peers;
    sx_route_fn transport; /* (lock) NULL: none                         */
    void *transport_user;  /* (lock)                                    */
};

int sx_router_new(sx_engine *local, sx_router **out)
{
    sx_router *r;

    if (local == NULL || out == NULL)
        return SX_EINVAL;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return SX_ENOMEM;
    if (pthread_rwlock_init(&r->lock, NULL) != 0) {
        free(r);
        return SX_ENOMEM;
    }
    r->local = local;
    sx_engine_config cfg;
    if (sx_engine_config_get(local, &cfg) != 0) {
        pthread_rwlock_destroy(&r->lock);
        free(r);
        return SX_EINVAL;
    }
    r->local_node = cfg.node;
    *out = r; /* the caller's, until sx_router_free */
    return 0;
}

void sx_router_free(sx_router *r)
{
    if (r == NULL)
        return;
    pthread_rwlock_destroy(&r->lock);
    free(r->peers);
    free(r);
}

/* The index of node's peer, or where it would go. (lock, either mode) */
static size_t router_find(const sx_router *r, uint32_t node, bool *found)
{
    size_t lo = 0, hi = r->n_peers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->peers[mid].node < node)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < r->n_peers && r->peers[lo].node == node;
    return lo;
}

int sx_router_add_peer(sx_router *r, uint32_t node, sx_route_fn fn, void *user)
{
    size_t i;
    bool found;

    if (r == NULL || fn == NULL || node == r->local_node)
        return SX_EINVAL;
    pthread_rwlock_wrlock(&r->lock);
    i = router_find(r, node, &found);
    if (!found) {
        if (r->n_peers == r->cap_peers) {
            size_t cap = r->cap_peers != 0 ? 2 * r->cap_peers : 4;
            router_peer *np = realloc(r->peers, cap * sizeof(*np));
            if (np == NULL) {
                pthread_rwlock_unlock(&r->lock);
                return SX_ENOMEM; /* the table is unchanged */
            }
            r->peers = np;
            r->cap_peers = cap;
        }
        memmove(&r->peers[i + 1], &r->peers[i],
                (r->n_peers - i) * sizeof(*r->peers));
        r->n_peers++;
        r->peers[i].node = node;
    }
    r->peers[i].fn = fn;
    r->peers[i].user = user; /* not owned: the caller's */
    pthread_rwlock_unlock(&r->lock);
    return 0;
}

int sx_router_remove_peer(sx_router *r, uint32_t node)
{
    size_t i;
    bool found;

    if (r == NULL)
        return SX_EINVAL;
    pthread_rwlock_wrlock(&r->lock);
    i = router_find(r, node, &found);
    if (found) {
        memmove(&r->peers[i], &r->peers[i + 1],
                (r->n_peers - i - 1) * sizeof(*r->peers));
        r->n_peers--;
    }
    pthread_rwlock_unlock(&r->lock);
    return found ? 0 : SX_ENOTFOUND;
}

void sx_router_set_transport(sx_router *r, sx_route_fn fn, void *user)
{
    if (r == NULL)
        return;
    pthread_rwlock_wrlock(&r->lock);
    r->transport = fn;
    r->transport_user = fn != NULL ? user : NULL;
    pthread_rwlock_unlock(&r->lock);
}

int sx_router_send(sx_router *r, sx_pid from, sx_pid to, const char *topic,
                   sx_payload data)
{
    sx_message msg;
    sx_route_fn fn = NULL;
    void *user = NULL;
    size_t i;
    bool found;
    int rc;

    if (r == NULL || topic == NULL)
        return SX_EINVAL;
    if (to.node == r->local_node)
        return sx_engine_send(r->local, from, to, topic, data);
    /* The same limit the engine applies, so a message's fate does not
     * depend on where its PID lives. */
    if (strnlen(topic, 256) > 255)
        return SX_EINVAL;
    msg.from = from;
    msg.to = to;
    msg.topic = topic;
    msg.data = data;
    pthread_rwlock_rdlock(&r->lock);
    i = router_find(r, to.node, &found);
    if (found) {
        fn = r->peers[i].fn;
        user = r->peers[i].user;
    } else {
        fn = r->transport;
        user = r->transport_user;
    }
    /* Called under the shared lock: see the file comment. */
    rc = fn != NULL ? fn(user, &msg) : SX_ENOTFOUND;
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

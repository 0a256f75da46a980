/* relay/cluster_place.c — where a placed submit goes (docs/CLUSTER.md,
 * "Placement"): each member's types, as its heartbeats name them (kept
 * as hashes of the names), and the pick among the members that have a
 * type: in turn (SX_PLACE_ANY) or the least loaded
 * (SX_PLACE_LEAST_LOADED).
 *
 * Threads: under the cluster's mu (the member table's lock), on whichever
 * thread reads a heartbeat or places a submit.
 */
#include <stdlib.h>
#include <string.h>

#include "relay/cluster.h"

uint64_t sx__cluster_type_hash(const char *name, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)name[i]) * 0x100000001b3ull;
    return h;
}

void sx__cluster_hb_types(sx__member *x, sx_payload p)
{
    free(x->types);
    x->types = NULL;
    x->n_types = 0;
    int64_t w = sx_get_int(p, "workers", 1);
    x->workers = w > 0 && w <= 65536 ? (uint32_t)w : 1;
    sx_payload v;
    sx_unpack u;
    uint32_t n;
    if (sx_get(p, "types", &v) != 0)
        return;
    sx_unpack_init(&u, v);
    if (sx_unpack_array(&u, &n) != 0 || n == 0)
        return;
    if (n > SX__CLUSTER_MAX_TYPES)
        n = SX__CLUSTER_MAX_TYPES;
    x->types = malloc(n * sizeof *x->types);
    if (x->types == NULL)
        return;
    for (uint32_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if (sx_unpack_str(&u, &s, &len) != 0)
            break;
        x->types[x->n_types++] = sx__cluster_type_hash(s, len);
    }
}

static bool has_type(const sx__member *x, uint64_t h)
{
    for (uint32_t i = 0; i < x->n_types; i++)
        if (x->types[i] == h)
            return true;
    return false;
}

sx__member *sx__cluster_pick(sx_cluster *c, const char *type, int place)
{
    uint64_t h = sx__cluster_type_hash(type, strlen(type));
    size_t n = c->n_members, start = (size_t)(c->rr++ % (n > 0 ? n : 1));
    sx__member *best = NULL;
    double best_load = 0;
    for (size_t k = 0; k < n; k++) {
        sx__member *x = &c->members[(start + k) % n];
        if (!has_type(x, h))
            continue;
        if (place == SX_PLACE_ANY)
            return x; /* the first in turn */
        double load = ((double)x->m.processes + (double)x->placed) /
                      (x->workers > 0 ? x->workers : 1);
        if (best == NULL || load < best_load) {
            best = x;
            best_load = load;
        }
    }
    return best;
}

/* process/payload_map.c — sx_map_get: a key looked up in a msgpack map
 * payload, with the sx_unpack reader (process/unpack.c). The relay's
 * server reads request fields with it, its client reads replies, and the
 * CLI reads both. sx__map_entry (process/mapentry.h) is its one step.
 *
 * Threads: [any thread] (no shared state; it reads the caller's bytes).
 */
#include "process/mapentry.h"
#include "process/mpformat.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

int sx__map_entry(sx_unpack *u, const char **k, size_t *kl, sx_payload *v)
{
    /* One look for a fixstr key and a value whose first byte gives its
     * size (sx__mp_scalar_span), most entries of requests and replies:
     * the same key and value bytes the general readers below return,
     * without their calls. */
    const uint8_t *p = u->p;
    if (u->err == 0 && p < u->end && (p[0] & 0xe0) == 0xa0) {
        size_t left = (size_t)(u->end - p), ks = 1 + (size_t)(p[0] & 0x1f);
        size_t vs;
        if (ks < left && (vs = sx__mp_scalar_span(p[ks])) != 0 &&
            vs <= left - ks) {
            *k = (const char *)p + 1;
            *kl = ks - 1;
            *v = (sx_payload){ p + ks, vs };
            u->p = p + ks + vs;
            return 0;
        }
    }
    *k = NULL;
    *kl = 0;
    if (sx_unpack_type(u) == SX_MP_STR) {
        if (sx_unpack_str(u, k, kl) != 0)
            return SX_EPROTO;
    } else if (sx_unpack_skip(u) != 0) {
        return SX_EPROTO;
    }
    return sx_unpack_raw(u, v) == 0 ? 0 : SX_EPROTO;
}

int sx_map_get(sx_payload map, const char *key, sx_payload *value)
{
    if (key == NULL)
        return SX_EINVAL;
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, map);
    if (sx_unpack_map(&u, &n) != 0)
        return SX_EPROTO;
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t l;
        sx_payload v;
        if (sx__map_entry(&u, &k, &l, &v) != 0)
            return SX_EPROTO;
        if (k != NULL && l == kl && memcmp(k, key, kl) == 0) {
            if (value != NULL)
                *value = v;
            return 0;
        }
    }
    return SX_ENOTFOUND;
}

/* process/get.c — reading a payload by path: sx_get finds the value at a
 * path such as "user.emails.0" with the sx_unpack reader
 * (process/unpack.c), and the typed getters (sx_get_int, sx_get_double,
 * sx_get_bool, sx_get_str, sx_get_strcpy, sx_get_len) read that value.
 *
 * The walk reads only what it needs: the pairs of a map up to the key,
 * the elements of an array up to the index, and the value found, which is
 * read whole (so it is well formed). Bytes after it are not read, so data
 * cut short after the value still gives it, as sx_map_get does. Every
 * length is checked by the reader, which never reads past the end.
 *
 * Threads: [any thread] (no shared state; it reads the caller's bytes).
 */
#include "process/stepx/process.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Reads the index a digits-only segment names. false when seg is empty,
 * holds anything but digits, or is past SIZE_MAX (no array has it). */
static bool seg_index(const char *seg, size_t len, size_t *out)
{
    size_t v = 0;

    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned dg;
        if (seg[i] < '0' || seg[i] > '9')
            return false;
        dg = (unsigned)(seg[i] - '0');
        if (v > (SIZE_MAX - dg) / 10)
            return false;
        v = v * 10 + dg;
    }
    *out = v;
    return true;
}

/* Moves u from a value to the value that segment seg names inside it.
 * 0, SX_ENOTFOUND, or SX_EPROTO (malformed data, or nesting too deep for
 * the reader). */
static int seg_step(sx_unpack *u, const char *seg, size_t len)
{
    uint32_t n;
    int t = sx_unpack_type(u);

    if (t < 0)
        return SX_EPROTO;
    if (t == SX_MP_MAP) {
        if (sx_unpack_map(u, &n) != 0)
            return SX_EPROTO;
        for (uint32_t i = 0; i < n; i++) {
            const char *k;
            size_t kl;
            bool match = false;
            if (sx_unpack_type(u) == SX_MP_STR) {
                if (sx_unpack_str(u, &k, &kl) != 0)
                    return SX_EPROTO;
                match = kl == len && memcmp(k, seg, len) == 0;
            } else if (sx_unpack_skip(u) != 0) {
                return SX_EPROTO;
            }
            if (match)
                return 0;
            if (sx_unpack_skip(u) != 0)
                return SX_EPROTO;
        }
        return SX_ENOTFOUND;
    }
    if (t == SX_MP_ARRAY) {
        size_t idx;
        if (sx_unpack_array(u, &n) != 0)
            return SX_EPROTO;
        if (!seg_index(seg, len, &idx) || idx >= n)
            return SX_ENOTFOUND;
        for (size_t i = 0; i < idx; i++)
            if (sx_unpack_skip(u) != 0)
                return SX_EPROTO;
        return 0;
    }
    return SX_ENOTFOUND;
}

int sx_get(sx_payload pl, const char *path, sx_payload *out)
{
    sx_unpack u;
    sx_payload v;
    int rc;

    sx_unpack_init(&u, pl);
    if (u.err != 0)
        return SX_EPROTO; /* data NULL with a length */
    if (path != NULL && path[0] != '\0') {
        const char *seg = path;
        for (;;) {
            const char *dot = strchr(seg, '.');
            size_t len = dot != NULL ? (size_t)(dot - seg) : strlen(seg);
            if ((rc = seg_step(&u, seg, len)) != 0)
                return rc;
            if (dot == NULL)
                break;
            seg = dot + 1;
        }
    }
    if (sx_unpack_raw(&u, &v) != 0)
        return SX_EPROTO;
    if (out != NULL)
        *out = pl.len == 0 ? pl : v; /* the empty payload is itself nil */
    return 0;
}

/* A cursor on the value at path; false when there is none. */
static bool get_at(sx_payload pl, const char *path, sx_unpack *u)
{
    sx_payload v;

    if (sx_get(pl, path, &v) != 0)
        return false;
    sx_unpack_init(u, v);
    return true;
}

int64_t sx_get_int(sx_payload pl, const char *path, int64_t def)
{
    sx_unpack u;
    int64_t v;

    if (!get_at(pl, path, &u) || sx_unpack_int(&u, &v) != 0)
        return def;
    return v;
}

double sx_get_double(sx_payload pl, const char *path, double def)
{
    sx_unpack u;
    double v;

    if (!get_at(pl, path, &u) || sx_unpack_double(&u, &v) != 0)
        return def;
    return v;
}

bool sx_get_bool(sx_payload pl, const char *path, bool def)
{
    sx_unpack u;
    bool v;

    if (!get_at(pl, path, &u) || sx_unpack_bool(&u, &v) != 0)
        return def;
    return v;
}

/* The body of a string or binary value at u. */
static bool body_of(sx_unpack *u, sx_str *s)
{
    const void *p;

    if (sx_unpack_type(u) == SX_MP_STR)
        return sx_unpack_str(u, &s->ptr, &s->len) == 0;
    if (sx_unpack_bin(u, &p, &s->len) != 0)
        return false;
    s->ptr = p;
    return true;
}

sx_str sx_get_str(sx_payload pl, const char *path)
{
    sx_str s = { NULL, 0 };
    sx_unpack u;

    if (!get_at(pl, path, &u) || !body_of(&u, &s)) {
        s.ptr = NULL;
        s.len = 0;
    }
    return s;
}

int sx_get_strcpy(sx_payload pl, const char *path, char *buf, size_t cap)
{
    sx_payload v;
    sx_unpack u;
    sx_str s;
    int rc;

    if (buf == NULL || cap == 0)
        return SX_EINVAL;
    buf[0] = '\0';
    if ((rc = sx_get(pl, path, &v)) != 0)
        return rc;
    sx_unpack_init(&u, v);
    if (!body_of(&u, &s) || memchr(s.ptr, '\0', s.len) != NULL)
        return SX_EPROTO;
    if (s.len >= cap)
        return SX_ELIMIT;
    memcpy(buf, s.ptr, s.len);
    buf[s.len] = '\0';
    return 0;
}

size_t sx_get_len(sx_payload pl, const char *path)
{
    sx_unpack u;
    uint32_t n;

    if (!get_at(pl, path, &u))
        return 0;
    if (sx_unpack_array(&u, &n) == 0 || sx_unpack_map(&u, &n) == 0)
        return n;
    return 0;
}

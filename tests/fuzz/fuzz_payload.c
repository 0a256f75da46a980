/* tests/fuzz/fuzz_payload.c — libFuzzer target for the payload reader
 * (process/unpack.c) and sx_map_get (process/payload_map.c) on arbitrary
 * bytes.
 *
 * Each input is
 *  - walked value by value with the typed reads (sx_unpack_type, then the
 *    read of that type, into every container), checking the cursor
 *    contract: a failed call never moves the cursor, a mismatch is not
 *    sticky, a malformed value is, the cursor stays inside the input;
 *  - skipped and read raw value by value: raw's bytes are where the
 *    cursor was, up to where it is; sx_pack_raw takes exactly the values
 *    skip accepts;
 *  - compared with msgpack-c's own unpacker (a differential oracle): a
 *    value the reader accepts (nesting within msgpack-c's stack), msgpack-c
 *    decodes to the same tree over the same bytes; what the reader rejects
 *    as malformed msgpack-c rejects too (only for inputs without 16/32-bit
 *    array or map counts: msgpack-c allocates a container's claimed count
 *    before it looks at the bytes);
 *  - read with sx_payload_get_int and sx_payload_get_str (whole input,
 *    cap from the input), agreeing with msgpack-c on what one value is;
 *  - looked up with sx_map_get for every string key msgpack-c sees in a
 *    top-level map (the first pair with that key wins) and for a key taken
 *    from the input;
 *  - read with sx_unpack_pid at every value start.
 * An oracle failure aborts (a crash for libFuzzer). Single-threaded.
 */
#include <math.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stepx/process.h>
#include <stepx/relay.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(c)                                                         \
    do {                                                                       \
        if (!(c))                                                              \
            abort();                                                           \
    } while (0)

/* msgpack-c fails a value nested deeper than its parse stack. */
#define MSGPACK_C_DEPTH 32

/* ---- the typed walk ---- */

/* Reads one value at u with the typed reads; returns 0 or the error, and
 * in *depth the deepest nesting of containers seen (a scalar is 0, [] 1).
 */
static int walk(sx_unpack *u, int level, int *depth)
{
    const uint8_t *start = u->p;
    int t = sx_unpack_type(u);
    int rc;
    uint32_t n;

    if (t < 0) {
        FUZZ_ASSERT(u->p == start);
        return t;
    }
    /* A read of another type: a mismatch leaves err and the cursor. */
    if (t != SX_MP_NIL) {
        FUZZ_ASSERT(sx_unpack_nil(u) == SX_EPROTO);
        FUZZ_ASSERT(u->err == 0 && u->p == start);
    }
    if (t != SX_MP_STR) {
        const char *s;
        size_t len;
        FUZZ_ASSERT(sx_unpack_str(u, &s, &len) == SX_EPROTO);
        FUZZ_ASSERT(u->err == 0 && u->p == start);
    }
    if (t != SX_MP_MAP) {
        FUZZ_ASSERT(sx_unpack_map(u, &n) == SX_EPROTO);
        FUZZ_ASSERT(u->err == 0 && u->p == start);
    }
    switch (t) {
    case SX_MP_NIL:
        rc = sx_unpack_nil(u);
        break;
    case SX_MP_BOOL: {
        bool b;
        rc = sx_unpack_bool(u, &b);
        FUZZ_ASSERT(rc != 0 || b == (start[0] == 0xc3));
        break;
    }
    case SX_MP_INT: {
        int64_t i;
        uint64_t v;
        double d;
        int ri = sx_unpack_int(u, &i);
        if (ri == 0)
            return 0;
        FUZZ_ASSERT(ri == SX_ELIMIT && u->p == start && u->err == 0);
        rc = sx_unpack_uint(u, &v);
        FUZZ_ASSERT(rc == 0 && v > INT64_MAX);
        u->p = start; /* again as a double */
        rc = sx_unpack_double(u, &d);
        FUZZ_ASSERT(rc == 0 && d == (double)v);
        break;
    }
    case SX_MP_FLOAT: {
        double d;
        int64_t i;
        FUZZ_ASSERT(sx_unpack_int(u, &i) == SX_EPROTO && u->p == start);
        rc = sx_unpack_double(u, &d);
        break;
    }
    case SX_MP_STR: {
        const char *s;
        size_t len;
        rc = sx_unpack_str(u, &s, &len);
        if (rc == 0)
            FUZZ_ASSERT((const uint8_t *)s + len == u->p &&
                        (const uint8_t *)s > start);
        break;
    }
    case SX_MP_BIN: {
        const void *p;
        size_t len;
        rc = sx_unpack_bin(u, &p, &len);
        if (rc == 0)
            FUZZ_ASSERT((const uint8_t *)p + len == u->p);
        break;
    }
    case SX_MP_EXT:
        rc = sx_unpack_skip(u);
        break;
    case SX_MP_ARRAY:
    case SX_MP_MAP: {
        uint64_t items;
        rc = t == SX_MP_ARRAY ? sx_unpack_array(u, &n) : sx_unpack_map(u, &n);
        if (rc != 0)
            break;
        if (level + 1 > *depth)
            *depth = level + 1;
        items = t == SX_MP_MAP ? 2 * (uint64_t)n : n;
        /* The reader bounds every count by the bytes left. */
        FUZZ_ASSERT(items <= (uint64_t)(u->end - u->p));
        if (level >= SX_UNPACK_MAX_DEPTH + 8)
            return SX_ELIMIT; /* deep enough: skip knows the rest */
        for (uint64_t k = 0; k < items; k++)
            if ((rc = walk(u, level + 1, depth)) != 0)
                return rc;
        return 0;
    }
    default:
        abort();
    }
    if (rc != 0)
        FUZZ_ASSERT(u->p == start && u->err == rc);
    else
        FUZZ_ASSERT(u->p > start && u->p <= u->end);
    return rc;
}

/* ---- msgpack-c comparison ---- */

/* Whether the reader's value at u equals o; the cursor moves past it. */
static bool same(sx_unpack *u, const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return sx_unpack_nil(u) == 0;
    case MSGPACK_OBJECT_BOOLEAN: {
        bool b;
        return sx_unpack_bool(u, &b) == 0 && b == o->via.boolean;
    }
    case MSGPACK_OBJECT_POSITIVE_INTEGER: {
        uint64_t v;
        return sx_unpack_uint(u, &v) == 0 && v == o->via.u64;
    }
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: {
        int64_t v;
        return o->via.i64 < 0 && sx_unpack_int(u, &v) == 0 && v == o->via.i64;
    }
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: {
        double d;
        if (sx_unpack_type(u) != SX_MP_FLOAT || sx_unpack_double(u, &d) != 0)
            return false;
        return memcmp(&d, &o->via.f64, sizeof(d)) == 0 ||
               (isnan(d) && isnan(o->via.f64));
    }
    case MSGPACK_OBJECT_STR: {
        const char *s;
        size_t len;
        return sx_unpack_str(u, &s, &len) == 0 && len == o->via.str.size &&
               (len == 0 || memcmp(s, o->via.str.ptr, len) == 0);
    }
    case MSGPACK_OBJECT_BIN: {
        const void *p;
        size_t len;
        return sx_unpack_bin(u, &p, &len) == 0 && len == o->via.bin.size &&
               (len == 0 || memcmp(p, o->via.bin.ptr, len) == 0);
    }
    case MSGPACK_OBJECT_EXT: {
        sx_payload raw;
        if (sx_unpack_type(u) != SX_MP_EXT || sx_unpack_raw(u, &raw) != 0)
            return false;
        /* The body is the raw value's last size bytes, the type before. */
        return raw.len >= o->via.ext.size + 2 &&
               (int8_t)raw.data[raw.len - o->via.ext.size - 1] ==
                   o->via.ext.type &&
               (o->via.ext.size == 0 ||
                memcmp(raw.data + raw.len - o->via.ext.size, o->via.ext.ptr,
                       o->via.ext.size) == 0);
    }
    case MSGPACK_OBJECT_ARRAY: {
        uint32_t n;
        if (sx_unpack_array(u, &n) != 0 || n != o->via.array.size)
            return false;
        for (uint32_t i = 0; i < n; i++)
            if (!same(u, &o->via.array.ptr[i]))
                return false;
        return true;
    }
    case MSGPACK_OBJECT_MAP: {
        uint32_t n;
        if (sx_unpack_map(u, &n) != 0 || n != o->via.map.size)
            return false;
        for (uint32_t i = 0; i < n; i++)
            if (!same(u, &o->via.map.ptr[i].key) ||
                !same(u, &o->via.map.ptr[i].val))
                return false;
        return true;
    }
    }
    return false;
}

/* Whether msgpack-c can be given these bytes without allocating a
 * claimed count that the bytes cannot back (no 16/32-bit array or map
 * counts anywhere: fixarray and fixmap claim at most 15). */
static bool msgpack_c_safe(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] >= 0xdc && p[i] <= 0xdf)
            return false;
    return true;
}

/* The number of whole bytes msgpack-c reads as one value at p, or -1 if it
 * fails (malformed, truncated, too deep); the object in *out. */
static long msgpack_c_one(const uint8_t *p, size_t n, msgpack_unpacked *out)
{
    size_t off = 0;
    msgpack_unpack_return r =
        msgpack_unpack_next(out, (const char *)p, n, &off);
    if (r != MSGPACK_UNPACK_SUCCESS && r != MSGPACK_UNPACK_EXTRA_BYTES)
        return -1;
    return (long)off;
}

/* Value by value through the input: the reader's skip against msgpack-c. */
static void differential(const uint8_t *data, size_t size)
{
    sx_unpack u;
    bool safe = msgpack_c_safe(data, size);
    msgpack_unpacked mu;

    msgpack_unpacked_init(&mu);
    sx_unpack_init(&u, (sx_payload){ data, size });
    while (!sx_unpack_done(&u)) {
        const uint8_t *start = u.p;
        size_t left = (size_t)(u.end - u.p);
        sx_unpack w = u;
        int depth = 0;
        int rc = sx_unpack_skip(&u);
        int wrc = walk(&w, 0, &depth);

        /* The typed walk and skip agree on where the value ends. */
        if (rc == 0) {
            FUZZ_ASSERT(wrc == 0 && w.p == u.p);
        } else {
            FUZZ_ASSERT(u.p == start && u.err == rc);
            FUZZ_ASSERT(rc == SX_EPROTO || rc == SX_ELIMIT);
            /* Both walk in the same order: the same first fault. */
            if (rc == SX_EPROTO)
                FUZZ_ASSERT(wrc == SX_EPROTO);
            else
                FUZZ_ASSERT(depth > SX_UNPACK_MAX_DEPTH);
        }
        if (rc == 0 && depth < MSGPACK_C_DEPTH) {
            long got = msgpack_c_one(start, left, &mu);
            sx_unpack c;
            FUZZ_ASSERT(got == (long)(u.p - start));
            sx_unpack_init(&c, (sx_payload){ start, left });
            FUZZ_ASSERT(same(&c, &mu.data));
            FUZZ_ASSERT(c.p == u.p);
        } else if (rc == SX_EPROTO && safe) {
            FUZZ_ASSERT(msgpack_c_one(start, left, &mu) < 0);
        }
        if (rc != 0)
            break;
    }
    msgpack_unpacked_destroy(&mu);
}

/* ---- the one-value shortcuts ---- */

static void shortcuts(const uint8_t *data, size_t size, uint64_t h)
{
    sx_unpack u;
    int64_t i = 0;
    char buf[64];
    size_t cap = (size_t)(h % (sizeof(buf) + 1));
    int one, ri, rs;
    long got = -1;
    msgpack_unpacked mu;

    /* Whether the input is exactly one value, as the reader sees it. */
    sx_unpack_init(&u, (sx_payload){ data, size });
    one = sx_unpack_skip(&u) == 0 && sx_unpack_done(&u);

    msgpack_unpacked_init(&mu);
    if (size > 0 && (one || msgpack_c_safe(data, size)))
        got = msgpack_c_one(data, size, &mu);

    ri = sx_payload_get_int((sx_payload){ data, size }, &i);
    FUZZ_ASSERT(ri == 0 || ri == SX_EPROTO || ri == SX_ELIMIT);
    if (ri == 0)
        FUZZ_ASSERT(one);
    if (got == (long)size && size > 0) {
        if (mu.data.type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            FUZZ_ASSERT(ri == 0 && i == mu.data.via.i64);
        else if (mu.data.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            FUZZ_ASSERT(mu.data.via.u64 > INT64_MAX
                            ? ri == SX_ELIMIT
                            : ri == 0 && (uint64_t)i == mu.data.via.u64);
        else
            FUZZ_ASSERT(ri == SX_EPROTO);
    } else if (size > 0 && got >= 0) {
        /* Trailing bytes; a uint64 above INT64_MAX is refused as such
         * before the reader looks past it. */
        FUZZ_ASSERT(ri == SX_EPROTO ||
                    (ri == SX_ELIMIT &&
                     mu.data.type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
                     mu.data.via.u64 > INT64_MAX));
    }

    memset(buf, 0x55, sizeof(buf));
    rs = sx_payload_get_str((sx_payload){ data, size }, buf, cap);
    FUZZ_ASSERT(rs == 0 || rs == SX_EPROTO || rs == SX_ELIMIT);
    if (cap > 0 && rs != 0)
        FUZZ_ASSERT(buf[0] == 0);
    if (cap < sizeof(buf))
        FUZZ_ASSERT((uint8_t)buf[cap] == 0x55); /* nothing past cap */
    if (got == (long)size && size > 0) {
        if (mu.data.type == MSGPACK_OBJECT_STR) {
            size_t n = mu.data.via.str.size;
            FUZZ_ASSERT(n < cap ? rs == 0 : rs == SX_ELIMIT);
            if (rs == 0)
                FUZZ_ASSERT(
                    buf[n] == 0 &&
                    (n == 0 || memcmp(buf, mu.data.via.str.ptr, n) == 0));
        } else {
            FUZZ_ASSERT(rs == SX_EPROTO);
        }
    } else if (size > 0 && got >= 0) {
        FUZZ_ASSERT(rs == SX_EPROTO);
    }

    /* sx_pack_raw takes exactly one whole value (or nothing: a nil). */
    {
        sx_pack pk;
        int rp;
        sx_pack_init(&pk);
        rp = sx_pack_raw(&pk, (sx_payload){ data, size });
        if (size == 0)
            FUZZ_ASSERT(rp == 0 && pk.len == 1 && pk.data[0] == 0xc0);
        else if (one)
            FUZZ_ASSERT(rp == 0 && pk.len == size &&
                        memcmp(pk.data, data, size) == 0);
        else
            FUZZ_ASSERT(rp != 0 && pk.len == 0 && pk.err == rp);
        sx_pack_fini(&pk);
    }

    /* sx_map_get: every string key msgpack-c sees, first pair wins. */
    if (got > 0 && mu.data.type == MSGPACK_OBJECT_MAP) {
        const msgpack_object_map *m = &mu.data.via.map;
        sx_payload map = { data, (size_t)got };
        for (uint32_t k = 0; k < m->size && k < 16; k++) {
            const msgpack_object *key = &m->ptr[k].key;
            char name[64];
            sx_payload v;
            uint32_t first = k;
            int rm;
            if (key->type != MSGPACK_OBJECT_STR ||
                key->via.str.size >= sizeof(name) ||
                (key->via.str.size > 0 &&
                 memchr(key->via.str.ptr, 0, key->via.str.size) != NULL))
                continue;
            if (key->via.str.size > 0) /* msgpack-c: ptr NULL for "" */
                memcpy(name, key->via.str.ptr, key->via.str.size);
            name[key->via.str.size] = 0;
            for (uint32_t e = 0; e < k; e++) {
                const msgpack_object *o = &m->ptr[e].key;
                if (o->type == MSGPACK_OBJECT_STR &&
                    o->via.str.size == key->via.str.size &&
                    (o->via.str.size == 0 ||
                     memcmp(o->via.str.ptr, name, o->via.str.size) == 0)) {
                    first = e;
                    break;
                }
            }
            rm = sx_map_get(map, name, &v);
            FUZZ_ASSERT(rm == 0);
            FUZZ_ASSERT(v.data >= data && v.data + v.len <= data + got);
            sx_unpack_init(&u, v);
            FUZZ_ASSERT(same(&u, &m->ptr[first].val) && sx_unpack_done(&u));
        }
    }
    msgpack_unpacked_destroy(&mu);

    /* A key from the input: found or not, never out of bounds. */
    if (size > 0) {
        char key[16];
        size_t kl = data[0] % sizeof(key);
        sx_payload v;
        int rm;
        if (kl > size - 1)
            kl = size - 1;
        memcpy(key, data + 1, kl);
        key[kl] = 0;
        rm = sx_map_get((sx_payload){ data, size }, key, &v);
        FUZZ_ASSERT(rm == 0 || rm == SX_ENOTFOUND || rm == SX_EPROTO);
        if (rm == 0)
            FUZZ_ASSERT(v.data >= data && v.data + v.len <= data + size);
        FUZZ_ASSERT(sx_map_get((sx_payload){ data, size }, NULL, &v) ==
                    SX_EINVAL);
    }
}

/* sx_unpack_pid at every value start of the input: never moves on
 * failure. */
static void pids(const uint8_t *data, size_t size)
{
    sx_unpack u;
    sx_unpack_init(&u, (sx_payload){ data, size });
    for (int k = 0; k < 64 && !sx_unpack_done(&u); k++) {
        const uint8_t *start = u.p;
        sx_pid pid;
        int rc = sx_unpack_pid(&u, &pid);
        if (rc == 0) {
            FUZZ_ASSERT(u.p > start);
            continue;
        }
        FUZZ_ASSERT(u.p == start);
        FUZZ_ASSERT(rc == SX_EPROTO || rc == SX_ELIMIT);
        if (u.err != 0)
            return;
        /* Step into the value: a container's header, or the whole value. */
        int t = sx_unpack_type(&u);
        if (t == SX_MP_ARRAY)
            rc = sx_unpack_array(&u, NULL);
        else if (t == SX_MP_MAP)
            rc = sx_unpack_map(&u, NULL);
        else
            rc = sx_unpack_skip(&u);
        if (rc != 0)
            return;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a of the input */
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;

    differential(data, size);
    shortcuts(data, size, h);
    pids(data, size);
    return 0;
}

/* process/mpformat.h — the pieces of the msgpack format that the writer
 * (process/pack.c) and the reader (process/unpack.c) share: big-endian
 * fields, the integer encodings that both sides take a short cut for, and
 * the values whose first byte gives their size. Internal (process/, and
 * the spawn commands' arguments, engine/commands/spawn_opts.c); never
 * installed.
 *
 * Static functions in the header, which the compiler inlines where they
 * are used, not calls into another file: every sx_pack_int (the payload of
 * most messages), sx_payload_int and sx_payload_get_int (most commands'
 * arguments) runs them, and a call would cost more than they do. Not
 * `static inline`: gcc inlines functions marked inline early, before
 * link-time optimisation, and the functions that use them then grow past
 * what the link-time inliner puts into their callers (head_read in
 * process/unpack.c stops being inlined into the typed reads): skynet runs
 * 4 % more instructions and relay 11 % more (bench/icount.sh). `unused`:
 * each file that includes the header uses only some of them.
 *
 * Threads: [any thread] (pure).
 */
#ifndef SX_PROCESS_MPFORMAT_H
#define SX_PROCESS_MPFORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- big-endian fields ---- */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define SX__MP_BE64(x) (x)
#define SX__MP_BE32(x) (x)
#define SX__MP_BE16(x) (x)
#else /* little-endian (x86-64, arm64): swap */
#define SX__MP_BE64(x) __builtin_bswap64(x)
#define SX__MP_BE32(x) __builtin_bswap32(x)
#define SX__MP_BE16(x) __builtin_bswap16(x)
#endif

/* Writes marker m, then the big-endian field of width w (1, 2, 4 or 8)
 * in one store of its width:
 * whoever copies the encoding next (sx_send copies it into the message at
 * once) loads it back with the same widths (engine/core/event.c, copy_small),
 * which the CPU forwards from its store buffer; a load spanning several
 * byte stores would stall until they reach the cache. Returns 1 + w. */
static __attribute__((unused)) size_t sx__mp_put(uint8_t *b, uint8_t m,
                                                 uint64_t f, size_t w)
{
    b[0] = m;
    if (w == 8) {
        uint64_t v = SX__MP_BE64(f);
        memcpy(b + 1, &v, 8);
    } else if (w == 4) {
        uint32_t v = SX__MP_BE32((uint32_t)f);
        memcpy(b + 1, &v, 4);
    } else if (w == 2) {
        uint16_t v = SX__MP_BE16((uint16_t)f);
        memcpy(b + 1, &v, 2);
    } else {
        b[1] = (uint8_t)f;
    }
    return 1 + w;
}

static __attribute__((unused)) uint16_t sx__mp_be16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static __attribute__((unused)) uint32_t sx__mp_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

static __attribute__((unused)) uint64_t sx__mp_be64(const uint8_t *p)
{
    return (uint64_t)sx__mp_be32(p) << 32 | sx__mp_be32(p + 4);
}

/* The big-endian field of w bytes (1, 2, 4 or 8) at p. */
static __attribute__((unused)) uint64_t sx__mp_field(const uint8_t *p, size_t w)
{
    switch (w) {
    case 1:
        return p[0];
    case 2:
        return sx__mp_be16(p);
    case 4:
        return sx__mp_be32(p);
    default:
        return sx__mp_be64(p);
    }
}

/* ---- one-look values ---- */

/* The bytes of the value at p when its first byte alone says how many
 * (an integer, nil, a bool, a float or a fixstr), or 0 (a container,
 * another string, bin, ext, or the reserved 0xc1: the general walk). The
 * caller still checks the span against the bytes present. The common
 * values of command arguments (names, integers) take one look instead of
 * head_read's (process/unpack.c; engine/commands/spawn_opts.c, the spawn
 * commands' arguments). */
static __attribute__((unused)) size_t sx__mp_scalar_span(uint8_t c)
{
    if (c <= 0x7f || c >= 0xe0)
        return 1; /* fixint */
    if ((c & 0xe0) == 0xa0)
        return 1 + (size_t)(c & 0x1f); /* fixstr */
    switch (c) {
    case 0xc0: /* nil */
    case 0xc2: /* false */
    case 0xc3: /* true */
        return 1;
    case 0xcc: /* uint 8 */
    case 0xd0: /* int 8 */
        return 2;
    case 0xcd:
    case 0xd1:
        return 3;
    case 0xca: /* float 32 */
    case 0xce:
    case 0xd2:
        return 5;
    case 0xcb: /* float 64 */
    case 0xcf:
    case 0xd3:
        return 9;
    default:
        return 0;
    }
}

/* ---- integers ---- */

/* msgpack's shortest encoding of v into b (SX_PAYLOAD_INT_MAX bytes),
 * byte for byte what msgpack-c's msgpack_pack_int64 writes (test_payload
 * compares the two): unsigned formats for v >= 0, signed ones below.
 * Returns its length. Hand-written because it is on every message of the
 * common kind (a number): the msgpack_packer route costs a callback per
 * value and ~120 instructions; this costs ~10. */
static __attribute__((unused)) size_t sx__mp_int_encode(uint8_t *b, int64_t v)
{
    if (v >= 0) {
        uint64_t u = (uint64_t)v;
        if (u < 128) {
            b[0] = (uint8_t)u;
            return 1;
        }
        if (u <= UINT8_MAX)
            return sx__mp_put(b, 0xcc, u, 1);
        if (u <= UINT16_MAX)
            return sx__mp_put(b, 0xcd, u, 2);
        if (u <= UINT32_MAX)
            return sx__mp_put(b, 0xce, u, 4);
        return sx__mp_put(b, 0xcf, u, 8);
    }
    if (v >= -32) {
        b[0] = (uint8_t)(int8_t)v;
        return 1;
    }
    if (v >= INT8_MIN)
        return sx__mp_put(b, 0xd0, (uint64_t)v, 1);
    if (v >= INT16_MIN)
        return sx__mp_put(b, 0xd1, (uint64_t)v, 2);
    if (v >= INT32_MIN)
        return sx__mp_put(b, 0xd2, (uint64_t)v, 4);
    return sx__mp_put(b, 0xd3, (uint64_t)v, 8);
}

/* The integer that is exactly the len bytes at p, in the formats a writer
 * produces; false for anything else (another type, trailing bytes, a
 * uint64 above INT64_MAX), which the general reader then classifies, and
 * *out is then not to be used. */
static __attribute__((unused)) bool sx__mp_int_decode(const uint8_t *p,
                                                      size_t len, int64_t *out)
{
    if (len == 0)
        return false;
    uint8_t c = p[0];
    if (c <= 0x7f || c >= 0xe0) {
        *out = (int8_t)c;
        if (c <= 0x7f)
            *out = c;
        return len == 1;
    }
    /* One case per format (a jump table): the field's width and
     * signedness are constants in each, so a field is a load and a byte
     * swap, no call. */
    switch (c) {
    case 0xcc:
        *out = p[len == 2 ? 1 : 0];
        return len == 2;
    case 0xcd:
        if (len != 3)
            return false;
        *out = sx__mp_be16(p + 1);
        return true;
    case 0xce:
        if (len != 5)
            return false;
        *out = sx__mp_be32(p + 1);
        return true;
    case 0xcf: {
        if (len != 9)
            return false;
        uint64_t f = sx__mp_be64(p + 1);
        *out = (int64_t)f;
        return f <= INT64_MAX;
    }
    case 0xd0:
        *out = (int8_t)p[len == 2 ? 1 : 0];
        return len == 2;
    case 0xd1:
        if (len != 3)
            return false;
        *out = (int16_t)sx__mp_be16(p + 1);
        return true;
    case 0xd2:
        if (len != 5)
            return false;
        *out = (int32_t)sx__mp_be32(p + 1);
        return true;
    case 0xd3:
        if (len != 9)
            return false;
        *out = (int64_t)sx__mp_be64(p + 1);
        return true;
    default:
        return false;
    }
}

#endif

/* process/unpack.c — msgpack payload helpers: the sx_pack writer and the
 * sx_unpack reader.
 *
 * The writer drives msgpack-c's packer (it picks the smallest encoding for
 * every integer and length) through a write callback that appends to the
 * sx_pack buffer. The reader is hand-written: it decodes command arguments on
 * every yield, so it is a zero-allocation cursor that checks every length
 * against the bytes present before using it.
 *
 * Threads: no shared state. An sx_pack or sx_unpack belongs to one thread at
 * a time; distinct ones may be used concurrently.
 */
#include "process/stepx/process.h"
#include "process/utf8.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ==== writer ============================================================
 *
 * Every sx_pack_* call writes all of its bytes (a whole value, or for
 * sx_pack_array and sx_pack_map the container header) or none: on failure
 * len is rolled back to where the call started and the error is kept in
 * pk->err. Every error is sticky, including SX_EINVAL for bad arguments, so a
 * caller may check once at the end. A NULL pk returns SX_EINVAL and is not
 * otherwise touched.
 */

#define PACK_MIN_CAP 64

/* Makes room for extra more bytes in a heap writer, doubling capacity. */
static int pack_grow(sx_pack *pk, size_t extra)
{
    size_t need, cap;
    uint8_t *data;

    if (pk->fixed)
        return SX_ELIMIT;
    if (extra > SIZE_MAX - pk->len)
        return SX_ENOMEM;
    need = pk->len + extra;
    cap = pk->cap < PACK_MIN_CAP ? PACK_MIN_CAP : pk->cap;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    data = realloc(pk->data, cap);
    if (data == NULL)
        return SX_ENOMEM;
    pk->data = data;
    pk->cap = cap;
    return 0;
}

/* Where p lies in pk's own bytes (an offset below len), or SIZE_MAX when it
 * lies elsewhere. A body may come from pk's own bytes (sx_pack_raw of an
 * earlier value of pk, a string read back from pk): taken before a write
 * that may move the storage, the offset finds it again afterwards. */
static size_t pack_offset(const sx_pack *pk, const void *p)
{
    uintptr_t b = (uintptr_t)p, lo = (uintptr_t)pk->data;
    if (pk->data == NULL || b < lo || b - lo >= pk->len)
        return SIZE_MAX;
    return (size_t)(b - lo);
}

/* msgpack-c's write callback. Its return value is what the msgpack_pack_*
 * call returns, so it hands back our SX_E* code directly. */
static int pack_write(void *data, const char *buf, size_t len)
{
    sx_pack *pk = data;
    int rc;

    if (len == 0)
        return 0;
    if (len > pk->cap - pk->len) {
        size_t off = pack_offset(pk, buf);
        if ((rc = pack_grow(pk, len)) != 0)
            return rc;
        if (off != SIZE_MAX)
            buf = (const char *)pk->data + off;
    }
    /* memmove: such a body may also run into the bytes being written. */
    memmove(pk->data + pk->len, buf, len);
    pk->len += len;
    return 0;
}

/* Opens one value: returns the sticky error, or 0 with mp ready and *mark set
 * to the length to roll back to. */
static int pack_begin(sx_pack *pk, msgpack_packer *mp, size_t *mark)
{
    if (pk == NULL)
        return SX_EINVAL;
    if (pk->err != 0)
        return pk->err;
    msgpack_packer_init(mp, pk, pack_write);
    *mark = pk->len;
    return 0;
}

/* Closes one value: on failure rolls back and records the sticky error. */
static int pack_end(sx_pack *pk, size_t mark, int rc)
{
    if (rc == 0)
        return 0;
    pk->len = mark;
    pk->err = rc;
    return rc;
}

void sx_pack_init(sx_pack *pk)
{
    if (pk == NULL)
        return;
    pk->data = NULL;
    pk->len = 0;
    pk->cap = 0;
    pk->err = 0;
    pk->fixed = 0;
}

void sx_pack_init_fixed(sx_pack *pk, void *buf, size_t cap)
{
    if (pk == NULL)
        return;
    pk->data = buf;
    pk->len = 0;
    pk->cap = buf != NULL ? cap : 0;
    pk->err = 0;
    pk->fixed = 1;
}

/* After fini, pk is an empty heap writer, as after sx_pack_init. */
void sx_pack_fini(sx_pack *pk)
{
    if (pk == NULL)
        return;
    if (!pk->fixed)
        free(pk->data);
    sx_pack_init(pk);
}

void sx_pack_reset(sx_pack *pk)
{
    if (pk == NULL)
        return;
    pk->len = 0;
    pk->err = 0;
}

int sx_pack_nil(sx_pack *pk)
{
    msgpack_packer mp;
    size_t mark;
    int rc = pack_begin(pk, &mp, &mark);
    if (rc != 0)
        return rc;
    return pack_end(pk, mark, msgpack_pack_nil(&mp));
}

int sx_pack_bool(sx_pack *pk, bool v)
{
    msgpack_packer mp;
    size_t mark;
    int rc = pack_begin(pk, &mp, &mark);
    if (rc != 0)
        return rc;
    rc = v ? msgpack_pack_true(&mp) : msgpack_pack_false(&mp);
    return pack_end(pk, mark, rc);
}

/* Writes marker m, then the big-endian field of width w (1, 2, 4 or 8)
 * in one store of its width:
 * whoever copies the encoding next (sx_send copies it into the message at
 * once) loads it back with the same widths (engine/core/event.c, copy_small),
 * which the CPU forwards from its store buffer; a load spanning several
 * byte stores would stall until they reach the cache. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define BE64(x) (x)
#define BE32(x) (x)
#define BE16(x) (x)
#else /* little-endian (x86-64, arm64): swap */
#define BE64(x) __builtin_bswap64(x)
#define BE32(x) __builtin_bswap32(x)
#define BE16(x) __builtin_bswap16(x)
#endif

static size_t int_put(uint8_t *b, uint8_t m, uint64_t f, size_t w)
{
    b[0] = m;
    if (w == 8) {
        uint64_t v = BE64(f);
        memcpy(b + 1, &v, 8);
    } else if (w == 4) {
        uint32_t v = BE32((uint32_t)f);
        memcpy(b + 1, &v, 4);
    } else if (w == 2) {
        uint16_t v = BE16((uint16_t)f);
        memcpy(b + 1, &v, 2);
    } else {
        b[1] = (uint8_t)f;
    }
    return 1 + w;
}

/* msgpack's shortest encoding of v, byte for byte what msgpack-c's
 * msgpack_pack_int64 writes (test_payload compares the two): unsigned
 * formats for v >= 0, signed ones below. Hand-written because it is on
 * every message of the common kind (a number): the msgpack_packer route
 * costs a callback per value and ~120 instructions; this costs ~10. */
static size_t int_encode(uint8_t *b, int64_t v)
{
    if (v >= 0) {
        uint64_t u = (uint64_t)v;
        if (u < 128) {
            b[0] = (uint8_t)u;
            return 1;
        }
        if (u <= UINT8_MAX)
            return int_put(b, 0xcc, u, 1);
        if (u <= UINT16_MAX)
            return int_put(b, 0xcd, u, 2);
        if (u <= UINT32_MAX)
            return int_put(b, 0xce, u, 4);
        return int_put(b, 0xcf, u, 8);
    }
    if (v >= -32) {
        b[0] = (uint8_t)(int8_t)v;
        return 1;
    }
    if (v >= INT8_MIN)
        return int_put(b, 0xd0, (uint64_t)v, 1);
    if (v >= INT16_MIN)
        return int_put(b, 0xd1, (uint64_t)v, 2);
    if (v >= INT32_MIN)
        return int_put(b, 0xd2, (uint64_t)v, 4);
    return int_put(b, 0xd3, (uint64_t)v, 8);
}

int sx_pack_int(sx_pack *pk, int64_t v)
{
    if (pk == NULL)
        return SX_EINVAL;
    if (pk->err != 0)
        return pk->err;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    size_t n = int_encode(b, v);
    /* pack_write changes nothing when it fails: the mark is len. */
    return pack_end(pk, pk->len, pack_write(pk, (const char *)b, n));
}

int sx_pack_uint(sx_pack *pk, uint64_t v)
{
    msgpack_packer mp;
    size_t mark;
    int rc = pack_begin(pk, &mp, &mark);
    if (rc != 0)
        return rc;
    return pack_end(pk, mark, msgpack_pack_uint64(&mp, v));
}

/* Always float64: narrowing to float32 when exact would save four bytes but
 * costs a check on every call, and readers accept both. */
int sx_pack_double(sx_pack *pk, double v)
{
    msgpack_packer mp;
    size_t mark;
    int rc = pack_begin(pk, &mp, &mark);
    if (rc != 0)
        return rc;
    return pack_end(pk, mark, msgpack_pack_double(&mp, v));
}

int sx_pack_str(sx_pack *pk, const char *s)
{
    if (s == NULL)
        return sx_pack_nil(pk);
    return sx_pack_strn(pk, s, strlen(s));
}

/* s may be NULL only when n is 0 (an empty string). A length beyond the
 * format's 32-bit limit is SX_ELIMIT. */
int sx_pack_strn(sx_pack *pk, const char *s, size_t n)
{
    msgpack_packer mp;
    size_t mark, off;
    int rc = pack_begin(pk, &mp, &mark);
    if (rc != 0)
        return rc;
    if (s == NULL && n != 0)
        return pack_end(pk, mark, SX_EINVAL);
    if ((uint64_t)n > UINT32_MAX)
        return pack_end(pk, mark, SX_ELIMIT);
    /* s may lie in pk's own bytes, which the header's write may move. */
    off = pack_offset(pk, s);
    rc = msgpack_pack_str(&mp, n);
    if (rc == 0 && off != SIZE_MAX)
        s = (const char *)pk->data + off;
    if (rc == 0)
        rc = msgpack_pack_str_body(&mp, s, n);
    return pack_end(pk, mark, rc);
}

int sx_pack_bin(sx_pack *pk, const void *p, size_t n)
{
    msgpack_packer mp;
    size_t mark, off;
    int rc = pack_begin(pk, &mp, &mark);
    if (rc != 0)
        return rc;
    if (p == NULL && n != 0)
        return pack_end(pk, mark, SX_EINVAL);
    if ((uint64_t)n > UINT32_MAX)
        return pack_end(pk, mark, SX_ELIMIT);
    /* As in sx_pack_strn: p may lie in pk's own bytes. */
    off = pack_offset(pk, p);
    rc = msgpack_pack_bin(&mp, n);
    if (rc == 0 && off != SIZE_MAX)
        p = pk->data + off;
    if (rc == 0)
        rc = msgpack_pack_bin_body(&mp, p, n);
    return pack_end(pk, mark, rc);
}

/* Only the header: the caller writes the n elements (or pairs) after it. */
int sx_pack_array(sx_pack *pk, uint32_t n)
{
    msgpack_packer mp;
    size_t mark;
    int rc = pack_begin(pk, &mp, &mark);
    if (rc != 0)
        return rc;
    return pack_end(pk, mark, msgpack_pack_array(&mp, n));
}

int sx_pack_map(sx_pack *pk, uint32_t n)
{
    msgpack_packer mp;
    size_t mark;
    int rc = pack_begin(pk, &mp, &mark);
    if (rc != 0)
        return rc;
    return pack_end(pk, mark, msgpack_pack_map(&mp, n));
}

int sx_pack_pid(sx_pack *pk, sx_pid pid)
{
    msgpack_packer mp;
    size_t mark;
    int rc = pack_begin(pk, &mp, &mark);
    if (rc != 0)
        return rc;
    rc = msgpack_pack_array(&mp, 3);
    if (rc == 0)
        rc = msgpack_pack_uint32(&mp, pid.node);
    if (rc == 0)
        rc = msgpack_pack_uint32(&mp, pid.host);
    if (rc == 0)
        rc = msgpack_pack_uint64(&mp, pid.id);
    return pack_end(pk, mark, rc);
}

/* v must be exactly one well-formed value (checked with the reader, so its
 * nesting is bounded by SX_UNPACK_MAX_DEPTH): appending anything else would
 * make every later reader of the payload fail far from the cause. Errors:
 * SX_EINVAL (v.data NULL with a non-zero length), SX_EPROTO (not one
 * value), SX_ELIMIT (too deep, or a full fixed buffer), SX_ENOMEM; all
 * sticky. */
int sx_pack_raw(sx_pack *pk, sx_payload v)
{
    msgpack_packer mp;
    size_t mark;
    sx_unpack u;
    int rc = pack_begin(pk, &mp, &mark);
    if (rc != 0)
        return rc;
    if (v.len == 0)
        return pack_end(pk, mark, msgpack_pack_nil(&mp));
    sx_unpack_init(&u, v);
    rc = sx_unpack_skip(&u);
    if (rc == 0 && !sx_unpack_done(&u))
        rc = SX_EPROTO;
    if (rc == 0)
        rc = mp.callback(mp.data, (const char *)v.data, v.len);
    return pack_end(pk, mark, rc);
}

sx_payload sx_pack_payload(const sx_pack *pk)
{
    sx_payload pl = { NULL, 0 };
    if (pk != NULL) {
        pl.data = pk->data;
        pl.len = pk->len;
    }
    return pl;
}

sx_payload sx_payload_int(uint8_t buf[SX_PAYLOAD_INT_MAX], int64_t v)
{
    sx_payload pl = { buf, int_encode(buf, v) };
    return pl;
}

/* ==== reader ============================================================
 *
 * Error contract (the header's sx_unpack comment says the same):
 *  - Malformed or truncated data (a reserved 0xc1 byte, a header or body that
 *    runs past the end, a container claiming more elements than bytes remain,
 *    reading at the end) returns SX_EPROTO and is sticky: u->err is set,
 *    every later call returns it, and the cursor stays at the start of the
 *    bad value.
 *  - A type mismatch (the next value is well formed but not of the requested
 *    type) returns SX_EPROTO but is NOT sticky: u->err stays 0 and the cursor
 *    does not move, so the caller may try another type.
 *  - An integer that does not fit the requested type (a uint64 above
 *    INT64_MAX for sx_unpack_int, a negative for sx_unpack_uint, a PID part
 *    above UINT32_MAX) returns SX_ELIMIT, likewise not sticky and not moving.
 *  - Nesting deeper than SX_UNPACK_MAX_DEPTH in skip and raw returns SX_ELIMIT
 *    and is sticky (the data cannot be walked by this reader).
 *  - NULL u returns SX_EINVAL, and a payload with NULL data but a non-zero
 *    length makes a cursor whose sticky error is SX_EINVAL. NULL output
 *    pointers are allowed and mean "discard".
 * An empty payload reads as a single nil (the header's "len 0 stands for
 * nil"): sx_unpack_init points the cursor at a static nil byte.
 */

static const uint8_t unpack_nil_byte = 0xc0;

_Static_assert(sizeof(float) == 4 && sizeof(double) == 8,
               "msgpack floats are IEEE 754 binary32 and binary64");

/* The decoded header of the next value. Only the fields of its type are set.
 */
typedef struct {
    sx_mp_type type;
    size_t hlen;  /* header bytes: marker, length, ext type, scalar value */
    uint32_t n;   /* STR, BIN, EXT: body bytes; ARRAY, MAP: element count */
    bool neg;     /* INT: negative, the value is in i; else it is in u */
    uint64_t u;   /* INT */
    int64_t i;    /* INT */
    double d;     /* FLOAT */
    bool boolean; /* BOOL */
} mp_head;

static uint16_t be16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

static uint64_t be64(const uint8_t *p)
{
    return (uint64_t)be32(p) << 32 | be32(p + 4);
}

/* The big-endian field of w bytes (1, 2, 4 or 8) at p. */
static uint64_t be_field(const uint8_t *p, size_t w)
{
    switch (w) {
    case 1:
        return p[0];
    case 2:
        return be16(p);
    case 4:
        return be32(p);
    default:
        return be64(p);
    }
}

/* Two's complement reinterpretation without implementation-defined
 * conversion: v is the w-byte field of a signed integer. */
static int64_t sign_extend(uint64_t v, size_t w)
{
    uint64_t sign = (uint64_t)1 << (8 * w - 1);
    if ((v & sign) == 0)
        return (int64_t)v;
    /* v - 2^(8w), computed without overflow. */
    return -(int64_t)((sign - (v & (sign - 1))) - 1) - 1;
}

static void head_uint(mp_head *h, uint64_t v)
{
    h->type = SX_MP_INT;
    h->neg = false;
    h->u = v;
}

static void head_int(mp_head *h, int64_t v)
{
    h->type = SX_MP_INT;
    h->neg = v < 0;
    if (h->neg)
        h->i = v;
    else
        h->u = (uint64_t)v;
}

/* Sets the type and header layout of the value whose marker is c. fw is the
 * width of the field after the marker (a length, a count or a scalar value);
 * ext headers carry one more byte, the ext type. Returns false for the
 * reserved marker 0xc1. */
static bool head_layout(uint8_t c, mp_head *h, size_t *fw)
{
    *fw = 0;
    h->n = 0;
    if (c <= 0x7f || c >= 0xe0) {
        h->type = SX_MP_INT;
    } else if (c <= 0x8f) {
        h->type = SX_MP_MAP;
        h->n = c & 0x0f;
    } else if (c <= 0x9f) {
        h->type = SX_MP_ARRAY;
        h->n = c & 0x0f;
    } else if (c <= 0xbf) {
        h->type = SX_MP_STR;
        h->n = c & 0x1f;
    } else if (c == 0xc0) {
        h->type = SX_MP_NIL;
    } else if (c == 0xc1) {
        return false;
    } else if (c <= 0xc3) {
        h->type = SX_MP_BOOL;
    } else if (c <= 0xc6) {
        h->type = SX_MP_BIN;
        *fw = (size_t)1 << (c - 0xc4);
    } else if (c <= 0xc9) {
        h->type = SX_MP_EXT;
        *fw = (size_t)1 << (c - 0xc7);
    } else if (c <= 0xcb) {
        h->type = SX_MP_FLOAT;
        *fw = c == 0xca ? 4 : 8;
    } else if (c <= 0xd3) {
        h->type = SX_MP_INT;
        *fw = (size_t)1 << ((c - 0xcc) & 3);
    } else if (c <= 0xd8) {
        h->type = SX_MP_EXT; /* fixext: the body size is in the marker */
        h->n = (uint32_t)1 << (c - 0xd4);
    } else if (c <= 0xdb) {
        h->type = SX_MP_STR;
        *fw = (size_t)1 << (c - 0xd9);
    } else if (c <= 0xdd) {
        h->type = SX_MP_ARRAY;
        *fw = c == 0xdc ? 2 : 4;
    } else {
        h->type = SX_MP_MAP;
        *fw = c == 0xde ? 2 : 4;
    }
    h->hlen = 1 + *fw + (h->type == SX_MP_EXT ? 1 : 0);
    return true;
}

/* Decodes the header of the value at [p, end) into h. Returns 0, or
 * SX_EPROTO when no value starts there: p is at end, the marker is reserved,
 * the header is cut short, a body runs past end, or a container claims more
 * elements than there are bytes left (every element takes at least one byte,
 * so such a claim can never be met; rejecting it here keeps every walk
 * linear in the bytes present). */
static int head_read(const uint8_t *p, const uint8_t *end, mp_head *h)
{
    size_t avail = (size_t)(end - p), fw, rest;
    uint64_t f, need;
    uint8_t c;

    if (avail == 0)
        return SX_EPROTO;
    c = p[0];
    if (!head_layout(c, h, &fw) || avail < h->hlen)
        return SX_EPROTO;
    f = fw != 0 ? be_field(p + 1, fw) : 0;
    switch (h->type) {
    case SX_MP_BOOL:
        h->boolean = c == 0xc3;
        break;
    case SX_MP_INT:
        if (c <= 0x7f)
            head_uint(h, c);
        else if (c >= 0xe0)
            head_int(h, (int64_t)c - 256);
        else if (c <= 0xcf)
            head_uint(h, f);
        else
            head_int(h, sign_extend(f, fw));
        break;
    case SX_MP_FLOAT:
        if (fw == 4) {
            uint32_t bits = (uint32_t)f;
            float v;
            memcpy(&v, &bits, sizeof(v));
            h->d = v;
        } else {
            memcpy(&h->d, &f, sizeof(h->d));
        }
        break;
    case SX_MP_STR:
    case SX_MP_BIN:
    case SX_MP_EXT:
    case SX_MP_ARRAY:
    case SX_MP_MAP:
        if (fw != 0)
            h->n = (uint32_t)f;
        break;
    default:
        break;
    }
    rest = avail - h->hlen;
    switch (h->type) {
    case SX_MP_STR:
    case SX_MP_BIN:
    case SX_MP_EXT:
        if (h->n > rest)
            return SX_EPROTO;
        break;
    case SX_MP_ARRAY:
    case SX_MP_MAP:
        need = h->type == SX_MP_MAP ? 2 * (uint64_t)h->n : h->n;
        if (need > rest)
            return SX_EPROTO;
        break;
    default:
        break;
    }
    return 0;
}

/* The bytes the value's header and (for STR, BIN, EXT) body take; the
 * elements of a container are not included. */
static size_t head_span(const mp_head *h)
{
    switch (h->type) {
    case SX_MP_STR:
    case SX_MP_BIN:
    case SX_MP_EXT:
        return h->hlen + h->n;
    default:
        return h->hlen;
    }
}

/* Finds where the whole value at p ends. Iterative: left[d] counts the
 * values still to read inside the d-th enclosing container (left[0] is the
 * value itself), so d is the nesting depth of the next value. Every step
 * consumes at least one byte and head_read bounds each count by the bytes
 * left, so the walk is linear in the bytes present. */
static int value_end(const uint8_t *p, const uint8_t *end, const uint8_t **out)
{
    uint64_t left[SX_UNPACK_MAX_DEPTH + 1];
    size_t d = 0;
    mp_head h;
    int rc;

    left[0] = 1;
    for (;;) {
        while (left[d] == 0) {
            if (d == 0) {
                *out = p;
                return 0;
            }
            d--;
        }
        if ((rc = head_read(p, end, &h)) != 0)
            return rc;
        left[d]--;
        p += head_span(&h);
        if (h.type == SX_MP_ARRAY || h.type == SX_MP_MAP) {
            /* This container is the (d + 1)-th level of nesting. */
            if (d == SX_UNPACK_MAX_DEPTH)
                return SX_ELIMIT;
            if (h.n != 0)
                left[++d] = h.type == SX_MP_MAP ? 2 * (uint64_t)h.n : h.n;
        }
    }
}

void sx_unpack_init(sx_unpack *u, sx_payload pl)
{
    if (u == NULL)
        return;
    u->err = 0;
    if (pl.len == 0) {
        u->p = &unpack_nil_byte;
        u->end = u->p + 1;
    } else if (pl.data == NULL) {
        u->p = u->end = &unpack_nil_byte;
        u->err = SX_EINVAL;
    } else {
        u->p = pl.data;
        u->end = pl.data + pl.len;
    }
}

/* Reads the header of the next value for a typed read. Returns the sticky
 * error, or 0; bad data becomes the sticky SX_EPROTO. */
static int unpack_head(sx_unpack *u, mp_head *h)
{
    int rc;

    if (u == NULL)
        return SX_EINVAL;
    if (u->err != 0)
        return u->err;
    if ((rc = head_read(u->p, u->end, h)) != 0)
        u->err = rc;
    return rc;
}

int sx_unpack_type(const sx_unpack *u)
{
    mp_head h;
    int rc;

    if (u == NULL)
        return SX_EINVAL;
    if (u->err != 0)
        return u->err;
    if ((rc = head_read(u->p, u->end, &h)) != 0)
        return rc;
    return (int)h.type;
}

bool sx_unpack_done(const sx_unpack *u)
{
    return u == NULL || u->p >= u->end;
}

int sx_unpack_nil(sx_unpack *u)
{
    mp_head h;
    int rc = unpack_head(u, &h);
    if (rc != 0)
        return rc;
    if (h.type != SX_MP_NIL)
        return SX_EPROTO;
    u->p += h.hlen;
    return 0;
}

int sx_unpack_bool(sx_unpack *u, bool *out)
{
    mp_head h;
    int rc = unpack_head(u, &h);
    if (rc != 0)
        return rc;
    if (h.type != SX_MP_BOOL)
        return SX_EPROTO;
    if (out != NULL)
        *out = h.boolean;
    u->p += h.hlen;
    return 0;
}

int sx_unpack_int(sx_unpack *u, int64_t *out)
{
    mp_head h;
    int rc = unpack_head(u, &h);
    if (rc != 0)
        return rc;
    if (h.type != SX_MP_INT)
        return SX_EPROTO;
    if (!h.neg && h.u > INT64_MAX)
        return SX_ELIMIT;
    if (out != NULL)
        *out = h.neg ? h.i : (int64_t)h.u;
    u->p += h.hlen;
    return 0;
}

int sx_unpack_uint(sx_unpack *u, uint64_t *out)
{
    mp_head h;
    int rc = unpack_head(u, &h);
    if (rc != 0)
        return rc;
    if (h.type != SX_MP_INT)
        return SX_EPROTO;
    if (h.neg)
        return SX_ELIMIT;
    if (out != NULL)
        *out = h.u;
    u->p += h.hlen;
    return 0;
}

/* Integers convert to the nearest double (above 2^53 that may round). */
int sx_unpack_double(sx_unpack *u, double *out)
{
    /* Zeroed: gcc -O3 cannot see that unpack_head sets i whenever neg. */
    mp_head h = { 0 };
    double v;
    int rc = unpack_head(u, &h);
    if (rc != 0)
        return rc;
    if (h.type == SX_MP_FLOAT)
        v = h.d;
    else if (h.type == SX_MP_INT)
        v = h.neg ? (double)h.i : (double)h.u;
    else
        return SX_EPROTO;
    if (out != NULL)
        *out = v;
    u->p += h.hlen;
    return 0;
}

/* Shared by str and bin: the body of a value of type t. */
static int unpack_body(sx_unpack *u, sx_mp_type t, const uint8_t **p,
                       size_t *len)
{
    mp_head h;
    int rc = unpack_head(u, &h);
    if (rc != 0)
        return rc;
    if (h.type != t)
        return SX_EPROTO;
    *p = u->p + h.hlen;
    *len = h.n;
    u->p += head_span(&h);
    return 0;
}

int sx_unpack_str(sx_unpack *u, const char **s, size_t *len)
{
    const uint8_t *p;
    size_t n;
    int rc = unpack_body(u, SX_MP_STR, &p, &n);
    if (rc != 0)
        return rc;
    if (s != NULL)
        *s = (const char *)p;
    if (len != NULL)
        *len = n;
    return 0;
}

int sx_unpack_bin(sx_unpack *u, const void **p, size_t *len)
{
    const uint8_t *b;
    size_t n;
    int rc = unpack_body(u, SX_MP_BIN, &b, &n);
    if (rc != 0)
        return rc;
    if (p != NULL)
        *p = b;
    if (len != NULL)
        *len = n;
    return 0;
}

/* Shared by array and map: the header of a container of type t. */
static int unpack_container(sx_unpack *u, sx_mp_type t, uint32_t *n)
{
    mp_head h;
    int rc = unpack_head(u, &h);
    if (rc != 0)
        return rc;
    if (h.type != t)
        return SX_EPROTO;
    if (n != NULL)
        *n = h.n;
    u->p += h.hlen;
    return 0;
}

int sx_unpack_array(sx_unpack *u, uint32_t *n)
{
    return unpack_container(u, SX_MP_ARRAY, n);
}

int sx_unpack_map(sx_unpack *u, uint32_t *n)
{
    return unpack_container(u, SX_MP_MAP, n);
}

/* The text form: a string of fewer than SX_PID_TEXT_MAX bytes holding what
 * sx_pid_parse accepts. A longer one, which only leading zeros can make, is
 * refused (the relay's PID fields have the same bound). An embedded NUL is
 * rejected, or "{1@2|3}\0junk" would parse. */
static int unpack_pid_text(const uint8_t *s, size_t n, sx_pid *out)
{
    char text[SX_PID_TEXT_MAX];

    if (n >= sizeof(text) || memchr(s, '\0', n) != NULL)
        return SX_EPROTO;
    memcpy(text, s, n);
    text[n] = '\0';
    return sx_pid_parse(text, out) == 0 ? 0 : SX_EPROTO;
}

/* A PID that is well formed msgpack but not a PID ([1, 2], [1, "x", 3], a
 * string that does not parse) is a mismatch: SX_EPROTO, not sticky; a part
 * out of range (node or host above UINT32_MAX, a negative) is SX_ELIMIT,
 * not sticky. Malformed elements are sticky SX_EPROTO. The cursor moves only
 * on success. */
int sx_unpack_pid(sx_unpack *u, sx_pid *out)
{
    sx_unpack c;
    uint64_t part[3];
    sx_pid pid;
    mp_head h;
    int rc = unpack_head(u, &h);
    if (rc != 0)
        return rc;
    if (h.type == SX_MP_STR) {
        if ((rc = unpack_pid_text(u->p + h.hlen, h.n, &pid)) != 0)
            return rc;
        c.p = u->p + head_span(&h);
    } else {
        if (h.type != SX_MP_ARRAY || h.n != 3)
            return SX_EPROTO;
        c = *u;
        c.p += h.hlen;
        for (size_t i = 0; i < 3; i++) {
            if ((rc = sx_unpack_uint(&c, &part[i])) != 0) {
                if (c.err != 0)
                    u->err = c.err;
                return rc;
            }
        }
        if (part[0] > UINT32_MAX || part[1] > UINT32_MAX)
            return SX_ELIMIT;
        pid.node = (uint32_t)part[0];
        pid.host = (uint32_t)part[1];
        pid.id = part[2];
    }
    u->p = c.p;
    if (out != NULL)
        *out = pid;
    return 0;
}

int sx_unpack_skip(sx_unpack *u)
{
    return sx_unpack_raw(u, NULL);
}

int sx_unpack_raw(sx_unpack *u, sx_payload *out)
{
    const uint8_t *e;
    int rc;

    if (u == NULL)
        return SX_EINVAL;
    if (u->err != 0)
        return u->err;
    if ((rc = value_end(u->p, u->end, &e)) != 0) {
        u->err = rc;
        return rc;
    }
    if (out != NULL) {
        out->data = u->p;
        out->len = (size_t)(e - u->p);
    }
    u->p = e;
    return 0;
}

/* The integer that is exactly the len bytes at p, in the formats a writer
 * produces; false for anything else (another type, trailing bytes, a
 * uint64 above INT64_MAX), which the general reader then classifies. */
static bool int_decode(const uint8_t *p, size_t len, int64_t *out)
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
    if (c < 0xcc || c > 0xd3)
        return false;
    size_t w = (size_t)1 << ((c - 0xcc) & 3);
    if (len != 1 + w)
        return false;
    uint64_t f = be_field(p + 1, w); /* a load and a byte swap */
    if (c <= 0xcf) {
        if (f > INT64_MAX)
            return false;
        *out = (int64_t)f;
    } else {
        unsigned sh = (unsigned)(64 - 8 * w);
        *out = (int64_t)(f << sh) >> sh; /* sign-extend the field */
    }
    return true;
}

int sx_payload_get_int(sx_payload pl, int64_t *out)
{
    int64_t fast;
    if (pl.data != NULL && int_decode(pl.data, pl.len, &fast)) {
        if (out != NULL)
            *out = fast;
        return 0;
    }
    sx_unpack u;
    int64_t v;
    int rc;

    sx_unpack_init(&u, pl);
    if ((rc = sx_unpack_int(&u, &v)) != 0) {
        /* Too big for int64 (SX_ELIMIT) only when it is the one value:
         * with bytes after it, the payload is not one value at all. */
        if (rc == SX_ELIMIT && (sx_unpack_skip(&u) != 0 || !sx_unpack_done(&u)))
            return SX_EPROTO;
        return rc;
    }
    if (!sx_unpack_done(&u))
        return SX_EPROTO;
    if (out != NULL)
        *out = v;
    return 0;
}

/* The string is copied verbatim (an embedded NUL included). On any error buf
 * holds "" when cap > 0. Errors: SX_EINVAL (buf NULL, or pl.data NULL with a
 * non-zero length), SX_EPROTO (not exactly one string), SX_ELIMIT (it and
 * its NUL do not fit cap). */
int sx_payload_get_str(sx_payload pl, char *buf, size_t cap)
{
    sx_unpack u;
    const char *s;
    size_t n;
    int rc;

    if (buf == NULL)
        return SX_EINVAL;
    if (cap > 0)
        buf[0] = '\0';
    sx_unpack_init(&u, pl);
    if ((rc = sx_unpack_str(&u, &s, &n)) != 0)
        return rc;
    if (!sx_unpack_done(&u))
        return SX_EPROTO;
    if (n >= cap)
        return SX_ELIMIT;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return 0;
}

/* ---- UTF-8 (process/utf8.h) ---- */

size_t sx__utf8_seq(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t k;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        k = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        k = 4, cp = c & 0x07;
    else
        return 0;
    if (k > n)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    /* Overlong forms, surrogates, past U+10FFFF. */
    if ((k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return k;
}

/* p[0, n) from a sequence boundary on, one sequence at a time. */
static bool utf8_walk(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = sx__utf8_seq(p + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

bool sx__utf8_valid(const unsigned char *p, size_t n)
{
    /* ASCII first, with no loop per byte: a short string as two words
     * that overlap (sx__ascii_short), a long one a word at a time and its
     * tail as the last word (overlapping what was checked). The first
     * word that is not ASCII sends the rest to utf8_walk, from that word
     * on (a sequence boundary: everything before it is ASCII). */
    uint64_t w;
    if (n < 8)
        return sx__ascii_short(p, n) || utf8_walk(p, n);
    size_t i = 0;
    for (; n - i >= 8; i += 8) {
        memcpy(&w, p + i, 8);
        if ((w & 0x8080808080808080ull) != 0)
            return utf8_walk(p + i, n - i);
    }
    if (i < n) {
        memcpy(&w, p + n - 8, 8);
        if ((w & 0x8080808080808080ull) != 0)
            return utf8_walk(p + i, n - i);
    }
    return true;
}

size_t sx__utf8_replace(const unsigned char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = sx__utf8_seq(s + i, n - i);
        const void *piece = k != 0 ? (const void *)(s + i) : "\xef\xbf\xbd";
        size_t len = k != 0 ? k : 3;
        if (out != NULL) {
            if (len > cap - o)
                break;
            memcpy(out + o, piece, len);
        }
        o += len;
        i += k != 0 ? k : 1;
    }
    return o;
}

/* noinline, cold: sx__topic_cstr_ok calls it, inline in the send hooks,
 * only for a topic that is not ASCII; the hooks stay small. */
__attribute__((noinline, cold)) bool sx__topic_ok(const char *t, size_t n)
{
    const unsigned char *p = (const unsigned char *)t;
    if (n > SX__TOPIC_MAX)
        return false;
    for (size_t i = 0; i < n;) {
        if (p[i] == 0)
            return false;
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = sx__utf8_seq(p + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

size_t sx__topic_len(const char *t)
{
    const unsigned char *p = (const unsigned char *)t;
    for (size_t i = 0;; i++) {
        if (p[i] == 0)
            return i;
        if (i == SX__TOPIC_MAX)
            return SIZE_MAX; /* a 256th byte: too long */
        if (p[i] >= 0x80) {
            size_t n = i + strnlen(t + i, SX__TOPIC_MAX + 1 - i);
            return sx__topic_ok(t, n) ? n : SIZE_MAX;
        }
    }
}

/* process/unpack.c — the sx_unpack reader: a cursor over msgpack bytes,
 * and the one-value readers sx_payload_get_int and sx_payload_get_str.
 *
 * Hand-written: it decodes command arguments on every yield, so it is a
 * zero-allocation cursor that checks every length against the bytes
 * present before using it. The typed reads, the skip and the raw copy
 * all decode a value's header with head_read; sx_payload_get_int first
 * tries the integer formats of process/mpformat.h, which it shares with
 * the writer (process/pack.c).
 *
 * Threads: no shared state. An sx_unpack belongs to one thread at a time;
 * distinct ones may be used concurrently.
 */
#include "process/mpformat.h"
#include "process/stepx/process.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Error contract (the header's sx_unpack comment says the same):
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
 * linear in the bytes present). noinline: link-time optimisation would
 * otherwise copy it into each typed read (sx_unpack_uint, _int, _bool,
 * value_end, ...), and that growth spends the whole program's inlining
 * budget, which then leaves sx_send a call in the steps that send
 * (bench/FINDINGS.md, "Instruction counts and LTO"). */
static __attribute__((noinline)) int head_read(const uint8_t *p,
                                               const uint8_t *end, mp_head *h)
{
    size_t avail = (size_t)(end - p), fw, rest;
    uint64_t f, need;
    uint8_t c;

    if (avail == 0)
        return SX_EPROTO;
    c = p[0];
    if (!head_layout(c, h, &fw) || avail < h->hlen)
        return SX_EPROTO;
    f = fw != 0 ? sx__mp_field(p + 1, fw) : 0;
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

/* sx_unpack_str past its fast path: apart, so that the fast path (a
 * fixstr: keys, names) needs no frame of its own. */
static __attribute__((noinline)) int
unpack_str_slow(sx_unpack *u, const char **s, size_t *len)
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

int sx_unpack_str(sx_unpack *u, const char **s, size_t *len)
{
    size_t n;
    /* A fixstr whose body is all present: what unpack_body would read. */
    if (u != NULL && u->err == 0 && u->p < u->end && (u->p[0] & 0xe0) == 0xa0 &&
        (n = u->p[0] & 0x1fu) < (size_t)(u->end - u->p)) {
        if (s != NULL)
            *s = (const char *)u->p + 1;
        if (len != NULL)
            *len = n;
        u->p += 1 + n;
        return 0;
    }
    return unpack_str_slow(u, s, len);
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

/* unpack_container past its fast path (apart, as unpack_str_slow). */
static __attribute__((noinline)) int
unpack_container_slow(sx_unpack *u, sx_mp_type t, uint32_t *n)
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

/* Shared by array and map: the header of a container of type t. */
static inline int unpack_container(sx_unpack *u, sx_mp_type t, uint32_t *n)
{
    /* A fixarray or fixmap whose elements can be present (each takes a
     * byte at least, as head_read checks): its count is in the marker. */
    if (u != NULL && u->err == 0 && u->p < u->end) {
        uint8_t c = u->p[0], fix = t == SX_MP_ARRAY ? 0x90 : 0x80;
        uint32_t k = c & 0x0fu;
        if ((c & 0xf0) == fix && (uint64_t)k * (t == SX_MP_MAP ? 2 : 1) <
                                     (uint64_t)(u->end - u->p)) {
            if (n != NULL)
                *n = k;
            u->p++;
            return 0;
        }
    }
    return unpack_container_slow(u, t, n);
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
    size_t span = u->p < u->end ? sx__mp_scalar_span(u->p[0]) : 0;
    if (span != 0 && span <= (size_t)(u->end - u->p))
        e = u->p + span; /* what value_end finds for such a value */
    else if ((rc = value_end(u->p, u->end, &e)) != 0) {
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

/* sx_payload_get_int past its fast path: apart, so that the fast path
 * (every message of an integer) needs no frame of its own. */
static __attribute__((noinline)) int payload_get_int_slow(sx_payload pl,
                                                          int64_t *out)
{
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

int sx_payload_get_int(sx_payload pl, int64_t *out)
{
    int64_t fast;
    if (pl.data != NULL && sx__mp_int_decode(pl.data, pl.len, &fast)) {
        if (out != NULL)
            *out = fast;
        return 0;
    }
    return payload_get_int_slow(pl, out);
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

/* relay/wire.c — the wire codec of the stepx protocol (docs/PROTOCOL.md,
 * "Frames"): sx_wire_check, a validator of one frame body that works
 * directly on the msgpack bytes without recursion or allocation; the
 * streaming frame decoder that cuts a byte stream into checked bodies;
 * sx_wire_frame, which writes one frame; and, for the server, the same
 * walk with a UTF-8 look at every str, over a frame or over one value
 * (sx__wire_check_utf8, sx__wire_value_utf8), and the copy that sends the
 * strs that are not UTF-8 as bin (sx__wire_utf8_fix, sx__wire_value_fix).
 *
 * Threads: no shared state. A decoder belongs to one thread at a time (the
 * relay server's loop thread, for its connection); sx_wire_check and
 * sx_wire_frame may run on any thread.
 */
#include "relay/wire.h"
#include "relay/stepx/relay.h"

#include "process/pack.h"
#include "process/utf8.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ==== the body check ====================================================
 *
 * Everything the server reads comes through here first, so the check is
 * written for hostile input: every length a header declares is compared
 * with the bytes that remain BEFORE it is used for anything else, and the
 * walk keeps one counter per nesting level (SX_WIRE_MAX_DEPTH + 1 of them,
 * on the stack) instead of recursing. Each step consumes at least one
 * byte, so the walk is linear in the frame's length whatever the headers
 * claim: an array that declares 2^32 - 1 elements in a 10-byte frame fails
 * on its own header.
 */

/* What a value is, as far as the check cares. */
enum { WIRE_SCALAR = 0, WIRE_STR, WIRE_ARRAY, WIRE_MAP };

/* The decoded header of one value. */
typedef struct {
    int kind;    /* WIRE_*                                                  */
    size_t span; /* header plus body bytes (for containers: header only)   */
    uint64_t n;  /* WIRE_ARRAY: elements; WIRE_MAP: keys plus values       */
} wire_head;

static uint32_t wire_be(const uint8_t *p, size_t w)
{
    uint32_t v = 0;
    for (size_t i = 0; i < w; i++)
        v = v << 8 | p[i];
    return v;
}

/* Decodes the header of the value at p, with avail bytes left in the
 * frame (avail > 0). Returns 0, or SX_EPROTO when the marker is the
 * reserved 0xc1, the header is cut short, a body runs past the frame, or
 * a container declares more elements than bytes remain (each element takes
 * at least one byte). Layout per the msgpack spec: hlen is the header's
 * size (marker, length field, ext type byte, scalar value), fw the width
 * of a length field inside it, body a fixed body size (fixstr, fixext).
 * Always inlined: every walk reads each value's header through it. */
static inline int wire_head_read(const uint8_t *p, size_t avail, wire_head *h)
{
    uint8_t c = p[0];
    size_t hlen = 1, fw = 0, body = 0, rest;
    uint64_t len;

    h->kind = WIRE_SCALAR;
    h->n = 0;
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
        /* fixint, negative fixint, nil, false, true */
    } else if (c <= 0x8f) {
        h->kind = WIRE_MAP;
        h->n = 2 * (uint64_t)(c & 0x0f);
    } else if (c <= 0x9f) {
        h->kind = WIRE_ARRAY;
        h->n = c & 0x0f;
    } else if (c <= 0xbf) {
        h->kind = WIRE_STR;
        body = c & 0x1f;
    } else if (c == 0xc1) {
        return SX_EPROTO; /* never used by the format */
    } else if (c <= 0xc6) {
        fw = (size_t)1 << (c - 0xc4); /* bin 8/16/32 */
        hlen = 1 + fw;
    } else if (c <= 0xc9) {
        fw = (size_t)1 << (c - 0xc7); /* ext 8/16/32: length, type, data */
        hlen = 2 + fw;
    } else if (c <= 0xcb) {
        hlen = c == 0xca ? 5 : 9; /* float 32/64 */
    } else if (c <= 0xd3) {
        hlen = 1 + ((size_t)1 << ((c - 0xcc) & 3)); /* uint, int 8..64 */
    } else if (c <= 0xd8) {
        hlen = 2; /* fixext 1/2/4/8/16: type, then data */
        body = (size_t)1 << (c - 0xd4);
    } else if (c <= 0xdb) {
        h->kind = WIRE_STR;
        fw = (size_t)1 << (c - 0xd9); /* str 8/16/32 */
        hlen = 1 + fw;
    } else {
        h->kind = c <= 0xdd ? WIRE_ARRAY : WIRE_MAP;
        fw = (c == 0xdc || c == 0xde) ? 2 : 4; /* array, map 16/32 */
        hlen = 1 + fw;
    }
    if (avail < hlen)
        return SX_EPROTO;
    rest = avail - hlen;
    if (fw != 0) {
        len = wire_be(p + 1, fw);
        if (h->kind == WIRE_ARRAY)
            h->n = len;
        else if (h->kind == WIRE_MAP)
            h->n = 2 * len;
        else
            body = len; /* fits size_t: at most 2^32 - 1 */
    }
    /* Checked here, before the caller looks at anything but the kind. */
    if (body > rest || h->n > rest)
        return SX_EPROTO;
    h->span = hlen + body;
    return 0;
}

/* The header bytes of the str at p (its bytes start after them). */
static inline size_t str_hlen(const uint8_t *p)
{
    return p[0] <= 0xbf ? 1 : p[0] == 0xd9 ? 2 : p[0] == 0xda ? 3 : 5;
}

/* Whether the bytes of the str at p (span: header plus bytes) are UTF-8;
 * a short ASCII one (keys, names, PIDs) is decided inline. */
static inline bool str_utf8(const uint8_t *p, size_t span)
{
    size_t hl = str_hlen(p), n = span - hl;
    return (n < 8 && sx__ascii_short(p + hl, n)) || sx__utf8_valid(p + hl, n);
}

/* The walk of sx_wire_check, over a frame body (frame: one map with
 * string keys, nesting at most SX_WIRE_MAX_DEPTH) or over one msgpack
 * value (!frame: nesting at most max_depth, the levels left to it inside
 * the frame it will sit in). With utf8 it also looks at the bytes of
 * every str but a frame's top-level keys (nested maps' keys included) and
 * adds to *grow what the rewrite adds: for each str that is not UTF-8,
 * the bytes its bin header takes beyond its str header (1 for a fixstr,
 * which has no bin twin; else 0), plus 1 in *bad. Inlined into each
 * caller, so that sx_wire_check, which the decoder runs on every frame a
 * client sends, pays nothing for the rest. */
static inline __attribute__((always_inline)) int
wire_walk(const uint8_t *body, size_t len, bool frame, size_t max_depth,
          bool utf8, size_t *bad, size_t *grow)
{
    /* left[d]: values still to read in the container at depth d (a
     * frame's map is depth 1; a lone value sits in a container of one at
     * depth 0); d is the depth of the container the next value belongs
     * to. */
    uint64_t left[SX_WIRE_MAX_DEPTH + 1];
    const uint8_t *p = body, *end;
    size_t d, base = frame ? 1 : 0;
    wire_head h;

    if (body == NULL || len == 0)
        return SX_EPROTO;
    end = body + len;
    if (frame) {
        if (wire_head_read(p, len, &h) != 0 || h.kind != WIRE_MAP)
            return SX_EPROTO;
        p += h.span;
        d = 1;
        left[1] = h.n;
        max_depth = SX_WIRE_MAX_DEPTH;
    } else {
        d = 0;
        left[0] = 1;
    }
    for (;;) {
        while (left[d] == 0) {
            if (d-- == base)
                /* The map (the value) is complete: nothing may follow. */
                return p == end ? 0 : SX_EPROTO;
        }
        if (p == end)
            return SX_EPROTO;
        /* A frame's top-level keys are strings; a key is read when an even
         * number of the map's keys plus values is left. */
        bool top_key = frame && d == 1 && left[1] % 2 == 0;
        if (!utf8) {
            /* The commonest values of a request, a fixstr (its keys and
             * names) and a positive fixint, read as wire_head_read would
             * read them, in a few instructions: a fixstr's bytes must lie
             * within the frame; a fixint is one byte, and no key. */
            uint8_t c = *p;
            if ((c & 0xe0) == 0xa0) {
                size_t span = 1 + (size_t)(c & 0x1f);
                if (span > (size_t)(end - p))
                    return SX_EPROTO;
                left[d]--;
                p += span;
                continue;
            }
            if (c <= 0x7f && !top_key) {
                left[d]--;
                p++;
                continue;
            }
        }
        if (wire_head_read(p, (size_t)(end - p), &h) != 0)
            return SX_EPROTO;
        if (top_key && h.kind != WIRE_STR)
            return SX_EPROTO;
        /* The top-level keys are the server's own names: not looked at. */
        if (utf8 && h.kind == WIRE_STR && !top_key && !str_utf8(p, h.span)) {
            (*bad)++;
            *grow += str_hlen(p) == 1; /* a fixstr becomes a bin 8 */
        }
        left[d]--;
        p += h.span;
        if (h.kind == WIRE_ARRAY || h.kind == WIRE_MAP) {
            /* This container is at depth d + 1, empty or not. */
            if (d == max_depth)
                return SX_EPROTO;
            left[++d] = h.n;
        }
    }
}

int sx_wire_check(const uint8_t *body, size_t len)
{
    return wire_walk(body, len, true, SX_WIRE_MAX_DEPTH, false, NULL, NULL);
}

int sx__wire_value_check(const uint8_t *v, size_t len, size_t max_depth)
{
    if (max_depth > SX_WIRE_MAX_DEPTH)
        max_depth = SX_WIRE_MAX_DEPTH;
    return wire_walk(v, len, false, max_depth, false, NULL, NULL);
}

/* ==== str values that are not UTF-8 =====================================
 *
 * A msgpack str holds UTF-8, and strict readers (Python's msgpack by
 * default) refuse a whole frame over one str that does not: the server
 * sends such a str as bin, the same bytes (PROTOCOL.md, "Payloads").
 */

int sx__wire_check_utf8(const uint8_t *body, size_t len, size_t *fixed_len)
{
    size_t bad = 0, grow = 0;
    int rc = wire_walk(body, len, true, SX_WIRE_MAX_DEPTH, true, &bad, &grow);
    if (fixed_len != NULL)
        *fixed_len = rc == 0 && bad > 0 ? len + grow : 0;
    return rc;
}

int sx__wire_value_utf8(const uint8_t *v, size_t len, size_t max_depth,
                        size_t *fixed_len)
{
    size_t bad = 0, grow = 0;
    if (max_depth > SX_WIRE_MAX_DEPTH)
        max_depth = SX_WIRE_MAX_DEPTH;
    int rc = wire_walk(v, len, false, max_depth, true, &bad, &grow);
    if (fixed_len != NULL)
        *fixed_len = rc == 0 && bad > 0 ? len + grow : 0;
    return rc;
}

/* The rewrite behind sx__wire_utf8_fix (frame: a frame's top-level keys
 * are kept) and sx__wire_value_fix. The input passed the walk: every
 * header and length is in bounds, so this pass needs no checks but the
 * UTF-8 one. Containers are copied as their headers only; their elements
 * follow as values. In a frame, top: the top-level map's keys plus values
 * still to come; inside: the values still to come inside the top-level
 * value being copied (a nested container adds its own). A value read
 * with inside 0 is a top-level key (an even top left: copied as it is, as
 * the walk left it) or a top-level value. */
static void wire_fix(const uint8_t *body, size_t len, bool frame, uint8_t *out)
{
    const uint8_t *p = body, *end = body + len;
    uint64_t top = 0, inside = 0;
    wire_head h;

    if (frame) {
        if (wire_head_read(p, len, &h) != 0)
            return; /* not a body the walk passed: the contract's breach */
        top = h.n;
        memcpy(out, p, h.span);
        out += h.span;
        p += h.span;
    }
    while (p < end) {
        if (wire_head_read(p, (size_t)(end - p), &h) != 0)
            return;
        bool top_key = false;
        if (inside > 0)
            inside--;
        else if (frame)
            top_key = top-- % 2 == 0;
        if (h.kind == WIRE_ARRAY || h.kind == WIRE_MAP)
            inside += h.n;
        size_t hl = h.kind == WIRE_STR ? str_hlen(p) : 0;
        if (h.kind == WIRE_STR && !top_key && !str_utf8(p, h.span)) {
            size_t n = h.span - hl;
            if (hl <= 2) {     /* fixstr, str 8 */
                *out++ = 0xc4; /* bin 8 */
                *out++ = (uint8_t)n;
            } else { /* str 16, str 32: bin 16, bin 32, same length field */
                *out++ = p[0] == 0xda ? 0xc5 : 0xc6;
                memcpy(out, p + 1, hl - 1);
                out += hl - 1;
            }
            memcpy(out, p + hl, n);
            out += n;
        } else {
            memcpy(out, p, h.span);
            out += h.span;
        }
        p += h.span;
    }
}

void sx__wire_utf8_fix(const uint8_t *body, size_t len, uint8_t *out)
{
    wire_fix(body, len, true, out);
}

void sx__wire_value_fix(const uint8_t *v, size_t len, uint8_t *out)
{
    wire_fix(v, len, false, out);
}

/* ==== the decoder =======================================================
 *
 * buf[head, tail) holds bytes fed but not yet handed out. A body handed out
 * by next stays in buf until the next call; feed then moves the unread
 * bytes to the front (compaction), so the offsets of a long-lived
 * connection never grow. The buffer grows by doubling, so at most to twice
 * the bytes actually fed (never ahead of them on the word of a header: a
 * header that declares 16 MiB makes nobody allocate 16 MiB), and never
 * past the end of the frame being read (at most max_frame +
 * SX_WIRE_HEADER) or the bytes held, whichever is more. As long as the
 * caller drains next until it returns 0 between feeds (the server does),
 * the bytes held are one partial frame plus the chunk being fed.
 * After a big frame it shrinks back: next releases a drained buffer over
 * WIRE_KEEP bytes, and feed shrinks one that holds little, so an idle
 * connection keeps at most WIRE_KEEP bytes.
 */

#define WIRE_MIN_CAP 4096
#define WIRE_KEEP ((size_t)64 << 10)

struct sx_wire_decoder {
    uint8_t *buf;     /* owned; NULL until the first feed and once broken */
    size_t cap;       /* bytes allocated at buf                          */
    size_t head;      /* first byte not yet handed out                   */
    size_t tail;      /* end of the bytes fed                            */
    size_t max_frame; /* the largest body accepted, <= UINT32_MAX        */
    int err;          /* 0, or the error that broke the stream (sticky)  */
};

int sx_wire_decoder_new(size_t max_frame, sx_wire_decoder **out)
{
    sx_wire_decoder *d;

    if (out == NULL)
        return SX_EINVAL;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return SX_ENOMEM;
    sx_wire_decoder_set_max(d, max_frame);
    *out = d; /* the caller's, until sx_wire_decoder_free */
    return 0;
}

int sx_wire_decoder_set_max(sx_wire_decoder *d, size_t max_frame)
{
    if (d == NULL)
        return SX_EINVAL;
    if (max_frame == 0)
        max_frame = SX_WIRE_MAX_FRAME_DEFAULT;
    /* The header is 32 bits: no frame can be longer. */
    d->max_frame = max_frame > UINT32_MAX ? UINT32_MAX : max_frame;
    return 0;
}

void sx_wire_decoder_free(sx_wire_decoder *d)
{
    if (d == NULL)
        return;
    free(d->buf);
    free(d);
}

size_t sx_wire_decoder_footprint(const sx_wire_decoder *d)
{
    return d != NULL ? d->cap : 0;
}

/* Breaks the stream for good and gives its memory back at once. */
static int decoder_break(sx_wire_decoder *d, int err)
{
    d->err = err;
    free(d->buf);
    d->buf = NULL;
    d->cap = d->head = d->tail = 0;
    return err;
}

/* Resizes buf to cap bytes (pending bytes at the front are kept). A failed
 * shrink is harmless; a failed growth is SX_ENOMEM. */
static int decoder_resize(sx_wire_decoder *d, size_t cap)
{
    uint8_t *nb = realloc(d->buf, cap);
    if (nb == NULL)
        return cap < d->cap ? 0 : SX_ENOMEM;
    d->buf = nb;
    d->cap = cap;
    return 0;
}

/* Where the frame at the front of the pending bytes, followed by bytes[0,
 * n), ends: SX_WIRE_HEADER + its length once the header is in (and within
 * the limit), else SX_WIRE_HEADER + max_frame. */
static size_t decoder_frame_end(const sx_wire_decoder *d, const uint8_t *bytes,
                                size_t n)
{
    size_t pending = d->tail - d->head;
    uint8_t h[SX_WIRE_HEADER];
    uint32_t len;

    if (pending + n < SX_WIRE_HEADER)
        return SX_WIRE_HEADER + d->max_frame;
    for (size_t i = 0; i < SX_WIRE_HEADER; i++)
        h[i] = i < pending ? d->buf[d->head + i] : bytes[i - pending];
    len = wire_be(h, SX_WIRE_HEADER);
    if (len == 0 || len > d->max_frame)
        return SX_WIRE_HEADER + d->max_frame; /* next will refuse it */
    return SX_WIRE_HEADER + (size_t)len;
}

int sx_wire_decoder_feed(sx_wire_decoder *d, const void *bytes, size_t n)
{
    size_t pending, need, bound, cap;
    int rc;

    if (d == NULL || (bytes == NULL && n != 0))
        return SX_EINVAL;
    if (d->err != 0)
        return d->err; /* broken: the bytes are dropped */
    if (n == 0)
        return 0;
    /* Compaction: bytes before head were handed out and are dead now (a
     * body is valid only until the next call). */
    pending = d->tail - d->head;
    if (d->head != 0) {
        memmove(d->buf, d->buf + d->head, pending);
        d->head = 0;
        d->tail = pending;
    }
    if (n > SIZE_MAX - pending)
        return SX_ENOMEM;
    need = pending + n;
    if (need > d->cap) {
        /* Doubling, but no further than the most the bytes can use: the
         * current frame when its header is in (a drained decoder holds one
         * partial frame), else one frame of the limit; and never less than
         * the bytes themselves (more when the caller fed twice without
         * draining). */
        bound = decoder_frame_end(d, (const uint8_t *)bytes, n);
        cap = d->cap < WIRE_MIN_CAP ? WIRE_MIN_CAP : d->cap;
        while (cap < need && cap <= SIZE_MAX / 2)
            cap *= 2;
        if (cap > bound)
            cap = bound;
        if (cap < need)
            cap = need;
        if ((rc = decoder_resize(d, cap)) != 0)
            return rc; /* nothing changed; the caller keeps its bytes */
    } else if (d->cap > WIRE_KEEP && need <= d->cap / 4) {
        /* After a big frame: give most of it back. */
        (void)decoder_resize(d, need > WIRE_KEEP ? need : WIRE_KEEP);
    }
    memcpy(d->buf + d->tail, bytes, n);
    d->tail += n;
    return 0;
}

int sx_wire_decoder_next(sx_wire_decoder *d, sx_payload *body)
{
    size_t avail;
    uint32_t n;
    const uint8_t *b;

    if (d == NULL || body == NULL)
        return SX_EINVAL;
    if (d->err != 0)
        return d->err;
    avail = d->tail - d->head;
    if (avail == 0 && d->cap > WIRE_KEEP) {
        /* Drained after a big frame (whose body died with this call):
         * an idle connection holds no big buffer. */
        free(d->buf);
        d->buf = NULL;
        d->cap = d->head = d->tail = 0;
    }
    if (avail < SX_WIRE_HEADER)
        return 0;
    /* The header alone decides these two: no need to wait for a body that
     * must not be buffered anyway. */
    n = wire_be(d->buf + d->head, SX_WIRE_HEADER);
    if (n == 0)
        return decoder_break(d, SX_EPROTO);
    if (n > d->max_frame)
        return decoder_break(d, SX_ELIMIT);
    if (avail - SX_WIRE_HEADER < n)
        return 0;
    b = d->buf + d->head + SX_WIRE_HEADER;
    if (sx_wire_check(b, n) != 0)
        return decoder_break(d, SX_EPROTO);
    d->head += SX_WIRE_HEADER + n;
    if (d->head == d->tail)
        d->head = d->tail = 0; /* b stays readable: only feed writes */
    body->data = b; /* points into d: valid until the next call on d */
    body->len = n;
    return 1;
}

/* ==== writing a frame ================================================== */

static int frame_append(sx_pack *pk, sx_payload body, bool check)
{
    size_t mark;
    uintptr_t lo, b;
    bool own;
    int rc;

    if (pk == NULL)
        return SX_EINVAL;
    if (pk->err != 0)
        return pk->err;
    /* The body must pass the same check a reader will apply: a frame that
     * is too deep or not one map would cost the peer its connection. */
    if (body.len > UINT32_MAX)
        rc = SX_ELIMIT;
    else
        rc = check && sx_wire_check(body.data, body.len) != 0 ? SX_EINVAL : 0;
    if (rc != 0) {
        pk->err = rc; /* sticky, as every sx_pack error */
        return rc;
    }
    /* Reserve the 4 header bytes as a 3-byte fixstr (marker + 3 bytes),
     * append the body as it is (the check above walked it), then write
     * the length over the reserved bytes. The body may lie in pk's own
     * bytes, which the reservation may move: it is found again at the
     * same offset. */
    mark = pk->len;
    lo = (uintptr_t)pk->data;
    b = (uintptr_t)body.data;
    own = pk->data != NULL && b >= lo && b - lo < pk->len;
    if ((rc = sx_pack_strn(pk, "\0\0\0", 3)) != 0)
        return rc;
    if (own)
        body.data = pk->data + (b - lo);
    if ((rc = sx__pack_bytes(pk, body.data, body.len)) != 0) {
        pk->len = mark;
        return rc;
    }
    for (size_t i = 0; i < SX_WIRE_HEADER; i++)
        pk->data[mark + i] =
            (uint8_t)(body.len >> (8 * (SX_WIRE_HEADER - 1 - i)));
    return 0;
}

int sx_wire_frame(sx_pack *pk, sx_payload body)
{
    return frame_append(pk, body, true);
}

int sx__wire_frame_built(sx_pack *pk, sx_payload body)
{
    return frame_append(pk, body, false);
}

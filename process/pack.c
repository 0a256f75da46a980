/* process/pack.c — the sx_pack writer: msgpack values appended to a heap
 * buffer that grows, or to a fixed one that the caller owns.
 *
 * It drives msgpack-c's packer (which picks the smallest encoding for
 * every length) through a write callback that appends to the sx_pack
 * buffer; integers, the payload of most messages, are encoded by hand
 * (process/mpformat.h). The reader is process/unpack.c; sx_pack_raw uses
 * it to check that what it appends is one value.
 *
 * Threads: no shared state. An sx_pack belongs to one thread at a time;
 * distinct ones may be used concurrently.
 */
#include "process/pack.h"
#include "process/mpformat.h"
#include "process/stepx/process.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every sx_pack_* call writes all of its bytes (a whole value, or for
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

/* Appends the len bytes at b as one value, through pack_write (which grows
 * a heap writer): the slow path of the writers that encode in place when
 * there is room (out of line, so that their fast paths save no registers
 * for it). sx__pack_bytes has its own copy of the call. */
static __attribute__((noinline, cold)) int
pack_bytes(sx_pack *pk, const uint8_t *b, size_t len)
{
    /* pack_write changes nothing when it fails: the mark is len. */
    return pack_end(pk, pk->len, pack_write(pk, (const char *)b, len));
}

int sx__pack_bytes(sx_pack *pk, const void *b, size_t len)
{
    if (pk == NULL)
        return SX_EINVAL;
    if (pk->err != 0)
        return pk->err;
    /* pack_write changes nothing when it fails: the mark is len. */
    return pack_end(pk, pk->len, pack_write(pk, (const char *)b, len));
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

int sx_pack_int(sx_pack *pk, int64_t v)
{
    if (pk == NULL)
        return SX_EINVAL;
    if (pk->err != 0)
        return pk->err;
    if (pk->cap - pk->len >= SX_PAYLOAD_INT_MAX) {
        /* Room for the longest encoding: encoded in place. Not left to
         * pack_write, which LTO may keep out of line once it has other
         * callers (skynet: ~40 instructions per process, callgrind). */
        pk->len += sx__mp_int_encode(pk->data + pk->len, v);
        return 0;
    }
    uint8_t b[SX_PAYLOAD_INT_MAX];
    size_t n = sx__mp_int_encode(b, v);
    return pack_bytes(pk, b, n);
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

/* sx_pack_str past its fast path: out of line, so that the fast path
 * keeps nothing across a call (strlen's) and saves no registers. */
static __attribute__((noinline)) int pack_str_any(sx_pack *pk, const char *s)
{
    return sx_pack_strn(pk, s, strlen(s));
}

/* noinline: its fast path is a leaf that link-time optimisation would
 * inline into every caller, and that growth uses up the budget under which
 * it inlines sx_send into a step (pingpong: 52 more instructions a
 * message, bench/icount.sh). */
__attribute__((noinline)) int sx_pack_str(sx_pack *pk, const char *s)
{
    if (s == NULL)
        return sx_pack_nil(pk);
    /* A fixstr (under 32 bytes) with room for the longest, written in
     * place as it is measured: one pass over a short name instead of a
     * strlen and a copy, each a call. msgpack-c writes the same bytes (a
     * marker of 0xa0 | n, then the body). Bytes written past a string of
     * 32 or more lie past len, and the general path writes over them. s
     * may lie in pk's own bytes (below len): the copy goes forward, to
     * after len, so it reads each byte before anything is written there. */
    if (pk != NULL && pk->err == 0 && pk->cap - pk->len > 32) {
        uint8_t *d = pk->data + pk->len + 1;
        size_t n = 0;
        while (n < 32 && s[n] != '\0') {
            d[n] = (uint8_t)s[n];
            n++;
        }
        if (n < 32) {
            d[-1] = (uint8_t)(0xa0 | n);
            pk->len += 1 + n;
            return 0;
        }
    }
    return pack_str_any(pk, s);
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

/* An array's or a map's header at b: fix (n < 16: one byte, fix | n), 16
 * (two more bytes) or 32 (four), as msgpack-c writes it. Returns its
 * length. */
static size_t header_encode(uint8_t *b, uint32_t n, uint8_t fix, uint8_t b16)
{
    if (n < 16) {
        b[0] = (uint8_t)(fix | n);
        return 1;
    }
    if (n <= UINT16_MAX) {
        b[0] = b16;
        b[1] = (uint8_t)(n >> 8);
        b[2] = (uint8_t)n;
        return 3;
    }
    b[0] = (uint8_t)(b16 + 1);
    b[1] = (uint8_t)(n >> 24);
    b[2] = (uint8_t)(n >> 16);
    b[3] = (uint8_t)(n >> 8);
    b[4] = (uint8_t)n;
    return 5;
}

/* Only the header: the caller writes the n elements (or pairs) after it.
 * Written in place when there is room for the longest (no callback, no
 * call), else through pack_bytes. */
static int pack_header(sx_pack *pk, uint32_t n, uint8_t fix, uint8_t b16)
{
    if (pk == NULL)
        return SX_EINVAL;
    if (pk->err != 0)
        return pk->err;
    if (pk->cap - pk->len >= 5) {
        pk->len += header_encode(pk->data + pk->len, n, fix, b16);
        return 0;
    }
    uint8_t b[5];
    size_t len = header_encode(b, n, fix, b16);
    return pack_bytes(pk, b, len);
}

int sx_pack_array(sx_pack *pk, uint32_t n)
{
    return pack_header(pk, n, 0x90, 0xdc);
}

int sx_pack_map(sx_pack *pk, uint32_t n)
{
    return pack_header(pk, n, 0x80, 0xde);
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
    sx_payload pl = { buf, sx__mp_int_encode(buf, v) };
    return pl;
}

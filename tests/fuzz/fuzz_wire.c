/* tests/fuzz/fuzz_wire.c — libFuzzer target for the wire codec
 * (relay/wire.c, relay/codes.c): the input is a byte stream as it would
 * arrive on a relay connection.
 *
 * Each input is
 *  - checked directly with sx_wire_check (whole, and from byte 4 on as if
 *    it were one frame's body), and every accepted body is read again with
 *    process/unpack.c's independent reader: it must be one map that ends
 *    exactly at the end (a differential oracle); a body that reader finds
 *    malformed must have been rejected;
 *  - decoded twice: fed whole, and fed in splits derived from the data (a
 *    hash seeds a generator): both must yield the same frames, byte for
 *    byte, and end in the same state (more bytes needed, or the same
 *    error); every frame passes sx_wire_check, fits max_frame, and comes
 *    back unchanged through sx_wire_frame and a third decoder; the buffer
 *    never grows past max_frame + header + the chunk being fed;
 *  - handed to sx_wire_error as a code string.
 * An oracle failure aborts (a crash for libFuzzer). Single-threaded.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stepx/relay.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(c)                                                         \
    do {                                                                       \
        if (!(c))                                                              \
            abort();                                                           \
    } while (0)

/* The frames one decoding produced, copied (bodies die at the next
 * call), and how it ended: 0 (wants more bytes) or the error. */
typedef struct {
    uint8_t *bytes;
    size_t len, cap;
    size_t *ends; /* ends[i]: where frame i ends in bytes */
    size_t n, ncap;
    int end_rc;
} frames;

static void frames_add(frames *f, sx_payload body)
{
    if (f->len + body.len > f->cap) {
        size_t cap = f->cap ? f->cap : 256;
        while (cap < f->len + body.len)
            cap *= 2;
        f->bytes = realloc(f->bytes, cap);
        FUZZ_ASSERT(f->bytes != NULL);
        f->cap = cap;
    }
    if (f->n == f->ncap) {
        f->ncap = f->ncap ? 2 * f->ncap : 16;
        f->ends = realloc(f->ends, f->ncap * sizeof(*f->ends));
        FUZZ_ASSERT(f->ends != NULL);
    }
    memcpy(f->bytes + f->len, body.data, body.len);
    f->len += body.len;
    f->ends[f->n++] = f->len;
}

static void frames_free(frames *f)
{
    free(f->bytes);
    free(f->ends);
}

/* The differential oracle: what the check accepts, the reader reads as
 * one map with nothing after it; what the reader finds malformed (not
 * merely deeper than it walks), the check rejects. */
static void check_against_reader(const uint8_t *p, size_t n)
{
    int rc = sx_wire_check(p, n);
    sx_unpack u;
    int type, skip;

    FUZZ_ASSERT(rc == 0 || rc == SX_EPROTO);
    if (n == 0)
        return;
    sx_unpack_init(&u, (sx_payload){ p, n });
    type = sx_unpack_type(&u);
    skip = sx_unpack_skip(&u);
    if (rc == 0)
        FUZZ_ASSERT(type == SX_MP_MAP && skip == 0 && sx_unpack_done(&u));
    else if (skip == SX_EPROTO)
        FUZZ_ASSERT(rc == SX_EPROTO);
}

static uint64_t fuzz_rng(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Drains d into f; returns 0 or the stream's error. */
static int drain(sx_wire_decoder *d, frames *f, size_t max_frame)
{
    sx_payload body;
    int rc;
    while ((rc = sx_wire_decoder_next(d, &body)) == 1) {
        FUZZ_ASSERT(body.len > 0 && body.len <= max_frame);
        FUZZ_ASSERT(sx_wire_check(body.data, body.len) == 0);
        frames_add(f, body);
    }
    FUZZ_ASSERT(rc == 0 || rc == SX_EPROTO || rc == SX_ELIMIT);
    return rc;
}

/* Feeds data to a fresh decoder, whole (seed 0) or in chunks of 1 to
 * 1 + (seed & 0xff) bytes picked by a generator seeded with seed. */
static void decode(const uint8_t *data, size_t size, size_t max_frame,
                   uint64_t seed, frames *f)
{
    sx_wire_decoder *d;
    uint64_t s = seed | 1;
    size_t off = 0, span = 1 + (size_t)(seed & 0xff);
    int rc = 0;

    FUZZ_ASSERT(sx_wire_decoder_new(max_frame, &d) == 0);
    while (off < size && rc == 0) {
        size_t c = seed == 0 ? size : 1 + (size_t)(fuzz_rng(&s) % span);
        size_t before = sx_wire_decoder_footprint(d), after;
        if (c > size - off)
            c = size - off;
        FUZZ_ASSERT(sx_wire_decoder_feed(d, data + off, c) == 0);
        off += c;
        after = sx_wire_decoder_footprint(d);
        FUZZ_ASSERT(after <= before || after <= max_frame + SX_WIRE_HEADER + c);
        rc = drain(d, f, max_frame);
    }
    /* A broken decoder stays broken, for feed and next alike. */
    if (rc != 0) {
        sx_payload body;
        FUZZ_ASSERT(sx_wire_decoder_next(d, &body) == rc);
        FUZZ_ASSERT(sx_wire_decoder_feed(d, data, size) == rc);
        FUZZ_ASSERT(sx_wire_decoder_footprint(d) == 0);
    }
    f->end_rc = rc;
    sx_wire_decoder_free(d);
}

/* Frames f's first few bodies again and decodes them: same bytes. */
static void reframe(const frames *f)
{
    sx_pack pk;
    sx_wire_decoder *d;
    sx_payload body;
    size_t n = f->n < 4 ? f->n : 4, start = 0;

    sx_pack_init(&pk);
    for (size_t i = 0; i < n; i++) {
        sx_payload b = { f->bytes + start, f->ends[i] - start };
        FUZZ_ASSERT(sx_wire_frame(&pk, b) == 0);
        start = f->ends[i];
    }
    FUZZ_ASSERT(sx_wire_decoder_new(UINT32_MAX, &d) == 0);
    FUZZ_ASSERT(sx_wire_decoder_feed(d, pk.data, pk.len) == 0);
    start = 0;
    for (size_t i = 0; i < n; i++) {
        FUZZ_ASSERT(sx_wire_decoder_next(d, &body) == 1);
        FUZZ_ASSERT(body.len == f->ends[i] - start);
        FUZZ_ASSERT(memcmp(body.data, f->bytes + start, body.len) == 0);
        start = f->ends[i];
    }
    FUZZ_ASSERT(sx_wire_decoder_next(d, &body) == 0);
    sx_wire_decoder_free(d);
    sx_pack_fini(&pk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a of the input */
    size_t max_frame;
    frames whole = { 0 }, split = { 0 };

    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;

    check_against_reader(data, size);
    if (size > SX_WIRE_HEADER)
        check_against_reader(data + SX_WIRE_HEADER, size - SX_WIRE_HEADER);

    /* Mostly a roomy limit (frames get through), sometimes a tight one
     * (the limit's edge). */
    max_frame = (h >> 60) < 12 ? ((size_t)1 << 20) : 1 + (size_t)(h % 512);
    decode(data, size, max_frame, 0, &whole);
    decode(data, size, max_frame, h >> 8 ? h >> 8 : 1, &split);
    FUZZ_ASSERT(whole.n == split.n && whole.len == split.len);
    FUZZ_ASSERT(whole.len == 0 ||
                memcmp(whole.bytes, split.bytes, whole.len) == 0);
    FUZZ_ASSERT(whole.n == 0 ||
                memcmp(whole.ends, split.ends, whole.n * sizeof(size_t)) == 0);
    FUZZ_ASSERT(whole.end_rc == split.end_rc);
    reframe(&whole);
    frames_free(&whole);
    frames_free(&split);

    /* Any bytes as an error code string: a known code or SX_EPROTO. */
    (void)sx_wire_error((const char *)data, size < 32 ? size : 32);
    if (size >= 4)
        (void)sx_wire_code(-(int)(data[0] | (uint32_t)data[1] << 8));
    return 0;
}

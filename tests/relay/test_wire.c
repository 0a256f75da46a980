/* tests/relay/test_wire.c — the wire codec (relay/wire.c) and the error
 * code table (relay/codes.c): sx_wire_check on every msgpack type, on
 * truncated, hostile and too-deep input; the streaming decoder in every
 * split, its limits, its buffer bound and its sticky errors; sx_wire_frame
 * round trips; sx_wire_code / sx_wire_error; the server's UTF-8 walk and
 * rewrite, over frames and over values (sx__wire_check_utf8,
 * sx__wire_utf8_fix, sx__wire_value_utf8, sx__wire_value_fix).
 *
 * Single-threaded. Each case opens with the property it checks. Cut-short
 * input is copied into a buffer of exactly its size, so that under ASan a
 * read past the end is a crash, not a silent pass.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stepx/stepx.h>

#include "process/utf8.h"
#include "relay/wire.h"
#include "tests/support/harness.h"

/* ---- helpers ---- */

/* A growing byte buffer for hand-made msgpack and streams. */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} bytes;

static void b_put(bytes *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        CHECK(b->p != NULL);
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void b_byte(bytes *b, uint8_t c)
{
    b_put(b, &c, 1);
}

static void b_be32(bytes *b, uint32_t v)
{
    uint8_t h[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8),
                     (uint8_t)v };
    b_put(b, h, 4);
}

static void b_free(bytes *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* sx_wire_check on a copy of p[0, n) in a buffer of exactly n bytes. */
static int check_exact(const uint8_t *p, size_t n)
{
    uint8_t *copy = malloc(n ? n : 1);
    int rc;
    CHECK(copy != NULL);
    if (n > 0)
        memcpy(copy, p, n);
    rc = sx_wire_check(copy, n);
    free(copy);
    return rc;
}

/* A deterministic generator (xorshift64*), so failures reproduce. */
static uint64_t rng_state;
static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

/* One value of every msgpack format family, by hand (the spec's byte
 * layouts), each a valid value on its own. */
typedef struct {
    const char *name;
    size_t len;
    uint8_t v[40];
} sample;

#define S(name, ...)                                                           \
    {                                                                          \
        name, sizeof((uint8_t[]){ __VA_ARGS__ }),                              \
        {                                                                      \
            __VA_ARGS__                                                        \
        }                                                                      \
    }

static const sample samples[] = {
    S("positive fixint", 0x05),
    S("negative fixint", 0xe0),
    S("nil", 0xc0),
    S("false", 0xc2),
    S("true", 0xc3),
    S("bin8", 0xc4, 0x02, 'a', 'b'),
    S("bin8 empty", 0xc4, 0x00),
    S("bin16", 0xc5, 0x00, 0x02, 'a', 'b'),
    S("bin32", 0xc6, 0x00, 0x00, 0x00, 0x02, 'a', 'b'),
    S("ext8", 0xc7, 0x02, 0x01, 'a', 'b'),
    S("ext8 empty", 0xc7, 0x00, 0x7f),
    S("ext16", 0xc8, 0x00, 0x02, 0xff, 'a', 'b'),
    S("ext32", 0xc9, 0x00, 0x00, 0x00, 0x02, 0x80, 'a', 'b'),
    S("float32", 0xca, 0x3f, 0x80, 0x00, 0x00),
    S("float64", 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0),
    S("float64 nan", 0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1),
    S("uint8", 0xcc, 0xff),
    S("uint16", 0xcd, 0xff, 0xff),
    S("uint32", 0xce, 0xff, 0xff, 0xff, 0xff),
    S("uint64", 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
    S("int8", 0xd0, 0x80),
    S("int16", 0xd1, 0x80, 0x00),
    S("int32", 0xd2, 0x80, 0x00, 0x00, 0x00),
    S("int64", 0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0),
    S("fixext1", 0xd4, 0x01, 'a'),
    S("fixext2", 0xd5, 0x01, 'a', 'b'),
    S("fixext4", 0xd6, 0xff, 1, 2, 3, 4),
    S("fixext8", 0xd7, 0xff, 1, 2, 3, 4, 5, 6, 7, 8),
    S("fixext16", 0xd8, 0x05, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
      16),
    S("fixstr", 0xa3, 'a', 'b', 'c'),
    S("fixstr empty", 0xa0),
    S("str8", 0xd9, 0x03, 'a', 'b', 'c'),
    S("str16", 0xda, 0x00, 0x03, 'a', 'b', 'c'),
    S("str32", 0xdb, 0x00, 0x00, 0x00, 0x03, 'a', 'b', 'c'),
    S("fixarray", 0x92, 0x01, 0xc0),
    S("fixarray empty", 0x90),
    S("array16", 0xdc, 0x00, 0x02, 0x01, 0x02),
    S("array32", 0xdd, 0x00, 0x00, 0x00, 0x02, 0x01, 0x02),
    S("fixmap int keys", 0x82, 0x01, 0x02, 0xc0, 0xc3),
    S("fixmap empty", 0x80),
    S("map16", 0xde, 0x00, 0x01, 0x92, 0x01, 0x02, 0xa1, 'v'),
    S("map32", 0xdf, 0x00, 0x00, 0x00, 0x01, 0xc0, 0xc0),
    S("nested", 0x92, 0x81, 0xa1, 'a', 0x91, 0xc4, 0x01, 0x00, 0x90),
};

#define N_SAMPLES (sizeof(samples) / sizeof(samples[0]))

/* The frame body {"k": value}. */
static void frame_one(bytes *b, const sample *s)
{
    b->len = 0;
    b_byte(b, 0x81);
    b_byte(b, 0xa1);
    b_byte(b, 'k');
    b_put(b, s->v, s->len);
}

/* A map16 holding every sample under its own string key (keys written in
 * each string format in turn). */
static void frame_all(bytes *b)
{
    b->len = 0;
    b_byte(b, 0xde);
    b_byte(b, 0x00);
    b_byte(b, (uint8_t)N_SAMPLES);
    for (size_t i = 0; i < N_SAMPLES; i++) {
        uint8_t key[2] = { 'k', (uint8_t)('A' + i) };
        switch (i % 4) {
        case 0:
            b_byte(b, 0xa2);
            break;
        case 1:
            b_byte(b, 0xd9);
            b_byte(b, 2);
            break;
        case 2:
            b_put(b, (uint8_t[]){ 0xda, 0, 2 }, 3);
            break;
        default:
            b_put(b, (uint8_t[]){ 0xdb, 0, 0, 0, 2 }, 5);
        }
        b_put(b, key, 2);
        b_put(b, samples[i].v, samples[i].len);
    }
}

/* Nested containers: a top-level map {"k": ...} holding depth - 1 more
 * containers (alternating arrays and int-keyed maps), so that depth counts
 * every container including the top-level map. The innermost one holds a
 * value when full is set, else it is empty. */
static void frame_deep(bytes *b, int depth, int full)
{
    b->len = 0;
    b_byte(b, 0x81);
    b_byte(b, 0xa1);
    b_byte(b, 'k');
    for (int i = 2; i <= depth; i++) {
        int last = i == depth;
        if (i % 2 == 0) {
            b_byte(b, last && !full ? 0x90 : 0x91);
        } else {
            b_byte(b, last && !full ? 0x80 : 0x81);
            if (!last || full)
                b_byte(b, 0x07); /* the int key */
        }
    }
    if (depth == 1 && !full)
        b_byte(b, 0xc0); /* {"k": nil} */
    else if (full)
        b_byte(b, 0x2a);
}

/* ---- sx_wire_check ---- */

static void check_every_type(void)
{
    /* Every msgpack format (fixint, nil, bool, bin, ext, float, uint, int,
     * fixext, str, array, map in every width) is accepted as a value, and
     * all of them together in one map16 with keys in every string
     * format. */
    bytes b = { 0 };
    for (size_t i = 0; i < N_SAMPLES; i++) {
        frame_one(&b, &samples[i]);
        if (check_exact(b.p, b.len) != 0)
            SX_FAILF("sample %s rejected", samples[i].name);
    }
    frame_all(&b);
    CHECK_RC(check_exact(b.p, b.len), 0);
    /* Top-level maps in every width, and the empty map. */
    CHECK_RC(check_exact((uint8_t[]){ 0x80 }, 1), 0);
    CHECK_RC(check_exact((uint8_t[]){ 0xde, 0, 1, 0xa1, 'k', 0x01 }, 6), 0);
    CHECK_RC(check_exact((uint8_t[]){ 0xdf, 0, 0, 0, 1, 0xa1, 'k', 0x01 }, 8),
             0);
    b_free(&b);
}

static void check_truncation(void)
{
    /* A valid frame cut short at every byte offset is rejected (and never
     * read past its end), and one extra byte after it is rejected too. */
    bytes b = { 0 };
    frame_all(&b);
    for (size_t n = 0; n < b.len; n++)
        if (check_exact(b.p, n) != SX_EPROTO)
            SX_FAILF("prefix of %zu of %zu bytes accepted", n, b.len);
    for (unsigned x = 0; x < 256; x++) {
        b_byte(&b, (uint8_t)x);
        CHECK_RC(check_exact(b.p, b.len), SX_EPROTO);
        b.len--;
    }
    /* The same for every one-value frame. */
    for (size_t i = 0; i < N_SAMPLES; i++) {
        frame_one(&b, &samples[i]);
        for (size_t n = 0; n < b.len; n++)
            if (check_exact(b.p, n) != SX_EPROTO)
                SX_FAILF("%s: prefix %zu accepted", samples[i].name, n);
    }
    b_free(&b);
}

static void check_huge_lengths(void)
{
    /* Lengths and counts far beyond the frame (2^32 - 1 elements or bytes
     * in a 10-byte frame) are rejected from the header alone: the check
     * returns at once and allocates nothing (a million calls in well under
     * the test's limit; ASan would report an attempt at a huge
     * allocation). */
    static const uint8_t huge[][10] = {
        { 0x81, 0xa1, 'k', 0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0 },
        { 0x81, 0xa1, 'k', 0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0 },
        { 0x81, 0xa1, 'k', 0xdb, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0 },
        { 0x81, 0xa1, 'k', 0xc6, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0 },
        { 0x81, 0xa1, 'k', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 0xc0 },
        { 0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'k', 0xc0, 0xc0, 0xc0 },
        { 0x81, 0xa1, 'k', 0xdc, 0xff, 0xff, 0xc0, 0xc0, 0xc0, 0xc0 },
        { 0x81, 0xa1, 'k', 0xda, 0xff, 0xff, 0xc0, 0xc0, 0xc0, 0xc0 },
        /* A count that fits the bytes left only if each element took
         * nothing: 7 elements, 6 bytes. */
        { 0x81, 0xa1, 'k', 0x97, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0 },
    };
    double t0 = sx_test_now_ms();
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++)
        if (check_exact(huge[i], sizeof(huge[i])) != SX_EPROTO)
            SX_FAILF("hostile frame %zu accepted", i);
    for (int r = 0; r < 1000000; r++)
        CHECK_RC(sx_wire_check(huge[r % 6], 10), SX_EPROTO);
    double ms = sx_test_now_ms() - t0;
    printf("# 1M hostile checks in %.1f ms\n", ms);
    CHECK(ms < 15000);
}

static void check_depth(void)
{
    /* Nesting counts every container, the top-level map included: 32
     * levels are accepted (the innermost empty or not), 33 are rejected
     * (empty or not), and 100,000 levels are rejected without recursion. */
    bytes b = { 0 };
    for (int full = 0; full <= 1; full++) {
        for (int depth = 1; depth <= SX_WIRE_MAX_DEPTH; depth++) {
            frame_deep(&b, depth, full);
            if (check_exact(b.p, b.len) != 0)
                SX_FAILF("depth %d (full %d) rejected", depth, full);
        }
        frame_deep(&b, SX_WIRE_MAX_DEPTH + 1, full);
        CHECK_RC(check_exact(b.p, b.len), SX_EPROTO);
    }
    b.len = 0;
    b_put(&b, (uint8_t[]){ 0x81, 0xa1, 'k' }, 3);
    for (int i = 0; i < 100000; i++)
        b_byte(&b, 0x91);
    b_byte(&b, 0xc0);
    CHECK_RC(check_exact(b.p, b.len), SX_EPROTO);
    b_free(&b);
}

static void check_top_level(void)
{
    /* The body is exactly one map with string keys: any other top-level
     * value, a non-string key (first or later), or an empty body is
     * rejected; keys of nested maps may be anything. */
    static const struct {
        uint8_t v[8];
        size_t n;
        int rc;
    } cases[] = {
        { { 0x90 }, 1, SX_EPROTO },
        { { 0x91, 0x80 }, 2, SX_EPROTO },
        { { 0xa1, 'x' }, 2, SX_EPROTO },
        { { 0x01 }, 1, SX_EPROTO },
        { { 0xc0 }, 1, SX_EPROTO },
        { { 0xc4, 0x01, 0x80 }, 3, SX_EPROTO },
        { { 0x81, 0x01, 0x01 }, 3, SX_EPROTO },
        { { 0x81, 0xc0, 0xc0 }, 3, SX_EPROTO },
        { { 0x81, 0xc4, 0x01, 'k', 0x01 }, 5, SX_EPROTO },
        { { 0x82, 0xa1, 'a', 0x01, 0x02, 0x02 }, 6, SX_EPROTO },
        { { 0x81, 0x80, 0x01 }, 3, SX_EPROTO },
        { { 0x81, 0xa1, 'k', 0x81, 0x01, 0x02 }, 6, 0 },
        { { 0x81, 0xa1, 'k', 0x81, 0x90, 0x80 }, 6, 0 },
        { { 0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x02 }, 7, 0 },
        /* A fixstr (the walk's quick path) must end within the frame, as
         * a key or as a value, and a fixint is no key there either. */
        { { 0x81, 0xa2, 'k' }, 3, SX_EPROTO },
        { { 0x81, 0xa1, 'k', 0xa2, 'x' }, 5, SX_EPROTO },
        { { 0x81, 0xa1, 'k', 0xa1, 'x' }, 5, 0 },
        { { 0x81, 0xa1, 'k', 0x7f }, 4, 0 },
        { { 0x82, 0xa1, 'k', 0x7f, 0x7f, 0x7f }, 6, SX_EPROTO },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (check_exact(cases[i].v, cases[i].n) != cases[i].rc)
            SX_FAILF("case %zu: expected %d", i, cases[i].rc);
    CHECK_RC(sx_wire_check(NULL, 0), SX_EPROTO);
    CHECK_RC(sx_wire_check(NULL, 5), SX_EPROTO);
    CHECK_RC(check_exact((const uint8_t *)"", 0), SX_EPROTO);
    /* The same quick path in a lone value's walk (a posted input's). */
    static const uint8_t s1[] = { 0xa1, 'x' }, s2[] = { 0xa2, 'x' },
                         i1[] = { 0x05 }, i2[] = { 0x05, 0x06 };
    CHECK_RC(sx__wire_value_check(s1, sizeof s1, 1), 0);
    CHECK_RC(sx__wire_value_check(s2, sizeof s2, 1), SX_EPROTO);
    CHECK_RC(sx__wire_value_check(i1, sizeof i1, 1), 0);
    CHECK_RC(sx__wire_value_check(i2, sizeof i2, 1), SX_EPROTO);
}

static void check_trailing_and_reserved(void)
{
    /* Bytes after the map (another value, even another map) are rejected,
     * and the reserved marker 0xc1 is rejected wherever it appears. */
    CHECK_RC(check_exact((uint8_t[]){ 0x80, 0x80 }, 2), SX_EPROTO);
    CHECK_RC(check_exact((uint8_t[]){ 0x80, 0xc0 }, 2), SX_EPROTO);
    CHECK_RC(check_exact((uint8_t[]){ 0x81, 0xa1, 'k', 0x01, 0x00 }, 5),
             SX_EPROTO);
    CHECK_RC(check_exact((uint8_t[]){ 0xc1 }, 1), SX_EPROTO);
    CHECK_RC(check_exact((uint8_t[]){ 0x81, 0xa1, 'k', 0xc1 }, 4), SX_EPROTO);
    CHECK_RC(check_exact((uint8_t[]){ 0x81, 0xa1, 'k', 0x91, 0xc1 }, 5),
             SX_EPROTO);
    CHECK_RC(check_exact((uint8_t[]){ 0x81, 0xc1, 0x01 }, 3), SX_EPROTO);
    /* ...but 0xc1 inside a string or binary body is only data. */
    CHECK_RC(check_exact((uint8_t[]){ 0x81, 0xa1, 'k', 0xa1, 0xc1 }, 5), 0);
}

static void check_agrees_with_reader(void)
{
    /* Against process/unpack.c's reader, on 200,000 random mutations of a
     * valid frame: whatever sx_wire_check accepts, sx_unpack reads as one
     * map that ends exactly at the end; whatever that reader finds
     * malformed (not merely too deep), the check rejects. */
    bytes b = { 0 }, m = { 0 };
    int accepted = 0;
    frame_all(&b);
    rng_state = 0x5eed1;
    for (int r = 0; r < 200000; r++) {
        m.len = 0;
        b_put(&m, b.p, b.len);
        int flips = 1 + (int)(rng() % 4);
        for (int f = 0; f < flips; f++)
            m.p[rng() % m.len] = (uint8_t)rng();
        size_t len = r % 3 == 0 ? rng() % (m.len + 1) : m.len;
        int rc = check_exact(m.p, len);
        sx_unpack u;
        sx_unpack_init(&u, (sx_payload){ m.p, len });
        int type = len > 0 ? sx_unpack_type(&u) : SX_EPROTO;
        int skip = sx_unpack_skip(&u);
        if (rc == 0) {
            accepted++;
            CHECK_EQ_INT(type, SX_MP_MAP);
            CHECK_RC(skip, 0);
            CHECK(sx_unpack_done(&u));
        } else if (skip == SX_EPROTO) {
            CHECK_RC(rc, SX_EPROTO);
        }
    }
    printf("# %d of 200000 mutations accepted\n", accepted);
    CHECK(accepted > 0);
    b_free(&b);
    b_free(&m);
}

/* ---- the decoder ---- */

/* A stream of n frames with bodies of assorted sizes (up to max_body);
 * bodies[i] is where frame i's body starts in s. */
static void make_stream(bytes *s, size_t *starts, size_t *lens, int n,
                        size_t max_body)
{
    sx_pack pk;
    uint8_t *blob = malloc(max_body);
    CHECK(blob != NULL);
    for (size_t i = 0; i < max_body; i++)
        blob[i] = (uint8_t)(i * 7 + 3);
    sx_pack_init(&pk);
    s->len = 0;
    for (int i = 0; i < n; i++) {
        sx_pack_reset(&pk);
        sx_pack_map(&pk, 2);
        sx_pack_str(&pk, "id");
        sx_pack_uint(&pk, (uint64_t)i);
        sx_pack_str(&pk, "blob");
        size_t want =
            i % 5 == 0 ? (size_t)(rng() % (max_body - 32)) : (size_t)(i % 40);
        sx_pack_bin(&pk, blob, want);
        CHECK_RC(pk.err, 0);
        CHECK(pk.len <= max_body);
        b_be32(s, (uint32_t)pk.len);
        starts[i] = s->len;
        lens[i] = pk.len;
        b_put(s, pk.data, pk.len);
    }
    sx_pack_fini(&pk);
    free(blob);
}

/* Feeds s in chunks (chunk(): the next chunk size), draining after every
 * feed and checking that the frames come out as made, and that the buffer
 * never grows past max_frame + header + the chunk that made it grow.
 * Returns the frame count. */
static int feed_and_compare(const bytes *s, const size_t *starts,
                            const size_t *lens, int n, size_t max_frame,
                            size_t (*chunk)(void))
{
    sx_wire_decoder *d;
    sx_payload body;
    size_t off = 0;
    int got = 0, rc;

    CHECK_RC(sx_wire_decoder_new(max_frame, &d), 0);
    while (off < s->len) {
        size_t c = chunk();
        if (c > s->len - off)
            c = s->len - off;
        size_t before = sx_wire_decoder_footprint(d), after;
        CHECK_RC(sx_wire_decoder_feed(d, s->p + off, c), 0);
        off += c;
        after = sx_wire_decoder_footprint(d);
        if (after > before && after > max_frame + SX_WIRE_HEADER + c)
            SX_FAILF("grew to %zu, over %zu + 4 + %zu", after, max_frame, c);
        while ((rc = sx_wire_decoder_next(d, &body)) == 1) {
            CHECK(got < n);
            CHECK_EQ_U64(body.len, lens[got]);
            CHECK(memcmp(body.data, s->p + starts[got], body.len) == 0);
            got++;
        }
        CHECK_RC(rc, 0);
    }
    sx_wire_decoder_free(d);
    return got;
}

static size_t chunk_one(void)
{
    return 1;
}
static size_t chunk_random(void)
{
    return 1 + (size_t)(rng() % 3000);
}
static size_t chunk_small(void)
{
    return 1 + (size_t)(rng() % 9);
}
static size_t chunk_all(void)
{
    return SIZE_MAX;
}

#define STREAM_FRAMES 300

static void decoder_splits(void)
{
    /* The same stream fed whole, one byte at a time, and in random splits
     * (several seeds) yields the same frames, byte for byte and in order;
     * frames split across feeds and several frames in one feed both work,
     * and the buffer never grows past max_frame + header + the chunk
     * being fed. */
    static size_t starts[STREAM_FRAMES], lens[STREAM_FRAMES];
    bytes s = { 0 };
    const size_t max_frame = 6000;
    rng_state = 42;
    make_stream(&s, starts, lens, STREAM_FRAMES, max_frame);
    CHECK_EQ_INT(
        feed_and_compare(&s, starts, lens, STREAM_FRAMES, max_frame, chunk_all),
        STREAM_FRAMES);
    CHECK_EQ_INT(
        feed_and_compare(&s, starts, lens, STREAM_FRAMES, max_frame, chunk_one),
        STREAM_FRAMES);
    for (uint64_t seed = 1; seed <= 8; seed++) {
        rng_state = seed * 0x9e3779b97f4a7c15ull;
        CHECK_EQ_INT(feed_and_compare(&s, starts, lens, STREAM_FRAMES,
                                      max_frame,
                                      seed % 2 ? chunk_random : chunk_small),
                     STREAM_FRAMES);
    }
    b_free(&s);
}

static void decoder_long_lived(void)
{
    /* A connection that carries 200,000 small frames in odd-sized chunks
     * keeps a small buffer (compaction: no growth with the bytes carried),
     * and after one big frame the buffer shrinks back. */
    static const uint8_t body[] = { 0x82, 0xa2, 'o',  'p', 0xa4, 'p', 'i',
                                    'n',  'g',  0xa2, 'i', 'd',  0x07 };
    bytes s = { 0 };
    sx_wire_decoder *d;
    sx_payload out;
    size_t got = 0, off = 0, peak = 0;
    int rc;

    for (int i = 0; i < 1000; i++) {
        b_be32(&s, sizeof(body));
        b_put(&s, body, sizeof(body));
    }
    CHECK_RC(sx_wire_decoder_new(0, &d), 0);
    for (int round = 0; round < 200; round++) {
        for (off = 0; off < s.len;) {
            size_t c = 1 + (off * 31 + (size_t)round) % 97;
            if (c > s.len - off)
                c = s.len - off;
            CHECK_RC(sx_wire_decoder_feed(d, s.p + off, c), 0);
            off += c;
            while ((rc = sx_wire_decoder_next(d, &out)) == 1) {
                CHECK_EQ_U64(out.len, sizeof(body));
                CHECK(memcmp(out.data, body, sizeof(body)) == 0);
                got++;
            }
            CHECK_RC(rc, 0);
            if (sx_wire_decoder_footprint(d) > peak)
                peak = sx_wire_decoder_footprint(d);
        }
    }
    CHECK_EQ_U64(got, 200000);
    printf("# peak buffer %zu bytes for %zu bytes carried\n", peak,
           200 * s.len);
    CHECK(peak <= 4096);

    /* One 4 MiB frame, then small ones: the buffer grows, then shrinks. */
    size_t big = (size_t)4 << 20;
    bytes f = { 0 };
    b_be32(&f, (uint32_t)big);
    b_put(&f, (uint8_t[]){ 0x81, 0xa1, 'b', 0xc6 }, 4);
    b_be32(&f, (uint32_t)(big - 8));
    uint8_t *zeros = calloc(1, big);
    CHECK(zeros != NULL);
    b_put(&f, zeros, big - 8);
    free(zeros);
    for (off = 0; off < f.len; off += 65536) {
        size_t c = f.len - off < 65536 ? f.len - off : 65536;
        CHECK_RC(sx_wire_decoder_feed(d, f.p + off, c), 0);
        rc = sx_wire_decoder_next(d, &out);
        CHECK(rc == 0 || rc == 1);
        if (rc == 1)
            CHECK_EQ_U64(out.len, big);
    }
    CHECK(sx_wire_decoder_footprint(d) >= big);
    CHECK(sx_wire_decoder_footprint(d) <= big + SX_WIRE_HEADER + 65536);
    /* Drained: the big buffer goes at once. */
    CHECK_RC(sx_wire_decoder_next(d, &out), 0);
    CHECK(sx_wire_decoder_footprint(d) <= 65536);
    /* A big frame and the start of a small one in one chunk: the small
     * frames that follow bring the buffer back down. */
    CHECK_RC(sx_wire_decoder_feed(d, f.p, f.len), 0);
    CHECK_RC(sx_wire_decoder_feed(d, s.p, 3), 0);
    CHECK_RC(sx_wire_decoder_next(d, &out), 1);
    CHECK_EQ_U64(out.len, big);
    CHECK_RC(sx_wire_decoder_next(d, &out), 0);
    CHECK(sx_wire_decoder_footprint(d) >= big);
    CHECK_RC(sx_wire_decoder_feed(d, s.p + 3, 4 + sizeof(body) - 3), 0);
    CHECK_RC(sx_wire_decoder_next(d, &out), 1);
    CHECK(memcmp(out.data, body, sizeof(body)) == 0);
    CHECK_RC(sx_wire_decoder_next(d, &out), 0);
    for (int i = 0; i < 3; i++) {
        CHECK_RC(sx_wire_decoder_feed(d, s.p, 4 + sizeof(body)), 0);
        CHECK_RC(sx_wire_decoder_next(d, &out), 1);
        CHECK_RC(sx_wire_decoder_next(d, &out), 0);
    }
    printf("# after the big frame: %zu bytes\n", sx_wire_decoder_footprint(d));
    CHECK(sx_wire_decoder_footprint(d) <= 65536);
    sx_wire_decoder_free(d);
    b_free(&f);
    b_free(&s);
}

static void decoder_zero_length(void)
{
    /* A zero length is SX_EPROTO, after the frames before it have come
     * out; from then on every call (next and feed) returns the same error
     * and the buffer is released. */
    static const uint8_t ok[] = { 0, 0, 0, 1, 0x80 };
    sx_wire_decoder *d;
    sx_payload body;
    CHECK_RC(sx_wire_decoder_new(0, &d), 0);
    CHECK_RC(sx_wire_decoder_feed(d, ok, sizeof(ok)), 0);
    CHECK_RC(sx_wire_decoder_feed(d, (uint8_t[]){ 0, 0, 0, 0, 0x80 }, 5), 0);
    CHECK_RC(sx_wire_decoder_next(d, &body), 1);
    CHECK_EQ_U64(body.len, 1);
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_EPROTO);
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_EPROTO);
    CHECK_RC(sx_wire_decoder_feed(d, ok, sizeof(ok)), SX_EPROTO);
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_EPROTO);
    CHECK_EQ_U64(sx_wire_decoder_footprint(d), 0);
    sx_wire_decoder_free(d);
}

static void decoder_oversized(void)
{
    /* A length above max_frame is SX_ELIMIT as soon as its 4 header bytes
     * are in, without waiting for the body; max_frame itself is fine; the
     * default limit is 16 MiB; a header that declares a big (allowed)
     * frame makes the decoder allocate nothing ahead of the bytes. The
     * error is sticky. */
    sx_wire_decoder *d;
    sx_payload body;
    bytes f = { 0 };

    CHECK_RC(sx_wire_decoder_new(100, &d), 0);
    CHECK_RC(sx_wire_decoder_feed(d, (uint8_t[]){ 0, 0 }, 2), 0);
    CHECK_RC(sx_wire_decoder_next(d, &body), 0);
    CHECK_RC(sx_wire_decoder_feed(d, (uint8_t[]){ 0, 101 }, 2), 0);
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_ELIMIT);
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_ELIMIT);
    CHECK_RC(sx_wire_decoder_feed(d, (uint8_t[]){ 0x80 }, 1), SX_ELIMIT);
    CHECK_EQ_U64(sx_wire_decoder_footprint(d), 0);
    sx_wire_decoder_free(d);

    /* Exactly max_frame: a map with one 95-byte string. */
    CHECK_RC(sx_wire_decoder_new(100, &d), 0);
    b_be32(&f, 100);
    b_put(&f, (uint8_t[]){ 0x81, 0xa1, 'k', 0xd9, 95 }, 5);
    for (int i = 0; i < 95; i++)
        b_byte(&f, 'x');
    b_put(&f, (uint8_t[]){ 0xff, 0xff, 0xff, 0xff }, 4);
    CHECK_RC(sx_wire_decoder_feed(d, f.p, f.len), 0);
    CHECK_RC(sx_wire_decoder_next(d, &body), 1);
    CHECK_EQ_U64(body.len, 100);
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_ELIMIT);
    sx_wire_decoder_free(d);

    /* A limit raised after the header was read (the client's, at hello)
     * takes the frame; lowered below it, the frame is refused. */
    CHECK_RC(sx_wire_decoder_new(64, &d), 0);
    CHECK_RC(sx_wire_decoder_feed(d, f.p, 20), 0); /* header + 16 bytes */
    CHECK_RC(sx_wire_decoder_set_max(d, 100), 0);
    CHECK_RC(sx_wire_decoder_feed(d, f.p + 20, 84), 0);
    CHECK_RC(sx_wire_decoder_next(d, &body), 1);
    CHECK_EQ_U64(body.len, 100);
    CHECK_RC(sx_wire_decoder_set_max(d, 99), 0);
    CHECK_RC(sx_wire_decoder_feed(d, f.p, 104), 0);
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_ELIMIT);
    CHECK_RC(sx_wire_decoder_set_max(d, 0), 0); /* broken stays broken */
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_ELIMIT);
    CHECK_RC(sx_wire_decoder_set_max(NULL, 0), SX_EINVAL);
    sx_wire_decoder_free(d);

    /* The default limit. */
    CHECK_RC(sx_wire_decoder_new(0, &d), 0);
    f.len = 0;
    b_be32(&f, SX_WIRE_MAX_FRAME_DEFAULT);
    b_put(&f, (uint8_t[]){ 0xdf, 0, 0, 0, 1 }, 5);
    CHECK_RC(sx_wire_decoder_feed(d, f.p, f.len), 0);
    CHECK_RC(sx_wire_decoder_next(d, &body), 0);
    CHECK(sx_wire_decoder_footprint(d) <= 65536);
    sx_wire_decoder_free(d);
    CHECK_RC(sx_wire_decoder_new(0, &d), 0);
    f.len = 0;
    b_be32(&f, SX_WIRE_MAX_FRAME_DEFAULT + 1);
    CHECK_RC(sx_wire_decoder_feed(d, f.p, f.len), 0);
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_ELIMIT);
    sx_wire_decoder_free(d);

    /* A limit above what 32 bits can say: the largest header is allowed,
     * and declaring it allocates nothing ahead of the bytes. */
    CHECK_RC(sx_wire_decoder_new(SIZE_MAX, &d), 0);
    f.len = 0;
    b_be32(&f, UINT32_MAX);
    b_put(&f, (uint8_t[]){ 0xdf, 0, 0, 0, 1, 0xa1 }, 6);
    CHECK_RC(sx_wire_decoder_feed(d, f.p, f.len), 0);
    CHECK_RC(sx_wire_decoder_next(d, &body), 0);
    CHECK(sx_wire_decoder_footprint(d) <= 65536);
    sx_wire_decoder_free(d);
    b_free(&f);
}

static void decoder_bad_body(void)
{
    /* A frame whose body is not one map (here an array, then a map with a
     * trailing byte) breaks the stream with SX_EPROTO after the good frames
     * before it; arguments are checked. */
    sx_wire_decoder *d;
    sx_payload body;
    static const uint8_t s1[] = { 0, 0, 0, 1, 0x80, 0, 0, 0, 1, 0x90 };
    static const uint8_t s2[] = { 0, 0, 0, 2, 0x80, 0x80 };

    CHECK_RC(sx_wire_decoder_new(0, &d), 0);
    CHECK_RC(sx_wire_decoder_feed(d, s1, sizeof(s1)), 0);
    CHECK_RC(sx_wire_decoder_next(d, &body), 1);
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_EPROTO);
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_EPROTO);
    sx_wire_decoder_free(d);
    CHECK_RC(sx_wire_decoder_new(0, &d), 0);
    CHECK_RC(sx_wire_decoder_feed(d, s2, sizeof(s2)), 0);
    CHECK_RC(sx_wire_decoder_next(d, &body), SX_EPROTO);
    CHECK_RC(sx_wire_decoder_feed(d, NULL, 3), SX_EINVAL);
    CHECK_RC(sx_wire_decoder_next(d, NULL), SX_EINVAL);
    sx_wire_decoder_free(d);
    CHECK_RC(sx_wire_decoder_new(0, NULL), SX_EINVAL);
    CHECK_RC(sx_wire_decoder_feed(NULL, s1, 1), SX_EINVAL);
    CHECK_RC(sx_wire_decoder_next(NULL, &body), SX_EINVAL);
    CHECK_EQ_U64(sx_wire_decoder_footprint(NULL), 0);
    sx_wire_decoder_free(NULL);
}

/* ---- sx_wire_frame ---- */

static void frame_round_trip(void)
{
    /* sx_wire_frame writes a big-endian length and the body verbatim; two
     * frames in one writer decode back to the same two bodies. */
    sx_pack body, out;
    sx_wire_decoder *d;
    sx_payload got;
    uint8_t first[64];
    size_t first_len;

    sx_pack_init(&body);
    sx_pack_init(&out);
    sx_pack_map(&body, 3);
    sx_pack_str(&body, "op");
    sx_pack_str(&body, "hello");
    sx_pack_str(&body, "id");
    sx_pack_uint(&body, 1);
    sx_pack_str(&body, "version");
    sx_pack_int(&body, 1);
    CHECK_RC(body.err, 0);
    CHECK_RC(sx_wire_frame(&out, sx_pack_payload(&body)), 0);
    CHECK_EQ_U64(out.len, SX_WIRE_HEADER + body.len);
    CHECK_EQ_U64((uint32_t)out.data[0] << 24 | (uint32_t)out.data[1] << 16 |
                     (uint32_t)out.data[2] << 8 | out.data[3],
                 body.len);
    CHECK(memcmp(out.data + 4, body.data, body.len) == 0);
    first_len = body.len;
    memcpy(first, body.data, body.len);
    sx_pack_reset(&body);
    sx_pack_map(&body, 1);
    sx_pack_str(&body, "big");
    uint8_t blob[70000] = { 0 };
    sx_pack_bin(&body, blob, sizeof(blob));
    CHECK_RC(sx_wire_frame(&out, sx_pack_payload(&body)), 0);

    CHECK_RC(sx_wire_decoder_new(0, &d), 0);
    CHECK_RC(sx_wire_decoder_feed(d, out.data, out.len), 0);
    CHECK_RC(sx_wire_decoder_next(d, &got), 1);
    CHECK_EQ_U64(got.len, first_len);
    CHECK(memcmp(got.data, first, first_len) == 0);
    CHECK_RC(sx_wire_decoder_next(d, &got), 1);
    CHECK_EQ_U64(got.len, body.len);
    CHECK(memcmp(got.data, body.data, body.len) == 0);
    CHECK_RC(sx_wire_decoder_next(d, &got), 0);
    sx_wire_decoder_free(d);
    sx_pack_fini(&body);
    sx_pack_fini(&out);
}

static void frame_own_bytes(void)
{
    /* A body taken from the writer's own bytes (as sx_pack_raw allows) is
     * framed intact even when the header's reserved bytes move the
     * writer's storage: with pk full to the byte, the reservation grows it,
     * and the body must then be read from the new storage, not the freed
     * one (reading the freed one is a heap-use-after-free under ASan; in a
     * plain build the frame holds allocator bytes). */
    for (size_t fill = 0; fill < 300; fill++) {
        sx_pack pk;
        char text[300];
        for (size_t i = 0; i < fill; i++)
            text[i] = (char)('a' + i % 26);
        sx_pack_init(&pk);
        sx_pack_map(&pk, 1);
        sx_pack_str(&pk, "k");
        sx_pack_strn(&pk, text, fill);
        CHECK_RC(pk.err, 0);
        size_t len = pk.len;
        uint8_t *copy = malloc(len);
        CHECK(copy != NULL);
        memcpy(copy, pk.data, len);
        /* A block after pk's storage: realloc cannot grow it in place. */
        void *spacer = malloc(1);
        CHECK(spacer != NULL);
        int rc = sx_wire_frame(&pk, (sx_payload){ pk.data, len });
        free(spacer);
        CHECK_RC(rc, 0);
        CHECK_EQ_U64(pk.len, 2 * len + SX_WIRE_HEADER);
        CHECK(memcmp(pk.data, copy, len) == 0);
        CHECK(memcmp(pk.data + len + SX_WIRE_HEADER, copy, len) == 0);
        free(copy);
        sx_pack_fini(&pk);
    }
}

static void frame_errors(void)
{
    /* sx_wire_frame refuses a body that is not a frame body (not a map,
     * empty, too deep) with SX_EINVAL, and a full fixed writer with
     * SX_ELIMIT; it appends nothing on error and, like every sx_pack
     * call, the error is sticky. */
    sx_pack out;
    uint8_t small[16];
    bytes b = { 0 };

    sx_pack_init(&out);
    sx_pack_str(&out, "x");
    size_t before = out.len;
    CHECK_RC(sx_wire_frame(&out, (sx_payload){ (const uint8_t *)"\x90", 1 }),
             SX_EINVAL);
    CHECK_EQ_U64(out.len, before);
    CHECK_RC(sx_pack_nil(&out), SX_EINVAL);
    sx_pack_fini(&out);

    sx_pack_init(&out);
    CHECK_RC(sx_wire_frame(&out, (sx_payload){ NULL, 0 }), SX_EINVAL);
    sx_pack_fini(&out);

    sx_pack_init(&out);
    frame_deep(&b, SX_WIRE_MAX_DEPTH + 1, 1);
    CHECK_RC(sx_wire_frame(&out, (sx_payload){ b.p, b.len }), SX_EINVAL);
    CHECK_EQ_U64(out.len, 0);
    sx_pack_fini(&out);

    sx_pack_init_fixed(&out, small, sizeof(small));
    sx_pack_nil(&out);
    frame_one(&b, &samples[0]);
    CHECK_RC(sx_wire_frame(&out, (sx_payload){ b.p, b.len }), 0);
    CHECK_EQ_U64(out.len, 1 + 4 + 4);
    sx_pack_reset(&out);
    sx_pack_nil(&out);
    frame_all(&b);
    CHECK_RC(sx_wire_frame(&out, (sx_payload){ b.p, b.len }), SX_ELIMIT);
    CHECK_EQ_U64(out.len, 1);
    CHECK_RC(sx_wire_frame(NULL, (sx_payload){ b.p, b.len }), SX_EINVAL);
    b_free(&b);
}

/* ---- error codes ---- */

static void codes_table(void)
{
    /* Every protocol code of docs/PROTOCOL.md maps to its SX_E* code and
     * back; init_failed and internal map one way; unmapped SX_E* codes
     * are "internal"; unknown or cut strings are SX_EPROTO; lookups use
     * the given length, not a NUL. */
    static const struct {
        int error;
        const char *code;
    } both[] = {
        { SX_EPROTO, "bad_frame" },
        { SX_EINVAL, "bad_request" },
        { SX_EUNKNOWN_COMMAND, "unknown_op" },
        { SX_EUNKNOWN_TYPE, "unknown_type" },
        { SX_EUNKNOWN_METHOD, "unknown_method" },
        { SX_ENOTFOUND, "not_found" },
        { SX_ECLOSED, "closed" },
        { SX_ELIMIT, "limit" },
        { SX_ESTOPPING, "stopping" },
        { SX_ETIMEDOUT, "timeout" },
        { SX_EFAILED, "failed" },
        { SX_ETERMINATED, "terminated" },
        { SX_ECANCELLED, "cancelled" },
        { SX_ETOOLARGE, "too_large" },
    };
    for (size_t i = 0; i < sizeof(both) / sizeof(both[0]); i++) {
        CHECK_STR(sx_wire_code(both[i].error), both[i].code);
        CHECK_RC(sx_wire_error(both[i].code, strlen(both[i].code)),
                 both[i].error);
    }
    CHECK_RC(sx_wire_error("init_failed", 11), SX_EFAILED);
    CHECK_RC(sx_wire_error("internal", 8), -EIO);
    CHECK_STR(sx_wire_code(-EIO), "internal");
    CHECK_STR(sx_wire_code(SX_ENOMEM), "internal");
    CHECK_STR(sx_wire_code(-ENOENT), "internal");
    CHECK_STR(sx_wire_code(SX_ESTATE), "internal");
    CHECK_STR(sx_wire_code(0), "internal");
    CHECK_STR(sx_wire_code(12345), "internal");
    CHECK_RC(sx_wire_error("nope", 4), SX_EPROTO);
    CHECK_RC(sx_wire_error("not_foun", 8), SX_EPROTO);
    CHECK_RC(sx_wire_error("not_foundX", 9), SX_ENOTFOUND);
    CHECK_RC(sx_wire_error("not_foundX", 10), SX_EPROTO);
    CHECK_RC(sx_wire_error("", 0), SX_EPROTO);
    CHECK_RC(sx_wire_error(NULL, 0), SX_EPROTO);
    CHECK_RC(sx_wire_error(NULL, 5), SX_EPROTO);
}

/* ---- str values that are not UTF-8 (relay/wire.h) ---- */

/* Whether the value at f is the value at o with every str that is not
 * UTF-8 made a bin of the same bytes (and nothing else changed). */
static bool same_but_bin(sx_unpack *o, sx_unpack *f)
{
    const char *s, *t;
    size_t n, m;
    uint32_t k, l;
    sx_payload a, b;
    switch (sx_unpack_type(o)) {
    case SX_MP_STR:
        CHECK_RC(sx_unpack_str(o, &s, &n), 0);
        if (sx__utf8_valid((const unsigned char *)s, n)) {
            if (sx_unpack_str(f, &t, &m) != 0)
                return false;
        } else if (sx_unpack_bin(f, (const void **)&t, &m) != 0) {
            return false;
        }
        return n == m && memcmp(s, t, n) == 0;
    case SX_MP_ARRAY:
    case SX_MP_MAP: {
        bool map = sx_unpack_type(o) == SX_MP_MAP;
        CHECK_RC(map ? sx_unpack_map(o, &k) : sx_unpack_array(o, &k), 0);
        if ((map ? sx_unpack_map(f, &l) : sx_unpack_array(f, &l)) != 0 ||
            k != l)
            return false;
        for (uint64_t i = 0; i < (map ? 2 * (uint64_t)k : k); i++)
            if (!same_but_bin(o, f))
                return false;
        return true;
    }
    default:
        CHECK_RC(sx_unpack_raw(o, &a), 0);
        return sx_unpack_raw(f, &b) == 0 && a.len == b.len &&
               memcmp(a.data, b.data, a.len) == 0;
    }
}

/* Whether the body at f is the body at o with every str that is not
 * UTF-8 made a bin of the same bytes, but for the top-level keys, which
 * are kept as they are. */
static bool body_same_but_bin(sx_unpack *o, sx_unpack *f)
{
    uint32_t k, l;
    sx_payload a, b;
    CHECK_RC(sx_unpack_map(o, &k), 0);
    if (sx_unpack_map(f, &l) != 0 || k != l)
        return false;
    for (uint32_t i = 0; i < k; i++) {
        CHECK_RC(sx_unpack_raw(o, &a), 0);
        if (sx_unpack_raw(f, &b) != 0 || a.len != b.len ||
            memcmp(a.data, b.data, a.len) != 0 || !same_but_bin(o, f))
            return false;
    }
    return true;
}

/* Checks sx__wire_check_utf8 on body (copied to an exact-size buffer)
 * against sx_wire_check (the same answer), and when it asks for a
 * rewrite, the rewrite (into an exact-size buffer): a frame the check
 * passes, with nothing left to rewrite, that is body with its bad strs
 * (not the top-level keys) as bin. Returns the fixed length (0: nothing
 * to rewrite). */
static size_t utf8_round(const uint8_t *body, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    CHECK(copy != NULL);
    if (len > 0)
        memcpy(copy, body, len);
    size_t fixed = 12345, again = 12345;
    int rc = sx__wire_check_utf8(copy, len, &fixed);
    CHECK_RC(rc, sx_wire_check(copy, len));
    if (rc != 0)
        CHECK_EQ_U64(fixed, 0);
    if (rc == 0 && fixed != 0) {
        CHECK(fixed >= len);
        uint8_t *out = malloc(fixed);
        CHECK(out != NULL);
        sx__wire_utf8_fix(copy, len, out);
        CHECK_RC(sx__wire_check_utf8(out, fixed, &again), 0);
        CHECK_EQ_U64(again, 0);
        sx_unpack o, f;
        sx_unpack_init(&o, (sx_payload){ copy, len });
        sx_unpack_init(&f, (sx_payload){ out, fixed });
        CHECK(body_same_but_bin(&o, &f));
        CHECK(sx_unpack_done(&f));
        free(out);
    }
    free(copy);
    return fixed;
}

/* As utf8_round, for sx__wire_value_utf8 (max_depth) and
 * sx__wire_value_fix: what it takes is one value sx_unpack reads whole,
 * and the rewrite changes its bad strs (keys included) to bin. */
static size_t value_round(const uint8_t *v, size_t len, size_t max_depth)
{
    uint8_t *copy = malloc(len ? len : 1);
    CHECK(copy != NULL);
    if (len > 0)
        memcpy(copy, v, len);
    size_t fixed = 12345, again = 12345;
    int rc = sx__wire_value_utf8(copy, len, max_depth, &fixed);
    if (rc != 0) {
        CHECK_EQ_U64(fixed, 0);
    } else {
        sx_unpack u;
        sx_unpack_init(&u, (sx_payload){ copy, len });
        CHECK_RC(sx_unpack_skip(&u), 0);
        CHECK(sx_unpack_done(&u));
    }
    if (rc == 0 && fixed != 0) {
        CHECK(fixed >= len);
        uint8_t *out = malloc(fixed);
        CHECK(out != NULL);
        sx__wire_value_fix(copy, len, out);
        CHECK_RC(sx__wire_value_utf8(out, fixed, max_depth, &again), 0);
        CHECK_EQ_U64(again, 0);
        sx_unpack o, f;
        sx_unpack_init(&o, (sx_payload){ copy, len });
        sx_unpack_init(&f, (sx_payload){ out, fixed });
        CHECK(same_but_bin(&o, &f));
        CHECK(sx_unpack_done(&f));
        free(out);
    }
    free(copy);
    return fixed;
}

/* Property: sx__wire_check_utf8 decides exactly as sx_wire_check does,
 * and asks for a rewrite exactly when some str (a nested map's key
 * included; not a top-level key, the server's own) is not UTF-8;
 * sx__wire_utf8_fix then writes the same frame with those strs as bin of
 * the same bytes, in the length it said (a fixstr grows by one byte into
 * a bin 8; str 8/16/32 keep their length field as bin 8/16/32), and
 * nothing left to rewrite. On hand-made frames and on 100,000 random
 * mutations of a frame of every type. */
static void utf8_fix(void)
{
    /* All valid: nothing to rewrite. */
    static const uint8_t ok[] = { 0x82, 0xa1, 'k', 0xa3, 0xe2, 0x82,
                                  0xac, 0xa1, 'b', 0xc4, 0x01, 0xff };
    CHECK_EQ_U64(utf8_round(ok, sizeof ok), 0);
    /* Every form of str, bad, as a value and as a nested key. */
    static const uint8_t bad[] = {
        0x85, 0xa1, 'a',  0xa2, 'x',  0xff,            /* fixstr      */
        0xa1, 'b',  0xd9, 0x02, 0xc3, 'y',             /* str 8       */
        0xa1, 'c',  0xda, 0x00, 0x01, 0x80,            /* str 16      */
        0xa1, 'd',  0xdb, 0,    0,    0,    1,   0xed, /* str 32      */
        0xa1, 'e',  0x81, 0xa1, 0xfe, 0x91, 0xa0       /* {bad: [""]} */
    };
    static const uint8_t want[] = { 0x85, 0xa1, 'a',  0xc4, 0x02, 'x',  0xff,
                                    0xa1, 'b',  0xc4, 0x02, 0xc3, 'y',  0xa1,
                                    'c',  0xc5, 0x00, 0x01, 0x80, 0xa1, 'd',
                                    0xc6, 0,    0,    0,    1,    0xed, 0xa1,
                                    'e',  0x81, 0xc4, 0x01, 0xfe, 0x91, 0xa0 };
    size_t fixed;
    CHECK_RC(sx__wire_check_utf8(bad, sizeof bad, &fixed), 0);
    CHECK_EQ_U64(fixed, sizeof want);
    CHECK_EQ_U64(utf8_round(bad, sizeof bad), sizeof want);
    uint8_t out[sizeof want];
    sx__wire_utf8_fix(bad, sizeof bad, out);
    CHECK(memcmp(out, want, sizeof want) == 0);
    /* A frame the wire refuses is refused here too, bad str or not. */
    CHECK_RC(sx__wire_check_utf8(bad, sizeof bad - 1, &fixed), SX_EPROTO);
    CHECK_EQ_U64(fixed, 0);
    /* The top-level keys are not looked at (nor rewritten: they must stay
     * strs); a value beside a bad one is. */
    static const uint8_t key_only[] = { 0x81, 0xa1, 0xff, 0x01 };
    CHECK_RC(sx__wire_check_utf8(key_only, sizeof key_only, &fixed), 0);
    CHECK_EQ_U64(fixed, 0);
    static const uint8_t bad_key[] = { 0x82, 0xa1, 0xff, 0x01,
                                       0xa1, 0xfe, 0xa1, 0xfd };
    static const uint8_t bad_key_fixed[] = { 0x82, 0xa1, 0xff, 0x01, 0xa1,
                                             0xfe, 0xc4, 0x01, 0xfd };
    CHECK_RC(sx__wire_check_utf8(bad_key, sizeof bad_key, &fixed), 0);
    CHECK_EQ_U64(fixed, sizeof bad_key_fixed);
    uint8_t out2[sizeof bad_key_fixed];
    sx__wire_utf8_fix(bad_key, sizeof bad_key, out2);
    CHECK(memcmp(out2, bad_key_fixed, sizeof out2) == 0);
    /* Random mutations, as frames and as lone values. */
    bytes b = { 0 }, m = { 0 };
    int fixes = 0, vfixes = 0;
    frame_all(&b);
    CHECK_EQ_U64(utf8_round(b.p, b.len), 0);
    CHECK_EQ_U64(value_round(b.p, b.len, SX_WIRE_MAX_DEPTH), 0);
    rng_state = 0x0af8;
    for (int r = 0; r < 100000; r++) {
        m.len = 0;
        b_put(&m, b.p, b.len);
        int flips = 1 + (int)(rng() % 4);
        for (int f = 0; f < flips; f++)
            m.p[rng() % m.len] = (uint8_t)rng();
        if (utf8_round(m.p, m.len) != 0)
            fixes++;
        if (value_round(m.p, m.len, SX_WIRE_MAX_DEPTH) != 0)
            vfixes++;
    }
    printf("# %d (frames), %d (values) of 100000 mutations rewritten\n", fixes,
           vfixes);
    CHECK(fixes > 0 && vfixes > fixes); /* values: the keys too */
    b_free(&b);
    b_free(&m);
}

/* Property: sx__wire_value_utf8 takes exactly one value (not none, not
 * two), nested at most max_depth deep, and looks at every str in it (a
 * lone str, map keys); sx__wire_value_fix writes it with those strs as
 * bin. */
static void utf8_value(void)
{
    size_t fixed = 7;
    CHECK_RC(sx__wire_value_utf8((const uint8_t *)"", 0, 8, &fixed), SX_EPROTO);
    CHECK_EQ_U64(fixed, 0);
    CHECK_RC(sx__wire_value_utf8((const uint8_t *)"\x01\x01", 2, 8, &fixed),
             SX_EPROTO);
    CHECK_RC(sx__wire_value_utf8((const uint8_t *)"\xc1", 1, 8, &fixed),
             SX_EPROTO);
    CHECK_RC(sx__wire_value_utf8((const uint8_t *)"\x92\x01", 2, 8, &fixed),
             SX_EPROTO);
    CHECK_RC(sx__wire_value_utf8((const uint8_t *)"\xa2ok", 3, 0, &fixed), 0);
    CHECK_EQ_U64(fixed, 0);
    CHECK_EQ_U64(value_round((const uint8_t *)"\xa1\xff", 2, 0), 3);
    uint8_t out[8];
    sx__wire_value_fix((const uint8_t *)"\xa1\xff", 2, out);
    CHECK(memcmp(out, "\xc4\x01\xff", 3) == 0);
    /* {bad: "ok"}: a key of the value's own map is looked at. */
    CHECK_EQ_U64(value_round((const uint8_t *)"\x81\xa1\xfe\xa2ok", 6, 1), 7);
    /* Depth: max_depth containers, not one more (an empty one counts). */
    uint8_t deep[SX_WIRE_MAX_DEPTH + 2];
    for (size_t k = 0; k <= SX_WIRE_MAX_DEPTH + 1; k++) {
        memset(deep, 0x91, k);
        deep[k] = 0x90;
        for (size_t max = 0; max <= SX_WIRE_MAX_DEPTH; max++) {
            int rc = sx__wire_value_utf8(deep, k + 1, max, &fixed);
            CHECK_RC(rc, k + 1 <= max ? 0 : SX_EPROTO);
        }
        deep[k] = 0xc0; /* k containers around a nil */
        CHECK_RC(
            sx__wire_value_utf8(deep, k + 1, SX_WIRE_MAX_DEPTH - 1, &fixed),
            k <= SX_WIRE_MAX_DEPTH - 1 ? 0 : SX_EPROTO);
    }
}

static const sx_test_case cases[] = {
    { "check_every_type", check_every_type },
    { "check_truncation", check_truncation },
    { "check_huge_lengths", check_huge_lengths },
    { "check_depth", check_depth },
    { "check_top_level", check_top_level },
    { "check_trailing_and_reserved", check_trailing_and_reserved },
    { "check_agrees_with_reader", check_agrees_with_reader },
    { "decoder_splits", decoder_splits },
    { "decoder_long_lived", decoder_long_lived },
    { "decoder_zero_length", decoder_zero_length },
    { "decoder_oversized", decoder_oversized },
    { "decoder_bad_body", decoder_bad_body },
    { "frame_round_trip", frame_round_trip },
    { "frame_own_bytes", frame_own_bytes },
    { "frame_errors", frame_errors },
    { "codes_table", codes_table },
    { "utf8_fix", utf8_fix },
    { "utf8_value", utf8_value },
};

SX_TEST_MAIN(cases)

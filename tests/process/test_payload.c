/* tests/process/test_payload.c — the msgpack writer (sx_pack) and reader
 * (sx_unpack): round trips at every encoding boundary, the error contract
 * (sticky vs. not, the cursor never moving on failure), hostile input
 * (truncation, huge claimed lengths, deep nesting), and a cross-check against
 * msgpack-c's own unpacker on random values from a fixed seed.
 *
 * Inputs that must fail are copied into exact-size heap blocks so that a read
 * past the end is caught when this runs under ASan.
 *
 * Threads: single-threaded.
 */
#include "process/stepx/process.h"
#include "process/utf8.h"
#include "tests/support/harness.h"

#include <float.h>
#include <math.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- helpers ---- */

/* A growable byte buffer the tests assemble hand-made encodings in. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} tbuf;

static void tb_put(tbuf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        CHECK(b->p != NULL);
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void tb_byte(tbuf *b, uint8_t c)
{
    tb_put(b, &c, 1);
}

/* Appends v big-endian in w bytes. */
static void tb_be(tbuf *b, uint64_t v, size_t w)
{
    for (size_t i = w; i-- > 0;)
        tb_byte(b, (uint8_t)(v >> (8 * i)));
}

/* Moves what pk holds to the end of b and empties pk. */
static void tb_take(tbuf *b, sx_pack *pk)
{
    CHECK_RC(pk->err, 0);
    tb_put(b, pk->data, pk->len);
    sx_pack_reset(pk);
}

/* An exact-size heap copy, so ASan sees any read past its end. */
static uint8_t *dup_exact(const void *p, size_t n)
{
    uint8_t *q = malloc(n ? n : 1);
    CHECK(q != NULL);
    if (n > 0)
        memcpy(q, p, n);
    return q;
}

static sx_payload pl_of(const void *p, size_t n)
{
    sx_payload pl = { p, n };
    return pl;
}

/* Checks a reader call that must be a non-sticky mismatch: it returns want,
 * err stays 0 and the cursor stays put. */
#define CHECK_NOMOVE(u, call, want)                                            \
    do {                                                                       \
        const uint8_t *p0_ = (u)->p;                                           \
        CHECK_RC((call), (want));                                              \
        CHECK_RC((u)->err, 0);                                                 \
        CHECK((u)->p == p0_);                                                  \
    } while (0)

/* Skips one value of b (an exact-size copy) and returns the result; *used
 * gets the bytes consumed. */
static int skip_exact(const uint8_t *p, size_t n, size_t *used)
{
    uint8_t *q = dup_exact(p, n);
    sx_unpack u;
    sx_unpack_init(&u, pl_of(q, n));
    int rc = sx_unpack_skip(&u);
    if (used != NULL)
        *used = (size_t)(u.p - q);
    if (rc != 0) {
        CHECK_RC(u.err, rc);
        CHECK(u.p == q);
        CHECK_RC(sx_unpack_skip(&u), rc);
        CHECK_RC(sx_unpack_nil(&u), rc);
    }
    free(q);
    return rc;
}

/* ---- integers ---- */

/* Every integer packs in the smallest encoding msgpack allows (the encoded
 * size and marker at each boundary), sx_payload_int produces the same bytes,
 * and both readers give the value back. */
static void test_int_boundaries(void)
{
    static const struct {
        int64_t v;
        size_t len;
        uint8_t marker;
    } cases[] = {
        { 0, 1, 0x00 },
        { 1, 1, 0x01 },
        { 127, 1, 0x7f },
        { 128, 2, 0xcc },
        { 255, 2, 0xcc },
        { 256, 3, 0xcd },
        { 65535, 3, 0xcd },
        { 65536, 5, 0xce },
        { 4294967295LL, 5, 0xce },
        { 4294967296LL, 9, 0xcf },
        { INT64_MAX, 9, 0xcf },
        { -1, 1, 0xff },
        { -32, 1, 0xe0 },
        { -33, 2, 0xd0 },
        { -128, 2, 0xd0 },
        { -129, 3, 0xd1 },
        { -32768, 3, 0xd1 },
        { -32769, 5, 0xd2 },
        { INT32_MIN, 5, 0xd2 },
        { (int64_t)INT32_MIN - 1, 9, 0xd3 },
        { INT64_MIN, 9, 0xd3 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t buf[16], small[SX_PAYLOAD_INT_MAX];
        sx_pack pk;
        sx_pack_init_fixed(&pk, buf, sizeof(buf));
        CHECK_RC(sx_pack_int(&pk, cases[i].v), 0);
        CHECK_EQ_U64(pk.len, cases[i].len);
        CHECK_EQ_INT(buf[0], cases[i].marker);

        sx_payload pl = sx_payload_int(small, cases[i].v);
        CHECK_EQ_U64(pl.len, cases[i].len);
        CHECK(memcmp(pl.data, buf, pl.len) == 0);

        int64_t v = 0;
        CHECK_RC(sx_payload_get_int(pl, &v), 0);
        CHECK_EQ_INT(v, cases[i].v);

        sx_unpack u;
        sx_unpack_init(&u, pl);
        CHECK_EQ_INT(sx_unpack_type(&u), SX_MP_INT);
        if (cases[i].v >= 0) {
            uint64_t uv = 0;
            CHECK_RC(sx_unpack_uint(&u, &uv), 0);
            CHECK_EQ_U64(uv, (uint64_t)cases[i].v);
            /* The unsigned writer agrees for non-negative values. */
            sx_pack_reset(&pk);
            CHECK_RC(sx_pack_uint(&pk, (uint64_t)cases[i].v), 0);
            CHECK(pk.len == pl.len && memcmp(buf, pl.data, pl.len) == 0);
        } else {
            CHECK_NOMOVE(&u, sx_unpack_uint(&u, NULL), SX_ELIMIT);
            CHECK_RC(sx_unpack_int(&u, &v), 0);
            CHECK_EQ_INT(v, cases[i].v);
        }
        CHECK(sx_unpack_done(&u));
    }
}

/* Unsigned values above INT64_MAX round-trip through the unsigned reader; the
 * signed reader reports SX_ELIMIT without moving or becoming sticky. */
static void test_uint_above_int64(void)
{
    static const uint64_t vals[] = { (uint64_t)INT64_MAX + 1, UINT64_MAX };
    for (size_t i = 0; i < 2; i++) {
        uint8_t buf[9];
        sx_pack pk;
        sx_pack_init_fixed(&pk, buf, sizeof(buf));
        CHECK_RC(sx_pack_uint(&pk, vals[i]), 0);
        CHECK_EQ_U64(pk.len, 9);
        CHECK_EQ_INT(buf[0], 0xcf);
        sx_unpack u;
        sx_unpack_init(&u, sx_pack_payload(&pk));
        CHECK_NOMOVE(&u, sx_unpack_int(&u, NULL), SX_ELIMIT);
        uint64_t v;
        CHECK_RC(sx_unpack_uint(&u, &v), 0);
        CHECK_EQ_U64(v, vals[i]);
        int64_t sv;
        CHECK_RC(sx_payload_get_int(sx_pack_payload(&pk), &sv), SX_ELIMIT);
    }
}

/* Every integer encoding is read, including ones a minimal writer never
 * produces (a small value in uint64, a positive value in int8), and signed
 * encodings sign-extend correctly at their extremes. */
static void test_int_all_encodings(void)
{
    static const struct {
        uint8_t bytes[9];
        size_t len;
        int64_t v;
    } cases[] = {
        { { 0xcc, 5 }, 2, 5 },
        { { 0xcd, 0, 5 }, 3, 5 },
        { { 0xce, 0, 0, 0, 5 }, 5, 5 },
        { { 0xcf, 0, 0, 0, 0, 0, 0, 0, 5 }, 9, 5 },
        { { 0xd0, 5 }, 2, 5 },
        { { 0xd0, 0x7f }, 2, 127 },
        { { 0xd0, 0x80 }, 2, -128 },
        { { 0xd0, 0xff }, 2, -1 },
        { { 0xd1, 0x80, 0x00 }, 3, -32768 },
        { { 0xd1, 0xff, 0xfe }, 3, -2 },
        { { 0xd1, 0x7f, 0xff }, 3, 32767 },
        { { 0xd2, 0x80, 0, 0, 0 }, 5, INT32_MIN },
        { { 0xd2, 0x7f, 0xff, 0xff, 0xff }, 5, INT32_MAX },
        { { 0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0 }, 9, INT64_MIN },
        { { 0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff }, 9, -1 },
        { { 0xd3, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff },
          9,
          INT64_MAX },
        { { 0xe0 }, 1, -32 },
        { { 0xf0 }, 1, -16 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t *q = dup_exact(cases[i].bytes, cases[i].len);
        int64_t v = 0;
        CHECK_RC(sx_payload_get_int(pl_of(q, cases[i].len), &v), 0);
        CHECK_EQ_INT(v, cases[i].v);
        double d = 0;
        sx_unpack u;
        sx_unpack_init(&u, pl_of(q, cases[i].len));
        CHECK_RC(sx_unpack_double(&u, &d), 0);
        CHECK(d == (double)cases[i].v);
        free(q);
    }
}

/* ---- scalars ---- */

/* nil, booleans and doubles (signed zero, extremes, infinities, NaN) round
 * trip; float32 is read; the double reader also takes integers. */
static void test_nil_bool_double(void)
{
    static const double ds[] = { 0.0,      -0.0,      1.5,      -1e300,
                                 DBL_MAX,  DBL_MIN,   -DBL_MIN, 1e-320,
                                 INFINITY, -INFINITY, NAN };
    sx_pack pk;
    sx_pack_init(&pk);
    CHECK_RC(sx_pack_nil(&pk), 0);
    CHECK_RC(sx_pack_bool(&pk, true), 0);
    CHECK_RC(sx_pack_bool(&pk, false), 0);
    for (size_t i = 0; i < sizeof(ds) / sizeof(ds[0]); i++)
        CHECK_RC(sx_pack_double(&pk, ds[i]), 0);
    CHECK_EQ_U64(pk.len, 3 + 9 * (sizeof(ds) / sizeof(ds[0])));
    CHECK_EQ_INT(pk.data[0], 0xc0);
    CHECK_EQ_INT(pk.data[1], 0xc3);
    CHECK_EQ_INT(pk.data[2], 0xc2);
    CHECK_EQ_INT(pk.data[3], 0xcb);

    sx_unpack u;
    bool b;
    sx_unpack_init(&u, sx_pack_payload(&pk));
    CHECK_EQ_INT(sx_unpack_type(&u), SX_MP_NIL);
    CHECK_RC(sx_unpack_nil(&u), 0);
    CHECK_EQ_INT(sx_unpack_type(&u), SX_MP_BOOL);
    CHECK_RC(sx_unpack_bool(&u, &b), 0);
    CHECK(b);
    CHECK_RC(sx_unpack_bool(&u, &b), 0);
    CHECK(!b);
    for (size_t i = 0; i < sizeof(ds) / sizeof(ds[0]); i++) {
        double d;
        CHECK_EQ_INT(sx_unpack_type(&u), SX_MP_FLOAT);
        CHECK_RC(sx_unpack_double(&u, &d), 0);
        CHECK(memcmp(&d, &ds[i], sizeof(d)) == 0);
    }
    CHECK(sx_unpack_done(&u));
    sx_pack_fini(&pk);

    /* float32 1.5 and -inf, then integers through the double reader. */
    static const uint8_t f32[] = { 0xca, 0x3f, 0xc0, 0x00, 0x00, 0xca, 0xff,
                                   0x80, 0x00, 0x00, 0x03, 0xff, 0xcf, 0xff,
                                   0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
    uint8_t *q = dup_exact(f32, sizeof(f32));
    double d;
    sx_unpack_init(&u, pl_of(q, sizeof(f32)));
    CHECK_EQ_INT(sx_unpack_type(&u), SX_MP_FLOAT);
    CHECK_NOMOVE(&u, sx_unpack_int(&u, NULL), SX_EPROTO);
    CHECK_RC(sx_unpack_double(&u, &d), 0);
    CHECK(d == 1.5);
    CHECK_RC(sx_unpack_double(&u, &d), 0);
    CHECK(isinf(d) && d < 0);
    CHECK_RC(sx_unpack_double(&u, &d), 0);
    CHECK(d == 3.0);
    CHECK_RC(sx_unpack_double(&u, &d), 0);
    CHECK(d == -1.0);
    CHECK_RC(sx_unpack_double(&u, &d), 0);
    CHECK(d == 18446744073709551615.0);
    CHECK(sx_unpack_done(&u));
    free(q);
}

/* ---- strings, binaries, containers ---- */

/* Strings of each length class pack with the smallest header (fixstr, str8,
 * str16, str32 at 31/32/255/256/65535/65536) and read back byte for byte;
 * NULL is nil; hand-made non-minimal headers are read too. */
static void test_str_sizes(void)
{
    static const struct {
        size_t n, hlen;
        uint8_t marker;
    } cases[] = {
        { 0, 1, 0xa0 },     { 1, 1, 0xa1 },     { 31, 1, 0xbf },
        { 32, 2, 0xd9 },    { 255, 2, 0xd9 },   { 256, 3, 0xda },
        { 65535, 3, 0xda }, { 65536, 5, 0xdb }, { 70001, 5, 0xdb },
    };
    char *text = malloc(70001);
    CHECK(text != NULL);
    for (size_t i = 0; i < 70001; i++)
        text[i] = (char)('a' + i % 26);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sx_pack pk;
        sx_pack_init(&pk);
        CHECK_RC(sx_pack_strn(&pk, text, cases[i].n), 0);
        CHECK_EQ_U64(pk.len, cases[i].hlen + cases[i].n);
        CHECK_EQ_INT(pk.data[0], cases[i].marker);
        sx_unpack u;
        const char *s;
        size_t n;
        sx_unpack_init(&u, sx_pack_payload(&pk));
        CHECK_EQ_INT(sx_unpack_type(&u), SX_MP_STR);
        CHECK_NOMOVE(&u, sx_unpack_bin(&u, NULL, NULL), SX_EPROTO);
        CHECK_RC(sx_unpack_str(&u, &s, &n), 0);
        CHECK_EQ_U64(n, cases[i].n);
        CHECK(n == 0 || memcmp(s, text, n) == 0);
        CHECK(sx_unpack_done(&u));
        sx_pack_fini(&pk);
    }
    free(text);

    sx_pack pk;
    sx_pack_init(&pk);
    CHECK_RC(sx_pack_str(&pk, NULL), 0);
    CHECK_RC(sx_pack_str(&pk, "hi"), 0);
    CHECK_RC(sx_pack_strn(&pk, NULL, 0), 0);
    CHECK_EQ_U64(pk.len, 5);
    CHECK(memcmp(pk.data, "\xc0\xa2hi\xa0", 5) == 0);
    CHECK_RC(sx_pack_strn(&pk, NULL, 3), SX_EINVAL);
    CHECK_EQ_U64(pk.len, 5);
    CHECK_RC(sx_pack_nil(&pk), SX_EINVAL); /* sticky */
    sx_pack_fini(&pk);

    static const uint8_t odd[] = { 0xd9, 3,   'a', 'b', 'c',  0xda, 0,
                                   3,    'a', 'b', 'c', 0xdb, 0,    0,
                                   0,    3,   'a', 'b', 'c',  0xd9, 0 };
    uint8_t *q = dup_exact(odd, sizeof(odd));
    sx_unpack u;
    sx_unpack_init(&u, pl_of(q, sizeof(odd)));
    for (int i = 0; i < 3; i++) {
        const char *s;
        size_t n;
        CHECK_RC(sx_unpack_str(&u, &s, &n), 0);
        CHECK(n == 3 && memcmp(s, "abc", 3) == 0);
    }
    const char *s;
    size_t n = 99;
    CHECK_RC(sx_unpack_str(&u, &s, &n), 0);
    CHECK_EQ_U64(n, 0);
    CHECK(sx_unpack_done(&u));
    free(q);
}

/* sx_pack_str writes what sx_pack_strn writes for every length around
 * the fixstr limit (31, 32, 33), in a heap writer, in a fixed one with
 * just enough room and with one byte short, and for a string that lies
 * in the writer's own bytes (an earlier bin holding it with its NUL). */
static void test_pack_str_lengths(void)
{
    char text[41];
    for (size_t n = 0; n <= 40; n++) {
        for (size_t i = 0; i < n; i++)
            text[i] = (char)('a' + i % 26);
        text[n] = '\0';
        sx_pack want, got;
        sx_pack_init(&want);
        CHECK_RC(sx_pack_strn(&want, text, n), 0);
        sx_pack_init(&got);
        CHECK_RC(sx_pack_str(&got, text), 0);
        CHECK(got.len == want.len &&
              memcmp(got.data, want.data, want.len) == 0);
        sx_pack_fini(&got);
        for (size_t extra = 0; extra < 2; extra++) {
            uint8_t buf[64];
            size_t cap = want.len - 1 + extra; /* one short, then exact */
            sx_pack_init_fixed(&got, buf, cap);
            CHECK_RC(sx_pack_str(&got, text), extra ? 0 : SX_ELIMIT);
            if (extra)
                CHECK(got.len == want.len &&
                      memcmp(buf, want.data, want.len) == 0);
            else
                CHECK_EQ_U64(got.len, 0);
        }
        /* From pk's own bytes: a bin of the text and its NUL, then the
         * text as a string read from there. */
        sx_pack own;
        sx_pack_init(&own);
        CHECK_RC(sx_pack_bin(&own, text, n + 1), 0);
        size_t at = own.len - (n + 1), before = own.len;
        CHECK_RC(sx_pack_str(&own, (const char *)own.data + at), 0);
        CHECK(own.len - before == want.len &&
              memcmp(own.data + before, want.data, want.len) == 0);
        sx_pack_fini(&own);
        sx_pack_fini(&want);
    }
}

/* Binaries of each length class (bin8/16/32 at 255/256/65535/65536) pack
 * with the smallest header and read back byte for byte. */
static void test_bin_sizes(void)
{
    static const struct {
        size_t n, hlen;
        uint8_t marker;
    } cases[] = {
        { 0, 2, 0xc4 },      { 1, 2, 0xc4 },     { 255, 2, 0xc4 },
        { 256, 3, 0xc5 },    { 65535, 3, 0xc5 }, { 65536, 5, 0xc6 },
        { 100000, 5, 0xc6 },
    };
    uint8_t *blob = malloc(100000);
    CHECK(blob != NULL);
    for (size_t i = 0; i < 100000; i++)
        blob[i] = (uint8_t)(i * 7 + 3);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sx_pack pk;
        sx_pack_init(&pk);
        CHECK_RC(sx_pack_bin(&pk, cases[i].n ? blob : NULL, cases[i].n), 0);
        CHECK_EQ_U64(pk.len, cases[i].hlen + cases[i].n);
        CHECK_EQ_INT(pk.data[0], cases[i].marker);
        sx_unpack u;
        const void *p;
        size_t n;
        sx_unpack_init(&u, sx_pack_payload(&pk));
        CHECK_EQ_INT(sx_unpack_type(&u), SX_MP_BIN);
        CHECK_NOMOVE(&u, sx_unpack_str(&u, NULL, NULL), SX_EPROTO);
        CHECK_RC(sx_unpack_bin(&u, &p, &n), 0);
        CHECK_EQ_U64(n, cases[i].n);
        CHECK(n == 0 || memcmp(p, blob, n) == 0);
        CHECK(sx_unpack_done(&u));
        sx_pack_fini(&pk);
    }
    free(blob);
}

/* Arrays and maps of 0/15/16/65535/65536 elements pack with the smallest
 * header, read back element by element, and skip as one value. */
static void test_container_sizes(void)
{
    static const struct {
        uint32_t n;
        size_t hlen;
        uint8_t amark, mmark;
    } cases[] = {
        { 0, 1, 0x90, 0x80 },     { 15, 1, 0x9f, 0x8f },
        { 16, 3, 0xdc, 0xde },    { 65535, 3, 0xdc, 0xde },
        { 65536, 5, 0xdd, 0xdf }, { 70000, 5, 0xdd, 0xdf },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int map = 0; map < 2; map++) {
            sx_pack pk;
            sx_pack_init(&pk);
            CHECK_RC(map ? sx_pack_map(&pk, cases[i].n)
                         : sx_pack_array(&pk, cases[i].n),
                     0);
            CHECK_EQ_U64(pk.len, cases[i].hlen);
            CHECK_EQ_INT(pk.data[0], map ? cases[i].mmark : cases[i].amark);
            for (uint32_t k = 0; k < cases[i].n; k++) {
                CHECK_RC(sx_pack_uint(&pk, k), 0);
                if (map)
                    CHECK_RC(sx_pack_bool(&pk, k & 1), 0);
            }
            sx_unpack u;
            uint32_t n;
            sx_unpack_init(&u, sx_pack_payload(&pk));
            CHECK_EQ_INT(sx_unpack_type(&u), map ? SX_MP_MAP : SX_MP_ARRAY);
            CHECK_NOMOVE(&u,
                         map ? sx_unpack_array(&u, &n) : sx_unpack_map(&u, &n),
                         SX_EPROTO);
            CHECK_RC(map ? sx_unpack_map(&u, &n) : sx_unpack_array(&u, &n), 0);
            CHECK_EQ_U64(n, cases[i].n);
            for (uint32_t k = 0; k < n; k++) {
                uint64_t v;
                bool b;
                CHECK_RC(sx_unpack_uint(&u, &v), 0);
                CHECK_EQ_U64(v, k);
                if (map) {
                    CHECK_RC(sx_unpack_bool(&u, &b), 0);
                    CHECK(b == (bool)(k & 1));
                }
            }
            CHECK(sx_unpack_done(&u));
            size_t used;
            CHECK_RC(skip_exact(pk.data, pk.len, &used), 0);
            CHECK_EQ_U64(used, pk.len);
            sx_pack_fini(&pk);
        }
    }
}

/* ---- ext ---- */

/* Appends an ext value in the given form: marker 0xd4..0xd8 (fixext, n
 * implied) or 0xc7..0xc9 (ext8/16/32). */
static void tb_ext(tbuf *b, uint8_t marker, int8_t type, size_t n)
{
    tb_byte(b, marker);
    if (marker >= 0xc7 && marker <= 0xc9)
        tb_be(b, n, (size_t)1 << (marker - 0xc7));
    tb_byte(b, (uint8_t)type);
    for (size_t i = 0; i < n; i++)
        tb_byte(b, (uint8_t)i);
}

/* Every ext form (fixext1..16, ext8/16/32, empty ext8) is typed SX_MP_EXT,
 * skipped whole and returned whole by raw, and no typed reader accepts it
 * (a non-sticky mismatch). */
static void test_ext_all_forms(void)
{
    static const struct {
        uint8_t marker;
        size_t n, total;
    } cases[] = {
        { 0xd4, 1, 3 },     { 0xd5, 2, 4 },     { 0xd6, 4, 6 },
        { 0xd7, 8, 10 },    { 0xd8, 16, 18 },   { 0xc7, 0, 3 },
        { 0xc7, 200, 203 }, { 0xc8, 300, 304 }, { 0xc9, 70000, 70006 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tbuf b = { 0 };
        tb_ext(&b, cases[i].marker, -1, cases[i].n);
        CHECK_EQ_U64(b.n, cases[i].total);
        tb_byte(&b, 0x2a); /* a trailing 42 */
        uint8_t *q = dup_exact(b.p, b.n);
        sx_unpack u;
        sx_payload raw;
        sx_unpack_init(&u, pl_of(q, b.n));
        CHECK_EQ_INT(sx_unpack_type(&u), SX_MP_EXT);
        CHECK_NOMOVE(&u, sx_unpack_nil(&u), SX_EPROTO);
        CHECK_NOMOVE(&u, sx_unpack_int(&u, NULL), SX_EPROTO);
        CHECK_NOMOVE(&u, sx_unpack_str(&u, NULL, NULL), SX_EPROTO);
        CHECK_NOMOVE(&u, sx_unpack_bin(&u, NULL, NULL), SX_EPROTO);
        CHECK_NOMOVE(&u, sx_unpack_array(&u, NULL), SX_EPROTO);
        CHECK_RC(sx_unpack_raw(&u, &raw), 0);
        CHECK(raw.data == q && raw.len == cases[i].total);
        int64_t v;
        CHECK_RC(sx_unpack_int(&u, &v), 0);
        CHECK_EQ_INT(v, 42);
        CHECK(sx_unpack_done(&u));
        /* One byte short of the body: sticky SX_EPROTO everywhere. */
        size_t used;
        CHECK_RC(skip_exact(q, cases[i].total - 1, &used), SX_EPROTO);
        sx_unpack_init(&u, pl_of(q, cases[i].total - 1));
        CHECK_RC(sx_unpack_type(&u), SX_EPROTO);
        free(q);
        free(b.p);
    }
}

/* ---- PIDs ---- */

/* A PID packs as [node, host, id] and reads back, also from its text form
 * and at the maximum values. Well-formed values that are not PIDs are
 * non-sticky mismatches (SX_EPROTO, or SX_ELIMIT for a part out of range);
 * a truncated element is sticky. */
static void test_pid_values(void)
{
    static const sx_pid pids[] = {
        { 0, 0, 0 },
        { 1, 2, 3 },
        { UINT32_MAX, UINT32_MAX, UINT64_MAX },
        { 128, 65536, 4294967296ULL },
    };
    for (size_t i = 0; i < sizeof(pids) / sizeof(pids[0]); i++) {
        sx_pack pk;
        sx_pid got;
        char text[SX_PID_TEXT_MAX];
        sx_pack_init(&pk);
        CHECK_RC(sx_pack_pid(&pk, pids[i]), 0);
        CHECK_EQ_INT(pk.data[0], 0x93);
        CHECK(sx_pid_format(pids[i], text, sizeof(text)) > 0);
        CHECK_RC(sx_pack_str(&pk, text), 0);
        sx_unpack u;
        sx_unpack_init(&u, sx_pack_payload(&pk));
        for (int k = 0; k < 2; k++) {
            memset(&got, 0xab, sizeof(got));
            CHECK_RC(sx_unpack_pid(&u, &got), 0);
            CHECK(sx_pid_eq(got, pids[i]));
        }
        CHECK(sx_unpack_done(&u));
        sx_pack_fini(&pk);
    }

    /* Each entry is one well-formed value that is not a PID. */
    static const struct {
        const char *bytes;
        size_t len;
        int rc;
    } bad[] = {
        { "\x92\x01\x02", 3, SX_EPROTO },                      /* [1, 2] */
        { "\x94\x01\x02\x03\x04", 5, SX_EPROTO },              /* 4 parts */
        { "\x93\x01\xa1x\x03", 5, SX_EPROTO },                 /* [1, "x", 3] */
        { "\x93\x01\x02\xc0", 4, SX_EPROTO },                  /* id nil */
        { "\x93\x01\x02\xcb\0\0\0\0\0\0\0\0", 12, SX_EPROTO }, /* id 0.0 */
        { "\x93\xcf\0\0\0\1\0\0\0\0\x02\x03", 12, SX_ELIMIT }, /* node 2^32 */
        { "\x93\x01\x02\xff", 4, SX_ELIMIT },                  /* id -1 */
        { "\x83\x01\x02\x03\x04\x05\x06", 7, SX_EPROTO },      /* a map */
        { "\x03", 1, SX_EPROTO },                              /* an int */
        { "\xa7{1@2|3", 8, SX_EPROTO },                        /* bad text */
        { "\xa9{1@2|3}\0x", 10, SX_EPROTO },                   /* NUL inside */
        { "\xa8{1@2|3} ", 9, SX_EPROTO }, /* trailing space */
        { "\xa0", 1, SX_EPROTO },         /* "" */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t *q = dup_exact(bad[i].bytes, bad[i].len);
        sx_unpack u;
        sx_pid got = { 7, 7, 7 };
        sx_unpack_init(&u, pl_of(q, bad[i].len));
        CHECK_NOMOVE(&u, sx_unpack_pid(&u, &got), bad[i].rc);
        CHECK(got.node == 7 && got.host == 7 && got.id == 7);
        CHECK_RC(sx_unpack_skip(&u), 0);
        CHECK(sx_unpack_done(&u));
        free(q);
    }

    /* The text form may carry leading zeros up to SX_PID_TEXT_MAX - 1
     * characters; one more is refused by the reader even though
     * sx_pid_parse would accept it. */
    for (size_t len = SX_PID_TEXT_MAX - 1; len <= SX_PID_TEXT_MAX; len++) {
        char text[SX_PID_TEXT_MAX + 1];
        sx_pid parsed, got;
        memset(text, '0', sizeof(text));
        text[0] = '{';
        memcpy(text + len - 6, "1@2|3}", 7);
        CHECK_EQ_U64(strlen(text), len);
        CHECK_RC(sx_pid_parse(text, &parsed), 0);
        sx_pack pk;
        sx_pack_init(&pk);
        CHECK_RC(sx_pack_str(&pk, text), 0);
        sx_unpack u;
        sx_unpack_init(&u, sx_pack_payload(&pk));
        if (len < SX_PID_TEXT_MAX) {
            CHECK_RC(sx_unpack_pid(&u, &got), 0);
            CHECK(sx_pid_eq(got, parsed));
        } else {
            CHECK_NOMOVE(&u, sx_unpack_pid(&u, NULL), SX_EPROTO);
        }
        sx_pack_fini(&pk);
    }
    sx_unpack u;

    /* A truncated element is malformed data: sticky. */
    static const uint8_t cut[] = { 0x93, 0x01, 0x02, 0xcd, 0x01 };
    uint8_t *q = dup_exact(cut, sizeof(cut));
    sx_unpack_init(&u, pl_of(q, sizeof(cut)));
    CHECK_RC(sx_unpack_pid(&u, NULL), SX_EPROTO);
    CHECK_RC(u.err, SX_EPROTO);
    CHECK(u.p == q);
    free(q);
}

/* ---- writer buffers ---- */

/* Packs a fixed sequence of calls of assorted sizes into pk and records in
 * ends[] (when not NULL) pk->len after each call; returns the number of
 * calls. */
static size_t pack_sequence(sx_pack *pk, size_t *ends)
{
    static const uint8_t blob[40] = { 1, 2, 3 };
    size_t k = 0;
#define STEP(call)                                                             \
    do {                                                                       \
        (void)(call);                                                          \
        if (ends != NULL)                                                      \
            ends[k] = pk->len;                                                 \
        k++;                                                                   \
    } while (0)
    STEP(sx_pack_array(pk, 3));
    STEP(sx_pack_int(pk, -100000));
    STEP(sx_pack_str(pk, "a string that takes a str8 header!"));
    STEP(sx_pack_double(pk, 2.5));
    STEP(sx_pack_map(pk, 1));
    STEP(sx_pack_pid(pk, (sx_pid){ 1, 2, 1ULL << 40 }));
    STEP(sx_pack_bin(pk, blob, sizeof(blob)));
    STEP(sx_pack_raw(pk, pl_of("\x92\x01\xc3", 3)));
    STEP(sx_pack_raw(pk, pl_of(NULL, 0)));
    STEP(sx_pack_uint(pk, UINT64_MAX));
    STEP(sx_pack_nil(pk));
    STEP(sx_pack_bool(pk, true));
#undef STEP
    return k;
}

/* A fixed buffer of every capacity short of the whole sequence ends in a
 * sticky SX_ELIMIT and keeps exactly the calls that fit before the first
 * one that did not (a failed call is rolled back, never half-written, and
 * nothing is written past cap); reset clears the error and keeps the
 * storage. */
static void test_fixed_overflow(void)
{
    size_t ends[16];
    sx_pack heap;
    sx_pack_init(&heap);
    size_t calls = pack_sequence(&heap, ends);
    CHECK_RC(heap.err, 0);
    size_t total = heap.len;

    for (size_t cap = 0; cap <= total; cap++) {
        uint8_t *buf = malloc(cap ? cap : 1);
        sx_pack pk;
        CHECK(buf != NULL);
        sx_pack_init_fixed(&pk, buf, cap);
        pack_sequence(&pk, NULL);
        if (cap == total) {
            CHECK_RC(pk.err, 0);
            CHECK(memcmp(buf, heap.data, total) == 0);
        } else {
            size_t want = 0;
            for (size_t k = 0; k < calls && ends[k] <= cap; k++)
                want = ends[k];
            CHECK_RC(pk.err, SX_ELIMIT);
            CHECK_EQ_U64(pk.len, want);
            CHECK(memcmp(buf, heap.data, pk.len) == 0);
            CHECK_RC(sx_pack_nil(&pk), SX_ELIMIT);
            CHECK_RC(sx_pack_raw(&pk, pl_of(NULL, 0)), SX_ELIMIT);
            CHECK_EQ_U64(pk.len, want);
            sx_pack_reset(&pk);
            CHECK_RC(pk.err, 0);
            CHECK_EQ_U64(pk.len, 0);
            if (cap > 0)
                CHECK_RC(sx_pack_nil(&pk), 0);
        }
        free(buf);
    }
    sx_pack_fini(&heap);

    /* sx_payload_int never overflows its 9 bytes. */
    uint8_t small[SX_PAYLOAD_INT_MAX];
    CHECK_EQ_U64(sx_payload_int(small, INT64_MIN).len, 9);
}

/* A heap writer grows across many reallocations and reads back intact; a
 * body taken from its own bytes survives the move; fini leaves an empty
 * writer that can be used again; reset keeps the storage. */
static void test_heap_growth(void)
{
    sx_pack pk;
    sx_pack_init(&pk);
    for (int64_t i = 0; i < 100000; i++)
        CHECK_RC(sx_pack_int(&pk, i * 977 - 50000000), 0);
    sx_unpack u;
    sx_unpack_init(&u, sx_pack_payload(&pk));
    for (int64_t i = 0; i < 100000; i++) {
        int64_t v;
        CHECK_RC(sx_unpack_int(&u, &v), 0);
        CHECK_EQ_INT(v, i * 977 - 50000000);
    }
    CHECK(sx_unpack_done(&u));
    size_t cap = pk.cap;
    sx_pack_reset(&pk);
    CHECK(pk.cap == cap && pk.data != NULL && pk.len == 0);
    sx_pack_fini(&pk);
    CHECK(pk.data == NULL && pk.len == 0 && pk.cap == 0 && pk.err == 0);

    /* Appending pk's own bytes again and again doubles it each time. */
    CHECK_RC(sx_pack_str(&pk, "0123456789012345678901234567890123456789"), 0);
    size_t one = pk.len;
    for (int k = 0; k < 8; k++) {
        sx_payload self = { pk.data, one };
        CHECK_RC(sx_pack_raw(&pk, self), 0);
    }
    sx_unpack_init(&u, sx_pack_payload(&pk));
    for (int k = 0; k < 9; k++) {
        const char *s;
        size_t n;
        CHECK_RC(sx_unpack_str(&u, &s, &n), 0);
        CHECK(n == 40 && memcmp(s, "0123456789", 10) == 0);
    }
    CHECK(sx_unpack_done(&u));
    sx_pack_fini(&pk);
}

/* A string or binary taken from the writer's own bytes (a string read back
 * from pk and packed again) comes out intact even when writing its header
 * moves the storage: with pk full to the byte, the header's write grows it,
 * and the body must then be read from the new storage, not the freed one
 * (reading the freed one is a heap-use-after-free under ASan; in a plain
 * build the copy holds allocator bytes). */
static void test_pack_own_bytes(void)
{
    for (int bin = 0; bin < 2; bin++) {
        for (size_t fill = 0; fill < 300; fill++) {
            sx_pack pk;
            char text[300];
            for (size_t i = 0; i < fill; i++)
                text[i] = (char)('a' + i % 26);
            sx_pack_init(&pk);
            CHECK_RC(sx_pack_strn(&pk, text, fill), 0);
            /* A block after pk's storage: realloc cannot grow it in place,
             * so the freed block's first bytes get the allocator's own. */
            void *spacer = malloc(1);
            CHECK(spacer != NULL);
            /* The body is the text just written, at the end of pk. */
            size_t n = fill;
            const uint8_t *src = pk.data + pk.len - n;
            int rc = bin ? sx_pack_bin(&pk, src, n)
                         : sx_pack_strn(&pk, (const char *)src, n);
            free(spacer);
            CHECK_RC(rc, 0);
            sx_unpack u;
            const void *body;
            size_t len;
            sx_unpack_init(&u, sx_pack_payload(&pk));
            CHECK_RC(sx_unpack_skip(&u), 0);
            if (bin)
                CHECK_RC(sx_unpack_bin(&u, &body, &len), 0);
            else
                CHECK_RC(sx_unpack_str(&u, (const char **)&body, &len), 0);
            CHECK_EQ_U64(len, n);
            CHECK(memcmp(body, text, n) == 0);
            CHECK(sx_unpack_done(&u));
            sx_pack_fini(&pk);
        }
    }
}

/* sx_pack_raw appends exactly one well-formed value; an empty payload is
 * nil; anything else (two values, a truncated value, a reserved byte, too
 * deep) is a sticky error that writes nothing. */
static void test_pack_raw(void)
{
    static const struct {
        const char *bytes;
        size_t len;
        int rc;
    } cases[] = {
        { "\x01", 1, 0 },
        { "\x92\xa1x\xc0", 4, 0 },
        { "\x01\x02", 2, SX_EPROTO },
        { "\x92\x01", 2, SX_EPROTO },
        { "\xc1", 1, SX_EPROTO },
        { "\xd9\x05"
          "abc",
          5, SX_EPROTO },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sx_pack pk;
        uint8_t *q = dup_exact(cases[i].bytes, cases[i].len);
        sx_pack_init(&pk);
        CHECK_RC(sx_pack_nil(&pk), 0);
        CHECK_RC(sx_pack_raw(&pk, pl_of(q, cases[i].len)), cases[i].rc);
        if (cases[i].rc == 0) {
            CHECK_EQ_U64(pk.len, 1 + cases[i].len);
            CHECK(memcmp(pk.data + 1, q, cases[i].len) == 0);
        } else {
            CHECK_EQ_U64(pk.len, 1);
            CHECK_RC(sx_pack_nil(&pk), cases[i].rc);
        }
        sx_pack_fini(&pk);
        free(q);
    }
    sx_pack pk;
    sx_pack_init(&pk);
    CHECK_RC(sx_pack_raw(&pk, pl_of(NULL, 0)), 0);
    CHECK(pk.len == 1 && pk.data[0] == 0xc0);
    sx_pack_fini(&pk);
}

/* ---- reader contract ---- */

/* NULL cursors and writers are SX_EINVAL; NULL outputs discard the value; a
 * payload with NULL data and a non-zero length is a sticky SX_EINVAL. */
static void test_null_args(void)
{
    CHECK_RC(sx_pack_nil(NULL), SX_EINVAL);
    CHECK_RC(sx_pack_int(NULL, 1), SX_EINVAL);
    CHECK_RC(sx_pack_raw(NULL, pl_of(NULL, 0)), SX_EINVAL);
    CHECK(sx_pack_payload(NULL).len == 0);
    sx_pack_init(NULL);
    sx_pack_fini(NULL);
    sx_pack_reset(NULL);
    CHECK_RC(sx_unpack_int(NULL, NULL), SX_EINVAL);
    CHECK_RC(sx_unpack_type(NULL), SX_EINVAL);
    CHECK_RC(sx_unpack_skip(NULL), SX_EINVAL);
    CHECK_RC(sx_unpack_raw(NULL, NULL), SX_EINVAL);
    CHECK(sx_unpack_done(NULL));
    CHECK_RC(sx_payload_get_str(pl_of("\xa1x", 2), NULL, 4), SX_EINVAL);

    sx_unpack u;
    sx_unpack_init(&u, pl_of(NULL, 5));
    CHECK_RC(sx_unpack_nil(&u), SX_EINVAL);
    CHECK_RC(sx_unpack_type(&u), SX_EINVAL);

    static const uint8_t all[] = { 0x93, 0x01, 0xa1, 'x', 0xc4, 0x01, 0x00 };
    sx_unpack_init(&u, pl_of(all, sizeof(all)));
    CHECK_RC(sx_unpack_array(&u, NULL), 0);
    CHECK_RC(sx_unpack_int(&u, NULL), 0);
    CHECK_RC(sx_unpack_str(&u, NULL, NULL), 0);
    CHECK_RC(sx_unpack_bin(&u, NULL, NULL), 0);
    CHECK(sx_unpack_done(&u));
}

/* The next value of each type is refused by every reader of another type
 * without moving the cursor or setting err, sx_unpack_type names it, and the
 * right reader then succeeds. */
static void test_mismatch_does_not_move(void)
{
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_nil(&pk);
    sx_pack_bool(&pk, true);
    sx_pack_int(&pk, -5);
    sx_pack_double(&pk, 1.25);
    sx_pack_str(&pk, "s");
    sx_pack_bin(&pk, "b", 1);
    sx_pack_array(&pk, 0);
    sx_pack_map(&pk, 0);
    CHECK_RC(pk.err, 0);
    static const int types[] = { SX_MP_NIL,   SX_MP_BOOL, SX_MP_INT,
                                 SX_MP_FLOAT, SX_MP_STR,  SX_MP_BIN,
                                 SX_MP_ARRAY, SX_MP_MAP };
    sx_unpack u;
    sx_unpack_init(&u, sx_pack_payload(&pk));
    for (size_t i = 0; i < 8; i++) {
        int t = types[i];
        CHECK_EQ_INT(sx_unpack_type(&u), t);
        if (t != SX_MP_NIL)
            CHECK_NOMOVE(&u, sx_unpack_nil(&u), SX_EPROTO);
        if (t != SX_MP_BOOL)
            CHECK_NOMOVE(&u, sx_unpack_bool(&u, NULL), SX_EPROTO);
        if (t != SX_MP_INT) {
            CHECK_NOMOVE(&u, sx_unpack_int(&u, NULL), SX_EPROTO);
            CHECK_NOMOVE(&u, sx_unpack_uint(&u, NULL), SX_EPROTO);
        }
        if (t != SX_MP_INT && t != SX_MP_FLOAT)
            CHECK_NOMOVE(&u, sx_unpack_double(&u, NULL), SX_EPROTO);
        if (t != SX_MP_STR) {
            CHECK_NOMOVE(&u, sx_unpack_str(&u, NULL, NULL), SX_EPROTO);
            CHECK_NOMOVE(&u, sx_unpack_pid(&u, NULL), SX_EPROTO);
        }
        if (t != SX_MP_BIN)
            CHECK_NOMOVE(&u, sx_unpack_bin(&u, NULL, NULL), SX_EPROTO);
        if (t != SX_MP_ARRAY)
            CHECK_NOMOVE(&u, sx_unpack_array(&u, NULL), SX_EPROTO);
        if (t != SX_MP_MAP)
            CHECK_NOMOVE(&u, sx_unpack_map(&u, NULL), SX_EPROTO);
        const uint8_t *p0 = u.p;
        switch (t) {
        case SX_MP_NIL:
            CHECK_RC(sx_unpack_nil(&u), 0);
            break;
        case SX_MP_BOOL:
            CHECK_RC(sx_unpack_bool(&u, NULL), 0);
            break;
        case SX_MP_INT:
            CHECK_NOMOVE(&u, sx_unpack_uint(&u, NULL), SX_ELIMIT);
            CHECK_RC(sx_unpack_int(&u, NULL), 0);
            break;
        case SX_MP_FLOAT:
            CHECK_RC(sx_unpack_double(&u, NULL), 0);
            break;
        case SX_MP_STR:
            CHECK_NOMOVE(&u, sx_unpack_pid(&u, NULL), SX_EPROTO);
            CHECK_RC(sx_unpack_str(&u, NULL, NULL), 0);
            break;
        case SX_MP_BIN:
            CHECK_RC(sx_unpack_bin(&u, NULL, NULL), 0);
            break;
        case SX_MP_ARRAY:
            CHECK_RC(sx_unpack_array(&u, NULL), 0);
            break;
        default:
            CHECK_RC(sx_unpack_map(&u, NULL), 0);
            break;
        }
        CHECK(u.p > p0);
    }
    CHECK(sx_unpack_done(&u));
    sx_pack_fini(&pk);
}

/* Malformed data sets a sticky SX_EPROTO: every later call, of any type,
 * returns it and the cursor stays at the bad value. Reading past the last
 * value is the same. The reserved byte 0xc1 is malformed wherever it is. */
static void test_sticky_errors(void)
{
    static const uint8_t bad[] = { 0x01, 0xc1, 0x02 };
    uint8_t *q = dup_exact(bad, sizeof(bad));
    sx_unpack u;
    sx_unpack_init(&u, pl_of(q, sizeof(bad)));
    CHECK_RC(sx_unpack_int(&u, NULL), 0);
    CHECK_RC(sx_unpack_type(&u), SX_EPROTO);
    CHECK_RC(u.err, 0); /* type only looks */
    CHECK_RC(sx_unpack_int(&u, NULL), SX_EPROTO);
    CHECK_RC(u.err, SX_EPROTO);
    CHECK(u.p == q + 1);
    CHECK_RC(sx_unpack_nil(&u), SX_EPROTO);
    CHECK_RC(sx_unpack_skip(&u), SX_EPROTO);
    CHECK_RC(sx_unpack_raw(&u, NULL), SX_EPROTO);
    CHECK_RC(sx_unpack_type(&u), SX_EPROTO);
    CHECK_RC(sx_unpack_str(&u, NULL, NULL), SX_EPROTO);
    CHECK(u.p == q + 1);
    free(q);

    static const uint8_t nested[] = { 0x92, 0x01, 0xc1 };
    CHECK_RC(skip_exact(nested, sizeof(nested), NULL), SX_EPROTO);

    static const uint8_t one[] = { 0x07 };
    q = dup_exact(one, 1);
    sx_unpack_init(&u, pl_of(q, 1));
    CHECK_RC(sx_unpack_int(&u, NULL), 0);
    CHECK(sx_unpack_done(&u));
    CHECK_RC(sx_unpack_type(&u), SX_EPROTO);
    CHECK_RC(sx_unpack_nil(&u), SX_EPROTO);
    CHECK_RC(u.err, SX_EPROTO);
    free(q);
}

/* An empty payload reads as exactly one nil (the header: "len 0 stands for
 * nil"), and is not an int or a string. */
static void test_empty_payload_is_nil(void)
{
    sx_unpack u;
    sx_payload raw;
    sx_unpack_init(&u, pl_of(NULL, 0));
    CHECK(!sx_unpack_done(&u));
    CHECK_EQ_INT(sx_unpack_type(&u), SX_MP_NIL);
    CHECK_RC(sx_unpack_nil(&u), 0);
    CHECK(sx_unpack_done(&u));
    sx_unpack_init(&u, pl_of("", 0));
    CHECK_RC(sx_unpack_raw(&u, &raw), 0);
    CHECK(raw.len == 1 && raw.data[0] == 0xc0);
    int64_t v = 5;
    char buf[4] = "xyz";
    CHECK_RC(sx_payload_get_int(pl_of(NULL, 0), &v), SX_EPROTO);
    CHECK_EQ_INT(v, 5);
    CHECK_RC(sx_payload_get_str(pl_of(NULL, 0), buf, sizeof(buf)), SX_EPROTO);
    CHECK_STR(buf, "");
}

/* The one-value shortcuts take exactly one value: trailing bytes, another
 * type, or a string that does not fit (with its NUL) are errors, and on
 * error the string buffer holds "". */
static void test_payload_get(void)
{
    int64_t v = 0;
    CHECK_RC(sx_payload_get_int(pl_of("\xd1\xff\x00", 3), &v), 0);
    CHECK_EQ_INT(v, -256);
    v = 9;
    CHECK_RC(sx_payload_get_int(pl_of("\x01\x02", 2), &v), SX_EPROTO);
    CHECK_RC(sx_payload_get_int(pl_of("\xa1x", 2), &v), SX_EPROTO);
    CHECK_RC(sx_payload_get_int(pl_of("\xcd\x01", 2), &v), SX_EPROTO);
    /* A uint64 above INT64_MAX: SX_ELIMIT alone, SX_EPROTO with a byte
     * after it (not one value, so not SX_ELIMIT). */
    CHECK_RC(sx_payload_get_int(
                 pl_of("\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 9), &v),
             SX_ELIMIT);
    CHECK_RC(sx_payload_get_int(
                 pl_of("\xcf\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10), &v),
             SX_EPROTO);
    CHECK_EQ_INT(v, 9);

    char buf[8];
    CHECK_RC(sx_payload_get_str(pl_of("\xa5hello", 6), buf, 6), 0);
    CHECK_STR(buf, "hello");
    memcpy(buf, "junk", 5);
    CHECK_RC(sx_payload_get_str(pl_of("\xa5hello", 6), buf, 5), SX_ELIMIT);
    CHECK_STR(buf, "");
    CHECK_RC(sx_payload_get_str(pl_of("\xa5hello", 6), buf, 0), SX_ELIMIT);
    CHECK_RC(sx_payload_get_str(pl_of("\xa0", 1), buf, 1), 0);
    CHECK_STR(buf, "");
    memcpy(buf, "junk", 5);
    CHECK_RC(sx_payload_get_str(pl_of("\xa1x\xc0", 3), buf, 8), SX_EPROTO);
    CHECK_STR(buf, "");
    CHECK_RC(sx_payload_get_str(pl_of("\x01", 1), buf, 8), SX_EPROTO);
    CHECK_RC(sx_payload_get_str(pl_of("\xa3x", 2), buf, 8), SX_EPROTO);
}

/* ---- hostile input ---- */

/* Builds one composite value that uses every kind of header. */
static void build_composite(tbuf *b)
{
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_map(&pk, 4);
    sx_pack_str(&pk, "ints");
    sx_pack_array(&pk, 8);
    sx_pack_int(&pk, 1);
    sx_pack_int(&pk, -1);
    sx_pack_int(&pk, 200);
    sx_pack_int(&pk, -200);
    sx_pack_int(&pk, 70000);
    sx_pack_int(&pk, -70000);
    sx_pack_uint(&pk, UINT64_MAX);
    sx_pack_int(&pk, INT64_MIN);
    sx_pack_str(&pk, "mixed");
    sx_pack_array(&pk, 17);
    sx_pack_nil(&pk);
    sx_pack_bool(&pk, false);
    sx_pack_double(&pk, 3.5);
    sx_pack_bin(&pk, "\x00\x01\x02", 3);
    sx_pack_strn(&pk, "0123456789012345678901234567890123456789", 40);
    sx_pack_pid(&pk, (sx_pid){ 9, 8, 7 });
    for (int i = 0; i < 10; i++)
        sx_pack_int(&pk, i);
    tb_take(b, &pk);
    tb_ext(b, 0xd6, 5, 4); /* the 17th element */
    sx_pack_str(&pk, "ext");
    tb_take(b, &pk);
    tb_ext(b, 0xc8, -3, 20);
    sx_pack_str(&pk, "deep");
    sx_pack_map(&pk, 16);
    for (int i = 0; i < 16; i++) {
        sx_pack_int(&pk, i);
        sx_pack_array(&pk, 1);
        sx_pack_map(&pk, 0);
    }
    tb_take(b, &pk);
    sx_pack_fini(&pk);
}

/* Reads a whole value with the typed readers, dispatching on its type; returns
 * 0 or the first error. */
static int walk_typed(sx_unpack *u, int depth)
{
    uint32_t n;
    int t = sx_unpack_type(u), rc;
    if (t < 0)
        return t;
    if (depth > 200)
        return SX_ELIMIT;
    switch (t) {
    case SX_MP_NIL:
        return sx_unpack_nil(u);
    case SX_MP_BOOL:
        return sx_unpack_bool(u, NULL);
    case SX_MP_INT: {
        uint64_t v;
        rc = sx_unpack_uint(u, &v);
        return rc == SX_ELIMIT ? sx_unpack_int(u, NULL) : rc;
    }
    case SX_MP_FLOAT:
        return sx_unpack_double(u, NULL);
    case SX_MP_STR:
        return sx_unpack_str(u, NULL, NULL);
    case SX_MP_BIN:
        return sx_unpack_bin(u, NULL, NULL);
    case SX_MP_EXT:
        return sx_unpack_skip(u);
    case SX_MP_ARRAY:
    case SX_MP_MAP:
        rc = t == SX_MP_ARRAY ? sx_unpack_array(u, &n) : sx_unpack_map(u, &n);
        for (uint64_t i = 0; rc == 0 && i < (t == SX_MP_MAP ? 2ULL : 1ULL) * n;
             i++)
            rc = walk_typed(u, depth + 1);
        return rc;
    default:
        return SX_EPROTO;
    }
}

/* Checks one input against skip, raw, the typed walk and sx_pack_raw: all
 * succeed consuming whole (want 0) or all fail with want. */
static void check_input(const uint8_t *p, size_t n, int want)
{
    uint8_t *q = dup_exact(p, n);
    size_t used;
    sx_unpack u;
    sx_payload raw = { NULL, 0 };
    CHECK_RC(skip_exact(q, n, &used), want);
    sx_unpack_init(&u, pl_of(q, n));
    CHECK_RC(sx_unpack_raw(&u, &raw), want);
    if (want == 0)
        CHECK(raw.data == q && raw.len == n);
    sx_unpack_init(&u, pl_of(q, n));
    if (want == 0) {
        CHECK_RC(walk_typed(&u, 0), 0);
        CHECK(sx_unpack_done(&u));
    } else if (want == SX_EPROTO) {
        CHECK_RC(walk_typed(&u, 0), SX_EPROTO);
    }
    sx_pack pk;
    sx_pack_init(&pk);
    CHECK_RC(sx_pack_raw(&pk, pl_of(q, n)), want);
    sx_pack_fini(&pk);
    free(q);
}

/* Every proper prefix of a composite value (each cut inside a header, a
 * length, a body or between elements) is SX_EPROTO for skip, raw, the typed
 * readers and sx_pack_raw, and nothing reads past the cut (ASan). (The
 * empty prefix is nil: see empty_payload_is_nil.) */
static void test_truncation_every_prefix(void)
{
    tbuf b = { 0 };
    build_composite(&b);
    check_input(b.p, b.n, 0);
    for (size_t k = 1; k < b.n; k++)
        check_input(b.p, k, SX_EPROTO);
    free(b.p);
}

/* Values whose first byte says their whole length (integers of every
 * width, nil, bools, floats, fixstrs) and fix containers, which the reader
 * takes in one look: whole, each reads exactly its bytes; every proper
 * prefix is a sticky SX_EPROTO for raw and the typed read, the cursor left
 * at the value; and a fixarray or fixmap claiming more elements than
 * bytes remain fails the same way. */
static void test_one_look_values(void)
{
    static const uint8_t vals[][10] = {
        { 1, 0x05 },
        { 1, 0xff },
        { 1, 0xc0 },
        { 1, 0xc3 },
        { 2, 0xcc, 0x80 },
        { 2, 0xd0, 0x80 },
        { 3, 0xcd, 0x01, 0x00 },
        { 3, 0xd1, 0x80, 0x00 },
        { 5, 0xce, 0x00, 0x01, 0x00, 0x00 },
        { 5, 0xd2, 0x80, 0x00, 0x00, 0x00 },
        { 5, 0xca, 0x3f, 0x80, 0x00, 0x00 },
        { 9, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0 },
        { 9, 0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0 },
        { 9, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0 },
        { 1, 0xa0 },
        { 4, 0xa3, 'a', 'b', 'c' },
        { 1, 0x90 },
        { 3, 0x92, 0x01, 0x02 },
        { 1, 0x80 },
        { 3, 0x81, 0x01, 0x02 },
    };
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        size_t n = vals[i][0];
        const uint8_t *v = vals[i] + 1;
        for (size_t k = 1; k <= n; k++) {
            int want = k == n ? 0 : SX_EPROTO;
            uint8_t *q = dup_exact(v, k);
            sx_unpack u;
            sx_payload raw = { NULL, 0 };
            sx_unpack_init(&u, pl_of(q, k));
            CHECK_RC(sx_unpack_raw(&u, &raw), want);
            if (want == 0)
                CHECK(raw.data == q && raw.len == n && sx_unpack_done(&u));
            else
                CHECK(u.err == SX_EPROTO && u.p == q);
            sx_unpack_init(&u, pl_of(q, k));
            uint8_t c = v[0];
            if ((c & 0xe0) == 0xa0) {
                const char *str = NULL;
                size_t len = 99;
                CHECK_RC(sx_unpack_str(&u, &str, &len), want);
                if (want == 0)
                    CHECK(len == (size_t)(c & 0x1f) &&
                          str == (const char *)q + 1 && sx_unpack_done(&u));
            } else if ((c & 0xf0) == 0x90 || (c & 0xf0) == 0x80) {
                uint32_t cnt = 99;
                int rc = (c & 0xf0) == 0x90 ? sx_unpack_array(&u, &cnt)
                                            : sx_unpack_map(&u, &cnt);
                /* The header alone is whole: its elements may follow. */
                bool meets = (k - 1) >=
                             (size_t)(c & 0x0f) * ((c & 0xf0) == 0x80 ? 2 : 1);
                CHECK_RC(rc, meets ? 0 : SX_EPROTO);
                if (meets)
                    CHECK(cnt == (uint32_t)(c & 0x0f) && u.p == q + 1);
            } else {
                CHECK_RC(sx_unpack_skip(&u), want);
            }
            if (want != 0)
                CHECK(u.err == SX_EPROTO && u.p == q);
            free(q);
        }
    }
}

/* Lengths and counts that claim more than the bytes present fail at once
 * with a sticky SX_EPROTO (no allocation, no loop over the claim): 32-bit
 * claims near 4 GiB with 3 bytes behind them, a map whose pair count doubles
 * past 32 bits, and a 4-billion-element array header in front of a million
 * real elements. A count the bytes can meet still reads. */
static void test_huge_claims(void)
{
    static const uint8_t heads[][5] = {
        { 0xdd, 0xff, 0xff, 0xff, 0xff }, { 0xdf, 0xff, 0xff, 0xff, 0xff },
        { 0xdf, 0x80, 0x00, 0x00, 0x00 }, { 0xdb, 0xff, 0xff, 0xff, 0xff },
        { 0xc6, 0xff, 0xff, 0xff, 0xff }, { 0xc9, 0xff, 0xff, 0xff, 0xff },
        { 0xdc, 0xff, 0xff, 0x00, 0x00 }, { 0xde, 0x00, 0x03, 0xc0, 0xc0 },
    };
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        tbuf b = { 0 };
        tb_put(&b, heads[i], 5);
        tb_put(&b, "\xc0\xc0\xc0", 3);
        check_input(b.p, b.n, SX_EPROTO);
        sx_unpack u;
        sx_unpack_init(&u, pl_of(b.p, b.n));
        CHECK_RC(sx_unpack_type(&u), SX_EPROTO);
        CHECK_RC(sx_unpack_array(&u, NULL), SX_EPROTO);
        CHECK_RC(u.err, SX_EPROTO);
        free(b.p);
    }

    tbuf b = { 0 };
    tb_put(&b, "\xdd\xff\xff\xff\xff", 5);
    for (int i = 0; i < 1000000; i++)
        tb_byte(&b, 0xc0);
    /* Walking the claim would take seconds; the check takes microseconds.
     * The bound is loose for loaded machines and sanitizers. */
    double t0 = sx_test_now_ms();
    CHECK_RC(skip_exact(b.p, b.n, NULL), SX_EPROTO);
    CHECK(sx_test_now_ms() - t0 < 500);
    /* The same header claiming exactly what is there reads whole. */
    b.p[1] = 0x00, b.p[2] = 0x0f, b.p[3] = 0x42, b.p[4] = 0x40;
    size_t used;
    CHECK_RC(skip_exact(b.p, b.n, &used), 0);
    CHECK_EQ_U64(used, b.n);
    free(b.p);
}

/* Builds depth nested containers (arrays, or maps keyed by 0) around an
 * innermost value: nil, or an empty container when empty_inner. */
static void build_nested(tbuf *b, int depth, bool maps, bool empty_inner)
{
    for (int i = 0; i < depth; i++) {
        bool last = i == depth - 1;
        uint8_t count = last && empty_inner ? 0 : 1;
        tb_byte(b, (uint8_t)((maps ? 0x80 : 0x90) | count));
        if (maps && count)
            tb_byte(b, 0x00);
    }
    if (!empty_inner)
        tb_byte(b, 0xc0);
}

/* SX_UNPACK_MAX_DEPTH nested containers skip; one more is a sticky SX_ELIMIT
 * for skip, raw and sx_pack_raw, whether the innermost is empty or not and
 * for arrays and maps alike. The typed readers do not recurse and have no
 * limit. A long run of nested headers fails fast. */
static void test_depth_limit(void)
{
    for (int maps = 0; maps < 2; maps++) {
        for (int empty = 0; empty < 2; empty++) {
            tbuf ok = { 0 }, deep = { 0 };
            build_nested(&ok, SX_UNPACK_MAX_DEPTH, maps, empty);
            build_nested(&deep, SX_UNPACK_MAX_DEPTH + 1, maps, empty);
            check_input(ok.p, ok.n, 0);
            check_input(deep.p, deep.n, SX_ELIMIT);
            sx_unpack u;
            sx_unpack_init(&u, pl_of(deep.p, deep.n));
            CHECK_RC(walk_typed(&u, 0), 0);
            CHECK(sx_unpack_done(&u));
            free(ok.p);
            free(deep.p);
        }
    }
    tbuf b = { 0 };
    for (int i = 0; i < 1000000; i++)
        tb_byte(&b, 0x91);
    double t0 = sx_test_now_ms();
    CHECK_RC(skip_exact(b.p, b.n, NULL), SX_ELIMIT);
    CHECK(sx_test_now_ms() - t0 < 500);
    free(b.p);
}

/* ---- cross-check with msgpack-c ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
    /* xorshift64*: fixed seed, so every run checks the same values. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

static uint64_t rng_below(uint64_t n)
{
    return rng() % n;
}

/* A random integer whose magnitude class (bit width) is itself random, so
 * every encoding is hit often. */
static uint64_t rng_int_bits(void)
{
    unsigned w = (unsigned)rng_below(65);
    return w == 64 ? rng() : rng() & (((uint64_t)1 << w) - 1);
}

static size_t rng_len(void)
{
    switch (rng_below(20)) {
    case 0:
        return 200 + rng_below(200); /* 8- and 16-bit lengths */
    case 1:
        return rng_below(10) == 0 ? 65530 + rng_below(20) : 30 + rng_below(4);
    default:
        return rng_below(12);
    }
}

static void gen_value(tbuf *b, sx_pack *scr, int depth, bool raw_forms,
                      bool *minimal);

/* Appends a value in an encoding our writer never produces (an integer in a
 * width that may be too wide, float32, a wide length or count, ext) and
 * clears *minimal; returns false (appending nothing) when it picks a
 * container at depth 0. */
static bool gen_odd(tbuf *b, sx_pack *scr, int depth, bool *minimal)
{
    static const uint8_t ext_marks[] = { 0xd4, 0xd5, 0xd6, 0xd7,
                                         0xd8, 0xc7, 0xc8, 0xc9 };
    switch (rng_below(5)) {
    case 0: {
        uint8_t m = (uint8_t)(0xcc + rng_below(8));
        tb_byte(b, m);
        tb_be(b, rng_int_bits(), (size_t)1 << ((m - 0xcc) & 3));
        break;
    }
    case 1:
        tb_byte(b, 0xca);
        tb_be(b, (uint32_t)rng(), 4);
        break;
    case 2: { /* str8/16/32 or bin8/16/32 */
        size_t n = rng_below(8), w = rng_below(3);
        tb_byte(b, (uint8_t)((rng_below(2) ? 0xd9 : 0xc4) + w));
        tb_be(b, n, (size_t)1 << w);
        for (size_t i = 0; i < n; i++)
            tb_byte(b, (uint8_t)('a' + rng_below(26)));
        break;
    }
    case 3: {
        uint8_t m = ext_marks[rng_below(8)];
        size_t n = m >= 0xd4 ? (size_t)1 << (m - 0xd4) : rng_below(20);
        tb_ext(b, m, (int8_t)rng(), n);
        break;
    }
    default: { /* array16 or map16 with a small count */
        if (depth <= 0)
            return false;
        bool map = rng_below(2);
        uint32_t n = (uint32_t)rng_below(5);
        tb_byte(b, map ? 0xde : 0xdc);
        tb_be(b, n, 2);
        for (uint32_t i = 0; i < (map ? 2 * n : n); i++)
            gen_value(b, scr, depth - 1, true, minimal);
        break;
    }
    }
    *minimal = false;
    return true;
}

/* Appends a random value to b. Minimal encodings go through our writer;
 * with raw_forms, about one value in six comes from gen_odd. */
static void gen_value(tbuf *b, sx_pack *scr, int depth, bool raw_forms,
                      bool *minimal)
{
    unsigned kind = (unsigned)rng_below(depth > 0 ? 11 : 9);
    if (raw_forms && rng_below(6) == 0 && gen_odd(b, scr, depth, minimal))
        return;
    switch (kind) {
    case 0:
        sx_pack_nil(scr);
        break;
    case 1:
        sx_pack_bool(scr, rng_below(2));
        break;
    case 2:
        sx_pack_int(scr, -(int64_t)(rng_int_bits() >> 1));
        break;
    case 3:
        sx_pack_uint(scr, rng_int_bits());
        break;
    case 4: {
        uint64_t bits = rng();
        double d;
        memcpy(&d, &bits, sizeof(d));
        sx_pack_double(scr, d);
        break;
    }
    case 5:
    case 6: {
        size_t n = rng_len();
        char *s = malloc(n + 1);
        CHECK(s != NULL);
        for (size_t i = 0; i < n; i++)
            s[i] = (char)(kind == 5 ? 'a' + rng_below(26) : rng());
        if (kind == 5)
            sx_pack_strn(scr, s, n);
        else
            sx_pack_bin(scr, s, n);
        free(s);
        break;
    }
    case 7: {
        /* One draw per statement: initializers are evaluated in no fixed
         * order, and the sequence must not depend on the compiler. */
        sx_pid pid;
        pid.node = (uint32_t)rng();
        pid.host = (uint32_t)rng();
        pid.id = rng();
        sx_pack_pid(scr, pid);
        break;
    }
    case 8:
        sx_pack_str(scr, "");
        break;
    default: {
        bool map = kind == 10;
        uint32_t n =
            (uint32_t)(rng_below(8) == 0 ? 14 + rng_below(6) : rng_below(5));
        if (map)
            sx_pack_map(scr, n);
        else
            sx_pack_array(scr, n);
        tb_take(b, scr);
        for (uint32_t i = 0; i < (map ? 2 * n : n); i++)
            gen_value(b, scr, depth - 1, raw_forms, minimal);
        return;
    }
    }
    tb_take(b, scr);
}

/* Reads one value with our typed readers and checks it equals o, as decoded
 * by msgpack-c; also checks skip ends where the typed read ends. */
static void check_same(sx_unpack *u, const msgpack_object *o)
{
    sx_unpack c = *u;
    CHECK_RC(sx_unpack_skip(&c), 0);
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        CHECK_EQ_INT(sx_unpack_type(u), SX_MP_NIL);
        CHECK_RC(sx_unpack_nil(u), 0);
        break;
    case MSGPACK_OBJECT_BOOLEAN: {
        bool b;
        CHECK_EQ_INT(sx_unpack_type(u), SX_MP_BOOL);
        CHECK_RC(sx_unpack_bool(u, &b), 0);
        CHECK(b == o->via.boolean);
        break;
    }
    case MSGPACK_OBJECT_POSITIVE_INTEGER: {
        uint64_t v;
        CHECK_EQ_INT(sx_unpack_type(u), SX_MP_INT);
        CHECK_RC(sx_unpack_uint(u, &v), 0);
        CHECK_EQ_U64(v, o->via.u64);
        break;
    }
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: {
        int64_t v;
        CHECK_EQ_INT(sx_unpack_type(u), SX_MP_INT);
        CHECK_RC(sx_unpack_int(u, &v), 0);
        CHECK_EQ_INT(v, o->via.i64);
        break;
    }
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: {
        double d;
        CHECK_EQ_INT(sx_unpack_type(u), SX_MP_FLOAT);
        CHECK_RC(sx_unpack_double(u, &d), 0);
        CHECK(memcmp(&d, &o->via.f64, sizeof(d)) == 0 ||
              (isnan(d) && isnan(o->via.f64)));
        break;
    }
    case MSGPACK_OBJECT_STR: {
        const char *s;
        size_t n;
        CHECK_EQ_INT(sx_unpack_type(u), SX_MP_STR);
        CHECK_RC(sx_unpack_str(u, &s, &n), 0);
        CHECK_EQ_U64(n, o->via.str.size);
        CHECK(n == 0 || memcmp(s, o->via.str.ptr, n) == 0);
        break;
    }
    case MSGPACK_OBJECT_BIN: {
        const void *p;
        size_t n;
        CHECK_EQ_INT(sx_unpack_type(u), SX_MP_BIN);
        CHECK_RC(sx_unpack_bin(u, &p, &n), 0);
        CHECK_EQ_U64(n, o->via.bin.size);
        CHECK(n == 0 || memcmp(p, o->via.bin.ptr, n) == 0);
        break;
    }
    case MSGPACK_OBJECT_EXT: {
        /* No typed reader for ext: take its raw bytes and decode the type
         * and body from the header here. */
        sx_payload raw;
        CHECK_EQ_INT(sx_unpack_type(u), SX_MP_EXT);
        CHECK_RC(sx_unpack_raw(u, &raw), 0);
        uint8_t m = raw.data[0];
        size_t h = m >= 0xd4 ? 2 : 2 + ((size_t)1 << (m - 0xc7));
        CHECK_EQ_U64(raw.len - h, o->via.ext.size);
        CHECK_EQ_INT((int8_t)raw.data[h - 1], o->via.ext.type);
        CHECK(o->via.ext.size == 0 ||
              memcmp(raw.data + h, o->via.ext.ptr, o->via.ext.size) == 0);
        break;
    }
    case MSGPACK_OBJECT_ARRAY: {
        uint32_t n;
        CHECK_EQ_INT(sx_unpack_type(u), SX_MP_ARRAY);
        CHECK_RC(sx_unpack_array(u, &n), 0);
        CHECK_EQ_U64(n, o->via.array.size);
        for (uint32_t i = 0; i < n; i++)
            check_same(u, &o->via.array.ptr[i]);
        break;
    }
    case MSGPACK_OBJECT_MAP: {
        uint32_t n;
        CHECK_EQ_INT(sx_unpack_type(u), SX_MP_MAP);
        CHECK_RC(sx_unpack_map(u, &n), 0);
        CHECK_EQ_U64(n, o->via.map.size);
        for (uint32_t i = 0; i < n; i++) {
            check_same(u, &o->via.map.ptr[i].key);
            check_same(u, &o->via.map.ptr[i].val);
        }
        break;
    }
    default:
        SX_FAILF("unexpected msgpack object type %d", (int)o->type);
    }
    CHECK(u->p == c.p);
}

/* Decodes p with msgpack-c; returns its result and sets *off. */
static msgpack_unpack_return mp_decode(msgpack_unpacked *res, const uint8_t *p,
                                       size_t n, size_t *off)
{
    *off = 0;
    return msgpack_unpack_next(res, (const char *)p, n, off);
}

/* A few thousand random values (fixed seed) decode the same with our reader
 * as with msgpack-c's unpacker, value for value and byte for byte consumed;
 * where only our writer produced them, msgpack-c's packer re-encodes the
 * decoded object to the very same bytes (smallest encodings everywhere). */
static void test_msgpack_c_crosscheck(void)
{
    sx_pack scr;
    sx_pack_init(&scr);
    size_t minimal_count = 0;
    for (int iter = 0; iter < 4000; iter++) {
        tbuf b = { 0 };
        bool minimal = true;
        gen_value(&b, &scr, (int)rng_below(5), iter % 2 == 1, &minimal);
        uint8_t *q = dup_exact(b.p, b.n);

        msgpack_unpacked res;
        size_t off;
        msgpack_unpacked_init(&res);
        CHECK_EQ_INT(mp_decode(&res, q, b.n, &off), MSGPACK_UNPACK_SUCCESS);
        CHECK_EQ_U64(off, b.n);
        sx_unpack u;
        sx_unpack_init(&u, pl_of(q, b.n));
        check_same(&u, &res.data);
        CHECK(sx_unpack_done(&u));

        msgpack_sbuffer sb;
        msgpack_packer mp;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&mp, &sb, msgpack_sbuffer_write);
        CHECK_RC(msgpack_pack_object(&mp, res.data), 0);
        if (minimal) {
            minimal_count++;
            CHECK_EQ_U64(sb.size, b.n);
            CHECK(memcmp(sb.data, q, b.n) == 0);
        }
        sx_unpack_init(&u, pl_of(sb.data, sb.size));
        check_same(&u, &res.data);
        CHECK(sx_unpack_done(&u));
        msgpack_sbuffer_destroy(&sb);
        msgpack_unpacked_destroy(&res);
        free(q);
        free(b.p);
    }
    CHECK(minimal_count > 1000);
    sx_pack_fini(&scr);
}

/* Random values with a few bytes overwritten and/or cut short: our skip, raw
 * and typed readers agree with each other and never read past the end
 * (ASan). Where the input holds no 0xdd/0xdf byte (msgpack-c allocates an
 * array32/map32's claimed count before reading it, which a random claim can
 * make huge), success and consumed length also agree with msgpack-c, and the
 * decoded values are equal. Deep nesting is not generated: msgpack-c's own
 * limit (32) is below ours. */
static void test_mutation_crosscheck(void)
{
    sx_pack scr;
    sx_pack_init(&scr);
    size_t compared = 0, ok = 0;
    for (int iter = 0; iter < 20000; iter++) {
        tbuf b = { 0 };
        bool minimal = true;
        gen_value(&b, &scr, (int)rng_below(4), true, &minimal);
        int muts = (int)rng_below(4);
        for (int m = 0; m < muts && b.n > 0; m++)
            b.p[rng_below(b.n)] = (uint8_t)rng();
        size_t n = rng_below(4) == 0 ? rng_below(b.n + 1) : b.n;
        if (n == 0) {
            free(b.p);
            continue;
        }
        uint8_t *q = dup_exact(b.p, n);
        size_t used = 0;
        int rc = skip_exact(q, n, &used);
        CHECK(rc == 0 || rc == SX_EPROTO || rc == SX_ELIMIT);
        sx_unpack u;
        sx_payload raw;
        sx_unpack_init(&u, pl_of(q, n));
        CHECK_RC(sx_unpack_raw(&u, &raw), rc);
        sx_unpack_init(&u, pl_of(q, n));
        int trc = walk_typed(&u, 0);
        if (rc == 0) {
            CHECK_RC(trc, 0);
            CHECK(raw.len == used && (size_t)(u.p - q) == used);
        } else if (rc == SX_EPROTO) {
            CHECK_RC(trc, SX_EPROTO);
        }
        if (rc != SX_ELIMIT && memchr(q, 0xdd, n) == NULL &&
            memchr(q, 0xdf, n) == NULL) {
            msgpack_unpacked res;
            size_t off;
            msgpack_unpacked_init(&res);
            msgpack_unpack_return mr = mp_decode(&res, q, n, &off);
            compared++;
            if (rc == 0) {
                ok++;
                CHECK(mr == MSGPACK_UNPACK_SUCCESS ||
                      mr == MSGPACK_UNPACK_EXTRA_BYTES);
                CHECK_EQ_U64(off, used);
                sx_unpack_init(&u, pl_of(q, n));
                check_same(&u, &res.data);
            } else {
                CHECK(mr == MSGPACK_UNPACK_CONTINUE ||
                      mr == MSGPACK_UNPACK_PARSE_ERROR);
            }
            msgpack_unpacked_destroy(&res);
        }
        free(q);
        free(b.p);
    }
    printf("# compared with msgpack-c: %zu (%zu valid)\n", compared, ok);
    CHECK(compared > 5000 && ok > 1000 && compared - ok > 1000);
    sx_pack_fini(&scr);
}

/* The hand-written integer codec (sx_pack_int, sx_payload_int and the fast
 * path of sx_payload_get_int) against msgpack-c: the same bytes as
 * msgpack_pack_int64 for every boundary +-1 and random values of every
 * width, and for any 1-9 byte string the fast reader agrees with the general
 * reader (sx_unpack_int + sx_unpack_done) on the code and the value. */
static void test_int_codec_vs_msgpack_c(void)
{
    uint64_t rng = 0x9e3779b97f4a7c15u;
    size_t compared = 0;
    for (int i = 0; i < 200000; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        int64_t v;
        if (i < 64 * 3) {
            /* 2^k - 1, 2^k, 2^k + 1 and their negatives. */
            int k = i / 3;
            uint64_t b = (uint64_t)1 << k;
            v = (int64_t)(b + (uint64_t)(i % 3) - 1);
            if (k & 1)
                v = (int64_t)(0 - (uint64_t)v); /* INT64_MIN stays */
        } else {
            /* A random width, so that every encoding is common. */
            v = (int64_t)(rng >> (rng & 63));
            if (rng & 0x100)
                v = (int64_t)(0 - (uint64_t)v); /* INT64_MIN stays */
        }
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer mp;
        msgpack_packer_init(&mp, &sb, msgpack_sbuffer_write);
        CHECK(msgpack_pack_int64(&mp, v) == 0);
        uint8_t small[SX_PAYLOAD_INT_MAX], buf[16];
        sx_payload pl = sx_payload_int(small, v);
        sx_pack pk;
        sx_pack_init_fixed(&pk, buf, sizeof(buf));
        CHECK_RC(sx_pack_int(&pk, v), 0);
        CHECK_EQ_U64(pl.len, sb.size);
        CHECK_EQ_U64(pk.len, sb.size);
        CHECK(memcmp(pl.data, sb.data, sb.size) == 0);
        CHECK(memcmp(buf, sb.data, sb.size) == 0);
        int64_t got = 0;
        CHECK_RC(sx_payload_get_int(pl, &got), 0);
        CHECK(got == v);
        msgpack_sbuffer_destroy(&sb);
        compared++;
    }
    /* Random short strings, biased to integer markers. */
    static const uint8_t markers[] = { 0x00, 0x7f, 0x80, 0xa1, 0xc0, 0xc1,
                                       0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1,
                                       0xd2, 0xd3, 0xd4, 0xe0, 0xff };
    for (int i = 0; i < 200000; i++) {
        uint8_t b[9];
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t len = 1 + (size_t)(rng % 9);
        for (size_t j = 0; j < len; j++)
            b[j] = (uint8_t)(rng >> (7 * j) ^
                             (uint64_t)j * 131); /* j < 9: shift < 64 */
        b[0] = markers[(rng >> 40) % sizeof(markers)];
        sx_payload pl = { b, len };
        int64_t fast = 0, slow = 0;
        int rf = sx_payload_get_int(pl, &fast);
        sx_unpack u;
        sx_unpack_init(&u, pl);
        int rs = sx_unpack_int(&u, &slow);
        if (rs == 0 && !sx_unpack_done(&u))
            rs = SX_EPROTO;
        CHECK_RC(rf, rs);
        if (rf == 0)
            CHECK(fast == slow);
    }
    printf("# %zu integers compared with msgpack_pack_int64\n", compared);
}

/* ---- UTF-8 (process/utf8.h) ---- */

/* sx__utf8_valid agrees with sx__utf8_seq on every form it refuses (a
 * stray continuation byte, a cut sequence, an overlong form, a surrogate,
 * past U+10FFFF), wherever it sits relative to the 8-byte ASCII steps
 * and sx__ascii_short's overlapping words; sx__utf8_replace puts one
 * U+FFFD per byte that starts no sequence; sx__topic_ok, sx__topic_len
 * and sx__topic_cstr_ok take at most 255 bytes of UTF-8 without a NUL, on
 * the ASCII path and off it. */
static void test_utf8(void)
{
    static const char *const bad[] = {
        "\x80",
        "\xbf",
        "\xc0\x80",
        "\xc1\xbf",
        "\xc3",
        "\xe2\x82",
        "\xe0\x80\xaf",
        "\xed\xa0\x80",
        "\xf0\x80\x80\xaf",
        "\xf4\x90\x80\x80",
        "\xf5\x80\x80\x80",
        "\xff",
    };
    static const char *const good[] = {
        "",
        "a",
        "\xc3\xa9",
        "\xe2\x82\xac",
        "\xf0\x9f\x98\x80",
        "\xf4\x8f\xbf\xbf",
        "\xef\xbf\xbd",
        "\xed\x9f\xbf",
    };
    char buf[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (size_t pre = 0; pre < 20; pre++) {
            size_t n = strlen(bad[i]);
            memset(buf, 'a', pre);
            memcpy(buf + pre, bad[i], n);
            memcpy(buf + pre + n, "tail", 4);
            if (sx__utf8_valid((const unsigned char *)buf, pre + n + 4))
                SX_FAILF("bad form %zu after %zu bytes taken", i, pre);
            CHECK(!sx__topic_ok(buf, pre + n + 4));
            buf[pre + n + 4] = '\0';
            CHECK_EQ_U64(sx__topic_len(buf), SIZE_MAX);
            CHECK(!sx__topic_cstr_ok(buf, pre + n + 4));
        }
    }
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        for (size_t pre = 0; pre < 20; pre++) {
            size_t n = strlen(good[i]);
            memset(buf, 'a', pre);
            memcpy(buf + pre, good[i], n);
            if (!sx__utf8_valid((const unsigned char *)buf, pre + n))
                SX_FAILF("good form %zu after %zu bytes refused", i, pre);
            CHECK(sx__topic_ok(buf, pre + n));
            buf[pre + n] = '\0';
            CHECK_EQ_U64(sx__topic_len(buf), pre + n);
            CHECK(sx__topic_cstr_ok(buf, pre + n));
        }
    }
    /* Every length to 40, one odd byte at every place: a stray 0xff is
     * found wherever it sits (the short forms' overlapping words, the
     * word steps, the last word), an "e acute" passes anywhere. */
    CHECK(sx__ascii_short((const unsigned char *)"", 0));
    for (size_t n = 1; n <= 40; n++) {
        memset(buf, 'a', n);
        CHECK(sx__utf8_valid((const unsigned char *)buf, n));
        if (n < 8)
            CHECK(sx__ascii_short((const unsigned char *)buf, n));
        for (size_t at = 0; at < n; at++) {
            memset(buf, 'a', n);
            buf[at] = (char)0xff;
            if (sx__utf8_valid((const unsigned char *)buf, n))
                SX_FAILF("0xff at %zu of %zu taken", at, n);
            if (n < 8)
                CHECK(!sx__ascii_short((const unsigned char *)buf, n));
            if (at + 1 < n) {
                memcpy(buf + at, "\xc3\xa9", 2);
                if (!sx__utf8_valid((const unsigned char *)buf, n))
                    SX_FAILF("e acute at %zu of %zu refused", at, n);
            }
        }
    }

    /* A NUL is UTF-8, but no topic holds one. */
    CHECK(sx__utf8_valid((const unsigned char *)"a\0b", 3));
    CHECK(!sx__topic_ok("a\0b", 3));

    /* Replacement: a cut euro sign is two bytes, two U+FFFD. */
    static const char in[] = "ok \xe2\x82 \xff\xc3\xa9";
    static const char want[] =
        "ok \xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xc3\xa9";
    size_t n = sizeof in - 1;
    CHECK_EQ_U64(sx__utf8_replace((const unsigned char *)in, n, NULL, 0),
                 sizeof want - 1);
    char out[64];
    CHECK_EQ_U64(
        sx__utf8_replace((const unsigned char *)in, n, out, sizeof out),
        sizeof want - 1);
    CHECK(memcmp(out, want, sizeof want - 1) == 0);
    /* Short of room: whole pieces only ("ok " and one U+FFFD in 7). */
    CHECK_EQ_U64(sx__utf8_replace((const unsigned char *)in, n, out, 7), 6);
    CHECK(memcmp(out, want, 6) == 0);

    /* Topic lengths: 255 bytes, ASCII or ending in a 2-byte character, is
     * a topic; 256 is not; 85 euro signs (255 bytes) are, 86 are not. */
    char t[300];
    memset(t, 't', sizeof t);
    t[255] = '\0';
    CHECK_EQ_U64(sx__topic_len(t), 255);
    t[255] = 't';
    t[256] = '\0';
    CHECK_EQ_U64(sx__topic_len(t), SIZE_MAX);
    memcpy(t + 253, "\xc3\xa9", 3);
    CHECK_EQ_U64(sx__topic_len(t), 255);
    memcpy(t + 254, "\xc3\xa9", 3);
    CHECK_EQ_U64(sx__topic_len(t), SIZE_MAX);
    for (int i = 0; i < 86; i++)
        memcpy(t + 3 * i, "\xe2\x82\xac", 3);
    t[255] = '\0';
    CHECK_EQ_U64(sx__topic_len(t), 255);
    CHECK(sx__topic_ok(t, 255));
    t[255] = '\xe2';
    t[258] = '\0';
    CHECK_EQ_U64(sx__topic_len(t), SIZE_MAX);
    CHECK(!sx__topic_ok(t, 258));
}

static const sx_test_case cases[] = {
    { "int_boundaries", test_int_boundaries },
    { "int_codec_vs_msgpack_c", test_int_codec_vs_msgpack_c },
    { "uint_above_int64", test_uint_above_int64 },
    { "int_all_encodings", test_int_all_encodings },
    { "nil_bool_double", test_nil_bool_double },
    { "str_sizes", test_str_sizes },
    { "bin_sizes", test_bin_sizes },
    { "container_sizes", test_container_sizes },
    { "ext_all_forms", test_ext_all_forms },
    { "pid_values", test_pid_values },
    { "fixed_overflow", test_fixed_overflow },
    { "heap_growth", test_heap_growth },
    { "pack_own_bytes", test_pack_own_bytes },
    { "pack_raw", test_pack_raw },
    { "null_args", test_null_args },
    { "mismatch_does_not_move", test_mismatch_does_not_move },
    { "sticky_errors", test_sticky_errors },
    { "empty_payload_is_nil", test_empty_payload_is_nil },
    { "payload_get", test_payload_get },
    { "truncation_every_prefix", test_truncation_every_prefix },
    { "one_look_values", test_one_look_values },
    { "pack_str_lengths", test_pack_str_lengths },
    { "huge_claims", test_huge_claims },
    { "depth_limit", test_depth_limit },
    { "msgpack_c_crosscheck", test_msgpack_c_crosscheck },
    { "mutation_crosscheck", test_mutation_crosscheck },
    { "utf8", test_utf8 },
};

SX_TEST_MAIN(cases)

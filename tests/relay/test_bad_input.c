/* tests/relay/test_bad_input.c — hostile and broken input to the relay
 * server over raw sockets: truncated frames, zero and oversized lengths,
 * bodies that are not one map, trailing bytes, wrongly typed fields,
 * unknown ops, deep nesting, 1000 random byte strings on fresh
 * connections, and a client that never reads while a process floods its
 * mailbox. After each, a second, well-behaved client on the same server
 * still gets correct answers: the daemon serves everyone else. Each case
 * opens with the property it checks.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stepx/relay.h>

#include "tests/support/support.h"

#include "tests/relay/relay_fixture.h"

#define MAX_FRAME (1u << 20) /* the test server's frame limit */

/* ==== fixture ========================================================== */

/* The shared fixture (relay_fixture.h) with this file's server limits,
 * and the well-behaved client every case checks on. */
typedef struct {
    fixture f;
    sx_client *good;
    int64_t next_x; /* the next square it submits */
} bad_fx;

static void bad_up(bad_fx *b, size_t max_output)
{
    sx_server_config sc = { .max_frame = MAX_FRAME, .max_output = max_output };
    fx_up_cfg(&b->f, 0, &sc);
    CHECK_RC(sx_client_connect(b->f.path, NULL, 10000, &b->good), 0);
    b->next_x = 2;
}

static void bad_down(bad_fx *b)
{
    sx_client_close(b->good);
    fx_down(&b->f);
}

/* The well-behaved client still gets correct answers. */
static void check_alive(bad_fx *b)
{
    square_ok(b->good, b->next_x++, 20000);
}

/* ==== raw frames ======================================================== */

static void payload_free(sx_payload *p)
{
    free((void *)p->data);
    p->data = NULL;
}

/* The reply's error code ("" when ok). */
static const char *code_of(sx_payload m, char *buf, size_t cap)
{
    sx_payload e, c;
    buf[0] = '\0';
    if (sx_map_get(m, "error", &e) != 0)
        return buf;
    CHECK_RC(sx_map_get(e, "code", &c), 0);
    CHECK_RC(sx_payload_get_str(c, buf, cap), 0);
    return buf;
}

/* Expects an error frame with id 0 and code bad_frame, then EOF. */
static void expect_bad_frame(int fd)
{
    sx_payload b;
    CHECK_RC(raw_read(fd, 10000, &b), 0);
    char code[32];
    CHECK_EQ_INT(map_int(b, "id"), 0);
    CHECK_STR(code_of(b, code, sizeof(code)), "bad_frame");
    payload_free(&b);
    CHECK_RC(raw_read(fd, 10000, &b), 1);
}

/* Expects a reply with id and code (NULL: ok). */
static void expect_reply(int fd, uint64_t id, const char *code)
{
    sx_payload b;
    CHECK_RC(raw_read(fd, 10000, &b), 0);
    char got[32];
    CHECK_EQ_INT(map_int(b, "id"), (int64_t)id);
    CHECK_STR(code_of(b, got, sizeof(got)), code != NULL ? code : "");
    payload_free(&b);
}

/* ==== cases ============================================================= */

/* Property: a request's fields are found wherever they sit in its map:
 * after many fields the op does not read, beside keys one byte longer or
 * shorter; a key given twice counts once, with its first value
 * (docs/PROTOCOL.md, "Requests and replies"). */
static void test_field_lookup(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    int fd = raw_connect(bf.f.path);
    sx_pack pk;
    sx_payload b;
    char key[16];
    /* submit's fields after 26 that it does not read (32 pairs) */
    req_begin(&pk, 32, "submit", 1);
    for (int i = 0; i < 26; i++) {
        snprintf(key, sizeof(key), "x%d", i);
        sx_pack_str(&pk, key);
        sx_pack_int(&pk, i);
    }
    sx_pack_str(&pk, "type");
    sx_pack_str(&pk, "square");
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, "run");
    sx_pack_str(&pk, "input");
    sx_pack_array(&pk, 1);
    sx_pack_int(&pk, 7);
    sx_pack_str(&pk, "wait");
    sx_pack_bool(&pk, true);
    raw_frame(fd, &pk);
    sx_pack_fini(&pk);
    CHECK_RC(raw_read(fd, 10000, &b), 0);
    CHECK_EQ_INT(map_int(b, "id"), 1);
    CHECK_EQ_INT(map_int(b, "result"), 49);
    payload_free(&b);
    /* the first of two equal keys; keys one byte longer or shorter */
    req_begin(&pk, 10, "submit", 2);
    sx_pack_str(&pk, "typ");
    sx_pack_str(&pk, "nope");
    sx_pack_str(&pk, "type");
    sx_pack_str(&pk, "square");
    sx_pack_str(&pk, "types");
    sx_pack_str(&pk, "nope");
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, "run");
    sx_pack_str(&pk, "input");
    sx_pack_array(&pk, 1);
    sx_pack_int(&pk, 3);
    sx_pack_str(&pk, "wait");
    sx_pack_bool(&pk, true);
    sx_pack_str(&pk, "input");
    sx_pack_array(&pk, 1);
    sx_pack_int(&pk, 5);
    sx_pack_str(&pk, "type");
    sx_pack_str(&pk, "nope");
    raw_frame(fd, &pk);
    sx_pack_fini(&pk);
    CHECK_RC(raw_read(fd, 10000, &b), 0);
    CHECK_EQ_INT(map_int(b, "id"), 2);
    CHECK_EQ_INT(map_int(b, "result"), 9);
    payload_free(&b);
    /* op and id given twice */
    sx_pack_init(&pk);
    sx_pack_map(&pk, 4);
    sx_pack_str(&pk, "op");
    sx_pack_str(&pk, "types");
    sx_pack_str(&pk, "id");
    sx_pack_uint(&pk, 3);
    sx_pack_str(&pk, "op");
    sx_pack_str(&pk, "nope");
    sx_pack_str(&pk, "id");
    sx_pack_uint(&pk, 4);
    raw_frame(fd, &pk);
    sx_pack_fini(&pk);
    expect_reply(fd, 3, NULL);
    close(fd);
    check_alive(&bf);
    bad_down(&bf);
}

/* Property: a submit's inputs reach init whole and in order however
 * many there are: none, one, as many as the server lists on its stack
 * (8), one more, and many more (relay/ops_submit.c, submit_inputs). */
static void test_input_counts(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    int fd = raw_connect(bf.f.path);
    static const int counts[] = { 0, 1, 7, 8, 9, 40, 1000 };
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        int n = counts[i];
        sx_pack pk;
        req_begin(&pk, 6, "submit", 10 + i);
        sx_pack_str(&pk, "type");
        sx_pack_str(&pk, "sum");
        sx_pack_str(&pk, "method");
        sx_pack_str(&pk, "run");
        sx_pack_str(&pk, "input");
        sx_pack_array(&pk, (uint32_t)n);
        int64_t want = 0;
        for (int k = 1; k <= n; k++) {
            /* as fixints, uint 8, 16 and 32 */
            int64_t x = k % 3 == 0 ? k * 100000 : k;
            sx_pack_int(&pk, x);
            want += k * x;
        }
        sx_pack_str(&pk, "wait");
        sx_pack_bool(&pk, true);
        CHECK_RC(raw_frame(fd, &pk), 0);
        sx_pack_fini(&pk);
        sx_payload b;
        CHECK_RC(raw_read(fd, 10000, &b), 0);
        CHECK_EQ_INT(map_int(b, "id"), (int64_t)(10 + i));
        CHECK_EQ_INT(map_int(b, "result"), want);
        payload_free(&b);
    }
    close(fd);
    check_alive(&bf);
    bad_down(&bf);
}

/* A reply's id, any width of unsigned integer. */
static uint64_t reply_id(sx_payload b)
{
    sx_payload v;
    uint64_t id = 0;
    CHECK_RC(sx_map_get(b, "id", &v), 0);
    sx_unpack u;
    sx_unpack_init(&u, v);
    CHECK_RC(sx_unpack_uint(&u, &id), 0);
    return id;
}

/* Property: a request's id is read in every msgpack form of an unsigned
 * integer, the shortest or not (a uint64 holding 9), up to 2^64 - 1, and
 * echoed in its reply; a negative, float or nil id is bad_request,
 * answered with id 0 (docs/PROTOCOL.md, "Requests and replies"). */
static void test_id_forms(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    int fd = raw_connect(bf.f.path);
    static const struct {
        uint8_t b[9];
        size_t n;
        uint64_t id; /* 0: refused */
    } forms[] = {
        { { 0x7f }, 1, 127 },
        { { 0x01 }, 1, 1 },
        { { 0xcc, 0xc8 }, 2, 200 },
        { { 0xcc, 0x05 }, 2, 5 },
        { { 0xcd, 0x01, 0x2c }, 3, 300 },
        { { 0xce, 0x00, 0x01, 0x86, 0xa0 }, 5, 100000 },
        { { 0xce, 0xff, 0xff, 0xff, 0xff }, 5, 0xffffffffu },
        { { 0xcf, 0, 0, 0, 0, 0, 0, 0, 9 }, 9, 9 },
        { { 0xcf, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08 },
          9,
          0x0102030405060708ull },
        { { 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff },
          9,
          UINT64_MAX },
        { { 0xd0, 0x05 }, 2, 5 },         /* an int8 that is not negative */
        { { 0xd1, 0x01, 0x00 }, 3, 256 }, /* an int16 */
        { { 0xd0, 0xfb }, 2, 0 },         /* -5 */
        { { 0xff }, 1, 0 },               /* -1 */
        { { 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0 }, 9, 0 }, /* 1.0 */
        { { 0xc0 }, 1, 0 },                               /* nil */
    };
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        sx_pack pk;
        sx_pack_init(&pk);
        sx_pack_map(&pk, 2);
        sx_pack_str(&pk, "op");
        sx_pack_str(&pk, "types");
        sx_pack_str(&pk, "id");
        sx_pack_raw(&pk, (sx_payload){ forms[i].b, forms[i].n });
        CHECK_RC(raw_frame(fd, &pk), 0);
        sx_pack_fini(&pk);
        sx_payload b;
        CHECK_RC(raw_read(fd, 10000, &b), 0);
        char code[32];
        if (reply_id(b) != forms[i].id)
            SX_FAILF("id form %zu: reply id %llu, want %llu", i,
                     (unsigned long long)reply_id(b),
                     (unsigned long long)forms[i].id);
        CHECK_STR(code_of(b, code, sizeof(code)),
                  forms[i].id != 0 ? "" : "bad_request");
        payload_free(&b);
    }
    close(fd);
    check_alive(&bf);
    bad_down(&bf);
}

/* Property: a frame cut short by the client closing (in the header, in
 * the body) costs nothing but that connection; a frame whose msgpack is
 * cut short inside its declared length is bad_frame and closes it. */
static void test_truncated(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    const uint8_t part_header[2] = { 0, 0 };
    int fd = raw_connect(bf.f.path);
    raw_write(fd, part_header, 2);
    close(fd);
    check_alive(&bf);
    fd = raw_connect(bf.f.path);
    uint8_t h[4];
    be32(h, 100);
    raw_write(fd, h, 4);
    raw_write(fd, "\x82\xa2op", 4);
    shutdown(fd, SHUT_WR);
    sx_payload b;
    CHECK_RC(raw_read(fd, 10000, &b), 1); /* the server closes its end */
    close(fd);
    check_alive(&bf);
    /* declared 3 bytes: a map of one pair whose value is missing */
    fd = raw_connect(bf.f.path);
    raw_frame_bytes(fd, 3, "\x81\xa1x", 3);
    expect_bad_frame(fd);
    close(fd);
    check_alive(&bf);
    fd = raw_connect(bf.f.path);
    raw_frame_bytes(fd, 3, "\xa5hel", 3); /* a str 5 with 3 bytes */
    expect_bad_frame(fd);
    close(fd);
    check_alive(&bf);
    bad_down(&bf);
}

/* Property: a zero length, a length over max_frame (the body never sent)
 * and 0xFFFFFFFF are bad_frame and close the connection at once. */
static void test_lengths(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    const uint32_t lens[] = { 0, MAX_FRAME + 1, 0xFFFFFFFFu };
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        int fd = raw_connect(bf.f.path);
        raw_frame_bytes(fd, lens[i], NULL, 0);
        expect_bad_frame(fd);
        close(fd);
        check_alive(&bf);
    }
    /* A frame of exactly max_frame is accepted (and its request read). */
    int fd = raw_connect(bf.f.path);
    sx_pack pk;
    req_begin(&pk, 3, "types", 5);
    sx_pack_str(&pk, "pad");
    size_t pad = MAX_FRAME - pk.len - 5; /* bin 32 header: 5 bytes */
    uint8_t *z = calloc(1, pad);
    sx_pack_bin(&pk, z, pad);
    free(z);
    CHECK_EQ_U64(pk.len, MAX_FRAME);
    raw_frame(fd, &pk);
    sx_pack_fini(&pk);
    expect_reply(fd, 5, NULL);
    close(fd);
    sx_server_stats st;
    sx_server_stats_get(bf.f.s, &st);
    CHECK_EQ_U64(st.bad_frames, 3);
    bad_down(&bf);
}

/* Property: bodies that are not exactly one map with string keys — an
 * array, an integer, a string, nil, a map with an integer key, a map
 * followed by trailing bytes, two maps — are bad_frame and close the
 * connection. */
static void test_not_a_map(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    static const struct {
        const char *bytes;
        size_t n;
    } bodies[] = {
        { "\x92\x01\x02", 3 },      /* [1, 2]           */
        { "\x05", 1 },              /* 5                */
        { "\xa2hi", 3 },            /* "hi"             */
        { "\xc0", 1 },              /* nil              */
        { "\x81\x01\x02", 3 },      /* {1: 2}           */
        { "\x80\x00", 2 },          /* {} then a byte   */
        { "\x81\xa1x\x01\xc0", 5 }, /* {x: 1} then nil  */
        { "\x80\x80", 2 },          /* two maps         */
        { "\xc1", 1 },              /* reserved marker  */
        { "\x81\xa1x\xc1", 4 },     /* {x: <reserved>}  */
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        int fd = raw_connect(bf.f.path);
        raw_frame_bytes(fd, (uint32_t)bodies[i].n, bodies[i].bytes,
                        bodies[i].n);
        expect_bad_frame(fd);
        close(fd);
        check_alive(&bf);
    }
    bad_down(&bf);
}

/* Property: a bad frame after good requests on the same connection: the
 * good ones are answered first, then the error frame, then the close. */
static void test_bad_after_good(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    int fd = raw_connect(bf.f.path);
    sx_pack pk;
    req_begin(&pk, 2, "types", 1);
    raw_frame(fd, &pk);
    sx_pack_fini(&pk);
    req_begin(&pk, 2, "stats", 2);
    raw_frame(fd, &pk);
    sx_pack_fini(&pk);
    raw_frame_bytes(fd, 1, "\x07", 1);
    expect_reply(fd, 1, NULL);
    expect_reply(fd, 2, NULL);
    expect_bad_frame(fd);
    close(fd);
    check_alive(&bf);
    bad_down(&bf);
}

/* Property: wrongly typed and missing fields get bad_request, unknown ops
 * unknown_op, and the connection stays usable for the next request. */
static void test_fields_and_ops(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    int fd = raw_connect(bf.f.path);
    sx_pack pk;
    uint64_t id = 1;
    /* id of the wrong type: answered with id 0 */
    sx_pack_init(&pk);
    sx_pack_map(&pk, 2);
    sx_pack_str(&pk, "op");
    sx_pack_str(&pk, "ps");
    sx_pack_str(&pk, "id");
    sx_pack_str(&pk, "seven");
    raw_frame(fd, &pk);
    sx_pack_fini(&pk);
    expect_reply(fd, 0, "bad_request");
    /* negative id */
    sx_pack_init(&pk);
    sx_pack_map(&pk, 2);
    sx_pack_str(&pk, "op");
    sx_pack_str(&pk, "ps");
    sx_pack_str(&pk, "id");
    sx_pack_int(&pk, -3);
    raw_frame(fd, &pk);
    sx_pack_fini(&pk);
    expect_reply(fd, 0, "bad_request");
    /* each op with every field it reads of a wrong type */
    const char *ops[] = { "submit",    "send",      "wait", "cancel",
                          "terminate", "subscribe", "ps",   "hello" };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        for (int t = 0; t < 4; t++) {
            req_begin(&pk, 10, ops[i], ++id);
            const char *keys[] = { "type", "method", "input", "pid",
                                   "to",   "topic",  "limit", "version" };
            for (int k = 0; k < 8; k++) {
                sx_pack_str(&pk, keys[k]);
                switch (t) {
                case 0:
                    sx_pack_map(&pk, 0);
                    break;
                case 1:
                    sx_pack_bool(&pk, true);
                    break;
                case 2:
                    sx_pack_double(&pk, 1.5);
                    break;
                default:
                    sx_pack_bin(&pk, "x", 1);
                    break;
                }
            }
            raw_frame(fd, &pk);
            sx_pack_fini(&pk);
            expect_reply(fd, id, "bad_request");
        }
    }
    const char *unknown[] = { "", "HELLO", "hello ", "submitx", "\xff" };
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        req_begin(&pk, 2, unknown[i], ++id);
        raw_frame(fd, &pk);
        sx_pack_fini(&pk);
        expect_reply(fd, id, "unknown_op");
    }
    /* still usable */
    req_begin(&pk, 2, "types", ++id);
    raw_frame(fd, &pk);
    sx_pack_fini(&pk);
    expect_reply(fd, id, NULL);
    close(fd);
    check_alive(&bf);
    bad_down(&bf);
}

/* Is [s, s + n) well-formed UTF-8 (what a msgpack str holds)? Strict, as
 * the Unicode standard's table of well-formed sequences has it (no
 * overlong forms, no surrogates, nothing past U+10FFFF), and written apart
 * from the server's own check. */
static bool utf8_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i], lo = 0x80, hi = 0xbf;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf)
            k = 2;
        else if (c == 0xe0)
            k = 3, lo = 0xa0;
        else if (c == 0xed)
            k = 3, hi = 0x9f;
        else if (c >= 0xe1 && c <= 0xef)
            k = 3;
        else if (c == 0xf0)
            k = 4, lo = 0x90;
        else if (c == 0xf4)
            k = 4, hi = 0x8f;
        else if (c >= 0xf1 && c <= 0xf3)
            k = 4;
        else
            return false;
        if (n - i < k || s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t j = 2; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
        i += k;
    }
    return true;
}

/* Whether every str in the value at u (map keys included, at any depth)
 * is valid UTF-8: what a strict reader (Python's msgpack by default)
 * demands of a whole frame. */
static bool strs_utf8(sx_unpack *u)
{
    uint32_t n;
    const char *s;
    size_t len;
    switch (sx_unpack_type(u)) {
    case SX_MP_STR:
        CHECK_RC(sx_unpack_str(u, &s, &len), 0);
        return utf8_valid((const uint8_t *)s, len);
    case SX_MP_ARRAY:
        CHECK_RC(sx_unpack_array(u, &n), 0);
        for (uint32_t i = 0; i < n; i++)
            if (!strs_utf8(u))
                return false;
        return true;
    case SX_MP_MAP:
        CHECK_RC(sx_unpack_map(u, &n), 0);
        for (uint32_t i = 0; i < 2 * n; i++)
            if (!strs_utf8(u))
                return false;
        return true;
    default:
        CHECK_RC(sx_unpack_skip(u), 0);
        return true;
    }
}

/* raw_read, and the frame must be one a strict reader takes. */
static int read_strict(int fd, int timeout_ms, sx_payload *out)
{
    int rc = raw_read(fd, timeout_ms, out);
    if (rc == 0) {
        sx_unpack u;
        sx_unpack_init(&u, *out);
        if (!strs_utf8(&u))
            SX_FAILF("a frame of %zu bytes holds a str that is not UTF-8",
                     out->len);
    }
    return rc;
}

/* Expects a reply with id and code whose message is valid UTF-8. */
static void expect_utf8_error(int fd, uint64_t id, const char *code)
{
    sx_payload b, e, m;
    CHECK_RC(read_strict(fd, 10000, &b), 0);
    char got[32];
    CHECK_EQ_INT(map_int(b, "id"), (int64_t)id);
    CHECK_STR(code_of(b, got, sizeof(got)), code);
    CHECK_RC(sx_map_get(b, "error", &e), 0);
    CHECK_RC(sx_map_get(e, "message", &m), 0);
    sx_unpack u;
    const char *s;
    size_t n;
    sx_unpack_init(&u, m);
    CHECK_RC(sx_unpack_str(&u, &s, &n), 0);
    if (!utf8_valid((const uint8_t *)s, n))
        SX_FAILF("%s: message is not UTF-8: %.*s", code, (int)n, s);
    payload_free(&b);
}

/* Property: an error message that quotes a name the client sent (an
 * unknown op, type or method), or a process's long failure message, is
 * shortened at a character boundary: a msgpack str is UTF-8, and a strict
 * reader (PROTOCOL.md's Python client decodes every str) fails on half a
 * character. Names of 40 "EURO SIGN"s (3 bytes each) are cut inside one
 * at 32 and 64 bytes; 200 "n with tilde"s (2 bytes) at 255. */
static void test_utf8_cut(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    char euro[128] = "", tilde[402] = "";
    for (int i = 0; i < 40; i++)
        strcat(euro, "\xe2\x82\xac");
    for (int i = 0; i < 200; i++)
        strcat(tilde, "\xc3\xb1");
    int fd = raw_connect(bf.f.path);
    sx_pack pk;
    req_begin(&pk, 2, euro, 1);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    expect_utf8_error(fd, 1, "unknown_op");
    for (int t = 0; t < 2; t++) {
        req_begin(&pk, 5, "submit", 2 + (uint64_t)t);
        sx_pack_str(&pk, "type");
        sx_pack_str(&pk, t == 0 ? euro : "counter");
        sx_pack_str(&pk, "method");
        sx_pack_str(&pk, t == 0 ? "run" : euro);
        sx_pack_str(&pk, "input");
        sx_pack_array(&pk, 0);
        CHECK_RC(raw_frame(fd, &pk), 0);
        sx_pack_fini(&pk);
        expect_utf8_error(fd, 2 + (uint64_t)t,
                          t == 0 ? "unknown_type" : "unknown_method");
    }
    /* fail [message]: the message is kept to 255 bytes */
    req_begin(&pk, 5, "submit", 4);
    sx_pack_str(&pk, "type");
    sx_pack_str(&pk, "fail");
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, "run");
    sx_pack_str(&pk, "input");
    sx_pack_array(&pk, 1);
    sx_pack_str(&pk, tilde);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    sx_payload b, v;
    CHECK_RC(raw_read(fd, 10000, &b), 0);
    CHECK_RC(sx_map_get(b, "pid", &v), 0);
    req_begin(&pk, 3, "wait", 5);
    sx_pack_str(&pk, "pid");
    sx_pack_raw(&pk, v);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    payload_free(&b);
    expect_utf8_error(fd, 5, "failed");
    /* Names that are not UTF-8 at all (a stray byte, a cut sequence, a
     * NUL) are quoted with \xHH: the reply carried the client's raw
     * bytes, which strict readers drop. */
    static const char raw_op[] = "op\xff"
                                 "x\xe2\x82";
    req_begin(&pk, 2, raw_op, 6);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    expect_utf8_error(fd, 6, "unknown_op");
    req_begin(&pk, 5, "submit", 7);
    sx_pack_str(&pk, "type");
    sx_pack_strn(&pk, "t\0y", 3);
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, "run");
    sx_pack_str(&pk, "input");
    sx_pack_array(&pk, 0);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    CHECK_RC(raw_read(fd, 10000, &b), 0);
    sx_payload e, m;
    char msg[128];
    CHECK_RC(sx_map_get(b, "error", &e), 0);
    CHECK_RC(sx_map_get(e, "message", &m), 0);
    CHECK_RC(sx_payload_get_str(m, msg, sizeof(msg)), 0);
    CHECK_STR(msg, "no process type \"t\\x00y\"");
    payload_free(&b);
    close(fd);
    check_alive(&bf);
    bad_down(&bf);
}

/* ---- what the server sends is UTF-8 wherever it is a str ---- */

/* The error message of a reply or push (error.message), as a C string
 * copy in buf. */
static void error_message(sx_payload b, char *buf, size_t cap)
{
    sx_payload e, m;
    CHECK_RC(sx_map_get(b, "error", &e), 0);
    CHECK_RC(sx_map_get(e, "message", &m), 0);
    CHECK_RC(sx_payload_get_str(m, buf, cap), 0);
}

/* Submits type.method with input (one packed array) on fd as request id;
 * returns the reply (the caller frees it) with *pid pointing at its "pid"
 * value. */
static sx_payload submit_raw(int fd, uint64_t id, const char *type,
                             const char *method, sx_payload input,
                             sx_payload *pid)
{
    sx_pack pk;
    req_begin(&pk, 5, "submit", id);
    sx_pack_str(&pk, "type");
    sx_pack_str(&pk, type);
    sx_pack_str(&pk, "method");
    sx_pack_str(&pk, method);
    sx_pack_str(&pk, "input");
    sx_pack_raw(&pk, input);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    sx_payload b;
    CHECK_RC(read_strict(fd, 10000, &b), 0);
    CHECK_EQ_INT(map_int(b, "id"), (int64_t)id);
    CHECK_RC(sx_map_get(b, "pid", pid), 0);
    return b;
}

/* Sends {op, id, pid} (wait, subscribe, terminate) on fd. */
static void pid_op(int fd, const char *op, uint64_t id, sx_payload pid)
{
    sx_pack pk;
    req_begin(&pk, 3, op, id);
    sx_pack_str(&pk, "pid");
    sx_pack_raw(&pk, pid);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
}

/* A one-element input array holding a str of n bytes at s. */
static sx_payload input_str(sx_pack *pk, const char *s, size_t n)
{
    sx_pack_init(pk);
    sx_pack_array(pk, 1);
    sx_pack_strn(pk, s, n);
    return sx_pack_payload(pk);
}

/* Property: an error message that is not UTF-8 (the fail type's message,
 * any process's sx_fail text) reaches the client as a str of UTF-8 with
 * every byte that starts no valid sequence replaced by U+FFFD: in a wait
 * answer and in an exit push. Sent as the process's raw bytes, the
 * message would make the frame unreadable to a strict reader. */
static void test_utf8_fail_message(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    static const char msg[] = "card \xff declined \xe2\x82!";
    static const char want[] =
        "card \xef\xbf\xbd declined \xef\xbf\xbd\xef\xbf\xbd!";
    int fd = raw_connect(bf.f.path);
    sx_pack in;
    sx_payload pid, b, sb;
    char got[128], code[32];
    b = submit_raw(fd, 1, "fail", "run", input_str(&in, msg, sizeof msg - 1),
                   &pid);
    pid_op(fd, "wait", 2, pid);
    payload_free(&b);
    CHECK_RC(read_strict(fd, 10000, &b), 0);
    CHECK_EQ_INT(map_int(b, "id"), 2);
    CHECK_STR(code_of(b, code, sizeof code), "failed");
    error_message(b, got, sizeof got);
    CHECK_STR(got, want);
    payload_free(&b);
    /* subscribe: its exit push carries the same error */
    sb = submit_raw(fd, 3, "fail", "run", sx_pack_payload(&in), &pid);
    pid_op(fd, "subscribe", 4, pid);
    sx_pack_fini(&in);
    bool replied = false, pushed = false;
    while (!replied || !pushed) {
        CHECK_RC(read_strict(fd, 10000, &b), 0);
        if (sx_map_get(b, "push", NULL) == 0) {
            CHECK(replied); /* the reply comes before the push */
            CHECK_STR(code_of(b, code, sizeof code), "failed");
            error_message(b, got, sizeof got);
            CHECK_STR(got, want);
            pushed = true;
        } else {
            CHECK_EQ_INT(map_int(b, "id"), 4);
            replied = true;
        }
        payload_free(&b);
    }
    payload_free(&sb);
    close(fd);
    check_alive(&bf);
    bad_down(&bf);
}

/* Property: exec of a program whose argv[0] is not UTF-8 and cannot start
 * fails the process with a message naming it; that message reaches the
 * client as UTF-8 (U+FFFD for the bad bytes). */
static void test_utf8_exec_argv0(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    static const char prog[] = "/nonexistent-\xff\xfe/x";
    int fd = raw_connect(bf.f.path);
    sx_pack in;
    sx_pack_init(&in);
    sx_pack_array(&in, 1);
    sx_pack_array(&in, 1);
    sx_pack_strn(&in, prog, sizeof prog - 1);
    sx_payload pid, b;
    b = submit_raw(fd, 1, "exec", "run", sx_pack_payload(&in), &pid);
    sx_pack_fini(&in);
    pid_op(fd, "wait", 2, pid);
    payload_free(&b);
    CHECK_RC(read_strict(fd, 10000, &b), 0);
    char got[512], code[32];
    CHECK_STR(code_of(b, code, sizeof code), "failed");
    error_message(b, got, sizeof got);
    if (strstr(got, "/nonexistent-\xef\xbf\xbd\xef\xbf\xbd/x") == NULL)
        SX_FAILF("exec's message does not name the program: %s", got);
    payload_free(&b);
    close(fd);
    check_alive(&bf);
    bad_down(&bf);
}

/* hello on a raw connection: the mailbox PID's value (into *b, freed by
 * the caller). */
static sx_payload hello_raw(int fd, uint64_t id, sx_payload *b)
{
    sx_pack pk;
    req_begin(&pk, 3, "hello", id);
    sx_pack_str(&pk, "version");
    sx_pack_uint(&pk, 1);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    CHECK_RC(read_strict(fd, 10000, b), 0);
    sx_payload mb;
    CHECK_RC(sx_map_get(*b, "mailbox", &mb), 0);
    return mb;
}

/* Property: `send` with a topic that is not UTF-8 is bad_request (the
 * message says why), and nothing reaches the addressee: here another
 * client's mailbox, whose first push is the next good message. Passed on
 * as it is, the topic would go into the other client's push, and a strict
 * reader there would lose the frame (one client could spoil another's
 * connection). */
static void test_utf8_topic(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    int a = raw_connect(bf.f.path), r = raw_connect(bf.f.path);
    sx_payload rb, b;
    sx_payload to = hello_raw(r, 1, &rb);
    static const char *const topics[] = { "t\xff", "ab\xe2\x82", "\xed\xa0\x80",
                                          "\xc0\xae" };
    sx_pack pk;
    char got[256], code[32];
    for (uint64_t i = 0; i < 4; i++) {
        req_begin(&pk, 5, "send", 10 + i);
        sx_pack_str(&pk, "to");
        sx_pack_raw(&pk, to);
        sx_pack_str(&pk, "topic");
        sx_pack_str(&pk, topics[i]);
        sx_pack_str(&pk, "data");
        sx_pack_int(&pk, (int64_t)i);
        CHECK_RC(raw_frame(a, &pk), 0);
        sx_pack_fini(&pk);
        CHECK_RC(read_strict(a, 10000, &b), 0);
        CHECK_EQ_INT(map_int(b, "id"), (int64_t)(10 + i));
        CHECK_STR(code_of(b, code, sizeof code), "bad_request");
        error_message(b, got, sizeof got);
        CHECK(strstr(got, "UTF-8") != NULL);
        payload_free(&b);
    }
    req_begin(&pk, 5, "send", 20);
    sx_pack_str(&pk, "to");
    sx_pack_raw(&pk, to);
    sx_pack_str(&pk, "topic");
    sx_pack_str(&pk, "ok \xe2\x82\xac");
    sx_pack_str(&pk, "data");
    sx_pack_int(&pk, 20);
    CHECK_RC(raw_frame(a, &pk), 0);
    sx_pack_fini(&pk);
    expect_reply(a, 20, NULL);
    CHECK_RC(read_strict(r, 10000, &b), 0);
    sx_payload t;
    CHECK_RC(sx_map_get(b, "topic", &t), 0);
    CHECK_RC(sx_payload_get_str(t, got, sizeof got), 0);
    CHECK_STR(got, "ok \xe2\x82\xac");
    CHECK_EQ_INT(map_int(b, "data"), 20);
    payload_free(&b);
    payload_free(&rb);
    close(a);
    close(r);
    check_alive(&bf);
    bad_down(&bf);
}

/* A value with strs that are not UTF-8 at every kind of spot (a map key,
 * an array element, a nested map's key and value; fixstr, str 8, str 16
 * and str 32 forms) among good strs, a bin and an ext. With bin set, it
 * is packed the way the server must send it: each bad str as a bin of
 * the same bytes. */
static void odd_value(sx_pack *pk, bool bin, char *big, size_t big_n)
{
#define ODD(s, n) (bin ? sx_pack_bin(pk, (s), (n)) : sx_pack_strn(pk, (s), (n)))
    sx_pack_init(pk);
    sx_pack_map(pk, 7);
    ODD("k\xff", 2);
    sx_pack_array(pk, 3);
    sx_pack_str(pk, "ok");
    ODD("\xff\xfe", 2);
    sx_pack_map(pk, 1);
    ODD("x\xc3", 2);
    ODD("\xc3", 1);
    sx_pack_str(pk, "good \xe2\x82\xac");
    sx_pack_str(pk, "fine");
    sx_pack_str(pk, "s8");
    ODD("0123456789012345678901234567890123456789\xed\xa0\x80", 43);
    sx_pack_str(pk, "s16");
    ODD(big, 300);
    sx_pack_str(pk, "s32");
    ODD(big, big_n);
    sx_pack_str(pk, "bin");
    sx_pack_bin(pk, "\xff", 1);
    sx_pack_str(pk, "ext");
    sx_pack_raw(pk, (sx_payload){ (const uint8_t *)"\xd4\x05\xff", 3 });
#undef ODD
    CHECK_RC(pk->err, 0);
}

/* Checks that the value `key` of map b is exactly want's bytes. */
static void value_is(sx_payload b, const char *key, const sx_pack *want)
{
    sx_payload v;
    CHECK_RC(sx_map_get(b, key, &v), 0);
    CHECK_EQ_U64(v.len, want->len);
    CHECK(memcmp(v.data, want->data, v.len) == 0);
}

/* Property: a str inside a payload that is not UTF-8 goes to the client
 * as a bin of the same bytes, wherever it sits (a key of a nested map
 * included), and everything else is passed through unchanged: in a
 * message push (echo sends the data back), in a wait answer's result and
 * in an exit push's result (same returns its input). */
static void test_utf8_payload_bin(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    size_t big_n = 70000; /* a str 32 */
    char *big = malloc(big_n);
    CHECK(big != NULL);
    memset(big, 'b', big_n);
    big[150] = (char)0xff; /* also the bad byte of s16's first 300 */
    sx_pack sent, want;
    odd_value(&sent, false, big, big_n);
    odd_value(&want, true, big, big_n);
    int fd = raw_connect(bf.f.path);
    sx_payload hb, b, sb;
    (void)hello_raw(fd, 1, &hb);
    payload_free(&hb);
    /* a message push: echo sends the data back to this mailbox */
    sx_pack in;
    sx_pack_init(&in);
    sx_pack_array(&in, 0);
    sx_payload echo;
    sb = submit_raw(fd, 2, "echo", "serve", sx_pack_payload(&in), &echo);
    sx_pack_fini(&in);
    sx_pack pk;
    req_begin(&pk, 5, "send", 3);
    sx_pack_str(&pk, "to");
    sx_pack_raw(&pk, echo);
    sx_pack_str(&pk, "topic");
    sx_pack_str(&pk, "ping");
    sx_pack_str(&pk, "data");
    sx_pack_raw(&pk, sx_pack_payload(&sent));
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    bool replied = false, pushed = false;
    while (!replied || !pushed) {
        CHECK_RC(read_strict(fd, 10000, &b), 0);
        if (sx_map_get(b, "push", NULL) == 0) {
            value_is(b, "data", &want);
            pushed = true;
        } else {
            CHECK_EQ_INT(map_int(b, "id"), 3);
            replied = true;
        }
        payload_free(&b);
    }
    pid_op(fd, "terminate", 4, echo);
    expect_reply(fd, 4, NULL);
    payload_free(&sb);
    /* a wait answer and an exit push: same returns the value */
    sx_pack_init(&in);
    sx_pack_array(&in, 1);
    sx_pack_raw(&in, sx_pack_payload(&sent));
    sx_payload pid;
    sb = submit_raw(fd, 5, "same", "run", sx_pack_payload(&in), &pid);
    sx_pack_fini(&in);
    pid_op(fd, "wait", 6, pid);
    CHECK_RC(read_strict(fd, 10000, &b), 0);
    CHECK_EQ_INT(map_int(b, "id"), 6);
    value_is(b, "result", &want);
    payload_free(&b);
    pid_op(fd, "subscribe", 7, pid);
    expect_reply(fd, 7, NULL);
    CHECK_RC(read_strict(fd, 10000, &b), 0);
    CHECK_RC(sx_map_get(b, "push", NULL), 0);
    value_is(b, "result", &want);
    payload_free(&b);
    payload_free(&sb);
    sx_pack_fini(&sent);
    sx_pack_fini(&want);
    free(big);
    close(fd);
    check_alive(&bf);
    bad_down(&bf);
}

/* Property: `types` sends a registered type's name and methods that are
 * not UTF-8 (an embedder's or a --load'ed plugin's strings) as bin, the
 * others as str, and so does `ps` for a process of that type; a
 * server_name that is not UTF-8 is refused at start (hello would send it
 * as a str). */
static void test_utf8_types(void)
{
    static const char *const odd_m[] = { "r\xfe", "ok", NULL };
    const sx_process_type odd = { .name = "t\xff",
                                  .state_size = 8,
                                  .init = idle_init,
                                  .step = idle_step,
                                  .methods = odd_m };
    sx_engine_config ec = { .workers = 1 };
    sx_engine *e = tx_engine_up(&ec, &odd, 1);
    char dir[64], path[128];
    tx_mkdtemp(dir, sizeof dir, "sxutf");
    snprintf(path, sizeof path, "%s/s.sock", dir);
    sx_server *s;
    sx_server_config sc = { .socket_path = path, .server_name = "x\xff" };
    CHECK_RC(sx_server_start(e, &sc, &s), SX_EINVAL);
    sc.server_name = "caf\xc3\xa9";
    CHECK_RC(sx_server_start(e, &sc, &s), 0);
    int fd = raw_connect(path);
    sx_payload hb, b, v;
    (void)hello_raw(fd, 1, &hb);
    CHECK_RC(sx_map_get(hb, "server", &v), 0);
    CHECK(v.len == 6 && memcmp(v.data,
                               "\xa5"
                               "caf\xc3\xa9",
                               6) == 0);
    payload_free(&hb);
    sx_pack pk;
    req_begin(&pk, 2, "types", 2);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    CHECK_RC(read_strict(fd, 10000, &b), 0);
    /* [{"name": bin "t\xff", "methods": [bin "r\xfe", "ok"]}] */
    static const uint8_t want[] = "\x91\x82\xa4name\xc4\x02t\xff\xa7methods"
                                  "\x92\xc4\x02r\xfe\xa2ok";
    CHECK_RC(sx_map_get(b, "types", &v), 0);
    CHECK_EQ_U64(v.len, sizeof want - 1);
    CHECK(memcmp(v.data, want, v.len) == 0);
    payload_free(&b);
    /* ps: {"pid": ..., "type": bin "t\xff", "method": bin "r\xfe", ...} */
    sx_pack in;
    sx_pack_init(&in);
    sx_pack_array(&in, 0);
    sx_payload pid;
    sx_payload sb =
        submit_raw(fd, 3, "t\xff", "r\xfe", sx_pack_payload(&in), &pid);
    sx_pack_fini(&in);
    req_begin(&pk, 2, "ps", 4);
    CHECK_RC(raw_frame(fd, &pk), 0);
    sx_pack_fini(&pk);
    CHECK_RC(read_strict(fd, 10000, &b), 0);
    sx_payload procs, e0;
    CHECK_RC(sx_map_get(b, "processes", &procs), 0);
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, procs);
    CHECK_RC(sx_unpack_array(&u, &n), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_RC(sx_unpack_raw(&u, &e0), 0);
    CHECK_RC(sx_map_get(e0, "pid", &v), 0);
    CHECK(v.len == pid.len && memcmp(v.data, pid.data, v.len) == 0);
    CHECK_RC(sx_map_get(e0, "type", &v), 0);
    CHECK(v.len == 4 && memcmp(v.data, "\xc4\x02t\xff", 4) == 0);
    CHECK_RC(sx_map_get(e0, "method", &v), 0);
    CHECK(v.len == 4 && memcmp(v.data, "\xc4\x02r\xfe", 4) == 0);
    payload_free(&b);
    payload_free(&sb);
    close(fd);
    sx_server_stop(s);
    tx_engine_down(e);
    rmdir(dir);
}

/* Property: nesting within SX_WIRE_MAX_DEPTH is accepted (and answered);
 * deeper nesting — even 100,000 levels — is bad_frame, answered without
 * recursion, and the connection closes. */
static void test_deep_nesting(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    const size_t depths[] = { SX_WIRE_MAX_DEPTH - 1, SX_WIRE_MAX_DEPTH + 1,
                              100000 };
    for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
        int fd = raw_connect(bf.f.path);
        sx_pack pk;
        req_begin(&pk, 3, "types", 9);
        sx_pack_str(&pk, "deep");
        for (size_t d = 0; d < depths[i]; d++)
            sx_pack_array(&pk, 1);
        sx_pack_nil(&pk);
        raw_frame(fd, &pk);
        sx_pack_fini(&pk);
        if (depths[i] < SX_WIRE_MAX_DEPTH)
            expect_reply(fd, 9, NULL);
        else
            expect_bad_frame(fd);
        close(fd);
        check_alive(&bf);
    }
    bad_down(&bf);
}

/* xorshift64*: a fixed seed, so a failure can be replayed. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

/* A valid request to mutate: a few shapes that exercise the ops. */
static void seed_request(sx_pack *pk, uint64_t kind)
{
    uint8_t b[SX_PAYLOAD_INT_MAX];
    switch (kind % 5) {
    case 0:
        req_begin(pk, 5, "submit", 3);
        sx_pack_str(pk, "type");
        sx_pack_str(pk, "square");
        sx_pack_str(pk, "method");
        sx_pack_str(pk, "run");
        sx_pack_str(pk, "input");
        sx_pack_array(pk, 1);
        sx_pack_raw(pk, sx_payload_int(b, 3));
        break;
    case 1:
        req_begin(pk, 4, "wait", 4);
        sx_pack_str(pk, "pid");
        sx_pack_str(pk, "{0@1|1}");
        sx_pack_str(pk, "timeout_ms");
        sx_pack_uint(pk, 10);
        break;
    case 2:
        req_begin(pk, 5, "send", 5);
        sx_pack_str(pk, "to");
        sx_pack_str(pk, "{0@1|2}");
        sx_pack_str(pk, "topic");
        sx_pack_str(pk, "t");
        sx_pack_str(pk, "data");
        sx_pack_array(pk, 2);
        sx_pack_map(pk, 1);
        sx_pack_str(pk, "k");
        sx_pack_nil(pk);
        sx_pack_bin(pk, "abc", 3);
        break;
    case 3:
        req_begin(pk, 3, "ps", 6);
        sx_pack_str(pk, "limit");
        sx_pack_uint(pk, 5);
        break;
    default:
        req_begin(pk, 3, "hello", 7);
        sx_pack_str(pk, "version");
        sx_pack_uint(pk, 1);
        break;
    }
}

/* Reads every frame until EOF; each must be a protocol frame (checked in
 * raw_read). Returns how many arrived. */
static int drain_to_eof(int fd)
{
    int n = 0;
    for (;;) {
        sx_payload b;
        int rc = raw_read(fd, 20000, &b);
        CHECK(rc >= 0); /* no timeout: the server always closes */
        if (rc == 1)
            return n;
        payload_free(&b);
        n++;
    }
}

/* Property: 1000 random byte strings, each on a fresh connection (raw
 * noise; a valid header over random bytes; valid requests with random
 * bytes flipped, cut or appended), then the client's end shut: the server
 * answers only with well-formed frames, always closes its end, and after
 * each the well-behaved client gets a correct answer. */
static void test_random(void)
{
    bad_fx bf;
    bad_up(&bf, 0);
    uint8_t buf[512];
    for (int i = 0; i < 1000; i++) {
        int fd = raw_connect(bf.f.path);
        uint64_t r = rnd();
        size_t n = 1 + (size_t)(rnd() % 300);
        switch (r % 3) {
        case 0: /* noise */
            for (size_t k = 0; k < n; k++)
                buf[k] = (uint8_t)rnd();
            raw_write(fd, buf, n);
            break;
        case 1: /* a header that matches, a random body */
            for (size_t k = 0; k < n; k++)
                buf[k] = (uint8_t)rnd();
            buf[0] = (uint8_t)(0x80 | (rnd() % 16)); /* a fixmap */
            raw_frame_bytes(fd, (uint32_t)n, buf, n);
            break;
        default: { /* a valid request, mutated */
            sx_pack pk;
            seed_request(&pk, rnd());
            size_t len = pk.len;
            memcpy(buf, pk.data, len);
            sx_pack_fini(&pk);
            int flips = 1 + (int)(rnd() % 3);
            for (int k = 0; k < flips; k++)
                buf[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
            uint64_t how = rnd() % 3;
            if (how == 1)
                len = 1 + (size_t)(rnd() % len); /* cut */
            else if (how == 2 && len < sizeof(buf) - 8)
                for (int k = 0; k < 4; k++)
                    buf[len++] = (uint8_t)rnd(); /* appended */
            raw_frame_bytes(fd, (uint32_t)len, buf, len);
            break;
        }
        }
        shutdown(fd, SHUT_WR);
        drain_to_eof(fd);
        close(fd);
        check_alive(&bf);
    }
    sx_server_stats st;
    sx_server_stats_get(bf.f.s, &st);
    CHECK(st.bad_frames > 100);
    CHECK_EQ_U64(st.slow_drops, 0);
    bad_down(&bf);
}

/* Property: a client that never reads while a process floods its mailbox
 * loses messages, not its connection: once its queued and unsent bytes
 * would pass max_output, messages are dropped and counted (push_drops);
 * the server's output for it stays within about max_output; its own
 * pending wait is still answered; when it reads, every message is either
 * received (in order) or counted in a `dropped` push placed where the gap
 * is; and everyone else is served throughout. Control: with the old
 * rule (the connection dropped as slow) slow_drops is 1, the wait is
 * lost and the client reads SX_ECLOSED. */
static void test_slow_reader(void)
{
    const size_t max_output = 256 << 10;
    const int64_t n_msgs = 20000;
    bad_fx bf;
    bad_up(&bf, max_output);
    sx_client *slow;
    CHECK_RC(sx_client_connect(bf.f.path, NULL, 10000, &slow), 0);
    char mb[SX_PID_TEXT_MAX];
    sx_pid_format(sx_client_mailbox(slow), mb, sizeof(mb));
    /* The slow client's own request, pending through the flood. */
    sx_pid sp;
    CHECK_RC(sx_client_submit(slow, "idle", "serve", NULL, 0, &sp, NULL), 0);
    uint64_t wid = 0;
    CHECK_RC(sx_client_post_wait(slow, sp, -1, &wid), 0);
    CHECK_RC(sx_client_flush(slow, 5000), 0);
    sx_pack a, b, c;
    sx_pack_init(&a);
    sx_pack_init(&b);
    sx_pack_init(&c);
    sx_pack_str(&a, mb);
    sx_pack_int(&b, n_msgs);
    sx_pack_int(&c, 1024);
    sx_payload in[3] = { sx_pack_payload(&a), sx_pack_payload(&b),
                         sx_pack_payload(&c) };
    sx_pid fp;
    /* Submitted by the good client: the slow one does not read. */
    CHECK_RC(sx_client_submit(bf.good, "flood", "run", in, 3, &fp, NULL), 0);
    sx_pack_fini(&a);
    sx_pack_fini(&b);
    sx_pack_fini(&c);
    sx_reply r;
    CHECK_RC(sx_client_wait(bf.good, fp, 30000, NULL, &r), 0);
    sx_reply_free(&r);
    /* The slow client's wait gets its answer now. */
    CHECK_RC(sx_client_terminate(bf.good, sp, NULL), 0);
    check_alive(&bf);
    sx_server_stats st;
    sx_server_stats_get(bf.f.s, &st);
    CHECK(st.push_drops > 0);
    CHECK_EQ_U64(st.slow_drops, 0);
    CHECK(st.output_peak <= max_output + 4096);
    /* Now it reads: its wait's answer, and the messages it was sent, each
     * received in order or counted as dropped. */
    int64_t got = 0, dropped = 0, next = 0, notices = 0;
    bool answered = false;
    while (got + dropped < n_msgs || !answered) {
        uint64_t rid;
        int rc = sx_client_next_reply(slow, 0, &rid, &r);
        if (rc == 0) {
            CHECK_EQ_U64(rid, wid);
            CHECK_RC(r.error, SX_ETERMINATED);
            sx_reply_free(&r);
            answered = true;
            continue;
        }
        rc = sx_client_next_push(slow, 10000, &r);
        CHECK_RC(rc, 0);
        if (rc != 0)
            break;
        sx_payload kv;
        char kind[16] = "";
        CHECK_RC(sx_map_get(r.body, "push", &kv), 0);
        CHECK_RC(sx_payload_get_str(kv, kind, sizeof(kind)), 0);
        if (strcmp(kind, "dropped") == 0) {
            int64_t k = map_int(r.body, "count");
            CHECK(k > 0);
            dropped += k;
            next += k; /* the gap: the next message is k further on */
            notices++;
        } else {
            CHECK(strcmp(kind, "message") == 0);
            sx_payload d;
            CHECK_RC(sx_map_get(r.body, "data", &d), 0);
            sx_unpack u;
            sx_unpack_init(&u, d);
            uint32_t len;
            CHECK_RC(sx_unpack_array(&u, &len), 0);
            int64_t seq = -1;
            CHECK_RC(sx_unpack_int(&u, &seq), 0);
            CHECK_EQ_U64((uint64_t)seq, (uint64_t)next);
            next = seq + 1;
            got++;
        }
        sx_reply_free(&r);
    }
    CHECK_EQ_U64((uint64_t)(got + dropped), (uint64_t)n_msgs);
    CHECK(dropped > 0 && notices > 0);
    CHECK(answered);
    /* The connection is still there and serves requests. */
    check_alive(&bf);
    square_ok(slow, 7, 20000);
    sx_client_close(slow);
    check_alive(&bf);
    sx_server_stats_get(bf.f.s, &st);
    CHECK_EQ_U64(st.slow_drops, 0);
    CHECK_EQ_U64(st.push_drops, (uint64_t)dropped);
    bad_down(&bf);
}

static const sx_test_case cases[] = {
    { "truncated", test_truncated },
    { "lengths", test_lengths },
    { "not_a_map", test_not_a_map },
    { "bad_after_good", test_bad_after_good },
    { "fields_and_ops", test_fields_and_ops },
    { "field_lookup", test_field_lookup },
    { "id_forms", test_id_forms },
    { "input_counts", test_input_counts },
    { "utf8_cut", test_utf8_cut },
    { "utf8_fail_message", test_utf8_fail_message },
    { "utf8_exec_argv0", test_utf8_exec_argv0 },
    { "utf8_topic", test_utf8_topic },
    { "utf8_payload_bin", test_utf8_payload_bin },
    { "utf8_types", test_utf8_types },
    { "deep_nesting", test_deep_nesting },
    { "random", test_random },
    { "slow_reader", test_slow_reader },
};

SX_TEST_MAIN(cases)

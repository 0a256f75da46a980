/* tests/process/test_author.c — the authoring helpers of process.h: the
 * format packer (sx_pack_fmt, sx_pack_vfmt) against the same values written
 * call by call and read back, every format error, sx_yieldf and sx_donef on
 * a step output (the stack buffer and the heap fallback), the path getters
 * on nested data and on every prefix of it, sx_outcome_of and
 * sx_outcome_at on good and bad answers, sx_cancelled and sx_cancelled_by,
 * and the batch walker's order.
 *
 * Inputs that must fail are copied into exact-size heap blocks so that a
 * read past the end is caught when this runs under ASan.
 *
 * Threads: single-threaded.
 */
#include "process/output.h"
#include "process/stepx/process.h"
#include "tests/support/harness.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- helpers ---- */

static sx_payload pl_of(const void *p, size_t n)
{
    sx_payload pl = { p, n };
    return pl;
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

static bool same_bytes(sx_payload a, sx_payload b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0);
}

/* Whether s holds exactly the C string want. */
static bool str_is(sx_str s, const char *want)
{
    return s.ptr != NULL && s.len == strlen(want) &&
           memcmp(s.ptr, want, s.len) == 0;
}

/* The arguments of yield i, and the DONE result or FAIL message. */
static sx_payload yield_args(const sx_step_output *out, size_t i)
{
    return pl_of(sx__output_bytes(out, out->yields[i].off), out->yields[i].len);
}

static sx_payload result_of(const sx_step_output *out)
{
    return pl_of(sx__output_bytes(out, out->result_off), out->result_len);
}

static const char *fail_msg(const sx_step_output *out)
{
    CHECK_EQ_INT(out->status, SX__ST_FAIL);
    return (const char *)sx__output_bytes(out, out->result_off);
}

/* ---- the format packer ---- */

/* A nested format writes exactly what the same calls one by one write, and
 * the reader gets every value back. */
static void test_fmt_nested(void)
{
    sx_pack a, b;
    sx_pid pid = { 7, 8, 9 };
    uint8_t raw[SX_PAYLOAD_INT_MAX];
    sx_payload rv = sx_payload_int(raw, -77);
    static const uint8_t bin[3] = { 0, 1, 2 };

    sx_pack_init(&a);
    sx_pack_init(&b);
    CHECK_RC(sx_pack_fmt(&a,
                         "{s:i, s:[s, s, []], s:{s:b, s:n, s:{}}, s:d, "
                         "s:S, s:y, s:p, s:v, s:v, s:s}",
                         "a", -3, "list", "x", "y", "m", "t", 1, "z", "f", "d",
                         2.5, "str", "abcdef", (size_t)3, "bin", bin,
                         sizeof(bin), "pid", pid, "raw", rv, "nil",
                         pl_of(NULL, 0), "null", (const char *)NULL),
             0);
    sx_pack_map(&b, 10);
    sx_pack_str(&b, "a");
    sx_pack_int(&b, -3);
    sx_pack_str(&b, "list");
    sx_pack_array(&b, 3);
    sx_pack_str(&b, "x");
    sx_pack_str(&b, "y");
    sx_pack_array(&b, 0);
    sx_pack_str(&b, "m");
    sx_pack_map(&b, 3);
    sx_pack_str(&b, "t");
    sx_pack_bool(&b, true);
    sx_pack_str(&b, "z");
    sx_pack_nil(&b);
    sx_pack_str(&b, "f");
    sx_pack_map(&b, 0);
    sx_pack_str(&b, "d");
    sx_pack_double(&b, 2.5);
    sx_pack_str(&b, "str");
    sx_pack_strn(&b, "abc", 3);
    sx_pack_str(&b, "bin");
    sx_pack_bin(&b, bin, 3);
    sx_pack_str(&b, "pid");
    sx_pack_pid(&b, pid);
    sx_pack_str(&b, "raw");
    sx_pack_int(&b, -77);
    sx_pack_str(&b, "nil");
    sx_pack_nil(&b);
    sx_pack_str(&b, "null");
    sx_pack_nil(&b);
    CHECK_RC(b.err, 0);
    CHECK(same_bytes(sx_pack_payload(&a), sx_pack_payload(&b)));

    /* Read back with the cursor. */
    sx_unpack u;
    uint32_t n;
    const char *s;
    size_t l;
    int64_t i;
    bool t;
    sx_unpack_init(&u, sx_pack_payload(&a));
    CHECK_RC(sx_unpack_map(&u, &n), 0);
    CHECK_EQ_INT(n, 10);
    CHECK_RC(sx_unpack_str(&u, &s, &l), 0);
    CHECK(l == 1 && s[0] == 'a');
    CHECK_RC(sx_unpack_int(&u, &i), 0);
    CHECK_EQ_INT(i, -3);
    CHECK_RC(sx_unpack_skip(&u), 0);
    CHECK_RC(sx_unpack_array(&u, &n), 0);
    CHECK_EQ_INT(n, 3);
    CHECK_RC(sx_unpack_skip(&u), 0);
    CHECK_RC(sx_unpack_skip(&u), 0);
    CHECK_RC(sx_unpack_array(&u, &n), 0);
    CHECK_EQ_INT(n, 0);
    CHECK_RC(sx_unpack_skip(&u), 0);
    CHECK_RC(sx_unpack_map(&u, &n), 0);
    CHECK_EQ_INT(n, 3);
    CHECK_RC(sx_unpack_skip(&u), 0);
    CHECK_RC(sx_unpack_bool(&u, &t), 0);
    CHECK(t);
    sx_pack_fini(&a);
    sx_pack_fini(&b);

    /* Several top-level values; blanks anywhere; an empty format writes
     * nothing. */
    sx_pack_init(&a);
    CHECK_RC(sx_pack_fmt(&a, ""), 0);
    CHECK_EQ_U64(a.len, 0);
    CHECK_RC(sx_pack_fmt(&a, " s ,\ti\n", "k", 5), 0);
    sx_unpack_init(&u, sx_pack_payload(&a));
    CHECK_RC(sx_unpack_str(&u, &s, &l), 0);
    CHECK_RC(sx_unpack_int(&u, &i), 0);
    CHECK_EQ_INT(i, 5);
    CHECK(sx_unpack_done(&u));
    sx_pack_fini(&a);
}

/* I and U at their extremes, i and u at theirs. */
static void test_fmt_int_extremes(void)
{
    sx_pack pk;
    sx_unpack u;
    int64_t i;
    uint64_t v;

    sx_pack_init(&pk);
    CHECK_RC(sx_pack_fmt(&pk, "[I, I, I, U, U, U, i, i, u]", INT64_MIN,
                         INT64_MAX, (int64_t)-1, UINT64_MAX, (uint64_t)0,
                         (uint64_t)INT64_MAX + 1, INT_MIN, INT_MAX, UINT_MAX),
             0);
    sx_unpack_init(&u, sx_pack_payload(&pk));
    CHECK_RC(sx_unpack_array(&u, NULL), 0);
    CHECK_RC(sx_unpack_int(&u, &i), 0);
    CHECK(i == INT64_MIN);
    CHECK_RC(sx_unpack_int(&u, &i), 0);
    CHECK(i == INT64_MAX);
    CHECK_RC(sx_unpack_int(&u, &i), 0);
    CHECK_EQ_INT(i, -1);
    CHECK_RC(sx_unpack_uint(&u, &v), 0);
    CHECK(v == UINT64_MAX);
    CHECK_RC(sx_unpack_uint(&u, &v), 0);
    CHECK_EQ_U64(v, 0);
    CHECK_RC(sx_unpack_uint(&u, &v), 0);
    CHECK(v == (uint64_t)INT64_MAX + 1);
    CHECK_RC(sx_unpack_int(&u, &i), 0);
    CHECK_EQ_INT(i, INT_MIN);
    CHECK_RC(sx_unpack_int(&u, &i), 0);
    CHECK_EQ_INT(i, INT_MAX);
    CHECK_RC(sx_unpack_uint(&u, &v), 0);
    CHECK_EQ_U64(v, UINT_MAX);
    CHECK(sx_unpack_done(&u));
    sx_pack_fini(&pk);
}

/* Every malformed format is SX_EINVAL, sticky, and writes nothing. */
static void test_fmt_errors(void)
{
    static const char *const bad[] = { "x",       "s q",  "[",      "]",
                                       "{",       "}",    "[}",     "{]",
                                       "{s}",     "{s:i", "s]",     "{sss}",
                                       "[{]}",    "[[]",  "{s:[}]", "i i %",
                                       "{s:i s}", "[s]]", "-",      "ii!" };
    sx_pack pk;

    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        sx_pack_init(&pk);
        CHECK_RC(sx_pack_int(&pk, 1), 0);
        CHECK_RC(sx_pack_fmt(&pk, bad[k], "a", 1, "b", 2, "c"), SX_EINVAL);
        CHECK_EQ_U64(pk.len, 1);
        CHECK_RC(pk.err, SX_EINVAL);
        CHECK_RC(sx_pack_nil(&pk), SX_EINVAL);
        CHECK_RC(sx_pack_fmt(&pk, "i", 1), SX_EINVAL);
        sx_pack_fini(&pk);
    }
    CHECK_RC(sx_pack_fmt(NULL, "i", 1), SX_EINVAL);
    sx_pack_init(&pk);
    CHECK_RC(sx_pack_fmt(&pk, NULL), SX_EINVAL);
    CHECK_RC(pk.err, SX_EINVAL);
    sx_pack_fini(&pk);

    /* A sticky error from before wins. */
    uint8_t one[1];
    sx_pack_init_fixed(&pk, one, sizeof(one));
    CHECK_RC(sx_pack_str(&pk, "too long"), SX_ELIMIT);
    CHECK_RC(sx_pack_fmt(&pk, "x"), SX_ELIMIT);

    /* Nesting: SX_UNPACK_MAX_DEPTH levels pack, one more does not. */
    char fmt[2 * SX_UNPACK_MAX_DEPTH + 3];
    for (size_t depth = SX_UNPACK_MAX_DEPTH; depth <= SX_UNPACK_MAX_DEPTH + 1;
         depth++) {
        size_t o = 0;
        for (size_t k = 0; k < depth; k++)
            fmt[o++] = '[';
        for (size_t k = 0; k < depth; k++)
            fmt[o++] = ']';
        fmt[o] = '\0';
        sx_pack_init(&pk);
        CHECK_RC(sx_pack_fmt(&pk, fmt),
                 depth <= SX_UNPACK_MAX_DEPTH ? 0 : SX_EINVAL);
        if (depth <= SX_UNPACK_MAX_DEPTH) {
            sx_unpack u;
            sx_unpack_init(&u, sx_pack_payload(&pk));
            CHECK_RC(sx_unpack_skip(&u), 0);
            CHECK(sx_unpack_done(&u));
        }
        sx_pack_fini(&pk);
    }

    /* An error while writing rolls back the whole call. */
    uint8_t small[8];
    sx_pack_init_fixed(&pk, small, sizeof(small));
    CHECK_RC(sx_pack_int(&pk, 1), 0);
    CHECK_RC(sx_pack_fmt(&pk, "[s, s]", "abc", "defgh"), SX_ELIMIT);
    CHECK_EQ_U64(pk.len, 1);
    static const uint8_t junk[2] = { 0x92, 0x01 }; /* array of 2, one given */
    sx_pack_init(&pk);
    CHECK_RC(sx_pack_fmt(&pk, "[i, v]", 1, pl_of(junk, sizeof(junk))),
             SX_EPROTO);
    CHECK_EQ_U64(pk.len, 0);
    sx_pack_fini(&pk);
    sx_pack_init(&pk);
    CHECK_RC(sx_pack_fmt(&pk, "S", (const char *)NULL, (size_t)2), SX_EINVAL);
    CHECK_EQ_U64(pk.len, 0);
    sx_pack_fini(&pk);
}

/* sx_pack_vfmt from a caller's own variadic function. */
static int vfmt_wrapper(sx_pack *pk, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = sx_pack_vfmt(pk, fmt, ap);
    va_end(ap);
    return rc;
}

static void test_fmt_vfmt(void)
{
    sx_pack pk;
    sx_pack_init(&pk);
    CHECK_RC(vfmt_wrapper(&pk, "{s:[I,d]}", "k", (int64_t)1 << 40, 0.25), 0);
    sx_payload pl = sx_pack_payload(&pk);
    CHECK(sx_get_int(pl, "k.0", 0) == (int64_t)1 << 40);
    CHECK(sx_get_double(pl, "k.1", 0) == 0.25);
    sx_pack_fini(&pk);
}

/* ---- sx_yieldf, sx_donef ---- */

static void check_str_payload(sx_payload pl, char c, size_t n)
{
    sx_unpack u;
    const char *s;
    size_t l;
    sx_unpack_init(&u, pl);
    CHECK_RC(sx_unpack_str(&u, &s, &l), 0);
    CHECK_EQ_U64(l, n);
    for (size_t i = 0; i < n; i++)
        CHECK(s[i] == c);
    CHECK(sx_unpack_done(&u));
}

static void test_yieldf(void)
{
    sx_step_output out;
    char big[1001];

    sx__output_init(&out);
    CHECK_RC(sx_yieldf(&out, 7, 42, "{s:i}", "a", 1), 0);
    CHECK_EQ_U64(out.n_yields, 1);
    CHECK_EQ_INT(out.yields[0].cmd, 7);
    CHECK_EQ_U64(out.yields[0].tag, 42);
    CHECK_EQ_INT(sx_get_int(yield_args(&out, 0), "a", 0), 1);

    /* 254 bytes of string: 256 with the header, the stack buffer's size;
     * 255 and 1000 take the heap. */
    static const size_t lens[] = { 254, 255, 1000 };
    for (size_t k = 0; k < 3; k++) {
        memset(big, 'x', lens[k]);
        big[lens[k]] = '\0';
        CHECK_RC(sx_yieldf(&out, 1, k, "s", big), 0);
        check_str_payload(yield_args(&out, out.n_yields - 1), 'x', lens[k]);
    }
    /* The stack buffer fills in the middle of a container. */
    memset(big, 'y', 200);
    big[200] = '\0';
    CHECK_RC(sx_yieldf(&out, 2, 9, "[s, s, s]", big, big, big), 0);
    sx_payload pl = yield_args(&out, out.n_yields - 1);
    CHECK_EQ_U64(sx_get_len(pl, NULL), 3);
    CHECK_EQ_U64(sx_get_str(pl, "2").len, 200);

    size_t before = out.n_yields;
    CHECK_RC(sx_yieldf(&out, 1, 1, "{s}", "a"), SX_EINVAL);
    CHECK_RC(sx_yieldf(&out, 1, 1, NULL), SX_EINVAL);
    CHECK_EQ_U64(out.n_yields, before);
    CHECK_RC(sx_yieldf(NULL, 1, 1, "i", 1), SX_EINVAL);
    CHECK_RC(sx_yieldf(&out, 1, 1, ""), 0);
    CHECK_EQ_U64(yield_args(&out, out.n_yields - 1).len, 0);
    sx__output_fini(&out);
}

static void test_donef(void)
{
    sx_step_output out;
    char big[600];

    sx__output_init(&out);
    CHECK_RC(sx_donef(&out, "{s:s, s:[i,i]}", "ok", "yes", "n", 1, 2), 0);
    CHECK_EQ_INT(out.status, SX__ST_DONE);
    CHECK(str_is(sx_get_str(result_of(&out), "ok"), "yes"));
    CHECK_EQ_INT(sx_get_int(result_of(&out), "n.1", 0), 2);

    sx__output_reset(&out);
    memset(big, 'z', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    CHECK_RC(sx_donef(&out, "s", big), 0);
    CHECK_EQ_INT(out.status, SX__ST_DONE);
    check_str_payload(result_of(&out), 'z', sizeof(big) - 1);

    /* A pack error fails the process with a message naming it. */
    sx__output_reset(&out);
    CHECK_RC(sx_donef(&out, "[i", 1), SX_EINVAL);
    CHECK_RC(out.fail_code, SX_EINVAL);
    CHECK(strstr(fail_msg(&out), "SX_EINVAL") != NULL);
    sx__output_reset(&out);
    static const uint8_t junk[1] = { 0xc1 };
    CHECK_RC(sx_donef(&out, "v", pl_of(junk, 1)), SX_EPROTO);
    CHECK_RC(out.fail_code, SX_EPROTO);
    CHECK(strstr(fail_msg(&out), "SX_EPROTO") != NULL);
    CHECK_RC(sx_donef(NULL, "i", 1), SX_EINVAL);
    sx__output_fini(&out);
}

/* ---- sx_cancelled, sx_cancelled_by ---- */

static void test_cancelled(void)
{
    sx_step_output out;
    sx_pack pk;
    sx_event ev = { .type = SX_EVENT_MESSAGE, .topic = SX_TOPIC_CANCEL };
    static char reason[5000];

    sx__output_init(&out);
    sx_cancelled(&out, "shutting down");
    CHECK_RC(out.fail_code, SX_ECANCELLED);
    CHECK_STR(fail_msg(&out), "shutting down");
    sx__output_reset(&out);
    sx_cancelled(&out, NULL);
    CHECK_STR(fail_msg(&out), "cancelled");

    /* A reason without a NUL after it. */
    static const uint8_t bye[4] = { 0xa3, 'b', 'y', 'e' };
    uint8_t *q = dup_exact(bye, sizeof(bye));
    ev.data = pl_of(q, sizeof(bye));
    sx__output_reset(&out);
    sx_cancelled_by(&out, &ev);
    CHECK_RC(out.fail_code, SX_ECANCELLED);
    CHECK_STR(fail_msg(&out), "bye");
    /* Cut short: not a string, so the default. */
    ev.data = pl_of(q, 3);
    sx__output_reset(&out);
    sx_cancelled_by(&out, &ev);
    CHECK_STR(fail_msg(&out), "cancelled");
    free(q);

    /* A long reason keeps its first 1023 bytes. */
    memset(reason, 'r', sizeof(reason));
    sx_pack_init(&pk);
    CHECK_RC(sx_pack_strn(&pk, reason, sizeof(reason)), 0);
    q = dup_exact(pk.data, pk.len);
    ev.data = pl_of(q, pk.len);
    sx__output_reset(&out);
    sx_cancelled_by(&out, &ev);
    CHECK_EQ_U64(strlen(fail_msg(&out)), 1023);
    CHECK(memcmp(fail_msg(&out), reason, 1023) == 0);
    free(q);

    /* ... cut before a UTF-8 sequence that would not fit whole. */
    memcpy(reason + 1022, "\xc3\xa9", 2);
    sx_pack_reset(&pk);
    CHECK_RC(sx_pack_strn(&pk, reason, 1030), 0);
    ev.data = sx_pack_payload(&pk);
    sx__output_reset(&out);
    sx_cancelled_by(&out, &ev);
    CHECK_EQ_U64(strlen(fail_msg(&out)), 1022);

    /* Not a string, empty, no event: "cancelled". */
    uint8_t ib[SX_PAYLOAD_INT_MAX];
    sx_payload others[3] = { sx_payload_int(ib, 5), pl_of(NULL, 0),
                             pl_of("\xa0", 1) };
    for (size_t k = 0; k < 3; k++) {
        ev.data = others[k];
        sx__output_reset(&out);
        sx_cancelled_by(&out, &ev);
        CHECK_RC(out.fail_code, SX_ECANCELLED);
        CHECK_STR(fail_msg(&out), "cancelled");
    }
    sx__output_reset(&out);
    sx_cancelled_by(&out, NULL);
    CHECK_STR(fail_msg(&out), "cancelled");
    sx_cancelled(NULL, "x");
    sx_cancelled_by(NULL, &ev);
    sx_pack_fini(&pk);
    sx__output_fini(&out);
}

/* ---- path getters ---- */

/* {"user": {"name": "ann", "emails": ["a@x", "b@x"], "age": 30,
 *           "score": 1.5, "ok": true, "0": "zero-key", "bin": bin,
 *           "empty": "", "nul": "a\0b"},
 *  "list": [10, [20, 30], {"k": "v"}], 7: "intkey", "big": UINT64_MAX,
 *  "neg": -5} */
static void sample(sx_pack *pk)
{
    sx_pack_init(pk);
    CHECK_RC(sx_pack_fmt(pk,
                         "{s:{s:s, s:[s,s], s:i, s:d, s:b, s:s, s:y, s:s, "
                         "s:S}, s:[i, [i,i], {s:s}], i:s, s:U, s:i}",
                         "user", "name", "ann", "emails", "a@x", "b@x", "age",
                         30, "score", 1.5, "ok", 1, "0", "zero-key", "bin",
                         "\x01\x02", (size_t)2, "empty", "", "nul", "a\0b",
                         (size_t)3, "list", 10, 20, 30, "k", "v", 7, "intkey",
                         "big", UINT64_MAX, "neg", -5),
             0);
}

static void test_get_paths(void)
{
    sx_pack pk;
    sx_payload v;
    sample(&pk);
    sx_payload pl = sx_pack_payload(&pk);

    CHECK_RC(sx_get(pl, NULL, &v), 0);
    CHECK(same_bytes(v, pl));
    CHECK_RC(sx_get(pl, "", &v), 0);
    CHECK(same_bytes(v, pl));
    CHECK(str_is(sx_get_str(pl, "user.emails.0"), "a@x"));
    CHECK(str_is(sx_get_str(pl, "user.emails.1"), "b@x"));
    CHECK_RC(sx_get(pl, "user.emails.2", &v), SX_ENOTFOUND);
    /* Digits: a key in a map, an index in an array. */
    CHECK(str_is(sx_get_str(pl, "user.0"), "zero-key"));
    CHECK_EQ_INT(sx_get_int(pl, "list.0", -1), 10);
    CHECK_EQ_INT(sx_get_int(pl, "list.1.0", -1), 20);
    CHECK_EQ_INT(sx_get_int(pl, "list.01.1", -1), 30);
    CHECK(str_is(sx_get_str(pl, "list.2.k"), "v"));
    CHECK_RC(sx_get(pl, "list.x", NULL), SX_ENOTFOUND);
    CHECK_RC(sx_get(pl, "list.-1", NULL), SX_ENOTFOUND);
    CHECK_RC(sx_get(pl, "list.99999999999999999999999", NULL), SX_ENOTFOUND);
    CHECK_RC(sx_get(pl, "list.3", NULL), SX_ENOTFOUND);
    CHECK_RC(sx_get(pl, "user.name.x", NULL), SX_ENOTFOUND);
    CHECK_RC(sx_get(pl, "missing", NULL), SX_ENOTFOUND);
    CHECK_RC(sx_get(pl, "7", NULL), SX_ENOTFOUND); /* keys are strings */
    CHECK_RC(sx_get(pl, "user.", NULL), SX_ENOTFOUND);
    CHECK_RC(sx_get(pl, "neg", NULL), 0);
    CHECK_RC(sx_get(pl_of(NULL, 3), "a", NULL), SX_EPROTO);
    CHECK_RC(sx_get(pl_of(NULL, 0), "a", NULL), SX_ENOTFOUND);
    CHECK_RC(sx_get(pl_of(NULL, 0), NULL, &v), 0);
    CHECK_EQ_U64(v.len, 0);

    /* Typed: the value, or the default for another type or none. */
    CHECK_EQ_INT(sx_get_int(pl, "user.age", 0), 30);
    CHECK_EQ_INT(sx_get_int(pl, "neg", 0), -5);
    CHECK_EQ_INT(sx_get_int(pl, "user.name", 99), 99);
    CHECK_EQ_INT(sx_get_int(pl, "big", 99), 99);
    CHECK_EQ_INT(sx_get_int(pl, "nope", 98), 98);
    CHECK(sx_get_double(pl, "user.score", 0) == 1.5);
    CHECK(sx_get_double(pl, "user.age", 0) == 30.0);
    CHECK(sx_get_double(pl, "user.ok", -2.0) == -2.0);
    CHECK(sx_get_bool(pl, "user.ok", false));
    CHECK(!sx_get_bool(pl, "user.age", false));
    CHECK(sx_get_bool(pl, "nope", true));
    sx_str s = sx_get_str(pl, "user.bin");
    CHECK(s.ptr != NULL && s.len == 2 && memcmp(s.ptr, "\x01\x02", 2) == 0);
    s = sx_get_str(pl, "user.empty");
    CHECK(s.ptr != NULL && s.len == 0);
    s = sx_get_str(pl, "user.age");
    CHECK(s.ptr == NULL && s.len == 0);
    s = sx_get_str(pl, "nope");
    CHECK(s.ptr == NULL && s.len == 0);
    CHECK_EQ_U64(sx_get_len(pl, "user.emails"), 2);
    CHECK_EQ_U64(sx_get_len(pl, "user"), 9);
    CHECK_EQ_U64(sx_get_len(pl, ""), 5);
    CHECK_EQ_U64(sx_get_len(pl, "list.1"), 2);
    CHECK_EQ_U64(sx_get_len(pl, "user.name"), 0);
    CHECK_EQ_U64(sx_get_len(pl, "nope"), 0);
    sx_pack_fini(&pk);
}

static void test_get_strcpy(void)
{
    sx_pack pk;
    char buf[8];
    sample(&pk);
    sx_payload pl = sx_pack_payload(&pk);

    CHECK_RC(sx_get_strcpy(pl, "user.name", buf, 4), 0);
    CHECK_STR(buf, "ann");
    CHECK_RC(sx_get_strcpy(pl, "user.name", buf, 3), SX_ELIMIT);
    CHECK_STR(buf, "");
    CHECK_RC(sx_get_strcpy(pl, "user.empty", buf, 1), 0);
    CHECK_STR(buf, "");
    CHECK_RC(sx_get_strcpy(pl, "user.bin", buf, sizeof(buf)), 0);
    CHECK_STR(buf, "\x01\x02");
    strcpy(buf, "old");
    CHECK_RC(sx_get_strcpy(pl, "nope", buf, sizeof(buf)), SX_ENOTFOUND);
    CHECK_STR(buf, "");
    CHECK_RC(sx_get_strcpy(pl, "user.age", buf, sizeof(buf)), SX_EPROTO);
    CHECK_RC(sx_get_strcpy(pl, "user.nul", buf, sizeof(buf)), SX_EPROTO);
    CHECK_RC(sx_get_strcpy(pl, "user.name", buf, 0), SX_EINVAL);
    CHECK_RC(sx_get_strcpy(pl, "user.name", NULL, 8), SX_EINVAL);
    CHECK_RC(sx_get_strcpy(pl_of(NULL, 2), "a", buf, sizeof(buf)), SX_EPROTO);
    sx_pack_fini(&pk);
}

/* Every prefix of a valid payload, and every one-byte change of it: no
 * crash, and a path either gives the same value as in the whole payload
 * (the bytes after it are not read) or SX_EPROTO / SX_ENOTFOUND. A path to
 * the last value finds nothing in a strict prefix. */
static void test_get_hostile(void)
{
    static const char *const paths[] = { "",         "user.emails.1", "user.0",
                                         "list.2.k", "neg",           "list.1",
                                         "user.bin", "x.y.z" };
    sx_pack pk;
    char buf[16];
    sample(&pk);
    sx_payload whole = sx_pack_payload(&pk);

    for (size_t n = 0; n <= whole.len; n++) {
        uint8_t *q = dup_exact(whole.data, n);
        sx_payload pl = pl_of(q, n);
        for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
            sx_payload a, b;
            int want = sx_get(whole, paths[k], &a);
            int rc = sx_get(pl, paths[k], &b);
            if (rc == 0) {
                CHECK_RC(want, 0);
                CHECK(same_bytes(a, b) || (n == 0 && b.len == 0));
            } else {
                CHECK(rc == SX_EPROTO || rc == SX_ENOTFOUND);
            }
            (void)sx_get_int(pl, paths[k], 0);
            (void)sx_get_double(pl, paths[k], 0);
            (void)sx_get_bool(pl, paths[k], false);
            (void)sx_get_str(pl, paths[k]);
            (void)sx_get_strcpy(pl, paths[k], buf, sizeof(buf));
            (void)sx_get_len(pl, paths[k]);
        }
        if (n < whole.len) {
            int rc = sx_get(pl, "neg", NULL);
            CHECK(rc == SX_EPROTO || rc == SX_ENOTFOUND);
        }
        free(q);
    }

    uint64_t seed = 0x5eed;
    uint8_t *q = dup_exact(whole.data, whole.len);
    for (size_t round = 0; round < 4000; round++) {
        size_t at = sx_test_rng(&seed) % whole.len;
        uint8_t old = q[at];
        q[at] = (uint8_t)sx_test_rng(&seed);
        for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
            int rc = sx_get(pl_of(q, whole.len), paths[k], NULL);
            CHECK(rc == 0 || rc == SX_EPROTO || rc == SX_ENOTFOUND);
            (void)sx_get_strcpy(pl_of(q, whole.len), paths[k], buf,
                                sizeof(buf));
        }
        q[at] = old;
    }
    free(q);

    /* Claimed lengths far past the bytes; nesting past the reader's. */
    static const uint8_t huge[] = { 0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'a' };
    CHECK_RC(sx_get(pl_of(huge, sizeof(huge)), "a", NULL), SX_EPROTO);
    uint8_t deep[200];
    memset(deep, 0x91, sizeof(deep) - 1);
    deep[sizeof(deep) - 1] = 0x01;
    CHECK_RC(sx_get(pl_of(deep, sizeof(deep)), "0.0.0", NULL), SX_EPROTO);
    CHECK_RC(sx_get(pl_of(deep, sizeof(deep)), "0.0.0.0.0.0.0.0.0.1", NULL),
             SX_ENOTFOUND);
    sx_pack_fini(&pk);
}

/* ---- outcomes ---- */

static void test_outcome_of(void)
{
    sx_outcome o;
    uint8_t ib[SX_PAYLOAD_INT_MAX];
    sx_event ev = { .type = SX_EVENT_YIELD_COMPLETE, .tag = 3 };

    ev.data = sx_payload_int(ib, 12);
    CHECK_RC(sx_outcome_of(&ev, &o), 0);
    CHECK(o.message.ptr == NULL && o.message.len == 0);
    CHECK(same_bytes(o.value, ev.data));

    ev.error = SX_ETIMEDOUT;
    ev.error_msg = "too slow";
    ev.data = pl_of(NULL, 0);
    CHECK_RC(sx_outcome_of(&ev, &o), SX_ETIMEDOUT);
    CHECK_RC(o.error, SX_ETIMEDOUT);
    CHECK(str_is(o.message, "too slow"));
    ev.error_msg = NULL;
    CHECK_RC(sx_outcome_of(&ev, &o), SX_ETIMEDOUT);
    CHECK(str_is(o.message, sx_strerror(SX_ETIMEDOUT)));

    ev.type = SX_EVENT_MESSAGE;
    ev.topic = "hello";
    CHECK_RC(sx_outcome_of(&ev, &o), SX_EINVAL);
    CHECK(o.error == 0 && o.message.ptr == NULL && o.value.data == NULL);
    CHECK_RC(sx_outcome_of(NULL, &o), SX_EINVAL);
    CHECK_RC(sx_outcome_of(&ev, NULL), SX_EINVAL);
}

static void test_outcome_at(void)
{
    sx_pack pk;
    sx_outcome o;

    sx_pack_init(&pk);
    CHECK_RC(sx_pack_fmt(
                 &pk, "[{s:i}, {s:i, s:s}, {s:n}, {s:{s:[i]}}, {s:s, s:i}]",
                 "value", 5, "error", SX_ENOTFOUND, "message", "nope", "value",
                 "value", "a", 1, "message", "late", "error", SX_ETERMINATED),
             0);
    sx_payload all = sx_pack_payload(&pk);
    CHECK_RC(sx_outcome_at(all, 0, &o), 0);
    CHECK_RC(o.error, 0);
    CHECK(o.message.ptr == NULL);
    CHECK_EQ_INT(sx_get_int(o.value, NULL, 0), 5);
    CHECK_RC(sx_outcome_at(all, 1, &o), 0);
    CHECK_RC(o.error, SX_ENOTFOUND);
    CHECK(str_is(o.message, "nope"));
    CHECK(o.value.data == NULL && o.value.len == 0);
    CHECK_RC(sx_outcome_at(all, 2, &o), 0);
    CHECK(o.error == 0 && o.value.len == 1 && o.value.data[0] == 0xc0);
    CHECK_RC(sx_outcome_at(all, 3, &o), 0);
    CHECK_EQ_INT(sx_get_int(o.value, "a.0", 0), 1);
    CHECK_RC(sx_outcome_at(all, 4, &o), 0);
    CHECK_RC(o.error, SX_ETERMINATED);
    CHECK(str_is(o.message, "late"));
    CHECK_RC(sx_outcome_at(all, 5, &o), SX_ENOTFOUND);
    CHECK_RC(sx_outcome_at(all, SIZE_MAX, &o), SX_ENOTFOUND);
    CHECK_RC(sx_outcome_at(all, 0, NULL), 0);

    /* Every prefix: no crash, never a success for the last element. */
    for (size_t n = 0; n < all.len; n++) {
        uint8_t *q = dup_exact(all.data, n);
        for (size_t i = 0; i < 6; i++) {
            int rc = sx_outcome_at(pl_of(q, n), i, &o);
            CHECK(rc == 0 || rc == SX_EPROTO || rc == SX_ENOTFOUND);
            if (rc != 0)
                CHECK(o.error == 0 && o.value.data == NULL &&
                      o.message.ptr == NULL);
        }
        CHECK(sx_outcome_at(pl_of(q, n), 4, &o) != 0);
        free(q);
    }

    /* Answers of another shape: each element 0 is SX_EPROTO. */
    static const char *const shapes[] = {
        "{}",          "i",
        "[{s:i}]",     "{s:s}",
        "[{}]",        "[i]",
        "[{s:i,s:i}]", "[{s:i}]",
        "[{s:i,s:i}]", "[{s:i,s:s}]",
        "[{s:s,s:s}]", "[{s:I,s:s}]",
        "[{i:i}]",     "[{s:i,s:i,s:s}]",
        "[{s:i,s:i}]",
    };
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        sx_pack_reset(&pk);
        switch (k) {
        case 2: /* a key that is not one of the three */
            sx_pack_fmt(&pk, shapes[k], "valu", 1);
            break;
        case 3:
            sx_pack_fmt(&pk, shapes[k], "value", "x");
            break;
        case 6: /* a value and an error */
            sx_pack_fmt(&pk, shapes[k], "value", 1, "error", -1);
            break;
        case 7: /* an error without a message */
            sx_pack_fmt(&pk, shapes[k], "error", -1);
            break;
        case 8: /* a key twice */
            sx_pack_fmt(&pk, shapes[k], "value", 1, "value", 2);
            break;
        case 9: /* an error that is not negative */
            sx_pack_fmt(&pk, shapes[k], "error", 0, "message", "m");
            break;
        case 10: /* an error that is not an integer */
            sx_pack_fmt(&pk, shapes[k], "error", "x", "message", "m");
            break;
        case 11: /* an error below INT_MIN */
            sx_pack_fmt(&pk, shapes[k], "error", (int64_t)INT_MIN - 1,
                        "message", "m");
            break;
        case 12:
            sx_pack_fmt(&pk, shapes[k], 1, 2);
            break;
        case 13:
            sx_pack_fmt(&pk, shapes[k], "error", -1, "value", 1, "message",
                        "m");
            break;
        case 14: /* a message that is not a string */
            sx_pack_fmt(&pk, shapes[k], "error", -1, "message", 3);
            break;
        default: /* not an array, an element not a map */
            sx_pack_fmt(&pk, shapes[k], 1, 2);
            break;
        }
        CHECK_RC(pk.err, 0);
        CHECK_RC(sx_outcome_at(sx_pack_payload(&pk), 0, &o), SX_EPROTO);
        CHECK(o.error == 0 && o.value.data == NULL);
    }
    CHECK_RC(sx_outcome_at(pl_of(NULL, 0), 0, &o), SX_EPROTO);
    /* Elements after i are not read. */
    sx_pack_reset(&pk);
    sx_pack_fmt(&pk, "[{s:i}, i]", "value", 1, 2);
    CHECK_RC(sx_outcome_at(sx_pack_payload(&pk), 0, &o), 0);
    CHECK_RC(sx_outcome_at(sx_pack_payload(&pk), 1, &o), SX_EPROTO);
    sx_pack_fini(&pk);
}

/* ---- the batch walker ---- */

static void expect_walk(const sx_event *evs, size_t n, bool *started,
                        const sx_event_kind *want, const int *at, size_t nw)
{
    sx_batch b;
    const sx_event *ev;
    sx_batch_init(&b, evs, n, started, NULL);
    for (size_t k = 0; k < nw; k++) {
        CHECK_EQ_INT(sx_batch_next(&b, &ev), want[k]);
        if (at[k] < 0)
            CHECK(ev == NULL);
        else
            CHECK(ev == &evs[at[k]]);
    }
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(sx_batch_next(&b, &ev), SX_EV_END);
        CHECK(ev == NULL);
    }
}

static void test_batch(void)
{
    sx_event evs[4] = {
        { .type = SX_EVENT_YIELD_COMPLETE, .tag = 1 },
        { .type = SX_EVENT_MESSAGE, .topic = SX_TOPIC_CANCEL },
        { .type = SX_EVENT_MESSAGE, .topic = "hello" },
        { .type = SX_EVENT_YIELD_COMPLETE, .tag = 2 },
    };
    bool started = false;

    static const sx_event_kind first[] = { SX_EV_CANCEL, SX_EV_START,
                                           SX_EV_COMPLETE, SX_EV_MESSAGE,
                                           SX_EV_COMPLETE };
    static const int first_at[] = { 1, -1, 0, 2, 3 };
    expect_walk(evs, 4, &started, first, first_at, 5);
    CHECK(started);
    /* A later step, and a walk that never starts. */
    static const sx_event_kind later[] = { SX_EV_CANCEL, SX_EV_COMPLETE,
                                           SX_EV_MESSAGE, SX_EV_COMPLETE };
    static const int later_at[] = { 1, 0, 2, 3 };
    expect_walk(evs, 4, &started, later, later_at, 4);
    expect_walk(evs, 4, NULL, later, later_at, 4);

    /* An empty batch on the first step. */
    static const sx_event_kind start[] = { SX_EV_START };
    static const int start_at[] = { -1 };
    started = false;
    expect_walk(NULL, 0, &started, start, start_at, 1);
    CHECK(started);
    expect_walk(NULL, 0, &started, NULL, NULL, 0);
    expect_walk(NULL, 0, NULL, NULL, NULL, 0);

    /* Two cancels, both first in their order; the other kinds. */
    sx_event mix[6] = {
        { .type = SX_EVENT_MESSAGE, .topic = SX_TOPIC_EXIT },
        { .type = SX_EVENT_MESSAGE, .topic = SX_TOPIC_CANCEL },
        { .type = SX_EVENT_MESSAGE, .topic = SX_TOPIC_SPAWNED },
        { .type = SX_EVENT_MESSAGE, .topic = "@cancelled" },
        { .type = SX_EVENT_YIELD_COMPLETE, .topic = SX_TOPIC_CANCEL },
        { .type = SX_EVENT_MESSAGE, .topic = SX_TOPIC_CANCEL },
    };
    static const sx_event_kind mixk[] = { SX_EV_CANCEL,  SX_EV_CANCEL,
                                          SX_EV_START,   SX_EV_EXIT,
                                          SX_EV_SPAWNED, SX_EV_MESSAGE,
                                          SX_EV_COMPLETE };
    static const int mix_at[] = { 1, 5, -1, 0, 2, 3, 4 };
    started = false;
    expect_walk(mix, 6, &started, mixk, mix_at, 7);

    CHECK_EQ_INT(sx_event_kind_of(&mix[0]), SX_EV_EXIT);
    CHECK_EQ_INT(sx_event_kind_of(&mix[1]), SX_EV_CANCEL);
    CHECK_EQ_INT(sx_event_kind_of(&mix[2]), SX_EV_SPAWNED);
    CHECK_EQ_INT(sx_event_kind_of(&mix[3]), SX_EV_MESSAGE);
    CHECK_EQ_INT(sx_event_kind_of(&mix[4]), SX_EV_COMPLETE);
    CHECK_EQ_INT(sx_event_kind_of(NULL), SX_EV_END);
    CHECK_EQ_INT(sx_batch_next(NULL, NULL), SX_EV_END);
}

static const sx_test_case cases[] = {
    { "fmt_nested", test_fmt_nested },
    { "fmt_int_extremes", test_fmt_int_extremes },
    { "fmt_errors", test_fmt_errors },
    { "fmt_vfmt", test_fmt_vfmt },
    { "yieldf", test_yieldf },
    { "donef", test_donef },
    { "cancelled", test_cancelled },
    { "get_paths", test_get_paths },
    { "get_strcpy", test_get_strcpy },
    { "get_hostile", test_get_hostile },
    { "outcome_of", test_outcome_of },
    { "outcome_at", test_outcome_at },
    { "batch", test_batch },
};

SX_TEST_MAIN(cases)

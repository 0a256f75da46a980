/* tests/process/test_pid.c — the PID text form: sx_pid_format, sx_pid_parse
 * and sx_pid_eq.
 *
 * Threads: single-threaded.
 */
#include "process/stepx/process.h"
#include "tests/support/harness.h"

#include <stdint.h>

/* Formatting gives "{node@host|id}" in decimal, with the length returned,
 * and parsing it gives the PID back, for boundary values and for a spread
 * of random ones (fixed seed). The longest form fits SX_PID_TEXT_MAX. */
static void test_round_trip(void)
{
    static const struct {
        sx_pid pid;
        const char *text;
    } cases[] = {
        { { 0, 0, 0 }, "{0@0|0}" },
        { { 1, 2, 3 }, "{1@2|3}" },
        { { 10, 100, 1000 }, "{10@100|1000}" },
        { { UINT32_MAX, UINT32_MAX, UINT64_MAX },
          "{4294967295@4294967295|18446744073709551615}" },
        { { 0, UINT32_MAX, 1 }, "{0@4294967295|1}" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[SX_PID_TEXT_MAX];
        sx_pid back;
        int n = sx_pid_format(cases[i].pid, buf, sizeof(buf));
        CHECK_EQ_INT(n, strlen(cases[i].text));
        CHECK_STR(buf, cases[i].text);
        CHECK_RC(sx_pid_parse(buf, &back), 0);
        CHECK(sx_pid_eq(back, cases[i].pid));
    }
    CHECK(strlen(cases[3].text) < SX_PID_TEXT_MAX);

    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 100000; i++) {
        char buf[SX_PID_TEXT_MAX];
        sx_pid pid, back;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        pid.node = (uint32_t)(x >> (x & 31));
        pid.host = (uint32_t)(x >> 32);
        pid.id = x >> (x % 64);
        CHECK(sx_pid_format(pid, buf, sizeof(buf)) > 0);
        CHECK_RC(sx_pid_parse(buf, &back), 0);
        CHECK(sx_pid_eq(back, pid));
    }
}

/* Leading zeros are accepted in every field. */
static void test_leading_zeros(void)
{
    sx_pid pid;
    CHECK_RC(sx_pid_parse("{007@0000|00000000000000000000000000042}", &pid), 0);
    CHECK(pid.node == 7 && pid.host == 0 && pid.id == 42);
    CHECK_RC(sx_pid_parse("{04294967295@0|018446744073709551615}", &pid), 0);
    CHECK(pid.node == UINT32_MAX && pid.id == UINT64_MAX);
}

/* Every malformed form is SX_EINVAL and leaves *out untouched: missing or
 * extra delimiters, empty fields, signs, spaces, other bases and notations,
 * non-ASCII digits, trailing text, and each field one past its maximum. */
static void test_malformed(void)
{
    static const char *const bad[] = {
        "",
        "{",
        "}",
        "{}",
        "{1@2|3",
        "1@2|3}",
        "1@2|3",
        "{1@2|3}x",
        "{1@2|3}}",
        "{{1@2|3}",
        "{1@2|3}\n",
        " {1@2|3}",
        "{1@2|3} ",
        "{ 1@2|3}",
        "{1 @2|3}",
        "{1@ 2|3}",
        "{1@2| 3}",
        "{1@2|3 }",
        "{\t1@2|3}",
        "{+1@2|3}",
        "{-1@2|3}",
        "{1@+2|3}",
        "{1@2|-3}",
        "{1@2|+3}",
        "{@2|3}",
        "{1@|3}",
        "{1@2|}",
        "{@|}",
        "{1|2@3}",
        "{1@2@3}",
        "{1|2|3}",
        "{1@2|3|4}",
        "{1@2@3|4}",
        "{1,2,3}",
        "[1@2|3]",
        "(1@2|3)",
        "{0x1@2|3}",
        "{1@0x2|3}",
        "{1@2|0x3}",
        "{1.0@2|3}",
        "{1e3@2|3}",
        "{1@2|3.}",
        "{1_000@2|3}",
        "{1'000@2|3}",
        "{a@2|3}",
        "{1@2|3a}",
        "{\xef\xbc\x91@2|3}", /* FULLWIDTH DIGIT ONE */
        "{\xd9\xa1@2|3}",     /* ARABIC-INDIC DIGIT ONE */
        "{4294967296@2|3}",
        "{1@4294967296|3}",
        "{1@2|18446744073709551616}",
        "{99999999999@2|3}",
        "{1@2|99999999999999999999}",
        "{1@2|184467440737095516150}",
        "{42949672950@2|3}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sx_pid out = { 11, 22, 33 };
        int rc = sx_pid_parse(bad[i], &out);
        if (rc != SX_EINVAL)
            SX_FAILF("\"%s\" parsed (rc %d)", bad[i], rc);
        CHECK(out.node == 11 && out.host == 22 && out.id == 33);
    }
    sx_pid out = { 11, 22, 33 };
    CHECK_RC(sx_pid_parse(NULL, &out), SX_EINVAL);
    CHECK(out.node == 11);
    CHECK_RC(sx_pid_parse("{1@2|3}", NULL), SX_EINVAL);
    /* A NUL ends the text: what follows it is not seen. */
    CHECK_RC(sx_pid_parse("{1@2|3}\0junk", &out), 0);
}

/* A buffer one byte too small (or empty, or NULL) is SX_EINVAL and holds ""
 * when it has room for that; the exact size (text plus NUL) succeeds and
 * nothing past it is written. */
static void test_small_cap(void)
{
    sx_pid pid = { 12, 345, 6789 }; /* "{12@345|6789}": 13 characters */
    char buf[32];
    for (size_t cap = 1; cap <= 13; cap++) {
        memset(buf, 'x', sizeof(buf));
        CHECK_RC(sx_pid_format(pid, buf, cap), SX_EINVAL);
        CHECK_STR(buf, "");
        CHECK(buf[1] == 'x');
    }
    memset(buf, 'x', sizeof(buf));
    CHECK_RC(sx_pid_format(pid, buf, 0), SX_EINVAL);
    CHECK(buf[0] == 'x');
    CHECK_RC(sx_pid_format(pid, NULL, 64), SX_EINVAL);
    CHECK_EQ_INT(sx_pid_format(pid, buf, 14), 13);
    CHECK_STR(buf, "{12@345|6789}");
    CHECK(buf[14] == 'x');

    sx_pid max = { UINT32_MAX, UINT32_MAX, UINT64_MAX };
    CHECK_RC(sx_pid_format(max, buf, 44), SX_EINVAL);
    char big[SX_PID_TEXT_MAX];
    CHECK_EQ_INT(sx_pid_format(max, big, 45), 44);
}

/* Equality compares all three fields; SX_PID_NONE is all zeros. */
static void test_eq(void)
{
    sx_pid a = { 1, 2, 3 };
    CHECK(sx_pid_eq(a, (sx_pid){ 1, 2, 3 }));
    CHECK(!sx_pid_eq(a, (sx_pid){ 0, 2, 3 }));
    CHECK(!sx_pid_eq(a, (sx_pid){ 1, 0, 3 }));
    CHECK(!sx_pid_eq(a, (sx_pid){ 1, 2, 0 }));
    CHECK(sx_pid_eq(SX_PID_NONE, (sx_pid){ 0, 0, 0 }));
    CHECK(!sx_pid_eq(SX_PID_NONE, a));
}

static const sx_test_case cases[] = {
    { "round_trip", test_round_trip },
    { "leading_zeros", test_leading_zeros },
    { "malformed", test_malformed },
    { "small_cap", test_small_cap },
    { "eq", test_eq },
};

SX_TEST_MAIN(cases)

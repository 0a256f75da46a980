/* tests/support/harness.h — the small test harness every test binary uses.
 *
 * A test file defines its cases in a table and calls sx_test_main. A failed
 * CHECK prints the file, line, expression and both values, then exits 1
 * (the process is the unit meson counts). `prog NAME` runs one case.
 */
#ifndef TX_SUPPORT_HARNESS_H
#define TX_SUPPORT_HARNESS_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *name;
    void (*fn)(void);
} sx_test_case;

/* SX_TEST_SANITIZED: defined in an ASan or TSan build (gcc says so with
 * __SANITIZE_*__, clang with __has_feature), where tests run shorter. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SX_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SX_TEST_SANITIZED 1
#endif
#endif

/* xorshift64*: a small per-thread generator (rand() shares state). */
static inline uint64_t sx_test_rng(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* The factor from SX_STRESS_SCALE (1 when unset or unparsable): the
 * stress suite runs the concurrent cases again with it set. */
static inline double sx_test_stress_scale(void)
{
    const char *s = getenv("SX_STRESS_SCALE");
    if (s == NULL)
        return 1.0;
    double f = strtod(s, NULL);
    return f > 0 ? f : 1.0;
}

#define SX_FAILF(...)                                                          \
    do {                                                                       \
        fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                  \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
        fflush(stderr);                                                        \
        exit(1);                                                               \
    } while (0)

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            SX_FAILF("%s", #cond);                                             \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                     \
    do {                                                                       \
        long long va_ = (long long)(a), vb_ = (long long)(b);                  \
        if (va_ != vb_)                                                        \
            SX_FAILF("%s == %s (%lld vs %lld)", #a, #b, va_, vb_);             \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                     \
    do {                                                                       \
        unsigned long long va_ = (unsigned long long)(a),                      \
                           vb_ = (unsigned long long)(b);                      \
        if (va_ != vb_)                                                        \
            SX_FAILF("%s == %s (%llu vs %llu)", #a, #b, va_, vb_);             \
    } while (0)

/* Compares an SX_E* return code, printing the names. */
#define CHECK_RC(a, b)                                                         \
    do {                                                                       \
        int va_ = (a), vb_ = (b);                                              \
        if (va_ != vb_)                                                        \
            SX_FAILF("%s == %s (%d %s vs %d %s)", #a, #b, va_,                 \
                     sx_errname(va_), vb_, sx_errname(vb_));                   \
    } while (0)

#define CHECK_STR(a, b)                                                        \
    do {                                                                       \
        const char *va_ = (a), *vb_ = (b);                                     \
        if (va_ == NULL || vb_ == NULL || strcmp(va_, vb_) != 0)               \
            SX_FAILF("%s == %s (\"%s\" vs \"%s\")", #a, #b,                    \
                     va_ ? va_ : "(null)", vb_ ? vb_ : "(null)");              \
    } while (0)

static inline double sx_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline int sx_test_main(const sx_test_case *cases, size_t n, int argc,
                               char **argv)
{
    size_t ran = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
            continue;
        double t0 = sx_test_now_ms();
        printf("# %s ...\n", cases[i].name);
        fflush(stdout);
        cases[i].fn();
        printf("ok %s (%.1f ms)\n", cases[i].name, sx_test_now_ms() - t0);
        fflush(stdout);
        ran++;
    }
    if (ran == 0) {
        fprintf(stderr, "no test case matched\n");
        return 1;
    }
    printf("%zu cases passed\n", ran);
    return 0;
}

#define SX_TEST_MAIN(table)                                                    \
    int main(int argc, char **argv)                                            \
    {                                                                          \
        return sx_test_main(table, sizeof(table) / sizeof(table[0]), argc,     \
                            argv);                                             \
    }

#endif

/* tests/engine/test_spawn_args.c — the spawn commands' argument readers
 * (engine/commands/spawn_opts.c, sx__spawn_args_decode): the one-pass
 * reader of the common shape against the general one.
 *
 * The one-pass reader may decline any input (the general reader then
 * reads it from the start), but what it accepts the general reader must
 * accept too, with the same names and the same input slices; and it must
 * accept the common shapes (fixstr names, up to 15 one-look inputs), or
 * the spawns would all take the longer way. The inputs are valid argument
 * lists of many shapes, each mutated (bytes changed, cut short, NULs put
 * into the names) by a seeded generator (SX_TEST_SEED repeats a run).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/commands/commands.h"
#include "tests/support/harness.h"

/* Both readers on args; fails the test where they disagree. Returns
 * whether the one-pass reader took it. */
static bool compare(const uint8_t *b, size_t len)
{
    sx__spawn_args f, g, h;
    sx_payload args = { len > 0 ? b : NULL, len };
    int rf = sx__spawn_args_decode(args, &f, SX__SPAWN_READ_FAST);
    int rg = sx__spawn_args_decode(args, &g, SX__SPAWN_READ_GENERAL);
    int ra = sx__spawn_args_decode(args, &h, SX__SPAWN_READ_ANY);
    CHECK_RC(ra, rg); /* what the commands get is the general answer */
    if (rf != 0)
        return false;
    if (rg != 0) {
        fprintf(stderr, "taken by the one-pass reader only (%zu bytes):", len);
        for (size_t i = 0; i < len; i++)
            fprintf(stderr, " %02x", b[i]);
        fputc('\n', stderr);
    }
    CHECK_RC(rg, 0);
    CHECK(strcmp(f.type, g.type) == 0);
    CHECK(strcmp(f.method, g.method) == 0);
    CHECK(f.n_input == g.n_input);
    for (size_t i = 0; i < f.n_input; i++) {
        CHECK(f.input[i].data == g.input[i].data);
        CHECK(f.input[i].len == g.input[i].len);
    }
    CHECK(f.opts.data == NULL && g.opts.data == NULL);
    return true;
}

/* One input of kind k (every one-look scalar kind, and a few that are
 * not one-look: str 8, bin, a container). */
static void pack_input(sx_pack *pk, int k, uint64_t r)
{
    switch (k % 14) {
    case 0:
        sx_pack_int(pk, (int64_t)(r % 128));
        break; /* fixint */
    case 1:
        sx_pack_int(pk, -(int64_t)(r % 32) - 1);
        break; /* neg fixint */
    case 2:
        sx_pack_int(pk, 200);
        break; /* uint 8 */
    case 3:
        sx_pack_int(pk, -100);
        break; /* int 8 */
    case 4:
        sx_pack_int(pk, 40000);
        break; /* uint 16 */
    case 5:
        sx_pack_int(pk, -30000);
        break; /* int 16 */
    case 6:
        sx_pack_int(pk, 70000);
        break; /* uint 32 */
    case 7:
        sx_pack_int(pk, -70000);
        break; /* int 32 */
    case 8:
        sx_pack_int(pk, (int64_t)(r >> 1));
        break; /* 64 bits */
    case 9:
        sx_pack_double(pk, 1.5);
        break; /* float 64 */
    case 10:
        sx_pack_nil(pk);
        break;
    case 11:
        sx_pack_bool(pk, r & 1);
        break;
    case 12:
        sx_pack_strn(pk, "abcdefghijklmnopqrstuvwxyz0123456789",
                     (size_t)(r % 37)); /* fixstr, or str 8 */
        break;
    default:
        sx_pack_array(pk, 1); /* a container: the general reader's */
        sx_pack_int(pk, 1);
        break;
    }
}

static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS";

/* A valid argument list of a random shape into b; returns its length. */
static size_t make_args(uint8_t *b, size_t cap, uint64_t *rng, bool *common)
{
    sx_pack pk;
    sx_pack_init_fixed(&pk, b, cap);
    uint64_t r = sx_test_rng(rng);
    int outer = r % 8 == 0 ? 2 : 3;
    size_t tl = sx_test_rng(rng) % 40, ml = sx_test_rng(rng) % 12;
    if (r % 3 == 0)
        tl = sx_test_rng(rng) % 10; /* often at the one-load sizes */
    int n_in = (int)(sx_test_rng(rng) % 20);
    *common = tl <= 31 && ml <= 31 && n_in <= 15;
    sx_pack_array(&pk, (uint32_t)outer);
    sx_pack_strn(&pk, letters, tl);
    sx_pack_strn(&pk, letters + 7, ml);
    if (outer == 3) {
        sx_pack_array(&pk, (uint32_t)n_in);
        for (int i = 0; i < n_in; i++) {
            int k = (int)(sx_test_rng(rng) % 16);
            uint64_t v = sx_test_rng(rng);
            if (k == 12 && v % 37 > 31)
                *common = false; /* a str 8 */
            if (k >= 13)
                *common = false; /* a container */
            pack_input(&pk, k, v);
        }
    }
    CHECK_RC(pk.err, 0);
    return sx_pack_payload(&pk).len;
}

static void test_differential(void)
{
    uint64_t seed = 0x5eed5eedULL;
    const char *env = getenv("SX_TEST_SEED");
    if (env != NULL)
        seed = strtoull(env, NULL, 0);
    printf("  seed %llu (SX_TEST_SEED)\n", (unsigned long long)seed);
    uint64_t rng = seed | 1;
    int rounds = 200000, taken = 0, common = 0, common_taken = 0;
#ifdef SX_TEST_SANITIZED
    rounds = 50000;
#endif
    uint8_t b[512], m[512];
    for (int i = 0; i < rounds; i++) {
        bool is_common;
        size_t len = make_args(b, sizeof b, &rng, &is_common);
        /* The list as it is: the common shapes must be taken. */
        bool t = compare(b, len);
        taken += t;
        if (is_common) {
            common++;
            common_taken += t;
            if (!t) {
                fprintf(stderr, "a common shape declined (%zu bytes):", len);
                for (size_t j = 0; j < len; j++)
                    fprintf(stderr, " %02x", b[j]);
                fputc('\n', stderr);
                CHECK(t);
            }
        }
        /* Mutated: a few bytes changed (often to NUL, or to a marker),
         * or cut short. */
        memcpy(m, b, len);
        uint64_t r = sx_test_rng(&rng);
        size_t mlen = len;
        int changes = 1 + (int)(r % 3);
        for (int c = 0; c < changes && len > 0; c++) {
            uint64_t q = sx_test_rng(&rng);
            size_t at = (size_t)(q % len);
            static const uint8_t marks[] = {
                0x00, 0x90, 0x92, 0x93, 0x94, 0x9f,
                0xa0, 0xbf, 0xc1, 0xd9, 0xdc, 0xff
            };
            m[at] = (q >> 32) % 2 ? marks[(q >> 40) % sizeof marks]
                                  : (uint8_t)(q >> 48);
        }
        if (r % 4 == 0 && len > 0)
            mlen = (size_t)(sx_test_rng(&rng) % len);
        compare(m, mlen);
        /* Every prefix of a short list (each must be refused by both). */
        if (i % 64 == 0)
            for (size_t cut = 0; cut < len; cut++)
                compare(b, cut);
    }
    printf("  %d lists: %d taken by the one-pass reader; %d of the common "
           "shape, %d of them taken\n",
           rounds, taken, common, common_taken);
    CHECK(common > rounds / 4); /* the generator makes them */
    CHECK(common_taken == common);
}

/* NULs at every place of names of every length the one-pass reader
 * takes (0 to 31 bytes; up to 8 in one load), with zero bytes or none
 * right behind them: refused by both readers, and a name without one
 * taken with its every byte. */
static void test_nul_everywhere(void)
{
    for (size_t n = 0; n <= 31; n++) {
        for (int behind = 0; behind < 2; behind++) {
            for (size_t at = 0; at <= n; at++) { /* at == n: no NUL */
                for (int which = 0; which < 2; which++) {
                    char name[32];
                    for (size_t i = 0; i < n; i++)
                        name[i] = (char)('a' + i % 26);
                    if (at < n)
                        name[at] = 0;
                    uint8_t b[128];
                    sx_pack pk;
                    sx_pack_init_fixed(&pk, b, sizeof b);
                    sx_pack_array(&pk, 3);
                    sx_pack_strn(&pk, which == 0 ? name : "t",
                                 which == 0 ? n : 1);
                    sx_pack_strn(&pk, which == 1 ? name : "m",
                                 which == 1 ? n : 1);
                    sx_pack_array(&pk, 8);
                    for (int i = 0; i < 8; i++)
                        sx_pack_int(&pk, behind ? 0 : 1);
                    CHECK_RC(pk.err, 0);
                    size_t len = sx_pack_payload(&pk).len;
                    sx__spawn_args a;
                    int rf = sx__spawn_args_decode((sx_payload){ b, len }, &a,
                                                   SX__SPAWN_READ_FAST);
                    int rg = sx__spawn_args_decode((sx_payload){ b, len }, &a,
                                                   SX__SPAWN_READ_GENERAL);
                    if (at < n) {
                        CHECK_RC(rf, SX_EINVAL);
                        CHECK_RC(rg, SX_EINVAL);
                    } else {
                        CHECK_RC(rf, 0);
                        CHECK_RC(rg, 0);
                        const char *got = which == 0 ? a.type : a.method;
                        CHECK(strlen(got) == n);
                        CHECK(memcmp(got, name, n) == 0);
                    }
                }
            }
        }
    }
}

static const sx_test_case cases[] = {
    { "differential", test_differential },
    { "nul_everywhere", test_nul_everywhere },
};

SX_TEST_MAIN(cases)

/* tests/cmd/test_cli_json.c — the CLI's msgpack -> JSON conversion
 * (cmd/cli_json.c) on map keys that are not strings: they show as their
 * compact JSON text, and keys inside keys do not blow the text up. Each
 * case opens with the property it checks. */
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "tests/harness.h"

/* cli_json.c's parse reports through cmd/stepx.c's cli_fail. */
int cli_fail(int ex, const char *fmt, ...)
{
    (void)fmt;
    return ex;
}

/* Non-string keys show as their compact JSON text, a key inside a key
 * included (escaped as any string is). */
static void test_plain_keys(void)
{
    /* {1: "a", [1, 2]: 3, {nil: nil}: 4, {{1: nil}: nil}: 5} */
    static const uint8_t mp[] = { 0x84, 0x01, 0xa1, 'a',  0x92, 0x01,
                                  0x02, 0x03, 0x81, 0xc0, 0xc0, 0x04,
                                  0x81, 0x81, 0x01, 0xc0, 0xc0, 0x05 };
    char *t = cli_mp_text((sx_payload){ mp, sizeof(mp) });
    CHECK(t != NULL);
    CHECK_STR(t, "{\"1\":\"a\",\"[1,2]\":3,\"{\\\"null\\\":null}\":4,"
                 "\"{\\\"{\\\\\\\"1\\\\\\\":null}\\\":null}\":5}");
    free(t);
}

/* A map whose key is a map whose key is a map ... (24 levels, 49 bytes):
 * each level escaped the one below again, doubling the text (32 MB here;
 * the 30 levels a frame can carry made gigabytes). The text now stays
 * within a few bytes per byte of msgpack, or the conversion fails. */
static void test_keys_in_keys_bounded(void)
{
    enum { LEVELS = 24 };
    uint8_t mp[2 * LEVELS + 1];
    size_t n = 0;
    for (int i = 0; i < LEVELS; i++)
        mp[n++] = 0x81; /* a map of one pair, its key next */
    mp[n++] = 0x01;     /* the innermost key */
    for (int i = 0; i < LEVELS; i++)
        mp[n++] = 0xc0; /* each map's value */
    char *t = cli_mp_text((sx_payload){ mp, n });
    size_t len = t != NULL ? strlen(t) : 0;
    free(t);
    if (len > 64 * n)
        SX_FAILF("%zu bytes of msgpack made %zu bytes of JSON", n, len);
}

static const sx_test_case cases[] = {
    { "plain_keys", test_plain_keys },
    { "keys_in_keys_bounded", test_keys_in_keys_bounded },
};

SX_TEST_MAIN(cases)

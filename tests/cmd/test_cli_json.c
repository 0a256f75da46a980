/* tests/cmd/test_cli_json.c — the CLI's msgpack <-> JSON conversion
 * (cmd/cli_json.c) on map keys: keys that are not strings show as their
 * compact JSON text, keys inside keys do not blow the text up, and a map
 * whose keys would read the same shows as {"$map": pairs}, which packs back
 * into the same map. Each case opens with the property it checks. */
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "tests/support/harness.h"

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
 * each level escapes the one below again, and unbounded that doubles the
 * text (32 MB here; the 30 levels a frame can carry, gigabytes). The text
 * stays within a few bytes per byte of msgpack, or the conversion fails. */
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

/* JSON text -> msgpack, as the CLI sends a value; checks the bytes. */
static void expect_packs(const char *json, const uint8_t *mp, size_t n)
{
    json_t *j = cli_json_parse(json, "the test");
    CHECK(j != NULL);
    if (j == NULL)
        return;
    sx_pack pk;
    sx_pack_init(&pk);
    CHECK_RC(cli_json_to_mp(j, &pk), 0);
    sx_payload got = sx_pack_payload(&pk);
    if (got.len != n || memcmp(got.data, mp, n) != 0)
        SX_FAILF("%s packed into %zu bytes, not the %zu expected", json,
                 got.len, n);
    sx_pack_fini(&pk);
    json_decref(j);
}

/* A map whose keys read the same as text, 1 and "1" or one key twice, is
 * not an object with one of them gone ({"1": "b"}); it shows as
 * {"$map": [[key, value], ...]}, every pair in order, and that JSON packs
 * back into the very same msgpack. */
static void test_clashing_keys_keep_every_pair(void)
{
    /* {1: "a", "1": "b"} */
    static const uint8_t mp1[] = {
        0x82, 0x01, 0xa1, 'a', 0xa1, '1', 0xa1, 'b'
    };
    char *t = cli_mp_text((sx_payload){ mp1, sizeof(mp1) });
    CHECK(t != NULL);
    if (t != NULL)
        CHECK_STR(t, "{\"$map\":[[1,\"a\"],[\"1\",\"b\"]]}");
    free(t);
    expect_packs("{\"$map\":[[1,\"a\"],[\"1\",\"b\"]]}", mp1, sizeof(mp1));
    /* {"k": 1, "k": 2} inside an array, beside a plain map {"k": 3} */
    static const uint8_t mp2[] = { 0x92, 0x82, 0xa1, 'k',  0x01, 0xa1,
                                   'k',  0x02, 0x81, 0xa1, 'k',  0x03 };
    t = cli_mp_text((sx_payload){ mp2, sizeof(mp2) });
    CHECK(t != NULL);
    if (t != NULL)
        CHECK_STR(t, "[{\"$map\":[[\"k\",1],[\"k\",2]]},{\"k\":3}]");
    free(t);
    /* Only [key, value] pairs make the form: anything else under "$map" is
     * an ordinary object with that key. */
    static const uint8_t mp3[] = { 0x81, 0xa4, '$', 'm', 'a', 'p', 0x05 };
    expect_packs("{\"$map\":5}", mp3, sizeof(mp3));
    static const uint8_t mp4[] = { 0x81, 0xa4, '$',  'm', 'a',
                                   'p',  0x91, 0x91, 0x01 };
    expect_packs("{\"$map\":[[1]]}", mp4, sizeof(mp4));
}

/* A map that reads as one of the forms ({"$map": pairs}, {"$bin": text})
 * shows as {"$map": pairs} too: printed as an ordinary object, the CLI's own
 * output sent back packed a different value ({1: 2}; a binary). */
static void expect_round_trip(const uint8_t *mp, size_t n, const char *want)
{
    char *t = cli_mp_text((sx_payload){ mp, n });
    CHECK(t != NULL);
    if (t == NULL)
        return;
    CHECK_STR(t, want);
    expect_packs(t, mp, n);
    free(t);
}

static void test_form_look_alikes_round_trip(void)
{
    /* {"$map": [[1, 2]]} */
    static const uint8_t mp1[] = { 0x81, 0xa4, '$',  'm',  'a',
                                   'p',  0x91, 0x92, 0x01, 0x02 };
    expect_round_trip(mp1, sizeof(mp1), "{\"$map\":[[\"$map\",[[1,2]]]]}");
    /* {"$map": []} */
    static const uint8_t mp2[] = { 0x81, 0xa4, '$', 'm', 'a', 'p', 0x90 };
    expect_round_trip(mp2, sizeof(mp2), "{\"$map\":[[\"$map\",[]]]}");
    /* {"$bin": "AAAA"} (a string, not a binary) */
    static const uint8_t mp3[] = { 0x81, 0xa4, '$', 'b', 'i', 'n',
                                   0xa4, 'A',  'A', 'A', 'A' };
    expect_round_trip(mp3, sizeof(mp3), "{\"$map\":[[\"$bin\",\"AAAA\"]]}");
    /* Not look-alikes: stay objects. */
    static const uint8_t mp4[] = { 0x81, 0xa4, '$', 'm', 'a', 'p', 0x05 };
    expect_round_trip(mp4, sizeof(mp4), "{\"$map\":5}");
    static const uint8_t mp5[] = { 0x81, 0xa4, '$', 'b', 'i', 'n', 0x05 };
    expect_round_trip(mp5, sizeof(mp5), "{\"$bin\":5}");
    /* Nested in an array too: [{"$bin": ""}] */
    static const uint8_t mp6[] = { 0x91, 0x81, 0xa4, '$', 'b', 'i', 'n', 0xa0 };
    expect_round_trip(mp6, sizeof(mp6), "[{\"$map\":[[\"$bin\",\"\"]]}]");
}

/* Clashing maps nested in the first value of clashing maps, 60 levels
 * (~360 bytes): converting a map once as an object and again as pairs
 * would redo every level below at each level, 2^60 times the work. One
 * pass: it converts at once. */
static void test_nested_clashes_linear(void)
{
    enum { LEVELS = 60 };
    uint8_t mp[LEVELS * 6 + 1];
    size_t n = 0;
    for (int i = 0; i < LEVELS; i++) {
        mp[n++] = 0x82; /* {1: <the next level>, "1": nil} */
        mp[n++] = 0x01;
    }
    mp[n++] = 0xc0; /* the innermost value */
    for (int i = 0; i < LEVELS; i++) {
        mp[n++] = 0xa1;
        mp[n++] = '1';
        mp[n++] = 0xc0;
    }
    char *t = cli_mp_text((sx_payload){ mp, n });
    CHECK(t != NULL);
    if (t != NULL && strncmp(t, "{\"$map\":[[1,{\"$map\":[[1,", 24) != 0)
        SX_FAILF("unexpected text: %.60s", t);
    free(t);
}

/* {"$map": pairs} packs as one map: its depth is the map's, so a value
 * nested to the limit inside it is taken (counted as the object and the
 * arrays it is written with, it would be refused as 2 levels too deep). */
static void test_map_form_depth(void)
{
    char json[256];
    size_t n = 0;
    n += (size_t)snprintf(json + n, sizeof(json) - n, "{\"$map\":[[1,");
    for (int i = 0; i < SX_WIRE_MAX_DEPTH - 2; i++)
        json[n++] = '[';
    for (int i = 0; i < SX_WIRE_MAX_DEPTH - 2; i++)
        json[n++] = ']';
    n += (size_t)snprintf(json + n, sizeof(json) - n, "]]}");
    json_t *j = cli_json_parse(json, "the test");
    CHECK(j != NULL);
    json_decref(j);
}

/* A text that is not UTF-8 (a message from a server, a file name) still
 * makes a JSON string: each byte that starts no valid sequence becomes
 * U+FFFD. (json_pack refuses such a message, and the CLI's error document
 * would come out without its "error".) */
static void test_text_of_any_bytes(void)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        { "plain", "plain" },
        { "caf\xc3\xa9 \xe2\x82\xac", "caf\xc3\xa9 \xe2\x82\xac" },
        { "a\xff"
          "b",
          "a\xef\xbf\xbd"
          "b" },
        /* a cut sequence, an overlong '/', a surrogate */
        { "x\xe2\x82", "x\xef\xbf\xbd\xef\xbf\xbd" },
        { "\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd" },
        { "\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = cli_json_text_of(cases[i].in);
        CHECK(j != NULL && json_is_string(j));
        if (j != NULL)
            CHECK_STR(json_string_value(j), cases[i].out);
        json_decref(j);
    }
}

static const sx_test_case cases[] = {
    { "text_of_any_bytes", test_text_of_any_bytes },
    { "plain_keys", test_plain_keys },
    { "keys_in_keys_bounded", test_keys_in_keys_bounded },
    { "clashing_keys_keep_every_pair", test_clashing_keys_keep_every_pair },
    { "form_look_alikes_round_trip", test_form_look_alikes_round_trip },
    { "nested_clashes_linear", test_nested_clashes_linear },
    { "map_form_depth", test_map_form_depth },
};

SX_TEST_MAIN(cases)

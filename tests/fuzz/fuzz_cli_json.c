/* tests/fuzz/fuzz_cli_json.c — libFuzzer target for the CLI's JSON <->
 * msgpack conversion (cmd/cli_json.c).
 *
 * Each input is read both ways:
 *  - as JSON text (cli_json_parse, which also bounds the nesting): a value
 *    it accepts packs (cli_json_to_mp) into exactly one well-formed msgpack
 *    value, or fails with SX_EINVAL only where an object is {"$bin": s}
 *    with s not base64; the packed value converts back (cli_json_from_mp)
 *    and equals the JSON (json_equal) when no {"$bin": ...} or
 *    {"$map": pairs} object is in it (cmd/cli.h, README: integers stay
 *    integers, reals reals, strings strings); with one, a second round
 *    changes nothing;
 *  - as msgpack (cli_json_from_mp, cli_mp_text, cli_get_*): the JSON comes
 *    only from well-formed input (one value, nothing after it); its text is
 *    JSON that jansson parses back to an equal value; a value nested at
 *    most SX_UNPACK_MAX_DEPTH deep and without array or map keys converts
 *    and packed back and converted again it is the same JSON (a map
 *    that would read as {"$bin": text} or {"$map": pairs} shows as
 *    {"$map": pairs} itself).
 * An oracle failure aborts (a crash for libFuzzer). Single-threaded.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(c)                                                         \
    do {                                                                       \
        if (!(c))                                                              \
            abort();                                                           \
    } while (0)

/* cli_json_parse reports through cli_fail (cmd/stepx.c): quiet here. */
int cli_fail(int ex, const char *fmt, ...)
{
    (void)fmt;
    return ex;
}

/* Whether j holds an object whose one key is "$bin" (any value). */
static bool has_bin_form(const json_t *j)
{
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach((json_t *)j, i, v)
        {
            if (has_bin_form(v))
                return true;
        }
        return false;
    }
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        if (json_object_size(j) == 1 && json_object_get(j, "$bin") != NULL)
            return true;
        json_object_foreach((json_t *)j, k, v)
        {
            if (has_bin_form(v))
                return true;
        }
    }
    return false;
}

/* Whether j holds a form that packs into something else than its JSON
 * reads as: {"$bin": any}, or {"$map": [[k, v], ...]} (a map whose keys
 * may be anything, cli_json.c). */
static bool has_form(const json_t *j)
{
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach((json_t *)j, i, v)
        {
            if (has_form(v))
                return true;
        }
        return false;
    }
    if (json_is_object(j)) {
        const char *k;
        json_t *v, *m = json_object_get(j, "$map");
        if (json_object_size(j) == 1 && json_object_get(j, "$bin") != NULL)
            return true;
        if (json_object_size(j) == 1 && json_is_array(m)) {
            bool pairs = true;
            size_t i;
            json_array_foreach(m, i, v)
            {
                pairs = pairs && json_is_array(v) && json_array_size(v) == 2;
            }
            if (pairs)
                return true;
        }
        json_object_foreach((json_t *)j, k, v)
        {
            if (has_form(v))
                return true;
        }
    }
    return false;
}

/* Set by mp_depth: some map key is an array or a map. */
static bool container_key;

/* How deep the msgpack value at u nests (a scalar 0); -1 if malformed or
 * deeper than the reader walks (level: the caller's nesting). */
static int mp_depth(sx_unpack *u, int level)
{
    uint32_t n;
    int t = sx_unpack_type(u), d = 0;
    if (t != SX_MP_ARRAY && t != SX_MP_MAP)
        return sx_unpack_skip(u) == 0 ? 0 : -1;
    if (level >= SX_UNPACK_MAX_DEPTH + 4)
        return -1;
    if ((t == SX_MP_ARRAY ? sx_unpack_array(u, &n) : sx_unpack_map(u, &n)) != 0)
        return -1;
    for (uint64_t i = 0; i < (t == SX_MP_MAP ? 2 * (uint64_t)n : n); i++) {
        int kt = sx_unpack_type(u);
        if (t == SX_MP_MAP && i % 2 == 0 &&
            (kt == SX_MP_ARRAY || kt == SX_MP_MAP))
            container_key = true;
        int k = mp_depth(u, level + 1);
        if (k < 0)
            return -1;
        d = k > d ? k : d;
    }
    return d + 1;
}

/* Packs j; 0 and the bytes in pk, or the error. */
static int pack(const json_t *j, sx_pack *pk)
{
    int rc;
    sx_pack_init(pk);
    rc = cli_json_to_mp(j, pk);
    FUZZ_ASSERT(rc == 0 || rc == SX_EINVAL);
    if (rc == 0) {
        /* Exactly one well-formed value. */
        sx_unpack u;
        FUZZ_ASSERT(pk->err == 0 && pk->len > 0);
        sx_unpack_init(&u, sx_pack_payload(pk));
        FUZZ_ASSERT(sx_unpack_skip(&u) == 0 && sx_unpack_done(&u));
    } else {
        FUZZ_ASSERT(has_bin_form(j));
    }
    return rc;
}

/* The text of j parses back to an equal value. */
static void text_round_trip(const json_t *j)
{
    char *text = cli_json_text(j);
    json_error_t err;
    json_t *back;
    FUZZ_ASSERT(text != NULL);
    back = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    FUZZ_ASSERT(back != NULL);
    FUZZ_ASSERT(json_equal(back, (json_t *)j));
    json_decref(back);
    free(text);
}

static void from_json(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    json_t *j, *back, *again;
    sx_pack pk, pk2;

    FUZZ_ASSERT(text != NULL);
    memcpy(text, data, size);
    text[size] = 0;
    j = cli_json_parse(text, "fuzz");
    free(text);
    if (j == NULL)
        return;
    if (pack(j, &pk) != 0) {
        sx_pack_fini(&pk);
        json_decref(j);
        return;
    }
    back = cli_json_from_mp(sx_pack_payload(&pk));
    FUZZ_ASSERT(back != NULL);
    text_round_trip(back);
    if (!has_form(j))
        FUZZ_ASSERT(json_equal(back, j));
    /* A second round changes nothing. */
    FUZZ_ASSERT(pack(back, &pk2) == 0);
    again = cli_json_from_mp(sx_pack_payload(&pk2));
    FUZZ_ASSERT(again != NULL && json_equal(again, back));
    json_decref(again);
    sx_pack_fini(&pk2);
    json_decref(back);
    sx_pack_fini(&pk);
    json_decref(j);
}

static void from_mp(const uint8_t *data, size_t size)
{
    sx_payload p = { data, size };
    sx_unpack u;
    json_t *j;
    char *text;
    int depth;
    bool one;

    sx_unpack_init(&u, p);
    container_key = false;
    depth = mp_depth(&u, 0);
    one = depth >= 0 && sx_unpack_done(&u);

    j = cli_json_from_mp(p);
    text = cli_mp_text(p);
    FUZZ_ASSERT((j == NULL) == (text == NULL));
    if (j == NULL) {
        /* Only malformed input, nesting beyond what the CLI converts, or
         * keys in keys whose text outgrows the bound (cli_json.c). */
        FUZZ_ASSERT(!one || depth > SX_UNPACK_MAX_DEPTH || container_key);
        return;
    }
    FUZZ_ASSERT(one || size == 0);
    text_round_trip(j);
    free(text);
    {
        sx_pack pk;
        if (pack(j, &pk) == 0) {
            json_t *again = cli_json_from_mp(sx_pack_payload(&pk));
            /* Every time: a map that would read as a form shows as
             * {"$map": pairs} itself. */
            FUZZ_ASSERT(again != NULL && json_equal(again, j));
            json_decref(again);
        }
        sx_pack_fini(&pk);
    }
    json_decref(j);

    /* The reply-field readers on the same bytes as a map. */
    {
        char buf[8];
        uint64_t v;
        json_t *f;
        (void)cli_get_str(p, "k", buf, sizeof(buf));
        (void)cli_get_str(p, "k", buf, 1);
        (void)cli_get_u64(p, "k", &v);
        f = cli_get_json(p, "k");
        json_decref(f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    from_json(data, size);
    from_mp(data, size);
    return 0;
}

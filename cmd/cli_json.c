/* cmd/cli_json.c — JSON <-> msgpack for the stepx CLI (libjansson on one
 * side, the payload reader and writer of <stepx/process.h> on the other).
 *
 * The mapping keeps integers integers both ways; JSON has no binaries, so
 * a msgpack binary (or a string that is not valid UTF-8) shows as a string
 * when it is valid UTF-8 and as {"$bin": "<base64>"} otherwise, and that
 * object form packs back into a binary. A map key that is not a string
 * shows as its compact JSON text (1 as "1"); a map in which two keys then
 * read the same (1 and "1", or a key given twice), or a one-pair map that
 * would read as one of these forms, shows as {"$map": [[key, value], ...]},
 * each key as its own JSON value, so that no pair is lost, and that form
 * packs back into such a map. Threads: the
 * CLI's one thread.
 */
#include "cmd/cli.h"
#include "process/utf8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER)
#define MAX_DEPTH 64 /* nesting the CLI converts (SX_UNPACK_MAX_DEPTH) */

/* ---- base64 (RFC 4648, with padding) ---- */

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64_encode(const uint8_t *p, size_t n)
{
    char *out = malloc((n + 2) / 3 * 4 + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = b64[(v >> 18) & 63];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? b64[v & 63] : '=';
    }
    out[o] = 0;
    return out;
}

static int b64_value(char ch)
{
    const char *q = ch != 0 ? strchr(b64, ch) : NULL;
    return q != NULL ? (int)(q - b64) : -1;
}

/* Decodes s (padding optional); NULL on a bad character or out of memory. */
static uint8_t *base64_decode(const char *s, size_t len, size_t *out_len)
{
    while (len > 0 && s[len - 1] == '=')
        len--;
    if (len % 4 == 1)
        return NULL;
    uint8_t *out = malloc(len / 4 * 3 + 3);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value(s[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    *out_len = o;
    return out;
}

/* ---- msgpack -> JSON ---- */

/* A string or binary: a JSON string when it is valid UTF-8 (jansson
 * checks), else {"$bin": base64}. */
static json_t *bytes_json(const void *p, size_t n)
{
    json_t *s = json_stringn(n > 0 ? p : "", n);
    if (s != NULL)
        return s;
    char *enc = base64_encode(p, n);
    if (enc == NULL)
        return NULL;
    json_t *o = json_pack("{s:s}", "$bin", enc);
    free(enc);
    return o;
}

static json_t *mp_value(sx_unpack *u, int depth);

json_t *cli_json_text_of(const char *s)
{
    json_t *j = json_string(s);
    if (j != NULL)
        return j;
    /* Not UTF-8: each byte that starts no valid sequence shows as U+FFFD,
     * so that a message is never dropped from a JSON document. */
    size_t n = strlen(s), o = 0;
    char *t = malloc(3 * n + 1);
    if (t == NULL)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t k = sx__utf8_seq((const unsigned char *)s + i, n - i);
        if (k == 0) {
            memcpy(t + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        } else {
            memcpy(t + o, s + i, k);
            o += k;
            i += k;
        }
    }
    t[o] = 0;
    j = json_string(t);
    free(t);
    return j;
}

static json_t *mp_array(sx_unpack *u, int depth)
{
    uint32_t n;
    if (sx_unpack_array(u, &n) != 0)
        return NULL;
    json_t *a = json_array();
    for (uint32_t i = 0; a != NULL && i < n; i++) {
        json_t *v = mp_value(u, depth + 1);
        if (v == NULL || json_array_append_new(a, v) != 0) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

/* A non-string key's text may take this many bytes per byte of its
 * msgpack, plus KEY_TEXT_SLACK. A key inside a key is escaped once more in
 * the text of the key around it (every '"' and '\\' doubles), so without a
 * bound each level of keys in keys doubles the text: 45 bytes of msgpack
 * make 8 MB of JSON, a frame's 30 levels gigabytes. Plain keys stay far
 * below it (at most ~7 per byte: a NUL in a key inside the key). */
#define KEY_TEXT_PER_BYTE 8
#define KEY_TEXT_SLACK 64

/* A map key as text: a string key itself when it is valid UTF-8 without
 * NULs, else the compact JSON of the key's value (e.g. "5" for 5); NULL
 * when that is longer than the bound above. *kj gets the key's own JSON
 * value (the caller's reference; NULL with the text). */
static char *mp_key(sx_unpack *u, int depth, json_t **kj)
{
    const uint8_t *start = u->p;
    const char *s;
    size_t len;
    json_t *k;
    *kj = NULL;
    if (sx_unpack_type(u) == SX_MP_STR) {
        if (sx_unpack_str(u, &s, &len) != 0)
            return NULL;
        k = bytes_json(s, len);
        if (k != NULL && json_is_string(k) && memchr(s, 0, len) == NULL) {
            char *text = malloc(len + 1);
            if (text == NULL) {
                json_decref(k);
                return NULL;
            }
            memcpy(text, s, len);
            text[len] = 0;
            *kj = k;
            return text;
        }
    } else {
        k = mp_value(u, depth + 1);
    }
    char *text = k != NULL ? json_dumps(k, JSON_FLAGS) : NULL;
    if (text != NULL &&
        strlen(text) >
            KEY_TEXT_PER_BYTE * (size_t)(u->p - start) + KEY_TEXT_SLACK) {
        free(text);
        text = NULL;
    }
    if (text == NULL)
        json_decref(k);
    else
        *kj = k;
    return text;
}

static json_t *map_form(const json_t *j);

/* A map as an object; or, when two of its keys read the same as text (1
 * and "1", or a key given twice), as {"$map": [[key, value], ...]}, which
 * loses no pair. Both are built in the one pass (a second pass over the
 * pairs would be done again at every level of maps inside maps: 2^depth). */
static json_t *mp_map(sx_unpack *u, int depth)
{
    uint32_t n;
    if (sx_unpack_map(u, &n) != 0)
        return NULL;
    json_t *o = json_object();
    json_t *pairs = json_array();
    bool clash = false, ok = o != NULL && pairs != NULL;
    for (uint32_t i = 0; ok && i < n; i++) {
        json_t *kj;
        char *k = mp_key(u, depth, &kj);
        json_t *v = k != NULL ? mp_value(u, depth + 1) : NULL;
        if (v == NULL) {
            json_decref(kj);
            ok = false;
        } else {
            clash = clash || json_object_get(o, k) != NULL;
            /* "O": the pair takes its own reference to v; kj is taken. */
            json_t *pair = json_pack("[oO]", kj, v);
            if (pair == NULL || json_array_append_new(pairs, pair) != 0) {
                json_decref(v); /* the pair's reference went with it */
                ok = false;
            } else {
                ok = json_object_set_new(o, k, v) == 0; /* takes v */
            }
        }
        free(k);
    }
    /* A map that would read back as one of the forms ({"$map": pairs},
     * {"$bin": text}) is written as pairs too: as an object, the CLI's own
     * output sent back would pack another value ({1: 2}, a binary). */
    if (ok && !clash && n == 1)
        clash =
            map_form(o) != NULL || json_is_string(json_object_get(o, "$bin"));
    if (ok && clash) {
        json_decref(o);
        o = json_object();
        if (o != NULL && json_object_set_new(o, "$map", pairs) == 0)
            return o;
        if (o == NULL) /* else set_new took pairs, failing or not */
            json_decref(pairs);
        json_decref(o);
        return NULL;
    }
    json_decref(pairs);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *mp_number(sx_unpack *u, int type)
{
    if (type == SX_MP_INT) {
        int64_t i;
        uint64_t v;
        if (sx_unpack_int(u, &i) == 0)
            return json_integer((json_int_t)i);
        if (sx_unpack_uint(u, &v) == 0) /* above INT64_MAX */
            return json_real((double)v);
        return NULL;
    }
    double d;
    if (sx_unpack_double(u, &d) != 0)
        return NULL;
    if (isnan(d))
        return json_string("NaN");
    if (isinf(d))
        return json_string(d > 0 ? "Infinity" : "-Infinity");
    return json_real(d);
}

static json_t *mp_value(sx_unpack *u, int depth)
{
    if (depth > MAX_DEPTH)
        return NULL;
    int t = sx_unpack_type(u);
    const char *s;
    const void *p;
    size_t len;
    bool b;
    switch (t) {
    case SX_MP_NIL:
        return sx_unpack_nil(u) == 0 ? json_null() : NULL;
    case SX_MP_BOOL:
        return sx_unpack_bool(u, &b) == 0 ? json_boolean(b) : NULL;
    case SX_MP_INT:
    case SX_MP_FLOAT:
        return mp_number(u, t);
    case SX_MP_STR:
        return sx_unpack_str(u, &s, &len) == 0 ? bytes_json(s, len) : NULL;
    case SX_MP_BIN:
        return sx_unpack_bin(u, &p, &len) == 0 ? bytes_json(p, len) : NULL;
    case SX_MP_ARRAY:
        return mp_array(u, depth);
    case SX_MP_MAP:
        return mp_map(u, depth);
    case SX_MP_EXT: {
        sx_payload raw;
        if (sx_unpack_raw(u, &raw) != 0)
            return NULL;
        char *enc = base64_encode(raw.data, raw.len);
        json_t *o = enc != NULL ? json_pack("{s:s}", "$ext", enc) : NULL;
        free(enc);
        return o;
    }
    default:
        return NULL;
    }
}

json_t *cli_json_from_mp(sx_payload p)
{
    if (p.len == 0)
        return json_null();
    sx_unpack u;
    sx_unpack_init(&u, p);
    json_t *j = mp_value(&u, 0);
    if (j != NULL && !sx_unpack_done(&u)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* ---- JSON -> msgpack ---- */

/* The pairs of j when it is the form {"$map": [[key, value], ...]} (one
 * member, an array whose every element is an array of two), else NULL: any
 * other object, {"$map": ...} with something else inside included, is an
 * ordinary object. */
static json_t *map_form(const json_t *j)
{
    json_t *a = json_object_get(j, "$map");
    if (json_object_size(j) != 1 || !json_is_array(a))
        return NULL;
    size_t i;
    json_t *pair;
    json_array_foreach(a, i, pair)
    {
        if (!json_is_array(pair) || json_array_size(pair) != 2)
            return NULL;
    }
    return a;
}

int cli_json_to_mp(const json_t *j, sx_pack *pk)
{
    switch (json_typeof(j)) {
    case JSON_NULL:
        return sx_pack_nil(pk);
    case JSON_TRUE:
        return sx_pack_bool(pk, true);
    case JSON_FALSE:
        return sx_pack_bool(pk, false);
    case JSON_INTEGER:
        return sx_pack_int(pk, (int64_t)json_integer_value(j));
    case JSON_REAL:
        return sx_pack_double(pk, json_real_value(j));
    case JSON_STRING:
        return sx_pack_strn(pk, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if (n > UINT32_MAX)
            return SX_ELIMIT;
        int rc = sx_pack_array(pk, (uint32_t)n);
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = cli_json_to_mp(json_array_get(j, i), pk);
        return rc;
    }
    case JSON_OBJECT: {
        json_t *pairs = map_form(j);
        if (pairs != NULL) {
            size_t n = json_array_size(pairs);
            if (n > UINT32_MAX)
                return SX_ELIMIT;
            int rc = sx_pack_map(pk, (uint32_t)n);
            for (size_t i = 0; rc == 0 && i < n; i++) {
                json_t *pair = json_array_get(pairs, i);
                rc = cli_json_to_mp(json_array_get(pair, 0), pk);
                if (rc == 0)
                    rc = cli_json_to_mp(json_array_get(pair, 1), pk);
            }
            return rc;
        }
        json_t *bin = json_object_get(j, "$bin");
        if (json_object_size(j) == 1 && json_is_string(bin)) {
            size_t n;
            uint8_t *bytes = base64_decode(json_string_value(bin),
                                           json_string_length(bin), &n);
            if (bytes == NULL)
                return SX_EINVAL;
            int rc = sx_pack_bin(pk, bytes, n);
            free(bytes);
            return rc;
        }
        size_t n = json_object_size(j);
        if (n > UINT32_MAX)
            return SX_ELIMIT;
        int rc = sx_pack_map(pk, (uint32_t)n);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v)
        {
            if (rc == 0)
                rc = sx_pack_str(pk, k);
            if (rc == 0)
                rc = cli_json_to_mp(v, pk);
        }
        return rc;
    }
    }
    return SX_EINVAL;
}

/* How deep j's arrays and objects nest (a scalar is 0; {"$bin": ...},
 * which packs as a binary, too). */
static int json_depth(const json_t *j)
{
    int d = 0;
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach((json_t *)j, i, v)
        {
            int k = json_depth(v);
            d = k > d ? k : d;
        }
        return d + 1;
    }
    if (json_is_object(j)) {
        if (json_object_size(j) == 1 &&
            json_is_string(json_object_get(j, "$bin")))
            return 0;
        json_t *pairs = map_form(j);
        if (pairs != NULL) {
            /* Packs as one map of those keys and values. */
            size_t i;
            json_t *pair;
            json_array_foreach(pairs, i, pair)
            {
                for (size_t m = 0; m < 2; m++) {
                    int k = json_depth(json_array_get(pair, m));
                    d = k > d ? k : d;
                }
            }
            return d + 1;
        }
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)j, key, v)
        {
            int k = json_depth(v);
            d = k > d ? k : d;
        }
        return d + 1;
    }
    return 0;
}

/* Every value the CLI parses travels as one value of a request map (the
 * frame's top level, depth 1), so it may nest one level less than a frame
 * (docs/PROTOCOL.md, "nesting depth"); the client refuses a deeper frame. */
#define CLI_JSON_MAX_DEPTH (SX_WIRE_MAX_DEPTH - 1)

json_t *cli_json_parse(const char *text, const char *what)
{
    json_error_t err;
    json_t *j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    int depth = j != NULL ? json_depth(j) : 0;
    if (depth > CLI_JSON_MAX_DEPTH) {
        json_decref(j);
        cli_fail(CLI_USAGE,
                 "bad JSON for %s: arrays and objects nest %d deep, more than "
                 "the %d a request can carry (the protocol's nesting limit)",
                 what, depth, CLI_JSON_MAX_DEPTH);
        return NULL;
    }
    if (j == NULL) {
        cli_fail(CLI_USAGE, "bad JSON for %s: %s (at character %d of '%s')",
                 what, err.text, err.position, text);
        if (strchr("{[\"-0123456789", text[0]) == NULL &&
            strcmp(text, "true") != 0 && strcmp(text, "false") != 0 &&
            strcmp(text, "null") != 0)
            fprintf(stderr, "stepx: hint: a string needs JSON quotes, e.g. "
                            "'\"text\"'\n");
    }
    return j;
}

char *cli_json_text(const json_t *j)
{
    return json_dumps(j, JSON_FLAGS);
}

char *cli_mp_text(sx_payload p)
{
    json_t *j = cli_json_from_mp(p);
    if (j == NULL)
        return NULL;
    char *s = json_dumps(j, JSON_FLAGS);
    json_decref(j);
    return s;
}

void cli_json_print(const json_t *j)
{
    char *s = json_dumps(j, JSON_FLAGS);
    if (s == NULL) {
        fputs("null\n", stdout);
        return;
    }
    puts(s);
    free(s);
    fflush(stdout);
}

/* ---- reply fields ---- */

bool cli_get_str(sx_payload map, const char *key, char *buf, size_t cap)
{
    sx_payload v;
    sx_unpack u;
    const char *s;
    size_t len;
    if (cap == 0 || sx_map_get(map, key, &v) != 0)
        return false;
    sx_unpack_init(&u, v);
    if (sx_unpack_str(&u, &s, &len) != 0)
        return false;
    if (len > cap - 1)
        len = cap - 1;
    memcpy(buf, s, len);
    buf[len] = 0;
    return true;
}

bool cli_get_u64(sx_payload map, const char *key, uint64_t *out)
{
    sx_payload v;
    sx_unpack u;
    if (sx_map_get(map, key, &v) != 0)
        return false;
    sx_unpack_init(&u, v);
    return sx_unpack_uint(&u, out) == 0;
}

bool cli_get_true(sx_payload map, const char *key)
{
    sx_payload v;
    sx_unpack u;
    bool b = false;
    if (sx_map_get(map, key, &v) != 0)
        return false;
    sx_unpack_init(&u, v);
    return sx_unpack_bool(&u, &b) == 0 && b;
}

json_t *cli_get_json(sx_payload map, const char *key)
{
    sx_payload v;
    if (sx_map_get(map, key, &v) != 0)
        return NULL;
    return cli_json_from_mp(v);
}

/* tests/fuzz/fuzz_http.c — libFuzzer target for net.http's pure parts
 * (engine/commands/http_parse.c): the response parser, the URL parser and
 * the request builder.
 *
 * The first byte picks what the rest is (its low two bits):
 *  0, 1  a response as a server would send it, 1 to a HEAD request. Bytes
 *        1-4 are split sizes, used in turn: the stream is fed in pieces of
 *        those sizes (0: a call with no new bytes), as reads would bring
 *        it, and then fed again whole. Checked: every call reads only the
 *        unread bytes it is given (the rest of the buffer is poisoned
 *        under ASan) and consumes at most them; it returns 1, 0,
 *        SX_EPROTO or SX_ELIMIT, with a message on an error; while it
 *        runs the body never holds more bytes than were consumed nor more
 *        than 8 MiB, the head stays within 64 KiB, the status is 100-999,
 *        every field lies inside the head with a lower-case token name
 *        and a trimmed value without CRLF; a complete response has a
 *        final status (101 or 200-999), no body where none may be, and
 *        the joined header values add up; a call after the end returns 1
 *        and consumes nothing. Both feedings must end the same way: the
 *        same result (status, head, fields, body, bytes consumed) or the
 *        same error and message. Bit 2 of the first byte sets eof on the
 *        last piece instead of in a call of its own.
 *  2     a URL: parsed; when accepted, host and path lie inside it and
 *        hold no space or control byte, host is 1-255 bytes, port
 *        1-65535; the GET request built from it has exactly its request
 *        line, Connection, Host and the empty line, with the URL's path
 *        and host in them; a rejected one has a "net.http: " message.
 *  3     the headers argument as msgpack bytes, for a fixed URL (bit 2:
 *        POST, bit 3: with a body): accepted, the request's head is lines
 *        of "name: value" (names tokens, no CR or LF anywhere else) that
 *        ends where the body begins, with one Connection and one
 *        Content-Length at most; rejected, SX_EINVAL with a message.
 * An oracle failure aborts (a crash for libFuzzer). tests/fuzz/replay.c
 * runs the same checks over the seed corpus in every build.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/commands/http_parse.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#endif
#ifdef FUZZ_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(c)                                                         \
    do {                                                                       \
        if (!(c))                                                              \
            abort();                                                           \
    } while (0)

/* ---- responses ---- */

/* How one feeding ended. */
typedef struct {
    int rc;           /* the last call's: 1, 0 or the error */
    const char *what; /* the error's message */
    size_t fed;       /* bytes fed in all */
    size_t consumed;  /* bytes consumed in all */
    sx__http_resp r;
} outcome;

static bool is_token_char(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

static bool has_crlf(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n')
            return true;
    return false;
}

/* What must hold of the parser after any call; after an error (ok
 * false) only the bounds, as the head may be half parsed. */
static void check_state(const sx__http_resp *r, size_t consumed, bool ok)
{
    FUZZ_ASSERT(r->body_len <= consumed);
    FUZZ_ASSERT(r->body_len <= SX__HTTP_BODY_MAX);
    FUZZ_ASSERT(r->body_len <= r->body_cap);
    FUZZ_ASSERT(r->head_len <= SX__HTTP_HEAD_MAX);
    FUZZ_ASSERT(r->head_len <= consumed);
    FUZZ_ASSERT(r->n_fields <= SX__HTTP_FIELDS_MAX);
    FUZZ_ASSERT(r->phase <= SX__HTTP_DONE);
    if (!ok)
        return;
    if (r->head == NULL) {
        FUZZ_ASSERT(r->n_fields == 0);
        return;
    }
    FUZZ_ASSERT(r->head_len >= 4 &&
                memcmp(r->head + r->head_len - 4, "\r\n\r\n", 4) == 0);
    FUZZ_ASSERT(r->status >= 100 && r->status <= 999);
    for (unsigned i = 0; i < r->n_fields; i++) {
        const sx__http_field *f = &r->fields[i];
        FUZZ_ASSERT(f->name_len > 0);
        FUZZ_ASSERT((size_t)f->name + f->name_len < r->head_len);
        FUZZ_ASSERT((size_t)f->value + f->value_len <= r->head_len);
        FUZZ_ASSERT(f->value >= f->name + f->name_len + 1);
        FUZZ_ASSERT(r->head[f->name + f->name_len] == ':');
        for (uint32_t j = 0; j < f->name_len; j++)
            FUZZ_ASSERT(is_token_char((unsigned char)r->head[f->name + j]));
        const char *v = r->head + f->value;
        FUZZ_ASSERT(!has_crlf(v, f->value_len));
        if (f->value_len > 0) {
            FUZZ_ASSERT(v[0] != ' ' && v[0] != '\t');
            FUZZ_ASSERT(v[f->value_len - 1] != ' ' &&
                        v[f->value_len - 1] != '\t');
        }
    }
}

/* What must hold of a complete response. */
static void check_done(const sx__http_resp *r)
{
    FUZZ_ASSERT(r->phase == SX__HTTP_DONE && r->head != NULL);
    FUZZ_ASSERT(r->status == 101 || r->status >= 200);
    if (r->head_only || r->status == 204 || r->status == 304 || r->status < 200)
        FUZZ_ASSERT(r->body_len == 0);
    bool dup[SX__HTTP_FIELDS_MAX];
    unsigned distinct = sx__http_resp_distinct(r, dup);
    FUZZ_ASSERT(distinct <= r->n_fields);
    FUZZ_ASSERT(r->n_fields == 0 || (distinct > 0 && !dup[0]));
    size_t joined = 0, values = 0;
    for (unsigned i = 0; i < r->n_fields; i++) {
        values += r->fields[i].value_len;
        if (dup[i])
            continue;
        char *v;
        size_t vl;
        FUZZ_ASSERT(sx__http_resp_join(r, i, &v, &vl) == 0);
        FUZZ_ASSERT(v[vl] == 0 && vl >= r->fields[i].value_len);
        FUZZ_ASSERT(memcmp(v, r->head + r->fields[i].value,
                           r->fields[i].value_len) == 0);
        joined += vl;
        free(v);
    }
    /* Each repeated field adds its value and ", ". */
    FUZZ_ASSERT(joined == values + 2 * (size_t)(r->n_fields - distinct));
}

/* One call on buf[consumed, fed). Under ASan the bytes outside it stay
 * poisoned: the unfed ones exactly, the consumed ones in whole 8-byte
 * granules (ASan cannot poison the start of a granule alone). */
static int feed_one(outcome *o, uint8_t *buf, size_t fed, bool eof)
{
    size_t off = o->consumed, used = 12345;
    const char *what = NULL;
    UNPOISON(buf + o->fed, fed - o->fed);
    o->fed = fed;
    int rc = sx__http_resp_feed(&o->r, buf + off, fed - off, eof, &used, &what);
    FUZZ_ASSERT(used <= fed - off);
    POISON(buf + off, used);
    o->consumed += used;
    o->rc = rc;
    o->what = what;
    FUZZ_ASSERT(rc == 1 || rc == 0 || rc == SX_EPROTO || rc == SX_ELIMIT);
    FUZZ_ASSERT(rc >= 0 || (what != NULL && what[0] != 0));
    check_state(&o->r, o->consumed, rc >= 0);
    FUZZ_ASSERT(rc < 0 || (rc == 1) == (o->r.phase == SX__HTTP_DONE));
    if (rc == 1) {
        check_done(&o->r);
        /* Done is done: nothing more is read or consumed. */
        FUZZ_ASSERT(sx__http_resp_feed(&o->r, buf + o->consumed,
                                       fed - o->consumed, eof, &used,
                                       &what) == 1 &&
                    used == 0);
    } else if (rc == 0 && eof) {
        FUZZ_ASSERT(o->r.phase != SX__HTTP_TO_EOF);
    }
    return rc;
}

/* Feeds buf[0, n) in pieces of sizes[0..3] in turn (all of it at once
 * when sizes is NULL or all 0), then the end of the stream. */
static void feed_all(outcome *o, uint8_t *buf, size_t n, const uint8_t *sizes,
                     bool eof_with_last, bool head_only)
{
    memset(o, 0, sizeof *o);
    o->r.head_only = head_only;
    bool any = sizes != NULL && (sizes[0] | sizes[1] | sizes[2] | sizes[3]);
    size_t fed = 0;
    POISON(buf, n);
    for (unsigned k = 0; fed < n || k == 0; k++) {
        size_t s = any ? sizes[k % 4] : n;
        if (s > n - fed)
            s = n - fed;
        fed += s;
        bool last = fed == n;
        if (feed_one(o, buf, fed, last && eof_with_last) != 0)
            break;
    }
    if (o->rc == 0 && !eof_with_last)
        feed_one(o, buf, n, true);
    UNPOISON(buf, n);
}

static void same_outcome(const outcome *a, const outcome *b)
{
    FUZZ_ASSERT(a->rc == b->rc);
    if (a->rc < 0) {
        FUZZ_ASSERT(strcmp(a->what, b->what) == 0);
        return;
    }
    FUZZ_ASSERT(a->consumed == b->consumed);
    FUZZ_ASSERT(a->r.phase == b->r.phase);
    FUZZ_ASSERT(a->r.body_len == b->r.body_len);
    FUZZ_ASSERT(a->r.body_len == 0 ||
                memcmp(a->r.body, b->r.body, a->r.body_len) == 0);
    FUZZ_ASSERT((a->r.head == NULL) == (b->r.head == NULL));
    if (a->r.head == NULL)
        return;
    FUZZ_ASSERT(a->r.status == b->r.status);
    FUZZ_ASSERT(a->r.head_len == b->r.head_len);
    FUZZ_ASSERT(memcmp(a->r.head, b->r.head, a->r.head_len) == 0);
    FUZZ_ASSERT(a->r.n_fields == b->r.n_fields);
    FUZZ_ASSERT(memcmp(a->r.fields, b->r.fields,
                       a->r.n_fields * sizeof a->r.fields[0]) == 0);
}

static void fuzz_response(const uint8_t *data, size_t size, bool head_only,
                          bool eof_with_last)
{
    uint8_t sizes[4] = { 0, 0, 0, 0 };
    size_t ns = size < 4 ? size : 4;
    memcpy(sizes, data, ns);
    data += ns;
    size -= ns;
    uint8_t *buf = malloc(size > 0 ? size : 1);
    FUZZ_ASSERT(buf != NULL);
    if (size > 0)
        memcpy(buf, data, size);
    outcome split, whole;
    feed_all(&split, buf, size, sizes, eof_with_last, head_only);
    feed_all(&whole, buf, size, NULL, false, head_only);
    same_outcome(&split, &whole);
    sx__http_resp_fini(&split.r);
    sx__http_resp_fini(&whole.r);
    free(buf);
}

/* ---- URLs and requests ---- */

static bool is_ctl_or_space(char ch)
{
    return (unsigned char)ch <= 0x20 || (unsigned char)ch == 0x7f;
}

/* Checks that req[0, n) is a request head of CRLF-terminated lines (no
 * other CR or LF) ending at `end` (where its empty line ends), and returns
 * the number of header lines (the request line not counted). */
static unsigned check_head_lines(const uint8_t *req, size_t n, size_t end)
{
    FUZZ_ASSERT(end <= n && end >= 4);
    FUZZ_ASSERT(memcmp(req + end - 4, "\r\n\r\n", 4) == 0);
    unsigned lines = 0;
    size_t start = 0;
    for (size_t i = 0; i < end - 2; i++) {
        if (req[i] == '\n')
            FUZZ_ASSERT(i > 0 && req[i - 1] == '\r');
        if (req[i] != '\r')
            continue;
        FUZZ_ASSERT(req[i + 1] == '\n');
        FUZZ_ASSERT(i > start); /* no empty line before the end */
        if (lines > 0) {        /* a header line: "name: value" */
            const uint8_t *colon = memchr(req + start, ':', i - start);
            FUZZ_ASSERT(colon != NULL && colon > req + start);
            FUZZ_ASSERT(sx__http_token((const char *)req + start,
                                       (size_t)(colon - (req + start))));
            FUZZ_ASSERT(colon + 1 < req + i && colon[1] == ' ');
        }
        lines++;
        start = i + 2;
        i++;
    }
    FUZZ_ASSERT(start == end - 2);
    return lines - 1;
}

static void fuzz_url(const uint8_t *data, size_t size)
{
    char *s = calloc(size > 0 ? size : 1, 1);
    FUZZ_ASSERT(s != NULL);
    if (size > 0)
        memcpy(s, data, size);
    sx__http_url u;
    const char *err = sx__http_url_parse(s, size, &u);
    if (err != NULL) {
        FUZZ_ASSERT(strncmp(err, "net.http: ", 10) == 0);
        free(s);
        return;
    }
    FUZZ_ASSERT(size >= 7 && strncasecmp(s, "http://", 7) == 0);
    FUZZ_ASSERT(u.host > s && u.host + u.host_len <= s + size);
    FUZZ_ASSERT(u.host_len >= 1 && u.host_len <= SX__HTTP_HOST_MAX);
    FUZZ_ASSERT(u.port >= 1 && u.port <= 65535);
    for (size_t i = 0; i < u.host_len; i++)
        FUZZ_ASSERT(!is_ctl_or_space(u.host[i]) &&
                    strchr("/?#@", u.host[i]) == NULL);
    FUZZ_ASSERT(u.path >= u.host + u.host_len &&
                u.path + u.path_len <= s + size);
    FUZZ_ASSERT(u.path_len == 0 || u.path[0] == '/' || u.path[0] == '?');
    for (size_t i = 0; i < u.path_len; i++)
        FUZZ_ASSERT(!is_ctl_or_space(u.path[i]) && u.path[i] != '#');

    sx__http_request rq = { .method = "GET", .method_len = 3, .url = &u };
    uint8_t *req;
    size_t n;
    const char *msg;
    FUZZ_ASSERT(sx__http_request_build(&rq, &req, &n, &msg) == 0);
    FUZZ_ASSERT(check_head_lines(req, n, n) == 2);
    /* "GET " ["/"] path " HTTP/1.1" CRLF "Connection: close" CRLF "Host:
     * " ["["] host ["]"] [":" port] CRLF CRLF */
    size_t at = 4;
    FUZZ_ASSERT(memcmp(req, "GET ", 4) == 0);
    if (u.path_len == 0 || u.path[0] != '/')
        FUZZ_ASSERT(req[at++] == '/');
    FUZZ_ASSERT(memcmp(req + at, u.path, u.path_len) == 0);
    at += u.path_len;
    static const char mid[] = " HTTP/1.1\r\nConnection: close\r\nHost: ";
    FUZZ_ASSERT(memcmp(req + at, mid, sizeof mid - 1) == 0);
    at += sizeof mid - 1;
    bool v6 = memchr(u.host, ':', u.host_len) != NULL;
    if (v6)
        FUZZ_ASSERT(req[at++] == '[');
    FUZZ_ASSERT(memcmp(req + at, u.host, u.host_len) == 0);
    at += u.host_len;
    if (v6)
        FUZZ_ASSERT(req[at++] == ']');
    if (u.port != 80) {
        FUZZ_ASSERT(req[at++] == ':');
        int64_t port = 0;
        while (req[at] >= '0' && req[at] <= '9')
            port = port * 10 + (req[at++] - '0');
        FUZZ_ASSERT(port == u.port);
    }
    FUZZ_ASSERT(at + 4 == n && memcmp(req + at, "\r\n\r\n", 4) == 0);
    free(req);
    free(s);
}

static void fuzz_headers(const uint8_t *data, size_t size, bool post,
                         bool with_body)
{
    static const char url_text[] = "http://[::1]:8080/p?q";
    sx__http_url u;
    FUZZ_ASSERT(sx__http_url_parse(url_text, sizeof url_text - 1, &u) == NULL);
    uint8_t *hdr = malloc(size > 0 ? size : 1);
    FUZZ_ASSERT(hdr != NULL);
    if (size > 0)
        memcpy(hdr, data, size);
    static const char body[] = "body";
    size_t body_len = with_body ? 4 : 0;
    sx__http_request rq = { .method = post ? "POST" : "GET",
                            .method_len = post ? 4 : 3,
                            .url = &u,
                            .headers = { hdr, size },
                            .body = with_body ? body : NULL,
                            .body_len = body_len,
                            .has_body = with_body };
    uint8_t *req;
    size_t n;
    const char *msg = NULL;
    int rc = sx__http_request_build(&rq, &req, &n, &msg);
    if (rc != 0) {
        FUZZ_ASSERT(rc == SX_EINVAL && msg != NULL &&
                    strncmp(msg, "net.http: ", 10) == 0);
        free(hdr);
        return;
    }
    FUZZ_ASSERT(n >= body_len + 4);
    size_t end = n - body_len;
    FUZZ_ASSERT(memcmp(req + end, body, body_len) == 0);
    check_head_lines(req, n, end);
    /* The first empty line is the head's end: no field ended it early. */
    for (size_t i = 0; i + 4 < end; i++)
        FUZZ_ASSERT(memcmp(req + i, "\r\n\r\n", 4) != 0);
    /* The client's own fields appear once (Content-Length: at most). */
    unsigned conn = 0, clen = 0, te = 0;
    for (size_t i = 0; i + 2 < end; i++) {
        if (req[i] != '\n')
            continue;
        const char *l = (const char *)req + i + 1;
        size_t left = end - (i + 1);
        conn += left >= 11 && strncasecmp(l, "connection:", 11) == 0;
        clen += left >= 15 && strncasecmp(l, "content-length:", 15) == 0;
        te += left >= 18 && strncasecmp(l, "transfer-encoding:", 18) == 0;
    }
    FUZZ_ASSERT(conn == 1 && te == 0);
    FUZZ_ASSERT(clen == (post || with_body ? 1u : 0u));
    free(req);
    free(hdr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    switch (mode & 3) {
    case 0:
    case 1:
        fuzz_response(data, size, (mode & 3) == 1, (mode & 4) != 0);
        break;
    case 2:
        fuzz_url(data, size);
        break;
    default:
        fuzz_headers(data, size, (mode & 4) != 0, (mode & 8) != 0);
        break;
    }
    return 0;
}

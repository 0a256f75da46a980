/* tests/io/test_http_parse.c — net.http's pure parts alone
 * (engine/commands/http_parse.c), without a loop or a server: the URL
 * parser (the parts, every error), the request builder (the exact bytes,
 * every error) and the response parser (each framing, interim responses,
 * HEAD, the fields and their joining, every malformed case and limit with
 * its code and message, and the same outcome whatever the splits).
 * tests/io/test_net.c covers the same command end to end through a real
 * server; tests/fuzz/fuzz_http.c fuzzes these functions.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stepx/process.h>

#include "engine/commands/http_parse.h"
#include "tests/support/harness.h"

/* ---- URLs ---- */

static sx__http_url url_ok(const char *s)
{
    sx__http_url u;
    const char *err = sx__http_url_parse(s, strlen(s), &u);
    if (err != NULL)
        SX_FAILF("url \"%s\": %s", s, err);
    return u;
}

static void check_part(const char *p, size_t len, const char *want)
{
    if (len != strlen(want) || memcmp(p, want, len) != 0)
        SX_FAILF("\"%.*s\" vs \"%s\"", (int)len, p, want);
}

static void t_url_parts(void)
{
    static const struct {
        const char *url, *host, *path;
        int64_t port;
    } cases[] = {
        { "http://example.com/", "example.com", "/", 80 },
        { "http://example.com", "example.com", "", 80 },
        { "HTTP://Example.COM:8080/a/b?x=1#frag", "Example.COM", "/a/b?x=1",
          8080 },
        { "http://h?q=1", "h", "?q=1", 80 },
        { "http://h#f", "h", "", 80 },
        { "http://h:00080/p", "h", "/p", 80 },
        { "http://h:65535/", "h", "/", 65535 },
        { "http://127.0.0.1:1/x%20y", "127.0.0.1", "/x%20y", 1 },
        { "http://[::1]:9000/v6", "::1", "/v6", 9000 },
        { "http://[2001:db8::1]/", "2001:db8::1", "/", 80 },
        { "http://[::1]", "::1", "", 80 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sx__http_url u = url_ok(cases[i].url);
        check_part(u.host, u.host_len, cases[i].host);
        check_part(u.path, u.path_len, cases[i].path);
        CHECK_EQ_INT(u.port, cases[i].port);
    }
    /* A host of 255 bytes is the most. */
    char big[300] = "http://";
    memset(big + 7, 'h', 255);
    strcpy(big + 7 + 255, "/");
    CHECK_EQ_INT(url_ok(big).host_len, 255);
}

static void t_url_errors(void)
{
    static const struct {
        const char *url, *msg;
    } cases[] = {
        { "https://example.com/",
          "net.http: only http:// URLs are supported (no TLS)" },
        { "ftp://example.com/", "net.http: url must start with http://" },
        { "http:/", "net.http: url must start with http://" },
        { "", "net.http: url must start with http://" },
        { "http://user:pw@h/",
          "net.http: user info in the url is not supported" },
        { "http://[::1/",
          "net.http: bad url host:port: a '[' without its ']'" },
        { "http://[::1]x/",
          "net.http: bad url host:port: expected ':PORT' after the ']'" },
        { "http://h:/",
          "net.http: bad url host:port: the port after ':' is empty" },
        { "http://h:123456/",
          "net.http: bad url host:port: the port must be 1 to 65535" },
        { "http://h:8o/", "net.http: bad url host:port: the port is not a "
                          "decimal number (digits only)" },
        { "http://::1/",
          "net.http: bad url host:port: more than one ':' (an IPv6 "
          "address goes in brackets: [::1]:PORT)" },
        { "http://h:0/",
          "net.http: bad url host:port: the port must be 1 to 65535" },
        { "http://h:65536/",
          "net.http: bad url host:port: the port must be 1 to 65535" },
        { "http:///p", "net.http: bad url host:port: the host is empty" },
        { "http://[]/", "net.http: bad url host:port: the host is empty" },
        { "http://:80/", "net.http: bad url host:port: the host is empty" },
        { "http://a b/",
          "net.http: bad url host:port: the host holds a character other "
          "than ASCII letters, digits, '.', '-' and '_'" },
        { "http://[::1%\r\nX-Injected: yes]:1/",
          "net.http: bad url host:port: the IPv6 zone after '%' must be 1 or "
          "more ASCII "
          "letters, digits, '.', '-' or '_'" },
        { "http://h/a b", "net.http: the url path must not hold spaces or "
                          "control characters (percent-encode them)" },
        { "http://h/a\x7f", "net.http: the url path must not hold spaces or "
                            "control characters (percent-encode them)" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sx__http_url u;
        CHECK_STR(sx__http_url_parse(cases[i].url, strlen(cases[i].url), &u),
                  cases[i].msg);
    }
    char big[300] = "http://";
    memset(big + 7, 'h', 256);
    sx__http_url u;
    CHECK_STR(sx__http_url_parse(big, strlen(big), &u),
              "net.http: bad url host:port: the host is longer than 255 "
              "bytes");
    /* Not NUL-terminated: only len bytes are read. */
    CHECK(sx__http_url_parse("http://h/p q", 10, &u) == NULL);
    check_part(u.path, u.path_len, "/p");
    CHECK_STR(sx__http_url_parse("http://h\0/", 10, &u),
              "net.http: bad url host:port: the host holds a character "
              "other than ASCII letters, digits, '.', '-' and '_'");
}

/* ---- Requests ---- */

/* Builds a request and checks its bytes (a NUL-terminated want). */
static void check_request(const char *method, const char *url,
                          sx_payload headers, const char *body, bool has_body,
                          const char *want)
{
    sx__http_url u = url_ok(url);
    sx__http_request rq = { .method = method,
                            .method_len = strlen(method),
                            .url = &u,
                            .headers = headers,
                            .body = body,
                            .body_len = body != NULL ? strlen(body) : 0,
                            .has_body = has_body };
    uint8_t *req;
    size_t n;
    const char *msg = NULL;
    int rc = sx__http_request_build(&rq, &req, &n, &msg);
    if (rc != 0)
        SX_FAILF("%s %s: %d %s", method, url, rc, msg);
    if (n != strlen(want) || memcmp(req, want, n) != 0)
        SX_FAILF("request\n%.*s\nvs\n%s", (int)n, (const char *)req, want);
    free(req);
}

static const sx_payload none = { NULL, 0 };

static void t_request(void)
{
    check_request("GET", "http://example.com", none, NULL, false,
                  "GET / HTTP/1.1\r\nConnection: close\r\n"
                  "Host: example.com\r\n\r\n");
    check_request("GET", "http://h:8080/a?b#c", none, NULL, false,
                  "GET /a?b HTTP/1.1\r\nConnection: close\r\n"
                  "Host: h:8080\r\n\r\n");
    check_request("DELETE", "http://h?q", none, NULL, false,
                  "DELETE /?q HTTP/1.1\r\nConnection: close\r\n"
                  "Host: h\r\n\r\n");
    check_request("GET", "http://[::1]:9/", none, NULL, false,
                  "GET / HTTP/1.1\r\nConnection: close\r\n"
                  "Host: [::1]:9\r\n\r\n");
    check_request("GET", "http://[::1]:80/", none, NULL, false,
                  "GET / HTTP/1.1\r\nConnection: close\r\n"
                  "Host: [::1]\r\n\r\n");
    /* POST, PUT and PATCH always say how long their body is. */
    check_request("post", "http://h/", none, NULL, false,
                  "post / HTTP/1.1\r\nConnection: close\r\nHost: h\r\n"
                  "Content-Length: 0\r\n\r\n");
    check_request("PUT", "http://h/", none, "data", true,
                  "PUT / HTTP/1.1\r\nConnection: close\r\nHost: h\r\n"
                  "Content-Length: 4\r\n\r\ndata");
    check_request("GET", "http://h/", none, "", true,
                  "GET / HTTP/1.1\r\nConnection: close\r\nHost: h\r\n"
                  "Content-Length: 0\r\n\r\n");

    uint8_t b[256];
    sx_pack pk;
    sx_pack_init_fixed(&pk, b, sizeof b);
    sx_pack_map(&pk, 3);
    sx_pack_str(&pk, "X-Id");
    sx_pack_int(&pk, -42);
    sx_pack_str(&pk, "HOST");
    sx_pack_str(&pk, "other:1");
    sx_pack_str(&pk, "Accept");
    sx_pack_str(&pk, "");
    CHECK(pk.err == 0);
    check_request("GET", "http://h/", sx_pack_payload(&pk), NULL, false,
                  "GET / HTTP/1.1\r\nConnection: close\r\nX-Id: -42\r\n"
                  "HOST: other:1\r\nAccept: \r\n\r\n");
    uint8_t nil_b[1] = { 0xc0 };
    check_request("GET", "http://h/", (sx_payload){ nil_b, 1 }, NULL, false,
                  "GET / HTTP/1.1\r\nConnection: close\r\n"
                  "Host: h\r\n\r\n");
}

/* The message a headers map of one pair gets: name and a str value, or a
 * float when value is NULL. */
static void check_header_error(const char *name, const char *value,
                               size_t value_len, const char *want)
{
    uint8_t b[256];
    sx_pack pk;
    sx_pack_init_fixed(&pk, b, sizeof b);
    sx_pack_map(&pk, 1);
    sx_pack_str(&pk, name);
    if (value != NULL)
        sx_pack_strn(&pk, value, value_len);
    else
        sx_pack_double(&pk, 1.5);
    CHECK(pk.err == 0);
    sx__http_url u = url_ok("http://h/");
    sx__http_request rq = { .method = "GET",
                            .method_len = 3,
                            .url = &u,
                            .headers = sx_pack_payload(&pk) };
    uint8_t *req = NULL;
    size_t n;
    const char *msg = NULL;
    CHECK_RC(sx__http_request_build(&rq, &req, &n, &msg), SX_EINVAL);
    CHECK_STR(msg, want);
    CHECK(req == NULL);
}

static void t_request_errors(void)
{
    check_header_error("", "x", 1, "net.http: empty header name");
    check_header_error("Bad Name", "x", 1, "net.http: malformed header name");
    check_header_error("X\xff", "x", 1, "net.http: malformed header name");
    check_header_error("X-A", "a\r\nInjected: 1", 14,
                       "net.http: header values must not hold CR, LF or NUL");
    check_header_error("X-A", "a\nb", 3,
                       "net.http: header values must not hold CR, LF or NUL");
    check_header_error("X-A", "a\0b", 3,
                       "net.http: header values must not hold CR, LF or NUL");
    check_header_error("X-A", NULL, 0,
                       "net.http: header values must be strings or integers");
    static const char *const own[] = { "Connection", "content-length",
                                       "TRANSFER-ENCODING" };
    for (size_t i = 0; i < 3; i++)
        check_header_error(own[i], "x", 1,
                           "net.http: Connection, Content-Length and "
                           "Transfer-Encoding are set by the client");

    sx__http_url u = url_ok("http://h/");
    uint8_t *req = NULL;
    size_t n;
    const char *msg = NULL;
    uint8_t arr[] = { 0x91, 0xa1, 'x' }; /* ["x"] */
    sx__http_request rq = { .method = "GET",
                            .method_len = 3,
                            .url = &u,
                            .headers = { arr, sizeof arr } };
    CHECK_RC(sx__http_request_build(&rq, &req, &n, &msg), SX_EINVAL);
    CHECK_STR(msg, "net.http: headers must be a map of name -> value");
    uint8_t intkey[] = { 0x81, 0x01, 0xa1, 'x' }; /* {1: "x"} */
    rq.headers = (sx_payload){ intkey, sizeof intkey };
    CHECK_RC(sx__http_request_build(&rq, &req, &n, &msg), SX_EINVAL);
    CHECK_STR(msg, "net.http: header names must be strings");
    uint8_t cut[] = { 0x82, 0xa1, 'a', 0xa1, 'b' }; /* a pair missing */
    rq.headers = (sx_payload){ cut, sizeof cut };
    CHECK_RC(sx__http_request_build(&rq, &req, &n, &msg), SX_EINVAL);
    CHECK_STR(msg, "net.http: header names must be strings");
    CHECK(req == NULL);
}

/* ---- Responses ---- */

typedef struct {
    int rc;
    const char *what;
    size_t consumed;
    sx__http_resp r;
} parsed;

/* Feeds text[0, len) in pieces of `piece` bytes (0: all at once), each
 * call given the unread bytes, then the end of the stream in a call of
 * its own; stops at the first result or error. The caller frees p->r. */
static void parse_n(parsed *p, const char *text, size_t len, size_t piece,
                    bool head_only)
{
    memset(p, 0, sizeof *p);
    p->r.head_only = head_only;
    size_t fed = 0;
    if (piece == 0)
        piece = len > 0 ? len : 1;
    /* An exact copy, so that reading past the input is past the block. */
    uint8_t *buf = malloc(len > 0 ? len : 1);
    CHECK(buf != NULL);
    memcpy(buf, text, len);
    for (;;) {
        bool eof = fed == len;
        size_t used;
        p->rc = sx__http_resp_feed(&p->r, buf + p->consumed, fed - p->consumed,
                                   eof, &used, &p->what);
        CHECK(used <= fed - p->consumed);
        p->consumed += used;
        if (p->rc != 0 || eof)
            break;
        fed += len - fed < piece ? len - fed : piece;
    }
    free(buf);
}

static void parse(parsed *p, const char *text, size_t piece, bool head_only)
{
    parse_n(p, text, strlen(text), piece, head_only);
}

/* The joined value of the field named `name`, or NULL; freed by the
 * caller. */
static char *field(const sx__http_resp *r, const char *name)
{
    for (unsigned i = 0; i < r->n_fields; i++) {
        const sx__http_field *f = &r->fields[i];
        if (f->name_len == strlen(name) &&
            memcmp(r->head + f->name, name, f->name_len) == 0) {
            char *v;
            size_t vl;
            CHECK(sx__http_resp_join(r, i, &v, &vl) == 0);
            CHECK(strlen(v) == vl);
            return v;
        }
    }
    return NULL;
}

static void check_field(const sx__http_resp *r, const char *name,
                        const char *want)
{
    char *v = field(r, name);
    if (want == NULL) {
        CHECK(v == NULL);
        return;
    }
    CHECK(v != NULL);
    CHECK_STR(v, want);
    free(v);
}

static void check_body(const sx__http_resp *r, const char *want)
{
    CHECK_EQ_U64(r->body_len, strlen(want));
    CHECK(r->body_len == 0 || memcmp(r->body, want, r->body_len) == 0);
}

/* consumed: all of the text. */
#define ALL SIZE_MAX

/* A complete response, the same fed whole, byte by byte and 7 at a time:
 * status, body and consumed bytes (ALL: the whole text) are checked on
 * each; the last parse is left in *p for more checks. */
static void check_response(parsed *p, const char *text, bool head_only,
                           int status, const char *body, size_t consumed)
{
    static const size_t pieces[] = { 1, 7, 0 };
    if (consumed == ALL)
        consumed = strlen(text);
    for (size_t i = 0; i < 3; i++) {
        if (i > 0)
            sx__http_resp_fini(&p->r);
        parse(p, text, pieces[i], head_only);
        if (p->rc != 1)
            SX_FAILF("piece %zu: %d %s", pieces[i], p->rc,
                     p->what ? p->what : "");
        CHECK_EQ_INT(p->r.phase, SX__HTTP_DONE);
        CHECK_EQ_INT(p->r.status, status);
        check_body(&p->r, body);
        CHECK_EQ_U64(p->consumed, consumed);
    }
}

static void t_framing(void)
{
    parsed p;
    static const char length[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain"
                                 "\r\nContent-Length: 5\r\n\r\nhelloEXTRA";
    check_response(&p, length, false, 200, "hello", strlen(length) - 5);
    check_field(&p.r, "content-type", "text/plain");
    check_field(&p.r, "content-length", "5");
    sx__http_resp_fini(&p.r);

    static const char chunked[] =
        "HTTP/1.1 201 Created\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n"
        "5;name=value\r\nhello\r\nA \r\n, chunked!\r\n1\t\r\n.\r\n"
        "0\r\nX-Trailer: dropped\r\n\r\nNEXT";
    check_response(&p, chunked, false, 201, "hello, chunked!.",
                   strlen(chunked) - 4);
    check_field(&p.r, "x-trailer", NULL);
    sx__http_resp_fini(&p.r);

    /* Chunked wins over a Content-Length. */
    check_response(&p,
                   "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                   false, 200, "abc", ALL);
    sx__http_resp_fini(&p.r);

    /* Neither: the body runs to the end of the stream. */
    static const char eof[] = "HTTP/1.0 200 OK\r\nServer: x\r\n\r\nall of it";
    check_response(&p, eof, false, 200, "all of it", ALL);
    sx__http_resp_fini(&p.r);
    check_response(&p, "HTTP/1.1 200 OK\r\n\r\n", false, 200, "", ALL);
    sx__http_resp_fini(&p.r);
    /* Transfer-Encoding without chunked last: the end of the stream. */
    check_response(&p,
                   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"
                   "0\r\n\r\n",
                   false, 200, "0\r\n\r\n", ALL);
    sx__http_resp_fini(&p.r);
}

static void t_no_body(void)
{
    parsed p;
    /* HEAD: the head's Content-Length announces a body that is not sent. */
    check_response(&p, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", true,
                   200, "", ALL);
    sx__http_resp_fini(&p.r);
    check_response(&p, "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
                   false, 204, "", ALL);
    sx__http_resp_fini(&p.r);
    static const char not_modified[] = "HTTP/1.1 304 Not Modified\r\n\r\nxyz";
    check_response(&p, not_modified, false, 304, "", strlen(not_modified) - 3);
    sx__http_resp_fini(&p.r);
    check_response(&p, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false,
                   200, "", ALL);
    sx__http_resp_fini(&p.r);
    /* No reason phrase. */
    check_response(&p, "HTTP/1.0 500\r\n\r\n", true, 500, "", ALL);
    sx__http_resp_fini(&p.r);
}

static void t_interim(void)
{
    parsed p;
    static const char text[] =
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n"
        "X-Progress: 1\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    check_response(&p, text, false, 200, "ok", ALL);
    check_field(&p.r, "x-progress", NULL); /* the interim head's: dropped */
    check_field(&p.r, "content-length", "2");
    sx__http_resp_fini(&p.r);
    /* 101 is a final answer; what follows is not HTTP. */
    static const char up[] = "HTTP/1.1 101 Switching Protocols\r\n"
                             "Upgrade: websocket\r\n\r\n\x81\x05hello";
    check_response(&p, up, false, 101, "", strlen(up) - 7);
    check_field(&p.r, "upgrade", "websocket");
    sx__http_resp_fini(&p.r);
    /* Only interim responses, then the end. */
    parse(&p, "HTTP/1.1 100 Continue\r\n\r\n", 0, false);
    CHECK_EQ_INT(p.rc, 0);
    CHECK_EQ_INT(p.r.phase, SX__HTTP_HEAD);
    CHECK_EQ_INT(p.r.n_fields, 0);
    sx__http_resp_fini(&p.r);
}

static void t_fields(void)
{
    parsed p;
    check_response(&p,
                   "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nX-Empty:\r\n"
                   "set-cookie: b=2\r\nX-EMPTY: \t \r\nSET-COOKIE:\tc=3 \r\n"
                   "X-Inner:  a  b \r\nContent-Length: 0\r\n\r\n",
                   false, 200, "", ALL);
    const sx__http_resp *r = &p.r;
    CHECK_EQ_INT(r->n_fields, 7);
    /* Names are lower-cased in place; values trimmed of SP and HT. */
    check_part(r->head + r->fields[4].name, r->fields[4].name_len,
               "set-cookie");
    check_part(r->head + r->fields[5].value, r->fields[5].value_len, "a  b");
    check_field(r, "set-cookie", "a=1, b=2, c=3");
    check_field(r, "x-empty", ", "); /* two empty values: both counted */
    check_field(r, "x-inner", "a  b");
    bool dup[SX__HTTP_FIELDS_MAX];
    CHECK_EQ_INT(sx__http_resp_distinct(r, dup), 4);
    CHECK(!dup[0] && !dup[1] && dup[2] && dup[3] && dup[4] && !dup[5] &&
          !dup[6]);
    char *v;
    size_t vl;
    CHECK(sx__http_resp_join(r, 2, &v, &vl) == 0); /* from a later one on */
    CHECK_STR(v, "b=2, c=3");
    free(v);
    sx__http_resp_fini(&p.r);

    /* 200 fields are the most. */
    char *text = malloc(8192);
    CHECK(text != NULL);
    size_t at = (size_t)sprintf(text, "HTTP/1.1 200 OK\r\n");
    for (int i = 0; i < 199; i++)
        at += (size_t)sprintf(text + at, "X-F%d: %d\r\n", i % 7, i);
    sprintf(text + at, "Content-Length: 1\r\n\r\n!");
    check_response(&p, text, false, 200, "!", ALL);
    CHECK_EQ_INT(p.r.n_fields, 200);
    sx__http_resp_fini(&p.r);
    sprintf(text + at, "X-201: 1\r\nContent-Length: 1\r\n\r\n!");
    parse(&p, text, 0, false);
    CHECK_RC(p.rc, SX_ELIMIT);
    CHECK_STR(p.what, "more than 200 response header fields");
    sx__http_resp_fini(&p.r);
    free(text);
}

static void t_incomplete(void)
{
    static const struct {
        const char *text;
        sx__http_phase phase;
    } cases[] = {
        { "", SX__HTTP_HEAD },
        { "HTTP/1.1 200 OK\r\nContent-Len", SX__HTTP_HEAD },
        { "HTTP/1.1 200 OK\r\n\r", SX__HTTP_HEAD },
        { "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345",
          SX__HTTP_LENGTH },
        { "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
          SX__HTTP_CHUNK_SIZE },
        { "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc",
          SX__HTTP_CHUNK_DATA },
        { "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r",
          SX__HTTP_CHUNK_END },
        { "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n",
          SX__HTTP_TRAILER },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t piece = 0; piece < 3; piece++) {
            parsed p;
            parse(&p, cases[i].text, piece, false);
            CHECK_EQ_INT(p.rc, 0);
            CHECK_EQ_INT(p.r.phase, cases[i].phase);
            sx__http_resp_fini(&p.r);
        }
    }
    /* The body so far is kept; done is done. */
    parsed p;
    parse(&p, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345", 0, false);
    check_body(&p.r, "12345");
    CHECK_EQ_U64(p.r.remaining, 5);
    size_t used = 99;
    const char *what = NULL;
    CHECK_EQ_INT(sx__http_resp_feed(&p.r, (const uint8_t *)"67890X", 6, false,
                                    &used, &what),
                 1);
    CHECK_EQ_U64(used, 5);
    check_body(&p.r, "1234567890");
    CHECK_EQ_INT(
        sx__http_resp_feed(&p.r, (const uint8_t *)"X", 1, true, &used, &what),
        1);
    CHECK_EQ_U64(used, 0);
    /* No bytes at all: p is not read. */
    sx__http_resp_fini(&p.r);
    memset(&p.r, 0, sizeof p.r);
    CHECK_EQ_INT(sx__http_resp_feed(&p.r, NULL, 0, false, &used, &what), 0);
    CHECK_EQ_U64(used, 0);
    sx__http_resp_fini(&p.r);
}

/* A malformed or over-limit response: the code and message, fed whole, 1
 * byte and 100 bytes at a time. */
static void check_error_n(const char *text, size_t len, int rc,
                          const char *what)
{
    static const size_t pieces[] = { 0, 1, 100 };
    for (size_t i = 0; i < 3; i++) {
        parsed p;
        parse_n(&p, text, len, pieces[i], false);
        if (p.rc != rc || p.what == NULL || strcmp(p.what, what) != 0)
            SX_FAILF("piece %zu: %d %s, want %d %s", pieces[i], p.rc,
                     p.what ? p.what : "(none)", rc, what);
        sx__http_resp_fini(&p.r);
    }
}

static void check_error(const char *text, int rc, const char *what)
{
    check_error_n(text, strlen(text), rc, what);
}

static void t_malformed(void)
{
    static const char *const bad_status[] = {
        "HTTP/2 200 OK\r\n\r\n",    "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 099 Low\r\n\r\n", "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 200OK\r\n\r\n",   "HTTP/1.1  200 OK\r\n\r\n",
        "http/1.1 200 OK\r\n\r\n",  "SSH-2.0-OpenSSH_9.2\r\n\r\n",
        "HTTP/1.1 2x0 OK\r\n\r\n",  "\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad_status / sizeof bad_status[0]; i++)
        check_error(bad_status[i], SX_EPROTO, "malformed status line");
    check_error("HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\n\r\n", SX_EPROTO,
                "malformed response head (obsolete line folding)");
    check_error("HTTP/1.1 200 OK\r\n\tX: 1\r\n\r\n", SX_EPROTO,
                "malformed response head (obsolete line folding)");
    static const char nul[] = "HTTP/1.1 200 OK\r\nX-A: a\0b\r\n\r\n";
    check_error_n(nul, sizeof nul - 1, SX_EPROTO,
                  "malformed response head (a NUL byte)");
    check_error("HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", SX_EPROTO,
                "malformed header line");
    check_error("HTTP/1.1 200 OK\r\n: v\r\n\r\n", SX_EPROTO,
                "malformed header line");
    check_error("HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n", SX_EPROTO,
                "malformed header name");
    check_error("HTTP/1.1 200 OK\r\nX\x80: v\r\n\r\n", SX_EPROTO,
                "malformed header name");
    static const char *const bad_length[] = {
        "12a", "", " ", "-1", "+1", "1 2", "0x10", "99999999999999999999999",
    };
    for (size_t i = 0; i < sizeof bad_length / sizeof bad_length[0]; i++) {
        char text[128];
        snprintf(text, sizeof text,
                 "HTTP/1.1 200 OK\r\nContent-Length: %s\r\n\r\n",
                 bad_length[i]);
        check_error(text, SX_EPROTO, "malformed Content-Length");
    }
    check_error("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: "
                "2\r\n\r\nab",
                SX_EPROTO, "conflicting Content-Length fields");
    /* The same value twice is one length. */
    parsed p;
    parse(&p,
          "HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 02\r\n"
          "\r\nab",
          0, false);
    CHECK_EQ_INT(p.rc, 1);
    check_body(&p.r, "ab");
    sx__http_resp_fini(&p.r);

#define CHUNKED "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    static const char *const bad_size[] = {
        CHUNKED "zz\r\n",          CHUNKED "\r\n",   CHUNKED ";x\r\n",
        CHUNKED "5x\r\nhello\r\n", CHUNKED "-1\r\n", CHUNKED " 5\r\n",
        CHUNKED "0x5\r\n",
    };
    for (size_t i = 0; i < sizeof bad_size / sizeof bad_size[0]; i++)
        check_error(bad_size[i], SX_EPROTO, "malformed chunk size line");
    check_error(CHUNKED "3\r\nabcXY0\r\n\r\n", SX_EPROTO,
                "malformed chunk (no CRLF after its data)");
    check_error(CHUNKED "3\r\nabc\n\r0\r\n\r\n", SX_EPROTO,
                "malformed chunk (no CRLF after its data)");
}

static void t_limits(void)
{
    /* Announced bodies over 8 MiB. */
    check_error("HTTP/1.1 200 OK\r\nContent-Length: 8388609\r\n\r\n", SX_ELIMIT,
                "response body over 8 MiB");
    check_error(CHUNKED "800001\r\n", SX_ELIMIT, "response body over 8 MiB");
    check_error(CHUNKED "00000000000000000000000000800001\r\n", SX_ELIMIT,
                "response body over 8 MiB");
    check_error(CHUNKED "FFFFFFFFFFFFFFFFFFFFFFFF\r\n", SX_ELIMIT,
                "response body over 8 MiB");
    parsed p;
    parse(&p, "HTTP/1.1 200 OK\r\nContent-Length: 8388608\r\n\r\n", 0, false);
    CHECK_EQ_INT(p.rc, 0); /* 8 MiB exactly is allowed: waits for it */
    sx__http_resp_fini(&p.r);

    /* Received bodies: 8 MiB in chunks, then one byte more. */
    size_t mib8 = SX__HTTP_BODY_MAX;
    size_t cap = mib8 + 4096;
    char *big = malloc(cap);
    CHECK(big != NULL);
    size_t at = (size_t)sprintf(big, CHUNKED "400000\r\n");
    memset(big + at, 'a', (size_t)4 << 20);
    at += (size_t)4 << 20;
    at += (size_t)sprintf(big + at, "\r\n400000\r\n");
    memset(big + at, 'b', (size_t)4 << 20);
    at += (size_t)4 << 20;
    size_t full = at + (size_t)sprintf(big + at, "\r\n0\r\n\r\n");
    parse_n(&p, big, full, 0, false);
    CHECK_EQ_INT(p.rc, 1);
    CHECK_EQ_U64(p.r.body_len, mib8);
    sx__http_resp_fini(&p.r);
    sprintf(big + at, "\r\n1\r\nc\r\n0\r\n\r\n");
    check_error_n(big, strlen(big), SX_ELIMIT, "response body over 8 MiB");
    /* To the end of the stream: 8 MiB, then one byte more. */
    at = (size_t)sprintf(big, "HTTP/1.1 200 OK\r\n\r\n");
    memset(big + at, 'x', mib8 + 1);
    parse_n(&p, big, at + mib8, (size_t)1 << 20, false);
    CHECK_EQ_INT(p.rc, 1);
    CHECK_EQ_U64(p.r.body_len, mib8);
    sx__http_resp_fini(&p.r);
    parse_n(&p, big, at + mib8 + 1, (size_t)1 << 20, false);
    CHECK_RC(p.rc, SX_ELIMIT);
    CHECK_STR(p.what, "response body over 8 MiB");
    CHECK(p.r.body_len <= mib8);
    sx__http_resp_fini(&p.r);

    /* A head of 64 KiB is the most, its CRLFCRLF included. */
    size_t head_max = SX__HTTP_HEAD_MAX;
    at = (size_t)sprintf(big, "HTTP/1.1 200 OK\r\nX-Pad: ");
    size_t pad = head_max - at - 4;
    memset(big + at, 'p', pad);
    memcpy(big + at + pad, "\r\n\r\n", 4);
    parse_n(&p, big, head_max, 1000, true);
    CHECK_EQ_INT(p.rc, 1);
    CHECK_EQ_U64(p.r.head_len, head_max);
    sx__http_resp_fini(&p.r);
    memset(big + at, 'p', pad + 1);
    memcpy(big + at + pad + 1, "\r\n\r\n", 4);
    check_error_n(big, head_max + 1, SX_ELIMIT, "response head over 64 KiB");
    /* Unfinished: no end within 64 KiB is an error before the rest. */
    memset(big + at, 'p', head_max);
    check_error_n(big, head_max + 1, SX_ELIMIT, "response head over 64 KiB");
    free(big);
}

/* A chunk-size or trailer line of 1024 bytes (without its CRLF) is the
 * most, decided the same whether the line arrives at once or in
 * pieces. */
static void t_line_limit(void)
{
    char text[4096];
    for (size_t ext = 1021; ext <= 1023; ext++) {
        /* "1;" + ext bytes: a line of ext + 2 bytes */
        size_t at = (size_t)sprintf(text, CHUNKED "1;");
        memset(text + at, 'e', ext);
        strcpy(text + at + ext, "\r\nx\r\n0\r\n\r\n");
        if (ext + 2 <= SX__HTTP_LINE_MAX) {
            static const size_t pieces[] = { 0, 1, 100, 1025, 1026 };
            for (size_t i = 0; i < 5; i++) {
                parsed p;
                parse(&p, text, pieces[i], false);
                CHECK_EQ_INT(p.rc, 1);
                check_body(&p.r, "x");
                sx__http_resp_fini(&p.r);
            }
        } else {
            check_error(text, SX_EPROTO, "malformed chunk size line");
        }
        at = (size_t)sprintf(text, CHUNKED "0\r\nX: ");
        memset(text + at, 't', ext - 1);
        strcpy(text + at + ext - 1, "\r\n\r\n");
        if (ext + 2 <= SX__HTTP_LINE_MAX) {
            parsed p;
            parse(&p, text, 1, false);
            CHECK_EQ_INT(p.rc, 1);
            sx__http_resp_fini(&p.r);
            parse(&p, text, 0, false);
            CHECK_EQ_INT(p.rc, 1);
            sx__http_resp_fini(&p.r);
        } else {
            check_error(text, SX_EPROTO, "trailer line too long");
        }
    }
}

static const sx_test_case cases[] = {
    { "url_parts", t_url_parts },   { "url_errors", t_url_errors },
    { "request", t_request },       { "request_errors", t_request_errors },
    { "framing", t_framing },       { "no_body", t_no_body },
    { "interim", t_interim },       { "fields", t_fields },
    { "incomplete", t_incomplete }, { "malformed", t_malformed },
    { "limits", t_limits },         { "line_limit", t_line_limit },
};

SX_TEST_MAIN(cases)

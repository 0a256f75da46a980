/* engine/commands/http_parse.c — net.http's pure parts: the URL parser,
 * the request builder and the HTTP/1.1 response parser (contracts in
 * engine/commands/http_parse.h). No libuv, no engine: bytes in, a struct or
 * bytes out.
 *
 * The response parser is a state machine over the unread bytes of a
 * stream. Each step either consumes what it has parsed and goes on, waits
 * for more bytes, or fails; a step never decides on bytes it has not seen
 * yet, so the outcome (the result, or the error and its message) does not
 * depend on how the stream was split into reads (tests/fuzz/fuzz_http.c
 * checks this).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/commands/http_parse.h"
#include "process/fault.h"
#include "process/hostport.h"

static bool is_tchar(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') ||
           (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

bool sx__http_token(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!is_tchar((unsigned char)s[i]))
            return false;
    return len > 0;
}

/* A byte that may not appear in a URL's host or path: controls, space and
 * DEL. */
static bool is_ctl_or_space(char ch)
{
    return (unsigned char)ch <= 0x20 || (unsigned char)ch == 0x7f;
}

/* ---- URLs ---- */

const char *sx__http_url_parse(const char *s, size_t len, sx__http_url *out)
{
    if (len >= 8 && strncasecmp(s, "https://", 8) == 0)
        return "net.http: only http:// URLs are supported (no TLS)";
    if (len < 7 || strncasecmp(s, "http://", 7) != 0)
        return "net.http: url must start with http://";
    s += 7;
    len -= 7;
    size_t a = 0; /* the authority is s[0, a) */
    while (a < len && s[a] != '/' && s[a] != '?' && s[a] != '#')
        a++;
    if (memchr(s, '@', a) != NULL)
        return "net.http: user info in the url is not supported";
    /* host[:port] by the rules every part of stepx shares
     * (process/hostport.h). Its host characters leave out spaces and
     * control bytes, so the host is safe in the default Host header (an
     * IPv6 zone, "[::1%...]", is not checked by libuv). */
    sx__hostport target;
    const char *why =
        sx__hostport_parse(s, a, SX__HOSTPORT_PORT_OPTIONAL, 80, &target);
    if (why != NULL) {
        snprintf(out->why, sizeof out->why, "net.http: bad url host:port: %s",
                 why);
        return out->why;
    }
    /* The host as the URL spells it (the parser copies it verbatim, less
     * an IPv6 literal's brackets), so that out points into s only. */
    out->host = s + (s[0] == '[');
    out->host_len = strlen(target.host);
    out->port = target.port;
    size_t end = a;
    while (end < len && s[end] != '#')
        end++;
    out->path = s + a;
    out->path_len = end - a;
    for (size_t i = 0; i < out->path_len; i++)
        if (is_ctl_or_space(out->path[i]))
            return "net.http: the url path must not hold spaces or control "
                   "characters (percent-encode them)";
    return NULL;
}

/* ---- Requests ---- */

/* A growing byte string; oom is sticky. */
typedef struct {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} bytes;

static void bytes_add(bytes *b, const void *p, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap > 0 ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (q == NULL) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void bytes_str(bytes *b, const char *s)
{
    bytes_add(b, s, strlen(s));
}

static bool str_ieq(const char *s, size_t len, const char *lit)
{
    return strlen(lit) == len && strncasecmp(s, lit, len) == 0;
}

/* Appends the user's header fields (a map of str -> str or int) to req.
 * Sets *has_host when one is Host. Returns NULL or the SX_EINVAL
 * message. */
static const char *add_headers(sx_unpack *u, bytes *req, bool *has_host)
{
    uint32_t n;
    if (sx_unpack_map(u, &n) != 0)
        return "net.http: headers must be a map of name -> value";
    for (uint32_t i = 0; i < n; i++) {
        const char *k, *v;
        size_t kl, vl;
        char num[24];
        int64_t iv;
        if (sx_unpack_str(u, &k, &kl) != 0)
            return "net.http: header names must be strings";
        if (sx_unpack_str(u, &v, &vl) != 0) {
            if (sx_unpack_int(u, &iv) != 0)
                return "net.http: header values must be strings or integers";
            vl = (size_t)snprintf(num, sizeof num, "%lld", (long long)iv);
            v = num;
        }
        if (kl == 0)
            return "net.http: empty header name";
        if (!sx__http_token(k, kl))
            return "net.http: malformed header name";
        for (size_t j = 0; j < vl; j++)
            if (v[j] == '\r' || v[j] == '\n' || v[j] == 0)
                return "net.http: header values must not hold CR, LF or NUL";
        if (str_ieq(k, kl, "connection") || str_ieq(k, kl, "content-length") ||
            str_ieq(k, kl, "transfer-encoding"))
            return "net.http: Connection, Content-Length and "
                   "Transfer-Encoding are set by the client";
        if (str_ieq(k, kl, "host"))
            *has_host = true;
        bytes_add(req, k, kl);
        bytes_str(req, ": ");
        bytes_add(req, v, vl);
        bytes_str(req, "\r\n");
    }
    return NULL;
}

int sx__http_request_build(const sx__http_request *rq, uint8_t **out,
                           size_t *out_len, const char **msg)
{
    const sx__http_url *url = rq->url;
    bytes req = { NULL, 0, 0, false };
    bytes_add(&req, rq->method, rq->method_len);
    bytes_str(&req, " ");
    if (url->path_len == 0 || url->path[0] != '/')
        bytes_str(&req, "/");
    bytes_add(&req, url->path, url->path_len);
    bytes_str(&req, " HTTP/1.1\r\nConnection: close\r\n");
    bool has_host = false;
    if (rq->headers.len > 0) {
        sx_unpack hu;
        sx_unpack_init(&hu, rq->headers);
        if (sx_unpack_nil(&hu) != 0 &&
            (*msg = add_headers(&hu, &req, &has_host)) != NULL) {
            free(req.p);
            return SX_EINVAL;
        }
    }
    char line[48]; /* "Content-Length: " and a size_t, or ":port" */
    if (!has_host) {
        /* "host", "[v6]", then ":port" unless it is 80. */
        bool v6 = memchr(url->host, ':', url->host_len) != NULL;
        bytes_str(&req, v6 ? "Host: [" : "Host: ");
        bytes_add(&req, url->host, url->host_len);
        if (v6)
            bytes_str(&req, "]");
        if (url->port != 80) {
            snprintf(line, sizeof line, ":%u", (unsigned)url->port);
            bytes_str(&req, line);
        }
        bytes_str(&req, "\r\n");
    }
    bool sends_body = str_ieq(rq->method, rq->method_len, "POST") ||
                      str_ieq(rq->method, rq->method_len, "PUT") ||
                      str_ieq(rq->method, rq->method_len, "PATCH");
    if (rq->has_body || sends_body) {
        snprintf(line, sizeof line, "Content-Length: %zu\r\n", rq->body_len);
        bytes_str(&req, line);
    }
    bytes_str(&req, "\r\n");
    bytes_add(&req, rq->body, rq->body_len);
    if (req.oom || req.len > UINT32_MAX) {
        free(req.p);
        *msg = "net.http: the request is over 4 GiB";
        return req.oom ? SX_ENOMEM : SX_ELIMIT;
    }
    *out = req.p;
    *out_len = req.len;
    return 0;
}

/* ---- Responses ---- */

/* Offset of "\r\n" (or "\r\n\r\n" when two) in p[from, len), or -1. */
static long find_crlf(const uint8_t *p, size_t len, size_t from, bool two)
{
    size_t need = two ? 4 : 2;
    for (size_t i = from; i + need <= len; i++) {
        const uint8_t *q = memchr(p + i, '\r', len - i);
        if (q == NULL)
            return -1;
        i = (size_t)(q - p);
        if (i + need > len)
            return -1;
        if (q[1] == '\n' && (!two || (q[2] == '\r' && q[3] == '\n')))
            return (long)i;
    }
    return -1;
}

/* Is a line that starts at p[0] too long for SX__HTTP_LINE_MAX, given the
 * len bytes there and e, the offset of its CRLF (-1: not there yet)? An
 * unfinished line is too long once it cannot end within the limit
 * whatever comes next: more than SX__HTTP_LINE_MAX + 1 bytes, the last of
 * which may be the CR. Deciding the same for a finished line keeps the
 * outcome independent of how the bytes were split into reads. */
static bool line_too_long(size_t len, long e)
{
    return e >= 0 ? (size_t)e > SX__HTTP_LINE_MAX
                  : len > (size_t)SX__HTTP_LINE_MAX + 1;
}

static bool body_add(sx__http_resp *r, const uint8_t *p, size_t k)
{
    if (r->body_len + k > r->body_cap) {
        size_t cap = r->body_cap > 0 ? r->body_cap : 4096;
        while (cap < r->body_len + k)
            cap *= 2;
        uint8_t *b =
            SX__FAULT(SX__FAULT_HTTP_BODY) ? NULL : realloc(r->body, cap);
        if (b == NULL)
            return false;
        r->body = b;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, p, k);
    r->body_len += k;
    return true;
}

/* Does the value list `v` name `token` as its last coding, in any case?
 * ("gzip, chunked" -> chunked.) */
static bool last_token_is(const char *v, size_t len, const char *token)
{
    while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    size_t start = len;
    while (start > 0 && v[start - 1] != ',' && v[start - 1] != ' ' &&
           v[start - 1] != '\t')
        start--;
    size_t tl = strlen(token);
    return len - start == tl && strncasecmp(v + start, token, tl) == 0;
}

/* What the head's fields say about the body. */
typedef struct {
    bool chunked, has_length;
    uint64_t length;
} framing;

/* Parses the field line h[pos, end) (its name lower-cased in place) into
 * r->fields and fr. Returns 0, or an error with *what set. */
static int parse_field(sx__http_resp *r, size_t pos, size_t end, framing *fr,
                       const char **what)
{
    char *h = r->head;
    if (h[pos] == ' ' || h[pos] == '\t') {
        *what = "malformed response head (obsolete line folding)";
        return SX_EPROTO;
    }
    char *colon = memchr(h + pos, ':', end - pos);
    if (colon == NULL || colon == h + pos) {
        *what = "malformed header line";
        return SX_EPROTO;
    }
    size_t name_len = (size_t)(colon - (h + pos));
    for (size_t i = 0; i < name_len; i++) {
        if (!is_tchar((unsigned char)h[pos + i])) {
            *what = "malformed header name";
            return SX_EPROTO;
        }
        if (h[pos + i] >= 'A' && h[pos + i] <= 'Z')
            h[pos + i] = (char)(h[pos + i] - 'A' + 'a');
    }
    size_t v = pos + name_len + 1, ve = end;
    while (v < ve && (h[v] == ' ' || h[v] == '\t'))
        v++;
    while (ve > v && (h[ve - 1] == ' ' || h[ve - 1] == '\t'))
        ve--;
    if (r->n_fields == SX__HTTP_FIELDS_MAX) {
        *what = "more than 200 response header fields";
        return SX_ELIMIT;
    }
    /* Offsets fit: the head is at most SX__HTTP_HEAD_MAX bytes. */
    r->fields[r->n_fields++] =
        (sx__http_field){ (uint32_t)pos, (uint32_t)name_len, (uint32_t)v,
                          (uint32_t)(ve - v) };
    if (name_len == 17 && memcmp(h + pos, "transfer-encoding", 17) == 0) {
        fr->chunked = last_token_is(h + v, ve - v, "chunked");
        return 0;
    }
    if (name_len != 14 || memcmp(h + pos, "content-length", 14) != 0)
        return 0;
    uint64_t x = 0;
    for (size_t i = v; i < ve; i++) {
        if (h[i] < '0' || h[i] > '9' || x > (UINT64_MAX - 9) / 10) {
            *what = "malformed Content-Length";
            return SX_EPROTO;
        }
        x = x * 10 + (uint64_t)(h[i] - '0');
    }
    if (ve == v) {
        *what = "malformed Content-Length";
        return SX_EPROTO;
    }
    if (fr->has_length && x != fr->length) {
        *what = "conflicting Content-Length fields";
        return SX_EPROTO;
    }
    fr->has_length = true;
    fr->length = x;
    return 0;
}

/* Parses the response head in r->head: status line and fields. Sets the
 * body's framing (the next phase). Returns 0, or an error with *what
 * set. */
static int parse_head(sx__http_resp *r, const char **what)
{
    char *h = r->head;
    size_t len = r->head_len; /* up to and including the final CRLFCRLF */
    if (memchr(h, 0, len) != NULL) {
        *what = "malformed response head (a NUL byte)";
        return SX_EPROTO;
    }
    long eol = find_crlf((const uint8_t *)h, len, 0, false);
    /* "HTTP/1.x NNN" then SP or the end of the line */
    if (eol < 12 || strncmp(h, "HTTP/1.", 7) != 0 || h[8] != ' ' ||
        h[9] < '1' || h[9] > '9' || h[10] < '0' || h[10] > '9' || h[11] < '0' ||
        h[11] > '9' || (eol > 12 && h[12] != ' ')) {
        *what = "malformed status line";
        return SX_EPROTO;
    }
    r->status = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');
    r->n_fields = 0;
    framing fr = { false, false, 0 };
    size_t pos = (size_t)eol + 2;
    for (;;) {
        long e = find_crlf((const uint8_t *)h, len, pos, false);
        if (e < 0 || (size_t)e == pos)
            break; /* the empty line */
        int rc = parse_field(r, pos, (size_t)e, &fr, what);
        if (rc != 0)
            return rc;
        pos = (size_t)e + 2;
    }
    int st = r->status;
    if (r->head_only || st == 204 || st == 304 || (st >= 100 && st < 200)) {
        r->phase = SX__HTTP_DONE;
    } else if (fr.chunked) {
        r->phase = SX__HTTP_CHUNK_SIZE;
    } else if (fr.has_length) {
        if (fr.length > SX__HTTP_BODY_MAX) {
            *what = "response body over 8 MiB";
            return SX_ELIMIT;
        }
        r->remaining = (size_t)fr.length;
        r->phase = fr.length > 0 ? SX__HTTP_LENGTH : SX__HTTP_DONE;
    } else {
        r->phase = SX__HTTP_TO_EOF;
    }
    return 0;
}

/* The parser's steps over the unread bytes p[0, len). Each returns 1 to
 * go on, 0 to wait for more bytes, or an error (*what set); each adds what
 * it has parsed to *used. */

static int step_head(sx__http_resp *r, const uint8_t *p, size_t len,
                     size_t *used, const char **what)
{
    long e = find_crlf(p, len, r->scanned, true);
    if (e < 0) {
        r->scanned = len > 3 ? len - 3 : 0;
        if (len > SX__HTTP_HEAD_MAX) {
            *what = "response head over 64 KiB";
            return SX_ELIMIT;
        }
        return 0;
    }
    size_t hl = (size_t)e + 4;
    if (hl > SX__HTTP_HEAD_MAX) {
        *what = "response head over 64 KiB";
        return SX_ELIMIT;
    }
    free(r->head);
    r->head = SX__FAULT(SX__FAULT_HTTP_BODY) ? NULL : malloc(hl);
    if (r->head == NULL) {
        r->head_len = 0;
        r->n_fields = 0;
        *what = "out of memory";
        return SX_ENOMEM;
    }
    memcpy(r->head, p, hl);
    r->head_len = hl;
    r->scanned = 0;
    *used += hl;
    int rc = parse_head(r, what);
    if (rc != 0)
        return rc;
    if (r->status < 200 && r->status != 101) {
        r->phase = SX__HTTP_HEAD; /* 100 Continue and the like: skip it */
        r->n_fields = 0;
    }
    return 1;
}

/* Body bytes: k of them go to the body (within its cap). */
static int step_body(sx__http_resp *r, const uint8_t *p, size_t k, size_t *used,
                     const char **what)
{
    if (r->body_len + k > SX__HTTP_BODY_MAX) {
        *what = "response body over 8 MiB";
        return SX_ELIMIT;
    }
    if (!body_add(r, p, k)) {
        *what = "out of memory";
        return SX_ENOMEM;
    }
    *used += k;
    return 1;
}

static int step_chunk_size(sx__http_resp *r, const uint8_t *p, size_t len,
                           size_t *used, const char **what)
{
    long e = find_crlf(p, len, 0, false);
    if (line_too_long(len, e)) {
        *what = "malformed chunk size line";
        return SX_EPROTO;
    }
    if (e < 0)
        return 0;
    uint64_t size = 0;
    size_t i = 0;
    for (; i < (size_t)e; i++) {
        int ch = p[i], v;
        if (ch >= '0' && ch <= '9')
            v = ch - '0';
        else if (ch >= 'a' && ch <= 'f')
            v = ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F')
            v = ch - 'A' + 10;
        else
            break;
        size = size * 16 + (uint64_t)v; /* no overflow: checked below */
        if (size > SX__HTTP_BODY_MAX) {
            *what = "response body over 8 MiB";
            return SX_ELIMIT;
        }
    }
    /* Digits, then the end of the line or extensions (dropped). */
    if (i == 0 ||
        (i < (size_t)e && p[i] != ';' && p[i] != ' ' && p[i] != '\t')) {
        *what = "malformed chunk size line";
        return SX_EPROTO;
    }
    if (r->body_len + size > SX__HTTP_BODY_MAX) {
        *what = "response body over 8 MiB";
        return SX_ELIMIT;
    }
    *used += (size_t)e + 2;
    r->remaining = (size_t)size;
    r->phase = size == 0 ? SX__HTTP_TRAILER : SX__HTTP_CHUNK_DATA;
    return 1;
}

static int step_trailer(sx__http_resp *r, const uint8_t *p, size_t len,
                        size_t *used, const char **what)
{
    long e = find_crlf(p, len, 0, false);
    if (line_too_long(len, e)) {
        *what = "trailer line too long";
        return SX_EPROTO;
    }
    if (e < 0)
        return 0;
    *used += (size_t)e + 2; /* trailers are dropped */
    if (e == 0)
        r->phase = SX__HTTP_DONE;
    return 1;
}

/* One step over p[0, len), the bytes not yet consumed. */
static int step(sx__http_resp *r, const uint8_t *p, size_t len, bool eof,
                size_t *used, const char **what)
{
    size_t k;
    int rc;
    switch (r->phase) {
    case SX__HTTP_HEAD:
        return step_head(r, p, len, used, what);
    case SX__HTTP_LENGTH:
    case SX__HTTP_CHUNK_DATA:
        k = len < r->remaining ? len : r->remaining;
        if (k == 0)
            return 0;
        if ((rc = step_body(r, p, k, used, what)) != 1)
            return rc;
        r->remaining -= k;
        if (r->remaining == 0)
            r->phase = r->phase == SX__HTTP_LENGTH ? SX__HTTP_DONE
                                                   : SX__HTTP_CHUNK_END;
        return 1;
    case SX__HTTP_CHUNK_SIZE:
        return step_chunk_size(r, p, len, used, what);
    case SX__HTTP_CHUNK_END:
        if (len < 2)
            return 0;
        if (p[0] != '\r' || p[1] != '\n') {
            *what = "malformed chunk (no CRLF after its data)";
            return SX_EPROTO;
        }
        *used += 2;
        r->phase = SX__HTTP_CHUNK_SIZE;
        return 1;
    case SX__HTTP_TRAILER:
        return step_trailer(r, p, len, used, what);
    case SX__HTTP_TO_EOF:
        if (len > 0)
            return step_body(r, p, len, used, what);
        if (!eof)
            return 0;
        r->phase = SX__HTTP_DONE;
        return 1;
    case SX__HTTP_DONE:
        return 0;
    }
    return 0;
}

int sx__http_resp_feed(sx__http_resp *r, const uint8_t *p, size_t len, bool eof,
                       size_t *used, const char **what)
{
    int rc;
    *used = 0;
    if (len == 0)
        p = (const uint8_t *)""; /* memchr and p + 0 need an object */
    if (r->phase == SX__HTTP_DONE)
        return 1;
    while ((rc = step(r, p + *used, len - *used, eof, used, what)) == 1 &&
           r->phase != SX__HTTP_DONE) {
    }
    if (rc < 0)
        return rc;
    return r->phase == SX__HTTP_DONE ? 1 : 0;
}

void sx__http_resp_fini(sx__http_resp *r)
{
    if (r == NULL)
        return;
    free(r->head);
    free(r->body);
    r->head = NULL;
    r->body = NULL;
}

static bool same_name(const sx__http_resp *r, const sx__http_field *a,
                      const sx__http_field *b)
{
    return a->name_len == b->name_len &&
           memcmp(r->head + a->name, r->head + b->name, a->name_len) == 0;
}

unsigned sx__http_resp_distinct(const sx__http_resp *r,
                                bool dup[SX__HTTP_FIELDS_MAX])
{
    unsigned distinct = 0;
    for (unsigned i = 0; i < r->n_fields; i++) {
        dup[i] = false;
        for (unsigned j = 0; j < i && !dup[i]; j++)
            dup[i] = same_name(r, &r->fields[j], &r->fields[i]);
        distinct += dup[i] ? 0 : 1;
    }
    return distinct;
}

int sx__http_resp_join(const sx__http_resp *r, unsigned i, char **value,
                       size_t *len)
{
    const char *h = r->head;
    const sx__http_field *f = &r->fields[i];
    size_t total = f->value_len;
    for (unsigned j = i + 1; j < r->n_fields; j++)
        if (same_name(r, &r->fields[j], f))
            total += r->fields[j].value_len + 2;
    char *v = SX__FAULT(SX__FAULT_HTTP_BODY) ? NULL : malloc(total + 1);
    if (v == NULL)
        return SX_ENOMEM;
    size_t at = 0;
    for (unsigned j = i; j < r->n_fields; j++) {
        const sx__http_field *g = &r->fields[j];
        if (!same_name(r, g, f))
            continue;
        /* ", " goes before every value but the first (an empty first
         * value included, so the count of values is kept). */
        if (j > i) {
            memcpy(v + at, ", ", 2);
            at += 2;
        }
        memcpy(v + at, h + g->value, g->value_len);
        at += g->value_len;
    }
    v[at] = 0;
    *value = v;
    *len = at;
    return 0;
}

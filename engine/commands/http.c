/* engine/commands/http.c — net.http: one HTTP/1.1 request on a connection
 * of its own (engine/commands/net.c makes it), closed afterwards. Arguments,
 * result, limits and errors are in docs/COMMANDS.md ("net.http").
 *
 * The handler parses the arguments and builds the whole request (head and
 * body, one allocation) on the worker, so that bad input is SX_EINVAL at
 * once and the loop only writes bytes. On the loop the op connects (as
 * net.connect does), writes the request, and is its connection's reader:
 * sx__net_http_feed runs the response parser over the connection's buffer
 * whenever bytes, the end of the stream or an error arrive, consuming what
 * it has parsed. The op ends (sx__net_end closes the connection) when the
 * response is complete, malformed, over a limit or cut short, when
 * timeout_ms passes (a deadline on the loop's timer heap), or when it is
 * cancelled.
 *
 * Limits bound memory whatever the server sends: the head is at most 64
 * KiB (kept, with at most 200 fields), the body at most 8 MiB, a chunk
 * size or trailer line at most 1 KiB.
 *
 * Threads: sx__net_cmd_http [worker]; everything else [loop]. No atomics.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/commands/net.h"
#include "process/fault.h"

#define HTTP_BODY_MAX ((size_t)8 << 20) /* response body cap: SX_ELIMIT */
#define HTTP_HEAD_MAX ((size_t)64 << 10)
#define HTTP_LINE_MAX 1024 /* a chunk-size or trailer line */
#define HTTP_HEADERS_MAX 200
#define HTTP_TIMEOUT_MAX ((int64_t)1 << 40)

/* HTTP response parsing phases. */
typedef enum {
    H_HEAD = 0,
    H_LENGTH,     /* Content-Length body */
    H_CHUNK_SIZE, /* chunked: the size line */
    H_CHUNK_DATA,
    H_CHUNK_END, /* the CRLF after a chunk's data */
    H_TRAILER,   /* after the last chunk, up to an empty line */
    H_TO_EOF,    /* neither: the body ends with the connection */
    H_DONE
} http_phase;

typedef struct {
    uint32_t name, name_len, value, value_len; /* offsets into head */
} http_field;

/* An HTTP op's request and response state; owned by the op (op_fini in
 * net.c frees it with sx__net_http_free). */
struct sx__net_http {
    uint64_t timeout_ms; /* 0: none (the yield's timeout still applies) */
    uint64_t due_ns;     /* timeout_ms from the dispatch of the yield */
    sx__iotimer timer;   /* on the loop's timer heap while armed */
    sx__net_op *owner;   /* the op this belongs to (for the timer) */
    bool head_only;      /* HEAD: a response without a body */
    int write_err;       /* the request's write failed (-errno); 0 = fine */
    http_phase phase;
    size_t scanned;   /* bytes of the buffer already searched for an end */
    size_t remaining; /* body bytes left of the Content-Length or chunk */
    int status;
    char *head; /* the final response head (lower-cased names), owned */
    size_t head_len;
    http_field fields[HTTP_HEADERS_MAX];
    unsigned n_fields;
    uint8_t *body; /* owned */
    size_t body_len, body_cap;
};

static const sx_payload nil = { NULL, 0 };

void sx__net_http_free(sx__net_http *hs)
{
    if (hs == NULL)
        return;
    free(hs->head);
    free(hs->body);
    free(hs);
}

void sx__net_http_stop(sx__net_op *c)
{
    if (c->http != NULL)
        sx__io_timer_del(&c->op, &c->http->timer);
}

/* ---- HTTP: sending and the response ---- */

static void http_timeout(sx__iotimer *t)
{
    sx__net_http *hs =
        (sx__net_http *)((char *)t - offsetof(sx__net_http, timer));
    sx__net_op *c = hs->owner;
    char msg[NET_MSG_MAX];
    snprintf(msg, sizeof msg,
             "net.http: %s: no complete response within %llu ms", c->where,
             (unsigned long long)c->http->timeout_ms);
    sx__net_end(c, nil, SX_ETIMEDOUT, msg);
}

void sx__net_http_start(sx__net_op *c)
{
    sx__net_http *hs = c->http;
    hs->owner = c;
    if (hs->timeout_ms > 0) {
        hs->timer.fire = http_timeout;
        if (sx__io_timer_set(&c->op, &hs->timer, hs->due_ns) != 0) {
            sx__net_end(c, nil, SX_ENOMEM, NULL);
            return;
        }
    }
    sx__net_connect_start(c);
}

static void http_write_done(uv_write_t *req, int status)
{
    sx__net_op *c = req->data;
    c->pending--;
    if (c->finished) {
        sx__net_try_release(c);
        return;
    }
    if (status != 0 && status != UV_ECANCELED) {
        /* A server may answer and close before reading the whole
         * request: let the response decide, and report this only if
         * none comes. (c is still its connection's reader; the feed may
         * end and free c.) */
        c->http->write_err = status;
        sx__net_http_feed(c);
    }
}

void sx__net_http_send(sx__net_op *c)
{
    sx__net_conn *n = c->conn;
    uv_buf_t b = uv_buf_init((char *)c->data, (unsigned)c->data_len);
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, (uv_stream_t *)&n->tcp, &b, 1, http_write_done);
    if (rc != 0) {
        sx__net_fail_uv(c, "net.http", c->where, rc);
        return;
    }
    c->pending++;
    n->reader = c;
    sx__net_conn_update_reading(n);
}

static void http_fail(sx__net_op *c, int err, const char *what)
{
    char msg[NET_MSG_MAX];
    snprintf(msg, sizeof msg, "net.http: %s: %s", c->where, what);
    sx__net_end(c, nil, err, msg);
}

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

static bool body_add(sx__net_http *hs, const uint8_t *p, size_t k)
{
    if (hs->body_len + k > hs->body_cap) {
        size_t cap = hs->body_cap > 0 ? hs->body_cap : 4096;
        while (cap < hs->body_len + k)
            cap *= 2;
        uint8_t *b =
            SX__FAULT(SX__FAULT_HTTP_BODY) ? NULL : realloc(hs->body, cap);
        if (b == NULL)
            return false;
        hs->body = b;
        hs->body_cap = cap;
    }
    memcpy(hs->body + hs->body_len, p, k);
    hs->body_len += k;
    return true;
}

static bool is_tchar(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') ||
           (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* Does the lower-cased value list `v` name `token` as its last coding?
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
} http_framing;

/* Parses the field line h[pos, end) (names lower-cased in place) into
 * hs->fields and fr. Returns 0, or an error with *what set. */
static int parse_field(sx__net_http *hs, size_t pos, size_t end,
                       http_framing *fr, const char **what)
{
    char *h = hs->head;
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
    if (hs->n_fields == HTTP_HEADERS_MAX) {
        *what = "more than 200 response header fields";
        return SX_ELIMIT;
    }
    /* Offsets fit: the head is at most HTTP_HEAD_MAX bytes. */
    hs->fields[hs->n_fields++] =
        (http_field){ (uint32_t)pos, (uint32_t)name_len, (uint32_t)v,
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

/* Parses the response head in hs->head: status line and fields. Sets the
 * body framing. Returns 0, or an error with *what set. */
static int http_parse_head(sx__net_http *hs, const char **what)
{
    char *h = hs->head;
    size_t len = hs->head_len; /* up to and including the final CRLFCRLF */
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
    hs->status = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');
    hs->n_fields = 0;
    http_framing fr = { false, false, 0 };
    size_t pos = (size_t)eol + 2;
    for (;;) {
        long e = find_crlf((const uint8_t *)h, len, pos, false);
        if (e < 0 || (size_t)e == pos)
            break; /* the empty line */
        int rc = parse_field(hs, pos, (size_t)e, &fr, what);
        if (rc != 0)
            return rc;
        pos = (size_t)e + 2;
    }
    int st = hs->status;
    if (hs->head_only || st == 204 || st == 304 || (st >= 100 && st < 200)) {
        hs->phase = H_DONE;
    } else if (fr.chunked) {
        hs->phase = H_CHUNK_SIZE;
    } else if (fr.has_length) {
        if (fr.length > HTTP_BODY_MAX) {
            *what = "response body over 8 MiB";
            return SX_ELIMIT;
        }
        hs->remaining = (size_t)fr.length;
        hs->phase = fr.length > 0 ? H_LENGTH : H_DONE;
    } else {
        hs->phase = H_TO_EOF;
    }
    return 0;
}

/* The parser's steps over the connection's unread bytes p[0, len). Each
 * returns 1 to go on, 0 to wait for more bytes, or an error (*what set);
 * what they parse they consume. */

static int step_head(sx__net_http *hs, sx__net_conn *n, const uint8_t *p,
                     size_t len, const char **what)
{
    long e = find_crlf(p, len, hs->scanned, true);
    if (e < 0) {
        hs->scanned = len > 3 ? len - 3 : 0;
        if (len > HTTP_HEAD_MAX) {
            *what = "response head over 64 KiB";
            return SX_ELIMIT;
        }
        return 0;
    }
    size_t hl = (size_t)e + 4;
    if (hl > HTTP_HEAD_MAX) {
        *what = "response head over 64 KiB";
        return SX_ELIMIT;
    }
    free(hs->head);
    hs->head = SX__FAULT(SX__FAULT_HTTP_BODY) ? NULL : malloc(hl);
    if (hs->head == NULL) {
        *what = "out of memory";
        return SX_ENOMEM;
    }
    memcpy(hs->head, p, hl);
    hs->head_len = hl;
    hs->scanned = 0;
    sx__net_conn_consume(n, hl);
    int rc = http_parse_head(hs, what);
    if (rc != 0)
        return rc;
    if (hs->status < 200 && hs->status != 101) {
        hs->phase = H_HEAD; /* 100 Continue and the like: skip it */
        hs->n_fields = 0;
    }
    return 1;
}

/* Body bytes: k of them go to the body (within its cap). */
static int step_body(sx__net_http *hs, sx__net_conn *n, const uint8_t *p,
                     size_t k, const char **what)
{
    if (hs->body_len + k > HTTP_BODY_MAX) {
        *what = "response body over 8 MiB";
        return SX_ELIMIT;
    }
    if (!body_add(hs, p, k)) {
        *what = "out of memory";
        return SX_ENOMEM;
    }
    sx__net_conn_consume(n, k);
    return 1;
}

static int step_chunk_size(sx__net_http *hs, sx__net_conn *n, const uint8_t *p,
                           size_t len, const char **what)
{
    long e = find_crlf(p, len, 0, false);
    if (e < 0) {
        if (len > HTTP_LINE_MAX) {
            *what = "malformed chunk size line";
            return SX_EPROTO;
        }
        return 0;
    }
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
        if (size > HTTP_BODY_MAX) {
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
    if (hs->body_len + size > HTTP_BODY_MAX) {
        *what = "response body over 8 MiB";
        return SX_ELIMIT;
    }
    sx__net_conn_consume(n, (size_t)e + 2);
    hs->remaining = (size_t)size;
    hs->phase = size == 0 ? H_TRAILER : H_CHUNK_DATA;
    return 1;
}

static int step_trailer(sx__net_http *hs, sx__net_conn *n, const uint8_t *p,
                        size_t len, const char **what)
{
    long e = find_crlf(p, len, 0, false);
    if (e < 0) {
        if (len > HTTP_LINE_MAX) {
            *what = "trailer line too long";
            return SX_EPROTO;
        }
        return 0;
    }
    sx__net_conn_consume(n, (size_t)e + 2); /* trailers are dropped */
    if (e == 0)
        hs->phase = H_DONE;
    return 1;
}

/* One step of the response parser over the connection's buffer. */
static int http_step(sx__net_op *c, const char **what)
{
    sx__net_http *hs = c->http;
    sx__net_conn *n = c->conn;
    const uint8_t *p = sx__net_conn_data(n);
    size_t len = n->len, k;
    int rc;
    switch (hs->phase) {
    case H_HEAD:
        return step_head(hs, n, p, len, what);
    case H_LENGTH:
    case H_CHUNK_DATA:
        k = len < hs->remaining ? len : hs->remaining;
        if (k == 0)
            return 0;
        if ((rc = step_body(hs, n, p, k, what)) != 1)
            return rc;
        hs->remaining -= k;
        if (hs->remaining == 0)
            hs->phase = hs->phase == H_LENGTH ? H_DONE : H_CHUNK_END;
        return 1;
    case H_CHUNK_SIZE:
        return step_chunk_size(hs, n, p, len, what);
    case H_CHUNK_END:
        if (len < 2)
            return 0;
        if (p[0] != '\r' || p[1] != '\n') {
            *what = "malformed chunk (no CRLF after its data)";
            return SX_EPROTO;
        }
        sx__net_conn_consume(n, 2);
        hs->phase = H_CHUNK_SIZE;
        return 1;
    case H_TRAILER:
        return step_trailer(hs, n, p, len, what);
    case H_TO_EOF:
        if (len > 0)
            return step_body(hs, n, p, len, what);
        if (!n->eof)
            return 0;
        hs->phase = H_DONE;
        return 1;
    case H_DONE:
        return 0;
    }
    return 0;
}

/* {"status": int, "headers": {name: value}, "body": bin}; repeated names
 * are joined with ", ". */
static int http_pack(sx__net_http *hs, sx_pack *pk)
{
    const char *h = hs->head;
    bool dup[HTTP_HEADERS_MAX];
    uint32_t distinct = 0;
    for (unsigned i = 0; i < hs->n_fields; i++) {
        const http_field *f = &hs->fields[i];
        dup[i] = false;
        for (unsigned j = 0; j < i && !dup[i]; j++)
            dup[i] =
                hs->fields[j].name_len == f->name_len &&
                memcmp(h + hs->fields[j].name, h + f->name, f->name_len) == 0;
        distinct += dup[i] ? 0 : 1;
    }
    sx_pack_map(pk, 3);
    sx_pack_str(pk, "status");
    sx_pack_int(pk, hs->status);
    sx_pack_str(pk, "headers");
    sx_pack_map(pk, distinct);
    for (unsigned i = 0; i < hs->n_fields; i++) {
        if (dup[i])
            continue;
        const http_field *f = &hs->fields[i];
        /* ", " goes before every value but the first (an empty first
         * value included, so the count of values is kept). */
        size_t total = f->value_len;
        for (unsigned j = i + 1; j < hs->n_fields; j++)
            if (hs->fields[j].name_len == f->name_len &&
                memcmp(h + hs->fields[j].name, h + f->name, f->name_len) == 0)
                total += hs->fields[j].value_len + 2;
        char *v = SX__FAULT(SX__FAULT_HTTP_BODY) ? NULL : malloc(total + 1);
        if (v == NULL)
            return SX_ENOMEM;
        size_t at = 0;
        for (unsigned j = i; j < hs->n_fields; j++) {
            const http_field *g = &hs->fields[j];
            if (g->name_len != f->name_len ||
                memcmp(h + g->name, h + f->name, f->name_len) != 0)
                continue;
            if (j > i) {
                memcpy(v + at, ", ", 2);
                at += 2;
            }
            memcpy(v + at, h + g->value, g->value_len);
            at += g->value_len;
        }
        sx_pack_strn(pk, h + f->name, f->name_len);
        sx_pack_strn(pk, v, at);
        free(v);
    }
    sx_pack_str(pk, "body");
    sx_pack_bin(pk, hs->body != NULL ? hs->body : (const uint8_t *)"",
                hs->body_len);
    return pk->err;
}

/* Runs the parser over what the connection has; answers when the response
 * is complete, malformed, over a limit, or cut short. */
void sx__net_http_feed(sx__net_op *c)
{
    sx__net_http *hs = c->http;
    sx__net_conn *n = c->conn;
    const char *what = NULL;
    int rc;
    while ((rc = http_step(c, &what)) == 1 && hs->phase != H_DONE) {
    }
    if (rc < 0) {
        http_fail(c, rc, what);
        return;
    }
    if (hs->phase == H_DONE) {
        sx_pack pk;
        sx_pack_init(&pk);
        if (http_pack(hs, &pk) != 0)
            http_fail(c, SX_ENOMEM, "out of memory");
        else
            sx__net_end(c, sx_pack_payload(&pk), 0, NULL);
        sx_pack_fini(&pk);
        return;
    }
    /* More bytes are needed: are more coming? */
    if (n->err != 0) {
        sx__net_fail_uv(c, "net.http", c->where, n->err);
    } else if (n->eof) {
        if (hs->write_err != 0)
            sx__net_fail_uv(c, "net.http", c->where, hs->write_err);
        else
            http_fail(c, SX_ECLOSED,
                      hs->phase == H_HEAD
                          ? "connection closed before a complete response "
                            "head"
                          : "connection closed before the body ended");
    }
}

/* ---- net.http: building the request [worker] ---- */

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

/* The parts of "http://host[:port]/path?query" (the fragment dropped). */
typedef struct {
    sx__hostport target; /* the host without brackets; port 80 when none */
    const char *path;    /* from the first '/' or '?'; may be empty */
    size_t path_len;
    char why[NET_MSG_MAX]; /* the message for a bad host or port */
} url_parts;

static const char *url_parse(const char *s, size_t len, url_parts *out)
{
    if (len >= 8 && strncasecmp(s, "https://", 8) == 0)
        return "net.http: only http:// URLs are supported (no TLS)";
    if (len < 7 || strncasecmp(s, "http://", 7) != 0)
        return "net.http: url must start with http://";
    s += 7;
    len -= 7;
    size_t a = 0;
    while (a < len && s[a] != '/' && s[a] != '?' && s[a] != '#')
        a++;
    if (memchr(s, '@', a) != NULL)
        return "net.http: user info in the url is not supported";
    /* host[:port] by the rules every part of stepx shares
     * (process/hostport.h). Its host characters leave out spaces and
     * control bytes, so the host is safe in the default Host header (an
     * IPv6 zone, "[::1%...]", is not checked by libuv). */
    const char *why =
        sx__hostport_parse(s, a, SX__HOSTPORT_PORT_OPTIONAL, 80, &out->target);
    if (why != NULL) {
        snprintf(out->why, sizeof out->why, "net.http: bad url host:port: %s",
                 why);
        return out->why;
    }
    size_t end = a;
    while (end < len && s[end] != '#')
        end++;
    out->path = s + a;
    out->path_len = end - a;
    for (size_t i = 0; i < out->path_len; i++)
        if ((unsigned char)out->path[i] <= 0x20 ||
            (unsigned char)out->path[i] == 0x7f)
            return "net.http: the url path must not hold spaces or control "
                   "characters (percent-encode them)";
    return NULL;
}

/* Appends the user's header fields (a map of str -> str or int) to req.
 * Sets *has_host when one is Host. Returns NULL or an error message. */
static const char *http_headers(sx_unpack *u, bytes *req, bool *has_host)
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
        for (size_t j = 0; j < kl; j++)
            if (!is_tchar((unsigned char)k[j]))
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

/* What net.http's args say; the pointers point into the args payload,
 * valid during the handler. */
typedef struct {
    const char *method, *url;
    size_t method_len, url_len;
    const void *body;
    size_t body_len;
    bool has_body;
    int64_t timeout_ms;
    sx_payload headers; /* the raw map, or empty */
} http_args;

static bool key_is(const char *k, size_t kl, const char *name)
{
    return strlen(name) == kl && memcmp(k, name, kl) == 0;
}

/* One key's value into a. NULL or the SX_EINVAL message. */
static const char *http_arg(sx_unpack *u, const char *k, size_t kl,
                            http_args *a)
{
    if (key_is(k, kl, "method"))
        return sx_unpack_str(u, &a->method, &a->method_len) == 0
                   ? NULL
                   : "net.http: method must be a string";
    if (key_is(k, kl, "url"))
        return sx_unpack_str(u, &a->url, &a->url_len) == 0
                   ? NULL
                   : "net.http: url must be a string";
    if (key_is(k, kl, "headers"))
        return sx_unpack_raw(u, &a->headers) == 0
                   ? NULL
                   : "net.http: malformed headers";
    if (key_is(k, kl, "body")) {
        if (sx_unpack_nil(u) == 0)
            return NULL;
        a->has_body = true;
        return sx_unpack_bin(u, &a->body, &a->body_len) == 0 ||
                       sx_unpack_str(u, (const char **)&a->body,
                                     &a->body_len) == 0
                   ? NULL
                   : "net.http: body must be a str, bin or nil";
    }
    if (key_is(k, kl, "timeout_ms"))
        return sx_unpack_int(u, &a->timeout_ms) == 0 && a->timeout_ms >= 0 &&
                       a->timeout_ms <= HTTP_TIMEOUT_MAX
                   ? NULL
                   : "net.http: timeout_ms must be an integer from 0 to 2^40 "
                     "(ms)";
    return "net.http: unknown key in args (method, url, headers, body, "
           "timeout_ms)";
}

/* Parses net.http's args (one map; each key at most once). NULL or the
 * SX_EINVAL message. */
static const char *http_args_parse(sx_payload args, http_args *a)
{
    static const char *const keys[] = { "method", "url", "headers", "body",
                                        "timeout_ms" };
    sx_unpack u;
    uint32_t n;
    unsigned seen = 0;
    memset(a, 0, sizeof *a);
    a->method = "GET";
    a->method_len = 3;
    sx_unpack_init(&u, args);
    if (sx_unpack_map(&u, &n) != 0)
        return "net.http: args must be a map {method, url, headers, body, "
               "timeout_ms}";
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        if (sx_unpack_str(&u, &k, &kl) != 0)
            return "net.http: args keys must be strings";
        for (unsigned j = 0; j < sizeof keys / sizeof keys[0]; j++) {
            if (!key_is(k, kl, keys[j]))
                continue;
            if (seen & (1u << j))
                return "net.http: a key is given twice in args";
            seen |= 1u << j;
        }
        const char *err = http_arg(&u, k, kl, a);
        if (err != NULL)
            return err;
    }
    if (!sx_unpack_done(&u))
        return "net.http: malformed args";
    if (a->url == NULL)
        return "net.http: args need a url";
    if (a->method_len == 0 || a->method_len > 32)
        return "net.http: method must be 1-32 token characters";
    for (size_t i = 0; i < a->method_len; i++)
        if (!is_tchar((unsigned char)a->method[i]))
            return "net.http: method must be 1-32 token characters";
    return NULL;
}

/* Builds the request (head and body) into c->data. Returns 0, SX_EINVAL
 * (bad headers; *msg set), SX_ELIMIT (over 4 GiB; *msg set) or
 * SX_ENOMEM. */
static int http_build(sx__net_op *c, const http_args *a, const url_parts *up,
                      const char **msg)
{
    bytes req = { NULL, 0, 0, false };
    bytes_add(&req, a->method, a->method_len);
    bytes_str(&req, " ");
    if (up->path_len == 0 || up->path[0] != '/')
        bytes_str(&req, "/");
    bytes_add(&req, up->path, up->path_len);
    bytes_str(&req, " HTTP/1.1\r\nConnection: close\r\n");
    bool has_host = false;
    if (a->headers.len > 0) {
        sx_unpack hu;
        sx_unpack_init(&hu, a->headers);
        if (sx_unpack_nil(&hu) != 0 &&
            (*msg = http_headers(&hu, &req, &has_host)) != NULL) {
            free(req.p);
            return SX_EINVAL;
        }
    }
    char line[NET_WHERE_MAX + 32];
    if (!has_host) {
        /* c->where is host:port, with brackets for IPv6. */
        if (up->target.port == 80)
            snprintf(line, sizeof line, "Host: %.*s\r\n",
                     (int)(strrchr(c->where, ':') - c->where), c->where);
        else
            snprintf(line, sizeof line, "Host: %s\r\n", c->where);
        bytes_str(&req, line);
    }
    bool sends_body = str_ieq(a->method, a->method_len, "POST") ||
                      str_ieq(a->method, a->method_len, "PUT") ||
                      str_ieq(a->method, a->method_len, "PATCH");
    if (a->has_body || sends_body) {
        snprintf(line, sizeof line, "Content-Length: %zu\r\n", a->body_len);
        bytes_str(&req, line);
    }
    bytes_str(&req, "\r\n");
    bytes_add(&req, a->body, a->body_len);
    if (req.oom || req.len > UINT32_MAX) {
        free(req.p);
        *msg = "net.http: the request is over 4 GiB";
        return req.oom ? SX_ENOMEM : SX_ELIMIT;
    }
    c->data = req.p; /* owned by c: freed in op_fini */
    c->data_len = req.len;
    return 0;
}

int sx__net_cmd_http(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    http_args a;
    url_parts up;
    const char *msg = http_args_parse(args, &a);
    if (msg == NULL)
        msg = url_parse(a.url, a.url_len, &up);
    if (msg != NULL) {
        sx_complete(done, nil, SX_EINVAL, msg);
        return 0;
    }
    sx__net_op *c = sx__net_op_new(done, SX__NET_HTTP);
    if (c == NULL)
        return SX_ENOMEM;
    c->http = calloc(1, sizeof(sx__net_http)); /* owned by c (op_fini) */
    if (c->http == NULL) {
        sx__net_op_discard(c);
        return SX_ENOMEM;
    }
    sx__net_target_set(c, up.target.host, strlen(up.target.host),
                       up.target.port);
    int rc = http_build(c, &a, &up, &msg);
    if (rc != 0) {
        sx__net_op_discard(c); /* frees c->http too; done is untouched */
        if (rc == SX_ENOMEM)
            return rc; /* dispatch answers it */
        sx_complete(done, nil, rc, msg);
        return 0;
    }
    c->http->timeout_ms = (uint64_t)a.timeout_ms;
    c->http->due_ns = sx__now_ns() + (uint64_t)a.timeout_ms * 1000000u;
    c->http->head_only = str_ieq(a.method, a.method_len, "HEAD");
    sx__io_submit(&c->op); /* the loop owns c */
    return 0;
}

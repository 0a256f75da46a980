/* engine/commands/http_parse.h — net.http's pure parts: the URL parser,
 * the request builder and the HTTP/1.1 response parser. Internal.
 *
 * Everything here is bytes in, a struct or bytes out: no libuv, no engine,
 * no I/O, so that each part can be fuzzed and unit-tested on its own
 * (tests/fuzz/fuzz_http.c, tests/io/test_http_parse.c). engine/commands/
 * http.c is the libuv glue that calls it: it parses the command's args,
 * connects, writes the request and feeds the response parser what the
 * connection reads.
 *
 * Errors are the library's codes (<stepx/process.h>) with a static message
 * in English that names what was wrong; no function here writes to stderr
 * or keeps global state.
 *
 * Threads: none of its own; a parser or a request belongs to its caller.
 */
#ifndef SX_ENGINE_CMD_HTTP_PARSE_H
#define SX_ENGINE_CMD_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stepx/process.h>

#include "process/hostport.h"

/* Limits that bound the memory a response can take, whatever the server
 * sends. Each is enforced by the response parser whatever the splits in
 * which the bytes arrive. */
#define SX__HTTP_BODY_MAX ((size_t)8 << 20)  /* body, announced or received */
#define SX__HTTP_HEAD_MAX ((size_t)64 << 10) /* a head, up to its CRLFCRLF */
#define SX__HTTP_LINE_MAX 1024  /* a chunk-size or trailer line, no CRLF */
#define SX__HTTP_FIELDS_MAX 200 /* header fields in the final head */
#define SX__HTTP_HOST_MAX 255   /* a URL's host, without IPv6 brackets */

/* Is s[0, len) a token (RFC 9110: 1 or more of ALPHA, DIGIT and
 * !#$%&'*+-.^_`|~)? false for len 0. */
bool sx__http_token(const char *s, size_t len);

/* ---- URLs ---- */

/* The parts of "http://host[:port]/path?query#fragment"; the pointers point
 * into the parsed string. */
typedef struct {
    char why[320];    /* the message for a bad host or port */
    const char *host; /* brackets of an IPv6 literal dropped */
    size_t host_len;  /* 1 to SX__HTTP_HOST_MAX */
    int64_t port;     /* 1 to 65535; 80 when the URL names none */
    const char *path; /* from the first '/' or '?' up to the '#' or the end;
                         may be empty (the request then asks for "/") */
    size_t path_len;
} sx__http_url;

/* Parses the URL s[0, len) (not NUL-terminated; any bytes) into *out.
 * The scheme is http:// in any case; the authority runs to the first '/',
 * '?' or '#' and is HOST[:PORT] as process/hostport.h reads it (a name, an
 * IPv4 literal or an IPv6 literal in brackets; the port 1-65535, 80 when
 * none is given).
 * Neither host nor path may hold bytes 0x00-0x20 or 0x7f (so neither can
 * inject a header line). Returns NULL, or the SX_EINVAL message (starting
 * "net.http: ") with *out in an unspecified state: https:// (no TLS), no
 * http:// scheme, user info ('@' in the authority), a host or port that
 * process/hostport.h refuses ("net.http: bad url host:port: " and its
 * reason), control characters or spaces in the path. */
const char *sx__http_url_parse(const char *s, size_t len, sx__http_url *out);

/* ---- Requests ---- */

/* What a request is made of; the pointers are the caller's. */
typedef struct {
    const char *method; /* a token (the caller checks it) */
    size_t method_len;
    const sx__http_url *url; /* as sx__http_url_parse made it */
    sx_payload headers;      /* a msgpack map str -> str or int, nil, or
                                empty (len 0) for none */
    const void *body;        /* body_len bytes; may be NULL when 0 */
    size_t body_len;
    bool has_body; /* the caller gave a body (an empty one included) */
} sx__http_request;

/* Builds the whole request, head and body, into one malloc'd block:
 * "METHOD PATH HTTP/1.1", "Connection: close", the caller's header fields
 * in their order, "Host: host[:port]" unless a header named Host was given
 * (an IPv6 host in brackets, the port only when it is not 80),
 * "Content-Length: N" when there is a body or the method is POST, PUT or
 * PATCH (any case), the empty line, then the body. On success *out (owned
 * by the caller, free()) and *out_len are set and it returns 0. Errors,
 * with nothing allocated and *msg set: SX_EINVAL when headers is not a map
 * of str -> str or int, a name is empty or not a token, a value holds CR,
 * LF or NUL, or a name is Connection, Content-Length or Transfer-Encoding
 * (any case; the client's own); SX_ELIMIT when the request is over
 * UINT32_MAX bytes; SX_ENOMEM. */
int sx__http_request_build(const sx__http_request *rq, uint8_t **out,
                           size_t *out_len, const char **msg);

/* ---- Responses ---- */

/* Where the response parser is. */
typedef enum {
    SX__HTTP_HEAD = 0,   /* a status line and header fields */
    SX__HTTP_LENGTH,     /* a Content-Length body */
    SX__HTTP_CHUNK_SIZE, /* chunked: the size line */
    SX__HTTP_CHUNK_DATA, /* chunked: a chunk's data */
    SX__HTTP_CHUNK_END,  /* the CRLF after a chunk's data */
    SX__HTTP_TRAILER,    /* after the last chunk, up to an empty line */
    SX__HTTP_TO_EOF,     /* neither: the body ends with the connection */
    SX__HTTP_DONE        /* the response is complete */
} sx__http_phase;

/* A header field of the kept head: offsets into sx__http_resp.head. */
typedef struct {
    uint32_t name, name_len, value, value_len;
} sx__http_field;

/* A response parser and what it has parsed. A zeroed struct with
 * head_only set as needed is a new parser; sx__http_resp_fini frees what
 * it holds. The fields other than head_only are the parser's to write and
 * the caller's to read. */
typedef struct {
    bool head_only; /* the request was HEAD: no body follows any head */
    sx__http_phase phase;
    size_t scanned;   /* head bytes already searched for its end */
    size_t remaining; /* bytes left of the Content-Length body or chunk */
    int status;       /* 100-999, once a head has been parsed */
    /* The final head, CRLFCRLF included, names lower-cased (owned). An
     * interim 1xx head is parsed, then dropped for the next one. */
    char *head;
    size_t head_len;
    sx__http_field fields[SX__HTTP_FIELDS_MAX]; /* in order of arrival */
    unsigned n_fields;
    uint8_t *body; /* owned; NULL until a body byte arrives */
    size_t body_len, body_cap;
} sx__http_resp;

/* Runs the parser over the unread bytes p[0, len) (p may be anything when
 * len is 0); eof: the stream has ended after them. The parser reads only
 * p[0, len) and consumes a prefix of it, *used bytes (always set, also on
 * an error); the next call must pass the bytes from p + *used on, followed
 * by any that arrived since. What it keeps (the head, the body) it copies.
 * Returns
 *   1  the response is complete (phase SX__HTTP_DONE): status, fields and
 *      body are the result; a 1xx response other than 101 is skipped, and
 *      HEAD responses, 1xx, 204 and 304 have no body. Bytes after the
 *      response are left unconsumed. Calling again returns 1 at once.
 *   0  more bytes are needed. With eof set this means the stream ended
 *      inside the response, unless the phase is SX__HTTP_TO_EOF (the
 *      body's end is then the stream's end, which eof completes).
 *   SX_EPROTO  a malformed response: status line, header line, header
 *      name, obsolete line folding, a NUL in the head, Content-Length
 *      (not digits, conflicting values), a chunk-size line (no hex digits,
 *      junk after them, over SX__HTTP_LINE_MAX), no CRLF after a chunk's
 *      data, a trailer line over SX__HTTP_LINE_MAX;
 *   SX_ELIMIT  a head over SX__HTTP_HEAD_MAX, more than SX__HTTP_FIELDS_MAX
 *      fields, a body over SX__HTTP_BODY_MAX (announced or received);
 *   SX_ENOMEM  no memory for the head or the body.
 * On an error *what is a static message naming it ("malformed status
 * line", "response body over 8 MiB", ...) and the parser must not be fed
 * again. */
int sx__http_resp_feed(sx__http_resp *r, const uint8_t *p, size_t len, bool eof,
                       size_t *used, const char **what);

/* Frees what r holds (the head and the body); r may then be zeroed and
 * reused. NULL is fine. */
void sx__http_resp_fini(sx__http_resp *r);

/* For the result's headers map, where a name that appears more than once
 * has its values joined: sets dup[i] for each field whose name an earlier
 * field has, and returns the number of distinct names (0 to n_fields). */
unsigned sx__http_resp_distinct(const sx__http_resp *r,
                                bool dup[SX__HTTP_FIELDS_MAX]);

/* The value of field i (i < n_fields) joined with those of every later
 * field of the same name, in order, with ", " between them (before an
 * empty value too, so the count of values shows): a malloc'd string
 * (*value, NUL-terminated, the caller's to free) of *len bytes. Returns 0
 * or SX_ENOMEM. */
int sx__http_resp_join(const sx__http_resp *r, unsigned i, char **value,
                       size_t *len);

#endif

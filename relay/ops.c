/* relay/ops.c — the operations of the stepx wire protocol (PROTOCOL.md)
 * that act on processes and the session: request fields read and
 * checked, the dispatch by op, and hello, send, cancel, terminate, wait
 * and subscribe (the engine called, the reply built). submit is
 * relay/ops_submit.c; `wait` and `subscribe` hand over to
 * relay/pending.c; ps, stats and types are relay/ops_info.c; the reply
 * builders are relay/reply.c; a submit or send that the state store
 * answers is relay/stored.c.
 *
 * Threads: the server's loop thread only. See relay/server.h and
 * docs/RELAY.md.
 */
#include "process/mapentry.h"
#include "process/mpformat.h"
#include "process/utf8.h"
#include "relay/server.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- request fields [loop] ----
 *
 * A request's fields are read one by one (op, id, then each op's own:
 * submit reads about ten), and a look-up that scans the map from its
 * start decodes every key and skips every value before the one asked for,
 * again for each field: most of the parsing time of the loop thread, the
 * pipelined relay's bottleneck (bench/FINDINGS.md, "relay and relay1").
 * So sx__relay_handle reads the map once into an index of its string
 * keys and their values, and the readers below look a key up there while
 * the handler runs on this thread (`cur`, on the handler's stack). A
 * reader given any other payload, or a request's payload after its
 * handler returned, scans the map itself (sx_map_get); both find the
 * first of equal keys, and both answer "absent" for a map that does not
 * decode (the frame check has refused those before). */

#define INDEX_MAX 24 /* a request's fields indexed; beyond, scans */

typedef struct {
    const uint8_t *data; /* the request's map: data, len */
    size_t len;
    unsigned n;    /* entries */
    bool complete; /* every entry of the map is in f (a miss is absent) */
    /* key_bit of every key in f: a complete index without a key's bit has
     * no such key, found so without a look at the entries (the optional
     * fields most requests leave out). */
    uint64_t keys;
    struct {
        const char *key;
        size_t kl;
        sx_payload v;
    } f[INDEX_MAX];
} req_index;

/* The index of the request being handled on this thread, or NULL.
 * initial-exec: read by every field reader (the library is PIC, where
 * the default model calls __tls_get_addr on each access; see
 * engine/sched/worker.c, tls_worker, for why the static model is safe
 * here). */
static _Thread_local const req_index *cur
    __attribute__((tls_model("initial-exec")));

/* One of 64 bits for a key, from its length and first byte. */
static inline uint64_t key_bit(const char *k, size_t kl)
{
    unsigned h = (unsigned)kl * 7u + (kl > 0 ? (unsigned char)k[0] : 0u);
    return (uint64_t)1 << (h & 63);
}

static void index_build(req_index *ix, sx_payload req)
{
    ix->data = req.data;
    ix->len = req.len;
    ix->n = 0;
    ix->complete = false;
    ix->keys = 0;
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, req);
    if (sx_unpack_map(&u, &n) != 0)
        return;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        sx_payload v;
        if (sx__map_entry(&u, &k, &kl, &v) != 0)
            return;
        if (k == NULL)
            continue; /* a key that is no string names no field */
        if (ix->n == INDEX_MAX)
            return; /* the rest: scanned by sx_map_get */
        ix->f[ix->n].key = k;
        ix->f[ix->n].kl = kl;
        ix->f[ix->n].v = v;
        ix->n++;
        ix->keys |= key_bit(k, kl);
    }
    ix->complete = true;
}

/* Whether the n bytes at a and b are equal: the keys are a few bytes
 * long, shorter than what a call to memcmp costs. */
static inline bool key_eq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

/* A field's value: 0 and *v, 1 when absent. kl: strlen(key). */
int sx__relay_fieldn(sx_payload req, const char *key, size_t kl, sx_payload *v)
{
    const req_index *ix = cur;
    if (ix != NULL && ix->data == req.data && ix->len == req.len) {
        if (ix->complete && (ix->keys & key_bit(key, kl)) == 0)
            return 1;
        for (unsigned i = 0; i < ix->n; i++)
            if (ix->f[i].kl == kl && key_eq(ix->f[i].key, key, kl)) {
                *v = ix->f[i].v;
                return 0;
            }
        if (ix->complete)
            return 1;
    }
    return sx_map_get(req, key, v) == 0 ? 0 : 1;
}

/* A typed field given as nil counts as absent (clients send null/None
 * for "not given"; nil is never a string or an integer). */
bool sx__relay_is_nil(sx_payload v)
{
    return v.len == 1 && v.data[0] == 0xc0;
}

/* Field readers: 0 (read), 1 (absent, or nil), or SX_EPROTO (wrong
 * type). */
int sx__relay_field_strn(sx_payload req, const char *key, size_t kl,
                         const char **s, size_t *n)
{
    sx_payload v;
    if (sx__relay_fieldn(req, key, kl, &v) != 0 || sx__relay_is_nil(v))
        return 1;
    sx_unpack u;
    sx_unpack_init(&u, v);
    return sx_unpack_str(&u, s, n) == 0 ? 0 : SX_EPROTO;
}

int sx__relay_field_uintn(sx_payload req, const char *key, size_t kl,
                          uint64_t *out)
{
    sx_payload v;
    if (sx__relay_fieldn(req, key, kl, &v) != 0 || sx__relay_is_nil(v))
        return 1;
    /* v is one whole value (the index's, or sx_map_get's): a positive
     * fixint or a uint of 1 to 8 bytes (request ids, most limits) is
     * read here; every other form by the reader. */
    const uint8_t *d = v.data;
    if (v.len == 1 && d[0] < 0x80) {
        *out = d[0];
        return 0;
    }
    size_t w = d[0] == 0xcc   ? 1
               : d[0] == 0xcd ? 2
               : d[0] == 0xce ? 4
               : d[0] == 0xcf ? 8
                              : 0;
    if (w != 0 && v.len == 1 + w) {
        *out = sx__mp_field(d + 1, w);
        return 0;
    }
    sx_unpack u;
    sx_unpack_init(&u, v);
    return sx_unpack_uint(&u, out) == 0 ? 0 : SX_EPROTO;
}

/* A required PID field in text form. 0, or the reply has been sent. */
static int field_pid(sx__relay_conn *c, uint64_t id, sx_payload req,
                     const char *key, sx_pid *out)
{
    const char *s;
    size_t n;
    int rc = sx__relay_field_str(req, key, &s, &n);
    if (rc != 0) {
        sx__relay_reply_bad_field(c, id, key, rc, "a PID string");
        return -1;
    }
    char buf[SX_PID_TEXT_MAX];
    if (n >= sizeof(buf) || memchr(s, '\0', n) != NULL) {
        sx__relay_reply_bad_field(c, id, key, 2, "a PID string {node@host|id}");
        return -1;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (sx_pid_parse(buf, out) != 0) {
        sx__relay_reply_bad_field(c, id, key, 2, "a PID string {node@host|id}");
        return -1;
    }
    return 0;
}

/* A NUL-terminated heap copy of an optional string field: 0 (*out set,
 * NULL when absent), or the reply has been sent. */
static int field_strdup(sx__relay_conn *c, uint64_t id, sx_payload req,
                        const char *key, bool required, char **out)
{
    const char *s;
    size_t n;
    *out = NULL;
    int rc = sx__relay_field_str(req, key, &s, &n);
    if (rc == 1 && !required)
        return 0;
    if (rc != 0 || memchr(s, '\0', n) != NULL) {
        sx__relay_reply_bad_field(c, id, key, rc != 0 ? rc : 2,
                                  "a string without NUL");
        return -1;
    }
    *out = malloc(n + 1);
    if (*out == NULL) {
        sx__relay_reply_error(c, id, "internal", "out of memory");
        return -1;
    }
    memcpy(*out, s, n);
    (*out)[n] = '\0';
    return 0;
}

/* A name the client sent (n bytes at s), for quoting in a message: at
 * most max bytes of it, cut at a character boundary, and every byte that
 * is not part of valid UTF-8 (or is a NUL) written as \xHH, so that the
 * reply is valid UTF-8 whatever the client sent (a msgpack str is UTF-8;
 * strict readers drop a reply that is not). buf holds at least
 * 4 * max + 1 bytes. */
const char *sx__relay_quoted(char *buf, const char *s, size_t n, size_t max)
{
    size_t o = 0;
    for (size_t i = 0; i < n && i < max;) {
        /* A NUL is valid UTF-8 but would cut the message: escaped too. */
        size_t k = s[i] == '\0'
                       ? 0
                       : sx__utf8_seq((const unsigned char *)s + i, n - i);
        if (k == 0) {
            snprintf(buf + o, 5, "\\x%02x", (unsigned char)s[i]);
            o += 4;
            i++;
        } else {
            if (i + k > max)
                break;
            memcpy(buf + o, s + i, k);
            o += k;
            i += k;
        }
    }
    buf[o] = 0;
    return buf;
}

/* ---- hello ---- */

/* Compares without an early exit, so that timing tells nothing about how
 * much of a guessed token was right. */
static bool token_eq(const char *want, size_t wn, const char *got, size_t gn)
{
    unsigned char d = (unsigned char)(wn != gn);
    for (size_t i = 0; i < wn; i++)
        d |= (unsigned char)(want[i] ^ (i < gn ? got[i] : 0));
    return d == 0;
}

static void op_hello(sx__relay_conn *c, uint64_t id, sx_payload req)
{
    sx_server *s = c->srv;
    /* With a token, a hello that is refused for any reason (no token, a
     * wrong one, a version this server does not speak) closes the
     * connection: only a hello that succeeds lets a client in. */
    bool gate = s->token != NULL && !c->authed;
    if (s->token != NULL) {
        const char *t = NULL;
        size_t tn = 0;
        if (sx__relay_field_str(req, "token", &t, &tn) != 0 ||
            !token_eq(s->token, s->token_len, t, tn)) {
            sx__relay_reply_error(c, id, "bad_request",
                                  "this server needs its token in hello");
            sx__relay_conn_drain(c);
            return;
        }
    }
    uint64_t v;
    int rc = sx__relay_field_uint(req, "version", &v);
    if (rc != 0) {
        sx__relay_reply_bad_field(c, id, "version", rc, "an integer");
        if (gate)
            sx__relay_conn_drain(c);
        return;
    }
    if (v != 1) {
        char msg[96];
        snprintf(msg, sizeof(msg),
                 "protocol version %" PRIu64 " unsupported (this is 1)", v);
        sx__relay_reply_error(c, id, "bad_request", msg);
        if (gate)
            sx__relay_conn_drain(c);
        return;
    }
    if (gate && !sx__relay_conn_authed(c)) {
        sx__relay_reply_error(c, id, "limit", "too many connections");
        sx__relay_conn_drain(c);
        return;
    }
    char mb[SX_PID_TEXT_MAX];
    sx_pid_format(c->mailbox, mb, sizeof(mb));
    sx_pack *pk = sx__relay_reply_begin(c, id, true, 5);
    sx_pack_str(pk, "version");
    sx_pack_uint(pk, 1);
    sx_pack_str(pk, "node");
    sx_pack_uint(pk, c->mailbox.node);
    sx_pack_str(pk, "server");
    sx_pack_str(pk, s->server_name);
    sx_pack_str(pk, "mailbox");
    sx_pack_str(pk, mb);
    /* An extension: the largest frame this server takes and sends, so
     * that a client can take replies and pushes that large. */
    sx_pack_str(pk, "max_frame");
    sx_pack_uint(pk, s->max_frame);
    sx__relay_conn_reply(c);
}

/* ---- send, cancel, terminate ---- */

static void op_send(sx__relay_conn *c, uint64_t id, sx_payload req)
{
    sx_pid to;
    if (field_pid(c, id, req, "to", &to) != 0)
        return;
    const char *tp;
    size_t tl;
    int rc = sx__relay_field_str(req, "topic", &tp, &tl);
    if (rc != 0 || tl > 255 || memchr(tp, '\0', tl) != NULL) {
        sx__relay_reply_bad_field(c, id, "topic", rc != 0 ? rc : 2,
                                  "a string of at most 255 bytes");
        return;
    }
    /* The topic reaches the receiver as a str (a client's push): one that
     * is not UTF-8 would make a strict reader refuse the frame. The engine
     * refuses it too (SX_EINVAL); this says why. */
    if (!sx__utf8_valid((const unsigned char *)tp, tl)) {
        sx__relay_reply_error(c, id, "bad_request",
                              "field \"topic\": not valid UTF-8 (want a "
                              "string of at most 255 bytes)");
        return;
    }
    sx_payload data;
    if (sx__relay_field(req, "data", &data) != 0) {
        sx__relay_reply_bad_field(c, id, "data", 1, "any value");
        return;
    }
    char topic[256];
    memcpy(topic, tp, tl);
    topic[tl] = '\0';
    sx__relay_send(c, id, to, topic, data);
}

static void op_cancel(sx__relay_conn *c, uint64_t id, sx_payload req)
{
    sx_pid pid;
    char *reason;
    if (field_pid(c, id, req, "pid", &pid) != 0 ||
        field_strdup(c, id, req, "reason", false, &reason) != 0)
        return;
    int rc = sx_engine_cancel(c->srv->engine, pid, reason);
    free(reason);
    if (rc != 0)
        sx__relay_reply_engine(c, id, rc, pid);
    else
        sx__relay_reply_ok(c, id);
}

static void op_terminate(sx__relay_conn *c, uint64_t id, sx_payload req)
{
    sx_pid pid;
    if (field_pid(c, id, req, "pid", &pid) != 0)
        return;
    int rc = sx_engine_terminate(c->srv->engine, pid);
    if (rc != 0)
        sx__relay_reply_engine(c, id, rc, pid);
    else
        sx__relay_reply_ok(c, id);
}

/* ---- wait, subscribe ---- */

static void op_wait(sx__relay_conn *c, uint64_t id, sx_payload req)
{
    sx_pid pid;
    if (field_pid(c, id, req, "pid", &pid) != 0)
        return;
    uint64_t t = 0;
    int rc = sx__relay_field_uint(req, "timeout_ms", &t);
    if (rc == SX_EPROTO || (rc == 0 && t > INT64_MAX)) {
        sx__relay_reply_bad_field(c, id, "timeout_ms", 2,
                                  "a non-negative integer");
        return;
    }
    /* A look first (sx_engine_wait with 0 ms never sleeps, and costs a
     * live process a reference taken and dropped). A process that has
     * finished is answered from its outcome now (its watch, if one is
     * registered, may not have fired yet), without a watch of its own: a
     * pipelined client's waits mostly find their job done, and then need
     * no record, no entry in the watch table and no engine watcher. A poll
     * (timeout_ms 0) of a live process gets `timeout` now, with no watch
     * either: the engine cannot cancel one, so each poll of a process that goes
     * on would keep a record until it finishes (RELAY.md, "a known cost"), and
     * a client polling an idle process would grow the daemon without bound.
     * Anything else (a live process, an unknown PID, one of another node, a
     * stored job's outcome) goes the usual way: a watch answers it. */
    sx_result r;
    int w = sx_engine_wait(c->srv->engine, pid, 0, &r);
    if (w == 0) {
        sx__relay_reply_outcome(c, id, &r);
        sx_result_free(&r);
        return;
    }
    if (w == SX_ETIMEDOUT && rc == 0 && t == 0) {
        sx__relay_reply_error(c, id, "timeout", "no outcome within timeout_ms");
        return;
    }
    sx__relay_watch_start(c, id, SX__RELAY_PEND_WAIT, pid,
                          rc == 0 ? (int64_t)t : -1);
}

static void op_subscribe(sx__relay_conn *c, uint64_t id, sx_payload req)
{
    sx_pid pid;
    if (field_pid(c, id, req, "pid", &pid) != 0)
        return;
    sx__relay_watch_start(c, id, SX__RELAY_PEND_SUBSCRIBE, pid, -1);
}

/* ---- dispatch ---- */

typedef void (*op_fn)(sx__relay_conn *c, uint64_t id, sx_payload req);

/* An op's name, its length (counted by the compiler) and its handler. */
#define OP(name, fn)                                                           \
    {                                                                          \
        name, sizeof(name) - 1, fn                                             \
    }

static const struct {
    const char *name;
    size_t len;
    op_fn fn;
} ops[] = {
    OP("hello", op_hello),
    OP("submit", sx__relay_op_submit),
    OP("send", op_send),
    OP("wait", op_wait),
    OP("cancel", op_cancel),
    OP("terminate", op_terminate),
    OP("ps", sx__relay_op_ps),       /* relay/ops_info.c */
    OP("stats", sx__relay_op_stats), /* relay/ops_info.c */
    OP("nodes", sx__relay_op_nodes), /* relay/ops_info.c */
    OP("subscribe", op_subscribe),
    OP("types", sx__relay_op_types), /* relay/ops_info.c */
};

static void handle(sx__relay_conn *c, sx_payload body);

void sx__relay_handle(sx__relay_conn *c, sx_payload body)
{
    req_index ix;
    index_build(&ix, body);
    const req_index *outer = cur; /* a request handled within one: none
                                     today, kept right anyway */
    cur = &ix;
    handle(c, body);
    cur = outer;
}

static void handle(sx__relay_conn *c, sx_payload body)
{
    uint64_t id = 0;
    int id_rc = sx__relay_field_uint(body, "id", &id);
    if (id_rc != 0)
        id = 0;
    const char *op = NULL;
    size_t on = 0;
    int op_rc = sx__relay_field_str(body, "op", &op, &on);
    bool is_hello = op_rc == 0 && on == 5 && memcmp(op, "hello", 5) == 0;
    if (!c->authed && !is_hello) {
        /* A token is configured: nothing before a hello that carries it. */
        sx__relay_reply_error(c, id, "bad_request",
                              "this server needs hello with its token first");
        sx__relay_conn_drain(c);
        return;
    }
    if (id_rc != 0) {
        sx__relay_reply_bad_field(c, 0, "id", id_rc, "an unsigned integer");
        return;
    }
    if (op_rc != 0) {
        sx__relay_reply_bad_field(c, id, "op", op_rc, "a string");
        return;
    }
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        if (ops[i].len == on && key_eq(ops[i].name, op, on)) {
            ops[i].fn(c, id, body);
            return;
        }
    char msg[160], q[4 * 32 + 1];
    snprintf(msg, sizeof(msg), "unknown op \"%s\"",
             sx__relay_quoted(q, op, on, 32));
    sx__relay_reply_error(c, id, "unknown_op", msg);
}

/* relay/reply.c — what the relay server answers with: replies in the
 * server's packer (srv->pk: {id, ok, ...}), error replies with their
 * protocol code and a message packed as valid UTF-8, names packed as str
 * or bin, and the error frames (id 0) that close a connection.
 *
 * Threads: the server's loop thread, except sx__relay_pack_error, which
 * packs into the caller's own packer on any thread (watch callbacks use
 * it). See relay/server.h and docs/RELAY.md.
 */
#include "process/utf8.h"
#include "relay/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Starts a reply in srv->pk: {id, ok, ...extra more pairs}. */
sx_pack *sx__relay_reply_begin(sx__relay_conn *c, uint64_t id, bool ok,
                               uint32_t extra)
{
    sx_pack *pk = &c->srv->pk;
    sx_pack_reset(pk);
    sx_pack_map(pk, 2 + extra);
    sx_pack_str(pk, "id");
    sx_pack_uint(pk, id);
    sx_pack_str(pk, "ok");
    sx_pack_bool(pk, ok);
    return pk;
}

/* Packs message as a str of valid UTF-8: every byte that starts no valid
 * sequence becomes U+FFFD. A message may hold anybody's bytes (a process's
 * sx_fail message, an init's or a command's error naming what a client
 * sent, e.g. exec's argv[0]), and a strict reader refuses the whole frame
 * over one str that is not UTF-8. NULL packs nil. */
void sx__relay_pack_text(sx_pack *pk, const char *message)
{
    if (message == NULL) {
        sx_pack_nil(pk);
        return;
    }
    const unsigned char *m = (const unsigned char *)message;
    size_t n = strlen(message);
    if (sx__utf8_valid(m, n)) {
        sx_pack_strn(pk, message, n);
        return;
    }
    char small[1024], *buf = small;
    size_t fixed = sx__utf8_replace(m, n, NULL, 0);
    if (fixed > sizeof small && (buf = malloc(fixed)) == NULL) {
        buf = small; /* out of memory: the message is cut to what fits */
        fixed = sizeof small;
    }
    sx_pack_strn(pk, buf, sx__utf8_replace(m, n, buf, fixed));
    if (buf != small)
        free(buf);
}

void sx__relay_pack_error(sx_pack *pk, const char *code, const char *message)
{
    sx_pack_str(pk, "error");
    sx_pack_map(pk, 2);
    sx_pack_str(pk, "code");
    sx_pack_str(pk, code);
    sx_pack_str(pk, "message");
    sx__relay_pack_text(pk, message);
}

/* A name the server sends but did not choose (a registered type's name
 * and methods, the embedder's or a --load'ed plugin's strings, which
 * `types` lists and `ps` shows for each process): a str when it is valid
 * UTF-8, else a bin of the same bytes, as a payload's str would go
 * (PROTOCOL.md, "Payloads"). NULL packs nil. */
void sx__relay_pack_name(sx_pack *pk, const char *name)
{
    if (name == NULL) {
        sx_pack_nil(pk);
        return;
    }
    size_t n = strlen(name);
    if (sx__utf8_valid((const unsigned char *)name, n))
        sx_pack_strn(pk, name, n);
    else
        sx_pack_bin(pk, name, n);
}

void sx__relay_reply_error(sx__relay_conn *c, uint64_t id, const char *code,
                           const char *message)
{
    sx_pack *pk = sx__relay_reply_begin(c, id, false, 1);
    sx__relay_pack_error(pk, code, message);
    sx__relay_conn_reply(c);
}

void sx__relay_reply_ok(sx__relay_conn *c, uint64_t id)
{
    sx__relay_reply_begin(c, id, true, 0);
    sx__relay_conn_reply(c);
}

/* An engine error as a reply: the protocol code, and the engine's own
 * words with the PID it was about. */
void sx__relay_reply_engine(sx__relay_conn *c, uint64_t id, int rc, sx_pid pid)
{
    char msg[160], txt[SX_PID_TEXT_MAX];
    sx_pid_format(pid, txt, sizeof(txt));
    if (rc == SX_ENOTFOUND)
        snprintf(msg, sizeof(msg), "no process %s", txt);
    else
        snprintf(msg, sizeof(msg), "%s: %s", txt, sx_strerror(rc));
    sx__relay_reply_error(c, id, sx_wire_code(rc), msg);
}

/* bad_request for a field that is missing (rc 1) or wrongly typed. */
void sx__relay_reply_bad_field(sx__relay_conn *c, uint64_t id, const char *key,
                               int rc, const char *want)
{
    char msg[128];
    snprintf(msg, sizeof(msg), "field \"%s\": %s (want %s)", key,
             rc == 1 ? "missing or nil" : "wrong type", want);
    sx__relay_reply_error(c, id, "bad_request", msg);
}

void sx__relay_bad_frame(sx__relay_conn *c, int rc)
{
    char msg[128];
    if (rc == SX_ELIMIT)
        snprintf(msg, sizeof(msg), "frame longer than %zu bytes%s",
                 sx__relay_frame_limit(c),
                 c->authed ? "" : " (before hello with the token)");
    else
        snprintf(msg, sizeof(msg),
                 "bad frame: a zero length, or not exactly one msgpack map "
                 "with string keys");
    sx__relay_refuse(c, "bad_frame", msg);
}

void sx__relay_refuse(sx__relay_conn *c, const char *code, const char *message)
{
    sx__relay_reply_error(c, 0, code, message);
    sx__relay_conn_drain(c);
}

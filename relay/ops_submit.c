/* relay/ops_submit.c — the protocol's submit (docs/PROTOCOL.md, submit):
 * its fields read and checked (type, method, input, key, restart policy,
 * deadline, placement, wait), the engine called, the reply built. A
 * submit answered later (a state store, a deadline, a placement, a
 * policy) goes through relay/stored.c; one with "wait" hands its job to
 * relay/pending.c, which answers with the outcome.
 *
 * Threads: the server's loop thread only. See relay/server.h and
 * docs/RELAY.md.
 */
#include "relay/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUTS 65536 /* submit's input array */

static const sx_process_type *find_type(sx_server *s, const char *name,
                                        size_t n)
{
    for (size_t i = 0; i < s->n_types; i++)
        if (s->type_lens[i] == n && memcmp(s->types[i]->name, name, n) == 0)
            return s->types[i];
    return NULL;
}

/* Inputs up to this many are listed in the caller's array (on its
 * stack); more in a heap block. */
#define SMALL_INPUTS 8

/* Frees the inputs' list unless it is the caller's small array. */
static void inputs_free(sx_payload *in, sx_payload *small)
{
    if (in != small)
        free(in);
}

/* The input array's elements as payloads (pointing into req), in small
 * (SMALL_INPUTS entries) when they fit. 0, or the reply has been sent.
 * The caller lets go of *out with inputs_free. */
static int submit_inputs(sx__relay_conn *c, uint64_t id, sx_payload req,
                         sx_payload *small, sx_payload **out, size_t *n_out)
{
    sx_payload v;
    uint32_t n;
    sx_unpack u;
    if (sx__relay_field(req, "input", &v) != 0) {
        sx__relay_reply_bad_field(c, id, "input", 1, "an array");
        return -1;
    }
    sx_unpack_init(&u, v);
    if (sx_unpack_array(&u, &n) != 0) {
        sx__relay_reply_bad_field(c, id, "input", 2, "an array");
        return -1;
    }
    if (n > MAX_INPUTS) {
        sx__relay_reply_error(c, id, "bad_request",
                              "field \"input\": too many elements");
        return -1;
    }
    *out = n <= SMALL_INPUTS ? small : calloc(n, sizeof(**out));
    if (*out == NULL) {
        sx__relay_reply_error(c, id, "internal", "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        if (sx_unpack_raw(&u, &(*out)[i]) != 0) {
            inputs_free(*out, small);
            sx__relay_reply_error(c, id, "bad_request",
                                  "field \"input\": bad element");
            return -1;
        }
    *n_out = n;
    return 0;
}

/* The protocol code for a submit error: the engine's own refusals keep
 * theirs; anything else came from the type's init. */
const char *sx__relay_submit_code(int rc)
{
    switch (rc) {
    case SX_ENOCONNECTION:
    case SX_ETOOLARGE:
    case SX_ESTORAGE:
    case SX_ESTOPPING:
    case SX_ELIMIT:
    case SX_EUNKNOWN_TYPE:
    case SX_EUNKNOWN_METHOD:
    case SX_ENOMEM:
        return sx_wire_code(rc);
    case SX_ESTATE:
        return "stopping";
    default:
        return "init_failed";
    }
}

/* The longest idempotency key a submit takes. */
#define MAX_KEY 1024

/* A submit's restart policy (docs/PROTOCOL.md, submit): `restart` and
 * the optional numbers. 0, or the reply has been sent. *has: whether
 * the request gives one (then *out is checked, defaults filled). */
static int submit_restart(sx__relay_conn *c, uint64_t id, sx_payload req,
                          sx_restart_policy *out, bool *has)
{
    static const char *const num[] = { "max_restarts", "window_ms",
                                       "backoff_min_ms", "backoff_max_ms" };
    memset(out, 0, sizeof(*out));
    *has = false;
    const char *m;
    size_t ml;
    int rc = sx__relay_field_str(req, "restart", &m, &ml);
    if (rc == 0) {
        if (ml == 5 && memcmp(m, "never", 5) == 0)
            out->mode = SX_RESTART_NEVER;
        else if (ml == 10 && memcmp(m, "on-failure", 10) == 0)
            out->mode = SX_RESTART_ON_FAILURE;
        else if (ml == 6 && memcmp(m, "always", 6) == 0)
            out->mode = SX_RESTART_ALWAYS;
        else
            rc = SX_EPROTO;
        *has = true;
    }
    if (rc == SX_EPROTO) {
        sx__relay_reply_error(c, id, "bad_request",
                              "field \"restart\": want \"never\", "
                              "\"on-failure\" or \"always\"");
        return -1;
    }
    uint32_t *dst[] = { &out->max_restarts, &out->window_ms,
                        &out->backoff_min_ms, &out->backoff_max_ms };
    for (size_t i = 0; i < 4; i++) {
        uint64_t v;
        rc = sx__relay_field_uint(req, num[i], &v);
        if (rc == 1)
            continue;
        if (rc != 0 || v > UINT32_MAX || v == 0) {
            char msg[96];
            snprintf(msg, sizeof(msg),
                     "field \"%s\": want an integer from 1 to 4294967295",
                     num[i]);
            sx__relay_reply_error(c, id, "bad_request", msg);
            return -1;
        }
        if (!*has) {
            sx__relay_reply_error(c, id, "bad_request",
                                  "the restart numbers need \"restart\"");
            return -1;
        }
        *dst[i] = (uint32_t)v;
    }
    if (*has && sx_restart_policy_check(out) != 0) {
        sx__relay_reply_error(c, id, "bad_request",
                              "backoff_min_ms is over backoff_max_ms, or "
                              "max_restarts over 1000000");
        return -1;
    }
    return 0;
}

/* submit's placement (docs/PROTOCOL.md, submit): "node" (a node number)
 * or "place" ("here", "any", "least_loaded"). 0, or -1 when answered. */
static int submit_place(sx__relay_conn *c, uint64_t id, sx_payload req,
                        uint32_t *node, int *place)
{
    uint64_t v;
    int rc = sx__relay_field_uint(req, "node", &v);
    if (rc == 0 && v >= 1 && v <= UINT32_MAX) {
        *node = (uint32_t)v;
    } else if (rc != 1) {
        sx__relay_reply_error(c, id, "bad_request",
                              "field \"node\": want a node number from 1 "
                              "to 4294967295");
        return -1;
    }
    const char *p;
    size_t pl;
    rc = sx__relay_field_str(req, "place", &p, &pl);
    if (rc == 1)
        return 0;
    if (rc == 0 && pl == 4 && memcmp(p, "here", 4) == 0)
        *place = SX_PLACE_HERE;
    else if (rc == 0 && pl == 3 && memcmp(p, "any", 3) == 0)
        *place = SX_PLACE_ANY;
    else if (rc == 0 && pl == 12 && memcmp(p, "least_loaded", 12) == 0)
        *place = SX_PLACE_LEAST_LOADED;
    else {
        sx__relay_reply_error(c, id, "bad_request",
                              "field \"place\": want \"here\", \"any\" "
                              "or \"least_loaded\"");
        return -1;
    }
    if (*node != 0 && *place != SX_PLACE_HERE) {
        sx__relay_reply_error(c, id, "bad_request",
                              "\"node\" names the node: \"place\" then "
                              "has nothing to choose");
        return -1;
    }
    return 0;
}

/* submit's "wait" (true: answered once the job has finished, with wait's
 * fields and the pid) and its "timeout_ms" (docs/PROTOCOL.md, submit).
 * 0, or the reply has been sent. */
static int submit_wait(sx__relay_conn *c, uint64_t id, sx_payload req,
                       sx__relay_then_wait *w)
{
    *w = (sx__relay_then_wait){ .on = false, .timeout_ms = -1 };
    sx_payload v;
    if (sx__relay_field(req, "wait", &v) == 0 && !sx__relay_is_nil(v)) {
        sx_unpack u;
        sx_unpack_init(&u, v);
        if (sx_unpack_bool(&u, &w->on) != 0) {
            sx__relay_reply_bad_field(c, id, "wait", 2, "true or false");
            return -1;
        }
    }
    uint64_t t = 0;
    int rc = sx__relay_field_uint(req, "timeout_ms", &t);
    if (rc == 1)
        return 0;
    if (rc != 0 || t > INT64_MAX) {
        sx__relay_reply_bad_field(c, id, "timeout_ms", 2,
                                  "a non-negative integer");
        return -1;
    }
    if (!w->on) {
        sx__relay_reply_error(c, id, "bad_request",
                              "field \"timeout_ms\": a submit's timeout_ms "
                              "goes with \"wait\": true");
        return -1;
    }
    w->timeout_ms = (int64_t)t;
    return 0;
}

void sx__relay_op_submit(sx__relay_conn *c, uint64_t id, sx_payload req)
{
    sx_server *s = c->srv;
    const char *tn, *mn;
    size_t tl, ml;
    int rc = sx__relay_field_str(req, "type", &tn, &tl);
    if (rc != 0) {
        sx__relay_reply_bad_field(c, id, "type", rc, "a string");
        return;
    }
    if ((rc = sx__relay_field_str(req, "method", &mn, &ml)) != 0) {
        sx__relay_reply_bad_field(c, id, "method", rc, "a string");
        return;
    }
    const char *key = NULL;
    size_t kl = 0;
    if ((rc = sx__relay_field_str(req, "key", &key, &kl)) == 1) {
        key = NULL;
    } else if (rc != 0 || kl == 0 || kl > MAX_KEY) {
        sx__relay_reply_error(c, id, "bad_request",
                              "field \"key\": want a string of 1 to 1024 "
                              "bytes");
        return;
    } else if (!s->stored) {
        sx__relay_reply_error(c, id, "bad_request",
                              "field \"key\": keys need a state store "
                              "(stepxd runs with --ephemeral)");
        return;
    }
    sx_restart_policy policy;
    bool has_policy;
    if (submit_restart(c, id, req, &policy, &has_policy) != 0)
        return;
    uint64_t deadline = 0;
    rc = sx__relay_field_uint(req, "deadline_ms", &deadline);
    if (rc == 1) {
        deadline = 0;
    } else if (rc != 0 || deadline == 0 || deadline > ((uint64_t)1 << 40)) {
        sx__relay_reply_error(c, id, "bad_request",
                              "field \"deadline_ms\": want an integer from 1 "
                              "to 2^40 (milliseconds)");
        return;
    }
    uint32_t node = 0;
    int place = SX_PLACE_HERE;
    if (submit_place(c, id, req, &node, &place) != 0)
        return;
    sx__relay_then_wait wait;
    if (submit_wait(c, id, req, &wait) != 0)
        return;
    /* A job that could not be waited for is not started. */
    if (wait.on && !sx__relay_wait_room(c, id))
        return;
    /* Placed on another node: the type is that node's business (this one
     * may not have it), and what is kept only here does not travel. */
    bool away = place != SX_PLACE_HERE || (node != 0 && node != s->node);
    if (away && (key != NULL || has_policy)) {
        sx__relay_reply_error(c, id, "bad_request",
                              "\"key\" and \"restart\" stay on the node "
                              "that stores the job: they do not go with "
                              "\"node\" or \"place\"");
        return;
    }
    sx_payload small[SMALL_INPUTS], *in;
    size_t n;
    if (submit_inputs(c, id, req, small, &in, &n) != 0)
        return;
    /* Two quoted names and the text around them (a type's own name may be
     * long too: a --load'ed type's). */
    char msg[2 * (4 * 64) + 160];
    const sx_process_type *t = find_type(s, tn, tl);
    if (away && t == NULL) {
        /* This node lacks the type: the node it goes to answers. */
        sx_submit_opts o = { .deadline_ms = (int64_t)deadline,
                             .node = node,
                             .place = place };
        sx__relay_submit_away(c, id, tn, tl, mn, ml, in, n, &o, &wait);
        inputs_free(in, small);
        return;
    }
    if (t == NULL) {
        char q[4 * 64 + 1];
        snprintf(msg, sizeof(msg), "no process type \"%s\"",
                 sx__relay_quoted(q, tn, tl, 64));
        sx__relay_reply_error(c, id, "unknown_type", msg);
        inputs_free(in, small);
        return;
    }
    /* The method's name with a NUL, on the stack when it is short. */
    char mbuf[64];
    char *method = ml < sizeof(mbuf) ? mbuf : malloc(ml + 1);
    if (method == NULL) {
        sx__relay_reply_error(c, id, "internal", "out of memory");
        inputs_free(in, small);
        return;
    }
    memcpy(method, mn, ml);
    method[ml] = '\0';
    sx_pid pid;
    bool later = false;
    if (memchr(mn, '\0', ml) != NULL) {
        rc = SX_EUNKNOWN_METHOD;
    } else if (s->stored || has_policy || deadline > 0 || away) {
        /* Answered once the job is stored (relay/stored.c; at once
         * without a store), or by the node it was placed on. */
        sx_submit_opts o = { .key = key,
                             .key_len = kl,
                             .restart = has_policy ? &policy : NULL,
                             .deadline_ms = (int64_t)deadline,
                             .node = node,
                             .place = place };
        rc = sx__relay_submit_stored(c, id, t->name, method, in, n, &o, &wait);
        later = rc == 0;
    } else {
        rc = sx_engine_submit(s->engine, t->name, method, in, n, &pid);
    }
    inputs_free(in, small);
    if (rc != 0) {
        const char *code = sx__relay_submit_code(rc);
        char q[4 * 64 + 1], qt[4 * 64 + 1];
        sx__relay_quoted(qt, t->name, strlen(t->name), 64);
        if (rc == SX_EUNKNOWN_METHOD)
            snprintf(msg, sizeof(msg), "type %s has no method \"%s\"", qt,
                     sx__relay_quoted(q, mn, ml, 64));
        else if (strcmp(code, "init_failed") == 0)
            /* init ran on this thread: its own message, when it gave one
             * (sx_init_error), says which input was wrong. */
            snprintf(msg, sizeof(msg), "%s.%s init failed: %s (%s)", qt,
                     sx__relay_quoted(q, mn, ml, 64),
                     sx_engine_init_error()[0] != '\0' ? sx_engine_init_error()
                                                       : sx_strerror(rc),
                     sx_errname(rc));
        else
            snprintf(msg, sizeof(msg), "%s", sx_strerror(rc));
        if (method != mbuf)
            free(method);
        sx__relay_reply_error(c, id, code, msg);
        return;
    }
    if (method != mbuf)
        free(method);
    if (later)
        return; /* relay/stored.c replies */
    if (wait.on) {
        sx__relay_submit_wait(c, id, pid, false, wait.timeout_ms);
        return; /* answered with the outcome */
    }
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(pid, txt, sizeof(txt));
    sx_pack *pk = sx__relay_reply_begin(c, id, true, 1);
    sx_pack_str(pk, "pid");
    sx_pack_str(pk, txt);
    sx__relay_conn_reply_checked(c); /* the server's own strs */
}

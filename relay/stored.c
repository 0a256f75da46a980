/* relay/stored.c — requests that a daemon's state store answers (docs/
 * DURABILITY.md): a submit acknowledged once its job is stored, and a
 * send to a checkpointed job acknowledged once its message is stored.
 * The store answers on its own thread; the reply reaches the connection
 * through the hub (an SX__RELAY_OUT_ANSWER item), never dropped while
 * the connection lives. relay/ops.c reads and checks the requests.
 *
 * Threads: sx__relay_submit_stored and sx__relay_send [the server's loop
 * thread]; the answers [the store's thread, or the loop thread when the
 * engine answers at once].
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/server.h"

/* A submit the state store answers later [its thread]: the reply goes to
 * the connection through the hub. */
typedef struct {
    sx__relay_conn *c;  /* a reference */
    sx__relay_hub *hub; /* a reference */
    uint64_t id;
    sx__relay_then_wait wait; /* the submit's "wait" */
    /* With wait: the answer's item, allocated on the loop before the
     * submit (so that the answer can always be handed over) and holding
     * the wait's room (reserved) until the loop takes it. */
    sx__relay_out *item;
} stored_submit;

/* A new ANSWER item holding the reply packed in pk, or NULL (out of
 * memory, or pk failed). [any thread] */
static sx__relay_out *answer_item(const sx_pack *pk)
{
    sx__relay_out *o =
        pk->err == 0
            ? sx__relay_out_new(SX__RELAY_OUT_ANSWER, SX_WIRE_HEADER + pk->len)
            : NULL;
    if (o != NULL) {
        memcpy(o->data + SX_WIRE_HEADER, pk->data, pk->len);
        sx__relay_out_seal(o, pk->len);
    }
    return o;
}

/* Hands o (may be NULL) to the loop for connection c, whose reference
 * the item takes; with no item (out of memory), or once the server has
 * stopped, the reference is let go and the request stays unanswered, as
 * for a connection lost. [any thread] */
static void hand_over(sx__relay_conn *c, sx__relay_hub *hub, sx__relay_out *o)
{
    if (o != NULL) {
        o->conn = c;
        if (sx__relay_hub_post(hub, o) == 0)
            return;
        sx__relay_out_free(o); /* the server has stopped */
    }
    sx__relay_conn_unref(c);
}

void sx__relay_post_answer(sx__relay_conn *c, sx__relay_hub *hub, sx_pack *pk)
{
    hand_over(c, hub, answer_item(pk));
    sx_pack_fini(pk);
    sx__relay_hub_unref(hub);
}

/* The reply to a plain submit, or to a submit with "wait" refused. */
static void pack_submit_answer(sx_pack *pk, uint64_t id, int rc, sx_pid pid,
                               bool existing, const char *msg)
{
    sx_pack_map(pk, rc == 0 && existing ? 4 : 3);
    sx_pack_str(pk, "id");
    sx_pack_uint(pk, id);
    sx_pack_str(pk, "ok");
    sx_pack_bool(pk, rc == 0);
    if (rc == 0) {
        char txt[SX_PID_TEXT_MAX];
        sx_pid_format(pid, txt, sizeof(txt));
        sx_pack_str(pk, "pid");
        sx_pack_str(pk, txt);
        if (existing) {
            sx_pack_str(pk, "existing");
            sx_pack_bool(pk, true);
        }
    } else {
        sx__relay_pack_error(pk, sx__relay_submit_code(rc),
                             msg != NULL ? msg : sx_strerror(rc));
    }
}

static void stored_answer(void *user, int rc, sx_pid pid, bool existing,
                          const char *msg)
{
    stored_submit *ss = user;
    sx__relay_out *o = ss->item;
    if (o == NULL) { /* a plain submit */
        sx_pack pk;
        sx_pack_init(&pk);
        pack_submit_answer(&pk, ss->id, rc, pid, existing, msg);
        sx__relay_post_answer(ss->c, ss->hub, &pk);
        free(ss);
        return;
    }
    /* A submit with "wait": its item travels whatever the answer, and
     * gives the wait's room back on the loop. */
    o->wait_id = ss->id;
    if (rc == 0) {
        /* The job started: the loop starts its wait, which replies. */
        o->then_wait = 1;
        o->wait_existing = existing;
        o->wait_pid = pid;
        o->wait_ms = ss->wait.timeout_ms;
    } else {
        /* Refused: the reply, in an item of its own; when that cannot be
         * had, this item says `internal`. */
        sx_pack pk;
        sx_pack_init(&pk);
        pack_submit_answer(&pk, ss->id, rc, pid, existing, msg);
        sx__relay_out *r = answer_item(&pk);
        sx_pack_fini(&pk);
        if (r != NULL) {
            sx__relay_out_free(o);
            o = r;
        } else {
            o->oom_reply = 1;
        }
    }
    o->reserved = 1;
    hand_over(ss->c, ss->hub, o);
    sx__relay_hub_unref(ss->hub);
    free(ss);
}

int sx__relay_submit_stored(sx__relay_conn *c, uint64_t id, const char *type,
                            const char *method, const sx_payload *in, size_t n,
                            const sx_submit_opts *o,
                            const sx__relay_then_wait *wait)
{
    sx_server *s = c->srv;
    stored_submit *ss = malloc(sizeof(*ss));
    if (ss == NULL)
        return SX_ENOMEM;
    *ss = (stored_submit){ c, s->hub, id,
                           wait != NULL ? *wait : (sx__relay_then_wait){ 0 },
                           NULL };
    if (ss->wait.on) {
        ss->item = sx__relay_out_new(SX__RELAY_OUT_ANSWER, 0);
        if (ss->item == NULL) {
            free(ss);
            return SX_ENOMEM;
        }
        /* Held before the submit: its answer, which may come at once (on
         * this thread, through the hub), gives it back. */
        sx__relay_wait_reserve(c);
    }
    sx__relay_conn_ref(c);
    sx__relay_hub_ref(s->hub);
    int rc = sx_engine_submit_async(s->engine, type, method, in, n, o,
                                    stored_answer, ss);
    if (rc != 0) {
        if (ss->item != NULL) {
            sx__relay_wait_unreserve(c);
            sx__relay_out_free(ss->item);
        }
        sx__relay_conn_unref(c);
        sx__relay_hub_unref(s->hub);
        free(ss);
    }
    return rc;
}

void sx__relay_submit_away(sx__relay_conn *c, uint64_t id, const char *tn,
                           size_t tl, const char *mn, size_t ml,
                           const sx_payload *in, size_t n,
                           const sx_submit_opts *o,
                           const sx__relay_then_wait *wait)
{
    char type[256], method[256], msg[320];
    if (tl >= sizeof type || ml >= sizeof method ||
        memchr(tn, '\0', tl) != NULL || memchr(mn, '\0', ml) != NULL) {
        sx__relay_reply_error(c, id, "bad_request",
                              "a type or method placed on another node: at "
                              "most 255 bytes, without NUL");
        return;
    }
    memcpy(type, tn, tl);
    type[tl] = '\0';
    memcpy(method, mn, ml);
    method[ml] = '\0';
    int rc = sx__relay_submit_stored(c, id, type, method, in, n, o, wait);
    if (rc == 0)
        return; /* stored_answer replies */
    if (rc == SX_EUNKNOWN_TYPE)
        snprintf(msg, sizeof msg,
                 "no node of the cluster has process type \"%.64s\"", type);
    else if (rc == SX_ENOCONNECTION)
        snprintf(msg, sizeof msg,
                 "node %u is not in the cluster (down, or never seen)",
                 o->node);
    else
        snprintf(msg, sizeof msg, "%s", sx_strerror(rc));
    sx__relay_reply_error(c, id, sx__relay_submit_code(rc), msg);
}

/* A failed send's message: what went wrong with the message to `to`. */
static void send_error_msg(int rc, sx_pid to, char *msg, size_t cap)
{
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(to, txt, sizeof txt);
    if (rc == SX_ESTORAGE)
        snprintf(msg, cap,
                 "%s: the message could not be stored (the state store "
                 "failed); it was not delivered",
                 txt);
    else if (rc == SX_ENOTFOUND)
        snprintf(msg, cap, "no process %s", txt);
    else
        snprintf(msg, cap, "%s: %s", txt, sx_strerror(rc));
}

static void send_reply(sx__relay_conn *c, uint64_t id, int rc, sx_pid to)
{
    if (rc == 0) {
        sx__relay_reply_ok(c, id);
        return;
    }
    char msg[192];
    send_error_msg(rc, to, msg, sizeof msg);
    sx__relay_reply_error(c, id, sx_wire_code(rc), msg);
}

/* A send on a daemon with a state store (op_send). phase: 0 while op_send
 * is in sx_engine_send_async, 1 once the answer came during that call
 * (rc set; op_send replies), 2 once op_send has let go (the answer
 * replies through the hub). */
typedef struct {
    sx__relay_conn *c;
    sx__relay_hub *hub;
    uint64_t id;
    sx_pid to;
    int rc;
    _Atomic int phase;
} stored_send;

static void stored_sent(void *user, int rc)
{
    stored_send *ss = user;
    ss->rc = rc;
    int calling = 0;
    /* acq_rel: success publishes rc to op_send (its failed CAS acquires);
     * failure means op_send let go (phase 2), acquire to own ss. */
    if (atomic_compare_exchange_strong_explicit(&ss->phase, &calling, 1,
                                                memory_order_acq_rel,
                                                memory_order_acquire))
        return;
    sx_pack pk;
    sx_pack_init(&pk);
    if (rc == 0) {
        sx_pack_map(&pk, 2);
        sx_pack_str(&pk, "id");
        sx_pack_uint(&pk, ss->id);
        sx_pack_str(&pk, "ok");
        sx_pack_bool(&pk, true);
    } else {
        char msg[192];
        send_error_msg(rc, ss->to, msg, sizeof msg);
        sx_pack_map(&pk, 3);
        sx_pack_str(&pk, "id");
        sx_pack_uint(&pk, ss->id);
        sx_pack_str(&pk, "ok");
        sx_pack_bool(&pk, false);
        sx__relay_pack_error(&pk, sx_wire_code(rc), msg);
    }
    sx__relay_post_answer(ss->c, ss->hub, &pk);
    free(ss);
}

void sx__relay_send(sx__relay_conn *c, uint64_t id, sx_pid to,
                    const char *topic, sx_payload data)
{
    int rc;
    if (!c->srv->stored) {
        rc = sx_engine_send(c->srv->engine, c->mailbox, to, topic, data);
        send_reply(c, id, rc, to);
        return;
    }
    /* A daemon with a state store: a message to a checkpointed job is
     * acknowledged once stored (stored_sent answers from the store's
     * thread); any other is answered here, at once. */
    stored_send *ss = malloc(sizeof(*ss));
    if (ss == NULL) {
        sx__relay_reply_error(c, id, "internal", "out of memory");
        return;
    }
    *ss = (stored_send){ .c = c, .hub = c->srv->hub, .id = id, .to = to };
    atomic_init(&ss->phase, 0);
    sx__relay_conn_ref(c);
    sx__relay_hub_ref(c->srv->hub);
    rc = sx_engine_send_async(c->srv->engine, c->mailbox, to, topic, data,
                              stored_sent, ss);
    int calling = 0;
    /* acq_rel: on failure (the answer came first) acquire its rc; on
     * success release nothing but the hand-over: the answer, when it
     * comes, posts the reply itself. */
    if (rc == 0 && atomic_compare_exchange_strong_explicit(
                       &ss->phase, &calling, 2, memory_order_acq_rel,
                       memory_order_acquire))
        return;
    send_reply(c, id, rc != 0 ? rc : ss->rc, to);
    sx__relay_conn_unref(c);
    sx__relay_hub_unref(ss->hub);
    free(ss);
}

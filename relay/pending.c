/* relay/pending.c — the records behind `wait` and `subscribe`: one per
 * request, answered by an engine watch callback (sx_engine_watch), timed
 * out by a uv timer (wait's timeout_ms), or abandoned when its connection
 * closes. The callback may fire long after either of those (an IDLE
 * process finishes only when the engine stops), so a record is
 * refcounted: the watch's reference and the loop's.
 *
 * Dormant waits. The engine cannot cancel a watch, so a wait that times
 * out while its process goes on keeps its record until the process
 * finishes. A client that waits again and again on a long-lived process
 * (a wait with timeout_ms in a loop) would pile up one record per wait;
 * instead a timed-out wait goes into the server's dormant table, keyed by
 * PID, with its watch, its timer and the loop's reference, and the next
 * wait on that PID (from any connection) takes it over: a new id and
 * connection, its timer started again. So the records on a PID are at
 * most the waits on it at one time. The watch callback never reads the
 * request id (the loop changes it): it packs a wait's answer with a
 * fixed-width id, which the loop fills in before the answer goes out.
 *
 * Threads: watch_cb runs on whichever engine thread finishes the watched
 * process (or on the loop, inside sx_engine_watch, when it had finished
 * already) and reaches the loop only through the hub; everything else
 * runs on the server's loop thread. See relay/server.h and docs/RELAY.md.
 */
#include "relay/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The record whose sx_engine_watch this thread is inside (the loop
 * thread only ever sets it): a watch_cb that finds its own record here
 * runs inline, on the loop, for a process that had finished already. A
 * thread-local, so other threads' callbacks never see the loop's. */
static _Thread_local relay_pending *watching;

static void pending_free(relay_pending *p)
{
    sx__relay_hub_unref(p->hub);
    free(p);
}

void sx__relay_pending_unref(relay_pending *p)
{
    /* acq_rel: release our uses; the freeing thread acquires them. */
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1)
        pending_free(p);
}

/* The code a finished process's error travels under. */
static const char *outcome_code(int error)
{
    switch (error) {
    case SX_ETERMINATED:
        return "terminated";
    case SX_ECANCELLED:
        return "cancelled";
    case SX_ENOTFOUND:
        return "not_found";
    case SX_ECLOSED:
        return "closed";
    default:
        return "failed";
    }
}

/* The answer body for p: a wait's reply or a subscribe's exit push. code:
 * the error code to use instead of the outcome's own, or NULL. */
static void pack_outcome(sx_pack *pk, const relay_pending *p, const char *pid,
                         const sx_result *r, const char *code)
{
    bool wait = p->kind == RELAY_PEND_WAIT;
    sx_pack_map(pk, wait && r->error == 0 ? 4 : 3 + (wait ? 0 : 1));
    if (wait) {
        /* The id's bytes are filled in on the loop (id_fill): a uint64
         * of 8 bytes, whatever its value, at ID_AT. */
        static const uint8_t slot[9] = { 0xcf };
        sx_pack_str(pk, "id");
        sx_pack_raw(pk, (sx_payload){ slot, sizeof slot });
    } else {
        sx_pack_str(pk, "push");
        sx_pack_str(pk, "exit");
        sx_pack_str(pk, "pid");
        sx_pack_str(pk, pid);
    }
    sx_pack_str(pk, "ok");
    sx_pack_bool(pk, r->error == 0);
    if (r->error != 0) {
        sx__relay_pack_error(pk, code != NULL ? code : outcome_code(r->error),
                             r->error_msg != NULL ? r->error_msg
                                                  : sx_strerror(r->error));
        return;
    }
    sx_pack_str(pk, "result");
    sx_pack_raw(pk, r->value);
    if (wait) {
        sx_pack_str(pk, "steps");
        sx_pack_uint(pk, r->steps);
    }
}

/* Where a wait answer's id bytes are in its frame: the 4-byte length, the
 * map's one-byte header, "id" (3 bytes), 0xcf. */
#define ID_AT (SX_WIRE_HEADER + 1 + 3 + 1)

/* Writes id into a wait answer built by pack_outcome. [loop] */
static void id_fill(relay_out *o, uint64_t id)
{
    for (int i = 7; i >= 0; i--, id >>= 8)
        o->data[ID_AT + (size_t)i] = (uint8_t)id;
}

/* Called exactly once per successful sx_engine_watch, on the thread that
 * finished the process; must not block. Builds the answer (one
 * allocation) and hands it to the loop through the hub. */
static void watch_cb(void *user, sx_pid target, const sx_result *r)
{
    relay_pending *p = user;
    char pid[SX_PID_TEXT_MAX];
    sx_pid_format(target, pid, sizeof(pid));
    const char *msg = r->error == 0          ? ""
                      : r->error_msg != NULL ? r->error_msg
                                             : sx_strerror(r->error);
    /* 3 bytes per message byte: sx__relay_pack_error's U+FFFD. */
    size_t cap = SX_WIRE_HEADER + 160 + SX_PID_TEXT_MAX + 3 * strlen(msg) +
                 (r->error == 0 ? r->value.len : 0);
    relay_out *o = sx__relay_out_new(RELAY_OUT_DONE, cap);
    if (o != NULL) {
        sx_pack pk;
        sx_pack_init_fixed(&pk, o->data + SX_WIRE_HEADER, cap - SX_WIRE_HEADER);
        pack_outcome(&pk, p, pid, r, NULL);
        /* A frame the client would refuse must not be sent: a value that
         * is not one msgpack value, nested deeper than the wire allows,
         * or bigger than a frame. The client learns why instead. A str
         * that is not UTF-8 in the result goes as bin (sx__relay_out_utf8). */
        size_t fixed;
        if (pk.err != 0 || pk.len > p->max_frame ||
            sx__wire_check_utf8(pk.data, pk.len, &fixed) != 0 ||
            fixed > p->max_frame) {
            char why[128];
            snprintf(why, sizeof(why),
                     "the result cannot be sent (%zu bytes; malformed, too "
                     "big or nested too deep)",
                     r->value.len);
            sx_result bad = { SX_EFAILED, why, { NULL, 0 }, r->steps };
            sx_pack_reset(&pk);
            pack_outcome(&pk, p, pid, &bad, "internal");
            fixed = 0;
        }
        sx__relay_out_seal(o, pk.len);
        if (fixed != 0)
            o = sx__relay_out_utf8(o, fixed);
    }
    if (o == NULL)
        o = &p->oom; /* the loop answers `internal` */
    o->pend = p;     /* the watch's reference travels with the item */
    if (watching == p) {
        /* On the loop, inside sx_engine_watch: no hub, no doorbell. */
        p->inline_out = o;
        return;
    }
    /* release: pairs with the acquire in watch_start. */
    atomic_store_explicit(&p->fired, true, memory_order_release);
    if (sx__relay_hub_post(p->hub, o) != 0) {
        sx__relay_out_free(o);
        sx__relay_pending_unref(p);
    }
}

static void pending_unlink(relay_pending *p)
{
    relay_conn *c = p->conn;
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        c->pending = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
}

static void timer_closed(uv_handle_t *h)
{
    sx__relay_pending_unref(h->data); /* the loop's reference */
}

/* p leaves its connection and drops its reference to it (nothing reads
 * p->conn once done). [loop] */
static void pending_detach(relay_pending *p)
{
    p->done = true;
    pending_unlink(p);
    p->conn->n_pending--;
    sx__relay_conn_unref(p->conn);
    p->conn = NULL;
}

/* The loop lets go of p once its timer, if any, is closed. [loop] */
static void loop_release(relay_pending *p)
{
    if (p->has_timer) {
        uv_timer_stop(&p->timer);
        uv_close((uv_handle_t *)&p->timer, timer_closed);
    } else {
        sx__relay_pending_unref(p);
    }
}

/* p is answered, timed out or abandoned. [loop] */
static void pending_finish(relay_pending *p)
{
    pending_detach(p);
    loop_release(p);
}

/* ---- dormant waits [loop] ---- */

static size_t dorm_bucket(const sx_server *s, uint64_t id)
{
    id ^= id >> 31; /* the generation's bits too */
    id *= 0x9e3779b97f4a7c15ull;
    return (size_t)(id >> 32) & (s->dorm_cap - 1);
}

/* Files p under its PID; false when the table cannot grow (then p is
 * finished as before, and lives until its watch fires). */
static bool dorm_put(sx_server *s, relay_pending *p)
{
    if (s->dorm_n >= s->dorm_cap / 2) {
        size_t cap = s->dorm_cap > 0 ? 2 * s->dorm_cap : 64;
        relay_pending **t = calloc(cap, sizeof(*t));
        if (t == NULL && s->dorm_cap == 0)
            return false;
        if (t != NULL) {
            relay_pending **old = s->dorm;
            size_t old_cap = s->dorm_cap;
            s->dorm = t;
            s->dorm_cap = cap;
            for (size_t i = 0; i < old_cap; i++) {
                while (old[i] != NULL) {
                    relay_pending *q = old[i];
                    old[i] = q->dnext;
                    size_t b = dorm_bucket(s, q->pid.id);
                    q->dnext = s->dorm[b];
                    s->dorm[b] = q;
                }
            }
            free(old);
        } /* else: chains get longer, nothing is lost */
    }
    size_t b = dorm_bucket(s, p->pid.id);
    p->dnext = s->dorm[b];
    s->dorm[b] = p;
    p->dormant = true;
    s->dorm_n++;
    return true;
}

/* Takes p (dormant) out of the table. */
static void dorm_remove(sx_server *s, relay_pending *p)
{
    relay_pending **l = &s->dorm[dorm_bucket(s, p->pid.id)];
    while (*l != p)
        l = &(*l)->dnext;
    *l = p->dnext;
    p->dnext = NULL;
    p->dormant = false;
    s->dorm_n--;
}

/* A dormant wait on pid, taken out of the table, or NULL. */
static relay_pending *dorm_take(sx_server *s, sx_pid pid)
{
    if (s->dorm_n == 0)
        return NULL;
    for (relay_pending *q = s->dorm[dorm_bucket(s, pid.id)]; q != NULL;
         q = q->dnext) {
        if (sx_pid_eq(q->pid, pid)) {
            dorm_remove(s, q);
            return q;
        }
    }
    return NULL;
}

void sx__relay_dormant_close_all(sx_server *s)
{
    for (size_t i = 0; i < s->dorm_cap; i++) {
        while (s->dorm[i] != NULL) {
            relay_pending *p = s->dorm[i];
            dorm_remove(s, p);
            loop_release(p);
        }
    }
    free(s->dorm);
    s->dorm = NULL;
    s->dorm_cap = s->dorm_n = 0;
}

void sx__relay_pending_abandon_all(relay_conn *c)
{
    while (c->pending != NULL)
        pending_finish(c->pending);
}

static void timer_cb(uv_timer_t *t)
{
    relay_pending *p = t->data;
    if (p->done)
        return;
    /* acquire: pairs with the release in watch_cb. The process finished
     * and its answer is in the hub (the loop was held past the deadline,
     * and timers run before the doorbell): that answer is this wait's,
     * so it is not answered `timeout` and stays pending until the answer
     * is drained (the timer, one-shot, is stopped). */
    if (atomic_load_explicit(&p->fired, memory_order_acquire))
        return;
    relay_conn *c = p->conn;
    uint64_t id = p->id;
    sx__relay_conn_ref(c);
    pending_detach(p);
    if (c->srv->stopping || !dorm_put(c->srv, p))
        loop_release(p); /* the timer is stopped (it fired) */
    sx__relay_reply_error(c, id, "timeout", "no outcome within timeout_ms");
    sx__relay_conn_unref(c);
}

void sx__relay_pending_done(relay_pending *p, relay_out *o)
{
    if (p->dormant) {
        /* Its process finished with nobody waiting: the record goes. */
        dorm_remove(p->srv, p);
        loop_release(p);
        sx__relay_out_free(o);
        sx__relay_pending_unref(p); /* the watch's */
        return;
    }
    if (p->done || p->conn->state != RELAY_CONN_OPEN) {
        if (!p->done)
            pending_finish(p);
        sx__relay_out_free(o);
        sx__relay_pending_unref(p); /* the watch's */
        return;
    }
    relay_conn *c = p->conn;
    sx__relay_conn_ref(c);
    bool wait = p->kind == RELAY_PEND_WAIT;
    uint64_t id = p->id;
    sx_pid pid = p->pid;
    pending_finish(p);
    if (o->embedded) {
        /* The callback ran out of memory building the answer. */
        if (wait) {
            sx__relay_reply_error(c, id, "internal", "out of memory");
        } else {
            char txt[SX_PID_TEXT_MAX];
            sx_pid_format(pid, txt, sizeof(txt));
            sx_pack *pk = &c->srv->pk;
            sx_pack_reset(pk);
            sx_pack_map(pk, 4);
            sx_pack_str(pk, "push");
            sx_pack_str(pk, "exit");
            sx_pack_str(pk, "pid");
            sx_pack_str(pk, txt);
            sx_pack_str(pk, "ok");
            sx_pack_bool(pk, false);
            sx__relay_pack_error(pk, "internal", "out of memory");
            sx__relay_conn_reply(c);
        }
    } else {
        o->kind = wait ? RELAY_OUT_REPLY : RELAY_OUT_PUSH;
        if (wait)
            id_fill(o, id);
        if (wait) /* relaxed: a figure */
            atomic_fetch_add_explicit(&c->srv->st_requests, 1,
                                      memory_order_relaxed);
        sx__relay_conn_write(c, o);
    }
    sx__relay_conn_unref(c);
    sx__relay_pending_unref(p); /* the watch's */
}

/* Starts a wait (timeout_ms < 0: none) or a subscribe on pid. */
void sx__relay_watch_start(relay_conn *c, uint64_t id, uint8_t kind, sx_pid pid,
                           int64_t timeout_ms)
{
    if (c->n_pending >= SX_RELAY_MAX_PENDING) {
        sx__relay_reply_error(
            c, id, "limit",
            "too many waits and subscriptions on this connection");
        return;
    }
    relay_pending *p = kind == RELAY_PEND_WAIT ? dorm_take(c->srv, pid) : NULL;
    if (p != NULL) {
        /* A dormant wait on the same PID: it takes this request over. Its
         * watch is registered; if it fired meanwhile, the answer is on
         * its way through the hub and answers this request. */
        p->done = false;
        p->id = id;
        p->conn = c;
        sx__relay_conn_ref(c);
        p->next = c->pending;
        if (c->pending != NULL)
            c->pending->prev = p;
        c->pending = p;
        c->n_pending++;
        /* acquire: as below. */
        if (timeout_ms >= 0 && p->has_timer && /* dormant: it has one */
            !atomic_load_explicit(&p->fired, memory_order_acquire))
            uv_timer_start(&p->timer, timer_cb, (uint64_t)timeout_ms, 0);
        return;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        sx__relay_reply_error(c, id, "internal", "out of memory");
        return;
    }
    p->srv = c->srv;
    atomic_init(&p->refs, 2); /* the loop's and the watch's */
    p->kind = kind;
    p->id = id;
    p->pid = pid;
    p->conn = c;
    sx__relay_conn_ref(c);
    p->hub = c->srv->hub;
    sx__relay_hub_ref(p->hub);
    p->max_frame = c->srv->max_frame;
    p->oom.kind = RELAY_OUT_DONE;
    p->oom.embedded = 1;
    p->next = c->pending;
    if (c->pending != NULL)
        c->pending->prev = p;
    c->pending = p;
    c->n_pending++;
    watching = p;
    int rc = sx_engine_watch(c->srv->engine, pid, watch_cb, p);
    watching = NULL;
    if (rc != 0) {
        /* The callback will never run: its reference goes now. */
        sx__relay_pending_unref(p);
        pending_finish(p);
        sx__relay_reply_engine(c, id, rc, pid);
        return;
    }
    if (kind == RELAY_PEND_SUBSCRIBE)
        sx__relay_reply_ok(c, id); /* before the push */
    if (p->inline_out != NULL) {
        /* Finished already: answered now, in this loop iteration's
         * batch (the flusher writes it with the other replies). */
        relay_out *o = p->inline_out;
        p->inline_out = NULL;
        sx__relay_conn_ref(c);
        sx__relay_pending_done(p, o);
        sx__relay_conn_unref(c);
        return;
    }
    if (kind == RELAY_PEND_SUBSCRIBE)
        return; /* the push is drained from the hub later */
    /* acquire: pairs with the release in watch_cb; an answer already on
     * its way needs no timer (a 0 ms timer could beat it to the loop). */
    if (timeout_ms >= 0 &&
        !atomic_load_explicit(&p->fired, memory_order_acquire)) {
        if (uv_timer_init(&c->srv->loop, &p->timer) == 0) {
            p->timer.data = p;
            p->has_timer = true;
            uv_timer_start(&p->timer, timer_cb, (uint64_t)timeout_ms, 0);
        }
    }
}

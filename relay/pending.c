/* relay/pending.c — the records behind `wait` and `subscribe`, and the
 * engine watches that answer them.
 *
 * One engine watch per PID. The engine cannot cancel a watch: once
 * registered, it stays until its process finishes (or the engine stops).
 * So the server registers at most one per PID (sx__relay_watch, in a table by
 * PID) and hangs every wait and subscribe on that PID off it as a record
 * (sx__relay_pending) that belongs to the loop alone: a record goes as soon as
 * it is answered, its wait times out, or its connection closes, each in
 * O(1). What a client can leave behind is at most one watch per live
 * process it watched, which the process limit bounds, and never a record:
 * 65,000 waits that time out cost nothing once answered, and a client that
 * subscribes 65,536 times and hangs up leaves nothing of its own.
 *
 * The answer. When the process finishes, watch_cb (on the finishing
 * thread) builds one frame: a wait's reply with a fixed-width id (0xcf
 * and 8 bytes, filled in on the loop). The loop hands it to every record
 * on the watch: the last wait takes the frame itself, the others get a
 * copy with their own id, and a subscribe gets an exit push built from
 * the frame's fields. Usually there is exactly one wait, and the frame
 * goes out as built.
 *
 * A submit with "wait" is a third kind of record: a wait whose answers
 * carry the job's pid (with_pid copies the frame with it; submit_fail
 * answers a timeout or an error).
 *
 * It is one piece: a record lives on its watch's list and its
 * connection's, and the table of watches, the records and the answers
 * built from one frame are freed and handed over together (record_drop,
 * sx__relay_watch_done); split, each half would reach into the other's
 * lists.
 *
 * Threads: watch_cb runs on whichever engine thread finishes the watched
 * process (or on the loop, inside sx_engine_watch, when it had finished
 * already) and reaches the loop only through the hub; everything else
 * runs on the server's loop thread. See relay/server.h and docs/RELAY.md.
 */
#include "process/pack.h"
#include "relay/server.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The watch whose sx_engine_watch this thread is inside (the loop thread
 * only ever sets it): a watch_cb that finds its own watch here runs
 * inline, on the loop, for a process that had finished already. A
 * thread-local, so other threads' callbacks never see the loop's. */
static _Thread_local sx__relay_watch *watching;

static void watch_free(sx__relay_watch *w)
{
    sx__relay_hub_unref(w->hub);
    free(w);
}

void sx__relay_watch_unref(sx__relay_watch *w)
{
    /* acq_rel: release our uses; the freeing thread acquires them. */
    if (atomic_fetch_sub_explicit(&w->refs, 1, memory_order_acq_rel) == 1)
        watch_free(w);
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
    case SX_ETOOLARGE:
        return "too_large";
    case SX_ERESTART_LIMIT:
        return "restart_limit";
    case SX_ENOCONNECTION:
        return "noconnection";
    case SX_ESTOPPING: /* a stored job that runs again at the next start */
        return "stopping";
    case SX_EUNKNOWN_TYPE: /* a stored job whose type is gone */
        return "unknown_type";
    default:
        return "failed";
    }
}

/* A wait's answer body: {id, ok, result, steps} or {id, ok, error}. code:
 * the error code to use instead of the outcome's own, or NULL. The id's
 * bytes are filled in on the loop (id_fill): a uint64 of 8 bytes,
 * whatever its value, at ID_AT. checked: the value is one msgpack value
 * that sx__wire_value_utf8 passed, copied as it is; otherwise sx_pack_raw
 * reads it (and fails the packer if it is not one value). The server's
 * own keys go as the bytes sx_pack_str would write. */
static void pack_answer(sx_pack *pk, const sx_result *r, const char *code,
                        bool checked)
{
    if (r->error == 0) {
        static const uint8_t head[] = { 0x85, 0xa2, 'i', 'd', 0xcf, 0,
                                        0,    0,    0,   0,   0,    0,
                                        0,    0xa2, 'o', 'k', 0xc3, 0xa6,
                                        'r',  'e',  's', 'u', 'l',  't' };
        static const uint8_t steps[] = { 0xa5, 's', 't', 'e', 'p', 's' };
        sx__pack_bytes(pk, head, sizeof head);
        if (checked && r->value.len > 0)
            sx__pack_bytes(pk, r->value.data, r->value.len);
        else
            sx_pack_raw(pk, r->value); /* nil when there is none */
        sx__pack_bytes(pk, steps, sizeof steps);
        sx_pack_uint(pk, r->steps);
    } else {
        static const uint8_t slot[9] = { 0xcf };
        sx_pack_map(pk, 4);
        sx_pack_str(pk, "id");
        sx_pack_raw(pk, (sx_payload){ slot, sizeof slot });
        sx_pack_str(pk, "ok");
        sx_pack_bool(pk, false);
        sx__relay_pack_error(pk, code != NULL ? code : outcome_code(r->error),
                             r->error_msg != NULL ? r->error_msg
                                                  : sx_strerror(r->error));
    }
    /* The run that ended (docs/DURABILITY.md); 1 but for a stored job
     * that ran again after a restart. */
    static const uint8_t attempts[] = { 0xa8, 'a', 't', 't', 'e',
                                        'm',  'p', 't', 's' };
    sx__pack_bytes(pk, attempts, sizeof attempts);
    sx_pack_uint(pk, r->attempts > 0 ? r->attempts : 1);
}

/* How much longer a subscribe's exit push ({push, pid, ok, result}) may be
 * than the wait answer ({id, ok, result, steps}) it is built from: "push"
 * "exit" "pid" and a PID's text against "id" and its 9 bytes. */
#define EXIT_EXTRA (5 + 5 + 4 + 2 + SX_PID_TEXT_MAX)

/* Where a wait answer's id bytes are in its frame: the 4-byte length, the
 * map's one-byte header, "id" (3 bytes), 0xcf. */
#define ID_AT (SX_WIRE_HEADER + 1 + 3 + 1)

/* Writes id into a wait answer built by pack_answer. [loop] */
static void id_fill(sx__relay_out *o, uint64_t id)
{
    for (int i = 7; i >= 0; i--, id >>= 8)
        o->data[ID_AT + (size_t)i] = (uint8_t)id;
}

/* A reply to a submit with "wait" that is not its outcome (a timeout, an
 * error once the job had started): {id, ok: false, pid, [existing],
 * error}, so that the client can still reach the job. */
static void submit_fail(sx__relay_conn *c, uint64_t id, sx_pid pid,
                        bool existing, const char *code, const char *msg)
{
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(pid, txt, sizeof(txt));
    sx_pack *pk = sx__relay_reply_begin(c, id, false, existing ? 3 : 2);
    sx_pack_str(pk, "pid");
    sx_pack_str(pk, txt);
    if (existing) {
        sx_pack_str(pk, "existing");
        sx_pack_bool(pk, true);
    }
    sx__relay_pack_error(pk, code, msg);
    sx__relay_conn_reply(c);
}

/* A submit-and-wait's answer: a copy of the wait answer o (id not yet
 * filled) with "pid" (and "existing") after its id. NULL when out of
 * memory; *too_big when the copy would be over max_frame bytes. */
static sx__relay_out *with_pid(sx_server *s, const sx__relay_out *o, sx_pid pid,
                               bool existing, bool *too_big)
{
    uint8_t extra[32 + SX_PID_TEXT_MAX];
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(pid, txt, sizeof(txt));
    sx_pack pk;
    sx_pack_init_fixed(&pk, extra, sizeof(extra));
    sx_pack_str(&pk, "pid");
    sx_pack_str(&pk, txt);
    if (existing) {
        sx_pack_str(&pk, "existing");
        sx_pack_bool(&pk, true);
    }
    /* The answer's map header is a fixmap of at most 5 pairs (pack_answer;
     * sx__relay_out_utf8 keeps headers as they are), then "id" and its 9
     * bytes. */
    size_t head = ID_AT + 8;
    uint8_t map = o->data[SX_WIRE_HEADER];
    *too_big = false;
    if (pk.err != 0 || o->len < head || (map & 0xf0) != 0x80 ||
        (map & 0x0f) > 15 - 2)
        return NULL;
    size_t len = o->len + pk.len;
    if (len - SX_WIRE_HEADER > s->max_frame) {
        *too_big = true;
        return NULL;
    }
    sx__relay_out *n = sx__relay_reply_new(s, len);
    if (n == NULL)
        return NULL;
    memcpy(n->data, o->data, head);
    n->data[SX_WIRE_HEADER] = (uint8_t)(map + (existing ? 2 : 1));
    memcpy(n->data + head, extra, pk.len);
    memcpy(n->data + head + pk.len, o->data + head, o->len - head);
    sx__relay_out_seal(n, len - SX_WIRE_HEADER);
    return n;
}

/* Packs a wait's answer for r into pk, or, when the client could not
 * read it, an error saying why. Returns 0, or the body's length once its
 * strs that are not UTF-8 are rewritten as bin (sx__wire_utf8_fix): the
 * caller sends that rewrite. */
static size_t pack_checked(sx_pack *pk, const sx_result *r, size_t max_frame)
{
    /* The value is the one part of the answer that is not the server's
     * own (its keys, its numbers and sx__relay_pack_error's text, valid
     * UTF-8 by construction), so it alone is walked as a reader will: one
     * msgpack value, nested at most as deep as the map leaves it, its
     * strs that are not UTF-8 counted for the rewrite (vfixed: the
     * value's length once rewritten). */
    size_t fixed = 0, vfixed = 0;
    bool value_ok = r->error != 0 || r->value.len == 0 ||
                    sx__wire_value_utf8(r->value.data, r->value.len,
                                        SX_WIRE_MAX_DEPTH - 1, &vfixed) == 0;
    pack_answer(pk, r, NULL, value_ok);
    if (vfixed != 0 && pk->len <= max_frame)
        fixed = pk->len - r->value.len + vfixed;
    /* A frame the client would refuse must not be sent: a value that
     * is not one msgpack value (sx_pack_raw fails the packer), nested
     * deeper than the wire allows, or bigger than a frame. The client
     * learns why instead. (A subscribe's exit push, built from this
     * frame on the loop, may be up to EXIT_EXTRA bytes longer: exit_push
     * checks its own size.) */
    if (pk->err != 0 || !value_ok || pk->len > max_frame || fixed > max_frame) {
        char why[160];
        const char *code = "too_large";
        if (pk->err != 0) {
            code = "internal";
            snprintf(why, sizeof(why),
                     "the outcome could not be packed (%zu bytes)",
                     r->value.len);
        } else if (pk->len > max_frame || fixed > max_frame) {
            snprintf(why, sizeof(why),
                     "the outcome (%zu bytes) is larger than a frame "
                     "(%zu bytes)",
                     pk->len > fixed ? pk->len : fixed, max_frame);
        } else {
            snprintf(why, sizeof(why),
                     "the result cannot be sent: nested deeper than %d "
                     "levels in a frame, or not one msgpack value",
                     SX_WIRE_MAX_DEPTH);
        }
        sx_result bad = {
            SX_ETOOLARGE, why, { NULL, 0 }, r->steps, r->attempts
        };
        sx_pack_reset(pk);
        pack_answer(pk, &bad, code, false);
        fixed = 0;
    }
    return fixed;
}

/* Called exactly once per successful sx_engine_watch, on the thread that
 * finished the process; must not block. Builds the answer (one
 * allocation) and hands it to the loop through the hub. */
static void watch_cb(void *user, sx_pid target, const sx_result *r)
{
    sx__relay_watch *w = user;
    (void)target;
    const char *msg = r->error == 0          ? ""
                      : r->error_msg != NULL ? r->error_msg
                                             : sx_strerror(r->error);
    /* 3 bytes per message byte: sx__relay_pack_error's U+FFFD. */
    size_t cap = SX_WIRE_HEADER + 160 + 3 * strlen(msg) +
                 (r->error == 0 ? r->value.len : 0);
    sx__relay_out *o = sx__relay_out_new(SX__RELAY_OUT_DONE, cap);
    if (o != NULL) {
        sx_pack pk;
        sx_pack_init_fixed(&pk, o->data + SX_WIRE_HEADER, cap - SX_WIRE_HEADER);
        size_t fixed = pack_checked(&pk, r, w->max_frame);
        sx__relay_out_seal(o, pk.len);
        /* A str that is not UTF-8 in the result goes as bin. */
        if (fixed != 0)
            o = sx__relay_out_utf8(o, fixed);
    }
    if (o == NULL)
        o = &w->oom; /* the loop answers `internal` */
    o->watch = w;    /* the watch's reference travels with the item */
    if (watching == w) {
        /* On the loop, inside sx_engine_watch: no hub, no doorbell. */
        w->inline_out = o;
        return;
    }
    /* release: pairs with the acquires in watch_start and timer_cb. */
    atomic_store_explicit(&w->fired, true, memory_order_release);
    if (sx__relay_hub_post(w->hub, o) != 0) {
        sx__relay_out_free(o);
        sx__relay_watch_unref(w);
    }
}

void sx__relay_reply_outcome(sx__relay_conn *c, uint64_t id, const sx_result *r)
{
    sx_pack *pk = &c->srv->pk;
    sx_pack_reset(pk);
    size_t fixed = pack_checked(pk, r, c->srv->max_frame);
    if (pk->err == 0)
        for (int i = 7; i >= 0; i--, id >>= 8)
            pk->data[ID_AT - SX_WIRE_HEADER + (size_t)i] = (uint8_t)id;
    if (fixed == 0 || pk->err != 0) {
        /* pack_checked walked the body as a reader will, or packed its
         * error answer from the server's own scalars and text. */
        sx__relay_conn_reply_checked(c);
        return;
    }
    /* Its strs that are not UTF-8 go as bin: the rewrite is sent. */
    sx__relay_out *o = sx__relay_reply_new(c->srv, SX_WIRE_HEADER + pk->len);
    if (o != NULL) {
        memcpy(o->data + SX_WIRE_HEADER, pk->data, pk->len);
        sx__relay_out_seal(o, pk->len);
        o = sx__relay_out_utf8(o, fixed);
    }
    if (o == NULL) {
        sx__relay_conn_close(c); /* out of memory, as a reply's */
        return;
    }
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->srv->st_requests, 1, memory_order_relaxed);
    sx__relay_conn_write(c, o);
}

/* ---- the table of watches by PID [loop] ---- */

static size_t wt_bucket(const sx_server *s, uint64_t id)
{
    id ^= id >> 31; /* the generation's bits too */
    id *= 0x9e3779b97f4a7c15ull;
    return (size_t)(id >> 32) & (s->wt_cap - 1);
}

static void wt_figure(sx_server *s)
{
    /* relaxed: a figure for sx_server_stats_get. */
    atomic_store_explicit(&s->st_watches, s->wt_n, memory_order_relaxed);
}

/* Files w under its PID; false when the table cannot be made. */
static bool wt_put(sx_server *s, sx__relay_watch *w)
{
    if (s->wt_n >= s->wt_cap / 2) {
        size_t cap = s->wt_cap > 0 ? 2 * s->wt_cap : 64;
        sx__relay_watch **t = calloc(cap, sizeof(*t));
        if (t == NULL && s->wt_cap == 0)
            return false;
        if (t != NULL) {
            sx__relay_watch **old = s->wt;
            size_t old_cap = s->wt_cap;
            s->wt = t;
            s->wt_cap = cap;
            for (size_t i = 0; i < old_cap; i++) {
                while (old[i] != NULL) {
                    sx__relay_watch *q = old[i];
                    old[i] = q->hnext;
                    size_t b = wt_bucket(s, q->pid.id);
                    q->hnext = s->wt[b];
                    s->wt[b] = q;
                }
            }
            free(old);
        } /* else: chains get longer, nothing is lost */
    }
    size_t b = wt_bucket(s, w->pid.id);
    w->hnext = s->wt[b];
    s->wt[b] = w;
    w->in_table = true;
    s->wt_n++;
    wt_figure(s);
    return true;
}

/* Takes w out of the table (a chain holds distinct PIDs: short). */
static void wt_remove(sx_server *s, sx__relay_watch *w)
{
    sx__relay_watch **l = &s->wt[wt_bucket(s, w->pid.id)];
    while (*l != w)
        l = &(*l)->hnext;
    *l = w->hnext;
    w->hnext = NULL;
    w->in_table = false;
    s->wt_n--;
    wt_figure(s);
}

static sx__relay_watch *wt_find(sx_server *s, sx_pid pid)
{
    if (s->wt_n == 0)
        return NULL;
    for (sx__relay_watch *q = s->wt[wt_bucket(s, pid.id)]; q != NULL;
         q = q->hnext)
        if (sx_pid_eq(q->pid, pid))
            return q;
    return NULL;
}

void sx__relay_watches_close_all(sx_server *s)
{
    for (size_t i = 0; i < s->wt_cap; i++) {
        while (s->wt[i] != NULL) {
            sx__relay_watch *w = s->wt[i];
            wt_remove(s, w);
            sx__relay_watch_unref(w); /* the table's */
        }
    }
    free(s->wt);
    s->wt = NULL;
    s->wt_cap = s->wt_n = 0;
    wt_figure(s);
}

/* ---- records [loop] ---- */

static void record_closed(uv_handle_t *h)
{
    free(h->data);
}

/* Takes r off its watch and its connection and frees it (once its timer,
 * if any, is closed). */
static void record_drop(sx__relay_pending *r)
{
    sx__relay_watch *w = r->w;
    if (r->wprev != NULL)
        r->wprev->wnext = r->wnext;
    else
        w->waiters = r->wnext;
    if (r->wnext != NULL)
        r->wnext->wprev = r->wprev;
    sx__relay_conn *c = r->conn;
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        c->pending = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    c->n_pending--;
    sx_server *s = c->srv;
    s->n_waits--;
    /* relaxed: a figure. */
    atomic_store_explicit(&s->st_waits, s->n_waits, memory_order_relaxed);
    if (r->has_timer) {
        uv_timer_stop(&r->timer);
        r->timer.data = r;
        uv_close((uv_handle_t *)&r->timer, record_closed);
    } else if (s->rec_free_n < SX_RELAY_REC_CACHE) {
        r->next = s->rec_free;
        s->rec_free = r;
        s->rec_free_n++;
    } else {
        free(r);
    }
}

void sx__relay_records_free(sx_server *s)
{
    while (s->rec_free != NULL) {
        sx__relay_pending *r = s->rec_free;
        s->rec_free = r->next;
        free(r);
    }
    s->rec_free_n = 0;
}

/* A zeroed record (with room for a timer when timed), from the cache
 * when there is one; NULL when out of memory. */
static sx__relay_pending *record_new(sx_server *s, bool timed)
{
    if (!timed && s->rec_free != NULL) {
        sx__relay_pending *r = s->rec_free;
        s->rec_free = r->next;
        s->rec_free_n--;
        memset(r, 0, offsetof(sx__relay_pending, timer));
        return r;
    }
    return calloc(1, timed ? sizeof(sx__relay_pending)
                           : offsetof(sx__relay_pending, timer));
}

void sx__relay_pending_abandon_all(sx__relay_conn *c)
{
    while (c->pending != NULL)
        record_drop(c->pending);
}

static void timer_cb(uv_timer_t *t)
{
    sx__relay_pending *r = t->data;
    /* acquire: pairs with the release in watch_cb. The process finished
     * and its answer is in the hub (the loop was held past the deadline,
     * and timers run before the doorbell): that answer is this wait's,
     * so it is not answered `timeout` and stays until the answer is
     * drained (the timer, one-shot, is stopped). */
    if (atomic_load_explicit(&r->w->fired, memory_order_acquire))
        return;
    sx__relay_conn *c = r->conn;
    uint64_t id = r->id;
    bool submit = r->kind == SX__RELAY_PEND_SUBMIT, existing = r->existing;
    sx_pid pid = r->w->pid;
    record_drop(r);
    /* The watch stays (the engine cannot cancel it): the next wait on
     * this PID uses it again. */
    if (submit)
        submit_fail(c, id, pid, existing, "timeout",
                    "no outcome within timeout_ms (the job goes on)");
    else
        sx__relay_reply_error(c, id, "timeout", "no outcome within timeout_ms");
}

/* Starts an exit push for the PID text txt in pk (reset): the map of 4
 * pairs up to its "ok", which the caller follows with a result or an
 * error. */
static void exit_begin(sx_pack *pk, const char *txt, bool ok)
{
    sx_pack_reset(pk);
    sx_pack_map(pk, 4);
    sx_pack_str(pk, "push");
    sx_pack_str(pk, "exit");
    sx_pack_str(pk, "pid");
    sx_pack_str(pk, txt);
    sx_pack_str(pk, "ok");
    sx_pack_bool(pk, ok);
}

/* An exit push for pid built from a wait answer's frame o: its ok, and
 * its result or error. */
static void exit_push(sx__relay_conn *c, sx_pid pid, const sx__relay_out *o)
{
    char txt[SX_PID_TEXT_MAX];
    sx_pid_format(pid, txt, sizeof(txt));
    sx_payload body = { o->data + SX_WIRE_HEADER, o->len - SX_WIRE_HEADER };
    sx_payload v = { NULL, 0 };
    bool ok = sx_map_get(body, "result", &v) == 0;
    if (!ok && sx_map_get(body, "error", &v) != 0)
        v = (sx_payload){ NULL, 0 };
    sx_pack *pk = &c->srv->pk;
    exit_begin(pk, txt, ok);
    sx_pack_str(pk, ok ? "result" : "error");
    if (v.len > 0)
        sx_pack_raw(pk, v);
    else
        sx_pack_nil(pk);
    if (pk->err == 0 && pk->len > c->srv->max_frame) {
        /* A result within EXIT_EXTRA bytes of the frame limit: its wait
         * answer fits, its exit push does not. The client gets the
         * reason rather than a frame it would refuse. */
        exit_begin(pk, txt, false);
        sx__relay_pack_error(pk, "too_large",
                             "the outcome is larger than a frame");
    }
    if (pk->err == 0)
        sx__relay_conn_push(c);
    else /* out of memory: the client is told so rather than nothing */
        sx__relay_conn_close(c);
}

/* The answer to one record r, from the watch's frame o (NULL: the
 * callback ran out of memory). take: r may have o itself (it is the
 * last record); returns whether it took it. */
static bool answer(sx__relay_pending *r, sx_pid pid, sx__relay_out *o,
                   bool take)
{
    sx__relay_conn *c = r->conn;
    bool wait = r->kind == SX__RELAY_PEND_WAIT;
    bool submit = r->kind == SX__RELAY_PEND_SUBMIT, existing = r->existing;
    uint64_t id = r->id;
    record_drop(r);
    if (c->state != SX__RELAY_CONN_OPEN)
        return false;
    if (submit) {
        /* Its own frame: the wait answer with the pid in it. */
        bool too_big = false;
        sx__relay_out *mine =
            o != NULL ? with_pid(c->srv, o, pid, existing, &too_big) : NULL;
        if (mine == NULL) {
            submit_fail(c, id, pid, existing,
                        too_big ? "too_large" : "internal",
                        too_big ? "the outcome is larger than a frame"
                                : "out of memory");
            return false;
        }
        id_fill(mine, id);
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&c->srv->st_requests, 1,
                                  memory_order_relaxed);
        sx__relay_conn_write(c, mine);
        return false;
    }
    if (o == NULL) {
        if (wait) {
            sx__relay_reply_error(c, id, "internal", "out of memory");
            return false;
        }
        char txt[SX_PID_TEXT_MAX];
        sx_pid_format(pid, txt, sizeof(txt));
        sx_pack *pk = &c->srv->pk;
        exit_begin(pk, txt, false);
        sx__relay_pack_error(pk, "internal", "out of memory");
        sx__relay_conn_push(c);
        return false;
    }
    if (!wait) {
        exit_push(c, pid, o);
        return false;
    }
    sx__relay_out *mine = o;
    if (!take) {
        mine = sx__relay_reply_new(c->srv, o->len);
        if (mine == NULL) {
            sx__relay_reply_error(c, id, "internal", "out of memory");
            return false;
        }
        memcpy(mine->data, o->data, o->len);
        mine->len = o->len;
    }
    mine->kind = SX__RELAY_OUT_REPLY;
    mine->watch = NULL;
    id_fill(mine, id);
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->srv->st_requests, 1, memory_order_relaxed);
    sx__relay_conn_write(c, mine);
    return take;
}

void sx__relay_watch_done(sx__relay_watch *w, sx__relay_out *o)
{
    if (w->in_table)
        wt_remove(w->srv, w);
    sx__relay_out *frame = o->embedded ? NULL : o;
    bool taken = false;
    while (w->waiters != NULL) {
        sx__relay_pending *r = w->waiters;
        /* The last wait takes the frame itself; any other record gets a
         * copy (or a push built from it). */
        bool last = r->wnext == NULL;
        if (answer(r, w->pid, frame, last && !taken))
            taken = true;
    }
    if (!taken && frame != NULL)
        sx__relay_out_free(frame);
    sx__relay_watch_unref(w); /* the watch's */
    sx__relay_watch_unref(w); /* the table's */
}

/* Whether c and its server have room for one more record: NULL, or the
 * `limit` message (in buf). */
static const char *no_room(sx__relay_conn *c, char *buf, size_t cap)
{
    sx_server *s = c->srv;
    if (c->n_pending + c->n_reserved >= SX_RELAY_MAX_PENDING)
        return "too many waits and subscriptions on this connection (65536)";
    if (s->n_waits + s->n_reserved >= s->max_waits) {
        snprintf(buf, cap,
                 "too many waits and subscriptions in the server (%zu, "
                 "--max-waits)",
                 s->max_waits);
        return buf;
    }
    return NULL;
}

bool sx__relay_wait_room(sx__relay_conn *c, uint64_t id)
{
    char buf[128];
    const char *why = no_room(c, buf, sizeof(buf));
    if (why != NULL)
        sx__relay_reply_error(c, id, "limit", why);
    return why == NULL;
}

void sx__relay_wait_reserve(sx__relay_conn *c)
{
    c->n_reserved++;
    c->srv->n_reserved++;
}

void sx__relay_wait_unreserve(sx__relay_conn *c)
{
    c->n_reserved--;
    c->srv->n_reserved--;
}

/* Answers request id of kind with an error once it could not start: a
 * submit's reply carries its job's pid. */
static void start_fail(sx__relay_conn *c, uint64_t id, uint8_t kind, sx_pid pid,
                       bool existing, const char *code, const char *msg)
{
    if (kind == SX__RELAY_PEND_SUBMIT)
        submit_fail(c, id, pid, existing, code, msg);
    else
        sx__relay_reply_error(c, id, code, msg);
}

/* Starts a wait or a submit's wait (timeout_ms < 0: none) or a subscribe
 * on pid. */
static void watch_start(sx__relay_conn *c, uint64_t id, uint8_t kind,
                        sx_pid pid, bool existing, int64_t timeout_ms)
{
    sx_server *s = c->srv;
    char buf[160];
    const char *why = no_room(c, buf, sizeof(buf));
    if (why != NULL) {
        start_fail(c, id, kind, pid, existing, "limit", why);
        return;
    }
    bool timed = kind != SX__RELAY_PEND_SUBSCRIBE && timeout_ms >= 0;
    sx__relay_pending *r = record_new(s, timed);
    if (r == NULL) {
        start_fail(c, id, kind, pid, existing, "internal", "out of memory");
        return;
    }
    sx__relay_watch *w = wt_find(s, pid);
    if (w == NULL) {
        w = calloc(1, sizeof(*w));
        if (w != NULL)
            w->pid = pid;
        if (w == NULL || !wt_put(s, w)) {
            free(w);
            free(r);
            start_fail(c, id, kind, pid, existing, "internal", "out of memory");
            return;
        }
        atomic_init(&w->refs, 2); /* the table's and the engine watch's */
        w->hub = s->hub;
        w->srv = s;
        sx__relay_hub_ref(w->hub);
        w->max_frame = s->max_frame;
        w->oom.kind = SX__RELAY_OUT_DONE;
        w->oom.embedded = 1;
        watching = w;
        int rc = sx_engine_watch(s->engine, pid, watch_cb, w);
        watching = NULL;
        if (rc != 0) {
            /* The callback will never run: both references go now. */
            wt_remove(s, w);
            sx__relay_watch_unref(w);
            sx__relay_watch_unref(w);
            free(r);
            if (kind == SX__RELAY_PEND_SUBMIT) {
                char txt[SX_PID_TEXT_MAX];
                sx_pid_format(pid, txt, sizeof(txt));
                snprintf(buf, sizeof(buf), "%s: %s", txt, sx_strerror(rc));
                submit_fail(c, id, pid, existing, sx_wire_code(rc), buf);
            } else {
                sx__relay_reply_engine(c, id, rc, pid);
            }
            return;
        }
    }
    r->kind = kind;
    r->existing = existing;
    r->id = id;
    r->conn = c;
    r->w = w;
    r->wnext = w->waiters;
    if (w->waiters != NULL)
        w->waiters->wprev = r;
    w->waiters = r;
    r->next = c->pending;
    if (c->pending != NULL)
        c->pending->prev = r;
    c->pending = r;
    c->n_pending++;
    s->n_waits++;
    s->spin_since = 0; /* the gate's spin starts again (hub.c) */
    /* relaxed: a figure. */
    atomic_store_explicit(&s->st_waits, s->n_waits, memory_order_relaxed);
    if (kind == SX__RELAY_PEND_SUBSCRIBE)
        sx__relay_reply_ok(c, id); /* before the push */
    if (w->inline_out != NULL) {
        /* Finished already: answered now, in this loop iteration's batch
         * (the flusher writes it with the other replies). */
        sx__relay_out *o = w->inline_out;
        w->inline_out = NULL;
        sx__relay_watch_done(w, o);
        return;
    }
    /* acquire: pairs with the release in watch_cb; an answer already on
     * its way needs no timer (a 0 ms timer could beat it to the loop). */
    if (timed && !atomic_load_explicit(&w->fired, memory_order_acquire) &&
        uv_timer_init(&s->loop, &r->timer) == 0) {
        r->timer.data = r;
        r->has_timer = true;
        uv_timer_start(&r->timer, timer_cb, (uint64_t)timeout_ms, 0);
    }
}

void sx__relay_watch_start(sx__relay_conn *c, uint64_t id, uint8_t kind,
                           sx_pid pid, int64_t timeout_ms)
{
    watch_start(c, id, kind, pid, false, timeout_ms);
}

void sx__relay_submit_wait(sx__relay_conn *c, uint64_t id, sx_pid pid,
                           bool existing, int64_t timeout_ms)
{
    watch_start(c, id, SX__RELAY_PEND_SUBMIT, pid, existing, timeout_ms);
}

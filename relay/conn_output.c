/* relay/conn_output.c — a connection's output: frames written in batches
 * (one writev per connection per loop iteration, by the flusher),
 * back-pressure (reads stop over max_output, a connection past twice it is
 * dropped as slow), replies framed from the server's packer, items taken
 * from the hub, and the connection's mailbox: messages become pushes, and
 * the ones dropped are told of with `dropped` notices where the gap is.
 *
 * Threads: everything here runs on the server's loop thread except the
 * mailbox callback and the notices it posts (any engine thread: whoever
 * sends to the mailbox). See relay/server.h and docs/RELAY.md.
 */
#include "process/utf8.h"
#include "relay/server.h"

#include <stdlib.h>
#include <string.h>

/* ---- the mailbox: messages become pushes [any thread] ---- */

#define DROPPED_MAX SX_RELAY_DROPPED_MAX

static void post_notice(sx__relay_conn *c);
static void drop_messages(sx__relay_conn *c, uint64_t n)
{
    /* relaxed: counts (see the field); the notice's place among the
     * messages is set by the hub's mutex, not by this order. */
    atomic_fetch_add_explicit(&c->drops_unsaid, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->srv->st_push_drops, n, memory_order_relaxed);
}

/* A message callback's drop: with the connection's output at half its
 * limit or less (a message too big alone, or one that could not be
 * framed), no drain is coming to tell of it, so the notice goes now. */
static void drop_message_now(sx__relay_conn *c)
{
    drop_messages(c, 1);
    /* seq_cst: the add above and the loads below against the loop's
     * store of unsent_pub and its load of drops_unsaid (tell_drops, after
     * its own fence): without both fences each side could see the other's
     * old value, and neither would tell of this drop until the next
     * message. relaxed loads: a limit check (see the fields). */
    atomic_thread_fence(memory_order_seq_cst);
    size_t pending = atomic_load_explicit(&c->queued, memory_order_relaxed) +
                     atomic_load_explicit(&c->unsent_pub, memory_order_relaxed);
    if (pending <= c->max_output / 2)
        post_notice(c);
}

/* Runs on the sender's thread for every message to the connection's
 * mailbox, in order per sender; it must not block. It builds the push
 * frame here (one allocation) and queues it in the hub, whose FIFO keeps
 * the per-sender order. A message that would take the connection's
 * queued and unsent bytes past max_output is dropped, and so is one that
 * cannot be framed (out of memory, data nested too deep or too big for a
 * frame): the client loses that message, never its connection or the
 * answers to its own requests, and learns how many it lost from a
 * `dropped` push placed where the gap is. */
void sx__relay_mailbox_cb(void *user, const sx_message *m)
{
    sx__relay_conn *c = user;
    size_t tl = strlen(m->topic);
    /* The data must be one value a client can read once it sits in the
     * push's map (so nested at most SX_WIRE_MAX_DEPTH - 1 deep): a push
     * the client would refuse must not be sent. The same walk finds the
     * strs in it that are not UTF-8 (they go as bin: fixed, the data's
     * rewritten length). The rest of the push is the server's own text. */
    size_t fixed = 0;
    if (m->data.len > 0 &&
        sx__wire_value_utf8(m->data.data, m->data.len, SX_WIRE_MAX_DEPTH - 1,
                            &fixed) != 0) {
        drop_message_now(c);
        return;
    }
    size_t dlen = fixed != 0 ? fixed : m->data.len;
    /* Bound on the body: map header, the keys, a PID's text, the topic
     * with its header, the data (nil when empty, rewritten when its strs
     * are not all UTF-8); plus room for a `dropped` notice in front. */
    size_t cap =
        DROPPED_MAX + SX_WIRE_HEADER + 96 + SX_PID_TEXT_MAX + tl + dlen;
    /* relaxed: limit checks only (see the fields). */
    size_t pending = atomic_load_explicit(&c->queued, memory_order_relaxed) +
                     atomic_load_explicit(&c->unsent_pub, memory_order_relaxed);
    if (pending + cap > c->max_output) {
        drop_message_now(c);
        return;
    }
    sx__relay_out *o = sx__relay_out_new(SX__RELAY_OUT_PUSH, cap);
    if (o == NULL) {
        drop_message_now(c);
        return;
    }
    char from[SX_PID_TEXT_MAX];
    sx_pid_format(m->from, from, sizeof(from));
    sx_pack pk;
    sx_pack_init_fixed(&pk, o->data + DROPPED_MAX + SX_WIRE_HEADER,
                       cap - DROPPED_MAX - SX_WIRE_HEADER);
    sx_pack_map(&pk, 4);
    sx_pack_str(&pk, "push");
    sx_pack_str(&pk, "message");
    sx_pack_str(&pk, "from");
    sx_pack_str(&pk, from);
    sx_pack_str(&pk, "topic");
    /* Every way into the engine refuses a topic that is not UTF-8; were
     * one to come anyway, it would go as bin, as a payload's str does. */
    if (sx__utf8_valid((const unsigned char *)m->topic, tl))
        sx_pack_strn(&pk, m->topic, tl);
    else
        sx_pack_bin(&pk, m->topic, tl);
    sx_pack_str(&pk, "data");
    if (fixed == 0) {
        sx_pack_raw(&pk, m->data);
    } else if (pk.err == 0 && pk.cap - pk.len >= fixed) {
        /* The rare path: the data with its bad strs as bin, written in
         * place (pk is this function's own fixed writer). */
        sx__wire_value_fix(m->data.data, m->data.len, pk.data + pk.len);
        pk.len += fixed;
    } else {
        pk.err = SX_ELIMIT;
    }
    /* A frame the client would refuse (a body over max_frame) must not be
     * sent either. */
    if (pk.err != 0 || pk.len > c->srv->max_frame) {
        sx__relay_out_free(o);
        drop_message_now(c);
        return;
    }
    /* The frame is built at DROPPED_MAX: the room in front is for a
     * notice of earlier drops, which the post puts there when there are
     * some (in the hub's order, sx__relay_hub_post_push). */
    sx__relay_out_seal_at(o, DROPPED_MAX, pk.len);
    o->conn = c;
    sx__relay_conn_ref(c); /* the item's reference */
    /* relaxed: a limit check (see the field). */
    atomic_fetch_add_explicit(&c->queued, o->len, memory_order_relaxed);
    size_t len = o->len;
    if (sx__relay_hub_post_push(c->srv->hub, o, c) != 0) {
        atomic_fetch_sub_explicit(&c->queued, len, memory_order_relaxed);
        sx__relay_out_free(o);
        sx__relay_conn_unref(c);
    }
}

/* Posts a `dropped` notice alone for what drops_unsaid holds (nothing
 * when a message took it first; out of memory: told later). Through the
 * hub, so it lands behind every message posted before it. [any thread] */
static void post_notice(sx__relay_conn *c)
{
    sx__relay_out *o = sx__relay_out_new(SX__RELAY_OUT_PUSH, DROPPED_MAX);
    if (o == NULL)
        return;
    o->off = DROPPED_MAX; /* len 0: the notice alone */
    o->note_only = 1;     /* never dropped: one per drain, 40 bytes */
    o->conn = c;
    sx__relay_conn_ref(c);
    if (sx__relay_hub_post_push(c->srv->hub, o, c) != 0) {
        sx__relay_out_free(o);
        sx__relay_conn_unref(c);
    }
}

/* A notice for the loop's own drops, written now (ahead of everything
 * still in the hub, all of which came after them). false when out of
 * memory (told later). [loop] */
static bool write_loop_notice(sx__relay_conn *c)
{
    sx__relay_out *n = sx__relay_out_new(SX__RELAY_OUT_PUSH, DROPPED_MAX);
    if (n == NULL)
        return false;
    n->len = sx__relay_pack_dropped(n->data, c->loop_unsaid);
    n->note_only = 1;
    c->loop_unsaid = 0;
    sx__relay_conn_write(c, n);
    return true;
}

/* When no message follows a drop, the loop tells of it once the
 * connection's output has drained to half its limit. [loop] */
static void tell_drops(sx__relay_conn *c)
{
    if (c->state != SX__RELAY_CONN_OPEN || c->unsent > c->max_output / 2)
        return;
    if (c->loop_unsaid > 0 && !write_loop_notice(c))
        return;
    /* seq_cst: pairs with the fence in drop_message_now (the store of
     * unsent_pub in set_unsent comes before this in program order).
     * relaxed load: see drops_unsaid. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&c->drops_unsaid, memory_order_relaxed) != 0)
        post_notice(c);
}

/* ---- writing [loop] ---- */

static void set_unsent(sx__relay_conn *c, size_t n)
{
    c->unsent = n;
    /* relaxed: read by mailbox callbacks for a limit check only. */
    atomic_store_explicit(&c->unsent_pub, n, memory_order_relaxed);
    /* relaxed: a figure; the loop is its only writer. */
    _Atomic uint64_t *peak = &c->srv->st_output_peak;
    if (n > atomic_load_explicit(peak, memory_order_relaxed))
        atomic_store_explicit(peak, n, memory_order_relaxed);
}

/* Frees the frames not yet handed to libuv and takes c off the server's
 * dirty list (a closed connection's memory may go before the flush). */
void sx__relay_conn_batch_drop(sx__relay_conn *c)
{
    while (c->batch != NULL) {
        sx__relay_out *o = c->batch;
        c->batch = o->next;
        set_unsent(c, c->unsent - o->len);
        sx__relay_out_done(c->srv, o);
    }
    c->batch_tail = NULL;
    if (!c->dirty)
        return;
    sx__relay_conn **pp = &c->srv->dirty;
    while (*pp != c)
        pp = &(*pp)->dirty_next;
    *pp = c->dirty_next;
    c->dirty = false;
    c->dirty_next = NULL;
}

static void drop_slow(sx__relay_conn *c)
{
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->srv->st_slow_drops, 1, memory_order_relaxed);
    sx__relay_conn_close(c);
}

/* A half-closed connection with nothing left to answer or write closes. */
static bool half_done(sx__relay_conn *c)
{
    if (!c->half_closed || c->n_pending > 0 || c->unsent > 0)
        return false;
    sx__relay_conn_close(c);
    return true;
}

/* Frees a write request's items (the first carries wlen; the rest hang
 * off next). */
static void write_cb(uv_write_t *req, int status)
{
    sx__relay_out *o = (sx__relay_out *)req; /* req is the first member */
    sx__relay_conn *c = req->data;
    set_unsent(c, c->unsent - o->wlen);
    while (o != NULL) {
        sx__relay_out *next = o->next;
        sx__relay_out_done(c->srv, o);
        o = next;
    }
    if (c->state == SX__RELAY_CONN_CLOSED)
        return;
    if (status < 0) {
        sx__relay_conn_close(c);
        return;
    }
    if (c->state == SX__RELAY_CONN_DRAINING) {
        if (c->unsent == 0)
            sx__relay_conn_close(c);
        return;
    }
    if (half_done(c))
        return;
    tell_drops(c);
    if (!c->reading && !c->in_more && !c->srv->stopping &&
        c->unsent <= c->max_output / 2)
        sx__relay_conn_pump(c);
}

/* Writes up to SX_RELAY_WRITE_BUFS frames off the front of c's batch:
 * first uv_try_write (one writev, no request, when nothing is queued in
 * libuv), then one uv_write for what the socket did not take. false when
 * the connection was closed (a write error). */
static bool flush_some(sx__relay_conn *c)
{
    uv_buf_t bufs[SX_RELAY_WRITE_BUFS];
    unsigned n = 0;
    sx__relay_out *group = c->batch, *last = NULL;
    for (sx__relay_out *o = group; o != NULL && n < SX_RELAY_WRITE_BUFS;
         o = o->next) {
        bufs[n++] = uv_buf_init((char *)o->data + o->off, (unsigned)o->len);
        last = o;
    }
    c->batch = last->next;
    if (c->batch == NULL)
        c->batch_tail = NULL;
    last->next = NULL;
    size_t off = 0; /* bytes of group's first item already written */
    if (uv_stream_get_write_queue_size(&c->h.stream) == 0) {
        int w = uv_try_write(&c->h.stream, bufs, n);
        if (w < 0 && w != UV_EAGAIN && w != UV_ENOSYS) {
            while (group != NULL) { /* the connection is gone */
                sx__relay_out *next = group->next;
                set_unsent(c, c->unsent - group->len);
                sx__relay_out_done(c->srv, group);
                group = next;
            }
            sx__relay_conn_close(c);
            return false;
        }
        size_t done = w > 0 ? (size_t)w : 0;
        set_unsent(c, c->unsent - done);
        while (group != NULL && done >= group->len) {
            sx__relay_out *next = group->next;
            done -= group->len;
            sx__relay_out_done(c->srv, group);
            group = next;
        }
        off = done;
    }
    if (group == NULL)
        return true;
    n = 0;
    size_t left = 0;
    for (sx__relay_out *o = group; o != NULL; o = o->next) {
        size_t skip = o == group ? off : 0;
        bufs[n++] = uv_buf_init((char *)o->data + o->off + skip,
                                (unsigned)(o->len - skip));
        left += o->len - skip;
    }
    group->wlen = left;
    group->req.data = c;
    if (uv_write(&group->req, &c->h.stream, bufs, n, write_cb) != 0) {
        set_unsent(c, c->unsent - left);
        while (group != NULL) {
            sx__relay_out *next = group->next;
            sx__relay_out_done(c->srv, group);
            group = next;
        }
        sx__relay_conn_close(c);
        return false;
    }
    return true;
}

/* Writes c's whole batch; then, as a write callback would, closes a
 * draining connection that has nothing left, or resumes reading. */
static void conn_flush(sx__relay_conn *c)
{
    while (c->batch != NULL && c->state != SX__RELAY_CONN_CLOSED)
        if (!flush_some(c))
            return;
    if (c->state == SX__RELAY_CONN_DRAINING && c->unsent == 0) {
        sx__relay_conn_close(c);
    } else if (c->state == SX__RELAY_CONN_OPEN && !half_done(c)) {
        tell_drops(c);
        if (!c->reading && !c->in_more && !c->srv->stopping &&
            c->unsent <= c->max_output / 2)
            sx__relay_conn_pump(c);
    }
}

void sx__relay_flush_cb(uv_prepare_t *h)
{
    sx_server *s = h->data;
    /* pump may produce more frames (dirtying a connection again): the
     * loop runs until the list stays empty. */
    while (s->dirty != NULL) {
        sx__relay_conn *c = s->dirty;
        s->dirty = c->dirty_next;
        c->dirty = false;
        c->dirty_next = NULL;
        conn_flush(c);
    }
    uv_prepare_stop(h);
}

void sx__relay_conn_write(sx__relay_conn *c, sx__relay_out *o)
{
    if (c->state != SX__RELAY_CONN_OPEN) {
        sx__relay_out_done(c->srv, o);
        return;
    }
    /* A message push onto a connection already over its limit is
     * dropped, counted, and told of later (with a notice it carried, whose
     * count is owed again). Anything past twice the limit (wait answers
     * keep coming while reads are stopped): the client does not read;
     * drop the connection rather than grow without bound. One frame alone
     * on an empty connection always goes. */
    if (o->kind == SX__RELAY_OUT_PUSH && !o->note_only &&
        c->unsent > c->max_output) {
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&c->srv->st_push_drops, 1,
                                  memory_order_relaxed);
        c->loop_unsaid += 1 + o->dropped;
        sx__relay_out_free(o);
        return;
    }
    /* The loop's own drops are told in front of the next push it
     * writes: exactly where they were. */
    if (o->kind == SX__RELAY_OUT_PUSH && !o->note_only && c->loop_unsaid > 0)
        write_loop_notice(c);
    if (c->unsent > 0 && c->unsent + o->len > 2 * c->max_output) {
        sx__relay_out_free(o);
        drop_slow(c);
        return;
    }
    if (o->kind == SX__RELAY_OUT_PUSH) /* relaxed: a figure */
        atomic_fetch_add_explicit(&c->srv->st_pushes, 1, memory_order_relaxed);
    /* Batched: the flusher writes it with everything else this loop
     * iteration produces for c, in the order produced. */
    o->next = NULL;
    if (c->batch_tail != NULL)
        c->batch_tail->next = o;
    else
        c->batch = o;
    c->batch_tail = o;
    set_unsent(c, c->unsent + o->len);
    if (!c->dirty) {
        sx_server *s = c->srv;
        c->dirty = true;
        c->dirty_next = s->dirty;
        s->dirty = c;
        if (c->dirty_next == NULL)
            uv_prepare_start(&s->flusher, sx__relay_flush_cb);
    }
    if (c->unsent > c->max_output)
        sx__relay_conn_reading(c, false);
}

/* Frames srv->pk's body and writes it as a reply; false when it cannot
 * (out of memory, a body over 4 GiB or, with check, one a reader would
 * refuse): the connection is closed. check: walk the body first. */
static bool conn_frame(sx__relay_conn *c, bool check)
{
    sx_server *s = c->srv;
    if (s->pk.err != 0) {
        sx__relay_conn_close(c); /* out of memory building the reply */
        return false;
    }
    sx_payload body = sx_pack_payload(&s->pk);
    /* The body passes the check a reader applies (one map, not too deep:
     * a raw value packed into it may be anybody's), then it is copied
     * behind its header. */
    if (body.len > UINT32_MAX ||
        (check && sx_wire_check(body.data, body.len) != 0)) {
        sx__relay_conn_close(c);
        return false;
    }
    sx__relay_out *o = sx__relay_reply_new(s, SX_WIRE_HEADER + body.len);
    if (o == NULL) {
        sx__relay_conn_close(c);
        return false;
    }
    memcpy(o->data + SX_WIRE_HEADER, body.data, body.len);
    sx__relay_out_seal(o, body.len);
    sx__relay_conn_write(c, o);
    return true;
}

void sx__relay_conn_push(sx__relay_conn *c)
{
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->srv->st_pushes, 1, memory_order_relaxed);
    conn_frame(c, true);
}

void sx__relay_conn_reply(sx__relay_conn *c)
{
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->srv->st_requests, 1, memory_order_relaxed);
    conn_frame(c, true);
}

void sx__relay_conn_reply_checked(sx__relay_conn *c)
{
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->srv->st_requests, 1, memory_order_relaxed);
    conn_frame(c, false);
}

/* ---- items from the hub [loop] ---- */

void sx__relay_conn_take(sx_server *s, sx__relay_out *o)
{
    (void)s;
    sx__relay_conn *c = o->conn;
    switch (o->kind) {
    case SX__RELAY_OUT_PUSH:
        /* relaxed: see the field. */
        atomic_fetch_sub_explicit(&c->queued, o->len, memory_order_relaxed);
        sx__relay_conn_write(c, o);
        sx__relay_conn_unref(c); /* the item's reference */
        break;
    case SX__RELAY_OUT_DONE:
        sx__relay_watch_done(o->watch, o);
        break;
    case SX__RELAY_OUT_ANSWER:
        /* A submit with "wait": the room held for its wait goes back
         * first (its wait, starting below, takes it again). */
        if (o->reserved)
            sx__relay_wait_unreserve(c);
        if (o->then_wait || o->oom_reply) {
            /* A submit with "wait" whose job started: its wait starts
             * now, and answers it (relay/pending.c). Or its answer
             * could not be built. */
            if (c->state == SX__RELAY_CONN_OPEN && o->then_wait)
                sx__relay_submit_wait(c, o->wait_id, o->wait_pid,
                                      o->wait_existing, o->wait_ms);
            else if (c->state == SX__RELAY_CONN_OPEN)
                sx__relay_reply_error(c, o->wait_id, "internal",
                                      "out of memory");
            sx__relay_out_free(o);
            sx__relay_conn_unref(c); /* the item's reference */
            break;
        }
        /* relaxed: a figure (requests answered). */
        atomic_fetch_add_explicit(&c->srv->st_requests, 1,
                                  memory_order_relaxed);
        sx__relay_conn_write(c, o); /* a reply: never dropped */
        sx__relay_conn_unref(c);    /* the item's reference */
        break;
    default:
        sx__relay_out_free(o);
    }
}

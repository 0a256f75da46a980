/* relay/conn_output.c — one client connection of the relay server: accept,
 * reads through the streaming decoder, framed writes with back-pressure,
 * the connection's mailbox, and its lifetime (a reference count, because
 * hub items and the more list may outlive the socket).
 *
 * Threads: everything here runs on the server's loop thread except
 * mailbox_cb (any engine thread: whoever sends to the mailbox) and the
 * reference counting (any thread). See relay/server.h and docs/RELAY.md.
 */
#include "process/fault.h"
#include "process/utf8.h"
#include "relay/server.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- references ---- */

void sx__relay_conn_ref(sx__relay_conn *c)
{
    /* relaxed: the caller holds a reference, or runs inside the mailbox
     * callback, which the mailbox's lifetime keeps before the loop drops
     * its own (sx_engine_mailbox_free waits for it). */
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

void sx__relay_conn_unref(sx__relay_conn *c)
{
    /* acq_rel: release our uses; the freeing thread acquires them all.
     * By the last drop the handle is closed and the decoder freed, so
     * only plain memory is left, which any thread may free. */
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
        free(c);
}

/* ---- the mailbox: messages become pushes [any thread] ---- */

#define DROPPED_MAX SX_RELAY_DROPPED_MAX

/* n messages to c's mailbox are lost: counted, and the client will be
 * told (before the next message that gets through, or once its output
 * drains). [any thread] */
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
static void mailbox_cb(void *user, const sx_message *m)
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

/* ---- closing [loop] ---- */

static void unauth_remove(sx__relay_conn *c);

static void handle_closed(uv_handle_t *h)
{
    sx__relay_conn *c = h->data;
    if (c->dec != NULL)
        sx_wire_decoder_free(c->dec);
    c->dec = NULL;
    sx__relay_conn_unref(c); /* the loop's reference */
}

static void set_unsent(sx__relay_conn *c, size_t n);

/* Frees the frames not yet handed to libuv and takes c off the server's
 * dirty list (a closed connection's memory may go before the flush). */
static void batch_drop(sx__relay_conn *c)
{
    while (c->batch != NULL) {
        sx__relay_out *o = c->batch;
        c->batch = o->next;
        set_unsent(c, c->unsent - o->len);
        sx__relay_out_free(o);
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

void sx__relay_conn_close(sx__relay_conn *c)
{
    if (c->state == SX__RELAY_CONN_CLOSED)
        return;
    sx_server *s = c->srv;
    c->state = SX__RELAY_CONN_CLOSED;
    unauth_remove(c);
    if (c->authed) {
        c->authed = false;
        s->n_authed--;
    }
    if (c->half_closed) {
        c->half_closed = false;
        if (--s->n_half == 0)
            uv_timer_stop(&s->hup);
    }
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    /* relaxed: a figure (server.h: st_*). */
    atomic_fetch_sub_explicit(&s->st_connections, 1, memory_order_relaxed);
    /* After this no mailbox callback runs or will run: the items it
     * queued hold references and are dropped by the loop. */
    if (c->has_mailbox)
        sx_engine_mailbox_free(s->engine, c->mailbox);
    c->has_mailbox = false;
    sx__relay_pending_abandon_all(c);
    batch_drop(c);
    /* Pending writes are cancelled: their callbacks run before ours. */
    uv_close((uv_handle_t *)&c->h.stream, handle_closed);
}

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

static void drop_slow(sx__relay_conn *c)
{
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->srv->st_slow_drops, 1, memory_order_relaxed);
    sx__relay_conn_close(c);
}

/* ---- reading [loop] ---- */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    sx__relay_conn *c = h->data;
    /* One buffer for the whole server: read_cb hands its bytes to the
     * decoder (which copies) before the loop reads anything else. */
    buf->base = c->srv->rbuf;
    buf->len = sizeof(c->srv->rbuf);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

/* Whether a client that sent EOF still reads: a Unix socket whose peer
 * only shut down its sending side (a peer that closed leaves POLLHUP).
 * Over TCP a half-close and a close look alike (a FIN): false. */
static bool peer_reads(sx__relay_conn *c)
{
    uv_os_fd_t fd;
    if (c->h.stream.type != UV_NAMED_PIPE ||
        uv_fileno((const uv_handle_t *)&c->h.stream, &fd) != 0)
        return false;
    struct pollfd pf = { .fd = fd, .events = POLLIN };
    return poll(&pf, 1, 0) >= 0 && !(pf.revents & (POLLHUP | POLLERR));
}

/* Every second while some connection is half-closed: those whose client
 * went away since are closed (their pending records dropped). */
static void hup_cb(uv_timer_t *t)
{
    sx_server *s = t->data;
    sx__relay_conn *next;
    for (sx__relay_conn *c = s->conns; c != NULL; c = next) {
        next = c->next;
        if (c->half_closed && !peer_reads(c))
            sx__relay_conn_close(c);
    }
}

/* A half-closed connection with nothing left to answer or write closes. */
static bool half_done(sx__relay_conn *c)
{
    if (!c->half_closed || c->n_pending > 0 || c->unsent > 0)
        return false;
    sx__relay_conn_close(c);
    return true;
}

static void reading(sx__relay_conn *c, bool on)
{
    if (c->reading == on || c->state == SX__RELAY_CONN_CLOSED)
        return;
    if (on) {
        if (uv_read_start(&c->h.stream, alloc_cb, read_cb) != 0) {
            sx__relay_conn_close(c);
            return;
        }
    } else {
        uv_read_stop(&c->h.stream);
    }
    c->reading = on;
}

/* Answers the frames the decoder holds while the connection is under its
 * output limit, then reads more; over the limit it stops reading until
 * writes drain below half of it (write_cb calls back here). */
static void pump(sx__relay_conn *c)
{
    if (c->pumping)
        return;
    c->pumping = true;
    unsigned turn = 0;
    while (c->state == SX__RELAY_CONN_OPEN) {
        if (turn++ == SX_RELAY_PUMP_BATCH) {
            /* Its turn is over: the rest after the other connections'
             * I/O (reading stops meanwhile, so libuv reads no more of
             * this one into the decoder either). */
            reading(c, false);
            if (!c->in_more) {
                sx_server *s = c->srv;
                c->in_more = true;
                c->more_at = s->iter;
                sx__relay_conn_ref(c);
                c->more_next = s->more;
                s->more = c;
                uv_idle_start(&s->again, sx__relay_again_cb);
                uv_check_start(&s->tick, sx__relay_tick_cb);
            }
            break;
        }
        if (c->unsent > c->max_output) {
            reading(c, false);
            break;
        }
        sx_payload body;
        int rc = sx_wire_decoder_next(c->dec, &body);
        if (rc == 0) {
            if (!c->half_closed) /* else the client sends nothing more */
                reading(c, true);
            break;
        }
        if (rc < 0) {
            /* relaxed: a figure. */
            atomic_fetch_add_explicit(&c->srv->st_bad_frames, 1,
                                      memory_order_relaxed);
            sx__relay_bad_frame(c, rc);
            break;
        }
        sx__relay_handle(c, body);
    }
    c->pumping = false;
}

void sx__relay_again_cb(uv_idle_t *h)
{
    (void)h;
}

void sx__relay_tick_cb(uv_check_t *h)
{
    sx_server *s = h->data;
    s->accepted_now = 0;
    /* Only what was held back in an earlier iteration goes on: what this
     * iteration's poll held back waits for the next poll, which reads
     * everyone else first. */
    sx__relay_conn *list = s->more, *keep = NULL;
    s->more = NULL;
    while (list != NULL) {
        sx__relay_conn *c = list;
        list = c->more_next;
        if (c->more_at == s->iter && c->state == SX__RELAY_CONN_OPEN &&
            !s->stopping) {
            c->more_next = keep;
            keep = c;
            continue;
        }
        c->more_next = NULL;
        c->in_more = false;
        /* Over its output limit it waits for its writes, as before. */
        if (c->state == SX__RELAY_CONN_OPEN && !s->stopping &&
            c->unsent <= c->max_output)
            pump(c); /* may hold it back again, for the next iteration */
        sx__relay_conn_unref(c);
    }
    while (keep != NULL) {
        sx__relay_conn *c = keep;
        keep = c->more_next;
        c->more_next = s->more;
        s->more = c;
    }
    for (int i = 0; i < 2; i++) {
        if (s->accept_owed[i] && s->accept_owed_at[i] != s->iter &&
            !s->stopping) {
            s->accept_owed[i] = false;
            sx__relay_accept(
                i == 0 ? (uv_stream_t *)&s->pipe : (uv_stream_t *)&s->tcp, 0);
        }
    }
    s->iter++;
    if (s->more == NULL && !s->accept_owed[0] && !s->accept_owed[1] &&
        s->accepted_now == 0) {
        /* Nothing held back: neither runs until something is again (a
         * tick per loop iteration would cost every iteration). */
        uv_idle_stop(&s->again);
        uv_check_stop(&s->tick);
    }
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    sx__relay_conn *c = st->data;
    if (nread == 0)
        return;
    if (c->state == SX__RELAY_CONN_DRAINING && nread > 0)
        return; /* read and dropped: closing with unread bytes would
                   reset a TCP connection before our last frame lands */
    if (nread < 0) {
        /* EOF or an error: the client sends nothing more. A client that
         * only shut down its sending side still reads: the replies already
         * produced (in the batch, or in a write libuv holds) go out whole
         * first, as a draining connection's do; closing now would lose
         * them or cut one mid-frame. libuv has stopped reading at EOF. */
        /* With waits or subscribes pending, a client that still reads
         * gets their answers too (each request gets exactly one reply):
         * the connection stays open, not reading, until they are
         * answered and written (half_done) or the client goes away. */
        if (nread == UV_EOF && c->n_pending > 0 && peer_reads(c)) {
            reading(c, false);
            c->half_closed = true;
            sx_server *s = c->srv;
            if (s->n_half++ == 0)
                uv_timer_start(&s->hup, hup_cb, 1000, 1000);
            return;
        }
        if (nread == UV_EOF && c->unsent > 0) {
            reading(c, false);
            c->state = SX__RELAY_CONN_DRAINING;
            return;
        }
        sx__relay_conn_close(c);
        return;
    }
    if (sx_wire_decoder_feed(c->dec, buf->base, (size_t)nread) != 0) {
        sx__relay_conn_close(c);
        return;
    }
    pump(c);
}

/* ---- writing [loop] ---- */

/* Frees a write request's items (the first carries wlen; the rest hang
 * off next). */
static void write_cb(uv_write_t *req, int status)
{
    sx__relay_out *o = (sx__relay_out *)req; /* req is the first member */
    sx__relay_conn *c = req->data;
    set_unsent(c, c->unsent - o->wlen);
    while (o != NULL) {
        sx__relay_out *next = o->next;
        sx__relay_out_free(o);
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
        pump(c);
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
                sx__relay_out_free(group);
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
            sx__relay_out_free(group);
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
            sx__relay_out_free(group);
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
            pump(c);
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
        sx__relay_out_free(o);
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
        reading(c, false);
}

/* Frames srv->pk's body and writes it as a reply; false when out of
 * memory (the connection is closed). */
static bool conn_frame(sx__relay_conn *c)
{
    sx_server *s = c->srv;
    if (s->pk.err != 0) {
        sx__relay_conn_close(c); /* out of memory building the reply */
        return false;
    }
    sx_payload body = sx_pack_payload(&s->pk);
    sx__relay_out *o =
        sx__relay_out_new(SX__RELAY_OUT_REPLY, SX_WIRE_HEADER + body.len);
    if (o == NULL) {
        sx__relay_conn_close(c);
        return false;
    }
    sx_pack fr;
    sx_pack_init_fixed(&fr, o->data, o->cap);
    if (sx_wire_frame(&fr, body) != 0) {
        sx__relay_out_free(o);
        sx__relay_conn_close(c);
        return false;
    }
    o->len = fr.len;
    sx__relay_conn_write(c, o);
    return true;
}

void sx__relay_conn_push(sx__relay_conn *c)
{
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->srv->st_pushes, 1, memory_order_relaxed);
    conn_frame(c);
}

void sx__relay_conn_reply(sx__relay_conn *c)
{
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->srv->st_requests, 1, memory_order_relaxed);
    conn_frame(c);
}

void sx__relay_conn_drain(sx__relay_conn *c)
{
    if (c->state != SX__RELAY_CONN_OPEN)
        return;
    unauth_remove(c); /* it has had its answer: no deadline, no slot */
    c->state = SX__RELAY_CONN_DRAINING;
    if (c->unsent == 0) {
        sx__relay_conn_close(c);
        return;
    }
    /* Keep reading (and dropping) until the last frame is written. */
    reading(c, true);
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
    default:
        sx__relay_out_free(o);
    }
}

/* ---- accepting [loop] ---- */

static void refused_closed(uv_handle_t *h)
{
    free(h);
}

static void refuse(uv_stream_t *listener);

/* A spare handle is closed: free for the next refusal, and the one owed
 * meanwhile (if any) is accepted again (memory may be back). */
static void spare_closed(uv_handle_t *h)
{
    sx_server *s = h->data;
    struct sx__relay_spare *sp = &s->spare[h == &s->spare[0].h.handle ? 0 : 1];
    uv_stream_t *listener =
        sp == &s->spare[0] ? (uv_stream_t *)&s->pipe : (uv_stream_t *)&s->tcp;
    sp->busy = false;
    if (sp->owed) {
        sp->owed = false;
        if (!s->stopping)
            sx__relay_accept(listener, 0);
    }
}

/* Takes the pending connection off the listener and closes it: libuv
 * stops accepting until the one it holds is taken. With no memory for a
 * handle, the listener's spare takes it; with the spare busy closing the
 * last one, the connection is owed and the spare's close callback comes
 * back for it. */
static void refuse(uv_stream_t *listener)
{
    sx_server *s = listener->data;
    bool pipe = listener == (uv_stream_t *)&s->pipe;
    uv_stream_t *h = NULL;
    if (pipe) {
        uv_pipe_t *p =
            SX__FAULT(SX__FAULT_RELAY_REFUSE) ? NULL : malloc(sizeof(*p));
        if (p != NULL && uv_pipe_init(&s->loop, p, 0) == 0)
            h = (uv_stream_t *)p;
        else
            free(p);
    } else {
        uv_tcp_t *t =
            SX__FAULT(SX__FAULT_RELAY_REFUSE) ? NULL : malloc(sizeof(*t));
        if (t != NULL && uv_tcp_init(&s->loop, t) == 0)
            h = (uv_stream_t *)t;
        else
            free(t);
    }
    if (h != NULL) {
        uv_accept(listener, h);
        uv_close((uv_handle_t *)h, refused_closed);
        return;
    }
    struct sx__relay_spare *sp = &s->spare[pipe ? 0 : 1];
    if (sp->busy) {
        sp->owed = true;
        return;
    }
    /* Cannot fail: neither allocates (a TCP handle of AF_UNSPEC opens no
     * socket until uv_accept gives it one). */
    if (pipe)
        uv_pipe_init(&s->loop, &sp->h.pipe, 0);
    else
        uv_tcp_init(&s->loop, &sp->h.tcp);
    sp->busy = true;
    sp->h.handle.data = s;
    uv_accept(listener, &sp->h.stream);
    uv_close(&sp->h.handle, spare_closed);
}

/* ---- authentication [loop] ---- */

static void unauth_figure(sx_server *s)
{
    /* relaxed: a figure for sx_server_stats_get. */
    atomic_store_explicit(&s->st_unauth, s->n_unauth, memory_order_relaxed);
}

static void unauth_remove(sx__relay_conn *c)
{
    sx_server *s = c->srv;
    if (!c->in_unauth)
        return;
    c->in_unauth = false;
    if (c->uprev != NULL)
        c->uprev->unext = c->unext;
    else
        s->unauth_head = c->unext;
    if (c->unext != NULL)
        c->unext->uprev = c->uprev;
    else
        s->unauth_tail = c->uprev;
    c->uprev = c->unext = NULL;
    s->n_unauth--;
    unauth_figure(s);
    if (s->n_unauth == 0)
        uv_timer_stop(&s->auth_timer);
}

/* Closes c, not yet through hello, with an error frame (id 0). */
static void unauth_close(sx__relay_conn *c, const char *code, const char *msg)
{
    unauth_remove(c);
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->srv->st_auth_closed, 1, memory_order_relaxed);
    sx__relay_refuse(c, code, msg);
}

static void auth_cb(uv_timer_t *t);

/* Arms the timer for the oldest connection's deadline. */
static void auth_arm(sx_server *s)
{
    if (s->unauth_head == NULL)
        return;
    uint64_t now = uv_now(&s->loop);
    uint64_t at = s->unauth_head->auth_deadline;
    uv_timer_start(&s->auth_timer, auth_cb, at > now ? at - now : 0, 0);
}

/* Connections whose deadline passed without hello and the token close;
 * the list is in accept order, so deadlines are in order too. */
static void auth_cb(uv_timer_t *t)
{
    sx_server *s = t->data;
    uint64_t now = uv_now(&s->loop);
    while (s->unauth_head != NULL && s->unauth_head->auth_deadline <= now) {
        char msg[96];
        snprintf(msg, sizeof(msg),
                 "no hello with the token within %" PRIu64 " ms",
                 s->auth_timeout_ms);
        unauth_close(s->unauth_head, "timeout", msg);
    }
    auth_arm(s);
}

void sx__relay_auth_init(sx_server *s)
{
    s->auth_timer.data = s;
}

/* A new connection to a server with a token waits for hello, at most
 * max_unauth of them: to make room, the oldest is closed (so that
 * connections that never authenticate cannot keep a token holder out),
 * and none of them takes one of max_connections. */
static void unauth_add(sx__relay_conn *c)
{
    sx_server *s = c->srv;
    if (s->n_unauth >= s->max_unauth && s->unauth_head != NULL)
        unauth_close(s->unauth_head, "limit",
                     "too many connections waiting to authenticate: the "
                     "oldest is closed");
    c->in_unauth = true;
    uint64_t now = uv_now(&s->loop);
    c->auth_deadline = s->auth_timeout_ms > UINT64_MAX - now
                           ? UINT64_MAX
                           : now + s->auth_timeout_ms;
    c->uprev = s->unauth_tail;
    c->unext = NULL;
    if (s->unauth_tail != NULL)
        s->unauth_tail->unext = c;
    else
        s->unauth_head = c;
    s->unauth_tail = c;
    if (s->n_unauth++ == 0)
        auth_arm(s);
    unauth_figure(s);
}

size_t sx__relay_frame_limit(const sx__relay_conn *c)
{
    size_t max = c->srv->max_frame;
    if (c->authed || max < SX_RELAY_HELLO_MAX_FRAME)
        return max;
    return SX_RELAY_HELLO_MAX_FRAME;
}

bool sx__relay_conn_authed(sx__relay_conn *c)
{
    sx_server *s = c->srv;
    if (c->authed)
        return true;
    unauth_remove(c);
    if (s->n_authed >= s->max_connections)
        return false;
    c->authed = true;
    s->n_authed++;
    /* From now on frames up to the server's limit. */
    sx_wire_decoder_set_max(c->dec, s->max_frame);
    return true;
}

/* ---- accepting, continued [loop] ---- */

static int conn_open(sx__relay_conn *c)
{
    sx_server *s = c->srv;
    /* Before hello with the token, a hello's worth of frame. */
    int rc = sx_wire_decoder_new(sx__relay_frame_limit(c), &c->dec);
    if (rc != 0)
        return rc;
    rc = sx_engine_mailbox_new(s->engine, mailbox_cb, c, &c->mailbox);
    if (rc != 0)
        return rc;
    c->has_mailbox = true;
    reading(c, true);
    return c->state == SX__RELAY_CONN_OPEN ? 0 : SX_ECLOSED;
}

void sx__relay_accept(uv_stream_t *listener, int status)
{
    sx_server *s = listener->data;
    if (status < 0 || s->stopping)
        return;
    if (s->token != NULL) {
        /* At most max_unauth / 2 new connections per loop iteration: the
         * rest wait on the listener (libuv polls it again once we take
         * the one it holds) until the tick after this iteration's poll.
         * So a connection is closed to make room only after a poll has
         * read whatever it sent (a token holder's hello), never by a
         * burst that came in behind it. */
        size_t budget = s->max_unauth / 2 > 0 ? s->max_unauth / 2 : 1;
        if (s->accepted_now >= budget) {
            int k = listener == (uv_stream_t *)&s->pipe ? 0 : 1;
            s->accept_owed[k] = true;
            s->accept_owed_at[k] = s->iter;
            uv_idle_start(&s->again, sx__relay_again_cb);
            uv_check_start(&s->tick, sx__relay_tick_cb);
            return;
        }
        if (s->accepted_now++ == 0) /* reset after this iteration's poll */
            uv_check_start(&s->tick, sx__relay_tick_cb);
    }
    sx__relay_conn *c =
        SX__FAULT(SX__FAULT_RELAY_CONN) ? NULL : calloc(1, sizeof(*c));
    if (c == NULL) {
        refuse(listener);
        return;
    }
    int rc = listener == (uv_stream_t *)&s->pipe
                 ? uv_pipe_init(&s->loop, &c->h.pipe, 0)
                 : uv_tcp_init(&s->loop, &c->h.tcp);
    if (rc != 0) {
        free(c);
        refuse(listener);
        return;
    }
    atomic_init(&c->refs, 1);
    c->srv = s;
    c->h.stream.data = c;
    c->max_output = s->max_output;
    c->state = SX__RELAY_CONN_OPEN;
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    /* relaxed: figures. */
    atomic_fetch_add_explicit(&s->st_connections, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->st_accepted, 1, memory_order_relaxed);
    if (s->token == NULL) {
        c->authed = true;
        s->n_authed++;
    }
    if ((rc = uv_accept(listener, &c->h.stream)) != 0) {
        sx__relay_conn_close(c);
        return;
    }
    if (listener == (uv_stream_t *)&s->tcp)
        uv_tcp_nodelay(&c->h.tcp, 1);
    if (c->authed && s->n_authed > s->max_connections) {
        sx__relay_refuse(c, "limit", "too many connections");
        return;
    }
    if (conn_open(c) != 0) {
        sx__relay_conn_close(c);
        return;
    }
    if (!c->authed)
        unauth_add(c);
}

/* relay/conn.c — one client connection of the relay server, its life and
 * its reading side: the reference count (hub items and the more list may
 * outlive the socket), reads through the streaming decoder, the pump that
 * answers the frames read a turn at a time, half-closed clients, draining
 * and closing. The output (writes, back-pressure, the mailbox's pushes) is
 * relay/conn_output.c; accepting and the token gate are relay/accept.c.
 *
 * Threads: everything here runs on the server's loop thread except the
 * reference counting (any thread). See relay/server.h and docs/RELAY.md.
 */
#include "relay/server.h"

#include <poll.h>
#include <stdlib.h>

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

void sx__relay_conn_reading(sx__relay_conn *c, bool on)
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
 * writes drain below half of it (the write callback and the flusher,
 * relay/conn_output.c, call back here). */
void sx__relay_conn_pump(sx__relay_conn *c)
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
            sx__relay_conn_reading(c, false);
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
            sx__relay_conn_reading(c, false);
            break;
        }
        sx_payload body;
        int rc = sx_wire_decoder_next(c->dec, &body);
        if (rc == 0) {
            if (!c->half_closed) /* else the client sends nothing more */
                sx__relay_conn_reading(c, true);
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
            sx__relay_conn_pump(
                c); /* may hold it back again, for the next iteration */
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
         * answered and written (half_done, relay/conn_output.c) or the
         * client goes away. */
        if (nread == UV_EOF && c->n_pending > 0 && peer_reads(c)) {
            sx__relay_conn_reading(c, false);
            c->half_closed = true;
            sx_server *s = c->srv;
            if (s->n_half++ == 0)
                uv_timer_start(&s->hup, hup_cb, 1000, 1000);
            return;
        }
        if (nread == UV_EOF && c->unsent > 0) {
            sx__relay_conn_reading(c, false);
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
    sx__relay_conn_pump(c);
}

/* ---- draining and closing [loop] ---- */

void sx__relay_conn_drain(sx__relay_conn *c)
{
    if (c->state != SX__RELAY_CONN_OPEN)
        return;
    sx__relay_unauth_remove(
        c); /* it has had its answer: no deadline, no slot */
    c->state = SX__RELAY_CONN_DRAINING;
    if (c->unsent == 0) {
        sx__relay_conn_close(c);
        return;
    }
    /* Keep reading (and dropping) until the last frame is written. */
    sx__relay_conn_reading(c, true);
}

static void handle_closed(uv_handle_t *h)
{
    sx__relay_conn *c = h->data;
    if (c->dec != NULL)
        sx_wire_decoder_free(c->dec);
    c->dec = NULL;
    sx__relay_conn_unref(c); /* the loop's reference */
}

void sx__relay_conn_close(sx__relay_conn *c)
{
    if (c->state == SX__RELAY_CONN_CLOSED)
        return;
    sx_server *s = c->srv;
    c->state = SX__RELAY_CONN_CLOSED;
    sx__relay_unauth_remove(c);
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
    sx__relay_conn_batch_drop(c);
    /* Pending writes are cancelled: their callbacks run before ours. */
    uv_close((uv_handle_t *)&c->h.stream, handle_closed);
}

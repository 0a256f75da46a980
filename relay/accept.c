/* relay/accept.c — new connections of the relay server: accepting one
 * from a listener (its decoder and its mailbox), refusing one without
 * memory (it must still be taken off the listener), and with a token the
 * gate before hello: the unauthenticated list (at most max_unauth, the
 * oldest closed first), its deadline timer, the small frame limit, and
 * the max_connections count of those through it.
 *
 * Threads: the server's loop thread only. See relay/server.h and
 * docs/RELAY.md ("A connection's life", "Listening").
 */
#include "process/fault.h"
#include "relay/server.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- refusing without memory ---- */

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

/* ---- the token gate ---- */

static void unauth_figure(sx_server *s)
{
    /* relaxed: a figure for sx_server_stats_get. */
    atomic_store_explicit(&s->st_unauth, s->n_unauth, memory_order_relaxed);
}

void sx__relay_unauth_remove(sx__relay_conn *c)
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
    sx__relay_unauth_remove(c);
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
    sx__relay_unauth_remove(c);
    if (s->n_authed >= s->max_connections)
        return false;
    c->authed = true;
    s->n_authed++;
    /* From now on frames up to the server's limit. */
    sx_wire_decoder_set_max(c->dec, s->max_frame);
    return true;
}

/* ---- accepting ---- */

static int conn_open(sx__relay_conn *c)
{
    sx_server *s = c->srv;
    /* Before hello with the token, a hello's worth of frame. */
    int rc = sx_wire_decoder_new(sx__relay_frame_limit(c), &c->dec);
    if (rc != 0)
        return rc;
    rc = sx_engine_mailbox_new(s->engine, sx__relay_mailbox_cb, c, &c->mailbox);
    if (rc != 0)
        return rc;
    c->has_mailbox = true;
    sx__relay_conn_reading(c, true);
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

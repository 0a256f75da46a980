/* engine/commands/clock.c — the clock family: sleep, sleep-until, timers and
 * tickers, on the libuv loops (engine/io/io.h). Ids, arguments and results
 * are in docs/COMMANDS.md.
 *
 * Every deadline is absolute on the monotonic clock, fixed on the worker
 * when the yield is dispatched, and never fires early (engine/io/deadline.c,
 * ms_until).
 * Sleeps, timers and tickers live on the loop's timer heap (io.h,
 * sx__iotimer): arming one is a heap insert, with no libuv handle to
 * open and close.
 *
 * Threads: handlers [worker]; everything else [loop].
 */
#include <stdlib.h>
#include <string.h>

#include "engine/commands/commands.h"
#include "engine/io/io.h"

typedef struct clk_handle clk_handle;

typedef enum {
    K_SLEEP = 1,
    K_TIMER_START,
    K_TIMER_WAIT,
    K_TIMER_STOP,
    K_TIMER_RESET,
    K_TICKER_START,
    K_TICKER_STOP
} clk_kind;

typedef struct clk_op {
    sx__ioop op; /* first */
    clk_kind kind;
    uint64_t deadline_ns; /* sleep, timer start / reset, first tick */
    uint64_t ms;          /* ticker period */
    uint64_t hid;         /* the handle named in args */
    sx__iotimer timer;    /* sleep */
    /* timer wait: on the handle's waiter list */
    clk_handle *on;
    struct clk_op *wprev, *wnext;
    uint8_t topic_len;
    char topic[]; /* ticker start only: the op is allocated to fit it */
} clk_op;

struct clk_handle {
    sx__ioop h; /* first; h.done == NULL */
    sx__iotimer timer;
    uint64_t period_ns; /* ticker */
    bool ticker;
    bool fired; /* timer: fired since the last start / reset */
    uint64_t ticks;
    clk_op *waiters;
    /* Ticker: the message that tells its owner it stopped for want of
     * memory (stop_note_new), made at start so that sending it takes
     * none; freed with the handle when never sent. */
    sx__ev *stop_note;
    uint8_t topic_len;
    char topic[256];
};

static const sx_payload nil = { NULL, 0 };

/* ---- sleep ---- */

static void sleep_fire(sx__iotimer *t)
{
    clk_op *c = (clk_op *)((char *)t - offsetof(clk_op, timer));
    sx__io_finish(&c->op, nil, 0, NULL);
}

static void sleep_start(clk_op *c)
{
    c->timer.fire = sleep_fire;
    if (sx__io_timer_set(&c->op, &c->timer, c->deadline_ns) != 0)
        sx__io_finish(&c->op, nil, SX_ENOMEM, NULL);
}

/* ---- timers and tickers (handles) ---- */

static void waiter_unlink(clk_op *w)
{
    clk_handle *h = w->on;
    if (h == NULL)
        return;
    if (w->wprev != NULL)
        w->wprev->wnext = w->wnext;
    else
        h->waiters = w->wnext;
    if (w->wnext != NULL)
        w->wnext->wprev = w->wprev;
    w->on = NULL;
    w->wprev = w->wnext = NULL;
}

/* Answers every waiter of h and releases it. */
static void waiters_answer(clk_handle *h, int error, const char *msg)
{
    while (h->waiters != NULL) {
        clk_op *w = h->waiters;
        waiter_unlink(w);
        sx__io_finish(&w->op, nil, error, msg);
    }
}

static void handle_cancel(sx__ioop *op)
{
    clk_handle *h = (clk_handle *)op;
    waiters_answer(h, SX_ECANCELLED, "the timer was stopped");
    sx__io_timer_del(op, &h->timer);
    sx__io_release(op);
}

static void handle_fini(sx__ioop *op)
{
    clk_handle *h = (clk_handle *)op;
    if (h->stop_note != NULL)
        sx__ev_free(h->stop_note);
}

static const sx__ioop_vt handle_vt = { "clock-handle", NULL, handle_cancel,
                                       handle_fini };

static clk_handle *handle_of(sx__iotimer *t)
{
    return (clk_handle *)((char *)t - offsetof(clk_handle, timer));
}

static void timer_fire(sx__iotimer *t)
{
    clk_handle *h = handle_of(t);
    h->fired = true;
    waiters_answer(h, 0, NULL);
}

static void ticker_fire(sx__iotimer *t)
{
    clk_handle *h = handle_of(t);
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    sx_pid pid = sx__io_pid(&h->h);
    h->ticks++;
    int rc = sx__send(h->h.engine, pid, pid, h->topic, h->topic_len,
                      sx_payload_int(buf, (int64_t)h->ticks), false);
    if (rc == SX_ENOTFOUND || rc == SX_ECLOSED) {
        sx__io_cancel(&h->h); /* the owner is gone */
        return;
    }
    /* The next tick on the original schedule (no drift); ticks missed
     * while the loop was busy are skipped, not bunched up. */
    uint64_t now = sx__now_ns(), due = t->due_ns + h->period_ns;
    if (due <= now) /* the first tick of the schedule after now */
        due += ((now - due) / h->period_ns + 1) * h->period_ns;
    if (sx__io_timer_set(&h->h, t, due) != 0) {
        /* Out of memory: the ticker stops, and says so on its topic (a
         * process idling on its ticks would otherwise wait for ever). */
        sx__ev *note = h->stop_note;
        h->stop_note = NULL;
        sx__send_note(h->h.engine, pid, note);
        sx__io_cancel(&h->h);
    }
}

/* The ticker's stop notice: a message on its topic from its owner, data
 * {"ok": false, "error": "SX_ENOMEM", "code": n, "message": text,
 * "ticker": handle} (docs/COMMANDS.md). NULL when out of memory. */
static sx__ev *stop_note_new(clk_handle *h)
{
    uint8_t buf[160];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof(buf));
    sx_pack_map(&pk, 5);
    sx_pack_str(&pk, "ok");
    sx_pack_bool(&pk, false);
    sx_pack_str(&pk, "error");
    sx_pack_str(&pk, sx_errname(SX_ENOMEM));
    sx_pack_str(&pk, "code");
    sx_pack_int(&pk, SX_ENOMEM);
    sx_pack_str(&pk, "message");
    sx_pack_str(&pk, "the ticker stopped: no memory to arm its next tick");
    sx_pack_str(&pk, "ticker");
    sx_pack_uint(&pk, h->h.handle);
    if (pk.err != 0)
        return NULL;
    sx_payload data = sx_pack_payload(&pk);
    /* A large node (sx__ev_alloc), not sx__ev_alloc_sized: one more
     * caller of that makes GCC's LTO stop inlining it into the send path
     * (6 more instructions per pingpong message in callgrind). */
    sx__ev *ev = sx__ev_alloc();
    if (ev == NULL)
        return NULL;
    ev->kind = SX__EV_MESSAGE;
    ev->ctl = false;
    ev->from = sx__io_pid(&h->h);
    if (sx__ev_set(ev, h->topic, h->topic_len, data, NULL) != 0) {
        sx__ev_free(ev);
        return NULL;
    }
    return ev;
}

static void handle_start(clk_op *c)
{
    clk_handle *h =
        (clk_handle *)sx__io_handle_new(&c->op, sizeof(clk_handle), &handle_vt);
    if (h == NULL) {
        sx__io_answer(&c->op, nil, SX_ENOMEM, NULL);
        return;
    }
    uint64_t due = c->deadline_ns;
    if (c->kind == K_TICKER_START) {
        h->ticker = true;
        memcpy(h->topic, c->topic, c->topic_len);
        h->topic[c->topic_len] = 0;
        h->topic_len = c->topic_len;
        h->period_ns = c->ms * 1000000u;
        h->timer.fire = ticker_fire;
        /* The first tick one period after the dispatch (COMMANDS.md:
         * deadlines are fixed then), not after this loop got to it. */
        if ((h->stop_note = stop_note_new(h)) == NULL) {
            sx__io_release(&h->h);
            sx__io_answer(&c->op, nil, SX_ENOMEM, NULL);
            return;
        }
    } else {
        h->timer.fire = timer_fire;
    }
    if (sx__io_timer_set(&h->h, &h->timer, due) != 0) {
        sx__io_release(&h->h);
        sx__io_answer(&c->op, nil, SX_ENOMEM, NULL);
        return;
    }
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    sx__io_answer(&c->op, sx_payload_int(buf, (int64_t)h->h.handle), 0, NULL);
}

static clk_handle *handle_get(clk_op *c, bool ticker)
{
    clk_handle *h = (clk_handle *)sx__io_handle_find(&c->op, c->hid);
    if (h == NULL || h->h.vt != &handle_vt || h->ticker != ticker) {
        sx__io_answer(&c->op, nil, SX_ENOTFOUND,
                      ticker ? "no such ticker" : "no such timer");
        return NULL;
    }
    return h;
}

/* ---- the op ---- */

static void clk_start(sx__ioop *op)
{
    clk_op *c = (clk_op *)op;
    clk_handle *h;
    switch (c->kind) {
    case K_SLEEP:
        sleep_start(c);
        return; /* ends in sleep_fire */
    case K_TIMER_START:
    case K_TICKER_START:
        handle_start(c);
        break;
    case K_TIMER_WAIT:
        if ((h = handle_get(c, false)) == NULL)
            break;
        if (h->fired) {
            sx__io_answer(op, nil, 0, NULL);
            break;
        }
        c->on = h;
        c->wnext = h->waiters;
        if (h->waiters != NULL)
            h->waiters->wprev = c;
        h->waiters = c;
        return; /* ends in timer_fire or a cancel */
    case K_TIMER_RESET:
        if ((h = handle_get(c, false)) == NULL)
            break;
        if (sx__io_timer_set(&h->h, &h->timer, c->deadline_ns) != 0) {
            /* Not armed (only a timer out of the heap, one that fired,
             * can fail here): it stays fired, or its waiters would wait
             * for a firing that never comes. */
            sx__io_answer(op, nil, SX_ENOMEM, NULL);
        } else {
            h->fired = false;
            sx__io_answer(op, nil, 0, NULL);
        }
        break;
    case K_TIMER_STOP:
    case K_TICKER_STOP:
        if ((h = handle_get(c, c->kind == K_TICKER_STOP)) == NULL)
            break;
        sx__io_cancel(&h->h);
        sx__io_answer(op, nil, 0, NULL);
        break;
    }
    sx__io_release(op);
}

static void clk_cancel(sx__ioop *op)
{
    clk_op *c = (clk_op *)op;
    if (c->kind == K_SLEEP) {
        sx__io_timer_del(op, &c->timer);
        sx__io_finish(op, nil, SX_ECANCELLED, NULL);
    } else if (c->kind == K_TIMER_WAIT && c->on != NULL) {
        waiter_unlink(c);
        sx__io_finish(op, nil, SX_ECANCELLED, NULL);
    }
}

static const sx__ioop_vt clk_vt = { "clock", clk_start, clk_cancel, NULL };

/* ---- handlers [worker] ---- */

static int submit(sx_completer *done, clk_kind kind, uint64_t deadline_ns,
                  uint64_t ms, uint64_t hid, const char *topic,
                  size_t topic_len)
{
    size_t size = sizeof(clk_op) + (topic != NULL ? topic_len + 1 : 0);
    clk_op *c = (clk_op *)sx__io_op_new(size, &clk_vt, done);
    if (c == NULL)
        return SX_ENOMEM;
    c->kind = kind;
    c->deadline_ns = deadline_ns;
    c->ms = ms;
    c->hid = hid;
    if (topic != NULL) {
        memcpy(c->topic, topic, topic_len);
        c->topic[topic_len] = 0;
        c->topic_len = (uint8_t)topic_len;
    }
    sx__io_submit(&c->op);
    return 0;
}

static int bad_args(sx_completer *done, const char *msg)
{
    sx_complete(done, nil, SX_EINVAL, msg);
    return 0;
}

/* ms from now as an absolute deadline (saturating). */
#define MAX_MS ((int64_t)1 << 40) /* ~35 years: anything more is a bug */

/* A sleep on the worker that runs the yielding step (engine/timer/sleep.c).
 * On the loop instead: a sleep with a timeout (its deadline cancels the
 * op there, so nothing of it stays once it has timed out), and any sleep
 * not yielded from a step (no worker running the process: kept for
 * safety). */
static int sleep_at(sx_engine *e, sx_completer *done, uint64_t due)
{
    sx__worker *w = sx__current_worker(e);
    sx__ev *ev = &done->ev;
    if (w == NULL || w->running != ev->to || ev->dl != NULL)
        return submit(done, K_SLEEP, due, 0, 0, NULL, 0);
    if (sx__timer_add(w, due, done) != 0) {
        sx_complete(done, nil, SX_ENOMEM, NULL);
        return 0;
    }
    /* done is gone (sleep.c keeps what the answer needs). */
    w->running->sleeps++; /* the running worker owns the process */
    return 0;
}

static int cmd_sleep(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)user, (void)pid, (void)tag;
    int64_t ms;
    if (sx_payload_get_int(args, &ms) != 0 || ms > MAX_MS)
        return bad_args(
            done, "sleep: args must be an integer number of ms, at most 2^40");
    if (ms <= 0) {
        sx_complete(done, nil, 0, NULL);
        return 0;
    }
    return sleep_at(e, done, sx__after_ms(ms));
}

static int cmd_sleep_until(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                           sx_payload args, sx_completer *done)
{
    (void)user, (void)pid, (void)tag;
    sx_unpack u;
    uint64_t at;
    sx_unpack_init(&u, args);
    if (sx_unpack_uint(&u, &at) != 0 || !sx_unpack_done(&u))
        return bad_args(done, "sleep-until: args must be a deadline in ns "
                              "on the monotonic clock (sx_clock_now_ns)");
    if (at <= sx__now_ns()) {
        sx_complete(done, nil, 0, NULL);
        return 0;
    }
    return sleep_at(e, done, at);
}

static int cmd_timer_start(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                           sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    int64_t ms;
    if (sx_payload_get_int(args, &ms) != 0 || ms > MAX_MS)
        return bad_args(done, "timer-start: args must be an integer number "
                              "of ms");
    return submit(done, K_TIMER_START, sx__after_ms(ms < 0 ? 0 : ms), 0, 0,
                  NULL, 0);
}

static int get_handle(sx_payload args, uint64_t *hid)
{
    sx_unpack u;
    sx_unpack_init(&u, args);
    return sx_unpack_uint(&u, hid) == 0 && sx_unpack_done(&u) ? 0 : SX_EINVAL;
}

static int cmd_timer_wait(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                          sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    uint64_t hid;
    if (get_handle(args, &hid) != 0)
        return bad_args(done, "timer-wait: args must be a timer handle");
    return submit(done, K_TIMER_WAIT, 0, 0, hid, NULL, 0);
}

static int cmd_timer_stop(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                          sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    uint64_t hid;
    if (get_handle(args, &hid) != 0)
        return bad_args(done, "timer-stop: args must be a timer handle");
    return submit(done, K_TIMER_STOP, 0, 0, hid, NULL, 0);
}

static int cmd_timer_reset(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                           sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    sx_unpack u;
    uint32_t n;
    uint64_t hid;
    int64_t ms;
    sx_unpack_init(&u, args);
    if (sx_unpack_array(&u, &n) != 0 || n != 2 ||
        sx_unpack_uint(&u, &hid) != 0 || sx_unpack_int(&u, &ms) != 0 ||
        !sx_unpack_done(&u) || ms > MAX_MS)
        return bad_args(done, "timer-reset: args must be [handle, ms]");
    return submit(done, K_TIMER_RESET, sx__after_ms(ms < 0 ? 0 : ms), 0, hid,
                  NULL, 0);
}

static int cmd_ticker_start(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                            sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    sx_unpack u;
    uint32_t n;
    int64_t ms;
    const char *topic;
    size_t topic_len;
    sx_unpack_init(&u, args);
    if (sx_unpack_array(&u, &n) != 0 || n != 2 || sx_unpack_int(&u, &ms) != 0 ||
        sx_unpack_str(&u, &topic, &topic_len) != 0 || !sx_unpack_done(&u) ||
        ms < 1 || ms > MAX_MS || topic_len > 255 ||
        memchr(topic, 0, topic_len) != NULL)
        return bad_args(done, "ticker-start: args must be [period ms >= 1, "
                              "topic (at most 255 bytes)]");
    return submit(done, K_TICKER_START, sx__after_ms(ms), (uint64_t)ms, 0,
                  topic, topic_len);
}

static int cmd_ticker_stop(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                           sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag;
    uint64_t hid;
    if (get_handle(args, &hid) != 0)
        return bad_args(done, "ticker-stop: args must be a ticker handle");
    return submit(done, K_TICKER_STOP, 0, 0, hid, NULL, 0);
}

void sx__cmd_clock_register(sx_engine *e)
{
    /* Sleeps answer nil or a short error: small completers. */
    e->cmds[SX_CMD_SLEEP] = (sx__cmd){ cmd_sleep, NULL, "sleep", true };
    e->cmds[SX_CMD_SLEEP_UNTIL] =
        (sx__cmd){ cmd_sleep_until, NULL, "sleep-until", true };
    e->cmds[SX_CMD_TIMER_START] =
        (sx__cmd){ cmd_timer_start, NULL, "timer-start", false };
    e->cmds[SX_CMD_TIMER_WAIT] =
        (sx__cmd){ cmd_timer_wait, NULL, "timer-wait", false };
    e->cmds[SX_CMD_TIMER_STOP] =
        (sx__cmd){ cmd_timer_stop, NULL, "timer-stop", false };
    e->cmds[SX_CMD_TIMER_RESET] =
        (sx__cmd){ cmd_timer_reset, NULL, "timer-reset", false };
    e->cmds[SX_CMD_TICKER_START] =
        (sx__cmd){ cmd_ticker_start, NULL, "ticker-start", false };
    e->cmds[SX_CMD_TICKER_STOP] =
        (sx__cmd){ cmd_ticker_stop, NULL, "ticker-stop", false };
}

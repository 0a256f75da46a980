/* tests/engine/test_fault.c — the sleeps' out-of-memory paths, reached
 * with allocations that fail on cue (process/fault.h; this test links the
 * stepx_fault build of the library).
 *
 * Properties:
 *  - no_room: a sleep the timer set has no room for is answered at once
 *    with SX_ENOMEM ("no memory to keep the sleep"), not kept for good nor
 *    answered when its 10 s are up; afterwards sleeps work again.
 *  - put_back: while no node can be had for a due sleep's answer, the
 *    sleep stays in the set (every sleeper still waiting) and each one is
 *    answered exactly once, without error, once memory is back; 100
 *    sleepers, more than one firing batch. (stats.sleeps is not checked
 *    meanwhile: a batch being fired is out of the set until put back.)
 *  - both: a sleep that finds no room while other sleeps are being put
 *    back is answered SX_ENOMEM at once; the put-back sleeps still wait.
 *  - spawn: with no process slot, submit returns SX_ENOMEM and a step's
 *    spawn is answered SX_ENOMEM; nothing is counted live (stop returns at
 *    once, live 0), and both work again afterwards.
 *  - dispatch: a step whose second yield finds no completer finishes
 *    SX_ENOMEM ("dispatch: out of memory"); its first yield, a sleep
 *    already in a timer set, comes due and is dropped (no answer to a
 *    finished process, no crash), and stop leaves no sleep behind.
 *  - dispatch_held: the same after a handler answered at once (an answer
 *    the worker held for the next step): the held answer goes with the
 *    process, and the next process on the worker starts with no events.
 *  - send: a message with no node is refused (SX_ENOMEM) and not counted;
 *    the receiver still gets the next one.
 *  - result: a command result that cannot be copied reaches the process
 *    as its one answer, SX_ENOMEM with a message.
 *  - timer_reset: a timer-reset of a fired timer that finds no room in
 *    the loop's timer heap answers SX_ENOMEM and leaves the timer fired,
 *    so a timer-wait on it answers at once (clearing `fired` first would
 *    leave the wait waiting for a firing that never comes, here until its
 *    3 s yield timeout).
 *  - io_cancel: 50 processes that finish with a timer handle alive, none
 *    of them getting a cancel request (no memory for it), still have
 *    every handle cancelled (stats.io_inflight back to 0 at once, not
 *    after the timers' 60 s or at sx_engine_stop, when it would stay 50);
 *    the next finish with memory back cancels as before.
 *  - ticker_stop: a ticker whose re-arming after tick 1 finds no room in
 *    the loop's timer heap sends its owner one stop notice on its topic
 *    (a map with SX_ENOMEM and the handle; the handle is then gone,
 *    ticker-stop SX_ENOTFOUND), rather than stop without a word and leave
 *    the owner idling on its ticks waiting for ever.
 *  - checkpoint_record: a checkpointed job whose checkpoint record cannot
 *    be made (SX__FAULT_STORE_REC) ends SX_ENOMEM, "checkpoint: out of
 *    memory", and one whose checkpoint cannot be committed (the database
 *    at state_max_bytes) ends SX_ESTORAGE, "checkpoint: no space left
 *    ...", both after their first step (its sleep never dispatched);
 *    other jobs run on.
 *  - seg_map: a process-table segment that cannot be mapped: the idle
 *    workers' mapping ahead (engine/core/ptable.c, map_ahead) tries it
 *    once and not again (one failure, after their spins and 100 more
 *    tries from the test; without the back-off, one per try); the
 *    carving's own mapping then answers the submit SX_ENOMEM, and with
 *    memory back the carving maps it and submits go on.
 *
 * Each case checks that its fault site failed at least once (the
 * commit-failure half of checkpoint_record, which has none, checks the
 * store's store_failed), so that a build where the site is not reached
 * cannot pass it. Negative controls, each run once by hand on a scratch
 * copy of engine/timer/sleep.c (F1, F2) or engine/core/checkpoint.c (F3 to
 * F5):
 *  F1. fail_all drops its list instead of answering: no_room times out
 *      (the sleeper never hears back).
 *  F2. the put-back skips the failed entries (put_back not incremented):
 *      put_back times out on the first sleeper.
 *  F3. sx__ckpt_park returns 0 (dispatch as usual) when the record cannot
 *      be queued: checkpoint_record fails (the job ends 0, unstored).
 *  F4. ckpt_done ignores a failed commit: checkpoint_record fails (0).
 *  F5. ckpt_done ends the job without its error: checkpoint_record fails
 *      (SX_ETERMINATED).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <stepx/stepx.h>

#include "engine/core/core.h"
#include "engine/store/store.h"
#include "process/fault.h"
#include "tests/support/support.h"

#define FAILIF(out, cond, ...)                                                 \
    do {                                                                       \
        if (cond) {                                                            \
            char m_[256];                                                      \
            snprintf(m_, sizeof m_, __VA_ARGS__);                              \
            sx_fail(out, m_);                                                  \
            return 0;                                                          \
        }                                                                      \
    } while (0)

typedef struct {
    int64_t ms; /* the first sleep */
    int k;      /* steps so far */
    uint64_t t0;
} sleeper;

static int take_ms(void *st, const sx_init_ctx *c, const char *m,
                   const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    sleeper *s = st;
    if (n != 1 || sx_payload_get_int(in[0], &s->ms) != 0)
        return SX_EINVAL;
    return 0;
}

/* Sleeps ms (tag 1), then 2 ms (tag 2): each step must get exactly the
 * one answer it waits for (a second answer to tag 1 would show up with
 * tag 2's). DONE with the ms from the first yield to its answer. */
static int twice_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    sleeper *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    switch (s->k++) {
    case 0:
        s->t0 = sx_clock_now_ns();
        return sx_yield(out, SX_CMD_SLEEP, 1, sx_payload_int(b, s->ms));
    case 1: {
        FAILIF(out, n != 1 || ev[0].tag != 1 || ev[0].error != 0,
               "first answer: n=%zu tag=%llu error=%d", n,
               n ? (unsigned long long)ev[0].tag : 0ull, n ? ev[0].error : 0);
        int64_t waited = (int64_t)((sx_clock_now_ns() - s->t0) / 1000000u);
        s->t0 = (uint64_t)waited; /* kept for the DONE value */
        return sx_yield(out, SX_CMD_SLEEP, 2, sx_payload_int(b, 2));
    }
    default:
        FAILIF(out, n != 1 || ev[0].tag != 2 || ev[0].error != 0,
               "second answer: n=%zu tag=%llu error=%d", n,
               n ? (unsigned long long)ev[0].tag : 0ull, n ? ev[0].error : 0);
        sx_done(out, sx_payload_int(b, (int64_t)s->t0));
        return 0;
    }
}

/* Sleeps ms and expects SX_ENOMEM; DONE with the ms it took. */
static int nomem_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    sleeper *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    if (s->k++ == 0) {
        s->t0 = sx_clock_now_ns();
        return sx_yield(out, SX_CMD_SLEEP, 1, sx_payload_int(b, s->ms));
    }
    FAILIF(out, n != 1 || ev[0].tag != 1 || ev[0].error != SX_ENOMEM,
           "answer: n=%zu error=%d (want SX_ENOMEM)", n, n ? ev[0].error : 0);
    FAILIF(out,
           ev[0].error_msg == NULL ||
               strcmp(ev[0].error_msg, "no memory to keep the sleep") != 0,
           "message: %s", ev[0].error_msg ? ev[0].error_msg : "(none)");
    sx_done(out, sx_payload_int(
                     b, (int64_t)((sx_clock_now_ns() - s->t0) / 1000000u)));
    return 0;
}

/* Yields a spawn of a "twice" child; DONE with the answer's error. */
static int parent_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    sleeper *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX], buf[64];
    if (s->k++ == 0) {
        sx_pack pk;
        sx_pack_init_fixed(&pk, buf, sizeof buf);
        sx_pack_array(&pk, 3);
        sx_pack_str(&pk, "twice");
        sx_pack_str(&pk, "run");
        sx_pack_array(&pk, 1);
        sx_pack_int(&pk, 1);
        return sx_yield(out, SX_CMD_SPAWN, 1, sx_pack_payload(&pk));
    }
    FAILIF(out, n != 1 || ev[0].tag != 1, "spawn answer: n=%zu", n);
    FAILIF(out, ev[0].error != 0 && ev[0].error_msg == NULL,
           "an error answer without a message");
    sx_done(out, sx_payload_int(b, ev[0].error));
    return 0;
}

/* Yields sleep(ms) tag 1 and sleep(10 s) tag 2 in one step; the test
 * makes the second yield's completer fail. */
static int two_yields_step(void *st, const sx_event *ev, size_t n,
                           sx_step_output *out)
{
    (void)ev, (void)n;
    sleeper *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    FAILIF(out, s->k++ > 0, "stepped again after its dispatch failed");
    sx_yield(out, SX_CMD_SLEEP, 1, sx_payload_int(b, s->ms));
    return sx_yield(out, SX_CMD_SLEEP, 2, sx_payload_int(b, 10000));
}

/* The receiver yield_send_step sends to. */
static sx_pid fault_rx;

/* Yields a noop (its completer is what the fault takes), then sends 7 to
 * fault_rx. */
static int yield_send_step(void *st, const sx_event *ev, size_t n,
                           sx_step_output *out)
{
    (void)ev, (void)n;
    sleeper *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    FAILIF(out, s->k++ > 0, "stepped again after its dispatch failed");
    sx_yield(out, SX_CMD_NOOP, 1, (sx_payload){ NULL, 0 });
    int rc = sx_send(out, fault_rx, "t", sx_payload_int(b, 7));
    sx_wait(out);
    return rc;
}

/* Waits for one message; DONE with its int. */
static int recv_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st;
    for (size_t i = 0; i < n; i++)
        if (ev[i].type == SX_EVENT_MESSAGE) {
            int64_t v = -1;
            sx_payload_get_int(ev[i].data, &v);
            uint8_t b[SX_PAYLOAD_INT_MAX];
            sx_done(out, sx_payload_int(b, v));
            return 0;
        }
    sx_idle(out);
    return 0;
}

#define CMD_BIG 300 /* a user command answering BIG_LEN bytes */
#define BIG_LEN 4000

static int big_cmd(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                   sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag, (void)args;
    static uint8_t bytes[BIG_LEN + 8];
    sx_pack pk;
    sx_pack_init_fixed(&pk, bytes, sizeof bytes);
    static char text[BIG_LEN];
    memset(text, 'x', sizeof text - 1);
    sx_pack_str(&pk, text);
    sx_complete(done, sx_pack_payload(&pk), 0, NULL);
    return 0;
}

/* Yields CMD_BIG; DONE with the answer's error (0: checks the bytes). */
static int big_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    sleeper *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    if (s->k++ == 0)
        return sx_yield(out, CMD_BIG, 1, (sx_payload){ NULL, 0 });
    FAILIF(out, n != 1 || ev[0].tag != 1, "answer: n=%zu", n);
    if (ev[0].error == 0)
        FAILIF(out, ev[0].data.len < BIG_LEN, "result cut: %zu bytes",
               ev[0].data.len);
    else
        FAILIF(out, ev[0].error_msg == NULL || ev[0].data.len > 1,
               "error answer: msg %s, %zu bytes",
               ev[0].error_msg ? ev[0].error_msg : "(none)", ev[0].data.len);
    sx_done(out, sx_payload_int(b, ev[0].error));
    return 0;
}

/* A timer reset that fails: start a 1 ms timer, wait for it to fire,
 * then (when the test has armed SX__FAULT_IO_TIMER and sent "go") reset
 * it, note the answer's error in reset_err, and (after "go" again, the
 * fault disarmed) wait on it with a 3 s yield timeout: DONE with that
 * wait's error. */
static atomic_int reset_phase, reset_err;

static int resetter_step(void *st, const sx_event *ev, size_t n,
                         sx_step_output *out)
{
    sleeper *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    switch (s->k++) {
    case 0:
        return sx_yield(out, SX_CMD_TIMER_START, 1, sx_payload_int(b, 1));
    case 1: {
        FAILIF(out, n != 1 || ev[0].error != 0, "timer-start failed");
        uint64_t h = 0;
        sx_unpack u;
        sx_unpack_init(&u, ev[0].data);
        FAILIF(out, sx_unpack_uint(&u, &h) != 0, "no handle");
        s->t0 = h;
        return sx_yield(out, SX_CMD_TIMER_WAIT, 2, sx_payload_int(b, h));
    }
    case 2:
        FAILIF(out, n != 1 || ev[0].error != 0, "timer-wait failed");
        atomic_store(&reset_phase, 1); /* fired; the test arms the fault */
        sx_idle(out);
        return 0;
    case 3: { /* "go" */
        uint8_t pb[32];
        sx_pack pk;
        sx_pack_init_fixed(&pk, pb, sizeof pb);
        sx_pack_array(&pk, 2);
        sx_pack_uint(&pk, s->t0);
        sx_pack_int(&pk, 1);
        return sx_yield(out, SX_CMD_TIMER_RESET, 3, sx_pack_payload(&pk));
    }
    case 4:
        FAILIF(out, n != 1 || ev[0].tag != 3, "reset answer: n=%zu", n);
        atomic_store(&reset_err, ev[0].error);
        atomic_store(&reset_phase, 2); /* the test disarms the fault */
        sx_idle(out);
        return 0;
    case 5: /* "go" */
        return sx_yield_timeout(out, SX_CMD_TIMER_WAIT, 4,
                                sx_payload_int(b, s->t0), 3000);
    default:
        FAILIF(out, n != 1 || ev[0].tag != 4, "wait answer: n=%zu", n);
        sx_done(out, sx_payload_int(b, ev[0].error));
        return 0;
    }
}

/* Starts a 60 s timer and finishes DONE without waiting for it: the
 * timer's handle is left alive on the loop for the finish to cancel. */
static int holder_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    sleeper *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    if (s->k++ == 0)
        return sx_yield(out, SX_CMD_TIMER_START, 1, sx_payload_int(b, 60000));
    FAILIF(out, n != 1 || ev[0].error != 0, "timer-start failed");
    sx_done(out, sx_payload_int(b, 0));
    return 0;
}

/* Starts a ticker of ms on "tick", then idles on its messages: ticks
 * (ints) are counted; the ticker's stop notice (a map) is checked, the
 * handle is then gone (ticker-stop: SX_ENOTFOUND), and it finishes DONE
 * with the notice's code. */
typedef struct {
    int64_t ms;
    int k;
    uint64_t handle;
    int64_t ticks, code;
} ticking;

static int ticking_init(void *st, const sx_init_ctx *c, const char *m,
                        const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    ticking *s = st;
    if (n != 1 || sx_payload_get_int(in[0], &s->ms) != 0)
        return SX_EINVAL;
    return 0;
}

/* The stop notice {"ok": false, "error": name, "code": n, "message":
 * text, "ticker": handle}: 0 and its code in *code when it is one for
 * handle, else -1. */
static int stop_notice(sx_payload data, uint64_t handle, int64_t *code)
{
    sx_unpack u;
    sx_unpack_init(&u, data);
    uint32_t n;
    if (sx_unpack_map(&u, &n) != 0 || n != 5)
        return -1;
    int seen = 0;
    for (uint32_t i = 0; i < n; i++) {
        const char *k, *v;
        size_t kl, vl;
        bool ok = true;
        uint64_t h = 0;
        if (sx_unpack_str(&u, &k, &kl) != 0)
            return -1;
        if (kl == 2 && memcmp(k, "ok", 2) == 0) {
            if (sx_unpack_bool(&u, &ok) != 0 || ok)
                return -1;
        } else if (kl == 5 && memcmp(k, "error", 5) == 0) {
            if (sx_unpack_str(&u, &v, &vl) != 0 || vl != 9 ||
                memcmp(v, "SX_ENOMEM", 9) != 0)
                return -1;
        } else if (kl == 4 && memcmp(k, "code", 4) == 0) {
            if (sx_unpack_int(&u, code) != 0)
                return -1;
        } else if (kl == 7 && memcmp(k, "message", 7) == 0) {
            if (sx_unpack_str(&u, &v, &vl) != 0 || vl == 0)
                return -1;
        } else if (kl == 6 && memcmp(k, "ticker", 6) == 0) {
            if (sx_unpack_uint(&u, &h) != 0 || h != handle)
                return -1;
        } else {
            return -1;
        }
        seen++;
    }
    return seen == 5 ? 0 : -1;
}

/* ticking's ticks (and the ticker's stop notice) in ev[0..n). */
static int on_ticks(ticking *s, const sx_event *ev, size_t n,
                    sx_step_output *out)
{
    uint8_t b[SX_PAYLOAD_INT_MAX];
    for (size_t i = 0; i < n; i++) {
        FAILIF(out,
               ev[i].type != SX_EVENT_MESSAGE ||
                   strcmp(ev[i].topic, "tick") != 0,
               "not a tick");
        int64_t tick;
        if (sx_payload_get_int(ev[i].data, &tick) == 0) {
            FAILIF(out, tick != ++s->ticks, "tick %lld, want %lld",
                   (long long)tick, (long long)s->ticks);
            continue;
        }
        FAILIF(out, stop_notice(ev[i].data, s->handle, &s->code) != 0,
               "a tick that is neither a number nor a stop notice");
        /* The first tick passed; the second found no room. */
        FAILIF(out, s->ticks != 1, "stopped after %lld ticks",
               (long long)s->ticks);
        s->k = 3;
        return sx_yield(out, SX_CMD_TICKER_STOP, 2,
                        sx_payload_int(b, (int64_t)s->handle));
    }
    sx_idle(out);
    return 0;
}

static int ticking_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    ticking *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    switch (s->k) {
    case 0: {
        uint8_t pb[32];
        sx_pack pk;
        sx_pack_init_fixed(&pk, pb, sizeof pb);
        sx_pack_array(&pk, 2);
        sx_pack_int(&pk, s->ms);
        sx_pack_str(&pk, "tick");
        s->k = 1;
        return sx_yield(out, SX_CMD_TICKER_START, 1, sx_pack_payload(&pk));
    }
    case 1: {
        /* The start's answer comes first; the first ticks may come with
         * it in one batch when this step runs late (a loaded machine). */
        FAILIF(out, n < 1 || ev[0].tag != 1 || ev[0].error != 0,
               "ticker-start failed");
        sx_unpack u;
        sx_unpack_init(&u, ev[0].data);
        FAILIF(out, sx_unpack_uint(&u, &s->handle) != 0, "no handle");
        s->k = 2;
        return on_ticks(s, ev + 1, n - 1, out);
    }
    case 2:
        return on_ticks(s, ev, n, out);
    default:
        FAILIF(out, n != 1 || ev[0].tag != 2 || ev[0].error != SX_ENOTFOUND,
               "ticker-stop of a stopped ticker: not SX_ENOTFOUND");
        sx_done(out, sx_payload_int(b, s->code));
        return 0;
    }
}

#define CMD_NOW 301 /* a user command answering at once, no bytes */

static int now_cmd(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                   sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag, (void)args;
    sx_complete(done, (sx_payload){ NULL, 0 }, 0, NULL);
    return 0;
}

/* Yields CMD_NOW twice and waits. */
static int two_now_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    sx_yield(out, CMD_NOW, 1, (sx_payload){ NULL, 0 });
    sx_yield(out, CMD_NOW, 2, (sx_payload){ NULL, 0 });
    sx_wait(out);
    return 0;
}

/* DONE at its first step with how many events that step got. */
static int first_n_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    (void)st, (void)ev;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(b, (int64_t)n));
    return 0;
}

/* block: one step that keeps its worker until block_release (at most
 * 30 s), then done. quick: done in its first step. */
static _Atomic bool block_running, block_release;

static int block_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    atomic_store(&block_running, true);
    tx_spin_until(&block_release, 30000);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(b, 0));
    return 0;
}

static int quick_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(b, 0));
    return 0;
}

static const sx_process_type types[] = {
    { .name = "block",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = block_step },
    { .name = "quick",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = quick_step },
    { .name = "two_now",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = two_now_step },
    { .name = "first_n",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = first_n_step },
    { .name = "holder",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = holder_step },
    { .name = "twice",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = twice_step },
    { .name = "nomem",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = nomem_step },
    { .name = "parent",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = parent_step },
    { .name = "two_yields",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = two_yields_step },
    { .name = "yield_send",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = yield_send_step },
    { .name = "recv",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = recv_step },
    { .name = "big",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = big_step },
    { .name = "ticking",
      .state_size = sizeof(ticking),
      .init = ticking_init,
      .step = ticking_step },
    { .name = "resetter",
      .state_size = sizeof(sleeper),
      .init = take_ms,
      .step = resetter_step },
};

static sx_engine *up_workers(unsigned workers)
{
    sx_engine_config cfg = { .workers = workers };
    sx_engine *e = tx_engine_new(&cfg);
    tx_engine_register(e, types, sizeof(types) / sizeof(types[0]));
    tx_engine_command(e, CMD_BIG, "big", big_cmd, NULL);
    tx_engine_command(e, CMD_NOW, "now", now_cmd, NULL);
    tx_engine_start(e);
    return e;
}

static sx_engine *up(void)
{
    return up_workers(2);
}

/* Disarms every site, stops e (no sleep may be left on the timer sets)
 * and frees it. */
static void down(sx_engine *e)
{
    sx__fault_arm(0);
    tx_engine_stop(e, 1000);
    CHECK_EQ_U64(tx_engine_stats(e).sleeps, 0);
    sx_engine_free(e);
}

static sx_pid submit(sx_engine *e, const char *type, int64_t ms)
{
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(b, ms);
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, type, "run", &in, 1, &pid), 0);
    return pid;
}

static void still_waiting(sx_engine *e, sx_pid pid)
{
    sx_result r;
    int rc = sx_engine_wait(e, pid, 0, &r);
    if (rc == 0) {
        SX_FAILF("finished while its answer could not be made: %s",
                 r.error_msg ? r.error_msg : "DONE");
    }
    CHECK_RC(rc, SX_ETIMEDOUT);
}

static void test_no_room(void)
{
    sx_engine *e = up();
    uint64_t before = sx__fault_hits(SX__FAULT_TIMER_KEEP);
    sx__fault_arm(SX__FAULT_TIMER_KEEP);
    /* 10 s: answered at its due, it would run past the wait's 5 s. */
    int64_t took = tx_wait_int(e, submit(e, "nomem", 10000), 5000);
    CHECK(took < 5000);
    CHECK(sx__fault_hits(SX__FAULT_TIMER_KEEP) > before);
    sx__fault_arm(0);
    /* Memory is back: a sleep waits its time and is answered. */
    CHECK(tx_wait_int(e, submit(e, "twice", 5), 5000) >= 5);
    down(e);
}

#define PUT_BACK_N 100 /* > FIRE_BATCH (64) in engine/timer/sleep.c */

static void test_put_back(void)
{
    sx_engine *e = up();
    uint64_t before = sx__fault_hits(SX__FAULT_TIMER_ANSWER);
    sx__fault_arm(SX__FAULT_TIMER_ANSWER);
    sx_pid pids[PUT_BACK_N];
    for (int i = 0; i < PUT_BACK_N; i++)
        pids[i] = submit(e, "twice", 1 + i % 5);
    tx_sleep_ms(60); /* every sleep is due by now, none can be answered */
    for (int i = 0; i < PUT_BACK_N; i++)
        still_waiting(e, pids[i]);
    /* A whole batch failed at least once (each look takes up to 64). */
    CHECK(sx__fault_hits(SX__FAULT_TIMER_ANSWER) - before >= 64);
    sx__fault_arm(0);
    for (int i = 0; i < PUT_BACK_N; i++)
        CHECK(tx_wait_int(e, pids[i], 10000) >= 1 + i % 5); /* never early */
    down(e);
}

static void test_both(void)
{
    sx_engine *e = up();
    uint64_t keep0 = sx__fault_hits(SX__FAULT_TIMER_KEEP);
    sx__fault_arm(SX__FAULT_TIMER_ANSWER);
    sx_pid held = submit(e, "twice", 1);
    tx_sleep_ms(20);
    still_waiting(e, held);
    sx__fault_arm(SX__FAULT_TIMER_ANSWER | SX__FAULT_TIMER_KEEP);
    CHECK(tx_wait_int(e, submit(e, "nomem", 10000), 5000) < 5000);
    CHECK(sx__fault_hits(SX__FAULT_TIMER_KEEP) > keep0);
    still_waiting(e, held);
    sx__fault_arm(0);
    CHECK(tx_wait_int(e, held, 10000) >= 1);
    down(e);
}

/* Waits up to 10 s for pid's outcome; the outcome's error (its
 * message in *msg, copied, when msg is not NULL). */
static int outcome_error(sx_engine *e, sx_pid pid, char *msg, size_t cap)
{
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pid, 10000, &r), 0);
    int err = r.error;
    if (msg != NULL)
        snprintf(msg, cap, "%s", r.error_msg ? r.error_msg : "");
    sx_result_free(&r);
    return err;
}

static void test_spawn(void)
{
    sx_engine *e = up();
    uint64_t before = sx__fault_hits(SX__FAULT_SPAWN);
    sx__fault_arm(SX__FAULT_SPAWN);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(b, 1);
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, "twice", "run", &in, 1, &pid), SX_ENOMEM);
    CHECK_EQ_U64(tx_engine_stats(e).live, 0);
    CHECK_EQ_U64(tx_engine_stats(e).submitted, 0);
    /* From a step: the parent itself needs a slot, so it is submitted
     * first and the site armed after its spawn's first pass. */
    sx__fault_arm(0);
    sx__fault_arm_after(SX__FAULT_SPAWN, 1);
    CHECK_EQ_INT(tx_wait_int(e, submit(e, "parent", 0), 5000), SX_ENOMEM);
    CHECK(sx__fault_hits(SX__FAULT_SPAWN) - before >= 2);
    sx__fault_arm(0);
    CHECK_EQ_INT(tx_wait_int(e, submit(e, "parent", 0), 5000), 0);
    /* 2 parents and the child, which sleeps 3 ms after its spawn. */
    for (double t = sx_test_now_ms();
         tx_engine_stats(e).completed < 3 && sx_test_now_ms() - t < 5000;)
        tx_sleep_ms(1);
    CHECK_EQ_U64(tx_engine_stats(e).completed, 3);
    double t0 = sx_test_now_ms();
    CHECK_RC(sx_engine_stop(e, 5000), 0);
    CHECK(sx_test_now_ms() - t0 < 2000); /* nothing phantom to wait for */
    CHECK_EQ_U64(tx_engine_stats(e).live, 0);
    down(e);
}

static void test_dispatch(void)
{
    sx_engine *e = up();
    uint64_t before = sx__fault_hits(SX__FAULT_DISPATCH);
    sx__fault_arm_after(SX__FAULT_DISPATCH, 1);
    char msg[128];
    sx_pid pid = submit(e, "two_yields", 20);
    CHECK_EQ_INT(outcome_error(e, pid, msg, sizeof msg), SX_ENOMEM);
    CHECK_STR(msg, "dispatch: out of memory");
    CHECK_EQ_U64(sx__fault_hits(SX__FAULT_DISPATCH) - before, 1);
    sx__fault_arm(0);
    /* Its 20 ms sleep comes due after it finished: dropped, unanswered. */
    tx_sleep_ms(60);
    CHECK(tx_wait_int(e, submit(e, "twice", 1), 5000) >= 1);
    down(e);
}

/* A dispatch that runs out of memory after a handler answered at once
 * (the worker held that answer for the next step, engine/sched/sched.h):
 * the process finishes SX_ENOMEM, the held answer goes with it (ASan's
 * leak check), and the next process on the worker starts with no events. */
static void test_dispatch_held(void)
{
    sx_engine *e = up_workers(1);
    sx__fault_arm_after(SX__FAULT_DISPATCH, 1);
    char msg[128];
    sx_pid pid = submit(e, "two_now", 0);
    CHECK_EQ_INT(outcome_error(e, pid, msg, sizeof msg), SX_ENOMEM);
    CHECK_STR(msg, "dispatch: out of memory");
    sx__fault_arm(0);
    CHECK_EQ_INT(tx_wait_int(e, submit(e, "first_n", 0), 5000), 0);
    down(e);
}

/* A step's sx_send after a yield whose completer could not be made: the
 * process finishes SX_ENOMEM, and the message still goes, as it goes when
 * a step ends DONE or FAIL (process.h, sx_send), not dropped unsent and
 * uncounted with the step's output. */
static void test_dispatch_sends(void)
{
    sx_engine *e = up();
    fault_rx = submit(e, "recv", 0);
    sx__fault_arm(SX__FAULT_DISPATCH);
    char msg[128];
    sx_pid pid = submit(e, "yield_send", 0);
    CHECK_EQ_INT(outcome_error(e, pid, msg, sizeof msg), SX_ENOMEM);
    sx__fault_arm(0);
    CHECK_STR(msg, "dispatch: out of memory");
    CHECK_EQ_INT(tx_wait_int(e, fault_rx, 2000), 7);
    down(e);
}

static void test_send(void)
{
    sx_engine *e = up();
    sx_pid rx = submit(e, "recv", 0);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    uint64_t msgs0 = tx_engine_stats(e).messages;
    sx__fault_arm(SX__FAULT_SEND);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, rx, "t", sx_payload_int(b, 1)),
             SX_ENOMEM);
    still_waiting(e, rx);
    sx__fault_arm(0);
    CHECK_EQ_U64(tx_engine_stats(e).messages, msgs0);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, rx, "t", sx_payload_int(b, 2)), 0);
    CHECK_EQ_INT(tx_wait_int(e, rx, 5000), 2);
    down(e);
}

static void test_result(void)
{
    sx_engine *e = up();
    uint64_t before = sx__fault_hits(SX__FAULT_RESULT);
    sx__fault_arm(SX__FAULT_RESULT);
    CHECK_EQ_INT(tx_wait_int(e, submit(e, "big", 0), 5000), SX_ENOMEM);
    CHECK(sx__fault_hits(SX__FAULT_RESULT) > before);
    sx__fault_arm(0);
    CHECK_EQ_INT(tx_wait_int(e, submit(e, "big", 0), 5000), 0);
    down(e);
}

static void await_phase(int phase)
{
    TX_WAIT_UNTIL(atomic_load(&reset_phase) >= phase, 10000, 1000);
}

static void test_timer_reset(void)
{
    sx_engine *e = up();
    sx_pid pid = submit(e, "resetter", 0);
    await_phase(1);
    uint64_t before = sx__fault_hits(SX__FAULT_IO_TIMER);
    uint64_t keep0 = sx__fault_hits(SX__FAULT_TIMER_KEEP);
    sx__fault_arm(SX__FAULT_IO_TIMER);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, pid, "go", (sx_payload){ 0 }), 0);
    await_phase(2);
    sx__fault_arm(0);
    CHECK(sx__fault_hits(SX__FAULT_IO_TIMER) > before);
    /* Each site counts its own failures (fault.c's SITES covers them). */
    CHECK_EQ_U64(sx__fault_hits(SX__FAULT_TIMER_KEEP), keep0);
    CHECK_RC(atomic_load(&reset_err), SX_ENOMEM);
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, pid, "go", (sx_payload){ 0 }), 0);
    CHECK_EQ_INT(tx_wait_int(e, pid, 10000), 0); /* still fired: at once */
    down(e);
}

/* ticker_stop: a ticker whose next tick finds no room in the loop's
 * timer heap stops, and its owner is told: one last message on the
 * ticker's topic, a map with SX_ENOMEM, instead of silence (stopped
 * without a word, it would leave a process idling on its ticks waiting
 * for ever: here, until the 5 s wait below). */
static void test_ticker_stop(void)
{
    sx_engine *e = up();
    uint64_t before = sx__fault_hits(SX__FAULT_IO_TIMER);
    /* ticker-start's arming passes; re-arming after tick 1 fails. */
    sx__fault_arm_after(SX__FAULT_IO_TIMER, 1);
    sx_pid pid = submit(e, "ticking", 5);
    sx_result r;
    int rc = sx_engine_wait(e, pid, 5000, &r);
    sx__fault_arm(0);
    if (rc != 0)
        SX_FAILF("the ticker's owner heard nothing: wait %s", sx_errname(rc));
    if (r.error != 0)
        SX_FAILF("process failed: %s (%s)", r.error_msg, sx_errname(r.error));
    int64_t code = 0;
    CHECK_RC(sx_payload_get_int(r.value, &code), 0);
    sx_result_free(&r);
    CHECK_RC((int)code, SX_ENOMEM);
    CHECK(sx__fault_hits(SX__FAULT_IO_TIMER) > before);
    down(e);
}

#define CANCEL_N 50

/* Waits up to 5 s for stats.io_inflight to reach 0; true if it did. */
static bool io_drained(sx_engine *e)
{
    double end = sx_test_now_ms() + 5000;
    while (tx_engine_stats(e).io_inflight != 0) {
        if (sx_test_now_ms() > end)
            return false;
        tx_sleep_ms(1);
    }
    return true;
}

static void test_io_cancel(void)
{
    sx_engine *e = up();
    uint64_t before = sx__fault_hits(SX__FAULT_IO_CANCEL);
    sx__fault_arm(SX__FAULT_IO_CANCEL);
    sx_pid pids[CANCEL_N];
    for (int i = 0; i < CANCEL_N; i++)
        pids[i] = submit(e, "holder", 0);
    for (int i = 0; i < CANCEL_N; i++)
        CHECK_EQ_INT(tx_wait_int(e, pids[i], 5000), 0);
    CHECK_EQ_U64(sx__fault_hits(SX__FAULT_IO_CANCEL) - before, CANCEL_N);
    /* Every timer handle is cancelled all the same, well before its 60 s,
     * not left on the loop until sx_engine_stop. */
    bool drained = io_drained(e);
    if (!drained)
        fprintf(stderr, "io_inflight %llu\n",
                (unsigned long long)tx_engine_stats(e).io_inflight);
    CHECK(drained);
    /* The next finish, with memory back, cancels as before. */
    sx__fault_arm(0);
    CHECK_EQ_INT(tx_wait_int(e, submit(e, "holder", 0), 5000), 0);
    CHECK(io_drained(e));
    down(e);
}

/* ---- the durable store (engine/store/sqlite.c) ---- */

static int store_job_seen(void *user, const sx__store_job *j)
{
    struct {
        uint64_t *ids, *n;
    } *got = user;
    if (*got->n < 4)
        got->ids[*got->n] = j->id;
    (*got->n)++;
    return 0;
}

static void store_done(void *user, int rc, uint64_t id)
{
    (void)id;
    _Atomic int *n = user;
    /* release: the case's acquire poll sees the count. */
    atomic_fetch_add_explicit(n, rc == 0 ? 1 : 1000, memory_order_release);
}

/* No memory for the store at open: SX_ENOMEM, nothing held (the next
 * open of the same directory works). */
static void test_store_open(void)
{
    char dir[256];
    tx_mkdtemp(dir, sizeof dir, "stepx-fault-store-");
    sx__store_config cfg = { .dir = dir };
    sx__store *s = NULL;
    char msg[256];
    sx__fault_arm(SX__FAULT_STORE_OPEN);
    CHECK_RC(sx__store_open(&cfg, &s, msg, sizeof msg), SX_ENOMEM);
    CHECK(s == NULL);
    CHECK(strstr(msg, "out of memory") != NULL);
    CHECK(sx__fault_hits(SX__FAULT_STORE_OPEN) >= 1);
    sx__fault_arm(0);
    CHECK_RC(sx__store_open(&cfg, &s, msg, sizeof msg), 0);
    sx__store_close(s);
    CHECK(tx_rm_tree(dir) == 0);
}

/* No room for a record: the call says SX_ENOMEM, its callback never
 * runs, nothing of it is stored; the next record goes through. */
static void test_store_record(void)
{
    char dir[256];
    tx_mkdtemp(dir, sizeof dir, "stepx-fault-store-");
    sx__store_config cfg = { .dir = dir };
    sx__store *s = NULL;
    char msg[256];
    CHECK_RC(sx__store_open(&cfg, &s, msg, sizeof msg), 0);
    _Atomic int answers = 0;
    uint8_t in[] = { 0x90 };
    sx__store_job j = {
        .id = 1, .type = "t", .method = "m", .input = { in, 1 }, .attempt = 1
    };
    sx__fault_arm(SX__FAULT_STORE_REC);
    CHECK_RC(sx__store_submit(s, &j, store_done, &answers), SX_ENOMEM);
    CHECK_RC(sx__store_finish(s, 1, 0, NULL, (sx_payload){ NULL, 0 }, 1, 1,
                              store_done, &answers),
             SX_ENOMEM);
    CHECK(sx__fault_hits(SX__FAULT_STORE_REC) >= 2);
    sx__fault_arm(0);
    j.id = 2;
    CHECK_RC(sx__store_submit(s, &j, store_done, &answers), 0);
    TX_WAIT_UNTIL(atomic_load_explicit(&answers, memory_order_acquire) >= 1,
                  10000, 1000);
    sx__store_close(s);
    CHECK_EQ_INT(atomic_load(&answers), 1); /* only job 2's answer, 0 */
    CHECK_RC(sx__store_open(&cfg, &s, msg, sizeof msg), 0);
    uint64_t ids[4], n = 0;
    struct {
        uint64_t *ids, *n;
    } got = { ids, &n };
    CHECK_RC(sx__store_recover(s, store_job_seen, NULL, &got), 0);
    CHECK_EQ_U64(n, 1);
    CHECK_EQ_U64(ids[0], 2);
    sx__store_close(s);
    CHECK(tx_rm_tree(dir) == 0);
}

/* "gate": waits for one message and finishes with its data; counts its
 * closes. */
static _Atomic int gate_closes;

static int gate_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

static int gate_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st;
    for (size_t i = 0; i < n; i++)
        if (ev[i].type == SX_EVENT_MESSAGE) {
            sx_done(out, ev[i].data);
            return 0;
        }
    sx_idle(out);
    return 0;
}

static void gate_close(void *st)
{
    (void)st;
    /* relaxed: read after the engine is freed. */
    atomic_fetch_add_explicit(&gate_closes, 1, memory_order_relaxed);
}

static const sx_process_type gate_type = {
    .name = "gate", .init = gate_init, .step = gate_step, .close = gate_close
};

static sx_engine *durable_up(const char *dir)
{
    sx_engine_config cfg = { .workers = 1, .state_dir = dir };
    return tx_engine_up(&cfg, &gate_type, 1);
}

/* An engine with a state store whose records cannot be queued: a submit
 * says SX_ENOMEM, nothing of it runs or stays (its init ran, so its close
 * runs), and a later one goes through. A finish whose record cannot be
 * queued still gives its outcome to wait; the job stays stored and runs
 * again at the next start (docs/DURABILITY.md, "Known gaps"). */
static void test_store_in_engine(void)
{
    char dir[256];
    tx_mkdtemp(dir, sizeof dir, "stepx-fault-durable-");
    atomic_store(&gate_closes, 0);
    sx_engine *e = durable_up(dir);
    sx_pid pid;
    sx__fault_arm(SX__FAULT_STORE_REC);
    CHECK_RC(sx_engine_submit(e, "gate", "run", NULL, 0, &pid), SX_ENOMEM);
    sx__fault_arm(0);
    CHECK_EQ_U64(tx_engine_stats(e).live, 0);
    CHECK_EQ_INT(atomic_load(&gate_closes), 1);
    CHECK_RC(sx_engine_submit(e, "gate", "run", NULL, 0, &pid), 0);
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 1, 5000, 200);
    /* Its finish cannot be stored: wait still answers. */
    sx__fault_arm(SX__FAULT_STORE_REC);
    uint8_t b[SX_PAYLOAD_INT_MAX];
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, pid, "go", sx_payload_int(b, 7)),
             0);
    sx_result r;
    CHECK_RC(sx_engine_wait(e, pid, 5000, &r), 0);
    sx__fault_arm(0);
    CHECK_EQ_INT(r.error, 0);
    sx_result_free(&r);
    tx_engine_down(e);

    /* The one stored job runs again (the finish was never stored); the
     * refused submit left nothing. */
    e = durable_up(dir);
    TX_WAIT_UNTIL(tx_engine_stats(e).live == 1, 5000, 200);
    sx_process_info info[4];
    CHECK_EQ_INT(sx_engine_list(e, info, 4), 1);
    CHECK(sx_pid_eq(info[0].pid, pid));
    CHECK_EQ_U64(info[0].attempts, 2);
    tx_engine_down(e);
    CHECK(tx_rm_tree(dir) == 0);
}

/* ---- checkpointed jobs whose checkpoint cannot be stored ---- */

/* "ck" and "ck_big": checkpointed types whose first step yields a 2 ms
 * sleep and waits, and whose second finishes with its step count (2).
 * ck_big's state is CK_BIG_STATE bytes: its checkpoint cannot fit in a
 * database of CK_STORE_BYTES however few pages the schema takes (9 of its
 * 16), while a small checkpoint, a plain job and outcomes do. ck_steps
 * counts the steps of both. */
#define CK_BIG_STATE (64 * 1024)
#define CK_STORE_BYTES (64 * 1024)

typedef struct {
    uint32_t k;
} ck_state;

typedef struct {
    uint32_t k;
    uint8_t fill[CK_BIG_STATE - sizeof(uint32_t)];
} ck_big_state;

static _Atomic int ck_steps;

static int ck_init(void *st, const sx_init_ctx *c, const char *m,
                   const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

static int ck_big_init(void *st, const sx_init_ctx *c, const char *m,
                       const sx_payload *in, size_t n)
{
    (void)c, (void)m, (void)in, (void)n;
    ck_big_state *s = st;
    memset(s->fill, 0xa5, sizeof s->fill);
    return 0;
}

static int ck_step(void *st, const sx_event *ev, size_t n, sx_step_output *out)
{
    uint32_t *k = st; /* both states begin with the step count */
    uint8_t b[SX_PAYLOAD_INT_MAX];
    /* relaxed: a count the case reads after the job's outcome, which its
     * wait orders after every step. */
    atomic_fetch_add_explicit(&ck_steps, 1, memory_order_relaxed);
    if ((*k)++ == 0) {
        sx_yield(out, SX_CMD_SLEEP, 1, sx_payload_int(b, 2));
        sx_wait(out);
        return 0;
    }
    FAILIF(out, n != 1 || ev[0].tag != 1 || ev[0].error != 0,
           "sleep answer: n=%zu error=%d", n, n ? ev[0].error : 0);
    sx_done(out, sx_payload_int(b, *k));
    return 0;
}

static const sx_process_type ck_types[] = {
    { .name = "gate", .init = gate_init, .step = gate_step },
    { .name = "ck",
      .state_size = sizeof(ck_state),
      .init = ck_init,
      .step = ck_step,
      .flags = SX_TYPE_CHECKPOINTED },
    { .name = "ck_big",
      .state_size = sizeof(ck_big_state),
      .init = ck_big_init,
      .step = ck_step,
      .flags = SX_TYPE_CHECKPOINTED },
};

/* Submits a job of type; the engine answers 0. */
static sx_pid ck_submit(sx_engine *e, const char *type)
{
    sx_pid pid;
    CHECK_RC(sx_engine_submit(e, type, "run", NULL, 0, &pid), 0);
    return pid;
}

/* What recover finds of job `want` (its checkpoint flag) and of the
 * outcomes (job `want`'s error). */
typedef struct {
    uint64_t want, jobs;
    bool found, checkpointed;
    int out_error;
    bool out_found;
} ck_seen;

static int ck_seen_job(void *user, const sx__store_job *j)
{
    ck_seen *s = user;
    s->jobs++;
    if (j->id == s->want) {
        s->found = true;
        s->checkpointed = j->checkpointed;
    }
    return 0;
}

static int ck_seen_outcome(void *user, const sx__store_outcome *o)
{
    ck_seen *s = user;
    if (o->id == s->want) {
        s->out_found = true;
        s->out_error = o->error;
    }
    return 0;
}

/* Opens the store in dir (no engine on it) and reports job id. */
static ck_seen ck_stored(const char *dir, uint64_t id)
{
    sx__store_config cfg = { .dir = dir };
    sx__store *s = NULL;
    char msg[256];
    CHECK_RC(sx__store_open(&cfg, &s, msg, sizeof msg), 0);
    ck_seen seen = { .want = id };
    CHECK_RC(sx__store_recover(s, ck_seen_job, ck_seen_outcome, &seen), 0);
    sx__store_close(s);
    return seen;
}

/* A checkpointed job whose checkpoint cannot be stored ends with an error
 * after its first step instead of running on unstored: its sleep never
 * goes out (no second step).
 *  - No room for the checkpoint's record (SX__FAULT_STORE_REC; the
 *    submit's record passes): SX_ENOMEM, "checkpoint: out of memory";
 *    nothing of the checkpoint is stored (the job, whose finish could not
 *    be queued either, is stored without one).
 *  - The record queued, its commit failing (the database at
 *    state_max_bytes, a state bigger than that): SX_ESTORAGE, "checkpoint:
 *    no space left ...", counted in store_failed; the outcome is stored.
 * Either way the engine goes on: a checkpointed job with a small state and
 * a plain stored job run to their end afterwards. */
static void test_checkpoint_record(void)
{
    char dir[256];
    tx_mkdtemp(dir, sizeof dir, "stepx-fault-ckpt-");
    sx_engine_config cfg = { .workers = 1, .state_dir = dir };
    sx_engine *e = tx_engine_up(&cfg, ck_types, 3);
    uint64_t before = sx__fault_hits(SX__FAULT_STORE_REC);
    /* relaxed: no job runs yet; the submit's hand-off to the workers
     * orders it before their steps. */
    atomic_store_explicit(&ck_steps, 0, memory_order_relaxed);
    sx__fault_arm_after(SX__FAULT_STORE_REC, 1);
    sx_pid pid = ck_submit(e, "ck");
    char msg[256];
    int err = outcome_error(e, pid, msg, sizeof msg);
    sx__fault_arm(0);
    CHECK_RC(err, SX_ENOMEM);
    CHECK_STR(msg, "checkpoint: out of memory");
    CHECK(sx__fault_hits(SX__FAULT_STORE_REC) > before);
    /* relaxed: read after the job's wait, which orders its steps before
     * (ck_step). No second step: its sleep never went out. */
    CHECK_EQ_INT(atomic_load_explicit(&ck_steps, memory_order_relaxed), 1);
    CHECK_EQ_INT(tx_wait_int(e, ck_submit(e, "ck"), 10000), 2);
    tx_engine_down(e);
    ck_seen seen = ck_stored(dir, pid.id);
    CHECK(seen.found);
    CHECK(!seen.checkpointed);
    CHECK_EQ_U64(seen.jobs, 1); /* the second job finished, stored */
    CHECK(tx_rm_tree(dir) == 0);

    tx_mkdtemp(dir, sizeof dir, "stepx-fault-ckpt-");
    cfg.state_max_bytes = CK_STORE_BYTES;
    e = tx_engine_up(&cfg, ck_types, 3);
    /* relaxed: as above. */
    atomic_store_explicit(&ck_steps, 0, memory_order_relaxed);
    uint64_t failed0 = tx_engine_stats(e).store_failed;
    pid = ck_submit(e, "ck_big");
    err = outcome_error(e, pid, msg, sizeof msg);
    CHECK_RC(err, SX_ESTORAGE);
    if (strncmp(msg, "checkpoint: ", 12) != 0 ||
        strstr(msg, "no space left") == NULL)
        SX_FAILF("message: %s", msg);
    /* relaxed: as above. */
    CHECK_EQ_INT(atomic_load_explicit(&ck_steps, memory_order_relaxed), 1);
    CHECK(tx_engine_stats(e).store_failed > failed0);
    CHECK_EQ_INT(tx_wait_int(e, ck_submit(e, "ck"), 10000), 2);
    sx_pid gate = ck_submit(e, "gate");
    uint8_t b[SX_PAYLOAD_INT_MAX];
    CHECK_RC(sx_engine_send(e, SX_PID_NONE, gate, "go", sx_payload_int(b, 7)),
             0);
    CHECK_EQ_INT(tx_wait_int(e, gate, 10000), 7);
    tx_engine_down(e);
    seen = ck_stored(dir, pid.id);
    CHECK_EQ_U64(seen.jobs, 0);
    CHECK(seen.out_found);
    CHECK_RC(seen.out_error, SX_ESTORAGE);
    CHECK(tx_rm_tree(dir) == 0);
}

/* Segments of the process table mapped so far. */
static unsigned segs_mapped(sx_engine *e)
{
    unsigned n = 0;
    /* acquire: as the table's own readers (ptable.c, slot_at). */
    while (n < SX__SEGS &&
           atomic_load_explicit(&e->segs[n], memory_order_acquire) != NULL)
        n++;
    return n;
}

static void test_seg_map(void)
{
    sx_engine *e = up();
    /* The first two segments (3 * SX__SEG_BASE slots) map; every mapping
     * after them fails. */
    unsigned mapped = segs_mapped(e);
    CHECK(mapped <= 2);
    uint64_t before = sx__fault_hits(SX__FAULT_SEG_MAP);
    sx__fault_arm_after(SX__FAULT_SEG_MAP, 2 - mapped);
    enum { N = 3 * SX__SEG_BASE - 96 };
    sx_pid *pid = calloc(N, sizeof(*pid));
    CHECK(pid != NULL);
    if (pid == NULL)
        return;
    for (size_t i = 0; i < N; i++)
        pid[i] = submit(e, "recv", 0);
    CHECK_EQ_INT((int)segs_mapped(e), 2);
    /* The idle workers' window reaches the third segment: one try, then
     * none, from them or from here. */
    tx_sleep_ms(200);
    for (int i = 0; i < 100; i++)
        sx__ptable_prefault(e);
    uint64_t hits = sx__fault_hits(SX__FAULT_SEG_MAP) - before;
    if (hits != 1)
        fprintf(stderr, "  %llu failed mappings ahead\n",
                (unsigned long long)hits);
    CHECK_EQ_U64(hits, 1);
    CHECK_EQ_INT((int)segs_mapped(e), 2);
    /* The carving's own mapping fails too, as a submit's SX_ENOMEM. */
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(b, 0);
    sx_pid more[200];
    size_t n_more = 0;
    int rc = 0;
    while (n_more < 200 && (rc = sx_engine_submit(e, "recv", "run", &in, 1,
                                                  &more[n_more])) == 0)
        n_more++;
    CHECK_RC(rc, SX_ENOMEM);
    /* Memory back: the carving maps it, and the submits go on. */
    sx__fault_arm(0);
    CHECK_RC(sx_engine_submit(e, "recv", "run", &in, 1, &more[n_more]), 0);
    n_more++;
    CHECK_EQ_INT((int)segs_mapped(e), 3);
    for (size_t i = 0; i < N; i++)
        CHECK_RC(sx_engine_terminate(e, pid[i]), 0);
    for (size_t i = 0; i < n_more; i++)
        CHECK_RC(sx_engine_terminate(e, more[i]), 0);
    free(pid);
    down(e);
}

/* The injection ring overflows (150,000 submits while the one worker is
 * held) with no memory for the chunk that moves its oldest to the global
 * queue: they go as a list through their slots, and every process still
 * runs, exactly once. */
static void test_gq_chunk(void)
{
    enum { N = 150000 };
    sx_engine *e = up_workers(1);
    atomic_store(&block_running, false);
    atomic_store(&block_release, false);
    submit(e, "block", 0);
    TX_WAIT_UNTIL(atomic_load(&block_running), 5000, 100);
    uint64_t before = sx__fault_hits(SX__FAULT_GQ_CHUNK);
    sx__fault_arm(SX__FAULT_GQ_CHUNK);
    for (size_t i = 0; i < N; i++)
        submit(e, "quick", 0);
    uint64_t hits = sx__fault_hits(SX__FAULT_GQ_CHUNK) - before;
    /* (150,000 - 65,536) / 2,048 moves, one chunk each. */
    CHECK(hits >= (N - 65536) / 2048);
    sx__fault_arm(0);
    /* Not sx_engine_wait on the block: 150,000 later outcomes may have
     * pushed its own out of those kept. */
    atomic_store(&block_release, true);
    for (double t = sx_test_now_ms();
         tx_engine_stats(e).completed < N + 1 && sx_test_now_ms() - t < 30000;)
        tx_sleep_ms(1);
    CHECK_EQ_U64(tx_engine_stats(e).completed, N + 1);
    CHECK_EQ_U64(tx_engine_stats(e).live, 0);
    down(e);
}

/* inject_full's move when the ring drains under it. The submitter moves
 * the full ring's oldest SX__INJ_MOVE into a chunk of that many (plus the
 * process it brings), under the ring's spinlock, by grabs of up to
 * SX__INJQ_GRAB; workers grab from the ring without that lock. A
 * submitter descheduled mid-move comes back to a ring the workers have
 * drained, whose grabs then come back short (half of what is left): a
 * move one grab from its end took 50 of 100 left, then 25 more, 2,059 in
 * all, past the chunk's end. The hook plays those workers at that moment
 * (the ring taken down to 100, as a worker would, into a stash), and
 * every later grab must stop at SX__INJ_MOVE. The stashed processes go
 * back in afterwards: every one of them must still run. */
typedef struct {
    sx_engine *e;
    size_t calls, max_moved, n_stash;
    bool drained;
    void *stash[SX__INJQ_CAP];
} move_probe;

static void on_move(void *arg, size_t moved)
{
    move_probe *m = arg;
    m->calls++;
    if (moved > m->max_moved)
        m->max_moved = moved;
    if (m->drained || moved != SX__INJ_MOVE - SX__INJQ_GRAB)
        return;
    m->drained = true;
    size_t left;
    while ((left = sx__injq_size(&m->e->inj)) > 100) {
        size_t want = left - 100 < 17 ? left - 100 : 17;
        m->n_stash += sx__injq_grab(&m->e->inj, m->stash + m->n_stash, want);
    }
}

static void test_inject_move_bound(void)
{
    static move_probe m; /* 512 KiB of stash: not on the stack */
    memset(&m, 0, sizeof m);
    sx_engine *e = up_workers(1);
    m.e = e;
    atomic_store(&block_running, false);
    atomic_store(&block_release, false);
    submit(e, "block", 0);
    TX_WAIT_UNTIL(atomic_load(&block_running), 5000, 100);
    /* The one worker is in block's step: nothing else takes from the
     * ring, which the next SX__INJQ_CAP submits fill; the one after them
     * finds it full. */
    sx__fault_hook_set(SX__HOOK_INJECT_MOVE, on_move, &m);
    for (size_t i = 0; i < SX__INJQ_CAP + 1; i++)
        submit(e, "quick", 0);
    sx__fault_hook_set(SX__HOOK_INJECT_MOVE, NULL, NULL);
    CHECK(m.drained);
    CHECK(m.calls >= SX__INJ_MOVE / SX__INJQ_GRAB);
    CHECK(m.max_moved <= SX__INJ_MOVE);
    CHECK(m.n_stash > 0);
    for (size_t i = 0; i < m.n_stash; i++)
        sx__inject(e, m.stash[i]);
    atomic_store(&block_release, true);
    uint64_t want = SX__INJQ_CAP + 2; /* the quick ones and block */
    for (double t = sx_test_now_ms();
         tx_engine_stats(e).completed < want && sx_test_now_ms() - t < 30000;)
        tx_sleep_ms(1);
    CHECK_EQ_U64(tx_engine_stats(e).completed, want);
    CHECK_EQ_U64(tx_engine_stats(e).live, 0);
    down(e);
}

static const sx_test_case cases[] = {
    { "gq_chunk", test_gq_chunk },
    { "inject_move_bound", test_inject_move_bound },
    { "store_in_engine", test_store_in_engine },
    { "no_room", test_no_room },
    { "put_back", test_put_back },
    { "both", test_both },
    { "spawn", test_spawn },
    { "dispatch", test_dispatch },
    { "dispatch_held", test_dispatch_held },
    { "dispatch_sends", test_dispatch_sends },
    { "send", test_send },
    { "result", test_result },
    { "timer_reset", test_timer_reset },
    { "io_cancel", test_io_cancel },
    { "ticker_stop", test_ticker_stop },
    { "store_open", test_store_open },
    { "store_record", test_store_record },
    { "checkpoint_record", test_checkpoint_record },
    { "seg_map", test_seg_map },
};

SX_TEST_MAIN(cases)

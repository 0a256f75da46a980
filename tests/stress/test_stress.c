/* tests/stress/test_stress.c — the engine under load: 100,000 processes
 * (50,000 under sanitizers) doing random mixes of yields with synchronous
 * and asynchronous completions, messages to each other and to long-lived
 * sinks, spawns, soft cancels and terminates, on 1, 2 and 8 workers.
 *
 * What each case checks, with counters (all must hold at the end):
 *  - every yield gets exactly one completion, with its own tag, error and
 *    result: a completion for an unknown or already answered tag is an
 *    error, and a process that finished normally received as many
 *    completions as it asked for (it only finishes when none is pending);
 *  - every message is delivered exactly once: at the sinks (which outlive
 *    every sender) each (sender, sink) pair arrives complete and in order;
 *    a ping asked of an outside thread reaches its process exactly once;
 *    peer messages and cancels are received at most once and never when
 *    send said SX_ENOTFOUND / SX_ECLOSED;
 *  - at most one step in flight per process (an atomic in_step flag that
 *    every step and close exchanges);
 *  - nothing runnable is left while all workers are parked, and no wake-up
 *    is lost: a watchdog fails the case ("stalled: N processes left") when
 *    no step runs for STALL_MS while processes are live, listing them and
 *    saying whether one is ready/running while every worker is parked,
 *    and nothing moves for STALL_MS / 2 more; at the end every worker's
 *    timeout_finds is 0;
 *  - every close is called exactly once per successful init (failing
 *    inits, deliberate or at the index budget, get none), and the engine's
 *    own counters (submitted, completed, terminated, live) agree.
 *
 * Negative control for the wake-up protocol (docs/SCHEDULER.md §2, "The
 * flag re-check"; engine/sched/worker.c SX_NEGATIVE_CONTROL_NO_RECHECK: the
 * worker blocks a process with a plain store instead of a CAS that
 * re-checks the wake-up flag), built and run with
 *     meson setup /tmp/build-nc -Dno_flag_recheck=true
 *     ninja -C /tmp/build-nc && meson test -C /tmp/build-nc --suite stress
 *     /tmp/build-nc/tests/stress/test_stress workers_N    (N = 1, 2, 8)
 * On a 2-core machine (gcc, the plain debugoptimized build) every run of
 * that build fails: 24 of 24 (3 runs of the meson suite, i.e. 9 cases, and
 * 5 direct runs of each of workers_1, workers_2, workers_8), each after
 * ~7-10 s (the run, then STALL_MS of silence) with the watchdog's
 *     stress: STALL in drain: live 8, listed 8 (ready 0, running 0,
 *       blocked 4, idle 4), parked 1 of 1 workers, global queue 0
 *     test_stress.c:1208: FAIL: stalled: 8 processes left (drain)
 * Per run 1 to 15 stressors are stranded (beside the 4 sinks, which are idle
 * by design): BLOCKED with one completion still to receive, or IDLE with a
 * ping still to receive, while every worker is parked and the global queue
 * empty — the lost wake-up exactly; never a wrong count. The same cases pass
 * in the normal build in 1.5-4 s each. (tests/engine/test_api.c
 * no_lost_wakeups, which aims at the same window with a single ping-pong,
 * fails about 1 run in 50 in that build.) The processes that make it
 * sensitive: a "fast" completer thread spins on a lock-free stack and
 * completes at once, and a process that yields one such command with nothing
 * else pending and WAITs has exactly one event that can wake it; if that
 * completion lands between the worker's load of the state word and its plain
 * store, the flag is lost and it never runs.
 *
 * Pauses. Under ThreadSanitizer on a 2-core VM with CPU hogs beside it, the
 * engine can stand still for 10 s and then resume by itself: the watchdog
 * fires (about once in 13-60 runs, always in the submit phase), and its own
 * snapshot shows the engine running again while it is taken: listed < live by
 * 77-244 (processes finished between the figures and the table walk; only
 * workers finish processes), a global queue figure above the ready count,
 * processes listed READY or BLOCKED whose last step (read after the walk) had
 * chosen DONE. That is not a lost wake-up, which strands its processes for
 * good. What pauses it is not known (such a VM's kernel log can show workqueue
 * lockups of tens of seconds on one CPU). The watchdog therefore fails only
 * when nothing moves during its snapshot and for STALL_MS / 2 after it; a
 * silence that ends by itself is printed ("PAUSE ... not a stall", with the
 * watchdog's own longest gap between looks) and counted ("pauses" in the
 * summary line). The negative control above strands processes for good and
 * still fails.
 *
 * Scale: SX_STRESS_SCALE (a float, default 1) multiplies the process count.
 *
 * Threads: the main thread submits and watches; engine workers run steps,
 * closes and command handlers; two pool threads and one spinning "fast"
 * thread complete asynchronous yields (and send pings); one thread sends
 * cancels and terminates, one sends messages from outside. Everything they
 * share is a C11 atomic, or a process's own state / row of a table that
 * only that process's steps write (ordered by the engine's state word:
 * that is part of what the test checks under ThreadSanitizer).
 */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <stepx/engine.h>

#include "tests/support/support.h"

/* ---- configuration ------------------------------------------------------ */

#ifdef SX_TEST_SANITIZED
#define BASE_PROCESSES 50000.0
#define STALL_MS 10000
#else
#define BASE_PROCESSES 100000.0
#define STALL_MS 5000
#endif

#define LIVE_MAX 10000  /* stressors alive at once (submission throttle) */
#define WINDOW 4096     /* peers, cancels: among the most recent indices */
#define N_SINKS 4       /* long-lived receivers with exact accounting    */
#define N_EXT 1         /* outside sender threads (sender ids N, N+1..)  */
#define N_POOL 2        /* async completer threads                       */
#define MAX_PENDING 16  /* tagged yields outstanding per process         */
#define TAG_SLOTS 64    /* > MAX_PENDING: a free slot always exists      */
#define PEER_MAX 2      /* peer messages a process may send              */
#define PINGS_MAX 3     /* pings outstanding per process                 */
#define QUIET_EVERY 4   /* every 4th stressor gets no peer / outside mail */
#define CANCEL_EVERY 16 /* one cancel / terminate per 16 submitted       */
#define EXT_EVERY 2     /* one outside message per 2 submitted           */
#define BAD_PRINT 10    /* first problems printed as they happen         */

enum {
    CMD_SYNC = SX_CMD_USER_MIN, /* completes inside the handler          */
    CMD_ASYNC,                  /* handed to a pool thread               */
    CMD_FAST,                   /* handed to the spinning fast thread    */
    CMD_PING,                   /* pool: completes and sends a ping      */
    CMD_FAILING,                /* handler returns SX_EINVAL             */
    CMD_UNKNOWN = 999           /* never registered                      */
};

/* What a pending tag was yielded for: decides the completion expected. */
enum {
    K_SYNC = 1,
    K_ASYNC,
    K_ASYNC_ERR,
    K_FAST,
    K_PING,
    K_SINK,
    K_PEER,
    K_SPAWN,
    K_FAILING,
    K_UNKNOWN,
    K_NOOP
};

/* Async modes (the yield's args): delay class in bits 0-1, error bit 2. */
#define MODE_ERR 4

/* Peer message / cancel status, written by the sender after send. */
enum { ST_NONE = 0, ST_SENT, ST_ACCEPTED, ST_REJECTED };

/* ---- the shared test context -------------------------------------------
 *
 * Counters are atomics updated with relaxed RMWs and read by the main
 * thread after the threads that wrote them were joined or after the
 * engine's wait/stop (which order them): they are figures, not flags.
 * Arrays that are plain memory have one writer each, named at the field.
 */
typedef struct {
    uint32_t n;       /* stressor index budget                           */
    uint32_t senders; /* n + N_EXT: sender ids at the sinks              */
    sx_engine *e;

    _Atomic uint32_t next_idx; /* index handed to the next init         */
    _Atomic uint64_t *pids;    /* [n] pid.id of each stressor (init)    */
    _Atomic uint8_t *closed;   /* [n] close count per stressor          */
    _Atomic uint32_t *dbg;     /* [n] last step: pending|pings|act|st   */
    /* [N_SINKS][senders]: written by the sender's steps (or the ext thread
     * before it is joined); read by main at the end. */
    uint32_t *sent_to;
    /* [N_SINKS][senders]: written by that sink's steps only. */
    uint32_t *expect;
    _Atomic uint8_t *peer_status; /* [n * PEER_MAX] written by the sender */
    _Atomic uint8_t *peer_recv;   /* [n * PEER_MAX] bumped by receivers   */
    uint32_t cancel_max;
    _Atomic uint32_t cancel_next;
    _Atomic uint8_t *cancel_status; /* [cancel_max] by the canceller     */
    _Atomic uint8_t *cancel_recv;   /* [cancel_max] bumped by receivers  */
    sx_pid sinks[N_SINKS];

    _Atomic uint64_t inits, init_fails, closes, closes_done;
    _Atomic uint64_t in_step_violations, bad;
    _Atomic uint64_t done_yields, done_completions, done_pings, done_pings_recv;
    _Atomic uint64_t yields, completions, sink_msgs, sink_recv;
    _Atomic uint64_t peer_sent, peer_recv_n, ext_recv, pings_recv;
    _Atomic uint64_t cancels_ok, cancels_recv, terms_ok, spawns_ok;
    _Atomic uint64_t items_in, items_out, pings_sent, pings_lost;
    _Atomic uint64_t ext_sent;

    /* Watchdog (main thread only). */
    uint64_t last_progress;
    double last_change, last_look;
    double look_gap_max; /* longest gap between two looks since progress */
    unsigned pauses;     /* silences that ended by themselves (stalled) */
} test_ctx;

static test_ctx T;

static void cnt(_Atomic uint64_t *c, uint64_t v)
{
    /* relaxed: a figure, read after the writers are ordered (see above). */
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static uint64_t get(_Atomic uint64_t *c)
{
    /* acquire: the reads at the end follow joins / engine waits anyway. */
    return atomic_load_explicit(c, memory_order_acquire);
}

/* A problem seen by a step or a thread: counted, the first few printed. */
__attribute__((format(printf, 1, 2))) static void bad(const char *fmt, ...)
{
    uint64_t k = atomic_fetch_add_explicit(&T.bad, 1, memory_order_relaxed);
    if (k >= BAD_PRINT)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "stress: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static uint64_t rnd(uint64_t *s)
{
    /* xorshift64*: deterministic per seed, cheap. */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static void seed(uint64_t *s, uint64_t v)
{
    *s = (v + 1) * 0x9E3779B97F4A7C15ULL;
    if (*s == 0)
        *s = 1;
}

static sx_pid pid_of_id(uint64_t id)
{
    sx_pid p = { 0, 1, id };
    return p;
}

static uint64_t pid_at(uint32_t idx)
{
    /* acquire: pairs with the release store in stressor_init. */
    return atomic_load_explicit(&T.pids[idx], memory_order_acquire);
}

/* A quiet stressor is never sent a peer message, an outside message or a
 * cancel, so nothing can rescue it from a lost wake-up (see act). */
static bool quiet(uint32_t idx)
{
    return idx % QUIET_EVERY == 0;
}

/* A random index among the most recent WINDOW, not a quiet one; or
 * UINT32_MAX when there is none yet. */
static uint32_t recent_target(uint64_t *rng)
{
    /* relaxed: only picks targets. */
    uint32_t hi = atomic_load_explicit(&T.next_idx, memory_order_relaxed);
    if (hi > T.n)
        hi = T.n;
    uint32_t lo = hi > WINDOW ? hi - WINDOW : 0;
    if (hi - lo < 2)
        return UINT32_MAX;
    uint32_t i = lo + (uint32_t)(rnd(rng) % (hi - lo));
    if (quiet(i))
        i = i + 1 < hi ? i + 1 : i - 1;
    return i;
}

/* Stressor indices handed out so far (at most the budget). */
static uint32_t indices_used(void)
{
    /* relaxed: a figure (targets; totals after the threads are done). */
    uint32_t hi = atomic_load_explicit(&T.next_idx, memory_order_relaxed);
    return hi < T.n ? hi : T.n;
}

static int64_t result_of(uint64_t tag)
{
    return (int64_t)(tag * 3 + 1);
}

/* [a, b] as a payload into buf. */
static sx_payload pack_pair(uint8_t *buf, size_t cap, uint64_t a, uint64_t b)
{
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, cap);
    sx_pack_array(&pk, 2);
    sx_pack_uint(&pk, a);
    sx_pack_uint(&pk, b);
    CHECK_EQ_INT(pk.err, 0);
    return sx_pack_payload(&pk);
}

/* SX_CMD_SEND's args: [to, topic, [a, b]]. */
static sx_payload pack_send(uint8_t *buf, size_t cap, sx_pid to,
                            const char *topic, uint64_t a, uint64_t b)
{
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, cap);
    sx_pack_array(&pk, 3);
    sx_pack_pid(&pk, to);
    sx_pack_str(&pk, topic);
    sx_pack_array(&pk, 2);
    sx_pack_uint(&pk, a);
    sx_pack_uint(&pk, b);
    CHECK_EQ_INT(pk.err, 0);
    return sx_pack_payload(&pk);
}

static bool unpack_pair(sx_payload pl, uint64_t *a, uint64_t *b)
{
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, pl);
    return sx_unpack_array(&u, &n) == 0 && n == 2 &&
           sx_unpack_uint(&u, a) == 0 && sx_unpack_uint(&u, b) == 0 &&
           sx_unpack_done(&u);
}

/* ---- async completers ----------------------------------------------------
 *
 * Pool: a mutex + condition variable FIFO drained by N_POOL threads, each
 * item completed after a delay chosen by the yield (none, sched_yield, a
 * short spin, a ~20 µs sleep). Fast: a Treiber stack that one thread
 * spins on and completes at once, so completions race the worker that is
 * still finishing the step that yielded them.
 */
typedef struct aitem {
    struct aitem *next;
    sx_completer *done; /* owned by the item until completed */
    uint64_t tag;
    sx_pid pid;
    int mode;
    bool ping;
} aitem;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    aitem *head, *tail; /* under mu */
    bool quit;          /* under mu */
    _Atomic(aitem *) fast_top;
    _Atomic bool fast_quit;
    pthread_t pool[N_POOL], fast;
} Q;

static aitem *item_new(sx_completer *done, sx_pid pid, uint64_t tag)
{
    aitem *it = calloc(1, sizeof(*it));
    if (it == NULL)
        return NULL;
    it->done = done;
    it->pid = pid;
    it->tag = tag;
    cnt(&T.items_in, 1);
    return it;
}

static void item_complete(aitem *it)
{
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    if (it->mode & MODE_ERR)
        sx_complete(it->done, (sx_payload){ NULL, 0 }, SX_ETIMEDOUT,
                    "stress: async error");
    else
        sx_complete(it->done, sx_payload_int(buf, result_of(it->tag)), 0, NULL);
}

static void item_run(aitem *it, uint64_t *rng)
{
    switch (it->mode & 3) {
    case 1:
        sched_yield();
        break;
    case 2:
        /* A short busy delay (volatile keeps the loop; no sharing). */
        for (volatile int i = 0; i < 200; i++) {
        }
        break;
    case 3:
        tx_sleep_us(20);
        break;
    default:
        break;
    }
    bool first = it->ping && (rnd(rng) & 1);
    if (!first)
        item_complete(it);
    if (it->ping) {
        /* The ping: a message from outside the engine. */
        uint8_t buf[SX_PAYLOAD_INT_MAX];
        int rc = sx_engine_send(T.e, SX_PID_NONE, it->pid, "ping",
                                sx_payload_int(buf, (int64_t)it->pid.id));
        if (rc == 0)
            cnt(&T.pings_sent, 1);
        else if (rc == SX_ENOTFOUND || rc == SX_ECLOSED)
            cnt(&T.pings_lost, 1); /* terminated meanwhile */
        else
            bad("ping send: %s", sx_errname(rc));
    }
    if (first)
        item_complete(it);
    cnt(&T.items_out, 1);
    free(it);
}

static void *pool_main(void *arg)
{
    uint64_t rng;
    seed(&rng, (uintptr_t)arg);
    pthread_mutex_lock(&Q.mu);
    for (;;) {
        while (Q.head == NULL && !Q.quit)
            pthread_cond_wait(&Q.cv, &Q.mu);
        if (Q.head == NULL)
            break; /* quit, and everything handed over is done */
        aitem *it = Q.head;
        Q.head = it->next;
        if (Q.head == NULL)
            Q.tail = NULL;
        pthread_mutex_unlock(&Q.mu);
        item_run(it, &rng);
        pthread_mutex_lock(&Q.mu);
    }
    pthread_mutex_unlock(&Q.mu);
    return NULL;
}

static void pool_push(aitem *it)
{
    pthread_mutex_lock(&Q.mu);
    if (Q.tail != NULL)
        Q.tail->next = it;
    else
        Q.head = it;
    Q.tail = it;
    pthread_cond_signal(&Q.cv);
    pthread_mutex_unlock(&Q.mu);
}

static void fast_push(aitem *it)
{
    /* relaxed: the CAS re-reads it. */
    aitem *top = atomic_load_explicit(&Q.fast_top, memory_order_relaxed);
    do {
        it->next = top;
        /* release: pairs with the acquire exchange in fast_main. */
    } while (!atomic_compare_exchange_weak_explicit(
        &Q.fast_top, &top, it, memory_order_release, memory_order_relaxed));
}

static void *fast_main(void *arg)
{
    (void)arg;
    unsigned idle = 0;
    for (;;) {
        /* acquire: pairs with the release CAS in fast_push. */
        aitem *it =
            atomic_exchange_explicit(&Q.fast_top, NULL, memory_order_acquire);
        if (it == NULL) {
            /* acquire: pairs with the release store before the join. */
            if (atomic_load_explicit(&Q.fast_quit, memory_order_acquire) &&
                atomic_load_explicit(&Q.fast_top, memory_order_acquire) == NULL)
                break;
            if (++idle % 64 == 0)
                sched_yield(); /* 2 cores: let the workers run */
            continue;
        }
        idle = 0;
        while (it != NULL) {
            aitem *next = it->next;
            item_complete(it);
            cnt(&T.items_out, 1);
            free(it);
            it = next;
        }
    }
    return NULL;
}

/* ---- commands ------------------------------------------------------------ */

static int cmd_sync(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                    sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)args;
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    sx_complete(done, sx_payload_int(buf, result_of(tag)), 0, NULL);
    return 0;
}

static int cmd_async(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                     sx_payload args, sx_completer *done)
{
    (void)e;
    int64_t mode = 0;
    if (sx_payload_get_int(args, &mode) != 0)
        return SX_EPROTO;
    aitem *it = item_new(done, pid, tag);
    if (it == NULL)
        return SX_ENOMEM;
    it->mode = (int)mode;
    intptr_t kind = (intptr_t)user;
    it->ping = kind == CMD_PING;
    if (kind == CMD_FAST)
        fast_push(it);
    else
        pool_push(it);
    return 0;
}

static int cmd_failing(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                       sx_payload args, sx_completer *done)
{
    (void)user, (void)e, (void)pid, (void)tag, (void)args, (void)done;
    return SX_EINVAL; /* the engine answers the yield with this error */
}

/* ---- the stressor process --------------------------------------------------
 *
 * State owned by the process's steps (and init / close); in_step is the
 * only field another thread could ever touch at the same time, and only if
 * the engine ran two steps of it at once.
 */
typedef struct {
    atomic_int in_step;
    uint32_t idx;
    uint64_t rng;
    uint32_t steps, goal;
    uint32_t pending; /* tagged yields not yet answered */
    uint64_t next_tag;
    uint64_t slot_tag[TAG_SLOTS]; /* tag + 1 while pending, else 0 */
    uint8_t slot_kind[TAG_SLOTS];
    uint32_t slot_aux[TAG_SLOTS]; /* peer message id */
    uint32_t pings_out;           /* pings asked for, not yet received */
    uint32_t yields, completions, pings_req, pings_recv;
    uint32_t sink_seq[N_SINKS];
    uint32_t peers;
    bool finishing, done;
} stressor;

static int stressor_init(void *state, const sx_init_ctx *ctx,
                         const char *method, const sx_payload *input,
                         size_t n_input)
{
    (void)input, (void)n_input;
    stressor *st = state;
    if (strcmp(method, "bad") == 0)
        return SX_EUNKNOWN_METHOD; /* a deliberate init error */
    /* relaxed: only hands out unique indices. */
    uint32_t idx =
        atomic_fetch_add_explicit(&T.next_idx, 1, memory_order_relaxed);
    if (idx >= T.n)
        return SX_ELIMIT; /* budget used up: submit / spawn fails */
    st->idx = idx;
    seed(&st->rng, idx);
    st->goal = 4 + (uint32_t)(rnd(&st->rng) % 16);
    /* release: pairs with the acquire in pid_at. */
    atomic_store_explicit(&T.pids[idx], sx_init_pid(ctx).id,
                          memory_order_release);
    cnt(&T.inits, 1);
    return 0;
}

static void stressor_close(void *state)
{
    stressor *st = state;
    /* relaxed: atomicity is all the overlap check needs. */
    if (atomic_exchange_explicit(&st->in_step, 1, memory_order_relaxed) != 0)
        cnt(&T.in_step_violations, 1);
    if (atomic_fetch_add_explicit(&T.closed[st->idx], 1,
                                  memory_order_relaxed) != 0)
        bad("stressor %u closed twice", st->idx);
    if (st->done) {
        cnt(&T.done_yields, st->yields);
        cnt(&T.done_completions, st->completions);
        cnt(&T.done_pings, st->pings_req);
        cnt(&T.done_pings_recv, st->pings_recv);
        cnt(&T.closes_done, 1);
    }
    /* release: main reads closes with acquire, then this process's rows
     * (sent_to) and everything its steps wrote. */
    atomic_fetch_add_explicit(&T.closes, 1, memory_order_release);
}

static void on_completion(stressor *st, const sx_event *ev)
{
    unsigned slot = (unsigned)(ev->tag % TAG_SLOTS);
    if (ev->tag == SX_TAG_NONE || st->slot_tag[slot] != ev->tag + 1) {
        bad("stressor %u: completion for unknown or answered tag %llu", st->idx,
            (unsigned long long)ev->tag);
        return;
    }
    st->slot_tag[slot] = 0;
    st->pending--;
    st->completions++;
    cnt(&T.completions, 1);
    int want = 0;
    int64_t v = 0;
    switch (st->slot_kind[slot]) {
    case K_SYNC:
    case K_ASYNC:
    case K_FAST:
    case K_PING:
        if (ev->error != 0 || sx_payload_get_int(ev->data, &v) != 0 ||
            v != result_of(ev->tag))
            bad("stressor %u: tag %llu: wrong result (error %s)", st->idx,
                (unsigned long long)ev->tag, sx_errname(ev->error));
        return;
    case K_ASYNC_ERR:
        want = SX_ETIMEDOUT;
        break;
    case K_FAILING:
        want = SX_EINVAL;
        break;
    case K_UNKNOWN:
        want = SX_EUNKNOWN_COMMAND;
        break;
    case K_SINK:
    case K_NOOP:
        break;
    case K_PEER: {
        uint32_t id = st->slot_aux[slot];
        uint8_t s = ST_ACCEPTED;
        if (ev->error == SX_ENOTFOUND || ev->error == SX_ECLOSED)
            s = ST_REJECTED;
        else if (ev->error != 0)
            bad("stressor %u: peer send: %s", st->idx, sx_errname(ev->error));
        /* relaxed: read by main after everything is joined. */
        atomic_store_explicit(&T.peer_status[id], s, memory_order_relaxed);
        return;
    }
    case K_SPAWN: {
        sx_unpack u;
        sx_pid child;
        sx_unpack_init(&u, ev->data);
        if (ev->error == 0 && sx_unpack_pid(&u, &child) == 0)
            cnt(&T.spawns_ok, 1);
        else if (ev->error != SX_ELIMIT) /* index budget used up */
            bad("stressor %u: spawn: %s", st->idx, sx_errname(ev->error));
        return;
    }
    default:
        bad("stressor %u: tag %llu has no kind", st->idx,
            (unsigned long long)ev->tag);
        return;
    }
    if (ev->error != want)
        bad("stressor %u: tag %llu (kind %d): error %s, want %s", st->idx,
            (unsigned long long)ev->tag, st->slot_kind[slot],
            sx_errname(ev->error), sx_errname(want));
}

static void on_message(stressor *st, const sx_event *ev)
{
    uint64_t a, b;
    const char *t = ev->topic != NULL ? ev->topic : "(null)";
    if (strcmp(t, SX_TOPIC_CANCEL) == 0) {
        char reason[32];
        unsigned long id;
        if (sx_payload_get_str(ev->data, reason, sizeof(reason)) != 0 ||
            sscanf(reason, "c%lu", &id) != 1 || id >= T.cancel_max) {
            bad("stressor %u: bad cancel", st->idx);
            return;
        }
        atomic_fetch_add_explicit(&T.cancel_recv[id], 1, memory_order_relaxed);
        cnt(&T.cancels_recv, 1);
        if (rnd(&st->rng) & 1)
            st->finishing = true;
    } else if (strcmp(t, "peer") == 0) {
        if (!unpack_pair(ev->data, &a, &b) || a >= T.n || b >= PEER_MAX ||
            ev->from.id != pid_at((uint32_t)a)) {
            bad("stressor %u: bad peer message", st->idx);
            return;
        }
        atomic_fetch_add_explicit(&T.peer_recv[a * PEER_MAX + b], 1,
                                  memory_order_relaxed);
        cnt(&T.peer_recv_n, 1);
    } else if (strcmp(t, "ext") == 0) {
        if (!unpack_pair(ev->data, &a, &b) || a < T.n || a >= T.senders ||
            !sx_pid_eq(ev->from, SX_PID_NONE))
            bad("stressor %u: bad ext message", st->idx);
        cnt(&T.ext_recv, 1);
    } else if (strcmp(t, "ping") == 0) {
        int64_t v;
        if (sx_payload_get_int(ev->data, &v) != 0 ||
            (uint64_t)v != pid_at(st->idx) || st->pings_out == 0) {
            bad("stressor %u: unexpected ping", st->idx);
            return;
        }
        st->pings_out--;
        st->pings_recv++;
        cnt(&T.pings_recv, 1);
    } else {
        bad("stressor %u: unexpected topic %s", st->idx, t);
    }
}

/* A tag whose slot is free; the caller has checked pending < MAX_PENDING. */
static uint64_t tag_take(stressor *st, uint8_t kind)
{
    while (st->slot_tag[st->next_tag % TAG_SLOTS] != 0)
        st->next_tag++;
    uint64_t tag = st->next_tag++;
    st->slot_tag[tag % TAG_SLOTS] = tag + 1;
    st->slot_kind[tag % TAG_SLOTS] = kind;
    st->pending++;
    st->yields++;
    cnt(&T.yields, 1);
    return tag;
}

static void yield_or_die(sx_step_output *out, uint16_t cmd, uint64_t tag,
                         sx_payload args)
{
    int rc = sx_yield(out, cmd, tag, args);
    if (rc != 0)
        bad("sx_yield: %s", sx_errname(rc));
}

static void yield_int(stressor *st, sx_step_output *out, uint16_t cmd,
                      uint8_t kind, int64_t arg)
{
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    uint64_t tag = tag_take(st, kind);
    yield_or_die(out, cmd, tag, sx_payload_int(buf, arg));
}

/* What a send step wrote. */
enum { SENT_NOTHING, SENT_TAGGED, SENT_UNTAGGED };

/* A send with SX_TAG_NONE gets no completion, yet the engine blocks a
 * step that wrote yields until a completion or a message arrives
 * (docs/SCHEDULER.md §2), so it is only used when something else is certain to
 * come (can_untagged: a pending yield or ping). */
static int send_sink(stressor *st, sx_step_output *out, bool can_untagged)
{
    unsigned s = (unsigned)(rnd(&st->rng) % N_SINKS);
    uint8_t buf[64];
    sx_payload args =
        pack_send(buf, sizeof(buf), T.sinks[s], "m", st->idx, st->sink_seq[s]);
    bool tagged = !can_untagged || rnd(&st->rng) % 3 != 0;
    yield_or_die(out, SX_CMD_SEND, tagged ? tag_take(st, K_SINK) : SX_TAG_NONE,
                 args);
    st->sink_seq[s]++;
    T.sent_to[(size_t)s * T.senders + st->idx] = st->sink_seq[s];
    cnt(&T.sink_msgs, 1);
    return tagged ? SENT_TAGGED : SENT_UNTAGGED;
}

static int send_peer(stressor *st, sx_step_output *out, bool can_untagged)
{
    uint32_t to = recent_target(&st->rng);
    uint64_t id = to != UINT32_MAX && to != st->idx ? pid_at(to) : 0;
    if (id == 0 || st->peers >= PEER_MAX)
        return SENT_NOTHING;
    uint32_t msg = st->idx * PEER_MAX + st->peers++;
    uint8_t buf[64];
    sx_payload args = pack_send(buf, sizeof(buf), pid_of_id(id), "peer",
                                st->idx, msg % PEER_MAX);
    atomic_store_explicit(&T.peer_status[msg], ST_SENT, memory_order_relaxed);
    cnt(&T.peer_sent, 1);
    if (can_untagged && rnd(&st->rng) % 4 == 0) {
        yield_or_die(out, SX_CMD_SEND, SX_TAG_NONE, args);
        return SENT_UNTAGGED;
    }
    uint64_t tag = tag_take(st, K_PEER);
    st->slot_aux[tag % TAG_SLOTS] = msg;
    yield_or_die(out, SX_CMD_SEND, tag, args);
    return SENT_TAGGED;
}

static void spawn_child(stressor *st, sx_step_output *out)
{
    uint8_t buf[64];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof(buf));
    sx_pack_array(&pk, 3);
    sx_pack_str(&pk, "stressor");
    sx_pack_str(&pk, "run");
    sx_pack_array(&pk, 0);
    CHECK_EQ_INT(pk.err, 0);
    yield_or_die(out, SX_CMD_SPAWN, tag_take(st, K_SPAWN),
                 sx_pack_payload(&pk));
}

/* A status for a step that wrote yields: any of them must wait. */
static void any_status(stressor *st, sx_step_output *out)
{
    switch (rnd(&st->rng) % 3) {
    case 0:
        sx_continue(out);
        break;
    case 1:
        sx_wait(out);
        break;
    default:
        sx_idle(out); /* with yields: waits like WAIT (docs/SCHEDULER.md §2) */
        break;
    }
}

/* Sleeps only when something is certain to wake it. */
static void rest(stressor *st, sx_step_output *out, bool prefer_idle)
{
    if (st->pings_out > 0 && (prefer_idle || st->pending == 0))
        sx_idle(out); /* the ping is a message: it wakes IDLE */
    else if (st->pending > 0 || st->pings_out > 0)
        sx_wait(out);
    else
        sx_continue(out);
}

/* An async delay class: mostly none, sometimes a yield or a short spin,
 * rarely a sleep (which costs the pool thread ~60 µs). */
static int delay_mode(stressor *st)
{
    unsigned d = (unsigned)(rnd(&st->rng) % 32);
    return d < 16 ? 0 : d < 24 ? 1 : d < 31 ? 2 : 3;
}

/* Chooses what the step does; returns an action code for the diagnosis. */
static unsigned act(stressor *st, sx_step_output *out)
{
    if (st->finishing || st->steps >= st->goal) {
        if (st->pending == 0 && st->pings_out == 0) {
            uint8_t buf[SX_PAYLOAD_INT_MAX];
            st->done = true;
            sx_done(out, sx_payload_int(buf, st->idx));
            return 1;
        }
        rest(st, out, rnd(&st->rng) & 1);
        return 2;
    }
    unsigned r = (unsigned)(rnd(&st->rng) % 100);
    if (quiet(st->idx) && st->pending == 0 && st->pings_out == 0 && r < 50) {
        /* The race the negative control needs: one fast completion is
         * the only event that can ever wake this process. */
        yield_int(st, out, CMD_FAST, K_FAST, 0);
        sx_wait(out);
        return 5;
    }
    unsigned room = MAX_PENDING - st->pending;
    unsigned k = 1 + (unsigned)(rnd(&st->rng) % 3);
    if (k > room)
        k = room;
    if (r < 25 && k > 0) {
        for (unsigned i = 0; i < k; i++)
            yield_int(st, out, CMD_SYNC, K_SYNC, 0);
        any_status(st, out);
        return 3;
    }
    if (r < 40 && k > 0) {
        for (unsigned i = 0; i < k; i++) {
            int mode = delay_mode(st);
            if (rnd(&st->rng) % 8 == 0)
                mode |= MODE_ERR;
            yield_int(st, out, CMD_ASYNC,
                      (mode & MODE_ERR) ? K_ASYNC_ERR : K_ASYNC, mode);
        }
        any_status(st, out);
        return 4;
    }
    if (r < 55 && k > 0) {
        yield_int(st, out, CMD_FAST, K_FAST, 0);
        if (st->pending == 1 && st->pings_out == 0)
            sx_wait(out);
        else
            any_status(st, out);
        return 5;
    }
    if (r < 61 && k > 0 && st->pings_out < PINGS_MAX) {
        yield_int(st, out, CMD_PING, K_PING, delay_mode(st));
        st->pings_out++;
        st->pings_req++;
        any_status(st, out);
        return 6;
    }
    if (r < 75 && k > 0) {
        bool can_untagged = st->pending > 0 || st->pings_out > 0;
        int sent = r < 69 ? send_sink(st, out, can_untagged)
                          : send_peer(st, out, can_untagged);
        if (sent == SENT_TAGGED)
            any_status(st, out);
        else if (sent == SENT_UNTAGGED)
            rest(st, out, rnd(&st->rng) & 1); /* never CONTINUE here */
        else
            sx_continue(out);
        return r < 69 ? 7 : 8;
    }
    if (r < 77 && k > 0) {
        spawn_child(st, out);
        any_status(st, out);
        return 9;
    }
    if (r < 79 && k > 0) {
        static const struct {
            uint16_t cmd;
            uint8_t kind;
        } odd[] = { { CMD_FAILING, K_FAILING },
                    { CMD_UNKNOWN, K_UNKNOWN },
                    { SX_CMD_NOOP, K_NOOP } };
        unsigned j = (unsigned)(rnd(&st->rng) % 3);
        yield_or_die(out, odd[j].cmd, tag_take(st, odd[j].kind),
                     (sx_payload){ NULL, 0 });
        any_status(st, out);
        return 10;
    }
    if (r < 90) {
        rest(st, out, r < 85);
        return 11;
    }
    sx_continue(out);
    return 12;
}

static int stressor_step(void *state, const sx_event *events, size_t n,
                         sx_step_output *out)
{
    stressor *st = state;
    /* relaxed: atomicity is all the overlap check needs; the engine's
     * state word orders the plain fields (ThreadSanitizer checks that). */
    if (atomic_exchange_explicit(&st->in_step, 1, memory_order_relaxed) != 0)
        cnt(&T.in_step_violations, 1);
    if (st->done)
        bad("stressor %u: step after DONE", st->idx);
    st->steps++;
    for (size_t i = 0; i < n; i++) {
        if (events[i].type == SX_EVENT_YIELD_COMPLETE)
            on_completion(st, &events[i]);
        else
            on_message(st, &events[i]);
    }
    unsigned a = act(st, out);
    /* relaxed: a hint for the stall diagnosis. */
    atomic_store_explicit(&T.dbg[st->idx],
                          (st->pending & 0xff) << 24 |
                              (st->pings_out & 0xff) << 16 | a << 8 |
                              (st->finishing ? 1u : 0u),
                          memory_order_relaxed);
    atomic_store_explicit(&st->in_step, 0, memory_order_relaxed);
    return 0;
}

static const sx_process_type stressor_type = {
    .name = "stressor",
    .state_size = sizeof(stressor),
    .init = stressor_init,
    .step = stressor_step,
    .close = stressor_close,
};

/* ---- the sink process ----------------------------------------------------
 *
 * Lives until it gets "stop"; checks each sender's messages arrive in
 * sequence, each exactly once (its row of `expect`).
 */
typedef struct {
    atomic_int in_step;
    uint32_t s;
} sink;

static int sink_init(void *state, const sx_init_ctx *ctx, const char *method,
                     const sx_payload *input, size_t n_input)
{
    (void)ctx, (void)method;
    sink *sk = state;
    int64_t s;
    if (n_input != 1 || sx_payload_get_int(input[0], &s) != 0 || s < 0 ||
        s >= N_SINKS)
        return SX_EINVAL;
    sk->s = (uint32_t)s;
    cnt(&T.inits, 1);
    return 0;
}

static void sink_close(void *state)
{
    sink *sk = state;
    if (atomic_exchange_explicit(&sk->in_step, 1, memory_order_relaxed) != 0)
        cnt(&T.in_step_violations, 1);
    cnt(&T.closes_done, 1);
    atomic_fetch_add_explicit(&T.closes, 1, memory_order_release);
}

static void sink_message(sink *sk, const sx_event *ev, bool *stop)
{
    uint64_t a, b;
    const char *t = ev->topic != NULL ? ev->topic : "(null)";
    if (strcmp(t, "stop") == 0) {
        *stop = true;
        return;
    }
    if (strcmp(t, SX_TOPIC_CANCEL) == 0)
        return;
    if (strcmp(t, "m") != 0 || !unpack_pair(ev->data, &a, &b) ||
        a >= T.senders) {
        bad("sink %u: bad message (topic %s)", sk->s, t);
        return;
    }
    bool from_ok = a < T.n ? ev->from.id == pid_at((uint32_t)a)
                           : sx_pid_eq(ev->from, SX_PID_NONE);
    if (!from_ok)
        bad("sink %u: message of sender %llu has the wrong from", sk->s,
            (unsigned long long)a);
    uint32_t *want = &T.expect[(size_t)sk->s * T.senders + a];
    if (b != *want)
        bad("sink %u: sender %llu: seq %llu, want %u (lost, duplicated or "
            "reordered)",
            sk->s, (unsigned long long)a, (unsigned long long)b, *want);
    *want = (uint32_t)b + 1;
    cnt(&T.sink_recv, 1);
}

static int sink_step(void *state, const sx_event *events, size_t n,
                     sx_step_output *out)
{
    sink *sk = state;
    if (atomic_exchange_explicit(&sk->in_step, 1, memory_order_relaxed) != 0)
        cnt(&T.in_step_violations, 1);
    bool stop = false;
    for (size_t i = 0; i < n; i++) {
        if (events[i].type != SX_EVENT_MESSAGE)
            bad("sink %u: unexpected completion", sk->s);
        else
            sink_message(sk, &events[i], &stop);
    }
    if (stop)
        sx_done(out, (sx_payload){ NULL, 0 });
    else
        sx_idle(out);
    atomic_store_explicit(&sk->in_step, 0, memory_order_relaxed);
    return 0;
}

static const sx_process_type sink_type = {
    .name = "sink",
    .state_size = sizeof(sink),
    .init = sink_init,
    .step = sink_step,
    .close = sink_close,
};

/* ---- outside threads: cancels / terminates, messages -------------------- */

static _Atomic bool outside_quit;

static bool outside_running(void)
{
    /* acquire: pairs with the release store in stop_outside. */
    return !atomic_load_explicit(&outside_quit, memory_order_acquire);
}

/* A recent, not quiet stressor's pid id, or 0. */
static uint64_t random_recent(uint64_t *rng)
{
    uint32_t i = recent_target(rng);
    return i != UINT32_MAX ? pid_at(i) : 0;
}

static void *canceller_main(void *arg)
{
    (void)arg;
    uint64_t rng, done = 0;
    seed(&rng, 77);
    while (outside_running()) {
        if (done >= indices_used() / CANCEL_EVERY) {
            tx_sleep_us(50);
            continue;
        }
        done++;
        uint64_t id = random_recent(&rng);
        if (id == 0)
            continue;
        if (rnd(&rng) % 8 == 0) {
            int rc = sx_engine_terminate(T.e, pid_of_id(id));
            if (rc == 0)
                cnt(&T.terms_ok, 1);
            else if (rc != SX_ENOTFOUND)
                bad("terminate: %s", sx_errname(rc));
            continue;
        }
        /* relaxed: this thread is the only writer. */
        uint32_t c =
            atomic_fetch_add_explicit(&T.cancel_next, 1, memory_order_relaxed);
        if (c >= T.cancel_max)
            continue;
        char reason[32];
        snprintf(reason, sizeof(reason), "c%u", c);
        int rc = sx_engine_cancel(T.e, pid_of_id(id), reason);
        uint8_t s = ST_ACCEPTED;
        if (rc == SX_ENOTFOUND || rc == SX_ECLOSED)
            s = ST_REJECTED;
        else if (rc != 0)
            bad("cancel: %s", sx_errname(rc));
        else
            cnt(&T.cancels_ok, 1);
        atomic_store_explicit(&T.cancel_status[c], s, memory_order_relaxed);
    }
    return NULL;
}

static void *ext_main(void *arg)
{
    uint32_t sender = T.n + (uint32_t)(uintptr_t)arg;
    uint32_t seq[N_SINKS] = { 0 };
    uint64_t rng, done = 0;
    seed(&rng, sender);
    while (outside_running()) {
        if (done >= indices_used() / EXT_EVERY) {
            tx_sleep_us(50);
            continue;
        }
        done++;
        uint8_t buf[32];
        if (rnd(&rng) & 1) {
            unsigned s = (unsigned)(rnd(&rng) % N_SINKS);
            int rc =
                sx_engine_send(T.e, SX_PID_NONE, T.sinks[s], "m",
                               pack_pair(buf, sizeof(buf), sender, seq[s]));
            if (rc != 0)
                bad("ext send to sink %u: %s", s, sx_errname(rc));
            else
                seq[s]++;
            cnt(&T.sink_msgs, 1);
        } else {
            uint64_t id = random_recent(&rng);
            if (id == 0)
                continue;
            int rc = sx_engine_send(T.e, SX_PID_NONE, pid_of_id(id), "ext",
                                    pack_pair(buf, sizeof(buf), sender, 0));
            if (rc == 0)
                cnt(&T.ext_sent, 1);
            else if (rc != SX_ENOTFOUND && rc != SX_ECLOSED)
                bad("ext send: %s", sx_errname(rc));
        }
    }
    /* Read by main after the join. */
    for (unsigned s = 0; s < N_SINKS; s++)
        T.sent_to[(size_t)s * T.senders + sender] = seq[s];
    return NULL;
}

/* ---- the watchdog ---- */

static uint64_t total_steps(sx_engine_stats *st, sx_worker_stats *ws)
{
    CHECK_RC(sx_engine_stats_get(T.e, st, ws, SX_MAX_WORKERS), 0);
    uint64_t n = 0;
    for (unsigned i = 0; i < st->workers; i++)
        n += ws[i].steps;
    return n;
}

static int stressor_of(uint64_t id)
{
    for (uint32_t i = 0; i < T.n; i++)
        if (pid_at(i) == id)
            return (int)i;
    return -1;
}

/* Steps and closes so far: what the watchdog calls progress. */
static uint64_t progress(void)
{
    static sx_worker_stats ws[SX_MAX_WORKERS];
    sx_engine_stats st;
    return total_steps(&st, ws) + get(&T.closes);
}

/* After a snapshot: true if progress resumed within `ms` (checked every 20
 * ms). A lost wake-up strands its processes for good; an engine that
 * merely was not run (a starved or descheduled test process) moves again
 * by itself. */
static bool resumed(double ms)
{
    double end = sx_test_now_ms() + ms;
    for (;;) {
        if (progress() != T.last_progress)
            return true;
        if (sx_test_now_ms() >= end)
            return false;
        tx_sleep_us(20000);
    }
}

/* No step ran for STALL_MS with processes live: say what is left; then
 * fail, unless the engine moves again during the snapshot or within
 * STALL_MS / 2 after it (a pause: logged, counted, not a failure). */
static void stalled(const char *phase)
{
    static sx_worker_stats ws[SX_MAX_WORKERS];
    sx_engine_stats st;
    total_steps(&st, ws);
    size_t cap = (size_t)st.live + 64;
    sx_process_info *info = calloc(cap, sizeof(*info));
    CHECK(info != NULL);
    int n = sx_engine_list(T.e, info, cap);
    CHECK(n >= 0);
    unsigned by_state[8] = { 0 };
    bool runnable = false;
    for (int i = 0; i < n; i++) {
        by_state[info[i].state & 7]++;
        if (info[i].state == SX_PSTATE_READY ||
            info[i].state == SX_PSTATE_RUNNING)
            runnable = true;
    }
    fprintf(stderr,
            "stress: STALL in %s: live %llu, listed %d (ready %u, running "
            "%u, blocked %u, idle %u), parked %u of %u workers, global "
            "queue %llu\n",
            phase, (unsigned long long)st.live, n, by_state[SX_PSTATE_READY],
            by_state[SX_PSTATE_RUNNING], by_state[SX_PSTATE_BLOCKED],
            by_state[SX_PSTATE_IDLE], st.parked, st.workers,
            (unsigned long long)st.global_queue);
    for (unsigned i = 0; i < st.workers; i++)
        fprintf(stderr,
                "  worker %u: steps %llu parks %llu wakeups %llu "
                "timeout_finds %llu\n",
                i, (unsigned long long)ws[i].steps,
                (unsigned long long)ws[i].parks,
                (unsigned long long)ws[i].wakeups,
                (unsigned long long)ws[i].timeout_finds);
    for (int i = 0; i < n && i < 20; i++) {
        char text[SX_PID_TEXT_MAX];
        sx_pid_format(info[i].pid, text, sizeof(text));
        int idx = strcmp(info[i].type, "stressor") == 0
                      ? stressor_of(info[i].pid.id)
                      : -1;
        fprintf(stderr, "  %s %s: %s, %llu steps", text, info[i].type,
                sx_pstate_name(info[i].state),
                (unsigned long long)info[i].steps);
        if (idx >= 0) {
            uint32_t d =
                atomic_load_explicit(&T.dbg[idx], memory_order_relaxed);
            fprintf(stderr,
                    "; #%d%s, last step: pending %u, pings out %u, "
                    "action %u, finishing %u",
                    idx, quiet((uint32_t)idx) ? " (quiet)" : "", d >> 24,
                    (d >> 16) & 0xff, (d >> 8) & 0xff, d & 1);
        }
        fputc('\n', stderr);
    }
    if (runnable && st.parked == st.workers)
        fprintf(stderr, "stress: runnable process while all workers parked\n");
    fprintf(stderr,
            "stress: the watchdog's own longest gap between looks in this "
            "silence: %.0f ms\n",
            T.look_gap_max);
    free(info);
    double silent = sx_test_now_ms() - T.last_change;
    if (resumed(STALL_MS / 2)) {
        /* The snapshot above may then be inconsistent (taken while the
         * engine ran again): listed < live, global queue > ready. */
        fprintf(stderr,
                "stress: PAUSE in %s, not a stall: no step or close for "
                "%.0f ms, then the engine moved again by itself\n",
                phase, silent);
        T.pauses++;
        T.last_progress = progress();
        T.last_change = sx_test_now_ms();
        T.look_gap_max = 0;
        return;
    }
    SX_FAILF("stalled: %llu processes left (%s)", (unsigned long long)st.live,
             phase);
}

/* Called by the main thread's waits: fails on a stall. */
static void watch(const char *phase)
{
    double now = sx_test_now_ms();
    if (now - T.last_look < 20)
        return;
    if (T.last_look > 0 && now - T.last_look > T.look_gap_max)
        T.look_gap_max = now - T.last_look;
    T.last_look = now;
    static sx_worker_stats ws[SX_MAX_WORKERS];
    sx_engine_stats st;
    uint64_t p = total_steps(&st, ws) + get(&T.closes);
    if (p != T.last_progress || st.live == 0) {
        T.last_progress = p;
        T.last_change = now;
        T.look_gap_max = 0;
        return;
    }
    if (now - T.last_change > STALL_MS)
        stalled(phase);
}

/* ---- a case
 * ------------------------------------------------------------------ */

static uint32_t budget(void)
{
    double scale = 1.0;
    const char *s = getenv("SX_STRESS_SCALE");
    if (s != NULL && *s != 0)
        scale = atof(s);
    double n = BASE_PROCESSES * scale;
    if (n < 100)
        n = 100;
    if (n > 10e6)
        n = 10e6;
    return (uint32_t)n;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    CHECK(p != NULL);
    return p;
}

static void ctx_init(unsigned workers)
{
    memset(&T, 0, sizeof(T));
    T.n = budget();
    T.senders = T.n + N_EXT;
    T.pids = xcalloc(T.n, sizeof(*T.pids));
    T.closed = xcalloc(T.n, sizeof(*T.closed));
    T.dbg = xcalloc(T.n, sizeof(*T.dbg));
    T.sent_to = xcalloc((size_t)N_SINKS * T.senders, sizeof(*T.sent_to));
    T.expect = xcalloc((size_t)N_SINKS * T.senders, sizeof(*T.expect));
    T.peer_status = xcalloc((size_t)T.n * PEER_MAX, 1);
    T.peer_recv = xcalloc((size_t)T.n * PEER_MAX, 1);
    T.cancel_max = T.n / 4 + 16;
    T.cancel_status = xcalloc(T.cancel_max, 1);
    T.cancel_recv = xcalloc(T.cancel_max, 1);
    T.last_change = sx_test_now_ms();

    sx_engine_config cfg = { 0 };
    cfg.workers = workers;
    cfg.node = 0;
    cfg.host = 1;
    T.e = tx_engine_new(&cfg);
    tx_engine_register(T.e, &stressor_type, 1);
    tx_engine_register(T.e, &sink_type, 1);
    tx_engine_command(T.e, CMD_SYNC, "sync", cmd_sync, NULL);
    tx_engine_command(T.e, CMD_ASYNC, "async", cmd_async,
                      (void *)(intptr_t)CMD_ASYNC);
    tx_engine_command(T.e, CMD_FAST, "fast", cmd_async,
                      (void *)(intptr_t)CMD_FAST);
    tx_engine_command(T.e, CMD_PING, "ping", cmd_async,
                      (void *)(intptr_t)CMD_PING);
    tx_engine_command(T.e, CMD_FAILING, "failing", cmd_failing, NULL);
    tx_engine_start(T.e);
}

static void ctx_fini(void)
{
    free(T.pids);
    free(T.closed);
    free(T.dbg);
    free(T.sent_to);
    free(T.expect);
    free(T.peer_status);
    free(T.peer_recv);
    free(T.cancel_status);
    free(T.cancel_recv);
}

static void threads_start(pthread_t *outside)
{
    memset(&Q, 0, sizeof(Q));
    CHECK_EQ_INT(pthread_mutex_init(&Q.mu, NULL), 0);
    CHECK_EQ_INT(pthread_cond_init(&Q.cv, NULL), 0);
    atomic_init(&Q.fast_top, NULL);
    atomic_init(&Q.fast_quit, false);
    atomic_init(&outside_quit, false);
    for (uintptr_t i = 0; i < N_POOL; i++)
        CHECK_EQ_INT(
            pthread_create(&Q.pool[i], NULL, pool_main, (void *)(i + 1000)), 0);
    CHECK_EQ_INT(pthread_create(&Q.fast, NULL, fast_main, NULL), 0);
    CHECK_EQ_INT(pthread_create(&outside[0], NULL, canceller_main, NULL), 0);
    for (uintptr_t i = 0; i < N_EXT; i++)
        CHECK_EQ_INT(pthread_create(&outside[1 + i], NULL, ext_main, (void *)i),
                     0);
}

static void stop_outside(pthread_t *outside)
{
    /* release: pairs with the acquire in outside_running. */
    atomic_store_explicit(&outside_quit, true, memory_order_release);
    for (unsigned i = 0; i < 1 + N_EXT; i++)
        pthread_join(outside[i], NULL);
}

static void stop_completers(void)
{
    pthread_mutex_lock(&Q.mu);
    Q.quit = true;
    pthread_cond_broadcast(&Q.cv);
    pthread_mutex_unlock(&Q.mu);
    atomic_store_explicit(&Q.fast_quit, true, memory_order_release);
    for (unsigned i = 0; i < N_POOL; i++)
        pthread_join(Q.pool[i], NULL);
    pthread_join(Q.fast, NULL);
    pthread_cond_destroy(&Q.cv);
    pthread_mutex_destroy(&Q.mu);
}

/* Submits the whole budget, keeping at most LIVE_MAX stressors alive. */
static void submit_all(void)
{
    uint64_t tries = 0;
    for (;;) {
        uint64_t live = get(&T.inits) - get(&T.closes);
        if (live >= LIVE_MAX + N_SINKS) {
            watch("submit");
            tx_sleep_us(100);
            continue;
        }
        if (++tries % 997 == 0) {
            /* An init error: submit's error; no close (counted below). */
            CHECK_RC(sx_engine_submit(T.e, "stressor", "bad", NULL, 0, NULL),
                     SX_EUNKNOWN_METHOD);
            cnt(&T.init_fails, 1);
            continue;
        }
        int rc = sx_engine_submit(T.e, "stressor", "run", NULL, 0, NULL);
        if (rc == SX_ELIMIT)
            break; /* the index budget is used up */
        CHECK_RC(rc, 0);
        if (tries % 256 == 0)
            watch("submit");
    }
}

/* Sends "stop" to the sinks and waits for their outcome. */
static void stop_sinks(void)
{
    for (unsigned s = 0; s < N_SINKS; s++)
        CHECK_RC(sx_engine_send(T.e, SX_PID_NONE, T.sinks[s], "stop",
                                (sx_payload){ NULL, 0 }),
                 0);
    for (unsigned s = 0; s < N_SINKS; s++) {
        sx_result r;
        int rc;
        while ((rc = sx_engine_wait(T.e, T.sinks[s], 20, &r)) == SX_ETIMEDOUT)
            watch("sinks");
        CHECK_RC(rc, 0);
        CHECK_RC(r.error, 0);
        sx_result_free(&r);
    }
}

static void check_exactly_once(void)
{
    uint32_t used = indices_used();
    for (uint32_t i = 0; i < used; i++)
        if (atomic_load_explicit(&T.closed[i], memory_order_relaxed) != 1)
            SX_FAILF("stressor %u closed %u times", i,
                     (unsigned)atomic_load_explicit(&T.closed[i],
                                                    memory_order_relaxed));
    for (size_t i = 0; i < (size_t)N_SINKS * T.senders; i++)
        if (T.expect[i] != T.sent_to[i])
            SX_FAILF("sink %zu, sender %zu: received %u of %u messages",
                     i / T.senders, i % T.senders, T.expect[i], T.sent_to[i]);
    for (size_t i = 0; i < (size_t)T.n * PEER_MAX; i++) {
        unsigned r =
            atomic_load_explicit(&T.peer_recv[i], memory_order_relaxed);
        unsigned s =
            atomic_load_explicit(&T.peer_status[i], memory_order_relaxed);
        if (r > 1 || (r == 1 && (s == ST_REJECTED || s == ST_NONE)))
            SX_FAILF("peer message %zu: received %u times, status %u", i, r, s);
    }
    for (size_t i = 0; i < T.cancel_max; i++) {
        unsigned r =
            atomic_load_explicit(&T.cancel_recv[i], memory_order_relaxed);
        unsigned s =
            atomic_load_explicit(&T.cancel_status[i], memory_order_relaxed);
        if (r > 1 || (r == 1 && s == ST_REJECTED))
            SX_FAILF("cancel %zu: received %u times, status %u", i, r, s);
    }
}

/* What the engine said at the end of a run. */
typedef struct {
    sx_engine_stats st;
    sx_worker_stats ws[SX_MAX_WORKERS];
    uint64_t steps;
} end_stats;

/* Runs a whole case on the engine: sinks, threads, every stressor, the
 * sinks' stop; fills *out once the engine is quiet, then frees it. */
static void run(end_stats *out)
{
    /* The sinks first: the threads read T.sinks. */
    for (unsigned s = 0; s < N_SINKS; s++) {
        uint8_t buf[SX_PAYLOAD_INT_MAX];
        sx_payload in = sx_payload_int(buf, s);
        CHECK_RC(sx_engine_submit(T.e, "sink", "sink", &in, 1, &T.sinks[s]), 0);
    }
    pthread_t outside[1 + N_EXT];
    threads_start(outside);

    submit_all();
    stop_outside(outside);
    /* Every stressor finishes on its own (they only wait for events that
     * are certain to come). */
    while (get(&T.closes) < get(&T.inits) - N_SINKS) {
        watch("drain");
        tx_sleep_us(500);
    }
    stop_sinks();
    CHECK_EQ_U64(get(&T.closes), get(&T.inits));

    /* A stressor's close (counted above) runs before the engine takes it
     * out of `live`: poll until the figure has caught up. */
    out->steps = total_steps(&out->st, out->ws);
    while (out->st.live > 0) {
        watch("quiesce");
        tx_sleep_us(200);
        out->steps = total_steps(&out->st, out->ws);
    }
    stop_completers();
    CHECK_EQ_U64(get(&T.items_in), get(&T.items_out));
    tx_engine_down(T.e);
    T.e = NULL;
}

static void check_counts(const end_stats *es)
{
    const sx_engine_stats *st = &es->st;
    /* At most one step in flight, nothing odd seen by any step. */
    CHECK_EQ_U64(get(&T.in_step_violations), 0);
    CHECK_EQ_U64(get(&T.bad), 0);
    /* Close once per successful init; the engine agrees. */
    CHECK_EQ_U64(get(&T.inits), indices_used() + N_SINKS);
    CHECK_EQ_U64(get(&T.closes), get(&T.inits));
    CHECK_EQ_U64(st->submitted, get(&T.inits));
    CHECK_EQ_U64(st->live, 0);
    CHECK_EQ_U64(st->failed, 0);
    CHECK_EQ_U64(st->completed, get(&T.closes_done));
    CHECK_EQ_U64(st->terminated, get(&T.closes) - get(&T.closes_done));
    /* Exactly once: yields and pings of processes that finished normally
     * (they wait for all of them), sinks, peers, cancels. */
    CHECK_EQ_U64(get(&T.done_completions), get(&T.done_yields));
    CHECK_EQ_U64(get(&T.done_pings_recv), get(&T.done_pings));
    CHECK_EQ_U64(get(&T.sink_recv), get(&T.sink_msgs));
    /* At most once where the receiver may finish first. */
    CHECK(get(&T.pings_recv) <= get(&T.pings_sent));
    CHECK(get(&T.ext_recv) <= get(&T.ext_sent));
    CHECK(get(&T.cancels_recv) <= get(&T.cancels_ok));
    CHECK(st->terminated <= get(&T.terms_ok));
    check_exactly_once();
    /* No lost wake-up was papered over by the park timeout. */
    for (unsigned i = 0; i < st->workers; i++)
        CHECK_EQ_U64(es->ws[i].timeout_finds, 0);
}

static void report(const end_stats *es, double ms)
{
    uint64_t timeouts = 0;
    for (unsigned i = 0; i < es->st.workers; i++)
        timeouts += es->ws[i].parks - es->ws[i].wakeups;
    printf("# %u processes (%llu spawned, %llu init errors), %llu steps, "
           "%llu yields, %llu completions, %llu sink messages, %llu peer "
           "messages (%llu received), %llu pings, %llu outside messages, "
           "%llu/%llu cancels received, %llu terminated, %llu park "
           "timeouts, %u pauses, %.0f ms\n",
           indices_used(), (unsigned long long)get(&T.spawns_ok),
           (unsigned long long)get(&T.init_fails),
           (unsigned long long)es->steps, (unsigned long long)get(&T.yields),
           (unsigned long long)get(&T.completions),
           (unsigned long long)get(&T.sink_recv),
           (unsigned long long)get(&T.peer_sent),
           (unsigned long long)get(&T.peer_recv_n),
           (unsigned long long)get(&T.pings_recv),
           (unsigned long long)get(&T.ext_recv),
           (unsigned long long)get(&T.cancels_recv),
           (unsigned long long)get(&T.cancels_ok),
           (unsigned long long)es->st.terminated, (unsigned long long)timeouts,
           T.pauses, ms);
}

static void stress(unsigned workers)
{
    double t0 = sx_test_now_ms();
    ctx_init(workers);
#ifdef SX_TEST_SANITIZED
    const char *build = " (sanitizer build)";
#else
    const char *build = "";
#endif
    printf("# %u workers, %u processes%s\n", workers, T.n, build);
    fflush(stdout);
    static end_stats es;
    run(&es);
    check_counts(&es);
    report(&es, sx_test_now_ms() - t0);
    ctx_fini();
}

/* 1 worker: every hand-off is to the worker itself (its own deque) or
 * through the global queue from outside threads; the fast completer races
 * the only worker's decision. */
static void test_workers_1(void)
{
    stress(1);
}

/* 2 workers: stealing and cross-worker wake-ups between two cores. */
static void test_workers_2(void)
{
    stress(2);
}

/* 8 workers: more workers than cores; parking and unparking all the time. */
static void test_workers_8(void)
{
    stress(8);
}

static const sx_test_case cases[] = {
    { "workers_1", test_workers_1 },
    { "workers_2", test_workers_2 },
    { "workers_8", test_workers_8 },
};

SX_TEST_MAIN(cases)

/* engine/internal.h — the engine's internal data: processes, events,
 * workers and the engine itself. Never installed.
 *
 * Ownership and threads are written at each field. The big picture is in
 * docs/ARCHITECTURE.md and docs/SCHEDULER.md.
 */
#ifndef SX_ENGINE_INTERNAL_H
#define SX_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stepx/engine.h>

#include "engine/deque.h"
#include "engine/globalq.h"
#include "engine/injq.h"
#include "engine/spin.h"
#include "engine/twheel.h"
#include "process/mailbox.h"
#include "process/output.h"

/* ---- the process state word --------------------------------------------
 *
 * bits 0-2: the state (sx_pstate; 0 = slot free)
 * bit 3   : WAKE     — an event arrived while RUNNING (or READY)
 * bit 4   : WAKE_MSG — that event was a message or a control event
 * bit 5   : TERM     — terminate requested
 *
 * Every transition is a CAS that preserves the flag bits it does not own;
 * a CAS that fails because a flag flipped re-evaluates and retries
 * (engine/worker.c). Producers only ever fetch_or flags, then try to move
 * BLOCKED / IDLE to READY with a CAS; exactly one thread wins that CAS and
 * queues the process, so a process is in at most one run queue at once.
 */
#define SX__S_MASK 0x7u
#define SX__F_WAKE 0x8u
#define SX__F_MSG 0x10u
#define SX__F_TERM 0x20u
#define SX__F_WAKES (SX__F_WAKE | SX__F_MSG)

/* ---- events ------------------------------------------------------------ */

typedef enum {
    SX__EV_COMPLETION = 0, /* a yield's answer            */
    SX__EV_MESSAGE = 1,    /* send / cancel / @exit       */
} sx__ev_kind;

/* Three sizes of event node (engine/event.c): small, large, and the bundle
 * node (sizeof(sx__ev) + SX__EV_BUNDLE record bytes, "Bundles"). A large
 * node carries a
 * completer's fields and SX__EV_INLINE bytes after them: completers, watchers
 * and every node from sx__ev_alloc. A small node is a message, from
 * sx__ev_alloc_sized when its bytes fit SX__EV_SMALL, or the completer of a
 * command whose answers are that small (sx__cmd.small: sleeps): its bytes
 * overlay the completer fields (which a message never uses, and which
 * sx_complete reads before it writes the answer) and run on past
 * sizeof(sx__ev). With malloc's 8-byte header the chunks are 112 and 208
 * bytes (a message used 208 before): at spawnidle's peak most of its n
 * messages are in flight, so this is most of a process's bytes. */
#define SX__EV_INLINE 104 /* large: topic, data and error message bytes */
#define SX__EV_BUNDLE 896 /* a bundle node's record bytes (event.c) */
#define SX__EV_SMALL 40   /* small: the same bytes, from `small` on */

/* One event node: a queued event, and before that the completer of a
 * pending yield (sx_completer is this struct) or a watcher waiting for a
 * process to finish. Allocated from a per-thread cache (engine/event.c).
 * Owner: whoever holds the pointer; once pushed into a mailbox, the
 * process's consumer. Only a large node (big = 1) may touch sx__ev_inl, and
 * to, engine, dl and t0 after its bytes are set; a small one ends
 * SX__EV_SMALL bytes after `small`, and a small completer's to, engine, dl
 * and t0 are valid only until sx_complete sets its bytes. */
typedef struct sx__ev {
    sx__mpsc_node node; /* first: the mailbox link */
    uint8_t kind;       /* sx__ev_kind */
    uint8_t ctl;        /* 1: control event (overtakes messages) */
    uint8_t watch;      /* watcher kind while on a watch list */
    uint8_t topic_len;  /* bytes, without the NUL */
    uint8_t has_topic;
    uint8_t big; /* size class: 0 small, 1 large, 2 bundle; kept */
    /* A bundle (engine/event.c, "Bundles"): how many messages its records
     * hold; 0 for every other node. data_len then counts record bytes, and
     * the consumer keeps its read cursor in to_gen (messages taken) and
     * tag (their bytes) while part of it waits for the next step. */
    uint16_t nmsg;
    int32_t error;
    uint32_t data_len;
    uint32_t msg_len; /* error message bytes with the NUL, 0 = none */
    uint32_t to_gen;  /* generation of `to` (below) */
    uint64_t tag;
    sx_pid from;
    uint8_t *heap; /* owned: bytes when they do not fit inline */
    union {
        /* A small node's bytes start here and run on past the struct
         * (SX__EV_SMALL of them; engine/event.c addresses them from the
         * node's start, not through this array). */
        uint8_t small[4 * sizeof(void *)];
        struct {
            /* Addressee while a completer / watcher: the process (and
             * to_gen above: a late delivery to a recycled slot is a
             * no-op). */
            struct sx__proc *to;
            sx_engine *engine;
            /* A completer's per-yield deadline (engine/io.h), or NULL. */
            struct sx__iodl *dl;
            /* A sampled completer: when it was dispatched (ns), else 0. */
            uint64_t t0;
        };
    };
    /* A large node's SX__EV_INLINE bytes follow the struct (sx__ev_inl). */
} sx__ev;

struct sx_completer {
    sx__ev ev;
};

/* A large node's inline bytes (SX__EV_INLINE). */
static inline uint8_t *sx__ev_inl(sx__ev *ev)
{
    return (uint8_t *)ev + sizeof(sx__ev);
}

enum {
    SX__WATCH_RESULT = 1, /* spawn-wait: the outcome completes a yield    */
    SX__WATCH_EXIT = 2,   /* monitor: an @exit message                    */
    SX__WATCH_LINK = 3,   /* link: fail the partner, or @exit if trapping */
    SX__WATCH_FN = 4,     /* sx_engine_watch: a callback (engine/outside.c) */
    /* Not a watcher: marks the completer of a sleep on a worker's timer
     * heap, so that collecting its answer counts the sleep done. */
    SX__WATCH_SLEEP = 5
};

/* An outside mailbox (sx_engine_mailbox_new) is a process slot in this
 * state (beyond sx_pstate): sx__deliver hands its messages to a callback
 * instead of a queue. Never runs, never counts as live. */
#define SX__PSTATE_MAILBOX 6u

/* ---- processes ---------------------------------------------------------
 *
 * Process slots are type-stable: they live in segments that are only freed
 * with the engine, so a stale pointer (from a completer, a queue or a PID
 * look-up) can always read `refs` and `gen` safely. A slot is reachable
 * (refs > 0) from allocation until its last reference is dropped; `gen`
 * changes when the process finishes, which turns every later look-up by
 * PID or completer into a miss.
 */
/* A process whose type's state is at most this many bytes keeps it in its
 * slot's state cell (sx__proc.cell) instead of a calloc'd block: no malloc
 * and free per process (skynet: 1.1 M calloc / free pairs, ~10 % of its
 * time), and no line or page beyond the slot's two. */
#define SX__CELL 32u

/* 128 bytes, aligned to the cache line: a slot is exactly two lines, and
 * holds a small user state (SX__CELL bytes) too. Fields that few processes
 * use (I/O commands, links' failure reason) live in the slot's sx__pext,
 * in an array beside its segment that stays untouched memory until used:
 * 100,000 new processes then touch 12.8 MB, not 16 (a separate array of
 * state cells) or more. First touches of memory are the largest cost of a
 * burst of new processes on this VM (bench/FINDINGS.md). */
typedef struct sx__proc {
    /* Written by producers (fetch_or, CAS) and by the running worker. */
    alignas(64) _Atomic uint32_t state;
    /* 1 for "alive in the table" plus one per thread touching the slot
     * through a look-up; the slot is recycled when it drops to 0. */
    _Atomic uint32_t refs;
    /* Written at allocation and at finish (release); read after a ref is
     * taken (acquire). */
    _Atomic uint32_t gen;
    uint32_t index;   /* immutable */
    sx__mpsc mbox;    /* events; consumer = the running worker */
    sx__ctlstack ctl; /* control events; same consumer */
    /* Watchers (sx__ev list) to tell when this process finishes; set to
     * SX__WATCH_CLOSED when it does. */
    _Atomic(sx__ev *) watchers;
    sx__gq_node gq; /* global queue link (queue's mutex) */
    /* Owned by the worker running the process (handed over by the state
     * word's acquire/release transitions): */
    const sx_process_type *type;
    /* type->state_size bytes: the cell below, a calloc'd block, or
     * &sx__no_state. */
    void *user_state;
    uint8_t wait_kind : 7; /* status that parked it: WAIT or IDLE */
    /* 1 once it sent a command to a libuv loop: its sx__pext's io fields
     * are then in use, and its finish looks at them (io.c). */
    uint8_t io : 1;
    /* Links (SX_CMD_LINK): set by the process's own SX_CMD_TRAP_EXIT and
     * read by whoever fires a link watcher (relaxed: a flag with no data
     * behind it). Reset at alloc. */
    _Atomic uint8_t trap_exit;
    /* The entry method: type->methods[method - 1], or 0 for none (a type
     * without a method list). */
    uint16_t method;
    /* Sleeps it yielded whose answers it has not collected (timers.c):
     * added to e->tm_dead when it finishes. */
    uint32_t sleeps;
    /* Steps run; 0 until the first step ran. Read by listings and stats
     * from any thread (relaxed). While the slot is free and on the free
     * stack, the first slot of a magazine keeps here the index of the next
     * magazine's first slot (ptable.c): an atomic that a stale popper may
     * read while the slot is in use again, which a field of the cell could
     * not be. */
    _Atomic uint64_t steps;
    union {
        /* The state of a type whose state_size <= SX__CELL. */
        alignas(16) unsigned char cell[SX__CELL];
        /* While free: the next slot of its magazine (ptable.c); only the
         * magazine's owner reads it, and magazines change hands through
         * the free stack's release / acquire. */
        uint32_t free_next;
    };
} sx__proc;

/* A slot's rarely used fields (see sx__proc), zeroed memory until used. */
typedef struct {
    /* Commands in flight on the process's libuv loop (engine/io.h): the
     * ops and handles of this slot, every generation, owned by that loop's
     * thread and never touched elsewhere (not even by slot reuse); and how
     * many there are (relaxed counter, see io.c). */
    struct sx__ioop *io_head;
    _Atomic uint32_t io_live;
    /* The last generation of this slot that finished with ops alive but
     * got no cancel request (out of memory): the loop's sweep, and any
     * op or deadline of it that starts later, cancel them (io.c,
     * op_dead). Written by the finishing worker (relaxed, published by
     * the loop's sweep flag), read on the loop. Fills the padding after
     * io_live: the slot's sx__pext does not grow. */
    _Atomic uint32_t io_dead_gen;
    /* The PID id of the linked process whose failure terminates this one
     * (dispatch.c, sx__watch_fire), written before the TERM flag is raised
     * (whose release publishes it). Not reset at alloc (that would touch
     * this memory for every process): whoever leaves it set resets it, the
     * finish that saw TERM or the writer that found the process finished
     * (engine.c, sx__finish). */
    _Atomic uint64_t link_failed;
} sx__pext;

_Static_assert(sizeof(sx__proc) == 128, "a process slot is two cache lines");

#define SX__WATCH_CLOSED ((sx__ev *)1)

/* The state of every process whose type has state_size 0 (ptable.c): not
 * allocated, not freed, never written (const: a write faults). */
extern const max_align_t sx__no_state;

/* ---- free slots ---------------------------------------------------------- */

/* Free process slots kept by one thread (engine/ptable.c): a loaded
 * magazine and a full one kept back, each a chain of slot indexes linked by
 * free_next and ended by SX__FREE_NONE. Owned by one worker, or by the
 * engine's outside threads under ext_slots_mu. */
typedef struct {
    uint32_t cur;   /* first slot of the loaded magazine, or SX__FREE_NONE */
    uint32_t cur_n; /* how many it holds, about (see ptable.c) */
    uint32_t full;  /* a full magazine kept back, or SX__FREE_NONE */
} sx__slotcache;

void sx__slotcache_init(sx__slotcache *c);

/* ---- workers ------------------------------------------------------------ */

#define SX__DEQUE_CAP 4096
#define SX__GQ_BATCH 16
/* The injection ring (engine/injq.h). Big enough for a burst: when it is
 * full the submitter moves half of it to the global queue, a list linked
 * through the slots, which the workers then walk one cold slot after
 * another (with 4 Ki slots, 100,000 sleepers submitted at once went mostly
 * that way: from_queue was 6 % of the timers benchmark; 64 Ki: timers
 * 0.095 -> 0.084 s, last first step 44 -> 33 ms, medians of 9). */
#define SX__INJQ_CAP 65536
#define SX__INJQ_GRAB 64 /* most a worker takes from it at once */

typedef struct {
    /* Written by the worker only (sx__wstat_add); read by stats (relaxed). */
    _Atomic uint64_t steps, steals, stolen, parks, wakeups, global_pops;
    _Atomic uint64_t messages, timeout_finds;
    /* Processes this worker spawned (sx_spawn in its steps) and finished:
     * per worker so that a submit and a finish on two cores touch no
     * shared counter line (stats sums them with the engine's). */
    _Atomic uint64_t spawned, completed, failed, terminated;
    /* The live count's share of this worker (engine.c, "live"): processes
     * it began to spawn, and processes it finished or failed to spawn.
     * Single writer, seq_cst stores: the stop handshake. */
    _Atomic uint64_t born, died;
} sx__wstats;

/* Adds n to a counter that only the calling worker writes. relaxed load and
 * store, not a fetch_add: with a single writer nothing can slip between the
 * two, readers (stats, relaxed) see some recent value either way, and a
 * fetch_add would be a locked instruction (~20 cycles) on every step and
 * every message. */
static inline void sx__wstat_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* A worker's sleeps (engine/timers.c): a timer set (engine/twheel.h) of
 * completers, under a spinlock. */
typedef struct {
    sx__spin lock; /* the owner adds and fires; other workers trylock */
    sx__twheel tw; /* under lock */
    /* The earliest due, or UINT64_MAX when empty: written under the lock,
     * read without it as a hint (relaxed; see timers.c). */
    _Atomic uint64_t next_due;
    /* The number of entries, for stats and the purge rule: written under
     * the lock, read without it (relaxed). */
    _Atomic size_t n_hint;
    /* Sleeps the owner added without the lock (timers.c, "the inbox"): a
     * stack of their completers. How many: pushed (written by the owner
     * only) less drained (written under the lock only); relaxed, figures
     * for stats and the purge rule. */
    _Atomic(sx__mpsc_node *) inbox;
    _Atomic size_t n_pushed, n_drained;
} sx__timers;

typedef struct sx__worker {
    alignas(64) sx__deque dq;
    alignas(64) sx_engine *engine;
    unsigned id;
    pthread_t thread;
    uint64_t rng;       /* victim selection */
    sx_step_output out; /* reused for every step */
    sx__proc *running;  /* the process this worker runs now */
    /* The process the worker's own steps woke last, run before the deque
     * (Go's runnext). Owner only, not stealable: a chain of hand-offs (a
     * ring, a ping-pong, a spawn) skips the deque's release store and the
     * fence of its pop. Whatever it held before goes to the deque, where
     * thieves see it. */
    sx__proc *next;
    /* The deque was popped since the last fair look (worker.c,
     * fair_look). */
    bool dq_popped;
    /* The deque's top index at the last fair look (-1: it was empty
     * then), and for how many fair looks in a row the same oldest item
     * has sat there (fair_look). Owner only. */
    int64_t dq_old_top;
    unsigned dq_stuck;
    sx__slotcache slots; /* free process slots (ptable.c) */
    sx_event *batch;     /* event array, throughput-sized at first */
    sx__ev **batch_ev;   /* the nodes behind batch */
    size_t batch_cap;    /* entries in both (grown by collect, rarely) */
    size_t n_nodes;      /* how many (collect) */
    bool send_penalty;   /* a send found its receiver READY (worker.c) */
    sx__wstats st;
    uint32_t lat_sample;       /* dispatches since the last latency sample */
    alignas(64) sx__timers tm; /* sleeps (engine/timers.c) */
    bool tm_ok;                /* tm initialised (workers_fini) */
    /* In sx__park_wait's sleep (relaxed; read by parking workers to bound
     * their own sleep while this one may sit on due timers: timers.c). */
    _Atomic bool parked;
} sx__worker;

/* ---- park ---------------------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Workers parked or about to park. seq_cst RMW by the parker, seq_cst
     * load by producers: the two halves of the Dekker-style handshake in
     * docs/SCHEDULER.md. */
    alignas(64) _Atomic unsigned n_parked;
    /* Workers in the spin phase (relaxed hint for local pushes). */
    _Atomic unsigned n_spinning;
    unsigned tokens; /* wake-ups granted, not yet taken; under mu */
    bool shutdown;   /* under mu; also read relaxed-atomically below */
    _Atomic bool quit;
} sx__park;

/* ---- outcomes ------------------------------------------------------------ */

typedef struct sx__outcome {
    uint64_t id;
    uint64_t stamp; /* puts counted when it was put (outcome.c) */
    uint64_t order; /* its place in put order by bytes (outcome.c, "Bytes") */
    struct sx__outcome *hnext;
    int error;
    uint64_t steps;
    char *msg;      /* points into the same allocation, or NULL */
    size_t msg_len; /* its bytes with the NUL, or 0 */
    uint8_t *value; /* same allocation */
    size_t len;
    size_t cap; /* bytes for value and msg after the header */
    /* Readers copying a large record outside the shard lock (outcome.c,
     * find_copy), and whether it was evicted meanwhile (then the last
     * reader frees it). Both under the shard lock. */
    uint32_t pins;
    bool evicted;
} sx__outcome;

/* Slots of the waiter count (outcome.c); a power of two. */
#define SX__WAIT_SLOTS 256

typedef struct sx__waiter {
    uint64_t id;
    pthread_cond_t cv;
    struct sx__waiter *next;
} sx__waiter;

/* One thread's outcomes (a worker's, or the one for every other thread):
 * a FIFO ring in put order and a chained hash index by PID id, all under
 * `mu`, which the owner takes per put and readers per look. */
typedef struct {
    alignas(64) sx__spin mu;
    sx__outcome **ring; /* cap entries, a power of two; NULL until used */
    size_t head, n, cap;
    sx__outcome **buckets; /* cap chains */
    /* Evicted records kept for the next puts (linked by hnext, at most
     * SX__SPARES_MAX; owner only): a put evicts none or several, not
     * exactly one, and with a single spare half the puts of a steady
     * stream went to malloc and as many evictions to free. */
    sx__outcome *spare;
    unsigned n_spare;
    unsigned uncounted; /* puts not yet added to `counted` */
    /* Bytes (outcome.c, "Bytes") of the records in the ring, and those of
     * them not yet added to the store's `bytes`. */
    size_t bytes;
    int64_t dbytes;
    /* The order of the ring's oldest record (or a smaller one: it is not
     * written at every eviction), UINT64_MAX when empty: written under mu,
     * read by any put that finds the store over its byte budget
     * (outcome.c, "Bytes"). */
    _Atomic uint64_t head_order;
    /* Owner only: the record its next put will likely evict, to prefetch
     * (it may have been evicted and freed by another put meanwhile). */
    sx__outcome *victim;
} sx__oshard;

typedef struct {
    size_t keep;
    size_t cap_max;    /* a shard never holds more than keep: pow2 >= keep */
    uint64_t window;   /* keep + the count's lag (outcome.c) */
    int64_t budget;    /* keep_outcome_bytes, at most INT64_MAX */
    unsigned n_shards; /* workers + 1 */
    sx__oshard *shards;
    /* Puts so far, added in batches by each shard (a lower bound). */
    alignas(64) _Atomic uint64_t counted;
    /* Bytes of the records held, added in batches by each shard (its
     * dbytes); evictions from another shard's ring subtract at once. */
    alignas(64) _Atomic int64_t bytes;
    /* Records of more than ORDER_MIN bytes put so far (outcome.c). */
    _Atomic uint64_t seq;
    alignas(64) pthread_mutex_t wmu; /* guards waiters */
    sx__waiter *waiters;
    /* Waiters registered, counted by a hash of the PID they wait for (see
     * outcome.c, "Waiting"): a finish reads only its PID's count. */
    _Atomic uint32_t n_waiting[SX__WAIT_SLOTS];
} sx__outcomes;

/* ---- commands ------------------------------------------------------------ */

typedef struct {
    sx_command_fn fn;
    void *user;
    const char *name;
    /* The answers always fit a small node (SX__EV_SMALL bytes: a sleep's
     * nil, or its short error messages), so the yield's completer is a
     * small node: 112 bytes instead of 208 for each of what may be
     * millions of sleepers. Longer bytes would still fit (sx__ev_set puts
     * them on the heap), only slower. Built-ins only. */
    bool small;
} sx__cmd;

typedef struct {
    uint16_t id;
    sx__cmd cmd;
} sx__cmd_ext;

/* ---- the engine ---------------------------------------------------------- */

#define SX__SEG_BASE 1024u
#define SX__SEGS 22 /* 1024 * (2^22 - 1) slots: ~4.3 billion */
#define SX__FREE_NONE UINT32_MAX

struct sx_engine {
    sx_engine_config cfg;
    unsigned n_workers;
    unsigned throughput;

    /* Registries: written before start, frozen after (start's thread
     * creation publishes them). */
    const sx_process_type **types;
    size_t n_types, cap_types;
    uint32_t *type_hash; /* engine.c: type_find */
    size_t type_hash_cap;
    sx__cmd cmds[256];
    sx__cmd_ext *ext_cmds; /* sorted by id */
    size_t n_ext_cmds, cap_ext_cmds;

    /* Lifecycle. */
    pthread_mutex_t life_mu;
    pthread_cond_t life_cv; /* signalled when live drops to 0 */
    _Atomic int started;    /* 0, 1 = running */
    _Atomic int stopping;   /* submits refused (seq_cst: see "live") */
    /* Stop's deadline passed: whatever is alive is terminated, and a
     * process a link would fail meanwhile finishes SX_ETERMINATED too
     * (sx__finish_terminated; release/acquire). */
    _Atomic int stop_killing;
    int stopped;   /* under life_mu */
    int stop_busy; /* a stop is under way; under life_mu */

    /* The process table (engine/ptable.c). */
    _Atomic(sx__proc *) segs[SX__SEGS];
    /* Each segment's sx__pext, one per slot (ptable.c): set with the
     * segment, before it is published. */
    sx__pext *pext[SX__SEGS];
    /* How many of each segment's slots have been handed out at least once
     * (carved) and so initialised; the rest are untouched memory. Written
     * under grow_mu (release), read by sx__ptable_each (acquire). */
    _Atomic uint32_t seg_carved[SX__SEGS];
    pthread_mutex_t grow_mu;
    unsigned n_segs; /* under grow_mu */
    /* The stack of free-slot magazines: ABA tag << 32 | the index of the
     * first slot of the top magazine. */
    alignas(64) _Atomic uint64_t free_head;
    /* Free slots for threads that are not workers (submitters, loops). */
    alignas(64) sx__spin ext_slots_mu;
    sx__slotcache ext_slots; /* under ext_slots_mu */
    /* The live count's share of threads that are not workers (engine.c,
     * "live"), and the admission count when max_processes is set. */
    alignas(64) _Atomic uint64_t ext_born, ext_died;
    _Atomic uint64_t admitted;
    /* The table reached cfg.max_slots (ptable.c, grow); never cleared. */
    _Atomic bool slots_full;

    /* Counters for threads that are not workers (relaxed; figures only):
     * submits from outside; finishes there (none today: every finish runs
     * on a worker, which counts in its own sx__wstats). */
    alignas(64) _Atomic uint64_t submitted, completed, failed, terminated;
    _Atomic uint64_t dead_letters, ext_messages;

    /* Run queues for threads that are not workers: gq takes new processes
     * (submit) and processes whose turn ran out; wq takes wake-ups (a
     * completion from a loop, a message or terminate from outside).
     * Workers look at wq first: a woken process has waited already, and
     * behind a burst of submissions in one FIFO it waited for all of them
     * (100,000 sleepers were 130 ms late at p50 that way). */
    sx__globalq gq;
    sx__globalq wq;
    /* New processes from threads that are not workers: the ring in front
     * of gq (engine/injq.h). */
    sx__injq inj;
    sx__park park;
    sx__worker *workers;
    sx__outcomes outcomes;

    /* libuv loop threads (engine/io.c); created by start, gone after
     * stop. */
    struct sx__ioloop *loops;
    unsigned n_loops;
    /* Figures (relaxed; written by the loop threads). */
    alignas(64) _Atomic uint64_t io_inflight, io_ops, io_timeouts;
    /* A late sx_complete of a timed yield (a user command answered after
     * stop) against sx__io_stop freeing the loops (engine/io.c,
     * sx__io_dl_done): posters in progress, and whether the loops are
     * closing (calloc'd zero at engine creation). */
    _Atomic uint32_t io_posters;
    _Atomic bool io_closed;
    /* Sleep entries whose processes finished (timers.c): a purge trigger,
     * not an exact count (release add at finish, acquire load by purge). */
    _Atomic uint64_t tm_dead;
    /* 1 while a purge runs (timers.c, sx__timers_purge_maybe). */
    _Atomic int tm_purging;
    /* Command latency histogram (sampled; relaxed figures). */
    alignas(64) _Atomic uint64_t latency[SX_LATENCY_BUCKETS];
    _Atomic uint64_t latency_sum; /* their sum, microseconds */
};

/* ---- internal functions -------------------------------------------------- */

/* engine/event.c: [any thread]; per-thread caches on worker threads. */
/* A large node (any event, completer or watcher). */
sx__ev *sx__ev_alloc(void);
/* A node for a message whose bytes (as sx__ev_set counts them: topic with
 * its NUL, data, error message with its NUL) total n: small when they fit
 * SX__EV_SMALL. Only for messages: a small node has no completer fields. */
sx__ev *sx__ev_alloc_sized(size_t n);
/* A small node made ready to be a completer (sx__cmd.small): its to,
 * engine, dl and t0 are cleared, and overlaid by its bytes once
 * sx_complete has read them. */
sx__ev *sx__ev_alloc_small_completer(void);
void sx__ev_free(sx__ev *ev);
/* Frees ev and the events linked after it through node.next (a chain that
 * is in no queue). */
void sx__ev_free_chain(sx__ev *ev);
/* Bundles (engine/event.c): consecutive messages of one step to one
 * process, as records in one node. Adds the message (topic, data) to *evp,
 * a message node or a bundle holding fewer than max messages, turning a
 * message into a bundle or a large bundle into a bigger one (*evp then
 * changes; the old node is freed). Returns 0, or -1 when it does not fit
 * (*evp unchanged). */
int sx__ev_bundle_add(sx__ev **evp, const char *topic, size_t topic_len,
                      sx_payload data, unsigned max);
/* Reads the record at *off of bundle ev (start at 0) and advances *off. */
void sx__ev_bundle_next(const sx__ev *ev, size_t *off, const char **topic,
                        sx_payload *data);
void sx__ev_cache_enable(void);
void sx__ev_cache_flush(void);
/* How many nodes of size class big (0 small, 1 large, 2 bundle) the
 * shared depot keeps on a machine with `memory` bytes (0: unknown). */
size_t sx__ev_depot_cap(int big, uint64_t memory);
/* Sets the event's bytes: topic (NUL added), data, error message (NUL
 * added). Returns 0 or SX_ENOMEM. */
int sx__ev_set(sx__ev *ev, const char *topic, size_t topic_len, sx_payload data,
               const char *msg);
const char *sx__ev_topic(const sx__ev *ev);
sx_payload sx__ev_data(const sx__ev *ev);
const char *sx__ev_msg(const sx__ev *ev);

/* engine/ptable.c */
int sx__ptable_init(sx_engine *e);
void sx__ptable_fini(sx_engine *e);
/* A fresh slot: refs = 1, a new gen, READY, type and method set. NULL
 * when there is no free slot and the table cannot grow: out of memory,
 * or at its cap (then sx__ptable_full says so). */
sx__proc *sx__ptable_alloc(sx_engine *e, const sx_process_type *type,
                           uint16_t method);
/* The largest generation a process takes; a mailbox's has the top bit set
 * (ptable.c, "Generations"). */
#define SX__GEN_PROC_MAX 0x7fffffffu
/* A fresh slot for a mailbox (no type, READY until the caller marks it):
 * its generation is the top bit and random's low 31 bits; *proc_gen gets
 * the slot's process generation, for sx__ptable_retire_mailbox. */
sx__proc *sx__ptable_alloc_mailbox(sx_engine *e, uint32_t random,
                                   uint32_t *proc_gen);
/* True once the table has reached cfg.max_slots (or its largest size): an
 * alloc that failed then failed for that, not for memory. */
bool sx__ptable_full(sx_engine *e);
sx_pid sx__proc_pid(sx_engine *e, sx__proc *p);
/* The rarely used fields of p's slot (see sx__proc): memory untouched
 * until a process uses them. */
sx__pext *sx__ptable_pext(sx_engine *e, const sx__proc *p);
/* How many slots the table has (in use or free). */
uint64_t sx__ptable_slots(sx_engine *e);
/* Takes a reference on the live process named by pid; NULL if none. */
sx__proc *sx__ptable_get(sx_engine *e, sx_pid pid);
/* Takes a reference if p still has generation gen; false if not. */
bool sx__proc_acquire(sx_engine *e, sx__proc *p, uint32_t gen);
void sx__proc_release(sx_engine *e, sx__proc *p);
/* Marks p finished in the table (gen changes). */
void sx__ptable_retire(sx_engine *e, sx__proc *p);
/* Marks the mailbox p closed: its slot gets back proc_gen, the process
 * generation sx__ptable_alloc_mailbox gave. */
void sx__ptable_retire_mailbox(sx_engine *e, sx__proc *p, uint32_t proc_gen);
/* Calls fn on every live process with a reference held. */
void sx__ptable_each(sx_engine *e, void (*fn)(sx_engine *, sx__proc *, void *),
                     void *arg);
/* Calls fn on every open mailbox with a reference held. */
void sx__ptable_each_mailbox(sx_engine *e,
                             void (*fn)(sx_engine *, sx__proc *, void *),
                             void *arg);

/* engine/worker.c */
int sx__workers_start(sx_engine *e);
void sx__workers_join(sx_engine *e);
/* Queues a READY process (the caller won the transition to READY). */
void sx__enqueue(sx_engine *e, sx__proc *p);
/* A process new to the engine: like sx__enqueue, but from a thread that
 * is not a worker it goes to the submission queue (gq), not wq. */
void sx__enqueue_new(sx_engine *e, sx__proc *p);
/* Delivers ev (a filled event) to p, which the caller holds a reference
 * on: push + wake. Returns 0, or SX_ENOTFOUND / SX_ECLOSED when p finished
 * or is terminating (ev then stays queued and is freed with the slot). */
int sx__deliver(sx_engine *e, sx__proc *p, sx__ev *ev);
/* Messages first..last (linked through node.next, not control events) to
 * p in one push; consumes them. The same results as sx__deliver. */
int sx__deliver_chain(sx_engine *e, sx__proc *p, sx__ev *first, sx__ev *last);
sx__worker *sx__current_worker(sx_engine *e);
/* engine/dispatch.c: sx_send builds its event at once on a worker. */
extern const sx__send_hooks sx__worker_send_hooks;

/* engine/park.c */
int sx__park_init(sx__park *pk);
void sx__park_fini(sx__park *pk);
void sx__park_notify(sx_engine *e);
/* Parks w until a token, shutdown, or until_ns (absolute, sx__now_ns's
 * clock; the park's own periodic re-check if that comes first). false:
 * shutting down. */
bool sx__park_wait(sx_engine *e, sx__worker *w, uint64_t until_ns);
void sx__park_shutdown(sx_engine *e);
bool sx__work_visible(sx_engine *e);

/* engine/timers.c */
int sx__timers_init(sx__timers *tm);
void sx__timers_fini(sx__timers *tm);
/* [owning worker] Answers done (no result) at due_ns or later. */
/* [owning worker] Takes done (its sleep is answered at due_ns or later,
 * or SX_ENOMEM if it cannot be kept); returns 0. */
int sx__timer_add(sx__worker *w, uint64_t due_ns, sx_completer *done);
/* Fires tm's entries due at now; wait_lock false: only if the lock is
 * free. */
void sx__timers_run(sx__timers *tm, uint64_t now, bool wait_lock);
/* Fires the due entries of every other worker whose lock is free. */
void sx__timers_steal(sx_engine *e, sx__worker *self, uint64_t now);
/* The earliest deadline of all workers, UINT64_MAX when none. */
uint64_t sx__timers_earliest(sx_engine *e);
/* How long w may park: until the earliest deadline, and at most
 * SX__TIMER_RECHECK_MS while another worker that is not parked holds
 * timers (it may be stuck in a long step). */
uint64_t sx__timers_park_until(sx_engine *e, sx__worker *w);
#define SX__TIMER_RECHECK_MS 10
/* [stopper, workers joined] Answers every entry left SX_ECANCELLED. */
void sx__timers_drain(sx_engine *e);
/* Entries on all heaps (relaxed sum). */
uint64_t sx__timers_count(sx_engine *e);
/* [worker] Drops the entries of finished processes when they are at least
 * half of all entries (amortised O(1) per entry). */
void sx__timers_purge_maybe(sx_engine *e);

/* engine/outcome.c */
/* One shard per worker and one for every other thread. */
int sx__outcomes_init(sx__outcomes *o, size_t keep, size_t keep_bytes,
                      unsigned workers);
void sx__outcomes_fini(sx__outcomes *o);
/* Records held and their bytes (outcome.c, "Bytes"), each shard read under
 * its lock. */
void sx__outcomes_count(sx__outcomes *o, uint64_t *records, uint64_t *bytes);
/* Records p's outcome (copied) in the calling thread's shard (self: the
 * calling worker, or NULL), then retires p from the table, then wakes its
 * waiters. */
void sx__outcomes_put(sx_engine *e, sx__worker *self, sx__proc *p, uint64_t id,
                      int error, const char *msg, sx_payload value,
                      uint64_t steps);
/* Retires p (PID id) with no outcome, a spawn whose init failed, and
 * wakes its waiters, who then find neither outcome nor process
 * (SX_ENOTFOUND). */
void sx__outcomes_retire(sx_engine *e, sx__worker *self, sx__proc *p,
                         uint64_t id);
/* Copies the outcome of id into *out (free with sx_result_free); false
 * when it is not kept. */
bool sx__outcomes_get(sx_engine *e, uint64_t id, sx_result *out);

/* engine/engine.c */
int sx__spawn(sx_engine *e, sx_pid parent, const char *type, const char *method,
              const sx_payload *input, size_t n_input, sx__ev *watcher,
              sx_pid *out_pid);
/* n messages first..last (linked through node.next) to one process with
 * one look-up and one push; consumes them. */
int sx__send_chain(sx_engine *e, sx_pid to, sx__ev *first, sx__ev *last,
                   size_t n);
/* One message built beforehand (ev), sent as sx__send would; for cold
 * callers (engine.c). */
int sx__send_note(sx_engine *e, sx_pid to, sx__ev *ev);
/* Sends a message (ctl: a control event that overtakes user messages). */
int sx__send(sx_engine *e, sx_pid from, sx_pid to, const char *topic,
             size_t topic_len, sx_payload data, bool ctl);
/* Finishes p on the calling worker: close, outcome, watchers, retire. */
void sx__finish(sx_engine *e, sx__proc *p, int error, const char *msg,
                sx_payload value);
int sx__watch(sx_engine *e, sx_pid target, sx__ev *watcher);
/* Raises p's TERM flag and queues it if it is waiting (the caller holds a
 * reference). SX_ENOTFOUND when it is finishing already. */
int sx__terminate(sx_engine *e, sx__proc *p);
/* The error and message a terminated process finishes with. */
void sx__finish_terminated(sx_engine *e, sx__proc *p);

/* engine/dispatch.c */
void sx__commands_builtin(sx_engine *e);
/* Runs the handlers of the yields in out; SX_ENOMEM when a completer could
 * not be allocated (the process then fails). */
int sx__dispatch(sx_engine *e, sx__proc *p, const sx_step_output *out);
/* Sends only the sx_send messages of out (a step that ended DONE or FAIL:
 * its yields are discarded, its messages still go). */
void sx__dispatch_sends(sx_engine *e, sx__proc *p, const sx_step_output *out);
/* Fills a finished process's outcome into a watcher and delivers it. */
void sx__watch_fire(sx_engine *e, sx__ev *w, sx_pid target, int error,
                    const char *msg, sx_payload value, uint64_t steps);

/* engine/outside.c */
/* Hands ev (a message) to the mailbox p (state SX__PSTATE_MAILBOX) and
 * frees it. */
void sx__mailbox_deliver(sx_engine *e, sx__proc *p, sx__ev *ev);
/* Closes every mailbox still open (sx_engine_free, after stop). */
void sx__mailboxes_close(sx_engine *e);
/* Calls an SX__WATCH_FN watcher and frees it. */
void sx__watch_fn_fire(sx_engine *e, sx__ev *w, sx_pid target, int error,
                       const char *msg, sx_payload value, uint64_t steps);

#endif

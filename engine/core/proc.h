/* engine/core/proc.h — processes and events: the process state word, the
 * event nodes, the process slot and the process table's functions.
 * Internal to engine/; never installed.
 *
 * Ownership and threads are written at each field. The big picture is in
 * docs/ARCHITECTURE.md and docs/SCHEDULER.md.
 */
#ifndef SX_ENGINE_CORE_PROC_H
#define SX_ENGINE_CORE_PROC_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stepx/engine.h>

#include "engine/sched/globalq.h" /* a slot's run-queue link */
#include "process/mailbox.h"
#include "process/output.h"

typedef struct sx__worker sx__worker;

/* ---- the process state word --------------------------------------------
 *
 * bits 0-2: the state (sx_pstate; 0 = slot free)
 * bit 3   : WAKE     — an event arrived while RUNNING (or READY)
 * bit 4   : WAKE_MSG — that event was a message or a control event
 * bit 5   : TERM     — terminate requested
 *
 * Every transition is a CAS that preserves the flag bits it does not own;
 * a CAS that fails because a flag flipped re-evaluates and retries
 * (engine/sched/worker.c). Producers only ever fetch_or flags, then try to move
 * BLOCKED / IDLE to READY with a CAS; exactly one thread wins that CAS and
 * queues the process, so a process is in at most one run queue at once.
 */
#define SX__S_MASK 0x7u
#define SX__F_WAKE 0x8u
#define SX__F_MSG 0x10u
#define SX__F_TERM 0x20u
/* With READY (and RUNNING once a worker took it): a checkpointed job whose
 * checkpoint is stored, or that resumed at a start; the worker that takes
 * it sends its step's output first (engine/core/checkpoint.c,
 * sx__ckpt_resume). Only the store's answer and a start set it. */
#define SX__F_CKPT 0x40u
#define SX__F_WAKES (SX__F_WAKE | SX__F_MSG)

/* ---- events ------------------------------------------------------------ */

typedef enum {
    SX__EV_COMPLETION = 0, /* a yield's answer            */
    SX__EV_MESSAGE = 1,    /* send / cancel / @exit       */
} sx__ev_kind;

/* Three sizes of event node (engine/core/event.c): small, large, and the bundle
 * node (sizeof(sx__ev) + SX__EV_BUNDLE record bytes, "Bundles"). A large
 * node carries a
 * completer's fields and SX__EV_INLINE bytes after them: completers, watchers
 * and every node from sx__ev_alloc. A small node is a message, from
 * sx__ev_alloc_sized when its bytes fit SX__EV_SMALL, or the completer of a
 * command whose answers are that small (sx__cmd.small: sleeps): its bytes
 * overlay the completer fields (which a message never uses, and which
 * sx_complete reads before it writes the answer) and run on past
 * sizeof(sx__ev). With malloc's 8-byte header the chunks are 112 and 208
 * bytes: a message in flight takes about half the memory of a large
 * node. */
#define SX__EV_INLINE 104 /* large: topic, data and error message bytes */
#define SX__EV_BUNDLE 896 /* a bundle node's record bytes (event.c) */
#define SX__EV_SMALL 40   /* small: the same bytes, from `small` on */

/* One event node: a queued event, and before that the completer of a
 * pending yield (sx_completer is this struct) or a watcher waiting for a
 * process to finish. Allocated from a per-thread cache (engine/core/event.c).
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
    /* A bundle (engine/core/event.c, "Bundles"): how many messages its records
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
         * (SX__EV_SMALL of them; engine/core/event.c addresses them from the
         * node's start, not through this array). */
        uint8_t small[4 * sizeof(void *)];
        struct {
            /* Addressee while a completer / watcher: the process (and
             * to_gen above: a late delivery to a recycled slot is a
             * no-op). */
            struct sx__proc *to;
            sx_engine *engine;
            /* A completer's per-yield deadline (engine/io/io.h), or NULL. */
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
    SX__WATCH_FN = 4,     /* sx_engine_watch: a callback (outside.c)      */
    /* Not a watcher: marks the completer of a sleep on a worker's timer
     * heap, so that collecting its answer counts the sleep done. */
    SX__WATCH_SLEEP = 5,
    /* Not a watcher: marks a message stored for a checkpointed job, its
     * seq in t0 (a large node; engine/core/checkpoint.c). */
    SX__WATCH_STORED = 6,
    /* Not a watcher: marks the completer of a command a checkpointed job
     * had in flight, dispatched again as it resumes
     * (sx_completer_resumed). */
    SX__WATCH_RESUMED = 7,
    /* On a parent, for a child spawned with a scope (sx_spawn_opts):
     * to/to_gen and from name the child, tag is its sx_scope. The
     * parent's end cancels or terminates it (watch.c). */
    SX__WATCH_SCOPE = 8
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
 * slot's state cell (sx__ptable_cell) instead of a calloc'd block: no
 * malloc and free per process (skynet: 1.1 M calloc / free pairs, ~10 % of
 * its time). */
#define SX__CELL 32u

/* One state cell (see SX__CELL): in an array beside the slot's segment, as
 * sx__pext is, so that the memory of a process whose type has no state
 * holds its slot alone. */
typedef struct {
    alignas(16) unsigned char b[SX__CELL];
} sx__cell;

/* 96 bytes, 32-byte aligned: a slot covers exactly two cache lines, and
 * two neighbouring slots fit three lines, sharing the middle one. Its
 * three 32-byte parts, by who touches them:
 *  - bytes 0-31, a send's: the state word, the references, the generation
 *    and the mailbox's producer end (head and stub). A message to the
 *    process touches these bytes of its slot and no others (a control
 *    event also pushes onto ctl). The state word comes first: its address
 *    is the slot's, which the worker's CAS loops then use without keeping
 *    another pointer.
 *  - bytes 32-63, the running worker's: the mailbox's consumer end, the
 *    control stack, the flags and the step count.
 *  - bytes 64-95, read by the running worker and written seldom (at
 *    allocation, when a watcher comes or goes, when it goes through the
 *    global queue): type, state pointer, watchers, queue link.
 * A slot at an even place in its (line-aligned) segment has its first two
 * parts on one line; one at an odd place, its last two. The shared middle
 * line of two neighbours thus holds the last part of one and the first of
 * the other: one neighbour's sends there meet the other's seldom written
 * fields, not its step count or mailbox end.
 * The state cell (sx__cell) and the fields that few processes use (I/O
 * commands, links' failure reason: sx__pext) live in arrays beside the
 * segment that stay untouched memory until used: 100,000 new processes
 * whose type has no state touch 9.6 MB of the table, 12.8 MB with a small
 * state. First touches of memory are the largest cost of a burst of new
 * processes on a VM whose page faults trap to the hypervisor
 * (bench/FINDINGS.md). */
typedef struct sx__proc {
    /* Written by producers (fetch_or, CAS) and by the running worker. */
    alignas(32) _Atomic uint32_t state;
    /* 1 for "alive in the table" plus one per thread touching the slot
     * through a look-up, and one per worker that keeps it (sx__prefs);
     * the slot is recycled when it drops to 0. */
    _Atomic uint32_t refs;
    /* Written at allocation and at finish (release); read after a ref is
     * taken (acquire). */
    _Atomic uint32_t gen;
    uint32_t index; /* immutable */
    /* Events; consumer = the running worker. Its head and stub (what
     * producers touch) end the first part, its tail begins the second. */
    sx__mpsc mbox;
    sx__ctlstack ctl; /* control events; same consumer */
    /* Owned by the worker running the process (handed over by the state
     * word's acquire/release transitions), from here to user_state, save
     * where a field says otherwise: */
    uint8_t wait_kind : 5; /* status that parked it: WAIT or IDLE */
    /* 1 when user_state is a calloc'd block (its type's state is over
     * SX__CELL bytes), freed with the slot. Reset at alloc. */
    uint8_t heap_state : 1;
    /* 1 for a job (a submit to an engine with a state store, or with a
     * restart policy: engine/core/job.h): its sx__pext's job is in use,
     * its PID is the job's, and its finish goes through the job (stored,
     * restarted). Set before it is first queued; reset at alloc. */
    uint8_t job : 1;
    /* 1 once it sent a command to a libuv loop: its sx__pext's io fields
     * are then in use, and its finish looks at them (loop.c). */
    uint8_t io : 1;
    /* Links (SX_CMD_LINK): set by the process's own SX_CMD_TRAP_EXIT and
     * read by whoever fires a link watcher (relaxed: a flag with no data
     * behind it). Reset at alloc. */
    _Atomic uint8_t trap_exit;
    /* The entry method: type->methods[method - 1], or 0 for none (a type
     * without a method list). */
    uint16_t method;
    /* Sleeps it yielded whose answers it has not collected (sleep.c):
     * added to e->tm_dead when it finishes. */
    uint32_t sleeps;
    /* Steps run; 0 until the first step ran. Read by listings and stats
     * from any thread (relaxed). While the slot is free and on the free
     * stack, the first slot of a magazine keeps here the index of the next
     * magazine's first slot (ptable.c): an atomic that a stale popper may
     * read while the slot is in use again, which free_next could not be. */
    _Atomic uint64_t steps;
    const sx_process_type *type;
    union {
        /* type->state_size bytes: the slot's state cell, a calloc'd
         * block (heap_state), or &sx__no_state. */
        void *user_state;
        /* While free: the next slot of its magazine; and, on the free
         * stack and in the outside threads' loaded magazine, the one AHEAD
         * places further down it or SX__FREE_NONE (ptable.c). Only the
         * magazine's owner reads them, and magazines change hands through
         * the free stack's release / acquire. */
        struct {
            uint32_t free_next;
            uint32_t free_ahead;
        };
    };
    /* Watchers (sx__ev list) to tell when this process finishes; set to
     * SX__WATCH_CLOSED when it does. */
    _Atomic(sx__ev *) watchers;
    sx__gq_node gq; /* global queue link (queue's mutex) */
} sx__proc;

/* A slot's rarely used fields (see sx__proc), zeroed memory until used. */
typedef struct {
    /* Commands in flight on the process's libuv loop (engine/io/io.h): the
     * ops and handles of this slot, every generation, owned by that loop's
     * thread and never touched elsewhere (not even by slot reuse); and how
     * many there are (relaxed counter, see engine/io/ops.c,
     * sx__io_unlink). */
    struct sx__ioop *io_head;
    _Atomic uint32_t io_live;
    /* The last generation of this slot that finished with ops alive but
     * got no cancel request (out of memory): the loop's sweep, and any
     * op or deadline of it that starts later, cancel them (loop.c,
     * sx__io_op_dead). Written by the finishing worker (relaxed, published
     * by the loop's sweep flag), read on the loop. Fills the padding after
     * io_live: the slot's sx__pext does not grow. */
    _Atomic uint32_t io_dead_gen;
    /* The PID id of the linked process whose failure terminates this one
     * (watch.c, sx__watch_fire), written before the TERM flag is raised
     * (whose release publishes it). Not reset at alloc (that would touch
     * this memory for every process): whoever leaves it set resets it, the
     * finish that saw TERM or the writer that found the process finished
     * (proc.c, sx__finish). */
    _Atomic uint64_t link_failed;
    /* The job this process runs (engine/core/job.h): set (release) before
     * it is first queued, with p->job; read (acquire) by cancel and
     * terminate under a reference; freed with the slot (ptable.c). */
    _Atomic(struct sx__job *) job;
    /* A restarted job's PID generation (its slot's own generation moved on
     * at the restart, so that nothing of the earlier attempt reaches the
     * new one): a look-up of that PID that misses the slot's generation
     * takes the slot when this matches (ptable.c, sx__ptable_get). 0 for
     * none. Written (release) by the restart, reset by the final finish;
     * read (acquire) by look-ups. */
    _Atomic uint32_t alias_gen;
    /* Its deadline passed (engine/io/expire.c): the deadline in ms below
     * 2^31, else 2^31 | whole seconds (UINT32_MAX: it could not be
     * armed), written before the
     * TERM flag is raised, reset as link_failed is. 0: none. Fills the
     * padding after alias_gen. */
    _Atomic uint32_t expired_ms;
} sx__pext;

_Static_assert(sizeof(sx__proc) == 96 && alignof(sx__proc) == 32,
               "a process slot covers two cache lines");
_Static_assert(offsetof(sx__proc, mbox.tail) == 32 &&
                   offsetof(sx__proc, type) == 64,
               "a send touches a slot's bytes 0-31 (see sx__proc)");
_Static_assert(sizeof(sx__cell) == SX__CELL, "a state cell is SX__CELL bytes");
_Static_assert(sizeof(sx__proc) + sizeof(sx__cell) + sizeof(sx__pext) == 168,
               "168 bytes a slot in all: docs/API.md and PROTOCOL.md say so");

#define SX__WATCH_CLOSED ((sx__ev *)1)

/* The state of every process whose type has state_size 0 (ptable.c): not
 * allocated, not freed, never written (const: a write faults). */
extern const max_align_t sx__no_state;

/* ---- free slots ---------------------------------------------------------- */

/* Free process slots kept by one thread (engine/core/ptable.c): a loaded
 * magazine and a full one kept back, each a chain of slot indexes linked by
 * free_next and ended by SX__FREE_NONE. Owned by one worker, or by the
 * engine's outside threads under ext_slots_mu. */
typedef struct {
    uint32_t cur;   /* first slot of the loaded magazine, or SX__FREE_NONE */
    uint32_t cur_n; /* how many it holds, about (see ptable.c) */
    uint32_t full;  /* a full magazine kept back, or SX__FREE_NONE */
    /* Outside threads: slots taken from the loaded magazine (ptable.c,
     * cache_take's prefetches). */
    uint32_t taken;
} sx__slotcache;

void sx__slotcache_init(sx__slotcache *c);

/* ---- the references a worker's sends keep ------------------------------- */

/* A worker keeps the reference its sends took on a process for its next
 * sends to it (sx__prefs_find, sx__prefs_keep): a hit is a look-up with
 * no locked instruction, where sx__ptable_get and sx__proc_release are
 * two (a ping-pong's two processes, a producer's consumer, a parent's
 * children's answers). A slot is direct-mapped by its index; an empty
 * entry takes the next reference a miss of its takes (a process's, not a
 * mailbox's or a job's: something waits for every reference on those).
 * A reference kept delays the recycling of a finished process's slot
 * (its memory, and its place under max_slots) until the worker lets them
 * all go: every 61 looks for work, every `throughput` steps of a process
 * that runs alone on it (engine/sched/turn.c), before it parks and when
 * it stops (sx__prefs_flush); so up to 61 turns, one long step included.
 * Owned by one worker. */
#define SX__PREFS 8u
typedef struct {
    uint64_t id[SX__PREFS]; /* the kept reference's PID id; 0: none */
    sx__proc *p[SX__PREFS]; /* holding that reference */
} sx__prefs;

/* Whether e ever made a job, and whether p (a reference held) runs one
 * (engine/core/ptable.c): the slot's sx__pext, which a process that is
 * not a job never touches, is read only when e made one. */
bool sx__had_jobs(sx_engine *e);
bool sx__is_job(sx_engine *e, sx__proc *p);

/* What sx__prefs_find found for a PID: p, the process kept for it if it
 * is alive; else, when its entry is empty, that entry (id, slot), which
 * may keep the reference the caller takes next (sx__prefs_keep). */
typedef struct {
    sx__proc *p;
    uint64_t *id; /* the empty entry's id, or NULL */
    sx__proc **slot;
} sx__prefs_slot;

/* ---- the process table's layout (ptable.c) ------------------------------- */

#define SX__SEG_BASE 1024u
#define SX__SEGS 22 /* 1024 * (2^22 - 1) slots: ~4.3 billion */
#define SX__FREE_NONE UINT32_MAX

/* engine/core/event.c: [any thread]; per-thread caches on worker threads. */
/* A large node (any event, completer or watcher). */
sx__ev *sx__ev_alloc(void);
/* A node for a message whose bytes (as sx__ev_set counts them: topic with
 * its NUL, data, error message with its NUL) total n: small when they fit
 * SX__EV_SMALL. Only for messages: a small node has no completer fields. */
sx__ev *sx__ev_alloc_sized(size_t n);
/* A message node built with no call, for sx_send's common case: a topic
 * of up to 16 bytes, all ASCII, and data of up to 16 bytes, in a small
 * node from this thread's cache. NULL when the case does not apply (not
 * an error): the caller then takes the general path (sx__ev_alloc_sized,
 * sx__topic_cstr_ok, sx__ev_set). topic[topic_len] is its NUL. */
sx__ev *sx__ev_message_quick(const char *topic, size_t topic_len,
                             sx_payload data);
/* A small node made ready to be a completer (sx__cmd.small): its to,
 * engine, dl and t0 are cleared, and overlaid by its bytes once
 * sx_complete has read them. */
sx__ev *sx__ev_alloc_small_completer(void);
void sx__ev_free(sx__ev *ev);
/* Frees ev and the events linked after it through node.next (a chain that
 * is in no queue). */
void sx__ev_free_chain(sx__ev *ev);
/* Bundles (engine/core/event.c): consecutive messages of one step to one
 * process, as records in one node. Adds the message (topic, data) to *evp,
 * a message node or a bundle holding fewer than max messages, turning a
 * message into a bundle or a large bundle into a bigger one (*evp then
 * changes; the old node is freed). Returns 0, or -1 when it does not fit
 * (*evp unchanged). */
int sx__ev_bundle_add(sx__ev **evp, const char *topic, size_t topic_len,
                      sx_payload data, unsigned max);
/* sx__ev_bundle_add's common case, with no call and few live values (its
 * caller, send_merge, keeps a small frame for it): the record written by
 * the same code (rec_put) for a topic of up to 16 bytes,
 * all ASCII, and data of up to 16 bytes, appended to a bundle (not a lone
 * message) that holds fewer than max messages and has room in its node.
 * Returns 0, or -1 when the case does not apply (not an error): the caller
 * then takes sx__ev_bundle_add. topic[topic_len] is its NUL. */
int sx__ev_bundle_append(sx__ev *ev, const char *topic, size_t topic_len,
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
/* sx__ev_set(ev, NULL, 0, data, NULL) with no call, when it applies: ev
 * holds no heap bytes and data is at most 16 bytes (a command's answer is
 * mostly an integer). false, ev untouched, otherwise. */
bool sx__ev_set_data_quick(sx__ev *ev, sx_payload data);
const char *sx__ev_topic(const sx__ev *ev);
sx_payload sx__ev_data(const sx__ev *ev);
const char *sx__ev_msg(const sx__ev *ev);

/* Frees every event queued for p, mailbox and control stack. The caller
 * alone touches p's queues (no producer holds a reference: a slot being
 * freed, a job being restarted). */
static inline void sx__proc_drain(sx__proc *p)
{
    sx__mpsc_node *n;
    while ((n = sx__mpsc_pop(&p->mbox)) != NULL) {
        if (n != &p->mbox.stub)
            sx__ev_free((sx__ev *)n);
    }
    n = sx__ctlstack_take(&p->ctl);
    while (n != NULL) {
        /* relaxed: the list is ours now. */
        sx__mpsc_node *next =
            atomic_load_explicit(&n->next, memory_order_relaxed);
        sx__ev_free((sx__ev *)n);
        n = next;
    }
}

/* engine/core/ptable.c */
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
/* The generations one run of an engine with a state store takes (ptable.c,
 * "Generations"); 127 such ranges fit below SX__GEN_PROC_MAX. */
#define SX__GEN_RANGE (1u << 24)
#define SX__GEN_RANGES 127u
/* [before start, one thread] Carves the table up to the highest of idx
 * (ascending, unique), leaving those slots out of the free lists for
 * sx__ptable_claim. Before any alloc. Errors: SX_EINVAL (not ascending),
 * SX_ELIMIT (past cfg.max_slots), SX_ENOMEM, SX_ESTATE (slots handed out
 * already). */
int sx__ptable_reserve(sx_engine *e, const uint32_t *idx, size_t n);
/* [before start, one thread] Readies the reserved slot idx for a process
 * of type with generation gen (as sx__ptable_alloc does, refs = 1,
 * READY). NULL when idx was not reserved or gen is not a process's. */
sx__proc *sx__ptable_claim(sx_engine *e, uint32_t idx, uint32_t gen,
                           const sx_process_type *type, uint16_t method);
/* A fresh slot for a mailbox (no type, READY until the caller marks it):
 * its generation is the top bit and random's low 31 bits; *proc_gen gets
 * the slot's process generation, for sx__ptable_retire_mailbox. */
sx__proc *sx__ptable_alloc_mailbox(sx_engine *e, uint32_t random,
                                   uint32_t *proc_gen);
/* True once the table has reached cfg.max_slots (or its largest size): an
 * alloc that failed then failed for that, not for memory. */
bool sx__ptable_full(sx_engine *e);
/* [a worker with nothing to run] Faults in the next pages of the process
 * table ahead of where new slots are carved, so that a burst of spawns
 * finds them resident instead of faulting each on the spawning thread.
 * false: nothing to do (or the kernel cannot); the caller spins on. */
bool sx__ptable_prefault(sx_engine *e);
/* p's PID: a job's stays across restarts (its job_id). [the thread
 * running or finishing p, which alone may read p->job] */
sx_pid sx__proc_pid(sx_engine *e, sx__proc *p);
/* p's PID from the slot's generation now, for any thread holding a
 * reference (a job's resolves too: it names the current attempt). */
sx_pid sx__proc_pid_raw(sx_engine *e, sx__proc *p);
/* Moves a restarted job's generation on (supervise.c). */
void sx__ptable_regen(sx_engine *e, sx__proc *p);
/* The rarely used fields of p's slot (see sx__proc): memory untouched
 * until a process uses them. */
sx__pext *sx__ptable_pext(sx_engine *e, const sx__proc *p);
/* The state cell of p's slot (SX__CELL bytes, see sx__cell): memory
 * untouched until a process uses it. */
void *sx__ptable_cell(sx_engine *e, const sx__proc *p);
/* How many slots the table has (in use or free). */
uint64_t sx__ptable_slots(sx_engine *e);
/* For tests, while no thread takes slots (frees may go on): checks every
 * magazine on the free stack and the outside threads' loaded one (each
 * slot free, at most MAG a magazine, free_ahead naming the slot AHEAD
 * further down or SX__FREE_NONE at the end; ptable.c). Returns 0, or -1
 * with what is wrong in why. *n_free gets the slots they hold. */
int sx__ptable_free_check(sx_engine *e, uint64_t *n_free, char *why,
                          size_t cap);
/* Takes a reference on the live process named by pid; NULL if none. */
sx__proc *sx__ptable_get(sx_engine *e, sx_pid pid);
/* Lets go of every reference c keeps. */
void sx__prefs_flush(sx_engine *e, sx__prefs *c);
/* Takes a reference if p still has generation gen; false if not. */
bool sx__proc_acquire(sx_engine *e, sx__proc *p, uint32_t gen);
void sx__proc_release(sx_engine *e, sx__proc *p);
/* Looks the PID whose id is id up in c (NULL: none, not on a worker). A
 * hit's reference stays c's. The caller checks that the PID is of this
 * engine's node. */
static inline sx__prefs_slot sx__prefs_find(sx__prefs *c, uint64_t id)
{
    sx__prefs_slot r = { NULL, NULL, NULL };
    if (c == NULL)
        return r;
    unsigned k = (uint32_t)id & (SX__PREFS - 1);
    sx__proc *kp = c->p[k];
    /* The kept reference holds the slot, so its generation still being
     * the PID's means the process is alive. acquire: as in
     * sx__ptable_get. An empty entry's id is 0, which a PID may name too
     * (generation 0, never live): kp is NULL then, and the look-up the
     * caller makes next refuses it. */
    if (c->id[k] == id && kp != NULL) {
        if (atomic_load_explicit(&kp->gen, memory_order_acquire) ==
            (uint32_t)(id >> 32))
            r.p = kp;
    } else if (c->id[k] == 0 && (id >> 63) == 0) {
        r.id = &c->id[k];
        r.slot = &c->p[k];
    }
    return r;
}

/* After sx__prefs_find: true when the reference on p is c's, a hit's or,
 * in an empty entry, the one the caller took on p for PID id (the entry
 * then keeps it). False: the caller releases it. An entry thus keeps the
 * first process it gets after a flush until the next, which costs sends
 * to ever new processes (a ring of hundreds) nothing more than the
 * look-up. Never a mailbox's (its generation has the top bit set:
 * ptable.c, "Generations") nor a job's: closing a mailbox waits for every
 * reference on it (outside.c, sx_engine_mailbox_free), on the closing
 * thread, and so does a job's restart (supervise.c, restart_now), on the
 * thread that restarts every job in turn. */
static inline bool sx__prefs_keep(sx_engine *e, const sx__prefs_slot *s,
                                  uint64_t id, sx__proc *p)
{
    if (s->p != NULL)
        return true;
    if (s->id == NULL || (sx__had_jobs(e) && sx__is_job(e, p)))
        return false;
    *s->id = id;
    *s->slot = p;
    return true;
}
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

#endif

/* engine/core/core.h — the engine itself: its command registry, struct
 * sx_engine, and the functions that spawn, send to, finish and watch
 * processes. Including it includes every concept's header the engine
 * struct holds (processes, the scheduler, the timers, the outcomes).
 * Internal to engine/; never installed.
 *
 * Ownership and threads are written at each field. The big picture is in
 * docs/ARCHITECTURE.md and docs/SCHEDULER.md.
 */
#ifndef SX_ENGINE_CORE_CORE_H
#define SX_ENGINE_CORE_CORE_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <stepx/engine.h>

#include "engine/core/outcome.h"
#include "engine/core/proc.h"
#include "engine/sched/sched.h"
#include "engine/timer/timer.h"

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

/* Command ids below this are found by index (dispatch.c, cmd_find): the
 * built-ins (below SX_CMD_USER_MIN) and the first 256 user ids, which a
 * program's own commands usually take (a yield of one: 8 instructions
 * fewer than the sorted table's search). Others go in ext_cmds. */
#define SX__CMD_DIRECT 512u

/* ---- the engine ---------------------------------------------------------- */

struct sx_engine {
    sx_engine_config cfg;
    unsigned n_workers;
    unsigned throughput;

    /* Registries: written before start, frozen after (start's thread
     * creation publishes them). */
    const sx_process_type **types;
    size_t n_types, cap_types;
    uint32_t *type_hash; /* proc.c: type_find */
    /* The same indices keyed by the address of each type's name
     * (type_hash_cap entries too): proc.c, type_find_addr. */
    uint32_t *type_addr_hash;
    size_t type_hash_cap;
    sx__cmd cmds[SX__CMD_DIRECT];
    sx__cmd_ext *ext_cmds; /* ids from SX__CMD_DIRECT on, sorted */
    size_t n_ext_cmds, cap_ext_cmds;

    /* Lifecycle. */
    pthread_mutex_t life_mu;
    /* Broadcast when live drops to 0 while stop or sx_engine_wait_all
     * waits for it (live.h). */
    pthread_cond_t life_cv;
    _Atomic int started;  /* 0, 1 = running */
    _Atomic int stopping; /* submits refused (seq_cst: see "live") */
    /* Stop's deadline passed: whatever is alive is terminated, and a
     * process a link would fail meanwhile finishes SX_ETERMINATED too
     * (sx__finish_terminated; release/acquire). */
    _Atomic int stop_killing;
    int stopped;   /* under life_mu */
    int stop_busy; /* a stop is under way; under life_mu */

    /* The process table (engine/core/ptable.c). */
    _Atomic(sx__proc *) segs[SX__SEGS];
    /* Each segment's sx__pext and state cells, one per slot (ptable.c):
     * set with the segment, before it is published. */
    sx__pext *pext[SX__SEGS];
    sx__cell *cells[SX__SEGS];
    /* How many of each segment's slots have been handed out at least once
     * (carved) and so initialised; the rest are untouched memory. Written
     * under grow_mu (release), read by sx__ptable_each (acquire). */
    _Atomic uint32_t seg_carved[SX__SEGS];
    /* Slots carved in all (the carving's frontier), and the slot up to
     * which an idle worker has faulted the table's pages in ahead of it
     * (sx__ptable_prefault); hints, relaxed. pf_off: the kernel cannot
     * populate (MADV_POPULATE_WRITE), so nobody tries again. pf_nomap:
     * k + 1 for the segment k that could not be mapped ahead (no memory):
     * nobody maps it ahead again (the carving maps it when it gets there,
     * or reports SX_ENOMEM); 0: none. */
    _Atomic uint32_t carved_end, pf_next, pf_nomap;
    _Atomic bool pf_off;
    pthread_mutex_t grow_mu;
    unsigned n_segs; /* under grow_mu */
    /* The stack of free-slot magazines: ABA tag << 32 | the index of the
     * first slot of the top magazine. */
    alignas(64) _Atomic uint64_t free_head;
    /* Free slots for threads that are not workers (submitters, loops). */
    alignas(64) sx__spin ext_slots_mu;
    sx__slotcache ext_slots; /* under ext_slots_mu */
    /* The live count's share of threads that are not workers (live.h), and the
     * admission count when max_processes is set. */
    alignas(64) _Atomic uint64_t ext_born, ext_died;
    _Atomic uint64_t admitted;
    /* The table reached cfg.max_slots (ptable.c, grow); never cleared. */
    _Atomic bool slots_full;

    /* Counters for threads that are not workers (relaxed; figures only):
     * submits from outside; finishes there (none today: every finish runs
     * on a worker, which counts in its own sx__wstats). */
    alignas(64) _Atomic uint64_t submitted, completed, failed, terminated;
    _Atomic uint64_t cancelled;
    /* Processes ended by their deadline (engine/io/expire.c; relaxed: a
     * figure). */
    _Atomic uint64_t deadlines;
    _Atomic uint64_t dead_letters, ext_messages;
    /* Checkpoints answered by the store, and the time from their steps'
     * ends to the answers, in ns (engine/core/checkpoint.c). */
    _Atomic uint64_t checkpoints, checkpoint_ns;

    /* Run queues for threads that are not workers: gq takes new processes
     * (submit) and processes whose turn ran out; wq takes wake-ups (a
     * completion from a loop, a message or terminate from outside).
     * Workers look at wq first: a woken process has waited already, and
     * behind a burst of submissions in one FIFO it would wait for all of
     * them (100,000 sleepers then wake 130 ms late at p50). */
    sx__globalq gq;
    sx__globalq wq;
    /* New processes from threads that are not workers: the ring in front
     * of gq (engine/sched/injq.h). */
    sx__injq inj;
    sx__park park;
    sx__worker *workers;
    sx__outcomes outcomes;

    /* libuv loop threads (engine/io/loop.c); created by start, gone after
     * stop. */
    struct sx__ioloop *loops;
    unsigned n_loops;
    /* Figures (relaxed; written by the loop threads). */
    alignas(64) _Atomic uint64_t io_inflight, io_ops, io_timeouts;
    /* A late sx_complete of a timed yield (a user command answered after
     * stop) against sx__io_stop freeing the loops (engine/io/deadline.c,
     * sx__io_dl_done): posters in progress, and whether the loops are
     * closing (calloc'd zero at engine creation). */
    _Atomic uint32_t io_posters;
    _Atomic bool io_closed;
    /* Sleep entries whose processes finished (sleep.c): a purge trigger,
     * not an exact count (release add at finish, acquire load by purge). */
    _Atomic uint64_t tm_dead;
    /* 1 while a purge runs (sleep.c, sx__timers_purge_maybe). */
    _Atomic int tm_purging;
    /* Command latency histogram (sampled; relaxed figures). */
    alignas(64) _Atomic uint64_t latency[SX_LATENCY_BUCKETS];
    _Atomic uint64_t latency_sum; /* their sum, microseconds */

    /* Process generations are taken from [gen_lo, gen_lo + gen_span)
     * (ptable.c, "Generations"). Set before start, read-only after. */
    uint32_t gen_lo, gen_span;
    /* The state store (engine/core/durable.c), or NULL: opened by start,
     * closed by stop. Its failure at start, for sx_engine_state_error. */
    struct sx__store *store;
    char state_err[512];
    /* Jobs read back from the store at start, run once the workers are
     * (durable.c); freed then. */
    struct sx__rjob *recovered;
    size_t n_recovered;
    /* Messages stored for checkpointed jobs, read back, in seq order. */
    struct sx__rmsg *rmsgs, **rmsgs_tail;

    /* Submits make jobs (engine/core/job.h): a store, or a type with a
     * default restart policy (set before start; read-only after). */
    bool jobs;
    /* A job was ever made (sx__job_attach): until then a worker's kept
     * references (sx__prefs_keep) need not look for one. relaxed: whoever
     * sends to a job learned its PID after the job was made. */
    _Atomic bool had_jobs;
    /* The types' default restart policies, by their index in types
     * (sx_engine_set_restart; NULL until one is set). */
    sx_restart_policy *type_restart;
    size_t type_restart_cap;
    /* The supervisor (supervise.c): jobs waiting for a restart, and its
     * thread, started at the first restart. Under sup_mu. */
    pthread_mutex_t sup_mu;
    pthread_cond_t sup_cv; /* CLOCK_MONOTONIC */
    struct sx__job *sup_list;
    pthread_t sup_thread;
    bool sup_running, sup_stop;
    /* What to do with PIDs of other nodes (sx_engine_set_remote; set
     * before start, read-only after); all NULL: nothing. */
    sx_remote_ops remote;
    void *remote_user;
};

/* What init gets (engine/core/control.c reads it; proc.c fills it). */
struct sx_init_ctx {
    sx_pid pid;
    sx_pid parent;
    sx_engine *engine;
    void *user;
    bool said; /* this init called sx_init_error (control.c) */
};

/* engine/core/proc.c */
/* sx_engine_register without its refusal of names that begin with '@'
 * (the engine's own types, engine/commands/helpers.c). */
int sx__type_add(sx_engine *e, const sx_process_type *type);
/* [cold] init refused with code: the message it gave with sx_init_error
 * ("" when none), kept for sx_engine_init_error on this thread. */
const char *sx__init_refused(const sx_init_ctx *ctx, int code);
/* [cold] Messages first.. (a chain) for to, a PID of another node, handed
 * to the remote route (sx_engine_set_remote) in order and freed; the
 * first error. */
int sx__remote_send(sx_engine *e, sx_pid to, sx__ev *first);
/* A watcher of kind (SX__WATCH_EXIT, SX__WATCH_LINK) addressed to local,
 * a process of this engine, set on target (engine/core/outside.c). 0,
 * SX_ENOTFOUND (no such local process) or SX_ENOMEM. */
int sx__watch_for(sx_engine *e, sx_pid local, uint8_t kind, sx_pid target);
/* [cold] w (a watcher) on target, a PID of another node, handed to the
 * remote route: 0, or the error to answer w with (SX_ENOTFOUND: no route
 * for it). */
int sx__remote_watch(sx_engine *e, sx_pid target, sx__ev *w);
/* [cold] Asks target's node for the other half of partner's link with it
 * (sx_remote_ops.link): 0, or the error (SX_ENOTFOUND: no route). */
int sx__remote_link(sx_engine *e, sx_pid target, sx_pid partner);
/* [cold] A submit placed by opts (node, place) on another node, handed
 * to the remote route (with w: watched there too): 0, an error, or 1 when
 * it runs here after all (no route and a placement that allows it). */
int sx__remote_submit(sx_engine *e, const char *type, const char *method,
                      const sx_payload *input, size_t n_input,
                      const sx_submit_opts *opts, sx_submit_fn fn, void *user,
                      sx__ev *w);
/* link_failed (proc.h) for a partner of another node: its failure, or its
 * node lost (SX_ENOCONNECTION). No local PID id takes these values (slot
 * numbers stay far below 2^32 - 1). */
#define SX__LINK_REMOTE UINT64_MAX
#define SX__LINK_NOCONN (UINT64_MAX - 1)
#define SX__LINK_GONE (UINT64_MAX - 2) /* not there when the link was made */
/* A submit begins: sx_engine_init_error says "" until init refuses one. */
void sx__init_forget(void);
/* engine/core/wait.c: [worker] (as it parks) wakes sx_engine_wait_all's
 * waiters when no process is alive (live.h, "waiting for all"). */
void sx__live_idle_check(sx_engine *e);
/* [cold] A spawn failed with code: init's message when it was init that
 * refused it with code and no one took the message yet (then taken), else
 * NULL. */
const char *sx__init_take(int code);

/* engine/io/expire.c */
/* [creator, p not queued yet] Arms p's deadline, ms from now (ms <= 0:
 * none): p is terminated then with SX_ETIMEDOUT unless it has ended. 0 or
 * SX_ENOMEM. */
int sx__expire_arm(sx_engine *e, sx__proc *p, int64_t ms);

/* What sx__spawn_opt takes besides a spawn's own. */
typedef struct {
    int64_t deadline_ms; /* < 0: the type's; 0: none */
    int scope;           /* sx_scope: what the parent's end does to it */
    /* Not NULL: the process is left unqueued, as sx__spawn_held leaves
     * it (no scope then). */
    struct sx__proc **held;
    /* The parent gets @spawned {"tag": notify_tag, "pid": child} before
     * the child first runs. */
    bool notify;
    uint64_t notify_tag;
    /* Placement (sx_spawn_opts.node, .place): spawn commands only. */
    uint32_t node;
    int place;
} sx__spawnx;

/* The @spawned message {"tag": tag, "pid": child} to parent (spawn-wait's
 * notify option), from child. */
void sx__spawned_notice(sx_engine *e, sx_pid parent, sx_pid child,
                        uint64_t tag);

/* sx__spawn with options (cold: submits and spawns that have any). */
int sx__spawn_opt(sx_engine *e, sx_pid parent, const char *type,
                  const char *method, const sx_payload *input, size_t n_input,
                  sx__ev *watcher, sx_pid *out_pid, const sx__spawnx *x);

/* The CLOCK_MONOTONIC time ms from now (the clock of life_cv and of the
 * outcome waiters' condition variables); ms >= 0. */
static inline void sx__deadline_after(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* a earlier than b. */
static inline bool sx__ts_before(const struct timespec *a,
                                 const struct timespec *b)
{
    return a->tv_sec < b->tv_sec ||
           (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* engine/core/engine.c */
int sx__spawn(sx_engine *e, sx_pid parent, const char *type, const char *method,
              const sx_payload *input, size_t n_input, sx__ev *watcher,
              sx_pid *out_pid);
/* sx__spawn for a submit from the API (no parent, no watcher), whose type
 * name is most often the very string the type was registered with: that
 * address is looked up first (proc.c, type_find_addr). */
int sx__spawn_api(sx_engine *e, const char *type, const char *method,
                  const sx_payload *input, size_t n_input, sx_pid *out_pid);
/* n messages first..last (linked through node.next) to one process with
 * one look-up and one push; consumes them. */
int sx__send_chain(sx_engine *e, sx_pid to, sx__ev *first, sx__ev *last,
                   size_t n);
/* sx__send_chain without its fast path: every case sx__send_kept
 * declines (the process table's look-up, a remote node, a mailbox, a
 * receiver not waiting, a worker's next slot taken). */
int sx__send_chain_any(sx_engine *e, sx_pid to, sx__ev *first, sx__ev *last,
                       size_t n);
/* [worker w of e, or w NULL] sx__send_chain's common case, with no call
 * once LTO inlines sx__hand_off_next: the receiver's reference is one w
 * keeps (sx__prefs), and it waits for a message while w's next slot is
 * empty. Counted before the hand-off, as every delivery is (a receiver
 * that saw a message sees it counted), and taken back when it did not
 * go. true: delivered; false: nothing done, for sx__send_chain_any. */
static inline bool sx__send_kept(sx_engine *e, sx__worker *w, sx_pid to,
                                 sx__ev *first, sx__ev *last, size_t n)
{
    if (w == NULL || to.node != e->cfg.node || to.host != e->cfg.host)
        return false;
    sx__proc *p = sx__prefs_find(w->prefs, to.id).p;
    if (p == NULL)
        return false;
    sx__wstat_add(&w->st.messages, n);
    if (sx__hand_off_next(w, p, first, last))
        return true; /* the reference stays kept */
    sx__wstat_add(&w->st.messages, (uint64_t)0 - n);
    return false;
}
/* One message built beforehand (ev), sent as sx__send would; for cold
 * callers (proc.c). */
int sx__send_note(sx_engine *e, sx_pid to, sx__ev *ev);
/* Sends a message (ctl: a control event that overtakes user messages). */
int sx__send(sx_engine *e, sx_pid from, sx_pid to, const char *topic,
             size_t topic_len, sx_payload data, bool ctl);
/* Finishes p on the calling worker: close, outcome, watchers, retire. */
void sx__finish(sx_engine *e, sx__proc *p, int error, const char *msg,
                sx_payload value);
/* Spawns as sx__spawn does (no parent, no watcher) but leaves the new
 * process unqueued: *held gets it, with the table's reference, for the
 * caller to queue (sx__enqueue_new) or drop (sx__spawn_drop). claim_id
 * not 0: the slot reserved for that PID id (sx__ptable_reserve), else a
 * fresh one. */
int sx__spawn_held(sx_engine *e, const char *type, const char *method,
                   const sx_payload *input, size_t n_input, uint64_t claim_id,
                   sx__proc **held, sx_pid *out_pid);
/* The registered type named name, or NULL. */
const sx_process_type *sx__type_find(sx_engine *e, const char *name);
/* The default restart policy of the type named type, or NULL. */
const sx_restart_policy *sx__type_restart(sx_engine *e, const char *type);
/* [supervise.c, the slot is the caller's] Readies a restarted job's slot
 * for its next attempt: events dropped, state zeroed, counts reset. */
void sx__proc_reset(sx_engine *e, sx__proc *p);
/* Runs init again on p as self, then queues it; init's error (nothing
 * queued) otherwise. */
int sx__proc_reinit(sx_engine *e, sx__proc *p, sx_pid self, const char *method,
                    const sx_payload *input, size_t n_input);
/* [start] Takes the reserved slot of claim_id for a stored job waiting
 * for its restart: state made, init not run, state word COMPLETE (as a
 * finish leaves it), counted live; *held gets it (the table's
 * reference). */
int sx__spawn_waiting(sx_engine *e, const char *type, const char *method,
                      uint64_t claim_id, sx__proc **held);
/* As sx__spawn_waiting, without init and left READY: a checkpointed job
 * about to be given its checkpoint (checkpoint.c) and queued. */
int sx__spawn_restored(sx_engine *e, const char *type, const char *method,
                       uint64_t claim_id, sx__proc **held);
/* Drops a held process: close, then retired with no outcome; its
 * watchers get rc and msg. */
void sx__spawn_drop(sx_engine *e, sx__proc *p, int rc, const char *msg);
/* What sx__finish does after close for a process's outcome: kept,
 * watchers fired, the table's reference dropped ([any thread]). */
void sx__finish_tail(sx_engine *e, sx__proc *p, sx_pid pid, int error,
                     const char *msg, sx_payload value, uint64_t steps,
                     uint32_t attempts);

/* engine/core/durable.c: the state store's side of the engine. */
/* [start, before the workers] Opens the store, reads back its outcomes
 * and jobs, picks this run's generation range, reserves the jobs' slots.
 * 0 without a store. On error the store is closed and e->state_err says
 * why. */
int sx__durable_open(sx_engine *e);
/* [start, once the workers run] Runs the jobs read back. */
void sx__durable_resume(sx_engine *e);
/* [stop, after the workers] Commits what is queued, shuts the store down
 * (records are refused from then on). */
void sx__durable_close(sx_engine *e);
/* [free] Releases the store. */
void sx__durable_free(sx_engine *e);
/* sx_engine_submit on an engine with a store: submits and waits until
 * the job is stored. */
int sx__durable_submit(sx_engine *e, const char *type, const char *method,
                       const sx_payload *input, size_t n_input,
                       sx_pid *out_pid);
/* sx__finish of a stored job (p->job), after close: stores the outcome,
 * then makes it visible (sx__finish_tail). */
void sx__job_finish(sx_engine *e, sx__proc *p, sx_pid pid, int error,
                    const char *msg, sx_payload value, uint64_t steps);

/* engine/core/watch.c */
/* [the worker that runs p] Frees spent scope watchers among the newest
 * on p's list (children that ended), a few at a time: a parent that
 * spawns scoped children one after another holds a watcher only for
 * those still running. */
void sx__scope_prune(sx_engine *e, sx__proc *p);
/* [the worker that ends p's attempt] A job's attempt ended (error) and it
 * restarts: its scoped children get what its end gives them now, and
 * their watchers go inert (the list stays open for the next attempt). */
void sx__scope_end(sx_engine *e, sx__proc *p, int error);
int sx__watch(sx_engine *e, sx_pid target, sx__ev *watcher);
/* [finishing worker] Closes p's watcher list and fires every watcher on
 * it with the outcome. */
void sx__watchers_fire(sx_engine *e, sx__proc *p, sx_pid pid, int error,
                       const char *msg, sx_payload value, uint64_t steps,
                       uint32_t attempts);
/* Raises p's TERM flag and queues it if it is waiting (the caller holds a
 * reference). SX_ENOTFOUND when it is finishing already. */
int sx__terminate(sx_engine *e, sx__proc *p);
/* The error and message a terminated process finishes with. */
void sx__finish_terminated(sx_engine *e, sx__proc *p);

/* engine/core/dispatch.c */
void sx__commands_builtin(sx_engine *e);
/* Runs the handlers of the yields in out; SX_ENOMEM when a completer could
 * not be allocated (the process then fails). */
int sx__dispatch(sx_engine *e, sx__proc *p, const sx_step_output *out);
/* sx__dispatch for a process that is a job (p->job: its PID is the
 * job's), by the thread that owns p: the turn's step of a job, a
 * checkpoint's answer, a resume (engine/core/checkpoint.c). sx__dispatch
 * itself is for every other process and keeps one caller, the turn, into
 * which LTO inlines it (a second caller costs pingpong ~34 instructions
 * per message in callgrind). */
int sx__dispatch_job(sx_engine *e, sx__proc *p, const sx_step_output *out);
/* Sends only the sx_send messages of out (a step that ended DONE or FAIL:
 * its yields are discarded, its messages still go). */
void sx__dispatch_sends(sx_engine *e, sx__proc *p, const sx_step_output *out);
/* Fills a finished process's outcome into a watcher and delivers it. */
void sx__watch_fire(sx_engine *e, sx__ev *w, sx_pid target, int error,
                    const char *msg, sx_payload value, uint64_t steps,
                    uint32_t attempts);

/* engine/core/outside.c */
/* Hands ev (a message) to the mailbox p (state SX__PSTATE_MAILBOX) and
 * frees it. */
void sx__mailbox_deliver(sx_engine *e, sx__proc *p, sx__ev *ev);
/* Closes every mailbox still open (sx_engine_free, after stop). */
void sx__mailboxes_close(sx_engine *e);
/* Calls an SX__WATCH_FN watcher and frees it. */
void sx__watch_fn_fire(sx_engine *e, sx__ev *w, sx_pid target, int error,
                       const char *msg, sx_payload value, uint64_t steps,
                       uint32_t attempts);

#endif

/* engine/stepx/engine.h — the stepx engine: workers, submit, send, wait,
 * stop, and commands.
 *
 * It is one piece: it is the engine's whole contract as a user includes
 * it (docs/API.md follows its order), and a split would only make a
 * reader open several headers for one API.
 *
 * Threads: every function may be called from any thread unless its comment
 * says otherwise. Functions marked [not from a step] must not be called from
 * inside a process's init/step/close or a command handler (they block on
 * work that the calling worker itself would have to do).
 */
#ifndef STEPX_ENGINE_H
#define STEPX_ENGINE_H

#include <stepx/process.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    unsigned workers;     /* 0 = one per online CPU                          */
    unsigned throughput;  /* events / steps per turn before yielding; 0 = 32;
                             at most 2^20                                */
    size_t max_processes; /* 0 = unlimited                                   */
    unsigned io_loops;    /* libuv loop threads for commands; 0 = 1          */
    size_t keep_outcomes; /* finished outcomes kept for wait; 0 = 10,000     */
    /* Beyond the core contract of docs/API.md (may be left zero): */
    uint32_t node; /* this engine's node number in PIDs; default 0          */
    /* This engine's host number in PIDs; 0 = 1. PIDs whose host differs
     * name nothing here: a program that restarts an engine and must not
     * let PIDs of the earlier one reach processes of the new one gives
     * each run its own (stepxd: a random incarnation, README). */
    uint32_t host;
    /* Bytes of kept outcomes (each outcome's result payload plus its error
     * message with the NUL; not the records' own headers). While more are
     * held, the oldest outcomes are evicted (wait: SX_ENOTFOUND), even
     * among the keep_outcomes most recent; the most recent outcome is kept
     * even when it alone is over. 0 = SX_KEEP_OUTCOME_BYTES_DEFAULT;
     * SIZE_MAX = no byte limit. docs/ARCHITECTURE.md, "The outcome store",
     * says how far over it the store may run. */
    size_t keep_outcome_bytes;
    /* The largest result a process may finish with, in bytes. A process
     * whose DONE result is bigger finishes instead with SX_ETOOLARGE and
     * the message "result of N bytes is over the limit of M (max_result)",
     * which wait, spawn-and-wait and @exit all see. 0 =
     * SX_MAX_RESULT_DEFAULT; SIZE_MAX = no limit. */
    size_t max_result;
    /* The process table's cap, in slots (processes and mailboxes); 0 = no
     * cap below the table's own largest size (~4.3 billion). Unlike
     * max_processes it costs nothing on submit, spawn or finish (the
     * table checks it only when it grows), and it is not exact: free slots
     * sit in the workers' caches (up to 64 each, and 32 for the other
     * threads), so a submit may be refused with SX_ELIMIT while up to
     * that many slots are free. Each slot takes 168 bytes for good once
     * used (docs/ARCHITECTURE.md, "Memory"). */
    size_t max_slots;
    /* A state store (docs/DURABILITY.md): the directory of its database,
     * created when missing. Submitted jobs are then stored before submit
     * answers, and those without an outcome run again at the next start
     * with the same PIDs; kept outcomes survive too. NULL = none:
     * everything lives in memory. Only read during sx_engine_start. */
    const char *state_dir;
    /* With state_dir: every commit is synced to the disk itself
     * (SQLite's synchronous=FULL), so that a power loss loses nothing
     * acknowledged; by default (NORMAL) a crash of the program loses
     * nothing, a power loss the last commits. */
    bool state_sync_full;
    /* With state_dir: the database's largest size in bytes; past it a
     * submit fails SX_ESTORAGE as on a full disk. 0 = no limit. */
    uint64_t state_max_bytes;
} sx_engine_config;

#define SX_KEEP_OUTCOME_BYTES_DEFAULT ((size_t)64 << 20) /* 64 MiB */
#define SX_MAX_RESULT_DEFAULT ((size_t)4 << 20)          /* 4 MiB */

#define SX_MAX_WORKERS 256
/* The most io_loops may be (each is a thread, an epoll and an eventfd). */
#define SX_MAX_IO_LOOPS 256
/* The most keep_outcomes may be (about a billion outcomes). */
#define SX_MAX_KEEP_OUTCOMES ((size_t)1 << 30)

/* The memory this program may use, in bytes: the machine's physical
 * memory, or the memory.max of its cgroup (v2) or of a cgroup above it
 * when that is lower; 0 if unknown. For sizing limits (stepxd's default
 * max_slots; the event-node caches, docs/ARCHITECTURE.md "Memory"). */
uint64_t sx_memory_size(void);

/* Creates an engine (not started). cfg may be NULL for defaults. On success
 * *out is the caller's, to be released with sx_engine_free. Errors:
 * SX_EINVAL (out NULL, workers > SX_MAX_WORKERS, throughput > 2^20,
 * io_loops > SX_MAX_IO_LOOPS, keep_outcomes > SX_MAX_KEEP_OUTCOMES),
 * SX_ENOMEM. */
int sx_engine_new(const sx_engine_config *cfg, sx_engine **out);

/* The configuration the engine runs with: cfg as given to sx_engine_new,
 * each 0 that stands for a default replaced by that default (workers,
 * throughput, io_loops, keep_outcomes, host, keep_outcome_bytes,
 * max_result). Errors: SX_EINVAL (e or out NULL). */
int sx_engine_config_get(const sx_engine *e, sx_engine_config *out);

/* Registers a process type; before start only. The type table and the
 * strings it points to must outlive the engine, unchanged (they are not
 * copied). Errors: SX_EINVAL (missing name/init/step, or state_size above
 * SX_STATE_SIZE_MAX), SX_EEXIST (duplicate name, or the string of a
 * registered type's name), SX_ESTATE (already started), SX_ENOMEM. */
#define SX_STATE_SIZE_MAX ((size_t)1 << 30) /* 1 GiB per process */
int sx_engine_register(sx_engine *e, const sx_process_type *type);

/* Starts the workers. With cfg.state_dir, first opens the state store and
 * runs again every stored job without an outcome (docs/DURABILITY.md);
 * the PIDs' host part is then the store's (sx_engine_config_get says
 * it). Errors: SX_ESTATE (started twice, or after a start that failed),
 * SX_ENOMEM, -errno from thread creation or from setting up a libuv loop
 * (e.g. -EMFILE), or the store's: -EBUSY (another program has the
 * directory), SX_ECORRUPT, SX_EVERSION, -EROFS, -ENOSPC, -errno;
 * sx_engine_state_error says what and where. Nothing is left running on
 * error and nothing stored is changed. */
int sx_engine_start(sx_engine *e);

/* The message of the state store's failure at start, or "" (never NULL;
 * e NULL gives ""). Valid until sx_engine_free. */
const char *sx_engine_state_error(const sx_engine *e);

/* Creates a process of type and runs its init with method and input
 * synchronously; input bytes are only read during the call. On success the
 * process is queued and *out_pid (may be NULL) names it. Errors: SX_EINVAL,
 * SX_ESTATE (not started), SX_ESTOPPING, SX_EUNKNOWN_TYPE,
 * SX_EUNKNOWN_METHOD or init's own error, SX_ELIMIT (max_processes, or
 * max_slots when no slot is free),
 * SX_ENOMEM. On error nothing is queued and close is not called. */
int sx_engine_submit(sx_engine *e, const char *type, const char *method,
                     const sx_payload *input, size_t n_input, sx_pid *out_pid);

/* The message init gave with its error (sx_init_error) when init refused
 * the last submit on this thread; "" when it gave none, when that submit
 * failed for another reason, or succeeded. Valid until the next submit
 * on this thread. */
const char *sx_engine_init_error(void);

/* ---- supervision ------------------------------------------------------ */

/* When a job is started again after it ends (docs/DURABILITY.md,
 * "Supervision"): never (OTP's temporary), after a failure (transient),
 * or after any end (permanent). A cancel (sx_engine_cancel, the cancel
 * command) or a terminate never restarts it, nor does the engine's stop. */
typedef enum {
    SX_RESTART_NEVER = 0,
    SX_RESTART_ON_FAILURE = 1,
    SX_RESTART_ALWAYS = 2
} sx_restart_mode;

/* A restart policy. A restart runs the job's init again, with the same
 * method and inputs and the same PID, after a backoff: backoff_min_ms,
 * doubled at each restart up to backoff_max_ms, with up to a quarter of
 * it added at random (jitter); it starts over at backoff_min_ms once an
 * attempt has run for window_ms without ending. At most max_restarts
 * restarts within any window_ms: the end that would make one more fails
 * the job with SX_ERESTART_LIMIT, whose message carries the last end's.
 * Zero fields take their defaults (below). */
typedef struct {
    int mode; /* sx_restart_mode */
    uint32_t max_restarts;
    uint32_t window_ms;
    uint32_t backoff_min_ms;
    uint32_t backoff_max_ms;
} sx_restart_policy;

#define SX_RESTART_MAX_DEFAULT 3
#define SX_RESTART_WINDOW_DEFAULT_MS 60000
#define SX_RESTART_BACKOFF_MIN_DEFAULT_MS 100
#define SX_RESTART_BACKOFF_MAX_DEFAULT_MS 10000

/* Fills the defaults into p's zero fields (backoff_max_ms: at least
 * backoff_min_ms). Errors: SX_EINVAL (p NULL, a mode out of range,
 * backoff_min_ms over backoff_max_ms, max_restarts over 1,000,000). */
int sx_restart_policy_check(sx_restart_policy *p);

/* What sx_engine_submit_async takes besides the job. */
typedef struct {
    /* An idempotency key (any bytes; NULL = none): a submit whose key an
     * earlier job of this engine's store still holds (the job, or its
     * kept outcome) answers that job's PID, with existing set, and
     * starts nothing (the new process's init ran; its close runs). Needs
     * a state store: SX_EINVAL without one. */
    const void *key;
    size_t key_len;
    /* The job's restart policy; NULL = its type's (sx_engine_set_restart),
     * or none. */
    const sx_restart_policy *restart;
    /* The job's deadline: when it has not ended deadline_ms after it
     * starts (each attempt: a restart starts the clock again), it ends
     * with SX_ETIMEDOUT ("deadline of N ms passed"), as a terminate ends
     * a process. 0 = its type's (sx_process_type.deadline_ms), or none.
     * Not stored: a run after a crash has its type's (docs/
     * DURABILITY.md, "Known gaps"). */
    int64_t deadline_ms;
    /* Where the message of an init error goes (sx_init_error), with a
     * NUL; NULL: nowhere (sx_engine_init_error has it too). */
    char *init_error;
    size_t init_error_cap;
    /* Where it runs (docs/CLUSTER.md, "Placement"): node 0 or this
     * engine's own number with SX_PLACE_HERE: here. Another node's
     * number: there, through the remote route (SX_ENOCONNECTION when that
     * node is not in the cluster, or there is no route). SX_PLACE_ANY:
     * any node of the cluster that has the type; SX_PLACE_LEAST_LOADED:
     * the member with the type and the fewest live processes per worker
     * at its last heartbeat (this node included). Without a remote route
     * both run here. Elsewhere the answer comes from that node (its
     * unknown type, its init's refusal), and key and restart do not
     * travel (SX_EINVAL). */
    uint32_t node;
    int place; /* SX_PLACE_* */
} sx_submit_opts;

enum { SX_PLACE_HERE = 0, SX_PLACE_ANY = 1, SX_PLACE_LEAST_LOADED = 2 };

/* Sets type's default restart policy (copied; NULL: none), for submits
 * that give none; before start only. Errors: SX_EINVAL (unknown type, a
 * mode out of range, backoff_min_ms > backoff_max_ms), SX_ESTATE. */
int sx_engine_set_restart(sx_engine *e, const char *type,
                          const sx_restart_policy *policy);

/* The answer to sx_engine_submit_async: rc 0 and the job's pid (existing:
 * an earlier job's, by its key), or SX_ESTORAGE with msg saying why the
 * store could not record it (nothing started). Called exactly once, on
 * the store's thread (or, without a store, on the calling thread before
 * sx_engine_submit_async returns); it must not block. msg is valid only
 * during the call (NULL when rc is 0). */
typedef void (*sx_submit_fn)(void *user, int rc, sx_pid pid, bool existing,
                             const char *msg);

/* Submits as sx_engine_submit does, answering through fn: with a state
 * store, once the job is stored (init ran first; the process runs only
 * once it is stored). Returns 0 when fn will be called, or an error of
 * sx_engine_submit (then fn is never called). opts may be NULL. On an
 * engine with a store, sx_engine_submit is this and a wait for fn. */
int sx_engine_submit_async(sx_engine *e, const char *type, const char *method,
                           const sx_payload *input, size_t n_input,
                           const sx_submit_opts *opts, sx_submit_fn fn,
                           void *user);

/* Delivers a message {from, topic, data} to process `to`; topic and data are
 * copied. Errors: SX_EINVAL (topic NULL, longer than 255 bytes or not
 * valid UTF-8, data over SX_MESSAGE_MAX),
 * SX_ENOTFOUND (no such live process), SX_ECLOSED (it is finishing),
 * SX_ENOMEM. To a checkpointed job (with a state store) it waits until the
 * message is stored (SX_ESTORAGE: it could not be); called from a
 * callback the state store's thread runs (an sx_engine_watch callback of
 * a stored job, a submit's answer), where that wait would never end, it
 * is SX_ESTATE: use sx_engine_send_async there. sx_engine_submit on an
 * engine with a state store is SX_ESTATE there too. */
int sx_engine_send(sx_engine *e, sx_pid from, sx_pid to, const char *topic,
                   sx_payload data);

/* A message: what sx_engine_send_many takes, and what an outside mailbox
 * and the remote route receive (valid only during the call). */
typedef struct {
    sx_pid from;
    sx_pid to;
    const char *topic; /* NUL-terminated, at most 255 bytes */
    sx_payload data;
} sx_message;

/* n messages (msgs[i], every one from the same sender to the same
 * process), delivered in order as n sx_engine_send calls would deliver
 * them, with one look-up and one push for the lot (a batch that came over
 * the network). Any thread. Errors: those of sx_engine_send (SX_EINVAL
 * also for senders or receivers that differ); on an error none of them
 * was delivered, but for a checkpointed job of an engine with a state
 * store, whose messages are stored one by one: then those before the
 * failed one were. */
int sx_engine_send_many(sx_engine *e, const sx_message *msgs, size_t n);

/* The answer to sx_engine_send_async: rc as sx_engine_send's, or
 * SX_ESTORAGE when a message to a checkpointed job could not be stored
 * (it was not delivered). */
typedef void (*sx_send_fn)(void *user, int rc);

/* Sends as sx_engine_send does, answering through fn. A message to a
 * checkpointed job (SX_TYPE_CHECKPOINTED, on an engine with a state
 * store) is stored before it is delivered (docs/DURABILITY.md): fn is
 * called on the store's thread once it is; sx_engine_send waits for that.
 * Any other message: fn is called before this returns. Returns 0 when fn
 * is (or was) called, or SX_EINVAL (then it never is). fn must not
 * block. */
int sx_engine_send_async(sx_engine *e, sx_pid from, sx_pid to,
                         const char *topic, sx_payload data, sx_send_fn fn,
                         void *user);

/* Soft cancel: a MESSAGE with topic SX_TOPIC_CANCEL and the reason (a
 * msgpack string; NULL reason = "cancelled") that overtakes queued user
 * messages. Errors as sx_engine_send. */
int sx_engine_cancel(sx_engine *e, sx_pid pid, const char *reason);

/* Hard stop: the process finishes with SX_ETERMINATED without another step
 * (a step already running completes first); close runs once. Errors:
 * SX_ENOTFOUND. */
int sx_engine_terminate(sx_engine *e, sx_pid pid);

typedef struct {
    int error;        /* 0 = DONE; else SX_ETERMINATED, SX_EFAILED, ...   */
    char *error_msg;  /* owned by the result; NULL when error == 0        */
    sx_payload value; /* owned by the result                              */
    uint64_t steps;   /* how many times step ran                          */
    /* The run that ended: 1, or more for a stored job that ran again
     * after the engine restarted (docs/DURABILITY.md). */
    uint32_t attempts;
} sx_result;

/* Waits for the outcome of pid. Returns 0 when there is one (its own error
 * is out->error; release it with sx_result_free), SX_ETIMEDOUT when
 * timeout_ms (< 0: no limit) passed first, SX_ENOTFOUND for a PID the
 * engine does not know (or whose outcome is no longer kept, or a mailbox:
 * it is not a process and has no outcome), SX_ENOMEM. timeout_ms 0 looks
 * without sleeping: a live process costs no lock and no system call.
 * [not from a step] */
int sx_engine_wait(sx_engine *e, sx_pid pid, int64_t timeout_ms,
                   sx_result *out);
void sx_result_free(sx_result *r);

/* Waits until no process is alive: every process submitted or spawned has
 * finished (a supervised job's restarts included; mailboxes are not
 * processes). Returns 0 then, SX_ETIMEDOUT when timeout_ms (< 0: no
 * limit; 0: a look that never sleeps) passed first, SX_ESTATE on a worker
 * (a step), SX_EINVAL for a NULL e. A finish's outcome, watchers and links
 * may still be on their way when it returns (docs/API.md). Costs a
 * running engine nothing per process: the workers look for a waiter only
 * as they park. [not from a step] */
int sx_engine_wait_all(sx_engine *e, int64_t timeout_ms);

/* Cancels every live process, waits up to deadline_ms for them to finish,
 * terminates the rest and stops the workers. Afterwards no step runs, every
 * close has run, and submit returns SX_ESTOPPING. Returns 0 (also after a
 * start that failed: nothing runs), or SX_ESTATE when sx_engine_start was
 * never called. Idempotent. [not from a step] */
int sx_engine_stop(sx_engine *e, int64_t deadline_ms);

/* Stops (deadline 0) if needed and releases everything. NULL is a no-op.
 * Mailboxes still open are closed as by sx_engine_mailbox_free (watchers
 * on them get SX_ECLOSED). [not from a step] */
void sx_engine_free(sx_engine *e);

/* ---- introspection ---------------------------------------------------- */

typedef struct {
    uint64_t steps;       /* step calls run on this worker                    */
    uint64_t steals;      /* successful steal-half operations                 */
    uint64_t stolen;      /* processes moved by those steals                  */
    uint64_t parks;       /* times the worker parked                          */
    uint64_t wakeups;     /* times it was woken by a producer                 */
    uint64_t global_pops; /* processes taken from the global queue         */
    uint64_t timeout_finds; /* parks that timed out while every worker
                               slept beside global work, no wake-up
                               granted in one more period: a lost
                               wake-up; must stay 0                       */
} sx_worker_stats;

#define SX_LATENCY_BUCKETS 24

typedef struct {
    uint64_t live;         /* processes not yet finished                      */
    uint64_t submitted;    /* submits and spawns that succeeded               */
    uint64_t completed;    /* finished DONE                                   */
    uint64_t failed;       /* finished FAIL / step error                      */
    uint64_t terminated;   /* finished by terminate or stop                   */
    uint64_t messages;     /* messages sent: queued for a process or mailbox  */
    uint64_t dead_letters; /* SX_TAG_NONE yields whose command failed       */
    uint64_t global_queue; /* processes in the global queue now             */
    unsigned parked;       /* workers parked (or about to) now                */
    unsigned workers;      /* number of workers                               */
    /* libuv side (extensions): */
    uint64_t io_inflight; /* ops, deadlines and handles alive on the loops  */
    uint64_t io_ops;      /* ops started on the loops since start          */
    uint64_t timeouts;    /* yields answered SX_ETIMEDOUT by their timeout */
    /* Sleeps (SX_CMD_SLEEP, SX_CMD_SLEEP_UNTIL without a timeout) wait on
     * the workers, not the loops: entries in the workers' timer sets now
     * (and on their way in), including those of processes that finished
     * meanwhile until they are purged (docs/COMMANDS.md). */
    uint64_t sleeps;
    /* Process slots in the table, in use or free: it grows (by doubling
     * segments) and never shrinks while the engine lives; each slot is
     * 96 bytes, state and mailbox apart, and 72 more beside it once a
     * process uses them (a small state, I/O, links, jobs). */
    uint64_t slots;
    /* Command latency, dispatch to answer, sampled on one yield in 64:
     * latency_us[k] counts samples under 2^k microseconds (and at least
     * 2^(k-1), k >= 1); the last bucket also holds everything slower. */
    uint64_t latency_us[SX_LATENCY_BUCKETS];
    /* The sum of those samples' latencies, in microseconds (each sample
     * counted in whole microseconds, as the buckets place it). */
    uint64_t latency_sum_us;
    /* The outcome store now: records held (kept for wait, and those whose
     * shard has not evicted them yet), and the bytes they count against
     * keep_outcome_bytes (results and error messages). */
    uint64_t outcomes;
    uint64_t outcome_bytes;
    /* The state store (all 0 without one): transactions committed, the
     * records in them (submits, finishes, restarts), and the records
     * answered with an error (docs/DURABILITY.md). */
    uint64_t store_commits, store_records, store_failed;
    /* Jobs waiting for a restart now (supervision). */
    uint64_t restarting;
    /* Checkpoints of checkpointed jobs answered by the state store, and
     * the time from their steps' ends to the answers, in all (µs). */
    uint64_t checkpoints, checkpoint_us;
    /* Finished SX_ECANCELLED (sx_cancelled, a cancel of a job waiting
     * for its restart): counted here, not in failed. */
    uint64_t cancelled;
    /* Finished SX_ETIMEDOUT by their deadline (sx_submit_opts,
     * sx_spawn_opts, sx_process_type.deadline_ms): counted in failed
     * too. */
    uint64_t deadlines;
} sx_engine_stats;

/* Fills *out and, when workers is not NULL, up to cap per-worker figures.
 * Figures are read without stopping the engine (each is exact, the set is
 * not a snapshot). Errors: SX_EINVAL. */
int sx_engine_stats_get(sx_engine *e, sx_engine_stats *out,
                        sx_worker_stats *workers, size_t cap);

typedef enum {
    SX_PSTATE_READY = 1,
    SX_PSTATE_RUNNING = 2,
    SX_PSTATE_BLOCKED = 3,
    SX_PSTATE_IDLE = 4,
    SX_PSTATE_COMPLETE = 5,
    /* A job waiting for its restart (listings only; not counted by
     * sx_engine_count_states). */
    SX_PSTATE_RESTARTING = 6
} sx_pstate;
const char *sx_pstate_name(int state); /* "ready", "running", ... */

typedef struct {
    sx_pid pid;
    const char *type;   /* the registered type's name (engine-lifetime)     */
    const char *method; /* from the type's methods list, or NULL            */
    int state;          /* sx_pstate                                        */
    uint64_t steps;
    /* A submitted job's attempt (1, then one more per restart or re-run
     * after a crash); 0 for a spawned process. */
    uint32_t attempts;
    /* A job waiting to be restarted (state SX_PSTATE_RESTARTING): in how
     * many milliseconds; else -1. */
    int64_t restart_in_ms;
    /* The message of the job's last end that restarted it ("" if none),
     * cut to fit. */
    char last_error[96];
} sx_process_info;

/* Counts live processes by state: out[s] for each sx_pstate s (out[0]
 * is unused). One walk of the process table, no copying. Errors:
 * SX_EINVAL. */
int sx_engine_count_states(sx_engine *e, uint64_t out[SX_PSTATE_COMPLETE + 1]);

/* Lists up to cap live processes into out. Returns how many were written
 * (>= 0) or SX_EINVAL. */
int sx_engine_list(sx_engine *e, sx_process_info *out, size_t cap);

/* Type names registered, for listings: returns the count; fills up to cap
 * pointers (engine-lifetime). out NULL (whatever cap is) only counts; e
 * NULL gives 0. */
size_t sx_engine_types(sx_engine *e, const sx_process_type **out, size_t cap);

/* ---- outside mailboxes and watches (extensions for the relay) -------- */

/* A watcher of a process of another node (a monitor, a link, a wait, an
 * sx_engine_watch), handed to the remote route's watch: the route answers
 * it exactly once with sx_engine_remote_fire. Opaque. */
typedef struct sx_remote_watch sx_remote_watch;

/* The remote route: what the engine does with a PID whose node part is
 * not its own, instead of answering SX_ENOTFOUND. A cluster
 * (docs/CLUSTER.md) carries these to the node. Every function is called
 * on the calling thread (a worker, a loop, an outside caller), must not
 * block, and copies what it keeps. Each returns 0 (taken: on its way) or
 * a negative code, the operation's error (SX_ENOCONNECTION for a node
 * that is down or unknown). A NULL function: that operation on such a
 * PID is SX_ENOTFOUND, as without a route. */
typedef struct {
    /* n messages, all from one sender to one PID, in send order (a step's
     * sends to one PID come as one call: a batch to carry as one). */
    int (*send)(void *user, const sx_message *msgs, size_t n);
    /* Watch target; on 0 the route calls sx_engine_remote_fire(w) exactly
     * once: with the outcome, or an error (SX_ENOCONNECTION: the node went
     * down or the link to it was lost). On an error the engine answers w
     * itself. */
    int (*watch)(void *user, sx_pid target, sx_remote_watch *w);
    /* sx_engine_terminate of target. 0 says it was handed over. */
    int (*terminate)(void *user, sx_pid target);
    /* A cancel of target (sx_engine_cancel, the cancel command, a scope):
     * reason is the @cancel message's data (a msgpack string); target's
     * node cancels it with sx_engine_cancel, which overtakes its queued
     * messages. An ordinary message whose topic is "@cancel" goes by
     * send, in order, as it would here. */
    int (*cancel)(void *user, sx_pid target, sx_payload reason);
    /* The other half of a link that the local process `partner` made with
     * target: target's node calls sx_engine_link_from(target, partner). */
    int (*link)(void *user, sx_pid target, sx_pid partner);
    /* A submit placed elsewhere (sx_submit_opts.node/place, a spawn's
     * node option): run type.method(input) on that node; answer fn once
     * (its pid, or the error; fn may be NULL), and when w is not NULL
     * watch the new process as for watch (or answer w with the submit's
     * error). A placement that picks this node submits here. */
    int (*submit)(void *user, const sx_submit_opts *opts, const char *type,
                  const char *method, const sx_payload *input, size_t n_input,
                  sx_submit_fn fn, void *fn_user, sx_remote_watch *w);
    /* Called once when the engine is done with the route (sx_engine_free,
     * or the route replaced before start): no function of it is called
     * after; its user may go. NULL: nothing to tell. */
    void (*release)(void *user);
} sx_remote_ops;

/* Sets the remote route (ops copied; NULL: none, the default: such a PID
 * is SX_ENOTFOUND); before start only. Errors: SX_EINVAL, SX_ESTATE. */
int sx_engine_set_remote(sx_engine *e, const sx_remote_ops *ops, void *user);

/* Answers a remote watch with target's outcome r (or an error in
 * r->error, with r->error_msg saying why): monitors get @exit, links act,
 * waits answer, as for a local process. Any thread; w is gone after. */
void sx_engine_remote_fire(sx_engine *e, sx_remote_watch *w, sx_pid target,
                           const sx_result *r);

/* The half of a cross-node link that lives here: local (a process of this
 * engine) is linked to partner (a process of another node that linked to
 * it): when partner fails (or its node goes down, SX_ENOCONNECTION) local
 * is terminated, or gets @exit when it traps exits. Errors: SX_EINVAL,
 * SX_ENOTFOUND (no such local process), SX_ENOMEM. */
int sx_engine_link_from(sx_engine *e, sx_pid local, sx_pid partner);

/* Called on the sending thread (a worker, a loop, a caller) for every
 * message sent to the mailbox, in order per sender. It must not block and
 * must not call sx_engine_mailbox_free on its own mailbox, nor on another
 * whose fn may at the same time free this one (free waits for the fn of
 * the mailbox it closes to return: the two would wait for each other). */
typedef void (*sx_mailbox_fn)(void *user, const sx_message *msg);

/* Creates a mailbox: a PID that is not a process; messages sent to it (by
 * send, the send command, monitor's @exit, ...) go to fn. It does not
 * count as a live process and is not listed. Its PID's generation (the
 * upper 32 bits of id) has the top bit set and 31 random bits from
 * getrandom: another client cannot guess it, and no process PID is ever
 * a mailbox's. Errors: SX_EINVAL, SX_ESTATE (not started), SX_ESTOPPING
 * (sx_engine_stop has begun), SX_ELIMIT (max_slots, no slot free),
 * SX_ENOMEM, or -errno from getrandom. */
int sx_engine_mailbox_new(sx_engine *e, sx_mailbox_fn fn, void *user,
                          sx_pid *out_pid);
/* Closes a mailbox: sends to it fail with SX_ENOTFOUND from then on, and
 * when this returns fn is running nowhere and will never run again.
 * Monitors of the mailbox get @exit with SX_ECLOSED. [not from its fn]
 * Errors: SX_EINVAL, SX_ENOTFOUND (not a live mailbox). */
int sx_engine_mailbox_free(sx_engine *e, sx_pid pid);

/* Sends `watcher` (a process or a mailbox) one @exit message when target
 * finishes, as the monitor command does (at once if it already has; with
 * SX_ENOTFOUND in the data when target is unknown). Errors: SX_EINVAL,
 * SX_ENOTFOUND (no such watcher), SX_ENOMEM. */
int sx_engine_monitor(sx_engine *e, sx_pid watcher, sx_pid target);

/* Calls fn exactly once with target's outcome (r and its contents valid
 * only during the call): on the thread that finishes it, or on the calling
 * thread before this returns when it has finished already (its outcome is
 * still kept). fn must not block. Errors (fn is then never called):
 * SX_EINVAL, SX_ENOTFOUND (unknown PID, or outcome no longer kept),
 * SX_ENOMEM. One race is answered through fn instead: a target that
 * finishes while the watch is being set, with its outcome dropped at once
 * (a keep_outcomes far smaller than the finishing rate), gets fn called
 * with r->error SX_ENOTFOUND and watch returns 0. */
typedef void (*sx_watch_fn)(void *user, sx_pid target, const sx_result *r);
int sx_engine_watch(sx_engine *e, sx_pid target, sx_watch_fn fn, void *user);

/* ---- commands --------------------------------------------------------- */

/* One pending yield. Valid until sx_complete is called on it (exactly once,
 * from any thread). */
typedef struct sx_completer sx_completer;

/* A command handler runs on the worker right after the step that yielded.
 * It returns 0 and later (or at once) calls sx_complete exactly once, or
 * returns a negative code without calling sx_complete: the process then
 * gets an error completion with that code. args are valid only during the
 * call. */
typedef int (*sx_command_fn)(void *user, sx_engine *e, sx_pid pid, uint64_t tag,
                             sx_payload args, sx_completer *done);

/* Registers a command; before start only; ids >= 256 (lower ids are the
 * engine's). name is not copied. Errors: SX_EINVAL, SX_EEXIST, SX_ESTATE. */
int sx_engine_register_command(sx_engine *e, uint16_t id, const char *name,
                               sx_command_fn fn, void *user);

/* Whether this command runs again because its process resumed from a
 * checkpoint after a crash or a stop (SX_TYPE_CHECKPOINTED; docs/
 * DURABILITY.md): it was in flight then, so it may have run, in whole or
 * in part, before. A handler whose effect must not happen twice checks
 * what it did (an idempotency key in its arguments, say) when this is
 * true. Valid until sx_complete. */
bool sx_completer_resumed(const sx_completer *done);

/* Completes a yield: result is copied, error_msg (NULL for none) copied.
 * A completion for a process that finished is a silent no-op. */
void sx_complete(sx_completer *done, sx_payload result, int error,
                 const char *error_msg);

/* The most children one spawn-all starts. */
#define SX_SPAWN_ALL_MAX 100000

/* Built-in commands, ids below 256. Argument and result payloads are in
 * docs/COMMANDS.md; PIDs are [node, host, id] arrays or text. */
enum {
    SX_CMD_NOOP = 1,       /* args ignored; completes at once with nil       */
    SX_CMD_SEND = 2,       /* [to, topic, data] -> nil                       */
    SX_CMD_SPAWN = 3,      /* [type, method, [input...]] -> pid             */
    SX_CMD_SPAWN_WAIT = 4, /* [type, method, [input...]] -> child's result  */
    SX_CMD_TERMINATE = 5,  /* [pid] -> nil                                   */
    SX_CMD_CANCEL = 6,     /* [pid, reason] -> nil                           */
    SX_CMD_MONITOR = 7,    /* [pid] -> nil; later an @exit message          */
    SX_CMD_LINK = 8,       /* [pid] -> nil; a failure of either ends both  */
    SX_CMD_TRAP_EXIT = 9,  /* bool -> nil; link exits become @exit messages */
    /* {children: [[type, method, [input...], opts?]...], opts...} ->
     * [outcome...] in child order, every child's value or error */
    SX_CMD_SPAWN_ALL = 10,
    /* clock: on the libuv loops (a plain sleep: on the worker's own timer
     * set, docs/COMMANDS.md); deadlines are absolute and monotonic,
     * fixed when the yield is dispatched, and never fire early. */
    SX_CMD_SLEEP = 16,        /* ms -> nil (ms <= 0: at once)               */
    SX_CMD_SLEEP_UNTIL = 17,  /* ns on sx_clock_now_ns's clock -> nil       */
    SX_CMD_TIMER_START = 18,  /* ms -> timer handle (int)                   */
    SX_CMD_TIMER_WAIT = 19,   /* handle -> nil when it fires                */
    SX_CMD_TIMER_STOP = 20,   /* handle -> nil; waiters get SX_ECANCELLED   */
    SX_CMD_TIMER_RESET = 21,  /* [handle, ms] -> nil; re-armed              */
    SX_CMD_TICKER_START = 22, /* [ms, topic] -> handle; ticks as messages   */
    SX_CMD_TICKER_STOP = 23,  /* handle -> nil                              */
    /* exec: a subprocess on the libuv loop (docs/COMMANDS.md) */
    SX_CMD_EXEC = 32, /* {argv, env, cwd, stdin, ...} -> {status, ...} */
    /* fs: on libuv's thread pool; errors are -errno codes */
    SX_CMD_FS_READ = 40,   /* path or {path, offset, max} -> bin          */
    SX_CMD_FS_WRITE = 41,  /* [path, data] -> bytes written               */
    SX_CMD_FS_APPEND = 42, /* [path, data] -> bytes written               */
    SX_CMD_FS_STAT = 43,   /* path -> {size, mode, type, mtime_ns}        */
    SX_CMD_FS_LIST = 44,   /* path -> [name...]                           */
    SX_CMD_FS_REMOVE = 45, /* path -> nil                                 */
    /* net: TCP connections owned by the process */
    SX_CMD_NET_CONNECT = 56, /* [host, port] -> connection handle         */
    SX_CMD_NET_WRITE = 57,   /* [handle, data] -> nil                     */
    SX_CMD_NET_READ = 58,    /* [handle, max] or [handle, max, delim] -> bin */
    SX_CMD_NET_CLOSE = 59,   /* handle -> nil                             */
    SX_CMD_NET_HTTP = 60,    /* {method, url, headers, body} -> response  */
    SX_CMD_USER_MIN = 256
};

/* ---- authoring helpers for commands ---------------------------------- */

/* What becomes of a child when its parent ends (Temporal's parent close
 * policy; Erlang's link without trap_exit is the harsh one). */
typedef enum {
    SX_SCOPE_NONE = 0,     /* it runs on to its own end                  */
    SX_SCOPE_CANCEL = 1,   /* it gets a @cancel, "parent ended"          */
    SX_SCOPE_TERMINATE = 2 /* it is terminated                           */
} sx_scope;

/* Options of spawn, spawn-wait and spawn-all (the opts map of their args,
 * docs/COMMANDS.md). Zero is the default of each. */
typedef struct {
    /* The child's deadline (0: its type's deadline_ms, or none). */
    int64_t deadline_ms;
    int scope; /* sx_scope */
    /* spawn-wait: the parent gets a @spawned message with the child's PID
     * as soon as it runs (SX_TOPIC_SPAWNED), so it can cancel it. */
    bool notify;
    /* spawn-wait and spawn-all: a child that ends in error is spawned
     * again (init included) after a backoff, up to retry->max_restarts
     * more times (the restart policy's fields; mode SX_RESTART_NEVER: no
     * retry). NULL: none. */
    const sx_restart_policy *retry;
    /* Where the child runs, as sx_submit_opts.node and .place say (docs/
     * CLUSTER.md, "Placement"): 0 and SX_PLACE_HERE, here. A child on
     * another node is a process of that node: its parent's end reaches it
     * by scope as here; its outcome answers spawn-wait. */
    uint32_t node;
    int place;
} sx_spawn_opts;

/* Yields spawn (SX_CMD_SPAWN) or spawn-wait (SX_CMD_SPAWN_WAIT) of type
 * and method, its inputs packed from fmt (each top-level value one
 * input: "s,i" gives two; NULL or "" none) and opts (NULL: none).
 * Errors: SX_EINVAL (cmd not one of the two, type or method NULL, fmt
 * bad), those of sx_yield. */
int sx_yield_spawn(sx_step_output *out, uint16_t cmd, uint64_t tag,
                   const sx_spawn_opts *opts, const char *type,
                   const char *method, const char *fmt, ...);

/* Spawn-all's arguments, built in a pack: begin with the children's
 * count and the options every child shares, then write each child with
 * sx_spawn_all_child, then yield sx_pack_payload(pk) as SX_CMD_SPAWN_ALL.
 * Errors: pk's sticky error, SX_EINVAL (also for notify: spawn-all's
 * answer gives the children's outcomes in order instead). */
int sx_spawn_all_begin(sx_pack *pk, uint32_t n_children,
                       const sx_spawn_opts *opts);
int sx_spawn_all_child(sx_pack *pk, const char *type, const char *method,
                       const char *fmt, ...);

/* Options of any yield (sx_yield_with). */
typedef struct {
    /* Per attempt, as sx_yield_timeout's (0: none). */
    int64_t timeout_ms;
    /* A command that answers an error is run again after a backoff, up to
     * retry->max_restarts more times; the answer is the first success, or
     * the last error with "after N attempts: " before its message. Errors
     * that no retry mends are answered at once: SX_EINVAL,
     * SX_EUNKNOWN_COMMAND, SX_ECANCELLED, SX_ETERMINATED. NULL, or mode
     * SX_RESTART_NEVER: no retry. The attempts run in a helper process
     * of type "@retry", a child of this one ended with it (docs/
     * COMMANDS.md, "Retries"). */
    const sx_restart_policy *retry;
} sx_yield_opts;

/* As sx_yield with opts (NULL: as sx_yield). Errors: those of sx_yield,
 * SX_EINVAL for a retry policy sx_restart_policy_check refuses. */
int sx_yield_with(sx_step_output *out, uint16_t cmd, uint64_t tag,
                  sx_payload args, const sx_yield_opts *opts);

/* Exec's answer (docs/COMMANDS.md, exec) read into a struct. */
typedef struct {
    bool exited;     /* true: status is the exit code; false: signal    */
    int status;      /* the exit code when exited                       */
    int signal;      /* the signal that ended it when !exited           */
    sx_str out, err; /* stdout and stderr (pointing into the answer)    */
    bool truncated;  /* with truncate: either stream lost bytes         */
    uint64_t out_total, err_total; /* with truncate: bytes written       */
} sx_exec_result;

/* Reads exec's answer (a completion's data). 0, or SX_EPROTO when it is
 * not one (r zeroed). */
int sx_exec_result_get(sx_payload answer, sx_exec_result *r);

/* The monotonic clock the clock commands use, in ns (CLOCK_MONOTONIC). */
uint64_t sx_clock_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif

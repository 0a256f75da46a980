/* engine/store/store.h — the durable store behind an engine: one internal
 * interface (open, record, recover, close) with SQLite as its backend
 * (engine/store/sqlite.c), so that another backend can follow without
 * touching its callers. Internal to engine/; never installed.
 *
 * What is stored: jobs (a submitted process: its PID's id, an optional
 * idempotency key, type, method, inputs, attempt) until they finish, and
 * the outcomes of finished jobs, the last `keep_outcomes` of them; for a
 * checkpointed job, its last checkpoint and the messages stored for it.
 *
 * Writes are group-committed: sx__store_submit, sx__store_restart and
 * sx__store_finish queue
 * a record and return; the store's writer thread commits everything
 * queued in one transaction and then calls each record's done callback,
 * so that a caller acknowledges only what is on disk. A record that
 * fails (the disk is full, the database turned out corrupt) fails with
 * nothing of it stored, and so does every record of the same transaction.
 *
 * Threads: open, recover and close [caller] (one thread, not concurrently
 * with the others); submit, finish and stats [any thread]; done
 * callbacks run on the store's answering thread, in commit order, and
 * must not block on the store.
 */
#ifndef SX_ENGINE_STORE_STORE_H
#define SX_ENGINE_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stepx/process.h>

/* The schema this build writes and reads; a database of a newer one is
 * refused (SX_EVERSION), an older one migrated forward at open. */
#define SX__STORE_SCHEMA 4

typedef struct sx__store sx__store;

typedef struct {
    /* The state directory: created (mode 0700) when missing; holds the
     * database (stepx.db and its WAL) and the lock file. */
    const char *dir;
    /* synchronous=FULL (a power loss loses nothing committed) instead of
     * NORMAL (a crash of the program loses nothing; a power loss may lose
     * the last commits). */
    bool sync_full;
    /* Outcomes kept (the oldest are dropped past it); 0: 10,000. */
    uint64_t keep_outcomes;
    /* The database's largest size in bytes (0: no limit): past it a write
     * fails -ENOSPC as on a full disk. */
    uint64_t max_bytes;
} sx__store_config;

/* A job as stored. The pointers are the caller's (on submit) or the
 * store's, valid during the recover callback only. */
typedef struct {
    uint64_t id;     /* the PID's id */
    const char *key; /* idempotency key, or NULL */
    size_t key_len;
    const char *type, *method; /* NUL-terminated */
    sx_payload input;          /* the inputs: one msgpack array */
    uint32_t attempt;          /* 1 for the first run */
    /* Its restart policy as the engine packs it (empty: none). */
    sx_payload policy;
    /* Waiting for a restart (recover only): when, in wall-clock ms since
     * the epoch (0: not waiting), and the times of its restarts within
     * the policy's window (packed by the engine; empty: none). */
    int64_t restart_at;
    sx_payload restarts;
    /* A checkpointed job's last checkpoint (recover only; checkpointed
     * false: none): its step count, wait kind, state and in-flight
     * commands (packed by the engine). */
    bool checkpointed;
    uint64_t steps;
    int want;
    sx_payload state, inflight;
} sx__store_job;

/* A message stored for a checkpointed job (a checkpoint's sends,
 * sx__store_message): until a checkpoint of that job says it consumed
 * it, or the job ends. Its bytes are copied by the call. seq is the
 * store's, written by the call that queues it, under the store's lock:
 * seqs rise in the order records are queued, so a sender's messages to
 * one job have rising seqs, and the messages read back at a start come
 * in seq order. A message to a job whose row is gone (it ended while the
 * message was on its way) is not kept; its record is still answered 0. */
typedef struct sx__store_msg {
    uint64_t to; /* the addressee job's id */
    sx_pid from;
    const char *topic; /* topic_len bytes (no NUL needed) */
    size_t topic_len;
    sx_payload data;
    uint64_t seq;
} sx__store_msg;

/* A checkpoint: everything about a job after one of its steps, written in
 * one transaction: its state, step count and wait kind, the commands in
 * flight (packed by the engine), the seqs of the stored messages it
 * consumed since its last checkpoint (their rows go), and the messages
 * the step sent to checkpointed jobs. */
typedef struct {
    uint64_t id, steps;
    int want;
    sx_payload state, inflight;
    const uint64_t *consumed; /* n_consumed seqs */
    size_t n_consumed;
    sx__store_msg *msgs; /* seqs written by sx__store_checkpoint */
    size_t n_msgs;
} sx__store_ckpt;

/* A kept outcome, as sx__store_recover hands it over. */
typedef struct {
    uint64_t id;
    int error;
    const char *msg; /* NULL when none */
    sx_payload value;
    uint64_t steps;
    uint32_t attempts;
} sx__store_outcome;

/* The answer to a queued record: rc 0 once committed, or a negative code
 * with nothing of the record stored (-ENOSPC, SX_ECORRUPT, -EIO, ...).
 * For a submit with a key already stored, rc is SX_EEXIST and id the
 * stored job's id (the new one was not stored). */
typedef void (*sx__store_done_fn)(void *user, int rc, uint64_t id);

/* Opens (or creates) the store in cfg->dir. On failure returns the code
 * and writes a message saying what and where into msg (cap bytes):
 *   -EBUSY        another process holds the directory's lock (a second
 *                 daemon on the same directory);
 *   SX_ECORRUPT   the database is damaged or is not a stepx database;
 *   SX_EVERSION   it was written by a newer stepx (schema newer than
 *                 SX__STORE_SCHEMA);
 *   -EROFS        it (or its directory) cannot be written;
 *   -ENOSPC       no room to create or migrate it;
 *   other -errno  the directory cannot be created or opened.
 * Nothing is overwritten or half-written on any failure. */
int sx__store_open(const sx__store_config *cfg, sx__store **out, char *msg,
                   size_t cap);

/* Commits what is queued and answers it, stops the writer and closes the
 * database and the lock; the struct stays: later records are SX_ESTATE,
 * stats still read. Runs once (a second call returns at once). */
void sx__store_shutdown(sx__store *s);
/* sx__store_shutdown if not done yet, then frees s. */
void sx__store_close(sx__store *s);

/* Queues a job; done answers it (above). 0, or SX_ESTATE once closing,
 * SX_ENOMEM (then done is never called). The job's bytes are copied. */
int sx__store_submit(sx__store *s, const sx__store_job *job,
                     sx__store_done_fn done, void *user);

/* Queues a job's outcome: in one transaction with it, the job is removed
 * (with its checkpoint and stored messages) and the outcome kept (the oldest
 * past keep_outcomes dropped). done may be NULL. 0, SX_ESTATE or SX_ENOMEM as
 * for submit. */
int sx__store_finish(sx__store *s, uint64_t id, int error, const char *msg,
                     sx_payload value, uint64_t steps, uint32_t attempts,
                     sx__store_done_fn done, void *user);

/* Queues a checkpoint (above); done answers it as for a submit. The
 * previous checkpoint of the job is replaced. 0, SX_EINVAL, SX_ESTATE or
 * SX_ENOMEM (then done is never called). */
int sx__store_checkpoint(sx__store *s, sx__store_ckpt *ck,
                         sx__store_done_fn done, void *user);

/* Queues one message for a checkpointed job (m->seq written); done
 * answers it. Errors as sx__store_checkpoint. */
int sx__store_message(sx__store *s, sx__store_msg *m, sx__store_done_fn done,
                      void *user);

/* sx__store_finish with, in the same transaction, the messages the job's
 * last step sent to checkpointed jobs (seqs written as by
 * sx__store_checkpoint). */
int sx__store_finish_msgs(sx__store *s, uint64_t id, int error, const char *msg,
                          sx_payload value, uint64_t steps, uint32_t attempts,
                          sx__store_msg *msgs, size_t n_msgs,
                          sx__store_done_fn done, void *user);

/* [caller, before any submit] Counts a new attempt for every stored job
 * that has no outcome (they are about to run again; committed first),
 * but one waiting for its restart (its next attempt is counted when it
 * runs) and one with a checkpoint (it resumes: the same attempt), then calls
 * job for each of them (in id order, with that attempt), then outcome for every
 * kept outcome (oldest first). A callback's non-zero return stops the walk and
 * is returned. */
int sx__store_recover(sx__store *s,
                      int (*job)(void *user, const sx__store_job *j),
                      int (*outcome)(void *user, const sx__store_outcome *o),
                      void *user);
/* [caller, before any submit, after recover] Calls msg for every stored
 * message (in seq order). A non-zero return stops the walk and is
 * returned. */
int sx__store_messages(sx__store *s,
                       int (*msg)(void *user, const sx__store_msg *m),
                       void *user);

/* Queues a job's restart (its checkpoint and stored messages go: the
 * next attempt starts from init, with an empty mailbox): the attempt
 * that ended, when the next one is
 * due (wall-clock ms; 0 once it runs) and the restart times (packed by
 * the engine). No answer: a crash before it is committed runs the job
 * again at once rather than after its backoff. 0, SX_ESTATE or
 * SX_ENOMEM. */
int sx__store_restart(sx__store *s, uint64_t id, uint32_t attempt,
                      int64_t restart_at, sx_payload restarts);

/* [caller, before any submit] The engine's numbers kept with the jobs
 * (the PIDs' host part, the generation range of the last run): get
 * answers 0 and *value, or SX_ENOTFOUND for a name never set; set
 * commits at once. Errors: SX_ESTATE (a record was queued already), or
 * the store's codes (-ENOSPC, SX_ECORRUPT, -EIO, ...). */
int sx__store_meta_get(sx__store *s, const char *name, int64_t *value);
int sx__store_meta_set(sx__store *s, const char *name, int64_t value);

/* Whether the calling thread is one of a store's own (the writer, the
 * answering thread, where the answers' callbacks run): a call that waits
 * for a store's answer must not be made there. */
bool sx__store_on_thread(void);

typedef struct {
    uint64_t commits; /* transactions committed */
    uint64_t records; /* records in them */
    uint64_t failed;  /* records answered with an error */
} sx__store_stats;

void sx__store_stats_get(sx__store *s, sx__store_stats *out);

#endif

/* engine/core/job.h — a job: a submitted process that the engine keeps
 * more about than its slot holds, because it is stored (engine/core/
 * durable.c) or supervised (engine/core/supervise.c). Internal to engine/;
 * never installed.
 *
 * A process is a job when p->job is set; its sx__pext's job points here.
 * The job belongs to the process: written by whoever runs or restarts it
 * (one at a time: the worker running a step, the finishing worker, the
 * supervisor thread during a restart), read under a reference by cancel
 * and terminate (the atomic fields), freed with the slot (ptable.c).
 */
#ifndef SX_ENGINE_CORE_JOB_H
#define SX_ENGINE_CORE_JOB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <stepx/engine.h>

#include "engine/core/proc.h"

/* A checkpointed job's bookkeeping (engine/core/checkpoint.c). */
typedef struct sx__ckpt sx__ckpt;

typedef struct sx__job {
    uint64_t id;      /* the PID's id, which stays across restarts */
    uint32_t attempt; /* 1, then one more per restart or run after a crash */
    bool stored;      /* in the state store */
    /* Supervision (mode SX_RESTART_NEVER: none), with defaults filled. */
    sx_restart_policy policy;
    /* For restarts: the method (interned in the type, or a copy) and the
     * inputs as one msgpack array (owned). */
    const char *method;
    uint8_t *input;
    size_t input_len;
    /* Restart times within the window (monotonic ms), a ring of
     * policy.max_restarts entries (owned). */
    uint64_t *times;
    uint32_t n_times, head;
    uint64_t started_ms; /* when the current attempt started */
    uint32_t backoff_ms; /* the last backoff, 0 before the first */
    /* The submit's deadline, armed again at each restart (0: the type's;
     * not stored: a run after a crash has the type's). */
    int64_t deadline_ms;
    /* A cancel or terminate reached it: its end is final. relaxed: a flag
     * read by its own finish, which a cancel reaches only through the
     * process's state word (release/acquire) anyway. */
    _Atomic bool ended_by_request;
    /* Under the supervisor's mutex: waiting for its restart, and when. */
    bool waiting;
    uint64_t due_ms;
    char last_error[96];
    /* A checkpointed job's (made at its first checkpoint), else NULL;
     * written by whoever runs the process, as the fields above. */
    sx__ckpt *ck;
    sx__proc *p;
    struct sx__job *next; /* the supervisor's list (its mutex) */
} sx__job;

/* The monotonic clock in ms: restarts' times and due times. */
static inline uint64_t sx__mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Wall-clock ms since the epoch minus sx__mono_ms: what turns a time of
 * this run into one the store keeps for a later run, and back. */
static inline int64_t sx__wall_offset_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t wall = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    return wall - (int64_t)sx__mono_ms();
}

/* The job of p (p->job set). */
static inline sx__job *sx__job_of(sx_engine *e, const sx__proc *p)
{
    return sx__ptable_pext(e, p)->job;
}

/* engine/core/durable.c: makes p the process of job j (before it is
 * first queued). */
void sx__job_attach(sx_engine *e, sx__proc *p, sx__job *j, bool stored);

/* engine/core/supervise.c */
/* A new job for process pid id (attempt 1, policy normalized; NULL
 * policy or mode NEVER: not supervised), with copies of what a restart
 * needs (the method, and the inputs packed as one msgpack array). NULL
 * when out of memory. */
sx__job *sx__job_new(uint64_t id, const sx_restart_policy *policy,
                     const char *method, sx_payload inputs);
/* Splits inputs packed as one msgpack array into payloads (pointing into
 * packed): *out is malloc'd, the caller's. SX_ECORRUPT when it is not
 * such an array, SX_ENOMEM. */
int sx__inputs_split(sx_payload packed, sx_payload **out, size_t *n);
void sx__job_free(sx__job *j);
/* [the finishing worker] Whether p's end (error) restarts it; if so the
 * restart is scheduled (its generation moves on, the supervisor waits out
 * the backoff) and true is returned. Past the limit, *error and *msg
 * (into buf) become SX_ERESTART_LIMIT's and false is returned. */
bool sx__job_restart_maybe(sx_engine *e, sx__proc *p, sx__job *j, int *error,
                           const char **msg, char *buf, size_t cap);
/* Marks pid's job (if it is one) as ended by a cancel or terminate, and
 * ends it at once when it is waiting for a restart (with error and msg).
 * Returns 1 when it ended a waiting job, else 0. */
int sx__job_request_end(sx_engine *e, sx_pid pid, int error, const char *msg);
/* Adds j (its due_ms set) to the jobs waiting for a restart, starting the
 * supervisor thread when it is the first. */
void sx__sup_add(sx_engine *e, sx__job *j);
/* A policy as the store keeps it: packed into buf (0 when it does not
 * fit), and read back (SX_ECORRUPT when it is not one). */
size_t sx__policy_pack(const sx_restart_policy *p, uint8_t *buf, size_t cap);
int sx__policy_unpack(sx_payload b, sx_restart_policy *p);
/* Fills j's restart times from what the store kept (wall-clock ms). */
void sx__restarts_unpack(sx__job *j, sx_payload b);
/* [stop] Ends every job waiting for a restart (its stop path). */
void sx__sup_end_all(sx_engine *e);
/* [stop, after the workers] Stops the supervisor thread. */
void sx__sup_stop(sx_engine *e);
/* How many jobs wait for a restart now. */
uint64_t sx__sup_waiting(sx_engine *e);
/* Appends the jobs waiting for a restart to a listing (up to cap). */
size_t sx__sup_list(sx_engine *e, sx_process_info *out, size_t cap);
/* [any thread, with p's job known] The final end of a job that is not
 * running (its init failed at a restart, or it was waiting): its outcome
 * as any job's finish gives it, without close. */
void sx__job_end(sx_engine *e, sx__proc *p, int error, const char *msg);

/* What a store's failure code means for a request (submit.c). */
const char *sx__storage_msg(int rc);

/* engine/core/checkpoint.c */
void sx__ckpt_free(sx__ckpt *ck);
/* Forgets what was in flight (a restart runs init again). */
void sx__ckpt_reset(sx__ckpt *ck);
/* [the worker, after p's step, before its nodes are freed] Notes what the
 * step consumed (the nodes of its batch): its stored messages and its
 * commands' answers. */
void sx__ckpt_consumed(sx_engine *e, sx__proc *p, sx__ev *const *nodes,
                       size_t n_nodes);
/* [the worker, after a step of p that did not end it, which wants `want`
 * next] Checkpoints p when it is a checkpointed job: 1 when the store now
 * has it (the caller lets go of p at once: the store's answer dispatches
 * the step's output and queues it), 0 when p is not one (dispatch as
 * usual), or a negative code to end p with (nothing was dispatched). */
int sx__ckpt_park(sx_engine *e, sx__proc *p, const sx_step_output *out,
                  uint8_t want);
/* Whether p is a checkpointed job whose checkpoint failed, and with
 * what (sx__finish_terminated ends it so). */
bool sx__ckpt_failed(sx_engine *e, sx__proc *p, int *err, const char **msg);
/* [start's caller, p held, its job attached] Gives p a checkpoint's
 * state, step count, wait kind and commands in flight. 0, or a code with
 * a message in msg (p is then not resumed). */
int sx__ckpt_restore(sx_engine *e, sx__proc *p, uint64_t steps, int want,
                     sx_payload state, sx_payload inflight, char *msg,
                     size_t cap);
/* [start's caller, before p is queued] When p resumed from a checkpoint
 * (sx__ckpt_restore), marks it to dispatch again, when a worker first
 * takes it, the commands its checkpoint had in flight (sleeps due when
 * they were); any other p is left as it is. */
void sx__ckpt_rearm(sx_engine *e, sx__proc *p);
/* [the worker that took p with SX__F_CKPT] Sends the output of p's stored
 * checkpoint, or dispatches again what a resumed p had in flight. 0, or
 * SX_ENOMEM (p then ends so). */
int sx__ckpt_resume(sx_engine *e, sx__proc *p);
struct sx__store_msg;
/* A checkpointed job's last step's messages, held for its finish. */
typedef struct sx__ckpt_sends sx__ckpt_sends;
/* [the worker, after p's step that ended it (DONE or FAIL)] When p is a
 * checkpointed job, holds the step's messages for its finish and returns
 * true (the caller does not send them); false: send them as usual. */
bool sx__ckpt_final(sx_engine *e, sx__proc *p, const sx_step_output *out);
/* [the finishing worker] Takes what sx__ckpt_final held (NULL: nothing),
 * with the messages to store with the outcome (their seqs written by the
 * store). */
sx__ckpt_sends *sx__ckpt_final_take(sx_engine *e, sx__proc *p,
                                    struct sx__store_msg **msgs,
                                    size_t *n_msgs);
/* Delivers them (from `from`; stored: with their seqs) and frees them. */
void sx__ckpt_final_send(sx_engine *e, sx_pid from, sx__ckpt_sends *sends,
                         bool stored);
/* Frees them undelivered (the job runs its last step again later). */
void sx__ckpt_final_drop(sx__ckpt_sends *sends);
/* [any thread] Whether `to` is a checkpointed job of e (messages to it are
 * stored). */
bool sx__ckpt_stored_target(sx_engine *e, sx_pid to);
/* [start's caller] Delivers a message read back from the store. */
int sx__ckpt_deliver_stored(sx_engine *e, const struct sx__store_msg *m);
/* [any thread] A message from outside to `to`: when it is a checkpointed
 * job, stored first, then delivered, then fn(user, rc) on the store's
 * thread (rc: the delivery's, or SX_ESTORAGE) and 1 is returned; 0 when
 * it is not one (the caller delivers it), or an error (fn never called). */
int sx__ckpt_send(sx_engine *e, sx_pid from, sx_pid to, const char *topic,
                  sx_payload data, void (*fn)(void *user, int rc), void *user);

#endif

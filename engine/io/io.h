/* engine/io/io.h — libuv loop threads and the operations they run for
 * commands (clock, exec, fs, net) and per-yield deadlines. Internal.
 *
 * The picture (docs/COMMANDS.md, "How the libuv commands
 * run"):
 *
 *  worker thread                          loop thread (one of io_loops)
 *  -------------                          -----------------------------
 *  handler parses args, builds an op  ->  request queue (Vyukov MPSC) +
 *  sx__io_submit: push START, ring        uv_async_send doorbell; the async
 *  the doorbell                           callback drains the queue until
 *                                         it is empty (rings coalesce)
 *                                         op->vt->start(op) on the loop;
 *                                         libuv callbacks; sx__io_answer
 *                                         -> sx_complete -> the process
 *
 * Every op belongs to one process and lives on that process's loop
 * (index % io_loops), so all of a process's ops and handles are touched by
 * one thread only. The loop keeps them on two intrusive lists: per process
 * (head in the slot's sx__pext.io_head, for cancel-on-finish and handle
 * look-up) and loop-wide (for shutdown). When a process that sent a
 * command to a loop (sx__proc.io) finishes with ops or handles still alive
 * (sx__pext.io_live > 0), sx__finish posts CANCEL_PROC and the
 * loop calls every such op's cancel: timers stop, subprocesses get
 * SIGTERM (then SIGKILL), requests are cancelled or their results dropped,
 * sockets close. The op still ends normally; its answer is a no-op because
 * the process is gone. Out of memory for the CANCEL_PROC, the loop's own
 * SWEEP request does the same for every finished process (loop.c).
 *
 * A yield with a timeout gets a deadline (sx__iodl): a loop timer and a
 * claim word shared with the completer. Whoever claims first answers: the
 * command's own completion, or the timer with SX_ETIMEDOUT (which then
 * cancels the op the deadline guards, if it is an io op). See deadline.c.
 *
 * Threads: functions are [loop] (the op's loop thread) unless marked.
 */
#ifndef SX_ENGINE_IO_H
#define SX_ENGINE_IO_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "engine/core/core.h"
#include "engine/timer/heap.h"

typedef struct sx__ioloop sx__ioloop;
typedef struct sx__ioop sx__ioop;
typedef struct sx__iodl sx__iodl;

/* A request on a loop's queue. */
typedef enum {
    SX__IOREQ_START = 1, /* sx__ioop: start it                     */
    SX__IOREQ_CANCEL,    /* sx__iocancel: a process finished       */
    SX__IOREQ_DL_START,  /* sx__iodl: arm the deadline             */
    SX__IOREQ_DL_STOP,   /* sx__iodl: answered first; disarm       */
    SX__IOREQ_QUIT,      /* the engine stops: cancel all, then exit */
    SX__IOREQ_SWEEP      /* the loop's own: a CANCEL could not be made */
} sx__ioreq_kind;

typedef struct {
    sx__mpsc_node node; /* first */
    uint8_t kind;       /* sx__ioreq_kind */
} sx__ioreq;

typedef struct {
    const char *name;
    /* [loop] Starts the op. It later ends with sx__io_answer (if it has a
     * completer) and sx__io_release, possibly from inside start. */
    void (*start)(sx__ioop *op);
    /* [loop] The owner finished, the yield's deadline passed, or the
     * engine stops: stop the work as soon as possible (stop timers, kill
     * subprocesses, cancel requests, close handles). The op still answers
     * and releases itself; its answer is then dropped. Called at most
     * once, only after start. NULL: nothing to stop (the op ends soon by
     * itself). */
    void (*cancel)(sx__ioop *op);
    /* [loop] Frees what the op owns besides its own block; NULL = none. */
    void (*fini)(sx__ioop *op);
} sx__ioop_vt;

/* An op (one yield's work) or a handle (a timer, ticker or connection
 * that outlives the yield that made it: done == NULL). Families embed it
 * first in their own struct. */
struct sx__ioop {
    sx__ioreq req; /* first: the START request */
    const sx__ioop_vt *vt;
    sx_engine *engine;
    sx__ioloop *loop;
    sx__proc *proc; /* the owner (type-stable slot) and its generation */
    uint32_t gen;
    bool started;       /* [loop] */
    bool cancelled;     /* [loop] cancel was called (or asked before start) */
    bool released;      /* [loop] */
    sx_completer *done; /* the yield's completer; NULL once answered */
    sx__iodl *dl;       /* the yield's deadline, or NULL */
    uint64_t handle;    /* handles: the id the process uses; else 0 */
    sx__ioop *pprev, *pnext; /* the owner's list [loop] */
    sx__ioop *aprev, *anext; /* the loop's list [loop] */
};

/* A per-yield deadline. refs: one for the loop (dropped when its timer has
 * closed), one for the completer side (dropped when the yield is answered
 * or found claimed). */
struct sx__iodl {
    sx__ioop op;          /* in the owner's list; op.req = DL_START */
    sx__ioreq stop;       /* DL_STOP */
    _Atomic int claimed;  /* 0 open; 1 answered (by whoever set it) */
    _Atomic int refs;     /* see above */
    uint64_t deadline_ns; /* absolute, monotonic (sx_clock_now_ns) */
    uint64_t tag;
    sx__iotimer timer;
    bool closing;     /* [loop] */
    sx__ioop *target; /* [loop] the io op this yield started, if any */
    sx__ev *tev;      /* owned: the SX_ETIMEDOUT answer, made up front
                         so that a timeout can always answer */
};

/* [worker] Allocates an op of `size` bytes (zeroed; size >= sizeof
 * sx__ioop) answering `done`, for the process done belongs to. NULL when
 * out of memory. */
sx__ioop *sx__io_op_new(size_t size, const sx__ioop_vt *vt, sx_completer *done);
/* [worker] Hands op to its loop (ownership passes to the loop). */
void sx__io_submit(sx__ioop *op);
/* [loop] Makes a handle (done == NULL) owned by op's process, on op's
 * loop, linked and counted; its id is set. NULL when out of memory. */
sx__ioop *sx__io_handle_new(sx__ioop *op, size_t size, const sx__ioop_vt *vt);
/* [loop] The live handle `id` of op's process, or NULL. */
sx__ioop *sx__io_handle_find(sx__ioop *op, uint64_t id);
/* [loop] Answers op's yield once (later calls do nothing). */
void sx__io_answer(sx__ioop *op, sx_payload result, int error, const char *msg);
/* [loop] Releases op, then answers its yield: the owner never sees the
 * answer while the op still counts as alive (so finishing right after it
 * costs no cancel request). result must not point into the op. */
void sx__io_finish(sx__ioop *op, sx_payload result, int error, const char *msg);
/* [loop] Arms t to fire at due_ns (re-arms if armed): 0, or SX_ENOMEM
 * (t is then not armed). _del disarms it. The callback runs on the loop,
 * never before due_ns. */
int sx__io_timer_set(sx__ioop *op, sx__iotimer *t, uint64_t due_ns);
void sx__io_timer_del(sx__ioop *op, sx__iotimer *t);
/* [loop] Unlinks and frees op (answering SX_ECANCELLED first if it was
 * never answered). op must hold no open libuv handle. */
void sx__io_release(sx__ioop *op);
/* [loop] Cancels op (or handle): calls vt->cancel once. */
void sx__io_cancel(sx__ioop *op);
/* [loop] True when the loop is shutting down (cancel may be harsher). */
bool sx__io_quitting(const sx__ioop *op);
uv_loop_t *sx__io_uv(const sx__ioop *op);
/* [loop] The owner's PID. */
sx_pid sx__io_pid(const sx__ioop *op);

/* The engine's life cycle [caller]: start and stop call these. */
int sx__io_start(sx_engine *e);
/* Cancels everything still running and joins the loop threads. */
void sx__io_stop(sx_engine *e);
/* [worker] A process with ops or handles finished: cancel them. */
void sx__io_proc_finished(sx_engine *e, sx__proc *p, uint32_t gen);
/* [worker] Arms a deadline for a yield about to be dispatched; sets
 * done's deadline. SX_ENOMEM when it cannot. */
int sx__io_deadline(sx_engine *e, sx_completer *done, int64_t timeout_ms);
/* [any thread] Called by sx_complete for a completer with a deadline:
 * true when this completion is the answer (then it goes ahead), false
 * when the deadline answered first (the completion is dropped). */
bool sx__io_dl_claim(sx__iodl *dl);
/* [any thread] The completer side (of engine e) is done with dl; after
 * sx_engine_stop too (a late answer), before sx_engine_free. */
void sx__io_dl_done(sx_engine *e, sx__iodl *dl, bool answered);

/* ---- argument helpers for handlers [worker] ---- */

/* Absolute monotonic ns. */
uint64_t sx__now_ns(void);
/* [loop] A libuv timeout (ms) that fires at deadline_ns, never before. */
uint64_t sx__io_ms_until(const sx__ioop *op, uint64_t deadline_ns);

/* ---- inside engine/io/ (loop.c, ops.c, deadline.c); the families do not
 * use these ---- */

/* One loop: its thread, its libuv loop and what it keeps. Fields are
 * [loop] (touched by its thread only) unless said otherwise. */
struct sx__ioloop {
    sx_engine *engine;
    unsigned id;
    pthread_t thread;
    bool thread_started;
    uv_loop_t uv;
    uv_async_t bell; /* the doorbell: uv_async_send from any thread */
    sx__mpsc q;      /* requests; consumer: this loop's thread */
    /* [loop] every op and handle alive on this loop */
    sx__ioop *all;
    size_t n_all;
    uint64_t next_handle;
    bool quitting, bell_closed;
    unsigned walking; /* list walks in progress: releases are deferred */
    sx__ioop *grave;  /* released during a walk, freed after it */
    sx__ioreq quit;   /* the QUIT request */
    /* The SWEEP request, posted by a finishing worker that could not
     * allocate its CANCEL (sx__io_proc_finished), and whether it is on
     * the queue (then later finishers only leave their io_dead_gen). */
    sx__ioreq sweep;
    _Atomic int sweep_queued;
    /* The deadline heap (engine/timer/heap.h) and the one uv timer behind
     * it, armed for tick_due (UINT64_MAX: stopped). */
    sx__theap heap;
    uv_timer_t tick;
    uint64_t tick_due;
};

/* [any thread] The loop of p's commands: one per process, by slot index. */
static inline sx__ioloop *sx__io_loop_of(sx_engine *e, sx__proc *p)
{
    return &e->loops[p->index % e->n_loops];
}

/* [any thread] Queues r on l and rings its doorbell. Inline: every op,
 * deadline and cancel goes through it. */
static inline void sx__io_post(sx__ioloop *l, sx__ioreq *r)
{
    sx__mpsc_push(&l->q, &r->node);
    /* uv_async_send is safe from any thread; a call while a ring is still
     * pending coalesces with it, and libuv runs the callback at least once
     * after this call, so the request is seen. */
    uv_async_send(&l->bell);
}

/* loop.c */
/* Closes the loop's own handles once it quits and holds no op. */
void sx__io_maybe_exit(sx__ioloop *l);
/* True when op's process has finished (its generation moved on, or a
 * SWEEP marked it: io_dead_gen). */
bool sx__io_op_dead(sx__ioloop *l, const sx__ioop *op);

/* ops.c */
/* Puts op on its process's list and l's, counted; _unlink takes it off. */
void sx__io_link(sx__ioloop *l, sx__ioop *op);
void sx__io_unlink(sx__ioloop *l, sx__ioop *op);
/* Runs op's fini and frees it. */
void sx__io_op_free(sx__ioop *op);
/* Around a walk of a list that may cancel ops: a release during the walk
 * puts the op in l's grave, freed when the last walk ends. */
void sx__io_walk_begin(sx__ioloop *l);
void sx__io_walk_end(sx__ioloop *l);

/* deadline.c */
/* A DL_START request: arms dl's timer, unless it was claimed already. */
void sx__io_dl_start(sx__ioloop *l, sx__iodl *dl);
/* A DL_STOP request: the yield was answered; closes dl and drops the
 * completer's reference. */
void sx__io_dl_stop(sx__iodl *dl);
/* After the loop thread is gone: drops what a DL_STOP carries. */
void sx__io_dl_stop_unref(sx__iodl *dl);

#endif

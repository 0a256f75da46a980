/* docs/models/state.pml -- SPIN model of the per-process state word
 * (engine/sched/turn.c: run_turn; engine/sched/worker.c: sx__deliver; engine/core/dispatch.c: the
 * same-worker completion fast path; process/mailbox.c: push, pop, find;
 * docs/SCHEDULER.md section 2).
 *
 * One process, NW workers that take it from a run queue, NCOMP completer
 * threads that answer its asynchronous yields, and one outside thread that
 * sends it NMSG messages, all racing with the worker that runs its step.
 *
 * The state word: READY / RUNNING / BLOCKED / IDLE / COMPLETE in bits 0-2,
 * WAKE (an event arrived) and WAKE_MSG (it was a message). A producer
 * first tries the hand-off: if the state is exactly BLOCKED (or IDLE and
 * this is a message) with no flag, one CAS to READY, and the winner
 * queues the event, then the process. Otherwise producers push the event;
 * if the state is then exactly BLOCKED (or IDLE and a message) with no
 * flag, they try one CAS to READY (the fast path);
 * otherwise they fetch_or the flags, and if the old state was BLOCKED (or
 * IDLE and this is a message) race with a CAS to READY; the winner queues
 * the process. The worker takes it with CAS READY -> RUNNING, collects up to T
 * events, runs the step (skipped when woken with nothing to collect),
 * checks the mailbox for a backlog, loads the state word and decides:
 * again (CAS -> RUNNING, clearing the flags), turn used up (CAS -> READY,
 * to the back of the global queue), or park it (CAS -> BLOCKED / IDLE,
 * which fails and re-decides when a flag flipped since the load).
 *
 * The step is nondeterministic within a budget of STEPS steps: yield an
 * asynchronous command (answered later by a completer thread: BLOCKED),
 * yield a synchronous one (answered during dispatch on this worker by the
 * fast path, which pushes without touching the state word: BLOCKED), WAIT
 * (BLOCKED), IDLE, CONTINUE (READY), or finish (COMPLETE).
 *
 * The mailbox keeps the one property of Vyukov's MPSC queue that matters
 * here: a push is two steps (exchange head, then link), and the consumer
 * cannot pop past a half-done push -- nor return the node before one
 * (sx__mpsc_pop needs the successor linked). sx__mpsc_find (backlog) walks
 * up to the head it read, waiting for half-done pushes on the way, and
 * tests a node only once pop could take it (the push after it linked,
 * unless it is the head the walk read).
 *
 * Properties, checked in every interleaving:
 *  - at most one runner: the CAS READY -> RUNNING asserts nobody runs it
 *    and it is in no queue;
 *  - at most one queue entry: every enqueue asserts the process is in no
 *    queue and not running;
 *  - no lost wake-up: the run is bounded, so every execution ends
 *    quiescent (producers done, queue empty, no worker holding it). The
 *    monitor then asserts the process is BLOCKED, IDLE or COMPLETE (never
 *    READY or RUNNING with nobody to run it), that a BLOCKED process has
 *    no event queued, and an IDLE one no message queued: every delivered
 *    event that should wake the process was consumed by a step. (An IDLE
 *    process leaves completions queued by design: only a message wakes it.
 *    A COMPLETE process's leftovers are freed with its slot.)
 * Any other end state (a thread stuck where it may not stop) is an invalid
 * end state, which SPIN reports too.
 *
 * Left out: TERM and the control stack (a TERM-flagged process is finished
 * at the worker's next look at the state word; control events set WAKE_MSG
 * like a message), and the run queues' own mechanics (park.pml covers
 * them): here one counter stands for "queued somewhere".
 *
 * SPIN explores sequentially consistent interleavings; the real code's
 * fetch_or / CAS on one word are totally ordered anyway (one location),
 * and the release/acquire pairs named in worker.c and turn.c make the pushes visible
 * to whoever's CAS follows the fetch_or.
 *
 * Size: with the defaults below (2 workers, 1 completer, 1 message, up to 2
 * asynchronous and 1 synchronous yield, 3 steps, throughput 2) the full
 * search stores about 12.3 million states (-DCOLLAPSE: ~15 s, ~700 MB). The
 * step and other moves that touch only the runner's own fields are single
 * atomic moves, and dead locals are reset, to keep it there; a second
 * completer (-DNCOMP=2) multiplies it by about 8.
 *
 * Negative controls (each must make SPIN report an error):
 *   -DNO_RECHECK   the worker parks the process with a plain store instead
 *                  of the CAS (engine/sched/turn.c SX_NEGATIVE_CONTROL_NO_RECHECK):
 *                  a flag set between its load and the store is lost
 *   -DNO_BACKLOG   the worker skips the mailbox walk before parking: the
 *                  fast path's flagless push (or an event behind a
 *                  half-done push) is stranded
 *   -DPLAIN_WAKE   producers move BLOCKED/IDLE to READY with a plain store
 *                  instead of a CAS: two of them queue the process twice
 *   -DHAND_QUEUE_FIRST  the hand-off queues the process before its event:
 *                  a worker runs it, finds nothing and parks it, and the
 *                  event is stranded
 */

#ifndef NW
#define NW 2             /* workers */
#endif
#ifndef NCOMP
#define NCOMP 1          /* completer threads for asynchronous yields */
#endif
#ifndef NMSG
#define NMSG 1           /* messages the outside thread sends */
#endif
#ifndef NASYNC
#define NASYNC 2         /* asynchronous yields the process may make */
#endif
#ifndef NSYNC
#define NSYNC 1          /* synchronous (fast path) yields it may make */
#endif
#ifndef STEPS
#define STEPS 3          /* steps that may do something other than stop */
#endif
#ifndef T
#define T 2              /* throughput: events per step, turns per run */
#endif
#define QMAX (NASYNC + NSYNC + NMSG)

/* the state word */
#define READY    1
#define RUNNING  2
#define BLOCKED  3
#define IDLE     4
#define COMPLETE 5
#define SMASK    7
#define WAKE     8
#define WAKE_MSG 16

/* event kinds */
#define KCOMP 1
#define KMSG  2

byte state = READY;      /* submitted: READY and queued */
byte inq = 1;            /* run-queue entries for the process */
byte runners = 0;        /* threads between CAS -> RUNNING and letting go */
byte busy = 0;           /* workers holding a dequeued entry */

/* the mailbox: slots in exchange order; ml[i] once the push is linked */
byte mk[QMAX];
bit  ml[QMAX];
byte mh = 0;             /* next slot the consumer pops */
byte mt = 0;             /* the head: slots handed out to pushes */

/* the process's own fields, owned by its runner */
byte steps = 0;
byte n_async = 0;
byte n_sync = 0;
bit  stepped = 0;
byte wait_kind = 0;

/* the outside world */
byte issued = 0;         /* asynchronous yields not yet taken by a completer */
byte inflight = 0;       /* completers between taking one and delivering it */
byte sent = 0;           /* messages fully delivered */

inline enqueue() {
  atomic { assert(inq == 0 && runners == 0); inq++ }
}

/* sx__mpsc_push: exchange head, then link (the half-done window between). */
inline push(kind) {
  atomic { slot = mt; mt++; mk[slot] = kind };
  ml[slot] = 1
}

/* sx__deliver: the hand-off (hand_off in worker.c), then the push and
 * wake_after_push. */
inline deliver(kind) {
  /* The hand-off: exactly BLOCKED (or IDLE and a message), no flag: one
   * CAS to READY before the event is queued. The winner owns the process
   * until it queues it: an empty mailbox takes the event at the
   * consumer's end (sx__mpsc_unpop_chain), a busy one by a push, whose
   * half-done window no consumer can see (none runs the process until it
   * is queued): one move either way. Then the process is queued. The
   * relaxed load and the CAS are one move here: the CAS checks the exact
   * state again, so a split pair can only add the case "the load saw it
   * waiting, the CAS did not", the same as the CAS alone seeing it not
   * waiting. */
  atomic {                                   /* CAS -> READY, acq_rel */
    ok = 0;
    if
    :: state == BLOCKED || (state == IDLE && kind == KMSG) ->
       state = READY; ok = 1
    :: else -> skip
    fi
  };
  if
  :: ok ->
#ifdef HAND_QUEUE_FIRST
     enqueue();
#endif
     atomic { slot = mt; mt++; mk[slot] = kind; ml[slot] = 1 };
#ifndef HAND_QUEUE_FIRST
     enqueue();
#endif
     goto delivered
  :: else -> skip
  fi;
  push(kind);
  /* Fast path: exactly BLOCKED (or IDLE and a message), no flag: one CAS
   * to READY. The relaxed load and the CAS are separate steps. */
  cur = state;
  ok = 0;
  if
  :: cur == BLOCKED || (cur == IDLE && kind == KMSG) ->
     atomic {                                /* CAS cur -> READY, acq_rel */
       if
       :: state == cur -> state = READY; ok = 1
       :: else -> skip
       fi
     }
  :: else -> skip
  fi;
  if
  :: ok -> enqueue(); goto delivered
  :: else -> skip
  fi;
  atomic {                                   /* fetch_or, acq_rel */
    old = state;
    state = state | WAKE | (kind == KMSG -> WAKE_MSG : 0)
  };
  if
  :: (old & SMASK) == COMPLETE -> skip       /* SX_ENOTFOUND: ev stays */
  :: else ->
     cur = old | WAKE | (kind == KMSG -> WAKE_MSG : 0);
     do
     :: !((cur & SMASK) == BLOCKED ||
          ((cur & SMASK) == IDLE && kind == KMSG)) ->
        break                                /* running, ready, or idle */
     :: else ->
#ifdef PLAIN_WAKE
        state = READY;
        enqueue();
        break
#else
        atomic {                             /* CAS cur -> READY */
          if
          :: state == cur -> state = READY; ok = 1
          :: else -> cur = state; ok = 0
          fi
        };
        if
        :: ok -> enqueue(); break
        :: else -> skip
        fi
#endif
     od
  fi;
delivered: skip
}

proctype completer() {
  byte slot, old, cur;
  bit ok;
end_wait:
  atomic { issued > 0 -> issued--; inflight++ };
  deliver(KCOMP);
  atomic { inflight--; slot = 0; old = 0; cur = 0; ok = 0 };
  goto end_wait
}

proctype sender() {
  byte slot, old, cur;
  bit ok;
  do
  :: sent < NMSG ->
     deliver(KMSG);
     atomic { sent++; slot = 0; old = 0; cur = 0; ok = 0 }
  :: else -> break
  od
}

proctype worker() {
  byte s, want, n, turns, i, h;
  bit ok, more;
end_idle:
  atomic { inq > 0 -> inq--; busy++ };

  /* run_turn: take it, CAS READY -> RUNNING (clears the wake flags) */
  s = state;
  do
  :: atomic {
       if
       :: (s & SMASK) != READY -> s = 0; goto out  /* stale entry */
       :: (s & SMASK) == READY && state == s ->
          assert(runners == 0 && inq == 0);
          state = RUNNING;
          runners++;
          turns = 0;
          break
       :: (s & SMASK) == READY && state != s -> s = state
       fi
     }
  od;

turn:
  /* collect: pop up to T events; a pop returns nothing at a half-done
   * push, and cannot return a node whose successor is half done. */
  n = 0;
  do
  :: atomic {
       if
       :: n < T && mh < mt && ml[mh] && (mh + 1 == mt || ml[mh + 1]) ->
          mh++; n++
       :: else -> break
       fi
     }
  od;

  /* The step (skipped when woken with nothing to deliver). Only the
   * runner touches the process's fields, so the step is one atomic move;
   * its visible effects are the dispatch of its yields. */
  atomic {
    if
    :: n > 0 || !stepped || wait_kind == READY ->
       assert(runners == 1);
       stepped = 1;
       steps++;
       if
       :: steps <= STEPS && n_async < NASYNC ->
          n_async++;
          issued++;                          /* handed to a completer */
          want = BLOCKED
       :: steps <= STEPS && n_sync < NSYNC ->
          /* answered in dispatch on this worker: a push, no flag */
          n_sync++;
          mk[mt] = KCOMP; ml[mt] = 1; mt++;
          want = BLOCKED
       :: steps <= STEPS -> want = BLOCKED    /* WAIT */
       :: steps <= STEPS -> want = IDLE
       :: steps < STEPS -> want = READY       /* CONTINUE */
       :: true ->                            /* done or failed: sx__finish */
          state = COMPLETE;
          runners--;
          goto out
       fi;
       wait_kind = want
    :: else -> want = wait_kind
    fi;
    n = 0
  };

  /* backlog: anything queued that should run it again? */
  more = 0;
#ifndef NO_BACKLOG
  if
  :: want == READY -> skip                   /* it runs again anyway */
  :: else ->
     h = mt;                                 /* acquire load of head */
     i = mh;
     do
     :: i == h -> break
     :: else ->
        atomic {
          ml[i] == 1;                        /* wait for a half-done push */
          /* tested only once pop can take it: the push after it linked */
          (i + 1 == h || ml[i + 1] == 1);
          if
          :: want == BLOCKED || mk[i] == KMSG -> more = 1; break
          :: else -> i++
          fi
        }
     od;
     i = 0;
     h = 0
  fi;
#endif

  s = state;                                 /* acquire load */
  /* decide: the window between that load and the CAS below is where a
   * producer's flag lands. */
  do
  :: atomic {
       if
       :: !(want == READY || more || (s & WAKE_MSG) != 0 ||
            (want == BLOCKED && (s & WAKE) != 0)) ->
#ifdef NO_RECHECK
          state = want;                      /* plain store: drops flags */
          runners--;
          goto out
#else
          if                                 /* CAS s -> want, release */
          :: state == s -> state = want; runners--; goto out
          :: else -> s = state
          fi
#endif
       :: else ->
          turns++;
          if
          :: turns >= T -> turns = 0         /* nothing_else(): go on */
          :: true -> skip
          fi;
          if
          :: turns >= T ->                   /* turn used up */
             if
             :: state == s ->
                state = READY; runners--;
                enqueue();                   /* global_push */
                goto out
             :: else -> s = state; turns--
             fi
          :: else ->                         /* again: clear the flags */
             if
             :: state == s -> state = RUNNING; s = 0; more = 0; goto turn
             :: else -> s = state
             fi
          fi
       fi
     }
  od;

out:
  atomic {
    busy--; s = 0; want = 0; n = 0; turns = 0; more = 0
  };
  goto end_idle
}

/* Once nothing can move any more, nothing that should wake the process
 * may be left in its mailbox. */
active proctype monitor() {
  byte i, st;
  atomic {
    sent == NMSG && issued == 0 && inflight == 0 && inq == 0 && busy == 0 ->
    st = state & SMASK;
    assert(st == BLOCKED || st == IDLE || st == COMPLETE);
    assert(runners == 0);
    i = mh;
    do
    :: i == mt -> break
    :: else ->
       assert(ml[i] == 1);
       assert(st != BLOCKED);
       assert(st != IDLE || mk[i] != KMSG);
       i++
    od
  }
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < NW -> run worker(); i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < NCOMP -> run completer(); i++
    :: else -> break
    od;
    run sender()
  }
}

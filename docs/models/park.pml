/* docs/models/park.pml -- SPIN model of the park / unpark protocol
 * (engine/sched/park.c, engine/sched/globalq.c, find_work in engine/sched/worker.c;
 * docs/SCHEDULER.md section 3).
 *
 * NW workers look for work (own deque, global queue, steal), and when they
 * find none they park: announce (n_parked++), re-scan every queue, then
 * sleep on one condition variable until a token is granted. NP outside
 * producers each push ITEMS items to the global queue and then notify.
 * A worker that runs an item may push up to SPAWNS follow-up items (in all)
 * into its own deque, which needs no wake-up for liveness.
 *
 * Property (no lost wake-up): the run is bounded, so every execution ends
 * with all workers asleep. The monitor waits for that quiescent state and
 * asserts that every queue is empty and no token is left over. If the
 * workers sleep while an item is still queued, a wake-up was lost and the
 * assertion fails. Any other terminal state (a worker stuck on the mutex,
 * say) is an invalid end state. The 500 ms timeout safety net of
 * sx__park_wait is deliberately left out: it would mask a lost wake-up.
 *
 * SPIN explores sequentially consistent interleavings, which is what the
 * code's seq_cst handshake (n_parked RMW / queue len RMW, then the other
 * side's seq_cst load) guarantees for these variables.
 *
 * Negative controls (each must make SPIN report the lost wake-up):
 *   -DNO_RESCAN     the parker skips the re-scan after announcing itself
 *   -DNOTIFY_FIRST  the producer reads n_parked before it publishes
 */

#ifndef NW
#define NW 2
#endif
#ifndef NP
#define NP 2
#endif
#ifndef ITEMS
#define ITEMS 1          /* items each producer pushes */
#endif
#ifndef SPAWNS
#define SPAWNS 1         /* follow-ups workers may push to their own deque */
#endif
#define BATCH 17         /* from_global: take one, move up to 16 */

byte gq = 0;             /* global queue length (len, updated under its mutex) */
byte dq[NW];             /* each worker's deque size (Chase-Lev, abstracted) */
byte n_parked = 0;       /* pk->n_parked */
byte tokens = 0;         /* pk->tokens, under mu */
bit  mu = 0;             /* pk->mu */
bit  waiting[NW];        /* worker i is in pthread_cond_wait's wait set */
byte nwait = 0;          /* how many are */
byte prod_done = 0;
byte taken = 0;          /* items run */
byte spawned = 0;        /* follow-ups pushed */

inline lock()   { atomic { mu == 0 -> mu = 1 } }
inline unlock() { mu = 0 }

/* pthread_cond_signal, with mu held: wakes one waiter if there is one
 * (which one is unspecified); with nobody waiting the signal is lost. */
inline signal() {
  atomic {
    if
    :: waiting[0] -> waiting[0] = 0; nwait--
    :: NW > 1 && waiting[1] -> waiting[1] = 0; nwait--
#if NW > 2
    :: waiting[2] -> waiting[2] = 0; nwait--
#endif
    :: nwait == 0 -> skip
    fi
  }
}

/* sx__park_notify: the producer's read half of the handshake. */
inline notify() {
  if
  :: n_parked == 0 -> skip                 /* seq_cst load */
  :: else ->
     lock();
     if
     :: tokens < n_parked -> tokens++; signal()
     :: else -> skip
     fi;
     unlock()
  fi
}

proctype producer() {
  byte k = 0;
#ifdef NOTIFY_FIRST
  bool anyone;
#endif
  do
  :: k < ITEMS ->
#ifdef NOTIFY_FIRST
     /* WRONG order: look for sleepers first, then publish. */
     anyone = (n_parked > 0);
     gq++;
     if
     :: anyone -> notify()
     :: else -> skip
     fi;
#else
     gq++;                 /* sx__globalq_push: len += 1, seq_cst RMW */
     notify();
#endif
     k++
  :: else -> break
  od;
  prod_done++
}

proctype worker(byte me) {
  byte n, v;
  bool vis;
search:
  /* find_work: 1. own deque (LIFO pop) */
  if
  :: atomic { dq[me] > 0 -> dq[me]-- }; goto runit
  :: else -> skip
  fi;
  /* 2. the global queue: take one, move the rest (up to 16) into our
   * deque. Between the two steps the moved items are in our hands only:
   * invisible to a re-scan, but we run them, so no wake-up is needed. */
  if
  :: atomic { gq > 0 ->
       if :: gq > BATCH -> n = BATCH :: else -> n = gq fi;
       gq = gq - n };
     dq[me] = dq[me] + n - 1;
     goto runit
  :: else -> skip
  fi;
  /* 3. steal half of a victim's deque */
  v = 0;
  do
  :: v == NW -> break
  :: v < NW && v == me -> v++
  :: v < NW && v != me ->
     if
     :: atomic { dq[v] > 0 -> n = (dq[v] + 1) / 2; dq[v] = dq[v] - n };
        dq[me] = dq[me] + n - 1;
        goto runit
     :: else -> v++
     fi
  od;
  /* 4. (spinning rounds add nothing to the interleavings) park:
   * sx__park_wait. The announcement, a seq_cst RMW: */
  n_parked++;
#ifndef NO_RESCAN
  /* sx__work_visible: seq_cst loads of the global len, then each deque */
  vis = (gq > 0);
  v = 0;
  do
  :: vis || v == NW -> break
  :: else -> vis = (dq[v] > 0); v++
  od;
  if
  :: vis ->
     lock();
     n_parked--;
     if                         /* keep tokens <= n_parked */
     :: tokens > n_parked -> tokens = n_parked
     :: else -> skip
     fi;
     unlock();
     goto search
  :: else -> skip
  fi;
#endif
  lock();
  do
  :: tokens == 0 ->             /* while (tokens == 0 && !shutdown) */
     /* pthread_cond_wait: join the wait set and release mu atomically */
     atomic { waiting[me] = 1; nwait++; unlock() };
end_wait:
     waiting[me] == 0;          /* signalled (no timeout in this model) */
     lock()                     /* re-acquire mu */
  :: else -> break
  od;
  tokens--;
  n_parked--;
  unlock();
  goto search;

runit:
  taken++;
  /* The item may make another process runnable: sx__enqueue pushes it
   * into our own deque. Waking a parked worker for it is only a hint
   * (relaxed loads of n_parked / n_spinning): nondeterministic here. */
  if
  :: atomic { spawned < SPAWNS -> spawned++; dq[me]++ };
     if
     :: dq[me] > 1 -> notify()
     :: true -> skip
     fi
  :: true -> skip
  fi;
  goto search
}

/* Once the producers are done and every worker sleeps, nothing can
 * happen any more: everything pushed must have been taken. */
active proctype monitor() {
  byte i;
  atomic {
    prod_done == NP && nwait == NW ->
    assert(gq == 0);
    i = 0;
    do
    :: i < NW -> assert(dq[i] == 0); i++
    :: else -> break
    od;
    assert(taken == NP * ITEMS + spawned);
    assert(tokens == 0)
  }
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < NW -> run worker(i); i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < NP -> run producer(); i++
    :: else -> break
    od
  }
}

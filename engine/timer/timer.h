/* engine/timer/timer.h — the workers' sleeps (engine/timer/sleep.c): each
 * worker's timer set of completers. The libuv loops' own deadlines are a
 * heap (engine/timer/heap.h). Internal to engine/; never installed.
 */
#ifndef SX_ENGINE_TIMER_TIMER_H
#define SX_ENGINE_TIMER_TIMER_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stepx/engine.h>

#include "engine/sched/spin.h"
#include "engine/timer/twheel.h"
#include "process/mailbox.h"

typedef struct sx__worker sx__worker;

/* A worker's sleeps (engine/timer/sleep.c): a timer set (engine/timer/twheel.h)
 * of completers, under a spinlock. */
typedef struct {
    sx__spin lock; /* the owner adds and fires; other workers trylock */
    sx__twheel tw; /* under lock */
    /* The earliest due, or UINT64_MAX when empty: written under the lock,
     * read without it as a hint (relaxed; see sleep.c). */
    _Atomic uint64_t next_due;
    /* The number of entries, for stats and the purge rule: written under
     * the lock, read without it (relaxed). */
    _Atomic size_t n_hint;
    /* Sleeps the owner added without the lock (sleep.c, "the inbox"): a
     * stack of their completers. How many: pushed (written by the owner
     * only) less drained (written under the lock only); relaxed, figures
     * for stats and the purge rule. */
    _Atomic(sx__mpsc_node *) inbox;
    _Atomic size_t n_pushed, n_drained;
} sx__timers;

/* engine/timer/sleep.c */
int sx__timers_init(sx__timers *tm);
void sx__timers_fini(sx__timers *tm);
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

#endif

/* engine/sched/spin.h — a test-and-test-and-set spinlock for critical sections
 * of a few stores that one thread takes far more often than others: the
 * outside threads' free-slot cache (ptable.c) and the injection ring's
 * producer side (injq.h). Taking it is one exchange and releasing it one
 * plain store, where a pthread mutex costs two locked instructions (its
 * unlock is an exchange too): with one submitting thread the line stays in
 * that thread's cache and the pair costs ~20 cycles instead of ~40 (two
 * mutexes there would be ~8 % of the submit benchmark). Also each worker's
 * timer set (sleep.c): taken by its owner for every sleep, by other
 * workers (trylock) to fire due sleeps. A waiter spins on a plain load and
 * yields the CPU every 64 rounds, so a holder that the OS preempted gets to
 * run; after 1,024 rounds it sleeps 50 us per 64 rounds instead, because
 * sched_yield never gives the CPU to a thread of lower priority: a
 * real-time submitter spinning on the core of a preempted normal-priority
 * holder would otherwise wait for good.
 *
 * Threads: [any thread]. Not recursive; never held across a call out of
 * the engine.
 */
#ifndef SX_ENGINE_SPIN_H
#define SX_ENGINE_SPIN_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

typedef struct {
    _Atomic bool held;
} sx__spin;

static inline void sx__spin_init(sx__spin *l)
{
    atomic_init(&l->held, false);
}

static inline void sx__spin_lock(sx__spin *l)
{
    unsigned n = 0;
    /* acquire: pairs with the release store in unlock; what the last holder
     * wrote under the lock is visible to us. */
    while (atomic_exchange_explicit(&l->held, true, memory_order_acquire)) {
        /* relaxed: only waits until the lock looks free; the exchange above
         * is what takes it (test-and-test-and-set: the waiters read a
         * shared line instead of writing it). */
        while (atomic_load_explicit(&l->held, memory_order_relaxed)) {
            if (++n % 64 == 0) {
                if (n < 1024) {
                    sched_yield();
                } else {
                    struct timespec ts = { 0, 50000 };
                    nanosleep(&ts, NULL);
                }
            }
#if defined(__x86_64__) || defined(__i386__)
            else
                __builtin_ia32_pause();
#endif
        }
    }
}

/* Takes the lock if it is free; never waits. */
static inline bool sx__spin_trylock(sx__spin *l)
{
    /* relaxed: a look before the write, so a busy lock's line is not
     * pulled away from its holder; acquire exchange: as in lock. */
    return !atomic_load_explicit(&l->held, memory_order_relaxed) &&
           !atomic_exchange_explicit(&l->held, true, memory_order_acquire);
}

static inline void sx__spin_unlock(sx__spin *l)
{
    /* release: pairs with the acquire exchange in lock. */
    atomic_store_explicit(&l->held, false, memory_order_release);
}

#endif

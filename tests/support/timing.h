/* tests/support/timing.h — sleeping, reading the clock, and waiting for a
 * condition with a deadline.
 *
 * The deadline clock is the harness's sx_test_now_ms (CLOCK_MONOTONIC, in
 * ms as a double); tx_now_ns reads the same clock in whole nanoseconds for
 * busy-waits shorter than a millisecond.
 */
#ifndef TX_SUPPORT_TIMING_H
#define TX_SUPPORT_TIMING_H

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "tests/support/harness.h"

/* Sleeps ts; a signal that interrupts the sleep does not shorten it. */
static inline void tx_nanosleep(struct timespec ts)
{
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline void tx_sleep_ms(long ms)
{
    tx_nanosleep((struct timespec){ ms / 1000, (ms % 1000) * 1000000L });
}

static inline void tx_sleep_us(long us)
{
    tx_nanosleep((struct timespec){ us / 1000000, (us % 1000000) * 1000L });
}

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t tx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spins (no sleep, no yield: it keeps the CPU, as a long step keeps its
 * worker) until *flag is true or max_ms have passed. */
static inline void tx_spin_until(_Atomic bool *flag, double max_ms)
{
    double end = sx_test_now_ms() + max_ms;
    while (!atomic_load(flag) && sx_test_now_ms() < end) {
    }
}

/* The pause between two looks of TX_WAIT_UNTIL: sched_yield when us is 0
 * (a wait for another thread that is running now), else a sleep. */
static inline void tx_pause_us(long us)
{
    if (us <= 0)
        sched_yield();
    else
        tx_sleep_us(us);
}

/* Evaluates cond until it is true, pausing pause_us between looks (0:
 * sched_yield); fails the case, naming cond, when it is still false once
 * timeout_ms have passed. cond is evaluated again at every look, so it
 * may call functions (a stats read, a locked load). */
#define TX_WAIT_UNTIL(cond, timeout_ms, pause_us)                              \
    do {                                                                       \
        double tx_end_ = sx_test_now_ms() + (double)(timeout_ms);              \
        while (!(cond)) {                                                      \
            if (!(sx_test_now_ms() < tx_end_))                                 \
                SX_FAILF("still not %s after %.0f ms", #cond,                  \
                         (double)(timeout_ms));                                \
            tx_pause_us(pause_us);                                             \
        }                                                                      \
    } while (0)

#endif

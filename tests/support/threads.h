/* tests/support/threads.h — threads for the concurrent cases, and their
 * iteration counts.
 */
#ifndef TX_SUPPORT_THREADS_H
#define TX_SUPPORT_THREADS_H

#include <pthread.h>
#include <stdint.h>

#include "tests/support/harness.h"

static inline pthread_t tx_thread_start(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    int rc = pthread_create(&t, NULL, fn, arg);
    CHECK_EQ_INT(rc, 0);
    return t;
}

static inline void tx_thread_join(pthread_t t)
{
    int rc = pthread_join(t, NULL);
    CHECK_EQ_INT(rc, 0);
}

/* n iterations times sx_test_stress_scale() (the stress suite's factor),
 * at least 1,000 and at most 10^9. */
static inline uint32_t tx_scaled(double n)
{
    double v = n * sx_test_stress_scale();
    return v < 1000 ? 1000 : v > 1e9 ? 1000000000u : (uint32_t)v;
}

#endif

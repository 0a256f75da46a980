/* tests/support/fds.h — counting this process's open file descriptors, for
 * cases that check that the engine closed everything it opened.
 *
 * Counted with one poll(2) over 0 .. 4095 (POLLNVAL: closed) rather than
 * by listing /proc/self/fd: listing opens a directory, an fd of the
 * count's own, and under ThreadSanitizer, which does not see libuv close
 * fds (a raw close syscall), the reuse of a number a loop or pool thread
 * had is reported as a race (tests/support/tsan_fd.h). Only fds below
 * 4096 (and below RLIMIT_NOFILE) are seen, which the tests stay under.
 */
#ifndef TX_SUPPORT_FDS_H
#define TX_SUPPORT_FDS_H

#include <poll.h>
#include <sys/resource.h>

#include "tests/support/harness.h"
#include "tests/support/timing.h"

static inline int tx_count_fds(void)
{
    static struct pollfd fds[4096];
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    nfds_t n = rl.rlim_cur < 4096 ? (nfds_t)rl.rlim_cur : 4096;
    for (nfds_t i = 0; i < n; i++)
        fds[i] = (struct pollfd){ .fd = (int)i, .events = 0 };
    CHECK(poll(fds, n, 0) >= 0);
    int k = 0;
    for (nfds_t i = 0; i < n; i++)
        k += (fds[i].revents & POLLNVAL) == 0;
    return k;
}

/* Waits up to timeout_ms until at most n fds are open (fds the engine
 * closes on its own threads may close a little after the case's last
 * answer); returns the count, which the case checks. */
static inline int tx_settle_fds(int n, int timeout_ms)
{
    double end = sx_test_now_ms() + timeout_ms;
    int k = tx_count_fds();
    while (k > n && sx_test_now_ms() < end) {
        tx_sleep_ms(5);
        k = tx_count_fds();
    }
    return k;
}

#endif

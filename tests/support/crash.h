/* tests/support/crash.h — a crash of an engine as kill -9 makes it: a
 * child process (fork, before any engine of the parent's exists) runs a
 * function that sets things up, writes what the parent needs to know into
 * a pipe, and kills itself with SIGKILL, so that nothing of its engine is
 * shut down.
 *
 *   static void child(int fd, void *arg) { ...; write(fd, ...); }
 *   got = tx_crash_child(child, arg, &out, sizeof out);
 */
#ifndef TX_SUPPORT_CRASH_H
#define TX_SUPPORT_CRASH_H

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/harness.h"

/* Runs fn(fd, arg) in a child, which is then killed with SIGKILL (fn may
 * raise it itself at the moment it chooses; a return or an exit of the
 * child fails the case). Reads up to n bytes the child wrote into out
 * until it died; returns how many. */
static inline size_t tx_crash_child(void (*fn)(int fd, void *arg), void *arg,
                                    void *out, size_t n)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        close(fds[0]);
        fn(fds[1], arg);
        raise(SIGKILL);
        _exit(99);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fds[0], (char *)out + got, n - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fds[0]);
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        SX_FAILF("the crashing child was not killed by SIGKILL (status %#x)",
                 (unsigned)status);
    return got;
}

#endif

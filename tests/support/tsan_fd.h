/* tests/support/tsan_fd.h — ThreadSanitizer, libuv and file descriptor
 * numbers.
 *
 * Include it once, in a test binary whose threads open sockets, files or
 * pipes while libuv loops close theirs (support.h leaves it out: it defines
 * a hook, not an inline function).
 *
 * libuv (Debian's build, not instrumented) closes every fd with
 * syscall(SYS_close, fd) (uv__close_nocancel; `nm -D libuv.so.1` shows
 * syscall and no close), which TSan does not intercept. TSan's fd model
 * then still holds the fd as created by the loop thread, and when another
 * thread gets the same number from accept, open, socket, pipe ... (the
 * kernel hands out the lowest free number), TSan reports a data race
 * between the two creations. Such a report is false: the kernel orders the
 * close before the reuse. test_io_stress meets it: the server thread's
 * accept against a loop's pipe2 (exec's stdio), the pool's open64 (fs)
 * against a loop's pipe2.
 *
 * So under TSan this binary suppresses race reports with an fd-creating
 * call in a stack. These functions call no user code, so a report they
 * appear in is about TSan's record of an fd, never about our memory; what
 * is given up is TSan's check of fd use against fd creation across
 * threads, in this binary only.
 *
 * Matching a report against suppressions symbolizes it, which starts
 * llvm-symbolizer, which keeps two pipe fds open from then on. A test that
 * counts fds calls tx_tsan_fd_warm() before its baseline, so that the
 * symbolizer is already running (a no-op without TSan).
 */
#ifndef TX_SUPPORT_TSAN_FD_H
#define TX_SUPPORT_TSAN_FD_H

#if defined(__SANITIZE_THREAD__)
#define TX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TX_TSAN 1
#endif
#endif

#ifdef TX_TSAN
#include <sanitizer/common_interface_defs.h>

/* Read by the TSan runtime at start-up (a weak hook it declares). */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
    return "race:^accept$\n"
           "race:^accept4$\n"
           "race:^open$\n"
           "race:^open64$\n"
           "race:^openat$\n"
           "race:^socket$\n"
           "race:^socketpair$\n"
           "race:^pipe$\n"
           "race:^pipe2$\n"
           "race:^eventfd$\n"
           "race:^epoll_create1$\n"
           "race:^dup$\n"
           "race:^dup2$\n"
           "race:^dup3$\n";
}

static inline void tx_tsan_fd_warm(void)
{
    char buf[256];
    __sanitizer_symbolize_pc(__builtin_return_address(0), "%p %F %L", buf,
                             sizeof buf);
}
#else
static inline void tx_tsan_fd_warm(void)
{
}
#endif

#endif

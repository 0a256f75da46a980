/* engine/io/tsan_close.c — in a ThreadSanitizer build only: libuv closes
 * descriptors with syscall(SYS_close, fd) rather than close(fd) (close is
 * a cancellation point in glibc), and ThreadSanitizer intercepts close but
 * not that system call. It then still counts a descriptor libuv closed as
 * open, and when another thread gets the same number from open, pipe2,
 * eventfd or accept, it reports a race on the number that is not one
 * (google/sanitizers issue 1376 describes it). This definition of
 * syscall, found before the C library's, sends SYS_close to close, which
 * ThreadSanitizer sees, and every other call on to the C library's. In
 * every other build this file is empty.
 */
#if defined(__SANITIZE_THREAD__)
#define SX_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SX_TSAN_BUILD 1
#endif
#endif

#ifdef SX_TSAN_BUILD
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef long (*syscall_fn)(long, ...);

long syscall(long n, ...)
{
    /* Six arguments, as the kernel's calling convention passes them and
     * as the C library's own syscall reads them, whatever the call uses. */
    va_list ap;
    va_start(ap, n);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (n == SYS_close)
        return close((int)a[0]);
    /* relaxed: every thread finds the same function; a race only looks it
     * up twice. */
    static _Atomic(syscall_fn) real;
    syscall_fn f = atomic_load_explicit(&real, memory_order_relaxed);
    if (f == NULL) {
        *(void **)&f = dlsym(RTLD_NEXT, "syscall");
        atomic_store_explicit(&real, f, memory_order_relaxed);
    }
    return f(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* Named by sx__io_start (loop.c), so that a program linked with the
 * static library takes this file, and with it syscall, too. */
const char sx__tsan_close_here = 1;
#else
/* ISO C wants a translation unit to hold a declaration. */
typedef int sx__tsan_close_unused;
#endif

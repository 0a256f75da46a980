/* process/errors.c — names and messages for error codes.
 *
 * One static table covers the engine band (-5001 and below), the errno-derived
 * SX_E* codes, and the common errno values that libuv and libc statuses pass
 * through as -errno. Lookups scan the table: error paths are not hot, and a
 * table keeps each code's name and message side by side. strerror() is not
 * used: it is not thread-safe and its text varies by libc and locale.
 *
 * Threads: reads constant data only; any thread. Never allocates.
 */
#include "process/stepx/process.h"

#include <errno.h>
#include <stddef.h>

typedef struct {
    int code; /* the negative code as callers see it */
    const char *name;
    const char *message;
} err_entry;

/* libuv's end-of-file status is not an errno but does pass through. */
#define ERR_UV_EOF (-4095)

/* The SX_E* codes come first so that an errno-derived one (SX_EINVAL is
 * -EINVAL) is named by its SX_ macro; every code appears once. */
static const err_entry err_table[] = {
    { SX_EINVAL, "SX_EINVAL", "invalid argument" },
    { SX_ENOMEM, "SX_ENOMEM", "out of memory" },
    { SX_ETIMEDOUT, "SX_ETIMEDOUT", "timed out" },
    { SX_ECANCELLED, "SX_ECANCELLED", "cancelled" },
    { SX_EPROTO, "SX_EPROTO", "malformed or unexpected payload" },
    { SX_ENOTFOUND, "SX_ENOTFOUND", "no such process" },
    { SX_ECLOSED, "SX_ECLOSED", "engine is closed" },
    { SX_ESTOPPING, "SX_ESTOPPING", "engine is stopping" },
    { SX_ELIMIT, "SX_ELIMIT", "limit exceeded" },
    { SX_EUNKNOWN_TYPE, "SX_EUNKNOWN_TYPE", "unknown process type" },
    { SX_EUNKNOWN_METHOD, "SX_EUNKNOWN_METHOD", "unknown method" },
    { SX_EUNKNOWN_COMMAND, "SX_EUNKNOWN_COMMAND", "unknown command" },
    { SX_ETERMINATED, "SX_ETERMINATED", "process was terminated" },
    { SX_EFAILED, "SX_EFAILED", "process failed" },
    { SX_EEXIST, "SX_EEXIST", "already exists" },
    { SX_ESTATE, "SX_ESTATE", "invalid state for this operation" },
    { SX_ETOOLARGE, "SX_ETOOLARGE", "too large" },
    { SX_ECORRUPT, "SX_ECORRUPT",
      "state store is damaged or not a stepx database" },
    { SX_EVERSION, "SX_EVERSION", "state store is from a newer stepx" },
    { SX_ESTORAGE, "SX_ESTORAGE", "the state store could not record it" },
    { SX_ERESTART_LIMIT, "SX_ERESTART_LIMIT",
      "the job ended past its restart limit" },
    { SX_ENOCONNECTION, "SX_ENOCONNECTION",
      "no connection to that process's node (down or unknown)" },

    { -EPERM, "EPERM", "operation not permitted" },
    { -ENOENT, "ENOENT", "no such file or directory" },
    { -ESRCH, "ESRCH", "no such process (OS)" },
    { -EINTR, "EINTR", "interrupted system call" },
    { -EIO, "EIO", "input/output error" },
    { -ENXIO, "ENXIO", "no such device or address" },
    { -E2BIG, "E2BIG", "argument list too long" },
    { -EBADF, "EBADF", "bad file descriptor" },
    { -ECHILD, "ECHILD", "no child processes" },
    { -EAGAIN, "EAGAIN", "resource temporarily unavailable" },
    { -EACCES, "EACCES", "permission denied" },
    { -EFAULT, "EFAULT", "bad address" },
    { -EBUSY, "EBUSY", "device or resource busy" },
    { -EEXIST, "EEXIST", "file exists" },
    { -EXDEV, "EXDEV", "cross-device link" },
    { -ENODEV, "ENODEV", "no such device" },
    { -ENOTDIR, "ENOTDIR", "not a directory" },
    { -EISDIR, "EISDIR", "is a directory" },
    { -ENFILE, "ENFILE", "too many open files in system" },
    { -EMFILE, "EMFILE", "too many open files" },
    { -ENOTTY, "ENOTTY", "inappropriate ioctl for device" },
    { -EFBIG, "EFBIG", "file too large" },
    { -ENOSPC, "ENOSPC", "no space left on device" },
    { -ESPIPE, "ESPIPE", "illegal seek" },
    { -EROFS, "EROFS", "read-only file system" },
    { -EMLINK, "EMLINK", "too many links" },
    { -EPIPE, "EPIPE", "broken pipe" },
    { -EDOM, "EDOM", "numerical argument out of domain" },
    { -ERANGE, "ERANGE", "result out of range" },
    { -EDEADLK, "EDEADLK", "resource deadlock avoided" },
    { -ENAMETOOLONG, "ENAMETOOLONG", "file name too long" },
    { -ENOLCK, "ENOLCK", "no locks available" },
    { -ENOSYS, "ENOSYS", "function not implemented" },
    { -ENOTEMPTY, "ENOTEMPTY", "directory not empty" },
    { -ELOOP, "ELOOP", "too many levels of symbolic links" },
    { -ENOMSG, "ENOMSG", "no message of desired type" },
    { -EOVERFLOW, "EOVERFLOW", "value too large for defined data type" },
    { -EILSEQ, "EILSEQ", "invalid or incomplete multibyte sequence" },
    { -ENOTSOCK, "ENOTSOCK", "socket operation on non-socket" },
    { -EDESTADDRREQ, "EDESTADDRREQ", "destination address required" },
    { -EMSGSIZE, "EMSGSIZE", "message too long" },
    { -EPROTOTYPE, "EPROTOTYPE", "protocol wrong type for socket" },
    { -ENOPROTOOPT, "ENOPROTOOPT", "protocol not available" },
    { -EPROTONOSUPPORT, "EPROTONOSUPPORT", "protocol not supported" },
    { -ENOTSUP, "ENOTSUP", "operation not supported" },
    { -EAFNOSUPPORT, "EAFNOSUPPORT", "address family not supported" },
    { -EADDRINUSE, "EADDRINUSE", "address already in use" },
    { -EADDRNOTAVAIL, "EADDRNOTAVAIL", "cannot assign requested address" },
    { -ENETDOWN, "ENETDOWN", "network is down" },
    { -ENETUNREACH, "ENETUNREACH", "network is unreachable" },
    { -ECONNABORTED, "ECONNABORTED", "software caused connection abort" },
    { -ECONNRESET, "ECONNRESET", "connection reset by peer" },
    { -ENOBUFS, "ENOBUFS", "no buffer space available" },
    { -EISCONN, "EISCONN", "socket is already connected" },
    { -ENOTCONN, "ENOTCONN", "socket is not connected" },
    { -ECONNREFUSED, "ECONNREFUSED", "connection refused" },
    { -EHOSTUNREACH, "EHOSTUNREACH", "no route to host" },
    { -EALREADY, "EALREADY", "operation already in progress" },
    { -EINPROGRESS, "EINPROGRESS", "operation now in progress" },
    { ERR_UV_EOF, "UV_EOF", "end of file" },
};

static const err_entry *err_find(int code)
{
    /* Compare against the stored negative codes rather than negating code:
     * -INT_MIN overflows. */
    for (size_t i = 0; i < sizeof(err_table) / sizeof(err_table[0]); i++)
        if (err_table[i].code == code)
            return &err_table[i];
    return NULL;
}

const char *sx_strerror(int code)
{
    const err_entry *e;

    if (code == 0)
        return "success";
    e = err_find(code);
    return e != NULL ? e->message : "unknown error";
}

const char *sx_errname(int code)
{
    const err_entry *e;

    if (code == 0)
        return "OK";
    e = err_find(code);
    return e != NULL ? e->name : "UNKNOWN";
}

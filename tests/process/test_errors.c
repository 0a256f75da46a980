/* tests/process/test_errors.c — sx_strerror and sx_errname.
 *
 * Threads: single-threaded (the functions read constant data only).
 */
#include "process/stepx/process.h"
#include "tests/support/harness.h"

#include <errno.h>
#include <limits.h>

static const struct {
    int code;
    const char *name;
} sx_codes[] = {
    { SX_EINVAL, "SX_EINVAL" },
    { SX_ENOMEM, "SX_ENOMEM" },
    { SX_ETIMEDOUT, "SX_ETIMEDOUT" },
    { SX_ECANCELLED, "SX_ECANCELLED" },
    { SX_EPROTO, "SX_EPROTO" },
    { SX_ENOTFOUND, "SX_ENOTFOUND" },
    { SX_ECLOSED, "SX_ECLOSED" },
    { SX_ESTOPPING, "SX_ESTOPPING" },
    { SX_ELIMIT, "SX_ELIMIT" },
    { SX_EUNKNOWN_TYPE, "SX_EUNKNOWN_TYPE" },
    { SX_EUNKNOWN_METHOD, "SX_EUNKNOWN_METHOD" },
    { SX_EUNKNOWN_COMMAND, "SX_EUNKNOWN_COMMAND" },
    { SX_ETERMINATED, "SX_ETERMINATED" },
    { SX_EFAILED, "SX_EFAILED" },
    { SX_EEXIST, "SX_EEXIST" },
    { SX_ESTATE, "SX_ESTATE" },
    { SX_ETOOLARGE, "SX_ETOOLARGE" },
    { SX_ECORRUPT, "SX_ECORRUPT" },
    { SX_EVERSION, "SX_EVERSION" },
    { SX_ESTORAGE, "SX_ESTORAGE" },
    { SX_ERESTART_LIMIT, "SX_ERESTART_LIMIT" },
    { SX_ENOCONNECTION, "SX_ENOCONNECTION" },
};

#define ERRNO(e)                                                               \
    {                                                                          \
        -(e), #e                                                               \
    }
static const struct {
    int code;
    const char *name;
} errno_codes[] = {
    ERRNO(EPERM),        ERRNO(ENOENT),       ERRNO(ESRCH),
    ERRNO(EINTR),        ERRNO(EIO),          ERRNO(EBADF),
    ERRNO(ECHILD),       ERRNO(EAGAIN),       ERRNO(EACCES),
    ERRNO(EEXIST),       ERRNO(ENOTDIR),      ERRNO(EISDIR),
    ERRNO(EMFILE),       ERRNO(ENOSPC),       ERRNO(EPIPE),
    ERRNO(ERANGE),       ERRNO(ECONNREFUSED), ERRNO(ECONNRESET),
    ERRNO(EADDRINUSE),   ERRNO(ENOSYS),       ERRNO(ENOTSUP),
    ERRNO(EOVERFLOW),    ERRNO(ENAMETOOLONG), ERRNO(ENOTEMPTY),
    ERRNO(EHOSTUNREACH), ERRNO(ENETUNREACH),  ERRNO(EALREADY),
    ERRNO(EINPROGRESS),  ERRNO(EBUSY),        ERRNO(EFAULT),
    ERRNO(ENOTCONN),     ERRNO(ECONNABORTED), ERRNO(EMSGSIZE),
};

/* Every SX_E* code has its macro name and a message of its own (no two
 * alike, none "unknown error" or empty); the errno-derived ones are named
 * SX_…, not by their errno. */
static void test_sx_codes(void)
{
    size_t n = sizeof(sx_codes) / sizeof(sx_codes[0]);
    for (size_t i = 0; i < n; i++) {
        const char *msg = sx_strerror(sx_codes[i].code);
        CHECK_STR(sx_errname(sx_codes[i].code), sx_codes[i].name);
        CHECK(msg != NULL && msg[0] != '\0');
        CHECK(strcmp(msg, "unknown error") != 0);
        for (size_t j = 0; j < i; j++) {
            CHECK(sx_codes[i].code != sx_codes[j].code);
            if (strcmp(msg, sx_strerror(sx_codes[j].code)) == 0)
                SX_FAILF("%s and %s share \"%s\"", sx_codes[i].name,
                         sx_codes[j].name, msg);
        }
    }
}

/* Other errno statuses (as -errno) get their errno name and a message of
 * their own; no message repeats one of another listed code. */
static void test_errno_codes(void)
{
    size_t n = sizeof(errno_codes) / sizeof(errno_codes[0]);
    size_t nsx = sizeof(sx_codes) / sizeof(sx_codes[0]);
    for (size_t i = 0; i < n; i++) {
        const char *msg = sx_strerror(errno_codes[i].code);
        CHECK_STR(sx_errname(errno_codes[i].code), errno_codes[i].name);
        CHECK(msg[0] != '\0' && strcmp(msg, "unknown error") != 0);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(msg, sx_strerror(errno_codes[j].code)) != 0);
        for (size_t j = 0; j < nsx; j++)
            CHECK(strcmp(msg, sx_strerror(sx_codes[j].code)) != 0);
    }
    /* SX_EEXIST is in the engine band; -EEXIST is the errno one. */
    CHECK_STR(sx_errname(-EEXIST), "EEXIST");
    CHECK_STR(sx_errname(SX_EEXIST), "SX_EEXIST");
}

/* 0 is success; codes in no table (positive, the edges of the engine band,
 * INT_MIN, INT_MAX) are "unknown error" / "UNKNOWN", and the same static
 * string is returned every time. */
static void test_unknown_codes(void)
{
    static const int unknown[] = { 1,       EINVAL,  5001,       -5000,
                                   -5018,   -4999,   -9999,      -3000,
                                   INT_MIN, INT_MAX, INT_MIN + 1 };
    CHECK_STR(sx_strerror(0), "success");
    CHECK_STR(sx_errname(0), "OK");
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        CHECK_STR(sx_strerror(unknown[i]), "unknown error");
        CHECK_STR(sx_errname(unknown[i]), "UNKNOWN");
    }
    CHECK(sx_strerror(SX_ELIMIT) == sx_strerror(SX_ELIMIT));
    CHECK(sx_errname(-12345) == sx_errname(-54321));
}

static const sx_test_case cases[] = {
    { "sx_codes", test_sx_codes },
    { "errno_codes", test_errno_codes },
    { "unknown_codes", test_unknown_codes },
};

SX_TEST_MAIN(cases)

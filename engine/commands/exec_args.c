/* engine/commands/exec_args.c — the exec command's arguments: the map of
 * docs/COMMANDS.md ("exec") read into storage that the op then owns
 * (engine/commands/exec.h). A bad argument is SX_EINVAL with a message
 * that names it, which the handler answers with; the child's life on the
 * loop is engine/commands/exec.c.
 *
 * Threads: [worker] (the handler's, engine/commands/exec.c cmd_exec).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/commands/exec.h"
#include "process/fault.h"

#define MAX_OUTPUT_DEFAULT ((int64_t)1 << 20) /* 1 MiB per stream */
#define MAX_OUTPUT_LIMIT ((int64_t)64 << 20)  /* 64 MiB per stream */
#define GRACE_DEFAULT_MS 2000
#define MAX_MS ((int64_t)1 << 40) /* ~35 years: anything more is a bug */

void sx__exec_args_free(sx__exec_args *a)
{
    free(a->argv);
    free(a->env);
    free(a->strs);
    free(a->in);
}

static bool key_is(const char *k, size_t n, const char *name)
{
    return strlen(name) == n && memcmp(k, name, n) == 0;
}

/* Copies a string value into strs (NUL-terminated) and returns it, or
 * NULL when the value is not a string, contains a NUL, or is empty while
 * empty is not allowed. `sep` (when not 0) is appended instead of a NUL,
 * to glue "NAME=" to its value. */
static char *take_str(sx_unpack *u, sx__exec_args *a, bool empty_ok, char sep)
{
    const char *s;
    size_t n;
    if (sx_unpack_str(u, &s, &n) != 0 || (n == 0 && !empty_ok) ||
        memchr(s, 0, n) != NULL)
        return NULL;
    char *d = a->strs + a->pos;
    memcpy(d, s, n);
    d[n] = sep;
    a->pos += n + 1;
    return d;
}

/* An optional integer in [lo, hi]: nil keeps *v. */
static bool take_int(sx_unpack *u, int64_t *v, int64_t lo, int64_t hi)
{
    if (sx_unpack_type(u) == SX_MP_NIL)
        return sx_unpack_nil(u) == 0;
    int64_t x;
    if (sx_unpack_int(u, &x) != 0 || x < lo || x > hi)
        return false;
    *v = x;
    return true;
}

/* Room left in the payload: a bound on any count it declares (every
 * element takes at least one byte). */
static size_t left(const sx_unpack *u)
{
    return (size_t)(u->end - u->p);
}

static int parse_argv(sx_unpack *u, sx__exec_args *a, char *msg, size_t cap)
{
    uint32_t n;
    if (sx_unpack_array(u, &n) != 0 || n == 0 || n > left(u))
        goto bad;
    a->argv = SX__FAULT(SX__FAULT_EXEC_ARGS)
                  ? NULL
                  : calloc((size_t)n + 1, sizeof(char *));
    if (a->argv == NULL)
        return SX_ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        if ((a->argv[i] = take_str(u, a, i > 0, 0)) == NULL)
            goto bad;
    return 0;
bad:
    snprintf(msg, cap,
             "exec: argv must be a non-empty array of strings "
             "(argv[0] non-empty, no NUL bytes)");
    return SX_EINVAL;
}

static int parse_env(sx_unpack *u, sx__exec_args *a, char *msg, size_t cap)
{
    if (sx_unpack_type(u) == SX_MP_NIL)
        return sx_unpack_nil(u) == 0 ? 0 : SX_EPROTO;
    uint32_t n;
    if (sx_unpack_map(u, &n) != 0 || n > left(u))
        goto bad;
    a->env = SX__FAULT(SX__FAULT_EXEC_ARGS)
                 ? NULL
                 : calloc((size_t)n + 1, sizeof(char *));
    if (a->env == NULL)
        return SX_ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        /* "NAME=" then the value right after it: "NAME=value". */
        char *name = take_str(u, a, false, '=');
        if (name == NULL)
            goto bad;
        size_t name_len = (size_t)(a->strs + a->pos - 1 - name);
        if (memchr(name, '=', name_len) != NULL ||
            take_str(u, a, true, 0) == NULL)
            goto bad;
        a->env[i] = name;
    }
    return 0;
bad:
    snprintf(msg, cap,
             "exec: env must be a map of names (non-empty, no '=') "
             "to string values, or nil to inherit");
    return SX_EINVAL;
}

static int parse_one(sx_unpack *u, const char *k, size_t kn, sx__exec_args *a,
                     char *msg, size_t cap)
{
    if (key_is(k, kn, "argv"))
        return parse_argv(u, a, msg, cap);
    if (key_is(k, kn, "env"))
        return parse_env(u, a, msg, cap);
    if (key_is(k, kn, "cwd")) {
        if (sx_unpack_type(u) == SX_MP_NIL)
            return sx_unpack_nil(u) == 0 ? 0 : SX_EPROTO;
        if ((a->cwd = take_str(u, a, false, 0)) != NULL)
            return 0;
        snprintf(msg, cap,
                 "exec: cwd must be a non-empty string without NUL "
                 "bytes");
        return SX_EINVAL;
    }
    if (key_is(k, kn, "stdin")) {
        const void *p = NULL;
        size_t n = 0;
        int t = sx_unpack_type(u);
        int rc = t == SX_MP_NIL   ? sx_unpack_nil(u)
                 : t == SX_MP_STR ? sx_unpack_str(u, (const char **)&p, &n)
                 : t == SX_MP_BIN ? sx_unpack_bin(u, &p, &n)
                                  : SX_EINVAL;
        if (rc != 0 || n > UINT32_MAX) {
            snprintf(msg, cap, "exec: stdin must be a string or binary");
            return SX_EINVAL;
        }
        if (n > 0) {
            a->in = SX__FAULT(SX__FAULT_EXEC_ARGS) ? NULL : malloc(n);
            if (a->in == NULL)
                return SX_ENOMEM;
            memcpy(a->in, p, n);
            a->in_len = n;
        }
        return 0;
    }
    if (key_is(k, kn, "max_output")) {
        if (take_int(u, &a->max_output, 0, MAX_OUTPUT_LIMIT))
            return 0;
        snprintf(msg, cap,
                 "exec: max_output must be an integer from 0 to "
                 "%" PRId64 " (bytes)",
                 MAX_OUTPUT_LIMIT);
        return SX_EINVAL;
    }
    if (key_is(k, kn, "truncate")) {
        int t = sx_unpack_type(u);
        if (t == SX_MP_NIL)
            return sx_unpack_nil(u) == 0 ? 0 : SX_EPROTO;
        if (t == SX_MP_BOOL && sx_unpack_bool(u, &a->truncate) == 0)
            return 0;
        snprintf(msg, cap, "exec: truncate must be a bool, or nil");
        return SX_EINVAL;
    }
    if (key_is(k, kn, "check")) {
        int t = sx_unpack_type(u);
        if (t == SX_MP_NIL)
            return sx_unpack_nil(u) == 0 ? 0 : SX_EPROTO;
        if (t == SX_MP_BOOL && sx_unpack_bool(u, &a->check) == 0)
            return 0;
        snprintf(msg, cap, "exec: check must be a bool, or nil");
        return SX_EINVAL;
    }
    if (key_is(k, kn, "timeout_ms")) {
        if (take_int(u, &a->timeout_ms, 0, MAX_MS))
            return 0;
        snprintf(msg, cap,
                 "exec: timeout_ms must be an integer from 0 to 2^40 (0: no "
                 "timeout)");
        return SX_EINVAL;
    }
    if (key_is(k, kn, "grace_ms")) {
        if (take_int(u, &a->grace_ms, 0, MAX_MS))
            return 0;
        snprintf(msg, cap, "exec: grace_ms must be an integer from 0 to 2^40");
        return SX_EINVAL;
    }
    snprintf(msg, cap, "exec: unknown argument \"%.*s\"",
             (int)(kn > 64 ? 64 : kn), k);
    return SX_EINVAL;
}

int sx__exec_parse(sx_payload args, sx__exec_args *a, char *msg, size_t cap)
{
    static const char *const keys[] = { "argv",       "env",        "cwd",
                                        "stdin",      "max_output", "truncate",
                                        "timeout_ms", "grace_ms",   "check" };
    unsigned seen = 0;
    a->max_output = MAX_OUTPUT_DEFAULT;
    a->grace_ms = GRACE_DEFAULT_MS;
    /* Every string copied fits in the payload's size plus one NUL each,
     * and there are fewer strings than payload bytes. */
    a->strs = SX__FAULT(SX__FAULT_EXEC_ARGS) ? NULL : malloc(2 * args.len + 1);
    if (a->strs == NULL)
        return SX_ENOMEM;
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, args);
    if (sx_unpack_map(&u, &n) != 0)
        goto not_map;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kn;
        if (sx_unpack_str(&u, &k, &kn) != 0)
            goto not_map;
        for (unsigned j = 0; j < sizeof keys / sizeof keys[0]; j++) {
            if (!key_is(k, kn, keys[j]))
                continue;
            if (seen & (1u << j)) {
                snprintf(msg, cap, "exec: argument \"%s\" given twice",
                         keys[j]);
                return SX_EINVAL;
            }
            seen |= 1u << j;
        }
        int rc = parse_one(&u, k, kn, a, msg, cap);
        if (rc == SX_EPROTO)
            goto not_map;
        if (rc != 0)
            return rc;
    }
    if (!sx_unpack_done(&u))
        goto not_map;
    if (a->argv == NULL) {
        snprintf(msg, cap,
                 "exec: argv is required (a non-empty array of "
                 "strings)");
        return SX_EINVAL;
    }
    return 0;
not_map:
    snprintf(msg, cap,
             "exec: args must be one map {argv, env, cwd, stdin, "
             "max_output, truncate, timeout_ms, grace_ms, check, retry}");
    return SX_EINVAL;
}

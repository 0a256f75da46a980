/* engine/commands/exec.h — what the two files of the exec family share:
 * the arguments as the handler reads them (engine/commands/exec_args.c)
 * before the op takes them over (engine/commands/exec.c, cmd_exec).
 * Internal to engine/; never installed.
 *
 * Threads: [worker] (the handler's).
 */
#ifndef SX_ENGINE_COMMANDS_EXEC_H
#define SX_ENGINE_COMMANDS_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "process/stepx/process.h"

/* What the handler parses; every pointer owned until moved into the op. */
typedef struct {
    char **argv; /* NULL-terminated; the strings live in strs */
    char **env;  /* NULL-terminated "NAME=value", or NULL: inherit */
    char *cwd;   /* in strs, or NULL */
    char *strs;
    size_t pos;  /* bytes of strs used */
    uint8_t *in; /* stdin bytes, or NULL: /dev/null */
    size_t in_len;
    int64_t max_output, timeout_ms, grace_ms;
    bool truncate;
    bool check; /* a non-zero exit or a signal is an error */
} sx__exec_args;

/* Parses args (zeroed *a) into a. Returns 0; SX_EINVAL with msg (cap
 * bytes) set; or SX_ENOMEM. On error the caller still frees a. */
int sx__exec_parse(sx_payload args, sx__exec_args *a, char *msg, size_t cap);
/* Frees what a owns (each pointer may be NULL). */
void sx__exec_args_free(sx__exec_args *a);

#endif

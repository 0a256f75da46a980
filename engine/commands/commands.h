/* engine/commands/commands.h — what the command families share: their
 * registration (each family fills its ids of the engine's registry before
 * start; docs/COMMANDS.md lists them) and the argument helpers more than
 * one family needs. Internal to engine/; never installed.
 */
#ifndef SX_ENGINE_COMMANDS_COMMANDS_H
#define SX_ENGINE_COMMANDS_COMMANDS_H

#include <stdint.h>

#include "engine/core/core.h"
#include "engine/io/io.h"

/* Each family registers its commands (engine/core/dispatch.c,
 * sx__commands_builtin, calls them all at engine creation). */
void sx__cmd_process_register(sx_engine *e); /* commands/process.c */
void sx__cmd_clock_register(sx_engine *e);   /* commands/clock.c */
void sx__cmd_exec_register(sx_engine *e);    /* commands/exec.c */
void sx__cmd_fs_register(sx_engine *e);      /* commands/fs.c */
void sx__cmd_net_register(sx_engine *e);     /* commands/net.c */
/* The "@retry" and "@all" process types (commands/helpers.c). */
void sx__helpers_register(sx_engine *e);

/* A spawn's [type, method, [input...]] (and, a fourth element, its
 * options map), decoded by sx__spawn_args_decode (commands/spawn_opts.c):
 * the names copied with their NUL, the inputs and opts pointing into the
 * arguments (opts.data NULL: none). */
#define SX__SPAWN_MAX_INPUT 64
typedef struct {
    char type[256], method[256];
    sx_payload input[SX__SPAWN_MAX_INPUT];
    size_t n_input;
    sx_payload opts;
} sx__spawn_args;
/* how: which reader. ANY (the commands): the one-pass reader of the
 * common shape, then the general one when it is not that shape. FAST and
 * GENERAL, one alone, for the tests that compare them (a FAST refusal
 * says only that the shape is not its own). 0 or SX_EINVAL. */
enum { SX__SPAWN_READ_ANY, SX__SPAWN_READ_FAST, SX__SPAWN_READ_GENERAL };
int sx__spawn_args_decode(sx_payload args, sx__spawn_args *a, int how);

/* commands/helpers.c: the options map of spawn, spawn-wait and spawn-all
 * into x (deadline_ms -1 when not given) and *retry (*has_retry: one was
 * given). SX_EINVAL with why (cap bytes) saying what is wrong. */
int sx__spawn_opts_decode(sx_payload opts, sx__spawnx *x,
                          sx_restart_policy *retry, bool *has_retry, char *why,
                          size_t cap);
/* Packs x's options (not retry) as a map. */
void sx__spawn_opts_pack(sx_pack *pk, const sx__spawnx *x);
/* Spawns an "@retry" child of parent that runs command cmd with inner
 * args under policy p (timeout_ms per attempt; 0 none); its outcome
 * answers done (a watcher). tag: the parent's yield's, for @spawned. */
int sx__retry_spawn(sx_engine *e, sx_pid parent, uint64_t tag, uint16_t cmd,
                    sx_payload inner, const sx_restart_policy *p,
                    int64_t timeout_ms, sx_completer *done);
/* A command whose args map has a "retry" key (exec): the map less it, run
 * by an "@retry" child; name prefixes error messages. Answers done. */
int sx__retry_args(sx_engine *e, sx_pid parent, uint64_t tag, uint16_t cmd,
                   sx_payload args, const char *name, sx_completer *done);
/* spawn-all's args: *children (pointing into args) and the other keys
 * repacked into opts as one map (nothing written when there are none). */
int sx__spawn_all_split(sx_payload args, sx_payload *children, sx_pack *opts,
                        char *why, size_t cap);

/* The absolute deadline (sx__now_ns's clock) ms milliseconds from now;
 * UINT64_MAX when that is past what the clock can count. ms >= 0. */
static inline uint64_t sx__after_ms(int64_t ms)
{
    uint64_t now = sx__now_ns();
    uint64_t d = (uint64_t)ms;
    if (d > (UINT64_MAX - now) / 1000000u)
        return UINT64_MAX;
    return now + d * 1000000u;
}

#endif

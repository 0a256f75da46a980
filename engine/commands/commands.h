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

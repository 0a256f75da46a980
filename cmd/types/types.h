/* cmd/types/types.h — the process types every stepxd ships (PROTOCOL.md,
 * "Process types every daemon ships"): counter, sleeper, echo, fail,
 * exec, tally, fanout, watcher. */
#ifndef SX_CMD_TYPES_H
#define SX_CMD_TYPES_H

#include <stepx/engine.h>

/* Registers the eight types on e (before start). 0 or the first
 * sx_engine_register error. */
int sx_types_register_builtin(sx_engine *e);

#endif

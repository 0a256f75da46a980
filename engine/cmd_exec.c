/* engine/cmd_exec.c — the exec command family on the libuv loops
 * (engine/io.h). Not written yet: until it is, its ids answer
 * SX_EUNKNOWN_COMMAND like any unregistered id. */
#include "engine/io.h"

void sx__cmd_exec_register(sx_engine *e)
{
    (void)e;
}

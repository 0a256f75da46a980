/* engine/cmd_net.c — the net command family on the libuv loops
 * (engine/io.h). Not written yet: until it is, its ids answer
 * SX_EUNKNOWN_COMMAND like any unregistered id. */
#include "engine/io.h"

void sx__cmd_net_register(sx_engine *e)
{
    (void)e;
}

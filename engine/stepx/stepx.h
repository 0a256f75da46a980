/* engine/stepx/stepx.h — the umbrella header: everything public in stepx.
 * (relay.h joins here when the relay lands.) */
#ifndef STEPX_STEPX_H
#define STEPX_STEPX_H

#include <stepx/engine.h>
#include <stepx/process.h>

#endif

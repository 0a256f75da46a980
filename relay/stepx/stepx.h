/* relay/stepx/stepx.h — the umbrella header: everything public in stepx.
 */
#ifndef STEPX_STEPX_H
#define STEPX_STEPX_H

#include <stepx/engine.h>
#include <stepx/process.h>
#include <stepx/relay.h>

#endif

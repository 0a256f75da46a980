/* examples/nightly.h — the nightly report's process types
 * (examples/nightly.c): "report" (method "run"; inputs: the output file's
 * path, then 1 to NIGHTLY_MAX shell commands) and "section" (method
 * "run"; input: one shell command). */
#ifndef STEPX_EXAMPLES_NIGHTLY_H
#define STEPX_EXAMPLES_NIGHTLY_H

#include <stepx/engine.h>

#define NIGHTLY_MAX 8

extern const sx_process_type nightly_types[2];

#endif

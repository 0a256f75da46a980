/* process/mapentry.h — one entry of a msgpack map read at a time: what
 * sx_map_get scans with, and what readers that take several keys in one
 * pass use (the relay's request index, the C client's reply head).
 * Internal; never installed.
 *
 * Threads: [any thread] (reads the caller's bytes).
 */
#ifndef SX_PROCESS_MAPENTRY_H
#define SX_PROCESS_MAPENTRY_H

#include "process/stepx/process.h"

/* Reads the next key and value of a map whose header u has read: *k and
 * *kl the key when it is a str (*k NULL for any other key, which names no
 * field), *v the value's bytes. 0, or SX_EPROTO when the bytes do not
 * decode. */
int sx__map_entry(sx_unpack *u, const char **k, size_t *kl, sx_payload *v);

#endif

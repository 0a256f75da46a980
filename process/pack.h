/* process/pack.h — the sx_pack writer's entry points for bytes that are
 * already msgpack: internal to stepx (the wire's framing,
 * relay/wire.c); never installed. The writer is process/pack.c.
 *
 * Threads: as sx_pack (one thread at a time per writer).
 */
#ifndef SX_PROCESS_PACK_H
#define SX_PROCESS_PACK_H

#include "process/stepx/process.h"

/* Appends the len bytes at b as they are, all or none, with the writer's
 * sticky errors (SX_ELIMIT: a fixed writer without room; SX_ENOMEM).
 * Unlike sx_pack_raw it does not read them: the caller has checked that
 * they are whole msgpack values (sx_wire_frame's body passed
 * sx_wire_check). */
int sx__pack_bytes(sx_pack *pk, const void *b, size_t len);

#endif

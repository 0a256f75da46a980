/* relay/wire.h — the part of the wire codec (relay/wire.c) that only
 * stepx itself uses: the server's UTF-8 rule for what it sends
 * (docs/PROTOCOL.md, "Payloads": a str that is not UTF-8 goes out as
 * bin), and the C client's framing of the requests it builds. Not
 * installed.
 *
 * Threads: [any thread] (pure; the server calls these on its loop thread
 * and in its engine callbacks, a client on its own thread).
 */
#ifndef SX_RELAY_WIRE_H
#define SX_RELAY_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "relay/stepx/relay.h"

/* sx_wire_check's walk over a body the server is about to send, looking
 * at the bytes of every str on the way: values at any depth and the keys
 * of nested maps, not the top-level keys (the server's own names, which
 * are always UTF-8). Returns what sx_wire_check returns (0, or
 * SX_EPROTO). *fixed_len (may be NULL) is 0 when every str looked at is
 * valid UTF-8 (the common case: one walk, nothing to copy), or on an
 * error; else the length of the body sx__wire_utf8_fix writes (at least
 * len: a fixstr's bin twin is a bin 8, one byte longer). */
int sx__wire_check_utf8(const uint8_t *body, size_t len, size_t *fixed_len);

/* Writes body (len bytes that sx__wire_check_utf8 passed with a non-zero
 * *fixed_len) to out (fixed_len bytes, not overlapping body) with every
 * str it looked at that is not valid UTF-8 as a bin of the same bytes:
 * fixstr and str 8 as bin 8, str 16 as bin 16, str 32 as bin 32.
 * Everything else is copied as it is. */
void sx__wire_utf8_fix(const uint8_t *body, size_t len, uint8_t *out);

/* The same for one msgpack value the server is about to put in a frame
 * (a payload: message data, a result), whose containers may nest at most
 * max_depth deep (the levels the frame leaves it: SX_WIRE_MAX_DEPTH - 1
 * for a value of the top-level map; at most SX_WIRE_MAX_DEPTH): 0 when
 * v[0, len) is exactly one such value (len 0 is not), with *fixed_len as
 * above (every str is looked at, map keys included); SX_EPROTO when not,
 * with *fixed_len 0. */
int sx__wire_value_utf8(const uint8_t *v, size_t len, size_t max_depth,
                        size_t *fixed_len);

/* sx__wire_utf8_fix for a value that sx__wire_value_utf8 passed. */
void sx__wire_value_fix(const uint8_t *v, size_t len, uint8_t *out);

/* sx__wire_value_utf8's walk without the UTF-8 look: 0 when v[0, len) is
 * exactly one msgpack value nested at most max_depth deep, else
 * SX_EPROTO. */
int sx__wire_value_check(const uint8_t *v, size_t len, size_t max_depth);

/* sx_wire_frame for a body its caller built so that it passes
 * sx_wire_check (one map with str keys, every value it did not write
 * itself walked by sx__wire_value_check at its depth): not walked again. */
int sx__wire_frame_built(sx_pack *pk, sx_payload body);

#endif

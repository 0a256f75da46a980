/* process/utf8.h — one UTF-8 check shared inside the project (not public):
 * the relay quotes client names with it, the CLI cleans error messages.
 *
 * Threads: [any thread] (pure).
 */
#ifndef SX_PROCESS_UTF8_H
#define SX_PROCESS_UTF8_H

#include <stddef.h>

/* The length (1-4) of the valid UTF-8 sequence at p, n > 0 bytes left, or
 * 0 when p starts none: a stray continuation byte, a cut sequence, an
 * overlong form, a surrogate, past U+10FFFF. A NUL counts as valid (1). */
size_t sx__utf8_seq(const unsigned char *p, size_t n);

#endif

/* process/utf8.h — one UTF-8 check shared inside the project (not public;
 * the functions that are not inline here are in process/utf8.c): the
 * relay quotes client names with it and keeps every str it sends UTF-8,
 * the CLI cleans error messages, and the engine and the relay check
 * message topics with it.
 *
 * Threads: [any thread] (pure).
 */
#ifndef SX_PROCESS_UTF8_H
#define SX_PROCESS_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The length (1-4) of the valid UTF-8 sequence at p, n > 0 bytes left, or
 * 0 when p starts none: a stray continuation byte, a cut sequence, an
 * overlong form, a surrogate, past U+10FFFF. A NUL counts as valid (1). */
size_t sx__utf8_seq(const unsigned char *p, size_t n);

/* Whether p[0, n) is valid UTF-8 (NUL bytes count as valid). Runs of
 * ASCII are checked 8 bytes at a time. */
bool sx__utf8_valid(const unsigned char *p, size_t n);

/* Whether p[0, n), n < 8, is ASCII, with no loop: two loads that overlap
 * (4 to 7 bytes: two of 4; 2 or 3: two of 2; 1: one byte). Inline, for
 * walks over many short strs (map keys, names); sx__utf8_valid decides
 * the rest. */
static inline bool sx__ascii_short(const unsigned char *p, size_t n)
{
    uint32_t a, b;
    uint16_t c, d;
    if (n >= 4) {
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        return ((a | b) & 0x80808080u) == 0;
    }
    if (n >= 2) {
        memcpy(&c, p, 2);
        memcpy(&d, p + n - 2, 2);
        return ((c | d) & 0x8080u) == 0;
    }
    return n == 0 || p[0] < 0x80;
}

/* Copies s[0, n) to out (cap bytes) with every byte that starts no valid
 * sequence (sx__utf8_seq) replaced by U+FFFD (3 bytes), stopping before
 * the first sequence or replacement that would not fit whole. Returns the
 * bytes written; with out NULL, writes nothing and returns the length of
 * the whole copy (cap ignored). */
size_t sx__utf8_replace(const unsigned char *s, size_t n, char *out,
                        size_t cap);

/* A message topic (sx_send, sx_engine_send, the send command, the relay's
 * send): at most SX__TOPIC_MAX bytes of valid UTF-8 without a NUL (the
 * receiver reads it as a C string; a client's strict msgpack reader
 * refuses a str that is not UTF-8). */
#define SX__TOPIC_MAX 255

/* Whether t[0, n) is a valid topic. */
bool sx__topic_ok(const char *t, size_t n);

/* sx__topic_ok for a C string t of n <= SX__TOPIC_MAX bytes (t[n] is its
 * NUL): ASCII is decided inline, in one pass that stops at the NUL or at
 * the first byte that is not ASCII (a signed compare catches both);
 * anything else goes to sx__topic_ok. For the send hooks, which run for
 * every message a step sends. */
static inline bool sx__topic_cstr_ok(const char *t, size_t n)
{
    const signed char *p = (const signed char *)t;
    while (*p > 0)
        p++;
    return *p == 0 || sx__topic_ok(t, n);
}

/* The length of the C string t when it is a valid topic, else SIZE_MAX:
 * one loop finds the length and checks the bytes (anything but ASCII goes
 * on to sx__topic_ok). */
size_t sx__topic_len(const char *t);

#endif

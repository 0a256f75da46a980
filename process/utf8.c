/* process/utf8.c — the UTF-8 checks of process/utf8.h: one sequence, a
 * whole string, a copy with bad bytes replaced, and message topics.
 *
 * Threads: [any thread] (pure).
 */
#include "process/utf8.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

size_t sx__utf8_seq(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t k;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        k = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        k = 4, cp = c & 0x07;
    else
        return 0;
    if (k > n)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    /* Overlong forms, surrogates, past U+10FFFF. */
    if ((k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return k;
}

/* p[0, n) from a sequence boundary on, one sequence at a time. */
static bool utf8_walk(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = sx__utf8_seq(p + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

bool sx__utf8_valid(const unsigned char *p, size_t n)
{
    /* ASCII first, with no loop per byte: a short string as two words
     * that overlap (sx__ascii_short), a long one a word at a time and its
     * tail as the last word (overlapping what was checked). The first
     * word that is not ASCII sends the rest to utf8_walk, from that word
     * on (a sequence boundary: everything before it is ASCII). */
    uint64_t w;
    if (n < 8)
        return sx__ascii_short(p, n) || utf8_walk(p, n);
    size_t i = 0;
    for (; n - i >= 8; i += 8) {
        memcpy(&w, p + i, 8);
        if ((w & 0x8080808080808080ull) != 0)
            return utf8_walk(p + i, n - i);
    }
    if (i < n) {
        memcpy(&w, p + n - 8, 8);
        if ((w & 0x8080808080808080ull) != 0)
            return utf8_walk(p + i, n - i);
    }
    return true;
}

size_t sx__utf8_replace(const unsigned char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = sx__utf8_seq(s + i, n - i);
        const void *piece = k != 0 ? (const void *)(s + i) : "\xef\xbf\xbd";
        size_t len = k != 0 ? k : 3;
        if (out != NULL) {
            if (len > cap - o)
                break;
            memcpy(out + o, piece, len);
        }
        o += len;
        i += k != 0 ? k : 1;
    }
    return o;
}

/* noinline, cold: sx__topic_cstr_ok calls it, inline in the send hooks,
 * only for a topic that is not ASCII; the hooks stay small. */
__attribute__((noinline, cold)) bool sx__topic_ok(const char *t, size_t n)
{
    const unsigned char *p = (const unsigned char *)t;
    if (n > SX__TOPIC_MAX)
        return false;
    for (size_t i = 0; i < n;) {
        if (p[i] == 0)
            return false;
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = sx__utf8_seq(p + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

size_t sx__topic_len(const char *t)
{
    const unsigned char *p = (const unsigned char *)t;
    for (size_t i = 0;; i++) {
        if (p[i] == 0)
            return i;
        if (i == SX__TOPIC_MAX)
            return SIZE_MAX; /* a 256th byte: too long */
        if (p[i] >= 0x80) {
            size_t n = i + strnlen(t + i, SX__TOPIC_MAX + 1 - i);
            return sx__topic_ok(t, n) ? n : SIZE_MAX;
        }
    }
}

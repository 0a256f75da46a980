/* process/pid.c — the text form of a PID: "{node@host|id}".
 *
 * Formatting and parsing are written out by hand rather than with snprintf
 * and strtoul: those accept signs, spaces and locale-dependent forms that the
 * grammar forbids, and strtoul reports overflow through errno.
 *
 * Threads: pure functions of their arguments; any thread.
 */
#include "process/stepx/process.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "00" "01" ... "99": two digits per division (a PID's id has 10 to 20). */
static const char pid_pairs[201] = "0001020304050607080910111213141516171819"
                                   "2021222324252627282930313233343536373839"
                                   "4041424344454647484950515253545556575859"
                                   "6061626364656667686970717273747576777879"
                                   "8081828384858687888990919293949596979899";

/* Writes v in decimal, most significant digit first, into out (which has room
 * for 20 digits) and returns the number of digits. */
static size_t pid_digits(uint64_t v, char *out)
{
    char tmp[20];
    char *end = tmp + sizeof(tmp), *p = end;
    while (v >= 100) {
        size_t r = (size_t)(v % 100);
        v /= 100;
        p -= 2;
        p[0] = pid_pairs[2 * r];
        p[1] = pid_pairs[2 * r + 1];
    }
    if (v >= 10) {
        p -= 2;
        p[0] = pid_pairs[2 * v];
        p[1] = pid_pairs[2 * v + 1];
    } else {
        *--p = (char)('0' + (int)v);
    }
    size_t n = (size_t)(end - p);
    for (size_t i = 0; i < n; i++)
        out[i] = p[i];
    return n;
}

int sx_pid_format(sx_pid pid, char *buf, size_t cap)
{
    /* Assemble on the stack first: the longest form is 44 characters, well
     * under SX_PID_TEXT_MAX, so the length is known before buf is touched. */
    char text[SX_PID_TEXT_MAX];
    size_t n = 0;

    if (buf == NULL)
        return SX_EINVAL;
    text[n++] = '{';
    n += pid_digits(pid.node, text + n);
    text[n++] = '@';
    n += pid_digits(pid.host, text + n);
    text[n++] = '|';
    n += pid_digits(pid.id, text + n);
    text[n++] = '}';
    if (cap < n + 1) {
        if (cap > 0)
            buf[0] = '\0';
        return SX_EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = text[i];
    buf[n] = '\0';
    return (int)n;
}

/* Reads one or more decimal digits at *pp into *out, rejecting a value above
 * max. Advances *pp past the digits on success. Only '0'..'9' count as digits
 * (isdigit may accept more under some locales). */
static bool pid_number(const char **pp, uint64_t max, uint64_t *out)
{
    const char *p = *pp;
    uint64_t v = 0;

    if (*p < '0' || *p > '9')
        return false;
    while (*p >= '0' && *p <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v) || v > max)
            return false;
        p++;
    }
    *pp = p;
    *out = v;
    return true;
}

int sx_pid_parse(const char *text, sx_pid *out)
{
    uint64_t node, host, id;
    const char *p = text;

    if (text == NULL || out == NULL)
        return SX_EINVAL;
    if (*p++ != '{' || !pid_number(&p, UINT32_MAX, &node) || *p++ != '@' ||
        !pid_number(&p, UINT32_MAX, &host) || *p++ != '|' ||
        !pid_number(&p, UINT64_MAX, &id) || *p++ != '}' || *p != '\0')
        return SX_EINVAL;
    out->node = (uint32_t)node;
    out->host = (uint32_t)host;
    out->id = id;
    return 0;
}

bool sx_pid_eq(sx_pid a, sx_pid b)
{
    return a.node == b.node && a.host == b.host && a.id == b.id;
}

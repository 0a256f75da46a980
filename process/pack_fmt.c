/* process/pack_fmt.c — the format-driven packer (sx_pack_fmt,
 * sx_pack_vfmt) on top of the sx_pack writer (process/pack.c), and the
 * step-output calls built on it: sx_yieldf and sx_donef.
 *
 * The format is read twice. The first pass checks all of it (letters,
 * brackets that match, maps with an even count, nesting) before anything
 * is written or any argument is read; the second writes. msgpack puts a
 * container's element count in its header, so when the second pass opens
 * a bracket it counts the values inside at that depth (a nested container
 * is one value) by scanning ahead to the matching close.
 *
 * Nesting is bounded by SX_UNPACK_MAX_DEPTH: a deeper format is SX_EINVAL,
 * since what it would pack could not be read back by sx_unpack_skip or
 * appended with sx_pack_raw.
 *
 * Threads: sx_pack_fmt and sx_pack_vfmt as the sx_pack writer (no shared
 * state; an sx_pack belongs to one thread at a time). sx_yieldf and
 * sx_donef only inside the step that received the output.
 */
#include "process/stepx/process.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Characters that separate values for the reader's eye and mean nothing. */
static bool fmt_blank(char c)
{
    return c == ' ' || c == ',' || c == ':' || c == '\t' || c == '\n' ||
           c == '\r';
}

/* Whether c is one of the value letters. */
static bool fmt_letter(char c)
{
    return c != '\0' && strchr("nbiIuUdsSypv", c) != NULL;
}

/* The first pass: 0 when fmt is well formed, else SX_EINVAL. Every
 * container's count is checked here (a map's is even, and it fits the
 * 32-bit header), so the second pass cannot meet a bad one. */
static int fmt_check(const char *fmt)
{
    char open[SX_UNPACK_MAX_DEPTH];
    size_t count[SX_UNPACK_MAX_DEPTH];
    size_t d = 0;

    for (const char *c = fmt; *c != '\0'; c++) {
        if (fmt_blank(*c))
            continue;
        if (fmt_letter(*c)) {
            if (d > 0)
                count[d - 1]++;
        } else if (*c == '[' || *c == '{') {
            if (d == SX_UNPACK_MAX_DEPTH)
                return SX_EINVAL;
            if (d > 0)
                count[d - 1]++;
            open[d] = *c;
            count[d] = 0;
            d++;
        } else if (*c == ']' || *c == '}') {
            if (d == 0 || open[d - 1] != (*c == ']' ? '[' : '{'))
                return SX_EINVAL;
            if (*c == '}' && count[d - 1] % 2 != 0)
                return SX_EINVAL;
            if ((uint64_t)(*c == '}' ? count[d - 1] / 2 : count[d - 1]) >
                UINT32_MAX)
                return SX_EINVAL;
            d--;
        } else {
            return SX_EINVAL;
        }
    }
    return d == 0 ? 0 : SX_EINVAL;
}

/* The number of values inside the container whose contents start at c (just
 * after its opening bracket), up to its matching close; fmt_check has
 * made sure that there is one and that the count fits. */
static size_t fmt_count(const char *c)
{
    size_t depth = 0, n = 0;

    for (;; c++) {
        if (*c == '[' || *c == '{') {
            if (depth++ == 0)
                n++;
        } else if (*c == ']' || *c == '}') {
            if (depth-- == 0)
                return n;
        } else if (depth == 0 && fmt_letter(*c)) {
            n++;
        }
    }
}

/* The second pass: writes every value of a checked fmt, reading the
 * arguments from *ap. Stops at the first error (pk's sticky one). */
static int fmt_emit(sx_pack *pk, const char *fmt, va_list *ap)
{
    int rc = 0;

    for (const char *c = fmt; *c != '\0' && rc == 0; c++) {
        switch (*c) {
        case 'n':
            rc = sx_pack_nil(pk);
            break;
        case 'b':
            rc = sx_pack_bool(pk, va_arg(*ap, int) != 0);
            break;
        case 'i':
            rc = sx_pack_int(pk, va_arg(*ap, int));
            break;
        case 'I':
            rc = sx_pack_int(pk, va_arg(*ap, int64_t));
            break;
        case 'u':
            rc = sx_pack_uint(pk, va_arg(*ap, unsigned));
            break;
        case 'U':
            rc = sx_pack_uint(pk, va_arg(*ap, uint64_t));
            break;
        case 'd':
            rc = sx_pack_double(pk, va_arg(*ap, double));
            break;
        case 's':
            rc = sx_pack_str(pk, va_arg(*ap, const char *));
            break;
        case 'S': {
            const char *s = va_arg(*ap, const char *);
            size_t n = va_arg(*ap, size_t);
            rc = sx_pack_strn(pk, s, n);
            break;
        }
        case 'y': {
            const void *p = va_arg(*ap, const void *);
            size_t n = va_arg(*ap, size_t);
            rc = sx_pack_bin(pk, p, n);
            break;
        }
        case 'p':
            rc = sx_pack_pid(pk, va_arg(*ap, sx_pid));
            break;
        case 'v':
            rc = sx_pack_raw(pk, va_arg(*ap, sx_payload));
            break;
        case '[':
            rc = sx_pack_array(pk, (uint32_t)fmt_count(c + 1));
            break;
        case '{':
            rc = sx_pack_map(pk, (uint32_t)(fmt_count(c + 1) / 2));
            break;
        default: /* closing brackets and blanks */
            break;
        }
    }
    return rc;
}

/* All or nothing: on any error pk's length goes back to where the call
 * found it, and the error is pk's sticky one (a bad format included, as
 * for the other sx_pack calls' bad arguments). */
int sx_pack_vfmt(sx_pack *pk, const char *fmt, va_list ap)
{
    va_list aq;
    size_t mark;
    int rc;

    if (pk == NULL)
        return SX_EINVAL;
    if (pk->err != 0)
        return pk->err;
    if (fmt == NULL || fmt_check(fmt) != 0)
        return pk->err = SX_EINVAL;
    mark = pk->len;
    /* A copy, so that the reads go through a pointer to a va_list of our
     * own: where va_list is an array type, &ap of a parameter is not a
     * va_list *. */
    va_copy(aq, ap);
    rc = fmt_emit(pk, fmt, &aq);
    va_end(aq);
    if (rc != 0)
        pk->len = mark;
    return rc;
}

int sx_pack_fmt(sx_pack *pk, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = sx_pack_vfmt(pk, fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- the step output, packed ---- */

/* Most arguments and results fit here; a bigger one is packed again on
 * the heap. */
#define FMT_STACK_BYTES 256

/* Packs fmt into fixed (storage buf), or when it does not fit there into
 * heap (initialised here; the caller finalises it). *pl is the bytes. ap
 * is read once per attempt, each from its own copy. */
static int fmt_pack_out(sx_pack *fixed, uint8_t *buf, sx_pack *heap,
                        const char *fmt, va_list ap, sx_payload *pl)
{
    va_list aq;
    int rc;

    sx_pack_init(heap);
    sx_pack_init_fixed(fixed, buf, FMT_STACK_BYTES);
    va_copy(aq, ap);
    rc = sx_pack_vfmt(fixed, fmt, aq);
    va_end(aq);
    if (rc == 0) {
        *pl = sx_pack_payload(fixed);
        return 0;
    }
    if (rc != SX_ELIMIT)
        return rc;
    va_copy(aq, ap);
    rc = sx_pack_vfmt(heap, fmt, aq);
    va_end(aq);
    if (rc == 0)
        *pl = sx_pack_payload(heap);
    return rc;
}

int sx_yieldf(sx_step_output *out, uint16_t cmd, uint64_t tag, const char *fmt,
              ...)
{
    uint8_t buf[FMT_STACK_BYTES];
    sx_pack fixed, heap;
    sx_payload pl = { NULL, 0 };
    va_list ap;
    int rc;

    if (out == NULL)
        return SX_EINVAL;
    va_start(ap, fmt);
    rc = fmt_pack_out(&fixed, buf, &heap, fmt, ap, &pl);
    va_end(ap);
    if (rc == 0)
        rc = sx_yield(out, cmd, tag, pl); /* copies the arguments */
    sx_pack_fini(&heap);
    return rc;
}

int sx_donef(sx_step_output *out, const char *fmt, ...)
{
    uint8_t buf[FMT_STACK_BYTES];
    sx_pack fixed, heap;
    sx_payload pl = { NULL, 0 };
    va_list ap;
    int rc;

    if (out == NULL)
        return SX_EINVAL;
    va_start(ap, fmt);
    rc = fmt_pack_out(&fixed, buf, &heap, fmt, ap, &pl);
    va_end(ap);
    if (rc == 0) {
        sx_done(out, pl); /* copies the result */
    } else {
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "sx_donef: the result could not be packed: %s (%s)",
                 sx_errname(rc), sx_strerror(rc));
        sx_fail_code(out, rc, msg);
    }
    sx_pack_fini(&heap);
    return rc;
}

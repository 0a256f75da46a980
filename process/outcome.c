/* process/outcome.c — answers as outcomes (value or error):
 * sx_outcome_of reads a completion event, sx_outcome_at one element of a
 * spawn-all answer with the sx_unpack reader (process/unpack.c).
 *
 * A spawn-all answer is an array with one element per child, in child
 * order; each element is a map, {"value": the child's result} for a child
 * that finished DONE, or {"error": a negative SX_E* code, "message": a
 * string} for one that ended in error (docs/COMMANDS.md). An element
 * with any other shape (a missing, extra or repeated key, a key or a
 * field of another type, an error code that is not negative) is
 * SX_EPROTO.
 *
 * Threads: [any thread] (no shared state; it reads the caller's bytes).
 */
#include "process/stepx/process.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static void outcome_clear(sx_outcome *o)
{
    o->error = 0;
    o->message.ptr = NULL;
    o->message.len = 0;
    o->value.data = NULL;
    o->value.len = 0;
}

/* An error without a message gets the code's own (sx_strerror). The
 * value is the event's data in both cases. */
int sx_outcome_of(const sx_event *ev, sx_outcome *o)
{
    if (o == NULL)
        return SX_EINVAL;
    outcome_clear(o);
    if (ev == NULL || ev->type != SX_EVENT_YIELD_COMPLETE)
        return SX_EINVAL;
    o->error = ev->error;
    o->value = ev->data;
    if (ev->error != 0) {
        const char *m = ev->error_msg;
        if (m == NULL)
            m = sx_strerror(ev->error);
        o->message.ptr = m;
        o->message.len = strlen(m);
    }
    return o->error;
}

/* Which keys an element may hold, one bit each. */
enum { KEY_VALUE = 1, KEY_ERROR = 2, KEY_MESSAGE = 4 };

static int key_of(const char *k, size_t n)
{
    if (n == 5 && memcmp(k, "value", 5) == 0)
        return KEY_VALUE;
    if (n == 5 && memcmp(k, "error", 5) == 0)
        return KEY_ERROR;
    if (n == 7 && memcmp(k, "message", 7) == 0)
        return KEY_MESSAGE;
    return 0;
}

/* Reads the element map at u into o: 0 or SX_EPROTO. */
static int element_read(sx_unpack *u, sx_outcome *o)
{
    uint32_t n;
    int seen = 0;

    if (sx_unpack_map(u, &n) != 0 || n < 1 || n > 2)
        return SX_EPROTO;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kl;
        int key;
        if (sx_unpack_str(u, &k, &kl) != 0)
            return SX_EPROTO;
        key = key_of(k, kl);
        if (key == 0 || (seen & key) != 0)
            return SX_EPROTO;
        seen |= key;
        if (key == KEY_VALUE) {
            if (sx_unpack_raw(u, &o->value) != 0)
                return SX_EPROTO;
        } else if (key == KEY_ERROR) {
            int64_t e;
            if (sx_unpack_int(u, &e) != 0 || e >= 0 || e < INT_MIN)
                return SX_EPROTO;
            o->error = (int)e;
        } else {
            if (sx_unpack_str(u, &o->message.ptr, &o->message.len) != 0)
                return SX_EPROTO;
        }
    }
    if (seen != KEY_VALUE && seen != (KEY_ERROR | KEY_MESSAGE))
        return SX_EPROTO;
    return 0;
}

/* o may be NULL (the element is only checked); on any error it is
 * zeroed. */
int sx_outcome_at(sx_payload all, size_t i, sx_outcome *o)
{
    sx_outcome tmp;
    sx_unpack u;
    uint32_t n;
    int rc;

    if (o == NULL)
        o = &tmp;
    outcome_clear(o);
    sx_unpack_init(&u, all);
    if (sx_unpack_array(&u, &n) != 0)
        return SX_EPROTO;
    if (i >= n)
        return SX_ENOTFOUND;
    for (size_t k = 0; k < i; k++)
        if (sx_unpack_skip(&u) != 0)
            return SX_EPROTO;
    if ((rc = element_read(&u, o)) != 0)
        outcome_clear(o);
    return rc;
}

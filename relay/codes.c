/* relay/codes.c — the protocol's error codes (docs/PROTOCOL.md,
 * "Errors"): the strings a reply's error.code carries, and the SX_E* code
 * each stands for.
 *
 * Threads: reads constant data only; any thread. Never allocates.
 */
#include "relay/stepx/relay.h"

#include <errno.h>
#include <string.h>

typedef struct {
    int error;        /* the SX_E* code                                  */
    const char *code; /* the protocol's string                           */
    size_t len;       /* strlen(code), so that lookups need no NUL       */
} code_entry;

#define CODE(e, s)                                                             \
    {                                                                          \
        e, s, sizeof(s) - 1                                                    \
    }

/* Both directions. Every SX_E* code appears once, every string once: for
 * these, sx_wire_error(sx_wire_code(e)) == e. The table is the one in
 * docs/PROTOCOL.md; keep them together. */
static const code_entry code_table[] = {
    CODE(SX_EPROTO, "bad_frame"),
    CODE(SX_EINVAL, "bad_request"),
    /* An op is the protocol's command: the engine's "unknown command" is
     * the nearest meaning, and it gives clients a code of its own. */
    CODE(SX_EUNKNOWN_COMMAND, "unknown_op"),
    CODE(SX_EUNKNOWN_TYPE, "unknown_type"),
    CODE(SX_EUNKNOWN_METHOD, "unknown_method"),
    CODE(SX_ENOTFOUND, "not_found"),
    CODE(SX_ECLOSED, "closed"),
    CODE(SX_ELIMIT, "limit"),
    CODE(SX_ESTOPPING, "stopping"),
    CODE(SX_ETIMEDOUT, "timeout"),
    CODE(SX_EFAILED, "failed"),
    CODE(SX_ETERMINATED, "terminated"),
    CODE(SX_ECANCELLED, "cancelled"),
    CODE(SX_ETOOLARGE, "too_large"),
    CODE(SX_ESTORAGE, "storage"),
    CODE(SX_ERESTART_LIMIT, "restart_limit"),
    CODE(SX_ENOCONNECTION, "noconnection"),
};

/* Strings only (no SX_E* code maps to them; the server picks them):
 * init_failed carries a type's init error, whatever its code, so a client
 * reads it as a failure; internal is any failure of the server's own
 * (out of memory, an OS error), which -EIO names without claiming more. */
static const code_entry code_only[] = {
    CODE(SX_EFAILED, "init_failed"),
    CODE(-EIO, "internal"),
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

const char *sx_wire_code(int error)
{
    for (size_t i = 0; i < N_OF(code_table); i++)
        if (code_table[i].error == error)
            return code_table[i].code;
    return "internal";
}

int sx_wire_error(const char *code, size_t len)
{
    if (code == NULL)
        return SX_EPROTO;
    for (size_t i = 0; i < N_OF(code_table); i++)
        if (code_table[i].len == len &&
            memcmp(code_table[i].code, code, len) == 0)
            return code_table[i].error;
    for (size_t i = 0; i < N_OF(code_only); i++)
        if (code_only[i].len == len &&
            memcmp(code_only[i].code, code, len) == 0)
            return code_only[i].error;
    return SX_EPROTO;
}

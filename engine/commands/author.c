/* engine/commands/author.c — the authoring helpers of engine.h for the
 * built-in commands: yields of spawn and spawn-wait with options, spawn-
 * all's arguments, yields with a retry policy, and exec's answer read
 * into a struct. They build and read payloads only; the commands
 * themselves are engine/commands/process.c, exec.c and helpers.c.
 *
 * Threads: the yield helpers inside the step that owns out; the rest any
 * thread.
 */
#include <stdio.h>
#include <string.h>

#include "engine/commands/commands.h"

/* sx_spawn_opts as the options map of the spawn commands; writes nothing
 * when every option is at its default. Returns how many keys it wrote. */
static uint32_t opts_count(const sx_spawn_opts *o)
{
    if (o == NULL)
        return 0;
    return (o->deadline_ms > 0) + (o->scope != SX_SCOPE_NONE) +
           (o->notify ? 1u : 0u) +
           (o->retry != NULL && o->retry->mode != SX_RESTART_NEVER ? 1u : 0u) +
           (o->node != 0 ? 1u : 0u) + (o->place != SX_PLACE_HERE ? 1u : 0u);
}

static int opts_check(const sx_spawn_opts *o)
{
    if (o == NULL)
        return 0;
    if (o->deadline_ms < 0 || o->scope < SX_SCOPE_NONE ||
        o->scope > SX_SCOPE_TERMINATE || o->place < SX_PLACE_HERE ||
        o->place > SX_PLACE_LEAST_LOADED ||
        (o->node != 0 && o->place != SX_PLACE_HERE))
        return SX_EINVAL;
    if (o->retry != NULL) {
        sx_restart_policy p = *o->retry;
        if (sx_restart_policy_check(&p) != 0)
            return SX_EINVAL;
    }
    return 0;
}

static void pack_policy(sx_pack *pk, const sx_restart_policy *r)
{
    sx_restart_policy p = *r;
    sx_restart_policy_check(&p); /* checked before: fills the defaults */
    sx_pack_map(pk, 3);
    sx_pack_str(pk, "max_restarts");
    sx_pack_uint(pk, p.max_restarts);
    sx_pack_str(pk, "backoff_min_ms");
    sx_pack_uint(pk, p.backoff_min_ms);
    sx_pack_str(pk, "backoff_max_ms");
    sx_pack_uint(pk, p.backoff_max_ms);
}

/* The options' key, value pairs (opts_count of them). */
static void pack_pairs(sx_pack *pk, const sx_spawn_opts *o)
{
    if (o->deadline_ms > 0) {
        sx_pack_str(pk, "deadline_ms");
        sx_pack_int(pk, o->deadline_ms);
    }
    if (o->scope != SX_SCOPE_NONE) {
        sx_pack_str(pk, "scope");
        sx_pack_str(pk, o->scope == SX_SCOPE_CANCEL ? "cancel" : "terminate");
    }
    if (o->notify) {
        sx_pack_str(pk, "notify");
        sx_pack_bool(pk, true);
    }
    if (o->retry != NULL && o->retry->mode != SX_RESTART_NEVER) {
        sx_pack_str(pk, "retry");
        pack_policy(pk, o->retry);
    }
    if (o->node != 0) {
        sx_pack_str(pk, "node");
        sx_pack_uint(pk, o->node);
    }
    if (o->place != SX_PLACE_HERE) {
        sx_pack_str(pk, "place");
        sx_pack_str(pk, o->place == SX_PLACE_ANY ? "any" : "least_loaded");
    }
}

static void pack_opts(sx_pack *pk, const sx_spawn_opts *o)
{
    sx_pack_map(pk, opts_count(o));
    pack_pairs(pk, o);
}

/* [type, method, [inputs from fmt...]] and the options when there are
 * any; fmt's top-level values are the inputs. */
static int pack_spawn(sx_pack *pk, const sx_spawn_opts *o, const char *type,
                      const char *method, const char *fmt, va_list ap)
{
    if (type == NULL || method == NULL || opts_check(o) != 0)
        return SX_EINVAL;
    uint32_t k = opts_count(o);
    sx_pack_array(pk, k > 0 ? 4 : 3);
    sx_pack_str(pk, type);
    sx_pack_str(pk, method);
    /* The inputs as one array: fmt inside brackets. */
    char wrapped[512];
    int n = snprintf(wrapped, sizeof wrapped, "[%s]", fmt != NULL ? fmt : "");
    if (n < 0 || (size_t)n >= sizeof wrapped)
        return SX_EINVAL;
    int rc = sx_pack_vfmt(pk, wrapped, ap);
    if (rc != 0)
        return rc;
    if (k > 0)
        pack_opts(pk, o);
    return pk->err;
}

int sx_yield_spawn(sx_step_output *out, uint16_t cmd, uint64_t tag,
                   const sx_spawn_opts *opts, const char *type,
                   const char *method, const char *fmt, ...)
{
    if (cmd != SX_CMD_SPAWN && cmd != SX_CMD_SPAWN_WAIT)
        return SX_EINVAL;
    uint8_t buf[512];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    va_list ap;
    va_start(ap, fmt);
    int rc = pack_spawn(&pk, opts, type, method, fmt, ap);
    va_end(ap);
    if (rc == SX_ELIMIT) { /* too big for the stack: again, on the heap */
        sx_pack_init(&pk);
        va_start(ap, fmt);
        rc = pack_spawn(&pk, opts, type, method, fmt, ap);
        va_end(ap);
    }
    if (rc == 0)
        rc = sx_yield(out, cmd, tag, sx_pack_payload(&pk));
    sx_pack_fini(&pk);
    return rc;
}

int sx_spawn_all_begin(sx_pack *pk, uint32_t n_children,
                       const sx_spawn_opts *opts)
{
    if (pk == NULL || n_children > SX_SPAWN_ALL_MAX || opts_check(opts) != 0 ||
        (opts != NULL && opts->notify))
        return SX_EINVAL;
    uint32_t k = opts_count(opts);
    sx_pack_map(pk, k + 1);
    if (k > 0) /* the options' pairs, then children last */
        pack_pairs(pk, opts);
    sx_pack_str(pk, "children");
    sx_pack_array(pk, n_children);
    return pk->err;
}

int sx_spawn_all_child(sx_pack *pk, const char *type, const char *method,
                       const char *fmt, ...)
{
    if (pk == NULL)
        return SX_EINVAL;
    va_list ap;
    va_start(ap, fmt);
    int rc = pack_spawn(pk, NULL, type, method, fmt, ap);
    va_end(ap);
    return rc;
}

int sx_yield_with(sx_step_output *out, uint16_t cmd, uint64_t tag,
                  sx_payload args, const sx_yield_opts *opts)
{
    if (opts == NULL || opts->retry == NULL ||
        opts->retry->mode == SX_RESTART_NEVER)
        return sx_yield_timeout(out, cmd, tag, args,
                                opts != NULL ? opts->timeout_ms : 0);
    sx_restart_policy p = *opts->retry;
    if (sx_restart_policy_check(&p) != 0 || opts->timeout_ms < 0 ||
        (args.data == NULL && args.len > 0))
        return SX_EINVAL;
    /* A spawn-wait of an "@retry" child (commands/helpers.c): [cmd, args,
     * [max_restarts, backoff_min_ms, backoff_max_ms], timeout_ms, tag],
     * ended with this process. */
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_array(&pk, 4);
    sx_pack_str(&pk, "@retry");
    sx_pack_str(&pk, "run");
    sx_pack_array(&pk, 5);
    sx_pack_uint(&pk, cmd);
    sx_pack_raw(&pk, args);
    sx_pack_array(&pk, 3);
    sx_pack_uint(&pk, p.max_restarts);
    sx_pack_uint(&pk, p.backoff_min_ms);
    sx_pack_uint(&pk, p.backoff_max_ms);
    sx_pack_int(&pk, opts->timeout_ms);
    sx_pack_uint(&pk, tag);
    sx_pack_map(&pk, 1);
    sx_pack_str(&pk, "scope");
    sx_pack_str(&pk, "terminate");
    int rc = pk.err;
    if (rc == 0)
        rc = sx_yield(out, SX_CMD_SPAWN_WAIT, tag, sx_pack_payload(&pk));
    sx_pack_fini(&pk);
    return rc;
}

int sx_exec_result_get(sx_payload answer, sx_exec_result *r)
{
    if (r == NULL)
        return SX_EINVAL;
    memset(r, 0, sizeof *r);
    sx_unpack u;
    uint32_t n;
    bool have_status = false, have_signal = false, have_out = false,
         have_err = false;
    sx_unpack_init(&u, answer);
    if (sx_unpack_map(&u, &n) != 0)
        goto bad;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kn;
        int64_t v;
        if (sx_unpack_str(&u, &k, &kn) != 0)
            goto bad;
#define KEY(s) (kn == sizeof(s) - 1 && memcmp(k, s, kn) == 0)
        if (KEY("status") || KEY("signal")) {
            bool status = KEY("status");
            if (sx_unpack_nil(&u) == 0)
                continue;
            if (sx_unpack_int(&u, &v) != 0 || v < INT32_MIN || v > INT32_MAX)
                goto bad;
            if (status) {
                r->status = (int)v;
                have_status = true;
            } else {
                r->signal = (int)v;
                have_signal = true;
            }
        } else if (KEY("stdout") || KEY("stderr")) {
            sx_str *s = KEY("stdout") ? &r->out : &r->err;
            const void *p;
            size_t len;
            if (sx_unpack_bin(&u, &p, &len) != 0 &&
                sx_unpack_str(&u, (const char **)&p, &len) != 0)
                goto bad;
            s->ptr = len > 0 ? p : "";
            s->len = len;
            *(KEY("stdout") ? &have_out : &have_err) = true;
        } else if (KEY("truncated")) {
            if (sx_unpack_bool(&u, &r->truncated) != 0)
                goto bad;
        } else if (KEY("stdout_total")) {
            if (sx_unpack_uint(&u, &r->out_total) != 0)
                goto bad;
        } else if (KEY("stderr_total")) {
            if (sx_unpack_uint(&u, &r->err_total) != 0)
                goto bad;
        } else if (sx_unpack_skip(&u) != 0) {
            goto bad;
        }
#undef KEY
    }
    if (have_status == have_signal || !have_out || !have_err)
        goto bad;
    r->exited = have_status;
    return 0;
bad:
    memset(r, 0, sizeof *r);
    return SX_EPROTO;
}

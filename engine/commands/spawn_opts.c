/* engine/commands/spawn_opts.c — the arguments of the spawn commands:
 * [type, method, [input...]] read (sx__spawn_args_decode), and their
 * options (docs/COMMANDS.md, "Spawn options"): the options map read into a
 * sx__spawnx and a retry policy, and written back; a command run by an
 * "@retry" child (engine/commands/helpers.c) with its retry policy; exec's
 * args less their "retry" key; spawn-all's args split into its children
 * and the options they share.
 *
 * Threads: [worker] (the command handlers that call them).
 */
#include <stdio.h>
#include <string.h>

#include "engine/commands/commands.h"
#include "process/mpformat.h" /* sx__mp_scalar_span */

/* ---- [type, method, [input...]] ---- */

static int copy_str(sx_unpack *u, char *buf, size_t cap)
{
    const char *s;
    size_t n;
    int rc = sx_unpack_str(u, &s, &n);
    if (rc != 0)
        return rc;
    if (n >= cap)
        return SX_EINVAL;
    /* A NUL inside would cut the name short: "worker\0x" is not the type
     * "worker". Checked as it is copied, byte by byte: names are a few
     * bytes, and a memchr's or memcpy's call costs more than the loop
     * (skynet: ~25 instructions a name each, callgrind). */
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\0')
            return SX_EINVAL;
        buf[i] = s[i];
    }
    buf[n] = 0;
    return 0;
}

/* A fixstr name at *pp (at most 31 bytes, the common case) without NUL,
 * copied with a NUL into buf (256 bytes); false when it is anything else,
 * for the general path to read or refuse. */
static inline bool fast_name(const uint8_t **pp, const uint8_t *end, char *buf)
{
    const uint8_t *p = *pp;
    if (p >= end || (p[0] & 0xe0) != 0xa0)
        return false;
    size_t n = p[0] & 0x1fu;
    if (n >= (size_t)(end - p))
        return false; /* its body is not all there */
    if (n <= 8 && end - p > 8) {
        /* Up to 8 bytes in one load: a NUL among the name's n bytes
         * leaves a high bit in the low n bytes of z, the name's first
         * byte lowest (a borrow marks only bytes above a zero byte, so
         * none is marked without one). */
        uint64_t v, lo = n == 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * n)) - 1;
        memcpy(&v, p + 1, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        /* The name's first byte lowest, as on little-endian. */
        uint64_t le = __builtin_bswap64(v);
#else
        uint64_t le = v;
#endif
        uint64_t z = (le - 0x0101010101010101u) & ~le & 0x8080808080808080u;
        if ((z & lo) != 0)
            return false;
        memcpy(buf, &v, 8); /* buf holds 256 */
    } else {
        for (size_t i = 0; i < n; i++) {
            if (p[1 + i] == 0)
                return false;
            buf[i] = (char)p[1 + i];
        }
    }
    buf[n] = 0;
    *pp = p + 1 + n;
    return true;
}

_Static_assert(SX__SPAWN_MAX_INPUT >= 15, "a fixarray of inputs always fits");

/* sx__spawn_args_decode in one pass, for the common shape: [type, method] or
 * [type, method, [input...]] with fixstr names and up to 15 inputs whose
 * first byte says their size (integers, nil, bools, floats, fixstrs:
 * sx__mp_scalar_span). false for anything else, which the general path
 * reads (or refuses) from the start: what it accepts, this gives the same
 * fields for. One look per value instead of an sx_unpack call each: a
 * spawn of skynet's shape (two 3-byte names, two integers) decodes in
 * ~180 instructions instead of ~245 (callgrind). */
static bool spawn_decode_fast(sx_payload args, sx__spawn_args *a)
{
    const uint8_t *p = args.data;
    if (p == NULL || args.len < 3 || (p[0] != 0x92 && p[0] != 0x93))
        return false;
    const uint8_t *end = p + args.len;
    bool inputs = p[0] == 0x93;
    p++;
    if (!fast_name(&p, end, a->type) || !fast_name(&p, end, a->method))
        return false;
    size_t m = 0;
    if (inputs) {
        if (p >= end || (p[0] & 0xf0) != 0x90)
            return false;
        m = p[0] & 0x0fu; /* a fixarray: up to 15 */
        p++;
        for (size_t i = 0; i < m; i++) {
            size_t span = p >= end       ? 0
                          : p[0] <= 0x7f ? 1 /* a small integer: no call */
                                         : sx__mp_scalar_span(p[0]);
            if (span == 0 || span > (size_t)(end - p))
                return false;
            a->input[i] = (sx_payload){ p, span };
            p += span;
        }
    }
    a->n_input = m;
    a->opts.data = NULL;
    return true;
}

int sx__spawn_args_decode(sx_payload args, sx__spawn_args *a, int how)
{
    if (how != SX__SPAWN_READ_GENERAL && spawn_decode_fast(args, a))
        return 0;
    if (how == SX__SPAWN_READ_FAST)
        return SX_EINVAL;
    sx_unpack u;
    sx_unpack_init(&u, args);
    uint32_t n, m = 0;
    if (sx_unpack_array(&u, &n) != 0 || n < 2 || n > 4 ||
        copy_str(&u, a->type, sizeof(a->type)) != 0 ||
        copy_str(&u, a->method, sizeof(a->method)) != 0)
        return SX_EINVAL;
    if (n >= 3 && (sx_unpack_array(&u, &m) != 0 || m > SX__SPAWN_MAX_INPUT))
        return SX_EINVAL;
    for (uint32_t i = 0; i < m; i++)
        if (sx_unpack_raw(&u, &a->input[i]) != 0)
            return SX_EINVAL;
    a->n_input = m;
    a->opts.data = NULL;
    if (n == 4 && sx_unpack_raw(&u, &a->opts) != 0)
        return SX_EINVAL;
    return 0;
}

/* ---- the options ---- */

static bool key_is(const char *k, size_t kn, const char *want)
{
    return strlen(want) == kn && memcmp(k, want, kn) == 0;
}

/* A retry policy as a map {max_restarts, backoff_min_ms, backoff_max_ms}
 * (each optional, 1 to 4,294,967,295), or nil for none. */
static int retry_decode(sx_unpack *u, sx_restart_policy *p, bool *has,
                        char *why, size_t cap)
{
    *has = false;
    if (sx_unpack_nil(u) == 0)
        return 0;
    uint32_t n;
    memset(p, 0, sizeof *p);
    p->mode = SX_RESTART_ON_FAILURE;
    if (sx_unpack_map(u, &n) != 0)
        goto bad;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kn;
        uint64_t v;
        if (sx_unpack_str(u, &k, &kn) != 0 || sx_unpack_uint(u, &v) != 0 ||
            v == 0 || v > UINT32_MAX)
            goto bad;
        if (key_is(k, kn, "max_restarts"))
            p->max_restarts = (uint32_t)v;
        else if (key_is(k, kn, "backoff_min_ms"))
            p->backoff_min_ms = (uint32_t)v;
        else if (key_is(k, kn, "backoff_max_ms"))
            p->backoff_max_ms = (uint32_t)v;
        else
            goto bad;
    }
    if (sx_restart_policy_check(p) != 0)
        goto bad;
    *has = true;
    return 0;
bad:
    snprintf(why, cap,
             "retry must be nil or a map {max_restarts, backoff_min_ms, "
             "backoff_max_ms} of integers from 1 to 4294967295 "
             "(max_restarts at most 1000000, backoff_min_ms not over "
             "backoff_max_ms)");
    return SX_EINVAL;
}

int sx__spawn_opts_decode(sx_payload opts, sx__spawnx *x,
                          sx_restart_policy *retry, bool *has_retry, char *why,
                          size_t cap)
{
    memset(x, 0, sizeof *x);
    x->deadline_ms = -1;
    *has_retry = false;
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, opts);
    if (sx_unpack_nil(&u) == 0)
        return sx_unpack_done(&u) ? 0 : SX_EINVAL;
    if (sx_unpack_map(&u, &n) != 0) {
        snprintf(why, cap,
                 "options must be a map {deadline_ms, scope, notify, retry, "
                 "node, place}");
        return SX_EINVAL;
    }
    for (uint32_t i = 0; i < n; i++) {
        const char *k, *s;
        size_t kn, sn;
        int64_t v;
        bool b;
        if (sx_unpack_str(&u, &k, &kn) != 0) {
            snprintf(why, cap, "option names must be strings");
            return SX_EINVAL;
        }
        if (key_is(k, kn, "deadline_ms")) {
            if (sx_unpack_int(&u, &v) != 0 || v < 0 || v > ((int64_t)1 << 40)) {
                snprintf(why, cap,
                         "deadline_ms must be an integer from 0 to 2^40 "
                         "(0: the type's)");
                return SX_EINVAL;
            }
            x->deadline_ms = v > 0 ? v : -1;
        } else if (key_is(k, kn, "scope")) {
            bool str = sx_unpack_str(&u, &s, &sn) == 0;
            if (str && key_is(s, sn, "none"))
                x->scope = SX_SCOPE_NONE;
            else if (str && key_is(s, sn, "cancel"))
                x->scope = SX_SCOPE_CANCEL;
            else if (str && key_is(s, sn, "terminate"))
                x->scope = SX_SCOPE_TERMINATE;
            else {
                snprintf(why, cap,
                         "scope must be \"none\", \"cancel\" or "
                         "\"terminate\"");
                return SX_EINVAL;
            }
        } else if (key_is(k, kn, "notify")) {
            if (sx_unpack_bool(&u, &b) != 0) {
                snprintf(why, cap, "notify must be a bool");
                return SX_EINVAL;
            }
            x->notify = b;
        } else if (key_is(k, kn, "retry")) {
            int rc = retry_decode(&u, retry, has_retry, why, cap);
            if (rc != 0)
                return rc;
        } else if (key_is(k, kn, "node")) {
            uint64_t nv;
            if (sx_unpack_uint(&u, &nv) != 0 || nv == 0 || nv > UINT32_MAX) {
                snprintf(why, cap,
                         "node must be a node number from 1 to 4294967295");
                return SX_EINVAL;
            }
            x->node = (uint32_t)nv;
        } else if (key_is(k, kn, "place")) {
            bool str = sx_unpack_str(&u, &s, &sn) == 0;
            if (str && key_is(s, sn, "here"))
                x->place = SX_PLACE_HERE;
            else if (str && key_is(s, sn, "any"))
                x->place = SX_PLACE_ANY;
            else if (str && key_is(s, sn, "least_loaded"))
                x->place = SX_PLACE_LEAST_LOADED;
            else {
                snprintf(why, cap,
                         "place must be \"here\", \"any\" or "
                         "\"least_loaded\"");
                return SX_EINVAL;
            }
        } else {
            snprintf(why, cap, "unknown option \"%.*s\"",
                     (int)(kn > 64 ? 64 : kn), k);
            return SX_EINVAL;
        }
    }
    if (!sx_unpack_done(&u)) {
        snprintf(why, cap, "options must be one map");
        return SX_EINVAL;
    }
    if (x->node != 0 && x->place != SX_PLACE_HERE) {
        snprintf(why, cap, "node names the node: place has nothing to choose");
        return SX_EINVAL;
    }
    return 0;
}

void sx__spawn_opts_pack(sx_pack *pk, const sx__spawnx *x)
{
    uint32_t n = (x->deadline_ms > 0) + (x->scope != SX_SCOPE_NONE) +
                 (x->notify ? 1u : 0u) + (x->node != 0 ? 1u : 0u) +
                 (x->place != SX_PLACE_HERE ? 1u : 0u);
    sx_pack_map(pk, n);
    if (x->deadline_ms > 0) {
        sx_pack_str(pk, "deadline_ms");
        sx_pack_int(pk, x->deadline_ms);
    }
    if (x->scope != SX_SCOPE_NONE) {
        sx_pack_str(pk, "scope");
        sx_pack_str(pk, x->scope == SX_SCOPE_CANCEL ? "cancel" : "terminate");
    }
    if (x->notify) {
        sx_pack_str(pk, "notify");
        sx_pack_bool(pk, true);
    }
    if (x->node != 0) {
        sx_pack_str(pk, "node");
        sx_pack_uint(pk, x->node);
    }
    if (x->place != SX_PLACE_HERE) {
        sx_pack_str(pk, "place");
        sx_pack_str(pk, x->place == SX_PLACE_ANY ? "any" : "least_loaded");
    }
}

int sx__retry_spawn(sx_engine *e, sx_pid parent, uint64_t tag, uint16_t cmd,
                    sx_payload inner, const sx_restart_policy *p,
                    int64_t timeout_ms, sx_completer *done)
{
    uint8_t cbuf[SX_PAYLOAD_INT_MAX], tbuf[SX_PAYLOAD_INT_MAX];
    uint8_t gbuf[16], pbuf[32];
    sx_pack tg, pol;
    sx_pack_init_fixed(&tg, gbuf, sizeof gbuf);
    sx_pack_uint(&tg, tag);
    sx_pack_init_fixed(&pol, pbuf, sizeof pbuf);
    sx_pack_array(&pol, 3);
    sx_pack_uint(&pol, p->max_restarts);
    sx_pack_uint(&pol, p->backoff_min_ms);
    sx_pack_uint(&pol, p->backoff_max_ms);
    sx_payload in[5] = { sx_payload_int(cbuf, cmd), inner,
                         sx_pack_payload(&pol),
                         sx_payload_int(tbuf, timeout_ms),
                         sx_pack_payload(&tg) };
    sx__spawnx x = { .deadline_ms = -1, .scope = SX_SCOPE_TERMINATE };
    done->ev.watch = SX__WATCH_RESULT;
    int rc =
        sx__spawn_opt(e, parent, "@retry", "run", in, 5, &done->ev, NULL, &x);
    if (rc != 0)
        done->ev.watch = 0;
    return rc;
}

int sx__retry_args(sx_engine *e, sx_pid parent, uint64_t tag, uint16_t cmd,
                   sx_payload args, const char *name, sx_completer *done)
{
    sx_unpack u;
    uint32_t n;
    sx_pack pk;
    sx_restart_policy p;
    bool has = false;
    char why[200], msg[260];
    sx_pack_init(&pk);
    sx_unpack_init(&u, args);
    int rc = sx_unpack_map(&u, &n) != 0 ? SX_EINVAL : 0;
    /* The pairs kept: all but "retry", which must come once. */
    uint32_t retries = 0;
    sx_unpack again = u;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        const char *k;
        size_t kn;
        if (sx_unpack_str(&again, &k, &kn) != 0 || sx_unpack_skip(&again) != 0)
            rc = SX_EINVAL;
        else
            retries += key_is(k, kn, "retry");
    }
    if (rc == 0 && (!sx_unpack_done(&again) || retries != 1)) {
        snprintf(msg, sizeof msg, "%s: %s", name,
                 retries > 1 ? "argument \"retry\" given twice"
                             : "args must be one map");
        sx_pack_fini(&pk);
        sx_complete(done, (sx_payload){ NULL, 0 }, SX_EINVAL, msg);
        return 0;
    }
    if (rc == 0) {
        sx_pack_map(&pk, n - 1);
        for (uint32_t i = 0; i < n && rc == 0; i++) {
            const char *k;
            size_t kn;
            sx_payload v;
            if (sx_unpack_str(&u, &k, &kn) != 0) {
                rc = SX_EINVAL;
            } else if (key_is(k, kn, "retry")) {
                rc = retry_decode(&u, &p, &has, why, sizeof why);
                if (rc != 0) {
                    snprintf(msg, sizeof msg, "%s: %s", name, why);
                    sx_pack_fini(&pk);
                    sx_complete(done, (sx_payload){ NULL, 0 }, rc, msg);
                    return 0;
                }
            } else if (sx_unpack_raw(&u, &v) != 0) {
                rc = SX_EINVAL;
            } else {
                sx_pack_strn(&pk, k, kn);
                sx_pack_raw(&pk, v);
            }
        }
    }
    if (rc == 0 && pk.err != 0)
        rc = pk.err;
    if (rc == 0 && !has) {
        /* retry: nil, so no retry: the command as if it had none. */
        const sx__cmd *c = &e->cmds[cmd];
        rc = c->fn(c->user, e, parent, tag, sx_pack_payload(&pk), done);
        sx_pack_fini(&pk);
        return rc;
    }
    if (rc == 0)
        rc = sx__retry_spawn(e, parent, tag, cmd, sx_pack_payload(&pk), &p, 0,
                             done);
    sx_pack_fini(&pk);
    if (rc == SX_EINVAL) {
        snprintf(msg, sizeof msg, "%s: args must be one map", name);
        sx_complete(done, (sx_payload){ NULL, 0 }, rc, msg);
        return 0;
    }
    return rc;
}

int sx__spawn_all_split(sx_payload args, sx_payload *children, sx_pack *opts,
                        char *why, size_t cap)
{
    sx_unpack u;
    uint32_t n;
    sx_unpack_init(&u, args);
    children->data = NULL;
    children->len = 0;
    if (sx_unpack_map(&u, &n) != 0)
        goto bad;
    uint32_t others = 0;
    sx_unpack again = u;
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kn;
        if (sx_unpack_str(&again, &k, &kn) != 0 || sx_unpack_skip(&again) != 0)
            goto bad;
        others += !key_is(k, kn, "children");
    }
    if (!sx_unpack_done(&again))
        goto bad;
    if (others > 0)
        sx_pack_map(opts, others);
    for (uint32_t i = 0; i < n; i++) {
        const char *k;
        size_t kn;
        sx_payload v;
        sx_unpack_str(&u, &k, &kn);
        sx_unpack_raw(&u, &v);
        if (key_is(k, kn, "children")) {
            *children = v;
        } else {
            sx_pack_strn(opts, k, kn);
            sx_pack_raw(opts, v);
        }
    }
    if (children->data == NULL)
        goto bad;
    return opts->err;
bad:
    snprintf(why, cap,
             "args must be one map {children: [[type, method, [input...], "
             "opts]...], options...}");
    return SX_EINVAL;
}

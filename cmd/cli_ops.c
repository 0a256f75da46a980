/* cmd/cli_ops.c — the stepx CLI's request-and-reply commands: send, wait,
 * cancel, kill, ps, stats and types, and the human renderings they share
 * (tables, trees). submit is cmd/cli_submit.c.
 * Threads: the CLI's one thread.
 */
#include "cmd/cli.h"

#include <stdlib.h>
#include <string.h>

/* A wait is asked in slices of this many ms so that a long one can show
 * progress; the reply may take this much longer before the CLI gives up
 * on the connection. */
#define WAIT_SLICE_MS CLI_WAIT_SLICE_MS
#define REPLY_MARGIN_MS CLI_REPLY_MARGIN_MS

/* ---- request building ---- */

static void pid_text(sx_pid pid, char *buf)
{
    sx_pid_format(pid, buf, SX_PID_TEXT_MAX);
}

/* {"op": op, "pid": pid} (the common shape), leaving room for extra
 * pairs: the map holds 2 + extra entries. */
static void pack_pid_op(sx_pack *pk, const char *op, const char *key,
                        sx_pid pid, uint32_t extra)
{
    char text[SX_PID_TEXT_MAX];
    pid_text(pid, text);
    sx_pack_map(pk, 2 + extra);
    sx_pack_str(pk, "op");
    sx_pack_str(pk, op);
    sx_pack_str(pk, key);
    sx_pack_str(pk, text);
}

int cli_run(cli *c, const char *what, sx_pack *pk, int64_t timeout_ms,
            const char *const *pass, sx_reply *out)
{
    int rc;
    if (pk->err != 0) {
        rc = cli_fail(CLI_INTERNAL, "%s: cannot build the request: %s", what,
                      sx_strerror(pk->err));
    } else {
        rc = cli_request(c, what, sx_pack_payload(pk), timeout_ms, pass, out);
    }
    sx_pack_fini(pk);
    return rc;
}

/* An ok reply with nothing to say: "text" for people, {"ok": true, ...}
 * for scripts. */
int cli_print_ok(cli *c, const char *human, json_t *fields)
{
    if (c->a->json) {
        json_t *o = fields != NULL ? fields : json_object();
        json_object_set_new(o, "ok", json_true());
        cli_json_print(o);
        json_decref(o);
    } else {
        puts(human);
        json_decref(fields);
    }
    return CLI_OK;
}

/* ---- wait ---- */

int cli_wait_pid(cli *c, sx_pid pid, int64_t deadline_ms, cli_progress *p,
                 const char *label, sx_reply *out)
{
    static const char *const pass[] = { "timeout",   "failed",    "terminated",
                                        "cancelled", "too_large", NULL };
    char text[SX_PID_TEXT_MAX];
    pid_text(pid, text);
    for (;;) {
        int64_t slice = WAIT_SLICE_MS;
        if (deadline_ms >= 0) {
            int64_t left = deadline_ms - cli_now_ms();
            if (left <= 0) {
                sx_reply r = { .code = "timeout",
                               .message = "still running at the deadline "
                                          "(--timeout)" };
                return cli_reply_error(c, text, &r,
                                       json_pack("{s:s}", "pid", text));
            }
            if (left < slice)
                slice = left;
        }
        sx_pack pk;
        sx_pack_init(&pk);
        pack_pid_op(&pk, "wait", "pid", pid, 1);
        sx_pack_str(&pk, "timeout_ms");
        sx_pack_int(&pk, slice);
        int rc = cli_run(c, "wait", &pk, slice + REPLY_MARGIN_MS, pass, out);
        if (rc != 0 || out->ok || out->code == NULL ||
            strcmp(out->code, "timeout") != 0)
            return rc;
        sx_reply_free(out);
        if (p != NULL)
            cli_progress_show(c, p, "%s", label);
    }
}

int cli_print_outcome(cli *c, const char *pid, const sx_reply *r)
{
    if (!r->ok)
        return cli_reply_error(c, pid, r, json_pack("{s:s}", "pid", pid));
    json_t *result = cli_get_json(r->body, "result");
    uint64_t steps = 0, attempts = 1;
    cli_get_u64(r->body, "steps", &steps);
    cli_get_u64(r->body, "attempts", &attempts);
    if (result == NULL)
        return cli_fail(CLI_INTERNAL, "%s: the reply's result cannot be read",
                        pid);
    if (c->a->json) {
        json_t *o = json_pack("{s:s,s:b,s:O,s:I,s:I}", "pid", pid, "ok", 1,
                              "result", result, "steps", (json_int_t)steps,
                              "attempts", (json_int_t)attempts);
        /* A submit with wait whose key named an earlier job. */
        if (o != NULL && cli_get_true(r->body, "existing"))
            json_object_set_new(o, "existing", json_true());
        cli_json_print(o);
        json_decref(o);
    } else {
        char *t = cli_json_text(result);
        /* The attempt when it is not the first (a restart, or a run
         * after the daemon restarted). */
        char at[48] = "";
        if (attempts > 1)
            snprintf(at, sizeof at, " (attempt %llu)",
                     (unsigned long long)attempts);
        printf("%s done in %llu steps%s: %s\n", pid, (unsigned long long)steps,
               at, t != NULL ? t : "?");
        free(t);
    }
    json_decref(result);
    return CLI_OK;
}

int64_t cli_wait_deadline(const cli *c)
{
    return c->a->timeout_ms >= 0 ? cli_now_ms() + c->a->timeout_ms : -1;
}

/* Waits until deadline_ms (< 0: none) for one process with a "waiting for
 * PID... N s" line, then prints its outcome: 0 or an exit code. */
int cli_wait_until(cli *c, sx_pid pid, int64_t deadline_ms)
{
    char text[SX_PID_TEXT_MAX], label[SX_PID_TEXT_MAX + 16];
    pid_text(pid, text);
    snprintf(label, sizeof label, "waiting for %s", text);
    cli_progress p;
    cli_progress_start(&p);
    sx_reply r;
    int rc = cli_wait_pid(c, pid, deadline_ms, &p, label, &r);
    cli_progress_end(c, &p);
    if (rc != 0)
        return rc;
    rc = cli_print_outcome(c, text, &r);
    sx_reply_free(&r);
    return rc;
}

static int wait_one(cli *c, sx_pid pid)
{
    return cli_wait_until(c, pid, cli_wait_deadline(c));
}

int cli_cmd_wait(cli *c)
{
    sx_pid pid;
    int rc = cli_parse_pid(c, c->a->pos[0], &pid);
    return rc != 0 ? rc : wait_one(c, pid);
}

/* ---- send, cancel, kill ---- */

int cli_cmd_send(cli *c)
{
    const cli_args *a = c->a;
    /* The JSON first: a usage error needs no daemon. */
    json_t *data = cli_json_parse(a->pos[2], "the message");
    if (data == NULL)
        return CLI_USAGE;
    sx_pid pid;
    int rc = cli_parse_pid(c, a->pos[0], &pid);
    if (rc != 0) {
        json_decref(data);
        return rc;
    }
    sx_pack pk;
    sx_pack_init(&pk);
    pack_pid_op(&pk, "send", "to", pid, 2);
    sx_pack_str(&pk, "topic");
    sx_pack_str(&pk, a->pos[1]);
    sx_pack_str(&pk, "data");
    rc = cli_json_to_mp(data, &pk);
    json_decref(data);
    if (rc == SX_EINVAL) {
        sx_pack_fini(&pk);
        return cli_fail(CLI_USAGE, "the message: a {\"$bin\": ...} value is "
                                   "not valid base64");
    }
    sx_reply r;
    rc = cli_run(c, "send", &pk, cli_request_timeout(c), NULL, &r);
    if (rc != 0)
        return rc;
    sx_reply_free(&r);
    char text[SX_PID_TEXT_MAX], human[SX_PID_TEXT_MAX + 300];
    pid_text(pid, text);
    snprintf(human, sizeof human, "sent '%s' to %s", a->pos[1], text);
    return cli_print_ok(c, human,
                        json_pack("{s:s,s:s}", "to", text, "topic", a->pos[1]));
}

int cli_cmd_cancel(cli *c)
{
    const cli_args *a = c->a;
    sx_pid pid;
    int rc = cli_parse_pid(c, a->pos[0], &pid);
    if (rc != 0)
        return rc;
    const char *reason = a->n_pos > 1 ? a->pos[1] : a->reason;
    sx_pack pk;
    sx_pack_init(&pk);
    pack_pid_op(&pk, "cancel", "pid", pid, reason != NULL ? 1 : 0);
    if (reason != NULL) {
        sx_pack_str(&pk, "reason");
        sx_pack_str(&pk, reason);
    }
    sx_reply r;
    rc = cli_run(c, "cancel", &pk, cli_request_timeout(c), NULL, &r);
    if (rc != 0)
        return rc;
    sx_reply_free(&r);
    char text[SX_PID_TEXT_MAX], human[SX_PID_TEXT_MAX + 32];
    pid_text(pid, text);
    snprintf(human, sizeof human, "cancel sent to %s", text);
    return cli_print_ok(c, human, json_pack("{s:s}", "pid", text));
}

int cli_cmd_kill(cli *c)
{
    sx_pid pid;
    int rc = cli_parse_pid(c, c->a->pos[0], &pid);
    if (rc != 0)
        return rc;
    sx_pack pk;
    sx_pack_init(&pk);
    pack_pid_op(&pk, "terminate", "pid", pid, 0);
    sx_reply r;
    rc = cli_run(c, "kill", &pk, cli_request_timeout(c), NULL, &r);
    if (rc != 0)
        return rc;
    sx_reply_free(&r);
    char text[SX_PID_TEXT_MAX], human[SX_PID_TEXT_MAX + 32];
    pid_text(pid, text);
    snprintf(human, sizeof human, "terminated %s", text);
    return cli_print_ok(c, human, json_pack("{s:s}", "pid", text));
}

/* ---- ps, stats, types ---- */

int cli_fetch(cli *c, const char *op, int64_t limit, int64_t node,
              const char *key, json_t **out)
{
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_map(&pk, 1 + (limit >= 0) + (node > 0));
    sx_pack_str(&pk, "op");
    sx_pack_str(&pk, op);
    if (limit >= 0) {
        sx_pack_str(&pk, "limit");
        sx_pack_int(&pk, limit);
    }
    if (node > 0) {
        sx_pack_str(&pk, "node");
        sx_pack_int(&pk, node);
    }
    sx_reply r;
    int rc = cli_run(c, op, &pk, cli_request_timeout(c), NULL, &r);
    if (rc != 0)
        return rc;
    *out = cli_get_json(r.body, key);
    sx_reply_free(&r);
    if (*out == NULL)
        return cli_fail(CLI_INTERNAL, "%s: the reply has no readable '%s'", op,
                        key);
    return 0;
}

static int fetch(cli *c, const char *op, int64_t limit, const char *key,
                 json_t **out)
{
    return cli_fetch(c, op, limit, 0, key, out);
}

int cli_fetch_stats(cli *c, json_t **out)
{
    return fetch(c, "stats", -1, "stats", out);
}

int cli_fetch_ps(cli *c, int64_t limit, json_t **out)
{
    return fetch(c, "ps", limit, "processes", out);
}

int cli_fetch_ps_node(cli *c, int64_t limit, int64_t node, json_t **out)
{
    return cli_fetch(c, "ps", limit, node, "processes", out);
}

/* {"ok": true, key: v} (takes v): every --json document has "ok". */
static int print_doc(const char *key, json_t *v)
{
    json_t *o = json_object();
    json_object_set_new(o, "ok", json_true());
    json_object_set_new(o, key, v);
    cli_json_print(o);
    json_decref(o);
    return CLI_OK;
}

int cli_cmd_ps(cli *c)
{
    json_t *procs;
    if (c->a->cluster && c->a->node != 0)
        return cli_fail(CLI_USAGE, "ps: --node names one node, --cluster "
                                   "all of them: one or the other");
    int rc = c->a->cluster
                 ? cli_fetch_ps_cluster(c, c->a->limit, &procs)
                 : cli_fetch_ps_node(c, c->a->limit, c->a->node, &procs);
    if (rc != 0)
        return rc;
    if (c->a->json)
        return print_doc("processes", procs);
    static const char *const keys[] = { "pid",           "type",
                                        "method",        "state",
                                        "steps",         "attempts",
                                        "restart_in_ms", "last_error" };
    static const char *const ckeys[] = {
        "node",  "pid",      "type",          "method",    "state",
        "steps", "attempts", "restart_in_ms", "last_error"
    };
    /* The job columns when a listed process is a job (stored or
     * supervised). */
    size_t n_keys = 5;
    for (size_t i = 0; i < json_array_size(procs); i++)
        if (json_object_get(json_array_get(procs, i), "attempts") != NULL)
            n_keys = 8;
    if (json_array_size(procs) > 0)
        cli_print_table(stdout, procs, c->a->cluster ? ckeys : keys,
                        n_keys + (c->a->cluster ? 1 : 0));
    printf("%zu live process%s%s\n", json_array_size(procs),
           json_array_size(procs) == 1 ? "" : "es",
           c->a->limit >= 0 && json_array_size(procs) >= (size_t)c->a->limit
               ? " listed (--limit reached)"
               : "");
    json_decref(procs);
    return CLI_OK;
}

int cli_cmd_stats(cli *c)
{
    json_t *stats;
    int rc = cli_fetch_stats(c, &stats);
    if (rc != 0)
        return rc;
    if (c->a->json)
        return print_doc("stats", stats);
    cli_print_tree(stdout, stats, 0);
    json_decref(stats);
    return CLI_OK;
}

int cli_cmd_types(cli *c)
{
    json_t *types;
    int rc = fetch(c, "types", -1, "types", &types);
    if (rc != 0)
        return rc;
    if (c->a->json)
        return print_doc("types", types);
    /* methods as "run, serve" for the table */
    size_t i;
    json_t *t;
    json_array_foreach(types, i, t)
    {
        json_t *m = json_object_get(t, "methods");
        if (!json_is_array(m))
            continue;
        char buf[1024] = "";
        size_t k;
        json_t *name;
        json_array_foreach(m, k, name)
        {
            size_t len = strlen(buf);
            snprintf(buf + len, sizeof buf - len, "%s%s", k > 0 ? ", " : "",
                     json_is_string(name) ? json_string_value(name) : "?");
        }
        json_object_set_new(t, "methods", json_string(buf));
    }
    static const char *const keys[] = { "name", "methods" };
    cli_print_table(stdout, types, keys, 2);
    json_decref(types);
    return CLI_OK;
}

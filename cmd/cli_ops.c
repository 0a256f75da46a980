/* cmd/cli_ops.c — the stepx CLI's request-and-reply commands: submit
 * (one, or a batch with --count), send, wait, cancel, kill, ps, stats and
 * types, and the human renderings they share (tables, trees).
 * Threads: the CLI's one thread.
 */
#include "cmd/cli.h"

#include <stdlib.h>
#include <string.h>

/* A wait is asked in slices of this many ms so that a long one can show
 * progress; the reply may take this much longer before the CLI gives up
 * on the connection. */
#define WAIT_SLICE_MS 1000
#define REPLY_MARGIN_MS 10000

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
static int print_ok(cli *c, const char *human, json_t *fields)
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

static int64_t wait_deadline(const cli *c)
{
    return c->a->timeout_ms >= 0 ? cli_now_ms() + c->a->timeout_ms : -1;
}

/* Waits for one process with a "waiting for PID... N s" line, then
 * prints its outcome: 0 or an exit code. */
static int wait_one(cli *c, sx_pid pid)
{
    char text[SX_PID_TEXT_MAX], label[SX_PID_TEXT_MAX + 16];
    pid_text(pid, text);
    snprintf(label, sizeof label, "waiting for %s", text);
    cli_progress p;
    cli_progress_start(&p);
    sx_reply r;
    int rc = cli_wait_pid(c, pid, wait_deadline(c), &p, label, &r);
    cli_progress_end(c, &p);
    if (rc != 0)
        return rc;
    rc = cli_print_outcome(c, text, &r);
    sx_reply_free(&r);
    return rc;
}

int cli_cmd_wait(cli *c)
{
    sx_pid pid;
    int rc = cli_parse_pid(c, c->a->pos[0], &pid);
    return rc != 0 ? rc : wait_one(c, pid);
}

/* ---- submit ---- */

/* The submit request for TYPE METHOD [ARGS] into pk: 0, or CLI_USAGE. */
static int pack_submit(cli *c, sx_pack *pk)
{
    const cli_args *a = c->a;
    if (a->key != NULL && a->count > 1)
        return cli_fail(CLI_USAGE, "--key with --count: every copy would "
                                   "answer the first one's PID");
    if (a->restart == NULL &&
        (a->max_restarts != 0 || a->window_ms != 0 || a->backoff_min_ms != 0 ||
         a->backoff_max_ms != 0))
        return cli_fail(CLI_USAGE, "the restart numbers need --restart MODE");
    json_t *args =
        a->n_pos > 2 ? cli_json_parse(a->pos[2], "ARGS") : json_array();
    if (args == NULL)
        return CLI_USAGE;
    if (!json_is_array(args)) {
        json_decref(args);
        return cli_fail(CLI_USAGE,
                        "ARGS must be a JSON array of inputs (one element "
                        "per payload), e.g. '[5]', not '%s'",
                        a->pos[2]);
    }
    const char *names[] = { "max_restarts", "window_ms", "backoff_min_ms",
                            "backoff_max_ms" };
    int64_t nums[] = { a->max_restarts, a->window_ms, a->backoff_min_ms,
                       a->backoff_max_ms };
    uint32_t extra = (a->key != NULL) + (a->restart != NULL) +
                     (a->deadline_ms != 0) + (a->node != 0) +
                     (a->place != NULL);
    for (int i = 0; i < 4; i++)
        extra += nums[i] != 0;
    sx_pack_map(pk, 4 + extra);
    if (a->key != NULL) {
        sx_pack_str(pk, "key");
        sx_pack_str(pk, a->key);
    }
    if (a->restart != NULL) {
        sx_pack_str(pk, "restart");
        sx_pack_str(pk, a->restart);
    }
    if (a->deadline_ms != 0) {
        sx_pack_str(pk, "deadline_ms");
        sx_pack_uint(pk, (uint64_t)a->deadline_ms);
    }
    if (a->node != 0) {
        sx_pack_str(pk, "node");
        sx_pack_uint(pk, (uint64_t)a->node);
    }
    if (a->place != NULL) {
        sx_pack_str(pk, "place");
        sx_pack_str(pk, a->place);
    }
    for (int i = 0; i < 4; i++)
        if (nums[i] != 0) {
            sx_pack_str(pk, names[i]);
            sx_pack_uint(pk, (uint64_t)nums[i]);
        }
    sx_pack_str(pk, "op");
    sx_pack_str(pk, "submit");
    sx_pack_str(pk, "type");
    sx_pack_str(pk, a->pos[0]);
    sx_pack_str(pk, "method");
    sx_pack_str(pk, a->pos[1]);
    sx_pack_str(pk, "input");
    int rc = cli_json_to_mp(args, pk);
    json_decref(args);
    if (rc == SX_EINVAL)
        return cli_fail(CLI_USAGE,
                        "ARGS: a {\"$bin\": ...} value is not valid base64");
    return 0;
}

/* Reads the PID out of a submit reply: 0 or CLI_INTERNAL (printed). */
static int reply_pid(const sx_reply *r, sx_pid *pid)
{
    char text[SX_PID_TEXT_MAX];
    if (cli_get_str(r->body, "pid", text, sizeof text) &&
        sx_pid_parse(text, pid) == 0)
        return 0;
    return cli_fail(CLI_INTERNAL, "submit: the reply carries no readable pid");
}

static int submit_one(cli *c, sx_pack *pk)
{
    sx_reply r;
    sx_pid pid;
    int rc = cli_request(c, "submit", sx_pack_payload(pk),
                         cli_request_timeout(c), NULL, &r);
    if (rc != 0)
        return rc;
    rc = reply_pid(&r, &pid);
    sx_reply_free(&r);
    if (rc != 0)
        return rc;
    if (c->a->wait)
        return wait_one(c, pid);
    char text[SX_PID_TEXT_MAX];
    pid_text(pid, text);
    return print_ok(c, text, json_pack("{s:s}", "pid", text));
}

typedef struct {
    sx_pid *pids;
    uint64_t n, submitted;
    uint64_t completed, failed; /* with --wait */
    double submit_s, wait_s;
    char first_error[512]; /* a submit's or a process's, for the summary */
    int exit;
} batch;

static void batch_note(batch *b, const char *who, const sx_reply *r, int ex)
{
    if (b->first_error[0] == 0)
        snprintf(b->first_error, sizeof b->first_error, "%s: %s (%s)", who,
                 r->message != NULL ? r->message : "",
                 r->code != NULL ? r->code : "internal");
    if (b->exit == 0)
        b->exit = ex;
}

static int batch_submit(cli *c, sx_pack *pk, batch *b)
{
    cli_progress p;
    cli_progress_start(&p);
    int64_t t0 = cli_now_ms();
    for (uint64_t i = 0; i < b->n; i++) {
        sx_reply r;
        int rc = cli_request(c, "submit", sx_pack_payload(pk),
                             cli_request_timeout(c), cli_pass_all, &r);
        if (rc != 0) { /* no reply: printed; nothing more can be done */
            b->exit = rc;
            break;
        }
        if (!r.ok) {
            batch_note(b, "submit", &r, cli_reply_exit(&r));
            cli_errorf("submit %llu of %llu: %s", (unsigned long long)i + 1,
                       (unsigned long long)b->n, b->first_error);
            sx_reply_free(&r);
            break;
        }
        rc = reply_pid(&r, &b->pids[b->submitted]);
        sx_reply_free(&r);
        if (rc != 0) {
            b->exit = rc;
            break;
        }
        b->submitted++;
        cli_progress_show(c, &p, "submitted %llu/%llu",
                          (unsigned long long)b->submitted,
                          (unsigned long long)b->n);
    }
    cli_progress_end(c, &p);
    b->submit_s = (double)(cli_now_ms() - t0) / 1000.0;
    return b->exit;
}

static void batch_wait(cli *c, batch *b)
{
    cli_progress p;
    cli_progress_start(&p);
    int64_t t0 = cli_now_ms(), deadline = wait_deadline(c);
    for (uint64_t i = 0; i < b->submitted; i++) {
        /* The line also moves on while one long process holds the count. */
        char label[64];
        snprintf(label, sizeof label, "finished %llu/%llu",
                 (unsigned long long)(b->completed + b->failed),
                 (unsigned long long)b->submitted);
        cli_progress_show(c, &p, "%s", label);
        sx_reply r;
        int rc = cli_wait_pid(c, b->pids[i], deadline, &p, label, &r);
        if (rc != 0) {
            b->exit = rc;
            break;
        }
        if (r.ok) {
            b->completed++;
        } else {
            char text[SX_PID_TEXT_MAX];
            pid_text(b->pids[i], text);
            b->failed++;
            batch_note(b, text, &r, CLI_FAILED);
        }
        sx_reply_free(&r);
    }
    cli_progress_end(c, &p);
    b->wait_s = (double)(cli_now_ms() - t0) / 1000.0;
}

static int batch_summary(cli *c, const batch *b)
{
    const cli_args *a = c->a;
    char first[SX_PID_TEXT_MAX] = "", last[SX_PID_TEXT_MAX] = "";
    if (b->submitted > 0) {
        pid_text(b->pids[0], first);
        pid_text(b->pids[b->submitted - 1], last);
    }
    double rate = b->submit_s > 0 ? (double)b->submitted / b->submit_s : 0;
    if (a->json) {
        json_t *o = json_pack("{s:b,s:s,s:s,s:I,s:I,s:f,s:s,s:s}", "ok",
                              b->exit == 0, "type", a->pos[0], "method",
                              a->pos[1], "count", (json_int_t)b->n, "submitted",
                              (json_int_t)b->submitted, "submit_seconds",
                              b->submit_s, "first", first, "last", last);
        if (a->wait) {
            json_object_set_new(o, "completed", json_integer(b->completed));
            json_object_set_new(o, "failed", json_integer(b->failed));
            json_object_set_new(o, "wait_seconds", json_real(b->wait_s));
        }
        if (b->first_error[0] != 0)
            json_object_set_new(o, "first_error",
                                cli_json_text_of(b->first_error));
        cli_json_print(o);
        json_decref(o);
        return b->exit;
    }
    printf("submitted %llu of %llu %s.%s in %.2f s (%.0f/s)",
           (unsigned long long)b->submitted, (unsigned long long)b->n,
           a->pos[0], a->pos[1], b->submit_s, rate);
    if (b->submitted > 0)
        printf(", PIDs %s .. %s", first, last);
    putchar('\n');
    if (a->wait)
        printf("finished: %llu completed, %llu failed/terminated, waited "
               "%.2f s\n",
               (unsigned long long)b->completed, (unsigned long long)b->failed,
               b->wait_s);
    if (b->first_error[0] != 0 && b->failed > 0)
        printf("first failure: %s\n", b->first_error);
    return b->exit;
}

int cli_cmd_submit(cli *c)
{
    sx_pack pk;
    sx_pack_init(&pk);
    int rc = pack_submit(c, &pk);
    if (rc == 0 && pk.err != 0)
        rc = cli_fail(CLI_INTERNAL, "submit: cannot build the request: %s",
                      sx_strerror(pk.err));
    if (rc != 0) {
        sx_pack_fini(&pk);
        return rc;
    }
    if (c->a->count <= 1) {
        rc = submit_one(c, &pk);
    } else {
        batch b = { .n = c->a->count };
        b.pids = malloc(sizeof(sx_pid) * (size_t)b.n);
        if (b.pids == NULL) {
            sx_pack_fini(&pk);
            return cli_fail(CLI_INTERNAL, "submit: out of memory for %llu PIDs",
                            (unsigned long long)b.n);
        }
        if (batch_submit(c, &pk, &b) == 0 && c->a->wait)
            batch_wait(c, &b);
        rc = batch_summary(c, &b);
        free(b.pids);
    }
    sx_pack_fini(&pk);
    return rc;
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
    return print_ok(c, human,
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
    return print_ok(c, human, json_pack("{s:s}", "pid", text));
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
    return print_ok(c, human, json_pack("{s:s}", "pid", text));
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

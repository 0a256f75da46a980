/* cmd/cli_submit.c — `stepx submit`: one job (with --wait, one request
 * that answers with the outcome: docs/PROTOCOL.md, submit), or a batch
 * with --count (submitted one at a time, then waited for, with progress
 * and a summary).
 * Threads: the CLI's one thread.
 */
#include "cmd/cli.h"

#include <stdlib.h>
#include <string.h>

/* The first slice of a submit that waits: CLI_WAIT_SLICE_MS, or --timeout
 * when that is shorter. */
static int64_t submit_slice(const cli_args *a)
{
    return a->timeout_ms >= 0 && a->timeout_ms < CLI_WAIT_SLICE_MS
               ? a->timeout_ms
               : CLI_WAIT_SLICE_MS;
}

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
    /* One job waited for: the submit itself waits (one request), for the
     * first slice of the wait. */
    bool wait = a->wait && a->count <= 1;
    uint32_t extra = (a->key != NULL) + (a->restart != NULL) +
                     (a->deadline_ms != 0) + (a->node != 0) +
                     (a->place != NULL) + 2 * wait;
    for (int i = 0; i < 4; i++)
        extra += nums[i] != 0;
    sx_pack_map(pk, 4 + extra);
    if (wait) {
        sx_pack_str(pk, "wait");
        sx_pack_bool(pk, true);
        sx_pack_str(pk, "timeout_ms");
        sx_pack_int(pk, submit_slice(a));
    }
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

/* A submit with "wait" (pack_submit): one request answers with the
 * outcome; a reply `timeout` (the first slice passed) names the job,
 * which is then waited for as `wait` does, until --timeout. */
static int submit_waited(cli *c, sx_pack *pk)
{
    int64_t deadline = cli_wait_deadline(c);
    sx_reply r;
    int rc =
        cli_request(c, "submit", sx_pack_payload(pk),
                    submit_slice(c->a) + CLI_REPLY_MARGIN_MS, cli_pass_all, &r);
    if (rc != 0)
        return rc;
    char text[SX_PID_TEXT_MAX];
    sx_pid pid;
    sx_payload v;
    if (!cli_get_str(r.body, "pid", text, sizeof text) ||
        sx_pid_parse(text, &pid) != 0) {
        /* Refused: nothing started. */
        rc =
            r.ok ? reply_pid(&r, &pid) : cli_reply_error(c, "submit", &r, NULL);
        sx_reply_free(&r);
        return rc;
    }
    if (!r.ok && r.code != NULL && strcmp(r.code, "timeout") == 0) {
        sx_reply_free(&r);
        return cli_wait_until(c, pid, deadline);
    }
    if (r.ok && sx_map_get(r.body, "result", &v) != 0) {
        /* A daemon that does not wait in submit: the pid alone. */
        sx_reply_free(&r);
        return cli_wait_until(c, pid, deadline);
    }
    rc = cli_print_outcome(c, text, &r);
    sx_reply_free(&r);
    return rc;
}

static int submit_one(cli *c, sx_pack *pk)
{
    if (c->a->wait)
        return submit_waited(c, pk);
    sx_reply r;
    sx_pid pid;
    int rc = cli_request(c, "submit", sx_pack_payload(pk),
                         cli_request_timeout(c), NULL, &r);
    if (rc != 0)
        return rc;
    rc = reply_pid(&r, &pid);
    /* The key named an earlier job: that job's pid, nothing new runs. */
    bool existing = rc == 0 && cli_get_true(r.body, "existing");
    sx_reply_free(&r);
    if (rc != 0)
        return rc;
    char text[SX_PID_TEXT_MAX];
    sx_pid_format(pid, text, SX_PID_TEXT_MAX);
    json_t *o = json_pack("{s:s}", "pid", text);
    if (o != NULL && existing)
        json_object_set_new(o, "existing", json_true());
    return cli_print_ok(c, text, o);
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
    int64_t t0 = cli_now_ms(), deadline = cli_wait_deadline(c);
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
            sx_pid_format(b->pids[i], text, SX_PID_TEXT_MAX);
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
        sx_pid_format(b->pids[0], first, SX_PID_TEXT_MAX);
        sx_pid_format(b->pids[b->submitted - 1], last, SX_PID_TEXT_MAX);
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

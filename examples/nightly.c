/* examples/nightly.c — the nightly report, a workflow: docs/WRITING.md. */
#include "examples/nightly.h"
#include <stdio.h>

enum { TAG_RUN = 1, TAG_ALL, TAG_WRITE };

/* A section: one shell command; its stdout is the result. */
typedef struct {
    char cmd[256];
    bool started;
} section;

static int section_init(void *st, const sx_init_ctx *ctx, const char *method,
                        const sx_payload *in, size_t n)
{
    section *s = st;
    if (n != 1 || sx_payload_get_str(in[0], s->cmd, sizeof s->cmd) != 0)
        return sx_init_error(ctx, SX_EINVAL, "section.%s: one command", method);
    return 0;
}

static int section_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    section *s = st;
    sx_batch b;
    const sx_event *e;
    sx_exec_result r;
    sx_batch_init(&b, ev, n, &s->started, out);
    for (sx_event_kind k; (k = sx_batch_next(&b, &e)) != SX_EV_END;)
        if (k == SX_EV_CANCEL) /* its subprocess is killed as it ends */
            sx_cancelled_by(out, e);
        else if (k == SX_EV_START) /* a non-zero exit fails; 3 retries */
            sx_yieldf(out, SX_CMD_EXEC, TAG_RUN, "{s:[s,s,s], s:b, s:{s:i}}",
                      "argv", "sh", "-c", s->cmd, "check", 1, "retry",
                      "max_restarts", 3);
        else if (k == SX_EV_COMPLETE && e->error != 0)
            sx_fail_code(out, e->error, e->error_msg);
        else if (k == SX_EV_COMPLETE && sx_exec_result_get(e->data, &r) == 0)
            sx_donef(out, "S", r.out.ptr, r.out.len);
    return sx_batch_wait(&b);
}

/* The report: the sections at once, then the file. */
typedef struct {
    char path[256], cmds[NIGHTLY_MAX][256];
    uint32_t n, failed;
    bool started;
} report;

static int report_init(void *st, const sx_init_ctx *ctx, const char *method,
                       const sx_payload *in, size_t n)
{
    report *r = st;
    if (n < 2 || n > NIGHTLY_MAX + 1 ||
        sx_payload_get_str(in[0], r->path, sizeof r->path) != 0)
        return sx_init_error(ctx, SX_EINVAL, "report.%s: path, cmds", method);
    for (r->n = 0; r->n < n - 1; r->n++)
        if (sx_payload_get_str(in[r->n + 1], r->cmds[r->n], 256) != 0)
            return sx_init_error(ctx, SX_EINVAL, "cmd %u: not text", r->n + 1);
    return 0;
}

/* The sections' lines, in input order, into the file. */
static void report_write(report *r, sx_payload all, sx_step_output *out)
{
    char text[NIGHTLY_MAX * 320];
    size_t len = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        sx_outcome o;
        sx_outcome_at(all, i, &o);
        sx_str s = o.error ? o.message : sx_get_str(o.value, NULL);
        r->failed += o.error != 0;
        len += (size_t)snprintf(text + len, sizeof text - len, "%u %s %.*s\n",
                                i + 1, o.error ? "FAILED" : "ok",
                                (int)(s.len > 300 ? 300 : s.len),
                                s.ptr != NULL ? s.ptr : "");
    }
    sx_yieldf(out, SX_CMD_FS_WRITE, TAG_WRITE, "[s,S]", r->path, text, len);
}

static int report_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    report *r = st;
    sx_batch b;
    const sx_event *e;
    sx_spawn_opts each = { .deadline_ms = 2000, .scope = SX_SCOPE_CANCEL };
    sx_pack pk;
    sx_batch_init(&b, ev, n, &r->started, out);
    for (sx_event_kind k; (k = sx_batch_next(&b, &e)) != SX_EV_END;) {
        if (k == SX_EV_CANCEL) /* the sections get a @cancel too */
            sx_cancelled_by(out, e);
        else if (k == SX_EV_START) {
            sx_pack_init(&pk);
            sx_spawn_all_begin(&pk, r->n, &each);
            for (uint32_t i = 0; i < r->n; i++)
                sx_spawn_all_child(&pk, "section", "run", "s", r->cmds[i]);
            sx_yield(out, SX_CMD_SPAWN_ALL, TAG_ALL, sx_pack_payload(&pk));
            sx_pack_fini(&pk);
        } else if (k == SX_EV_COMPLETE && e->error != 0)
            sx_fail_code(out, e->error, e->error_msg);
        else if (k == SX_EV_COMPLETE && e->tag == TAG_ALL)
            report_write(r, e->data, out);
        else if (k == SX_EV_COMPLETE && e->tag == TAG_WRITE)
            sx_donef(out, "{s:i,s:i}", "sections", r->n, "failed", r->failed);
    }
    return sx_batch_wait(&b);
}

const sx_process_type nightly_types[2] = {
    { .name = "section",
      .state_size = sizeof(section),
      .init = section_init,
      .step = section_step },
    { .name = "report",
      .state_size = sizeof(report),
      .init = report_init,
      .step = report_step },
};

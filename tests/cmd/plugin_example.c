/* tests/cmd/plugin_example.c — a process-type plugin for `stepxd --load`
 * (and the template for writing one): a shared object exporting
 * stepx_plugin_register, which stepxd calls before it starts the engine.
 * It registers two types:
 *
 *   greeter.hello [name]   DONE with "hello, <name>" (one step)
 *   napper.run [ms]        sleeps ms in init, then DONE with ms: a slow
 *                          submit for tests of the CLI's batch progress.
 *                          A real type must never block in init: it runs
 *                          on the submitter's thread (stepxd: the relay
 *                          server's, so every client waits).
 *
 * The engine's symbols come from stepxd itself (it holds the whole
 * library and exports it: link_whole and export_dynamic in
 * cmd/meson.build), so the plugin links no libstepx of its own. The type
 * table is static: it must outlive the engine, and the daemon never
 * unloads a plugin. Threads: engine rules (init on the submitter, steps
 * on workers).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <stepx/stepx.h>

int stepx_plugin_register(sx_engine *e);

typedef struct {
    char name[128];
} greeter_st;

static int greeter_init(void *st, const sx_init_ctx *ctx, const char *method,
                        const sx_payload *in, size_t n)
{
    (void)ctx, (void)method;
    greeter_st *s = st;
    if (n != 1 || sx_payload_get_str(in[0], s->name, sizeof s->name) != 0)
        return SX_EINVAL;
    return 0;
}

static int greeter_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    (void)ev, (void)n;
    greeter_st *s = st;
    char text[160];
    uint8_t buf[192];
    sx_pack pk;
    snprintf(text, sizeof text, "hello, %s", s->name);
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    sx_pack_str(&pk, text);
    sx_done(out, sx_pack_payload(&pk));
    return 0;
}

static const char *const greeter_methods[] = { "hello", NULL };

static const sx_process_type greeter = { .name = "greeter",
                                         .state_size = sizeof(greeter_st),
                                         .init = greeter_init,
                                         .step = greeter_step,
                                         .methods = greeter_methods };

typedef struct {
    int64_t ms;
} napper_st;

static int napper_init(void *st, const sx_init_ctx *ctx, const char *method,
                       const sx_payload *in, size_t n)
{
    (void)ctx, (void)method;
    napper_st *s = st;
    if (n != 1 || sx_payload_get_int(in[0], &s->ms) != 0 || s->ms < 0 ||
        s->ms > 1000)
        return SX_EINVAL;
    struct timespec ts = { s->ms / 1000, (long)(s->ms % 1000) * 1000000 };
    nanosleep(&ts, NULL);
    return 0;
}

static int napper_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    (void)ev, (void)n;
    napper_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    sx_done(out, sx_payload_int(b, s->ms));
    return 0;
}

static const char *const napper_methods[] = { "run", NULL };

static const sx_process_type napper = { .name = "napper",
                                        .state_size = sizeof(napper_st),
                                        .init = napper_init,
                                        .step = napper_step,
                                        .methods = napper_methods };

int stepx_plugin_register(sx_engine *e)
{
    int rc = sx_engine_register(e, &greeter);
    return rc != 0 ? rc : sx_engine_register(e, &napper);
}

/* tests/cmd/plugin_example.c — a process-type plugin for `stepxd --load`
 * (and the template for writing one): a shared object exporting
 * stepx_plugin_register, which stepxd calls before it starts the engine.
 * It registers one type:
 *
 *   greeter.hello [name]   DONE with "hello, <name>" (one step)
 *
 * The engine's symbols come from stepxd itself (linked with
 * export_dynamic), so the plugin links no libstepx of its own. The type
 * table is static: it must outlive the engine, and the daemon never
 * unloads a plugin. Threads: engine rules (init on the submitter, steps
 * on workers).
 */
#include <stdio.h>
#include <string.h>

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

int stepx_plugin_register(sx_engine *e)
{
    return sx_engine_register(e, &greeter);
}

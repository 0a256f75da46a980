/* tests/cmd/plugin_broken.c — plugins that `stepxd --load` cannot load
 * as they are, for tests/cmd/test_load.sh, which checks that stepxd says
 * what to do about each. Built once per case (tests/cmd/meson.build):
 *
 *   -DPLUGIN_NEEDS_DEP   links libplugin_dep.so (tests/cmd/plugin_dep.c);
 *                        loads where the dynamic loader finds that
 *                        library (and registers nothing)
 *   -DPLUGIN_STEPX_SYM   calls sx_plugin_test_absent, a stepx name that
 *                        this stepxd does not define (as a plugin built
 *                        with another version's headers may)
 *   -DPLUGIN_OTHER_SYM   calls plugin_test_absent, which no library that
 *                        the plugin links defines
 *
 * Like plugin_example.c it links no libstepx: stepxd provides the engine.
 */
#include <stepx/stepx.h>

int stepx_plugin_register(sx_engine *e);

#if defined(PLUGIN_NEEDS_DEP)
int plugin_dep_answer(void);

int stepx_plugin_register(sx_engine *e)
{
    (void)e;
    return plugin_dep_answer() == 42 ? 0 : SX_EINVAL;
}
#elif defined(PLUGIN_STEPX_SYM)
int sx_plugin_test_absent(sx_engine *e);

int stepx_plugin_register(sx_engine *e)
{
    return sx_plugin_test_absent(e);
}
#elif defined(PLUGIN_OTHER_SYM)
int plugin_test_absent(sx_engine *e);

int stepx_plugin_register(sx_engine *e)
{
    return plugin_test_absent(e);
}
#else
#error "define PLUGIN_NEEDS_DEP, PLUGIN_STEPX_SYM or PLUGIN_OTHER_SYM"
#endif

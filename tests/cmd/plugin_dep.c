/* tests/cmd/plugin_dep.c — libplugin_dep.so, a library that the
 * PLUGIN_NEEDS_DEP build of tests/cmd/plugin_broken.c links: the test
 * hides it to make that plugin's load fail on a missing library. */
int plugin_dep_answer(void);

int plugin_dep_answer(void)
{
    return 42;
}

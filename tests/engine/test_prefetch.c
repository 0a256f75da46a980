/* tests/engine/test_prefetch.c — the write prefetch's choice
 * (engine/sched/prefetch.h): the flag that picks PREFETCHW is what the
 * CPU says, as the kernel reports it (its `3dnowprefetch` flag in
 * /proc/cpuinfo is CPUID 0x80000001 ECX bit 8), so the library's load-time
 * constructor ran in a statically linked program; and a hint at any
 * address, NULL included, never faults.
 *
 * Negative control, run once on a scratch copy of engine/sched/prefetch.c:
 *  P1. prfchw_init without `__attribute__((constructor))`: the flag stays
 *      false on a CPU with the instruction; flag_matches_cpu fails.
 * Skipped (77) where the choice is made at compile time (not x86, or a
 * target with PREFETCHW) and where /proc/cpuinfo cannot be read.
 */
#include "engine/sched/prefetch.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
#ifndef SX__PREFETCHW_RUNTIME
    printf("SKIP: the prefetch is chosen at compile time on this target\n");
    return 77;
#else
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL) {
        printf("SKIP: /proc/cpuinfo cannot be read\n");
        return 77;
    }
    char line[8192];
    int seen = 0, has = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        seen = 1;
        /* A whole word: the flags are separated by spaces. */
        for (char *t = strtok(line, " \t\n"); t != NULL;
             t = strtok(NULL, " \t\n"))
            if (strcmp(t, "3dnowprefetch") == 0)
                has = 1;
        break; /* the first CPU's flags */
    }
    fclose(f);
    if (!seen) {
        printf("SKIP: no flags line in /proc/cpuinfo\n");
        return 77;
    }
    int fails = 0;
    bool on = sx__prefetch_w_on();
    if (on != (bool)has) {
        printf("FAIL flag_matches_cpu: flag %d, the CPU's 3dnowprefetch %d\n",
               on, has);
        fails++;
    } else {
        printf("ok flag_matches_cpu (%d)\n", on);
    }
    /* Hints at addresses that are not memory never fault, either way. */
    char local[64];
    sx__prefetch_w(on, local);
    sx__prefetch_w(on, NULL);
    sx__prefetch_w(on, (const void *)(uintptr_t)0x10);
    sx__prefetch_w(false, NULL);
    printf("ok hints_never_fault\n");
    return fails != 0;
#endif
}

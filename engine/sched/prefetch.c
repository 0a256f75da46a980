/* engine/sched/prefetch.c — whether this CPU has PREFETCHW
 * (engine/sched/prefetch.h), read once when the library is loaded.
 *
 * Threads: the constructor runs before main, on the loading thread.
 */
#include "engine/sched/prefetch.h"

#ifdef SX__PREFETCHW_RUNTIME
#include <cpuid.h>

bool sx__prfchw;

__attribute__((constructor)) static void prfchw_init(void)
{
    unsigned a, b, c, d;
    /* CPUID 0x80000001: ECX bit 8 is PRFCHW (AMD calls it
     * 3DNowPrefetch); __get_cpuid fails where the leaf is absent. */
    sx__prfchw = __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & bit_PRFCHW);
}
#else
typedef int sx__prefetch_none; /* ISO C: a translation unit is not empty */
#endif

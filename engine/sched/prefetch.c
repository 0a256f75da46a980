/* engine/sched/prefetch.c — whether this CPU has PREFETCHW
 * (engine/sched/prefetch.h), read once when the library is loaded.
 *
 * Threads: the constructor runs on the thread that loads the library
 * (before main for a program linked with it, inside dlopen otherwise).
 */
#include "engine/sched/prefetch.h"

#ifdef SX__PREFETCHW_RUNTIME
#include <cpuid.h>

_Atomic bool sx__prfchw;

__attribute__((constructor)) static void prfchw_init(void)
{
    unsigned a, b, c, d;
    /* CPUID 0x80000001: ECX bit 8 is PRFCHW (AMD calls it
     * 3DNowPrefetch); __get_cpuid fails where the leaf is absent.
     * relaxed: see prefetch.h. */
    atomic_store_explicit(&sx__prfchw,
                          __get_cpuid(0x80000001, &a, &b, &c, &d) &&
                              (c & bit_PRFCHW) != 0,
                          memory_order_relaxed);
}
#else
typedef int sx__prefetch_none; /* ISO C: a translation unit is not empty */
#endif

/* engine/sched/prefetch.h — asking for a cache line that this thread is
 * about to write.
 *
 * A new process's slot and state are written by the thread that spawns
 * it and then by the worker that runs it, each time on lines the other
 * CPU wrote last. A read prefetch brings such a line shared: the first
 * store then still has to take it from the other CPU's cache, a second
 * trip between the CPUs (bench/FINDINGS.md, "Prefetching for writing").
 * PREFETCHW brings it owned in one. gcc emits PREFETCHW for
 * __builtin_prefetch(p, 1) only where the target has it (-mprfchw, or a
 * -march that includes it); the generic x86-64 target, which the library
 * is built for, gets a read prefetch instead. So on x86-64 the
 * instruction is written here and used when the CPU says it has it
 * (CPUID 0x80000001, ECX bit 8: every AMD64 CPU, Intel's since
 * Broadwell), read once at load time (prefetch.c). Elsewhere, and on a
 * CPU without it, __builtin_prefetch's write hint as before.
 *
 * Threads: [any thread]. A hint: it never faults, whatever the address.
 */
#ifndef SX_ENGINE_SCHED_PREFETCH_H
#define SX_ENGINE_SCHED_PREFETCH_H

#include <stdbool.h>

#if (defined(__x86_64__) || defined(__i386__)) && !defined(__PRFCHW__)
/* Set before main (prefetch.c) and never written again: read without
 * synchronisation. */
extern bool sx__prfchw;
#define SX__PREFETCHW_RUNTIME 1
#endif

static inline __attribute__((always_inline)) void
sx__prefetch_w(const void *p)
{
#ifdef SX__PREFETCHW_RUNTIME
    if (__builtin_expect(sx__prfchw, 1)) {
        __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
        return;
    }
#endif
    __builtin_prefetch(p, 1, 3);
}

#endif

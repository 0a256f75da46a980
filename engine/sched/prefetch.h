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
 * -march that includes it: then __PRFCHW__ is defined and the builtin is
 * used as it is); the generic x86 target, which the library is built
 * for, gets a read prefetch. So on x86 (64- and 32-bit) the instruction
 * is written here and used when the CPU says it has it (CPUID
 * 0x80000001, ECX bit 8: AMD's CPUs since family 10h, Intel's since
 * Broadwell), which prefetch.c reads when the library is loaded; on
 * other CPUs and targets, __builtin_prefetch's write hint.
 *
 * Only for lines the caller is about to write: asked for by both CPUs, a
 * line that neither writes (a shared constant) would move between them
 * at every ask.
 *
 * Threads: [any thread]. A hint: it never faults, whatever the address
 * (the address is passed in a register, never dereferenced in C).
 */
#ifndef SX_ENGINE_SCHED_PREFETCH_H
#define SX_ENGINE_SCHED_PREFETCH_H

#include <stdatomic.h>
#include <stdbool.h>

#if (defined(__x86_64__) || defined(__i386__)) && !defined(__PRFCHW__)
/* Whether the CPU has PREFETCHW: written once by prefetch.c's constructor
 * when the library is loaded. Atomic because a program's own constructor
 * may start an engine (and its workers) before the library's runs. */
extern _Atomic bool sx__prfchw;
#define SX__PREFETCHW_RUNTIME 1
#endif

/* Whether sx__prefetch_w may use PREFETCHW. A caller that asks for many
 * lines reads it once and passes it to each (gcc and clang neither merge
 * nor hoist atomic loads: one per hint cost ~3 instructions each, ~19 a
 * submitted process). relaxed: the choice of a hint, with no data behind
 * it. */
static inline __attribute__((always_inline)) bool sx__prefetch_w_on(void)
{
#ifdef SX__PREFETCHW_RUNTIME
    return atomic_load_explicit(&sx__prfchw, memory_order_relaxed);
#else
    return false;
#endif
}

/* Asks for the line at p for writing; on is sx__prefetch_w_on(). */
static inline __attribute__((always_inline)) void sx__prefetch_w(bool on,
                                                                 const void *p)
{
#ifdef SX__PREFETCHW_RUNTIME
    if (__builtin_expect(on, 1)) {
        __asm__ volatile("prefetchw (%0)" : : "r"(p));
        return;
    }
#else
    (void)on;
#endif
    __builtin_prefetch(p, 1, 3);
}

#endif

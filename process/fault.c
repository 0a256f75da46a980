/* process/fault.c — allocations that fail on cue, for tests (fault.h).
 * Empty unless SX_FAULT_INJECTION is defined. */
#include "process/fault.h"

#ifdef SX_FAULT_INJECTION
#include <stdatomic.h>

/* One more than the highest site's bit: each site has its own pass and
 * hit counters (a site past SITES would share another's, index_of). */
#define SITES 19
_Static_assert(SX__FAULT_LAST == 1u << (SITES - 1),
               "SITES counts fault.h's sites");

/* relaxed (all): a test arms a site before it submits the work that
 * reaches it, and that hand-off (the queues' release and acquire) orders
 * the arming before the check; the counts are read after a wait that
 * synchronises with the worker, or as a lower bound. */
static _Atomic unsigned armed;
static _Atomic unsigned passes[SITES]; /* let through before failing */
static _Atomic uint64_t hits[SITES];

static unsigned index_of(unsigned site)
{
    return (unsigned)__builtin_ctz(site) % SITES;
}

bool sx__fault(unsigned site)
{
    if ((atomic_load_explicit(&armed, memory_order_relaxed) & site) == 0)
        return false;
    _Atomic unsigned *pass = &passes[index_of(site)];
    unsigned n = atomic_load_explicit(pass, memory_order_relaxed);
    while (n > 0)
        if (atomic_compare_exchange_weak_explicit(
                pass, &n, n - 1, memory_order_relaxed, memory_order_relaxed))
            return false;
    atomic_fetch_add_explicit(&hits[index_of(site)], 1, memory_order_relaxed);
    return true;
}

void sx__fault_arm(unsigned sites)
{
    for (unsigned i = 0; i < SITES; i++)
        atomic_store_explicit(&passes[i], 0, memory_order_relaxed);
    atomic_store_explicit(&armed, sites, memory_order_relaxed);
}

void sx__fault_arm_after(unsigned site, unsigned pass)
{
    atomic_store_explicit(&passes[index_of(site)], pass, memory_order_relaxed);
    atomic_fetch_or_explicit(&armed, site, memory_order_relaxed);
}

uint64_t sx__fault_hits(unsigned site)
{
    return atomic_load_explicit(&hits[index_of(site)], memory_order_relaxed);
}
/* A hook is a pair (fn, arg). fn is stored last with release and loaded
 * first with acquire, so a thread that sees fn sees its arg; clearing
 * stores fn first, so a thread that still sees the old fn may see the old
 * arg or the new one (NULL), and a hook that can be cleared while it runs
 * must allow for that (the tests clear theirs once the work is done). A
 * test sets a hook before it submits the work that reaches the point; a
 * hook runs on whichever thread reaches its point. */
static _Atomic(sx__fault_hook_fn *) hook_fn[SX__HOOK_COUNT];
static _Atomic(void *) hook_arg[SX__HOOK_COUNT];

void sx__fault_hook_set(unsigned point, sx__fault_hook_fn *fn, void *arg)
{
    if (point >= SX__HOOK_COUNT)
        return;
    if (fn == NULL) {
        /* release: pairs with the acquire load in sx__fault_hook. */
        atomic_store_explicit(&hook_fn[point], NULL, memory_order_release);
        atomic_store_explicit(&hook_arg[point], NULL, memory_order_relaxed);
        return;
    }
    /* relaxed: published by fn's release store below. */
    atomic_store_explicit(&hook_arg[point], arg, memory_order_relaxed);
    /* release: a thread that loads fn (acquire) sees arg. */
    atomic_store_explicit(&hook_fn[point], fn, memory_order_release);
}

void sx__fault_hook(unsigned point, size_t n)
{
    if (point >= SX__HOOK_COUNT)
        return;
    /* acquire: pairs with the release store of fn in sx__fault_hook_set. */
    sx__fault_hook_fn *fn =
        atomic_load_explicit(&hook_fn[point], memory_order_acquire);
    if (fn != NULL)
        /* relaxed: ordered after fn's acquire load. */
        fn(atomic_load_explicit(&hook_arg[point], memory_order_relaxed), n);
}
#else
typedef int sx__fault_unused; /* ISO C: a translation unit declares something */
#endif

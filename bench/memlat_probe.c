/* bench/memlat_probe.c — what one random access into a table of a given
 * size costs on this machine.
 *
 *   memlat-probe KiB...
 *
 * For each size, maps that many KiB of anonymous memory in plain 4 KiB
 * pages (as the process table's segments are, engine/core/ptable.c),
 * links its 96-byte blocks (a process slot's size) into one cycle in a
 * random order, and follows the cycle: each load's address comes from the
 * one before, so the loads do not overlap, and the figure is the latency
 * of one access to a block picked at random: a cache hit while the table
 * fits the caches, else a miss to memory, plus a TLB miss (a page walk)
 * once the table's pages outnumber the TLB's entries. Prints one line per
 * size, with the time per load and the CPU time per load (which a busy
 * host, taking the core away now and then, stretches less):
 *
 *   memlat kib=<KiB> ns_per_load=<ns> cpu_ns_per_load=<ns>
 *
 * bench/curves.sh runs it at the sizes of the process table beside 10^3 ..
 * 10^7 idle processes (96 bytes each), for the reading of the idlemsg
 * curve.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, CLOCK_PROCESS_CPUTIME_ID */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define BLOCK 96
#define LOADS 1000000

static double clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

/* ns per dependent load over a random cycle of the blocks of kib KiB,
 * and CPU ns per load in *cpu; -1 when the memory cannot be had. */
static double probe(size_t kib, double *cpu)
{
    size_t len = kib << 10, n = len / BLOCK;
    if (n < 2)
        return -1;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint32_t *order = malloc(n * sizeof(*order));
    if (m == MAP_FAILED || order == NULL) {
        free(order);
        if (m != MAP_FAILED)
            munmap(m, len);
        return -1;
    }
    /* A random order of the blocks (Fisher-Yates), then each block holds
     * the address of the next in that order, the last the first's. */
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(xorshift(&x) % (i + 1));
        uint32_t t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        *(char **)(m + (size_t)order[i] * BLOCK) =
            m + (size_t)order[(i + 1) % n] * BLOCK;
    free(order);
    /* A first lap (at most LOADS) warms what fits the caches; then the
     * timed loads. */
    char *p = m;
    for (size_t i = 0; i < n && i < LOADS; i++)
        p = *(char **)p;
    double t0 = clock_ns(CLOCK_MONOTONIC);
    double c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    for (size_t i = 0; i < LOADS; i++)
        p = *(char **)p;
    *cpu = (clock_ns(CLOCK_PROCESS_CPUTIME_ID) - c0) / LOADS;
    double ns = (clock_ns(CLOCK_MONOTONIC) - t0) / LOADS;
    /* Keeps the chase from being optimised away. */
    if (p == NULL)
        ns = -1;
    munmap(m, len);
    return ns;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: memlat-probe KiB...\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        size_t kib = (size_t)atol(argv[i]);
        double cpu = 0;
        double ns = probe(kib, &cpu);
        if (ns < 0) {
            fprintf(stderr, "memlat-probe: %zu KiB: no memory\n", kib);
            return 1;
        }
        printf("memlat kib=%zu ns_per_load=%.1f cpu_ns_per_load=%.1f\n", kib,
               ns, cpu);
        fflush(stdout);
    }
    return 0;
}

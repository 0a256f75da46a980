/* bench/c2c_probe.c — how long a cache line takes to go from one CPU to
 * another and back, now.
 *
 *   c2c-probe
 *
 * Two threads, one pinned to CPU 0 and one to CPU i, pass a counter back
 * and forth through one cache line: each waits until the line holds the
 * other's last value, then writes the next one. A pass is one round trip
 * of the line between the two CPUs' caches. Prints
 * `c2c_ns=<ns a round trip, CPU 0 and 1>,<CPU 0 and 2>,...` (the median of
 * 5 rounds of 200,000 round trips each for every pair).
 *
 * bench/run.sh records it with the machine, before and after the runs. On
 * a shared host the virtual CPUs may sit on one physical core's siblings,
 * on two cores of one core complex or on two complexes, and the host may
 * move them: a round trip then takes anything from ~50 ns to ~500 ns.
 * Every figure with two threads that exchange data (a message sent to
 * another worker, a wake-up, a steal) moves with it, a runtime that keeps
 * a conversation on one thread far less than one that hands every message
 * across (bench/FINDINGS.md, "The two CPUs' distance").
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define TRIPS 200000
#define ROUNDS 5

/* The line the two threads pass: the counter alone on it. The loads are
 * acquire and the stores release only to keep the compiler from merging
 * or hoisting them; what is measured is the line's coherence traffic,
 * which any order pays. */
static _Alignas(64) _Atomic uint64_t line;
static int other_cpu;

static int pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *echo(void *arg)
{
    (void)arg;
    /* Unpinned it still answers (the main thread would wait for good
     * otherwise); the pair's figure is then reported as unknown. */
    void *rc = pin(other_cpu) != 0 ? (void *)1 : NULL;
    for (uint64_t r = 0; r < (uint64_t)ROUNDS * TRIPS; r++) {
        while (atomic_load_explicit(&line, memory_order_acquire) != 2 * r + 1)
            ;
        atomic_store_explicit(&line, 2 * r + 2, memory_order_release);
    }
    return rc;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median round trip between CPU 0 and CPU cpu, in ns; < 0 when either
 * CPU cannot be had. */
static double pair_ns(int cpu)
{
    pthread_t t;
    double ns[ROUNDS];
    atomic_store_explicit(&line, 0, memory_order_relaxed);
    other_cpu = cpu;
    if (pin(0) != 0 || pthread_create(&t, NULL, echo, NULL) != 0)
        return -1;
    uint64_t v = 0;
    for (int k = 0; k < ROUNDS; k++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int i = 0; i < TRIPS; i++, v += 2) {
            atomic_store_explicit(&line, v + 1, memory_order_release);
            while (atomic_load_explicit(&line, memory_order_acquire) != v + 2)
                ;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        ns[k] = ((double)(b.tv_sec - a.tv_sec) * 1e9 +
                 (double)(b.tv_nsec - a.tv_nsec)) /
                TRIPS;
    }
    void *rc;
    pthread_join(t, &rc);
    if (rc != NULL)
        return -1;
    qsort(ns, ROUNDS, sizeof ns[0], cmp);
    return ns[ROUNDS / 2];
}

int main(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1 || n > CPU_SETSIZE)
        return 1;
    printf("c2c_ns=");
    if (n == 1)
        printf("-");
    for (long c = 1; c < n; c++) {
        double ns = pair_ns((int)c);
        if (ns < 0)
            printf("%s?", c > 1 ? "," : "");
        else
            printf("%s%.0f", c > 1 ? "," : "", ns);
    }
    printf("\n");
    return 0;
}

/* bench/cpu_probe.c — how fast each CPU runs one thread, now.
 *
 *   cpu-probe
 *
 * Pins itself to each online CPU in turn, times the same loop of
 * dependent additions there (the best of 3 passes) and prints
 * `cpu_ms=<ms on CPU 0>,<ms on CPU 1>,...`. bench/run.sh records it with
 * the machine, before and after the runs: on a shared host the virtual
 * CPUs need not be equal (a busy sibling thread on the host's core slows
 * one of them), and a single-threaded figure then depends on which CPU
 * its thread ran on (pingpong's two modes, bench/FINDINGS.md).
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double loop_ms(void)
{
    struct timespec a, b;
    /* A load, an add and a store per pass, through memory: the load and
     * store ports that a sibling thread on the same host core shares (a
     * chain of multiplications, which uses neither, runs at the same
     * speed on a CPU that this loop finds 50 % slower). */
    volatile uint64_t x = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (uint64_t i = 0; i < 100000000u; i++)
        x += i;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a.tv_sec) * 1e3 +
           (double)(b.tv_nsec - a.tv_nsec) / 1e6;
}

int main(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1 || n > CPU_SETSIZE)
        return 1;
    printf("cpu_ms=");
    for (long c = 0; c < n; c++) {
        cpu_set_t s;
        CPU_ZERO(&s);
        CPU_SET((int)c, &s);
        if (sched_setaffinity(0, sizeof s, &s) != 0) {
            printf("%s?", c > 0 ? "," : "");
            continue;
        }
        double best = loop_ms();
        for (int r = 0; r < 2; r++) {
            double t = loop_ms();
            if (t < best)
                best = t;
        }
        printf("%s%.0f", c > 0 ? "," : "", best);
    }
    printf("\n");
    return 0;
}

/* bench/c2c_probe.c — how long a cache line takes to go from one CPU to
 * another and back, now.
 *
 *   c2c-probe
 *
 * Two threads, one pinned to the first CPU this process may run on and one
 * to another, pass a counter back and forth through one cache line: each
 * waits until the line holds the other's last value, then writes the next
 * one. A pass is one round trip of the line between the two CPUs' caches.
 * Prints `c2c_ns=<ns a round trip, first CPU and second>,<first and
 * third>,...` over the CPUs of the process's affinity mask, in order (the
 * median of 5 rounds of 200,000 round trips each for every pair); `?` for
 * a pair whose thread could not be started on its CPU, `-` when there is
 * one CPU only.
 *
 * bench/run.sh records it with the machine, before and after the runs. On
 * a shared host the virtual CPUs' placement on the physical cores is the
 * host's, and may change; every figure with two threads that exchange
 * data (a message sent to another worker, a wake-up, a steal) pays this
 * round trip, a runtime that keeps a conversation on one thread less than
 * one that hands every message across (bench/FINDINGS.md, "The two CPUs'
 * distance").
 */
#define _GNU_SOURCE /* pthread_attr_setaffinity_np, sched_getaffinity */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TRIPS 200000
#define ROUNDS 5

/* The line the two threads pass, the counter alone on it (padded). The
 * loads are acquire and the stores release only to keep the compiler from
 * merging or hoisting them; what is measured is the line's coherence
 * traffic, which any order pays. */
static struct {
    _Alignas(64) _Atomic uint64_t v;
    char pad[64 - sizeof(uint64_t)];
} line;

static void *echo(void *arg)
{
    (void)arg;
    for (uint64_t r = 0; r < (uint64_t)ROUNDS * TRIPS; r++) {
        while (atomic_load_explicit(&line.v, memory_order_acquire) != 2 * r + 1)
            ;
        atomic_store_explicit(&line.v, 2 * r + 2, memory_order_release);
    }
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median round trip between CPUs a and b, in ns; < 0 when either
 * cannot be had. The echo thread is created on b (its attributes carry
 * the CPU), so a CPU it may not run on fails the creation rather than
 * leaving both threads spinning on one CPU. */
static double pair_ns(int a, int b)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(a, &s);
    if (pthread_setaffinity_np(pthread_self(), sizeof s, &s) != 0)
        return -1;
    pthread_attr_t at;
    if (pthread_attr_init(&at) != 0)
        return -1;
    CPU_ZERO(&s);
    CPU_SET(b, &s);
    pthread_t t;
    /* relaxed: pthread_create below orders it before the echo thread's
     * first load, and this thread's own loads follow it in order. */
    atomic_store_explicit(&line.v, 0, memory_order_relaxed);
    int rc = pthread_attr_setaffinity_np(&at, sizeof s, &s);
    if (rc == 0)
        rc = pthread_create(&t, &at, echo, NULL);
    pthread_attr_destroy(&at);
    if (rc != 0)
        return -1;
    double ns[ROUNDS];
    uint64_t v = 0;
    for (int k = 0; k < ROUNDS; k++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < TRIPS; i++, v += 2) {
            atomic_store_explicit(&line.v, v + 1, memory_order_release);
            while (atomic_load_explicit(&line.v, memory_order_acquire) != v + 2)
                ;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ns[k] = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 +
                 (double)(t1.tv_nsec - t0.tv_nsec)) /
                TRIPS;
    }
    pthread_join(t, NULL);
    qsort(ns, ROUNDS, sizeof ns[0], cmp);
    return ns[ROUNDS / 2];
}

int main(void)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
        printf("c2c_ns=?\n");
        return 0;
    }
    int first = -1, pairs = 0;
    printf("c2c_ns=");
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &allowed))
            continue;
        if (first < 0) {
            first = c;
            continue;
        }
        double ns = pair_ns(first, c);
        if (ns < 0)
            printf("%s?", pairs > 0 ? "," : "");
        else
            printf("%s%.0f", pairs > 0 ? "," : "", ns);
        pairs++;
        fflush(stdout);
    }
    if (pairs == 0)
        printf("-");
    printf("\n");
    return 0;
}

/* bench/handoff_probe.c — the least a process submitted from outside can
 * cost on this machine: the data movement alone, no engine.
 *
 *   handoff-probe [lines] [n] [random|seq]
 *
 * Two threads on two CPUs (the first two of the process's affinity mask).
 * The producer stands for the submitting thread: it takes a record that
 * the consumer freed (a free ring, oldest first, as the engine's free
 * slots come back), writes `lines` cache lines of it (what a spawn writes
 * into a slot), and puts its index into a work ring; the consumer stands
 * for a worker: it takes the index, reads and writes each of those lines
 * (the turn, the step and the finish) and puts the record back on the
 * free ring. Both rings are single-producer, single-consumer, with plain
 * (release) stores of their indices and no locked instruction, and each
 * side moves its index only every 16 items: everything here but the
 * records' own lines is cheaper than in any engine. 64 Ki records, as
 * many as the engine's injection ring holds, visited in a fixed random
 * order (`random`, the default: the engine's free slots come back in
 * magazines, not in address order) or in address order (`seq`, where the
 * CPUs' stride prefetchers help). Prints `handoff_ns=<ns an item>
 * lines=<lines> n=<n> order=<order>` (the median of 5 rounds).
 *
 * The records' lines go from the consumer's cache to the producer's and
 * back for every item. Where the CPUs are far apart (bench/c2c_probe.c:
 * a line's round trip of ~400-490 ns) that is the floor under submit's
 * figure (bench/FINDINGS.md, "submit"); with lines=1 it is the floor of a
 * slot layout whose outside spawn writes one line.
 */
#define _GNU_SOURCE /* pthread_attr_setaffinity_np, sched_getaffinity */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RECS (64u << 10)
#define RING (128u << 10) /* > RECS: a push never finds its ring full */
#define BATCH 16u
#define ROUNDS 5
#define LINE 64u

/* A spin-wait's pause, where the CPU has one. */
static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

typedef struct {
    /* Advanced by the ring's consumer; read by its producer (acquire). */
    _Alignas(64) _Atomic uint32_t head;
    /* Advanced by the ring's producer; read by its consumer (acquire). */
    _Alignas(64) _Atomic uint32_t tail;
    _Alignas(64) uint32_t buf[RING];
} ring;

static ring work, freed;
static unsigned char *recs;
static unsigned lines;
static uint64_t n_items;
static uint32_t *perm; /* record order: identity or a random permutation */

/* Producer side of r: its own tail kept in *t, published every BATCH.
 * release: the record's lines (and the index) before the new tail. */
static inline void push(ring *r, uint32_t *t, uint32_t v, int flush)
{
    r->buf[*t % RING] = v;
    ++*t;
    if (flush || *t % BATCH == 0)
        atomic_store_explicit(&r->tail, *t, memory_order_release);
}

/* Consumer side of r: *h its own head, *seen the tail last read. acquire:
 * pairs with push's release. Returns 0 when empty. */
static inline int pop(ring *r, uint32_t *h, uint32_t *seen, uint32_t *v)
{
    if (*h == *seen) {
        *seen = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (*h == *seen)
            return 0;
    }
    *v = r->buf[*h % RING];
    ++*h;
    /* release: the slot is read before the producer may reuse it (the
     * ring is larger than the items in flight, so it never does). */
    if (*h % BATCH == 0)
        atomic_store_explicit(&r->head, *h, memory_order_release);
    return 1;
}

static void *consumer(void *arg)
{
    (void)arg;
    uint32_t h = 0, seen = 0, ft = 0, v;
    uint64_t done = 0, sum = 0;
    while (done < n_items) {
        if (!pop(&work, &h, &seen, &v)) {
            relax();
            continue;
        }
        uint64_t *r = (uint64_t *)(recs + (size_t)perm[v] * lines * LINE);
        for (unsigned l = 0; l < lines; l++) {
            sum += r[l * 8];      /* read (the turn, the step) */
            r[l * 8 + 1] = done;  /* and write (the finish) */
        }
        done++;
        push(&freed, &ft, v, done == n_items);
    }
    return (void *)(uintptr_t)sum;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double round_ns(int cpu_a, int cpu_b)
{
    memset(&work, 0, sizeof work);
    memset(&freed, 0, sizeof freed);
    memset(recs, 0, (size_t)RECS * lines * LINE); /* warm, not faulting */
    pthread_attr_t at;
    pthread_attr_init(&at);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_b, &set);
    pthread_attr_setaffinity_np(&at, sizeof set, &set);
    CPU_ZERO(&set);
    CPU_SET(cpu_a, &set);
    sched_setaffinity(0, sizeof set, &set);
    pthread_t th;
    if (pthread_create(&th, &at, consumer, NULL) != 0) {
        perror("pthread_create");
        exit(1);
    }
    uint32_t wt = 0, fh = 0, fseen = 0, fresh = 0, v;
    double t0 = now_s();
    for (uint64_t i = 0; i < n_items; i++) {
        if (fresh < RECS)
            v = fresh++; /* the first use of each record */
        else
            while (!pop(&freed, &fh, &fseen, &v))
                relax();
        uint64_t *r = (uint64_t *)(recs + (size_t)perm[v] * lines * LINE);
        for (unsigned l = 0; l < lines; l++) /* a spawn's writes */
            for (unsigned w = 0; w < 8; w++)
                r[l * 8 + w] = i + w;
        push(&work, &wt, v, i + 1 == n_items);
    }
    pthread_join(th, NULL);
    double t = now_s() - t0;
    pthread_attr_destroy(&at);
    return t * 1e9 / (double)n_items;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    lines = argc > 1 ? (unsigned)atoi(argv[1]) : 2;
    n_items = argc > 2 ? strtoull(argv[2], NULL, 10) : 2000000;
    if (lines < 1 || lines > 4 || n_items < RECS) {
        fprintf(stderr, "usage: handoff-probe [lines 1-4] [n >= %u]\n", RECS);
        return 2;
    }
    cpu_set_t mask;
    sched_getaffinity(0, sizeof mask, &mask);
    int cpus[2], k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < 2; c++)
        if (CPU_ISSET(c, &mask))
            cpus[k++] = c;
    if (k < 2) {
        printf("handoff_ns=- lines=%u n=%llu\n", lines,
               (unsigned long long)n_items);
        return 0;
    }
    recs = aligned_alloc(LINE, (size_t)RECS * lines * LINE);
    perm = malloc(RECS * sizeof *perm);
    if (recs == NULL || perm == NULL)
        return 1;
    for (uint32_t i = 0; i < RECS; i++)
        perm[i] = i;
    int random = argc <= 3 || argv[3][0] == 'r';
    if (random) {
        srand(1);
        for (uint32_t i = RECS - 1; i > 0; i--) {
            uint32_t j = (uint32_t)rand() % (i + 1), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
    double r[ROUNDS];
    for (int i = 0; i < ROUNDS; i++)
        r[i] = round_ns(cpus[0], cpus[1]);
    qsort(r, ROUNDS, sizeof r[0], cmp_d);
    printf("handoff_ns=%.1f lines=%u n=%llu order=%s\n", r[ROUNDS / 2],
           lines, (unsigned long long)n_items, random ? "random" : "seq");
    free(recs);
    free(perm);
    return 0;
}

/* bench/handoff_probe.c — what passing records between two CPUs costs on
 * this machine, with no engine: the floor under submitting processes
 * from outside.
 *
 *   handoff-probe [lines] [records] [random|seq] [n]
 *
 * Two threads on two CPUs (the first two of the process's affinity mask,
 * which on a host with SMT may be one core's two threads).
 * The producer stands for the submitting thread: it takes a record that
 * the consumer freed (a free ring, oldest first), writes `lines` cache
 * lines of it (what a spawn writes into a slot), and puts its index into
 * a work ring; the consumer stands for a worker: it takes the index,
 * reads and writes each of those lines (the turn, the step and the
 * finish) and puts the record back on the free ring. Both rings are
 * single-producer, single-consumer, with release stores of their tails
 * published every 16 items and no locked instruction: everything here but
 * the records' own lines costs less than in any engine.
 *
 * `records` (default 1024) records circulate: a record comes back to the
 * producer `records` items after it left, so with few of them (as with
 * the engine's free slots when the workers keep up) it comes from the
 * consumer's cache, and with many (65536: the engine's injection ring
 * full) from the shared cache or memory. The producer takes them in a
 * fixed random order (`random`, the default: the engine's free slots come
 * back in magazines, not in address order) or in address order (`seq`,
 * where the CPUs' stride prefetchers help). The items' misses are
 * independent of each other, so the cores overlap them: a figure here is
 * a throughput, far below the line's round trip (bench/c2c_probe.c).
 * Prints `handoff_ns=<ns an item> lines=<lines> records=<records>
 * order=<order> n=<n>` (the median of 5 rounds of n items, default
 * 2,000,000, at least 4 x records so that most items reuse a record),
 * with `handoff_ns=-` where the process may run on one CPU only.
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

#define RECS_MAX (64u << 10)
/* A ring holds every record at once, so a push never finds it full: no
 * record is in two places, and at most `records` <= RECS_MAX indices are
 * in the two rings together. A slot is written again only RING pushes
 * later, after its reader has read it: the writer got the index it pushes
 * from the other ring, whose tail the reader released after reading. */
#define RING RECS_MAX
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
    /* Advanced by the ring's producer; read by its consumer. */
    _Alignas(64) _Atomic uint32_t tail;
    _Alignas(64) uint32_t buf[RING];
} ring;

static ring work, freed;
static unsigned char *recs;
static uint32_t *perm; /* record order: identity or a random permutation */
static unsigned lines;
static uint32_t n_recs;
static uint64_t n_items;

/* Producer side of r: its own tail kept in *t, published every BATCH
 * items and at the last (flush). release: the index, and the record's
 * lines written before it, are visible to a consumer that reads the new
 * tail. */
static inline void push(ring *r, uint32_t *t, uint32_t v, int flush)
{
    r->buf[*t % RING] = v;
    ++*t;
    if (flush || *t % BATCH == 0)
        atomic_store_explicit(&r->tail, *t, memory_order_release);
}

/* Consumer side of r: *h its own head (no one else reads it: see RING),
 * *seen the tail last read. acquire: pairs with push's release. Returns 0
 * when empty. */
static inline int pop(ring *r, uint32_t *h, uint32_t *seen, uint32_t *v)
{
    if (*h == *seen) {
        *seen = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (*h == *seen)
            return 0;
    }
    *v = r->buf[*h % RING];
    ++*h;
    return 1;
}

static inline uint64_t *rec_of(uint32_t v)
{
    return (uint64_t *)(recs + (size_t)perm[v] * lines * LINE);
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
        uint64_t *r = rec_of(v);
        for (unsigned l = 0; l < lines; l++) {
            sum += r[l * 8];     /* read (the turn, the step) */
            r[l * 8 + 1] = done; /* and write (the finish) */
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

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static double round_ns(int cpu_a, int cpu_b)
{
    pin(cpu_a);
    memset(&work, 0, sizeof work);
    memset(&freed, 0, sizeof freed);
    /* Written before the clock, so that no round pays page faults. */
    memset(recs, 0, (size_t)n_recs * lines * LINE);
    pthread_attr_t at;
    pthread_attr_init(&at);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_b, &set);
    pthread_attr_setaffinity_np(&at, sizeof set, &set);
    pthread_t th;
    if (pthread_create(&th, &at, consumer, NULL) != 0) {
        perror("pthread_create");
        exit(1);
    }
    uint32_t wt = 0, fh = 0, fseen = 0, fresh = 0, v;
    double t0 = now_s();
    for (uint64_t i = 0; i < n_items; i++) {
        if (fresh < n_recs)
            v = fresh++; /* the first use of each record */
        else
            while (!pop(&freed, &fh, &fseen, &v))
                relax();
        uint64_t *r = rec_of(v);
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
    long nr = argc > 2 ? atol(argv[2]) : 1024;
    const char *order = argc > 3 ? argv[3] : "random";
    n_items = argc > 4 ? strtoull(argv[4], NULL, 10) : 2000000;
    int shuffled = strcmp(order, "random") == 0;
    /* At least BATCH records: the producer waits for a freed record that
     * the consumer publishes only with its batch, which needs the
     * producer's batch of work before it. */
    if (lines < 1 || lines > 4 || nr < (long)BATCH || nr > (long)RECS_MAX ||
        (!shuffled && strcmp(order, "seq") != 0) ||
        n_items < 4 * (uint64_t)nr) {
        fprintf(stderr,
                "usage: handoff-probe [lines 1-4] [records %u-%u] "
                "[random|seq] [n >= 4 x records]\n",
                BATCH, RECS_MAX);
        return 2;
    }
    n_recs = (uint32_t)nr;
    cpu_set_t mask;
    sched_getaffinity(0, sizeof mask, &mask);
    int cpus[2], k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < 2; c++)
        if (CPU_ISSET(c, &mask))
            cpus[k++] = c;
    if (k < 2) {
        printf("handoff_ns=- lines=%u records=%u order=%s n=%llu\n", lines,
               n_recs, order, (unsigned long long)n_items);
        return 0;
    }
    recs = aligned_alloc(LINE, (size_t)n_recs * lines * LINE);
    perm = malloc(n_recs * sizeof *perm);
    if (recs == NULL || perm == NULL)
        return 1;
    for (uint32_t i = 0; i < n_recs; i++)
        perm[i] = i;
    if (shuffled) {
        srand(1);
        for (uint32_t i = n_recs - 1; i > 0; i--) {
            uint32_t j = (uint32_t)rand() % (i + 1), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
    double r[ROUNDS];
    for (int i = 0; i < ROUNDS; i++)
        r[i] = round_ns(cpus[0], cpus[1]);
    qsort(r, ROUNDS, sizeof r[0], cmp_d);
    printf("handoff_ns=%.1f lines=%u records=%u order=%s n=%llu\n",
           r[ROUNDS / 2], lines, n_recs, order, (unsigned long long)n_items);
    free(recs);
    free(perm);
    return 0;
}

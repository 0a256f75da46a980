/* engine/core/outcome.h — the outcome store: finished processes' results
 * kept for sx_engine_wait (engine/core/outcome.c), and the waiters
 * (engine/core/wait.c). Internal to engine/; never installed.
 */
#ifndef SX_ENGINE_CORE_OUTCOME_H
#define SX_ENGINE_CORE_OUTCOME_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/proc.h"
#include "engine/sched/spin.h"

/* ---- outcomes ------------------------------------------------------------ */

typedef struct sx__outcome {
    uint64_t id;
    uint64_t stamp; /* puts counted when it was put (outcome.c) */
    uint64_t order; /* its place in put order by bytes (outcome.c, "Bytes") */
    struct sx__outcome *hnext;
    int error;
    uint32_t attempts; /* sx_result.attempts */
    uint64_t steps;
    char *msg;      /* points into the same allocation, or NULL */
    size_t msg_len; /* its bytes with the NUL, or 0 */
    uint8_t *value; /* same allocation */
    size_t len;
    size_t cap; /* bytes for value and msg after the header */
    /* Readers copying a large record outside the shard lock (outcome.c,
     * sx__outcomes_find), and whether it was evicted meanwhile (then the last
     * reader frees it). Both under the shard lock. */
    uint32_t pins;
    bool evicted;
} sx__outcome;

/* Slots of the waiter count (wait.c, "Waiting"); a power of two. */
#define SX__WAIT_SLOTS 256

typedef struct sx__waiter {
    uint64_t id;
    pthread_cond_t cv;
    struct sx__waiter *next;
} sx__waiter;

/* One thread's outcomes (a worker's, or the one for every other thread):
 * a FIFO ring in put order and a chained hash index by PID id, all under
 * `mu`, which the owner takes per put and readers per look. */
typedef struct {
    alignas(64) sx__spin mu;
    sx__outcome **ring; /* cap entries, a power of two; NULL until used */
    size_t head, n, cap;
    sx__outcome **buckets; /* cap chains */
    /* Evicted records kept for the next puts (linked by hnext, at most
     * SX__SPARES_MAX; owner only): a put evicts none or several, not
     * exactly one, and with a single spare half the puts of a steady
     * stream would go to malloc and as many evictions to free. */
    sx__outcome *spare;
    unsigned n_spare;
    unsigned uncounted; /* puts not yet added to `counted` */
    /* Bytes (outcome.c, "Bytes") of the records in the ring, and those of
     * them not yet added to the store's `bytes`. */
    size_t bytes;
    int64_t dbytes;
    /* The order of the ring's oldest record (or a smaller one: it is not
     * written at every eviction), UINT64_MAX when empty: written under mu,
     * read by any put that finds the store over its byte budget
     * (outcome.c, "Bytes"). */
    _Atomic uint64_t head_order;
    /* Owner only: the record its next put will likely evict, to prefetch
     * (it may have been evicted and freed by another put meanwhile). */
    sx__outcome *victim;
} sx__oshard;

typedef struct {
    size_t keep;
    size_t cap_max;    /* a shard never holds more than keep: pow2 >= keep */
    uint64_t window;   /* keep + the count's lag (outcome.c) */
    int64_t budget;    /* keep_outcome_bytes, at most INT64_MAX */
    unsigned n_shards; /* workers + 1 */
    sx__oshard *shards;
    /* Puts so far, added in batches by each shard (a lower bound). */
    alignas(64) _Atomic uint64_t counted;
    /* Bytes of the records held, added in batches by each shard (its
     * dbytes); evictions from another shard's ring subtract at once. */
    alignas(64) _Atomic int64_t bytes;
    /* Records of more than ORDER_MIN bytes put so far (outcome.c). */
    _Atomic uint64_t seq;
    alignas(64) pthread_mutex_t wmu; /* guards waiters */
    sx__waiter *waiters;
    /* Waiters registered, counted by a hash of the PID they wait for (see
     * wait.c, "Waiting"): a finish reads only its PID's count. */
    _Atomic uint32_t n_waiting[SX__WAIT_SLOTS];
} sx__outcomes;

/* A hash of PID id, masked: the chain of a shard's index (mask: its cap
 * - 1) and the slot of n_waiting (SX__WAIT_SLOTS - 1). Inline: every put
 * takes both. */
static inline size_t sx__outcome_hash(uint64_t id, size_t mask)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    id ^= id >> 33;
    return (size_t)id & mask;
}

/* engine/core/outcome.c */
/* One shard per worker and one for every other thread. */
int sx__outcomes_init(sx__outcomes *o, size_t keep, size_t keep_bytes,
                      unsigned workers);
void sx__outcomes_fini(sx__outcomes *o);
/* Records held and their bytes (outcome.c, "Bytes"), each shard read under
 * its lock. */
void sx__outcomes_count(sx__outcomes *o, uint64_t *records, uint64_t *bytes);
/* Records p's outcome (copied) in the calling thread's shard (self: the
 * calling worker, or NULL), then retires p from the table (p NULL: an
 * outcome read back from the state store, of no live process), then wakes
 * its waiters. */
void sx__outcomes_put(sx_engine *e, sx__worker *self, sx__proc *p, uint64_t id,
                      int error, const char *msg, sx_payload value,
                      uint64_t steps, uint32_t attempts);
/* The same, for every caller but sx__finish (outcome.c says why). */
void sx__outcomes_put_cold(sx_engine *e, sx__worker *self, sx__proc *p,
                           uint64_t id, int error, const char *msg,
                           sx_payload value, uint64_t steps, uint32_t attempts);
/* Retires p (PID id) with no outcome, a spawn whose init failed, and
 * wakes its waiters, who then find neither outcome nor process
 * (SX_ENOTFOUND). */
void sx__outcomes_retire(sx_engine *e, sx__worker *self, sx__proc *p,
                         uint64_t id);
/* Copies the outcome of id into *out (free with sx_result_free); false
 * when it is not kept. */
bool sx__outcomes_get(sx_engine *e, uint64_t id, sx_result *out);
/* sx__outcomes_get's look, for wait: 1 found and copied into *out, 0 not
 * kept, SX_ENOMEM found but no memory for the copy. */
int sx__outcomes_find(sx__outcomes *o, uint64_t id, sx_result *out);

/* engine/core/wait.c */
/* Signals the waiters for id; a finish calls it when id's count in
 * n_waiting is not 0 (wait.c, "Waiting"). */
void sx__outcomes_wake(sx__outcomes *o, uint64_t id);

#endif

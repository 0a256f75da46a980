/* engine/outcome.c — finished processes' outcomes, kept for wait.
 *
 * The most recent `keep_outcomes` outcomes, in a ring (eviction order) plus
 * a chained hash index by PID id; waiters for a live process sleep on their
 * own condition variable in a list. One mutex guards it all: it is taken
 * once per finished process and once per wait.
 *
 * Ordering contract with the process table (engine.c, sx__finish): an
 * outcome is put before its process leaves the table, and wait looks in
 * both under this mutex, so a waiter sees either the outcome or the live
 * process.
 *
 * Threads: [any thread].
 */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

static size_t hash_id(uint64_t id, size_t mask)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    id ^= id >> 33;
    return (size_t)id & mask;
}

int sx__outcomes_init(sx__outcomes *o, size_t keep)
{
    memset(o, 0, sizeof(*o));
    o->keep = keep;
    size_t nb = 16;
    while (nb < keep)
        nb *= 2;
    o->ring = calloc(keep, sizeof(*o->ring));
    o->buckets = calloc(nb, sizeof(*o->buckets));
    if (o->ring == NULL || o->buckets == NULL) {
        free(o->ring);
        free(o->buckets);
        return SX_ENOMEM;
    }
    o->mask = nb - 1;
    int rc = pthread_mutex_init(&o->mu, NULL);
    if (rc != 0) {
        free(o->ring);
        free(o->buckets);
        return -rc;
    }
    return 0;
}

void sx__outcomes_fini(sx__outcomes *o)
{
    for (size_t i = 0; i < o->keep; i++)
        free(o->ring[i]);
    free(o->ring);
    free(o->buckets);
    pthread_mutex_destroy(&o->mu);
}

static sx__outcome *find(sx__outcomes *o, uint64_t id)
{
    for (sx__outcome *x = o->buckets[hash_id(id, o->mask)]; x != NULL;
         x = x->hnext)
        if (x->id == id)
            return x;
    return NULL;
}

static void unlink_hash(sx__outcomes *o, sx__outcome *x)
{
    sx__outcome **pp = &o->buckets[hash_id(x->id, o->mask)];
    while (*pp != x)
        pp = &(*pp)->hnext;
    *pp = x->hnext;
}

/* A record evicted from the ring, kept by a worker thread for its next
 * put: once the ring is full every finish evicts one record and needs one,
 * so a worker reuses them instead of a malloc and a free per finish (the
 * free often on another thread's arena). Records are plain heap blocks,
 * not tied to an engine. initial-exec: see tls_worker in worker.c. */
static _Thread_local struct {
    sx__outcome *x;
    bool on;
} spare __attribute__((tls_model("initial-exec")));

/* Room for small values and messages, so that records are reusable. */
#define OUTCOME_MIN_CAP 48

void sx__outcome_spare_enable(void)
{
    spare.on = true;
}

void sx__outcome_spare_flush(void)
{
    free(spare.x);
    spare.x = NULL;
    spare.on = false;
}

static sx__outcome *record_get(size_t need)
{
    sx__outcome *x = spare.x;
    if (x != NULL && x->cap >= need) {
        spare.x = NULL;
        return x;
    }
    size_t cap = need > OUTCOME_MIN_CAP ? need : OUTCOME_MIN_CAP;
    x = malloc(sizeof(*x) + cap);
    if (x != NULL)
        x->cap = cap;
    return x;
}

static void record_put(sx__outcome *x)
{
    if (spare.on && spare.x == NULL)
        spare.x = x;
    else
        free(x);
}

void sx__outcomes_put(sx_engine *e, sx__proc *p, uint64_t id, int error,
                      const char *msg, sx_payload value, uint64_t steps)
{
    sx__outcomes *o = &e->outcomes;
    size_t ml = msg != NULL ? strlen(msg) + 1 : 0;
    sx__outcome *x = record_get(ml + value.len);
    sx__outcome *evicted = NULL;
    pthread_mutex_lock(&o->mu);
    if (x != NULL) {
        x->id = id;
        x->error = error;
        x->steps = steps;
        x->len = value.len;
        x->value = (uint8_t *)(x + 1);
        if (value.len > 0)
            memcpy(x->value, value.data, value.len);
        x->msg = ml > 0 ? (char *)x->value + value.len : NULL;
        if (ml > 0)
            memcpy(x->msg, msg, ml);
        sx__outcome *old = o->ring[o->ring_head];
        if (old != NULL) {
            unlink_hash(o, old);
            evicted = old; /* freed or kept after the lock */
        } else {
            o->count++;
        }
        o->ring[o->ring_head] = x;
        o->ring_head = (o->ring_head + 1) % o->keep;
        size_t b = hash_id(id, o->mask);
        x->hnext = o->buckets[b];
        o->buckets[b] = x;
    }
    /* Under the same lock: from now on the PID no longer resolves, and a
     * waiter holding the lock sees the outcome or the live process. */
    sx__ptable_retire(e, p);
    /* Out of memory: the outcome is not kept; waiters are still woken and
     * then find neither outcome nor process (SX_ENOTFOUND). */
    for (sx__waiter *w = o->waiters; w != NULL; w = w->next)
        if (w->id == id)
            pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&o->mu);
    if (evicted != NULL)
        record_put(evicted);
}

static bool copy_out(const sx__outcome *x, sx_result *out)
{
    memset(out, 0, sizeof(*out));
    out->error = x->error;
    out->steps = x->steps;
    if (x->len > 0) {
        uint8_t *v = malloc(x->len);
        if (v == NULL)
            return false;
        memcpy(v, x->value, x->len);
        out->value = (sx_payload){ v, x->len };
    }
    if (x->msg != NULL) {
        size_t n = strlen(x->msg) + 1;
        out->error_msg = malloc(n);
        if (out->error_msg == NULL) {
            sx_result_free(out);
            return false;
        }
        memcpy(out->error_msg, x->msg, n);
    }
    return true;
}

bool sx__outcomes_get(sx_engine *e, uint64_t id, sx_result *out)
{
    sx__outcomes *o = &e->outcomes;
    pthread_mutex_lock(&o->mu);
    sx__outcome *x = find(o, id);
    bool ok = x != NULL && copy_out(x, out);
    pthread_mutex_unlock(&o->mu);
    return ok;
}

static int deadline_of(int64_t timeout_ms, struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(timeout_ms / 1000);
    ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
    return 0;
}

int sx_engine_wait(sx_engine *e, sx_pid pid, int64_t timeout_ms, sx_result *out)
{
    if (e == NULL || out == NULL)
        return SX_EINVAL;
    memset(out, 0, sizeof(*out));
    sx__outcomes *o = &e->outcomes;
    sx__waiter w;
    w.id = pid.id;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&w.cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        return -rc;
    struct timespec dl;
    if (timeout_ms >= 0)
        deadline_of(timeout_ms, &dl);
    pthread_mutex_lock(&o->mu);
    for (;;) {
        sx__outcome *x = find(o, pid.id);
        if (x != NULL) {
            rc = copy_out(x, out) ? 0 : SX_ENOMEM;
            break;
        }
        sx__proc *p = sx__ptable_get(e, pid);
        if (p == NULL) {
            rc = SX_ENOTFOUND;
            break;
        }
        /* Dropping this reference cannot free the slot: the live
         * reference is only dropped after the outcome is put, which needs
         * the mutex we hold. */
        sx__proc_release(e, p);
        w.next = o->waiters;
        o->waiters = &w;
        int wr = timeout_ms >= 0 ? pthread_cond_timedwait(&w.cv, &o->mu, &dl)
                                 : pthread_cond_wait(&w.cv, &o->mu);
        sx__waiter **pp = &o->waiters;
        while (*pp != &w)
            pp = &(*pp)->next;
        *pp = w.next;
        if (wr == ETIMEDOUT) {
            x = find(o, pid.id);
            rc = x == NULL ? SX_ETIMEDOUT : (copy_out(x, out) ? 0 : SX_ENOMEM);
            break;
        }
    }
    pthread_mutex_unlock(&o->mu);
    pthread_cond_destroy(&w.cv);
    return rc;
}

void sx_result_free(sx_result *r)
{
    if (r == NULL)
        return;
    free((void *)r->value.data);
    free(r->error_msg);
    memset(r, 0, sizeof(*r));
}

/* engine/core/supervise.c — restart policies (docs/DURABILITY.md,
 * "Supervision"): a job whose policy says so is started again after it
 * ends, with its PID, after a backoff, at most max_restarts times within
 * window_ms.
 *
 * A restart keeps the process's slot and its table reference, and it stays
 * counted live. Its generation moves on at once, so that nothing of the
 * attempt that ended (a completion still on a loop, a sleep in a timer
 * set, a completer held by a command) can reach the next attempt; look-ups
 * of the job's PID, whose generation stays, take the slot through its
 * alias (sx__pext.alias_gen, ptable.c). While it waits its state word stays
 * COMPLETE, as the finish left it: messages are refused (SX_ECLOSED), and a
 * cancel or terminate ends the job at once. The supervisor thread (one per
 * engine, started at the first restart) waits out the backoffs and runs
 * init again.
 *
 * Threads: sx__job_restart_maybe [the finishing worker]; the supervisor
 * thread; request_end [any thread]; the stop functions [stop's caller].
 */
#define _DEFAULT_SOURCE /* random() */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/core/core.h"
#include "engine/core/job.h"
#include "engine/core/live.h"
#include "engine/sched/sched.h"
#include "engine/store/store.h"

#define now_ms sx__mono_ms
#define wall_offset_ms sx__wall_offset_ms

/* ---- what the store keeps of a job's supervision ----------------------------
 */

size_t sx__policy_pack(const sx_restart_policy *p, uint8_t *buf, size_t cap)
{
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, cap);
    sx_pack_array(&pk, 5);
    sx_pack_uint(&pk, (uint64_t)p->mode);
    sx_pack_uint(&pk, p->max_restarts);
    sx_pack_uint(&pk, p->window_ms);
    sx_pack_uint(&pk, p->backoff_min_ms);
    sx_pack_uint(&pk, p->backoff_max_ms);
    return pk.err == 0 ? pk.len : 0;
}

int sx__policy_unpack(sx_payload b, sx_restart_policy *p)
{
    sx_unpack u;
    sx_unpack_init(&u, b);
    uint32_t n;
    uint64_t v[5];
    if (sx_unpack_array(&u, &n) != 0 || n != 5)
        return SX_ECORRUPT;
    for (int i = 0; i < 5; i++)
        if (sx_unpack_uint(&u, &v[i]) != 0 || v[i] > UINT32_MAX)
            return SX_ECORRUPT;
    *p = (sx_restart_policy){ (int)v[0], (uint32_t)v[1], (uint32_t)v[2],
                              (uint32_t)v[3], (uint32_t)v[4] };
    return sx_restart_policy_check(p) == 0 ? 0 : SX_ECORRUPT;
}

/* j's last end and its restart times (wall-clock ms), packed into pk:
 * [last_error, [time...]]. */
static void restarts_pack(const sx__job *j, sx_pack *pk)
{
    int64_t off = wall_offset_ms();
    sx_pack_array(pk, 2);
    sx_pack_str(pk, j->last_error);
    sx_pack_array(pk, j->n_times);
    for (uint32_t i = 0; i < j->n_times; i++)
        sx_pack_int(pk, (int64_t)j->times[i] + off);
}

void sx__restarts_unpack(sx__job *j, sx_payload b)
{
    if (j->times == NULL || b.len == 0)
        return;
    /* Not UTF-8 checked: last_error is only ever shown escaped. */
    int64_t off = wall_offset_ms();
    sx_unpack u;
    sx_unpack_init(&u, b);
    uint32_t n;
    const char *le;
    size_t ll;
    if (sx_unpack_array(&u, &n) != 0 || n != 2 ||
        sx_unpack_str(&u, &le, &ll) != 0 || sx_unpack_array(&u, &n) != 0)
        return;
    snprintf(j->last_error, sizeof j->last_error, "%.*s",
             (int)(ll < sizeof j->last_error ? ll : sizeof j->last_error - 1),
             le);
    for (uint32_t i = 0; i < n && j->n_times < j->policy.max_restarts; i++) {
        int64_t t;
        if (sx_unpack_int(&u, &t) != 0)
            return;
        int64_t mono = t - off;
        j->times[j->head] = mono > 0 ? (uint64_t)mono : 0;
        j->head = (j->head + 1) % j->policy.max_restarts;
        j->n_times++;
    }
}

/* Records j's restart state in the store (a stored job): the attempt that
 * ended and when the next is due (due_ms 0: it runs now). */
static void store_restart(sx_engine *e, const sx__job *j, uint64_t due_ms)
{
    if (!j->stored || e->store == NULL)
        return;
    sx_pack pk;
    sx_pack_init(&pk);
    restarts_pack(j, &pk);
    int64_t at = due_ms != 0 ? (int64_t)due_ms + wall_offset_ms() : 0;
    /* Not stored (out of memory): a crash then runs the job again at
     * once, not after its backoff. */
    if (pk.err == 0)
        sx__store_restart(e->store, j->id, j->attempt, at,
                          sx_pack_payload(&pk));
    sx_pack_fini(&pk);
}

int sx_restart_policy_check(sx_restart_policy *p)
{
    if (p == NULL)
        return SX_EINVAL;
    if (p->mode < SX_RESTART_NEVER || p->mode > SX_RESTART_ALWAYS)
        return SX_EINVAL;
    if (p->max_restarts == 0)
        p->max_restarts = SX_RESTART_MAX_DEFAULT;
    if (p->window_ms == 0)
        p->window_ms = SX_RESTART_WINDOW_DEFAULT_MS;
    if (p->backoff_min_ms == 0)
        p->backoff_min_ms = SX_RESTART_BACKOFF_MIN_DEFAULT_MS;
    if (p->backoff_max_ms == 0)
        p->backoff_max_ms =
            p->backoff_min_ms > SX_RESTART_BACKOFF_MAX_DEFAULT_MS
                ? p->backoff_min_ms
                : SX_RESTART_BACKOFF_MAX_DEFAULT_MS;
    if (p->backoff_min_ms > p->backoff_max_ms || p->max_restarts > 1000000)
        return SX_EINVAL;
    return 0;
}

sx__job *sx__job_new(uint64_t id, const sx_restart_policy *policy,
                     const char *method, sx_payload inputs)
{
    sx__job *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return NULL;
    j->id = id;
    j->attempt = 1;
    j->started_ms = now_ms();
    atomic_init(&j->ended_by_request, false);
    if (policy == NULL || policy->mode == SX_RESTART_NEVER)
        return j; /* policy zeroed: never */
    j->policy = *policy;
    if (sx_restart_policy_check(&j->policy) != 0) {
        free(j);
        return NULL;
    }
    size_t ml = strlen(method) + 1;
    char *m = malloc(ml);
    uint8_t *in = malloc(inputs.len > 0 ? inputs.len : 1);
    j->times = calloc(j->policy.max_restarts, sizeof(*j->times));
    if (m == NULL || in == NULL || j->times == NULL) {
        free(m);
        free(in);
        free(j->times);
        free(j);
        return NULL;
    }
    memcpy(m, method, ml);
    if (inputs.len > 0)
        memcpy(in, inputs.data, inputs.len);
    j->method = m;
    j->input = in;
    j->input_len = inputs.len;
    return j;
}

int sx__inputs_split(sx_payload packed, sx_payload **out, size_t *n)
{
    sx_unpack u;
    sx_unpack_init(&u, packed);
    uint32_t k;
    if (sx_unpack_array(&u, &k) != 0)
        return SX_ECORRUPT;
    sx_payload *in = calloc(k != 0 ? k : 1, sizeof(*in));
    if (in == NULL)
        return SX_ENOMEM;
    for (uint32_t i = 0; i < k; i++)
        if (sx_unpack_raw(&u, &in[i]) != 0) {
            free(in);
            return SX_ECORRUPT;
        }
    *out = in;
    *n = k;
    return 0;
}

void sx__job_free(sx__job *j)
{
    if (j == NULL)
        return;
    free((char *)j->method);
    free(j->input);
    free(j->times);
    sx__ckpt_free(j->ck);
    free(j);
}

/* ---- policies and the slot of a restart -----------------------------------
 */

const sx_restart_policy *sx__type_restart(sx_engine *e, const char *type)
{
    if (e->type_restart == NULL || type == NULL)
        return NULL;
    const sx_process_type *t = sx__type_find(e, type);
    if (t == NULL)
        return NULL;
    for (size_t i = 0; i < e->n_types; i++)
        if (e->types[i] == t)
            return e->type_restart[i].mode != SX_RESTART_NEVER
                       ? &e->type_restart[i]
                       : NULL;
    return NULL;
}

int sx_engine_set_restart(sx_engine *e, const char *type,
                          const sx_restart_policy *policy)
{
    if (e == NULL || type == NULL)
        return SX_EINVAL;
    if (sx__started(e))
        return SX_ESTATE;
    const sx_process_type *t = sx__type_find(e, type);
    if (t == NULL)
        return SX_EINVAL;
    sx_restart_policy p = { 0 };
    if (policy != NULL) {
        p = *policy;
        if (sx_restart_policy_check(&p) != 0)
            return SX_EINVAL;
    }
    if (e->type_restart_cap < e->n_types) {
        sx_restart_policy *r =
            realloc(e->type_restart, e->cap_types * sizeof(*r));
        if (r == NULL)
            return SX_ENOMEM;
        memset(r + e->type_restart_cap, 0,
               (e->cap_types - e->type_restart_cap) * sizeof(*r));
        e->type_restart = r;
        e->type_restart_cap = e->cap_types;
    }
    for (size_t i = 0; i < e->n_types; i++)
        if (e->types[i] == t)
            e->type_restart[i] = p;
    if (p.mode != SX_RESTART_NEVER)
        e->jobs = true;
    return 0;
}

void sx__proc_reset(sx_engine *e, sx__proc *p)
{
    /* Events of the earlier attempt: messages refused while it waited,
     * answers that came late. The slot is ours: nothing runs it, and the
     * producers that pushed have let go of it (restart_now). */
    sx__proc_drain(p);
    if (p->type->state_size > 0)
        memset(p->user_state, 0, p->type->state_size);
    /* relaxed: published with the queueing that follows. */
    atomic_store_explicit(&p->steps, 0, memory_order_relaxed);
    atomic_store_explicit(&p->trap_exit, 0, memory_order_relaxed);
    atomic_store_explicit(&sx__ptable_pext(e, p)->link_failed, 0,
                          memory_order_relaxed);
    atomic_store_explicit(&sx__ptable_pext(e, p)->expired_ms, 0,
                          memory_order_relaxed);
    p->wait_kind = 0;
    if (p->job) /* its checkpoints go with the attempt (store.h) */
        sx__ckpt_reset(sx__job_of(e, p)->ck);
}

/* ---- the decision -----------------------------------------------------------
 */

/* The delay before the next restart: the last one doubled (or the
 * minimum, first and after a stable attempt), capped, plus up to a quarter
 * of it at random, capped again. */
static uint32_t backoff(sx__job *j, uint64_t now)
{
    const sx_restart_policy *p = &j->policy;
    uint64_t b;
    if (j->backoff_ms == 0 || now - j->started_ms >= p->window_ms)
        b = p->backoff_min_ms;
    else
        b = (uint64_t)j->backoff_ms * 2;
    if (b > p->backoff_max_ms)
        b = p->backoff_max_ms;
    j->backoff_ms = (uint32_t)b;
    /* random(): a jitter needs no quality, and its lock is taken only on
     * a restart. */
    uint64_t jitter = b / 4 > 0 ? (uint64_t)random() % (b / 4 + 1) : 0;
    b += jitter;
    return (uint32_t)(b > p->backoff_max_ms ? p->backoff_max_ms : b);
}

bool sx__job_restart_maybe(sx_engine *e, sx__proc *p, sx__job *j, int *error,
                           const char **msg, char *buf, size_t cap)
{
    const sx_restart_policy *pol = &j->policy;
    int err = *error;
    if (pol->mode == SX_RESTART_NEVER ||
        /* relaxed: see the field. */
        atomic_load_explicit(&j->ended_by_request, memory_order_relaxed) ||
        err == SX_ETERMINATED || err == SX_ECANCELLED ||
        (err == 0 && pol->mode != SX_RESTART_ALWAYS))
        return false;
    const char *why = err == 0       ? "it finished"
                      : *msg != NULL ? *msg
                                     : sx_strerror(err);
    uint64_t now = now_ms();
    /* Restarts within the window: the ring holds the last max_restarts. */
    uint32_t in_window = 0;
    for (uint32_t i = 0; i < j->n_times; i++)
        in_window += now - j->times[i] < pol->window_ms;
    if (in_window >= pol->max_restarts) {
        snprintf(buf, cap, "restart limit (%u in %u ms) reached; last: %s",
                 pol->max_restarts, pol->window_ms, why);
        *error = SX_ERESTART_LIMIT;
        *msg = buf;
        return false;
    }
    j->times[j->head] = now;
    j->head = (j->head + 1) % pol->max_restarts;
    if (j->n_times < pol->max_restarts)
        j->n_times++;
    snprintf(j->last_error, sizeof j->last_error, "%s%s%s",
             err != 0 ? sx_errname(err) : "done", err != 0 ? ": " : "", why);
    uint32_t delay = backoff(j, now);
    /* The PID keeps its generation through the alias, set before the
     * slot's own moves on so that no look-up misses in between (release:
     * pairs with the acquire load in sx__ptable_get). */
    sx__pext *x = sx__ptable_pext(e, p);
    if (atomic_load_explicit(&x->alias_gen, memory_order_relaxed) == 0)
        atomic_store_explicit(&x->alias_gen, (uint32_t)(j->id >> 32),
                              memory_order_release);
    sx__ptable_regen(e, p);
    /* Its sleeps still in timer sets are now dead (sleep.c); release: as
     * in a finish (proc.c). */
    if (p->sleeps > 0) {
        atomic_fetch_add_explicit(&e->tm_dead, p->sleeps, memory_order_release);
        p->sleeps = 0;
    }
    /* + 1: now is truncated to the millisecond, and a restart is never
     * early. */
    j->due_ms = now + delay + 1;
    store_restart(e, j, j->due_ms);
    sx__sup_add(e, j);
    return true;
}

/* ---- the supervisor thread --------------------------------------------------
 */

static void *sup_main(void *arg);

void sx__sup_add(sx_engine *e, sx__job *j)
{
    pthread_mutex_lock(&e->sup_mu);
    if (!e->sup_running && !e->sup_stop) {
        /* The thread starts with the signals its creator blocks (a worker:
         * those of the engine's caller). */
        if (pthread_create(&e->sup_thread, NULL, sup_main, e) == 0)
            e->sup_running = true;
    }
    j->waiting = true;
    j->next = e->sup_list;
    e->sup_list = j;
    pthread_cond_signal(&e->sup_cv);
    pthread_mutex_unlock(&e->sup_mu);
    if (!e->sup_running) {
        /* No thread (out of resources): the job ends here, as it would at
         * its restart limit. */
        pthread_mutex_lock(&e->sup_mu);
        sx__job **pp = &e->sup_list;
        while (*pp != j)
            pp = &(*pp)->next;
        *pp = j->next;
        j->waiting = false;
        pthread_mutex_unlock(&e->sup_mu);
        sx__job_end(e, j->p, SX_ENOMEM, "cannot start the supervisor thread");
    }
}

/* Runs the job's init again on its slot and queues it. */
static void restart_now(sx_engine *e, sx__job *j)
{
    sx__proc *p = j->p;
    /* Whoever still holds a reference taken before the generation moved
     * on is about to let it go (look-ups hold theirs for one delivery; a
     * worker keeps none on a job's slot: engine/core/proc.h, sx__prefs);
     * what they push is for the earlier attempt and is drained below. */
    /* acquire: their release of refs, and with it what they pushed. */
    while (atomic_load_explicit(&p->refs, memory_order_acquire) > 1) {
        struct timespec ts = { 0, 100 * 1000 };
        nanosleep(&ts, NULL);
    }
    sx__proc_reset(e, p);
    j->attempt++;
    j->started_ms = now_ms();
    store_restart(e, j, 0);
    sx_payload *in = NULL;
    size_t n = 0;
    int rc = sx__inputs_split((sx_payload){ j->input, j->input_len }, &in, &n);
    if (rc == 0) {
        sx_pid self = { e->cfg.node, e->cfg.host, j->id };
        rc = sx__proc_reinit(e, p, self, j->method, in, n);
    }
    free(in);
    if (rc != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "init failed at restart %u: %s",
                 j->attempt - 1, sx_strerror(rc));
        sx__job_end(e, p, rc, msg);
    }
}

static void *sup_main(void *arg)
{
    sx_engine *e = arg;
    pthread_mutex_lock(&e->sup_mu);
    while (!e->sup_stop) {
        uint64_t now = now_ms(), first = UINT64_MAX;
        sx__job **due = NULL;
        for (sx__job **pp = &e->sup_list; *pp != NULL; pp = &(*pp)->next)
            if ((*pp)->due_ms < first) {
                first = (*pp)->due_ms;
                due = pp;
            }
        if (due == NULL) {
            pthread_cond_wait(&e->sup_cv, &e->sup_mu);
        } else if (first > now) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t ms = first - now;
            ts.tv_sec += (time_t)(ms / 1000);
            ts.tv_nsec += (long)(ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&e->sup_cv, &e->sup_mu, &ts);
        } else {
            sx__job *j = *due;
            *due = j->next;
            j->waiting = false;
            pthread_mutex_unlock(&e->sup_mu);
            restart_now(e, j);
            pthread_mutex_lock(&e->sup_mu);
        }
    }
    pthread_mutex_unlock(&e->sup_mu);
    return NULL;
}

/* Takes j off the waiting list: true when it was waiting (the caller now
 * ends it), false when the supervisor has it or it is not waiting. */
static bool unwait(sx_engine *e, sx__job *j)
{
    pthread_mutex_lock(&e->sup_mu);
    bool was = j->waiting;
    if (was) {
        sx__job **pp = &e->sup_list;
        while (*pp != j)
            pp = &(*pp)->next;
        *pp = j->next;
        j->waiting = false;
    }
    pthread_mutex_unlock(&e->sup_mu);
    return was;
}

int sx__job_request_end(sx_engine *e, sx_pid pid, int error, const char *msg)
{
    sx__proc *p = sx__ptable_get(e, pid);
    if (p == NULL)
        return 0;
    /* acquire: pairs with the release store that made it a job. */
    sx__job *j =
        atomic_load_explicit(&sx__ptable_pext(e, p)->job, memory_order_acquire);
    int ended = 0;
    if (j != NULL) {
        /* relaxed: see the field. */
        atomic_store_explicit(&j->ended_by_request, true, memory_order_relaxed);
        if (unwait(e, j)) {
            sx__job_end(e, p, error, msg);
            ended = 1;
        }
    }
    sx__proc_release(e, p);
    return ended;
}

void sx__sup_end_all(sx_engine *e)
{
    for (;;) {
        pthread_mutex_lock(&e->sup_mu);
        sx__job *j = e->sup_list;
        if (j != NULL) {
            e->sup_list = j->next;
            j->waiting = false;
        }
        pthread_mutex_unlock(&e->sup_mu);
        if (j == NULL)
            return;
        sx__job_end(e, j->p, SX_ECANCELLED, "stop");
    }
}

void sx__sup_stop(sx_engine *e)
{
    pthread_mutex_lock(&e->sup_mu);
    e->sup_stop = true;
    bool running = e->sup_running;
    pthread_cond_signal(&e->sup_cv);
    pthread_mutex_unlock(&e->sup_mu);
    if (running)
        pthread_join(e->sup_thread, NULL);
}

uint64_t sx__sup_waiting(sx_engine *e)
{
    uint64_t n = 0;
    pthread_mutex_lock(&e->sup_mu);
    for (sx__job *j = e->sup_list; j != NULL; j = j->next)
        n++;
    pthread_mutex_unlock(&e->sup_mu);
    return n;
}

size_t sx__sup_list(sx_engine *e, sx_process_info *out, size_t cap)
{
    size_t n = 0;
    uint64_t now = now_ms();
    pthread_mutex_lock(&e->sup_mu);
    for (sx__job *j = e->sup_list; j != NULL && n < cap; j = j->next) {
        sx_process_info *i = &out[n++];
        memset(i, 0, sizeof(*i));
        i->pid = (sx_pid){ e->cfg.node, e->cfg.host, j->id };
        i->type = j->p->type->name;
        i->method =
            j->p->method != 0 ? j->p->type->methods[j->p->method - 1] : NULL;
        i->state = SX_PSTATE_RESTARTING;
        i->attempts = j->attempt;
        i->restart_in_ms = j->due_ms > now ? (int64_t)(j->due_ms - now) : 0;
        snprintf(i->last_error, sizeof i->last_error, "%s", j->last_error);
    }
    pthread_mutex_unlock(&e->sup_mu);
    return n;
}

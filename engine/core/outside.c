/* engine/core/outside.c — seams for code outside the engine that is not a
 * process (the relay server, embedders): mailboxes (PIDs whose messages go
 * to a callback), monitors set up from outside, outcome callbacks, and
 * sends from outside (a message to a checkpointed job is stored first:
 * engine/core/checkpoint.c).
 *
 * A mailbox is a process slot in state SX__PSTATE_MAILBOX. Senders reach
 * it exactly as they reach a process (sx__ptable_get, then sx__deliver,
 * holding a reference), so the send path gains one branch and no lock.
 * Closing a mailbox flips its state to COMPLETE (new sends miss), retires
 * its PID, then waits until no sender holds a reference: after that no
 * callback is running or can start.
 *
 * Threads: [any thread] unless a function says otherwise.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "engine/core/core.h"
#include "engine/core/job.h"    /* sx__ckpt_send */
#include "engine/store/store.h" /* sx__store_on_thread */
#include "process/utf8.h"       /* sx__topic_len */

typedef struct {
    sx_mailbox_fn fn;
    void *user;
    /* The slot's process generation, put back when the mailbox closes
     * (ptable.c, "Generations"). */
    uint32_t proc_gen;
} mailbox_hook;

/* 32 random bits for a mailbox's generation (ptable.c keeps 31 of them),
 * or -errno. getrandom blocks only before the kernel's pool is first
 * seeded, early in boot. */
static int random32(uint32_t *out)
{
    for (;;) {
        ssize_t n = getrandom(out, sizeof(*out), 0);
        if (n == (ssize_t)sizeof(*out))
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

static bool started(sx_engine *e)
{
    /* acquire: pairs with the release store in start. */
    return atomic_load_explicit(&e->started, memory_order_acquire) != 0;
}

int sx_engine_mailbox_new(sx_engine *e, sx_mailbox_fn fn, void *user,
                          sx_pid *out_pid)
{
    if (e == NULL || fn == NULL || out_pid == NULL)
        return SX_EINVAL;
    if (!started(e))
        return SX_ESTATE;
    /* As submit: once stop has begun there is nothing left to talk to.
     * relaxed: a refusal, not a guarantee; one made as stop begins is
     * closed at sx_engine_free like any left open. */
    if (atomic_load_explicit(&e->stopping, memory_order_relaxed))
        return SX_ESTOPPING;
    mailbox_hook *h = malloc(sizeof(*h)); /* owned by the slot until free */
    if (h == NULL)
        return SX_ENOMEM;
    h->fn = fn;
    h->user = user;
    uint32_t r;
    int rc = random32(&r);
    if (rc != 0) {
        free(h);
        return rc;
    }
    /* A slot with no type: the state below keeps every process path
     * (run, list, stop) away from it. */
    sx__proc *p = sx__ptable_alloc_mailbox(e, r, &h->proc_gen);
    if (p == NULL) {
        free(h);
        return sx__ptable_full(e) ? SX_ELIMIT : SX_ENOMEM;
    }
    p->user_state = h;
    /* release: publishes the hook to senders (acquire in sx__deliver). */
    atomic_store_explicit(&p->state, SX__PSTATE_MAILBOX, memory_order_release);
    *out_pid = sx__proc_pid_raw(e, p);
    return 0;
}

void sx__mailbox_deliver(sx_engine *e, sx__proc *p, sx__ev *ev)
{
    (void)e;
    mailbox_hook *h = p->user_state;
    sx_message m = { ev->from, sx__proc_pid_raw(e, p), NULL, { NULL, 0 } };
    if (ev->nmsg > 0) {
        /* A bundle (event.c): one callback per message, in order. */
        size_t off = 0;
        for (unsigned i = 0; i < ev->nmsg; i++) {
            sx__ev_bundle_next(ev, &off, &m.topic, &m.data);
            h->fn(h->user, &m);
        }
        sx__ev_free(ev);
        return;
    }
    m.topic = sx__ev_topic(ev);
    m.data = sx__ev_data(ev);
    if (m.topic == NULL)
        m.topic = "";
    h->fn(h->user, &m);
    sx__ev_free(ev);
}

int sx_engine_mailbox_free(sx_engine *e, sx_pid pid)
{
    if (e == NULL)
        return SX_EINVAL;
    sx__proc *p = sx__ptable_get(e, pid);
    if (p == NULL)
        return SX_ENOTFOUND;
    uint32_t s = SX__PSTATE_MAILBOX;
    /* acq_rel: from here senders see COMPLETE and miss; exactly one
     * closer wins. Flags senders may have or-ed in are kept. */
    for (;;) {
        if ((s & SX__S_MASK) != SX__PSTATE_MAILBOX) {
            sx__proc_release(e, p);
            return SX_ENOTFOUND;
        }
        if (atomic_compare_exchange_weak_explicit(
                &p->state, &s, SX_PSTATE_COMPLETE, memory_order_acq_rel,
                memory_order_acquire))
            break;
    }
    /* The PID stops resolving; a look-up that raced us holds a reference
     * and sees COMPLETE. The hook is ours (we won the CAS). */
    sx__ptable_retire_mailbox(e, p, ((mailbox_hook *)p->user_state)->proc_gen);
    /* Wait for senders inside the callback (each holds a reference): the
     * table's and ours remain. acquire: their callbacks happen before we
     * free the hook. */
    while (atomic_load_explicit(&p->refs, memory_order_acquire) > 2)
        sched_yield();
    /* Monitors of the mailbox learn it closed. acq_rel: as in finish. */
    sx__ev *w = atomic_exchange_explicit(&p->watchers, SX__WATCH_CLOSED,
                                         memory_order_acq_rel);
    while (w != NULL && w != SX__WATCH_CLOSED) {
        /* relaxed: the list is ours now. */
        sx__ev *next =
            (sx__ev *)atomic_load_explicit(&w->node.next, memory_order_relaxed);
        sx__watch_fire(e, w, pid, SX_ECLOSED, "mailbox closed",
                       (sx_payload){ NULL, 0 }, 0, 0);
        w = next;
    }
    free(p->user_state);
    p->user_state = NULL;
    sx__proc_release(e, p);
    sx__proc_release(e, p); /* the table's reference: the slot is free */
    return 0;
}

typedef struct {
    sx_pid *pids;
    size_t n, cap;
    bool oom;
} mailbox_list;

static void add_mailbox(sx_engine *e, sx__proc *p, void *arg)
{
    mailbox_list *l = arg;
    if (l->n == l->cap) {
        size_t cap = l->cap > 0 ? 2 * l->cap : 16;
        sx_pid *m = realloc(l->pids, cap * sizeof(*m));
        if (m == NULL) {
            l->oom = true;
            return;
        }
        l->pids = m;
        l->cap = cap;
    }
    l->pids[l->n++] = sx__proc_pid_raw(e, p);
}

/* sx_engine_free: closes every mailbox still open, as
 * sx_engine_mailbox_free would (its hook was lost, and watchers on it
 * never answered). Collected in one walk, closed after it: the walk holds
 * a reference, which mailbox_free would wait on; one walk per mailbox
 * would be quadratic in a big table. Out of memory for the list: one at
 * a time. [owner], no sender left. */
void sx__mailboxes_close(sx_engine *e)
{
    for (;;) {
        mailbox_list l = { NULL, 0, 0, false };
        sx__ptable_each_mailbox(e, add_mailbox, &l);
        size_t closed = 0;
        for (size_t i = 0; i < l.n; i++)
            closed += sx_engine_mailbox_free(e, l.pids[i]) == 0;
        free(l.pids);
        if (!l.oom || closed == 0)
            return;
    }
}

int sx_engine_monitor(sx_engine *e, sx_pid watcher, sx_pid target)
{
    if (e == NULL)
        return SX_EINVAL;
    return sx__watch_for(e, watcher, SX__WATCH_EXIT, target);
}

int sx__watch_for(sx_engine *e, sx_pid local, uint8_t kind, sx_pid target)
{
    sx__proc *p = sx__ptable_get(e, local);
    if (p == NULL)
        return SX_ENOTFOUND;
    sx__ev *w = sx__ev_alloc();
    if (w == NULL) {
        sx__proc_release(e, p);
        return SX_ENOMEM;
    }
    w->watch = kind;
    w->to = p;
    w->to_gen = (uint32_t)(local.id >> 32);
    w->engine = e;
    sx__proc_release(e, p);
    sx__watch(e, target, w);
    return 0;
}

/* An SX__WATCH_FN watcher keeps fn and user in its inline bytes. */
typedef struct {
    sx_watch_fn fn;
    void *user;
} watch_hook;

void sx__watch_fn_fire(sx_engine *e, sx__ev *w, sx_pid target, int error,
                       const char *msg, sx_payload value, uint64_t steps,
                       uint32_t attempts)
{
    (void)e;
    watch_hook h;
    memcpy(&h, sx__ev_inl(w), sizeof(h));
    sx_result r = { error, (char *)(error != 0 ? msg : NULL),
                    error == 0 ? value : (sx_payload){ NULL, 0 }, steps,
                    attempts };
    if (r.error != 0 && r.error_msg == NULL)
        r.error_msg = (char *)sx_strerror(error);
    h.fn(h.user, target, &r);
    sx__ev_free(w);
}

int sx_engine_watch(sx_engine *e, sx_pid target, sx_watch_fn fn, void *user)
{
    if (e == NULL || fn == NULL)
        return SX_EINVAL;
    sx__proc *p = sx__ptable_get(e, target);
    if (p == NULL && target.node != e->cfg.node) {
        /* A process of another node: the remote route watches it (and
         * calls fn once), or says why not (fn is then never called). */
        sx__ev *w = sx__ev_alloc();
        if (w == NULL)
            return SX_ENOMEM;
        w->watch = SX__WATCH_FN;
        w->engine = e;
        watch_hook h = { fn, user };
        memcpy(sx__ev_inl(w), &h, sizeof(h));
        int rc = sx__remote_watch(e, target, w);
        if (rc != 0)
            sx__ev_free(w);
        return rc;
    }
    if (p == NULL) {
        /* Finished (or never known): answer from the kept outcome. */
        sx_result r;
        if (target.node != e->cfg.node || target.host != e->cfg.host ||
            !sx__outcomes_get(e, target.id, &r))
            return SX_ENOTFOUND;
        fn(user, target, &r);
        sx_result_free(&r);
        return 0;
    }
    sx__proc_release(e, p);
    sx__ev *w = sx__ev_alloc();
    if (w == NULL)
        return SX_ENOMEM;
    w->watch = SX__WATCH_FN;
    w->engine = e;
    watch_hook h = { fn, user };
    memcpy(sx__ev_inl(w), &h, sizeof(h));
    /* Registers, or (if target finished meanwhile) fires at once from the
     * kept outcome: fn runs exactly once either way. */
    sx__watch(e, target, w);
    return 0;
}

/* ---- sends from outside ---- */

/* A blocking send to a checkpointed job: waits for the store's answer. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rc;
} send_wait;

static void send_waited(void *user, int rc)
{
    send_wait *w = user;
    pthread_mutex_lock(&w->mu);
    w->rc = rc;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int sx_engine_send(sx_engine *e, sx_pid from, sx_pid to, const char *topic,
                   sx_payload data)
{
    if (e == NULL || topic == NULL)
        return SX_EINVAL;
    size_t tl = sx__topic_len(topic);
    if (tl == SIZE_MAX)
        return SX_EINVAL;
    if (__builtin_expect(e->store != NULL, 0) && tl <= 255 &&
        (data.data != NULL || data.len == 0)) {
        if (sx__store_on_thread() && sx__ckpt_stored_target(e, to))
            return SX_ESTATE; /* it would wait for itself: see engine.h */
        send_wait w = { .done = false, .rc = 0 };
        pthread_mutex_init(&w.mu, NULL);
        pthread_cond_init(&w.cv, NULL);
        int rc = sx__ckpt_send(e, from, to, topic, data, send_waited, &w);
        if (rc == 1) { /* stored first: its answer is the send's */
            pthread_mutex_lock(&w.mu);
            while (!w.done)
                pthread_cond_wait(&w.cv, &w.mu);
            pthread_mutex_unlock(&w.mu);
            rc = w.rc;
        } else if (rc == 0) {
            rc = 1; /* not a checkpointed job: sent below */
        }
        pthread_cond_destroy(&w.cv);
        pthread_mutex_destroy(&w.mu);
        if (rc != 1)
            return rc;
    }
    return sx__send(e, from, to, topic, tl, data, false);
}

int sx_engine_send_many(sx_engine *e, const sx_message *msgs, size_t n)
{
    if (e == NULL || (msgs == NULL && n > 0))
        return SX_EINVAL;
    if (n == 0)
        return 0;
    sx_pid from = msgs[0].from, to = msgs[0].to;
    for (size_t i = 0; i < n; i++) {
        size_t tl =
            msgs[i].topic != NULL ? sx__topic_len(msgs[i].topic) : SIZE_MAX;
        if (tl == SIZE_MAX || tl > 255 || !sx_pid_eq(msgs[i].to, to) ||
            !sx_pid_eq(msgs[i].from, from) ||
            (msgs[i].data.data == NULL && msgs[i].data.len > 0))
            return SX_EINVAL;
    }
    if (e->store != NULL) {
        /* A checkpointed job stores each message first: one at a time. */
        for (size_t i = 0; i < n; i++) {
            int rc = sx_engine_send(e, from, to, msgs[i].topic, msgs[i].data);
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    /* Bundles of up to `throughput` messages, chained: one look-up and one
     * push for the lot, as a step's sends to one process travel. */
    sx__ev *first = NULL, *last = NULL, *cur = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *topic = msgs[i].topic;
        size_t tl = strlen(topic);
        if (cur != NULL && sx__ev_bundle_add(&cur, topic, tl, msgs[i].data,
                                             e->throughput) == 0)
            continue;
        sx__ev *ev = sx__ev_alloc_sized(tl + 1 + msgs[i].data.len);
        if (ev == NULL ||
            (ev->kind = SX__EV_MESSAGE,
             sx__ev_set(ev, topic, tl, msgs[i].data, NULL)) != 0) {
            sx__ev_free(ev);
            sx__ev_free(cur);
            sx__ev_free_chain(first);
            return SX_ENOMEM;
        }
        if (cur != NULL) {
            /* relaxed: the chain is ours until the push publishes it. */
            if (last != NULL)
                atomic_store_explicit(&last->node.next, &cur->node,
                                      memory_order_relaxed);
            else
                first = cur;
            last = cur;
        }
        cur = ev;
    }
    /* relaxed: as above. */
    if (last != NULL)
        atomic_store_explicit(&last->node.next, &cur->node,
                              memory_order_relaxed);
    else
        first = cur;
    last = cur;
    /* relaxed (the loads): the chain is ours until the push. */
    for (sx__ev *x = first;; x = (sx__ev *)atomic_load_explicit(
                                 &x->node.next, memory_order_relaxed)) {
        x->ctl = false;
        x->from = from;
        if (x == last)
            break;
    }
    return sx__send_chain(e, to, first, last, n);
}

int sx_engine_send_async(sx_engine *e, sx_pid from, sx_pid to,
                         const char *topic, sx_payload data, sx_send_fn fn,
                         void *user)
{
    if (e == NULL || topic == NULL || fn == NULL)
        return SX_EINVAL;
    size_t tl = sx__topic_len(topic);
    if (tl == SIZE_MAX || tl > 255 || (data.data == NULL && data.len > 0))
        return SX_EINVAL;
    int rc = 0;
    if (e->store != NULL) {
        rc = sx__ckpt_send(e, from, to, topic, data, fn, user);
        if (rc == 1)
            return 0; /* fn answers from the store's thread */
    }
    if (rc == 0)
        rc = sx__send(e, from, to, topic, tl, data, false);
    fn(user, rc);
    return 0;
}

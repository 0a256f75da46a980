/* relay/hub.c — the hub, the one hand-off into the relay's loop: engine
 * threads (mailbox and watch callbacks) append frames to a mutex-guarded
 * FIFO, and the loop takes them in order once per iteration; the
 * doorbell that wakes the loop when it sleeps; and what becomes of an
 * item the loop will not write.
 *
 * Threads: sx__relay_hub_post, sx__relay_hub_post_push, the references
 * and sx__relay_item_discard [any thread]; the doorbell's callbacks and
 * sx__relay_hub_new [loop, or the starting thread before the loop runs].
 * docs/RELAY.md, "The hub", has the rules this follows.
 */
/* For sched_getaffinity and CPU_COUNT (glibc). Defined here only, before
 * any header: the rest of the project stays on _POSIX_C_SOURCE
 * (docs/CONTRIBUTING.md). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "relay/server.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Wakes the loop from its poll. The caller holds h->mu and found the hub
 * open: the loop sets closed under the same mutex on its way out, and the
 * eventfd is closed only after that, once the loop has ended
 * (sx_server_stop, server_free), so the descriptor is alive here. A failed
 * write cannot lose a wake-up: the counter is only ever full when the loop has
 * not read a ring it already has (EAGAIN), and a ring is a ring however many.
 */
void sx__relay_hub_ring(sx__relay_hub *h)
{
    uint64_t one = 1;
    ssize_t n = write(h->bell_fd, &one, sizeof(one));
    (void)n;
}

/* Appends o to the hub's FIFO, and rings the loop if it sleeps (see "the
 * doorbell"). The caller holds h->mu and found the hub open. */
static void hub_append(sx__relay_hub *h, sx__relay_out *o)
{
    o->next = NULL;
    if (h->tail != NULL)
        h->tail->next = o;
    else
        h->head = o;
    h->tail = o;
    if (h->asleep) {
        h->asleep = false;
        sx__relay_hub_ring(h);
    }
}

int sx__relay_hub_post_push(sx__relay_hub *h, sx__relay_out *o,
                            sx__relay_conn *c)
{
    uint8_t note[SX_RELAY_DROPPED_MAX];
    pthread_mutex_lock(&h->mu);
    if (h->closed) {
        pthread_mutex_unlock(&h->mu);
        return SX_ECLOSED;
    }
    /* relaxed: the mutex orders this exchange among the posts. */
    uint64_t n =
        atomic_load_explicit(&c->drops_unsaid, memory_order_relaxed) == 0
            ? 0
            : atomic_exchange_explicit(&c->drops_unsaid, 0,
                                       memory_order_relaxed);
    if (n == 0 && o->len == 0) {
        pthread_mutex_unlock(&h->mu);
        return 1;
    }
    if (n > 0) {
        size_t nl = sx__relay_pack_dropped(note, n);
        memcpy(o->data + o->off - nl, note, nl);
        o->off -= nl;
        o->len += nl;
        o->dropped = n;
        /* relaxed: a limit check (see the field); the loop takes it off
         * after the mutex hands o over. */
        atomic_fetch_add_explicit(&c->queued, nl, memory_order_relaxed);
    }
    hub_append(h, o);
    pthread_mutex_unlock(&h->mu);
    return 0;
}

void sx__relay_hub_ref(sx__relay_hub *h)
{
    /* relaxed: the caller already holds a reference. */
    atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
}

void sx__relay_hub_unref(sx__relay_hub *h)
{
    /* acq_rel: release our uses of the hub; the thread that frees it
     * acquires everyone else's. */
    if (atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_destroy(&h->mu);
    free(h);
}

int sx__relay_hub_post(sx__relay_hub *h, sx__relay_out *o)
{
    pthread_mutex_lock(&h->mu);
    if (h->closed) {
        pthread_mutex_unlock(&h->mu);
        return SX_ECLOSED;
    }
    hub_append(h, o);
    pthread_mutex_unlock(&h->mu);
    return 0;
}

void sx__relay_item_discard(sx__relay_out *o)
{
    switch (o->kind) {
    case SX__RELAY_OUT_PUSH:
    case SX__RELAY_OUT_ANSWER: {
        sx__relay_conn *c = o->conn;
        sx__relay_out_free(o);
        sx__relay_conn_unref(c);
        break;
    }
    case SX__RELAY_OUT_DONE: {
        sx__relay_watch *w = o->watch;
        sx__relay_out_free(o);
        sx__relay_watch_unref(w);
        break;
    }
    default:
        sx__relay_out_free(o);
    }
}

/* ---- the doorbell ----
 *
 * Engine threads append to the hub at every finish a client waits for;
 * the loop takes the whole FIFO once per iteration, after its poll
 * (drain_cb). Only a loop that is about to block needs waking, so the
 * doorbell rings only then: the gate (a prepare handle, the last thing
 * before the poll) looks at the FIFO under the mutex and either marks
 * the hub asleep (empty: the next append rings) or keeps this poll from
 * blocking (bell_again); the drain clears asleep under the same mutex.
 * An append therefore finds the loop either asleep, and rings, or awake
 * with its drain still to come. A busy loop (a socket read or a finish in
 * every iteration) is rung by nobody: no write to the eventfd and no
 * read of it per job, where a uv_async rings at every first send after
 * each drain. And no sender ever holds the loop up: uv_async_send marks
 * the handle busy around its write(2), and the loop's callback spins
 * until that write returns (14 % of the relay's loop thread in relay1 on
 * a 2-core VM, where the sender is often descheduled in between).
 *
 * While waits are open (a submit with wait, a wait, a subscribe), the
 * gate keeps the loop polling without blocking for up to SPIN_NS after
 * it last found something in the FIFO or a wait was opened: a short job's
 * answer then finds the loop awake, and the loop finds the next request
 * without a wake-up. A wake-up is the largest cost of a job answered one
 * request at a time (relay1: a thread woken on another core of this VM
 * is several microseconds, and each job would take two: the loop for the
 * answer, and for the next request). Each round of the spin gives the
 * core to any other thread that is ready to run (sched_yield): on a
 * machine with few cores the workers running the jobs and the clients
 * sending the requests are those threads, and a loop that polled on
 * without yielding took their time (relay1 8.9 against 7.6 us a job,
 * the pipelined relay 1.82 against 1.67 us, 2 cores). Past SPIN_NS with
 * nothing, the loop sleeps; with no wait open it never spins, so an idle
 * server costs nothing.
 *
 * A yield that comes back late (YIELD_LONG_NS: another thread ran on
 * this core) ends the spin and pauses it, first for SPIN_OFF_MIN_NS,
 * twice as long at each late yield after a pause, up to SPIN_OFF_MAX_NS;
 * a yield that comes back at once halves the pause, at most once per
 * spin window, and below SPIN_OFF_MIN_NS there is none. On a core that a
 * long step or another program keeps busy, a loop that yields is
 * runnable but not woken: a request that arrives waits for the end of
 * that thread's slice (milliseconds), where a loop blocked in its poll
 * would have been woken for it at once. While the core stays busy, the
 * pauses grow towards a second, each costing about one slice. A late
 * yield counts whoever ran: when it was a worker running the very job
 * whose answer the loop spins for (a job of 50 us or more on the loop's
 * core), the pause costs that job's answer a wake-up, which a job that
 * long hardly notices; telling the two apart by the answer being there
 * afterwards does not work, as on a busy core the answer often came from
 * the other core while this one was taken (relay1 with both cores busy:
 * 183 us a job, as without a pause). */

/* The eventfd was written: reset its counter (the drain, after the poll,
 * takes the hub's items). */
void sx__relay_bell_cb(uv_poll_t *p, int status, int events)
{
    (void)status, (void)events;
    sx_server *s = p->data;
    uint64_t v;
    ssize_t n = read(s->hub->bell_fd, &v, sizeof(v));
    (void)n; /* EAGAIN: the counter was read already */
}

/* How long the loop keeps polling without blocking, from the last time
 * it found the hub's FIFO or a new wait, while waits are open. */
#define SPIN_NS 100000u
/* A yield that took this long gave the core to a thread that ran on. */
#define YIELD_LONG_NS 50000u
#define SPIN_OFF_MIN_NS 10000000u
#define SPIN_OFF_MAX_NS 1000000000u

void sx__relay_spin_init(sx_server *s)
{
    /* One core to run on (the machine's, or the process's affinity): the
     * poll without blocking would hold up the very worker whose answer it
     * waits for. */
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof(set), &set) == 0
                    ? CPU_COUNT(&set)
                    : (int)sysconf(_SC_NPROCESSORS_ONLN);
    s->spin_ns = cores > 1 ? SPIN_NS : 0;
}

static void bell_again_cb(uv_idle_t *h)
{
    uv_idle_stop(h); /* one poll without blocking is all it is for */
}

void sx__relay_gate_cb(uv_prepare_t *g)
{
    sx_server *s = g->data;
    pthread_mutex_lock(&s->hub->mu);
    bool empty = s->hub->head == NULL && !s->hub->stop;
    bool spin = false;
    uint64_t now = 0;
    if (empty && s->n_waits > 0 && s->spin_ns > 0) {
        now = uv_hrtime();
        if (s->spin_since == 0)
            s->spin_since = now;
        spin = now - s->spin_since < s->spin_ns && now >= s->spin_off_until;
    } else {
        s->spin_since = 0;
    }
    s->hub->asleep = empty && !spin;
    pthread_mutex_unlock(&s->hub->mu);
    if (!empty || spin)
        uv_idle_start(&s->bell_again, bell_again_cb);
    if (spin) {
        sched_yield(); /* see "the doorbell" */
        sx__relay_spin_yielded(s, now, uv_hrtime());
    }
}

void sx__relay_spin_yielded(sx_server *s, uint64_t before, uint64_t after)
{
    if (after - before < YIELD_LONG_NS) {
        if (s->spin_off > 0 && s->spin_halved != s->spin_since) {
            s->spin_halved = s->spin_since; /* once per window */
            s->spin_off /= 2;
            if (s->spin_off < SPIN_OFF_MIN_NS)
                s->spin_off = 0;
        }
        return;
    }
    /* The core was taken: sleep in the poll, where a request wakes us. */
    s->spin_off = s->spin_off == 0 ? SPIN_OFF_MIN_NS : s->spin_off * 2;
    if (s->spin_off > SPIN_OFF_MAX_NS)
        s->spin_off = SPIN_OFF_MAX_NS;
    s->spin_off_until = after + s->spin_off;
}

/* Takes the hub's items in order until it is empty. */
void sx__relay_drain_cb(uv_check_t *d)
{
    sx_server *s = d->data;
    for (;;) {
        pthread_mutex_lock(&s->hub->mu);
        s->hub->asleep = false;
        sx__relay_out *o = s->hub->head;
        s->hub->head = s->hub->tail = NULL;
        bool stop = s->hub->stop;
        pthread_mutex_unlock(&s->hub->mu);
        if (o == NULL && !stop)
            return;
        while (o != NULL) {
            sx__relay_out *next = o->next;
            if (s->stopping)
                sx__relay_item_discard(o);
            else
                sx__relay_conn_take(s, o);
            o = next;
        }
        if (stop && !s->stopping) {
            sx__relay_close_all(s);
            return;
        }
        if (s->stopping)
            return;
    }
}

int sx__relay_hub_new(sx_server *s)
{
    sx__relay_hub *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return SX_ENOMEM;
    int rc = pthread_mutex_init(&h->mu, NULL);
    if (rc != 0) {
        free(h);
        return -rc;
    }
    h->bell_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (h->bell_fd < 0) {
        rc = -errno;
        pthread_mutex_destroy(&h->mu);
        free(h);
        return rc;
    }
    atomic_init(&h->refs, 1);
    s->hub = h;
    return 0;
}

/* engine/timer/sleep.c — sleeps on the workers: per-worker timer sets.
 *
 * SX_CMD_SLEEP and SX_CMD_SLEEP_UNTIL do not go to a libuv loop. The
 * worker whose step yielded the sleep hands it to its own timer set
 * (through the lock-free inbox below, into engine/timer/twheel.h's hashed wheel
 * in front of a small heap, under a spinlock) and fires it itself,
 * between steps, when the deadline has passed: the woken process goes to
 * that worker's next slot or deque with no doorbell, no loop thread, no
 * event node held while it sleeps and no wake queue mutex. This is Go's design
 * (per-P timer heaps, checked by the scheduler, parks bounded by the next
 * deadline). Sleeps on a libuv loop instead would need a third thread that
 * competes with the workers for the cores, one op allocation per sleep, and
 * one wake-queue lock per firing (bench/FINDINGS.md, timers).
 *
 * Who fires what:
 *   - the owner, in find_work: every 8th look for work, and on every
 *     spin round while it finds none;
 *   - any worker that is spinning: the other workers' due timers too
 *     (trylock), so a worker stuck in a long step does not hold its
 *     sleepers back while another core idles;
 *   - a worker about to park bounds its sleep by the earliest deadline of
 *     all workers, and by SX__TIMER_RECHECK_MS while a worker that is not
 *     parked holds timers (sx__timers_park_until), so due timers wake a
 *     parked engine and a worker stuck in a long step delays its sleepers
 *     by at most about that much; a sleep that lowers its set's earliest
 *     due (its first entry, say) wakes a parked worker to re-time its
 *     park;
 *   - a worker whose process used up its budget and would keep running
 *     (nothing else waits for it): every worker's due timers, as when
 *     spinning (engine/sched/turn.c, run_turn).
 * A timer never fires early: it fires when now >= its deadline.
 *
 * Deletion is lazy, as in Go: a process that finishes or is terminated
 * while it sleeps leaves its entry in the set. Such entries are counted
 * (the process's `sleeps`, added to e->tm_dead at finish) and dropped in
 * one pass over the sets once they are at least half of all entries
 * (sx__timers_purge_maybe), or when they come due (the answer finds the
 * slot's generation changed and is dropped, as any late answer is). Memory held
 * by dead entries is so bounded by the live ones. A sleep with a yield timeout
 * stays on the loop (clock.c), where the timeout cancels it. At engine stop
 * the entries left are freed.
 *
 * Threads: add [owning worker]; run [worker: the owner or a
 * trylock winner]; earliest [any worker]; drain [the stopper, after the
 * workers are joined].
 */
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"
#include "engine/io/io.h"
#include "engine/sched/prefetch.h"
#include "process/fault.h"

#define FIRE_BATCH 64

int sx__timers_init(sx__timers *tm)
{
    sx__spin_init(&tm->lock);
    sx__tw_init(&tm->tw, sx__now_ns());
    atomic_init(&tm->next_due, UINT64_MAX);
    atomic_init(&tm->n_hint, 0);
    atomic_init(&tm->inbox, NULL);
    atomic_init(&tm->n_pushed, 0);
    atomic_init(&tm->n_drained, 0);
    return 0;
}

void sx__timers_fini(sx__timers *tm)
{
    sx__tw_fini(&tm->tw);
}

/* ---- the inbox ----
 *
 * The owner does not take its set's lock to add a sleep: it pushes the
 * sleep's completer onto `inbox` (a stack; one CAS) with the due in the
 * node, and lowers next_due if the new due is earlier. Whoever next takes
 * the lock to fire (the owner, or another worker stealing due timers)
 * first moves the inbox into the set and frees the nodes. With the lock
 * taken for every sleep, a worker that the OS preempts while holding it
 * (three runnable threads on two cores while a submitter runs) keeps the
 * other worker from firing its due sleeps for the rest of its time slice:
 * windows of a few milliseconds' deadlines all 2-10 ms late, timers' p99
 * lateness 2-30 ms in many runs.
 *
 * next_due stays a lower bound of every due in the set and the inbox:
 * the owner pushes (seq_cst CAS), then lowers next_due with a CAS if its
 * due is earlier (seq_cst); a holder of the lock stores the set's
 * earliest (seq_cst), then looks at the inbox (seq_cst) and, if a push
 * came in, moves it and stores again. Of a push and a store that race,
 * either the store's look sees the push, or the push's CAS comes after
 * the store and lowers what it stored (the Dekker pattern: store, then
 * load of the other location, all four seq_cst). */

/* A pushed node keeps its due in the 8 bytes after its fields, which
 * every node size has (a small node ends SX__EV_SMALL bytes after
 * `small`) and no completer uses. */
_Static_assert(offsetof(sx__ev, small) + SX__EV_SMALL >=
                   sizeof(sx__ev) + sizeof(uint64_t),
               "a small node has room for a due after its fields");

static void due_put(sx__ev *ev, uint64_t due)
{
    memcpy((uint8_t *)ev + sizeof(sx__ev), &due, sizeof(due));
}

static uint64_t due_get(const sx__ev *ev)
{
    uint64_t due;
    memcpy(&due, (const uint8_t *)ev + sizeof(sx__ev), sizeof(due));
    return due;
}

int sx__timer_add(sx__worker *w, uint64_t due_ns, sx_completer *done)
{
    sx__timers *tm = &w->tm;
    sx__ev *ev = &done->ev;
    due_put(ev, due_ns);
    /* relaxed: a figure (stats, the purge rule); one writer, the owner. */
    atomic_store_explicit(
        &tm->n_pushed,
        atomic_load_explicit(&tm->n_pushed, memory_order_relaxed) + 1,
        memory_order_relaxed);
    /* relaxed: the CAS below re-reads it. */
    sx__mpsc_node *head =
        atomic_load_explicit(&tm->inbox, memory_order_relaxed);
    do {
        /* relaxed: published by the CAS. */
        atomic_store_explicit(&ev->node.next, head, memory_order_relaxed);
        /* seq_cst: release for the node's contents (the drainer's
         * exchange acquires them), and the push's half of the Dekker
         * pattern above. */
    } while (!atomic_compare_exchange_weak_explicit(
        &tm->inbox, &head, &ev->node, memory_order_seq_cst,
        memory_order_relaxed));
    /* seq_cst: the other half of the pattern (see "the inbox"). */
    uint64_t next = atomic_load_explicit(&tm->next_due, memory_order_seq_cst);
    bool earlier = due_ns < next;
    while (due_ns < next && !atomic_compare_exchange_weak_explicit(
                                &tm->next_due, &next, due_ns,
                                memory_order_seq_cst, memory_order_seq_cst))
        ;
    /* A worker parked before this set had timers sleeps without a bound for
     * them; should this worker get stuck in a long step, nobody would fire
     * them. Wake one to re-time its park (sx__timers_park_until). Not only
     * for the set's first entry: a worker that parked while this one was
     * parked too bounded its sleep by this set's earliest due alone (a
     * parked owner fires its own), not by SX__TIMER_RECHECK_MS; without
     * this wake-up a sleep due before that, added once this worker woke,
     * would wait out a long step here or the whole park (up to
     * PARK_TIMEOUT_MS: 150-300 ms for a 5 ms sleep in test_sched
     * sleep_beside_long_step). Costs a load of n_parked when nobody is
     * parked, and a wake-up of a parked worker per sleep that is its set's
     * earliest when one is. */
    if (earlier)
        sx__park_notify(w->engine);
    return 0;
}

/* Moves the inbox into the set (under the lock). Each entry keeps what the
 * answer needs: the process and its generation, the tag, and for a sampled
 * yield (one in 64: the latency figures) its dispatch time, as microseconds
 * before the due plus 1 (0: not sampled); its node is freed, and a node is
 * taken again when the sleep fires: no event node waits out a sleep
 * (100,000 sleepers would hold 11 MB of them, each a cold miss when it
 * fired). A node whose entry finds no memory goes onto *failed, to be
 * answered SX_ENOMEM once the lock is let go. */
static void drain(sx__timers *tm, uint64_t now, sx__ev **failed)
{
    /* seq_cst: acquires the pushed nodes; the holder's half of the
     * pattern (see "the inbox"). */
    sx__mpsc_node *n =
        atomic_exchange_explicit(&tm->inbox, NULL, memory_order_seq_cst);
    if (n == NULL)
        return;
    /* Its clock may be stale: nobody takes from an empty set. */
    sx__tw_sync(&tm->tw, now);
    size_t k = 0;
    while (n != NULL) {
        sx__ev *ev = (sx__ev *)n;
        /* relaxed: the list is ours now. */
        n = atomic_load_explicit(&n->next, memory_order_relaxed);
        uint64_t due = due_get(ev), lat = 0;
        if (ev->t0 != 0)
            lat = (due > ev->t0 ? (due - ev->t0) / 1000u : 0) + 1;
        sx__twval v = { ev->to, ev->tag, ev->to_gen,
                        lat < UINT32_MAX ? (uint32_t)lat : UINT32_MAX };
        k++;
        /* Grows its memory to the peak number of sleeps and keeps it: no
         * allocation in steady state. The room kept for a batch more is
         * what a put-back in sx__timers_run needs (sleeps drained
         * meanwhile could use up the room the take had left). */
        if (!SX__FAULT(SX__FAULT_TIMER_KEEP) &&
            sx__tw_reserve(&tm->tw, FIRE_BATCH + 1) == 0 &&
            sx__tw_add(&tm->tw, due, &v) == 0) {
            sx__ev_free(ev);
        } else {
            /* relaxed: a private list. */
            atomic_store_explicit(&ev->node.next, (sx__mpsc_node *)*failed,
                                  memory_order_relaxed);
            *failed = ev;
        }
    }
    /* relaxed: see sx__timer_add; written only under the lock. */
    atomic_store_explicit(
        &tm->n_drained,
        atomic_load_explicit(&tm->n_drained, memory_order_relaxed) + k,
        memory_order_relaxed);
}

/* Publishes the set's earliest due and its size, after moving in the
 * inbox and whatever is pushed meanwhile (see "the inbox"). Under the
 * lock. */
static void settle(sx__timers *tm, uint64_t now, sx__ev **failed)
{
    for (;;) {
        drain(tm, now, failed);
        /* relaxed: a figure (stats) and a purge trigger. */
        atomic_store_explicit(&tm->n_hint, tm->tw.n, memory_order_relaxed);
        /* seq_cst: see "the inbox". Read without the lock as a hint
         * (find_work, park): a stale value makes a worker look or sleep a
         * little early or late by one check, never lose a timer. */
        atomic_store_explicit(&tm->next_due, sx__tw_earliest(&tm->tw),
                              memory_order_seq_cst);
        /* seq_cst: see "the inbox". */
        if (atomic_load_explicit(&tm->inbox, memory_order_seq_cst) == NULL)
            return;
    }
}

/* Answers SX_ENOMEM to the sleeps that drain could not enter (after the
 * lock): a sleep that cannot wait fails rather than waits for good.
 * Empties *list: its nodes are answered, and a second call must not walk
 * them again. */
static void fail_all(sx__ev **list)
{
    sx__ev *failed = *list;
    *list = NULL;
    while (failed != NULL) {
        sx__ev *ev = failed;
        /* relaxed: a private list. */
        failed = (sx__ev *)atomic_load_explicit(&ev->node.next,
                                                memory_order_relaxed);
        ev->watch = SX__WATCH_SLEEP; /* collecting it counts the sleep */
        sx_complete((sx_completer *)ev, (sx_payload){ NULL, 0 }, SX_ENOMEM,
                    "no memory to keep the sleep");
    }
}

/* The answer of a sleep that came due: a fresh (small) completer for the
 * entry's process, marked as a sleep's so that collecting it counts the
 * sleep done; NULL if there is no memory for it. */
static sx_completer *answer_of(sx_engine *e, const sx__twent *t)
{
    sx__ev *ev = SX__FAULT(SX__FAULT_TIMER_ANSWER)
                     ? NULL
                     : sx__ev_alloc_small_completer();
    if (ev == NULL)
        return NULL;
    ev->kind = SX__EV_COMPLETION;
    ev->watch = SX__WATCH_SLEEP;
    ev->tag = t->v.tag;
    ev->to = t->v.item;
    ev->to_gen = t->v.gen;
    ev->engine = e;
    if (t->v.aux != 0)
        ev->t0 = t->due - (uint64_t)(t->v.aux - 1) * 1000u;
    return (sx_completer *)ev;
}

void sx__timers_run(sx__timers *tm, uint64_t now, bool wait_lock)
{
    sx_engine *e =
        ((sx__worker *)((char *)tm - offsetof(sx__worker, tm)))->engine;
    for (;;) {
        sx__twent due[FIRE_BATCH];
        sx__ev *failed = NULL;
        if (wait_lock)
            sx__spin_lock(&tm->lock);
        else if (!sx__spin_trylock(&tm->lock))
            return;
        drain(tm, now, &failed);
        size_t k = sx__tw_take(&tm->tw, now, due, FIRE_BATCH);
        settle(tm, now, &failed);
        sx__spin_unlock(&tm->lock);
        fail_all(&failed);
        /* Answered outside the lock: an answer runs the delivery path.
         * A sleeper's slot was last touched when it went to sleep, up to
         * seconds ago, so it is likely out of cache: ask for every slot
         * now, so that the misses overlap instead of coming one after
         * another. */
        bool on = sx__prefetch_w_on();
        for (size_t i = 0; i < k; i++)
            sx__prefetch_w(on, due[i].v.item);
        size_t put_back = 0;
        for (size_t i = 0; i < k; i++) {
            sx_completer *done = answer_of(e, &due[i]);
            if (done == NULL) {
                due[put_back++] = due[i]; /* tried again on the next look */
                continue;
            }
            sx_complete(done, (sx_payload){ NULL, 0 }, 0, NULL);
        }
        if (put_back > 0) {
            /* No memory for an answer: the entries go back as they were,
             * so that no sleeper waits for good. They fit without
             * allocating: they are due (so they go to near), and drain
             * keeps room in near for a batch beyond the set's entries. */
            sx__spin_lock(&tm->lock);
            for (size_t i = 0; i < put_back; i++)
                (void)sx__tw_add(&tm->tw, due[i].due, &due[i].v);
            settle(tm, now, &failed);
            sx__spin_unlock(&tm->lock);
            fail_all(&failed);
            return;
        }
        if (k < FIRE_BATCH)
            return;
    }
}

uint64_t sx__timers_earliest(sx_engine *e)
{
    uint64_t m = UINT64_MAX;
    for (unsigned i = 0; i < e->n_workers; i++) {
        /* relaxed: a hint; see publish_next. */
        uint64_t d = atomic_load_explicit(&e->workers[i].tm.next_due,
                                          memory_order_relaxed);
        if (d < m)
            m = d;
    }
    return m;
}

uint64_t sx__timers_park_until(sx_engine *e, sx__worker *w)
{
    uint64_t m = UINT64_MAX, now = 0;
    for (unsigned i = 0; i < e->n_workers; i++) {
        sx__worker *v = &e->workers[i];
        /* seq_cst: a hint, but also the parker's half of a Dekker pair
         * with sx__timer_add (push, then notify if n_parked is not 0):
         * sx__park_wait calls this again after counting itself parked,
         * so a sleep that lowers a set's earliest due meanwhile is either
         * seen here or woken for. parked below: relaxed, a hint; see park.c. */
        uint64_t d =
            atomic_load_explicit(&v->tm.next_due, memory_order_seq_cst);
        if (d == UINT64_MAX)
            continue;
        if (v != w && !atomic_load_explicit(&v->parked, memory_order_relaxed)) {
            if (now == 0)
                now = sx__now_ns();
            uint64_t re = now + (uint64_t)SX__TIMER_RECHECK_MS * 1000000u;
            if (re < d)
                d = re;
        }
        if (d < m)
            m = d;
    }
    return m;
}

void sx__timers_steal(sx_engine *e, sx__worker *self, uint64_t now)
{
    for (unsigned i = 0; i < e->n_workers; i++) {
        sx__worker *v = &e->workers[i];
        /* relaxed: a hint; see publish_next. */
        if (v != self &&
            atomic_load_explicit(&v->tm.next_due, memory_order_relaxed) <= now)
            sx__timers_run(&v->tm, now, false);
    }
}

static bool keep_none(const sx__twval *v, void *arg)
{
    (void)v, (void)arg;
    return false;
}

void sx__timers_drain(sx_engine *e)
{
    /* No process is alive: the answers would go nowhere. The set's
     * entries hold no memory of their own; the inbox's nodes are freed. */
    for (unsigned i = 0; i < e->n_workers; i++) {
        sx__timers *tm = &e->workers[i].tm;
        sx__spin_lock(&tm->lock);
        /* seq_cst: as in drain. */
        sx__mpsc_node *n =
            atomic_exchange_explicit(&tm->inbox, NULL, memory_order_seq_cst);
        while (n != NULL) {
            /* relaxed: the list is ours. */
            sx__mpsc_node *next =
                atomic_load_explicit(&n->next, memory_order_relaxed);
            sx__ev_free((sx__ev *)n);
            n = next;
        }
        atomic_store_explicit(
            &tm->n_drained,
            atomic_load_explicit(&tm->n_pushed, memory_order_relaxed),
            memory_order_relaxed);
        sx__tw_filter(&tm->tw, keep_none, NULL);
        atomic_store_explicit(&tm->n_hint, 0, memory_order_relaxed);
        atomic_store_explicit(&tm->next_due, UINT64_MAX, memory_order_seq_cst);
        sx__spin_unlock(&tm->lock);
    }
}

uint64_t sx__timers_count(sx_engine *e)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < e->n_workers; i++) {
        const sx__timers *tm = &e->workers[i].tm;
        /* relaxed: figures; a sleep moving from the inbox to the set may
         * be missed or counted twice for a moment. */
        /* Drained first: a sleep drained after this read is then in
         * n_hint or not yet counted out of pushed, never negative. */
        size_t drained =
            atomic_load_explicit(&tm->n_drained, memory_order_relaxed);
        size_t pushed =
            atomic_load_explicit(&tm->n_pushed, memory_order_relaxed);
        n += atomic_load_explicit(&tm->n_hint, memory_order_relaxed) +
             (pushed > drained ? pushed - drained : 0);
    }
    return n;
}

/* Keeps an entry whose process is still the one that slept. */
static bool keep_live(const sx__twval *v, void *arg)
{
    (void)arg;
    const sx__proc *p = v->item;
    /* acquire: pairs with the release store of gen at retire. The slot is
     * type-stable, so reading it is safe whatever happened to it. */
    return atomic_load_explicit(&p->gen, memory_order_acquire) == v->gen;
}

/* Drops tm's dead entries in one pass (the inbox's moved in first). */
static void purge(sx__timers *tm)
{
    sx__ev *failed = NULL;
    uint64_t now = sx__now_ns();
    sx__spin_lock(&tm->lock);
    drain(tm, now, &failed);
    sx__tw_filter(&tm->tw, keep_live, NULL);
    settle(tm, now, &failed);
    sx__spin_unlock(&tm->lock);
    fail_all(&failed);
}

void sx__timers_purge_maybe(sx_engine *e)
{
    /* acquire: pairs with the release add in sx__finish: the entries this
     * count stands for are seen dead by the purge below. */
    uint64_t dead = atomic_load_explicit(&e->tm_dead, memory_order_acquire);
    if (dead == 0)
        return;
    if (dead * 2 < sx__timers_count(e))
        return;
    /* One purge at a time. Two at once would both take off the count each
     * had read, and the second would erase what finished during the first:
     * those entries would then never be purged (test_clock
     * terminated_sleeps_purged checks that none is left). acquire: pairs
     * with the release store that ends the previous purge, whose
     * subtraction the re-read below then sees. */
    if (atomic_exchange_explicit(&e->tm_purging, 1, memory_order_acquire))
        return; /* the running purge will do */
    /* acquire: as above. */
    dead = atomic_load_explicit(&e->tm_dead, memory_order_acquire);
    if (dead > 0)
        for (unsigned i = 0; i < e->n_workers; i++)
            purge(&e->workers[i].tm);
    /* Take off the count this purge answered for: what finishes during
     * the purge stays counted for the next. The count over-counts answers
     * already fired but not collected: subtracting what was read rather
     * than what was found keeps such phantoms from triggering purge after
     * purge. Only finishes add meanwhile, so the count stays >= dead.
     * relaxed: only the purge holding the flag subtracts, and the flag's
     * release hands the result to the next. */
    atomic_fetch_sub_explicit(&e->tm_dead, dead, memory_order_relaxed);
    /* release: see the exchange above. */
    atomic_store_explicit(&e->tm_purging, 0, memory_order_release);
}

/* engine/core/proc.c — a process's life: the registered types, submit
 * and spawn (with options too), messages, finishing (its watchers are
 * engine/core/watch.c; cancel and terminate engine/core/control.c).
 *
 * It is one piece: every spawn path (sx__spawn, sx__spawn_api,
 * sx__spawn_opt, spawn_held) has spawn_in inlined, and the type look-up
 * and admission with it, so that the hot ones (a spawn without options:
 * skynet; a submit from outside) are each compiled as one function; split
 * across files, they would share it through calls.
 *
 * Threads: submit, send, cancel and terminate [any thread]; sx__finish
 * runs on the worker that ran the process's last step.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/core/core.h"
#include "engine/core/job.h"
#include "engine/core/live.h"
#include "engine/io/io.h"
#include "process/fault.h"
#include "process/utf8.h"

/* Type names hash into an open-addressed table of indices + 1 (0 =
 * empty), at most half full, rebuilt by register (before start; read-only
 * after): a look-up by name costs one hash and one strcmp, not one strcmp
 * per type registered before its own (100 of ~1,000 instructions per
 * submit with five types, callgrind). A submit from the API looks at the
 * table keyed by the name's address first (type_find_addr). */
static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s != 0; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static const sx_process_type *type_find(sx_engine *e, const char *name)
{
    if (e->type_hash == NULL)
        return NULL;
    size_t mask = e->type_hash_cap - 1;
    for (size_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
        uint32_t k = e->type_hash[i];
        if (k == 0)
            return NULL;
        /* The same pointer first: spawns with options, stored and
         * supervised submits and restarts often come here with the very
         * string the type was registered with. */
        const char *tn = e->types[k - 1]->name;
        if (tn == name || strcmp(tn, name) == 0)
            return e->types[k - 1];
    }
}

/* A second table holds the same indices keyed by the address of each
 * type's name. The engine keeps the pointer it was given, and the string
 * there stays as registered while the engine lives (docs/API.md), so a
 * name at that address is that type's name, and a caller that passes the
 * string it registered (a C program's literal; the relay's submit, which
 * takes the engine's own pointer from sx_engine_types) is answered by one
 * multiply and one compare instead of hashing the name byte by byte. Only
 * the API's submits look here first: a spawn command carries its type's
 * name as bytes in a payload, never at the registered address, and would
 * pay for the miss. */
static inline uint32_t addr_hash(const char *s)
{
    /* Multiplicative (Fibonacci) hashing: bit 32 + j of the product
     * depends on every address bit up to 32 + j, so the index (the low
     * bits of the high half) mixes the address's low bits, where names
     * differ, with the bits above them. */
    return (uint32_t)(((uint64_t)(uintptr_t)s * 0x9E3779B97F4A7C15ull) >> 32);
}

static inline __attribute__((always_inline)) const sx_process_type *
type_find_addr(sx_engine *e, const char *name)
{
    if (e->type_addr_hash == NULL)
        return NULL;
    size_t mask = e->type_hash_cap - 1;
    for (size_t i = addr_hash(name) & mask;; i = (i + 1) & mask) {
        uint32_t k = e->type_addr_hash[i];
        if (k == 0)
            return type_find(e, name); /* not a registered address */
        if (e->types[k - 1]->name == name)
            return e->types[k - 1];
    }
}

const sx_process_type *sx__type_find(sx_engine *e, const char *name)
{
    return type_find(e, name);
}

static int type_hash_build(sx_engine *e)
{
    size_t cap = 16;
    while (cap < 2 * e->n_types)
        cap *= 2;
    uint32_t *h = calloc(cap, sizeof(*h));
    uint32_t *hp = calloc(cap, sizeof(*hp));
    if (h == NULL || hp == NULL) {
        free(h);
        free(hp);
        return SX_ENOMEM;
    }
    /* Names are unique, and so are their addresses (register refuses a
     * second one of either). */
    for (size_t j = 0; j < e->n_types; j++) {
        size_t i = name_hash(e->types[j]->name) & (cap - 1);
        while (h[i] != 0)
            i = (i + 1) & (cap - 1);
        h[i] = (uint32_t)j + 1;
        i = addr_hash(e->types[j]->name) & (cap - 1);
        while (hp[i] != 0)
            i = (i + 1) & (cap - 1);
        hp[i] = (uint32_t)j + 1;
    }
    free(e->type_hash);
    free(e->type_addr_hash);
    e->type_hash = h;
    e->type_addr_hash = hp;
    e->type_hash_cap = cap;
    return 0;
}

int sx_engine_register(sx_engine *e, const sx_process_type *type)
{
    /* Names that begin with '@' are the engine's own types'. */
    if (type != NULL && type->name != NULL && type->name[0] == '@')
        return SX_EINVAL;
    return sx__type_add(e, type);
}

int sx__type_add(sx_engine *e, const sx_process_type *type)
{
    if (e == NULL || type == NULL || type->name == NULL || type->name[0] == 0 ||
        type->init == NULL || type->step == NULL || type->deadline_ms < 0)
        return SX_EINVAL;
    /* A state no allocation can give (each process gets its own, zeroed
     * at spawn): refused here, once, rather than SX_ENOMEM at every
     * submit (and an abort under AddressSanitizer, whose allocator
     * rejects such sizes). */
    if (type->state_size > SX_STATE_SIZE_MAX)
        return SX_EINVAL;
    if (sx__started(e))
        return SX_ESTATE;
    /* A name already registered, or the very string of one (rewritten
     * since, which the contract forbids; its address would answer for
     * both): SX_EEXIST. type_find_addr looks by address, then by name. */
    if (type_find_addr(e, type->name) != NULL)
        return SX_EEXIST;
    if (e->n_types == e->cap_types) {
        size_t cap = e->cap_types ? e->cap_types * 2 : 16;
        const sx_process_type **t = realloc(e->types, cap * sizeof(*t));
        if (t == NULL)
            return SX_ENOMEM;
        e->types = t;
        e->cap_types = cap;
    }
    e->types[e->n_types++] = type;
    if (type_hash_build(e) != 0) {
        e->n_types--;
        return SX_ENOMEM;
    }
    return 0;
}

/* ---- submit and spawn ---------------------------------------------------- */

/* Marks p COMPLETE (sx__finish, and a spawn whose init failed). release:
 * producers that see COMPLETE leave their events queued (freed with the
 * slot); nothing is delivered after this. A link's failure reason
 * (sx__pext) is written only before a TERM flag is raised: seen here (the
 * flag's release, this acquire), it is reset for the slot's next process;
 * raised after this, its writer finds COMPLETE and resets it itself
 * (dispatch.c). relaxed store: the slot is recycled only after our
 * release of refs. */
static void mark_complete(sx_engine *e, sx__proc *p)
{
    uint32_t old = atomic_exchange_explicit(&p->state, SX_PSTATE_COMPLETE,
                                            memory_order_acq_rel);
    if (old & SX__F_TERM) {
        atomic_store_explicit(&sx__ptable_pext(e, p)->link_failed, 0,
                              memory_order_relaxed);
        atomic_store_explicit(&sx__ptable_pext(e, p)->expired_ms, 0,
                              memory_order_relaxed);
    }
}

/* Checks method against t's list; *idx is its place + 1 there (0: t has
 * no list, or a place past 65,534, which listings then show as none). */
static int method_check(const sx_process_type *t, const char *method,
                        uint16_t *idx)
{
    *idx = 0;
    if (t->methods == NULL)
        return 0;
    for (size_t k = 0; t->methods[k] != NULL; k++) {
        if (t->methods[k] == method || strcmp(t->methods[k], method) == 0) {
            *idx = k + 1 < UINT16_MAX ? (uint16_t)(k + 1) : 0;
            return 0;
        }
    }
    return SX_EUNKNOWN_METHOD;
}

/* The checks every spawn makes before it takes a slot: *t the type, and
 * *interned its method's place (method_check). */
static inline __attribute__((always_inline)) int
spawn_check(sx_engine *e, const char *type, const char *method,
            const sx_payload *input, size_t n_input, const sx_process_type **t,
            uint16_t *interned, bool by_addr)
{
    if (type == NULL || method == NULL || (input == NULL && n_input > 0))
        return SX_EINVAL;
    if (!sx__started(e))
        return SX_ESTATE;
    *t = by_addr ? type_find_addr(e, type) : type_find(e, type);
    if (*t == NULL)
        return SX_EUNKNOWN_TYPE;
    int rc = method_check(*t, method, interned);
    if (rc != 0)
        return rc;
    /* Once stop has begun, refused here, before a slot is taken: a
     * submit after stop must not show in listings, even for an instant.
     * relaxed: a fast refusal; the seq_cst read after the birth below is
     * the one stop's handshake relies on. */
    if (atomic_load_explicit(&e->stopping, memory_order_relaxed))
        return SX_ESTOPPING;
    return 0;
}

/* Takes an admission under max_processes; false when at the limit. */
static inline __attribute__((always_inline)) bool admit(sx_engine *e)
{
    if (e->cfg.max_processes != 0 &&
        /* relaxed: a count; see "live" above. */
        atomic_fetch_add_explicit(&e->admitted, 1, memory_order_relaxed) >=
            e->cfg.max_processes) {
        atomic_fetch_sub_explicit(&e->admitted, 1, memory_order_relaxed);
        return false;
    }
    return true;
}

static inline __attribute__((always_inline)) void unadmit(sx_engine *e)
{
    if (e->cfg.max_processes != 0) /* relaxed: as in admit */
        atomic_fetch_sub_explicit(&e->admitted, 1, memory_order_relaxed);
}

/* Undoes a spawn whose slot p was never queued (its init failed, or a
 * job the store did not take): retires it so no look-up finds it, then
 * drops the table's reference (frees the state and the slot). Its PID
 * resolved during init, so a link may have named a reason and raised
 * TERM meanwhile (mark_complete resets it), and watchers registered then
 * (a link or a monitor from a process that had the PID) learn that it
 * failed, with rc and msg, rather than being left unfired and unfreed. */
static void spawn_undo(sx_engine *e, sx__worker *w, sx__proc *p, int rc,
                       const char *msg)
{
    mark_complete(e, p);
    /* A deadline armed for it (a held job the store refused) goes. Only
     * then: a spawn refused because stop has begun must not read the
     * loops, which stop takes down meanwhile (p->io is 0 for a slot no
     * deadline or command has used; a live process holds stop back).
     * relaxed gen: the slot is ours. */
    if (p->io)
        sx__io_proc_finished(
            e, p, atomic_load_explicit(&p->gen, memory_order_relaxed));
    sx_pid self = sx__proc_pid(e, p); /* before retire moves gen on */
    /* Retired under a shard lock, and its waiters (sx_engine_wait on the
     * PID, which resolved) woken: no outcome will come for them. */
    sx__outcomes_retire(e, w, p, self.id);
    sx__watchers_fire(e, p, self, rc, msg, (sx_payload){ NULL, 0 }, 0, 0);
    sx__proc_release(e, p);
    sx__live_died(e, w);
}

/* init refused p with rc: the slot undone, its watchers told init's own
 * message when it gave one. Apart: the spawn paths inline spawn_in. */
static __attribute__((cold, noinline)) int
init_refused(sx_engine *e, sx__worker *w, sx__proc *p, const sx_init_ctx *ctx,
             int rc)
{
    const char *why = sx__init_refused(ctx, rc);
    spawn_undo(e, w, p, rc, why[0] != '\0' ? why : "init failed");
    return rc;
}

/* The rest of a spawn once slot p is taken: birth, state, init, the
 * watcher; then p is queued (queue) or left for the caller to queue or
 * undo (sx__spawn_held; the table's reference is then the caller's). On
 * error the slot is undone (sx__live_died gives the admission back). */
/* A deadline for p (init ran) could not be armed: p is dropped, close
 * run, and the spawn fails SX_ENOMEM. */
static __attribute__((cold, noinline)) int
deadline_refused(sx_engine *e, sx__worker *w, sx__proc *p)
{
    if (p->type->close != NULL)
        p->type->close(p->user_state);
    spawn_undo(e, w, p, SX_ENOMEM, "no memory for the deadline");
    return SX_ENOMEM;
}

static inline __attribute__((always_inline)) int
spawn_in(sx_engine *e, sx__worker *w, sx__proc *p, const sx_process_type *t,
         sx_pid parent, const char *method, const sx_payload *input,
         size_t n_input, sx__ev *watcher, sx_pid *out_pid, bool queue,
         bool init, int64_t deadline_ms)
{
    int rc;
    /* The birth is counted after the slot is in the table and before
     * stopping is read (see "live"): either this spawn sees stopping and
     * backs out, or stop's read of the count sees the birth, and with it
     * (the seq_cst store's release) the slot, which its cancel walk then
     * finds. Counted before the alloc, a spawn that read stopping just
     * before stop set it could take its slot after the walk had passed
     * it: a process that never got stop's cancel, terminated at the
     * deadline (test_api stop_cancels_racing_submits). The price: a
     * spawn refused here was in the table for a moment, so a listing
     * may show it (as `live` may count it), during stop, or after it
     * for a spawn whose thread stalled between the check above and
     * this one for the whole stop. */
    sx__live_born(e, w);
    /* seq_cst: see "live". */
    if (atomic_load_explicit(&e->stopping, memory_order_seq_cst)) {
        rc = SX_ESTOPPING;
        goto fail_slot;
    }
    /* A type without state gets a shared, never written placeholder: no
     * allocation per process (the spawnidle and submit workloads); a small
     * state goes in the slot's cell (proc.h, SX__CELL), zeroed whole (a
     * constant size: two stores, not a call). */
    if (t->state_size == 0) {
        p->user_state = (void *)&sx__no_state;
    } else if (t->state_size <= SX__CELL) {
        void *cell = sx__ptable_cell(e, p);
        memset(cell, 0, SX__CELL);
        p->user_state = cell;
    } else {
        p->user_state = calloc(1, t->state_size);
        p->heap_state = 1;
        if (p->user_state == NULL) {
            rc = SX_ENOMEM;
            goto fail_slot;
        }
    }
    sx_init_ctx ctx = { sx__proc_pid(e, p), parent, e, t->user, false };
    rc = init ? t->init(p->user_state, &ctx, method, input, n_input) : 0;
    if (rc != 0) {
        if (rc > 0)
            rc = SX_EFAILED;
        return init_refused(e, w, p, &ctx, rc);
    }
    /* deadline_ms < 0: the type's (a constant in the spawn paths that
     * have no options, where this is one test of t->deadline_ms). Armed
     * before the caller's watcher is pushed: if it cannot be, the undo
     * answers only the watchers others registered, and the caller answers
     * its own (a spawn-wait's completer) once, from the error. */
    if (deadline_ms < 0)
        deadline_ms = t->deadline_ms;
    if (__builtin_expect(deadline_ms > 0, 0) &&
        sx__expire_arm(e, p, deadline_ms) != 0)
        return deadline_refused(e, w, p);
    if (watcher != NULL) {
        /* Pushed, not stored: p's PID resolved while init ran, so a
         * monitor, link or sx_engine_watch may have registered watchers
         * meanwhile (sx__watch), which a plain store would drop (never
         * fired, never freed). The list cannot be CLOSED: p has not been
         * queued, so nothing has finished it. relaxed (load): the CAS
         * re-reads it. */
        sx__ev *old = atomic_load_explicit(&p->watchers, memory_order_relaxed);
        do {
            /* relaxed: published by the CAS. */
            atomic_store_explicit(&watcher->node.next,
                                  old != NULL ? &old->node : NULL,
                                  memory_order_relaxed);
            /* release: as in sx__watch (the finish's acquire exchange
             * sees the node); the queue hand-off publishes it too. */
        } while (!atomic_compare_exchange_weak_explicit(
            &p->watchers, &old, watcher, memory_order_release,
            memory_order_relaxed));
    }
    if (w != NULL)
        sx__wstat_add(&w->st.spawned, 1);
    else
        atomic_fetch_add_explicit(&e->submitted, 1, memory_order_relaxed);
    if (out_pid != NULL)
        *out_pid = ctx.pid;
    if (queue)
        sx__enqueue_new(e, p); /* p may run and finish from here on */
    return 0;

fail_slot:
    spawn_undo(e, w, p, rc, "init failed"); /* gives the admission back */
    return rc;
}

/* sx__spawn, and with by_addr the API's submits (sx__spawn_api). */
static inline __attribute__((always_inline)) int
spawn_plain(sx_engine *e, sx_pid parent, const char *type, const char *method,
            const sx_payload *input, size_t n_input, sx__ev *watcher,
            sx_pid *out_pid, bool by_addr)
{
    const sx_process_type *t;
    uint16_t interned;
    int rc =
        spawn_check(e, type, method, input, n_input, &t, &interned, by_addr);
    if (rc != 0)
        return rc;
    sx__worker *w = sx__current_worker(e);
    if (!admit(e))
        return SX_ELIMIT;
    sx__proc *p =
        SX__FAULT(SX__FAULT_SPAWN) ? NULL : sx__ptable_alloc(e, t, interned);
    if (p == NULL) {
        unadmit(e);
        return sx__ptable_full(e) ? SX_ELIMIT : SX_ENOMEM;
    }
    return spawn_in(e, w, p, t, parent, method, input, n_input, watcher,
                    out_pid, true, true, -1);
}

int sx__spawn(sx_engine *e, sx_pid parent, const char *type, const char *method,
              const sx_payload *input, size_t n_input, sx__ev *watcher,
              sx_pid *out_pid)
{
    return spawn_plain(e, parent, type, method, input, n_input, watcher,
                       out_pid, false);
}

int sx__spawn_api(sx_engine *e, const char *type, const char *method,
                  const sx_payload *input, size_t n_input, sx_pid *out_pid)
{
    return spawn_plain(e, SX_PID_NONE, type, method, input, n_input, NULL,
                       out_pid, true);
}

void sx__spawned_notice(sx_engine *e, sx_pid parent, sx_pid child, uint64_t tag)
{
    uint8_t buf[96];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    sx_pack_map(&pk, 2);
    sx_pack_str(&pk, "tag");
    sx_pack_uint(&pk, tag);
    sx_pack_str(&pk, "pid");
    sx_pack_pid(&pk, child);
    sx__send(e, child, parent, SX_TOPIC_SPAWNED, sizeof(SX_TOPIC_SPAWNED) - 1,
             sx_pack_payload(&pk), false);
}

int sx__spawn_opt(sx_engine *e, sx_pid parent, const char *type,
                  const char *method, const sx_payload *input, size_t n_input,
                  sx__ev *watcher, sx_pid *out_pid, const sx__spawnx *x)
{
    const sx_process_type *t;
    uint16_t interned;
    int rc = spawn_check(e, type, method, input, n_input, &t, &interned, false);
    if (rc != 0)
        return rc;
    sx__ev *scope = NULL;
    if (x->scope != SX_SCOPE_NONE) {
        if (sx_pid_eq(parent, SX_PID_NONE))
            return SX_EINVAL;
        if ((scope = sx__ev_alloc()) == NULL)
            return SX_ENOMEM;
    }
    sx__worker *w = sx__current_worker(e);
    if (!admit(e)) {
        sx__ev_free(scope);
        return SX_ELIMIT;
    }
    sx__proc *p =
        SX__FAULT(SX__FAULT_SPAWN) ? NULL : sx__ptable_alloc(e, t, interned);
    if (p == NULL) {
        unadmit(e);
        sx__ev_free(scope);
        return sx__ptable_full(e) ? SX_ELIMIT : SX_ENOMEM;
    }
    sx_pid child;
    rc = spawn_in(e, w, p, t, parent, method, input, n_input, watcher, &child,
                  false, true, x->deadline_ms);
    if (rc != 0) {
        sx__ev_free(scope);
        return rc;
    }
    if (out_pid != NULL)
        *out_pid = child;
    if (x->held != NULL) {
        *x->held = p;
        sx__ev_free(scope);
        return 0;
    }
    if (scope != NULL) {
        /* The parent's end reaches the child: a watcher on the parent,
         * addressed to the child (watch.c fires it as a cancel or a
         * terminate). A parent that has ended already fires it at once.
         * Scoped spawns come from the parent's own commands, on the
         * worker that runs it: the spent watchers of its children that
         * ended go first (sx__scope_prune), so that a parent holds one
         * per child still running, not one per child it ever had. */
        sx__proc *pp = sx__ptable_get(e, parent);
        if (pp != NULL) {
            sx__scope_prune(e, pp);
            sx__proc_release(e, pp);
        }
        scope->watch = SX__WATCH_SCOPE;
        scope->engine = e;
        scope->to = p;
        /* relaxed: p is ours until queued. */
        scope->to_gen = atomic_load_explicit(&p->gen, memory_order_relaxed);
        scope->from = child;
        scope->tag = (uint64_t)x->scope;
        sx__watch(e, parent, scope);
    }
    if (x->notify)
        /* Pushed before the child is queued: the parent's mailbox has it
         * before any answer of the child's. */
        sx__spawned_notice(e, parent, child, x->notify_tag);
    sx__enqueue_new(e, p); /* p may run and finish from here on */
    return 0;
}

int sx__proc_reinit(sx_engine *e, sx__proc *p, sx_pid self, const char *method,
                    const sx_payload *input, size_t n_input)
{
    const sx_process_type *t = p->type;
    sx_init_ctx ctx = { self, SX_PID_NONE, e, t->user, false };
    int rc = t->init(p->user_state, &ctx, method, input, n_input);
    if (rc != 0) {
        rc = rc > 0 ? SX_EFAILED : rc;
        sx__init_refused(&ctx, rc);
        return rc;
    }
    /* Each attempt has the whole deadline (job.h). */
    int64_t dl = p->job ? sx__job_of(e, p)->deadline_ms : 0;
    if (sx__expire_arm(e, p, dl > 0 ? dl : t->deadline_ms) != 0) {
        if (t->close != NULL)
            t->close(p->user_state);
        return SX_ENOMEM;
    }
    /* release: producers that see READY push and leave the queueing to
     * us; a worker that takes it sees the reset state. */
    atomic_store_explicit(&p->state, SX_PSTATE_READY, memory_order_release);
    sx__enqueue_new(e, p);
    return 0;
}

static int spawn_held(sx_engine *e, const char *type, const char *method,
                      const sx_payload *input, size_t n_input,
                      uint64_t claim_id, sx__proc **held, sx_pid *out_pid,
                      bool init, int64_t deadline_ms);

int sx__spawn_held(sx_engine *e, const char *type, const char *method,
                   const sx_payload *input, size_t n_input, uint64_t claim_id,
                   sx__proc **held, sx_pid *out_pid)
{
    return spawn_held(e, type, method, input, n_input, claim_id, held, out_pid,
                      true, -1);
}

int sx__spawn_waiting(sx_engine *e, const char *type, const char *method,
                      uint64_t claim_id, sx__proc **held)
{
    /* No deadline: it is not running; its restart arms one
     * (sx__proc_reinit). */
    int rc =
        spawn_held(e, type, method, NULL, 0, claim_id, held, NULL, false, 0);
    if (rc == 0) /* as a finish leaves it: refuses messages (supervise.c) */
        atomic_store_explicit(&(*held)->state, SX_PSTATE_COMPLETE,
                              memory_order_release);
    return rc;
}

int sx__spawn_restored(sx_engine *e, const char *type, const char *method,
                       uint64_t claim_id, sx__proc **held)
{
    return spawn_held(e, type, method, NULL, 0, claim_id, held, NULL, false,
                      -1);
}

static int spawn_held(sx_engine *e, const char *type, const char *method,
                      const sx_payload *input, size_t n_input,
                      uint64_t claim_id, sx__proc **held, sx_pid *out_pid,
                      bool init, int64_t deadline_ms)
{
    const sx_process_type *t;
    uint16_t interned;
    int rc = spawn_check(e, type, method, input, n_input, &t, &interned, false);
    if (rc != 0)
        return rc;
    sx__worker *w = sx__current_worker(e);
    if (!admit(e))
        return SX_ELIMIT;
    sx__proc *p;
    if (claim_id != 0)
        p = sx__ptable_claim(e, (uint32_t)claim_id, (uint32_t)(claim_id >> 32),
                             t, interned);
    else
        p = SX__FAULT(SX__FAULT_SPAWN) ? NULL
                                       : sx__ptable_alloc(e, t, interned);
    if (p == NULL) {
        unadmit(e);
        return claim_id != 0        ? SX_EINVAL
               : sx__ptable_full(e) ? SX_ELIMIT
                                    : SX_ENOMEM;
    }
    rc = spawn_in(e, w, p, t, SX_PID_NONE, method, input, n_input, NULL,
                  out_pid, false, init, deadline_ms);
    if (rc == 0)
        *held = p;
    return rc;
}

void sx__spawn_drop(sx_engine *e, sx__proc *p, int rc, const char *msg)
{
    /* init ran: close runs too, as for any process that was made. */
    if (p->type->close != NULL)
        p->type->close(p->user_state);
    spawn_undo(e, sx__current_worker(e), p, rc, msg);
}

int sx_engine_submit(sx_engine *e, const char *type, const char *method,
                     const sx_payload *input, size_t n_input, sx_pid *out_pid)
{
    sx__init_forget(); /* sx_engine_init_error: this submit's, or "" */
    if (e == NULL)
        return SX_EINVAL;
    if (e->jobs) /* stored or supervised (durable.c) */
        return sx__durable_submit(e, type, method, input, n_input, out_pid);
    return sx__spawn_api(e, type, method, input, n_input, out_pid);
}

/* ---- messages ------------------------------------------------------------ */

/* Counts n messages sent (take back: uncounts them after a failed
 * delivery). Counted before the delivery, so that a receiver that saw a
 * message also sees it counted. A worker's counter has one writer
 * (sx__wstat_add); outside threads share ext_messages (relaxed: figures
 * only). */
static void count_messages(sx_engine *e, sx__worker *w, uint64_t n,
                           bool take_back)
{
    if (w != NULL)
        sx__wstat_add(&w->st.messages, take_back ? (uint64_t)0 - n : n);
    else if (take_back)
        atomic_fetch_sub_explicit(&e->ext_messages, n, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&e->ext_messages, n, memory_order_relaxed);
}

static int send_ev(sx_engine *e, sx_pid to, sx__ev *ev)
{
    sx__proc *p = sx__ptable_get(e, to);
    if (p == NULL) {
        if (e->remote.send != NULL && to.node != e->cfg.node) {
            /* relaxed: the chain is ours. */
            atomic_store_explicit(&ev->node.next, NULL, memory_order_relaxed);
            return sx__remote_send(e, to, ev);
        }
        sx__ev_free(ev);
        return SX_ENOTFOUND;
    }
    sx__worker *w = sx__current_worker(e);
    count_messages(e, w, 1, false);
    int rc = sx__deliver(e, p, ev);
    if (rc != 0)
        count_messages(e, w, 1, true);
    sx__proc_release(e, p);
    return rc;
}

/* send_ev for a cold caller (a ticker's stop notice, clock.c), out of
 * line: one copy, which adds nothing to the callers that LTO weighs when
 * it inlines the send paths. */
__attribute__((noinline)) int sx__send_note(sx_engine *e, sx_pid to, sx__ev *ev)
{
    return send_ev(e, to, ev);
}

/* Like send_ev for a chain of n messages (first..last, linked). */
__attribute__((noinline)) int sx__send_chain_any(sx_engine *e, sx_pid to,
                                                 sx__ev *first, sx__ev *last,
                                                 size_t n)
{
    sx__worker *w = sx__current_worker(e);
    sx__prefs_slot ps = sx__prefs_find(
        w != NULL && to.node == e->cfg.node && to.host == e->cfg.host ? w->prefs
                                                                      : NULL,
        to.id);
    sx__proc *p = ps.p;
    if (p == NULL && (p = sx__ptable_get(e, to)) == NULL) {
        if (e->remote.send != NULL && to.node != e->cfg.node)
            return sx__remote_send(e, to, first);
        sx__ev_free_chain(first);
        return SX_ENOTFOUND;
    }
    bool kept = sx__prefs_keep(e, &ps, to.id, p);
    count_messages(e, w, n, false);
    int rc = sx__deliver_chain(e, p, first, last);
    if (rc != 0)
        count_messages(e, w, n, true);
    if (!kept)
        sx__proc_release(e, p);
    return rc;
}

/* Sends the chain of n messages first..last to `to`: the common case
 * inline (sx__send_kept), so that no register is saved for the rest; the
 * arguments fit the registers, so sx__send_chain_any is a tail call. */
int sx__send_chain(sx_engine *e, sx_pid to, sx__ev *first, sx__ev *last,
                   size_t n)
{
    if (sx__send_kept(e, sx__current_worker(e), to, first, last, n))
        return 0;
    return sx__send_chain_any(e, to, first, last, n);
}

int sx__send(sx_engine *e, sx_pid from, sx_pid to, const char *topic,
             size_t topic_len, sx_payload data, bool ctl)
{
    if (topic_len > 255 || (data.data == NULL && data.len > 0))
        return SX_EINVAL;
    sx__ev *ev = SX__FAULT(SX__FAULT_SEND)
                     ? NULL
                     : sx__ev_alloc_sized((topic != NULL ? topic_len + 1 : 0) +
                                          data.len);
    if (ev == NULL)
        return SX_ENOMEM;
    ev->kind = SX__EV_MESSAGE;
    ev->ctl = ctl;
    ev->from = from;
    int rc = sx__ev_set(ev, topic, topic_len, data, NULL);
    if (rc != 0) {
        sx__ev_free(ev);
        return rc;
    }
    return send_ev(e, to, ev);
}

/* ---- finishing ---- */

/* The outcome, the sleeps' count, the watchers and the table's reference
 * of a finished process (sx__finish; for a stored job, once its outcome
 * is stored). */
static inline __attribute__((always_inline)) void
finish_tail(sx_engine *e, sx__worker *self, sx__proc *p, sx_pid pid, int error,
            const char *msg, sx_payload value, uint64_t steps,
            uint32_t attempts, bool hot)
{
    /* close has returned before the outcome is visible to wait; the PID
     * stops resolving right after it is (outcome.c). */
    if (hot)
        sx__outcomes_put(e, self, p, pid.id, error, msg, value, steps,
                         attempts);
    else
        sx__outcomes_put_cold(e, self, p, pid.id, error, msg, value, steps,
                              attempts);
    /* Sleeps still in a timer set are dropped there lazily (sleep.c),
     * counted only now that the slot's generation has moved on. release:
     * a purge that reads the count (acquire) then sees the new generation
     * and finds these entries dead; counted earlier, a purge could take
     * the count off without finding them, leaving them unpurged. */
    if (p->sleeps > 0)
        atomic_fetch_add_explicit(&e->tm_dead, p->sleeps, memory_order_release);
    sx__watchers_fire(e, p, pid, error, msg, value, steps, attempts);
    sx__proc_release(e, p); /* the table's reference */
}

void sx__finish(sx_engine *e, sx__proc *p, int error, const char *msg,
                sx_payload value)
{
    mark_complete(e, p);
    /* Commands still running on a loop are cancelled (timers stopped,
     * subprocesses killed, sockets closed); relaxed gen: ours. */
    sx__io_proc_finished(e, p,
                         atomic_load_explicit(&p->gen, memory_order_relaxed));
    if (p->type->close != NULL)
        p->type->close(p->user_state);
    sx_pid pid = sx__proc_pid(e, p);
    /* relaxed: only this worker wrote steps. */
    uint64_t steps = atomic_load_explicit(&p->steps, memory_order_relaxed);
    /* The figures and `live` change before the outcome is visible, so a
     * waiter that sees the outcome also sees them. */
    sx__worker *self = sx__current_worker(e);
    if (self != NULL) {
        sx__wstat_add(error == 0                ? &self->st.completed
                      : error == SX_ETERMINATED ? &self->st.terminated
                      : error == SX_ECANCELLED  ? &self->st.cancelled
                                                : &self->st.failed,
                      1);
    } else {
        atomic_fetch_add_explicit(error == 0                ? &e->completed
                                  : error == SX_ETERMINATED ? &e->terminated
                                  : error == SX_ECANCELLED  ? &e->cancelled
                                                            : &e->failed,
                                  1, memory_order_relaxed);
    }
    /* A job may restart (supervise.c), and a stored job's outcome is
     * visible once it is stored (durable.c). */
    if (__builtin_expect(p->job, 0)) {
        sx__job_finish(e, p, pid, error, msg, value, steps);
        return;
    }
    sx__live_died(e, self);
    finish_tail(e, self, p, pid, error, msg, value, steps, 1, true);
}

void sx__finish_tail(sx_engine *e, sx__proc *p, sx_pid pid, int error,
                     const char *msg, sx_payload value, uint64_t steps,
                     uint32_t attempts)
{
    finish_tail(e, sx__current_worker(e), p, pid, error, msg, value, steps,
                attempts, false);
}

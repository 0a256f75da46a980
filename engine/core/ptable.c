/* engine/core/ptable.c — the process table: PID -> process.
 *
 * Slots live in segments of doubling size (1024, 2048, ...) that are never
 * moved or freed before the engine is, so the table grows to millions of
 * processes without ever copying and a look-up is two loads and one CAS:
 * no lock on the send path. A PID's id is (generation << 32) | slot index;
 * a slot's generation changes when its process finishes, so a PID or a
 * completer that outlived its process misses instead of reaching the slot's
 * next occupant.
 *
 * Generations come in two disjoint ranges (see "Generations" below):
 * processes count 1, 2, 3, ... up to SX__GEN_PROC_MAX (top bit clear) on
 * each slot; a mailbox takes a random generation with the top bit set, so
 * that a client cannot guess another client's mailbox PID, and no process
 * PID, stale or live, ever names a mailbox or the other way round.
 *
 * Free slots travel in magazines (see "free slots" below) between the
 * threads' caches and a lock-free stack whose head carries an ABA tag in
 * its upper 32 bits. A slot is used for the first time when the stack is
 * empty: the newest segment's next MAG untouched slots are initialised
 * (carved) and pushed as one magazine, under grow_mu (once per MAG new
 * slots); a new segment is mapped when the newest is all carved. Carving
 * on demand, rather than initialising a whole segment when it is mapped,
 * leaves the memory of slots never used untouched: a segment is as big as
 * all before it, so up to half the table would otherwise be faulted in
 * for nothing (100,000 sleepers would touch 127,000 slots, ~3.7 MB more,
 * at ~0.5-3 ns a byte for first-touch faults on a VM).
 *
 * It is one piece: the slots' layout, the free magazines and the
 * generations are three views of the same words of a slot (steps is the
 * magazine link while a slot is free, gen what a look-up checks and what
 * alloc and retire move on), under one set of memory orders; split,
 * each part would reach into the others' fields.
 *
 * Threads: all functions [any thread] except sx__ptable_reserve and
 * sx__ptable_claim [before start, one thread] and sx__ptable_free_check
 * [tests: while no thread takes slots].
 */
/* MAP_ANONYMOUS is not in POSIX.1-2008. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/core/core.h"
#include "engine/core/job.h"
#include "engine/sched/prefetch.h"
#include "process/fault.h"

const max_align_t sx__no_state;

/* Segments of at least this many bytes are mapped on their own, in plain
 * 4 KiB pages, not MADV_HUGEPAGE. A huge page maps 2 MiB per fault, which
 * pays where memory is warm (spawnidle 12 % faster when stepx runs follow
 * each other). But a host that takes free memory back from its guests
 * (free page reporting, in blocks of 2 MiB and up) leaves a huge page
 * almost always cold, and a cold one costs up to 7 us per 4 KiB to zero
 * against ~1.7 for small pages. With a Go run before each stepx run, as
 * in the benchmark suite (and as on any host where other programs come
 * and go), huge pages make spawnidle 1.8 x slower (539 against 301 ns
 * per process) and timers 0.073 against 0.068 s, with twice the spread
 * (bench/FINDINGS.md). */
#define SMALL_MAP ((size_t)64 << 10)

/* LeakSanitizer does not scan mmap'd memory for pointers, and the slots
 * hold the only pointers to their watchers and events: an engine still
 * alive at exit (a test that never frees it) would have them reported as
 * leaks. Under AddressSanitizer the mapped segments are made root regions
 * (scanned) while mapped. */
#if defined(__SANITIZE_ADDRESS__)
#define SX_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SX_LSAN 1
#endif
#endif
#ifdef SX_LSAN
#include <sanitizer/lsan_interface.h>
#define lsan_root(p, n) __lsan_register_root_region((p), (n))
#define lsan_unroot(p, n) __lsan_unregister_root_region((p), (n))
#else
#define lsan_root(p, n) ((void)(p), (void)(n))
#define lsan_unroot(p, n) ((void)(p), (void)(n))
#endif

/* b bytes of zeroed, line-aligned memory, or NULL. From 64 KiB on, fresh
 * pages: untouched (and not resident) until used. */
static void *map_zeroed(size_t b)
{
    if (b < SMALL_MAP) {
        /* Line-aligned: the slots' parts fall on lines as proc.h lays
         * them out from a segment's start. */
        void *m = aligned_alloc(64, b); /* b: a multiple of 64 */
        if (m != NULL)
            memset(m, 0, b);
        return m;
    }
    void *m = mmap(NULL, b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    lsan_root(m, b);
    return m;
}

static void unmap_zeroed(void *m, size_t b)
{
    if (b < SMALL_MAP) {
        free(m);
    } else {
        lsan_unroot(m, b);
        munmap(m, b);
    }
}

static size_t seg_bytes(unsigned k)
{
    return ((size_t)SX__SEG_BASE << k) * sizeof(sx__proc);
}

static size_t pext_bytes(unsigned k)
{
    return ((size_t)SX__SEG_BASE << k) * sizeof(sx__pext);
}

static size_t cell_bytes(unsigned k)
{
    return ((size_t)SX__SEG_BASE << k) * sizeof(sx__cell);
}

/* Zeroed memory for segment k, its slots' sx__pext (e->pext[k]) and their
 * state cells (e->cells[k]), or NULL. */
static sx__proc *seg_map(sx_engine *e, unsigned k)
{
    sx__proc *seg =
        SX__FAULT(SX__FAULT_SEG_MAP) ? NULL : map_zeroed(seg_bytes(k));
    if (seg == NULL)
        return NULL;
    e->pext[k] = map_zeroed(pext_bytes(k));
    e->cells[k] = map_zeroed(cell_bytes(k));
    if (e->pext[k] == NULL || e->cells[k] == NULL) {
        if (e->pext[k] != NULL)
            unmap_zeroed(e->pext[k], pext_bytes(k));
        if (e->cells[k] != NULL)
            unmap_zeroed(e->cells[k], cell_bytes(k));
        e->pext[k] = NULL;
        e->cells[k] = NULL;
        unmap_zeroed(seg, seg_bytes(k));
        return NULL;
    }
    return seg;
}

static void seg_unmap(sx_engine *e, sx__proc *seg, unsigned k)
{
    unmap_zeroed(seg, seg_bytes(k));
    unmap_zeroed(e->pext[k], pext_bytes(k));
    unmap_zeroed(e->cells[k], cell_bytes(k));
    e->pext[k] = NULL;
    e->cells[k] = NULL;
}

/* The segment of slot idx, and (in *off) its place in it: 64 bits wide,
 * so that scaling it by a slot's size needs no zero-extension first (one
 * instruction less per look-up). */
static uint32_t seg_of(uint32_t idx, uint64_t *off)
{
    uint64_t q = (uint64_t)idx / SX__SEG_BASE + 1;
    uint32_t k = 63u - (uint32_t)__builtin_clzll(q);
    *off = (uint64_t)idx - (uint64_t)SX__SEG_BASE * ((1ull << k) - 1);
    return k;
}

static sx__proc *slot_at(sx_engine *e, uint32_t idx)
{
    uint64_t off;
    uint32_t k = seg_of(idx, &off);
    if (k >= SX__SEGS)
        return NULL;
    /* acquire: pairs with the release store in grow; the segment's slots
     * are initialised before it is published. */
    sx__proc *seg = atomic_load_explicit(&e->segs[k], memory_order_acquire);
    return seg != NULL ? &seg[off] : NULL;
}

int sx__ptable_init(sx_engine *e)
{
    for (size_t k = 0; k < SX__SEGS; k++) {
        atomic_init(&e->segs[k], NULL);
        e->pext[k] = NULL;
        e->cells[k] = NULL;
        atomic_init(&e->seg_carved[k], 0);
    }
    atomic_init(&e->carved_end, 0);
    atomic_init(&e->pf_next, 0);
    atomic_init(&e->pf_off, false);
    atomic_init(&e->free_head, (uint64_t)SX__FREE_NONE);
    atomic_init(&e->ext_born, 0);
    atomic_init(&e->ext_died, 0);
    atomic_init(&e->admitted, 0);
    atomic_init(&e->slots_full, false);
    e->n_segs = 0;
    e->gen_lo = 1; /* every process generation ("Generations") */
    e->gen_span = SX__GEN_PROC_MAX;
    sx__slotcache_init(&e->ext_slots);
    sx__spin_init(&e->ext_slots_mu);
    int rc = pthread_mutex_init(&e->grow_mu, NULL);
    return -rc;
}

void sx__ptable_fini(sx_engine *e)
{
    for (size_t k = 0; k < SX__SEGS; k++) {
        /* relaxed: no other thread is left. */
        sx__proc *seg = atomic_load_explicit(&e->segs[k], memory_order_relaxed);
        if (seg != NULL)
            seg_unmap(e, seg, (unsigned)k);
    }
    pthread_mutex_destroy(&e->grow_mu);
}

/* ---- free slots ----
 *
 * Free slots travel in magazines of up to MAG slots, as Go's Ps keep free
 * goroutines and Bonwick's allocators keep objects: each worker keeps two
 * (the one it takes from and gives back to, and a full one held back, so
 * that a thread that alternates between taking and giving at a magazine's
 * edge does not go to the shared stack every time), and trades whole
 * magazines with the engine's lock-free stack. A slot freed by a worker is
 * one plain store on its own chain; a submitting thread takes MAG slots
 * with one CAS, and while it initialises one slot the one it will take
 * AHEAD takes later is already on its way to its cache (prefetched). One
 * shared free list instead, every finish pushing its slot onto one head
 * and every submit popping it, costs two contended CASes and a cache miss
 * on a slot just freed on the other core: 30 % of the submit benchmark's
 * time (bench/FINDINGS.md).
 *
 * Within a magazine slots are linked by free_next and the last one holds
 * SX__FREE_NONE. On the stack each slot's free_ahead names the slot AHEAD
 * places further down its magazine (SX__FREE_NONE for the last AHEAD),
 * set by whoever hands the magazine over (mag_mark_ahead, carve_locked):
 * following free_next alone, a taker learns a slot's address only once
 * the slot before it has arrived, and where a line from the other core
 * takes longer than a submit (bench/FINDINGS.md, "The two CPUs'
 * distance") every take waited for one. A magazine's first slot links
 * the next magazine's first slot by its steps field (a free slot has no
 * steps to count, and the field is an atomic that stays one when the slot
 * is in use again, so a stale popper's read of it is no data race;
 * free_next and free_ahead overlay user_state, which only owners
 * touch). Threads that are not workers share one cache (ext_slots) under
 * a spinlock, uncontended with one submitter; a slot whose last reference
 * such a thread drops goes back to the stack as a magazine of one. */

#define MAG 32u
/* How far ahead of its takes an outside thread fetches slots (see
 * above). */
#define AHEAD 4u
/* A fresh magazine's slots are handed out in groups of GROUP, the even
 * ones of a group first (carve_locked). */
#define GROUP 8u
_Static_assert(MAG % GROUP == 0 && GROUP % 2 == 0, "groups of whole pairs");
_Static_assert(SX__SEG_BASE % MAG == 0, "a segment is whole magazines");

void sx__slotcache_init(sx__slotcache *c)
{
    c->cur = c->full = SX__FREE_NONE;
    c->cur_n = 0;
    c->taken = 0;
}

/* Sets free_ahead along the magazine that starts at first (its slots are
 * the caller's, in its cache: a magazine it filled or carved). */
static void mag_mark_ahead(sx_engine *e, sx__proc *first)
{
    sx__proc *back[AHEAD]; /* the last AHEAD slots passed, by k % AHEAD */
    /* The segment of the last slot_at: slots lo..hi-1, slot lo at seg (a
     * magazine's slots mostly share one). */
    uint32_t lo = 0, hi = 0;
    sx__proc *seg = NULL;
    uint32_t k = 0;
    for (sx__proc *p = first;; k++) {
        if (k >= AHEAD)
            back[k % AHEAD]->free_ahead = p->index;
        back[k % AHEAD] = p;
        uint32_t next = p->free_next;
        if (next == SX__FREE_NONE)
            break;
        if (next - lo < hi - lo) {
            p = seg + (next - lo);
            continue;
        }
        uint64_t off;
        unsigned sk = seg_of(next, &off);
        if ((p = slot_at(e, next)) == NULL)
            break; /* cannot happen: free slots are in segments */
        lo = next - (uint32_t)off;
        hi = lo + ((uint32_t)SX__SEG_BASE << sk);
        seg = p - off;
    }
    for (uint32_t i = 0; i <= k && i < AHEAD; i++)
        back[i]->free_ahead = SX__FREE_NONE;
}

/* Pushes the magazines first..last (linked by their steps fields) onto the
 * stack. */
static void mags_push(sx_engine *e, sx__proc *first, sx__proc *last)
{
    /* relaxed: the CAS below re-reads it. */
    uint64_t h = atomic_load_explicit(&e->free_head, memory_order_relaxed);
    uint64_t nh;
    do {
        /* The link to the next magazine, in steps (see above). relaxed:
         * published by the release CAS. */
        atomic_store_explicit(&last->steps, (uint32_t)h, memory_order_relaxed);
        nh = (((h >> 32) + 1) << 32) | first->index;
        /* release: pairs with the acquire CAS in mag_pop, which then sees
         * the slots as their last owners left them and their links. */
    } while (!atomic_compare_exchange_weak_explicit(
        &e->free_head, &h, nh, memory_order_release, memory_order_relaxed));
}

/* The first slot of a magazine taken off the stack, or SX__FREE_NONE. */
static uint32_t mag_pop(sx_engine *e)
{
    /* acquire: pairs with the release CAS in mags_push. */
    uint64_t h = atomic_load_explicit(&e->free_head, memory_order_acquire);
    for (;;) {
        uint32_t idx = (uint32_t)h;
        if (idx == SX__FREE_NONE)
            return SX__FREE_NONE;
        sx__proc *p = slot_at(e, idx);
        if (p == NULL)
            return SX__FREE_NONE; /* cannot happen: free slots exist */
        /* relaxed: if another thread popped this magazine meanwhile, the
         * tag in the head changed and the CAS fails, whatever we read. */
        uint32_t next =
            (uint32_t)atomic_load_explicit(&p->steps, memory_order_relaxed);
        uint64_t nh = (((h >> 32) + 1) << 32) | next;
        /* acquire: see mags_push. */
        if (atomic_compare_exchange_weak_explicit(&e->free_head, &h, nh,
                                                  memory_order_acquire,
                                                  memory_order_acquire))
            return idx;
    }
}

/* Gives the free slot p to the cache c (its owner's), handing a full
 * magazine to the stack when c has two. */
static void cache_put(sx_engine *e, sx__slotcache *c, sx__proc *p)
{
    if (c->cur_n >= MAG) {
        if (c->full != SX__FREE_NONE) {
            sx__proc *f = slot_at(e, c->full);
            mag_mark_ahead(e, f);
            mags_push(e, f, f);
        }
        c->full = c->cur;
        c->cur = SX__FREE_NONE;
        c->cur_n = 0;
    }
    /* The chain is the owner's; a hand-over to the stack publishes it
     * (release CAS). */
    p->free_next = c->cur;
    c->cur = p->index;
    c->cur_n++;
}

static void prefetch_slot(bool on, const sx__proc *p)
{
    /* For writing: alloc initialises most of the two lines the slot
     * covers (p and p + 64 lie on them, whichever half-line p starts).
     * on: sx__prefetch_w_on(). */
    sx__prefetch_w(on, p);
    sx__prefetch_w(on, (const char *)p + 64);
}

/* How cache_take fetches ahead. */
enum { TAKE_PLAIN, TAKE_SLOTS, TAKE_CELLS };

/* Prefetches free slot idx for writing, and with TAKE_CELLS its state
 * cell; on: sx__prefetch_w_on(). */
static inline void fetch_slot(sx_engine *e, uint32_t idx, int fetch, bool on)
{
    sx__proc *q = slot_at(e, idx);
    if (q == NULL)
        return; /* cannot happen: free slots are in segments */
    prefetch_slot(on, q);
    if (fetch == TAKE_CELLS) {
        uint64_t off;
        uint32_t k = seg_of(idx, &off);
        /* q's segment is mapped, and its cells with it (seg_map). */
        sx__prefetch_w(on, e->cells[k][off].b);
    }
}

/* A free slot from the cache c (its owner's), or NULL if c and the stack
 * are empty. Inlined into each caller, for its constant fetch (out of line,
 * the workers' take is a call that also tests fetch: skynet +17
 * instructions a leaf). With TAKE_SLOTS, slots further down are fetched for
 * writing (see "free slots"): for the outside threads, whose slots were freed
 * on other cores; TAKE_CELLS fetches their state cells too, for a type whose
 * state lives there (the spawn zeroes the cell, and its init reads what
 * it writes: a cell left on the other core stalls the init, 98 % of the
 * samples of the relay benchmark's counter_init on a host whose CPUs are
 * far apart). A worker's slots are mostly ones it freed itself, still in
 * its cache; there the look-up of the next slot and its prefetches would
 * only add instructions to every spawn (skynet). */
static inline __attribute__((always_inline)) sx__proc *
cache_take(sx_engine *e, sx__slotcache *c, int fetch)
{
    if (c->cur == SX__FREE_NONE) {
        if (c->full != SX__FREE_NONE) {
            c->cur = c->full;
            c->full = SX__FREE_NONE;
        } else if ((c->cur = mag_pop(e)) == SX__FREE_NONE) {
            return NULL;
        }
        /* A magazine from the stack may hold fewer (a lone slot freed by
         * an outside thread): emptiness is told by cur, and cur_n only
         * decides when a magazine is handed on. */
        c->cur_n = MAG;
        c->taken = 0;
    }
    sx__proc *p = slot_at(e, c->cur);
    if (p == NULL)
        return NULL; /* cannot happen: free slots are in segments */
    /* The chain is ours (see cache_put and mag_pop). */
    uint32_t next = p->free_next;
    c->cur = next;
    c->cur_n = next == SX__FREE_NONE ? 0 : c->cur_n - (c->cur_n > 0);
    if (fetch != TAKE_PLAIN && next != SX__FREE_NONE) {
        /* The slot AHEAD takes away (a magazine's last AHEAD have none:
         * they were fetched already), and the next one while no earlier
         * take has fetched it (the first AHEAD - 1 takes of a magazine). */
        uint32_t ahead = p->free_ahead;
        bool on = sx__prefetch_w_on();
        if (ahead != SX__FREE_NONE)
            fetch_slot(e, ahead, fetch, on);
        if (c->taken++ < AHEAD - 1)
            fetch_slot(e, next, fetch, on);
    }
    return p;
}

/* Carves the next MAG slots (fewer at cfg.max_slots): the newest
 * segment's next untouched ones, or a new segment's first; pushed onto
 * the stack as one magazine, less the slots named in claim[*pos..n)
 * (ascending), which are left out of every free list for the caller to
 * fill (sx__ptable_claim). *next gets the index of the first slot not
 * carved yet. Past cfg.max_slots answers SX_ELIMIT (and sets
 * slots_full). The caller holds grow_mu. */
static int carve_locked(sx_engine *e, const uint32_t *claim, size_t n_claim,
                        size_t *pos, uint32_t *next)
{
    unsigned k = e->n_segs;
    uint32_t off = 0;
    if (k > 0) {
        /* relaxed: written only under grow_mu, which the caller holds. */
        uint32_t c =
            atomic_load_explicit(&e->seg_carved[k - 1], memory_order_relaxed);
        if (c < ((uint32_t)SX__SEG_BASE << (k - 1))) {
            k--; /* the newest segment has untouched slots left */
            off = c;
        }
    }
    uint32_t base = (uint32_t)(SX__SEG_BASE * ((1ull << k) - 1)) + off;
    /* Slots carved so far: base (every earlier segment is carved whole). */
    uint32_t n = MAG;
    size_t cap = e->cfg.max_slots;
    if (k >= SX__SEGS || (cap != 0 && base >= cap)) {
        /* relaxed: a flag that is never cleared, read by whoever failed
         * after this (ptable_full); no data hangs on it. */
        atomic_store_explicit(&e->slots_full, true, memory_order_relaxed);
        return SX_ELIMIT;
    }
    if (cap != 0 && cap - base < n)
        n = (uint32_t)(cap - base);
    if (k == e->n_segs) {
        /* relaxed: segs[k] is written only under grow_mu. Mapped already
         * when an idle worker populated ahead into it (map_ahead). */
        if (atomic_load_explicit(&e->segs[k], memory_order_relaxed) == NULL) {
            sx__proc *fresh = seg_map(e, k);
            if (fresh == NULL)
                return SX_ENOMEM;
            /* release: pairs with the acquire load in slot_at. Its slots
             * are zeroed memory: no look-up can take a reference (refs ==
             * 0). */
            atomic_store_explicit(&e->segs[k], fresh, memory_order_release);
        }
        e->n_segs = k + 1;
    }
    /* relaxed: the caller holds grow_mu (see above). */
    sx__proc *seg = atomic_load_explicit(&e->segs[k], memory_order_relaxed);
    /* The memory is zeroed: state, refs, gen and watchers start at 0 /
     * NULL as they should; steps holds the magazine link while the slot
     * is free (set below; alloc zeroes it). A segment's size is a
     * multiple of MAG, so a magazine never spans two segments. */
    sx__proc *first = NULL, *last = NULL;
    if (pos == NULL || *pos >= n_claim) {
        /* No reservation among them (every carve but start's): one
         * magazine of all n, in groups of GROUP slots, each linked even
         * offsets first, then odd ones (0 2 4 6 1 3 5 7 8 10 ...). Two
         * neighbours 2j and 2j+1 share a line (the one's last part, read
         * at its every step, the other's first, written at its every step
         * and send: docs/ARCHITECTURE.md, "Memory"), and processes spawned
         * one after another often run at once and together (a consumer and
         * its producers, a parent's children): in this order any four in a
         * row share no line. The group keeps both slots of a pair within 4
         * spawns of each other, so that a worker taking a batch of the
         * global queue (16 in spawn order) takes both and the two workers
         * do not run neighbours side by side, as they would with the whole
         * magazine's evens first (spawnidle 6-13 % slower; bench/FINDINGS.md).
         * off is a multiple of MAG, so offset parity is slot parity. */
        first = &seg[off];
        sx__proc *prev = NULL;
        for (uint32_t g = 0; g < n; g += GROUP)
            for (uint32_t odd = 0; odd < 2; odd++)
                for (uint32_t i = g + odd; i < n && i < g + GROUP; i += 2) {
                    first[i].index = base + i;
                    first[i].free_next = SX__FREE_NONE;
                    /* no next magazine */
                    atomic_init(&first[i].steps, SX__FREE_NONE);
                    if (prev != NULL)
                        prev->free_next = base + i;
                    prev = &first[i];
                }
    } else {
        for (uint32_t i = 0; i < n; i++) {
            sx__proc *p = &seg[off + i];
            p->index = base + i;
            if (*pos < n_claim && claim[*pos] == base + i) {
                ++*pos; /* claimed: in no free list */
                continue;
            }
            atomic_init(&p->steps, SX__FREE_NONE); /* no next magazine */
            p->free_next = SX__FREE_NONE;
            if (last != NULL)
                last->free_next = p->index;
            else
                first = p;
            last = p;
        }
    }
    if (first != NULL)
        mag_mark_ahead(e, first);
    /* release: pairs with the acquire load in sx__ptable_each, which then
     * sees these slots initialised. */
    atomic_store_explicit(&e->seg_carved[k], off + n, memory_order_release);
    /* relaxed: a hint for sx__ptable_prefault, which reads no slot by it. */
    atomic_store_explicit(&e->carved_end, base + n, memory_order_relaxed);
    if (first != NULL)
        mags_push(e, first, first);
    *next = base + n;
    return 0;
}

/* ---- Faulting pages in ahead ----
 *
 * A fresh page costs its first toucher a fault (1.6-18 us on the VMs the
 * benchmarks ran on, well under 1 on bare metal), and carving and spawning
 * touch the table's pages on the spawning thread. A worker with nothing to run
 * populates the next slots' pages beyond the carving frontier instead, PF_CHUNK
 * slots (6 pages) a call, up to PF_AHEAD slots ahead (384 KiB) or as far
 * ahead as the table has been carved, whichever is less. Only the slots:
 * a process touches its sx__pext and state cell only when it uses them
 * (docs/ARCHITECTURE.md, "Memory"), and populating those would add their
 * 72 bytes to every idle process. MADV_POPULATE_WRITE (Linux 5.14) maps
 * the pages writable without writing them: slots carved meanwhile are not
 * disturbed. Nothing past max_slots is populated or mapped (never
 * carved). A window that reaches into the next segment maps it first
 * (map_ahead; the carving that reaches it then finds it mapped). A
 * segment below SMALL_MAP is resident already. On an older kernel
 * madvise fails and nobody tries again. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define PF_AHEAD 4096u
#define PF_CHUNK 256u

/* Maps segment k, the one the carving takes next, ahead of the carving
 * (which then only counts it: carve_locked). true: mapped now or before;
 * false: grow_mu is busy (the carving holds it), k is not the next
 * segment, past the table's cap, or out of memory. Out of memory, k is
 * not mapped ahead again (pf_nomap): an idle worker would otherwise try
 * the failing mmap at every round of its spin for as long as the memory
 * stays short; the carving maps k itself when it gets there, or says
 * SX_ENOMEM. Its pages stay untouched until populated or carved. */
static bool map_ahead(sx_engine *e, uint32_t k)
{
    if (pthread_mutex_trylock(&e->grow_mu) != 0)
        return false;
    bool ok = false;
    size_t cap = e->cfg.max_slots;
    uint64_t base = (uint64_t)SX__SEG_BASE * ((1ull << k) - 1);
    /* relaxed (pf_nomap): written only under grow_mu, which we hold. */
    if (k == e->n_segs && (cap == 0 || base < cap) &&
        atomic_load_explicit(&e->pf_nomap, memory_order_relaxed) != k + 1) {
        /* relaxed: written only under grow_mu, which we hold. */
        ok = atomic_load_explicit(&e->segs[k], memory_order_relaxed) != NULL;
        if (!ok) {
            sx__proc *fresh = seg_map(e, k);
            /* release: as in carve_locked. */
            if (fresh != NULL)
                atomic_store_explicit(&e->segs[k], fresh, memory_order_release);
            else /* relaxed: a hint, read again under grow_mu above */
                atomic_store_explicit(&e->pf_nomap, k + 1,
                                      memory_order_relaxed);
            ok = fresh != NULL;
        }
    }
    pthread_mutex_unlock(&e->grow_mu);
    return ok;
}

/* Populates bytes [from, to) of a table array of total bytes at base. */
static int populate(void *base, size_t total, size_t from, size_t to)
{
    if (total < SMALL_MAP)
        return 0;
    uintptr_t a = ((uintptr_t)base + from) & ~(uintptr_t)4095;
    uintptr_t b = ((uintptr_t)base + to + 4095) & ~(uintptr_t)4095;
    return madvise((void *)a, b - a, MADV_POPULATE_WRITE);
}

bool sx__ptable_prefault(sx_engine *e)
{
    /* relaxed, all: hints. A stale frontier populates a little late or a
     * little early; the CAS keeps two workers off the same chunk. */
    if (atomic_load_explicit(&e->pf_off, memory_order_relaxed))
        return false;
    uint32_t end = atomic_load_explicit(&e->carved_end, memory_order_relaxed);
    uint32_t pf = atomic_load_explicit(&e->pf_next, memory_order_relaxed);
    uint32_t from = pf > end ? pf : end;
    /* As far ahead as the table has been carved, up to PF_AHEAD: a small
     * engine stays small. */
    uint32_t ahead = end < PF_AHEAD ? end : PF_AHEAD;
    if (from - end >= ahead || from >= UINT32_MAX - PF_CHUNK)
        return false;
    uint64_t off;
    uint32_t k = seg_of(from, &off);
    if (k >= SX__SEGS)
        return false;
    /* acquire: pairs with the release store in carve_locked (the segment
     * is mapped before it is published). */
    sx__proc *seg = atomic_load_explicit(&e->segs[k], memory_order_acquire);
    if (seg == NULL)
        /* The carving is near the end of its segment: map the next, unless
         * that failed for want of memory (relaxed: a hint; map_ahead looks
         * again under grow_mu). */
        return atomic_load_explicit(&e->pf_nomap, memory_order_relaxed) !=
                   k + 1 &&
               map_ahead(e, k);
    uint64_t len = (uint64_t)SX__SEG_BASE << k;
    uint64_t n = len - off < PF_CHUNK ? len - off : PF_CHUNK;
    /* Not past the table's cap: those slots are never carved. */
    size_t cap = e->cfg.max_slots;
    if (cap != 0 && from >= cap)
        return false;
    if (cap != 0 && cap - from < n)
        n = cap - from;
    if (!atomic_compare_exchange_strong_explicit(
            &e->pf_next, &pf, from + (uint32_t)n, memory_order_relaxed,
            memory_order_relaxed))
        return true; /* another worker took this chunk: look again */
    int rc = populate(seg, seg_bytes(k), off * sizeof(sx__proc),
                      (off + n) * sizeof(sx__proc));
    if (rc != 0)
        atomic_store_explicit(&e->pf_off, true, memory_order_relaxed);
    return rc == 0;
}

/* Puts MAG more slots into use when the stack is empty (carve_locked). */
static int grow(sx_engine *e)
{
    pthread_mutex_lock(&e->grow_mu);
    /* relaxed: a hint; another thread may have grown the table already. */
    if ((uint32_t)atomic_load_explicit(&e->free_head, memory_order_relaxed) !=
        SX__FREE_NONE) {
        pthread_mutex_unlock(&e->grow_mu);
        return 0;
    }
    uint32_t next;
    int rc = carve_locked(e, NULL, 0, NULL, &next);
    pthread_mutex_unlock(&e->grow_mu);
    return rc;
}

int sx__ptable_reserve(sx_engine *e, const uint32_t *idx, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 1; i < n; i++)
        if (idx[i] <= idx[i - 1])
            return SX_EINVAL;
    pthread_mutex_lock(&e->grow_mu);
    size_t pos = 0;
    uint32_t next = 0;
    int rc = 0;
    do {
        rc = carve_locked(e, idx, n, &pos, &next);
    } while (rc == 0 && next <= idx[n - 1]);
    pthread_mutex_unlock(&e->grow_mu);
    /* Slots carved before the first reservation were handed out already:
     * a reservation must come before any alloc. */
    if (rc == 0 && pos != n)
        rc = SX_ESTATE;
    return rc;
}

/* ---- Generations ----
 *
 * A process's generation is the slot's previous one plus 1, wrapping from
 * SX__GEN_PROC_MAX to 1 (0 is never a live generation: a fresh slot has
 * 0, and ptable_get refuses it). Retire adds 1 again, so the value a free
 * slot holds was never handed out, and a stale process PID misses until
 * its slot has been used 2^31 - 1 more times.
 *
 * A mailbox takes a generation with the top bit set and 31 random bits
 * (outside.c draws them from getrandom), and remembers the slot's process
 * generation (what the free slot held); closing it puts that value back.
 * So a mailbox's time on a slot does not move the slot's process count,
 * and the two ranges never meet: a stale process PID cannot reach a
 * mailbox, nor a stale mailbox PID a process. A stale mailbox PID reaches
 * a later mailbox on the same slot only if that one draws the same 31
 * bits: 1 in 2^31 for each later mailbox on that slot.
 *
 * Processes take their generations from one range, [gen_lo, gen_lo +
 * gen_span): 1 to SX__GEN_PROC_MAX for an engine without a state store.
 * An engine with one gives each run its own range of SX__GEN_RANGE
 * generations (engine/core/recover.c), recorded in the store before any
 * PID is handed out: the PIDs of an earlier run, which the store's jobs
 * and outcomes keep and clients hold, never name a process of a later
 * run, even though the host part stays (a slot is reused 2^23 times in
 * one run before a stale PID of that run can reach it again). A job
 * recovered from the store takes back its own slot and generation
 * (sx__ptable_reserve, sx__ptable_claim), so its PID stays; when its
 * slot is next taken, the generation returns to the run's range. */

static inline __attribute__((always_inline)) void
slot_init(sx__proc *p, uint32_t g, const sx_process_type *type,
          uint16_t method);

/* cache_take for a thread that is not a worker: the outside threads'
 * shared cache, under its spinlock. Inlined for each fetch (a constant). */
static inline __attribute__((always_inline)) sx__proc *ext_take(sx_engine *e,
                                                                int fetch)
{
    sx__spin_lock(&e->ext_slots_mu);
    sx__proc *p;
    while ((p = cache_take(e, &e->ext_slots, fetch)) == NULL) {
        /* Growing maps and initialises a segment (milliseconds for a big
         * one) and may wait for grow_mu: not under the spinlock. */
        sx__spin_unlock(&e->ext_slots_mu);
        int rc = grow(e);
        sx__spin_lock(&e->ext_slots_mu);
        if (rc != 0)
            break;
    }
    sx__spin_unlock(&e->ext_slots_mu);
    return p;
}

static inline __attribute__((always_inline)) sx__proc *
alloc_slot(sx_engine *e, const sx_process_type *type, uint16_t method,
           uint32_t mailbox_gen, uint32_t *proc_gen)
{
    sx__worker *w = sx__current_worker(e);
    sx__proc *p;
    if (w != NULL) {
        while ((p = cache_take(e, &w->slots, TAKE_PLAIN)) == NULL)
            if (grow(e) != 0)
                break;
    } else {
        p = type != NULL && type->state_size - 1u < SX__CELL
                ? ext_take(e, TAKE_CELLS)
                : ext_take(e, TAKE_SLOTS);
    }
    if (p == NULL)
        return NULL;
    /* relaxed: the slot is ours (refs == 0, off the free list); the release
     * store of refs below publishes everything. */
    uint32_t g = atomic_load_explicit(&p->gen, memory_order_relaxed);
    if (mailbox_gen != 0) {
        *proc_gen = g;
        g = mailbox_gen;
    } else if ((uint32_t)(++g - e->gen_lo) >= e->gen_span) {
        g = e->gen_lo; /* wraps within this run's range ("Generations") */
    }
    slot_init(p, g, type, method);
    return p;
}

/* Readies slot p (refs 0, ours) for a process of type (a mailbox: NULL)
 * with generation g. */
static inline __attribute__((always_inline)) void
slot_init(sx__proc *p, uint32_t g, const sx_process_type *type, uint16_t method)
{
    atomic_store_explicit(&p->gen, g, memory_order_relaxed);
    sx__mpsc_init(&p->mbox);
    sx__ctlstack_init(&p->ctl);
    atomic_store_explicit(&p->watchers, NULL, memory_order_relaxed);
    atomic_store_explicit(&p->steps, 0, memory_order_relaxed);
    atomic_store_explicit(&p->trap_exit, 0, memory_order_relaxed);
    atomic_store_explicit(&p->state, SX_PSTATE_READY, memory_order_relaxed);
    p->gq.next = NULL;
    p->type = type;
    p->method = method;
    p->user_state = NULL;
    p->wait_kind = 0;
    p->heap_state = 0;
    p->job = 0;
    p->sleeps = 0;
    p->io = 0;
    /* release: pairs with the acquire CAS in sx__proc_acquire; a thread
     * that takes a reference sees the initialised slot and its gen. */
    atomic_store_explicit(&p->refs, 1, memory_order_release);
}

sx__proc *sx__ptable_claim(sx_engine *e, uint32_t idx, uint32_t gen,
                           const sx_process_type *type, uint16_t method)
{
    if (gen == 0 || gen > SX__GEN_PROC_MAX)
        return NULL;
    sx__proc *p = slot_at(e, idx);
    /* relaxed: before start, on the one thread that reserved it. */
    if (p == NULL || p->index != idx ||
        atomic_load_explicit(&p->refs, memory_order_relaxed) != 0)
        return NULL;
    slot_init(p, gen, type, method);
    return p;
}

/* Out of line: inlined into sx__spawn it leaves cache_take out of line,
 * 8 more instructions per submit (callgrind, bench submit). */
__attribute__((noinline)) sx__proc *
sx__ptable_alloc(sx_engine *e, const sx_process_type *type, uint16_t method)
{
    return alloc_slot(e, type, method, 0, NULL);
}

sx__proc *sx__ptable_alloc_mailbox(sx_engine *e, uint32_t random,
                                   uint32_t *proc_gen)
{
    return alloc_slot(e, NULL, 0, random | ~SX__GEN_PROC_MAX, proc_gen);
}

bool sx__ptable_full(sx_engine *e)
{
    /* relaxed: see grow. */
    return atomic_load_explicit(&e->slots_full, memory_order_relaxed);
}

uint64_t sx__ptable_slots(sx_engine *e)
{
    uint64_t n = 0;
    for (unsigned k = 0; k < SX__SEGS; k++) {
        /* acquire: see slot_at (only a count is read here). */
        if (atomic_load_explicit(&e->segs[k], memory_order_acquire) == NULL)
            break;
        n += (uint64_t)SX__SEG_BASE << k;
    }
    return n;
}

/* One magazine from first (see sx__ptable_free_check). */
static int mag_check(sx_engine *e, uint32_t first, uint64_t *n_free, char *why,
                     size_t cap)
{
    uint32_t idx[MAG];
    uint32_t n = 0;
    for (uint32_t i = first; i != SX__FREE_NONE; n++) {
        sx__proc *p = slot_at(e, i);
        if (p == NULL || n == MAG) {
            snprintf(why, cap, "magazine at %u: slot %u %s", first, i,
                     p == NULL ? "outside the table" : "past MAG slots");
            return -1;
        }
        /* relaxed: nothing changes the slots meanwhile (see proc.h). */
        if (atomic_load_explicit(&p->refs, memory_order_relaxed) != 0) {
            snprintf(why, cap, "magazine at %u: slot %u is in use", first, i);
            return -1;
        }
        idx[n] = i;
        i = p->free_next;
    }
    for (uint32_t k = 0; k < n; k++) {
        uint32_t want = k + AHEAD < n ? idx[k + AHEAD] : SX__FREE_NONE;
        uint32_t got = slot_at(e, idx[k])->free_ahead;
        if (got != want) {
            snprintf(why, cap,
                     "magazine at %u (%u slots): slot %u, place %u, has "
                     "free_ahead %u, not %u",
                     first, n, idx[k], k, got, want);
            return -1;
        }
    }
    *n_free += n;
    return 0;
}

int sx__ptable_free_check(sx_engine *e, uint64_t *n_free, char *why, size_t cap)
{
    *n_free = 0;
    /* acquire: pairs with the release CAS in mags_push. */
    uint64_t h = atomic_load_explicit(&e->free_head, memory_order_acquire);
    uint64_t mags = 0;
    for (uint32_t m = (uint32_t)h; m != SX__FREE_NONE; mags++) {
        sx__proc *p = slot_at(e, m);
        if (p == NULL || mags > sx__ptable_slots(e)) {
            snprintf(why, cap, "free stack: magazine %u %s", m,
                     p == NULL ? "outside the table" : "in a cycle");
            return -1;
        }
        if (mag_check(e, m, n_free, why, cap) != 0)
            return -1;
        /* relaxed: the link (see mag_pop). */
        m = (uint32_t)atomic_load_explicit(&p->steps, memory_order_relaxed);
    }
    sx__spin_lock(&e->ext_slots_mu);
    int rc = mag_check(e, e->ext_slots.cur, n_free, why, cap);
    sx__spin_unlock(&e->ext_slots_mu);
    return rc;
}

sx__pext *sx__ptable_pext(sx_engine *e, const sx__proc *p)
{
    uint64_t off;
    uint32_t k = seg_of(p->index, &off);
    /* pext[k] was set before segment k was published (release), and p
     * came to us through the free stack, a cache or a look-up after that. */
    return &e->pext[k][off];
}

void *sx__ptable_cell(sx_engine *e, const sx__proc *p)
{
    uint64_t off;
    uint32_t k = seg_of(p->index, &off);
    /* As in sx__ptable_pext. */
    return e->cells[k][off].b;
}

sx_pid sx__proc_pid_raw(sx_engine *e, sx__proc *p)
{
    /* relaxed: gen is stable while the caller holds a reference. */
    uint32_t g = atomic_load_explicit(&p->gen, memory_order_relaxed);
    sx_pid pid = { e->cfg.node, e->cfg.host, ((uint64_t)g << 32) | p->index };
    return pid;
}

sx_pid sx__proc_pid(sx_engine *e, sx__proc *p)
{
    /* A job's PID stays across its restarts (supervise.c). */
    if (__builtin_expect(p->job, 0)) {
        /* relaxed: set by this thread's own submit, or published with the
         * process's queueing. */
        sx__job *j = atomic_load_explicit(&sx__ptable_pext(e, p)->job,
                                          memory_order_relaxed);
        sx_pid pid = { e->cfg.node, e->cfg.host, j->id };
        return pid;
    }
    return sx__proc_pid_raw(e, p);
}

void sx__ptable_regen(sx_engine *e, sx__proc *p)
{
    /* relaxed read: only the thread restarting it writes gen now. */
    uint32_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    if ((uint32_t)(g - e->gen_lo) >= e->gen_span)
        g = e->gen_lo;
    /* release: as in sx__ptable_retire; a look-up of the earlier
     * attempt's generation misses from here on. */
    atomic_store_explicit(&p->gen, g, memory_order_release);
}

/* Takes a reference on p unless it has none (a free slot): false then. */
static inline __attribute__((always_inline)) bool proc_ref(sx__proc *p)
{
    /* relaxed: the CAS re-reads it. */
    uint32_t r = atomic_load_explicit(&p->refs, memory_order_relaxed);
    do {
        if (r == 0)
            return false;
        /* acquire: pairs with the release store in alloc (and the release
         * in release): we see the slot's current incarnation. */
    } while (!atomic_compare_exchange_weak_explicit(
        &p->refs, &r, r + 1, memory_order_acquire, memory_order_relaxed));
    return true;
}

bool sx__proc_acquire(sx_engine *e, sx__proc *p, uint32_t gen)
{
    if (!proc_ref(p))
        return false;
    /* acquire: pairs with the release store of gen in retire. */
    if (atomic_load_explicit(&p->gen, memory_order_acquire) != gen) {
        sx__proc_release(e, p);
        return false;
    }
    return true;
}

/* A restarted job's PID: its generation is the slot's alias (see
 * supervise.c). The miss path of a look-up only: a stale PID, or a job's. */
static __attribute__((noinline)) sx__proc *alias_get(sx_engine *e, sx__proc *p,
                                                     uint32_t gen)
{
    sx__pext *x = sx__ptable_pext(e, p);
    /* acquire: pairs with the release store of the restart; the slot's
     * generation it moved on to is then seen below. */
    if (atomic_load_explicit(&x->alias_gen, memory_order_acquire) != gen)
        return NULL;
    /* acquire: as in sx__proc_acquire. */
    uint32_t now = atomic_load_explicit(&p->gen, memory_order_acquire);
    if (!sx__proc_acquire(e, p, now))
        return NULL;
    /* Still this job (its final finish clears the alias before the slot
     * can be used again; relaxed: under our reference, ordered by the
     * acquire CAS on refs). */
    if (atomic_load_explicit(&x->alias_gen, memory_order_relaxed) != gen) {
        sx__proc_release(e, p);
        return NULL;
    }
    return p;
}

/* The misses of a look-up of PID id (a stale PID, or a restarted job's:
 * alias_get), out of line so that its hit path saves no registers for
 * these calls: p had no reference to take (free_miss), or its generation
 * was not id's (gen_miss, which drops the reference it took). They take
 * the whole id, which the hit path leaves where it came, and not the
 * generation, which it would copy for them. */
static __attribute__((cold, noinline)) sx__proc *
free_miss(sx_engine *e, sx__proc *p, uint64_t id)
{
    uint32_t gen = (uint32_t)(id >> 32);
    return gen <= SX__GEN_PROC_MAX ? alias_get(e, p, gen) : NULL;
}

static __attribute__((cold, noinline)) sx__proc *
gen_miss(sx_engine *e, sx__proc *p, uint64_t id)
{
    sx__proc_release(e, p);
    return free_miss(e, p, id);
}

sx__proc *sx__ptable_get(sx_engine *e, sx_pid pid)
{
    if (pid.node != e->cfg.node || pid.host != e->cfg.host)
        return NULL;
    uint32_t gen = (uint32_t)(pid.id >> 32);
    if (gen == 0)
        return NULL;
    sx__proc *p = slot_at(e, (uint32_t)pid.id);
    if (p == NULL)
        return NULL;
    /* sx__proc_acquire, with its misses out of line. */
    if (__builtin_expect(!proc_ref(p), 0))
        return free_miss(e, p, pid.id);
    /* acquire: pairs with the release store of gen in retire. */
    if (__builtin_expect(
            atomic_load_explicit(&p->gen, memory_order_acquire) != gen, 0))
        return gen_miss(e, p, pid.id);
    return p;
}

bool sx__had_jobs(sx_engine *e)
{
    /* relaxed: see had_jobs (core.h). */
    return atomic_load_explicit(&e->had_jobs, memory_order_relaxed);
}

bool sx__is_job(sx_engine *e, sx__proc *p)
{
    /* acquire: pairs with the job's attach (release), as cancel's and
     * terminate's reads under a reference do; p->job itself is the
     * running worker's to read. */
    return atomic_load_explicit(&sx__ptable_pext(e, p)->job,
                                memory_order_acquire) != NULL;
}

void sx__prefs_flush(sx_engine *e, sx__prefs *c)
{
    for (unsigned k = 0; k < SX__PREFS; k++) {
        sx__proc *p = c->p[k];
        c->id[k] = 0;
        c->p[k] = NULL;
        if (p != NULL)
            sx__proc_release(e, p);
    }
}

void sx__ptable_retire(sx_engine *e, sx__proc *p)
{
    (void)e;
    /* relaxed read: only the finishing worker writes gen now. */
    uint32_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    if (g > SX__GEN_PROC_MAX)
        g = 1;
    /* release: pairs with the acquire load in sx__proc_acquire; every
     * look-up that starts after this misses. */
    atomic_store_explicit(&p->gen, g, memory_order_release);
}

void sx__ptable_retire_mailbox(sx_engine *e, sx__proc *p, uint32_t proc_gen)
{
    (void)e;
    /* release: as in sx__ptable_retire. proc_gen is what the free slot
     * held before the mailbox took it (see "Generations"). */
    atomic_store_explicit(&p->gen, proc_gen, memory_order_release);
}

static void slot_free(sx_engine *e, sx__proc *p)
{
    /* No producer holds a reference, so every push has completed. */
    sx__proc_drain(p);
    /* Only a calloc'd state is freed here; a mailbox's hook (no type, no
     * heap_state) is freed by its close (outside.c). */
    if (p->heap_state)
        free(p->user_state);
    p->user_state = NULL;
    if (__builtin_expect(p->job, 0)) {
        /* A job's record goes with its slot: cancel and terminate read it
         * under a reference (supervise.c). relaxed: nobody holds one. */
        sx__pext *x = sx__ptable_pext(e, p);
        sx__job_free(atomic_load_explicit(&x->job, memory_order_relaxed));
        atomic_store_explicit(&x->job, NULL, memory_order_relaxed);
        p->job = 0;
    }
    /* relaxed: the slot is unreachable (refs == 0); published by the
     * release CAS in mags_push (at once below, or when the worker hands
     * its magazine on). */
    atomic_store_explicit(&p->state, 0, memory_order_relaxed);
    sx__worker *w = sx__current_worker(e);
    if (w != NULL) {
        cache_put(e, &w->slots, p);
    } else {
        /* Published by the release CAS. */
        p->free_next = p->free_ahead = SX__FREE_NONE;
        mags_push(e, p, p);
    }
}

void sx__proc_release(sx_engine *e, sx__proc *p)
{
    /* acq_rel: release makes our writes visible to whoever frees the slot;
     * acquire (on the last drop) sees everyone else's. */
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1)
        slot_free(e, p);
}

static void each(sx_engine *e, void (*fn)(sx_engine *, sx__proc *, void *),
                 void *arg, bool mailboxes)
{
    for (unsigned k = 0; k < SX__SEGS; k++) {
        /* acquire: see slot_at. */
        sx__proc *seg = atomic_load_explicit(&e->segs[k], memory_order_acquire);
        if (seg == NULL)
            break;
        /* acquire: pairs with the release store in grow; past it the
         * slots were never used (and their memory not touched). */
        size_t n =
            atomic_load_explicit(&e->seg_carved[k], memory_order_acquire);
        for (size_t i = 0; i < n; i++) {
            sx__proc *p = &seg[i];
            /* acquire: as in sx__ptable_get. */
            uint32_t gen = atomic_load_explicit(&p->gen, memory_order_acquire);
            if (!sx__proc_acquire(e, p, gen))
                continue;
            /* acquire: pairs with the release transitions of the state. */
            uint32_t s = atomic_load_explicit(&p->state, memory_order_acquire);
            uint32_t st = s & SX__S_MASK;
            /* Processes only: not mailboxes (no type, state MAILBOX);
             * or mailboxes only. */
            if (mailboxes ? st == SX__PSTATE_MAILBOX
                          : st != 0 && st != SX_PSTATE_COMPLETE &&
                                st != SX__PSTATE_MAILBOX && p->type != NULL)
                fn(e, p, arg);
            sx__proc_release(e, p);
        }
    }
}

void sx__ptable_each(sx_engine *e, void (*fn)(sx_engine *, sx__proc *, void *),
                     void *arg)
{
    each(e, fn, arg, false);
}

void sx__ptable_each_mailbox(sx_engine *e,
                             void (*fn)(sx_engine *, sx__proc *, void *),
                             void *arg)
{
    each(e, fn, arg, true);
}

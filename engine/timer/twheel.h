/* engine/timer/twheel.h — a timer set: (deadline, value) pairs taken out in
 * deadline order once due (engine/timer/twheel.c).
 *
 * A hashed wheel of SX__TW_BUCKETS unsorted buckets, each SX__TW_WIDTH ns
 * wide, in front of two 4-ary min-heaps: `near` holds every entry due in
 * the wheel's current bucket or before, the buckets hold the next
 * SX__TW_BUCKETS - 1 widths (~268 ms), and `far` holds the rest. Adding to
 * a bucket is an append; when the clock enters a bucket's width its
 * entries move into `near`, which therefore stays small (one width's
 * worth), so taking the earliest is a sift through a heap that fits in
 * the cache. A single 4-ary heap would hold every sleep of the worker:
 * with 100,000 sleepers its sift_down is a chain of cache misses through
 * 1.6 MB on every firing (bench/FINDINGS.md, timers).
 *
 * Entries never come out early: take returns an entry only when now >= its
 * deadline, and always the earliest due ones first. Buckets are chains of
 * fixed-size chunks drawn from the set's own free list, which keeps every
 * chunk it ever had: like the heaps (which grow by doubling and never
 * shrink), the memory follows the peak number of entries, and steady
 * state allocates nothing.
 *
 * Threads: none of its own; the caller serialises all calls (sleep.c holds
 * the worker's lock).
 */
#ifndef SX_ENGINE_TWHEEL_H
#define SX_ENGINE_TWHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A bucket is 2^18 ns (~0.26 ms) wide: near holds about a bucket's worth
 * of entries, so the narrower the bucket the smaller the heap that every
 * firing sifts (timers: 0.0676 s, against 0.0701 with 2^19 ns and 512
 * buckets). */
#define SX__TW_SHIFT 18
#define SX__TW_BUCKETS 1024
#define SX__TW_CHUNK 31 /* entries per chunk: 16 + 31 * 32 ~ 1 KiB */

/* What an entry carries (for sleep.c, a sleep's addressee, so that no
 * event node waits with it). */
typedef struct {
    void *item;
    uint64_t tag;
    uint32_t gen;
    uint32_t aux;
} sx__twval;

typedef struct {
    uint64_t due; /* absolute, ns */
    sx__twval v;
} sx__twent;

typedef struct sx__twchunk {
    struct sx__twchunk *next;
    uint32_t n;
    sx__twent e[SX__TW_CHUNK];
} sx__twchunk;

/* Chunks are carved from slabs, each twice as many chunks as the last
 * (SX__TW_SLAB_MIN up to SX__TW_SLAB_MAX), all kept until fini. One
 * malloc per chunk would grow a worker's malloc arena a page at a time,
 * each page an mprotect call of its own (glibc grows a thread's heap only
 * by what the request needs): ~500 calls in a 100,000-sleeper run. */
#define SX__TW_SLAB_MIN 8
#define SX__TW_SLAB_MAX 256

typedef struct sx__twslab {
    struct sx__twslab *next;
    size_t n; /* chunks in c */
    sx__twchunk c[];
} sx__twslab;

typedef struct {
    sx__twchunk *head; /* appends go here; older chunks follow */
    uint64_t min;      /* earliest due in the bucket; UINT64_MAX if empty */
} sx__twbucket;

typedef struct {
    /* The wheel's current slot (a due's slot is due >> SX__TW_SHIFT):
     * `near` holds the entries whose slot is <= cur; bucket s % BUCKETS
     * the ones whose slot s is in (cur, cur + BUCKETS); `far` the rest. */
    uint64_t cur;
    sx__twent *near, *far; /* 4-ary min-heaps by due */
    size_t near_n, near_cap, far_n, far_cap;
    size_t n; /* all entries */
    sx__twbucket b[SX__TW_BUCKETS];
    uint64_t bits[SX__TW_BUCKETS / 64]; /* the non-empty buckets */
    sx__twchunk *spare;                 /* free chunks */
    sx__twslab *slabs;                  /* every slab, newest first */
    size_t fresh;                       /* slabs->c[fresh..] never used */
} sx__twheel;

/* An empty set whose clock starts at now. */
void sx__tw_init(sx__twheel *w, uint64_t now);
/* Frees the set's memory. */
void sx__tw_fini(sx__twheel *w);
/* Moves an empty set's clock up to now (nobody takes from an empty set,
 * so its clock goes stale, and entries added to it would all land in far
 * or in the wrong buckets); does nothing to a set with entries. */
void sx__tw_sync(sx__twheel *w, uint64_t now);
/* Makes room for extra entries beyond the set's present ones, so that
 * adding them (in near) needs no allocation; 0 or SX_ENOMEM. */
int sx__tw_reserve(sx__twheel *w, size_t extra);
/* Adds (due, *v); 0 or SX_ENOMEM (nothing added). */
int sx__tw_add(sx__twheel *w, uint64_t due, const sx__twval *v);
/* Takes out up to max entries due at now (due <= now), earliest first,
 * into out; returns how many. now must not go back between calls. */
size_t sx__tw_take(sx__twheel *w, uint64_t now, sx__twent *out, size_t max);
/* The earliest due, or UINT64_MAX when the set is empty. */
uint64_t sx__tw_earliest(const sx__twheel *w);
/* Keeps only the entries for which keep(v, arg) is true; the others are
 * taken out (keep sees each once: it is their last sight here). Returns
 * how many were taken out. */
size_t sx__tw_filter(sx__twheel *w, bool (*keep)(const sx__twval *v, void *arg),
                     void *arg);

#endif

/* engine/core/checkpoint.c — checkpointed jobs: a stored job whose type
 * has SX_TYPE_CHECKPOINTED is written to the state store after every step
 * that does not end it, and resumes from that checkpoint after a crash.
 * docs/DURABILITY.md, "Checkpointed types", says what this guarantees.
 *
 * After such a step the worker does not dispatch the step's output. It
 * copies it (the commands yielded, the messages sent) and the process's
 * state into a checkpoint record (sx__store_checkpoint) and leaves the
 * process RUNNING with no worker on it: producers that push events meanwhile
 * only set its wake-up flags (a RUNNING process is somebody's), so nothing
 * runs it until the store answers. The answer (ckpt_done, on the store's
 * answering thread) owns the process then: it delivers the messages and
 * dispatches the commands, in the order the step wrote them, and hands the
 * process back to the workers as a wake-up does (READY, queued). A
 * checkpoint that cannot be stored ends the process with SX_ESTORAGE
 * before anything of its step went out.
 *
 * What a checkpoint holds besides the state: the commands in flight (those
 * whose answers the process has not consumed yet, with the wall-clock
 * times of their sleeps and timeouts), which a resumed process gets
 * dispatched again; and, in the same transaction, the messages its step
 * sent to checkpointed jobs, stored in their inboxes (sx__store_msg), and
 * how far its own inbox was consumed. A stored message is delivered as a
 * large event node marked SX__WATCH_STORED with its seq in t0, so that the
 * step that consumes it can say so in its checkpoint. Stored messages of
 * a job reach its mailbox in seq order (store.h), so "consumed up to seq
 * N" is exact.
 *
 * It is one piece: the checkpoint's in-flight list is written (track,
 * pack_inflight) and read back (sx__ckpt_restore, sx__ckpt_rearm) here,
 * and both sides share its layout and the delivery of stored messages.
 *
 * Threads: sx__ckpt_consumed and sx__ckpt_park [the worker that ran the
 * step]; ckpt_done [the store's answering thread, owning the process];
 * restore and rearm [start's caller, before the process is queued];
 * sx__ckpt_send [any thread].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/core.h"
#include "engine/core/job.h"
#include "engine/io/io.h" /* sx__now_ns */
#include "engine/store/store.h"
#include "process/output.h"

/* A command in flight, as a checkpoint keeps it. */
typedef struct {
    uint32_t cmd;
    uint64_t tag;
    int64_t due_wall;     /* a sleep: when it fires (wall-clock ms); else 0 */
    int64_t timeout_wall; /* its yield timeout's end (wall-clock ms); 0: none */
    uint8_t *args;
    size_t len;
} ck_cmd;

typedef struct ck_pending ck_pending;

struct sx__ckpt {
    ck_cmd *fl; /* in flight */
    size_t n, cap;
    /* Seqs of the stored messages consumed since the last checkpoint. */
    uint64_t *eaten;
    size_t n_eaten, cap_eaten;
    /* A stored checkpoint's step output, for the worker that takes the
     * process back to send (sx__ckpt_resume); set by the store's answer
     * before its hand-back publishes the process. */
    ck_pending *pending;
    /* Resumed at a start: its commands in flight go out again when a
     * worker first takes it (sx__ckpt_resume). */
    bool rearm;
    int err; /* a checkpoint failed: the process ends with it */
    char err_msg[160];
};

/* One item of a step's output, in the order the step wrote it. */
typedef struct {
    bool send;
    bool stored; /* a send to a checkpointed job: in its inbox */
    uint32_t cmd;
    uint64_t tag, seq;
    int64_t timeout_ms;
    sx_pid to;
    size_t off, len;       /* command: args; send: the topic */
    size_t data_off, dlen; /* send: the data */
} ck_item;

struct ck_pending {
    sx_engine *e;
    sx__proc *p;
    uint64_t t0; /* when the step ended (ns): the checkpoint's latency */
    ck_item *items;
    size_t n, cap;
    uint8_t *bytes;
    size_t len, bcap;
    /* The stored sends, in item order; the store writes their seqs while
     * it queues the record (under its lock), before ckpt_done can run. */
    sx__store_msg *msgs;
    size_t n_msgs;
};

static int64_t wall_ms(void)
{
    return (int64_t)sx__mono_ms() + sx__wall_offset_ms();
}

static void pending_free(ck_pending *k);
static bool grow(void **p, size_t *cap, size_t need, size_t size);

void sx__ckpt_free(sx__ckpt *ck)
{
    if (ck == NULL)
        return;
    for (size_t i = 0; i < ck->n; i++)
        free(ck->fl[i].args);
    free(ck->fl);
    free(ck->eaten);
    if (ck->pending != NULL)
        pending_free(ck->pending);
    free(ck);
}

void sx__ckpt_reset(sx__ckpt *ck)
{
    if (ck == NULL)
        return;
    for (size_t i = 0; i < ck->n; i++)
        free(ck->fl[i].args);
    ck->n = 0;
    ck->n_eaten = 0;
    ck->rearm = false;
    ck->err = 0;
}

/* The job's checkpoint bookkeeping when p is a checkpointed job, else
 * NULL (*j set either way when p is a job). */
static sx__ckpt *ck_of(sx_engine *e, sx__proc *p, sx__job **jp)
{
    /* relaxed: the job was published to this thread with the process. */
    sx__job *j =
        atomic_load_explicit(&sx__ptable_pext(e, p)->job, memory_order_relaxed);
    *jp = j;
    if (j == NULL || !j->stored || e->store == NULL ||
        !(p->type->flags & SX_TYPE_CHECKPOINTED))
        return NULL;
    if (j->ck == NULL)
        j->ck = calloc(1, sizeof(*j->ck)); /* NULL: the caller says ENOMEM */
    return j->ck;
}

/* ---- the worker's side ----------------------------------------------------
 */

void sx__ckpt_consumed(sx_engine *e, sx__proc *p, sx__ev *const *nodes,
                       size_t n_nodes)
{
    sx__job *j;
    sx__ckpt *ck = ck_of(e, p, &j);
    if (ck == NULL)
        return;
    for (size_t i = 0; i < n_nodes; i++) {
        const sx__ev *ev = nodes[i];
        if (ev->watch == SX__WATCH_STORED &&
            grow((void **)&ck->eaten, &ck->cap_eaten, ck->n_eaten + 1,
                 sizeof(uint64_t)))
            /* Out of memory: its row stays, and a crash would deliver it
             * again; nothing is lost. */
            ck->eaten[ck->n_eaten++] = ev->t0;
        if (ev->kind != SX__EV_COMPLETION)
            continue;
        /* Its command is answered: no longer in flight (the first with
         * its tag: one answer per yield). */
        for (size_t k = 0; k < ck->n; k++)
            if (ck->fl[k].tag == ev->tag) {
                free(ck->fl[k].args);
                memmove(&ck->fl[k], &ck->fl[k + 1],
                        (ck->n - k - 1) * sizeof(ck_cmd));
                ck->n--;
                break;
            }
    }
}

static bool grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t c = *cap != 0 ? *cap : 8;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * size);
    if (q == NULL)
        return false;
    *p = q;
    *cap = c;
    return true;
}

/* Appends n bytes to the pending record's bytes; their offset, or
 * SIZE_MAX when out of memory. */
static size_t put_bytes(ck_pending *k, const void *b, size_t n)
{
    if (!grow((void **)&k->bytes, &k->bcap, k->len + n + 1, 1))
        return SIZE_MAX;
    size_t at = k->len;
    if (n > 0)
        memcpy(k->bytes + at, b, n);
    k->len += n;
    return at;
}

static bool add_send(ck_pending *k, sx_pid to, const char *topic, size_t tl,
                     sx_payload data)
{
    if (!grow((void **)&k->items, &k->cap, k->n + 1, sizeof(ck_item)))
        return false;
    ck_item *it = &k->items[k->n];
    memset(it, 0, sizeof(*it));
    it->send = true;
    it->to = to;
    it->off = put_bytes(k, topic, tl);
    it->len = tl;
    it->data_off = put_bytes(k, data.data, data.len);
    it->dlen = data.len;
    if (it->off == SIZE_MAX || it->data_off == SIZE_MAX)
        return false;
    k->n++;
    return true;
}

/* The step's output as items (its sends' messages read out of the nodes
 * sx_send built, which the output drops at its next reset). */
static bool take_output(ck_pending *k, const sx_step_output *out)
{
    for (size_t i = 0; i < out->n_yields; i++) {
        const sx__yield *y = &out->yields[i];
        if (y->cmd != SX__CMD_DIRECT_SEND) {
            if (!grow((void **)&k->items, &k->cap, k->n + 1, sizeof(ck_item)))
                return false;
            ck_item *it = &k->items[k->n];
            memset(it, 0, sizeof(*it));
            it->cmd = y->cmd;
            it->tag = y->tag;
            it->timeout_ms = y->timeout_ms;
            it->off = put_bytes(k, sx__output_bytes(out, y->off), y->len);
            it->len = y->len;
            if (it->off == SIZE_MAX)
                return false;
            k->n++;
            continue;
        }
        const sx__ev *ev = y->ev;
        if (ev == NULL) {
            /* Written into the arena: the PID, the topic's length, the
             * topic, the data. */
            const uint8_t *b = sx__output_bytes(out, y->off);
            sx_pid to;
            memcpy(&to, b, sizeof to);
            size_t tl = b[sizeof to];
            const char *topic = (const char *)b + sizeof to + 1;
            size_t dl = y->len - sizeof to - 1 - tl;
            if (!add_send(k, to, topic, tl,
                          (sx_payload){ (const uint8_t *)topic + tl, dl }))
                return false;
        } else if (ev->nmsg > 0) {
            size_t off = 0;
            for (unsigned m = 0; m < ev->nmsg; m++) {
                const char *topic;
                sx_payload data;
                sx__ev_bundle_next(ev, &off, &topic, &data);
                if (!add_send(k, y->to, topic, strlen(topic), data))
                    return false;
            }
        } else {
            const char *topic = sx__ev_topic(ev);
            if (!add_send(k, y->to, topic, ev->topic_len, sx__ev_data(ev)))
                return false;
        }
    }
    return true;
}

/* Whether `to` is a checkpointed job (its messages are stored). */
bool sx__ckpt_stored_target(sx_engine *e, sx_pid to)
{
    sx__proc *q = sx__ptable_get(e, to);
    if (q == NULL)
        return false;
    /* acquire: pairs with sx__job_attach's release (the job's fields).
     * Not q->job: that bit shares its byte with fields q's worker
     * writes. */
    sx__job *j =
        atomic_load_explicit(&sx__ptable_pext(e, q)->job, memory_order_acquire);
    bool yes =
        j != NULL && j->stored && (q->type->flags & SX_TYPE_CHECKPOINTED) != 0;
    sx__proc_release(e, q);
    return yes;
}

/* now + ms, ms clamped to [0, 2^40] (the clock commands' bound, about 35
 * years: a deadline past it is as good as none, and the sum cannot
 * overflow). */
static int64_t after(int64_t now, int64_t ms)
{
    const int64_t max = (int64_t)1 << 40;
    return now + (ms < 0 ? 0 : ms > max ? max : ms);
}

/* Adds the step's answered commands to what is in flight. */
static bool track(sx__ckpt *ck, const ck_pending *k)
{
    int64_t now = 0;
    uint64_t now_ns = 0;
    for (size_t i = 0; i < k->n; i++) {
        const ck_item *it = &k->items[i];
        if (it->send || it->tag == SX_TAG_NONE)
            continue; /* nobody waits for it: not run again */
        if (!grow((void **)&ck->fl, &ck->cap, ck->n + 1, sizeof(ck_cmd)))
            return false;
        if (now == 0) {
            now = wall_ms();
            now_ns = sx__now_ns();
        }
        ck_cmd *c = &ck->fl[ck->n];
        memset(c, 0, sizeof(*c));
        c->cmd = it->cmd;
        c->tag = it->tag;
        sx_payload a = { k->bytes + it->off, it->len };
        if (it->cmd == SX_CMD_SLEEP) {
            int64_t ms = 0;
            if (sx_payload_get_int(a, &ms) == 0)
                c->due_wall = after(now, ms);
        } else if (it->cmd == SX_CMD_SLEEP_UNTIL) {
            sx_unpack u;
            uint64_t at = 0;
            sx_unpack_init(&u, a);
            if (sx_unpack_uint(&u, &at) == 0)
                c->due_wall = after(
                    now, at > now_ns ? (int64_t)((at - now_ns) / 1000000u) : 0);
        }
        if (it->timeout_ms > 0)
            c->timeout_wall = after(now, it->timeout_ms);
        c->len = it->len;
        c->args = malloc(it->len + 1);
        if (c->args == NULL)
            return false;
        memcpy(c->args, a.data, it->len);
        ck->n++;
    }
    return true;
}

/* What is in flight, as the store keeps it: per command, little-endian,
 * cmd (4 bytes), tag, due_wall, timeout_wall (8 each), the arguments'
 * length (4) and the arguments. A plain layout of its own: msgpack here
 * would give the engine's step path's pack calls another caller, which
 * changes how LTO inlines them there (skynet: +60 instructions per
 * process in callgrind). */
#define FL_HEAD 32u

static void put_le(uint8_t *b, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *b, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

/* The in-flight list encoded into *buf (malloc'd; the caller's). */
static int encode_inflight(const sx__ckpt *ck, uint8_t **buf, size_t *len)
{
    size_t n = 0;
    for (size_t i = 0; i < ck->n; i++)
        n += FL_HEAD + ck->fl[i].len;
    uint8_t *b = malloc(n + 1);
    if (b == NULL)
        return SX_ENOMEM;
    size_t at = 0;
    for (size_t i = 0; i < ck->n; i++) {
        const ck_cmd *c = &ck->fl[i];
        put_le(b + at, c->cmd, 4);
        put_le(b + at + 4, c->tag, 8);
        put_le(b + at + 12, (uint64_t)c->due_wall, 8);
        put_le(b + at + 20, (uint64_t)c->timeout_wall, 8);
        put_le(b + at + 28, c->len, 4);
        if (c->len > 0)
            memcpy(b + at + FL_HEAD, c->args, c->len);
        at += FL_HEAD + c->len;
    }
    *buf = b;
    *len = n;
    return 0;
}

/* Marks k's sends to checkpointed jobs stored and lists them in k->msgs
 * (from p), for the store to write and give seqs. false when out of
 * memory. */
static bool stored_msgs(sx_engine *e, sx__proc *p, ck_pending *k)
{
    size_t n_msgs = 0;
    for (size_t i = 0; i < k->n; i++) {
        ck_item *it = &k->items[i];
        if (it->send && (it->stored = sx__ckpt_stored_target(e, it->to)))
            n_msgs++;
    }
    if (n_msgs > 0 && (k->msgs = calloc(n_msgs, sizeof(*k->msgs))) == NULL)
        return false;
    k->n_msgs = n_msgs;
    sx_pid self = sx__proc_pid(e, p);
    for (size_t i = 0, m = 0; i < k->n; i++) {
        const ck_item *it = &k->items[i];
        if (it->stored)
            k->msgs[m++] = (sx__store_msg){
                .to = it->to.id,
                .from = self,
                .topic = (const char *)k->bytes + it->off,
                .topic_len = it->len,
                .data = { k->bytes + it->data_off, it->dlen },
            };
    }
    return true;
}

static void pending_free(ck_pending *k)
{
    free(k->msgs);
    free(k->items);
    free(k->bytes);
    free(k);
}

static void ckpt_done(void *user, int rc, uint64_t id);

int sx__ckpt_park(sx_engine *e, sx__proc *p, const sx_step_output *out,
                  uint8_t want)
{
    sx__job *j;
    sx__ckpt *ck = ck_of(e, p, &j);
    if (ck == NULL)
        return j != NULL && j->stored && e->store != NULL &&
                       (p->type->flags & SX_TYPE_CHECKPOINTED)
                   ? SX_ENOMEM
                   : 0;
    ck_pending *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return SX_ENOMEM;
    k->e = e;
    k->p = p;
    k->t0 = sx__now_ns();
    uint8_t *fl = NULL;
    size_t fl_len = 0;
    int rc = SX_ENOMEM;
    if (!take_output(k, out) || !track(ck, k) ||
        encode_inflight(ck, &fl, &fl_len) != 0 || !stored_msgs(e, p, k))
        goto fail;
    p->wait_kind = want;
    /* The record copies the consumed seqs; forgotten here before it is
     * queued, since from then on another worker may run p. */
    size_t n_eaten = ck->n_eaten;
    ck->n_eaten = 0;
    sx__store_ckpt c = {
        .id = j->id,
        /* relaxed: this worker wrote it, during this step. */
        .steps = atomic_load_explicit(&p->steps, memory_order_relaxed),
        .want = want,
        .state = { p->user_state, p->type->state_size },
        .inflight = { fl, fl_len },
        .consumed = ck->eaten,
        .n_consumed = n_eaten,
        .msgs = k->msgs,
        .n_msgs = k->n_msgs,
    };
    /* From here on the process is the store's answer's (ckpt_done): this
     * worker touches it no more. */
    rc = sx__store_checkpoint(e->store, &c, ckpt_done, k);
    if (rc != 0)
        goto fail;
    free(fl);
    return 1;
fail:
    free(fl);
    pending_free(k);
    return rc == SX_ESTATE ? SX_ESTOPPING : rc;
}

/* ---- the store's answer ---------------------------------------------------
 */

/* A message from `from`, stored (seq) or not (0), delivered to `to`.
 * Returns sx__send_note's code. */
static int deliver_msg(sx_engine *e, sx_pid from, sx_pid to, const char *topic,
                       size_t tl, sx_payload data, uint64_t seq)
{
    /* A stored message takes a large node: its seq goes in t0, which only
     * a large node has apart from its bytes (proc.h). */
    sx__ev *ev =
        seq != 0 ? sx__ev_alloc() : sx__ev_alloc_sized(tl + 1 + data.len);
    if (ev == NULL)
        return SX_ENOMEM;
    ev->kind = SX__EV_MESSAGE;
    if (sx__ev_set(ev, topic, tl, data, NULL) != 0) {
        sx__ev_free(ev);
        return SX_ENOMEM;
    }
    ev->from = from;
    if (seq != 0) {
        ev->watch = SX__WATCH_STORED;
        ev->t0 = seq;
    }
    return sx__send_note(e, to, ev);
}

/* One command, dispatched as a step's yield would be. */
static int dispatch_one(sx_engine *e, sx__proc *p, uint32_t cmd, uint64_t tag,
                        const uint8_t *args, size_t len, int64_t timeout_ms,
                        bool resumed)
{
    sx__yield y = {
        .cmd = cmd, .tag = tag, .off = 0, .len = len, .timeout_ms = timeout_ms
    };
    sx_step_output out;
    memset(&out, 0, sizeof out);
    out.yields = &y;
    out.n_yields = 1;
    out.cap_yields = 1;
    out.arena = (uint8_t *)args;
    out.arena_len = len;
    out.resumed = resumed;
    return sx__dispatch_job(e, p, &out);
}

/* Hands p (RUNNING, no worker on it, ours) back to the workers, as a
 * wake-up does: READY and queued, with SX__F_CKPT (its step's output is
 * to go: sx__ckpt_resume) or, with fail, SX__F_TERM (it ends:
 * sx__ckpt_failed). */
static void hand_back(sx_engine *e, sx__proc *p, bool fail)
{
    /* relaxed: the CAS below checks it. */
    uint32_t s = atomic_load_explicit(&p->state, memory_order_relaxed);
    for (;;) {
        uint32_t to = SX_PSTATE_READY | (s & SX__F_TERM) |
                      (fail ? SX__F_TERM : SX__F_CKPT);
        /* release: the worker whose CAS READY -> RUNNING acquires the
         * process gets it with what this thread wrote (the pending output,
         * an error). The flags producers set meanwhile go: their events
         * are in the mailbox, which that worker looks at. Failure
         * (relaxed): a producer flipped a flag; try again. */
        if (atomic_compare_exchange_weak_explicit(
                &p->state, &s, to, memory_order_release, memory_order_relaxed))
            break;
    }
    sx__enqueue(e, p);
}

/* [the store's answering thread] The checkpoint is stored (rc 0) or not.
 * No user code runs here: the step's output goes out on the worker that
 * takes the process back. */
static void ckpt_done(void *user, int rc, uint64_t id)
{
    (void)id;
    ck_pending *k = user;
    sx_engine *e = k->e;
    sx__proc *p = k->p;
    sx__job *j;
    sx__ckpt *ck = ck_of(e, p, &j);
    /* relaxed: figures. */
    atomic_fetch_add_explicit(&e->checkpoints, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->checkpoint_ns, sx__now_ns() - k->t0,
                              memory_order_relaxed);
    if (rc != 0) {
        /* Nothing of the step went out and nothing of it is stored. */
        ck->err = SX_ESTORAGE;
        snprintf(ck->err_msg, sizeof ck->err_msg, "checkpoint: %s",
                 sx__storage_msg(rc));
        pending_free(k);
        hand_back(e, p, true);
        return;
    }
    ck->pending = k;
    hand_back(e, p, false);
}

/* Sends k's items from `from`, in the order the step wrote them: its
 * messages (stored: those to checkpointed jobs with their seqs) and, with
 * p (the worker's process), its commands; without p (a last step) they
 * are dropped. A command that cannot be dispatched (out of memory) does
 * not stop the messages after it; SX_ENOMEM then (p ends so). */
static int send_items(sx_engine *e, sx__proc *p, sx_pid from, ck_pending *k,
                      bool stored)
{
    int rc = 0;
    uint64_t lost = 0;
    for (size_t i = 0, m = 0; i < k->n; i++) {
        const ck_item *it = &k->items[i];
        if (it->send) {
            uint64_t seq = it->stored ? k->msgs[m++].seq : 0;
            lost +=
                deliver_msg(
                    e, from, it->to, (const char *)k->bytes + it->off, it->len,
                    (sx_payload){ it->dlen > 0 ? k->bytes + it->data_off : NULL,
                                  it->dlen },
                    stored ? seq : 0) != 0;
            continue;
        }
        if (p != NULL && rc == 0 &&
            dispatch_one(e, p, it->cmd, it->tag, k->bytes + it->off, it->len,
                         it->timeout_ms, false) != 0)
            rc = SX_ENOMEM;
    }
    if (lost > 0)
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&e->dead_letters, lost, memory_order_relaxed);
    return rc;
}

static int rearm(sx_engine *e, sx__proc *p, sx__ckpt *ck);

int sx__ckpt_resume(sx_engine *e, sx__proc *p)
{
    sx__job *j;
    sx__ckpt *ck = ck_of(e, p, &j);
    if (ck == NULL)
        return 0;
    int rc = 0;
    if (ck->pending != NULL) {
        ck_pending *k = ck->pending;
        ck->pending = NULL;
        rc = send_items(e, p, sx__proc_pid(e, p), k, true);
        pending_free(k);
    }
    if (ck->rearm) {
        ck->rearm = false;
        if (rc == 0)
            rc = rearm(e, p, ck);
    }
    return rc;
}

bool sx__ckpt_failed(sx_engine *e, sx__proc *p, int *err, const char **msg)
{
    /* relaxed: as in ck_of. */
    sx__job *j =
        atomic_load_explicit(&sx__ptable_pext(e, p)->job, memory_order_relaxed);
    if (j == NULL || j->ck == NULL || j->ck->err == 0)
        return false;
    *err = j->ck->err;
    *msg = j->ck->err_msg;
    return true;
}

/* ---- recovery -------------------------------------------------------------
 */

int sx__ckpt_restore(sx_engine *e, sx__proc *p, uint64_t steps, int want,
                     sx_payload state, sx_payload inflight, char *msg,
                     size_t cap)
{
    sx__job *j;
    sx__ckpt *ck = ck_of(e, p, &j);
    if (ck == NULL) {
        snprintf(msg, cap, "not resumed: out of memory");
        return SX_ENOMEM;
    }
    if (want != SX_PSTATE_READY && want != SX_PSTATE_BLOCKED &&
        want != SX_PSTATE_IDLE) {
        snprintf(msg, cap,
                 "not resumed: its checkpoint's wait kind %d is "
                 "not one",
                 want);
        return SX_ECORRUPT;
    }
    if (state.len != p->type->state_size) {
        snprintf(msg, cap,
                 "not resumed: its checkpoint holds %zu bytes of state, its "
                 "type \"%.64s\" has %zu",
                 state.len, p->type->name, p->type->state_size);
        return SX_ECORRUPT;
    }
    if (state.len > 0)
        memcpy(p->user_state, state.data, state.len);
    const uint8_t *b = inflight.data;
    size_t at = 0;
    while (at < inflight.len) {
        if (inflight.len - at < FL_HEAD)
            goto bad;
        uint64_t cmd = get_le(b + at, 4), al = get_le(b + at + 28, 4);
        if (cmd > UINT16_MAX || al > inflight.len - at - FL_HEAD)
            goto bad;
        if (!grow((void **)&ck->fl, &ck->cap, ck->n + 1, sizeof(ck_cmd)))
            goto nomem;
        ck_cmd *c = &ck->fl[ck->n];
        *c = (ck_cmd){ (uint32_t)cmd,
                       get_le(b + at + 4, 8),
                       (int64_t)get_le(b + at + 12, 8),
                       (int64_t)get_le(b + at + 20, 8),
                       malloc(al + 1),
                       (size_t)al };
        if (c->args == NULL)
            goto nomem;
        if (al > 0)
            memcpy(c->args, b + at + FL_HEAD, al);
        ck->n++;
        at += FL_HEAD + al;
    }
    /* relaxed: nothing runs p yet; its queueing publishes it. */
    atomic_store_explicit(&p->steps, steps, memory_order_relaxed);
    p->wait_kind = (uint8_t)want;
    return 0;
bad:
    sx__ckpt_reset(ck);
    snprintf(msg, cap,
             "not resumed: its checkpoint's commands in flight "
             "cannot be read");
    return SX_ECORRUPT;
nomem:
    sx__ckpt_reset(ck);
    snprintf(msg, cap, "not resumed: out of memory");
    return SX_ENOMEM;
}

/* The commands a resumed job's checkpoint had in flight, dispatched
 * again (sleeps due when they were). */
static int rearm(sx_engine *e, sx__proc *p, sx__ckpt *ck)
{
    int64_t now = wall_ms();
    for (size_t i = 0; i < ck->n; i++) {
        const ck_cmd *c = &ck->fl[i];
        uint8_t buf[SX_PAYLOAD_INT_MAX];
        sx_payload a = { c->args, c->len };
        uint32_t cmd = c->cmd;
        if (cmd == SX_CMD_SLEEP || cmd == SX_CMD_SLEEP_UNTIL) {
            /* Due when it was: at once if that passed while the engine
             * was down. */
            cmd = SX_CMD_SLEEP;
            a = sx_payload_int(buf, c->due_wall > now ? c->due_wall - now : 0);
        }
        int64_t tmo = 0;
        if (c->timeout_wall != 0)
            tmo = c->timeout_wall > now ? c->timeout_wall - now : 1;
        if (dispatch_one(e, p, cmd, c->tag, a.len > 0 ? a.data : NULL, a.len,
                         tmo, true) != 0)
            return SX_ENOMEM;
    }
    return 0;
}

void sx__ckpt_rearm(sx_engine *e, sx__proc *p)
{
    sx__job *j;
    /* relaxed (steps): nothing runs p yet. 0: not resumed (init ran). */
    if (!p->job || atomic_load_explicit(&p->steps, memory_order_relaxed) == 0)
        return;
    sx__ckpt *ck = ck_of(e, p, &j);
    if (ck == NULL)
        return;
    ck->rearm = true;
    /* relaxed: nothing runs p yet; its queueing publishes it. The first
     * worker to take it sees SX__F_CKPT and calls sx__ckpt_resume. */
    atomic_fetch_or_explicit(&p->state, SX__F_CKPT, memory_order_relaxed);
}

int sx__ckpt_deliver_stored(sx_engine *e, const sx__store_msg *m)
{
    sx_pid to = { e->cfg.node, e->cfg.host, m->to };
    return deliver_msg(e, m->from, to, m->topic, m->topic_len, m->data, m->seq);
}

/* ---- messages from outside ------------------------------------------------
 */

typedef struct {
    sx_engine *e;
    sx__store_msg m; /* its bytes after the struct */
    void (*fn)(void *user, int rc);
    void *user;
} out_send;

static void out_send_done(void *user, int rc, uint64_t id)
{
    (void)id;
    out_send *o = user;
    if (rc == 0)
        rc = sx__ckpt_deliver_stored(o->e, &o->m);
    else
        rc = SX_ESTORAGE;
    o->fn(o->user, rc);
    free(o);
}

int sx__ckpt_send(sx_engine *e, sx_pid from, sx_pid to, const char *topic,
                  sx_payload data, void (*fn)(void *user, int rc), void *user)
{
    if (e->store == NULL || to.node != e->cfg.node || to.host != e->cfg.host ||
        !sx__ckpt_stored_target(e, to))
        return 0;
    size_t tl = strlen(topic);
    out_send *o = malloc(sizeof(*o) + tl + data.len + 1);
    if (o == NULL)
        return SX_ENOMEM;
    char *b = (char *)(o + 1);
    memcpy(b, topic, tl);
    if (data.len > 0)
        memcpy(b + tl, data.data, data.len);
    o->e = e;
    o->fn = fn;
    o->user = user;
    o->m = (sx__store_msg){ .to = to.id,
                            .from = from,
                            .topic = b,
                            .topic_len = tl,
                            .data = { data.len > 0 ? (uint8_t *)b + tl : NULL,
                                      data.len } };
    int rc = sx__store_message(e->store, &o->m, out_send_done, o);
    if (rc != 0) {
        free(o);
        return rc == SX_ESTATE ? SX_ESTOPPING : rc;
    }
    return 1;
}

/* ---- a checkpointed job's last step ----------------------------------------
 *
 * The messages of the step that ends a checkpointed job go with its
 * outcome: those to checkpointed jobs are stored in the finish's
 * transaction (sx__store_finish_msgs), and all of them are delivered
 * once it is committed, before the outcome is visible (durable.c,
 * finish_done). Sent at once instead, a message could outlive a crash
 * that the sender's outcome does not (the sender's last step runs again:
 * twice), or be lost with the receiver's mailbox. */

bool sx__ckpt_final(sx_engine *e, sx__proc *p, const sx_step_output *out)
{
    sx__job *j;
    sx__ckpt *ck = ck_of(e, p, &j);
    if (ck == NULL)
        return false;
    ck_pending *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return false;
    k->e = e;
    k->p = p;
    if (!take_output(k, out) || !stored_msgs(e, p, k))
        goto fail;
    if (ck->pending != NULL)
        pending_free(ck->pending);
    ck->pending = k; /* the finish takes it (sx__ckpt_final_take) */
    return true;
fail:
    pending_free(k);
    return false; /* out of memory: the messages go at once */
}

sx__ckpt_sends *sx__ckpt_final_take(sx_engine *e, sx__proc *p,
                                    sx__store_msg **msgs, size_t *n_msgs)
{
    /* relaxed: the finishing worker's own job. */
    sx__job *j =
        atomic_load_explicit(&sx__ptable_pext(e, p)->job, memory_order_relaxed);
    *msgs = NULL;
    *n_msgs = 0;
    if (j == NULL || j->ck == NULL || j->ck->pending == NULL)
        return NULL;
    ck_pending *k = j->ck->pending;
    j->ck->pending = NULL;
    *msgs = k->msgs;
    *n_msgs = k->n_msgs;
    return (sx__ckpt_sends *)k;
}

void sx__ckpt_final_send(sx_engine *e, sx_pid from, sx__ckpt_sends *sends,
                         bool stored)
{
    ck_pending *k = (ck_pending *)sends;
    if (k == NULL)
        return;
    send_items(e, NULL, from, k, stored);
    pending_free(k);
}

void sx__ckpt_final_drop(sx__ckpt_sends *sends)
{
    if (sends != NULL)
        pending_free((ck_pending *)sends);
}

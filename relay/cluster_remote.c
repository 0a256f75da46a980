/* relay/cluster_remote.c — what crosses nodes (docs/CLUSTER.md): the
 * engine's remote route (sx__cluster_ops) and the handler of our node's
 * subject, stepx.<cluster>.n.<node>.msg (sx__cluster_on_node).
 *
 * Every frame on a node subject is a msgpack map with the cluster's name
 * ("c") and a kind ("k"):
 *
 *   m  messages   {f: from, t: to, m: [topic, data, topic, data, ...]}
 *                 one sender's messages for one process, in send order
 *   w  watch      {i: id, r: our node, ri: our incarnation, t: target}
 *                 answer once with an outcome, when target finishes
 *   o  outcome    {i, ri, t, e: code, x: message, v: value, s: steps,
 *                  a: attempts}                  the answer to a watch
 *   n  cancel     {t, d: the reason (a string)}
 *   x  terminate  {t}
 *   l  link       {t: a process of the receiver, f: its partner here}
 *   s  submit     {i, r, ri, y: type, me: method, in: [input...],
 *                  dl: deadline_ms, w: watch it too}
 *   a  answer     {i, ri, n: the node, e: code, x: message, p: pid,
 *                  ex: existing}                 the answer to a submit
 *   q  ps         {i, r, ri, lim}
 *   r  listing    {i, ri, n, ps: [[pid, type, method, state, steps,
 *                  attempts, restart_in_ms, last_error], ...]}
 *
 * One publisher, one subject per destination node: what one thread sends
 * to one node arrives in the order sent (NATS keeps a publisher's order
 * on a subject). A frame that is not one of these, names another cluster
 * or addresses a process of another node is dropped and counted
 * (bad_messages).
 *
 * Watches of processes of other nodes wait in a table by id (under mu)
 * for their outcome frame. A node declared down, a lost NATS connection
 * or a stop takes its waiting watches out (sx__cluster_lose, under mu),
 * and sx__cluster_fire answers them SX_ENOCONNECTION once mu is let go:
 * firing runs user-visible effects (a monitor's @exit, a link's
 * termination, a relay wait's answer) that may come back into the route.
 *
 * It is one piece: the frame kinds pair up (a watch and its outcome, a submit
 * and its answer) around one table and one codec, and each side of a pair
 * reads as the other's inverse when the two sit together.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/cluster.h"

/* ---- frames ------------------------------------------------------------- */

static void bad(sx_cluster *c)
{
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->bad_messages, 1, memory_order_relaxed);
}

/* Whether the NATS connection is up. The flag follows nats.c's
 * disconnect and reconnect callbacks, which run on a thread of their own
 * and can come after the first messages of a new connection: when it
 * says down, the connection itself is asked. */
static bool nats_up(sx_cluster *c)
{
    /* relaxed: a hint, checked against the connection when it says no. */
    return atomic_load_explicit(&c->connected, memory_order_relaxed) ||
           natsConnection_Status(c->nc) == NATS_CONN_STATUS_CONNECTED;
}

/* Whether node is a member now (not us), NATS is connected and we have
 * not left (a route called after sx_cluster_stop answers noconnection);
 * counts n messages for it on its link when it is. */
static bool reachable_n(sx_cluster *c, uint32_t node, size_t n)
{
    pthread_mutex_lock(&c->mu);
    sx__member *x = sx__cluster_find(c, node);
    bool up = !c->stopping && x != NULL && !x->m.self;
    if (up)
        x->m.messages_out += n;
    pthread_mutex_unlock(&c->mu);
    /* A publish racing a disconnect is buffered by nats.c (its reconnect
     * buffer) and sent after the reconnect. */
    return up && nats_up(c);
}

static bool reachable(sx_cluster *c, uint32_t node)
{
    return reachable_n(c, node, 0);
}

/* The largest frame the NATS server takes (its max_payload, 1 MiB by
 * default), as it said when we connected. */
static size_t max_payload(sx_cluster *c)
{
    int64_t m = natsConnection_GetMaxPayload(c->nc);
    return m > 0 ? (size_t)m : 1024 * 1024;
}

/* Publishes pk (a frame) to node's subject: 0, SX_ETOOLARGE (over the
 * server's max_payload) or SX_ENOCONNECTION. */
static int publish_to(sx_cluster *c, uint32_t node, const sx_pack *pk)
{
    if (pk->err != 0)
        return pk->err;
    if (pk->len > max_payload(c))
        return SX_ETOOLARGE;
    char subject[112];
    snprintf(subject, sizeof subject, "stepx.%s.n.%u.msg", c->name, node);
    natsStatus st =
        natsConnection_Publish(c->nc, subject, pk->data, (int)pk->len);
    return st == NATS_OK            ? 0
           : st == NATS_MAX_PAYLOAD ? SX_ETOOLARGE
                                    : SX_ENOCONNECTION;
}

/* A frame's map header for n fields besides the cluster and the kind,
 * and those two. */
static void frame_head(sx_pack *pk, const sx_cluster *c, uint32_t n,
                       const char *kind)
{
    sx_pack_map(pk, n + 2);
    sx_pack_str(pk, "c");
    sx_pack_str(pk, c->name);
    sx_pack_str(pk, "k");
    sx_pack_str(pk, kind);
}

static int get_u64(sx_payload p, const char *key, uint64_t *out)
{
    sx_payload v;
    sx_unpack u;
    if (sx_get(p, key, &v) != 0)
        return SX_EPROTO;
    sx_unpack_init(&u, v);
    return sx_unpack_uint(&u, out) == 0 ? 0 : SX_EPROTO;
}

static int get_pid(sx_payload p, const char *key, sx_pid *out)
{
    sx_payload v;
    sx_unpack u;
    if (sx_get(p, key, &v) != 0)
        return SX_EPROTO;
    sx_unpack_init(&u, v);
    return sx_unpack_pid(&u, out) == 0 ? 0 : SX_EPROTO;
}

/* The string at key into buf with a NUL, cut to fit at a character's
 * start (a message longer than buf keeps its beginning); "" when absent. */
static void get_text(sx_payload p, const char *key, char *buf, size_t cap)
{
    sx_str t = sx_get_str(p, key);
    size_t n = t.ptr != NULL ? t.len : 0;
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((uint8_t)t.ptr[n] & 0xC0) == 0x80)
            n--; /* not inside a UTF-8 sequence */
    }
    if (n > 0)
        memcpy(buf, t.ptr, n);
    buf[n] = '\0';
    char *nul = memchr(buf, '\0', n);
    if (nul != NULL)
        *nul = '\0'; /* a NUL inside ends it */
}

/* ---- the remote route (engine threads) ---------------------------------- */

/* One frame of n messages to node; a frame over the server's
 * max_payload goes as two halves (a single message that big:
 * SX_ETOOLARGE, as nothing can carry it). */
static int send_frame(sx_cluster *c, uint32_t node, const sx_message *msgs,
                      size_t n)
{
    uint8_t buf[2048];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    for (int pass = 0; pass < 2; pass++) {
        frame_head(&pk, c, 3, "m");
        sx_pack_str(&pk, "f");
        sx_pack_pid(&pk, msgs[0].from);
        sx_pack_str(&pk, "t");
        sx_pack_pid(&pk, msgs[0].to);
        sx_pack_str(&pk, "m");
        sx_pack_array(&pk, (uint32_t)(2 * n));
        for (size_t i = 0; i < n; i++) {
            sx_pack_str(&pk, msgs[i].topic);
            sx_pack_raw(&pk, msgs[i].data);
        }
        if (pk.err == 0 || pass == 1)
            break;
        sx_pack_init(&pk); /* too big for the stack: the heap */
    }
    if (pk.err == 0 && n > 1 && pk.len > max_payload(c)) {
        sx_pack_fini(&pk);
        int rc = send_frame(c, node, msgs, n / 2);
        int rc2 = send_frame(c, node, msgs + n / 2, n - n / 2);
        return rc != 0 ? rc : rc2;
    }
    int rc = publish_to(c, node, &pk);
    sx_pack_fini(&pk);
    if (rc == 0) {
        /* relaxed: figures. */
        atomic_fetch_add_explicit(&c->msgs_out, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->batches_out, 1, memory_order_relaxed);
    }
    return rc;
}

static int r_send(void *user, const sx_message *msgs, size_t n)
{
    sx_cluster *c = user;
    uint32_t node = msgs[0].to.node;
    if (!reachable_n(c, node, n))
        return SX_ENOCONNECTION;
    return send_frame(c, node, msgs, n);
}

static size_t bucket(const sx_cluster *c, uint64_t id)
{
    return (size_t)(id * 0x9e3779b97f4a7c15ull >> 20) & (c->rw_nb - 1);
}

/* [mu] Adds x; false when out of memory. */
static bool rw_put(sx_cluster *c, sx__rwatch *x)
{
    if (c->rw_count + 1 > 2 * c->rw_nb) {
        size_t nb = c->rw_nb == 0 ? 256 : 2 * c->rw_nb;
        sx__rwatch **b = calloc(nb, sizeof *b);
        if (b == NULL && c->rw_nb == 0)
            return false;
        if (b != NULL) {
            sx__rwatch **old = c->rw_buckets;
            size_t onb = c->rw_nb;
            c->rw_buckets = b;
            c->rw_nb = nb;
            for (size_t i = 0; i < onb; i++)
                for (sx__rwatch *y = old[i], *next; y != NULL; y = next) {
                    next = y->next;
                    size_t k = bucket(c, y->id);
                    y->next = b[k];
                    b[k] = y;
                }
            free(old);
        }
    }
    size_t k = bucket(c, x->id);
    x->next = c->rw_buckets[k];
    c->rw_buckets[k] = x;
    c->rw_count++;
    return true;
}

/* [mu] Takes out the watch with this id, or NULL. */
static sx__rwatch *rw_take(sx_cluster *c, uint64_t id)
{
    if (c->rw_nb == 0)
        return NULL;
    for (sx__rwatch **at = &c->rw_buckets[bucket(c, id)]; *at != NULL;
         at = &(*at)->next)
        if ((*at)->id == id) {
            sx__rwatch *x = *at;
            *at = x->next;
            c->rw_count--;
            return x;
        }
    return NULL;
}

/* After the failed publish of entry id's frame: true (the entry freed)
 * when it was still waiting, for the caller to answer with the error;
 * false when a down or a lost connection took it out meanwhile (it is
 * answered from there). */
static bool unpublished(sx_cluster *c, uint64_t id)
{
    pthread_mutex_lock(&c->mu);
    sx__rwatch *x = rw_take(c, id);
    pthread_mutex_unlock(&c->mu);
    free(x);
    return x != NULL;
}

static int r_watch(void *user, sx_pid target, sx_remote_watch *w)
{
    sx_cluster *c = user;
    sx__rwatch *x = calloc(1, sizeof *x);
    if (x == NULL)
        return SX_ENOMEM;
    x->node = target.node;
    x->target = target;
    x->w = w;
    bool nats = nats_up(c); /* asked before mu: nats.c takes its own lock */
    pthread_mutex_lock(&c->mu);
    sx__member *m = sx__cluster_find(c, target.node);
    /* Checked and added under one lock: a down after this takes it out. */
    if (c->stopping || m == NULL || m->m.self || !nats) {
        pthread_mutex_unlock(&c->mu);
        free(x);
        return SX_ENOCONNECTION;
    }
    x->id = ++c->rw_next_id;
    if (!rw_put(c, x)) {
        pthread_mutex_unlock(&c->mu);
        free(x);
        return SX_ENOMEM;
    }
    uint64_t id = x->id;
    pthread_mutex_unlock(&c->mu);
    uint8_t buf[256];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    sx_pack_fmt(&pk, "{s:s, s:s, s:U, s:u, s:U, s:p}", "c", c->name, "k", "w",
                "i", id, "r", c->node, "ri", c->inc, "t", target);
    int rc = publish_to(c, target.node, &pk);
    if (rc != 0)
        return unpublished(c, id) ? rc : 0;
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->watches_out, 1, memory_order_relaxed);
    return 0;
}

/* A one-PID (or two) frame: terminate, link. */
static int r_pids(sx_cluster *c, const char *kind, sx_pid t, const sx_pid *f)
{
    if (!reachable(c, t.node))
        return SX_ENOCONNECTION;
    uint8_t buf[256];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    if (f != NULL)
        sx_pack_fmt(&pk, "{s:s, s:s, s:p, s:p}", "c", c->name, "k", kind, "t",
                    t, "f", *f);
    else
        sx_pack_fmt(&pk, "{s:s, s:s, s:p}", "c", c->name, "k", kind, "t", t);
    return publish_to(c, t.node, &pk);
}

static int r_cancel(void *user, sx_pid target, sx_payload reason)
{
    sx_cluster *c = user;
    if (!reachable(c, target.node))
        return SX_ENOCONNECTION;
    uint8_t buf[1024];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    for (int pass = 0; pass < 2; pass++) {
        frame_head(&pk, c, 2, "n");
        sx_pack_str(&pk, "t");
        sx_pack_pid(&pk, target);
        sx_pack_str(&pk, "d");
        sx_pack_raw(&pk, reason);
        if (pk.err == 0 || pass == 1)
            break;
        sx_pack_init(&pk); /* a long reason: the heap */
    }
    int rc = publish_to(c, target.node, &pk);
    sx_pack_fini(&pk);
    return rc;
}

static int r_terminate(void *user, sx_pid target)
{
    return r_pids(user, "x", target, NULL);
}

static int r_link(void *user, sx_pid target, sx_pid partner)
{
    return r_pids(user, "l", target, &partner);
}

static int r_submit(void *user, const sx_submit_opts *opts, const char *type,
                    const char *method, const sx_payload *input, size_t n_input,
                    sx_submit_fn fn, void *fn_user, sx_remote_watch *w)
{
    sx_cluster *c = user;
    if (strlen(type) > 255 || strlen(method) > 255)
        return SX_EINVAL;
    sx__rwatch *x = calloc(1, sizeof *x);
    if (x == NULL)
        return SX_ENOMEM;
    bool nats = nats_up(c); /* asked before mu: nats.c takes its own lock */
    pthread_mutex_lock(&c->mu);
    sx__member *m;
    if (opts->place != SX_PLACE_HERE) {
        m = sx__cluster_pick(c, type, opts->place);
        if (m != NULL)
            m->placed++; /* ours too: a burst spreads from here as well */
        if (m == NULL || m->m.self) {
            pthread_mutex_unlock(&c->mu);
            free(x);
            /* Here: this node was the pick, or no member has the type
             * (then this node says so, unknown_type). */
            return 1;
        }
    } else {
        m = sx__cluster_find(c, opts->node);
    }
    if (c->stopping || m == NULL || m->m.self || !nats) {
        pthread_mutex_unlock(&c->mu);
        free(x);
        return SX_ENOCONNECTION;
    }
    x->node = m->m.node;
    x->w = w;
    x->submitting = true;
    x->fn = fn;
    x->fn_user = fn_user;
    x->id = ++c->rw_next_id;
    if (!rw_put(c, x)) {
        pthread_mutex_unlock(&c->mu);
        free(x);
        return SX_ENOMEM;
    }
    uint64_t id = x->id;
    uint32_t node = x->node;
    pthread_mutex_unlock(&c->mu);
    uint8_t buf[1024];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    for (int pass = 0; pass < 2; pass++) {
        frame_head(&pk, c, 8, "s");
        sx_pack_str(&pk, "i");
        sx_pack_uint(&pk, id);
        sx_pack_str(&pk, "r");
        sx_pack_uint(&pk, c->node);
        sx_pack_str(&pk, "ri");
        sx_pack_uint(&pk, c->inc);
        sx_pack_str(&pk, "y");
        sx_pack_str(&pk, type);
        sx_pack_str(&pk, "me");
        sx_pack_str(&pk, method);
        sx_pack_str(&pk, "dl");
        sx_pack_int(&pk, opts->deadline_ms);
        sx_pack_str(&pk, "w");
        sx_pack_bool(&pk, w != NULL);
        sx_pack_str(&pk, "in");
        sx_pack_array(&pk, (uint32_t)n_input);
        for (size_t i = 0; i < n_input; i++)
            sx_pack_raw(&pk, input[i]);
        if (pk.err == 0 || pass == 1)
            break;
        sx_pack_init(&pk);
    }
    int rc = publish_to(c, node, &pk);
    sx_pack_fini(&pk);
    return rc != 0 && unpublished(c, id) ? rc : 0;
}

/* The engine is done with us (sx_engine_free): its reference goes. */
static void r_release(void *user)
{
    sx__cluster_unref(user);
}

const sx_remote_ops sx__cluster_ops = {
    .send = r_send,
    .watch = r_watch,
    .terminate = r_terminate,
    .cancel = r_cancel,
    .link = r_link,
    .submit = r_submit,
    .release = r_release,
};

/* ---- losing watches ------------------------------------------------------ */

void sx__cluster_lose(sx_cluster *c, uint32_t node, int reason)
{
    for (size_t i = 0; i < c->rw_nb; i++)
        for (sx__rwatch **at = &c->rw_buckets[i]; *at != NULL;) {
            sx__rwatch *x = *at;
            if (node != 0 && x->node != node) {
                at = &x->next;
                continue;
            }
            *at = x->next;
            c->rw_count--;
            x->id = (uint64_t)reason; /* out of the table: why */
            x->next = c->rw_fire;
            c->rw_fire = x;
        }
}

void sx__cluster_fire(sx_cluster *c)
{
    pthread_mutex_lock(&c->mu);
    sx__rwatch *x = c->rw_fire;
    c->rw_fire = NULL;
    pthread_mutex_unlock(&c->mu);
    for (sx__rwatch *next; x != NULL; x = next) {
        next = x->next;
        char msg[96];
        if (x->id == SX__LOST_DOWN)
            snprintf(msg, sizeof msg, "node %u is down", x->node);
        else if (x->id == SX__LOST_NATS)
            snprintf(msg, sizeof msg,
                     "the connection to NATS was lost while waiting for "
                     "node %u",
                     x->node);
        else
            snprintf(msg, sizeof msg, "this node left the cluster");
        sx_result r = { .error = SX_ENOCONNECTION, .error_msg = msg };
        if (x->submitting && x->fn != NULL)
            x->fn(x->fn_user, SX_ENOCONNECTION, SX_PID_NONE, false, msg);
        if (x->ps_fn != NULL)
            x->ps_fn(x->fn_user, SX_ENOCONNECTION, NULL, 0, msg);
        if (x->w != NULL)
            sx_engine_remote_fire(c->engine, x->w, x->target, &r);
        free(x);
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&c->watches_lost, 1, memory_order_relaxed);
    }
}

void sx__cluster_remote_free(sx_cluster *c)
{
    for (size_t i = 0; i < c->rw_nb; i++)
        for (sx__rwatch *x = c->rw_buckets[i], *next; x != NULL; x = next) {
            next = x->next;
            free(x);
        }
    free(c->rw_buckets);
    c->rw_buckets = NULL;
    c->rw_nb = c->rw_count = 0;
}

/* ---- watches of our processes for other nodes -----------------------------
 */

typedef struct {
    sx_cluster *c;
    uint64_t id, inc;
    uint32_t node;
} watched;

/* The outcome frame for a watch: to its node. An outcome that cannot
 * travel (over the server's max_payload, or no memory to pack it) goes
 * as that error, so that the watcher is answered all the same. */
static void answer(sx_cluster *c, const watched *wd, sx_pid target,
                   const sx_result *r)
{
    uint8_t buf[1024];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    for (int pass = 0; pass < 2; pass++) {
        sx_pack_fmt(&pk, "{s:s, s:s, s:U, s:U, s:p, s:I, s:s, s:v, s:U, s:u}",
                    "c", c->name, "k", "o", "i", wd->id, "ri", wd->inc, "t",
                    target, "e", (int64_t)r->error, "x",
                    r->error_msg != NULL ? r->error_msg : "", "v",
                    r->error == 0 ? r->value : (sx_payload){ NULL, 0 }, "s",
                    r->steps, "a", r->attempts);
        if (pk.err == 0 || pass == 1)
            break;
        sx_pack_init(&pk);
    }
    int rc = publish_to(c, wd->node, &pk);
    size_t len = pk.len;
    sx_pack_fini(&pk);
    if (rc != SX_ETOOLARGE && rc != SX_ENOMEM)
        return;
    char why[160];
    snprintf(why, sizeof why,
             "its outcome (%zu bytes) cannot cross to node %u: over NATS's "
             "max_payload of %zu bytes",
             len, wd->node, max_payload(c));
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    sx_pack_fmt(&pk, "{s:s, s:s, s:U, s:U, s:p, s:I, s:s, s:n, s:U, s:u}", "c",
                c->name, "k", "o", "i", wd->id, "ri", wd->inc, "t", target, "e",
                (int64_t)SX_ETOOLARGE, "x",
                rc == SX_ENOMEM ? "no memory to send its outcome" : why, "v",
                "s", r->steps, "a", r->attempts);
    publish_to(c, wd->node, &pk);
}

/* sx_engine_watch's callback: once, on the thread that finished target. */
static void on_watched(void *user, sx_pid target, const sx_result *r)
{
    watched *wd = user;
    sx_cluster *c = wd->c;
    answer(c, wd, target, r);
    free(wd);
    sx__cluster_unref(c);
}

static void watch_in(sx_cluster *c, sx_payload p)
{
    uint64_t id, node, inc;
    sx_pid t;
    if (get_u64(p, "i", &id) != 0 || get_u64(p, "r", &node) != 0 ||
        get_u64(p, "ri", &inc) != 0 || get_pid(p, "t", &t) != 0 || node == 0 ||
        node > UINT32_MAX || node == c->node || t.node != c->node) {
        bad(c);
        return;
    }
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->watches_in, 1, memory_order_relaxed);
    watched *wd = malloc(sizeof *wd);
    watched stack = { c, id, inc, (uint32_t)node };
    if (wd == NULL) {
        sx_result r = { .error = SX_ENOMEM, .error_msg = "out of memory" };
        answer(c, &stack, t, &r);
        return;
    }
    *wd = stack;
    /* relaxed: the owner's reference keeps c alive while we add one; the
     * decrement's acq_rel orders the uses. */
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
    int rc = sx_engine_watch(c->engine, t, on_watched, wd);
    if (rc != 0) {
        sx_result r = { .error = rc,
                        .error_msg =
                            rc == SX_ENOTFOUND ? "no such process" : NULL };
        answer(c, wd, t, &r);
        free(wd);
        sx__cluster_unref(c);
    }
}

static void outcome_in(sx_cluster *c, sx_payload p)
{
    uint64_t id, inc, steps = 0, attempts = 0;
    int64_t code = sx_get_int(p, "e", 1);
    sx_pid t;
    sx_payload v = { NULL, 0 };
    if (get_u64(p, "i", &id) != 0 || get_u64(p, "ri", &inc) != 0 ||
        get_pid(p, "t", &t) != 0 || code > 0 || code < INT32_MIN) {
        bad(c);
        return;
    }
    if (inc != c->inc)
        return; /* for an earlier run of this node: nobody waits for it */
    sx_get(p, "v", &v);
    get_u64(p, "s", &steps);
    get_u64(p, "a", &attempts);
    pthread_mutex_lock(&c->mu);
    sx__rwatch *x = rw_take(c, id);
    if (x != NULL && (x->submitting || x->ps_fn != NULL)) {
        rw_put(c, x); /* an outcome for a submit or a ps: bad */
        x = NULL;
        bad(c);
    }
    pthread_mutex_unlock(&c->mu);
    if (x == NULL)
        return; /* answered noconnection already (its node was down) */
    if (!sx_pid_eq(x->target, t)) {
        /* Not the process this id watches: answered as lost rather than
         * with another process's outcome. */
        bad(c);
        t = x->target;
        code = SX_EPROTO;
    }
    char msg[1024] = "";
    get_text(p, "x", msg, sizeof msg);
    if (code == SX_EPROTO && msg[0] == '\0')
        snprintf(msg, sizeof msg, "node %u answered for another process",
                 x->node);
    sx_result r = { .error = (int)code,
                    .error_msg = code != 0 && msg[0] != '\0' ? msg : NULL,
                    .value = code == 0 ? v : (sx_payload){ NULL, 0 },
                    .steps = steps,
                    .attempts = attempts > UINT32_MAX ? UINT32_MAX
                                                      : (uint32_t)attempts };
    sx_engine_remote_fire(c->engine, x->w, t, &r);
    free(x);
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->watches_answered, 1, memory_order_relaxed);
}

/* ---- submits from other nodes -------------------------------------------- */

typedef struct {
    watched wd;
    bool watch;
} submitted;

static void answer_submit(sx_cluster *c, const watched *wd, int rc, sx_pid pid,
                          bool existing, const char *msg)
{
    uint8_t buf[1024];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    for (int pass = 0; pass < 2; pass++) {
        sx_pack_fmt(&pk, "{s:s, s:s, s:U, s:U, s:u, s:I, s:s, s:p, s:b}", "c",
                    c->name, "k", "a", "i", wd->id, "ri", wd->inc, "n", c->node,
                    "e", (int64_t)rc, "x", msg != NULL ? msg : "", "p", pid,
                    "ex", existing);
        if (pk.err == 0 || pass == 1)
            break;
        sx_pack_init(&pk); /* a long message: the heap */
    }
    publish_to(c, wd->node, &pk);
    sx_pack_fini(&pk);
}

/* A watch of the process a submit started, for the submitter: its
 * outcome goes as the watch's (the same id). */
static void watch_new(sx_cluster *c, const watched *from, sx_pid pid)
{
    watched *wd = malloc(sizeof *wd);
    if (wd == NULL) {
        sx_result r = { .error = SX_ENOMEM, .error_msg = "out of memory" };
        answer(c, from, pid, &r);
        return;
    }
    *wd = *from;
    /* relaxed: as in watch_in. */
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
    int rc = sx_engine_watch(c->engine, pid, on_watched, wd);
    if (rc != 0) {
        sx_result r = { .error = rc };
        answer(c, wd, pid, &r);
        free(wd);
        sx__cluster_unref(c);
    }
}

static void on_submitted(void *user, int rc, sx_pid pid, bool existing,
                         const char *msg)
{
    submitted *sb = user;
    sx_cluster *c = sb->wd.c;
    answer_submit(c, &sb->wd, rc, pid, existing, msg);
    if (rc == 0 && sb->watch)
        watch_new(c, &sb->wd, pid);
    free(sb);
    sx__cluster_unref(c);
}

static void submit_in(sx_cluster *c, sx_payload p)
{
    uint64_t id, node, inc;
    char type[256], method[256];
    sx_payload list;
    sx_unpack u;
    uint32_t n;
    int64_t dl = sx_get_int(p, "dl", 0);
    if (get_u64(p, "i", &id) != 0 || get_u64(p, "r", &node) != 0 ||
        get_u64(p, "ri", &inc) != 0 || node == 0 || node > UINT32_MAX ||
        node == c->node || sx_get_strcpy(p, "y", type, sizeof type) != 0 ||
        sx_get_strcpy(p, "me", method, sizeof method) != 0 ||
        sx_get(p, "in", &list) != 0 || dl < 0) {
        bad(c);
        return;
    }
    sx_unpack_init(&u, list);
    if (sx_unpack_array(&u, &n) != 0 || n > 65536) {
        bad(c);
        return;
    }
    watched wd = { c, id, inc, (uint32_t)node };
    if (type[0] == '@') {
        /* The engine's own helper types are not for other nodes either. */
        char msg[300];
        snprintf(msg, sizeof msg, "node %u has no process type \"%s\"", c->node,
                 type);
        answer_submit(c, &wd, SX_EUNKNOWN_TYPE, SX_PID_NONE, false, msg);
        return;
    }
    sx_payload *in = calloc(n > 0 ? n : 1, sizeof *in);
    submitted *sb = malloc(sizeof *sb);
    if (in == NULL || sb == NULL) {
        free(in);
        free(sb);
        answer_submit(c, &wd, SX_ENOMEM, SX_PID_NONE, false, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        if (sx_unpack_raw(&u, &in[i]) != 0) {
            free(in);
            free(sb);
            bad(c);
            return;
        }
    sx_payload wv;
    bool watch = false;
    if (sx_get(p, "w", &wv) == 0) {
        sx_unpack_init(&u, wv);
        sx_unpack_bool(&u, &watch);
    }
    *sb = (submitted){ wd, watch };
    char why[512] = "";
    sx_submit_opts o = { .deadline_ms = dl,
                         .init_error = why,
                         .init_error_cap = sizeof why };
    /* relaxed: as in watch_in. */
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
    int rc = sx_engine_submit_async(c->engine, type, method, in, n, &o,
                                    on_submitted, sb);
    free(in);
    if (rc != 0) {
        /* Room for the longest: type and method (255 bytes each), the
         * node and why (511). */
        char msg[1100];
        if (rc == SX_EUNKNOWN_TYPE)
            snprintf(msg, sizeof msg, "node %u has no process type \"%s\"",
                     c->node, type);
        else if (rc == SX_EUNKNOWN_METHOD)
            snprintf(msg, sizeof msg, "type \"%s\" has no method \"%s\"", type,
                     method);
        else
            snprintf(msg, sizeof msg, "%s.%s on node %u: %s", type, method,
                     c->node, why[0] != '\0' ? why : sx_strerror(rc));
        answer_submit(c, &wd, rc, SX_PID_NONE, false, msg);
        free(sb);
        sx__cluster_unref(c);
    }
}

static void answer_in(sx_cluster *c, sx_payload p)
{
    uint64_t id, inc, node;
    int64_t rc = sx_get_int(p, "e", 1);
    sx_pid pid = SX_PID_NONE;
    if (get_u64(p, "i", &id) != 0 || get_u64(p, "ri", &inc) != 0 ||
        get_u64(p, "n", &node) != 0 || rc > 0 || rc < INT32_MIN ||
        (rc == 0 && (get_pid(p, "p", &pid) != 0 || pid.node != node))) {
        bad(c);
        return;
    }
    if (inc != c->inc)
        return; /* for an earlier run of this node */
    bool existing = false;
    sx_payload v;
    sx_unpack u;
    if (sx_get(p, "ex", &v) == 0) {
        sx_unpack_init(&u, v);
        sx_unpack_bool(&u, &existing);
    }
    char msg[1024] = "";
    get_text(p, "x", msg, sizeof msg);
    pthread_mutex_lock(&c->mu);
    sx__rwatch *x = rw_take(c, id);
    if (x != NULL && (!x->submitting || x->node != node)) {
        rw_put(c, x); /* not a submit of that node's: not ours to end */
        pthread_mutex_unlock(&c->mu);
        bad(c);
        return;
    }
    pthread_mutex_unlock(&c->mu);
    if (x == NULL)
        return; /* answered noconnection already */
    /* Out of the table while fn runs: what fn does (a spawn's @spawned
     * notice, its scope) comes before any answer of the watch. The
     * outcome frame cannot overtake us: this thread reads the subject's
     * frames in order. */
    if (x->fn != NULL)
        x->fn(x->fn_user, (int)rc, pid, existing,
              rc != 0 && msg[0] != '\0' ? msg : NULL);
    if (rc == 0 && x->w != NULL) {
        /* Now the watch of the new process, under the same id; if its node
         * went down meanwhile (its entries answered), answered so here. */
        x->submitting = false;
        x->target = pid;
        bool nats = nats_up(c); /* asked before mu: nats.c takes its own lock */
        pthread_mutex_lock(&c->mu);
        sx__member *m = sx__cluster_find(c, x->node);
        bool up =
            nats && !c->stopping && m != NULL && !m->m.self && rw_put(c, x);
        pthread_mutex_unlock(&c->mu);
        if (up)
            return;
        rc = SX_ENOCONNECTION;
        snprintf(msg, sizeof msg, "node %u is down", x->node);
    }
    if (x->w != NULL) {
        sx_result r = { .error = (int)rc,
                        .error_msg = msg[0] != '\0' ? msg : NULL };
        sx_engine_remote_fire(c->engine, x->w, pid, &r);
    }
    free(x);
}

/* ---- ps of another node -------------------------------------------------- */

#define PS_MAX 100000

/* This node's processes, up to limit: a malloc'd array, *n of them. */
static sx_process_info *list_here(sx_cluster *c, uint64_t limit, size_t *n)
{
    size_t cap = limit < PS_MAX ? (size_t)limit : PS_MAX;
    sx_process_info *info = malloc((cap > 0 ? cap : 1) * sizeof *info);
    int k = info != NULL ? sx_engine_list(c->engine, info, cap) : 0;
    *n = k > 0 ? ((size_t)k < cap ? (size_t)k : cap) : 0;
    return info;
}

int sx_cluster_ps(sx_cluster *c, uint32_t node, uint64_t limit,
                  sx_cluster_ps_fn fn, void *user)
{
    if (c == NULL || fn == NULL)
        return SX_EINVAL;
    if (node == c->node) {
        size_t n;
        sx_process_info *info = list_here(c, limit, &n);
        if (info == NULL)
            return SX_ENOMEM;
        fn(user, 0, info, n, NULL);
        free(info);
        return 0;
    }
    sx__rwatch *x = calloc(1, sizeof *x);
    if (x == NULL)
        return SX_ENOMEM;
    x->node = node;
    x->ps_fn = fn;
    x->fn_user = user;
    bool nats = nats_up(c); /* asked before mu: nats.c takes its own lock */
    pthread_mutex_lock(&c->mu);
    sx__member *m = sx__cluster_find(c, node);
    bool up = !c->stopping && m != NULL && !m->m.self && nats;
    if (up) {
        x->id = ++c->rw_next_id;
        up = rw_put(c, x);
    }
    uint64_t id = x->id;
    pthread_mutex_unlock(&c->mu);
    if (!up) {
        free(x);
        char msg[96];
        snprintf(msg, sizeof msg,
                 "node %u is not in the cluster (down, or never seen)", node);
        fn(user, SX_ENOCONNECTION, NULL, 0, msg);
        return 0;
    }
    uint8_t buf[256];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    sx_pack_fmt(&pk, "{s:s, s:s, s:U, s:u, s:U, s:U}", "c", c->name, "k", "q",
                "i", id, "r", c->node, "ri", c->inc, "lim", limit);
    if (publish_to(c, node, &pk) != 0 && unpublished(c, id))
        fn(user, SX_ENOCONNECTION, NULL, 0, "the connection to NATS is down");
    return 0;
}

static void query_in(sx_cluster *c, sx_payload p)
{
    uint64_t id, node, inc, limit;
    if (get_u64(p, "i", &id) != 0 || get_u64(p, "r", &node) != 0 ||
        get_u64(p, "ri", &inc) != 0 || get_u64(p, "lim", &limit) != 0 ||
        node == 0 || node > UINT32_MAX || node == c->node) {
        bad(c);
        return;
    }
    size_t n;
    sx_process_info *info = list_here(c, limit, &n);
    sx_pack pk;
    sx_pack_init(&pk);
    frame_head(&pk, c, 4, "r");
    sx_pack_str(&pk, "i");
    sx_pack_uint(&pk, id);
    sx_pack_str(&pk, "ri");
    sx_pack_uint(&pk, inc);
    sx_pack_str(&pk, "n");
    sx_pack_uint(&pk, c->node);
    sx_pack_str(&pk, "ps");
    /* Entries until the frame would pass the server's max_payload (less
     * room for the frame around them): counted first. */
    size_t most = max_payload(c) > 8192 ? max_payload(c) - 4096 : 4096;
    size_t fit = 0, bytes = pk.len + 5;
    for (; info != NULL && fit < n; fit++) {
        bytes += 64 + strlen(info[fit].type) +
                 (info[fit].method != NULL ? strlen(info[fit].method) : 0) +
                 strlen(info[fit].last_error);
        if (bytes > most)
            break;
    }
    sx_pack_array(&pk, (uint32_t)fit);
    for (size_t i = 0; i < fit; i++) {
        sx_pack_array(&pk, 8);
        sx_pack_pid(&pk, info[i].pid);
        sx_pack_str(&pk, info[i].type);
        if (info[i].method != NULL)
            sx_pack_str(&pk, info[i].method);
        else
            sx_pack_nil(&pk);
        sx_pack_int(&pk, info[i].state);
        sx_pack_uint(&pk, info[i].steps);
        sx_pack_uint(&pk, info[i].attempts);
        sx_pack_int(&pk, info[i].restart_in_ms);
        sx_pack_str(&pk, info[i].last_error);
    }
    free(info);
    publish_to(c, (uint32_t)node, &pk);
    sx_pack_fini(&pk);
}

static void listing_in(sx_cluster *c, sx_payload p)
{
    uint64_t id, inc, node;
    sx_payload list;
    sx_unpack u;
    uint32_t n;
    if (get_u64(p, "i", &id) != 0 || get_u64(p, "ri", &inc) != 0 ||
        get_u64(p, "n", &node) != 0 || sx_get(p, "ps", &list) != 0) {
        bad(c);
        return;
    }
    sx_unpack_init(&u, list);
    /* An entry takes at least 16 bytes: a count beyond what the frame
     * holds is refused before anything is allocated for it. */
    if (inc != c->inc || sx_unpack_array(&u, &n) != 0 || n > PS_MAX ||
        n > list.len / 16) {
        if (inc == c->inc)
            bad(c);
        return;
    }
    pthread_mutex_lock(&c->mu);
    sx__rwatch *x = rw_take(c, id);
    if (x != NULL && (x->ps_fn == NULL || x->node != node)) {
        rw_put(c, x);
        x = NULL;
        bad(c);
    }
    pthread_mutex_unlock(&c->mu);
    if (x == NULL)
        return;
    /* The names, each with a NUL, in one block beside the entries. */
    sx_process_info *info = calloc(n > 0 ? n : 1, sizeof *info);
    char *names = malloc((size_t)n * 2 * 256 + 1);
    size_t k = 0, used = 0;
    int rc = info != NULL && names != NULL ? 0 : SX_ENOMEM;
    for (; rc == 0 && k < n; k++) {
        sx_process_info *e = &info[k];
        uint32_t m;
        const char *s[2];
        size_t sl[2];
        int64_t st, rin;
        uint64_t steps, att;
        const char *le;
        size_t lel;
        bool nil_method = false;
        if (sx_unpack_array(&u, &m) != 0 || m != 8 ||
            sx_unpack_pid(&u, &e->pid) != 0 ||
            sx_unpack_str(&u, &s[0], &sl[0]) != 0 || sl[0] > 255) {
            rc = SX_EPROTO;
            break;
        }
        if (sx_unpack_nil(&u) == 0)
            nil_method = true;
        else if (sx_unpack_str(&u, &s[1], &sl[1]) != 0 || sl[1] > 255) {
            rc = SX_EPROTO;
            break;
        }
        if (sx_unpack_int(&u, &st) != 0 || st < 0 ||
            st > SX_PSTATE_COMPLETE + 1 || sx_unpack_uint(&u, &steps) != 0 ||
            sx_unpack_uint(&u, &att) != 0 || att > UINT32_MAX ||
            sx_unpack_int(&u, &rin) != 0 || sx_unpack_str(&u, &le, &lel) != 0) {
            rc = SX_EPROTO;
            break;
        }
        for (int j = 0; j < (nil_method ? 1 : 2); j++) {
            memcpy(names + used, s[j], sl[j]);
            names[used + sl[j]] = '\0';
            if (j == 0)
                e->type = names + used;
            else
                e->method = names + used;
            used += sl[j] + 1;
        }
        e->state = (int)st;
        e->steps = steps;
        e->attempts = (uint32_t)att;
        e->restart_in_ms = rin;
        snprintf(
            e->last_error, sizeof e->last_error, "%.*s",
            (int)(lel < sizeof e->last_error ? lel : sizeof e->last_error - 1),
            le);
    }
    if (rc == SX_EPROTO)
        bad(c);
    char msg[96];
    snprintf(msg, sizeof msg, "node %u sent a listing that cannot be read",
             x->node);
    x->ps_fn(x->fn_user, rc, rc == 0 ? info : NULL, rc == 0 ? k : 0,
             rc == 0           ? NULL
             : rc == SX_ENOMEM ? "out of memory"
                               : msg);
    free(names);
    free(info);
    free(x);
}

/* ---- frames for our node (nats.c's thread) ------------------------------ */

static void messages_in(sx_cluster *c, sx_payload p)
{
    sx_pid from, to;
    sx_payload list;
    sx_unpack u;
    uint32_t n;
    if (get_pid(p, "f", &from) != 0 || get_pid(p, "t", &to) != 0 ||
        to.node != c->node || sx_get(p, "m", &list) != 0) {
        bad(c);
        return;
    }
    sx_unpack_init(&u, list);
    if (sx_unpack_array(&u, &n) != 0 || n % 2 != 0) {
        bad(c);
        return;
    }
    pthread_mutex_lock(&c->mu);
    sx__member *x = sx__cluster_find(c, from.node);
    if (x != NULL && !x->m.self)
        x->m.messages_in += n / 2;
    pthread_mutex_unlock(&c->mu);
    /* relaxed: figures. */
    atomic_fetch_add_explicit(&c->batches_in, 1, memory_order_relaxed);
    /* The frame's messages go to the engine as batches: one look-up and
     * one push each. */
    sx_message *run = c->rx_msgs;
    size_t k = 0;
    for (uint32_t i = 0; i <= n / 2; i++) {
        const char *s = NULL;
        size_t sl = 0;
        sx_payload d = { NULL, 0 };
        bool end = i == n / 2;
        if (!end &&
            (sx_unpack_str(&u, &s, &sl) != 0 || sl >= 256 ||
             memchr(s, '\0', sl) != NULL || sx_unpack_raw(&u, &d) != 0)) {
            bad(c);
            end = true; /* the rest cannot be read in order */
        }
        if (k > 0 && (end || k == SX__CLUSTER_RX_BATCH)) {
            if (sx_engine_send_many(c->engine, run, k) != 0)
                /* relaxed: a figure. */
                atomic_fetch_add_explicit(&c->msgs_undelivered, k,
                                          memory_order_relaxed);
            k = 0;
        }
        if (end)
            break;
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&c->msgs_in, 1, memory_order_relaxed);
        memcpy(c->rx_topics[k], s, sl);
        c->rx_topics[k][sl] = '\0';
        run[k] = (sx_message){ from, to, c->rx_topics[k], d };
        k++;
    }
}

/* A cancel of one of our processes from another node: a cancel here,
 * which overtakes queued messages and ends a job waiting for its
 * restart. */
static void cancel_in(sx_cluster *c, sx_payload p)
{
    sx_pid t;
    sx_payload d;
    if (get_pid(p, "t", &t) != 0 || t.node != c->node ||
        sx_get(p, "d", &d) != 0) {
        bad(c);
        return;
    }
    char reason[1024] = "cancelled";
    sx_str r = sx_get_str(d, NULL);
    if (r.ptr != NULL)
        snprintf(reason, sizeof reason, "%.*s",
                 (int)(r.len < sizeof reason ? r.len : sizeof reason - 1),
                 r.ptr);
    if (sx_engine_cancel(c->engine, t, reason) != 0)
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&c->msgs_undelivered, 1,
                                  memory_order_relaxed);
}

void sx__cluster_on_node(natsConnection *nc, natsSubscription *sub,
                         natsMsg *msg, void *closure)
{
    (void)nc, (void)sub;
    sx_cluster *c = closure;
    sx_payload p = { (const uint8_t *)natsMsg_GetData(msg),
                     (size_t)natsMsg_GetDataLength(msg) };
    char cluster[SX_CLUSTER_NAME_MAX + 1], kind[2];
    sx_pid t, f;
    if (p.len == 0 || sx_get_strcpy(p, "c", cluster, sizeof cluster) != 0 ||
        strcmp(cluster, c->name) != 0 ||
        sx_get_strcpy(p, "k", kind, sizeof kind) != 0) {
        bad(c);
    } else if (kind[0] == 'm') {
        messages_in(c, p);
    } else if (kind[0] == 'w') {
        watch_in(c, p);
    } else if (kind[0] == 'o') {
        outcome_in(c, p);
    } else if (kind[0] == 's') {
        submit_in(c, p);
    } else if (kind[0] == 'n') {
        cancel_in(c, p);
    } else if (kind[0] == 'q') {
        query_in(c, p);
    } else if (kind[0] == 'r') {
        listing_in(c, p);
    } else if (kind[0] == 'a') {
        answer_in(c, p);
    } else if ((kind[0] == 'x' || kind[0] == 'l') && get_pid(p, "t", &t) == 0 &&
               t.node == c->node) {
        if (kind[0] == 'x')
            sx_engine_terminate(c->engine, t);
        else if (get_pid(p, "f", &f) == 0 && f.node != c->node)
            /* No such process here: the partner's watch of it answers
             * not_found, which ends the link there. */
            sx_engine_link_from(c->engine, t, f);
        else
            bad(c);
    } else {
        bad(c);
    }
    natsMsg_Destroy(msg);
}

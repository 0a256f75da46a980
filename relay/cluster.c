/* relay/cluster.c — cluster membership over NATS (docs/CLUSTER.md): a
 * node connects to the NATS server, publishes a heartbeat every period
 * on stepx.<cluster>.hb ({cluster, node, inc, addr, procs, load,
 * period_ms}), keeps the table of the members it hears, and declares a
 * member down when it has not been heard from for down_after_ms; a clean
 * stop publishes stepx.<cluster>.bye. A message that is not such a map,
 * or names another cluster, is dropped and counted.
 *
 * Threads: nats.c's own (its reader delivers the subscriptions'
 * messages: hb_msg); one heartbeat thread of ours (beat); any thread for
 * sx_cluster_members and the stats. The member table is under mu.
 */
#define _DEFAULT_SOURCE /* random() */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "relay/cluster.h"

#define MAX_MEMBERS SX__CLUSTER_MAX_MEMBERS
typedef sx__member member;
#define mono_ms sx__cluster_mono_ms

/* ---- messages ---------------------------------------------------------- */

/* A heartbeat (or a bye: only cluster, node, inc) read; 0 or SX_EPROTO. */
static int hb_read(sx_payload p, char *cluster, size_t ccap,
                   sx_cluster_member *m, uint32_t *period_ms)
{
    memset(m, 0, sizeof *m);
    *period_ms = 0;
    if (sx_get_strcpy(p, "cluster", cluster, ccap) != 0)
        return SX_EPROTO;
    sx_payload v;
    uint64_t u;
    sx_unpack un;
    if (sx_get(p, "node", &v) != 0)
        return SX_EPROTO;
    sx_unpack_init(&un, v);
    if (sx_unpack_uint(&un, &u) != 0 || u == 0 || u > UINT32_MAX)
        return SX_EPROTO;
    m->node = (uint32_t)u;
    if (sx_get(p, "inc", &v) != 0)
        return SX_EPROTO;
    sx_unpack_init(&un, v);
    if (sx_unpack_uint(&un, &m->incarnation) != 0 || m->incarnation == 0)
        return SX_EPROTO;
    sx_get_strcpy(p, "addr", m->address, sizeof m->address);
    int64_t procs = sx_get_int(p, "procs", 0);
    m->processes = procs > 0 ? (uint64_t)procs : 0;
    m->load = sx_get_double(p, "load", 0.0);
    int64_t per = sx_get_int(p, "period_ms", 0);
    *period_ms = per > 0 && per <= UINT32_MAX ? (uint32_t)per : 0;
    return 0;
}

static int hb_pack(sx_cluster *c, sx_pack *pk, bool bye)
{
    sx_engine_stats st;
    sx_engine_stats_get(c->engine, &st, NULL, 0);
    double load = st.workers > 0 ? (double)st.live / st.workers : 0.0;
    if (bye)
        return sx_pack_fmt(pk, "{s:s, s:u, s:U}", "cluster", c->name, "node",
                           c->node, "inc", (uint64_t)c->inc);
    const sx_process_type *types[SX__CLUSTER_MAX_TYPES];
    size_t nt = sx_engine_types(c->engine, types, SX__CLUSTER_MAX_TYPES);
    if (nt > SX__CLUSTER_MAX_TYPES)
        nt = SX__CLUSTER_MAX_TYPES;
    sx_pack_map(pk, 10);
    sx_pack_str(pk, "ep");
    /* relaxed: a figure, read for the heartbeat. */
    sx_pack_uint(pk,
                 atomic_load_explicit(&c->reconnects, memory_order_relaxed));
    sx_pack_str(pk, "cluster");
    sx_pack_str(pk, c->name);
    sx_pack_str(pk, "node");
    sx_pack_uint(pk, c->node);
    sx_pack_str(pk, "inc");
    sx_pack_uint(pk, c->inc);
    sx_pack_str(pk, "addr");
    sx_pack_str(pk, c->address);
    sx_pack_str(pk, "procs");
    sx_pack_uint(pk, st.live);
    sx_pack_str(pk, "load");
    sx_pack_double(pk, load);
    sx_pack_str(pk, "period_ms");
    sx_pack_uint(pk, c->period_ms);
    sx_pack_str(pk, "workers");
    sx_pack_uint(pk, st.workers);
    sx_pack_str(pk, "types");
    sx_pack_array(pk, (uint32_t)nt);
    for (size_t i = 0; i < nt; i++)
        sx_pack_str(pk, types[i]->name);
    return pk->err;
}

/* ---- the member table [mu] ------------------------------------------- */

member *sx__cluster_find(sx_cluster *c, uint32_t node)
{
    for (size_t i = 0; i < c->n_members; i++)
        if (c->members[i].m.node == node)
            return &c->members[i];
    return NULL;
}

/* Member i is down (why: "silent for N ms", "said goodbye", "came back
 * as a new incarnation"): told, counted, dropped; the watches of its
 * processes are taken out, to be answered noconnection once mu is let go
 * (sx__cluster_fire). */
static void down_at(sx_cluster *c, size_t i, const char *why)
{
    sx__cluster_lose(c, c->members[i].m.node, SX__LOST_DOWN);
    if (c->log != NULL) {
        char line[192];
        snprintf(line, sizeof line, "node %u (incarnation %llu) down: %s",
                 c->members[i].m.node,
                 (unsigned long long)c->members[i].m.incarnation, why);
        c->log(c->log_user, line);
    }
    /* relaxed: a figure. */
    atomic_fetch_add_explicit(&c->downs, 1, memory_order_relaxed);
    free(c->members[i].types);
    c->members[i] = c->members[--c->n_members];
}

/* A heartbeat of m heard now: a new member, the same one heard again, or
 * a new incarnation of a node (its earlier one is down first). */
static void heard(sx_cluster *c, const sx_cluster_member *m, sx_payload p)
{
    member *x = sx__cluster_find(c, m->node);
    if (x != NULL && x->m.self)
        return; /* our own, echoed; another node with our number is
                   ignored too (a misconfiguration, counted as bad) */
    if (x != NULL && x->m.incarnation != m->incarnation) {
        down_at(c, (size_t)(x - c->members), "came back as a new incarnation");
        x = NULL;
    }
    if (x == NULL) {
        if (c->n_members == MAX_MEMBERS)
            return;
        x = &c->members[c->n_members++];
        *x = (sx__member){ 0 }; /* its types pointer was moved, not owned */
        c->announce = true;
        pthread_cond_signal(&c->cv);
        if (c->log != NULL) {
            char line[192];
            snprintf(line, sizeof line, "node %u (incarnation %llu) up%s%s",
                     m->node, (unsigned long long)m->incarnation,
                     m->address[0] != '\0' ? " at " : "", m->address);
            c->log(c->log_user, line);
        }
    }
    int64_t ep = sx_get_int(p, "ep", 0);
    if (x->m.node == m->node && ep >= 0 && (uint64_t)ep != x->epoch)
        /* It reconnected to NATS (maybe to another server, before anyone
         * missed it): frames we sent it meanwhile may be lost, so what
         * waits for its answers is answered noconnection now. */
        sx__cluster_lose(c, m->node, SX__LOST_NATS);
    x->epoch = ep >= 0 ? (uint64_t)ep : 0; /* a new member: its first */
    uint64_t out = x->m.messages_out, in = x->m.messages_in;
    x->m = *m;
    x->m.messages_out = out; /* the link's, kept across heartbeats */
    x->m.messages_in = in;
    x->m.self = false;
    x->heard_ms = mono_ms();
    x->placed = 0;
    sx__cluster_hb_types(x, p);
}

/* Members silent for down_after_ms are down. */
static void sweep(sx_cluster *c, uint64_t now)
{
    for (size_t i = 1; i < c->n_members;) {
        if (now - c->members[i].heard_ms > c->down_after_ms) {
            char why[64];
            snprintf(why, sizeof why, "silent for %llu ms",
                     (unsigned long long)(now - c->members[i].heard_ms));
            down_at(c, i, why);
        } else {
            i++;
        }
    }
}

/* ---- nats.c callbacks (its threads) ------------------------------------ */

/* A heartbeat or (bye) a goodbye. Two callbacks, not one that compares
 * sub: the first heartbeats may come before the second subscription's
 * handle is stored. */
static void on_msg(sx_cluster *c, natsMsg *msg, bool bye)
{
    sx_payload p = { (const uint8_t *)natsMsg_GetData(msg),
                     (size_t)natsMsg_GetDataLength(msg) };
    char cluster[SX_CLUSTER_NAME_MAX + 1];
    sx_cluster_member m;
    uint32_t period;
    if (p.len == 0 || hb_read(p, cluster, sizeof cluster, &m, &period) != 0 ||
        strcmp(cluster, c->name) != 0) {
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&c->bad_messages, 1, memory_order_relaxed);
        natsMsg_Destroy(msg);
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (bye) {
        member *x = sx__cluster_find(c, m.node);
        if (x != NULL && !x->m.self && x->m.incarnation == m.incarnation)
            down_at(c, (size_t)(x - c->members), "said goodbye");
    } else {
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&c->hb_received, 1, memory_order_relaxed);
        if (m.node == c->node && m.incarnation != c->inc)
            /* relaxed: a figure: another node took our number. */
            atomic_fetch_add_explicit(&c->bad_messages, 1,
                                      memory_order_relaxed);
        else
            heard(c, &m, p);
    }
    pthread_mutex_unlock(&c->mu);
    natsMsg_Destroy(msg);
    sx__cluster_fire(c);
}

static void on_hb(natsConnection *nc, natsSubscription *sub, natsMsg *msg,
                  void *closure)
{
    (void)nc, (void)sub;
    on_msg(closure, msg, false);
}

static void on_bye(natsConnection *nc, natsSubscription *sub, natsMsg *msg,
                   void *closure)
{
    (void)nc, (void)sub;
    on_msg(closure, msg, true);
}

static void on_sub_done(void *closure)
{
    sx_cluster *c = closure;
    pthread_mutex_lock(&c->mu);
    c->subs_done++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void on_closed(natsConnection *nc, void *closure)
{
    (void)nc;
    sx_cluster *c = closure;
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void on_disconnected(natsConnection *nc, void *closure)
{
    (void)nc;
    sx_cluster *c = closure;
    /* relaxed: a figure. */
    atomic_store_explicit(&c->connected, false, memory_order_relaxed);
    /* An answer published to us meanwhile is lost (core NATS delivers to
     * the subscribers connected at that moment): the watches waiting for
     * one fail now rather than wait for ever. */
    pthread_mutex_lock(&c->mu);
    sx__cluster_lose(c, 0, SX__LOST_NATS);
    pthread_mutex_unlock(&c->mu);
    sx__cluster_fire(c);
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    (void)nc;
    sx_cluster *c = closure;
    /* relaxed: figures. */
    atomic_store_explicit(&c->connected, true, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->reconnects, 1, memory_order_relaxed);
}

/* ---- the heartbeat thread ---------------------------------------------- */

static void publish(sx_cluster *c, const char *subject, bool bye)
{
    uint8_t buf[1024];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    if (hb_pack(c, &pk, bye) != 0) {
        /* Many types (up to SX__CLUSTER_MAX_TYPES names): the heap. */
        sx_pack_init(&pk);
        hb_pack(c, &pk, bye);
    }
    if (pk.err == 0 &&
        natsConnection_Publish(c->nc, subject, pk.data, (int)pk.len) == NATS_OK)
        /* relaxed: a figure. */
        atomic_fetch_add_explicit(&c->hb_sent, 1, memory_order_relaxed);
    sx_pack_fini(&pk);
}

static void *beat(void *arg)
{
    sx_cluster *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        pthread_mutex_unlock(&c->mu);
        publish(c, c->subj_hb, false);
        pthread_mutex_lock(&c->mu);
        uint64_t now = mono_ms();
        sweep(c, now);
        if (c->rw_fire != NULL) {
            pthread_mutex_unlock(&c->mu);
            sx__cluster_fire(c);
            pthread_mutex_lock(&c->mu);
        }
        /* our own row: fresh figures */
        sx_engine_stats st;
        sx_engine_stats_get(c->engine, &st, NULL, 0);
        c->members[0].m.processes = st.live;
        c->members[0].m.load =
            st.workers > 0 ? (double)st.live / st.workers : 0.0;
        c->members[0].heard_ms = now;
        c->members[0].placed = 0;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)c->period_ms * 1000000u;
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        while (!c->stopping && !c->announce &&
               pthread_cond_timedwait(&c->cv, &c->mu, &ts) != ETIMEDOUT)
            ;
        c->announce = false;
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- start, stop, reads ------------------------------------------------- */

static bool name_ok(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n > SX_CLUSTER_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'))
            return false;
    }
    return true;
}

static void cluster_free(sx_cluster *c)
{
    if (c->sub_hb != NULL)
        natsSubscription_Destroy(c->sub_hb);
    if (c->sub_bye != NULL)
        natsSubscription_Destroy(c->sub_bye);
    if (c->sub_msg != NULL)
        natsSubscription_Destroy(c->sub_msg);
    if (c->nc != NULL)
        natsConnection_Destroy(c->nc);
    if (c->opts != NULL)
        natsOptions_Destroy(c->opts);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    sx__cluster_remote_free(c);
    for (size_t i = 0; c->members != NULL && i < c->n_members; i++)
        free(c->members[i].types);
    free(c->members);
    free(c->rx_msgs);
    free(c->rx_topics);
    free(c);
}

/* A start that failed once subscriptions exist: nats.c may be in one of
 * our handlers, so c goes only once the connection is closed (its
 * callbacks done), as in sx_cluster_stop; else it is left allocated. */
static void abandon(sx_cluster *c)
{
    natsConnection_Close(c->nc);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += 5;
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    while (!c->closed && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    bool closed = c->closed;
    pthread_mutex_unlock(&c->mu);
    if (closed)
        cluster_free(c);
}

void sx__cluster_unref(sx_cluster *c)
{
    /* acq_rel: the last one sees every other holder's writes. */
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
        cluster_free(c);
}

int sx_cluster_start(sx_engine *e, const sx_cluster_config *cfg,
                     sx_cluster **out, char *err, size_t cap)
{
    if (err != NULL && cap > 0)
        err[0] = '\0';
    if (e == NULL || cfg == NULL || out == NULL || cfg->url == NULL ||
        cfg->node == 0 || !name_ok(cfg->name) ||
        (cfg->heartbeat_ms != 0 &&
         (cfg->heartbeat_ms < 10 || cfg->heartbeat_ms > 60000)) ||
        (cfg->down_after_ms != 0 &&
         cfg->down_after_ms < 2 * cfg->heartbeat_ms)) {
        if (err != NULL)
            snprintf(err, cap,
                     "cluster: want a NATS URL, a node number from 1, a "
                     "cluster name of 1 to %d letters, digits, '-' or '_', "
                     "a heartbeat from 10 to 60000 ms and a down-after of "
                     "at least two heartbeats",
                     SX_CLUSTER_NAME_MAX);
        return SX_EINVAL;
    }
    /* The cluster becomes the engine's route, which only an engine not
     * started yet takes: asked first, before anything connects. */
    if (sx_engine_set_remote(e, NULL, NULL) != 0) {
        if (err != NULL)
            snprintf(err, cap,
                     "cluster: the engine has started already "
                     "(a cluster joins before sx_engine_start)");
        return SX_ESTATE;
    }
    sx_cluster *c = calloc(1, sizeof *c);
    if (c == NULL)
        return SX_ENOMEM;
    c->engine = e;
    atomic_init(&c->refs, 1);
    snprintf(c->name, sizeof c->name, "%s", cfg->name);
    c->node = cfg->node;
    c->log = cfg->log;
    c->log_user = cfg->log_user;
    c->period_ms = cfg->heartbeat_ms != 0 ? cfg->heartbeat_ms : 500;
    c->down_after_ms =
        cfg->down_after_ms != 0 ? cfg->down_after_ms : 4 * c->period_ms;
    snprintf(c->address, sizeof c->address, "%s",
             cfg->address != NULL ? cfg->address : "");
    snprintf(c->subj_hb, sizeof c->subj_hb, "stepx.%s.hb", c->name);
    snprintf(c->subj_bye, sizeof c->subj_bye, "stepx.%s.bye", c->name);
    snprintf(c->subj_msg, sizeof c->subj_msg, "stepx.%s.n.%u.msg", c->name,
             c->node);
    if (getrandom(&c->inc, sizeof c->inc, 0) != (ssize_t)sizeof c->inc)
        c->inc = ((uint64_t)random() << 32) ^ (uint64_t)random() ^ mono_ms();
    if (c->inc == 0)
        c->inc = 1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    c->members = calloc(MAX_MEMBERS, sizeof *c->members);
    c->rx_msgs = calloc(SX__CLUSTER_RX_BATCH, sizeof *c->rx_msgs);
    c->rx_topics = calloc(SX__CLUSTER_RX_BATCH, sizeof *c->rx_topics);
    if (c->members == NULL || c->rx_msgs == NULL || c->rx_topics == NULL) {
        cluster_free(c);
        return SX_ENOMEM;
    }
    c->n_members = 1;
    c->members[0].m = (sx_cluster_member){ .node = c->node,
                                           .incarnation = c->inc,
                                           .self = true };
    snprintf(c->members[0].m.address, sizeof c->members[0].m.address, "%s",
             c->address);
    /* Our own types (registered before the cluster joins), for placement. */
    {
        const sx_process_type *types[SX__CLUSTER_MAX_TYPES];
        size_t nt = sx_engine_types(e, types, SX__CLUSTER_MAX_TYPES);
        nt = nt < SX__CLUSTER_MAX_TYPES ? nt : SX__CLUSTER_MAX_TYPES;
        c->members[0].types = calloc(nt + 1, sizeof(uint64_t));
        for (size_t i = 0; c->members[0].types != NULL && i < nt; i++)
            c->members[0].types[c->members[0].n_types++] =
                sx__cluster_type_hash(types[i]->name, strlen(types[i]->name));
        sx_engine_config ec;
        c->members[0].workers =
            sx_engine_config_get(e, &ec) == 0 && ec.workers > 0 ? ec.workers
                                                                : 1;
    }
    c->members[0].heard_ms = mono_ms();

    char cname[96];
    snprintf(cname, sizeof cname, "stepxd %s/%u", c->name, c->node);
    natsStatus s = natsOptions_Create(&c->opts);
    if (s == NATS_OK)
        s = natsOptions_SetURL(c->opts, cfg->url);
    if (s == NATS_OK)
        s = natsOptions_SetName(c->opts, cname);
    if (s == NATS_OK && cfg->token != NULL)
        s = natsOptions_SetToken(c->opts, cfg->token);
    if (s == NATS_OK && cfg->credentials != NULL)
        s = natsOptions_SetUserCredentialsFromFiles(c->opts, cfg->credentials,
                                                    NULL);
    /* Our own heartbeats are not delivered back to us. */
    if (s == NATS_OK)
        s = natsOptions_SetNoEcho(c->opts, true);
    /* Each publish is written at once rather than when nats.c's flusher
     * next runs (about a millisecond later): a round trip between two
     * nodes is two publishes. Throughput comes from our batches (a
     * step's sends to one process are one publish), not from the
     * flusher's. */
    if (s == NATS_OK)
        s = natsOptions_SetSendAsap(c->opts, true);
    /* Reconnect for ever, soon: a NATS restart is a pause, not an end. */
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(c->opts, -1);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(c->opts, 100);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(c->opts, 2000);
    if (s == NATS_OK)
        s = natsOptions_SetDisconnectedCB(c->opts, on_disconnected, c);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectedCB(c->opts, on_reconnected, c);
    if (s == NATS_OK)
        s = natsOptions_SetClosedCB(c->opts, on_closed, c);
    if (s == NATS_OK)
        s = natsConnection_Connect(&c->nc, c->opts);
    if (s != NATS_OK) {
        if (err != NULL)
            snprintf(err, cap, "cluster: cannot connect to NATS at %s: %s",
                     cfg->url, natsStatus_GetText(s));
        cluster_free(c);
        return s == NATS_NO_MEMORY ? SX_ENOMEM : -ECONNREFUSED;
    }
    /* relaxed: a figure. */
    atomic_store_explicit(&c->connected, true, memory_order_relaxed);
    s = natsConnection_Subscribe(&c->sub_hb, c->nc, c->subj_hb, on_hb, c);
    if (s == NATS_OK)
        s = natsConnection_Subscribe(&c->sub_bye, c->nc, c->subj_bye, on_bye,
                                     c);
    if (s == NATS_OK)
        s = natsSubscription_SetOnCompleteCB(c->sub_hb, on_sub_done, c);
    if (s == NATS_OK)
        s = natsSubscription_SetOnCompleteCB(c->sub_bye, on_sub_done, c);
    if (s == NATS_OK)
        s = natsConnection_Subscribe(&c->sub_msg, c->nc, c->subj_msg,
                                     sx__cluster_on_node, c);
    if (s == NATS_OK)
        s = natsSubscription_SetOnCompleteCB(c->sub_msg, on_sub_done, c);
    /* Frames for our processes wait here while the engine takes them:
     * nats.c's default (65,536 frames) drops a burst that a busy node
     * would have taken a moment later. Past this a node is overloaded;
     * what nats.c drops then is counted (sx_cluster_stats.dropped). */
    if (s == NATS_OK)
        s = natsSubscription_SetPendingLimits(c->sub_msg, 4 * 1024 * 1024,
                                              1024 * 1024 * 1024);
    if (s == NATS_OK)
        s = natsConnection_Flush(c->nc);
    if (s != NATS_OK) {
        if (err != NULL)
            snprintf(err, cap, "cluster: cannot subscribe: %s",
                     natsStatus_GetText(s));
        abandon(c);
        return -EIO;
    }
    /* Whatever the engine has for other nodes comes to us; the engine
     * holds a reference until it is freed (r_release). relaxed: nothing
     * else holds c yet. */
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
    int rc = sx_engine_set_remote(e, &sx__cluster_ops, c);
    if (rc != 0) {
        atomic_fetch_sub_explicit(&c->refs, 1, memory_order_relaxed);
        if (err != NULL)
            snprintf(err, cap,
                     "cluster: the engine has started already "
                     "(a cluster joins before sx_engine_start)");
        abandon(c);
        return rc;
    }
    if (pthread_create(&c->thread, NULL, beat, c) != 0) {
        sx_engine_set_remote(e, NULL, NULL); /* its reference goes */
        abandon(c);
        return SX_ENOMEM;
    }
    c->thread_started = true;
    *out = c;
    return 0;
}

void sx_cluster_stop(sx_cluster *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->thread_started)
        pthread_join(c->thread, NULL);
    /* A clean stop: the peers declare us down at once. */
    publish(c, c->subj_bye, true);
    natsConnection_FlushTimeout(c->nc, 500);
    /* nats.c may still be in a handler or a connection callback of ours
     * when these return: c is freed only once it says it is done with
     * both subscriptions (on_sub_done) and the connection (on_closed). */
    natsSubscription_Unsubscribe(c->sub_hb);
    natsSubscription_Unsubscribe(c->sub_bye);
    natsSubscription_Unsubscribe(c->sub_msg);
    natsConnection_Close(c->nc);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += 5;
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    while ((c->subs_done < 3 || !c->closed) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    bool done = c->subs_done >= 3 && c->closed;
    /* Nothing more comes from other nodes: every watch still waiting for
     * one is answered now. */
    sx__cluster_lose(c, 0, SX__LOST_CLOSED);
    pthread_mutex_unlock(&c->mu);
    sx__cluster_fire(c);
    if (done)
        sx__cluster_unref(c);
    /* else: nats.c never said so in 5 s; c is left allocated rather than
     * freed under a callback that may still come (a leak at exit, never
     * a use after free). */
}

size_t sx_cluster_members(sx_cluster *c, sx_cluster_member *out, size_t cap)
{
    if (c == NULL)
        return 0;
    pthread_mutex_lock(&c->mu);
    uint64_t now = mono_ms();
    size_t n = c->n_members;
    for (size_t i = 0; i < n && i < cap; i++) {
        out[i] = c->members[i].m;
        out[i].last_heard_ms = now - c->members[i].heard_ms;
        out[i].reconnects =
            i == 0 ? /* relaxed: a figure. */
                atomic_load_explicit(&c->reconnects, memory_order_relaxed)
                   : c->members[i].epoch;
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

void sx_cluster_stats_get(sx_cluster *c, sx_cluster_stats *out)
{
    memset(out, 0, sizeof *out);
    if (c == NULL)
        return;
    /* relaxed: figures. */
    out->heartbeats_sent =
        atomic_load_explicit(&c->hb_sent, memory_order_relaxed);
    out->heartbeats_received =
        atomic_load_explicit(&c->hb_received, memory_order_relaxed);
    out->bad_messages =
        atomic_load_explicit(&c->bad_messages, memory_order_relaxed);
    out->downs = atomic_load_explicit(&c->downs, memory_order_relaxed);
    out->reconnects =
        atomic_load_explicit(&c->reconnects, memory_order_relaxed);
    out->messages_out =
        atomic_load_explicit(&c->msgs_out, memory_order_relaxed);
    out->messages_in = atomic_load_explicit(&c->msgs_in, memory_order_relaxed);
    out->messages_undelivered =
        atomic_load_explicit(&c->msgs_undelivered, memory_order_relaxed);
    int64_t dropped = 0;
    if (c->sub_msg != NULL &&
        natsSubscription_GetDropped(c->sub_msg, &dropped) == NATS_OK &&
        dropped > 0)
        out->dropped = (uint64_t)dropped;
    out->batches_out =
        atomic_load_explicit(&c->batches_out, memory_order_relaxed);
    out->batches_in =
        atomic_load_explicit(&c->batches_in, memory_order_relaxed);
    out->watches_out =
        atomic_load_explicit(&c->watches_out, memory_order_relaxed);
    out->watches_answered =
        atomic_load_explicit(&c->watches_answered, memory_order_relaxed);
    out->watches_lost =
        atomic_load_explicit(&c->watches_lost, memory_order_relaxed);
    out->watches_in =
        atomic_load_explicit(&c->watches_in, memory_order_relaxed);
    out->connected = atomic_load_explicit(&c->connected, memory_order_relaxed);
    out->node = c->node;
    out->incarnation = c->inc;
    snprintf(out->name, sizeof out->name, "%s", c->name);
}

/* relay/ops_info.c — the operations that report and change nothing: ps
 * (the processes, cut to what fits in a frame), stats (the engine's and
 * the server's figures) and types (the registered types and their
 * methods).
 *
 * Threads: the server's loop thread only. See relay/server.h and
 * docs/RELAY.md ("Ops, as this server answers them").
 */
#include "relay/server.h"

#include <stdio.h>
#include <stdlib.h>

/* Packs the array of ps entries for the first n of info; ends (when not
 * NULL) gets the body's length after each entry. */
static void ps_entries(sx_pack *pk, const sx_process_info *info, int n,
                       size_t *ends)
{
    sx_pack_array(pk, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        char txt[SX_PID_TEXT_MAX];
        sx_pid_format(info[i].pid, txt, sizeof(txt));
        /* A job's attempt, and for one waiting for its restart when and
         * why (docs/PROTOCOL.md, ps). */
        bool job = info[i].attempts > 0;
        bool waits = info[i].restart_in_ms >= 0;
        bool why = info[i].last_error[0] != 0;
        sx_pack_map(pk, 5 + job + waits + why);
        if (job) {
            sx_pack_str(pk, "attempts");
            sx_pack_uint(pk, info[i].attempts);
        }
        if (waits) {
            sx_pack_str(pk, "restart_in_ms");
            sx_pack_uint(pk, (uint64_t)info[i].restart_in_ms);
        }
        if (why) {
            sx_pack_str(pk, "last_error");
            sx__relay_pack_text(pk, info[i].last_error);
        }
        sx_pack_str(pk, "pid");
        sx_pack_str(pk, txt);
        sx_pack_str(pk, "type");
        sx__relay_pack_name(pk, info[i].type);
        sx_pack_str(pk, "method");
        sx__relay_pack_name(pk, info[i].method); /* NULL packs nil */
        sx_pack_str(pk, "state");
        sx_pack_str(pk, sx_pstate_name(info[i].state));
        sx_pack_str(pk, "steps");
        sx_pack_uint(pk, info[i].steps);
        if (ends != NULL)
            ends[i] = pk->len;
    }
}

/* Packs the ps reply for the first n entries of info into srv->pk. */
static sx_pack *ps_pack(sx__relay_conn *c, uint64_t id,
                        const sx_process_info *info, int n, size_t *ends)
{
    sx_pack *pk = sx__relay_reply_begin(c, id, true, 1);
    sx_pack_str(pk, "processes");
    ps_entries(pk, info, n, ends);
    return pk;
}

/* A ps of another node (field "node"), answered when it answers. */
typedef struct {
    sx__relay_conn *c;  /* a reference */
    sx__relay_hub *hub; /* a reference */
    uint64_t id;
    size_t max_frame;
} remote_ps;

/* [a nats.c thread, or the loop] The other node's listing, or why there
 * is none: the reply goes through the hub. */
static void remote_ps_answer(void *user, int rc, const sx_process_info *info,
                             size_t n, const char *msg)
{
    remote_ps *rp = user;
    sx_pack pk;
    sx_pack_init(&pk);
    for (;;) {
        sx_pack_map(&pk, 3);
        sx_pack_str(&pk, "id");
        sx_pack_uint(&pk, rp->id);
        sx_pack_str(&pk, "ok");
        sx_pack_bool(&pk, rc == 0);
        if (rc != 0) {
            sx__relay_pack_error(&pk, sx_wire_code(rc),
                                 msg != NULL ? msg : sx_strerror(rc));
            break;
        }
        sx_pack_str(&pk, "processes");
        ps_entries(&pk, info, (int)n, NULL);
        if (pk.err != 0 || pk.len <= rp->max_frame || n == 0)
            break;
        n = n / 2; /* as a local ps: cut to what fits in a frame */
        sx_pack_reset(&pk);
    }
    sx__relay_post_answer(rp->c, rp->hub, &pk);
    free(rp);
}

/* ps with "node": that node's processes, through the cluster. */
static void ps_remote(sx__relay_conn *c, uint64_t id, uint64_t node,
                      uint64_t limit)
{
    sx_server *s = c->srv;
    if (s->cluster == NULL) {
        sx__relay_reply_error(c, id, "noconnection",
                              "this daemon is in no cluster (stepxd --nats)");
        return;
    }
    remote_ps *rp = malloc(sizeof *rp);
    if (rp == NULL) {
        sx__relay_reply_error(c, id, "internal", "out of memory");
        return;
    }
    *rp = (remote_ps){ c, s->hub, id, s->max_frame };
    sx__relay_conn_ref(c);
    sx__relay_hub_ref(s->hub);
    if (sx_cluster_ps(s->cluster, (uint32_t)node, limit, remote_ps_answer,
                      rp) != 0) {
        sx__relay_conn_unref(c);
        sx__relay_hub_unref(s->hub);
        free(rp);
        sx__relay_reply_error(c, id, "internal", "out of memory");
    }
}

void sx__relay_op_ps(sx__relay_conn *c, uint64_t id, sx_payload req)
{
    uint64_t limit = SX_RELAY_PS_DEFAULT;
    int rc = sx__relay_field_uint(req, "limit", &limit);
    if (rc == SX_EPROTO) {
        sx__relay_reply_bad_field(c, id, "limit", 2, "a non-negative integer");
        return;
    }
    uint64_t node;
    rc = sx__relay_field_uint(req, "node", &node);
    if (rc == 0 && (node == 0 || node > UINT32_MAX)) {
        sx__relay_reply_error(c, id, "bad_request",
                              "field \"node\": want a node number from 1 "
                              "to 4294967295");
        return;
    }
    if (rc == SX_EPROTO) {
        sx__relay_reply_bad_field(c, id, "node", 2, "a node number");
        return;
    }
    if (rc == 0 && node != c->srv->node) {
        ps_remote(c, id, node, limit);
        return;
    }
    /* Grows the buffer until the listing fits or reaches limit. */
    size_t cap = limit < 256 ? (size_t)limit : 256;
    sx_process_info *info = NULL;
    int n = 0;
    for (;;) {
        sx_process_info *ni = realloc(info, (cap > 0 ? cap : 1) * sizeof(*ni));
        if (ni == NULL) {
            free(info);
            sx__relay_reply_error(c, id, "internal", "out of memory");
            return;
        }
        info = ni;
        n = sx_engine_list(c->srv->engine, info, cap);
        if (n < 0)
            n = 0;
        if ((size_t)n < cap || cap >= limit || cap >= (size_t)INT32_MAX / 2)
            break;
        cap = cap * 2 < limit ? cap * 2 : (size_t)limit;
    }
    /* The reply must fit in a frame (a client refuses a longer one, and
     * would lose its connection with every request in flight): a listing
     * too long for it is cut to the processes that fit, as `limit` would
     * have cut it. ends[i]: the body's length after entry i. */
    size_t *ends = n > 0 ? malloc((size_t)n * sizeof(*ends)) : NULL;
    if (n > 0 && ends == NULL) {
        free(info);
        sx__relay_reply_error(c, id, "internal", "out of memory");
        return;
    }
    sx_pack *pk = ps_pack(c, id, info, n, ends);
    if (pk->err == 0 && pk->len > c->srv->max_frame) {
        int fit = 0;
        while (fit < n && ends[fit] <= c->srv->max_frame)
            fit++;
        ps_pack(c, id, info, fit, NULL);
    }
    free(ends);
    free(info);
    sx__relay_conn_reply(c);
}

static void kv(sx_pack *pk, const char *k, uint64_t v)
{
    sx_pack_str(pk, k);
    sx_pack_uint(pk, v);
}

void sx__relay_op_stats(sx__relay_conn *c, uint64_t id, sx_payload req)
{
    (void)req;
    sx_server *s = c->srv;
    sx_engine_stats st;
    sx_worker_stats *w = calloc(SX_MAX_WORKERS, sizeof(*w));
    if (w == NULL ||
        sx_engine_stats_get(s->engine, &st, w, SX_MAX_WORKERS) != 0) {
        free(w);
        sx__relay_reply_error(c, id, "internal", "stats unavailable");
        return;
    }
    unsigned nw = st.workers < SX_MAX_WORKERS ? st.workers : SX_MAX_WORKERS;
    uint64_t steps = 0, steals = 0, stolen = 0, parks = 0, wakeups = 0;
    for (unsigned i = 0; i < nw; i++) {
        steps += w[i].steps;
        steals += w[i].steals;
        stolen += w[i].stolen;
        parks += w[i].parks;
        wakeups += w[i].wakeups;
    }
    sx_server_stats ss;
    sx_server_stats_get(s, &ss);
    sx_pack *pk = sx__relay_reply_begin(c, id, true, 1);
    sx_pack_str(pk, "stats");
    sx_pack_map(pk, 42);
    kv(pk, "live", st.live);
    kv(pk, "submitted", st.submitted);
    kv(pk, "completed", st.completed);
    kv(pk, "failed", st.failed);
    kv(pk, "terminated", st.terminated);
    kv(pk, "cancelled", st.cancelled);
    kv(pk, "deadlines", st.deadlines);
    kv(pk, "steps", steps);
    kv(pk, "messages", st.messages);
    kv(pk, "dead_letters", st.dead_letters);
    kv(pk, "steals", steals);
    kv(pk, "stolen", stolen);
    kv(pk, "parks", parks);
    kv(pk, "wakeups", wakeups);
    kv(pk, "global_queue", st.global_queue);
    kv(pk, "parked", st.parked);
    kv(pk, "workers", st.workers);
    kv(pk, "io_inflight", st.io_inflight);
    kv(pk, "io_ops", st.io_ops);
    kv(pk, "timeouts", st.timeouts);
    kv(pk, "sleeps", st.sleeps);
    kv(pk, "slots", st.slots);
    kv(pk, "outcomes", st.outcomes);
    kv(pk, "outcome_bytes", st.outcome_bytes);
    kv(pk, "store_commits", st.store_commits);
    kv(pk, "store_records", st.store_records);
    kv(pk, "store_failed", st.store_failed);
    kv(pk, "restarting", st.restarting);
    kv(pk, "checkpoints", st.checkpoints);
    kv(pk, "checkpoint_us", st.checkpoint_us);
    kv(pk, "relay_connections", ss.connections);
    kv(pk, "relay_accepted", ss.accepted);
    kv(pk, "relay_requests", ss.requests);
    kv(pk, "relay_bad_frames", ss.bad_frames);
    kv(pk, "relay_slow_drops", ss.slow_drops);
    kv(pk, "relay_pushes", ss.pushes);
    kv(pk, "relay_watches", ss.watches);
    kv(pk, "relay_waits", ss.waits);
    kv(pk, "relay_push_drops", ss.push_drops);
    kv(pk, "relay_unauthenticated", ss.unauthenticated);
    kv(pk, "relay_auth_closed", ss.auth_closed);
    sx_pack_str(pk, "per_worker");
    sx_pack_array(pk, nw);
    for (unsigned i = 0; i < nw; i++) {
        sx_pack_map(pk, 7);
        kv(pk, "steps", w[i].steps);
        kv(pk, "steals", w[i].steals);
        kv(pk, "stolen", w[i].stolen);
        kv(pk, "parks", w[i].parks);
        kv(pk, "wakeups", w[i].wakeups);
        kv(pk, "global_pops", w[i].global_pops);
        kv(pk, "timeout_finds", w[i].timeout_finds);
    }
    free(w);
    sx__relay_conn_reply(c);
}

void sx__relay_op_types(sx__relay_conn *c, uint64_t id, sx_payload req)
{
    (void)req;
    sx_server *s = c->srv;
    sx_pack *pk = sx__relay_reply_begin(c, id, true, 1);
    sx_pack_str(pk, "types");
    sx_pack_array(pk, (uint32_t)s->n_types);
    for (size_t i = 0; i < s->n_types; i++) {
        const sx_process_type *t = s->types[i];
        uint32_t nm = 0;
        while (t->methods != NULL && t->methods[nm] != NULL)
            nm++;
        sx_pack_map(pk, 2);
        sx_pack_str(pk, "name");
        sx__relay_pack_name(pk, t->name);
        sx_pack_str(pk, "methods");
        sx_pack_array(pk, nm);
        for (uint32_t j = 0; j < nm; j++)
            sx__relay_pack_name(pk, t->methods[j]);
    }
    sx__relay_conn_reply(c);
}

/* nodes: the cluster's members (docs/CLUSTER.md), this node first; a
 * daemon in no cluster answers itself alone, with "cluster" nil. */
void sx__relay_op_nodes(sx__relay_conn *c, uint64_t id, sx_payload req)
{
    (void)req;
    sx_server *s = c->srv;
    sx_cluster_member one, *m = &one;
    size_t n = 1;
    sx_cluster_stats cs;
    sx_cluster_stats_get(s->cluster, &cs);
    if (s->cluster != NULL) {
        size_t cap = 64;
        for (;;) {
            m = malloc(cap * sizeof *m);
            if (m == NULL) {
                sx__relay_reply_error(c, id, "internal", "out of memory");
                return;
            }
            n = sx_cluster_members(s->cluster, m, cap);
            if (n <= cap)
                break;
            free(m);
            cap = n + 16;
        }
    } else {
        sx_engine_config cfg;
        sx_engine_config_get(s->engine, &cfg);
        sx_engine_stats st;
        sx_engine_stats_get(s->engine, &st, NULL, 0);
        one = (sx_cluster_member){ .node = cfg.node,
                                   .incarnation = cfg.host,
                                   .processes = st.live,
                                   .load = st.workers > 0
                                               ? (double)st.live / st.workers
                                               : 0.0,
                                   .self = true };
    }
    sx_pack *pk = sx__relay_reply_begin(c, id, true, 3);
    sx_pack_str(pk, "cluster");
    if (s->cluster != NULL)
        sx_pack_str(pk, cs.name);
    else
        sx_pack_nil(pk);
    sx_pack_str(pk, "membership");
    if (s->cluster != NULL)
        sx_pack_fmt(
            pk,
            "{s:b, s:U, s:U, s:U, s:U, s:U, s:U, s:U, s:U, s:U, s:U, "
            "s:U, s:U, s:U, s:U, s:U}",
            "connected", (int)cs.connected, "heartbeats_sent",
            cs.heartbeats_sent, "heartbeats_received", cs.heartbeats_received,
            "bad_messages", cs.bad_messages, "downs", cs.downs, "reconnects",
            cs.reconnects, "messages_out", cs.messages_out, "messages_in",
            cs.messages_in, "messages_undelivered", cs.messages_undelivered,
            "batches_out", cs.batches_out, "batches_in", cs.batches_in,
            "watches_out", cs.watches_out, "watches_answered",
            cs.watches_answered, "watches_lost", cs.watches_lost, "watches_in",
            cs.watches_in, "dropped", cs.dropped);
    else
        sx_pack_nil(pk);
    sx_pack_str(pk, "nodes");
    sx_pack_array(pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        char inc[24];
        snprintf(inc, sizeof inc, "%llu", (unsigned long long)m[i].incarnation);
        sx_pack_fmt(pk, "{s:U, s:s, s:s, s:U, s:d, s:U, s:U, s:U, s:U, s:b}",
                    "node", (uint64_t)m[i].node, "incarnation", inc, "address",
                    m[i].address, "processes", m[i].processes, "load",
                    m[i].load, "last_heard_ms", m[i].last_heard_ms,
                    "messages_out", m[i].messages_out, "messages_in",
                    m[i].messages_in, "reconnects", m[i].reconnects, "self",
                    (int)m[i].self);
    }
    if (m != &one)
        free(m);
    sx__relay_conn_reply(c);
}

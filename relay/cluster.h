/* relay/cluster.h — the cluster's internal data, shared by relay/cluster.c
 * (membership: NATS connection, heartbeats, the member table, start and
 * stop) and relay/cluster_remote.c (what crosses nodes: messages, watches
 * of remote processes, terminates and links). Never installed. The design
 * is docs/CLUSTER.md.
 *
 * relay/cluster_place.c reads the members' types and picks where a placed
 * submit goes.
 *
 * Threads: nats.c's own (its reader delivers our subscriptions: on_hb,
 * on_bye, sx__cluster_on_node); our heartbeat thread (beat); the engine's
 * threads calling the remote route (sx__cluster_ops); any thread for the
 * reads. Everything marked [mu] is under sx_cluster.mu.
 */
#ifndef SX_RELAY_CLUSTER_H
#define SX_RELAY_CLUSTER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <nats/nats.h>

#include "relay/stepx/relay.h"

#define SX__CLUSTER_MAX_MEMBERS 1024

/* The most type names a heartbeat carries (placement looks them up). */
#define SX__CLUSTER_MAX_TYPES 256

typedef struct {
    sx_cluster_member m;
    uint64_t heard_ms; /* monotonic, when last heard */
    /* Its types (hashes of their names, sx__cluster_type_hash), its
     * workers, and the submits we placed on it since its last heartbeat
     * (so that a burst of least-loaded placements spreads). Owned. */
    uint64_t *types;
    uint32_t n_types, workers;
    uint64_t placed;
    /* Its NATS connection's epoch (reconnects so far): a new one means
     * what we sent it while it was away may be gone. */
    uint64_t epoch;
} sx__member;

/* A watch of a process of another node, waiting for that node's answer
 * (cluster_remote.c): in the table by id, [mu]. */
typedef struct sx__rwatch {
    uint64_t id;
    uint32_t node;
    sx_pid target;
    sx_remote_watch *w; /* or NULL: a submit with no watch */
    /* A submit waiting for its node's answer: fn (may be NULL) gets it;
     * then, with w, the entry stays as the watch of the new process. */
    bool submitting;
    sx_submit_fn fn;
    void *fn_user;
    /* A ps of that node waiting for its answer (no w then). */
    sx_cluster_ps_fn ps_fn;
    struct sx__rwatch *next; /* bucket chain, or the list to fire */
} sx__rwatch;

struct sx_cluster {
    sx_engine *engine;
    char name[SX_CLUSTER_NAME_MAX + 1];
    uint32_t node;
    uint64_t inc;
    char address[128];
    uint32_t period_ms, down_after_ms;
    char subj_hb[96], subj_bye[96], subj_msg[112];
    void (*log)(void *user, const char *line);
    void *log_user;

    natsOptions *opts;
    natsConnection *nc;
    natsSubscription *sub_hb, *sub_bye, *sub_msg;

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* CLOCK_MONOTONIC; signalled by stop */
    bool stopping;       /* [mu] */
    sx__member *members; /* [mu]; members[0] is this node */
    size_t n_members;    /* [mu] */
    /* [mu] nats.c's last calls into us are over: the subscriptions whose
     * handlers have returned for good, and the connection closed (its
     * callbacks done). stop waits for them before freeing. */
    int subs_done;
    bool closed;
    /* [mu] A member we did not know joined; the heartbeat thread answers
     * with ours at once, so that a newcomer knows every member within a
     * round trip rather than a heartbeat period. */
    bool announce;

    /* Remote watches [mu]: by id in buckets (a power of two), and those
     * taken out to be answered with an error (a node down, the link to
     * NATS lost) once mu is let go: sx__cluster_fire. */
    sx__rwatch **rw_buckets;
    size_t rw_nb, rw_count;
    uint64_t rw_next_id;
    uint64_t rr;         /* [mu] SX_PLACE_ANY's turn */
    sx__rwatch *rw_fire; /* its ids say why (SX__LOST_*) */

    /* References: 1 for the owner (sx_cluster_stop lets it go), 1 per
     * watch of one of our processes for another node in flight (its
     * callback publishes the outcome). The last one frees c. acq_rel on
     * the decrement (the freer sees every earlier user's writes). */
    _Atomic uint64_t refs;

    /* Figures (relaxed; each has one writer or is a counter). */
    _Atomic uint64_t hb_sent, hb_received, bad_messages, downs, reconnects;
    /* Messages for processes: sent to other nodes, received for ours, and
     * received ones the engine refused (no such process, ...); the NATS
     * messages that carried them each way. */
    _Atomic uint64_t msgs_out, msgs_in, msgs_undelivered, batches_out,
        batches_in;
    /* Remote watches: set on other nodes' processes, answered by them or
     * with noconnection; set on ours by other nodes. */
    _Atomic uint64_t watches_out, watches_answered, watches_lost, watches_in;
    _Atomic bool connected;

    /* The batch of received messages handed to the engine at once, and
     * their topics with a NUL: used by the one nats.c thread that
     * delivers our node subject (sx__cluster_on_node). */
    sx_message *rx_msgs;
    char (*rx_topics)[256];
};

/* Messages handed to the engine per sx_engine_send_many. */
#define SX__CLUSTER_RX_BATCH 256

static inline uint64_t sx__cluster_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* [mu] The member with this number, or NULL. */
sx__member *sx__cluster_find(sx_cluster *c, uint32_t node);
/* cluster_place.c */
/* A type name's hash, as members' types are kept. */
uint64_t sx__cluster_type_hash(const char *name, size_t len);
/* [mu] The types and workers a heartbeat (p) names, into x (its old
 * ones go). */
void sx__cluster_hb_types(sx__member *x, sx_payload p);
/* [mu] The member to run type on for place (SX_PLACE_ANY: the next of
 * those that have it, in turn; SX_PLACE_LEAST_LOADED: the one with the
 * fewest live processes per worker, counting our placements since its
 * last heartbeat), this node included; NULL when none has it. */
sx__member *sx__cluster_pick(sx_cluster *c, const char *type, int place);

/* cluster_remote.c */
extern const sx_remote_ops sx__cluster_ops;
/* nats.c's handler of stepx.<c>.n.<node>.msg (our node's subject). */
void sx__cluster_on_node(natsConnection *nc, natsSubscription *sub,
                         natsMsg *msg, void *closure);
/* Why remote watches are taken out (their answer's message). */
enum { SX__LOST_DOWN = 1, SX__LOST_NATS, SX__LOST_CLOSED };
/* [mu] Takes out every remote watch of node (0: of every node) to be
 * answered SX_ENOCONNECTION for reason (SX__LOST_*). */
void sx__cluster_lose(sx_cluster *c, uint32_t node, int reason);
/* Answers what sx__cluster_lose took out. Not under mu. */
void sx__cluster_fire(sx_cluster *c);
/* Frees the table (every watch answered already). */
void sx__cluster_remote_free(sx_cluster *c);
/* Lets a reference go; the last frees c (cluster.c). */
void sx__cluster_unref(sx_cluster *c);

#endif

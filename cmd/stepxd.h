/* cmd/stepxd.h — what stepxd's two files share: its options, and
 * parsing them (cmd/stepxd_args.c) for main (cmd/stepxd.c).
 */
#ifndef SX_CMD_STEPXD_H
#define SX_CMD_STEPXD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stepx/stepx.h>

#define MAX_LOADS 32

/* What a result leaves of a frame for the other fields of the frames that
 * carry it (a wait reply: id, ok, steps; an exit push: pid, ok): far more
 * than they take, about 100 bytes. --max-result may be at most the frame
 * limit minus this. */
#define RESULT_ROOM 1024
#define KEEP_OUTCOME_BYTES_DEFAULT ((uint64_t)64 << 20) /* 64 MiB */
#define MAX_RESULT_DEFAULT ((uint64_t)4 << 20)          /* 4 MiB */

/* A shared object given with --load exports this function, which
 * registers its process types (and commands) on the engine before start;
 * it returns 0 or a negative SX_E* code. */
#define PLUGIN_SYMBOL "stepx_plugin_register"
typedef int (*plugin_fn)(sx_engine *e);

typedef struct {
    const char *socket_path;
    /* Where socket_path came from, as messages name it: "--socket ",
     * "STEPX_SOCKET=" or "the default socket ". */
    const char *socket_from;
    const char *listen;
    const char *token;
    const char *metrics;
    const char *loads[MAX_LOADS];
    size_t n_loads;
    unsigned workers, io_loops;
    size_t max_processes, keep_outcomes, max_frame;
    size_t max_output, max_connections, max_waits, max_unauth;
    uint64_t auth_timeout_ms;
    size_t keep_outcome_bytes, max_result; /* 0: not given */
    size_t max_slots;                      /* meaningful when max_slots_set */
    bool max_slots_set;
    int64_t stop_deadline_ms;
    uint32_t node;
    uint32_t incarnation;  /* 0: draw one */
    const char *state_dir; /* NULL: --ephemeral */
    bool ephemeral, sync_full;
    bool nats_open; /* --nats-open: no NATS credentials, knowingly */
    uint64_t state_max_bytes;
    /* The cluster (docs/CLUSTER.md): NULL nats_url: none. */
    const char *nats_url, *cluster, *nats_token, *nats_creds;
    uint32_t heartbeat_ms, down_after_ms; /* 0: defaults */
    bool node_set;
} options;

/* Parses argv into o (zeroed by the caller), saying what is wrong on
 * stderr: 0, or the exit status (2); --help prints and exits 0. */
int sx__stepxd_args(int argc, char **argv, options *o);

#endif

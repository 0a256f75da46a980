/* cmd/stepxd_args.c — stepxd's command line: the options, their
 * checks, and the defaults that depend on the machine (the state
 * directory). main is cmd/stepxd.c.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "cmd/stepxd.h"
#include "process/hostport.h"

/* Whether every server of a NATS URL list ("nats://h:p,nats://h2:p")
 * is on this machine (a loopback address or localhost), and none carries
 * credentials of its own (user:password@ counts as credentials: then
 * the URL is let through, as it says who may connect). */
static bool nats_local(const char *urls)
{
    const char *p = urls;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        char one[512];
        if (n >= sizeof one)
            return false;
        memcpy(one, p, n);
        one[n] = '\0';
        char *h = strstr(one, "://");
        h = h != NULL ? h + 3 : one;
        char *at = strchr(h, '@');
        if (at != NULL)
            return true; /* credentials in the URL */
        char host[256];
        size_t hl;
        if (h[0] == '[') { /* [::1]:4222 */
            char *close = strchr(h, ']');
            hl = close != NULL ? (size_t)(close - h - 1) : 0;
            h++;
        } else {
            hl = strcspn(h, ":/");
        }
        if (hl == 0 || hl >= sizeof host)
            return false;
        memcpy(host, h, hl);
        host[hl] = '\0';
        if (strcmp(host, "localhost") != 0 && strcmp(host, "::1") != 0 &&
            strncmp(host, "127.", 4) != 0)
            return false;
        p = end != NULL ? end + 1 : p + n;
    }
    return true;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: stepxd [options]\n"
               "  --socket PATH        Unix socket to listen on (default: "
               "$STEPX_SOCKET or /tmp/stepx-$UID.sock)\n"
               "  --listen HOST:PORT   also listen on TCP (loopback unless "
               "--token is given);\n"
               "                       HOST: an IPv4 address, a name or "
               "[IPv6]; PORT 0: a free one\n"
               "  --token TOKEN        clients must send it in hello\n"
               "  --workers N          worker threads (default: one per CPU)\n"
               "  --io-loops N         libuv loop threads for commands "
               "(default 1)\n"
               "  --max-processes N    refuse submits beyond N live processes "
               "(exact; a shared\n"
               "                       count on every spawn and finish; "
               "default 0: none)\n"
               "  --max-slots N        cap the process table at N slots "
               "(processes and\n"
               "                       connections; default: one per 4 KiB "
               "of memory; 0: none)\n"
               "  --keep-outcomes N    finished outcomes kept for wait "
               "(default 10000)\n"
               "  --keep-outcome-bytes BYTES\n"
               "                       bytes of results and error messages "
               "kept for wait; past it the\n"
               "                       oldest outcomes go first (default "
               "64 MiB)\n"
               "  --max-result BYTES   largest result a process may finish "
               "with; a bigger one\n"
               "                       finishes it with too_large (default "
               "4 MiB, and at most\n"
               "                       --max-frame minus 1024)\n"
               "  --stop-deadline MS   on SIGINT/SIGTERM/SIGHUP, wait this "
               "long before terminating (default 5000;\n"
               "                       a second signal terminates at once)\n"
               "  --node N             this engine's node number in PIDs\n"
               "  --incarnation N      the host part of this run's PIDs, "
               "1 to 4294967295\n"
               "                       (default: random, new for every run)\n"
               "  --load LIB.so        load process types from a shared object "
               "(exports " PLUGIN_SYMBOL "(sx_engine *)); repeatable\n"
               "  --metrics HOST:PORT  serve Prometheus metrics at "
               "http://HOST:PORT/metrics\n"
               "  --nats URL           join a cluster through this NATS "
               "server (docs/CLUSTER.md);\n"
               "                       needs --node N, unique in the "
               "cluster\n"
               "  --cluster NAME       the cluster's name (default stepx)\n"
               "  --heartbeat MS       how often this node says it is alive "
               "(default 500)\n"
               "  --down-after MS      a node silent this long is down "
               "(default 4 heartbeats)\n"
               "  --nats-token T, --nats-creds FILE  NATS credentials "
               "(the token also from\n"
               "                       $STEPX_NATS_TOKEN); a NATS server "
               "not on this machine\n"
               "                       needs one, or --nats-open\n"
               "  --max-frame BYTES    largest frame accepted and sent "
               "(default 16 MiB,\n"
               "                       at least 4096)\n"
               "  --max-output BYTES   unsent output per connection past "
               "which messages to its\n"
               "                       mailbox are dropped (told with a "
               "`dropped` push;\n"
               "                       default 64 MiB; twice this closes "
               "the connection)\n"
               "  --max-connections N  clients connected (with --token: "
               "past hello) (default 1024)\n"
               "  --max-waits N        waits and subscribes pending in the "
               "daemon (default 262144)\n"
               "  --max-unauthenticated N  with --token: connections not yet "
               "past hello;\n"
               "                       the oldest is closed to make room "
               "(default 64)\n"
               "  --auth-timeout MS    with --token: time to send hello "
               "(default 10000)\n"
               "  --state-dir DIR      keep jobs and outcomes in DIR/stepx.db "
               "(default:\n"
               "                       $STEPX_STATE_DIR, else /var/lib/stepx "
               "as root, else\n"
               "                       $XDG_STATE_HOME/stepx or "
               "~/.local/state/stepx)\n"
               "  --ephemeral          keep everything in memory: a crash "
               "loses every job\n"
               "  --sync normal|full   full: sync every commit to the disk, "
               "so a power loss\n"
               "                       loses nothing acknowledged (default "
               "normal: a crash of\n"
               "                       stepxd loses nothing)\n"
               "  --state-max-bytes BYTES\n"
               "                       the database's largest size; past it "
               "submits fail with\n"
               "                       `storage` (default: no limit)\n"
               "  --help               this text\n");
}

/* Parses an unsigned number in [min, max]; false if it is not one. */
static bool parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != 0 || s[0] == '-' || v < min ||
        v > max)
        return false;
    *out = v;
    return true;
}

/* --listen and --metrics: HOST:PORT by the rules every part of stepx
 * shares (process/hostport.h; port 0 picks a free one), so that a bad one
 * is said with what is wrong rather than as the server's SX_EINVAL. */
static bool address_ok(const char *opt, const char *v)
{
    sx__hostport hp;
    const char *why =
        sx__hostport_parse(v, strlen(v), SX__HOSTPORT_PORT_ZERO, 0, &hp);
    if (why == NULL)
        return true;
    fprintf(stderr,
            "stepxd: %s '%s': %s (expected HOST:PORT: an IPv4 address, a "
            "name or an IPv6 address in brackets, and a port from 0 to "
            "65535, e.g. 127.0.0.1:7070 or [::1]:7070)\n",
            opt, v, why);
    return false;
}

/* The state directory when --state-dir is not given (see the top), or
 * NULL when none can be named. */
static const char *default_state_dir(void)
{
    static char buf[PATH_MAX];
    const char *env = getenv("STEPX_STATE_DIR");
    if (env != NULL && env[0] != '\0')
        return env;
    if (geteuid() == 0)
        return "/var/lib/stepx";
    env = getenv("XDG_STATE_HOME");
    if (env != NULL && env[0] == '/') {
        int n = snprintf(buf, sizeof buf, "%s/stepx", env);
        return n > 0 && (size_t)n < sizeof buf ? buf : NULL;
    }
    env = getenv("HOME");
    if (env != NULL && env[0] == '/') {
        int n = snprintf(buf, sizeof buf, "%s/.local/state/stepx", env);
        return n > 0 && (size_t)n < sizeof buf ? buf : NULL;
    }
    return NULL;
}

int sx__stepxd_args(int argc, char **argv, options *o)
{
    static char default_socket[PATH_MAX];
    const char *env = getenv("STEPX_SOCKET");
    if (env != NULL && env[0] != 0) {
        o->socket_path = env;
        o->socket_from = "STEPX_SOCKET=";
    } else {
        snprintf(default_socket, sizeof default_socket, "/tmp/stepx-%u.sock",
                 (unsigned)getuid());
        o->socket_path = default_socket;
        o->socket_from = "the default socket ";
    }
    o->stop_deadline_ms = 5000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--ephemeral") == 0) {
            o->ephemeral = true;
            continue;
        }
        if (strcmp(a, "--nats-open") == 0) {
            o->nats_open = true;
            continue;
        }
        /* Every other option takes a value: one not among them is
         * unknown, not one whose value is missing. */
        static const char *const known[] = {
            "--socket",        "--listen",
            "--token",         "--metrics",
            "--load",          "--workers",
            "--io-loops",      "--max-processes",
            "--keep-outcomes", "--max-frame",
            "--stop-deadline", "--node",
            "--max-output",    "--max-connections",
            "--max-waits",     "--max-unauthenticated",
            "--auth-timeout",  "--keep-outcome-bytes",
            "--max-result",    "--max-slots",
            "--incarnation",   "--state-dir",
            "--sync",          "--state-max-bytes",
            "--nats",          "--cluster",
            "--heartbeat",     "--down-after",
            "--nats-token",    "--nats-creds",
        };
        bool is_known = false;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            is_known = is_known || strcmp(a, known[k]) == 0;
        if (!is_known) {
            fprintf(stderr, "stepxd: unknown option: %s (see --help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "stepxd: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        uint64_t n;
        if (strcmp(a, "--socket") == 0) {
            o->socket_path = v;
            o->socket_from = "--socket ";
        } else if (strcmp(a, "--listen") == 0) {
            if (!address_ok(a, v))
                return 2;
            o->listen = v;
        } else if (strcmp(a, "--token") == 0) {
            if (strlen(v) > SX_RELAY_TOKEN_MAX) {
                fprintf(stderr,
                        "stepxd: --token is at most %d bytes (a hello with "
                        "it must fit in %d bytes)\n",
                        SX_RELAY_TOKEN_MAX, SX_RELAY_HELLO_MAX_FRAME);
                return 2;
            }
            o->token = v;
        } else if (strcmp(a, "--state-dir") == 0) {
            if (v[0] == '\0') {
                fprintf(stderr, "stepxd: --state-dir may not be empty\n");
                return 2;
            }
            o->state_dir = v;
        } else if (strcmp(a, "--sync") == 0 &&
                   (strcmp(v, "normal") == 0 || strcmp(v, "full") == 0)) {
            o->sync_full = strcmp(v, "full") == 0;
        } else if (strcmp(a, "--state-max-bytes") == 0 &&
                   parse_u64(v, 65536, UINT64_MAX / 2, &n)) {
            o->state_max_bytes = n;
        } else if (strcmp(a, "--nats") == 0) {
            o->nats_url = v;
        } else if (strcmp(a, "--cluster") == 0) {
            o->cluster = v;
        } else if (strcmp(a, "--nats-token") == 0) {
            o->nats_token = v;
        } else if (strcmp(a, "--nats-creds") == 0) {
            o->nats_creds = v;
        } else if (strcmp(a, "--heartbeat") == 0 &&
                   parse_u64(v, 10, 60000, &n)) {
            o->heartbeat_ms = (uint32_t)n;
        } else if (strcmp(a, "--down-after") == 0 &&
                   parse_u64(v, 20, 1200000, &n)) {
            o->down_after_ms = (uint32_t)n;
        } else if (strcmp(a, "--metrics") == 0) {
            if (!address_ok(a, v))
                return 2;
            o->metrics = v;
        } else if (strcmp(a, "--load") == 0) {
            if (o->n_loads == MAX_LOADS) {
                fprintf(stderr, "stepxd: at most %d --load options\n",
                        MAX_LOADS);
                return 2;
            }
            o->loads[o->n_loads++] = v;
        } else if (strcmp(a, "--workers") == 0 &&
                   parse_u64(v, 1, SX_MAX_WORKERS, &n))
            o->workers = (unsigned)n;
        else if (strcmp(a, "--io-loops") == 0 && parse_u64(v, 1, 64, &n))
            o->io_loops = (unsigned)n;
        else if (strcmp(a, "--max-processes") == 0 &&
                 parse_u64(v, 0, UINT32_MAX, &n))
            o->max_processes = (size_t)n;
        else if (strcmp(a, "--max-slots") == 0 &&
                 parse_u64(v, 0, UINT32_MAX, &n)) {
            o->max_slots = (size_t)n;
            o->max_slots_set = true;
        } else if (strcmp(a, "--incarnation") == 0 &&
                   parse_u64(v, 1, UINT32_MAX, &n))
            o->incarnation = (uint32_t)n;
        else if (strcmp(a, "--keep-outcomes") == 0 &&
                 parse_u64(v, 1, 100000000, &n))
            o->keep_outcomes = (size_t)n;
        else if (strcmp(a, "--keep-outcome-bytes") == 0 &&
                 parse_u64(v, 1, (uint64_t)1 << 48, &n))
            o->keep_outcome_bytes = (size_t)n;
        else if (strcmp(a, "--max-result") == 0 &&
                 parse_u64(v, 1, (uint64_t)1 << 30, &n))
            o->max_result = (size_t)n;
        /* At least 4 KiB: the limit holds for what the server sends too,
         * and below a few hundred bytes a wait's answer or a push would
         * not fit (every wait would answer internal, every push close its
         * connection). */
        else if (strcmp(a, "--max-frame") == 0 &&
                 parse_u64(v, 4096, (uint64_t)1 << 30, &n))
            o->max_frame = (size_t)n;
        else if (strcmp(a, "--stop-deadline") == 0 &&
                 parse_u64(v, 0, 3600000, &n))
            o->stop_deadline_ms = (int64_t)n;
        else if (strcmp(a, "--node") == 0 && parse_u64(v, 0, UINT32_MAX, &n)) {
            o->node = (uint32_t)n;
            o->node_set = true;
        } else if (strcmp(a, "--max-output") == 0 &&
                   parse_u64(v, 4096, (uint64_t)1 << 40, &n))
            o->max_output = (size_t)n;
        else if (strcmp(a, "--max-connections") == 0 &&
                 parse_u64(v, 1, 1000000, &n))
            o->max_connections = (size_t)n;
        else if (strcmp(a, "--max-waits") == 0 &&
                 parse_u64(v, 1, 100000000, &n))
            o->max_waits = (size_t)n;
        else if (strcmp(a, "--max-unauthenticated") == 0 &&
                 parse_u64(v, 1, 1000000, &n))
            o->max_unauth = (size_t)n;
        else if (strcmp(a, "--auth-timeout") == 0 &&
                 parse_u64(v, 1, 3600000, &n))
            o->auth_timeout_ms = n;
        else {
            fprintf(stderr, "stepxd: bad option or value: %s %s (see --help)\n",
                    a, v);
            return 2;
        }
    }
    /* A result must fit the frame that carries it to a client: a bigger
     * limit would let a process finish with a result that wait could only
     * answer with an error of the server's own. Without --max-result the
     * default shrinks to fit a small --max-frame. */
    size_t frame = o->max_frame != 0 ? o->max_frame : SX_WIRE_MAX_FRAME_DEFAULT;
    size_t fits = frame - RESULT_ROOM; /* frame >= 4096 */
    if (o->max_result > fits) {
        fprintf(stderr,
                "stepxd: --max-result %zu is over what one frame carries: "
                "at most the frame limit (%zu, --max-frame) minus %d bytes "
                "for the reply's other fields, %zu\n",
                o->max_result, frame, RESULT_ROOM, fits);
        return 2;
    }
    if (o->max_result == 0)
        o->max_result = MAX_RESULT_DEFAULT < fits ? MAX_RESULT_DEFAULT : fits;
    /* A reply may be as big as a frame: with less output room than that,
     * a client whose mailbox is flooded (output held near --max-output)
     * would lose its connection to one big reply of its own. */
    if (o->max_output != 0 && o->max_output < frame) {
        fprintf(stderr,
                "stepxd: --max-output %zu is less than the frame limit "
                "(%zu, --max-frame): it must hold at least one frame\n",
                o->max_output, frame);
        return 2;
    }
    if (o->keep_outcome_bytes == 0)
        o->keep_outcome_bytes = KEEP_OUTCOME_BYTES_DEFAULT;
    if ((o->cluster != NULL || o->heartbeat_ms != 0 || o->down_after_ms != 0 ||
         o->nats_token != NULL || o->nats_creds != NULL) &&
        o->nats_url == NULL) {
        fprintf(stderr, "stepxd: --cluster, --heartbeat, --down-after, "
                        "--nats-token and --nats-creds need --nats URL\n");
        return 2;
    }
    if (o->nats_url != NULL && (!o->node_set || o->node == 0)) {
        fprintf(stderr,
                "stepxd: --nats needs --node N (1 to 4294967295): the "
                "node's number, unique in its cluster, is in every PID it "
                "makes\n");
        return 2;
    }
    if (o->nats_url != NULL && o->cluster == NULL)
        o->cluster = "stepx";
    if (o->nats_url != NULL && o->nats_token == NULL) {
        const char *t = getenv("STEPX_NATS_TOKEN");
        if (t != NULL && t[0] != '\0')
            o->nats_token = t;
    }
    if (o->nats_url != NULL && o->nats_token == NULL && o->nats_creds == NULL &&
        !o->nats_open && !nats_local(o->nats_url)) {
        fprintf(stderr,
                "stepxd: --nats %s is not on this machine: whoever reaches "
                "that server could join the cluster, send to its processes "
                "and run its types. Give --nats-token T (or "
                "$STEPX_NATS_TOKEN) or --nats-creds FILE, as the server "
                "wants, or --nats-open to run without\n",
                o->nats_url);
        return 2;
    }
    if (o->socket_path != NULL && o->socket_path[0] == 0)
        o->socket_path = NULL; /* --socket "": TCP only */
    /* Said here: the server answers a path too long for sun_path with
     * SX_EINVAL, which main explains as a --listen or --token problem. */
    size_t max_path = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
    if (o->socket_path != NULL && strlen(o->socket_path) > max_path) {
        fprintf(stderr,
                "stepxd: %s%s: longer than %zu bytes (the most a "
                "Unix socket path may have)\n",
                o->socket_from, o->socket_path, max_path);
        return 2;
    }
    if (o->socket_path == NULL && o->listen == NULL) {
        fprintf(stderr, "stepxd: nothing to listen on (--socket or "
                        "--listen)\n");
        return 2;
    }
    if (o->ephemeral && o->state_dir != NULL) {
        fprintf(stderr, "stepxd: --ephemeral and --state-dir: one or the "
                        "other\n");
        return 2;
    }
    if (!o->ephemeral && o->state_dir == NULL &&
        (o->state_dir = default_state_dir()) == NULL) {
        fprintf(stderr,
                "stepxd: no state directory: give --state-dir DIR (or set "
                "STEPX_STATE_DIR or HOME), or run with --ephemeral\n");
        return 2;
    }
    return 0;
}

/* cmd/stepxd.c — the stepx daemon: an engine with the shipped process
 * types (cmd/types/types.c) and any loaded from shared objects, behind the
 * relay server (relay/stepx/relay.h), with Prometheus metrics on request.
 *
 *   stepxd [--socket PATH] [--listen HOST:PORT] [--token T]
 *          [--workers N] [--io-loops N] [--max-processes N]
 *          [--max-slots N] [--keep-outcomes N] [--keep-outcome-bytes BYTES]
 *          [--max-result BYTES] [--stop-deadline MS] [--node N]
 *          [--incarnation N] [--load LIB.so]... [--metrics HOST:PORT]
 *          [--max-frame BYTES] [--max-output BYTES] [--max-connections N]
 *          [--max-waits N] [--max-unauthenticated N] [--auth-timeout MS]
 *
 * Each run has its own incarnation, the host part of every PID
 * ({node@host|id}): random unless --incarnation gives it, so a PID that a
 * client kept from an earlier run names nothing in this one (the engine
 * refuses PIDs of another host).
 *
 * Signals: SIGINT, SIGTERM and SIGHUP (its terminal went away) stop it
 * gracefully: every process gets a cancel, the engine waits up to the
 * stop deadline, terminates the rest, the server stops, and the daemon
 * exits 0. A second such signal during the stop hurries it: every process
 * still live is terminated at once (Ctrl-C twice). Threads: the main
 * thread only waits for signals (sigwait), and during the stop a second
 * thread does; everything else runs on the engine's, the server's and the
 * metrics' threads, which start with the signals blocked.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/un.h>
#include <unistd.h>

#include <stepx/stepx.h>

#include "cmd/metrics.h"
#include "cmd/types/types.h"
#include "process/hostport.h"

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
    uint32_t incarnation; /* 0: draw one */
} options;

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

static int parse_args(int argc, char **argv, options *o)
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
            "--incarnation",
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
        else if (strcmp(a, "--node") == 0 && parse_u64(v, 0, UINT32_MAX, &n))
            o->node = (uint32_t)n;
        else if (strcmp(a, "--max-output") == 0 &&
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
    return 0;
}

static int load_plugins(sx_engine *e, const options *o)
{
    for (size_t i = 0; i < o->n_loads; i++) {
        /* The handle stays open for the life of the process: the types'
         * code and tables live in it. */
        void *h = dlopen(o->loads[i], RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            /* dlopen looks a name without a '/' up in the library path
             * only, never in the current directory: "No such file" for a
             * file that is right here needs saying why. */
            bool here = strchr(o->loads[i], '/') == NULL &&
                        access(o->loads[i], F_OK) == 0;
            fprintf(stderr, "stepxd: --load %s: %s%s%s%s\n", o->loads[i],
                    dlerror(),
                    here ? " (a name without a '/' is looked up in the "
                           "library path, not in the current directory: "
                           "say ./"
                         : "",
                    here ? o->loads[i] : "", here ? ")" : "");
            return 1;
        }
        plugin_fn fn;
        *(void **)&fn = dlsym(h, PLUGIN_SYMBOL);
        if (fn == NULL) {
            fprintf(stderr, "stepxd: --load %s: no function %s\n", o->loads[i],
                    PLUGIN_SYMBOL);
            return 1;
        }
        int rc = fn(e);
        if (rc != 0) {
            fprintf(stderr, "stepxd: --load %s: %s failed: %s (%s)\n",
                    o->loads[i], PLUGIN_SYMBOL, sx_strerror(rc),
                    sx_errname(rc));
            return 1;
        }
    }
    return 0;
}

/* A nonzero random 32-bit number for the run's incarnation, or 0 when
 * the kernel gives none (getrandom blocks only until its pool is first
 * seeded, early in boot). Two runs draw the same one with probability
 * 2^-32 (docs/PROTOCOL.md, "PIDs"). */
static uint32_t draw_incarnation(void)
{
    uint32_t v = 0;
    while (v == 0) {
        ssize_t n = getrandom(&v, sizeof v, 0);
        if (n < 0 && errno != EINTR)
            return 0;
        if (n != (ssize_t)sizeof v)
            v = 0;
    }
    return v;
}

/* Bytes of memory per process slot for the default --max-slots. A slot
 * costs 152 bytes of table for good (128 in the slot, 24 beside it), so
 * at the cap the table takes under 4 % of memory; what processes hold
 * beyond their slot (state over 32 bytes, queued messages, subprocesses)
 * is theirs (docs/PROTOCOL.md, "Limits"). */
#define MEMORY_PER_SLOT 4096
/* The cap when the memory size is unknown. */
#define SLOTS_UNKNOWN_MEMORY ((size_t)1 << 20)

static size_t default_max_slots(void)
{
    uint64_t mem = sx_memory_size();
    if (mem == 0)
        return SLOTS_UNKNOWN_MEMORY;
    uint64_t n = mem / MEMORY_PER_SLOT;
    return n < 1024 ? 1024 : n > UINT32_MAX ? UINT32_MAX : (size_t)n;
}

static const char *sig_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
}

/* ---- a second signal during the stop ---- */

typedef struct {
    sx_engine *e;
    sigset_t sigs;
    /* Set by main once the engine has stopped (then it sends the thread
     * SIGTERM to end its sigwait). relaxed: a flag with no data behind it;
     * pthread_join orders everything else. */
    _Atomic bool stopped;
} hurry_ctx;

/* Waits for another signal while the engine stops; on one, terminates
 * every live process (stop then returns as soon as they have finished,
 * before its deadline). */
static void *hurry_main(void *arg)
{
    hurry_ctx *h = arg;
    int sig = 0;
    while (sigwait(&h->sigs, &sig) == 0 &&
           !atomic_load_explicit(&h->stopped, memory_order_relaxed)) {
        printf("stepxd: %s again: terminating every process now\n",
               sig_name(sig));
        fflush(stdout);
        sx_process_info info[256];
        int n;
        /* Terminated processes leave the listing as they finish; a few
         * rounds take those listed after the first 256. */
        for (int round = 0;
             round < 1000 &&
             !atomic_load_explicit(&h->stopped, memory_order_relaxed) &&
             (n = sx_engine_list(h->e, info, 256)) > 0;
             round++) {
            for (int i = 0; i < n; i++)
                sx_engine_terminate(h->e, info[i].pid);
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    options o = { 0 };
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;

    /* Every thread created from here on inherits the mask: the signals
     * reach only the sigwait below. SIGPIPE is ignored (a client that
     * goes away is a write error, not a crash). */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (o.incarnation == 0 && (o.incarnation = draw_incarnation()) == 0) {
        fprintf(stderr,
                "stepxd: cannot draw an incarnation: getrandom: %s "
                "(give one with --incarnation N)\n",
                strerror(errno));
        return 1;
    }
    sx_engine_config cfg = { .workers = o.workers,
                             .io_loops = o.io_loops,
                             .max_processes = o.max_processes,
                             .keep_outcomes = o.keep_outcomes,
                             .keep_outcome_bytes = o.keep_outcome_bytes,
                             .max_result = o.max_result,
                             .node = o.node,
                             .host = o.incarnation,
                             .max_slots = o.max_slots_set
                                              ? o.max_slots
                                              : default_max_slots() };
    sx_engine *e;
    if ((rc = sx_engine_new(&cfg, &e)) != 0) {
        fprintf(stderr, "stepxd: engine: %s\n", sx_strerror(rc));
        return 1;
    }
    if ((rc = sx_types_register_builtin(e)) != 0) {
        fprintf(stderr, "stepxd: types: %s\n", sx_strerror(rc));
        sx_engine_free(e);
        return 1;
    }
    if (load_plugins(e, &o) != 0) {
        sx_engine_free(e);
        return 1;
    }
    if ((rc = sx_engine_start(e)) != 0) {
        fprintf(stderr, "stepxd: start: %s\n", sx_strerror(rc));
        sx_engine_free(e);
        return 1;
    }
    sx_server_config scfg = { .socket_path = o.socket_path,
                              .listen = o.listen,
                              .token = o.token,
                              .max_frame = o.max_frame,
                              .max_output = o.max_output,
                              .max_connections = o.max_connections,
                              .max_waits = o.max_waits,
                              .max_unauthenticated = o.max_unauth,
                              .auth_timeout_ms = o.auth_timeout_ms };
    sx_server *srv;
    if ((rc = sx_server_start(e, &scfg, &srv)) != 0) {
        /* SX_EINVAL is a listening address the server refuses: say which
         * ones those are, the usual one being a TCP address others can
         * reach with no token. */
        fprintf(stderr, "stepxd: cannot listen (%s%s%s%s): %s (%s)%s\n",
                o.socket_path != NULL ? o.socket_from : "",
                o.socket_path != NULL ? o.socket_path : "",
                o.listen == NULL        ? ""
                : o.socket_path != NULL ? " --listen "
                                        : "--listen ",
                o.listen != NULL ? o.listen : "", sx_strerror(rc),
                sx_errname(rc),
                rc == SX_EINVAL
                    ? ": the --listen host must resolve, and one that is "
                      "not loopback (127.0.0.0/8, ::1) needs --token; "
                      "--socket may not be empty without --listen"
                    : "");
        sx_engine_stop(e, 0);
        sx_engine_free(e);
        return 1;
    }
    sx_metrics *m = NULL;
    if (o.metrics != NULL &&
        (rc = sx_metrics_start(e, srv, o.metrics, &m)) != 0) {
        /* The form was checked in parse_args: SX_EINVAL is a host that
         * does not resolve. */
        fprintf(stderr, "stepxd: --metrics %s: %s%s\n", o.metrics,
                sx_strerror(rc),
                rc == SX_EINVAL ? " (the host does not resolve to an address)"
                                : "");
        sx_server_stop(srv);
        sx_engine_stop(e, 0);
        sx_engine_free(e);
        return 1;
    }
    sx_engine_stats st;
    sx_engine_stats_get(e, &st, NULL, 0);
    if (o.socket_path != NULL)
        printf("stepxd: listening on unix:%s\n", o.socket_path);
    if (o.listen != NULL)
        printf("stepxd: listening on tcp:%s (port %d)\n", o.listen,
               sx_server_port(srv));
    if (m != NULL)
        printf("stepxd: metrics on http://%s/metrics (port %d)\n", o.metrics,
               sx_metrics_port(m));
    printf("stepxd: incarnation %u: PIDs are {%u@%u|id}\n", o.incarnation,
           o.node, o.incarnation);
    if (cfg.max_slots != 0)
        printf("stepxd: at most %zu process slots (--max-slots)\n",
               cfg.max_slots);
    else
        printf("stepxd: no cap on process slots (--max-slots 0)\n");
    if (o.max_processes != 0)
        printf("stepxd: at most %zu live processes (--max-processes)\n",
               o.max_processes);
    printf("stepxd: %u workers, pid %d; SIGINT, SIGHUP or SIGTERM stops it\n",
           st.workers, (int)getpid());
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    printf("stepxd: %s: stopping (cancel, up to %lld ms, then "
           "terminate; signal again to terminate now)\n",
           sig_name(sig), (long long)o.stop_deadline_ms);
    fflush(stdout);
    hurry_ctx hurry = { .e = e, .sigs = sigs };
    atomic_init(&hurry.stopped, false);
    pthread_t hurry_thread;
    bool hurrying =
        pthread_create(&hurry_thread, NULL, hurry_main, &hurry) == 0;
    /* The engine first, so that waiting clients get their processes'
     * outcomes before their connections close. */
    rc = sx_engine_stop(e, o.stop_deadline_ms);
    if (hurrying) {
        /* relaxed: see hurry_ctx. */
        atomic_store_explicit(&hurry.stopped, true, memory_order_relaxed);
        pthread_kill(hurry_thread, SIGTERM); /* ends its sigwait */
        pthread_join(hurry_thread, NULL);
    }
    sx_metrics_stop(m);
    sx_server_stop(srv);
    sx_engine_stats_get(e, &st, NULL, 0);
    printf("stepxd: stopped: %llu completed, %llu failed, %llu terminated\n",
           (unsigned long long)st.completed, (unsigned long long)st.failed,
           (unsigned long long)st.terminated);
    sx_engine_free(e);
    return rc == 0 ? 0 : 1;
}

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
 *          [--state-dir DIR | --ephemeral] [--sync normal|full]
 *          [--state-max-bytes BYTES]
 *
 * Jobs are durable by default (docs/DURABILITY.md): the engine keeps them
 * in a state store, DIR/stepx.db, so that a crash (kill -9) loses nothing
 * acknowledged and the jobs it interrupted run again at the next start,
 * with their PIDs. The directory: --state-dir, else $STEPX_STATE_DIR,
 * else /var/lib/stepx as root, else $XDG_STATE_HOME/stepx, else
 * ~/.local/state/stepx. --ephemeral keeps everything in memory.
 *
 * With --ephemeral each run has its own incarnation, the host part of
 * every PID ({node@host|id}): random unless --incarnation gives it, so a
 * PID that a client kept from an earlier run names nothing in this one
 * (the engine refuses PIDs of another host). With a state store the host
 * part is the store's (drawn at its first run, or --incarnation then),
 * and each run takes its own range of generations instead.
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
#include <elf.h>
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
#include "cmd/stepxd.h"
#include "cmd/types/types.h"
#include "process/hostport.h"

/* The ELF machine (e_machine) of the file at path, or -1 when it is not
 * an ELF file or cannot be read. */
static int elf_machine(const char *path)
{
    unsigned char h[20];
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    size_t n = fread(h, 1, sizeof h, f);
    fclose(f);
    if (n != sizeof h || memcmp(h, ELFMAG, SELFMAG) != 0)
        return -1;
    return h[EI_DATA] == ELFDATA2MSB ? (h[18] << 8) | h[19]
                                     : h[18] | (h[19] << 8);
}

static const char *machine_name(int m)
{
    switch (m) {
    case EM_386:
        return "i386";
    case EM_ARM:
        return "32-bit ARM";
    case EM_X86_64:
        return "x86-64";
    case EM_AARCH64:
        return "AArch64";
    case EM_PPC64:
        return "PowerPC64";
    case EM_S390:
        return "s390x";
    case EM_RISCV:
        return "RISC-V";
    default:
        return NULL;
    }
}

/* After dlopen's own message (err), a second line that says what to do,
 * told from err's text and from the file at path: the file is not there
 * (and how dlopen looks a name up), a library the plugin needs is not
 * found, a symbol neither stepxd nor the plugin's libraries define, or a
 * file that is no shared object of this machine. Nothing when err is
 * none of these (a file that cannot be read says so itself). */
static void load_advice(const char *path, const char *err)
{
    static const char cannot_open[] = ": cannot open shared object file";
    static const char undefined[] = ": undefined symbol: ";
    const char *at;
    if ((at = strstr(err, cannot_open)) != NULL &&
        ((size_t)(at - err) != strlen(path) ||
         strncmp(err, path, (size_t)(at - err)) != 0)) {
        /* dlopen names the library it did not find: not the plugin. */
        int len = (int)(at - err);
        fprintf(stderr,
                "stepxd: --load %s: it needs %.*s, which the dynamic loader "
                "did not find: set LD_LIBRARY_PATH to the folder that holds "
                "%.*s, or build the plugin with -Wl,-rpath,FOLDER (ldd %s "
                "lists what it needs)\n",
                path, len, err, len, err, path);
    } else if (at != NULL) {
        bool named = strchr(path, '/') == NULL;
        bool exists = access(path, F_OK) == 0;
        int machine = exists ? elf_machine(path) : -1;
        int own = elf_machine("/proc/self/exe");
        if (named && exists) {
            /* dlopen looks a name without a '/' up in the library path
             * only, never in the current directory. */
            fprintf(stderr,
                    "stepxd: --load %s: a name without a '/' is looked up in "
                    "the library path, not in the current directory: say "
                    "./%s\n",
                    path, path);
        } else if (named) {
            fprintf(stderr,
                    "stepxd: --load %s: a name without a '/' is looked up "
                    "only in the library path (LD_LIBRARY_PATH, then the "
                    "system's library folders): for a file in the current "
                    "directory say ./%s\n",
                    path, path);
        } else if (!exists) {
            char cwd[PATH_MAX];
            bool relative = path[0] != '/' && getcwd(cwd, sizeof cwd) != NULL;
            fprintf(stderr,
                    "stepxd: --load %s: there is no file %s%s%s: give the "
                    "path of the plugin's .so file\n",
                    path, path,
                    relative ? " in stepxd's current directory " : "",
                    relative ? cwd : "");
        } else if (machine >= 0 && own >= 0 && machine != own) {
            const char *theirs = machine_name(machine);
            const char *ours = machine_name(own);
            char a[32], b[32];
            snprintf(a, sizeof a, "machine %d", machine);
            snprintf(b, sizeof b, "machine %d", own);
            fprintf(stderr,
                    "stepxd: --load %s: it is built for %s and this stepxd "
                    "for %s: build the plugin with this machine's compiler\n",
                    path, theirs != NULL ? theirs : a, ours != NULL ? ours : b);
        }
    } else if ((at = strstr(err, undefined)) != NULL) {
        const char *sym = at + strlen(undefined);
        const char *version = strstr(sym, ", version ");
        if (version != NULL)
            fprintf(stderr,
                    "stepxd: --load %s: the plugin needs %s of a library, "
                    "and this machine's is older: build the plugin on this "
                    "machine\n",
                    path, version + 2);
        else if (strncmp(sym, "sx_", 3) == 0)
            fprintf(stderr,
                    "stepxd: --load %s: this stepxd has no %s: the plugin "
                    "was built with the headers of another stepx version; "
                    "build it with this one's (pkg-config --cflags stepx)\n",
                    path, sym);
        else
            fprintf(stderr,
                    "stepxd: --load %s: neither stepxd nor a library the "
                    "plugin links defines %s: link the plugin with the "
                    "library that does (-lNAME)\n",
                    path, sym);
    } else if (strstr(err, ": invalid ELF header") != NULL ||
               strstr(err, ": file too short") != NULL) {
        fprintf(stderr,
                "stepxd: --load %s: it is not a shared object: build the "
                "plugin with cc -shared -fPIC\n",
                path);
    } else if ((at = strstr(err, ": wrong ELF class: ")) != NULL) {
        const char *cls = at + strlen(": wrong ELF class: ");
        const char *bits = strcmp(cls, "ELFCLASS32") == 0   ? "32-bit"
                           : strcmp(cls, "ELFCLASS64") == 0 ? "64-bit"
                                                            : cls;
        fprintf(stderr,
                "stepxd: --load %s: it is %s and this stepxd %d-bit: build "
                "the plugin for this stepxd's machine (no -m32 or -m64)\n",
                path, bits, (int)sizeof(void *) * CHAR_BIT);
    }
}

static int load_plugins(sx_engine *e, const options *o)
{
    for (size_t i = 0; i < o->n_loads; i++) {
        /* The handle stays open for the life of the process: the types'
         * code and tables live in it. */
        void *h = dlopen(o->loads[i], RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            char err[1024];
            const char *why = dlerror();
            snprintf(err, sizeof err, "%s", why != NULL ? why : "not loaded");
            fprintf(stderr, "stepxd: --load %s: %s\n", o->loads[i], err);
            load_advice(o->loads[i], err);
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

/* The cluster's joins and downs, one line each on stdout. */
static void cluster_log(void *user, const char *line)
{
    (void)user;
    printf("stepxd: cluster: %s\n", line);
    fflush(stdout);
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
 * costs 168 bytes of table for good (96 in the slot, 72 beside it), so
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
    int rc = sx__stepxd_args(argc, argv, &o);
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
                             .max_slots = o.max_slots_set ? o.max_slots
                                                          : default_max_slots(),
                             .state_dir = o.state_dir,
                             .state_sync_full = o.sync_full,
                             .state_max_bytes = o.state_max_bytes };
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
    /* The cluster first: the engine's remote route is set before it
     * starts. Heartbeats say 0 processes until it has. */
    sx_cluster *cl = NULL;
    if (o.nats_url != NULL) {
        char err[256];
        sx_cluster_config ccfg = { .log = cluster_log,
                                   .url = o.nats_url,
                                   .name = o.cluster,
                                   .node = o.node,
                                   .address = o.listen,
                                   .heartbeat_ms = o.heartbeat_ms,
                                   .down_after_ms = o.down_after_ms,
                                   .token = o.nats_token,
                                   .credentials = o.nats_creds };
        if ((rc = sx_cluster_start(e, &ccfg, &cl, err, sizeof err)) != 0) {
            fprintf(stderr, "stepxd: --nats %s: %s\n", o.nats_url,
                    err[0] != '\0' ? err : sx_strerror(rc));
            sx_engine_free(e);
            return 1;
        }
    }
    if ((rc = sx_engine_start(e)) != 0) {
        const char *why = sx_engine_state_error(e);
        if (why[0] != '\0')
            fprintf(stderr, "stepxd: cannot open the state store: %s\n", why);
        else
            fprintf(stderr, "stepxd: start: %s\n", sx_strerror(rc));
        sx_cluster_stop(cl);
        sx_engine_free(e);
        return 1;
    }
    /* With a state store the host part is the store's. */
    sx_engine_config_get(e, &cfg);
    sx_server_config scfg = { .socket_path = o.socket_path,
                              .listen = o.listen,
                              .token = o.token,
                              .max_frame = o.max_frame,
                              .max_output = o.max_output,
                              .max_connections = o.max_connections,
                              .max_waits = o.max_waits,
                              .max_unauthenticated = o.max_unauth,
                              .auth_timeout_ms = o.auth_timeout_ms,
                              .cluster = cl };
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
        sx_cluster_stop(cl);
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
        sx_cluster_stop(cl);
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
    printf("stepxd: incarnation %u: PIDs are {%u@%u|id}\n", cfg.host, o.node,
           cfg.host);
    if (cl != NULL) {
        sx_cluster_stats cs;
        sx_cluster_stats_get(cl, &cs);
        printf("stepxd: node %u of cluster %s on %s (membership incarnation "
               "%llu)\n",
               o.node, cs.name, o.nats_url, (unsigned long long)cs.incarnation);
    }
    if (o.state_dir != NULL)
        printf("stepxd: jobs are kept in %s/stepx.db (--state-dir; sync "
               "%s)\n",
               o.state_dir, o.sync_full ? "full" : "normal");
    else
        printf("stepxd: jobs are kept in memory only (--ephemeral)\n");
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
    sx_cluster_stop(cl);
    sx_engine_stats_get(e, &st, NULL, 0);
    printf("stepxd: stopped: %llu completed, %llu failed, %llu cancelled, "
           "%llu terminated\n",
           (unsigned long long)st.completed, (unsigned long long)st.failed,
           (unsigned long long)st.cancelled, (unsigned long long)st.terminated);
    sx_engine_free(e);
    return rc == 0 ? 0 : 1;
}

/* cmd/stepx.c — the stepx CLI: drives a stepxd over the relay protocol
 * (docs/PROTOCOL.md) with the blocking client of <stepx/relay.h>.
 *
 *   stepx [global options] COMMAND [ARGS] [options]
 *
 * This file holds the command line, the connection, error reporting and
 * exit codes, progress lines and the dispatch; the commands live in
 * cmd/cli_ops.c and cmd/cli_watch.c, JSON <-> msgpack in cmd/cli_json.c.
 * Threads: one; every call blocks.
 */
#include "cmd/cli.h"
#include "process/hostport.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS 5000  /* without --timeout */
#define REQUEST_TIMEOUT_MS 30000 /* one plain request without --timeout */

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: stepx [global options] COMMAND [ARGS] [options]\n"
        "\n"
        "commands:\n"
        "  submit TYPE METHOD [ARGS]   start a process; ARGS is a JSON array\n"
        "                              of inputs, e.g. '[5]'; prints its PID\n"
        "      --wait                  then wait for it and print the result\n"
        "      --count N               submit N copies (progress, summary)\n"
        "      --key KEY               idempotency key: a submit with a key\n"
        "                              already used answers that job's PID\n"
        "                              (--json: \"existing\": true; needs\n"
        "                              stepxd with a state store)\n"
        "      --restart MODE          never | on-failure | always: start it\n"
        "                              again after it ends (same PID)\n"
        "      --max-restarts N        at most N restarts in the window (3)\n"
        "      --restart-window MS     the window (60000)\n"
        "      --backoff-min MS        first backoff, doubled per restart "
        "(100)\n"
        "      --backoff-max MS        largest backoff (10000); up to a "
        "quarter\n"
        "                              more at random, never past it\n"
        "      --deadline MS           end it (timeout) if it runs longer\n"
        "      --node N                run it on node N of the cluster\n"
        "      --place any|least_loaded  on any node that has the type, or "
        "the\n"
        "                              one with the least load\n"
        "  send PID TOPIC JSON         send a message (from this connection)\n"
        "  wait PID                    wait for a process; print its result\n"
        "  cancel PID [REASON]         soft cancel (also --reason TEXT)\n"
        "  kill PID                    terminate a process at once\n"
        "  ps [--limit N] [--node N | --cluster]\n"
        "                              list live processes (of node N, or "
        "of\n"
        "                              every node of the cluster)\n"
        "  stats                       the engine's figures\n"
        "  nodes                       the cluster's nodes (docs/CLUSTER.md)\n"
        "  types                       process types and their methods\n"
        "  watch PID [--send TOPIC JSON]...\n"
        "                              send the messages, then stream the\n"
        "                              messages this connection receives\n"
        "                              until PID exits\n"
        "  top [--interval MS] [-n N]  live figures; q or Ctrl-C quits\n"
        "\n"
        "global options (anywhere on the line):\n"
        "  --socket PATH     the daemon's Unix socket (default: "
        "$STEPX_SOCKET\n"
        "                    or /tmp/stepx-$UID.sock, as stepxd)\n"
        "  --connect H:P     connect over TCP instead: HOST:PORT, HOST an "
        "IPv4\n"
        "                    address, a name or [IPv6] (127.0.0.1:7070,\n"
        "                    [::1]:7070); or a Unix socket path\n"
        "  --token T         token for hello (default: $STEPX_TOKEN)\n"
        "  --timeout MS      limit for connecting, each request, and waits\n"
        "                    (default: 5 s to connect, 30 s a request, waits\n"
        "                    without limit)\n"
        "  --json            JSON output: one document per result, one per\n"
        "                    line for streams (watch, top, submit --count)\n"
        "  --quiet, -q       no progress lines on stderr\n"
        "\n"
        "PIDs are written {node@host|id} (quote them: | is a shell pipe) or\n"
        "as a bare id on the daemon's own node. JSON integers stay integers;\n"
        "binaries show as strings when valid UTF-8, else {\"$bin\": "
        "base64};\n"
        "a map whose keys would read the same as JSON (1 and \"1\") as\n"
        "{\"$map\": [[key, value], ...]}. Both forms also send one.\n"
        "\n"
        "exit codes: 0 ok; 1 the process failed, was terminated or "
        "cancelled,\n"
        "  or its result was too large, or a job passed its restart limit;\n"
        "  2 usage (bad arguments, bad JSON, bad PID); 3 cannot connect or\n"
        "  connection lost; 4 the daemon answered with an error (unknown "
        "type,\n"
        "  no such process, ...); 5 timeout; 6 internal error (out of\n"
        "  memory, an unreadable reply, output that cannot be written).\n");
}

int64_t cli_request_timeout(const cli *c)
{
    return c->a->timeout_ms >= 0 ? c->a->timeout_ms : REQUEST_TIMEOUT_MS;
}

int cli_connect(cli *c)
{
    if (c->client != NULL)
        return 0;
    int64_t t = c->a->timeout_ms >= 0 ? c->a->timeout_ms : CONNECT_TIMEOUT_MS;
    int rc = sx_client_connect(c->address, c->a->token, t, &c->client);
    if (rc == 0) {
        c->mailbox = sx_client_mailbox(c->client);
        return 0;
    }
    c->client = NULL;
    char msg[4400];
    if (rc == SX_ETIMEDOUT)
        snprintf(msg, sizeof msg,
                 "cannot connect to %s: no answer within "
                 "%lld ms",
                 c->address, (long long)t);
    else
        snprintf(msg, sizeof msg, "cannot connect to %s: %s%s", c->address,
                 cli_err_text(rc),
                 rc == -ENOENT || rc == -ECONNREFUSED
                     ? " (is stepxd running? see --socket / --connect)"
                 : rc == SX_EINVAL
                     /* The server's bad_request to hello (a token it does
                      * not take), or a host that does not resolve (the
                      * address's form was checked before). */
                     ? " (a host that does not resolve, or the server "
                       "refused the connection: a wrong or missing --token "
                       "/ STEPX_TOKEN?)"
                     : "");
    return cli_fail(rc == SX_ETIMEDOUT ? CLI_TIMEOUT : CLI_CONNECT, "%s", msg);
}

int cli_request(cli *c, const char *what, sx_payload request,
                int64_t timeout_ms, const char *const *pass, sx_reply *out)
{
    memset(out, 0, sizeof *out);
    int rc = cli_connect(c);
    if (rc != 0)
        return rc;
    rc = sx_client_call(c->client, request, timeout_ms, out);
    if (rc != 0)
        return cli_transport_error(what, rc, timeout_ms);
    if (out->ok || pass == cli_pass_all)
        return 0;
    for (size_t i = 0; pass != NULL && pass[i] != NULL; i++)
        if (out->code != NULL && strcmp(out->code, pass[i]) == 0)
            return 0;
    rc = cli_reply_error(c, what, out, NULL);
    sx_reply_free(out);
    memset(out, 0, sizeof *out);
    return rc;
}

int cli_parse_pid(cli *c, const char *text, sx_pid *out)
{
    char buf[SX_PID_TEXT_MAX + 2];
    size_t n = strlen(text);
    if (n > 0 && n <= 20 && strspn(text, "0123456789") == n) {
        /* A bare id: on the daemon's node and host (its mailbox's). The
         * number first: one that does not fit is a usage error, daemon or
         * not. */
        char *end;
        errno = 0;
        unsigned long long id = strtoull(text, &end, 10);
        if (errno == 0 && *end == 0) {
            int rc = cli_connect(c);
            if (rc != 0)
                return rc;
            *out = (sx_pid){ c->mailbox.node, c->mailbox.host, id };
            return 0;
        }
    } else if (n > 0 && n < SX_PID_TEXT_MAX) {
        if (text[0] != '{') { /* "0@1|42": the braces are optional */
            snprintf(buf, sizeof buf, "{%s}", text);
            text = buf;
        }
        if (sx_pid_parse(text, out) == 0)
            return 0;
    }
    return cli_fail(CLI_USAGE,
                    "bad PID '%s': expected {node@host|id} (quoted: the shell "
                    "reads | as a pipe) or a bare id",
                    text);
}

/* ---- the command line ---- */

enum {
    OPT_COUNT = 1 << 0,
    OPT_WAIT = 1 << 1,
    OPT_LIMIT = 1 << 2,
    OPT_INTERVAL = 1 << 3,
    OPT_ITER = 1 << 4,
    OPT_REASON = 1 << 5,
    OPT_SEND = 1 << 6,
    OPT_SUBMIT = 1 << 7, /* --key and the restart options */
    OPT_NODE = 1 << 8,   /* --node (submit, ps), --place, --cluster */
};

typedef struct {
    const char *name;
    int (*fn)(cli *c);
    int min_pos, max_pos;
    unsigned opts;
    const char *args; /* for messages */
} command;

static const command commands[] = {
    { "submit", cli_cmd_submit, 2, 3,
      OPT_COUNT | OPT_WAIT | OPT_SUBMIT | OPT_NODE, "TYPE METHOD [ARGS]" },
    { "send", cli_cmd_send, 3, 3, 0, "PID TOPIC JSON" },
    { "wait", cli_cmd_wait, 1, 1, 0, "PID" },
    { "cancel", cli_cmd_cancel, 1, 2, OPT_REASON, "PID [REASON]" },
    { "kill", cli_cmd_kill, 1, 1, 0, "PID" },
    { "ps", cli_cmd_ps, 0, 0, OPT_LIMIT | OPT_NODE,
      "[--limit N] [--node N | --cluster]" },
    { "stats", cli_cmd_stats, 0, 0, 0, "" },
    { "nodes", cli_cmd_nodes, 0, 0, 0, "" },
    { "types", cli_cmd_types, 0, 0, 0, "" },
    { "watch", cli_cmd_watch, 1, 1, OPT_SEND, "PID [--send TOPIC JSON]..." },
    { "top", cli_cmd_top, 0, 0, OPT_INTERVAL | OPT_ITER,
      "[--interval MS] [-n N]" },
};

static bool parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != 0 || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* An option that takes a value: its bit (0 for global ones), where it
 * goes. Returns CLI_USAGE after a message when the value is bad. */
static int option_value(cli_args *a, const char *name, const char *v,
                        unsigned *used)
{
    int64_t n;
    if (strcmp(name, "--socket") == 0)
        a->socket_path = v;
    else if (strcmp(name, "--connect") == 0)
        a->connect = v;
    else if (strcmp(name, "--token") == 0)
        a->token = v;
    else if (strcmp(name, "--timeout") == 0) {
        if (!parse_i64(v, 1, INT32_MAX, &a->timeout_ms))
            goto bad;
    } else if (strcmp(name, "--count") == 0) {
        if (!parse_i64(v, 1, 10000000, &n))
            goto bad;
        a->count = (uint64_t)n;
        *used |= OPT_COUNT;
    } else if (strcmp(name, "--limit") == 0) {
        if (!parse_i64(v, 1, UINT32_MAX, &a->limit))
            goto bad;
        *used |= OPT_LIMIT;
    } else if (strcmp(name, "--interval") == 0) {
        if (!parse_i64(v, 100, 3600000, &a->interval_ms))
            goto bad;
        *used |= OPT_INTERVAL;
    } else if (strcmp(name, "-n") == 0 || strcmp(name, "--iterations") == 0) {
        if (!parse_i64(v, 1, INT32_MAX, &a->iterations))
            goto bad;
        *used |= OPT_ITER;
    } else if (strcmp(name, "--reason") == 0) {
        a->reason = v;
        *used |= OPT_REASON;
    } else if (strcmp(name, "--key") == 0) {
        if (v[0] == 0 || strlen(v) > 1024)
            goto bad;
        a->key = v;
        *used |= OPT_SUBMIT;
    } else if (strcmp(name, "--restart") == 0) {
        if (strcmp(v, "never") != 0 && strcmp(v, "on-failure") != 0 &&
            strcmp(v, "always") != 0)
            goto bad;
        a->restart = v;
        *used |= OPT_SUBMIT;
    } else if (strcmp(name, "--deadline") == 0) {
        if (!parse_i64(v, 1, (int64_t)1 << 40, &n))
            goto bad;
        a->deadline_ms = n;
        *used |= OPT_SUBMIT;
    } else if (strcmp(name, "--node") == 0) {
        if (!parse_i64(v, 1, UINT32_MAX, &n))
            goto bad;
        a->node = n;
        *used |= OPT_NODE;
    } else if (strcmp(name, "--place") == 0) {
        if (strcmp(v, "here") != 0 && strcmp(v, "any") != 0 &&
            strcmp(v, "least_loaded") != 0)
            goto bad;
        a->place = v;
        *used |= OPT_NODE;
    } else if (strcmp(name, "--max-restarts") == 0 ||
               strcmp(name, "--restart-window") == 0 ||
               strcmp(name, "--backoff-min") == 0 ||
               strcmp(name, "--backoff-max") == 0) {
        if (!parse_i64(v, 1, UINT32_MAX, &n))
            goto bad;
        if (strcmp(name, "--max-restarts") == 0)
            a->max_restarts = n;
        else if (strcmp(name, "--restart-window") == 0)
            a->window_ms = n;
        else if (strcmp(name, "--backoff-min") == 0)
            a->backoff_min_ms = n;
        else
            a->backoff_max_ms = n;
        *used |= OPT_SUBMIT;
    } else {
        return cli_fail(CLI_USAGE, "unknown option %s (see stepx --help)",
                        name);
    }
    return 0;
bad:
    return cli_fail(CLI_USAGE, "bad value for %s: '%s'", name, v);
}

static bool takes_value(const char *o)
{
    static const char *const with[] = {
        "--socket",       "--connect",        "--timeout",     "--token",
        "--count",        "--limit",          "--interval",    "-n",
        "--iterations",   "--reason",         "--key",         "--restart",
        "--max-restarts", "--restart-window", "--backoff-min", "--backoff-max",
        "--deadline",     "--node",           "--place",
    };
    for (size_t i = 0; i < sizeof with / sizeof with[0]; i++)
        if (strcmp(o, with[i]) == 0)
            return true;
    return false;
}

/* Options may come anywhere; "--" ends them (for a JSON argument that
 * starts with '-', e.g. a negative number: `send PID t -- -5`). */
static int parse_args(int argc, char **argv, cli_args *a, unsigned *used)
{
    bool opts = true;
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        bool is_opt = opts && arg[0] == '-' && arg[1] != 0 &&
                      !(arg[1] >= '0' && arg[1] <= '9');
        if (!is_opt) {
            if (a->cmd == NULL)
                a->cmd = arg;
            else if (a->n_pos < CLI_MAX_POS)
                a->pos[a->n_pos++] = arg;
            else {
                return cli_fail(CLI_USAGE,
                                "too many arguments (see stepx --help)");
            }
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            opts = false;
        } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            exit(cli_check_stdout());
        } else if (strcmp(arg, "--json") == 0) {
            a->json = true;
        } else if (strcmp(arg, "--quiet") == 0 || strcmp(arg, "-q") == 0) {
            a->quiet = true;
        } else if (strcmp(arg, "--cluster") == 0) {
            a->cluster = true;
            *used |= OPT_NODE;
        } else if (strcmp(arg, "--wait") == 0) {
            a->wait = true;
            *used |= OPT_WAIT;
        } else if (strcmp(arg, "--send") == 0) {
            if (i + 2 >= argc)
                return cli_fail(CLI_USAGE, "--send needs TOPIC and JSON");
            if (a->n_sends == CLI_MAX_SENDS)
                return cli_fail(CLI_USAGE, "at most %d --send options",
                                CLI_MAX_SENDS);
            a->sends[a->n_sends][0] = argv[i + 1];
            a->sends[a->n_sends][1] = argv[i + 2];
            a->n_sends++;
            i += 2;
            *used |= OPT_SEND;
        } else {
            char name[64];
            const char *v = NULL;
            const char *eq = strchr(arg, '=');
            if (eq != NULL && arg[1] == '-' &&
                (size_t)(eq - arg) < sizeof name) {
                memcpy(name, arg, (size_t)(eq - arg));
                name[eq - arg] = 0;
                v = eq + 1;
            } else {
                snprintf(name, sizeof name, "%s", arg);
            }
            if (!takes_value(name))
                return cli_fail(CLI_USAGE,
                                "unknown option %s (see stepx --help)", arg);
            if (v == NULL) {
                if (i + 1 >= argc)
                    return cli_fail(CLI_USAGE, "%s needs a value", name);
                v = argv[++i];
            }
            int rc = option_value(a, name, v, used);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

static void set_address(cli *c)
{
    const cli_args *a = c->a;
    if (a->connect != NULL) {
        snprintf(c->address, sizeof c->address, "%s", a->connect);
        return;
    }
    const char *path = a->socket_path;
    char def[64];
    if (path == NULL) {
        const char *env = getenv("STEPX_SOCKET");
        if (env != NULL && env[0] != 0)
            path = env;
        else {
            snprintf(def, sizeof def, "/tmp/stepx-%u.sock", (unsigned)getuid());
            path = def;
        }
    }
    snprintf(c->address, sizeof c->address, "unix:%s", path);
}

/* Checks the address's form before connecting (a usage error needs no
 * daemon): a Unix socket path that fits sun_path, or HOST:PORT by the
 * rules sx_client_connect uses (process/hostport.h), so that every
 * address the client would refuse as SX_EINVAL is said here as what it
 * is, not as a server refusing hello. */
static int check_address(const cli *c)
{
    const char *a = c->address;
    bool is_unix = strncmp(a, "unix:", 5) == 0 || strchr(a, '/') != NULL;
    if (is_unix) {
        const char *path = strncmp(a, "unix:", 5) == 0 ? a + 5 : a;
        struct sockaddr_un sa;
        if (path[0] == 0 || strlen(path) >= sizeof sa.sun_path)
            return cli_fail(CLI_USAGE,
                            "bad socket path '%s': empty, or longer than %zu "
                            "bytes (the most a Unix socket path can hold)",
                            path, sizeof sa.sun_path - 1);
        return 0;
    }
    sx__hostport hp;
    const char *why = sx__hostport_parse(a, strlen(a), 0, 0, &hp);
    if (why != NULL)
        return cli_fail(CLI_USAGE,
                        "bad --connect address '%s': %s (expected HOST:PORT: "
                        "an IPv4 address, a name or an IPv6 address in "
                        "brackets, and a port from 1 to 65535, e.g. "
                        "127.0.0.1:7070 or [::1]:7070; or a Unix socket path)",
                        a, why);
    return 0;
}

int main(int argc, char **argv)
{
    /* A daemon that goes away is a write error, not a silent death. */
    signal(SIGPIPE, SIG_IGN);
    cli_args a = { .timeout_ms = -1,
                   .count = 1,
                   .limit = -1,
                   .interval_ms = 1000,
                   .iterations = -1 };
    unsigned used = 0;
    /* --json first, so that errors in the arguments are said in JSON too;
     * an option's value that reads "--json" is that value, as
     * parse_args takes it (`--reason --json`). */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--json") == 0)
            cli_set_json(true);
        else if (strcmp(argv[i], "--send") == 0)
            i += 2;
        else if (takes_value(argv[i]))
            i++;
    }
    int rc = parse_args(argc, argv, &a, &used);
    if (rc != 0)
        return rc;
    if (a.cmd == NULL) {
        usage(stderr);
        return cli_fail(CLI_USAGE, "no command given (see above)");
    }
    if (strcmp(a.cmd, "help") == 0) {
        usage(stdout);
        return cli_check_stdout();
    }
    if (a.token == NULL) {
        const char *env = getenv("STEPX_TOKEN");
        a.token = env != NULL && env[0] != 0 ? env : NULL;
    }
    const command *cmd = NULL;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(a.cmd, commands[i].name) == 0)
            cmd = &commands[i];
    if (cmd == NULL)
        return cli_fail(CLI_USAGE, "unknown command '%s' (see stepx --help)",
                        a.cmd);
    if (a.n_pos < cmd->min_pos || a.n_pos > cmd->max_pos)
        return cli_fail(CLI_USAGE, "usage: stepx %s %s", cmd->name, cmd->args);
    if ((used & ~cmd->opts) != 0)
        return cli_fail(CLI_USAGE,
                        "an option given does not apply to '%s' (usage: stepx "
                        "%s %s)",
                        cmd->name, cmd->name, cmd->args);
    cli c = { .a = &a };
    set_address(&c);
    if ((rc = check_address(&c)) != 0)
        return rc;
    rc = cmd->fn(&c);
    if (c.client != NULL)
        sx_client_close(c.client);
    /* Output that did not get out (a full disk, a reader gone) is a
     * failure, not a silent 0. */
    int out = cli_check_stdout();
    return rc != CLI_OK ? rc : out;
}

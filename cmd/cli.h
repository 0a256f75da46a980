/* cmd/cli.h — the stepx CLI's internals, shared by cmd/stepx.c (options,
 * connection, errors, dispatch), cmd/cli_json.c (JSON <-> msgpack),
 * cmd/cli_ops.c (submit, send, wait, cancel, kill, ps, stats, types),
 * cmd/cli_render.c (tables and trees for people) and cmd/cli_watch.c
 * (watch, top). Never installed.
 *
 * Threads: the CLI is single-threaded; one blocking relay client.
 */
#ifndef SX_CMD_CLI_H
#define SX_CMD_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include <stepx/relay.h>

/* Exit codes (documented in `stepx --help` and the README). */
enum {
    CLI_OK = 0,       /* success                                          */
    CLI_FAILED = 1,   /* the process failed, was terminated or cancelled */
    CLI_USAGE = 2,    /* bad command line, bad JSON, bad PID             */
    CLI_CONNECT = 3,  /* cannot connect, or the connection was lost      */
    CLI_SERVER = 4,   /* the server answered with an error               */
    CLI_TIMEOUT = 5,  /* --timeout passed                                */
    CLI_INTERNAL = 6, /* out of memory, an unreadable reply, or output
                       * that cannot be written (full disk, reader gone) */
};

#define CLI_MAX_POS 8
#define CLI_MAX_SENDS 32

/* The command line, parsed: global options and the subcommand's. */
typedef struct {
    /* global */
    const char *socket_path; /* --socket, else $STEPX_SOCKET or default */
    const char *connect;     /* --connect HOST:PORT (wins over socket)  */
    const char *token;       /* --token, else $STEPX_TOKEN              */
    int64_t timeout_ms;      /* --timeout; -1 when not given            */
    bool json;               /* --json                                  */
    bool quiet;              /* --quiet: no progress lines              */
    /* the subcommand */
    const char *cmd;
    const char *pos[CLI_MAX_POS];
    int n_pos;
    /* subcommand options */
    uint64_t count;      /* submit --count (1 when not given)         */
    bool wait;           /* submit --wait                             */
    int64_t limit;       /* ps --limit; -1 = server default           */
    int64_t interval_ms; /* top --interval (1000)                     */
    int64_t iterations;  /* top -n; -1 = until q                      */
    const char *reason;  /* cancel --reason                           */
    const char *key;     /* submit --key                              */
    const char *restart; /* submit --restart never|on-failure|always  */
    /* submit --max-restarts, --restart-window, --backoff-min,
     * --backoff-max (0: not given) */
    int64_t max_restarts, window_ms, backoff_min_ms, backoff_max_ms;
    int64_t deadline_ms; /* submit --deadline; 0: none */
    int64_t node;        /* submit / ps --node N; 0: none               */
    const char *place;   /* submit --place any|least_loaded             */
    bool cluster;        /* ps --cluster: every node's                   */
    const char *sends[CLI_MAX_SENDS][2]; /* watch --send TOPIC JSON    */
    int n_sends;
} cli_args;

/* A session: the arguments, the connection and where it goes. */
typedef struct {
    const cli_args *a;
    char address[4200];
    sx_client *client; /* NULL until cli_connect */
    sx_pid mailbox;
} cli;

/* ---- cmd/stepx.c ---- */

/* Connects (when not yet) to the daemon: 0 or an exit code (printed). */
int cli_connect(cli *c);
/* Sends request (a msgpack map, no id) and waits up to timeout_ms (< 0:
 * none) for its reply. Returns 0 with *out holding an ok reply (the
 * caller frees it); otherwise prints the problem (what names the
 * request, e.g. "submit"), frees what it got and returns the exit code.
 * An error reply whose code is in pass (a NULL-terminated list; NULL for
 * none) is not printed: it returns 0 with *out holding it, out->ok false. */
int cli_request(cli *c, const char *what, sx_payload request,
                int64_t timeout_ms, const char *const *pass, sx_reply *out);
/* A pass list that lets every error reply through. */
extern const char *const cli_pass_all[];
/* The exit code an error reply stands for (no printing). */
int cli_reply_exit(const sx_reply *r);
/* The exit code for an error reply, after printing it (and, with --json,
 * writing {"ok": false, "error": {...}} plus extra fields to stdout). */
int cli_reply_error(cli *c, const char *what, const sx_reply *r, json_t *extra);
/* A call that got no reply (rc from the client, t its timeout in ms):
 * prints why and returns the exit code: CLI_TIMEOUT, CLI_CONNECT for a
 * connection lost, CLI_INTERNAL for a frame that cannot be read
 * (SX_EPROTO) or out of memory. */
int cli_transport_error(const char *what, int rc, int64_t t);
/* The timeout for one plain request: --timeout, else 30 s. */
int64_t cli_request_timeout(const cli *c);
/* Parses a PID argument ("{node@host|id}", or a bare id on the daemon's
 * node and host once connected): 0, or CLI_USAGE (printed). */
int cli_parse_pid(cli *c, const char *text, sx_pid *out);
/* Flushes stdout: CLI_OK, or CLI_INTERNAL when the output cannot be
 * written, said on stderr (once) for a full disk and the like, quietly
 * for a reader that went away (SIGPIPE is ignored, so a write to a closed
 * pipe fails with EPIPE; `stepx top | head -1` then just ends). */
int cli_check_stdout(void);
/* Monotonic milliseconds. */
int64_t cli_now_ms(void);
/* A progress line on stderr (unless --quiet): on a terminal it rewrites
 * one line; elsewhere it prints a line at most every `every_s` seconds
 * of the elapsed time. cli_progress_end clears a terminal's line. */
typedef struct {
    int64_t start_ms;
    int64_t last_s;
    bool shown;
} cli_progress;
void cli_progress_start(cli_progress *p);
void cli_progress_show(const cli *c, cli_progress *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void cli_progress_end(const cli *c, cli_progress *p);
/* "stepx: " + the message, on stderr (notes and hints; no JSON). */
void cli_errorf(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* A failure the command ends with: "stepx: " + the message on stderr
 * and, with --json, {"ok": false, "error": {"code", "message"}} on
 * stdout, the code named after ex ("usage", "connection", "timeout",
 * "internal", ...). Returns ex. */
/* The words for a transport or engine code, for messages. */
const char *cli_err_text(int rc);
/* Errors are JSON documents from now on (--json). */
void cli_set_json(bool on);
int cli_fail(int ex, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- cmd/cli_json.c ---- */

/* The JSON form of one msgpack value: integers stay integers (an unsigned
 * above INT64_MAX becomes a real), strings and binaries that are valid
 * UTF-8 become strings, other binaries {"$bin": base64}, extensions
 * {"$ext": base64 of the whole encoded value}, non-string map keys their
 * compact JSON text. An empty payload is null. NULL on malformed data or
 * out of memory. */
json_t *cli_json_from_mp(sx_payload p);
/* A JSON string of the text s (an error message, ...): s itself when it
 * is UTF-8, else with U+FFFD for each byte that is not; NULL only when out
 * of memory. */
json_t *cli_json_text_of(const char *s);
/* Packs j as msgpack into pk: integers as integers, reals as doubles,
 * {"$bin": base64} as a binary. 0, SX_EINVAL (bad base64) or pk's error. */
int cli_json_to_mp(const json_t *j, sx_pack *pk);
/* Parses text (any JSON value). NULL after reporting (cli_fail with
 * CLI_USAGE) "bad JSON for <what>" with the parser's position, or when
 * it nests deeper than a request can carry (SX_WIRE_MAX_DEPTH - 1). */
json_t *cli_json_parse(const char *text, const char *what);
/* Compact text of j (any value); the caller frees it. NULL when out of
 * memory. */
char *cli_json_text(const json_t *j);
/* Compact text of a msgpack value, for human output; caller frees. */
char *cli_mp_text(sx_payload p);
/* Writes j compactly on one line of stdout. */
void cli_json_print(const json_t *j);

/* Reads a reply field: the text of a string (into buf, NUL-terminated,
 * cut at cap - 1), an unsigned integer, or the JSON of any value. */
bool cli_get_str(sx_payload map, const char *key, char *buf, size_t cap);
bool cli_get_u64(sx_payload map, const char *key, uint64_t *out);
/* True when map holds key with the value true. */
bool cli_get_true(sx_payload map, const char *key);
json_t *cli_get_json(sx_payload map, const char *key);

/* ---- cmd/cli_render.c ---- */

/* Prints rows (a JSON array of objects) as a table with one column per
 * key in keys (headers: the keys upper-cased); strings as they are,
 * numbers right-aligned, null or missing as "-". */
void cli_print_table(FILE *f, const json_t *rows, const char *const *keys,
                     size_t n_keys);
/* Prints a JSON value for people: objects as aligned "name  value" lines
 * (nested objects indented, arrays of objects as tables). */
void cli_print_tree(FILE *f, const json_t *v, int indent);

/* ---- cmd/cli_ops.c and cmd/cli_watch.c: the subcommands ---- */

/* The stats map, and up to limit (< 0: the server's default) processes,
 * as JSON: 0 or an exit code (printed). */
int cli_fetch_stats(cli *c, json_t **out);
int cli_fetch_ps(cli *c, int64_t limit, json_t **out);
/* As cli_fetch_ps, of node (0: the connected daemon's own). */
int cli_fetch_ps_node(cli *c, int64_t limit, int64_t node, json_t **out);
/* Runs a request built in pk (freed here). */
int cli_run(cli *c, const char *what, sx_pack *pk, int64_t timeout_ms,
            const char *const *pass, sx_reply *out);
/* A request with only an op (and a limit when >= 0, a node when > 0);
 * the reply's `key` as JSON into *out. */
int cli_fetch(cli *c, const char *op, int64_t limit, int64_t node,
              const char *key, json_t **out);

/* ---- cmd/cli_cluster.c ---- */

/* ps --cluster: every member's processes, each entry with its "node"; a
 * node that cannot answer is named on stderr and skipped. */
int cli_fetch_ps_cluster(cli *c, int64_t limit, json_t **out);

int cli_cmd_submit(cli *c);
int cli_cmd_send(cli *c);
int cli_cmd_wait(cli *c);
int cli_cmd_cancel(cli *c);
int cli_cmd_kill(cli *c);
int cli_cmd_ps(cli *c);
int cli_cmd_stats(cli *c);
int cli_cmd_types(cli *c);
int cli_cmd_nodes(cli *c);
int cli_cmd_watch(cli *c);
int cli_cmd_top(cli *c);

/* Waits for pid until deadline_ms (cli_now_ms clock; < 0: none), asking
 * in slices of a second; after each slice that ends without an outcome it
 * shows label on p (NULL: no progress; the caller starts and ends p).
 * Returns 0 with *out the final reply (ok, or an error reply with code
 * failed / terminated / cancelled), or an exit code (printed). */
int cli_wait_pid(cli *c, sx_pid pid, int64_t deadline_ms, cli_progress *p,
                 const char *label, sx_reply *out);
/* Prints a wait's outcome for pid (human or JSON) and returns 0 or
 * CLI_FAILED. */
int cli_print_outcome(cli *c, const char *pid, const sx_reply *r);
/* A wait is asked in slices of CLI_WAIT_SLICE_MS so that a long one can
 * show progress; its reply may take CLI_REPLY_MARGIN_MS longer before
 * the CLI gives up on the connection. */
#define CLI_WAIT_SLICE_MS 1000
#define CLI_REPLY_MARGIN_MS 10000
/* --timeout's deadline from now (cli_now_ms clock), or -1 for none. */
int64_t cli_wait_deadline(const cli *c);
/* Waits until deadline_ms (< 0: none) for one process with a "waiting
 * for PID... N s" line, then prints its outcome: 0 or an exit code. */
int cli_wait_until(cli *c, sx_pid pid, int64_t deadline_ms);
/* An ok reply with nothing to say: human for people, fields plus
 * "ok": true for scripts (fields is taken; NULL: none). */
int cli_print_ok(cli *c, const char *human, json_t *fields);

#endif

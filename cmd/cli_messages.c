/* cmd/cli_messages.c — how the stepx CLI speaks: error messages (plain,
 * or JSON documents with --json), the exit code each stands for, and
 * progress lines on a terminal. The commands are cmd/stepx.c and
 * cmd/cli_ops.c.
 */
#include "cmd/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- messages and progress ---- */

/* The progress line now on the terminal, if any: an error message clears
 * it first, so that the message starts a line of its own. */
static cli_progress *progress_on_tty;

static void progress_clear(void)
{
    if (progress_on_tty != NULL) {
        fputs("\r\033[K", stderr);
        progress_on_tty->shown = false;
        progress_on_tty = NULL;
    }
}

void cli_errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    progress_clear();
    fputs("stepx: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* --json, known before the command line is parsed (main looks for it
 * first), so that even usage errors are JSON documents. */
static bool json_mode;

void cli_set_json(bool on)
{
    json_mode = on;
}

static void json_error_doc(const char *code, const char *message,
                           json_t *extra);

static const char *exit_code_name(int ex)
{
    switch (ex) {
    case CLI_FAILED:
        return "failed";
    case CLI_USAGE:
        return "usage";
    case CLI_CONNECT:
        return "connection";
    case CLI_TIMEOUT:
        return "timeout";
    default:
        return "internal";
    }
}

int cli_fail(int ex, const char *fmt, ...)
{
    char msg[4600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    progress_clear();
    fprintf(stderr, "stepx: %s\n", msg);
    json_error_doc(exit_code_name(ex), msg, NULL);
    return ex;
}

int cli_check_stdout(void)
{
    static bool reported;
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return CLI_OK;
    int err = errno;
    /* A reader that went away (`stepx top | head -1`) ends the output
     * quietly, as a program killed by SIGPIPE would; anything else (a
     * full disk) is said. The failed write may have been an earlier one
     * (errno long gone): on a pipe or socket, that can only be EPIPE. */
    struct stat st;
    bool gone =
        err == EPIPE || (err == 0 && fstat(fileno(stdout), &st) == 0 &&
                         (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)));
    if (!reported && !gone) {
        reported = true;
        progress_clear();
        /* stderr only: stdout is what cannot be written, even with --json */
        fprintf(stderr, "stepx: cannot write the output: %s\n",
                err != 0 ? strerror(err) : "write error");
    }
    return CLI_INTERNAL;
}

int64_t cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cli_progress_start(cli_progress *p)
{
    p->start_ms = cli_now_ms();
    p->last_s = 0;
    p->shown = false;
}

/* On a terminal the line is rewritten every second; in a log, a line at
 * 1..10 s, then every 10 s, so that long waits stay readable. */
void cli_progress_show(const cli *c, cli_progress *p, const char *fmt, ...)
{
    if (c->a->quiet)
        return;
    int64_t s = (cli_now_ms() - p->start_ms) / 1000;
    bool tty = isatty(STDERR_FILENO);
    if (s < 1 || s == p->last_s || (!tty && s > 10 && s % 10 != 0))
        return;
    p->last_s = s;
    va_list ap;
    va_start(ap, fmt);
    fputs(tty ? "\r" : "", stderr);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "... %lld s%s", (long long)s, tty ? "\033[K" : "\n");
    fflush(stderr);
    va_end(ap);
    p->shown = true;
    if (tty)
        progress_on_tty = p;
}

void cli_progress_end(const cli *c, cli_progress *p)
{
    (void)c;
    if (progress_on_tty == p)
        progress_clear();
    p->shown = false;
}

/* ---- errors ---- */

const char *cli_err_text(int rc)
{
    if (rc < 0 && rc > -5000)
        return strerror(-rc);
    return sx_strerror(rc);
}

/* With --json, failures are documents too: {"ok": false, "error": ...}
 * (plus the fields of extra, which this takes). */
static void json_error_doc(const char *code, const char *message, json_t *extra)
{
    if (!json_mode) {
        json_decref(extra);
        return;
    }
    json_t *o = extra != NULL ? extra : json_object();
    json_object_set_new(o, "ok", json_false());
    /* A message that is not UTF-8 (a server's, a file name's) is shown
     * with U+FFFD: json_pack refuses it, and the error would go missing. */
    json_object_set_new(o, "error",
                        json_pack("{s:s,s:o*}", "code", code, "message",
                                  cli_json_text_of(message)));
    cli_json_print(o);
    json_decref(o);
}

const char *const cli_pass_all[] = { NULL };

int cli_reply_exit(const sx_reply *r)
{
    const char *code = r->code != NULL ? r->code : "internal";
    if (strcmp(code, "timeout") == 0)
        return CLI_TIMEOUT;
    /* How a process ended (a job past its restart limit is one too). */
    if (strcmp(code, "failed") == 0 || strcmp(code, "terminated") == 0 ||
        strcmp(code, "cancelled") == 0 || strcmp(code, "too_large") == 0 ||
        strcmp(code, "restart_limit") == 0)
        return CLI_FAILED;
    return CLI_SERVER;
}

int cli_reply_error(cli *c, const char *what, const sx_reply *r, json_t *extra)
{
    (void)c;
    const char *code = r->code != NULL ? r->code : "internal";
    const char *msg = r->message != NULL ? r->message : "";
    int ex = cli_reply_exit(r);
    cli_errorf("%s: %s (%s)", what, msg[0] != 0 ? msg : code, code);
    json_error_doc(code, msg, extra);
    return ex;
}

int cli_transport_error(const char *what, int rc, int64_t t)
{
    char msg[256];
    int ex = CLI_CONNECT;
    const char *code = "connection";
    if (rc == SX_ETIMEDOUT) {
        snprintf(msg, sizeof msg, "no reply within %lld ms", (long long)t);
        ex = CLI_TIMEOUT;
        code = "timeout";
    } else if (rc == SX_ECLOSED) {
        snprintf(msg, sizeof msg, "the daemon closed the connection");
    } else if (rc == SX_EPROTO) {
        snprintf(msg, sizeof msg, "a reply the CLI cannot read (protocol)");
        ex = CLI_INTERNAL;
        code = "internal";
    } else {
        snprintf(msg, sizeof msg, "%s", cli_err_text(rc));
        if (rc == SX_ENOMEM) {
            ex = CLI_INTERNAL;
            code = "internal";
        }
    }
    cli_errorf("%s: %s", what, msg);
    json_error_doc(code, msg, NULL);
    return ex;
}

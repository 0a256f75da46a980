/* cmd/cli_watch.c — the stepx CLI's streaming commands: `watch` (a
 * process's exit and the messages this connection's mailbox receives)
 * and `top` (the engine's figures, refreshed every interval; plain text,
 * q or Ctrl-C quits). Threads: the CLI's one thread; `top` takes SIGINT
 * and SIGTERM with a handler that only sets a flag.
 */
#include "cmd/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define TOP_PS_LIMIT 10000 /* processes fetched per refresh */
#define TOP_ROWS 10        /* busiest processes shown */

/* ---- watch ---- */

static void print_message(const sx_payload body)
{
    char from[SX_PID_TEXT_MAX + 8] = "?", topic[300] = "?";
    cli_get_str(body, "from", from, sizeof from);
    cli_get_str(body, "topic", topic, sizeof topic);
    json_t *data = cli_get_json(body, "data");
    char *t = data != NULL ? cli_json_text(data) : NULL;
    printf("message from %s [%s]: %s\n", from, topic, t != NULL ? t : "?");
    free(t);
    json_decref(data);
}

/* Prints an exit push; returns the exit code it stands for. */
static int print_exit(const sx_payload body, bool json)
{
    char pid[SX_PID_TEXT_MAX + 8] = "?";
    cli_get_str(body, "pid", pid, sizeof pid);
    sx_payload v;
    sx_unpack u;
    bool ok = false;
    if (sx_map_get(body, "ok", &v) == 0) {
        sx_unpack_init(&u, v);
        sx_unpack_bool(&u, &ok);
    }
    if (json)
        return ok ? CLI_OK : CLI_FAILED;
    if (ok) {
        json_t *r = cli_get_json(body, "result");
        char *t = r != NULL ? cli_json_text(r) : NULL;
        printf("exit %s: done: %s\n", pid, t != NULL ? t : "null");
        free(t);
        json_decref(r);
        return CLI_OK;
    }
    json_t *e = cli_get_json(body, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_is_string(e)
                          ? json_string_value(e)
                          : json_string_value(json_object_get(e, "message"));
    printf("exit %s: %s: %s\n", pid, code != NULL ? code : "failed",
           msg != NULL ? msg : "");
    json_decref(e);
    return CLI_FAILED;
}

/* Sends every --send TOPIC JSON to pid from this connection. */
static int watch_sends(cli *c, const char *pid, json_t **datas)
{
    const cli_args *a = c->a;
    for (int i = 0; i < a->n_sends; i++) {
        sx_pack pk;
        sx_pack_init(&pk);
        sx_pack_map(&pk, 4);
        sx_pack_str(&pk, "op");
        sx_pack_str(&pk, "send");
        sx_pack_str(&pk, "to");
        sx_pack_str(&pk, pid);
        sx_pack_str(&pk, "topic");
        sx_pack_str(&pk, a->sends[i][0]);
        sx_pack_str(&pk, "data");
        int rc = cli_json_to_mp(datas[i], &pk);
        if (rc == 0 && pk.err == 0) {
            sx_reply r;
            rc = cli_request(c, "send", sx_pack_payload(&pk),
                             cli_request_timeout(c), NULL, &r);
            if (rc == 0)
                sx_reply_free(&r);
        } else {
            rc = cli_fail(rc == SX_EINVAL ? CLI_USAGE : CLI_INTERNAL,
                          "--send %s: %s", a->sends[i][0],
                          rc == SX_EINVAL ? "a {\"$bin\": ...} value is not "
                                            "valid base64"
                                          : "cannot build the request");
        }
        sx_pack_fini(&pk);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Streams pushes until the exit of target (or the deadline). */
static int watch_loop(cli *c, const char *target)
{
    int64_t deadline =
        c->a->timeout_ms >= 0 ? cli_now_ms() + c->a->timeout_ms : -1;
    for (;;) {
        int64_t wait = -1;
        if (deadline >= 0 && (wait = deadline - cli_now_ms()) < 0)
            wait = 0;
        sx_reply push;
        int rc = sx_client_next_push(c->client, wait, &push);
        if (rc == SX_ETIMEDOUT)
            return cli_fail(CLI_TIMEOUT,
                            "watch: %s did not exit within %lld ms", target,
                            (long long)c->a->timeout_ms);
        if (rc != 0) /* as for a request: a push it cannot read is 6 */
            return cli_transport_error("watch", rc, wait);
        char kind[32] = "", pid[SX_PID_TEXT_MAX + 8] = "";
        cli_get_str(push.body, "push", kind, sizeof kind);
        cli_get_str(push.body, "pid", pid, sizeof pid);
        if (c->a->json) {
            json_t *j = cli_json_from_mp(push.body);
            if (j != NULL)
                cli_json_print(j);
            json_decref(j);
        } else if (strcmp(kind, "message") == 0) {
            print_message(push.body);
        } else if (strcmp(kind, "dropped") == 0) {
            uint64_t n = 0;
            cli_get_u64(push.body, "count", &n);
            printf("dropped %llu message%s (this client read too slowly, "
                   "or they could not be sent)\n",
                   (unsigned long long)n, n == 1 ? "" : "s");
        }
        rc = -1;
        if (strcmp(kind, "exit") == 0) {
            int ex = print_exit(push.body, c->a->json);
            if (strcmp(pid, target) == 0)
                rc = ex;
        }
        sx_reply_free(&push);
        /* A reader that went away (`| head -1`) ends the stream. */
        int out = cli_check_stdout();
        if (out != CLI_OK)
            return out;
        if (rc >= 0)
            return rc;
    }
}

int cli_cmd_watch(cli *c)
{
    const cli_args *a = c->a;
    /* The JSON first: a usage error needs no daemon. */
    json_t *datas[CLI_MAX_SENDS] = { NULL };
    int rc = 0;
    for (int i = 0; i < a->n_sends && rc == 0; i++)
        if ((datas[i] = cli_json_parse(a->sends[i][1], "--send")) == NULL)
            rc = CLI_USAGE;
    sx_pid pid = { 0 };
    if (rc == 0)
        rc = cli_parse_pid(c, a->pos[0], &pid);
    if (rc == 0)
        rc = cli_connect(c);
    char text[SX_PID_TEXT_MAX];
    sx_pid_format(pid, text, sizeof text);
    sx_pack pk;
    sx_pack_init(&pk);
    sx_pack_map(&pk, 2);
    sx_pack_str(&pk, "op");
    sx_pack_str(&pk, "subscribe");
    sx_pack_str(&pk, "pid");
    sx_pack_str(&pk, text);
    sx_reply r;
    if (rc == 0 && (rc = cli_request(c, "watch", sx_pack_payload(&pk),
                                     cli_request_timeout(c), NULL, &r)) == 0)
        sx_reply_free(&r);
    sx_pack_fini(&pk);
    if (rc == 0 && !a->json && !a->quiet) {
        char mb[SX_PID_TEXT_MAX];
        sx_pid_format(c->mailbox, mb, sizeof mb);
        fprintf(stderr,
                "watching %s (this connection's mailbox is %s) "
                "until it exits; Ctrl-C stops\n",
                text, mb);
    }
    if (rc == 0)
        rc = watch_sends(c, text, datas);
    for (int i = 0; i < a->n_sends; i++)
        json_decref(datas[i]);
    return rc != 0 ? rc : watch_loop(c, text);
}

/* ---- top ---- */

static volatile sig_atomic_t top_stop; /* set by the signal handler */
/* The handler's wake-up for top_pause (a self-pipe, both ends
 * non-blocking): a signal that came between the pause's look at top_stop
 * and its poll would otherwise wait out the whole interval. -1 when the
 * pipe could not be made (EINTR alone then). */
static int top_wake[2] = { -1, -1 };

static void top_on_signal(int sig)
{
    (void)sig;
    top_stop = 1;
    if (top_wake[1] >= 0) {
        int saved = errno;
        ssize_t w = write(top_wake[1], "", 1); /* full: a wake-up is queued */
        (void)w;
        errno = saved;
    }
}

static void top_wake_open(void)
{
    if (pipe(top_wake) != 0) {
        top_wake[0] = top_wake[1] = -1;
        return;
    }
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(top_wake[i], F_GETFL);
        fcntl(top_wake[i], F_SETFL, fl | O_NONBLOCK);
        fcntl(top_wake[i], F_SETFD, FD_CLOEXEC);
    }
}

static void top_wake_close(void)
{
    for (int i = 0; i < 2; i++) {
        if (top_wake[i] >= 0)
            close(top_wake[i]);
        top_wake[i] = -1;
    }
}

typedef struct {
    json_t *prev; /* the last stats, for rates */
    int64_t prev_ms;
    bool tty_out;
} top_state;

/* The change per second of every integer figure since the last frame. */
static json_t *top_rates(top_state *t, const json_t *stats, int64_t now)
{
    json_t *rates = json_object();
    const char *k;
    json_t *v;
    double dt = (double)(now - t->prev_ms) / 1000.0;
    if (t->prev == NULL || dt <= 0)
        return rates;
    json_object_foreach((json_t *)stats, k, v)
    {
        json_t *p = json_object_get(t->prev, k);
        if (json_is_integer(v) && json_is_integer(p))
            json_object_set_new(rates, k,
                                json_real((double)(json_integer_value(v) -
                                                   json_integer_value(p)) /
                                          dt));
    }
    return rates;
}

static int by_steps(const void *a, const void *b)
{
    json_int_t x =
        json_integer_value(json_object_get(*(json_t *const *)a, "steps"));
    json_int_t y =
        json_integer_value(json_object_get(*(json_t *const *)b, "steps"));
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Live processes by state, and the busiest TOP_ROWS (by steps). */
static void top_procs(const json_t *procs, json_t **states, json_t **busiest)
{
    size_t n = json_array_size(procs), i;
    json_t **v = malloc(sizeof(json_t *) * (n > 0 ? n : 1));
    *states = json_object();
    *busiest = json_array();
    if (v == NULL)
        return;
    for (i = 0; i < n; i++) {
        v[i] = json_array_get(procs, i);
        const char *s = json_string_value(json_object_get(v[i], "state"));
        if (s == NULL)
            s = "?";
        json_int_t k = json_integer_value(json_object_get(*states, s));
        json_object_set_new(*states, s, json_integer(k + 1));
    }
    qsort(v, n, sizeof v[0], by_steps);
    for (i = 0; i < n && i < TOP_ROWS; i++)
        json_array_append(*busiest, v[i]);
    free(v);
}

static void top_render(cli *c, top_state *t, json_t *stats, json_t *rates,
                       json_t *states, json_t *busiest, size_t listed)
{
    if (t->tty_out)
        fputs("\033[H\033[2J", stdout);
    else
        fputs("---\n", stdout);
    char clock[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(clock, sizeof clock, "%H:%M:%S", localtime_r(&now, &tm));
    printf("stepx top  %s  %s  (every %.1f s; q or Ctrl-C quits)\n\n",
           c->address, clock, (double)c->a->interval_ms / 1000.0);
    const char *k;
    json_t *v;
    printf("%-26s %16s %14s\n", "FIGURE", "VALUE", "PER SECOND");
    json_object_foreach(stats, k, v)
    {
        if (json_is_object(v) || json_is_array(v))
            continue;
        char *s = cli_json_text(v);
        json_t *r = json_object_get(rates, k);
        char rate[32] = "";
        if (json_is_real(r))
            snprintf(rate, sizeof rate, "%+.0f", json_real_value(r));
        printf("%-26s %16s %14s\n", k, s != NULL ? s : "?", rate);
        free(s);
    }
    json_object_foreach(stats, k, v)
    {
        if (!json_is_object(v) && !json_is_array(v))
            continue;
        json_t *one = json_object();
        json_object_set(one, k, v);
        putchar('\n');
        cli_print_tree(stdout, one, 0);
        json_decref(one);
    }
    printf("\nprocesses: %zu listed", listed);
    json_object_foreach(states, k, v)
    {
        printf(", %lld %s", (long long)json_integer_value(v), k);
    }
    putchar('\n');
    if (json_array_size(busiest) > 0) {
        static const char *const keys[] = { "pid", "type", "method", "state",
                                            "steps" };
        cli_print_table(stdout, busiest, keys, 5);
    }
    fflush(stdout);
}

/* One refresh: fetch, then print (people) or write one line (JSON). */
static int top_frame(cli *c, top_state *t)
{
    json_t *stats, *procs;
    int rc = cli_fetch_stats(c, &stats);
    if (rc != 0)
        return rc;
    if ((rc = cli_fetch_ps(c, TOP_PS_LIMIT, &procs)) != 0) {
        json_decref(stats);
        return rc;
    }
    int64_t now = cli_now_ms();
    json_t *rates = top_rates(t, stats, now), *states, *busiest;
    top_procs(procs, &states, &busiest);
    if (c->a->json) {
        json_t *o = json_pack("{s:O,s:O,s:O,s:O,s:I}", "stats", stats, "rates",
                              rates, "states", states, "busiest", busiest,
                              "listed", (json_int_t)json_array_size(procs));
        cli_json_print(o);
        json_decref(o);
    } else {
        top_render(c, t, stats, rates, states, busiest, json_array_size(procs));
    }
    json_decref(t->prev);
    t->prev = stats;
    t->prev_ms = now;
    json_decref(rates);
    json_decref(states);
    json_decref(busiest);
    json_decref(procs);
    return 0;
}

/* Sleeps up to ms, watching stdin for q (a terminal in raw mode, or a
 * pipe). True when it is time to quit. */
static bool top_pause(int64_t ms, bool *stdin_open)
{
    int64_t until = cli_now_ms() + ms;
    while (!top_stop) {
        int64_t left = until - cli_now_ms();
        if (left <= 0)
            return false;
        struct pollfd p[2] = { { top_wake[0], POLLIN, 0 },
                               { STDIN_FILENO, POLLIN, 0 } };
        int n = poll(p, *stdin_open ? 2 : 1, (int)left);
        if (n < 0 && errno != EINTR)
            return true;
        if (p[0].revents != 0)
            return true; /* the signal handler's wake-up */
        if (n > 0 && p[1].revents != 0) {
            char buf[64];
            ssize_t r = read(STDIN_FILENO, buf, sizeof buf);
            if (r <= 0)
                *stdin_open = false; /* EOF: just keep refreshing */
            for (ssize_t i = 0; i < r; i++)
                if (buf[i] == 'q' || buf[i] == 'Q' || buf[i] == 3)
                    return true;
        }
    }
    return true;
}

int cli_cmd_top(cli *c)
{
    int rc = cli_connect(c);
    if (rc != 0)
        return rc;
    top_state t = { .tty_out = isatty(STDOUT_FILENO) && !c->a->json };
    struct termios saved;
    bool raw = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0;
    if (raw) { /* keys without Enter, no echo; Ctrl-C still signals */
        struct termios tio = saved;
        tio.c_lflag &= (tcflag_t) ~(ICANON | ECHO);
        tio.c_cc[VMIN] = 1;
        tio.c_cc[VTIME] = 0;
        tcsetattr(STDIN_FILENO, TCSANOW, &tio);
    }
    struct sigaction sa, old_int, old_term;
    top_wake_open();
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = top_on_signal; /* no SA_RESTART: poll returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    bool stdin_open = true;
    for (int64_t i = 0; !top_stop; i++) {
        if ((rc = top_frame(c, &t)) != 0)
            break;
        /* A reader that went away (`| head -1`) ends top. */
        if ((rc = cli_check_stdout()) != CLI_OK)
            break;
        if (c->a->iterations > 0 && i + 1 >= c->a->iterations)
            break;
        if (top_pause(c->a->interval_ms, &stdin_open))
            break;
    }
    if (raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    top_wake_close();
    json_decref(t.prev);
    return rc;
}

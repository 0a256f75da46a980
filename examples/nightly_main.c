/* examples/nightly_main.c — runs the nightly report (examples/nightly.c)
 * twice and checks what it did; `meson test example-nightly` runs it, and
 * it exits 1 when anything differs from what is expected:
 *
 * 1. five sections: one that works at once, one that fails twice and then
 *    works (retries), one that always fails (retries run out), one that
 *    hangs past the 2 s deadline, one that prints late in the list; the
 *    file holds their lines in input order;
 * 2. the same report cancelled while its sections run: it ends cancelled
 *    with the reason given, and so does every section (their subprocesses
 *    killed), within a second.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "examples/nightly.h"

static int failures;

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void check(int ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

static char *slurp(const char *path)
{
    static char buf[8192];
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    buf[n] = 0;
    return buf;
}

int main(void)
{
    char dir[] = "/tmp/stepx-nightly-XXXXXX", out[64], flaky[256];
    if (mkdtemp(dir) == NULL)
        return 1;
    snprintf(out, sizeof out, "%s/report.txt", dir);
    snprintf(flaky, sizeof flaky,
             "n=$(cat %s/n 2>/dev/null || echo 0); echo $((n+1)) > %s/n; "
             "[ $n -ge 2 ] && echo flaky ok after $((n+1))",
             dir, dir);
    sx_engine *e;
    sx_engine_config cfg = { .workers = 2 };
    if (sx_engine_new(&cfg, &e) != 0 ||
        sx_engine_register(e, &nightly_types[0]) != 0 ||
        sx_engine_register(e, &nightly_types[1]) != 0 || sx_engine_start(e))
        return 1;
    uint8_t b[6][512];
    sx_payload in[6];
    const char *text[6] = { out,        "echo disk ok",
                            flaky,      "echo broken >&2; exit 3",
                            "sleep 30", "echo last" };
    for (int i = 0; i < 6; i++) {
        sx_pack pk;
        sx_pack_init_fixed(&pk, b[i], sizeof b[i]);
        sx_pack_str(&pk, text[i]);
        in[i] = sx_pack_payload(&pk);
    }
    sx_pid pid;
    sx_result r;
    check(sx_engine_submit(e, "report", "run", in, 6, &pid) == 0, "submit");
    int wrc = sx_engine_wait(e, pid, 30000, &r);
    if (wrc != 0 || r.error != 0)
        printf("report ended %d: %s\n", wrc != 0 ? wrc : r.error,
               wrc != 0 ? sx_strerror(wrc) : r.error_msg);
    check(wrc == 0 && r.error == 0 &&
              sx_get_int(r.value, "sections", -1) == 5 &&
              sx_get_int(r.value, "failed", -1) == 2,
          "report: DONE, 5 sections, 2 failed");
    sx_result_free(&r);
    const char *want = "1 ok disk ok\n\n"
                       "2 ok flaky ok after 3\n\n"
                       "3 FAILED after 4 attempts: exec: exit status 3: "
                       "broken\n"
                       "4 FAILED deadline of 2000 ms passed\n"
                       "5 ok last\n\n";
    const char *got = slurp(out);
    check(strcmp(got, want) == 0, "the file: every section in input order");
    if (strcmp(got, want) != 0)
        printf("---- got:\n%s---- want:\n%s----\n", got, want);

    sx_engine_stats before, after;
    sx_engine_stats_get(e, &before, NULL, 0);
    in[1] = in[4]; /* five sections that hang */
    in[2] = in[4];
    in[3] = in[4];
    in[5] = in[4];
    check(sx_engine_submit(e, "report", "run", in, 6, &pid) == 0, "submit 2");
    sleep_ms(300);
    check(sx_engine_cancel(e, pid, "the night is over") == 0, "cancel");
    check(sx_engine_wait(e, pid, 5000, &r) == 0 && r.error == SX_ECANCELLED &&
              strcmp(r.error_msg, "the night is over") == 0,
          "report 2: cancelled, with the reason given");
    sx_result_free(&r);
    for (int i = 0; i < 100; i++) { /* the sections end as they are told */
        sx_engine_stats_get(e, &after, NULL, 0);
        if (after.live == 0 && after.io_inflight == 0)
            break; /* the subprocesses are reaped a moment after */
        sleep_ms(20);
    }
    check(after.live == 0 && after.cancelled - before.cancelled == 6 &&
              after.io_inflight == 0,
          "report 2: its 5 sections cancelled too, no subprocess left");
    if (after.live != 0 || after.cancelled - before.cancelled != 6 ||
        after.io_inflight != 0)
        printf("  live %llu, cancelled %llu, io_inflight %llu\n",
               (unsigned long long)after.live,
               (unsigned long long)(after.cancelled - before.cancelled),
               (unsigned long long)after.io_inflight);
    sx_engine_free(e);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    if (system(rm) != 0)
        return 1;
    printf("stepx-nightly: %s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
}

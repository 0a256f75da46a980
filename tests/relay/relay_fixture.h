/* tests/relay/relay_fixture.h — what the relay client tests share
 * (test_clients.c, test_pipeline.c): three process types (square.run [x]:
 * x % 3 no-op yields then x * x; sleeper.run [ms]; idle.serve), a fixture
 * that starts an engine and a relay server on a Unix socket in a fresh
 * temporary directory, and small helpers. Included once per test file. */
#ifndef SX_TESTS_RELAY_FIXTURE_H
#define SX_TESTS_RELAY_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stepx/relay.h>

#include "tests/harness.h"

/* ==== process types ===================================================== */

static const sx_payload nil = { NULL, 0 };
static const char *const run_m[] = { "run", NULL };
static const char *const serve_m[] = { "serve", NULL };

/* square.run [x]: x % 3 no-op yields, DONE x * x. */
typedef struct {
    int64_t x, left;
} square_st;

static int square_init(void *st, const sx_init_ctx *c, const char *m,
                       const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    square_st *s = st;
    if (n != 1 || sx_payload_get_int(in[0], &s->x) != 0)
        return SX_EINVAL;
    s->left = s->x % 3;
    return 0;
}

static int square_step(void *st, const sx_event *ev, size_t n,
                       sx_step_output *out)
{
    (void)ev, (void)n;
    square_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    if (s->left-- > 0) {
        sx_yield(out, SX_CMD_NOOP, 1, nil);
        sx_wait(out);
        return 0;
    }
    sx_done(out, sx_payload_int(b, s->x * s->x));
    return 0;
}

/* sleeper.run [ms]: one sleep, DONE ms. */
typedef struct {
    int64_t ms;
    int slept;
} sleeper_st;

static int sleeper_init(void *st, const sx_init_ctx *c, const char *m,
                        const sx_payload *in, size_t n)
{
    (void)c, (void)m;
    sleeper_st *s = st;
    return n == 1 && sx_payload_get_int(in[0], &s->ms) == 0 ? 0 : SX_EINVAL;
}

static int sleeper_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    sleeper_st *s = st;
    uint8_t b[SX_PAYLOAD_INT_MAX];
    if (!s->slept) {
        s->slept = 1;
        sx_yield(out, SX_CMD_SLEEP, 1, sx_payload_int(b, s->ms));
        sx_wait(out);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (ev[i].type == SX_EVENT_YIELD_COMPLETE) {
            sx_done(out, sx_payload_int(b, s->ms));
            return 0;
        }
    sx_wait(out);
    return 0;
}

/* idle.serve: IDLE until terminated or stopped. */
static int idle_init(void *st, const sx_init_ctx *c, const char *m,
                     const sx_payload *in, size_t n)
{
    (void)st, (void)c, (void)m, (void)in, (void)n;
    return 0;
}

static int idle_step(void *st, const sx_event *ev, size_t n,
                     sx_step_output *out)
{
    (void)st, (void)ev, (void)n;
    sx_idle(out);
    return 0;
}

static const sx_process_type types[] = {
    { .name = "square",
      .state_size = sizeof(square_st),
      .init = square_init,
      .step = square_step,
      .methods = run_m },
    { .name = "sleeper",
      .state_size = sizeof(sleeper_st),
      .init = sleeper_init,
      .step = sleeper_step,
      .methods = run_m },
    { .name = "idle",
      .state_size = 8,
      .init = idle_init,
      .step = idle_step,
      .methods = serve_m },
};

/* ==== fixture =========================================================== */

typedef struct {
    sx_engine *e;
    sx_server *s;
    char dir[64];
    char path[128];
} fixture;

static inline void fx_up_out(fixture *f, size_t max_output)
{
    memset(f, 0, sizeof(*f));
    sx_engine_config ec = { .workers = 2 };
    CHECK_RC(sx_engine_new(&ec, &f->e), 0);
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        CHECK_RC(sx_engine_register(f->e, &types[i]), 0);
    CHECK_RC(sx_engine_start(f->e), 0);
    strcpy(f->dir, "/tmp/sxrelXXXXXX");
    CHECK(mkdtemp(f->dir) != NULL);
    snprintf(f->path, sizeof(f->path), "%s/s.sock", f->dir);
    sx_server_config sc = { .socket_path = f->path, .max_output = max_output };
    CHECK_RC(sx_server_start(f->e, &sc, &f->s), 0);
}

static inline void fx_up(fixture *f)
{
    fx_up_out(f, 0);
}

static inline void fx_down(fixture *f)
{
    if (f->s != NULL)
        sx_server_stop(f->s);
    CHECK_RC(sx_engine_stop(f->e, 1000), 0);
    sx_engine_free(f->e);
    rmdir(f->dir);
}

static inline void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static inline int64_t reply_int(const sx_reply *r, const char *key)
{
    sx_payload v;
    int64_t x = -1;
    CHECK_RC(sx_map_get(r->body, key, &v), 0);
    CHECK_RC(sx_payload_get_int(v, &x), 0);
    return x;
}

#endif

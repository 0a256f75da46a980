/* tests/relay/test_hub.c — the relay loop's spin while waits are open
 * (relay/hub.c, "the doorbell"): the gate keeps the loop polling without
 * blocking for a while after it last had work, yielding its core each
 * round, and a yield that comes back late (another thread ran on that
 * core) pauses the spin, for longer each time it keeps happening, so that
 * the loop sleeps in its poll, where a request wakes it, instead of
 * waiting out someone else's slice. The gate runs here on a server
 * record of its own (a hub, a libuv loop and the gate's idle handle; no
 * listener, no engine), and the pause's arithmetic with given times.
 *
 * Single-threaded.
 */
#include "relay/server.h"
#include "tests/support/harness.h"

#include <stdlib.h>
#include <unistd.h>

#define MS 1000000ull

typedef struct {
    uv_loop_t loop;
    sx_server *s;
} gate_fx;

static void gate_up(gate_fx *g)
{
    CHECK_RC(uv_loop_init(&g->loop), 0);
    g->s = calloc(1, sizeof(*g->s));
    CHECK(g->s != NULL);
    CHECK_RC(sx__relay_hub_new(g->s), 0);
    CHECK_RC(uv_idle_init(&g->loop, &g->s->bell_again), 0);
    g->s->gate.data = g->s;
    g->s->n_waits = 1;          /* a wait is open: the gate may spin */
    g->s->spin_ns = 100 * 1000; /* as sx__relay_spin_init sets on >1 core */
}

static void gate_down(gate_fx *g)
{
    uv_close((uv_handle_t *)&g->s->bell_again, NULL);
    CHECK_RC(uv_run(&g->loop, UV_RUN_DEFAULT), 0);
    CHECK_RC(uv_loop_close(&g->loop), 0);
    close(g->s->hub->bell_fd);
    sx__relay_hub_unref(g->s->hub);
    free(g->s);
}

/* One pass of the gate: true when it left the loop spinning (not asleep,
 * so that nobody rings and the next poll does not block). */
static bool gate_spins(gate_fx *g)
{
    sx__relay_gate_cb(&g->s->gate);
    pthread_mutex_lock(&g->s->hub->mu);
    bool asleep = g->s->hub->asleep;
    pthread_mutex_unlock(&g->s->hub->mu);
    return !asleep;
}

/* A fresh spin window with no pause. (A pass that spins yields, and on a
 * busy machine that yield may come back late and pause the spin: each
 * check that wants a spin starts from here.) */
static void fresh(gate_fx *g)
{
    g->s->spin_since = 0;
    g->s->spin_off = 0;
    g->s->spin_off_until = 0;
}

/* Property: with a wait open and nothing to do the gate spins; with no
 * wait open, with its window used up, or with the spin paused (a late
 * yield), it lets the loop sleep; the pause ends on its own. */
static void test_gate(void)
{
    gate_fx g;
    gate_up(&g);
    fresh(&g);
    CHECK(gate_spins(&g));
    g.s->n_waits = 0;
    fresh(&g);
    CHECK(!gate_spins(&g));
    g.s->n_waits = 1;
    fresh(&g);
    CHECK(gate_spins(&g));
    /* A window used up: asleep. */
    fresh(&g);
    g.s->spin_since = uv_hrtime() - 200 * 1000;
    CHECK(!gate_spins(&g));
    /* A late yield pauses the spin (for 10 ms: a
     * minute here, so that a test thread held up on a loaded machine
     * does not outlive the pause), however fresh the window. */
    fresh(&g);
    uint64_t now = uv_hrtime();
    sx__relay_spin_yielded(g.s, now - 2 * MS, now);
    CHECK(g.s->spin_off_until >= now + 10 * MS);
    g.s->spin_off_until = now + 60000 * MS;
    CHECK(!gate_spins(&g));
    /* Over: spinning again. (In the server the window that the pause
     * cut short is stale by then: the spin resumes with the next item in
     * the hub or the next wait, which start a new one.) */
    g.s->spin_off_until = uv_hrtime() - 1;
    g.s->spin_since = 0;
    CHECK(gate_spins(&g));
    gate_down(&g);
}

/* Property: the pause doubles with each late yield, from 10 ms up to
 * 1 s; a prompt yield halves it, once per spin window, to none below
 * 10 ms, and never pauses. */
static void test_pause(void)
{
    sx_server *s = calloc(1, sizeof(*s));
    CHECK(s != NULL);
    uint64_t t = 1000 * MS;
    s->spin_since = t;
    sx__relay_spin_yielded(s, t, t + 5 * 1000); /* 5 us: prompt */
    CHECK(s->spin_off == 0 && s->spin_off_until == 0);
    sx__relay_spin_yielded(s, t, t + 49 * 1000); /* under 50 us */
    CHECK(s->spin_off == 0 && s->spin_off_until == 0);
    uint64_t want = 10 * MS;
    for (int i = 0; i < 12; i++) {
        t += 3 * MS;
        sx__relay_spin_yielded(s, t - 3 * MS, t); /* a 3 ms slice */
        CHECK_EQ_U64(s->spin_off, want);
        CHECK_EQ_U64(s->spin_off_until, t + want);
        want = want * 2 > 1000 * MS ? 1000 * MS : want * 2;
    }
    CHECK_EQ_U64(s->spin_off, 1000 * MS);
    uint64_t until = s->spin_off_until;
    /* Many prompt yields in one window: one halving. */
    s->spin_since = t + 1;
    for (int i = 0; i < 50; i++)
        sx__relay_spin_yielded(s, t, t + 1000);
    CHECK_EQ_U64(s->spin_off, 500 * MS);
    /* One a window: 250, 125, 62.5, 31.25, 15.625 ms, then none. */
    for (int i = 0; i < 5; i++) {
        s->spin_since = t + 2 + (uint64_t)i;
        sx__relay_spin_yielded(s, t, t + 1000);
        CHECK(s->spin_off >= 10 * MS);
    }
    s->spin_since = t + 10;
    sx__relay_spin_yielded(s, t, t + 1000);
    CHECK_EQ_U64(s->spin_off, 0);
    CHECK_EQ_U64(s->spin_off_until, until); /* a prompt yield moves no pause */
    /* Late again after that: the pause starts over at 10 ms. */
    sx__relay_spin_yielded(s, t, t + 60 * 1000);
    CHECK_EQ_U64(s->spin_off, 10 * MS);
    free(s);
}

static const sx_test_case cases[] = {
    { "gate", test_gate },
    { "pause", test_pause },
};

SX_TEST_MAIN(cases)

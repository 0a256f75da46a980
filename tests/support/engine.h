/* tests/support/engine.h — the engine fixture: a started engine for a case,
 * and its tear-down.
 *
 *   sx_engine *e = tx_engine_up(&cfg, types, n);   (or tx_engine_up_workers)
 *   ...
 *   tx_engine_down(e);
 *
 * A case with a set-up of its own (commands, the shipped types, a check
 * between the steps) builds it from the parts in the same order:
 * tx_engine_new, tx_engine_register, tx_engine_command, tx_engine_start.
 * Every part fails the case with what it was doing, the type or command
 * it was at, and the engine's error name and message.
 *
 * Types are passed as a table of n values (a single type: &t, 1). The
 * engine keeps pointers into the table (sx_engine_register), so the table
 * must outlive the engine.
 */
#ifndef TX_SUPPORT_ENGINE_H
#define TX_SUPPORT_ENGINE_H

#include <stdint.h>
#include <string.h>

#include <stepx/stepx.h>

#include "tests/support/harness.h"

/* Fails the case unless rc is 0: "engine set-up: WHAT: NAME (message)". */
#define TX_ENGINE_OK(rc, ...)                                                  \
    do {                                                                       \
        int tx_rc_ = (rc);                                                     \
        if (tx_rc_ != 0) {                                                     \
            char tx_what_[160];                                                \
            snprintf(tx_what_, sizeof tx_what_, __VA_ARGS__);                  \
            SX_FAILF("engine set-up: %s: %s (%s)", tx_what_,                   \
                     sx_errname(tx_rc_), sx_strerror(tx_rc_));                 \
        }                                                                      \
    } while (0)

/* A new engine configured as *cfg (NULL: sx_engine_new's defaults), not
 * started. */
static inline sx_engine *tx_engine_new(const sx_engine_config *cfg)
{
    sx_engine *e = NULL;
    if (cfg == NULL)
        TX_ENGINE_OK(sx_engine_new(NULL, &e), "sx_engine_new(NULL)");
    else
        TX_ENGINE_OK(sx_engine_new(cfg, &e),
                     "sx_engine_new(workers %u, throughput %u, io_loops %u, "
                     "max_processes %zu, keep_outcomes %zu)",
                     cfg->workers, cfg->throughput, cfg->io_loops,
                     cfg->max_processes, cfg->keep_outcomes);
    CHECK(e != NULL);
    return e;
}

/* Registers types[0 .. n-1], in order. */
static inline void tx_engine_register(sx_engine *e,
                                      const sx_process_type *types, size_t n)
{
    for (size_t i = 0; i < n; i++)
        TX_ENGINE_OK(sx_engine_register(e, &types[i]),
                     "registering type %zu of %zu, \"%s\"", i + 1, n,
                     types[i].name ? types[i].name : "(no name)");
}

static inline void tx_engine_command(sx_engine *e, uint16_t id,
                                     const char *name, sx_command_fn fn,
                                     void *user)
{
    TX_ENGINE_OK(sx_engine_register_command(e, id, name, fn, user),
                 "registering command %u, \"%s\"", (unsigned)id,
                 name ? name : "(no name)");
}

static inline void tx_engine_start(sx_engine *e)
{
    TX_ENGINE_OK(sx_engine_start(e), "sx_engine_start");
}

/* A started engine configured as *cfg (NULL: defaults) with types[0 ..
 * n-1] registered (types may be NULL when n is 0). */
static inline sx_engine *tx_engine_up(const sx_engine_config *cfg,
                                      const sx_process_type *types, size_t n)
{
    sx_engine *e = tx_engine_new(cfg);
    tx_engine_register(e, types, n);
    tx_engine_start(e);
    return e;
}

/* tx_engine_up with workers workers and every other field its default. */
static inline sx_engine *
tx_engine_up_workers(unsigned workers, const sx_process_type *types, size_t n)
{
    sx_engine_config cfg = { .workers = workers };
    return tx_engine_up(&cfg, types, n);
}

static inline sx_engine_stats tx_engine_stats(sx_engine *e)
{
    sx_engine_stats st;
    memset(&st, 0, sizeof st);
    CHECK_RC(sx_engine_stats_get(e, &st, NULL, 0), 0);
    return st;
}

/* Stops e, giving its processes deadline_ms; fails the case unless the
 * stop returned 0. e stays to be read and freed. */
static inline void tx_engine_stop(sx_engine *e, int64_t deadline_ms)
{
    int rc = sx_engine_stop(e, deadline_ms);
    if (rc != 0)
        SX_FAILF("sx_engine_stop(e, %lld): %s (%s)", (long long)deadline_ms,
                 sx_errname(rc), sx_strerror(rc));
}

/* Stops e (a 1 s deadline) and frees it. */
static inline void tx_engine_down(sx_engine *e)
{
    tx_engine_stop(e, 1000);
    sx_engine_free(e);
}

/* tx_engine_down for a case that used the libuv loops: after the stop
 * nothing of them may be in flight. */
static inline void tx_engine_down_io(sx_engine *e)
{
    tx_engine_stop(e, 1000);
    CHECK_EQ_U64(tx_engine_stats(e).io_inflight, 0);
    sx_engine_free(e);
}

/* Waits up to timeout_ms for pid's outcome and fails the case, with the
 * process's message, unless it finished DONE. The outcome goes to *r (the
 * caller frees it) or, with r NULL, is freed. */
static inline void tx_wait_done(sx_engine *e, sx_pid pid, int64_t timeout_ms,
                                sx_result *r)
{
    sx_result own;
    sx_result *res = r != NULL ? r : &own;
    CHECK_RC(sx_engine_wait(e, pid, timeout_ms, res), 0);
    if (res->error != 0)
        SX_FAILF("process failed: %s (%s)",
                 res->error_msg ? res->error_msg : "no message",
                 sx_errname(res->error));
    if (r == NULL)
        sx_result_free(&own);
}

/* tx_wait_done, then the DONE value, which must be an integer. */
static inline int64_t tx_wait_int(sx_engine *e, sx_pid pid, int64_t timeout_ms)
{
    sx_result r;
    tx_wait_done(e, pid, timeout_ms, &r);
    int64_t v = -1;
    CHECK_RC(sx_payload_get_int(r.value, &v), 0);
    sx_result_free(&r);
    return v;
}

#endif

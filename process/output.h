/* process/output.h — the step output (internal): what one step wrote.
 *
 * The engine keeps one per worker and reuses it for every step the worker
 * runs, so writing a status and yields allocates nothing in steady state:
 * two yields live inline, more go into an array that grows once and is
 * kept; yield arguments, the DONE result and the FAIL message are copied
 * into a byte arena that is reset (not freed) before each step.
 *
 * Threads: [owner] — the worker that owns it; valid only during one step.
 */
#ifndef SX_PROCESS_OUTPUT_H
#define SX_PROCESS_OUTPUT_H

#include <stepx/process.h>

typedef enum {
    SX__ST_CONTINUE = 0,
    SX__ST_WAIT,
    SX__ST_IDLE,
    SX__ST_DONE,
    SX__ST_FAIL
} sx__status;

/* A yield with cmd SX__CMD_DIRECT_SEND is an sx_send: its arena bytes are
 * the sx_pid, one topic-length byte, the topic, then the data. */
#define SX__CMD_DIRECT_SEND 0

typedef struct {
    uint16_t cmd;
    uint64_t tag;
    size_t off; /* arguments: arena[off, off + len) */
    size_t len;
    int64_t timeout_ms; /* 0 = none */
} sx__yield;

struct sx_step_output {
    sx__status status;
    int err; /* first SX_ENOMEM while writing, else 0 */
    size_t n_yields;
    size_t cap_yields; /* capacity of `yields` */
    sx__yield *yields; /* inl, or `more` once it overflowed */
    sx__yield inl[2];
    sx__yield *more; /* owned; kept across steps */
    size_t more_cap;
    size_t result_off, result_len; /* DONE result / FAIL message in arena */
    uint8_t *arena;                /* owned; kept across steps */
    size_t arena_len, arena_cap;
};

void sx__output_init(sx_step_output *out);
void sx__output_fini(sx_step_output *out);
/* Forgets the previous step's status, yields and arena contents. */
void sx__output_reset(sx_step_output *out);
/* Pointer to arena bytes (valid until the next write). */
static inline const uint8_t *sx__output_bytes(const sx_step_output *out,
                                              size_t off)
{
    return out->arena != NULL ? out->arena + off : NULL;
}

#endif

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

/* A yield with cmd SX__CMD_DIRECT_SEND is an sx_send. With send hooks
 * (below) the message is built at once: `ev` is the engine's event node
 * holding the topic and data, `to` the addressee. Without (ev NULL), its
 * arena bytes are the sx_pid, one topic-length byte, the topic, then the
 * data. The id is outside the 16-bit command space, so that no yield
 * (command 0 included, an unknown command like any other) can pass for
 * a send. */
#define SX__CMD_DIRECT_SEND 0x10000u

typedef struct {
    uint32_t cmd; /* a command id (16 bits), or SX__CMD_DIRECT_SEND */
    uint64_t tag;
    size_t off; /* arguments: arena[off, off + len) */
    size_t len;
    int64_t timeout_ms; /* 0 = none */
    /* DIRECT_SEND with hooks: the built message, owned until dispatch
     * takes it (and sets NULL), and its addressee. */
    void *ev;
    sx_pid to;
} sx__yield;

/* Set by the engine on a worker's output: sx_send builds the message node
 * itself (topic and data copied once, straight into the node) instead of
 * copying them into the arena for dispatch to copy again. make returns
 * NULL when out of memory, and SX__SEND_BAD_TOPIC (building nothing) for
 * a topic that is not UTF-8 (sx__topic_ok, process/utf8.h): the hooks
 * check the bytes they copy, and sx_send stays small enough for the
 * compiler to inline it into a step and fold strlen of a literal topic.
 * drop frees a node that was never dispatched (the step failed, or
 * finished with an error). */
#define SX__SEND_BAD_TOPIC ((void *)1)
typedef struct {
    void *(*make)(const char *topic, size_t topic_len, sx_payload data);
    void (*drop)(void *ev);
    /* Adds a message to *ev, the message (or bundle) of the previous send
     * when it went to the same process, holding at most max messages
     * (engine/core/event.c, "Bundles"); 0, or -1 when it does not fit or its
     * topic is not UTF-8 (make then says so). NULL: no bundles. */
    int (*merge)(void **ev, const char *topic, size_t topic_len,
                 sx_payload data, unsigned max);
} sx__send_hooks;

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
    /* DONE: the size of a result sx_done refused for being over
     * result_max (not copied; result_len is 0), else 0. */
    size_t too_large;
    int fail_code;     /* FAIL: the code (sx_fail_code); 0 = SX_EFAILED */
    size_t result_max; /* the engine's max_result; 0 = no limit */
    uint8_t *arena;    /* owned; kept across steps */
    size_t arena_len, arena_cap;
    const sx__send_hooks *hooks; /* NULL: sends go through the arena */
    /* Commands a checkpointed job had in flight, dispatched again as it
     * resumes (sx_completer_resumed); never set on a worker's output. */
    bool resumed;
    /* Messages per bundle (hooks->merge); above 1 only when hooks->merge
     * is set, so sx_send tests this alone. */
    unsigned bundle_max;
    /* Set by the engine once a dispatch took every send's node (it
     * takes them all, whatever else fails): reset then has none to drop
     * and skips looking at the yields. */
    bool sends_gone;
    /* Yields of commands (not sends), and of them those with a tag (an
     * answer will come): what the turn decides the wait from (turn.c,
     * want_of). */
    size_t n_cmds, n_answers;
};

void sx__output_init(sx_step_output *out);
void sx__output_fini(sx_step_output *out);
/* Forgets the previous step's status, yields and arena contents (and
 * drops the messages of sends that were not dispatched). */
void sx__output_reset(sx_step_output *out);
/* Pointer to arena bytes (valid until the next write). */
static inline const uint8_t *sx__output_bytes(const sx_step_output *out,
                                              size_t off)
{
    return out->arena != NULL ? out->arena + off : NULL;
}

#endif

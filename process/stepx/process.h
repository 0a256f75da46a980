/* process/stepx/process.h — the process contract of stepx.
 *
 * What a process type is (init / step / close over a block of zeroed state),
 * the events a step receives, what a step writes (a status and yields), PIDs,
 * error codes, and small helpers that build and read msgpack payloads without
 * msgpack plumbing in user code.
 *
 * Threads: everything here is callable from any thread; a step output is only
 * valid inside the step call that received it.
 */
#ifndef STEPX_PROCESS_H
#define STEPX_PROCESS_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error codes ------------------------------------------------------ */

/* Errno-derived codes equal -errno, so libuv and libc statuses pass through
 * unchanged. Engine codes live in their own band, -5001 and below. */
#define SX_EINVAL (-EINVAL)
#define SX_ENOMEM (-ENOMEM)
#define SX_ETIMEDOUT (-ETIMEDOUT)
#define SX_ECANCELLED (-ECANCELED)
#define SX_EPROTO (-EPROTO)
#define SX_ENOTFOUND (-5001)
#define SX_ECLOSED (-5002)
#define SX_ESTOPPING (-5003)
#define SX_ELIMIT (-5004)
#define SX_EUNKNOWN_TYPE (-5005)
#define SX_EUNKNOWN_METHOD (-5006)
#define SX_EUNKNOWN_COMMAND (-5007)
#define SX_ETERMINATED (-5008)
#define SX_EFAILED (-5009)
#define SX_EEXIST (-5010)
#define SX_ESTATE (-5011)
#define SX_ETOOLARGE (-5012)
#define SX_ECORRUPT (-5013)       /* a state store is damaged or not stepx's */
#define SX_EVERSION (-5014)       /* a state store written by a newer stepx */
#define SX_ESTORAGE (-5015)       /* the state store could not record it */
#define SX_ERESTART_LIMIT (-5016) /* a job ended past its restart limit */
#define SX_ENOCONNECTION (-5017)  /* a PID of a node that is down or unknown */

/* A static message for code (never allocates, never NULL). Any thread. */
const char *sx_strerror(int code);
/* The code's short name, e.g. "SX_ENOTFOUND" (never NULL). Any thread. */
const char *sx_errname(int code);

/* ---- payloads --------------------------------------------------------- */

/* One msgpack-encoded value. Who owns the bytes is said wherever one is
 * handed over; an empty payload (len 0) stands for "no value" (nil). */
typedef struct {
    const uint8_t *data;
    size_t len;
} sx_payload;

/* ---- PIDs ------------------------------------------------------------- */

typedef struct {
    uint32_t node;
    uint32_t host;
    uint64_t id;
} sx_pid;

#define SX_PID_TEXT_MAX 48 /* enough for "{4294967295@4294967295|<u64>}" */

/* Writes "{node@host|id}" with a NUL into buf. Returns the text length, or
 * SX_EINVAL when buf is NULL or cap is too small (buf then holds ""). */
int sx_pid_format(sx_pid pid, char *buf, size_t cap);
/* Parses the exact text form (no spaces, decimal, no sign, no overflow).
 * Returns 0 or SX_EINVAL; *out is untouched on error. */
int sx_pid_parse(const char *text, sx_pid *out);
bool sx_pid_eq(sx_pid a, sx_pid b);
#define SX_PID_NONE ((sx_pid){ 0, 0, 0 })

/* ---- events handed to step -------------------------------------------- */

typedef enum {
    SX_EVENT_YIELD_COMPLETE = 0,
    SX_EVENT_MESSAGE = 1
} sx_event_type;

typedef struct {
    sx_event_type type;
    uint64_t tag;          /* YIELD_COMPLETE: the tag chosen for the yield  */
    int error;             /* 0, or a negative SX_E* code                   */
    const char *error_msg; /* NULL when error == 0                          */
    sx_payload data;       /* result or message body; valid during the step */
    const char *topic;     /* MESSAGE only (NUL-terminated)                 */
    sx_pid from;           /* MESSAGE only                                  */
} sx_event;

/* Topics the engine itself uses for messages. */
#define SX_TOPIC_CANCEL "@cancel" /* soft cancel; data = reason (string)  */
#define SX_TOPIC_EXIT "@exit"     /* monitor: a watched process finished  */
/* spawn-wait with notify: the child's PID, {"tag": the yield's tag, "pid":
 * the child} (docs/COMMANDS.md). */
#define SX_TOPIC_SPAWNED "@spawned"

/* ---- what a step writes ----------------------------------------------- */

typedef struct sx_step_output sx_step_output; /* opaque, owned by the engine */

/* Tag for a yield that wants no completion event (fire and forget). The
 * command still runs; a failure is counted as a dead letter. */
#define SX_TAG_NONE UINT64_MAX

/* Appends a yield of command cmd with the caller's tag. args are copied.
 * The first two yields of a step need no allocation. Returns 0, SX_EINVAL
 * (out NULL, or args.data NULL with args.len > 0), or SX_ENOMEM. Only
 * inside the step that received out. */
int sx_yield(sx_step_output *out, uint16_t cmd, uint64_t tag, sx_payload args);
/* As sx_yield, with a per-yield timeout (beyond the core contract of
 * docs/API.md): when timeout_ms (> 0; 0 = none) passes before the command
 * answers, the process gets the completion for tag with error SX_ETIMEDOUT,
 * the command is cancelled (libuv commands stop their work; other commands'
 * late answers are dropped), and no other answer for tag follows. The clock
 * starts when the engine dispatches the yield, right after the step.
 * Errors: SX_EINVAL (out NULL, timeout_ms < 0, args.data NULL with
 * args.len > 0), SX_ENOMEM. */
int sx_yield_timeout(sx_step_output *out, uint16_t cmd, uint64_t tag,
                     sx_payload args, int64_t timeout_ms);
/* As sx_yield, with the arguments packed from fmt as sx_pack_fmt does
 * (one value: "{s:s, s:i}", "[s,i]", "i"); a step writes a yield in one
 * call. Errors: those of sx_yield and of sx_pack_fmt. */
int sx_yieldf(sx_step_output *out, uint16_t cmd, uint64_t tag, const char *fmt,
              ...);
/* Sends a message {from: this process, topic, data} to `to` once the step
 * returns, like yielding SX_CMD_SEND with tag SX_TAG_NONE but without
 * packing arguments (beyond the core contract of docs/API.md; the fast path
 * for messaging): no answer, a failure (no such process, ...) counts as a
 * dead letter, and the step's status applies as if no yield had been
 * written. Unlike yields, the message goes even when the step ends DONE or
 * FAIL. topic and data are copied. Messages from one process arrive in the
 * order sent. Errors: SX_EINVAL (out or topic NULL, topic over 255 bytes or
 * not valid UTF-8, data over SX_MESSAGE_MAX), SX_ENOMEM. Only inside the
 * step that received out. */
int sx_send(sx_step_output *out, sx_pid to, const char *topic, sx_payload data);
/* The most bytes of data one message carries (sx_send, sx_engine_send). */
#define SX_MESSAGE_MAX ((size_t)UINT32_MAX)
void sx_continue(sx_step_output *out);                  /* default status    */
void sx_wait(sx_step_output *out);                      /* yields / messages */
void sx_idle(sx_step_output *out);                      /* a message only    */
void sx_done(sx_step_output *out, sx_payload result);   /* result copied     */
void sx_fail(sx_step_output *out, const char *message); /* message copied  */
/* As sx_done, with the result packed from fmt as sx_pack_fmt does. Returns
 * 0, or sx_pack_fmt's error (the status is then FAIL with its message). */
int sx_donef(sx_step_output *out, const char *fmt, ...);
/* As sx_fail, finishing with code instead of SX_EFAILED (beyond the core
 * contract of docs/API.md): a negative SX_E* or -errno code; 0 or a
 * positive one is SX_EFAILED. E.g. a process that passes on a child's
 * SX_ETOOLARGE. */
void sx_fail_code(sx_step_output *out, int code, const char *message);
/* Ends the process as cancelled: SX_ECANCELLED with reason as its message
 * (NULL: "cancelled"). The engine counts it apart from failures
 * (sx_engine_stats.cancelled). sx_cancelled_by takes the reason from a
 * @cancel event (sx_batch_next's SX_EV_CANCEL). */
void sx_cancelled(sx_step_output *out, const char *reason);
void sx_cancelled_by(sx_step_output *out, const sx_event *cancel);

/* ---- a process type --------------------------------------------------- */

typedef struct sx_init_ctx sx_init_ctx; /* valid only during init */
typedef struct sx_engine sx_engine;

sx_pid sx_init_pid(const sx_init_ctx *ctx);
sx_engine *sx_init_engine(const sx_init_ctx *ctx);
void *sx_init_user(const sx_init_ctx *ctx);    /* the type's user pointer  */
sx_pid sx_init_parent(const sx_init_ctx *ctx); /* spawner, or SX_PID_NONE */
/* Gives init's error a message that says what was wrong, and returns
 * code, so that init ends with
 *     return sx_init_error(ctx, SX_EINVAL, "input 2 (amount) must be an int");
 * The message (printf format; cut at SX_INIT_ERROR_MAX - 1 bytes) goes
 * where the error goes: the spawn command's error message, the relay's
 * init_failed, and sx_engine_init_error on the thread whose submit failed.
 * A code of 0 or above is SX_EFAILED. Only inside init. */
#define SX_INIT_ERROR_MAX 256
int sx_init_error(const sx_init_ctx *ctx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef struct {
    const char *name;  /* unique type name, e.g. "order-workflow"           */
    size_t state_size; /* bytes of zeroed state the engine gives a process  */
    /* Returns 0, or a negative code (SX_EUNKNOWN_METHOD for a method it does
     * not have): that code is submit's error and nothing is queued. */
    int (*init)(void *state, const sx_init_ctx *ctx, const char *method,
                const sx_payload *input, size_t n_input);
    /* Returns 0, or a negative code: the process then fails with it. */
    int (*step)(void *state, const sx_event *events, size_t n_events,
                sx_step_output *out);
    void (*close)(void *state); /* may be NULL; once per successful init */
    /* Beyond the core contract of docs/API.md (may be left zero): */
    const char *const *methods; /* NULL-terminated entry methods; when set,
                                   an unlisted method is SX_EUNKNOWN_METHOD
                                   before init runs. */
    void *user;                 /* handed to init via sx_init_user        */
    unsigned flags;             /* SX_TYPE_* below; 0: none               */
    /* A deadline for every process of the type, in ms from its start:
     * when it has not ended by then it ends with SX_ETIMEDOUT, as a
     * terminate ends a process (no more steps; close runs). 0: none. A
     * submit's or spawn's own deadline overrides it. */
    int64_t deadline_ms;
} sx_process_type;

/* The type's state is position-independent: its state_size bytes are
 * plain data (no pointers, no handles such as a file descriptor or a
 * connection of this run) and are all there is to a process between two
 * steps. A job of such a type on an engine with a state store is
 * checkpointed after every step that does not end it (its state, the
 * events it consumed, the commands it yielded and the messages it sent,
 * in one transaction, before the commands run), and after a crash it
 * resumes from its last checkpoint instead of from init
 * (docs/DURABILITY.md, "Checkpointed types"). Elsewhere the flag changes
 * nothing. */
#define SX_TYPE_CHECKPOINTED 0x1u

/* ---- payload helpers: building ---------------------------------------- */

/* A msgpack writer. Either growing on the heap (sx_pack_init) or writing
 * into caller storage (sx_pack_init_fixed). Errors are sticky: after the
 * first failure (SX_ENOMEM, or SX_ELIMIT when a fixed buffer is full) every
 * call returns that error and writes nothing. */
typedef struct {
    uint8_t *data;
    size_t len;
    size_t cap;
    int err;
    int fixed; /* 1: data is caller storage and never grows or is freed */
} sx_pack;

void sx_pack_init(sx_pack *pk);
void sx_pack_init_fixed(sx_pack *pk, void *buf, size_t cap);
void sx_pack_fini(sx_pack *pk);  /* frees heap storage; pk may be reused */
void sx_pack_reset(sx_pack *pk); /* len = 0, err = 0, storage kept      */
int sx_pack_nil(sx_pack *pk);
int sx_pack_bool(sx_pack *pk, bool v);
int sx_pack_int(sx_pack *pk, int64_t v);
int sx_pack_uint(sx_pack *pk, uint64_t v);
int sx_pack_double(sx_pack *pk, double v);
int sx_pack_str(sx_pack *pk, const char *s); /* NUL-terminated; NULL = nil */
int sx_pack_strn(sx_pack *pk, const char *s, size_t n);
int sx_pack_bin(sx_pack *pk, const void *p, size_t n);
int sx_pack_array(sx_pack *pk, uint32_t n); /* then n values */
int sx_pack_map(sx_pack *pk, uint32_t n);   /* then n key, value pairs */
int sx_pack_pid(sx_pack *pk, sx_pid pid);   /* as [node, host, id] */
/* Appends an already-encoded value verbatim (an empty payload packs nil). */
int sx_pack_raw(sx_pack *pk, sx_payload v);
/* The bytes written so far; owned by pk and valid until it changes. */
sx_payload sx_pack_payload(const sx_pack *pk);

/* Packs the values fmt describes, in order, from the arguments that
 * follow. One letter per value:
 *   n nil              b bool (int)          i int        I int64_t
 *   u unsigned         U uint64_t            d double
 *   s const char * (NUL-terminated; NULL packs nil)
 *   S const char *, size_t (a string of that many bytes)
 *   y const void *, size_t (a binary)        p sx_pid ([node, host, id])
 *   v sx_payload (an encoded value, verbatim; empty packs nil)
 *   [ ... ] an array of the values inside      { ... } a map of the pairs
 *   inside (key, value, key, value, ...; keys are usually s)
 * Spaces, ',' and ':' are ignored, so "{s:i, s:[s,s]}" reads as written.
 * Errors: SX_EINVAL (fmt NULL, an unknown letter, unbalanced brackets, a
 * map with an odd count; nothing more is written), or pk's sticky error.
 * Arguments are read with the types above: pass an int for i, an int64_t
 * for I (a literal 5 for I is undefined behaviour in C varargs). */
int sx_pack_fmt(sx_pack *pk, const char *fmt, ...);
int sx_pack_vfmt(sx_pack *pk, const char *fmt, va_list ap);

/* One-value payloads into caller storage (no allocation). */
#define SX_PAYLOAD_INT_MAX 9
sx_payload sx_payload_int(uint8_t buf[SX_PAYLOAD_INT_MAX], int64_t v);

/* ---- payload helpers: reading ----------------------------------------- */

/* A cursor over msgpack bytes. It never allocates and never reads past the
 * end; strings and binaries point into the payload (not NUL-terminated). An
 * empty payload reads as one nil. A call that fails never moves the cursor.
 * - Malformed or truncated data (including reading past the last value) is
 *   SX_EPROTO and sticky: err is set and every later call returns it.
 * - A type mismatch (a well-formed value of another type) is SX_EPROTO and
 *   NOT sticky: err stays 0, so the caller may try another type.
 * - An integer that does not fit the requested type (a uint64 above
 *   INT64_MAX for _int, a negative for _uint) is SX_ELIMIT, not sticky.
 * - Nesting beyond SX_UNPACK_MAX_DEPTH (skip, raw) is SX_ELIMIT, sticky.
 * NULL output pointers are allowed and discard the value. */
typedef struct {
    const uint8_t *p;
    const uint8_t *end;
    int err;
} sx_unpack;

typedef enum {
    SX_MP_NIL = 1,
    SX_MP_BOOL,
    SX_MP_INT, /* signed or unsigned */
    SX_MP_FLOAT,
    SX_MP_STR,
    SX_MP_BIN,
    SX_MP_ARRAY,
    SX_MP_MAP,
    SX_MP_EXT
} sx_mp_type;

void sx_unpack_init(sx_unpack *u, sx_payload pl);
/* The type of the next value, or SX_EPROTO at the end or on bad data. */
int sx_unpack_type(const sx_unpack *u);
bool sx_unpack_done(const sx_unpack *u); /* true when no bytes are left */
int sx_unpack_nil(sx_unpack *u);
int sx_unpack_bool(sx_unpack *u, bool *out);
int sx_unpack_int(sx_unpack *u, int64_t *out);
int sx_unpack_uint(sx_unpack *u, uint64_t *out);
int sx_unpack_double(sx_unpack *u, double *out); /* floats and integers */
int sx_unpack_str(sx_unpack *u, const char **s, size_t *len);
int sx_unpack_bin(sx_unpack *u, const void **p, size_t *len);
int sx_unpack_array(sx_unpack *u, uint32_t *n);
int sx_unpack_map(sx_unpack *u, uint32_t *n);
/* A PID written as [node, host, id] or as its text form (a string of fewer
 * than SX_PID_TEXT_MAX bytes; a longer one is a mismatch). */
int sx_unpack_pid(sx_unpack *u, sx_pid *out);
/* Skips one whole value (nesting bounded by SX_UNPACK_MAX_DEPTH, beyond it
 * SX_ELIMIT). */
#define SX_UNPACK_MAX_DEPTH 64
int sx_unpack_skip(sx_unpack *u);
/* The bytes of the next whole value, pointing into the payload. */
int sx_unpack_raw(sx_unpack *u, sx_payload *out);

/* Shortcuts for a payload that is exactly one value. */
int sx_payload_get_int(sx_payload pl, int64_t *out);
/* Copies a string payload with a NUL into buf; SX_ELIMIT if it won't fit. */
int sx_payload_get_str(sx_payload pl, char *buf, size_t cap);
/* Looks a key up in a map payload: the pairs are read in order, keys that
 * are not strings are skipped, and the first pair whose key matches wins
 * (the bytes after it are not read). 0 and *value (may be NULL; the
 * value's bytes, pointing into map), SX_ENOTFOUND (no such key),
 * SX_EPROTO (map does not start with a map, or a pair read is malformed),
 * SX_EINVAL (key NULL). */
int sx_map_get(sx_payload map, const char *key, sx_payload *value);

/* ---- payload helpers: reading by path ---------------------------------- */

/* A string or a binary inside a payload (not NUL-terminated); ptr NULL
 * when there is none. */
typedef struct {
    const char *ptr;
    size_t len;
} sx_str;

/* The value at path inside pl. A path is keys and array indexes joined by
 * '.': "user.emails.0" is the first element of the array under "emails"
 * in the map under "user". A digits-only segment indexes an array, and is
 * a key in a map; NULL or "" is pl itself. Keys holding '.' cannot be
 * named (use sx_map_get). Returns 0 and *out (may be NULL; it points into
 * pl), SX_ENOTFOUND (a key or index that is not there, or a segment that
 * reaches a value that is neither a map nor an array), SX_EPROTO
 * (malformed data on the way). */
int sx_get(sx_payload pl, const char *path, sx_payload *out);
/* Typed getters: the value at path, or def when it is missing or of
 * another type (sx_get_int: an integer that fits int64_t; sx_get_double:
 * a float or an integer). */
int64_t sx_get_int(sx_payload pl, const char *path, int64_t def);
double sx_get_double(sx_payload pl, const char *path, double def);
bool sx_get_bool(sx_payload pl, const char *path, bool def);
/* A string or binary at path; {NULL, 0} when missing or of another type. */
sx_str sx_get_str(sx_payload pl, const char *path);
/* Copies the string or binary at path with a NUL into buf. 0,
 * SX_ENOTFOUND (missing), SX_EPROTO (another type, or a NUL inside),
 * SX_ELIMIT (len + 1 > cap; buf then holds ""), SX_EINVAL (buf NULL or
 * cap 0). */
int sx_get_strcpy(sx_payload pl, const char *path, char *buf, size_t cap);
/* The number of elements of the array (or pairs of the map) at path; 0
 * when it is missing or neither. */
size_t sx_get_len(sx_payload pl, const char *path);

/* ---- answers: value or error ------------------------------------------ */

/* What a yield, a child or a spawn-all element ended with: error 0 and
 * value, or an error code and its message. */
typedef struct {
    int error;
    sx_str message; /* error's message (NULL ptr when error is 0) */
    sx_payload value;
} sx_outcome;

/* A completion event as an outcome; returns o->error. An event that is not
 * a completion is SX_EINVAL (o zeroed). */
int sx_outcome_of(const sx_event *ev, sx_outcome *o);
/* Element i of a spawn-all answer (docs/COMMANDS.md, spawn-all): 0 and
 * *o, SX_ENOTFOUND (no element i), SX_EPROTO (not such an answer). The
 * outcome's own error is o->error. */
int sx_outcome_at(sx_payload all, size_t i, sx_outcome *o);

/* ---- a step's events, walked ------------------------------------------- */

/* What sx_batch_next hands out. */
typedef enum {
    SX_EV_END = 0,  /* no more events                                     */
    SX_EV_CANCEL,   /* a @cancel; sx_cancelled_by ends with its reason    */
    SX_EV_START,    /* the process's first step (no event: *ev is NULL)   */
    SX_EV_COMPLETE, /* a yield's answer: ev->tag, ev->error, ev->data     */
    SX_EV_EXIT,     /* @exit: a monitored or linked process ended         */
    SX_EV_SPAWNED,  /* @spawned: a child a spawn-wait started (notify)    */
    SX_EV_MESSAGE   /* any other message: ev->topic, ev->from, ev->data   */
} sx_event_kind;

/* A walk over one step's events. Every event comes out exactly once, in
 * this order: @cancel messages first (wherever they sit in the batch),
 * then SX_EV_START when *started is false (sx_batch_init's flag, kept in
 * the process's state; the walk sets it), then the rest in the order they
 * arrived. The walk ends early once the step has ended the process
 * (sx_done, sx_fail, sx_cancelled, ... on out): the events left are
 * dropped on purpose, as the process is over. So a cancel that arrives
 * before the first step is seen before the start, and a batch with
 * several answers gives each one. A step is one loop with a case per
 * kind, and no return inside it:
 *
 *     sx_batch b;
 *     const sx_event *e;
 *     sx_batch_init(&b, events, n, &st->started, out);
 *     for (sx_event_kind k; (k = sx_batch_next(&b, &e)) != SX_EV_END;)
 *         if (k == SX_EV_CANCEL) sx_cancelled_by(out, e);
 *         else if (k == SX_EV_START) ... yields ...
 *         else if (k == SX_EV_COMPLETE) ... e->tag, e->error, e->data ...
 *     return sx_batch_wait(&b);
 */
typedef struct {
    const sx_event *events;
    size_t n, i;
    int phase; /* 0 cancels, 1 start, 2 the rest */
    bool *started;
    sx_step_output *out; /* NULL: the walk never ends early */
} sx_batch;

void sx_batch_init(sx_batch *b, const sx_event *events, size_t n, bool *started,
                   sx_step_output *out);
/* The next event's kind, and the event in *ev (NULL for SX_EV_START and
 * SX_EV_END). */
sx_event_kind sx_batch_next(sx_batch *b, const sx_event **ev);
/* Ends the step: its status becomes WAIT (for yields or messages) unless
 * the step ended the process or chose idle; returns 0, the step's return
 * value. */
int sx_batch_wait(sx_batch *b);
/* The kind of one event, as sx_batch_next would give it. */
sx_event_kind sx_event_kind_of(const sx_event *ev);

#ifdef __cplusplus
}
#endif
#endif

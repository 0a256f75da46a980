/* engine/store/sqlite.h — what the two files of the SQLite store share:
 * the store's struct, a queued record, and the helpers both use. Opening
 * (the checks, the schema) is engine/store/sqlite_open.c; the writer,
 * records, recovery and closing are engine/store/sqlite.c. Internal to
 * engine/store/.
 */
#ifndef SX_ENGINE_STORE_SQLITE_H
#define SX_ENGINE_STORE_SQLITE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "engine/store/store.h"

#define APP_ID 0x53545058 /* 'STPX' */

enum { REC_JOB, REC_FINISH, REC_RESTART, REC_CKPT, REC_MSG };

/* A message stored for a checkpointed job (REC_CKPT's sends, REC_MSG),
 * its bytes in the record's allocation. */
typedef struct {
    uint64_t seq, to;
    sx_pid from;
    const char *topic; /* topic_len bytes, not NUL-terminated */
    size_t topic_len;
    const uint8_t *data;
    size_t data_len;
} rec_msg;

typedef struct rec {
    struct rec *next;
    int kind;
    sx__store_done_fn done;
    void *user;
    uint64_t id;
    uint32_t attempt;      /* REC_JOB: attempt; REC_FINISH: attempts */
    int64_t restart_at;    /* REC_RESTART */
    const uint8_t *policy; /* REC_JOB (in the allocation) */
    size_t policy_len;
    int error;
    uint64_t steps;
    int rc; /* the answer, set by the writer */
    /* REC_CKPT: the wait kind, the consumed inbox rows' seqs (in the
     * allocation) and the in-flight commands (blob: the state); REC_CKPT
     * and REC_MSG: the messages to store. */
    int want;
    const uint64_t *consumed;
    size_t n_consumed;
    const uint8_t *inflight;
    size_t inflight_len;
    rec_msg *msgs;
    size_t n_msgs;
    /* The caller's messages, whose seqs enqueue writes (under mu). */
    sx__store_msg *seq_out;
    /* One allocation after the record: key, type, method, msg, blob. */
    const char *key, *type, *method, *msg;
    size_t key_len, blob_len;
    const uint8_t *blob;
} rec;

struct sx__store {
    sqlite3 *db;
    int lock_fd;
    uint64_t keep;
    sqlite3_stmt *key_ins, *key_get, *job_ins, *job_del, *out_ins, *trim_keys,
        *trim_outs, *job_restart, *ck_put, *ck_del, *inbox_ins, *inbox_eat,
        *inbox_del;
    pthread_t writer;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rec *head, **tail; /* under mu */
    bool closing;      /* under mu */
    bool shut;         /* sx__store_shutdown has run; under mu */
    /* Open and the writer not started yet: recover may still run on the
     * caller's thread (the first record starts the writer). Under mu. */
    bool lazy;
    /* The next inbox row's seq (under mu): seqs are handed out in the
     * order records are queued, which is their commit and answer order. */
    uint64_t next_seq;
    /* Figures: written by the writer only, read by stats (relaxed). */
    _Atomic uint64_t commits, records, failed;
    /* Committed records waiting for their answers (sqlite.c, "Answers"),
     * and the thread that gives them; under ans_mu. */
    pthread_t answerer;
    bool answering; /* the answerer runs (else the writer answers) */
    pthread_mutex_t ans_mu;
    pthread_cond_t ans_cv;
    rec *ans_head, **ans_tail;
    bool ans_closing;
};

/* The SX_E* code for an SQLite result. */

/* The SX_E* code for an SQLite result. */
int sx__sq_code_of(int rc);
/* Writes "what: SQLite's message" (db may be NULL) into msg; returns
 * code. */
int sx__sq_fail(char *msg, size_t cap, int code, const char *what, sqlite3 *db);
int sx__sq_exec(sqlite3 *db, const char *sql);
/* One integer from a single-row query; SQLite's result code. */
int sx__sq_query_int(sqlite3 *db, const char *sql, int64_t *out);
/* Finalizes every prepared statement (those not prepared are NULL). */
void sx__sq_finalize_all(sx__store *s);
/* The writer thread (sqlite.c): commits what is queued until closing. */
void *sx__sq_writer_main(void *arg);

#endif

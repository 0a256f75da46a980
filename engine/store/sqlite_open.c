/* engine/store/sqlite_open.c — the store (engine/store/store.h) on
 * SQLite: opening it (the lock, the checks, the schema) and reading back
 * what it holds (sx__store_recover, sx__store_messages). The writer and
 * the records are engine/store/sqlite.c.
 *
 * One database, DIR/stepx.db, in WAL mode; synchronous NORMAL (a crash of
 * the program loses nothing committed) or FULL. One writer: the store's
 * own thread, which takes everything queued, commits it in one
 * BEGIN IMMEDIATE transaction (group commit: one WAL sync for the lot)
 * and then answers each record. DIR/lock is held with flock for the
 * store's life, so that a second daemon on the same directory is refused
 * at open instead of writing beside the first.
 *
 * Schema (user_version = SX__STORE_SCHEMA, application_id = 'STPX'):
 *   jobs(id, type, method, input, attempt)      jobs without an outcome
 *   keys(key, id)                               idempotency keys
 *   outcomes(seq, id, error, msg, value, steps, attempts)
 *   meta(name, value)                           the engine's numbers
 *                                               (sx__store_meta_get)
 * and, from schema 3, jobs' restart policy and state: jobs(..., policy,
 * restart_at, restarts); from schema 4, checkpointed jobs' last
 * checkpoint and the messages stored for them:
 *   checkpoints(id, steps, want, state, inflight)
 *   inbox(seq, job, from_node, from_host, from_id, topic, data).
 * A key lives as long as its job or its kept outcome. Schema 1 had no
 * meta table; opening it adds one (a forward migration, in one
 * transaction).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/store/sqlite.h"
#include "process/fault.h"

/* The SX_E* code for an SQLite result. */
int sx__sq_code_of(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return 0;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return SX_ECORRUPT;
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
        return rc == SQLITE_CANTOPEN ? -EACCES : -EROFS;
    case SQLITE_NOMEM:
        return SX_ENOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    default:
        return -EIO;
    }
}

/* Writes "what: sqlite's message" into msg. */
int sx__sq_fail(char *msg, size_t cap, int code, const char *what, sqlite3 *db)
{
    if (msg != NULL && cap > 0)
        snprintf(msg, cap, "%s%s%s", what, db != NULL ? ": " : "",
                 db != NULL ? sqlite3_errmsg(db) : "");
    return code;
}

int sx__sq_exec(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* One integer from a single-row query; SQLite's result code. */
int sx__sq_query_int(sqlite3 *db, const char *sql, int64_t *out)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

/* mkdir -p with mode 0700 for what it creates. 0 or -errno. */
static int make_dir(const char *dir)
{
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path)
        return -ENAMETOOLONG;
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return -errno;
        path[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static const char *const SCHEMA_V1[] = {
    "CREATE TABLE jobs (id INTEGER PRIMARY KEY, type TEXT NOT NULL, "
    "method TEXT NOT NULL, input BLOB NOT NULL, attempt INTEGER NOT NULL)",
    "CREATE TABLE keys (key BLOB PRIMARY KEY, id INTEGER NOT NULL) "
    "WITHOUT ROWID",
    "CREATE TABLE outcomes (seq INTEGER PRIMARY KEY, id INTEGER NOT NULL "
    "UNIQUE, error INTEGER NOT NULL, msg TEXT, value BLOB NOT NULL, "
    "steps INTEGER NOT NULL, attempts INTEGER NOT NULL)",
};

static const char *const SCHEMA_V2[] = {
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) "
    "WITHOUT ROWID",
};

static const char *const SCHEMA_V3[] = {
    "ALTER TABLE jobs ADD COLUMN policy BLOB",
    "ALTER TABLE jobs ADD COLUMN restart_at INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE jobs ADD COLUMN restarts BLOB",
};

static const char *const SCHEMA_V4[] = {
    "CREATE TABLE checkpoints (id INTEGER PRIMARY KEY, steps INTEGER NOT "
    "NULL, want INTEGER NOT NULL, state BLOB NOT NULL, inflight BLOB NOT "
    "NULL)",
    "CREATE TABLE inbox (seq INTEGER PRIMARY KEY, job INTEGER NOT NULL, "
    "from_node INTEGER NOT NULL, from_host INTEGER NOT NULL, from_id "
    "INTEGER NOT NULL, topic TEXT NOT NULL, data BLOB NOT NULL)",
    "CREATE INDEX inbox_job ON inbox (job, seq)",
};

/* Brings a database of schema `version` (0: empty) to SX__STORE_SCHEMA
 * in one transaction: all or nothing. */
static int migrate(sqlite3 *db, int64_t version)
{
    if (version == SX__STORE_SCHEMA)
        return SQLITE_OK;
    int rc = sx__sq_exec(db, "BEGIN IMMEDIATE");
    if (rc != SQLITE_OK)
        return rc;
    if (version == 0) {
        for (size_t i = 0; i < sizeof SCHEMA_V1 / sizeof SCHEMA_V1[0]; i++)
            if ((rc = sx__sq_exec(db, SCHEMA_V1[i])) != SQLITE_OK)
                goto undo;
    }
    if (version <= 1) {
        for (size_t i = 0; i < sizeof SCHEMA_V2 / sizeof SCHEMA_V2[0]; i++)
            if ((rc = sx__sq_exec(db, SCHEMA_V2[i])) != SQLITE_OK)
                goto undo;
    }
    if (version <= 2) {
        for (size_t i = 0; i < sizeof SCHEMA_V3 / sizeof SCHEMA_V3[0]; i++)
            if ((rc = sx__sq_exec(db, SCHEMA_V3[i])) != SQLITE_OK)
                goto undo;
    }
    if (version <= 3) {
        for (size_t i = 0; i < sizeof SCHEMA_V4 / sizeof SCHEMA_V4[0]; i++)
            if ((rc = sx__sq_exec(db, SCHEMA_V4[i])) != SQLITE_OK)
                goto undo;
    }
    char sql[96];
    snprintf(sql, sizeof sql, "PRAGMA application_id = %d", APP_ID);
    if ((rc = sx__sq_exec(db, sql)) != SQLITE_OK)
        goto undo;
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", SX__STORE_SCHEMA);
    if ((rc = sx__sq_exec(db, sql)) != SQLITE_OK)
        goto undo;
    if ((rc = sx__sq_exec(db, "COMMIT")) == SQLITE_OK)
        return SQLITE_OK;
undo:
    sx__sq_exec(db, "ROLLBACK");
    return rc;
}

static int prepare(sx__store *s)
{
    static const struct {
        size_t off;
        const char *sql;
    } stmts[] = {
        { offsetof(sx__store, key_ins),
          "INSERT INTO keys (key, id) VALUES (?, ?) ON CONFLICT DO NOTHING" },
        { offsetof(sx__store, key_get), "SELECT id FROM keys WHERE key = ?" },
        { offsetof(sx__store, job_ins),
          "INSERT INTO jobs (id, type, method, input, attempt, policy) "
          "VALUES (?, ?, ?, ?, ?, ?)" },
        { offsetof(sx__store, job_restart),
          "UPDATE jobs SET attempt = ?, restart_at = ?, restarts = ? WHERE "
          "id = ?" },
        { offsetof(sx__store, job_del), "DELETE FROM jobs WHERE id = ?" },
        { offsetof(sx__store, out_ins),
          "INSERT OR REPLACE INTO outcomes (id, error, msg, value, steps, "
          "attempts) VALUES (?, ?, ?, ?, ?, ?)" },
        { offsetof(sx__store, trim_keys),
          "DELETE FROM keys WHERE id IN (SELECT id FROM outcomes WHERE seq <= "
          "(SELECT max(seq) FROM outcomes) - ?)" },
        { offsetof(sx__store, trim_outs),
          "DELETE FROM outcomes WHERE seq <= (SELECT max(seq) FROM outcomes) "
          "- ?" },
        { offsetof(sx__store, ck_put),
          "INSERT OR REPLACE INTO checkpoints (id, steps, want, state, "
          "inflight) VALUES (?, ?, ?, ?, ?)" },
        { offsetof(sx__store, ck_del), "DELETE FROM checkpoints WHERE id = ?" },
        /* Kept only while its addressee is stored: a message committed
         * after that job's finish would never be deleted. */
        { offsetof(sx__store, inbox_ins),
          "INSERT INTO inbox (seq, job, from_node, from_host, from_id, topic, "
          "data) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 WHERE EXISTS (SELECT 1 "
          "FROM jobs WHERE id = ?2)" },
        { offsetof(sx__store, inbox_eat),
          "DELETE FROM inbox WHERE job = ? AND seq = ?" },
        { offsetof(sx__store, inbox_del), "DELETE FROM inbox WHERE job = ?" },
    };
    for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; i++) {
        sqlite3_stmt **st = (sqlite3_stmt **)((char *)s + stmts[i].off);
        int rc = sqlite3_prepare_v3(s->db, stmts[i].sql, -1,
                                    SQLITE_PREPARE_PERSISTENT, st, NULL);
        if (rc != SQLITE_OK)
            return rc;
    }
    return SQLITE_OK;
}

void sx__sq_finalize_all(sx__store *s)
{
    sqlite3_stmt *all[] = { s->key_ins,   s->key_get,     s->job_ins,
                            s->job_del,   s->out_ins,     s->trim_keys,
                            s->trim_outs, s->job_restart, s->ck_put,
                            s->ck_del,    s->inbox_ins,   s->inbox_eat,
                            s->inbox_del };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sqlite3_finalize(all[i]); /* NULL is a no-op */
}

/* How long a lock whose holder is gone is waited for (lock_take). */
#define LOCK_WAIT_MS 2000

/* The PID written in the lock file by the store that holds it, or 0. */
static pid_t lock_holder(int fd)
{
    char b[32];
    ssize_t n = pread(fd, b, sizeof b - 1, 0);
    if (n <= 0)
        return 0;
    b[n] = 0;
    long v = strtol(b, NULL, 10);
    return v > 0 && v <= INT32_MAX ? (pid_t)v : 0;
}

/* Takes DIR/lock (flock, exclusive) and writes this process's PID in it.
 * When another holds it: a live holder (another daemon; this process's
 * own earlier store) refuses at once. A daemon killed a moment ago can
 * leave its lock held for a little while: a subprocess it was starting
 * (uv_spawn forks; the child closes the lock's descriptor, O_CLOEXEC,
 * only at its exec) holds the same open file until then, and a restart
 * right after the kill would be refused. So when the PID in the file is
 * no process any more, the lock is tried again every 5 ms for up to
 * LOCK_WAIT_MS. 0, or -1 with errno (EWOULDBLOCK: held). The PID is a
 * hint for this choice only: when it cannot be written the lock is held
 * all the same. */
static int lock_take(int fd)
{
    int waited = 0;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK)
            return -1;
        pid_t h = lock_holder(fd);
        if (waited >= LOCK_WAIT_MS || h == 0 || h == getpid() ||
            kill(h, 0) == 0 || errno != ESRCH) {
            errno = EWOULDBLOCK;
            return -1;
        }
        nanosleep(&(struct timespec){ 0, 5000000 }, NULL);
        waited += 5;
    }
    char b[32];
    int n = snprintf(b, sizeof b, "%ld\n", (long)getpid());
    bool written = ftruncate(fd, 0) == 0 && pwrite(fd, b, (size_t)n, 0) == n;
    (void)written; /* a hint (above): the lock is held either way */
    return 0;
}

int sx__store_open(const sx__store_config *cfg, sx__store **out, char *msg,
                   size_t cap)
{
    if (msg != NULL && cap > 0)
        msg[0] = '\0';
    if (cfg == NULL || cfg->dir == NULL || out == NULL)
        return sx__sq_fail(msg, cap, SX_EINVAL, "store: no directory", NULL);
    char path[4200];
    int rc = make_dir(cfg->dir);
    if (rc != 0) {
        snprintf(msg, cap, "store: cannot create the state directory %s: %s",
                 cfg->dir, strerror(-rc));
        return rc == -EACCES || rc == -EPERM ? -EROFS : rc;
    }
    sx__store *s =
        SX__FAULT(SX__FAULT_STORE_OPEN) ? NULL : calloc(1, sizeof(*s));
    if (s == NULL)
        return sx__sq_fail(msg, cap, SX_ENOMEM, "store: out of memory", NULL);
    s->lock_fd = -1;
    s->keep = cfg->keep_outcomes != 0 ? cfg->keep_outcomes : 10000;
    s->tail = &s->head;

    snprintf(path, sizeof path, "%s/lock", cfg->dir);
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd < 0) {
        rc = errno == EACCES || errno == EPERM || errno == EROFS ? -EROFS
                                                                 : -errno;
        snprintf(msg, cap, "store: cannot open %s: %s", path, strerror(errno));
        goto out;
    }
    if (lock_take(s->lock_fd) != 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        snprintf(msg, cap,
                 "store: %s is in use by another process (its lock %s is "
                 "held): one daemon per state directory",
                 cfg->dir, path);
        goto out;
    }
    snprintf(path, sizeof path, "%s/stepx.db", cfg->dir);
    if (access(path, F_OK) == 0 && access(path, W_OK) != 0) {
        rc = -EROFS;
        snprintf(msg, cap, "store: %s cannot be written", path);
        goto out;
    }
    rc = sqlite3_open_v2(
        path, &s->db,
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        rc = sx__sq_fail(msg, cap, sx__sq_code_of(rc),
                         "store: cannot open the database", s->db);
        goto out;
    }
    if (sqlite3_db_readonly(s->db, "main") == 1) {
        rc = sx__sq_fail(msg, cap, -EROFS, "store: the database is read-only",
                         NULL);
        goto out;
    }
    sqlite3_busy_timeout(s->db, 5000);
    int64_t app = 0, version = 0, tables = 0;
    if ((rc = sx__sq_query_int(s->db, "PRAGMA application_id", &app)) !=
            SQLITE_OK ||
        (rc = sx__sq_query_int(s->db, "PRAGMA user_version", &version)) !=
            SQLITE_OK ||
        (rc = sx__sq_query_int(s->db, "SELECT count(*) FROM sqlite_schema",
                               &tables)) != SQLITE_OK) {
        rc =
            sx__sq_fail(msg, cap, sx__sq_code_of(rc),
                        "store: the database cannot be read (damaged, or not a "
                        "database)",
                        s->db);
        goto out;
    }
    if (tables > 0 && app != APP_ID) {
        rc = sx__sq_fail(msg, cap, SX_ECORRUPT,
                         "store: stepx.db is not a stepx database (another "
                         "program's SQLite file?)",
                         NULL);
        goto out;
    }
    if (version > SX__STORE_SCHEMA) {
        snprintf(msg, cap,
                 "store: the database has schema %lld, written by a newer "
                 "stepx; this one reads up to %d (nothing was changed)",
                 (long long)version, SX__STORE_SCHEMA);
        rc = SX_EVERSION;
        goto out;
    }
    if (tables > 0) {
        sqlite3_stmt *st;
        rc = sqlite3_prepare_v2(s->db, "PRAGMA quick_check(1)", -1, &st, NULL);
        if (rc == SQLITE_OK) {
            rc = sqlite3_step(st);
            const unsigned char *t = sqlite3_column_text(st, 0);
            bool ok = rc == SQLITE_ROW && t != NULL &&
                      strcmp((const char *)t, "ok") == 0;
            if (!ok && rc == SQLITE_ROW && t != NULL)
                snprintf(msg, cap, "store: the database is damaged: %s",
                         (const char *)t);
            sqlite3_finalize(st);
            rc = ok ? SQLITE_OK : rc == SQLITE_ROW ? SQLITE_CORRUPT : rc;
        }
        if (rc != SQLITE_OK) {
            if (msg == NULL || msg[0] == '\0')
                sx__sq_fail(msg, cap, 0, "store: the database is damaged",
                            s->db);
            rc = sx__sq_code_of(rc);
            goto out;
        }
    }
    /* Temporary tables and indices (a trim's subquery, a statement
     * journal) in memory: no temporary file is ever opened, so every file
     * the store uses is opened here, on the opening thread. (A file
     * opened later on the writer thread can take a descriptor number that
     * a libuv loop just closed with a raw close system call, which
     * ThreadSanitizer cannot see: it then reports a race on the number.) */
    if ((rc = sx__sq_exec(s->db, "PRAGMA temp_store = MEMORY")) != SQLITE_OK ||
        (rc = sx__sq_exec(s->db, "PRAGMA journal_mode = WAL")) != SQLITE_OK ||
        (rc = sx__sq_exec(s->db, cfg->sync_full
                                     ? "PRAGMA synchronous = FULL"
                                     : "PRAGMA synchronous = NORMAL")) !=
            SQLITE_OK) {
        rc = sx__sq_fail(msg, cap, sx__sq_code_of(rc),
                         "store: cannot set the journal", s->db);
        goto out;
    }
    if (cfg->max_bytes != 0) {
        int64_t page = 4096;
        sx__sq_query_int(s->db, "PRAGMA page_size", &page);
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA max_page_count = %llu",
                 (unsigned long long)(cfg->max_bytes / (uint64_t)page));
        sx__sq_exec(s->db, sql);
    }
    if ((rc = migrate(s->db, version)) != SQLITE_OK) {
        rc = sx__sq_fail(
            msg, cap, sx__sq_code_of(rc),
            "store: cannot create or migrate the schema (nothing was "
            "changed)",
            s->db);
        goto out;
    }
    if ((rc = prepare(s)) != SQLITE_OK) {
        rc = sx__sq_fail(msg, cap, sx__sq_code_of(rc),
                         "store: cannot prepare statements", s->db);
        goto out;
    }
    int64_t top = 0;
    if ((rc = sx__sq_query_int(s->db, "SELECT coalesce(max(seq), 0) FROM inbox",
                               &top)) != SQLITE_OK ||
        top < 0) {
        rc = sx__sq_fail(msg, cap,
                         sx__sq_code_of(rc != SQLITE_OK ? rc : SQLITE_CORRUPT),
                         "store: cannot read the stored messages", s->db);
        goto out;
    }
    s->next_seq = (uint64_t)top + 1;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        rc = sx__sq_fail(msg, cap, SX_ENOMEM, "store: out of memory", NULL);
        goto out;
    }
    if (pthread_cond_init(&s->cv, NULL) != 0) {
        pthread_mutex_destroy(&s->mu);
        rc = sx__sq_fail(msg, cap, SX_ENOMEM, "store: out of memory", NULL);
        goto out;
    }
    s->lazy = true;
    *out = s;
    return 0;
out:
    sx__sq_finalize_all(s);
    if (s->db != NULL)
        sqlite3_close(s->db);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* drops the flock */
    free(s);
    return rc;
}

/* ---- reading back (before the writer starts) ---- */

int sx__store_recover(sx__store *s,
                      int (*job)(void *user, const sx__store_job *j),
                      int (*outcome)(void *user, const sx__store_outcome *o),
                      void *user)
{
    if (s == NULL)
        return SX_EINVAL;
    pthread_mutex_lock(&s->mu);
    bool before = s->lazy; /* no record queued yet */
    pthread_mutex_unlock(&s->mu);
    if (!before)
        return SX_ESTATE;
    /* The jobs about to run again count an attempt more, committed before
     * they run: a crash during this run counts another. */
    int rc = sx__sq_exec(s->db, "UPDATE jobs SET attempt = attempt + 1 WHERE "
                                "restart_at = 0 AND id NOT IN (SELECT id "
                                "FROM checkpoints)");
    if (rc != SQLITE_OK)
        return sx__sq_code_of(rc);
    sqlite3_stmt *st;
    rc = sqlite3_prepare_v2(
        s->db,
        "SELECT j.id, j.type, j.method, j.input, j.attempt, k.key, j.policy, "
        "j.restart_at, j.restarts, c.steps, c.want, c.state, c.inflight FROM "
        "jobs j LEFT JOIN keys k ON k.id = j.id LEFT JOIN checkpoints c ON "
        "c.id = j.id ORDER BY j.id",
        -1, &st, NULL);
    if (rc != SQLITE_OK)
        return sx__sq_code_of(rc);
    int cb = 0;
    while (cb == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (job == NULL)
            continue;
        sx__store_job j = {
            .id = (uint64_t)sqlite3_column_int64(st, 0),
            .type = (const char *)sqlite3_column_text(st, 1),
            .method = (const char *)sqlite3_column_text(st, 2),
            .input = { sqlite3_column_blob(st, 3),
                       (size_t)sqlite3_column_bytes(st, 3) },
            .attempt = (uint32_t)sqlite3_column_int64(st, 4),
            .key = sqlite3_column_blob(st, 5),
            .key_len = (size_t)sqlite3_column_bytes(st, 5),
            .policy = { sqlite3_column_blob(st, 6),
                        (size_t)sqlite3_column_bytes(st, 6) },
            .restart_at = sqlite3_column_int64(st, 7),
            .restarts = { sqlite3_column_blob(st, 8),
                          (size_t)sqlite3_column_bytes(st, 8) },
            .checkpointed = sqlite3_column_type(st, 9) != SQLITE_NULL,
            .steps = (uint64_t)sqlite3_column_int64(st, 9),
            .want = sqlite3_column_int(st, 10),
            .state = { sqlite3_column_blob(st, 11),
                       (size_t)sqlite3_column_bytes(st, 11) },
            .inflight = { sqlite3_column_blob(st, 12),
                          (size_t)sqlite3_column_bytes(st, 12) },
        };
        if (j.type == NULL || j.method == NULL ||
            (j.input.len > 0 && j.input.data == NULL)) {
            /* NOT NULL columns read as NULL: memory, or a damaged file. */
            cb = sqlite3_errcode(s->db) == SQLITE_NOMEM ? SX_ENOMEM
                                                        : SX_ECORRUPT;
            break;
        }
        cb = job(user, &j);
    }
    sqlite3_finalize(st);
    if (cb != 0)
        return cb;
    if (rc != SQLITE_DONE)
        return sx__sq_code_of(rc);
    rc = sqlite3_prepare_v2(s->db,
                            "SELECT id, error, msg, value, steps, attempts "
                            "FROM outcomes ORDER BY seq",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return sx__sq_code_of(rc);
    while (cb == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (outcome == NULL)
            continue;
        sx__store_outcome o = {
            .id = (uint64_t)sqlite3_column_int64(st, 0),
            .error = sqlite3_column_int(st, 1),
            .msg = (const char *)sqlite3_column_text(st, 2),
            .value = { sqlite3_column_blob(st, 3),
                       (size_t)sqlite3_column_bytes(st, 3) },
            .steps = (uint64_t)sqlite3_column_int64(st, 4),
            .attempts = (uint32_t)sqlite3_column_int64(st, 5),
        };
        cb = outcome(user, &o);
    }
    sqlite3_finalize(st);
    if (cb != 0)
        return cb;
    return rc == SQLITE_DONE ? 0 : sx__sq_code_of(rc);
}

int sx__store_messages(sx__store *s,
                       int (*msg)(void *user, const sx__store_msg *m),
                       void *user)
{
    if (s == NULL || msg == NULL)
        return SX_EINVAL;
    pthread_mutex_lock(&s->mu);
    bool before = s->lazy;
    pthread_mutex_unlock(&s->mu);
    if (!before)
        return SX_ESTATE;
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT seq, job, from_node, from_host, "
                                "from_id, topic, data FROM inbox ORDER BY seq",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return sx__sq_code_of(rc);
    int cb = 0;
    while (cb == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        sx__store_msg m = {
            .seq = (uint64_t)sqlite3_column_int64(st, 0),
            .to = (uint64_t)sqlite3_column_int64(st, 1),
            .from = { (uint32_t)sqlite3_column_int64(st, 2),
                      (uint32_t)sqlite3_column_int64(st, 3),
                      (uint64_t)sqlite3_column_int64(st, 4) },
            .topic = (const char *)sqlite3_column_text(st, 5),
            .topic_len = (size_t)sqlite3_column_bytes(st, 5),
            .data = { sqlite3_column_blob(st, 6),
                      (size_t)sqlite3_column_bytes(st, 6) },
        };
        if (m.topic == NULL) {
            cb = sqlite3_errcode(s->db) == SQLITE_NOMEM ? SX_ENOMEM
                                                        : SX_ECORRUPT;
            break;
        }
        cb = msg(user, &m);
    }
    sqlite3_finalize(st);
    if (cb != 0)
        return cb;
    return rc == SQLITE_DONE ? 0 : sx__sq_code_of(rc);
}

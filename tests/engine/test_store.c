/* tests/engine/test_store.c — the durable store (engine/store/store.h) on
 * its SQLite backend, in a temporary directory per case: what is
 * acknowledged is there after a reopen, group commit batches, idempotency
 * keys, outcome retention, checkpoints and stored messages (what recover
 * and sx__store_messages give back, what a later checkpoint, a finish and
 * a restart delete), and every refusal at open (a second opener,
 * garbage, another program's database, a damaged page, a newer schema, a
 * read-only file) and on a request (the database full) with its code,
 * its message, and the file left as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/store/store.h"
#include "tests/support/support.h"

/* Answers counted, under a mutex, with the codes and ids seen. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t n, ok, exist, other;
    int last_rc;
    uint64_t last_id;
} answers;

static void answers_init(answers *a)
{
    memset(a, 0, sizeof(*a));
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
}

static void on_done(void *user, int rc, uint64_t id)
{
    answers *a = user;
    pthread_mutex_lock(&a->mu);
    a->n++;
    a->ok += rc == 0;
    a->exist += rc == SX_EEXIST;
    a->other += rc != 0 && rc != SX_EEXIST;
    a->last_rc = rc;
    a->last_id = id;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* Waits (10 s at most) until n answers came. */
static void answers_wait(answers *a, uint64_t n)
{
    uint64_t until = tx_now_ns() + 10000000000ull;
    pthread_mutex_lock(&a->mu);
    while (a->n < n) {
        if (tx_now_ns() > until)
            SX_FAILF("%llu of %llu answers after 10 s",
                     (unsigned long long)a->n, (unsigned long long)n);
        pthread_mutex_unlock(&a->mu);
        tx_sleep_ms(1);
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
}

static char dir[256];

static void fresh_dir(void)
{
    tx_mkdtemp(dir, sizeof dir, "stepx-store-");
}

static void drop_dir(void)
{
    CHECK(tx_rm_tree(dir) == 0);
}

static sx__store *open_ok(uint64_t keep, uint64_t max_bytes)
{
    sx__store_config cfg = { .dir = dir,
                             .keep_outcomes = keep,
                             .max_bytes = max_bytes };
    sx__store *s = NULL;
    char msg[512];
    int rc = sx__store_open(&cfg, &s, msg, sizeof msg);
    if (rc != 0)
        SX_FAILF("open %s: %s (%s)", dir, sx_errname(rc), msg);
    return s;
}

/* Opens expecting code rc, with want inside the message. */
static void open_fails(int rc, const char *want)
{
    sx__store_config cfg = { .dir = dir };
    sx__store *s = NULL;
    char msg[512];
    int got = sx__store_open(&cfg, &s, msg, sizeof msg);
    if (got != rc)
        SX_FAILF("open: %s, wanted %s (%s)", sx_errname(got), sx_errname(rc),
                 msg);
    CHECK(s == NULL);
    if (strstr(msg, want) == NULL)
        SX_FAILF("message \"%s\" lacks \"%s\"", msg, want);
}

/* The job with id and key; its input, [id], is written into buf (each
 * thread its own: the store copies it at submit). */
static sx__store_job job_in(uint8_t *input_buf, uint64_t id, const char *key)
{
    /* [id] as msgpack: a fixarray of one uint 64. */
    input_buf[0] = 0x91;
    input_buf[1] = 0xcf;
    for (int i = 0; i < 8; i++)
        input_buf[2 + i] = (uint8_t)(id >> (56 - 8 * i));
    sx__store_job j = { .id = id,
                        .key = key,
                        .key_len = key != NULL ? strlen(key) : 0,
                        .type = "counter",
                        .method = "run",
                        .input = { input_buf, 10 },
                        .attempt = 1 };
    return j;
}

static uint8_t main_buf[16];
#define job_of(id, key) job_in(main_buf, (id), (key))

/* What recover found. */
typedef struct {
    uint64_t jobs, outcomes;
    uint64_t job_ids[64], out_ids[64];
    int out_error[64];
    char out_msg[64][32];
    uint64_t out_steps[64];
    bool inputs_ok;
    uint32_t attempt; /* the attempt every job should have */
} found;

static int on_job(void *user, const sx__store_job *j)
{
    found *f = user;
    if (f->jobs < 64)
        f->job_ids[f->jobs] = j->id;
    f->jobs++;
    uint64_t v = 0;
    if (j->input.len != 10 || ((const uint8_t *)j->input.data)[0] != 0x91)
        f->inputs_ok = false;
    else
        for (int i = 0; i < 8; i++)
            v = v << 8 | ((const uint8_t *)j->input.data)[2 + i];
    if (v != j->id || strcmp(j->type, "counter") != 0 ||
        strcmp(j->method, "run") != 0 || j->attempt != f->attempt)
        f->inputs_ok = false;
    return 0;
}

static int on_outcome(void *user, const sx__store_outcome *o)
{
    found *f = user;
    if (f->outcomes < 64) {
        f->out_ids[f->outcomes] = o->id;
        f->out_error[f->outcomes] = o->error;
        snprintf(f->out_msg[f->outcomes], 32, "%s",
                 o->msg != NULL ? o->msg : "(null)");
        f->out_steps[f->outcomes] = o->steps;
    }
    f->outcomes++;
    return 0;
}

/* What recover hands over; every job should come with attempt. */
static found recover_attempt(sx__store *s, uint32_t attempt)
{
    found f;
    memset(&f, 0, sizeof f);
    f.inputs_ok = true;
    f.attempt = attempt;
    CHECK_RC(sx__store_recover(s, on_job, on_outcome, &f), 0);
    return f;
}

/* Jobs submitted as attempt 1 and recovered once: attempt 2. */
#define recover(s) recover_attempt((s), 2)

/* Jobs and an outcome acknowledged before a close are all there after a
 * reopen, with their bytes. */
static void t_roundtrip(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    found f0 = recover(s);
    CHECK_EQ_U64(f0.jobs, 0);
    answers a;
    answers_init(&a);
    for (uint64_t id = 1; id <= 3; id++) {
        sx__store_job j = job_of(id, NULL);
        CHECK_RC(sx__store_submit(s, &j, on_done, &a), 0);
    }
    answers_wait(&a, 3);
    uint8_t v[] = { 0x2a };
    CHECK_RC(sx__store_finish(s, 2, SX_EFAILED, "it broke",
                              (sx_payload){ v, 1 }, 7, 1, on_done, &a),
             0);
    answers_wait(&a, 4);
    CHECK_EQ_U64(a.ok, 4);
    sx__store_close(s);

    s = open_ok(0, 0);
    found f = recover(s);
    CHECK_EQ_U64(f.jobs, 2);
    CHECK_EQ_U64(f.job_ids[0], 1);
    CHECK_EQ_U64(f.job_ids[1], 3);
    CHECK(f.inputs_ok);
    CHECK_EQ_U64(f.outcomes, 1);
    CHECK_EQ_U64(f.out_ids[0], 2);
    CHECK_EQ_INT(f.out_error[0], SX_EFAILED);
    CHECK_STR(f.out_msg[0], "it broke");
    CHECK_EQ_U64(f.out_steps[0], 7);
    sx__store_close(s);
    drop_dir();
}

/* A key already stored answers SX_EEXIST with the first job's id, before
 * and after that job finished and across a reopen; the second job is not
 * stored. */
static void t_idempotent_key(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    answers a;
    answers_init(&a);
    sx__store_job j = job_of(5, "order-17");
    CHECK_RC(sx__store_submit(s, &j, on_done, &a), 0);
    answers_wait(&a, 1);
    CHECK_EQ_INT(a.last_rc, 0);
    j = job_of(6, "order-17");
    CHECK_RC(sx__store_submit(s, &j, on_done, &a), 0);
    answers_wait(&a, 2);
    CHECK_EQ_INT(a.last_rc, SX_EEXIST);
    CHECK_EQ_U64(a.last_id, 5);
    CHECK_RC(sx__store_finish(s, 5, 0, NULL, (sx_payload){ NULL, 0 }, 1, 1,
                              on_done, &a),
             0);
    answers_wait(&a, 3);
    sx__store_close(s);

    s = open_ok(0, 0);
    found f = recover(s);
    CHECK_EQ_U64(f.jobs, 0); /* 6 was never stored */
    CHECK_EQ_U64(f.outcomes, 1);
    answers_init(&a);
    j = job_of(7, "order-17");
    CHECK_RC(sx__store_submit(s, &j, on_done, &a), 0);
    answers_wait(&a, 1);
    CHECK_EQ_INT(a.last_rc, SX_EEXIST);
    CHECK_EQ_U64(a.last_id, 5);
    sx__store_close(s);
    drop_dir();
}

typedef struct {
    sx__store *s;
    answers *a;
    uint64_t first, n;
} submitter;

static void *submit_many(void *arg)
{
    submitter *t = arg;
    uint8_t buf[16];
    for (uint64_t i = 0; i < t->n; i++) {
        sx__store_job j = job_in(buf, t->first + i, NULL);
        CHECK_RC(sx__store_submit(t->s, &j, on_done, t->a), 0);
    }
    return NULL;
}

/* Two threads queue 2 x 5,000 jobs: every one is answered 0 and stored,
 * in fewer transactions than records (the writer commits what queued up
 * during the last commit together). */
static void t_group_commit(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    answers a;
    answers_init(&a);
    const uint64_t n = 5000;
    submitter t[2] = { { s, &a, 1, n }, { s, &a, 1 + n, n } };
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&th[i], NULL, submit_many, &t[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    answers_wait(&a, 2 * n);
    CHECK_EQ_U64(a.ok, 2 * n);
    sx__store_stats st;
    sx__store_stats_get(s, &st);
    CHECK_EQ_U64(st.records, 2 * n);
    printf("group commit: %llu records in %llu transactions\n",
           (unsigned long long)st.records, (unsigned long long)st.commits);
    CHECK(st.commits < st.records);
    sx__store_close(s);
    s = open_ok(0, 0);
    found f = recover(s);
    CHECK_EQ_U64(f.jobs, 2 * n);
    CHECK(f.inputs_ok);
    sx__store_close(s);
    drop_dir();
}

/* keep_outcomes: the oldest outcomes go, with their keys (a trimmed
 * job's key is free again). */
static void t_keep_outcomes(void)
{
    fresh_dir();
    sx__store *s = open_ok(10, 0);
    answers a;
    answers_init(&a);
    char key[32];
    for (uint64_t id = 1; id <= 25; id++) {
        snprintf(key, sizeof key, "k%llu", (unsigned long long)id);
        sx__store_job j = job_of(id, key);
        CHECK_RC(sx__store_submit(s, &j, on_done, &a), 0);
        CHECK_RC(sx__store_finish(s, id, 0, NULL, (sx_payload){ NULL, 0 }, 1, 1,
                                  on_done, &a),
                 0);
    }
    answers_wait(&a, 50);
    CHECK_EQ_U64(a.ok, 50);
    sx__store_close(s);
    s = open_ok(10, 0);
    found f = recover(s);
    CHECK_EQ_U64(f.outcomes, 10);
    CHECK_EQ_U64(f.out_ids[0], 16);
    CHECK_EQ_U64(f.out_ids[9], 25);
    answers_init(&a);
    sx__store_job j = job_of(100, "k3"); /* trimmed: free again */
    CHECK_RC(sx__store_submit(s, &j, on_done, &a), 0);
    j = job_of(101, "k20"); /* kept: still taken */
    CHECK_RC(sx__store_submit(s, &j, on_done, &a), 0);
    answers_wait(&a, 2);
    CHECK_EQ_U64(a.ok, 1);
    CHECK_EQ_U64(a.exist, 1);
    sx__store_close(s);
    drop_dir();
}

/* A second opener of the same directory is refused while the first has
 * it, and opens once the first closed. */
static void t_second_opener(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    open_fails(-EBUSY, "in use by another process");
    sx__store_close(s);
    s = open_ok(0, 0);
    sx__store_close(s);
    drop_dir();
}

/* A daemon killed while a subprocess it was starting (forked, not yet
 * exec'd) still holds its lock's open file: a store opened on the
 * directory right after waits for the lock (the PID written in it is
 * gone) instead of refusing. Here the daemon is a child that opens the
 * store, forks a grandchild that keeps the descriptor for 500 ms, and
 * kills itself. */
static void t_lock_of_a_dead_holder(void)
{
    fresh_dir();
    pid_t x = fork();
    CHECK(x >= 0);
    if (x == 0) {
        sx__store *s = open_ok(0, 0);
        (void)s; /* never closed: the process dies with it */
        pid_t g = fork();
        if (g == 0) {
            nanosleep(&(struct timespec){ 0, 500000000 }, NULL);
            _exit(0);
        }
        raise(SIGKILL);
        _exit(1);
    }
    int st;
    CHECK(waitpid(x, &st, 0) == x);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* The grandchild holds the lock now (it is no daemon: a second
     * opener with a live holder is t_second_opener's). */
    char path[512];
    snprintf(path, sizeof path, "%s/lock", dir);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK);
    close(fd);
    sx__store *s = open_ok(0, 0);
    /* A live holder in another process is refused at once, not waited
     * for: a child opening the directory now gets SX_EBUSY well within
     * the wait for a gone holder (2 s). */
    pid_t y = fork();
    CHECK(y >= 0);
    if (y == 0) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        sx__store_config cfg = { .dir = dir };
        sx__store *s2 = NULL;
        char msg[512];
        int rc = sx__store_open(&cfg, &s2, msg, sizeof msg);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                    (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        _exit(rc == -EBUSY ? (ms < 1000 ? 0 : 2) : 1);
    }
    CHECK(waitpid(y, &st, 0) == y);
    CHECK(WIFEXITED(st));
    CHECK_RC(WEXITSTATUS(st), 0);
    sx__store_close(s);
    drop_dir();
}

/* The file's bytes, to check that a refused open changed nothing. */
static size_t slurp(const char *path, uint8_t *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void db_path(char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/stepx.db", dir);
}

static uint8_t before[1 << 20], after[1 << 20];

static void check_unchanged(size_t n0)
{
    char path[300];
    db_path(path, sizeof path);
    size_t n1 = slurp(path, after, sizeof after);
    CHECK_EQ_U64(n1, n0);
    CHECK(memcmp(before, after, n0) == 0);
}

/* Garbage where the database should be: SX_ECORRUPT, file untouched. */
static void t_garbage(void)
{
    fresh_dir();
    char path[300];
    db_path(path, sizeof path);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    uint64_t rng = 42;
    for (int i = 0; i < 65536; i++)
        fputc((int)(sx_test_rng(&rng) & 0xff), f);
    fclose(f);
    size_t n0 = slurp(path, before, sizeof before);
    open_fails(SX_ECORRUPT, "cannot be read");
    check_unchanged(n0);
    drop_dir();
}

/* Another program's SQLite file: SX_ECORRUPT, "not a stepx database". */
static void t_foreign_db(void)
{
    fresh_dir();
    char path[300];
    db_path(path, sizeof path);
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "CREATE TABLE t (x); INSERT INTO t VALUES (1)", NULL,
                       NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    size_t n0 = slurp(path, before, sizeof before);
    open_fails(SX_ECORRUPT, "not a stepx database");
    check_unchanged(n0);
    drop_dir();
}

/* A damaged page of a real store: SX_ECORRUPT at open. */
static void t_damaged(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    answers a;
    answers_init(&a);
    for (uint64_t id = 1; id <= 2000; id++) {
        sx__store_job j = job_of(id, NULL);
        CHECK_RC(sx__store_submit(s, &j, on_done, &a), 0);
    }
    answers_wait(&a, 2000);
    sx__store_close(s); /* the WAL is checkpointed into stepx.db */
    char path[300];
    db_path(path, sizeof path);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    uint8_t junk[4096];
    memset(junk, 0xa5, sizeof junk);
    CHECK(pwrite(fd, junk, sizeof junk, 3 * 4096) == (ssize_t)sizeof junk);
    close(fd);
    size_t n0 = slurp(path, before, sizeof before);
    open_fails(SX_ECORRUPT, "damaged");
    check_unchanged(n0);
    drop_dir();
}

/* A database from a newer stepx: SX_EVERSION, untouched. */
static void t_newer_schema(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    sx__store_close(s);
    char path[300];
    db_path(path, sizeof path);
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL) ==
          SQLITE_OK);
    sqlite3_close(db);
    size_t n0 = slurp(path, before, sizeof before);
    open_fails(SX_EVERSION, "schema 99, written by a newer stepx");
    check_unchanged(n0);
    drop_dir();
}

/* A database the process cannot write: -EROFS, the file untouched. As a
 * user, the file's mode says so; as root, which writes any file whatever
 * its mode, the state directory is bind-mounted read-only over itself
 * (where the container does not allow mounts, the case says it is
 * skipped). */
static void t_read_only(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    sx__store_close(s);
    char path[300];
    db_path(path, sizeof path);
    size_t n0 = slurp(path, before, sizeof before);
    if (geteuid() != 0) {
        CHECK(chmod(path, 0444) == 0);
        open_fails(-EROFS, "cannot be written");
        CHECK(chmod(path, 0644) == 0);
    } else {
        if (mount(dir, dir, NULL, MS_BIND, NULL) != 0) {
            printf("read_only: skipped: running as root and a bind mount "
                   "is not allowed here (%s)\n",
                   strerror(errno));
            drop_dir();
            return;
        }
        if (mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) !=
            0) {
            int err = errno;
            CHECK(umount2(dir, 0) == 0);
            printf("read_only: skipped: running as root and a read-only "
                   "remount is not allowed here (%s)\n",
                   strerror(err));
            drop_dir();
            return;
        }
        open_fails(-EROFS, "Read-only file system");
        CHECK(umount2(dir, 0) == 0);
    }
    check_unchanged(n0);
    drop_dir();
}

/* The database full (max_bytes, as a full disk would): the request that
 * does not fit is answered -ENOSPC with nothing of it stored; everything
 * answered 0 before is there after a reopen. */
static void t_full(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 256 * 1024);
    answers a;
    answers_init(&a);
    static uint8_t big[8192];
    uint64_t sent = 0;
    for (uint64_t id = 1; id <= 200 && a.other == 0; id++) {
        sx__store_job j = job_of(id, NULL);
        j.input = (sx_payload){ big, sizeof big };
        CHECK_RC(sx__store_submit(s, &j, on_done, &a), 0);
        sent++;
        answers_wait(&a, sent); /* one at a time: each its own commit */
    }
    CHECK(a.other > 0);
    CHECK_EQ_INT(a.last_rc, -ENOSPC);
    uint64_t acked = a.ok;
    CHECK(acked > 0);
    sx__store_close(s);
    s = open_ok(0, 0);
    found f;
    memset(&f, 0, sizeof f);
    CHECK_RC(sx__store_recover(s, on_job, NULL, &f), 0);
    CHECK_EQ_U64(f.jobs, acked);
    sx__store_close(s);
    drop_dir();
}

/* ---- checkpoints and stored messages (schema 4) ---- */

/* A job as recover reported it, with copies of its checkpoint's bytes. */
typedef struct {
    uint64_t id;
    uint32_t attempt;
    bool checkpointed;
    uint64_t steps;
    int want;
    uint8_t state[64], inflight[64];
    size_t state_len, inflight_len;
} seen_job;

typedef struct {
    size_t n;
    seen_job jobs[8];
} seen_jobs;

static int on_job_ck(void *user, const sx__store_job *j)
{
    seen_jobs *f = user;
    CHECK(f->n < 8);
    CHECK(j->state.len <= 64 && j->inflight.len <= 64);
    seen_job *x = &f->jobs[f->n++];
    memset(x, 0, sizeof(*x));
    x->id = j->id;
    x->attempt = j->attempt;
    x->checkpointed = j->checkpointed;
    x->steps = j->steps;
    x->want = j->want;
    x->state_len = j->state.len;
    x->inflight_len = j->inflight.len;
    if (j->state.len > 0)
        memcpy(x->state, j->state.data, j->state.len);
    if (j->inflight.len > 0)
        memcpy(x->inflight, j->inflight.data, j->inflight.len);
    return 0;
}

/* The jobs recover hands over (the attempts it counts included). */
static seen_jobs recover_ck(sx__store *s)
{
    seen_jobs f;
    memset(&f, 0, sizeof f);
    CHECK_RC(sx__store_recover(s, on_job_ck, NULL, &f), 0);
    return f;
}

/* Job id in f; fails the case when recover did not report it. */
static const seen_job *seen(const seen_jobs *f, uint64_t id)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->jobs[i].id == id)
            return &f->jobs[i];
    SX_FAILF("job %llu not recovered", (unsigned long long)id);
}

/* The checkpoint of job x is steps, want, state and inflight (bytes). */
static void check_ckpt(const seen_job *x, uint64_t steps, int want,
                       sx_payload state, sx_payload inflight)
{
    CHECK(x->checkpointed);
    CHECK_EQ_U64(x->steps, steps);
    CHECK_EQ_INT(x->want, want);
    CHECK_EQ_U64(x->state_len, state.len);
    CHECK(state.len == 0 || memcmp(x->state, state.data, state.len) == 0);
    CHECK_EQ_U64(x->inflight_len, inflight.len);
    CHECK(inflight.len == 0 ||
          memcmp(x->inflight, inflight.data, inflight.len) == 0);
}

/* A stored message as sx__store_messages handed it over, copied. */
typedef struct {
    uint64_t seq, to;
    sx_pid from;
    char topic[256];
    size_t topic_len;
    uint8_t data[64];
    size_t data_len;
} seen_msg;

typedef struct {
    size_t n;
    seen_msg m[16];
} seen_msgs;

static int on_msg(void *user, const sx__store_msg *m)
{
    seen_msgs *f = user;
    CHECK(f->n < 16);
    CHECK(m->topic_len < 256 && m->data.len <= 64);
    seen_msg *x = &f->m[f->n++];
    x->seq = m->seq;
    x->to = m->to;
    x->from = m->from;
    x->topic_len = m->topic_len;
    memcpy(x->topic, m->topic, m->topic_len);
    x->data_len = m->data.len;
    if (m->data.len > 0)
        memcpy(x->data, m->data.data, m->data.len);
    return 0;
}

static seen_msgs messages_of(sx__store *s)
{
    seen_msgs f;
    memset(&f, 0, sizeof f);
    CHECK_RC(sx__store_messages(s, on_msg, &f), 0);
    return f;
}

/* The stored x is m as queued, seq included. */
static void check_msg(const seen_msg *x, const sx__store_msg *m)
{
    CHECK_EQ_U64(x->seq, m->seq);
    CHECK_EQ_U64(x->to, m->to);
    CHECK(sx_pid_eq(x->from, m->from));
    CHECK_EQ_U64(x->topic_len, m->topic_len);
    CHECK(memcmp(x->topic, m->topic, m->topic_len) == 0);
    CHECK_EQ_U64(x->data_len, m->data.len);
    CHECK(m->data.len == 0 || memcmp(x->data, m->data.data, m->data.len) == 0);
}

/* Submits jobs 1..n (attempt 1) and waits for their answers. */
static void submit_jobs(sx__store *s, uint64_t n)
{
    answers a;
    answers_init(&a);
    for (uint64_t id = 1; id <= n; id++) {
        sx__store_job j = job_of(id, NULL);
        CHECK_RC(sx__store_submit(s, &j, on_done, &a), 0);
    }
    answers_wait(&a, n);
    CHECK_EQ_U64(a.ok, n);
}

/* Queues ck and waits for its answer, 0. */
static void checkpoint_ok(sx__store *s, sx__store_ckpt *ck)
{
    answers a;
    answers_init(&a);
    CHECK_RC(sx__store_checkpoint(s, ck, on_done, &a), 0);
    answers_wait(&a, 1);
    CHECK_EQ_INT(a.last_rc, 0);
}

/* A checkpoint is stored whole: after a reopen recover reports its step
 * count, wait kind, state and in-flight bytes, and does not count a new
 * attempt for its job (it resumes), while a job without one in the same
 * store gets one; its messages come back in seq order (the seqs written
 * into the caller's array, rising), each with its addressee, sender,
 * topic and data. The next checkpoint replaces it, and its `consumed`
 * deletes that job's message with that seq: not the job's later one, not
 * another job's earlier one. */
static void t_checkpoint(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    submit_jobs(s, 2);
    static const uint8_t state[] = { 's', 't', 0, 0xff, 0x80, 7 };
    static const uint8_t inflight[] = { 0x91, 0x95, 1, 2, 3, 4, 0xc4, 0 };
    static const uint8_t d0[] = { 0xa1, 'x' }, d2[] = { 1, 2, 3, 0 };
    /* Job 2's message first: consuming job 1's first message below must
     * leave it, though its seq is lower. */
    sx__store_msg m[3] = {
        { .to = 2,
          .from = { 5, 6, UINT64_MAX - 1 },
          .topic = "to-two",
          .topic_len = 6,
          .data = { d0, sizeof d0 } },
        { .to = 1,
          .from = { 1, 2, 100 },
          .topic = "a\0b",
          .topic_len = 3,
          .data = { d2, sizeof d2 } },
        { .to = 1, .from = { 3, 4, 101 }, .topic = "empty", .topic_len = 5 },
    };
    sx__store_ckpt ck = { .id = 1,
                          .steps = 3,
                          .want = 2,
                          .state = { state, sizeof state },
                          .inflight = { inflight, sizeof inflight },
                          .msgs = m,
                          .n_msgs = 3 };
    checkpoint_ok(s, &ck);
    CHECK(m[0].seq > 0);
    CHECK(m[1].seq > m[0].seq);
    CHECK(m[2].seq > m[1].seq);
    sx__store_close(s);

    s = open_ok(0, 0);
    seen_jobs f = recover_ck(s);
    CHECK_EQ_U64(f.n, 2);
    const seen_job *x = seen(&f, 1);
    check_ckpt(x, 3, 2, ck.state, ck.inflight);
    CHECK_EQ_INT(x->attempt, 1); /* resumes: not a new attempt */
    x = seen(&f, 2);
    CHECK(!x->checkpointed);
    CHECK_EQ_INT(x->attempt, 2);
    seen_msgs g = messages_of(s);
    CHECK_EQ_U64(g.n, 3);
    for (size_t i = 0; i < 3; i++)
        check_msg(&g.m[i], &m[i]);

    /* The next checkpoint: job 1 consumed its first message. */
    static const uint8_t state2[] = { 9, 8, 7, 6, 5, 4 };
    sx__store_ckpt ck2 = { .id = 1,
                           .steps = 5,
                           .want = 1,
                           .state = { state2, sizeof state2 },
                           .consumed = &m[1].seq,
                           .n_consumed = 1 };
    checkpoint_ok(s, &ck2);
    sx__store_close(s);

    s = open_ok(0, 0);
    f = recover_ck(s);
    CHECK_EQ_U64(f.n, 2); /* one checkpoint row: replaced, not added */
    x = seen(&f, 1);
    check_ckpt(x, 5, 1, ck2.state, ck2.inflight);
    CHECK_EQ_INT(x->attempt, 1);
    CHECK_EQ_INT(seen(&f, 2)->attempt, 3);
    g = messages_of(s);
    CHECK_EQ_U64(g.n, 2);
    check_msg(&g.m[0], &m[0]);
    check_msg(&g.m[1], &m[2]);
    sx__store_close(s);
    drop_dir();
}

/* Messages stored one a record (sx__store_message) are there after a
 * reopen, in seq order, the seqs rising in the order they were queued,
 * whether queued together or one at a time; after a reopen new seqs go on
 * above the stored ones (a seq handed out again would collide with a
 * stored row: its record failed). */
static void t_message(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    submit_jobs(s, 2);
    static const uint8_t d[] = { 0x93, 1, 2, 3 };
    static const char topics[] = "t0t1t2t3t4";
    sx__store_msg m[5];
    for (int i = 0; i < 5; i++)
        m[i] = (sx__store_msg){ .to = 1 + (uint64_t)(i % 2),
                                .from = { 0, 9, 1000 + (uint64_t)i },
                                .topic = &topics[2 * i],
                                .topic_len = 2,
                                .data = { d, (size_t)i } };
    answers a;
    answers_init(&a);
    /* Three queued together (one commit or several), then waited for. */
    for (int i = 0; i < 3; i++)
        CHECK_RC(sx__store_message(s, &m[i], on_done, &a), 0);
    answers_wait(&a, 3);
    CHECK_EQ_U64(a.ok, 3);
    CHECK(m[0].seq > 0);
    CHECK(m[1].seq > m[0].seq);
    CHECK(m[2].seq > m[1].seq);
    sx__store_close(s);

    s = open_ok(0, 0);
    recover_ck(s);
    seen_msgs g = messages_of(s);
    CHECK_EQ_U64(g.n, 3);
    for (size_t i = 0; i < 3; i++)
        check_msg(&g.m[i], &m[i]);
    answers_init(&a);
    for (int i = 3; i < 5; i++) {
        CHECK_RC(sx__store_message(s, &m[i], on_done, &a), 0);
        answers_wait(&a, (uint64_t)i - 2); /* one at a time */
    }
    CHECK_EQ_U64(a.ok, 2);
    CHECK(m[3].seq > m[2].seq);
    CHECK(m[4].seq > m[3].seq);
    sx__store_close(s);

    s = open_ok(0, 0);
    recover_ck(s);
    g = messages_of(s);
    CHECK_EQ_U64(g.n, 5);
    for (size_t i = 0; i < 5; i++)
        check_msg(&g.m[i], &m[i]);
    sx__store_close(s);
    drop_dir();
}

/* A finish deletes the job's checkpoint and stored messages with the job,
 * and a restart (which keeps the job) deletes them too; another job's
 * checkpoint and messages stay, those it got from the finished job's
 * checkpoint included. */
static void t_finish_drops_checkpoint(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    submit_jobs(s, 3);
    static const uint8_t state[] = { 1, 2, 3 };
    sx__store_msg m1[2] = {
        { .to = 1, .from = { 0, 1, 7 }, .topic = "self", .topic_len = 4 },
        { .to = 2, .from = { 0, 1, 1 }, .topic = "peer", .topic_len = 4 },
    };
    sx__store_msg m2 = {
        .to = 2, .from = { 0, 1, 2 }, .topic = "own", .topic_len = 3
    };
    sx__store_msg m3 = {
        .to = 3, .from = { 0, 1, 2 }, .topic = "three", .topic_len = 5
    };
    sx__store_ckpt ck[3] = {
        { .id = 1,
          .steps = 1,
          .want = 2,
          .state = { state, 3 },
          .msgs = m1,
          .n_msgs = 2 },
        { .id = 2,
          .steps = 2,
          .want = 3,
          .state = { state, 3 },
          .msgs = &m2,
          .n_msgs = 1 },
        { .id = 3,
          .steps = 4,
          .want = 2,
          .state = { state, 3 },
          .msgs = &m3,
          .n_msgs = 1 },
    };
    for (int i = 0; i < 3; i++)
        checkpoint_ok(s, &ck[i]);
    answers a;
    answers_init(&a);
    CHECK_RC(sx__store_finish(s, 1, 0, NULL, (sx_payload){ NULL, 0 }, 2, 1,
                              on_done, &a),
             0);
    answers_wait(&a, 1);
    CHECK_EQ_INT(a.last_rc, 0);
    /* Job 3 ended its attempt 1 and runs again now (restart_at 0). */
    CHECK_RC(sx__store_restart(s, 3, 1, 0, (sx_payload){ NULL, 0 }), 0);
    sx__store_close(s); /* commits the restart (it has no answer) */

    s = open_ok(0, 0);
    seen_jobs f = recover_ck(s);
    CHECK_EQ_U64(f.n, 2);
    const seen_job *x = seen(&f, 2);
    check_ckpt(x, 2, 3, ck[1].state, ck[1].inflight);
    CHECK_EQ_INT(x->attempt, 1);
    x = seen(&f, 3);
    CHECK(!x->checkpointed);
    CHECK_EQ_INT(x->attempt, 2); /* no checkpoint left: a new attempt */
    seen_msgs g = messages_of(s);
    CHECK_EQ_U64(g.n, 2);
    check_msg(&g.m[0], &m1[1]);
    check_msg(&g.m[1], &m2);
    sx__store_close(s);
    drop_dir();
}

/* A message whose record is committed after its addressee's finish is
 * not kept: no checkpoint or finish of that job would ever delete it, and
 * every open would read it back. (The engine queues one when a step sends
 * to a checkpointed job whose finish is being stored, or when that job
 * finishes between a send's check of its addressee and the record.) The
 * record is answered 0 all the same, and the messages to stored jobs in it
 * are kept. */
static void t_message_to_ended_job(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    submit_jobs(s, 2);
    answers a;
    answers_init(&a);
    CHECK_RC(sx__store_finish(s, 1, 0, NULL, (sx_payload){ NULL, 0 }, 1, 1,
                              on_done, &a),
             0);
    answers_wait(&a, 1);
    CHECK_EQ_INT(a.last_rc, 0);
    sx__store_msg m[2] = {
        { .to = 1, .from = { 0, 1, 2 }, .topic = "late", .topic_len = 4 },
        { .to = 2, .from = { 0, 1, 2 }, .topic = "kept", .topic_len = 4 },
    };
    sx__store_ckpt ck = {
        .id = 2, .steps = 1, .want = 2, .msgs = m, .n_msgs = 2
    };
    checkpoint_ok(s, &ck);
    sx__store_msg late = { .to = 1, .topic = "late", .topic_len = 4 };
    sx__store_msg never = { .to = 9, .topic = "never", .topic_len = 5 };
    CHECK_RC(sx__store_message(s, &late, on_done, &a), 0);
    CHECK_RC(sx__store_message(s, &never, on_done, &a), 0);
    answers_wait(&a, 3);
    CHECK_EQ_U64(a.ok, 3);
    sx__store_close(s);

    s = open_ok(0, 0);
    recover_ck(s);
    seen_msgs g = messages_of(s);
    CHECK_EQ_U64(g.n, 1);
    check_msg(&g.m[0], &m[1]);
    sx__store_close(s);
    drop_dir();
}

/* The engine's numbers (meta) are kept across a reopen; a schema-1
 * database (no meta table) is migrated forward at open, its jobs kept;
 * each recovery counts a new attempt for the jobs without an outcome. */
static void t_meta_and_migration(void)
{
    fresh_dir();
    sx__store *s = open_ok(0, 0);
    int64_t v = 0;
    CHECK_RC(sx__store_meta_get(s, "host", &v), SX_ENOTFOUND);
    CHECK_RC(sx__store_meta_set(s, "host", 12345), 0);
    CHECK_RC(sx__store_meta_set(s, "host", 777), 0);
    answers a;
    answers_init(&a);
    sx__store_job j = job_of(9, "k9");
    CHECK_RC(sx__store_submit(s, &j, on_done, &a), 0);
    answers_wait(&a, 1);
    /* The writer runs: the caller's thread no longer has the connection. */
    CHECK_RC(sx__store_meta_set(s, "host", 1), SX_ESTATE);
    CHECK_RC(sx__store_meta_get(s, "host", &v), SX_ESTATE);
    sx__store_close(s);

    s = open_ok(0, 0);
    CHECK_RC(sx__store_meta_get(s, "host", &v), 0);
    CHECK_EQ_U64((uint64_t)v, 777);
    found f = recover(s); /* attempt 2 */
    sx__store_close(s);
    CHECK_EQ_U64(f.jobs, 1);
    s = open_ok(0, 0);
    f = recover_attempt(s, 3);
    CHECK_EQ_U64(f.jobs, 1);
    CHECK(f.inputs_ok);
    sx__store_close(s);

    /* Back to schema 1: no meta table, no restart columns, no
     * checkpoints or inbox. */
    char path[300];
    db_path(path, sizeof path);
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db,
                       "DROP TABLE meta; DROP TABLE checkpoints; DROP TABLE "
                       "inbox; ALTER TABLE jobs DROP COLUMN policy; "
                       "ALTER TABLE jobs DROP COLUMN restart_at; ALTER TABLE "
                       "jobs DROP COLUMN restarts; PRAGMA user_version = 1",
                       NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    s = open_ok(0, 0);
    CHECK_RC(sx__store_meta_get(s, "host", &v), SX_ENOTFOUND);
    CHECK_RC(sx__store_meta_set(s, "host", 5), 0);
    f = recover_attempt(s, 4);
    CHECK_EQ_U64(f.jobs, 1);
    CHECK(f.inputs_ok);
    sx__store_close(s);
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    int64_t ver = 0;
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) ==
          SQLITE_OK);
    CHECK(sqlite3_step(st) == SQLITE_ROW);
    ver = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    /* Schema 4's tables are back. */
    CHECK(sqlite3_exec(db,
                       "SELECT count(*) FROM checkpoints; SELECT count(*) "
                       "FROM inbox",
                       NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    CHECK_EQ_U64((uint64_t)ver, SX__STORE_SCHEMA);
    drop_dir();
}

/* Bad arguments: clear codes, nothing queued (no answer comes, no
 * message is stored); after shutdown, SX_ESTATE. */
static void t_misuse(void)
{
    sx__store *s = NULL;
    char msg[128];
    CHECK_RC(sx__store_open(NULL, &s, msg, sizeof msg), SX_EINVAL);
    sx__store_config cfg = { .dir = "/proc/stepx-cannot-be-here" };
    CHECK(sx__store_open(&cfg, &s, msg, sizeof msg) < 0);
    CHECK(strstr(msg, "cannot create the state directory") != NULL);
    fresh_dir();
    s = open_ok(0, 0);
    sx__store_job j = job_of(1, NULL);
    j.type = NULL;
    CHECK_RC(sx__store_submit(s, &j, on_done, NULL), SX_EINVAL);
    CHECK_RC(sx__store_finish(s, 1, 0, NULL, (sx_payload){ NULL, 3 }, 0, 0,
                              NULL, NULL),
             SX_EINVAL);

    submit_jobs(s, 1); /* the addressee of the messages below */
    answers a;
    answers_init(&a);
    static char topic[257];
    memset(topic, 't', sizeof topic - 1);
    sx__store_msg m[2] = {
        { .to = 1, .topic = "ok", .topic_len = 2 },
        { .to = 1, .topic = "ok", .topic_len = 2 },
    };
    sx__store_ckpt ck = { .id = 1, .steps = 1, .msgs = m, .n_msgs = 2 };
    CHECK_RC(sx__store_checkpoint(NULL, &ck, on_done, &a), SX_EINVAL);
    CHECK_RC(sx__store_checkpoint(s, NULL, on_done, &a), SX_EINVAL);
    CHECK_RC(sx__store_message(NULL, &m[0], on_done, &a), SX_EINVAL);
    CHECK_RC(sx__store_message(s, NULL, on_done, &a), SX_EINVAL);
    /* Each bad message, alone and as a checkpoint's second. */
    sx__store_msg bad[3] = {
        { .to = 1, .topic = NULL, .topic_len = 0 },
        { .to = 1, .topic = topic, .topic_len = 256 },
        { .to = 1, .topic = "ok", .topic_len = 2, .data = { NULL, 1 } },
    };
    for (int i = 0; i < 3; i++) {
        CHECK_RC(sx__store_message(s, &bad[i], on_done, &a), SX_EINVAL);
        m[1] = bad[i];
        CHECK_RC(sx__store_checkpoint(s, &ck, on_done, &a), SX_EINVAL);
    }
    ck.n_msgs = 0;
    ck.state = (sx_payload){ NULL, 4 };
    CHECK_RC(sx__store_checkpoint(s, &ck, on_done, &a), SX_EINVAL);
    ck.state = (sx_payload){ NULL, 0 };
    ck.inflight = (sx_payload){ NULL, 4 };
    CHECK_RC(sx__store_checkpoint(s, &ck, on_done, &a), SX_EINVAL);
    ck.inflight = (sx_payload){ NULL, 0 };
    ck.msgs = NULL;
    ck.n_msgs = 1;
    CHECK_RC(sx__store_checkpoint(s, &ck, on_done, &a), SX_EINVAL);
    /* 255 bytes is the longest topic: stored. */
    sx__store_msg longest = { .to = 1, .topic = topic, .topic_len = 255 };
    CHECK_RC(sx__store_message(s, &longest, on_done, &a), 0);
    answers_wait(&a, 1);
    CHECK_EQ_INT(a.last_rc, 0);

    sx__store_shutdown(s);
    m[0].seq = 0;
    ck = (sx__store_ckpt){ .id = 1, .steps = 1, .msgs = m, .n_msgs = 1 };
    CHECK_RC(sx__store_checkpoint(s, &ck, on_done, &a), SX_ESTATE);
    CHECK_RC(sx__store_message(s, &m[0], on_done, &a), SX_ESTATE);
    CHECK_EQ_U64(m[0].seq, 0);
    sx__store_close(s);
    CHECK_EQ_U64(a.n, 1); /* only the 255-byte topic's answer */

    s = open_ok(0, 0);
    seen_msgs g = messages_of(s);
    CHECK_EQ_U64(g.n, 1);
    check_msg(&g.m[0], &longest);
    sx__store_close(s);
    drop_dir();
}

static const sx_test_case cases[] = {
    { "roundtrip", t_roundtrip },
    { "idempotent_key", t_idempotent_key },
    { "group_commit", t_group_commit },
    { "keep_outcomes", t_keep_outcomes },
    { "second_opener", t_second_opener },
    { "lock_of_a_dead_holder", t_lock_of_a_dead_holder },
    { "garbage", t_garbage },
    { "foreign_db", t_foreign_db },
    { "damaged", t_damaged },
    { "newer_schema", t_newer_schema },
    { "read_only", t_read_only },
    { "full", t_full },
    { "meta_and_migration", t_meta_and_migration },
    { "checkpoint", t_checkpoint },
    { "message", t_message },
    { "finish_drops_checkpoint", t_finish_drops_checkpoint },
    { "message_to_ended_job", t_message_to_ended_job },
    { "misuse", t_misuse },
};

SX_TEST_MAIN(cases)

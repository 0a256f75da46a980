/* tests/fuzz/fuzz_store.c — libFuzzer target for the durable store
 * (engine/store/sqlite.c) opening a database it did not write: the input
 * is the whole stepx.db file. Opening it and recovering what it holds
 * must either succeed, with every job and outcome well formed, or fail
 * with one of the documented codes (SX_ECORRUPT, SX_EVERSION, -EROFS,
 * -ENOSPC, SX_ENOMEM, -EIO) and a message; never crash, never hand the
 * caller a NULL where the interface promises a string.
 *
 * The seed corpus (tests/fuzz/corpus/store) holds real stores: empty,
 * with jobs, with keys and outcomes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/store/store.h"

#define FUZZ_ASSERT(c)                                                         \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "fuzz_store: %s:%d: %s\n", __FILE__, __LINE__,     \
                    #c);                                                       \
            abort();                                                           \
        }                                                                      \
    } while (0)

static char dir[64];

static int on_job(void *user, const sx__store_job *j)
{
    (void)user;
    FUZZ_ASSERT(j->type != NULL && j->method != NULL);
    FUZZ_ASSERT(j->input.len == 0 || j->input.data != NULL);
    FUZZ_ASSERT(j->key_len == 0 || j->key != NULL);
    return 0;
}

static int on_outcome(void *user, const sx__store_outcome *o)
{
    (void)user;
    FUZZ_ASSERT(o->value.len == 0 || o->value.data != NULL);
    return 0;
}

static bool documented(int rc)
{
    return rc == SX_ECORRUPT || rc == SX_EVERSION || rc == -EROFS ||
           rc == -ENOSPC || rc == SX_ENOMEM || rc == -EIO || rc == -EBUSY;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (dir[0] == '\0') {
        snprintf(dir, sizeof dir, "/tmp/stepx-fuzz-store-%d", (int)getpid());
        FUZZ_ASSERT(mkdir(dir, 0700) == 0 || errno == EEXIST);
    }
    char path[128];
    static const char *const leftovers[] = { "stepx.db", "stepx.db-wal",
                                             "stepx.db-shm" };
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, leftovers[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/stepx.db", dir);
    FILE *f = fopen(path, "wb");
    FUZZ_ASSERT(f != NULL);
    FUZZ_ASSERT(fwrite(data, 1, size, f) == size);
    fclose(f);

    sx__store_config cfg = { .dir = dir };
    sx__store *s = NULL;
    char msg[512];
    int rc = sx__store_open(&cfg, &s, msg, sizeof msg);
    if (rc != 0) {
        FUZZ_ASSERT(s == NULL);
        FUZZ_ASSERT(documented(rc));
        FUZZ_ASSERT(msg[0] != '\0');
        return 0;
    }
    rc = sx__store_recover(s, on_job, on_outcome, NULL);
    FUZZ_ASSERT(rc == 0 || documented(rc));
    sx__store_close(s);
    return 0;
}

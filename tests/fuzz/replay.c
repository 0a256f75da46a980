/* tests/fuzz/replay.c — runs a fuzz target's LLVMFuzzerTestOneInput over
 * files, without libFuzzer, so that any compiler's normal build can check
 * a seed corpus: `replay PATH...`, each PATH a file or a folder (its
 * regular files, not recursively).
 *
 * Exit status: 0 when every input ran (an oracle failure aborts the
 * program instead); 1 when a path cannot be read or no input was found
 * (an empty or missing corpus must not pass as checked).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs the target on one file. Returns 0, or 1 when it cannot be read. */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    uint8_t *data = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap > 0 ? 2 * cap : 4096;
            uint8_t *d = realloc(data, cap);
            if (d == NULL) {
                fprintf(stderr, "replay: out of memory reading %s\n", path);
                free(data);
                fclose(f);
                return 1;
            }
            data = d;
        }
        size_t got = fread(data + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        free(data);
        return 1;
    }
    /* An exact copy, so that reading past the input is past the block. */
    uint8_t *exact = malloc(len > 0 ? len : 1);
    if (exact == NULL) {
        free(data);
        return 1;
    }
    if (len > 0)
        memcpy(exact, data, len);
    free(data);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned inputs = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: no such file or folder: %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= run_file(argv[i]);
            inputs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (d == NULL) {
            fprintf(stderr, "replay: cannot open the folder %s\n", argv[i]);
            return 1;
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char path[4096];
            if (snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name) >=
                (int)sizeof path) {
                fprintf(stderr, "replay: path too long in %s\n", argv[i]);
                bad = 1;
                continue;
            }
            if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            bad |= run_file(path);
            inputs++;
        }
        closedir(d);
    }
    if (inputs == 0) {
        fprintf(stderr, "replay: no inputs\n");
        return 1;
    }
    printf("replay: %u inputs, %s\n", inputs, bad ? "some unreadable" : "ok");
    return bad;
}

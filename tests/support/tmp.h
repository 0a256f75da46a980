/* tests/support/tmp.h — scratch directories under /tmp.
 */
#ifndef TX_SUPPORT_TMP_H
#define TX_SUPPORT_TMP_H

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/harness.h"

/* Makes a new directory "/tmp/<prefix>XXXXXX" (mkdtemp: mode 0700, a name
 * no other run has) and leaves its path in buf, of cap bytes; fails the
 * case if it cannot. */
static inline void tx_mkdtemp(char *buf, size_t cap, const char *prefix)
{
    int n = snprintf(buf, cap, "/tmp/%sXXXXXX", prefix);
    CHECK(n > 0 && (size_t)n < cap);
    if (mkdtemp(buf) == NULL)
        SX_FAILF("mkdtemp %s: %s", buf, strerror(errno));
}

/* Removes path and, when it is a directory, everything under it (symbolic
 * links are removed, not followed). 0 when all of it is gone, -1 when
 * something could not be removed (the rest still is). */
static inline int tx_rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(path) == 0 ? 0 : -1;
    int rc = 0;
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    struct dirent *de;
    char sub[PATH_MAX];
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        int n = snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
        if (n < 0 || (size_t)n >= sizeof sub || tx_rm_tree(sub) != 0)
            rc = -1;
    }
    closedir(d);
    return rmdir(path) == 0 ? rc : -1;
}

#endif

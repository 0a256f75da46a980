/* cmd/cli_render.c — how the stepx CLI shows JSON values to people:
 * aligned tables (ps, types, top, per-worker figures) and trees of
 * "name  value" lines (stats). Threads: the CLI's one thread.
 */
#include "cmd/cli.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* A cell's text; the caller frees it. */
static char *cell(const json_t *v)
{
    if (v == NULL || json_is_null(v))
        return strdup("-");
    if (json_is_string(v))
        return strdup(json_string_value(v));
    return cli_json_text(v);
}

void cli_print_table(FILE *f, const json_t *rows, const char *const *keys,
                     size_t n_keys)
{
    size_t w[16] = { 0 };
    bool num[16];
    if (n_keys > 16)
        n_keys = 16;
    for (size_t k = 0; k < n_keys; k++) {
        w[k] = strlen(keys[k]);
        num[k] = true;
    }
    size_t i;
    const json_t *row;
    json_array_foreach(rows, i, row)
    {
        for (size_t k = 0; k < n_keys; k++) {
            const json_t *v = json_object_get(row, keys[k]);
            char *s = cell(v);
            if (s != NULL && strlen(s) > w[k])
                w[k] = strlen(s);
            if (v != NULL && !json_is_number(v) && !json_is_null(v))
                num[k] = false;
            free(s);
        }
    }
    for (size_t k = 0; k < n_keys; k++) {
        char h[64];
        size_t j = 0;
        for (; keys[k][j] != 0 && j < sizeof h - 1; j++)
            h[j] = (char)toupper((unsigned char)keys[k][j]);
        h[j] = 0;
        if (k + 1 == n_keys && !num[k])
            fprintf(f, "%s\n", h);
        else
            fprintf(f, num[k] ? "%*s%s" : "%-*s%s", (int)w[k], h,
                    k + 1 < n_keys ? "  " : "\n");
    }
    json_array_foreach(rows, i, row)
    {
        for (size_t k = 0; k < n_keys; k++) {
            char *s = cell(json_object_get(row, keys[k]));
            const char *t = s != NULL ? s : "?";
            if (k + 1 == n_keys && !num[k])
                fprintf(f, "%s\n", t); /* no trailing blanks */
            else
                fprintf(f, num[k] ? "%*s%s" : "%-*s%s", (int)w[k], t,
                        k + 1 < n_keys ? "  " : "\n");
            free(s);
        }
    }
}

/* True when v is a non-empty array of objects (a table). */
static bool is_table(const json_t *v)
{
    if (!json_is_array(v) || json_array_size(v) == 0)
        return false;
    size_t i;
    const json_t *r;
    json_array_foreach(v, i, r) if (!json_is_object(r)) return false;
    return true;
}

void cli_print_tree(FILE *f, const json_t *v, int indent)
{
    if (!json_is_object(v)) {
        char *s = cell(v);
        fprintf(f, "%*s%s\n", indent, "", s != NULL ? s : "?");
        free(s);
        return;
    }
    size_t w = 0;
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x)
    {
        if (strlen(k) > w)
            w = strlen(k);
    }
    json_object_foreach((json_t *)v, k, x)
    {
        if (json_is_object(x)) {
            fprintf(f, "%*s%s:\n", indent, "", k);
            cli_print_tree(f, x, indent + 2);
        } else if (is_table(x)) {
            /* The columns: the first row's keys. */
            const char *keys[16];
            size_t n = 0;
            const char *kk;
            json_t *xx;
            json_object_foreach(json_array_get(x, 0), kk, xx)
            {
                if (n < 16)
                    keys[n++] = kk;
            }
            fprintf(f, "%*s%s:\n", indent, "", k);
            cli_print_table(f, x, keys, n);
        } else {
            char *s = cell(x);
            fprintf(f, "%*s%-*s  %s\n", indent, "", (int)w, k,
                    s != NULL ? s : "?");
            free(s);
        }
    }
}

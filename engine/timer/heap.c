/* engine/timer/heap.c — the loops' deadline heap (engine/timer/heap.h).
 * Each entry knows its position (idx), so that removing any entry is
 * O(log n) without a search.
 */
#include <stdlib.h>

#include "engine/timer/heap.h"

static bool less(const sx__iotimer *a, const sx__iotimer *b)
{
    return a->due_ns < b->due_ns;
}

static void put(sx__theap *h, size_t i, sx__iotimer *t)
{
    h->a[i] = t;
    t->idx = (uint32_t)i + 1;
}

static void up(sx__theap *h, size_t i)
{
    sx__iotimer *t = h->a[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!less(t, h->a[parent]))
            break;
        put(h, i, h->a[parent]);
        i = parent;
    }
    put(h, i, t);
}

static void down(sx__theap *h, size_t i)
{
    sx__iotimer *t = h->a[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && less(h->a[c + 1], h->a[c]))
            c++;
        if (!less(h->a[c], t))
            break;
        put(h, i, h->a[c]);
        i = c;
    }
    put(h, i, t);
}

void sx__theap_remove(sx__theap *h, sx__iotimer *t)
{
    size_t i = t->idx - 1;
    t->idx = 0;
    sx__iotimer *last = h->a[--h->n];
    if (last == t)
        return;
    put(h, i, last);
    up(h, i);
    down(h, last->idx - 1);
}

bool sx__theap_add(sx__theap *h, sx__iotimer *t)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 1024;
        sx__iotimer **a = realloc(h->a, cap * sizeof(*a));
        if (a == NULL)
            return false;
        h->a = a;
        h->cap = cap;
    }
    h->n++;
    put(h, h->n - 1, t);
    up(h, h->n - 1);
    return true;
}

void sx__theap_fini(sx__theap *h)
{
    free(h->a);
    h->a = NULL;
    h->n = h->cap = 0;
}

/* process/batch.c — the walk over one step's events (sx_batch_init,
 * sx_batch_next) and the kind of one event (sx_event_kind_of).
 *
 * Three phases over the batch: the @cancel messages, in batch order; the
 * start, once, when *started is false; then every other event in batch
 * order (the cancels are not given again). Past the end the walk keeps
 * answering SX_EV_END.
 *
 * Threads: [any thread] (no shared state); a walk belongs to the step
 * that reads it, and its events are valid only during that step.
 */
#include "process/output.h"
#include "process/stepx/process.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

enum { PHASE_CANCELS = 0, PHASE_START = 1, PHASE_REST = 2 };

/* The step has ended the process (DONE or FAIL written). */
static bool ended(const sx_step_output *out)
{
    return out != NULL &&
           (out->status == SX__ST_DONE || out->status == SX__ST_FAIL);
}

int sx_batch_wait(sx_batch *b)
{
    if (b != NULL && b->out != NULL && !ended(b->out) &&
        b->out->status != SX__ST_IDLE)
        sx_wait(b->out);
    return 0;
}

sx_event_kind sx_event_kind_of(const sx_event *ev)
{
    if (ev == NULL)
        return SX_EV_END;
    if (ev->type == SX_EVENT_YIELD_COMPLETE)
        return SX_EV_COMPLETE;
    if (ev->topic == NULL)
        return SX_EV_MESSAGE;
    if (strcmp(ev->topic, SX_TOPIC_CANCEL) == 0)
        return SX_EV_CANCEL;
    if (strcmp(ev->topic, SX_TOPIC_EXIT) == 0)
        return SX_EV_EXIT;
    if (strcmp(ev->topic, SX_TOPIC_SPAWNED) == 0)
        return SX_EV_SPAWNED;
    return SX_EV_MESSAGE;
}

/* events may be NULL only with n 0; started NULL means this walk never
 * gives a start. */
void sx_batch_init(sx_batch *b, const sx_event *events, size_t n, bool *started,
                   sx_step_output *out)
{
    if (b == NULL)
        return;
    b->out = out;
    b->events = events;
    b->n = events != NULL ? n : 0;
    b->i = 0;
    b->phase = PHASE_CANCELS;
    b->started = started;
}

sx_event_kind sx_batch_next(sx_batch *b, const sx_event **ev)
{
    const sx_event *e;
    sx_event_kind k;

    if (ev != NULL)
        *ev = NULL;
    if (b == NULL || ended(b->out))
        return SX_EV_END;
    if (b->phase == PHASE_CANCELS) {
        while (b->i < b->n) {
            e = &b->events[b->i++];
            if (sx_event_kind_of(e) == SX_EV_CANCEL) {
                if (ev != NULL)
                    *ev = e;
                return SX_EV_CANCEL;
            }
        }
        b->phase = PHASE_START;
        b->i = 0;
    }
    if (b->phase == PHASE_START) {
        b->phase = PHASE_REST;
        if (b->started != NULL && !*b->started) {
            *b->started = true;
            return SX_EV_START;
        }
    }
    while (b->i < b->n) {
        e = &b->events[b->i++];
        k = sx_event_kind_of(e);
        if (k != SX_EV_CANCEL) {
            if (ev != NULL)
                *ev = e;
            return k;
        }
    }
    return SX_EV_END;
}

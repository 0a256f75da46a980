/* examples/order_raw.c — stepx-order-raw: the order workflow of
 * examples/order.c written on the bare process contract (a phase enum, one
 * yield in flight per phase, payloads packed and read by hand), kept to
 * show what the authoring helpers save (docs/WORKFLOW.md, "The same
 * workflow on the bare contract").
 *
 * Two process types:
 *   "order"   — the workflow. It charges the customer by spawning a "payment"
 *               child and waiting for it (SX_CMD_SPAWN_WAIT, with a per-yield
 *               timeout), retries a failed payment after a sleep that doubles
 *               each time (SX_CMD_SLEEP: 10, 20, 40 ms), gives up when a
 *               payment does not answer in time, runs a subprocess that
 *               prints a receipt (SX_CMD_EXEC), and finishes with a result
 *               map {order, status, attempts, receipt, reason}.
 *   "payment" — a stand-in for a payment gateway: it waits a few ms (the
 *               "network"), then succeeds or fails as its test card says.
 *
 * main() runs one order per path (paid at once, paid after retries, failed
 * after the last retry, timed out, cancelled by the caller), prints a line
 * per order and checks each outcome: it exits 1 if one is not what its
 * scenario expects, so the tests run it as a test.
 *
 * Threads: init and step run on the engine's workers, one step at a time per
 * process; main runs on the program's main thread and only uses the engine
 * API. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <stepx/stepx.h>

/* ---- the knobs of the workflow ------------------------------------------ */

enum {
    MAX_ATTEMPTS = 4,          /* payment tries before the order fails     */
    BACKOFF_FIRST_MS = 10,     /* sleep after the 1st failure; then x2     */
    PAYMENT_TIMEOUT_MS = 1000, /* one attempt's deadline (per-yield timeout) */
    GATEWAY_MS = 5,            /* how long the simulated gateway takes     */
    HUNG_GATEWAY_MS = 600000,  /* the "hung" card: an answer that never comes */
    RECEIPT_TIMEOUT_MS = 5000, /* the receipt subprocess's own deadline    */
    FLAKY_FAILURES = 2         /* the "flaky" card fails this many times   */
};

/* The tag of a yield is ours to choose; the answer carries it back. An order
 * has at most one yield in flight, so one tag per kind of yield is enough to
 * tell the answers apart. */
enum { TAG_PAYMENT = 1, TAG_BACKOFF = 2, TAG_RECEIPT = 3, TAG_GATEWAY = 4 };

/* Packs text (NUL-terminated) as a msgpack string, or nil when it is "". */
static void pack_text(sx_pack *pk, const char *text)
{
    if (text[0] != '\0')
        sx_pack_str(pk, text);
    else
        sx_pack_nil(pk);
}

/* Copies a msgpack string into buf (NUL-terminated). Returns 0, or
 * SX_EPROTO (not a string) / SX_ELIMIT (too long for buf). */
static int unpack_text(sx_unpack *u, char *buf, size_t cap)
{
    const char *s;
    size_t n;
    int rc = sx_unpack_str(u, &s, &n);
    if (rc != 0)
        return rc;
    if (n >= cap)
        return SX_ELIMIT;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return 0;
}

/* ======================================================================== */
/* The "payment" process: charge(order id, card, attempt)                   */
/* ======================================================================== */

/* Test cards, like a payment provider's sandbox:
 *   "good"  — approved;
 *   "flaky" — the gateway errors on the first FLAKY_FAILURES attempts;
 *   "down"  — the gateway errors on every attempt;
 *   "hung"  — the gateway never answers. */
typedef struct {
    char order[32];
    char card[16];
    int64_t attempt;
    sx_pid parent; /* the order that spawned us (SX_PID_NONE if none) */
    int started;
} payment_state;

static int payment_init(void *st, const sx_init_ctx *ctx, const char *method,
                        const sx_payload *in, size_t n_in)
{
    (void)method; /* "charge", the only method (see payment_methods) */
    payment_state *s = st;
    /* Inputs are positional msgpack values. A bad input is init's error,
     * which is the spawn's error: the order sees it as a failed attempt. */
    if (n_in != 3 || sx_payload_get_str(in[0], s->order, sizeof(s->order)) ||
        sx_payload_get_str(in[1], s->card, sizeof(s->card)) ||
        sx_payload_get_int(in[2], &s->attempt))
        return SX_EINVAL;
    if (strcmp(s->card, "good") != 0 && strcmp(s->card, "flaky") != 0 &&
        strcmp(s->card, "down") != 0 && strcmp(s->card, "hung") != 0)
        return SX_EINVAL;
    s->parent = sx_init_parent(ctx);
    return 0;
}

static int payment_step(void *st, const sx_event *ev, size_t n_ev,
                        sx_step_output *out)
{
    payment_state *s = st;
    uint8_t buf[96];
    sx_pack pk;

    if (!s->started) {
        /* First step: call the "gateway" (a sleep here; a real one would
         * make an HTTP request with SX_CMD_NET_HTTP). */
        s->started = 1;
        /* Watch the order that waits for us. A spawn-and-wait whose
         * timeout passed does not stop its child: if our order gives up
         * (or is cancelled or terminated), this monitor sends us an @exit
         * message and we stop too, instead of hanging on forever. Fire
         * and forget (SX_TAG_NONE): we need no answer to the monitor. */
        if (!sx_pid_eq(s->parent, SX_PID_NONE)) {
            sx_pack_init_fixed(&pk, buf, sizeof(buf));
            sx_pack_array(&pk, 1);
            sx_pack_pid(&pk, s->parent);
            int rc = sx_yield(out, SX_CMD_MONITOR, SX_TAG_NONE,
                              sx_pack_payload(&pk));
            if (rc != 0)
                return rc;
        }
        int64_t ms =
            strcmp(s->card, "hung") == 0 ? HUNG_GATEWAY_MS : GATEWAY_MS;
        sx_wait(out);
        return sx_yield(out, SX_CMD_SLEEP, TAG_GATEWAY,
                        sx_payload_int(buf, ms));
    }

    for (size_t i = 0; i < n_ev; i++) {
        if (ev[i].type == SX_EVENT_MESSAGE) {
            /* @exit from our order, or @cancel (the engine is stopping):
             * nobody waits for this payment any more. Finishing cancels
             * the gateway call still in flight. */
            if (strcmp(ev[i].topic, SX_TOPIC_EXIT) == 0 ||
                strcmp(ev[i].topic, SX_TOPIC_CANCEL) == 0) {
                sx_fail(out, "payment abandoned: nobody waits for it");
                return 0;
            }
            continue; /* a message we do not know: ignore it */
        }
        if (ev[i].tag != TAG_GATEWAY)
            continue;
        if (ev[i].error != 0)
            return ev[i].error; /* the sleep itself failed: fail with it */
        /* The gateway answered. FAIL with a message: the order's
         * spawn-and-wait gets SX_EFAILED and this message. */
        if (strcmp(s->card, "down") == 0 ||
            (strcmp(s->card, "flaky") == 0 && s->attempt <= FLAKY_FAILURES)) {
            sx_fail(out, "gateway unavailable");
            return 0;
        }
        /* Approved: DONE with a transaction id (a string), which becomes
         * the result of the order's spawn-and-wait. */
        char txn[64];
        snprintf(txn, sizeof(txn), "txn-%s-%" PRId64, s->order, s->attempt);
        sx_pack_init_fixed(&pk, buf, sizeof(buf));
        sx_pack_str(&pk, txn);
        sx_done(out, sx_pack_payload(&pk));
        return 0;
    }
    sx_wait(out); /* nothing for us yet: keep waiting for the gateway */
    return 0;
}

static const char *const payment_methods[] = { "charge", NULL };
static const sx_process_type payment_type = {
    .name = "payment",
    .state_size = sizeof(payment_state),
    .init = payment_init,
    .step = payment_step,
    .methods = payment_methods /* any other method: SX_EUNKNOWN_METHOD */
};

/* ======================================================================== */
/* The "order" process: run(order id, amount in cents, card)                */
/* ======================================================================== */

/* Where the workflow stands: each phase but START waits for the answer to
 * exactly one yield.
 *
 *   START --spawn-wait payment--> PAYING --ok--> RECEIPT --exec ok--> done
 *                                   |  ^ retry                 "paid"
 *                          failed,  |  | sleep answered
 *                   attempts left   v  |
 *                                 BACKOFF
 *   PAYING: failed, no attempts left -> done "failed"
 *           SX_ETIMEDOUT             -> done "timed out"
 *   any phase: @cancel message       -> done "cancelled"
 */
typedef enum {
    ORDER_START = 0, /* zeroed state starts here */
    ORDER_PAYING,    /* waiting for TAG_PAYMENT (spawn-and-wait)  */
    ORDER_BACKOFF,   /* waiting for TAG_BACKOFF (sleep)           */
    ORDER_RECEIPT    /* waiting for TAG_RECEIPT (exec)            */
} order_phase;

/* The engine gives each process state_size zeroed bytes and keeps them
 * until close. Everything lives inline: no close hook is needed. */
typedef struct {
    order_phase phase;
    char id[32];
    char amount[24]; /* "25.00": formatted once, used in the receipt */
    char card[16];
    int64_t attempts;
    char txn[64];      /* the payment's transaction id, once paid */
    char reason[128];  /* why the last attempt failed, if it did  */
    char receipt[128]; /* what the receipt subprocess printed     */
} order_state;

static int order_init(void *st, const sx_init_ctx *ctx, const char *method,
                      const sx_payload *in, size_t n_in)
{
    (void)ctx, (void)method; /* "run", the only method */
    order_state *s = st;
    int64_t cents;
    /* Init runs inside submit: an error here is submit's error. */
    if (n_in != 3 || sx_payload_get_str(in[0], s->id, sizeof(s->id)) ||
        sx_payload_get_int(in[1], &cents) || cents <= 0 ||
        sx_payload_get_str(in[2], s->card, sizeof(s->card)))
        return SX_EINVAL;
    snprintf(s->amount, sizeof(s->amount), "%" PRId64 ".%02" PRId64,
             cents / 100, cents % 100);
    return 0;
}

/* The last step: DONE with {order, status, attempts, receipt, reason}.
 * receipt and reason are nil when empty. Any yield still in flight is
 * cancelled by the engine when the process finishes. */
static int order_finish(order_state *s, sx_step_output *out, const char *status)
{
    uint8_t buf[512];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof(buf));
    sx_pack_map(&pk, 5);
    sx_pack_str(&pk, "order");
    sx_pack_str(&pk, s->id);
    sx_pack_str(&pk, "status");
    sx_pack_str(&pk, status);
    sx_pack_str(&pk, "attempts");
    sx_pack_int(&pk, s->attempts);
    sx_pack_str(&pk, "receipt");
    pack_text(&pk, s->receipt);
    sx_pack_str(&pk, "reason");
    pack_text(&pk, s->reason);
    if (pk.err != 0)
        return pk.err; /* cannot happen with these sizes; fail if it does */
    sx_done(out, sx_pack_payload(&pk));
    return 0;
}

/* The first step, and each retry: spawn a payment child and wait for its
 * result, for at most PAYMENT_TIMEOUT_MS. */
static int order_pay(order_state *s, sx_step_output *out)
{
    uint8_t buf[128];
    sx_pack pk;
    s->attempts++;
    /* spawn-wait's args: [type, method, [input...]]. */
    sx_pack_init_fixed(&pk, buf, sizeof(buf));
    sx_pack_array(&pk, 3);
    sx_pack_str(&pk, "payment");
    sx_pack_str(&pk, "charge");
    sx_pack_array(&pk, 3);
    sx_pack_str(&pk, s->id);
    sx_pack_str(&pk, s->card);
    sx_pack_int(&pk, s->attempts);
    if (pk.err != 0)
        return pk.err;
    /* The answer comes in a later step with TAG_PAYMENT: the child's result
     * (DONE), its error (SX_EFAILED and its message), or SX_ETIMEDOUT if
     * PAYMENT_TIMEOUT_MS pass first — exactly one of them. */
    s->phase = ORDER_PAYING;
    sx_wait(out);
    return sx_yield_timeout(out, SX_CMD_SPAWN_WAIT, TAG_PAYMENT,
                            sx_pack_payload(&pk), PAYMENT_TIMEOUT_MS);
}

/* After the payment: run a subprocess that prints the receipt. argv goes
 * to the program as is (our data is never parsed by the shell): in the
 * script, "$1", "$2" and "$3" are the order id, the amount and the
 * transaction id; "sh" fills $0. */
static int order_receipt(order_state *s, sx_step_output *out)
{
    uint8_t buf[512];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof(buf));
    sx_pack_map(&pk, 3);
    sx_pack_str(&pk, "argv");
    sx_pack_array(&pk, 7);
    sx_pack_str(&pk, "/bin/sh");
    sx_pack_str(&pk, "-c");
    sx_pack_str(&pk, "printf 'receipt %s %s %s' \"$1\" \"$2\" \"$3\"");
    sx_pack_str(&pk, "sh");
    sx_pack_str(&pk, s->id);
    sx_pack_str(&pk, s->amount);
    sx_pack_str(&pk, s->txn);
    sx_pack_str(&pk, "max_output"); /* bytes of stdout (and of stderr) */
    sx_pack_int(&pk, (int64_t)sizeof(s->receipt) - 1);
    sx_pack_str(&pk, "timeout_ms"); /* the child is killed past this */
    sx_pack_int(&pk, RECEIPT_TIMEOUT_MS);
    if (pk.err != 0)
        return pk.err;
    s->phase = ORDER_RECEIPT;
    sx_wait(out);
    return sx_yield(out, SX_CMD_EXEC, TAG_RECEIPT, sx_pack_payload(&pk));
}

/* The payment's answer: go on to the receipt, retry after a backoff, or
 * give up. */
static int order_on_payment(order_state *s, const sx_event *ev,
                            sx_step_output *out)
{
    if (ev->error == 0) {
        /* Paid: the child's result is its transaction id. */
        sx_unpack u;
        sx_unpack_init(&u, ev->data);
        if (unpack_text(&u, s->txn, sizeof(s->txn)) != 0) {
            sx_fail(out, "payment: the result is not a transaction id");
            return 0;
        }
        s->reason[0] = '\0';
        return order_receipt(s, out);
    }
    /* Remember why, for the result and for the log. error_msg is only
     * valid during this step: copy it. */
    snprintf(s->reason, sizeof(s->reason), "%s",
             ev->error_msg != NULL ? ev->error_msg : sx_strerror(ev->error));
    if (ev->error == SX_ETIMEDOUT) {
        /* The per-yield timeout: the payment did not answer in time. We
         * cannot tell whether the customer was charged, so retrying could
         * charge twice: give up and let a person look. */
        snprintf(s->reason, sizeof(s->reason),
                 "no answer from payment in %d ms", PAYMENT_TIMEOUT_MS);
        return order_finish(s, out, "timed out");
    }
    if (s->attempts >= MAX_ATTEMPTS)
        return order_finish(s, out, "failed");
    /* Back off before the next try: 10, 20, 40 ms ... */
    uint8_t buf[SX_PAYLOAD_INT_MAX];
    int64_t ms = (int64_t)BACKOFF_FIRST_MS << (s->attempts - 1);
    s->phase = ORDER_BACKOFF;
    sx_wait(out);
    return sx_yield(out, SX_CMD_SLEEP, TAG_BACKOFF, sx_payload_int(buf, ms));
}

/* The receipt subprocess's answer: {"status", "signal", "stdout",
 * "stderr"}. A non-zero exit is not an error of the command: check it. */
static int order_on_receipt(order_state *s, const sx_event *ev,
                            sx_step_output *out)
{
    char msg[160];
    if (ev->error != 0) {
        /* Could not start /bin/sh, output too long, timeout_ms passed... */
        snprintf(msg, sizeof(msg), "receipt: %s",
                 ev->error_msg != NULL ? ev->error_msg
                                       : sx_strerror(ev->error));
        sx_fail(out, msg);
        return 0;
    }
    int64_t status = -1;
    const void *text = NULL;
    size_t len = 0;
    sx_unpack u;
    uint32_t n = 0;
    sx_unpack_init(&u, ev->data);
    if (sx_unpack_map(&u, &n) != 0)
        n = 0;
    for (uint32_t i = 0; i < n; i++) {
        char key[16];
        if (unpack_text(&u, key, sizeof(key)) != 0)
            break;
        if (strcmp(key, "status") == 0 &&
            sx_unpack_type(&u) == SX_MP_INT) /* nil when killed by a signal */
            sx_unpack_int(&u, &status);
        else if (strcmp(key, "stdout") == 0)
            sx_unpack_bin(&u, &text, &len);
        else
            sx_unpack_skip(&u);
    }
    if (status != 0 || text == NULL || len >= sizeof(s->receipt)) {
        sx_fail(out, "receipt: the subprocess did not exit 0 with a receipt");
        return 0;
    }
    memcpy(s->receipt, text, len);
    s->receipt[len] = '\0';
    return order_finish(s, out, "paid");
}

/* Every step: look at the batch of events (answers and messages), then act
 * on the phase. */
static int order_step(void *st, const sx_event *ev, size_t n_ev,
                      sx_step_output *out)
{
    order_state *s = st;
    const sx_event *answer = NULL;
    for (size_t i = 0; i < n_ev; i++) {
        if (ev[i].type == SX_EVENT_YIELD_COMPLETE) {
            answer = &ev[i]; /* our single yield in flight answered */
        } else if (strcmp(ev[i].topic, SX_TOPIC_CANCEL) == 0) {
            /* Soft cancel (sx_engine_cancel, or sx_engine_stop): finish
             * now. The engine cancels what we were waiting for (a sleep,
             * the receipt subprocess); a payment child sees us exit. */
            const char *why = "";
            size_t len = 0;
            sx_unpack u;
            sx_unpack_init(&u, ev[i].data); /* the reason: a string */
            sx_unpack_str(&u, &why, &len);
            snprintf(s->reason, sizeof(s->reason), "%.*s", (int)len, why);
            return order_finish(s, out, "cancelled");
        }
        /* Any other message: not for us; ignore it. */
    }

    switch (s->phase) {
    case ORDER_START:
        return order_pay(s, out); /* first step: no events yet */
    case ORDER_PAYING:
        if (answer != NULL && answer->tag == TAG_PAYMENT)
            return order_on_payment(s, answer, out);
        break;
    case ORDER_BACKOFF:
        if (answer != NULL && answer->tag == TAG_BACKOFF) {
            if (answer->error != 0)
                return answer->error; /* a sleep does not fail; fail if so */
            return order_pay(s, out); /* the next attempt */
        }
        break;
    case ORDER_RECEIPT:
        if (answer != NULL && answer->tag == TAG_RECEIPT)
            return order_on_receipt(s, answer, out);
        break;
    }
    /* Woken by something else (an ignored message): our yield is still in
     * flight, so wait for it. Without sx_wait the status would be
     * CONTINUE, and a step that writes no yield runs again at once. */
    sx_wait(out);
    return 0;
}

static const char *const order_methods[] = { "run", NULL };
static const sx_process_type order_type = { .name = "order",
                                            .state_size = sizeof(order_state),
                                            .init = order_init,
                                            .step = order_step,
                                            .methods = order_methods };

/* ======================================================================== */
/* main: submit one order per path, wait for each, check the outcomes       */
/* ======================================================================== */

typedef struct {
    const char *id;
    int64_t cents;
    const char *card;
    int cancel;         /* main cancels it 50 ms after submitting it */
    const char *want;   /* the status it must finish with            */
    int64_t want_tries; /* the attempts it must report; -1: any      */
} scenario;

static const scenario scenarios[] = {
    { "A-1001", 2500, "good", 0, "paid", 1 },
    { "A-1002", 1999, "flaky", 0, "paid", FLAKY_FAILURES + 1 },
    { "A-1003", 4200, "down", 0, "failed", MAX_ATTEMPTS },
    { "A-1004", 999, "hung", 0, "timed out", 1 },
    /* Cancelled while its payment hangs: 1 attempt (0 on a machine so
     * busy that the cancel overtakes the order's first step). */
    { "A-1005", 5000, "hung", 1, "cancelled", -1 },
};
enum { N_ORDERS = sizeof(scenarios) / sizeof(scenarios[0]) };

/* The order's result map, read back into C. */
typedef struct {
    char order[32], status[16], receipt[128], reason[128];
    int64_t attempts;
} outcome;

static int read_outcome(sx_payload v, outcome *o)
{
    sx_unpack u;
    uint32_t n;
    memset(o, 0, sizeof(*o));
    o->attempts = -1;
    sx_unpack_init(&u, v);
    if (sx_unpack_map(&u, &n) != 0)
        return SX_EPROTO;
    for (uint32_t i = 0; i < n; i++) {
        char key[16];
        int rc = unpack_text(&u, key, sizeof(key));
        if (rc != 0)
            return rc;
        if (sx_unpack_type(&u) == SX_MP_NIL)
            rc = sx_unpack_nil(&u); /* receipt or reason left "" */
        else if (strcmp(key, "order") == 0)
            rc = unpack_text(&u, o->order, sizeof(o->order));
        else if (strcmp(key, "status") == 0)
            rc = unpack_text(&u, o->status, sizeof(o->status));
        else if (strcmp(key, "attempts") == 0)
            rc = sx_unpack_int(&u, &o->attempts);
        else if (strcmp(key, "receipt") == 0)
            rc = unpack_text(&u, o->receipt, sizeof(o->receipt));
        else if (strcmp(key, "reason") == 0)
            rc = unpack_text(&u, o->reason, sizeof(o->reason));
        else
            rc = sx_unpack_skip(&u);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Checks one finished order against its scenario and prints it. Returns 0
 * when it is as expected. */
static int check_order(const scenario *sc, sx_pid pid, const sx_result *r)
{
    char pidtext[SX_PID_TEXT_MAX];
    sx_pid_format(pid, pidtext, sizeof(pidtext));
    if (r->error != 0) { /* the order failed as a process (sx_fail) */
        printf("%s %s: process error %s: %s\n", sc->id, pidtext,
               sx_errname(r->error), r->error_msg ? r->error_msg : "");
        return 1;
    }
    outcome o;
    if (read_outcome(r->value, &o) != 0) {
        printf("%s %s: unreadable result\n", sc->id, pidtext);
        return 1;
    }
    /* A paid order shows its receipt, any other its reason. */
    printf("%s %s card %-5s -> %-9s after %" PRId64 " attempt(s): %s\n",
           o.order, pidtext, sc->card, o.status, o.attempts,
           o.receipt[0] ? o.receipt : o.reason);

    /* What this scenario must give. A paid order's receipt names the
     * attempt that went through: "receipt A-1002 19.99 txn-A-1002-3". */
    char want_receipt[128] = "";
    if (strcmp(sc->want, "paid") == 0)
        snprintf(want_receipt, sizeof(want_receipt),
                 "receipt %s %" PRId64 ".%02" PRId64 " txn-%s-%" PRId64, sc->id,
                 sc->cents / 100, sc->cents % 100, sc->id, o.attempts);
    int ok = strcmp(o.order, sc->id) == 0 && strcmp(o.status, sc->want) == 0 &&
             strcmp(o.receipt, want_receipt) == 0 &&
             (sc->want_tries >= 0 ? o.attempts == sc->want_tries
                                  : o.attempts >= 0 && o.attempts <= 1);
    if (!ok)
        printf("  ^ expected \"%s\" after %" PRId64 " attempt(s), receipt "
               "\"%s\"\n",
               sc->want, sc->want_tries, want_receipt);
    return ok ? 0 : 1;
}

/* Waits until no process is left (the payments of the hung orders stop
 * when they see their order exit). Returns 0, or 1 after timeout_ms. */
static int wait_all_finished(sx_engine *e, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited++) {
        sx_engine_stats st;
        if (sx_engine_stats_get(e, &st, NULL, 0) == 0 && st.live == 0)
            return 0;
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL); /* 1 ms */
    }
    return 1;
}

int main(void)
{
    /* 1. An engine with the default configuration (one worker per CPU, one
     *    libuv loop), the two process types, started. */
    sx_engine *e;
    int rc = sx_engine_new(NULL, &e);
    if (rc != 0) {
        fprintf(stderr, "stepx-order: %s\n", sx_strerror(rc));
        return 1;
    }
    if ((rc = sx_engine_register(e, &order_type)) != 0 ||
        (rc = sx_engine_register(e, &payment_type)) != 0 ||
        (rc = sx_engine_start(e)) != 0) {
        fprintf(stderr, "stepx-order: engine set-up: %s\n", sx_strerror(rc));
        sx_engine_free(e);
        return 1;
    }

    /* 2. Submit every order; they run concurrently. Inputs are msgpack
     *    values, one payload each; submit copies them. */
    sx_pid pids[N_ORDERS];
    int bad = 0;
    for (size_t i = 0; i < N_ORDERS; i++) {
        const scenario *sc = &scenarios[i];
        uint8_t b0[48], b1[SX_PAYLOAD_INT_MAX], b2[24];
        sx_pack id, card;
        sx_pack_init_fixed(&id, b0, sizeof(b0));
        sx_pack_init_fixed(&card, b2, sizeof(b2));
        sx_pack_str(&id, sc->id);
        sx_pack_str(&card, sc->card);
        sx_payload in[3] = { sx_pack_payload(&id),
                             sx_payload_int(b1, sc->cents),
                             sx_pack_payload(&card) };
        rc = sx_engine_submit(e, "order", "run", in, 3, &pids[i]);
        if (rc != 0) {
            fprintf(stderr, "stepx-order: submit %s: %s\n", sc->id,
                    sx_strerror(rc));
            pids[i] = SX_PID_NONE;
            bad++;
        }
    }

    /* 3. A customer changes their mind: once the orders have had time to
     *    start their payments, cancel the ones marked so (a soft cancel:
     *    the order gets an @cancel message and decides what to do). */
    nanosleep(&(struct timespec){ 0, 50 * 1000000 }, NULL); /* 50 ms */
    for (size_t i = 0; i < N_ORDERS; i++) {
        if (!scenarios[i].cancel || sx_pid_eq(pids[i], SX_PID_NONE))
            continue;
        rc = sx_engine_cancel(e, pids[i], "customer changed their mind");
        if (rc != 0) {
            fprintf(stderr, "stepx-order: cancel %s: %s\n", scenarios[i].id,
                    sx_strerror(rc));
            bad++;
        }
    }

    /* 4. Wait for each order's outcome (generous limit: the slowest path
     *    takes about PAYMENT_TIMEOUT_MS) and check it. */
    for (size_t i = 0; i < N_ORDERS; i++) {
        sx_result r;
        if (sx_pid_eq(pids[i], SX_PID_NONE))
            continue;
        rc = sx_engine_wait(e, pids[i], 30000, &r);
        if (rc != 0) {
            printf("%s -> wait: %s\n", scenarios[i].id, sx_strerror(rc));
            bad++;
            continue;
        }
        bad += check_order(&scenarios[i], pids[i], &r);
        sx_result_free(&r); /* the result's value and message are ours */
    }

    /* 5. No payment is left hanging: each one watched its order. */
    if (wait_all_finished(e, 5000) != 0) {
        printf("a payment process is still running after its order ended\n");
        bad++;
    }

    /* 6. Stop (cancel what is left, wait up to 1 s, terminate the rest)
     *    and free. */
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
    printf(bad ? "stepx-order: FAILED\n" : "stepx-order: all checks passed\n");
    return bad ? 1 : 0;
}

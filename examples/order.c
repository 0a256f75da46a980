/* examples/order.c — stepx-order: an order workflow to copy from, written
 * with the authoring helpers (docs/WORKFLOW.md walks through it; the same
 * workflow on the bare contract is examples/order_raw.c).
 *
 * Two process types:
 *   "order"   — the workflow: charges the customer through a "payment"
 *               child, retried with backoff while the gateway fails, gives
 *               up when the payment does not answer in time, runs a
 *               subprocess that prints a receipt, and finishes with a map
 *               {order, status, receipt, reason}.
 *   "payment" — a stand-in for a payment gateway that succeeds or fails as
 *               its test card says.
 *
 * main() runs one order per path and checks each outcome; it exits 1 if one
 * is not what its scenario expects, so the tests run it as a test.
 *
 * Threads: init and step run on the engine's workers; main runs on the
 * program's main thread and uses the engine API only. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <stepx/stepx.h>

enum {
    RETRIES = 3,               /* payment attempts after the first        */
    PAYMENT_TIMEOUT_MS = 1000, /* the whole payment, retries included     */
    GATEWAY_MS = 5,            /* how long the simulated gateway takes    */
    HUNG_GATEWAY_MS = 600000,  /* the "hung" card: no answer in time      */
    FLAKY_FAILURES = 2         /* the "flaky" card fails this many times  */
};
enum { TAG_PAYMENT = 1, TAG_RECEIPT, TAG_GATEWAY };

/* ---- the gateway's memory: charges asked per order ---------------------- */

static pthread_mutex_t gw_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char order[32];
    int calls;
} gw[16];

/* Counts one more charge of order (add 1) or reads the count (add 0). */
static int gateway_calls(const char *order, int add)
{
    pthread_mutex_lock(&gw_mu);
    int i = 0;
    while (i < 15 && gw[i].order[0] && strcmp(gw[i].order, order) != 0)
        i++;
    snprintf(gw[i].order, sizeof gw[i].order, "%s", order);
    int n = gw[i].calls += add;
    pthread_mutex_unlock(&gw_mu);
    return n;
}

/* ---- payment: charge(order id, card) ------------------------------------ */

typedef struct {
    char order[32], card[16];
    bool started;
} payment;

static int payment_init(void *st, const sx_init_ctx *ctx, const char *method,
                        const sx_payload *in, size_t n)
{
    payment *p = st;
    if (n != 2 || sx_payload_get_str(in[0], p->order, sizeof p->order) ||
        sx_payload_get_str(in[1], p->card, sizeof p->card) ||
        (strcmp(p->card, "good") != 0 && strcmp(p->card, "flaky") != 0 &&
         strcmp(p->card, "down") != 0 && strcmp(p->card, "hung") != 0))
        return sx_init_error(ctx, SX_EINVAL,
                             "payment.%s: want an order id and a card (good, "
                             "flaky, down or hung)",
                             method);
    return 0;
}

static int payment_step(void *st, const sx_event *ev, size_t n,
                        sx_step_output *out)
{
    payment *p = st;
    sx_batch b;
    const sx_event *e;
    sx_batch_init(&b, ev, n, &p->started, out);
    for (sx_event_kind k; (k = sx_batch_next(&b, &e)) != SX_EV_END;) {
        if (k == SX_EV_CANCEL) {
            sx_cancelled_by(out, e);
        } else if (k == SX_EV_START) { /* call the "gateway" */
            int calls = gateway_calls(p->order, 1);
            bool hung = strcmp(p->card, "hung") == 0;
            bool fail =
                strcmp(p->card, "down") == 0 ||
                (strcmp(p->card, "flaky") == 0 && calls <= FLAKY_FAILURES);
            sx_yieldf(out, SX_CMD_SLEEP, fail ? 0 : TAG_GATEWAY, "i",
                      hung ? HUNG_GATEWAY_MS : GATEWAY_MS);
        } else if (k == SX_EV_COMPLETE && e->tag == 0) {
            sx_fail(out, "gateway unavailable");
        } else if (k == SX_EV_COMPLETE) { /* approved: a transaction id */
            char txn[64];
            snprintf(txn, sizeof txn, "txn-%s-%d", p->order,
                     gateway_calls(p->order, 0));
            sx_donef(out, "s", txn);
        }
    }
    return sx_batch_wait(&b);
}

/* ---- order: run(order id, amount in cents, card) ------------------------ */

typedef struct {
    char id[32], amount[24], card[16];
    char txn[64], receipt[128];
    bool started;
} order;

static int order_init(void *st, const sx_init_ctx *ctx, const char *method,
                      const sx_payload *in, size_t n)
{
    order *o = st;
    int64_t cents;
    if (n != 3 || sx_payload_get_str(in[0], o->id, sizeof o->id) ||
        sx_payload_get_int(in[1], &cents) || cents <= 0 ||
        sx_payload_get_str(in[2], o->card, sizeof o->card))
        return sx_init_error(ctx, SX_EINVAL,
                             "order.%s: want an order id, an amount in cents "
                             "(> 0) and a card",
                             method);
    snprintf(o->amount, sizeof o->amount, "%" PRId64 ".%02" PRId64, cents / 100,
             cents % 100);
    return 0;
}

/* DONE with {order, status, receipt, reason} (nil when empty). */
static void order_finish(order *o, sx_step_output *out, const char *status,
                         const char *reason)
{
    sx_donef(out, "{s:s, s:s, s:s, s:s}", "order", o->id, "status", status,
             "receipt", o->receipt[0] ? o->receipt : NULL, "reason", reason);
}

/* The payment: a child retried with backoff (10, 20, 40 ms) while it
 * fails, within PAYMENT_TIMEOUT_MS in all; the order's end ends it. */
static void order_pay(order *o, sx_step_output *out)
{
    uint8_t buf[256];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof buf);
    sx_pack_fmt(&pk, "[s, s, [s, s], {s:s, s:{s:i, s:i, s:i}}]", "payment",
                "charge", o->id, o->card, "scope", "terminate", "retry",
                "max_restarts", RETRIES, "backoff_min_ms", 10, "backoff_max_ms",
                40);
    sx_yield_timeout(out, SX_CMD_SPAWN_WAIT, TAG_PAYMENT, sx_pack_payload(&pk),
                     PAYMENT_TIMEOUT_MS);
}

/* The receipt: a subprocess; argv goes to the program as is, "$1".."$3"
 * in the script. check: a non-zero exit is an error. */
static void order_receipt(order *o, sx_step_output *out)
{
    sx_yieldf(out, SX_CMD_EXEC, TAG_RECEIPT, "{s:[s,s,s,s,s,s,s], s:b, s:i}",
              "argv", "/bin/sh", "-c",
              "printf 'receipt %s %s %s' \"$1\" \"$2\" \"$3\"", "sh", o->id,
              o->amount, o->txn, "check", 1, "max_output", 127);
}

static int order_step(void *st, const sx_event *ev, size_t n,
                      sx_step_output *out)
{
    order *o = st;
    sx_batch b;
    const sx_event *e;
    sx_exec_result r;
    char why[160];
    sx_batch_init(&b, ev, n, &o->started, out);
    for (sx_event_kind k; (k = sx_batch_next(&b, &e)) != SX_EV_END;) {
        if (k == SX_EV_CANCEL) {
            sx_str s = sx_get_str(e->data, NULL);
            snprintf(why, sizeof why, "%.*s", (int)s.len, s.ptr ? s.ptr : "");
            order_finish(o, out, "cancelled", why);
        } else if (k == SX_EV_START) {
            order_pay(o, out);
        } else if (k != SX_EV_COMPLETE) {
            continue; /* a message that is not for us */
        } else if (e->tag == TAG_PAYMENT && e->error == SX_ETIMEDOUT) {
            /* Charged or not? Unknown: no retry, a person looks. */
            snprintf(why, sizeof why, "no answer from payment in %d ms",
                     PAYMENT_TIMEOUT_MS);
            order_finish(o, out, "timed out", why);
        } else if (e->error != 0) {
            order_finish(o, out, "failed", e->error_msg);
        } else if (e->tag == TAG_PAYMENT) {
            sx_get_strcpy(e->data, NULL, o->txn, sizeof o->txn);
            order_receipt(o, out);
        } else if (sx_exec_result_get(e->data, &r) == 0) {
            snprintf(o->receipt, sizeof o->receipt, "%.*s", (int)r.out.len,
                     r.out.ptr);
            order_finish(o, out, "paid", NULL);
        }
    }
    return sx_batch_wait(&b);
}

static const char *const payment_methods[] = { "charge", NULL };
static const char *const order_methods[] = { "run", NULL };
static const sx_process_type payment_type = {
    .name = "payment",
    .state_size = sizeof(payment),
    .init = payment_init,
    .step = payment_step,
    .methods = payment_methods,
};
static const sx_process_type order_type = {
    .name = "order",
    .state_size = sizeof(order),
    .init = order_init,
    .step = order_step,
    .methods = order_methods,
};

/* ---- main: one order per path, each outcome checked ------------------- */

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
    { "A-1003", 4200, "down", 0, "failed", RETRIES + 1 },
    { "A-1004", 999, "hung", 0, "timed out", 1 },
    /* Cancelled while its payment hangs: 1 attempt (0 on a machine so
     * busy that the cancel overtakes the order's first step). */
    { "A-1005", 5000, "hung", 1, "cancelled", -1 },
};
enum { N_ORDERS = sizeof(scenarios) / sizeof(scenarios[0]) };

/* The order's result map, read back into C. */
typedef struct {
    char order[32], status[16], receipt[128], reason[128];
    int64_t attempts; /* the gateway's count of charges for the order */
} outcome;

static int read_outcome(sx_payload v, outcome *o)
{
    memset(o, 0, sizeof(*o));
    if (sx_get_strcpy(v, "order", o->order, sizeof o->order) != 0 ||
        sx_get_strcpy(v, "status", o->status, sizeof o->status) != 0)
        return SX_EPROTO;
    /* nil (absent) leaves them "" */
    sx_get_strcpy(v, "receipt", o->receipt, sizeof o->receipt);
    sx_get_strcpy(v, "reason", o->reason, sizeof o->reason);
    o->attempts = gateway_calls(o->order, 0);
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

/* Waits until no process is left (the payments of the hung orders end
 * with their orders). Returns 0, or 1 after timeout_ms. */
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

    /* 5. No payment is left hanging: the order's end ended it. */
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

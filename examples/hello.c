/* examples/hello.c — the README's example, complete: a process type with two
 * methods ("count" and "greet"), submitted through the engine API, its
 * results printed. Built and run by the tests (suite "unit"). */
#include <stdio.h>
#include <string.h>

#include <stepx/stepx.h>

typedef struct {
    int64_t n, left;
    int greet;
} hello_state;

static int hello_init(void *st, const sx_init_ctx *ctx, const char *method,
                      const sx_payload *in, size_t n_in)
{
    (void)ctx;
    hello_state *s = st;
    s->greet = strcmp(method, "greet") == 0;
    if (!s->greet && strcmp(method, "count") != 0)
        return SX_EUNKNOWN_METHOD;
    if (!s->greet && (n_in != 1 || sx_payload_get_int(in[0], &s->n) != 0))
        return SX_EINVAL;
    s->left = s->n;
    return 0;
}

static int hello_step(void *st, const sx_event *ev, size_t n_ev,
                      sx_step_output *out)
{
    (void)ev, (void)n_ev;
    hello_state *s = st;
    uint8_t buf[64];
    sx_pack pk;
    sx_pack_init_fixed(&pk, buf, sizeof(buf));
    if (s->greet) {
        sx_pack_str(&pk, "hello, world");
        sx_done(out, sx_pack_payload(&pk));
    } else if (s->left-- > 0) {
        sx_yield(out, SX_CMD_NOOP, 1, (sx_payload){ NULL, 0 }); /* one turn */
    } else {
        sx_pack_int(&pk, s->n);
        sx_done(out, sx_pack_payload(&pk));
    }
    return 0;
}

static const sx_process_type hello = { .name = "hello",
                                       .state_size = sizeof(hello_state),
                                       .init = hello_init,
                                       .step = hello_step };

int main(void)
{
    sx_engine *e;
    uint8_t ten[SX_PAYLOAD_INT_MAX];
    sx_payload in = sx_payload_int(ten, 10);
    sx_pid a, b;
    sx_result ra, rb;
    if (sx_engine_new(NULL, &e) != 0 || sx_engine_register(e, &hello) != 0 ||
        sx_engine_start(e) != 0 ||
        sx_engine_submit(e, "hello", "count", &in, 1, &a) != 0 ||
        sx_engine_submit(e, "hello", "greet", NULL, 0, &b) != 0 ||
        sx_engine_wait(e, a, -1, &ra) != 0 ||
        sx_engine_wait(e, b, -1, &rb) != 0)
        return 1;
    int64_t count = -1;
    char text[64] = "";
    sx_payload_get_int(ra.value, &count);
    sx_payload_get_str(rb.value, text, sizeof(text));
    printf("count -> %lld after %llu steps\ngreet -> \"%s\"\n",
           (long long)count, (unsigned long long)ra.steps, text);
    int ok = ra.error == 0 && count == 10 && ra.steps == 11 &&
             strcmp(text, "hello, world") == 0;
    sx_result_free(&ra);
    sx_result_free(&rb);
    sx_engine_stop(e, 1000);
    sx_engine_free(e);
    return ok ? 0 : 1;
}

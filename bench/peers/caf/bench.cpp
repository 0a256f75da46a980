// bench/peers/caf/bench.cpp: the C++ Actor Framework peer of the stepx
// benchmark suite (see docs/BENCHMARKS.md). Written against libcaf-dev 0.17
// (Debian 12: 0.17.6), event-based actors, scheduler threads = cores.
//
//   g++ -O2 -std=c++17 -o stepx-peer-caf bench.cpp -lcaf_core -lpthread
//   stepx-peer-caf <skynet|pingpong|ring|fanin|spawnidle> <n>
//
// Prints one line, the same as bench/stepx-bench:
//
//   bench=<name> runtime=caf n=<n> secs=<s> ns_per_op=<ns>
//     ops_per_sec=<ops> ok=<1|0> threads=<k>
//
// and nothing else on stdout. Each workload has the same program shape as
// its stepx twin in bench/stepx_bench.c and checks its own result; ok=1 only
// when the check passed.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

using namespace caf;

using next_atom = atom_constant<atom("next")>;
using seen_atom = atom_constant<atom("seen")>;
using sent_atom = atom_constant<atom("sent")>;
using got_atom = atom_constant<atom("got")>;
using go_atom = atom_constant<atom("go")>;

namespace
{

// ---- skynet: each actor spawns 10 children and sums the 10 numbers they
// send back; a leaf sends its number. ----

struct sky_state {
    int64_t sum = 0;
    int got = 0;
};

behavior skynet(stateful_actor<sky_state> *self, actor parent, int64_t num,
                int64_t size)
{
    if (size == 1) {
        self->send(parent, num);
        return {}; // an empty behavior: the actor finishes
    }
    int64_t sub = size / 10;
    for (int64_t i = 0; i < 10; i++)
        self->spawn(skynet, actor_cast<actor>(self), num + i * sub, sub);
    return {
        [=](int64_t v) {
            self->state.sum += v;
            if (++self->state.got == 10) {
                self->send(parent, self->state.sum);
                self->quit();
            }
        },
    };
}

// ---- ring / pingpong: m actors in a ring pass a token n hops. The token
// starts at n-1 and each hop decrements it; whoever sees 0 sends a stop (-1)
// around once more and finishes; each actor that sees the stop forwards it
// and finishes (as in stepx_bench.c's ring_step). Every actor reports how
// many messages it saw: n tokens + m-1 stops. ----

struct ring_state {
    actor next;
    int64_t seen = 0;
};

behavior ring_node(stateful_actor<ring_state> *self, actor parent)
{
    return {
        [=](next_atom, actor next) { self->state.next = std::move(next); },
        [=](int64_t t) {
            self->state.seen++;
            if (t <= 0) {
                self->send(self->state.next, int64_t{ -1 });
                self->send(parent, seen_atom::value, self->state.seen);
                self->quit();
                return;
            }
            self->send(self->state.next, t - 1);
        },
    };
}

bool ring(actor_system &sys, int64_t m, int64_t n)
{
    scoped_actor self{ sys };
    std::vector<actor> p;
    for (int64_t i = 0; i < m; i++)
        p.push_back(sys.spawn(ring_node, actor_cast<actor>(self)));
    for (int64_t i = 0; i < m; i++)
        self->send(p[i], next_atom::value, p[(i + 1) % m]);
    self->send(p[0], n - 1);
    int64_t total = 0;
    for (int64_t i = 0; i < m; i++)
        self->receive([&](seen_atom, int64_t s) { total += s; });
    return total == n + m - 1;
}

// ---- fanin: 2 producers each send n/2 messages to one consumer, which
// counts them; each producer reports how many it sent. ----

struct sink_state {
    int64_t got = 0;
};

behavior sink(stateful_actor<sink_state> *self, actor parent, int64_t n)
{
    return {
        [=](int64_t) {
            if (++self->state.got == n) {
                self->send(parent, got_atom::value, self->state.got);
                self->quit();
            }
        },
    };
}

behavior source(event_based_actor *self, actor parent, actor to, int64_t k)
{
    int64_t i = 0;
    for (; i < k; i++)
        self->send(to, i);
    self->send(parent, sent_atom::value, i);
    return {};
}

bool fanin(actor_system &sys, int64_t n)
{
    scoped_actor self{ sys };
    auto me = actor_cast<actor>(self);
    auto c = sys.spawn(sink, me, n);
    sys.spawn(source, me, c, n - n / 2);
    sys.spawn(source, me, c, n / 2);
    int64_t sent = 0, got = 0;
    for (int i = 0; i < 3; i++)
        self->receive([&](sent_atom, int64_t k) { sent += k; },
                      [&](got_atom, int64_t k) { got = k; });
    return sent == n && got == n;
}

// ---- spawnidle: n actors that each wait for one message; then one message
// each; wait for all to finish. Finishing counts itself in a shared counter
// (as stepx's finished count and Go's WaitGroup); the main thread polls it
// every 20 us. ----

std::atomic<int64_t> idle_done{ 0 };

behavior idle_actor(event_based_actor *self)
{
    return {
        [=](go_atom) {
            idle_done.fetch_add(1, std::memory_order_relaxed);
            self->quit();
        },
    };
}

bool spawnidle(actor_system &sys, int64_t n)
{
    std::vector<actor> p;
    p.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++)
        p.push_back(sys.spawn(idle_actor));
    for (auto &a : p)
        anon_send(a, go_atom::value);
    while (idle_done.load(std::memory_order_relaxed) < n)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    return idle_done.load() == n;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 3) {
        std::fprintf(stderr,
                     "usage: stepx-peer-caf <skynet|pingpong|ring|fanin|"
                     "spawnidle> <n>\n");
        return 2;
    }
    std::string name = argv[1];
    int64_t n = std::atoll(argv[2]);
    if (n <= 0) {
        std::fprintf(stderr, "stepx-peer-caf: n must be positive\n");
        return 2;
    }
    if (name != "skynet" && name != "pingpong" && name != "ring" &&
        name != "fanin" && name != "spawnidle") {
        std::fprintf(stderr, "stepx-peer-caf: unknown workload '%s'\n",
                     name.c_str());
        return 2;
    }
    size_t threads = std::thread::hardware_concurrency();
    actor_system_config cfg;
    cfg.set("scheduler.max-threads", threads);
    bool ok = false;
    double secs = 0;
    {
        actor_system sys{ cfg };
        auto t0 = std::chrono::steady_clock::now();
        if (name == "skynet") {
            scoped_actor self{ sys };
            self->spawn(skynet, actor_cast<actor>(self), int64_t{ 0 }, n);
            self->receive([&](int64_t sum) { ok = sum == n * (n - 1) / 2; });
        } else if (name == "pingpong") {
            ok = ring(sys, 2, n);
        } else if (name == "ring") {
            ok = ring(sys, 503, n);
        } else if (name == "fanin") {
            ok = fanin(sys, n);
        } else {
            ok = spawnidle(sys, n);
        }
        secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count();
    }
    double ns = secs * 1e9 / static_cast<double>(n);
    std::printf("bench=%s runtime=caf n=%lld secs=%.6f ns_per_op=%.2f "
                "ops_per_sec=%.0f ok=%d threads=%zu\n",
                name.c_str(), static_cast<long long>(n), secs, ns, 1e9 / ns,
                ok ? 1 : 0, threads);
    return ok ? 0 : 1;
}

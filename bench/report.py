#!/usr/bin/python3
"""bench/report.py: turns bench/run.sh's raw lines into docs/BENCHMARKS.md.

    python3 bench/report.py RAW META [ICOUNT] > OUT
    python3 bench/report.py --from DIR > OUT
        # DIR/raw.tsv, DIR/meta.txt and, when they are there,
        # DIR/icount.tsv, DIR/icount-shared.tsv and DIR/curves.tsv

bench/run.sh calls the second form after a run. Either rebuilds the report
from stored raw lines without running anything: a full run keeps its raw
lines in bench/results/, so

    python3 bench/report.py --from bench/results > docs/BENCHMARKS.md

regenerates the committed report (after a change to this script, say).

raw.tsv: one run a line, tab-separated: workload (spawnidle0 = the spawnidle
baseline with n=1), runtime, round, exit code, peak RSS in kB, CPU seconds
(user + sys; empty when /usr/bin/time wrote none), and the program's own
line ("bench=... runtime=... ok=1 key=value ..."). A file of six columns,
without the CPU seconds, reads too: its runs have no CPU figure.
icount.tsv: the engine's instructions per operation (bench/icount.sh
--diff), one workload a line: workload, n, n2, instructions at n, at n2,
per operation, counts per size (each size's figure is their median).
icount-shared.tsv: the same for stepx-bench-shared, the program linked
against the shared library (the instructions table's last column).
curves.tsv: bench/curves.sh's own run (docs/CURVES.md), from which the
summary's idle 10^7 row is read (its commit and date are named there).
meta.txt: key=value lines about the machine, the build and the run.

The report is the figures of one run and what they mean (and the idle
10^7 row of the curves' run); the research notes
behind them (profiles, A/B measurements, what was tried) are
bench/FINDINGS.md, which this script does not read. Standard library only.
"""
import os
import statistics
import sys

# name: (key in the line, unit, better, how to print, what it is)
FIGURES = {
    "skynet": ("secs", "s", "lower", "{:.3f}", "seconds"),
    "pingpong": ("ns_per_op", "ns", "lower", "{:.1f}", "ns per message"),
    "ring": ("ns_per_op", "ns", "lower", "{:.1f}", "ns per hop"),
    "fanin": ("ops_per_sec", "M/s", "higher", "{:.2f}", "M messages per second"),
    "spawnidle": ("secs", "s", "lower", "{:.3f}", "seconds"),
    "submit": ("ops_per_sec", "M/s", "higher", "{:.2f}", "M submits per second"),
    "yield": ("ns_per_op", "ns", "lower", "{:.1f}", "ns per yield round trip"),
    "wake": ("p50_us", "µs", "lower", "{:.1f}", "p50 µs from send to step"),
    "idle": ("cpu_secs", "s", "lower", "{:.4f}", "CPU seconds over the idle time"),
    "timers": ("secs", "s", "lower", "{:.3f}",
               "seconds from the first submit to the last finish"),
    "relay": ("ops_per_sec", "k/s", "higher", "{:.1f}", "k jobs per second"),
    "relay1": ("ops_per_sec", "k/s", "higher", "{:.1f}", "k jobs per second"),
    "relay-durable": ("ops_per_sec", "k/s", "higher", "{:.1f}",
                      "k durable jobs per second"),
    "recover": ("secs", "s", "lower", "{:.3f}",
                "seconds from sx_engine_start until every stored job is "
                "spawned again"),
    "checkpoint": ("added_p50_us", "µs", "lower", "{:.0f}",
                   "µs a checkpoint adds to a step, p50, 64 jobs at once"),
    "xpingpong": ("p50_us", "µs", "lower", "{:.1f}",
                  "p50 µs per round trip"),
    "xfanin": ("ops_per_sec", "M/s", "higher", "{:.3f}",
               "M messages per second into one sink"),
    "xdetect": ("detect_ms", "ms", "lower", "{:.0f}",
                "ms from the kill -9 of a node to the other's down line"),
}
# Targets: workload -> the conditions a run must meet, all of them. A
# condition is (what, op, bound, text), what being
#   "ratio"           stepx's median over the best peer's median of the same
#                     figure: the best of Go, Erlang, CAF and Tokio in the
#                     same run (AGAINST names the runtime for the cluster's
#                     rows); text None: target_text writes it;
#   "figure"          stepx's median, in the unit of FIGURES;
#   "bytes_per_proc"  spawnidle's bytes per idle process (bytes_per_proc);
#   any other word    the median of that key of stepx's line (KEY_TEXT says
#                     how the summary shows it);
# and text is how the summary's target cell says it.
TARGETS = {
    "skynet": [("ratio", "<=", 0.3, None)],
    "pingpong": [("ratio", "<=", 0.4, None)],
    "ring": [("ratio", "<=", 0.4, None)],
    "fanin": [("ratio", ">=", 3.0, None)],
    "spawnidle": [("ratio", "<=", 0.25, None),
                  ("bytes_per_proc", "<=", 128.0, "≤ 128 B per idle process")],
    "submit": [("figure", ">=", 15.0, "≥ 15 M per second")],
    "yield": [("figure", "<=", 35.0, "≤ 35 ns")],
    "wake": [("figure", "<=", 15.0, "p50 ≤ 15 µs")],
    "idle": [("figure", "<=", 0.01, "≤ 0.01 CPU s over 5 s")],
    "timers": [("figure", "<=", 0.06, "≤ 0.06 s"),
               ("p99_late_ms", "<=", 1.0, "p99 lateness ≤ 1 ms")],
    "relay": [("figure", ">=", 600.0, "≥ 600 k jobs per second")],
    "relay1": [("figure", ">=", 120.0, "≥ 120 k jobs per second")],
    "relay-durable": [("figure", ">=", 100.0,
                       "≥ 100 k durable jobs per second")],
    "checkpoint": [("figure", "<=", 1000.0, "p50 ≤ 1 ms under load")],
    "xpingpong": [("ratio", "<=", 2.0, None)],
    "xfanin": [("figure", ">=", 1.0, "≥ 1 M per second (batching per "
                "destination node)")],
    "xdetect": [("figure", "<=", 2500.0,
                 "≤ down-after + 1 heartbeat (2,500 ms)")],
}
# How the summary's stepx cell shows a key of stepx's line that a target
# checks.
KEY_TEXT = {
    "p99_late_ms": "p99 late {:.1f} ms",
}
# The cluster's rows compare with one named runtime rather than the best
# peer: workload -> runtime (the summary's "best peer" cell and ratio, and
# for a "ratio" target the ratio it is checked on).
AGAINST = {
    "xpingpong": "nats",
    "xfanin": "nats",
    "relay1": "redis",
}
# Workloads measured without a target: what the summary's target cell says.
NO_TARGET = {
    "recover": "none (a measurement)",
}
# A row compared with another stepx row of the same run instead of a peer:
# workload -> (the other workload, how the summary names it).
BASELINE = {
    "relay-durable": ("relay", "in-memory relay"),
}
ORDER = ["skynet", "pingpong", "ring", "fanin", "spawnidle", "submit", "yield",
         "wake", "idle", "timers", "relay", "relay1", "relay-durable",
         "recover", "checkpoint", "xpingpong", "xfanin", "xdetect"]
# stepx-1node and nats run only the cluster's rows (bench/cluster.sh):
# there "stepx" is the program across nodes, stepx-1node the same program
# in one engine, nats plain nats.c between OS processes.
# redis runs only relay1: redis-server and redis-benchmark, one request at a
# time on 8 connections, what such a round trip costs here without an
# engine (bench/peers/redis/run.sh).
RUNTIMES = ["stepx", "go", "erlang", "caf", "tokio", "stepx-1node", "nats",
            "redis"]
RUNTIME_NAMES = {"stepx": "stepx", "go": "Go", "erlang": "Erlang", "caf": "CAF",
                 "tokio": "Tokio",
                 "stepx-1node": "stepx, one node", "nats": "plain NATS",
                 "redis": "Redis"}
# The cluster's rows: their stepx runs are across nodes.
CLUSTER = ("xpingpong", "xfanin", "xdetect")
# The peers a "ratio" target is checked against: the best of them.
PEERS = ("go", "erlang", "caf", "tokio")


def runtime_name(w, rt):
    if rt == "stepx" and w in CLUSTER:
        return "stepx, across nodes"
    return RUNTIME_NAMES[rt]
SIZES = {
    "skynet": "leaves (a 10-ary tree of n·10/9 processes)",
    "pingpong": "messages",
    "ring": "hops (503 processes)",
    "fanin": "messages (2 producers × n/2)",
    "spawnidle": "processes",
    "submit": "one-step processes",
    "yield": "yields",
    "wake": "samples, 1 ms apart",
    "idle": "seconds",
    "timers": "processes, each sleeping 1–50 ms",
    "relay": "jobs (8 connections, 64 jobs in flight on each)",
    "relay1": "jobs (8 connections, one request at a time on each)",
    "relay-durable": "jobs (8 connections, 64 jobs in flight on each; a "
                     "state store)",
    "recover": "stored jobs without an outcome",
    "checkpoint": "steps of checkpointed jobs (64 jobs at once, a no-op "
                  "yield per step; a state store)",
    "xpingpong": "round trips (after n/10 untimed)",
    "xfanin": "messages (2 producers × n/2 → 1 sink)",
    "xdetect": "killed node",
}
# The suite's nominal sizes; a run with another n says so.
NOMINAL_N = {"skynet": 1000000, "pingpong": 2000000, "ring": 10000000,
             "fanin": 10000000, "spawnidle": 1000000, "submit": 1000000,
             "yield": 10000000, "wake": 10000, "idle": 5, "timers": 100000,
             "relay": 100000, "relay1": 100000, "relay-durable": 100000,
             "recover": 1000000, "checkpoint": 64000, "xpingpong": 5000,
             "xfanin": 1000000, "xdetect": 1}
# Why a workload runs below its nominal size (bench/run.sh, WORKLOADS).
SIZE_WHY = {
    "spawnidle": "At the nominal size the Go and Erlang programs grow to "
                 "about 2.7 GB each and take tens of seconds a run, and the "
                 "full suite no longer fits its 15 minutes on 2 cores; the "
                 "reduced size applies to every runtime alike.",
}

# What each workload does, the same in every runtime (bench/stepx_bench.c,
# bench/peers/). One paragraph each, shown under the workload's table.
HOW = {
    "skynet": "Every process spawns its 10 children and sums the 10 numbers "
              "they send back; a leaf sends its number. stepx uses "
              "`SX_CMD_SPAWN_WAIT` (the child's result is the parent's "
              "completion event), Go a channel per parent, Erlang and CAF a "
              "message to the parent.",
    "pingpong": "A token passed between 2 processes: it starts at n−1, each "
                "hop forwards t−1; whoever sees 0 sends a stop on and "
                "finishes. Each process counts what it saw and the driver "
                "checks the total. A stepx process sends with `sx_send` and "
                "waits with IDLE; a Go goroutine reads a 1-slot channel, its "
                "mailbox.",
    "ring": "The pingpong program on a ring of 503 processes.",
    "fanin": "2 producers send n/2 messages each to one consumer, which counts "
             "them and checks that each producer's arrive in order. A stepx "
             "producer sends 32 messages per step (`sx_send`, then CONTINUE), "
             "which the engine carries to the consumer as one bundle; every "
             "message is still delivered and checked one by one. At one send "
             "per step stepx takes ~150–170 ns per message against Go's "
             "24–26 ns, so this figure is the bundling of a step's sends, not "
             "a faster single send (bench/FINDINGS.md, \"fanin\"). Go's "
             "consumer reads one channel of 1,024 slots (a Go channel cannot "
             "be unbounded, so its producers block when it is full); "
             "Erlang's and CAF's mailboxes are unbounded like stepx's. The "
             "consumer's backlog shows in peak RSS.",
    "spawnidle": "n processes that each wait for one message, then one "
                 "message each, then wait for all (stepx's driver blocks in "
                 "`sx_engine_wait_all`, the engine's own count of the "
                 "living; Go's WaitGroup, an Erlang `counters` counter "
                 "polled every 1 ms, a C++ atomic polled every 20 µs). "
                 "Bytes per idle process = "
                 "(median peak RSS at n − median peak RSS of the same program "
                 "at n = 1) / n; it includes the driver's list of handles "
                 "(stepx 16 B PIDs, Go an 8 B slice slot and a 96 B channel, "
                 "Erlang a list cell, CAF an 8 B actor handle).",
    "submit": "An outside thread submits n one-step processes through "
              "`sx_engine_submit` and waits for all in "
              "`sx_engine_wait_all`; Go's counterpart starts n goroutines "
              "from `main` and waits in a WaitGroup (a reference).",
    "yield": "One process yields n commands, each completed at once by a "
             "handler on the same worker. Go's figure is the nearest thing "
             "with goroutines, a request/response round trip on unbuffered "
             "channels with a helper goroutine: a reference, not the same "
             "mechanism.",
    "wake": "An outside thread sends the send time to an IDLE process every "
            "1 ms (after the previous sample arrived); the step records "
            "now − then. stepx's sender is not a worker, so the message goes "
            "through the global queue and a futex wake of a parked worker. "
            "In Go the sending thread readies the receiver and, as `main` "
            "then sleeps, usually runs it itself: Go's figure has no "
            "cross-core wake-up in it.",
    "idle": "A started runtime with nothing to do (Go: one goroutine blocked "
            "on a channel); CPU seconds (user + sys, `getrusage`) over the "
            "idle window, after 10 ms of settling.",
    "timers": "The driver submits n processes, each with a sleep drawn from a "
              "fixed sequence (uniform 1–50 ms); a process notes the time, "
              "yields `SX_CMD_SLEEP`, and on the answer records its lateness. "
              "An early or missing wake-up fails the run. The figure is the "
              "time from the first submit to the last finish; p99 lateness is "
              "the second condition. The driver waits for all in "
              "`sx_engine_wait_all` (the sleepers share no counter). Go (a "
              "reference): n goroutines that `time.Sleep` the same "
              "sequence, waited for with a WaitGroup.",
    "relay": "A relay server (the one stepxd runs) in the benchmark process "
             "on a Unix socket, and one client thread with 8 connections "
             "through the C client, each doing its share of the jobs: submit "
             "`counter(1)`, then wait for it; a job counts when the wait "
             "answers result 1. Each connection keeps 64 jobs in flight with "
             "the pipelined client API (replies are matched by id, "
             "PROTOCOL.md), so requests and replies travel many to a write. "
             "Client, server loop, workers and I/O loop share the cores. No "
             "peer.",
    "relay1": "The relay program with `--window 1`: one request at a time on "
              "each of the 8 connections, and a job is one request: a submit "
              "with `\"wait\": true`, answered with the job's outcome "
              "(PROTOCOL.md, submit), then the next job's. Its reference is "
              "Redis in the same run (bench/peers/redis/run.sh): "
              "redis-server on a Unix socket and redis-benchmark with 8 "
              "connections, one SET at a time on each, what a request and "
              "its reply cost on this machine's sockets without an engine.",
    "relay-durable": "The relay program (8 connections, 64 jobs in flight on "
                     "each) on an engine with a state store "
                     "(docs/DURABILITY.md) in a fresh temporary directory on "
                     "the machine's disk, removed after the run: a submit is "
                     "answered once the job is stored and a wait once its "
                     "outcome is, so each job is two records in the store's "
                     "group commits (SQLite WAL, synchronous NORMAL, one "
                     "writer thread). The in-memory relay row of the same run "
                     "is its baseline (the summary's ratio: durable over "
                     "in-memory). No peer.",
    "checkpoint": "On an engine with a state store, 64 jobs at once step "
                  "n/64 times each, a no-op yield per step: first of a plain "
                  "type, then of the same type checkpointed "
                  "(SX_TYPE_CHECKPOINTED, docs/DURABILITY.md), whose no-op "
                  "goes out, and whose next step comes, once its checkpoint "
                  "is committed. Each job times the gap between the end of a "
                  "step and the start of the next; the figure is the "
                  "checkpointed gaps' median minus the plain gaps' median: "
                  "the time a checkpoint adds to a step under that load. "
                  "No peer.",
    "recover": "A child process stores n jobs (a type whose processes stay "
               "IDLE, no inputs) through `sx_engine_submit_async` and exits "
               "once every submit is answered, with the jobs still running: "
               "to the store, a crash with n acknowledged jobs without an "
               "outcome. The figure is the time of `sx_engine_start` of a new "
               "engine on that directory: open the store, read the jobs back "
               "(one more attempt each, committed), reserve their slots, "
               "spawn each again (its init runs) and queue it; the clock "
               "stops when the engine counts n live processes. The filling "
               "is not timed. No peer, no target.",
    "xpingpong": "bench/cluster.sh, stepx-xnode (bench/xnode_bench.c): a "
                 "pinger process sends a sequence number with `sx_send` to "
                 "a pong process, which sends it back to its sender; the "
                 "pinger times each round trip (CLOCK_MONOTONIC, from the "
                 "step that sends to the step that receives) and checks the "
                 "number. Across nodes: the pong on node 1 and the pinger "
                 "on node 2, each an OS process with one worker, joined "
                 "over a nats-server of the run's own on loopback "
                 "(`sx_cluster_start`, `sx_cluster_route`): each way is "
                 "one NATS publish. One node: both in one engine (a worker "
                 "per core), no NATS hop. Plain NATS (bench/peers/nats/"
                 "reqrep.c): `natsConnection_Request` in a loop against a "
                 "responder process that publishes each request back to "
                 "its reply subject, both with `natsOptions_SetSendAsap` "
                 "(a publish is written at once, not by nats.c's flusher "
                 "thread). Target: across nodes p50 ≤ 2 × plain NATS.",
    "xfanin": "2 producers send n/2 sequence-numbered messages each to one "
              "sink, 32 per step (`sx_send`, then CONTINUE, as the fanin "
              "producers); the sink checks each sender's order and the "
              "figure is its messages per second from its first message "
              "to its last. Across nodes: the sink on node 1, one "
              "producer on each of nodes 2 and 3 (3 OS processes, one "
              "worker each, a nats-server), started together; the sink "
              "then answers a report once it has all n (a run where some "
              "never arrive waits out its deadline and fails, with what "
              "did arrive on its line). One node: the same processes in "
              "one engine. Plain NATS: 2 publisher processes → 1 "
              "subscriber process (nats.c's buffered publishes, its "
              "throughput setting; the subscriber's pending limits "
              "lifted so that it never drops). Target: ≥ 1 M/s across "
              "nodes.",
    "xdetect": "Two stepxd daemons (cmd/stepxd) in one cluster with "
               "`--heartbeat 500` and the default down-after (4 "
               "heartbeats, 2,000 ms), a nats-server of the run's own; once "
               "each has logged the other up, node 2 is killed with "
               "SIGKILL at a random point of a heartbeat period, and the "
               "figure is the time from the kill to node 1's log line "
               "`node 2 (incarnation …) down: silent for N ms` (polled every "
               "5 ms). Target: ≤ down-after + 1 heartbeat.",
}

# Why a target is missed on this kind of machine, with the measurement that
# shows the limit (details: bench/FINDINGS.md). Shown under "Known gaps"
# only for the workloads this run misses.
GAP_WHY = {
    "skynet": "The peers' figures move with the host's page cost far more "
              "than stepx's: in four full runs on hosts where a fresh page "
              "cost 13.5–17.7 µs, Tokio's medians were 0.87–0.91 s and "
              "Go's 1.3–1.4 s against stepx's 0.16–0.19 s (ratios "
              "0.18–0.21); on hosts with pages of 1.6–3.4 µs (the latest "
              "full runs, this one among them) Tokio took 0.26–0.28 s and "
              "stepx 0.10–0.17 s. What is left is instructions: {instr} a leaf "
              "(the instructions table) for 10/9 processes each spawned, "
              "waited for and finished; the spawn command (its "
              "[type, method, [inputs]] packed, decoded and the type "
              "looked up, the slot, init, queueing) is about a third of "
              "them and the finish (the outcome kept, the parent's answer "
              "made and delivered) about a quarter (callgrind, one "
              "worker). 0.3 of Tokio here asks for under half the "
              "instructions.",
    "relay1": "Bound by the machine's socket round trips, not by the "
              "engine: a job is one request and one reply (a submit with "
              "`wait`) on a connection that carries one at a time, so each "
              "is a client send, a server read, a write and a client "
              "receive, plus the wake-ups of a worker and of the server's "
              "loop; on this VM every system call traps to the hypervisor "
              "(~1 µs for the cheapest, a quarter of a relay1 run's "
              "samples). Redis beside it in the same run (8 connections "
              "over a Unix socket, one SET at a time, no engine) is the "
              "reference: 120 k jobs a second asks for about twice its "
              "rate here (the summary's best-peer column; bench/FINDINGS.md, "
              "\"relay and relay1\").",
    "wake": "The figure is the time from an outside thread's send to "
            "the step of an idle process while both workers are parked: "
            "a futex wake-up of a worker and the step. `perf sched "
            "timehist` shows the woken worker queued on the sender's own "
            "core while the other core sits idle (the scheduler here "
            "passes over the idle vCPU), waiting ~10 µs until the sender "
            "blocks; a bare futex round trip between two threads measures "
            "5.5–6.5 µs p50 here. The runs fall on either side of the "
            "target with the host: 12.5 µs in a quiet full run, 15–16 in "
            "busy ones. A yield by the sender after the wake-up took the "
            "p50 to 9.4 µs but was not kept (it hands a user's thread's "
            "core to a step of any length: bench/FINDINGS.md, \"wake\"). "
            "The Go peer's sender is a goroutine, whose channel send "
            "readies the receiver on its own P: no thread is woken.",
    "relay-durable": "The figure moves with the host and its disk: the same build measures 80–105 k/s at different hours on this VM. " "Each job waits for two group commits one after the "
                     "other (its submit's, then its outcome's) with relay "
                     "round trips between them, and 512 jobs are in flight "
                     "(8 × 64), so the figure is bound by the time a job "
                     "takes through that pipeline rather than by a "
                     "saturated thread: 5 alternated rounds on the 2-core VM "
                     "gave 69, 102 and 129 k/s (medians) with 16, 64 and 256 "
                     "jobs in flight per connection; at 64 the store's "
                     "writer thread was on a core 76 % of the run and "
                     "waiting for one 6 %, and the process used 1.4 of the "
                     "2 cores. Two-thirds of the writer's time is SQLite "
                     "(the statements ~38 %, the commit with its WAL write "
                     "and checkpoints ~29 %), a quarter the answers it runs "
                     "after a commit (the outcomes handed to waiters and the "
                     "relay's replies). The line's busiest_thread_* keys "
                     "show the same for each run; bench/FINDINGS.md has the "
                     "profile.",
    "timers": "The figure is the last sleeper's first step plus ~50 ms "
              "(the longest sleep), so 0.06 s asks for 100,000 submits and "
              "first steps in ~10 ms. Until then the submitting thread and "
              "the two workers share 2 cores and use all of them, and the "
              "figure follows what the host leaves of them: quiet hosts with "
              "the CPUs near measured 0.063–0.068 s, hosts with them far "
              "apart 0.086–0.117 s (2026-11-29 to 12-01). Where a fresh "
              "page costs what the machine table says (bare metal: well "
              "under 1 µs), first-touch faults are much of that CPU "
              "(2,800–4,100 a run, perf stat); populating the memory in "
              "bulk took them off but not the figure: while the submitter "
              "runs, the OS often leaves both workers on one CPU, and the "
              "sleeps due meanwhile then need more than it "
              "(bench/FINDINGS.md, \"Page faults in bulk\"); workers "
              "pinned one to a CPU did not move it either: the CPU time "
              "is the bound (\"Tried and dropped\"). The same "
              "runs make the lateness: where the workers shared one CPU, "
              "the fires of a few milliseconds' worth of deadlines, 20–40 "
              "ms in, come late together, and their p99 goes from under "
              "1 ms to up to ~40 ms; a suite's runs of it fall on both "
              "sides.",
    "pingpong": "A hop costs stepx {instr} instructions (the instructions "
                "table) and three locked instructions: the wake-up's CAS, "
                "the worker's take of the process (READY to RUNNING) and "
                "its CAS to IDLE after the step. The process table's "
                "reference and the mailbox's exchanges are no longer on "
                "the path (a worker keeps the references its sends take, "
                "and a waiting receiver's mailbox takes the message at its "
                "consumer end: bench/FINDINGS.md, \"Kept references\" and "
                "\"The hand-off\"), which took a hop pinned to one CPU from "
                "44.4 to 39.7 ns (bench/ab.sh, 11 rounds), and the common "
                "cases of the send path's helpers run with no call "
                "(bench/FINDINGS.md, \"Fast paths with no call\"; 39.3 to "
                "36.6 ns pinned, 7 rounds), a lone send among them: its "
                "dispatch and the hand-off to a kept receiver run inline in "
                "the worker's loop (bench/FINDINGS.md, \"A lone send with "
                "no call\"; 36.6 to 32.6 ns pinned). On a quiet host the "
                "runs reach 31–34 ns a hop, "
                "at an IPC near 5, the core's issue width; in the host's "
                "busy spells 65–100 ns, with one worker as with two: the "
                "runs fall into two groups, one per CPU (pinned with "
                "taskset, 69–71 ns on one and 87–88 on the other, the "
                "faster one changing within the hour; the machine table's "
                "loop shows the same), and this suite's runs fall in both. "
                "Against Tokio on a quiet host (~64 ns a hop) 0.4 asks for "
                "~25 ns: about three-quarters of the instructions, and of "
                "the locked ones.",
    "ring": "A hop is one process's send to the next and that process's "
            "step, all on one worker while the other parks, so a run's "
            "figure follows the CPU that worker gets; on a shared host one "
            "CPU is at times much slower than the other (the machine "
            "table's loop of one thread on each CPU, before and after the "
            "runs), and "
            "the runs then fall into two groups. A hop costs {instr} "
            "instructions (the instructions table), more than a pingpong "
            "hop: a worker keeps the references of 8 receivers at most, "
            "so here each send looks for a kept reference, misses, and "
            "takes and drops the process table's (two more locked "
            "instructions). A build with no reference at all on these "
            "sends (unsafe, built only to measure it) ran ~7 % faster "
            "(bench/FINDINGS.md, \"The table's reference on a ring's "
            "send\").",
    "yield": "A yield round trip (yield a no-op command, its answer "
             "completed at once, the next step) costs {instr} instructions "
             "(the instructions table): the worker's loop and the step's "
             "turn ~270, the dispatch ~100 (a completer allocated, the "
             "handler looked up and called), the answer ~35 (held by the "
             "worker for the next step, no queue: docs/SCHEDULER.md) and "
             "the yield itself ~40. The runs spread with the CPU their "
             "worker lands on: pinned to either CPU while the host leaves "
             "both alone (the machine table's loop at 29–30 ms on each), "
             "a round trip takes 27–31 ns; on a CPU that loop finds ~40 % "
             "slower, ~40 ns (bench/FINDINGS.md, \"The two CPUs\"), and "
             "a full run's seven runs fall on both kinds.",
    "submit": "The submitting thread is the run: it is on a CPU ~90 % "
              "of it, and its own CPU time a submit is the figure "
              "(87–96 ns where the CPUs are far apart, 63–84 near; "
              "bench/FINDINGS.md, \"The submitting thread's time\"). "
              "It runs about a third of a one-step process's {instr} "
              "instructions (the instructions table: the type's look-up, "
              "the slot, init, the hand-off), at ~290 cycles a submit far "
              "and ~210 near: most of it waiting for the new process's "
              "slot lines and the ring's, which the workers on the other "
              "CPU wrote last. A tenth fewer of its instructions, the "
              "workers' looks spaced out, slots fetched further ahead and "
              "the ring's pages populated each left the time where it "
              "was. The lines' trips alone cost less: a record's two "
              "lines passed to the other CPU and back take {handoff} "
              "(\"The floor: the lines alone, and the locks\"). Where the "
              "CPUs are far apart the runs fall in two modes, ~95–100 ns "
              "a process and ~110–190: in the second the workers fall "
              "behind, and the submitting thread carves fresh slots and "
              "takes their page faults. With the CPUs near (a round trip "
              "of ~110–165 ns) runs measured 69–80 ns (12.5–14.5 M/s) "
              "here and 14–21 M/s on other hosts.",
    "fanin": "Two producers send to one consumer, 2 workers on 2 cores: "
             "the consumer's worker takes every message from a queue that "
             "the other core writes, so a message is {instr} instructions "
             "(the instructions table) plus the transfer of the queue's "
             "and the event node's cache lines between the cores. The runs "
             "fall in two modes, builds of different days alike and both "
             "within minutes (bench/ab.sh): 8.7–11 ns a message and 15–21 "
             "ns. In the full run of 2026-11-30 17:02 six of seven stepx "
             "runs took the slow mode (58 M/s, 1.72 x Go), in the one after "
             "it (17:14) one of seven (103 M/s, 2.54 x), and in a busy run "
             "at 22:59 four of seven (the other three at 8.7 ns, 3.45 x Go's "
             "median). Go's runs here take 23–39 ns, so 3 x asks for 8–13 "
             "ns a message: the fast mode now reaches it, and the figure "
             "follows how many of the runs the host's slow mode takes "
             "(bench/FINDINGS.md). Its "
             "three processes take slots that share no cache line (a fresh "
             "magazine hands slots out in groups of 8, evens first: "
             "bench/FINDINGS.md, \"fanin\", *Slot order*).",
    "relay": "The pipelined row keeps both cores busy: the server's loop "
             "thread takes 90–96 % of a core (it reads, decodes, submits "
             "and answers every request of the 8 connections), and the "
             "client thread (52–57 %) and the two workers share the rest "
             "(bench/FINDINGS.md, \"relay and relay1\"). 600 k jobs a "
             "second leaves the loop 1.67 µs a job. A job costs the loop "
             "~6,500 instructions and the client ~6,900 (callgrind, one "
             "thread each; bench/FINDINGS.md, \"Fewer instructions a job "
             "on the loop and in the client\" and \"Replies without an "
             "allocation\"). In the host's busy spells "
             "the loop's thread gets less of its core, and the runs spread "
             "over 1.6–2.6 µs. In quiet spells on a host with the CPUs "
             "near, builds before those cuts took 1.19–1.30 µs a job "
             "(770–840 k/s; bench/ab.sh relay 200000, 7 rounds, "
             "bench/FINDINGS.md, \"The spin on a busy core\").",
    "spawnidle": "The time is the driver's and the pages': one thread "
                 "outside the engine submits the 500,000 processes and "
                 "then sends each its message (~2,070 instructions a "
                 "process in all, the instructions table); the idle "
                 "workers fault in most of the slots' ~11,700 fresh pages "
                 "ahead of it (docs/ARCHITECTURE.md, \"Memory\"), but "
                 "the driver still first-touches its own 8 MB of PIDs and "
                 "the heap its messages grow, at the machine table's page "
                 "cost each; the host's page cost and its unequal CPUs "
                 "spread the runs (the table's min–max). An idle process "
                 "holds its 96-byte slot "
                 "(docs/ARCHITECTURE.md, \"Memory\") plus the benchmark's "
                 "16-byte PID, ~112 bytes once the process table is large "
                 "(docs/CURVES.md); the figure adds the message each "
                 "process gets while it is in flight and the workers' "
                 "cached event nodes, and at small n whole pages.",
}

# What one operation is in the instructions table (bench/icount.sh --diff).
ICOUNT_OP = {
    "yield": "a yield round trip",
    "pingpong": "a message",
    "ring": "a hop (503 processes)",
    "skynet": "a leaf (10/9 processes, each spawned, waited for and "
              "finished)",
    "fanin": "a message (2 producers, 32 sends a step)",
    "spawnidle": "an idle process (spawned, sent one message, finished)",
    "submit": "a one-step process submitted from outside the engine",
}

GENERIC_GAP = ("No analysis of this miss in the report; bench/FINDINGS.md "
               "has the notes on this workload.")


def parse_line(line):
    kv = {}
    for tok in line.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            kv[k] = v
    return kv


def cpu_field(text):
    """The CPU column's value: seconds, None when empty; ValueError when the
    field is not a number (then it is not the CPU column)."""
    return float(text) if text != "" else None


def load(raw_path):
    runs = []
    with open(raw_path) as f:
        for row in f:
            row = row.rstrip("\n")
            if not row:
                continue
            # Seven fields with CPU seconds before the line, six without.
            parts = row.split("\t", 6)
            cpu = None
            if len(parts) == 7:
                try:
                    cpu = cpu_field(parts[5])
                    del parts[5]
                except ValueError:
                    parts = row.split("\t", 5)
            if len(parts) < 6:
                continue
            w, rt, rnd, rc, rss, line = parts
            kv = parse_line(line)
            runs.append({"w": w, "rt": rt, "round": int(rnd), "rc": int(rc),
                         "rss_kb": int(rss or 0), "cpu": cpu, "line": line,
                         "kv": kv,
                         "ok": kv.get("ok") == "1" and int(rc) == 0})
    return runs


def load_icount(path):
    """icount.tsv: one workload a line, tab-separated: workload, n, n2,
    instructions at n, instructions at n2, per operation, counts per size
    (1 when the column is missing). None when there is no such file."""
    if path is None or not os.path.exists(path):
        return None
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 6 or not parts[5]:
                continue
            w, n, n2, at_n, at_n2, per_op = parts[:6]
            rounds = int(parts[6]) if len(parts) > 6 and parts[6] else 1
            rows.append({"w": w, "n": int(n), "n2": int(n2),
                         "at_n": int(at_n), "at_n2": int(at_n2),
                         "per_op": float(per_op), "rounds": rounds})
    rank = {w: i for i, w in enumerate(ORDER)}
    rows.sort(key=lambda r: rank.get(r["w"], len(ORDER)))
    return rows


def load_meta(meta_path):
    meta = {}
    with open(meta_path) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                meta[k] = v
    return meta


def figure(w, kv):
    key = FIGURES[w][0]
    v = float(kv[key])
    if FIGURES[w][1] == "M/s":
        v /= 1e6
    elif FIGURES[w][1] == "k/s":
        v /= 1e3
    return v


def fmt(w, v):
    return FIGURES[w][3].format(v)


def med_range(w, vals):
    if not vals:
        return "—"
    m = statistics.median(vals)
    if len(vals) == 1:
        return fmt(w, m)
    return "{} ({}–{})".format(fmt(w, m), fmt(w, min(vals)), fmt(w, max(vals)))


def ratio_name(w):
    """How the ratio of workload w is named: stepx/best or stepx/<runtime>."""
    return "stepx/{}".format(RUNTIME_NAMES[AGAINST[w]] if w in AGAINST
                             else "best")


def condition_text(w, cond):
    what, op, bound, text = cond
    if what == "ratio":
        return "{} {} {:g}".format(ratio_name(w), "≤" if op == "<=" else "≥",
                                   bound)
    return text


def target_text(w):
    """The summary's target cell for workload w."""
    if w in NO_TARGET:
        return NO_TARGET[w]
    return "; ".join(condition_text(w, c) for c in TARGETS[w])


def has_ratio_target(w):
    return any(c[0] == "ratio" for c in TARGETS.get(w, []))


def absent(run, meta):
    """The suite's workloads a full run without --only left out."""
    if meta.get("mode") == "quick" or "--only" in meta.get("command", ""):
        return []
    return [w for w in ORDER if not run.has(w)]


def mib(kb):
    return "{:.1f}".format(kb / 1024.0)


def met(op, value, bound):
    return value <= bound if op == "<=" else value >= bound


def rel_path(path):
    """path relative to the repository root when it lies inside it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = os.path.abspath(path)
    if p.startswith(root + os.sep):
        return os.path.relpath(p, root)
    return path


def bytes_per_proc(by, rt):
    big = [r for r in by.get(("spawnidle", rt), []) if r["ok"]]
    base = [r for r in by.get(("spawnidle0", rt), []) if r["ok"]]
    if not big or not base:
        return None
    n = int(big[0]["kv"]["n"])
    d = statistics.median([r["rss_kb"] for r in big]) - \
        statistics.median([r["rss_kb"] for r in base])
    return d * 1024.0 / n


class Run:
    def __init__(self, runs):
        self.runs = runs
        self.by = {}
        for r in runs:
            self.by.setdefault((r["w"], r["rt"]), []).append(r)

    def has(self, w):
        return any(k[0] == w for k in self.by)

    def has_cpu(self):
        """Whether the raw lines carry CPU time (a column of their own)."""
        return any(r["cpu"] is not None for r in self.runs)

    def cpu_median(self, w, rt):
        """Median CPU seconds (user + sys) over the ok runs, or None."""
        _, good, _, _ = self.stats(w, rt)
        v = [r["cpu"] for r in good if r["cpu"] is not None]
        return statistics.median(v) if v else None

    def stats(self, w, rt):
        rs = self.by.get((w, rt), [])
        good = [r for r in rs if r["ok"]]
        vals = [figure(w, r["kv"]) for r in good]
        rss = [r["rss_kb"] for r in good]
        return rs, good, vals, rss

    def key_median(self, w, rt, key):
        _, good, _, _ = self.stats(w, rt)
        v = [float(r["kv"][key]) for r in good if key in r["kv"]]
        return statistics.median(v) if v else None

    def n_of(self, w):
        for rt in RUNTIMES:
            for r in self.by.get((w, rt), []):
                if "n" in r["kv"]:
                    return int(r["kv"]["n"])
        return None

    def verdict(self, w):
        """One summary row: a dict with the cells and whether it is met."""
        row = {"w": w, "met": False, "target": target_text(w)}
        srs, sgood, sv, _ = self.stats(w, "stepx")
        if not sv:
            row.update(stepx="no ok run", best="", ratio="", missed=[],
                       verdict="**not met** (no result)")
            return row
        # A run that failed its check or did not finish is not left out
        # silently: the median is over the ok runs, and the row says so.
        s_failed = len(srs) - len(sgood)
        missing = []  # peers that ran this workload but have no ok run
        sm = statistics.median(sv)
        row["stepx_median"] = sm
        unit = FIGURES[w][1]
        peers = []
        for rt in RUNTIMES[1:]:
            rs, _, v, _ = self.stats(w, rt)
            if v:
                peers.append((rt, statistics.median(v)))
            elif rs:
                missing.append("{} 0/{} ok".format(rt, len(rs)))
        best = None
        peers = [x for x in peers if x[0] in PEERS]
        if peers:
            pick = min if FIGURES[w][2] == "lower" else max
            best = pick(peers, key=lambda x: x[1])
        stepx_txt = "{} {}".format(fmt(w, sm), unit)
        if s_failed:
            stepx_txt += " ({}/{} runs ok)".format(len(sgood), len(srs))
        best_txt = ("{} {} {}".format(RUNTIME_NAMES[best[0]], fmt(w, best[1]),
                                      unit) if best else "—")
        if best:
            brs, bgood, _, _ = self.stats(w, best[0])
            if len(bgood) < len(brs):
                best_txt += " ({}/{} runs ok)".format(len(bgood), len(brs))
        if missing:
            best_txt += "; no ok run: " + ", ".join(missing)
        ratio = sm / best[1] if best and best[1] > 0 else None
        if w in AGAINST:
            # One named runtime, not the best peer.
            art = AGAINST[w]
            ars, _, av, _ = self.stats(w, art)
            am = statistics.median(av) if av else None
            best_txt = ("{} {} {}".format(RUNTIME_NAMES[art], fmt(w, am), unit)
                        if am is not None else "{}: {}".format(
                            RUNTIME_NAMES[art],
                            "no ok run" if ars else "not in this run"))
            ratio = sm / am if am else None
            missing = [m for m in missing if m.startswith(art + " ")]
        if w in BASELINE:
            # No peer: the other stepx row of the same run, and the ratio
            # to it.
            bw, bname = BASELINE[w]
            brs, _, bv, _ = self.stats(bw, "stepx")
            bm = statistics.median(bv) if bv else None
            best_txt = ("{} {} {}".format(bname, fmt(bw, bm), FIGURES[bw][1])
                        if bm is not None else "{}: {}".format(
                            bname, "no ok run" if brs else "not in this run"))
            ratio = sm / bm if bm else None
        ratio_txt = "{:.2f}".format(ratio) if ratio is not None else "—"
        ok = None if w in NO_TARGET else True
        missed = []  # the conditions this run misses, as the target says them
        for cond in TARGETS.get(w, []):
            what, op, bound, _ = cond
            if what == "ratio":
                value = ratio
            elif what == "figure":
                value = sm
            elif what == "bytes_per_proc":
                value = bytes_per_proc(self.by, "stepx")
                stepx_txt += ("; {:.0f} B/proc".format(value)
                              if value is not None else "; B/proc: —")
            else:
                value = self.key_median(w, "stepx", what)
                if value is not None:
                    stepx_txt += "; " + KEY_TEXT[what].format(value)
            if value is None or not met(op, value, bound):
                ok = False
                missed.append(condition_text(w, cond))
        verdict = ("—" if ok is None else "**met**" if ok else "**not met**")
        if s_failed:
            # A stepx run that failed its own check is a failure, whatever
            # the others measured.
            ok = False
            verdict = "**{}** ({} of {} stepx runs failed)".format(
                "failed" if w in NO_TARGET else "not met", s_failed, len(srs))
        elif ok and missing and has_ratio_target(w):
            # The best peer may be the one that failed: no verdict.
            ok = False
            verdict = "**unverified** (a peer has no ok run)"
        row.update(stepx=stepx_txt, best=best_txt, ratio=ratio_txt,
                   verdict=verdict, met=ok, missed=missed)
        return row


def section_machine(p, meta):
    p("## Machine")
    p("")
    p("| | |")
    p("|---|---|")
    p("| CPU | {} cores (`nproc`), {}, {} RAM |".format(
        meta.get("nproc", "?"), meta.get("cpu", "?"), meta.get("mem", "?")))
    p("| kernel | {} |".format(meta.get("kernel", "?")))
    p("| fresh 4 KiB page (bench/pagefault_probe.c, 256 MiB) | {} µs |".format(
        meta.get("pagefault_us", "?")))
    if "cpu_ms_before" in meta:
        p("| one thread's loop on each CPU (bench/cpu_probe.c; CPU 0, 1, "
          "...) | before {} ms; after {} ms |".format(
              meta["cpu_ms_before"].replace(",", ", "),
              meta.get("cpu_ms_after", "?").replace(",", ", ")))
    if "c2c_ns_before" in meta:
        p("| a cache line's round trip between the first CPU and each "
          "other one (bench/c2c_probe.c) | before {} ns; after {} ns |".format(
              meta["c2c_ns_before"].replace(",", ", "),
              meta.get("c2c_ns_after", "?").replace(",", ", ")))
    if number(meta.get("handoff_ns")):
        p("| a record's two lines passed to the other CPU and back, 1,024 "
          "records circulating, no engine (bench/handoff_probe.c) | {} ns "
          "an item |".format(meta["handoff_ns"]))
    p("| load average (1, 5, 15 min) | before {}; after {} |".format(
        meta.get("load_before", "?"), meta.get("load_after", "?")))
    build = meta.get("build", "buildtype=release")
    p("| stepx | commit {}{}; meson `{}`; {} |".format(
        meta.get("commit", "?"),
        " (with uncommitted changes)"
        if meta.get("dirty", "0") not in ("0", "") else "",
        build, meta.get("gcc", "?")))
    p("| Go | {} (GOMAXPROCS = cores) |".format(meta.get("go", "?")))
    p("| Erlang | {} (`erl -noshell +P 5000000`, schedulers = cores) |".format(
        meta.get("erlang", "?")))
    p("| CAF | {} (event-based actors, scheduler threads = cores), g++ -O2 |"
      .format(meta.get("caf", "?")))
    if "tokio" in meta:
        p("| Tokio | {} (a multi-thread runtime, one worker per core; "
          "unbounded mpsc mailboxes), release with LTO |".format(meta["tokio"]))
    p("| whole run | {} s |".format(meta.get("elapsed_s", "?")))
    p("")
    p("The host is shared: other jobs may run beside the suite (the load "
      "averages above), and a busy host slows a whole stretch of runs, so "
      "read the ratios and the min–max spread rather than single figures. "
      "A fresh page costs {} µs here (bare metal: well under 1 µs), so the "
      "workloads that grow memory (spawnidle, skynet, a fanin backlog) "
      "measure page faults in good part, and a runtime that uses less memory "
      "per process gains more here than it would on bare metal.".format(
          meta.get("pagefault_us", "?")))
    if "cpu_ms_before" in meta:
        p("")
        p("Nor are this machine's CPUs equal: the same loop of loads and "
          "stores takes different times on each (the row above; a thread "
          "on the host's core beside a CPU shares its ports), and which "
          "CPU a single-threaded workload's thread lands on moves its "
          "figure by as much (pingpong's runs then fall into two groups, "
          "one per CPU: bench/FINDINGS.md); the medians take in both.")
    if "c2c_ns_before" in meta:
        p("")
        p("Nor is the distance between the CPUs fixed: where the host "
          "places its virtual CPUs is its own choice, and a cache line's "
          "round trip between them (the row above) follows it. A "
          "workload whose threads "
          "pass data to each other pays it on every hand-over: Tokio's "
          "pingpong and ring wake the receiving task on the other worker, "
          "Go's fanin passes each message through a channel between two "
          "threads, stepx's pingpong keeps a hop on its worker. Ratios "
          "against the peers from runs at different distances are not "
          "comparable (bench/FINDINGS.md, \"The two CPUs' distance\").")
    p("")


def joined(words):
    """a, b and c"""
    return (", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1
            else "".join(words))


def targets_text():
    """Which workloads have which kind of target, for the method."""
    rows = [w for w in ORDER if w in TARGETS and w not in CLUSTER]
    on_ratio = [w for w in rows
                if all(c[0] == "ratio" for c in TARGETS[w])]
    mixed = ["{} on that ratio and {}".format(w, ", ".join(
        c[3] for c in TARGETS[w] if c[0] != "ratio"))
        for w in rows if has_ratio_target(w) and w not in on_ratio]
    absolute = [w for w in rows if not has_ratio_target(w)]
    also = ["{} also {}".format(w, ", ".join(
        c[3] for c in TARGETS[w] if c[0] != "figure"))
        for w in absolute if any(c[0] != "figure" for c in TARGETS[w])]
    txt = "{} have targets on that ratio".format(joined(on_ratio))
    if mixed:
        txt += ", " + joined(mixed)
    txt += "; {} have absolute targets".format(joined(absolute))
    if also:
        txt += " ({})".format("; ".join(also))
    return txt


def section_method(p, meta, run, shared=False):
    p("## Method")
    p("")
    tokio = "tokio" in meta  # a run from before Tokio joined has none
    p("- **Programs.** Each workload is one program per runtime doing the same "
      "work (bench/stepx_bench.c; bench/peers/go, erlang, caf{}). Each "
      "times only its workload (a fresh process per run; start-up of the "
      "runtime is not counted), checks its own result and prints one line "
      "with `ok=1` only when the check passed."
      .format(", tokio" if tokio else ""))
    p("- **Builds.** stepx-bench is built by bench/run.sh in its own tree, "
      "build/bench/stepx, with meson `{}` (link-time optimisation when "
      "`b_lto=true`): meson's defaults for this project, the build that "
      "`meson install` installs and that scripts/run.sh runs. It links the "
      "static library, optimised together with the program at link time, "
      "as stepxd does and as a program does that links `libstepx.a` with "
      "`-flto` (README.md); a program linked against the shared library "
      "(`pkg-config --libs stepx`) calls the API through the PLT{}; Go "
      "with `go build`, Erlang with "
      "`erlc`, CAF with `g++ -O2`{}. Every runtime uses one scheduler thread "
      "per core.".format(meta.get("build", "buildtype=release"),
                         " (the instructions table counts what that costs)"
                         if shared else "",
                         ", Tokio with Debian's cargo (release, LTO)"
                         if tokio else ""))
    p("- **Side by side.** {} rounds per workload; a round runs each runtime "
      "once, in turn (stepx, Go, Erlang, CAF{}, stepx, …), each under "
      "`timeout` and `/usr/bin/time -v`, so that a busy spell of the host "
      "hits every runtime alike.".format(meta.get("runs", "?"),
                                         ", Tokio" if tokio else ""))
    p("- **Figures.** The median over the runs that passed their check "
      "(min–max in the per-workload tables); a failed run is listed, never "
      "averaged in. Peak RSS is the median of `/usr/bin/time -v`'s maximum "
      "resident set size, the whole process's (Erlang's includes ~130 MB of "
      "VM start-up, sized by `+P 5000000`).")
    if run.has_cpu():
        p("- **CPU time.** Each workload's table gives, beside the figure, "
          "the median CPU seconds of the whole process (user + sys from "
          "`/usr/bin/time -v`, start-up included), which tells a noisy run "
          "from a regression: other jobs on the host make a run wait for a "
          "core, which worsens its figure but hardly its CPU time, while a "
          "regression grows both.")
    else:
        p("- **CPU time.** This run's raw lines carry no CPU time (user + "
          "sys), so the tables show none.")
    p("- **Ratios and targets.** Ratio = stepx's median / the best peer's "
      "median of the same figure, the best of Go, Erlang, CAF and Tokio "
      "(those in the run): for times lower is better, for rates (fanin, "
      "submit, relay) higher is, so a fanin ratio above 1 is stepx ahead. "
      "{}, and Go's figure, where there is one, is a reference; recover is "
      "a measurement without a target. The targets are bench/report.py's "
      "`TARGETS` table.".format(targets_text()))
    p("")


# The 10^7 idle processes target, from bench/curves.sh's runs
# (bench/results/curves.tsv beside raw.tsv): they fit and run, and a
# message beside them costs what it costs beside 10^3 (within FLAT, the
# bound docs/CURVES.md calls flat).
IDLE_BIG, IDLE_SMALL, FLAT = 10 ** 7, 10 ** 3, 1.25


def load_curves(path):
    """{(curve, x): [key=value dict, ...]} of stepx's passed runs in a
    curves.tsv, or None when there is none."""
    if path is None or not os.path.exists(path):
        return None
    out = {"meta": {}}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                k, _, v = line[1:].strip().partition("=")
                out["meta"][k] = v
                continue
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("\t", 6)
            if len(parts) < 7 or parts[4] != "0":
                continue
            kv = dict(t.split("=", 1) for t in parts[6].split() if "=" in t)
            # stepx's runs that passed, and the memory probe's.
            if ((parts[1] == "stepx" and kv.get("ok") == "1") or
                    (parts[0] == "memlat" and "cpu_ns_per_load" in kv)):
                out.setdefault((parts[0], int(parts[2])), []).append(kv)
    return out


def idle_figures(cur):
    """The medians the 10^7 idle row reads, or None without those runs."""
    def med_of(curve, x, fn):
        vals = []
        for kv in cur.get((curve, x), []):
            try:
                vals.append(fn(kv))
            except (KeyError, ValueError, ZeroDivisionError):
                pass
        return statistics.median(vals) if vals else None

    def cpu(kv):
        return float(kv["cpu_secs"]) * 1e9 / float(kv["n"])

    def key(k):
        return lambda kv: float(kv[k])

    f = {}
    for x in (IDLE_SMALL, IDLE_BIG):
        f[("hop", x)] = med_of("pingpong-idle", x, cpu)
        f[("random", x)] = med_of("idlemsg-idle", x, cpu)
        f[("order", x)] = med_of("idlemsg-idle", x,
                                 key("in_order_cpu_ns_per_op"))
    f["rss_gib"] = med_of("idlemsg-idle", IDLE_BIG,
                          lambda kv: float(kv["idle_rss_kb"]) / 1048576)
    f["memlat"] = med_of("memlat", IDLE_BIG, key("cpu_ns_per_load"))
    if any(v is None for k, v in f.items() if k != "memlat"):
        return None
    return f


def idle_row(cur):
    """A summary row for the 10^7 idle processes target, or None."""
    f = idle_figures(cur) if cur else None
    if f is None:
        return None
    missed = [what for what, k in (("a pingpong hop", "hop"),
                                   ("a message in order", "order"),
                                   ("a message at random", "random"))
              if f[(k, IDLE_BIG)] > FLAT * f[(k, IDLE_SMALL)]]
    cm = cur.get("meta", {})
    return {"w": "idle 10^7", "run": "{} at {}".format(
                cm.get("date", "?"), cm.get("commit", "?")),
            "stepx": "{:.2f} GiB; a message {:.0f} ns in order, {:.0f} at "
                     "random (beside 10^3: {:.0f}, {:.0f})".format(
                         f["rss_gib"], f[("order", IDLE_BIG)],
                         f[("random", IDLE_BIG)], f[("order", IDLE_SMALL)],
                         f[("random", IDLE_SMALL)]),
            "best": "—", "ratio": "—",
            "target": "fit and run; a message costs what it costs beside "
                      "10^3 (docs/CURVES.md)",
            "verdict": "**not met**" if missed else "**met**",
            "met": not missed, "missed": missed, "figures": f}


def idle_gap(r):
    """The known gap of the 10^7 idle processes row."""
    f = r["figures"]
    text = ("**idle 10^7** (not met; target: a message beside 10^7 idle "
            "processes costs what it costs beside 10^3; the curves' run of "
            "{}): missed by {}. They fit and run: {:.2f} GiB resident. "
            "CPU time a round trip to one of them in the order they were "
            "submitted {:.0f} ns (beside 10^3: {:.0f}), a pingpong hop "
            "beside them {:.1f} ({:.1f}), a round trip to one picked at "
            "random {:.0f} ({:.0f})."
            .format(r["run"], ", ".join(r["missed"]), f["rss_gib"],
                    f[("order", IDLE_BIG)], f[("order", IDLE_SMALL)],
                    f[("hop", IDLE_BIG)], f[("hop", IDLE_SMALL)],
                    f[("random", IDLE_BIG)], f[("random", IDLE_SMALL)]))
    if "a message at random" in r["missed"]:
        text += (" The engine does the same work in order and at random; "
                 "what grows is where the target lives: its slot is two "
                 "cold lines in a table of ~1 GB, each behind a TLB miss "
                 "(4 KiB pages)")
        if f["memlat"] is not None:
            text += (", and one load at a random place of a table that "
                     "size takes {:.0f} ns on this machine "
                     "(bench/memlat_probe.c)".format(f["memlat"]))
        text += "."
    return text + " docs/CURVES.md has every size."


def section_summary(p, rows, missing):
    p("## Summary")
    p("")
    p("| workload | stepx | best peer | ratio | target | verdict |")
    p("|---|---|---|---|---|---|")
    for r in rows:
        p("| {} | {} | {} | {} | {} | {} |".format(
            r["w"], r["stepx"], r["best"], r["ratio"], r["target"],
            r["verdict"]))
    for w in missing:
        p("| {} | not in this run | — | — | {} | — |".format(
            w, target_text(w)))
    p("")
    p("Ratio: stepx's median over the best peer's. For times (s, ns, µs) "
      "below 1 is stepx ahead, for rates (M/s) above 1 is. Where the target "
      "is absolute, the Go figure is a reference. relay-durable has no peer: "
      "its ratio is over the in-memory relay row of the same run. The "
      "cluster's rows (xpingpong, xfanin: stepx across nodes; xdetect) "
      "compare with plain NATS between OS processes on this machine, "
      "not with the best peer (bench/cluster.sh)." +
      "".join(" idle 10^7 is read from bench/curves.sh's own run of {} "
              "(bench/results/curves.tsv, docs/CURVES.md), not this one: "
              "the CPU time of each kind of message beside 10^7 idle "
              "processes against beside 10^3, each within 1.25 times to "
              "be met.".format(r["run"]) for r in rows if "figures" in r))
    p("")
    targeted = [r for r in rows if r["w"] not in NO_TARGET]
    n_met = sum(1 for r in targeted if r["met"])
    missed = [r["w"] for r in rows if r["met"] is False]
    line = "{} of {} targets met{}".format(
        n_met, len(targeted),
        " (idle 10^7 in the curves' run, the rest in this one)"
        if any("figures" in r for r in rows) else " in this run")
    if missed:
        line += "; not met: {} (see \"Known gaps\")".format(", ".join(missed))
    p(line + ".")
    p("")


# {instr} in GAP_WHY where a run has no instruction counts: the last
# counts (bench/FINDINGS.md), approximate.
INSTR_BEFORE = {"skynet": "~2,700", "pingpong": "~760", "ring": "~810",
                "yield": "~500", "fanin": "~290"}


def number(v):
    """Whether v (a figure from meta.txt, or None) is a number: a probe
    that failed records "?", one that could not run "-"."""
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


# Rows whose work runs on one worker at a time (the other parks), so that
# each run's figure follows the speed of the CPU that worker gets: their
# known gap lists every run.
ONE_WORKER_ROWS = ("pingpong", "ring", "yield")


def gap_why(w, icount):
    """GAP_WHY's text for w, {instr} in it the run's instructions per
    operation (bench/icount.sh), or INSTR_BEFORE's when the run has none."""
    text = GAP_WHY.get(w, GENERIC_GAP)
    per = {r["w"]: r["per_op"] for r in icount or []}
    return text.replace("{instr}", "{:,.0f}".format(per[w]) if w in per
                        else INSTR_BEFORE.get(w, "?"))


def section_gaps(p, run, rows, meta, icount=None):
    p("## Known gaps")
    p("")
    items = []
    for r in rows:
        if r["met"] or r["met"] is None:
            continue
        w = r["w"]
        if "figures" in r:
            items.append(idle_gap(r))
            continue
        head = "**{}** ({}; target {}): stepx {}".format(
            w, r["verdict"].replace("**", ""), r["target"], r["stepx"])
        if has_ratio_target(w) and r["ratio"] not in ("—", ""):
            head += ", {} {} ({})".format(ratio_name(w), r["ratio"], r["best"])
        if len(TARGETS[w]) > 1 and r["missed"]:
            head += "; missed: " + ", ".join(r["missed"])
        head += "."
        _, _, sv, _ = run.stats(w, "stepx")
        cpu = run.key_median(w, "stepx", "cpu_secs")
        if w == "timers":
            last = run.key_median(w, "stepx", "last_start_ms")
            if last is not None and cpu is not None and sv:
                head += (" Its runs took {}–{} s; in the median run the "
                         "last sleeper started {:.1f} ms after the first "
                         "submit, and a run used {:.3f} s of CPU."
                         .format(fmt(w, min(sv)), fmt(w, max(sv)), last, cpu))
        if w == "submit":
            n = run.n_of(w)
            if cpu is not None and sv and n:
                head += (" Its runs took {:.1f}–{:.1f} ns a process; the "
                         "median run used {:.0f} ns of CPU time a process."
                         .format(1e3 / max(sv), 1e3 / min(sv),
                                 cpu / n * 1e9))
        if w in ONE_WORKER_ROWS and sv:
            head += " Its runs: {} {}.".format(
                ", ".join(fmt(w, v) for v in sorted(sv)), FIGURES[w][1])
        why = gap_why(w, icount).replace(
            "{handoff}",
            "{} ns an item in this run's machine table".format(
                meta["handoff_ns"]) if number(meta.get("handoff_ns"))
            else "~36 ns an item with 1,024 records on a host with the "
                 "CPUs far apart")
        items.append(head + " " + why)
    if items and meta.get("mode") != "quick" and "c2c_ns_before" in meta:
        items.append(
            "**The host decides part of the verdicts.** Machines of this "
            "kind come on different hosts, and nearly the same code meets "
            "different targets on them: the peers' message passing "
            "(Tokio's most) slows where the CPUs are far apart (the "
            "machine table's round trip), which moves the ratio targets "
            "in stepx's favour, while the rows that start many processes "
            "from outside or make socket round trips (submit, timers, the "
            "relay rows) move against it. bench/FINDINGS.md "
            "(\"Two hosts, two verdicts\") sets two full runs side by "
            "side; the instruction counts below do not move with the "
            "host. The same host also moves its two CPUs near and far "
            "within seconds, and runs of one row spread with it: spawnidle "
            "with one worker took 0.21–0.32 s in three runs right after "
            "bench/handoff_probe.c found the CPUs near (9–13 ns an item) "
            "and 0.35–0.85 s in 27 after it found them far (33–43 ns); in "
            "the slow runs its 500,000 sends from one outside thread each "
            "pull the wake-up queue's lines from a worker that has caught "
            "up (bench/FINDINGS.md, \"Two speeds of the send phase\"). "
            "The medians take in all of them.")
    quick = meta.get("mode") == "quick"
    missing = absent(run, meta)
    if missing:
        items.append("**Not in this run**: {}. bench/run.sh measures them, "
                     "but this run's raw lines have none of their lines (it "
                     "was made without them); bench/FINDINGS.md has separate "
                     "measurements.".format(", ".join(missing)))
    if quick:
        items.append("**Quick mode**: every workload runs below its nominal "
                     "size, with fewer runs; a smoke test, not a result.")
    for w in ORDER:
        n = run.n_of(w)
        if quick or not run.has(w) or n is None or w not in NOMINAL_N:
            continue
        if n < NOMINAL_N[w]:
            txt = ("**{} runs at n = {:,}**, not the nominal {:,}.".format(
                w, n, NOMINAL_N[w]))
            peaks = []
            for rt in RUNTIMES[1:]:
                _, _, _, rss = run.stats(w, rt)
                if rss:
                    peaks.append("{} {:.1f} GB".format(
                        RUNTIME_NAMES[rt], statistics.median(rss) / 1048576.0))
            if peaks:
                txt += " At this size the peers peak at " + \
                    ", ".join(peaks) + "."
            if w in SIZE_WHY:
                txt += " " + SIZE_WHY[w]
            items.append(txt)
    if not items:
        p("None in this run: every target is met at the nominal sizes.")
    for t in items:
        p("- " + t)
    p("")


def section_icount(p, icount, meta, shared=None):
    state = meta.get("icount")
    failed = [w for w in meta.get("icount_failed", "").split(",") if w]
    if not icount and not failed and state in (None, "counted"):
        return  # no counts, and nothing to say about them (--only, say)
    p("## Instructions per operation")
    p("")
    if state is not None and state != "counted":
        p("Not counted in this run ({}); `bash bench/icount.sh --diff` "
          "counts them on its own.".format(state))
        p("")
        return
    by_shared = {r["w"]: r["per_op"] for r in shared or []}
    if icount:
        p("| workload | one operation | n → n2 | instructions at n, M | at "
          "n2, M | per operation |{}".format(
              " through the shared library |" if by_shared else ""))
        p("|---|---|---|---|---|---|{}".format("---|" if by_shared else ""))
        for r in icount:
            extra = ""
            if by_shared:
                sh = by_shared.get(r["w"])
                extra = (" {:,.1f} ({:+.0f} %) |".format(
                    sh, 100.0 * (sh / r["per_op"] - 1)) if sh else " — |")
            p("| {} | {} | {:,} → {:,} | {:.1f} | {:.1f} | {:,.1f} |{}"
              .format(r["w"], ICOUNT_OP.get(r["w"], "—"), r["n"], r["n2"],
                      r["at_n"] / 1e6, r["at_n2"] / 1e6, r["per_op"], extra))
        p("")
    by_rounds = {}  # counts per size -> the workloads counted that often
    for r in icount or []:
        if r["rounds"] > 1:
            by_rounds.setdefault(r["rounds"], []).append(r["w"])
    medians = "".join("; {}: the median of {} counts at each size".format(
        joined(ws), k) for k, ws in sorted(by_rounds.items()))
    if failed:
        p("Failed to count: {} (the run's output has valgrind's or the "
          "program's message).".format(", ".join(failed)))
        p("")
    p("Counted by callgrind ({}) on this run's stepx-bench with one worker "
      "(`--workers 1`), by `bench/icount.sh --diff`: each workload runs at "
      "n and at n2 (2n; skynet 10n, its n being a power of ten), and per "
      "operation = (instructions at n2 − instructions at n) / (n2 − n), so "
      "that start-up and teardown cancel. The counts are of every thread of "
      "the process; submit's and spawnidle's include a thread outside the "
      "engine (the submitter, the driver) and vary with valgrind's thread "
      "switches{}, while the others repeat within 0.1 %. An instruction "
      "count is not a time, "
      "but it does not move with the host's other jobs: a change in it is a "
      "change in the code path. perf stat would count the timed runs "
      "themselves, but this VM gives it no hardware counters (`<not "
      "supported>`), hence callgrind. The counts took {} s.".format(
          meta.get("valgrind", "valgrind"), medians,
          meta.get("icount_s", "?")))
    p("")
    if by_shared:
        p("stepx-bench links the library statically, and link-time "
          "optimisation runs over the library and the program together, "
          "as for stepxd and for a program that links `libstepx.a` with "
          "`-flto`. *Through the shared library* is the same program "
          "linked against `libstepx.so`, as `pkg-config --libs stepx` "
          "links a program (bench/stepx-bench-shared): the library's calls "
          "to its own functions are as direct as in the static one (it "
          "exports its public API only and binds its own calls to it), "
          "but each call of a step into the API "
          "(sx_send, sx_yield, a payload's helpers) goes through the "
          "PLT and is not inlined into the step or specialised for its "
          "arguments, so the rows whose steps call the API most per "
          "operation pay most (fanin: 32 sends a step). The timed figures "
          "above are of the static build.")
        p("")


def section_workloads(p, run, missing):
    p("## Workloads")
    for w in ORDER:
        if w in missing:
            p("")
            p("### {}: n = {:,} {}".format(w, NOMINAL_N[w], SIZES.get(w, "")))
            p("")
            p(HOW.get(w, ""))
            p("")
            p("Figure: {} ({} is better). Target: {}. Not in this run "
              "({}).".format(
                  FIGURES[w][4], FIGURES[w][2], target_text(w),
                  "bench/cluster.sh measures it" if w in CLUSTER else
                  "bench/FINDINGS.md has separate measurements"))
            continue
        if not run.has(w):
            continue
        n = run.n_of(w)
        p("")
        p("### {}: n = {} {}".format(
            w, "{:,}".format(n) if n else "?", SIZES.get(w, "")))
        p("")
        p(HOW.get(w, ""))
        p("")
        p("Figure: {} ({} is better).".format(FIGURES[w][4], FIGURES[w][2]))
        p("")
        extra_hdr = ""
        if w == "wake":
            extra_hdr = " p99 µs median (min–max) |"
        if w == "timers":
            extra_hdr = " p50 / p99 / max lateness, ms (medians) |"
        if w == "spawnidle":
            extra_hdr = " peak RSS at n=1, MiB | bytes per idle process |"
        if w == "relay-durable":
            extra_hdr = (" records per commit, median | in-memory relay, "
                         "k/s median |")
        if w == "recover":
            extra_hdr = (" first steps done, s median | filling, k jobs/s "
                         "median (not timed) |")
        if w == "checkpoint":
            extra_hdr = (" added p99 µs median | plain gap p50 µs median |")
        if w == "xpingpong":
            extra_hdr = " p99 µs median | mean µs median |"
        if w == "xdetect":
            extra_hdr = (" silent when declared, ms median | bound "
                         "(down-after + heartbeat), ms |")
        cpu = run.has_cpu()
        p("| runtime | runs ok | {} median (min–max) |{} peak RSS median, MiB "
          "| stepx / this |{}".format(FIGURES[w][1],
                                      " CPU s median |" if cpu else "",
                                      extra_hdr))
        p("|---|---|---|---|---|" + ("---|" if cpu else "")
          + ("---|" * extra_hdr.count("|")))
        _, _, sv, _ = run.stats(w, "stepx")
        sm = statistics.median(sv) if sv else None
        for rt in RUNTIMES:
            rs, good, vals, rss = run.stats(w, rt)
            if not rs:
                continue
            ratio = "—"
            if rt != "stepx" and sm is not None and vals:
                ratio = "{:.2f}".format(sm / statistics.median(vals))
            elif rt == "stepx":
                ratio = "1"
            cpu_cell = ""
            if cpu:
                c = run.cpu_median(w, rt)
                cpu_cell = " {} |".format("{:.2f}".format(c) if c is not None
                                          else "—")
            row = "| {} | {}/{} | {} |{} {} | {} |".format(
                runtime_name(w, rt), len(good), len(rs), med_range(w, vals),
                cpu_cell, mib(statistics.median(rss)) if rss else "—", ratio)
            if w == "wake":
                p99 = [float(r["kv"]["p99_us"]) for r in good
                       if "p99_us" in r["kv"]]
                if p99:
                    row += " {:.1f} ({:.1f}–{:.1f}) |".format(
                        statistics.median(p99), min(p99), max(p99))
                else:
                    row += " — |"
            if w == "timers":
                cols = []
                for key in ("p50_late_ms", "p99_late_ms", "max_late_ms"):
                    v = [float(r["kv"][key]) for r in good if key in r["kv"]]
                    cols.append("{:.1f}".format(statistics.median(v))
                                if v else "—")
                row += " {} |".format(" / ".join(cols))
            if w == "relay-durable":
                rpc = run.key_median(w, rt, "records_per_commit")
                _, _, mem, _ = run.stats("relay", rt)
                row += " {} | {} |".format(
                    "{:.0f}".format(rpc) if rpc is not None else "—",
                    fmt("relay", statistics.median(mem)) if mem else "—")
            if w == "xpingpong":
                cols = [run.key_median(w, rt, k) for k in ("p99_us", "mean_us")]
                row += "".join(" {} |".format("{:.1f}".format(v) if v is not None
                                              else "—") for v in cols)
            if w == "xdetect":
                sil = run.key_median(w, rt, "silent_ms")
                bnd = run.key_median(w, rt, "bound_ms")
                row += " {} | {} |".format(
                    "{:.0f}".format(sil) if sil is not None else "—",
                    "{:.0f}".format(bnd) if bnd is not None else "—")
            if w == "checkpoint":
                a99 = run.key_median(w, rt, "added_p99_us")
                b50 = run.key_median(w, rt, "base_p50_us")
                row += " {} | {} |".format(
                    "{:.0f}".format(a99) if a99 is not None else "—",
                    "{:.1f}".format(b50) if b50 is not None else "—")
            if w == "recover":
                fs = run.key_median(w, rt, "first_step_secs")
                fr = run.key_median(w, rt, "fill_jobs_per_sec")
                row += " {} | {} |".format(
                    "{:.3f}".format(fs) if fs is not None else "—",
                    "{:.0f}".format(fr / 1e3) if fr is not None else "—")
            if w == "spawnidle":
                base = [r["rss_kb"] for r in run.by.get(("spawnidle0", rt), [])
                        if r["ok"]]
                b = bytes_per_proc(run.by, rt)
                row += " {} | {} |".format(
                    mib(statistics.median(base)) if base else "—",
                    "{:.0f}".format(b) if b is not None else "—")
            p(row)
        bad = [r for rt in RUNTIMES for r in run.by.get((w, rt), [])
               if not r["ok"]]
        for r in bad[:4]:
            p("")
            p("- failed run: {} #{}: exit {}, `{}`".format(
                r["rt"], r["round"], r["rc"], r["line"][:200]))
        if len(bad) > 4:
            p("")
            p("- and {} more failed runs (see the raw lines)".format(
                len(bad) - 4))
        if w == "idle":
            pk = [r["kv"].get("parks") for r in run.by.get((w, "stepx"), [])
                  if r["ok"] and "parks" in r["kv"]]
            if pk:
                p("")
                p("stepx worker parks during the idle window (a park after a "
                  "wake-up or a timed-out park), per run: {}.".format(
                      ", ".join(pk)))
        if w == "wake":
            ap = [r["kv"].get("all_parked_pct")
                  for r in run.by.get((w, "stepx"), [])
                  if r["ok"] and "all_parked_pct" in r["kv"]]
            if ap:
                p("")
                p("stepx: share of sends that found every worker parked, per "
                  "run: {} %.".format(", ".join(ap)))
    p("")


def main(argv):
    icount_path = None
    if len(argv) == 3 and argv[1] == "--from":
        raw_path = os.path.join(argv[2], "raw.tsv")
        meta_path = os.path.join(argv[2], "meta.txt")
        icount_path = os.path.join(argv[2], "icount.tsv")
    elif len(argv) in (3, 4) and not argv[1].startswith("-"):
        raw_path, meta_path = argv[1], argv[2]
        icount_path = argv[3] if len(argv) == 4 else None
    else:
        sys.stderr.write(__doc__)
        return 2
    run = Run(load(raw_path))
    meta = load_meta(meta_path)
    rows = [run.verdict(w) for w in ORDER if run.has(w)]
    idle = idle_row(load_curves(os.path.join(os.path.dirname(raw_path),
                                              "curves.tsv")))
    if idle is not None:
        rows.append(idle)

    out = []
    p = out.append
    p("# stepx benchmarks")
    p("")
    # The peers this run has (a run from before Tokio joined has none).
    names = {"go": "Go", "erlang": "Erlang", "caf": "CAF (C++ actors)",
             "tokio": "Tokio (Rust)"}
    peers = [names[rt] for rt in ("go", "erlang", "caf", "tokio")
             if any(k[1] == rt for k in run.by)]
    peer_text = (", ".join(peers[:-1]) + " and " + peers[-1]
                 if len(peers) > 1 else "".join(peers) or "no peer")
    p("stepx against {} on the same machine in "
      "one run: {} ({} mode, {} runs of each program per workload), stepx at "
      "commit {}. Generated by `{}` (bench/run.sh, bench/report.py); the raw "
      "lines are in {} (see \"Raw data\" at the end). The research notes "
      "behind these figures (profiles, A/B measurements, what was tried and "
      "dropped) are in bench/FINDINGS.md.".format(
          peer_text, meta.get("date", "?"), meta.get("mode", "?"),
          meta.get("runs", "?"),
          meta.get("commit", "?"), meta.get("command", "?"),
          rel_path(raw_path)))
    p("")
    section_summary(p, rows, absent(run, meta))
    section_gaps(p, run, rows, meta, load_icount(icount_path))
    shared_path = (os.path.join(os.path.dirname(icount_path),
                                "icount-shared.tsv") if icount_path else None)
    section_icount(p, load_icount(icount_path), meta,
                   load_icount(shared_path))
    section_machine(p, meta)
    section_method(p, meta, run, bool(load_icount(shared_path)))
    section_workloads(p, run, absent(run, meta))
    p("## Raw data")
    p("")
    has_icount = icount_path is not None and os.path.exists(icount_path)
    p("Every run's own output line is in {} (tab-separated: workload, "
      "runtime, round, exit code, peak RSS in kB, {}the program's line; "
      "`spawnidle0` is the spawnidle program at n = 1), {}and the machine "
      "and build figures above in {}. This page is rebuilt from them, "
      "without running anything, by".format(
          rel_path(raw_path),
          "CPU seconds, " if run.has_cpu() else "",
          "the instruction counts in {} (workload, n, n2, instructions at "
          "n, at n2, per operation), ".format(rel_path(icount_path))
          if has_icount else "",
          rel_path(meta_path)))
    p("")
    p("```sh")
    here = os.path.dirname(os.path.abspath(raw_path))
    if (os.path.basename(raw_path) == "raw.tsv"
            and os.path.basename(meta_path) == "meta.txt"
            and os.path.dirname(os.path.abspath(meta_path)) == here
            and (not has_icount
                 or os.path.abspath(icount_path)
                 == os.path.join(here, "icount.tsv"))):
        p("python3 bench/report.py --from {} > docs/BENCHMARKS.md".format(
            rel_path(here)))
    else:
        p("python3 bench/report.py {} {}{} > docs/BENCHMARKS.md".format(
            rel_path(raw_path), rel_path(meta_path),
            " " + rel_path(icount_path) if has_icount else ""))
    p("```")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

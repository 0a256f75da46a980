#!/usr/bin/python3
"""bench/report.py: turns bench/run.sh's raw lines into docs/BENCHMARKS.md.

    python3 bench/report.py build/bench/raw.tsv build/bench/meta.txt > OUT

raw.tsv: one run a line, tab-separated: workload (spawnidle0 = the spawnidle
baseline with n=1), runtime, round, exit code, peak RSS in kB, and the
program's own line ("bench=... runtime=... ok=1 key=value ...").
meta.txt: key=value lines about the machine and the run. bench/FINDINGS.md,
when present, is copied in after the summary: the hand-written analysis of
the targets that were missed (it is not regenerated; update it with the
run). Standard library only.
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
}
# Relative targets: stepx / best peer (ratio of the figure).
RELATIVE = {
    "skynet": ("<=", 0.5),
    "pingpong": ("<=", 0.5),
    "ring": ("<=", 0.5),
    "fanin": (">=", 2.0),
    "spawnidle": ("<=", 0.5),
}
# Absolute targets on the stepx figure (in the unit above).
ABSOLUTE = {
    "submit": (">=", 5.0, "≥ 5 M per second"),
    "yield": ("<=", 50.0, "≤ 50 ns"),
    "wake": ("<=", 20.0, "p50 ≤ 20 µs"),
    "idle": ("<=", 0.05, "≤ 0.05 CPU s over 5 s"),
    "timers": ("<=", 0.07, "≤ 0.07 s; p99 lateness ≤ 2 ms"),
    "relay": (">=", 200.0, "≥ 200 k jobs per second"),
    "relay1": (">=", 200.0, "≥ 200 k jobs per second"),
}
# A second condition on a key of the stepx line (median over ok runs).
SECOND = {
    "timers": ("p99_late_ms", "<=", 2.0, "p99 late {:.1f} ms"),
}
ORDER = ["skynet", "pingpong", "ring", "fanin", "spawnidle", "submit", "yield",
         "wake", "idle", "timers", "relay", "relay1"]
RUNTIMES = ["stepx", "go", "erlang", "caf"]
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
    "relay": "jobs (counter(1) submitted and waited for, 8 connections, "
             "64 jobs in flight each)",
    "relay1": "jobs (as relay, but one request at a time on each of the 8 "
              "connections: `--window 1`)",
}


METHOD = """## How each workload is built (same shape everywhere)

- **skynet**: every process spawns its 10 children and sums the 10 numbers
  they send back; a leaf sends its number. stepx uses `SX_CMD_SPAWN_WAIT`
  (the child's result is the parent's completion event); Go a channel per
  parent; Erlang and CAF a message to the parent.
- **pingpong / ring**: the same token program: the token starts at n−1 at
  process 0, each hop forwards t−1; whoever sees 0 sends a stop (−1) on
  and finishes, whoever sees the stop forwards it and finishes; each
  process reports how many messages it saw and the driver checks the total
  (n + m − 1). A stepx process sends with `sx_send` (the direct send from
  a step: no answer, no argument packing) and waits with IDLE; Go uses one
  1-slot channel per goroutine as its mailbox.
- **fanin**: 2 producers × n/2 messages to one consumer that counts them
  and checks that each producer's messages arrive in order. A stepx
  producer sends 32 messages per step with `sx_send` and CONTINUEs (the
  step runs again at once). Go's consumer reads one channel with 1024
  slots (a Go channel cannot be unbounded, so Go's producers block when it
  is full); Erlang's and CAF's mailboxes are unbounded like stepx's, and a
  CAF producer sends its n/2 messages from its start-up function. The
  consumer's backlog shows in peak RSS.
- **spawnidle**: n processes that each wait for one message, then one
  message each, then wait for all. The "wait for all" is a shared count in
  every runtime: stepx's finished count (`sx_engine_stats_get`, polled every
  20 µs by the driver thread), Go's WaitGroup, an Erlang `counters` counter
  polled every 1 ms, a C++ atomic polled every 20 µs. Bytes per idle process
  = (median peak RSS at n − median peak RSS of the same program at n = 1) / n;
  it includes the driver's list of handles (stepx 16 B PIDs, Go an 8 B slice
  slot and a 96 B channel, Erlang a list cell, CAF an 8 B actor handle).
- **submit**: an outside thread submits n one-step processes through
  `sx_engine_submit`; Go's counterpart starts n goroutines from `main`.
- **yield**: stepx only has commands: one process yields n commands, each
  completed at once by a handler on the same worker. Go's figure is the
  nearest thing with goroutines, a request/response round trip on
  unbuffered channels with a helper goroutine that answers at once; it is a
  reference, not the same mechanism (a plain Go function call would be a few
  ns).
- **wake**: an outside thread sends the send time to an IDLE process every
  1 ms (after the previous sample arrived); the step records now − then.
  stepx's sender is not a worker, so the message goes through the global
  queue and a futex wake of a parked worker. In Go the receiver is readied
  by the sending thread and, as `main` then sleeps, usually runs on that same
  thread at once: Go's figure has no cross-core wake-up in it.
- **timers**: the driver submits n processes, each with a sleep drawn
  from a fixed xorshift sequence (uniform 1–50 ms); a process notes the
  time, yields `SX_CMD_SLEEP`, and on the answer records its lateness
  (now − (then + ms)); a negative lateness (a timer firing early) or a
  missing one fails the run. The figure is the whole time from the first
  submit to the last finish; p99 lateness is the second target. Go (a
  reference; BENCHMARKS.md names no peer): n goroutines started from
  `main`, each `time.Sleep`s the same sequence and records its lateness.
- **relay**: a relay server (the one stepxd runs, `sx_server_start`) in
  the benchmark process on a Unix socket, and one client thread with 8
  connections through the C client (relay.h), polling their sockets
  (`sx_client_fd`) and answering whichever has a reply, each connection
  doing its share of the n jobs: `submit` counter(1) (the shipped type: one no-op yield,
  then DONE 1), then `wait` for it; a job counts when the wait answers
  result 1 in 2 steps. Each connection keeps a window of 64 jobs in flight
  with the pipelined client API (`sx_client_post_submit`, `post_wait`,
  `next_reply`; the line says `window=64`): a job's wait is posted when its
  submit's reply arrives, a new job starts when one ends, and requests and
  replies travel many to a write. **relay1** is the same program with
  `--window 1`: one request at a time on each connection (a submit, its
  reply, a wait, its reply), the literal reading of BENCHMARKS.md's "submits
  and waits"; BENCHMARKS.md does not say whether a connection may have
  several jobs in flight, so both are reported against the one target. The client, server loop, engine workers and I/O loop
  share the 2 cores. The clock starts when all 8 connections have said
  hello. No peer.
- **idle**: a started runtime with nothing to do (Go: one goroutine blocked
  on a channel); CPU seconds (user + sys, `getrusage`) over the idle window,
  after 10 ms of settling.
- Every program times only its workload (start-up of the VM or the engine
  is not counted, except that each run is a fresh process); peak RSS is the
  whole process's. Erlang's RSS includes about 130 MB of VM start-up
  (the process table sized by `+P 5000000`), which the spawnidle baseline
  subtracts.
- On this VM a fresh page costs tens of µs (see the machine table; bare
  metal is well under 1 µs), so workloads that grow memory (spawnidle,
  skynet, a fanin backlog) mostly measure page faults, and a runtime that
  uses less memory per process gains more here than it would on bare metal.
"""


# The contract's sizes (docs/BENCHMARKS.md), to flag a run that used
# another n.
CONTRACT_N = {"skynet": 1000000, "pingpong": 2000000, "ring": 10000000,
              "fanin": 10000000, "spawnidle": 1000000, "submit": 1000000,
              "yield": 10000000, "wake": 10000, "idle": 5, "timers": 100000,
              "relay": 100000, "relay1": 100000}


def parse_line(line):
    kv = {}
    for tok in line.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            kv[k] = v
    return kv


def load(raw_path):
    runs = []
    with open(raw_path) as f:
        for row in f:
            row = row.rstrip("\n")
            if not row:
                continue
            parts = row.split("\t", 5)
            if len(parts) < 6:
                continue
            w, rt, rnd, rc, rss, line = parts
            kv = parse_line(line)
            runs.append({"w": w, "rt": rt, "round": int(rnd), "rc": int(rc),
                         "rss_kb": int(rss or 0), "line": line, "kv": kv,
                         "ok": kv.get("ok") == "1" and int(rc) == 0})
    return runs


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


def mib(kb):
    return "{:.1f}".format(kb / 1024.0)


def met(op, value, bound):
    return value <= bound if op == "<=" else value >= bound


def main():
    runs = load(sys.argv[1])
    meta = {}
    with open(sys.argv[2]) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                meta[k] = v

    by = {}
    for r in runs:
        by.setdefault((r["w"], r["rt"]), []).append(r)

    def stats(w, rt):
        rs = by.get((w, rt), [])
        good = [r for r in rs if r["ok"]]
        vals = [figure(w, r["kv"]) for r in good]
        rss = [r["rss_kb"] for r in good]
        return rs, good, vals, rss

    out = []
    p = out.append
    p("# stepx benchmarks: results")
    p("")
    p("Generated by `{}` (bench/run.sh, bench/report.py) on {}; {} mode, {} runs"
      " of each program per workload, interleaved (stepx, go, erlang, caf, "
      "stepx, …). Figures are medians (min–max) over the runs that checked "
      "their own result (`ok=1`); peak RSS is the median of `/usr/bin/time -v`'s"
      " maximum resident set size. The contract (workloads, sizes, targets) is "
      "BENCHMARKS.md in the design notes; the programs are bench/stepx_bench.c "
      "and bench/peers/.".format(meta.get("command", "?"), meta.get("date", "?"),
                                 meta.get("mode", "?"), meta.get("runs", "?")))
    p("")
    p("## Machine and versions")
    p("")
    p("| | |")
    p("|---|---|")
    p("| machine | {} cores (`nproc`), {}, {} RAM |".format(
        meta.get("nproc", "?"), meta.get("cpu", "?"), meta.get("mem", "?")))
    p("| kernel | {} |".format(meta.get("kernel", "?")))
    p("| fresh 4 KiB page (bench/pagefault_probe.c, 256 MiB) | {} µs |".format(
        meta.get("pagefault_us", "?")))
    p("| load average (1, 5, 15 min) | before {}; after {} |".format(
        meta.get("load_before", "?"), meta.get("load_after", "?")))
    p("| stepx | commit {}{}, meson buildtype release, {} |".format(
        meta.get("commit", "?"),
        " (engine/process with uncommitted changes)"
        if meta.get("dirty", "0") not in ("0", "") else "",
        meta.get("gcc", "?")))
    p("| Go | {} (GOMAXPROCS = cores) |".format(meta.get("go", "?")))
    p("| Erlang | {} (`erl -noshell +P 5000000`, schedulers = cores) |".format(
        meta.get("erlang", "?")))
    p("| CAF | {} (event-based actors, scheduler threads = cores), g++ -O2 |"
      .format(meta.get("caf", "?")))
    p("| whole run | {} s |".format(meta.get("elapsed_s", "?")))
    p("")
    p("The machine is a shared 2-core VM: other jobs (builds, test suites) ran "
      "beside the suite, so absolute times drift from run to run. The "
      "interleaving is there so that every runtime sees the same drift; read "
      "the ratios, and the min–max spread, rather than single figures.")
    p("")

    # ---- summary ----
    summary = []
    for w in ORDER:
        if not any(k[0] == w for k in by):
            continue
        srs, sgood, sv, _ = stats(w, "stepx")
        if not sv:
            summary.append((w, "no ok run", "", "", "", "**not met** (no result)"))
            continue
        # A run that failed its check or did not finish is not left out
        # silently: the median is over the ok runs, and the summary says so.
        s_failed = len(srs) - len(sgood)
        missing = []  # peers that ran this workload but have no ok run
        sm = statistics.median(sv)
        unit = FIGURES[w][1]
        peers = []
        for rt in RUNTIMES[1:]:
            rs, _, v, _ = stats(w, rt)
            if v:
                peers.append((rt, statistics.median(v)))
            elif rs:
                missing.append("{} 0/{} ok".format(rt, len(rs)))
        best = None
        if peers:
            if FIGURES[w][2] == "lower":
                best = min(peers, key=lambda x: x[1])
            else:
                best = max(peers, key=lambda x: x[1])
        stepx_txt = "{} {}".format(fmt(w, sm), unit)
        if s_failed:
            stepx_txt += " ({}/{} runs ok)".format(len(sgood), len(srs))
        best_txt = ("{} {} {}".format(best[0], fmt(w, best[1]), unit)
                    if best else "—")
        if best:
            brs, bgood, _, _ = stats(w, best[0])
            if len(bgood) < len(brs):
                best_txt += " ({}/{} runs ok)".format(len(bgood), len(brs))
        if missing:
            best_txt += "; no ok run: " + ", ".join(missing)
        ratio = sm / best[1] if best and best[1] > 0 else None
        ratio_txt = "{:.2f}".format(ratio) if ratio is not None else "—"
        if w in RELATIVE:
            op, bound = RELATIVE[w]
            tgt = "stepx/best {} {}".format("≤" if op == "<=" else "≥", bound)
            ok = ratio is not None and met(op, ratio, bound)
            if w == "spawnidle":
                tgt += "; ≤ 256 B per idle process"
                b = bytes_per_proc(by, "stepx")
                if b is None:
                    ok = False
                    stepx_txt += "; B/proc: —"
                else:
                    ok = ok and b <= 256
                    stepx_txt += "; {:.0f} B/proc".format(b)
        else:
            op, bound, tgt = ABSOLUTE[w]
            ok = met(op, sm, bound)
            if w in SECOND:
                key, op2, bound2, txt = SECOND[w]
                _, good, _, _ = stats(w, "stepx")
                v2 = [float(r["kv"][key]) for r in good if key in r["kv"]]
                if v2:
                    m2 = statistics.median(v2)
                    stepx_txt += "; " + txt.format(m2)
                    ok = ok and met(op2, m2, bound2)
                else:
                    ok = False
        verdict = "**met**" if ok else "**not met**"
        if s_failed:
            # A stepx run that failed its own check is a failure, whatever
            # the others measured.
            verdict = "**not met** ({} of {} stepx runs failed)".format(
                s_failed, len(srs))
        elif ok and missing and w in RELATIVE:
            # The best peer may be the one that failed: no verdict.
            verdict = "**unverified** (a peer has no ok run)"
        summary.append((w, stepx_txt, best_txt, ratio_txt, tgt, verdict))

    p("## Summary")
    p("")
    p("Ratio = stepx's median / the best peer's median of the same figure "
      "(for messages or submits per second higher is better, so a fanin ratio "
      "above 1 is stepx ahead; for times lower is better). For submit, yield, "
      "wake, idle, timers and relay the target is absolute and the Go figure, "
      "where there is one, is a reference.")
    p("")
    p("| workload | stepx | best peer | ratio | target | verdict |")
    p("|---|---|---|---|---|---|")
    for row in summary:
        p("| {} | {} | {} | {} | {} | {} |".format(*row))
    p("")

    # ---- what was learned: bench/FINDINGS.md, written by hand ----
    findings = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "FINDINGS.md")
    if os.path.exists(findings):
        with open(findings) as f:
            text = f.read().strip("\n")
        p(text)
        p("")

    # ---- per workload ----
    p("## Workloads")
    for w in ORDER:
        if not any(k[0] == w for k in by):
            continue
        n = None
        for rt in RUNTIMES:
            rs = by.get((w, rt), [])
            for r in rs:
                if "n" in r["kv"]:
                    n = r["kv"]["n"]
                    break
            if n:
                break
        p("")
        note = ""
        if n and w in CONTRACT_N and int(n) != CONTRACT_N[w]:
            note = "; BENCHMARKS.md's size is {:,}".format(CONTRACT_N[w])
        p("### {} (n = {} {}{})".format(
            w, "{:,}".format(int(n)) if n else "?", SIZES.get(w, ""), note))
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
        p("| runtime | runs ok | {} median (min–max) | peak RSS median, MiB | "
          "stepx / this |{}".format(FIGURES[w][1], extra_hdr))
        p("|---|---|---|---|---|" + ("---|" * extra_hdr.count("|")))
        _, _, sv, _ = stats(w, "stepx")
        sm = statistics.median(sv) if sv else None
        for rt in RUNTIMES:
            rs, good, vals, rss = stats(w, rt)
            if not rs:
                continue
            ratio = "—"
            if rt != "stepx" and sm is not None and vals:
                ratio = "{:.2f}".format(sm / statistics.median(vals))
            elif rt == "stepx":
                ratio = "1"
            row = "| {} | {}/{} | {} | {} | {} |".format(
                rt, len(good), len(rs), med_range(w, vals),
                mib(statistics.median(rss)) if rss else "—", ratio)
            if w == "wake":
                p99 = [float(r["kv"]["p99_us"]) for r in good if "p99_us" in r["kv"]]
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
            if w == "spawnidle":
                base = [r["rss_kb"] for r in by.get(("spawnidle0", rt), [])
                        if r["ok"]]
                b = bytes_per_proc(by, rt)
                row += " {} | {} |".format(
                    mib(statistics.median(base)) if base else "—",
                    "{:.0f}".format(b) if b is not None else "—")
            p(row)
        bad = [r for rt in RUNTIMES for r in by.get((w, rt), []) if not r["ok"]]
        for r in bad[:4]:
            p("")
            p("- failed run: {} #{}: exit {}, `{}`".format(
                r["rt"], r["round"], r["rc"], r["line"][:200]))
        if len(bad) > 4:
            p("")
            p("- and {} more failed runs (see the raw lines)".format(
                len(bad) - 4))
        if w == "idle":
            pk = [r["kv"].get("parks") for r in by.get((w, "stepx"), [])
                  if r["ok"] and "parks" in r["kv"]]
            if pk:
                p("")
                p("stepx worker parks during the idle window (a park after a "
                  "wake-up or a timed-out park): {}.".format(", ".join(pk)))
        if w == "wake":
            ap = [r["kv"].get("all_parked_pct") for r in by.get((w, "stepx"), [])
                  if r["ok"] and "all_parked_pct" in r["kv"]]
            if ap:
                p("")
                p("stepx: share of sends that found every worker parked, per "
                  "run: {} %.".format(", ".join(ap)))
    p("")
    p(METHOD)
    p("")
    p("## Raw lines")
    p("")
    p("Every run's own output line, in the order they ran (`rss_kb` from "
      "`/usr/bin/time -v`).")
    p("")
    p("```")
    for r in runs:
        p("{}\trss_kb={}\t{}".format(r["w"] if r["w"] != "spawnidle0"
                                     else "spawnidle0", r["rss_kb"], r["line"]))
    p("```")
    sys.stdout.write("\n".join(out) + "\n")


def bytes_per_proc(by, rt):
    big = [r for r in by.get(("spawnidle", rt), []) if r["ok"]]
    base = [r for r in by.get(("spawnidle0", rt), []) if r["ok"]]
    if not big or not base:
        return None
    n = int(big[0]["kv"]["n"])
    d = statistics.median([r["rss_kb"] for r in big]) - \
        statistics.median([r["rss_kb"] for r in base])
    return d * 1024.0 / n


if __name__ == "__main__":
    main()

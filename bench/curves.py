#!/usr/bin/python3
"""bench/curves.py: draws bench/curves.sh's cost curves and writes
docs/CURVES.md.

    python3 bench/curves.py TSV [--out-dir DIR] [--png PNGDIR]

Reads TSV (bench/curves.sh's: tab-separated curve, runtime, x, round, exit
code, peak RSS in kB, the program's line; "# key=value" lines about the
machine and the run) and writes the figures into DIR/curves/ and the page
beside them, as DIR's CURVES.md (DIR: docs/ by default). Runs nothing,
so

    python3 bench/curves.py bench/results/curves.tsv

redraws the committed figures from the stored lines (after a change to
this script, say). Each point is the median of the runs at it that passed
their own check (exit code 0 and ok=1); the tables give the min-max
too. matplotlib (Debian's python3-matplotlib) draws, with the Agg
backend; the SVGs carry no date, so the same lines draw the same files.
--png writes PNG copies into PNGDIR as well, for a look with a viewer
that has no SVG.
"""
import os
import statistics
import sys

try:
    import matplotlib
except ImportError:
    # Debian's python3-matplotlib is Debian's python3's: run again under it
    # when another python3 (a pyenv one, say) comes first on PATH.
    DEBIAN_PY = "/usr/bin/python3"
    if os.path.exists(DEBIAN_PY) and \
            os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PY):
        os.execv(DEBIAN_PY, [DEBIAN_PY] + sys.argv)
    raise

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402

RUNTIMES = ["stepx", "go", "erlang", "caf", "tokio"]
NAMES = {"stepx": "stepx", "go": "Go", "erlang": "Erlang", "caf": "CAF",
         "tokio": "Tokio"}
COLORS = {"stepx": "#b2182b", "go": "#2166ac", "erlang": "#762a83",
          "caf": "#e08214", "tokio": "#1b7837"}
MARKERS = {"stepx": "o", "go": "s", "erlang": "^", "caf": "D", "tokio": "v"}
# A curve counts as flat when its largest point is within this factor of
# its smallest (either way).
FLAT = 1.25
# --png DIR: PNG copies of the figures too (for a look; not committed).
PNG_DIR = None


def parse_kv(line):
    kv = {}
    for tok in line.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            kv[k] = v
    return kv


def load(path):
    meta, rows = {}, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("#"):
                k, _, v = line[1:].strip().partition("=")
                meta[k] = v
                continue
            curve, rt, x, rnd, rc, rss, text = line.split("\t", 6)
            kv = parse_kv(text)
            ok = rc == "0" and (kv.get("ok") == "1" or
                                (curve == "memlat" and "ns_per_load" in kv))
            rows.append({"curve": curve, "rt": rt, "x": int(x),
                         "round": int(rnd), "rc": int(rc), "rss_kb": int(rss),
                         "kv": kv, "ok": ok, "text": text})
    return meta, rows


class Curves:
    def __init__(self, rows):
        self.rows = rows

    def runs(self, curve, rt):
        """{x: [row, ...]} of the runs that passed."""
        out = {}
        for r in self.rows:
            if r["curve"] == curve and r["rt"] == rt and r["ok"]:
                out.setdefault(r["x"], []).append(r)
        return out

    def failed(self):
        return [r for r in self.rows if not r["ok"]]

    def series(self, curve, rt, fn):
        """{x: [value, ...]}: fn(row) of each passed run (None skipped)."""
        out = {}
        for x, rs in self.runs(curve, rt).items():
            vals = [v for v in (fn(r) for r in rs) if v is not None]
            if vals:
                out[x] = vals
        return out

    def key(self, curve, rt, key, scale=1.0):
        return self.series(curve, rt, lambda r: float(r["kv"][key]) * scale
                           if key in r["kv"] else None)

    def cpu_per_op(self, curve, rt="stepx"):
        """ns of the process's CPU time per operation (cpu_secs over n)."""
        return self.series(curve, rt, lambda r: float(r["kv"]["cpu_secs"])
                           * 1e9 / float(r["kv"]["n"])
                           if "cpu_secs" in r["kv"] else None)

    def bytes_per_proc(self, rt):
        """spawnidle's bytes per process: peak RSS minus the median peak
        RSS at n = 1 (spawnidle0), over n; as bench/report.py."""
        base = [r["rss_kb"] for rs in self.runs("spawnidle0", rt).values()
                for r in rs]
        if not base:
            return {}
        b = statistics.median(base)
        return self.series("spawnidle", rt,
                           lambda r: (r["rss_kb"] - b) * 1024.0 / r["x"])

    def idle_population(self, key, per_k=False, scale=1.0):
        """A figure of the --idle runs (all three workloads pooled: each
        spawns and ends the same K idle processes)."""
        out = {}
        for c in ("pingpong-idle", "fanin-idle", "idlemsg-idle"):
            for x, vals in self.key(c, "stepx", key, scale).items():
                out.setdefault(x, []).extend(
                    v / x if per_k else v for v in vals)
        return out


def scaled(series, k):
    return {x: [v * k for v in vals] for x, vals in series.items()}


def med(vals):
    return statistics.median(vals)


def pts(series):
    """Sorted (x, median, min, max, runs)."""
    return [(x, med(v), min(v), max(v), len(v))
            for x, v in sorted(series.items())]


def fmt_num(v):
    if v is None:
        return "—"
    a = abs(v)
    if a >= 100:
        return "{:,.0f}".format(v)
    if a >= 10:
        return "{:.1f}".format(v)
    return "{:.2f}".format(v)


def cell(vals):
    if not vals:
        return "—"
    if len(vals) == 1:
        return fmt_num(vals[0]) + " (1 run)"
    return "{} ({}–{})".format(fmt_num(med(vals)), fmt_num(min(vals)),
                               fmt_num(max(vals)))


def commas(v):
    try:
        return "{:,}".format(int(v))
    except (TypeError, ValueError):
        return "?"


def pow10(x):
    e = len(str(x)) - 1
    if x == 10 ** e and x >= 1000:
        return "10^{}".format(e)
    return "{:,}".format(x)


def ratio(series):
    """The median at the largest x over the median at the smallest."""
    p = pts(series)
    if len(p) < 2 or p[0][1] == 0:
        return None
    return p[-1][1] / p[0][1]


# ---- figures ----------------------------------------------------------------

def style():
    plt.rcParams.update({
        "svg.fonttype": "none",  # text stays text: small, searchable SVGs
        "svg.hashsalt": "stepx-curves",  # the same lines, the same file
        "font.size": 9,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
    })


def plot(ax, series, label, color, marker, dashed=False):
    p = pts(series)
    if not p:
        return
    xs = [q[0] for q in p]
    ys = [q[1] for q in p]
    lo = [q[1] - q[2] for q in p]
    hi = [q[3] - q[1] for q in p]
    ax.errorbar(xs, ys, yerr=[lo, hi], label=label, color=color,
                marker=marker, markersize=4, linewidth=1.4, capsize=2,
                linestyle="--" if dashed else "-")


def plain(v, _pos=None):
    """A tick label without powers of ten on a y axis: 200, 1,000, 0.05."""
    if v >= 1000:
        return "{:,.0f}".format(v)
    return "{:g}".format(v)


def finish(ax, title, xlabel, ylabel, logy=True, legend=True):
    ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, p: ""))
    ax.yaxis.set_major_formatter(FuncFormatter(plain))
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if legend:
        ax.legend(fontsize=8, frameon=False)


def save(fig, path, note, top=1.0):
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="#555555",
                 ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.08 if note else 0, 1, top))
    fig.savefig(path, format="svg", metadata={"Date": None})
    if PNG_DIR:
        name = os.path.splitext(os.path.basename(path))[0] + ".png"
        fig.savefig(os.path.join(PNG_DIR, name), format="png", dpi=110)
    plt.close(fig)


def fig_spawnidle(c, meta, path):
    fig, axs = plt.subplots(1, 3, figsize=(13, 4.6))
    for rt in RUNTIMES:
        plot(axs[0], c.bytes_per_proc(rt), NAMES[rt], COLORS[rt], MARKERS[rt])
        plot(axs[1], c.key("spawnidle", rt, "ns_per_op", 1e-3), NAMES[rt],
             COLORS[rt], MARKERS[rt])
    plot(axs[0], c.idle_population("idle_bytes_per_proc"),
         "stepx --idle K: resident, before any message", COLORS["stepx"],
         "x", dashed=True)
    finish(axs[0], "memory per idle process", "processes",
           "bytes per process", legend=False)
    finish(axs[1], "spawnidle: spawn, one message, finish",
           "processes", "µs per process", legend=False)
    handles, labels = axs[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=7, fontsize=8,
               frameon=False)
    plot(axs[2], c.idle_population("idle_spawn_secs", True, 1e6),
         "submit until IDLE", COLORS["stepx"], "o")
    plot(axs[2], c.idle_population("idle_end_secs", True, 1e6),
         "sx_engine_stop (a cancel each)", "#4d4d4d", "s")
    finish(axs[2], "stepx --idle K: spawning and ending them",
           "idle processes K", "µs per process", logy=False)
    axs[2].set_ylim(bottom=0)
    save(fig, path, "Bytes: peak RSS minus the peak RSS at n = 1, over n "
         "(the dashed line: VmRSS growth over K with --idle). "
         + peer_note(meta) + " " + machine_note(meta), top=0.92)


def fig_submit(c, meta, path):
    fig, ax = plt.subplots(1, 1, figsize=(6.5, 4.2))
    for rt in ("stepx", "go"):
        plot(ax, c.key("submit", rt, "ns_per_op"), NAMES[rt], COLORS[rt],
             MARKERS[rt])
    finish(ax, "submit: n one-step processes from outside", "processes n",
           "ns per process (submit to finish, n in a row)")
    save(fig, path, "Go: n goroutines started from main (its only peer "
         "with submit). " + machine_note(meta))


def fig_idle(c, meta, path):
    fig, axs = plt.subplots(1, 2, figsize=(11.5, 4.4))
    plot(axs[0], c.key("pingpong-idle", "stepx", "ns_per_op"),
         "pingpong, ns per hop", COLORS["stepx"], "o")
    plot(axs[0], c.cpu_per_op("pingpong-idle"), "pingpong, CPU ns per hop",
         COLORS["stepx"], "o", dashed=True)
    plot(axs[0], c.key("fanin-idle", "stepx", "ns_per_op"),
         "fanin, ns per message", "#e08214", "s")
    plot(axs[0], c.cpu_per_op("fanin-idle"), "fanin, CPU ns per message",
         "#e08214", "s", dashed=True)
    finish(axs[0], "two busy processes beside K idle ones",
           "idle processes K", "ns", logy=False)
    axs[0].set_ylim(bottom=0)
    plot(axs[1], c.key("idlemsg-idle", "stepx", "ns_per_op"),
         "random idle process", COLORS["stepx"], "o")
    plot(axs[1], c.cpu_per_op("idlemsg-idle"), "random, CPU time",
         COLORS["stepx"], "o", dashed=True)
    plot(axs[1], c.key("idlemsg-idle", "stepx", "in_order_ns_per_op"),
         "in submit order (control)", "#2166ac", "s")
    plot(axs[1], c.key("idlemsg-idle", "stepx", "in_order_cpu_ns_per_op"),
         "in order, CPU time", "#2166ac", "s", dashed=True)
    plot(axs[1], c.key("memlat", "probe", "cpu_ns_per_load"),
         "memlat: one random load in K × 96 B (CPU time)", "#4d4d4d", "x",
         dashed=True)
    finish(axs[1], "idlemsg: a ping to one of K idle processes, its answer",
           "idle processes K", "ns per round trip (memlat: per load)")
    save(fig, path, "stepx only (the peers have no --idle mode). Solid: "
         "time; dashed: the process's CPU time (less stretched by a busy "
         "host). " + machine_note(meta))


def fig_timers(c, meta, path):
    fig, axs = plt.subplots(1, 2, figsize=(11, 4.2))
    for rt in ("stepx", "go"):
        plot(axs[0], c.key("timers", rt, "secs"), NAMES[rt], COLORS[rt],
             MARKERS[rt])
        plot(axs[1], c.key("timers", rt, "p99_late_ms"), NAMES[rt],
             COLORS[rt], MARKERS[rt])
    axs[0].axhline(0.05, color="#999999", linewidth=0.8, linestyle=":")
    axs[0].text(1.5e5, 0.053, "the longest sleep, 50 ms", fontsize=7,
                color="#666666")
    finish(axs[0], "timers: n processes sleeping 1–50 ms", "processes n",
           "seconds, first submit to last finish")
    finish(axs[1], "how late the wake-ups are", "processes n",
           "p99 lateness, ms")
    save(fig, path, "Go: n goroutines in time.Sleep (its only peer with "
         "timers). " + machine_note(meta))


def machine_note(meta):
    return ("{} cores, {}; a fresh 4 KiB page costs {} µs here; load {} "
            "before, {} after; median of {} runs, min–max bars ({} at 10^7 "
            "and at the spawnidle peers' largest size).").format(
        meta.get("nproc", "?"), meta.get("mem", "?"),
        meta.get("pagefault_us", "?"),
        meta.get("load_before", "?").split(" ")[0],
        meta.get("load_after", "?").split(" ")[0],
        meta.get("runs", "?"), meta.get("big_runs", "?"))


def peer_note(meta):
    return ("The peers stop at {} (bench/curves.sh --peer-max): at 10^7 Go "
            "(~2.9 KB per process) and Erlang (~2.8 KB) would need ~29 and "
            "~28 GB, past the 16 GiB the script allows; CAF (~1.3 KB, ~13 "
            "GB) and Tokio (~0.65 KB, ~6.5 GB) would fit, but one run takes "
            "2-3 minutes here (mostly page faults), past the script's "
            "budget (--peer-max 7 runs them).").format(
        meta.get("peer_max", "1e6").replace("1e", "10^"))


# ---- the page ---------------------------------------------------------------

def table(p, header, xs, cols):
    """cols: [(title, {x: [values]})]; one row per x."""
    p("| {} | {} |".format(header, " | ".join(t for t, _ in cols)))
    p("|---:|" + "---:|" * len(cols))
    for x in xs:
        p("| {} | {} |".format(pow10(x), " | ".join(cell(s.get(x, []))
                                                     for _, s in cols)))
    p("")


def xs_of(*series):
    return sorted({x for s in series for x in s})


def page(c, meta, tsv, fig_dir, out):
    lines = []
    p = lines.append
    rel = os.path.relpath(fig_dir, os.path.dirname(out) or ".")
    p("# Cost curves")
    p("")
    p("How each cost of stepx grows with the work: memory and time per idle "
      "process, submits, messages beside 10^3 to 10^7 idle processes, and "
      "timers, against the peers where they can follow. Generated by "
      "`bash bench/curves.sh` (bench/curves.sh, bench/curves.py) on {}, "
      "stepx at commit {}{} ({}); the raw lines are in {}. Each point is "
      "the median of {} runs (min–max in brackets; {} at 10^7 and at the "
      "peers' largest spawnidle size, where a run takes 15–60 s), each run "
      "a fresh process. "
      "docs/BENCHMARKS.md has the suite at one size each.".format(
          meta.get("date", "?"), meta.get("commit", "?"),
          " with uncommitted changes" if meta.get("dirty", "0") != "0"
          else "", meta.get("build", "?"), os.path.relpath(tsv),
          meta.get("runs", "?"), meta.get("big_runs", "?")))
    p("")
    headline(p, c, meta)
    p("")
    p("The machine: {} cores ({}), {}, {}. A fresh 4 KiB page costs {} µs "
      "(bench/pagefault_probe.c; bare metal: well under 1), transparent "
      "huge pages: {}. Load average {} before the run, {} after: the host "
      "is shared, and a busy spell shows as a wide min–max. The whole run "
      "took {} s.".format(
          meta.get("nproc", "?"), meta.get("cpu", "?"), meta.get("mem", "?"),
          meta.get("kernel", "?"), meta.get("pagefault_us", "?"),
          meta.get("thp", "?"), meta.get("load_before", "?"),
          meta.get("load_after", "?"), meta.get("elapsed_s", "?")))
    p("")
    failed = c.failed()
    if failed:
        p("Runs that failed their check (left out of the figures):")
        p("")
        for r in failed:
            p("- {} {} x={} run {}: exit {}, `{}`".format(
                r["curve"], r["rt"], r["x"], r["round"], r["rc"],
                r["text"][:120]))
        p("")
    summary(p, c)
    section_spawnidle(p, c, meta, rel)
    section_submit(p, c, rel)
    section_idle(p, c, meta, rel)
    section_timers(p, c, rel)
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")


def spread(series):
    """max / min of the medians over every point."""
    m = [q[1] for q in pts(series)]
    return max(m) / min(m) if m and min(m) > 0 else None


def headline(p, c, meta):
    k = 10 ** 7
    rss = at(c.idle_population("idle_rss_kb", False, 1.0 / 1048576), k)
    if rss is None:
        return
    try:
        gib = float(meta.get("mem", "").split()[0])
        cap = "{:.1f} million".format(gib * (1 << 30) / 4096 / 1e6)
    except (ValueError, IndexError):
        cap = "one per 4 KiB of memory"
    pc = c.cpu_per_op("pingpong-idle")
    fc = c.cpu_per_op("fanin-idle")
    rc = c.cpu_per_op("idlemsg-idle")
    oc = c.key("idlemsg-idle", "stepx", "in_order_cpu_ns_per_op")
    p("**10^7 idle processes** fit and run on this machine: {} GiB "
      "resident ({} bytes each, with the benchmark's 16-byte PID), "
      "spawned in {} s and ended in {} s. Beside them a pingpong hop "
      "costs {} ns of CPU time (with 10^3: {}), a fanin message {} ({}), "
      "and a round trip to one of them costs {} ns when they are visited "
      "in order (with 10^3: {}) but {} ns when the one is picked at random "
      "({}): the cold memory of a table of 0.96 GB, below. The engine "
      "library puts no cap on the process table by default (max_slots 0); "
      "stepxd's default cap is one slot per 4 KiB of memory, {} here, so "
      "stepxd needs `--max-slots 10000000` or more (or 0) to hold them."
      .format(num(rss), num(at(c.idle_population("idle_bytes_per_proc"), k)),
              num(at(c.idle_population("idle_spawn_secs"), k)),
              num(at(c.idle_population("idle_end_secs"), k)),
              num(at(pc, k)), num(at(pc, 1000)), num(at(fc, k)),
              num(at(fc, 1000)), num(at(oc, k)), num(at(oc, 1000)),
              num(at(rc, k)), num(at(rc, 1000)), cap))


def flat_row(p, what, series, unit):
    # A median at or below 0 (bytes per process within the RSS's page
    # granularity of the n = 1 baseline) has no ratio: left out here, shown
    # in its section's table.
    series = {x: v for x, v in series.items()
              if v and statistics.median(v) > 0}
    pp = pts(series)
    if len(pp) < 2:
        return
    r = pp[-1][1] / pp[0][1]
    sp = spread(series)
    lowest = min(q[1] for q in pp)
    if sp is not None and sp <= FLAT:
        verdict = "flat"
    elif pp[-1][1] > FLAT * lowest:
        verdict = "**rises**"
    else:
        verdict = "falls"
    p("| {} | {} {} at {} | {} {} at {} | {:.2f} | {:.2f} | {} |".format(
        what, fmt_num(pp[0][1]), unit, pow10(pp[0][0]), fmt_num(pp[-1][1]),
        unit, pow10(pp[-1][0]), r, sp, verdict))


def summary(p, c):
    p("## At a glance")
    p("")
    p("Each curve from its smallest size to its largest: the ratio of the "
      "two medians, the spread (the largest median over the smallest, "
      "any points): flat when the spread is at most {0:.2f}; else "
      "**rises** when the largest size costs more than {0:.2f} times the "
      "cheapest point, and falls when it does not (the small sizes cost "
      "more). The sections below give every point and say why each curve "
      "that is not flat is not.".format(FLAT))
    p("")
    p("| curve | smallest | largest | ratio | spread | |")
    p("|---|---:|---:|---:|---:|---|")
    flat_row(p, "stepx spawnidle: bytes per process",
             c.bytes_per_proc("stepx"), "B")
    flat_row(p, "stepx spawnidle: time per process",
             c.key("spawnidle", "stepx", "ns_per_op"), "ns")
    flat_row(p, "stepx --idle K: resident bytes per idle process",
             c.idle_population("idle_bytes_per_proc"), "B")
    flat_row(p, "stepx --idle K: submit until IDLE, per process",
             c.idle_population("idle_spawn_secs", True, 1e9), "ns")
    flat_row(p, "stepx --idle K: stop (a cancel each), per process",
             c.idle_population("idle_end_secs", True, 1e9), "ns")
    flat_row(p, "stepx submit: time per process",
             c.key("submit", "stepx", "ns_per_op"), "ns")
    flat_row(p, "stepx pingpong beside K idle: per hop",
             c.key("pingpong-idle", "stepx", "ns_per_op"), "ns")
    flat_row(p, "stepx pingpong beside K idle: CPU per hop",
             c.cpu_per_op("pingpong-idle"), "ns")
    flat_row(p, "stepx fanin beside K idle: per message",
             c.key("fanin-idle", "stepx", "ns_per_op"), "ns")
    flat_row(p, "stepx fanin beside K idle: CPU per message",
             c.cpu_per_op("fanin-idle"), "ns")
    flat_row(p, "stepx idlemsg: round trip to a random one of K idle",
             c.key("idlemsg-idle", "stepx", "ns_per_op"), "ns")
    flat_row(p, "stepx idlemsg: the same, CPU",
             c.cpu_per_op("idlemsg-idle"), "ns")
    flat_row(p, "stepx idlemsg in submit order (control)",
             c.key("idlemsg-idle", "stepx", "in_order_ns_per_op"), "ns")
    flat_row(p, "stepx idlemsg in submit order, CPU",
             c.key("idlemsg-idle", "stepx", "in_order_cpu_ns_per_op"), "ns")
    flat_row(p, "stepx timers: CPU per timer",
             c.cpu_per_op("timers"), "ns")
    flat_row(p, "stepx timers: first submit to last finish",
             c.key("timers", "stepx", "secs"), "s")
    flat_row(p, "stepx timers: p99 lateness",
             c.key("timers", "stepx", "p99_late_ms"), "ms")
    for rt in RUNTIMES[1:]:
        flat_row(p, "{} spawnidle: bytes per process".format(NAMES[rt]),
                 c.bytes_per_proc(rt), "B")
        flat_row(p, "{} spawnidle: time per process".format(NAMES[rt]),
                 c.key("spawnidle", rt, "ns_per_op"), "ns")
    flat_row(p, "Go submit: time per goroutine",
             c.key("submit", "go", "ns_per_op"), "ns")
    flat_row(p, "Go timers: first submit to last finish",
             c.key("timers", "go", "secs"), "s")
    p("")


def section_spawnidle(p, c, meta, rel):
    p("## Idle processes: memory and time per process")
    p("")
    p("![spawnidle](" + rel + "/spawnidle.svg)")
    p("")
    p("spawnidle: n processes that each wait for one message, then one "
      "message to each; the figure is the whole time over n, and the "
      "memory is the peak RSS minus the peak RSS of the same program at "
      "n = 1, over n (as docs/BENCHMARKS.md's B/proc). The peers run the "
      "same program (bench/peers/).")
    p("")
    rts = [rt for rt in RUNTIMES if c.runs("spawnidle", rt)]
    b = {rt: c.bytes_per_proc(rt) for rt in rts}
    t = {rt: c.key("spawnidle", rt, "ns_per_op") for rt in rts}
    xs = xs_of(*b.values(), *t.values())
    p("Bytes per process:")
    p("")
    table(p, "n", xs, [(NAMES[rt], b[rt]) for rt in rts])
    p("Nanoseconds per process (spawn, one message, finish):")
    p("")
    table(p, "n", xs, [(NAMES[rt], t[rt]) for rt in rts])
    p(peer_note(meta))
    p("")
    ib = c.idle_population("idle_bytes_per_proc")
    rss = c.idle_population("idle_rss_kb", False, 1.0 / 1048576)
    sp = c.idle_population("idle_spawn_secs")
    en = c.idle_population("idle_end_secs")
    p("stepx-bench --idle K (the runs of the next sections, all three "
      "pooled): K idle processes submitted from outside and waited for "
      "until each has run its first step and gone IDLE; the resident set "
      "then (VmRSS), its growth per idle process (with the benchmark's own "
      "array of their PIDs, 16 bytes each), and the time sx_engine_stop "
      "takes to end them after the workload (a cancel to each, which it "
      "answers by finishing).")
    p("")
    table(p, "K", xs_of(ib, rss, sp, en),
          [("resident, GiB", rss), ("bytes per idle process", ib),
           ("spawn until IDLE, s", sp), ("stop, s", en)])
    why(p, "spawnidle", c, meta)


def section_submit(p, c, rel):
    p("## Submit")
    p("")
    p("![submit](" + rel + "/submit.svg)")
    p("")
    p("submit: an outside thread submits n one-step processes "
      "(sx_engine_submit) and waits until all have finished; Go starts n "
      "goroutines from main. Nanoseconds per process:")
    p("")
    s = c.key("submit", "stepx", "ns_per_op")
    g = c.key("submit", "go", "ns_per_op")
    table(p, "n", xs_of(s, g), [("stepx", s), ("Go", g)])
    why(p, "submit", c, None)


def section_idle(p, c, meta, rel):
    p("## Messages beside idle processes")
    p("")
    p("![idle messages](" + rel + "/idle_messages.svg)")
    p("")
    p("stepx-bench's pingpong ({} hops between two processes), fanin ({} "
      "messages from two producers into one consumer) and idlemsg ({} round "
      "trips: a pinger sends a ping to one of the K idle processes picked "
      "at random, which answers it and goes back to IDLE; the pinger waits "
      "for the answer before the next; then as many to the idle processes "
      "in the order they were submitted, the control) while K other "
      "processes sit idle (--idle K). The idle processes are not in the "
      "timed part. Each run does its workload {} times in its one engine "
      "(--reps) and gives the median repetition; the points are the "
      "median of the runs' figures. "
      "memlat is bench/memlat_probe.c: one load at a random place of a "
      "table of K × 96 bytes (a process slot's size) in 4 KiB pages, "
      "each load's address from the one before.".format(
          commas(meta.get("pingpong_n")), commas(meta.get("fanin_n")),
          commas(meta.get("idlemsg_n")), meta.get("reps", "1")))
    p("")
    pp = c.key("pingpong-idle", "stepx", "ns_per_op")
    fa = c.key("fanin-idle", "stepx", "ns_per_op")
    p("Nanoseconds per message, of time and of the process's CPU time (all "
      "threads; pingpong and idlemsg keep one worker busy and the other "
      "parked, fanin both):")
    p("")
    table(p, "K idle", xs_of(pp, fa),
          [("pingpong, per hop", pp),
           ("pingpong, CPU", c.cpu_per_op("pingpong-idle")),
           ("fanin, per message", fa),
           ("fanin, CPU", c.cpu_per_op("fanin-idle"))])
    im = c.key("idlemsg-idle", "stepx", "ns_per_op")
    ml = c.key("memlat", "probe", "cpu_ns_per_load")
    p("idlemsg, nanoseconds per round trip to a random idle process and to "
      "them in submit order (the control), of time and CPU time; memlat, "
      "CPU nanoseconds per load:")
    p("")
    table(p, "K idle", xs_of(im, ml),
          [("random", im), ("random, CPU", c.cpu_per_op("idlemsg-idle")),
           ("in order", c.key("idlemsg-idle", "stepx", "in_order_ns_per_op")),
           ("in order, CPU",
            c.key("idlemsg-idle", "stepx", "in_order_cpu_ns_per_op")),
           ("memlat", ml)])
    why(p, "idle", c, meta)


def section_timers(p, c, rel):
    p("## Timers")
    p("")
    p("![timers](" + rel + "/timers.svg)")
    p("")
    p("timers: n processes, each sleeping 1–50 ms (SX_CMD_SLEEP; a fixed "
      "sequence, the same in Go), submitted from outside; the figure is the "
      "time from the first submit to the last finish, and the lateness of "
      "each wake-up past its deadline. Go: n goroutines in time.Sleep.")
    p("")
    cols = []
    for rt in ("stepx", "go"):
        cols.append(("{}, s".format(NAMES[rt]), c.key("timers", rt, "secs")))
        cols.append(("{}, p99 late ms".format(NAMES[rt]),
                     c.key("timers", rt, "p99_late_ms")))
    sub = c.key("timers", "stepx", "submit_secs")
    cpu = c.series("timers", "stepx", lambda r: float(r["kv"]["cpu_secs"])
                   * 1e6 / r["x"] if "cpu_secs" in r["kv"] else None)
    cols.append(("stepx submitting, s", sub))
    cols.append(("stepx CPU per timer, µs", cpu))
    table(p, "n", xs_of(*(s for _, s in cols)), cols)
    why(p, "timers", c, None)


def why(p, name, c, meta):
    """The reading of a section's curves (WHY)."""
    text = WHY.get(name)
    if text:
        for para in text(c, meta):
            p(para)
            p("")


def at(series, x):
    """The median at x, or None."""
    v = series.get(x)
    return med(v) if v else None


def top(series):
    """(x, median) at the largest x, or (None, None)."""
    if not series:
        return None, None
    x = max(series)
    return x, med(series[x])


def num(v, unit=""):
    return "—" if v is None else fmt_num(v) + unit


def why_spawnidle(c, meta):
    pf = float(meta.get("pagefault_us", "nan"))
    ib = c.idle_population("idle_bytes_per_proc")
    b = c.bytes_per_proc("stepx")
    kx, ib_top = top(ib)
    out = []
    bump = [(x, at(b, x) - at(ib, x)) for x in sorted(b)
            if at(ib, x) is not None and x >= 10000]
    out.append(
        "**Memory.** What an idle stepx process holds is the --idle figure: "
        "{} bytes at {} ({} GiB for all of them, resident), a process slot "
        "(96 bytes, docs/ARCHITECTURE.md \"Memory\") plus the 16 bytes of "
        "the benchmark's own array of PIDs; beside each slot, the 32-byte "
        "state cell and the 40 bytes of rarely used fields stay untouched "
        "for an idle process whose type has no state, as the benchmark's "
        "has none. At small "
        "K it is higher ({} bytes at 10^3) because the growth is a few "
        "hundred KB, counted in whole pages and the allocator's blocks. "
        "spawnidle's peak-RSS figure adds what its n \"go\" messages "
        "leave behind, the peak minus the idle figure: {} bytes per "
        "process. A message sent from outside the workers (the driver's "
        "sx_engine_send) is an event node of 112 bytes, taken from the "
        "engine's shared depot of freed nodes when it has one and from "
        "malloc otherwise; the worker that consumes it keeps the node for "
        "its own sends, in its cache (4,096 nodes) and then the depot, "
        "which the driver's next sends draw from again "
        "(engine/core/event.c). So what the messages leave held is about "
        "the workers' caches and the messages in flight, not one node per "
        "message.".format(
            num(ib_top), pow10(kx) if kx else "—",
            num(at(c.idle_population("idle_rss_kb", False, 1.0 / 1048576),
                   kx)),
            num(at(ib, 1000)),
            ", ".join("{} at {}".format(fmt_num(d), pow10(x))
                      for x, d in bump) or "—"))
    rows, shares = [], []
    for rt in RUNTIMES:
        bb = c.bytes_per_proc(rt)
        t = c.key("spawnidle", rt, "ns_per_op")
        x, tm = top(t)
        if x is None or at(bb, x) is None:
            continue
        pred = at(bb, x) / 4096.0 * pf
        shares.append(pred * 1000.0 / tm)
        rows.append("{} {} of {} µs at {}".format(
            NAMES[rt], fmt_num(pred), fmt_num(tm / 1000.0), pow10(x)))
    out.append(
        "**Time.** On this VM a fresh 4 KiB page costs {} µs, and memory "
        "per process / 4096 × that is the page-fault share of the time per "
        "process: {}. With the probe's figure taken once at the start of "
        "the run, that is {:.0f}–{:.0f} % of each runtime's time here (bare "
        "metal pays well under 1 µs a page), and a runtime's time per "
        "process follows its bytes per process. stepx's time per process "
        "falls with n: at 10^3 and 10^4 a run lasts milliseconds, and fixed "
        "costs (the first table segments mapped, the workers woken from "
        "their park) are a large part of it. The time of a run also "
        "stretches with the host's load (the min–max bars).".format(
            fmt_num(pf), "; ".join(rows), 100 * min(shares or [0]),
            100 * max(shares or [0])))
    sp = c.idle_population("idle_spawn_secs", True, 1e9)
    en = c.idle_population("idle_end_secs", True, 1e9)
    # The stop's growth: the --idle runs' peak RSS minus the resident set
    # after the spawn (pingpong's runs: their workload allocates nothing
    # that stays).
    grow = c.series("pingpong-idle", "stepx", lambda r: (
        r["rss_kb"] - float(r["kv"]["idle_rss_kb"])) * 1024.0 / r["x"]
        if "idle_rss_kb" in r["kv"] else None)
    k7 = 10 ** 7
    out.append(
        "**Spawning and ending the idle processes** (--idle K): {} ns per "
        "process to submit one and have it go IDLE at 10^7 ({} at 10^5); "
        "the page faults of its {} bytes come to {} ns at the probe's {} µs "
        "a page: the spawn is mostly page faults, and moves as their cost "
        "does from run to run on this host ({} to {} ns per process over "
        "the runs at 10^7). sx_engine_stop ends them "
        "in {} ns per process at "
        "10^7 ({} at 10^5): it walks the whole table (sx__ptable_each) and "
        "sends each live process a cancel, which it answers with one step "
        "and its finish. The cancels are event nodes that the stopping "
        "thread, not being a worker, takes from the depot while it has "
        "some and then from malloc, and the process "
        "grows by {} bytes per idle process during the stop at 10^7 (peak "
        "RSS minus the resident set before it): fresh pages again. At "
        "10^3 the stop's fixed part "
        "(stopping the workers and the I/O loop: a few ms) dominates, hence "
        "{} ns per process there. Neither grows faster than K: 10^7 idle "
        "processes spawn in {} s and end in {} s.".format(
            num(at(sp, k7)), num(at(sp, 10 ** 5)),
            num(at(c.idle_population("idle_bytes_per_proc"), k7)),
            num(at(c.idle_population("idle_bytes_per_proc"), k7) / 4096.0
                * pf * 1000.0)
            if at(c.idle_population("idle_bytes_per_proc"), k7) else None,
            fmt_num(pf), num(min(sp.get(k7, [0]))), num(max(sp.get(k7, [0]))),
            num(at(en, k7)), num(at(en, 10 ** 5)),
            num(at(grow, k7)), num(at(en, 1000)),
            num(at(c.idle_population("idle_spawn_secs"), k7)),
            num(at(c.idle_population("idle_end_secs"), k7))))
    noise, trend = [], []
    for rt in RUNTIMES[1:]:
        t = c.key("spawnidle", rt, "ns_per_op")
        within = [max(v) / min(v) for v in t.values() if len(v) > 1]
        if not t or not within:
            continue
        txt = "{:.2f} between sizes, {:.2f} at most at one size".format(
            spread(t), max(within))
        if spread(t) <= max(within):
            noise.append(NAMES[rt] + " " + txt)
        else:
            xs = sorted(t)
            trend.append("{} ({}: {} µs per process at {} against {} at "
                         "{})".format(NAMES[rt], txt,
                                      fmt_num(at(t, xs[-1]) / 1000.0),
                                      pow10(xs[-1]),
                                      fmt_num(at(t, xs[-2]) / 1000.0),
                                      pow10(xs[-2])))
    if noise or trend:
        out.append(
            "**The peers.** Their bytes per process are flat (within "
            "{:.2f}x from 10^3 to their largest size), 4–20 times stepx's, "
            "so page faults are a larger share of their time. {}{}".format(
                max(spread(c.bytes_per_proc(rt)) or 1
                    for rt in RUNTIMES[1:]),
                "Their time per process moves between sizes no more than "
                "between runs at one size ({}): no trend. ".format(
                    "; ".join(noise)) if noise else "",
                "Moving more than that: {}; their largest size is one "
                "run, and this script does not look into why.".format(
                    "; ".join(trend)) if trend else ""))
    return out


def why_submit(c, meta):
    t = c.key("submit", "stepx", "ns_per_op")
    rss = c.series("submit", "stepx", lambda r: r["rss_kb"] / 1024.0)
    xs = sorted(t)
    return [
        "**Why submit is not flat.** It falls from 10^3 to 10^5: a run of "
        "10^3 submits lasts a millisecond or two, and fixed costs (waking "
        "the parked workers, carving the first slots, the driver's wait "
        "for the last finishes) weigh on few processes. It does not "
        "grow with n: each process runs one step and finishes, and its "
        "slot goes back to the free lists for the next submit, so the "
        "table holds only the processes alive at once (as many as the "
        "driver runs ahead of the workers: peak RSS {} MB at {} against {} "
        "MB at 10^3) and no submit depends on how many went before: {}. "
        "Past 65,536 ahead the injection ring overflows and its oldest "
        "go to the global queue as chunks of their addresses, which the "
        "workers take as fast as they take from the ring (docs/"
        "SCHEDULER.md §2; as a list through the slots, the overflow made "
        "a run of 10^7 twice as slow as one that never overflowed). "
        "Go's time per goroutine falls the same way. (CPU time is "
        "no steadier a measure here: the driver and both workers share "
        "the 2 cores, and a worker that waits for the next submit spins "
        "before it parks, so a quiet host shows more CPU time per submit, "
        "not less.)".format(
            num(at(rss, xs[-1])) if xs else "—",
            pow10(xs[-1]) if xs else "—", num(at(rss, 1000)),
            ", ".join("{} ns at {}".format(fmt_num(at(t, x)), pow10(x))
                      for x in xs if x >= 10 ** 5) or "—")]


def why_idle(c, meta):
    out = []
    pc = c.cpu_per_op("pingpong-idle")
    fc = c.cpu_per_op("fanin-idle")

    def rep_spread(curve):
        return [float(r["kv"]["rep_max_ns_per_op"]) /
                float(r["kv"]["rep_min_ns_per_op"])
                for rs in c.runs(curve, "stepx").values() for r in rs
                if "rep_min_ns_per_op" in r["kv"]
                and float(r["kv"]["rep_min_ns_per_op"]) > 0]
    rs_p, rs_f = rep_spread("pingpong-idle"), rep_spread("fanin-idle")
    out.append(
        "**Two busy processes beside K idle ones.** Nothing in the engine "
        "visits an idle process until a message comes: it is in no run "
        "queue and holds no timer, and only sx_engine_list, "
        "sx_engine_count_states and stop walk the table. The hops of "
        "pingpong and fanin touch the busy processes' slots and mailboxes "
        "and the workers' deques, whatever K. CPU time per pingpong hop: "
        "{} ns at 10^3, {} at 10^7 (spread {}); per fanin message {} and "
        "{} (spread {}). The time per message moves more than its CPU "
        "time, with the host's load (the min–max bars): a run's time "
        "counts the moments its worker waits for a core. Within one run "
        "the slowest of its {} repetitions takes {} times as long as the "
        "fastest for pingpong and {} for fanin (medians over the runs; {} "
        "in all): the spreads above are no bigger, and neither curve "
        "follows K. fanin's CPU "
        "figure counts both workers, the consumer's spinning while it "
        "waits for the producers included.".format(
            num(at(pc, 1000)), num(at(pc, 10 ** 7)), num(spread(pc)),
            num(at(fc, 1000)), num(at(fc, 10 ** 7)), num(spread(fc)),
            meta.get("reps", "?"), num(med(rs_p)) if rs_p else "—",
            num(med(rs_f)) if rs_f else "—", "{:.2f} to {:.2f}".format(
                min(rs_p + rs_f), max(rs_p + rs_f)) if rs_p + rs_f else "—"))
    r = c.key("idlemsg-idle", "stepx", "ns_per_op")
    rc = c.cpu_per_op("idlemsg-idle")
    oc = c.key("idlemsg-idle", "stepx", "in_order_cpu_ns_per_op")
    m = c.key("memlat", "probe", "cpu_ns_per_load")
    kx, _ = top(rc)
    if kx is None:
        return out
    r3, rk = at(rc, 1000), at(rc, kx)
    m3, mk = at(m, 1000), at(m, kx)
    grow = rk - r3 if rk is not None and r3 is not None else None
    two = 2 * (mk - m3) if mk is not None and m3 is not None else None
    if not two or not grow:
        share = "against a growth of {} ns".format(num(grow))
    elif two >= 0.85 * grow:
        share = ("as much as the round trip grows ({} ns): these accesses "
                 "are the growth (a round trip's accesses partly overlap, "
                 "and the slot's second line comes with the page the "
                 "first one mapped)".format(num(grow)))
    else:
        share = ("{:.0f} % of the {} ns the round trip grows; the slot's "
                 "second line (cold, on a page the first access has just "
                 "mapped) is the likely rest".format(100.0 * two / grow,
                                                      num(grow)))
    out.append(
        "**A message to one of K idle processes costs what it costs with "
        "1,000 when the processes are visited in order, not when the one "
        "is picked at random.** idlemsg's round trip (the ping, the idle "
        "process's step, its answer, and its going back to IDLE) takes "
        "{} ns of CPU time at 10^3 and {} ns at {} ({}x; time {} and {} "
        "ns). The same round trips to the idle processes in the order they "
        "were submitted take {} and {} ns of CPU time: the engine does the "
        "same work in both, so what grows is not the engine's work but "
        "where its target lives. A random round trip reads cold cache "
        "lines on two pages: the target's PID in the benchmark's array "
        "(16 bytes each, 160 MB at 10^7), and the target's slot (96 "
        "bytes each, a table of 0.96 GB at 10^7), whose first 32 bytes "
        "hold the state word and the mailbox the ping goes into and the "
        "rest the mailbox's other end, the step count and the type its "
        "step reads, on one line or two. Once the table is more than a "
        "few MB, neither page is in "
        "the TLB either (4 KiB pages), and on this VM a TLB miss walks the "
        "guest's page tables and the host's. memlat measures such an "
        "access, a cold line on a page picked at random: {} ns in a table "
        "of 10^3 slots, {} ns in one of {}; two of them (the PID, the "
        "slot) add {} ns, {}. In order, the same reads walk "
        "the PIDs and the slots from one address to the next: one TLB "
        "miss per 32 slots, and the lines come in ahead of use.".format(
            num(r3), num(rk), pow10(kx), "{:.1f}".format(rk / r3)
            if rk and r3 else "—", num(at(r, 1000)), num(at(r, kx)),
            num(at(oc, 1000)), num(at(oc, kx)), num(m3), num(mk), pow10(kx),
            num(two), share))
    out.append(
        "So an application that sends to processes picked at random among "
        "millions pays a memory access or three per message that its "
        "caches cannot hold: about {} µs per round trip here at 10^7, "
        "where a cold page costs a nested page walk; one whose messages "
        "follow some locality (a process and the ones it spawned, which "
        "take neighbouring slots) pays what it pays among 1,000. The "
        "process table maps 4 KiB pages on purpose (engine/core/ptable.c: "
        "huge pages fault in slower on a host that takes memory back), so "
        "this is the price of that choice on a VM like this one."
        .format(num(rk / 1000.0) if rk else "—"))
    return out


def why_timers(c, meta):
    t = c.key("timers", "stepx", "secs")
    sub = c.key("timers", "stepx", "submit_secs")
    cpu = c.series("timers", "stepx", lambda r: float(r["kv"]["cpu_secs"])
                   * 1e6 / r["x"] if "cpu_secs" in r["kv"] else None)
    last = c.key("timers", "stepx", "last_start_ms")
    p99 = c.key("timers", "stepx", "p99_late_ms")
    g = c.key("timers", "go", "secs")
    kx, tk = top(t)
    if kx is None:
        return []
    gp = at(c.key("timers", "go", "p99_late_ms"), kx)
    go_late = ""
    if gp is not None and at(p99, kx) is not None and gp < at(p99, kx):
        go_late = (" Go's p99 is lower at {} ({} ms) though its whole run "
                   "is longer; this script does not look into why.".format(
                       pow10(kx), num(gp)))
    return [
        "**Why the timers' time rises.** The figure is about the longest "
        "sleep (50 ms) plus the time it takes to start the n sleepers: the "
        "driver submits them one by one ({} s for {}), and the last one "
        "takes its first step {} ms after the first submit. Once that is "
        "longer than the sleeps, the figure grows with n: {} s at {}. The "
        "cost per timer does not grow: a sleep goes into its worker's "
        "timer wheel (docs/COMMANDS.md, \"Where sleeps wait\"), a "
        "constant cost, and the process's CPU time per timer (every "
        "thread's, the workers' spinning and parking included) falls from "
        "{} µs at 10^3 (a 50 ms run in which the workers park and wake "
        "many times) to {} µs at {}. Go's figure rises the same way ({} s "
        "at {}).".format(
            num(at(sub, kx)), pow10(kx), num(at(last, kx)), num(tk),
            pow10(kx), num(at(cpu, 1000)), num(at(cpu, kx)), pow10(kx),
            num(at(g, kx)), pow10(kx)),
        "**Why the lateness rises.** While the driver still submits, its "
        "thread and both workers share the 2 cores: a sleeper's wake-up "
        "is due while the workers run the first steps of newer sleepers "
        "(and the submitter runs), so it waits for a core. p99 lateness "
        "is {} ms at 10^3 and {} ms at {}, as long as the submitting "
        "lasts; on a shared host the other work adds to it (a worker off "
        "its core leaves the sleepers it fired waiting in its deque, "
        "bench/FINDINGS.md, \"timers\").{}".format(
            num(at(p99, 1000)), num(at(p99, kx)), pow10(kx), go_late)]


WHY = {"spawnidle": why_spawnidle, "submit": why_submit, "idle": why_idle,
       "timers": why_timers}


def main(argv):
    global PNG_DIR
    args = argv[1:]
    out_dir = "docs"
    tsv = None
    while args:
        a = args.pop(0)
        if a in ("--out-dir", "--png") and args:
            if a == "--out-dir":
                out_dir = args.pop(0)
            else:
                PNG_DIR = args.pop(0)
                os.makedirs(PNG_DIR, exist_ok=True)
        elif tsv is None and not a.startswith("--"):
            tsv = a
        else:
            tsv = None
            break
    if tsv is None:
        sys.stderr.write("usage: curves.py TSV [--out-dir DIR] [--png DIR]\n")
        return 2
    meta, rows = load(tsv)
    c = Curves(rows)
    fig_dir = os.path.join(out_dir, "curves")
    os.makedirs(fig_dir, exist_ok=True)
    style()
    fig_spawnidle(c, meta, os.path.join(fig_dir, "spawnidle.svg"))
    fig_submit(c, meta, os.path.join(fig_dir, "submit.svg"))
    fig_idle(c, meta, os.path.join(fig_dir, "idle_messages.svg"))
    fig_timers(c, meta, os.path.join(fig_dir, "timers.svg"))
    out = os.path.join(out_dir, "CURVES.md")
    page(c, meta, tsv, fig_dir, out)
    print("curves.py: wrote {} and {}/*.svg".format(out, fig_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

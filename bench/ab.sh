#!/usr/bin/env bash
# bench/ab.sh: compare builds (or runtimes) on one workload, A/B style.
#
#   bash bench/ab.sh <workload> <n> <rounds> <binary> [<binary> ...]
#
# Runs each binary once per round, alternating (A, B, A, B, ...), so that
# the machine's drift (on a shared host a busy spell lasts minutes at a
# time) hits every binary alike, and prints for each the median of its
# figure (ns_per_op from the bench line) and of its CPU time (user + sys,
# /usr/bin/time), with every run's figure. A binary is anything that takes
# `<workload> <n>` and prints a stepx-bench line: two builds of
# bench/stepx-bench (e.g. one from a `git worktree` of the parent commit,
# built with the same meson options), or a peer (build/bench/stepx-peer-go).
#
# Example, a change against its parent:
#   git worktree add /tmp/base HEAD~1
#   (cd /tmp/base && meson setup /tmp/bbase --buildtype=release -Db_lto=true \
#       && ninja -C /tmp/bbase bench/stepx-bench)
#   bash bench/ab.sh fanin 10000000 7 /tmp/bbase/bench/stepx-bench \
#       build/bench/stepx/bench/stepx-bench
#
# AB_KEYS="secs p99_late_ms last_start_ms cpu_secs" adds the medians of
# those keys of the bench line (the timers A/Bs in bench/FINDINGS.md).
#
# AB_ARGS="..." adds arguments after `<workload> <n>` (e.g. --workers 1).
#
# AB_CPU=N pins every run to CPU N (taskset): with --workers 1 (in
# AB_ARGS) a single-threaded workload then
# runs on the same CPU every time, without the spread between CPUs that
# a shared host gives (pingpong's ~70 and ~88 ns groups, one per CPU:
# bench/FINDINGS.md).
#
# Nothing else should run meanwhile (check `uptime`); seven rounds or more
# for differences under ~10 %. When build/bench/c2c-probe is there (built
# by bench/run.sh), the CPUs' distance before and after the rounds goes to
# stderr: an A/B whose host changed its CPUs' placement meanwhile compares
# runs that are not alike (bench/FINDINGS.md, "The two CPUs' distance").
set -euo pipefail

if [ $# -lt 4 ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
fi
workload=$1 n=$2 rounds=$3
shift 3

command -v /usr/bin/time >/dev/null || {
    echo "ab.sh: /usr/bin/time is missing (apt-get install -y time)" >&2
    exit 1
}

pin=()
if [ -n "${AB_CPU:-}" ]; then
    command -v taskset >/dev/null || {
        echo "ab.sh: AB_CPU needs taskset (apt-get install -y util-linux)" >&2
        exit 1
    }
    pin=(taskset -c "$AB_CPU")
fi
read -r -a args <<<"${AB_ARGS:-}"

probe="$(dirname "$0")/../build/bench/c2c-probe"
distance() {
    if [ -x "$probe" ]; then
        echo "ab.sh: $1: $(timeout 60 "$probe" || echo "c2c_ns=?") (a cache line's round trip between the CPUs)" >&2
    fi
}
distance before

for _ in $(seq 1 "$rounds"); do
    for b in "$@"; do
        out=$({ /usr/bin/time -f "CPU %U %S" "${pin[@]}" "$b" "$workload" \
            "$n" "${args[@]}"; } 2>&1) || {
            echo "ab.sh: $b failed:" >&2
            echo "$out" >&2
            exit 1
        }
        ns=$(printf '%s\n' "$out" | grep -o 'ns_per_op=[0-9.]*' | head -n 1 |
            cut -d= -f2)
        cpu=$(printf '%s\n' "$out" | awk '/^CPU /{print $2 + $3}')
        extra=""
        for k in ${AB_KEYS:-}; do
            # A key the line lacks (a peer's) is nan; `|| true`, or set -e
            # would end the script silently on grep's status.
            v=$(printf '%s\n' "$out" | grep -o " $k=[0-9.]*" | head -n 1 |
                cut -d= -f2) || true
            extra="$extra $k=${v:-nan}"
        done
        printf '%s\t%s\t%s\t%s\n' "$b" "${ns:-nan}" "${cpu:-nan}" "$extra"
    done
done | python3 -c '
import statistics, sys
runs, more = {}, {}
for line in sys.stdin:
    b, ns, cpu, extra = line.rstrip("\n").split("\t")
    runs.setdefault(b, []).append((float(ns), float(cpu)))
    for kv in extra.split():
        k, v = kv.split("=")
        more.setdefault(b, {}).setdefault(k, []).append(float(v))
for b, v in runs.items():
    print("%-40s ns_per_op median %8.2f  cpu median %6.3f s   runs: %s" % (
        b, statistics.median(x[0] for x in v),
        statistics.median(x[1] for x in v),
        " ".join("%.1f" % x[0] for x in v)))
    for k, xs in more.get(b, {}).items():
        print("%-40s   %s median %.4g   runs: %s" % (
            "", k, statistics.median(xs), " ".join("%.4g" % x for x in xs)))
'
distance after

#!/usr/bin/env bash
# bench/run.sh: the benchmark suite in one command: stepx side by side with
# its peers (Go, Erlang, CAF, Tokio) in one run; the report is
# docs/BENCHMARKS.md.
#
#   bash bench/run.sh [--quick] [--runs R] [--out FILE] [--only a,b,...]
#                     [--no-icount]
#
# The build it measures: bench/stepx-bench from the working tree, in a
# build tree of its own, build/bench/stepx (so that it never races
# scripts/run.sh over build/release), configured with the project's default
# options and nothing else: the build users get from `meson setup` and
# `meson install` (release with link-time optimisation, meson.build), set
# up afresh every run. The report records the commit, whether the sources stepx-bench
# is built from had uncommitted changes, and the options the tree was
# built with (`meson introspect`).
#
# 1. installs what is missing (scripts/setup.sh for the build, then the peer
#    toolchains: golang-go, erlang-base, erlang-dev, libcaf-dev, g++, time,
#    cargo, librust-tokio-dev; and python3-matplotlib for bench/curves.py);
# 2. builds stepx-bench (above) and the peers into build/bench/ (go build,
#    erlc, g++ -O2);
# 3. runs every workload R times (full: 7, --quick: 3), interleaving the
#    runtimes (stepx, go, erlang, caf, stepx, go, ...), each run a fresh
#    process wrapped in /usr/bin/time -v for its peak RSS and CPU time
#    (user + sys) and in timeout(1);
# 4. counts instructions per operation of the engine's rows (yield, ring,
#    pingpong, skynet, fanin, spawnidle, submit) with callgrind, one
#    worker (bench/icount.sh --diff: runs at n and 2n, the difference over
#    n, so that start-up cancels); 1-2 minutes on 2 cores. --no-icount
#    leaves it out, and it is left out with a message when valgrind is
#    missing;
# 5. writes the report (bench/report.py): medians (min-max) over the runs
#    that passed their own check, CPU time, peak RSS, ratios against the
#    best peer, verdicts against the targets, instructions per operation,
#    and the known gaps.
#
# The cluster's rows (xpingpong, xfanin, xdetect: nodes as OS processes
# over a nats-server of each run's own) run through bench/cluster.sh,
# which also runs them alone (bash bench/cluster.sh --quick).
#
# Raw lines go to build/bench/raw.tsv as the runs go, the instruction
# counts to build/bench/icount.tsv, and the machine and build figures to
# build/bench/meta.txt. A full run (about 10-17 minutes on 2 cores) then
# copies them to bench/results/ and writes docs/BENCHMARKS.md from there:
# commit them together. --quick (smaller n, 3 runs, 1-2 minutes, and the
# instruction counts at the full run's sizes) writes
# build/bench/BENCHMARKS-quick.md from build/bench/ unless --out says
# otherwise, so that a smoke run replaces none of them.
#
# To rebuild the report from stored raw lines without running anything
# (after a change to bench/report.py, say):
#
#   python3 bench/report.py --from bench/results > docs/BENCHMARKS.md
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

QUICK=0
RUNS=""
OUT=""
ONLY=""
ICOUNT=1
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --runs) RUNS=$2; shift ;;
    --out) OUT=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --no-icount) ICOUNT=0 ;;
    -h | --help)
        awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
        exit 0
        ;;
    *)
        echo "run.sh: unknown argument '$1' (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done
# bench/cluster.sh (the x rows) runs the programs of this build tree.
export XNODE_BUILD=build/bench/stepx
if [ "$QUICK" = 1 ]; then
    RUNS=${RUNS:-3}
    OUT=${OUT:-build/bench/BENCHMARKS-quick.md}
    TIMEOUT=60
else
    # 7 runs: on a shared host a busy spell can take two runs of five, and
    # the median with them (bench/FINDINGS.md, "The machine"); seven take
    # about 8 minutes on 2 cores.
    RUNS=${RUNS:-7}
    OUT=${OUT:-docs/BENCHMARKS.md}
    TIMEOUT=240
fi
COMMAND="bash bench/run.sh"
[ "$QUICK" = 1 ] && COMMAND="$COMMAND --quick"
[ -n "$ONLY" ] && COMMAND="$COMMAND --only $ONLY"
[ "$ICOUNT" = 0 ] && COMMAND="$COMMAND --no-icount"
T_START=$(date +%s)

# ---- 1. packages ----------------------------------------------------------
bash scripts/setup.sh
# shellcheck source=bench/common.sh
. bench/common.sh
bench_packages run.sh "${BENCH_PACKAGES[@]}"

# ---- 2. builds ------------------------------------------------------------
BB=build/bench
BUILD=$BB/stepx
echo "=== stepx: build $BUILD (release) ==="
# The default build, exactly: the tree is set up afresh with no options
# every run (about 30 s of the suite's minutes), so that nothing configured
# earlier (`meson configure`, another meson) changes what is measured.
rm -rf "$BUILD"
meson setup "$BUILD"
# Only the driver and what it links: the suite should not wait for (or trip
# over) tests and examples.
# The cluster's rows (bench/cluster.sh) also run stepx-xnode, the plain
# NATS peer and stepxd.
ninja -C "$BUILD" bench/stepx-bench bench/stepx-bench-shared \
    bench/stepx-xnode bench/stepx-nats-peer cmd/stepxd
STEPX=$BUILD/bench/stepx-bench
# The same program linked against the shared library, as a program that
# uses stepx.pc is: only its instructions are counted (below).
STEPX_SHARED=$BUILD/bench/stepx-bench-shared
# What the binary was built from, read now: edits made while the suite runs
# do not change the binary and must not be reported as if they had.
bench_built "$BUILD"

echo "=== peers and probes: build into $BB (each only when its source is newer) ==="
bench_tools "$BB"
PAGEFAULT=$("$BB/pagefault-probe" 256 | sed 's/^pagefault_us=//')
# Each CPU's speed at one thread, now and after the runs: the report
# shows how unequal the host left them.
CPU_MS_BEFORE=$("$BB/cpu-probe" | sed 's/^cpu_ms=//')
# How far apart the CPUs are (a cache line's round trip between them), now
# and after: the host may place or move them.
# A probe that fails or stalls leaves "?" in the report, never the run.
c2c_probe() {
    local out
    if out=$(timeout 120 "$BB/c2c-probe"); then
        echo "${out#c2c_ns=}"
    else
        echo "?"
    fi
}
C2C_BEFORE=$(c2c_probe)
# What passing a slot's two lines to the other CPU and back costs here
# with no engine (1,024 records circulating): the floor under submit's
# figure.
if out=$(timeout 120 "$BB/handoff-probe" 2 1024); then
    HANDOFF=${out#handoff_ns=}
    HANDOFF=${HANDOFF%% *}
else
    HANDOFF="?"
fi

# ---- 3. runs --------------------------------------------------------------
# name | n (full) | n (quick) | runtimes
# Full sizes are the nominal ones (bench/report.py, NOMINAL_N) except
# spawnidle: 500,000 instead of 1,000,000, for every runtime. At 1 M the Go
# and Erlang programs grow to ~2.7 GB each and take tens of seconds a run
# where a fresh page costs microseconds (a VM), and the suite no longer
# fits 15 minutes on 2 cores; the report lists the reduced size under
# "Known gaps". relay-durable is relay on an engine with a state store in
# a temporary directory; recover times a start on a state store of n
# stored jobs (a run also fills that store first, untimed: about twice the
# figure in all); checkpoint times the gap a checkpoint adds between two
# steps of 64 jobs stepping at once on a state store. The x rows are the
# cluster's (bench/cluster.sh runs each: nodes as OS processes over a
# nats-server of the run's own): "stepx" there is across nodes,
# stepx-1node the same program in one engine, nats plain nats.c.
WORKLOADS=(
    "skynet|1000000|100000|stepx go erlang caf tokio"
    "pingpong|2000000|200000|stepx go erlang caf tokio"
    "ring|10000000|500000|stepx go erlang caf tokio"
    "fanin|10000000|500000|stepx go erlang caf tokio"
    "spawnidle|500000|50000|stepx go erlang caf tokio"
    "submit|1000000|100000|stepx go"
    "yield|10000000|1000000|stepx go"
    "wake|10000|300|stepx go"
    "idle|5|1|stepx go"
    "timers|100000|100000|stepx go"
    "relay|100000|20000|stepx"
    "relay1|100000|5000|stepx redis"
    "relay-durable|100000|20000|stepx"
    "recover|1000000|100000|stepx"
    "checkpoint|64000|16000|stepx"
    "xpingpong|5000|1000|stepx stepx-1node nats"
    "xfanin|1000000|200000|stepx stepx-1node nats"
    "xdetect|1|1|stepx"
)

cmd_for() { # runtime workload n
    case "$2" in
    x*)
        echo "bash bench/cluster.sh one $2 $1 $3"
        return
        ;;
    esac
    case "$1" in
    stepx)
        # relay1: relay with one request at a time per connection (each
        # connection submits, then waits, then submits the next), a row
        # with a target of its own.
        if [ "$2" = relay1 ]; then
            echo "$STEPX relay $3 --window 1"
        else
            echo "$STEPX $2 $3"
        fi
        ;;
    go) echo "$BB/stepx-peer-go $2 $3" ;;
    erlang) echo "erl -noshell +P 5000000 -pa $BB/erlang -run bench main $2 $3" ;;
    caf) echo "$BB/stepx-peer-caf $2 $3" ;;
    tokio) echo "$BB/stepx-peer-tokio $2 $3" ;;
    redis) echo "bash bench/peers/redis/run.sh $3" ;;
    esac
}

RAW=$BB/raw.tsv
: >"$RAW"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
if awk -v n="$(nproc)" '{ exit !($1 > n / 2) }' /proc/loadavg; then
    echo "run.sh: note: load average $LOAD_BEFORE on $(nproc) cores: other" \
        "work is running, figures will be noisy (the report records it)"
fi

# Runs one program under timeout and /usr/bin/time -v; appends to raw.tsv:
# workload, runtime, round, exit code, peak RSS (kB), CPU seconds (user +
# sys of the whole process, start-up included; empty when time -v wrote
# nothing, as after a timeout), the program's line.
run_one() { # workload runtime round n tag
    local w=$1 rt=$2 round=$3 n=$4 tag=$5
    local tv=$BB/time.txt out rc rss cpu line
    rm -f "$tv"
    set +e
    # shellcheck disable=SC2046 # the command line is split on purpose
    out=$(timeout "$TIMEOUT" /usr/bin/time -v -o "$tv" $(cmd_for "$rt" "$w" "$n") 2>"$BB/stderr.txt")
    rc=$?
    set -e
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tv" 2>/dev/null || true)
    cpu=$(awk -F': ' '/User time \(seconds\)/ { u = $2 } /System time \(seconds\)/ { s = $2 }
        END { if (u != "" && s != "") printf "%.2f", u + s }' "$tv" 2>/dev/null || true)
    line=$(printf '%s\n' "$out" | grep '^bench=' | tail -n 1 || true)
    if [ -z "$line" ]; then
        local why
        why=$(tail -n 1 "$BB/stderr.txt" 2>/dev/null | tr '\t' ' ' || true)
        [ "$rc" = 124 ] && why="timed out after ${TIMEOUT}s"
        line="error rc=$rc ${why}"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tag" "$rt" "$round" "$rc" "${rss:-0}" "$cpu" "$line" >>"$RAW"
    printf '  %-10s %-7s #%s rc=%s rss=%sk cpu=%ss  %s\n' "$tag" "$rt" "$round" "$rc" "${rss:-?}" "${cpu:-?}" "$line"
}

for spec in "${WORKLOADS[@]}"; do
    IFS='|' read -r w nfull nquick rts <<<"$spec"
    if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$w,"* ]]; then
        continue
    fi
    n=$nfull
    [ "$QUICK" = 1 ] && n=$nquick
    echo "=== $w n=$n, $RUNS runs of: $rts ==="
    for round in $(seq 1 "$RUNS"); do
        for rt in $rts; do
            run_one "$w" "$rt" "$round" "$n" "$w"
        done
        if [ "$w" = spawnidle ]; then
            # The baseline for bytes per idle process: the same program
            # with one process (peak RSS "at 0").
            for rt in $rts; do
                run_one "$w" "$rt" "$round" 1 spawnidle0
            done
        fi
    done
done

# ---- 4. instructions per operation ----------------------------------------
# bench/icount.sh --diff on the engine's rows: callgrind, one worker, runs
# at n and at 2n (skynet at 10n: its n is a power of ten), the difference
# over the added operations. submit and spawnidle have a thread outside the
# engine whose count varies with valgrind's thread switches: the median of
# 3 counts at each size. The others repeat within 0.1 %; yield's,
# pingpong's, ring's and fanin's per-op figures at these sizes match those
# at twice them, skynet's depend on n (a leaf costs more between smaller
# sizes), so compare them at one size. The sizes are the same in both
# modes, so that a quick run's counts compare with a full run's; the
# counting time is recorded in meta.txt (icount_s). A workload that
# --only leaves out is not counted either.
# workload | n | counts per size
ICOUNT_SIZES=(
    "yield|200000|1"
    "pingpong|100000|1"
    "ring|100000|1"
    "skynet|10000|1"
    "fanin|200000|1"
    "spawnidle|50000|3"
    "submit|100000|3"
)
ICOUNT_TSV=$BB/icount.tsv
ICOUNT_SHARED_TSV=$BB/icount-shared.tsv
rm -f "$ICOUNT_TSV" "$ICOUNT_SHARED_TSV"
# The rows whose operations run user code that calls the API (a send, a
# yield): counted again through the shared library, where every such call
# goes through the PLT (docs/BENCHMARKS.md, the instructions table).
ICOUNT_SHARED=(yield pingpong ring skynet fanin)
ICOUNT_STATE=counted
ICOUNT_FAILED=()
# icount.tsv's line for one of bench/icount.sh's: workload, n, n2,
# instructions at n, at n2, per op, counts per size.
icount_row() {
    printf '%s\n' "$1" | awk '{
        for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v["workload"], v["n"], v["n2"],
            v["instr_n"], v["instr_n2"], v["per_op"], v["rounds"] }'
}
# icount_one BINARY TSV NAME: counts $w at $n ($rounds counts a size) in
# BINARY, appending its line to TSV, or adds NAME to the failed ones.
icount_one() {
    local line
    if line=$(bash bench/icount.sh --diff --rounds "$rounds" "$1" "$w:$n"); then
        echo "  $line"
        icount_row "$line" >>"$2"
    else
        echo "run.sh: the instruction count of $3 failed (above)" >&2
        ICOUNT_FAILED+=("$3")
    fi
}
T_ICOUNT=$(date +%s)
if [ "$ICOUNT" = 0 ]; then
    ICOUNT_STATE="the run had --no-icount"
elif ! command -v valgrind >/dev/null; then
    ICOUNT_STATE="valgrind is missing"
    echo "run.sh: valgrind is missing: no instruction counts in this report" \
        "(apt-get install -y valgrind; --no-icount leaves them out quietly)" >&2
else
    : >"$ICOUNT_TSV"
    for spec in "${ICOUNT_SIZES[@]}"; do
        IFS='|' read -r w n rounds <<<"$spec"
        if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$w,"* ]]; then
            continue
        fi
        echo "=== icount $w n=$n: callgrind, one worker ==="
        icount_one "$STEPX" "$ICOUNT_TSV" "$w"
        if [[ " ${ICOUNT_SHARED[*]} " == *" $w "* ]]; then
            echo "=== icount $w n=$n: the same, through the shared library ==="
            icount_one "$STEPX_SHARED" "$ICOUNT_SHARED_TSV" "$w (shared)"
        fi
    done
fi
ICOUNT_S=$(($(date +%s) - T_ICOUNT))

# ---- 5. report ------------------------------------------------------------
T_END=$(date +%s)
META=$BB/meta.txt
{
    echo "command=$COMMAND"
    echo "mode=$([ "$QUICK" = 1 ] && echo quick || echo full)"
    echo "runs=$RUNS"
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "elapsed_s=$((T_END - T_START))"
    echo "nproc=$(nproc)"
    echo "cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
    echo "kernel=$(uname -sr)"
    echo "mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "pagefault_us=$PAGEFAULT"
    echo "cpu_ms_before=$CPU_MS_BEFORE"
    echo "cpu_ms_after=$("$BB/cpu-probe" | sed 's/^cpu_ms=//')"
    echo "c2c_ns_before=$C2C_BEFORE"
    echo "handoff_ns=$HANDOFF"
    echo "c2c_ns_after=$(c2c_probe)"
    echo "load_before=$LOAD_BEFORE"
    echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "gcc=$(gcc --version | head -n 1)"
    echo "go=$(go version)"
    echo "erlang=OTP $(erl -noshell -eval 'io:format("~s", [erlang:system_info(otp_release)]), halt().') erts $(erl -noshell -eval 'io:format("~s", [erlang:system_info(version)]), halt().')"
    echo "caf=libcaf-dev $(dpkg-query -W -f='${Version}' libcaf-dev)"
    echo "tokio=librust-tokio-dev $(dpkg-query -W -f='${Version}' librust-tokio-dev), $(/usr/bin/cargo --version)"
    echo "commit=$BUILT_COMMIT"
    echo "dirty=$BUILT_DIRTY"
    echo "build=$BUILT_OPTIONS"
    echo "icount=$ICOUNT_STATE"
    echo "icount_s=$ICOUNT_S"
    echo "icount_failed=$(IFS=,; echo "${ICOUNT_FAILED[*]}")"
    echo "valgrind=$(valgrind --version 2>/dev/null || echo none)"
} >"$META"
# The committed report's raw lines live beside it in bench/results/, so that
# bench/report.py --from bench/results can rebuild it; any other report is
# built from build/bench/ and leaves bench/results/ alone.
RESULTS=$BB
if [ "$OUT" = docs/BENCHMARKS.md ]; then
    RESULTS=bench/results
    mkdir -p "$RESULTS"
    cp "$RAW" "$RESULTS/raw.tsv"
    cp "$META" "$RESULTS/meta.txt"
    for f in icount.tsv icount-shared.tsv; do
        if [ -f "$BB/$f" ]; then
            cp "$BB/$f" "$RESULTS/$f"
        else
            rm -f "$RESULTS/$f"
        fi
    done
fi
mkdir -p "$(dirname "$OUT")"
python3 bench/report.py --from "$RESULTS" >"$OUT"
echo "=== wrote $OUT ($((T_END - T_START)) s) ==="

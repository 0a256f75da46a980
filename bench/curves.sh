#!/usr/bin/env bash
# bench/curves.sh: how each cost grows with the work (docs/CURVES.md).
#
#   bash bench/curves.sh [--quick] [--runs R] [--big-runs R] [--peer-max E]
#                        [--out FILE]
#
# Curves, each point the median of R runs (default 3; --big-runs, default
# 1, at 10^7 and at the spawnidle peers' largest size, where one run takes
# 15-60 s on this 2-core VM):
#
#   spawnidle      n = 10^3 .. 10^7 processes that wait for one message,
#                  then one message each (bench/stepx_bench.c spawnidle):
#                  ns per process, and bytes per process from the peak
#                  RSS minus the peak RSS at n = 1 (spawnidle0), as
#                  bench/report.py's bytes_per_proc. stepx and the peers
#                  (Go, Erlang, CAF, Tokio) up to 10^E (--peer-max,
#                  default 6) or the size whose estimated peak would pass
#                  16 GiB, whichever is smaller (PEER_BYTES below).
#   submit         n = 10^3 .. 10^7 one-step processes: ns per process.
#                  stepx and Go (its only peer with submit).
#   pingpong-idle  pingpong (PINGPONG_N hops), fanin (FANIN_N messages) and
#   fanin-idle     idlemsg (IDLEMSG_N round trips, each to one of the idle
#   idlemsg-idle   processes picked at random, then as many to them in
#                  order) while K = 10^3 .. 10^7 other processes sit idle
#                  (stepx-bench --idle K --reps REPS: each run the median
#                  of REPS repetitions). stepx only: the peers have no
#                  such mode.
#   timers         n = 10^3 .. 10^6 processes each sleeping 1-50 ms: the
#                  time from the first submit to the last finish. stepx
#                  and Go (its only peer with timers).
#   memlat         one random access into a table of K x 96 bytes (the
#                  process slots beside K idle processes), the machine's
#                  own cost (bench/memlat_probe.c), for idlemsg's reading.
#
# The stepx build is bench/run.sh's tree, build/bench/stepx (set up with
# the project's default options when missing, brought up to date with
# ninja; the options it has are recorded); the peers are built into
# build/bench/ as bench/run.sh builds them, each only when its source is
# newer. Each run is a fresh process under timeout(1) and /usr/bin/time
# -v (its peak RSS); the runtimes take turns within each round.
#
# Writes bench/results/curves.tsv (tab-separated: curve, runtime, x,
# round, exit code, peak RSS in kB, the program's line; "# key=value"
# lines for the machine and the run), then bench/curves.py writes the
# figures (docs/curves/*.svg) and docs/CURVES.md from it: commit the
# three together. A full run takes 2-5 minutes on 2 cores, ~15 with
# --big-runs 3 (more on a busy host, or when a peer's run stalls).
# --quick: sizes up to 10^5, one run each (under a minute), written to
# build/curves/ (tsv, SVGs and CURVES.md) unless --out says otherwise.
#
# To redraw from the stored tsv without running anything:
#
#   python3 bench/curves.py bench/results/curves.tsv
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

QUICK=0
RUNS=3
BIG_RUNS=1
PEER_MAX=6
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --runs) RUNS=$2; shift ;;
    --big-runs) BIG_RUNS=$2; shift ;;
    --peer-max) PEER_MAX=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h | --help)
        awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
        exit 0
        ;;
    *)
        echo "curves.sh: unknown argument '$1' (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

MAX_E=7
TIMER_MAX_E=6
if [ "$QUICK" = 1 ]; then
    MAX_E=5
    TIMER_MAX_E=5
    RUNS=1
    BIG_RUNS=1
    [ "$PEER_MAX" -gt 5 ] && PEER_MAX=5
    OUT=${OUT:-build/curves/curves.tsv}
else
    OUT=${OUT:-bench/results/curves.tsv}
fi
PINGPONG_N=1000000
FANIN_N=2000000
IDLEMSG_N=100000
# Repetitions of the workload within each --idle run (stepx-bench --reps):
# the run's figure is their median, so that a busy spell of the host in
# one repetition does not make the point, and at 10^7, where the idle
# processes take ~10-30 s to spawn and end, one run still has 5 samples.
REPS=5
TIMEOUT=600
# Estimated bytes per idle process of each peer (their spawnidle at 10^5
# and 10^6 on this machine, rounded up) and the most a run may take: a
# peer stops at the size whose estimate would pass it.
declare -A PEER_BYTES=([go]=2900 [erlang]=2900 [caf]=1400 [tokio]=700)
MEM_CAP=$((16 << 30))
T_START=$(date +%s)

# ---- packages and builds ----------------------------------------------------
bash scripts/setup.sh
# shellcheck source=bench/common.sh
. bench/common.sh
bench_packages curves.sh "${BENCH_PACKAGES[@]}"

BB=build/bench
BUILD=$BB/stepx
if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD"
fi
ninja -C "$BUILD" bench/stepx-bench
STEPX=$BUILD/bench/stepx-bench
bench_built "$BUILD"
bench_tools "$BB"

# ---- runs -------------------------------------------------------------------
# The command line of one run (bench/run.sh's cmd_for, plus --idle).
cmd_for() { # runtime workload n [idle K]
    case "$1" in
    stepx) echo "$STEPX $2 $3${4:+ --idle $4 --reps $REPS}" ;;
    go) echo "$BB/stepx-peer-go $2 $3" ;;
    erlang) echo "erl -noshell +P 5000000 -pa $BB/erlang -run bench main $2 $3" ;;
    caf) echo "$BB/stepx-peer-caf $2 $3" ;;
    tokio) echo "$BB/stepx-peer-tokio $2 $3" ;;
    esac
}

mkdir -p "$(dirname "$OUT")"
TMP_OUT=$OUT.part
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
{
    echo "# date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "# mode=$([ "$QUICK" = 1 ] && echo quick || echo full)"
    echo "# runs=$RUNS"
    echo "# big_runs=$BIG_RUNS"
    echo "# peer_max=1e$PEER_MAX"
    echo "# nproc=$(nproc)"
    echo "# cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
    echo "# mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "# kernel=$(uname -sr)"
    echo "# pagefault_us=$("$BB/pagefault-probe" 256 | sed 's/^pagefault_us=//')"
    echo "# thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)"
    echo "# commit=$BUILT_COMMIT"
    echo "# dirty=$BUILT_DIRTY"
    echo "# build=$BUILT_OPTIONS"
    echo "# load_before=$LOAD_BEFORE"
    echo "# pingpong_n=$PINGPONG_N"
    echo "# fanin_n=$FANIN_N"
    echo "# idlemsg_n=$IDLEMSG_N"
    echo "# reps=$REPS"
} >"$TMP_OUT"

# One run: appends its row to the tsv and prints progress.
run_one() { # curve runtime x round workload n [idle K]
    local curve=$1 rt=$2 x=$3 round=$4 w=$5 n=$6 k=${7:-}
    local tv=$BB/curves-time.txt out rc rss line t0 t1
    t0=$(date +%s.%N)
    set +e
    # shellcheck disable=SC2046 # the command line is split on purpose
    out=$(timeout "$TIMEOUT" /usr/bin/time -v -o "$tv" $(cmd_for "$rt" "$w" "$n" "$k") \
        2>"$BB/curves-stderr.txt")
    rc=$?
    set -e
    t1=$(date +%s.%N)
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tv" 2>/dev/null || true)
    line=$(printf '%s\n' "$out" | grep '^bench=' | tail -n 1 || true)
    if [ -z "$line" ]; then
        local why
        why=$(tail -n 1 "$BB/curves-stderr.txt" 2>/dev/null | tr '\t' ' ' || true)
        [ "$rc" = 124 ] && why="timed out after ${TIMEOUT}s"
        line="error rc=$rc ${why}"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$curve" "$rt" "$x" "$round" "$rc" \
        "${rss:-0}" "$line" >>"$TMP_OUT"
    printf '[%4d s] %-13s %-6s x=%-9s #%s rc=%s rss=%sk %ss  %s\n' \
        $(($(date +%s) - T_START)) "$curve" "$rt" "$x" "$round" "$rc" "${rss:-?}" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" "$(printf '%s' "$line" | cut -c1-90)"
}

sizes() { # largest exponent: 10^3 .. 10^E
    local e
    for e in $(seq 3 "$1"); do echo $((10 ** e)); done
}

# The largest size a runtime runs in a curve: stepx 10^max_e; a peer
# 10^peer_e at most, and in spawnidle not the size whose estimated peak
# passes MEM_CAP.
largest() { # curve runtime max_e peer_e
    local top=$((10 ** $3))
    if [ "$2" != stepx ]; then
        [ "$4" -lt "$3" ] && top=$((10 ** $4))
        while [ "$1" = spawnidle ] && [ $((top * PEER_BYTES[$2])) -gt "$MEM_CAP" ]; do
            top=$((top / 10))
        done
    fi
    echo "$top"
}

# Runs of a point: --big-runs at 10^7, and at a peer's largest size when
# it stops before stepx (a slow run: spawnidle's peers at 10^6 take 15-60
# s each here); else R.
runs_at() { # x runtime's largest curve's largest
    if [ "$1" -ge 10000000 ] || { [ "$1" -ge "$2" ] && [ "$2" -lt "$3" ]; }; then
        echo "$BIG_RUNS"
    else
        echo "$RUNS"
    fi
}

ROUNDS=$((RUNS > BIG_RUNS ? RUNS : BIG_RUNS))

# A curve: in each round every size, and at each size the runtimes in
# turn, so that a busy spell of the host falls on several sizes and
# runtimes rather than on all the runs of one point.
curve() { # curve workload max_e peer_e peers...
    local name=$1 w=$2 max_e=$3 peer_e=$4
    shift 4
    local x r rt
    local -A top
    for rt in stepx "$@"; do
        top[$rt]=$(largest "$name" "$rt" "$max_e" "$peer_e")
    done
    for r in $(seq 1 "$ROUNDS"); do
        for x in $(sizes "$max_e"); do
            for rt in stepx "$@"; do
                [ "$x" -le "${top[$rt]}" ] || continue
                [ "$r" -le "$(runs_at "$x" "${top[$rt]}" $((10 ** max_e)))" ] || continue
                run_one "$name" "$rt" "$x" "$r" "$w" "$x"
            done
        done
    done
}

# stepx's pingpong, fanin and idlemsg beside K = 10^3 .. 10^MAX_E idle
# processes, taking turns as in curve.
idle_curves() {
    local k r
    for r in $(seq 1 "$ROUNDS"); do
        for k in $(sizes "$MAX_E"); do
            [ "$r" -le "$(runs_at "$k" $((10 ** MAX_E)) $((10 ** MAX_E)))" ] || continue
            run_one pingpong-idle stepx "$k" "$r" pingpong "$PINGPONG_N" "$k"
            run_one fanin-idle stepx "$k" "$r" fanin "$FANIN_N" "$k"
            run_one idlemsg-idle stepx "$k" "$r" idlemsg "$IDLEMSG_N" "$k"
        done
    done
}

echo "=== spawnidle: the n = 1 baseline ==="
for r in $(seq 1 "$RUNS"); do
    for rt in stepx go erlang caf tokio; do
        run_one spawnidle0 "$rt" 1 "$r" spawnidle 1
    done
done
echo "=== spawnidle: n = 10^3 .. 10^$MAX_E ==="
curve spawnidle spawnidle "$MAX_E" "$PEER_MAX" go erlang caf tokio
echo "=== submit: n = 10^3 .. 10^$MAX_E ==="
curve submit submit "$MAX_E" "$MAX_E" go
echo "=== pingpong, fanin, idlemsg beside K = 10^3 .. 10^$MAX_E idle processes ==="
idle_curves
echo "=== timers: n = 10^3 .. 10^$TIMER_MAX_E ==="
curve timers timers "$TIMER_MAX_E" "$TIMER_MAX_E" go
# One random access into a table of K 96-byte blocks (the process slots
# beside K idle processes), in 4 KiB pages: the machine's cost of a cold
# slot at each K (bench/memlat_probe.c; R runs; mostly first-touch page
# faults, ~15 s a run at 10^7 on this VM).
echo "=== memlat: one random access into K x 96 bytes ==="
for r in $(seq 1 "$RUNS"); do
    for k in $(sizes "$MAX_E"); do
        line=$("$BB/memlat-probe" $((k * 96 / 1024)) || echo "error")
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' memlat probe "$k" "$r" 0 0 "$line" >>"$TMP_OUT"
        printf '[%4d s] memlat        probe  x=%-9s #%s %s\n' $(($(date +%s) - T_START)) "$k" "$r" "$line"
    done
done

T_END=$(date +%s)
{
    echo "# load_after=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# elapsed_s=$((T_END - T_START))"
} >>"$TMP_OUT"
mv "$TMP_OUT" "$OUT"
echo "=== wrote $OUT ($((T_END - T_START)) s) ==="
if [ "$OUT" = bench/results/curves.tsv ]; then
    python3 bench/curves.py "$OUT"
else
    python3 bench/curves.py "$OUT" --out-dir "$(dirname "$OUT")"
fi

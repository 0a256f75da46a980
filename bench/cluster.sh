#!/usr/bin/env bash
# bench/cluster.sh: the cluster's benchmark rows (docs/CLUSTER.md): nodes
# as OS processes on this machine, over a nats-server of their own.
#
#   bash bench/cluster.sh [--quick] [--runs R] [--build DIR] [--out DIR]
#   bash bench/cluster.sh one WORKLOAD RUNTIME N     # one run, one line
#
# Workloads and runtimes (the first runtime is the row's subject):
#   xpingpong  round trips between a pinger process and a pong process:
#              stepx (two nodes, one OS process each, over NATS),
#              stepx-1node (both in one engine: no NATS hop), nats (plain
#              nats.c request-reply between two OS processes);
#              figure: p50 µs (p99 and mean on the line).
#   xfanin     2 producers -> 1 sink, sequence-numbered, order checked:
#              stepx (2 producer nodes -> 1 sink node, 3 OS processes),
#              stepx-1node (2 producers and the sink in one engine), nats
#              (2 publisher processes -> 1 subscriber process);
#              figure: the sink's messages per second, first to last.
#   xdetect    two stepxd daemons (--heartbeat 500, down-after by default
#              2,000 ms), one killed with SIGKILL: ms from the kill to
#              the other's "node N ... down: silent for N ms" log line.
#
# The programs: bench/xnode_bench.c (stepx-xnode), bench/peers/nats/
# reqrep.c (stepx-nats-peer) and cmd/stepxd, from the build tree DIR
# (default build/bench/stepx, bench/run.sh's; set up as a release build
# when missing, and brought up to date with ninja). Each run is fresh:
# its own nats-server on a free loopback port, its own nodes, all stopped
# when the run ends, however it ends (trap EXIT), and each run is bounded
# (timeout(1), and the programs' own deadlines and alarm()).
#
# Without `one`: R runs (full: 5, --quick: 3) of every workload, the
# runtimes interleaved in each round (stepx, stepx-1node, nats, stepx,
# ...); raw lines (bench/run.sh's raw.tsv format) and meta.txt go to DIR
# (default build/bench/cluster), the report (bench/report.py) to
# DIR/BENCHMARKS-cluster.md, and the summary to stdout. --quick: smaller
# n, a smoke run of about a minute. bench/run.sh runs the same workloads
# through `one` (its WORKLOADS), so a full suite run reports these rows
# in docs/BENCHMARKS.md too.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
BUILD=${XNODE_BUILD:-build/bench/stepx}
NATS_SERVER=$(command -v nats-server || echo /usr/sbin/nats-server)
HB=500

# ---- one run ------------------------------------------------------------------

PIDS=()
TMP=""
cleanup()
{
    local p i
    # SIGTERM first (a stepx-xnode node then prints its cluster figures
    # on stderr and says goodbye), SIGKILL for whatever is left after 2 s.
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for i in $(seq 40); do
        local alive=0
        for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 1 ] || break
        sleep 0.05
    done
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "$TMP" ]; then
        # XNODE_KEEP=1: the run's logs stay, for a look after a failure.
        if [ "${XNODE_KEEP:-0}" = 1 ]; then
            echo "cluster.sh: logs kept in $TMP" >&2
        else
            rm -rf "$TMP"
        fi
    fi
}

# Starts a nats-server on a free loopback port; sets URL.
start_nats()
{
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
    "$NATS_SERVER" -a 127.0.0.1 -p "$port" >"$TMP/nats.log" 2>&1 &
    PIDS+=($!)
    URL=nats://127.0.0.1:$port
    for _ in $(seq 200); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "cluster.sh: nats-server did not start: $(tail -n 3 "$TMP/nats.log")" >&2
    return 1
}

# Waits up to $3 s until file $1 has $2 lines matching $4 (default: any).
wait_lines()
{
    local i
    for i in $(seq $(($3 * 100))); do
        [ "$(grep -c -- "${4:-.}" "$1" 2>/dev/null || true)" -ge "$2" ] && return 0
        sleep 0.01
    done
    echo "cluster.sh: timed out waiting for $1: $(tail -n 3 "$1" 2>/dev/null)" >&2
    return 1
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# A node of stepx-xnode serving pong and sink; sets PONG and SINK.
start_serve()
{
    "$XNODE" serve --nats "$URL" --cluster xb --node "$1" --heartbeat $HB \
        --lifetime 900 >"$TMP/serve.out" 2>"$TMP/serve.err" &
    PIDS+=($!)
    wait_lines "$TMP/serve.out" 1 20 'pong='
    PONG=$(sed -n 's/.*pong=\([^ ]*\).*/\1/p' "$TMP/serve.out")
    SINK=$(sed -n 's/.*sink=\([^ ]*\).*/\1/p' "$TMP/serve.out")
}

# Prints the last bench= line of file $1 (or an error line for run.sh).
result_of()
{
    local line
    line=$(grep '^bench=' "$1" | tail -n 1 || true)
    if [ -z "$line" ]; then
        echo "cluster.sh: no result; $(tail -n 2 "$2" 2>/dev/null | tr '\n' ' ')" >&2
        return 1
    fi
    echo "$line"
}

one()
{
    local w=$1 rt=$2 n=$3 rc=0
    TMP=$(mktemp -d /tmp/stepx-xbench.XXXXXX)
    trap cleanup EXIT
    trap 'exit 143' TERM INT
    XNODE=$BUILD/bench/stepx-xnode
    PEER=$BUILD/bench/stepx-nats-peer
    # The programs' own deadline for a wait, s: round trips at 100 per
    # second and 30 s more, or messages at 50,000 per second and 10 s
    # more (a fan-in that loses messages waits this long, then fails).
    local to=$((n / 50000 + 10))
    [ "$w" = xpingpong ] && to=$((n / 100 + 30))
    case "$w/$rt" in
    xpingpong/stepx)
        start_nats
        start_serve 1
        "$XNODE" pingpong --nats "$URL" --cluster xb --node 2 --to "$PONG" \
            --heartbeat $HB --n "$n" --timeout "$to" >"$TMP/out" 2>"$TMP/err" || rc=$?
        ;;
    xpingpong/stepx-1node)
        "$XNODE" pingpong --n "$n" --workers 0 --timeout "$to" >"$TMP/out" 2>"$TMP/err" || rc=$?
        ;;
    xpingpong/nats)
        start_nats
        "$PEER" responder --nats "$URL" --timeout 900 >"$TMP/resp.out" 2>&1 &
        PIDS+=($!)
        wait_lines "$TMP/resp.out" 1 20 ready
        "$PEER" requester --nats "$URL" --n "$n" --timeout "$to" >"$TMP/out" 2>"$TMP/err" || rc=$?
        ;;
    xfanin/stepx)
        start_nats
        start_serve 1
        local k pk=() half=$((n / 2))
        for k in 2 3; do
            "$XNODE" fanin --nats "$URL" --cluster xb --node $k --to "$SINK" \
                --heartbeat $HB --n $((k == 2 ? n - half : half)) --total "$n" \
                --senders 2 --go-file "$TMP/go" --timeout "$to" \
                >"$TMP/f$k.out" 2>"$TMP/f$k.err" &
            pk+=($!)
            PIDS+=($!)
        done
        wait_lines "$TMP/f2.out" 1 20 ready
        wait_lines "$TMP/f3.out" 1 20 ready
        touch "$TMP/go"
        wait "${pk[0]}" || rc=$?
        wait "${pk[1]}" || rc=$?
        cp "$TMP/f2.out" "$TMP/out"
        cat "$TMP/f2.err" "$TMP/f3.err" >"$TMP/err"
        ;;
    xfanin/stepx-1node)
        "$XNODE" fanin --n "$n" --workers 0 --timeout "$to" >"$TMP/out" 2>"$TMP/err" || rc=$?
        ;;
    xfanin/nats)
        # Buffered publishes (nats.c's defaults): the throughput setting.
        start_nats
        "$PEER" subscriber --nats "$URL" --total "$n" --senders 2 --buffered \
            --timeout "$to" >"$TMP/out" 2>"$TMP/err" &
        local sp=$! pk=() k
        PIDS+=($sp)
        wait_lines "$TMP/out" 1 20 ready
        for k in 0 1; do
            "$PEER" publisher --nats "$URL" --n $((k == 0 ? n - n / 2 : n / 2)) \
                --sender $k --go-file "$TMP/go" --buffered --timeout "$to" \
                >"$TMP/p$k.out" 2>"$TMP/p$k.err" &
            pk+=($!)
            PIDS+=($!)
        done
        wait_lines "$TMP/p0.out" 1 20 ready
        wait_lines "$TMP/p1.out" 1 20 ready
        touch "$TMP/go"
        wait "${pk[0]}" || rc=$?
        wait "${pk[1]}" || rc=$?
        wait "$sp" || rc=$?
        ;;
    xdetect/stepx)
        detect
        return
        ;;
    *)
        echo "cluster.sh: no such run: $w $rt" >&2
        return 2
        ;;
    esac
    result_of "$TMP/out" "$TMP/err" || rc=1
    [ "$rc" = 0 ] || tail -n 3 "$TMP/err" >&2
    return "$rc"
}

# Two stepxd nodes; node 2 killed; ms until node 1's down line for it.
detect()
{
    local down=$((4 * HB)) n i inc t0 t1 line silent
    start_nats
    for n in 1 2; do
        "$BUILD/cmd/stepxd" --ephemeral --socket "$TMP/n$n.sock" --nats "$URL" \
            --cluster xd --node $n --heartbeat $HB --workers 1 \
            >"$TMP/n$n.log" 2>&1 &
        PIDS+=($!)
        eval "NODE$n=\$!"
    done
    wait_lines "$TMP/n1.log" 1 20 'node 2 (incarnation [0-9]*) up'
    wait_lines "$TMP/n2.log" 1 20 'node 1 (incarnation [0-9]*) up'
    inc=$(grep -o 'node 2 (incarnation [0-9]*) up' "$TMP/n1.log" | tail -n 1 | grep -o '[0-9]*)' | tr -d ')')
    # A kill at a random point of the heartbeat period, after a few
    # heartbeats.
    sleep "$(awk -v r="$RANDOM" -v hb=$HB 'BEGIN { printf "%.3f", (1000 + r % hb) / 1000 }')"
    kill -9 "$NODE2"
    t0=$(now_ms)
    line=""
    for i in $(seq 2000); do
        line=$(grep -o "node 2 (incarnation $inc) down: silent for [0-9]* ms" "$TMP/n1.log" | tail -n 1 || true)
        [ -n "$line" ] && break
        sleep 0.005
    done
    t1=$(now_ms)
    if [ -z "$line" ]; then
        echo "bench=xdetect runtime=stepx n=1 secs=0 ns_per_op=0 ops_per_sec=0 ok=0 heartbeat_ms=$HB down_after_ms=$down"
        echo "cluster.sh: node 1 never declared node 2 down: $(grep cluster: "$TMP/n1.log" | tail -n 3)" >&2
        return 1
    fi
    silent=$(echo "$line" | grep -o 'for [0-9]*' | cut -d' ' -f2)
    local d=$((t1 - t0))
    echo "bench=xdetect runtime=stepx n=1 secs=$(awk -v d=$d 'BEGIN { printf "%.3f", d / 1000 }') ns_per_op=$((d * 1000000)) ops_per_sec=0 ok=1 detect_ms=$d silent_ms=$silent heartbeat_ms=$HB down_after_ms=$down bound_ms=$((down + HB))"
}

if [ "${1:-}" = one ]; then
    shift
    [ $# = 3 ] || { echo "usage: cluster.sh one WORKLOAD RUNTIME N" >&2; exit 2; }
    one "$@"
    exit $?
fi

# ---- the rows: R interleaved runs -------------------------------------------

QUICK=0 RUNS="" OUTDIR=build/bench/cluster
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --runs) RUNS=$2; shift ;;
    --build) BUILD=$2; shift ;;
    --out) OUTDIR=$2; shift ;;
    -h | --help)
        awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
        exit 0
        ;;
    *) echo "cluster.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then RUNS=${RUNS:-3}; TIMEOUT=90; else RUNS=${RUNS:-5}; TIMEOUT=300; fi
export XNODE_BUILD=$BUILD
T_START=$(date +%s)

# name | n (full) | n (quick) | runtimes: bench/run.sh's WORKLOADS has the
# same rows.
WORKLOADS=(
    "xpingpong|5000|1000|stepx stepx-1node nats"
    "xfanin|1000000|200000|stepx stepx-1node nats"
    "xdetect|1|1|stepx"
)

echo "=== build $BUILD ==="
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release
ninja -C "$BUILD" bench/stepx-xnode bench/stepx-nats-peer cmd/stepxd

mkdir -p "$OUTDIR"
RAW=$OUTDIR/raw.tsv
: >"$RAW"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for spec in "${WORKLOADS[@]}"; do
    IFS='|' read -r w nfull nquick rts <<<"$spec"
    n=$nfull
    [ "$QUICK" = 1 ] && n=$nquick
    echo "=== $w n=$n, $RUNS runs of: $rts ==="
    for round in $(seq 1 "$RUNS"); do
        for rt in $rts; do
            rm -f "$OUTDIR/time.txt"
            set +e
            out=$(timeout "$TIMEOUT" /usr/bin/time -v -o "$OUTDIR/time.txt" \
                bash "$0" one "$w" "$rt" "$n" 2>"$OUTDIR/stderr.txt")
            rc=$?
            set -e
            rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$OUTDIR/time.txt" 2>/dev/null || true)
            cpu=$(awk -F': ' '/User time \(seconds\)/ { u = $2 } /System time \(seconds\)/ { s = $2 }
                END { if (u != "" && s != "") printf "%.2f", u + s }' "$OUTDIR/time.txt" 2>/dev/null || true)
            line=$(printf '%s\n' "$out" | grep '^bench=' | tail -n 1 || true)
            if [ -z "$line" ]; then
                line="error rc=$rc $(tail -n 1 "$OUTDIR/stderr.txt" | tr '\t' ' ')"
                [ "$rc" = 124 ] && line="error rc=$rc timed out after ${TIMEOUT}s"
            fi
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$rt" "$round" "$rc" "${rss:-0}" "$cpu" "$line" >>"$RAW"
            printf '  %-10s %-11s #%s rc=%s  %s\n' "$w" "$rt" "$round" "$rc" "$line"
        done
    done
done
T_END=$(date +%s)
{
    echo "command=bash bench/cluster.sh$([ "$QUICK" = 1 ] && echo " --quick")"
    echo "mode=$([ "$QUICK" = 1 ] && echo quick || echo full)"
    echo "runs=$RUNS"
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "elapsed_s=$((T_END - T_START))"
    echo "nproc=$(nproc)"
    echo "cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
    echo "kernel=$(uname -sr)"
    echo "mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "load_before=$LOAD_BEFORE"
    echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "gcc=$(gcc --version | head -n 1)"
    echo "nats=nats-server $("$NATS_SERVER" --version 2>&1 | grep -o 'v[0-9.]*' | head -n 1), libnats-dev $(dpkg-query -W -f='${Version}' libnats-dev 2>/dev/null || echo '?')"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "dirty=$(git status --porcelain -- engine process relay cmd bench meson.build 2>/dev/null | wc -l)"
    echo "build=$(meson introspect "$BUILD" --buildoptions 2>/dev/null | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(" ".join("%s=%s" % (k, str(o[k]).lower() if isinstance(o[k], bool) else o[k])
               for k in ("buildtype", "optimization", "b_lto", "b_ndebug") if k in o))' || echo unknown)"
} >"$OUTDIR/meta.txt"
python3 bench/report.py --from "$OUTDIR" >"$OUTDIR/BENCHMARKS-cluster.md"
awk '/^## Summary/ { on = 1 } /^## Known gaps/ { on = 0 } on' "$OUTDIR/BENCHMARKS-cluster.md"
echo "=== wrote $OUTDIR/BENCHMARKS-cluster.md ($((T_END - T_START)) s) ==="

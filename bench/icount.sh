#!/usr/bin/env bash
# bench/icount.sh: instructions per operation of the hot paths, counted by
# callgrind (valgrind), for one build of stepx-bench.
#
#   bash bench/icount.sh [--diff] [--rounds R] <stepx-bench binary> [workload:n ...]
#
# Every run has one worker (`--workers 1`), so that the count depends as
# little as it can on how threads interleave. The workloads with a thread
# outside the engine (submit's submitter, spawnidle's driver) still vary
# with valgrind's thread switches, now and then by much (one spawnidle run
# in a dozen counted 13 % fewer): --rounds R counts each size R times and
# takes the median (default 1).
#
# Default workloads: pingpong:200000 skynet:100000. Prints one line per
# workload:
#
#   icount workload=<w> n=<n> instr=<total> per_op=<total / n>
#
# The totals include start-up, the same in two builds: a layout or
# refactoring change near a hot path compares these lines before and after.
#
# --diff runs each workload twice, at n and at n2 = 2n, and divides the
# difference by n2 - n, so that start-up and teardown cancel and per_op is
# the cost of one operation alone. skynet's n is a power of ten (a 10-ary
# tree), so its second run is at n2 = 10n:
#
#   icount workload=<w> n=<n> n2=<n2> instr_n=<total at n> instr_n2=<total at n2> per_op=<(instr_n2 - instr_n) / (n2 - n)> rounds=<R>
#
# A run that does not finish within ICOUNT_TIMEOUT seconds (default 300)
# fails, as one whose line lacks ok=1 does: the script stops with exit 1.
#
# bench/run.sh runs this form after its timed runs (bench/results/icount.tsv).
set -euo pipefail
diff=0
rounds=1
while [ $# -gt 0 ]; do
    case "$1" in
    --diff) diff=1 ;;
    --rounds) rounds=$2; shift ;;
    *) break ;;
    esac
    shift
done
bin=${1:?usage: bench/icount.sh [--diff] [--rounds R] <stepx-bench> [workload:n ...]}
shift
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(pingpong:200000 skynet:100000)
command -v valgrind >/dev/null || {
    echo "icount.sh: valgrind is missing (apt-get install -y valgrind)" >&2
    exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

count_once() { # workload n: prints callgrind's total of instructions
    timeout "${ICOUNT_TIMEOUT:-300}" valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
        "$bin" "$1" "$2" --workers 1 >"$tmp/line" 2>"$tmp/err" || {
        cat "$tmp/err" >&2
        return 1
    }
    grep -q 'ok=1' "$tmp/line" || {
        cat "$tmp/line" >&2
        return 1
    }
    grep -m1 '^summary:' "$tmp/cg.out" | awk '{print $2}'
}

count() { # workload n: the median of rounds counts
    for _ in $(seq "$rounds"); do
        count_once "$1" "$2" || return 1
    done | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

for spec in "${specs[@]}"; do
    w=${spec%%:*} n=${spec##*:}
    if [ "$diff" = 1 ]; then
        n2=$((2 * n))
        if [ "$w" = skynet ]; then n2=$((10 * n)); fi
        one=$(count "$w" "$n")
        two=$(count "$w" "$n2")
        awk -v w="$w" -v n="$n" -v n2="$n2" -v a="$one" -v b="$two" -v r="$rounds" 'BEGIN {
            printf "icount workload=%s n=%s n2=%s instr_n=%s instr_n2=%s per_op=%.1f rounds=%s\n",
                w, n, n2, a, b, (b - a) / (n2 - n), r }'
    else
        total=$(count "$w" "$n")
        awk -v w="$w" -v n="$n" -v t="$total" \
            'BEGIN { printf "icount workload=%s n=%s instr=%s per_op=%.1f\n", w, n, t, t / n }'
    fi
done

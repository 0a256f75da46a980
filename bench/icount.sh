#!/usr/bin/env bash
# bench/icount.sh: instructions per operation of the hot paths, counted by
# callgrind (valgrind), for one build of stepx-bench.
#
#   bash bench/icount.sh <stepx-bench binary> [workload:n ...]
#
# Default workloads: pingpong:200000 skynet:100000 (one worker, so the count
# does not depend on how threads interleave). Prints one line per workload:
#   icount workload=<w> n=<n> instr=<total> per_op=<total / n>
# A layout or refactoring change near a hot path compares these lines
# before and after (the totals include start-up, the same in both builds).
set -euo pipefail
bin=${1:?usage: bench/icount.sh <stepx-bench> [workload:n ...]}
shift
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(pingpong:200000 skynet:100000)
command -v valgrind >/dev/null || {
    echo "icount.sh: valgrind is missing (apt-get install -y valgrind)" >&2
    exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for spec in "${specs[@]}"; do
    w=${spec%%:*} n=${spec##*:}
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
        "$bin" "$w" "$n" --workers 1 >"$tmp/line" 2>"$tmp/err" || {
        cat "$tmp/err" >&2
        exit 1
    }
    grep -q 'ok=1' "$tmp/line" || { cat "$tmp/line" >&2; exit 1; }
    total=$(grep -m1 '^summary:' "$tmp/cg.out" | awk '{print $2}')
    awk -v w="$w" -v n="$n" -v t="$total" \
        'BEGIN { printf "icount workload=%s n=%s instr=%s per_op=%.1f\n", w, n, t, t / n }'
done

#!/usr/bin/env bash
# docs/models/check.sh: model-check the SPIN models of the scheduler's
# protocols (docs/SCHEDULER.md "Models"), each as written and under each of
# its negative controls.
#
#   park.pml   park / unpark (engine/sched/park.c): controls NO_RESCAN, NOTIFY_FIRST
#   state.pml  the process state word (engine/sched/worker.c): controls
#              NO_RECHECK, NO_BACKLOG, PLAIN_WAKE, HAND_QUEUE_FIRST
#
# For every run: spin -a, compile pan (safety: assertions and invalid end
# states), search exhaustively. The real protocol must finish the whole
# search with 0 errors; every negative control must make pan report an
# error (a counterexample). Exits 0 when all of that holds, 1 otherwise,
# and 77 (meson's "skipped") when spin or a C compiler is missing.
#
# Usage: docs/models/check.sh [MODEL.pml...]     (default: all of the above)
# Environment: SPIN_CC (default gcc, else cc) compiles pan; PAN_MEM_MB
# (default 2048) caps pan's memory: a search that hits it is incomplete and
# counts as a failure for the real protocol.
# Takes about 25 s and 700 MB on a 2-core machine.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# model -> its negative controls (space-separated -D names)
declare -A CONTROLS=(
    [park.pml]="NO_RESCAN NOTIFY_FIRST"
    [state.pml]="NO_RECHECK NO_BACKLOG PLAIN_WAKE HAND_QUEUE_FIRST"
)
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
    MODELS=(park.pml state.pml)
fi

if ! command -v spin >/dev/null 2>&1; then
    echo "check.sh: spin not found (apt-get install spin); skipping" >&2
    exit 77
fi
CC=${SPIN_CC:-}
if [ -z "$CC" ]; then
    if command -v gcc >/dev/null 2>&1; then CC=gcc; else CC=cc; fi
fi
if ! command -v "$CC" >/dev/null 2>&1; then
    echo "check.sh: no C compiler ($CC) to build pan; skipping" >&2
    exit 77
fi
MEM=${PAN_MEM_MB:-2048}

WORK=$(mktemp -d) || exit 1
trap 'rm -rf "$WORK"' EXIT

fails=0

# verify MODEL CONTROL: CONTROL is "" for the protocol as written.
verify()
{
    local model=$1 ctl=$2 dir label out rc
    label="$model${ctl:+ -D$ctl}"
    dir="$WORK/${model%.pml}${ctl:+-$ctl}"
    mkdir -p "$dir"
    cp "$HERE/$model" "$dir/" || {
        echo "FAIL  $label: no such model"
        fails=$((fails + 1))
        return
    }
    local t0=$SECONDS
    if ! (cd "$dir" && spin -a ${ctl:+-D$ctl} "$model" >spin.log 2>&1); then
        echo "FAIL  $label: spin -a failed:"
        sed 's/^/      /' "$dir/spin.log" | head -n 20
        fails=$((fails + 1))
        return
    fi
    # -DSAFETY: safety properties only (assertions, invalid end states);
    # -DCOLLAPSE: compressed state vectors (about half the memory). -O1 for
    # the full searches; a control stops at its first counterexample, so
    # -O0 (compiles in a third of the time) does for those.
    local opt=-O1
    [ -n "$ctl" ] && opt=-O0
    if ! (cd "$dir" && "$CC" "$opt" -w -DSAFETY -DCOLLAPSE -DMEMLIM="$MEM" \
        -o pan pan.c >cc.log 2>&1); then
        echo "FAIL  $label: compiling pan failed:"
        sed 's/^/      /' "$dir/cc.log" | head -n 20
        fails=$((fails + 1))
        return
    fi
    # -m: depth bound, far above what the models reach (a few hundred);
    # -w22: start with a small hash table (pan grows it as needed).
    out=$(cd "$dir" && ./pan -m1000000 -w22 2>&1)
    rc=$?
    local errors states secs
    errors=$(printf '%s\n' "$out" | sed -n 's/.*errors: \([0-9]*\).*/\1/p' | tail -n 1)
    states=$(printf '%s\n' "$out" | sed -n 's/^ *\([0-9e+.]*\) states, stored.*/\1/p' | tail -n 1)
    secs=$((SECONDS - t0))
    local incomplete=
    if printf '%s\n' "$out" | grep -qiE "depth too small|out of memory|memory limit|search not completed"; then
        incomplete=1
    fi
    if [ -z "$errors" ]; then
        echo "FAIL  $label: pan gave no result (exit $rc):"
        printf '%s\n' "$out" | tail -n 15 | sed 's/^/      /'
        fails=$((fails + 1))
        return
    fi
    local what
    what=$(printf '%s\n' "$out" | grep -m1 -E "^pan:[0-9]+: " | sed 's/^pan:[0-9]*: //')
    if [ -z "$ctl" ]; then
        if [ "$errors" = 0 ] && [ -z "$incomplete" ]; then
            echo "ok    $label: verified, $states states, ${secs}s"
        else
            if [ "$errors" = 0 ]; then
                what="the search did not complete (raise PAN_MEM_MB?)"
            fi
            echo "FAIL  $label: the protocol as written fails: errors $errors${what:+: $what}"
            printf '%s\n' "$out" | tail -n 20 | sed 's/^/      /'
            fails=$((fails + 1))
        fi
    else
        if [ "$errors" != 0 ]; then
            echo "ok    $label: negative control caught: ${what:-$errors error(s)}, ${secs}s"
        else
            echo "FAIL  $label: negative control NOT caught (errors 0${incomplete:+, search incomplete})"
            fails=$((fails + 1))
        fi
    fi
}

for m in "${MODELS[@]}"; do
    verify "$m" ""
    for c in ${CONTROLS[$m]:-}; do
        verify "$m" "$c"
    done
done

if [ "$fails" -ne 0 ]; then
    echo "check.sh: $fails check(s) failed"
    exit 1
fi
echo "check.sh: all models verified, all negative controls caught"
exit 0

#!/usr/bin/env bash
# scripts/demo.sh: a demo workload for a running stepxd, driven with the
# stepx CLI: every shipped process type, messages to an echo process and
# back, a batch of 1,000 processes, ps, kill, cancel, stats, a top frame,
# and the error paths with their exit codes. Each step prints the command
# and what it printed, and checks both; the script exits 1 if any check
# fails. It leaves two sleepers running on purpose: scripts/run.sh then
# shows the daemon's graceful stop (cancel, deadline, terminate).
#
#   bash scripts/demo.sh [PATH/TO/stepx]     (default build/release/cmd/stepx)
#
# The daemon is found as the CLI finds it: $STEPX_SOCKET, else
# /tmp/stepx-$UID.sock (scripts/run.sh starts one on a temporary socket).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
STEPX=${1:-build/release/cmd/stepx}
if [ ! -x "$STEPX" ]; then
    echo "demo: $STEPX is not built (meson compile -C build/release cmd/stepx)" >&2
    exit 1
fi
problems=0
steps=0

# quote ARG: ARG as one would type it in a shell (single quotes only when
# needed), for the command lines the demo shows.
quote()
{
    case "$1" in
    '' | *[!A-Za-z0-9_./=:@%+,-]*)
        printf "'%s'" "${1//\'/\'\\\'\'}"
        ;;
    *)
        printf '%s' "$1"
        ;;
    esac
}

# step EXPECTED-EXIT PATTERN ARGS...: shows `stepx ARGS`, runs it, prints
# its output (stdout and stderr), checks the exit status and that the
# output matches the extended regex PATTERN (none when empty). The output
# is left in $OUT.
step()
{
    local want=$1 pat=$2 a line="$ stepx"
    shift 2
    for a in "$@"; do
        line+=" $(quote "$a")"
    done
    printf '\n%s\n' "$line"
    steps=$((steps + 1))
    OUT=$("$STEPX" "$@" 2>&1)
    local rc=$?
    printf '%s\n' "$OUT" | sed 's/^/  /'
    if [ "$rc" -ne "$want" ]; then
        echo "demo: FAILED: exit status $rc, expected $want" >&2
        problems=$((problems + 1))
    elif [ -n "$pat" ] && ! printf '%s\n' "$OUT" | grep -qE -- "$pat"; then
        echo "demo: FAILED: the output does not match /$pat/" >&2
        problems=$((problems + 1))
    elif [ "$want" -ne 0 ]; then
        echo "  (exit status $rc, as expected)"
    fi
}

section()
{
    printf '\n=== %s ===\n' "$1"
}

# note TEXT...: a line of explanation.
note()
{
    printf '# %s\n' "$@"
}

section "process types the daemon ships"
step 0 "fanout" types

section "counter: submit, then wait"
note "submit prints the new process's PID; wait prints its result."
step 0 '^\{[0-9]+@[0-9]+\|[0-9]+\}$' submit counter run '[5]'
step 0 "done in 6 steps: 5$" wait "$OUT"

section "sleeper, exec and fanout, submitted with --wait"
step 0 "done in 2 steps: 300$" submit --wait sleeper run '[300]'
step 0 '"status":0' submit --wait exec run '[["uname", "-sr"]]'
step 0 '"stdout":"SHOUT\\n"' submit --wait exec run '[["tr", "a-z", "A-Z"], "shout\n"]'
step 0 "\[100(,100){9}\]$" submit --wait fanout run '[10, "counter", "run", [100]]'

section "echo: messages out and back"
note "echo answers every message to its sender. A plain 'send' exits at" \
    "once, so its answer finds no one (a dead letter); 'watch' keeps its" \
    "connection open, sends, and prints the answers until the process exits."
step 0 '^\{' submit echo serve
ECHO=$OUT
step 0 "sent 'greet'" send "$ECHO" greet '"hello"'
step 0 "exit .*: done: 2$" watch "$ECHO" --send ping '{"n": 1, "tags": ["a", "b"]}' --send stop null

section "a batch: 1,000 counters of 10 steps, then wait for all"
step 0 "1000 completed, 0 failed" submit --count 1000 counter run '[10]' --wait

section "live processes: sleepers and an echo; ps, kill, cancel"
SLEEPERS=()
for _ in 1 2 3; do
    step 0 "" submit sleeper run '[60000]'
    SLEEPERS+=("$OUT")
done
SLEEPER=${SLEEPERS[2]}
step 0 "" submit echo serve
ECHO=$OUT
step 0 "sleeper +run +blocked" ps
step 0 "terminated" kill "$SLEEPER"
step 1 "terminated" wait "$SLEEPER"
note "a cancel is a message the process handles; echo finishes with its count."
step 0 "cancel sent" cancel "$ECHO" "demo is over"
step 0 "done in .* steps: 0$" wait "$ECHO"

section "the engine's figures"
step 0 "^submitted +[0-9]+" stats
step 0 "FIGURE" top -n 1

section "the error paths and their exit codes"
step 1 "out of coffee" submit --wait fail run '["out of coffee"]'
step 1 '"code":"failed"' --json submit --wait fail run '["out of tea"]'
step 4 "unknown_type" submit teapot brew '[]'
step 2 "bad JSON" submit counter run '[1, 2'
note "a wait longer than a second shows a progress line; --timeout ends it:"
step 5 "waiting for .*\.\.\. 1 s" --timeout 1500 wait "${SLEEPERS[0]}"
note "(exit codes: stepx --help)"

echo
if [ "$problems" -ne 0 ]; then
    echo "demo: $problems of $steps steps did not go as expected" >&2
    exit 1
fi
echo "demo: all $steps steps went as expected"

#!/usr/bin/env bash
# scripts/run.sh: the main job. Installs what is missing (scripts/setup.sh),
# builds the daemon stepxd and the CLI stepx in build/release (the
# project's default build: release with link-time optimisation), starts
# stepxd in the background on a temporary socket with a state store in a
# temporary directory, runs the demo workload against it with the CLI
# (scripts/demo.sh), kills the daemon with SIGKILL in the middle of a job
# and starts it again to show the job finish with the same PID, then
# stops the daemon with SIGTERM and checks that it exits 0. Arguments are
# passed to stepxd (e.g. --workers 4). Exits non-zero if anything went
# wrong.
#
# The build directory is reused when already configured and recreated when
# it cannot be (another meson version, a broken earlier setup). Only the
# two programs and what they link are compiled, not tests or benchmarks.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=build/release
STEPXD=$BUILD/cmd/stepxd
STEPX=$BUILD/cmd/stepx
STOP_DEADLINE_MS=2000
T_START=$(date +%s%N)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/stepx-run.XXXXXX")
SOCK=$TMP/stepxd.sock
STATE=$TMP/state
DLOG=$TMP/stepxd.log
DPID=
cleanup()
{
    if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
        kill -TERM "$DPID" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$DPID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$DPID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

say()
{
    printf '\n=== %s ===\n' "$*"
}

# ms_since T0: milliseconds since T0 (from date +%s%N).
ms_since()
{
    echo $((($(date +%s%N) - $1) / 1000000))
}

say "1/6 packages (scripts/setup.sh)"
bash scripts/setup.sh

say "2/6 build stepxd and stepx (release, $BUILD)"
# The build's own output goes to a log; it is shown when something fails.
BLOG=$TMP/build.log
build()
{
    # Called as `if ! build`, where set -e is off: every step checks.
    if [ -f "$BUILD/meson-private/coredata.dat" ] &&
        meson setup --reconfigure "$BUILD" --buildtype=release -Db_lto=true; then
        :
    else
        rm -rf "$BUILD"
        meson setup "$BUILD" --buildtype=release -Db_lto=true || return 1
    fi
    local t
    for t in stepxd stepx; do
        if ! grep -q "\"name\": \"$t\"" "$BUILD/meson-info/intro-targets.json"; then
            echo "run.sh: cmd/meson.build defines no program $t (it needs" \
                "relay/server.c, relay/client.c and libjansson-dev)"
            return 1
        fi
    done
    meson compile -C "$BUILD" cmd/stepxd cmd/stepx
}
T0=$(date +%s%N)
if ! build >"$BLOG" 2>&1; then
    tail -n 40 "$BLOG" >&2
    echo "run.sh: the build failed (the last 40 lines of its log are above)" >&2
    exit 1
fi
echo "built $STEPXD and $STEPX in $(ms_since "$T0") ms"

# start_daemon: stepxd on $SOCK with its store in $STATE, in the
# background; waits until it is up and shows its start-up lines.
start_daemon()
{
    : >"$DLOG"
    "$STEPXD" --socket "$SOCK" --state-dir "$STATE" \
        --stop-deadline "$STOP_DEADLINE_MS" "$@" >"$DLOG" 2>&1 &
    DPID=$!
    for _ in $(seq 1 100); do
        if grep -q "SIGTERM stops it" "$DLOG" ||
            ! kill -0 "$DPID" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    if ! grep -q "SIGTERM stops it" "$DLOG"; then
        sed 's/^/  | /' "$DLOG" >&2
        echo "run.sh: stepxd did not start (its output is above)" >&2
        exit 1
    fi
    sed 's/^/  | /' "$DLOG"
    DLINES=$(wc -l <"$DLOG")
}

say "3/6 start the daemon: stepxd --socket $SOCK --state-dir $STATE --stop-deadline $STOP_DEADLINE_MS $*"
start_daemon "$@"

say "4/6 the demo workload (scripts/demo.sh), every command run with the stepx CLI"
demo_rc=0
STEPX_SOCKET=$SOCK bash scripts/demo.sh "$STEPX" || demo_rc=$?

say "5/6 a crash: SIGKILL in the middle of a job, then the same PID after a restart"
crash_rc=0
JOB=$(STEPX_SOCKET=$SOCK "$STEPX" submit sleeper run '[1500]' --key run-sh-crash) ||
    crash_rc=1
echo "stepx submit sleeper run '[1500]' --key run-sh-crash   -> $JOB (stored before the reply)"
sleep 0.3
# The shell's own stderr off around the kill and the wait: bash reports a
# job killed by a signal ("line N: PID Killed ...") on it, which is the
# point here, not news.
exec 3>&2 2>/dev/null
kill -KILL "$DPID" || true
wait "$DPID" || true
exec 2>&3 3>&-
DPID=
echo "kill -KILL stepxd: it is gone, with the sleeper half done"
start_daemon "$@"
AGAIN=$(STEPX_SOCKET=$SOCK "$STEPX" submit sleeper run '[1500]' --key run-sh-crash) ||
    crash_rc=1
echo "the same submit again (a client that lost its reply): $AGAIN"
OUT=$(STEPX_SOCKET=$SOCK "$STEPX" --timeout 10000 wait "$JOB") || crash_rc=1
echo "stepx wait $JOB   -> $OUT"
if [ "$crash_rc" -ne 0 ] || [ "$AGAIN" != "$JOB" ] ||
    ! printf '%s' "$OUT" | grep -q "(attempt 2)"; then
    echo "crash: FAILED: expected the same PID for the key and the job done at attempt 2" >&2
    crash_rc=1
else
    echo "crash: the job ran again from its start and finished once, with its PID"
fi

say "6/6 stop the daemon with SIGTERM"
LIVE=$(STEPX_SOCKET=$SOCK "$STEPX" ps 2>/dev/null | tail -n 1 || true)
echo "still running: ${LIVE:-?}"
echo "stepxd cancels every process, waits up to $STOP_DEADLINE_MS ms for them" \
    "to finish, terminates the rest and exits 0:"
T0=$(date +%s%N)
kill -TERM "$DPID" 2>/dev/null || true
daemon_rc=0
wait "$DPID" || daemon_rc=$?
DPID=
tail -n +"$((DLINES + 1))" "$DLOG" | sed 's/^/  | /'
echo "stepxd exited with status $daemon_rc after $(ms_since "$T0") ms"

echo
if [ "$daemon_rc" -ne 0 ]; then
    echo "run.sh: FAILED: stepxd exited with status $daemon_rc, not 0" >&2
    exit 1
fi
if [ "$demo_rc" -ne 0 ]; then
    echo "run.sh: FAILED: the demo had failures (marked 'demo: FAILED' above)" >&2
    exit 1
fi
if [ "$crash_rc" -ne 0 ]; then
    echo "run.sh: FAILED: the crash and restart did not go as expected (above)" >&2
    exit 1
fi
echo "run.sh: OK: the demo went as expected and stepxd stopped cleanly" \
    "($(($(ms_since "$T_START") / 1000)) s in all)"

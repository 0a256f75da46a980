#!/usr/bin/env bash
# scripts/test.sh: the whole stepx test suite, in the three builds CI runs:
#
#   build/gcc   gcc, the default build (release, LTO), --werror: every suite
#   build/asan  clang, ASan + UBSan, -fno-sanitize-recover=all: every suite
#   build/tsan  clang, TSan: the unit, stress, hostile, durable and
#               cluster suites (the hostile clients, kill -9 rounds with
#               restarts, and nodes over NATS, against a TSan stepxd)
#
# Usage: scripts/test.sh [--quick | --only gcc|asan|tsan]
#   --quick        the gcc build only
#   --only NAME    one build only
#
# Build directories are reused when already configured (meson setup
# --reconfigure), and recreated from scratch when that fails or when they
# were configured with another compiler.
#
# After each build's `meson test`, BUILD/meson-logs/testlog.json is summed.
# A build that fails to configure or compile counts as 1 failed test, and the
# other builds still run. The last line printed is always
#   N passed, N failed, N skipped
# and the exit status is non-zero if anything failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$(pwd)

usage()
{
    cat >&2 <<'USAGE'
usage: scripts/test.sh [--quick | --only gcc|asan|tsan]
  --quick        the gcc build only
  --only NAME    one build only (gcc, asan or tsan)
USAGE
}

BUILDS=(gcc asan tsan)
while [ $# -gt 0 ]; do
    case "$1" in
    --quick)
        BUILDS=(gcc)
        ;;
    --only)
        if [ $# -lt 2 ]; then
            usage
            exit 2
        fi
        BUILDS=("$2")
        shift
        ;;
    --only=*)
        BUILDS=("${1#--only=}")
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "test.sh: unknown argument: $1" >&2
        usage
        exit 2
        ;;
    esac
    shift
done
for b in "${BUILDS[@]}"; do
    case "$b" in
    gcc | asan | tsan) ;;
    *)
        echo "test.sh: unknown build '$b' (expected gcc, asan or tsan)" >&2
        exit 2
        ;;
    esac
done

# Meson itself runs on Debian's python3; prefer it over whatever a version
# manager put first in PATH.
if [ -x /usr/bin/python3 ]; then
    PYTHON=/usr/bin/python3
else
    PYTHON=$(command -v python3 || true)
fi

TOTAL_PASS=0
TOTAL_FAIL=0
TOTAL_SKIP=0
SUBTOTALS=()
# Each build's failed tests with the end of their output, printed again just
# above the summary: CI keeps only the end of a run's output.
FAILURE_REPORTS=()

# Print the grand total; this must stay the last line of output.
finish()
{
    echo
    local report
    for report in "${FAILURE_REPORTS[@]}"; do
        if [ -s "$report" ]; then
            echo "=== failed: $report ==="
            cat "$report"
        fi
    done
    echo "=== summary ==="
    local line
    for line in "${SUBTOTALS[@]}"; do
        echo "  $line"
    done
    echo "$TOTAL_PASS passed, $TOTAL_FAIL failed, $TOTAL_SKIP skipped"
    if [ "$TOTAL_FAIL" -ne 0 ]; then
        exit 1
    fi
    exit 0
}

# record NAME PASS FAIL SKIP [NOTE]
record()
{
    TOTAL_PASS=$((TOTAL_PASS + $2))
    TOTAL_FAIL=$((TOTAL_FAIL + $3))
    TOTAL_SKIP=$((TOTAL_SKIP + $4))
    SUBTOTALS+=("$1: $2 passed, $3 failed, $4 skipped${5:+ ($5)}")
}

if ! bash "$ROOT/scripts/setup.sh"; then
    echo "test.sh: scripts/setup.sh failed; nothing was built." >&2
    record setup 0 1 0 "scripts/setup.sh failed"
    finish
fi
if [ -z "$PYTHON" ]; then
    echo "test.sh: python3 not found (meson needs it too)." >&2
    record setup 0 1 0 "python3 missing"
    finish
fi

# The compiler id meson recorded for BUILD ("gcc", "clang"), or nothing.
# Meson 1.0 has no `introspect --compilers`; its log has a line
#   C compiler for the host machine: gcc (gcc 12.2.0 "...")
configured_compiler()
{
    sed -n 's/^C compiler for the host machine: .*(\([a-z0-9_-]*\) .*/\1/p' \
        "$1/meson-logs/meson-log.txt" 2>/dev/null | tail -n 1
}

# configure DIR CC [meson options...]: set up DIR, reusing it if it is
# already a meson build directory for the same compiler.
configure()
{
    local dir=$1 cc=$2
    shift 2
    if [ -f "$dir/meson-private/coredata.dat" ]; then
        local have
        have=$(configured_compiler "$dir")
        if [ "$have" = "$cc" ] &&
            meson setup --reconfigure "$dir" "$@"; then
            return 0
        fi
        echo "test.sh: $dir cannot be reused (compiler '$have'); recreating it"
    fi
    rm -rf "$dir"
    CC=$cc meson setup "$dir" "$@"
}

# summarize DIR: print "PASS FAIL SKIP NAMES" from DIR/meson-logs/testlog.json
# (NAMES: the failed tests, comma-separated, or nothing), list failing tests
# on stderr, and write each failed test's name and the last lines of its
# output to DIR/meson-logs/failed.txt (empty when none failed).
summarize()
{
    "$PYTHON" - "$1/meson-logs/testlog.json" "$1/meson-logs/failed.txt" <<'EOF'
import json, sys

TAIL_LINES = 40

passed = failed = skipped = 0
bad = []
try:
    f = open(sys.argv[1], encoding="utf-8", errors="replace")
except OSError:
    f = []
for line in f:
    line = line.strip()
    if not line:
        continue
    try:
        t = json.loads(line)
    except ValueError:
        continue  # a line cut short by an interrupted run
    result = t.get("result", "")
    if result in ("OK", "EXPECTEDFAIL"):
        passed += 1
    elif result == "SKIP":
        skipped += 1
    else:  # FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS, INTERRUPT, anything new
        failed += 1
        bad.append((t.get("name", "?"), result, t.get("stdout") or ""))
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for name, result, output in bad:
        print("    failed: %s (%s)" % (name, result), file=sys.stderr)
        lines = output.rstrip("\n").split("\n")
        out.write("--- %s (%s), last %d of %d lines of output:\n"
                  % (name, result, min(TAIL_LINES, len(lines)), len(lines)))
        for line in lines[-TAIL_LINES:]:
            out.write("  | " + line + "\n")
print(passed, failed, skipped,
      ",".join(name.replace(" ", "") for name, _, _ in bad))
EOF
}

# run_build NAME: configure, compile and test one build, and record it.
run_build()
{
    local name=$1 dir="build/$1" cc
    local setup_opts=(--werror)
    local test_opts=(--print-errorlogs --num-processes 2)
    local prefix=()

    case "$name" in
    gcc)
        # The build users install (meson.build's defaults, named here so
        # that a build directory configured otherwise is set back).
        cc=gcc
        setup_opts+=(--buildtype=release -Db_lto=true)
        ;;
    asan)
        # The sanitizer builds: -O2 with debug info, no LTO (the
        # sanitizers' reports want the frames, and LTO adds minutes of
        # linking per test binary for nothing they check).
        cc=clang
        setup_opts+=(--buildtype=debugoptimized -Db_lto=false)
        local san_flags="-fno-sanitize-recover=all -fno-omit-frame-pointer"
        setup_opts+=("-Db_sanitize=address,undefined" -Db_lundef=false
            "-Dc_args=$san_flags" "-Dc_link_args=$san_flags")
        test_opts+=(--timeout-multiplier 3)
        ;;
    tsan)
        cc=clang
        setup_opts+=(--buildtype=debugoptimized -Db_lto=false
            -Db_sanitize=thread -Db_lundef=false)
        test_opts+=(--timeout-multiplier 3 --suite unit --suite stress --suite hostile --suite durable --suite cluster)
        tsan_prefix || {
            record "$name" 0 1 0 "ThreadSanitizer cannot run on this machine"
            return
        }
        prefix=("${TSAN_PREFIX[@]}")
        ;;
    esac

    echo
    echo "=== $name: configure ($dir) ==="
    if ! configure "$dir" "$cc" "${setup_opts[@]}"; then
        record "$name" 0 1 0 "configure failed"
        return
    fi
    echo "=== $name: compile ==="
    if ! meson compile -C "$dir"; then
        record "$name" 0 1 0 "compile failed"
        return
    fi
    echo "=== $name: test ==="
    rm -f "$dir/meson-logs/testlog.json"
    local rc=0
    "${prefix[@]}" meson test -C "$dir" "${test_opts[@]}" || rc=$?

    local counts pass fail skip names note=""
    counts=$(summarize "$dir")
    read -r pass fail skip names <<<"$counts"
    FAILURE_REPORTS+=("$dir/meson-logs/failed.txt")
    if [ -n "$names" ]; then
        note="failed: $names"
    fi
    if [ -z "$pass" ]; then
        pass=0 fail=1 skip=0 note="could not read testlog.json"
    elif [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
        # meson test failed without a failing test in the log (an internal
        # error, an interrupted run): that is still a failure.
        fail=1
        note="meson test exited $rc"
    fi
    record "$name" "$pass" "$fail" "$skip" "$note"
}

# ThreadSanitizer from clang 14 maps its shadow memory at fixed addresses and
# dies with "FATAL: ThreadSanitizer: unexpected memory mapping" when the
# kernel randomizes mmap with more than 28 bits of entropy (vm.mmap_rnd_bits;
# some distributions and hosts set 32; LLVM 18's TSan re-execs itself without
# ASLR instead). At 28 TSan works; at 32 the probe fails about 19 runs in 20.
# A tiny threaded probe tells whether this machine is affected. If it is, the
# TSan tests run with ASLR off for their process tree (`setarch ARCH -R`, no
# root needed, nothing global changes); if that is not allowed (some
# containers forbid personality()), then as root vm.mmap_rnd_bits is lowered
# to 28 (a machine-wide setting that lasts until reboot, which is why it is
# only the last resort).
TSAN_PREFIX=()
PROBE=
# probe_ok [PREFIX...]: run $PROBE under PREFIX several times, since one run
# can land on a good mapping by luck (about 1 in 20 at 32 bits); leaves the
# output of the last run in $out.
probe_ok()
{
    local run
    for ((run = 0; run < 8; run++)); do
        out=$("$@" "$PROBE" 2>&1) || return 1
    done
    return 0
}

tsan_prefix()
{
    local tmp out
    tmp=$(mktemp -d) || return 1
    cat >"$tmp/probe.c" <<'EOF'
#include <pthread.h>
#include <stdatomic.h>
static atomic_int n;
static void *run(void *arg)
{
    (void)arg;
    atomic_fetch_add_explicit(&n, 1, memory_order_relaxed);
    return 0;
}
int main(void)
{
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], 0, run, 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], 0);
    return atomic_load(&n) == 2 ? 0 : 1;
}
EOF
    if ! clang -fsanitize=thread -g -pthread "$tmp/probe.c" -o "$tmp/probe"; then
        echo "test.sh: cannot compile a ThreadSanitizer program" >&2
        rm -rf "$tmp"
        return 1
    fi
    local arch ok=1
    arch=$(uname -m)
    PROBE=$tmp/probe
    if probe_ok; then
        TSAN_PREFIX=()
        ok=0
    elif printf '%s' "$out" | grep -q "unexpected memory mapping"; then
        echo "test.sh: TSan hits 'unexpected memory mapping' (high ASLR entropy)"
        if probe_ok setarch "$arch" -R; then
            echo "test.sh: running the TSan tests under 'setarch $arch -R'"
            TSAN_PREFIX=(setarch "$arch" -R)
            ok=0
        elif [ "$(id -u)" -eq 0 ] &&
            sysctl -w vm.mmap_rnd_bits=28 >/dev/null 2>&1 && probe_ok; then
            echo "test.sh: lowered vm.mmap_rnd_bits to 28 for TSan"
            TSAN_PREFIX=()
            ok=0
        fi
    fi
    if [ "$ok" -ne 0 ]; then
        echo "test.sh: the ThreadSanitizer probe failed:" >&2
        printf '%s\n' "$out" | head -n 20 >&2
    fi
    rm -rf "$tmp"
    return "$ok"
}

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:print_stacktrace=1:strict_string_checks=1:check_initialization_order=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"

for b in "${BUILDS[@]}"; do
    run_build "$b"
done
finish

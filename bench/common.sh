# shellcheck shell=bash
# bench/common.sh: what bench/run.sh and bench/curves.sh both do, sourced by
# them from the repository's root:
#
#   bench_packages <caller> <package>...   the Debian packages the peers and
#                                          figures need, installed when
#                                          missing (as root; else says which
#                                          and fails); BENCH_PACKAGES lists
#                                          them
#   bench_built <build dir>                what that stepx build was made
#                                          from: sets BUILT_COMMIT,
#                                          BUILT_DIRTY (files changed since)
#                                          and BUILT_OPTIONS (its meson
#                                          options), read before the runs
#   bench_tools <dir>                      the peers (Go, Erlang, CAF, Tokio)
#                                          and the probes, built into dir
#                                          (build/bench) when their source
#                                          is newer

bench_packages() {
    local who=$1 pkg status
    shift
    local missing=()
    for pkg in "$@"; do
        status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
        [ "$status" = "installed" ] || missing+=("$pkg")
    done
    [ "${#missing[@]}" -gt 0 ] || return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "$who: missing packages: ${missing[*]} (run as root to install)" >&2
        exit 1
    fi
    echo "$who: installing missing packages: ${missing[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
}

# What every run of the peers needs (bench/peers/): Go, Erlang, CAF (g++),
# Tokio (Debian's cargo offline with librust-tokio-dev), Redis (relay1's
# reference), GNU time (peak RSS and CPU time), python3 with matplotlib
# (bench/report.py, bench/curves.py's figures).
# shellcheck disable=SC2034 # used by the scripts that source this file
BENCH_PACKAGES=(golang-go erlang-base erlang-dev libcaf-dev g++ time python3
    cargo librust-tokio-dev redis-server redis-tools python3-matplotlib)

bench_built() {
    local build=$1
    # shellcheck disable=SC2034 # read by the scripts that source this file
    BUILT_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    # shellcheck disable=SC2034
    BUILT_DIRTY=$(git status --porcelain -- engine process relay cmd \
        bench/stepx_bench.c bench/xnode_bench.c bench/peers/nats \
        bench/meson.build meson.build 2>/dev/null | wc -l)
    # shellcheck disable=SC2034
    BUILT_OPTIONS=$(meson introspect "$build" --buildoptions | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(" ".join("%s=%s" % (k, str(o[k]).lower() if isinstance(o[k], bool) else o[k])
               for k in ("buildtype", "optimization", "b_lto", "b_ndebug") if k in o))') ||
        BUILT_OPTIONS=unknown
}

stale() { [ ! -e "$1" ] || [ "$2" -nt "$1" ]; } # target source

bench_tools() {
    local bb=$1 root
    root=$(pwd)
    mkdir -p "$bb/erlang"
    if stale "$bb/stepx-peer-go" bench/peers/go/main.go; then
        (cd bench/peers/go && go build -o "$root/$bb/stepx-peer-go" main.go)
    fi
    if stale "$bb/erlang/bench.beam" bench/peers/erlang/bench.erl; then
        erlc -o "$bb/erlang" bench/peers/erlang/bench.erl
    fi
    if stale "$bb/stepx-peer-caf" bench/peers/caf/bench.cpp; then
        g++ -O2 -std=c++17 -o "$bb/stepx-peer-caf" bench/peers/caf/bench.cpp \
            -lcaf_core -lpthread
    fi
    if stale "$bb/stepx-peer-tokio" bench/peers/tokio/src/main.rs; then
        # Debian's cargo, offline (bench/peers/tokio/.cargo/config.toml): a
        # rustup cargo earlier on PATH could not reach a registry here.
        (cd bench/peers/tokio && CARGO_TARGET_DIR="$root/$bb/tokio" \
            /usr/bin/cargo build --release --quiet)
        cp "$bb/tokio/release/stepx-peer-tokio" "$bb/stepx-peer-tokio"
    fi
    local probe
    for probe in pagefault memlat cpu c2c handoff; do
        if stale "$bb/$probe-probe" "bench/${probe}_probe.c"; then
            gcc -O2 -std=c11 -pthread -o "$bb/$probe-probe" "bench/${probe}_probe.c"
        fi
    done
}

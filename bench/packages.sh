# shellcheck shell=bash
# bench/packages.sh: sourced by bench/run.sh and bench/curves.sh. Installs
# the Debian packages the benchmarks' peers and figures need, when missing
# (as root; else says which and fails).
#
#   bench_packages <caller> <package>...

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

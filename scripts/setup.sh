#!/usr/bin/env bash
# scripts/setup.sh: make sure the Debian 12 packages stepx builds and tests
# with are installed. Idempotent: a machine that already has everything does
# no apt work at all (dpkg-query decides), so scripts/test.sh and
# scripts/run.sh can call it every time.
#
# As root: installs what is missing (apt-get update only when something is).
# Not root: prints the missing packages and exits 1.
set -euo pipefail

PACKAGES=(
    libuv1-dev
    libmsgpack-dev
    meson
    ninja-build
    pkg-config
    clang
    libclang-rt-14-dev
    libjansson-dev
    gcc
    spin
    python3-msgpack
    libsqlite3-dev
    libnats-dev
    nats-server
)

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "setup.sh: dpkg-query not found; this script expects Debian 12." >&2
    echo "setup.sh: install by hand: ${PACKAGES[*]}" >&2
    exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    if [ "$status" != "installed" ]; then
        missing+=("$pkg")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "setup.sh: all build and test packages are installed."
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: missing packages: ${missing[*]}" >&2
    echo "setup.sh: not running as root; install them with:" >&2
    echo "    sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi

echo "setup.sh: installing missing packages: ${missing[*]}"
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
echo "setup.sh: done."

#!/usr/bin/env bash
# tests/install/check_install.sh BUILD_DIR SOURCE_DIR
# The installed library is usable the way README.md says: `meson install`
# (into a temporary DESTDIR here), then
#   cc app.c $(pkg-config --cflags --libs stepx)
# builds examples/hello.c, and the program runs and checks its result.
set -euo pipefail
build=$1
src=$2
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --no-rebuild >/dev/null
pc=$(dirname "$(find "$dest" -name stepx.pc | head -n 1)")
[ -n "$pc" ] || { echo "stepx.pc was not installed"; exit 1; }
for h in stepx.h engine.h process.h; do
    [ -n "$(find "$dest" -path "*/include/stepx/$h")" ] ||
        { echo "header <stepx/$h> was not installed"; exit 1; }
done
export PKG_CONFIG_PATH=$pc PKG_CONFIG_SYSROOT_DIR=$dest
flags=$(pkg-config --cflags --libs stepx)
libdir=$(dirname "$(find "$dest" -name "libstepx.so*" | head -n 1)")
# shellcheck disable=SC2086 # flags are words on purpose
cc -std=c11 "$src/examples/hello.c" $flags -o "$dest/hello"
LD_LIBRARY_PATH="$libdir" "$dest/hello"
# The static library links too (with its private dependencies).
# shellcheck disable=SC2086
cc -std=c11 "$src/examples/hello.c" -I"$dest/usr/local/include" \
    "$(find "$dest" -name libstepx.a | head -n 1)" \
    $(pkg-config --libs libuv msgpack sqlite3) -pthread -lm -o "$dest/hello-static"
"$dest/hello-static" >/dev/null
echo "install: headers, stepx.pc, shared and static library all usable"

#!/usr/bin/env bash
# tests/install/check_install.sh BUILD_DIR SOURCE_DIR
# The installed library is usable the way README.md says: `meson install`
# (into a temporary DESTDIR here; PKG_CONFIG_PATH names its pkgconfig
# folder, PKG_CONFIG_SYSROOT_DIR the DESTDIR), then
#   cc app.c $(pkg-config --cflags --libs stepx)
# builds examples/hello.c, and the program runs and checks its result:
# with LD_LIBRARY_PATH, and built with
#   -Wl,-rpath,$(pkg-config --variable=libdir stepx)
# without it (and without either it stops on the missing libstepx.so.0,
# as README.md says, unless the system has one of its own). The static
# library links too. A plugin built with the installed headers only,
#   cc -shared -fPIC -o my_types.so my_types.c $(pkg-config --cflags stepx)
# (tests/cmd/plugin_example.c), is loaded by the installed stepxd with
# `--load ./my_types.so`, and its type answers through the installed CLI
# when there is one.
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
# shellcheck disable=SC2086,SC2046
cc -std=c11 "$src/examples/hello.c" -I"$dest/usr/local/include" \
    "$(find "$dest" -name libstepx.a | head -n 1)" \
    $(pkg-config --libs libuv msgpack sqlite3) -pthread -lm -o "$dest/hello-static"
"$dest/hello-static" >/dev/null
# And with link-time optimisation over the library and the program, as
# README.md gives for the speed docs/BENCHMARKS.md measures (the archive's
# objects carry the LTO bytecode of the gcc that built them beside their
# machine code: this gcc, here).
# shellcheck disable=SC2086,SC2046
cc -std=c11 -O2 -flto "$src/examples/hello.c" -I"$dest/usr/local/include" \
    "$(find "$dest" -name libstepx.a | head -n 1)" \
    $(pkg-config --libs libuv msgpack sqlite3) -pthread -lm -o "$dest/hello-lto"
"$dest/hello-lto" >/dev/null
# Built with the rpath README.md gives, the program finds the library
# without LD_LIBRARY_PATH.
# shellcheck disable=SC2086
cc -std=c11 "$src/examples/hello.c" $flags \
    -Wl,-rpath,"$(pkg-config --variable=libdir stepx)" -o "$dest/hello-rpath"
env -u LD_LIBRARY_PATH "$dest/hello-rpath" >/dev/null
# Without either, the error README.md quotes (unless the system's library
# path holds a libstepx.so.0 of its own).
if ! ldconfig -p 2>/dev/null | grep -q 'libstepx\.so\.0 '; then
    if env -u LD_LIBRARY_PATH "$dest/hello" >"$dest/norpath.log" 2>&1 ||
        ! grep -q "error while loading shared libraries: libstepx.so.0: cannot open shared object file" \
            "$dest/norpath.log"; then
        echo "hello without rpath or LD_LIBRARY_PATH did not stop on libstepx.so.0:"
        cat "$dest/norpath.log"
        exit 1
    fi
fi

# A plugin built with the installed headers only (no -lstepx: the
# installed stepxd provides the engine), loaded by the installed stepxd.
stepxd=$(find "$dest" -path "*/bin/stepxd" | head -n 1)
[ -n "$stepxd" ] || { echo "stepxd was not installed"; exit 1; }
stepx=$(find "$dest" -path "*/bin/stepx" | head -n 1)
cp "$src/tests/cmd/plugin_example.c" "$dest/my_types.c"
cd "$dest"
# shellcheck disable=SC2046 # the flags are words on purpose
cc -shared -fPIC -o my_types.so my_types.c $(pkg-config --cflags stepx)
"$stepxd" --ephemeral --socket "$dest/s.sock" --load ./my_types.so \
    >"$dest/stepxd.log" 2>&1 &
dpid=$!
for _ in $(seq 1 100); do
    grep -q "SIGTERM stops it" "$dest/stepxd.log" && break
    kill -0 "$dpid" 2>/dev/null || break
    sleep 0.1
done
if ! grep -q "SIGTERM stops it" "$dest/stepxd.log"; then
    echo "the installed stepxd did not start with --load ./my_types.so:"
    cat "$dest/stepxd.log"
    kill -KILL "$dpid" 2>/dev/null || true
    exit 1
fi
answer=ok
if [ -n "$stepx" ]; then
    answer=$("$stepx" --socket "$dest/s.sock" --timeout 10000 submit --wait \
        greeter hello '["plugin"]' 2>&1) || true
fi
kill -TERM "$dpid"
wait "$dpid" || { echo "stepxd did not exit 0 on SIGTERM"; exit 1; }
case "$answer" in
ok) plugin="plugin built and loaded" ;;
*'"hello, plugin"') plugin="plugin built, loaded and run" ;;
*) echo "the plugin's greeter did not answer: $answer"; exit 1 ;;
esac
echo "install: headers, stepx.pc, shared (LD_LIBRARY_PATH, rpath) and static library (with -flto too) all usable; $plugin"

#!/usr/bin/env bash
# tests/cmd/test_load.sh — `stepxd --load` of a plugin that cannot be
# loaded says what is wrong and what to do.
#
#   bash tests/cmd/test_load.sh PATH/TO/stepxd
#
# Plugins from the environment (tests/cmd/meson.build builds them):
# STEPX_TEST_PLUGIN (plugin_example.so, which loads),
# STEPX_TEST_PLUGIN_NEEDS_DEP (links STEPX_TEST_PLUGIN_DEP, libplugin_dep.so),
# STEPX_TEST_PLUGIN_STEPX_SYM and STEPX_TEST_PLUGIN_OTHER_SYM (each calls
# a function nobody defines), and STEPX_TEST_LIBSTEPX (libstepx.so).
#
# For each case stepxd must exit 1 before listening, its first line must
# be dlopen's message, "stepxd: --load PATH: <dlerror>", and its second
# line, with the same prefix, the advice: a missing file (absolute,
# relative, a bare name), a bare name of a file in the current directory,
# a library the plugin needs that is not found (and the plugin then
# loads with LD_LIBRARY_PATH set as the advice says), an undefined stepx
# symbol and an undefined other one, a file that is not ELF, one built
# for another machine and one of the other word size. Last, every sx_
# function libstepx.so exports, stepxd exports too (a plugin links no
# libstepx and takes them from stepxd). Prints one line per check and
# "N passed, N failed"; exits non-zero when anything failed.
set -u

if [ $# -lt 1 ]; then
    echo "usage: $0 STEPXD" >&2
    exit 2
fi
STEPXD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
for v in STEPX_TEST_PLUGIN STEPX_TEST_PLUGIN_NEEDS_DEP STEPX_TEST_PLUGIN_DEP \
    STEPX_TEST_PLUGIN_STEPX_SYM STEPX_TEST_PLUGIN_OTHER_SYM; do
    if [ ! -f "${!v:-}" ]; then
        echo "$v must name a built file (tests/cmd/meson.build sets it)" >&2
        exit 2
    fi
done
unset LD_LIBRARY_PATH

TMP=$(mktemp -d "${TMPDIR:-/tmp}/stepx-load.XXXXXX")
DPID=
passed=0
failed=0

cleanup()
{
    if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
        kill -KILL "$DPID" 2>/dev/null
        wait "$DPID" 2>/dev/null
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

ok()
{
    passed=$((passed + 1))
    echo "ok    $1"
}

bad()
{
    failed=$((failed + 1))
    echo "FAIL  $1"
    if [ $# -gt 1 ]; then
        printf '%s\n' "$2" | head -n 30 | sed 's/^/      | /'
    fi
}

# load_fails NAME PATH ERROR ADVICE: `stepxd --load PATH`, run in the
# current directory, exits 1 without listening; its first line is
# "stepxd: --load PATH: " and then text matching the extended regex
# ERROR, its second the same prefix and then text matching ADVICE.
load_fails()
{
    local name=$1 path=$2 err=$3 advice=$4
    rm -f "$TMP/s.sock"
    timeout 20 "$STEPXD" --ephemeral --socket "$TMP/s.sock" --load "$path" \
        >"$TMP/log" 2>&1
    local rc=$? prefix="stepxd: --load $path: " l1 l2
    l1=$(sed -n 1p "$TMP/log")
    l2=$(sed -n 2p "$TMP/log")
    if [ "$rc" -eq 1 ] && [ ! -e "$TMP/s.sock" ] &&
        [ "${l1:0:${#prefix}}" = "$prefix" ] &&
        [ "${l2:0:${#prefix}}" = "$prefix" ] &&
        printf '%s\n' "${l1:${#prefix}}" | grep -qE -- "$err" &&
        printf '%s\n' "${l2:${#prefix}}" | grep -qE -- "$advice"; then
        ok "$name"
    else
        bad "$name (exit $rc; want exit 1, dlopen's line, then the advice)" "$(cat "$TMP/log")"
    fi
}

# put_bytes FILE OFFSET OCTAL-ESCAPES: overwrites bytes of FILE in place.
put_bytes()
{
    # shellcheck disable=SC2059 # the escapes are the point
    printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

cd "$TMP" || exit 1

# ---- the file is not there ----

load_fails "a missing absolute path: says there is no such file" \
    "$TMP/nosuch.so" "cannot open shared object file" \
    "^there is no file $TMP/nosuch\.so: give the path of the plugin's \.so file$"
load_fails "a missing relative path: names stepxd's current directory" \
    "sub/nosuch.so" "cannot open shared object file" \
    "^there is no file sub/nosuch\.so in stepxd's current directory $TMP: "
load_fails "a bare name found nowhere: the library path only, say ./NAME" \
    "nosuch_plugin.so" "cannot open shared object file" \
    "looked up only in the library path \(LD_LIBRARY_PATH.*say \./nosuch_plugin\.so$"
cp "$STEPX_TEST_PLUGIN" "$TMP/my_types.so"
load_fails "a bare name of a file here: not the current directory, say ./NAME" \
    "my_types.so" "cannot open shared object file" \
    "not in the current directory: say \./my_types\.so$"

# ---- a library the plugin needs is not found ----

mkdir "$TMP/plugins" "$TMP/deps"
NEEDS=$TMP/plugins/$(basename "$STEPX_TEST_PLUGIN_NEEDS_DEP")
DEP=$(basename "$STEPX_TEST_PLUGIN_DEP")
cp "$STEPX_TEST_PLUGIN_NEEDS_DEP" "$NEEDS"
cp "$STEPX_TEST_PLUGIN_DEP" "$TMP/deps/"
load_fails "a library the plugin needs is missing: names it, LD_LIBRARY_PATH or rpath" \
    "$NEEDS" "^$DEP: cannot open shared object file" \
    "^it needs $DEP, which the dynamic loader did not find: set LD_LIBRARY_PATH to the folder that holds $DEP, or build the plugin with -Wl,-rpath,FOLDER \(ldd .* lists what it needs\)$"

# The advice works: with LD_LIBRARY_PATH naming the library's folder the
# plugin loads and the daemon starts (and stops on SIGTERM with exit 0).
rm -f "$TMP/s.sock"
LD_LIBRARY_PATH=$TMP/deps "$STEPXD" --ephemeral --socket "$TMP/s.sock" \
    --load "$NEEDS" >"$TMP/up.log" 2>&1 &
DPID=$!
for _ in $(seq 1 100); do
    grep -q "SIGTERM stops it" "$TMP/up.log" && break
    kill -0 "$DPID" 2>/dev/null || break
    sleep 0.1
done
if grep -q "SIGTERM stops it" "$TMP/up.log"; then
    kill -TERM "$DPID"
    wait "$DPID"
    rc=$?
    DPID=
    if [ "$rc" -eq 0 ]; then
        ok "with LD_LIBRARY_PATH set as advised the plugin loads"
    else
        bad "with LD_LIBRARY_PATH set: stepxd exits $rc on SIGTERM" "$(cat "$TMP/up.log")"
    fi
else
    bad "with LD_LIBRARY_PATH set as advised the plugin loads" "$(cat "$TMP/up.log")"
fi

# ---- symbols nobody defines ----

load_fails "an undefined sx_ symbol: another stepx version's headers" \
    "$STEPX_TEST_PLUGIN_STEPX_SYM" "undefined symbol: sx_plugin_test_absent" \
    "^this stepxd has no sx_plugin_test_absent: the plugin was built with the headers of another stepx version"
load_fails "an undefined other symbol: link the library that defines it" \
    "$STEPX_TEST_PLUGIN_OTHER_SYM" "undefined symbol: plugin_test_absent" \
    "^neither stepxd nor a library the plugin links defines plugin_test_absent: link the plugin with the library that does"

# ---- not a shared object of this machine ----

echo "not a library" >"$TMP/short.so"
load_fails "a short text file: not a shared object" \
    "$TMP/short.so" "file too short" \
    "^it is not a shared object: build the plugin with cc -shared -fPIC$"
head -c 4096 /dev/zero | tr '\0' 'x' >"$TMP/text.so"
load_fails "a long text file: not a shared object" \
    "$TMP/text.so" "invalid ELF header" \
    "^it is not a shared object: build the plugin with cc -shared -fPIC$"
# Another machine: the plugin with e_machine (2 bytes at offset 18, in
# the file's byte order) set to AArch64 (183), or x86-64 (62) where
# stepxd is AArch64.
cp "$STEPX_TEST_PLUGIN" "$TMP/other.so"
ORDER=$(od -An -tu1 -j5 -N1 "$STEPXD" | tr -d ' ')
OWN=$(od -An -tu1 -j18 -N2 "$STEPXD" | awk -v o="$ORDER" \
    '{ print o == 2 ? $1 * 256 + $2 : $1 + $2 * 256 }')
if [ "$OWN" = 183 ]; then OTHER='\076' OTHER_NAME=x86-64; else OTHER='\267' OTHER_NAME=AArch64; fi
if [ "$ORDER" = 2 ]; then put_bytes "$TMP/other.so" 18 "\\000$OTHER"; else put_bytes "$TMP/other.so" 18 "$OTHER\\000"; fi
load_fails "a plugin built for another machine: names both machines" \
    "$TMP/other.so" "cannot open shared object file" \
    "^it is built for $OTHER_NAME and this stepxd for [^:]+: build the plugin with this machine's compiler$"
# The other word size: EI_CLASS (offset 4) 1 is 32-bit, 2 is 64-bit.
cp "$STEPX_TEST_PLUGIN" "$TMP/class.so"
if [ "$(od -An -tu1 -j4 -N1 "$STEPXD" | tr -d ' ')" = 2 ]; then
    put_bytes "$TMP/class.so" 4 '\001'
    WANT="it is 32-bit and this stepxd 64-bit"
else
    put_bytes "$TMP/class.so" 4 '\002'
    WANT="it is 64-bit and this stepxd 32-bit"
fi
load_fails "a plugin of the other word size: says both" \
    "$TMP/class.so" "wrong ELF class" "^$WANT: build the plugin for this stepxd's machine"

# ---- stepxd holds the whole library ----

if [ -z "${STEPX_TEST_LIBSTEPX:-}" ] || ! command -v nm >/dev/null; then
    echo "skip  stepxd exports libstepx's functions (no STEPX_TEST_LIBSTEPX or no nm)"
else
    nm -D --defined-only "$STEPX_TEST_LIBSTEPX" | awk '$3 ~ /^sx_/ { print $3 }' |
        sort -u >"$TMP/lib.txt"
    nm -D --defined-only "$STEPXD" | awk '$3 ~ /^sx_/ { print $3 }' |
        sort -u >"$TMP/exe.txt"
    MISSING=$(comm -23 "$TMP/lib.txt" "$TMP/exe.txt")
    if [ -s "$TMP/lib.txt" ] && [ -z "$MISSING" ]; then
        ok "stepxd exports every sx_ function of libstepx.so ($(wc -l <"$TMP/lib.txt"))"
    else
        bad "stepxd exports every sx_ function of libstepx.so; it lacks:" "$MISSING"
    fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# tests/fuzz/run.sh [TARGET]: builds a fuzzer standalone (no meson) with
# clang -fsanitize=fuzzer,address,undefined from the sources it needs and
# runs it for FUZZ_SECONDS (default 60) on its seed corpus
# tests/fuzz/corpus/TARGET. TARGET (default wire):
#   wire      tests/fuzz/fuzz_wire.c: relay/wire.c, relay/codes.c and the
#             payload sources: process/pack.c, unpack.c, utf8.c, pid.c,
#             errors.c, hostport.c (msgpack-c for the writer)
#   payload   tests/fuzz/fuzz_payload.c: the payload sources and
#             process/payload_map.c (sx_map_get), against msgpack-c's unpacker
#   cli_json  tests/fuzz/fuzz_cli_json.c: cmd/cli_json.c with the payload
#             sources and process/payload_map.c (libjansson)
#   http      tests/fuzz/fuzz_http.c: engine/commands/http_parse.c with the
#             payload sources (the request builder reads a msgpack map)
#   store     tests/fuzz/fuzz_store.c: engine/store/sqlite*.c with libsqlite3
#             (a stepx.db of arbitrary bytes opened and recovered)
#
# Environment: FUZZ_SECONDS; FUZZ_WORK (the binary, the grown corpus and
# any crash reproducer go there; default: a new /tmp/stepx-fuzz.* folder,
# kept); CLANG (default clang).
# Exit status: 0 no crash; 1 a crash, a leak, a timeout or an oracle
# failure (the reproducer is in $FUZZ_WORK/artifacts/; replay it with
# `$FUZZ_WORK/fuzz_TARGET FILE`); 2 the build failed or TARGET is
# unknown; 77 (meson's "skipped")
# clang or libFuzzer is missing.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${1:-wire}
seconds=${FUZZ_SECONDS:-60}
clang=${CLANG:-clang}
work=${FUZZ_WORK:-$(mktemp -d /tmp/stepx-fuzz.XXXXXX)}

if ! command -v "$clang" >/dev/null 2>&1; then
    echo "run.sh: $clang not found; skipping" >&2
    exit 77
fi
probe=$(mktemp -d /tmp/stepx-fuzz-probe.XXXXXX)
trap 'rm -rf "$probe"' EXIT
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)' \
    '{ (void)d; (void)n; return 0; }' >"$probe/p.c"
if ! "$clang" -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" 2>/dev/null; then
    echo "run.sh: $clang cannot link -fsanitize=fuzzer (libclang-rt-*-dev); skipping" >&2
    exit 77
fi

msgpack_libs=$(pkg-config --libs msgpack-c 2>/dev/null ||
    pkg-config --libs msgpack 2>/dev/null || echo -lmsgpackc)
msgpack_cflags=$(pkg-config --cflags msgpack-c 2>/dev/null ||
    pkg-config --cflags msgpack 2>/dev/null || true)

# The payload sources: the writer, the reader, the UTF-8 checks, PIDs,
# error codes, and the HOST:PORT reading (relay/client.c and
# engine/commands/http_parse.c call it).
payload_src=("$root/process/pack.c" "$root/process/unpack.c"
    "$root/process/utf8.c" "$root/process/pid.c" "$root/process/errors.c"
    "$root/process/hostport.c")
extra_libs=
case "$target" in
wire)
    srcs=("$root/relay/wire.c" "$root/relay/codes.c" "${payload_src[@]}")
    ;;
payload)
    srcs=("$root/process/payload_map.c" "$root/relay/wire.c"
        "$root/relay/codes.c" "${payload_src[@]}")
    ;;
cli_json)
    srcs=("$root/cmd/cli_json.c" "$root/process/payload_map.c"
        "$root/relay/wire.c" "$root/relay/codes.c" "${payload_src[@]}")
    extra_libs=$(pkg-config --libs jansson 2>/dev/null || echo -ljansson)
    ;;
http)
    srcs=("$root/engine/commands/http_parse.c" "${payload_src[@]}")
    ;;
store)
    srcs=("$root/engine/store/sqlite.c" "$root/engine/store/sqlite_open.c")
    extra_libs=$(pkg-config --libs sqlite3 2>/dev/null || echo -lsqlite3)
    ;;
*)
    echo "run.sh: unknown target '$target' (wire, payload, cli_json, http" \
        "or store)" >&2
    exit 2
    ;;
esac
bin=$work/fuzz_$target

mkdir -p "$work/corpus" "$work/artifacts"
echo "run.sh: building $bin"
# shellcheck disable=SC2086 # the pkg-config words are meant to split
if ! "$clang" -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Wall -Wextra -Werror \
    -I"$root" -I"$root/process" -I"$root/engine" -I"$root/relay" \
    $msgpack_cflags \
    "$here/fuzz_$target.c" "${srcs[@]}" \
    $msgpack_libs $extra_libs -lm -o "$bin"; then
    echo "run.sh: build failed" >&2
    exit 2
fi

echo "run.sh: fuzzing for ${seconds}s (new inputs go to $work/corpus)"
# The first corpus folder is written to, the seed folder only read.
# -error_exitcode=1: libFuzzer's default (77) would read as "skipped".
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
    "$bin" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -error_exitcode=1 \
    -timeout_exitcode=1 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" \
    "$work/corpus" "$here/corpus/$target"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
    echo "run.sh: FAILED (exit $rc); reproducers:" >&2
    ls -l "$work/artifacts/" >&2 || true
    exit 1
fi
echo "run.sh: no crash in ${seconds}s"

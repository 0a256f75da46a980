#!/usr/bin/env bash
# scripts/run.sh: the main job. Installs what is missing (scripts/setup.sh),
# builds build/release (gcc, buildtype release) and runs the demo workload,
# build/release/examples/stepx-demo. Arguments are passed to the demo.
#
# The build directory is reused when already configured and recreated when
# it cannot be (another meson version, a broken earlier setup).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

BUILD=build/release
DEMO=$BUILD/examples/stepx-demo

echo "=== release: configure ($BUILD) ==="
if [ -f "$BUILD/meson-private/coredata.dat" ] &&
    meson setup --reconfigure "$BUILD" --buildtype=release; then
    :
else
    rm -rf "$BUILD"
    meson setup "$BUILD" --buildtype=release
fi

# Only the demo and what it links are compiled: the main job should not wait
# for (or trip over) tests and benchmarks.
if ! grep -q '"name": "stepx-demo"' "$BUILD/meson-info/intro-targets.json"; then
    echo "run.sh: the demo program does not exist yet: examples/meson.build" >&2
    echo "run.sh: defines no executable('stepx-demo', ...)" >&2
    exit 1
fi
echo "=== release: compile examples/stepx-demo ==="
meson compile -C "$BUILD" examples/stepx-demo
if [ ! -x "$DEMO" ]; then
    echo "run.sh: $DEMO was not built" >&2
    exit 1
fi

echo "=== running $DEMO $* ==="
exec "$DEMO" "$@"

#!/usr/bin/env bash
# tests/hostile/run.sh CASE PATH/TO/stepxd: runs one hostile-client case
# (test_hostile.py, README.md) with a python3 that has the msgpack module:
# Debian's /usr/bin/python3 first (python3-msgpack), then python3 on PATH.
# Without one it skips (exit 77) and says why.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tried=
for py in /usr/bin/python3 "$(command -v python3 2>/dev/null || true)"; do
    [ -n "$py" ] || continue
    if [ ! -x "$py" ]; then
        tried="$tried $py (missing)"
        continue
    fi
    if "$py" -c 'import msgpack' 2>/dev/null; then
        exec "$py" "$here/test_hostile.py" "$@"
    fi
    tried="$tried $py (no msgpack module)"
done
echo "SKIP: hostile-client tests need python3 with the msgpack module" \
    "(Debian: apt-get install python3-msgpack); tried:$tried"
exit 77

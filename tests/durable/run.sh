#!/usr/bin/env bash
# tests/durable/run.sh CASE PATH/TO/stepxd: runs one durable-job case
# (test_durable.py) with a python3 that has the msgpack module: Debian's
# /usr/bin/python3 first (python3-msgpack), then python3 on PATH. Without
# one it skips (exit 77) and says why.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tried=
for py in /usr/bin/python3 "$(command -v python3 2>/dev/null || true)"; do
    [ -n "$py" ] || continue
    if [ ! -x "$py" ]; then
        tried="$tried $py (missing)"
        continue
    fi
    if "$py" -c 'import msgpack, sqlite3' 2>/dev/null; then
        exec "$py" "$here/test_durable.py" "$@"
    fi
    tried="$tried $py (no msgpack or sqlite3 module)"
done
echo "SKIP: durable-job tests need python3 with the msgpack and sqlite3" \
    "modules (Debian: apt-get install python3-msgpack); tried:$tried"
exit 77

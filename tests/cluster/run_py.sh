#!/usr/bin/env bash
# tests/cluster/run_py.sh SCRIPT ARGS...: runs a cluster test written in
# python with a python3 that has the msgpack module (Debian's
# /usr/bin/python3 with python3-msgpack first, then python3 on PATH), as
# tests/hostile/run.sh does; skipped (77) when there is none.
script=${1:?usage: run_py.sh SCRIPT ARGS...}
shift
for py in /usr/bin/python3 "$(command -v python3 2>/dev/null || true)"; do
    [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import msgpack' 2>/dev/null &&
        exec "$py" "$script" "$@"
done
echo "SKIP: the cluster tests in python need python3 with the msgpack module (Debian: apt-get install python3-msgpack)"
exit 77

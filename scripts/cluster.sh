#!/usr/bin/env bash
# scripts/cluster.sh: three stepxd nodes as one cluster on this machine
# (docs/CLUSTER.md). Installs what is missing (scripts/setup.sh), builds
# stepxd and stepx in build/release, starts a nats-server on a free
# loopback port and three nodes joined to it, and runs a demo across them,
# checked: the nodes see each other (`stepx nodes`), a client of node 1
# sends 100 messages to an echo process on node 3 and gets all of them
# back in order (a process of node 3 answering a client of node 1), node
# 1 cancels a process of node 2, submits on node 3 and waits for it, runs
# a fanout whose six children go to any node and lists every node's
# processes (`stepx ps --cluster`); node 2 is killed with SIGKILL and the
# others declare it down within the down-after time (a send to its
# process then fails at once with noconnection, and node 1's monitor of
# it gets @exit noconnection). Then it stops everything cleanly. Exits
# non-zero if anything went wrong.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=build/release
STEPXD=$BUILD/cmd/stepxd
STEPX=$BUILD/cmd/stepx
TMP=$(mktemp -d "${TMPDIR:-/tmp}/stepx-cluster.XXXXXX")
PIDS=()
cleanup()
{
    for p in "${PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    sleep 0.3
    for p in "${PIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT
say() { printf '\n=== %s ===\n' "$*"; }
fail() { echo "cluster.sh: FAILED: $*" >&2; exit 1; }

say "1/5 packages (scripts/setup.sh)"
bash scripts/setup.sh

say "2/5 build stepxd and stepx (release, $BUILD)"
if [ -f "$BUILD/meson-private/coredata.dat" ] &&
    meson setup --reconfigure "$BUILD" --buildtype=release -Db_lto=true \
        >"$TMP/build.log" 2>&1; then
    :
else
    rm -rf "$BUILD"
    meson setup "$BUILD" --buildtype=release -Db_lto=true >"$TMP/build.log" 2>&1 ||
        { tail -n 40 "$TMP/build.log" >&2; fail "meson setup"; }
fi
meson compile -C "$BUILD" cmd/stepxd cmd/stepx >>"$TMP/build.log" 2>&1 ||
    { tail -n 40 "$TMP/build.log" >&2; fail "the build"; }

say "3/5 nats-server and three nodes"
NATS=$(command -v nats-server || echo /usr/sbin/nats-server)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$NATS" -a 127.0.0.1 -p "$PORT" >"$TMP/nats.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1',$PORT),0.2)" 2>/dev/null && break
    sleep 0.05
done
echo "nats-server on 127.0.0.1:$PORT"
declare -A NODE
for n in 1 2 3; do
    "$STEPXD" --ephemeral --socket "$TMP/n$n.sock" \
        --nats "nats://127.0.0.1:$PORT" --cluster demo --node "$n" \
        --heartbeat 250 --down-after 1500 >"$TMP/n$n.log" 2>&1 &
    NODE[$n]=$!
    PIDS+=($!)
done
sx() { local n=$1; shift; "$STEPX" --socket "$TMP/n$n.sock" "$@"; }
count() { sx "$1" --json nodes | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["nodes"]))'; }
for _ in $(seq 100); do
    [ -S "$TMP/n1.sock" ] && [ -S "$TMP/n3.sock" ] &&
        [ "$(count 1 2>/dev/null)" = 3 ] && [ "$(count 3 2>/dev/null)" = 3 ] && break
    sleep 0.1
done
sx 1 nodes
[ "$(count 1)" = 3 ] || fail "node 1 does not see three nodes"

say "4/5 a demo across the nodes"
PY=/usr/bin/python3
"$PY" -c 'import msgpack' 2>/dev/null || PY=python3
ECHO=$(sx 3 submit echo serve '[]')
VICTIM=$(sx 2 submit echo serve '[]')
echo "echo on node 3: $ECHO; another on node 2: $VICTIM"
"$PY" - "$TMP/n1.sock" "$ECHO" <<'EOF' || fail "messages across nodes"
import sys
sys.path.insert(0, "tests/hostile")
import hostile
c = hostile.Conn(sys.argv[1])
for i in range(100):
    c.send("send", to=sys.argv[2], topic="n", data=i)
got = []
while len(got) < 100:
    f = c.recv_frame(timeout=5)
    if f.get("push") == "message":
        got.append(f["data"])
    elif "id" in f and not f.get("ok"):
        sys.exit("send failed: %r" % f)
assert got == list(range(100)), got[:10]
print("100 messages from a client of node 1 to the echo on node 3: all back, in order")
EOF
sx 1 cancel "$VICTIM" >/dev/null || fail "cancel from node 1 of a process of node 2"
sx 2 wait "$VICTIM" --timeout 5000 >/dev/null || fail "the cancelled process of node 2 did not end"
echo "node 1 cancelled $VICTIM on node 2; it ended there"
OUT=$(sx 1 submit --node 3 counter run '[3]' --wait) || fail "submit --node 3 from node 1"
case "$OUT" in *"{3@"*) ;; *) fail "submit --node 3 ran elsewhere: $OUT" ;; esac
echo "a submit on node 1 placed on node 3, waited for from node 1: $OUT"
FAN=$(sx 1 submit fanout run '[6, "counter", "run", [1], {"place": "any"}]')
OUT=$(sx 1 wait "$FAN" --json) || fail "fanout with children placed anywhere"
echo "$OUT" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["result"] == [1]*6, d' ||
    fail "fanout's children: $OUT"
echo "a process of node 1 ran six children on any node (place any) and got their results"
LEFT=$(sx 2 submit echo serve '[]')
MON=$(sx 1 submit watcher monitor "[\"$LEFT\"]")
echo "every node's processes (stepx ps --cluster):"
sx 1 ps --cluster
kill -KILL "${NODE[2]}"
for _ in $(seq 200); do
    [ "$(count 1)" = 2 ] && break
    sleep 0.02
done
[ "$(count 1)" = 2 ] || fail "node 2 was not declared down"
SILENT=$(grep -o "node 2 (incarnation [0-9]*) down: silent for [0-9]* ms" "$TMP/n1.log" |
    grep -o "[0-9]* ms$" || true)
echo "node 2 killed (SIGKILL): node 1 declared it down when it had been silent for $SILENT (down-after 1500 ms, heartbeat 250 ms)"
if sx 1 send "$LEFT" t 1 2>"$TMP/err"; then
    fail "a send to a process of the dead node succeeded"
fi
grep -q noconnection "$TMP/err" || fail "a send to the dead node: $(cat "$TMP/err")"
echo "a send to its process: $(cat "$TMP/err")"
OUT=$(sx 1 wait "$MON" --json) || fail "the monitor of node 2's process"
echo "$OUT" | grep -q SX_ENOCONNECTION || fail "the monitor's @exit: $OUT"
echo "node 1's monitor of node 2's process got @exit noconnection"
grep "cluster:" "$TMP/n1.log" | sed 's/^/node 1 log: /'

say "5/5 stop"
for n in 1 3; do kill -TERM "${NODE[$n]}"; done
for n in 1 3; do
    wait "${NODE[$n]}" || fail "node $n did not stop cleanly"
done
echo "cluster.sh: all checks passed"

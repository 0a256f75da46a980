#!/usr/bin/env python3
"""tests/cluster/test_remote.py STEPXD — operations on processes of other
nodes (docs/CLUSTER.md), end to end: its own nats-server on a loopback
port and three stepxd nodes (heartbeat 250 ms, down after 3 s). Checks
that, through a client of node 1,

- `wait` of a process of node 2 answers its outcome (and `not_found` for
  an id node 2 never gave), `subscribe` pushes its `exit`, `terminate`
  ends it there;
- ps of node 2 through node 1; `stepx ps --cluster`; `stepx submit
  --node 3`; submits placed on node 2, on any node, on the least loaded;
- processes of node 1 spawn and spawn-and-wait children on node 2 (fanout
  with spawn options node/place), a child's failure reaches its parent,
  and scope terminate reaches a child on node 2;
- a process of node 1 monitors one of node 2 (the shipped `watcher` type)
  and gets its `@exit`; links cross nodes both ways: a failure on node 2
  ends the linked process of node 1, a failure on node 1 ends the linked
  process of node 2, and a trapping process gets `@exit` instead;
- after node 3 is killed (kill -9): the monitors, links and waits of its
  processes held on node 1 answer `noconnection`, within the down-after
  time plus a margin for the busy host (the figure is printed); node 2
  keeps serving;
- node 3 restarted is a new incarnation: a PID of its earlier run is
  `not_found`, never a process of the new one;
- hostile frames of the new kinds (a watch naming another node's process,
  an outcome nobody asked for) are dropped and counted;
- SIGSTOP of node 2 fails node 1's monitors of its processes
  (noconnection); after SIGCONT it serves again;
- a nats-server restart fails a wait in flight (noconnection, naming
  NATS), and once the nodes have reconnected everything works again;
- a NATS URL off this machine without credentials is refused at the
  start; a nats-server that wants a token lets a node in only with it.

Run through tests/cluster/run_py.sh (a python3 with msgpack). Skipped (77)
without nats-server.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import msgpack

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "hostile"))
import hostile  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import clusterlib  # noqa: E402
from clusterlib import NATS, check, free_port, members, wait_members  # noqa: E402,F401

STEPXD = sys.argv[1]
if not os.path.exists(NATS):
    print("SKIP: nats-server is not installed (scripts/setup.sh installs it)")
    sys.exit(77)

HEARTBEAT, DOWN_AFTER = 250, 3000


tmp = tempfile.mkdtemp(prefix="stepx-remote.")
port = free_port()
url = "nats://127.0.0.1:%d" % port
procs = []


def start_nats():
    return clusterlib.start_nats(port, procs)


def start_node(n, run=0):
    sock = os.path.join(tmp, "n%d.%d.sock" % (n, run))
    log = open(os.path.join(tmp, "n%d.%d.log" % (n, run)), "ab")
    args = [STEPXD, "--ephemeral", "--socket", sock, "--workers", "1",
            "--nats", url, "--cluster", "rm", "--node", str(n),
            "--heartbeat", str(HEARTBEAT), "--down-after", str(DOWN_AFTER)]
    p = subprocess.Popen(args, stdout=log, stderr=log)
    procs.append(p)
    clusterlib.wait_socket(sock, p, log.name, "node %d" % n)
    return p, sock


def submit(c, typ, method, inp):
    r = c.call("submit", type=typ, method=method, input=inp)
    return r.get("pid", ""), r


def wait(c, pid, ms=10000):
    return c.call("wait", pid=pid, timeout_ms=ms)


def code(r):
    return (r.get("error") or {}).get("code")


try:
    start_nats()
    p1, s1 = start_node(1)
    p2, s2 = start_node(2)
    p3, s3 = start_node(3)
    c1, c2, c3 = hostile.Conn(s1), hostile.Conn(s2), hostile.Conn(s3)
    check(wait_members(c1, [1, 2, 3], 15000) and
          wait_members(c2, [1, 2, 3], 5000) and
          wait_members(c3, [1, 2, 3], 5000), "three nodes see each other")

    # ---- wait, subscribe, terminate from node 1 ----
    pid, r = submit(c2, "counter", "run", [5])
    w = wait(c1, pid)
    check(w.get("ok") and w.get("result") == 5 and w.get("steps", 0) >= 5,
          "wait on node 1 for a process of node 2: its outcome", w)
    bogus = pid[:pid.rindex("|") + 1] + "4294967999}"
    w = wait(c1, bogus)
    check(not w.get("ok") and code(w) == "not_found",
          "wait on node 1 for an id node 2 never gave: not_found", w)

    echo, _ = submit(c2, "echo", "serve", [])
    r = c1.call("subscribe", pid=echo)
    r2 = c1.call("terminate", pid=echo)
    push = None
    deadline = time.monotonic() + 10
    while push is None and time.monotonic() < deadline:
        try:
            f = c1.recv_frame(timeout=5)
        except hostile.ReadTimeout:
            break
        if f.get("push") == "exit":
            push = f
    w = wait(c2, echo)
    check(r.get("ok") and r2.get("ok") and push is not None and
          code(w) == "terminated" and
          (push.get("error") or {}).get("code") == "terminated",
          "subscribe and terminate from node 1 of a process of node 2: "
          "terminated there, the exit pushed to node 1", (r, r2, push, w))

    # ---- monitor across nodes ----
    echo, _ = submit(c2, "echo", "serve", [])
    mon, r = submit(c1, "watcher", "monitor", [echo])
    time.sleep(0.2)  # the monitor is set before the echo stops
    c1.call("send", to=echo, topic="stop", data=None)
    w = wait(c1, mon)
    res = w.get("result") or {}
    check(w.get("ok") and res.get("ok") is True and res.get("result") == 0,
          "a monitor on node 1 of a process of node 2: @exit with its "
          "result", (r, w))
    mon, r = submit(c1, "watcher", "monitor", [bogus])
    w = wait(c1, mon)
    res = w.get("result") or {}
    check(w.get("ok") and res.get("error") == "SX_ENOTFOUND",
          "a monitor of an unknown process of node 2: @exit not_found", w)

    # ---- links across nodes ----
    echo, _ = submit(c2, "echo", "serve", [])
    lk, _ = submit(c1, "watcher", "link", [echo])
    time.sleep(0.2)
    c1.call("terminate", pid=echo)  # a failure on node 2 ...
    w = wait(c1, lk)
    check(code(w) == "failed" and "another node" in
          (w.get("error") or {}).get("message", ""),
          "link: a failure on node 2 ends the linked process on node 1", w)

    echo, _ = submit(c2, "echo", "serve", [])
    lk, _ = submit(c1, "watcher", "link", [echo])
    time.sleep(0.2)
    c1.call("terminate", pid=lk)  # ... and a failure on node 1
    w = wait(c2, echo)
    check(code(w) == "failed",
          "link: a failure on node 1 ends the linked process on node 2", w)

    echo, _ = submit(c2, "echo", "serve", [])
    tr, _ = submit(c1, "watcher", "trap", [echo])
    time.sleep(0.2)
    c2.call("terminate", pid=echo)
    w = wait(c1, tr)
    res = w.get("result") or {}
    check(w.get("ok") and res.get("error") == "SX_ETERMINATED",
          "link with trap_exit: @exit from node 2 instead of an end", w)

    # ---- placement of submits ----
    r = c1.call("submit", type="counter", method="run", input=[4], node=2)
    w = wait(c1, r.get("pid", ""))
    check(r.get("pid", "").startswith("{2@") and w.get("result") == 4,
          "submit on node 1 with node 2: runs on node 2, waited from node 1",
          (r, w))
    r = c1.call("submit", type="counter", method="run", input=[6], node=2,
                wait=True)
    check(r.get("ok") and r.get("pid", "").startswith("{2@") and
          r.get("result") == 6 and r.get("steps") == 7,
          "submit with wait on node 1 placed on node 2: one reply with the "
          "outcome and node 2's pid", r)
    r = c1.call("submit", type="sleeper", method="run", input=[5000],
                node=3, wait=True, timeout_ms=100)
    check(code(r) == "timeout" and r.get("pid", "").startswith("{3@"),
          "submit with wait and timeout_ms placed on node 3: timeout naming "
          "the job there", r)
    if r.get("pid"):
        c1.call("terminate", pid=r["pid"])
    r = c1.call("submit", type="nosuch", method="run", input=[], node=2)
    check(code(r) == "unknown_type" and "node 2" in r["error"]["message"],
          "submit with node 2 of a type node 2 lacks: unknown_type, said by "
          "node 2", r)
    r = c1.call("submit", type="counter", method="run", input=[4], node=9)
    check(code(r) == "noconnection",
          "submit with a node not in the cluster: noconnection", r)
    r = c1.call("submit", type="counter", method="run", input=[4],
                place="anywhere")
    check(code(r) == "bad_request", "an unknown place: bad_request", r)
    nodes = set()
    for _ in range(9):
        r = c1.call("submit", type="counter", method="run", input=[1],
                    place="any")
        nodes.add(r.get("pid", "?")[1:2])
        wait(c1, r.get("pid", ""))
    check(nodes == {"1", "2", "3"},
          "place any: nine submits spread over the nodes that have the "
          "type (%s)" % sorted(nodes))
    busy = [submit(c, "echo", "serve", [])[0]
            for c in (c1, c2) for _ in range(20)]
    time.sleep(3 * HEARTBEAT / 1000.0)  # their counts reach the others
    r = c1.call("submit", type="counter", method="run", input=[1],
                place="least_loaded")
    check(r.get("pid", "").startswith("{3@"),
          "place least_loaded: node 3, the one with no load", r)
    for pid in busy:
        c1.call("send", to=pid, topic="stop", data=None)

    # ---- ps of another node, and of the whole cluster (the CLI) ----
    e2, _ = submit(c2, "echo", "serve", [])
    e3, _ = submit(c3, "echo", "serve", [])
    r = c1.call("ps", node=2)
    pids = [x["pid"] for x in r.get("processes", [])]
    check(r.get("ok") and e2 in pids and all(p.startswith("{2@") for p in pids),
          "ps with node 2 through node 1: node 2's processes", r)
    r = c1.call("ps", node=9)
    check(code(r) == "noconnection", "ps of a node not in the cluster: "
          "noconnection", r)
    cli = os.path.join(os.path.dirname(STEPXD), "stepx")
    out = subprocess.run([cli, "--socket", s1, "ps", "--cluster", "--json"],
                         capture_output=True, text=True, timeout=30)
    try:
        doc = __import__("json").loads(out.stdout)
    except ValueError:
        doc = {}
    got = {(x.get("node"), x.get("pid")) for x in doc.get("processes", [])}
    check(out.returncode == 0 and (2, e2) in got and (3, e3) in got,
          "stepx ps --cluster lists every node's processes with their node",
          out.stdout[:500] + out.stderr[:500])
    out = subprocess.run([cli, "--socket", s1, "submit", "--node", "3",
                          "counter", "run", "[2]", "--wait"],
                         capture_output=True, text=True, timeout=30)
    check(out.returncode == 0 and "{3@" in out.stdout,
          "stepx submit --node 3 --wait runs it on node 3",
          out.stdout + out.stderr)
    for p in (e2, e3):
        c1.call("send", to=p, topic="stop", data=None)

    # ---- processes that spawn on other nodes ----
    r = c1.call("submit", type="fanout", method="run",
                input=[3, "counter", "run", [2], {"node": 2}])
    w = wait(c1, r.get("pid", ""))
    check(w.get("ok") and w.get("result") == [2, 2, 2],
          "a process of node 1 spawn-and-waits three children on node 2",
          (r, w))
    r = c1.call("submit", type="fanout", method="run",
                input=[6, "counter", "run", [1], {"place": "any"}])
    w = wait(c1, r.get("pid", ""))
    check(w.get("ok") and w.get("result") == [1] * 6,
          "spawn-and-wait with place any", (r, w))
    r = c1.call("submit", type="fanout", method="run",
                input=[1, "fail", "run", ["boom"], {"node": 2}])
    w = wait(c1, r.get("pid", ""))
    check(code(w) == "failed" and "boom" in w["error"]["message"],
          "a child failing on node 2: its parent on node 1 fails with its "
          "message", w)
    r = c1.call("submit", type="fanout", method="run",
                input=[1, "counter", "run", [1], {"node": 9}])
    w = wait(c1, r.get("pid", ""))
    check(code(w) == "failed" and "not in the cluster" in
          w["error"]["message"],
          "spawn-and-wait on a node not in the cluster: its error at once", w)
    # scope across nodes: the parent's end cancels its child on node 2
    r = c1.call("submit", type="fanout", method="run",
                input=[1, "sleeper", "run", [60000],
                       {"node": 2, "scope": "terminate"}])
    par = r.get("pid", "")
    time.sleep(0.5)
    kids = [x for x in c2.call("ps").get("processes", [])
            if x["type"] == "sleeper"]
    c1.call("terminate", pid=par)
    w = wait(c2, kids[0]["pid"]) if kids else {}
    check(len(kids) == 1 and code(w) == "terminated",
          "scope terminate: the parent's end on node 1 terminates its child "
          "on node 2", (kids, w))

    # ---- kill -9 node 3: what hangs on it answers noconnection ----
    far, _ = submit(c3, "echo", "serve", [])
    far2, _ = submit(c3, "echo", "serve", [])
    mon, _ = submit(c1, "watcher", "monitor", [far])
    lk, _ = submit(c1, "watcher", "link", [far2])
    time.sleep(0.3)
    c1.send("wait", pid=far)  # an open wait on node 1 (id 1 of its own)
    time.sleep(0.2)
    t0 = time.monotonic()
    p3.kill()
    p3.wait()
    f = None
    while time.monotonic() - t0 < 20:
        try:
            f = c1.recv_frame(timeout=20)
        except hostile.ReadTimeout:
            break
        if "id" in f and "push" not in f:
            break
    dt = (time.monotonic() - t0) * 1000
    check(f is not None and code(f) == "noconnection" and
          "node 3" in (f.get("error") or {}).get("message", "") and
          dt < DOWN_AFTER + 3000,
          "an open wait on a process of the killed node 3: noconnection "
          "after %.0f ms (down after %d ms)" % (dt, DOWN_AFTER), f)
    w = wait(c1, mon)
    res = w.get("result") or {}
    check(w.get("ok") and res.get("error") == "SX_ENOCONNECTION",
          "a monitor on node 1 of node 3's process: @exit noconnection", w)
    w = wait(c1, lk)
    check(code(w) == "noconnection",
          "a link on node 1 with node 3's process: ended noconnection", w)
    t0 = time.monotonic()
    w = wait(c1, far)
    dt = (time.monotonic() - t0) * 1000
    check(code(w) == "noconnection" and dt < 2000,
          "a wait for node 3's process once it is down: noconnection at "
          "once (%.1f ms)" % dt, w)
    pid, _ = submit(c2, "counter", "run", [3])
    check(wait(c1, pid).get("result") == 3,
          "node 2 keeps serving node 1 after node 3's death")

    # ---- node 3 comes back: a new incarnation ----
    p3, s3 = start_node(3, run=1)
    c3 = hostile.Conn(s3)
    check(wait_members(c1, [1, 2, 3], 15000), "node 3 back as a member")
    new, _ = submit(c3, "echo", "serve", [])
    w = wait(c1, far, 5000)
    check(code(w) == "not_found" and new != far,
          "a PID of node 3's earlier run is not_found on its new run "
          "(%s, now %s)" % (far, new), w)
    r = c1.call("send", to=far, topic="t", data=1)
    check(r.get("ok"),
          "a send to it is handed to node 3 (a member): whether it arrives "
          "is the next check's", r)
    c3.call("send", to=new, topic="stop", data=None)
    w = wait(c1, new)
    check(w.get("ok") and w.get("result") == 0,
          "the new run's echo got no message meant for the earlier one", w)

    # ---- hostile frames of the new kinds on node 1's subject ----
    b0 = c1.call("nodes")["membership"]["bad_messages"]
    frames = [
        {"c": "rm", "k": "w", "i": 1, "r": 2, "ri": 1,
         "t": [2, 1, 4294967297]},                      # not node 1's process
        {"c": "rm", "k": "w", "i": 1, "r": 1, "ri": 1,
         "t": [1, 1, 4294967297]},                      # "from" node 1 itself
        {"c": "rm", "k": "o", "i": 5, "ri": 1},         # no target
        {"c": "rm", "k": "zz"},                         # unknown kind
        {"c": "rm", "k": "m", "f": [2, 1, 1], "t": [1, 1, 1], "m": [1]},
        {"c": "rm", "k": "x", "t": "not a pid"},
    ]
    s = socket.create_connection(("127.0.0.1", port), 2)
    s.recv(4096)
    s.sendall(b"CONNECT {\"verbose\":false}\r\n")
    for fr in frames:
        body = msgpack.packb(fr)
        s.sendall(b"PUB stepx.rm.n.1.msg %d\r\n" % len(body) + body + b"\r\n")
    # an outcome for a watch id nobody waits for, of a wrong incarnation:
    # ignored (not counted: a late answer after a down is normal)
    body = msgpack.packb({"c": "rm", "k": "o", "i": 77, "ri": 5,
                          "t": [2, 1, 1], "e": 0, "x": "", "v": 1,
                          "s": 1, "a": 1})
    s.sendall(b"PUB stepx.rm.n.1.msg %d\r\n" % len(body) + body + b"\r\n")
    s.sendall(b"PING\r\n")
    buf = b""
    while b"PONG" not in buf:
        buf += s.recv(4096)
    s.close()
    for _ in range(100):
        b1 = c1.call("nodes")["membership"]["bad_messages"]
        if b1 - b0 >= len(frames):
            break
        time.sleep(0.05)
    check(b1 - b0 == len(frames) and members(c1) == [1, 2, 3],
          "hostile frames of every kind dropped and counted (%d -> %d)"
          % (b0, b1))
    pid, _ = submit(c2, "counter", "run", [2])
    check(wait(c1, pid).get("result") == 2, "node 1 still serves after them")

    # ---- what cannot cross, and what must not ----
    r = c1.call("submit", type="@retry", method="run", input=[], node=2)
    r2 = c1.call("submit", type="@all", method="run", input=[], place="any")
    check(code(r) == "unknown_type" and code(r2) == "unknown_type",
          "the engine's own @ types cannot be placed on any node", (r, r2))
    big, _ = submit(c2, "exec", "run",
                    [["sh", "-c", "head -c 1100000 /dev/zero | tr '\\0' a"]])
    w = wait(c1, big, 30000)
    check(code(w) == "too_large" and "max_payload" in
          (w.get("error") or {}).get("message", ""),
          "an outcome over NATS's max_payload: the wait on node 1 answers "
          "too_large, saying why", w)
    e2, _ = submit(c2, "echo", "serve", [])
    r = c1.call("send", to=e2, topic="big", data=b"x" * 1500000)
    check(code(r) == "too_large",
          "a message over NATS's max_payload to another node: too_large at "
          "once", r)
    lk, _ = submit(c1, "watcher", "link", [bogus])
    w = wait(c1, lk)
    check(code(w) == "failed" and "does not exist" in
          (w.get("error") or {}).get("message", ""),
          "a link to a process node 2 does not have ends the linker, "
          "saying so", w)
    c1.call("send", to=e2, topic="stop", data=None)

    # ---- the figures of what crossed ----
    nd = c1.call("nodes")
    mb = nd.get("membership") or {}
    n2 = [x for x in nd.get("nodes", []) if x.get("node") == 2]
    check(mb.get("dropped") == 0 and mb.get("watches_answered", 0) > 0 and
          mb.get("watches_lost", 0) > 0 and mb.get("batches_out", 0) > 0 and
          n2 and n2[0].get("messages_out", 0) > 0,
          "nodes: node 1's figures count the watches answered and lost, the "
          "batches, and the messages on its link with node 2; none dropped",
          nd)

    # ---- SIGSTOP of node 2: its watchers on node 1 fail, it comes back ----
    e2, _ = submit(c2, "echo", "serve", [])
    mon, _ = submit(c1, "watcher", "monitor", [e2])
    time.sleep(0.3)
    p2.send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    w = wait(c1, mon, 20000)
    dt = (time.monotonic() - t0) * 1000
    res = w.get("result") or {}
    check(res.get("error") == "SX_ENOCONNECTION" and "node 2" in
          res.get("message", ""),
          "SIGSTOP of node 2: a monitor of its process fires noconnection "
          "after %.0f ms" % dt, w)
    p2.send_signal(signal.SIGCONT)
    check(wait_members(c1, [1, 2, 3], 15000), "node 2 back after SIGCONT")
    pid, _ = submit(c2, "counter", "run", [2])
    check(wait(c1, pid).get("result") == 2,
          "a wait from node 1 on node 2 works again after SIGCONT")
    c2.call("send", to=e2, topic="stop", data=None)

    # ---- a nats-server restart: a wait in flight fails, then all works ----
    e2, _ = submit(c2, "echo", "serve", [])
    c1.send("wait", pid=e2)
    time.sleep(0.3)
    procs[0].kill()
    procs[0].wait()
    f = None
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        try:
            f = c1.recv_frame(timeout=20)
        except hostile.ReadTimeout:
            break
        if "id" in f and "push" not in f:
            break
    check(f is not None and code(f) == "noconnection" and
          "NATS" in (f.get("error") or {}).get("message", ""),
          "nats-server killed: a wait in flight on node 1 for node 2's "
          "process answers noconnection", f)
    rec = [c.call("nodes")["membership"]["reconnects"] for c in (c1, c2)]
    procs[0] = start_nats()

    def peer_reconnects(c, node):
        for m in c.call("nodes")["nodes"]:
            if m["node"] == node:
                return m.get("reconnects", -1)
        return -1

    def reconnected(c, before):
        for _ in range(400):
            mb = c.call("nodes")["membership"]
            if mb["connected"] and mb["reconnects"] > before:
                return True
            time.sleep(0.05)
        return False
    check(reconnected(c1, rec[0]) and reconnected(c2, rec[1]) and
          wait_members(c1, [1, 2, 3], 20000),
          "after the nats-server restart the nodes reconnect by themselves "
          "and see each other")
    # Node 2's reconnect answers noconnection whatever node 1 waits for
    # from it until node 1 hears node 2's new epoch (docs/CLUSTER.md, "A
    # node that reconnects"); node 1's listing shows that epoch.
    # Both figures are read on each round: a node 2 that reconnected twice
    # is waited for up to its last reconnect.
    seen = own = -1
    for _ in range(400):
        mb = c2.call("nodes")["membership"]
        own = mb["reconnects"] if mb["connected"] else -1
        seen = peer_reconnects(c1, 2)
        if seen > rec[1] and seen == own:
            break
        time.sleep(0.05)
    check(seen > rec[1] and seen == own,
          "nodes: node 1 lists node 2's reconnects as node 2 counts them "
          "(%d -> %d; node 2's own: %d)" % (rec[1], seen, own))
    r = c1.call("submit", type="counter", method="run", input=[3], node=2)
    w = wait(c1, r.get("pid", ""))
    check(w.get("result") == 3,
          "after the restart: a submit on node 2 from node 1 and its wait",
          (r, w))
    c2.call("send", to=e2, topic="stop", data=None)

    # ---- security: a NATS server elsewhere needs credentials ----
    r = subprocess.run([STEPXD, "--ephemeral", "--socket", "",
                        "--nats", "nats://10.255.255.1:4222", "--node", "5"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "not on this machine" in r.stderr and
          "--nats-token" in r.stderr,
          "a NATS URL off this machine without a token or credentials is "
          "refused before connecting", r.stderr)
    aport = free_port()
    ap = subprocess.Popen([NATS, "-a", "127.0.0.1", "-p", str(aport),
                           "--auth", "s3cret"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(ap)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", aport), 0.2).close()
            break
        except OSError:
            time.sleep(0.02)
    aurl = "nats://127.0.0.1:%d" % aport
    asock = os.path.join(tmp, "auth.sock")
    r = subprocess.run([STEPXD, "--ephemeral", "--socket", asock,
                        "--nats", aurl, "--node", "1", "--cluster", "sec"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and "cannot connect to NATS" in r.stderr,
          "a node without the server's token does not join", r.stderr)
    env = dict(os.environ, STEPX_NATS_TOKEN="s3cret")
    alog = open(os.path.join(tmp, "auth.log"), "ab")
    anode = subprocess.Popen([STEPXD, "--ephemeral", "--socket", asock,
                              "--nats", aurl, "--node", "1", "--cluster",
                              "sec"], stdout=alog, stderr=alog, env=env)
    procs.append(anode)
    clusterlib.wait_socket(asock, anode, alog.name, "node 1 (token)")
    ca = hostile.Conn(asock)
    mb = ca.call("nodes").get("membership") or {}
    check(mb.get("connected") is True,
          "with the token ($STEPX_NATS_TOKEN) the node joins", mb)
    ca.close()

    for p in procs[1:]:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait()
    reports = []
    for name in sorted(os.listdir(tmp)):
        if name.endswith(".log"):
            text = open(os.path.join(tmp, name), errors="replace").read()
            if ("Sanitizer" in text or "runtime error" in text):
                reports.append(name + ": " + text[:2000])
    check(not reports, "no sanitizer report in the nodes' logs",
          "\n".join(reports))
finally:
    for p in procs:
        try:
            p.kill()
        except OSError:
            pass
        p.wait()
    shutil.rmtree(tmp, ignore_errors=True)

clusterlib.finish()

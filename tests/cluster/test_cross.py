#!/usr/bin/env python3
"""tests/cluster/test_cross.py STEPXD — messages between processes of
different nodes of one cluster (docs/CLUSTER.md), end to end: its own
nats-server on a loopback port and two stepxd nodes. Checks that

- a client connected to node 1 sends 1,000 messages to an `echo` process
  on node 2, and the echoes (a process of node 2 sending to the client's
  mailbox on node 1) all come back, in order: both directions cross
  NATS, and one sender's messages keep their order;
- a send to a PID of a node that was never seen answers `noconnection`
  at once, and on a daemon without --nats such a PID is still
  `not_found`;
- after node 2 is killed (kill -9) and declared down, a send to its
  process answers `noconnection` at once (no timeout), and node 1 keeps
  serving;
- a malformed message on node 1's message subject is dropped and counted.

Run through tests/cluster/run_py.sh (a python3 with msgpack). Skipped (77)
without nats-server.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "hostile"))
import hostile  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import clusterlib  # noqa: E402
from clusterlib import NATS, check, free_port, members, wait_members  # noqa: E402,F401

STEPXD = sys.argv[1]
if not os.path.exists(NATS):
    print("SKIP: nats-server is not installed (scripts/setup.sh installs it)")
    sys.exit(77)


tmp = tempfile.mkdtemp(prefix="stepx-cross.")
port = free_port()
url = "nats://127.0.0.1:%d" % port
procs = []


def start_nats():
    return clusterlib.start_nats(port, procs)


def start_node(n, extra=()):
    tag = "solo" if n is None else "n%d" % n
    sock = os.path.join(tmp, tag + ".sock")
    log = open(os.path.join(tmp, tag + ".log"), "ab")
    args = [STEPXD, "--ephemeral", "--socket", sock, "--workers", "1"]
    if n is not None:
        args += ["--nats", url, "--cluster", "x1", "--node", str(n),
                 "--heartbeat", "250", "--down-after", "3000"]
    p = subprocess.Popen(args + list(extra), stdout=log, stderr=log)
    procs.append(p)
    clusterlib.wait_socket(sock, p, log.name, tag, timeout_s=4.0)
    return p, sock


try:
    start_nats()
    p1, s1 = start_node(1)
    p2, s2 = start_node(2)
    c1 = hostile.Conn(s1)
    c2 = hostile.Conn(s2)
    check(wait_members(c1, [1, 2], 10000) and wait_members(c2, [1, 2], 2000),
          "nodes 1 and 2 see each other")

    r = c2.call("submit", type="echo", method="serve", input=[])
    pid2 = r.get("pid", "")
    check(r.get("ok") and pid2.startswith("{2@"), "echo on node 2: " + pid2, r)

    n = 1000
    for i in range(1, n + 1):
        c1.send("send", to=pid2, topic="t", data=i)
    got, errors = [], []
    deadline = time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        try:
            f = c1.recv_frame(timeout=5)
        except hostile.ReadTimeout:
            print("#     stalled after %d echoes; node 1: %r; node 2: %r"
                  % (len(got), c1.call("nodes")["membership"],
                     c2.call("nodes")["membership"]))
            print("#     node 2 stats: dead letters %r; ps %r" % (
                c2.call("stats")["stats"]["dead_letters"], c2.call("ps")))
            break
        if f.get("push") == "message":
            got.append(f["data"])
        elif "id" in f and not f.get("ok"):
            errors.append(f)
    check(got == list(range(1, n + 1)) and not errors,
          "%d messages to node 2's echo: every echo back on node 1, in order"
          % n, "got %d, first %r, errors %r" % (len(got), got[:5], errors[:3]))

    # a cancel from node 1 of a process of node 2: a cancel there (the echo
    # finishes with the count of what it echoed, 0)
    r = c2.call("submit", type="echo", method="serve", input=[])
    pid2b = r.get("pid", "")
    r = c1.call("cancel", pid=pid2b, reason="from node 1")
    w = c2.call("wait", pid=pid2b, timeout_ms=5000)
    check(r.get("ok") and w.get("ok") and w.get("result") == 0,
          "cancel from node 1 of a process of node 2: it ends as cancelled "
          "there", (r, w))

    far = "{9@1|4294967297}"
    # "At once": answered without waiting for a timeout (the bound is
    # loose: the suite runs on a busy host; the figure is printed).
    t0 = time.monotonic()
    r = c1.call("send", to=far, topic="t", data=1)
    dt = (time.monotonic() - t0) * 1000
    check(not r.get("ok") and r["error"]["code"] == "noconnection" and dt < 2000,
          "a send to a node never seen: noconnection at once (%.1f ms)" % dt, r)

    # hostile bytes on node 1's message subject: dropped and counted
    b0 = c1.call("nodes")["membership"]["bad_messages"]
    s = socket.create_connection(("127.0.0.1", port), 2)
    s.recv(4096)
    for body in (b"\xc1garbage", b"\x81\xa1c\xa2x1",
                 b"\x85\xa1c\xa2x1\xa1f\x01\xa1t\x02\xa1s\xa1t\xa1d\xc0"):
        s.sendall(b"CONNECT {\"verbose\":false}\r\nPUB stepx.x1.n.1.msg %d\r\n"
                  % len(body) + body + b"\r\n")
    s.sendall(b"PING\r\n")
    buf = b""
    while b"PONG" not in buf:
        buf += s.recv(4096)
    s.close()
    for _ in range(100):
        b1 = c1.call("nodes")["membership"]["bad_messages"]
        if b1 - b0 >= 3:
            break
        time.sleep(0.05)
    check(b1 - b0 >= 3 and members(c1) == [1, 2],
          "malformed messages on node 1's subject dropped and counted "
          "(%d -> %d)" % (b0, b1))

    # kill -9 node 2: once it is down, sends to its processes fail at once
    p2.kill()
    p2.wait()
    check(wait_members(c1, [1], 10000), "node 2 declared down after kill -9")
    t0 = time.monotonic()
    r = c1.call("send", to=pid2, topic="t", data=1)
    dt = (time.monotonic() - t0) * 1000
    check(not r.get("ok") and r["error"]["code"] == "noconnection" and dt < 2000,
          "a send to node 2's process after its death: noconnection at once "
          "(%.1f ms)" % dt, r)
    check(c1.call("types").get("ok"), "node 1 keeps serving")

    # a daemon in no cluster: another node's PID is still not_found
    p3, s3 = start_node(None, extra=())
    c3 = hostile.Conn(s3)
    r = c3.call("send", to=far, topic="t", data=1)
    check(not r.get("ok") and r["error"]["code"] == "not_found",
          "without --nats, another node's PID is not_found", r)
    for p in procs[1:]:
        if p.poll() is None:
            p.terminate()
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

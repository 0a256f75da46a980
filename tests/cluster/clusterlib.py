"""tests/cluster/clusterlib.py — what the cluster tests in python share:
the check tally, a free loopback port, a nats-server of the test's own,
a stepxd's wait for its socket, and the members a node sees (through the
relay's `nodes`)."""
import os
import shutil
import socket
import subprocess
import sys
import time

NATS = shutil.which("nats-server") or "/usr/sbin/nats-server"
passed = failed = 0


def check(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok    " + what)
    else:
        failed += 1
        print("FAIL  " + what + (("\n      | " + str(detail)) if detail else ""))


def finish():
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_nats(port, procs, extra=()):
    """A nats-server on 127.0.0.1:port (added to procs), once it accepts."""
    p = subprocess.Popen([NATS, "-a", "127.0.0.1", "-p", str(port)] +
                         list(extra),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(p)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("nats-server did not start")


def wait_socket(sock, proc, log_path, what, timeout_s=10.0):
    """Waits for stepxd's socket file (it appears once stepxd accepts on
    it: docs/RELAY.md, Listening). When the process ends first or the
    file does not come, prints the tail of its log (the test's summary
    shows its output) and raises."""
    t0 = time.monotonic()
    while True:
        late = time.monotonic() - t0 > timeout_s
        if os.path.exists(sock):
            return
        if late or proc.poll() is not None:
            break
        time.sleep(0.02)
    with open(log_path, errors="replace") as f:
        tail = f.read()[-2000:]
    print("stepxd %s: no socket after %.1f s (exit status %s); its log:\n%s"
          % (what, time.monotonic() - t0, proc.poll(), tail), flush=True)
    raise RuntimeError("stepxd %s did not start" % what)


def members(c):
    return sorted(m["node"] for m in c.call("nodes")["nodes"])


def wait_members(c, want, ms):
    t0 = time.monotonic()
    while True:
        late = time.monotonic() - t0 > ms / 1000.0
        if members(c) == want:
            return True
        if late:  # one more look after the deadline: a busy host is slow
            return False
        time.sleep(0.02)

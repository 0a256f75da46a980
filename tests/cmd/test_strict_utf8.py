#!/usr/bin/python3
"""tests/cmd/test_strict_utf8.py: a real stepxd read by a strict msgpack
decoder (Python's msgpack.unpackb with raw=False, its default, which
refuses a whole frame over one str that is not UTF-8).

    /usr/bin/python3 tests/cmd/test_strict_utf8.py PATH/TO/stepxd

Starts stepxd on a socket in a temporary directory and sends it what a
hostile or careless client would: a `fail` process whose message is not
UTF-8, an exec of an argv[0] that is not UTF-8 and cannot start, a fanout
whose child fails so, a `send` whose topic is not UTF-8 aimed at another
client's mailbox, and an echo of data holding strs that are not UTF-8.
Every frame both clients read must decode strictly (PROTOCOL.md,
"Payloads": error messages get U+FFFD, payload strs that are not UTF-8
arrive as bin, such topics are refused). Stops the daemon (SIGTERM, then
SIGKILL) whatever happens. Exit 0 when all passed, 1 when not, 77 (skip)
without python3-msgpack.
"""
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

try:
    import msgpack
except ImportError:
    print("python3-msgpack is not installed: skipped")
    sys.exit(77)


class RawStr(bytes):
    """Bytes sent as a msgpack str, whatever they hold (what msgpack's own
    packer will not do for bytes that are not UTF-8)."""


def pack(v):
    """msgpack, with RawStr as str; the rest by msgpack.packb."""
    if isinstance(v, RawStr):
        n = len(v)
        if n < 32:
            head = bytes([0xa0 | n])
        elif n < 256:
            head = b"\xd9" + bytes([n])
        else:
            head = b"\xda" + struct.pack(">H", n)
        return head + bytes(v)
    if isinstance(v, dict):
        return b"\xdf" + struct.pack(">I", len(v)) + b"".join(
            pack(k) + pack(x) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return b"\xdd" + struct.pack(">I", len(v)) + b"".join(map(pack, v))
    return msgpack.packb(v, use_bin_type=True)


class Conn:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.next_id = 1
        self.pushes = []
        self.info = self.call("hello", version=1)

    def _exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("server closed the connection")
            data += chunk
        return data

    def frame(self):
        """The next frame, decoded strictly: raises on a str that is not
        UTF-8 anywhere in it."""
        (n,) = struct.unpack(">I", self._exact(4))
        body = self._exact(n)
        return msgpack.unpackb(body, raw=False)

    def call(self, op, **fields):
        rid, self.next_id = self.next_id, self.next_id + 1
        body = pack(dict(fields, op=op, id=rid))
        self.sock.sendall(struct.pack(">I", len(body)) + body)
        while True:
            m = self.frame()
            if "push" in m:
                self.pushes.append(m)
            elif m.get("id") == rid:
                return m

    def push(self):
        return self.pushes.pop(0) if self.pushes else self.frame()


passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok    " + name)
    else:
        failed += 1
        print("FAIL  " + name + (": " + repr(detail) if detail else ""))


def wait_error(c, pid):
    r = c.call("wait", pid=pid, timeout_ms=10000)
    return r.get("error", {}) if not r["ok"] else {"code": "ok"}


def run(path):
    a, b = Conn(path), Conn(path)

    pid = a.call("submit", type="fail", method="run",
                 input=[RawStr(b"card \xff declined \xe2\x82!")])["pid"]
    e = wait_error(a, pid)
    check("fail: the message arrives as UTF-8 with U+FFFD",
          e.get("code") == "failed" and
          e.get("message") == "card \ufffd declined \ufffd\ufffd!", e)

    pid = a.call("submit", type="exec", method="run",
                 input=[[RawStr(b"/nonexistent-\xff\xfe/x")]])["pid"]
    e = wait_error(a, pid)
    check("exec: an argv[0] that is not UTF-8 is named with U+FFFD",
          e.get("code") == "failed" and
          "/nonexistent-\ufffd\ufffd/x" in e.get("message", ""), e)

    pid = a.call("submit", type="fanout", method="run",
                 input=[1, "fail", "run", [RawStr(b"\xc3(")]])["pid"]
    e = wait_error(a, pid)
    check("fanout: a child's message that is not UTF-8, with U+FFFD",
          e.get("code") == "failed" and "\ufffd(" in e.get("message", ""), e)

    to = b.info["mailbox"]
    r = a.call("send", to=to, topic=RawStr(b"t\xff"), data=1)
    check("send: a topic that is not UTF-8 is bad_request",
          not r["ok"] and r["error"]["code"] == "bad_request", r)
    r = a.call("send", to=to, topic="ok \u20ac", data=2)
    check("send: a UTF-8 topic goes", r["ok"], r)
    m = b.push()
    check("the other client's first push is the good message",
          m.get("push") == "message" and m.get("topic") == "ok \u20ac" and
          m.get("data") == 2, m)

    echo = a.call("submit", type="echo", method="serve", input=[])["pid"]
    data = {RawStr(b"k\xff"): [RawStr(b"\xfe"), "fine", {"n": RawStr(b"\xed\xa0\x80")}],
            "s": "caf\u00e9"}
    r = a.call("send", to=echo, topic="ping", data=data)
    m = a.push()
    want = {b"k\xff": [b"\xfe", "fine", {"n": b"\xed\xa0\x80"}], "s": "caf\u00e9"}
    check("echo: strs that are not UTF-8 come back as bin, the rest as sent",
          r["ok"] and m.get("data") == want, m)
    a.call("terminate", pid=echo)

    for op in ("ps", "types", "stats"):
        r = a.call(op)
        check(op + ": read strictly", r["ok"], r)


def main():
    if len(sys.argv) != 2:
        print("usage: test_strict_utf8.py STEPXD", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="stepx-utf8.")
    path = os.path.join(tmp, "s.sock")
    log = open(os.path.join(tmp, "stepxd.log"), "w+")
    d = subprocess.Popen([sys.argv[1], "--socket", path, "--workers", "2",
                          "--ephemeral"],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            if os.path.exists(path) or d.poll() is not None:
                break
            time.sleep(0.1)
        time.sleep(0.1)
        if not os.path.exists(path):
            log.seek(0)
            print("FAIL  stepxd did not start: " + log.read())
            return 1
        try:
            run(path)
        except Exception as ex:  # a strict decoder's refusal lands here
            check("every frame decodes strictly", False,
                  "%s: %s" % (type(ex).__name__, ex))
    finally:
        if d.poll() is None:
            d.send_signal(signal.SIGTERM)
            try:
                d.wait(10)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

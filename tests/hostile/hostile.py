"""tests/hostile/hostile.py: what the hostile-client cases share.

- framing: frames of PROTOCOL.md, packed with msgpack (plus a hand packer,
  `pack`, that also writes `RawStr`: a msgpack str holding any bytes, which
  msgpack.packb cannot make from a Python str), read back with the strict
  decoder (`msgpack.unpackb(body, raw=False)`: a str that is not UTF-8 is
  an error, never silently bytes);
- `Conn`: one client connection (Unix socket or TCP), requests, replies by
  id, pushes, pipelining;
- `Daemon`: a real stepxd on a temporary socket (and TCP port) with given
  flags, always stopped (SIGTERM, then SIGKILL; PR_SET_PDEATHSIG as a last
  resort), its RSS from /proc/PID/status, its `stats`;
- `Bystander`: another client, in its own Python process (so the attack's
  Python cannot slow it down), that runs submit(counter run [1]) + wait in
  a loop on its own connection the whole time and reports every latency,
  every wrong answer and whether it was disconnected;
- `Case`: checks and figures, printed one a line, and the exit status.

The scale knob: STEPX_HOSTILE_PROFILE=release (default) or sanitizer
(meson sets it in an ASan/UBSan build). The sanitizer profile divides
attack sizes by 4 and multiplies time bounds by 5 (and relaxes the RSS
bounds, see `rss_slack_mib`). STEPX_HOSTILE_SCALE (attack size factor),
STEPX_HOSTILE_SLOW (time factor) and STEPX_HOSTILE_LATENCY_S (the
bystander's latency bound, default 2 s times the time factor) override
single values.

Run this file itself only as the bystander (`hostile.py bystander ADDR
[TOKEN]`); the cases are in test_hostile.py.
"""

import collections
import ctypes
import json
import os
import resource
import select
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

try:
    import msgpack
except ImportError:  # reported by require_msgpack
    msgpack = None

SKIP = 77
MiB = 1 << 20


def require_msgpack():
    if msgpack is None:
        print("SKIP: the Python module msgpack is missing for %s "
              "(Debian: apt-get install python3-msgpack)" % sys.executable)
        sys.exit(SKIP)


# ---------------------------------------------------------------- profile

class Profile:
    def __init__(self):
        name = os.environ.get("STEPX_HOSTILE_PROFILE", "release")
        if name not in ("release", "sanitizer"):
            raise SystemExit("STEPX_HOSTILE_PROFILE must be release or "
                             "sanitizer, not %r" % name)
        self.name = name
        self.sanitizer = name == "sanitizer"
        self.scale = float(os.environ.get("STEPX_HOSTILE_SCALE",
                                          "0.25" if self.sanitizer else "1"))
        self.slow = float(os.environ.get("STEPX_HOSTILE_SLOW",
                                         "5" if self.sanitizer else "1"))
        self.latency_s = float(os.environ.get("STEPX_HOSTILE_LATENCY_S",
                                              str(2.0 * self.slow)))

    def n(self, full, least=1):
        """An attack size: full in the release profile, scaled down."""
        return max(least, int(full * self.scale))

    def t(self, seconds):
        """A time bound: seconds in the release profile, scaled up."""
        return seconds * self.slow

    def rss_slack_mib(self):
        """Extra RSS allowed under ASan: its quarantine (limited to 16 MiB
        for the daemons started here) and shadow memory, and an allocator
        that hands memory back to the kernel only every few seconds."""
        return 96 if self.sanitizer else 0

    def __str__(self):
        return ("profile %s: attack sizes x%g, time bounds x%g, bystander "
                "latency bound %.1f s" % (self.name, self.scale, self.slow,
                                          self.latency_s))


PROFILE = Profile()


# ---------------------------------------------------------------- framing

class RawStr:
    """A msgpack str whose bytes are given as is (may be invalid UTF-8)."""

    def __init__(self, b):
        self.b = bytes(b)

    def __repr__(self):
        return "RawStr(%r)" % self.b


def _hdr(n, fix, fixmax, c8, c16, c32):
    if n <= fixmax:
        return bytes([fix | n])
    if c8 is not None and n < 256:
        return bytes([c8, n])
    if n < 65536:
        return bytes([c16]) + struct.pack(">H", n)
    return bytes([c32]) + struct.pack(">I", n)


def _enc(v):
    if isinstance(v, RawStr):
        return _hdr(len(v.b), 0xa0, 31, 0xd9, 0xda, 0xdb) + v.b
    if isinstance(v, dict):
        return _hdr(len(v), 0x80, 15, None, 0xde, 0xdf) + b"".join(
            _enc(k) + _enc(x) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return _hdr(len(v), 0x90, 15, None, 0xdc, 0xdd) + b"".join(
            _enc(x) for x in v)
    return msgpack.packb(v, use_bin_type=True)


def pack(v):
    """msgpack bytes of v (str as str, bytes as bin, RawStr as a str
    holding its bytes)."""
    try:
        return msgpack.packb(v, use_bin_type=True)
    except TypeError:
        return _enc(v)


def frame(body):
    return struct.pack(">I", len(body)) + body


def request(op, rid, **fields):
    """One request frame (header included)."""
    return frame(pack(dict(op=op, id=rid, **fields)))


class ConnClosed(Exception):
    """The server closed the connection (EOF or reset)."""


class ReadTimeout(Exception):
    pass


class Undecodable(Exception):
    """The server sent a frame the strict decoder refuses."""

    def __init__(self, body, err):
        self.body = bytes(body)
        self.err = err
        ex = self.body[:120]
        super().__init__("frame of %d bytes does not decode strictly (%s): "
                         "%r%s" % (len(self.body), err, ex,
                                   "..." if len(self.body) > 120 else ""))


def decode(body):
    """The strict decoder: raw=False refuses a str that is not UTF-8.
    (strict_map_key=False only lets nested maps have non-string keys,
    which the protocol allows; it changes nothing about UTF-8.)"""
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as e:  # UnicodeDecodeError, ExtraData, ValueError...
        raise Undecodable(body, "%s: %s" % (type(e).__name__, e))


def readable(sock, timeout):
    """True when sock (anything with fileno()) has something to read (or
    an end of file) within timeout seconds; poll, not select, because the
    descriptors of a case with a thousand connections pass FD_SETSIZE."""
    p = select.poll()
    p.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(p.poll(max(0, int(timeout * 1000 + 0.999))))


def parse_pid(text):
    """'{node@host|id}' -> (node, host, id)."""
    if not (isinstance(text, str) and text.startswith("{")
            and text.endswith("}")):
        raise ValueError("not a PID: %r" % (text,))
    node, rest = text[1:-1].split("@", 1)
    host, ident = rest.split("|", 1)
    return int(node), int(host), int(ident)


# ---------------------------------------------------------------- a client

class Conn:
    """One connection. `addr` is a Unix socket path or ("host", port).

    recv_frame returns the next frame (a dict); call() sends one request
    and returns its reply, keeping pushes in self.pushes and other replies
    in self.replies (by id)."""

    MAX_FRAME = 1 << 30

    def __init__(self, addr, token=None, hello=True, timeout=30.0):
        if isinstance(addr, str):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(addr)
        self.sock.settimeout(None)
        self.buf = bytearray()
        self.pos = 0
        self.next_id = 1
        self.pushes = collections.deque()
        self.replies = {}
        self.closed = None  # why the server closed it, once it has
        self.timeout = timeout
        self.info = None
        if hello:
            fields = {"version": 1}
            if token is not None:
                fields["token"] = token
            r = self.call("hello", **fields)
            if not r.get("ok"):
                raise RuntimeError("hello refused: %r" % (r,))
            self.info = r

    @classmethod
    def wrap(cls, sock, timeout=30.0):
        """A Conn around a socket connected elsewhere (no hello)."""
        c = cls.__new__(cls)
        c.sock, c.buf, c.pos, c.next_id = sock, bytearray(), 0, 1
        c.pushes, c.replies, c.closed = collections.deque(), {}, None
        c.timeout, c.info = timeout, None
        return c

    def fileno(self):
        return self.sock.fileno()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send_raw(self, data):
        self.sock.sendall(data)

    def send(self, op, **fields):
        """Sends one request; returns its id."""
        rid = self.next_id
        self.next_id += 1
        self.sock.sendall(request(op, rid, **fields))
        return rid

    def _take(self):
        """A whole frame's body from the buffer, or None."""
        avail = len(self.buf) - self.pos
        if avail < 4:
            return None
        (n,) = struct.unpack_from(">I", self.buf, self.pos)
        if n == 0 or n > self.MAX_FRAME:
            raise Undecodable(bytes(self.buf[self.pos:self.pos + 16]),
                              "frame length %d" % n)
        if avail < 4 + n:
            return None
        body = bytes(self.buf[self.pos + 4:self.pos + 4 + n])
        self.pos += 4 + n
        if self.pos > 1 << 20 and self.pos * 2 > len(self.buf):
            del self.buf[:self.pos]
            self.pos = 0
        return body

    def buffered_frame(self):
        """True when a whole frame is already buffered."""
        avail = len(self.buf) - self.pos
        if avail < 4:
            return False
        (n,) = struct.unpack_from(">I", self.buf, self.pos)
        return avail >= 4 + n

    def recv_frame(self, timeout=None):
        """The next frame, decoded strictly. Raises ReadTimeout, ConnClosed
        or Undecodable."""
        if timeout is None:
            timeout = self.timeout
        deadline = time.monotonic() + timeout
        while True:
            body = self._take()
            if body is not None:
                return decode(body)
            if self.closed:
                raise ConnClosed(self.closed)
            # One look at the socket even when the time is up (timeout 0:
            # whatever has arrived already).
            left = max(0.0, deadline - time.monotonic())
            if not readable(self.sock, left):
                if time.monotonic() >= deadline:
                    raise ReadTimeout("no frame within %.1f s" % timeout)
                continue
            try:
                chunk = self.sock.recv(1 << 20)
            except (ConnectionResetError, BrokenPipeError) as e:
                self.closed = "reset (%s)" % e.strerror
                continue
            if not chunk:
                self.closed = "end of file"
                continue
            self.buf += chunk

    def poll_closed(self, timeout=0.0):
        """Reads what is there within timeout (frames are kept as pushes or
        replies); returns the reason the server closed, or None."""
        deadline = time.monotonic() + timeout
        while not self.closed:
            try:
                m = self.recv_frame(max(0.0, deadline - time.monotonic()))
            except ReadTimeout:
                return None
            except ConnClosed:
                break
            self._sort(m)
        return self.closed

    def _sort(self, m):
        if "push" in m:
            self.pushes.append(m)
        else:
            self.replies[m.get("id")] = m

    def reply(self, rid, timeout=None):
        """The reply to request rid (pushes meanwhile go to self.pushes)."""
        if timeout is None:
            timeout = self.timeout
        deadline = time.monotonic() + timeout
        while rid not in self.replies:
            m = self.recv_frame(max(0.0, deadline - time.monotonic()))
            self._sort(m)
            # An error frame with id 0 (the server refusing the
            # connection) answers whatever was asked.
            if m.get("id") == 0 and "push" not in m and not m.get("ok"):
                return m
        return self.replies.pop(rid)

    def call(self, op, timeout=None, **fields):
        return self.reply(self.send(op, **fields), timeout)

    def pipeline(self, frames, ids, timeout):
        """Writes the bytes `frames` (a thread does, so that reading goes on
        meanwhile) and collects the replies to every id in ids; returns
        {id: reply}. Pushes go to self.pushes."""
        want = set(ids)
        got = {}
        err = []

        def writer():
            try:
                self.sock.sendall(frames)
            except OSError as e:
                err.append(e)

        w = threading.Thread(target=writer, daemon=True)
        w.start()
        deadline = time.monotonic() + timeout
        while want:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReadTimeout("%d of %d replies missing after %.0f s"
                                  % (len(want), len(ids), timeout))
            m = self.recv_frame(left)
            if "push" in m:
                self.pushes.append(m)
                continue
            rid = m.get("id")
            if rid in want:
                want.discard(rid)
                got[rid] = m
            elif rid == 0 and not m.get("ok"):
                raise RuntimeError("server refused the connection: %r" % m)
        w.join(timeout=max(1.0, deadline - time.monotonic()))
        if err:
            raise err[0]
        return got


def error_code(reply):
    if reply.get("ok"):
        return None
    e = reply.get("error")
    return e.get("code") if isinstance(e, dict) else repr(e)


# ---------------------------------------------------------------- the daemon

_libc = None


def _pdeathsig():
    """In the child before exec: SIGKILL it when the test dies."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def raise_nofile(want):
    """Raises this process's RLIMIT_NOFILE soft limit to want (or the hard
    limit); daemons started later inherit it. Returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return soft
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class DaemonStartError(Exception):
    pass


class Daemon:
    """stepxd on a temporary socket (and, with tcp=True, a free loopback
    port), started with the given flags; use as a context manager or call
    stop() in a finally."""

    n_logs = 0  # log files are numbered across daemons (two may share a dir)

    def __init__(self, exe, flags=(), tcp=False, token=None, socket_path=None,
                 tmpdir=None):
        self.exe = exe
        self.flags = list(flags)
        self.tcp = tcp
        self.token = token
        self.tmpdir = tmpdir or tempfile.mkdtemp(prefix="stepx-hostile.")
        self.own_tmp = tmpdir is None
        self.path = socket_path or os.path.join(self.tmpdir, "stepxd.sock")
        self.port = None
        self.proc = None
        self.log_path = None
        self.logs = []  # one per start
        self.exits = []  # (how it was stopped, exit status)
        self._control = None
        self.starts = 0

    # -- life

    def start(self):
        for attempt in range(3):
            self.starts += 1
            argv = [self.exe, "--socket", self.path, "--stop-deadline", "500"]
            if self.tcp:
                self.port = free_port()
                argv += ["--listen", "127.0.0.1:%d" % self.port]
            if self.token is not None:
                argv += ["--token", self.token]
            argv += self.flags
            # In memory unless the case gives a state directory: the
            # cases here attack the relay, and several daemons run at once.
            if "--state-dir" not in self.flags:
                argv.append("--ephemeral")
            self.argv = argv
            Daemon.n_logs += 1
            self.log_path = os.path.join(self.tmpdir,
                                         "stepxd.%d.log" % Daemon.n_logs)
            self.logs.append(self.log_path)
            env = dict(os.environ)
            # meson sets MALLOC_PERTURB_ for tests: glibc then writes every
            # block malloc hands out, so RSS would count memory the daemon
            # asked for but never touched, and differ from a run by hand.
            env.pop("MALLOC_PERTURB_", None)
            if PROFILE.sanitizer:
                # A small quarantine, so that RSS says what the daemon
                # holds rather than what ASan keeps for use-after-free.
                opts = env.get("ASAN_OPTIONS", "")
                env["ASAN_OPTIONS"] = (opts + ":" if opts else "") + \
                    "quarantine_size_mb=16"
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(argv, stdout=log, stderr=log,
                                             stdin=subprocess.DEVNULL,
                                             env=env, preexec_fn=_pdeathsig)
            try:
                self._wait_listening()
                return self
            except DaemonStartError as e:
                self.kill(signal.SIGKILL)
                self.exits[-1] = ("did not start", self.exits[-1][1])
                if "EADDRINUSE" in str(e) and self.tcp and attempt < 2:
                    continue
                raise

    def _wait_listening(self):
        deadline = time.monotonic() + PROFILE.t(10)
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise DaemonStartError("stepxd exited %d at start (%s): %s"
                                       % (rc, " ".join(self.argv[1:]),
                                          self.log().strip()))
            # This daemon's own word first: after a kill -9 the socket path
            # can still accept for a moment through the killed daemon's
            # listener, which a child it forked for an exec job holds until
            # its exec (close-on-exec), and a connection queued there is
            # reset when that happens. The new daemon binds the path only
            # after its state store is open, and says so.
            ok = "stepxd: listening on" in self.log()
            for addr in [self.path] + ([("127.0.0.1", self.port)]
                                       if self.tcp else []):
                try:
                    fam = socket.AF_UNIX if isinstance(addr, str) \
                        else socket.AF_INET
                    s = socket.socket(fam, socket.SOCK_STREAM)
                    s.settimeout(1)
                    s.connect(addr)
                    s.close()
                except OSError:
                    ok = False
            if ok:
                return
            if time.monotonic() > deadline:
                raise DaemonStartError("stepxd did not listen within %.0f s"
                                       % PROFILE.t(10))
            time.sleep(0.02)

    def log(self, path=None):
        try:
            with open(path or self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                       "runtime error:", "WARNING: ThreadSanitizer")

    def sanitizer_reports(self):
        """Lines of its logs (every start) where a sanitizer spoke."""
        out = []
        for path in self.logs:
            for line in self.log(path).splitlines():
                if any(m in line for m in self.SANITIZER_MARKS):
                    out.append("%s: %s" % (os.path.basename(path), line))
        return out

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig):
        """Sends sig and waits for the exit (SIGKILL after 10 s)."""
        if self._control is not None:
            self._control.close()
            self._control = None
        if self.proc is None:
            return None
        if not self.alive():
            rc = self.proc.returncode
            self.exits.append(("had exited", rc))
            self.proc = None
            return rc
        self.proc.send_signal(sig)
        how = signal.Signals(sig).name
        try:
            rc = self.proc.wait(timeout=PROFILE.t(10))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            how += ", then SIGKILL after %.0f s" % PROFILE.t(10)
        self.exits.append((how, rc))
        self.proc = None
        return rc

    def stop(self):
        return self.kill(signal.SIGTERM)

    def cleanup(self):
        self.stop()
        self.remove_files()

    def remove_files(self):
        if self.own_tmp:
            for name in os.listdir(self.tmpdir):
                try:
                    os.unlink(os.path.join(self.tmpdir, name))
                except OSError:
                    pass
            try:
                os.rmdir(self.tmpdir)
            except OSError:
                pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()
        return False

    # -- talking to it

    @property
    def tcp_addr(self):
        return ("127.0.0.1", self.port)

    def connect(self, tcp=False, **kw):
        kw.setdefault("token", self.token)
        return Conn(self.tcp_addr if tcp else self.path, **kw)

    def control(self):
        """A connection kept for stats and other checks."""
        if self._control is None or self._control.closed:
            self._control = self.connect(timeout=PROFILE.t(30))
        return self._control

    def stats(self):
        r = self.control().call("stats")
        if not r.get("ok"):
            raise RuntimeError("stats failed: %r" % (r,))
        return r["stats"]

    def rss_mib(self):
        return self.status_kib("VmRSS") / 1024.0

    def hwm_mib(self):
        return self.status_kib("VmHWM") / 1024.0

    def status_kib(self, key):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        raise RuntimeError("no %s in /proc/%d/status" % (key, self.proc.pid))


# ---------------------------------------------------------------- bystander

class Bystander:
    """Another client, in a process of its own: submit(counter run [1]) +
    wait, over and over, on its own connection, from start() to stop().
    stop() returns its report: rounds, latencies (each round's submit +
    wait, seconds), errors (wrong answers, a disconnection), and `stuck`:
    how long a round had been waiting when it was stopped, if one was."""

    PAUSE_S = 0.01

    def __init__(self, daemon, tcp=False):
        addr = "tcp:%s:%d" % daemon.tcp_addr if tcp else daemon.path
        argv = [sys.executable, os.path.abspath(__file__), "bystander", addr]
        if daemon.token is not None:
            argv.append(daemon.token)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE,
                                     preexec_fn=_pdeathsig)
        self.report = None
        self.t0 = time.monotonic()

    def wait_ready(self, timeout=None):
        """Waits for its first good round; False when it did not come."""
        timeout = timeout or PROFILE.t(10)
        if not readable(self.proc.stdout, timeout):
            return False
        return self.proc.stdout.readline().strip() == b"ready"

    def stop(self):
        if self.report is not None:
            return self.report
        try:
            # communicate() closes its stdin: the bystander's signal to stop.
            out, _ = self.proc.communicate(timeout=PROFILE.t(10) + 5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        try:
            lines = [l for l in out.decode().splitlines() if l.startswith("{")]
            self.report = json.loads(lines[-1])
        except Exception:
            self.report = {"rounds": 0, "latencies": [], "at": [],
                           "errors": ["bystander gave no report: %r"
                                      % out[-300:]], "stuck": None}
        return self.report

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _bystander_main(addr, token):
    """The bystander process: see Bystander."""
    if addr.startswith("tcp:"):
        host, port = addr[4:].rsplit(":", 1)
        addr = (host, int(port))
    big = 600.0
    lock = threading.Lock()
    state = {"t0": None, "rounds": 0, "lat": [], "at": [], "errors": []}
    stop = threading.Event()
    done = threading.Event()
    start = time.monotonic()

    def report(stuck=None):
        with lock:
            print(json.dumps({"rounds": state["rounds"],
                              "latencies": state["lat"], "at": state["at"],
                              "errors": state["errors"], "stuck": stuck}),
                  flush=True)

    def watcher():
        sys.stdin.buffer.read()  # EOF: stop
        stop.set()
        # A round that is stuck is not waited for long: its time so far is
        # the figure (the caller counts it as a latency).
        if not done.wait(PROFILE.t(5)):
            t0 = state["t0"]
            report(stuck=None if t0 is None else time.monotonic() - t0)
            os._exit(0)

    threading.Thread(target=watcher, daemon=True).start()
    try:
        c = Conn(addr, token=token, timeout=big)
    except Exception as e:
        state["errors"].append("could not connect: %r" % (e,))
        done.set()
        report()
        return
    ready = False
    while not stop.is_set():
        t0 = time.monotonic()
        state["t0"] = t0
        try:
            r = c.call("submit", timeout=big, type="counter", method="run",
                       input=[1])
            if not r.get("ok") or not isinstance(r.get("pid"), str):
                raise AssertionError("submit answered %r" % (r,))
            w = c.call("wait", timeout=big, pid=r["pid"],
                       timeout_ms=int(big * 1000))
            if not w.get("ok") or w.get("result") != 1:
                raise AssertionError("wait answered %r (want result 1)"
                                     % (w,))
        except ConnClosed as e:
            state["errors"].append("disconnected: %s" % e)
            break
        except Exception as e:
            state["errors"].append("wrong answer: %s" % e)
            break
        dt = time.monotonic() - t0
        with lock:
            state["t0"] = None
            state["rounds"] += 1
            state["lat"].append(round(dt, 6))
            state["at"].append(round(t0 - start, 3))
        if not ready:
            print("ready", flush=True)
            ready = True
        time.sleep(Bystander.PAUSE_S)
    done.set()
    report()


# ---------------------------------------------------------------- a case

class Case:
    """Checks and figures of one case, printed as they come."""

    def __init__(self, name):
        self.name = name
        self.failed = []
        self.passed = 0
        self.t0 = time.monotonic()
        self.cleanups = []
        self.daemons = []
        print("=== hostile case: %s" % name)
        print("    %s" % PROFILE)
        sys.stdout.flush()

    def check(self, what, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)
        print("%s  %s%s" % ("ok   " if ok else "FAIL ", what,
                            (": " + detail) if detail else ""))
        sys.stdout.flush()
        return ok

    def figure(self, what, value):
        print("      figure: %s = %s" % (what, value))
        sys.stdout.flush()

    def note(self, text):
        print("      " + text)
        sys.stdout.flush()

    def daemon(self, exe, flags=(), **kw):
        """Starts a daemon that is stopped when the case ends; a daemon that
        does not start is a failed check (and None)."""
        d = self.own(Daemon(exe, flags, **kw))
        try:
            d.start()
        except DaemonStartError as e:
            self.check("stepxd starts with %s" % (" ".join(flags) or
                                                  "its defaults"), False,
                       str(e))
            return None
        return d

    def own(self, d):
        """d is stopped at the end of the case, and its logs looked at."""
        self.daemons.append(d)
        return d

    def _stop_daemons(self):
        """Stops every daemon, checks their logs for sanitizer reports and
        that none died on its own, then removes their files."""
        for d in self.daemons:
            try:
                d.stop()
            except Exception:
                pass
        for k, d in enumerate(self.daemons):
            if not d.logs:
                continue
            name = "stepxd #%d (%s)" % (k + 1, " ".join(d.flags) or
                                         "default flags")
            self.figure("%s: stopped by / exit status" % name,
                        ", ".join("%s / %s" % e for e in d.exits) or "none")
            reports = d.sanitizer_reports()
            died = [rc for how, rc in d.exits if how == "had exited"]
            self.check("%s: lived until the case stopped it, and no "
                       "sanitizer spoke" % name, not reports and not died,
                       "" if not reports and not died else
                       "exited on its own: %s; sanitizer lines: %s; log "
                       "ends: %s" % (died, "\n        ".join(reports[:10]),
                                     d.log()[-500:]))
        for d in self.daemons:
            try:
                d.remove_files()
            except Exception:
                pass

    def bystander(self, daemon, tcp=False):
        b = Bystander(daemon, tcp)
        self.cleanups.append(b.kill)
        if not b.wait_ready():
            self.check("the bystander's first round", False,
                       "no good round within %.0f s: %r"
                       % (PROFILE.t(10), b.stop()))
        return b

    def check_bystander(self, b, during):
        """Stops the bystander (after half a second more, so that it also
        covers what follows the attack) and checks that it kept its
        service."""
        time.sleep(0.5)
        rep = b.stop()
        lat = list(rep["latencies"])
        if rep.get("stuck") is not None:
            lat.append(rep["stuck"])
        worst = max(lat) if lat else float("nan")
        med = statistics.median(lat) if lat else float("nan")
        at = rep["at"][rep["latencies"].index(max(rep["latencies"]))] \
            if rep["latencies"] else None
        self.figure("bystander (%s)" % during,
                    "%d rounds, worst %.4f s%s, median %.4f s%s"
                    % (rep["rounds"], worst,
                       "" if at is None else " (round started at +%.1f s)"
                       % at, med,
                       "" if rep.get("stuck") is None else
                       ", a round still stuck after %.1f s when stopped"
                       % rep["stuck"]))
        self.check("bystander got every answer right and stayed connected "
                   "(%s)" % during, not rep["errors"],
                   "; ".join(rep["errors"]))
        self.check("bystander's worst latency under %.1f s (%s)"
                   % (PROFILE.latency_s, during),
                   bool(lat) and worst < PROFILE.latency_s,
                   "worst %.4f s" % worst)
        return rep

    def run(self, fn, *args):
        """Runs the case's body, cleans up, returns the exit status."""
        rc = 1
        try:
            fn(self, *args)
        except Exception:
            self.check("the case ran to its end", False,
                       traceback.format_exc().strip().replace("\n", "\n      "))
        finally:
            for c in reversed(self.cleanups):
                try:
                    c()
                except Exception:
                    pass
            self._stop_daemons()
        took = time.monotonic() - self.t0
        print("=== %s: %d checks passed, %d failed (%.1f s)"
              % (self.name, self.passed, len(self.failed), took))
        if self.failed:
            print("    failed: " + "; ".join(self.failed))
            rc = 1
        else:
            rc = 0
        sys.stdout.flush()
        return rc


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "bystander":
        require_msgpack()
        _bystander_main(sys.argv[2], sys.argv[3] if len(sys.argv) > 3
                        else None)
    else:
        print(__doc__)
        sys.exit(2)

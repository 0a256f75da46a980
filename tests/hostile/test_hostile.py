#!/usr/bin/python3
"""tests/hostile/test_hostile.py: hostile clients against a real stepxd.

    /usr/bin/python3 tests/hostile/test_hostile.py CASE PATH/TO/stepxd
    /usr/bin/python3 tests/hostile/test_hostile.py --list

Each case starts its own stepxd (temporary socket, and a free loopback TCP
port where it needs one; always stopped at the end, failed or not), runs
one attack from a client that breaks no frame rule, and checks two things:

  (a) what the daemon does about the attack (its defence);
  (b) that OTHER CLIENTS KEEP THEIR SERVICE: a bystander client (its own
      connection, its own Python process) runs submit(counter run [1]) +
      wait in a loop during the whole attack; the case fails when one of
      its answers is wrong, when it is disconnected, or when its worst
      round (submit + wait) takes longer than the latency bound (2 s in the
      release profile, 10 s in the sanitizer profile). Every case prints
      the bystander's rounds, worst and median latency, and its other
      figures (RSS before and after, counts), one "figure:" line each.

The cases (README.md says the same at more length):

  quadratic-stall      1. 65,000 pipelined waits with timeout_ms 1 on one
                          echo process, all timing out, then the process
                          ends (topic stop)
  abandoned-subscribes 2. six rounds of connect, 65,536 subscribes over 16
                          echo processes, close: relay_waits back to its
                          baseline within 2 s, relay_watches at most the
                          watched processes, RSS growth under 64 MiB; and
                          --max-waits 1000: the 1001st gets limit
  unauthenticated      3. TCP with --token: (a) 20 token-less 15 MiB frames
                          (bad_frame at the header, small RSS growth); (b)
                          1,030 idle token-less connections do not keep a
                          client with the token out (--max-unauthenticated,
                          oldest closed with limit); (c) --auth-timeout
                          closes a silent connection with timeout; (d) a
                          hello with version 2 is bad_request and closes
  pid-restart          4. PIDs do not repeat after stepxd restarts (SIGKILL,
                          then SIGTERM): terminate of an old PID is
                          not_found, the new process lives on
  slow-reader          5. a client reading one frame a second gets 40 x 4
                          MiB messages: it stays connected, its wait is
                          answered, lost messages are told by a "dropped"
                          push; mailbox PIDs are not a sequence
  outcome-pin          6. fanout of 100 exec children of 1 MB output each:
                          wait answers too_large or a result (never
                          internal), outcome_bytes within its budget, RSS
                          settles; exec's output is capped at 1 MiB
  non-utf8             7. strs that are not UTF-8 in requests: every frame
                          the server sends back decodes strictly

Scale: STEPX_HOSTILE_PROFILE=sanitizer (meson sets it in an ASan/UBSan
build) divides attack sizes by 4 and multiplies time bounds by 5; see
hostile.py for the single overrides. Exit status: 0 all checks passed, 1 a
check failed, 77 skipped (msgpack missing), 2 usage.
"""

import collections
import os
import signal
import socket
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import (MiB, PROFILE, Conn, ConnClosed, Daemon,  # noqa: E402
                     RawStr, ReadTimeout, Undecodable, error_code, frame,
                     pack, parse_pid, request)


def counts(replies):
    return dict(collections.Counter(error_code(m) or "ok"
                                    for m in replies.values()))


# ------------------------------------------------------- 1. quadratic stall

def _big_sndbuf(sock, want=16 * MiB):
    """Raises sock's send buffer as far as this process may (SO_SNDBUFFORCE
    needs CAP_NET_ADMIN; SO_SNDBUF stops at net.core.wmem_max); returns
    the buffer the kernel gives (it doubles the number asked for)."""
    for opt in (32, socket.SO_SNDBUF):  # 32: SO_SNDBUFFORCE (Linux)
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, want)
        except OSError:
            continue
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= want:
            break
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)


def case_quadratic_stall(case, exe):
    # The attack needs many waits registered before the first 1 ms timer
    # runs (each then keeps a record of its own; a wait that comes after a
    # timeout mostly takes a timed-out record over instead). libuv reads
    # up to 32 x 64 KiB from a connection in one loop iteration, so the
    # attacker's requests must be queued in the kernel in gulps that big:
    # over a Unix socket the queue is the sender's send buffer, which the
    # attacker raises (SO_SNDBUFFORCE as root, else up to wmem_max); when
    # it cannot get 4 MiB it uses loopback TCP, whose buffers grow with a
    # fast reader (a release build; a sanitizer build reads too slowly for
    # that). The figure "relay_watches after the timeouts" says how many
    # records there were (about 40,000 at best: 2 MiB of 52-byte frames).
    # Not scaled down in the sanitizer profile: the attack is cheap, and
    # its size is the point.
    d = case.daemon(exe, tcp=True)
    if d is None:
        return
    n = 65000
    b = case.bystander(d)
    time.sleep(0.5)
    rss0 = d.rss_mib()
    a = d.connect(timeout=PROFILE.t(180))
    buf = _big_sndbuf(a.sock)
    how = "Unix socket, send buffer %.1f MiB" % (buf / MiB)
    if buf < 4 * MiB:
        a.close()
        a = d.connect(tcp=True, timeout=PROFILE.t(180))
        how += " (too small): loopback TCP instead"
    case.figure("attacker's connection", how)
    pid = a.call("submit", type="echo", method="serve", input=[])["pid"]
    base = a.next_id
    ids = list(range(base, base + n))
    a.next_id = base + n
    frames = b"".join(request("wait", i, pid=pid, timeout_ms=1) for i in ids)
    t0 = time.monotonic()
    got = a.pipeline(frames, ids, PROFILE.t(180))
    t_waits = time.monotonic() - t0
    c = counts(got)
    case.figure("waits pipelined, answered", "%d, %d in %.2f s: %s"
                % (n, len(got), t_waits, c))
    case.check("every one of the %d waits answered timeout" % n,
               c == {"timeout": n}, str(c))
    st = d.stats()
    case.figure("relay_watches / relay_waits after the timeouts",
                "%s / %s" % (st.get("relay_watches"), st.get("relay_waits")))
    t1 = time.monotonic()
    r = a.call("send", to=pid, topic="stop", data=None)
    case.check("send stop to the echo process", r.get("ok"), repr(r))
    w = a.call("wait", timeout=PROFILE.t(180), pid=pid,
               timeout_ms=int(PROFILE.t(170) * 1000))
    t_end = time.monotonic() - t1
    case.figure("the process's end (send stop + wait)", "%.2f s" % t_end)
    case.check("the echo process ended (wait ok)", w.get("ok"), repr(w))
    time.sleep(1.0)
    case.figure("RSS before / after", "%.1f / %.1f MiB"
                % (rss0, d.rss_mib()))
    case.check_bystander(b, "%d waits timing out, then their process "
                         "ending" % n)


# ------------------------------------------------- 2. abandoned subscribes

def case_abandoned_subscribes(case, exe):
    d = case.daemon(exe)
    if d is not None:
        _abandoned_rounds(case, d)
    _max_waits(case, exe)


def _abandoned_rounds(case, d):
    n_echo = 16
    owner = d.connect(timeout=PROFILE.t(60))
    echos = [owner.call("submit", type="echo", method="serve",
                        input=[])["pid"] for _ in range(n_echo)]
    b = case.bystander(d)
    time.sleep(0.3)
    st = d.stats()
    case.figure("baseline relay_waits / relay_watches", "%s / %s"
                % (st.get("relay_waits"), st.get("relay_watches")))
    rss0 = d.rss_mib()
    n = PROFILE.n(65536)
    settle = PROFILE.t(2)
    for rnd in range(1, 7):
        c = d.connect(timeout=PROFILE.t(60))
        base = c.next_id
        ids = list(range(base, base + n))
        frames = b"".join(request("subscribe", i, pid=echos[i % n_echo])
                          for i in ids)
        t0 = time.monotonic()
        got = c.pipeline(frames, ids, PROFILE.t(60))
        t_subs = time.monotonic() - t0
        during = d.stats()
        c.close()
        t_close = time.monotonic()
        while True:
            st = d.stats()
            waits, watches = st.get("relay_waits"), st.get("relay_watches")
            good = (waits is not None and waits <= 1 and watches is not None
                    and watches <= n_echo + 1)
            el = time.monotonic() - t_close
            if good or el > settle:
                break
            time.sleep(0.05)
        case.figure("round %d" % rnd,
                    "%d subscribes in %.2f s (%s); relay_waits %s -> %s, "
                    "relay_watches %s -> %s (%.2f s after the close); "
                    "RSS %.1f MiB"
                    % (n, t_subs, counts(got), during.get("relay_waits"),
                       waits, during.get("relay_watches"), watches, el,
                       d.rss_mib()))
        case.check("round %d: within %.1f s of the close, relay_waits <= 1 "
                   "(the bystander's) and relay_watches <= %d"
                   % (rnd, settle, n_echo + 1), good,
                   "relay_waits %s%s, relay_watches %s"
                   % (waits, " (no such key)" if waits is None else "",
                      watches))
        if rnd == 1:
            rss_r1 = d.rss_mib()
    time.sleep(1.0)
    rss1 = d.rss_mib()
    case.figure("RSS growth from the end of round 1 to the end of round 6",
                "+%.1f MiB (what piles up round after round, rather than "
                "one round's worth kept by the allocator)" % (rss1 - rss_r1))
    bound = 64 + PROFILE.rss_slack_mib()
    case.figure("RSS before round 1 / after round 6 (+1 s)",
                "%.1f / %.1f MiB (+%.1f MiB)" % (rss0, rss1, rss1 - rss0))
    case.check("RSS growth over six rounds under %d MiB" % bound,
               rss1 - rss0 < bound, "+%.1f MiB" % (rss1 - rss0))
    case.check_bystander(b, "six rounds of %d abandoned subscribes" % n)
    owner.close()


def _max_waits(case, exe):
    # No bystander here: its own wait would count against the cap of 1000.
    d = case.daemon(exe, ["--max-waits", "1000"])
    if d is None:
        return
    c = d.connect(timeout=PROFILE.t(60))
    echos = [c.call("submit", type="echo", method="serve",
                    input=[])["pid"] for _ in range(4)]
    base = c.next_id
    ids = list(range(base, base + 1000))
    c.next_id = base + 1000
    frames = b"".join(request("subscribe", i, pid=echos[i % 4]) for i in ids)
    got = c.pipeline(frames, ids, PROFILE.t(60))
    case.check("--max-waits 1000: 1000 subscribes ok",
               counts(got) == {"ok": 1000}, str(counts(got)))
    r = c.call("subscribe", pid=echos[0])
    case.check("--max-waits 1000: the 1001st subscribe answers limit",
               error_code(r) == "limit", repr(r))
    r = c.call("wait", pid=echos[1], timeout_ms=100)
    case.check("--max-waits 1000: a wait past the cap answers limit too",
               error_code(r) == "limit", repr(r))
    r = c.call("stats")
    case.check("--max-waits 1000: the connection stays open (stats ok)",
               r.get("ok"), repr(r)[:200])
    c2 = d.connect()
    r = c2.call("subscribe", pid=echos[2])
    case.check("--max-waits 1000: the cap is the daemon's: another "
               "connection's subscribe answers limit",
               error_code(r) == "limit", repr(r))


# --------------------------------------------- 3. unauthenticated clients

TOKEN = "hostile-token-Zq8"


def case_unauthenticated(case, exe):
    # Two descriptors a connection (ours and the daemon's, which inherits
    # our limit), plus some.
    nofile = hostile.raise_nofile(8192)
    d = case.daemon(exe, tcp=True, token=TOKEN)
    if d is not None:
        _unauth_big_frames(case, d)
        if nofile >= 1100:
            _unauth_idle_crowd(case, d)
        else:
            case.note("(b) SKIPPED: RLIMIT_NOFILE is %d (hard limit), too "
                      "few for 1,030 connections" % nofile)
        _unauth_bad_version(case, d)
    _unauth_deadline(case, exe)


def _tcp_raw(d):
    s = socket.create_connection(d.tcp_addr, timeout=10)
    s.settimeout(None)
    return s


def _read_error_frame(s, timeout):
    """An error frame the server sent on raw socket s within timeout, and
    whether it closed the connection after it (within half a second more):
    (frame or None, 'end of file'/'reset (...)'/None)."""
    c = Conn.wrap(s, timeout)
    m = None
    try:
        m = c.recv_frame(timeout)
    except (ReadTimeout, ConnClosed):
        pass
    except Undecodable as e:
        m = {"undecodable": str(e)}
    why = c.poll_closed(PROFILE.t(0.5) if m is not None else 0)
    return m, why


def _fates(socks, timeout):
    """_read_error_frame for each of socks, within one shared deadline."""
    deadline = time.monotonic() + timeout
    return [_read_error_frame(s, max(0.0, deadline - time.monotonic()))
            for s in socks]


def _unauth_big_frames(case, d):
    b = case.bystander(d)
    nconn = 20
    size = 15 * MiB
    # A real start of a map: {"op": "hello", "pad": <bin of the rest>}.
    head = b"\x82" + pack("op") + pack("hello") + pack("pad")
    pad = size - len(head) - 5
    body_head = head + b"\xc6" + struct.pack(">I", pad)
    chunk = bytes(256 * 1024)
    rss0 = d.rss_mib()
    socks = [_tcp_raw(d) for _ in range(nconn)]
    outcome = [None] * nconn
    sent = [0] * nconn

    def attack(k):
        s = socks[k]
        try:
            s.sendall(struct.pack(">I", size) + body_head)
            left = size - len(body_head) - 1  # the frame never completes
            while left > 0:
                # Stop as soon as the server has said something.
                if hostile.readable(s, 0):
                    outcome[k] = "server spoke"
                    return
                n = s.send(chunk[:min(len(chunk), left)])
                left -= n
                sent[k] += n
            outcome[k] = "whole body but 1 byte sent"
        except OSError as e:
            outcome[k] = "send failed: %s" % (e.strerror or e)

    threads = [threading.Thread(target=attack, args=(k,), daemon=True)
               for k in range(nconn)]
    for t in threads:
        t.start()
    peak = rss0
    deadline = time.monotonic() + PROFILE.t(30)
    while any(t.is_alive() for t in threads) and \
            time.monotonic() < deadline:
        peak = max(peak, d.rss_mib())
        time.sleep(0.05)
    for t in threads:
        t.join(0.1)
    time.sleep(0.5)
    peak = max(peak, d.rss_mib())
    res = _fates(socks, PROFILE.t(2))
    for s in socks:
        s.close()
    good = sum(1 for m, why in res
               if m is not None and m.get("id") == 0 and not m.get("ok")
               and error_code(m) == "bad_frame" and why is not None)
    case.figure("%d MiB frames sent without a token" % (size // MiB),
                "%d connections, %.1f MiB of bodies sent in all; outcomes %s"
                % (nconn, sum(sent) / MiB,
                   dict(collections.Counter(outcome))))
    case.figure("what the server answered",
                dict(collections.Counter(
                    ("%s/%s" % (error_code(m), why)) if m is not None
                    else "nothing/%s" % why for m, why in res)))
    case.figure("RSS before / peak", "%.1f / %.1f MiB (+%.1f MiB)"
                % (rss0, peak, peak - rss0))
    case.check("(a) each of the %d connections got an error frame id 0 "
               "bad_frame and was closed" % nconn, good == nconn,
               "%d of %d" % (good, nconn))
    bound = 32 + PROFILE.rss_slack_mib()
    case.check("(a) RSS growth under %d MiB while the bodies come" % bound,
               peak - rss0 < bound, "+%.1f MiB" % (peak - rss0))
    case.check_bystander(b, "(a) 20 token-less 15 MiB frames")


def _unauth_idle_crowd(case, d):
    b = case.bystander(d)
    n = 1030
    socks = []
    t0 = time.monotonic()
    try:
        for _ in range(n):
            socks.append(_tcp_raw(d))
    except OSError as e:
        case.check("(b) open %d idle connections" % n, False,
                   "only %d: %s" % (len(socks), e))
    case.figure("idle token-less connections opened", "%d in %.2f s"
                % (len(socks), time.monotonic() - t0))
    time.sleep(0.5)
    try:
        c = d.connect(tcp=True, timeout=PROFILE.t(10))
        r = c.info
        c.close()
    except RuntimeError as e:
        r = str(e)
    except (ConnClosed, OSError) as e:
        r = "connection closed: %s" % e
    case.check("(b) a client with the token gets in past %d idle "
               "unauthenticated connections" % n,
               isinstance(r, dict) and r.get("ok"), repr(r)[:300])
    # What became of the idle ones: closed with limit (the oldest), or open.
    res = _fates(socks, 0.2)
    fates = ["open" if m is None and why is None else
             "%s/%s" % (error_code(m) if m is not None else "nothing", why)
             for m, why in res]
    case.figure("the idle connections' fates", dict(collections.Counter(
        fates)))
    still_open = fates.count("open")
    oldest = n - 64 - 1
    case.check("(b) at most 64 (--max-unauthenticated's default) are still "
               "open", still_open <= 64, "%d open" % still_open)
    case.check("(b) the oldest %d were closed with an error frame id 0 "
               "limit" % oldest,
               all(f.startswith("limit/") and res[i][0].get("id") == 0
                   for i, f in enumerate(fates[:oldest])),
               "first fates: %s" % fates[:3])
    for s in socks:
        s.close()
    case.check_bystander(b, "(b) %d idle token-less connections" % n)


def _unauth_bad_version(case, d):
    b = case.bystander(d)
    c = d.connect(tcp=True, hello=False, timeout=PROFILE.t(10))
    r = c.call("hello", version=2, token=TOKEN)
    case.check("(d) hello with the right token and version 2: bad_request",
               error_code(r) == "bad_request", repr(r))
    try:
        r2 = c.call("stats", timeout=PROFILE.t(2))
        after = "stats answered ok=%s" % r2.get("ok")
        closed = False
    except (ConnClosed, OSError) as e:
        after = "closed (%s)" % e
        closed = True
    except ReadTimeout:
        after = "no answer, not closed"
        closed = False
    case.check("(d) ... and the connection is closed", closed, after)
    c.close()
    case.check_bystander(b, "(d) hello with version 2")


def _unauth_deadline(case, exe):
    ms = 1000
    d = case.daemon(exe, ["--auth-timeout", str(ms)], tcp=True, token=TOKEN)
    if d is None:
        return
    b = case.bystander(d)
    authed = d.connect(tcp=True, timeout=PROFILE.t(10))
    s = _tcp_raw(d)
    t0 = time.monotonic()
    m, why = _read_error_frame(s, ms / 1000.0 + PROFILE.t(2))
    el = time.monotonic() - t0
    s.close()
    case.figure("(c) silent connection", "after %.2f s: %r, closed: %s"
                % (el, m, why))
    case.check("(c) a silent connection gets error frame id 0 timeout "
               "after the auth deadline (%d ms) and is closed" % ms,
               m is not None and m.get("id") == 0 and
               error_code(m) == "timeout" and why is not None and
               el >= ms / 1000.0 * 0.9, "%r after %.2f s, closed: %s"
               % (m, el, why))
    r = authed.call("stats")
    case.check("(c) an authenticated connection idle as long is not closed",
               r.get("ok"), repr(r)[:200])
    case.check_bystander(b, "(c) the auth deadline")


# ------------------------------------------------------- 4. pid restart

def case_pid_restart(case, exe):
    for sig in (signal.SIGKILL, signal.SIGTERM):
        _pid_restart(case, exe, sig)


def _pid_session(d):
    """The same steps on each daemon: connect, 3 echo processes."""
    c = d.connect(timeout=PROFILE.t(30))
    return c, [c.call("submit", type="echo", method="serve",
                      input=[])["pid"] for _ in range(3)]


def _pid_restart(case, exe, sig):
    name = signal.Signals(sig).name
    tmp = tempfile.mkdtemp(prefix="stepx-hostile.")
    path = os.path.join(tmp, "stepxd.sock")
    d1 = Daemon(exe, socket_path=path, tmpdir=tmp)
    d2 = Daemon(exe, socket_path=path, tmpdir=tmp)
    d1.own_tmp = True  # removes the directory, d2's files too, at the end
    case.own(d1)
    case.own(d2)
    d1.start()
    c1, old = _pid_session(d1)
    rc = d1.kill(sig)
    c1.close()
    case.figure("first stepxd", "PIDs %s; %s -> exit %s" % (old, name, rc))
    d2.start()
    c2, new = _pid_session(d2)
    b = case.bystander(d2)
    case.figure("second stepxd (same socket)", "PIDs %s" % new)
    case.check("%s: no PID of the restarted daemon repeats one of before"
               % name, not set(old) & set(new),
               "repeated: %s" % sorted(set(old) & set(new)))
    for p in old:
        r = c2.call("terminate", pid=p)
        case.check("%s: terminate of the old PID %s answers not_found"
                   % (name, p), error_code(r) == "not_found", repr(r))
    live = {p["pid"] for p in c2.call("ps")["processes"]}
    for p in new:
        w = c2.call("wait", pid=p, timeout_ms=300)
        case.check("%s: the new process %s is still alive (in ps, wait "
                   "answers timeout)" % (name, p),
                   p in live and error_code(w) == "timeout", "ps: %s; wait: "
                   "%r" % (p in live, w))
    case.check_bystander(b, "%s restart, terminates of old PIDs" % name)
    c2.close()
    d2.stop()


# --------------------------------------------------------- 5. slow reader

def case_slow_reader(case, exe):
    n_msgs = 40
    if PROFILE.sanitizer:
        size, max_output = 1 * MiB, 16 * MiB
        flags = ["--max-output", str(max_output)]
    else:
        size, max_output = 4 * MiB, 64 * MiB
        flags = []
    d = case.daemon(exe, flags)
    if d is None:
        return
    b = case.bystander(d)
    victim = d.connect(timeout=PROFILE.t(60))
    mailbox = victim.info["mailbox"]
    sp = victim.call("submit", type="sleeper", method="run",
                     input=[3000])["pid"]
    wid = victim.send("wait", pid=sp)
    rss0 = d.rss_mib()
    t0 = time.monotonic()
    sends = []
    attack_done = threading.Event()

    def attacker():
        try:
            a = d.connect(timeout=PROFILE.t(60))
            for i in range(n_msgs):
                data = struct.pack(">I", i) + bytes(size - 4)
                r = a.call("send", to=mailbox, topic="x", data=data)
                sends.append(error_code(r) or "ok")
            a.close()
        except Exception as e:
            sends.append("attacker failed: %r" % (e,))
        finally:
            attack_done.set()

    threading.Thread(target=attacker, daemon=True).start()
    events = []
    closed = None
    wait_reply = None
    received = dropped = 0
    peak = rss0
    last = 0.0
    deadline = t0 + PROFILE.t(90)
    slow_until = None
    while time.monotonic() < deadline:
        peak = max(peak, d.rss_mib())
        now = time.monotonic()
        # One frame a second while the attack goes on and the sleeper
        # sleeps; once every message has been sent (the server has decided
        # what to drop) and the wait is due, read the rest at full speed.
        fast = attack_done.is_set() and now - t0 > 5.0
        if fast and slow_until is None:
            slow_until = now - t0
        if not fast and now - last < 1.0:
            time.sleep(min(0.1, 1.0 - (now - last)))
            continue
        try:
            m = victim.recv_frame(0.2 if not fast else PROFILE.t(5))
        except ReadTimeout:
            if fast:
                break  # nothing more is coming
            continue
        except ConnClosed as e:
            closed = str(e)
            break
        except Undecodable as e:
            events.append(("undecodable", str(e)))
            continue
        last = time.monotonic()
        if m.get("push") == "message":
            data = m.get("data")
            seq = struct.unpack(">I", data[:4])[0] \
                if isinstance(data, bytes) and len(data) == size else None
            events.append(("msg", seq))
            received += 1
        elif m.get("push") == "dropped":
            cnt = m.get("count")
            events.append(("dropped", cnt))
            dropped += cnt if isinstance(cnt, int) else 0
        elif m.get("id") == wid:
            wait_reply = m
            events.append(("wait", error_code(m) or m.get("result")))
        else:
            events.append(("other", repr(m)[:100]))
        if wait_reply is not None and received + dropped >= n_msgs:
            break
    took = time.monotonic() - t0
    case.figure("victim read", "%d frames in %.1f s (%s): %s"
                % (len(events), took, "one a second" if slow_until is None
                   else "one a second for the first %.1f s" % slow_until,
                   _squash(events)))
    case.figure("attacker's %d sends of %d MiB" % (n_msgs, size // MiB),
                dict(collections.Counter(sends)))
    case.figure("RSS before / peak", "%.1f / %.1f MiB (max output %d MiB)"
                % (rss0, peak, max_output // MiB))
    case.check("the slow reader's connection stays open", closed is None,
               "closed: %s after %d frames" % (closed, len(events)))
    if closed is None:
        r = victim.call("stats", timeout=PROFILE.t(10))
        case.check("the slow reader's connection still answers (stats)",
                   r.get("ok"), repr(r)[:200])
    case.check("its wait is answered: ok, result 3000",
               wait_reply is not None and wait_reply.get("ok") and
               wait_reply.get("result") == 3000, repr(wait_reply)[:200])
    case.check("some messages were dropped (dropped pushes, count > 0)",
               dropped > 0 and all(c > 0 for k, c in events
                                   if k == "dropped" and
                                   isinstance(c, int)),
               "received %d, dropped %d" % (received, dropped))
    prev, gap_ok, order_ok, seen_drop = -1, True, True, False
    bad = []
    for k, v in events:
        if k == "dropped":
            seen_drop = True
        elif k == "msg":
            if v is None or v <= prev:
                order_ok = False
                bad.append("msg %s after %s" % (v, prev))
            elif v != prev + 1 and not seen_drop:
                gap_ok = False
                bad.append("msg %d after %d with no dropped push" % (v, prev))
            if v is not None:
                prev = v
            seen_drop = False
    case.check("messages in order, each of the 4 MiB sent", order_ok,
               "; ".join(bad[:5]))
    case.check("a dropped push comes before any message that follows a gap",
               gap_ok, "; ".join(bad[:5]))
    case.check("messages received + dropped counts == %d" % n_msgs,
               received + dropped == n_msgs, "%d + %d" % (received, dropped))
    try:
        pd = d.stats().get("relay_push_drops")
    except Exception as e:
        pd = "stats failed: %r" % (e,)
    case.check("stats relay_push_drops counts them", pd == dropped,
               "relay_push_drops %s, dropped counts %d" % (pd, dropped))
    case.check_bystander(b, "a slow reader flooded with %d x %d MiB"
                         % (n_msgs, size // MiB))
    # Mailbox PIDs of successive connections.
    boxes = []
    for _ in range(50):
        c = d.connect(timeout=PROFILE.t(10))
        boxes.append(c.info["mailbox"])
        c.close()
    ids = [parse_pid(p)[2] for p in boxes]
    upper = [i >> 32 for i in ids]
    diffs = [y - x for x, y in zip(upper, upper[1:])]
    case.figure("50 mailboxes", "%s ... %s; upper 32 bits: %s ..."
                % (boxes[:3], boxes[-1], upper[:6]))
    case.check("the 50 mailbox PIDs are distinct", len(set(ids)) == 50,
               "%d distinct" % len(set(ids)))
    case.check("their upper 32 bits are not a simple sequence (at least 10 "
               "distinct steps)", len(set(diffs)) >= 10,
               "distinct steps: %s" % sorted(set(diffs))[:10])


def _squash(events):
    """[('msg', 0), ('msg', 1), ...] in short: msg 0-15, dropped 24, ..."""
    out = []
    for k, v in events:
        if out and out[-1][0] == "msg" and k == "msg" and \
                isinstance(v, int) and v == out[-1][2] + 1:
            out[-1][2] = v
        else:
            out.append([k, v, v])
    return ", ".join("%s %s" % (k, a if a == z else "%s-%s" % (a, z))
                     for k, a, z in out)


# --------------------------------------------------------- 6. outcome pin

def case_outcome_pin(case, exe):
    d = case.daemon(exe)
    if d is None:
        return
    n = PROFILE.n(100, least=20)
    b = case.bystander(d)
    time.sleep(0.3)
    rss0 = d.rss_mib()
    c = d.connect(timeout=PROFILE.t(120))
    argv = ["head", "-c", "1000000", "/dev/zero"]
    t0 = time.monotonic()
    r = c.call("submit", type="fanout", method="run",
               input=[n, "exec", "run", [argv]])
    case.check("submit fanout of %d exec children" % n, r.get("ok"), repr(r))
    peak = rss0
    w = None
    if r.get("ok"):
        wid = c.send("wait", pid=r["pid"],
                     timeout_ms=int(PROFILE.t(100) * 1000))
        deadline = time.monotonic() + PROFILE.t(110)
        while w is None and time.monotonic() < deadline:
            peak = max(peak, d.rss_mib())
            try:
                m = c.recv_frame(0.1)
            except ReadTimeout:
                continue
            if m.get("id") == wid:
                w = m
    took = time.monotonic() - t0
    peak = max(peak, d.rss_mib())
    code = None if w is None else (error_code(w) or "ok")
    case.figure("the wait's answer", "%s after %.1f s: %s"
                % (code, took, repr(w)[:200] if code != "ok"
                   else "a result of %d elements" % len(w.get("result", []))))
    case.check("the wait answers too_large or a result, never internal",
               code in ("too_large", "ok"), repr(w)[:300])
    # Let it settle: RSS a few seconds after the end.
    time.sleep(PROFILE.t(2))
    rss_samples = []
    for _ in range(10):
        rss_samples.append(d.rss_mib())
        time.sleep(0.2)
    rss1 = min(rss_samples)
    st = d.stats()
    ob = st.get("outcome_bytes")
    budget = 64 * MiB
    case.figure("stats outcome_bytes", ob)
    case.check("outcome_bytes at most the budget (64 MiB, "
               "--keep-outcome-bytes' default)",
               isinstance(ob, int) and ob <= budget,
               "outcome_bytes %s%s" % (ob, " (no such key)" if ob is None
                                       else ""))
    bound = 64 + 64 + PROFILE.rss_slack_mib()
    case.figure("RSS before / peak / settled", "%.1f / %.1f / %.1f MiB "
                "(+%.1f MiB)" % (rss0, peak, rss1, rss1 - rss0))
    case.check("RSS settles within the outcome budget + 64 MiB (+%d MiB)"
               % bound, rss1 - rss0 < bound, "+%.1f MiB" % (rss1 - rss0))
    # exec's own output is capped (1 MiB a stream by default).
    r = c.call("submit", type="exec", method="run",
               input=[["head", "-c", "3000000", "/dev/zero"]])
    w = c.call("wait", pid=r.get("pid"), timeout_ms=int(PROFILE.t(30) * 1000),
               timeout=PROFILE.t(40)) if r.get("ok") else r
    out = w.get("result", {}).get("stdout") if w.get("ok") else None
    case.figure("exec head -c 3000000", "stdout of %d bytes kept"
                % len(out) if isinstance(out, bytes) else repr(w)[:200])
    # Bounded either way: cut to at most 1 MiB, or the process fails for it.
    case.check("exec's captured stdout is bounded (at most 1 MiB kept, or "
               "the process fails for its size)",
               (isinstance(out, bytes) and len(out) <= MiB) or
               error_code(w) in ("failed", "too_large"), repr(w)[:200])
    case.check_bystander(b, "a fanout of %d x 1 MB outputs" % n)


# ----------------------------------------------------------- 7. non-utf8

def _raw_call(c, fields, timeout=None):
    """Sends a request built by hand (RawStr allowed); returns its reply,
    or {"undecodable": ...} when the reply does not decode strictly."""
    rid = c.next_id
    c.next_id += 1
    c.send_raw(frame(pack(dict(op=fields.pop("op"), id=rid, **fields))))
    try:
        return c.reply(rid, timeout)
    except Undecodable as e:
        return {"undecodable": str(e)}


def _strict_wait(c, pid):
    try:
        return c.call("wait", pid=pid, timeout_ms=int(PROFILE.t(20) * 1000),
                      timeout=PROFILE.t(30))
    except Undecodable as e:
        return {"undecodable": str(e)}


def case_non_utf8(case, exe):
    d = case.daemon(exe)
    if d is None:
        return
    b = case.bystander(d)
    c = d.connect(timeout=PROFILE.t(30))
    # (a) a process's own error message made of bad bytes
    r = _raw_call(c, {"op": "submit", "type": "fail", "method": "run",
                      "input": [RawStr(b"\xff\xfebad")]})
    case.figure("(a) submit fail [b'\\xff\\xfebad']", repr(r)[:200])
    w = _strict_wait(c, r["pid"]) if r.get("ok") else r
    case.figure("(a) its wait", repr(w)[:200])
    msg = w.get("error", {}).get("message") if isinstance(w.get("error"),
                                                          dict) else None
    case.check("(a) the answer decodes strictly, error.message valid UTF-8 "
               "with U+FFFD for the bad bytes",
               "undecodable" not in w and isinstance(msg, str) and
               "\ufffd" in msg and "bad" in msg, repr(w)[:300])
    # (b) exec of a program whose name is not UTF-8 and does not exist
    r = _raw_call(c, {"op": "submit", "type": "exec", "method": "run",
                      "input": [[RawStr(b"/nonexistent/\xff\xfe-prog")]]})
    case.figure("(b) submit exec [[b'/nonexistent/\\xff\\xfe-prog']]",
                repr(r)[:200])
    w = _strict_wait(c, r["pid"]) if r.get("ok") else r
    case.figure("(b) its answer", repr(w)[:200])
    case.check("(b) the answer decodes strictly", "undecodable" not in w and
               (w.get("ok") or error_code(w) is not None), repr(w)[:300])
    # (c) a topic that is not UTF-8, to another client's mailbox
    cb = d.connect(timeout=PROFILE.t(30))
    r = _raw_call(c, {"op": "send", "to": cb.info["mailbox"],
                      "topic": RawStr(b"t\xc3\x28pic"), "data": 1})
    case.figure("(c) send with topic b't\\xc3\\x28pic'", repr(r)[:200])
    case.check("(c) the sender gets bad_request",
               error_code(r) == "bad_request", repr(r)[:300])
    try:
        got = []
        while True:
            try:
                got.append(cb.recv_frame(0.3))
            except ReadTimeout:
                break
        rs = cb.call("stats")
        state = "readable: %d push(es) first, then stats ok=%s" % (
            len(got), rs.get("ok"))
        ok = bool(rs.get("ok"))
    except (Undecodable, ConnClosed) as e:
        state, ok = "broken: %s" % e, False
    case.check("(c) the receiver's connection stays readable (strictly)",
               ok, state)
    # (d) data with a bad str nested inside, echoed back
    echo = c.call("submit", type="echo", method="serve", input=[])["pid"]
    bad = b"\xc3\x28ok\xff"
    r = _raw_call(c, {"op": "send", "to": echo, "topic": "t",
                      "data": {"k": [RawStr(bad), "fine"]}})
    case.check("(d) send to echo accepted", r.get("ok"), repr(r)[:300])
    push = None
    deadline = time.monotonic() + PROFILE.t(10)
    try:
        while push is None and time.monotonic() < deadline:
            while c.pushes and push is None:
                m = c.pushes.popleft()
                if m.get("push") == "message":
                    push = m
            if push is None:
                c._sort(c.recv_frame(max(0.0, deadline - time.monotonic())))
    except Undecodable as e:
        push = {"undecodable": str(e)}
    except ReadTimeout:
        pass
    case.figure("(d) the echo", repr(push)[:200])
    case.check("(d) the echo decodes strictly and carries the bad str as "
               "bin, same bytes",
               push is not None and "undecodable" not in push and
               push.get("data") == {"k": [bad, "fine"]}, repr(push)[:300])
    case.check_bystander(b, "non-UTF-8 strs in requests")


CASES = {
    "quadratic-stall": case_quadratic_stall,
    "abandoned-subscribes": case_abandoned_subscribes,
    "unauthenticated": case_unauthenticated,
    "pid-restart": case_pid_restart,
    "slow-reader": case_slow_reader,
    "outcome-pin": case_outcome_pin,
    "non-utf8": case_non_utf8,
}


def main(argv):
    if len(argv) == 2 and argv[1] == "--list":
        print("\n".join(CASES))
        return 0
    if len(argv) != 3 or argv[1] not in CASES:
        print("usage: %s CASE PATH/TO/stepxd  (CASE: %s) | --list"
              % (argv[0], ", ".join(CASES)), file=sys.stderr)
        return 2
    hostile.require_msgpack()
    exe = os.path.abspath(argv[2])
    if not os.access(exe, os.X_OK):
        print("%s: not an executable stepxd" % exe, file=sys.stderr)
        return 2

    # meson's timeout sends SIGTERM: unwind, so that daemons are stopped.
    def on_term(sig, _frame):
        raise SystemExit("stopped by signal %d" % sig)

    signal.signal(signal.SIGTERM, on_term)
    return hostile.Case(argv[1]).run(CASES[argv[1]], exe)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

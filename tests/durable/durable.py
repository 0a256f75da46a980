"""tests/durable/durable.py: what the durable-job cases share.

The client and the daemon helpers are tests/hostile's (hostile.py: `Conn`,
`Daemon`, `Case`, framing, the strict decoder); this module adds what a
daemon with a store needs:

- `StateDaemon`: a `Daemon` started with `--state-dir` (and more flags),
  restartable any number of times on the same state directory and socket;
  `crash()` is a kill -9 now, `kill_after(s)` a kill -9 at a chosen moment
  (a timer), `reap_crash()` waits for that kill;
- `DurableCase`: hostile's `Case` with its own heading, temporary
  directories removed at the end (kept with STEPX_DURABLE_KEEP=1), and a
  skipped outcome (exit 77) for a case that cannot run here;
- `Job`: one job of a shipped type with its idempotency key and the
  outcome it must reach (for a `tally`, the "add" messages sent to it),
  and `random_job` to draw one;
- `start_refused`: starts stepxd on a state directory that the store must
  refuse, and checks the refusal (exit status 1, a `stepxd: ` line on
  stderr with the store's words) and that the files are unchanged;
- `outcome_of`: a `wait` reply as a comparable tuple.

The profile is tests/hostile's (STEPX_HOSTILE_PROFILE=release or
sanitizer: time bounds x 5 under sanitizers); crash-rounds runs
STEPX_DURABLE_ROUNDS rounds (default 50, 10 in the sanitizer profile).
"""

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, "hostile"))
import hostile  # noqa: E402
from hostile import PROFILE, Daemon  # noqa: E402

SKIP = hostile.SKIP


def rounds_default():
    v = os.environ.get("STEPX_DURABLE_ROUNDS")
    if v:
        return max(1, int(v))
    return 10 if PROFILE.sanitizer else 50


# ---------------------------------------------------------------- files

def file_digest(path):
    """(size, sha256 hex) of a file, or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return len(data), hashlib.sha256(data).hexdigest()


def show_digest(d):
    return "absent" if d is None else "%d bytes, sha256 %s..." % (d[0],
                                                                  d[1][:16])


# ---------------------------------------------------------------- the daemon

class StateDaemon(Daemon):
    """stepxd keeping its jobs in `state_dir` (created by stepxd when
    missing). Restart it with start() after stop(), crash() or
    reap_crash(): the same state directory, socket and flags."""

    def __init__(self, exe, tmpdir, state_dir=None, flags=(), **kw):
        self.state_dir = state_dir or os.path.join(tmpdir, "state")
        super().__init__(exe, ["--state-dir", self.state_dir] + list(flags),
                         tmpdir=tmpdir, **kw)
        self._timer = None

    @property
    def db_path(self):
        return os.path.join(self.state_dir, "stepx.db")

    def crash(self):
        """kill -9 now; returns the exit status (-9 when it was alive)."""
        return self.kill(signal.SIGKILL)

    def kill_after(self, delay):
        """kill -9 in delay seconds, from a timer thread."""
        proc = self.proc

        def fire():
            if proc.returncode is None:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

        self._timer = threading.Timer(delay, fire)
        self._timer.daemon = True
        self._timer.start()

    def reap_crash(self):
        """Waits for kill_after's kill -9 and records it; returns the exit
        status: -9 when the daemon was alive until the kill."""
        self._timer.join()
        self._timer = None
        if self._control is not None:
            self._control.close()
            self._control = None
        rc = self.proc.wait()
        self.exits.append(("SIGKILL at a chosen moment", rc))
        self.proc = None
        return rc


# ---------------------------------------------------------------- a case

class Skipped(Exception):
    """The case cannot run here; the message says why."""


class DurableCase(hostile.Case):
    """hostile.Case with a heading of its own, temporary directories that
    go at the end, and Skipped as exit status 77."""

    def __init__(self, name):
        self.name = name
        self.failed = []
        self.passed = 0
        self.t0 = time.monotonic()
        self.cleanups = []
        self.daemons = []
        self.tmpdirs = []
        self.skipped = None
        print("=== durable case: %s" % name)
        print("    %s" % PROFILE)
        sys.stdout.flush()

    def tmpdir(self):
        d = tempfile.mkdtemp(prefix="stepx-durable.")
        self.tmpdirs.append(d)
        return d

    def state_daemon(self, exe, tmpdir, flags=(), start=True, **kw):
        """A StateDaemon stopped at the end of the case (and its logs
        looked at); started unless start is False."""
        d = self.own(StateDaemon(exe, tmpdir, flags=flags, **kw))
        if start:
            d.start()
        return d

    def _stop_daemons(self):
        super()._stop_daemons()
        if os.environ.get("STEPX_DURABLE_KEEP") == "1":
            for d in self.tmpdirs:
                self.note("kept %s (STEPX_DURABLE_KEEP=1)" % d)
            return
        for d in self.tmpdirs:
            shutil.rmtree(d, ignore_errors=True)

    def run(self, fn, *args):
        def body(case, *a):
            try:
                fn(case, *a)
            except Skipped as e:
                case.skipped = str(e)
        rc = super().run(body, *args)
        if rc == 0 and self.skipped is not None:
            print("SKIP: %s" % self.skipped)
            sys.stdout.flush()
            return SKIP
        return rc


# ---------------------------------------------------------------- jobs

def outcome_of(reply):
    """A wait reply as ("ok", result) or (error code, message)."""
    if reply.get("ok"):
        return ("ok", reply.get("result"))
    e = reply.get("error")
    if isinstance(e, dict):
        return (e.get("code"), e.get("message"))
    return ("?", repr(reply))


FINAL = "final"  # an outcome, as opposed to timeout / not_found / an error


def answer_kind(reply):
    """What a wait reply says: FINAL (the job's outcome), or the error
    code that is not one (timeout, not_found, limit...)."""
    if reply.get("ok"):
        return FINAL
    code = hostile.error_code(reply)
    return FINAL if code in ("failed", "cancelled", "terminated",
                             "too_large") else code


class Job:
    """One job: its key, what it runs, and the outcome it must reach.

    want is ("ok", value), ("failed", message), ("exec", stdout bytes)
    or ("tally", n): exec's result is a map, of which status 0 and stdout
    are checked; tally's is [n, init_ms, sum], of which n is checked and
    that init_ms and sum are ints (what sum must be depends on the "add"
    messages sent to it: `adds`)."""

    def __init__(self, key, type_, method, input_, want):
        self.key = key
        self.type = type_
        self.method = method
        self.input = input_
        self.want = want
        self.sends = 0         # submits sent with its key
        self.sent_rounds = []  # the rounds they were sent in
        self.pid = None        # once a submit with its key was answered
        self.acked_round = None
        self.seen = None       # (outcome, attempts) a wait answered
        self.seen_round = None
        self.final = None      # (outcome, attempts) at the end
        self.acked_new = False  # its first answered submit made it (no
                                # "existing"): it was made in acked_round;
                                # else in one of sent_rounds before that
        # A tally: the "add" messages sent to it, [value, round, answer]
        # (answer "ok", an error code, or None: no reply, the kill cut
        # it), and the rounds in which it was seen running (a wait answered
        # timeout, or an "add" was answered ok).
        self.adds = []
        self.alive = set()

    def submit_fields(self):
        return dict(type=self.type, method=self.method, input=self.input,
                    key=self.key)

    def describe(self):
        return "%s %s.%s %r" % (self.key, self.type, self.method,
                                self.input)

    def wrong(self, reply):
        """None when the wait reply is the outcome this job must reach,
        else what is wrong with it."""
        got = outcome_of(reply)
        kind, value = self.want
        if kind == "tally":
            r = got[1] if got[0] == "ok" else None
            if not isinstance(r, list) or len(r) != 3 or r[0] != value or \
                    not all(isinstance(x, int) and not isinstance(x, bool)
                            for x in r):
                return "want ok, [%d, init_ms, sum] (ints); got %r" % (value,
                                                                      got)
            return None
        if kind == "exec":
            r = got[1] if got[0] == "ok" else None
            if not isinstance(r, dict) or r.get("status") != 0 or \
                    r.get("stdout") != value:
                return "want exec status 0, stdout %r; got %r" % (value, got)
            return None
        if got != (kind, value):
            return "want %r; got %r" % ((kind, value), got)
        return None


def random_job(rng, key):
    """A job of one of the shipped types, small enough that a round of
    them finishes in well under a second; a few run long enough (up to
    ~300 ms) to be cut by a kill, and the tallies (12 %: n from 5 to 80
    steps of a 1 to 8 ms sleep, a checkpoint after each: about 10 to 800
    ms) often are."""
    k = rng.random()
    if k < 0.25:
        n = rng.choice([0, 1, 7, 100, rng.randint(0, 5000),
                        rng.randint(50000, 300000)])
        return Job(key, "counter", "run", [n], ("ok", n))
    if k < 0.38:
        ms = rng.randint(0, 300)
        return Job(key, "sleeper", "run", [ms], ("ok", ms))
    if k < 0.47:
        msg = "no luck for " + key
        return Job(key, "fail", "run", [msg], ("failed", msg))
    if k < 0.60:
        if rng.random() < 0.5:
            return Job(key, "exec", "run", [["/bin/true"]], ("exec", b""))
        return Job(key, "exec", "run", [["/bin/echo", key]],
                   ("exec", (key + "\n").encode()))
    if k < 0.75:
        n, m = rng.randint(0, 4), rng.randint(0, 20)
        return Job(key, "fanout", "run", [n, "counter", "run", [m]],
                   ("ok", [m] * n))
    if k < 0.87:
        n = rng.randint(5, 80)
        return Job(key, "tally", "run", [n, rng.randint(1, 8)],
                   ("tally", n))
    # Cancelled by the test: an echo that echoed nothing finishes with 0.
    return Job(key, "echo", "serve", [], ("ok", 0))


# ---------------------------------------------------------------- refusals

def start_refused(case, exe, tmpdir, state_dir, words, what, flags=(),
                  wrap=(), watch=()):
    """Starts stepxd on state_dir, which its store must refuse: checks
    exit status 1, a stderr line starting "stepxd: " holding one of words
    (case aside), and that each file in watch is byte for byte what it
    was. wrap: a command line put in front of stepxd's (it must exec it).
    Returns stepxd's stderr."""
    before = {p: file_digest(p) for p in watch}
    sock = os.path.join(tmpdir, "refused.sock")
    argv = list(wrap) + [exe, "--socket", sock, "--state-dir", state_dir] \
        + list(flags)
    case.note("starting: %s" % " ".join(argv))
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=hostile._pdeathsig)
    ran_on = False
    try:
        out, err = p.communicate(timeout=PROFILE.t(15))
    except subprocess.TimeoutExpired:
        ran_on = True
        p.kill()
        out, err = p.communicate()
    err = err.decode("utf-8", "replace")
    out = out.decode("utf-8", "replace")
    case.figure("%s: exit status, stderr" % what,
                "%s, %r" % ("still running after %.0f s" % PROFILE.t(15)
                            if ran_on else p.returncode, err.strip()[-600:]))
    refused = not ran_on and p.returncode == 1
    case.check("%s: stepxd exits with status 1" % what, refused,
               "" if refused else "still running after %.0f s (killed)"
               % PROFILE.t(15) if ran_on else "exit status %s; stdout %r"
               % (p.returncode, out[-300:]))
    lines = [l for l in err.splitlines() if l.startswith("stepxd: ")]
    hit = [l for l in lines if any(w.lower() in l.lower() for w in words)]
    case.check("%s: stderr has a line \"stepxd: ...\" saying %s"
               % (what, " or ".join(repr(w) for w in words)), bool(hit),
               "" if hit else "stderr: %r" % err[-600:])
    for path, d0 in before.items():
        d1 = file_digest(path)
        case.check("%s: %s is byte for byte unchanged (%s)"
                   % (what, os.path.basename(path), show_digest(d0)),
                   d0 == d1, "" if d0 == d1 else "after: %s" % show_digest(d1))
    return err


def seeded(env_name):
    """A seed from the environment variable, else a fresh one; and a
    random.Random of it."""
    v = os.environ.get(env_name)
    seed = int(v) if v else random.randrange(1 << 32)
    return seed, random.Random(seed)

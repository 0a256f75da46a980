#!/usr/bin/python3
"""tests/durable/test_durable.py: durable jobs in a real stepxd.

    /usr/bin/python3 tests/durable/test_durable.py CASE PATH/TO/stepxd
    /usr/bin/python3 tests/durable/test_durable.py --list

Each case makes its own temporary directory, starts its own stepxd(s)
there with `--state-dir DIR/state` (a socket in the same directory),
stops them at the end, failed or not, and removes the directory
(STEPX_DURABLE_KEEP=1 keeps it). What a daemon with a store promises
(PROTOCOL.md):

  crash-rounds    R rounds (STEPX_DURABLE_ROUNDS, default 50; 10 under
                  sanitizers) of: jobs of every shipped type submitted
                  pipelined with unique keys, kill -9 of stepxd at a
                  random moment (STEPX_DURABLE_SEED repeats the moments
                  and the jobs), restart on the same directory, every
                  unacknowledged submit sent again with its key. At the
                  end, without a crash, every acknowledged PID answers
                  `wait` with exactly one outcome, the right one; a key
                  always answers the same PID; no job is lost. Tally
                  jobs (checkpointed) get "add" messages each round:
                  each one's sum counts every acknowledged add once (but
                  those delivered during its last step, which it never
                  reads: docs/DURABILITY.md, known gaps) and none
                  answered with an error; one whose init ran before
                  a crash ends with attempts 1 (it resumed from a
                  checkpoint), one run again from init with one attempt
                  more per start before its first checkpoint; over 10
                  rounds or more, some tally resumes across a crash.
  idempotent-key  the same key twice: the same PID and "existing": true,
                  also racing on two connections, after a clean restart
                  and after a kill -9.
  outcomes-survive  finished jobs answer `wait` with their outcome after a
                  clean restart and after a kill -9; --keep-outcomes N
                  keeps the last N across a restart.
  checkpoint-resume  a tally [200, 5] killed -9 after 60 steps and 20
                  stored "add" messages resumes from its checkpoint: ps
                  right after the restart shows its steps (not 0), it
                  finishes with [200, init_ms of its first run, 465] (adds
                  1..30, 21..30 sent after the restart), attempts 1.
  pid-stays       jobs running at a kill -9 run again from init under the
                  same PID: `wait` on the old PID answers (attempts 2),
                  `send` and `cancel` on it work.
  restart-policy  restart policies over the protocol: the limit and its
                  error, ps while a job waits, bad fields refused, a kill
                  -9 during a backoff resumed after the restart (with the
                  restart it used counted), and without a store.
  locked          a second stepxd on the same state directory is refused
                  ("is in use by another process"); the first goes on.
  corrupt         a stepx.db of random bytes is refused ("damaged").
  not-stepx       another program's SQLite file is refused.
  newer-schema    a stepx.db with user_version 999 is refused ("newer
                  stepx").
  read-only       a stepx.db that cannot be written is refused (as root:
                  a read-only bind mount in a mount namespace of its own;
                  skipped where mounts are not allowed).
  full-disk       --state-max-bytes: submits past it fail with `storage`
                  ("no space"); the daemon answers wait and stats.

In every refusal stepxd exits 1 with a line "stepxd: ..." on stderr, and
stepx.db is byte for byte unchanged. Exit status: 0 all checks passed, 1
a check failed, 77 skipped (msgpack missing, or the case cannot run
here), 2 usage.
"""

import collections
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import durable  # noqa: E402
from durable import (FINAL, PROFILE, DurableCase, Job, Skipped,  # noqa: E402
                     answer_kind, outcome_of, random_job, seeded,
                     start_refused)
from hostile import (ConnClosed, DaemonStartError, ReadTimeout,  # noqa: E402
                     error_code, request)

WAIT_MS = int(PROFILE.t(30) * 1000)  # a wait's timeout_ms for a job that
                                     # is meant to finish


class Problems:
    """Failures of one kind, counted, with the first few described: a
    case over thousands of jobs prints one check per kind."""

    def __init__(self):
        self.by = collections.OrderedDict()

    def add(self, what, detail):
        self.by.setdefault(what, []).append(detail)

    def check(self, case, what, extra=""):
        got = self.by.get(what, [])
        case.check(what + extra, not got,
                   "%d times; first: %s" % (len(got), "; ".join(
                       str(x) for x in got[:5])) if got else "")


def pipelined(conn, reqs, timeout):
    """Sends [(op, fields)] in one write (from a thread, reading meanwhile)
    and returns the replies in order; a request that is not answered
    within timeout seconds, or before the connection closes, has
    {"no reply": ...} in its place (which no check takes for an answer)."""
    rids, frames = [], []
    for op, fields in reqs:
        rid = conn.next_id
        conn.next_id += 1
        rids.append(rid)
        frames.append(request(op, rid, **fields))
    want = set(rids)
    got = {}

    def writer():
        try:
            conn.send_raw(b"".join(frames))
        except OSError:
            pass

    w = threading.Thread(target=writer, daemon=True)
    w.start()
    why = "within %.0f s" % timeout
    deadline = time.monotonic() + timeout
    while want:
        try:
            m = conn.recv_frame(max(0.0, deadline - time.monotonic()))
        except ReadTimeout:
            break
        except ConnClosed as e:
            why = "the connection closed (%s)" % e
            break
        if "push" in m:
            conn.pushes.append(m)
        elif m.get("id") in want:
            want.discard(m["id"])
            got[m["id"]] = m
    w.join(timeout=1)
    return [got.get(r, {"no reply": why}) for r in rids]


def wait_all(conn, pids, timeout_ms=WAIT_MS):
    """Pipelined waits; {pid: reply}."""
    replies = pipelined(conn, [("wait", dict(pid=p, timeout_ms=timeout_ms))
                               for p in pids],
                        timeout_ms / 1000.0 + PROFILE.t(30))
    return dict(zip(pids, replies))


def submit_all(conn, fields_list):
    """Pipelined submits; the replies in order."""
    return pipelined(conn, [("submit", f) for f in fields_list],
                     PROFILE.t(60))


def attempts_of(reply):
    return reply.get("attempts")


# ------------------------------------------------------- crash rounds

CHUNKS = 4        # new jobs go in this many writes per round...
GAP_S = 0.05      # ...this far apart
KILL_MAX_S = 0.45  # the kill comes 0 to this many seconds into a round
RESUBMIT_SAMPLE = 5  # acknowledged keys sent again each round
ADDS_MAX = 40     # "add" messages to one tally job at most: its k-th
                  # (from 0) adds 2 ** k, so that its sum says which of
                  # them it counted


def _round(case, d, r, jobs, order, rng_jobs, rng_kill, rng_pick, probs,
           tally):
    """One round: start, submit (and wait, cancel, resubmit), kill -9 at a
    random moment, record what was answered."""
    t_start = time.monotonic()
    tally["start_wall"].append(time.time())
    try:
        d.start()
    except DaemonStartError as e:
        case.check("round %d: stepxd restarts on its state directory" % r,
                   False, str(e))
        return False
    tally["start_s"].append(time.monotonic() - t_start)
    c = d.connect(timeout=PROFILE.t(30))
    tags = {}

    def add(op, job, what, **fields):
        rid = c.next_id
        c.next_id += 1
        tags[rid] = (op, what, job)
        return request(op, rid, **fields)

    acked = [j for j in order if j.pid is not None]
    open_ = [j for j in acked if j.seen is None]
    first = []
    for j in order:
        if j.pid is None and j.sends > 0:
            j.sends += 1
            j.sent_rounds.append(r)
            first.append(add("submit", j, "again", **j.submit_fields()))
    for j in open_:
        if j.type == "echo":
            first.append(add("cancel", j, "cancel", pid=j.pid,
                             reason="the test is done with it"))
    for j in rng_pick.sample(acked, min(RESUBMIT_SAMPLE, len(acked))):
        first.append(add("submit", j, "check", **j.submit_fields()))
    # 1 to 3 "add" messages to each open tally job: the first in the
    # first write, the others in writes drawn among all (a kill may cut
    # those of the later ones before their answer, or before they are
    # written); a job's adds go out in the order of their values.
    later = [[] for _ in range(CHUNKS)]
    for j in open_:
        if j.type != "tally":
            continue
        n = min(rng_pick.randint(1, 3), ADDS_MAX - len(j.adds))
        for k in sorted([0] + [rng_pick.randint(0, CHUNKS)
                               for _ in range(n - 1)])[:n]:
            j.adds.append([1 << len(j.adds), r, None])
            (later[k - 1] if k else first).append(
                add("send", j, len(j.adds) - 1, to=j.pid, topic="add",
                    data=j.adds[-1][0]))
    for j in open_:
        first.append(add("wait", j, "wait", pid=j.pid, timeout_ms=1))
    chunks = [b"".join(first)]
    for k in range(CHUNKS):
        part = later[k]
        for _ in range(rng_jobs.randint(4, 16)):
            key = "r%03d-%03d" % (r, len(order))
            j = random_job(rng_jobs, key)
            jobs[key] = j
            order.append(j)
            j.sends = 1
            j.sent_rounds.append(r)
            part.append(add("submit", j, "new", **j.submit_fields()))
        chunks.append(b"".join(part))

    delay = rng_kill.uniform(0.0, KILL_MAX_S)
    tally["delays"].append(delay)
    stop = threading.Event()

    def writer():
        for k, data in enumerate(chunks):
            if k > 0 and stop.wait(GAP_S):
                return
            try:
                c.send_raw(data)
            except OSError:
                return

    w = threading.Thread(target=writer, daemon=True)
    d.kill_after(delay)
    w.start()
    replies = {}
    deadline = time.monotonic() + delay + PROFILE.t(10)
    while True:
        try:
            m = c.recv_frame(max(0.0, deadline - time.monotonic()))
        except ConnClosed:
            break
        except ReadTimeout:
            probs.add("the connection closes at the kill -9",
                      "round %d: still open %.0f s after" % (r,
                                                            PROFILE.t(10)))
            break
        if "push" not in m and m.get("id") in tags:
            replies[m["id"]] = m
    stop.set()
    rc = d.reap_crash()
    w.join(timeout=5)
    c.close()
    if rc != -signal.SIGKILL:
        probs.add("stepxd lives until each kill -9",
                  "round %d: exit status %s before the kill at %.3f s; log: "
                  "%s" % (r, rc, delay, d.log()[-300:]))

    for rid, (op, what, j) in tags.items():
        m = replies.get(rid)
        if m is None:
            continue
        if op == "submit":
            _submitted(j, what, m, r, probs, tally)
        elif op == "cancel":
            tally["cancel:" + (error_code(m) or "ok")] += 1
        elif op == "send":
            _added(j, what, m, r, probs, tally)
        elif op == "wait":
            kind = answer_kind(m)
            if kind == FINAL:
                j.seen = (outcome_of(m), attempts_of(m))
                j.seen_round = r
                bad = j.wrong(m)
                if bad:
                    probs.add("every acknowledged job reaches its right "
                              "outcome", "%s (%s): %s (round %d)"
                              % (j.describe(), j.pid, bad, r))
            elif kind == "timeout":
                j.alive.add(r)
            else:
                probs.add("wait on an acknowledged PID answers (its outcome "
                          "or timeout) in every round",
                          "%s (%s), round %d: %r" % (j.describe(), j.pid, r,
                                                     m))
    tally["round_s"].append(time.monotonic() - t_start)
    return True


def _submitted(j, what, m, r, probs, tally):
    """Records a submit's reply for job j."""
    if not m.get("ok"):
        probs.add("every submit is answered ok (or not at all, when the "
                  "kill cuts it)", "%s (%s, round %s): %r"
                  % (j.describe(), what, r, m))
        return
    pid, existing = m.get("pid"), m.get("existing") is True
    tally["submit:" + what + (":existing" if existing else "")] += 1
    if j.pid is None:
        if what == "new" and existing:
            probs.add("a key sent for the first time makes a new job (no "
                      "\"existing\")", "%s: %r" % (j.key, m))
        owner = tally["pids"].get(pid)
        if owner is not None and owner is not j:
            probs.add("no two keys share a PID", "%s and %s: %s"
                      % (owner.key, j.key, pid))
        tally["pids"][pid] = j
        j.pid = pid
        j.acked_round = r
        j.acked_new = not existing
        if existing:
            tally["committed_unacked"] += 1
        return
    if pid != j.pid:
        probs.add("a key always answers the same PID (none twice)",
                  "%s: first %s, then %s (round %s)" % (j.key, j.pid, pid, r))
    elif not existing:
        probs.add("a key sent again answers \"existing\": true",
                  "%s (round %s): %r" % (j.key, r, m))


ADD_ANSWERED = ("a send (\"add\") to a tally job is answered ok, or "
                "not_found / closed once it has finished (and never ok "
                "after that)")
TALLY_SUM = ("a tally's sum counts every \"add\" answered ok, once "
             "(but those delivered during its last step: the ok adds "
             "just before its first not_found / closed, same round); none "
             "answered with an error; of the unanswered ones some")
TALLY_INIT = ("a tally's init_ms falls in the daemon run that made it, or "
              "a later one")
TALLY_RESUMED = ("a tally whose init ran before the crash that ended the "
                 "round that made it ends with attempts 1 (it resumed from "
                 "a checkpoint, or had finished)")
TALLY_RERUN = ("a tally run again from init (init_ms after a later start) "
               "ends with attempts 2 or more: 1 and one per start that "
               "found no checkpoint of it")


def _added(j, i, m, r, probs, tally):
    """Records the reply to j's i-th "add" (a send to a tally job)."""
    code = "ok" if m.get("ok") else error_code(m)
    j.adds[i][2] = code
    tally["add:" + str(code)] += 1
    gone = [a for a in j.adds[:i] if a[2] in ("not_found", "closed")]
    if code == "ok":
        j.alive.add(r)
        if gone:
            probs.add(ADD_ANSWERED, "%s (%s): add %d answered ok in round %d "
                      "after add %d was answered %s in round %d"
                      % (j.describe(), j.pid, j.adds[i][0], r, gone[0][0],
                         gone[0][2], gone[0][1]))
    elif code not in ("not_found", "closed"):
        probs.add(ADD_ANSWERED, "%s (%s), round %d: %r"
                  % (j.describe(), j.pid, r, m))


CHECKS = (
    "every submit is answered ok (or not at all, when the kill cuts it)",
    "stepxd lives until each kill -9",
    "the connection closes at the kill -9",
    "a key sent for the first time makes a new job (no \"existing\")",
    "a key always answers the same PID (none twice)",
    "a key sent again answers \"existing\": true",
    "no two keys share a PID",
    "wait on an acknowledged PID answers (its outcome or timeout) in every "
    "round",
    "every acknowledged job reaches its right outcome",
    "wait answers attempts, an int >= 1",
    "a second wait (another connection) answers the same outcome and "
    "attempts",
    "an outcome answered before a crash is the one answered at the end",
    "a job whose outcome was answered does not run again after a crash "
    "(attempts unchanged)",
    ADD_ANSWERED,
    TALLY_SUM,
    TALLY_INIT,
    TALLY_RESUMED,
    TALLY_RERUN)
TALLY_CHECKS = (ADD_ANSWERED, TALLY_SUM, TALLY_INIT, TALLY_RESUMED,
                TALLY_RERUN)


def _report(case, probs, n, n_tally):
    """One check for each kind of failure crash-rounds looks for."""
    for what in CHECKS:
        probs.check(case, what, " (%d tally jobs)" % n_tally
                    if what in TALLY_CHECKS else " (%d jobs)" % n)
    for what in probs.by:
        if what not in CHECKS:
            probs.check(case, what)


def case_crash_rounds(case, exe):
    rounds = durable.rounds_default()
    seed, rng = seeded("STEPX_DURABLE_SEED")
    rng_jobs, rng_kill, rng_pick = (random.Random(rng.random())
                                    for _ in range(3))
    case.figure("seed", "%d (STEPX_DURABLE_SEED=%d repeats the jobs and the "
                "kill moments)" % (seed, seed))
    case.figure("rounds", "%d (STEPX_DURABLE_ROUNDS)" % rounds)
    tmp = case.tmpdir()
    d = case.state_daemon(exe, tmp, start=False)
    jobs, order = {}, []
    probs = Problems()
    tally = collections.defaultdict(int)
    tally["delays"], tally["round_s"], tally["start_s"] = [], [], []
    tally["start_wall"] = []  # time.time() as each run's stepxd started
    tally["pids"] = {}
    t0 = time.monotonic()
    for r in range(rounds):
        if not _round(case, d, r, jobs, order, rng_jobs, rng_kill, rng_pick,
                      probs, tally):
            _report(case, probs, sum(j.pid is not None for j in order),
                    sum(j.pid is not None and j.type == "tally"
                        for j in order))
            return
    t_rounds = time.monotonic() - t0
    case.figure("rounds took", "%.1f s (per round: median %.2f s, worst "
                "%.2f s; restart median %.3f s, worst %.3f s)"
                % (t_rounds, statistics.median(tally["round_s"]),
                   max(tally["round_s"]), statistics.median(tally["start_s"]),
                   max(tally["start_s"])))
    case.figure("kill moments", "%.3f to %.3f s after a round's first "
                "write, median %.3f s"
                % (min(tally["delays"]), max(tally["delays"]),
                   statistics.median(tally["delays"])))

    # The end: one more start, no crash.
    tally["start_wall"].append(time.time())
    d.start()
    c = d.connect(timeout=PROFILE.t(60))
    late = [j for j in order if j.pid is None]
    for j in late:
        j.sent_rounds.append(rounds)
    for j, m in zip(late, submit_all(c, [j.submit_fields() for j in late])):
        _submitted(j, "again", m, rounds, probs, tally)
    case.check("every job is acknowledged in the end (the ones the kills "
               "cut, sent again without a crash)",
               all(j.pid is not None for j in order),
               "%d not" % sum(j.pid is None for j in order)
               if any(j.pid is None for j in order) else "")
    acked = [j for j in order if j.pid is not None]
    for j in acked:
        if j.type == "echo":
            m = c.call("cancel", pid=j.pid, reason="the test is done with it")
            tally["cancel:" + (error_code(m) or "ok")] += 1
    first = wait_all(c, [j.pid for j in acked])
    c2 = d.connect(timeout=PROFILE.t(60))
    second = wait_all(c2, [j.pid for j in acked])
    for j in acked:
        m = first[j.pid]
        if answer_kind(m) != FINAL:
            probs.add("every acknowledged job reaches its right outcome",
                      "%s (%s): wait answered %r (no job may be lost)"
                      % (j.describe(), j.pid, m))
            continue
        bad = j.wrong(m)
        if bad:
            probs.add("every acknowledged job reaches its right outcome",
                      "%s (%s): %s" % (j.describe(), j.pid, bad))
        j.final = (outcome_of(m), attempts_of(m))
        a = attempts_of(m)
        if not isinstance(a, int) or isinstance(a, bool) or a < 1:
            probs.add("wait answers attempts, an int >= 1",
                      "%s (%s): %r" % (j.describe(), j.pid, m))
        if (outcome_of(second[j.pid]), attempts_of(second[j.pid])) != \
                j.final:
            probs.add("a second wait (another connection) answers the same "
                      "outcome and attempts", "%s: %r, then %r"
                      % (j.key, j.final, second[j.pid]))
        if j.seen is not None and j.seen[0] != j.final[0]:
            probs.add("an outcome answered before a crash is the one "
                      "answered at the end", "%s: round %d %r, end %r"
                      % (j.key, j.seen_round, j.seen, j.final))
        elif j.seen is not None and j.seen[1] != j.final[1]:
            probs.add("a job whose outcome was answered does not run again "
                      "after a crash (attempts unchanged)",
                      "%s (%s): outcome answered in round %d with attempts "
                      "%r, at the end attempts %r"
                      % (j.describe(), j.pid, j.seen_round, j.seen[1],
                         j.final[1]))
    again = submit_all(c, [j.submit_fields() for j in acked])
    for j, m in zip(acked, again):
        _submitted(j, "check", m, "end", probs, tally)

    # Nothing runs twice: once every wait is answered, nothing is live
    # (children of fanouts that ran again finish on their own).
    deadline = time.monotonic() + PROFILE.t(10)
    while True:
        live = c.call("ps", limit=100).get("processes", [])
        if not live or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    case.check("no process is left running once every job has its outcome",
               not live, "%d live after %.0f s, e.g. %r"
               % (len(live), PROFILE.t(10), live[:3]) if live else "")

    tallied = _tally_ends(acked, tally["start_wall"], probs)
    _report(case, probs, len(acked), tallied["jobs"])
    if rounds >= 10:
        case.check("a tally job resumed from its checkpoint across a crash "
                   "(init before the kill, attempts 1, seen running after "
                   "the restart) at least once in %d rounds" % rounds,
                   tallied["resumed"] >= 1, "" if tallied["resumed"] else
                   "none of %d tally jobs" % tallied["jobs"])
    else:
        case.note("under 10 rounds: no tally job has to resume across a "
                  "crash (%d did)" % tallied["resumed"])

    reran = [j for j in acked if j.final and isinstance(j.final[1], int)
             and j.final[1] > 1]
    by_type = collections.Counter(j.type for j in acked)
    rerun_type = collections.Counter(j.type for j in reran)
    case.figure("jobs acknowledged", "%d (%s)" % (len(acked), ", ".join(
        "%s %d" % kv for kv in sorted(by_type.items()))))
    case.figure("jobs re-run (attempts > 1)", "%d (%s); most attempts %s"
                % (len(reran), ", ".join("%s %d" % kv for kv in
                                         sorted(rerun_type.items())),
                   max([j.final[1] for j in reran], default=1)))
    case.figure("submits sent again (a kill had cut the first) and answered",
                "%d, of which %d answered \"existing\" (committed, the reply "
                "lost)" % (tally["submit:again"] +
                           tally["submit:again:existing"],
                           tally["committed_unacked"]))
    case.figure("outcomes seen during the rounds",
                "%d (then a crash came)" % sum(j.seen is not None
                                               for j in acked))
    case.figure("tally jobs", "%d: %d crossed a crash and resumed from a "
                "checkpoint (init before the crash, attempts 1, seen running "
                "after the restart), %d ran again from init (attempts > 1), "
                "%d made in a round not known (their key went out in more "
                "than one before it answered \"existing\"): attempts not "
                "checked" % (tallied["jobs"], tallied["resumed"],
                             tallied["rerun"], tallied["unknown"]))
    case.figure("\"add\" sends to tally jobs", "%s; of the %d unanswered, "
                "%d counted in a sum; %d answered ok during a tally's last "
                "step and not read (its next add answered not_found or "
                "closed)" % (", ".join(
                    "%s %d" % (k[4:], v) for k, v in sorted(tally.items())
                    if k.startswith("add:")) or "none",
                    tallied["cut"], tallied["cut_counted"],
                    tallied["late_unread"]))
    case.figure("cancels of echo jobs", ", ".join(
        "%s %d" % (k[7:], v) for k, v in sorted(tally.items())
        if k.startswith("cancel:")))
    case.figure("time", "%.1f s in all" % (time.monotonic() - t0))
    c.close()
    c2.close()
    rc = d.stop()
    case.check("stepxd stops cleanly at the end (exit status 0)", rc == 0,
               "" if rc == 0 else "exit status %s" % rc)


def _run_of(ms, starts):
    """The daemon run (an index of starts, time.time() as each run's stepxd
    started) in which a wall-clock time in whole ms (floored) falls; -1
    before the first. An init of run q is at or after starts[q] (its
    daemon takes well over a ms from there to any init); one of run q - 1
    came before the kill, before starts[q]."""
    q = -1
    for i, t in enumerate(starts):
        if t * 1000.0 <= ms:
            q = i
    return q


def _tally_ends(acked, starts, probs):
    """What crash-rounds checks of each tally job's end: its sum against
    the "add" messages sent to it, and its init_ms and attempts against
    the run that made it. Returns figures."""
    out = collections.Counter()
    for j in acked:
        if j.type != "tally":
            continue
        out["jobs"] += 1
        out["cut"] += sum(a[2] is None for a in j.adds)
        if j.final is None or j.final[0][0] != "ok" or \
                j.wrong({"ok": True, "result": j.final[0][1]}):
            continue  # "every acknowledged job reaches its right outcome"
        (_n, init_ms, got), a = j.final[0][1], j.final[1]
        acked_bits = sum(v for v, _r, ans in j.adds if ans == "ok")
        cut_bits = sum(v for v, _r, ans in j.adds if ans is None)
        out["cut_counted"] += bin(max(got, 0) & cut_bits).count("1")
        # An add delivered while the tally's last step runs is answered
        # ok (delivered, docs/DURABILITY.md) and never read: the job ends
        # without it. Only the ok adds sent just before the first one
        # answered not_found / closed, in the same round, can be such:
        # several when the store delivered them together (one commit).
        late = 0
        for i, (v, r, ans) in enumerate(j.adds):
            if ans in ("not_found", "closed"):
                k = i - 1
                while k >= 0 and j.adds[k][2] == "ok" and j.adds[k][1] == r:
                    late |= j.adds[k][0]
                    k -= 1
                break
        if got >= 0 and late & ~got:
            out["late_unread"] += bin(late & ~got).count("1")
        need = acked_bits & ~late
        if got < 0 or got & need != need or \
                got & ~(acked_bits | cut_bits):
            probs.add(TALLY_SUM, "%s (%s): sum %d; answered ok %s (sum %d), "
                      "unanswered %s (sum %d), answered an error %s; acked "
                      "and not counted: %s; counted and not acked nor "
                      "unanswered: %s"
                      % (j.describe(), j.pid, got,
                         [(v, r) for v, r, ans in j.adds if ans == "ok"],
                         acked_bits,
                         [(v, r) for v, r, ans in j.adds if ans is None],
                         cut_bits,
                         [(v, r, ans) for v, r, ans in j.adds
                          if ans not in ("ok", None)],
                         [v for v, _r, ans in j.adds
                          if ans == "ok" and not got & v],
                         "0x%x" % (max(got, 0) & ~(acked_bits | cut_bits))))
        if not isinstance(a, int) or isinstance(a, bool):
            continue  # "wait answers attempts, an int >= 1"
        if a > 1:
            out["rerun"] += 1
        # The round that made it: its first answered submit's, or, when
        # that answered "existing", the one round before it in which its
        # key went out (a kill cut that one's answer after it was stored).
        made = [j.acked_round] if j.acked_new else sorted(
            {x for x in j.sent_rounds if x < j.acked_round})
        if len(made) != 1:
            out["unknown"] += 1
            continue
        r = made[0]
        q = _run_of(init_ms, starts)
        if q < r:
            probs.add(TALLY_INIT, "%s (%s): init_ms %d; the run that made "
                      "it (round %s) started at %.0f"
                      % (j.describe(), j.pid, init_ms, r, starts[r] * 1000))
        elif q == r:
            if a != 1:
                probs.add(TALLY_RESUMED, "%s (%s): init_ms %d, before the "
                          "start after the round that made it, %d (%.0f); "
                          "attempts %d" % (j.describe(), j.pid, init_ms, r,
                                           starts[r + 1] * 1000
                                           if r + 1 < len(starts) else -1,
                                           a))
            elif any(p > r for p in j.alive):
                out["resumed"] += 1
        elif a != q - r + 1:
            probs.add(TALLY_RERUN, "%s (%s): made in round %d, init_ms "
                      "%d in the run started at %.0f (run %d): attempts "
                      "%d, not %d" % (j.describe(), j.pid, r, init_ms,
                                      starts[q] * 1000, q, a, q - r + 1))
    return out


# ------------------------------------------------------- idempotent key

def case_idempotent_key(case, exe):
    tmp = case.tmpdir()
    d = case.state_daemon(exe, tmp)
    c = d.connect()
    r1 = c.call("submit", type="counter", method="run", input=[7],
                key="order-7")
    case.check("submit with a new key: a PID, no \"existing\": true",
               r1.get("ok") and isinstance(r1.get("pid"), str)
               and r1.get("existing") is not True, repr(r1))
    a = r1.get("pid")
    r2 = c.call("submit", type="counter", method="run", input=[7],
                key="order-7")
    case.check("the same key again: the same PID, \"existing\": true",
               r2.get("ok") and r2.get("pid") == a
               and r2.get("existing") is True, repr(r2))
    r3 = c.call("submit", type="counter", method="run", input=[9],
                key="order-7")
    case.check("the same key with another input: the earlier job's PID, "
               "\"existing\": true", r3.get("ok") and r3.get("pid") == a
               and r3.get("existing") is True, repr(r3))
    r4 = c.call("submit", type="counter", method="run", input=[8],
                key="order-8")
    b = r4.get("pid")
    case.check("another key: another PID", r4.get("ok") and b != a
               and r4.get("existing") is not True, repr(r4))
    u = "clé ü/1"
    r5 = c.call("submit", type="counter", method="run", input=[5], key=u)
    upid = r5.get("pid")
    case.check("a UTF-8 key is taken", r5.get("ok"), repr(r5))
    n1 = c.call("submit", type="counter", method="run", input=[1])
    n2 = c.call("submit", type="counter", method="run", input=[1])
    case.check("submits without a key: a new job each",
               n1.get("ok") and n2.get("ok") and n1["pid"] != n2["pid"]
               and n1.get("existing") is not True
               and n2.get("existing") is not True, "%r, %r" % (n1, n2))

    # A race: 2 x 16 submits of one new key, pipelined on two connections.
    c2 = d.connect()
    out = {}

    def burst(conn, name):
        f = dict(type="sleeper", method="run", input=[10], key="race")
        out[name] = submit_all(conn, [f] * 16)

    ts = [threading.Thread(target=burst, args=(conn, name))
          for conn, name in ((c, "a"), (c2, "b"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    race = out.get("a", []) + out.get("b", [])
    pids = {m.get("pid") for m in race}
    fresh = [m for m in race if m.get("existing") is not True]
    case.figure("race on one key", "%d replies, PIDs %s, %d without "
                "\"existing\"" % (len(race), sorted(map(str, pids)),
                                  len(fresh)))
    case.check("32 racing submits of one key on two connections: all ok, "
               "one PID, exactly one of them new",
               len(race) == 32 and all(m.get("ok") for m in race)
               and len(pids) == 1 and len(fresh) == 1,
               "%r" % [m for m in race if not m.get("ok")][:3])
    rpid = race[0].get("pid") if race else None
    w = wait_all(c, [a, b, rpid, upid])
    case.check("the key's job ran with the first submit's input (7)",
               w[a].get("result") == 7, repr(w[a]))
    case.check("the other key's job: 8", w[b].get("result") == 8,
               repr(w[b]))
    case.check("the raced key's job ran once: 10", w[rpid].get("result") == 10
               and w[rpid].get("attempts") == 1, repr(w[rpid]))
    c.close()
    c2.close()

    want = {"order-7": (a, 7), "order-8": (b, 8), "race": (rpid, 10),
            u: (upid, 5)}
    for how in ("a clean stop (SIGTERM)", "kill -9"):
        if how == "kill -9":
            # A keyed job still running at the kill: its key answers the
            # same PID after the restart, and the job runs to its end.
            c = d.connect()
            m = c.call("submit", type="sleeper", method="run", input=[800],
                       key="slow")
            want["slow"] = (m.get("pid"), 800)
            c.close()
        rc = d.stop() if how.startswith("a clean") else d.crash()
        case.figure("stepxd stopped by %s" % how, "exit status %s" % rc)
        d.start()
        c = d.connect()
        keys = list(want)
        replies = submit_all(c, [dict(type="counter", method="run",
                                      input=[1], key=k) for k in keys])
        for k, m in zip(keys, replies):
            case.check("after %s: key %r answers its PID, \"existing\": true"
                       % (how, k), m.get("ok") and m.get("pid") == want[k][0]
                       and m.get("existing") is True,
                       "want %s; got %r" % (want[k][0], m))
        w = wait_all(c, [want[k][0] for k in keys])
        for k in keys:
            pid, result = want[k]
            case.check("after %s: wait on key %r's PID answers %r"
                       % (how, k, result), w[pid].get("result") == result,
                       repr(w[pid]))
        c.close()


# ------------------------------------------------------- outcomes survive

def _outcome_jobs(tag):
    return [Job(tag + "-c0", "counter", "run", [0], ("ok", 0)),
            Job(tag + "-c3", "counter", "run", [3], ("ok", 3)),
            Job(tag + "-c20k", "counter", "run", [20000], ("ok", 20000)),
            Job(tag + "-fail", "fail", "run", ["card declined"],
                ("failed", "card declined")),
            Job(tag + "-exec", "exec", "run", [["/bin/echo", "survived"]],
                ("exec", b"survived\n")),
            Job(tag + "-fan", "fanout", "run", [3, "counter", "run", [2]],
                ("ok", [2, 2, 2])),
            Job(tag + "-sleep", "sleeper", "run", [20], ("ok", 20)),
            Job(tag + "-echo", "echo", "serve", [], ("ok", 0))]


def _run_to_end(case, c, jobs, what):
    """Submits, cancels the echo, waits: {pid: wait reply}."""
    for j, m in zip(jobs, submit_all(c, [j.submit_fields() for j in jobs])):
        j.pid = m.get("pid")
    for j in jobs:
        if j.type == "echo":
            c.call("cancel", pid=j.pid)
    w = wait_all(c, [j.pid for j in jobs])
    for j in jobs:
        bad = j.wrong(w[j.pid])
        case.check("%s: %s finishes right, attempts 1" % (what, j.describe()),
                   not bad and w[j.pid].get("attempts") == 1,
                   bad or repr(w[j.pid]))
    return w


def _same_outcomes(case, c, jobs, before, how):
    after = wait_all(c, [j.pid for j in jobs], timeout_ms=2000)
    for j in jobs:
        m0, m1 = before[j.pid], after[j.pid]
        case.check("after %s: wait on %s (%s) answers the same outcome"
                   % (how, j.key, j.pid), outcome_of(m0) == outcome_of(m1),
                   "before %r; after %r" % (m0, m1))
        case.check("after %s: %s: the same steps and attempts (it did not "
                   "run again once its outcome was answered)" % (how, j.key),
                   m0.get("steps") == m1.get("steps")
                   and m0.get("attempts") == m1.get("attempts"),
                   "before %r; after %r" % (m0, m1))


def case_outcomes_survive(case, exe):
    tmp = case.tmpdir()
    d = case.state_daemon(exe, tmp)
    c = d.connect()
    first = _outcome_jobs("a")
    w1 = _run_to_end(case, c, first, "first run")
    c.close()
    rc = d.stop()
    case.figure("clean stop", "exit status %s" % rc)
    d.start()
    c = d.connect()
    _same_outcomes(case, c, first, w1, "a clean restart")
    # A second set, finished right before a kill -9 (no pause: an outcome
    # that wait has answered is final).
    second = _outcome_jobs("b")
    w2 = _run_to_end(case, c, second, "second run")
    c.close()
    rc = d.crash()
    case.figure("kill -9", "exit status %s" % rc)
    d.start()
    c = d.connect()
    _same_outcomes(case, c, first, w1, "a clean restart and a kill -9")
    _same_outcomes(case, c, second, w2, "a kill -9")
    c.close()

    # --keep-outcomes 5: the last five of eight survive a restart.
    tmp2 = case.tmpdir()
    k = case.state_daemon(exe, tmp2, flags=["--keep-outcomes", "5"])
    c = k.connect()
    pids = []
    for n in range(8):
        p = c.call("submit", type="counter", method="run", input=[n])["pid"]
        c.call("wait", pid=p, timeout_ms=WAIT_MS)
        pids.append(p)
    c.close()
    k.stop()
    k.start()
    c = k.connect()
    w = wait_all(c, pids, timeout_ms=2000)
    for n, p in enumerate(pids):
        if n >= 3:
            case.check("--keep-outcomes 5, after a restart: job %d of 8 "
                       "answers its outcome" % (n + 1),
                       w[p].get("result") == n, repr(w[p]))
        else:
            case.check("--keep-outcomes 5, after a restart: job %d of 8 "
                       "is no longer kept (not_found)" % (n + 1),
                       error_code(w[p]) == "not_found", repr(w[p]))
    c.close()


# ------------------------------------------------------- checkpoint resume

def case_checkpoint_resume(case, exe):
    """A tally [200, 5] (about a second: 200 steps of a 5 ms sleep, a
    checkpoint after each) killed -9 after 60 steps and 20 "add" messages,
    each answered ok once stored, resumes from its last checkpoint: ps
    right after the restart shows it no more than a step behind where ps
    saw it before the kill, and it finishes with [200, init_ms, 465]
    (1 + ... + 30: the adds 21..30 go after the restart) with the init_ms
    of its first run and attempts 1."""
    n, ms, at = 200, 5, 60
    tmp = case.tmpdir()
    d = case.state_daemon(exe, tmp)
    c = d.connect()
    t_submit = time.time()
    r = c.call("submit", type="tally", method="run", input=[n, ms])
    t_acked = time.time()
    pid = r.get("pid")
    case.check("submit tally [%d, %d]: ok, a PID" % (n, ms),
               r.get("ok") and isinstance(pid, str), repr(r))
    if not isinstance(pid, str):
        return

    def entry(conn):
        for p in conn.call("ps", limit=100).get("processes", []):
            if p.get("pid") == pid:
                return p
        return None

    e = None
    deadline = time.monotonic() + PROFILE.t(10)
    while time.monotonic() < deadline:
        e = entry(c)
        if e is None or e.get("steps", 0) >= at:
            break
        time.sleep(0.005)
    case.check("ps shows the tally running with %d steps or more" % at,
               e is not None and e.get("steps", 0) >= at, repr(e))
    before = [c.call("send", to=pid, topic="add", data=v)
              for v in range(1, 21)]
    case.check("\"add\" 1 to 20 before the kill, one at a time: each "
               "answered ok (once stored)",
               all(m.get("ok") for m in before),
               "" if all(m.get("ok") for m in before) else
               repr([m for m in before if not m.get("ok")][:3]))
    e = entry(c)
    rc = d.crash()
    t_kill = time.time()
    c.close()
    s0 = e.get("steps") if e else None
    case.figure("ps right before the kill -9", repr(e))
    case.figure("kill -9", "exit status %s" % rc)
    case.check("ps right before the kill still lists the tally (it was "
               "running at the kill)", isinstance(s0, int), repr(e))
    if not isinstance(s0, int):
        return
    d.start()
    t_restart = time.monotonic()
    c = d.connect()
    e = entry(c)
    case.figure("ps right after the restart", repr(e))
    case.check("ps right after the restart: the tally under its PID with "
               "%d steps or more (%d before the kill, less one whose "
               "checkpoint the kill may have cut): it resumed, not from 0"
               % (s0 - 1, s0), e is not None
               and e.get("steps", -1) >= s0 - 1, repr(e))
    case.check("ps right after the restart: attempts 1",
               e is not None and e.get("attempts") == 1, repr(e))
    after = [c.call("send", to=pid, topic="add", data=v)
             for v in range(21, 31)]
    case.check("\"add\" 21 to 30 after the restart: each answered ok",
               all(m.get("ok") for m in after),
               "" if all(m.get("ok") for m in after) else
               repr([m for m in after if not m.get("ok")][:3]))
    w = c.call("wait", pid=pid, timeout_ms=WAIT_MS)
    case.figure("wait", "%r, %.2f s after the restart"
                % (w, time.monotonic() - t_restart))
    res = w.get("result")
    good = w.get("ok") and isinstance(res, list) and len(res) == 3
    case.check("wait: [%d, init_ms, 465], every add (1..30) counted once"
               % n, good and res[0] == n and res[2] == 465, repr(w))
    init_ms = res[1] if good else None
    lo, hi = int(t_submit * 1000), t_acked * 1000
    case.check("init_ms is its first run's: between the submit and its "
               "answer (%d to %.0f), before the kill (%.0f)"
               % (lo, hi, t_kill * 1000), isinstance(init_ms, int)
               and lo <= init_ms <= hi, "init_ms %r" % (init_ms,))
    case.check("wait: attempts 1 (init did not run again)",
               w.get("attempts") == 1, repr(w))
    c.close()


# ------------------------------------------------------- pid stays

def case_pid_stays(case, exe):
    tmp = case.tmpdir()
    d = case.state_daemon(exe, tmp, flags=["--sync", "full"])
    c = d.connect()
    ms = 1500
    sp = c.call("submit", type="sleeper", method="run", input=[ms])["pid"]
    ep = c.call("submit", type="echo", method="serve", input=[])["pid"]
    cp = c.call("submit", type="counter", method="run", input=[5])["pid"]
    done = c.call("wait", pid=cp, timeout_ms=WAIT_MS)
    time.sleep(0.3)
    w = c.call("wait", pid=sp, timeout_ms=1)
    case.check("the sleeper is still running before the kill",
               error_code(w) == "timeout", repr(w))
    case.figure("PIDs before the kill", "sleeper %s, echo %s, counter %s"
                % (sp, ep, cp))
    c.close()
    rc = d.crash()
    case.figure("kill -9", "exit status %s" % rc)
    t_restart = time.monotonic()
    d.start()
    c = d.connect()
    live = {p["pid"] for p in c.call("ps", limit=100).get("processes", [])}
    case.check("after the restart, ps lists the sleeper and the echo under "
               "their old PIDs", sp in live and ep in live,
               "live: %s" % sorted(live))
    w = c.call("wait", pid=sp, timeout_ms=WAIT_MS)
    took = time.monotonic() - t_restart
    case.figure("wait on the old sleeper PID", "%r after %.2f s" % (w, took))
    case.check("wait on the sleeper's old PID answers %d, attempts 2" % ms,
               w.get("result") == ms and w.get("attempts") == 2, repr(w))
    case.check("it ran again from init: the whole sleep after the restart "
               "(%.2f s >= %.2f s)" % (took, ms / 1000), took >= ms / 1000)
    s = c.call("send", to=ep, topic="ping", data={"n": 1})
    push = None
    deadline = time.monotonic() + PROFILE.t(10)
    while push is None and time.monotonic() < deadline:
        while c.pushes:
            m = c.pushes.popleft()
            if m.get("push") == "message" and m.get("from") == ep:
                push = m
        if push is None:
            c.poll_closed(0.05)
    case.check("send to the echo's old PID: ok, and it echoes",
               s.get("ok") and push is not None
               and push.get("data") == {"n": 1}, "send %r; push %r"
               % (s, push))
    k = c.call("cancel", pid=ep, reason="done")
    case.check("cancel on the echo's old PID: ok", k.get("ok"), repr(k))
    w = c.call("wait", pid=ep, timeout_ms=WAIT_MS)
    case.check("the echo finishes with 1 (one message echoed), attempts 2",
               w.get("result") == 1 and w.get("attempts") == 2, repr(w))
    w = c.call("wait", pid=cp, timeout_ms=2000)
    case.check("the counter that had finished: result 5, attempts 1, as "
               "before", w.get("result") == 5 and w.get("attempts") == 1
               and w.get("steps") == done.get("steps"),
               "before %r; after %r" % (done, w))
    n = c.call("submit", type="counter", method="run", input=[1])
    case.check("a job submitted after the restart gets a PID of its own",
               n.get("ok") and n.get("pid") not in (sp, ep, cp), repr(n))
    c.close()


def case_restart_policy(case, exe):
    """Restart policies over the protocol: on-failure up to the limit
    (restart_limit with the last failure, attempts), ps while a job waits
    (restarting, attempts, restart_in_ms, last_error), bad fields refused,
    a kill -9 in the middle of a backoff resumed after the restart (the
    job still waits, then runs; its used restart counts), and keys refused
    on an --ephemeral daemon."""
    tmp = case.tmpdir()
    d = case.state_daemon(exe, tmp)
    c = d.connect()
    r = c.call("submit", type="fail", method="run", input=["nope"],
               restart="on-failure", max_restarts=2, backoff_min_ms=20,
               backoff_max_ms=40)
    w = c.call("wait", pid=r["pid"], timeout_ms=WAIT_MS)
    case.check("on-failure, max_restarts 2: restart_limit after 3 attempts, "
               "with the last failure's message",
               error_code(w) == "restart_limit" and w.get("attempts") == 3
               and "nope" in (w.get("error") or {}).get("message", ""),
               repr(w))
    for bad, why in ((dict(restart="sometimes"), "restart"),
                     (dict(max_restarts=3), "restart"),
                     (dict(restart="always", backoff_min_ms=50,
                           backoff_max_ms=10), "backoff_min_ms"),
                     (dict(restart="always", window_ms=0), "window_ms")):
        b = c.call("submit", type="counter", method="run", input=[1], **bad)
        case.check("a bad policy %r: bad_request naming %s" % (bad, why),
                   error_code(b) == "bad_request"
                   and why in (b.get("error") or {}).get("message", ""),
                   repr(b))
    r = c.call("submit", type="fail", method="run", input=["later"],
               restart="on-failure", max_restarts=1, backoff_min_ms=1500,
               backoff_max_ms=1500)
    pid = r["pid"]
    entry = None
    deadline = time.monotonic() + PROFILE.t(5)
    while entry is None and time.monotonic() < deadline:
        for p in c.call("ps", limit=100).get("processes", []):
            if p["pid"] == pid and p.get("state") == "restarting":
                entry = p
        time.sleep(0.02)
    case.check("ps shows the job restarting: attempts 1, restart_in_ms, "
               "last_error", entry is not None and entry.get("attempts") == 1
               and 0 <= entry.get("restart_in_ms", -1) <= 1501
               and "later" in entry.get("last_error", ""), repr(entry))
    st = c.call("stats").get("stats", {})
    case.check("stats: restarting 1, and the store's commits and records",
               st.get("restarting") == 1 and st.get("store_commits", 0) >= 1
               and st.get("store_records", 0) >= st.get("store_commits", 0)
               and st.get("store_failed") == 0, repr(
                   {k: st.get(k) for k in ("restarting", "store_commits",
                                           "store_records", "store_failed")}))
    time.sleep(0.2)  # the restart's record is committed by now
    c.close()
    d.crash()
    d.start()
    t0 = time.monotonic()
    c = d.connect()
    entry = None
    for p in c.call("ps", limit=100).get("processes", []):
        if p["pid"] == pid:
            entry = p
    case.check("after a kill -9 in the backoff the job still waits for its "
               "restart (not run at once)", entry is not None
               and entry.get("state") == "restarting"
               and 0 < entry.get("restart_in_ms", -1) <= 1501, repr(entry))
    w = c.call("wait", pid=pid, timeout_ms=WAIT_MS)
    took = time.monotonic() - t0
    case.figure("the resumed backoff", "%.2f s after the restart" % took)
    case.check("then it runs once more and its restart counts: "
               "restart_limit at attempt 2",
               error_code(w) == "restart_limit" and w.get("attempts") == 2,
               repr(w))
    c.close()
    e = case.own(durable.hostile.Daemon(exe, tmpdir=tmp,
                                socket_path=os.path.join(tmp, "eph.sock")))
    e.start()
    c = e.connect()
    k = c.call("submit", type="counter", method="run", input=[1], key="k")
    case.check("a key on an --ephemeral daemon: bad_request",
               error_code(k) == "bad_request", repr(k))
    s = c.call("submit", type="fail", method="run", input=["x"],
               restart="always", max_restarts=1, backoff_min_ms=1,
               backoff_max_ms=1)
    w = c.call("wait", pid=s["pid"], timeout_ms=WAIT_MS)
    case.check("restart policies work without a store too",
               error_code(w) == "restart_limit" and w.get("attempts") == 2,
               repr(w))
    c.close()


# ------------------------------------------------------- refusals

def _store_with_jobs(case, exe, tmp):
    """A real store: one daemon run that finished a keyed job; returns
    (state dir, that job's PID)."""
    d = case.state_daemon(exe, tmp)
    c = d.connect()
    p = c.call("submit", type="counter", method="run", input=[4],
               key="before")["pid"]
    w = c.call("wait", pid=p, timeout_ms=WAIT_MS)
    case.check("a first daemon finishes a job (counter 4)",
               w.get("result") == 4, repr(w))
    c.close()
    rc = d.stop()
    case.check("the first daemon stops cleanly", rc == 0,
               "exit status %s" % rc)
    return d.state_dir, p


def _still_there(case, exe, tmp, pid, what):
    """A normal start on the same store answers the earlier job."""
    d = case.state_daemon(exe, tmp)
    c = d.connect()
    w = c.call("wait", pid=pid, timeout_ms=2000)
    case.check("%s: a daemon started normally afterwards answers the "
               "earlier job (4)" % what, w.get("result") == 4, repr(w))
    c.close()
    d.stop()


def case_locked(case, exe):
    tmp = case.tmpdir()
    a = case.state_daemon(exe, tmp)
    c = a.connect()
    p = c.call("submit", type="counter", method="run", input=[4])["pid"]
    c.call("wait", pid=p, timeout_ms=WAIT_MS)
    case.check("the state directory holds stepx.db and the lock file",
               os.path.exists(a.db_path)
               and os.path.exists(os.path.join(a.state_dir, "lock")),
               "%s" % os.listdir(a.state_dir))
    time.sleep(0.3)  # whatever the first daemon commits after the answer
    start_refused(case, exe, tmp, a.state_dir, ["is in use by another "
                                                "process"],
                  "a second daemon on the same directory",
                  watch=[a.db_path])
    q = c.call("submit", type="counter", method="run", input=[3])
    w = c.call("wait", pid=q.get("pid"), timeout_ms=WAIT_MS)
    case.check("the first daemon goes on: submit + wait answer 3",
               w.get("result") == 3, "%r, %r" % (q, w))
    c.close()
    a.stop()
    _still_there(case, exe, tmp, p, "once the first daemon stopped")


def case_corrupt(case, exe):
    seed, rng = seeded("STEPX_DURABLE_SEED")
    case.figure("seed", seed)
    for what, head in (("random bytes", b""),
                       ("an SQLite header, then random bytes",
                        b"SQLite format 3\x00")):
        tmp = case.tmpdir()
        state = os.path.join(tmp, "state")
        os.mkdir(state, 0o700)
        db = os.path.join(state, "stepx.db")
        data = head + bytes(rng.getrandbits(8) for _ in range(16384 -
                                                              len(head)))
        with open(db, "wb") as f:
            f.write(data)
        start_refused(case, exe, tmp, state, ["damaged",
                                              "not a stepx database"],
                      "stepx.db of %s" % what, watch=[db])


def case_not_stepx(case, exe):
    tmp = case.tmpdir()
    state = os.path.join(tmp, "state")
    os.mkdir(state, 0o700)
    db = os.path.join(state, "stepx.db")
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    con.execute("INSERT INTO notes (body) VALUES ('not for stepx')")
    con.commit()
    con.close()
    start_refused(case, exe, tmp, state, ["not a stepx database", "damaged"],
                  "another program's SQLite file", watch=[db])
    con = sqlite3.connect(db)
    rows = con.execute("SELECT body FROM notes").fetchall()
    con.close()
    case.check("the other program's table is still there, as it was",
               rows == [("not for stepx",)], repr(rows))


def case_newer_schema(case, exe):
    tmp = case.tmpdir()
    state, pid = _store_with_jobs(case, exe, tmp)
    db = os.path.join(state, "stepx.db")
    con = sqlite3.connect(db)
    v0 = con.execute("PRAGMA user_version").fetchone()[0]
    con.execute("PRAGMA user_version = 999")
    con.commit()
    con.close()
    case.figure("user_version", "%s, set to 999" % v0)
    start_refused(case, exe, tmp, state, ["newer stepx"],
                  "stepx.db of schema 999", watch=[db])
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version = %d" % v0)
    con.commit()
    con.close()
    _still_there(case, exe, tmp, pid, "user_version put back")


def case_read_only(case, exe):
    tmp = case.tmpdir()
    state, pid = _store_with_jobs(case, exe, tmp)
    db = os.path.join(state, "stepx.db")
    words = ["cannot be written", "read-only"]
    if os.geteuid() != 0:
        os.chmod(db, 0o444)
        try:
            start_refused(case, exe, tmp, state, words,
                          "stepx.db of mode 0444", watch=[db])
        finally:
            os.chmod(db, 0o644)
        _still_there(case, exe, tmp, pid, "mode put back")
        return
    # Root writes any file whatever its mode: the state directory is
    # bind-mounted read-only over itself, in a mount namespace of the
    # daemon's own (nothing is mounted for the rest of the machine).
    case.note("running as root, where file modes do not stop writes: the "
              "state directory is mounted read-only instead")
    script = ('mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" || '
              'exit 201; shift; exec "$@"')
    wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            script, "sh", state]
    probe = subprocess.run(wrap + ["sh", "-c", "! touch \"$0/probe\" "
                                   "2>/dev/null", state],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=30)
    if probe.returncode != 0:
        raise Skipped("read-only: running as root, and a read-only bind "
                      "mount is not allowed here (status %d: %s)"
                      % (probe.returncode, (probe.stderr or b"")
                         .decode("utf-8", "replace").strip()[-300:]))
    start_refused(case, exe, tmp, state, words,
                  "stepx.db on a read-only mount", wrap=wrap, watch=[db])
    _still_there(case, exe, tmp, pid, "without the read-only mount")


# ------------------------------------------------------- full disk

def case_full_disk(case, exe):
    tmp = case.tmpdir()
    limit = 65536 + 4 * 4096
    d = case.state_daemon(exe, tmp, flags=["--state-max-bytes", str(limit)])
    c = d.connect()
    early = submit_all(c, [dict(type="counter", method="run", input=[n],
                                key="early-%d" % n) for n in (1, 2, 3)])
    epids = [m.get("pid") for m in early]
    case.check("submits before the limit: ok", all(m.get("ok")
                                                    for m in early),
               repr(early))
    wait_all(c, epids)
    # Fill: failing jobs with long messages and keys, whose outcomes and
    # keys are kept, 25 at a time until a submit is refused.
    n, ok, refused = 0, 0, []
    pad = "k" * 100
    while not refused and n < 4000:
        batch = [dict(type="fail", method="run", input=["m" * 250],
                      key="fill-%05d-%s" % (n + i, pad)) for i in range(25)]
        n += len(batch)
        for m in submit_all(c, batch):
            if m.get("ok"):
                ok += 1
            else:
                refused.append(m)
    case.figure("fill", "%d submits, %d ok, %d refused; stepx.db %d bytes "
                "(limit %d)" % (n, ok, len(refused),
                                os.path.getsize(d.db_path), limit))
    case.check("a submit past --state-max-bytes is refused", bool(refused),
               "none of %d was" % n)
    if not refused:
        return
    more = submit_all(c, [dict(type="fail", method="run", input=["m" * 250],
                               key="more-%d-%s" % (i, pad))
                          for i in range(10)])
    refused += [m for m in more if not m.get("ok")]
    codes = collections.Counter(error_code(m) for m in refused)
    case.figure("refusals", "%s; first: %r" % (dict(codes), refused[0]))
    case.check("every refusal is error code storage with \"no space\" in "
               "its message", all(error_code(m) == "storage" and
                                  "no space" in m["error"].get("message", "")
                                  .lower() for m in refused),
               repr([m for m in refused if error_code(m) != "storage"
                     or "no space" not in m["error"].get("message", "")
                     .lower()][:3]))
    w = wait_all(c, epids, timeout_ms=2000)
    case.check("full: wait still answers the earlier jobs (1, 2, 3)",
               [w[p].get("result") for p in epids] == [1, 2, 3],
               repr([w[p] for p in epids]))
    st = c.call("stats")
    case.check("full: stats still answers", st.get("ok"), repr(st)[:300])
    case.check("full: stepxd is running", d.alive())
    c.close()
    rc = d.stop()
    size = os.path.getsize(d.db_path)
    case.figure("stop", "exit status %s; stepx.db %d bytes" % (rc, size))
    case.check("stepx.db is no bigger than --state-max-bytes after the stop "
               "(%d <= %d)" % (size, limit), size <= limit)


CASES = collections.OrderedDict([
    ("crash-rounds", case_crash_rounds),
    ("idempotent-key", case_idempotent_key),
    ("outcomes-survive", case_outcomes_survive),
    ("checkpoint-resume", case_checkpoint_resume),
    ("pid-stays", case_pid_stays),
    ("restart-policy", case_restart_policy),
    ("locked", case_locked),
    ("corrupt", case_corrupt),
    ("not-stepx", case_not_stepx),
    ("newer-schema", case_newer_schema),
    ("read-only", case_read_only),
    ("full-disk", case_full_disk),
])


def main(argv):
    if len(argv) == 2 and argv[1] == "--list":
        print("\n".join(CASES))
        return 0
    if len(argv) != 3 or argv[1] not in CASES:
        print("usage: %s CASE PATH/TO/stepxd  (CASE: %s) | --list"
              % (argv[0], ", ".join(CASES)), file=sys.stderr)
        return 2
    durable.hostile.require_msgpack()
    exe = os.path.abspath(argv[2])
    if not os.access(exe, os.X_OK):
        print("%s: not an executable stepxd" % exe, file=sys.stderr)
        return 2

    # meson's timeout sends SIGTERM: unwind, so that daemons are stopped.
    def on_term(sig, _frame):
        raise SystemExit("stopped by signal %d" % sig)

    signal.signal(signal.SIGTERM, on_term)
    return DurableCase(argv[1]).run(CASES[argv[1]], exe)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

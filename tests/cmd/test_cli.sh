#!/usr/bin/env bash
# tests/cmd/test_cli.sh — end to end: a real stepxd driven by the stepx CLI.
#
#   bash tests/cmd/test_cli.sh PATH/TO/stepxd PATH/TO/stepx
#
# Starts stepxd on a temporary socket (plus TCP, a token, Prometheus
# metrics on a free loopback port, and the example plugin from
# $STEPX_TEST_PLUGIN), then checks every subcommand in human and --json
# output, every documented exit code (1 process failed, 2 usage / bad
# JSON / bad PID, 3 no daemon, 4 error reply, 5 timeout), the plugin's
# type, the metrics text, and a graceful SIGTERM with a 60 s sleeper
# running (the cancel is delivered, --stop-deadline is respected, exit 0).
# Prints one line per check and "N passed, N failed"; exits non-zero when
# anything failed. Needs bash and python3 (for JSON checks); no curl.
set -u

if [ $# -lt 2 ]; then
    echo "usage: $0 STEPXD STEPX" >&2
    exit 2
fi
STEPXD=$1
STEPX=$2
PLUGIN=${STEPX_TEST_PLUGIN:-$(dirname "$STEPX")/../tests/cmd/plugin_example.so}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/stepx-cli.XXXXXX")
# Every daemon here but the keys' (the last section) runs --ephemeral,
# through a wrapper: several run at once, and the incarnation cases need
# each run's PIDs to be its own. The state store has its own tests
# (tests/durable/, tests/engine/test_durable).
REAL_STEPXD=$(cd "$(dirname "$STEPXD")" && pwd)/$(basename "$STEPXD")
printf '#!/bin/sh\nexec "%s" --ephemeral "$@"\n' "$REAL_STEPXD" >"$TMP/stepxd"
chmod +x "$TMP/stepxd"
STEPXD=$TMP/stepxd
SOCK=$TMP/stepxd.sock
DEADLINE_MS=1500
DPID=
passed=0
failed=0

cleanup()
{
    if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
        kill -KILL "$DPID" 2>/dev/null
        wait "$DPID" 2>/dev/null
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

ok()
{
    passed=$((passed + 1))
    echo "ok    $1"
}

bad()
{
    failed=$((failed + 1))
    echo "FAIL  $1"
    if [ $# -gt 1 ]; then
        printf '%s\n' "$2" | head -n 30 | sed 's/^/      | /'
    fi
}

# run CMD...: runs stepx (20 s at most) with stdout in $OUT, stderr in
# $ERR and the exit status in $RC.
run()
{
    timeout 20 "$STEPX" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    RC=$?
    OUT=$(cat "$TMP/out")
    ERR=$(cat "$TMP/err")
}

show()
{
    printf 'rc %s\nstdout: %s\nstderr: %s' "$RC" "$OUT" "$ERR"
}

# expect NAME RC [GREP-PATTERN-IN-STDOUT+STDERR]: checks the last run.
expect()
{
    local name=$1 want=$2 pat=${3:-}
    if [ "$RC" -ne "$want" ]; then
        bad "$name (exit $RC, want $want)" "$(show)"
    elif [ -n "$pat" ] && ! printf '%s\n%s\n' "$OUT" "$ERR" | grep -qE -- "$pat"; then
        bad "$name (output lacks /$pat/)" "$(show)"
    else
        ok "$name"
    fi
}

# json NAME PYTHON-EXPR [RC]: checks the last run's exit status (default
# 0) and its stdout as JSON; the expression sees d (the last document)
# and lines (every line parsed).
json()
{
    local name=$1 expr=$2 want=${3:-0}
    if [ "$RC" -ne "$want" ]; then
        bad "$name (exit $RC, want $want)" "$(show)"
        return
    fi
    if printf '%s' "$OUT" | "$PY" -c "
import json, sys
text = sys.stdin.read()
lines = [json.loads(l) for l in text.splitlines() if l.strip()]
d = lines[-1] if lines else None
sys.exit(0 if ($expr) else 1)
" 2>"$TMP/pyerr"; then
        ok "$name"
    else
        bad "$name (JSON check failed: $expr)" "$(show; cat "$TMP/pyerr")"
    fi
}

PID_RE='^\{[0-9]+@[0-9]+\|[0-9]+\}$'

free_port()
{
    "$PY" -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
        echo $((20000 + RANDOM % 30000))
}

# GET /metrics with bash's /dev/tcp (curl may be missing).
fetch_metrics()
{
    local body
    exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
    printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
    body=$(timeout 5 cat <&3)
    exec 3<&-
    printf '%s' "$body"
}

# ---- no daemon yet: exit code 3 ----

STEPX_SOCKET=$TMP/none.sock
export STEPX_SOCKET
run types
expect "no daemon running: exit 3" 3 "cannot connect"
run --json ps
json "no daemon running, --json: an error document" \
    "d['ok'] is False and d['error']['code'] == 'connection'" 3
unset STEPX_SOCKET
run --socket "$TMP/none.sock" stats
expect "--socket to nowhere: exit 3" 3 "none.sock"
# An address the client cannot use is a usage error, said as such: not
# SX_EINVAL from the client, reported as the server refusing hello ("a
# wrong or missing --token"), exit 3.
run --connect 127.0.0.1 types
expect "--connect without a port: exit 2, saying so" 2 "bad --connect address"
if printf '%s' "$ERR" | grep -q token; then
    bad "--connect without a port: no token hint" "$(show)"
else
    ok "--connect without a port: no token hint"
fi
# --connect follows the HOST:PORT rules the client itself uses
# (process/hostport.h), each refusal said with its reason.
run --connect "::1:7000" types
expect "--connect with a bare IPv6 address: exit 2, saying to bracket it" 2 \
    "bad --connect address '::1:7000': more than one ':' \(an IPv6 address goes in brackets"
run --connect "127.0.0.1:0" types
expect "--connect to port 0: exit 2, saying the range" 2 \
    "bad --connect address '127\.0\.0\.1:0': the port must be 1 to 65535"
run --connect "127.0.0.1:+7000" types
expect "--connect with a signed port: exit 2" 2 \
    "bad --connect address .*: the port is not a decimal number"
run --connect ":7000" types
expect "--connect with no host: exit 2" 2 \
    "bad --connect address ':7000': the host is empty"
run --connect "[::1]:$(free_port)" types
expect "--connect [::1]:PORT is a form the client takes: exit 3, not 2" 3 \
    "cannot connect"
run --socket "$TMP/$(printf 'x%.0s' $(seq 1 120)).sock" types
expect "--socket longer than 107 bytes: exit 2, saying so" 2 \
    "bad socket path .* longer than 107"
run
expect "no command: exit 2" 2 "usage"
run frobnicate
expect "unknown command: exit 2" 2 "unknown command"
run --help
expect "--help: exit 0, documents the exit codes" 0 "exit codes"
# Usage errors are found before connecting: exit 2 even with no daemon.
run send 5 topic 'hello'
expect "bad JSON, no daemon: still exit 2" 2 "bad JSON for the message"
run watch 5 --send t '[1,'
expect "watch --send bad JSON, no daemon: exit 2" 2 "bad JSON for --send"
# A bare id over 2^64 - 1 is a bad PID, found before connecting (not
# exit 3 here).
run wait 99999999999999999999
expect "bare id over 2^64 - 1, no daemon: exit 2" 2 "bad PID"
run --json submit counter run '[1'
json "bad JSON --json: a usage error document" \
    "d['ok'] is False and d['error']['code'] == 'usage' and 'bad JSON' in d['error']['message']" 2
run --json frobnicate
json "unknown command --json: a usage error document" \
    "d['ok'] is False and d['error']['code'] == 'usage'" 2
# "--json" as an option's value is that value, not the option: the error
# is said in text, not as a JSON document.
run --socket "$TMP/none.sock" cancel 9 --reason --json
expect "--reason --json, no daemon: exit 3" 3 "^stepx: cannot connect"
[ -z "$OUT" ] && ok "--reason --json, no daemon: no JSON document" ||
    bad "--reason --json, no daemon: no JSON document" "$(show)"

# ---- a fake daemon that sends a frame the CLI cannot read ----

# It answers hello and subscribe, then sends a frame of length 0 (no map:
# broken). watch must say so as an unreadable reply, exit 6, as every
# request does, not "malformed or unexpected payload" with exit 3 (a lost
# connection).
cat >"$TMP/fake.py" <<'PYEOF'
import os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
# Bound under another name and renamed once it listens: the test waits for
# the file, and a client connecting between bind and listen is refused.
s.bind(sys.argv[1] + ".tmp")
s.listen(1)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
s.settimeout(20)
c, _ = s.accept()
c.settimeout(20)

def read_n(n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk:
            sys.exit(0)
        b += chunk
    return b

def reply(req, extra):
    # The client sends "id" first, a positive fixint here: 82 a2 'id' N.
    assert req[1:4] == b"\xa2id" and req[4] < 0x80, req
    body = (bytes([0x82 + (1 if extra else 0), 0xA2]) + b"id" +
            bytes([req[4]]) + b"\xa2ok\xc3" + extra)
    c.sendall(struct.pack(">I", len(body)) + body)

for extra in (b"\xa7mailbox\xa7{0@1|1}", b""):  # hello, subscribe
    reply(read_n(struct.unpack(">I", read_n(4))[0]), extra)
c.sendall(b"\x00\x00\x00\x00")
c.recv(100)
PYEOF
"$PY" "$TMP/fake.py" "$TMP/fake.sock" &
FAKE=$!
for _ in $(seq 1 100); do
    [ -S "$TMP/fake.sock" ] && break
    sleep 0.05
done
run --socket "$TMP/fake.sock" watch '{0@1|5}'
expect "watch: a push frame it cannot read: exit 6, saying so" 6 \
    "watch: a reply the CLI cannot read"
wait "$FAKE" 2>/dev/null

# ---- the daemon ----

if [ ! -f "$PLUGIN" ]; then
    bad "plugin $PLUGIN exists (set STEPX_TEST_PLUGIN)"
fi
MPORT=$(free_port)
TPORT=$(free_port)
while [ "$TPORT" = "$MPORT" ]; do TPORT=$(free_port); done
DEADPORT=$(free_port)

# ---- --load: a plugin that cannot be loaded stops stepxd at once ----

# start_fail NAME RC PATTERN ARGS...: stepxd ARGS must exit RC before
# listening, saying PATTERN.
start_fail()
{
    local name=$1 want=$2 pat=$3
    shift 3
    timeout 20 "$STEPXD" --socket "$TMP/fail.sock" "$@" >"$TMP/fail.log" 2>&1
    local rc=$?
    if [ "$rc" -eq "$want" ] && grep -qE -- "$pat" "$TMP/fail.log" &&
        [ ! -e "$TMP/fail.sock" ]; then
        ok "$name"
    else
        bad "$name (exit $rc, want $want)" "$(cat "$TMP/fail.log")"
    fi
}
start_fail "stepxd --load of a missing file: exit 1" 1 \
    "--load .*nosuch.so" --load "$TMP/nosuch.so"
start_fail "stepxd --load of a library without the register function: exit 1" 1 \
    "no function stepx_plugin_register" --load libm.so.6
start_fail "stepxd --load whose register fails (greeter twice): exit 1" 1 \
    "stepx_plugin_register failed" --load "$PLUGIN" --load "$PLUGIN"
# A plugin named without a '/' is looked up in the library path only
# (dlopen), never in the current directory: "No such file or directory"
# for a file that is right there has to say how to name it.
mkdir -p "$TMP/here"
cp "$PLUGIN" "$TMP/here/my_types.so"
STEPXD_GIVEN=$STEPXD
STEPXD=$(cd "$(dirname "$STEPXD")" && pwd)/$(basename "$STEPXD")
cd "$TMP/here" || exit 1
start_fail "stepxd --load NAME of a file here: says ./NAME" 1 \
    "--load my_types.so: .*say \./my_types\.so" --load my_types.so
cd - >/dev/null || exit 1
STEPXD=$STEPXD_GIVEN
start_fail "stepxd bad option value: exit 2" 2 "bad option" --workers zero
start_fail "stepxd --ephemeral with --state-dir: exit 2" 2 \
    "one or the other" --state-dir "$TMP/state"
start_fail "stepxd --sync of another value: exit 2" 2 "bad option" \
    --sync sometimes
# An unknown option last on the line is reported as unknown, not as one
# needing a value.
start_fail "stepxd unknown option: exit 2, named as unknown" 2 \
    "unknown option: --verbose" --verbose
start_fail "stepxd option without its value: exit 2" 2 \
    "--workers needs a value" --workers
start_fail "stepxd --max-frame below 4096: exit 2" 2 "bad option" --max-frame 64
start_fail "stepxd --max-result over what a frame carries: exit 2, saying so" 2 \
    "--max-result 65000 is over what one frame carries: at most the frame limit \(65536, --max-frame\) minus 1024 bytes .*, 64512" \
    --max-frame 65536 --max-result 65000
start_fail "stepxd --keep-outcome-bytes 0: exit 2" 2 "bad option" \
    --keep-outcome-bytes 0
start_fail "stepxd --max-output below the frame limit: exit 2, saying so" 2 \
    "--max-output 8192 is less than the frame limit \(65536, --max-frame\)" \
    --max-frame 65536 --max-output 8192
start_fail "stepxd --token over 1024 bytes: exit 2, saying so" 2 \
    "--token is at most 1024 bytes" --token "$(printf '%02000d' 0)"
# A socket path too long for a Unix socket (107 bytes) is refused as such,
# not with the server's SX_EINVAL and a hint about --listen and --token.
start_fail "stepxd --socket longer than 107 bytes: exit 2, saying so" 2 \
    "--socket .* longer than 107" --socket "$TMP/$(printf 'x%.0s' $(seq 1 120)).sock"
# A socket in a directory that does not exist: the message names the path
# (not only "permission denied").
start_fail "stepxd --socket in a missing directory: exit 1, naming it" 1 \
    "cannot listen \(--socket $TMP/nodir/x.sock\): .*(No such file|ENOENT)" \
    --socket "$TMP/nodir/x.sock"
# A socket path from $STEPX_SOCKET (no --socket given) is named as that,
# not as "--socket PATH" to someone who never typed --socket.
# env_fail NAME RC PATTERN PATH: stepxd with STEPX_SOCKET=PATH and no
# --socket must exit RC, saying PATTERN.
env_fail()
{
    STEPX_SOCKET=$4 timeout 20 "$STEPXD" >"$TMP/fail.log" 2>&1
    local rc=$?
    if [ "$rc" -eq "$2" ] && grep -qE -- "$3" "$TMP/fail.log"; then
        ok "$1"
    else
        bad "$1 (exit $rc, want $2)" "$(cat "$TMP/fail.log")"
    fi
}
env_fail "stepxd, STEPX_SOCKET too long: exit 2, naming STEPX_SOCKET" 2 \
    "^stepxd: STEPX_SOCKET=$TMP/x+\.sock: longer than 107" \
    "$TMP/$(printf 'x%.0s' $(seq 1 120)).sock"
env_fail "stepxd, STEPX_SOCKET in a missing directory: exit 1, naming it" 1 \
    "cannot listen \(STEPX_SOCKET=$TMP/nodir/x.sock\): " "$TMP/nodir/x.sock"
start_fail "stepxd --listen 0.0.0.0 without --token: exit 1, saying why" 1 \
    "not loopback .* needs --token" --listen "0.0.0.0:$((20000 + RANDOM % 20000))"
# --listen and --metrics follow the shared HOST:PORT rules
# (process/hostport.h), checked before anything starts, each refusal said
# with its reason.
start_fail "stepxd --listen with a port over 65535: exit 2, saying why" 2 \
    "--listen '127\.0\.0\.1:70000': the port must be 0 to 65535" \
    --listen 127.0.0.1:70000
start_fail "stepxd --listen with junk in the port: exit 2, saying why" 2 \
    "--listen '127\.0\.0\.1:12ab': the port is not a decimal number" \
    --listen 127.0.0.1:12ab
start_fail "stepxd --listen with a bare IPv6 address: exit 2, saying why" 2 \
    "--listen '::1:7000': more than one ':' \(an IPv6 address goes in brackets" \
    --listen ::1:7000
start_fail "stepxd --listen without a port: exit 2, saying why" 2 \
    "--listen 'localhost': no ':PORT' after the host" --listen localhost
start_fail "stepxd --metrics with no host: exit 2, saying why" 2 \
    "--metrics ':9100': the host is empty" --metrics :9100
start_fail "stepxd --metrics with a '[' and no ']': exit 2, saying why" 2 \
    "--metrics '\[::1:9100': a '\[' without its '\]'" --metrics "[::1:9100"
# The descriptors (3 and up) this shell hands to what it starts: stepxd
# gets these, and its subprocesses (exec) must get nothing more.
# shellcheck disable=SC2016 # a Python program in single quotes
FDS_PY='import os
fds = []
for f in range(3, 1024):
    try:
        os.fstat(f)
        fds.append(f)
    except OSError:
        pass
print(" ".join(map(str, fds)))'
BASE_FDS=$("$PY" -c "$FDS_PY")
# --metrics on port 0: the startup line says the port actually bound (not
# the address as given, port 0), and that port serves the metrics.
"$STEPXD" --socket "$TMP/m0.sock" --metrics 127.0.0.1:0 >"$TMP/m0.log" 2>&1 &
M0PID=$!
for _ in $(seq 1 100); do
    grep -q "SIGTERM stops it" "$TMP/m0.log" && break
    kill -0 "$M0PID" 2>/dev/null || break
    sleep 0.1
done
M0PORT=$(sed -n 's/^stepxd: metrics on .*(port \([0-9]*\))$/\1/p' "$TMP/m0.log")
if [ -n "$M0PORT" ] && [ "$M0PORT" -gt 0 ] &&
    fetch_metrics "$M0PORT" | head -n 1 | grep -q '200 OK'; then
    ok "stepxd --metrics HOST:0 says the port it bound, which serves"
else
    bad "stepxd --metrics HOST:0 says the port it bound" "$(cat "$TMP/m0.log")"
fi
kill -TERM "$M0PID" 2>/dev/null
wait "$M0PID" 2>/dev/null

TOKEN=sesame
"$STEPXD" --socket "$SOCK" --listen "127.0.0.1:$TPORT" --token "$TOKEN" \
    --workers 2 --metrics "127.0.0.1:$MPORT" --load "$PLUGIN" \
    --stop-deadline "$DEADLINE_MS" >"$TMP/stepxd.log" 2>&1 &
DPID=$!
for _ in $(seq 1 100); do
    [ -S "$SOCK" ] && grep -q "SIGTERM stops it" "$TMP/stepxd.log" && break
    kill -0 "$DPID" 2>/dev/null || break
    sleep 0.1
done
if [ -S "$SOCK" ]; then
    ok "stepxd listens on $SOCK"
else
    bad "stepxd did not start" "$(cat "$TMP/stepxd.log")"
    echo "$passed passed, $failed failed"
    exit 1
fi
export STEPX_SOCKET=$SOCK
export STEPX_TOKEN=$TOKEN

# ---- token, TCP ----

run --token wrong types
expect "a wrong token is refused: exit 3, saying so" 3 "wrong or missing --token"
run --connect "127.0.0.1:$TPORT" types
expect "--connect HOST:PORT over TCP" 0 "counter"
run --connect "localhost:0$TPORT" types
expect "--connect localhost:PORT, a leading zero in the port" 0 "counter"
run --connect "127.0.0.1:$DEADPORT" types
expect "--connect to a closed port: exit 3" 3 "cannot connect"

# ---- types (and the plugin) ----

run types
expect "types: the shipped types" 0 "exec"
expect "types: the plugin's greeter (stepxd --load)" 0 "greeter +hello"
run --json types
json "types --json" "d['ok'] is True and sorted(t['name'] for t in d['types']) == \
['counter', 'echo', 'exec', 'fail', 'fanout', 'greeter', 'napper', 'sleeper', 'tally', 'watcher'] and \
['run'] in [t['methods'] for t in d['types']]"

# ---- submit, wait ----

run submit counter run '[5]'
expect "submit prints a PID" 0
if printf '%s' "$OUT" | grep -qE "$PID_RE"; then ok "submit: PID in text form"; else bad "submit: PID in text form" "$(show)"; fi
CPID=$OUT
run wait "$CPID"
expect "wait: result and steps" 0 "done in 6 steps: 5$"
run --json wait "$CPID"
json "wait --json" "d == {'pid': '$CPID', 'ok': True, 'result': 5, 'steps': 6, 'attempts': 1}"
CPID_ID=${CPID##*|}
run wait "${CPID_ID%\}}"
expect "wait with a bare id" 0 "done in 6 steps"
run --json submit counter run '[3]'
json "submit --json" "set(d) == {'pid', 'ok'} and d['pid'].startswith('{')"
run --json submit --wait sleeper run '[50]'
json "submit --wait sleeper" "d['result'] == 50 and d['ok'] is True"
run submit --wait counter run '[2]'
expect "submit --wait (human)" 0 "done in 3 steps: 2$"
# One round trip a job: a waited submit costs the daemon as many requests
# as a plain one (a CLI that submitted and then waited would take one
# more). Each interval holds one `stats` call and one submit.
relay_requests()
{
    "$STEPX" --socket "$SOCK" --json stats |
        "$PY" -c 'import json, sys; print(json.load(sys.stdin)["stats"]["relay_requests"])'
}
R0=$(relay_requests)
"$STEPX" --socket "$SOCK" submit counter run '[2]' >/dev/null
R1=$(relay_requests)
"$STEPX" --socket "$SOCK" submit --wait counter run '[2]' >/dev/null
R2=$(relay_requests)
if [ -n "$R0" ] && [ $((R2 - R1)) -eq $((R1 - R0)) ]; then
    ok "submit --wait: one request, as a plain submit"
else
    bad "submit --wait: one request, as a plain submit" \
        "requests: plain $((R1 - R0)), waited $((R2 - R1))"
fi
# Past the first slice of the wait (1 s), the submit's own reply is a
# timeout naming the job; the CLI goes on waiting for it.
run submit --wait sleeper run '[1600]'
expect "submit --wait past the first slice: the outcome" 0 \
    "done in 2 steps: 1600$"
run submit --wait nope run '[]'
expect "submit --wait of an unknown type: refused, exit 4" 4 \
    "no process type \"nope\" \(unknown_type\)"
run --json submit --wait exec run '[["sh", "-c", "echo hi; echo err >&2"]]'
json "exec: {status, stdout, stderr}" \
    "d['result']['status'] == 0 and d['result']['stdout'] == 'hi\n' and d['result']['stderr'] == 'err\n'"
run --json submit --wait exec run '[["cat"], "fed to stdin"]'
json "exec with stdin" "d['result']['stdout'] == 'fed to stdin'"
# An exec child inherits no descriptor of stepxd's own: were the metrics
# thread's stop pipe (or a scrape's connection) not close-on-exec, every
# subprocess would hold them, a daemonized one for good.
run --json submit --wait exec run "$("$PY" -c 'import json, sys
print(json.dumps([[sys.argv[1], "-c", sys.argv[2]]]))' "$PY" "$FDS_PY")"
json "exec: the child inherits none of stepxd's descriptors (--metrics)" \
    "d['result']['stdout'].split() == '$BASE_FDS'.split()"
run --json submit --wait fanout run '[3, "counter", "run", [4]]'
json "fanout: children's results in order" "d['result'] == [4, 4, 4]"
run --json submit --wait greeter hello '["bob"]'
json "plugin type runs: greeter.hello" "d['result'] == 'hello, bob'"

# ---- failures: exit 1 ----

run submit --wait fail run '["boom"]'
expect "fail: exit 1 with the message" 1 "boom"
run --json submit --wait fail run '["kaboom"]'
json "fail --json: error document" \
    "d['ok'] is False and d['error']['code'] == 'failed' and 'kaboom' in d['error']['message']" 1

# ---- batch ----

run submit --count 200 counter run '[3]' --wait
expect "submit --count 200 --wait: summary" 0 "200 completed, 0 failed"
run --json submit --count 50 counter run '[1]'
json "submit --count --json" "d['submitted'] == 50 and d['count'] == 50 and d['ok']"
# napper (the plugin) sleeps 5 ms in init: 300 submits take over a second.
run submit --count 300 napper run '[5]'
expect "submit --count: a progress line on a batch over a second" 0 \
    "submitted [0-9]+/300\.\.\. 1 s"
expect "submit --count: the summary" 0 "submitted 300 of 300 napper.run in"
run --json submit --count 20 fail run '["bad"]' --wait
json "batch with failures: exit 1, counted" \
    "d['failed'] == 20 and d['completed'] == 0 and 'bad' in d['first_error']" 1

# ---- echo: send, watch, cancel ----

run submit echo serve
EPID=$OUT
run send "$EPID" greet '"hi"'
expect "send: human" 0 "sent 'greet'"
run --json send "$EPID" greet '{"k": [1, 2]}'
json "send --json" "d['ok'] is True and d['topic'] == 'greet'"
run watch "$EPID" --send hello '"there"' --send stop null
expect "watch: the echoed message" 0 "message from \{[0-9@|]+\} \[hello\]: \"there\""
expect "watch: the exit (3 echoed)" 0 "exit .*: done: 3"
run submit echo serve
EPID=$OUT
# shellcheck disable=SC2016 # "$bin" is JSON, not a shell variable
VALUE='{"i":9007199254740993,"neg":-7,"f":1.5,"s":"h\u00e9llo","b":{"$bin":"/wD/"},"n":null,"a":[true,false,[]]}'
run --json watch "$EPID" --send data "$VALUE" --send stop null
json "watch --json: one push per line, values round-trip" \
    "len(lines) == 2 and lines[0]['push'] == 'message' and \
lines[0]['data'] == json.loads('''$VALUE''') and \
lines[0]['topic'] == 'data' and lines[1]['push'] == 'exit' and \
lines[1]['ok'] is True and lines[1]['result'] == 1 and \
type(lines[0]['data']['i']) is int"
run submit echo serve
EPID=$OUT
run cancel "$EPID" "enough"
expect "cancel: human" 0 "cancel sent"
run --json wait "$EPID"
json "cancel reached the echo (done with its count)" "d['ok'] and d['result'] == 0"
run submit echo serve
EPID=$OUT
run send "$EPID" one 1
run --json cancel "$EPID" --reason "via --reason"
json "cancel --json (--reason)" "d == {'pid': '$EPID', 'ok': True}"
run --json wait "$EPID"
json "cancel --reason reached the echo (1 echoed)" "d['ok'] and d['result'] == 1"
run cancel "$EPID"
expect "cancel of a finished process: exit 4" 4 "not_found"

# ---- ps, kill ----

run submit sleeper run '[30000]'
SPID=$OUT
run ps
expect "ps: header and the sleeper" 0 "PID +TYPE +METHOD +STATE +STEPS"
if printf '%s' "$OUT" | grep -F "$SPID" | grep -q sleeper; then ok "ps lists the sleeper"; else bad "ps lists the sleeper" "$(show)"; fi
run --json ps
json "ps --json" "d['ok'] is True and any(p['pid'] == '$SPID' and p['type'] == 'sleeper' for p in d['processes'])"
run submit sleeper run '[30000]'
SPID2=$OUT
run --json ps --limit 1
json "ps --limit 1" "len(d['processes']) == 1"
run ps --limit 1
expect "ps --limit 1: human says the limit was reached" 0 "1 live process listed \(--limit reached\)"
run --json kill "$SPID2"
json "kill --json" "d == {'pid': '$SPID2', 'ok': True}"
run --json wait "$SPID2"
json "wait on a killed process --json: terminated" \
    "d['ok'] is False and d['error']['code'] == 'terminated' and d['pid'] == '$SPID2'" 1

# ---- timeouts: exit 5, with a progress line ----

T0=$(date +%s%N)
run --timeout 1500 wait "$SPID"
T1=$(date +%s%N)
expect "wait past --timeout: exit 5" 5 "still running"
expect "long wait: progress line on stderr" 5 "waiting for \{.*\}\.\.\. 1 s"
MS=$(((T1 - T0) / 1000000))
# Upper bound: well below the sleeper's 30 s (an ignored timeout waits for
# it), well above 1.5 s (ASan at load 10 can take 6 s to start the CLI,
# connect and time out).
if [ "$MS" -ge 1400 ] && [ "$MS" -lt 20000 ]; then ok "timeout honoured (${MS} ms)"; else bad "timeout honoured (${MS} ms, want ~1500)"; fi
run --json --timeout 300 submit --wait sleeper run '[5000]'
json "submit --wait --timeout --json: error document" \
    "d['ok'] is False and d['error']['code'] == 'timeout'" 5
run --timeout 300 watch "$SPID"
expect "watch past --timeout: exit 5" 5 "did not exit within 300 ms"
run --json --timeout 300 watch "$SPID"
json "watch past --timeout --json: error document" \
    "d['ok'] is False and d['error']['code'] == 'timeout'" 5
run --quiet --timeout 1200 wait "$SPID"
if [ "$RC" -eq 5 ] && ! printf '%s' "$ERR" | grep -q "waiting for"; then
    ok "--quiet: no progress line"
else
    bad "--quiet: no progress line" "$(show)"
fi
run submit --count 2 sleeper run '[2200]' --wait
expect "batch --wait: a progress line while the first holds the count" 0 \
    "finished 0/2\.\.\. [12] s"
expect "batch --wait: the summary" 0 "2 completed, 0 failed"

run kill "$SPID"
expect "kill" 0 "terminated"
run wait "$SPID"
expect "wait on a killed process: exit 1" 1 "terminated"

# ---- errors: exit 4 (server), exit 2 (usage) ----

run submit nosuch run '[]'
expect "unknown type: exit 4" 4 "unknown_type"
run --json submit nosuch run '[]'
json "unknown type --json" "d['error']['code'] == 'unknown_type'" 4
run submit counter nosuch '[1]'
expect "unknown method: exit 4" 4 "unknown_method"
run submit counter run '["not a number"]'
expect "bad input for init: exit 4" 4
run wait 999999999
expect "unknown PID: wait exit 4" 4 "not_found"
run kill '{0@1|999999999}'
expect "unknown PID: kill exit 4" 4 "not_found"
run send 999999999 t '1'
expect "unknown PID: send exit 4" 4
run submit counter run '[5'
expect "bad JSON: exit 2" 2 "bad JSON"
run submit counter run '5'
expect "ARGS not an array: exit 2" 2 "JSON array"
run send "$CPID" topic 'hello'
expect "bad JSON message (unquoted string): exit 2" 2 "JSON quotes"
# A frame nests at most 32 deep (docs/PROTOCOL.md), the request map
# included: JSON nested deeper than 31 is a usage error, not a lost
# connection ("Invalid argument", exit 3) after connecting.
DEEP31=$(printf '[%.0s' $(seq 1 31))$(printf ']%.0s' $(seq 1 31))
DEEP32="[$DEEP31]"
run send "$CPID" t "$DEEP31"
expect "send: JSON 31 deep goes (the process is gone: exit 4)" 4 "not_found"
run send "$CPID" t "$DEEP32"
expect "send: JSON 32 deep: exit 2" 2 "bad JSON for the message: .*nest 32 deep"
run --json submit counter run "[$DEEP31]"
json "submit: ARGS 32 deep --json: a usage error document" \
    "d['ok'] is False and d['error']['code'] == 'usage'" 2
run watch "$CPID" --send t "{\"k\": $DEEP31}"
expect "watch --send: JSON 32 deep: exit 2" 2 "bad JSON for --send"
run wait 'not-a-pid'
expect "bad PID: exit 2" 2 "bad PID"
run submit counter
expect "missing arguments: exit 2" 2 "usage"
run submit --count 0 counter run '[1]'
expect "bad option value: exit 2" 2 "bad value"
# Restart policies and keys (this daemon runs --ephemeral: keys need a
# state store; policies do not).
run submit --wait --restart on-failure --max-restarts 1 --backoff-min 1 \
    --backoff-max 2 fail run '["x"]'
expect "submit --restart on-failure, failing: restart_limit, exit 1" 1 \
    "restart limit \(1 in 60000 ms\) reached; last: x \(restart_limit\)"
run --json submit --wait --restart always --max-restarts 2 --backoff-min 1 \
    counter run '[1]'
json "submit --restart always --json: restart_limit after 3 attempts" \
    "d['ok'] is False and d['error']['code'] == 'restart_limit'" 1
run submit --max-restarts 2 counter run '[1]'
expect "restart numbers without --restart: exit 2" 2 "need --restart"
run submit --restart sometimes counter run '[1]'
expect "--restart of another mode: exit 2" 2 "bad value"
# A deadline at submit ends the process with timeout; init's own message
# says which input was wrong.
run --json submit --wait --deadline 200 sleeper run '[30000]'
json "submit --deadline 200 on a 30 s sleeper: failed, the deadline's message" \
    "d['ok'] is False and d['error']['code'] == 'failed' and d['error']['message'] == 'deadline of 200 ms passed'" 1
run submit --deadline 0 sleeper run '[1]'
expect "--deadline 0: exit 2" 2 "bad value"
run submit --wait --deadline 5000 sleeper run '[10]'
expect "submit --deadline longer than the run: the result" 0 "10"
run submit sleeper run '["ten"]'
expect "init_failed carries init's own message" 4 \
    "sleeper.run takes \[ms\]: one integer up to 2\^40"
run submit --key k1 counter run '[1]'
expect "--key on an --ephemeral daemon: exit 4, bad_request" 4 \
    "keys need a state store"
run submit --key k1 --count 2 counter run '[1]'
expect "--key with --count: exit 2" 2 "--key with --count"
run ps --count 3
expect "option for another command: exit 2" 2 "does not apply"
run --timeout abc ps
expect "bad --timeout: exit 2" 2

# ---- stats, top ----

run stats
expect "stats: human: figures" 0 "^submitted +[0-9]+$"
expect "stats: human: the per-worker table" 0 "^per_worker:"
run --json stats
json "stats --json" "d['ok'] is True and isinstance(d['stats'], dict) and len(d['stats']) > 0"
run top -n 2 --interval 200
expect "top -n 2: two frames" 0 "FIGURE +VALUE +PER SECOND"
if [ "$(printf '%s\n' "$OUT" | grep -c '^stepx top')" -eq 2 ]; then ok "top: 2 frames"; else bad "top: 2 frames" "$(show)"; fi
run --json top -n 3 --interval 100
json "top --json: one document per refresh" \
    "len(lines) == 3 and all('stats' in l and 'rates' in l for l in lines)"
# q quits at once, not at the next refresh: the interval (60 s) is far
# beyond the bound (20 s), which also covers starting the CLI and
# connecting on a loaded machine (a 4 s bound under a 5 s interval leaves
# too little for that), and a q that was not heard ends in the timeout.
T0=$(date +%s%N)
printf 'q' | timeout 30 "$STEPX" top --interval 60000 >"$TMP/out" 2>&1
RC=$?
T1=$(date +%s%N)
OUT=$(cat "$TMP/out")
ERR=
MS=$(((T1 - T0) / 1000000))
if [ "$RC" -eq 0 ] && [ "$MS" -lt 20000 ]; then ok "top: q quits (${MS} ms)"; else bad "top: q quits (rc $RC, ${MS} ms)" "$(show)"; fi
"$STEPX" top --interval 5000 </dev/null >"$TMP/out" 2>&1 &
TOPPID=$!
# Signal only once the first frame is out: top takes SIGINT from then on.
# A background job of this (non-interactive) shell starts with SIGINT
# ignored, so a signal sent before top's sigaction is lost and top runs on
# (a fixed 0.5 s sleep is not enough when the CLI is slow to start).
for _ in $(seq 1 200); do
    grep -q '^stepx top' "$TMP/out" 2>/dev/null && break
    kill -0 "$TOPPID" 2>/dev/null || break
    sleep 0.1
done
kill -INT "$TOPPID"
for _ in $(seq 1 50); do
    kill -0 "$TOPPID" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$TOPPID" 2>/dev/null; then
    kill -KILL "$TOPPID"
    wait "$TOPPID"
    bad "top: SIGINT quits (still running after 5 s)" "$(cat "$TMP/out")"
else
    wait "$TOPPID"
    RC=$?
    if [ "$RC" -eq 0 ]; then ok "top: SIGINT (Ctrl-C) quits with 0"; else bad "top: SIGINT quits (rc $RC)" "$(cat "$TMP/out")"; fi
fi

# ---- output that cannot be written ----

# SIGPIPE is ignored (a daemon that goes away is a write error), so a
# failed write to stdout must be seen: a full disk is exit 6, not 0, and
# `top | head -1` ends once head has gone instead of running forever.
if [ -w /dev/full ]; then
    timeout 20 "$STEPX" stats >/dev/full 2>"$TMP/err" </dev/null
    RC=$?
    OUT=
    ERR=$(cat "$TMP/err")
    expect "stats > /dev/full: exit 6" 6 "cannot write the output"
    timeout 20 "$STEPX" --json submit --wait counter run '[1]' >/dev/full \
        2>"$TMP/err" </dev/null
    RC=$?
    ERR=$(cat "$TMP/err")
    expect "submit --wait --json > /dev/full: exit 6" 6 "cannot write the output"
fi
timeout 10 "$STEPX" top --interval 100 2>"$TMP/err" </dev/null | head -n 1 >/dev/null
RC=${PIPESTATUS[0]}
OUT=
ERR=$(cat "$TMP/err")
expect "top | head -1: stops when its reader has gone (exit 6)" 6
[ -z "$ERR" ] && ok "top | head -1: quietly" || bad "top | head -1: quietly (stderr: $ERR)" ""
timeout 10 "$STEPX" --json top --interval 100 2>"$TMP/err" </dev/null | head -n 1 >/dev/null
RC=${PIPESTATUS[0]}
ERR=$(cat "$TMP/err")
expect "top --json | head -1: stops when its reader has gone (exit 6)" 6
[ -z "$ERR" ] && ok "top --json | head -1: quietly" || bad "top --json | head -1: quietly (stderr: $ERR)" ""

# ---- metrics ----

run --json stats
SUBMITTED=$(printf '%s' "$OUT" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["stats"]["submitted"])')
METRICS=$(fetch_metrics "$MPORT")
if printf '%s' "$METRICS" | grep -q '^stepx_outcome_bytes [0-9]' &&
    printf '%s' "$METRICS" | grep -q '^stepx_outcomes [0-9]'; then
    ok "metrics: stepx_outcome_bytes and stepx_outcomes"
else
    bad "metrics: stepx_outcome_bytes and stepx_outcomes" \
        "$(printf '%s' "$METRICS" | grep outcome)"
fi
if printf '%s' "$METRICS" | grep -q '^stepx_processes_live '; then
    ok "metrics: stepx_processes_live"
else
    bad "metrics: stepx_processes_live" "$(printf '%s' "$METRICS" | head -n 5)"
fi
if printf '%s' "$METRICS" | head -n 1 | grep -q '200 OK'; then ok "metrics: HTTP 200"; else bad "metrics: HTTP 200"; fi
# The whole body in the Prometheus text format: every sample has a # TYPE
# line before it, values are numbers, histograms are cumulative and end in
# +Inf = _count; the figures reflect this test's work.
# shellcheck disable=SC2016 # a Python program in single quotes
if printf '%s' "$METRICS" | SUBMITTED=$SUBMITTED "$PY" -c '
import os, re, sys
text = sys.stdin.read()
head, _, body = text.partition("\r\n\r\n")
assert "Content-Type: text/plain; version=0.0.4" in head, head
types, samples = {}, {}
for line in body.splitlines():
    if line.startswith("# HELP "):
        continue
    if line.startswith("# TYPE "):
        _, _, name, kind = line.split(" ")
        assert kind in ("counter", "gauge", "histogram"), line
        types[name] = kind
        continue
    m = re.fullmatch(r"([a-z_]+)(\{[a-z_]+=\"[^\"]*\"(,[a-z_]+=\"[^\"]*\")*\})? (\S+)", line)
    assert m, "bad line: " + line
    name, labels, value = m.group(1), m.group(2) or "", float(m.group(4))
    base = re.sub(r"_(bucket|count|sum)$", "", name)
    assert name in types or base in types, "no TYPE for " + name
    # counts are whole; the _sum of a histogram is in seconds (a float)
    if types.get(name) == "counter" or (types.get(base) == "histogram" and
                                        not name.endswith("_sum")):
        assert value >= 0 and value == int(value), line
    samples[name + labels] = value
buckets = [v for k, v in samples.items() if k.startswith("stepx_command_latency_seconds_bucket")]
assert buckets == sorted(buckets) and buckets[-1] == samples["stepx_command_latency_seconds_count"]
# _sum agrees with the buckets: bucket k >= 1 holds [2^(k-1), 2^k) us
counts = [b - a for a, b in zip([0] + buckets[:-2], buckets[:-1])]
low = sum(c * (2 ** (k - 1) if k else 0) for k, c in enumerate(counts)) / 1e6
assert samples["stepx_command_latency_seconds_sum"] >= low - 1e-6, (samples["stepx_command_latency_seconds_sum"], low)
# bucket k is under 2^k microseconds: the le labels say so exactly
les = re.findall(r"stepx_command_latency_seconds_bucket\{le=\"([^\"]+)\"\}", body)
assert les[-1] == "+Inf" and [float(x) for x in les[:-1]] == [2**k / 1e6 for k in range(len(les) - 1)], les
# nothing was submitted since `stepx stats`: both say the same
assert samples["stepx_processes_submitted_total"] == int(os.environ["SUBMITTED"]) >= 250, \
    (samples["stepx_processes_submitted_total"], os.environ["SUBMITTED"])
assert samples["stepx_processes_failed_total"] >= 22
assert samples["stepx_relay_requests_total"] >= 300
assert sum(v for k, v in samples.items() if k.startswith("stepx_processes{")) == samples["stepx_processes_live"]
' 2>"$TMP/pyerr"; then
    ok "metrics: valid Prometheus text, figures match the work done"
else
    bad "metrics: valid Prometheus text" "$(cat "$TMP/pyerr")"
fi
exec 3<>"/dev/tcp/127.0.0.1/$MPORT"
printf 'GET /other HTTP/1.0\r\n\r\n' >&3
NOTFOUND=$(timeout 5 head -n 1 <&3)
exec 3<&-
if printf '%s' "$NOTFOUND" | grep -q ' 404 '; then ok "metrics: 404 elsewhere"; else bad "metrics: 404 elsewhere" "$NOTFOUND"; fi
# Only the path /metrics (with or without a query) is the metrics: a path
# that merely starts with it (/metricsfoo, /metrics/x) is not served them.
for path in /metricsfoo /metrics/x; do
    exec 3<>"/dev/tcp/127.0.0.1/$MPORT"
    printf 'GET %s HTTP/1.0\r\n\r\n' "$path" >&3
    NOTFOUND=$(timeout 5 head -n 1 <&3)
    exec 3<&-
    if printf '%s' "$NOTFOUND" | grep -q ' 404 '; then ok "metrics: 404 for $path"; else bad "metrics: 404 for $path" "$NOTFOUND"; fi
done
exec 3<>"/dev/tcp/127.0.0.1/$MPORT"
printf 'GET /metrics?x=1 HTTP/1.0\r\n\r\n' >&3
FOUND=$(timeout 5 head -n 1 <&3)
exec 3<&-
if printf '%s' "$FOUND" | grep -q ' 200 '; then ok "metrics: /metrics?query is served"; else bad "metrics: /metrics?query is served" "$FOUND"; fi

# ---- SIGTERM with processes running ----

run submit sleeper run '[60000]'
LONG=$OUT
run submit echo serve
ECHO=$OUT
timeout 30 "$STEPX" --json wait "$LONG" >"$TMP/wait_long" 2>/dev/null &
W1=$!
timeout 30 "$STEPX" --json wait "$ECHO" >"$TMP/wait_echo" 2>/dev/null &
W2=$!
# Both waiters connected (the stats call itself is the third connection)
# before the signal: a fixed 0.3 s is not always enough on a loaded
# machine, and a waiter that has not connected yet gets exit 3.
for _ in $(seq 1 200); do
    run --json stats
    if printf '%s' "$OUT" | "$PY" -c "
import json, sys
d = json.loads(sys.stdin.read().splitlines()[-1])
sys.exit(0 if d['stats']['relay_connections'] >= 3 else 1)" 2>/dev/null; then
        break
    fi
    sleep 0.05
done
sleep 0.2 # connected, and their wait requests sent
T0=$(date +%s%N)
kill -TERM "$DPID"
wait "$DPID"
DRC=$?
T1=$(date +%s%N)
DPID=
MS=$(((T1 - T0) / 1000000))
LIMIT=$((DEADLINE_MS + 5000))
if [ "$DRC" -eq 0 ]; then ok "SIGTERM: stepxd exits 0"; else bad "SIGTERM: stepxd exits 0 (got $DRC)" "$(cat "$TMP/stepxd.log")"; fi
if [ "$MS" -ge $((DEADLINE_MS - 100)) ] && [ "$MS" -le "$LIMIT" ]; then
    ok "SIGTERM: waited the ${DEADLINE_MS} ms stop deadline for the sleeper, no longer (${MS} ms)"
else
    bad "SIGTERM: stop took ${MS} ms (deadline ${DEADLINE_MS} ms, limit ${LIMIT} ms)"
fi
wait "$W2"
RC=$?
OUT=$(cat "$TMP/wait_echo")
ERR=
json "SIGTERM: the cancel reached the echo (waiting client got its outcome)" \
    "d['ok'] is True and d['result'] == 0"
wait "$W1"
RC=$?
OUT=$(cat "$TMP/wait_long")
ERR=
json "SIGTERM: the sleeper was terminated at the deadline (its waiter got that outcome)" \
    "d['ok'] is False and d['error']['code'] == 'terminated'" 1
if grep -qE "stopped: [0-9]+ completed, [0-9]+ failed, [0-9]+ cancelled, [1-9][0-9]* terminated" "$TMP/stepxd.log" &&
    ! grep -qE "Sanitizer|runtime error" "$TMP/stepxd.log"; then
    ok "stepxd log: clean stop"
else
    bad "stepxd log: clean stop" "$(cat "$TMP/stepxd.log")"
fi
if [ ! -e "$SOCK" ]; then ok "socket file removed"; else bad "socket file removed"; fi
run types
expect "after stop: exit 3" 3

# ---- SIGINT, nothing running: a prompt clean stop ----

SOCK2=$TMP/stepxd2.sock
MPORT2=$(free_port)
"$STEPXD" --socket "$SOCK2" --workers 1 --metrics "127.0.0.1:$MPORT2" \
    --keep-outcome-bytes 3000000 --max-result 2000000 \
    >"$TMP/stepxd2.log" 2>&1 &
DPID=$!
for _ in $(seq 1 100); do
    grep -q "SIGTERM stops it" "$TMP/stepxd2.log" && break
    kill -0 "$DPID" 2>/dev/null || break
    sleep 0.1
done
run --socket "$SOCK2" --json submit --wait counter run '[2]'
json "second daemon answers" "d['result'] == 2"
# One small request must not pin hundreds of MB: a fanout of execs of
# head -c 1000000 leaves every child's 1 MB result, and a count alone
# (10,000 outcomes, whatever their size) would keep them all. Here
# --max-result 2000000 makes the fanout too_large after its second child,
# and --keep-outcome-bytes 3000000 bounds what the children that run on
# leave behind.
run --socket "$SOCK2" --json submit --wait fanout run \
    '[5, "exec", "run", [["head", "-c", "1000000", "/dev/zero"]]]'
json "fanout over --max-result: too_large, naming the limit" \
    "d['ok'] is False and d['error']['code'] == 'too_large' and 'over the limit of 2000000 (max_result)' in d['error']['message']" 1
for _ in $(seq 1 200); do # the children left running finish
    run --socket "$SOCK2" --json stats
    printf '%s' "$OUT" | grep -q '"live": *0[,}]' && break
    sleep 0.05
done
json "stats: outcome_bytes within --keep-outcome-bytes once the children are done" \
    "d['stats']['live'] == 0 and 1000000 <= d['stats']['outcome_bytes'] <= 3000000 + 3 * 65536 and d['stats']['outcomes'] >= 1"
# A metrics client that sends its request a byte at a time, slower than a
# scrape may take: it has 2 s in all, not 2 s per byte, so it neither
# holds up the next scrape nor the stop below.
trickle() { # PORT: in the background, a byte every 0.3 s for 30 s
    (
        exec 4<>"/dev/tcp/127.0.0.1/$1" || exit
        for _ in $(seq 1 100); do
            printf 'G' >&4 || exit
            sleep 0.3
        done
    ) 2>/dev/null &
}
trickle "$MPORT2"
TRICKLE=$!
sleep 0.5
T0=$(date +%s%N)
METRICS=$(fetch_metrics "$MPORT2")
T1=$(date +%s%N)
MS=$(((T1 - T0) / 1000000))
if printf '%s' "$METRICS" | grep -q '^stepx_processes_live '; then
    ok "metrics: a client sending a byte at a time does not hold up a scrape (${MS} ms)"
else
    bad "metrics: a client sending a byte at a time holds up a scrape (${MS} ms)" \
        "$(printf '%s' "$METRICS" | head -n 3)"
fi
trickle "$MPORT2"
TRICKLE2=$!
sleep 0.5
T0=$(date +%s%N)
kill -INT "$DPID"
wait "$DPID"
DRC=$?
T1=$(date +%s%N)
DPID=
kill "$TRICKLE" "$TRICKLE2" 2>/dev/null
wait "$TRICKLE" "$TRICKLE2" 2>/dev/null
MS=$(((T1 - T0) / 1000000))
if [ "$DRC" -eq 0 ] && [ "$MS" -lt 3000 ] && grep -q "SIGINT: stopping" "$TMP/stepxd2.log"; then
    ok "SIGINT: exit 0 (${MS} ms, nothing to wait for, a slow metrics client connected)"
else
    bad "SIGINT: exit 0 promptly (exit $DRC, ${MS} ms)" "$(cat "$TMP/stepxd2.log")"
fi

# ---- SIGHUP stops gracefully; a second signal terminates at once ----
# SIGHUP (the terminal of `stepxd &` closing) must not kill the daemon at
# once (exit 129, socket and lock files left, outcomes lost), and a stop
# with a long deadline can be hurried without SIGKILL.

SOCK3=$TMP/stepxd3.sock
"$STEPXD" --socket "$SOCK3" --workers 1 --stop-deadline 60000 \
    >"$TMP/stepxd3.log" 2>&1 &
DPID=$!
for _ in $(seq 1 100); do
    grep -q "SIGTERM stops it" "$TMP/stepxd3.log" && break
    kill -0 "$DPID" 2>/dev/null || break
    sleep 0.1
done
run --socket "$SOCK3" submit sleeper run '[60000]'
LONG3=$OUT
timeout 30 "$STEPX" --socket "$SOCK3" --json wait "$LONG3" >"$TMP/wait_long3" 2>/dev/null &
W3=$!
sleep 0.5 # the waiter connected and sent its wait
T0=$(date +%s%N)
kill -HUP "$DPID"
for _ in $(seq 1 100); do
    grep -q "SIGHUP: stopping" "$TMP/stepxd3.log" && break
    kill -0 "$DPID" 2>/dev/null || break
    sleep 0.05
done
sleep 0.3 # stopping, waiting for the sleeper (deadline 60 s)
kill -INT "$DPID" 2>/dev/null
wait "$DPID"
DRC=$?
T1=$(date +%s%N)
DPID=
MS=$(((T1 - T0) / 1000000))
if [ "$DRC" -eq 0 ] && [ "$MS" -lt 10000 ] && grep -q "SIGINT again: terminating" "$TMP/stepxd3.log"; then
    ok "SIGHUP stops, a second signal terminates at once: exit 0 (${MS} ms, deadline 60 s)"
else
    bad "SIGHUP then SIGINT: exit 0 well before the deadline (exit $DRC, ${MS} ms)" "$(cat "$TMP/stepxd3.log")"
fi
if [ ! -e "$SOCK3" ] && [ ! -e "$SOCK3.lock" ]; then ok "SIGHUP: socket and lock files removed"; else bad "SIGHUP: socket and lock files removed"; fi
wait "$W3"
RC=$?
OUT=$(cat "$TMP/wait_long3")
ERR=
json "SIGHUP, then SIGINT: the sleeper's waiter got its outcome (terminated)" \
    "d['ok'] is False and d['error']['code'] == 'terminated'" 1

# ---- restarts: each run has its own incarnation ----
# After a SIGKILL (or SIGTERM) and a restart on the same socket, the new
# run's first job must not have the PID of the old run's first job, or a
# client that came back and killed its old PID would kill somebody else's
# new job. The host part of every PID is the run's incarnation (random).

SOCK4=$TMP/stepxd4.sock
# start4 ARGS...: stepxd on SOCK4 (one worker, a short stop deadline),
# waited for until it has said its startup lines (up to 30 s: under a
# sanitizer on a host busy with the suite's other builds a start can take
# seconds).
start4()
{
    "$STEPXD" --socket "$SOCK4" --workers 1 --stop-deadline 200 "$@" \
        >"$TMP/stepxd4.log" 2>&1 &
    DPID=$!
    for _ in $(seq 1 300); do
        grep -q "SIGTERM stops it" "$TMP/stepxd4.log" && break
        kill -0 "$DPID" 2>/dev/null || break
        sleep 0.1
    done
}
# stop4 SIGNAL: stops it with SIGNAL and waits for it.
stop4()
{
    kill "-$1" "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
    DPID=
}
start4
run --socket "$SOCK4" submit sleeper run '[60000]'
OLD=$OUT
stop4 KILL
start4
run --socket "$SOCK4" submit sleeper run '[60000]'
NEW=$OUT
if printf '%s\n%s\n' "$OLD" "$NEW" | grep -cE "$PID_RE" | grep -qx 2 &&
    [ "$OLD" != "$NEW" ]; then
    ok "after SIGKILL and a restart, the first job's PID is new ($OLD, then $NEW)"
else
    bad "after SIGKILL and a restart, the first job's PID is new" "old: $OLD; new: $NEW"
fi
run --socket "$SOCK4" kill "$OLD"
expect "kill of the old run's PID: not_found (exit 4)" 4 "not_found"
run --socket "$SOCK4" wait "$OLD"
expect "wait on the old run's PID: not_found (exit 4)" 4 "not_found"
run --socket "$SOCK4" --json ps
json "the new run's job is still running" \
    "any(p['pid'] == '$NEW' and p['type'] == 'sleeper' for p in d['processes'])"
run --socket "$SOCK4" --timeout 300 wait "$NEW"
expect "... and still waits (exit 5)" 5
HOST4=$(printf '%s' "$NEW" | sed -n 's/^{[0-9]*@\([0-9]*\)|.*/\1/p')
if grep -q "^stepxd: incarnation $HOST4: PIDs are {0@$HOST4|id}$" "$TMP/stepxd4.log"; then
    ok "the startup line names the incarnation in the PIDs"
else
    bad "the startup line names the incarnation ($HOST4)" "$(cat "$TMP/stepxd4.log")"
fi
stop4 TERM
start4
run --socket "$SOCK4" submit sleeper run '[60000]'
NEW2=$OUT
if [ "$NEW2" != "$NEW" ] && printf '%s' "$NEW2" | grep -qE "$PID_RE"; then
    ok "after SIGTERM and a restart, the first job's PID is new ($NEW2)"
else
    bad "after SIGTERM and a restart, the first job's PID is new" "old: $NEW; new: $NEW2"
fi
run --socket "$SOCK4" kill "$NEW"
expect "kill of the SIGTERM'd run's PID: not_found (exit 4)" 4 "not_found"
stop4 TERM
# --incarnation N: the same host part on every run (tests, and runs that
# must keep their PIDs).
start4 --incarnation 7
run --socket "$SOCK4" submit sleeper run '[60000]'
SEVEN=$OUT
stop4 KILL
start4 --incarnation 7
run --socket "$SOCK4" submit sleeper run '[60000]'
if printf '%s' "$SEVEN" | grep -qE '^\{0@7\|[0-9]+\}$' && [ "$OUT" = "$SEVEN" ]; then
    ok "--incarnation 7: PIDs {0@7|...}, the same on each run ($SEVEN)"
else
    bad "--incarnation 7: PIDs {0@7|...}, the same on each run" "first: $SEVEN; second: $OUT"
fi
stop4 KILL
start_fail "stepxd --incarnation 0: exit 2" 2 "bad option or value: --incarnation 0" \
    --incarnation 0
start_fail "stepxd --incarnation 2^32: exit 2" 2 "bad option or value" \
    --incarnation 4294967296

# ---- the process table's cap ----
# With no --max-processes the table still has a cap sized to memory:
# without one, a single fanout submit could start as many as it asks for
# (100,101 processes).

start4
CAP=$(sed -n 's/^stepxd: at most \([0-9]*\) process slots (--max-slots)$/\1/p' "$TMP/stepxd4.log")
# shellcheck disable=SC2016 # a Python program in single quotes
if [ -n "$CAP" ] && "$PY" -c 'import os, sys
mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
sys.exit(0 if 1024 <= int(sys.argv[1]) <= max(1024, mem // 4096) else 1)' "$CAP"; then
    ok "default --max-slots: one per 4 KiB of memory at most ($CAP)"
else
    bad "default --max-slots: one per 4 KiB of memory at most" "$(cat "$TMP/stepxd4.log")"
fi
stop4 TERM
start4 --max-slots 0
if grep -q "^stepxd: no cap on process slots (--max-slots 0)$" "$TMP/stepxd4.log"; then
    ok "--max-slots 0: no cap"
else
    bad "--max-slots 0: no cap" "$(cat "$TMP/stepxd4.log")"
fi
stop4 TERM
start4 --max-slots 40
run --socket "$SOCK4" --json submit --count 60 sleeper run '[60000]'
json "--max-slots 40: a batch of sleepers stops at the cap with limit" \
    "d['ok'] is False and 32 <= d['submitted'] <= 39 and '(limit)' in d['first_error']" 4
run --socket "$SOCK4" --json stats
json "--max-slots 40: the daemon still answers (a connection's mailbox fits)" \
    "d['ok'] is True and d['stats']['live'] >= 32"
stop4 KILL

# ---- submit --key with a state store: the earlier job, "existing" ----

# The daemon itself, not the --ephemeral wrapper: keys need a state
# store.
STEPXD=$REAL_STEPXD start4 --state-dir "$TMP/state4"
run --socket "$SOCK4" --json submit --key k1 counter run '[1]'
json "submit --key, a new key: a pid, no existing" \
    "d['ok'] is True and 'existing' not in d"
K1=$(printf '%s' "$OUT" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null)
run --socket "$SOCK4" --json submit --key k1 counter run '[1]'
json "submit --key, the same key: the same pid, existing true" \
    "d['ok'] is True and d['pid'] == '$K1' and d['existing'] is True"
run --socket "$SOCK4" --json submit --wait --key k1 counter run '[1]'
json "submit --wait --key, the same key: the earlier job's outcome, existing true" \
    "d['ok'] is True and d['pid'] == '$K1' and d['result'] == 1 and d['existing'] is True"
run --socket "$SOCK4" --json submit --wait --key k2 counter run '[2]'
json "submit --wait --key, a new key: its outcome, no existing" \
    "d['ok'] is True and d['result'] == 2 and 'existing' not in d"
run --socket "$SOCK4" submit --key k1 counter run '[1]'
expect "submit --key, the same key, for people: the pid alone" 0 "^$(printf '%s' "$K1" | sed 's/[{}|]/\\&/g')\$"
stop4 TERM

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

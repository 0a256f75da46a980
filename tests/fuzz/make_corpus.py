#!/usr/bin/env python3
"""tests/fuzz/make_corpus.py: writes the seed corpora of the fuzzers, one
file per seed. tests/fuzz/corpus/wire/ (fuzz_wire): byte streams of frames
as a client or the server would send them (docs/PROTOCOL.md): a valid
request of every op, a pipelined batch, pushes and replies, a map holding
every msgpack type, the deepest nesting allowed, and a few broken streams.
tests/fuzz/corpus/payload/ (fuzz_payload): single msgpack values (every
type, PIDs, maps with repeated and non-string keys, edges of the integer
formats, nesting at the reader's limit) and a few broken ones.
tests/fuzz/corpus/cli_json/ (fuzz_cli_json): JSON texts as the CLI takes
them (with {"$bin": ...}) and msgpack values as replies carry them.

Standard library only; the msgpack encoder below is the same minimal one
docs/PROTOCOL.md shows for clients. Re-run after changing it:
    python3 tests/fuzz/make_corpus.py
"""
import os
import struct


class Ext:
    """A msgpack ext value: type code (-128..127) and bytes."""

    def __init__(self, code, data):
        self.code, self.data = code, data


def pack(v):
    """Encodes v (None, bool, int, float, str, bytes, list, dict, Ext)."""
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        if 0 <= v <= 0x7F:
            return bytes([v])
        if -32 <= v < 0:
            return struct.pack(">b", v)
        if v >= 0:
            for marker, fmt, top in ((0xCC, ">B", 0xFF), (0xCD, ">H", 0xFFFF),
                                     (0xCE, ">I", 0xFFFFFFFF),
                                     (0xCF, ">Q", 0xFFFFFFFFFFFFFFFF)):
                if v <= top:
                    return bytes([marker]) + struct.pack(fmt, v)
        for marker, fmt, lo in ((0xD0, ">b", -0x80), (0xD1, ">h", -0x8000),
                                (0xD2, ">i", -0x80000000),
                                (0xD3, ">q", -0x8000000000000000)):
            if v >= lo:
                return bytes([marker]) + struct.pack(fmt, v)
        raise ValueError("integer out of range")
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode("utf-8")
        n = len(b)
        if n <= 31:
            return bytes([0xA0 | n]) + b
        if n <= 0xFF:
            return b"\xd9" + struct.pack(">B", n) + b
        if n <= 0xFFFF:
            return b"\xda" + struct.pack(">H", n) + b
        return b"\xdb" + struct.pack(">I", n) + b
    if isinstance(v, (bytes, bytearray)):
        n = len(v)
        if n <= 0xFF:
            return b"\xc4" + struct.pack(">B", n) + bytes(v)
        if n <= 0xFFFF:
            return b"\xc5" + struct.pack(">H", n) + bytes(v)
        return b"\xc6" + struct.pack(">I", n) + bytes(v)
    if isinstance(v, Ext):
        n = len(v.data)
        fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
        if n in fixed:
            head = bytes([fixed[n]])
        elif n <= 0xFF:
            head = b"\xc7" + struct.pack(">B", n)
        elif n <= 0xFFFF:
            head = b"\xc8" + struct.pack(">H", n)
        else:
            head = b"\xc9" + struct.pack(">I", n)
        return head + struct.pack(">b", v.code) + v.data
    if isinstance(v, (list, tuple)):
        n = len(v)
        if n <= 15:
            head = bytes([0x90 | n])
        elif n <= 0xFFFF:
            head = b"\xdc" + struct.pack(">H", n)
        else:
            head = b"\xdd" + struct.pack(">I", n)
        return head + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        n = len(v)
        if n <= 15:
            head = bytes([0x80 | n])
        elif n <= 0xFFFF:
            head = b"\xde" + struct.pack(">H", n)
        else:
            head = b"\xdf" + struct.pack(">I", n)
        return head + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(type(v))


def frame(m):
    """One frame: a 4-byte big-endian length, then the map."""
    body = pack(m)
    return struct.pack(">I", len(body)) + body


PID = "{0@1|4294967297}"
MAILBOX = "{0@1|8589934594}"

SEEDS = {
    "op-hello": frame({"op": "hello", "id": 1, "version": 1}),
    "op-hello-token": frame({"op": "hello", "id": 1, "version": 1,
                             "token": "s3cret"}),
    "op-submit": frame({"op": "submit", "id": 2, "type": "counter",
                        "method": "run", "input": [1000]}),
    "op-submit-exec": frame({"op": "submit", "id": 3, "type": "exec",
                             "method": "run",
                             "input": [["/bin/echo", "hi"], "stdin"]}),
    "op-send": frame({"op": "send", "id": 4, "to": PID, "topic": "ping",
                      "data": {"n": 1, "tags": ["a", "b"]}}),
    "op-wait": frame({"op": "wait", "id": 5, "pid": PID,
                      "timeout_ms": 5000}),
    "op-cancel": frame({"op": "cancel", "id": 6, "pid": PID,
                        "reason": "user asked"}),
    "op-terminate": frame({"op": "terminate", "id": 7, "pid": PID}),
    "op-ps": frame({"op": "ps", "id": 8, "limit": 100}),
    "op-stats": frame({"op": "stats", "id": 9}),
    "op-subscribe": frame({"op": "subscribe", "id": 10, "pid": PID}),
    "op-types": frame({"op": "types", "id": 11}),
    "pipeline": b"".join([
        frame({"op": "hello", "id": 1, "version": 1}),
        frame({"op": "submit", "id": 2, "type": "echo", "method": "serve",
               "input": []}),
        frame({"op": "send", "id": 3, "to": PID, "topic": "stop",
               "data": None}),
        frame({"op": "wait", "id": 4, "pid": PID}),
    ]),
    "server-replies": b"".join([
        frame({"id": 1, "ok": True, "version": 1, "node": 0,
               "server": "stepxd/0.1.0", "mailbox": MAILBOX}),
        frame({"id": 5, "ok": True, "result": 1000, "steps": 1001}),
        frame({"id": 7, "ok": False,
               "error": {"code": "not_found",
                         "message": "no process {0@1|42}"}}),
        frame({"push": "message", "from": PID, "topic": "ping",
               "data": [1, 2.5, "x"]}),
        frame({"push": "exit", "pid": PID, "ok": False,
               "error": {"code": "failed", "message": "boom"}}),
    ]),
    "every-type": frame({
        "nil": None, "t": True, "f": False, "pos": 5, "neg": -3,
        "u8": 200, "u16": 60000, "u32": 4000000000, "u64": 2 ** 63,
        "i8": -100, "i16": -30000, "i32": -2000000000, "i64": -2 ** 62,
        "float": 1.5, "fixstr": "abc", "str8": "s" * 40,
        "str16": "t" * 300, "bin8": b"\x00\x01", "bin16": b"b" * 300,
        "ext1": Ext(1, b"a"), "ext2": Ext(2, b"ab"), "ext4": Ext(-1, b"abcd"),
        "ext8": Ext(5, b"12345678"), "ext16": Ext(6, b"0123456789abcdef"),
        "ext8var": Ext(7, b"xyz"), "ext16var": Ext(8, b"e" * 300),
        "arr16": list(range(20)), "map16": {str(i): i for i in range(20)},
        "nested": {1: [None, {2: b""}], "k": []},
    }),
    "deep-32": (lambda: frame({"k": (lambda f: f(f, 31))(
        lambda f, n: [] if n == 1 else [f(f, n - 1)])}))(),
}

# Broken streams: the fuzzer starts from the edges as well as the middle.
deep33 = pack({"k": (lambda f: f(f, 32))(
    lambda f, n: [] if n == 1 else [f(f, n - 1)])})
SEEDS["bad-deep-33"] = struct.pack(">I", len(deep33)) + deep33
SEEDS["bad-zero-length"] = frame({"op": "stats", "id": 1}) + b"\0\0\0\0"
SEEDS["bad-huge-length"] = b"\xff\xff\xff\xff\x81\xa2op"
SEEDS["bad-array32-claim"] = (struct.pack(">I", 10) +
                              b"\x81\xa1k\xdd\xff\xff\xff\xff\xc0\xc0")
SEEDS["bad-trailing"] = struct.pack(">I", 2) + b"\x80\x80"


def nest(n):
    """n arrays, one inside the other."""
    v = []
    for _ in range(n - 1):
        v = [v]
    return v


EVERY = {
    "nil": None, "t": True, "f": False, "u64": 2 ** 64 - 1, "i64": -2 ** 63,
    "u8": 255, "i8": -128, "float": -0.0, "str": "h\u00e9", "bin": b"\xff",
    "binutf8": b"ok", "ext": Ext(-3, b"ab"), 7: [1.5, {}], "": "",
}
PAYLOAD_SEEDS = {
    "every-type": pack(EVERY),
    "pid-array": pack([0, 1, 4294967297]),
    "pid-text": pack(PID),
    "map-repeated-key": b"\x83\xa1k\x01\x01\xa1k\xa1k\x02",
    "map-lookup": pack({"ok": True, "id": 7, "error": {"code": "x"}}),
    "float32": b"\xca\x7f\xc0\x00\x00",
    "deep-64": pack(nest(64)),
    "bad-deep-65": pack(nest(65)),
    "bad-c1": b"\x92\x01\xc1",
    "bad-str-short": b"\xd9\x05abc",
    "two-values": b"\x01\xa1x",
}
CLI_JSON_SEEDS = {
    "json-args": b'[10, "text", {"k": [1, 2.5, null, true]}]',
    "json-bin": b'{"$bin": "AAEC/w=="}',
    "json-bin-utf8": b'[{"$bin": "aGk="}, {"$bin": "x"}]',
    "json-nul": b'"a\\u0000b"',
    "json-big": b'[9223372036854775807, -9223372036854775808, 1e300]',
    "json-deep-31": b"[" * 31 + b"]" * 31,
    "mp-reply": pack({"ok": True, "result": EVERY, "steps": 3}),
    "mp-keys": pack({1: "a", None: 2, b"\xff": 3, "a\u0000b": 4}),
    "mp-keys-in-keys": b"\x81" * 24 + b"\x01" + b"\xc0" * 24,
    "mp-nan": b"\x92\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00\xca\xff\x80\x00\x00",
    "json-map-form": b'[{"$map": [[1, "a"], ["1", {"$map": [[null, 2]]}]]}, {"$map": 5}]',
    # {1: "a", "1": "b", "k": {"k": 1, "k": 2}}: keys that read the same
    "mp-clash": b"\x83\x01\xa1a\xa11\xa1b\xa1k\x82\xa1k\x01\xa1k\x02",
}

here = os.path.dirname(os.path.abspath(__file__))
for folder, seeds in (("wire", SEEDS), ("payload", PAYLOAD_SEEDS),
                      ("cli_json", CLI_JSON_SEEDS)):
    out = os.path.join(here, "corpus", folder)
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {out}")

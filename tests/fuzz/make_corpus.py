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
tests/fuzz/corpus/http/ (fuzz_http): HTTP/1.1 responses as servers send
them (Content-Length, chunked, ended by the close, interim 1xx, HEAD, 204,
repeated fields) and malformed or over-limit ones, each behind its mode
byte and four split sizes; URLs; msgpack headers maps for requests. The
first byte of each seed is fuzz_http's mode (see tests/fuzz/fuzz_http.c).
Files named found-* are inputs fuzzing found, kept as they were found
(minimized); this script leaves them alone.

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



def resp(text, sizes=(0, 0, 0, 0), head_only=False, eof_with_last=False):
    """A fuzz_http response seed: mode byte, four split sizes, the bytes."""
    mode = (1 if head_only else 0) | (4 if eof_with_last else 0)
    data = text.encode("latin-1") if isinstance(text, str) else text
    return bytes([mode]) + bytes(sizes) + data


def url(text):
    """A fuzz_http URL seed."""
    return b"\x02" + text.encode("latin-1")


def headers(value, post=False, body=False):
    """A fuzz_http request seed: a headers argument as msgpack bytes."""
    mode = 3 | (4 if post else 0) | (8 if body else 0)
    raw = value if isinstance(value, bytes) else pack(value)
    return bytes([mode]) + raw


PYTHON_SERVER = ("HTTP/1.0 200 OK\r\nServer: SimpleHTTP/0.6 Python/3.11.2\r\n"
                 "Date: Mon, 06 May 2024 10:00:00 GMT\r\n"
                 "Content-type: text/html; charset=utf-8\r\n"
                 "Content-Length: 37\r\nLast-Modified: Mon, 06 May 2024 "
                 "09:00:00 GMT\r\n\r\n<html><body>index page</body></html>\n")
NGINX_CHUNKED = ("HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\n"
                 "Date: Mon, 06 May 2024 10:00:00 GMT\r\n"
                 "Content-Type: application/json\r\n"
                 "Transfer-Encoding: chunked\r\nConnection: close\r\n"
                 "Vary: Accept-Encoding\r\n\r\n"
                 "d\r\n{\"ok\": true, \r\nb\r\n\"n\": 12345}\r\n0\r\n\r\n")
HTTP_SEEDS = {
    "resp-length": resp("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                        "Content-Length: 5\r\n\r\nhello"),
    "resp-length-bytes": resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
                              "helloEXTRA", (1, 1, 1, 1)),
    "resp-python": resp(PYTHON_SERVER, (7, 0, 30, 2)),
    "resp-nginx-chunked": resp(NGINX_CHUNKED, (3, 17, 1, 255)),
    "resp-chunked-ext-trailer": resp(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n"
        "5;name=value\r\nhello\r\n1 \r\n!\r\n0\r\nX-Trailer: t\r\n"
        "Expires: never\r\n\r\n", (2, 0, 5, 1), eof_with_last=True),
    "resp-chunked-and-length": resp(
        "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n"
        "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
    "resp-close": resp("HTTP/1.0 200 OK\r\nServer: x\r\n\r\n"
                       "the body runs to the end of the stream", (9, 9, 0, 9)),
    "resp-close-empty": resp("HTTP/1.1 200 OK\r\n\r\n", eof_with_last=True),
    "resp-continue": resp("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 "
                          "Processing\r\nX-Progress: 1\r\n\r\nHTTP/1.1 201 "
                          "Created\r\nLocation: /x\r\nContent-Length: 2"
                          "\r\n\r\nok", (5, 0, 11, 4)),
    "resp-switching": resp("HTTP/1.1 101 Switching Protocols\r\nUpgrade: "
                           "websocket\r\nConnection: Upgrade\r\n\r\n\x81\x00"),
    "resp-head": resp("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
                      head_only=True),
    "resp-204": resp("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"),
    "resp-304": resp("HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"),
    "resp-404": resp("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n"
                     "not found"),
    "resp-no-reason": resp("HTTP/1.1 200\r\ncontent-length: 0\r\n\r\n"),
    "resp-repeated": resp("HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nX-Empty:\r\n"
                          "set-cookie: b=2\r\nX-EMPTY:  \t\r\nSET-COOKIE:"
                          "\tc=3 \r\nContent-Length: 0\r\n\r\n", (4, 4, 4, 4)),
    "resp-cut-head": resp("HTTP/1.1 200 OK\r\nContent-Len"),
    "resp-cut-body": resp("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"
                          "12345"),
    "resp-cut-chunk": resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                           "\r\n\r\n10\r\nabc"),
    "bad-status-version": resp("HTTP/2 200 OK\r\n\r\n"),
    "bad-status-code": resp("HTTP/1.1 20 OK\r\n\r\n"),
    "bad-status-zero": resp("HTTP/1.1 099 Low\r\n\r\n"),
    "bad-status-junk": resp("HTTP/1.1 200OK\r\n\r\n"),
    "bad-not-http": resp("SSH-2.0-OpenSSH_9.2\r\n\r\n"),
    "bad-fold": resp("HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\n\r\n"),
    "bad-nul": resp(b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n"),
    "bad-no-colon": resp("HTTP/1.1 200 OK\r\nNoColon\r\n\r\n"),
    "bad-empty-name": resp("HTTP/1.1 200 OK\r\n: v\r\n\r\n"),
    "bad-name": resp("HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n"),
    "bad-length-junk": resp("HTTP/1.1 200 OK\r\nContent-Length: 12a\r\n\r\n"),
    "bad-length-empty": resp("HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n"),
    "bad-length-conflict": resp("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n"
                                "Content-Length: 2\r\n\r\nab"),
    "bad-length-huge": resp("HTTP/1.1 200 OK\r\nContent-Length: "
                            "99999999999999999999999\r\n\r\n"),
    "over-length-8mib": resp("HTTP/1.1 200 OK\r\nContent-Length: 8388609"
                             "\r\n\r\n"),
    "bad-chunk-size": resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                           "\r\n\r\nzz\r\n"),
    "bad-chunk-junk": resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                           "\r\n\r\n5x\r\nhello\r\n0\r\n\r\n"),
    "bad-chunk-no-crlf": resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                              "\r\n\r\n3\r\nabcXY0\r\n\r\n"),
    "over-chunk-8mib": resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                            "\r\n\r\n800001\r\n"),
    "bad-chunk-line-long": resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: "
                                "chunked\r\n\r\n1;" + "e" * 1100 +
                                "\r\nx\r\n0\r\n\r\n", (200, 0, 255, 3)),
    "chunk-line-1024": resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                            "\r\n\r\n1;" + "e" * 1022 + "\r\nx\r\n0\r\n"
                            "\r\n", (255, 255, 255, 255)),
    "bad-trailer-long": resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                             "\r\n\r\n0\r\nX-T: " + "t" * 1100 + "\r\n\r\n",
                             (64, 0, 64, 64)),
    "over-fields-201": resp("HTTP/1.1 200 OK\r\n" + "".join(
        f"X-F{i}: {i}\r\n" for i in range(201)) + "\r\n"),
    "fields-200": resp("HTTP/1.1 200 OK\r\n" + "".join(
        f"X-F{i % 7}: {i}\r\n" for i in range(199)) +
        "Content-Length: 1\r\n\r\n!", (64, 32, 16, 8)),
    "url-plain": url("http://example.com/"),
    "url-port-query": url("http://127.0.0.1:8080/a/b?x=1&y=%20#frag"),
    "url-v6": url("http://[::1]:9000/v6"),
    "url-v6-80": url("http://[2001:db8::1]/"),
    "url-bare": url("HTTP://Example.COM"),
    "url-query-only": url("http://h?q"),
    "url-https": url("https://example.com/"),
    "url-ftp": url("ftp://example.com/"),
    "url-userinfo": url("http://user:pw@example.com/"),
    "url-empty-port": url("http://h:/"),
    "url-big-port": url("http://h:99999/"),
    "url-port-zero": url("http://h:0/"),
    "url-long-port": url("http://h:000080/"),
    "url-v6-open": url("http://[::1/"),
    "url-v6-junk": url("http://[::1]x/"),
    "url-v6-zone-crlf": url("http://[::1%\r\nX-Injected: yes]:1/"),
    "url-space-path": url("http://h/a b"),
    "url-empty-host": url("http:///path"),
    "url-long-host": url("http://" + "h" * 256 + "/"),
    "hdr-plain": headers({"Accept": "*/*", "X-Id": 42}),
    "hdr-host": headers({"Host": "other:1", "X-A": ""}, post=True),
    "hdr-post-body": headers({"Content-Type": "text/plain"}, post=True,
                             body=True),
    "hdr-nil": headers(None, body=True),
    "hdr-empty-map": headers({}),
    "hdr-bad-name": headers({"Bad Name": "x"}),
    "hdr-empty-name": headers({"": "x"}),
    "hdr-crlf": headers({"X-A": "a\r\nInjected: 1"}),
    "hdr-nul": headers({"X-A": "a\u0000b"}),
    "hdr-own": headers({"content-LENGTH": "5"}),
    "hdr-int-key": headers({1: "x"}),
    "hdr-float-value": headers({"X-A": 1.5}),
    "hdr-not-map": headers(["X-A", "b"]),
    "hdr-short-map": headers(b"\x82\xa1a\xa1b"),
}

here = os.path.dirname(os.path.abspath(__file__))
for folder, seeds in (("wire", SEEDS), ("payload", PAYLOAD_SEEDS),
                      ("cli_json", CLI_JSON_SEEDS), ("http", HTTP_SEEDS)):
    out = os.path.join(here, "corpus", folder)
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {out}")

"""A protocol fuzz of an llmpack listener over real sockets (issue 46): the single server (`llmpack
run`) and Ray's ingress (`serve --ray`) answer the same routes, so one seeded stream of hostile
requests serves both (tests/test_fuzz_listeners.py, tests/test_ray_security.py, and the full run,
benchmarks/fuzz_listeners.py).

Each request is written by hand on a socket of its own, as a hostile client would: bodies built
from a valid one with hostile values put in its fields (the mutations of test_fuzz_routes.py),
every API room's content parts in the wrong places, junk and cut-short bodies, invalid UTF-8 and
control characters in the path, wrong methods and content types, header floods, a Content-Length
that lies, broken chunked encoding, request lines that are not HTTP. Every answer must be a normal
reply or a 4xx with a message, within the deadline; a request whose body never arrives whole may
also be closed without an answer, and nothing else may be.

What is sent is hostile_values.py's; the listener in a process of its own, a greedy chat through it
and the slow clients are listener_process.py's.
"""
from __future__ import annotations

import json
import random
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from hostile_values import NOT_SUPPORTED, ROUTES, bodies, hostile_id

DEADLINE_S = 60.0         # one request, from connecting to the answer's end (a short generation at most)


# ---------------------------------------------------------------- requests on the wire
@dataclass
class Case:
    """One request as bytes on a socket: `head` (request line and headers), `body`, and how the
    client behaves (`close_early`: it stops sending before the body it announced is whole)."""
    how: str
    method: str
    path: str
    head: bytes
    body: bytes = b""
    close_early: bool = False


@dataclass
class Answer:
    status: int | None          # None: the server closed the connection without an answer
    headers: dict[str, str]
    body: bytes
    seconds: float


@dataclass
class Target:
    """A listener to fuzz: its address, and what a legitimate page or client sends (the chat
    page's mark and secret for /api/chats..., the API key)."""
    host: str
    port: int
    page_headers: dict[str, str] = field(default_factory=dict)
    api_headers: dict[str, str] = field(default_factory=dict)
    routes: list[tuple[str, str, Any]] = field(default_factory=lambda: list(ROUTES))

    @property
    def hostname(self) -> str:
        return f"{self.host}:{self.port}"


def raw_request(method: str, path: str, headers: dict[str, str], body: bytes, version: str = "HTTP/1.1",
             length: int | None = None) -> bytes:
    lines = [f"{method} {path} {version}"] + [f"{k}: {v}" for k, v in headers.items()]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


def _route_path(route: str, rng: random.Random) -> str:
    path = route.replace("{id}", hostile_id(rng))
    return path.replace("{path}", rng.choice(["app.js", "style.css", "../app.py", "%2e%2e/%2e%2e/etc/passwd",
                                              "nothing.js", "vendor/" + "a" * 300, "x%00.js"]))


def cases(target: Target, n: int, seed: int) -> list[Case]:
    """`n` hostile requests over `target`'s routes, the same ones for the same seed."""
    rng = random.Random(seed)
    per_route = {(method, route): bodies(base, n, rng) for method, route, base in target.routes if isinstance(base, dict)}
    out = []
    for i in range(n):
        method, route, base = target.routes[i % len(target.routes)]
        headers = {"Host": target.hostname, "Connection": "close", **target.api_headers,
                   **(target.page_headers if route.startswith("/api/") else {})}
        path = _route_path(route, rng)
        kind = rng.random()
        if isinstance(base, dict):
            body = next(per_route[method, route])
            headers["Content-Type"] = "application/json"
        elif isinstance(base, bytes):
            body = base if rng.random() < 0.5 else bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 2000)))
            headers["X-Filename"] = rng.choice(["a.csv", "<img src=x>.csv", "..\\..\\x.txt", "é.txt", "x" * 600, ""])
            headers["Content-Type"] = rng.choice(["text/csv", "application/pdf", "application/octet-stream", "x/y"])
        else:
            body = b"" if rng.random() < 0.8 else next(bodies({"x": 1}, 1, rng))
        if kind < 0.72:        # the route's own method and a hostile body
            out.append(Case("body", method, path, raw_request(method, path, headers, body, length=len(body)), body))
        elif kind < 0.78:      # a method the route does not take (or none that exists)
            other = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "HEAD", "PROPFIND", "G(T"])
            out.append(Case("method", other, path, raw_request(other, path, headers, body, length=len(body)), body))
        elif kind < 0.83:      # the body under another content type, or none
            headers["Content-Type"] = rng.choice(["text/plain", "application/x-www-form-urlencoded",
                                                  "multipart/form-data; boundary=x", "application/json; charset=latin-1",
                                                  "application/json; charset=utf-16", "", "*/*"])
            out.append(Case("type", method, path, raw_request(method, path, headers, body, length=len(body)), body))
        elif kind < 0.87:      # a body cut short: Content-Length promises more than is sent, then the client stops
            cut = body[: rng.randint(0, max(0, len(body) - 1))]
            promised = len(body) + rng.choice([1, 100, 10_000])
            out.append(Case("truncated", method, path, raw_request(method, path, headers, b"", length=promised), cut,
                            close_early=True))
        elif kind < 0.90:      # chunked transfer encoding, well formed and not (and beside a Content-Length)
            headers["Transfer-Encoding"] = rng.choice(["chunked", "chunked, gzip", "gzip", "identity, chunked"])
            chunks = rng.choice([f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n",
                                 b"zz\r\n" + body + b"\r\n0\r\n\r\n", b"ffffffffffffffffff\r\nx\r\n0\r\n\r\n",
                                 f"{len(body) + 5:x}\r\n".encode() + body, b"-1\r\nx\r\n0\r\n\r\n",
                                 b"1;" + b"x" * 70_000 + b"\r\na\r\n0\r\n\r\n"])
            both = len(chunks) if rng.random() < 0.3 else None
            out.append(Case("chunked", method, path, raw_request(method, path, headers, b"", length=both), chunks,
                            close_early=True))
        elif kind < 0.93:      # a path or query with invalid UTF-8, control characters, or far too long
            junk = rng.choice([b"%FF%FE%FD", b"%C0%80", b"%ED%A0%80", b"\xff\xfe", b"%00", b"%0d%0aX-Injected:%201",
                               b"?" + b"&".join(b"a%d=%d" % (k, k) for k in range(3000)), b"/" * 9000,
                               b"?x=" + b"%" * 2000, b"#frag", b"/..%2f..%2f"])
            raw_path = path.encode() + junk
            head = raw_request(method, "@@", headers, body, length=len(body)).replace(b"@@", raw_path, 1)
            out.append(Case("path", method, path, head, body))
        elif kind < 0.97:      # header floods: many headers, one huge one, repeated Host or Content-Length
            flood = dict(headers)
            pick = rng.randrange(6)
            if pick == 0:
                flood.update({f"X-F{k}": "v" * 20 for k in range(rng.choice([200, 2000, 20_000]))})
            elif pick == 1:
                flood["X-Big"] = "v" * rng.choice([8_000, 70_000, 300_000])
            elif pick == 2:
                flood["Cookie"] = "; ".join(f"c{k}=v" for k in range(5000))
            elif pick == 3:
                flood["X-Bin"] = "\x00\x01\xff\x7f"
            head = raw_request(method, path, flood, body, length=len(body))
            if pick == 4:
                head = head.replace(b"\r\n\r\n", f"\r\nContent-Length: {len(body) + 3}\r\n\r\n".encode(), 1)
            elif pick == 5:
                head = head.replace(b"\r\n\r\n", b"\r\nHost: evil.example\r\n\r\n", 1)
            out.append(Case("headers", method, path, head, body))
        else:                  # request lines that are not HTTP/1.x
            line = rng.choice([b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", b"GET /\r\n\r\n",
                               b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
                               b"GET / HTTP/1.1\n\n", b"  \r\n\r\n", b"GET http://evil.example/ HTTP/1.1\r\n\r\n",
                               bytes(rng.getrandbits(8) for _ in range(200))])
            # then the client stops sending: a server still waiting for the rest of a request is not hung,
            # one that holds a connection its client has ended is
            out.append(Case("line", "?", path, line, b"", close_early=True))
    return out


def send(target: Target, case: Case, deadline_s: float = DEADLINE_S) -> Answer:
    """`case` on a socket of its own; the whole answer, read to the connection's end."""
    start = time.monotonic()
    with socket.create_connection((target.host, target.port), timeout=deadline_s) as sock:
        try:
            sock.sendall(case.head + case.body)
            if case.close_early:
                sock.shutdown(socket.SHUT_WR)
        except OSError:   # a broken pipe, a reset, or not connected any more at the half-close
            pass   # the server answered (a 4xx) or closed before it read everything: read what it said
        data = bytearray()
        while True:
            left = deadline_s - (time.monotonic() - start)
            if left <= 0:
                raise TimeoutError(f"no end of the answer within {deadline_s:.0f} s")
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    return _parse(bytes(data), time.monotonic() - start)


def _parse(data: bytes, seconds: float) -> Answer:
    if not data:
        return Answer(None, {}, b"", seconds)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
    if not m:
        raise AssertionError(f"not an HTTP answer: {data[:200]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _unchunk(body)
    return Answer(int(m.group(1)), headers, body, seconds)


def _unchunk(body: bytes) -> bytes:
    out, rest = bytearray(), body
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        out += rest[:n]
        rest = rest[n + 2:]
    return bytes(out)


def problem(case: Case, answer: Answer) -> str | None:
    """What is wrong with `answer` to `case`, or None: a 5xx, a 4xx without a message, no answer to a
    request that was sent whole."""
    if answer.status is None:
        return None if case.close_early or case.how in ("line", "headers", "path", "chunked") else "no answer"
    if answer.status == 501 and case.how == "chunked" and b"Transfer-Encoding: chunked\r\n" not in case.head:
        return None   # a transfer coding waitress does not know: RFC 9112 section 6.1 asks for this 501
    if answer.status == 501 and case.path.startswith(NOT_SUPPORTED) and \
            (b"this file holds one model" in answer.body or case.method == "HEAD" or case.close_early):
        return None   # Ollama's model management, which a one-model file answers 501 on purpose (test_ollama_api)
    if answer.status >= 500:
        return f"answered {answer.status}: {answer.body[:300]!r}"
    if case.close_early and answer.status >= 400:
        return None   # waitress closes on the client's end of sending, sometimes before the body is out
    if answer.status >= 400 and case.method != "HEAD":
        if "json" in answer.headers.get("content-type", ""):
            try:
                error = json.loads(answer.body)["error"]
                message = error if isinstance(error, str) else error["message"]
            except (ValueError, KeyError, TypeError):
                return f"a {answer.status} without an error message: {answer.body[:300]!r}"
            if not message or "\n" in message.strip():
                return f"a {answer.status} whose message is not one line: {message!r}"
        elif not answer.body.strip():
            return f"a {answer.status} with an empty body"
    return None


@dataclass
class Report:
    sent: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    slowest: float = 0.0

    def add(self, case: Case, answer: Answer | None, error: str | None) -> None:
        self.sent += 1
        key = "none" if answer is None or answer.status is None else str(answer.status)
        self.statuses[key] = self.statuses.get(key, 0) + 1
        if answer is not None:
            self.slowest = max(self.slowest, answer.seconds)
        if error:
            self.problems.append(f"{case.how} {case.method} {case.path[:80]}: {error}; sent {case.head[:160]!r}")

    def summary(self) -> str:
        return (f"{self.sent} requests, statuses {dict(sorted(self.statuses.items()))}, slowest {self.slowest:.1f} s, "
                f"{len(self.problems)} problem(s)")


def run(target: Target, n: int, seed: int, workers: int = 4,
        progress: Callable[[int], None] | None = None) -> Report:
    """`n` seeded hostile requests to `target`, `workers` at a time."""
    report, lock = Report(), threading.Lock()

    def one(case: Case) -> None:
        try:
            answer = send(target, case)
            error = problem(case, answer)
        except (TimeoutError, socket.timeout) as exc:
            answer, error = None, f"hung: {exc}"
        except OSError as exc:
            answer, error = None, f"{type(exc).__name__}: {exc}"
        with lock:
            report.add(case, answer, error)
            if progress and report.sent % 1000 == 0:
                progress(report.sent)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, cases(target, n, seed)))
    return report

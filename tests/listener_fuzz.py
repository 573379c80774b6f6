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
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from llmpack.runtime.server.http.security import CHALLENGE_PATH

DEADLINE_S = 60.0         # one request, from connecting to the answer's end (a short generation at most)

CHAT = {"title": "t", "mode": "chat", "created": 1, "updated": 2,
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "stats": {"tokens": 1}}]}
PICTURE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
CLIP = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQAAAAA="   # an empty 16 kHz WAV
# (method, route, a valid body or None): every route of the single server (create_app's url_map;
# test_fuzz_listeners.py checks that none is missing). {id} becomes an id, sometimes a hostile one.
ROUTES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    ("POST", "/v1/completions", {"prompt": "hello", "max_tokens": 2}),
    ("POST", "/v1/embeddings", {"input": "hello"}),
    ("GET", "/v1/models", None),
    ("GET", "/v1/models/{id}", None),
    ("POST", "/tokenize", {"content": "hello", "with_pieces": True}),
    ("POST", "/detokenize", {"tokens": [1, 2, 3]}),
    ("POST", "/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                               "instructions": "be brief", "max_output_tokens": 2}),   # stored: the store is fuzzed too
    ("GET", "/v1/responses/{id}", None),
    ("DELETE", "/v1/responses/{id}", None),
    ("POST", "/v1/messages", {"model": "m", "max_tokens": 2, "system": "be brief",
                              "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
    ("POST", "/v1/messages/count_tokens", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False,
                           "options": {"num_predict": 2, "temperature": 0.5}}),
    ("POST", "/api/generate", {"model": "m", "prompt": "hi", "options": {"num_predict": 2}}),
    ("POST", "/api/embed", {"model": "m", "input": ["hello", "world"]}),
    ("POST", "/api/embeddings", {"model": "m", "prompt": "hello"}),
    ("GET", "/api/tags", None),
    ("GET", "/api/ps", None),
    ("GET", "/api/version", None),
    ("POST", "/api/show", {"model": "m"}),
    ("POST", "/api/pull", {"model": "m"}),                  # Ollama's model management: one model, refused
    ("POST", "/api/push", {"model": "m"}),
    ("POST", "/api/create", {"model": "m", "from": "m"}),
    ("POST", "/api/copy", {"source": "m", "destination": "n"}),
    ("DELETE", "/api/delete", {"model": "m"}),
    ("POST", "/api/blobs/{id}", b"blob"),
    ("GET", "/api/chats", None),
    ("GET", "/api/chats/{id}", None),
    ("PUT", "/api/chats/{id}", CHAT),
    ("DELETE", "/api/chats/{id}", None),
    ("GET", "/api/chats/{id}/export", None),
    ("POST", "/api/chats/import", {"format": "llmpack-chat", "version": 1, "model": "m", **CHAT}),
    ("GET", "/api/search", None),
    ("GET", "/api/settings", None),
    ("PUT", "/api/settings", {"system_prompt": "be brief", "temperature": 0.5, "top_k": 40, "max_tokens": None}),
    ("GET", "/api/presets", None),
    ("PUT", "/api/presets", {"presets": [{"name": "Short", "system_prompt": "be brief", "temperature": 0.2}]}),
    ("POST", "/v1/extract", b"name,price\nsoup,3\n"),
    # the page's tools: MCP servers (seeded with none, so no mutation names a host to connect to) and file search
    ("GET", "/api/mcp", None),
    ("PUT", "/api/mcp/servers", {"servers": []}),
    ("POST", "/api/mcp/call", {"server": "x", "tool": "y", "arguments": {"a": 1}}),
    ("POST", "/api/tools/search", {"query": "boiler code", "files": [{"file_id": "doc-" + "0" * 32, "name": "m.txt"}]}),
    ("GET", "/", None),
    ("GET", "/static/{path}", None),
    ("GET", "/favicon.ico", None),
    ("GET", "/health", None),
    ("GET", "/metrics", None),
    ("GET", CHALLENGE_PATH, None),
]
NOT_SUPPORTED = ("/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete", "/api/blobs/")
LENGTHS = ("max_tokens", "max_completion_tokens", "max_output_tokens")   # each API's name for the reply's length
EXTRA_KEYS = ["stream", "n", "stop", "temperature", "top_p", "top_k", "min_p", "seed", "logprobs", "top_logprobs",
              "stream_options", "tools", "tool_choice", "response_format", "json_schema", "grammar", "prompt",
              "messages", "input", "content", "tokens", "add_special", "parse_special", "encoding_format",
              "title", "created", "updated", "mode", "format", "system_prompt", "max_tokens", "x", "images",
              "think", "keep_alive", "presets", "attachments", "sources", "system", "options"]


class Raw:
    """A JSON text written as is: what json.dumps never writes (1e400, NaN, invalid UTF-8, deep nesting)."""
    def __init__(self, text: bytes) -> None:
        self.text = text


HOSTILE: list[Any] = [
    None, True, False, 0, -1, 1, 3, 2**31, 2**53 + 1, 2**63, 2**64, 2**70, -(2**70), 10**400, 0.5, -0.0, 1e-320,
    1e308, -1e308, Raw(b"1e400"), Raw(b"-1e400"), Raw(b"NaN"), Raw(b"Infinity"), Raw(b"-Infinity"),
    "", "x", "\u0000", "\ud800", "\udfff\ud800x", "é" * 100, "🎉" * 50, "a" * 100_000, "<|im_start|>", "{{ 7*7 }}",
    Raw(b'"\xff\xfe\xc3 not utf-8"'), Raw(b'"\xed\xa0\x80"'), [], {}, [None, 1, "x"], [2**70], ["\ud800"],
    {"a": {"b": [1]}}, {"role": "user", "content": 1}, [{"role": "system", "content": "x" * 1000}],
    Raw(b"[" * 50 + b"]" * 50), Raw(b"[" * 5000 + b"]" * 5000), Raw(b'{"a":' * 3000 + b"1" + b"}" * 3000),
]

# Every room's content parts, well formed and not: OpenAI's chat, the Responses API's, Anthropic's.
PARTS: list[Any] = [
    {"type": "text", "text": "hi"}, {"type": "text", "text": 3}, {"type": "text"},
    {"type": "image_url", "image_url": {"url": PICTURE}}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
    {"type": "image_url", "image_url": PICTURE}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}},
    {"type": "image_url", "image_url": {"url": "javascript:alert(1)", "detail": "high"}},
    {"type": "input_audio", "input_audio": {"data": CLIP, "format": "wav"}},
    {"type": "input_audio", "input_audio": {"data": "%%%", "format": "mp3"}}, {"type": "input_audio"},
    {"type": "file", "file": {"file_data": "data:text/plain;base64,aGk=", "filename": "a.txt"}},
    {"type": "file", "file": {"file_id": "file-1"}},
    {"type": "input_text", "text": "hi"}, {"type": "input_image", "image_url": PICTURE},
    {"type": "input_image", "image_url": {"url": PICTURE}}, {"type": "input_file", "file_data": "x", "filename": 1},
    {"type": "output_text", "text": "yo"}, {"type": "refusal", "refusal": "no"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PICTURE.split(",")[1]}},
    {"type": "image", "source": {"type": "base64", "media_type": "image/tiff", "data": "AAAA"}},
    {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}},
    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "a doc"}},
    {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}, {"type": "tool_use", "id": 1, "input": "x"},
    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "r"}]},
    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "image", "source": {}}]},
    {"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "redacted_thinking", "data": "x"},
    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"},
    {"type": "function_call_output", "call_id": "c", "output": {"x": 1}},
    {"type": "no-such-part", "text": "hi"}, {"text": "no type"}, "a bare string", 7, None, [],
]
IMAGES = [[PICTURE.split(",")[1]], ["not base64 @@"], [PICTURE], [1], "AAAA", [""] * 50]   # Ollama's images


def _mutate(value: Any, rng: random.Random) -> Any:
    """The value with one hostile value put somewhere inside it (or in its place)."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice([*value, *rng.sample(EXTRA_KEYS, 3)])
        copy = dict(value)
        copy[key] = _mutate(value[key], rng) if key in value and rng.random() < 0.5 else rng.choice(HOSTILE)
        if rng.random() < 0.1:
            copy.pop(rng.choice(list(copy)), None)
        return copy
    if isinstance(value, list) and value and rng.random() < 0.7:
        copy = list(value)
        i = rng.randrange(len(copy))
        copy[i] = _mutate(copy[i], rng)
        return copy
    return rng.choice(HOSTILE)


def _encode(value: Any) -> bytes:
    raws: list[bytes] = []

    def swap(v: Any) -> Any:
        if isinstance(v, Raw):
            raws.append(v.text)
            return f"@@raw{len(raws) - 1}@@"
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list):
            return [swap(x) for x in v]
        return v

    text = json.dumps(swap(value)).encode()
    for i, raw in enumerate(raws):
        text = text.replace(f'"@@raw{i}@@"'.encode(), raw)
    return text


def bodies(base: dict, n: int, rng: random.Random) -> Iterator[bytes]:
    for i in range(n):
        if i % 20 == 0:
            yield bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))      # junk bytes
        elif i % 20 == 1:
            data = _encode(base)
            yield data[: rng.randint(0, len(data) - 1)]                              # cut short
        elif i % 20 == 2:
            yield _encode(rng.choice(HOSTILE))                                       # not an object
        elif i % 20 in (3, 4) and _has_parts(base):
            yield _encode(_short(_with_parts(base, rng), base))                      # content parts
        else:
            body = base
            for _ in range(rng.randint(1, 3)):
                body = _mutate(body, rng)
            yield _encode(_short(body, base))


def _has_parts(base: dict) -> bool:
    """A request whose first message can hold content parts."""
    listed = base.get("messages", base.get("input"))
    return isinstance(listed, list) and bool(listed) and isinstance(listed[0], dict)


def _with_parts(base: dict, rng: random.Random) -> dict:
    """`base` with its first message's content (Ollama's: its images) replaced by random content parts."""
    parts = [rng.choice(PARTS) for _ in range(rng.randint(1, 4))]
    key = "messages" if "messages" in base else "input"
    first = dict(base[key][0])
    if "options" in base and rng.random() < 0.5:   # Ollama's chat: pictures ride beside the text
        first["images"] = rng.choice(IMAGES)
    else:
        first["content"] = parts if rng.random() < 0.9 else parts[0]
    if rng.random() < 0.2:
        first["role"] = rng.choice(["assistant", "system", "tool", "developer", "x", None])
    return {**base, key: [first, *base[key][1:]]}


def _short(body: Any, base: dict) -> Any:
    """A generation request that would be accepted with a long (or no) length limit gets a short
    one, or its large limit negated (still a hostile number, now one that is refused): generating
    to the end of the context thousands of times is slow and tests nothing more."""
    if not isinstance(body, dict) or not ("messages" in base or "prompt" in base or "max_output_tokens" in base):
        return body
    if "model" in base and "max_tokens" not in base and "options" not in base:   # count_tokens, show, embed
        return body
    body = dict(body)
    if "options" in base:   # Ollama's: options.num_predict
        if isinstance(body.get("options"), dict):
            value = body["options"].get("num_predict")
            if not isinstance(value, int) or isinstance(value, bool) or value > 4 or value < 0:
                body["options"] = {**body["options"], "num_predict": 2}
        return body
    if not any(k in body for k in LENGTHS):
        body["max_output_tokens" if "max_output_tokens" in base else "max_tokens"] = 2
    for key in LENGTHS:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 4:
            body[key] = -value
    return body


def hostile_id(rng: random.Random) -> str:
    return rng.choice(["c1", "c2", "chat_3", "x" * 64, "x" * 65, "bad%20id", "%F0%9F%8E%89", "..", "c-" + "9" * 30,
                       "%FF%FE", "%00", "a%2Fb", "resp_" + "0" * 40, "%C0%AE%C0%AE", "~", "x" * 5000])


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


def _request(method: str, path: str, headers: dict[str, str], body: bytes, version: str = "HTTP/1.1",
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
            out.append(Case("body", method, path, _request(method, path, headers, body, length=len(body)), body))
        elif kind < 0.78:      # a method the route does not take (or none that exists)
            other = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "HEAD", "PROPFIND", "G(T"])
            out.append(Case("method", other, path, _request(other, path, headers, body, length=len(body)), body))
        elif kind < 0.83:      # the body under another content type, or none
            headers["Content-Type"] = rng.choice(["text/plain", "application/x-www-form-urlencoded",
                                                  "multipart/form-data; boundary=x", "application/json; charset=latin-1",
                                                  "application/json; charset=utf-16", "", "*/*"])
            out.append(Case("type", method, path, _request(method, path, headers, body, length=len(body)), body))
        elif kind < 0.87:      # a body cut short: Content-Length promises more than is sent, then the client stops
            cut = body[: rng.randint(0, max(0, len(body) - 1))]
            promised = len(body) + rng.choice([1, 100, 10_000])
            out.append(Case("truncated", method, path, _request(method, path, headers, b"", length=promised), cut,
                            close_early=True))
        elif kind < 0.90:      # chunked transfer encoding, well formed and not (and beside a Content-Length)
            headers["Transfer-Encoding"] = rng.choice(["chunked", "chunked, gzip", "gzip", "identity, chunked"])
            chunks = rng.choice([f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n",
                                 b"zz\r\n" + body + b"\r\n0\r\n\r\n", b"ffffffffffffffffff\r\nx\r\n0\r\n\r\n",
                                 f"{len(body) + 5:x}\r\n".encode() + body, b"-1\r\nx\r\n0\r\n\r\n",
                                 b"1;" + b"x" * 70_000 + b"\r\na\r\n0\r\n\r\n"])
            both = len(chunks) if rng.random() < 0.3 else None
            out.append(Case("chunked", method, path, _request(method, path, headers, b"", length=both), chunks,
                            close_early=True))
        elif kind < 0.93:      # a path or query with invalid UTF-8, control characters, or far too long
            junk = rng.choice([b"%FF%FE%FD", b"%C0%80", b"%ED%A0%80", b"\xff\xfe", b"%00", b"%0d%0aX-Injected:%201",
                               b"?" + b"&".join(b"a%d=%d" % (k, k) for k in range(3000)), b"/" * 9000,
                               b"?x=" + b"%" * 2000, b"#frag", b"/..%2f..%2f"])
            raw_path = path.encode() + junk
            head = _request(method, "@@", headers, body, length=len(body)).replace(b"@@", raw_path, 1)
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
            head = _request(method, path, flood, body, length=len(body))
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


def json_call(target: Target, method: str, path: str, body: Any = None, timeout: float = DEADLINE_S) -> Any:
    """A well-formed request; its JSON answer (AssertionError on anything but a 200)."""
    data = b"" if body is None else json.dumps(body).encode()
    headers = {"Host": target.hostname, "Connection": "close", "Content-Type": "application/json",
               **target.api_headers, **(target.page_headers if path.startswith("/api/") else {})}
    answer = send(target, Case("ok", method, path, _request(method, path, headers, data, length=len(data)), data),
                  timeout)
    assert answer.status == 200, (path, answer.status, answer.body[:500])
    return json.loads(answer.body)


GREEDY = {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 24, "temperature": 0,
          "seed": 1}


def greedy_text(target: Target) -> str:
    """A normal chat, greedy: the same text before and after the fuzz, or the engine was harmed."""
    return json_call(target, "POST", "/v1/chat/completions", GREEDY)["choices"][0]["message"]["content"]


# ---------------------------------------------------------------- slow clients
class SlowClients:
    """`loris` connections that send their headers a byte at a time and `bodies` that announce a
    body and send it a byte at a time: held open while other users are served."""

    def __init__(self, target: Target, loris: int, bodies: int, path: str = "/v1/chat/completions",
                 every_s: float = 0.5) -> None:
        self.target, self.every_s, self._stop = target, every_s, threading.Event()
        head = _request("POST", path, {"Host": target.hostname, "Content-Type": "application/json",
                                       **target.api_headers}, b"", length=1000)
        self.plans = [(head, 0) for _ in range(loris)] + [(head, len(head)) for _ in range(bodies)]
        self.socks: list[socket.socket] = []
        self.thread = threading.Thread(target=self._drip, daemon=True)

    def __enter__(self) -> SlowClients:
        for head, sent in self.plans:
            sock = socket.create_connection((self.target.host, self.target.port), timeout=10)
            sock.sendall(head[:sent])
            self.socks.append(sock)
        self.offsets = [sent for _, sent in self.plans]
        self.thread.start()
        return self

    def _drip(self) -> None:
        while not self._stop.wait(self.every_s):
            for k, sock in enumerate(self.socks):
                head = self.plans[k][0]
                data = head + b"{" * 999
                try:
                    sock.send(data[self.offsets[k]:self.offsets[k] + 1])
                    self.offsets[k] += 1
                except OSError:
                    pass

    def open(self) -> int:
        """How many of the slow connections the server still holds open."""
        alive = 0
        for sock in self.socks:
            try:
                sock.setblocking(False)
                alive += sock.recv(1, socket.MSG_PEEK) != b""
            except BlockingIOError:
                alive += 1
            except OSError:
                pass
            finally:
                sock.setblocking(True)
        return alive

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self.thread.join(10)
        for sock in self.socks:
            sock.close()


# ---------------------------------------------------------------- the listener, in a process of its own
START_S = 240


class Served:
    """An llmpack command that listens (`run`, `serve --ray`) in a child process of its own session."""

    def __init__(self, proc: subprocess.Popen, target: Target, output: list[str]) -> None:
        self.proc, self.target, self.output = proc, target, output

    def vitals(self, pid: int | None = None) -> dict[str, int]:
        """Threads, open file descriptors and resident memory (KiB) of the server's process (or `pid`)."""
        pid = pid or self.proc.pid
        status = Path(f"/proc/{pid}/status").read_text()

        def number(name: str) -> int:
            return int(re.search(rf"^{name}:\s+(\d+)", status, re.M).group(1))

        return {"threads": number("Threads"), "fds": len(os.listdir(f"/proc/{pid}/fd")), "rss_kib": number("VmRSS")}


@contextlib.contextmanager
def served(args: list[str], env: dict[str, str]) -> Iterator[Served]:
    """`python -m llmpack ARGS` until it prints LLMPACK_LISTENING and /health says ok; stopped
    (SIGINT to its session, as Ctrl+C) when the block ends."""
    proc = subprocess.Popen([sys.executable, "-m", "llmpack", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **env}, start_new_session=True)
    token, out, started = None, [], time.monotonic()
    try:
        for line in proc.stdout:
            out.append(line)
            token = token or (re.search(r"\?token=(\S+)", line) or [None, None])[1]
            if line.startswith("LLMPACK_LISTENING"):
                break
            assert time.monotonic() - started < START_S, "".join(out)[-3000:]
        url = re.search(r"http://([\d.]+):(\d+)", out[-1] if out else "")
        assert url and proc.poll() is None, "".join(out)[-3000:]
        page = {"X-Llmpack-Chat": "1", "X-Llmpack-Token": token} if token else {}
        target = Target(url[1], int(url[2]), page_headers=page)
        threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True).start()   # an unread pipe blocks it
        while b'"ok"' not in send(target, Case("ok", "GET", "/health", _request(
                "GET", "/health", {"Host": target.hostname, "Connection": "close"}, b""))).body:
            assert time.monotonic() - started < START_S and proc.poll() is None, "".join(out)[-3000:]
            time.sleep(0.2)
        yield Served(proc, target, out)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 2)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(30)

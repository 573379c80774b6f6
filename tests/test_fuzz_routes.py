"""A seeded fuzz pass over every JSON route: the OpenAI routes, llama-server's /tokenize and
/detokenize, and the chat store. Thousands of bodies per route, built from a valid one by putting
hostile values in its fields (wrong types, huge numbers, NaN and Infinity, deep nesting, long
strings, lone surrogates, invalid UTF-8) or replacing it with junk bytes. No body may get a 5xx,
the engine must keep serving, and the chat database must pass SQLite's integrity check.

The bulk goes through Flask's test client, in-process (the same app, guards and engine, without
a socket per body); a slice goes over real HTTP through waitress."""
from __future__ import annotations

import json
import random
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import requests

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer, live_server, wait_idle

SEED = 18
PER_ROUTE = 2000         # through the test client
OVER_HTTP = 60           # through waitress, per route
CHAT = {"title": "t", "mode": "chat", "created": 1, "updated": 2,
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "stats": {"tokens": 1}}]}
# (method, path, a valid body); {id} becomes a chat id, sometimes an invalid one
ROUTES = [
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    ("POST", "/v1/completions", {"prompt": "hello", "max_tokens": 2}),
    ("POST", "/v1/embeddings", {"input": "hello"}),
    ("POST", "/tokenize", {"content": "hello", "with_pieces": True}),
    ("POST", "/detokenize", {"tokens": [1, 2, 3]}),
    ("PUT", "/api/chats/{id}", CHAT),
    ("POST", "/api/chats/import", {"format": "llmpack-chat", "version": 1, "model": "m", **CHAT}),
    ("PUT", "/api/settings", {"system_prompt": "be brief", "temperature": 0.5, "top_k": 40, "max_tokens": None}),
    ("POST", "/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                               "instructions": "be brief", "max_output_tokens": 2, "store": False}),
    ("POST", "/v1/messages", {"model": "m", "max_tokens": 2, "system": "be brief",
                              "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
    ("POST", "/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False,
                           "options": {"num_predict": 2, "temperature": 0.5}}),
    ("POST", "/api/generate", {"model": "m", "prompt": "hi", "options": {"num_predict": 2}}),
]
LENGTHS = ("max_tokens", "max_completion_tokens", "max_output_tokens")   # each API's name for the reply's length
EXTRA_KEYS = ["stream", "n", "stop", "temperature", "top_p", "top_k", "min_p", "seed", "logprobs", "top_logprobs",
              "stream_options", "tools", "tool_choice", "response_format", "json_schema", "grammar", "prompt",
              "messages", "input", "content", "tokens", "add_special", "parse_special", "encoding_format",
              "title", "created", "updated", "mode", "format", "system_prompt", "max_tokens", "x"]


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


def bodies(base: dict, n: int, rng: random.Random):
    for i in range(n):
        if i % 20 == 0:
            yield bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))      # junk bytes
        elif i % 20 == 1:
            data = _encode(base)
            yield data[: rng.randint(0, len(data) - 1)]                              # cut short
        elif i % 20 == 2:
            yield _encode(rng.choice(HOSTILE))                                       # not an object
        else:
            body = base
            for _ in range(rng.randint(1, 3)):
                body = _mutate(body, rng)
            yield _encode(_short(body, base))


def _short(body: Any, base: dict) -> Any:
    """A generation request that would be accepted with a long (or no) length limit gets a short
    one, or its large limit negated (still a hostile number, now one that is refused): generating
    to the end of the context thousands of times is slow and tests nothing more."""
    if not isinstance(body, dict) or not ("messages" in base or "prompt" in base or "max_output_tokens" in base):
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


def _chat_id(rng: random.Random) -> str:
    return rng.choice(["c1", "c2", "chat_3", "x" * 64, "x" * 65, "bad%20id", "%F0%9F%8E%89", "..", "c-" + "9" * 30])


def _check(status: int, data: bytes, sent: bytes, where: str) -> None:
    assert status < 500, f"{where} answered {status} to {sent[:300]!r}: {data[:300]!r}"
    if status >= 400:   # OpenAI's and Anthropic's {"error": {"message"}}, Ollama's {"error": "..."}
        error = json.loads(data)["error"]
        message = error if isinstance(error, str) else error["message"]
        assert message and "\n" not in message.strip(), (where, error)


@pytest.fixture(scope="module")
def fuzz_server(tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory):
    mp = pytest.MonkeyPatch()
    data_dir = tmp_path_factory.mktemp("fuzz-data")
    mp.setenv("LLMPACK_DATA_DIR", str(data_dir))
    try:
        with live_server(tiny_chat_model, "--ctx", "128", "--parallel", "4") as srv:
            srv.data_dir = data_dir
            yield srv
    finally:
        mp.undo()


def test_fuzz_every_json_route(fuzz_server: LiveServer, capsys: pytest.CaptureFixture):
    srv = fuzz_server
    rng = random.Random(SEED)
    client = srv.server.app.test_client()
    secret = {"X-Llmpack-Chat": "1", "X-Llmpack-Token": srv.server.options.chat_token}
    counts: dict[str, dict[int, int]] = {}
    for method, path, base in ROUTES:
        seen = counts.setdefault(path, {})
        for i, data in enumerate(bodies(base, PER_ROUTE + OVER_HTTP, rng)):
            url = path.replace("{id}", _chat_id(rng))
            headers = {"Content-Type": "application/json", **(secret if url.startswith("/api/") else {})}
            if i < PER_ROUTE:
                resp = client.open(url, method=method, data=data, headers=headers)
                status, out = resp.status_code, resp.get_data()   # a stream is read to its end
            else:
                r = requests.request(method, srv.url + url, data=data, headers=headers, timeout=120)
                status, out = r.status_code, r.content
            _check(status, out, data, f"{method} {url}")
            seen[status] = seen.get(status, 0) + 1
    with capsys.disabled():
        total = sum(sum(s.values()) for s in counts.values())
        print(f"\nfuzz: {total} bodies, {PER_ROUTE} per route in-process + {OVER_HTTP} over HTTP")
        for path, seen in counts.items():
            print(f"fuzz: {path}: {sum(seen.values())} bodies, statuses {dict(sorted(seen.items()))}")
    for path, seen in counts.items():
        assert sum(seen.values()) == PER_ROUTE + OVER_HTTP
        assert seen.get(200, 0) > 0 and sum(v for k, v in seen.items() if k >= 400) > PER_ROUTE // 4, (path, seen)

    # no thread died: the engine's own, and waitress's (it still answers over HTTP below)
    assert srv.server.state.phase == "ready" and srv.engine.is_alive()
    wait_idle(srv.engine)
    reply = srv.openai().chat.completions.create(model=srv.model_id, messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=2)
    assert reply.choices[0].message is not None
    assert requests.get(srv.url + "/health", timeout=10).json()["status"] == "ok"
    listed = requests.get(srv.url + "/api/chats", headers=secret, timeout=10)
    assert listed.status_code == 200
    json.loads(listed.text, parse_constant=lambda name: pytest.fail(f"{name} in the chat list"))
    with closing(sqlite3.connect(srv.data_dir / "chats.sqlite3")) as con:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        for (text,) in con.execute("SELECT messages FROM chats UNION ALL SELECT data FROM settings"):
            json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} stored"))

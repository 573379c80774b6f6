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

import pytest
import requests

from hostile_values import bodies   # the hostile values and mutations, shared with the socket-level fuzz
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

"""runtime/scale/bridge.py without Ray: the prefix keys the router matches on, and an HTTP request
replayed into a WSGI app as waitress would hand it over (streamed, with its disconnect check)."""
from __future__ import annotations

import json
import threading

from llmpack.runtime.scale.bridge import PREFIX_CHUNK, HttpCall, HttpHead, prefix_keys, prompt_text, run_wsgi


def chat_body(system: str, user: str) -> bytes:
    return json.dumps({"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}).encode()


def test_chats_sharing_a_system_prompt_share_their_first_keys_and_differ_after():
    system = "Be brief. " * 100
    a = prefix_keys(prompt_text("/v1/chat/completions", chat_body(system, "first question")))
    b = prefix_keys(prompt_text("/v1/chat/completions", chat_body(system, "another one entirely")))
    shared = len(system) // PREFIX_CHUNK
    assert a[:shared] == b[:shared] and len(a) >= shared
    other = prefix_keys(prompt_text("/v1/chat/completions", chat_body("Be long. " * 100, "first question")))
    assert other[0] != a[0]


def test_only_api_requests_with_a_prompt_have_a_routing_text():
    assert prompt_text("/v1/completions", json.dumps({"prompt": ["abc", "def"]}).encode()) == "abc"
    assert prompt_text("/v1/completions", json.dumps({"prompt": [1, 2, 3]}).encode()) == "1 2 3"
    assert prompt_text("/health", b"") == "" and prompt_text("/v1/completions", b"{not json") == ""
    assert prefix_keys("short") == []


def test_a_request_is_replayed_into_the_app_and_streamed_back():
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        start_response("201 Created", [("Content-Type", "text/event-stream")])
        return iter([b"data: 1\n\n", b"", b"data: 2\n\n"])

    call = HttpCall("POST", "/v1/completions", "x=1", [("Content-Type", "application/json"), ("Authorization", "Bearer k")],
                    b'{"prompt": "hi"}', "10.0.0.7", ("127.0.0.1", 8123))
    cancelled = threading.Event()
    out = list(run_wsgi(app, call, cancelled))
    assert out == [HttpHead(201, [("Content-Type", "text/event-stream")]), b"data: 1\n\n", b"data: 2\n\n"]
    assert seen["wsgi.input"].read() == b'{"prompt": "hi"}' and seen["CONTENT_LENGTH"] == "16"
    assert seen["HTTP_AUTHORIZATION"] == "Bearer k" and seen["CONTENT_TYPE"] == "application/json"
    assert (seen["QUERY_STRING"], seen["REMOTE_ADDR"], seen["SERVER_PORT"]) == ("x=1", "10.0.0.7", "8123")
    assert seen["waitress.client_disconnected"]() is False
    cancelled.set()
    assert seen["waitress.client_disconnected"]() is True   # the server's watcher aborts the request


def test_a_cancelled_call_closes_the_apps_stream_at_the_next_chunk():
    closed = threading.Event()

    def app(environ, start_response):
        start_response("200 OK", [])

        def body():
            try:
                for i in range(1000):
                    yield b"x"
            finally:
                closed.set()
        return body()

    cancelled = threading.Event()
    got = []
    for item in run_wsgi(app, HttpCall("GET", "/v1/x"), cancelled):
        got.append(item)
        if len(got) == 3:
            cancelled.set()
    assert len(got) == 3 and closed.is_set()


def test_hostile_paths_and_content_parts_reach_the_app_as_the_single_server_gives_them():
    """Found by the protocol fuzz of Ray's ingress (issue 46): a part whose "text" is not text, or
    JSON nested too deep for Python's parser, made the ingress's routing hint raise (a bare 500), and a path that decodes beyond Latin-1 made
    Werkzeug raise in the replica (a 503 naming Ray's internals). The single server's app answers both."""
    body = json.dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}, {"text": "hi"}]}]})
    assert prompt_text("/v1/chat/completions", body.encode()) == "<user>hi"
    assert prompt_text("/v1/completions", b"[" * 5000 + b"]" * 5000) == ""   # too deep for json: no hint
    from flask import Flask

    app = Flask(__name__)

    @app.get("/api/chats/<chat_id>")
    def chat(chat_id: str):
        return {"id": chat_id}

    for path, query, want in (("/api/chats/\U0001f389", "", "\U0001f389"), ("/api/chats/\ufffd\ufffd", "a=\u00e9", "\ufffd\ufffd")):
        out = list(run_wsgi(app, HttpCall("GET", path, query, [], b"", "127.0.0.1", ("127.0.0.1", 8000)),
                            threading.Event()))
        assert out[0].status == 200 and json.loads(b"".join(out[1:]))["id"] == want

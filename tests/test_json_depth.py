"""How deep a request's JSON may nest (http/context.py, MAX_JSON_DEPTH = 128, serde_json's
default): deeper is a 400 that says so, found before json parses it. Found by the protocol fuzz:
json's scanner recursed in C for each level, and the stack pages a 5,000-deep body touched stayed
resident in whichever of waitress's threads took it (issue 46)."""
from __future__ import annotations

import json

import requests

from llmpack.runtime.server.http.context import MAX_JSON_DEPTH, too_deep
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer


def nested(depth: int, leaf: object = 1) -> object:
    for k in range(depth):
        leaf = [leaf] if k % 2 else {"k": leaf}
    return leaf


def test_depth_is_counted_over_arrays_and_objects():
    assert not too_deep(json.dumps(nested(MAX_JSON_DEPTH)).encode())
    assert too_deep(json.dumps(nested(MAX_JSON_DEPTH + 1)).encode())


def test_brackets_inside_strings_do_not_count():
    text = "[{" * 500 + 'a "quoted" \\ part'
    assert not too_deep(json.dumps({"content": text, "list": [text, {"x": text}]}).encode())
    assert not too_deep(json.dumps(nested(MAX_JSON_DEPTH, leaf="]]]" + "[" * 300)).encode())


def test_many_siblings_are_not_depth():
    assert not too_deep(json.dumps({"messages": [{"role": "user", "content": [{"type": "text"}]}] * 5000}).encode())


def test_a_body_past_the_depth_is_a_400_and_the_server_answers_on(chat_server: LiveServer):
    body = {"model": "m", "prompt": "hi", "stream": False, "options": {"num_predict": 2}}
    deep = requests.post(chat_server.url + "/api/generate", json={**body, "extra": nested(MAX_JSON_DEPTH + 5)}, timeout=60)
    assert deep.status_code == 400
    assert f"nested more than {MAX_JSON_DEPTH} levels deep" in deep.text
    # Ollama ignores a field it does not know, however it is shaped: one as deep as allowed is read
    ok = requests.post(chat_server.url + "/api/generate", json={**body, "extra": nested(MAX_JSON_DEPTH - 2)}, timeout=60)
    assert ok.status_code == 200, ok.text
    assert ok.json()["done"] is True

"""Ollama's native API (/api/*) on a tiny model whose reply is known: NDJSON streaming, options
mapped to our sampling, JSON format, the model listing, embeddings, errors as {"error": ...},
and a clear answer to pull/push/create: this file holds one model."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest
import requests

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import SCRIPTED_REPLY, LiveServer, live_server

REPLY = "".join(SCRIPTED_REPLY)
CHAT = {"model": "tiny:latest", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture(scope="module")
def server(scripted_model: Path) -> Iterator[LiveServer]:
    with live_server(scripted_model) as srv:
        yield srv


def test_chat_streams_ndjson_by_default(server: LiveServer):
    resp = requests.post(server.url + "/api/chat", json=CHAT, stream=True, timeout=60)
    assert resp.headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in resp.iter_lines() if x]
    assert len(lines) > 2 and all(x["done"] is False for x in lines[:-1])
    assert "".join(x["message"]["content"] for x in lines) == REPLY
    last = lines[-1]
    assert last["done"] is True and last["done_reason"] == "stop" and last["eval_count"] >= len(SCRIPTED_REPLY)
    assert all(isinstance(last[k], int) for k in ("total_duration", "prompt_eval_duration", "eval_duration"))
    assert last["model"] == server.model_id and last["created_at"].endswith("Z")


def test_chat_whole_and_options(server: LiveServer):
    whole = server.post("/api/chat", {**CHAT, "stream": False}).json()
    assert whole["message"] == {"role": "assistant", "content": REPLY} and whole["done"] is True
    cut = server.post("/api/chat", {**CHAT, "stream": False, "options": {"num_predict": 2, "num_ctx": 4096}}).json()
    assert cut["done_reason"] == "length"
    bad = server.post("/api/chat", {**CHAT, "options": {"temperature": "hot"}})
    assert bad.status_code == 400 and "options.temperature" in bad.json()["error"]
    # Ollama ignores an option or a field it does not know (a warning in its log): so does this room
    unknown = server.post("/api/chat", {**CHAT, "stream": False, "options": {"temprature": 1}, "logprobs": False})
    assert unknown.status_code == 200 and unknown.json()["message"]["content"] == REPLY


def test_format_json_and_think_on_a_model_that_does_not_think(server: LiveServer):
    out = server.post("/api/chat", {**CHAT, "stream": False, "format": "json", "options": {"num_predict": 60}}).json()
    json.loads(out["message"]["content"])
    refused = server.post("/api/chat", {**CHAT, "think": True})
    assert refused.status_code == 400 and "thinking" in refused.json()["error"]


def test_generate_chat_and_raw(server: LiveServer):
    gen = server.post("/api/generate", {"model": "x", "prompt": "Hi", "stream": False}).json()
    assert gen["response"] == REPLY and gen["done"] is True
    raw = server.post("/api/generate", {"model": "x", "prompt": "hello\n", "raw": True, "stream": False,
                                        "options": {"num_predict": 3}}).json()
    assert raw["done_reason"] == "length"
    loaded = server.post("/api/generate", {"model": "x"}).json()
    assert loaded["done_reason"] == "load" and loaded["response"] == ""


def test_the_one_model_is_listed_shown_and_running(server: LiveServer):
    (tag,) = requests.get(server.url + "/api/tags", timeout=10).json()["models"]
    assert tag["name"] == tag["model"] == server.model_id and tag["details"]["format"] == "gguf"
    (ps,) = requests.get(server.url + "/api/ps", timeout=10).json()["models"]
    assert ps["name"] == server.model_id and ps["context_length"] == server.state.model.n_ctx
    show = server.post("/api/show", {"model": server.model_id}).json()
    assert "completion" in show["capabilities"] and "<|im_start|>" in show["template"]
    assert requests.get(server.url + "/api/version", timeout=10).json()["version"]


def test_embed(chat_server: LiveServer):
    """(The random-weight tiny model: the scripted one's zeroed weights embed to nothing.)"""
    server = chat_server
    out = server.post("/api/embed", {"model": "x", "input": ["hello", "world"]}).json()
    assert len(out["embeddings"]) == 2 and len(out["embeddings"][0]) == 64 and out["prompt_eval_count"] > 0
    legacy = server.post("/api/embeddings", {"model": "x", "prompt": "hello"}).json()
    assert legacy["embedding"] == out["embeddings"][0]


@pytest.mark.parametrize(("method", "path"), [("POST", "/api/pull"), ("POST", "/api/push"), ("POST", "/api/create"),
                                              ("POST", "/api/copy"), ("DELETE", "/api/delete")])
def test_model_management_says_this_file_holds_one_model(server: LiveServer, method: str, path: str):
    resp = requests.request(method, server.url + path, json={"model": "llama3"}, timeout=10)
    assert resp.status_code == 501 and "this file holds one model" in resp.json()["error"]


def test_a_401_is_ollama_shaped(scripted_model: Path):
    with live_server(scripted_model, "--api-key", "k3y") as srv:
        resp = srv.post("/api/chat", CHAT)
        assert resp.status_code == 401 and isinstance(resp.json()["error"], str)
        assert srv.post("/api/chat", {**CHAT, "stream": False}, headers={"Authorization": "Bearer k3y"}).ok

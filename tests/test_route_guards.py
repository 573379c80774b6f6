"""Which routes the API key guards, and the one Content-Security-Policy every page gets.

The key check is deny-by-default (security.public marks the exceptions), so this walks Flask's
URL map rather than a list of paths: a route added later is either guarded, which the walk
proves by getting a 401 without the key, or public, which it may only be when it is named here.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import requests

from llmpack.runtime.server.app import create_app, webui_dir
from llmpack.runtime.server.http.options import ServerOptions
from llmpack.runtime.server.http.security import PAGE_CSP, public_reason
from llmpack.runtime.server.lifecycle import instance
from llmpack.runtime.server.http.state import ServerState
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server

KEY = "s3cret-key"
# Each public endpoint, and the one reason it needs no key (security.public's argument says more).
PUBLIC = {
    "index": "the page",
    "static_file": "the page's files",
    "favicon": "the page's icon",
    "health": "readiness; details only with the key",
    "instance_challenge": "an HMAC under the instance lock's secret: nothing without it",
    "chats.list_chats": "the chat secret", "chats.get_chat": "the chat secret", "chats.put_chat": "the chat secret",
    "chats.delete_chat": "the chat secret", "chats.export_chat": "the chat secret",
    "chats.import_chat": "the chat secret", "chats.get_settings": "the chat secret",
    "chats.put_settings": "the chat secret", "chats.search_chats": "the chat secret",
    "chats.get_presets": "the chat secret", "chats.put_presets": "the chat secret",
}


@pytest.fixture(scope="module")
def keyed_app():
    return create_app(ServerState("Guarded"), ServerOptions(port=0, api_key=KEY, chat_token="chat-secret"))


def _example_path(rule) -> str:
    """The rule's path with a plausible value in every <variable>."""
    return re.sub(r"<(?:[^:>]+:)?([^>]+)>", lambda m: {"filename": "app.js"}.get(m.group(1), "abc"), rule.rule)


def _refused_for_the_key(resp, blueprint: str | None) -> bool:
    """A 401 about the key, in the shape of the route's protocol (Anthropic's, Ollama's, else OpenAI's)."""
    body = resp.get_json()
    if blueprint == "anthropic":
        return body["type"] == "error" and body["error"]["type"] == "authentication_error"
    if blueprint == "ollama":
        return isinstance(body["error"], str) and "API key" in body["error"]
    return body["error"]["code"] == "invalid_api_key"


def test_every_route_is_either_named_public_or_refused_without_the_key(keyed_app):
    client = keyed_app.test_client()
    public, guarded = set(), []
    for rule in keyed_app.url_map.iter_rules():
        if public_reason(keyed_app, rule.endpoint) is not None:
            public.add(rule.endpoint)
            continue
        blueprint = rule.endpoint.rpartition(".")[0] or None
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            resp = client.open(_example_path(rule), method=method, json={} if method != "GET" else None)
            assert resp.status_code == 401, f"{method} {rule.rule} answers {resp.status_code} without the API key"
            assert _refused_for_the_key(resp, blueprint), (rule.rule, resp.get_json())
            for header in ({"Authorization": f"Bearer {KEY}"}, {"x-api-key": KEY}):   # Anthropic's clients: x-api-key
                ok = client.open(_example_path(rule), method=method, json={} if method != "GET" else None,
                                 headers=header)
                assert ok.status_code != 401, f"{method} {rule.rule} refuses the right key in {header}"
            guarded.append(f"{method} {rule.rule}")
    assert public == set(PUBLIC), ("a route is public that this test does not know, or one it knows is gone: "
                                   f"{sorted(public ^ set(PUBLIC))}")
    for needed in ("POST /tokenize", "POST /detokenize", "POST /v1/chat/completions", "GET /metrics",
                   "POST /v1/responses", "GET /v1/responses/<response_id>", "DELETE /v1/responses/<response_id>",
                   "POST /v1/messages", "POST /v1/messages/count_tokens", "POST /api/chat", "POST /api/generate",
                   "GET /api/tags", "POST /api/show", "GET /api/ps", "GET /api/version", "POST /api/embed",
                   "POST /api/pull", "DELETE /api/delete"):
        assert needed in guarded, guarded
    # an unknown path says nothing about which routes exist
    assert client.get("/no/such/route").status_code == 401


def test_tokenize_and_detokenize_need_the_key_on_a_live_server(tiny_chat_model: Path):
    with live_server(tiny_chat_model, "--api-key", KEY) as srv:
        for path, body in (("/tokenize", {"content": "hello"}), ("/detokenize", {"tokens": [1, 2]})):
            assert srv.post(path, body).status_code == 401
            assert srv.post(path, body, headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert srv.post(path, body, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        assert requests.get(srv.url + "/health", timeout=10).status_code == 200   # public
        assert requests.get(srv.url + "/static/app.js", timeout=10).status_code == 200


def test_every_html_response_carries_the_page_csp(keyed_app):
    client = keyed_app.test_client()
    pages = ["/", "/?token=x", "/static/index.html"] + [
        f"/static/{p.name}" for p in webui_dir().iterdir() if p.suffix in (".html", ".svg")]
    for path in pages:
        resp = client.get(path)
        assert resp.status_code == 200, path
        assert resp.headers.get("Content-Security-Policy") == PAGE_CSP, path
    assert "script-src 'self'" in PAGE_CSP and "frame-ancestors 'none'" in PAGE_CSP


def test_the_new_protocols_get_the_host_check_and_cors(tiny_chat_model: Path):
    """DNS rebinding is refused on every route, and with --cors a browser may call them with
    Anthropic's headers (x-api-key, anthropic-version) and Ollama's DELETE."""
    with live_server(tiny_chat_model, "--cors") as srv:
        for path in ("/v1/responses", "/v1/messages", "/api/chat"):
            rebound = requests.post(srv.url + path, json={}, headers={"Host": f"evil.example:{srv.port}"}, timeout=10)
            assert rebound.status_code == 403, path
        pre = requests.options(srv.url + "/v1/messages", timeout=10, headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-api-key, anthropic-version, content-type"})
        allowed = pre.headers["Access-Control-Allow-Headers"].lower()
        assert pre.status_code == 204 and "x-api-key" in allowed and "anthropic-version" in allowed
        assert "DELETE" in pre.headers["Access-Control-Allow-Methods"]


def test_health_gives_details_only_with_the_key():
    state = ServerState("Guarded")
    state.instance = "5167a0c3e1"
    state.set_progress("extracting", 0.5, "Unpacking the model to /home/me/.cache/llmpack/models/x.gguf")
    state.unpack = {"path": "/home/me/.cache/llmpack/models/x.gguf", "bytes": 10}
    client = create_app(state, ServerOptions(port=0, api_key=KEY)).test_client()
    brief = client.get("/health")
    assert brief.status_code == 503 and brief.get_json() == {"status": "loading", "phase": "extracting",
                                                              "progress": 0.5, "display_name": "Guarded"}
    full = client.get("/health", headers={"Authorization": f"Bearer {KEY}"}).get_json()
    assert full["unpack"]["path"].endswith("x.gguf") and full["instance"] == "5167a0c3e1"
    state.set_error("llama.cpp failed: /home/me/secret/model.gguf: invalid magic")
    refused = client.get("/health").get_json()
    assert refused["status"] == "error" and "/home/me" not in refused["message"]
    assert "invalid magic" in client.get("/health", headers={"Authorization": f"Bearer {KEY}"}).get_json()["message"]


def test_the_instance_challenge_needs_a_nonce_and_proves_the_secret():
    state = ServerState("Guarded")
    state.instance = "5167a0c3e1"
    client = create_app(state, ServerOptions(port=0, api_key=KEY)).test_client()
    assert client.get("/api/instance").status_code == 404
    body = client.get("/api/instance?nonce=" + "ab" * 16).get_json()
    assert body == {"instance": "5167a0c3e1", "proof": instance.proof(state.instance_secret, "ab" * 16)}


def test_each_route_has_a_body_limit_checked_before_the_key_and_before_reading(keyed_app):
    """A body past the route's limit is refused from its Content-Length alone, before the key is
    checked and before anything reads it; waitress itself takes no more than the largest limit."""
    from llmpack.runtime.core.attachments import ATTACH_BODY   # lazy: only this test needs them
    from llmpack.runtime.server.lifecycle.sockets import waitress_settings

    client = keyed_app.test_client()
    big = b"x" * (9 << 20)                          # over the 8 MB of a JSON route
    r = client.post("/tokenize", data=big, content_type="application/json")
    assert r.status_code == 413 and r.get_json()["error"]["code"] == "request_too_large"
    r = client.post("/v1/chat/completions", data=big, content_type="application/json")
    assert r.status_code == 401                      # files ride in chat requests: its limit is higher
    from llmpack.runtime.server.http.options import MAX_BODY   # lazy: as above

    assert waitress_settings(16)["max_request_body_size"] == ATTACH_BODY + MAX_BODY   # was ATTACH_BODY + 4 x MAX_BODY

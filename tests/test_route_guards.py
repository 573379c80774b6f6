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
from llmpack.runtime.server.http.state import ServerState
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server

KEY = "s3cret-key"
# Each public endpoint, and the one reason it needs no key (security.public's argument says more).
PUBLIC = {
    "index": "the page",
    "static_file": "the page's files",
    "favicon": "the page's icon",
    "health": "readiness, without the system prompt",
    "chats.list_chats": "the chat secret", "chats.get_chat": "the chat secret", "chats.put_chat": "the chat secret",
    "chats.delete_chat": "the chat secret", "chats.export_chat": "the chat secret",
    "chats.import_chat": "the chat secret", "chats.get_settings": "the chat secret",
    "chats.put_settings": "the chat secret",
}


@pytest.fixture(scope="module")
def keyed_app():
    return create_app(ServerState("Guarded"), ServerOptions(port=0, api_key=KEY, chat_token="chat-secret"))


def _example_path(rule) -> str:
    """The rule's path with a plausible value in every <variable>."""
    return re.sub(r"<(?:[^:>]+:)?([^>]+)>", lambda m: {"filename": "app.js"}.get(m.group(1), "abc"), rule.rule)


def test_every_route_is_either_named_public_or_refused_without_the_key(keyed_app):
    client = keyed_app.test_client()
    public, guarded = set(), []
    for rule in keyed_app.url_map.iter_rules():
        if public_reason(keyed_app, rule.endpoint) is not None:
            public.add(rule.endpoint)
            continue
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            resp = client.open(_example_path(rule), method=method, json={} if method != "GET" else None)
            assert resp.status_code == 401, f"{method} {rule.rule} answers {resp.status_code} without the API key"
            assert resp.get_json()["error"]["code"] == "invalid_api_key"
            ok = client.open(_example_path(rule), method=method, json={} if method != "GET" else None,
                             headers={"Authorization": f"Bearer {KEY}"})
            assert ok.status_code != 401, f"{method} {rule.rule} refuses the right key"
            guarded.append(f"{method} {rule.rule}")
    assert public == set(PUBLIC), ("a route is public that this test does not know, or one it knows is gone: "
                                   f"{sorted(public ^ set(PUBLIC))}")
    for needed in ("POST /tokenize", "POST /detokenize", "POST /v1/chat/completions", "GET /metrics"):
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

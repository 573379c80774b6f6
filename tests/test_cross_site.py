"""A web page on another site, or on another port of this computer, cannot make the server do
work: every method other than GET/HEAD/OPTIONS from another origin is refused (403,
`cross_site_request`) unless --cors allows it. Browsers mark such requests with Sec-Fetch-Site and
Origin; tools that are not browsers send neither and are not affected. The Chromium test sends
the `fetch(url, {mode: "no-cors"})` a hostile page would: a simple request, no preflight."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from browser_fixtures import *  # noqa: F401,F403
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer, live_server

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def post(srv: LiveServer, headers: dict) -> requests.Response:
    return requests.post(srv.url + "/v1/chat/completions", json=BODY, headers=headers, timeout=120)


@pytest.mark.parametrize("headers", [
    {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
    {"Sec-Fetch-Site": "same-site", "Origin": "http://localhost:3000"},     # another port of this computer
    {"Origin": "https://evil.example"},                                    # an older browser: Origin only
    {"Origin": "null"},                                                    # a sandboxed frame or a file:// page
])
def test_requests_from_another_origin_are_refused(chat_server: LiveServer, headers: dict):
    r = post(chat_server, headers)
    assert r.status_code == 403, r.text
    err = r.json()["error"]
    assert err["code"] == "cross_site_request" and "--cors" in err["message"] and "\n" not in err["message"]


def test_the_page_itself_and_other_tools_are_served(chat_server: LiveServer):
    own = {"Sec-Fetch-Site": "same-origin", "Origin": chat_server.url}
    assert post(chat_server, own).status_code == 200
    assert post(chat_server, {}).status_code == 200                      # curl, the SDKs
    assert post(chat_server, {"Sec-Fetch-Site": "none"}).status_code == 200   # typed into the address bar
    r = requests.get(chat_server.url + "/v1/models", headers={"Sec-Fetch-Site": "cross-site"}, timeout=30)
    assert r.status_code == 200                                            # reading is not changing


def test_cors_lets_other_origins_in(tiny_chat_model: Path):
    with live_server(tiny_chat_model, "--cors") as srv:
        r = post(srv, {"Sec-Fetch-Site": "cross-site", "Origin": "https://app.example"})
        assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "*"


class _Attacker(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args):
        pass


def test_a_no_cors_post_from_another_origin_in_chromium_is_refused(chat_server: LiveServer, browser,
                                                                   monkeypatch: pytest.MonkeyPatch):
    """The attacker's page is served by a second local server on another port: same site as the
    llmpack server, another origin. Its no-cors POST of a file to /v1/extract (any body, no
    preflight: the one route that took any Content-Type and a name in the query) must not make the
    server read it; the same upload from the server's own page is read."""
    from llmpack.runtime.server.page import extract_routes as attachments   # lazy: the route module, to count its reads

    reads = []
    real = attachments.extract
    monkeypatch.setattr(attachments, "extract", lambda *a, **kw: (reads.append(a[0]), real(*a, **kw))[1])
    send = ("fetch(%r, {method: 'POST', mode: %r, headers: %s, body: 'Some notes.'})"
            ".then(r => r.type + ' ' + r.status, e => 'error ' + e)")
    handler = type("Handler", (_Attacker,), {"page": b"<!doctype html><title>attacker</title>"})
    attacker = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.goto(f"http://localhost:{attacker.server_address[1]}/")
        target = chat_server.url + "/v1/extract?filename=stolen.txt"
        assert page.evaluate(send % (target, "no-cors", "{'Content-Type': 'text/plain'}")) == "opaque 0"
        page.wait_for_timeout(1000)
        assert reads == [], "a page on another origin made the server read a file"
        page.goto(chat_server.url + "/")                                  # the server's own page
        own = send % (chat_server.url + "/v1/extract", "same-origin",
                      "{'Content-Type': 'text/plain', 'X-Filename': 'notes.txt'}")
        assert page.evaluate(own) == "basic 200" and reads == ["notes.txt"]
    finally:
        ctx.close()
        attacker.shutdown()

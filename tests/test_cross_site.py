"""A web page on another site, or on another port of this computer, cannot make the server do
work: every method other than GET/HEAD/OPTIONS from another origin is refused (403,
`cross_site_request`) unless --cors allows it. Browsers mark such requests with Sec-Fetch-Site and
Origin; tools that are not browsers send neither and are not affected. The Chromium test sends
the `fetch(url, {mode: "no-cors"})` a hostile page would: a simple request, no preflight."""
from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from browser_fixtures import *  # noqa: F401,F403
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer, live_server
from llmpack.builder.build import serve_flags
from llmpack.cli import build_parser

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
    """A bare `--cors` (the same as `--cors '*'`) lets every web site in."""
    with live_server(tiny_chat_model, "--cors") as srv:
        r = post(srv, {"Sec-Fetch-Site": "cross-site", "Origin": "https://app.example"})
        assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "*"


def test_cors_origins_let_only_those_sites_in(tiny_chat_model: Path):
    """`--cors ORIGIN,ORIGIN`: those sites may call the server and read the answers (their own
    origin echoed, never `*`); any other site is refused with a reason and gets no CORS header."""
    with live_server(tiny_chat_model, "--cors", "https://App.example:443,http://localhost:3000/") as srv:
        for origin in ("https://app.example", "http://localhost:3000"):
            r = post(srv, {"Sec-Fetch-Site": "cross-site", "Origin": origin})
            assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == origin, r.text
            assert "Origin" in r.headers["Vary"]
            pre = requests.options(srv.url + "/v1/extract", timeout=30, headers={
                "Origin": origin, "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type, x-filename"})
            assert pre.status_code == 204 and pre.headers["Access-Control-Allow-Origin"] == origin
            assert "X-Filename" in pre.headers["Access-Control-Allow-Headers"]
        for origin in ("https://evil.example", "http://localhost:3001", "http://app.example", "null"):
            r = post(srv, {"Sec-Fetch-Site": "cross-site", "Origin": origin})
            assert r.status_code == 403, (origin, r.text)
            err = r.json()["error"]
            assert err["code"] == "cross_site_request" and origin in err["message"], err
            assert "not among those --cors allows (https://app.example, http://localhost:3000)" in err["message"]
            assert "Access-Control-Allow-Origin" not in r.headers
            pre = requests.options(srv.url + "/v1/chat/completions", timeout=30, headers={
                "Origin": origin, "Access-Control-Request-Method": "POST"})
            assert pre.status_code == 403 and "Access-Control-Allow-Origin" not in pre.headers
            read = requests.get(srv.url + "/v1/models", headers={"Origin": origin}, timeout=30)
            assert read.status_code == 200 and "Access-Control-Allow-Origin" not in read.headers  # its page reads nothing
        assert post(srv, {}).status_code == 200                              # curl, the SDKs: unchanged


@pytest.mark.parametrize("value, fault", [
    ("model.gguf", "'model.gguf' is not a web origin"),         # a bare --cors before the model takes it
    ("https://app.example/chat", "is not a web origin"),
    ("localhost:3000", "is not a web origin"),
    ("https://user@app.example", "is not a web origin"),
    ("https://app.example:99999", "is not a web origin"),
    ("https://*.example", "is not a web origin"),
    ("null", "'null' is the origin of every sandboxed frame"),
    ("*,https://app.example", "'*' already allows every web site"),
    (",", "give an origin"),
])
def test_a_bad_cors_origin_is_one_clear_line(value: str, fault: str, capsys: pytest.CaptureFixture):
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["run", "m.gguf", "--cors", value])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and "argument --cors:" in err and fault in err, err


def test_cors_origins_are_kept_as_a_browser_writes_them():
    """A browser's Origin is lower case, has no default port and an IDN host in punycode: the
    origins given are compared in that form."""
    args = build_parser().parse_args(["run", "m.gguf", "--cors", "HTTPS://Bücher.Example:443/,http://[::1]:8080"])
    assert args.cors == ("https://xn--bcher-kva.example", "http://[::1]:8080")


def test_cors_origins_reach_a_built_file_as_given():
    """`llmpack demo` and `build --run` pass the serve flags on to the built file: the origins
    (or `*`) arrive parsed the same."""
    for flags in (["--cors"], ["--cors", "http://localhost:3000,https://app.example"], []):
        args = build_parser().parse_args(["run", "m.gguf", *flags])
        again = build_parser().parse_args(["run", "m.gguf", *serve_flags(args)])
        assert again.cors == args.cors and args.cors in (True, False, ("http://localhost:3000", "https://app.example"))


class _Attacker(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args):
        pass


@contextmanager
def another_site(title: str = "attacker") -> Iterator[str]:
    """A page served by a second local server on another port: the same site as the llmpack
    server, another origin. Yields its origin (http://localhost:PORT)."""
    handler = type("Handler", (_Attacker,), {"page": f"<!doctype html><title>{title}</title>".encode()})
    site = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    try:
        yield f"http://localhost:{site.server_address[1]}"
    finally:
        site.shutdown()


@contextmanager
def page_on_another_site(browser) -> Iterator[Any]:
    """A Chromium page opened on another_site(): the attacker's page."""
    with another_site() as origin:
        ctx = browser.new_context()
        try:
            page = ctx.new_page()
            page.goto(origin + "/")
            yield page
        finally:
            ctx.close()


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
    with page_on_another_site(browser) as page:
        target = chat_server.url + "/v1/extract?filename=stolen.txt"
        assert page.evaluate(send % (target, "no-cors", "{'Content-Type': 'text/plain'}")) == "opaque 0"
        page.wait_for_timeout(1000)
        assert reads == [], "a page on another origin made the server read a file"
        page.goto(chat_server.url + "/")                                  # the server's own page
        own = send % (chat_server.url + "/v1/extract", "same-origin",
                      "{'Content-Type': 'text/plain', 'X-Filename': 'notes.txt'}")
        assert page.evaluate(own) == "basic 200" and reads == ["notes.txt"]


def test_a_page_of_an_allowed_origin_may_call_the_server_in_chromium_and_another_may_not(tiny_chat_model: Path,
                                                                                          browser, monkeypatch):
    """`--cors http://localhost:A`: Chromium's own CORS checks, with the server's answers. The page
    on port A uploads a file with X-Filename (a preflight) and reads the text; the page on port B
    gets no answer to its preflight, and its no-cors POST does not make the server read anything."""
    from llmpack.runtime.server.page import extract_routes as attachments   # lazy: the route module, to count its reads

    reads = []
    real = attachments.extract
    monkeypatch.setattr(attachments, "extract", lambda *a, **kw: (reads.append(a[0]), real(*a, **kw))[1])
    send = ("fetch(%r, {method: 'POST', mode: %r, headers: {'Content-Type': 'text/plain', 'X-Filename': 'notes.txt'}, "
            "body: 'Some notes.'}).then(async r => r.type + ' ' + r.status + ' ' + (r.type == 'opaque' ? '' : "
            "(await r.json()).text), e => 'error ' + e.name)")
    with another_site("site") as allowed, another_site("site") as other:
        ctx = browser.new_context()
        try:
            with live_server(tiny_chat_model, "--cors", allowed) as srv:
                page = ctx.new_page()
                page.goto(other + "/")
                assert page.evaluate(send % (srv.url + "/v1/extract", "cors")) == "error TypeError"
                assert page.evaluate(send % (srv.url + "/v1/extract", "no-cors")) == "opaque 0 "
                page.wait_for_timeout(500)
                assert reads == [], "a page of an origin --cors does not name made the server read a file"
                page.goto(allowed + "/")
                assert page.evaluate(send % (srv.url + "/v1/extract", "cors")) == "cors 200 Some notes."
                assert reads == ["notes.txt"]
        finally:
            ctx.close()


def test_a_typeless_no_cors_post_from_another_origin_in_chromium_is_not_read(chat_server: LiveServer, browser):
    """JSON with no Content-Type is read from tools (LiteLLM's Ollama providers send it so, as Ollama
    reads it: tests/test_client_quirks.py). A page on another origin can send such a body too (a
    Blob without a type: no preflight); Chromium marks it with Origin and Sec-Fetch-Site, and the
    model never runs: not through the OpenAI room nor through Ollama's."""
    from server_fixtures import finished_metric

    def finished() -> float:
        return sum(finished_metric(chat_server.url, r) for r in ("stop", "length"))

    send = ("fetch(%r, {method: 'POST', mode: 'no-cors', body: new Blob([%r])})"
            ".then(r => r.type + ' ' + r.status, e => 'error ' + e)")
    with page_on_another_site(browser) as page:
        before = finished()
        for path, body in (("/v1/chat/completions", {**BODY, "max_tokens": 2}),
                           ("/api/chat", {"model": "m", "messages": BODY["messages"], "stream": False})):
            assert page.evaluate(send % (chat_server.url + path, json.dumps(body))) == "opaque 0"
        page.wait_for_timeout(1000)
        assert finished() == before, "a page on another origin made the model answer a typeless body"

"""The app's MCP proxy for the chat page's tools (issue 45), against real MCP servers made with
the official SDK (tests/mcp_servers.py): over Streamable HTTP and as a stdio program from
--mcp-config; never an open proxy (only configured servers, behind the API key, the chat secret
and the same-origin check); a hostile server bounded (a 50 MB result, a call that never answers,
markup in a result, 500 tools) while the others keep working; ten servers at once."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from llmpack.runtime.tools.mcp_stdio import Lines
from mcp_fixtures import *  # noqa: F401,F403
from mcp_fixtures import SERVERS
from mcp_servers import LINKS, SECRET
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import chat_headers, live_server


def put_servers(srv, servers: list[dict], **kw) -> requests.Response:
    return requests.put(srv.url + "/api/mcp/servers", json={"servers": servers}, timeout=120,
                        headers={**chat_headers(srv), **kw.pop("headers", {})}, **kw)


def call(srv, server: str, tool: str, arguments: dict | None = None, **kw) -> requests.Response:
    return requests.post(srv.url + "/api/mcp/call", json={"server": server, "tool": tool, "arguments": arguments or {}},
                         timeout=kw.pop("timeout", 120), headers={**chat_headers(srv), **kw.pop("headers", {})}, **kw)


def by_name(resp: requests.Response) -> dict:
    assert resp.status_code == 200, resp.text
    return {s["name"]: s for s in resp.json()["servers"]}


def test_a_streamable_http_server_and_a_stdio_program_list_their_tools_and_answer(
        tiny_chat_model: Path, friendly_mcp: str, mcp_config: Path):
    with live_server(tiny_chat_model, "--mcp-config", str(mcp_config)) as srv:
        servers = by_name(put_servers(srv, [{"name": "notes", "url": friendly_mcp}]))
        assert servers["local"]["source"] == "config" and servers["local"]["transport"] == "stdio"
        assert servers["notes"]["source"] == "page" and servers["notes"]["transport"] == "http"
        for name in ("local", "notes"):
            assert servers[name]["status"] == "up", servers[name]
            assert {t["name"] for t in servers[name]["tools"]} == {"add", "secret_word", "shout"}
        assert call(srv, "notes", "add", {"a": 2, "b": 40}).json() == {"text": "42", "is_error": False}
        assert call(srv, "local", "secret_word").json()["text"] == SECRET
        # the page's list replaces the page's servers only; --mcp-config's stay
        assert set(by_name(put_servers(srv, []))) == {"local"}


def test_the_proxy_reaches_only_configured_servers_behind_both_keys(tiny_chat_model: Path, friendly_mcp: str):
    key = {"Authorization": "Bearer sesame"}
    with live_server(tiny_chat_model, "--api-key", "sesame") as srv:
        assert put_servers(srv, [{"name": "notes", "url": friendly_mcp}], headers=key).status_code == 200
        assert call(srv, "notes", "shout", {"text": "hi"}, headers=key).json()["text"] == "HI"
        # no API key, wrong chat secret, another web site: refused before anything is proxied
        assert call(srv, "notes", "shout", {"text": "hi"}).status_code == 401
        refused = requests.post(srv.url + "/api/mcp/call", json={"server": "notes", "tool": "shout"}, timeout=30,
                                headers={**key, "X-Llmpack-Chat": "1", "X-Llmpack-Token": "guess"})
        assert refused.status_code == 403 and "this launch's secret" in refused.json()["error"]["message"]
        cross = call(srv, "notes", "shout", {"text": "hi"},
                     headers={**key, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403
        # a server nobody configured, or a URL in place of a name: nothing to proxy to
        unknown = call(srv, "elsewhere", "shout", headers=key)
        assert unknown.status_code == 404 and "No MCP server named 'elsewhere'" in unknown.json()["error"]["message"]
        assert call(srv, friendly_mcp, "shout", headers=key).status_code == 404
        assert call(srv, "notes", "no_such_tool", headers=key).status_code == 404
        # the page adds servers by URL only: a program to start is refused, naming the field
        program = put_servers(srv, [{"name": "x", "command": "rm", "url": friendly_mcp}], headers=key)
        assert program.status_code == 400 and "servers[0]" in program.json()["error"]["message"]
        bad_url = put_servers(srv, [{"name": "x", "url": "file:///etc/passwd"}], headers=key)
        assert bad_url.status_code == 400 and "http://" in bad_url.json()["error"]["message"]


def test_a_hostile_server_is_bounded_and_the_others_keep_working(tiny_chat_model: Path, friendly_mcp: str,
                                                                   hostile_mcp: str, monkeypatch):
    monkeypatch.setenv("LLMPACK_MCP_CALL_TIMEOUT", "10")
    with live_server(tiny_chat_model) as srv:
        servers = by_name(put_servers(srv, [{"name": "notes", "url": friendly_mcp},
                                            {"name": "evil", "url": hostile_mcp}]))
        evil = servers["evil"]
        assert evil["status"] == "up" and len(evil["tools"]) == 64
        assert evil["note"] == "This server offers 500 tools; the model is offered the first 64."
        huge = call(srv, "evil", "huge")
        assert huge.status_code == 502 and "sent more than 4 MB" in huge.json()["error"]["message"]
        t0 = time.monotonic()
        hang = call(srv, "evil", "hang")
        assert hang.status_code == 504 and "did not answer within 10 s" in hang.json()["error"]["message"]
        assert time.monotonic() - t0 < 30
        # markup and instructions come back as the text they are (the page draws it as text)
        links = call(srv, "evil", "links")
        assert links.status_code == 200 and links.json()["text"] == LINKS, links.text
        assert call(srv, "notes", "add", {"a": 1, "b": 1}).json()["text"] == "2"
        # a server that is not there is shown down; the others stay up
        servers = by_name(put_servers(srv, [{"name": "notes", "url": friendly_mcp},
                                            {"name": "gone", "url": "http://127.0.0.1:9/mcp"}]))
        assert servers["gone"]["status"] == "down" and "nothing answers" in servers["gone"]["error"]
        assert servers["notes"]["status"] == "up"
        assert call(srv, "gone", "add").status_code in (404, 503)


def test_a_call_the_page_stops_is_cancelled_on_the_mcp_server(tiny_chat_model: Path, hostile_mcp: str):
    """The page's Stop aborts its fetch; the server sees its client go and sends the MCP server
    notifications/cancelled, so the tool stops too instead of running to the call's time limit."""
    with live_server(tiny_chat_model) as srv:
        put_servers(srv, [{"name": "evil", "url": hostile_mcp}])
        before = int(call(srv, "evil", "stopped_calls").json()["text"])
        with pytest.raises(requests.exceptions.ReadTimeout):
            call(srv, "evil", "hang", timeout=2)   # what the page's AbortController does: the socket closes
        deadline = time.monotonic() + 15
        while int(call(srv, "evil", "stopped_calls").json()["text"]) == before and time.monotonic() < deadline:
            time.sleep(0.25)
        assert int(call(srv, "evil", "stopped_calls").json()["text"]) == before + 1
        assert call(srv, "evil", "links").status_code == 200   # the server's session goes on


def test_a_stdio_program_that_writes_50_mb_is_bounded_and_its_session_goes_on(tiny_chat_model: Path, friendly_mcp: str,
                                                                              tmp_path: Path):
    """The SDK's stdio reader joined a line's chunks one copy at a time: 50 MB held the hub's loop
    (every server waited) and its memory. runtime/tools/mcp_stdio.py skips a line over 4 MB."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"odd": {"command": sys.executable,
                                                         "args": [str(SERVERS), "hostile", "stdio"]}}}))
    with live_server(tiny_chat_model, "--mcp-config", str(config)) as srv:
        assert by_name(put_servers(srv, [{"name": "notes", "url": friendly_mcp}]))["odd"]["status"] == "up"
        t0 = time.monotonic()
        huge = call(srv, "odd", "huge")
        assert huge.status_code == 502 and "sent more than 4 MB" in huge.json()["error"]["message"], huge.text
        assert time.monotonic() - t0 < 30
        assert call(srv, "notes", "add", {"a": 1, "b": 2}).json()["text"] == "3"
        assert call(srv, "odd", "links").json()["text"] == LINKS   # the same session, the next line


def test_stdio_lines_are_split_across_chunks_and_an_overlong_one_is_dropped():
    over = []
    lines = Lines(10, lambda: over.append(1))
    assert lines.feed(b'{"a"') == [] and lines.feed(b':1}\n{"b":2}\n\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert lines.feed(b":3}" + b"x" * 20) == [] and over == [1]     # 26 bytes of one line: dropped
    assert lines.feed(b"yyy\nok\n") == [b"ok"] and over == [1]      # its rest skipped, the next line read


def test_ten_servers_at_once(tiny_chat_model: Path, friendly_mcp: str):
    with live_server(tiny_chat_model) as srv:
        servers = by_name(put_servers(srv, [{"name": f"s{i}", "url": friendly_mcp} for i in range(10)]))
        assert [servers[f"s{i}"]["status"] for i in range(10)] == ["up"] * 10
        assert all(len(s["tools"]) == 3 for s in servers.values())
        assert [call(srv, f"s{i}", "add", {"a": i, "b": 1}).json()["text"] for i in range(10)] == \
            [str(i + 1) for i in range(10)]


@pytest.mark.parametrize("config, words", [
    ("{", "is not JSON"),
    ('{"servers": {}}', "\"mcpServers\""),
    ('{"mcpServers": {"a b": {"command": "x"}}}', "a server's name"),
    ('{"mcpServers": {"x": {"url": "ftp://h/"}}}', "mcpServers.x.url must be an http:// or https:// address"),
    ('{"mcpServers": {"x": {"command": "x", "args": "-v"}}}', "mcpServers.x.args must be a list"),
])
def test_a_bad_mcp_config_is_one_clear_line(tmp_path: Path, config: str, words: str):
    path = tmp_path / "mcp.json"
    path.write_text(config, "utf-8")
    proc = subprocess.run([sys.executable, "-m", "llmpack", "run", str(tmp_path / "m.gguf"), "--mcp-config", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_search_files_finds_passages_of_the_chats_files_in_the_document_index(tiny_chat_model: Path, chat_data: Path):
    from llmpack.runtime.documents.extract import Document

    text = "\n\n".join(f"Section {i}. " + ("Filler words about nothing much. " * 40) for i in range(30))
    text += "\n\nThe boiler code is 7391 and the boiler is in the cellar."
    with live_server(tiny_chat_model) as srv:   # the app's own index, which its route reads
        indexed = srv.state.files.index.add(Document(name="manual.txt", kind="text", text=text, size=len(text)),
                                            "test-owner")
        found = requests.post(srv.url + "/api/tools/search", headers=chat_headers(srv), timeout=60,
                              json={"query": "boiler code", "files": [{"file_id": indexed.id, "name": "manual.txt"}]})
        assert found.status_code == 200, found.text
        hits = found.json()["hits"]
        assert hits and hits[0]["name"] == "manual.txt" and "7391" in hits[0]["text"]
        # only the files named: another document's id finds nothing of this one
        other = requests.post(srv.url + "/api/tools/search", headers=chat_headers(srv), timeout=60,
                              json={"query": "boiler code", "files": [{"file_id": "doc-" + "0" * 32, "name": "x"}]})
        assert other.json()["hits"] == []
        bad = requests.post(srv.url + "/api/tools/search", headers=chat_headers(srv), timeout=60,
                            json={"query": "", "files": []})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "query"
        assert requests.post(srv.url + "/api/tools/search", timeout=60,
                             json={"query": "boiler", "files": []}).status_code == 403   # no chat secret

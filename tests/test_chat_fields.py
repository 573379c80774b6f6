"""What the chat store accepts: exports of chats titled in any language, and numbers it can give
back (a 400 naming the field for Infinity, 2**70, a negative time, an out-of-range setting)."""
from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from urllib.parse import unquote

import pytest
import requests

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server

TITLE = "Привет мир 你好 🎉 café"
MESSAGES = [{"role": "user", "content": TITLE}, {"role": "assistant", "content": "Здравствуйте!",
                                                 "stats": {"tokens": 3, "tps": 12.5, "finish": "stop"}}]


@pytest.fixture
def chat_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "data"
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(folder))
    return folder


@pytest.fixture
def srv(tiny_chat_model: Path, chat_data_dir: Path):
    with live_server(tiny_chat_model) as s:
        yield s


def _headers(srv) -> dict:
    return {"X-Llmpack-Chat": "1", "X-Llmpack-Token": srv.server.options.chat_token,
            "Content-Type": "application/json"}


def _put(srv, path: str, text: str) -> requests.Response:
    """A body sent exactly as written: JSON numbers such as 1e400 that Python's json.dumps never writes."""
    return requests.put(srv.url + path, data=text.encode(), headers=_headers(srv), timeout=10)


def _disposition_names(header: str) -> tuple[str, str]:
    """(the ASCII filename, the decoded RFC 5987 filename*) of a Content-Disposition header."""
    assert header.startswith("attachment; "), header
    plain = header.split('filename="', 1)[1].split('"', 1)[0]
    star = header.split("filename*=", 1)[1]
    charset, _, encoded = star.partition("''")
    assert charset == "UTF-8" and all(ord(c) < 128 and c not in ' ";' for c in encoded), header
    return plain, unquote(encoded, encoding="utf-8", errors="strict")


def test_a_chat_titled_in_any_language_exports_as_json_and_markdown(srv):
    assert _put(srv, "/api/chats/intl", json.dumps({"title": TITLE, "messages": MESSAGES})).status_code == 200
    for fmt, ext in (("json", "json"), ("markdown", "md")):
        resp = requests.get(f"{srv.url}/api/chats/intl/export?format={fmt}", headers=_headers(srv), timeout=10)
        assert resp.status_code == 200, resp.text
        header = resp.headers["Content-Disposition"]
        header.encode("latin-1")   # what HTTP carries
        plain, full = _disposition_names(header)
        assert full == f"Привет-мир-你好-café.{ext}"
        assert plain == f"cafe.{ext}" and plain.isascii()
        assert TITLE in resp.content.decode("utf-8")
    # a title with nothing ASCII in it still gets a usable fallback name
    _put(srv, "/api/chats/ru", json.dumps({"title": "Привет", "messages": MESSAGES}))
    resp = requests.get(f"{srv.url}/api/chats/ru/export", headers=_headers(srv), timeout=10)
    assert _disposition_names(resp.headers["Content-Disposition"]) == ("chat.json", "Привет.json")


@pytest.mark.parametrize("field, text", [
    ("created", "1e400"), ("created", str(2**70)), ("created", "-1"), ("created", "true"), ("created", '"now"'),
    ("updated", "1e400"), ("updated", str(2**64)), ("updated", "8640000000000001"),
])
def test_out_of_range_times_are_a_400_naming_the_field(srv, field: str, text: str):
    body = f'{{"title": "t", "messages": [], "{field}": {text}}}'
    resp = _put(srv, "/api/chats/c1", body)
    assert resp.status_code == 400, (text, resp.text)
    error = resp.json()["error"]
    assert error["code"] == "invalid_chat" and f"'{field}'" in error["message"], error
    assert "\n" not in error["message"]


def test_reply_stats_and_settings_refuse_numbers_they_could_not_give_back(srv, chat_data_dir: Path):
    stats = '{"title": "t", "messages": [{"role": "assistant", "content": "x", "stats": {"tps": 1e400}}]}'
    resp = _put(srv, "/api/chats/c2", stats)
    assert resp.status_code == 400 and "messages[0].stats.tps" in resp.json()["error"]["message"]
    for size in ("1e400", str(2**70), "-1"):   # an attachment's size and token count (issue 17's field)
        files = f'[{{"name": "a.txt", "text": "hi", "size": {size}}}]'
        resp = _put(srv, "/api/chats/c2", f'{{"messages": [{{"role": "user", "content": "x", "attachments": {files}}}]}}')
        assert resp.status_code == 400 and "attachments[].size" in resp.json()["error"]["message"], resp.text
    for key, text in (("temperature", "1e400"), ("temperature", "-0.5"), ("top_p", "0"), ("top_k", str(2**70)),
                      ("top_k", "-2"), ("min_p", "1.5"), ("max_tokens", "0"), ("max_tokens", "2.5"),
                      ("max_tokens", str(2**40)), ("temperature", "true")):
        resp = _put(srv, "/api/settings", f'{{"{key}": {text}}}')
        assert resp.status_code == 400, (key, text, resp.text)
        assert resp.json()["error"]["code"] == "invalid_settings" and key in resp.json()["error"]["message"]
    good = {"temperature": 100, "top_p": 1, "top_k": -1, "min_p": 0, "max_tokens": 2**31 - 1}
    assert _put(srv, "/api/settings", json.dumps(good)).json() == {"data": good}
    ok = {"title": "t", "created": 0, "updated": 8640000000000000, "messages": MESSAGES}
    assert _put(srv, "/api/chats/c3", json.dumps(ok)).status_code == 200
    with closing(sqlite3.connect(chat_data_dir / "chats.sqlite3")) as con:
        stored = [r[0] for r in con.execute("SELECT messages FROM chats")] + [
            r[0] for r in con.execute("SELECT data FROM settings")]
    for text in stored:   # nothing the page's JSON.parse would choke on
        json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} stored: {text}"))

"""Saved chats: the SQLite store, and /api/chats behind the per-launch secret on a live server."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from llmpack.runtime.chats.chats import ChatError, ChatStore, clean_chat, to_json, to_markdown
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import chat_headers, live_server

CHAT = {"title": "Soup", "created": 1000, "updated": 2000,
        "messages": [{"role": "user", "content": "A soup?"},
                     {"role": "assistant", "content": "Try **leek**.", "stats": {"tokens": 3}}]}


def test_store_keeps_each_models_chats_apart(tmp_path: Path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    store.put("model-a", clean_chat(CHAT, chat_id="c1"))
    store.put("model-a", clean_chat({**CHAT, "title": "Newer", "updated": 3000}, chat_id="c2"))
    store.put("model-b", clean_chat(CHAT, chat_id="c1"))
    assert [c["id"] for c in store.list("model-a")] == ["c2", "c1"]        # newest first
    assert store.list("model-a")[1] == {"id": "c1", "title": "Soup", "mode": "chat", "created": 1000,
                                        "updated": 2000, "n_messages": 2}
    assert store.get("model-a", "c1")["messages"] == CHAT["messages"]
    assert store.delete("model-a", "c1") and not store.delete("model-a", "c1")
    assert [c["id"] for c in store.list("model-b")] == ["c1"]
    assert ChatStore(tmp_path / "chats.sqlite3").get("model-b", "c1")["title"] == "Soup"   # on disk


def test_a_store_follows_the_data_folder_it_is_pointed_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """One server's store, after LLMPACK_DATA_DIR names another folder (a session-wide test server
    meets each test's own): the new folder and its tables are made, nothing goes to the old one."""
    store = ChatStore()
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path / "first"))
    store.put("m", clean_chat(CHAT, chat_id="c1"))
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path / "second"))
    assert store.list("m") == []
    store.put("m", clean_chat(CHAT, chat_id="c2"))
    assert [c["id"] for c in ChatStore(tmp_path / "first" / "chats.sqlite3").list("m")] == ["c1"]
    assert [c["id"] for c in ChatStore(tmp_path / "second" / "chats.sqlite3").list("m")] == ["c2"]


def test_import_reads_what_export_writes(tmp_path: Path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    chat = store.put("m", clean_chat(CHAT, chat_id="c1"))
    copy = store.import_chat("other-model", json.loads(json.dumps(to_json(chat, "Model"))))
    assert copy["id"] != "c1" and store.get("other-model", copy["id"])["messages"] == CHAT["messages"]
    with pytest.raises(ChatError, match="not an exported chat"):
        store.import_chat("m", {"messages": []})
    with pytest.raises(ChatError, match=r"messages\[0\]"):
        clean_chat({"messages": [{"role": "robot", "content": "x"}]})
    md = to_markdown(chat, "Model")
    assert md.startswith("# Soup\n") and "## You\n\nA soup?\n" in md and "## Model\n\nTry **leek**.\n" in md


def test_importing_a_chat_that_is_already_here_does_not_duplicate_it(tmp_path: Path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    chat = store.put("m", clean_chat(CHAT, chat_id="c1"))
    exported = json.loads(json.dumps(to_json(chat, "Model")))
    again = store.import_chat("m", exported)
    assert again["id"] == "c1" and again["duplicate"] is True
    assert [c["id"] for c in store.list("m")] == ["c1"]
    changed = {**exported, "messages": [*exported["messages"], {"role": "user", "content": "And bread?"}]}
    other = store.import_chat("m", changed)
    assert other["id"] != "c1" and "duplicate" not in other and len(store.list("m")) == 2


@pytest.mark.parametrize("fence", ["```", "~~~", "````"])
def test_markdown_export_closes_a_code_block_a_reply_was_cut_off_in(fence: str):
    """A reply stopped mid-fence must not turn every later turn of the export into code."""
    cut = {"title": "Code", "messages": [
        {"role": "user", "content": "Write a loop"},
        {"role": "assistant", "content": f"Here:\n\n{fence}python\nfor i in range(3):\n    print(i)"},
        {"role": "user", "content": "Thanks **a lot**"},
        {"role": "assistant", "content": "You are welcome."}]}
    md = to_markdown(clean_chat(cut, chat_id="c"), "Model")
    before, after = md.split("    print(i)\n", 1)
    assert after.startswith(fence + "\n\n## You\n\nThanks **a lot**")
    assert md.count("\n" + fence) == 2   # opened once, closed once
    inner = "A fence inside a longer one stays text:\n\n````md\n```\nnot a close\n````\n\nend"
    done = to_markdown(clean_chat({"title": "t", "messages": [{"role": "assistant", "content": inner}]},
                                  chat_id="d"), "Model")
    assert done.endswith("````\n\nend\n")   # a closed fence gets nothing added


def test_api_needs_this_launchs_secret(tiny_chat_model: Path, chat_data: Path):
    with live_server(tiny_chat_model) as srv:
        token = srv.server.options.chat_token
        url = srv.url + "/api/chats"
        ok = chat_headers(srv)
        assert requests.get(url, timeout=10).status_code == 401
        assert requests.get(url, headers={"X-Llmpack-Token": token}, timeout=10).status_code == 401  # no mark
        assert requests.get(url, headers={**ok, "X-Llmpack-Token": "guess"}, timeout=10).status_code == 401
        cross = requests.get(url, headers={**ok, "Sec-Fetch-Site": "same-site"}, timeout=10)
        assert cross.status_code == 403 and cross.json()["error"]["code"] == "cross_site"
        assert not chat_data.exists()   # nothing written until the page saves a chat

        # the link the app opens serves the page, which keeps the secret itself: no cookie, which
        # browsers would also send to every other port of this host (tests/test_chat_secret.py)
        visit = requests.get(srv.server.page_url, allow_redirects=False, timeout=10)
        assert visit.status_code == 200 and "Set-Cookie" not in visit.headers
        assert visit.headers["Cache-Control"] == "no-store"
        jar = {f"llmpack-chat-{srv.port}": token}
        assert requests.get(url, headers={"X-Llmpack-Chat": "1"}, cookies=jar, timeout=10).status_code == 401

        assert requests.put(url + "/c1", json=CHAT, headers=ok, timeout=10).status_code == 200
        # an id the store could never hold is the client's mistake (400), not a missing chat (404)
        bad_id = requests.put(url + "/bad id!", json=CHAT, headers=ok, timeout=10)
        assert bad_id.status_code == 400 and bad_id.json()["error"]["code"] == "invalid_chat_id", bad_id.text
        bad = requests.put(url + "/c2", json={"messages": "no"}, headers=ok, timeout=10)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_chat"
        listed = requests.get(url, headers=ok, timeout=10).json()["data"]
        assert [(c["id"], c["n_messages"]) for c in listed] == [("c1", 2)]
        md = requests.get(url + "/c1/export?format=markdown", headers=ok, timeout=10)
        assert md.headers["Content-Disposition"] == 'attachment; filename="Soup.md"' and "## You" in md.text
        exported = requests.get(url + "/c1/export", headers=ok, timeout=10).json()
        imported = requests.post(url + "/import", json=exported, headers=ok, timeout=10).json()
        assert imported["id"] == "c1" and imported["duplicate"] is True   # already here: not stored twice
        assert requests.get(f"{url}/{imported['id']}", headers=ok, timeout=10).json()["messages"] == CHAT["messages"]
        assert requests.delete(url + "/c1", headers=ok, timeout=10).status_code == 200
        assert requests.get(url + "/c1", headers=ok, timeout=10).status_code == 404
        assert (chat_data / "chats.sqlite3").is_file()

        settings = srv.url + "/api/settings"
        assert requests.get(settings, timeout=10).status_code == 401
        assert requests.get(settings, headers=ok, timeout=10).json() == {"data": {}}
        saved = {"system_prompt": "Be brief.", "temperature": 0.2, "max_tokens": None}
        assert requests.put(settings, json={**saved, "junk": 1}, headers=ok, timeout=10).json() == {"data": saved}
        assert requests.get(settings, headers=ok, timeout=10).json() == {"data": saved}
        bad = requests.put(settings, json={"temperature": "hot"}, headers=ok, timeout=10)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_settings"

"""The chat store of issue 27: chats as a tree of messages (edits and replies written again are
branches), versioned saves that refuse a stale copy (409), FTS5 search over titles and
messages, presets, and chat files from before all that, which open as they were."""
from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
import requests

from llmpack.runtime.chats.chats import (ChatConflict, ChatError, ChatStore, clean_chat, clean_presets, to_json,
                                               to_markdown)
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import chat_headers, live_server

# "How do I bleed a radiator?" was edited into a question about the boiler; the first answer
# about the boiler was written again. The branch shown: q2 -> a3.
TREE = {"title": "Heating", "created": 1000, "updated": 2000, "leaf": "a3", "system": "Be brief.", "messages": [
    {"id": "q1", "parent": None, "role": "user", "content": "How do I bleed a radiator?"},
    {"id": "a1", "parent": "q1", "role": "assistant", "content": "Open the valve a quarter turn."},
    {"id": "q2", "parent": None, "role": "user", "content": "Why does my boiler lose pressure?"},
    {"id": "a2", "parent": "q2", "role": "assistant", "content": "A leak, most often."},
    {"id": "a3", "parent": "q2", "role": "assistant", "content": "Check the expansion vessel."}]}


def test_the_tree_is_kept_and_the_markdown_export_is_the_branch_shown(tmp_path: Path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    saved = store.put("m", clean_chat(TREE, chat_id="c1"), base_version=0)
    assert saved["version"] == 1
    got = store.get("m", "c1")
    assert got["messages"] == TREE["messages"] and got["leaf"] == "a3" and got["system"] == "Be brief."
    assert store.list("m")[0]["n_messages"] == 2   # the branch shown: q2, a3

    md = to_markdown(got, "Model")
    assert "## Instructions\n\nBe brief.\n" in md
    assert "boiler" in md and "expansion vessel" in md
    assert "radiator" not in md and "A leak" not in md   # other branches stay out of the transcript
    exported = json.loads(json.dumps(to_json(got, "Model")))
    assert exported["messages"] == TREE["messages"] and exported["leaf"] == "a3"
    copy = store.import_chat("other", exported)     # JSON keeps the whole tree
    again = store.get("other", copy["id"])
    assert again["messages"] == TREE["messages"] and again["leaf"] == "a3" and again["system"] == "Be brief."


@pytest.mark.parametrize("change, field", [
    ({"messages": [{"id": "a", "parent": "later", "role": "user", "content": "x"},
                   {"id": "later", "parent": None, "role": "user", "content": "y"}]}, r"messages\[0\]\.parent"),
    ({"messages": [{"id": "a", "parent": None, "role": "user", "content": "x"},
                   {"id": "a", "parent": None, "role": "user", "content": "y"}]}, r"messages\[1\]\.id"),
    ({"messages": [{"id": "a", "parent": None, "role": "user", "content": "x"},
                   {"role": "assistant", "content": "y"}]}, "every message has an 'id'"),
    ({"leaf": "nowhere"}, "'leaf'"),
    ({"messages": [{"id": "bad id!", "parent": None, "role": "user", "content": "x"}]}, r"messages\[0\]\.id"),
    ({"system": 5}, "'system'"),
])
def test_a_broken_tree_is_refused_naming_the_field(change: dict, field: str):
    with pytest.raises(ChatError, match=field):
        clean_chat({**TREE, **change}, chat_id="c")


def test_a_save_based_on_an_old_version_is_refused(tmp_path: Path):
    """Tab A loaded version 1; tab B saved version 2; A's save must not replace B's."""
    store = ChatStore(tmp_path / "chats.sqlite3")
    store.put("m", clean_chat(TREE, chat_id="c1"), base_version=0)
    b = clean_chat({**TREE, "messages": [*TREE["messages"],
                                         {"id": "q3", "parent": "a3", "role": "user", "content": "And then?"}]},
                   chat_id="c1")
    assert store.put("m", b, base_version=1)["version"] == 2
    with pytest.raises(ChatConflict) as stale:
        store.put("m", clean_chat(TREE, chat_id="c1"), base_version=1)
    assert stale.value.current == 2
    with pytest.raises(ChatConflict):   # "new" over an existing chat is stale too
        store.put("m", clean_chat(TREE, chat_id="c1"), base_version=0)
    assert store.get("m", "c1")["messages"][-1]["content"] == "And then?"   # B's save stands
    writing = {"id": "a9", "parent": "q2", "role": "assistant", "content": "Half a rep", "stats": {"finish": "interrupted"}}
    closing_a = clean_chat({**TREE, "leaf": "a9", "messages": [*TREE["messages"], writing]}, chat_id="c1")
    merged = store.put("m", closing_a, base_version=1, merge=True)   # a closing page's last save keeps both
    assert merged["version"] == 3 and [m["id"] for m in merged["messages"]] == ["q1", "a1", "q2", "a2", "a3", "q3", "a9"]
    assert store.get("m", "c1")["leaf"] == "a9"
    assert store.delete("m", "c1")
    with pytest.raises(ChatConflict) as gone:   # deleted meanwhile (a merge has nothing to merge with)
        store.put("m", b, base_version=3, merge=True)
    assert gone.value.current is None and store.get("m", "c1") is None


def test_search_finds_words_in_titles_and_every_branch_and_marks_them(tmp_path: Path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    store.put("m", clean_chat(TREE, chat_id="c1"), base_version=0)
    store.put("m", clean_chat({"title": "Soup", "messages": [{"role": "user", "content": "A leek soup, café style?"}]},
                              chat_id="c2"), base_version=0)
    store.put("other", clean_chat(TREE, chat_id="c3"), base_version=0)   # another model's chat is never found

    (hit,) = store.search("m", "boil")            # a word's beginning finds it
    assert hit["id"] == "c1" and hit["title"] == "Heating"
    assert ["boiler", True] in hit["snippet"] and "".join(t for t, _ in hit["snippet"]).count("boiler") == 1
    assert [r["id"] for r in store.search("m", "radiator")] == ["c1"]   # a branch not shown is searched too
    (title,) = store.search("m", "heat")
    assert title["title_parts"] == [["Heating", True]]
    assert [r["id"] for r in store.search("m", "cafe")] == ["c2"]      # accents do not matter
    assert store.search("m", "boiler soup") == []                     # every word must be there
    assert store.search("m", '" OR * NEAR(') == []                    # query syntax is text, not an error
    store.put("m", clean_chat({**TREE, "title": "Radiators", "messages": TREE["messages"][:2], "leaf": "a1"},
                              chat_id="c1"), base_version=1)
    assert store.search("m", "boiler") == []      # the index follows each save
    store.delete("m", "c2")
    assert store.search("m", "leek") == []


def test_a_chat_file_from_before_opens_with_its_chats_searchable(tmp_path: Path):
    path = tmp_path / "chats.sqlite3"
    with closing(sqlite3.connect(path)) as con, con:   # the first release's tables, one flat chat
        con.executescript("""CREATE TABLE chats (model TEXT NOT NULL, id TEXT NOT NULL, title TEXT NOT NULL,
            mode TEXT NOT NULL DEFAULT 'chat', created INTEGER NOT NULL, updated INTEGER NOT NULL,
            n_messages INTEGER NOT NULL, messages TEXT NOT NULL, PRIMARY KEY (model, id));
            CREATE TABLE settings (model TEXT PRIMARY KEY, data TEXT NOT NULL);""")
        flat = [{"role": "user", "content": "Is the boiler safe?"}, {"role": "assistant", "content": "Yes."}]
        con.execute("INSERT INTO chats VALUES ('m', 'old', 'Old chat', 'chat', 1, 2, 2, ?)", (json.dumps(flat),))
    store = ChatStore(path)
    old = store.get("m", "old")
    assert old["messages"] == flat and old["version"] == 0 and "leaf" not in old   # one branch, as it was
    assert [r["id"] for r in store.search("m", "boiler")] == ["old"]
    assert to_markdown(old, "Model").count("## ") == 2
    assert store.put("m", clean_chat({**old, "title": "Old chat"}, chat_id="old"), base_version=0)["version"] == 1


def test_presets_are_checked(tmp_path: Path):
    good = {"presets": [{"name": " Short ", "system_prompt": "Answer in one line.", "temperature": 0.2, "top_k": 40,
                         "context_overflow": "ask"}, {"name": "Plain", "max_tokens": None}]}
    assert clean_presets(good) == [{"name": "Short", "system_prompt": "Answer in one line.", "temperature": 0.2,
                                    "top_k": 40}, {"name": "Plain", "max_tokens": None}]
    for bad, field in (({"presets": [{"name": ""}]}, r"presets\[0\]\.name"),
                       ({"presets": [{"name": "a"}, {"name": "A"}]}, "used twice"),
                       ({"presets": [{"name": "a", "top_p": 0}]}, r"presets\[0\]\.top_p"),
                       ({"presets": "no"}, "'presets'")):
        with pytest.raises(ChatError, match=field):
            clean_presets(bad)
    store = ChatStore(tmp_path / "chats.sqlite3")
    assert store.get_presets("m") == []
    store.put_presets("m", clean_presets(good))
    assert [p["name"] for p in store.get_presets("m")] == ["Short", "Plain"] and store.get_presets("n") == []


def test_the_api_answers_409_to_a_stale_save_and_searches(tiny_chat_model: Path, chat_data: Path):
    with live_server(tiny_chat_model) as srv:
        url, ok = srv.url + "/api/chats", chat_headers(srv)
        first = requests.put(url + "/c1", json={**TREE, "base_version": 0}, headers=ok, timeout=10)
        assert first.status_code == 200 and first.json()["version"] == 1, first.text
        assert requests.get(url + "/c1", headers=ok, timeout=10).json()["version"] == 1
        newer = {**TREE, "title": "Heating (B)", "base_version": 1}
        assert requests.put(url + "/c1", json=newer, headers=ok, timeout=10).json()["version"] == 2
        stale = requests.put(url + "/c1", json={**TREE, "base_version": 1}, headers=ok, timeout=10)
        assert stale.status_code == 409, stale.text
        error = stale.json()["error"]
        assert error["code"] == "chat_conflict" and error["param"] == "base_version" and "version 2" in error["message"]
        assert requests.get(url + "/c1", headers=ok, timeout=10).json()["title"] == "Heating (B)"
        bad = requests.put(url + "/c1", json={**TREE, "base_version": "1"}, headers=ok, timeout=10)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "base_version"
        bad = requests.put(url + "/c1", json={**TREE, "base_version": 2, "merge": "yes"}, headers=ok, timeout=10)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "merge"

        found = requests.get(srv.url + "/api/search", params={"q": "expansion"}, headers=ok, timeout=10)
        assert found.status_code == 200 and [r["id"] for r in found.json()["data"]] == ["c1"]
        assert requests.get(srv.url + "/api/search?q=x", timeout=10).status_code == 401   # behind the secret
        assert requests.get(srv.url + "/api/search", params={"q": "x" * 501}, headers=ok,
                            timeout=10).status_code == 400

        presets = srv.url + "/api/presets"
        assert requests.get(presets, headers=ok, timeout=10).json() == {"presets": []}
        saved = requests.put(presets, json={"presets": [{"name": "Short", "temperature": 0.2}]}, headers=ok, timeout=10)
        assert saved.json() == {"presets": [{"name": "Short", "temperature": 0.2}]}
        refused = requests.put(presets, json={"presets": [{"name": "x", "temperature": -1}]}, headers=ok, timeout=10)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_presets"
        assert requests.get(presets, headers=ok, timeout=10).json()["presets"][0]["name"] == "Short"   # nothing half-stored
        assert requests.put(presets, json={"presets": []}, timeout=10).status_code == 401

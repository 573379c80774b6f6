"""A reply's sources in the chat store: kept as the chat completion gave them (so a reload, an
export and an import show the same places), checked field by field, and written under the reply
in a Markdown export. Chats from before sources load as they were."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmpack.runtime.server.page.chats import ChatError, ChatStore, clean_chat, to_json, to_markdown

QUOTE = "The serial number of the boiler in the cellar is BX-4471-Q."
SOURCE = {"file": "manual.pdf", "file_id": "doc-1a2b", "page": 97, "section": None, "lines": None,
          "label": "manual.pdf · p. 97", "quote": QUOTE, "context": "Cellar.\n" + QUOTE + "\nMore.",
          "quote_start": 8, "quote_end": 8 + len(QUOTE), "reply_start": 0, "reply_end": 40,
          "model_mark": "[p. 96]", "mark_right": False}
REPLY = "The boiler's serial number is BX-4471-Q [p. 96]."


def chat(sources) -> dict:
    reply = {"id": "r", "parent": "q", "role": "assistant", "content": REPLY}
    if sources is not None:
        reply["sources"] = sources
    return {"title": "Boiler", "messages": [{"id": "q", "parent": None, "role": "user", "content": "Serial?"}, reply]}


def test_sources_are_kept_with_the_reply_through_the_store_and_an_import(tmp_path: Path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    store.put("m", clean_chat(chat([SOURCE, {**SOURCE, "reply_start": 41, "reply_end": 48}]), chat_id="c1"))
    saved = store.get("m", "c1")
    assert saved["messages"][1]["sources"][0] == SOURCE
    copy = store.import_chat("other-model", json.loads(json.dumps(to_json(saved, "Model"))))
    assert store.get("other-model", copy["id"])["messages"][1]["sources"] == saved["messages"][1]["sources"]


def test_a_chat_from_before_sources_and_an_abstained_reply_load():
    assert "sources" not in clean_chat(chat(None))["messages"][1]
    assert clean_chat(chat([]))["messages"][1]["sources"] == []
    extra = clean_chat(chat([{**SOURCE, "colour": "red"}]))["messages"][1]["sources"][0]
    assert "colour" not in extra   # known fields only


@pytest.mark.parametrize("bad, field", [
    ("not a list", "messages[1].sources must be a list"),
    ([SOURCE] * 101, "messages[1].sources must be a list of at most 100"),
    ([{**SOURCE, "page": -1}], "messages[1].sources[0].page must be a whole number"),
    ([{**SOURCE, "page": True}], "messages[1].sources[0].page must be a whole number"),
    ([{**SOURCE, "quote": None}], "messages[1].sources[0].quote must be text"),
    ([{**SOURCE, "context": "x" * 20_001}], "messages[1].sources[0].context must be text of at most 20,000"),
    ([{**SOURCE, "lines": [3]}], "messages[1].sources[0].lines must be [first, last]"),
    ([{**SOURCE, "quote_end": 2}], "messages[1].sources[0]: an end offset comes before its start"),
    ([{**SOURCE, "mark_right": "no"}], "messages[1].sources[0].mark_right must be true, false or null"),
    ([SOURCE, 3], "messages[1].sources[1] must be an object"),
])
def test_a_bad_source_is_refused_naming_the_field(bad, field):
    with pytest.raises(ChatError, match=field.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        clean_chat(chat(bad))


def test_the_markdown_export_lists_each_place_once_under_its_reply():
    md = to_markdown(clean_chat(chat([SOURCE, {**SOURCE, "reply_start": 41, "reply_end": 48}]), chat_id="c"), "Model")
    assert md.count("manual.pdf · p. 97") == 1
    assert f"{REPLY}\n\nSources:\n\n- manual.pdf · p. 97 (not [p. 96], as the reply says): “{QUOTE}”\n" in md
    assert "Sources:" not in to_markdown(clean_chat(chat([]), chat_id="c"), "Model")

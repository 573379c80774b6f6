"""A reply's sources in the chat store: kept as the chat completion gave them (so a reload, an
export and an import show the same places), checked field by field, and written under the reply
in a Markdown export. Chats from before sources load as they were."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llmpack.runtime.chats.chats import ChatError, ChatStore, clean_chat, to_json, to_markdown

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


# What a hostile CSV cell and a hostile file name bring into an export (issue 46): raw HTML with a
# script in an attribute, a Markdown link and a Markdown picture with javascript: URLs, a line break
# that would start a block of its own.
CELL = '<img src=x onerror=alert(1)> [click](javascript:alert(2)) ![p](javascript:alert(3)) **bold**'
FILE = 'prices](javascript:alert(4))<script>alert(5)</script>\n\n[go](javascript:alert(6)).csv'


def hostile_chat() -> dict:
    source = {**SOURCE, "file": FILE, "file_id": None, "label": f"{FILE} · line 2", "quote": CELL,
              "context": CELL, "quote_start": 0, "quote_end": len(CELL), "model_mark": None, "mark_right": None}
    picture = "data:image/png;base64,iVBORw0KGgo="
    user = {"id": "q", "parent": None, "role": "user", "content": "Prices?", "attachments": [
        {"name": FILE, "kind": "text", "text": CELL}, {"name": FILE, "kind": "image", "text": "", "data_url": picture},
        {"name": FILE, "kind": "audio", "text": "", "note": "0:01", "audio_url": "data:audio/wav;base64,UklGRg=="}]}
    reply = {"id": "r", "parent": "q", "role": "assistant", "content": "See the sheet.", "sources": [source]}
    return clean_chat({"title": FILE, "messages": [user, reply]}, chat_id="c")


def test_the_markdown_export_writes_document_text_and_file_names_as_plain_words():
    md = to_markdown(hostile_chat(), "Model")
    attached, _, rest = md.partition("````text\n")
    body, _, after = rest.partition("\n````\n")
    assert body == CELL   # the attached text itself stays whole, inside its code fence, where nothing is read
    outside = attached + after
    # what Markdown reads: not the HTML block's line, nor an attribute's value (HTML, entities checked below)
    read = re.sub(r' title="[^"]*"', "", "\n".join(line for line in outside.splitlines()
                                                   if not line.startswith("<details><summary>")))
    # raw HTML tags, a link's or picture's "](" (but the picture's own), emphasis, a line of its own: none unescaped
    for live in (r"<(img|script)", r"(?<!\\)\]\((?!data:image/png;base64,)", r"(?<!\\)\*\*", r"(?m)^\s*(\[|<(?!/?details|audio))"):
        assert not re.search(live, read), (live, read)
    assert "&lt;img src=x onerror=alert(1)&gt; \\[click\\](javascript:alert(2)) !\\[p\\](javascript:alert(3)) " \
           "\\*\\*bold\\*\\*" in outside   # the words are all there, shown as they were written
    assert "# prices\\](javascript:alert(4))&lt;script&gt;alert(5)&lt;/script&gt; \\[go\\](javascript:alert(6)).csv\n" \
        in outside   # the title (a file's name when the message had no text), on one line
    assert "<summary>Attached: prices](javascript:alert(4))&lt;script&gt;alert(5)&lt;/script&gt; " \
           "[go](javascript:alert(6)).csv</summary>" in outside   # HTML block: entities, one line
    assert 'title="prices](javascript:alert(4))&lt;script&gt;alert(5)&lt;/script&gt; [go](javascript:alert(6)).csv ' \
           '(0:01)">Sound: prices\\]' in outside
    assert "![prices\\](javascript:alert(4))&lt;script&gt;" in outside   # the picture's own URL stays its data: URL
    assert outside.count("](data:image/png;base64,iVBORw0KGgo=)") == 1

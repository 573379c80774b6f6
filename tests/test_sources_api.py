"""The server's sources through the real server and the clients that parse them: a scripted model
answers every question with one sentence that states the planted fact and cites the page
before it (as the 0.5B demo model did), and each API returns the server's page instead:
`message.sources` / `delta.sources` in chat completions, `file_citation` annotations in
Responses, `citations` in Anthropic Messages."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import anthropic
import pytest

from doc_files import make_pdf
from long_docs import contract_pages
from server_fixtures import LiveServer, live_server, write_scripted_model

PAGES, NEEDLE = contract_pages()
PDF = make_pdf(PAGES)
REPLY = ["Kestrel ", "Marine ", "services ", "the ", "generator ", "under ", "contract ", "KM-4471 ", "[p. 216]."]
TEXT = "".join(REPLY)


@pytest.fixture(scope="module")
def citer(tmp_path_factory: pytest.TempPathFactory):
    with live_server(write_scripted_model(tmp_path_factory.mktemp("citer") / "citer.gguf", reply=REPLY)) as srv:
        yield srv


def pdf_part(read: str = "excerpts") -> dict:
    return {"type": "file", "file": {"filename": "contract.pdf", "read": read,
                                     "file_data": "data:application/pdf;base64," + base64.b64encode(PDF).decode()}}


def note_part() -> dict:
    data = base64.b64encode(b"Shopping list.\nThe shed code is 9134.\n").decode()
    return {"type": "file", "file": {"filename": "note.txt", "file_data": "data:text/plain;base64," + data}}


def check_source(src: dict, reply: str = TEXT) -> None:
    assert (src["file"], src["page"], src["label"]) == ("contract.pdf", 217, "contract.pdf · p. 217")
    assert src["quote"] == NEEDLE.text and src["context"][src["quote_start"]:src["quote_end"]] == NEEDLE.text
    assert src["file_id"].startswith("doc-") and src["section"] is None and src["lines"] is None
    assert reply[src["reply_start"]:src["reply_end"]] == TEXT.strip()
    assert (src["model_mark"], src["mark_right"]) == ("[p. 216]", False)   # the model's page is overruled


def ask(parts: list) -> list:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": NEEDLE.question}]}]


def test_chat_completion_carries_the_servers_sources(citer: LiveServer, chat_data: Path):
    client = citer.openai()
    resp = client.chat.completions.create(model="m", temperature=0, messages=ask([pdf_part()]))
    message = resp.choices[0].message
    assert message.content == TEXT
    (src,) = message.model_extra["sources"]
    check_source(src)


def test_a_streamed_chat_completion_sends_sources_with_its_end(citer: LiveServer, chat_data: Path):
    client = citer.openai()
    chunks = list(client.chat.completions.create(model="m", temperature=0, messages=ask([pdf_part()]), stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    carrying = [c for c in chunks if c.choices and (c.choices[0].delta.model_extra or {}).get("sources") is not None]
    assert text == TEXT and len(carrying) == 1
    (last,) = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert carrying[0] is last   # sent with the finish reason, after the last content
    (src,) = last.choices[0].delta.model_extra["sources"]
    check_source(src, text)


def test_a_file_read_whole_is_attributed_too_and_no_files_means_no_field(citer: LiveServer, chat_data: Path):
    client = citer.openai()
    resp = client.chat.completions.create(model="m", temperature=0, messages=ask([note_part()]))
    assert resp.choices[0].message.model_extra["sources"] == []   # read a file, and nothing in it supports the reply
    plain = client.chat.completions.create(model="m", temperature=0, messages=[{"role": "user", "content": "Hi"}])
    assert "sources" not in plain.choices[0].message.model_extra
    raw = citer.post("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Hi"}],
                                              "stream": True}, stream=True)
    assert b"sources" not in raw.content


def test_two_files_the_source_names_the_one_that_says_it(citer: LiveServer, chat_data: Path):
    resp = citer.post("/v1/chat/completions", {"model": "m", "messages": ask([note_part(), pdf_part()])}).json()
    (src,) = resp["choices"][0]["message"]["sources"]
    check_source(src)
    assert json.dumps(src, ensure_ascii=False).count("note.txt") == 0


def test_responses_carry_file_citations(citer: LiveServer, chat_data: Path):
    client = citer.openai()
    pdf = pdf_part()["file"]
    content = [{"type": "input_file", "filename": "contract.pdf", "file_data": pdf["file_data"]},
               {"type": "input_text", "text": NEEDLE.question}]
    resp = client.responses.create(model="m", input=[{"role": "user", "content": content}])
    (text,) = [c for item in resp.output if item.type == "message" for c in item.content]
    assert text.text == TEXT
    (note,) = text.annotations
    assert (note.type, note.index, note.filename) == ("file_citation", len(TEXT.strip()), "contract.pdf")
    assert note.file_id.startswith("doc-")
    with client.responses.stream(model="m", input=[{"role": "user", "content": content}]) as stream:
        events = list(stream)
    added = [e for e in events if e.type == "response.output_text.annotation.added"]
    assert [(e.annotation_index, e.annotation.model_dump()) for e in added] == [(0, note.model_dump())]
    done = [e for e in events if e.type == "response.output_text.done"]
    assert len(done) == 1 and events.index(added[0]) < events.index(done[0])
    final = events[-1].response
    assert final.output[-1].content[0].annotations[0].model_dump() == note.model_dump()


def test_anthropic_messages_carry_citations(citer: LiveServer, chat_data: Path):
    client = anthropic.Anthropic(base_url=citer.url, api_key="not-needed")
    data = pdf_part()["file"]["file_data"].split(",", 1)[1]
    note = base64.b64encode(b"Shopping list.\nThe generator key hangs in the shed, hook 7.\n").decode()
    content = [{"type": "document", "source": {"type": "base64", "media_type": "text/plain", "data": note},
                "title": "note.txt"},
               {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data},
                "title": "contract.pdf", "citations": {"enabled": True}},
               {"type": "text", "text": NEEDLE.question}]
    msg = client.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": content}])
    (block,) = msg.content
    assert block.text == TEXT
    (cite,) = block.citations
    assert (cite.type, cite.document_index, cite.document_title) == ("page_location", 1, "contract.pdf")
    assert (cite.start_page_number, cite.end_page_number, cite.cited_text) == (217, 218, NEEDLE.text)
    with client.messages.stream(model="m", max_tokens=64, messages=[{"role": "user", "content": content}]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    deltas = [e for e in events if e.type == "content_block_delta" and e.delta.type == "citations_delta"]
    assert [d.delta.citation.model_dump() for d in deltas] == [cite.model_dump()]
    assert final.content[0].citations[0].model_dump() == cite.model_dump()


def test_anthropic_char_location_points_into_a_text_document(citer: LiveServer, chat_data: Path):
    client = anthropic.Anthropic(base_url=citer.url, api_key="not-needed")
    text = "Notes.\n\n" + NEEDLE.text + "\n\nNothing else.\n"
    content = [{"type": "document", "title": "notes.txt",
                "source": {"type": "base64", "media_type": "text/plain", "data": base64.b64encode(text.encode()).decode()}},
               {"type": "text", "text": NEEDLE.question}]
    msg = client.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": content}])
    (cite,) = msg.content[0].citations
    assert cite.type == "char_location" and cite.document_index == 0
    assert text[cite.start_char_index:cite.end_char_index] == cite.cited_text == NEEDLE.text


def test_a_pdf_sent_once_is_read_whole_by_its_file_id_and_cited_by_its_page(citer: LiveServer, chat_data: Path):
    """The chat page sends a file once (POST /v1/extract) and then only its file_id: read whole
    from the index's copy, the answer's source is the PDF's page, as when the PDF itself is sent.
    Its text sent as text/plain, as the page sent short files before, could name only lines."""
    import sqlite3

    import requests

    excerpt = make_pdf(["The depot's contracts are listed on the next page.", NEEDLE.text])   # the fact: page 2
    doc = requests.post(citer.url + "/v1/extract", data=excerpt, headers={"X-Filename": "excerpt.pdf"},
                        timeout=60).json()
    assert doc["file_id"].startswith("doc-") and doc["unit"] == "page"
    by_id = {"type": "file", "file": {"filename": "excerpt.pdf", "file_id": doc["file_id"], "read": "whole"}}
    resp = citer.post("/v1/chat/completions", {"model": "m", "messages": ask([by_id])})
    assert resp.status_code == 200 and "X-Llmpack-Read" not in resp.headers, resp.text   # read whole, not searched
    (src,) = resp.json()["choices"][0]["message"]["sources"]
    assert (src["label"], src["page"], src["file_id"], src["quote"]) == ("excerpt.pdf · p. 2", 2, doc["file_id"],
                                                                          NEEDLE.text)
    as_text = {"type": "file", "file": {"filename": "excerpt.pdf", "read": "whole", "file_data":
                                        "data:text/plain;base64," + base64.b64encode(doc["text"].encode()).decode()}}
    (old,) = citer.post("/v1/chat/completions", {"model": "m", "messages": ask([as_text])}).json()[
        "choices"][0]["message"]["sources"]
    assert old["page"] is None and old["lines"] and old["quote"] == NEEDLE.text

    with sqlite3.connect(chat_data / "documents.sqlite3") as con:   # as a release that kept only its parts wrote it
        con.execute("DELETE FROM texts")
    refused = citer.post("/v1/chat/completions", {"model": "m", "messages": ask([by_id])})
    err = refused.json()["error"]
    assert refused.status_code == 400 and err["code"] == "file_not_indexed" and err["param"] == "messages"
    assert "(\"excerpt.pdf\") is no longer in this computer's document index whole" in err["message"], err
    searched = {"type": "file", "file": {"filename": "excerpt.pdf", "file_id": doc["file_id"]}}
    assert citer.post("/v1/chat/completions", {"model": "m", "messages": ask([searched])}).status_code == 200

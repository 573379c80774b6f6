"""Documents far longer than the context, over HTTP: a generated 300-page PDF with one fact on
page 217 (tests/long_docs.py). /v1/extract indexes it, a chat request reads the parts that match
its question (the `X-Llmpack-Read` header says which), `file.read` switches between whole and
searched, bad input is one line with nothing stored, and the instruct demo model answers from
page 217 and cites it. The chat page's side is tests/test_browser_long_documents.py."""
from __future__ import annotations

import base64
import json
import sqlite3
import stat
from urllib.parse import quote

import pytest
import requests

from doc_files import encrypted_pdf, make_pdf
from long_docs import contract_pages
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer

PAGES, NEEDLE = contract_pages()
PDF = make_pdf(PAGES)


def file_part(data: bytes = PDF, media: str = "application/pdf", name: str = "contract.pdf", **extra) -> dict:
    return {"type": "file", "file": {"filename": name, "file_data": f"data:{media};base64,"
                                     f"{base64.b64encode(data).decode()}", **extra}}


def ask(srv: LiveServer, parts: list, question: str = NEEDLE.question, **body) -> requests.Response:
    content = [*parts, {"type": "text", "text": question}]
    return srv.post("/v1/chat/completions", {"model": "m", "max_tokens": body.pop("max_tokens", 1), "temperature": 0,
                                             "messages": [{"role": "user", "content": content}], **body}, timeout=600)


def read_pages(resp: requests.Response) -> list[int]:
    files = json.loads(resp.headers["X-Llmpack-Read"])
    assert [f["filename"] for f in files] == ["contract.pdf"] and files[0]["pages"] == 300
    return [p["page"] for p in files[0]["parts"]]


def stored(data_dir) -> int:
    path = data_dir / "documents.sqlite3"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as con:
        return con.execute("SELECT (SELECT COUNT(*) FROM documents) + (SELECT COUNT(*) FROM chunks)").fetchone()[0]


def test_extract_indexes_a_file_too_long_for_the_context(chat_server: LiveServer, chat_data):
    resp = requests.post(chat_server.url + "/v1/extract", data=PDF, timeout=120,
                         headers={"X-Filename": quote("contract.pdf"), "Content-Type": "application/pdf"})
    doc = resp.json()
    assert resp.status_code == 200 and doc["tokens"] > doc["budget"] and doc["searched"] is True
    assert doc["file_id"].startswith("doc-") and doc["chunks"] >= 300 and doc["unit"] == "page"
    index = chat_data / "documents.sqlite3"
    assert stat.S_IMODE(index.stat().st_mode) == 0o600 and stat.S_IMODE(chat_data.stat().st_mode) == 0o700
    again = requests.post(chat_server.url + "/v1/extract", data=PDF, timeout=120,
                          headers={"X-Filename": quote("copy.pdf")}).json()
    assert again["file_id"] == doc["file_id"]
    with sqlite3.connect(index) as con:
        assert con.execute("SELECT COUNT(*) FROM documents").fetchone() == (1,)
    small = requests.post(chat_server.url + "/v1/extract", data=make_pdf(["One page."]), timeout=30,
                          headers={"X-Filename": "short.pdf"}).json()
    assert small["searched"] is False and small["file_id"].startswith("doc-")   # kept too: the page sends its id


def test_a_question_reads_the_parts_that_match_it(chat_server: LiveServer, chat_data):
    resp = ask(chat_server, [file_part()])
    assert resp.status_code == 200, resp.text
    assert 217 in read_pages(resp)
    usage = resp.json()["usage"]
    assert usage["prompt_tokens"] <= chat_server.engine.n_ctx - 1024 // 2
    streamed = ask(chat_server, [file_part()], stream=True)
    assert streamed.status_code == 200 and 217 in read_pages(streamed)
    assert 12 in read_pages(ask(chat_server, [file_part()], "What does page 12 say?"))


def test_read_whole_keeps_the_old_rule_and_file_ids_are_reused(chat_server: LiveServer, chat_data):
    resp = ask(chat_server, [file_part(read="whole")])
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "attachments_too_long"
    assert "contract.pdf" in resp.json()["error"]["message"] and stored(chat_data) == 0   # nothing indexed
    resp = ask(chat_server, [file_part(read="all of it")])
    assert resp.status_code == 400 and "messages[0].content[0].file.read must be one of auto, whole, excerpts" in \
        resp.json()["error"]["message"]
    file_id = json.loads(ask(chat_server, [file_part()]).headers["X-Llmpack-Read"])[0]["file_id"]
    by_id = ask(chat_server, [{"type": "file", "file": {"filename": "contract.pdf", "file_id": file_id}}])
    assert by_id.status_code == 200 and 217 in read_pages(by_id)
    unknown = ask(chat_server, [{"type": "file", "file": {"file_id": "doc-" + "0" * 32}}])
    assert unknown.status_code == 400 and "no longer in this computer's document index" in unknown.json()["error"]["message"]
    small = ask(chat_server, [file_part(b"The door code is 4711.", "text/plain", "note.txt", read="excerpts")], "Code?")
    assert json.loads(small.headers["X-Llmpack-Read"])[0]["parts"][0]["label"] == "line 1"


@pytest.mark.parametrize("data, words", [
    (encrypted_pdf(), "is password-protected"),
    (b"%PDF-1.4\n" + b"\x00" * 5000, "could not be read as a PDF"),
    (PDF[: len(PDF) // 2], "could not be read as a PDF"),
])
def test_bad_files_are_one_line_and_nothing_is_stored(chat_server: LiveServer, chat_data, data, words):
    resp = ask(chat_server, [file_part(data)])
    err = resp.json()["error"]
    assert resp.status_code == 400 and words in err["message"] and "\n" not in err["message"]
    assert stored(chat_data) == 0
    assert ask(chat_server, [file_part()]).status_code == 200   # and the server goes on


@pytest.mark.instruct
def test_the_instruct_model_answers_from_page_217_and_cites_it(instruct_server: LiveServer, chat_data):
    resp = ask(instruct_server, [file_part()], NEEDLE.question + " On which page?", max_tokens=60)
    assert resp.status_code == 200, resp.text
    answer = resp.json()["choices"][0]["message"]["content"]
    assert "Kestrel Marine" in answer and "217" in answer, answer
    assert 217 in read_pages(resp)

"""Attachments over HTTP on the tiny ChatML model: POST /v1/extract (what the chat page uses),
OpenAI `file` content parts in /v1/chat/completions (what scripts and the SDK use), and the
one-line refusals for files that cannot be read. The instruct model's answers about a
document are in test_instruct.py."""
from __future__ import annotations

import base64
from urllib.parse import quote

import openai
import pytest
import requests

from doc_files import PNG_1PX, encrypted_pdf, make_pdf
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer

from llmpack.runtime.documents import extract as D
from llmpack.runtime.core.attachments import budget


def extract(srv: LiveServer, name: str, data: bytes, content_type: str = "application/octet-stream"):
    return requests.post(srv.url + "/v1/extract", data=data, timeout=60,
                         headers={"Content-Type": content_type, "X-Filename": quote(name)})


def file_part(name: str, data: bytes, media: str = "application/pdf") -> dict:
    return {"type": "file", "file": {"filename": name,
                                     "file_data": f"data:{media};base64,{base64.b64encode(data).decode()}"}}


def test_extract_returns_text_tokens_and_pages(chat_server: LiveServer):
    first, second = "First page says hello.", "Second page, ünïcödé."
    pdf = make_pdf([first, second])
    resp = extract(chat_server, "Report 1.pdf", pdf, "application/pdf")
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert (doc["name"], doc["kind"], doc["size"], doc["unit"]) == ("Report 1.pdf", "pdf", len(pdf), "page")
    assert doc["text"] == f"{first}\n\n{second}"
    assert doc["n_ctx"] == chat_server.engine.n_ctx and doc["budget"] == budget(doc["n_ctx"])
    tok = chat_server.engine.tokenize
    pages = [len(tok(p, add_special=False, parse_special=False)) for p in (first, second)]
    assert doc["segments"] == [{"chars": len(first), "tokens": pages[0]}, {"chars": len(second), "tokens": pages[1]}]
    heading = len(tok(D.format_message([("Report 1.pdf", "")], ""), add_special=False, parse_special=False))
    assert doc["tokens"] == heading + sum(pages)


def test_long_text_is_offered_in_parts_that_end_at_a_line(chat_server: LiveServer):
    text = "".join(f"line {i} of a long file\n" for i in range(2000))
    doc = extract(chat_server, "long.txt", text.encode()).json()
    assert doc["unit"] == "part" and len(doc["segments"]) > 5
    assert sum(s["chars"] for s in doc["segments"]) == len(text)
    ends, at = [], 0
    for s in doc["segments"]:
        at += s["chars"]
        ends.append(text[at - 1])
    assert set(ends) == {"\n"}


@pytest.mark.parametrize("name, data, status, words", [
    ("photo.png", PNG_1PX, 400, "is an image, not a document: send it as an image_url part"),
    ("locked.pdf", encrypted_pdf(), 400, "locked.pdf is password-protected"),
    ("scan.pdf", make_pdf([""]), 400, "scan.pdf has no text layer"),
    ("junk.bin", bytes(range(256)) * 64, 400, "junk.bin is binary data"),
])
def test_extract_refusals_are_one_line(chat_server: LiveServer, name, data, status, words):
    resp = extract(chat_server, name, data)
    err = resp.json()["error"]
    assert resp.status_code == status and err["code"] == "unreadable_file" and words in err["message"]
    assert "\n" not in err["message"]


def test_extract_refuses_a_file_over_the_limit_by_its_length(chat_server: LiveServer):
    resp = extract(chat_server, "big.txt", b"a" * (D.MAX_FILE_BYTES + 8 * 2**20))
    assert resp.status_code == 413
    assert resp.json()["error"]["message"] == "big.txt is 40 MB; files can be at most 32 MB: attach a shorter part of it"


def test_a_file_part_is_the_documented_text_in_the_prompt(chat_server: LiveServer):
    """The same request with the document as a file part and as the documented text inline
    gives the same prompt, token for token."""
    client = chat_server.openai()
    pdf = make_pdf(["The code word is PELICAN."])
    with_file = client.chat.completions.create(
        model="anything", max_tokens=1, temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "What is the code word?"},
                                               file_part("memo.pdf", pdf)]}])
    inline = client.chat.completions.create(
        model="anything", max_tokens=1, temperature=0,
        messages=[{"role": "user", "content": "## File: memo.pdf\n\nThe code word is PELICAN.\n\n---\n\n"
                                              "What is the code word?"}])
    assert with_file.usage.prompt_tokens == inline.usage.prompt_tokens > 20
    assert with_file.model == chat_server.model_id


def test_a_web_page_is_read_as_the_text_it_shows(chat_server: LiveServer):
    """A saved page (text/html, as the chat page sends an .html file) is its text, under the same
    documented shape, in /v1/extract as in a file part; its scripts and styles are not read."""
    page = (b"<!doctype html><html><head><title>Memo</title><style>p { color: red }</style>"
            b"<script>var secret = 'ALBATROSS';</script></head><body><p>The code word is PELICAN.</p></body></html>")
    doc = extract(chat_server, "memo.html", page, "text/html").json()
    assert (doc["kind"], doc["text"]) == ("html", "Memo\nThe code word is PELICAN.")
    client = chat_server.openai()
    with_file = client.chat.completions.create(
        model="anything", max_tokens=1, temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "What is the code word?"},
                                               file_part("memo.html", page, "text/html")]}])
    inline = client.chat.completions.create(
        model="anything", max_tokens=1, temperature=0,
        messages=[{"role": "user", "content": "## File: memo.html\n\nMemo\nThe code word is PELICAN.\n\n---\n\n"
                                              "What is the code word?"}])
    assert with_file.usage.prompt_tokens == inline.usage.prompt_tokens > 20


def test_file_part_errors_are_400_before_any_generation(chat_server: LiveServer):
    client = chat_server.openai()

    def refused(content, code=None) -> str:
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="x", max_tokens=1, messages=[{"role": "user", "content": content}])
        if code:
            assert info.value.body["code"] == code
        return info.value.body["message"]

    assert "locked.pdf is password-protected" in refused([file_part("locked.pdf", encrypted_pdf())], "unreadable_file")
    assert "file_data must be a data URL" in refused([{"type": "file", "file": {"filename": "a", "file_data": "xx"}}])
    assert "this model reads text only" in refused([{"type": "image_url", "image_url": {"url": "data:,"}}])
    n_ctx = chat_server.engine.n_ctx
    long_text = ("many words in a row " * (n_ctx // 2)).encode()
    whole = file_part("long.txt", long_text, "text/plain")
    whole["file"]["read"] = "whole"      # the default, "auto", searches it instead (test_long_documents.py)
    message = refused([whole], "attachments_too_long")
    assert message.startswith("the files to be read whole (long.txt) take ") and "this model leaves " in message

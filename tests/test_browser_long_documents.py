"""A file far longer than the context in the chat page, in headless Chromium at 1280 and 390 px:
the 300-page PDF of tests/long_docs.py (one fact on page 217) is read in parts, not cut: its chip
and the meter say so in plain words, sending asks nothing, the reply says which pages were read
("Read from contract.pdf: pages ... 217 ..."), and the saved chat keeps that and the file's
index. Then the instruct demo model answers from page 217 and names it. Screenshots in
artifacts/. The HTTP side is tests/test_long_documents.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import (ARTIFACTS, ask, fits, get_chat, get_chats, last_reply, new_page, open_app, reply_done,
                              set_settings)
from doc_files import make_pdf
from long_docs import contract_pages
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer, live_server, wait_until

pytestmark = pytest.mark.browser

CHIP = "[data-testid=attachment-chip]"
PAGES, NEEDLE = contract_pages()
PDF = make_pdf(PAGES)
WIDTHS = [(1280, 860), (390, 844)]


def attach_contract(page) -> None:
    page.set_input_files("[data-testid=attach-file]",
                         files=[{"name": "contract.pdf", "mimeType": "application/pdf", "buffer": PDF}])
    chip = page.locator(CHIP)
    chip.wait_for()
    wait_until(lambda: "read in parts" in chip.locator("[data-testid=attachment-meta]").inner_text(), 60)


@pytest.mark.parametrize("width, height", WIDTHS)
def test_a_long_pdf_is_read_in_parts_and_the_reply_says_which(browser, scripted_model: Path, chat_data,
                                                               width: int, height: int):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    try:
        with live_server(scripted_model, "--ctx", "1024") as srv:
            open_app(page, srv)
            attach_contract(page)
            meta = page.locator(CHIP).locator("[data-testid=attachment-meta]").inner_text()
            assert meta.startswith(f"{round(len(PDF) / 1024)} KB · ") and meta.endswith(" words · read in parts"), meta
            assert page.locator("[data-testid=attach-meter]").inner_text() == (
                "contract.pdf is too long to read whole: for each question, the model reads the parts that match it")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"long-doc-{width}-attached.png"))
            fits(page, width)

            ask(page, NEEDLE.question)                       # no "too long" dialog: nothing to choose
            assert not page.locator("[data-testid=fit-dialog]").is_visible()
            read = last_reply(page).locator("[data-testid=message-read]")
            read.wait_for()
            line = read.inner_text()
            assert line.startswith("Read from contract.pdf: page") and "217" in line, line
            sent = page.locator("[data-testid=sent-attachment]").inner_text()
            assert "contract.pdf" in sent and sent.endswith(" words · read in parts"), sent
            page.screenshot(path=str(ARTIFACTS / f"long-doc-{width}-answered.png"))
            fits(page, width)

            (summary,) = wait_until(lambda: [c for c in get_chats(srv) if c["n_messages"] == 2])
            chat = get_chat(srv, summary["id"])
            file = chat["messages"][0]["attachments"][0]
            assert file["file_id"].startswith("doc-") and file["note"] == "read in parts"
            assert chat["messages"][1]["stats"]["read"] == line
            page.reload()                                    # a saved chat shows what was read
            page.wait_for_selector("#app:not([hidden])")
            if page.locator("#sidebar").is_hidden():         # at 390 px the list is behind its button
                page.click("#sidebar-toggle")
            page.locator("[data-testid=chat-item] .chat-open").first.click()
            assert last_reply(page).locator("[data-testid=message-read]").inner_text() == line
            assert page.problems == []
    finally:
        ctx.close()


@pytest.mark.instruct
def test_the_instruct_model_answers_from_page_217_in_the_page(browser, instruct_server: LiveServer, chat_data):
    for width, height in WIDTHS:
        ctx = browser.new_context(viewport={"width": width, "height": height})
        page = new_page(ctx)
        set_settings(page, instruct_server.model_id, temperature=0)   # greedy, as the API test
        try:
            open_app(page, instruct_server)
            attach_contract(page)
            ask(page, NEEDLE.question + " On which page?", 600_000)
            answer = last_reply(page).locator(".content").inner_text()
            assert "Kestrel Marine" in answer and "217" in answer, answer
            assert "217" in last_reply(page).locator("[data-testid=message-read]").inner_text()
            page.screenshot(path=str(ARTIFACTS / f"long-doc-{width}-instruct.png"))
            fits(page, width)
            assert page.problems == []
        finally:
            ctx.close()


@pytest.mark.parametrize("width, height", WIDTHS)
def test_a_file_the_bounded_index_forgot_is_named_where_files_are_attached(browser, scripted_model: Path, chat_data,
                                                                           width: int, height: int):
    """The index of long files keeps at most a cap of text (documents/index.py): attaching one past
    it makes the index forget the one used longest ago, and the attachments area says which, why,
    and that a chat which used it asks for it again."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    try:
        with live_server(scripted_model, "--ctx", "1024") as srv:
            # this app's index: the contract takes about 1.1 MB (its text, about 540 KB, and its parts)
            srv.state.files.index.max_bytes = 1_600_000
            open_app(page, srv)
            attach_contract(page)
            assert page.locator("[data-testid=index-forgot]").count() == 0
            other = [p.replace("Kestrel", "Osprey") for p in PAGES]
            page.set_input_files("[data-testid=attach-file]", files=[
                {"name": "renewal.pdf", "mimeType": "application/pdf", "buffer": make_pdf(other)}])
            note = page.locator("[data-testid=index-forgot]")
            note.wait_for(timeout=60_000)
            text = note.inner_text()
            assert text.startswith("To make room for renewal.pdf, this computer forgot its copy of “contract.pdf”"), text
            assert "used longest ago" in text and "1.5 MB" in text and "asks you to attach it again" in text, text
            page.screenshot(path=str(ARTIFACTS / f"long-doc-{width}-forgot.png"))
            fits(page, width)
            assert page.problems == []
    finally:
        ctx.close()


@pytest.mark.instruct
def test_a_question_about_all_of_a_long_pdf_shows_its_reading_and_draws_on_every_part(
        browser, instruct_server: LiveServer, chat_data):
    """"Summarise this document." of a 24-page handbook too long for the context: while each part
    is summarised the reply says how far the reading is (no silent minute), and the line under
    the answer says the whole file was read (or skimmed, on a slow computer) in parts. Asked
    again at 390 px, the kept summaries answer at once. (What the 0.5B model makes of them is measured, not asserted: BENCHMARKS,
    documents; tests/test_overview.py checks every part's summary is in the answer's prompt.)"""
    from test_overview import handbook_pages

    book = make_pdf(handbook_pages(3))
    for n, (width, height) in enumerate(WIDTHS):
        ctx = browser.new_context(viewport={"width": width, "height": height})
        page = new_page(ctx)
        # the answer at most 400 tokens, as `bench documents --whole` asks: on this generated
        # handbook (the same sentence with another day, hundreds of times) the 0.5B model once went
        # on listing days for 6,680 tokens, 600 s at 11 tokens/s, past this test's wait
        set_settings(page, instruct_server.model_id, temperature=0, max_tokens=400)
        try:
            open_app(page, instruct_server)
            page.set_input_files("[data-testid=attach-file]",
                                 files=[{"name": "handbook.pdf", "mimeType": "application/pdf", "buffer": book}])
            chip = page.locator(CHIP)
            wait_until(lambda: "read in parts" in chip.locator("[data-testid=attachment-meta]").inner_text(), 60)
            page.fill("[data-testid=prompt]", "Summarise this document.")
            page.keyboard.press("Enter")
            reply = last_reply(page)
            reply.wait_for()
            if n == 0:   # the first time the parts are read: the wait says so
                wait_until(lambda: "Reading handbook.pdf to answer about all of it" in reply.inner_text(), 60)
                assert " of 24 pages so far…" in reply.locator(".reading").inner_text()
                page.screenshot(path=str(ARTIFACTS / f"long-doc-{width}-whole-reading.png"))
            reply_done(page, 600_000)
            read = reply.locator("[data-testid=message-read]").inner_text()
            # read whole or skimmed as this computer's measured prompt speed allows (overview.READ_S):
            # an AVX2-only 2-core CI machine, at ~100 tokens/s, skims it
            assert re.match(r"Read from handbook\.pdf: all 24 pages, (read|skimmed) in \d+ parts and summarised",
                            read), read
            assert reply.locator(".content").inner_text().strip()
            page.screenshot(path=str(ARTIFACTS / f"long-doc-{width}-whole-answer.png"))
            fits(page, width)
            assert page.problems == []
        finally:
            ctx.close()

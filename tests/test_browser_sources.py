"""Sources under an answer in the chat page, in headless Chromium at 1280 and 390 px, end to end
through the real server: a 40-page PDF (one fact on page 29) is dropped on the page and read in
parts; the reply's source ("contract.pdf · p. 29") shows under it, pointing at it lights up the
sentence it supports, and opening it (click or Enter) shows the text of page 29 with the
supporting sentence highlighted and in view, in a dialog that Esc closes. The source is the
server's: the scripted model cites page 28, as the 0.5B demo model did, and that mark is struck
through with the right page after it. The source is saved with the chat (reload, Markdown export)
and a chat from before sources still opens. Then the instruct demo model answers the same question
and its source opens on the highlighted fact. A real typeset PDF (the LaTeX licence, from Debian)
does the same, searched or read whole: its sentence runs over three lines of page 2, and opens
highlighted whole. Screenshots in artifacts/sources-*.png."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

import needs
from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, ask, drop_file, fits, get_chat, get_chats, last_reply, new_page, put_chat, set_settings
from doc_files import make_pdf
from long_docs import contract_pages
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer, chat_headers, live_server, wait_until, write_scripted_model

pytestmark = pytest.mark.browser

PAGES, NEEDLE = contract_pages(pages=40, fact_page=29)
PDF = make_pdf(PAGES)
REPLY = ["Kestrel ", "Marine ", "services ", "the ", "generator ", "under ", "contract ", "KM-4471 ", "[p. 28]."]
LABEL = "contract.pdf · p. 29"
WIDTHS = [(1280, 860), (390, 844)]
OLD_CHAT = {"title": "From before sources", "mode": "chat", "messages": [
    {"id": "a", "parent": None, "role": "user", "content": "Hello"},
    {"id": "b", "parent": "a", "role": "assistant", "content": "Hi there.", "stats": {"tokens": 3}}]}


@pytest.fixture(scope="module")
def citer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model that answers every question with the fact and the wrong page."""
    return write_scripted_model(tmp_path_factory.mktemp("citer") / "citer.gguf", reply=REPLY)


def drop_pdf(page) -> None:
    """Drop the PDF on the conversation, as a person drags it from a folder, and wait for it to be indexed."""
    drop_file(page, "contract.pdf", PDF, "application/pdf")
    chip = page.locator("[data-testid=attachment-chip]")
    chip.wait_for()
    wait_until(lambda: "read in parts" in chip.locator("[data-testid=attachment-meta]").inner_text(), 60)


def lit_sentence(page) -> str:
    """The reply text lit up by pointing at a source ('' when nothing is)."""
    return page.evaluate("""() => {
        const h = CSS.highlights.get("source-sentence");
        return h ? [...h].map(r => r.toString()).join(" | ") : "";
    }""")


def check_dialog_shows_the_fact(page, label: str, quote: str) -> None:
    """The dialog is open on `label`, `quote` highlighted and inside the visible part of the text."""
    dialog = page.locator("[data-testid=source-dialog]")
    dialog.wait_for()
    assert dialog.locator("#source-title").inner_text() == label
    marks = dialog.locator("[data-testid=source-quote]")
    assert marks.count() >= 1 and quote in marks.all_inner_texts(), marks.all_inner_texts()
    shown = page.evaluate("""() => {
        const box = document.querySelector("[data-testid=source-text]").getBoundingClientRect();
        const m = document.querySelector("[data-testid=source-quote]").getBoundingClientRect();
        return m.top >= box.top && m.bottom <= box.bottom && m.height > 0;
    }""")
    assert shown, "the highlighted sentence is scrolled out of view"


@pytest.mark.parametrize("width, height", WIDTHS)
def test_a_dropped_pdf_answer_shows_the_servers_source_and_opens_it(browser, citer: Path, chat_data,
                                                                     width: int, height: int):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    try:
        with live_server(citer, "--ctx", "1024") as srv:
            put_chat(srv, "oldchat", OLD_CHAT)
            page.goto(srv.server.page_url)
            page.wait_for_selector("#app:not([hidden])")
            drop_pdf(page)
            ask(page, NEEDLE.question)
            reply = last_reply(page)
            chips = reply.locator("[data-testid=source]")
            chips.first.wait_for()
            assert chips.all_inner_texts() == [LABEL]          # one place, the server's, not the model's page 28
            assert reply.locator(".sources-title").inner_text() == "Source"
            assert reply.locator("[data-testid=wrong-mark]").inner_text() == "[p. 28]"
            assert reply.locator("[data-testid=mark-fix]").inner_text() == "p. 29"
            assert "28" not in reply.locator("[data-testid=message-sources]").inner_text()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"sources-{width}-answer.png"))
            fits(page, width)

            chips.first.hover()                                 # pointing at it lights up what it supports
            assert lit_sentence(page) == "Kestrel Marine services the generator under contract KM-4471 [p. 28] p. 29."
            chips.first.focus()                                 # and the keyboard opens it
            page.keyboard.press("Enter")
            check_dialog_shows_the_fact(page, LABEL, NEEDLE.text)
            dialog = page.locator("[data-testid=source-dialog]")
            assert dialog.locator("[data-testid=source-fix]").inner_text() == (
                "The answer says p. 28, but it is page 29 of contract.pdf that says so.")
            page.screenshot(path=str(ARTIFACTS / f"sources-{width}-open.png"))
            fits(page, width)
            box = dialog.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= width
            page.keyboard.press("Escape")
            dialog.wait_for(state="hidden")
            assert page.evaluate("document.activeElement.dataset.testid") == "source"   # back where it was

            reply.locator("[data-testid=mark-fix]").click()    # the right page in the reply opens it too
            check_dialog_shows_the_fact(page, LABEL, NEEDLE.text)
            box = dialog.bounding_box()
            page.mouse.click(box["x"] + 3, box["y"] + 3)        # a click on the box's edge keeps it open
            assert dialog.is_visible()
            page.mouse.click(4, height - 4)                     # one on the dimmed page around it closes it
            dialog.wait_for(state="hidden")

            (summary,) = wait_until(lambda: [c for c in get_chats(srv) if c["n_messages"] == 2 and c["id"] != "oldchat"])
            saved = get_chat(srv, summary["id"])["messages"][1]["sources"]
            assert [(s["label"], s["quote"], s["mark_right"]) for s in saved] == [(LABEL, NEEDLE.text, False)]
            export = requests.get(f"{srv.url}/api/chats/{summary['id']}/export?format=markdown",
                                  headers=chat_headers(srv), timeout=10).text
            assert f"- {LABEL} (not [p. 28], as the reply says): “{NEEDLE.text}”" in export, export

            page.reload()                                       # the saved chat shows its source again
            page.wait_for_selector("#app:not([hidden])")
            open_chat(page, summary["title"])
            assert last_reply(page).locator("[data-testid=source]").all_inner_texts() == [LABEL]
            last_reply(page).locator("[data-testid=source]").click()
            check_dialog_shows_the_fact(page, LABEL, NEEDLE.text)
            page.keyboard.press("Escape")

            open_chat(page, OLD_CHAT["title"])                  # a chat from before sources opens as it was
            assert last_reply(page).locator(".content").inner_text() == "Hi there."
            assert page.locator("[data-testid=message-sources]").count() == 0
            assert page.problems == []
    finally:
        ctx.close()


def open_chat(page, title_part: str) -> None:
    if page.get_attribute("#sidebar-toggle", "aria-expanded") == "false":   # at 390 px the list is behind its button
        page.click("#sidebar-toggle")
    item = page.locator("[data-testid=chat-item]").filter(has_text=title_part)
    item.locator(".chat-open").click()
    # the chat is opened once its messages are drawn and it is marked current (chats.openChat);
    # the reply shown before the click would otherwise be read as this chat's
    item.locator(".chat-open[aria-current=true]").wait_for()
    last_reply(page).wait_for()


def test_a_reply_the_server_found_no_support_for_shows_no_source(browser, citer: Path, chat_data):
    """Abstaining shows nothing, and a saved empty list loads: never a place the server did not find."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    page = new_page(ctx)
    try:
        with live_server(citer, "--ctx", "1024") as srv:
            chat = json.loads(json.dumps(OLD_CHAT))
            chat["title"] = "Nothing found"
            chat["messages"][1]["sources"] = []
            put_chat(srv, "abstained", chat)
            page.goto(srv.server.page_url)
            page.wait_for_selector("#app:not([hidden])")
            open_chat(page, "Nothing found")
            assert page.locator("[data-testid=message-sources]").count() == 0
            assert get_chat(srv, "abstained")["messages"][1]["sources"] == []
            assert page.problems == []
    finally:
        ctx.close()


@pytest.mark.instruct
def test_the_instruct_models_answer_opens_on_the_highlighted_fact(browser, instruct_server: LiveServer, chat_data):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    page = new_page(ctx)
    set_settings(page, instruct_server.model_id, temperature=0)   # greedy: the same reply each run
    try:
        page.goto(instruct_server.server.page_url)
        page.wait_for_selector("#app:not([hidden])")
        drop_pdf(page)
        ask(page, NEEDLE.question, 600_000)
        reply = last_reply(page)
        answer = reply.locator(".content").inner_text()
        assert "Kestrel Marine" in answer, answer
        chips = reply.locator("[data-testid=source]")
        chips.first.wait_for()
        assert LABEL in chips.all_inner_texts(), chips.all_inner_texts()
        chips.filter(has_text=LABEL).first.click()
        check_dialog_shows_the_fact(page, LABEL, NEEDLE.text)
        page.screenshot(path=str(ARTIFACTS / "sources-instruct-open.png"))
        assert page.problems == []
    finally:
        ctx.close()


# lppl.pdf (texlive-latex-base-doc 2022.20230122-3), page 2, clause 1: typeset over three lines
LPPL_SENTENCE = ("In particular, the act of running the Work is not restricted and no requirements are made "
                 "concerning any offers of support for the Work.")
LPPL_REPLY = ["In particular, ", "the act of running ", "the Work is not restricted ", "and no requirements are made ",
              "concerning any offers of support ", "for the Work."]


@needs.fixture("real-pdf", scope="module")
def lppl_pdf() -> bytes:
    from doc_corpus import cached   # tests/needs.py put benchmarks/ on the path

    return cached("lppl.pdf").read_bytes()


@pytest.fixture(scope="module")
def lppl_citer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model that answers every question with clause 1's sentence, word for word."""
    return write_scripted_model(tmp_path_factory.mktemp("lppl") / "lppl.gguf", reply=LPPL_REPLY)


def chat_files(sent: list[dict]) -> list[dict]:
    """The `file` objects of every chat request the page sent."""
    return [part["file"] for body in sent for m in body["messages"] if isinstance(m["content"], list)
            for part in m["content"] if part["type"] == "file"]


@pytest.mark.parametrize("width, height, whole", [(1280, 860, False), (390, 844, True)])
def test_a_real_typeset_pdf_answer_opens_on_its_sentence_highlighted_whole(browser, lppl_citer: Path, lppl_pdf: bytes,
                                                                          chat_data, width: int, height: int,
                                                                          whole: bool):
    """The LaTeX licence (8 typeset pages) is dropped on the page. Reading it whole would keep
    the first word waiting on a computer not yet measured, so it is read in parts and the page
    offers to read it whole: at 1280 px the question is searched, at 390 px the person chooses
    the whole file. Either way the answer's source is "lppl.pdf · p. 2", and opening it shows
    the sentence highlighted whole, though the PDF breaks it over three lines. The file goes to
    the server once: every turn sends its file_id, read whole or searched as chosen, never its text."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data))
            if r.url.endswith("/v1/chat/completions") and r.method == "POST" else None)
    label = "lppl.pdf · p. 2"
    try:
        with live_server(lppl_citer, "--ctx", "24576") as srv:
            page.goto(srv.server.page_url)
            page.wait_for_selector("#app:not([hidden])")
            drop_file(page, "lppl.pdf", lppl_pdf, "application/pdf")
            offer = page.locator("[data-testid=read-choice]")
            offer.wait_for(timeout=60_000)
            assert offer.inner_text().startswith("lppl.pdf will be read in parts"), offer.inner_text()
            meta = page.locator("[data-testid=attachment-chip] [data-testid=attachment-meta]")
            if whole:
                page.click("[data-testid=read-choice-action]")
                assert not meta.inner_text().endswith("read in parts"), meta.inner_text()
            else:
                assert meta.inner_text().endswith("read in parts"), meta.inner_text()
            ask(page, "Does the licence restrict running the Work?")
            reply = last_reply(page)
            chips = reply.locator("[data-testid=source]")
            chips.first.wait_for()
            assert chips.all_inner_texts() == [label]
            chips.first.click()
            dialog = page.locator("[data-testid=source-dialog]")
            dialog.wait_for()
            assert dialog.locator("#source-title").inner_text() == label
            marks = dialog.locator("[data-testid=source-quote]").all_inner_texts()
            assert marks == [LPPL_SENTENCE], marks   # one sentence, whole, its three typeset lines joined
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"sources-{width}-typeset-{'whole' if whole else 'parts'}.png"))
            fits(page, width)
            page.keyboard.press("Escape")
            dialog.wait_for(state="hidden")

            ask(page, "Is there a warranty?")              # a second turn sends the file's id again, not its text
            files = chat_files(sent)
            assert len(sent) == 2 and len(files) == 2, sent
            assert files[0]["file_id"].startswith("doc-") and "file_data" not in json.dumps(sent)
            assert files == [{"filename": "lppl.pdf", "file_id": files[0]["file_id"],
                              "read": "whole" if whole else "auto"}] * 2
            # read whole, the same reply is on page 2 again; searched, this question read the warranty
            # clause, where the reply's sentence is not: no source rather than a wrong one
            assert last_reply(page).locator("[data-testid=source]").all_inner_texts() == ([label] if whole else [])

            (summary,) = wait_until(lambda: [c for c in get_chats(srv) if c["n_messages"] == 4])
            (kept,) = get_chat(srv, summary["id"])["messages"][0]["attachments"]
            assert kept["file_id"] == files[0]["file_id"] and kept.get("read") == ("whole" if whole else None)
            page.reload()                                   # the saved chat goes on as it was sent
            page.wait_for_selector("#app:not([hidden])")
            open_chat(page, summary["title"])
            ask(page, "Does the licence restrict running the Work?")
            assert chat_files(sent)[-1] == files[0] and "file_data" not in json.dumps(sent)
            assert last_reply(page).locator("[data-testid=source]").all_inner_texts() == [label]
            assert page.problems == []
    finally:
        ctx.close()

"""Attachments in the chat page, in headless Chromium: the paperclip and drag-and-drop, chips
with name, size and words, the meter (how much of what the model reads at once), the "too long"
dialog (cancel, or the first N pages), refusals and unreadable files in plain words with the
app's message in a Details fold, and what a sent message keeps (saved chat, Markdown export).
Layout checked at 1280 and 390 px, screenshots in artifacts/. Then the instruct model reads a
generated PDF and repeats its first line."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import requests

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, get_chat, get_chats, last_reply, new_page
from doc_files import PNG_1PX, make_pdf
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer, chat_headers, live_server, wait_until

pytestmark = pytest.mark.browser

CHIP = "[data-testid=attachment-chip]"


def _xlsx() -> bytes:
    """The parts an .xlsx opens with (a zip naming its workbook), enough for the server to tell what it is."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", "<workbook/>")
    return out.getvalue()


XLSX = _xlsx()


def attach(page, name: str, data: bytes, mime: str) -> None:
    page.set_input_files("[data-testid=attach-file]", files=[{"name": name, "mimeType": mime, "buffer": data}])


def drop_in_page(page, js_file: str) -> None:
    """Drop a File made in the page (e.g. 200 MB of zeros, never sent over the wire) onto the page."""
    page.evaluate(f"""() => {{
        const dt = new DataTransfer();
        dt.items.add({js_file});
        for (const type of ["dragenter", "dragover", "drop"])
            document.querySelector("#messages").dispatchEvent(new DragEvent(type, {{bubbles: true, cancelable: true, dataTransfer: dt}}));
    }}""")


def problems(page) -> list[str]:
    """What the composer says about files it did not attach (their Details folds closed)."""
    return page.locator("[data-testid=attach-problem] .attach-problem-text").evaluate_all(
        "ps => ps.map(p => p.firstChild.textContent)")


def count(n: int, one: str, many: str) -> str:
    """As the page writes counts (en-US): "1 token", "1,024 tokens"."""
    return f"{n:,} {one if n == 1 else many}"


def share(used: int, of: int) -> int:
    return max(1, round(100 * used / of))


def pages_of(n: int, words: int) -> list[str]:
    return [f"Page {i + 1}: " + " ".join(f"word{j}" for j in range(words)) for i in range(n)]


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_chips_meter_and_the_too_long_dialog(browser, scripted_model: Path, width: int, height: int):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    try:
        with live_server(scripted_model, "--ctx", "1024") as srv:   # 512 tokens for files
            page.goto(srv.server.page_url)
            page.wait_for_selector("#app:not([hidden])")
            shot = f"attach-{width}"

            notes = make_pdf(["Short notes."])
            attach(page, "notes.pdf", notes, "application/pdf")
            chip = page.locator(CHIP)
            chip.wait_for()
            wait_until(lambda: "words" in chip.locator("[data-testid=attachment-meta]").inner_text(), 30)
            meta = chip.locator("[data-testid=attachment-meta]").inner_text()
            doc = requests.post(srv.url + "/v1/extract", data=notes, timeout=30, headers={"X-Filename": "notes.pdf"}).json()
            assert chip.locator(".chip-name").inner_text() == "notes.pdf" and len(notes) < 1024
            assert meta == f"{len(notes)} B · 2 words"                  # "Short notes."; tokens in the tooltip
            assert chip.get_attribute("title") == f"notes.pdf: 2 words, {count(doc['tokens'], 'token', 'tokens')} for the model"
            meter = page.locator("[data-testid=attach-meter]")
            assert meter.inner_text() == f"This file fills {share(doc['tokens'], 512)}% of what the model can read at once"
            assert meter.get_attribute("title") == (f"{count(doc['tokens'], 'token', 'tokens')} of the 512 tokens this "
                                                    "model keeps for files (its context window is 1,024 tokens).")

            attach(page, "photo.png", PNG_1PX, "image/png")            # refused at once, nothing else lost
            assert problems(page) == ["photo.png is a picture; this model reads only text (it was started without a "
                                      "vision projector). Attach a PDF, a Word file (.docx) or a text file."]
            drop_in_page(page, 'new File([new Uint8Array(200 * 1024 * 1024)], "movie.bin")')
            wait_until(lambda: problems(page) == ["movie.bin is 200.0 MB; files can be at most 32 MB. Attach a shorter "
                                                  "part of it."])
            attach(page, "broken.pdf", b"%PDF-1.4\nnot really a PDF", "application/pdf")   # the app cannot read it
            wait_until(lambda: problems(page) and problems(page)[0].startswith("broken.pdf"), 30)
            problem = page.locator("[data-testid=attach-problem]")
            assert problems(page) == ["broken.pdf could not be read: it may be damaged, or of a kind this app cannot "
                                      "open. Attach it as a PDF, a Word file (.docx) or a text file, or copy its text "
                                      "into your message."]
            detail = problem.locator("details code")
            assert not detail.is_visible()                             # the app's own words: one click away
            problem.locator("summary").focus()
            page.keyboard.press("Enter")
            assert "could not be read as a PDF" in detail.inner_text()
            assert page.locator(CHIP).count() == 1
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"{shot}-problem.png"))
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            problem.get_by_role("button", name="Hide this message").click()
            assert problem.count() == 0
            attach(page, "app.html", b"<html><head><script>render()</script></head><body><img src=a.png></body></html>",
                   "text/html")   # a saved web app: its words come from a script
            wait_until(lambda: problems(page) == ["app.html has no text this app can read: the page may show its words "
                                                  "only through scripts or pictures. Copy its text into your message "
                                                  "instead."], 30)
            problem.get_by_role("button", name="Hide this message").click()
            attach(page, "budget.xlsx", XLSX, "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")
            wait_until(lambda: problems(page) == ["budget.xlsx is a spreadsheet, which this app cannot open. To use it, "
                                                  "save the sheet as CSV (File > Save As > CSV UTF-8) and attach "
                                                  "that."], 30)   # what it is and the way out, not "damaged"
            problem.get_by_role("button", name="Hide this message").click()

            # under 512 tokens alone (a file over that is read in parts: test_browser_long_documents.py),
            # over it with notes.pdf
            long_pdf = make_pdf(pages_of(4, 42))
            drop_in_page(page, f"new File([Uint8Array.from(atob({json.dumps(_b64(long_pdf))}), c => c.charCodeAt(0))], "
                               '"long report.pdf", {type: "application/pdf"})')
            wait_until(lambda: page.locator(CHIP).count() == 2 and "reading" not in page.locator(CHIP).nth(1).inner_text(), 30)
            long_doc = requests.post(srv.url + "/v1/extract", data=long_pdf, timeout=30,
                                     headers={"X-Filename": "long report.pdf"}).json()
            used = doc["tokens"] + long_doc["tokens"]
            assert long_doc["tokens"] <= 512 < used and not long_doc["searched"]
            assert meter.inner_text() == (f"Too long: the files need {share(used, 512)}% of what the model can read at "
                                          "once · sending will ask what to keep")
            assert page.locator(CHIP).nth(1).locator("[data-testid=attachment-meta]").inner_text().endswith(" · 176 words")
            page.screenshot(path=str(ARTIFACTS / f"{shot}-chips.png"))
            assert page.evaluate("document.documentElement.scrollWidth") <= width

            page.fill("[data-testid=prompt]", "Summarise these")
            page.keyboard.press("Enter")
            dialog = page.locator("[data-testid=fit-dialog]")
            dialog.wait_for()
            text = page.locator("[data-testid=fit-text]").inner_text()
            assert text.startswith("The 2 files have 178 words, but this model can read about ") and text.endswith(
                " words of files at once.")
            assert "token" not in text and not page.locator("[data-testid=fit-detail]").is_visible()
            assert page.locator("[data-testid=fit-detail]").text_content() == (
                f"{count(used, 'token', 'tokens')} of files; this model keeps 512 tokens of its context window "
                "(1,024 tokens) for files.")
            cut = page.locator("[data-testid=fit-cut]").inner_text()
            assert cut.startswith("Send the first ") and cut.endswith(" pages of long report.pdf"), cut
            n = int(cut.split()[3])
            assert 1 <= n < 4
            page.screenshot(path=str(ARTIFACTS / f"{shot}-too-long.png"))
            page.click("[data-testid=fit-cancel]")                     # nothing sent, nothing lost
            dialog.wait_for(state="hidden")
            assert page.locator(CHIP).count() == 2 and page.locator("[data-testid=message-user]").count() == 0
            assert page.locator("[data-testid=prompt]").input_value() == "Summarise these"

            page.keyboard.press("Enter")
            page.click("[data-testid=fit-cut]")
            last_reply(page).wait_for()
            page.wait_for_selector("[data-testid=stop]", state="hidden")
            sent = page.locator("[data-testid=sent-attachment]")
            assert sent.count() == 2 and sent.nth(1).inner_text().endswith(f" · {44 * n} words · first {n} of 4 pages")
            assert page.locator(CHIP).count() == 0
            page.screenshot(path=str(ARTIFACTS / f"{shot}-sent.png"))

            (summary,) = wait_until(lambda: [c for c in get_chats(srv) if c["n_messages"] == 2])
            chat = get_chat(srv, summary["id"])
            files = chat["messages"][0]["attachments"]
            assert [f["name"] for f in files] == ["notes.pdf", "long report.pdf"]
            assert files[0]["text"] == "Short notes." and files[1]["note"] == f"first {n} of 4 pages"
            assert files[1]["text"].startswith("Page 1: word0") and f"Page {n}:" in files[1]["text"]
            assert f"Page {n + 1}:" not in files[1]["text"]
            md = _export(srv, summary["id"])
            assert "<details><summary>Attached: notes.pdf</summary>" in md and "Short notes." in md

            # A file that takes a while to read (a 1,158-page manual: about 20 s on 2 cores) shows the
            # seconds so far, so the wait is not silent; its reading is held here until the chip says so.
            held = []
            page.route("**/v1/extract", lambda route: held.append(route))
            attach(page, "manual.pdf", notes, "application/pdf")
            meta = page.locator(CHIP).locator("[data-testid=attachment-meta]")
            assert wait_until(lambda: page.evaluate("true") and held, 10) and meta.inner_text() == f"{len(notes)} B · reading…"
            wait_until(lambda: re.fullmatch(rf"{len(notes)} B · reading… [3-9] s", meta.inner_text()), 10)
            page.screenshot(path=str(ARTIFACTS / f"{shot}-reading.png"))
            held[0].continue_()
            page.unroute("**/v1/extract")
            wait_until(lambda: meta.inner_text() == f"{len(notes)} B · 2 words", 30)
            page.click("[data-testid=attachment-remove]")
            page.wait_for_selector("[data-testid=attachments]", state="hidden")

            page.locator("[data-testid=message-user]").first.wait_for()
            attach(page, "again.txt", b"plain text", "text/plain")     # removable before sending
            page.locator(CHIP).wait_for()
            page.click("[data-testid=attachment-remove]")
            page.wait_for_selector("[data-testid=attachments]", state="hidden")
            assert page.problems == []
    finally:
        ctx.close()


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def _export(srv: LiveServer, chat_id: str) -> str:
    resp = requests.get(f"{srv.url}/api/chats/{chat_id}/export?format=markdown", headers=chat_headers(srv), timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.text


@pytest.mark.instruct
def test_the_instruct_model_reads_an_attached_pdf(browser, instruct_server: LiveServer):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    page = new_page(ctx)
    try:
        page.goto(instruct_server.server.page_url)
        page.wait_for_selector("#app:not([hidden])")
        pdf = make_pdf(["The secret password is MARMALADE.", "Nothing else matters here."])
        attach(page, "memo.pdf", pdf, "application/pdf")
        page.locator(CHIP).wait_for()
        wait_until(lambda: "words" in page.locator(CHIP).inner_text(), 30)
        page.fill("[data-testid=prompt]", "Repeat the first line of the file exactly.")
        page.keyboard.press("Enter")
        last_reply(page).wait_for()
        page.wait_for_selector("[data-testid=stop]", state="hidden", timeout=120_000)
        answer = last_reply(page).locator(".content").inner_text()
        assert "MARMALADE" in answer.upper(), answer
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "attach-instruct-answer.png"))
        assert page.problems == []
    finally:
        ctx.close()

"""A real typeset PDF in the chat page, in headless Chromium at 1280 and 390 px: the LaTeX team's
"LaTeX2e for class and package writers" (clsguide.pdf, 33 pages, from Debian's
texlive-latex-base-doc, fetched by benchmarks/doc_corpus.py at test time, pinned by version and
SHA-256) is dropped on the page and read in parts. The answer repeats a definition that the PDF
wraps over three lines; its source opens on page 2 with the whole sentence highlighted, all three
lines of it, not a fragment. The page also sent the file only once: the question went by its
file_id. Screenshots in artifacts/real-pdf-*.png."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, drop_file, last_reply, new_page
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server, wait_until, write_scripted_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import doc_corpus  # noqa: E402

pytestmark = pytest.mark.browser

SENTENCE = ("LATEX is a document preparation system that enables the document writer to\n"
            "concentrate on the contents of their text, without bothering too much about\nthe formatting of it.")
REPLY = ["LaTeX ", "is ", "a ", "document ", "preparation ", "system ", "that ", "enables ", "the ", "document ",
         "writer ", "to ", "concentrate ", "on ", "the ", "contents ", "of ", "their ", "text, ", "without ",
         "bothering ", "too ", "much ", "about ", "the ", "formatting ", "of ", "it."]
WIDTHS = [(1280, 860), (390, 844)]


@pytest.fixture(scope="module")
def clsguide() -> bytes:
    try:
        return doc_corpus.path("clsguide.pdf").read_bytes()
    except doc_corpus.CorpusError as exc:   # no Debian mirror: say so, loudly
        pytest.fail(f"the real corpus could not be fetched: {exc}")


@pytest.fixture(scope="module")
def definer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model that answers every question with clsguide.pdf's definition of LaTeX, word for word."""
    return write_scripted_model(tmp_path_factory.mktemp("definer") / "definer.gguf", reply=REPLY)


@pytest.mark.parametrize("width, height", WIDTHS)
def test_a_wrapped_sentence_of_a_typeset_pdf_is_highlighted_whole(browser, clsguide: bytes, definer: Path, chat_data,
                                                                   width: int, height: int):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url.endswith("/v1/chat/completions")
            and r.post_data else None)
    try:
        with live_server(definer, "--ctx", "1024") as srv:
            page.goto(srv.server.page_url)
            page.wait_for_selector("#app:not([hidden])")
            drop_file(page, "clsguide.pdf", clsguide, "application/pdf")
            chip = page.locator("[data-testid=attachment-chip]")
            chip.wait_for()
            wait_until(lambda: "read in parts" in chip.locator("[data-testid=attachment-meta]").inner_text(), 120)
            page.fill("[data-testid=prompt]", "What is LaTeX, the document preparation system?")
            page.keyboard.press("Enter")
            last_reply(page).wait_for()
            page.wait_for_selector("[data-testid=stop]", state="hidden", timeout=180_000)

            (part,) = [p for p in sent[-1]["messages"][-1]["content"] if p.get("type") == "file"]
            assert part["file"]["file_id"].startswith("doc-") and "file_data" not in part["file"]   # sent once
            chips = last_reply(page).locator("[data-testid=source]")
            chips.first.wait_for()
            assert chips.all_inner_texts() == ["clsguide.pdf · p. 2"]
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"real-pdf-{width}-answer.png"))
            chips.first.click()
            dialog = page.locator("[data-testid=source-dialog]")
            dialog.wait_for()
            marks = dialog.locator("[data-testid=source-quote]")
            assert " ".join(marks.all_inner_texts()).split() == SENTENCE.split()   # the sentence, all three lines
            page.screenshot(path=str(ARTIFACTS / f"real-pdf-{width}-open.png"))
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            assert page.problems == []
    finally:
        ctx.close()

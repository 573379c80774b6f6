"""Pictures on the chat page with the test-made vision model (`--mmproj`), in headless Chromium:
attached with the paperclip or pasted, shown as thumbnails in the composer and in the sent
message, sent as image_url parts (the reply uses them), kept in the saved chat and its Markdown
export; a large photo is scaled down in the page first. 1280 and 390 px, screenshots in
artifacts/."""
from __future__ import annotations

from pathlib import Path

import pytest
from picture_files import png

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, get_chat, get_chats, last_reply, new_page
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import chat_headers, live_server, wait_until
from test_browser_attach import CHIP, attach, problems
from vision_ggufs import write_tiny_mmproj

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_pictures_are_attached_shown_sent_and_saved(browser, tiny_chat_model: Path, tmp_path: Path,
                                                    width: int, height: int) -> None:
    mmproj = write_tiny_mmproj(tmp_path / "mmproj-tiny.gguf", n_embd_text=64)
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    try:
        with live_server(tiny_chat_model, "--mmproj", str(mmproj), "--ctx", "1024") as srv:
            page.goto(srv.server.page_url)
            page.wait_for_selector("#app:not([hidden])")
            photo = png(64, 48, seed=4)
            attach(page, "cat.png", photo, "image/png")
            chip = page.locator(CHIP)
            chip.wait_for()
            thumb = chip.locator("[data-testid=attachment-thumbnail]")
            thumb.wait_for()
            assert thumb.evaluate("img => img.naturalWidth") == 64
            assert chip.locator("[data-testid=attachment-meta]").inner_text().endswith("picture")
            # a big photo is scaled down to 1536 px before it is sent or saved
            page.evaluate("""async () => {
                const c = document.createElement("canvas"); c.width = 3000; c.height = 2000;
                const g = c.getContext("2d"); g.fillStyle = "#3a7"; g.fillRect(0, 0, 3000, 2000);
                const blob = await new Promise(r => c.toBlob(r, "image/png"));
                const dt = new DataTransfer(); dt.items.add(new File([blob], "big.png", {type: "image/png"}));
                const ev = new ClipboardEvent("paste", {clipboardData: dt, bubbles: true, cancelable: true});
                document.querySelector("[data-testid=prompt]").dispatchEvent(ev);
            }""")
            wait_until(lambda: page.locator(CHIP).count() == 2 and "scaled down" in page.locator(CHIP).nth(1).inner_text(), 30)
            assert "scaled down from 3000 × 2000" in page.locator(CHIP).nth(1).inner_text()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"vision-{width}-composer.png"))
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.fill("[data-testid=prompt]", "what is in these pictures ?")
            page.keyboard.press("Enter")
            last_reply(page).wait_for()
            page.wait_for_selector("[data-testid=stop]", state="hidden", timeout=60_000)
            sent = page.locator("[data-testid=message-user] [data-testid=attachment-thumbnail]")
            assert sent.count() == 2
            assert last_reply(page).locator(".content").inner_text().strip()
            page.screenshot(path=str(ARTIFACTS / f"vision-{width}-sent.png"))
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            assert srv.engine.mm.projector.encodes == 2

            (summary,) = wait_until(lambda: [c for c in get_chats(srv) if c["n_messages"] == 2])
            files = get_chat(srv, summary["id"])["messages"][0]["attachments"]
            assert [f["name"] for f in files] == ["cat.png", "big.png"]
            assert files[0]["data_url"].startswith("data:image/png;base64,")
            assert files[1]["data_url"].startswith("data:image/jpeg;base64,") and len(files[1]["data_url"]) < 1_000_000
            md = page.request.get(f"{srv.url}/api/chats/{summary['id']}/export?format=markdown",
                                  headers=chat_headers(srv)).text()
            assert "![cat.png](data:image/png;base64," in md
            page.reload()                                           # the saved chat shows its pictures again
            page.wait_for_selector("#app:not([hidden])")
            item = page.locator("[data-testid=chat-item]").first
            if "active" not in (item.get_attribute("class") or ""):   # the page may reopen the chat it showed
                if not item.is_visible():                              # 390 px: the chat list is a drawer
                    page.click("#sidebar-toggle")
                item.click()
            page.locator("[data-testid=message-user] [data-testid=attachment-thumbnail]").first.wait_for()
            assert page.locator("[data-testid=message-user] [data-testid=attachment-thumbnail]").count() == 2
            assert page.problems == []
    finally:
        ctx.close()


def test_a_text_only_model_says_so_in_plain_words(browser, chat_server) -> None:
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    page = new_page(ctx)
    try:
        page.goto(chat_server.server.page_url)
        page.wait_for_selector("#app:not([hidden])")
        attach(page, "cat.png", png(), "image/png")
        assert problems(page) == ["cat.png is a picture; this model reads only text (it was started without a vision "
                                  "projector). Attach a PDF, a Word file (.docx) or a text file."]
        assert page.locator(CHIP).count() == 0
    finally:
        ctx.close()

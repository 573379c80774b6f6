"""The chat page in headless Chromium against a live server: loading view, a streamed reply,
stop, new chat, and model output that looks like HTML shown as text (never run)."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer, live_server, wait_idle, wait_until

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
pytestmark = pytest.mark.browser

if not os.path.exists(CHROMIUM):
    pytest.skip(f"headless browser tests need Chromium at {CHROMIUM} (apt-get install chromium)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    pg = ctx.new_page()
    pg.problems = []   # type: ignore[attr-defined]
    pg.on("dialog", lambda d: (pg.problems.append(f"dialog: {d.message}"), d.dismiss()))
    pg.on("pageerror", lambda e: pg.problems.append(f"page error: {e}"))
    pg.set_default_timeout(60_000)
    yield pg
    ctx.close()


def set_settings(page, model_id: str, **values) -> None:
    """Per-model settings as the page stores them, in place before its script runs."""
    data = json.dumps({"models": {model_id: values}, "api_key": ""})
    page.add_init_script(f"window.localStorage.setItem('llmpack.settings.v1', {json.dumps(data)});")


def last_reply(page):
    return page.locator("[data-testid=message-assistant]").last


def assert_inert(page) -> None:
    """No element, handler or script came from model text."""
    found = page.evaluate("""() => ({
        img: document.querySelectorAll('#messages img').length,
        script: document.querySelectorAll('#messages script, #messages iframe, #messages object').length,
        handlers: [...document.querySelectorAll('#messages *')].filter(
            el => [...el.attributes].some(a => a.name.startsWith('on'))).length,
        jsLinks: document.querySelectorAll('#messages a[href^="javascript"]').length,
        xss: window.__xss === undefined ? null : window.__xss,
    })""")
    assert found == {"img": 0, "script": 0, "handlers": 0, "jsLinks": 0, "xss": None}, found
    assert page.problems == []


# ---- a real model: streaming, stop, new chat ---------------------------------------------------------
@pytest.mark.demo
def test_chat_streams_stops_and_starts_over(demo_model: Path, page):
    with live_server(demo_model, display_name="Gemma Demo") as srv:
        set_settings(page, srv.model_id, temperature=0, max_tokens=60)
        page.goto(srv.url + "/")
        page.wait_for_selector("#app:not([hidden])")
        assert page.locator("[data-testid=model-name]").inner_text() == "Gemma Demo"

        # a reply streams in: its text is seen growing before the generation ends
        page.fill("[data-testid=prompt]", "Name three colours of the sea, in one sentence.")
        page.keyboard.press("Enter")
        reply = last_reply(page)
        reply.wait_for()
        lengths = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = reply.locator(".content").inner_text()
            if text and (not lengths or len(text) != lengths[-1]):
                lengths.append(len(text))
            if page.locator("[data-testid=stop]").is_hidden() and lengths:
                break
            time.sleep(0.02)
        assert len(lengths) >= 3 and lengths == sorted(lengths), lengths
        assert reply.locator(".content").inner_text().strip()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "chat-page.png"), full_page=True)

        # stop: the reply stops growing and the engine drops the request
        page.fill("[data-testid=prompt]", "Write a long story about a lighthouse keeper and the sea.")
        page.keyboard.press("Enter")
        reply = last_reply(page)
        wait_until(lambda: len(reply.locator(".content").inner_text()) > 20, timeout=120)
        page.click("[data-testid=stop]")
        page.wait_for_selector("[data-testid=stop]", state="hidden")
        wait_idle(srv.engine, timeout=10)
        frozen = reply.locator(".content").inner_text()
        time.sleep(0.5)
        assert reply.locator(".content").inner_text() == frozen
        assert srv.engine.stats().num_running == 0

        # a new chat starts empty; the old one is in the list
        page.click("[data-testid=new-chat]")
        assert page.locator("#messages .message").count() == 0
        assert page.locator("[data-testid=chat-item]").count() >= 1
        assert page.problems == []


# ---- HTML in model output is text -------------------------------------------------------------------
def test_loading_view_then_html_reply_is_text(scripted_model: Path, page):
    """The scripted model answers with <img onerror>, <script> and **bold** (deterministically)."""
    release = threading.Event()

    def prepare(progress):
        progress("extracting", 0.4)
        release.wait(60)
        return scripted_model

    srv = LiveServer(scripted_model, prepare=prepare).start(wait=False)
    try:
        page.goto(srv.url + "/")
        page.wait_for_selector("[data-testid=loading]:not([hidden])")
        wait_until(lambda: "Unpacking" in page.locator("[data-testid=phase]").inner_text(), timeout=10)
        release.set()
        page.wait_for_selector("#app:not([hidden])")

        page.fill("[data-testid=prompt]", "hello")
        page.click("[data-testid=send]")
        page.wait_for_selector("[data-testid=stop]", state="hidden")
        content = last_reply(page).locator(".content")
        text = content.inner_text()
        assert "<img src=x onerror=alert(1)>" in text and "<script>alert(2)</script>" in text
        assert content.locator("strong").inner_text() == "bold"        # markdown still renders
        assert_inert(page)
    finally:
        release.set()
        srv.stop()


def test_stored_history_with_html_is_text(scripted_model: Path, page):
    with live_server(scripted_model) as srv:
        hostile = ('Hi <img src=x onerror="window.__xss=1"> <script>window.__xss=2</script> '
                   '<iframe src="javascript:window.__xss=3"></iframe> [click](javascript:window.__xss=4) '
                   '<a href="javascript:window.__xss=5" onclick="window.__xss=6">x</a>')
        chat = {"id": "evil1", "title": '<img src=x onerror="window.__xss=7">', "model": srv.model_id,
                "created": 1, "updated": int(time.time() * 1000),
                "messages": [{"role": "user", "content": "<b onmouseover=window.__xss=8>me</b>"},
                             {"role": "assistant", "content": hostile}]}
        page.goto(srv.url + "/")
        page.wait_for_selector("#app:not([hidden])")
        page.evaluate("c => localStorage.setItem('llmpack.chats.v1', JSON.stringify([c]))", chat)
        page.reload()
        page.wait_for_selector("#app:not([hidden])")
        item = page.locator('[data-testid=chat-item][data-chat-id="evil1"]')
        assert item.inner_text().startswith('<img src=x onerror="window.__xss=7">')
        item.locator(".chat-open").click()
        reply = last_reply(page).locator(".content")
        reply.wait_for()
        assert "<script>window.__xss=2</script>" in reply.inner_text()
        assert "<b onmouseover=window.__xss=8>me</b>" in page.locator("[data-testid=message-user]").inner_text()
        page.mouse.move(10, 10)
        page.locator("[data-testid=message-user]").hover()
        assert page.locator("#sidebar img").count() == 0
        assert_inert(page)

"""Headless Chromium for the chat-page tests (`from browser_fixtures import *`).

Chromium is looked up on PATH (Debian's `chromium`, or `chromium-browser`, `google-chrome`...).
Without one the browser tests (the `browser` fixture's users, and every test marked `browser`) skip
on a developer machine before anything is set up, but with CI=true they fail: CI must prove the
page works, not report a green run that never opened it (tests/needs.py).
"""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
from playwright import sync_api
import needs
from server_fixtures import LockStep, chat_headers

__all__ = ["ARTIFACTS", "CHROMIUM_ARGS", "chromium_path", "browser", "page", "chat_data", "new_page", "open_app",
           "set_settings", "last_reply", "assert_inert", "put_chat", "get_chats", "get_chat", "get_settings",
           "shown_in_order", "unnamed_controls"]

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def chromium_path() -> str:
    """Chromium on PATH (one of CHROMIUM_NAMES; LLMPACK_CHROMIUM names another); skip, or fail when CI=true."""
    needs.need("chromium")
    return str(needs.TOOLS["chromium"]()[0].where())


@needs.fixture("chromium", scope="module")
def browser() -> Iterator[Any]:
    exe = chromium_path()
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


def new_page(ctx: Any) -> Any:
    """A page that records dialogs and script errors in `page.problems`."""
    pg = ctx.new_page()
    pg.problems = []   # type: ignore[attr-defined]
    pg.on("dialog", lambda d: (pg.problems.append(f"dialog: {d.message}"), d.dismiss()))
    pg.on("pageerror", lambda e: pg.problems.append(f"page error: {e}"))
    pg.set_default_timeout(60_000)
    return pg


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    ctx.grant_permissions(["clipboard-read", "clipboard-write"])
    yield new_page(ctx)
    ctx.close()


@pytest.fixture(autouse=True)
def chat_data(chat_data: Path) -> Path:
    """conftest.py's chat_data, for every browser test: saved chats never go to the user's folder."""
    return chat_data


def tool_store(page, *, off=(), on=(), servers=(), with_files: bool = False) -> None:
    """The page's tool settings (webui/tools.js), in place before its script runs."""
    data = json.dumps({"off": {**{n: True for n in off}, **{n: False for n in on}}, "withFiles": with_files,
                       "always": {}, "servers": list(servers)})
    page.add_init_script(f"window.localStorage.setItem('llmpack.tools.v1', {json.dumps(data)});")


def set_settings(page, model_id: str, **values) -> None:
    """Per-model settings as the page stores them, in place before its script runs."""
    data = json.dumps({"models": {model_id: values}, "api_key": ""})
    page.add_init_script(f"window.localStorage.setItem('llmpack.settings.v1', {json.dumps(data)});")


def open_app(page, srv) -> None:
    """The page the app opens (with this launch's secret), once the model is ready."""
    page.goto(srv.server.page_url)
    page.wait_for_selector("#app:not([hidden])")


def last_reply(page):
    return page.locator("[data-testid=message-assistant]").last


def ask(page, question: str, timeout_ms: int = 120_000) -> None:
    """Type `question` in the prompt, send it with Enter, and wait until the reply is over."""
    page.fill("[data-testid=prompt]", question)
    page.keyboard.press("Enter")
    last_reply(page).wait_for()
    reply_done(page, timeout_ms)


def reply_done(page, timeout_ms: int) -> None:
    """Wait until the reply is over. Past `timeout_ms` the failure shows what the reply said so
    far and where every thread of this process was (the live servers run in it): a reply
    still streaming, a step that never ends and a thread that holds the GIL differ there."""
    try:
        page.wait_for_selector("[data-testid=stop]", state="hidden", timeout=timeout_ms)
    except sync_api.TimeoutError:
        import faulthandler
        import sys

        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        text = last_reply(page).inner_text()
        raise AssertionError(f"the reply did not end within {timeout_ms / 1000:.0f} s; it reads "
                             f"({len(text):,} characters): {text[:400]!r} ... {text[-400:]!r}") from None


def fits(page, width: int) -> None:
    """Nothing on the page is wider than the window: no sideways scrolling."""
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def put_chat(srv, chat_id: str, chat: dict) -> None:
    """Save a chat through the API, as the page would."""
    resp = requests.put(f"{srv.url}/api/chats/{chat_id}", json=chat, headers=chat_headers(srv), timeout=10)
    assert resp.status_code == 200, resp.text


def get_chats(srv) -> list[dict]:
    resp = requests.get(f"{srv.url}/api/chats", headers=chat_headers(srv), timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def get_chat(srv, chat_id: str) -> dict:
    resp = requests.get(f"{srv.url}/api/chats/{chat_id}", headers=chat_headers(srv), timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def get_settings(srv) -> dict:
    resp = requests.get(f"{srv.url}/api/settings", headers=chat_headers(srv), timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


SHOWS_DELTAS = """n => {
    // once the stop button hides the reply is over; while it streams, it counts the deltas it
    // has shown ("1 token", "7 tokens · 40.1 tokens/s")
    if (document.querySelector("[data-testid=stop]").hidden) return "over";
    const replies = document.querySelectorAll("[data-testid=message-assistant]");
    const stats = replies.length ? replies[replies.length - 1].querySelector(".stats") : null;
    const shown = stats ? stats.textContent.split(" · ")[0] : "";
    return shown === (n === 1 ? "1 token" : n + " tokens") ? "shown" : "";
}"""


def shown_in_order(page, step: LockStep, count: int | None = None) -> int:
    """Let the reply stream in lock step: each delta the engine makes must be on the page before
    the engine's next one is let through. Stops after `count` deltas (the last one not confirmed,
    so the engine's next output waits), or when the reply is over. Returns the deltas shown."""
    page.wait_for_selector("[data-testid=stop]")   # the reply has begun
    shown = 0
    while count is None or shown < count:
        status = page.wait_for_function(SHOWS_DELTAS, arg=shown + 1).json_value()
        if status == "over":
            break
        shown += 1
        assert len(step.emitted) == shown and step.held_back == [], (shown, step.emitted, step.held_back)
        if shown != count:
            step.seen()
    return shown


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


UNNAMED = """() => {
    const named = (el) => {
        if (el.getAttribute('aria-label') || el.getAttribute('title')) return true;
        const by = el.getAttribute('aria-labelledby');
        if (by && by.split(/\\s+/).some((id) => (document.getElementById(id) || {}).textContent)) return true;
        if (el.labels && [...el.labels].some((l) => l.textContent.trim())) return true;
        return ['BUTTON', 'SUMMARY'].includes(el.tagName) && el.textContent.trim() !== '';
    };
    return [...document.querySelectorAll('button, input, select, textarea, summary, meter')]
        .filter((el) => !el.hidden && !el.closest('dialog:not([open])') && !named(el))
        .map((el) => el.outerHTML.slice(0, 120));
}"""


def unnamed_controls(page) -> list[str]:
    """The page's controls (buttons, fields, selects, folds, meters) that have no name a screen
    reader can say: no label, aria-label(ledby), title or text. Hidden ones and those of a closed
    dialog are left out (they are named when shown)."""
    return page.evaluate(UNNAMED)


def drop_file(page: Any, name: str, data: bytes, media: str) -> None:
    """Drop a file on the conversation, as a person drags it from a folder."""
    page.evaluate("""([name, b64, media]) => {
        const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([bytes], name, {type: media}));
        for (const type of ["dragenter", "dragover", "drop"])
            document.querySelector("#messages").dispatchEvent(
                new DragEvent(type, {bubbles: true, cancelable: true, dataTransfer: dt}));
    }""", [name, base64.b64encode(data).decode(), media])

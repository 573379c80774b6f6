"""The chat page as a person meets it (issue 20): long pasted messages fold, a reload reopens the
chat that was open (and says when a reply was cut off), the phone header has room for the name
(and the desktop header shows it whole),
the base-model note can be put away, the keyboard reaches New chat without visiting every chat,
text completion is readable in light and dark, a re-imported chat is not doubled, a reply ends
without a network error, and the page's HTML sanitiser is DOMPurify."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import requests

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, get_chats, last_reply, new_page, open_app, put_chat, set_settings, shown_in_order
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer, LockStep, live_server, wait_idle, wait_until

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[1]
NOW = int(time.time() * 1000)


def chat_once(page, text: str) -> None:
    page.fill("[data-testid=prompt]", text)
    page.keyboard.press("Enter")
    last_reply(page).wait_for()
    page.wait_for_selector("[data-testid=stop]", state="hidden")


def open_listed(page, title: str) -> None:
    if page.locator("#sidebar").is_hidden():
        page.click("#sidebar-toggle")
    page.locator("[data-testid=chat-item]", has_text=title).locator(".chat-open").click()


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_a_long_pasted_message_folds_and_unfolds_from_the_keyboard(browser, scripted_model: Path, width, height):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    pasted = "\n".join(f"line {i}: some pasted log output" for i in range(300))
    with live_server(scripted_model) as srv:
        put_chat(srv, "long", {"title": "Long paste", "updated": NOW, "messages": [
            {"role": "user", "content": pasted}, {"role": "assistant", "content": "That is a long log."},
            {"role": "user", "content": "short one"}]})
        open_app(page, srv)
        open_listed(page, "Long paste")
        page.locator("[data-testid=message-user]").nth(1).wait_for()
        long_msg, short_msg = page.locator("[data-testid=message-user]").all()
        bubble = long_msg.locator(".content")
        line = bubble.evaluate("n => parseFloat(getComputedStyle(n).lineHeight)")
        assert 15 * line < bubble.bounding_box()["height"] < 24 * line     # about 20 lines, not 300
        toggle = long_msg.locator("[data-testid=fold-toggle]")
        assert toggle.inner_text() == "Show all" and toggle.get_attribute("aria-expanded") == "false"
        assert short_msg.locator("[data-testid=fold-toggle]").count() == 0
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"folded-message-{width}.png"))

        toggle.focus()
        assert toggle.evaluate("b => b.tabIndex") == 0
        page.keyboard.press("Enter")
        assert toggle.inner_text() == "Show less" and toggle.get_attribute("aria-expanded") == "true"
        assert bubble.bounding_box()["height"] > 250 * line
        page.keyboard.press("Space")
        assert toggle.inner_text() == "Show all" and bubble.bounding_box()["height"] < 24 * line
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        assert page.problems == []
    ctx.close()


def test_a_reload_reopens_the_chat_that_was_open(scripted_model: Path, page):
    with live_server(scripted_model) as srv:
        open_app(page, srv)
        chat_once(page, "the first chat")
        page.click("[data-testid=new-chat]")
        chat_once(page, "the second chat")
        open_listed(page, "the first chat")
        page.reload()
        page.wait_for_selector("#app:not([hidden])")
        user = page.locator("[data-testid=message-user] .content")
        wait_until(lambda: user.count() == 1 and user.inner_text() == "the first chat")
        assert page.locator("[data-testid=chat-item].active").inner_text().startswith("the first chat")

        page.click("[data-testid=new-chat]")      # a new chat left open: a reload shows a new chat
        page.reload()
        page.wait_for_selector("#app:not([hidden])")
        page.locator("[data-testid=chat-item]").nth(1).wait_for()
        assert page.locator("#messages .message").count() == 0


@pytest.mark.instruct
def test_a_reply_cut_off_by_a_reload_says_interrupted(instruct_server: LiveServer, page):
    srv = instruct_server
    set_settings(page, srv.model_id, temperature=0)
    open_app(page, srv)
    with LockStep(srv.engine) as step:
        page.fill("[data-testid=prompt]", "Write a long story about a lighthouse keeper and the sea, in ten paragraphs.")
        page.keyboard.press("Enter")
        assert shown_in_order(page, step, count=8) == 8    # the engine's next output waits for the page
        before = last_reply(page).locator(".content").inner_text()
        page.reload()                                      # so the reply is still being written
        page.wait_for_selector("#app:not([hidden])")
        reply = last_reply(page)
        reply.wait_for()
        stats = reply.locator(".stats")
        wait_until(lambda: "Interrupted" in stats.inner_text())
        step.release()
    assert "reload" in stats.inner_text() and reply.locator(".content").inner_text() == before
    assert page.locator("[data-testid=regenerate]").is_visible()     # and it can be written again
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "interrupted-reply.png"))
    wait_idle(srv.engine)   # the shared server is left as it was found


def test_the_phone_header_has_room_and_the_base_model_note_can_be_put_away(browser, tiny_model: Path):
    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    page = new_page(ctx)
    with live_server(tiny_model, display_name="Gemma 3 270M") as srv:
        put_chat(srv, "doc", {"title": "Once", "mode": "complete", "updated": NOW, "messages": [
            {"role": "user", "content": "Once upon a time"}, {"role": "assistant", "content": " there was a sea."}]})
        open_app(page, srv)
        open_listed(page, "Once")
        page.wait_for_selector("#sidebar", state="hidden")
        note = page.locator("[data-testid=base-notice]")
        assert note.is_visible() and note.bounding_box()["height"] <= 64
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "phone-header-390.png"))

        parts = ["#sidebar-toggle", "#model-name", "#backend", ".mode-switch", "#export-menu > summary",
                 "#new-chat", "#settings-button"]
        boxes = {p: page.locator(p).bounding_box() for p in parts}
        assert all(boxes.values()), boxes                  # all of them on screen
        for i, a in enumerate(parts):
            for b in parts[i + 1:]:
                x, y = boxes[a], boxes[b]
                overlap = (min(x["x"] + x["width"], y["x"] + y["width"]) - max(x["x"], y["x"]) > 0.5 and
                           min(x["y"] + x["height"], y["y"] + y["height"]) - max(x["y"], y["y"]) > 0.5)
                assert not overlap, (a, b, x, y)
            assert boxes[a]["x"] >= 0 and boxes[a]["x"] + boxes[a]["width"] <= 390, a
        name = page.locator("#model-name")
        assert name.inner_text() == "Gemma 3 270M" and name.evaluate("n => n.scrollWidth <= n.clientWidth")

        dismiss = page.locator("[data-testid=base-notice-dismiss]")
        assert dismiss.get_attribute("aria-label")
        dismiss.click()
        assert note.is_hidden()
        page.reload()
        page.wait_for_selector("#app:not([hidden])")
        assert note.is_hidden()                             # remembered, for this model
        assert srv.model_id in page.evaluate("localStorage.getItem('llmpack.base-notice-hidden.v1')")
        assert page.problems == []
    ctx.close()


HEADER_NAME = "Qwen2.5 Coder 0.5B Instruct"   # the instruct demo's name (issue 38: cut at 1280 px)


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_the_header_shows_the_whole_model_name_and_the_full_name_on_hover(browser, scripted_model: Path,
                                                                           width: int, height: int):
    """At 1280 px the header shows the demo model's whole name (the badges beside it give way
    first); at 390 px a name that does not fit ends in an ellipsis, and hovering shows it all."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    try:
        with live_server(scripted_model, display_name=HEADER_NAME) as srv:
            open_app(page, srv)
            name = page.locator("#model-name")
            assert name.inner_text() == HEADER_NAME
            assert name.get_attribute("title").startswith(HEADER_NAME)
            whole = name.evaluate("n => n.scrollWidth <= n.clientWidth")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"header-name-{width}.png"), clip={"x": 0, "y": 0, "width": width,
                                                                                   "height": 80})
            if width >= 1280:
                assert whole, "the model's name is cut in the header at 1280 px"
                parts = ["#sidebar-toggle", "#model-name", ".mode-switch", "#export-menu > summary", "#new-chat",
                         "#settings-button"]
                boxes = [b for b in (page.locator(p).bounding_box() for p in parts) if b]   # those shown
                assert len(boxes) >= 4 and all(a["x"] + a["width"] <= b["x"] + 0.5 for a, b in zip(boxes, boxes[1:])), boxes
                for badge in page.locator(".model-info .badge:visible").all():   # beside the name, or out of sight
                    box, info = badge.bounding_box(), page.locator(".model-info").bounding_box()
                    assert box["y"] >= info["y"] + info["height"] or box["x"] + box["width"] <= info["x"] + info["width"]
                page.evaluate("n => document.querySelector('#model-name').textContent = n", "A " * 80)
                assert name.evaluate("n => n.scrollWidth > n.clientWidth && getComputedStyle(n).textOverflow") \
                    == "ellipsis"                             # a name longer than the bar still ends in an ellipsis
            else:
                assert not whole and name.evaluate("n => getComputedStyle(n).textOverflow") == "ellipsis"
            assert page.problems == []
    finally:
        ctx.close()


def test_the_keyboard_skips_to_the_chat_and_each_listed_chat_is_one_stop(scripted_model: Path, page):
    with live_server(scripted_model) as srv:
        for i in range(5):
            put_chat(srv, f"c{i}", {"title": f"Chat {i}", "updated": NOW - i * 1000, "messages": [
                {"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]})
        open_app(page, srv)
        page.locator("[data-testid=chat-item]").nth(4).wait_for()
        wait_until(lambda: page.evaluate("document.activeElement.id") == "prompt")   # the page is set up
        page.evaluate("""() => {   // focus at the very start of the page, as after loading it
            const start = document.createElement('span');
            start.tabIndex = -1;
            document.body.prepend(start);
            start.focus();
        }""")
        page.keyboard.press("Tab")
        skip = page.locator("[data-testid=skip-link]")
        assert skip.evaluate("a => a === document.activeElement") and skip.is_visible()
        page.keyboard.press("Enter")
        assert page.evaluate("document.activeElement.id") == "prompt"

        skip.focus()
        stops = []
        for _ in range(30):
            page.keyboard.press("Tab")
            stops.append(page.evaluate("""() => { const a = document.activeElement;
                return {id: a.id, inList: !!a.closest('#chat-list'), text: a.textContent.trim().slice(0, 30)}; }"""))
            if stops[-1]["id"] == "new-chat":
                break
        assert stops[-1]["id"] == "new-chat", stops
        assert sum(s["inList"] for s in stops) == 1, stops

        first = page.locator("[data-testid=chat-item] .chat-open").first
        first.focus()
        page.keyboard.press("ArrowDown")                    # the arrows move through the list
        assert page.evaluate("document.activeElement.textContent").startswith("Chat 1")
        page.keyboard.press("Enter")
        assert page.locator("[data-testid=message-user] .content").inner_text() == "question 1"
        page.locator("[data-testid=chat-item] .chat-open", has_text="Chat 1").focus()
        page.keyboard.press("Delete")                       # the delete button is out of the tab order
        wait_until(lambda: page.locator("[data-testid=chat-item]").count() == 4)
        assert "Chat deleted." in page.locator("#toast-text").inner_text()
        assert page.evaluate("document.activeElement.textContent").startswith("Chat 2")   # focus stays in the list
        assert page.problems == []


def _luminance(rgb: list[float]) -> float:
    def chan(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (chan(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: list[float], b: list[float]) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_completion_is_readable_not_styled_like_a_selection(browser, tiny_model: Path, scheme: str):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860}, color_scheme=scheme)
    page = new_page(ctx)
    with live_server(tiny_model) as srv:
        put_chat(srv, "doc", {"title": "Once", "mode": "complete", "updated": NOW, "messages": [
            {"role": "user", "content": "Once upon a time"}, {"role": "assistant", "content": " there was a sea."}]})
        open_app(page, srv)
        open_listed(page, "Once")
        colours = page.locator("[data-testid=completion]").first.evaluate("""n => {
            const rgb = (s) => s.match(/[\\d.]+/g).map(Number);
            let bg = n.parentElement;
            while (bg && rgb(getComputedStyle(bg).backgroundColor).length === 4 && rgb(getComputedStyle(bg).backgroundColor)[3] === 0)
                bg = bg.parentElement;
            const prompt = document.querySelector('[data-testid=prompt-text]');
            return {text: rgb(getComputedStyle(n).color), own: getComputedStyle(n).backgroundColor,
                    prompt: rgb(getComputedStyle(prompt).color), page: rgb(getComputedStyle(bg || document.body).backgroundColor)};
        }""")
        assert colours["own"] == "rgba(0, 0, 0, 0)", colours          # no highlight behind the model's text
        assert _contrast(colours["text"], colours["page"]) >= 7, colours
        assert _contrast(colours["prompt"], colours["page"]) >= 4.5, colours
        assert colours["text"] != colours["prompt"]                   # still told apart
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"completion-{scheme}.png"))
    ctx.close()


def test_reimporting_a_chat_opens_the_one_already_there(scripted_model: Path, page):
    with live_server(scripted_model) as srv:
        open_app(page, srv)
        chat_once(page, "keep me once")
        saved = wait_until(lambda: finished_messages(srv))   # the finished reply's save, not one made while it streamed
        exported = json.dumps({"format": "llmpack-chat", "version": 1, "title": "keep me once",
                               "messages": saved}).encode()
        page.click("[data-testid=new-chat]")
        page.set_input_files("[data-testid=import-file]", files=[
            {"name": "chat.json", "mimeType": "application/json", "buffer": exported}])
        wait_until(lambda: "already" in page.locator("#toast-text").inner_text())
        assert len(get_chats(srv)) == 1 and page.locator("[data-testid=chat-item]").count() == 1
        assert page.locator("[data-testid=message-user] .content").inner_text() == "keep me once"


def finished_messages(srv) -> list | None:
    """The one saved chat's messages once its reply was saved finished (with its figures)."""
    chats = get_chats(srv)
    if not chats:
        return None
    headers = {"X-Llmpack-Chat": "1", "X-Llmpack-Token": srv.server.options.chat_token}
    messages = requests.get(f"{srv.url}/api/chats/{chats[0]['id']}", headers=headers, timeout=10).json()["messages"]
    return messages if len(messages) == 2 and "tokens" in messages[1].get("stats", {}) else None


# Counts the page's cancels of reply streams: a cancel before the server closed the response is
# what aborts the request (net::ERR_ABORTED), but whether the browser sees it depends on timing.
COUNT_CANCELS = """
const realFetch = window.fetch;
window.__cancelledReplies = 0;
window.fetch = async (...args) => {
  const resp = await realFetch(...args);
  if (!String(args[0]).includes('/v1/chat/completions') || !resp.body) return resp;
  const reader = resp.body.getReader();
  const body = new ReadableStream({
    pull: async (c) => { const r = await reader.read(); if (r.done) c.close(); else c.enqueue(r.value); },
    cancel: (why) => { window.__cancelledReplies += 1; return reader.cancel(why); },
  });
  return new Response(body, {status: resp.status, statusText: resp.statusText, headers: resp.headers});
};
"""


def test_a_finished_reply_leaves_no_network_error_behind(scripted_model: Path, page):
    failed, errors, pending = [], [], set()
    page.on("request", lambda r: pending.add(r))
    page.on("requestfinished", lambda r: pending.discard(r))
    page.on("requestfailed", lambda r: (pending.discard(r), failed.append(f"{r.url} {r.failure}")))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.add_init_script(COUNT_CANCELS)
    with live_server(scripted_model) as srv:
        open_app(page, srv)
        for text in ("hello", "again"):
            # the reply's response is read to its end (a cancelled one never "finishes": it fails)
            with page.expect_event("requestfinished", lambda r: r.url.endswith("/v1/chat/completions"),
                                   timeout=30_000):
                chat_once(page, text)
        assert page.evaluate("window.__cancelledReplies") == 0   # whatever the timing, nothing was cut short
        wait_until(lambda: len(get_chats(srv)) == 1 and get_chats(srv)[0]["n_messages"] == 4)
        # the save made while the reply streamed can land before the one made when it ends: a reload
        # while that one is in flight aborts it (the reload's own doing; the keepalive save on the way
        # out covers it), so reload once the page has nothing in flight (page.evaluate lets the
        # request events in)
        wait_until(lambda: page.evaluate("0") == 0 and not pending)
        page.reload()   # and the page's own requests since then came back whole too
        page.wait_for_selector("#app:not([hidden])")
        assert failed == [] and errors == [], (failed, errors)


def test_the_sanitiser_is_dompurify_and_strips_scripts_handlers_and_script_links(scripted_model: Path, page):
    lock = json.loads((ROOT / "webui" / "vendor.lock.json").read_text("utf-8"))
    pinned = next(p["version"] for p in lock["packages"] if p["name"] == "dompurify")
    with live_server(scripted_model) as srv:
        open_app(page, srv)
        out = page.evaluate("""async () => {
            const m = await import('/static/markdown.js');
            await m.markdownReady;
            const box = document.createElement('div');
            box.append(m.sanitize('<p onclick="window.__xss=1">ok <a href="javascript:window.__xss=2">js</a> ' +
                '<a href="https://example.com/" onmouseover="window.__xss=3">web</a></p>' +
                '<script>window.__xss=4</scr' + 'ipt><img src=x onerror="window.__xss=5">' +
                '<iframe src="javascript:window.__xss=6"></iframe><svg><a href="javascript:1">s</a></svg>' +
                '<form action="/x"><input name=a></form><code class="hljs-keyword evil">def</code>'));
            return {html: box.innerHTML, version: (await import('/static/vendor/purify.js')).default.version};
        }""")
        html = out["html"]
        for banned in ("onclick", "onmouseover", "onerror", "javascript:", "<script", "<img", "<iframe", "<svg",
                       "<form", "<input", "evil"):
            assert banned not in html, (banned, html)
        assert '<a href="https://example.com/" target="_blank" rel="noopener noreferrer nofollow">web</a>' in html
        assert '<p>ok <a>js</a>' in html and '<code class="hljs-keyword">def</code>' in html
        assert out["version"] == pinned
        assert page.evaluate("window.__xss") is None

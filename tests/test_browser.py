"""The chat page in headless Chromium against a live server: loading view, a streamed reply,
stop, new chat, and model output that looks like HTML shown as text (never run).

Markdown, saved chats, export/import and base models are in test_browser_chats.py; both use
the `browser` fixtures of browser_fixtures.py (Chromium found on PATH; with CI=true a missing
browser fails the run instead of skipping it)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import (ARTIFACTS, assert_inert, get_chat, get_chats, last_reply, put_chat, set_settings,
                              shown_in_order)
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import (LiveServer, LockStep, finished_metric, held_in_phase, live_server, wait_idle,
                             wait_until)

pytestmark = pytest.mark.browser


# ---- a real model: streaming, stop, new chat ---------------------------------------------------------
LONG = 1500   # tokens: a reply the engine would take a long time to finish


@pytest.mark.demo
def test_chat_streams_stops_and_starts_over(demo_server: LiveServer, page):
    srv = demo_server
    set_settings(page, srv.model_id, temperature=0, max_tokens=60)
    page.goto(srv.server.page_url)
    page.wait_for_selector("#app:not([hidden])")
    assert page.locator("[data-testid=model-name]").inner_text() == srv.state.model.display_name
    page.click("[data-testid=mode-chat]")   # a base model opens in text completion mode

    # a reply streams in: each delta is on the page before the engine makes the next one
    with LockStep(srv.engine) as step:
        page.fill("[data-testid=prompt]", "Name three colours of the sea, in one sentence.")
        page.keyboard.press("Enter")
        shown = shown_in_order(page, step)
    assert step.held_back == [] and shown >= 3, (shown, step.emitted)
    assert last_reply(page).locator(".content").inner_text().strip()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chat-page.png"), full_page=True)

    # stop: the page hangs up, the engine drops the request long before its limit, the server
    # counts it as aborted, and the reply stays as it was
    page.click("#settings-button")
    page.fill("[data-testid=max-tokens]", str(LONG))
    page.click("#settings-done")
    aborted = finished_metric(srv.url, "abort")
    base = wait_idle(srv.engine)
    with LockStep(srv.engine) as step:
        page.fill("[data-testid=prompt]", "Write a long story about a lighthouse keeper and the sea.")
        page.keyboard.press("Enter")
        assert shown_in_order(page, step, count=5) == 5      # the engine's 6th output waits for the page
        sent = "".join(step.emitted)
        content = last_reply(page).locator(".content")
        before = content.inner_text()
        page.click("[data-testid=stop]")
        page.wait_for_selector("[data-testid=stop]", state="hidden")
        after = wait_idle(srv.engine, kv_baseline=base.kv_blocks_used, timeout=30)
        assert after.generation_tokens_total - base.generation_tokens_total < LONG   # dropped, not run to the end
        step.release()                              # the held output goes to a client that has gone
        assert wait_until(lambda: finished_metric(srv.url, "abort") == aborted + 1)
    assert step.held_back == [] and len(step.emitted) > 5
    assert content.inner_text() == before           # nothing more reached the page

    def saved_reply() -> str:
        (chat,) = get_chats(srv)
        return chat["n_messages"] == 4 and get_chat(srv, chat["id"])["messages"][-1]["content"]
    wait_until(lambda: saved_reply() == sent)       # saved as it was when Stop was pressed

    # a new chat starts empty; the old one is in the list
    page.click("[data-testid=new-chat]")
    assert page.locator("#messages .message").count() == 0
    assert page.locator("[data-testid=chat-item]").count() >= 1
    assert page.problems == []


# ---- HTML in model output is text -------------------------------------------------------------------
def test_loading_view_then_html_reply_is_text(scripted_model: Path, page):
    """The scripted model answers with <img onerror>, <script> and **bold** (deterministically)."""
    with held_in_phase(scripted_model, "extracting", 0.4,
                       {"path": "/home/me/.cache/llmpack/models", "bytes": 491_400_064}) as (srv, release):
        page.goto(srv.server.page_url)
        page.wait_for_selector("[data-testid=loading]:not([hidden])")
        # where the model goes and how big it is (/health's "unpack", in its message)
        wait_until(lambda: page.locator("[data-testid=phase]").inner_text() == "First start: unpacking the model "
                   "(468.64 MiB) to /home/me/.cache/llmpack/models; this happens once…", timeout=10)
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


def test_stored_history_with_html_is_text(scripted_model: Path, page):
    with live_server(scripted_model) as srv:
        hostile = ('Hi <img src=x onerror="window.__xss=1"> <script>window.__xss=2</script> '
                   '<iframe src="javascript:window.__xss=3"></iframe> [click](javascript:window.__xss=4) '
                   '<a href="javascript:window.__xss=5" onclick="window.__xss=6">x</a> '
                   '<javascript:window.__xss=9> [rel](/v1/models)')
        put_chat(srv, "evil1", {"title": '<img src=x onerror="window.__xss=7">', "updated": int(time.time() * 1000),
                                "messages": [{"role": "user", "content": "<b onmouseover=window.__xss=8>me</b>"},
                                             {"role": "assistant", "content": hostile}]})
        page.goto(srv.server.page_url)
        page.wait_for_selector("#app:not([hidden])")
        item = page.locator('[data-testid=chat-item][data-chat-id="evil1"]')
        assert item.inner_text().startswith('<img src=x onerror="window.__xss=7">')
        item.locator(".chat-open").click()
        reply = last_reply(page).locator(".content")
        reply.wait_for()
        assert "<script>window.__xss=2</script>" in reply.inner_text()
        assert "[click](javascript:window.__xss=4)" in reply.inner_text()
        assert reply.locator("a").count() == 0   # neither javascript: nor relative links become links
        assert "<b onmouseover=window.__xss=8>me</b>" in page.locator("[data-testid=message-user]").inner_text()
        page.mouse.move(10, 10)
        page.locator("[data-testid=message-user]").hover()
        assert page.locator("#sidebar img").count() == 0
        assert_inert(page)

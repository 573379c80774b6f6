"""No lost messages across tabs (issue 27). Opening the app's file again opens a second tab on
the same chat. Tabs of one browser stay in step (BroadcastChannel); where they cannot (another
browser, a tab that missed the news), a stale tab's save is refused (409) and the page loads the
chat again, keeps both sides' messages and says so. The losing sequence of the issue is replayed:
B goes on, then the stale A sends; then A's page-hide save fires during a reply."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, get_chat, new_page, open_app, put_chat, shown_in_order
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LockStep, chat_headers, live_server, wait_until

pytestmark = pytest.mark.browser
NOW = int(time.time() * 1000)
USER = "[data-testid=message-user] .content"
START = {"title": "Shared", "updated": NOW, "messages": [
    {"id": "q1", "parent": None, "role": "user", "content": "Hello"},
    {"id": "a1", "parent": "q1", "role": "assistant", "content": "Hi there."}]}


def open_shared(page, srv) -> None:
    open_app(page, srv)
    page.locator("[data-testid=chat-item]").wait_for(state="attached")
    if page.locator("#sidebar").is_hidden():   # on a phone the list slides in
        page.click("#sidebar-toggle")
    page.locator("[data-testid=chat-item]", has_text="Shared").locator(".chat-open").click()
    page.locator(USER).first.wait_for()


def tabs(srv, *contexts):
    """One tab per context on the chat "Shared" (two tabs of one context share a BroadcastChannel)."""
    put_chat(srv, "shared", START)
    pages = [new_page(c) for c in contexts]
    for p in pages:
        open_shared(p, srv)
    return pages


def send(page, text: str) -> None:
    page.fill("[data-testid=prompt]", text)
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid=stop]", state="hidden")


def contents(srv) -> list[str]:
    return [m["content"] for m in get_chat(srv, "shared")["messages"]]


def test_a_message_sent_in_one_tab_appears_in_the_other(browser, scripted_model: Path):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    with live_server(scripted_model) as srv:
        a, b = tabs(srv, ctx, ctx)
        send(b, "Sent in tab B")
        wait_until(lambda: a.locator(USER).all_inner_texts() == ["Hello", "Sent in tab B"], 15)
        wait_until(lambda: "done." in a.locator("[data-testid=message-assistant]").last.inner_text(), 15)
        send(a, "And A goes on")               # A is up to date: it goes on after B's turn, no conflict
        wait_until(lambda: b.locator(USER).all_inner_texts() == ["Hello", "Sent in tab B", "And A goes on"], 15)
        chat = get_chat(srv, "shared")
        assert [m["content"] for m in chat["messages"] if m["role"] == "user"] == ["Hello", "Sent in tab B", "And A goes on"]
        assert a.locator("[data-testid=notice]").count() == 0
        ARTIFACTS.mkdir(exist_ok=True)
        a.screenshot(path=str(ARTIFACTS / "two-tabs-in-step.png"))
        assert a.problems == [] and b.problems == []
    ctx.close()


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_a_stale_tab_loses_nothing(browser, scripted_model: Path, width: int, height: int):
    """Two browser contexts share no BroadcastChannel: tab A never hears of B's messages."""
    ctx_a = browser.new_context(viewport={"width": width, "height": height})
    ctx_b = browser.new_context(viewport={"width": width, "height": height})
    with live_server(scripted_model) as srv:
        a, b = tabs(srv, ctx_a, ctx_b)
        send(b, "B goes on")
        wait_until(lambda: "B goes on" in contents(srv) and len(contents(srv)) == 4)

        send(a, "A, stale, sends")             # its save is refused (409); the page merges and saves again
        notice = a.locator("[data-testid=notice]")
        notice.wait_for()
        assert "changed in another tab or window" in notice.inner_text() and "Nothing was lost" in notice.inner_text()
        wait_until(lambda: len(contents(srv)) == 6, 15)
        saved = contents(srv)
        assert {"Hello", "Hi there.", "B goes on", "A, stale, sends"} <= set(saved)
        assert a.locator(USER).all_inner_texts() == ["Hello", "A, stale, sends"]
        assert a.locator("[data-testid=message-user]").last.locator("[data-testid=version-count]").inner_text() == "2/2"
        ARTIFACTS.mkdir(exist_ok=True)
        a.screenshot(path=str(ARTIFACTS / f"stale-tab-merged-{width}.png"))

        # A's page-hide save while its reply is being written, after B (here: its API calls) went on
        with LockStep(srv.engine) as step:
            a.fill("[data-testid=prompt]", "A asks again")
            a.keyboard.press("Enter")
            assert shown_in_order(a, step, count=2) == 2          # the reply is half written
            wait_until(lambda: "A asks again" in contents(srv))   # A's message itself was saved
            chat = get_chat(srv, "shared")
            chat["messages"].append({"id": "bnew", "parent": "q1", "role": "user", "content": "B, meanwhile"})
            put = requests.put(srv.url + "/api/chats/shared", json={**chat, "leaf": "bnew",
                               "base_version": chat["version"]}, headers=chat_headers(srv), timeout=10)
            assert put.status_code == 200, put.text
            a.reload()                                 # pagehide: A's last save is stale, and merged
            a.wait_for_selector("#app:not([hidden])")
            step.release()
        chat = get_chat(srv, "shared")
        saved = [m["content"] for m in chat["messages"]]
        assert "B, meanwhile" in saved and {"B goes on", "A, stale, sends", "A asks again"} <= set(saved)
        asked = next(m for m in chat["messages"] if m["content"] == "A asks again")
        (half,) = [m for m in chat["messages"] if m["parent"] == asked["id"]]   # A's half-written reply is kept too
        assert half["content"] == "".join(step.emitted[:2]) and half["stats"]["finish"] == "interrupted"
        assert a.problems == [] and b.problems == []
    ctx_a.close()
    ctx_b.close()

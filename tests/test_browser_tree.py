"""Edit and branch (issue 27), in headless Chromium: a user message is edited and the edit
becomes a second version beside the first, Regenerate adds a reply beside the old one, ‹ ›
switches and the chat goes on from the branch shown; the tree is what the app saves, the
Markdown export is the branch shown, a chat saved before the tree opens as one branch. All of
it from the keyboard (Up edits the last message, Esc cancels), at 1280 and 390 px, and every
control the page has carries a name a screen reader can say."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import (ARTIFACTS, get_chat, get_chats, last_reply, new_page, open_app, put_chat,
                              unnamed_controls)
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import chat_headers, live_server, wait_until

pytestmark = pytest.mark.browser
NOW = int(time.time() * 1000)
USER = "[data-testid=message-user]"

def wait_reply_done(page) -> None:
    page.wait_for_selector("[data-testid=stop]", state="hidden")


def user_texts(page) -> list[str]:
    return page.locator(f"{USER} .content").all_inner_texts()


def saved_leaf_branch(chat: dict) -> list[str]:
    by_id = {m["id"]: m for m in chat["messages"]}
    out, at = [], by_id[chat["leaf"]]
    while at:
        out.append(at["content"])
        at = by_id.get(at["parent"])
    return out[::-1]


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_edit_branch_switch_and_regenerate_from_the_keyboard(browser, scripted_model: Path, width: int, height: int):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    with live_server(scripted_model, display_name="Scripted") as srv:
        open_app(page, srv)
        prompt = page.locator("[data-testid=prompt]")
        prompt.fill("How do I bleed a radiatr?")
        page.keyboard.press("Enter")
        wait_reply_done(page)

        prompt.focus()
        page.keyboard.press("ArrowUp")                    # Up in the empty box edits the last message
        box = page.locator("[data-testid=edit-box]")
        assert box.evaluate("b => b === document.activeElement") and box.input_value() == "How do I bleed a radiatr?"
        page.keyboard.press("Escape")                     # Esc cancels: nothing changed
        assert box.count() == 0 and user_texts(page) == ["How do I bleed a radiatr?"]
        assert page.evaluate("document.activeElement.id") == "prompt"

        page.keyboard.press("ArrowUp")
        box.fill("How do I bleed a radiator?")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"branch-editing-{width}.png"))
        assert unnamed_controls(page) == []              # the edit box and its buttons say what they are
        page.keyboard.press("Enter")                      # the edit is sent: a second version
        wait_until(lambda: last_reply(page).locator(".stats").inner_text() != "", 30)
        wait_reply_done(page)
        assert user_texts(page) == ["How do I bleed a radiator?"]
        user = page.locator(USER).first
        assert user.locator("[data-testid=version-count]").inner_text() == "2/2"
        assert user.locator(".versions").get_attribute("aria-label") == "Version 2 of 2"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"branch-edited-{width}.png"))

        prev = user.locator("[data-testid=version-prev]")
        prev.focus()
        page.keyboard.press("Enter")                      # ‹ shows the first version, and its reply
        wait_until(lambda: user_texts(page) == ["How do I bleed a radiatr?"])
        first = page.locator(USER).first
        assert first.locator("[data-testid=version-count]").inner_text() == "1/2"
        assert page.evaluate("document.activeElement.dataset.testid") == "version-next"   # focus stays on the switch
        assert "done." in last_reply(page).inner_text()

        regen = page.locator("[data-testid=regenerate]")
        regen.focus()
        page.keyboard.press("Enter")                      # a reply written again sits beside the old one
        wait_until(lambda: page.locator("[data-testid=message-assistant] [data-testid=version-count]").count() == 1, 30)
        wait_reply_done(page)
        assert last_reply(page).locator("[data-testid=version-count]").inner_text() == "2/2"

        # the chat goes on from the branch shown
        prompt.fill("And after that?")
        page.keyboard.press("Enter")
        wait_until(lambda: len(user_texts(page)) == 2, 30)
        wait_reply_done(page)
        assert user_texts(page) == ["How do I bleed a radiatr?", "And after that?"]

        def saved():
            (summary,) = get_chats(srv)
            chat = get_chat(srv, summary["id"])
            return chat if len(chat["messages"]) == 7 and "tokens" in chat["messages"][-1].get("stats", {}) else None
        chat = wait_until(saved, 30)   # q1, a1, q1', a1', a1 again, q2, a2: every version is kept
        branch = saved_leaf_branch(chat)
        assert branch[0] == "How do I bleed a radiatr?" and branch[2] == "And after that?" and len(branch) == 4
        md = requests.get(f"{srv.url}/api/chats/{chat['id']}/export?format=markdown", headers=chat_headers(srv),
                          timeout=10).text
        assert "radiatr?" in md and "How do I bleed a radiator?" not in md and md.count("## Scripted") == 2

        page.reload()                                     # the branch shown is saved with the chat
        page.wait_for_selector("#app:not([hidden])")
        wait_until(lambda: user_texts(page) == ["How do I bleed a radiatr?", "And after that?"])
        page.screenshot(path=str(ARTIFACTS / f"branch-switched-{width}.png"))
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        assert unnamed_controls(page) == []
        assert page.problems == []
    ctx.close()


def test_a_chat_saved_before_the_tree_opens_as_one_branch_and_can_be_edited(scripted_model: Path, page):
    with live_server(scripted_model) as srv:
        put_chat(srv, "flat", {"title": "Flat", "updated": NOW, "messages": [
            {"role": "user", "content": "first"}, {"role": "assistant", "content": "one"},
            {"role": "user", "content": "second"}, {"role": "assistant", "content": "two"}]})
        open_app(page, srv)
        page.locator("[data-testid=chat-item]", has_text="Flat").locator(".chat-open").click()
        wait_until(lambda: user_texts(page) == ["first", "second"])
        assert page.locator("[data-testid=version-count]").count() == 0

        page.locator(USER).nth(1).hover()
        page.locator(USER).nth(1).locator("[data-testid=edit-message]").click()
        page.locator("[data-testid=edit-box]").fill("second, better")
        page.click("[data-testid=edit-send]")
        wait_until(lambda: user_texts(page) == ["first", "second, better"], 30)
        wait_reply_done(page)

        def saved():
            chat = get_chat(srv, "flat")
            return chat if len(chat["messages"]) == 6 and "tokens" in chat["messages"][-1].get("stats", {}) else None
        chat = wait_until(saved, 30)
        assert [m["id"] for m in chat["messages"][:4]] == ["m0", "m1", "m2", "m3"]   # the old messages, as they were
        assert saved_leaf_branch(chat)[:3] == ["first", "one", "second, better"]
        assert "second" in [m["content"] for m in chat["messages"]]                  # the old version stays
        assert page.problems == []


def test_an_edit_box_and_the_instructions_of_a_chat(scripted_model: Path, page):
    """The chat's own instructions are at its top and can be changed; they go with its requests."""
    with live_server(scripted_model, "--system", "You answer briefly.") as srv:
        open_app(page, srv)
        bar = page.locator("[data-testid=system-bar]")
        assert bar.locator("[data-testid=system-text]").inner_text() == "You answer briefly."
        bar.locator("[data-testid=system-edit]").click()
        page.locator("[data-testid=edit-box]").fill("You answer in French.")
        page.keyboard.press("Enter")
        assert bar.locator("[data-testid=system-text]").inner_text() == "You answer in French."
        with page.expect_request(lambda r: r.url.endswith("/v1/chat/completions")) as sent:
            page.fill("[data-testid=prompt]", "Bonjour")
            page.keyboard.press("Enter")
        assert sent.value.post_data_json["messages"][0] == {"role": "system", "content": "You answer in French."}
        wait_reply_done(page)
        chat_id = get_chats(srv)[0]["id"]
        wait_until(lambda: get_chat(srv, chat_id).get("system") == "You answer in French.")
        page.locator(USER).hover()
        page.locator(USER).locator("[data-testid=edit-message]").click()
        bar.locator("[data-testid=system-edit]").click()      # one edit box at a time
        assert page.locator("[data-testid=edit-box]").count() == 1 and bar.locator("[data-testid=edit-box]").count() == 1
        page.keyboard.press("Escape")
        assert page.locator("[data-testid=edit-box]").count() == 0 and user_texts(page) == ["Bonjour"]
        page.click("#settings-button")   # Settings' instructions stay the default for new chats
        assert page.locator("[data-testid=system-prompt]").input_value() == "You answer briefly."
        page.click("#settings-done")
        page.click("[data-testid=new-chat]")
        assert bar.locator("[data-testid=system-text]").inner_text() == "You answer briefly."
        assert page.problems == []

"""The chat page with a reasoning model (tests/thinking_model.py, Qwen3's template): the thinking is
folded above the answer as "Thinking… (N s)", opens on a click, survives a reload (the chat store
keeps it), and is never sent back in the next request. Screenshots at 1280 and 390 px."""
from __future__ import annotations

import json
import re

import pytest

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, get_chat, get_chats, last_reply, set_settings
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer
from thinking_model import ANSWER, THINKING

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("width", [1280, 390])
def test_thinking_is_folded_above_the_answer_and_stays_out_of_the_next_turn(qwen3_thinker: LiveServer, page, chat_data,
                                                                            width: int):
    page.set_viewport_size({"width": width, "height": 800})
    set_settings(page, qwen3_thinker.model_id, temperature=0, max_tokens=40)
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url.endswith("/v1/chat/completions")
            else None)
    page.goto(qwen3_thinker.server.page_url)
    page.wait_for_selector("#app:not([hidden])")
    page.fill("[data-testid=prompt]", "Hi")
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid=stop]", state="hidden")
    reply = last_reply(page)
    box = reply.locator("[data-testid=thinking]")
    assert re.fullmatch(r"Thinking… \(\d+ s\)", box.locator("summary").inner_text())
    assert box.get_attribute("open") is None and not box.locator(".thinking-text").is_visible()   # folded
    assert reply.locator(".content").inner_text().strip() == ANSWER                               # the answer alone
    box.locator("summary").click()
    assert box.locator(".thinking-text").inner_text() == THINKING
    page.screenshot(path=str(ARTIFACTS / f"thinking-{width}.png"))

    (saved,) = get_chats(qwen3_thinker)
    assert get_chat(qwen3_thinker, saved["id"])["messages"][1]["thinking"] == THINKING   # the store keeps it
    page.reload()   # the page reopens the chat it showed, from the store
    page.wait_for_selector("#app:not([hidden])")
    assert last_reply(page).locator("[data-testid=thinking] summary").inner_text().startswith("Thinking… (")

    page.fill("[data-testid=prompt]", "Again")
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid=stop]", state="hidden")
    history = sent[-1]["messages"]
    assert [m["role"] for m in history][-3:] == ["user", "assistant", "user"]
    assert history[-2]["content"] == ANSWER and "tiny model" not in json.dumps(history)

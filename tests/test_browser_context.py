"""Chats that keep going past what the model can read at once (issue 27), in headless Chromium
on a 256-token context: the page leaves out the oldest turns whole, keeps the instructions and
the attached files, draws "The model no longer reads the messages above this line." where the
cut is, and the gauge says how full the model's memory is. With "Stop and ask" chosen, it asks
first. The API itself still answers a too-long prompt with OpenAI's 400."""
from __future__ import annotations

from pathlib import Path

import pytest
import requests

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, new_page, open_app, set_settings
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import SCRIPTED_REPLY, live_server

pytestmark = pytest.mark.browser
CTX = 256
CUT = "The model no longer reads the messages above this line."


def turn(i: int) -> str:
    return f"Question {i}: " + " ".join(f"w{i}{j}" for j in range(20))


def text_of(content) -> str:
    """A message's text, whether sent as a string or as parts (files, then the text)."""
    return content if isinstance(content, str) else content[-1]["text"]


def send(page, text: str):
    """Send `text`; the request the page made for the reply, once the reply is in."""
    with page.expect_request(lambda r: r.url.endswith("/v1/chat/completions")) as req:
        page.fill("[data-testid=prompt]", text)
        page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid=stop]", state="hidden")
    return req.value.post_data_json


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_a_chat_past_the_context_keeps_answering_below_its_line(browser, scripted_model: Path, width: int, height: int):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    with live_server(scripted_model, "--ctx", str(CTX), "--system", "Be brief.") as srv:
        open_app(page, srv)
        page.set_input_files("[data-testid=attach-file]", files=[
            {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"The boiler code is 1234."}])
        page.wait_for_selector("[data-testid=attachment-chip]:not(.reading)")
        sent = [send(page, turn(0))]
        for i in range(1, 8):
            sent.append(send(page, turn(i)))
            if i >= 2 and page.locator("[data-testid=context-cut]").count():
                break
        # the whole chat is more than the model reads at once: the API itself refuses it with OpenAI's 400
        history = [{"role": "system", "content": "Be brief."}]
        for k in range(len(sent)):
            history += [{"role": "user", "content": turn(k)}, {"role": "assistant", "content": "".join(SCRIPTED_REPLY)}]
        full = requests.post(srv.url + "/v1/chat/completions", json={"messages": history[:-1]}, timeout=60)
        assert full.status_code == 400 and full.json()["error"]["code"] == "context_length_exceeded", full.text
        last = sent[-1]["messages"]
        assert last[0] == {"role": "system", "content": "Be brief."}        # the instructions stay
        users = [m for m in last if m["role"] == "user"]
        assert len(users) < len(sent)                                      # the oldest turns were left out...
        first_read = users[0]["content"]
        assert isinstance(first_read, list) and first_read[0]["type"] == "file"   # ...but not the attached file
        assert first_read[-1] == {"type": "text", "text": turn(len(sent) - len(users))}
        assert last[-1]["role"] == "user" and text_of(last[-1]["content"]) == turn(len(sent) - 1)   # the newest is read
        assert "done." in page.locator("[data-testid=message-assistant]").last.inner_text()   # it answered

        line = page.locator("[data-testid=context-cut]")
        assert line.inner_text() == CUT + " It still reads the files attached above." and line.count() == 1
        below = line.evaluate("l => l.nextElementSibling.querySelector('.content').textContent")
        assert below == turn(len(sent) - len(users))                       # the line sits above the first message read
        gauge = page.locator("[data-testid=ctx-used]").inner_text()
        assert gauge.startswith("Memory ") and f"/ {CTX} tokens" in gauge and "words" in gauge
        assert "oldest messages left out" in gauge
        assert page.locator("[data-testid=ctx-gauge]").is_visible()
        ARTIFACTS.mkdir(exist_ok=True)
        line.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"context-cut-{width}.png"))
        assert page.evaluate("document.documentElement.scrollWidth") <= width

        page.reload()                                                      # the line is where it was
        page.wait_for_selector("[data-testid=context-cut]")
        assert page.locator("[data-testid=context-cut]").count() == 1
        assert page.problems == []
    ctx.close()


def test_stop_and_ask_asks_before_forgetting(scripted_model: Path, page):
    with live_server(scripted_model, "--ctx", str(CTX)) as srv:
        set_settings(page, srv.model_id, context_overflow="ask")
        open_app(page, srv)
        page.click("#settings-button")
        assert page.locator("[data-testid=overflow-ask]").is_checked()
        page.click("#settings-done")
        asked = None
        for i in range(8):
            page.fill("[data-testid=prompt]", turn(i))
            page.keyboard.press("Enter")
            page.wait_for_selector("[data-testid=stop]", state="hidden")
            if page.locator("[data-testid=ask-forget]").count():
                asked = i
                break
        assert asked is not None and asked > 0
        notice = page.locator("[data-testid=ask-forget]")
        assert "longer than the model can read at once" in notice.inner_text()
        assert page.locator("[data-testid=prompt]").input_value() == turn(asked)   # nothing sent, nothing lost
        assert page.locator("[data-testid=context-cut]").count() == 0
        go = page.locator("[data-testid=forget-and-go]")
        assert go.evaluate("b => b === document.activeElement")                  # Enter goes on
        with page.expect_request(lambda r: r.url.endswith("/v1/chat/completions")):
            page.keyboard.press("Enter")
        page.wait_for_selector("[data-testid=stop]", state="hidden")
        assert page.locator("[data-testid=context-cut]").all_inner_texts() == [CUT]   # no files above it
        assert page.locator("[data-testid=message-user] .content").last.inner_text() == turn(asked)
        assert page.problems == []

"""A long paste in the chat page: while the server reads it, the reply says "Reading your
message… N / M tokens" (from the stream's prompt_progress chunks) instead of three dots, then
the reply streams as before. Headless Chromium against a live server and the real engine."""
from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, last_reply
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import SCRIPTED_REPLY, live_server

pytestmark = pytest.mark.browser

PASTE = " ".join(["the chat model reads a long paste"] * 110)   # ~1,500 tokens: three prefill steps


def hold_after_first_prefill_step(engine) -> threading.Event:
    """Let the engine run one step of the paste's prefill, then hold the next step until the
    returned event is set: the page is looked at while the prompt is half read, whatever the
    speed of this machine. The engine's decode itself is the real one."""
    release = threading.Event()
    real = engine.runner.decode
    seen: list[int] = []

    def decode(plan):
        if len(plan.tokens) > 64:   # a prefill chunk of the paste, not a short prompt or a decode step
            seen.append(len(plan.tokens))
            if len(seen) > 1:
                release.wait(120)
        return real(plan)

    engine.runner.decode = decode
    return release


@pytest.mark.parametrize("width", [1280, 390])
def test_a_long_paste_shows_reading_progress_then_the_reply(scripted_model: Path, page, width):
    with live_server(scripted_model, "--ctx", "2048") as srv:
        page.set_viewport_size({"width": width, "height": 860})
        page.goto(srv.server.page_url)
        page.wait_for_selector("#app:not([hidden])")
        release = hold_after_first_prefill_step(srv.engine)
        try:
            page.fill("[data-testid=prompt]", PASTE)
            page.keyboard.press("Enter")
            content = last_reply(page).locator(".content")
            reading = content.locator(".reading")
            reading.wait_for()
            budget = srv.engine.scheduler.prefill_chunk
            text = reading.inner_text()
            match = re.fullmatch(r"Reading your message… ([\d,]+) / ([\d,]+) tokens", text)
            assert match, text
            done, total = (int(g.replace(",", "")) for g in match.groups())
            assert done == budget and total > 2 * budget and "," in match.group(2)   # Intl: 1,445
            assert content.locator(".typing").count() == 0   # in place of the three dots
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"long-paste-progress-{width}.png"))
        finally:
            release.set()
        page.wait_for_selector("[data-testid=stop]", state="hidden")
        assert content.inner_text().startswith("Look:") and content.locator(".reading").count() == 0
        assert "done." in content.inner_text() and SCRIPTED_REPLY
        assert page.problems == []

"""Search and presets (issue 27), in headless Chromium. Ctrl+K puts the cursor in the search
box; results come from the app's FTS5 index over titles and messages, with the matching words
marked, and open from the keyboard. A preset (instructions + sampling settings) is saved, chosen
for a new chat, exported and imported; the built file's --system is the first preset."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, get_settings, new_page, open_app, put_chat, unnamed_controls
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server, wait_until

pytestmark = pytest.mark.browser
NOW = int(time.time() * 1000)


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_ctrl_k_finds_the_chat_about_the_boiler(browser, scripted_model: Path, width: int, height: int):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    with live_server(scripted_model) as srv:
        chats = {"soup": ("Leek soup", "How long do leeks cook?"),
                 "boiler": ("Heating at home", "Why does my boiler lose pressure every night?"),
                 "bikes": ("Bike repair", "My chain skips on the small cog.")}
        for i, (cid, (title, text)) in enumerate(chats.items()):
            put_chat(srv, cid, {"title": title, "updated": NOW - i * 1000, "messages": [
                {"role": "user", "content": text}, {"role": "assistant", "content": "Let us see."}]})
        open_app(page, srv)
        page.locator("[data-testid=chat-item]").nth(2).wait_for(state="attached")
        wait_until(lambda: page.evaluate("document.activeElement.id") == "prompt" or width < 800)
        page.keyboard.press("Control+k")
        search = page.locator("[data-testid=search-input]")
        assert search.evaluate("i => i === document.activeElement") and search.is_visible()
        page.keyboard.type("boil pressure")
        result = page.locator("[data-testid=search-result]")
        result.first.wait_for()
        assert result.count() == 1 and result.locator(".chat-title").inner_text() == "Heating at home"
        assert result.locator("mark").all_inner_texts() == ["boiler", "pressure"]   # the words that matched
        assert page.locator("[data-testid=chat-list]").is_hidden()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"search-{width}.png"))
        assert unnamed_controls(page) == []

        page.keyboard.press("ArrowDown")
        assert result.first.evaluate("b => b === document.activeElement")
        page.keyboard.press("Enter")
        wait_until(lambda: page.locator("[data-testid=message-user] .content").all_inner_texts()
                   == ["Why does my boiler lose pressure every night?"])

        page.keyboard.press("Control+k")
        page.keyboard.type("radiator")
        page.locator("[data-testid=search-empty]").wait_for()
        assert "No saved chat holds these words." in page.locator("[data-testid=search-empty]").inner_text()
        page.keyboard.press("Escape")                       # clears the search: the list is back
        assert search.input_value() == "" and page.locator("[data-testid=chat-list]").is_visible()
        assert page.problems == []
    ctx.close()


def test_a_preset_is_saved_chosen_exported_and_imported(scripted_model: Path, page, tmp_path: Path):
    with live_server(scripted_model, "--system", "You are a helpful assistant.") as srv:
        open_app(page, srv)
        page.click("#settings-button")
        select = page.locator("[data-testid=preset-select]")
        assert select.locator("option").first.inner_text() == "This app's default"   # the built file's --system
        assert select.input_value() == "0"
        page.fill("[data-testid=system-prompt]", "Answer like a pirate.")
        page.fill("[data-testid=temperature]", "0.3")
        page.locator("#advanced summary").click()
        page.fill("[data-testid=top-k]", "12")
        assert select.locator("option:checked").inner_text().startswith("Your own settings")
        page.fill("[data-testid=preset-name]", "Pirate")
        page.click("[data-testid=preset-save]")
        wait_until(lambda: select.locator("option:checked").inner_text() == "Pirate")

        select.select_option("0")                           # back to the app's own
        assert page.locator("[data-testid=system-prompt]").input_value() == "You are a helpful assistant."
        wait_until(lambda: get_settings(srv) == {})
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "presets-1280.png"))
        assert unnamed_controls(page) == []

        with page.expect_download() as dl:
            page.click("[data-testid=preset-export]")
        exported = json.loads(Path(dl.value.path()).read_text("utf-8"))
        assert exported["format"] == "llmpack-presets"
        (pirate,) = exported["presets"]
        assert {k: pirate[k] for k in ("name", "system_prompt", "temperature", "top_k")} == {
            "name": "Pirate", "system_prompt": "Answer like a pirate.", "temperature": 0.3, "top_k": 12}
        select.select_option(label="Pirate")
        page.click("[data-testid=preset-delete]")
        wait_until(lambda: select.locator("option").count() == 2)   # the app's own, and "your own settings"
        page.set_input_files("[data-testid=preset-file]", files=[
            {"name": "presets.json", "mimeType": "application/json", "buffer": json.dumps(exported).encode()}])
        wait_until(lambda: "Pirate" in select.locator("option").all_inner_texts())

        select.select_option(label="Pirate")                # chosen for a new chat
        assert page.locator("[data-testid=system-prompt]").input_value() == "Answer like a pirate."
        page.click("#settings-done")
        page.click("[data-testid=new-chat]")
        assert page.locator("[data-testid=system-text]").inner_text() == "Answer like a pirate."
        with page.expect_request(lambda r: r.url.endswith("/v1/chat/completions")) as sent:
            page.fill("[data-testid=prompt]", "Ahoy?")
            page.keyboard.press("Enter")
        body = sent.value.post_data_json
        assert body["messages"][0] == {"role": "system", "content": "Answer like a pirate."}
        assert body["temperature"] == 0.3 and body["top_k"] == 12
        page.set_viewport_size({"width": 390, "height": 844})
        page.click("#settings-button")
        page.screenshot(path=str(ARTIFACTS / "presets-390.png"))
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        assert page.problems == []


def test_the_search_box_and_presets_need_no_mouse(browser, scripted_model: Path):
    """Ctrl+K reaches the search box from anywhere (it is not one more Tab stop on the way to New
    chat, test_browser_words.py); the preset list is a plain select."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    page = new_page(ctx)
    with live_server(scripted_model) as srv:
        put_chat(srv, "c1", {"title": "Boiler", "updated": NOW, "messages": [{"role": "user", "content": "boiler"}]})
        open_app(page, srv)
        page.locator("[data-testid=chat-item]").wait_for()
        page.locator("[data-testid=new-chat]").focus()
        page.keyboard.press("Control+k")
        assert page.evaluate("document.activeElement.id") == "search-input"
        page.keyboard.type("boiler")
        page.keyboard.press("Enter")                       # Enter opens the first result
        wait_until(lambda: page.locator("[data-testid=message-user] .content").all_inner_texts() == ["boiler"])
        page.click("#settings-button")
        page.locator("[data-testid=preset-name]").focus()
        page.keyboard.type("Mine")
        page.keyboard.press("Enter")
        select = page.locator("[data-testid=preset-select]")
        wait_until(lambda: select.locator("option:checked").inner_text() == "Mine")
        select.focus()
        page.keyboard.press("ArrowUp")
        wait_until(lambda: select.input_value() == "0")
        assert page.problems == []
    ctx.close()

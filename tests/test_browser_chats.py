"""The chat page in headless Chromium: Markdown and code blocks, chats that survive a restart on
another port (and stay with their model), export and import, the base-model notice and text
completion mode. (The header's words: test_browser_words.py.)"""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import requests

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import (ARTIFACTS, CHROMIUM_ARGS, assert_inert, chromium_path, get_chats, get_settings, last_reply,
                              new_page, set_settings)
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server, wait_until, write_scripted_model

pytestmark = pytest.mark.browser

MARKDOWN_REPLY = [
    "Here is a table:\n\n",
    "| Name | Size |\n|:-----|-----:|\n| alpha | 1 |\n| beta | 22 |\n\n",
    "Lists:\n\n- fruit\n  - apple\n  - pear\n- vegetables\n\n",
    "```python\ndef greet(name):\n    return f\"hi {name}\"\n```\n\n",
    "Run `pip install llmpack`, read [the docs](https://example.com/docs) or [write](mailto:a@example.com).\n\n",
    "Bad: [x](javascript:window.__xss=1) <img src=x onerror=window.__xss=2> <script>window.__xss=3</script>",
]


@pytest.fixture(scope="module")
def markdown_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_scripted_model(tmp_path_factory.mktemp("md") / "markdown.gguf", MARKDOWN_REPLY)


def chat_once(page, text: str = "hello") -> None:
    page.fill("[data-testid=prompt]", text)
    page.keyboard.press("Enter")
    last_reply(page).wait_for()
    page.wait_for_selector("[data-testid=stop]", state="hidden")


def test_markdown_tables_lists_code_links_and_payloads(markdown_model: Path, page):
    with live_server(markdown_model) as srv:
        page.goto(srv.server.page_url)
        page.wait_for_selector("#app:not([hidden])")
        assert page.locator("[data-testid=base-notice]").is_hidden()   # it has a chat template
        chat_once(page, "Show me some Markdown")
        reply = last_reply(page).locator(".content")

        cells = reply.locator("table tr").evaluate_all("rows => rows.map(r => [...r.cells].map(c => c.textContent))")
        assert cells == [["Name", "Size"], ["alpha", "1"], ["beta", "22"]]
        assert reply.locator("td.align-right").count() == 2          # alignment without inline styles
        assert reply.locator("ul > li > ul > li").all_inner_texts() == ["apple", "pear"]

        code = reply.locator(".code-block pre code.language-python")
        assert code.inner_text() == 'def greet(name):\n    return f"hi {name}"\n'
        assert code.locator(".hljs-keyword").first.inner_text() == "def"      # highlighted
        assert reply.locator(".code-block .code-lang").inner_text() == "python"
        reply.locator("[data-testid=copy-code]").click()
        assert page.evaluate("navigator.clipboard.readText()") == 'def greet(name):\n    return f"hi {name}"\n'
        assert reply.locator("[data-testid=copy-code]").inner_text() == "Copied"

        assert reply.locator("p code").inner_text() == "pip install llmpack"
        links = reply.locator("a").evaluate_all("as => as.map(a => [a.textContent, a.getAttribute('href'), a.rel])")
        assert links == [["the docs", "https://example.com/docs", "noopener noreferrer nofollow"],
                         ["write", "mailto:a@example.com", "noopener noreferrer nofollow"]]
        text = reply.inner_text()
        for payload in ("[x](javascript:window.__xss=1)", "<img src=x onerror=window.__xss=2>",
                        "<script>window.__xss=3</script>"):
            assert payload in text
        assert_inert(page)

        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "chat-markdown-1280.png"))
        page.emulate_media(color_scheme="dark")
        page.screenshot(path=str(ARTIFACTS / "chat-markdown-1280-dark.png"))
        page.emulate_media(color_scheme="light")
        page.set_viewport_size({"width": 390, "height": 844})
        page.wait_for_selector("#sidebar", state="hidden")   # it slides away on a phone
        page.locator(".code-block").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "chat-markdown-390.png"))
        assert page.evaluate("document.documentElement.scrollWidth") <= 390   # nothing overflows sideways


def test_chats_survive_a_restart_on_another_port_and_stay_with_their_model(
        browser, scripted_model: Path, tiny_chat_model: Path, tmp_path: Path):
    profile = tmp_path / "profile"   # one browser profile for every launch, like a person's browser

    def open_page():
        ctx = browser.browser_type.launch_persistent_context(
            str(profile), executable_path=chromium_path(), args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 860})
        return ctx, new_page(ctx)

    with live_server(scripted_model) as first:
        ctx, page = open_page()
        page.goto(first.server.page_url)
        page.wait_for_selector("#app:not([hidden])")
        assert page.url == first.url + "/"    # the secret left the address bar
        chat_once(page, "remember me")
        wait_until(lambda: [c["n_messages"] for c in get_chats(first)] == [2])
        page.click("#settings-button")                   # settings travel with the chats
        page.fill("[data-testid=system-prompt]", "Answer like a pirate.")
        page.fill("[data-testid=temperature]", "0.3")
        wait_until(lambda: get_settings(first) == {"system_prompt": "Answer like a pirate.", "temperature": 0.3})
        ctx.close()
        old_port, old_token = first.port, first.server.options.chat_token

    with socket.socket() as busy:   # the old port is taken now: the app lands elsewhere
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", old_port))
        with live_server(scripted_model) as second:
            assert second.port != old_port
            ctx, page = open_page()
            page.goto(second.server.page_url)
            item = page.locator("[data-testid=chat-item]")
            item.wait_for()
            assert item.count() == 1 and item.locator(".chat-title").inner_text() == "remember me"
            item.locator(".chat-open").click()
            assert "done." in last_reply(page).inner_text()
            assert page.locator("[data-testid=message-user] .content").inner_text() == "remember me"
            page.click("#settings-button")   # this origin's localStorage is empty: they came from the app
            assert page.locator("[data-testid=system-prompt]").input_value() == "Answer like a pirate."
            assert page.locator("[data-testid=temperature]").input_value() == "0.3"

            # without this launch's secret the chats stay closed, to other programs and pages alike
            stale = requests.get(second.url + "/api/chats", timeout=10,
                                 headers={"X-Llmpack-Chat": "1", "X-Llmpack-Token": old_token})
            assert stale.status_code == 401
            fresh = ctx.new_page()
            fresh.goto(second.url.replace("127.0.0.1", "localhost") + "/")   # another origin: its own storage, no secret
            fresh.wait_for_selector("[data-testid=chat-locked]:not([hidden])")
            assert fresh.locator("[data-testid=chat-item]").count() == 0
            assert "?token=" in fresh.locator("[data-testid=chat-locked]").inner_text()
            ctx.close()

    with live_server(tiny_chat_model) as other:   # another model: its own, empty list
        ctx, page = open_page()
        page.goto(other.server.page_url)
        page.wait_for_selector("#chat-list-empty:not([hidden])")
        assert page.locator("[data-testid=chat-item]").count() == 0
        assert get_settings(other) == {}
        ctx.close()


def test_export_json_and_markdown_then_import(scripted_model: Path, page):
    """A chat in any language: its title (from the first message) names the downloaded file."""
    title = "export me Привет 你好 🎉 café"
    with live_server(scripted_model, display_name="Scripted") as srv:
        page.goto(srv.server.page_url)
        page.wait_for_selector("#app:not([hidden])")
        chat_once(page, title)

        def export(which: str) -> str:
            page.click("[data-testid=export-menu]")
            with page.expect_download() as dl:
                page.click(f"[data-testid=export-{which}]")
            ext = "json" if which == "json" else "md"
            assert dl.value.suggested_filename == f"export-me-Привет-你好-café.{ext}", page.problems
            return Path(dl.value.path()).read_text("utf-8")

        data = json.loads(export("json"))
        assert data["format"] == "llmpack-chat" and data["title"] == title and data["model"] == "Scripted"
        assert [m["role"] for m in data["messages"]] == ["user", "assistant"]
        assert data["messages"][1]["content"].endswith("done.")
        markdown = export("markdown")
        assert markdown.startswith(f"# {title}\n") and f"## You\n\n{title}\n" in markdown
        assert "## Scripted\n" in markdown and "**bold**" in markdown

        data["messages"][0]["content"] += " (edited)"   # the same chat is not doubled (test_browser_layout.py)
        page.set_input_files("[data-testid=import-file]", files=[
            {"name": "chat.json", "mimeType": "application/json", "buffer": json.dumps(data).encode()}])
        try:
            page.locator("[data-testid=chat-item]").nth(1).wait_for(timeout=30_000)
        except Exception as exc:   # say what the page said
            raise AssertionError(f"import did not add a chat: toast={page.locator('#toast-text').inner_text()!r}, "
                                 f"problems={page.problems}") from exc
        assert [c["title"] for c in get_chats(srv)] == [title, title]
        assert page.locator("[data-testid=message-user] .content").inner_text() == title + " (edited)"
        assert last_reply(page).locator("strong").inner_text() == "bold"

        page.set_input_files("[data-testid=import-file]", files=[
            {"name": "x.json", "mimeType": "application/json", "buffer": b'{"hello": 1}'}])
        wait_until(lambda: "not a chat saved by this app" in page.locator("#toast-text").inner_text())   # not "Chat imported."
        assert len(get_chats(srv)) == 2
        assert page.problems == []


def test_base_model_notice_and_text_completion(tiny_model: Path, page):
    """tiny_model has no chat template and no instruct tag in its name: a base model."""
    with live_server(tiny_model) as srv:
        assert requests.get(srv.url + "/health", timeout=10).json()["base_model"] is True
        set_settings(page, srv.model_id, temperature=0, max_tokens=6)
        page.goto(srv.server.page_url)
        notice = page.locator("[data-testid=base-notice]")
        notice.wait_for()
        assert "This model continues your text rather than answering" in notice.inner_text()
        assert page.locator("[data-testid=mode-complete]").get_attribute("aria-pressed") == "true"

        with page.expect_request(lambda r: r.url.endswith("/v1/completions")) as first:
            page.fill("[data-testid=prompt]", "Once upon a time")
            page.keyboard.press("Enter")
        assert first.value.post_data_json["prompt"] == "Once upon a time"
        page.wait_for_selector("[data-testid=stop]", state="hidden")
        doc = page.locator("[data-testid=document]")
        assert doc.locator("[data-testid=prompt-text]").inner_text() == "Once upon a time"
        continuation = doc.locator("[data-testid=completion]").first.text_content()
        assert continuation

        # Enter on an empty box continues the whole document
        with page.expect_request(lambda r: r.url.endswith("/v1/completions")) as second:
            page.click("[data-testid=send]")
        assert second.value.post_data_json["prompt"] == "Once upon a time" + continuation
        page.wait_for_selector("[data-testid=stop]", state="hidden")
        assert doc.locator("[data-testid=completion]").count() == 2
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "base-model-completion.png"))
        assert page.locator("[data-testid=use-completion]").is_hidden()   # already in that mode

        # chat mode is still there for those who want it: it starts a new chat
        page.click("[data-testid=mode-chat]")
        assert page.locator("[data-testid=document]").count() == 0
        assert page.locator("[data-testid=prompt]").get_attribute("placeholder") == "Message…"
        page.click("[data-testid=use-completion]")   # and the notice offers the way back
        assert page.locator("[data-testid=mode-complete]").get_attribute("aria-pressed") == "true"
        page.locator("[data-testid=chat-item]").first.locator(".chat-open").click()
        page.set_viewport_size({"width": 390, "height": 844})
        page.wait_for_selector("#sidebar", state="hidden")
        assert doc.locator("[data-testid=completion]").count() == 2
        assert "6 tokens" in doc.locator(".stats").inner_text()   # the last completion's figures
        page.screenshot(path=str(ARTIFACTS / "base-model-completion-390.png"))
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        assert page.problems == []


def test_a_chat_begun_while_the_list_loads_stays_listed(scripted_model: Path, page):
    """The saved list arrives after the first message was sent: both end up in the list."""
    with live_server(scripted_model) as srv:
        page.goto(srv.server.page_url)
        page.wait_for_selector("#app:not([hidden])")
        chat_once(page, "earlier")
        held = []
        page.route("**/api/chats", lambda route: held.append(route) if route.request.method == "GET"
                   else route.continue_())
        page.reload()
        page.wait_for_selector("#app:not([hidden])")
        wait_until(lambda: held)          # the list request is on hold
        stale = {"object": "list", "data": get_chats(srv)}   # what it would have answered then
        chat_once(page, "while loading")
        held[0].fulfill(json=stale)
        page.locator("[data-testid=chat-item]").nth(1).wait_for()
        titles = page.locator("[data-testid=chat-item] .chat-title").all_inner_texts()
        assert sorted(titles) == ["earlier", "while loading"]
        assert page.locator("[data-testid=chat-item].active .chat-title").inner_text() == "while loading"


def test_without_the_markdown_libraries_replies_are_plain_text(scripted_model: Path, page):
    """A build whose vendor/ folder is missing still chats: replies show as plain text."""
    with live_server(scripted_model) as srv:
        page.route("**/static/vendor/**", lambda route: route.abort())
        page.goto(srv.server.page_url)
        page.wait_for_selector("#app:not([hidden])")
        chat_once(page)
        content = last_reply(page).locator(".content")
        assert "**bold**" in content.inner_text() and content.locator("strong").count() == 0
        assert "<script>alert(2)</script>" in content.inner_text()
        assert_inert(page)

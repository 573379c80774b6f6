"""The chat page in plain words (issue 20): what a person reads in the header, in Settings, in
error messages, on the loading card and under a reply says what they need; the technical
detail stays one click (or a tooltip) away. Also: the page reads the server's defaults."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import requests

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, last_reply, open_app, new_page, put_chat, set_settings
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import held_in_phase, live_server, wait_until

pytestmark = pytest.mark.browser


def send(page, text: str) -> None:
    page.fill("[data-testid=prompt]", text)
    page.keyboard.press("Enter")


def fake_health(page, **changes) -> None:
    """/health as the server answers it, with `changes` on top (dicts are merged one level)."""
    def handle(route):
        resp = route.fetch()
        body = resp.json()
        for key, value in changes.items():
            body[key] = {**body[key], **value} if isinstance(value, dict) and isinstance(body.get(key), dict) else value
        route.fulfill(response=resp, json=body)
    page.route("**/health", handle)


@pytest.mark.parametrize("backend, shown, detail", [
    ({"cpu_variant": "haswell", "devices": [{"id": "Vulkan0", "name": "NVIDIA GeForce RTX 3060"}],
      "gpu_device": "Vulkan0", "gpu_layers": 18, "n_layers": 18, "note": None},
     "Running on your graphics card (NVIDIA GeForce RTX 3060)", ["Vulkan0", "18 of 18 layers"]),
    ({"cpu_variant": "haswell", "devices": [{"id": "Vulkan0", "name": "Intel UHD 620"}],
      "gpu_device": "Vulkan0", "gpu_layers": 6, "n_layers": 18, "note": None},
     "Running partly on your graphics card (Intel UHD 620)", ["6 of 18 layers"]),
    ({"cpu_variant": "haswell", "devices": [], "gpu_device": None, "gpu_layers": 18, "n_layers": 18, "note": None,
      "remote": [{"id": "RPC0", "endpoint": "127.0.0.1:50052", "layers": 13},
                 {"id": "RPC1", "endpoint": "10.0.0.2:50052", "layers": 5}]},   # --rpc: docs/SCALING.md
     "Running on 2 RPC workers", ["127.0.0.1:50052 holds 13 of 18", "10.0.0.2:50052 holds 5 of 18"]),
    ({"cpu_variant": "haswell", "devices": [], "gpu_device": None, "gpu_layers": 0, "n_layers": 18,
      "note": "no Vulkan loader (libvulkan.so.1) found"}, "Running on your processor",
     ["haswell", "no Vulkan loader (libvulkan.so.1) found"]),
])
def test_the_header_says_where_it_runs_and_how_much_it_remembers(scripted_model: Path, page, backend, shown, detail):
    with live_server(scripted_model) as srv:
        fake_health(page, backend=backend, n_ctx=8192)
        open_app(page, srv)
        badge = page.locator("[data-testid=backend]")
        assert badge.inner_text() == shown
        for words in detail:   # the technical detail, one hover away
            assert words in badge.get_attribute("title")
        ctx = page.locator("[data-testid=ctx-size]")
        assert ctx.inner_text() == "Remembers about 6,000 words"     # 8,192 tokens x 0.75
        assert "8,192 tokens" in ctx.get_attribute("title")
        assert "ctx" not in page.locator("#topbar").inner_text()


FOCUSED = """() => { const a = document.activeElement;
    return {id: a.id, about: !!a.closest('#about-model'), text: a.textContent.trim().slice(0, 30)}; }"""


@pytest.mark.parametrize("width, height, before_new_chat", [
    (1280, 860, ["import-chat", "sidebar-toggle", "mode-chat", "mode-complete", "new-chat"]),
    (390, 844, ["sidebar-toggle", "new-chat"]),        # the chat list and the mode switch are folded away
])
def test_the_header_details_are_reachable_from_the_keyboard(browser, scripted_model: Path, width, height,
                                                            before_new_chat):
    """What the top bar keeps in tooltips (mouse only) is in Settings under "About this model",
    reached with the keyboard, with no new stop on the way to New chat."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    backend = {"cpu_variant": "haswell", "devices": [{"id": "Vulkan0", "name": "Intel UHD 620"}],
               "gpu_device": "Vulkan0", "gpu_layers": 6, "n_layers": 18, "note": None}
    with live_server(scripted_model, display_name="Scripted Helper") as srv:
        fake_health(page, backend=backend, n_ctx=8192)
        open_app(page, srv)
        tips = {name: page.locator(f"[data-testid={name}]") for name in ("model-name", "ctx-size", "backend")}
        shown = {name: (tip.text_content(), tip.get_attribute("title")) for name, tip in tips.items()}
        assert shown["model-name"] == ("Scripted Helper", srv.model_id) or srv.model_id == "Scripted Helper"
        assert "8,192 tokens" in shown["ctx-size"][1] and "6 of 18 layers" in shown["backend"][1]

        if width > 800:   # once started, the page puts the cursor in the prompt (not on a phone)
            wait_until(lambda: page.evaluate("document.activeElement.id") == "prompt")
        page.locator("[data-testid=skip-link]").focus()
        stops = []
        while not stops or stops[-1]["id"] != "new-chat":
            page.keyboard.press("Tab")
            stops.append(page.evaluate(FOCUSED))
            assert len(stops) < 30, stops
        assert [s["id"] for s in stops] == before_new_chat, stops   # no new stop on the way to New chat
        page.keyboard.press("Tab")
        assert page.evaluate(FOCUSED)["id"] == "settings-button"
        page.keyboard.press("Enter")
        for _ in range(20):                                      # on through Settings to the fold
            page.keyboard.press("Tab")
            if page.evaluate(FOCUSED)["about"]:
                break
        about = page.locator("[data-testid=about-model]")
        assert page.evaluate(FOCUSED) == {"id": "", "about": True, "text": "About this model"}
        facts = page.locator("[data-testid=about-facts]")
        assert not facts.is_visible()
        page.keyboard.press("Enter")
        assert about.evaluate("d => d.open") and facts.is_visible()
        said = facts.inner_text()
        assert "Scripted Helper" in said
        for name in ("ctx-size", "backend"):                     # each badge's words and its tooltip's
            text, title = shown[name]
            assert text in said and title in said, (name, said)
        assert "Running partly on your graphics card (Intel UHD 620)" in said
        about.scroll_into_view_if_needed()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"about-model-{width}.png"))
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        assert page.problems == []
    ctx.close()


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_settings_fold_the_sampling_knobs_and_show_the_real_defaults(browser, scripted_model: Path, width, height):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    with live_server(scripted_model) as srv:
        defaults = requests.get(srv.url + "/health", timeout=10).json()["defaults"]
        open_app(page, srv)
        page.click("#settings-button")
        advanced = page.locator("[data-testid=advanced]")
        assert advanced.evaluate("d => d.tagName === 'DETAILS' && !d.open")
        for knob in ("top-p", "top-k", "min-p"):
            assert advanced.locator(f"[data-testid={knob}]").count() == 1 and page.locator(f"[data-testid={knob}]").is_hidden()
        assert page.locator("[data-testid=temperature]").is_visible()
        summary = advanced.locator("summary")
        summary.focus()
        page.keyboard.press("Enter")                         # opens from the keyboard too
        assert advanced.evaluate("d => d.open")
        for knob, key in (("temperature", "temperature"), ("top-p", "top_p"), ("top-k", "top_k"), ("min-p", "min_p")):
            field = page.locator(f"[data-testid={knob}]")
            assert float(field.get_attribute("placeholder")) == defaults[key], knob
            hint = field.locator("xpath=..").locator(".field-hint").inner_text()
            assert len(hint.split()) >= 6, (knob, hint)       # what it does, not only its range
        assert page.locator("[data-testid=max-tokens]").get_attribute("placeholder") == "No limit"
        said = page.evaluate("""() => [document.querySelector('#settings').innerText,
            ...[...document.querySelectorAll('[placeholder], [title]')].map(n => (n.placeholder || '') + ' ' + (n.title || ''))
        ].join('\\n')""")
        assert "server default" not in said and not re.search(r"(^|\s)--[a-z]", said), said
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"settings-{width}.png"))
        assert page.problems == []
    ctx.close()


def test_errors_say_what_happened_and_what_to_do(scripted_model: Path, page):
    with live_server(scripted_model) as srv:
        open_app(page, srv)
        page.route("**/v1/chat/completions", lambda route: route.abort("connectionrefused"))
        send(page, "hello")
        notice = page.locator("[data-testid=notice]").last
        notice.wait_for()
        assert "The app has stopped. Start it again, then reload this page." in notice.inner_text()
        assert "Failed to fetch" not in notice.inner_text()                   # the detail is folded away
        assert "Failed to fetch" in notice.locator("details").text_content()  # one click away

        page.unroute("**/v1/chat/completions")
        page.route("**/v1/chat/completions", lambda route: route.fulfill(
            status=500, json={"error": {"message": "KeyError: 'boom'", "type": "server_error"}}))
        page.keyboard.press("Enter")                       # the message came back into the box
        wait_until(lambda: "app's side" in page.locator("[data-testid=notice]").last.inner_text())
        shown = page.locator("[data-testid=notice]").last.inner_text()
        assert "Something went wrong on the app's side" in shown and "HTTP 500" not in shown and "KeyError" not in shown

        page.set_input_files("[data-testid=import-file]", files=[
            {"name": "x.json", "mimeType": "application/json", "buffer": b'{"hello": 1}'}])
        toast = page.locator("#toast-text")
        wait_until(lambda: toast.inner_text().startswith("This file is not a chat saved by this app."))
        assert "llmpack-chat" not in toast.inner_text() and "format" not in toast.inner_text()
        assert page.problems == []


def test_reply_figures_read_like_numbers(scripted_model: Path, page):
    now = int(time.time() * 1000)
    with live_server(scripted_model) as srv:
        put_chat(srv, "figures", {"title": "Figures", "updated": now, "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "Hi there.", "stats": {"tokens": 2, "tps": 0.5, "seconds": 4.2}},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": "Yes.", "stats": {"tokens": 1, "estimated": True}},
            {"role": "user", "content": "c"},
            {"role": "assistant", "content": "Long.", "stats": {"tokens": 4162, "tps": 21.37, "seconds": 194.8}}]})
        open_app(page, srv)
        page.locator("[data-testid=chat-item] .chat-open").first.click()
        stats = page.locator("[data-testid=message-assistant] .stats")
        stats.nth(2).wait_for()
        assert stats.all_inner_texts() == ["2 tokens · 4.2 s",                 # no rate over two tokens
                                           "about 1 token",
                                           "4,162 tokens · 21.4 tokens/s · 3 min 15 s"]

        page.click("[data-testid=new-chat]")
        send(page, "hello")                                 # the scripted reply: a handful of tokens
        page.wait_for_selector("[data-testid=stop]", state="hidden")
        live = last_reply(page).locator(".stats").inner_text()
        assert re.fullmatch(r"\d tokens( · \d+\.\d s)?", live), live   # a count and the time, no speed
        assert page.locator("[data-testid=tps]").inner_text() == ""


def test_the_loading_card_says_first_run_once(scripted_model: Path, page):
    with held_in_phase(scripted_model, "extracting", 0.4) as (srv, _):
        page.goto(srv.server.page_url)
        card = page.locator("[data-testid=loading] .card")
        wait_until(lambda: "Unpacking" in card.inner_text(), timeout=60)   # the page polls /health; a busy CI machine is slow
        words = card.inner_text().lower()
        assert words.count("first") == 1, words
        ARTIFACTS.mkdir(exist_ok=True)
        page.wait_for_timeout(400)   # for the picture only: the bar's 0.25 s transition (style.css) has ended
        page.screenshot(path=str(ARTIFACTS / "loading-card.png"))


def test_the_page_uses_the_servers_defaults_and_keeps_no_copy(tiny_model: Path, page):
    """A base model opens in text completion mode, whose length per "continue" is the server's."""
    with live_server(tiny_model) as srv:
        fake_health(page, defaults={"completion_max_tokens": 7, "top_k": 33})
        set_settings(page, srv.model_id, temperature=0)
        open_app(page, srv)
        with page.expect_request(lambda r: r.url.endswith("/v1/completions")) as req:
            send(page, "Once upon a time")
        sent = req.value.post_data_json
        assert sent["max_tokens"] == 7 and sent["top_k"] == 33
        page.wait_for_selector("[data-testid=stop]", state="hidden")
        page.click("#settings-button")
        assert page.locator("[data-testid=top-k]").get_attribute("placeholder") == "33"
        assert json.loads(page.evaluate("localStorage.getItem('llmpack.settings.v1')"))["models"][srv.model_id] == {
            "temperature": 0}


RPC_LAN = {"cpu_variant": "haswell", "devices": [], "gpu_device": None, "gpu_layers": 18, "n_layers": 18, "note": None,
           "remote": [{"id": "RPC0", "endpoint": "192.168.1.20:50052", "layers": 10},
                      {"id": "RPC1", "endpoint": "192.168.1.21:50052", "layers": 8}]}


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_the_chat_list_footer_names_the_other_computers_that_hold_layers(browser, scripted_model: Path, width, height):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    with live_server(scripted_model) as srv:
        fake_health(page, backend=RPC_LAN)
        open_app(page, srv)
        if width < 700:
            page.click("#sidebar-toggle")   # the chat list is folded away on a phone: it slides in
            wait_until(lambda: page.locator("#sidebar").bounding_box()["x"] >= 0, 10)
        footer = page.locator("[data-testid=where-runs]")
        footer.wait_for(state="visible")
        assert footer.inner_text() == "Uses this computer and 2 others on your network (192.168.1.20, 192.168.1.21)."
        assert "192.168.1.20:50052" in footer.get_attribute("title")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"footer-rpc-{width}.png"))
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        assert page.problems == []
    ctx.close()


@pytest.mark.parametrize("remote, said", [
    ([], "Runs entirely on this computer."),
    ([{"id": "RPC0", "endpoint": "127.0.0.1:50052", "layers": 18}],
     "Uses this computer and a helper at 127.0.0.1:50052 (on this computer, or on another one through a tunnel)."),
    ([{"id": "RPC0", "endpoint": "10.0.0.7:50052", "layers": 18}, {"id": "RPC1", "endpoint": "10.0.0.8:50052", "layers": 0}],
     "Uses this computer and 1 other on your network (10.0.0.7)."),   # a worker that holds no layer is not used
])
def test_the_footer_says_this_computer_alone_only_when_it_is(page, scripted_model: Path, remote, said):
    with live_server(scripted_model) as srv:
        fake_health(page, backend={**RPC_LAN, "remote": remote, "gpu_layers": 18 if remote else 0})
        open_app(page, srv)
        assert page.locator("[data-testid=where-runs]").text_content() == said

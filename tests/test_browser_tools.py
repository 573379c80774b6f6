"""Tools in the chat page (issue 45), in headless Chromium with real parts: the demo model
(Qwen2.5-Coder 0.5B) calls the built-in calculator in its own tool format and answers with the
result; an MCP server made with the official SDK (FastMCP) is added in Settings and every call
of its tools is confirmed (allow once, deny, always allow, taken back); the calls stay in the
chat after a reload; a result is drawn as text; JavaScript runs in a worker with no network and
a time limit; Stop ends a running tool."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import requests

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, get_chat, get_chats, new_page, open_app, put_chat, set_settings, tool_store
from mcp_fixtures import *  # noqa: F401,F403
from mcp_servers import LINKS, SECRET
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import chat_headers, live_server, write_scripted_model

pytestmark = pytest.mark.browser
BUILTINS = ("calculator", "date_time", "run_javascript", "search_files")
REFUSED = "The user refused to run this tool."


def ask(page, text: str) -> None:
    page.fill("[data-testid=prompt]", text)
    page.keyboard.press("Enter")


def wait_reply(page) -> None:
    page.wait_for_selector("[data-testid=stop]", state="hidden", timeout=600_000)


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_the_demo_model_calls_the_calculator_and_answers_with_its_result(browser, instruct_server, width, height):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    set_settings(page, instruct_server.model_id, temperature=0, max_tokens=64)
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url.endswith("/v1/chat/completions")
            else None)
    open_app(page, instruct_server)
    assert page.evaluate("fetch('/health').then((r) => r.json())")["tools"] is True   # Qwen's template knows tools
    ask(page, "What is 37 * 43? Use the calculator.")
    wait_reply(page)
    assert "calculator" in [t["function"]["name"] for t in sent[0]["tools"]]   # offered in the model's request
    call = page.locator("[data-testid=tool-call][data-tool=calculator]").first
    assert call.get_attribute("data-status") == "ok"
    assert re.fullmatch(r"Calculator · \d+\.\d s", call.locator("summary").inner_text())
    call.locator("summary").click()
    assert json.loads(call.locator("[data-testid=tool-result]").inner_text())["result"] == "1591"
    answer = page.locator("[data-testid=message-assistant]").last.locator(".content").inner_text()
    assert "1591" in answer
    # the result went back to the model as a tool message, after the call it answers
    roles = [m["role"] for m in sent[-1]["messages"]]
    assert "tool" in roles and roles.index("tool") > roles.index("user")
    shot(page, f"tools-calculator-{width}.png")
    assert page.problems == []

    (saved,) = get_chats(instruct_server)
    rounds = get_chat(instruct_server, saved["id"])["messages"][-1]["rounds"]
    assert rounds[0]["calls"][0]["tool"] == "calculator" and rounds[0]["calls"][0]["server"] is None
    page.reload()   # the chat comes back from the store with its calls
    page.wait_for_selector("#app:not([hidden])")
    again = page.locator("[data-testid=tool-call][data-tool=calculator]").first
    assert again.get_attribute("data-status") == "ok"
    again.locator("summary").click()   # folded again, as every block is when a chat opens
    assert "1591" in again.locator("[data-testid=tool-result]").inner_text()
    ctx.close()


@pytest.mark.parametrize("with_files", [False, True])
def test_a_chat_with_files_offers_the_built_in_tools_only_when_settings_say_so(browser, instruct_server, with_files):
    """The app reads a chat's files for every question itself; offered the tool block as well, the
    demo model answered 44 of 62 questions about real files against 50 without it, and cited one
    wrong place (docs/BENCHMARKS.md). So a chat with files offers the built-ins only with Settings'
    "Also in chats with files", which is off until the person turns it on."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    page = new_page(ctx)
    set_settings(page, instruct_server.model_id, temperature=0, max_tokens=8)
    tool_store(page, with_files=with_files)
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url.endswith("/v1/chat/completions")
            else None)
    open_app(page, instruct_server)
    ask(page, "Say hello.")                                    # no files yet: the built-ins are offered
    wait_reply(page)
    assert {"calculator", "date_time", "run_javascript"} <= {t["function"]["name"] for t in sent[-1]["tools"]}
    note = b"Boiler service: the pressure valve is checked every 14 months by the caretaker.\n"
    page.set_input_files("[data-testid=attach-file]", files=[{"name": "boiler.txt", "mimeType": "text/plain",
                                                               "buffer": note}])
    page.locator("[data-testid=attachment-chip]", has_text="words").wait_for()     # read by the app
    ask(page, "How often is the pressure valve checked?")
    page.locator("[data-testid=message-assistant]").nth(1).wait_for()
    wait_reply(page)
    assert len(sent) == 2 and "boiler.txt" in json.dumps(sent[-1]["messages"])
    offered = {t["function"]["name"] for t in sent[-1].get("tools", [])}
    assert offered == (set(BUILTINS) if with_files else set()), offered
    assert page.locator("[data-testid=tools-with-files]").is_checked() == with_files
    if not with_files:                                         # turned on in Settings, it is kept
        page.click("#settings-button")
        page.check("[data-testid=tools-with-files]")
        assert json.loads(page.evaluate("localStorage.getItem('llmpack.tools.v1')"))["withFiles"] is True
    assert page.problems == []
    ctx.close()


def answer_dialogs(page, plan: str) -> list[str]:
    """Until the reply is over: answer the first confirmation for secret_word with `plan` (once,
    always or deny) and deny any other call; the tools each dialog asked about."""
    asked = []
    button = {"once": "tool-allow-once", "always": "tool-allow-always", "deny": "tool-deny"}
    while True:
        page.wait_for_function("() => document.querySelector('[data-testid=stop]').hidden || "
                               "document.querySelector('[data-testid=tool-confirm]').open", timeout=600_000)
        if not page.locator("[data-testid=tool-confirm]").evaluate("d => d.open"):
            return asked
        tool = page.locator("#tool-confirm-tool").inner_text()
        assert page.locator("#tool-confirm-server").inner_text() == "notes"
        first = tool == "secret_word" and "secret_word" not in asked
        asked.append(tool)
        page.click(f"[data-testid={button[plan] if first else 'tool-deny'}]")


def secret_calls(page):
    return page.locator("[data-testid=tool-call][data-tool=secret_word]")


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_every_mcp_call_is_confirmed_once_denied_or_always(browser, instruct_server, friendly_mcp, width, height):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    set_settings(page, instruct_server.model_id, temperature=0, max_tokens=48)
    tool_store(page, off=BUILTINS)
    page.add_init_script("""(() => { const show = HTMLDialogElement.prototype.showModal;
        HTMLDialogElement.prototype.showModal = function () { window.dialogs = (window.dialogs || 0) + 1; return show.call(this); };
    })();""")
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url.endswith("/v1/chat/completions")
            else None)
    open_app(page, instruct_server)
    # added in Settings by URL: the app connects it and lists its tools under its name
    page.click("#settings-button")
    page.fill("[data-testid=mcp-name]", "notes")
    page.fill("[data-testid=mcp-url]", friendly_mcp)
    page.click("[data-testid=mcp-add]")
    server = page.locator("[data-testid=mcp-server][data-name=notes]")
    server.locator(".mcp-status.up").wait_for()
    assert server.locator("[data-testid=mcp-tool]").all_inner_texts() == ["add", "secret_word", "shout"]
    server.scroll_into_view_if_needed()
    shot(page, f"tools-mcp-settings-{width}.png")
    page.click("#settings-done")

    question = "What is the secret word? Use the secret_word tool."
    ask(page, question)
    page.wait_for_selector("[data-testid=tool-confirm][open]", timeout=600_000)
    shot(page, f"tools-mcp-confirm-{width}.png")
    assert answer_dialogs(page, "once")[0] == "secret_word"
    call = secret_calls(page).first
    assert call.get_attribute("data-status") == "ok"
    call.locator("summary").click()
    assert call.locator("[data-testid=tool-result]").inner_text() == SECRET

    page.click("[data-testid=new-chat]")
    ask(page, question)
    assert answer_dialogs(page, "deny")[0] == "secret_word"
    denied = secret_calls(page).first
    assert denied.get_attribute("data-status") == "denied" and "denied by you" in denied.locator("summary").inner_text()
    told = [m for m in sent[-1]["messages"] if m["role"] == "tool"]
    assert told and told[0]["content"].startswith(REFUSED)   # the model is told the person refused
    shot(page, f"tools-mcp-denied-{width}.png")

    page.click("[data-testid=new-chat]")
    ask(page, question)
    assert answer_dialogs(page, "always")[0] == "secret_word"
    assert secret_calls(page).first.get_attribute("data-status") == "ok"
    shown = page.evaluate("window.dialogs")

    page.click("[data-testid=new-chat]")
    ask(page, question)
    asked = answer_dialogs(page, "deny")
    assert secret_calls(page).first.get_attribute("data-status") == "ok"   # ran without asking
    assert "secret_word" not in asked and page.evaluate("window.dialogs") == shown + len(asked)
    # kept per server and tool, and taken back in Settings
    page.click("#settings-button")
    assert page.locator("[data-testid=tool-always]").all_inner_texts()[0].startswith("secret_word · notes")
    page.click("[data-testid=tool-revoke]")
    assert page.locator("[data-testid=tool-always]").count() == 0
    assert json.loads(page.evaluate("localStorage.getItem('llmpack.tools.v1')"))["always"] == {}
    page.click("#settings-done")

    page.reload()   # every chat keeps its calls
    page.wait_for_selector("#app:not([hidden])")
    assert secret_calls(page).first.get_attribute("data-status") == "ok"
    statuses = []
    for chat in get_chats(instruct_server):
        for m in get_chat(instruct_server, chat["id"])["messages"]:
            statuses += [c["status"] for r in m.get("rounds", []) for c in r["calls"] if c["tool"] == "secret_word"]
    assert sorted(statuses)[:1] == ["denied"] and statuses.count("ok") >= 3
    assert page.problems == []
    ctx.close()


def test_a_result_is_drawn_as_text_and_kept_through_export_and_import(page, chat_server):
    links = {"id": "c1", "name": "evil_links", "tool": "links", "server": "evil", "arguments": "{}", "result": LINKS,
             "status": "ok", "seconds": 0.2}
    put_chat(chat_server, "toolchat", {"title": "Tools", "base_version": 0, "messages": [
        {"id": "u", "parent": None, "role": "user", "content": "Show me the links."},
        {"id": "a", "parent": "u", "role": "assistant", "content": "Done.",
         "rounds": [{"content": "Let me look.", "calls": [links]}]}]})
    open_app(page, chat_server)
    page.click("[data-chat-id=toolchat] .chat-open")
    block = page.locator("[data-testid=tool-call][data-tool=links]")
    block.locator("summary").click()
    assert block.locator("[data-testid=tool-result]").inner_text() == LINKS    # the characters, not markup
    assert page.locator(".tool-rounds a, .tool-rounds img, .tool-rounds script").count() == 0
    assert page.problems == []
    shot(page, "tools-result-as-text.png")

    exported = requests.get(f"{chat_server.url}/api/chats/toolchat/export?format=json", headers=chat_headers(chat_server),
                            timeout=30).json()
    assert exported["messages"][1]["rounds"][0]["calls"][0]["result"] == LINKS
    md = requests.get(f"{chat_server.url}/api/chats/toolchat/export?format=markdown", headers=chat_headers(chat_server),
                      timeout=30).text
    assert "<summary>Tool: links (evil) · ok · 0.2 s</summary>" in md and "&lt;img" not in md.split("````text")[2]
    requests.delete(f"{chat_server.url}/api/chats/toolchat", headers=chat_headers(chat_server), timeout=30)
    back = requests.post(f"{chat_server.url}/api/chats/import", json=exported, headers=chat_headers(chat_server),
                         timeout=30).json()
    assert get_chat(chat_server, back["id"])["messages"][1]["rounds"] == exported["messages"][1]["rounds"]


def test_the_calls_stay_with_their_reply_through_regenerate(page, chat_server):
    call = {"id": "c1", "name": "calculator", "tool": "calculator", "server": None, "arguments": '{"expression": "2^10"}',
            "result": '{"expression":"2^10","result":"1024","exact":true}', "status": "ok", "seconds": 0.1}
    put_chat(chat_server, "kept", {"title": "Kept", "base_version": 0, "messages": [
        {"id": "u", "parent": None, "role": "user", "content": "What is 2^10?"},
        {"id": "a", "parent": "u", "role": "assistant", "content": "It is 1024.", "rounds": [{"content": "", "calls": [call]}]}]})
    set_settings(page, chat_server.model_id, max_tokens=8)
    open_app(page, chat_server)
    page.click("[data-chat-id=kept] .chat-open")
    page.locator("[data-testid=tool-call][data-tool=calculator]").wait_for()
    page.click("[data-testid=regenerate]")   # a new version of the reply; the old one keeps its call
    page.wait_for_selector("[data-testid=stop]", state="hidden")
    assert page.locator("[data-testid=message-assistant] [data-testid=version-count]").inner_text() == "2/2"
    page.click("[data-testid=message-assistant] [data-testid=version-prev]")
    assert page.locator("[data-testid=tool-call][data-tool=calculator]").get_attribute("data-status") == "ok"
    saved = get_chat(chat_server, "kept")["messages"]
    assert [m.get("rounds", [{}])[0].get("calls", [{}])[0].get("result") for m in saved if m["id"] == "a"] == \
        [call["result"]]
    assert page.problems == []


@pytest.mark.parametrize("change, field", [
    ({"rounds": [{"content": "", "calls": []}]}, "messages[1].rounds[0].calls"),
    ({"rounds": [{"calls": [{"id": "c", "name": "x", "tool": "x", "server": None, "arguments": "{}", "result": "",
                             "status": "exploded", "seconds": 1}]}]}, "messages[1].rounds[0].calls[0].status"),
    ({"rounds": [{"calls": [{"id": "c", "name": "x", "tool": "x", "server": None, "arguments": "{}",
                             "result": "r" * 30_000, "status": "ok", "seconds": 1}]}]}, "messages[1].rounds[0].calls[0].result"),
])
def test_a_bad_round_is_refused_naming_the_field(chat_server, change, field):
    chat = {"title": "t", "base_version": 0, "messages": [{"id": "u", "parent": None, "role": "user", "content": "q"},
                                                         {"id": "a", "parent": "u", "role": "assistant", "content": "",
                                                          **change}]}
    resp = requests.put(f"{chat_server.url}/api/chats/badround", json=chat, headers=chat_headers(chat_server), timeout=30)
    assert resp.status_code == 400 and f"Cannot save this chat: {field} must be" in resp.json()["error"]["message"], resp.text


SANDBOX = """async ([code, abortAfter]) => {
  const { BUILTINS } = await import("/static/tools.js");
  const run = BUILTINS.find((t) => t.name === "run_javascript").run;
  const ctrl = new AbortController();
  if (abortAfter) setTimeout(() => ctrl.abort(), abortAfter);
  const t0 = performance.now();
  try { return { ok: await run({ code }, ctrl.signal), ms: performance.now() - t0 }; }
  catch (e) { return { error: e.name + ": " + e.message, ms: performance.now() - t0 }; }
}"""


def test_javascript_runs_in_a_worker_without_network_or_page_and_within_its_limits(page, chat_server):
    open_app(page, chat_server)
    assert page.evaluate(SANDBOX, ["return 6 * 7", 0])["ok"] == "Returned: 42"
    assert page.evaluate(SANDBOX, ["console.log('a', {b: 1}); return [1, 2]", 0])["ok"] == 'a {"b":1}\nReturned: [1,2]'
    # nothing to reach: no fetch, no XMLHttpRequest, no page, no storage of the page
    assert page.evaluate(SANDBOX, ["return [typeof fetch, typeof XMLHttpRequest, typeof WebSocket, typeof document, "
                                   "typeof localStorage, typeof importScripts].join()", 0])["ok"] == \
        "Returned: undefined,undefined,undefined,undefined,undefined,undefined"
    # a loop that never ends is stopped at the time limit; Stop ends it at once
    slow = page.evaluate(SANDBOX, ["while (true) {}", 0])
    assert "ran longer than 5 seconds" in slow["error"] and slow["ms"] < 8000
    stopped = page.evaluate(SANDBOX, ["while (true) {}", 300])
    assert stopped["error"].startswith("AbortError") and stopped["ms"] < 2000
    lots = page.evaluate(SANDBOX, ["for (let i = 0; i < 1e5; i++) console.log('line ' + i)", 0])["ok"]
    assert "[output cut at 20,000 characters]" in lots and len(lots) < 21_000
    # the page keeps its own policy: only itself to talk to, no eval; the worker's is stricter
    assert "connect-src 'self'" in requests.get(chat_server.url + "/", timeout=30).headers["Content-Security-Policy"]
    worker = requests.get(chat_server.url + "/static/tool-worker.js", timeout=30).headers["Content-Security-Policy"]
    assert "connect-src 'none'" in worker and "default-src 'none'" in worker
    assert page.evaluate("""async () => { const { calculate } = await import("/static/calc.js");
        return [calculate("0.1 + 0.2").result, calculate("2^64").result, calculate("1/3").fraction]; }""") == \
        ["0.3", "18446744073709551616", "1/3"]
    assert page.problems == []


JS_CALL = ["\n<tool_call>", '\n{"name": "run_javascript", "arguments": {"code": "while (true) {}"}}', "\n</tool_call>"]


def test_stop_ends_a_running_tool_and_the_chat_keeps_working(browser, tmp_path: Path):
    model = write_scripted_model(tmp_path / "js-caller.gguf", reply=JS_CALL)
    with live_server(model) as srv:
        ctx = browser.new_context(viewport={"width": 1280, "height": 860})
        page = new_page(ctx)
        tool_store(page, off=("calculator", "date_time"), on=("run_javascript",))   # the scripted model's template knows no tools
        open_app(page, srv)
        ask(page, "Loop forever, please.")
        running = page.locator("[data-testid=tool-call][data-tool=run_javascript][data-status=running]")
        running.wait_for()
        page.click("[data-testid=stop]")
        wait_reply(page)
        block = page.locator("[data-testid=tool-call][data-tool=run_javascript]").first
        assert block.get_attribute("data-status") == "stopped"
        shot(page, "tools-stopped.png")
        (saved,) = get_chats(srv)
        reply = get_chat(srv, saved["id"])["messages"][-1]
        assert reply["rounds"][0]["calls"][0]["status"] == "stopped" and reply["stats"]["finish"] == "stopped"
        assert page.locator("[data-testid=send]").is_visible()   # ready for the next message
        assert page.problems == []
        ctx.close()

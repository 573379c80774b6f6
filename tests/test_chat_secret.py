"""The chat secret never leaves this origin: not to another server on another port of 127.0.0.1
that the same browser visits (cookies would go there: they ignore ports), and not onto a command
line, where other users of the computer can read it (/proc/*/cmdline)."""
from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, CHROMIUM_ARGS, chromium_path, new_page
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server, wait_until

pytestmark = pytest.mark.browser


class Recorder(BaseHTTPRequestHandler):
    """Another local web server: it records every request line and header it receives."""
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        Recorder.seen.append(self.requestline + "\n" + str(self.headers))
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<!DOCTYPE html><title>another app</title><p>another app</p>")

    def log_message(self, *args) -> None:
        pass


def test_another_port_of_127_0_0_1_receives_no_secret(browser, scripted_model: Path, tmp_path: Path):
    other = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    ctx = browser.browser_type.launch_persistent_context(
        str(tmp_path / "profile"), executable_path=chromium_path(), args=CHROMIUM_ARGS,
        viewport={"width": 1280, "height": 860})
    try:
        with live_server(scripted_model) as srv:
            token = srv.server.options.chat_token
            page = new_page(ctx)
            page.goto(srv.server.page_url)
            page.wait_for_selector("#app:not([hidden])")
            page.wait_for_selector("#chat-list-empty:not([hidden])")     # /api/chats answered: unlocked
            assert page.locator("[data-testid=chat-locked]").is_hidden()
            assert page.url == srv.url + "/"                            # gone from the address bar

            Recorder.seen.clear()
            visit = new_page(ctx)
            visit.goto(f"http://127.0.0.1:{other.server_address[1]}/")
            assert visit.evaluate("window.localStorage.length") == 0
            visit.goto(f"http://127.0.0.1:{other.server_address[1]}/again")
            assert len(Recorder.seen) >= 2
            assert not any(token in request for request in Recorder.seen), Recorder.seen
            assert not any("cookie" in request.lower() for request in Recorder.seen), Recorder.seen
            assert ctx.cookies() == []

            page.reload()                                                 # kept for this origin
            page.wait_for_selector("#chat-list-empty:not([hidden])")
            assert page.locator("[data-testid=chat-locked]").is_hidden()
            assert page.problems == [] and visit.problems == []
    finally:
        ctx.close()
        other.shutdown()


BROWSER_SCRIPT = """#!/bin/sh
# a stand-in browser: records the command line it was started with, as /proc/PID/cmdline shows it
tr '\\0' '\\n' < /proc/$$/cmdline > "$0.cmdline"
"""


def test_the_browser_is_opened_through_a_private_file_never_with_the_secret_on_its_command_line(
        browser, tiny_chat_model: Path, tmp_path: Path):
    fake = tmp_path / "browser.sh"
    fake.write_text(BROWSER_SCRIPT)
    fake.chmod(0o755)
    runtime = tmp_path / "runtime"
    env = {**os.environ, "BROWSER": str(fake), "XDG_RUNTIME_DIR": str(runtime), "LLMPACK_DATA_DIR": str(tmp_path / "d")}
    env.pop("DISPLAY", None)
    proc = subprocess.Popen([sys.executable, "-m", "llmpack", "run", str(tiny_chat_model), "--port", "0"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    launch_file = None
    try:
        link = None
        for line in proc.stdout:
            found = re.search(r"chat page at (\S+)", line)
            if found:
                link = found.group(1)
                break
        assert link and "?token=" in link, "the console shows the link (that part is expected)"
        token = link.split("?token=", 1)[1]
        cmdline = Path(str(fake) + ".cmdline")
        wait_until(cmdline.exists, timeout=60)
        argv = wait_until(lambda: cmdline.read_text().split("\n") if cmdline.read_text().strip() else None)
        assert not any(token in arg for arg in argv), argv
        opened = argv[argv.index(str(fake)) + 1]
        assert opened.startswith("file://"), argv
        launch_file = Path(unquote(urlsplit(opened).path))
        assert launch_file.parent == runtime / "llmpack", launch_file
        assert stat.S_IMODE(launch_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(launch_file.parent.stat().st_mode) == 0o700
        assert token in launch_file.read_text()

        ctx = browser.new_context(viewport={"width": 1280, "height": 860})
        page = new_page(ctx)
        page.goto(opened)
        page.wait_for_url(link.split("?", 1)[0])            # redirected, and the secret left the address
        page.wait_for_selector("#app:not([hidden])", timeout=120_000)
        page.wait_for_selector("#chat-list-empty:not([hidden])")      # /api/chats answered: unlocked
        assert page.locator("[data-testid=chat-locked]").is_hidden()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "chat-secret-1280.png"))
        page.set_viewport_size({"width": 390, "height": 844})
        page.wait_for_selector("#sidebar", state="hidden")   # it slides away on a phone
        page.screenshot(path=str(ARTIFACTS / "chat-secret-390.png"))
        assert page.problems == []
        ctx.close()
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert launch_file is not None and not launch_file.exists(), "the launch file outlived the server"

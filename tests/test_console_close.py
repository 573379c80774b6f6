"""Closing the console window on Windows stops the program the way Ctrl+C does.

Windows sends CTRL_CLOSE_EVENT to a console program whose window is closed and ends it about
5 s later; the handler llmpack registers (llmpack.signals.on_console_close) stops the server and
waits for its shutdown. Wine cannot close a console window from a script, so the handler runs
here against a real server; registering it is Windows' own SetConsoleCtrlHandler.
"""
from __future__ import annotations

import requests

from llmpack import signals
from server_fixtures import LiveServer


def test_closing_the_console_stops_the_server_and_waits_for_it(tiny_chat_model):
    srv = LiveServer(tiny_chat_model).start()
    handler = signals.console_close_handler(srv.server.stop, srv.server.closed.wait)
    assert handler(0) is False and handler(1) is False      # Ctrl+C / Ctrl+Break: Python's own handlers
    assert requests.get(srv.url + "/health", timeout=10).status_code == 200
    assert handler(2) is True                                # CTRL_CLOSE_EVENT
    assert srv.server.closed.is_set()                        # it returned only once the shutdown was done
    srv._thread.join(10)
    assert not srv._thread.is_alive()


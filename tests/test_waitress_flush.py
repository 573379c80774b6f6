"""waitress with llmpack's settings sends each small write at once (one SSE event per token),
without the deprecated send_bytes option: the guarantee that used to pin waitress below 4."""
from __future__ import annotations

import socket
import threading
import time
import warnings

import waitress

from llmpack.runtime.server.lifecycle.sockets import waitress_settings


def test_each_small_write_reaches_the_client_before_the_next_is_made():
    release = threading.Event()

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/event-stream")])
        yield b"data: first\n\n"
        release.wait(10)          # the second event is made only once the client has the first
        yield b"data: second\n\n"

    sock = socket.create_server(("127.0.0.1", 0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)   # no deprecated option in our settings
        server = waitress.create_server(app, sockets=[sock], **waitress_settings(4))
    threading.Thread(target=server.run, daemon=True).start()
    try:
        client = socket.create_connection(sock.getsockname(), timeout=10)
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        got, deadline = b"", time.monotonic() + 10
        while b"data: first" not in got and time.monotonic() < deadline:
            got += client.recv(4096)
        assert b"data: first" in got and b"second" not in got
        release.set()
        while b"data: second" not in got and time.monotonic() < deadline:
            got += client.recv(4096)
        assert b"data: second" in got
        client.close()
    finally:
        release.set()
        server.close()

"""The instance lock (runtime/server/instance.py) believes only the server that wrote it: the
lock holds a secret, and the server on its port must answer a fresh nonce with the HMAC of it.
A stranger that answers /health with the (public) model key, on a port a crashed copy left
behind, gets nothing: the next double-click starts a server of its own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from llmpack.runtime.server.lifecycle import instance

KEY = "5167a0c3e1"


class _Stranger(BaseHTTPRequestHandler):
    """Answers like an llmpack server for KEY; proves with `secret` (None: cannot prove)."""

    secret: str | None = None

    def do_GET(self):  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        body: dict = {"instance": KEY, "phase": "ready"}
        if url.path == instance.CHALLENGE_PATH:
            nonce = parse_qs(url.query).get("nonce", [""])[0]
            body["proof"] = instance.proof(self.secret, nonce) if self.secret else "0" * 64
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def other_process():
    """A live process that is not this one (the lock's pid)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def serve(secret: str | None) -> ThreadingHTTPServer:
    handler = type("Handler", (_Stranger,), {"secret": secret})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def lock_for(tmp_path: Path, server: ThreadingHTTPServer, pid: int, secret: str) -> Path:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    path = instance.claim(tmp_path, KEY, url, None, secret)
    info = json.loads(path.read_text())
    path.write_text(json.dumps({**info, "pid": pid}))
    return path


def test_a_stranger_answering_health_on_the_old_port_is_not_believed(tmp_path: Path, other_process: int):
    server = serve(secret=None)
    try:
        lock = lock_for(tmp_path, server, other_process, instance.new_secret())
        assert instance.find_running(tmp_path, KEY) is None
        assert not lock.exists()         # stale: the next launch writes its own
    finally:
        server.shutdown()


def test_the_server_that_holds_the_secret_is_believed(tmp_path: Path, other_process: int):
    secret = instance.new_secret()
    server = serve(secret=secret)
    try:
        lock_for(tmp_path, server, other_process, secret)
        running = instance.find_running(tmp_path, KEY)
        assert running is not None and running.pid == other_process
        assert oct(os.stat(tmp_path / f"instance-{KEY}.json").st_mode & 0o777) == "0o600"
    finally:
        server.shutdown()


def test_a_wrong_secret_proves_nothing(tmp_path: Path, other_process: int):
    server = serve(secret=instance.new_secret())
    try:
        lock_for(tmp_path, server, other_process, instance.new_secret())
        assert instance.find_running(tmp_path, KEY) is None
    finally:
        server.shutdown()


@pytest.mark.skipif(os.name == "nt", reason="Windows asks OpenProcess, which has no other-user case to fake")
def test_another_users_process_is_not_ours(monkeypatch: pytest.MonkeyPatch):
    def refuse(pid, sig):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", refuse)
    assert instance.pid_alive(4242) is False

"""The server's life around its model, and the `llmpack run` process: /health and the routes while
the model is prepared, a failed preparation, stopping during it, picking a port, and the process
refusing a bad file before it listens and stopping cleanly on SIGTERM. The errors at the HTTP door
are tests/test_server_errors.py's."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer, held_in_phase, sse_events, stream_post, wait_until

from helpers.http import error_of
from llmpack.errors import LlmpackError
from llmpack.runtime.server.lifecycle.sockets import ServerError, bind_socket
from llmpack.runtime.server.lifecycle.prepare import Stopping

HELLO = [{"role": "user", "content": "hello there"}]
REPO = Path(__file__).resolve().parents[1]


# ---- loading, failed loading ----------------------------------------------------------------------
def test_loading_then_ready(tiny_chat_model: Path):
    with held_in_phase(tiny_chat_model, "extracting", 0.5) as (s, release):
        wait_until(lambda: requests.get(s.url + "/health").json().get("phase") == "extracting")
        h = requests.get(s.url + "/health")
        assert h.status_code == 503
        assert h.json()["status"] == "loading" and h.json()["progress"] == 0.5 and h.json()["message"]
        r = requests.get(s.url + "/v1/models")
        assert r.status_code == 503 and error_of(r.content)["code"] == "model_loading" and r.headers["Retry-After"]
        r = requests.post(s.url + "/v1/chat/completions", json={"messages": HELLO})
        assert r.status_code == 503
        assert requests.get(s.url + "/").status_code == 200     # the page shows the loading view
        release.set()
        s.wait_ready(60)
        assert requests.get(s.url + "/health").json()["status"] == "ok"


def test_failed_preparation_is_reported(tiny_chat_model: Path):
    def prepare(progress):
        raise LlmpackError("the model archive is damaged; download it again")

    s = LiveServer(tiny_chat_model, prepare=prepare).start(wait=False)
    try:
        s.state.ready.wait(30)
        h = requests.get(s.url + "/health")
        assert h.status_code == 500 and h.json() == {"status": "error",
                                                     "message": "the model archive is damaged; download it again"}
        r = requests.post(s.url + "/v1/chat/completions", json={"messages": HELLO})
        assert r.status_code == 500 and "damaged" in error_of(r.content)["message"]
    finally:
        s.stop()


def test_stopping_abandons_the_preparation_and_waits_for_it(tiny_chat_model: Path):
    """Ctrl+C while the model unpacks or loads: progress() turns False, the work gives up, and the
    server does not finish closing while the preparing thread still runs. (Python exiting under a
    thread that was inside llama.cpp aborted the program: tests/test_build.py runs that for real.)"""
    steps: list[str] = []
    inside = threading.Event()

    def prepare(progress):
        inside.set()
        while progress("extracting", 0.5):   # an unpack that checks in after every chunk
            time.sleep(0.01)
        time.sleep(0.3)                      # its last chunk: the server must wait for it
        steps.append("gave up")
        raise Stopping("stopped while unpacking")

    s = LiveServer(tiny_chat_model, prepare=prepare).start(wait=False)
    assert inside.wait(30)
    s.stop()
    assert steps == ["gave up"] and not s.server.still_preparing()
    assert s.state.phase == "extracting" and s.state.model is None   # abandoned: not an error, not loaded


def test_stopping_during_the_load_leaves_no_engine_running(tiny_chat_model: Path):
    """Stopped after the model is unpacked but before it is loaded: it is never loaded."""
    stopping = threading.Event()

    def prepare(progress):
        stopping.wait(30)
        return tiny_chat_model

    s = LiveServer(tiny_chat_model, prepare=prepare).start(wait=False)
    s.server.stop()
    stopping.set()
    s._thread.join(30)
    assert not s._thread.is_alive() and not s.server.still_preparing()
    assert s.state.model is None and s.state.phase != "error"


# ---- binding, the process ---------------------------------------------------------------------------
def test_port_selection():
    first = bind_socket("127.0.0.1", 0)
    try:
        first.listen(1)
        port = first.getsockname()[1]
        nxt = bind_socket("127.0.0.1", port)        # busy -> the next free one
        assert port < nxt.getsockname()[1] <= port + 20
        nxt.close()
    finally:
        first.close()
    with pytest.raises(ServerError):
        bind_socket("127.0.0.1", 70000)


def _run(args: list[str], **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "llmpack", "run", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_run_rejects_a_bad_gguf_before_listening(tmp_path: Path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 10)
    p = _run([str(bad), "--no-browser", "--port", "0"])
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2 and "llmpack: error:" in err and "LLMPACK_LISTENING" not in out


def test_run_process_serves_and_stops_on_sigterm(tiny_chat_model: Path):
    p = _run([str(tiny_chat_model), "--no-browser", "--port", "0", "--host", "0.0.0.0"])
    try:
        url, head = None, []
        for line in p.stdout:
            head.append(line)
            if line.startswith("LLMPACK_LISTENING "):
                url = line.split()[1]
                break
        assert url and url.startswith("http://127.0.0.1:")
        wait_until(lambda: requests.get(url + "/health").status_code == 200, timeout=60, interval=0.1)
        stream = stream_post(url + "/v1/chat/completions", {"messages": HELLO, "stream": True, "max_tokens": 100000,
                                                            "ignore_eos": True})
        events = sse_events(stream)
        next(events)                                      # a request is running when the signal comes
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
        out = "".join(head) + out
        assert p.returncode == 0, err
        assert "chat page at http://127.0.0.1:" in out and "WARNING" in err and "--api-key" in err
        assert "Traceback" not in err
    finally:
        if p.poll() is None:
            p.kill()

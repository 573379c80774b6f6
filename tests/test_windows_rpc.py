"""`chat.exe --rpc-worker` under Wine lends its processor to `llmpack run --rpc` on Linux: a
Windows file built here from the Windows stub (python.org's CPython, the mingw-built DLLs with
ggml-rpc.dll), started as a worker in a Wine prefix of its own, holds every layer of the model
(its process grows by their weights) and the Linux server's greedy text equals the CPU-only run's.

Wine runs the very file we would send; the TCP between the two is the loopback's, as through an
SSH tunnel between two PCs (docs/SCALING.md). Every wait is bounded."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from apps import App, llmpack_cli
from helpers.ports import free_port
from test_rpc import LAYER_BYTES, N_LAYER, model, rss  # noqa: F401 - model: the module's fixture

from llmpack.builder.windows.tools import Wine

pytestmark = [pytest.mark.stub,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the worker's memory")]

START_S = 240          # a first start under Wine unpacks the file (PyInstaller) before it listens
KEY = {"LLMPACK_RPC_KEY": "windows-test-key-0123456789abcdef"}   # an env var: no path to translate for Wine
BODY = {"prompt": "The quick brown fox", "max_tokens": 24, "temperature": 0, "ignore_eos": True}


def file_rss(prefix: Path, name: str) -> int:
    """Resident bytes of the Windows processes of `name` in this Wine prefix (a built file is
    PyInstaller's bootloader and its child). Not through the port: wineserver holds every socket."""
    total = 0
    for proc in Path("/proc").iterdir():
        try:
            if name in (proc / "cmdline").read_bytes().decode("utf-8", "replace") and \
                    f"WINEPREFIX={prefix}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                total += rss(int(proc.name))
        except (OSError, ValueError):
            continue   # not a process, or one that ended meanwhile
    return total


def greedy_text(url: str) -> str:
    r = requests.post(url + "/v1/completions", json=BODY, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def serve(model_path: Path, tmp: Path, *flags: str) -> App:
    app = App([sys.executable, "-m", "llmpack", "run", str(model_path), "--no-browser", "--port", "0", "--ctx", "512",
               "--threads", "1", *flags], {**os.environ, **KEY, "LLMPACK_DATA_DIR": str(tmp)}, tmp)
    app.wait_listening()
    return app


def test_a_windows_file_under_wine_serves_layers_to_linux(model, windows_stub, tmp_path):  # noqa: F811
    exe = tmp_path / "chat.exe"
    made = llmpack_cli("build", str(model), "-o", str(exe), "--stub", str(windows_stub))
    assert f"wrote {exe}" in made.stdout, made.stdout + made.stderr
    cpu = serve(model, tmp_path, "--gpu-layers", "0")
    try:
        cpu.wait_healthy()
        expected = greedy_text(cpu.url)
    finally:
        cpu.stop()

    box = Wine(tmp_path / "prefix").ensure()   # a prefix of its own: its wineserver is ours to stop
    port = free_port()
    worker = subprocess.Popen(["wine", str(exe), "--rpc-worker", "--port", str(port), "--mem", "1536", "--threads", "1"],
                              env={**box.env(), **KEY}, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    app = None
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert worker.poll() is None, f"the Windows worker exited: {worker.stdout.read()}"
                assert time.monotonic() < deadline, f"the Windows worker did not listen within {START_S} s"
                time.sleep(0.5)
        before = file_rss(box.prefix, exe.name)
        assert before > 0
        app = serve(model, tmp_path, "--rpc", f"127.0.0.1:{port}")
        remote = app.wait_healthy()["backend"]["remote"]
        assert [(r["endpoint"], r["layers"], r["memory_free"] >> 20) for r in remote] == [
            (f"127.0.0.1:{port}", N_LAYER, 1536)], remote            # all layers, on the --mem the worker offered
        grown = file_rss(box.prefix, exe.name) - before
        assert grown >= 0.8 * N_LAYER * LAYER_BYTES, grown          # the Windows process holds their weights
        assert greedy_text(app.url) == expected
    finally:
        if app is not None:
            app.stop()
        os.killpg(worker.pid, signal.SIGKILL)
        box.shutdown()                                              # this prefix's wineserver only
        out = worker.communicate(timeout=30)[0]
    assert f"lending this computer's processor, offering 1536 MiB at 127.0.0.1:{port}" in out, out

"""llama.cpp's RPC backend: a model split across two workers on 127.0.0.1, each a real
`llmpack rpc-worker` process with a --mem cap, against the same model run on the CPU alone.

What is measured, not assumed: each worker's resident memory grows by the layers it holds
(/proc/PID/status), the greedy tokens equal the CPU-only run's, a killed worker ends the running
request with an error that names it within seconds, and a non-loopback bind is refused."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import pytest
import requests
from apps import App
from helpers.ports import free_port  # also for test_rpc_fuzz and test_rpc_hardening, which import it from here

from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.hardware.placement import layers_per_device, startup_line
from llmpack.runtime.hardware.rpc import RpcError, parse_endpoints
from llmpack.runtime.hardware.rpc_worker import serve_worker
from llmpack.runtime.llm import LLM

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the workers' memory")

N_LAYER, LAYER_BYTES = 8, 4 * (2 * 256 * 256 + 2 * 128 * 256 + 3 * 256 * 1024)   # f32 weights of one layer
CAPS_MIB = (1536, 512)          # worker A offers three times what B does: A takes ~3/4 of the layers
GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)


def start_worker(port: int, mem: int, cmd: list[str] | None = None, *, extra: Sequence[str] = (),
                 env: dict | None = None) -> subprocess.Popen:
    """`llmpack rpc-worker` (or `cmd`, a built file's --rpc-worker), once its port accepts connections.
    Its console goes to a file (`proc.log`): a pipe nobody reads would stop a worker that logs much."""
    cmd = cmd or [sys.executable, "-m", "llmpack", "rpc-worker"]
    log = tempfile.NamedTemporaryFile(prefix="rpc-worker-", suffix=".log", delete=False)
    proc = subprocess.Popen([*cmd, "--port", str(port), "--mem", str(mem), "--threads", "1", *extra],
                            stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)
    proc.log = Path(log.name)
    log.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "llmpack rpc-worker: lending" in proc.log.read_text(errors="replace"):
            try:   # connect only once it says it lends: a connection now is a head's, which it serves alone
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return proc
            except OSError:
                pass
        if proc.poll() is not None:
            raise AssertionError(f"the worker exited: {proc.log.read_text(errors='replace')}")
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the worker did not listen within 60 s")


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module", autouse=True)
def rpc_key(tmp_path_factory):
    """One key for this module's workers and heads, as a file in $LLMPACK_RPC_KEY_FILE (workers and
    `llmpack run` inherit the environment; LLM(rpc=...) in this process reads it)."""
    path = tmp_path_factory.mktemp("rpckey") / "key"
    path.write_text("test-key-" + "0123456789abcdef" * 2 + "\n")
    path.chmod(0o600)
    before = os.environ.get("LLMPACK_RPC_KEY_FILE")
    os.environ["LLMPACK_RPC_KEY_FILE"] = str(path)
    yield path
    if before is None:
        del os.environ["LLMPACK_RPC_KEY_FILE"]
    else:
        os.environ["LLMPACK_RPC_KEY_FILE"] = before


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    from ggufs import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("rpc") / "mid.gguf", n_layer=N_LAYER, n_embd=256, n_head=4,
                            n_head_kv=2, n_ff=1024, seed=3)


@pytest.fixture(scope="module")
def workers():
    ports = [free_port(), free_port()]
    procs = [start_worker(p, m) for p, m in zip(ports, CAPS_MIB)]
    yield [(f"127.0.0.1:{p}", proc) for p, proc in zip(ports, procs)]
    for proc in procs:
        proc.kill()
        proc.wait(10)


def test_endpoints_are_checked_before_ggml_sees_them():
    assert parse_endpoints("127.0.0.1:50052, box.lan:6000") == ("127.0.0.1:50052", "box.lan:6000")
    for bad, says in [("", "at least one"), ("host", "HOST:PORT"), ("h:99999", "HOST:PORT"),
                      ("[::1]:50052", "not IPv6"), ("a:1,a:1", "twice")]:
        with pytest.raises(RpcError, match=says):
            parse_endpoints(bad)


def test_layers_follow_llama_cpps_split_rule():
    # llama.cpp: layer il goes to the first device whose cumulative share exceeds il / (n_layer + 1)
    assert layers_per_device(-1, 8, 8, [3.0, 1.0], 2) == [7, 1]
    assert layers_per_device(-1, 8, 8, [1.0, 1.0], 2) == [5, 3]
    assert layers_per_device(3, 8, 8, [1.0, 1.0], 2) == [2, 0]   # the top 3: layers 6, 7 on the first, the output on the second
    assert layers_per_device(0, 8, 8, None, 2) == [0, 0]


def test_a_worker_nobody_runs_is_one_line_naming_it(model):
    port = free_port()
    with pytest.raises(RpcError, match=f"no RPC worker listens at 127.0.0.1:{port}; start one there"):
        LLM(model, n_ctx=256, rpc=(f"127.0.0.1:{port}",))


def test_a_worker_refuses_a_network_address_without_the_insecure_flag():
    said: list[str] = []
    with pytest.raises(RpcError, match="unencrypted.*--insecure-bind"):
        serve_worker(host="0.0.0.0", port=free_port(), say=said.append)
    assert said == []   # refused before lending anything
    out = subprocess.run([sys.executable, "-m", "llmpack", "rpc-worker", "--host", "0.0.0.0", "--port", str(free_port())],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("llmpack: error: --host 0.0.0.0 would send") and "--insecure-bind" in out.stderr


def test_two_workers_hold_layers_and_give_the_cpu_runs_greedy_text(model, workers):
    with LLM(model, n_ctx=256, gpu_layers=0) as cpu:
        expected = cpu.generate("The quick brown fox", GREEDY)[0].outputs[0].token_ids
    before = [rss(proc.pid) for _, proc in workers]
    llm = LLM(model, n_ctx=256, rpc=tuple(ep for ep, _ in workers))
    try:
        report = llm.engine.backend
        layers = [r["layers"] for r in report["remote"]]
        assert [r["endpoint"] for r in report["remote"]] == [ep for ep, _ in workers]
        assert [r["memory_free"] >> 20 for r in report["remote"]] == list(CAPS_MIB)   # the --mem caps, as ggml saw them
        assert sum(layers) == N_LAYER and layers[0] > layers[1] > 0, layers
        assert report["gpu_layers"] == N_LAYER and "RPC workers" in report["summary"]
        detail = startup_line(report, verbose=True).splitlines()[1]
        assert detail.startswith(f"llmpack: RPC RPC0 at {workers[0][0]} (1536 MiB offered): {layers[0]}, "), detail
        grown = [rss(proc.pid) - b for (_, proc), b in zip(workers, before)]
        for n, delta in zip(layers, grown):   # each worker really holds its layers' weights
            assert delta >= 0.8 * n * LAYER_BYTES, (layers, grown)
        got = llm.generate("The quick brown fox", GREEDY)[0].outputs[0].token_ids
        assert got == expected
    finally:
        llm.close()


def test_a_killed_worker_ends_the_stream_with_an_error_naming_it(model, tmp_path):
    """`llmpack run --rpc` for real: /health names the workers and their layers; killing one
    mid-stream ends the stream with an error naming it within seconds, and the server stays up."""
    ports = [free_port(), free_port()]
    procs = [start_worker(p, m) for p, m in zip(ports, CAPS_MIB)]
    endpoints = [f"127.0.0.1:{p}" for p in ports]
    app = App([sys.executable, "-m", "llmpack", "run", str(model), "--no-browser", "--port", "0", "--ctx", "2048",
               "--rpc", ",".join(endpoints)], {**os.environ, "LLMPACK_DATA_DIR": str(tmp_path)}, tmp_path)
    try:
        url = app.wait_listening()
        backend = app.wait_healthy()["backend"]
        assert [(r["endpoint"], r["layers"] > 0) for r in backend["remote"]] == [(e, True) for e in endpoints]
        assert "RPC workers" in app.wait_line("llmpack: Running")
        body = {"prompt": "Once upon a time", "max_tokens": 1800, "temperature": 0, "ignore_eos": True, "stream": True}
        with requests.post(url + "/v1/completions", json=body, stream=True, timeout=60) as r:
            events = (line for line in r.iter_lines() if line.startswith(b"data:"))
            for _ in range(3):
                assert b'"text"' in next(events)   # tokens flow through both workers
            procs[1].send_signal(signal.SIGKILL)
            killed = time.monotonic()
            rest = list(events)
        assert time.monotonic() - killed < 10
        assert rest[-1] == b"data: [DONE]"
        error = json.loads(rest[-2][5:])["error"]["message"]
        assert f"lost the RPC worker at {endpoints[1]}" in error, error
        health = requests.get(url + "/health", timeout=30)   # the server still answers, and says why
        assert f"lost the RPC worker at {endpoints[1]}" in health.text
    finally:
        app.stop()
        for proc in procs:
            proc.kill()


@pytest.mark.stub
def test_a_built_file_is_a_worker_too(model, tmp_path):
    from apps import llmpack_cli

    from llmpack.builder.stub import get_stub

    exe = tmp_path / "chat"
    llmpack_cli("build", str(model), "-o", str(exe), "--stub", str(get_stub()))
    port = free_port()
    proc = start_worker(port, 256, [str(exe), "--rpc-worker"])
    try:
        with LLM(model, n_ctx=256, gpu_layers=0) as cpu:
            expected = cpu.generate("The quick brown fox", GREEDY)[0].outputs[0].token_ids
        with LLM(model, n_ctx=256, gpu_layers="all", rpc=(f"127.0.0.1:{port}",)) as llm:
            assert llm.engine.backend["remote"][0]["layers"] == N_LAYER
            assert llm.generate("The quick brown fox", GREEDY)[0].outputs[0].token_ids == expected
    finally:
        os.killpg(proc.pid, signal.SIGKILL)   # a built file is PyInstaller's parent and the worker, its child
        proc.wait(30)
        out = proc.log.read_text(errors="replace")
    assert f"lending this computer's processor, offering 256 MiB at 127.0.0.1:{port}" in out

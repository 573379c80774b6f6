"""Live servers for the server tests: the real engine on a real model, real waitress, real HTTP.

`from server_fixtures import *` in a test module brings in the module-scoped chat_server and the
helpers. The session-scoped servers and models (demo_server, instruct_server, scripted_model) are
in conftest.py: a session fixture imported into several test modules is set up once per module.
"""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest
import requests
from gguf import GGUFReader, GGUFValueType

from ggufs import CHATML_TEMPLATE, EOS_ID, tiny_vocab, write_tiny_model
from llmpack.cli import build_parser, serve_config
from llmpack.runtime.server.lifecycle.server import Server

__all__ = ["LiveServer", "live_server", "held_in_phase", "chat_server", "wait_until", "wait_idle", "write_scripted_model",
           "SCRIPTED_REPLY", "sse_events", "stream_post", "post_on_socket",
           "chat_headers", "LockStep", "finished_metric"]


class LiveServer:
    """`llmpack run MODEL --no-browser --port 0 FLAGS...`, in this process (so tests can look at
    the engine), serving on a background thread."""

    def __init__(self, model: Path, *flags: str, prepare: Callable[..., Path] | None = None,
                 display_name: str | None = None, recipe: Any = None) -> None:
        args = build_parser().parse_args(["run", str(model), "--no-browser", "--port", "0", *flags])
        self.config = serve_config(args, display_name=display_name, recipe_data=recipe)
        self.server = Server(self.config, prepare or (lambda progress: Path(model)), quiet=True)
        self.url = self.server.url
        self.port = self.server.port
        self.state = self.server.state
        self._thread = threading.Thread(target=self.server.run, name="test-server", daemon=True)

    def start(self, wait: bool = True) -> LiveServer:
        self.server.start_preparing()
        self._thread.start()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 300) -> None:
        assert self.state.ready.wait(timeout), "the model did not become ready"
        assert self.state.phase == "ready", self.state.message

    @property
    def engine(self) -> Any:
        return self.state.model.engine

    @property
    def model_id(self) -> str:
        return self.state.model.model_id

    def openai(self, api_key: str = "not-needed", **kw: Any):
        import openai

        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=120, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> requests.Response:
        kw.setdefault("timeout", 120)
        return requests.post(self.url + path, json=body, **kw)

    def stop(self) -> None:
        self.server.stop()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the server did not stop"


def chat_headers(srv: LiveServer) -> dict:
    """What the chat page sends to /api/chats and /api/settings: its mark and this launch's secret."""
    return {"X-Llmpack-Chat": "1", "X-Llmpack-Token": srv.server.options.chat_token}


@contextlib.contextmanager
def held_in_phase(model: Path, phase: str, fraction: float,
                  detail: dict | None = None) -> Iterator[tuple[LiveServer, threading.Event]]:
    """A server whose model preparation reports (phase, fraction) and then waits for the event:
    the loading view and /health can be looked at without racing the load. Set the event to go
    on to ready; the server stops when the block ends."""
    release = threading.Event()

    def prepare(progress: Callable[..., Any]) -> Path:
        progress(phase, fraction, *([detail] if detail else []))
        release.wait(60)
        return model

    srv = LiveServer(model, prepare=prepare).start(wait=False)
    try:
        yield srv, release
    finally:
        release.set()
        srv.stop()


@contextlib.contextmanager
def live_server(model: Path, *flags: str, **kw: Any) -> Iterator[LiveServer]:
    srv = LiveServer(model, *flags, **kw)
    try:
        yield srv.start()
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def chat_server(tiny_chat_model: Path) -> Iterator[LiveServer]:
    """The tiny ChatML model served with default flags."""
    with live_server(tiny_chat_model) as srv:
        yield srv


class LockStep:
    """Streams in lock step with the client: while it is entered, each streamed output with text
    that a live server's engine makes (past the first) waits until the client called seen() for
    the one before. A server or page that holds chunks back (the whole reply, or a few at a time)
    never lets the client see one, so the wait runs out and the output lands in `held_back`.
    Proves "sent as made" with no clock compared; `timeout` only bounds how long a broken server
    makes the test wait. Not for a shared server's tests that run alongside others.

        with LockStep(srv.engine) as step:
            ... read the stream; step.seen() after each chunk ...
        assert step.held_back == [] and received == step.emitted
    """

    def __init__(self, engine: Any, timeout: float = 30) -> None:
        self.engine, self.timeout = engine, timeout
        self.emitted: list[str] = []     # each output's text, in order
        self.held_back: list[str] = []   # the output the client had not seen when the next was due
        self.requests = 0
        self._seen = threading.Semaphore(0)
        self._free = False

    def seen(self) -> None:
        self._seen.release()

    def release(self) -> None:
        """Hold nothing back from now on (e.g. once the client went away): an output waiting for
        seen() goes on at once, and so do the rest."""
        self._free = True
        self._seen.release()

    def __enter__(self) -> LockStep:
        real = self.engine.add_request

        def add_request(*args: Any, **kw: Any) -> Any:
            self.requests += 1
            return _Gated(real(*args, **kw), self)

        self.engine.add_request = add_request
        return self

    def __exit__(self, *exc: Any) -> None:
        del self.engine.add_request   # the instance attribute goes: the engine's own method is back


class _Gated:
    def __init__(self, stream: Any, step: LockStep) -> None:
        self.stream, self.step = stream, step

    def __iter__(self) -> Iterator[Any]:
        step = self.step
        for out in self.stream:
            text = "".join(c.text for c in out.outputs)
            if text:
                if step.emitted and not (step.held_back or step._free) and not step._seen.acquire(timeout=step.timeout):
                    step.held_back.append(step.emitted[-1])
                step.emitted.append(text)
            yield out

    def abort(self) -> None:
        self.stream.abort()


def finished_metric(url: str, reason: str) -> float:
    """How many requests /metrics counts as finished for `reason` (stop, length, abort...)."""
    for line in requests.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("llmpack:request_success_total{") and f'finished_reason="{reason}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def wait_until(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def wait_idle(engine: Any, kv_baseline: int | None = None, timeout: float = 10.0) -> Any:
    """Until nothing runs or waits (and the KV blocks in use are back to the baseline)."""
    def idle():
        s = engine.stats()
        ok = s.num_running == 0 and s.num_waiting == 0
        return s if ok and (kv_baseline is None or s.kv_blocks_used <= kv_baseline) else None
    return wait_until(idle, timeout)


def sse_events(resp: requests.Response) -> Iterator[str]:
    """The data payloads of a streamed (`requests.post(..., stream=True)`) SSE response, each as
    soon as its HTTP chunk arrives (chunk_size=None reads chunk by chunk)."""
    for line in resp.iter_lines(chunk_size=None):
        if line.startswith(b"data: "):
            yield line[len(b"data: "):].decode("utf-8")


def stream_post(url: str, body: Any, **kw: Any) -> requests.Response:
    kw.setdefault("timeout", 120)
    return requests.post(url, json=body, stream=True, **kw)


def post_on_socket(port: int, path: str, body: Any) -> socket.socket:
    """A POST on a connection the caller owns, so it can hang up mid-response like a client that
    goes away (read the response with recv; shutdown + close is the hang-up)."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (path.encode(), port, len(data), data))
    return sock


# ---- a model whose answer is known -------------------------------------------------------------
SCRIPTED_REPLY = ["Look: ", "<img src=x onerror=alert(1)>", " and ", "<script>alert(2)</script>",
                  " **bold** ", "done."]


def write_scripted_model(path: Path, reply: list[str] = SCRIPTED_REPLY) -> Path:
    """A tiny llama model that answers every ChatML prompt with exactly `reply`, then EOS.

    The last len(reply) vocabulary entries become the reply's pieces. Attention and FFN outputs
    are zeroed, so the hidden state is the current token's embedding: a one-hot vector per
    token of the chain "\\n" (the last token of every ChatML generation prompt) -> reply[0] ->
    ... -> </s>, and the output matrix maps each to the next with a margin no sampler overrides.
    """
    vocab = tiny_vocab()
    pieces = [p for p, _, _ in vocab]
    ids = list(range(len(pieces) - len(reply), len(pieces)))
    for i, text in zip(ids, reply):
        pieces[i] = text.replace(" ", "\u2581")
    write_tiny_model(path, chat_template=CHATML_TEMPLATE, n_layer=1, n_embd=64, name="scripted-test-model",
                     extra_kv={"tokenizer.ggml.tokens": (pieces, GGUFValueType.ARRAY)})
    chain = [5 + ord("\n"), *ids, EOS_ID]   # <0x0A> is byte token 5 + 10
    reader = GGUFReader(path, "r+")
    t = {x.name: x.data for x in reader.tensors}
    for name, data in t.items():
        if name.endswith(("attn_output.weight", "ffn_down.weight", "token_embd.weight", "output.weight")):
            data[...] = 0
        elif name == "output_norm.weight":
            data[...] = 1
    for dim, (a, b) in enumerate(zip(chain, chain[1:])):
        t["token_embd.weight"][a, dim] = 1.0
        t["output.weight"][b, dim] = 50.0
    reader.data.flush()
    del reader
    assert np.isfinite(GGUFReader(path).tensors[0].data).all()
    return Path(path)

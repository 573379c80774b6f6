"""The loading bar moves through the whole model load: /health's progress while a real model
(the Qwen demo model) loads, from every value the server state receives, in order.

It used to sit at 0 % and jump to ready: the only fractions came from llama.cpp's tensor loop,
which with mmap maps the weights instead of reading them (0 to 100 % in tens of milliseconds,
between two of the page's polls), after seconds of metadata and vocabulary at 0 % and before the
context was made at "100 %"."""
from __future__ import annotations

import threading

import pytest
import requests

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer

from llmpack.runtime.server.lifecycle import prepare as serving

pytestmark = pytest.mark.demo


def test_health_progress_moves_through_the_load_of_a_real_model():
    from llmpack.demo_models import demo_model_path

    model = demo_model_path("qwen")
    srv = LiveServer(model, "--ctx", "1024", "--parallel", "2")
    seen: list[tuple[str, float]] = []
    halfway, release = threading.Event(), threading.Event()

    def record(phase: str, fraction: float) -> None:   # on the preparing thread
        seen.append((phase, fraction))
        if phase == "loading" and 0.3 < fraction < 0.7 and not halfway.is_set():
            halfway.set()
            release.wait(60)   # hold the load here while the test asks /health

    srv.state.progress_listeners.append(record)
    srv.start(wait=False)
    try:
        assert halfway.wait(120), f"no progress between 30 % and 70 %: {seen}"
        health = requests.get(srv.url + "/health", timeout=10)
        body = health.json()
        assert health.status_code == 503 and body["status"] == "loading" and body["phase"] == "loading"
        assert 0.3 < body["progress"] < 0.7, body
    finally:
        release.set()
    srv.wait_ready()
    try:
        loading = [f for phase, f in seen if phase == "loading"]
        assert loading == sorted(loading), "the bar never goes back"
        inside = [f for f in loading if 0 < f < 1]
        # reading the 0.4 GB file is reported chunk by chunk over most of the bar...
        assert len({round(f, 2) for f in inside if serving.METADATA_DONE < f < serving.READ_DONE}) >= 10
        # ...llama.cpp's own load continues from there, and 100 % means ready: the context is
        # still to be made after llama.cpp's last callback
        assert any(serving.READ_DONE < f <= serving.LLAMA_DONE for f in loading)
        assert max(loading) < 1.0
        assert requests.get(srv.url + "/health", timeout=10).json()["status"] == "ok"
    finally:
        srv.stop()

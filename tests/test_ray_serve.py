"""`llmpack serve --ray` on a real Ray cluster of two fake nodes (ray.cluster_utils.Cluster, one
CPU each), started once for this module: the single-machine API through Ray Serve's proxy, two
replicas on two nodes, prefix-cache affinity, hang-ups, a lost node and autoscaling. Every wait
is bounded. Ray is in the test extra: CI fails here when it is missing."""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from needs import skip_or_fail

from llmpack.runtime.scale import ray_security

ray_security.keep_on_loopback()   # before Ray is imported: it reads the switch once

try:
    import ray  # noqa: F401
    from ray import serve  # noqa: F401
except ImportError:
    skip_or_fail("ray[serve] is not installed (pip install 'llmpack[ray]')", module=True)

from apps import App
from ggufs import CHATML_TEMPLATE, write_tiny_model
from helpers.ports import free_port

from llmpack.ray_server import SERVED
from llmpack.runtime.model.source import ModelFile
from llmpack.runtime.scale import launch
from llmpack.runtime.server.config import ServeConfig

SLOTS = 4
CTX = 4096
LONG = 3000               # tokens of a reply that would run for many seconds
SYSTEM = "You are the ship's navigator. " + " ".join(f"Rule {i}: keep bearing {i * 7 % 360} degrees." for i in range(40))
WAIT_S = 60


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    # big enough that a long reply takes seconds on one thread: a hang-up must stop it half-way
    return write_tiny_model(tmp_path_factory.mktemp("ray") / "chat.gguf", chat_template=CHATML_TEMPLATE, seed=5,
                            n_layer=8, n_embd=256, n_head=4, n_head_kv=2, n_ff=1024, n_ctx_train=CTX)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two fake nodes on 127.0.0.1 with a token, as `serve --ray` starts its own Ray (ray_security)."""
    from ray.cluster_utils import Cluster

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    head = ray_security.local_head(tmp_path_factory.mktemp("ray-token"))
    before = head.apply()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, **head.node_args()})
    worker = c.add_node(num_cpus=1, **head.node_args())
    ray.init(address=c.address, log_to_driver=False, configure_logging=False)
    yield c, worker
    launch.stop()
    c.shutdown()
    ray_security.set_env(before)
    head.remove()


def config() -> ServeConfig:
    return ServeConfig(ctx=CTX, parallel=SLOTS, open_browser=False)


@pytest.fixture(scope="module")
def url(cluster, model) -> str:
    settings = launch.RaySettings(replicas=2, threads=1, port=free_port())
    return launch.start(ModelFile(model), config(), settings, SERVED, max_ongoing=SLOTS)


def chat(url: str, user: str, max_tokens: int = 8, system: str = SYSTEM) -> requests.Response:
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": max_tokens, "temperature": 0}
    r = requests.post(url + "/v1/chat/completions", json=body, timeout=WAIT_S)
    assert r.status_code == 200, r.text
    return r


def replica_stats(replica: str) -> dict:
    """One replica's engine counters, asked of its Ray actor (an HTTP request would be routed)."""
    actor = ray.get_actor(f"SERVE_REPLICA::{launch.APP_NAME}#replica#{replica}", namespace="serve")
    return ray.get(actor.record_routing_stats.remote(), timeout=WAIT_S)


def test_the_openai_sdk_gets_the_same_greedy_text_as_llmpack_run(url, model, tmp_path):
    from openai import OpenAI

    messages = [{"role": "user", "content": "Name three colours."}]
    app = App([sys.executable, "-m", "llmpack", "run", str(model), "--no-browser", "--port", "0", "--ctx", str(CTX)],
              {**os.environ, "LLMPACK_DATA_DIR": str(tmp_path)}, tmp_path)
    try:
        single = OpenAI(base_url=app.wait_listening() + "/v1", api_key="x")
        app.wait_healthy()
        expected = single.chat.completions.create(model="m", messages=messages, max_tokens=24, temperature=0)
    finally:
        app.stop()
    got = OpenAI(base_url=url + "/v1", api_key="x").chat.completions.create(
        model="m", messages=messages, max_tokens=24, temperature=0)
    assert got.choices[0].message.content == expected.choices[0].message.content
    assert got.usage.completion_tokens == expected.usage.completion_tokens == 24


def test_two_replicas_run_on_two_nodes(url, cluster):
    c, worker = cluster
    seen: dict[str, str] = {}
    for i in range(20):
        r = chat(url, f"Question {i}", system=f"Crew member {i}. " * 30)
        seen[r.headers["X-Llmpack-Node"]] = r.headers["X-Llmpack-Replica"]
        if len(seen) == 2:
            break
    assert set(seen) == {c.head_node.node_id, worker.node_id}
    assert len(set(seen.values())) == 2


def test_a_stream_arrives_chunk_by_chunk(url):
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="x")
    started, times = time.monotonic(), []
    for chunk in client.completions.create(model="m", prompt="Tell a long story:", max_tokens=300, temperature=0,
                                           stream=True, extra_body={"ignore_eos": True}):
        if chunk.choices and chunk.choices[0].text:
            times.append(time.monotonic() - started)
    assert len(times) >= 100
    assert times[0] < 0.5 * times[-1], (times[0], times[-1])   # the first words came long before the last


def test_chats_sharing_a_system_prompt_land_on_one_replica_and_hit_its_cache(url):
    replicas, cached = [], []
    for i in range(6):
        r = chat(url, f"What is rule {i}?")
        replicas.append(r.headers["X-Llmpack-Replica"])
        cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
    assert len(set(replicas)) == 1, replicas
    prompt = r.json()["usage"]["prompt_tokens"]
    assert all(c >= 0.8 * prompt for c in cached[1:]), (cached, prompt)


def test_a_client_that_hangs_up_frees_the_kv_on_its_replica(url):
    # a completion: a chat's reply can end early on its template's stop text, even with ignore_eos
    body = json.dumps({"prompt": "Count forever:", "max_tokens": LONG, "temperature": 0, "ignore_eos": True,
                       "stream": True}).encode()
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % (url.removeprefix("http://").encode(), len(body)) + body)
    head = b""
    while head.count(b"data:") < 3:
        head += sock.recv(4096)
    replica = next(line.split(":", 1)[1].strip() for line in head.decode("utf-8", "replace").split("\r\n")
                   if line.lower().startswith("x-llmpack-replica:"))
    before = replica_stats(replica)
    assert before["num_running"] == 1 and before["kv_blocks_used"] > 0
    sock.close()
    deadline = time.monotonic() + 15
    while (now := replica_stats(replica))["num_running"] or now["kv_blocks_used"]:
        assert time.monotonic() < deadline, now
        time.sleep(0.2)
    made = now["generation_tokens"] - before["generation_tokens"]
    assert made < LONG / 2, made   # stopped soon after the hang-up, not run to the end


def test_health_and_metrics_answer_for_every_replica(url, cluster):
    from prometheus_client.parser import text_string_to_metric_families

    c, worker = cluster
    chat(url, "Warm both up?")
    r = requests.get(url + "/health", timeout=WAIT_S)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "ok" and body["replicas_ready"] == 2, body
    assert {row["node"] for row in body["replicas"]} == {c.head_node.node_id, worker.node_id}
    assert all(row["state"] == "ready" and row["kv_blocks_total"] > 0 and row["running"] >= 0
               for row in body["replicas"]), body
    text = requests.get(url + "/metrics", timeout=WAIT_S).text
    made = {s.labels["replica"]: s.value for fam in text_string_to_metric_families(text)
            if fam.name == "llmpack:generation_tokens" for s in fam.samples if s.name.endswith("_total")}
    assert set(made) == {row["replica"] for row in body["replicas"]} and sum(made.values()) > 0, made


def test_losing_a_node_ends_its_streams_with_an_error_and_the_rest_keep_answering(url, cluster):
    c, worker = cluster
    for i in range(20):   # a prompt family the worker node's replica holds
        prompt = f"Lighthouse keeper {i}. " * 30
        r = requests.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 1}, timeout=WAIT_S)
        if r.headers["X-Llmpack-Node"] == worker.node_id:
            break
    else:
        raise AssertionError("no request landed on the worker node")
    body = {"prompt": prompt, "max_tokens": LONG, "temperature": 0, "ignore_eos": True, "stream": True}
    with requests.post(url + "/v1/completions", json=body, stream=True, timeout=WAIT_S) as r:
        assert r.headers["X-Llmpack-Node"] == worker.node_id
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith(b"data:"))
        c.remove_node(worker)
        removed = time.monotonic()
        events = [line for line in lines if line.startswith(b"data:")]
    assert time.monotonic() - removed < 20
    assert events[-1] == b"data: [DONE]"
    error = json.loads(events[-2][5:])["error"]
    assert error["code"] == "replica_lost" and "send the request again" in error["message"]
    for i in range(3):   # the survivor answers, including the family the lost replica held
        r = requests.post(url + "/v1/completions", json={"prompt": prompt + str(i), "max_tokens": 4}, timeout=WAIT_S)
        assert r.status_code == 200 and r.headers["X-Llmpack-Node"] == c.head_node.node_id, r.text


def test_replicas_auto_scales_from_one_to_two_under_load(cluster, model, url, tmp_path):
    """Last: `llmpack serve --ray ADDRESS --replicas auto` (min 1, max 2) joins the cluster, which
    has a fresh second node, and replaces the app; load brings up the second replica."""
    c, _ = cluster
    c.add_node(num_cpus=1)
    serve.delete(launch.APP_NAME)
    port = url.rsplit(":", 1)[1]   # Serve's proxy keeps the port it started with
    app = App([sys.executable, "-m", "llmpack", "serve", "--ray", c.address, str(model), "--replicas", "auto",
               "--min-replicas", "1", "--max-replicas", "2", "--threads", "1", "--parallel", str(SLOTS),
               "--ctx", str(CTX), "--port", port, "--api-key", "sesame"],
              {**os.environ, "LLMPACK_DATA_DIR": str(tmp_path)}, tmp_path)
    stop = threading.Event()
    key = {"Authorization": "Bearer sesame"}
    try:
        assert app.wait_listening(timeout=180) == url
        assert running_replicas() == 1
        # behind the key like the single-machine routes: /health is public but names no nodes, /metrics is not
        assert requests.get(url + "/metrics", timeout=WAIT_S).status_code == 401
        assert requests.get(url + "/metrics", headers=key, timeout=WAIT_S).status_code == 200
        brief = requests.get(url + "/health", timeout=WAIT_S).json()
        assert brief["status"] == "ok" and "model" not in brief and "node" not in brief["replicas"][0], brief
        assert requests.get(url + "/health", headers=key, timeout=WAIT_S).json()["replicas"][0]["node"]

        def load(i: int) -> None:
            body = {"prompt": f"Story {i}:", "max_tokens": 400, "temperature": 0, "ignore_eos": True}
            while not stop.is_set():
                requests.post(url + "/v1/completions", json=body, headers=key, timeout=WAIT_S)

        clients = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(2 * SLOTS)]
        for t in clients:
            t.start()
        deadline = time.monotonic() + WAIT_S
        while running_replicas() < 2:
            assert time.monotonic() < deadline, "no second replica within a minute of load"
            time.sleep(0.5)
    finally:
        stop.set()
        app.stop(timeout=60)


def running_replicas() -> int:
    status = serve.status().applications[launch.APP_NAME].deployments["replica"]
    return status.replica_states.get("RUNNING", 0)

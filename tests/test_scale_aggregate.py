"""/health and /metrics of `serve --ray` put together from each replica's own answer
(runtime/scale/aggregate.py), with the single-machine app answering for each replica."""
from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from llmpack.runtime.scale.aggregate import Answer, health, metrics

STATS = {"num_running": 3, "num_waiting": 1, "kv_blocks_used": 32, "kv_blocks_total": 128}
READY = json.dumps({"status": "ok", "model": "tiny", "n_ctx": 4096}).encode()
LOADING = json.dumps({"status": "loading", "phase": "loading", "progress": 0.5}).encode()
TEXT = ("# HELP llmpack:generation_tokens_total Tokens generated.\n# TYPE llmpack:generation_tokens_total counter\n"
        'llmpack:generation_tokens_total{model_name="tiny"} %d\n'
        "# HELP llmpack:num_requests_running Requests being decoded.\n# TYPE llmpack:num_requests_running gauge\n"
        'llmpack:num_requests_running{model_name="tiny"} %d\n')


def test_health_lists_every_replica_and_is_up_while_one_is_ready():
    answers = [Answer("r1", 200, READY, "node-a", STATS), Answer("r2", 503, LOADING, "node-b", {}),
               Answer("r3", error="no answer within 5 s")]
    body, status = health(answers, authorized=True)
    assert status == 200 and body["status"] == "ok" and body["model"] == "tiny" and body["replicas_ready"] == 1
    assert [(r["replica"], r["state"], r["node"]) for r in body["replicas"]] == [
        ("r1", "ready", "node-a"), ("r2", "loading", "node-b"), ("r3", "unreachable", "")]
    first = body["replicas"][0]
    assert (first["running"], first["waiting"], first["kv_blocks_used"], first["kv_use"]) == (3, 1, 32, 0.25)
    assert body["replicas"][2]["error"] == "no answer within 5 s"


def test_health_without_the_key_names_states_only_and_none_ready_is_not_ok():
    body, status = health([Answer("r1", 503, LOADING, "node-a", STATS)], authorized=False)
    assert status == 503 and body["status"] == "loading"
    assert body["replicas"] == [{"replica": "r1", "state": "loading"}]     # no node, no load figures
    body, status = health([], authorized=True)
    assert status == 503 and body["replicas"] == [] and "No replica" in body["message"]


def test_metrics_label_every_sample_by_replica_and_count_replicas_by_state():
    data, status, kind = metrics([Answer("r1", 200, (TEXT % (10, 2)).encode(), "node-a"),
                                  Answer("r2", 200, (TEXT % (5, 1)).encode(), "node-b"),
                                  Answer("r3", error="gone")])
    assert status == 200 and kind.startswith("text/plain")
    samples = {(s.name, s.labels.get("replica", s.labels.get("state"))): s.value
               for fam in text_string_to_metric_families(data.decode()) for s in fam.samples}
    assert samples[("llmpack:generation_tokens_total", "r1")] == 10
    assert samples[("llmpack:generation_tokens_total", "r2")] == 5
    assert samples[("llmpack:num_requests_running", "r2")] == 1
    assert samples[("llmpack:replicas", "ready")] == 2 and samples[("llmpack:replicas", "unreachable")] == 1
    assert data.decode().count("# TYPE llmpack:generation_tokens_total counter") == 1   # one family, two replicas
    assert 'node="node-a"' in data.decode()


def test_metrics_refused_by_a_replica_is_refused():
    refusal = json.dumps({"error": {"message": "Missing or invalid API key"}}).encode()
    data, status, _ = metrics([Answer("r1", 401, refusal, "node-a")])
    assert status == 401 and data == refusal

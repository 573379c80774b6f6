"""`/health` and `/metrics` of a `serve --ray` service: every replica's answer, combined.

The ingress asks each replica (a request the router sends to that replica only) to answer the
caller's own request through the single-machine app, so the key check and what an unauthorized
caller may see are the app's; here the answers are put together as an operator expects:
* /health: the service is up while one replica is ready; `replicas` lists each one with its state,
  and for callers with the key, its node, requests running and waiting, and KV blocks in use.
* /metrics: each replica's Prometheus text with `replica` and `node` labels on every sample
  (sum() over them in PromQL gives the service's totals), plus `llmpack:replicas` answering or not.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

FANNED_OUT = ("/health", "/metrics")   # GET paths the ingress answers from every replica


@dataclass
class Answer:
    """One replica's answer to the fanned-out request (`error` set, the rest empty, when it gave none)."""
    replica: str
    status: int = 0
    body: bytes = b""
    node: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def state_of(answer: Answer) -> str:
    """ready / loading / error (the replica's own /health status) or unreachable."""
    if answer.error:
        return "unreachable"
    try:
        status = json.loads(answer.body).get("status")
    except (ValueError, AttributeError):
        status = None
    return {"ok": "ready", "loading": "loading"}.get(status, "error")


def health(answers: list[Answer], authorized: bool) -> tuple[dict, int]:
    """(body, status): the first ready replica's own /health body, plus `replicas` and
    `replicas_ready`; 200 while any replica is ready, else the first answer's status (503 if none)."""
    states = [state_of(a) for a in answers]
    ready = [a for a, s in zip(answers, states) if s == "ready"]
    answered = [a for a in answers if not a.error]
    first = ready[0] if ready else (answered[0] if answered else None)
    body: dict[str, Any] = json.loads(first.body) if first else {
        "status": "loading", "message": "No replica of the service has answered yet; Ray may still be starting them."}
    rows = []
    for a, state in zip(answers, states):
        row: dict[str, Any] = {"replica": a.replica, "state": state}
        if authorized:
            row["node"] = a.node
            if a.stats:
                total = a.stats.get("kv_blocks_total") or 0
                row.update(running=a.stats.get("num_running", 0), waiting=a.stats.get("num_waiting", 0),
                           kv_blocks_used=a.stats.get("kv_blocks_used", 0), kv_blocks_total=total,
                           kv_use=round((a.stats.get("kv_blocks_used") or 0) / total, 4) if total else 0.0)
            if a.error:
                row["error"] = a.error
        rows.append(row)
    body.update(replicas=rows, replicas_ready=len(ready))
    return body, (200 if ready else first.status if first else 503)


def metrics(answers: list[Answer]) -> tuple[bytes, int, str]:
    """(body, status, content type): every answering replica's metrics, labelled by replica and
    node. A replica that refused (401 without the key) gives its refusal as the answer."""
    for a in answers:
        if not a.error and a.status != 200:
            return a.body, a.status, "application/json"
    families: dict[str, Metric] = {}
    for a in answers:
        if a.error:
            continue
        for fam in text_string_to_metric_families(a.body.decode("utf-8", "replace")):
            into = families.setdefault(fam.name, Metric(fam.name, fam.documentation, fam.type, fam.unit))
            into.samples += [s._replace(labels={**s.labels, "replica": a.replica, "node": a.node})
                             for s in fam.samples]
    count = Metric("llmpack:replicas", "Replicas of the service: answering, or alive but not answering.", "gauge")
    count.add_sample("llmpack:replicas", {"state": "ready"}, sum(not a.error for a in answers))
    count.add_sample("llmpack:replicas", {"state": "unreachable"}, sum(bool(a.error) for a in answers))
    families[count.name] = count
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(families.values())))
    return generate_latest(registry), 200, CONTENT_TYPE_LATEST


class _Fixed:
    """A collector that yields metric families already read."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self):
        return iter(self.families)

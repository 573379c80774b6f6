"""Prometheus metrics with vLLM's names under the `llmpack:` prefix, in a per-app registry.

Gauges and engine counters are read from `engine.stats()` at scrape time (a custom collector);
the latency histograms and the per-request counter are observed by the routes through
`RequestTimer` as a response streams.
"""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from llmpack.runtime.server.http.state import ServerState

LABEL = ["model_name"]
# vLLM's buckets
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

# (metric, help, EngineStats attribute) read at scrape time
_GAUGES = [
    ("llmpack:num_requests_running", "Requests being decoded.", "num_running"),
    ("llmpack:num_requests_waiting", "Requests waiting for a slot.", "num_waiting"),
]
_COUNTERS = [
    ("llmpack:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", "prefix_cache_queries"),
    ("llmpack:prefix_cache_hits", "Prompt tokens found in the prefix cache.", "prefix_cache_hits"),
    ("llmpack:num_preemptions", "Requests preempted to free KV cache.", "num_preemptions"),
    ("llmpack:prompt_tokens", "Prompt tokens processed.", "prompt_tokens_total"),
    ("llmpack:generation_tokens", "Tokens generated.", "generation_tokens_total"),
]
# (metric, help, EngineStats attribute): the engine's own histograms (runtime/engine/latency.py)
_HISTOGRAMS = [
    ("llmpack:inter_token_gap_seconds", "Time between a sequence's consecutive tokens inside the engine, "
     "whoever else's prompt was being read meanwhile: what a streaming user feels, less HTTP.", "token_gap_seconds"),
    ("llmpack:step_seconds", "Time of one engine step, scheduling to outputs; every decoding sequence waits for it.",
     "step_seconds"),
]
_SCHEDULER_GAUGES = [
    ("llmpack:step_target_seconds", "The time a step aims at while anyone decodes (--target-gap-ms; 0: off): "
     "other prompts are read in pieces that fit beside the decode rows.", "target_gap_s"),
    ("llmpack:prompt_tokens_per_second", "The prompt speed the scheduler measured on this computer; it sizes "
     "a step's prompt tokens to the step's aim.", "prompt_tok_s"),
]


class _EngineCollector:
    def __init__(self, state: ServerState) -> None:
        self.state = state

    def describe(self):  # nothing to check for clashes at registration (names are fixed)
        return []

    def collect(self):
        model = self.state.model
        if model is None:
            return
        try:
            s = model.engine.stats()
        except Exception:  # noqa: BLE001 - a scrape during shutdown just reports nothing
            return
        name = [model.model_id]
        for metric, doc, attr in _GAUGES:
            g = GaugeMetricFamily(metric, doc, labels=LABEL)
            g.add_metric(name, float(getattr(s, attr, 0) or 0))
            yield g
        total = getattr(s, "kv_blocks_total", 0) or 0
        g = GaugeMetricFamily("llmpack:kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent.", labels=LABEL)
        g.add_metric(name, (getattr(s, "kv_blocks_used", 0) or 0) / total if total else 0.0)
        yield g
        for metric, doc, attr in _COUNTERS:
            c = CounterMetricFamily(metric, doc, labels=LABEL)
            c.add_metric(name, float(getattr(s, attr, 0) or 0))
            yield c
        for metric, doc, attr in _SCHEDULER_GAUGES:
            g = GaugeMetricFamily(metric, doc, labels=LABEL)
            g.add_metric(name, float(getattr(s, attr, 0) or 0))
            yield g
        for metric, doc, attr in _HISTOGRAMS:
            snap = getattr(s, attr, None)
            if snap is not None:
                h = HistogramMetricFamily(metric, doc, labels=LABEL)
                h.add_metric(name, [(le, float(n)) for le, n in snap.cumulative()], sum_value=snap.total)
                yield h


class Metrics:
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.registry = CollectorRegistry()
        r = self.registry
        self.success = Counter("llmpack:request_success", "Finished requests by finish reason.",
                               LABEL + ["finished_reason"], registry=r)
        self.ttft = Histogram("llmpack:time_to_first_token_seconds", "Time to first token.",
                              LABEL, buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("llmpack:inter_token_latency_seconds", "Time between output tokens.",
                             LABEL, buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("llmpack:e2e_request_latency_seconds", "Request latency, arrival to last token.",
                             LABEL, buckets=E2E_BUCKETS, registry=r)
        self.constrained = Counter("llmpack:constrained_requests", "Requests whose output a grammar constrains, "
                                   "by kind (json_object, json_schema, grammar, tools).", LABEL + ["kind"], registry=r)
        self.embedding_requests = Counter("llmpack:embedding_requests", "Requests to /v1/embeddings.", LABEL,
                                          registry=r)
        self.embedding_inputs = Counter("llmpack:embedding_inputs", "Texts embedded.", LABEL, registry=r)
        r.register(_EngineCollector(state))

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def timer(self, model_name: str) -> RequestTimer:
        return RequestTimer(self, model_name)


class RequestTimer:
    """Observes one request's TTFT, inter-token latencies, e2e latency and finish reason."""

    def __init__(self, metrics: Metrics, model_name: str) -> None:
        self.m, self.name = metrics, model_name
        self.start = self.last = time.perf_counter()
        self.first = True
        self.done = False

    def tokens(self, n_new: int) -> None:
        if n_new <= 0:
            return
        now = time.perf_counter()
        if self.first:
            self.m.ttft.labels(self.name).observe(now - self.start)
            self.first = False
        else:   # one engine step gives each running sample one token
            self.m.itl.labels(self.name).observe(now - self.last)
        self.last = now

    def finish(self, reason: str | None) -> None:
        if self.done:
            return
        self.done = True
        self.m.e2e.labels(self.name).observe(time.perf_counter() - self.start)
        self.m.success.labels(self.name, reason or "abort").inc()

"""A closed loop of `concurrency` clients working through a workload, and what it measured.

Each client thread takes the next request as soon as its previous one ends, as
`vllm bench serve --max-concurrency` does; aggregate tok/s is all output tokens over the
wall time from the first request sent to the last one finished."""
from __future__ import annotations

import math
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable

from llmpack.bench.client import Endpoint, RequestResult, stream_request
from llmpack.bench.workloads import Workload

if TYPE_CHECKING:
    from llmpack.runtime.engine.trace_summary import TraceSummary


@dataclass(slots=True)
class Percentiles:
    mean: float
    p50: float
    p99: float

    @classmethod
    def of(cls, values: list[float]) -> "Percentiles | None":
        if not values:
            return None
        return cls(sum(values) / len(values), percentile(values, 50), percentile(values, 99))


@dataclass(slots=True)
class RunStats:
    workload: str
    description: str
    concurrency: int
    requests: int
    errors: int
    duration_s: float
    output_tokens: int
    output_tok_s: float
    requests_per_s: float
    prompt_tokens_mean: float | None
    ttft_s: Percentiles | None
    tpot_s: Percentiles | None
    itl_s: Percentiles | None
    e2e_s: Percentiles | None
    first_errors: list[str]
    trace: "TraceSummary | None" = None   # the server's step trace over this run (`llmpack bench --trace`)

    def to_dict(self) -> dict:
        return asdict(self)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def run(ep: Endpoint, workload: Workload, concurrency: int,
        on_done: Callable[[RequestResult], None] | None = None) -> RunStats:
    todo = list(enumerate(workload.requests))
    results: list[RequestResult | None] = [None] * len(todo)
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i, (path, body) = todo.pop(0)
            results[i] = res = stream_request(ep, path, body)
            if on_done is not None:
                on_done(res)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(max(1, min(concurrency, len(todo))))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summarize(workload, concurrency, [r for r in results if r is not None], time.perf_counter() - t0)


def summarize(workload: Workload, concurrency: int, results: list[RequestResult], duration: float) -> RunStats:
    ok = [r for r in results if r.ok]
    out = sum(r.output_tokens for r in ok)
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens]
    return RunStats(
        workload=workload.name, description=workload.description, concurrency=concurrency,
        requests=len(results), errors=len(results) - len(ok), duration_s=duration, output_tokens=out,
        output_tok_s=out / duration if duration > 0 else 0.0, requests_per_s=len(ok) / duration if duration > 0 else 0.0,
        prompt_tokens_mean=sum(prompts) / len(prompts) if prompts else None,
        ttft_s=Percentiles.of([r.ttft for r in ok if r.ttft is not None]),
        tpot_s=Percentiles.of([t for r in ok if (t := r.tpot) is not None]),
        itl_s=Percentiles.of([x for r in ok for x in r.itl]),
        e2e_s=Percentiles.of([r.e2e for r in ok]),
        first_errors=list(dict.fromkeys(r.error for r in results if r.error))[:3])

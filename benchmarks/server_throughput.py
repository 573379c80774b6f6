"""Streamed tokens/s over HTTP vs the engine benchmark's bare loop, in the same run.

Starts `llmpack run` on the demo model, then for 1, 16 and 32 concurrent clients each
streams a 64-token completion from /v1/completions (ignore_eos, so every client gets
exactly 64 tokens). Prints aggregate tokens/s, its ratio to the bare llama_decode loop
measured in this run, and time to first token p50/p99 as seen by the clients.
Targets: >= 100 tok/s at 16 clients (>= 0.95 x bare loop), TTFT p50 <= 0.5 s.

    ./dev bench server_throughput [--repeat 3]
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).parent))
from engine_throughput import MAX_SEQS, N_CTX, bench_args, bare_loop, prompts_for  # noqa: E402
from servers import start_llmpack  # noqa: E402

from llmpack.demo_models import demo_model_path  # noqa: E402
from llmpack.runtime.engine.config import EngineConfig
from llmpack.runtime.engine.model_runner import ModelRunner  # noqa: E402


def one_client(url: str, model: str, i: int, tokens: int, out: list) -> None:
    t0 = time.perf_counter()
    ttft = None
    n = 0
    body = {"model": model, "prompt": f"Request {i}: write a short paragraph about the number {i} and why it matters.",
            "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    with requests.post(url + "/v1/completions", json=body, stream=True, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text") and ttft is None:
                ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
    out.append((ttft, n))


def run_clients(url: str, model: str, clients: int, tokens: int) -> tuple[float, list[float]]:
    results: list = []
    threads = [threading.Thread(target=one_client, args=(url, model, i, tokens, results)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    assert all(n == tokens for _, n in results), results
    return clients * tokens / elapsed, [t for t, _ in results]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    args, sizes = bench_args("clients", "1,16,32")
    model = str(demo_model_path("gemma"))
    print(f"{os.cpu_count()} cores; demo model; {args.tokens}-token streamed completions; median of {args.repeat}")

    runner = ModelRunner(EngineConfig(model_path=model, n_ctx=N_CTX, max_num_seqs=MAX_SEQS))
    bare_loop(runner, prompts_for(runner.tokenize, 1), 8)
    bare = {n: statistics.median(bare_loop(runner, prompts_for(runner.tokenize, n), args.tokens)
                                 for _ in range(args.repeat)) for n in sizes}
    runner.close()

    proc, url = start_llmpack(Path(model), ctx=N_CTX, parallel=MAX_SEQS)
    try:
        model_id = requests.get(url + "/v1/models", timeout=5).json()["data"][0]["id"]
        run_clients(url, model_id, 1, 8)   # warm-up
        print(f"{'clients':>7} | {'bare tok/s':>10} | {'HTTP tok/s':>10} {'ratio':>6} | {'TTFT p50':>8} {'TTFT p99':>8}")
        for n in sizes:
            rates, ttfts = [], []
            for _ in range(args.repeat):
                rate, t = run_clients(url, model_id, n, args.tokens)
                rates.append(rate)
                ttfts += t
            r = statistics.median(rates)
            print(f"{n:>7} | {bare[n]:>10.1f} | {r:>10.1f} {r / bare[n]:>6.2f} | {pct(ttfts, .5):>7.2f}s {pct(ttfts, .99):>7.2f}s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()

"""Scaling out, as ratios measured in one run on the demo model (docs/BENCHMARKS.md, "Scaling out").

1. replicas: Ray Serve with 2 replicas x 1 llama.cpp thread against 1 replica x 1 thread, both on
   a local Ray of 2 CPUs: 16 concurrent clients on each (the issue's comparison), and 32 on the two
   replicas (16 each, the batch the single replica decodes). Target >= 1.7x the tokens/s: the
   replicas really decode in parallel. One thread decodes a batch of 16 more cheaply per token than
   a batch of 8, so the first ratio is capped near 1.5 by batching alone; the second is the one
   that isolates parallelism. The requests are NOT streamed: a stream costs Ray's HTTP proxy and
   the ingress a message per token, which on a 2-core machine takes CPU the replicas' two threads
   need; one response per request leaves only the replicas' own work (--streamed measures through
   streams instead, and says so).
2. routing: the same 2 replicas with prefix-affinity routing (runtime/scale/router.py) against
   Ray's power-of-two choices. 3 rounds of: one chat with a new ~1500-word system prompt (a
   service that has read it once), 8 short unrelated requests (other users), then 16 streamed
   chats with that prompt at once. TTFT p50 over
   all rounds' chats, and how many chats each replica served per round. Each router gets fresh
   replicas. Target: affinity lower.
3. rpc: the engine's tokens/s with every layer on two local `llmpack rpc-worker`s against the
   same model in one process (reported, not a target: RPC is for models that do not fit).

    ./dev bench scale [--part replicas,routing,rpc] [--streams 16] [--tokens 64] [--streamed]

The whole run is bounded (--budget-s, 600 s by default): past it, it says which part was running
and exits 3.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from llmpack.bench.client import Endpoint
from llmpack.bench.runner import RunStats, percentile, run
from llmpack.bench.workloads import make
from llmpack.demo_models import demo_model_path
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.llm import LLM, collect
from llmpack.runtime.model.source import ModelFile

N_CTX = 8192


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def deployed(model: str, replicas: int, router: str, slots: int, port: int) -> Iterator[Endpoint]:
    """Deploy, warm every replica, yield its endpoint, delete: each configuration starts from empty caches."""
    from ray import serve

    from llmpack.ray_server import SERVED
    from llmpack.runtime.scale import launch
    from llmpack.runtime.server.config import ServeConfig

    config = ServeConfig(ctx=N_CTX, parallel=slots, threads=1, open_browser=False)
    settings = launch.RaySettings(replicas=replicas, threads=1, port=port, router=router)
    url = launch.start(ModelFile(Path(model)), config, settings, SERVED, max_ongoing=slots)
    try:
        ep = Endpoint(url)
        ep.resolve_model()
        run(ep, make("random", 2 * replicas, input_len=8, output_len=4, seed=99), 2 * replicas)   # warm-up
        yield ep
    finally:
        serve.delete(launch.APP_NAME)


def measured(ep: Endpoint, workload, streams: int, streamed: bool = True,
             ttfts: list[float] | None = None) -> tuple[RunStats, dict[str, int]]:
    """One run's statistics and how many requests each replica finished during it (and each
    request's TTFT added to `ttfts`)."""
    before = replica_requests()
    keep = None if ttfts is None else (lambda res: ttfts.append(res.ttft) if res.ttft is not None else None)
    stats = run(ep, workload, streams, on_done=keep) if streamed else run_plain(ep, workload, streams)
    after = replica_requests()
    return stats, {r: after[r] - before.get(r, 0) for r in after}


def replica_requests() -> dict[str, int]:
    """Each running replica's finished requests, from its engine (asked of its Ray actor directly)."""
    import ray

    from llmpack.runtime.scale import launch

    prefix = f"SERVE_REPLICA::{launch.APP_NAME}#replica#"
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)]
    return {n.removeprefix(prefix): ray.get(ray.get_actor(n, namespace="serve").record_routing_stats.remote(),
                                           timeout=60).get("requests_finished", 0) for n in names}


def run_plain(ep: Endpoint, workload, concurrency: int) -> RunStats:
    """`concurrency` clients sending the workload without streaming: completion tokens per second."""
    todo, lock, tokens, errors = list(workload.requests), threading.Lock(), [0], []

    def client() -> None:
        conn = ep.connection()
        while True:
            with lock:
                if not todo:
                    return
                path, body = todo.pop(0)
            try:
                plain = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
                conn.request("POST", ep.prefix + path, json.dumps({"model": ep.model, **plain}), ep.headers())
                resp = conn.getresponse()
                data = json.loads(resp.read())
                with lock:
                    if resp.status == 200:
                        tokens[0] += data["usage"]["completion_tokens"]
                    else:
                        errors.append(f"HTTP {resp.status}: {str(data)[:200]}")
            except (OSError, http.client.HTTPException, ValueError) as exc:
                errors.append(exc)
                conn = ep.connection()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for _ in range(concurrency):
            pool.submit(client)
    took = time.perf_counter() - t0
    n = len(workload.requests)
    return RunStats(workload=workload.name, description=workload.description, concurrency=concurrency,
                    requests=n, errors=len(errors), duration_s=took, output_tokens=tokens[0],
                    output_tok_s=tokens[0] / took, requests_per_s=(n - len(errors)) / took, prompt_tokens_mean=None,
                    ttft_s=None, tpot_s=None, itl_s=None, e2e_s=None, first_errors=[str(e) for e in errors[:3]])


def part_replicas(model: str, args) -> None:
    """The issue's comparison (16 streams over 2 replicas against 16 on 1), and the same load per
    replica (32 streams over 2, so each replica batches 16 as the single one does): one thread decodes
    a batch of 16 more cheaply per token than a batch of 8, so the first ratio is capped below 2 by
    batching (engine: docs/BENCHMARKS.md), while the second shows whether the replicas run in parallel."""
    n = args.streams
    with deployed(model, 1, "prefix", n, args.port) as ep:
        one, _ = measured(ep, make("random", 2 * n, input_len=32, output_len=args.tokens), n, args.streamed)
    with deployed(model, 2, "prefix", n, args.port) as ep:
        two, split = measured(ep, make("random", 2 * n, input_len=32, output_len=args.tokens, seed=1), n, args.streamed)
        both, split2 = measured(ep, make("random", 4 * n, input_len=32, output_len=args.tokens, seed=2), 2 * n,
                                args.streamed)
    if not (one.output_tokens and two.output_tokens and both.output_tokens):
        raise SystemExit(f"replicas: no tokens came back ({one.first_errors + two.first_errors + both.first_errors})")
    how = "streamed" if args.streamed else "not streamed (one response each)"
    print(f"replicas ({how}, {args.tokens}-token replies): 1 x 1 thread, {n} streams {one.output_tok_s:.1f} tok/s; "
          f"2 x 1 thread, {n} streams {two.output_tok_s:.1f} tok/s (requests per replica {sorted(split.values())}), "
          f"ratio {two.output_tok_s / one.output_tok_s:.2f}; 2 x 1 thread, {2 * n} streams ({n} per replica) "
          f"{both.output_tok_s:.1f} tok/s ({sorted(split2.values())}), ratio {both.output_tok_s / one.output_tok_s:.2f} "
          f"(target >= 1.7); errors {one.errors + two.errors + both.errors}; load average {os.getloadavg()[0]:.1f}",
          flush=True)


def part_routing(model: str, args) -> None:
    """Rounds of: one earlier chat with a new system prompt (a service that has read it once), then
    16 chats with that prompt at once; TTFT p50 over every round's chats. A new prompt each round,
    so each router meets prompts it has not seen, and a round's luck weighs less."""
    res = {}
    for router in ("pow2", "prefix"):
        ttfts, splits, tok_s = [], [], []
        with deployed(model, 2, router, args.streams, args.port) as ep:
            for r in range(args.rounds):
                chats = make("chat", args.streams + 1, system_len=args.system_len, output_len=args.tokens, seed=100 + r)
                run(ep, type(chats)("chat", "one earlier chat", chats.requests[:1]), 1)
                # other users' short requests reach both replicas meanwhile, as in a running service: without
                # them, Ray's queue-length cache holds a fresh entry only for the replica that served the
                # earlier chat, and power-of-two sends the burst there first, by accident affine
                run(ep, make("random", 8, input_len=8, output_len=2, seed=200 + r), 8)
                stats, split = measured(ep, type(chats)(chats.name, chats.description, chats.requests[1:]),
                                        args.streams, ttfts=ttfts)
                splits.append(sorted(split.values()))
                tok_s.append(stats.output_tok_s)
        res[router] = ([percentile(ttfts, q) if ttfts else float("nan") for q in (50, 90)], splits,
                       sum(tok_s) / len(tok_s))
    ((p2, q2), s2, t2), ((pa, qa), sa, ta) = res["pow2"], res["prefix"]
    print(f"routing: {args.rounds} rounds of {args.streams} chats sharing a new ~{args.system_len}-word system prompt, "
          f"2 replicas: TTFT p50 power-of-two {p2:.2f} s (chats per replica {s2}), prefix affinity {pa:.2f} s ({sa}), "
          f"ratio {pa / p2:.2f} (target < 1); TTFT p90 {q2:.2f} s vs {qa:.2f} s; tok/s {t2:.1f} vs {ta:.1f}; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)


def part_rpc(model: str, args) -> None:
    ports = [free_port(), free_port()]
    code = "from llmpack.runtime.hardware.rpc_worker import serve_worker; serve_worker(port={}, threads=1)"
    workers = [subprocess.Popen([sys.executable, "-c", code.format(p)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for p in ports]
    try:
        for p in ports:
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", p), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        local = tok_s(LLM(model, n_ctx=2048, gpu_layers=0, n_threads=1), args)
        remote = tok_s(LLM(model, n_ctx=2048, rpc=tuple(f"127.0.0.1:{p}" for p in ports), n_threads=1), args)
        print(f"rpc: one process (1 thread) {local:.1f} tok/s, every layer on two local workers (1 thread each) "
              f"{remote:.1f} tok/s, ratio {remote / local:.2f} (not a target)")
    finally:
        for w in workers:
            w.kill()


def tok_s(llm: LLM, args) -> float:
    params = SamplingParams(max_tokens=args.tokens, temperature=0, ignore_eos=True)
    try:
        collect(llm.engine.add_request("Warm up.", SamplingParams(max_tokens=4)))
        t0 = time.perf_counter()
        streams = [llm.engine.add_request(f"Story {i}: once upon a time", params) for i in range(args.rpc_streams)]
        n = sum(len(collect(s).outputs[0].token_ids) for s in streams)
        return n / (time.perf_counter() - t0)
    finally:
        llm.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", default="replicas,routing,rpc")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--rpc-streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--system-len", type=int, default=1500, help="words in the shared system prompt")
    ap.add_argument("--rounds", type=int, default=3, help="routing: bursts of chats, each with a new system prompt")
    ap.add_argument("--port", type=int, default=free_port())
    ap.add_argument("--streamed", action="store_true", help="replicas part: streamed requests (Ray's proxy per chunk)")
    ap.add_argument("--budget-s", type=float, default=600, help="the whole run's bound, in seconds")
    args = ap.parse_args()
    started, running = time.monotonic(), ["setting up"]

    def watchdog() -> None:
        while time.monotonic() - started < args.budget_s:
            time.sleep(1)
        print(f"scale bench: over its {args.budget_s:.0f} s bound during {running[0]}; stopping", flush=True)
        os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    model = str(demo_model_path("gemma"))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; load average "
          f"{os.getloadavg()[0]:.1f}; model {os.path.basename(model)}")
    parts = args.part.split(",")
    if {"replicas", "routing"} & set(parts):
        from llmpack.runtime.scale import launch

        # the Ray `serve --ray` starts (on 127.0.0.1, llmpack's token), with 2 CPUs whatever the machine has
        launch.connect(launch.RaySettings(init_kwargs={"num_cpus": 2}))
    try:
        for part in parts:
            running[0] = part
            {"replicas": part_replicas, "routing": part_routing, "rpc": part_rpc}[part](model, args)
    finally:
        if {"replicas", "routing"} & set(parts):
            launch.stop(local=True)


if __name__ == "__main__":
    main()

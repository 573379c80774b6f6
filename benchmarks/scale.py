"""Scaling out, as ratios measured in one run on the demo model (docs/BENCHMARKS.md, "Scaling out").

1. replicas: Ray Serve with 2 replicas x 1 llama.cpp thread against 1 replica x 1 thread, both on
   a local Ray of 2 CPUs, 16 concurrent streams of the random workload (`llmpack bench`'s client).
   Target >= 1.7x the tokens/s: the replicas really decode in parallel.
2. routing: the same 2 replicas with prefix-affinity routing (runtime/scale/router.py) against
   Ray's power-of-two choices, 16 chats sharing a long system prompt, arriving at once after one
   earlier chat with that prompt: TTFT p50 of each. Each router gets fresh replicas. Target:
   affinity lower.
3. rpc: the engine's tokens/s with every layer on two local `llmpack rpc-worker`s against the
   same model in one process (reported, not a target: RPC is for models that do not fit).

    ./dev bench scale [--part replicas,routing,rpc] [--streams 16] [--tokens 64]
"""
from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

from llmpack.bench.client import Endpoint
from llmpack.bench.runner import RunStats, run
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


def ray_run(model: str, replicas: int, router: str, workload, streams: int, port: int, warm=None) -> RunStats:
    """Deploy, warm every replica, measure, delete: each configuration starts from empty caches.
    `warm`: requests sent one by one before the measurement (a service that has been running)."""
    from ray import serve

    from llmpack.runtime.scale import launch
    from llmpack.runtime.server.config import ServeConfig

    config = ServeConfig(ctx=N_CTX, parallel=streams, threads=1, open_browser=False)
    settings = launch.RaySettings(replicas=replicas, threads=1, port=port, router=router)
    url = launch.start(ModelFile(Path(model)), config, settings, max_ongoing=streams)
    try:
        ep = Endpoint(url)
        ep.resolve_model()
        run(ep, make("random", 2 * replicas, input_len=8, output_len=4, seed=99), 2 * replicas)   # warm-up
        if warm is not None:
            run(ep, warm, 1)
        return run(ep, workload, streams)
    finally:
        serve.delete(launch.APP_NAME)


def part_replicas(model: str, args) -> None:
    work = make("random", args.streams * 2, input_len=32, output_len=args.tokens)
    one = ray_run(model, 1, "prefix", work, args.streams, args.port)
    two = ray_run(model, 2, "prefix", work, args.streams, args.port)
    print(f"replicas: 1 x 1 thread {one.output_tok_s:.1f} tok/s, 2 x 1 thread {two.output_tok_s:.1f} tok/s, "
          f"ratio {two.output_tok_s / one.output_tok_s:.2f} (target >= 1.7); errors {one.errors + two.errors}")


def part_routing(model: str, args) -> None:
    # the shared system prompt has been read once already (one earlier chat), as in a running service;
    # then 16 chats arrive at once: who sends them where the prompt is cached decides their TTFT
    chats = make("chat", args.streams + 1, system_len=args.system_len, output_len=args.tokens)
    earlier, work = type(chats)("chat", "one earlier chat", chats.requests[:1]), \
        type(chats)(chats.name, chats.description, chats.requests[1:])
    res = {name: ray_run(model, 2, name, work, args.streams, args.port, warm=earlier) for name in ("pow2", "prefix")}
    p50 = {k: v.ttft_s.p50 if v.ttft_s else float("nan") for k, v in res.items()}
    print(f"routing: {args.streams} chats sharing a ~{args.system_len}-word system prompt, 2 replicas: TTFT p50 "
          f"power-of-two {p50['pow2']:.2f} s, prefix affinity {p50['prefix']:.2f} s, ratio "
          f"{p50['prefix'] / p50['pow2']:.2f}; tok/s {res['pow2'].output_tok_s:.1f} vs {res['prefix'].output_tok_s:.1f}")


def part_rpc(model: str, args) -> None:
    ports = [free_port(), free_port()]
    code = "from llmpack.runtime.hardware.rpc import serve_worker; serve_worker(port={}, threads=1)"
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
    ap.add_argument("--port", type=int, default=free_port())
    args = ap.parse_args()
    model = str(demo_model_path("gemma"))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; load average "
          f"{os.getloadavg()[0]:.1f}; model {os.path.basename(model)}")
    parts = args.part.split(",")
    if {"replicas", "routing"} & set(parts):
        from llmpack.runtime.scale import launch

        launch.import_ray().init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        for part in parts:
            {"replicas": part_replicas, "routing": part_routing, "rpc": part_rpc}[part](model, args)
    finally:
        if {"replicas", "routing"} & set(parts):
            launch.stop()


if __name__ == "__main__":
    main()

"""Where an engine step's time goes, next to the bare llama_decode loop, in one run (issue 30).

For each level (default 1, 16, 32 streams of 64 greedy tokens on the demo model) the bare loop of
engine_throughput.py runs first, then the engine with a step trace (EngineConfig.trace_steps);
the trace summary splits the engine's wall time into llama_decode, the rest of each step
(schedule, build, sample, emit) and the time between steps.

    ./dev bench trace_steps [--streams 1,16,32] [--tokens 64] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from engine_throughput import MAX_SEQS, N_CTX, bare_loop, prompts_for  # noqa: E402

from llmpack.demo_models import demo_model_path  # noqa: E402
from llmpack.runtime.engine.engine import EngineConfig, LLMEngine  # noqa: E402
from llmpack.runtime.engine.model_runner import ModelRunner  # noqa: E402
from llmpack.runtime.engine.sampling_params import SamplingParams  # noqa: E402
from llmpack.runtime.engine.trace_summary import summarize  # noqa: E402
from llmpack.runtime.llm import collect  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="1,16,32")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--keep", type=Path, default=None, help="keep the trace files in this folder")
    args = ap.parse_args()
    levels = [int(x) for x in args.streams.split(",")]
    model = str(demo_model_path("gemma"))
    folder = args.keep or Path(tempfile.mkdtemp(prefix="llmpack-trace-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{os.cpu_count()} cores, load average {load()} before; {model}; {args.tokens}-token greedy streams")
    runner = ModelRunner(EngineConfig(model_path=model, n_ctx=N_CTX, max_num_seqs=MAX_SEQS))
    prompts = {n: prompts_for(runner.tokenize, n) for n in levels}
    bare_loop(runner, prompts[1], 8)
    bare = {n: bare_loop(runner, prompts[n], args.tokens) for n in levels}
    runner.close()
    params = SamplingParams(temperature=0, max_tokens=args.tokens, ignore_eos=True)
    for n in levels:
        path = folder / f"steps-{n}.jsonl"
        engine = LLMEngine(EngineConfig(model_path=model, n_ctx=N_CTX, max_num_seqs=MAX_SEQS, gpu_layers=0,
                                        enable_prefix_cache=False, trace_steps=str(path)))
        try:
            collect(engine.add_request(prompts[1][0], SamplingParams(temperature=0, max_tokens=4)))   # warm-up
            first = engine.steps + 1
            t0 = time.perf_counter()
            streams = [engine.add_request(p, params) for p in prompts[n]]
            for s in streams:
                collect(s)
            rate = n * args.tokens / (time.perf_counter() - t0)
        finally:
            engine.shutdown()
        summary = summarize(path.read_text().splitlines(), from_step=first)
        print(f"\n{n} streams: engine {rate:.1f} tok/s, bare loop {bare[n]:.1f} tok/s, ratio {rate / bare[n]:.2f}")
        print("  " + "\n  ".join(summary.lines()))
    print(f"\nload average {load()} after; traces in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

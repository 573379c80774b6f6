"""Engine throughput vs a bare llama_decode loop, in the same run, on the demo model.

For 1, 4, 16 and 32 concurrent 64-token generations, the bare loop feeds the same
batches (one prefill batch, then one decode row per sequence per step) straight to
llama_decode and takes the argmax; the engine gets the same prompts as requests, greedy
and with temperature 0.8 / top_p 0.95. Each figure is the median of --repeat runs, and
the ratio engine / bare is what the target is about (>= 0.95 at 16 sequences).
Also prints KV waste (allocated block slots not holding a token) with 32 mixed-length
sequences running.

    ./dev bench engine_throughput [--repeat 3] [--tokens 64]
"""
from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

from llmpack.demo_models import demo_model_path
from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.llm import collect
from llmpack.runtime.engine.llama_batch import BatchPlan
from llmpack.runtime.engine.model_runner import ModelRunner
from llmpack.runtime.engine.sampling_params import SamplingParams

N_CTX = 8192
MAX_SEQS = 32


def prompts_for(runner_tokenize, n: int) -> list[list[int]]:
    return [runner_tokenize(f"Request {i}: write a short paragraph about the number {i} and why it matters.")
            for i in range(n)]


def bare_loop(runner: ModelRunner, prompts: list[list[int]], tokens: int) -> float:
    """Aggregate tokens/s of prefill + `tokens` greedy steps for all prompts, no engine."""
    for s in range(len(prompts)):
        runner.seq_rm(s, -1, -1)
    t0 = time.perf_counter()
    nxt = []
    toks, pos, seqs, want, last = [], [], [], [], []
    for s, p in enumerate(prompts):       # prefill in batches of whole prompts, <= n_batch tokens
        if len(toks) + len(p) > runner.n_batch:
            runner.decode(BatchPlan(toks, pos, seqs, want, []))
            nxt += [int(runner.logits_row(i).argmax()) for i in last]
            toks, pos, seqs, want, last = [], [], [], [], []
        toks += p
        pos += range(len(p))
        seqs += [s] * len(p)
        want += [False] * (len(p) - 1) + [True]
        last.append(len(toks) - 1)
    runner.decode(BatchPlan(toks, pos, seqs, want, []))
    nxt += [int(runner.logits_row(i).argmax()) for i in last]
    cur = [len(p) for p in prompts]
    for _ in range(tokens - 1):
        runner.decode(BatchPlan(nxt, cur, list(range(len(prompts))), [True] * len(prompts), []))
        nxt = [int(runner.logits_row(i).argmax()) for i in range(len(prompts))]
        cur = [c + 1 for c in cur]
    elapsed = time.perf_counter() - t0
    for s in range(len(prompts)):
        runner.seq_rm(s, -1, -1)
    return len(prompts) * tokens / elapsed


def engine_run(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams) -> float:
    t0 = time.perf_counter()
    streams = [engine.add_request(p, params) for p in prompts]
    outs = [collect(s) for s in streams]
    elapsed = time.perf_counter() - t0
    assert all(len(o.outputs[0].token_ids) == params.max_tokens for o in outs)
    return len(prompts) * params.max_tokens / elapsed


def kv_waste(model: str, prompt_tokens: tuple[int, int], output_tokens: tuple[int, int]) -> float:
    """Run 32 requests with prompt and output lengths drawn uniformly from the given ranges
    and return the median waste (allocated block slots not holding a token) after each step
    in which all 32 are running. With 16-token blocks, expect about 7.5 / (mean length).
    The engine is stepped from this thread so every sample sees a settled step."""
    engine = LLMEngine(EngineConfig(model_path=model, n_ctx=32768, max_num_seqs=32, gpu_layers=0),
                       background=False)      # stepped from this thread
    rng = random.Random(0)
    vocab = engine.tokenize(" the quick brown fox jumps over a lazy dog while rain falls on old roofs", False)
    for _ in range(32):
        prompt = [rng.choice(vocab) for _ in range(rng.randint(*prompt_tokens))]
        engine.add_request(prompt, SamplingParams(temperature=0, ignore_eos=True,
                                                  max_tokens=rng.randint(*output_tokens)))
    samples: list[float] = []
    bs = engine.bm.block_size
    engine.step()
    while engine.scheduler.has_work():
        engine.step()
        running = engine.scheduler.running
        if len(running) == 32:
            blocks = {b for s in running for b in s.block_table}
            held = sum(s.num_computed_tokens for s in running)
            samples.append(1 - held / (len(blocks) * bs))
    engine.shutdown()
    return statistics.median(samples) if samples else float("nan")


def bench_args(counts_flag: str, default: str) -> tuple[argparse.Namespace, list[int]]:
    """--repeat, --tokens and a comma-separated list of concurrency levels (shared with
    server_throughput.py, which compares against this benchmark's bare loop)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument(f"--{counts_flag}", default=default)
    args = ap.parse_args()
    return args, [int(x) for x in getattr(args, counts_flag).split(",")]


def main() -> None:
    args, sizes = bench_args("sizes", "1,4,16,32")
    model = str(demo_model_path("gemma"))
    print(f"machine: {platform.processor() or platform.machine()}, {__import__('os').cpu_count()} cores; "
          f"model: {model}; n_ctx {N_CTX}; {args.tokens}-token generations; median of {args.repeat}")

    runner = ModelRunner(EngineConfig(model_path=model, n_ctx=N_CTX, max_num_seqs=MAX_SEQS))
    bare = {n: [] for n in sizes}
    prompts = {n: prompts_for(runner.tokenize, n) for n in sizes}
    bare_loop(runner, prompts[1], 8)   # warm-up
    for n in sizes:
        for _ in range(args.repeat):
            bare[n].append(bare_loop(runner, prompts[n], args.tokens))
    runner.close()

    engine = LLMEngine(EngineConfig(model_path=model, n_ctx=N_CTX, max_num_seqs=MAX_SEQS, gpu_layers=0,
                                    enable_prefix_cache=False))
    greedy = SamplingParams(temperature=0, max_tokens=args.tokens, ignore_eos=True)
    sampled = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=args.tokens, ignore_eos=True, seed=1)
    engine_run(engine, prompts[1], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))  # warm-up
    print(f"{'seqs':>4} | {'bare tok/s':>10} | {'greedy tok/s':>12} {'ratio':>6} | {'t0.8/p0.95 tok/s':>16} {'ratio':>6}")
    for n in sizes:
        g = statistics.median(engine_run(engine, prompts[n], greedy) for _ in range(args.repeat))
        s = statistics.median(engine_run(engine, prompts[n], sampled) for _ in range(args.repeat))
        b = statistics.median(bare[n])
        print(f"{n:>4} | {b:>10.1f} | {g:>12.1f} {g / b:>6.2f} | {s:>16.1f} {s / b:>6.2f}")
    engine.shutdown()

    for label, prompts_range, outputs_range in (("short prompts 16-256, outputs 32-128", (16, 256), (32, 128)),
                                                ("chat-like prompts 64-1024, outputs 32-256", (64, 1024), (32, 256))):
        waste = kv_waste(model, prompts_range, outputs_range)
        print(f"KV waste, 32 mixed-length sequences running ({label} tokens): {waste * 100:.2f} % of allocated slots")

if __name__ == "__main__":
    main()

"""Speculative decoding (n-gram prompt lookup) on and off, in one run, on the same engine build:
the targets of issue 30.

| workload | target (on / off) |
|---|---|
| 1 stream quoting an attached document | >= 1.5x tok/s |
| 1 stream rewriting a code file with a small edit | >= 1.5x tok/s |
| 1 stream of free chat | >= 0.98x |
| 16 streams of free chat | >= 0.98x |

Greedy throughout, so both sides must produce the same tokens (checked: a difference is printed).
Modes alternate per repetition, so the machine's load hits both alike.

First it prints what a decode step of one sequence costs with 1 to 17 logits rows (one token plus
0-16 draft tokens; on a CPU the cost is a staircase with steps of four rows, which is why `auto`
drafts 3, 7, 11 or 15 tokens): `rows / cost` is the most speculative decoding can gain with every
draft token accepted, so where it stays below 1.5 the 1.5x target cannot be met on this machine.

    ./dev bench speculative [--model gemma|qwen] [--reps 2] [--mode auto|ngram] [--max-tokens 200]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from llmpack.demo_models import demo_model_path
from llmpack.runtime.engine.config import EngineConfig
from llmpack.runtime.engine.llama_batch import BatchPlan
from llmpack.runtime.engine.model_runner import ModelRunner
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.llm import LLM

DOCUMENT = (
    "The Riverside Community Garden opens every Saturday from eight in the morning until noon. "
    "Members may borrow tools from the shed next to the north gate, and must return them clean. "
    "Each plot is three metres by two metres and is assigned for one growing season at a time. "
    "Water from the rain barrels is free; water from the mains tap costs two euros per month. "
    "Compost is collected in the green bins behind the greenhouse, but no meat or dairy is allowed. "
    "The annual harvest fair takes place on the last Sunday of September, with prizes for the "
    "largest pumpkin, the best jam and the most colourful flower bed. New members pay a joining "
    "fee of fifteen euros and are asked to help with two shared work mornings each season.")

CODE = '''def total(prices, discount=0.0):
    """Add up the prices in a basket and apply a discount between 0 and 1."""
    if not 0.0 <= discount <= 1.0:
        raise ValueError("discount must be between 0 and 1")
    subtotal = 0.0
    for price in prices:
        if price < 0:
            raise ValueError("a price cannot be negative")
        subtotal += price
    return round(subtotal * (1.0 - discount), 2)


def receipt(items, discount=0.0):
    lines = [f"{name}: {price:.2f}" for name, price in items]
    lines.append(f"total: {total([p for _, p in items], discount):.2f}")
    return "\\n".join(lines)
'''

TOPICS = ["a lighthouse keeper", "a lost umbrella", "the first day of spring", "a robot learning to paint",
          "a city under snow", "a cat who runs a bakery", "a train that never stops", "an old map",
          "a quiet library", "the last apple tree", "a friendly dragon", "a summer storm",
          "a forgotten song", "a market at dawn", "two rival chess players", "a message in a bottle"]


def chat(user: str, document: str | None = None) -> list[dict]:
    content = f"{document}\n\n{user}" if document else user
    return [{"role": "user", "content": content}]


WORKLOADS = [
    ("quote a document", [chat("Copy the text above exactly, word for word.", DOCUMENT)], 1.5),
    ("rewrite code, small edit", [chat("Rename the function `total` to `basket_total` everywhere and output "
                                       "the whole file.", CODE)], 1.5),
    ("free chat, 1 stream", [chat(f"Write a short story about {TOPICS[0]}.")], 0.98),
    ("free chat, 16 streams", [chat(f"Write a short story about {t}.") for t in TOPICS], 0.98),
]


def row_costs(model, rows=(1, 2, 4, 5, 8, 9, 16, 17), reps: int = 7, context: int = 300) -> dict[int, float]:
    """Median ms of one llama_decode of a sequence `context` tokens long with `rows` new tokens,
    all asking for logits (what a step with rows - 1 draft tokens costs), sizes interleaved."""
    runner = ModelRunner(EngineConfig(model_path=str(model), n_ctx=2048, max_num_seqs=1))
    try:
        prompt = runner.tokenize(DOCUMENT)[:context]
        runner.decode(BatchPlan(prompt, list(range(len(prompt))), [0] * len(prompt),
                                [False] * (len(prompt) - 1) + [True], []))
        times: dict[int, list[float]] = {r: [] for r in rows}
        for _ in range(reps):
            for r in rows:
                n = len(prompt)
                start = time.perf_counter()
                runner.decode(BatchPlan(prompt[:r], list(range(n, n + r)), [0] * r, [True] * r, []))
                runner.logits(r).argmax(axis=1)
                times[r].append((time.perf_counter() - start) * 1000)
                runner.seq_rm(0, n, -1)
        return {r: sorted(t)[len(t) // 2] for r, t in times.items()}
    finally:
        runner.close()


def timed(llm: LLM, convs: list[list[dict]], params: SamplingParams) -> tuple[float, list[list[int]]]:
    start = time.perf_counter()
    outs = llm.chat(convs, params)
    elapsed = time.perf_counter() - start
    return elapsed, [o.outputs[0].token_ids for o in outs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gemma", help="demo model key (gemma, qwen)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--mode", default="auto", choices=("auto", "ngram"))
    ap.add_argument("--max-tokens", type=int, default=200)
    args = ap.parse_args()
    model = demo_model_path(args.model)
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"model {model.name}; speculative {args.mode} vs off; greedy, up to {args.max_tokens} tokens", flush=True)
    costs = row_costs(model)
    print("| logits rows in the step | ms | x one row | most gain with every draft accepted |")
    print("|---:|---:|---:|---:|")
    for r, ms in costs.items():
        print(f"| {r} | {ms:.1f} | {ms / costs[1]:.2f} | {r * costs[1] / ms:.2f}x |", flush=True)
    llms = {mode: LLM(model, n_ctx=8192, max_num_seqs=32, gpu_layers=0, speculative=mode)
            for mode in ("off", args.mode)}
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    for llm in llms.values():           # warm-up: first-use costs are nobody's speed
        llm.chat(chat("Hello!"), SamplingParams(temperature=0, max_tokens=8))
    print("| workload | off tok/s | on tok/s | ratio | target | accepted | same tokens |")
    print("|---|---:|---:|---:|---|---:|---|")
    try:
        for label, convs, target in WORKLOADS:
            best = {mode: float("inf") for mode in llms}
            tokens: dict[str, list[list[int]]] = {}
            before = llms[args.mode].engine.drafter.accepted_total, llms[args.mode].engine.drafter.drafted_total
            for _ in range(args.reps):
                for mode, llm in llms.items():
                    elapsed, tokens[mode] = timed(llm, convs, params)
                    best[mode] = min(best[mode], elapsed)
            n = sum(len(t) for t in tokens["off"])
            rate = {mode: n / best[mode] for mode in llms}
            d = llms[args.mode].engine.drafter
            acc, drafted = d.accepted_total - before[0], d.drafted_total - before[1]
            ratio = rate[args.mode] / rate["off"]
            same = tokens["off"] == tokens[args.mode]
            print(f"| {label} ({n} tokens) | {rate['off']:.1f} | {rate[args.mode]:.1f} | {ratio:.2f} | "
                  f">= {target}x {'met' if ratio >= target else 'MISSED'} | {acc}/{drafted} | "
                  f"{'yes' if same else 'NO'} |", flush=True)
    finally:
        for llm in llms.values():
            llm.close()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What one llama_decode step costs on this machine, by decode rows and prompt-chunk size (issue 48).

The scheduler sizes a step's prompt chunk by time while anyone decodes (runtime/engine/step_sizer.py),
so the model of a step's time it learns has to hold on the steps it will build: a few decode rows
(chatting users, each at its own position) beside a document's chunk of N tokens. This measures
exactly those batches straight through the ModelRunner, no scheduler: for each N, the step with 0
and with `--rows` decode rows, the document chunk at two depths (its start, and 1,024 tokens in,
where attention reads more), the median of --repeat runs; then decode rows alone.

    ./dev bench step_cost [--model qwen|gemma|both] [--rows 4] [--repeat 3] [--sizes 16,32,...]

Run it as the benchmarks do (`LLMPACK_CPU_VARIANT=haswell`, set here if unset), alone on the machine.
Prints one table per model and a least-squares fit step_s = a + b x rows + c x tokens per depth.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from llmpack.bench.workloads import words  # noqa: E402
from llmpack.demo_models import demo_model_path  # noqa: E402
from llmpack.runtime.engine.engine import EngineConfig  # noqa: E402
from llmpack.runtime.engine.llama_batch import BatchPlan  # noqa: E402
from llmpack.runtime.engine.model_runner import ModelRunner  # noqa: E402

CHAT_SEQS = 8          # chatting users' sequence ids 0..7; the document is the last id
CHAT_TOKENS = 150      # each chat's context: its history, where its next token is decoded
DEPTHS = (0, 1024)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(runner: ModelRunner, plan: BatchPlan) -> float:
    t0 = time.perf_counter()
    runner.decode(plan)
    return time.perf_counter() - t0


def step_plan(chats: list[list[int]], rows: int, doc: list[int], depth: int, n: int, doc_seq: int) -> BatchPlan:
    """`rows` decode rows (one per chat, at the end of its context) and n document tokens from `depth`."""
    plan = BatchPlan([], [], [], [], [])
    for s in range(rows):
        plan.tokens.append(chats[s][-1])
        plan.positions.append(len(chats[s]) - 1)
        plan.seq_ids.append(s)
        plan.want_logits.append(True)
    plan.tokens += doc[depth:depth + n]
    plan.positions += range(depth, depth + n)
    plan.seq_ids += [doc_seq] * n
    plan.want_logits += [False] * n
    plan.n_outputs = rows
    return plan


def measure(runner: ModelRunner, chats: list[list[int]], doc: list[int], rows: int, depth: int, n: int,
            repeat: int, doc_seq: int) -> float:
    """Median seconds of the step; the KV it wrote is taken out again after each run."""
    times = []
    for _ in range(repeat):
        times.append(timed(runner, step_plan(chats, rows, doc, depth, n, doc_seq)))
        for s in range(rows):
            runner.seq_rm(s, len(chats[s]) - 1, -1)
        runner.seq_rm(doc_seq, depth, -1)
    return statistics.median(times)


def prefill(runner: ModelRunner, seq: int, tokens: list[int]) -> None:
    for i in range(0, len(tokens), 512):
        part = tokens[i:i + 512]
        runner.decode(BatchPlan(part, list(range(i, i + len(part))), [seq] * len(part), [False] * len(part), []))


def fit(samples: list[tuple[int, int, float]]) -> tuple[float, float, float]:
    """Least squares step_s = a + b x rows + c x tokens."""
    x = np.array([[1.0, r, n] for r, n, _ in samples])
    y = np.array([s for _, _, s in samples])
    a, b, c = np.linalg.lstsq(x, y, rcond=None)[0]
    return float(a), float(b), float(c)


def run_model(key: str, rows: int, sizes: list[int], repeat: int) -> None:
    model = str(demo_model_path(key))
    runner = ModelRunner(EngineConfig(model_path=model, n_ctx=16384, max_num_seqs=CHAT_SEQS + 1, n_threads=2))
    try:
        doc_seq = CHAT_SEQS
        chats = [runner.tokenize(f"User {i}: " + words(CHAT_TOKENS, random.Random(i)))[:CHAT_TOKENS] for i in range(CHAT_SEQS)]
        doc = runner.tokenize(words(2400, random.Random(99)))[:DEPTHS[-1] + max(sizes) + 8]
        for s, c in enumerate(chats):
            prefill(runner, s, c[:-1])
        prefill(runner, doc_seq, doc[:DEPTHS[-1]])
        measure(runner, chats, doc, rows, DEPTHS[-1], 64, 2, doc_seq)          # warm-up
        print(f"\n{key}: {model}\nload average {load()} before")
        print(f"{'tokens':>6} | " + " | ".join(f"{'depth ' + str(d) + ', ' + str(r) + ' rows':>18}"
                                             for d in DEPTHS for r in (0, rows)) + " |  (ms; tok/s of the chunk's own time)")
        samples: dict[int, list[tuple[int, int, float]]] = {d: [] for d in DEPTHS}
        base = {d: measure(runner, chats, doc, rows, d, 0, repeat, doc_seq) if rows else 0.0 for d in DEPTHS}
        for n in sizes:
            cells = []
            for d in DEPTHS:
                if d == 0:
                    runner.seq_rm(doc_seq, 0, -1)
                for r in (0, rows):
                    s = measure(runner, chats, doc, r, d, n, repeat, doc_seq)
                    samples[d].append((r, n, s))
                    own = s - (base[d] if r else 0.0)
                    cells.append(f"{s * 1e3:8.0f} {n / own if own > 0 else 0:7.0f}/s")
                if d == 0:
                    prefill(runner, doc_seq, doc[:DEPTHS[-1]])
            print(f"{n:>6} | " + " | ".join(f"{c:>18}" for c in cells))
        print("decode rows alone (ms): " + ", ".join(
            f"{r}: {measure(runner, chats, doc, r, DEPTHS[-1], 0, repeat, doc_seq) * 1e3:.0f}"
            for r in (1, 2, 4, 8) if r <= CHAT_SEQS))
        for d in DEPTHS:
            rows_only = [(r, 0, measure(runner, chats, doc, r, d, 0, repeat, doc_seq)) for r in (1, 4, 8)]
            a, b, c = fit(samples[d] + rows_only)
            worst = max(abs(a + b * r + c * n - s) / s for r, n, s in samples[d] + rows_only)
            print(f"fit at depth {d}: step = {a * 1e3:.1f} ms + {b * 1e3:.2f} ms x rows + {c * 1e3:.2f} ms x tokens"
                  f" ({1 / c:.0f} tok/s at the margin); worst error {worst:.0%}")
        print(f"load average {load()} after")
    finally:
        runner.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="both", choices=("qwen", "gemma", "both"))
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="16,32,64,96,128,192,256,384,508,512")
    args = ap.parse_args()
    os.environ.setdefault("LLMPACK_CPU_VARIANT", "haswell")
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"{os.cpu_count()} cores, CPU variant {os.environ['LLMPACK_CPU_VARIANT']}, {args.rows} decode rows, "
          f"median of {args.repeat}")
    for key in ("qwen", "gemma") if args.model == "both" else (args.model,):
        run_model(key, args.rows, sizes, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())

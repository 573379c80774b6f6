"""`llmpack bench URL`: run the workloads at each concurrency level, show a progress bar while
it runs, then print a table (or, with --json, one JSON document on stdout)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from llmpack.bench import workloads
from llmpack.bench.client import Endpoint
from llmpack.bench.runner import Percentiles, RunStats, run
from llmpack.errors import LlmpackError
from llmpack.runtime.engine.trace_summary import TraceSummary, summarize


def plan(args: argparse.Namespace) -> list[tuple[workloads.Workload, int]]:
    """(workload, concurrency) pairs. Each level gets prompts from its own seed, so no level
    is served from the prompt cache a previous one filled (except the chat system prompt)."""
    names = [n.strip() for n in args.workload.split(",") if n.strip()]
    bad = [n for n in names if n not in workloads.NAMES]
    if bad or not names:
        raise LlmpackError(f"unknown workload {', '.join(bad) or '(none)'}: choose from {', '.join(workloads.NAMES)}")
    runs = []
    for w, name in enumerate(names):
        levels = [1] if name == "long" and args.concurrency else args.concurrency
        for level in levels:
            n = args.num_prompts or (3 if name == "long" else 2 * level)
            seed = args.seed * 1_000_000 + w * 1000 + level
            runs.append((workloads.make(name, n, input_len=args.input_len, output_len=args.output_len,
                                        system_len=args.system_len, long_len=args.long_len, seed=seed), level))
    return runs


def benchmark(ep: Endpoint, runs: list[tuple[workloads.Workload, int]], progress: bool = True,
              trace: Path | None = None) -> list[RunStats]:
    """Run each (workload, level). `trace`: the file the server writes its step trace to
    (`llmpack run --trace-steps FILE`); each result then carries the summary of the steps its run
    added (`RunStats.trace`)."""
    from tqdm import tqdm   # lazy: only with a progress bar (not --no-progress / --json)

    total = sum(len(w.requests) for w, _ in runs)
    results = []
    with tqdm(total=total, unit="req", disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
        for workload, level in runs:
            bar.set_description(f"{workload.name} x{level}")
            start = trace.stat().st_size if trace is not None and trace.exists() else 0
            result = run(ep, workload, level, on_done=lambda _res: bar.update(1))
            if trace is not None:
                result.trace = trace_since(trace, start)
            results.append(result)
    return results


def trace_since(path: Path, offset: int) -> TraceSummary:
    """The summary of the step-trace lines written after byte `offset` (the server flushes each
    line as its step ends)."""
    if not path.exists():
        raise LlmpackError(f"no step trace at {path}: start the server with --trace-steps {path}")
    with path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", errors="replace")
    return summarize(text.splitlines())


def _ms(p: Percentiles | None, attr: str) -> str:
    return "-" if p is None else f"{getattr(p, attr) * 1000:.0f}"


def table(results: list[RunStats]) -> str:
    head = ("workload", "conc", "reqs", "err", "prompt", "tok/s", "TTFT p50", "p99", "TPOT p50", "p99",
            "ITL p50", "p99")
    rows = [head]
    for r in results:
        rows.append((r.workload, str(r.concurrency), str(r.requests), str(r.errors),
                     "-" if r.prompt_tokens_mean is None else f"{r.prompt_tokens_mean:.0f}",
                     f"{r.output_tok_s:.1f}", _ms(r.ttft_s, "p50"), _ms(r.ttft_s, "p99"),
                     _ms(r.tpot_s, "p50"), _ms(r.tpot_s, "p99"), _ms(r.itl_s, "p50"), _ms(r.itl_s, "p99")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    notes = ["(times in ms; prompt = mean prompt tokens the server reported; tok/s = output tokens per second, "
             "all clients together)"]
    for r in results:
        for e in r.first_errors:
            notes.append(f"error in {r.workload} x{r.concurrency}: {e}")
    return "\n".join(lines + notes)


def cmd_bench(args: argparse.Namespace) -> int:
    ep = Endpoint(args.url, args.model, args.api_key, timeout=args.timeout)
    try:
        model = ep.resolve_model()
    except (OSError, RuntimeError, ValueError) as exc:
        raise LlmpackError(f"cannot reach an OpenAI-compatible server at {args.url}: {exc}") from None
    runs = plan(args)
    started = time.time()
    trace = Path(args.trace) if getattr(args, "trace", None) else None
    results = benchmark(ep, runs, progress=not args.no_progress, trace=trace)
    if args.json:
        json.dump({"url": args.url, "model": model, "started": started, "results": [r.to_dict() for r in results]},
                  sys.stdout, indent=2)
        print()
    else:
        print(f"{args.url}  model {model}")
        print(table(results))
        for r in results:
            if r.trace is not None:
                print(f"\nstep trace, {r.workload} x{r.concurrency}:\n  " + "\n  ".join(r.trace.lines()))
    return 1 if any(r.errors for r in results) else 0

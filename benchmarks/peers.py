"""llmpack against llama-server on the same llama.cpp, the same model and the same client, in
one run, next to a bare llama_decode loop: the speed and memory targets of issue 30.

Both servers are started (llama-server is built first if needed, see servers.py) and
idle while the other one is measured; each workload is run on one, then the other, so a
change in the machine's load hits both alike. The client is `llmpack bench`'s. The bare loop
(engine_throughput.bare_loop: the same batches fed straight to llama_decode, argmax, no
engine, no HTTP) runs in this process right after the servers at 16 and 32 streams, on the
same CPU variant, with the servers idle.

| workload | target (llmpack / llama-server, unless noted) |
|---|---|
| 1 stream, 64-token greedy replies | reported |
| 16 and 32 streams | >= 1.2x tok/s with TTFT p50 no worse, and >= 0.95x the bare loop |
| 16 chats sharing a ~280-token system prompt, 32-token replies | >= 2x tok/s |
| a 2,000-word prompt | TTFT no worse (ratio <= 1.0) |
| idle resident memory, after start-up | <= 1.1x |

    ./dev bench peers [--model gemma|qwen|both] [--json results.json] [--server-args "..."]
                      [--trace steps.jsonl] [--only 16,32] [--build-only]

About 4 minutes for Gemma 3 270M and 7 for Qwen2.5-Coder 0.5B on 2 quiet cores.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from engine_throughput import bare_loop, prompts_for  # noqa: E402
from servers import build_llama_server, find_llama_server, start_llama_server, start_llmpack  # noqa: E402

from llmpack.bench import workloads  # noqa: E402
from llmpack.bench.client import Endpoint  # noqa: E402
from llmpack.bench.report import trace_since  # noqa: E402
from llmpack.bench.runner import RunStats, run  # noqa: E402
from llmpack.demo_models import demo_model_path  # noqa: E402
from llmpack.runtime.engine.config import EngineConfig  # noqa: E402
from llmpack.runtime.engine.model_runner import ModelRunner  # noqa: E402

CTX, PARALLEL, TOKENS = 8192, 32, 64
# (label, workload, concurrency, requests, output tokens, tok/s target, TTFT rule)
# TTFT rule: "no worse" (p50 <= the peer's, with the tok/s target) or "only" (TTFT alone is judged).
PLAN = [
    ("1 stream", "random", 1, 3, TOKENS, None, None),
    ("16 streams", "random", 16, 16, TOKENS, 1.2, "no worse"),
    ("32 streams", "random", 32, 32, TOKENS, 1.2, "no worse"),
    ("16 chats, shared ~280-token system prompt", "chat", 16, 16, 32, 2.0, None),
    ("2,000-word prompt (TTFT)", "long", 1, 2, 16, None, "only"),
]
BARE_TARGET = 0.95       # llmpack over HTTP / the bare llama_decode loop, at 16 and 32 streams
RSS_TARGET = 1.1         # llmpack's idle resident memory / llama-server's


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MB (Linux /proc; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return None


def measure(ep: Endpoint, name: str, conc: int, n: int, out_len: int, seed: int) -> RunStats:
    w = workloads.make(name, n, input_len=16, output_len=out_len, system_len=280, long_len=2000, seed=seed)
    return run(ep, w, conc)


def bare(model: Path, sizes: tuple[int, ...]) -> dict[int, float]:
    """The bare llama_decode loop's tok/s for `sizes` concurrent 64-token generations."""
    runner = ModelRunner(EngineConfig(model_path=str(model), n_ctx=CTX, max_num_seqs=PARALLEL))
    try:
        bare_loop(runner, prompts_for(runner.tokenize, 2), 8)   # warm-up
        return {n: bare_loop(runner, prompts_for(runner.tokenize, n), TOKENS) for n in sizes}
    finally:
        runner.close()


def verdict(label: str, target: float | None, ttft_rule: str | None, ours: RunStats, peer: RunStats,
            bare_tok_s: float | None) -> tuple[str, bool | None]:
    """The row's ratios in words and whether its targets are met (None: nothing to judge)."""
    ratio = ours.output_tok_s / peer.output_tok_s if peer.output_tok_s else float("nan")
    t_ours, t_peer = (r.ttft_s.p50 if r.ttft_s else float("nan") for r in (ours, peer))
    ttft_ratio = t_ours / t_peer if t_peer else float("nan")
    parts, checks = [f"{ratio:.2f}x tok/s, TTFT {ttft_ratio:.2f}x"], []
    if target is not None:
        checks.append(ratio >= target)
        parts.append(f">= {target:.2f}x tok/s" + (" with TTFT no worse" if ttft_rule == "no worse" else ""))
    if ttft_rule is not None:
        checks.append(t_ours <= t_peer)
        if ttft_rule == "only":
            parts.append("TTFT no worse")
    if bare_tok_s:
        checks.append(ours.output_tok_s >= BARE_TARGET * bare_tok_s)
        parts.append(f"bare loop {bare_tok_s:.1f} tok/s: {ours.output_tok_s / bare_tok_s:.2f}x (>= {BARE_TARGET})")
    met = all(checks) if checks else None
    return "; ".join(parts), met


def run_model(key: str, binary: Path, args: argparse.Namespace) -> dict:
    model = demo_model_path(key)
    print(f"\n## {model.name}\n{platform.machine()}, {os.cpu_count()} cores, load average {load()} (1/5/15 min) "
          f"before; llama-server {binary.name} -c {CTX} -np {PARALLEL} -kvu -t {os.cpu_count()}; "
          f"llmpack run --ctx {CTX} --parallel {PARALLEL} --gpu-layers 0 {args.server_args}".rstrip()
          + f", CPU variant {os.environ.get('LLMPACK_CPU_VARIANT')}", flush=True)
    servers, rows, measured = {}, [], []
    doc: dict = {"model": model.name, "rows": rows}
    trace = Path(f"{args.trace}.{key}") if args.trace else None
    try:
        extra = shlex.split(args.server_args) + (["--trace-steps", str(trace)] if trace else [])
        servers["llmpack"] = start_llmpack(model, ctx=CTX, parallel=PARALLEL, extra=extra)
        servers["llama-server"] = start_llama_server(binary, model, ctx=CTX, parallel=PARALLEL)
        doc["idle_rss_mb"] = {k: rss_mb(proc.pid) for k, (proc, _) in servers.items()}
        eps = {k: Endpoint(url, timeout=900) for k, (_, url) in servers.items()}
        for ep in eps.values():
            ep.resolve_model()
            run(ep, workloads.make("random", 2, input_len=16, output_len=8, seed=999), 2)   # warm-up
        print("| workload | llmpack | llama-server | ratios | verdict |\n|---|---|---|---|---|", flush=True)
        for i, (label, name, conc, n, out_len, target, ttft_rule) in enumerate(PLAN):
            if args.only and label.split()[0].rstrip(",") not in args.only.split(","):
                continue
            start = trace.stat().st_size if trace and trace.exists() else 0
            got = {k: measure(ep, name, conc, n, out_len, seed=100 * i + j) for j, (k, ep) in enumerate(eps.items())}
            rows.append({"label": label, "concurrency": conc, "results": {k: r.to_dict() for k, r in got.items()}})
            measured.append((PLAN[i], got))
            print_row(label, target, ttft_rule, got, None)
            if trace:
                print("    llmpack's steps: " + "\n    ".join(trace_since(trace, start).lines()), flush=True)
        doc["loaded_rss_mb"] = {k: rss_mb(proc.pid) for k, (proc, _) in servers.items()}
    finally:
        for proc, _ in servers.values():
            proc.terminate()
        for proc, _ in servers.values():
            proc.wait(timeout=30)
    sizes = tuple(plan[2] for plan, _ in measured if plan[1] == "random" and plan[2] > 1)
    doc["bare_tok_s"] = bare(model, sizes) if sizes else {}
    print("\nbare llama_decode loop (same CPU variant, servers stopped): "
          + ", ".join(f"{n} streams {v:.1f} tok/s" for n, v in doc["bare_tok_s"].items()))
    for (label, name, conc, _, _, target, ttft_rule), got in measured:
        if name == "random" and conc in doc["bare_tok_s"]:
            print_row(label, target, ttft_rule, got, doc["bare_tok_s"][conc])
    ours, peer = doc["idle_rss_mb"].get("llmpack"), doc["idle_rss_mb"].get("llama-server")
    if ours and peer:
        print(f"| idle RSS | {ours:.0f} MB | {peer:.0f} MB | {ours / peer:.2f}x | "
              f"{'met' if ours <= RSS_TARGET * peer else 'MISSED'} (<= {RSS_TARGET}x) |")
    loaded = doc.get("loaded_rss_mb", {})
    if loaded.get("llmpack") and loaded.get("llama-server"):
        print(f"| RSS after the run | {loaded['llmpack']:.0f} MB | {loaded['llama-server']:.0f} MB | "
              f"{loaded['llmpack'] / loaded['llama-server']:.2f}x | - |")
    print(f"load average {load()} after", flush=True)
    return doc


def print_row(label: str, target: float | None, ttft_rule: str | None, got: dict[str, RunStats],
              bare_tok_s: float | None) -> None:
    ours, peer = got["llmpack"], got["llama-server"]
    words, met = verdict(label, target, ttft_rule, ours, peer, bare_tok_s)
    t_ours, t_peer = (r.ttft_s.p50 if r.ttft_s else float("nan") for r in (ours, peer))
    errors = f"  errors: {ours.errors} / {peer.errors}" if ours.errors or peer.errors else ""
    print(f"| {label}{' (with the bare loop)' if bare_tok_s else ''} | {ours.output_tok_s:.1f} tok/s, "
          f"TTFT p50 {t_ours:.2f} s | {peer.output_tok_s:.1f} tok/s, {t_peer:.2f} s | {words} | "
          f"{'-' if met is None else 'met' if met else 'MISSED'} |{errors}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="both", choices=("gemma", "qwen", "both"),
                    help="demo model(s) to measure (default both: Gemma 3 270M, then Qwen2.5-Coder 0.5B)")
    ap.add_argument("--build-only", action="store_true", help="build (or find) llama-server and stop")
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    ap.add_argument("--server-args", default="", help="extra flags for `llmpack run`")
    ap.add_argument("--only", default=None, help="comma-separated plan labels' first words to run, e.g. 1,16")
    ap.add_argument("--trace", default=None, metavar="FILE",
                    help="run llmpack with --trace-steps FILE.<model> and print each workload's step-trace summary")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # stop both servers on the way out
    # equal kernels: llama-server is built for AVX2 (servers.py); left to choose, llmpack takes this
    # CPU's best variant (zen4's AVX-512 read 2.0x llama-server's single stream on 2026-12-06)
    os.environ.setdefault("LLMPACK_CPU_VARIANT", "haswell")
    binary = find_llama_server() or build_llama_server()
    if args.build_only:
        print(binary)
        return 0
    keys = ("gemma", "qwen") if args.model == "both" else (args.model,)
    docs = [run_model(key, binary, args) for key in keys]
    if args.json:
        Path(args.json).write_text(json.dumps(docs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

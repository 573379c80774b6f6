"""llmpack against llama-server on the same llama.cpp, the same model and the same client, in
one run: the speed targets of issue 9.

Both servers are started (llama-server is built first if needed, see servers.py) and
idle while the other one is measured; each workload is run on one, then the other, so a
change in the machine's load hits both alike. The client is `llmpack bench`'s.

| workload | target |
|---|---|
| 1 stream, 64-token greedy replies | >= 0.95 x llama-server's tok/s |
| 16 and 32 streams | >= 1.0 x tok/s, and TTFT p50 no worse |
| 16 chats sharing a ~280-token system prompt, 32-token replies | >= 1.5 x tok/s |
| a 2,000-token prompt | TTFT reported |

    ./dev bench peers [--build-only] [--json results.json] [--server-args "..."] [--trace steps.jsonl]
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
from servers import build_llama_server, find_llama_server, start_llama_server, start_llmpack  # noqa: E402

from llmpack.bench import workloads  # noqa: E402
from llmpack.bench.client import Endpoint  # noqa: E402
from llmpack.bench.report import trace_since  # noqa: E402
from llmpack.bench.runner import RunStats, run  # noqa: E402
from llmpack.demo_models import demo_model_path  # noqa: E402

CTX, PARALLEL = 8192, 32
# (label, workload, concurrency, requests, output tokens, tok/s target, TTFT must not be worse)
# One wave of requests per level, as in the measurement.
PLAN = [
    ("1 stream", "random", 1, 3, 64, 0.95, False),
    ("16 streams", "random", 16, 16, 64, 1.0, True),
    ("32 streams", "random", 32, 32, 64, 1.0, True),
    ("16 chats, shared ~280-token system prompt", "chat", 16, 16, 32, 1.5, False),
    ("2,000-token prompt (TTFT)", "long", 1, 2, 16, None, False),
]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(ep: Endpoint, name: str, conc: int, n: int, out_len: int, seed: int) -> RunStats:
    w = workloads.make(name, n, input_len=16, output_len=out_len, system_len=280, long_len=2000, seed=seed)
    return run(ep, w, conc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-only", action="store_true", help="build (or find) llama-server and stop")
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    ap.add_argument("--server-args", default="", help="extra flags for `llmpack run`")
    ap.add_argument("--only", default=None, help="comma-separated plan labels' first words to run, e.g. 1,16")
    ap.add_argument("--trace", default=None, metavar="FILE",
                    help="run llmpack with --trace-steps FILE and print each workload's step-trace summary")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # stop both servers on the way out
    binary = find_llama_server() or build_llama_server()
    if args.build_only:
        print(binary)
        return 0
    model = demo_model_path("gemma")
    print(f"{platform.machine()}, {os.cpu_count()} cores, load average {load()} (1/5/15 min) before; "
          f"model {model.name}; llama-server {binary.name} -c {CTX} -np {PARALLEL} -kvu -t {os.cpu_count()}; "
          f"llmpack run --ctx {CTX} --parallel {PARALLEL} {args.server_args}".rstrip(), flush=True)
    servers = {}
    try:
        extra = shlex.split(args.server_args) + (["--trace-steps", args.trace] if args.trace else [])
        servers["llmpack"] = start_llmpack(model, ctx=CTX, parallel=PARALLEL, extra=extra)
        servers["llama-server"] = start_llama_server(binary, model, ctx=CTX, parallel=PARALLEL)
        eps = {k: Endpoint(url, timeout=900) for k, (_, url) in servers.items()}
        for ep in eps.values():
            ep.resolve_model()
            run(ep, workloads.make("random", 2, input_len=16, output_len=8, seed=999), 2)   # warm-up
        rows = []
        for i, (label, name, conc, n, out_len, target, ttft_rule) in enumerate(PLAN):
            if args.only and label.split()[0].rstrip(",") not in args.only.split(","):
                continue
            start = Path(args.trace).stat().st_size if args.trace else 0
            got = {k: measure(ep, name, conc, n, out_len, seed=100 * i + j) for j, (k, ep) in enumerate(eps.items())}
            rows.append((label, target, ttft_rule, got))
            print_row(label, target, ttft_rule, got)
            if args.trace:
                print("    llmpack's steps: " + "\n    ".join(trace_since(Path(args.trace), start).lines()), flush=True)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
        for proc, _ in servers.values():
            proc.wait(timeout=30)
    print(f"load average {load()} after")
    if args.json:
        Path(args.json).write_text(json.dumps(
            [{"label": label, "target": t, "results": {k: r.to_dict() for k, r in got.items()}}
             for label, t, _, got in rows], indent=2))
    return 0


def print_row(label: str, target: float | None, ttft_rule: bool, got: dict[str, RunStats]) -> None:
    ours, peer = got["llmpack"], got["llama-server"]
    ratio = ours.output_tok_s / peer.output_tok_s if peer.output_tok_s else float("nan")
    t_ours, t_peer = (r.ttft_s.p50 if r.ttft_s else float("nan") for r in (ours, peer))
    verdict = "-"
    if target is not None:
        met = ratio >= target and (not ttft_rule or t_ours <= t_peer)
        verdict = ("met" if met else "MISSED") + f" (>= {target:.2f}x" + (", TTFT no worse)" if ttft_rule else ")")
    errors = f"  errors: {ours.errors} / {peer.errors}" if ours.errors or peer.errors else ""
    print(f"| {label} | {ours.output_tok_s:.1f} tok/s, TTFT p50 {t_ours:.2f} s | "
          f"{peer.output_tok_s:.1f} tok/s, {t_peer:.2f} s | {ratio:.2f} | TTFT {t_ours / t_peer:.2f}x | {verdict} |"
          f"{errors}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""Chatting while someone else's document is read (issue 48): llmpack against llama-server from
the same vendored llama.cpp, on equal kernels, in one run.

The workload, as a new user would try it:
- 4 users stream replies, each asking again as soon as a reply ends;
- every 10 s another user sends a ~1,500-word prompt (five of them);
- 16k context for both servers; llmpack with speculation off (`--speculative off`), on the
  haswell CPU kernels (LLMPACK_CPU_VARIANT=haswell), against llama-server built with the same
  AVX2 flags (servers.py) run as `-np 8 -kvu -t 2`; llmpack gets `--parallel 8 --threads 2`.
The run ends when the last document's reply is done and the chatting users' replies in flight
end. Each server is measured alone, the other idle; both warm up with one ~300-word prompt
(a server that has read nothing yet has not measured its prompt speed).

Printed per model, as llmpack / llama-server ratios:
- the chatting users' inter-token gap p50, p99 and max (client side, between streamed chunks);
- the documents' time to first token, p50;
- total tokens/s: every user's generated tokens over the run's wall time.

| target (2 cores) | |
|---|---|
| gap p99 | <= 1 s, and <= 1/2 of llama-server's |
| documents' TTFT p50 | <= llama-server's |
| total tokens/s | >= 0.95x llama-server's |

    ./dev bench mixed [--model qwen|gemma|both] [--quick] [--json FILE] [--trace FILE] [--server-args "..."]

--quick: 2 documents of ~1,000 words, 8 s apart (about a third of the time). About 5 minutes a
model on 2 quiet cores in full.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from servers import build_llama_server, find_llama_server, start_llama_server, start_llmpack  # noqa: E402

from llmpack.bench.client import Endpoint, RequestResult, stream_request  # noqa: E402
from llmpack.bench.report import trace_since  # noqa: E402
from llmpack.bench.runner import percentile  # noqa: E402
from llmpack.bench.workloads import words  # noqa: E402
from llmpack.demo_models import demo_model_path  # noqa: E402

CTX, PARALLEL, THREADS = 16384, 8, 2
CHATTERS, CHAT_WORDS, CHAT_TOKENS = 4, 40, 64
DOC_TOKENS = 32
GAP_P99_MAX_S, GAP_P99_RATIO, TTFT_RATIO, TOK_S_RATIO = 1.0, 0.5, 1.0, 0.95


@dataclass
class Plan:
    docs: int = 5
    every_s: float = 10.0
    doc_words: int = 1500
    first_at_s: float = 5.0      # the chatting users are streaming by then


@dataclass
class Result:
    gaps: list[float] = field(default_factory=list)         # the chatting users' inter-token gaps
    chat_ttft: list[float] = field(default_factory=list)
    doc_ttft: list[float] = field(default_factory=list)
    doc_prompt_tokens: list[int] = field(default_factory=list)
    output_tokens: int = 0
    chat_requests: int = 0
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def figures(self) -> dict[str, float]:
        nan = float("nan")
        g = self.gaps
        return {"gap_p50_s": percentile(g, 50) if g else nan, "gap_p99_s": percentile(g, 99) if g else nan,
                "gap_max_s": max(g) if g else nan,
                "doc_ttft_p50_s": percentile(self.doc_ttft, 50) if self.doc_ttft else nan,
                "chat_ttft_p50_s": percentile(self.chat_ttft, 50) if self.chat_ttft else nan,
                "total_tok_s": self.output_tokens / self.wall_s if self.wall_s else nan}


def body(prompt: str, max_tokens: int) -> dict:
    return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}


def measure(ep: Endpoint, plan: Plan, seed: int) -> Result:
    """The mixed workload against one server."""
    rng = random.Random(seed)
    docs = [f"Document {i}, read it and sum it up. {words(plan.doc_words, rng)}" for i in range(plan.docs)]
    res, lock, stop = Result(), threading.Lock(), threading.Event()

    def record(r: RequestResult, chat: bool) -> None:
        with lock:
            res.output_tokens += r.output_tokens if r.ok else 0
            if not r.ok:
                res.errors.append(r.error or "failed")
            elif chat:
                res.gaps += r.itl
                res.chat_ttft.append(r.ttft)
                res.chat_requests += 1
            else:
                res.doc_ttft.append(r.ttft)
                res.doc_prompt_tokens.append(r.prompt_tokens or 0)

    def chatter(u: int) -> None:
        own = random.Random(seed * 100 + u)
        k = 0
        while not stop.is_set():
            record(stream_request(ep, "/v1/completions",
                                  body(f"User {u}, question {k}: {words(CHAT_WORDS, own)}", CHAT_TOKENS)), True)
            k += 1

    def reader(i: int, at: float) -> None:
        time.sleep(max(0.0, at - (time.perf_counter() - t0)))
        record(stream_request(ep, "/v1/completions", body(docs[i], DOC_TOKENS)), False)

    t0 = time.perf_counter()
    chat_threads = [threading.Thread(target=chatter, args=(u,), daemon=True) for u in range(CHATTERS)]
    doc_threads = [threading.Thread(target=reader, args=(i, plan.first_at_s + i * plan.every_s), daemon=True)
                   for i in range(plan.docs)]
    for t in chat_threads + doc_threads:
        t.start()
    for t in doc_threads:
        t.join()
    stop.set()
    for t in chat_threads:
        t.join()
    res.wall_s = time.perf_counter() - t0
    return res


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def warm_up(ep: Endpoint) -> None:
    ep.resolve_model()
    r = stream_request(ep, "/v1/completions", body("Warm up. " + words(300, random.Random(7)), 4))
    if not r.ok:
        raise RuntimeError(f"warm-up failed: {r.error}")


def report(model: str, got: dict[str, Result]) -> dict:
    ours, peer = (got[k].figures() for k in ("llmpack", "llama-server"))
    ratio = {k: ours[k] / peer[k] if peer[k] else float("nan") for k in ours}
    checks = {
        "gap p99": ours["gap_p99_s"] <= GAP_P99_MAX_S and ratio["gap_p99_s"] <= GAP_P99_RATIO,
        "documents' TTFT p50": ratio["doc_ttft_p50_s"] <= TTFT_RATIO,
        "total tokens/s": ratio["total_tok_s"] >= TOK_S_RATIO,
    }
    rows = [("chatting users' gap p50", "gap_p50_s", "s", None),
            ("chatting users' gap p99", "gap_p99_s", "s", f"<= {GAP_P99_MAX_S:.0f} s and <= {GAP_P99_RATIO}x"),
            ("chatting users' gap max", "gap_max_s", "s", None),
            ("chatting users' TTFT p50", "chat_ttft_p50_s", "s", None),
            ("documents' TTFT p50", "doc_ttft_p50_s", "s", f"<= {TTFT_RATIO}x"),
            ("total tokens/s", "total_tok_s", "", f">= {TOK_S_RATIO}x")]
    print("| figure | llmpack | llama-server | ratio | target |\n|---|---:|---:|---:|---|")
    verdicts = {"gap_p99_s": "gap p99", "doc_ttft_p50_s": "documents' TTFT p50", "total_tok_s": "total tokens/s"}
    for label, key, unit, target in rows:
        verdict = "" if target is None else f"{target}: {'met' if checks[verdicts[key]] else 'MISSED'}"
        fmt = "{:.2f} s" if unit == "s" else "{:.1f}"
        print(f"| {label} | {fmt.format(ours[key])} | {fmt.format(peer[key])} | {ratio[key]:.2f}x | {verdict} |")
    for name, r in got.items():
        print(f"  {name}: {r.chat_requests} chat replies, {len(r.gaps)} gaps, documents of "
              f"{sorted(r.doc_prompt_tokens)} prompt tokens, {r.output_tokens} tokens in {r.wall_s:.1f} s"
              + (f", {len(r.errors)} errors: {r.errors[:2]}" if r.errors else ""), flush=True)
    return {"model": model, "figures": {"llmpack": ours, "llama-server": peer}, "ratios": ratio,
            "met": checks, "raw": {k: {**asdict(v), "gaps": None} for k, v in got.items()}}


def run_model(key: str, binary: Path, plan: Plan, args: argparse.Namespace) -> dict:
    model = demo_model_path(key)
    print(f"\n## {model.name}\n{platform.machine()}, {os.cpu_count()} cores, load average {load()} (1/5/15 min) "
          f"before; {CHATTERS} users chatting ({CHAT_TOKENS}-token replies), {plan.docs} documents of "
          f"~{plan.doc_words} words every {plan.every_s:.0f} s; llama-server -c {CTX} -np {PARALLEL} -kvu "
          f"-t {THREADS}; llmpack --ctx {CTX} --parallel {PARALLEL} --threads {THREADS} --speculative off "
          f"{args.server_args}".rstrip() + f", CPU variant {os.environ.get('LLMPACK_CPU_VARIANT')}", flush=True)
    got: dict[str, Result] = {}
    trace = Path(f"{args.trace}.{key}") if args.trace else None
    for name in ("llmpack", "llama-server"):
        if name == "llmpack":
            extra = ["--threads", str(THREADS), "--speculative", "off", *shlex.split(args.server_args)]
            extra += ["--trace-steps", str(trace)] if trace else []
            proc, url = start_llmpack(model, ctx=CTX, parallel=PARALLEL, extra=extra)
        else:
            proc, url = start_llama_server(binary, model, ctx=CTX, parallel=PARALLEL, threads=THREADS)
        try:
            ep = Endpoint(url, timeout=900)
            warm_up(ep)
            start = trace.stat().st_size if trace and trace.exists() and name == "llmpack" else 0
            got[name] = measure(ep, plan, seed=48)
            if trace and name == "llmpack":
                print("    llmpack's steps: " + "\n    ".join(trace_since(trace, start).lines()), flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    doc = report(model.name, got)
    print(f"load average {load()} after", flush=True)
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 documents of ~1,000 words, 8 s apart")
    ap.add_argument("--model", default="both", choices=("qwen", "gemma", "both"),
                    help="demo model(s): the demo Qwen2.5-Coder 0.5B, Gemma 3 270M, or both (default)")
    ap.add_argument("--server-args", default="", help="extra flags for `llmpack run` (e.g. --target-gap-ms 300)")
    ap.add_argument("--trace", default=None, metavar="FILE",
                    help="run llmpack with --trace-steps FILE.<model> and print its step-trace summary")
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("LLMPACK_CPU_VARIANT", "haswell")   # the peer's AVX2 kernels: equal kernels
    plan = Plan(docs=2, every_s=8.0, doc_words=1000) if args.quick else Plan()
    binary = find_llama_server() or build_llama_server()
    keys = ("qwen", "gemma") if args.model == "both" else (args.model,)
    docs = [run_model(key, binary, plan, args) for key in keys]
    if args.json:
        Path(args.json).write_text(json.dumps(docs, indent=2))
    return 0 if all(all(d["met"].values()) for d in docs) else 1


if __name__ == "__main__":
    sys.exit(main())

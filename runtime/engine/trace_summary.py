"""Sum up a step trace (step_trace.py): where the engine's time went, outside llama_decode first.

    python -m llmpack.runtime.engine.trace_summary steps.jsonl [--from-step N]

The wall time the trace covers splits into the steps' phases (schedule, build, llama_decode,
sample, emit) and the gaps between steps (the engine thread waiting for work, taking in
requests, or waiting for the GIL held by HTTP threads).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from llmpack.runtime.engine.step_trace import PHASES


@dataclass
class TraceSummary:
    steps: int = 0
    wall_ms: float = 0.0
    phase_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    decode_rows: int = 0
    prefill_tokens: int = 0
    mixed_steps: int = 0           # steps holding both prefill chunks and decode rows
    drafted: int = 0
    accepted: int = 0
    preemptions: int = 0
    failed_steps: int = 0
    peak_kv_used: int = 0
    decode_step_ms: list[float] = field(default_factory=list)   # steps holding decode rows: what streams waited

    @property
    def gap_ms(self) -> float:
        return max(0.0, self.wall_ms - sum(self.phase_ms.values()))

    def lines(self) -> list[str]:
        wall = self.wall_ms or 1.0
        out = [f"{self.steps} steps over {self.wall_ms / 1e3:.2f} s; "
               f"{self.decode_rows} decode rows ({self.decode_rows / max(self.steps, 1):.1f} per step), "
               f"{self.prefill_tokens} prefill tokens, {self.mixed_steps} steps mixing both; "
               f"{self.preemptions} preemptions, {self.failed_steps} failed steps, peak {self.peak_kv_used} KV blocks used"]
        if self.decode_step_ms:
            ms = sorted(self.decode_step_ms)
            pick = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]   # noqa: E731
            out.append(f"steps with streams decoding: {len(ms)}, p50 {pick(0.5):.0f} ms, p99 {pick(0.99):.0f} ms, "
                       f"max {ms[-1]:.0f} ms")
        if self.drafted:
            out.append(f"speculative: {self.accepted} of {self.drafted} draft tokens accepted "
                       f"({100 * self.accepted / self.drafted:.0f}%)")
        out.append(f"llama_decode: {self.phase_ms['llama_decode']:.0f} ms, "
                   f"{100 * self.phase_ms['llama_decode'] / wall:.1f}% of the wall time")
        outside = {k: v for k, v in self.phase_ms.items() if k != "llama_decode"}
        outside["between steps"] = self.gap_ms
        total_outside = sum(outside.values())
        out.append(f"outside llama_decode: {total_outside:.0f} ms ({100 * total_outside / wall:.1f}%), of which:")
        for name, ms in sorted(outside.items(), key=lambda kv: -kv[1]):
            out.append(f"  {name:14s} {ms:9.1f} ms  {100 * ms / wall:5.1f}%  "
                       f"({ms / max(self.steps, 1):.3f} ms per step)")
        return out


def summarize(lines, from_step: int = 0) -> TraceSummary:
    s = TraceSummary()
    first_t = last_t = None
    for raw in lines:
        if not raw.strip():
            continue
        rec = json.loads(raw)
        if rec["step"] < from_step:
            continue
        step_ms = sum(rec["ms"].values())
        if first_t is None:
            first_t = rec["t"] - step_ms / 1e3   # "t" is written when a step ends
        last_t = rec["t"]
        s.steps += 1
        for k in PHASES:
            s.phase_ms[k] += rec["ms"].get(k, 0.0)
        rows, prefill = sum(rec["decode"].values()), sum(rec["prefill"].values())
        s.decode_rows += rows
        s.prefill_tokens += prefill
        s.mixed_steps += bool(rows and prefill)
        if rows:
            s.decode_step_ms.append(step_ms)
        for drafted, accepted in rec.get("draft", {}).values():
            s.drafted += drafted
            s.accepted += accepted
        s.preemptions += rec["preempted"]
        s.failed_steps += bool(rec.get("failed"))
        s.peak_kv_used = max(s.peak_kv_used, rec["kv"]["used"])
    if first_t is not None:
        s.wall_ms = (last_t - first_t) * 1e3
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path, help="a file written with --trace-steps")
    ap.add_argument("--from-step", type=int, default=0, help="skip the steps before this one (a warm-up)")
    args = ap.parse_args(argv)
    try:
        with args.trace.open(encoding="utf-8") as f:
            summary = summarize(f, args.from_step)
    except (OSError, ValueError, KeyError) as exc:
        print(f"llmpack: error: cannot read the step trace {args.trace}: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

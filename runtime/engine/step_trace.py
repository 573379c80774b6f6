"""The per-step trace (EngineConfig.trace_steps, `--trace-steps FILE`): one JSON line per engine
step saying what the step held and where its time went, so a slow run can be explained from
the file instead of guessed at. `python -m llmpack.runtime.engine.trace_summary FILE` sums it up.

A line: {"step", "t" (seconds since the engine started), "decode": {request id: rows},
"prefill": {request id: tokens}, "draft": {request id: [drafted, accepted]}, "ms": {"schedule",
"build", "llama_decode", "sample", "emit"}, "step_ms" (their sum: what every decoding stream
waited), "budget" (the prompt tokens the step could hold: sized by time while anyone decodes,
see scheduler.py), "kv": {"used", "free", "cached"} (blocks), "preempted", "running", "waiting",
"failed" (request ids whose step failed, when one did)}.
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from llmpack.runtime.engine.scheduler import SchedulerOutput

PHASES = ("schedule", "build", "llama_decode", "sample", "emit")


class StepTrace:
    """Times one step's phases; `write` appends its line. Cheap enough to run always: the engine
    keeps one even with no file, so `last` can be read by tests and benchmarks."""

    def __init__(self, path: str | None) -> None:
        self.file: TextIO | None = open(path, "a", encoding="utf-8", buffering=1) if path else None
        self.t0 = time.perf_counter()
        self.ms: dict[str, float] = {}
        self._mark = 0.0

    def start(self) -> None:
        self.ms = dict.fromkeys(PHASES, 0.0)
        self._mark = time.perf_counter()

    def lap(self, phase: str) -> None:
        """The time since the last lap (or start) was spent in `phase`."""
        now = time.perf_counter()
        self.ms[phase] += (now - self._mark) * 1e3
        self._mark = now

    def move(self, seconds: float, src: str, dst: str) -> None:
        """Reassign time measured inside one phase to another (sampling inside emitting)."""
        self.ms[src] -= seconds * 1e3
        self.ms[dst] += seconds * 1e3

    def write(self, step: int, out: "SchedulerOutput", engine, failed: list[str] | None = None) -> None:
        if self.file is None:
            return
        decode: dict[str, int] = {}
        prefill: dict[str, int] = {}
        draft: dict[str, list[int]] = {}
        for c in out.chunks:
            rid = c.seq.request.request_id
            if c.is_prefill:
                prefill[rid] = prefill.get(rid, 0) + c.num_tokens
            else:
                decode[rid] = decode.get(rid, 0) + 1
            if c.draft:
                draft[rid] = [len(c.draft), c.num_accepted]
        bm = engine.bm
        line = {"step": step, "t": round(time.perf_counter() - self.t0, 4), "decode": decode, "prefill": prefill,
                "ms": {k: round(v, 3) for k, v in self.ms.items()}, "step_ms": round(sum(self.ms.values()), 3),
                "budget": out.prompt_budget,
                "kv": {"used": bm.num_used_blocks, "free": bm.num_free_blocks, "cached": bm.num_cached_blocks},
                "preempted": out.num_preempted, "running": engine.scheduler.num_running,
                "waiting": engine.scheduler.num_waiting}
        if draft:
            line["draft"] = draft
        if failed:
            line["failed"] = failed
        self.file.write(json.dumps(line, separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

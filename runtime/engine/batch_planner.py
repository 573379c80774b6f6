"""How one step's scheduled chunks become the rows of one llama_decode (a `BatchPlan`).

Pure bookkeeping over the sequences' data: no llama.cpp call happens here (model_runner runs
the plan), so the runner need not know what a scheduled chunk is, and the data the scheduler
hands over stays below the runner in the import graph.
"""
from __future__ import annotations

from llmpack.runtime.engine.llama_batch import BatchPlan
from llmpack.runtime.engine.sequence import ScheduledChunk


def plan_batch(chunks: list[ScheduledChunk], text_starts: list[int] | None = None) -> BatchPlan:
    """The rows of one llama_decode for the scheduled chunks: each chunk's tokens at their
    positions in its sequence's llama.cpp id, then its draft tokens; logits are asked for the
    chunk's last token and every draft token of a chunk that samples. `text_starts`: where
    each chunk's text begins, when image rows before it were decoded already (multimodal.py)."""
    plan = BatchPlan([], [], [], [], [])
    for i, c in enumerate(chunks):
        t0 = c.start if text_starts is None else text_starts[i]
        seq, n, d = c.seq, c.start + c.num_tokens - t0, len(c.draft)
        plan.tokens += seq.token_ids[t0:t0 + n]
        if d:
            plan.tokens += c.draft
        p0 = seq.position(t0)          # t0 itself, but for text after an M-RoPE image
        plan.positions += range(p0, p0 + n + d)
        plan.seq_ids += [seq.llama_seq] * (n + d)
        if c.samples:
            plan.want_logits += [False] * (n - 1) + [True] * (d + 1)
            plan.out_row.append(plan.n_outputs)
            plan.n_outputs += d + 1
        else:
            plan.want_logits += [False] * n
            plan.out_row.append(-1)
    return plan

"""Sampling parameters the engine tests ask with."""
from __future__ import annotations

from llmpack.runtime.engine.sampling_params import SamplingParams


def greedy(max_tokens: int = 12, **kw) -> SamplingParams:
    """Greedy and exactly `max_tokens` long (end of sequence ignored), so two runs of the same
    prompt give the same tokens and the same number of steps."""
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, **kw)

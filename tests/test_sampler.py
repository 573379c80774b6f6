"""Sampling truncation is exact over the whole vocabulary, without sorting it."""
from __future__ import annotations

import numpy as np
import pytest

from llmpack.runtime.sampler import SequenceSampler
from llmpack.runtime.sampling_params import SamplingParams


def reference_kept(row: np.ndarray, p: SamplingParams) -> set[int]:
    """Textbook top_k -> top_p -> min_p with a full sort (what vLLM and HF do)."""
    w = np.exp((row - row.max()) / p.temperature)
    order = np.argsort(-w, kind="stable")
    if p.top_k > 0:
        order = order[:p.top_k]
    mass = w[order].sum()
    if p.top_p < 1.0:
        cum = np.cumsum(w[order])
        order = order[:int(np.searchsorted(cum, p.top_p * mass)) + 1]
    if p.min_p > 0:
        order = order[w[order] >= p.min_p]
    return set(order.tolist())


@pytest.mark.parametrize("kw", [
    dict(temperature=0.8, top_p=0.95), dict(temperature=1.0, top_k=40), dict(temperature=0.7, top_k=64, top_p=0.9),
    dict(temperature=1.2, min_p=0.05), dict(temperature=0.5, top_p=0.5), dict(temperature=2.0, top_p=0.99)])
@pytest.mark.parametrize("spread", [3.0, 8.0])
def test_kept_set_matches_a_full_sort(kw, spread):
    rng = np.random.default_rng(0)
    row = (rng.standard_normal(262_144) * spread).astype(np.float32)
    params = SamplingParams(**kw)
    sampler = SequenceSampler(params, seed=1)
    assert set(sampler.kept_tokens(row).tolist()) == reference_kept(row, params)


def test_untruncated_sampling_drops_only_a_negligible_tail():
    rng = np.random.default_rng(1)
    row = (rng.standard_normal(262_144) * 4).astype(np.float32)
    sampler = SequenceSampler(SamplingParams(temperature=1.0), seed=1)
    kept = sampler.kept_tokens(row)
    w = np.exp(row - row.max())
    assert w[kept].sum() / w.sum() >= 1 - 1e-6


def test_samples_follow_the_distribution_and_the_seed():
    row = np.full(1000, -30.0, dtype=np.float32)
    row[[3, 7]] = [1.0, 0.0]                         # p(3) = e/(e+1) ~ 0.731
    draws = [SequenceSampler(SamplingParams(temperature=1.0), seed=s).sample(row.copy()) for s in range(400)]
    assert set(draws) <= {3, 7}
    assert 0.65 < draws.count(3) / len(draws) < 0.81
    again = [SequenceSampler(SamplingParams(temperature=1.0), seed=s).sample(row.copy()) for s in range(400)]
    assert again == draws


def test_penalties_lower_repeated_tokens():
    row = np.zeros(10, dtype=np.float32)
    row[[1, 2]] = [2.0, 2.0]
    s = SequenceSampler(SamplingParams(temperature=0, presence_penalty=1.0, frequency_penalty=0.5), seed=0)
    s.apply_penalties(row, context=[1, 1], output=[1, 1])
    assert row[1] == pytest.approx(2.0 - 1.0 - 2 * 0.5) and s.sample(row) == 2

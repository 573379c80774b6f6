"""Speculative decoding by n-gram prompt lookup: greedy output is the same with it on and off,
sampled output keeps the target distribution (the rejection rule, checked statistically on a
small vocabulary), and "auto" turns itself off when it does not pay."""
from __future__ import annotations

import numpy as np
import pytest
from engine_invariants import check_consistency, run_checked

from llmpack.runtime.engine.detokenizer import Detokenizer
from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.engine.sampler import SequenceSampler
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.engine.sequence import Request, Sequence
from llmpack.runtime.engine.speculative import BUSY_ROWS, PROBE, NgramDrafter, SpecState

REPLY = [f"w{i}" for i in range(40)]     # the scripted model's answer: 40 distinct pieces


@pytest.fixture(scope="module")
def quoting_model(tmp_path_factory):
    """A model that answers with REPLY: its prompt below quotes REPLY first, as a document would."""
    from server_fixtures import write_scripted_model

    return write_scripted_model(tmp_path_factory.mktemp("quoting") / "quoting.gguf", [p + " " for p in REPLY])


def engine_for(model, speculative: str, max_num_seqs: int = 8) -> LLMEngine:
    return LLMEngine(EngineConfig(str(model), n_ctx=1024, max_num_seqs=max_num_seqs, gpu_layers=0,
                                  speculative=speculative), background=False)


def generate(eng: LLMEngine, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
    streams = [eng.add_request(p, params) for p in prompts]
    run_checked(eng)
    return [s.request.seqs[0].output_token_ids for s in streams]


def test_a_quoted_reply_is_drafted_accepted_and_unchanged(quoting_model):
    off, on = engine_for(quoting_model, "off"), engine_for(quoting_model, "ngram")
    try:
        nl = on.tokenize("<|im_start|>assistant\n", add_special=False)[-1]
        reply_ids = list(range(on.n_vocab - len(REPLY), on.n_vocab))
        prompt = on.tokenize("Quote this:", add_special=True) + reply_ids + on.tokenize(" thanks", add_special=False) + [nl]
        params = SamplingParams(temperature=0, max_tokens=60)
        want = generate(off, [prompt], params)
        steps_before = on.steps
        got = generate(on, [prompt], params)
        assert got == want and got[0][:len(REPLY)] == reply_ids
        assert on.drafter.accepted_total >= len(REPLY) - 10    # all but the first tokens and the tail
        assert on.steps - steps_before < len(REPLY) // 3, "accepted drafts should save most of the steps"
    finally:
        off.shutdown()
        on.shutdown()


def test_greedy_output_is_identical_with_drafts_on_and_off(tiny_model):
    """Random weights: drafts are mostly rejected, so this checks that rejected drafts leave no
    trace (their KV cells are removed; the engine invariants hold after every step)."""
    off, on = engine_for(tiny_model, "off"), engine_for(tiny_model, "ngram")
    try:
        words = "the cat sat on the mat and the dog sat on the log " * 6
        prompts = [on.tokenize(words + f"story {i}:") for i in range(3)]
        params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
        want = generate(off, prompts, params)
        got = generate(on, prompts, params)
        assert on.drafter.drafted_total > 0
        assert got == want
        check_consistency(on)
    finally:
        off.shutdown()
        on.shutdown()


def fake_sequence(params: SamplingParams, tokens: list[int], seed: int) -> Sequence:
    req = Request("r", None, tokens[:2], params, seed)
    seq = Sequence(request=req, index=0, token_ids=list(tokens), num_prompt_tokens=2,
                   sampler=SequenceSampler(params, seed), detok=Detokenizer([]))
    seq.spec = SpecState(np.random.default_rng(seed))
    return seq


def chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    keep = expected > 0
    assert counts[~keep].sum() == 0, "a token outside the target's support was emitted"
    return float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())


@pytest.mark.parametrize("top_k", [0, 4])
def test_rejection_sampling_keeps_the_target_distribution(top_k):
    """Vocabulary of 8; draft [3, 5]. The first emitted token must follow the target's
    distribution of row 0 (top_k applied), and - given the draft's 3 was accepted - the second
    must follow row 1's. Chi-square against the 0.1% critical value (df <= 7: 24.3)."""
    rng = np.random.default_rng(0)
    rows = [rng.normal(0, 1.5, 8).astype(np.float32) for _ in range(3)]
    rows[0][3] += 1.0                  # the draft is likely, not certain
    params = SamplingParams(temperature=0.8, top_k=top_k, max_tokens=100)
    drafter = NgramDrafter("ngram", 32)
    seq = fake_sequence(params, [1, 2, 3], seed=11)
    n = 20000
    first = np.zeros(8, dtype=np.int64)
    second = np.zeros(8, dtype=np.int64)
    for _ in range(n):
        out = drafter.verify(seq, [3, 5], [r.copy() for r in rows])
        first[out[0]] += 1
        if out[0] == 3:
            second[out[1]] += 1

    def target(row):
        z = row.astype(np.float64) / 0.8
        if top_k:
            z[np.argsort(-z)[top_k:]] = -np.inf
        p = np.exp(z - z.max())
        return p / p.sum()

    assert chi2(first, target(rows[0])) < 24.3
    assert second.sum() > 2000 and chi2(second, target(rows[1])) < 24.3
    assert 0 < drafter.accepted_total < drafter.drafted_total


def test_auto_stops_drafting_when_the_batch_is_busy_or_acceptance_is_low():
    params = SamplingParams(temperature=0, max_tokens=100)
    seq = fake_sequence(params, [7, 8, 9, 7, 8], seed=1)
    auto = NgramDrafter("auto", 32)
    auto.start_step(num_running=1)
    assert auto.draft(seq, room=100) == [9, 7, 8]    # "7 8" was seen before: what followed it (a full probe: no costs known)
    auto.start_step(num_running=BUSY_ROWS + 1)
    assert auto.draft(seq, room=100) == []
    forced = NgramDrafter("ngram", 32)
    forced.start_step(num_running=BUSY_ROWS + 1)
    assert forced.draft(seq, room=100) == [9, 7, 8]
    auto._record(seq.spec, PROBE, 0)                         # nothing accepted in a whole probe
    auto.start_step(num_running=1)
    assert seq.spec.off and auto.draft(seq, room=100) == []
    off = NgramDrafter("off", 32)
    off.start_step(num_running=1)
    assert off.draft(fake_sequence(params, [7, 8, 9, 7, 8], seed=1), room=100) == []


def test_auto_drafts_only_where_the_measured_cost_of_a_row_lets_drafts_pay():
    """Where each logits row costs as much as the step (a loaded CPU with a large vocabulary), no
    draft can pay, even one certain to be accepted: auto drafts nothing but a full-length probe
    now and then. On a quiet CPU the cost is a staircase with steps of four rows (measured): a
    draft fills whole blocks, as long as acceptance pays for it, and free chat (0.5) drafts nothing. Where rows are
    nearly free (a GPU), it drafts as far as the match goes."""
    from llmpack.runtime.engine.speculative import MAX_DRAFT, PROBE_EVERY, geometric_gain

    params = SamplingParams(temperature=0, max_tokens=100)
    cpu = NgramDrafter("auto", 32)
    for _ in range(3):
        cpu.observe_step(1, False, 20.0)       # every row costs a whole step: 9 rows, 180 ms
        cpu.observe_step(9, True, 180.0)
        cpu.observe_step(32, False, 150.0)    # a busy server's steps: not where drafting is decided
    seq = fake_sequence(params, [7, 8, 9, 7, 8], seed=1)
    cpu.start_step(num_running=1)
    assert cpu.draft(seq, room=100) == []
    assert cpu.cost.best_draft(1, geometric_gain(0.99), 8) == 0           # not even with near-certain acceptance
    cpu.steps = cpu.last_draft_step + PROBE_EVERY - 1       # a probe keeps the cost of rows measured
    cpu.start_step(num_running=1)
    assert cpu.draft(seq, room=100) == [9, 7, 8]

    fresh = NgramDrafter("auto", 32)    # nothing measured yet: a probe of a full draft
    fresh.start_step(num_running=1)
    assert fresh.draft(fake_sequence(params, [7, 8, 9, 7, 8], seed=1), room=100) == [9, 7, 8]
    assert fresh.cost.best_draft(1, geometric_gain(0.9), MAX_DRAFT) == MAX_DRAFT
    fresh.observe_step(1, False, 12.0)
    fresh.observe_step(2, True, 25.0)   # only a short draft's cost known: the full one is probed
    assert fresh.cost.best_draft(1, geometric_gain(0.9), MAX_DRAFT) == MAX_DRAFT

    quiet = NgramDrafter("auto", 32)   # Gemma 3 on a quiet 2-core Xeon: four rows at a time, leftovers alone
    staircase = ((1, 12.0), (2, 26.6), (3, 43.6), (4, 37.2), (5, 53.0), (8, 47.6), (9, 65.9), (12, 69.2),
                 (16, 78.5), (17, 103.0))
    for rows, ms in staircase:
        quiet.observe_step(rows, rows > 1, ms)
    assert quiet.cost.estimate(6) == pytest.approx(53.0 + (47.6 - 53.0) / 3)
    assert quiet.cost.best_draft(1, geometric_gain(0.97), MAX_DRAFT) == 15    # quoting: 16 rows, not 17
    assert quiet.cost.best_draft(1, geometric_gain(0.9), MAX_DRAFT) == 7      # 8 rows cost less than 5 or 9
    assert quiet.cost.best_draft(1, geometric_gain(0.5), MAX_DRAFT) == 0
    assert quiet.cost.best_draft(2, geometric_gain(0.97), MAX_DRAFT) in (2, 6, 10, 14)   # whole blocks with two sequences

    gpu = NgramDrafter("auto", 32)
    for _ in range(3):
        gpu.observe_step(1, False, 20.0)       # nine rows cost 10 % more than one
        gpu.observe_step(9, True, 22.0)
    gpu.start_step(num_running=1)
    assert gpu.draft(fake_sequence(params, [7, 8, 9, 7, 8], seed=1), room=100) == [9, 7, 8]
    assert gpu.cost.best_draft(1, geometric_gain(0.01), 8) == 0            # a sequence that is rarely right does not draft


def test_past_drafts_predict_a_drafts_gain_where_acceptance_comes_in_runs():
    """A draft refused after a tokens would have given min(a, k) of k; one accepted in full gave at
    least its length and is extended past it with the acceptance rate."""
    from llmpack.runtime.engine.speculative import recorded_gain

    gain = recorded_gain([(15, 3), (15, 15), (7, 7)], p=0.5)
    assert gain(3) == pytest.approx(3.0)
    assert gain(15) == pytest.approx((3 + 15 + 7 + sum(0.5 ** i for i in range(1, 9))) / 3)
    assert gain(7) == pytest.approx((3 + 7 + 7) / 3)

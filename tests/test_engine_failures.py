"""A failed step fails only its own sequences: with 8 running and 8 queued, one llama_decode that
fails ends (or, when transient, retries) the 8 it held, and the other 8 finish normally. The
engine stays up, and its bookkeeping stays consistent after every step."""
from __future__ import annotations

import threading

import pytest
from engine_invariants import check_consistency
from test_engine import assert_same_or_near_tie

from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.engine.model_runner import DecodeError
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.llm import collect


@pytest.fixture()
def engine(tiny_model):
    eng = LLMEngine(EngineConfig(str(tiny_model), n_ctx=2048, max_num_seqs=8, gpu_layers=0, speculative="off"))
    eng.on_step = check_consistency
    yield eng
    eng.shutdown()


def fail_once_when_full(engine: LLMEngine, error: Exception) -> threading.Event:
    """Make the first llama_decode that holds 8 decode rows (8 running, none prefilling) raise."""
    real = engine.runner.decode
    fired = threading.Event()

    def decode(plan):
        if not fired.is_set() and len(plan.tokens) == 8 and engine.scheduler.num_waiting == 8:
            fired.set()
            raise error
        return real(plan)

    engine.runner.decode = decode
    return fired


def submit(engine: LLMEngine, n: int = 16, **kw):
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, **kw)
    return [engine.add_request(f"request number {i} says", params) for i in range(n)]


def test_a_failed_step_ends_only_its_own_requests(engine, capfd):
    fired = fail_once_when_full(engine, DecodeError(-3))      # a hard failure: not retried
    streams = submit(engine)
    finals = [list(s)[-1] for s in streams]
    assert fired.is_set()
    failed = [f for f in finals if f.error]
    ok = [f for f in finals if not f.error]
    assert len(failed) == 8 and len(ok) == 16 - 8
    assert all("internal engine error" in f.error and f.outputs[0].finish_reason == "abort" for f in failed)
    assert all(f.outputs[-1].finish_reason == "length" and f.num_generated_tokens == 12 for f in ok)
    # the 8 that failed were the 8 running: the 8 queued behind them are the ones that finished
    assert {f.request_id for f in ok} == {s.request_id for s in streams[8:]}
    assert engine.is_alive() and engine.failure is None and engine.stats().failed_steps_total == 1
    assert "8 of its requests were ended with an error" in capfd.readouterr().err
    engine.wait_idle()
    assert engine.stats().kv_blocks_used == 0


def test_a_transient_failure_retries_the_step_sequences_once(engine):
    fired = fail_once_when_full(engine, DecodeError(1))       # llama.cpp found no KV cells
    retried = [collect(s) for s in submit(engine, logprobs=5)]
    assert fired.is_set()
    assert all(r.error is None and len(r.outputs[0].token_ids) == 12 for r in retried)
    assert engine.stats().num_preemptions >= 8 and engine.stats().failed_steps_total == 1
    # recomputed from their tokens, not restarted: greedy output is that of a run that never
    # failed (up to the near-ties llama.cpp's batch-dependent rounding flips, as in test_engine)
    again = [collect(s) for s in submit(engine, logprobs=5)]
    assert_same_or_near_tie([r.outputs[0] for r in again], [r.outputs[0] for r in retried])


def test_a_sequence_that_fails_twice_is_ended(engine):
    real = engine.runner.decode
    calls = {"n": 0}

    def decode(plan):
        if len(plan.tokens) == 1:       # the lone request's decode rows, every time
            calls["n"] += 1
            raise DecodeError(1)
        return real(plan)

    engine.runner.decode = decode
    final = list(engine.add_request([5, 6, 7] * 10, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)))[-1]
    assert final.error and "status 1" in final.error
    assert calls["n"] == 2                                    # failed, retried once, failed again
    assert engine.is_alive()

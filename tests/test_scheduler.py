"""Scheduler rules through the engine's real `step()`: a tiny llama.cpp model, an engine made with
background=False so the test owns the stepping thread, and the invariants checked after every
step (tests/engine_invariants.py)."""
from __future__ import annotations

import pytest
from engine_invariants import check_consistency, run_checked
from helpers.sampling import greedy

from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.engine.sequence import SequenceStatus


def make_engine(model, n_ctx: int = 512, max_num_seqs: int = 4, **kw) -> LLMEngine:
    return LLMEngine(EngineConfig(str(model), n_ctx=n_ctx, max_num_seqs=max_num_seqs, gpu_layers=0, **kw),
                     background=False)


@pytest.fixture()
def small(tiny_model):
    """256 KV cells = 16 blocks of 16 tokens: too few for the workloads below."""
    eng = make_engine(tiny_model, n_ctx=256, max_num_seqs=4, speculative="off")
    yield eng
    eng.shutdown()


def prompt(i: int, n: int = 40) -> list[int]:
    """n distinct token ids, different for each i: nothing is shared through the prefix cache."""
    return [300 + (i * 53 + j * 7) % 200 for j in range(n)]


def test_step_returns_the_outputs_it_emitted(tiny_model):
    eng = make_engine(tiny_model)
    try:
        stream = eng.add_request(prompt(0, 10), greedy(3))
        first = eng.step()                        # prefill and the first token
        assert [o.request_id for o in first] == [stream.request_id]
        assert len(first[0].outputs[0].token_ids) == 1 and not first[0].finished
        rest = [eng.step() for _ in range(2)]
        assert rest[-1][0].finished and rest[-1][0].outputs[0].finish_reason == "length"
        assert eng.step() == [] and not eng.scheduler.has_work()
        assert stream.get(timeout=1) is first[0]  # the stream got the same objects
        check_consistency(eng)
    finally:
        eng.shutdown()


def test_preempted_sequences_count_their_prompt_once_in_the_prefix_cache_figures(small):
    # 4 prompts of 40 tokens need 3 blocks now and 5 at the end: 16 blocks can't hold them
    streams = [small.add_request(prompt(i), greedy(40)) for i in range(4)]
    run_checked(small)
    assert small.scheduler.num_preemptions > 0, "the pool was meant to be too small for all four"
    outs = [s.request.seqs[0] for s in streams]
    assert all(s.finish_reason == "length" and s.num_output_tokens == 40 for s in outs)
    # nothing was cached before these prompts came: their recomputes must not look like cache hits
    assert [s.num_cached_tokens for s in outs] == [0, 0, 0, 0]
    assert small.bm.prefix_queries == 4 * 40 and small.bm.prefix_hits == 0
    assert sum(s.num_preemptions for s in outs) == small.scheduler.num_preemptions


def test_a_cached_prompt_counts_as_one_hit_even_when_preempted(small):
    small.add_request(prompt(0), greedy(1))
    run_checked(small)                            # leaves the prompt's two full blocks cached
    again = [small.add_request(prompt(0), greedy(60)) for _ in range(4)]   # 5 blocks of their own each
    run_checked(small)
    seqs = [s.request.seqs[0] for s in again]
    assert small.scheduler.num_preemptions > 0
    assert all(s.num_cached_tokens <= 32 for s in seqs), [s.num_cached_tokens for s in seqs]
    assert small.bm.prefix_queries == 40 + 4 * 40
    assert small.bm.prefix_hits == sum(s.num_cached_tokens for s in seqs) > 0


def test_fork_runs_the_child_on_the_parent_prompt_or_queues_it(tiny_model):
    eng = make_engine(tiny_model, max_num_seqs=2, speculative="off")
    try:
        stream = eng.add_request(prompt(1, 20), SamplingParams(n=3, temperature=1.0, max_tokens=5, seed=3))
        eng.step()                                # the prompt, then samples 1 and 2 fork from it
        parent, child, extra = stream.request.seqs
        assert child.status is SequenceStatus.RUNNING and child.num_computed_tokens == parent.num_computed_tokens
        assert child.block_table[0] == parent.block_table[0]          # the full block is shared
        assert extra.status is SequenceStatus.WAITING and extra.llama_seq == -1   # max_num_seqs=2: no room
        check_consistency(eng)
        run_checked(eng)
        final = [o for o in stream]
        assert final[-1].finished and {s.num_output_tokens for s in stream.request.seqs} == {5}
    finally:
        eng.shutdown()


def test_a_burst_of_prompts_is_admitted_in_one_step_and_a_long_one_is_chunked(tiny_model):
    eng = make_engine(tiny_model, n_ctx=4096, max_num_seqs=32, speculative="off")
    try:
        sched = eng.scheduler
        assert sched.step_budget == eng.runner.n_batch == 2048 and sched.prefill_chunk == eng.runner.n_ubatch == 512
        for i in range(32):                       # 32 x 40 = 1,280 tokens: over 512, under 2,048
            eng.add_request(prompt(i), greedy(2))
        eng.step()
        assert sched.num_running == 32 and sched.num_waiting == 0
        assert all(s.num_output_tokens == 1 for s in sched.running)
        run_checked(eng)
        long = eng.add_request([300 + j % 200 for j in range(1300)], greedy(1), prompt_progress=True)
        done = [out.num_processed_prompt_tokens for _ in range(3) for out in eng.step()]
        assert done == [512, 1024, 1300] and long.request.seqs[0].is_finished
    finally:
        eng.shutdown()


def test_the_scheduler_finishes_on_a_stop_token_and_on_max_tokens(tiny_model):
    eng = make_engine(tiny_model, speculative="off")
    try:
        probe = eng.add_request(prompt(2, 12), greedy(6))
        run_checked(eng)
        tokens = probe.request.seqs[0].output_token_ids
        stop_at = tokens[3]
        k = tokens.index(stop_at)
        stopped = eng.add_request(prompt(2, 12), greedy(6, stop_token_ids=[stop_at]))
        run_checked(eng)
        seq = stopped.request.seqs[0]
        assert seq.finish_reason == "stop" and seq.stop_reason == stop_at and seq.output_token_ids == tokens[:k + 1]
        assert probe.request.seqs[0].finish_reason == "length"
    finally:
        eng.shutdown()


def test_step_refuses_a_thread_that_does_not_own_the_engine(tiny_model):
    eng = LLMEngine(EngineConfig(str(tiny_model), n_ctx=256, max_num_seqs=2, gpu_layers=0))
    try:
        with pytest.raises(RuntimeError, match="background=False"):
            eng.step()
    finally:
        eng.shutdown()


def test_requests_with_different_cache_salts_never_share_prefix_blocks(tiny_model):
    eng = make_engine(tiny_model, speculative="off")
    try:
        def cached(salt):
            stream = eng.add_request(prompt(5, 70), greedy(2), cache_salt=salt)
            run_checked(eng)
            return stream.request.seqs[0].num_cached_tokens

        assert cached("alice") == 0
        assert cached("bob") == 0                 # same prompt, another salt: computed again
        assert cached(None) == 0                  # no salt is a namespace of its own
        assert cached("alice") == cached("bob") == cached(None) == 64   # each finds its own
    finally:
        eng.shutdown()

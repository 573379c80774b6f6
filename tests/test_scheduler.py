"""Scheduler rules on their own: the real Scheduler and BlockManager, with a recorder standing
in for llama.cpp's memory and a fixed next token standing in for the model."""
from __future__ import annotations

from test_block_manager import RecordingKV, make_seq

from llmpack.runtime.engine.block_manager import BlockManager
from llmpack.runtime.engine.scheduler import Scheduler
from llmpack.runtime.engine.sequence import Sequence


def step(sched: Scheduler, kv: RecordingKV, max_tokens: int) -> None:
    """One engine step without a model: compute the scheduled chunks, append token 0 to every
    sequence that samples, finish those that reached max_tokens."""
    for c in sched.schedule():
        kv.compute(c.seq, c.num_tokens)
        sched.bm.commit(c.seq)
        if c.samples:
            c.seq.token_ids.append(0)
            if c.seq.num_output_tokens >= max_tokens:
                sched.finish(c.seq)


def make_scheduler(num_blocks: int, max_num_seqs: int) -> tuple[RecordingKV, BlockManager, Scheduler]:
    kv = RecordingKV()
    bm = BlockManager(num_blocks=num_blocks, block_size=4, num_llama_seqs=8, kv=kv)
    return kv, bm, Scheduler(bm, max_num_seqs=max_num_seqs, token_budget=64)


def run_to_end(sched: Scheduler, kv: RecordingKV, max_tokens: int, limit: int = 1000) -> None:
    for _ in range(limit):
        if not sched.has_work():
            return
        step(sched, kv, max_tokens)
    raise AssertionError("the sequences never finished")


def test_preempted_sequences_count_their_prompt_once_in_the_prefix_cache_figures():
    kv, bm, sched = make_scheduler(num_blocks=8, max_num_seqs=4)
    # 4 prompts of 9 distinct tokens each need 3 blocks now and 5 at the end: 8 blocks can't hold them
    seqs: list[Sequence] = [make_seq([100 * i + t for t in range(1, 10)]) for i in range(4)]
    for s in seqs:
        sched.add(s)
    run_to_end(sched, kv, max_tokens=10)
    assert sched.num_preemptions > 0, "the pool was meant to be too small for all four"
    # nothing was cached before these prompts came: their recomputes must not look like cache hits
    assert [s.num_cached_tokens for s in seqs] == [0, 0, 0, 0]
    assert bm.prefix_queries == 4 * 9 and bm.prefix_hits == 0
    assert sum(s.num_preemptions for s in seqs) == sched.num_preemptions


def test_a_cached_prompt_counts_as_one_hit_even_when_preempted():
    kv, bm, sched = make_scheduler(num_blocks=8, max_num_seqs=4)
    warm = make_seq(list(range(1, 10)))
    sched.add(warm)
    run_to_end(sched, kv, max_tokens=1)          # leaves blocks [1..4], [5..8] in the cache
    again = [make_seq(list(range(1, 10))) for _ in range(4)]
    for s in again:
        sched.add(s)
    run_to_end(sched, kv, max_tokens=12)
    assert sched.num_preemptions > 0
    assert all(s.num_cached_tokens <= 8 for s in again), [s.num_cached_tokens for s in again]
    assert bm.prefix_queries == 9 + 4 * 9
    assert bm.prefix_hits == sum(s.num_cached_tokens for s in again)


def test_fork_runs_the_child_on_the_parent_prompt_or_queues_it():
    kv, bm, sched = make_scheduler(num_blocks=16, max_num_seqs=2)
    parent = make_seq(list(range(1, 10)))
    sched.add(parent)
    step(sched, kv, max_tokens=100)
    child, extra = make_seq(list(range(1, 10))), make_seq(list(range(1, 10)))
    sched.fork(parent, child)
    assert child in sched.running and child.num_computed_tokens == parent.num_computed_tokens
    sched.fork(parent, extra)                    # max_num_seqs=2: no room, so it queues
    assert extra in sched.waiting and extra.llama_seq == -1

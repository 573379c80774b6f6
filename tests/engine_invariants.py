"""The engine's bookkeeping checked against llama.cpp's real memory (engine tests only).

Call only while the engine is idle: it reads the engine thread's structures from outside."""
from __future__ import annotations

from llmpack.runtime.engine.engine import LLMEngine


def check_consistency(engine: LLMEngine) -> None:
    """Assert that the block manager's view and llama.cpp's memory agree."""
    bm, bs, runner = engine.bm, engine.config.block_size, engine.runner
    running = {s.llama_seq: s for s in engine.scheduler.running}
    refs = {b.block_id: 0 for b in bm.blocks}
    for s in running.values():
        for bid in s.block_table:
            refs[bid] += 1
    for b in bm.blocks:
        assert b.ref_count == refs[b.block_id], f"block {b.block_id}: ref {b.ref_count} != {refs[b.block_id]}"
        if b.ref_count == 0:
            in_free, in_cache = b.block_id in bm.free_block_ids, b.block_id in bm.cached_free
            assert in_free != in_cache, f"block {b.block_id} is unreferenced but free={in_free} cached={in_cache}"
            assert in_free or b.hash is not None
    assert len(bm.free_block_ids) + len(bm.cached_free) + sum(1 for v in refs.values() if v) == bm.num_blocks
    free_ids = list(bm.free_llama_seqs)
    assert len(free_ids) == len(set(free_ids)), "a llama.cpp sequence id is free twice"
    assert not set(free_ids) & (set(running) | set(bm.zombies)), "a free sequence id is still in use"
    assert len(free_ids) + len(running) + len(bm.zombies) == len(bm.held_by), "a sequence id went missing"
    for sid, held in bm.held_by.items():
        pos_max = runner.seq_pos_max(sid)
        if sid in running:
            assert pos_max == running[sid].num_computed_tokens - 1, (sid, pos_max, running[sid].num_computed_tokens)
        elif held:
            assert sid in bm.zombies
            assert pos_max == max(bm.blocks[b].index for b in held) * bs + bs - 1, (sid, pos_max)
        else:
            assert pos_max == -1, f"llama.cpp sequence {sid} holds cells the block manager doesn't know"

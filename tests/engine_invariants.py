"""The engine's bookkeeping checked against llama.cpp's real memory (engine tests only).

Call only between steps: while the engine is idle, or from the thread that steps it
(background=False), where `checked_steps` runs it after every step."""
from __future__ import annotations

from llmpack.runtime.engine.engine import LLMEngine


def check_consistency(engine: LLMEngine) -> None:
    """Assert that the block manager's view and llama.cpp's memory agree."""
    bm, bs, runner = engine.bm, engine.config.block_size, engine.runner
    running = {s.llama_seq: s for s in engine.scheduler.running}
    assert len(running) == len(engine.scheduler.running), "two running sequences share a llama.cpp id"
    mrope = engine.mm is not None and engine.mm.projector.mrope
    refs = {b.block_id: 0 for b in bm.blocks}
    for s in running.values():
        assert len(s.block_table) * bs >= s.num_computed_tokens, "computed tokens outside the block table"
        for bid in s.block_table:
            refs[bid] += 1
    queued = list(bm.free_queue)
    assert len(queued) == len(set(queued)) == len(bm.free_queue), "the free queue holds a block twice"
    seen_cached = False
    for b in queued:   # blocks that cache nothing first, then cached ones
        assert b.queued and b.ref_count == 0
        assert not (seen_cached and b.hash is None), f"block {b.block_id} caches nothing but sits behind cached ones"
        seen_cached = seen_cached or b.hash is not None
    for b in bm.blocks:
        assert b.ref_count == refs[b.block_id], f"block {b.block_id}: ref {b.ref_count} != {refs[b.block_id]}"
        assert (b.ref_count == 0) == b.queued, f"block {b.block_id}: ref {b.ref_count}, free={b.queued}"
        if b.hash is not None:
            assert bm.hash_to_block.get(b.hash) is b and b.holders, f"cached block {b.block_id} is lost"
            assert b.ref_count or len(b.holders) == 1, f"unreferenced block {b.block_id} held by {b.holders}"
        else:
            assert b.ref_count or not b.holders, f"free block {b.block_id} still held by {b.holders}"
    idle = list(bm.idle_ids)
    assert len(idle) == len(set(idle)), "a llama.cpp sequence id is free twice"
    assert not set(idle) & (set(running) | set(bm.parked_ids)), "a free sequence id is still in use"
    assert len(idle) + len(running) + len(bm.parked_ids) == len(bm.held_by), "a sequence id went missing"
    for sid, held in bm.held_by.items():
        pos_max = runner.seq_pos_max(sid)
        if sid in running:
            s = running[sid]    # positions are token indices, but after and inside M-RoPE images
            want = s.position(s.num_computed_tokens - 1) if s.num_computed_tokens else -1
            assert pos_max == want, (sid, pos_max, s.num_computed_tokens)
        elif held:
            assert sid in bm.parked_ids
            assert all(bm.blocks[b].ref_count == 0 or len(bm.blocks[b].holders) > 1 for b in held)
            # the cells of the last block that has positions of its own (inside an M-RoPE image a
            # block has none) end right before that block's end position, or at the image's one
            last = max((bm.blocks[b] for b in held if bm.blocks[b].pos1 > bm.blocks[b].pos0),
                       key=lambda b: b.pos1, default=None)
            if last is None:   # only blocks inside an M-RoPE image whose last block was dropped
                assert mrope and pos_max == -1, (sid, pos_max)
                continue
            assert last.pos0 <= pos_max < last.pos1, (sid, pos_max)
            if not mrope:   # without M-RoPE exactly to the block's end
                assert pos_max == last.pos1 - 1 == last.index * bs + bs - 1, (sid, pos_max)
        else:
            assert pos_max == -1, f"llama.cpp sequence {sid} holds cells the block manager doesn't know"


def run_checked(engine: LLMEngine, limit: int = 10_000) -> int:
    """Step an engine made with background=False until it is idle, checking the invariants after
    every step. Returns the number of steps."""
    for n in range(limit):
        if not engine.scheduler.has_work() and not engine._pending:
            return n
        engine.step()
        check_consistency(engine)
    raise AssertionError("the engine never became idle")

"""Block-manager rules for M-RoPE images on their own, against a stand-in for llama.cpp's memory
that keeps every cell (an M-RoPE image's cells all share one position, so positions alone do not
count them): the block manager must never leave llama.cpp holding cells its blocks do not count,
and a block must never be copied from an id that lost the image's cells."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

from llmpack.runtime.engine.block_manager import BlockManager
from llmpack.runtime.engine.detokenizer import Detokenizer
from llmpack.runtime.engine.sequence import Sequence
from llmpack.runtime.engine.media import MEDIA_TOKEN, MediaSpan, MultimodalPrompt

BS = 4


class CellKV:
    """llama_memory_seq_* over real cells: each cell has a position and the ids holding it; seq_cp
    shares a cell, seq_rm takes ids off, and a cell no id holds is free."""

    def __init__(self) -> None:
        self.cells: dict[int, tuple[int, set[int]]] = {}
        self._ids = itertools.count()

    def seq_rm(self, s, p0, p1):
        for c, (pos, held) in list(self.cells.items()):
            if (p0 < 0 or pos >= p0) and (p1 < 0 or pos < p1):
                held.discard(s)
                if not held:
                    del self.cells[c]

    def seq_cp(self, src, dst, p0, p1):
        for pos, held in self.cells.values():
            if src in held and p0 <= pos < p1:
                held.add(dst)

    def seq_pos_max(self, s):
        return max((pos for pos, held in self.cells.values() if s in held), default=-1)

    def held(self, s) -> list[int]:
        return sorted(pos for pos, held in self.cells.values() if s in held)

    def compute(self, seq: Sequence, n: int) -> None:
        for i in range(seq.num_computed_tokens, seq.num_computed_tokens + n):
            self.cells[next(self._ids)] = (seq.position(i), {seq.llama_seq})
        seq.num_computed_tokens += n


def image_seq(before: list[int], rows: int, grid: tuple[int, int], after: list[int]) -> Sequence:
    """A prompt of text, one M-RoPE image of `rows` rows (n_pos = max(grid)) and text."""
    img = MediaSpan(b"picture", len(before), rows, max(grid), 0, False, grid=grid)
    ids = before + [MEDIA_TOKEN] * rows + after
    return Sequence(request=SimpleNamespace(mm=MultimodalPrompt(ids, [img])), index=0, token_ids=ids,
                    num_prompt_tokens=len(ids), sampler=None, detok=Detokenizer([]))


def admit(bm: BlockManager, kv: CellKV, seq: Sequence) -> None:
    assert bm.assign_llama_seq(seq)
    hits = bm.match_prefix(seq)
    n = seq.num_tokens - len(hits) * BS
    assert bm.allocate(seq, hits, n)
    kv.compute(seq, n)
    bm.commit(seq)


def check_counted(bm: BlockManager, kv: CellKV) -> None:
    """llama.cpp never holds more cells than the blocks some id holds (referenced or kept cached)
    can: a block nobody holds is one the block manager hands out as empty, and with uncounted
    cells llama_decode runs out of them before the scheduler does."""
    held = sum(1 for b in bm.blocks if b.holders)
    assert len(kv.cells) <= held * BS, (len(kv.cells), held)


def test_a_recomputed_image_leaves_no_cells_behind_when_its_copies_are_freed():
    """A's prompt is cached; B's shares text and picture but differs in the image's last block, so
    its hit is cut back to before the image and B computes the image again, in blocks identical to
    A's cached ones (not cached twice). Freeing B must take all of B's image cells with it, though
    the image's last block of B - different words - is cacheable: else those 12 cells stay in
    llama.cpp, counted by no block, until the context is full."""
    kv = CellKV()
    bm = BlockManager(num_blocks=16, block_size=BS, num_llama_seqs=4, kv=kv)
    a = image_seq([1, 2, 3], 12, (4, 3), [5, 6, 7, 8])      # image rows 3..14, n_pos 4
    admit(bm, kv, a)
    b = image_seq([1, 2, 3], 12, (4, 3), [9, 6, 7, 8])      # differs at token 15, in block 3
    assert len(bm.match_prefix(b)) == 0                       # cut back from 3 blocks to before the image
    admit(bm, kv, b)
    assert kv.held(b.llama_seq) == [0, 1, 2] + [3] * 12 + [7, 8, 9, 10]
    check_counted(bm, kv)
    bm.free(a)
    bm.free(b)
    check_counted(bm, kv)
    # and the same picture again hits A's cached image, copied with all of its cells
    c = image_seq([1, 2, 3], 12, (4, 3), [5, 6, 7, 8, 9])
    assert len(bm.match_prefix(c)) == 4
    admit(bm, kv, c)
    assert kv.held(c.llama_seq) == [0, 1, 2] + [3] * 12 + [7, 8, 9, 10, 11]
    check_counted(bm, kv)


def test_evicting_a_block_inside_the_image_takes_the_image_and_its_last_block_out_of_the_cache():
    """The image's rows in earlier blocks have their cells in its last block's range: evicting one
    of those blocks (LRU order usually evicts the last block first, but hits reorder it) removes
    the image's cells from the id that kept them, and the last block - which a hit would copy from
    that id - leaves the cache with them."""
    kv = CellKV()
    bm = BlockManager(num_blocks=8, block_size=BS, num_llama_seqs=4, kv=kv)
    a = image_seq([1, 2, 3], 12, (4, 3), [5, 6, 7, 8, 9, 10])   # 5 full blocks (cached) and 1 token
    admit(bm, kv, a)
    sid, table = a.llama_seq, list(a.block_table)
    assert [(bm.blocks[b].pos0, bm.blocks[b].pos1, bm.blocks[b].image_pos) for b in table] == \
        [(0, 3, 3), (3, 3, 3), (3, 3, 3), (3, 8, -1), (8, 12, -1), (12, 16, -1)]
    bm.free(a)
    assert len(bm.hash_to_block) == 5 and kv.held(sid).count(3) == 12
    check_counted(bm, kv)
    bm._evict(bm.blocks[table[1]])                 # a block wholly inside the image
    assert kv.held(sid) == [0, 1, 2, 8, 9, 10, 11]  # the image's cells and its last block's text left
    assert bm.blocks[table[3]].hash is None and bm.blocks[table[4]].hash is not None
    check_counted(bm, kv)
    again = image_seq([1, 2, 3], 12, (4, 3), [5, 6, 7, 8, 9, 10])
    assert bm.match_prefix(again) == []            # block 0 is cached, but ends inside the image
    admit(bm, kv, again)
    assert kv.held(again.llama_seq) == [0, 1, 2] + [3] * 12 + list(range(7, 13))
    check_counted(bm, kv)

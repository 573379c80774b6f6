"""Paged KV-cache bookkeeping over llama.cpp's unified cell pool.

llama.cpp keeps one pool of n_ctx KV cells (kv_unified=True); a cell can belong to several
sequence ids at once, and `seq_cp` shares cells rather than copying them. We split the
pool into fixed-size blocks of `block_size` cells for accounting, vLLM-style:

- every running Sequence has a block table; block k holds tokens [k*bs, (k+1)*bs), whose cells
  llama.cpp keeps at positions block.pos0..pos1 (the same numbers, except after and inside M-RoPE
  images: docs/ARCHITECTURE.md, "Images and positions in the block tables");
- blocks are allocated on demand and reference-counted; a block shared by several
  sequences (a cached prefix, or a prompt shared by n samples) is counted once;
- a full block is keyed by a sha256 digest chained over the previous block's digest and its
  own token ids, and registered in `hash_to_block` (the prefix cache). The key stands for the
  whole prefix up to the block's end, so it must be collision-resistant: with Python's 64-bit
  `hash()` one user could craft a prompt whose chain collides with another's and have the
  other's later blocks served on top of their own prefix (vLLM GHSA-rm76-4mrf-v9r8). A
  request's `cache_salt` seeds the chain, so requests with different salts never share blocks;
- every block no sequence references is in the one `free_queue` (free_block_queue.py):
  blocks caching nothing in front, cached ones behind in LRU order; taking a cached block
  evicts it.

Cached cells are not free in one way vLLM's are: llama.cpp attends over every cell up to the
highest one in use, so a long prompt's prefill pays for every cached cell in the pool, even for a
quarter of it kept (docs/BENCHMARKS.md, the 2,000-word TTFT). So before each chunk of a prompt
with at least PREFILL_TRIM_TOKENS still to read, every unreferenced cached block is evicted, as
llama-server moves idle slots' cells out of its KV cache before a new prompt. (The prompt's rest,
not the chunk: beside decoding streams a document is read ~80 tokens a step on 2 cores, and
counting by chunk kept five documents' cells, ~8,000, in every step's attention; issue 48.) The prompt's own hits are referenced by
then, so a person continuing a long chat keeps all of it; small chunks (chats sharing a system
prompt, each adding a message) evict nothing.

A block's cells live in llama.cpp only as members of some sequence id, so each block records
its `holders`. When a sequence ends, its id stays a holder of the cached blocks nobody else
holds: the id is *parked* (`parked_ids`) until those blocks are evicted or the id is needed
again; reusing a cached block is `seq_cp(holder, new_seq, block.pos0, block.pos1)`. Because our count
of used cells is never below llama.cpp's, llama.cpp never runs out of cells before we do.
"""
from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from typing import Protocol

from llmpack.runtime.engine.free_block_queue import Block, FreeBlockQueue
from llmpack.runtime.engine.sequence import Sequence

__all__ = ["Block", "BlockManager", "KVOps", "chain_hash", "prefix_root"]


class KVOps(Protocol):
    def seq_rm(self, seq_id: int, p0: int, p1: int) -> None: ...
    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None: ...
    def seq_pos_max(self, seq_id: int) -> int: ...


PREFILL_TRIM_TOKENS = 256   # a prompt with this much left to read first evicts the unreferenced cache

_ROOT = b"llmpack-prefix-root"


def prefix_root(cache_salt: str | None) -> bytes:
    """What the first block's digest chains from: a constant, or the salt's own digest, so two
    salts (or a salt and none) never produce the same chain for the same tokens."""
    if cache_salt is None:
        return _ROOT
    return hashlib.sha256(b"llmpack-prefix-salt\0" + cache_salt.encode("utf-8")).digest()


def chain_hash(prev: bytes | None, token_ids: tuple[int, ...], extra: bytes = b"") -> bytes:
    """sha256(previous block's digest || this block's token ids as int32 || extra): names the
    whole prefix. `extra` names what the ids cannot: the pictures behind an image's placeholder
    ids (MultimodalPrompt.block_extra). About a microsecond per 16-token block
    (benchmarks/prefix_hash.py)."""
    h = hashlib.sha256(prev or _ROOT)
    h.update(array("i", token_ids).tobytes())
    if extra:
        h.update(b"\0images" + extra)
    return h.digest()


def block_extra(seq: Sequence, k: int, block_size: int) -> bytes:
    mm = getattr(seq.request, "mm", None)   # unit tests' sequences may have no request
    return mm.block_extra(k, block_size) if mm is not None else b""


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, num_llama_seqs: int, kv: KVOps,
                 enable_prefix_cache: bool = True) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.kv = kv
        self.enable_prefix_cache = enable_prefix_cache
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.hash_to_block: dict[bytes, Block] = {}
        self.idle_ids: deque[int] = deque(range(num_llama_seqs))    # hold no cells
        self.parked_ids: OrderedDict[int, None] = OrderedDict()     # ended, still holding cached blocks; oldest first
        self.held_by: dict[int, set[int]] = {s: set() for s in range(num_llama_seqs)}
        self.prefix_queries = 0   # prompt tokens looked up
        self.prefix_hits = 0      # of those, found cached
        self.peak_used_blocks = 0

    # ---- capacity ----------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks registered in the prefix cache, referenced or not."""
        return len(self.hash_to_block)

    # ---- llama.cpp sequence ids ---------------------------------------------------------
    def assign_llama_seq(self, seq: Sequence) -> bool:
        if not self.idle_ids and self.parked_ids:
            self._reclaim(next(iter(self.parked_ids)))
        if not self.idle_ids:
            return False
        seq.llama_seq = self.idle_ids.popleft()
        return True

    def release_llama_seq(self, seq: Sequence) -> None:
        """Give back an id that holds nothing yet (admission failed)."""
        assert not self.held_by[seq.llama_seq]
        self.idle_ids.appendleft(seq.llama_seq)
        seq.llama_seq = -1

    def _reclaim(self, sid: int) -> None:
        """Un-park an id: its cached blocks that no one else holds are evicted."""
        for bid in list(self.held_by[sid]):
            block = self.blocks[bid]
            if sid not in block.holders:    # dropped with an M-RoPE image on the way (_drop_image)
                continue
            if len(block.holders) > 1:
                self._drop_holder(block, sid)
            else:
                self._evict(block)          # un-parks sid once it holds nothing
        self._unpark_if_empty(sid)          # every block was shared with another holder: no evict un-parked it

    # ---- prefix cache -------------------------------------------------------------------
    def match_prefix(self, seq: Sequence) -> list[int]:
        """Cached blocks covering the longest prefix of seq (at least one token is left to
        compute, so the last position still produces logits). No side effects."""
        if not self.enable_prefix_cache:
            return []
        bs = self.block_size
        hits: list[int] = []
        prev = prefix_root(seq.cache_salt)
        for k in range((seq.num_tokens - 1) // bs):
            tokens = tuple(seq.token_ids[k * bs:(k + 1) * bs])
            h = chain_hash(prev, tokens, block_extra(seq, k, bs))
            block = self.hash_to_block.get(h)
            if block is None or block.token_ids != tokens:
                break
            hits.append(block.block_id)
            prev = h
        mm = getattr(seq.request, "mm", None)
        while hits and mm is not None and mm.resumable(len(hits) * bs) < len(hits) * bs:
            hits.pop()                     # not into an M-RoPE image: its rows are decoded whole
        return hits

    def note_lookup(self, seq: Sequence, num_hit_blocks: int) -> None:
        """Record the prefix-cache lookup of seq's prompt at its first admission (hit-rate
        metric, the request's cached_tokens). Readmissions after preemption are not counted:
        they find the sequence's own blocks, and would count its tokens twice."""
        hit = num_hit_blocks * self.block_size
        self.prefix_queries += seq.num_tokens
        self.prefix_hits += hit
        seq.num_cached_tokens = hit

    def commit(self, seq: Sequence) -> None:
        """Register seq's newly filled blocks in the prefix cache."""
        if not self.enable_prefix_cache:
            return
        bs = self.block_size
        for k in range(len(seq.block_hashes), seq.num_computed_tokens // bs):
            tokens = tuple(seq.token_ids[k * bs:(k + 1) * bs])
            h = chain_hash(seq.block_hashes[-1] if seq.block_hashes else prefix_root(seq.cache_salt), tokens,
                           block_extra(seq, k, bs))
            seq.block_hashes.append(h)
            block = self.blocks[seq.block_table[k]]
            if block.hash is None and h not in self.hash_to_block:
                block.hash, block.token_ids = h, tokens
                self.hash_to_block[h] = block

    # ---- allocation ---------------------------------------------------------------------
    def allocate(self, seq: Sequence, hits: list[int], num_new_tokens: int) -> bool:
        """Reserve blocks so that `num_new_tokens` more tokens of seq fit (after sharing the
        cached `hits` at admission). Returns False, changing nothing, if they don't fit."""
        bs = self.block_size
        reused_from_free = sum(1 for b in hits if self.blocks[b].queued)
        need = max(0, -(-(seq.num_computed_tokens + len(hits) * bs + num_new_tokens) // bs)
                   - len(seq.block_table) - len(hits))
        if need > len(self.free_queue) - reused_from_free:
            return False
        for bid in hits:
            block = self.blocks[bid]
            if block.queued:
                self.free_queue.remove(block)
            block.ref_count += 1
            src = next(iter(block.holders))
            self.kv.seq_cp(src, seq.llama_seq, block.pos0, block.pos1)
            self._add_holder(block, seq.llama_seq)
            seq.block_table.append(bid)
            seq.block_hashes.append(block.hash)
        seq.num_computed_tokens += len(hits) * bs
        if num_new_tokens and seq.num_tokens - seq.num_computed_tokens >= PREFILL_TRIM_TOKENS:
            self.evict_unreferenced()     # a long prompt, even read in small chunks beside decoding streams
        for _ in range(need):
            self._append_new_block(seq)
        self.peak_used_blocks = max(self.peak_used_blocks, self.num_used_blocks)
        return True

    def evict_unreferenced(self) -> None:
        """Evict every cached block no sequence references (their cells leave llama.cpp)."""
        for block in [b for b in self.free_queue if b.hash is not None]:
            self._evict(block)

    def fork(self, parent: Sequence, child: Sequence) -> bool:
        """Share parent's computed prompt with child (n>1). Full blocks are shared by
        reference; the partial last block gets a block of the child's own, whose first
        cells are still shared in llama.cpp."""
        bs = self.block_size
        n = parent.num_computed_tokens
        full, partial = n // bs, n % bs != 0
        if partial and not self.free_queue:
            return False
        if not self.assign_llama_seq(child):
            return False
        self.kv.seq_cp(parent.llama_seq, child.llama_seq, 0, parent.position(n))
        for bid in parent.block_table[:full]:
            block = self.blocks[bid]
            block.ref_count += 1
            self._add_holder(block, child.llama_seq)
            child.block_table.append(bid)
        child.block_hashes = list(parent.block_hashes[:full])
        if partial:
            self._append_new_block(child)
        child.num_computed_tokens = n
        self.peak_used_blocks = max(self.peak_used_blocks, self.num_used_blocks)
        return True

    def free(self, seq: Sequence) -> None:
        """Release seq's blocks (finished, aborted, preempted or failed). A cached block only
        seq's id holds stays cached under that id, which is parked; every other block's cells
        leave seq's id. The tail is released first so that it is also evicted first."""
        sid = seq.llama_seq
        for bid in reversed(seq.block_table):
            block = self.blocks[bid]
            block.ref_count -= 1
            if block.hash is None or block.holders != {sid}:
                self._drop_holder(block, sid)
            if block.ref_count == 0:
                if block.hash is None:
                    self._clear(block)
                    self.free_queue.appendleft(block)
                else:
                    self.free_queue.append(block)
        seq.block_table.clear()
        seq.block_hashes.clear()
        seq.llama_seq = -1
        if self.held_by[sid]:
            self.parked_ids[sid] = None
        else:
            self.kv.seq_rm(sid, -1, -1)
            self.idle_ids.append(sid)

    # ---- internals ----------------------------------------------------------------------
    def _append_new_block(self, seq: Sequence) -> None:
        block = self.free_queue.popleft()
        if block.hash is not None:
            self._evict(block, queued=False)
        block.ref_count = 1
        block.index = k = len(seq.block_table)
        bs = self.block_size
        block.pos0, block.pos1 = seq.position(k * bs), seq.position((k + 1) * bs)
        mm = getattr(seq.request, "mm", None)
        end = (k + 1) * bs
        block.image_pos = -1 if mm is None or (start := mm.resumable(end)) == end else seq.position(start)
        self._add_holder(block, seq.llama_seq)
        seq.block_table.append(block.block_id)

    def _evict(self, block: Block, queued: bool = True) -> None:
        """Drop a cached, unreferenced block from the cache and from every id holding it; it
        moves to the front of the free queue (or is being taken from it: queued=False)."""
        assert block.ref_count == 0
        for sid in list(block.holders):
            self._drop_holder(block, sid)
            self._unpark_if_empty(sid)
        self._clear(block)
        if queued:
            self.free_queue.remove(block)
            self.free_queue.appendleft(block)

    def _unpark_if_empty(self, sid: int) -> None:
        if sid in self.parked_ids and not self.held_by[sid]:
            del self.parked_ids[sid]
            self.kv.seq_rm(sid, -1, -1)
            self.idle_ids.append(sid)

    def _clear(self, block: Block) -> None:
        if block.hash is not None and self.hash_to_block.get(block.hash) is block:
            del self.hash_to_block[block.hash]
        block.hash, block.token_ids, block.index, block.pos0, block.pos1, block.image_pos = None, (), -1, 0, 0, -1

    def _add_holder(self, block: Block, sid: int) -> None:
        block.holders.add(sid)
        self.held_by[sid].add(block.block_id)

    def _drop_holder(self, block: Block, sid: int) -> None:
        if block.pos1 > block.pos0:        # inside an M-RoPE image a block has no positions of its own
            self.kv.seq_rm(sid, block.pos0, block.pos1)
        block.holders.discard(sid)
        self.held_by[sid].discard(block.block_id)
        if block.image_pos >= 0:
            self._drop_image(sid, block.image_pos)

    def _drop_image(self, sid: int, pos: int) -> None:
        """sid stops holding some rows of the M-RoPE image at `pos`. All of the image's cells sit at
        that one position, inside the range of the image's last block: they leave sid now (else
        llama.cpp would keep cells no block of sid counts), and so does that last block, so that it
        is never copied from sid without them. A cached last block nobody else holds is evicted."""
        self.kv.seq_rm(sid, pos, pos + 1)
        last = next((b for b in map(self.blocks.__getitem__, self.held_by[sid]) if b.pos0 == pos < b.pos1), None)
        if last is None:
            return
        self._drop_holder(last, sid)
        if not last.holders and last.ref_count == 0 and last.hash is not None:
            self._clear(last)
            self.free_queue.remove(last)
            self.free_queue.appendleft(last)

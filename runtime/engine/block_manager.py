"""Paged KV-cache bookkeeping over llama.cpp's unified cell pool.

llama.cpp keeps one pool of n_ctx KV cells (kv_unified=True); a cell can belong to several
sequence ids at once, and `seq_cp` shares cells rather than copying them. We split the
pool into fixed-size blocks of `block_size` cells for accounting, vLLM-style:

- every running Sequence has a block table; block k holds positions [k*bs, (k+1)*bs);
- blocks are allocated on demand and reference-counted; a block shared by several
  sequences (a cached prefix, or a prompt shared by n samples) is counted once;
- a full block is keyed by a sha256 digest chained over the previous block's digest and its
  own token ids, and registered in `hash_to_block_id` (the prefix cache). The key stands for
  the whole prefix up to the block's end, so it must be collision-resistant: with Python's
  64-bit `hash()` one user could craft a prompt whose chain collides with another's and have
  the other's later blocks served on top of their own prefix (vLLM GHSA-rm76-4mrf-v9r8).
  A block no sequence references any more stays cached, evictable in LRU order.

A block's cells live in llama.cpp only as members of some sequence id, so each block
records its `holders`: the llama.cpp sequence ids whose memory includes its positions.
A finished sequence's id keeps holding its cached blocks (a "zombie" holder) until they
are evicted or its id is needed again; reusing a cached block is
`seq_cp(holder, new_seq, k*bs, (k+1)*bs)`. Because our count of used cells is never
below llama.cpp's, llama.cpp never runs out of cells before we do.
"""
from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Protocol

from llmpack.runtime.engine.sequence import Sequence


class KVOps(Protocol):
    def seq_rm(self, seq_id: int, p0: int, p1: int) -> None: ...
    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None: ...
    def seq_pos_max(self, seq_id: int) -> int: ...


@dataclass(slots=True, eq=False)
class Block:
    block_id: int
    ref_count: int = 0
    hash: bytes | None = None              # set once full and registered in the prefix cache
    token_ids: tuple[int, ...] = ()
    index: int = -1                        # position of this block in its sequences' tables
    holders: set[int] = field(default_factory=set)


def chain_hash(prev: bytes | None, token_ids: tuple[int, ...], extra: bytes = b"") -> bytes:
    """sha256(previous block's digest || this block's token ids as int32 || extra): names the
    whole prefix. `extra` names what the ids cannot: the pictures behind an image's placeholder
    ids (MultimodalPrompt.block_extra). About a microsecond per 16-token block
    (benchmarks/prefix_hash.py)."""
    h = hashlib.sha256(prev or b"llmpack-prefix-root")
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
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        self.cached_free: OrderedDict[int, None] = OrderedDict()   # ref 0, hashed; oldest first
        self.hash_to_block_id: dict[bytes, int] = {}
        self.free_llama_seqs: deque[int] = deque(range(num_llama_seqs))
        self.held_by: dict[int, set[int]] = {s: set() for s in range(num_llama_seqs)}
        self.zombies: OrderedDict[int, None] = OrderedDict()        # finished ids still holding cache
        self.prefix_queries = 0   # prompt tokens looked up
        self.prefix_hits = 0      # of those, found cached
        self.peak_used_blocks = 0

    # ---- capacity ----------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids) + len(self.cached_free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        total = seq.num_computed_tokens + num_new_tokens
        return max(0, -(-total // self.block_size) - len(seq.block_table))

    # ---- llama.cpp sequence ids ---------------------------------------------------------
    def assign_llama_seq(self, seq: Sequence) -> bool:
        if not self.free_llama_seqs and self.zombies:
            self._reclaim(next(iter(self.zombies)))
        if not self.free_llama_seqs:
            return False
        seq.llama_seq = self.free_llama_seqs.popleft()
        return True

    def release_llama_seq(self, seq: Sequence) -> None:
        """Give back an id that holds nothing yet (admission failed)."""
        assert not self.held_by[seq.llama_seq]
        self.free_llama_seqs.appendleft(seq.llama_seq)
        seq.llama_seq = -1

    def _reclaim(self, sid: int) -> None:
        """Free a zombie id: hand its blocks to another holder or evict them."""
        for bid in list(self.held_by[sid]):
            block = self.blocks[bid]
            if len(block.holders) > 1:
                self._drop_holder(block, sid)
            else:
                self._evict(block)
        self._free_id_if_idle(sid)

    def _free_id_if_idle(self, sid: int) -> None:
        """Free a zombie id once it holds nothing (idempotent: eviction may get there first)."""
        if sid in self.zombies and not self.held_by[sid]:
            del self.zombies[sid]
            self._release_id(sid)

    def _release_id(self, sid: int) -> None:
        self.kv.seq_rm(sid, -1, -1)
        self.free_llama_seqs.append(sid)

    # ---- prefix cache -------------------------------------------------------------------
    def match_prefix(self, seq: Sequence) -> list[int]:
        """Cached blocks covering the longest prefix of seq (at least one token is left to
        compute, so the last position still produces logits). No side effects."""
        if not self.enable_prefix_cache:
            return []
        bs = self.block_size
        limit = (seq.num_tokens - 1) // bs
        hits: list[int] = []
        prev: bytes | None = None
        for k in range(limit):
            tokens = tuple(seq.token_ids[k * bs:(k + 1) * bs])
            h = chain_hash(prev, tokens, block_extra(seq, k, bs))
            bid = self.hash_to_block_id.get(h)
            if bid is None or self.blocks[bid].token_ids != tokens:
                break
            hits.append(bid)
            prev = h
        return hits

    # ---- allocation ---------------------------------------------------------------------
    def allocate(self, seq: Sequence, hits: list[int], num_new_tokens: int) -> bool:
        """Reserve blocks so that `num_new_tokens` more tokens of seq fit (after sharing the
        cached `hits` at admission). Returns False, changing nothing, if they don't fit."""
        bs = self.block_size
        reused_from_free = sum(1 for b in hits if b in self.cached_free)
        need = max(0, -(-(seq.num_computed_tokens + len(hits) * bs + num_new_tokens) // bs)
                   - len(seq.block_table) - len(hits))
        if need > self.num_free_blocks - reused_from_free:
            return False
        if hits:
            for bid in hits:
                block = self.blocks[bid]
                self.cached_free.pop(bid, None)
                block.ref_count += 1
                src = next(iter(block.holders))
                self.kv.seq_cp(src, seq.llama_seq, block.index * bs, (block.index + 1) * bs)
                self._add_holder(block, seq.llama_seq)
                seq.block_table.append(bid)
                seq.block_hashes.append(block.hash)
            seq.num_computed_tokens += len(hits) * bs
        for _ in range(need):
            block = self._take_free_block()
            block.ref_count = 1
            block.index = len(seq.block_table)
            self._add_holder(block, seq.llama_seq)
            seq.block_table.append(block.block_id)
        self.peak_used_blocks = max(self.peak_used_blocks, self.num_used_blocks)
        return True

    def note_lookup(self, seq: Sequence, num_hit_blocks: int) -> None:
        """Record the prefix-cache lookup of seq's prompt at its first admission (hit-rate
        metric, the request's cached_tokens). Readmissions after preemption are not counted:
        they find the sequence's own blocks, and would count its tokens twice."""
        hit = num_hit_blocks * self.block_size
        self.prefix_queries += seq.num_tokens
        self.prefix_hits += hit
        seq.num_cached_tokens = hit

    def fork(self, parent: Sequence, child: Sequence) -> bool:
        """Share parent's computed prompt with child (n>1). Full blocks are shared by
        reference; the partial last block gets a block of the child's own, whose first
        cells are still shared in llama.cpp."""
        bs = self.block_size
        n = parent.num_computed_tokens
        full = n // bs
        partial = n % bs != 0
        if partial and self.num_free_blocks < 1:
            return False
        if not self.assign_llama_seq(child):
            return False
        self.kv.seq_cp(parent.llama_seq, child.llama_seq, 0, n)
        for bid in parent.block_table[:full]:
            block = self.blocks[bid]
            block.ref_count += 1
            self._add_holder(block, child.llama_seq)
            child.block_table.append(bid)
        child.block_hashes = list(parent.block_hashes[:full])
        if partial:
            block = self._take_free_block()
            block.ref_count = 1
            block.index = full
            self._add_holder(block, child.llama_seq)
            child.block_table.append(block.block_id)
        child.num_computed_tokens = n
        self.peak_used_blocks = max(self.peak_used_blocks, self.num_used_blocks)
        return True

    def commit(self, seq: Sequence) -> None:
        """Register seq's newly filled blocks in the prefix cache."""
        if not self.enable_prefix_cache:
            return
        bs = self.block_size
        for k in range(len(seq.block_hashes), seq.num_computed_tokens // bs):
            tokens = tuple(seq.token_ids[k * bs:(k + 1) * bs])
            h = chain_hash(seq.block_hashes[-1] if seq.block_hashes else None, tokens, block_extra(seq, k, bs))
            seq.block_hashes.append(h)
            block = self.blocks[seq.block_table[k]]
            if block.hash is None and h not in self.hash_to_block_id:
                block.hash, block.token_ids = h, tokens
                self.hash_to_block_id[h] = block.block_id

    def free(self, seq: Sequence) -> None:
        """Release seq's blocks (finished, aborted or preempted). Cached blocks stay in
        llama.cpp under seq's id until evicted; the tail is released first so that it is
        also evicted first."""
        sid = seq.llama_seq
        for bid in reversed(seq.block_table):
            block = self.blocks[bid]
            block.ref_count -= 1
            if block.ref_count > 0 or (block.hash is not None and len(block.holders) > 1):
                self._drop_holder(block, sid)
            elif block.hash is None:
                self._drop_holder(block, sid)
                self._to_free_list(block)
            if block.ref_count == 0 and block.hash is not None:
                self.cached_free[bid] = None
                self.cached_free.move_to_end(bid)
        seq.block_table.clear()
        seq.block_hashes.clear()
        seq.llama_seq = -1
        if self.held_by[sid]:
            self.zombies[sid] = None
        else:
            self._release_id(sid)

    # ---- internals ----------------------------------------------------------------------
    def _take_free_block(self) -> Block:
        if self.free_block_ids:
            return self.blocks[self.free_block_ids.popleft()]
        bid, _ = self.cached_free.popitem(last=False)
        block = self.blocks[bid]
        self._evict(block, already_unlisted=True)
        self.free_block_ids.remove(bid)
        return block

    def _evict(self, block: Block, already_unlisted: bool = False) -> None:
        assert block.ref_count == 0
        if not already_unlisted:
            self.cached_free.pop(block.block_id, None)
        for sid in list(block.holders):
            self._drop_holder(block, sid)
            self._free_id_if_idle(sid)
        self._to_free_list(block)

    def _to_free_list(self, block: Block) -> None:
        if block.hash is not None and self.hash_to_block_id.get(block.hash) == block.block_id:
            del self.hash_to_block_id[block.hash]
        block.hash, block.token_ids, block.index = None, (), -1
        self.free_block_ids.append(block.block_id)

    def _add_holder(self, block: Block, sid: int) -> None:
        block.holders.add(sid)
        self.held_by[sid].add(block.block_id)

    def _drop_holder(self, block: Block, sid: int) -> None:
        bs = self.block_size
        self.kv.seq_rm(sid, block.index * bs, (block.index + 1) * bs)
        block.holders.discard(sid)
        self.held_by[sid].discard(block.block_id)

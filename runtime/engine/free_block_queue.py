"""The one queue of KV blocks no sequence references, in the order they are reused.

vLLM's FreeKVCacheBlockQueue idea: a doubly linked list threaded through the blocks themselves,
so that besides taking from the front and putting back at either end, a block can be taken out
of the *middle* in O(1) - which is what a prefix-cache hit on a free but still cached block
needs. A deque would make that O(n), and two structures (never-used blocks in one, cached ones
in another) made every allocation evict into one and take back out of the other.

Order, front to back: blocks that cache nothing (taken first), then cached blocks from least
to most recently freed (taken, and so evicted, in LRU order).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class Block:
    """A block of `block_size` KV cells. `index`: where it sits in its sequences' block tables
    (token index*bs onward); `pos0`..`pos1`: the positions llama.cpp keeps its cells at, which
    seq_rm and seq_cp take (index*bs..(index+1)*bs, except after M-RoPE images: every sequence
    sharing the block has the same images before it, so the same positions); `holders`: the
    llama.cpp sequence ids whose memory holds its cells (running sequences referencing it, and at
    most one parked id keeping it cached)."""
    block_id: int
    ref_count: int = 0
    hash: bytes | None = None              # set once full and registered in the prefix cache
    token_ids: tuple[int, ...] = ()
    index: int = -1
    pos0: int = 0
    pos1: int = 0
    image_pos: int = -1                    # holds rows of an M-RoPE image ending in a later block, at this position
    holders: set[int] = field(default_factory=set)
    prev: "Block | None" = None            # links of the free queue; None when not in it
    next: "Block | None" = None
    queued: bool = False


class FreeBlockQueue:
    def __init__(self, blocks: list[Block]) -> None:
        self._head = Block(-1)             # sentinels: the list is never empty at its ends
        self._tail = Block(-1)
        self._head.next, self._tail.prev = self._tail, self._head
        self._len = 0
        for block in blocks:
            self.append(block)

    def __len__(self) -> int:
        return self._len

    def __contains__(self, block: Block) -> bool:
        return block.queued

    def __iter__(self):
        node = self._head.next
        while node is not self._tail:
            yield node
            node = node.next

    def popleft(self) -> Block:
        block = self._head.next
        if block is self._tail:
            raise IndexError("no free KV block")
        self.remove(block)
        return block

    def append(self, block: Block) -> None:
        """At the back: taken last (a cached block, most recently used)."""
        self._link(block, self._tail.prev, self._tail)

    def appendleft(self, block: Block) -> None:
        """At the front: taken first (a block that caches nothing)."""
        self._link(block, self._head, self._head.next)

    def remove(self, block: Block) -> None:
        assert block.queued, f"block {block.block_id} is not free"
        block.prev.next, block.next.prev = block.next, block.prev
        block.prev = block.next = None
        block.queued = False
        self._len -= 1

    def _link(self, block: Block, before: Block, after: Block) -> None:
        assert not block.queued, f"block {block.block_id} is already free"
        block.prev, block.next = before, after
        before.next = after.prev = block
        block.queued = True
        self._len += 1

"""Continuous batching: which tokens of which sequences go into the next llama_decode.

Every step has a token budget (n_batch). Running sequences come first, one decode token
each (or the next chunk of a prompt that is still being prefilled); the rest of the
budget admits waiting sequences, chunking long prompts across steps, as long as their
blocks fit. When blocks run out, the most recently admitted sequence is preempted: its
blocks are released (they mostly stay in the prefix cache) and it goes back to the front
of the queue to be recomputed, so nobody fails for lack of KV memory.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmpack.runtime.engine.block_manager import BlockManager
from llmpack.runtime.engine.sequence import Sequence, SequenceStatus

if TYPE_CHECKING:
    from llmpack.runtime.engine.multimodal import Multimodal


@dataclass(slots=True)
class ScheduledChunk:
    seq: Sequence
    start: int          # first token index (== position) computed this step
    num_tokens: int

    @property
    def samples(self) -> bool:
        """This chunk reaches the sequence's last token, so a new token is sampled after it."""
        return self.start + self.num_tokens == self.seq.num_tokens


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, token_budget: int,
                 mm: "Multimodal | None" = None) -> None:
        self.bm = block_manager
        self.mm = mm          # with images: where a chunk may end, and which cache hits are whole
        self.max_num_seqs = max_num_seqs
        self.token_budget = token_budget
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Start `child` (another sample of parent's request) on parent's computed prompt KV
        when there is room; otherwise queue it to prefill the prompt on its own."""
        if parent.status is SequenceStatus.RUNNING and self.num_running < self.max_num_seqs \
                and self.bm.fork(parent, child):
            child.status = SequenceStatus.RUNNING
            self.running.append(child)
        else:
            self.waiting.append(child)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def schedule(self) -> list[ScheduledChunk]:
        budget = self.token_budget
        chunks: list[ScheduledChunk] = []
        # 1. running sequences, oldest first: decode tokens and continued prefills
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_tokens - seq.num_computed_tokens, budget)
            if self.mm is not None and not (n := self.mm.limit(seq, seq.num_computed_tokens, n)):
                i += 1        # its next image is still being encoded, or needs a step of its own
                continue
            while not self.bm.allocate(seq, [], n):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            else:
                chunks.append(ScheduledChunk(seq, seq.num_computed_tokens, n))
                budget -= n
                i += 1
                continue
            # seq itself was preempted; the list shrank, index i now points past the end
        # 2. admit waiting sequences while there is budget, room and memory
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if not self.bm.assign_llama_seq(seq):
                break
            hits = self.bm.match_prefix(seq)
            n = min(seq.num_tokens - len(hits) * self.bm.block_size, budget)
            if self.mm is not None:
                n = self.mm.limit(seq, len(hits) * self.bm.block_size, n)
            if not self.bm.allocate(seq, hits, n):
                self.bm.release_llama_seq(seq)
                break
            if seq.num_preemptions == 0:   # a recompute is not a new prompt: count each prompt once
                self.bm.note_lookup(seq, len(hits))
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            if n:
                chunks.append(ScheduledChunk(seq, seq.num_computed_tokens, n))
                budget -= n
        return chunks

    def preempt_newest(self) -> None:
        self._preempt(self.running[-1])

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.bm.free(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def finish(self, seq: Sequence) -> None:
        """Remove a finished or aborted sequence and release its blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self.bm.free(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED

"""Continuous batching: which tokens of which sequences go into the next llama_decode, and when
a sequence is admitted, preempted or finished.

Every step has a token budget: llama.cpp's n_batch (2048 by default, as llama-server), so that
a burst of new prompts is admitted in one step instead of waiting for several. Running sequences
come first, one decode token each (plus any speculative draft), or the next chunk of a prompt
still being prefilled; the rest of the budget admits waiting sequences, as long as their blocks
fit. One sequence's prompt advances at most `prefill_chunk` tokens per step (llama.cpp's
n_ubatch; vLLM's long_prefill_token_threshold), so a long paste never stalls the other
streams for a whole 2048-token step. When blocks run out, the most recently admitted sequence
is preempted: its blocks are released (they mostly stay in the prefix cache) and it goes back
to the front of the queue to be recomputed, so nobody fails for lack of KV memory.

Finishing is decided here too (`append_token`): an end-of-generation or stop token, max_tokens,
or a full context. Stop *strings* are found by the output processor, which then calls `finish`.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol

from llmpack.runtime.engine.block_manager import BlockManager
from llmpack.runtime.engine.sequence import ScheduledChunk, Sequence, SequenceStatus
from llmpack.runtime.engine.speculative import NgramDrafter


class ChunkLimits(Protocol):
    """All the scheduler asks of pictures and sound (multimodal.Multimodal implements it): how many of
    a sequence's next `n` tokens from `start` may go into this step (0: wait for its encoder)."""

    def limit(self, seq: Sequence, start: int, n: int) -> int: ...


@dataclass(slots=True)
class SchedulerOutput:
    chunks: list[ScheduledChunk]
    num_preempted: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens + len(c.draft) for c in self.chunks)


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, step_budget: int,
                 prefill_chunk: int | None = None, is_eog: Callable[[int], bool] = lambda t: False,
                 max_model_len: int | None = None, mm: ChunkLimits | None = None) -> None:
        self.bm = block_manager
        self.mm = mm          # with pictures or sound: where a chunk may end (multimodal.py)
        self.max_num_seqs = max_num_seqs
        self.step_budget = step_budget
        self.prefill_chunk = min(prefill_chunk or step_budget, step_budget)
        self.is_eog = is_eog
        self.max_model_len = max_model_len or block_manager.num_blocks * block_manager.block_size
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.drafter: NgramDrafter | None = None     # speculative decoding's, when on

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

    # ---- one step ---------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        budget = self.step_budget
        out = SchedulerOutput([])
        preempted_before = self.num_preemptions
        if self.drafter is not None:
            self.drafter.start_step(len(self.running))
        # 1. running sequences, oldest first: decode tokens and continued prefills
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_tokens - seq.num_computed_tokens, budget, self.prefill_chunk)
            if self.mm is not None and not (n := self.mm.limit(seq, seq.num_computed_tokens, n)):
                i += 1        # its next image is still being encoded, or needs a step of its own
                continue
            decoding = seq.num_tokens - seq.num_computed_tokens == 1
            draft = self._draft(seq, budget - n) if decoding else []
            while not self.bm.allocate(seq, [], n + len(draft)):
                if draft:
                    draft = []
                    continue
                victim = self.running[-1]
                self.preempt(victim)
                if victim is seq:
                    break
            else:
                out.chunks.append(ScheduledChunk(seq, seq.num_computed_tokens, n, draft))
                budget -= n + len(draft)
                i += 1
                continue
            # seq itself was preempted; the list shrank, index i now points past the end
        # 2. admit waiting sequences while there is budget, room and memory
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if not self.bm.assign_llama_seq(seq):
                break
            hits = self.bm.match_prefix(seq)
            n = min(seq.num_tokens - len(hits) * self.bm.block_size, budget, self.prefill_chunk)
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
                out.chunks.append(ScheduledChunk(seq, seq.num_computed_tokens, n))
                budget -= n
        out.num_preempted = self.num_preemptions - preempted_before
        return out

    def _draft(self, seq: Sequence, room: int) -> list[int]:
        if self.drafter is None or room <= 0:
            return []
        return self.drafter.draft(seq, room)

    def computed(self, chunk: ScheduledChunk, num_accepted: int = 0) -> None:
        """The chunk's tokens (and `num_accepted` of its draft tokens) are now in llama.cpp's
        memory; the prefix cache learns the blocks they filled."""
        chunk.num_accepted = num_accepted
        chunk.seq.num_computed_tokens += chunk.num_tokens + num_accepted
        self.bm.commit(chunk.seq)

    # ---- finishing --------------------------------------------------------------------
    def append_token(self, seq: Sequence, token: int) -> str | None:
        """Add a sampled token; finish seq when the token or the length ends it. Returns the
        finish reason ("stop" or "length"), or None while it goes on."""
        p = seq.request.params
        seq.token_ids.append(token)
        if (not p.ignore_eos and self.is_eog(token)) or token in p.stop_token_ids:
            self.finish(seq, "stop", token)
        elif (p.max_tokens is not None and seq.num_output_tokens >= p.max_tokens) \
                or seq.num_tokens >= self.max_model_len:
            self.finish(seq, "length", None)
        return seq.finish_reason

    def remaining(self, seq: Sequence) -> int:
        """How many tokens seq may still generate, the next one included."""
        room = self.max_model_len - seq.num_tokens
        max_tokens = seq.request.params.max_tokens
        return room if max_tokens is None else min(room, max_tokens - seq.num_output_tokens)

    def finish(self, seq: Sequence, reason: str, stop_reason: str | int | None = None) -> None:
        """End seq (finished, stopped, aborted or failed) and release its blocks."""
        seq.finish_reason, seq.stop_reason = reason, stop_reason
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self.bm.free(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED

    def preempt(self, seq: Sequence) -> None:
        """Release seq's blocks and queue it first, to be recomputed from its tokens."""
        self.running.remove(seq)
        self.bm.free(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

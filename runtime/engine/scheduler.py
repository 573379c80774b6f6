"""Continuous batching: which tokens of which sequences go into the next llama_decode, and when
a sequence is admitted, preempted or finished.

A step holds, in this order (vLLM's chunked prefill, Sarathi-Serve's stall-free batching):
1. every decoding sequence's next token, plus any speculative draft;
2. prompt tokens, first come first served: the oldest prompt reads as much as the step allows
   (at most `prefill_chunk`, llama.cpp's n_ubatch, so a long paste reports its progress), and
   the next one starts only once it is read - unless a prompt would be read whole in this very
   step, or is a question (at most `question_tokens`, half of n_ubatch: a chat's next turn with
   its history cached), which goes first over as many steps as it needs. So with five long
   documents queued, the first is answered after one document's worth of reading, not five, and a
   chatting user's next reply does not wait for anyone's document.
The step's budget is llama.cpp's n_batch (2048, as llama-server). While anyone is decoding it
is also sized by time: every decoding sequence waits for the whole step, so its prompt tokens,
picture rows and drafts are limited to what fits, by the step time measured on this machine
(step_sizer.StepSizer), in `target_s` (--target-gap-ms, 650 ms) beside the decode rows. A
picture that must be decoded whole is never split: it goes alone, even past the time. With no
one decoding, prompts get the whole budget.
When blocks run out, the most recently admitted sequence
is preempted: its blocks are released (they mostly stay in the prefix cache) and it goes back
to the front of the queue to be recomputed, so nobody fails for lack of KV memory.

Finishing is decided here too (`append_token`): an end-of-generation or stop token, max_tokens,
or a full context. Stop *strings* are found by the output processor, which then calls `finish`.
"""
from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol

from llmpack.runtime.engine.block_manager import BlockManager
from llmpack.runtime.engine.sequence import ScheduledChunk, Sequence, SequenceStatus
from llmpack.runtime.engine.speculative import NgramDrafter
from llmpack.runtime.engine.step_sizer import MIN_PROMPT_TOKENS, StepSizer


class ChunkLimits(Protocol):
    """All the scheduler asks of pictures and sound (multimodal.Multimodal implements it): how many of
    a sequence's next `n` tokens from `start` may go into this step (0: wait for its encoder)."""

    def limit(self, seq: Sequence, start: int, n: int) -> int: ...


@dataclass(slots=True)
class SchedulerOutput:
    chunks: list[ScheduledChunk]
    num_preempted: int = 0
    prompt_budget: int = 0     # the prompt tokens this step could hold (sized by time while anyone decodes)

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens + len(c.draft) for c in self.chunks)


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, step_budget: int,
                 prefill_chunk: int | None = None, is_eog: Callable[[int], bool] = lambda t: False,
                 max_model_len: int | None = None, mm: ChunkLimits | None = None,
                 target_s: float | None = None, sizer: StepSizer | None = None) -> None:
        """`target_s`: the step time to aim at while anyone decodes (None or 0: n_batch alone
        sizes steps); `sizer`: what steps cost here, learned by the engine as it runs."""
        self.bm = block_manager
        self.mm = mm          # with pictures or sound: where a chunk may end (multimodal.py)
        self.max_num_seqs = max_num_seqs
        self.step_budget = step_budget
        self.prefill_chunk = min(prefill_chunk or step_budget, step_budget)
        # A prompt this short is a question (a chat's next turn, its history cached), not a document:
        # it goes before the oldest prompt's rest, over as many steps as the time budget needs.
        self.question_tokens = self.prefill_chunk // 2
        self.is_eog = is_eog
        self.max_model_len = max_model_len or block_manager.num_blocks * block_manager.block_size
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.drafter: NgramDrafter | None = None     # speculative decoding's, when on
        self.target_s = target_s or None
        self.sizer = sizer or StepSizer()

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
        out = SchedulerOutput([])
        preempted_before = self.num_preemptions
        if self.drafter is not None:
            self.drafter.start_step(len(self.running))
        budget = self._schedule_decodes(out, self.step_budget)
        if out.chunks and self.target_s:   # someone is decoding: the step is sized by time
            extra = self.sizer.prompt_tokens(self.target_s, len(out.chunks)) - sum(len(c.draft) for c in out.chunks)
            out.prompt_budget = min(budget, max(extra, MIN_PROMPT_TOKENS))
        else:
            out.prompt_budget = budget
        self._schedule_prompts(out, out.prompt_budget, budget)
        out.num_preempted = self.num_preemptions - preempted_before
        return out

    def _schedule_decodes(self, out: SchedulerOutput, budget: int) -> int:
        """1. every decoding sequence, oldest first: its one token, plus any speculative draft (drafts
        count as extra tokens in the time budget, as prompts do). Returns the budget left."""
        extra = self.sizer.prompt_tokens(self.target_s, len(self.running)) if self.target_s else budget
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            if seq.num_tokens - seq.num_computed_tokens != 1 or \
                    (self.mm is not None and not self.mm.limit(seq, seq.num_computed_tokens, 1)):
                i += 1        # still reading its prompt (step 2), or its next image is being encoded
                continue
            draft = self._draft(seq, min(budget - 1, extra))
            while not self.bm.allocate(seq, [], 1 + len(draft)):
                if draft:
                    draft = []
                    continue
                victim = self.running[-1]
                self.preempt(victim)
                if victim is seq:
                    break
            else:
                out.chunks.append(ScheduledChunk(seq, seq.num_computed_tokens, 1, draft))
                budget -= 1 + len(draft)
                extra -= len(draft)
                i += 1
                continue
            # seq itself was preempted; the list shrank, index i now points past the end
        return budget

    def _schedule_prompts(self, out: SchedulerOutput, room: int, budget: int) -> None:
        """2. prompts (and recomputes), first come first served, within `room` tokens: the oldest
        that can advance reads as much as the room and `prefill_chunk` allow, and nothing after
        it starts until it is read, except a prompt that finishes in this very step or a question
        (`question_tokens`): those go first, and the oldest reads what they leave. A slow
        machine's room may be a few dozen tokens, so a question is read over several steps
        rather than waiting for the whole document. `budget` (n_batch, less the decode rows) still bounds a picture, which
        is never split: it may overrun the time, never llama.cpp's batch."""
        scheduled = {id(c.seq) for c in out.chunks}
        while room > 0:
            queue = self._prompt_queue(scheduled)
            head, n = None, 0
            for seq in queue:
                n = self._limit(seq, self._start(seq), min(room, self.prefill_chunk), budget)
                if n:
                    head = seq
                    break
                scheduled.add(id(seq))
                if seq.status is SequenceStatus.WAITING and self._place(out, seq, 0) is None:
                    return                   # (its picture is being encoded: admitted, it holds its cached blocks)
            if head is None:
                return
            need = head.num_tokens - self._start(head)
            if n < need:                     # the oldest stays partial: questions go first
                for seq in queue[queue.index(head) + 1:]:
                    start, rest = self._start(seq), seq.num_tokens - self._start(seq)
                    if room <= 0 or rest > max(min(room, self.prefill_chunk), self.question_tokens):
                        continue
                    take = self._limit(seq, start, min(rest, room), 0)
                    if take <= 0:
                        continue
                    got = self._place(out, seq, take)
                    if got is None:
                        break
                    scheduled.add(id(seq))
                    room, budget = room - got, budget - got
                n = min(n, room) if not self._is_picture(head) else n if n <= budget else 0
            got = self._place(out, head, n) if n > 0 else None
            if got is None:
                return
            scheduled.add(id(head))
            room, budget = room - got, budget - got
            if got < need:
                return                       # the oldest is partial: nothing after it this step

    def _prompt_queue(self, skip: set[int]) -> list[Sequence]:
        """Sequences with prompt left to read, oldest first, those in `skip` left out: the admitted
        ones, then as many of the queue (where a preempted sequence waits at the front) as there
        are free slots - the rest cannot start this step, and are not looked up."""
        admitted = [s for s in self.running if s.num_tokens - s.num_computed_tokens > 1 and id(s) not in skip]
        free = self.max_num_seqs - len(self.running)
        return admitted + list(itertools.islice(self.waiting, max(free, 0)))

    def _start(self, seq: Sequence) -> int:
        """Where seq's next chunk starts: its computed tokens, or for a waiting sequence what the
        prefix cache already holds (no side effects)."""
        if seq.status is SequenceStatus.RUNNING:
            return seq.num_computed_tokens
        return len(self.bm.match_prefix(seq)) * self.bm.block_size

    def _limit(self, seq: Sequence, start: int, n: int, budget: int) -> int:
        """How many of seq's tokens from `start` go into this step, at most n: pictures and sound
        decide where a chunk may end (ChunkLimits). A picture that must be decoded whole and is
        bigger than n still goes, alone, when `budget` holds it: it is never split."""
        n = min(n, seq.num_tokens - start)
        if self.mm is None or n <= 0:
            return max(n, 0)
        got = self.mm.limit(seq, start, n)
        if got or not budget:
            return got
        span = seq.request.mm.span_at(start) if seq.request.mm is not None else None
        rows = span.end - start if span is not None and span.embd is not None and span.whole else 0
        if 0 < rows <= min(budget, self.prefill_chunk) and self.mm.limit(seq, start, rows) == rows:
            return rows
        return 0

    def _is_picture(self, seq: Sequence) -> bool:
        mm = getattr(seq.request, "mm", None)
        span = mm.span_at(self._start(seq)) if mm is not None else None
        return span is not None and span.whole

    def _place(self, out: SchedulerOutput, seq: Sequence, n: int) -> int | None:
        """Put n of seq's prompt tokens into this step, admitting it first if it waits (a sequence id,
        its cached blocks, memory for the rest). Returns the tokens placed (fewer when an id's
        reclaim took some of the cache it counted on), or None when there is no room for it now."""
        if seq.status is SequenceStatus.RUNNING:
            if not self._make_room(seq, n, out):
                return None
            out.chunks.append(ScheduledChunk(seq, seq.num_computed_tokens, n))
            return n
        expected = self._start(seq)
        if len(self.running) >= self.max_num_seqs or not self.bm.assign_llama_seq(seq):
            return None
        hits = self.bm.match_prefix(seq)
        start = len(hits) * self.bm.block_size
        if n and start != expected:
            n = self._limit(seq, start, n, 0)
        if not self.bm.allocate(seq, hits, n):
            self.bm.release_llama_seq(seq)
            return None
        if seq.num_preemptions == 0:   # a recompute is not a new prompt: count each prompt once
            self.bm.note_lookup(seq, len(hits))
        self.waiting.remove(seq)
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)
        if n:
            out.chunks.append(ScheduledChunk(seq, seq.num_computed_tokens, n))
        return n

    def _make_room(self, seq: Sequence, n: int, out: SchedulerOutput) -> bool:
        """Blocks for n more of seq's tokens, preempting the newest sequences this step has not
        scheduled when memory is short (never one already in the step)."""
        while not self.bm.allocate(seq, [], n):
            taken = {id(c.seq) for c in out.chunks}
            victims = [s for s in self.running if s is not seq and id(s) not in taken]
            if not victims:
                return False
            self.preempt(victims[-1])
        return True

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

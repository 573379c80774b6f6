"""After a decode: sample each sequence's next token(s), turn tokens into text, emit the deltas.

The scheduler decides what ends a sequence by its tokens (end-of-generation, stop ids, length);
this finds stop *strings* in the text and tells the scheduler. A request with n > 1 forks its
other samples here, after the prompt's first token, from the same logits row.
"""
from __future__ import annotations

import time
from typing import Callable

from llmpack.runtime.engine.llama_batch import BatchPlan
from llmpack.runtime.engine.outputs import CompletionOutput, RequestOutput
from llmpack.runtime.engine.sampler import compute_logprobs
from llmpack.runtime.engine.scheduler import Scheduler
from llmpack.runtime.engine.sequence import Request, ScheduledChunk, Sequence
from llmpack.runtime.engine.speculative import NgramDrafter

Deltas = dict[Request, list[CompletionOutput]]


class OutputProcessor:
    def __init__(self, runner, scheduler: Scheduler, new_sequence: Callable[[Request, int, list[int]], Sequence],
                 retire: Callable[[Request], None], drafter: NgramDrafter) -> None:
        self.runner, self.scheduler = runner, scheduler
        self.new_sequence, self.retire, self.drafter = new_sequence, retire, drafter
        self.piece_cache: dict[int, bytes] = {}
        self.generation_tokens_total = 0
        self.sample_s = 0.0        # time spent sampling in the last `process` (the step trace reads it)
        self.unsent: list[tuple[Request, RequestOutput]] = []    # emitted, not yet in their streams
        self._logits = self._argmax = None

    # ---- one step ---------------------------------------------------------------------------
    def process(self, chunks: list[ScheduledChunk], plan: BatchPlan) -> list[RequestOutput]:
        """Sample and emit for every chunk of a decoded step; returns the outputs emitted (they
        reach the streams at `flush`)."""
        self.sample_s = 0.0
        deltas: Deltas = {}
        self._logits = self.runner.logits(plan.n_outputs) if plan.n_outputs else None
        self._argmax = None
        for c, row in zip(chunks, plan.out_row):
            if row < 0:
                self.scheduler.computed(c)
            else:
                self._sample_chunk(c, row, deltas)
        self._logits = self._argmax = None
        emitted = [self.emit(req, outs) for req, outs in deltas.items()]
        for c in chunks:
            req = c.seq.request
            if not c.samples and req.prompt_progress and c.seq.index == 0 \
                    and c.seq.num_output_tokens == 0 and req not in deltas:
                emitted.append(self.emit(req, []))   # prefill progress: no new text yet
        return emitted

    def _sample_chunk(self, c: ScheduledChunk, row_index: int, deltas: Deltas) -> None:
        seq, req = c.seq, c.seq.request
        t0 = time.perf_counter()
        if c.draft:
            tokens = self.drafter.verify(seq, c.draft, [self._logits[row_index + i] for i in range(len(c.draft) + 1)])
            accepted = c.num_accepted = len(tokens) - 1
            if accepted < len(c.draft):    # the rejected drafts' cells leave llama.cpp's memory
                self.runner.seq_rm(seq.llama_seq, seq.position(c.start + c.num_tokens + accepted), -1)
            self.sample_s += time.perf_counter() - t0
            for token in tokens:           # the accepted drafts, then the token after them
                self._append(seq, token, None, deltas)
                if seq.is_finished:        # its blocks are released: nothing to commit
                    return
            self.scheduler.computed(c, accepted)   # after the append: commit hashes the tokens
            return
        self.scheduler.computed(c)
        row = self._logits[row_index]
        p = req.params
        lp_row = row.copy() if p.logprobs is not None else None
        sampler = seq.sampler
        if sampler.has_penalties:
            sampler.apply_penalties(row, seq.token_ids, seq.output_token_ids)
            token = sampler.sample(row, self.scheduler.remaining(seq))
        elif sampler.chain is None and sampler.grammar is None:   # plain greedy: one argmax for the step
            if self._argmax is None:
                self._argmax = self._logits.argmax(axis=1)
            token = int(self._argmax[row_index])
        else:
            token = sampler.sample(row, self.scheduler.remaining(seq))
        self.sample_s += time.perf_counter() - t0
        fork_now = p.n > 1 and not req.forked
        self._append(seq, token, lp_row, deltas)
        if fork_now:
            req.forked = True
            for j in range(1, p.n):
                child = self.new_sequence(req, j, list(req.prompt_token_ids))
                child_token = child.sampler.sample(row, self.scheduler.remaining(child))
                self.scheduler.fork(seq, child)
                self._append(child, child_token, lp_row, deltas)

    def _append(self, seq: Sequence, token: int, lp_row, deltas: Deltas) -> None:
        p = seq.request.params
        self.generation_tokens_total += 1
        if seq.first_token_time is None:
            seq.first_token_time = time.monotonic()
        out = CompletionOutput(index=seq.index, token_ids=[token])
        if lp_row is not None:
            out.logprobs = [compute_logprobs(lp_row, token, p.logprobs, self.piece_text)]
        reason = self.scheduler.append_token(seq, token)
        if reason == "stop":                       # an end or stop token: its text is not shown
            out.text = seq.detok.flush()
        else:
            out.text = seq.detok.add(self.piece(token))
            if seq.detok.stopped_by is not None:
                self.scheduler.finish(seq, "stop", seq.detok.stopped_by)
            elif reason == "length":
                out.text += seq.detok.flush()
        if seq.is_finished:
            out.finish_reason, out.stop_reason = seq.finish_reason, seq.stop_reason
            seq.sampler.close()
        prev = deltas.setdefault(seq.request, [])
        if prev and prev[-1].index == seq.index and prev[-1].finish_reason is None:
            merged = prev[-1]                      # several tokens of one sequence in one step
            merged.text += out.text
            merged.token_ids += out.token_ids
            if out.logprobs:
                merged.logprobs = (merged.logprobs or []) + out.logprobs
            merged.finish_reason, merged.stop_reason = out.finish_reason, out.stop_reason
        else:
            prev.append(out)

    # ---- emitting ---------------------------------------------------------------------------
    def emit(self, req: Request, outs: list[CompletionOutput], error: str | None = None) -> RequestOutput:
        finished = req.forked or req.params.n == 1
        finished = finished and len(req.seqs) == req.params.n and all(s.is_finished for s in req.seqs)
        head = req.seqs[0]
        out = RequestOutput(
            request_id=req.request_id, outputs=outs, finished=finished, prompt=req.prompt,
            prompt_token_ids=req.prompt_token_ids, num_prompt_tokens=len(req.prompt_token_ids),
            num_cached_tokens=min(head.num_cached_tokens, len(req.prompt_token_ids)),
            num_generated_tokens=sum(s.num_output_tokens for s in req.seqs),
            num_processed_prompt_tokens=min(head.num_computed_tokens, len(req.prompt_token_ids)),
            time_to_first_token=None if head.first_token_time is None else head.first_token_time - req.arrival_time,
            error=error)
        self.unsent.append((req, out))
        if finished:
            self.retire(req)
        return out

    def flush(self) -> None:
        """Hand the emitted outputs to their streams. The engine calls this right before the next
        llama_decode (or when it goes idle): a put wakes the request thread, which then wants the
        GIL; woken while llama_decode runs without it, the request threads do not slow the step's
        own Python work."""
        unsent, self.unsent = self.unsent, []
        for req, out in unsent:
            req.outbox.put(out)

    def end_request(self, req: Request, reason: str = "abort", error: str | None = None) -> RequestOutput:
        """End every unfinished sample of req (aborted, or failed with `error`) and emit the close."""
        outs = []
        for seq in req.seqs:
            if not seq.is_finished:
                self.scheduler.finish(seq, reason)
                seq.sampler.close()
                outs.append(CompletionOutput(index=seq.index, text=seq.detok.flush(), finish_reason=reason))
        out = RequestOutput(
            request_id=req.request_id, outputs=outs, finished=True, prompt=req.prompt,
            prompt_token_ids=req.prompt_token_ids, num_prompt_tokens=len(req.prompt_token_ids),
            num_generated_tokens=sum(s.num_output_tokens for s in req.seqs), error=error)
        self.unsent.append((req, out))
        self.retire(req)
        return out

    # ---- tokens to text ---------------------------------------------------------------------
    def piece(self, token: int) -> bytes:
        piece = self.piece_cache.get(token)
        if piece is None:
            piece = self.piece_cache[token] = self.runner.token_bytes(token)
        return piece

    def piece_text(self, token: int) -> str:
        return self.piece(token).decode("utf-8", errors="replace")

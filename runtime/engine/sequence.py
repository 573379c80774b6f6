"""The engine's record of one request (`Request`), of each sample being generated for it
(`Sequence`: its tokens, where its KV lives, and how far it got), and of the part of a sample one
step computes (`ScheduledChunk`). Request and Sequence point at each other, so they live together,
below everything that schedules, caches or decodes them.

A request with n samples owns n Sequences. They share the prompt's KV: sample 0 prefills,
the others fork from it when the prompt is done (see BlockManager.fork).
"""
from __future__ import annotations

import itertools
import queue
import time
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import TYPE_CHECKING

from llmpack.runtime.engine.detokenizer import Detokenizer
from llmpack.runtime.engine.outputs import CompletionOutput, RequestOutput
from llmpack.runtime.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from llmpack.runtime.engine.sampler import SequenceSampler
    from llmpack.runtime.engine.media import MultimodalPrompt


class SequenceStatus(Enum):
    WAITING = auto()    # queued, or preempted and waiting to be recomputed
    RUNNING = auto()    # holds KV blocks and a llama.cpp sequence id
    FINISHED = auto()


_counter = itertools.count()


@dataclass(slots=True, eq=False)
class Sequence:
    request: "Request"
    index: int                                  # which of the request's n samples
    token_ids: list[int]                        # prompt + generated
    num_prompt_tokens: int
    sampler: "SequenceSampler"
    detok: Detokenizer
    seq_no: int = field(default_factory=lambda: next(_counter))  # admission order
    status: SequenceStatus = SequenceStatus.WAITING
    num_computed_tokens: int = 0                # tokens whose KV is in llama.cpp
    num_cached_tokens: int = 0                  # prompt tokens the prefix cache served at first admission
    num_preemptions: int = 0                    # times preempted (and recomputed) so far
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)  # chained digests of the full blocks
    llama_seq: int = -1                         # llama.cpp sequence id while RUNNING
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None        # perf_counter when its last token was sampled (token gaps)
    cache_salt: str | None = None               # seeds the prefix-cache hash chain (the request's)
    num_failed_steps: int = 0                   # decode steps that failed with this sequence in them
    spec: object = None                         # speculative.SpecState once it has drafted

    def position(self, index: int) -> int:
        """Where token `index` sits in llama.cpp's memory: its index, except after and inside
        M-RoPE images (media.MultimodalPrompt.position). Every KV range the engine hands
        llama.cpp (seq_rm, seq_cp, a batch's positions) goes through here."""
        mm = getattr(self.request, "mm", None)    # unit tests' sequences may have no request
        return index if mm is None else mm.position(index)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def is_prefilling(self) -> bool:
        """More than the last token still needs computing (prompt or recompute after preemption)."""
        return self.num_tokens - self.num_computed_tokens > 1

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED


@dataclass(slots=True)
class ScheduledChunk:
    seq: Sequence
    start: int          # first token index (== position) computed this step
    num_tokens: int     # of seq.token_ids, from start
    draft: list[int] = field(default_factory=list)   # speculative tokens decoded after them
    num_accepted: int = 0                            # of the draft, once verified
    # the chunk reaches the sequence's last token, so a new token is sampled after it (decided
    # when scheduled: once the token is appended, the sequence is longer)
    samples: bool = field(init=False)

    def __post_init__(self) -> None:
        self.samples = self.start + self.num_tokens == self.seq.num_tokens

    @property
    def is_prefill(self) -> bool:
        return self.num_tokens > 1 or not self.samples


@dataclass(slots=True, eq=False)
class Request:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    seed: int
    outbox: "queue.SimpleQueue[RequestOutput]" = field(default_factory=queue.SimpleQueue)
    seqs: list[Sequence] = field(default_factory=list)
    forked: bool = False
    prompt_progress: bool = False     # emit a progress output per prefill step (add_request's flag)
    arrival_time: float = field(default_factory=time.monotonic)
    cache_salt: str | None = None     # requests with different salts never share prefix-cache blocks
    mm: "MultimodalPrompt | None" = None   # the prompt's pictures or sound, when it has any (media.py)
    grammar_parses: list = field(default_factory=list)   # llama.cpp's parse of params.grammar, one per sample to come

    def final_output(self, error: str | None = None) -> RequestOutput:
        """A closing RequestOutput built from this request alone (no engine state): every sample
        not yet finished ends with finish_reason "abort"; `error` says why, if it was a failure."""
        done = {s.index for s in self.seqs if s.is_finished}
        outs = [CompletionOutput(index=i, finish_reason="abort") for i in range(self.params.n) if i not in done]
        return RequestOutput(
            request_id=self.request_id, outputs=outs, finished=True, prompt=self.prompt,
            prompt_token_ids=self.prompt_token_ids, num_prompt_tokens=len(self.prompt_token_ids),
            num_generated_tokens=sum(s.num_output_tokens for s in self.seqs), error=error)

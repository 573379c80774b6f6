"""One sample being generated: its tokens, where its KV lives, and how far it got.

A request with n samples owns n Sequences. They share the prompt's KV: sample 0 prefills,
the others fork from it when the prompt is done (see BlockManager.fork).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import TYPE_CHECKING

from llmpack.runtime.engine.detokenizer import Detokenizer

if TYPE_CHECKING:
    from llmpack.runtime.engine.engine import Request
    from llmpack.runtime.engine.sampler import SequenceSampler


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
    cache_salt: str | None = None               # seeds the prefix-cache hash chain (the request's)
    num_failed_steps: int = 0                   # decode steps that failed with this sequence in them
    spec: object = None                         # speculative.SpecState once it has drafted

    def position(self, index: int) -> int:
        """Where token `index` sits in llama.cpp's memory: its index, except after and inside
        M-RoPE images (vision.MultimodalPrompt.position). Every KV range the engine hands
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

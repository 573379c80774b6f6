"""One request as the engine sees it, the stream its caller reads, and the errors of submitting.

`Request` is created on the caller's thread and handed to the engine thread through a queue;
from then on only the engine thread touches it, except `outbox`, a thread-safe queue of
RequestOutput deltas that `RequestStream` drains on the caller's side.
"""
from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from llmpack.errors import LlmpackError
from llmpack.runtime.engine.outputs import CompletionOutput, RequestOutput
from llmpack.runtime.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from llmpack.runtime.engine.engine import LLMEngine
    from llmpack.runtime.engine.sequence import Sequence

# How often a waiting stream checks that the engine thread is still alive.
_LIVENESS_POLL_S = 0.5


class PromptTooLongError(LlmpackError):
    def __init__(self, n_tokens: int, limit: int) -> None:
        super().__init__(f"the prompt is {n_tokens} tokens long, but the context holds {limit} "
                         f"(including at least one generated token); shorten it or start with a larger --ctx")
        self.n_tokens, self.limit = n_tokens, limit


class QueueFullError(LlmpackError):
    pass


class EngineDeadError(LlmpackError):
    """The engine thread has stopped (a fault, or shutdown): no request can be served any more."""


@dataclass(slots=True, eq=False)
class Request:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    seed: int
    outbox: "queue.SimpleQueue[RequestOutput]" = field(default_factory=queue.SimpleQueue)
    seqs: "list[Sequence]" = field(default_factory=list)
    forked: bool = False
    prompt_progress: bool = False     # emit a progress output per prefill step (add_request's flag)
    arrival_time: float = field(default_factory=time.monotonic)
    cache_salt: str | None = None     # requests with different salts never share prefix-cache blocks
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


class RequestStream:
    """Iterate to receive a request's RequestOutput deltas; the last has finished=True.

    A stream never waits in silence on a dead engine: while it waits it checks that the engine
    thread is alive, and if it is not, the stream ends with the engine's failure as its error."""

    def __init__(self, engine: "LLMEngine", request: Request) -> None:
        self.engine, self.request = engine, request
        self.request_id = request.request_id

    def __iter__(self) -> Iterator[RequestOutput]:
        while True:
            out = self.get()
            yield out
            if out.finished:
                return

    def get(self, timeout: float | None = None) -> RequestOutput:
        """The next delta; queue.Empty after `timeout` seconds (None: wait as long as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        outbox = self.request.outbox
        while True:
            wait = _LIVENESS_POLL_S if deadline is None else min(_LIVENESS_POLL_S, deadline - time.monotonic())
            try:
                return outbox.get(timeout=max(wait, 0.0))
            except queue.Empty:
                if not self.engine.is_alive():
                    try:   # the engine may have answered just before it stopped
                        return outbox.get_nowait()
                    except queue.Empty:
                        return self.request.final_output(self.engine.failure or "the engine has stopped")
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    def abort(self) -> None:
        self.engine.abort(self.request_id)

"""What a caller of the engine sees of its request: the stream it reads, and the errors of submitting.

The engine's own record of the request (`sequence.Request`) is created on the caller's thread and
handed to the engine thread through a queue; from then on only the engine thread touches it,
except `outbox`, a thread-safe queue of RequestOutput deltas that `RequestStream` drains here.
"""
from __future__ import annotations

import queue
import time
from typing import Iterator, Protocol

from llmpack.errors import LlmpackError
from llmpack.runtime.engine.outputs import RequestOutput
from llmpack.runtime.engine.sequence import Request

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


class StreamSource(Protocol):
    """What a stream needs of the engine that serves it (LLMEngine is one)."""

    @property
    def failure(self) -> str | None: ...

    def is_alive(self) -> bool: ...

    def abort(self, request_id: str) -> None: ...


class RequestStream:
    """Iterate to receive a request's RequestOutput deltas; the last has finished=True.

    A stream never waits in silence on a dead engine: while it waits it checks that the engine
    thread is alive, and if it is not, the stream ends with the engine's failure as its error."""

    def __init__(self, engine: StreamSource, request: Request) -> None:
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

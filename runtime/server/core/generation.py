"""The engine streams of one request (one per prompt), consumed in prompt order: submitting them,
counting tokens for usage and prompt progress, and aborting them when the client leaves."""
from __future__ import annotations

import time
from typing import Callable, Iterator, Protocol

from llmpack.errors import LlmpackError
from llmpack.runtime.engine.client import (EngineDeadError, InvalidParameterError, OutputStream, PromptTooLongError,
                                           QueueFullError)
from llmpack.runtime.engine.outputs import RequestOutput
from llmpack.runtime.server.core.active import ActiveRequests
from llmpack.runtime.server.core.errors import ApiError, bad
from llmpack.runtime.server.core.request import Prepared
from llmpack.runtime.server.core.served_model import ServedModel


class Timer(Protocol):
    """What the server's metrics want to hear of a request (http/metrics.py RequestTimer)."""

    done: bool

    def tokens(self, n: int) -> None: ...

    def finish(self, reason: str | None) -> None: ...


def submit_error(exc: Exception, param: str) -> Exception:
    """An engine's refusal as the client's error (anything else is re-raised as it is)."""
    if isinstance(exc, EngineDeadError):
        return ApiError(500, f"The server cannot generate any more: {exc}.", code="engine_failed", type="server_error")
    if isinstance(exc, PromptTooLongError):
        return bad(param, f"This model's maximum context length is {exc.limit} tokens, but your prompt is "
                          f"{exc.n_tokens} tokens long. Shorten the prompt (or start a new chat).",
                   "context_length_exceeded")
    if isinstance(exc, QueueFullError):
        return ApiError(503, "The server is busy: too many requests are waiting. Retry shortly.",
                        code="queue_full", type="server_overloaded", headers={"Retry-After": "1"})
    if isinstance(exc, InvalidParameterError):
        return bad(exc.param, str(exc))
    if isinstance(exc, LlmpackError):   # e.g. "the prompt is empty"
        return bad(param, str(exc))
    return exc


class Generation:
    """Submits every prompt of `prep` at once (the engine batches them) and reads them back.
    `active` (the server's in-flight set) aborts them when `disconnected()` turns true."""

    def __init__(self, model: ServedModel, prep: Prepared, request_id: str, *, active: ActiveRequests | None = None,
                 disconnected: Callable[[], bool] | None = None, timer: Timer | None = None) -> None:
        self.model, self.prep, self.active, self.timer = model, prep, active, timer
        self.n = prep.params.n
        self.streams: list[OutputStream] = []
        self.finished: list[bool] = []
        self.counts: list[tuple[int, int, int]] = []   # (prompt, cached, generated) per stream
        self.processed: list[int] = []                  # prompt tokens read so far, per stream
        self.reasons: dict[int, str] = {}
        self.started = time.monotonic()
        try:
            for i, ids in enumerate(prep.prompts):
                self.streams.append(model.engine.add_request(ids, prep.params, request_id=f"{request_id}-{i}",
                                                             prompt_progress=prep.return_progress))
                self.finished.append(False)
                self.counts.append((len(ids), 0, 0))
                self.processed.append(0)
        except Exception as exc:
            self._abort()
            if timer is not None:
                timer.done = True
            raise submit_error(exc, prep.prompt_param) from None
        self.key = active.add(self.streams, disconnected) if active is not None else None

    @property
    def num_choices(self) -> int:
        return len(self.streams) * self.n

    def outputs(self) -> Iterator[tuple[int, RequestOutput]]:
        """(index of the first choice of this prompt, RequestOutput delta)."""
        for i, stream in enumerate(self.streams):
            seen = 0
            for out in stream:
                if out.error:
                    raise ApiError(500, f"Generation failed: {out.error}")
                if self.timer is not None:
                    self.timer.tokens(out.num_generated_tokens - seen)
                seen = out.num_generated_tokens
                self.counts[i] = (out.num_prompt_tokens or self.counts[i][0], out.num_cached_tokens, seen)
                self.processed[i] = max(self.processed[i], out.num_processed_prompt_tokens)
                for c in out.outputs:
                    if c.finish_reason:
                        self.reasons[i * self.n + c.index] = c.finish_reason
                if out.finished:
                    self.finished[i] = True
                yield i * self.n, out

    def prompt_progress(self) -> dict:
        """llama-server's `prompt_progress`: prompt tokens in all (`total`), reused from the prefix
        cache (`cache`), ready so far, cache included (`processed`), and milliseconds since the
        request came (`time_ms`)."""
        return {"total": sum(c[0] for c in self.counts), "cache": sum(c[1] for c in self.counts),
                "processed": sum(self.processed), "time_ms": round((time.monotonic() - self.started) * 1000)}

    def usage(self) -> tuple[int, int, int]:
        """(prompt tokens, generated tokens, prompt tokens read from the prefix cache)."""
        return (sum(c[0] for c in self.counts), sum(c[2] for c in self.counts), sum(c[1] for c in self.counts))

    def _abort(self) -> None:
        for stream, done in zip(self.streams, self.finished + [False] * len(self.streams)):
            if not done:
                try:
                    stream.abort()
                except Exception:  # noqa: BLE001 - aborting twice or after shutdown is harmless
                    pass

    def close(self) -> None:
        self._abort()
        if self.active is not None and self.key is not None:
            self.active.remove(self.key)
        if self.timer is not None:
            self.timer.finish(self.reasons.get(0) if all(self.finished) else "abort")

"""The engine streams of one request (one per prompt), consumed in prompt order: submitting them,
counting tokens for usage and prompt progress, and aborting them when the client leaves."""
from __future__ import annotations

import time
from dataclasses import dataclass
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


@dataclass(slots=True)
class PromptStream:
    """One prompt's engine stream and what it has told so far."""

    stream: OutputStream
    prompt_tokens: int
    cached_tokens: int = 0
    generated_tokens: int = 0
    processed_tokens: int = 0      # prompt tokens read so far (prefix-cache hits included)
    finished: bool = False


class Generation:
    """Submits every prompt of `prep` at once (the engine batches them) and reads them back.
    `active` (the server's in-flight set) aborts them when `disconnected()` turns true."""

    def __init__(self, model: ServedModel, prep: Prepared, request_id: str, *, active: ActiveRequests | None = None,
                 disconnected: Callable[[], bool] | None = None, timer: Timer | None = None) -> None:
        self.model, self.prep, self.active, self.timer = model, prep, active, timer
        self.n = prep.params.n
        self.prompts: list[PromptStream] = []
        self.reasons: dict[int, str] = {}       # choice index -> finish reason
        self.started = time.monotonic()
        try:
            for i, ids in enumerate(prep.prompts):
                stream = model.engine.add_request(ids, prep.params, request_id=f"{request_id}-{i}",
                                                  prompt_progress=prep.return_progress)
                self.prompts.append(PromptStream(stream, len(ids)))
        except Exception as exc:
            self._abort()
            if timer is not None:
                timer.done = True
            raise submit_error(exc, prep.prompt_param) from None
        self.key = active.add([p.stream for p in self.prompts], disconnected) if active is not None else None

    @property
    def num_choices(self) -> int:
        return len(self.prompts) * self.n

    @property
    def processed(self) -> int:
        return sum(p.processed_tokens for p in self.prompts)

    def outputs(self) -> Iterator[tuple[int, RequestOutput]]:
        """(index of the first choice of this prompt, RequestOutput delta)."""
        for i, p in enumerate(self.prompts):
            for out in p.stream:
                if out.error:
                    raise ApiError(500, f"Generation failed: {out.error}")
                if self.timer is not None:
                    self.timer.tokens(out.num_generated_tokens - p.generated_tokens)
                p.generated_tokens = out.num_generated_tokens
                p.prompt_tokens = out.num_prompt_tokens or p.prompt_tokens
                p.cached_tokens = out.num_cached_tokens
                p.processed_tokens = max(p.processed_tokens, out.num_processed_prompt_tokens)
                for c in out.outputs:
                    if c.finish_reason:
                        self.reasons[i * self.n + c.index] = c.finish_reason
                p.finished = p.finished or out.finished
                yield i * self.n, out

    def prompt_progress(self) -> dict:
        """llama-server's `prompt_progress`: prompt tokens in all (`total`), reused from the prefix
        cache (`cache`), ready so far, cache included (`processed`), and milliseconds since the
        request came (`time_ms`)."""
        return {"total": sum(p.prompt_tokens for p in self.prompts), "cache": sum(p.cached_tokens for p in self.prompts),
                "processed": self.processed, "time_ms": round((time.monotonic() - self.started) * 1000)}

    def usage(self) -> tuple[int, int, int]:
        """(prompt tokens, generated tokens, prompt tokens read from the prefix cache)."""
        return (sum(p.prompt_tokens for p in self.prompts), sum(p.generated_tokens for p in self.prompts),
                sum(p.cached_tokens for p in self.prompts))

    def _abort(self) -> None:
        for p in self.prompts:
            if not p.finished:
                try:
                    p.stream.abort()
                except Exception:  # noqa: BLE001 - aborting twice or after shutdown is harmless
                    pass

    def close(self) -> None:
        self._abort()
        if self.active is not None and self.key is not None:
            self.active.remove(self.key)
        if self.timer is not None:
            self.timer.finish(self.reasons.get(0) if all(p.finished for p in self.prompts) else "abort")

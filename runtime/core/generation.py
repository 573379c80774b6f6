"""The engine streams of one request (one per prompt), consumed in prompt order: submitting them,
counting tokens for usage and prompt progress, and aborting them when the client leaves."""
from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

from llmpack.errors import LlmpackError
from llmpack.runtime.engine.client import (EngineDeadError, InvalidParameterError, OutputStream, PromptTooLongError,
                                           QueueFullError)
from llmpack.runtime.chat.reasoning import ReasoningParser
from llmpack.runtime.engine.outputs import CompletionOutput, RequestOutput
from llmpack.runtime.core.active import ActiveRequests
from llmpack.runtime.core.errors import ApiError, bad
from llmpack.runtime.core.request import Prepared
from llmpack.runtime.core.served_model import ServedModel


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
                 disconnected: Callable[[], bool] | None = None, timer: Timer | None = None,
                 cache_salt: str | None = None) -> None:
        """`cache_salt` (cache_salt_for: the API key the request used): requests with different
        salts never share cached prompt blocks, so one key cannot probe another's prompts
        through `cached_tokens` (vLLM's cache_salt)."""
        self.model, self.prep, self.active, self.timer = model, prep, active, timer
        self.request_id, self.disconnected, self.cache_salt = request_id, disconnected, cache_salt
        self.n = prep.params.n
        self.prompts: list[PromptStream] = []
        self.reasons: dict[int, str] = {}       # choice index -> finish reason
        self.started = time.monotonic()
        try:
            for i, ids in enumerate(prep.prompts):
                stream = model.engine.add_request(ids, prep.params, request_id=f"{request_id}-{i}",
                                                  prompt_progress=prep.return_progress, cache_salt=cache_salt)
                self.prompts.append(PromptStream(stream, len(ids)))
        except Exception as exc:
            self._abort()
            if timer is not None:
                timer.done = True
            raise submit_error(exc, prep.prompt_param) from None
        self.key = active.add([p.stream for p in self.prompts], disconnected) if active is not None else None
        budget = prep.reasoning_budget if self.n == 1 else None
        self._thinking = ({i: _Thinking(prep, budget) for i in range(len(self.prompts))}
                          if prep.reasoning is not None and self.n == 1 else {})

    @property
    def num_choices(self) -> int:
        return len(self.prompts) * self.n

    @property
    def processed(self) -> int:
        return sum(p.processed_tokens for p in self.prompts)

    @property
    def thinking_tokens(self) -> int:
        """Tokens a reasoning model spent thinking (Responses' `reasoning_tokens`), for n = 1."""
        return sum(w.tokens for w in self._thinking.values())

    def outputs(self) -> Iterator[tuple[int, RequestOutput]]:
        """(index of the first choice of this prompt, RequestOutput delta). A reply that thinks
        past its budget goes on in a continuation (`_end_thinking`): its deltas follow the first's."""
        for i, p in enumerate(self.prompts):
            before = 0   # tokens made by the streams this one continues
            watch = self._thinking.get(i)
            while True:
                cut = None
                for out in p.stream:
                    if out.error:
                        raise ApiError(500, f"Generation failed: {out.error}")
                    total = before + out.num_generated_tokens
                    if self.timer is not None:
                        self.timer.tokens(total - p.generated_tokens)
                    p.generated_tokens = total
                    if not before:   # a continuation's prompt is this reply's own text: not the client's
                        p.prompt_tokens = out.num_prompt_tokens or p.prompt_tokens
                        p.cached_tokens = out.num_cached_tokens
                        p.processed_tokens = max(p.processed_tokens, out.num_processed_prompt_tokens)
                    for c in out.outputs:
                        if c.finish_reason:
                            self.reasons[i * self.n + c.index] = c.finish_reason
                    p.finished = p.finished or out.finished
                    if not out.finished and watch is not None and watch.over(out):
                        cut = self._end_thinking(p, i, watch, total)
                    yield i * self.n, out
                    if cut is not None:
                        before = total + len(cut.outputs[0].token_ids)
                        yield i * self.n, cut
                        break
                if cut is None:
                    break

    def _end_thinking(self, p: PromptStream, i: int, watch: _Thinking, generated: int) -> RequestOutput | None:
        """Past the budget: the reply so far plus the syntax's closing marker becomes a new prompt,
        whose stream takes this one's place (prefix caching makes that cheap). Returns the marker
        as a delta of its own, so every reader sees the thinking end; None to let it run on
        (no room left for an answer)."""
        syntax, params = self.prep.reasoning, self.prep.params
        ids = self.model.engine.tokenize(syntax.cut, add_special=False, parse_special=True)
        left = None if params.max_tokens is None else params.max_tokens - generated - len(ids)
        if left is not None and left < 1:
            return None
        try:
            stream = self.model.engine.add_request([*self.prep.prompts[i], *watch.ids, *ids],
                                                   dataclasses.replace(params, max_tokens=left),
                                                   request_id=f"{self.request_id}-{i}-answer",
                                                   cache_salt=self.cache_salt)
        except Exception:  # noqa: BLE001 - no room in the context or the queue: the reply thinks on
            return None
        old, p.stream = p.stream, stream
        old.abort()
        if self.active is not None and self.key is not None:
            self.active.remove(self.key)
            self.key = self.active.add([q.stream for q in self.prompts], self.disconnected)
        watch.feed(syntax.cut, ids, ended=True)
        return RequestOutput(stream.request_id, [CompletionOutput(0, syntax.cut, list(ids))])

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


class _Thinking:
    """Watches one reply (n = 1) of a reasoning model: counts the tokens it spends thinking and
    keeps its token ids, so that past `budget` it can be continued with the thinking closed."""

    def __init__(self, prep: Prepared, budget: int | None) -> None:
        self.parser = ReasoningParser(prep.reasoning, started_open=prep.thinking_open)
        self.budget = budget
        self.tokens = 0
        self.ids: list[int] = []
        self.ended = False

    def feed(self, text: str, ids: list[int], ended: bool = False) -> None:
        self.ids += ids
        self.parser.feed(text)
        if self.parser.in_thinking:
            self.tokens += len(ids)
        self.ended = self.ended or ended

    def over(self, out: RequestOutput) -> bool:
        """Feed one delta; True when this reply has just thought past its budget."""
        for c in out.outputs:
            self.feed(c.text, c.token_ids)
        return (self.budget is not None and not self.ended and self.parser.in_thinking
                and self.tokens >= self.budget)


def cache_salt_for(api_key: str | None) -> str | None:
    """The prefix-cache salt of requests made with `api_key`; None (one shared cache) without one."""
    if not api_key:
        return None
    return hashlib.sha256(b"llmpack-cache-salt\0" + api_key.encode("utf-8")).hexdigest()[:32]

"""The OpenAI-compatible routes: /v1/models, /v1/chat/completions, /v1/completions.

Parsing and response shapes live in `protocol`; this module owns the engine streams of a
request (`Generation`): submitting, consuming, and aborting them when the client leaves.
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from typing import Any, Callable, Iterator

from flask import Blueprint, Response, jsonify, request

from llmpack.errors import LlmpackError
from llmpack.runtime.engine.request import EngineDeadError, PromptTooLongError, QueueFullError
from llmpack.runtime.engine.sampling_params import InvalidParameterError
from llmpack.runtime.server import protocol as P
from llmpack.runtime.server.api_error import ApiError, bad
from llmpack.runtime.server.attachments import ATTACH_BODY, READ_HEADER, expand_file_parts
from llmpack.runtime.server.request_context import app_context, check_model_id, check_model_name, json_body, ready_model
from llmpack.runtime.server.state import ServedModel
from llmpack.runtime.server.tool_output import ChoiceText, chat_message, stream_calls

bp = Blueprint("openai", __name__)
DONE = b"data: [DONE]\n\n"


# ---------------------------------------------------------------- routes
def _model_card(model: ServedModel) -> dict:
    return {"id": model.model_id, "object": "model", "created": model.created, "owned_by": "llmpack",
            "max_model_len": model.n_ctx, "meta": {"n_ctx": model.n_ctx, **model.meta}}


@bp.get("/v1/models")
def list_models():
    return jsonify({"object": "list", "data": [_model_card(ready_model(app_context().state))]})


@bp.get("/v1/models/<path:model_id>")
def get_model(model_id: str):
    model = ready_model(app_context().state)
    check_model_id(model_id, model)
    return jsonify(_model_card(model))


@bp.post("/v1/chat/completions")
def chat_completions():
    request.max_content_length = max(ATTACH_BODY, app_context().options.max_body)   # files may ride in it
    return _generate("chat", P.parse_chat)


@bp.post("/v1/completions")
def completions():
    return _generate("completion", P.parse_completion)


def _generate(kind: str, parse: Callable[[Any, ServedModel], P.Prepared]):
    ctx = app_context()
    model = ready_model(ctx.state)
    body = json_body()
    check_model_name(body, model)
    read: list[dict] = []
    if kind == "chat" and isinstance(body, dict):
        body["messages"], read = expand_file_parts(body.get("messages"), model)
    prep = parse(body, model)
    if prep.plan is not None and prep.plan.kind:
        ctx.metrics.constrained.labels(model.model_id, prep.plan.kind).inc()
    rid, created = P.new_id(kind), int(time.time())
    gen = Generation(model, prep, ctx, rid, request.environ.get("waitress.client_disconnected"))
    headers = {READ_HEADER: json.dumps(read)} if read else {}   # which parts of long files were read
    if prep.stream:
        return Response(_Body(_stream(gen, kind, rid, created), gen), mimetype="text/event-stream",
                        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers})
    try:
        return jsonify(_complete(gen, kind, rid, created)), headers
    finally:
        gen.close()


# ---------------------------------------------------------------- engine streams
def _map_submit_error(exc: Exception, param: str) -> Exception:
    if isinstance(exc, EngineDeadError):
        return ApiError(500, f"The server cannot generate any more: {exc}.", code="engine_failed",
                        type="server_error")

    if isinstance(exc, PromptTooLongError):
        n, limit = getattr(exc, "n_tokens", None), getattr(exc, "limit", None)
        return bad(param, f"This model's maximum context length is {limit} tokens, but your prompt is "
                            f"{n} tokens long. Shorten the prompt (or start a new chat).", "context_length_exceeded")
    if isinstance(exc, QueueFullError):
        return ApiError(503, "The server is busy: too many requests are waiting. Retry shortly.",
                        code="queue_full", type="server_overloaded", headers={"Retry-After": "1"})
    if isinstance(exc, InvalidParameterError):
        return bad(exc.param, str(exc))
    if isinstance(exc, LlmpackError):   # e.g. "the prompt is empty"
        return bad(param, str(exc))
    return exc


class Generation:
    """The engine streams of one API request (one per prompt), consumed in prompt order."""

    def __init__(self, model: ServedModel, prep: P.Prepared, ctx: Any, rid: str,
                 disconnected: Callable[[], bool] | None) -> None:
        self.model, self.prep, self.active = model, prep, ctx.state.active
        self.timer = ctx.metrics.timer(model.model_id)
        self.n = prep.params.n
        self.streams: list[Any] = []
        self.finished: list[bool] = []
        self.counts: list[tuple[int, int, int]] = []   # (prompt, cached, generated) per stream
        self.processed: list[int] = []                  # prompt tokens read so far, per stream
        self.reasons: dict[int, str] = {}
        self.started = time.monotonic()
        try:
            for i, ids in enumerate(prep.prompts):
                self.streams.append(model.engine.add_request(ids, prep.params, request_id=f"{rid}-{i}",
                                                             prompt_progress=prep.return_progress))
                self.finished.append(False)
                self.counts.append((len(ids), 0, 0))
                self.processed.append(0)
        except Exception as exc:
            self._abort()
            self.timer.done = True
            raise _map_submit_error(exc, prep.prompt_param) from None
        self.key = self.active.add(self.streams, disconnected)

    def outputs(self) -> Iterator[tuple[int, Any]]:
        """(index of the first choice of this prompt, RequestOutput delta)."""
        for i, stream in enumerate(self.streams):
            seen = 0
            for out in stream:
                if out.error:
                    raise ApiError(500, f"Generation failed: {out.error}")
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

    def usage(self) -> dict:
        return P.usage(sum(c[0] for c in self.counts), sum(c[2] for c in self.counts),
                       sum(c[1] for c in self.counts))

    def _abort(self) -> None:
        for stream, done in zip(self.streams, self.finished + [False] * len(self.streams)):
            if not done:
                try:
                    stream.abort()
                except Exception:  # noqa: BLE001
                    pass

    def close(self) -> None:
        self._abort()
        self.active.remove(self.key)
        reason = self.reasons.get(0) if all(self.finished) else "abort"
        self.timer.finish(reason)


def _complete(gen: Generation, kind: str, rid: str, created: int) -> dict:
    texts: dict[int, list[str]] = {}
    lps: dict[int, list[Any]] = {}
    for base, out in gen.outputs():
        for c in out.outputs:
            texts.setdefault(base + c.index, []).append(c.text)
            if c.logprobs:
                lps.setdefault(base + c.index, []).extend(c.logprobs)
    if "abort" in gen.reasons.values():
        raise ApiError(503, "The request was cancelled because the server is shutting down.", code="cancelled")
    want_lp = gen.prep.params.logprobs is not None
    choices = []
    for idx in range(len(gen.streams) * gen.n):
        text, reason = "".join(texts.get(idx, [])), gen.reasons.get(idx, "stop")
        if kind == "chat":
            lp = {"content": P.chat_logprobs(lps.get(idx, []), gen.prep.top_logprobs or 0)} if want_lp else None
            message, reason = chat_message(gen.prep.plan, text, reason)
            choices.append({"index": idx, "message": message, "logprobs": lp, "finish_reason": reason})
        else:
            lp = P.completion_logprobs(lps.get(idx, []), 0)[0] if want_lp else None
            choices.append({"index": idx, "text": text, "logprobs": lp, "finish_reason": reason})
    return {"id": rid, "object": "chat.completion" if kind == "chat" else "text_completion", "created": created,
            "model": gen.model.model_id, "system_fingerprint": gen.model.fingerprint, "choices": choices,
            "usage": gen.usage()}


def _chat_delta(held: ChoiceText, text: str, reason: str | None) -> tuple[dict, str | None]:
    """A streamed choice's delta: text as content unless it may be a tool call (then held back
    until the choice ends, when it becomes `tool_calls`)."""
    content = held.feed(text) if text else ""
    delta: dict = {}
    if reason:
        rest, calls = held.finish()
        content += rest
        if calls:
            delta.update(stream_calls(calls))
            reason = "tool_calls"
    if content:
        delta = {"content": content, **delta}
    return delta, reason


class _Body:
    """The SSE body; closing it (client gone, server done) always releases the engine streams,
    even if iteration never started."""

    def __init__(self, chunks: Iterator[bytes], gen: Generation) -> None:
        self.chunks, self.gen = chunks, gen

    def __iter__(self) -> Iterator[bytes]:
        return self.chunks

    def close(self) -> None:
        try:
            self.chunks.close()
        finally:
            self.gen.close()


def _stream(gen: Generation, kind: str, rid: str, created: int) -> Iterator[bytes]:
    chat = kind == "chat"
    head = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": created,
            "model": gen.model.model_id, "system_fingerprint": gen.model.fingerprint}
    tail = {"usage": None} if gen.prep.include_usage else {}
    want_lp, k = gen.prep.params.logprobs is not None, gen.prep.top_logprobs or 0
    offsets: dict[int, int] = {}
    held = [ChoiceText(gen.prep.plan) for _ in range(len(gen.streams) * gen.n)] if chat else []
    progress_sent = 0   # the last `processed` sent; each engine step that read more of the prompt sends one
    try:
        if chat:   # at once: the client knows it was accepted even while it waits in the queue
            yield P.sse({**head, "choices": [
                {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
                for i in range(len(gen.streams) * gen.n)], **tail})
        for base, out in gen.outputs():
            if gen.prep.return_progress and sum(gen.processed) > progress_sent:
                progress = gen.prompt_progress()
                progress_sent = progress["processed"]
                yield P.sse({**head, "choices": [], "prompt_progress": progress})
            choices = []
            for c in out.outputs:
                if c.finish_reason == "abort":
                    raise ApiError(503, "The request was cancelled because the server is shutting down.",
                                   code="cancelled")
                if not (c.text or c.logprobs or c.finish_reason):
                    continue
                idx = base + c.index
                if chat:
                    lp = {"content": P.chat_logprobs(c.logprobs or [], k)} if want_lp else None
                    delta, reason = _chat_delta(held[idx], c.text, c.finish_reason)
                    if delta or lp or reason:
                        choices.append({"index": idx, "delta": delta, "logprobs": lp, "finish_reason": reason})
                else:
                    lp = None
                    if want_lp:
                        lp, offsets[idx] = P.completion_logprobs(c.logprobs or [], offsets.get(idx, 0))
                    choices.append({"index": idx, "text": c.text, "logprobs": lp, "finish_reason": c.finish_reason})
            if choices:
                yield P.sse({**head, "choices": choices, **tail})
        if gen.prep.include_usage:
            yield P.sse({**head, "choices": [], "usage": gen.usage()})
        yield DONE
    except ApiError as exc:
        yield P.sse(exc.body())
        yield DONE
    except Exception:  # noqa: BLE001 - the stream is already 200: report in-band, never leak details
        traceback.print_exc(file=sys.stderr)
        yield P.sse(ApiError(500, "Internal server error while generating.").body())
        yield DONE
    finally:
        gen.close()

"""Running one prepared request for a protocol room: submitted through the core with the server's
in-flight set (a client that hangs up, or a shutdown, aborts it), the metrics timer, and a
streamed body that always releases the engine streams, even if nobody reads it, and ends the one
way every stream that fails after its 200 ends (`on_error`). Every room that streams (openai/,
responses/, anthropic/, ollama/) writes only its own events around this, and its own shape of an error."""
from __future__ import annotations

import sys
import traceback
from typing import Any, Callable, Iterable, Iterator

from flask import Response, request

from llmpack.runtime.core.errors import ApiError
from llmpack.runtime.core.generation import Generation, cache_salt_for
from llmpack.runtime.core.request import Prepared
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.server.http.context import app_context, check_model_name, json_body, ready_model


def model_and_body() -> tuple[ServedModel, Any]:
    """The ready model and the request's JSON body, its `model` name noted (any name is served).
    How large the body may be is the route's (security.carries_files), checked before this runs."""
    ctx = app_context()
    model = ready_model(ctx.state)
    body = json_body()
    check_model_name(body, model)
    return model, body


def start_generation(model: ServedModel, prep: Prepared, request_id: str) -> Generation:
    """Submit `prep` (400/503 before anything is queued, as the core raises them). Requests share
    cached prompt prefixes only with requests made with the same API key (cache_salt_for)."""
    ctx = app_context()
    if prep.plan.kind:
        ctx.metrics.constrained.labels(model.model_id, prep.plan.kind).inc()
    return Generation(model, prep, request_id, active=ctx.state.active, timer=ctx.metrics.timer(model.model_id),
                      disconnected=request.environ.get("waitress.client_disconnected"),
                      cache_salt=cache_salt_for(ctx.options.api_key))


class ClosingBody:
    """A streamed body; closing it (client gone, server done) always releases the engine streams,
    even if iteration never started."""

    def __init__(self, chunks: Iterator[bytes], gen: Generation) -> None:
        self.chunks, self.gen = chunks, gen

    def __iter__(self) -> Iterator[bytes]:
        return self.chunks

    def close(self) -> None:
        try:
            self.chunks.close()  # type: ignore[attr-defined]
        finally:
            self.gen.close()


INTERNAL_ERROR = "Internal server error while generating."

ErrorShape = Callable[[ApiError], Iterable[bytes]]   # a room's in-stream error: its events for one ApiError


def error_tail(chunks: Iterator[bytes], gen: Generation, on_error: ErrorShape) -> Iterator[bytes]:
    """`chunks`, ended the one way a stream ends once its 200 is sent: an ApiError (a refusal, a
    cancel, the engine's failure) in the room's shape; anything else printed on the console and
    told to the client as a 500 with none of its details. The engine streams are released either way."""
    try:
        yield from chunks
    except ApiError as exc:
        yield from on_error(exc)
    except Exception:  # noqa: BLE001 - the stream is already 200: report in-band, never leak details
        traceback.print_exc(file=sys.stderr)
        yield from on_error(ApiError(500, INTERNAL_ERROR))
    finally:
        gen.close()


def streamed(chunks: Iterator[bytes], gen: Generation, on_error: ErrorShape,
             mimetype: str = "text/event-stream") -> Response:
    return Response(ClosingBody(error_tail(chunks, gen, on_error), gen), mimetype=mimetype,
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

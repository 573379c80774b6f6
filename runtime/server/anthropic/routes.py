"""The Anthropic room's route table: POST /v1/messages (whole or streamed) and
/v1/messages/count_tokens. Every error on these routes, the guards' 401 and 403 included, is
answered in Anthropic's shape ({"type": "error", "error": {"type", "message"}})."""
from __future__ import annotations

from typing import Iterator

from flask import Blueprint, Response, jsonify

from llmpack.runtime.server.anthropic.protocol import chat_request, citations, error_body, message, new_id, usage
from llmpack.runtime.server.anthropic.stream import MessageStream, event
from llmpack.runtime.core.errors import ApiError
from llmpack.runtime.core.generation import Generation
from llmpack.runtime.core.output import final_choices, stream_steps
from llmpack.runtime.core.request import prepare_chat
from llmpack.runtime.server.http.errors import register_shape
from llmpack.runtime.server.http import security
from llmpack.runtime.server.http.streaming import model_and_body, start_generation, streamed

bp = Blueprint("anthropic", __name__)


def _error(err: ApiError) -> Response:
    resp = jsonify(error_body(err))
    resp.status_code = err.status
    resp.headers.update(err.headers)
    return resp


register_shape(bp.name, _error)


@bp.post("/v1/messages")
@security.carries_files
def messages() -> Response:
    model, body = model_and_body()
    req = chat_request(body)
    prep = prepare_chat(model, req)
    msg_id = new_id("msg")
    gen = start_generation(model, prep, msg_id)
    stops = set(body.get("stop_sequences") or ())
    if req.stream:
        return streamed(_stream(gen, msg_id, model.model_id, stops), gen, lambda exc: [event("error", error_body(exc))])
    try:
        (choice,) = final_choices(gen, chat=True)
        prompt, generated, cached = gen.usage()
        return jsonify(message(msg_id, model.model_id, thinking=choice.reasoning or "", text=choice.text or "",
                               calls=choice.tool_calls, finish=choice.finish_reason,
                               stop_sequence=choice.stop if choice.stop in stops else None,
                               usage=usage(prompt, generated, cached), cited=citations(choice.sources)))
    finally:
        gen.close()


def _stream(gen: Generation, msg_id: str, model_id: str, stops: set[str]) -> Iterator[bytes]:
    prompt, _, _ = gen.usage()
    out = MessageStream(msg_id, model_id, usage(prompt, 0, 0))
    finish, stop = None, None
    yield out.start()
    for step in stream_steps(gen, chat=True):
        for e in step.choices:
            yield from out.thinking(e.reasoning)
            yield from out.text(e.text)
            yield from out.citations(citations(e.sources))
            for call in e.tool_calls:
                yield from out.tool_use(call.id, call.name, call.arguments)
            if e.finish_reason:
                finish, stop = e.finish_reason, (e.stop if e.stop in stops else None)
    yield from out.finish(finish, stop, gen.usage()[1])


@bp.post("/v1/messages/count_tokens")
@security.carries_files
def count_tokens() -> Response:
    """The prompt's length in tokens, exactly as /v1/messages would submit it."""
    model, body = model_and_body()
    prep = prepare_chat(model, chat_request(body, counting=True))
    return jsonify({"input_tokens": len(prep.prompts[0])})

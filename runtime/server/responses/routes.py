"""The Responses room's route table: POST /v1/responses (whole or streamed), GET and DELETE
/v1/responses/{id} for stored responses. Errors are OpenAI's shape, as for every /v1 route."""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterator

from flask import Blueprint, Response, jsonify

from llmpack.runtime.core.errors import ApiError, bad
from llmpack.runtime.core.generation import Generation
from llmpack.runtime.core.output import final_choices, stream_steps
from llmpack.runtime.core.request import prepare_chat
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.server.http.context import app_context, ready_model
from llmpack.runtime.server.http import security
from llmpack.runtime.server.http.streaming import model_and_body, start_generation, streamed
from llmpack.runtime.server.responses.protocol import (assistant_turn, chat_request, file_citations, new_id,
                                                       output_items, response_object, restored, stored, usage)
from llmpack.runtime.server.responses.store import ResponseStore, StoreError
from llmpack.runtime.server.responses.stream import ResponseStream

bp = Blueprint("responses", __name__)


def _not_found(response_id: str, param: str | None = None) -> ApiError:
    what = "Previous response" if param else "Response"
    return ApiError(404, f"{what} with id {response_id!r} not found.", param=param, code="response_not_found")


def _history(model: ServedModel, body: Any) -> list[dict]:
    prev = body.get("previous_response_id") if isinstance(body, dict) else None
    if prev is None:
        return []
    if not isinstance(prev, str) or not prev:
        raise bad("previous_response_id", "'previous_response_id' must be the id of a stored response")
    return restored(_stored(app_context().responses.get, prev, "previous_response_id")[0])


def _keep(store: ResponseStore, model: ServedModel, body: dict, final: dict, conversation: list[dict],
          reply: dict) -> None:
    """`store`: the app's, taken while the request is read (a stream ends outside the app's context)."""
    if body.get("store") is False or final["status"] == "failed":
        return
    try:
        store.put(model.model_key, final["id"], stored([*conversation, reply]), final)
    except StoreError as exc:   # the answer still goes out; the client learns it was not kept
        print(f"llmpack: {exc}", file=sys.stderr)
        final["store"] = False


@bp.post("/v1/responses")
@security.carries_files
def create_response() -> Response:
    model, body = model_and_body()
    req, conversation = chat_request(body, _history(model, body))
    prep = prepare_chat(model, req)
    rid, created = new_id("resp"), int(time.time())
    gen, store = start_generation(model, prep, rid), app_context().responses
    if req.stream:
        out = ResponseStream(body, rid, model.model_id, created)
        return streamed(_stream(gen, out, body, conversation, store), gen,
                        lambda exc: [out.failed(exc.code or exc.type, exc.message)])
    try:
        (choice,) = final_choices(gen, chat=True)
        status = "incomplete" if choice.finish_reason == "length" else "completed"
        prompt, generated, cached = gen.usage()
        final = response_object(body, rid, model.model_id, created, status=status, finish=choice.finish_reason,
                                output=output_items(choice.reasoning or "", choice.text or "", choice.tool_calls, {},
                                                    annotations=file_citations(choice.sources)),
                                usage=usage(prompt, generated, cached, gen.thinking_tokens))
    finally:
        gen.close()
    _keep(store, model, body, final, conversation, assistant_turn(choice.text or "", choice.tool_calls))
    return jsonify(final)


def _stream(gen: Generation, out: ResponseStream, body: dict, conversation: list[dict],
            store: ResponseStore) -> Iterator[bytes]:
    finish = None
    yield from out.start()
    for step in stream_steps(gen, chat=True):
        for e in step.choices:
            yield from out.delta("reasoning", e.reasoning)
            yield from out.delta("message", e.text)
            yield from out.annotate(file_citations(e.sources))
            for call in e.tool_calls:
                yield from out.call(call)
            finish = e.finish_reason or finish
    prompt, generated, cached = gen.usage()
    events, final = out.finish(finish, usage(prompt, generated, cached, gen.thinking_tokens))
    _keep(store, gen.model, body, final, conversation, assistant_turn(out.texts["message"], out.calls))
    yield from events


def _stored(action: Callable[[str, str], Any], response_id: str, param: str | None = None) -> Any:
    """`action(model key, id)` on the store; a stored response that is not there is a 404."""
    model = ready_model(app_context().state)
    try:
        found = action(model.model_key, response_id)
    except StoreError as exc:
        raise ApiError(500, str(exc), code="store_failed") from None
    if not found:
        raise _not_found(response_id, param)
    return found


@bp.get("/v1/responses/<response_id>")
def get_response(response_id: str) -> Response:
    return jsonify(_stored(app_context().responses.get, response_id)[1])


@bp.delete("/v1/responses/<response_id>")
def delete_response(response_id: str) -> Response:
    _stored(app_context().responses.delete, response_id)
    return jsonify({"id": response_id, "object": "response", "deleted": True})

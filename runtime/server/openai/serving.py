"""What /v1/chat/completions and /v1/completions share: parse, prepare through the core, submit,
and answer whole (JSON) or as server-sent events. The shapes of each are in serving_chat.py and
serving_completion.py (an `Api`: how to prepare a request and write one choice)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from flask import Response, jsonify

from llmpack.runtime.core.attachments import READ_HEADER
from llmpack.runtime.core.generation import Generation
from llmpack.runtime.core.output import final_choices, stream_steps
from llmpack.runtime.core.request import Prepared
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.server.http.context import app_context, check_model_name, json_body, ready_model
from llmpack.runtime.server.http.streaming import start_generation, streamed
from llmpack.runtime.server.openai import protocol as P

DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class Api:
    """One endpoint's shapes: `prepare(body, model)`, the object names, and how one choice is
    written whole (`whole(choice, want_lp, k)`) and streamed (`delta(event, want_lp, k, offsets)`,
    None to send nothing)."""

    kind: str                      # chat | completion (ids, metrics)
    object: str
    chunk_object: str
    prepare: Callable[[Any, ServedModel], Prepared]
    whole: Callable[..., dict]
    delta: Callable[..., "dict | None"]
    role_chunk: bool               # chat streams open with each choice's role


def generate(api: Api) -> Response:
    """Parse, prepare through the core, submit, answer whole or as SSE."""
    ctx = app_context()
    model = ready_model(ctx.state)
    body = json_body()
    check_model_name(body, model)
    prep = api.prepare(body, model)
    rid, created = P.new_id(api.kind), int(time.time())
    gen = start_generation(model, prep, rid)
    headers = {READ_HEADER: json.dumps(prep.read)} if prep.read else {}   # which parts of long files were read
    if prep.stream:
        resp = streamed(_stream(gen, api, rid, created), gen, lambda exc: [P.sse(exc.body()), DONE])
        resp.headers.update(headers)
        return resp
    try:
        return jsonify(_complete(gen, api, rid, created)), headers
    finally:
        gen.close()


def _complete(gen: Generation, api: Api, rid: str, created: int) -> dict:
    want_lp, k = gen.prep.params.logprobs is not None, gen.prep.top_logprobs or 0
    choices = [api.whole(c, want_lp, k) for c in final_choices(gen, api.kind == "chat")]
    return {"id": rid, "object": api.object, "created": created, "model": gen.model.model_id,
            "system_fingerprint": gen.model.fingerprint, "choices": choices, "usage": P.usage(gen.usage())}


def _stream(gen: Generation, api: Api, rid: str, created: int) -> Iterator[bytes]:
    head = {"id": rid, "object": api.chunk_object, "created": created,
            "model": gen.model.model_id, "system_fingerprint": gen.model.fingerprint}
    tail = {"usage": None} if gen.prep.include_usage else {}
    want_lp, k = gen.prep.params.logprobs is not None, gen.prep.top_logprobs or 0
    offsets: dict[int, int] = {}
    if api.role_chunk:   # at once: the client knows it was accepted even while it waits in the queue
        yield P.sse({**head, "choices": [
            {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            for i in range(gen.num_choices)], **tail})
    for step in stream_steps(gen, api.kind == "chat"):
        if step.progress is not None:
            yield P.sse({**head, "choices": [], "prompt_progress": step.progress})
        choices = [c for c in (api.delta(e, want_lp, k, offsets) for e in step.choices) if c is not None]
        if choices:
            yield P.sse({**head, "choices": choices, **tail})
    if gen.prep.include_usage:
        yield P.sse({**head, "choices": [], "usage": P.usage(gen.usage())})
    yield DONE

"""The Ollama room's route table. /api/chat and /api/generate answer NDJSON (or one object with
stream: false); /api/tags, /api/show and /api/ps describe the one model in this file; pull, push,
create, copy, delete and blobs answer that this file holds one model. Every error here, the
guards' 401 included, is Ollama's {"error": "..."}."""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator

from flask import Blueprint, Response, jsonify

from llmpack import __version__
from llmpack.runtime.engine.client import EmbeddingError
from llmpack.runtime.core.errors import ApiError, bad
from llmpack.runtime.core.generation import Generation
from llmpack.runtime.core.output import final_choices, stream_steps
from llmpack.runtime.core.params import scrub
from llmpack.runtime.core.request import ChatRequest, prepare_chat, prepare_completion
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.server.http.context import app_context, ready_model
from llmpack.runtime.server.http.errors import register_shape
from llmpack.runtime.server.http import security
from llmpack.runtime.server.http.streaming import model_and_body, start_generation, streamed
from llmpack.runtime.server.ollama import protocol as P

bp = Blueprint("ollama", __name__, url_prefix="/api")
ONE_MODEL = ("this file holds one model ({name}) and serves only it: llmpack cannot {verb} models. "
             "To use another model, run that model's own file.")


def _error(err: ApiError) -> Response:
    resp = jsonify(P.error_body(err))
    resp.status_code = err.status
    resp.headers.update(err.headers)
    return resp


register_shape(bp.name, _error)


def _loaded(model: ServedModel, key: str, empty: Any) -> Response:
    """An empty request loads the model in Ollama; here it is loaded: say so, as Ollama does."""
    return jsonify({"model": model.model_id, "created_at": P.now_iso(), key: empty, "done": True, "done_reason": "load"})


@bp.post("/chat")
@security.carries_files
def chat() -> Response:
    model, body = model_and_body()
    if isinstance(body, dict) and body.get("messages") == []:
        return _loaded(model, "message", {"role": "assistant", "content": ""})
    req = P.chat_request(body)
    return _answer(model, req, lambda text, thinking, calls: {"message": _message(text, thinking, calls)})


@bp.post("/generate")
@security.carries_files
def generate() -> Response:
    model, body = model_and_body()
    if isinstance(body, dict) and not body.get("prompt") and not body.get("images"):
        return _loaded(model, "response", "")
    req = P.generate_request(body)

    def shape(text: str, thinking: str, calls: list) -> dict:
        return {"response": text, **({"thinking": thinking} if thinking else {})}
    return _answer(model, req, shape)


def _message(text: str, thinking: str, calls: list) -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if thinking:
        msg["thinking"] = thinking
    if calls:
        msg["tool_calls"] = P.tool_calls(calls)
    return msg


def _answer(model: ServedModel, req: Any, shape: Callable[[str, str, list], dict]) -> Response:
    chat = isinstance(req, ChatRequest)
    if chat and req.think not in (None, False) and model.reasoning is None:   # as Ollama answers
        raise bad("think", f"{model.model_id!r} does not support thinking")
    prep = prepare_chat(model, req) if chat else prepare_completion(model, req)
    started = time.perf_counter()
    gen = start_generation(model, prep, f"ollama-{time.time_ns()}")
    if req.stream:
        return streamed(_lines(gen, chat, shape, started), gen, lambda exc: [P.ndjson(P.error_body(exc))],
                        "application/x-ndjson")
    try:
        (c,) = final_choices(gen, chat=chat)
        prompt, generated, _ = gen.usage()
        return jsonify({"model": model.model_id, "created_at": P.now_iso(),
                        **shape(c.text or "", c.reasoning or "", c.tool_calls), "done": True,
                        "done_reason": P.done_reason(c.finish_reason), **P.timings(started, None, prompt, generated)})
    finally:
        gen.close()


def _lines(gen: Generation, chat: bool, shape: Callable[[str, str, list], dict], started: float) -> Iterator[bytes]:
    head = {"model": gen.model.model_id}
    first, finish = None, None
    for step in stream_steps(gen, chat=chat):
        for e in step.choices:
            if e.text or e.reasoning or e.tool_calls:
                first = first or time.perf_counter()
                yield P.ndjson({**head, "created_at": P.now_iso(), **shape(e.text, e.reasoning, e.tool_calls),
                                "done": False})
            finish = e.finish_reason or finish
    prompt, generated, _ = gen.usage()
    yield P.ndjson({**head, "created_at": P.now_iso(), **shape("", "", []), "done": True,
                    "done_reason": P.done_reason(finish), **P.timings(started, first, prompt, generated)})


@bp.post("/embed")
def embed() -> Response:
    model, body = model_and_body()
    body = P.check_keys(body, {"model", "input", "truncate", "options", "keep_alive", "dimensions"})
    inputs = body.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs or not all(isinstance(x, str) and x for x in inputs):
        raise bad("input", "input must be a non-empty string or a list of non-empty strings")
    if body.get("dimensions") is not None:
        raise bad("dimensions", "dimensions: this model's embeddings have a fixed size")
    vectors, n = _embed(model, inputs, truncate=body.get("truncate") is not False)
    return jsonify({"model": model.model_id, "embeddings": [v.tolist() for v in vectors],
                    "total_duration": 0, "load_duration": 0, "prompt_eval_count": n})


@bp.post("/embeddings")
def embeddings_legacy() -> Response:
    """The older /api/embeddings: one `prompt`, one `embedding`."""
    model, body = model_and_body()
    body = P.check_keys(body, {"model", "prompt", "options", "keep_alive"})
    if not isinstance(body.get("prompt"), str) or not body["prompt"]:
        raise bad("prompt", "prompt must be a non-empty string")
    vectors, _ = _embed(model, [body["prompt"]], truncate=True)
    return jsonify({"embedding": vectors[0].tolist()})


def _embed(model: ServedModel, texts: list[str], truncate: bool) -> tuple[list, int]:
    ids = [model.engine.tokenize(scrub(t), True, False) for t in texts]
    if truncate:
        ids = [x[:model.n_ctx] for x in ids]
    try:
        return model.engine.embed(ids), sum(len(x) for x in ids)
    except EmbeddingError as exc:
        raise bad("input", str(exc)) from None


def _details(model: ServedModel) -> dict:
    arch = model.meta.get("architecture") or ""
    params = model.meta.get("parameters") or 0
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch] if arch else None,
            "parameter_size": f"{params / 1e9:.1f}B" if params >= 1e8 else f"{params / 1e6:.0f}M" if params else "",
            "quantization_level": model.meta.get("file_type") or ""}


def _entry(model: ServedModel) -> dict:
    return {"name": model.model_id, "model": model.model_id, "modified_at": P.now_iso(model.created),
            "size": model.meta.get("size") or 0, "digest": model.model_key, "details": _details(model)}


@bp.get("/tags")
def tags() -> Response:
    return jsonify({"models": [_entry(ready_model(app_context().state))]})


@bp.get("/ps")
def ps() -> Response:
    model = ready_model(app_context().state)
    return jsonify({"models": [{**_entry(model), "expires_at": "9999-12-31T23:59:59Z", "size_vram": 0,
                                "context_length": model.n_ctx}]})


@bp.get("/version")
def version() -> Response:
    return jsonify({"version": P.API_VERSION, "llmpack": __version__})


@bp.post("/show")
def show() -> Response:
    model, body = model_and_body()
    body = P.check_keys(body, {"model", "name", "verbose"})
    arch = model.meta.get("architecture") or "llama"
    caps = ["completion"] + (["tools"] if model.chat is not None else [])
    caps += ["thinking"] if model.reasoning is not None else []
    params = "\n".join(f"{k} {v}" for k, v in model.sampling.items())
    params += "".join(f'\nstop "{s}"' for s in model.stop)
    return jsonify({"license": "", "modelfile": f"# The one model in this llmpack file\nFROM {model.model_id}\n",
                    "parameters": params.strip(), "template": model.chat.template if model.chat else "",
                    "details": _details(model), "capabilities": caps, "modified_at": P.now_iso(model.created),
                    "model_info": {"general.architecture": arch, "general.parameter_count": model.meta.get("parameters"),
                                   f"{arch}.context_length": model.meta.get("n_ctx_train") or model.n_ctx}})


def _one_model(verb: str) -> Callable[..., Response]:
    def view(**_: Any) -> Response:
        name = ready_model(app_context().state).display_name
        raise ApiError(501, ONE_MODEL.format(name=name, verb=verb), code="not_supported")
    view.__name__ = f"{verb}_model"
    return view


for _path, _verb, _methods in (("/pull", "pull", ["POST"]), ("/push", "push", ["POST"]),
                               ("/create", "create", ["POST"]), ("/copy", "copy", ["POST"]),
                               ("/delete", "delete", ["DELETE"]), ("/blobs/<digest>", "upload", ["POST", "HEAD"])):
    bp.add_url_rule(_path, f"{_verb}_model", _one_model(_verb), methods=_methods)

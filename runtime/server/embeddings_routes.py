"""/v1/embeddings in OpenAI's shape, and llama-server's /tokenize and /detokenize."""
from __future__ import annotations

import base64
import threading
from typing import Any

from flask import Blueprint, jsonify

from llmpack.runtime.engine.embeddings import Embedder, EmbeddingError
from llmpack.runtime.server import protocol as P
from llmpack.runtime.server.api_error import bad
from llmpack.runtime.server.request_context import app_context, check_model_name, json_body, ready_model
from llmpack.runtime.server.state import ServedModel

bp = Blueprint("embeddings", __name__)
MAX_INPUTS = 2048
_open_lock = threading.Lock()


def _runner(model: ServedModel):
    return model.engine.runner   # its tokenize / token_bytes are thread-safe


def embedder(model: ServedModel):
    """The model's Embedder, made on first use."""
    with _open_lock:
        if model.embedder is None:
            runner = model.engine.runner
            model.embedder = Embedder(runner.model, min(model.n_ctx, 2048), runner.cfg.n_threads)
        return model.embedder


@bp.post("/v1/embeddings")
def embeddings():
    ctx = app_context()
    model = ready_model(ctx.state)
    body = P.check_keys(json_body(), {"model", "input", "encoding_format", "dimensions", "user"})
    check_model_name(body, model)
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"")
    if body.get("dimensions") is not None:
        raise bad("dimensions", "'dimensions' is not supported: this model's embeddings have a fixed size",
                    "unsupported_parameter")
    inputs = _inputs(body.get("input"), model)
    runner = _runner(model)
    ids = [runner.tokenize(P.scrub(x), True, False) if isinstance(x, str) else x for x in inputs]
    ctx.metrics.embedding_requests.labels(model.model_id).inc()
    ctx.metrics.embedding_inputs.labels(model.model_id).inc(len(ids))
    try:
        vectors = embedder(model).embed(ids)
    except EmbeddingError as exc:
        raise bad("input", str(exc)) from None
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if fmt == "base64" else v.tolist()}
            for i, v in enumerate(vectors)]
    n = sum(len(x) for x in ids)
    return jsonify({"object": "list", "data": data, "model": model.model_id,
                    "usage": {"prompt_tokens": n, "total_tokens": n}})


def _inputs(value: Any, model: ServedModel) -> list:
    """OpenAI's input: a string, a list of strings, a list of token ids, or a list of those."""
    if isinstance(value, str) or P._is_ids(value):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(x, str) or P._is_ids(x) for x in value):
        raise bad("input", "'input' must be a string, a list of strings, a list of token ids, or a list of those")
    if len(value) > MAX_INPUTS:
        raise bad("input", f"at most {MAX_INPUTS} inputs per request")
    n_vocab = model.engine.n_vocab
    for x in value:
        if isinstance(x, str) and not x:
            raise bad("input", "'input' strings must not be empty")
        if isinstance(x, list) and any(not 0 <= t < n_vocab for t in x):
            raise bad("input", f"token ids must be from 0 to {n_vocab - 1}")
    return value


@bp.post("/tokenize")
def tokenize_route():
    model = ready_model(app_context().state)
    body = P.check_keys(json_body(), {"content", "add_special", "parse_special", "with_pieces", "model"})
    content = body.get("content")
    if not isinstance(content, str):
        raise bad("content", "'content' must be a string")
    flags = {}
    for key, default in (("add_special", False), ("parse_special", True), ("with_pieces", False)):
        flags[key] = body.get(key, default)
        if not isinstance(flags[key], bool):
            raise bad(key, f"'{key}' must be true or false")
    runner = _runner(model)
    tokens = runner.tokenize(P.scrub(content), flags["add_special"], flags["parse_special"])
    if not flags["with_pieces"]:
        return jsonify({"tokens": tokens})
    out = []
    for t in tokens:
        raw = runner.token_bytes(t, special=True)
        try:
            text: Any = raw.decode("utf-8")
        except UnicodeDecodeError:   # part of a multi-byte character: its bytes, as llama-server
            text = list(raw)
        out.append({"id": t, "piece": text})
    return jsonify({"tokens": out})


@bp.post("/detokenize")
def detokenize_route():
    model = ready_model(app_context().state)
    body = P.check_keys(json_body(), {"tokens", "model"})
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise bad("tokens", "'tokens' must be a list of token ids")
    if any(not 0 <= t < model.engine.n_vocab for t in tokens):
        raise bad("tokens", f"token ids must be from 0 to {model.engine.n_vocab - 1}")
    runner = _runner(model)
    text = b"".join(runner.token_bytes(t, special=True) for t in tokens).decode("utf-8", errors="replace")
    return jsonify({"content": text})

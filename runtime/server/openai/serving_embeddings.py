"""/v1/embeddings in OpenAI's shape, and llama-server's /tokenize and /detokenize. Embeddings come
from the engine (`EngineClient.embed`: a second context on the same weights, opened on first use)."""
from __future__ import annotations

import base64
from typing import Any

from flask import Response, jsonify

from llmpack.runtime.engine.client import EmbeddingError
from llmpack.runtime.core.errors import bad
from llmpack.runtime.core.params import check_token_ids, is_token_ids, scrub
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.server.http.context import app_context, check_model_name, json_body, ready_model
from llmpack.runtime.server.openai.protocol import check_keys

MAX_INPUTS = 2048


def embeddings() -> Response:
    ctx = app_context()
    model = ready_model(ctx.state)
    body = check_keys(json_body(), {"model", "input", "encoding_format", "dimensions", "user"})
    check_model_name(body, model)
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"")
    if body.get("dimensions") is not None:
        raise bad("dimensions", "'dimensions' is not supported: this model's embeddings have a fixed size",
                    "unsupported_parameter")
    inputs = _inputs(body.get("input"), model)
    ids = [model.engine.tokenize(scrub(x), True, False) if isinstance(x, str) else x for x in inputs]
    ctx.metrics.embedding_requests.labels(model.model_id).inc()
    ctx.metrics.embedding_inputs.labels(model.model_id).inc(len(ids))
    try:
        vectors = model.engine.embed(ids)
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
    if isinstance(value, str) or is_token_ids(value):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(x, str) or is_token_ids(x) for x in value):
        raise bad("input", "'input' must be a string, a list of strings, a list of token ids, or a list of those")
    if len(value) > MAX_INPUTS:
        raise bad("input", f"at most {MAX_INPUTS} inputs per request")
    for x in value:
        if isinstance(x, str) and not x:
            raise bad("input", "'input' strings must not be empty")
        if isinstance(x, list):
            check_token_ids(x, model.engine.n_vocab, "input")
    return value


def tokenize() -> Response:
    model = ready_model(app_context().state)
    body = check_keys(json_body(), {"content", "add_special", "parse_special", "with_pieces", "model"})
    content = body.get("content")
    if not isinstance(content, str):
        raise bad("content", "'content' must be a string")
    flags = {}
    for key, default in (("add_special", False), ("parse_special", True), ("with_pieces", False)):
        flags[key] = body.get(key, default)
        if not isinstance(flags[key], bool):
            raise bad(key, f"'{key}' must be true or false")
    tokens = model.engine.tokenize(scrub(content), flags["add_special"], flags["parse_special"])
    if not flags["with_pieces"]:
        return jsonify({"tokens": tokens})
    out = []
    for t in tokens:
        raw = model.engine.token_bytes(t, special=True)
        try:
            text: Any = raw.decode("utf-8")
        except UnicodeDecodeError:   # part of a multi-byte character: its bytes, as llama-server
            text = list(raw)
        out.append({"id": t, "piece": text})
    return jsonify({"tokens": out})


def detokenize() -> Response:
    model = ready_model(app_context().state)
    body = check_keys(json_body(), {"tokens", "model"})
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise bad("tokens", "'tokens' must be a list of token ids")
    check_token_ids(tokens, model.engine.n_vocab, "tokens")
    text = b"".join(model.engine.token_bytes(t, special=True) for t in tokens).decode("utf-8", errors="replace")
    return jsonify({"content": text})

"""The OpenAI room's route table (llama-server's names where OpenAI has none)."""
from __future__ import annotations

from flask import Blueprint, Response, jsonify

from llmpack.runtime.server.http import security
from llmpack.runtime.server.http.context import app_context, check_model_id, ready_model
from llmpack.runtime.server.openai import serving_embeddings
from llmpack.runtime.server.openai.serving import generate
from llmpack.runtime.server.openai.serving_chat import CHAT
from llmpack.runtime.server.openai.serving_completion import COMPLETION
from llmpack.runtime.server.openai.serving_models import model_card, model_list

bp = Blueprint("openai", __name__)


@bp.get("/v1/models")
def list_models() -> Response:
    return jsonify(model_list(ready_model(app_context().state)))


@bp.get("/v1/models/<path:model_id>")
def get_model(model_id: str) -> Response:
    model = ready_model(app_context().state)
    check_model_id(model_id, model)
    return jsonify(model_card(model))


@bp.post("/v1/chat/completions")
@security.carries_files
def chat_completions() -> Response:
    return generate(CHAT)


@bp.post("/v1/completions")
def completions() -> Response:
    return generate(COMPLETION)


bp.add_url_rule("/v1/embeddings", "embeddings", serving_embeddings.embeddings, methods=["POST"])
bp.add_url_rule("/tokenize", "tokenize_route", serving_embeddings.tokenize, methods=["POST"])
bp.add_url_rule("/detokenize", "detokenize_route", serving_embeddings.detokenize, methods=["POST"])

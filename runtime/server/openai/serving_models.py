"""GET /v1/models and /v1/models/ID: the one model this server has."""
from __future__ import annotations

from llmpack.runtime.core.served_model import ServedModel


def model_card(model: ServedModel) -> dict:
    return {"id": model.model_id, "object": "model", "created": model.created, "owned_by": "llmpack",
            "max_model_len": model.n_ctx, "meta": {"n_ctx": model.n_ctx, **model.meta}}


def model_list(model: ServedModel) -> dict:
    return {"object": "list", "data": [model_card(model)]}

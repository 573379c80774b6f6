"""POST /v1/completions: OpenAI's text completion request -> the core -> text_completion objects."""
from __future__ import annotations

from typing import Any

from llmpack.runtime.core.output import ChoiceEvent, FinalChoice
from llmpack.runtime.core.request import Prepared, prepare_completion
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.server.openai import protocol as P
from llmpack.runtime.server.openai.serving import Api


def prepare(body: Any, model: ServedModel) -> Prepared:
    return prepare_completion(model, P.parse_completion(body))


def whole(c: FinalChoice, want_lp: bool, k: int) -> dict:
    return {"index": c.index, "text": c.text,
            "logprobs": P.completion_logprobs(c.logprobs, 0)[0] if want_lp else None,
            "finish_reason": c.finish_reason}


def delta(e: ChoiceEvent, want_lp: bool, k: int, offsets: dict[int, int]) -> dict | None:
    lp = None
    if want_lp:
        lp, offsets[e.index] = P.completion_logprobs(e.logprobs or [], offsets.get(e.index, 0))
    return {"index": e.index, "text": e.text, "logprobs": lp, "finish_reason": e.finish_reason}


COMPLETION = Api("completion", "text_completion", "text_completion", prepare, whole, delta, role_chunk=False)

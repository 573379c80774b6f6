"""POST /v1/chat/completions: OpenAI's chat request -> the core -> chat.completion(.chunk)s."""
from __future__ import annotations

from typing import Any

from llmpack.runtime.core.output import ChoiceEvent, FinalChoice
from llmpack.runtime.core.request import Prepared, prepare_chat
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.server.openai import protocol as P
from llmpack.runtime.server.openai.serving import Api


def prepare(body: Any, model: ServedModel) -> Prepared:
    return prepare_chat(model, P.parse_chat(body))


def whole(c: FinalChoice, want_lp: bool, k: int) -> dict:
    message: dict = {"role": "assistant", "content": c.text}
    if c.reasoning:   # llama-server's name and vLLM's / Ollama's
        message["reasoning_content"] = message["reasoning"] = c.reasoning
    if c.tool_calls:
        message["tool_calls"] = [t.to_openai() for t in c.tool_calls]
    if c.sources is not None:   # the request read documents: where the reply's sentences come from
        message["sources"] = [s.to_json() for s in c.sources]
    return {"index": c.index, "message": message,
            "logprobs": {"content": P.chat_logprobs(c.logprobs, k)} if want_lp else None,
            "finish_reason": c.finish_reason}


def delta(e: ChoiceEvent, want_lp: bool, k: int, offsets: dict[int, int]) -> dict | None:
    delta: dict = {"content": e.text} if e.text else {}
    if e.reasoning:
        delta["reasoning_content"] = delta["reasoning"] = e.reasoning
    if e.tool_calls:
        delta["tool_calls"] = P.tool_calls(e.tool_calls)
    if e.sources is not None:   # with the finish reason, once the whole reply can be attributed
        delta["sources"] = [s.to_json() for s in e.sources]
    lp = {"content": P.chat_logprobs(e.logprobs or [], k)} if want_lp else None
    if not (delta or lp or e.finish_reason):
        return None
    return {"index": e.index, "delta": delta, "logprobs": lp, "finish_reason": e.finish_reason}


CHAT = Api("chat", "chat.completion", "chat.completion.chunk", prepare, whole, delta, role_chunk=True)

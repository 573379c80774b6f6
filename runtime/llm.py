"""The offline API, shaped like vLLM's so its users feel at home::

    from llmpack import LLM, SamplingParams
    llm = LLM("model.gguf")
    for out in llm.generate(["The sky is"], SamplingParams(n=3, temperature=0.8, max_tokens=100)):
        print(out.prompt, [c.text for c in out.outputs])
    llm.chat([{"role": "user", "content": "Hi!"}], SamplingParams(max_tokens=64))

All prompts are submitted at once, so they are batched together by the engine.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable, Sequence

from llmpack.runtime.chat.recipes import chat_format_for_model
from llmpack.runtime.engine.engine import EngineConfig, LLMEngine, RequestStream
from llmpack.runtime.engine.outputs import CompletionOutput, RequestOutput
from llmpack.runtime.engine.sampling_params import CHAT_MAX_TOKENS, SamplingParams
from llmpack.runtime.model.gguf_check import validate_gguf
from llmpack.runtime.model.model_info import read_model_info


def collect(stream: RequestStream) -> RequestOutput:
    """Drain a stream and merge its deltas into one RequestOutput with whole texts."""
    merged: dict[int, CompletionOutput] = {}
    final: RequestOutput | None = None
    for out in stream:
        for d in out.outputs:
            c = merged.setdefault(d.index, CompletionOutput(index=d.index))
            c.text += d.text
            c.token_ids += d.token_ids
            if d.logprobs is not None:
                c.logprobs = (c.logprobs or []) + d.logprobs
            if d.finish_reason is not None:
                c.finish_reason, c.stop_reason = d.finish_reason, d.stop_reason
        final = out
    assert final is not None
    final.outputs = [merged[i] for i in sorted(merged)]
    return final


class LLM:
    def __init__(self, model: str | Path, *, n_ctx: int = 4096, max_num_seqs: int = 32,
                 gpu_layers: int | str = "auto", recipe: str | None = None, **engine_kwargs) -> None:
        validate_gguf(model)
        self.model_path = Path(model)
        self.recipe = recipe
        self.engine = LLMEngine(EngineConfig(model_path=str(model), n_ctx=n_ctx, max_num_seqs=max_num_seqs,
                                             gpu_layers=gpu_layers, **engine_kwargs))
        self._chat_format = None

    def generate(self, prompts: str | Sequence[str] | Sequence[list[int]],
                 params: SamplingParams | Sequence[SamplingParams] | None = None) -> list[RequestOutput]:
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        if params is None or isinstance(params, SamplingParams):
            params = [params or SamplingParams()] * len(prompts)
        streams = [self.engine.add_request(p, sp) for p, sp in zip(prompts, params)]
        return [collect(s) for s in streams]

    @property
    def chat_format(self):
        """How messages become a prompt: recipe > embedded template > matched recipe."""
        if self._chat_format is None:
            self._chat_format = chat_format_for_model(read_model_info(self.model_path), self.recipe)
        return self._chat_format

    def chat(self, messages: list[dict] | list[list[dict]], params: SamplingParams | None = None) -> list[RequestOutput]:
        conversations: Iterable[list[dict]] = [messages] if messages and isinstance(messages[0], dict) else messages  # type: ignore[assignment]
        fmt = self.chat_format
        params = params or SamplingParams(max_tokens=CHAT_MAX_TOKENS)
        if fmt.stop:   # a copy: the caller's params stay as they were
            params = dataclasses.replace(params, stop=list(dict.fromkeys([*params.stop, *fmt.stop])))
        prompts = [self.engine.tokenize_prompt(fmt.render(conv)) for conv in conversations]
        return self.generate(prompts, params)

    def close(self) -> None:
        self.engine.shutdown()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

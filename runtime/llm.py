"""The offline API, shaped like vLLM's so its users feel at home::

    from llmpack import LLM, SamplingParams
    llm = LLM("model.gguf")
    for out in llm.generate(["The sky is"], SamplingParams(n=3, temperature=0.8, max_tokens=100)):
        print(out.prompt, [c.text for c in out.outputs])
    llm.chat([{"role": "user", "content": "Hi!"}])                      # the recipe's defaults
    params = llm.get_default_sampling_params(); params.temperature = 0  # ... with one changed
    llm.chat([{"role": "user", "content": "Hi!"}], params)

`chat` takes the server's own path (core/: the chat template, the default system prompt,
the recipe's sampling defaults, stop strings and stop token ids), so a model answers the same
offline and over HTTP. All prompts are submitted at once, so the engine batches them together.
"""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any, Iterable, Sequence

from llmpack.errors import LlmpackError
from llmpack.runtime.chat.recipes import ChatFormat, chat_format_for_model
from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.engine.outputs import CompletionOutput, RequestOutput
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.engine.vllm_args import engine_kwargs as vllm_engine_kwargs
from llmpack.runtime.model.context import DEFAULT_N_CTX
from llmpack.runtime.model.gguf_check import validate_gguf
from llmpack.runtime.model.model_info import read_model_info
from llmpack.runtime.core.errors import ApiError
from llmpack.runtime.core.files import AppFiles
from llmpack.runtime.core.generation import Generation
from llmpack.runtime.core.params import SamplingValues, sampling_params
from llmpack.runtime.core.request import ChatRequest, prepare_chat
from llmpack.runtime.core.served_model import ServedModel, describe_model


def merge(outputs: Iterable[RequestOutput]) -> RequestOutput:
    """One request's RequestOutput deltas merged into one RequestOutput with whole texts."""
    merged: dict[int, CompletionOutput] = {}
    final: RequestOutput | None = None
    for out in outputs:
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


def collect(stream: Iterable[RequestOutput]) -> RequestOutput:
    """Drain a stream and merge its deltas (see merge)."""
    return merge(stream)


class LLM:
    def __init__(self, model: str | Path, *, n_ctx: int | None = None, max_num_seqs: int = 32,
                 gpu_layers: int | str = "auto", recipe: str | None = None, system: str | None = None,
                 data_dir: str | Path | None = None, **engine_kwargs: Any) -> None:
        """`recipe`: a recipe name or .toml path (else the GGUF's template, else a matched family);
        `system`: a default system prompt (else the recipe's), as `llmpack run --system`;
        `data_dir`: where the index of long documents attached to chats is kept (else the per-user data folder).
        vLLM's engine arguments work as in vLLM (`max_model_len=4096`, `gpu_memory_utilization`,
        `seed`, ...) or are refused by name (runtime/engine/vllm_args.py)."""
        kwargs, self.seed = vllm_engine_kwargs({"max_num_seqs": max_num_seqs, **engine_kwargs,
                                                **({"n_ctx": n_ctx} if n_ctx is not None else {})})
        kwargs.setdefault("n_ctx", DEFAULT_N_CTX)
        self._seeds = itertools.count(self.seed) if self.seed is not None else None
        validate_gguf(model)
        self.model_path = Path(model)
        info = read_model_info(self.model_path)
        self.engine = LLMEngine(EngineConfig(model_path=str(model), gpu_layers=gpu_layers, **kwargs), info=info)
        self._chat_error: LlmpackError | None = None
        chat: ChatFormat | None = None
        try:
            chat = chat_format_for_model(info, recipe)
        except LlmpackError as exc:   # a base model with no template: generate() works, chat() says why not
            if recipe:
                self.engine.shutdown()
                raise
            self._chat_error = exc
        self.files = AppFiles(Path(data_dir) if data_dir is not None else None)   # this LLM's own, not the process's
        self.served: ServedModel = describe_model(self.engine, chat, model_id=self.model_path.stem,
                                                  display_name=info.name or self.model_path.stem, system=system,
                                                  files=self.files)

    @property
    def chat_format(self) -> ChatFormat:
        """How messages become a prompt: recipe > embedded template > matched recipe."""
        if self.served.chat is None:
            raise self._chat_error or LlmpackError("this model has no chat template; pass recipe=NAME")
        return self.served.chat

    def generate(self, prompts: str | Sequence[str] | Sequence[list[int]],
                 params: SamplingParams | Sequence[SamplingParams] | None = None) -> list[RequestOutput]:
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        if params is None or isinstance(params, SamplingParams):
            params = [params or SamplingParams()] * len(prompts)
        streams = [self.engine.add_request(p, self._seeded(sp)) for p, sp in zip(prompts, params)]
        return [collect(s) for s in streams]

    def _seeded(self, params: SamplingParams | None) -> SamplingParams | None:
        """vLLM's `seed`: requests that set none get the next of seed, seed+1, ... (reproducible runs)."""
        if self._seeds is None or params is None or params.seed is not None:
            return params
        return dataclasses.replace(params, seed=next(self._seeds) % 2**32)

    def get_default_sampling_params(self) -> SamplingParams:
        """What a chat request that sets nothing is served with: the recipe's sampling values and
        the turn's stop strings and ids (vLLM's name for the same)."""
        return sampling_params(SamplingValues(), self.served, chat=True)

    def chat(self, messages: list[dict] | list[list[dict]], params: SamplingParams | None = None, *,
             chat_template_kwargs: dict[str, Any] | None = None) -> list[RequestOutput]:
        """Reply to one conversation or several. `params` None: the recipe's defaults (see
        get_default_sampling_params); given: used as they are, plus the turn's stop strings and ids."""
        conversations: list[list[dict]] = [messages] if messages and isinstance(messages[0], dict) else messages  # type: ignore[list-item,assignment]
        self.chat_format   # no template: say so before anything is queued
        try:
            preps = [prepare_chat(self.served, self._chat_request(conv, params, chat_template_kwargs))
                     for conv in conversations]
            gens = [Generation(self.served, prep, f"chat-{i}") for i, prep in enumerate(preps)]
        except ApiError as exc:
            raise ValueError(exc.message) from None
        try:
            return [merge(out for _, out in gen.outputs()) for gen in gens]
        except ApiError as exc:
            raise LlmpackError(exc.message) from None

    def _chat_request(self, conv: list[dict], params: SamplingParams | None,
                      template_kwargs: dict[str, Any] | None) -> ChatRequest:
        if params is not None:
            return ChatRequest(conv, params=self._seeded(params), template_kwargs=template_kwargs)
        seed = next(self._seeds) % 2**32 if self._seeds is not None else None
        return ChatRequest(conv, SamplingValues(seed=seed), template_kwargs=template_kwargs)

    def close(self) -> None:
        self.engine.shutdown()
        self.files.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

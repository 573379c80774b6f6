"""A request in the core's terms, and `prepare_chat` / `prepare_completion`, which turn it into
what the engine runs: prompt token ids, SamplingParams and the output plan.

Every wire format fills a `ChatRequest` or `CompletionRequest` from its own fields (the `param`
names are the client's, for 400s); `LLM.chat` fills one too, so offline and HTTP share the path.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.server.core.attachments import expand_file_parts
from llmpack.runtime.server.core.errors import bad
from llmpack.runtime.server.core.params import SamplingValues, check_token_ids, is_token_ids, sampling_params
from llmpack.runtime.server.core.plan import Constraint, OutputPlan, ToolRequest, plan_output
from llmpack.runtime.server.core.prompt import render_messages, tokenize_prompt
from llmpack.runtime.server.core.served_model import ServedModel

MAX_CHOICES = 128       # prompts x n in one request


@dataclass
class ChatRequest:
    messages: Any
    sampling: SamplingValues = field(default_factory=SamplingValues)
    params: SamplingParams | None = None   # given whole (LLM.chat): used as it is, plus the turn's stops
    constraint: Constraint | None = None
    tools: ToolRequest | None = None
    logprobs: int | None = None            # top alternatives per token; None = no logprobs
    stream: bool = False
    include_usage: bool = False
    prompt_progress: bool = False          # report prompt progress while a stream reads the prompt
    template_kwargs: dict[str, Any] | None = None
    param: str = "messages"


@dataclass
class CompletionRequest:
    prompt: Any                            # a string, token ids, or a list of those
    sampling: SamplingValues = field(default_factory=SamplingValues)
    constraint: Constraint | None = None
    logprobs: int | None = None
    stream: bool = False
    include_usage: bool = False
    prompt_progress: bool = False
    param: str = "prompt"


@dataclass
class Prepared:
    prompts: list[list[int]]
    params: SamplingParams
    stream: bool
    include_usage: bool
    prompt_param: str
    top_logprobs: int | None = None     # chat: k when logprobs are on
    texts: list[str | None] = field(default_factory=list)
    plan: OutputPlan = field(default_factory=OutputPlan)
    return_progress: bool = False


def with_turn_stops(params: SamplingParams, model: ServedModel) -> SamplingParams:
    """A caller's own SamplingParams plus the model's end-of-turn stops (a copy)."""
    return dataclasses.replace(params, stop=list(dict.fromkeys([*params.stop, *model.stop])),
                               stop_token_ids=list(dict.fromkeys([*params.stop_token_ids, *model.stop_token_ids])))


def prepare_chat(model: ServedModel, req: ChatRequest) -> Prepared:
    messages = expand_file_parts(req.messages, model)
    plan = plan_output(model, req.constraint, req.tools, chat=True)
    if req.params is not None:
        params = with_turn_stops(dataclasses.replace(req.params, grammar=plan.grammar or req.params.grammar), model)
    else:
        params = sampling_params(req.sampling, model, chat=True, logprobs=req.logprobs, grammar=plan.grammar)
    text = render_messages(model, messages, plan, req.param, req.template_kwargs)
    return Prepared([tokenize_prompt(model, text)], params, req.stream, req.include_usage, req.param,
                    top_logprobs=req.logprobs, texts=[text], plan=plan,
                    return_progress=req.prompt_progress and req.stream)


def prepare_completion(model: ServedModel, req: CompletionRequest) -> Prepared:
    plan = plan_output(model, req.constraint, chat=False)
    params = sampling_params(req.sampling, model, chat=False, logprobs=req.logprobs, grammar=plan.grammar)
    prompts, texts = _prompts(req.prompt, model, req.param)
    if len(prompts) * params.n > MAX_CHOICES:
        raise bad(req.param, f"at most {MAX_CHOICES} choices per request (prompts x n)")
    return Prepared(prompts, params, req.stream, req.include_usage, req.param, texts=texts, plan=plan,
                    return_progress=req.prompt_progress and req.stream)


def _prompts(prompt: Any, model: ServedModel, param: str) -> tuple[list[list[int]], list[str | None]]:
    if isinstance(prompt, str) or is_token_ids(prompt):
        items: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) or is_token_ids(p) for p in prompt):
        items = prompt
    else:
        raise bad(param, f"'{param}' must be a string, a list of strings, or token ids")
    out, texts = [], []
    for item in items:
        if isinstance(item, str):
            ids = tokenize_prompt(model, item)
            texts.append(item)
        else:
            ids = check_token_ids(item, model.engine.n_vocab, param)
            texts.append(None)
        if not ids:
            raise bad(param, f"'{param}' is empty")
        out.append(ids)
    return out, texts

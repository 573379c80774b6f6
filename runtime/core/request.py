"""A request in the core's terms, and `prepare_chat` / `prepare_completion`, which turn it into
what the engine runs: prompt token ids, SamplingParams and the output plan.

Every wire format fills a `ChatRequest` or `CompletionRequest` from its own fields (the `param`
names are the client's, for 400s); `LLM.chat` fills one too, so offline and HTTP share the path.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from llmpack.runtime.chat.reasoning import ReasoningSyntax, ThinkingSwitchError, opens_thinking, thinking_template_kwargs
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.core.attachments import expand_file_parts
from llmpack.runtime.documents.attribution import Attribution
from llmpack.runtime.core.errors import bad
from llmpack.runtime.core.media import media_prompt, take_media_parts
from llmpack.runtime.core.params import SamplingValues, check_token_ids, is_token_ids, sampling_params
from llmpack.runtime.core.plan import Constraint, OutputPlan, ToolRequest, plan_output
from llmpack.runtime.chat import untrusted
from llmpack.runtime.core.prompt import render_messages, tokenize_prompt
from llmpack.runtime.core.served_model import ServedModel

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
    think: bool | str | None = None        # the thinking switch: on, off, a level, or None (the model's default)
    reasoning_budget: int | None = None    # end thinking after this many tokens (None: the server's --reasoning-budget)
    think_param: str = "think"             # the client's field for `think` and the budget, for 400s
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
    prompts: list[Any]                   # token ids, or a MultimodalPrompt (a chat with pictures or sound)
    params: SamplingParams
    stream: bool
    include_usage: bool
    prompt_param: str
    top_logprobs: int | None = None     # chat: k when logprobs are on
    texts: list[str | None] = field(default_factory=list)
    plan: OutputPlan = field(default_factory=OutputPlan)
    return_progress: bool = False
    reasoning: ReasoningSyntax | None = None   # split thinking from the answer in this syntax (core/output.py)
    thinking_open: bool = False                # the prompt itself opened the thinking (DeepSeek-R1)
    reasoning_budget: int | None = None        # thinking tokens before core/generation.py ends it
    read: list[dict] = field(default_factory=list)   # what was read of each searched file (attachments)
    attribution: Attribution | None = None   # the documents' places the reply is attributed to; None: read none


def with_turn_stops(params: SamplingParams, model: ServedModel) -> SamplingParams:
    """A caller's own SamplingParams plus the model's end-of-turn stops (a copy)."""
    return dataclasses.replace(params, stop=list(dict.fromkeys([*params.stop, *model.stop])),
                               stop_token_ids=list(dict.fromkeys([*params.stop_token_ids, *model.stop_token_ids])))


def prepare_chat(model: ServedModel, req: ChatRequest) -> Prepared:
    messages, media = take_media_parts(req.messages, model, req.param)   # pictures and sound become markers (media.py)
    messages, read, attribution = expand_file_parts(messages, model)
    plan = plan_output(model, req.constraint, req.tools, chat=True)
    if req.params is not None:
        params = with_turn_stops(dataclasses.replace(req.params, grammar=plan.grammar or req.params.grammar), model)
    else:
        params = sampling_params(req.sampling, model, chat=True, logprobs=req.logprobs, grammar=plan.grammar)
    budget = reasoning_budget(req, model, params.n)
    kwargs = {**(req.template_kwargs or {}), **thinking_kwargs(req, model, budget)}
    text = render_messages(model, messages, plan, req.param, kwargs)
    syntax = model.reasoning
    opened = opens_thinking(text, syntax)
    if opened and budget == 0:   # no thinking at all: the prompt closes what its template opened
        text, opened = text + syntax.cut, False
    ids = tokenize_prompt(model, text) if media is None else media_prompt(model, text, media, req.param)
    return Prepared([ids], params, req.stream, req.include_usage, req.param,
                    top_logprobs=req.logprobs, texts=[untrusted.clean(text)], plan=plan,
                    return_progress=req.prompt_progress and req.stream, reasoning=syntax, thinking_open=opened,
                    reasoning_budget=budget or None, read=read, attribution=attribution or None)


def reasoning_budget(req: ChatRequest, model: ServedModel, n: int) -> int | None:
    """The request's thinking budget, else the server's. A budget ends one reply's thinking and
    goes on from there (core/generation.py), so it needs n == 1; the server's own budget simply
    does not apply to n > 1."""
    budget = req.reasoning_budget
    if budget is None:
        return model.reasoning_budget if n == 1 else None
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise bad(req.think_param, f"'{req.think_param}': the thinking budget must be a whole number of tokens")
    if n > 1:
        raise bad(req.think_param, f"'{req.think_param}': a thinking budget needs n = 1")
    return budget


def thinking_kwargs(req: ChatRequest, model: ServedModel, budget: int | None) -> dict[str, Any]:
    """The chat template's thinking switch for this request (runtime/chat/reasoning.py); a budget
    of 0 turns thinking off, as llama-server's --reasoning-budget 0 does."""
    think = False if budget == 0 and req.think is None else req.think
    if model.chat is None:
        return {}
    try:
        return thinking_template_kwargs(model.chat.template, think)
    except ThinkingSwitchError as exc:
        raise bad(req.think_param, str(exc)) from None


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

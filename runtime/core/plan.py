"""What a request asks of the output's shape, in one `OutputPlan`: a grammar every sample must
match (JSON mode, a JSON schema, GBNF, or a forced tool call), the tools the model may call and
how its replies are read back (core/output.py). Each wire format reads its own fields (OpenAI's
`response_format`, Ollama's `format`, Anthropic's `tools`...) into a `Constraint` and `Tool`s;
everything invalid is a 400 that names the field the client sent.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from llmpack.errors import LlmpackError
from llmpack.runtime.chat.chat_template import render_chat
from llmpack.runtime.core.errors import bad
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.structured import tool_calls as T
from llmpack.runtime.structured.grammar import JSON_OBJECT_GBNF, GrammarError, check_gbnf, schema_to_gbnf

TOOL_CHOICES = ("none", "auto", "required", "function")
MAX_TOOLS = 128


@dataclass(slots=True)
class OutputPlan:
    grammar: str | None = None      # GBNF every sample of the request must match
    kind: str | None = None         # json_object | json_schema | grammar | tools (metrics label)
    tools: list[T.Tool] = field(default_factory=list)
    tool_choice: str = "none"       # none | auto | required | function (a named one)
    parallel: bool = True
    fmt: str = "hermes"             # the model's tool format
    native: bool = False            # the chat template renders tools itself

    @property
    def reads_calls(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def forced(self) -> bool:
        return self.tool_choice in ("required", "function")

    @property
    def names(self) -> set[str]:
        return {t.name for t in self.tools}


@dataclass(slots=True)
class Constraint:
    """A request's output constraint: `kind` json_object (any JSON object), json_schema (`value`
    is the schema) or grammar (`value` is GBNF); `param` is the field the client sent it in."""

    kind: str
    value: Any = None
    param: str = "response_format"


@dataclass(slots=True)
class ToolRequest:
    """The tools a request offers and how it wants them used. `choice` is none, auto, required
    or function (then `forced_name` names it); `param` is the client's field for the tools."""

    tools: list[T.Tool]
    choice: str = "auto"
    forced_name: str | None = None
    parallel: bool = True
    param: str = "tools"
    choice_param: str = "tool_choice"


def make_tool(name: Any, description: Any, parameters: Any, where: str, param: str = "tools") -> T.Tool:
    """A tool from its three parts, each checked; `where` names it in errors (e.g. tools[2])."""
    if not isinstance(name, str) or not name or len(name) > 64 or not all(c.isalnum() or c in "_-." for c in name):
        raise bad(param, f"{where}.name must be 1-64 letters, digits, '_', '-' or '.'")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise bad(param, f"{where}.description must be a string")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise bad(param, f"{where}.parameters must be a JSON schema object")
    return T.Tool(name, description, parameters)


def plan_output(model: ServedModel, constraint: Constraint | None = None, tools: ToolRequest | None = None,
                *, chat: bool = True) -> OutputPlan:
    """The request's OutputPlan; a forced tool call's grammar, or the constraint's, is checked by
    llama.cpp now, so a grammar it cannot parse is a 400 before anything is queued."""
    plan = OutputPlan()
    if constraint is not None:
        plan.kind, plan.grammar = constraint.kind, _grammar_of(constraint)
    if chat:
        plan.fmt = tool_format(model)       # also how earlier calls in the history are written
        plan.native = model.chat is not None and supports_tools(model.chat.template)
        if tools is not None:
            _use_tools(plan, tools, model, constraint)
    if plan.grammar is not None:
        param = constraint.param if constraint is not None else (tools.param if tools else "tools")
        try:
            model.engine.check_grammar(plan.grammar)
        except GrammarError as exc:
            raise bad(param, f"'{param}': {exc}", "invalid_grammar") from None
    return plan


def _grammar_of(c: Constraint) -> str:
    try:
        if c.kind == "grammar":
            return check_gbnf(c.value)
        if c.kind == "json_schema":
            return schema_to_gbnf(c.value)
        if c.kind == "json_object":
            return JSON_OBJECT_GBNF
        raise GrammarError(f"unknown output constraint {c.kind!r}")
    except GrammarError as exc:
        code = "invalid_grammar" if c.kind == "grammar" else "invalid_schema"
        raise bad(c.param, f"'{c.param}': {exc}", code) from None


def _use_tools(plan: OutputPlan, req: ToolRequest, model: ServedModel, constraint: Constraint | None) -> None:
    if len(req.tools) > MAX_TOOLS:
        raise bad(req.param, f"'{req.param}' must be a list (of at most {MAX_TOOLS} tools)")
    plan.tools = list(req.tools)
    if len(plan.names) != len(plan.tools):
        raise bad(req.param, "tool names must be unique")
    plan.parallel = req.parallel
    if not plan.tools:
        return
    if req.choice not in TOOL_CHOICES or (req.choice == "function" and req.forced_name not in plan.names):
        raise bad(req.choice_param, f"'{req.choice_param}' must be none, auto, required or name one of the tools")
    plan.tool_choice = req.choice
    forced = [t for t in plan.tools if t.name == req.forced_name] if req.choice == "function" else plan.tools
    if plan.forced and constraint is not None:
        raise bad(req.choice_param, f"{req.choice_param} {req.choice!r} forces a tool call, which cannot be "
                                    f"combined with '{constraint.param}'")
    if plan.forced:
        try:
            plan.grammar = T.forced_grammar(forced, plan.fmt, plan.parallel, _marker_tokens(model, plan.fmt))
        except GrammarError as exc:
            raise bad(req.param, str(exc), "invalid_schema") from None
        plan.kind = "tools"


def _marker_tokens(model: ServedModel, fmt: str) -> dict[str, int]:
    """The format's call markers that are one token in this model's vocabulary."""
    out = {}
    for text in T.MARKERS.get(fmt, ()):
        ids = model.engine.tokenize(text, add_special=False, parse_special=True)
        if len(ids) == 1:
            out[text] = int(ids[0])
    return out


def tool_format(model: ServedModel) -> str:
    chat = model.chat
    recipe = chat.recipe if chat is not None else None
    fmt = recipe.tool_format if recipe is not None else None
    if fmt and chat is not None and (chat.source != "gguf" or recipe.matches_template(chat.template)):
        return fmt
    template = chat.template if chat is not None else ""
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3"
    return "hermes"


_PROBE = "llmpack_probe_tool"


@lru_cache(maxsize=16)
def supports_tools(template: str) -> bool:
    """Does this chat template render a tool list? (Render one and look for its name.)"""
    tool = {"type": "function", "function": {"name": _PROBE, "description": "", "parameters": {"type": "object"}}}
    try:
        return _PROBE in render_chat(template, [{"role": "user", "content": "hi"}], tools=[tool])
    except LlmpackError:
        return False

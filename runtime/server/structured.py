"""What a request asks of the output's shape: JSON mode, a JSON schema, a GBNF grammar, tools.

`output_plan` reads `response_format`, llama-server's `grammar` and `json_schema`, `tools`,
`tool_choice`, `parallel_tool_calls` (and the legacy `functions` / `function_call`) into one
`OutputPlan`; `render_messages` turns the conversation, tool calls and results included, into
the prompt. Everything invalid is a 400 that names the parameter and the problem.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from llmpack.errors import LlmpackError
from llmpack.runtime.chat.chat_template import ChatTemplateError, normalize_messages, render_chat
from llmpack.runtime.engine.grammar_sampler import check_with_llama
from llmpack.runtime.server.api_error import bad
from llmpack.runtime.server.state import ServedModel
from llmpack.runtime.structured import tool_calls as T
from llmpack.runtime.structured.grammar import (
    JSON_OBJECT_GBNF,
    GrammarError,
    check_gbnf,
    json_schema_of,
    schema_to_gbnf,
)


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


def output_plan(body: dict, model: ServedModel, *, chat: bool) -> OutputPlan:
    plan = OutputPlan()
    asked = [k for k in ("response_format", "grammar", "json_schema") if _given(body, k)]
    if len(asked) > 1:
        raise bad(asked[1], f"'{asked[0]}' and '{asked[1]}' both constrain the output; send only one")
    if asked:
        plan.kind, plan.grammar = _constraint(body, asked[0])
    if chat:
        _tools(body, model, plan)
        if plan.forced and asked:
            raise bad("tool_choice", f"tool_choice {body.get('tool_choice')!r} forces a tool call, which cannot "
                                     f"be combined with '{asked[0]}'")
    if plan.grammar is not None:
        _check_with_llama(plan.grammar, model, asked[0] if asked else "tools")
    return plan


def _given(body: dict, key: str) -> bool:
    value = body.get(key)
    return value is not None and not (key == "response_format" and isinstance(value, dict)
                                      and value.get("type") == "text")


def _constraint(body: dict, key: str) -> tuple[str, str]:
    value = body[key]
    try:
        if key == "grammar":
            return "grammar", check_gbnf(value)
        if key == "json_schema":
            return "json_schema", schema_to_gbnf(value)
        if not isinstance(value, dict):
            raise GrammarError("'response_format' must be an object like {\"type\": \"json_object\"}")
        kind = value.get("type")
        if kind == "json_object":   # llama-server also takes a schema here
            return ("json_schema", schema_to_gbnf(value["schema"])) if value.get("schema") is not None \
                else ("json_object", JSON_OBJECT_GBNF)
        if kind == "json_schema":
            return "json_schema", schema_to_gbnf(json_schema_of(value))
        raise GrammarError(f"'response_format.type' must be text, json_object or json_schema, got {kind!r}")
    except GrammarError as exc:
        raise bad(key, f"'{key}': {exc}", "invalid_grammar" if key == "grammar" else "invalid_schema") from None


def _check_with_llama(gbnf: str, model: ServedModel, param: str) -> None:
    vocab = getattr(getattr(model.engine, "runner", None), "vocab", None)
    if vocab is None:
        return
    try:
        check_with_llama(gbnf, vocab)
    except GrammarError as exc:
        raise bad(param, f"'{param}': {exc}", "invalid_grammar") from None


# ---------------------------------------------------------------- tools
def _tools(body: dict, model: ServedModel, plan: OutputPlan) -> None:
    tools, choice = body.get("tools"), body.get("tool_choice")
    if body.get("functions") is not None:   # the legacy names of the same thing
        if tools is not None:
            raise bad("functions", "send 'tools' or the legacy 'functions', not both")
        tools = [{"type": "function", "function": f} for f in _list(body["functions"], "functions")]
        fc = body.get("function_call")
        choice = {"type": "function", "function": fc} if isinstance(fc, dict) else fc
    plan.fmt = tool_format(model)       # also how earlier calls in the history are written
    plan.native = model.chat is not None and supports_tools(model.chat.template)
    if tools is None:
        if choice not in (None, "none", "auto"):
            raise bad("tool_choice", "'tool_choice' needs 'tools'")
        return
    plan.tools = [_tool(t, i) for i, t in enumerate(_list(tools, "tools"))]
    if len(plan.names) != len(plan.tools):
        raise bad("tools", "tool names must be unique")
    plan.parallel = body.get("parallel_tool_calls") is not False
    if not plan.tools:
        return
    forced = plan.tools      # the model sees every tool; a named choice forces just that one
    if choice is None or choice in ("auto", "none", "required"):
        plan.tool_choice = choice or "auto"
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict) \
            and choice["function"].get("name") in plan.names:
        plan.tool_choice = "function"
        forced = [t for t in plan.tools if t.name == choice["function"]["name"]]
    else:
        raise bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                 "{\"type\": \"function\", \"function\": {\"name\": NAME}} naming one of the tools")
    if plan.forced and plan.grammar is None:
        try:
            plan.grammar = T.forced_grammar(forced, plan.fmt, plan.parallel, _marker_tokens(model, plan.fmt))
        except GrammarError as exc:
            raise bad("tools", str(exc), "invalid_schema") from None
        plan.kind = "tools"


def _marker_tokens(model: ServedModel, fmt: str) -> dict[str, int]:
    """The format's call markers that are one token in this model's vocabulary."""
    tokenize = getattr(model.engine, "tokenize", None)
    out = {}
    for text in T.MARKERS.get(fmt, ()) if tokenize else ():
        ids = tokenize(text, add_special=False, parse_special=True)
        if len(ids) == 1:
            out[text] = int(ids[0])
    return out


def _list(value: Any, param: str) -> list:
    if not isinstance(value, list) or len(value) > 128:
        raise bad(param, f"'{param}' must be a list (of at most 128 tools)")
    return value


def _tool(spec: Any, i: int) -> T.Tool:
    where = f"tools[{i}]"
    fn = spec.get("function") if isinstance(spec, dict) and spec.get("type", "function") == "function" else None
    if not isinstance(fn, dict):
        raise bad("tools", f"{where} must be {{\"type\": \"function\", \"function\": {{\"name\": ..., \"parameters\": ...}}}}")
    name, desc, params = fn.get("name"), fn.get("description") or "", fn.get("parameters")
    if not isinstance(name, str) or not name or len(name) > 64 or not all(c.isalnum() or c in "_-." for c in name):
        raise bad("tools", f"{where}.function.name must be 1-64 letters, digits, '_', '-' or '.'")
    if not isinstance(desc, str):
        raise bad("tools", f"{where}.function.description must be a string")
    if params is None:
        params = {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        raise bad("tools", f"{where}.function.parameters must be a JSON schema object")
    return T.Tool(name, desc, params)


def tool_format(model: ServedModel) -> str:
    chat = model.chat
    recipe = getattr(chat, "recipe", None)
    fmt = getattr(recipe, "tool_format", None)
    if fmt and (recipe is not None and (chat.source != "gguf" or recipe.matches_template(chat.template))):
        return fmt
    template = getattr(chat, "template", "") or ""
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


# ---------------------------------------------------------------- messages
def render_messages(model: ServedModel, messages: Any, plan: OutputPlan) -> str:
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "'messages' must be a non-empty list of {role, content} objects")
    if model.chat is None:
        raise bad("messages", "This model has no chat template: use /v1/completions, or restart with --recipe NAME.")
    if model.system_prompt and not any(isinstance(m, dict) and m.get("role") in ("system", "developer")
                                       for m in messages):
        messages = [{"role": "system", "content": model.system_prompt}, *messages]
    extra: dict[str, Any] = {}
    try:
        if plan.native:
            messages = [_native_message(m) for m in messages]
            if plan.tools and plan.tool_choice != "none":
                extra["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                                    "parameters": t.parameters}} for t in plan.tools]
        else:
            messages = _text_messages(messages, plan)
        return model.chat.render(messages, add_generation_prompt=True, **extra)
    except ChatTemplateError as exc:
        raise bad("messages", str(exc)) from None
    except (LlmpackError, TypeError, ValueError, RecursionError) as exc:
        raise bad("messages", f"could not format the messages: {exc}") from None


def _calls_of(m: dict, i: int) -> list[T.ToolCall]:
    raw = m.get("tool_calls") or ([{"function": m["function_call"]}] if m.get("function_call") else [])
    if not isinstance(raw, list):
        raise bad("messages", f"messages[{i}].tool_calls must be a list")
    calls = []
    for c in raw:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad("messages", f"messages[{i}].tool_calls entries need function.name and function.arguments")
        args = fn.get("arguments", "{}")
        calls.append(T.ToolCall(fn["name"], args if isinstance(args, str) else T.json.dumps(args),
                                c.get("id") or ""))
    return calls


def _native_message(m: Any) -> Any:
    """HF templates expect tool-call arguments as objects, not the JSON text OpenAI sends."""
    if not isinstance(m, dict) or not m.get("tool_calls"):
        return m
    calls = []
    for c in m["tool_calls"] if isinstance(m["tool_calls"], list) else []:
        fn = dict(c.get("function") or {}) if isinstance(c, dict) else {}
        if isinstance(fn.get("arguments"), str):
            try:
                fn["arguments"] = T.json.loads(fn["arguments"])
            except ValueError:
                pass
        calls.append({**c, "function": fn} if isinstance(c, dict) else c)
    return {**m, "tool_calls": calls}


def _text_messages(messages: list, plan: OutputPlan) -> list:
    """For templates that know no tools: the tool list joins the system prompt, calls become
    assistant text in the model's tool format, results become user turns."""
    out: list[Any] = []
    from_tool: list[bool] = []          # merge tool results with neighbouring user turns
    ids: dict[str, str] = {}
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        tool = role in ("tool", "function")
        if role == "assistant" and (m.get("tool_calls") or m.get("function_call")):
            calls = _calls_of(m, i)
            ids.update({c.id: c.name for c in calls})
            text = m.get("content") if isinstance(m.get("content"), str) else ""
            m = {"role": "assistant", "content": "\n".join(x for x in (text, T.render_calls(calls, plan.fmt)) if x)}
        elif tool:
            content = m.get("content")
            content = content if isinstance(content, str) else T.json.dumps(content, ensure_ascii=False)
            name = m.get("name") or ids.get(m.get("tool_call_id"))
            m = {"role": "user", "content": T.render_result(content, plan.fmt, name)}
        if out and (tool or from_tool[-1]) and isinstance(m, dict) and m.get("role") == "user" \
                and isinstance(out[-1], dict) and out[-1].get("role") == "user":
            out[-1] = {"role": "user", "content": f"{_text(out[-1])}\n\n{_text(m)}"}
            from_tool[-1] = True
        else:
            out.append(m)
            from_tool.append(tool)
    if plan.tools and plan.tool_choice != "none":
        text = T.instructions(plan.tools, plan.fmt, plan.parallel)
        sys_at = next((k for k, m in enumerate(out) if isinstance(m, dict) and m.get("role") in ("system", "developer")), None)
        if sys_at is None:
            out.insert(0, {"role": "system", "content": text})
        else:
            out[sys_at] = {**out[sys_at], "content": f"{_text(out[sys_at])}\n\n{text}"}
    return out


def _text(m: dict) -> str:
    return normalize_messages([m])[0]["content"]

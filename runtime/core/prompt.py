"""Messages -> the prompt's text and token ids, the same for every wire format and `LLM.chat`.

The model's default system prompt (--system, else the recipe's) goes first unless the
conversation has its own; tools are rendered by the chat template when it knows them
(`plan.native`), else written into the system prompt in the model's tool format, with earlier
calls as assistant text and tool results as user turns. Messages follow the chat-template
convention (roles system/developer/user/assistant/tool, OpenAI-style `tool_calls`).
"""
from __future__ import annotations

import json
from typing import Any

from llmpack.errors import LlmpackError
from llmpack.runtime.chat import untrusted
from llmpack.runtime.chat.chat_template import ChatTemplateError, normalize_messages
from llmpack.runtime.core.errors import bad
from llmpack.runtime.core.params import scrub
from llmpack.runtime.core.plan import OutputPlan
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.structured import tool_calls as T


def tokenize_prompt(model: ServedModel, text: str) -> list[int]:
    """Tokenize text that may already start with the BOS text (templates emit it): the model's
    BOS is added only when missing, so it is never doubled. Spans marked untrusted (attachments,
    tool results: chat/untrusted.py) are tokenized as plain text, never as control tokens."""
    text = scrub(text)
    if untrusted.OPEN not in text and untrusted.CLOSE not in text:
        return model.engine.tokenize_prompt(text)
    engine = model.engine
    ids = untrusted.tokenize(text, lambda piece, add_special, parse_special: engine.tokenize(
        piece, add_special=False, parse_special=parse_special), add_special=False)
    bos = engine.tokenize_prompt("")     # the ids the model wants in front, if the text lacks them
    return bos + ids if bos and ids[:len(bos)] != bos else ids


def with_system_prompt(model: ServedModel, messages: list) -> list:
    """The conversation with the model's default system prompt first, unless it has its own."""
    if model.system_prompt and not any(isinstance(m, dict) and m.get("role") in ("system", "developer")
                                       for m in messages):
        return [{"role": "system", "content": model.system_prompt}, *messages]
    return messages


def render_messages(model: ServedModel, messages: Any, plan: OutputPlan, param: str = "messages",
                    template_kwargs: dict[str, Any] | None = None) -> str:
    """The prompt text for `messages` (400s name `param`); `template_kwargs` go to the chat
    template as variables (e.g. a thinking switch)."""
    if not isinstance(messages, list) or not messages:
        raise bad(param, f"'{param}' must be a non-empty list of {{role, content}} objects")
    if model.chat is None:
        raise bad(param, "This model has no chat template: use /v1/completions, or restart with --recipe NAME.")
    messages = with_system_prompt(model, messages)
    extra: dict[str, Any] = dict(template_kwargs or {})
    try:
        if plan.native:
            messages = [_native_message(m) for m in messages]
            if plan.tools and plan.tool_choice != "none":
                extra["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                                    "parameters": t.parameters}} for t in plan.tools]
        else:
            messages = _text_messages(messages, plan, param)
        return model.chat.render(messages, add_generation_prompt=True, **extra)
    except ChatTemplateError as exc:
        raise bad(param, str(exc)) from None
    except (LlmpackError, TypeError, ValueError, RecursionError) as exc:
        raise bad(param, f"could not format the messages: {exc}") from None


def _calls_of(m: dict, i: int, param: str) -> list[T.ToolCall]:
    raw = m.get("tool_calls") or ([{"function": m["function_call"]}] if m.get("function_call") else [])
    if not isinstance(raw, list):
        raise bad(param, f"{param}[{i}].tool_calls must be a list")
    calls = []
    for c in raw:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad(param, f"{param}[{i}].tool_calls entries need function.name and function.arguments")
        args = fn.get("arguments", "{}")
        calls.append(T.ToolCall(fn["name"], args if isinstance(args, str) else json.dumps(args), c.get("id") or ""))
    return calls


def _native_message(m: Any) -> Any:
    """HF templates expect tool-call arguments as objects, not the JSON text OpenAI sends; a tool's
    result is marked untrusted (it may be a web page or a file's text)."""
    if isinstance(m, dict) and m.get("role") in ("tool", "function") and isinstance(m.get("content"), str):
        return {**m, "content": untrusted.mark(m["content"])}
    if not isinstance(m, dict) or not m.get("tool_calls"):
        return m
    calls = []
    for c in m["tool_calls"] if isinstance(m["tool_calls"], list) else []:
        fn = dict(c.get("function") or {}) if isinstance(c, dict) else {}
        if isinstance(fn.get("arguments"), str):
            try:
                fn["arguments"] = json.loads(fn["arguments"])
            except ValueError:
                pass
        calls.append({**c, "function": fn} if isinstance(c, dict) else c)
    return {**m, "tool_calls": calls}


def _text_messages(messages: list, plan: OutputPlan, param: str) -> list:
    """For templates that know no tools: the tool list joins the system prompt, calls become
    assistant text in the model's tool format, results become user turns."""
    out: list[Any] = []
    from_tool: list[bool] = []          # merge tool results with neighbouring user turns
    ids: dict[str, str] = {}
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        tool = role in ("tool", "function")
        if role == "assistant" and (m.get("tool_calls") or m.get("function_call")):
            calls = _calls_of(m, i, param)
            ids.update({c.id: c.name for c in calls})
            text = m.get("content") if isinstance(m.get("content"), str) else ""
            m = {"role": "assistant", "content": "\n".join(x for x in (text, T.render_calls(calls, plan.fmt)) if x)}
        elif tool:
            content = m.get("content")
            content = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            name = m.get("name") or ids.get(m.get("tool_call_id"))
            m = {"role": "user", "content": T.render_result(untrusted.mark(content), plan.fmt, name)}
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

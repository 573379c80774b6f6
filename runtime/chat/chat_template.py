"""Rendering chat templates safely: the Jinja in a GGUF's `tokenizer.chat_template` or a recipe.

A GGUF file is untrusted input and its chat template is code. CVE-2024-34359 showed that
rendering one with a plain `jinja2.Environment` runs arbitrary Python. So templates render in
Jinja's ImmutableSandboxedEnvironment, with three extra layers:

* before anything runs, the parsed template is scanned and refused if it names Python
  internals (`.__class__`, `'__globals__'`, `.mro`, ...), so a hostile template executes nothing;
* the sandbox's lazy "unsafe attribute" placeholder becomes an immediate error, which catches
  names built at run time (`x|attr('_' ~ '_class__')`);
* `*` and `**` are bounded, since the sandbox leaves `'a' * 10**10` free to exhaust memory.

Everything else mirrors Hugging Face's `apply_chat_template` (trim_blocks, lstrip_blocks,
loopcontrols, `{% generation %}`, `raise_exception`, `strftime_now`, a `tojson` that keeps
non-ASCII and HTML characters as they are) so templates written for transformers render the same.
"""
from __future__ import annotations

import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any, Mapping, NoReturn, Sequence

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError, TemplateError, TemplateSyntaxError
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from llmpack.errors import LlmpackError

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STRING = 8_000_000      # longest str/list that `*` may build inside a template
MAX_EXPONENT = 4096         # largest exponent `**` may use
# Attribute names that reach interpreter state without a leading underscore.
_INTERNAL_NAMES = frozenset({
    "mro", "func_globals", "func_code", "f_globals", "f_locals", "f_builtins", "f_back",
    "f_code", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code",
    "tb_frame", "tb_next", "co_code",
})
_DUNDER = re.compile(r"_+\w*__")
_FORMAT = frozenset({"format", "format_map"})   # str.format reaches attributes through "{0.x}"


class ChatTemplateError(LlmpackError):
    """A chat template could not be used: syntax error, refused as unsafe, or it rejected the
    conversation. `raised_by_template` is True for the template's own `raise_exception(...)`."""

    def __init__(self, message: str, *, raised_by_template: bool = False) -> None:
        super().__init__(" ".join(message.split()))  # always one line
        self.raised_by_template = raised_by_template


class MessageError(ChatTemplateError):
    """The messages themselves are malformed (the client's fault: HTTP 400)."""


def _internals(what: str) -> ChatTemplateError:
    return ChatTemplateError(f"the chat template tried to access Python internals ({what}); refusing to run it")


def _is_internal(name: str) -> bool:
    return name.startswith("_") or name in _INTERNAL_NAMES


def _raise_exception(message: str) -> NoReturn:
    raise ChatTemplateError(f"the chat template rejected the conversation: {message}", raised_by_template=True)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; prompts need the characters as-is.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _GenerationBlock(Extension):
    """HF's `{% generation %}...{% endgeneration %}` marks assistant text for training masks;
    for inference it just renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Any) -> str:
        return caller()


class _ChatSandbox(ImmutableSandboxedEnvironment):
    """The sandbox, made strict: unsafe access fails at once instead of yielding an Undefined
    that only fails when used (or silently prints as '')."""

    intercepted_binops = frozenset({"*", "**"})

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        if _is_internal(str(attribute)):
            raise _internals(f"{type(obj).__name__}.{attribute}")
        raise ChatTemplateError(
            f"the chat template tried to call {type(obj).__name__}.{attribute}, which would modify "
            "data; chat templates must not, refusing to run it")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_STRING:
                    raise ChatTemplateError("the chat template tried to build a huge string; refusing to run it")
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT:
            raise ChatTemplateError("the chat template tried to compute a huge number; refusing to run it")
        return super().call_binop(context, operator, left, right)


def _make_env() -> _ChatSandbox:
    env = _ChatSandbox(trim_blocks=True, lstrip_blocks=True,
                       extensions=["jinja2.ext.loopcontrols", _GenerationBlock])
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    return env


_ENV = _make_env()


def _refuse_internals(tree: nodes.Template) -> None:
    """Reject a parsed template that names Python internals anywhere, before any of it runs:
    an attribute, or a string with `__` anywhere in it (`"{0.__init__.__globals__}"` reaches
    them through str.format), and any call of str.format / format_map however it is named
    (`.format(...)`, `['format'](...)`, `|attr('format')(...)`). Jinja's printf-style `|format`
    filter and reading a `format` key (`param.format` of a JSON schema) stay allowed."""
    for node in tree.find_all((nodes.Getattr, nodes.Const, nodes.Call)):
        if isinstance(node, nodes.Getattr) and _is_internal(node.attr):
            raise _internals(f"'.{node.attr}' on line {node.lineno}")
        if isinstance(node, nodes.Const) and isinstance(node.value, str) \
                and ("__" in node.value or _DUNDER.fullmatch(node.value)):
            raise _internals(f"{node.value[:40]!r} on line {node.lineno}")
        if isinstance(node, nodes.Call) and _names_format(node.node):
            raise _internals(f"a call of str.format on line {node.lineno}")


def _names_format(callee: nodes.Node) -> bool:
    if isinstance(callee, nodes.Getattr):
        return callee.attr in _FORMAT
    if isinstance(callee, nodes.Getitem):
        return isinstance(callee.arg, nodes.Const) and callee.arg.value in _FORMAT
    if isinstance(callee, nodes.Filter) and callee.name == "attr":
        return any(isinstance(a, nodes.Const) and a.value in _FORMAT for a in callee.args)
    return False


@lru_cache(maxsize=64)
def compile_template(source: str) -> jinja2.Template:
    """Parse, vet and compile a template once; the server renders the same one per request."""
    if not isinstance(source, str) or not source.strip():
        raise ChatTemplateError("the chat template is empty")
    try:
        tree = _ENV.parse(source)
        _refuse_internals(tree)
        return _ENV.from_string(tree)
    except TemplateSyntaxError as exc:
        raise ChatTemplateError(f"chat template syntax error on line {exc.lineno}: {exc.message}") from None


def _flatten_content(content: Any, i: int, role: str) -> str:
    """OpenAI lets content be a list of parts; templates expect one string."""
    if isinstance(content, str):
        return content
    if content is None and role == "assistant":  # an assistant turn that only made tool calls
        return ""
    if not isinstance(content, list):
        raise MessageError(f"messages[{i}].content must be a string or a list of text parts")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in ("image_url", "image", "input_image", "input_audio", "audio", "file"):
            raise MessageError(f"messages[{i}].content[{j}] is an {kind!r} part, but this model reads "
                               "text only (pictures and sound need a model started with its projector, --mmproj); "
                               "send text parts")
        else:
            raise MessageError(f"messages[{i}].content[{j}] must be {{\"type\": \"text\", \"text\": \"...\"}}")
    return "\n".join(texts)


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Check roles and content and return copies whose content is always a string."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise MessageError("messages must be a non-empty list of {role, content} objects")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise MessageError(f"messages[{i}] must be an object with 'role' and 'content'")
        role = message.get("role")
        if role not in ROLES:
            raise MessageError(f"messages[{i}].role must be one of {', '.join(ROLES)}; got {role!r}")
        out.append({**message, "content": _flatten_content(message.get("content"), i, role)})
    return out


def fold_system_into_first_user(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """For templates without a system role: prepend the system text to the first user turn."""
    msgs = normalize_messages(messages)
    system = "\n\n".join(m["content"] for m in msgs if m["role"] in ("system", "developer") and m["content"])
    rest = [m for m in msgs if m["role"] not in ("system", "developer")]
    if not system:
        return rest
    for k, m in enumerate(rest):
        if m["role"] == "user":
            rest[k] = {**m, "content": f"{system}\n\n{m['content']}"}
            return rest
    return [{"role": "user", "content": system}, *rest]


def _template_line(exc: BaseException) -> str:
    """' on line N' from the traceback frames Jinja maps back to the template, if any."""
    tb, line = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" on line {line}" if line else ""


def render_chat(template: str, messages: Sequence[Mapping[str, Any]], *, bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True, **extra: Any) -> str:
    """Render `messages` with `template` the way transformers' apply_chat_template does.

    `extra` reaches the template as variables (tools, documents, enable_thinking, ...).
    Every failure is a ChatTemplateError with one line that says what went wrong.
    """
    compiled = compile_template(template)
    variables = {"tools": None, "documents": None, **extra, "messages": normalize_messages(messages),
                 "bos_token": bos_token, "eos_token": eos_token,
                 "add_generation_prompt": add_generation_prompt}
    try:
        return compiled.render(**variables)
    except ChatTemplateError:
        raise
    except SecurityError as exc:
        raise _internals(str(exc)) from None
    except RecursionError:
        raise ChatTemplateError("the chat template recursed too deeply; refusing to run it") from None
    except TemplateError as exc:
        raise ChatTemplateError(f"the chat template failed{_template_line(exc)}: {exc}") from None
    except Exception as exc:  # a template is code: anything it raises is the template's failure
        raise ChatTemplateError(
            f"the chat template failed{_template_line(exc)}: {type(exc).__name__}: {exc}") from None

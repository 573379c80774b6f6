"""Chat templates are code from untrusted files: they render like Hugging Face's
apply_chat_template, and a hostile one is refused before any of it runs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmpack.errors import LlmpackError
from llmpack.runtime.chat.chat_template import (
    ChatTemplateError,
    MessageError,
    compile_template,
    fold_system_into_first_user,
    normalize_messages,
    render_chat,
)
from llmpack.runtime.chat.recipes import resolve_chat

USER = [{"role": "user", "content": "hi"}]

# Each would create the marker file if it ever ran outside the sandbox.
MALICIOUS = {
    "mro-subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "cycler-globals-popen": "{{ cycler.__init__.__globals__.os.popen('touch MARKER').read() }}",
    "joiner-globals-item": "{{ joiner.__init__.__globals__['os'].system('touch MARKER') }}",
    "self-builtins-open": "{{ self.__init__.__globals__.__builtins__['open']('MARKER', 'w').write('x') }}",
    "lipsum-globals": "{{ lipsum.__globals__['os'].popen('touch MARKER').read() }}",
    "namespace-globals": "{{ namespace.__init__.__globals__.os.popen('touch MARKER').read() }}",
    "messages-class": "{% for m in messages %}{{ m.__class__.__base__.__subclasses__() }}{% endfor %}",
    "dunder-string-key": "{% set g = cycler['__init__'] %}{{ g }}",
    # Names assembled at run time slip past the static scan; the strict sandbox stops them.
    "attr-built-at-runtime": "{{ (cycler|attr('_' ~ '_init_' ~ '_')|attr('_' ~ '_globals_' ~ '_'))"
                             "['os'].popen('touch MARKER').read() }}",
    "format-string": "{{ '{0.__class__.__mro__}'.format(1) }}",
}


@pytest.mark.parametrize("template", MALICIOUS.values(), ids=MALICIOUS.keys())
def test_templates_reaching_for_python_internals_are_refused(template: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with pytest.raises(ChatTemplateError) as info:
        render_chat(template.replace("MARKER", str(marker)), USER)
    message = str(info.value)
    assert "the chat template tried to access Python internals (" in message
    assert message.endswith("refusing to run it")
    assert "\n" not in message
    assert isinstance(info.value, LlmpackError)
    assert not marker.exists()


def test_a_refused_template_runs_none_of_its_parts() -> None:
    calls: list[str] = []

    def record() -> str:
        calls.append("ran")
        return ""

    # The stock sandbox would print '' for ''.__class__ and carry on; ours refuses up front.
    with pytest.raises(ChatTemplateError, match="Python internals"):
        render_chat("{{ record() }}{{ ''.__class__ }}", USER, record=record)
    assert calls == []


def test_templates_may_not_modify_data() -> None:
    with pytest.raises(ChatTemplateError, match="modify"):
        render_chat("{% for m in messages %}{{ m.pop('role') }}{% endfor %}", USER)


@pytest.mark.parametrize("template", ["{{ 'x' * 1000000000 }}", "{{ 9 ** 99999999 }}"])
def test_resource_bombs_are_refused(template: str) -> None:
    with pytest.raises(ChatTemplateError, match="huge"):
        render_chat(template, USER)


def test_runaway_recursion_is_an_error() -> None:
    with pytest.raises(ChatTemplateError, match="recursed"):
        render_chat("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", USER)


def test_syntax_errors_name_the_line() -> None:
    with pytest.raises(ChatTemplateError, match=r"syntax error on line 3"):
        render_chat("{% for m in messages %}\n{{ m.content }}\n{% endfo %}", USER)
    with pytest.raises(ChatTemplateError, match="empty"):
        render_chat("   ", USER)


def test_runtime_errors_name_the_line() -> None:
    with pytest.raises(ChatTemplateError, match=r"failed on line 2: .*undefined"):
        render_chat("ok\n{{ nothing.here }}", USER)


def test_raise_exception_carries_the_templates_message() -> None:
    template = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok"
    with pytest.raises(ChatTemplateError, match="System role not supported") as info:
        render_chat(template, [{"role": "system", "content": "s"}, *USER])
    assert info.value.raised_by_template
    assert render_chat(template, USER) == "ok"


def test_hf_features() -> None:
    template = (
        "{{ bos_token }}{% set ns = namespace(n=0) %}"
        "{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{{ m['role'] }}:{{ m.content }}{% if not loop.last %}|{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}>{% endif %}#{{ ns.n }}{{ eos_token }}"
    )
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert render_chat(template, messages, bos_token="<s>", eos_token="</s>") == "<s>user:a|assistant:b>#2</s>"
    assert render_chat(template, messages, add_generation_prompt=False) == "user:a|assistant:b#2"


def test_trim_and_lstrip_blocks_as_hf() -> None:
    template = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}"
    assert render_chat(template, USER) == "[hi]\n"


def test_loopcontrols_generation_block_tojson_strftime_and_extra_variables() -> None:
    assert render_chat("{% for m in messages %}{{ m.content }}{% break %}{% endfor %}",
                       [*USER, {"role": "assistant", "content": "no"}]) == "hi"
    assert render_chat("{% generation %}{{ messages[0].content }}{% endgeneration %}", USER) == "hi"
    assert render_chat("{{ {'q': '<b> & é'} | tojson }}", USER) == '{"q": "<b> & é"}'
    assert render_chat("{{ strftime_now('%Y') | length }}", USER) == "4"
    assert render_chat("{{ tools is none }}/{{ enable_thinking }}", USER, enable_thinking=False) == "True/False"


def test_templates_are_compiled_once() -> None:
    source = "{{ messages | length }} messages"
    assert compile_template(source) is compile_template(source)


def test_content_parts_are_flattened() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]
    assert render_chat("{{ messages[0].content }}", messages) == "one\ntwo"
    assert messages[0]["content"][0] == {"type": "text", "text": "one"}  # the caller's list is untouched


@pytest.mark.parametrize(("messages", "error"), [
    ([], "non-empty list"),
    ("hello", "non-empty list"),
    ([{"role": "wizard", "content": "x"}], r"messages\[0\]\.role must be one of"),
    ([{"role": "user", "content": 5}], "string or a list of text parts"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:"}}]}], "text only"),
    ([{"role": "user", "content": [{"type": "text"}]}], r"content\[0\] must be"),
])
def test_bad_messages_are_rejected_clearly(messages: object, error: str) -> None:
    with pytest.raises(MessageError, match=error):
        normalize_messages(messages)  # type: ignore[arg-type]


def test_assistant_content_may_be_null_for_tool_calls() -> None:
    assert normalize_messages([{"role": "assistant", "content": None, "tool_calls": []}])[0]["content"] == ""


def test_fold_system_into_first_user() -> None:
    folded = fold_system_into_first_user([{"role": "system", "content": "be brief"}, *USER])
    assert folded == [{"role": "user", "content": "be brief\n\nhi"}]


def _write_gguf(path: Path, template: str) -> None:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("evil-model")
    writer.add_chat_template(template)
    writer.add_tensor("tiny", np.zeros(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _read_template(path: Path) -> str:
    import gguf

    field = gguf.GGUFReader(str(path)).fields["tokenizer.chat_template"]
    return field.contents()


@pytest.mark.parametrize("template", [MALICIOUS["cycler-globals-popen"], MALICIOUS["attr-built-at-runtime"]],
                         ids=["static", "runtime"])
def test_malicious_template_embedded_in_a_gguf_is_refused(template: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    model = tmp_path / "evil.gguf"
    _write_gguf(model, template.replace("MARKER", str(marker)))
    embedded = _read_template(model)
    assert "popen" in embedded
    with pytest.raises(ChatTemplateError, match="Python internals.*refusing to run it"):
        resolve_chat(None, arch="llama", name="evil-model", embedded_template=embedded,
                     bos_token="<s>", eos_token="</s>").render(USER)
    assert not marker.exists()


FORMAT_CALLS = {
    "format-call": "{{ '{0.__class__}'.format(1) }}",
    "dunder-inside-a-string": "{{ ('{0.' ~ '__init__' ~ '}') }}",
    "format-map": "{% set d = {} %}{{ '{x}'.format_map(d) }}",
    "format-by-key": "{{ 'a{}'['format'](1) }}",
    "format-by-attr-filter": "{{ ('a{}'|attr('format'))(1) }}",
}


@pytest.mark.parametrize("template", FORMAT_CALLS.values(), ids=FORMAT_CALLS.keys())
def test_str_format_and_dunder_strings_are_refused_before_rendering(template: str) -> None:
    """jinja2 before 3.1.6 let str.format reach internals past the sandbox (CVE-2024-56326,
    CVE-2025-27516); the static scan refuses the template whatever jinja2 is installed."""
    with pytest.raises(ChatTemplateError, match="tried to access Python internals"):
        compile_template(template)


def test_printf_format_filter_and_format_keys_still_render() -> None:
    template = "{{ '%s=%d'|format('n', 3) }} {{ tools[0].format }} {{ 'a_b' }}"
    assert render_chat(template, USER, tools=[{"format": "date"}]) == "n=3 date a_b"

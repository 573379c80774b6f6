"""Reasoning models: the thinking split from the answer as text streams in (runtime/chat/reasoning.py),
the templates' thinking switches, and the recipes of the families that think."""
from __future__ import annotations

import itertools

import pytest

from llmpack.runtime.chat.reasoning import (
    HARMONY,
    THINK,
    ReasoningParser,
    ThinkingSwitchError,
    opens_thinking,
    split_reasoning,
    syntax_for_template,
    thinking_switch,
    thinking_template_kwargs,
)
from llmpack.runtime.chat.recipes import load_recipes, match_recipe, resolve_chat

QWEN3_OUTPUT = "<think>\nThe user greets me.\nI greet back.\n</think>\n\nHello there!"
HARMONY_OUTPUT = ("<|channel|>analysis<|message|>User greets. Reply briefly.<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>Hello there!")


def stream(text_parts, syntax=THINK, started_open=False):
    """Feed the parts in order; check the deltas add up to the parser's totals; return them."""
    parser = ReasoningParser(syntax, started_open=started_open)
    deltas = [parser.feed(p) for p in text_parts] + [parser.finish()]
    thinking, answer = "".join(t for t, _ in deltas), "".join(a for _, a in deltas)
    assert (thinking, answer) == (parser.thinking, parser.answer)
    return thinking, answer


@pytest.mark.parametrize(("syntax", "text", "expected"), [
    (THINK, QWEN3_OUTPUT, ("The user greets me.\nI greet back.", "Hello there!")),
    (HARMONY, HARMONY_OUTPUT, ("User greets. Reply briefly.", "Hello there!")),
])
def test_every_cut_of_the_stream_gives_the_same_split(syntax, text, expected):
    """Markers cut in half across deltas (`<thi` + `nk>`, `</thin` + `k>`) are held, never leaked."""
    assert stream([text], syntax) == expected
    assert stream(list(text), syntax) == expected                    # one character at a time
    for i, j in itertools.combinations(range(1, len(text)), 2):     # every three-part cut
        assert stream([text[:i], text[i:j], text[j:]], syntax) == expected, (i, j)


def test_no_delta_carries_part_of_a_marker():
    parser = ReasoningParser(THINK)
    seen = [parser.feed(c) for c in QWEN3_OUTPUT] + [parser.finish()]
    for thinking, answer in seen:
        assert "<" not in thinking + answer and ">" not in thinking + answer


def test_a_template_that_opened_the_thinking_starts_inside_it():
    """DeepSeek-R1's generation prompt ends with `<think>\\n`: the output has only the closing tag."""
    prompt = resolve_chat("deepseek-r1", arch=None, name=None, embedded_template=None, bos_token="<s>",
                          eos_token="</s>").render([{"role": "user", "content": "Hi"}])
    assert prompt.endswith("<｜Assistant｜><think>\n") and opens_thinking(prompt, THINK)
    assert stream(list("Greeting.\n</think>\n\nHi!"), started_open=True) == ("Greeting.", "Hi!")


@pytest.mark.parametrize(("text", "expected"), [
    ("Hello <think> is a tag", ("", "Hello <think> is a tag")),     # only at the start opens thinking
    ("<think>ran out of tokens mid-thou", ("ran out of tokens mid-thou", "")),
    ("Hi <thi", ("", "Hi <thi")),                                   # a partial marker at the end is text
    ("<thinking>is not the tag", ("", "<thinking>is not the tag")),
    ("  <think>a</think>b", ("a", "b")),
    ("<think></think>Direct.", ("", "Direct.")),
])
def test_edges(text, expected):
    assert stream(list(text)) == expected
    assert split_reasoning(text, THINK) == expected


def test_harmony_answer_without_thinking_and_no_syntax_at_all():
    assert stream(list("<|channel|>final<|message|>Hi"), HARMONY) == ("", "Hi")
    assert split_reasoning("<think>x</think>y", None) == ("", "<think>x</think>y")


def test_syntax_and_switch_are_read_from_the_template():
    recipes = load_recipes()
    assert syntax_for_template(recipes["qwen3"].chat_template) is THINK
    assert syntax_for_template(recipes["deepseek-r1"].chat_template) is THINK
    assert syntax_for_template(recipes["gpt-oss"].chat_template) is HARMONY
    assert syntax_for_template(recipes["chatml"].chat_template) is None
    assert syntax_for_template(recipes["qwen3"].chat_template, "none") is None
    with pytest.raises(ValueError, match="reasoning format"):
        syntax_for_template("", "deepseek")
    assert thinking_switch(recipes["qwen3"].chat_template) == "enable_thinking"
    assert thinking_switch(recipes["gpt-oss"].chat_template) == "reasoning_effort"
    assert thinking_switch(recipes["deepseek-r1"].chat_template) is None


def test_thinking_switch_reaches_the_template():
    qwen3 = resolve_chat("qwen3", arch=None, name=None, embedded_template=None, bos_token="", eos_token="")
    user = [{"role": "user", "content": "Hi"}]
    off = qwen3.render(user, **thinking_template_kwargs(qwen3.template, False))
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") and not opens_thinking(off, THINK)
    on = qwen3.render(user, **thinking_template_kwargs(qwen3.template, True))
    assert on.endswith("<|im_start|>assistant\n") and qwen3.render(user) == on
    oss = resolve_chat("gpt-oss", arch=None, name=None, embedded_template=None, bos_token="", eos_token="")
    assert "Reasoning: high" in oss.render(user, **thinking_template_kwargs(oss.template, "high"))
    assert "Reasoning: low" in oss.render(user, **thinking_template_kwargs(oss.template, False))
    assert "Reasoning: medium" in oss.render(user)
    with pytest.raises(ThinkingSwitchError, match="think must be"):
        thinking_template_kwargs(qwen3.template, "max")
    for think in (True, False, "high"):   # no switch: the model is left as it is
        assert thinking_template_kwargs(load_recipes()["chatml"].chat_template, think) == {}


def test_earlier_thinking_stays_out_of_the_next_prompt():
    """As Qwen3's and DeepSeek's templates expect: a past answer is sent back without its thinking."""
    history = [{"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "<think>\nsecret plan\n</think>\n\nHello!"},
               {"role": "user", "content": "Again"}]
    for name in ("qwen3", "deepseek-r1"):
        prompt = resolve_chat(name, arch=None, name=None, embedded_template=None, bos_token="",
                              eos_token="").render(history)
        assert "secret plan" not in prompt and "Hello!" in prompt, name
    oss_history = [history[0], {"role": "assistant", "content": HARMONY_OUTPUT}, history[2]]
    oss = resolve_chat("gpt-oss", arch=None, name=None, embedded_template=None, bos_token="", eos_token="")
    prompt = oss.render(oss_history)
    assert "Reply briefly" not in prompt and "<|channel|>final<|message|>Hello there!<|end|>" in prompt


@pytest.mark.parametrize(("name", "arch", "expected"), [
    ("Qwen3-8B", "qwen3", "qwen3"), ("QwQ-32B", "qwen2", "qwen3"),
    ("DeepSeek-R1-Distill-Qwen-7B", "qwen2", "deepseek-r1"), ("DeepSeek-R1-Distill-Llama-8B", "llama", "deepseek-r1"),
    ("gpt-oss-20b", "gpt-oss", "gpt-oss"), ("Qwen2.5 0.5B Instruct", "qwen2", "chatml"),
])
def test_reasoning_families_are_recognised(name, arch, expected):
    assert match_recipe(arch=arch, name=name, chat_template=None).name == expected
    recipe = load_recipes()[expected]
    assert match_recipe(arch="llama", name="x", chat_template=recipe.chat_template) is recipe

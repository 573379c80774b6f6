"""The tiny test models are real: llama.cpp loads every variant, generates from it, and its
vocabulary round-trips any text (byte fallback covers what the pieces do not)."""
from __future__ import annotations

import llama_cpp
import pytest

from ggufs import CHATML_TEMPLATE, IM_END_ID, IM_START_ID

TEXTS = ["hello world", "The tiny model said: 42!", "café, é, 日本, 🙂", " leading and trailing ", "a\nb\tc"]


@pytest.fixture(scope="module", params=["f32", "f16", "q8_0"])
def llm(request, tiny_model_factory):
    from llmpack.runtime.hardware.backends import load_backends

    load_backends()   # llama-cpp-python never loads ggml's run-time backends itself
    template = CHATML_TEMPLATE if request.param == "f16" else None
    model = llama_cpp.Llama(model_path=str(tiny_model_factory(dtype=request.param, chat_template=template)),
                            n_ctx=256, verbose=False)
    yield model
    model.close()


def test_each_variant_generates(llm):
    out = llm.create_completion("hello", max_tokens=8, temperature=0.8, seed=1)
    assert out["usage"]["completion_tokens"] >= 1
    assert isinstance(out["choices"][0]["text"], str)


@pytest.mark.parametrize("text", TEXTS)
def test_text_round_trips_through_the_vocabulary(llm, text):
    tokens = llm.tokenize(text.encode(), add_bos=False, special=False)
    assert llm.detokenize(tokens).decode() == text


def test_chat_control_tokens_are_single_tokens(llm):
    tokens = llm.tokenize(b"<|im_start|>user<|im_end|>", add_bos=False, special=True)
    assert tokens[0] == IM_START_ID and tokens[-1] == IM_END_ID and len(tokens) >= 3


@pytest.mark.parametrize("template", [None, CHATML_TEMPLATE])
def test_the_chat_template_is_embedded_only_when_asked(tiny_model_factory, template):
    """What llama.cpp reads back is exactly what was asked for: the template, or no key at all."""
    model = llama_cpp.Llama(model_path=str(tiny_model_factory(chat_template=template)), vocab_only=True,
                            verbose=False)
    try:
        assert model.metadata.get("tokenizer.chat_template") == template
    finally:
        model.close()


def test_different_seeds_make_different_models(tiny_model_factory):
    a = tiny_model_factory(seed=1).read_bytes()
    b = tiny_model_factory(seed=2).read_bytes()
    assert len(a) == len(b) and a != b

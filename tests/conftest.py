"""Shared fixtures. Test models come from tests/ggufs.py (tiny, random weights, real llama.cpp
models); the demo model is the real Gemma 3 270M, assembled once into the user's llmpack cache
(LLMPACK_CACHE is deliberately left alone here: re-assembling 253 MB per session is slow)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from ggufs import CHATML_TEMPLATE, write_tiny_model


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """factory(**write_tiny_model kwargs) -> path; identical requests share one file, so treat
    the result as read-only (copy it before corrupting it)."""
    made: dict[str, Path] = {}
    folder = tmp_path_factory.mktemp("tiny-models")

    def factory(**kwargs: Any) -> Path:
        key = repr(sorted(kwargs.items()))
        if key not in made:
            made[key] = write_tiny_model(folder / f"tiny-{len(made)}.gguf", **kwargs)
        return made[key]

    return factory


@pytest.fixture(scope="session")
def tiny_model(tiny_model_factory: Callable[..., Path]) -> Path:
    """A 2-layer f32 llama model with no embedded chat template."""
    return tiny_model_factory()


@pytest.fixture(scope="session")
def tiny_chat_model(tiny_model_factory: Callable[..., Path]) -> Path:
    """The tiny model with an embedded ChatML template (<|im_start|>/<|im_end|> are in its vocabulary)."""
    return tiny_model_factory(chat_template=CHATML_TEMPLATE)


@pytest.fixture(scope="session")
def demo_model() -> Path:
    """The real demo model (Gemma 3 270M Q4_K_M). Its package is a test dependency: when it is
    missing the tests that need it fail (PathsError says how to install it), never skip."""
    from llmpack.demo_models import demo_model_path

    return demo_model_path("gemma")

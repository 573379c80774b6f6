"""Built programs of the tiny test model for the tests that run them (tests/test_build*.py): the
real Linux runtime stub (conftest.py's `stub`) with the tiny ChatML model, plain and compressed.
`from helpers.built import *` brings in the fixtures; module-scoped, so each module builds its own
(seconds: the stub is cached)."""
from __future__ import annotations

from pathlib import Path

import pytest

from apps import llmpack_cli
from ggufs import CHATML_TEMPLATE

__all__ = ["tiny_gguf", "tiny_exe", "tiny_zstd_exe"]


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_factory) -> Path:
    return tiny_model_factory(chat_template=CHATML_TEMPLATE)


@pytest.fixture(scope="module")
def tiny_exe(tiny_gguf, stub, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("built") / "tiny-chat"
    proc = llmpack_cli("build", str(tiny_gguf), "-o", str(out), "--name", "Tiny Chat", "--system", "Be brief.",
                       "--ctx", "512", "--parallel", "4", "--stub", str(stub))
    assert f"wrote {out}" in proc.stdout and "run it" in proc.stdout
    return out


@pytest.fixture(scope="module")
def tiny_zstd_exe(tiny_gguf, stub, tmp_path_factory) -> Path:
    """A compressed build: the one kind whose model is unpacked to the cache at its first launch."""
    out = tmp_path_factory.mktemp("built-zstd") / "tiny-zstd"
    llmpack_cli("build", str(tiny_gguf), "-o", str(out), "--compress", "zstd", "--stub", str(stub))
    return out

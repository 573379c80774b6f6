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


class PathsError(LlmpackError):
    """The per-user cache, or the demo model that lives in it, cannot be used."""


def folder(path: Path) -> Path:
    """`path`, created if needed; PathsError (one line, what to do) when it cannot be."""
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
    return folder(Path(override) if override else Path(platformdirs.user_cache_dir("llmpack", appauthor=False)))


def models_dir() -> Path:
    """Models extracted from built executables, named by their sha256."""
    return folder(cache_dir() / "models")


def stubs_dir() -> Path:
    """Cached PyInstaller runtime stubs, one per llmpack version, platform and llama.cpp build."""
    return folder(cache_dir() / "stubs")


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


def data_dir() -> Path:
    """Per-user data folder (~/.local/share/llmpack, %LOCALAPPDATA%\\llmpack, ~/Library/Application
    Support/llmpack): saved chats and the document index. LLMPACK_DATA_DIR overrides it (tests
    point it at a temporary folder). Not created here: whoever first writes to it makes it."""
    override = os.environ.get("LLMPACK_DATA_DIR")
    return Path(override) if override else Path(platformdirs.user_data_dir("llmpack", appauthor=False))


def private_folder(path: Path) -> Path:
    """`path` created if needed and readable by this user only (0700 where modes exist): it holds
    chats and documents, which other users of a shared computer must not read."""
    folder(path)
    if os.name == "posix":
        try:
            if path.stat().st_mode & 0o077:
                path.chmod(0o700)
        except OSError as exc:
            raise PathsError(f"cannot make the folder {path} private ({exc.strerror or type(exc).__name__}); "
                             "set LLMPACK_DATA_DIR to a folder you own") from None
    return path


def private_file(path: Path) -> Path:
    """`path` created empty if missing, mode 0600 (checked again when it exists): SQLite gives its
    -wal and -shm files the mode of the database, so they stay private too."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        if os.name == "posix" and path.stat().st_mode & 0o077:
            path.chmod(0o600)
    except OSError as exc:
        raise PathsError(f"cannot use the file {path} ({exc.strerror or type(exc).__name__}); "
                         "set LLMPACK_DATA_DIR to a folder you can write to") from None
    return path


def models_dir() -> Path:
    """Models extracted from built executables, named by their sha256."""
    return folder(cache_dir() / "models")


def stubs_dir() -> Path:
    """Cached PyInstaller runtime stubs, one per llmpack version, platform and llama.cpp build."""
    return folder(cache_dir() / "stubs")


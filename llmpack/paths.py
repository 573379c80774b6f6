"""Where llmpack keeps things on the user's machine (never inside the repository).

Every folder here is created on first use. When that fails (no permission, a read-only disk,
a file in the way, a full disk) the caller gets a :class:`PathsError`: one line that names the
folder and says what to do (usually: set LLMPACK_CACHE), which the CLI and a built program
print before exiting with status 2.
"""
from __future__ import annotations

import os
import stat
import sys
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


def data_dir() -> Path:
    """Per-user data folder (~/.local/share/llmpack, %LOCALAPPDATA%\\llmpack, ~/Library/Application
    Support/llmpack): saved chats and the document index. LLMPACK_DATA_DIR overrides it (tests
    point it at a temporary folder). Not created here: whoever first writes to it makes it private
    (private_folder)."""
    override = os.environ.get("LLMPACK_DATA_DIR")
    return Path(override) if override else Path(platformdirs.user_data_dir("llmpack", appauthor=False))


def runtime_dir() -> Path:
    """This user's private folder for files that live as long as a launch (the browser's redirect
    file, the instance lock): $XDG_RUNTIME_DIR/llmpack (/run/user/UID/llmpack) on Linux,
    %LOCALAPPDATA%\\Temp\\llmpack on Windows, ~/Library/Caches/TemporaryItems/llmpack on macOS.

    Without XDG_RUNTIME_DIR (root over SSH, containers, BSDs) platformdirs would fall back to
    /tmp/runtime-UID, a name anyone can create first, and warn on the console at every launch;
    llmpack uses a `runtime` folder in the data folder instead, as Jupyter does. Either way the
    folder must pass private_folder. PathsError when none does."""
    candidates = []
    if os.name == "nt" or sys.platform == "darwin":
        candidates.append(Path(platformdirs.user_runtime_dir("llmpack", appauthor=False)))
    elif os.path.isabs(os.environ.get("XDG_RUNTIME_DIR") or ""):
        candidates.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "llmpack")
    candidates.append(data_dir() / "runtime")
    problems = []
    for candidate in candidates:
        try:
            return private_folder(candidate)
        except PathsError as exc:
            problems.append(str(exc))
    raise PathsError("; ".join(problems))


def private_folder(path: Path) -> Path:
    """`path` as a folder only this user can use: made with mode 0700 if missing; an existing one
    must be a real folder (not a symlink) owned by this user, and is narrowed to 0700 (fchmod on
    the opened folder itself, so it cannot be swapped in between). PathsError otherwise."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        if os.name == "nt":   # no POSIX modes: the per-user profile's ACLs keep it private
            return path
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        reason = "it is a symbolic link" if os.path.islink(path) else exc.strerror or type(exc).__name__
        raise PathsError(f"cannot use the folder {path} ({reason}); remove it, or set LLMPACK_DATA_DIR "
                         "to a folder of your own") from None
    try:
        _own(fd, path, 0o700)
    finally:
        os.close(fd)
    return path


def private_file(path: Path, *, create: bool = True) -> Path:
    """`path` as a file only this user can read: created with mode 0600 if missing (and `create`),
    else it must be a regular file owned by this user (not a symlink), narrowed to 0600."""
    path = Path(path)
    if os.name == "nt":
        return path
    flags = os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileNotFoundError:
        if create:
            raise PathsError(f"cannot create {path}: its folder is missing") from None
        return path
    except OSError as exc:
        reason = "it is a symbolic link" if os.path.islink(path) else exc.strerror or type(exc).__name__
        raise PathsError(f"cannot use the file {path} ({reason}); remove it and try again") from None
    try:
        _own(fd, path, 0o600)
    finally:
        os.close(fd)
    return path


def private_store(db: Path) -> Path:
    """An SQLite database only this user can read, checked each time a store opens it: its folder
    0700, the file 0600, and its -wal/-shm files 0600 if they exist (SQLite gives the ones it
    creates the database's mode). Saved chats hold whatever people typed and attached; under the
    usual umask 022 they were 0644 in a 0755 folder, readable by every user of the computer."""
    private_folder(Path(db).parent)
    private_file(db)
    for suffix in ("-wal", "-shm", "-journal"):
        private_file(Path(f"{db}{suffix}"), create=False)
    return Path(db)


def _own(fd: int, path: Path, mode: int) -> None:
    st = os.fstat(fd)
    kind = stat.S_ISDIR if mode == 0o700 else stat.S_ISREG
    if not kind(st.st_mode):
        raise PathsError(f"cannot use {path}: it is not a {'folder' if mode == 0o700 else 'file'}; remove it")
    if st.st_uid != os.getuid():
        raise PathsError(f"cannot use {path}: it belongs to another user (uid {st.st_uid}); remove it, "
                         "or set LLMPACK_DATA_DIR to a folder of your own")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.fchmod(fd, mode)

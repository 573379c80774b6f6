"""What llmpack keeps on a shared computer stays private to the user who ran it: saved chats
(folder 0700, database and its -wal/-shm 0600, re-checked whenever a store opens them) and the
runtime folder that holds the instance lock and the browser's redirect file (owned by the user,
0700, never a symbolic link, never /tmp/runtime-UID). Runs under umask 022, the usual default,
where SQLite and mkdir once made everything readable by every user."""
from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import warnings
from contextlib import closing
from pathlib import Path

import pytest

from llmpack import paths
from llmpack.runtime.chats.chats import ChatStore, clean_chat

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX modes; Windows keeps them private with profile ACLs")
CHAT = {"title": "Private", "messages": [{"role": "user", "content": "my bank PIN is 1234"}]}


@pytest.fixture(autouse=True)
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_saved_chats_are_readable_by_their_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path / "data"))
    store = ChatStore()
    store.put("m", clean_chat(CHAT, chat_id="c1"))
    db = tmp_path / "data" / "chats.sqlite3"
    with closing(sqlite3.connect(db)) as reader:      # -wal and -shm exist while a connection is open
        reader.execute("SELECT count(*) FROM chats").fetchone()
        store.put("m", clean_chat(CHAT, chat_id="c2"))
        assert mode(tmp_path / "data") == 0o700
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert path.exists() and mode(path) == 0o600, path
    assert store.get("m", "c1")["messages"][0]["content"] == "my bank PIN is 1234"


def test_a_store_made_by_an_older_llmpack_is_narrowed_when_opened(tmp_path: Path):
    folder = tmp_path / "old"
    ChatStore(folder / "chats.sqlite3").put("m", clean_chat(CHAT, chat_id="c1"))
    os.chmod(folder, 0o755)
    for path in folder.iterdir():
        os.chmod(path, 0o644)
    assert ChatStore(folder / "chats.sqlite3").list("m")     # a new launch opens it
    assert mode(folder) == 0o700 and {mode(p) for p in folder.iterdir()} == {0o600}


def test_a_database_that_is_a_symlink_is_refused(tmp_path: Path):
    (tmp_path / "elsewhere.sqlite3").write_bytes(b"")
    (tmp_path / "chats.sqlite3").symlink_to(tmp_path / "elsewhere.sqlite3")
    with pytest.raises(paths.PathsError, match="symbolic link"):
        ChatStore(tmp_path / "chats.sqlite3").list("m")


# ---- the runtime folder -----------------------------------------------------------------------------
@pytest.fixture
def no_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data" / "runtime"


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS has a per-user runtime folder of its own")
def test_without_xdg_runtime_dir_the_folder_is_in_the_data_folder_and_nothing_is_printed(no_xdg: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # platformdirs' RuntimeDirWarning would raise
        assert paths.runtime_dir() == no_xdg
    assert mode(no_xdg) == 0o700
    assert not Path(f"/tmp/runtime-{os.getuid()}").is_symlink()


def test_launching_prints_no_runtime_dir_warning(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env["LLMPACK_DATA_DIR"] = str(tmp_path / "data")
    code = "from llmpack.runtime.server.lifecycle import browser; print(browser.runtime_dir())"
    proc = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0 and "RuntimeDirWarning" not in proc.stderr and "/tmp/runtime-" not in proc.stderr, \
        proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "data" / "runtime")


def test_a_planted_runtime_folder_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_xdg: Path):
    """Another user made $XDG_RUNTIME_DIR/llmpack first, as a link to a folder they can read:
    llmpack falls back to its own folder instead of writing the lock and redirect there."""
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    (tmp_path / "attacker").mkdir(mode=0o777)
    (xdg / "llmpack").symlink_to(tmp_path / "attacker")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert paths.runtime_dir() == no_xdg
    with pytest.raises(paths.PathsError, match="symbolic link"):
        paths.private_folder(xdg / "llmpack")


def test_a_folder_of_another_user_is_refused_and_a_loose_one_narrowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o777)
    os.chmod(loose, 0o777)
    assert paths.private_folder(loose) == loose and mode(loose) == 0o700
    real_uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real_uid + 1)     # as seen by another user
    with pytest.raises(paths.PathsError, match="belongs to another user"):
        paths.private_folder(loose)
    with pytest.raises(paths.PathsError, match="belongs to another user"):
        paths.private_file(loose / "x", create=True)

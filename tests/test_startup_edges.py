"""Start-up and platform edges: a server that fails after binding gives its port back, the build's
digest cache hashes again whenever a file's identity is in doubt (Windows has no change time), and
a launch waiting for another one's extraction lock gives up, in one line, instead of spinning."""
from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

import pytest

from llmpack.builder import extract, hashing
from llmpack.builder.packfile import PackError
from llmpack.cli import build_parser, serve_config
from llmpack.runtime.server.lifecycle import server as launch


def test_a_server_that_fails_after_binding_closes_its_socket(tiny_model: Path, monkeypatch: pytest.MonkeyPatch):
    """Ctrl+C (or any error) while the app is being made, after the port was bound. The moment
    cannot be timed for real, so the app factory is made to raise, as KeyboardInterrupt would."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "create_app", interrupted)
    config = serve_config(build_parser().parse_args(["run", str(tiny_model), "--no-browser", "--port", str(port)]))
    with pytest.raises(KeyboardInterrupt) as caught:
        launch.Server(config, lambda progress: tiny_model, quiet=True)
    assert caught.value is not None   # the traceback (and the half-made Server in it) is still alive here
    with socket.socket() as again:   # no SO_REUSEADDR: fails while any socket still holds the port
        again.bind(("127.0.0.1", port))


# ------------------------------------------------------------------------------------ digest cache
@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMPACK_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    return tmp_path / "cache"


def _age(path: Path, seconds: float) -> None:
    past = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(past, past))


def test_a_file_written_just_before_hashing_is_hashed_again_next_time(cache: Path, tmp_path: Path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"first " * 1000)
    with open(model, "rb") as f:
        first = hashing.hash_file(f)
    with open(model, "rb") as f:   # its mtime was within the timestamp tick: not trusted
        assert hashing.known_digest(f) is None
    _age(model, 60)
    with open(model, "rb") as f:
        assert hashing.hash_file(f) == first
    with open(model, "rb") as f:   # old enough now: remembered
        assert hashing.known_digest(f) == first
    model.write_bytes(b"other " * 1000)   # same size, rewritten in place, mtime set back
    _age(model, 60)
    with open(model, "rb") as f:
        assert hashing.known_digest(f) is None   # POSIX: the change time moved


def _stat(ino: int = 42, size: int = 4096, mtime_ns: int = 10**18, ctime_ns: int = 10**18) -> os.stat_result:
    return os.stat_result((0o100644, ino, 7, 1, 0, 0, size, 0, 0, 0),
                          {"st_atime_ns": 0, "st_mtime_ns": mtime_ns, "st_ctime_ns": ctime_ns})


def test_the_digest_key_trusts_no_creation_time_and_no_missing_file_id():
    win = hashing.digest_key(_stat(), windows=True)
    assert win is not None and win == hashing.digest_key(_stat(ctime_ns=1), windows=True)   # creation time
    assert win != hashing.digest_key(_stat(mtime_ns=10**18 + 1), windows=True)
    assert win != hashing.digest_key(_stat(size=4097), windows=True)
    assert win != hashing.digest_key(_stat(ino=43), windows=True)
    assert hashing.digest_key(_stat(), windows=False) != hashing.digest_key(_stat(ctime_ns=1), windows=False)
    assert hashing.digest_key(_stat(ino=0), windows=True) is None     # FAT / exFAT: no file ID
    assert hashing.digest_key(_stat(ino=0), windows=False) is None


# ------------------------------------------------------------------------------------ extraction lock
def test_waiting_for_a_held_extraction_lock_ends_in_one_line(tmp_path: Path):
    """A real lock held by another open file; the waiter uses the same non-blocking call shape as
    on Windows (msvcrt.locking LK_NBLCK there, flock LOCK_NB here)."""
    lock = tmp_path / "model.gguf.lock"
    holder = os.open(lock, os.O_RDWR | os.O_CREAT)
    waiter = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        tries = []

        def try_lock() -> None:
            tries.append(1)
            fcntl.flock(waiter, fcntl.LOCK_EX | fcntl.LOCK_NB)

        with pytest.raises(PackError) as err:
            extract.wait_for_lock(try_lock, lock, wait_s=0.5)
        assert len(tries) > 1   # it did wait
        message = str(err.value)
        assert "\n" not in message and str(lock) in message and "close it" in message
        fcntl.flock(holder, fcntl.LOCK_UN)   # released: the waiter gets it
        extract.wait_for_lock(lambda: fcntl.flock(waiter, fcntl.LOCK_EX | fcntl.LOCK_NB), lock, wait_s=0.5)
    finally:
        os.close(holder)
        os.close(waiter)


def test_a_lock_the_file_system_refuses_is_one_line_at_once(tmp_path: Path):
    lock = tmp_path / "model.gguf.lock"
    closed = os.open(lock, os.O_RDWR | os.O_CREAT)
    os.close(closed)   # EBADF: no amount of retrying helps
    tries = []

    def try_lock() -> None:
        tries.append(1)
        fcntl.flock(closed, fcntl.LOCK_EX | fcntl.LOCK_NB)

    with pytest.raises(PackError) as err:
        extract.wait_for_lock(try_lock, lock, wait_s=600)
    assert len(tries) == 1
    assert "\n" not in str(err.value) and "LLMPACK_CACHE" in str(err.value)

"""Unpacking a built executable's model, once, into the per-user cache.

The byte layout lives in packfile.py; this is the runtime side of it. A model is written to
``models_dir()/<sha256>.gguf`` through ``<name>.tmp-<pid>`` (hashed while copying, fsynced,
sha256 verified, then renamed), and a ``<sha256>.gguf.ok`` marker records the verified file's
size and mtime. A later launch that finds a matching marker uses the file without reading
it; anything else (no marker, a different size or mtime, leftovers of an interrupted run
whose process is gone) is checked or redone, so a half-written file is never taken for valid.
A sidecar model (``--sidecar``) is verified once in place.

Two launches of the same program at once (a double double-click) take turns: an exclusive
lock on ``<sha256>.gguf.lock`` (flock / msvcrt.locking; the OS drops it if the holder dies)
makes the second wait and then find the first one's verified file, instead of both writing a
copy. On Windows the wait is bounded (LOCK_WAIT_S), and a lock the file system refuses is one line. The holder removes the lock file when done; a launch that slips in meanwhile can at
worst unpack a second copy through its own temporary file, never break the first. A full disk
or an unwritable cache is one line naming the folder, never a traceback.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from llmpack.builder.fileio import replace_text, tmp_sibling, unlink_quietly
from llmpack.builder.hashing import copy_hashing, hash_path
from llmpack.builder.manifest import Manifest, ModelBlob
from llmpack.builder.packfile import PackError
from llmpack.builder.zstd_frames import read_frames
from llmpack.progress import ByteProgress, ProgressArg, human_bytes

SPARE_BYTES = 64 << 20       # free space required beyond the model itself
# How long a launch waits for another one unpacking the same model: minutes even for a big
# model on a slow disk, so past this the other one is stuck, not slow.
LOCK_WAIT_S = 15 * 60.0
LOCK_POLL_S = 0.2
_BUSY = {errno.EACCES, errno.EAGAIN, errno.EWOULDBLOCK, getattr(errno, "EDEADLOCK", errno.EDEADLK), errno.EDEADLK}


def extract_model(exe_path, manifest: Manifest, dest_dir=None, progress: ProgressArg = None) -> Path:
    """Path of the verified model: unpacked once to dest_dir/<sha256>.gguf (default: models_dir());
    a sidecar model is verified once and used in place."""
    from llmpack import paths

    exe_path, m = Path(exe_path), manifest.model
    dest = Path(dest_dir) if dest_dir is not None else paths.models_dir()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        if m.location == "sidecar":
            return _verify_sidecar(exe_path, m, dest, progress)
        final = dest / f"{m.sha256}.gguf"
        marker = final.with_name(final.name + ".ok")
        if _marker_ok(final, marker, m, Path(final.name)):
            return final
        with _exclusive(final.with_name(final.name + ".lock")):
            if not _marker_ok(final, marker, m, Path(final.name)):   # another launch may have done it
                _unpack(exe_path, m, final, marker, progress)
        return final
    except OSError as exc:
        raise _disk_error(exc, dest, m) from None


def _unpack(exe_path: Path, m: ModelBlob, final: Path, marker: Path, progress: ProgressArg) -> None:
    _remove_stale_tmps(final.parent, m.sha256)
    if final.exists():  # left by a crash between rename and marker, or damaged: check it once
        if final.stat().st_size == m.size and hash_path(final, m.size, progress) == m.sha256:
            _write_marker(final, marker, m, Path(final.name))
            return
        unlink_quietly(marker)
        unlink_quietly(final)
    free = shutil.disk_usage(final.parent).free
    if free < m.size + SPARE_BYTES:
        raise PackError(f"not enough disk space to unpack the model: {human_bytes(m.size + SPARE_BYTES)} needed in "
                        f"{final.parent}, {human_bytes(free)} free; free some space or set LLMPACK_CACHE")
    tmp = tmp_sibling(final)
    bar = ByteProgress(progress, m.size, "unpacking model")
    try:
        with open(exe_path, "rb", buffering=0) as src, open(tmp, "wb") as dst:
            if os.fstat(src.fileno()).st_size < m.offset + m.stored_size:
                raise PackError(f"{exe_path} is truncated (the model is cut off); download it again")
            if m.compression == "zstd":
                sha = read_frames(exe_path, m, dst.write, bar)
            else:
                sha = copy_hashing(src, m.offset, m.size, dst.write, bar)
            dst.flush()
            os.fsync(dst.fileno())
        if sha != m.sha256:
            raise PackError(f"the model inside {exe_path} is corrupted (sha256 mismatch); "
                            "re-download or rebuild it")
        os.replace(tmp, final)
        _write_marker(final, marker, m, Path(final.name))
    finally:
        bar.close()
        unlink_quietly(tmp)


def _disk_error(exc: OSError, dest: Path, m: ModelBlob) -> PackError:
    """One line for what goes wrong writing the cache: a full disk, no permission, ..."""
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):   # EDQUOT: not on Windows
        return PackError(f"the disk filled up while unpacking the model into {dest} ({human_bytes(m.size)} needed); "
                         "free some space or set LLMPACK_CACHE to a folder on a bigger disk")
    what = exc.strerror or type(exc).__name__
    where = exc.filename or dest
    return PackError(f"cannot unpack the model into {dest}: {what} ({where}); "
                     "set LLMPACK_CACHE to a folder you can write to")


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (created if missing); waits while another process
    holds it (on Windows for at most LOCK_WAIT_S: msvcrt has no blocking lock, only a retry loop).
    The OS drops the lock when its holder exits, however it exits."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    locked = False
    try:
        if os.name == "nt":
            import msvcrt

            wait_for_lock(lambda: msvcrt.locking(fd, msvcrt.LK_NBLCK, 1), lock_path)
        else:   # blocks; an error (ENOLCK on some network file systems) is one line via _disk_error
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        locked = True
        yield
    finally:
        if locked and os.name != "nt":   # Windows cannot delete a file that is open
            unlink_quietly(lock_path)
        os.close(fd)   # releases the lock


def wait_for_lock(try_lock: Callable[[], object], lock_path: Path, wait_s: float = LOCK_WAIT_S) -> None:
    """Call `try_lock` (a non-blocking lock) until it succeeds. "Held by another process" errors
    (EACCES, EDEADLOCK from msvcrt; EAGAIN from flock) are retried until `wait_s` has passed; any
    other error, or the time running out, is one PackError line, never an endless loop."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            try_lock()
            return
        except OSError as exc:
            if exc.errno not in _BUSY:
                raise PackError(f"cannot lock {lock_path} to unpack the model: {exc.strerror or exc}; "
                                "set LLMPACK_CACHE to a folder on a local disk") from None
            if time.monotonic() >= deadline:
                raise PackError(f"another copy of this program has been unpacking the same model for "
                                f"{wait_s / 60:.0f} minutes (it holds {lock_path}); close it, then start "
                                "this one again") from None
        time.sleep(LOCK_POLL_S)


def _verify_sidecar(exe_path: Path, m: ModelBlob, dest: Path, progress: ProgressArg) -> Path:
    model = exe_path.parent / m.file
    if not model.is_file():
        raise PackError(f"the model file {model.name} is missing next to {exe_path.name}; "
                        "keep the .gguf file in the same folder as the program")
    if model.stat().st_size != m.size:
        raise PackError(f"{model} is incomplete or not the model this program was built with; copy it again")
    marker = dest / f"{m.sha256}.sidecar.ok"
    if not _marker_ok(model, marker, m, model.resolve()):
        if hash_path(model, m.size, progress) != m.sha256:
            raise PackError(f"the model file {model} is corrupted (sha256 mismatch); copy it again")
        _write_marker(model, marker, m, model.resolve())
    return model


def _marker_ok(path: Path, marker: Path, m: ModelBlob, recorded: Path) -> bool:
    try:
        st, info = path.stat(), json.loads(marker.read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(info, dict) and info.get("sha256") == m.sha256 and st.st_size == m.size
            and info.get("size") == st.st_size and info.get("mtime_ns") == st.st_mtime_ns
            and info.get("path") == str(recorded))


def _write_marker(path: Path, marker: Path, m: ModelBlob, recorded: Path) -> None:
    st = path.stat()
    info = {"sha256": m.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "path": str(recorded)}
    replace_text(marker, json.dumps(info))


def _remove_stale_tmps(dest: Path, sha: str) -> None:
    """Delete leftovers of interrupted extractions whose process is gone."""
    for p in dest.glob(f"{sha}.gguf*.tmp-*"):
        try:
            pid = int(p.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        if os.name != "nt" and pid != os.getpid():  # on Windows, unlink fails while it is open
            try:
                os.kill(pid, 0)
                continue  # still running (maybe extracting right now)
            except ProcessLookupError:
                pass
            except OSError:
                continue
        unlink_quietly(p)

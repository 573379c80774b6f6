"""Where a built executable's model is read from, and unpacking it once when it must be.

`model_source` decides (`disk_need` says the same without doing it, for --info, inspect and
--forget): a model stored uncompressed, the default, is *read in place* from the program's own
bytes (llama.cpp's llama_model_load_from_file_ptr at the model's 64 KiB-aligned offset), after
its sha256 is checked once (a ``<sha256>.inplace.ok`` marker records the program's path, size
and mtime): no copy on disk. A sidecar model (``--sidecar``) is verified once and read where it
is. Only a compressed model (``--compress zstd``) is unpacked, as below; the launch says first
where to and how big (`unpacking`). Measurements and the alternatives weighed (reflinks, sidecar
by default): docs/PORTABILITY.md, "Disk use".

Unpacking (the byte layout lives in packfile.py; this is the runtime side of it): a model is written to
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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from llmpack import paths
from llmpack.builder.fileio import replace_text, tmp_sibling, unlink_quietly
from llmpack.builder.hashing import copy_hashing, hash_path
from llmpack.builder.manifest import Manifest, ModelBlob
from llmpack.builder.packfile import PackError
from llmpack.builder.zstd_frames import read_frames
from llmpack.progress import ByteProgress, ProgressArg, human_bytes
from llmpack.runtime.model.source import ModelFile

SPARE_BYTES = 64 << 20       # free space required beyond the model itself
# How long a launch waits for another one unpacking the same model: minutes even for a big
# model on a slow disk, so past this the other one is stuck, not slow.
LOCK_WAIT_S = 15 * 60.0
LOCK_POLL_S = 0.2
_BUSY = {errno.EACCES, errno.EAGAIN, errno.EWOULDBLOCK, getattr(errno, "EDEADLOCK", errno.EDEADLK), errno.EDEADLK}


Unpacking = Callable[[Path, int], None]   # (folder, bytes): told just before this launch unpacks a model


@dataclass(frozen=True)
class DiskNeed:
    """What a launch of a built program needs on disk besides the program itself."""

    how: str                 # "in place" (read from the program), "sidecar" (the .gguf beside it), "unpack"
    bytes: int               # extra disk a launch needs: 0 unless the model is unpacked
    path: Path | None        # the unpacked copy (how == "unpack"), whether or not it exists yet
    present: bool = False    # that copy is there already (a first launch made it)

    def to_dict(self) -> dict:
        return {"how": self.how, "bytes": self.bytes, "path": str(self.path) if self.path else None,
                "present": self.present}

    def line(self) -> str:
        if self.how == "in place":
            return "disk: the model is read from this file where it is; a launch writes no copy"
        if self.how == "sidecar":
            return "disk: the model is read from the .gguf file next to the program; a launch writes no copy"
        state = "already there" if self.present else "written by the first launch"
        return f"disk: the first launch unpacks the model ({human_bytes(self.bytes)}) to {self.path} ({state})"


def disk_need(manifest: Manifest, dest_dir=None) -> DiskNeed:
    """How a launch will read the model, and the disk that takes (see the module docstring)."""
    m = manifest.model
    if m.location == "sidecar":
        return DiskNeed("sidecar", 0, None)
    if m.compression == "none":
        return DiskNeed("in place", 0, None)
    final = (Path(dest_dir) if dest_dir is not None else paths.models_dir()) / f"{m.sha256}.gguf"
    return DiskNeed("unpack", m.size, final, _marker_ok(final, final.with_name(final.name + ".ok"), m, Path(final.name)))


def model_source(exe_path, manifest: Manifest, progress: ProgressArg = None,
                 unpacking: Unpacking | None = None) -> ModelFile:
    """Where this launch reads the model from (see the module docstring), verified: the program
    itself at the model's offset, the sidecar file, or the unpacked copy."""
    exe_path, m = Path(exe_path), manifest.model
    if m.location == "embedded" and m.compression == "none":
        dest = paths.models_dir()
        try:
            _verify_in_place(exe_path, m, dest, progress)
        except OSError as exc:
            raise _disk_error(exc, dest, m) from None
        return ModelFile(exe_path, m.offset, m.size, m.sha256)
    return ModelFile(extract_model(exe_path, manifest, progress=progress, unpacking=unpacking), sha256=m.sha256)


def extract_model(exe_path, manifest: Manifest, dest_dir=None, progress: ProgressArg = None,
                  unpacking: Unpacking | None = None) -> Path:
    """Path of the verified model: unpacked once to dest_dir/<sha256>.gguf (default: models_dir());
    a sidecar model is verified once and used in place."""
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
                _unpack(exe_path, m, final, marker, progress, unpacking)
        return final
    except OSError as exc:
        raise _disk_error(exc, dest, m) from None


def _unpack(exe_path: Path, m: ModelBlob, final: Path, marker: Path, progress: ProgressArg,
            unpacking: Unpacking | None = None) -> None:
    _remove_stale_tmps(final.parent, m.sha256)
    if final.exists():  # left by a crash between rename and marker, or damaged: check it once
        if final.stat().st_size == m.size and hash_path(final, m.size, progress) == m.sha256:
            _write_marker(final, marker, m, Path(final.name))
            return
        unlink_quietly(marker)
        unlink_quietly(final)
    if unpacking is not None:   # only the launch that really unpacks says so (another may have, meanwhile)
        unpacking(final.parent, m.size)
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
            import msvcrt   # lazy: Windows only

            wait_for_lock(lambda: msvcrt.locking(fd, msvcrt.LK_NBLCK, 1), lock_path)
        else:   # blocks; an error (ENOLCK on some network file systems) is one line via _disk_error
            import fcntl   # lazy: POSIX only

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


def _verify_in_place(exe_path: Path, m: ModelBlob, dest: Path, progress: ProgressArg) -> None:
    """Check the model inside the program once (sha256); a marker in `dest` records the program's
    path, size and mtime, so later launches of the same file skip the read."""
    exe = exe_path.resolve()
    size = exe.stat().st_size
    if size < m.offset + m.size:
        raise PackError(f"{exe_path} is truncated (the model is cut off); download it again")
    marker = dest / f"{m.sha256}.inplace.ok"
    if not _marker_ok(exe, marker, m, exe, size):
        if hash_path(exe, m.size, progress, m.offset) != m.sha256:
            raise PackError(f"the model inside {exe_path} is corrupted (sha256 mismatch); "
                            "re-download or rebuild it")
        _write_marker(exe, marker, m, exe)


def _marker_ok(path: Path, marker: Path, m: ModelBlob, recorded: Path, size: int | None = None) -> bool:
    try:
        st, info = path.stat(), json.loads(marker.read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(info, dict) and info.get("sha256") == m.sha256 and st.st_size == (size or m.size)
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

"""Writing the layout documented in packfile.py: the model spliced into a runtime stub.

`write_packed` copies the stub's headers and bootloader, the model (raw, or zstd frames), the
manifest, the stub's PyInstaller archive moved as-is, the rest of the stub and the trailer, in
one sequential pass into ``.<out>.tmp-<pid>``, then patches the headers (ELF offsets, PE
checksum) and renames the file into place. `write_sidecar` writes the same file without the
model and puts the model beside it. Build-time only: the runtime never imports this module.
"""
from __future__ import annotations

import os
import shutil
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, Callable

from llmpack.builder import elf, pe
from llmpack.builder.fileio import reader, tmp_sibling, unlink_quietly
from llmpack.builder.hashing import CHUNK, copy_hashing, hash_file, known_digest, remember_digest
from llmpack.builder.manifest import MMPROJ_KEY, Manifest, ModelBlob, new_manifest
from llmpack.builder.packfile import (COOKIE, COOKIE_MAGIC, MODEL_ALIGN, SHIFT_ALIGN, SIDECAR_MANIFEST_SUFFIX,
                                      PackError, find_trailer, pack_trailer)
from llmpack.builder.zstd_frames import choose_compression, write_frames
from llmpack.progress import ByteProgress, ProgressArg

COOKIE_SCAN = 4 * 1024 * 1024   # how far back from the end to look for PyInstaller's cookie
_MACHO = {b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
          b"\xca\xfe\xba\xbe", b"\xbe\xba\xfe\xca"}


def write_packed(stub_path, model_path, out_path, manifest_extra: dict, *, compress: str = "none",
                 progress: ProgressArg = None, mmproj=None) -> Manifest:
    """Write `out_path`: the stub with the model (raw or zstd frames) spliced in before its archive,
    and the vision projector `mmproj` (raw, 64 KiB aligned) right after the model, if given."""
    model_path, out_path = Path(model_path), Path(out_path)
    stub = open_stub(Path(stub_path))
    size = model_path.stat().st_size
    if size == 0:
        raise PackError(f"{model_path} is empty; pass a GGUF model file")
    mode = choose_compression(model_path, size, compress)
    if stub.kind == "pe" and mode == "none" and packed_size(stub, size) > pe.MAX_FILE_SIZE:
        raise too_big()

    def write_model(out: _Out) -> ModelBlob:
        bar = ByteProgress(progress, size, f"packing {model_path.name}")
        try:
            with open(model_path, "rb", buffering=0) as src:
                if mode == "zstd":
                    return write_frames(src, size, out, bar)
                sha = known_digest(src)
                if sha is not None:   # rebuilding from the same file: a kernel-side copy, no hashing
                    out.copy_from(src, 0, size, bar)
                else:
                    sha = copy_hashing(src, 0, size, out.write, bar)
                    remember_digest(src, sha)
                return ModelBlob(sha256=sha, size=size, stored_size=size)
        finally:
            bar.close()

    return _splice(stub, out_path, manifest_extra, write_model=write_model,
                   mmproj=None if mmproj is None else Path(mmproj), progress=progress)


def write_sidecar(stub_path, model_path, out_path, manifest_extra: dict, *,
                  progress: ProgressArg = None, mmproj=None) -> Manifest:
    """Write `out_path` (stub + manifest + trailer, no model) and the model beside it as
    `<out stem>.gguf` (and the projector as `mmproj-<out stem>.gguf`); the manifest says
    model.location = "sidecar" and names that file."""
    model_path, out_path = Path(model_path), Path(out_path)
    stub = open_stub(Path(stub_path), allow_macho=True)
    blob = _copy_beside(model_path, out_path.parent / sidecar_name(out_path), progress)
    if mmproj is not None:
        target = out_path.parent / mmproj_sidecar_name(out_path)
        manifest_extra = {**manifest_extra, MMPROJ_KEY: _entry(_copy_beside(Path(mmproj), target, progress))}
    if stub.kind != "macho":
        return _splice(stub, out_path, manifest_extra, blob=blob)
    manifest = new_manifest(blob, manifest_extra, stub.sha256)
    shutil.copyfile(stub.path, out_path)
    os.chmod(out_path, 0o755)
    out_path.with_name(out_path.name + SIDECAR_MANIFEST_SUFFIX).write_bytes(manifest.to_bytes())
    return manifest


def _copy_beside(model_path: Path, target: Path, progress: ProgressArg) -> ModelBlob:
    """Copy (or, when it is already there, only hash) a GGUF to `target`: its sidecar entry."""
    name = target.name
    size = model_path.stat().st_size
    bar = ByteProgress(progress, size, f"copying {model_path.name}")
    try:
        with open(model_path, "rb", buffering=0) as src:
            if target.exists() and os.path.samefile(model_path, target):
                sha = copy_hashing(src, 0, size, None, bar)
            else:
                tmp = tmp_sibling(target, hidden=True)
                try:
                    with open(tmp, "wb") as dst:
                        sha = copy_hashing(src, 0, size, dst.write, bar)
                    os.replace(tmp, target)
                finally:
                    unlink_quietly(tmp)
    finally:
        bar.close()
    return ModelBlob(sha256=sha, size=size, stored_size=size, location="sidecar", file=name)


def mmproj_sidecar_name(out_path) -> str:
    """`chat.exe` -> `mmproj-chat.gguf`: the mmproj- prefix is how people (and llmpack) spot one."""
    return "mmproj-" + sidecar_name(out_path)


def _entry(blob: ModelBlob) -> dict:
    """A blob as the manifest stores it (the same shape as the model entry; builder/mmproj.py)."""
    return Manifest(model=blob).to_dict()["model"]

def sidecar_name(out_path) -> str:
    """`chat.exe` -> `chat.gguf`, `chat` -> `chat.gguf`, `qwen2.5-chat` -> `qwen2.5-chat.gguf`."""
    name = Path(out_path).name
    return (name[:-4] if name.lower().endswith(".exe") else name) + ".gguf"


@dataclass
class Stub:
    """A runtime stub, validated for splicing."""

    path: Path
    size: int
    kind: str            # "elf" | "pe" | "macho"
    archive_offset: int
    archive_length: int
    fmt: Any             # elf.ElfStub | pe.PeStub | None
    sha256: str


def open_stub(path: Path, allow_macho: bool = False) -> Stub:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        read = reader(f)
        magic = read(0, 4)
        if magic in _MACHO:
            if not allow_macho:
                raise PackError(f"{path} is a macOS executable; embedding a model into macOS "
                                "executables is not supported yet; build on macOS with --sidecar")
            return Stub(path, size, "macho", 0, 0, None, hash_file(f))
        kind = "elf" if magic == b"\x7fELF" else "pe" if magic[:2] == b"MZ" else None
        if kind is None:
            raise PackError(f"{path} is not a Linux or Windows executable; "
                            "pass the runtime stub made by `llmpack stub`")
        if find_trailer(f, size) is not None:
            raise PackError(f"{path} already contains a packed model; pass the plain runtime stub")
        a, length = find_archive(read, size, path)
        try:
            fmt = elf.ElfStub(read, size, a, length) if kind == "elf" else pe.PeStub(read, size, a)
        except (elf.ElfError, pe.PeError) as exc:   # the format modules import nothing of llmpack's
            raise PackError(str(exc)) from None
        return Stub(path, size, kind, a, length, fmt, hash_file(f))


def find_archive(read: Callable[[int, int], bytes], size: int, path: Path) -> tuple[int, int]:
    """Locate PyInstaller's archive the way its bootloader does: last cookie, scanning backwards."""
    start = max(0, size - COOKIE_SCAN)
    window = read(start, size - start)
    pos = window.rfind(COOKIE_MAGIC)
    if pos >= 0 and pos + COOKIE.size <= len(window):
        length = COOKIE.unpack_from(window, pos)[1]
        archive = start + pos + COOKIE.size - length
        if COOKIE.size <= length and archive > 0:
            return archive, length
    raise PackError(f"{path} is not a PyInstaller onefile runtime stub (no archive found); "
                    "rebuild it with `llmpack stub`")


def _splice(stub: Stub, out_path: Path, manifest_extra: dict, *,
            write_model: Callable[["_Out"], ModelBlob] | None = None, blob: ModelBlob | None = None,
            mmproj: Path | None = None, progress: ProgressArg = None) -> Manifest:
    """One pass in layout order (packfile.py); the head is rewritten last, patched and summed."""
    a, length = stub.archive_offset, stub.archive_length
    checksum = pe.Checksum() if stub.kind == "pe" and stub.fmt.checksum else None
    tmp = tmp_sibling(out_path, hidden=True)
    try:
        with open(stub.path, "rb") as src, open(tmp, "wb") as dst:
            read = reader(src)
            if os.fstat(src.fileno()).st_size != stub.size:
                raise PackError(f"{stub.path} changed while packing; try again")
            out = _Out(dst, checksum, pe.MAX_FILE_SIZE if stub.kind == "pe" else None)
            head = bytearray(read(0, a))
            out.write(head, account=False)  # rewritten (patched, summed) at the end
            if write_model is not None:
                out.write(bytes(_align(a, MODEL_ALIGN) - a))
                model_offset = out.pos
                blob = replace(write_model(out), offset=model_offset)
            if mmproj is not None:
                manifest_extra = {**manifest_extra, MMPROJ_KEY: _entry(_write_blob(out, mmproj, progress))}
            assert blob is not None
            manifest = new_manifest(blob, manifest_extra, stub.sha256)
            data = manifest.to_bytes()
            new_a = out.pos + len(data)
            new_a += (a - new_a) % SHIFT_ALIGN
            out.write(bytes(new_a - len(data) - out.pos))
            manifest.manifest_offset, manifest.archive_offset = out.pos, new_a
            out.write(data)
            patches = stub.fmt.patches(new_a - a) if stub.kind == "elf" else []
            out.copy_from(src, a, length)
            tail = bytearray(read(a + length, stub.size - a - length))
            for off, new in patches:
                buf, base = (head, 0) if off + len(new) <= a else (tail, a + length)
                if off < base:
                    raise PackError(f"unsupported runtime stub {stub.path}: headers inside its archive")
                buf[off - base:off - base + len(new)] = new
            out.write(tail)
            out.write(bytes(-out.pos % 8))
            embedded = blob.location == "embedded"
            out.write(pack_trailer(manifest.manifest_offset, data, blob.offset if embedded else 0,
                                   blob.stored_size if embedded else 0, new_a))
            if checksum is not None:
                at = stub.fmt.checksum_offset
                head[at:at + 4] = bytes(4)
                checksum.add(0, head)
                head[at:at + 4] = struct.pack("<I", checksum.value(out.pos))
            dst.seek(0)
            dst.write(head)
        os.chmod(tmp, 0o755)
        try:
            os.replace(tmp, out_path)
        except PermissionError as exc:
            raise PackError(f"cannot write {out_path} ({exc.strerror}); close it if it is running") from None
    finally:
        unlink_quietly(tmp)
    return manifest


def _write_blob(out: "_Out", path: Path, progress: ProgressArg) -> ModelBlob:
    """Append a file raw at the next 64 KiB boundary (the projector, read where it is)."""
    out.write(bytes(_align(out.pos, MODEL_ALIGN) - out.pos))
    offset, size = out.pos, path.stat().st_size
    bar = ByteProgress(progress, size, f"packing {path.name}")
    try:
        with open(path, "rb", buffering=0) as src:
            sha = copy_hashing(src, 0, size, out.write, bar)
    finally:
        bar.close()
    return ModelBlob(sha256=sha, size=size, stored_size=size, offset=offset)


class _Out:
    """Sequential writer that tracks the position, feeds the PE checksum and enforces a size cap."""

    def __init__(self, f: BinaryIO, checksum: pe.Checksum | None, limit: int | None) -> None:
        self.f, self.checksum, self.limit, self.pos = f, checksum, limit, 0

    def write(self, data: bytes | bytearray, account: bool = True) -> None:
        if self.limit is not None and self.pos + len(data) > self.limit:
            raise too_big()
        if self.checksum is not None and account:
            self.checksum.add(self.pos, data)
        self.f.write(data)
        self.pos += len(data)

    def copy_from(self, src: BinaryIO, offset: int, length: int, bar: Callable[[int], None] | None = None) -> None:
        """Append `length` bytes of `src` from `offset`. Without a PE checksum to feed, the
        kernel copies them (copy_file_range: no trip through Python, a reflink on
        filesystems that share blocks), which is what lets a build run at `cp` speed."""
        if self.limit is not None and self.pos + length > self.limit:
            raise too_big()
        if self.checksum is None and hasattr(os, "copy_file_range"):
            self.f.flush()
            done = 0
            try:
                while done < length:
                    n = os.copy_file_range(src.fileno(), self.f.fileno(), min(length - done, 1 << 30),
                                           offset + done)
                    if n <= 0:
                        break
                    done += n
                    if bar is not None:
                        bar(n)
            except OSError:       # e.g. across filesystems on old kernels: fall back below
                pass
            self.pos += done
            offset, length = offset + done, length - done
        read = reader(src)
        for off in range(offset, offset + length, CHUNK):
            buf = read(off, min(CHUNK, offset + length - off))
            self.write(buf)
            if bar is not None:
                bar(len(buf))


def packed_size(stub: Stub, model_size: int) -> int:
    """The size of the program `write_packed` makes from `stub` and an uncompressed model (at most)."""
    return _align(stub.archive_offset, MODEL_ALIGN) + model_size + stub.size - stub.archive_offset + 2 * SHIFT_ALIGN


def fits_windows(stub_size: int, model_size: int) -> bool:
    """Whether a Windows program made from a stub and an uncompressed model stays under 4 GiB
    (an upper bound of :func:`packed_size`, known before the stub is read)."""
    return stub_size + model_size + MODEL_ALIGN + 2 * SHIFT_ALIGN <= pe.MAX_FILE_SIZE


def too_big() -> PackError:
    return PackError("the Windows executable would be 4 GiB or larger, which Windows refuses to "
                     "start; build with --sidecar (model file next to the program) or compress it")


def _align(n: int, to: int) -> int:
    return -(-n // to) * to

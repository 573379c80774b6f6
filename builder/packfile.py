"""The byte layout of a built llmpack executable: splicing, reading back, extracting once.

A built program is the cached PyInstaller *onefile* runtime stub with the model spliced in
*before* PyInstaller's archive, plus a JSON manifest and a fixed-size trailer at the very end::

    offset 0
    +--------------------------------------------------+
    | stub bytes [0, A): ELF/PE headers + bootloader   |  A = archive start in the stub;
    |                                                  |  headers patched (ELF offsets, PE sum)
    +--------------------------------------------------+
    | zeros up to the next 64 KiB boundary             |
    +--------------------------------------------------+ <- model.offset (64 KiB aligned)
    | MODEL: the raw GGUF, or independent zstd frames  |    model.stored_size bytes
    +--------------------------------------------------+
    | zeros, so that A' - A is a multiple of 4096      |
    +--------------------------------------------------+ <- manifest offset
    | manifest: UTF-8 JSON (see Manifest.to_dict)      |
    +--------------------------------------------------+ <- A' (ELF: new sh_offset of `pydata`)
    | PyInstaller archive (CArchive "PKG"), moved      |
    | as-is; ends with its 88-byte cookie              |
    | "MEI\\014\\013\\012\\013\\016" + len,toc,toclen,pyver,pylib |
    +--------------------------------------------------+
    | stub bytes after the archive, as-is              |  ELF: .shstrtab + section header
    |                                                  |  table; PE: none
    +--------------------------------------------------+
    | zeros up to a multiple of 8                      |
    +--------------------------------------------------+ <- EOF - 64
    | trailer, 64 bytes, little-endian:                |
    |   0 magic "LLMPACK1"      8 u16 format version   |
    |  10 u16 flags (0)        12 u32 crc32(manifest)  |
    |  16 u64 manifest offset  24 u64 manifest length  |
    |  32 u64 model offset     40 u64 model stored len |
    |  48 u64 archive offset   56 u32 reserved (0)     |
    |  60 u32 crc32(trailer bytes 0..59)               |
    +--------------------------------------------------+ EOF

All offsets are absolute file offsets. The manifest (keys sorted)::

    {"format_version": 1, "model": {"location": "embedded", "file": null, "offset": 131072,
     "size": 5000000, "stored_size": 5000000, "sha256": "5167...", "compression": "none",
     "frames": []}, "recipe": {...}, "defaults": {"ctx": 4096, "parallel": 4, "gpu_layers":
     "auto", "system": "...", "name": "..."}, "llmpack_version": "0.1.0",
     "llama_cpp_version": "0.3.36", "built_at": "2025-01-01T00:00:00Z", "stub_sha256": "...",
     ...other manifest_extra keys}

With compression "zstd", "frames" lists [offset from model.offset, stored length, raw length];
each is a complete, independent zstd frame (content size + checksum) of <= 16 MiB raw.
Sidecar mode is the same layout without the MODEL region (trailer model offset/length 0):
"location": "sidecar", "file": "<name>.gguf", a file next to the executable.

Why this layout (verified against PyInstaller 6.22 and its bootloader sources):
* The bootloader (``pyi_utils_find_magic_pattern``) opens its own executable and scans it
  back-to-front in 8 KiB chunks for the cookie; the archive start is ``cookie_pos + 88 -
  cookie.len``, and every TOC offset is relative to that start, so the archive may be moved
  unchanged. Bytes after the cookie only lengthen the scan: on Linux the section header table
  already sits there, and our 64-byte trailer adds nothing measurable. A model placed *after*
  the archive would be scanned on every launch (+4.9 s per 253 MB); placed before it, it is
  never read. The launch test checks where the bootloader actually found the PYZ.
* Linux: PyInstaller adds the archive as the ELF section ``pydata`` (objcopy) after all
  loaded segments; :mod:`llmpack.builder.elf` shifts ``e_shoff`` and the sections at or after
  the archive, so ``readelf -S`` shows ``pydata`` at A'. Program headers are untouched.
* Windows: the archive is the PE overlay; :mod:`llmpack.builder.pe` recomputes the
  checksum when the stub had one and refuses signed stubs and results of 4 GiB or more
  (Windows will not start them: use --sidecar). Signing the finished program appends a
  certificate after the trailer (kept 8-aligned for that); :func:`read_manifest` then finds
  the trailer just before the certificate table.
* macOS (Mach-O) is refused for embedding. Sidecar mode copies a Mach-O stub unchanged and
  writes the manifest beside it as ``<name>.llmpack.json``.

Extraction (builder/extract.py): a model is unpacked once to ``models_dir()/<sha256>.gguf`` via a
``.tmp-<pid>`` file (fsync, sha256 verified, os.replace), then a ``<sha256>.gguf.ok`` marker
records size and mtime; later launches trust that marker instead of re-reading the model.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import threading
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Union

from llmpack.builder import elf, pe
from llmpack.errors import LlmpackError

MAGIC = b"LLMPACK1"
FORMAT_VERSION = 1
TRAILER = struct.Struct("<8sHHIQQQQQII")
MODEL_ALIGN = 64 * 1024
SHIFT_ALIGN = 4096
CHUNK = 16 * 1024 * 1024
FRAME_SIZE = 16 * 1024 * 1024
ZSTD_LEVEL = 3
AUTO_MAX_RATIO = 0.90
SIDECAR_MANIFEST_SUFFIX = ".llmpack.json"
COOKIE_MAGIC = b"MEI\014\013\012\013\016"
COOKIE = struct.Struct("!8sIIII64s")
_COOKIE_SCAN = 4 * 1024 * 1024
_MACHO = {b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
          b"\xca\xfe\xba\xbe", b"\xbe\xba\xfe\xca"}

Progress = Union[bool, Callable[[int, int], None], None]


class PackError(LlmpackError):
    """A built executable or runtime stub that cannot be packed, read or unpacked."""


@dataclass(frozen=True)
class ModelBlob:
    sha256: str
    size: int                      # raw GGUF bytes
    stored_size: int               # bytes in the container (== size unless zstd)
    offset: int = 0                # absolute offset in the executable (0 in a sidecar file)
    compression: str = "none"      # "none" | "zstd"
    frames: tuple = ()             # zstd: ((offset from model start, stored len, raw len), ...)
    location: str = "embedded"     # "embedded" | "sidecar"
    file: str | None = None        # sidecar: file name next to the executable


@dataclass
class Manifest:
    model: ModelBlob
    recipe: dict = field(default_factory=dict)
    defaults: dict = field(default_factory=dict)  # ctx, parallel, gpu_layers, system, name
    llmpack_version: str = ""
    llama_cpp_version: str | None = None
    built_at: str = ""
    stub_sha256: str = ""
    extra: dict = field(default_factory=dict)     # other manifest_extra keys, kept verbatim
    format_version: int = FORMAT_VERSION
    manifest_offset: int = 0                      # from the trailer, not stored in the JSON
    archive_offset: int = 0

    def to_dict(self) -> dict:
        m = self.model
        model = {"location": m.location, "file": m.file, "offset": m.offset, "size": m.size,
                 "stored_size": m.stored_size, "sha256": m.sha256, "compression": m.compression,
                 "frames": [list(f) for f in m.frames]}
        return {**self.extra, "format_version": self.format_version, "model": model,
                "recipe": self.recipe, "defaults": self.defaults,
                "llmpack_version": self.llmpack_version, "llama_cpp_version": self.llama_cpp_version,
                "built_at": self.built_at, "stub_sha256": self.stub_sha256}

    @classmethod
    def from_dict(cls, d: dict) -> "Manifest":
        d = dict(d)
        m = d.pop("model")
        frames = tuple((int(a), int(b), int(c)) for a, b, c in m.get("frames") or ())
        blob = ModelBlob(sha256=str(m["sha256"]), size=int(m["size"]), stored_size=int(m["stored_size"]),
                         offset=int(m["offset"]), compression=m["compression"], frames=frames,
                         location=m.get("location", "embedded"), file=m.get("file"))
        ok = (len(blob.sha256) == 64 and all(c in "0123456789abcdef" for c in blob.sha256)
              and blob.compression in ("none", "zstd") and blob.location in ("embedded", "sidecar")
              and min(blob.size, blob.stored_size, blob.offset) >= 0
              and (blob.location == "embedded" or _plain_name(blob.file))
              and (blob.compression == "none" and blob.stored_size == blob.size
                   or blob.compression == "zstd" and sum(f[2] for f in frames) == blob.size
                   and sum(f[1] for f in frames) == blob.stored_size))
        if not ok:
            raise ValueError("inconsistent model entry")
        known = {k: d.pop(k) for k in ("recipe", "defaults", "llmpack_version", "llama_cpp_version",
                                       "built_at", "stub_sha256", "format_version") if k in d}
        return cls(model=blob, extra=d, **known)


def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and not set(name) & set("/\\:\0")


# --------------------------------------------------------------------------- writing


def write_packed(stub_path, model_path, out_path, manifest_extra: dict, *, compress: str = "none",
                 progress: Progress = None) -> Manifest:
    """Write `out_path`: the stub with the model (raw or zstd frames) spliced in before its archive."""
    model_path, out_path = Path(model_path), Path(out_path)
    stub = _open_stub(Path(stub_path))
    size = model_path.stat().st_size
    if size == 0:
        raise PackError(f"{model_path} is empty; pass a GGUF model file")
    mode = _choose_compression(model_path, size, compress)
    if stub.kind == "pe" and mode == "none":
        projected = _align(stub.archive_offset, MODEL_ALIGN) + size + stub.size - stub.archive_offset + 2 * SHIFT_ALIGN
        if projected > pe.MAX_FILE_SIZE:
            raise _too_big()

    def write_model(out: _Out) -> ModelBlob:
        bar = _Progress(progress, size, f"packing {model_path.name}")
        try:
            with open(model_path, "rb", buffering=0) as src:
                if mode == "zstd":
                    return _write_zstd(src, size, out, bar)
                sha = _known_digest(src)
                if sha is not None:   # rebuilding from the same file: a kernel-side copy, no hashing
                    out.copy_from(src, 0, size, bar)
                else:
                    sha = _copy_hashing(src, 0, size, out.write, bar)
                    _remember_digest(src, sha)
                return ModelBlob(sha256=sha, size=size, stored_size=size)
        finally:
            bar.close()

    return _splice(stub, out_path, manifest_extra, write_model=write_model)


def write_sidecar(stub_path, model_path, out_path, manifest_extra: dict, *, progress: Progress = None) -> Manifest:
    """Write `out_path` (stub + manifest + trailer, no model) and the model beside it as
    `<out stem>.gguf`; the manifest says model.location = "sidecar" and names that file."""
    model_path, out_path = Path(model_path), Path(out_path)
    stub = _open_stub(Path(stub_path), allow_macho=True)
    name = sidecar_name(out_path)
    target = out_path.parent / name
    size = model_path.stat().st_size
    bar = _Progress(progress, size, f"copying {model_path.name}")
    try:
        with open(model_path, "rb", buffering=0) as src:
            if target.exists() and os.path.samefile(model_path, target):
                sha = _copy_hashing(src, 0, size, None, bar)
            else:
                tmp = target.with_name(f".{name}.tmp-{os.getpid()}")
                try:
                    with open(tmp, "wb") as dst:
                        sha = _copy_hashing(src, 0, size, dst.write, bar)
                    os.replace(tmp, target)
                finally:
                    _unlink(tmp)
    finally:
        bar.close()
    blob = ModelBlob(sha256=sha, size=size, stored_size=size, location="sidecar", file=name)
    if stub.kind != "macho":
        return _splice(stub, out_path, manifest_extra, blob=blob)
    manifest = _new_manifest(blob, manifest_extra, stub.sha256)
    shutil.copyfile(stub.path, out_path)
    os.chmod(out_path, 0o755)
    out_path.with_name(out_path.name + SIDECAR_MANIFEST_SUFFIX).write_bytes(_manifest_bytes(manifest))
    return manifest


def sidecar_name(out_path) -> str:
    """`chat.exe` -> `chat.gguf`, `chat` -> `chat.gguf`, `qwen2.5-chat` -> `qwen2.5-chat.gguf`."""
    name = Path(out_path).name
    return (name[:-4] if name.lower().endswith(".exe") else name) + ".gguf"


@dataclass
class _Stub:
    path: Path
    size: int
    kind: str            # "elf" | "pe" | "macho"
    archive_offset: int
    archive_length: int
    fmt: Any             # elf.ElfStub | pe.PeStub | None
    sha256: str


def _open_stub(path: Path, allow_macho: bool = False) -> _Stub:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        read = _reader(f)
        magic = read(0, 4)
        if magic in _MACHO:
            if not allow_macho:
                raise PackError(f"{path} is a macOS executable; embedding a model into macOS "
                                "executables is not supported yet; build on macOS with --sidecar")
            return _Stub(path, size, "macho", 0, 0, None, _hash_whole(f))
        kind = "elf" if magic == b"\x7fELF" else "pe" if magic[:2] == b"MZ" else None
        if kind is None:
            raise PackError(f"{path} is not a Linux or Windows executable; "
                            "pass the runtime stub made by `llmpack stub`")
        if _find_trailer(f, size) is not None:
            raise PackError(f"{path} already contains a packed model; pass the plain runtime stub")
        a, length = _find_archive(read, size, path)
        fmt = elf.ElfStub(read, size, a, length) if kind == "elf" else pe.PeStub(read, size, a)
        return _Stub(path, size, kind, a, length, fmt, _hash_whole(f))


def _find_archive(read, size: int, path: Path) -> tuple[int, int]:
    """Locate PyInstaller's archive the way its bootloader does: last cookie, scanning backwards."""
    start = max(0, size - _COOKIE_SCAN)
    window = read(start, size - start)
    pos = window.rfind(COOKIE_MAGIC)
    if pos >= 0 and pos + COOKIE.size <= len(window):
        length = COOKIE.unpack_from(window, pos)[1]
        archive = start + pos + COOKIE.size - length
        if COOKIE.size <= length and archive > 0:
            return archive, length
    raise PackError(f"{path} is not a PyInstaller onefile runtime stub (no archive found); "
                    "rebuild it with `llmpack stub`")


def _splice(stub: _Stub, out_path: Path, manifest_extra: dict, *, write_model=None,
            blob: ModelBlob | None = None) -> Manifest:
    a, length = stub.archive_offset, stub.archive_length
    checksum = pe.Checksum() if stub.kind == "pe" and stub.fmt.checksum else None
    tmp = out_path.with_name(f".{out_path.name}.tmp-{os.getpid()}")
    try:
        with open(stub.path, "rb") as src, open(tmp, "wb") as dst:
            read = _reader(src)
            if os.fstat(src.fileno()).st_size != stub.size:
                raise PackError(f"{stub.path} changed while packing; try again")
            out = _Out(dst, checksum, pe.MAX_FILE_SIZE if stub.kind == "pe" else None)
            head = bytearray(read(0, a))
            out.write(head, account=False)  # rewritten (patched, summed) at the end
            if write_model is not None:
                out.write(bytes(_align(a, MODEL_ALIGN) - a))
                model_offset = out.pos
                blob = write_model(out)
                blob = ModelBlob(**{**blob.__dict__, "offset": model_offset})
            manifest = _new_manifest(blob, manifest_extra, stub.sha256)
            data = _manifest_bytes(manifest)
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
            out.write(_pack_trailer(manifest.manifest_offset, data, blob.offset if embedded else 0,
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
        _unlink(tmp)
    return manifest


class _Out:
    """Sequential writer that tracks the position, feeds the PE checksum and enforces a size cap."""

    def __init__(self, f, checksum, limit):
        self.f, self.checksum, self.limit, self.pos = f, checksum, limit, 0

    def write(self, data, account: bool = True) -> None:
        if self.limit is not None and self.pos + len(data) > self.limit:
            raise _too_big()
        if self.checksum is not None and account:
            self.checksum.add(self.pos, data)
        self.f.write(data)
        self.pos += len(data)

    def copy_from(self, src, offset: int, length: int, bar=None) -> None:
        """Append `length` bytes of `src` from `offset`. Without a PE checksum to feed, the
        kernel copies them (copy_file_range: no trip through Python, a reflink on
        filesystems that share blocks), which is what lets a build run at `cp` speed."""
        if self.limit is not None and self.pos + length > self.limit:
            raise _too_big()
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
        read = _reader(src)
        for off in range(offset, offset + length, CHUNK):
            buf = read(off, min(CHUNK, offset + length - off))
            self.write(buf)
            if bar is not None:
                bar(len(buf))


def _too_big() -> PackError:
    return PackError("the Windows executable would be 4 GiB or larger, which Windows refuses to "
                     "start; build with --sidecar (model file next to the program) or compress it")


def _new_manifest(blob: ModelBlob, manifest_extra: dict, stub_sha: str) -> Manifest:
    from llmpack import __version__

    extra = dict(manifest_extra or {})
    clash = {"format_version", "model", "stub_sha256", "llmpack_version"} & extra.keys()
    if clash:
        raise ValueError(f"manifest_extra may not set {sorted(clash)}")
    built_at = extra.pop("built_at", None) or _now()
    return Manifest(model=blob, recipe=extra.pop("recipe", None) or {},
                    defaults=extra.pop("defaults", None) or {}, llmpack_version=__version__,
                    llama_cpp_version=extra.pop("llama_cpp_version", None), built_at=built_at,
                    stub_sha256=stub_sha, extra=extra)


def _now() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = datetime.fromtimestamp(int(epoch), timezone.utc) if epoch else datetime.now(timezone.utc)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def _manifest_bytes(manifest: Manifest) -> bytes:
    return json.dumps(manifest.to_dict(), indent=1, sort_keys=True).encode("utf-8")


def _pack_trailer(manifest_offset: int, manifest: bytes, model_offset: int, model_len: int,
                  archive_offset: int) -> bytes:
    body = TRAILER.pack(MAGIC, FORMAT_VERSION, 0, zlib.crc32(manifest), manifest_offset, len(manifest),
                        model_offset, model_len, archive_offset, 0, 0)[:-4]
    trailer = body + struct.pack("<I", zlib.crc32(body))
    assert COOKIE_MAGIC not in trailer  # the bootloader takes the last cookie in the file
    return trailer


def _choose_compression(model_path: Path, size: int, compress: str) -> str:
    if compress not in ("none", "zstd", "auto"):
        raise ValueError(f"compress must be 'none', 'zstd' or 'auto', not {compress!r}")
    if compress != "auto":
        return compress
    cctx = _zstd().ZstdCompressor(level=ZSTD_LEVEL)
    sample, n = 1024 * 1024, 16
    raw = packed = 0
    with open(model_path, "rb") as f:
        for i in range(n):
            f.seek((size - sample) * i // (n - 1) if size > sample else 0)
            chunk = f.read(sample)
            raw, packed = raw + len(chunk), packed + len(cctx.compress(chunk))
            if size <= sample:
                break
    return "zstd" if packed < AUTO_MAX_RATIO * raw else "none"


def _zstd():
    try:
        import zstandard
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise PackError("zstd compression needs the zstandard package: pip install zstandard") from exc
    return zstandard


def _write_zstd(src, size: int, out: _Out, bar) -> ModelBlob:
    """Compress `src` into independent frames on a thread pool, writing them in order."""
    zstd, local = _zstd(), threading.local()

    def compress(buf: bytes) -> bytes:
        if not hasattr(local, "c"):
            local.c = zstd.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, write_content_size=True)
        return local.c.compress(buf)

    workers = max(1, min(8, os.cpu_count() or 1))
    base, frames, pending, hasher = out.pos, [], deque(), _Hasher()

    def flush_one() -> None:
        fut, raw_len = pending.popleft()
        data = fut.result()
        frames.append((out.pos - base, len(data), raw_len))
        out.write(data)
        bar(raw_len)

    with ThreadPoolExecutor(workers) as pool:
        for start in range(0, size, FRAME_SIZE):
            buf = _read_exact(src, min(FRAME_SIZE, size - start))
            hasher.update(buf)
            pending.append((pool.submit(compress, buf), len(buf)))
            if len(pending) >= 2 * workers:
                flush_one()
        while pending:
            flush_one()
    return ModelBlob(sha256=hasher.hexdigest(), size=size, stored_size=out.pos - base,
                     compression="zstd", frames=tuple(frames))


# --------------------------------------------------------------------------- reading


def read_manifest(path) -> Manifest:
    """The manifest of a built executable; PackError if it is not one, truncated or corrupted."""
    path = Path(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        found = _find_trailer(f, size)
        if found is None:
            side = path.with_name(path.name + SIDECAR_MANIFEST_SUFFIX)
            if side.is_file():
                return _parse_manifest(side.read_bytes(), path)
            raise PackError(f"{path} is not an llmpack executable or is incomplete (no llmpack trailer "
                            "at its end, e.g. after an interrupted download); download or build it again")
        pos, raw = found
        if zlib.crc32(raw[:60]) != struct.unpack_from("<I", raw, 60)[0]:
            raise _corrupted(path, "its trailer is damaged")
        _, version, _, mcrc, moff, mlen, model_off, model_len, archive_off, _, _ = TRAILER.unpack(raw)
        if version > FORMAT_VERSION:
            raise PackError(f"{path} was built by a newer llmpack (format {version}); update llmpack")
        if not (0 < mlen <= 16 << 20 and moff + mlen <= archive_off < pos
                and (model_len == 0 or model_off + model_len <= moff)):
            raise _corrupted(path, "its trailer points outside the file")
        data = _reader(f)(moff, mlen)
    if zlib.crc32(data) != mcrc:
        raise _corrupted(path, "its manifest is damaged")
    manifest = _parse_manifest(data, path)
    m = manifest.model
    if m.location == "embedded" and (m.offset, m.stored_size) != (model_off, model_len):
        raise _corrupted(path, "its manifest and trailer disagree")
    manifest.manifest_offset, manifest.archive_offset = moff, archive_off
    return manifest


def find_embedded_model(path) -> tuple[int, int] | None:
    """(offset, length) of a raw GGUF embedded in a built executable, else None."""
    with open(path, "rb") as f:
        if _find_trailer(f, os.fstat(f.fileno()).st_size) is None:
            return None
    m = read_manifest(path).model
    return (m.offset, m.size) if m.location == "embedded" and m.compression == "none" else None


def _find_trailer(f, size: int) -> tuple[int, bytes] | None:
    """(position, raw bytes) of the trailer: at EOF, or just before a PE certificate table."""
    read = _reader(f)
    spots = [size - TRAILER.size]
    if read(0, 2) == b"MZ":
        hdr = pe.parse_headers(read)
        if hdr and hdr[2][0] and hdr[2][0] + hdr[2][1] <= size:
            spots.append(hdr[2][0] - TRAILER.size)
    for pos in spots:
        raw = read(pos, TRAILER.size) if pos >= 0 else b""
        if len(raw) == TRAILER.size and raw[:8] == MAGIC:
            return pos, raw
    return None


def _parse_manifest(data: bytes, path: Path) -> Manifest:
    try:
        return Manifest.from_dict(json.loads(data.decode("utf-8")))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _corrupted(path, f"its manifest is unreadable ({exc.__class__.__name__})") from None


def _corrupted(path, why: str) -> PackError:
    return PackError(f"{path} is corrupted ({why}); download or build it again")


# --------------------------------------------------------------------------- helpers


class _Hasher:
    """sha256 on a helper thread, overlapping with reads and writes (hashlib releases the GIL)."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self._pool = ThreadPoolExecutor(1)
        self._prev = None

    def update(self, buf: bytes) -> None:
        fut = self._pool.submit(self._h.update, buf)
        if self._prev is not None:
            self._prev.result()
        self._prev = fut

    def hexdigest(self) -> str:
        if self._prev is not None:
            self._prev.result()
        self._pool.shutdown()
        return self._h.hexdigest()


def _copy_hashing(src, offset: int, length: int, write, bar) -> str:
    """Stream `length` bytes of `src` from `offset` to `write` (or nowhere), returning their sha256."""
    src.seek(offset)
    hasher, left = _Hasher(), length
    while left:
        buf = _read_exact(src, min(CHUNK, left))
        hasher.update(buf)
        if write is not None:
            write(buf)
        left -= len(buf)
        bar(len(buf))
    return hasher.hexdigest()


def _hash_path(path: Path, size: int, progress: Progress) -> str:
    bar = _Progress(progress, size, "verifying model")
    try:
        with open(path, "rb", buffering=0) as f:
            return _copy_hashing(f, 0, size, None, bar)
    finally:
        bar.close()


def _hash_whole(f) -> str:
    sha = _known_digest(f)
    if sha is None:
        sha = _copy_hashing(f, 0, os.fstat(f.fileno()).st_size, None, _Progress(None, 0, ""))
        _remember_digest(f, sha)
    return sha


# sha256 of files already hashed, keyed by file identity: rebuilding from the same model (or
# stub) skips re-reading it. Any write changes ctime, which no user can set back.
def _digest_key(f) -> str:
    st = os.fstat(f.fileno())
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _digest_file() -> Path:
    from llmpack.paths import cache_dir

    return cache_dir() / "digests.json"


def _known_digest(f) -> str | None:
    try:
        return json.loads(_digest_file().read_text()).get(_digest_key(f))
    except (OSError, ValueError, AttributeError):
        return None


def _remember_digest(f, sha: str) -> None:
    path = _digest_file()
    try:
        known = json.loads(path.read_text())
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    known = dict(list(known.items())[-255:])     # a small cache: the newest 256 files
    known[_digest_key(f)] = sha
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(known))
        os.replace(tmp, path)
    except OSError:
        _unlink(tmp)


def _read_exact(f, n: int) -> bytes:
    buf = f.read(n)
    while len(buf) < n:
        more = f.read(n - len(buf))
        if not more:
            raise PackError(f"{getattr(f, 'name', 'a file')} ended early (was it changed while packing?)")
        buf += more
    return buf


def _reader(f) -> Callable[[int, int], bytes]:
    def read(offset: int, n: int) -> bytes:
        f.seek(offset)
        return f.read(n)
    return read


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def _unlink(p: Path) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


class _Progress:
    """progress=True: a tqdm bar; a callable: called as progress(done_bytes, total_bytes)."""

    def __init__(self, progress: Progress, total: int, desc: str) -> None:
        self.total, self.done, self.cb, self.bar = total, 0, None, None
        if progress is True:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, leave=False)
        elif callable(progress):
            self.cb = progress

    def __call__(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        if self.cb is not None:
            self.cb(self.done, self.total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

"""The byte layout of a built llmpack executable, and reading it back.

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
    | (optional, `build --mmproj`) zeros to 64 KiB,    |
    | then MMPROJ: the vision projector GGUF, raw      |  <- manifest "mmproj" entry's offset
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

All offsets are absolute file offsets. The manifest (keys sorted; builder/manifest.py)::

    {"format_version": 1, "model": {"location": "embedded", "file": null, "offset": 131072,
     "size": 5000000, "stored_size": 5000000, "sha256": "5167...", "compression": "none",
     "frames": []}, "recipe": {...}, "defaults": {"ctx": 4096, "parallel": 4, "gpu_layers":
     "auto", "system": "...", "name": "..."}, "llmpack_version": "0.1.0",
     "llama_cpp_version": "0.3.36", "built_at": "2025-01-01T00:00:00Z", "stub_sha256": "...",
     ...other manifest_extra keys}

A program built with --mmproj also has "mmproj": an entry of the model entry's shape (always
"compression": "none"; "location" "sidecar" names ``mmproj-<program>.gguf`` beside the program).
builder/mmproj.py reads it; the trailer does not mention it (old readers ignore it).
With compression "zstd", "frames" lists [offset from model.offset, stored length, raw length];
each is a complete, independent zstd frame (content size + checksum) of <= 16 MiB raw
(builder/zstd_frames.py).
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

Who does what: this module owns the layout's constants, the trailer (written and read) and
:func:`read_manifest`; builder/splice.py writes the layout (``llmpack build``);
builder/manifest.py is the manifest's schema; builder/hashing.py hashes what is moved;
builder/extract.py unpacks the model at run time.

At run time (builder/extract.py) an uncompressed model is read where it is: llama.cpp loads the
GGUF from the program's own bytes at model.offset (64 KiB aligned, so its data section is aligned
for mmap as llama_model_load_from_file_ptr requires), after a one-time sha256 check recorded in a
``<sha256>.inplace.ok`` marker. Only a compressed model is unpacked, once, to
``models_dir()/<sha256>.gguf`` via a ``.tmp-<pid>`` file (fsync, sha256 verified, os.replace),
then a ``<sha256>.gguf.ok`` marker records size and mtime; later launches trust the markers
instead of re-reading the model.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

from llmpack.builder import pe
from llmpack.builder.fileio import reader
from llmpack.builder.manifest import FORMAT_VERSION, Manifest
from llmpack.errors import LlmpackError

MAGIC = b"LLMPACK1"
TRAILER = struct.Struct("<8sHHIQQQQQII")
MODEL_ALIGN = 64 * 1024        # model.offset: aligned for mmap and page-cache friendliness
SHIFT_ALIGN = 4096             # A' - A: the archive moves by whole pages
MAX_MANIFEST = 16 << 20
SIDECAR_MANIFEST_SUFFIX = ".llmpack.json"
COOKIE_MAGIC = b"MEI\014\013\012\013\016"
COOKIE = struct.Struct("!8sIIII64s")

__all__ = ["COOKIE", "COOKIE_MAGIC", "FORMAT_VERSION", "MAGIC", "MODEL_ALIGN", "SHIFT_ALIGN",
           "SIDECAR_MANIFEST_SUFFIX", "TRAILER", "PackError", "find_embedded_model", "find_trailer",
           "pack_trailer", "read_manifest"]


class PackError(LlmpackError):
    """A built executable or runtime stub that cannot be packed, read or unpacked."""


def pack_trailer(manifest_offset: int, manifest: bytes, model_offset: int, model_len: int,
                 archive_offset: int) -> bytes:
    """The 64-byte trailer (see the layout above); model offset/length are 0 in sidecar mode."""
    body = TRAILER.pack(MAGIC, FORMAT_VERSION, 0, zlib.crc32(manifest), manifest_offset, len(manifest),
                        model_offset, model_len, archive_offset, 0, 0)[:-4]
    trailer = body + struct.pack("<I", zlib.crc32(body))
    assert COOKIE_MAGIC not in trailer  # the bootloader takes the last cookie in the file
    return trailer


def read_manifest(path) -> Manifest:
    """The manifest of a built executable; PackError if it is not one, truncated or corrupted."""
    path = Path(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        found = find_trailer(f, size)
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
        if not (0 < mlen <= MAX_MANIFEST and moff + mlen <= archive_off < pos
                and (model_len == 0 or model_off + model_len <= moff)):
            raise _corrupted(path, "its trailer points outside the file")
        data = reader(f)(moff, mlen)
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
        if find_trailer(f, os.fstat(f.fileno()).st_size) is None:
            return None
    m = read_manifest(path).model
    return (m.offset, m.size) if m.location == "embedded" and m.compression == "none" else None


def find_trailer(f, size: int) -> tuple[int, bytes] | None:
    """(position, raw bytes) of the trailer: at EOF, or just before a PE certificate table."""
    read = reader(f)
    spots = [size - TRAILER.size]
    if read(0, 2) == b"MZ":
        hdr = pe.parse_headers(read)
        if hdr and hdr.cert[0] and sum(hdr.cert) <= size:
            spots.append(hdr.cert[0] - TRAILER.size)
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

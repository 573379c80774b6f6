"""The one PE reader, and the checksum, for splicing bytes in front of PyInstaller's overlay archive.

Used by :mod:`llmpack.builder.splice` to write and by :mod:`llmpack.builder.packfile` to find the
trailer in front of a signature (the byte layout is documented there). On Windows,
PyInstaller appends its archive to the bootloader as an *overlay*: bytes after the raw data of the
last section, which the loader never maps and no header points at. Inserting bytes at the
archive start therefore needs no offset fix-ups; only ``OptionalHeader.CheckSum`` (which covers
the whole file, overlay included) has to be recomputed when it was set. An Authenticode
certificate table also lives in the overlay and signs the old bytes, so a signed stub is refused.

Why in-house rather than pefile (which the tests used to cross-check with, beside a third,
test-only parser): the three fields read here (checksum, certificate table, end of the last
section) are 40 lines of ``struct``; the built program reads them at every start (packfile's
trailer search) and would otherwise bundle pefile into every stub; pefile's checksum wants the
whole file as one buffer and walks it dword by dword in Python, while a build streams gigabytes
and feeds :class:`Checksum` piece by piece with numpy (docs/BENCHMARKS.md, "PE checksum"); and
truncated or odd input must give None, never an exception (tests/test_pe_headers.py). The
checksum is checked against the value Microsoft's linker wrote into PyInstaller's own
bootloader (tests/test_packfile.py).

Errors are :class:`PeError` (a ValueError whose str() is one line for the user); splice.py
turns them into PackError, so this module imports nothing of llmpack's (no import cycle with
packfile.py, which imports it).
"""
from __future__ import annotations

import struct
from typing import Callable, NamedTuple

MAX_FILE_SIZE = 2**32 - 1  # Windows will not start an executable of 4 GiB or more


class Headers(NamedTuple):
    checksum_at: int              # file offset of OptionalHeader.CheckSum
    checksum: int
    cert: tuple[int, int]         # (file offset, size) of the Authenticode certificate table; (0, 0): none
    overlay: int                  # end of the last section's raw data, where the overlay starts
    cert_entry_at: int | None     # file offset of the certificate table's data-directory entry


class PeError(ValueError):
    """A PE stub llmpack cannot pack; str() is one line that says what to do."""


class PeStub:
    """Validated view of a PE stub whose archive starts at `archive_offset`."""

    def __init__(self, read: Callable[[int, int], bytes], size: int, archive_offset: int):
        hdr = parse_headers(read)
        if hdr is None:
            raise PeError("unsupported runtime stub: broken PE headers; rebuild it with `llmpack stub`")
        self.checksum_offset, self.checksum, self.overlay_start = hdr.checksum_at, hdr.checksum, hdr.overlay
        if hdr.cert[0] or hdr.cert[1]:
            raise PeError(
                "the runtime stub is Authenticode-signed; pack the model into an unsigned stub "
                "and sign the finished executable instead"
            )
        if archive_offset < self.overlay_start:
            raise PeError("unsupported runtime stub: its archive is not in the PE overlay; "
                          "rebuild it with `llmpack stub`")


def parse_headers(read: Callable[[int, int], bytes]) -> Headers | None:
    """The :class:`Headers` of a PE file, or None
    when the bytes are not a complete PE header (short, truncated or odd input never raises)."""
    dos = read(0, 64)
    if len(dos) < 64 or dos[:2] != b"MZ":
        return None
    pe = struct.unpack_from("<I", dos, 0x3C)[0]
    coff = read(pe, 24)
    if len(coff) < 24 or coff[:4] != b"PE\0\0":
        return None
    nsections, opt_size = struct.unpack_from("<H", coff, 6)[0], struct.unpack_from("<H", coff, 20)[0]
    opt_at = pe + 24
    opt = read(opt_at, opt_size)
    magic = struct.unpack_from("<H", opt, 0)[0] if len(opt) >= 2 else None
    dirs = {0x10B: 96, 0x20B: 112}.get(magic)   # where the data directories start
    if dirs is None or len(opt) < dirs:
        return None
    ndirs = struct.unpack_from("<I", opt, dirs - 4)[0]
    has_cert = ndirs > 4 and len(opt) >= dirs + 40
    cert = struct.unpack_from("<II", opt, dirs + 8 * 4) if has_cert else (0, 0)
    table = read(opt_at + opt_size, 40 * nsections)
    if len(table) < 40 * nsections:
        return None
    overlay = 0
    for i in range(nsections):
        raw_size, raw_ptr = struct.unpack_from("<II", table, 40 * i + 16)
        if raw_size:
            overlay = max(overlay, raw_ptr + raw_size)
    return Headers(opt_at + 64, struct.unpack_from("<I", opt, 64)[0], cert, overlay,
                   opt_at + dirs + 8 * 4 if has_cert else None)


class Checksum:
    """The PE image checksum (as computed by imagehlp's CheckSumMappedFile), fed in any order.

    The checksum is the end-around-carry sum of all little-endian 16-bit words of the file with
    the CheckSum field taken as zero, folded to 16 bits, plus the file length. Since 2**16 == 1
    (mod 0xFFFF), that sum is congruent to the bytes read as one big little-endian number, so a
    piece at offset `o` contributes value(piece) * (256 if o is odd else 1) mod 0xFFFF.
    """

    def __init__(self) -> None:
        self._acc = 0
        self._nonzero = False

    def add(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        data = memoryview(data).cast("B")
        if not len(data):
            return
        import numpy as np   # lazy: only a Windows build sums; a built program reading its manifest never needs numpy

        even = len(data) & ~1
        value = int(np.frombuffer(data[:even], dtype="<u2").sum(dtype=np.uint64))
        if even != len(data):
            value += data[-1]
        if value:
            self._nonzero = True
        self._acc = (self._acc + (value % 0xFFFF) * (256 if offset & 1 else 1)) % 0xFFFF

    def value(self, file_size: int) -> int:
        folded = (self._acc or 0xFFFF) if self._nonzero else 0
        return (folded + file_size) & 0xFFFFFFFF

"""Windows PE reader and checksum for splicing bytes in front of PyInstaller's overlay archive.

Used by :mod:`llmpack.builder.splice` to write and by :mod:`llmpack.builder.packfile` to find the
trailer in front of a signature (the byte layout is documented there). On Windows,
PyInstaller appends its archive to the bootloader as an *overlay*: bytes after the raw data of the
last section, which the loader never maps and no header points at. Inserting bytes at the
archive start therefore needs no offset fix-ups; only ``OptionalHeader.CheckSum`` (which covers
the whole file, overlay included) has to be recomputed when it was set. An Authenticode
certificate table also lives in the overlay and signs the old bytes, so a signed stub is refused.
"""
from __future__ import annotations

import struct
from typing import Callable

MAX_FILE_SIZE = 2**32 - 1  # Windows will not start an executable of 4 GiB or more


class PeStub:
    """Validated view of a PE stub whose archive starts at `archive_offset`."""

    def __init__(self, read: Callable[[int, int], bytes], size: int, archive_offset: int):
        from llmpack.builder.packfile import PackError

        hdr = parse_headers(read)
        if hdr is None:
            raise PackError("unsupported runtime stub: broken PE headers; rebuild it with `llmpack stub`")
        self.checksum_offset, self.checksum, cert, self.overlay_start = hdr
        if cert[0] or cert[1]:
            raise PackError(
                "the runtime stub is Authenticode-signed; pack the model into an unsigned stub "
                "and sign the finished executable instead"
            )
        if archive_offset < self.overlay_start:
            raise PackError("unsupported runtime stub: its archive is not in the PE overlay; "
                            "rebuild it with `llmpack stub`")


def parse_headers(read: Callable[[int, int], bytes]):
    """-> (checksum field offset, checksum, (cert offset, cert size), overlay start), or None
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
    cert = struct.unpack_from("<II", opt, dirs + 8 * 4) if ndirs > 4 and len(opt) >= dirs + 40 else (0, 0)
    table = read(opt_at + opt_size, 40 * nsections)
    if len(table) < 40 * nsections:
        return None
    overlay = 0
    for i in range(nsections):
        raw_size, raw_ptr = struct.unpack_from("<II", table, 40 * i + 16)
        if raw_size:
            overlay = max(overlay, raw_ptr + raw_size)
    return opt_at + 64, struct.unpack_from("<I", opt, 64)[0], cert, overlay


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
        import numpy as np   # a dependency; imported here so reading a manifest never needs it

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

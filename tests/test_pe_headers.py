"""pe.parse_headers on short, truncated and odd input: None (callers turn that into one clear
line), never a struct.error traceback. builder/pe.py is the one PE reader (see its docstring)."""
from __future__ import annotations

import struct

import pytest

from llmpack.builder import pe, splice
from llmpack.builder.packfile import COOKIE, COOKIE_MAGIC, PackError


def minimal_pe(magic: int = 0x20B, nsections: int = 2) -> bytes:
    """A structurally complete PE header: DOS stub, COFF header, optional header, section table."""
    dos = bytearray(64)
    dos[:2] = b"MZ"
    struct.pack_into("<I", dos, 0x3C, 64)
    opt_size = 240 if magic == 0x20B else 224
    coff = bytearray(24)
    coff[:4] = b"PE\0\0"
    struct.pack_into("<HH", coff, 4, 0x8664, nsections)
    struct.pack_into("<H", coff, 20, opt_size)
    opt = bytearray(opt_size)
    struct.pack_into("<H", opt, 0, magic)
    struct.pack_into("<I", opt, 64, 0x1234)                               # CheckSum
    dirs = 112 if magic == 0x20B else 96
    struct.pack_into("<I", opt, dirs - 4, 16)                             # NumberOfRvaAndSizes
    table = bytearray(40 * nsections)
    for i in range(nsections):
        struct.pack_into("<II", table, 40 * i + 16, 0x200, 0x400 + 0x200 * i)   # raw size, raw pointer
    return bytes(dos + coff + opt + table)


def reader(data: bytes):
    return lambda offset, n: data[offset:offset + n]


@pytest.mark.parametrize("magic", [0x10B, 0x20B])
def test_a_complete_header_parses(magic):
    data = minimal_pe(magic)
    hdr = pe.parse_headers(reader(data))
    assert hdr.checksum == 0x1234 and data[hdr.checksum_at:hdr.checksum_at + 4] == struct.pack("<I", 0x1234)
    assert hdr.cert == (0, 0) and hdr.overlay == 0x400 + 0x200 + 0x200
    dirs = 64 + 24 + (112 if magic == 0x20B else 96)
    assert hdr.cert_entry_at == dirs + 8 * 4   # the fifth data directory: the certificate table


@pytest.mark.parametrize("magic", [0x10B, 0x20B])
def test_every_truncation_is_refused_without_an_exception(magic):
    data = minimal_pe(magic)
    for n in range(len(data)):
        assert pe.parse_headers(reader(data[:n])) is None, f"{n} bytes"


@pytest.mark.parametrize("odd", [
    b"", b"M", b"MZ", b"MZ" + b"\xff" * 62,                                   # e_lfanew far past the end
    minimal_pe()[:64] + b"PE\0\0" + b"\xff" * 20,                              # 65535 sections, no table
    minimal_pe(magic=0x1234),                                                 # neither PE32 nor PE32+
])
def test_odd_input_is_refused_without_an_exception(odd):
    assert pe.parse_headers(reader(odd)) is None


def test_a_broken_stub_gets_one_clear_line(tmp_path):
    data = minimal_pe()[:200]
    with pytest.raises(pe.PeError) as err:
        pe.PeStub(reader(data), len(data), archive_offset=100)
    assert "broken PE headers" in str(err.value) and "\n" not in str(err.value)
    cookie = COOKIE.pack(COOKIE_MAGIC, COOKIE.size, 0, 0, 311, b"python311.dll")   # an empty archive
    (tmp_path / "stub.exe").write_bytes(data + cookie)
    with pytest.raises(PackError, match="broken PE headers"):   # what a build reports
        splice.open_stub(tmp_path / "stub.exe")

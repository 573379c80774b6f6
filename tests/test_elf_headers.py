"""builder/elf.py, the one ELF reader, on real and on truncated files: DT_NEEDED and section names
as binutils reports them, and ElfError (one line) rather than a struct.error traceback."""
from __future__ import annotations

import subprocess
from pathlib import Path

import PyInstaller
import pytest

from llmpack.builder import elf

BOOTLOADER = Path(PyInstaller.__file__).parent / "bootloader" / "Linux-64bit-intel" / "run"


@pytest.mark.needs("readelf")   # binutils' readelf is the independent check here
def test_section_names_match_readelf():
    out = subprocess.run(["readelf", "-S", "-W", str(BOOTLOADER)], capture_output=True, text=True, check=True).stdout
    listed = {line.replace("[ ", "[").split()[1] for line in out.splitlines()
              if line.strip().startswith("[") and "]" in line and "Nr]" not in line and line.split("]")[1].split()}
    assert listed - {"NULL"} <= set(elf.section_names(BOOTLOADER)) and ".dynamic" in listed


@pytest.mark.needs("readelf")   # binutils' readelf is the independent check here
def test_needed_matches_readelf():
    out = subprocess.run(["readelf", "-d", str(BOOTLOADER)], capture_output=True, text=True, check=True).stdout
    expected = [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    assert expected and elf.needed(BOOTLOADER) == expected


def test_every_truncation_is_refused_without_a_traceback(tmp_path):
    data = BOOTLOADER.read_bytes()
    shoff = int.from_bytes(data[0x28:0x30], "little")
    cut = tmp_path / "cut"
    for n in [*range(0, 80, 7), 120, 4096, shoff, shoff + 1, shoff + 64 * 3 + 5]:
        cut.write_bytes(data[:n])
        assert isinstance(elf.section_names(cut), dict)
        read = (lambda d: lambda offset, k: d[offset:offset + k])(data[:n])
        try:
            elf.ElfStub(read, n, archive_offset=max(n - 8, 0), archive_length=8)
        except elf.ElfError as exc:
            assert "\n" not in str(exc) and "llmpack stub" in str(exc)
        try:
            elf.needed(cut)
        except elf.ElfError as exc:
            assert "\n" not in str(exc)


def test_headers_pointing_past_the_end_are_refused_in_one_line():
    data = bytearray(BOOTLOADER.read_bytes()[:4096])
    data[0x20:0x28] = (len(data) - 8).to_bytes(8, "little")      # e_phoff: the last 8 bytes
    data[0x28:0x30] = bytes(8)                                    # no section headers
    with pytest.raises(elf.ElfError, match="truncated program header table"):
        elf.ElfStub(lambda offset, k: bytes(data[offset:offset + k]), len(data), archive_offset=4000,
                    archive_length=96)

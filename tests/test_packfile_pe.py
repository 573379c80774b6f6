"""Spec for llmpack.builder.packfile on Windows: a model spliced into PyInstaller's real Windows
bootloader (``pe_stub``, tests/helpers/stubs.py) keeps its headers, sections, overlay and PE
checksum, starts under Wine (Debian ``wine64``, the closest we get to Windows here), and what a
Windows program may not be (over 4 GiB, an already signed stub) is refused before writing.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from llmpack.builder import extract, packfile, splice
from llmpack.builder.packfile import PackError
from PyInstaller.archive.readers import CArchiveReader
import needs
from helpers.stubs import *  # noqa: F401,F403 - the stubs and the model: fixtures
from helpers.stubs import COOKIE_MAGIC, EXTRA, MiB, assets_dir, pe_checksum, pe_fields


def test_pe_checksum_matches_the_one_microsoft_s_linker_wrote(windows_run_exe):
    """The independent check of pe.Checksum: PyInstaller's Windows bootloader as shipped carries
    the checksum its MSVC linker computed."""
    assert pe_fields(windows_run_exe).checksum != 0
    assert pe_checksum(windows_run_exe) == pe_fields(windows_run_exe).checksum


# --------------------------------------------------------------------------- Windows PE


def test_pe_splice_keeps_headers_sections_overlay_and_checksum(pe_stub, model, tmp_path, win_archive):
    out = tmp_path / "app.exe"
    manifest = splice.write_packed(pe_stub, model, out, EXTRA)
    stub, data = pe_stub.read_bytes(), out.read_bytes()
    before, after = pe_fields(stub), pe_fields(data)
    assert before.checksum != 0
    assert after.overlay == before.overlay
    at, ov = before.checksum_at, before.overlay
    assert data[:at] + data[at + 4:ov] == stub[:at] + stub[at + 4:ov]  # headers and sections: only the checksum changed
    # the overlay is now: padding, model, manifest, the archive ending with its cookie, trailer
    assert manifest.model.offset >= after.overlay and manifest.model.offset % 65536 == 0
    alen = win_archive.stat().st_size
    assert data[manifest.archive_offset:manifest.archive_offset + alen] == win_archive.read_bytes()
    assert data[manifest.archive_offset + alen - 88:][:8] == COOKIE_MAGIC
    assert CArchiveReader(str(out))._start_offset == manifest.archive_offset
    assert after.checksum == pe_checksum(data) != before.checksum   # summed in pieces == in one
    assert packfile.read_manifest(out).to_dict() == manifest.to_dict()
    assert extract.extract_model(out, manifest, tmp_path / "m").read_bytes() == model.read_bytes()


@needs.fixture("wine", scope="session")
def wine() -> tuple[str, dict[str, str]]:
    """(wine command, environment): a Wine prefix kept with the test assets (made on first use,
    ~15 s), no debug chatter, no display."""
    exe = shutil.which("wine")
    env = {**os.environ, "WINEPREFIX": str(assets_dir() / "wine-prefix"), "WINEDEBUG": "-all", "DISPLAY": ""}
    return exe, env


def _run_under_wine(wine, exe: Path) -> str:
    cmd, env = wine
    proc = subprocess.run([cmd, str(exe)], capture_output=True, text=True, timeout=300, env=env, cwd=exe.parent)
    return proc.stdout + proc.stderr


def test_a_spliced_pe_starts_under_wine(pe_stub, model, tmp_path, wine):
    """Wine's loader maps the spliced file and PyInstaller's Windows bootloader finds its archive
    behind the model, unpacks it and gets as far as loading the Python DLL (which this test
    archive does not hold). A file whose archive cannot be found fails earlier, differently:
    the truncated copy at the end shows the message the first run must not print."""
    out = tmp_path / "app.exe"
    splice.write_packed(pe_stub, model, out, EXTRA)
    output = _run_under_wine(wine, out)
    assert "Failed to load Python DLL" in output and "python311.dll" in output, output
    assert "PKG archive" not in output and "cookie" not in output, output

    broken = tmp_path / "broken.exe"
    broken.write_bytes(out.read_bytes()[:-200])   # the archive's cookie is cut off
    output = _run_under_wine(wine, broken)
    assert "Could not load PyInstaller's embedded PKG archive" in output, output


def test_pe_checksum_left_zero_when_the_stub_had_none(pe_stub, model, tmp_path):
    stub = bytearray(pe_stub.read_bytes())
    at = pe_fields(bytes(stub)).checksum_at
    stub[at:at + 4] = bytes(4)
    (tmp_path / "nosum.exe").write_bytes(bytes(stub))
    splice.write_packed(tmp_path / "nosum.exe", model, tmp_path / "app.exe", {})
    assert pe_fields((tmp_path / "app.exe").read_bytes()).checksum == 0


def test_pe_checksum_matches_with_zstd_and_odd_sizes(pe_stub, tmp_path):
    odd = tmp_path / "odd.gguf"
    odd.write_bytes(b"GGUF" + b"abc" * 400_001)  # odd length, compressible
    out = tmp_path / "app.exe"
    m = splice.write_packed(pe_stub, odd, out, {"defaults": {"name": "\u00e9t\u00e9"}}, compress="zstd")
    data = out.read_bytes()
    assert m.model.compression == "zstd"
    assert pe_fields(data).checksum == pe_checksum(data)


def test_pe_over_4_gib_is_refused_before_writing(pe_stub, tmp_path, monkeypatch):
    huge = tmp_path / "huge.gguf"
    with open(huge, "wb") as f:
        f.truncate(4 * 1024**3 + MiB)  # sparse: nothing is really written
    monkeypatch.setattr(splice, "_splice", lambda *a, **k: pytest.fail("started writing"))
    with pytest.raises(PackError, match="--sidecar"):
        splice.write_packed(pe_stub, huge, tmp_path / "app.exe", {}, compress="none")
    assert not list(tmp_path.glob("*app.exe*"))


def test_signed_pe_stub_is_refused_but_a_signed_result_is_readable(pe_stub, model, tmp_path):
    stub = bytearray(pe_stub.read_bytes())
    sec = pe_fields(bytes(stub)).cert_entry_at
    signed = stub + bytes(-len(stub) % 8) + b"\x10\x00\x00\x00\x00\x02\x02\x00" + bytes(8)
    struct.pack_into("<II", signed, sec, len(signed) - 16, 16)
    (tmp_path / "signed.exe").write_bytes(bytes(signed))
    with pytest.raises(PackError, match="signed"):
        splice.write_packed(tmp_path / "signed.exe", model, tmp_path / "x.exe", {})

    out = tmp_path / "app.exe"  # signing the finished program appends a certificate after the trailer
    manifest = splice.write_packed(pe_stub, model, out, EXTRA)
    data = bytearray(out.read_bytes())
    cert_at = len(data)
    assert cert_at % 8 == 0
    data += b"\x20\x00\x00\x00\x00\x02\x02\x00" + os.urandom(24)
    struct.pack_into("<II", data, sec, cert_at, 32)
    out.write_bytes(bytes(data))
    assert packfile.read_manifest(out).model == manifest.model


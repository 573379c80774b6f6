"""Spec for llmpack.builder.packfile: the byte layout of a built executable.

[stub image][pad to 64 KiB][MODEL][pad][manifest JSON][PyInstaller archive][stub tail][64-byte trailer]

The PyInstaller bootloader finds its archive by scanning back from the end of the file for the
cookie, so the model goes *before* the archive (never scanned, never re-extracted) and the file
must stay a valid ELF / PE. Here: the ELF layout, a real onefile program spliced, what is refused,
damage, zstd and the sidecar. The Windows PE layout is tests/test_packfile_pe.py, the extraction
cache tests/test_model_extraction.py; the stubs are tests/helpers/stubs.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from llmpack.builder import extract, packfile, splice, zstd_frames
from llmpack.builder.packfile import PackError
from PyInstaller.archive.readers import CArchiveReader
from helpers.stubs import *  # noqa: F401,F403 - the stubs and the model: fixtures
from helpers.stubs import COOKIE_MAGIC, EXTRA, MiB, readelf_sections, run_json


# --------------------------------------------------------------------------- ELF


def test_elf_layout_keeps_the_file_valid_and_the_archive_intact(elf_stub, model, tmp_path, archive):
    out = tmp_path / "app"
    manifest = splice.write_packed(elf_stub, model, out, EXTRA)
    data, stub = out.read_bytes(), elf_stub.read_bytes()
    m = manifest.model

    assert m.offset % (64 * 1024) == 0 and data[m.offset:m.offset + m.size] == model.read_bytes()
    assert m.offset + m.stored_size <= manifest.manifest_offset < manifest.archive_offset
    # readelf still lists pydata, now at the archive's new offset, same size; segments unchanged
    before, after = readelf_sections(elf_stub), readelf_sections(out)
    assert after["pydata"] == (manifest.archive_offset, archive.stat().st_size)
    a = before["pydata"][0]
    assert {k: v for k, v in after.items() if v[0] < a} == {k: v for k, v in before.items() if v[0] < a}
    delta = manifest.archive_offset - a
    assert after[".shstrtab"] == (before[".shstrtab"][0] + delta, before[".shstrtab"][1])
    def phdrs(p: Path) -> str:
        return subprocess.run(["readelf", "-l", "-W", str(p)], capture_output=True, text=True, check=True).stdout

    assert phdrs(out) == phdrs(elf_stub)
    assert data[manifest.archive_offset:][:archive.stat().st_size] == archive.read_bytes()
    # PyInstaller's own reader (the same back-to-front cookie scan) finds the moved archive
    reader = CArchiveReader(str(out))
    assert reader._start_offset == manifest.archive_offset
    assert reader.extract("data/hello.txt") == b"hello from the archive\n" * 100
    assert reader.options == ["pyi-llmpack-test-option"]
    # the head of the file is the stub's, apart from e_shoff (bytes 0x28..0x30)
    assert data[:0x28] == stub[:0x28] and data[0x30:a] == stub[0x30:a]
    assert data[0x28:0x30] != stub[0x28:0x30]
    assert packfile.read_manifest(out).to_dict() == manifest.to_dict()


def test_manifest_records_what_the_runtime_needs(elf_stub, model, tmp_path):
    out = tmp_path / "app"
    splice.write_packed(elf_stub, model, out, {**EXTRA, "homepage": "https://example.org"})
    d = packfile.read_manifest(out).to_dict()
    assert d["format_version"] == 1
    assert d["model"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert d["model"]["size"] == d["model"]["stored_size"] == model.stat().st_size
    assert d["model"]["compression"] == "none" and d["model"]["location"] == "embedded"
    assert d["recipe"] == EXTRA["recipe"] and d["defaults"] == EXTRA["defaults"]
    assert d["llama_cpp_version"] == "0.3.36" and d["llmpack_version"]
    assert d["built_at"].endswith("Z")
    assert d["stub_sha256"] == hashlib.sha256(elf_stub.read_bytes()).hexdigest()
    assert d["homepage"] == "https://example.org"  # unknown manifest_extra keys are kept


def test_trailer_is_the_last_64_bytes(elf_stub, model, tmp_path):
    out = tmp_path / "app"
    manifest = splice.write_packed(elf_stub, model, out, EXTRA)
    data = out.read_bytes()
    assert len(data) % 8 == 0 and data[-64:-56] == b"LLMPACK1"
    magic, version, _, _, moff, mlen, model_off, model_len, arch, _, _ = packfile.TRAILER.unpack(data[-64:])
    assert (version, moff, model_off, model_len, arch) == (
        1, manifest.manifest_offset, manifest.model.offset, manifest.model.stored_size, manifest.archive_offset)
    assert json.loads(data[moff:moff + mlen])["model"]["offset"] == model_off
    assert data.rfind(COOKIE_MAGIC) < len(data) - 64  # the bootloader's backward scan still hits the cookie


# --------------------------------------------------------------------------- real onefile program


@pytest.mark.stub
def test_real_onefile_program_runs_after_splicing(onefile_exe, model, tmp_path):
    out = tmp_path / "app"
    manifest = splice.write_packed(onefile_exe, model, out, EXTRA)
    assert "pydata" in readelf_sections(out)
    result = run_json(out, "hello", "--flag")
    assert result["argv"] == ["hello", "--flag"]
    assert result["sha256"] == manifest.model.sha256 and result["defaults"] == EXTRA["defaults"]
    # where the bootloader actually found its archive: after the model, where the trailer says
    assert Path(result["pyz_file"]).resolve() == out.resolve()
    assert result["pyz_offset"] > manifest.archive_offset >= manifest.model.offset + manifest.model.stored_size
    # the unspliced program has no trailer and says so in one line
    assert "not an llmpack executable" in run_json(onefile_exe)["error"]


@pytest.mark.stub
def test_real_onefile_extracts_once_even_zstd(onefile_exe, model, tmp_path):
    out = tmp_path / "app"
    splice.write_packed(onefile_exe, model, out, EXTRA, compress="zstd")
    models = tmp_path / "models"
    result = run_json(out, "--extract", str(models))
    assert Path(result["extracted"]).read_bytes() == model.read_bytes()
    assert Path(result["extracted"] + ".ok").is_file()
    mtime = Path(result["extracted"]).stat().st_mtime_ns
    assert run_json(out, "--extract", str(models))["extracted"] == result["extracted"]
    assert Path(result["extracted"]).stat().st_mtime_ns == mtime


@pytest.mark.stub
def test_what_the_bootloader_scans_does_not_grow_with_the_model(onefile_exe, tmp_path):
    """The bootloader searches backwards from the end for its cookie: with the model placed
    before the archive, the bytes it has to scan are the same for a 1 MB and a 256 MB model
    (appended after the archive, 256 MB cost ~5 s per launch; see benchmarks/build_launch.py)."""
    def scanned_bytes(model_size: int) -> int:
        model = tmp_path / f"m{model_size}.gguf"
        with open(model, "wb") as f:
            f.write(b"GGUF")
            f.truncate(model_size)   # sparse
        out = tmp_path / f"app{model_size}"
        splice.write_packed(onefile_exe, model, out, {}, compress="none")
        data = out.read_bytes()
        cookie = data.rfind(packfile.COOKIE_MAGIC)
        assert cookie > packfile.read_manifest(out).model.offset + model_size
        return len(data) - cookie

    assert scanned_bytes(1 * MiB) == scanned_bytes(256 * MiB) < 64 * 1024
    assert run_json(tmp_path / f"app{256 * MiB}")["argv"] == []   # and it still runs



# --------------------------------------------------------------------------- refusals


def test_macho_is_refused_with_a_pointer_to_sidecar(model, tmp_path):
    macho = tmp_path / "stub"
    macho.write_bytes(b"\xcf\xfa\xed\xfe" + os.urandom(4096))
    with pytest.raises(PackError, match="macOS.*--sidecar"):
        splice.write_packed(macho, model, tmp_path / "app", {})


@pytest.mark.parametrize("content", [b"just some text\n" * 100, b"\x7fELF" + bytes(4000), b"MZ" + bytes(4000)])
def test_unknown_or_broken_files_are_refused(content, model, tmp_path):
    bad = tmp_path / "stub"
    bad.write_bytes(content)
    with pytest.raises(PackError):
        splice.write_packed(bad, model, tmp_path / "app", {})
    assert not (tmp_path / "app").exists()


def test_a_plain_executable_without_archive_is_refused(model, tmp_path):
    shutil.copyfile(shutil.which("true"), tmp_path / "x")
    with pytest.raises(PackError, match="PyInstaller onefile"):
        splice.write_packed(tmp_path / "x", model, tmp_path / "app", {})


def test_a_packed_file_is_not_packed_again(elf_stub, model, tmp_path):
    splice.write_packed(elf_stub, model, tmp_path / "app", {})
    with pytest.raises(PackError, match="already contains"):
        splice.write_packed(tmp_path / "app", model, tmp_path / "app2", {})



# --------------------------------------------------------------------------- damage



def test_corrupted_model_is_detected_and_leaves_nothing(packed, tmp_path):
    out, manifest = packed
    data = bytearray(out.read_bytes())
    data[manifest.model.offset + 1_000_000] ^= 0xFF
    out.write_bytes(bytes(data))
    dest = tmp_path / "models"
    with pytest.raises(PackError, match="corrupted \\(sha256 mismatch\\)"):
        extract.extract_model(out, packfile.read_manifest(out), dest)
    assert list(dest.iterdir()) == []


def test_truncated_file_is_detected(packed):
    out, _ = packed
    data = out.read_bytes()
    for cut in (1, 64, 5000):
        out.write_bytes(data[:-cut])
        with pytest.raises(PackError, match="incomplete"):
            packfile.read_manifest(out)
    out.write_bytes(data[:40])
    with pytest.raises(PackError):
        packfile.read_manifest(out)


def test_wrong_magic_and_damaged_trailer_or_manifest(packed):
    out, manifest = packed
    good = out.read_bytes()
    cases = {len(good) - 64: "not an llmpack executable",             # magic
             len(good) - 40: "corrupted",                             # offsets (trailer crc)
             manifest.manifest_offset + 10: "corrupted"}              # manifest (crc32)
    for at, message in cases.items():
        bad = bytearray(good)
        bad[at] ^= 0x55
        out.write_bytes(bytes(bad))
        with pytest.raises(PackError, match=message):
            packfile.read_manifest(out)
    # a consistent-looking trailer pointing outside the file
    bad = bytearray(good)
    struct.pack_into("<Q", bad, len(bad) - 64 + 16, len(bad) * 2)
    struct.pack_into("<I", bad, len(bad) - 4, zlib.crc32(bytes(bad[-64:-4])))
    out.write_bytes(bytes(bad))
    with pytest.raises(PackError, match="outside the file"):
        packfile.read_manifest(out)


def test_find_embedded_model(packed, model, tmp_path, elf_stub):
    out, manifest = packed
    offset, length = packfile.find_embedded_model(out)
    with open(out, "rb") as f:
        f.seek(offset)
        assert f.read(length) == model.read_bytes()
    assert packfile.find_embedded_model(model) is None  # a plain GGUF
    splice.write_packed(elf_stub, model, tmp_path / "z", {}, compress="zstd")
    assert packfile.find_embedded_model(tmp_path / "z") is None  # compressed: not usable in place



# --------------------------------------------------------------------------- zstd


def test_zstd_round_trip_with_independent_frames(elf_stub, tmp_path, monkeypatch):
    import zstandard

    monkeypatch.setattr(zstd_frames, "FRAME_SIZE", 1 * MiB)
    raw = (b"GGUF" + b"token embedding row " * 300_000)[:5 * MiB + 777]
    src = tmp_path / "m.gguf"
    src.write_bytes(raw)
    out = tmp_path / "app"
    m = splice.write_packed(elf_stub, src, out, EXTRA, compress="zstd").model
    assert m.compression == "zstd" and len(m.frames) == 6 and m.stored_size < m.size // 5
    assert packfile.read_manifest(out).model == m
    data = out.read_bytes()
    for k, (off, stored, rawlen) in enumerate(m.frames):  # each frame decompresses on its own
        frame = data[m.offset + off:m.offset + off + stored]
        assert zstandard.ZstdDecompressor().decompress(frame) == raw[k * MiB:k * MiB + rawlen]
    assert extract.extract_model(out, packfile.read_manifest(out), tmp_path / "x").read_bytes() == raw


@pytest.mark.parametrize("where", ["payload", "frame header"])
def test_zstd_damage_is_reported(elf_stub, tmp_path, where):
    src = tmp_path / "m.gguf"
    src.write_bytes(b"GGUF" + os.urandom(1000) * 4000)
    out = tmp_path / "app"
    m = splice.write_packed(elf_stub, src, out, {}, compress="zstd").model
    data = bytearray(out.read_bytes())
    data[m.offset + (m.stored_size // 2 if where == "payload" else 6)] ^= 0x40  # 6: content size
    out.write_bytes(bytes(data))
    with pytest.raises(PackError, match="corrupted"):
        extract.extract_model(out, packfile.read_manifest(out), tmp_path / "x")
    assert list((tmp_path / "x").iterdir()) == []


def test_auto_compression_only_when_it_pays(elf_stub, model, tmp_path):
    assert splice.write_packed(elf_stub, model, tmp_path / "a", {}, compress="auto").model.compression == "none"
    text = tmp_path / "text.gguf"
    text.write_bytes(b"GGUF" + b"the same words again and again " * 200_000)
    assert splice.write_packed(elf_stub, text, tmp_path / "b", {}, compress="auto").model.compression == "zstd"


# --------------------------------------------------------------------------- sidecar


def test_sidecar_keeps_the_model_beside_the_program(elf_stub, model, tmp_path):
    out = tmp_path / "dist" / "chat"
    out.parent.mkdir()
    manifest = splice.write_sidecar(elf_stub, model, out, EXTRA)
    side = tmp_path / "dist" / "chat.gguf"
    assert side.read_bytes() == model.read_bytes()
    assert manifest.model.location == "sidecar" and manifest.model.file == "chat.gguf"
    assert out.stat().st_size < elf_stub.stat().st_size + 64 * 1024
    assert "pydata" in readelf_sections(out) and CArchiveReader(str(out))._start_offset == manifest.archive_offset
    assert packfile.read_manifest(out).to_dict() == manifest.to_dict()
    assert packfile.find_embedded_model(out) is None
    calls = []
    assert extract.extract_model(out, manifest, tmp_path / "m", progress=lambda d, t: calls.append(d)) == side
    assert calls  # verified once
    calls.clear()
    assert extract.extract_model(out, manifest, tmp_path / "m", progress=lambda d, t: calls.append(d)) == side
    assert calls == []  # and then trusted
    side.unlink()
    with pytest.raises(PackError, match="missing"):
        extract.extract_model(out, manifest, tmp_path / "m")
    assert splice.sidecar_name("Chat.EXE") == "Chat.gguf" and splice.sidecar_name("qwen2.5-x") == "qwen2.5-x.gguf"


def test_sidecar_on_macos_leaves_the_stub_untouched(model, tmp_path):
    macho = tmp_path / "stub"
    macho.write_bytes(b"\xcf\xfa\xed\xfe" + os.urandom(4096))
    out = tmp_path / "chat"
    manifest = splice.write_sidecar(macho, model, out, EXTRA)
    assert out.read_bytes() == macho.read_bytes()
    assert packfile.read_manifest(out).model == manifest.model
    assert extract.extract_model(out, manifest, tmp_path / "m") == tmp_path / "chat.gguf"

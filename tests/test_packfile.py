"""Spec for llmpack.builder.packfile: the byte layout of a built executable.

[stub image][pad to 64 KiB][MODEL][pad][manifest JSON][PyInstaller archive][stub tail][64-byte trailer]

The PyInstaller bootloader finds its archive by scanning back from the end of the file for the
cookie, so the model goes *before* the archive (never scanned, never re-extracted) and the file
must stay a valid ELF / PE. Stubs used here:

* ``elf_stub``: PyInstaller's real Linux bootloader + a real CArchive added with
  ``objcopy --add-section pydata=...``, exactly how PyInstaller assembles onefile on Linux (fast).
* ``pe_stub``: PyInstaller's real Windows bootloader (run.exe from the win_amd64 wheel, fetched
  once by ``./dev setup``) with a CArchive appended as overlay and the PE checksum set, as
  PyInstaller does on Windows. Spliced, it runs under Wine (Debian ``wine64``), the closest we
  get to Windows here.
* ``onefile_exe`` (marked ``stub``): a real ``pyinstaller --onefile`` program that reads its
  own manifest, built once per PyInstaller version and source hash, cached under the user cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import platformdirs
import PyInstaller
import pytest
from llmpack.builder import extract, packfile, pe, splice, zstd_frames
from llmpack.builder.manifest import Manifest
from llmpack.builder.packfile import PackError
from PyInstaller.archive.readers import CArchiveReader
from PyInstaller.archive.writers import CArchiveWriter
from tmpfs import on_small_tmpfs
from needs import skip_or_fail

REPO = Path(__file__).resolve().parents[1]
COOKIE_MAGIC = b"MEI\014\013\012\013\016"
MiB = 1024 * 1024


# --------------------------------------------------------------------------- fixtures


def _assets() -> Path:
    """Cache for slow-to-make test inputs; deliberately not LLMPACK_CACHE (tests redirect that)."""
    root = os.environ.get("LLMPACK_TEST_ASSETS") or \
        Path(platformdirs.user_cache_dir("llmpack", appauthor=False)) / "test-assets"
    Path(root).mkdir(parents=True, exist_ok=True)
    return Path(root)


def _make_archive(path: Path, tmp: Path, pylib: str, data_name: str) -> Path:
    """A genuine PyInstaller CArchive (PKG) with compressed and raw entries and an option."""
    (tmp / "hello.txt").write_bytes(b"hello from the archive\n" * 100)
    (tmp / "blob.bin").write_bytes(os.urandom(50_000))
    entries = [("pyi-llmpack-test-option", "", False, "o"),
               (data_name, str(tmp / "hello.txt"), True, "x"),
               ("blob.bin", str(tmp / "blob.bin"), False, "b")]
    CArchiveWriter(str(path), entries, pylib)
    return path


@pytest.fixture(scope="session")
def archive(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("archive")
    return _make_archive(tmp / "archive.pkg", tmp, "libpython3.11.so.1.0", "data/hello.txt")


@pytest.fixture(scope="session")
def win_archive(tmp_path_factory) -> Path:
    """As a Windows build names things: the Python DLL, and (here) no sub-folder."""
    tmp = tmp_path_factory.mktemp("win-archive")
    return _make_archive(tmp / "archive.pkg", tmp, "python311.dll", "hello.txt")


@pytest.fixture(scope="session")
def elf_stub(tmp_path_factory, archive) -> Path:
    bootloader = Path(PyInstaller.__file__).parent / "bootloader" / "Linux-64bit-intel" / "run"
    out = tmp_path_factory.mktemp("elf") / "stub"
    shutil.copyfile(bootloader, out)
    subprocess.run(["objcopy", "--add-section", f"pydata={archive}", str(out)], check=True)
    return out


@pytest.fixture(scope="session")
def windows_run_exe() -> bytes:
    """PyInstaller's Windows bootloader (run.exe from the win_amd64 wheel of the installed
    version), fetched once by `./dev setup` into the test-asset cache."""
    cached = _assets() / f"pyinstaller-{PyInstaller.__version__}-win_amd64-run.exe"
    if not cached.is_file():
        pytest.fail(f"{cached} is missing: run ./dev setup (it fetches PyInstaller's Windows bootloader once)")
    return cached.read_bytes()


def _pe(data: bytes) -> pe.Headers:
    """The PE fields the checks below compare, read by builder/pe.py, the one PE reader."""
    hdr = pe.parse_headers(lambda offset, n: data[offset:offset + n])
    assert hdr is not None
    return hdr


def _pe_checksum(data: bytes) -> int:
    """builder/pe.py's checksum of a whole file in one piece (the CheckSum field counted as zero)."""
    at = _pe(data).checksum_at
    total = pe.Checksum()
    total.add(0, data[:at])
    total.add(at + 4, data[at + 4:])
    return total.value(len(data))


def test_pe_checksum_matches_the_one_microsoft_s_linker_wrote(windows_run_exe):
    """The independent check of pe.Checksum: PyInstaller's Windows bootloader as shipped carries
    the checksum its MSVC linker computed."""
    assert _pe(windows_run_exe).checksum != 0
    assert _pe_checksum(windows_run_exe) == _pe(windows_run_exe).checksum


@pytest.fixture(scope="session")
def pe_stub(tmp_path_factory, windows_run_exe, win_archive) -> Path:
    data = bytearray(windows_run_exe + win_archive.read_bytes())  # PyInstaller appends the PKG as overlay
    at = _pe(bytes(data)).checksum_at
    data[at:at + 4] = struct.pack("<I", _pe_checksum(bytes(data)))
    out = tmp_path_factory.mktemp("pe") / "stub.exe"
    out.write_bytes(bytes(data))
    return out


HELLO = r'''
import json, sys
import zstandard  # noqa: F401  (bundled so zstd extraction works frozen)
from llmpack.builder import extract, packfile
out = {"argv": sys.argv[1:]}
pyz = getattr(sys.modules.get("pyimod02_importers"), "pyz_archive", None)  # where the bootloader found the PYZ
out["pyz_file"], out["pyz_offset"] = getattr(pyz, "_filename", None), getattr(pyz, "_start_offset", None)
try:
    m = packfile.read_manifest(sys.executable)
    out["sha256"], out["archive_offset"], out["defaults"] = m.model.sha256, m.archive_offset, m.defaults
    if "--extract" in sys.argv:
        dest = sys.argv[sys.argv.index("--extract") + 1]
        out["extracted"] = str(extract.extract_model(sys.executable, m, dest))
except packfile.PackError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
'''


@pytest.fixture(scope="session")
def onefile_exe() -> Path:
    """A real PyInstaller onefile program (~30 s to build once, then cached)."""
    sources = {"llmpack": ["__init__.py", "errors.py", "paths.py", "progress.py"],
               "llmpack/builder": ["__init__.py", "packfile.py", "extract.py", "manifest.py", "hashing.py",
                                   "fileio.py", "zstd_frames.py", "elf.py", "pe.py"]}
    repo_dir = {"llmpack": REPO / "llmpack", "llmpack/builder": REPO / "builder"}
    key = hashlib.sha256(HELLO.encode())
    for pkg, names in sources.items():
        for name in names:
            key.update((repo_dir[pkg] / name).read_bytes())
    exe = _assets() / f"onefile-pyi{PyInstaller.__version__}-{key.hexdigest()[:16]}" / "hello"
    if exe.is_file():
        return exe
    work = _assets() / f"onefile-build-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    for pkg, names in sources.items():  # stage: PyInstaller cannot follow setuptools' editable finder
        (work / "src" / pkg).mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copyfile(repo_dir[pkg] / name, work / "src" / pkg / name)
    (work / "hello.py").write_text(HELLO)
    subprocess.run([sys.executable, "-m", "PyInstaller", "--onefile", "--noconfirm", "--log-level", "ERROR",
                    "--paths", str(work / "src"), "--exclude-module", "numpy", "--distpath", str(work / "dist"),
                    "--workpath", str(work / "build"), "--specpath", str(work), str(work / "hello.py")],
                   check=True, cwd=work)
    exe.parent.mkdir(parents=True, exist_ok=True)
    os.replace(work / "dist" / "hello", exe)
    shutil.rmtree(work, ignore_errors=True)
    # builds of other sources: keep the newest few (other checkouts sharing this cache use them)
    others = sorted((d for d in _assets().glob("onefile-pyi*") if d != exe.parent),
                    key=lambda d: d.stat().st_mtime, reverse=True)
    for old in others[4:]:
        shutil.rmtree(old, ignore_errors=True)
    return exe


@pytest.fixture
def model(tmp_path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + os.urandom(3 * MiB + 12345))
    return path


EXTRA = {"recipe": {"name": "chatml", "stop": ["<|im_end|>"]},
         "defaults": {"ctx": 4096, "parallel": 4, "gpu_layers": "auto", "system": "Be brief.", "name": "Tiny"},
         "llama_cpp_version": "0.3.36"}


def _run_json(exe: Path, *args: str) -> dict:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _readelf_sections(path: Path) -> dict[str, tuple[int, int]]:
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.replace("[ ", "[").split()
        if len(parts) >= 6 and parts[0].startswith("[") and parts[0] != "[Nr]":
            found[parts[1]] = (int(parts[4], 16), int(parts[5], 16))
    return found


# --------------------------------------------------------------------------- ELF


def test_elf_layout_keeps_the_file_valid_and_the_archive_intact(elf_stub, model, tmp_path, archive):
    out = tmp_path / "app"
    manifest = splice.write_packed(elf_stub, model, out, EXTRA)
    data, stub = out.read_bytes(), elf_stub.read_bytes()
    m = manifest.model

    assert m.offset % (64 * 1024) == 0 and data[m.offset:m.offset + m.size] == model.read_bytes()
    assert m.offset + m.stored_size <= manifest.manifest_offset < manifest.archive_offset
    # readelf still lists pydata, now at the archive's new offset, same size; segments unchanged
    before, after = _readelf_sections(elf_stub), _readelf_sections(out)
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
    assert "pydata" in _readelf_sections(out)
    result = _run_json(out, "hello", "--flag")
    assert result["argv"] == ["hello", "--flag"]
    assert result["sha256"] == manifest.model.sha256 and result["defaults"] == EXTRA["defaults"]
    # where the bootloader actually found its archive: after the model, where the trailer says
    assert Path(result["pyz_file"]).resolve() == out.resolve()
    assert result["pyz_offset"] > manifest.archive_offset >= manifest.model.offset + manifest.model.stored_size
    # the unspliced program has no trailer and says so in one line
    assert "not an llmpack executable" in _run_json(onefile_exe)["error"]


@pytest.mark.stub
def test_real_onefile_extracts_once_even_zstd(onefile_exe, model, tmp_path):
    out = tmp_path / "app"
    splice.write_packed(onefile_exe, model, out, EXTRA, compress="zstd")
    models = tmp_path / "models"
    result = _run_json(out, "--extract", str(models))
    assert Path(result["extracted"]).read_bytes() == model.read_bytes()
    assert Path(result["extracted"] + ".ok").is_file()
    mtime = Path(result["extracted"]).stat().st_mtime_ns
    assert _run_json(out, "--extract", str(models))["extracted"] == result["extracted"]
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
    assert _run_json(tmp_path / f"app{256 * MiB}")["argv"] == []   # and it still runs


# --------------------------------------------------------------------------- Windows PE


def test_pe_splice_keeps_headers_sections_overlay_and_checksum(pe_stub, model, tmp_path, win_archive):
    out = tmp_path / "app.exe"
    manifest = splice.write_packed(pe_stub, model, out, EXTRA)
    stub, data = pe_stub.read_bytes(), out.read_bytes()
    before, after = _pe(stub), _pe(data)
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
    assert after.checksum == _pe_checksum(data) != before.checksum   # summed in pieces == in one
    assert packfile.read_manifest(out).to_dict() == manifest.to_dict()
    assert extract.extract_model(out, manifest, tmp_path / "m").read_bytes() == model.read_bytes()


@pytest.fixture(scope="session")
def wine() -> tuple[str, dict[str, str]]:
    """(wine command, environment): a Wine prefix kept with the test assets (made on first use,
    ~15 s), no debug chatter, no display."""
    exe = shutil.which("wine") or shutil.which("wine64")
    if exe is None:
        skip_or_fail("the PE launch test needs Wine: apt-get install wine64 (.ci/run installs it)")
    env = {**os.environ, "WINEPREFIX": str(_assets() / "wine-prefix"), "WINEDEBUG": "-all", "DISPLAY": ""}
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
    at = _pe(bytes(stub)).checksum_at
    stub[at:at + 4] = bytes(4)
    (tmp_path / "nosum.exe").write_bytes(bytes(stub))
    splice.write_packed(tmp_path / "nosum.exe", model, tmp_path / "app.exe", {})
    assert _pe((tmp_path / "app.exe").read_bytes()).checksum == 0


def test_pe_checksum_matches_with_zstd_and_odd_sizes(pe_stub, tmp_path):
    odd = tmp_path / "odd.gguf"
    odd.write_bytes(b"GGUF" + b"abc" * 400_001)  # odd length, compressible
    out = tmp_path / "app.exe"
    m = splice.write_packed(pe_stub, odd, out, {"defaults": {"name": "\u00e9t\u00e9"}}, compress="zstd")
    data = out.read_bytes()
    assert m.model.compression == "zstd"
    assert _pe(data).checksum == _pe_checksum(data)


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
    sec = _pe(bytes(stub)).cert_entry_at
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


@pytest.fixture
def packed(elf_stub, model, tmp_path) -> tuple[Path, Manifest]:
    out = tmp_path / "app"
    return out, splice.write_packed(elf_stub, model, out, EXTRA)


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


# --------------------------------------------------------------------------- extraction cache


def test_extract_once_then_reuse_without_reading(packed, model, tmp_path, monkeypatch):
    out, manifest = packed
    monkeypatch.setenv("LLMPACK_CACHE", str(tmp_path / "cache"))
    calls = []
    path = extract.extract_model(out, manifest, progress=lambda done, total: calls.append(done))
    assert path == tmp_path / "cache" / "models" / f"{manifest.model.sha256}.gguf"
    assert path.read_bytes() == model.read_bytes()
    assert calls and calls[-1] == model.stat().st_size
    assert Path(str(path) + ".ok").is_file()
    mtime = path.stat().st_mtime_ns

    # proof that the second launch does not read the model: damage it inside the executable
    data = bytearray(out.read_bytes())
    data[manifest.model.offset + 10] ^= 0xFF
    out.write_bytes(bytes(data))
    calls.clear()
    assert extract.extract_model(out, manifest, progress=lambda d, t: calls.append(d)) == path
    assert calls == [] and path.stat().st_mtime_ns == mtime


def test_interrupted_extraction_is_not_mistaken_for_valid(packed, model, tmp_path):
    out, manifest = packed
    dest = tmp_path / "models"
    dest.mkdir()
    sha = manifest.model.sha256
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (dest / f"{sha}.gguf.tmp-{dead.pid}").write_bytes(b"partial")
    (dest / f"{sha}.gguf.tmp-{os.getppid()}").write_bytes(b"someone else, still running")
    final = dest / f"{sha}.gguf"
    final.write_bytes(model.read_bytes()[:1000])  # truncated, no marker
    assert extract.extract_model(out, manifest, dest).read_bytes() == model.read_bytes()
    assert not (dest / f"{sha}.gguf.tmp-{dead.pid}").exists()
    assert (dest / f"{sha}.gguf.tmp-{os.getppid()}").exists()

    # right size, wrong bytes, marker stale (mtime changed): re-verified and replaced
    bad = bytearray(model.read_bytes())
    bad[5] ^= 1
    final.write_bytes(bytes(bad))
    assert extract.extract_model(out, manifest, dest).read_bytes() == model.read_bytes()

    # crash between rename and marker: the complete file is verified once, not copied again
    os.unlink(str(final) + ".ok")
    calls = []
    mtime = final.stat().st_mtime_ns
    assert extract.extract_model(out, manifest, dest, progress=lambda d, t: calls.append(d)) == final
    assert calls and final.stat().st_mtime_ns == mtime and Path(str(final) + ".ok").is_file()


def test_two_extractions_at_once_make_one_verified_file(packed, model, tmp_path):
    """Two first launches at once: the second waits for the first and uses its file."""
    out, manifest = packed
    dest = tmp_path / "models"
    first_copying, release = threading.Event(), threading.Event()
    copied: dict[str, list[int]] = {"first": [], "second": []}

    def first_progress(done: int, total: int) -> None:
        copied["first"].append(done)
        first_copying.set()
        assert release.wait(60)

    results: dict[str, Path | BaseException] = {}

    def run(name: str, progress) -> None:
        try:
            results[name] = extract.extract_model(out, manifest, dest, progress=progress)
        except BaseException as exc:  # noqa: BLE001 - reported below
            results[name] = exc

    first = threading.Thread(target=run, args=("first", first_progress))
    first.start()
    assert first_copying.wait(60)
    second = threading.Thread(target=run, args=("second", lambda d, t: copied["second"].append(d)))
    second.start()
    second.join(1.0)
    assert second.is_alive(), "the second extraction did not wait for the first"
    release.set()
    first.join(60)
    second.join(60)
    final = dest / f"{manifest.model.sha256}.gguf"
    assert results == {"first": final, "second": final}
    assert copied["second"] == []                      # it found the first one's verified file
    assert final.read_bytes() == model.read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == [final.name, final.name + ".ok"]   # no temp or lock file


FULL_DISK = r"""
import json, shutil, subprocess, sys
from llmpack.builder import extract, packfile
exe, dest, lie = sys.argv[1], sys.argv[2], sys.argv[3] == "lie"
if lie:   # a filesystem that reports more free space than it has, or another program filling it
    shutil.disk_usage = lambda path: shutil._ntuple_diskusage(1 << 40, 0, 1 << 40)
try:
    extract.extract_model(exe, packfile.read_manifest(exe), dest)
    result = {"error": None}
except packfile.PackError as exc:
    result = {"error": str(exc)}
import os
result["left"] = sorted(os.listdir(dest))
print(json.dumps(result))
"""


@pytest.mark.parametrize("when", ["checked before writing", "filled while writing"])
def test_a_full_disk_is_one_clear_line_and_leaves_nothing(packed, tmp_path, when):
    """The cache folder is a 1 MiB tmpfs (a mount namespace of its own: no root needed, nothing
    left mounted); the model is 3 MiB."""
    out, _ = packed
    dest = tmp_path / "cache"
    dest.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK)
    lie = "lie" if when == "filled while writing" else "honest"
    proc = subprocess.run(on_small_tmpfs(dest, "1m", [sys.executable, str(script), str(out), str(dest), lie]),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    error = result["error"]
    assert error and "\n" not in error and str(dest) in error and "LLMPACK_CACHE" in error
    assert ("not enough disk space" if when == "checked before writing" else "the disk filled up") in error
    assert result["left"] == []


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
    assert "pydata" in _readelf_sections(out) and CArchiveReader(str(out))._start_offset == manifest.archive_offset
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

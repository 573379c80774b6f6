"""Stubs for the packfile tests (tests/test_packfile*.py, test_model_extraction.py, and the build
tests that splice a model): PyInstaller's real bootloaders with a real CArchive, and the model.

* ``elf_stub``: PyInstaller's real Linux bootloader + a real CArchive added with
  ``objcopy --add-section pydata=...``, exactly how PyInstaller assembles onefile on Linux (fast).
* ``pe_stub``: PyInstaller's real Windows bootloader (run.exe from the win_amd64 wheel, fetched
  once by ``./dev setup``) with a CArchive appended as overlay and the PE checksum set, as
  PyInstaller does on Windows.
* ``onefile_exe`` (for tests marked ``stub``): a real ``pyinstaller --onefile`` program that reads
  its own manifest, built once per PyInstaller version and source hash, cached under the user cache.

`from helpers.stubs import *` brings in the fixtures. They are module-scoped: each test module
that imports them gets its own (cheap: the slow one, onefile_exe, is cached on disk).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import platformdirs
import PyInstaller
import pytest
from llmpack.builder import pe, splice
from llmpack.builder.manifest import Manifest
from PyInstaller.archive.writers import CArchiveWriter

__all__ = ["archive", "win_archive", "elf_stub", "windows_run_exe", "pe_stub", "onefile_exe", "model", "packed"]

REPO = Path(__file__).resolve().parents[2]
COOKIE_MAGIC = b"MEI\014\013\012\013\016"
MiB = 1024 * 1024


def assets_dir() -> Path:
    """Cache for slow-to-make test inputs; deliberately not LLMPACK_CACHE (tests redirect that)."""
    root = os.environ.get("LLMPACK_TEST_ASSETS") or \
        Path(platformdirs.user_cache_dir("llmpack", appauthor=False)) / "test-assets"
    Path(root).mkdir(parents=True, exist_ok=True)
    return Path(root)


def make_archive(path: Path, tmp: Path, pylib: str, data_name: str) -> Path:
    """A genuine PyInstaller CArchive (PKG) with compressed and raw entries and an option."""
    (tmp / "hello.txt").write_bytes(b"hello from the archive\n" * 100)
    (tmp / "blob.bin").write_bytes(os.urandom(50_000))
    entries = [("pyi-llmpack-test-option", "", False, "o"),
               (data_name, str(tmp / "hello.txt"), True, "x"),
               ("blob.bin", str(tmp / "blob.bin"), False, "b")]
    CArchiveWriter(str(path), entries, pylib)
    return path


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("archive")
    return make_archive(tmp / "archive.pkg", tmp, "libpython3.11.so.1.0", "data/hello.txt")


@pytest.fixture(scope="module")
def win_archive(tmp_path_factory) -> Path:
    """As a Windows build names things: the Python DLL, and (here) no sub-folder."""
    tmp = tmp_path_factory.mktemp("win-archive")
    return make_archive(tmp / "archive.pkg", tmp, "python311.dll", "hello.txt")


@pytest.fixture(scope="module")
def elf_stub(tmp_path_factory, archive) -> Path:
    bootloader = Path(PyInstaller.__file__).parent / "bootloader" / "Linux-64bit-intel" / "run"
    out = tmp_path_factory.mktemp("elf") / "stub"
    shutil.copyfile(bootloader, out)
    subprocess.run(["objcopy", "--add-section", f"pydata={archive}", str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def windows_run_exe() -> bytes:
    """PyInstaller's Windows bootloader (run.exe from the win_amd64 wheel of the installed
    version), fetched once by `./dev setup` into the test-asset cache."""
    cached = assets_dir() / f"pyinstaller-{PyInstaller.__version__}-win_amd64-run.exe"
    if not cached.is_file():
        pytest.fail(f"{cached} is missing: run ./dev setup (it fetches PyInstaller's Windows bootloader once)")
    return cached.read_bytes()


def pe_fields(data: bytes) -> pe.Headers:
    """The PE fields the checks below compare, read by builder/pe.py, the one PE reader."""
    hdr = pe.parse_headers(lambda offset, n: data[offset:offset + n])
    assert hdr is not None
    return hdr


def pe_checksum(data: bytes) -> int:
    """builder/pe.py's checksum of a whole file in one piece (the CheckSum field counted as zero)."""
    at = pe_fields(data).checksum_at
    total = pe.Checksum()
    total.add(0, data[:at])
    total.add(at + 4, data[at + 4:])
    return total.value(len(data))



@pytest.fixture(scope="module")
def pe_stub(tmp_path_factory, windows_run_exe, win_archive) -> Path:
    data = bytearray(windows_run_exe + win_archive.read_bytes())  # PyInstaller appends the PKG as overlay
    at = pe_fields(bytes(data)).checksum_at
    data[at:at + 4] = struct.pack("<I", pe_checksum(bytes(data)))
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


@pytest.fixture(scope="module")
def onefile_exe() -> Path:
    """A real PyInstaller onefile program (~30 s to build once, then cached)."""
    sources = {"llmpack": ["__init__.py", "errors.py", "paths.py", "progress.py"],
               "llmpack/builder": ["__init__.py", "packfile.py", "extract.py", "manifest.py", "hashing.py",
                                   "fileio.py", "zstd_frames.py", "elf.py", "pe.py"],
               "llmpack/runtime": ["__init__.py"], "llmpack/runtime/model": ["__init__.py", "source.py"]}
    repo_dir = {"llmpack": REPO / "llmpack", "llmpack/builder": REPO / "builder", "llmpack/runtime": REPO / "runtime",
                "llmpack/runtime/model": REPO / "runtime" / "model"}
    key = hashlib.sha256(HELLO.encode())
    for pkg, names in sources.items():
        for name in names:
            key.update((repo_dir[pkg] / name).read_bytes())
    exe = assets_dir() / f"onefile-pyi{PyInstaller.__version__}-{key.hexdigest()[:16]}" / "hello"
    if exe.is_file():
        return exe
    work = assets_dir() / f"onefile-build-{os.getpid()}"
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
    others = sorted((d for d in assets_dir().glob("onefile-pyi*") if d != exe.parent),
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


def run_json(exe: Path, *args: str) -> dict:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def readelf_sections(path: Path) -> dict[str, tuple[int, int]]:
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.replace("[ ", "[").split()
        if len(parts) >= 6 and parts[0].startswith("[") and parts[0] != "[Nr]":
            found[parts[1]] = (int(parts[4], 16), int(parts[5], 16))
    return found



@pytest.fixture
def packed(elf_stub, model, tmp_path) -> tuple[Path, Manifest]:
    out = tmp_path / "app"
    return out, splice.write_packed(elf_stub, model, out, EXTRA)

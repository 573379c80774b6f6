"""PyInstaller's Windows bootloader, compiled here from PyInstaller's sdist with mingw-w64.

The bootloader is the small program every built file starts as: it finds the archive at the end
of the file, unpacks it and starts Python. PyInstaller's wheel ships a prebuilt one that
thousands of unrelated programs (some of them malware) share byte for byte, so antivirus
heuristics flag it; this is the most frequent complaint in koboldcpp's tracker (#795, #1649,
#2267). A bootloader compiled here from the same sources differs in its bytes from that
shared one. It does not make a file trusted: only signing does that (README, Windows).

One patch (:data:`PATCHES`): the onefile bootloader names its unpack folder with ``_wtempnam``,
and then checks that the name starts with ``_MEI<pid>``. Wine's C runtimes implement
``_wtempnam`` with ``GetTempFileNameW``, which keeps only three characters of the prefix, so
the check fails ("Security validation failure: unexpected name of application's home
directory"); PyInstaller's prebuilt bootloader escapes this only because MSVC links the CRT in
statically. The patch builds the same name (``%TEMP%\\_MEI<pid><6 hex digits>``) directly; on
Windows the result is what ``_wtempnam`` gives, and the check itself is untouched.

``waf configure build_release install_release`` (the console variant is all we use) is
PyInstaller's own build, pointed at the mingw compiler; waf sees the target from the compiler
and installs ``run.exe`` into the extracted sdist's ``PyInstaller/bootloader/Windows-64bit-intel``.
Cached in ``<cache>/windows/bootloader-<key>/run.exe``.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from llmpack.builder.windows.pins import PYINSTALLER, WindowsBuildError, fetch_sdist
from llmpack.builder.windows.tools import (MINGW_CC, apply_patches, dll_imports, install_files, mingw_version, require,
                                           unpacked)

WAF_ARGS = ("--target-arch=64bit",)
_TEMPNAM = r"""
/* llmpack: _wtempnam() of Wine's C runtimes keeps only 3 characters of the prefix; name the
   folder here instead: <dir><prefix><6 hex digits from the performance counter>. */
static wchar_t *
llmpack_wtempnam(const wchar_t *dir, const wchar_t *prefix)
{
    LARGE_INTEGER counter;
    size_t size = wcslen(dir) + wcslen(prefix) + 8;
    wchar_t *name = (wchar_t *)calloc(size, sizeof(wchar_t));
    if (name == NULL) {
        return NULL;
    }
    QueryPerformanceCounter(&counter);
    _snwprintf(name, size - 1, L"%ls%ls%06x", dir, prefix,
               (unsigned int)((counter.QuadPart ^ GetCurrentThreadId()) & 0xFFFFFF));
    return name;
}
"""
# (file in the sdist's bootloader/, exact text, replacement): each must match exactly once.
PATCHES = (
    ("src/pyi_utils_win32.c", '#include "pyi_main.h"\n', '#include "pyi_main.h"\n' + _TEMPNAM),
    ("src/pyi_utils_win32.c", "_wtempnam(tempdir_path, prefix);", "llmpack_wtempnam(tempdir_path, prefix);"),
)
SYSTEM_DLLS = {"advapi32.dll", "kernel32.dll", "msvcrt.dll", "user32.dll"}


def bootloader_key() -> str:
    text = f"{PYINSTALLER.sha256}\n{' '.join(WAF_ARGS)}\n{mingw_version()}\n{PATCHES}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_bootloader(root: Path, *, log=print) -> Path:
    """`root/bootloader-<key>/run.exe`, built once (docs/PORTABILITY.md has the figure)."""
    require(MINGW_CC)
    dest = root / f"bootloader-{bootloader_key()}"
    if (dest / "run.exe").is_file():
        return dest / "run.exe"
    started = time.monotonic()
    with unpacked(fetch_sdist(PYINSTALLER, root / "sources"), root, "bootloader") as work:
        top = work / f"pyinstaller-{PYINSTALLER.version}"
        apply_patches(top / "bootloader", PATCHES, __name__)
        out = top / "PyInstaller" / "bootloader" / "Windows-64bit-intel" / "run.exe"
        out.unlink(missing_ok=True)     # the sdist carries none, but never take a prebuilt one
        env = {**os.environ, "CC": MINGW_CC}
        for step in (["configure", *WAF_ARGS], ["build_release"], ["install_release"]):
            proc = subprocess.run([sys.executable, "./waf", *step], cwd=top / "bootloader", env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True)
            if proc.returncode != 0:
                raise WindowsBuildError(f"building PyInstaller's bootloader with mingw failed at `waf {step[0]}`:\n"
                                        + (proc.stdout + proc.stderr).strip()[-2000:])
        if not out.is_file():
            raise WindowsBuildError(f"waf finished but made no {out.name}")
        imports = {i.lower() for i in dll_imports(out)}
        if not imports <= SYSTEM_DLLS:
            raise WindowsBuildError(f"the bootloader imports {sorted(imports - SYSTEM_DLLS)}, "
                                    "which a Windows PC may not have")
        install_files(dest, {"run.exe": out})
    log(f"llmpack: PyInstaller's Windows bootloader built with mingw in {time.monotonic() - started:.0f} s")
    return dest / "run.exe"

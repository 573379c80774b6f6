"""The Debian tools the Windows target needs, and running Windows programs under Wine.

Wine is used twice: PyInstaller runs in python.org's Windows CPython under it (so the stub is
frozen by the real Windows interpreter, with the real Windows module finder and PE tools), and
the finished stub runs its self-test under it. Three things make that work (each measured):

* the prefix says Windows 10 (``HKCU\\Software\\Wine\\Version``), as most recipients run 10 or 11;
* a Windows program's standard streams are pipes, never files: CPython under Wine 8 cannot
  start with a file as stdout ("init_sys_streams: Invalid handle");
* ``WINEDEBUG=-all`` and no ``DISPLAY``: nothing here needs a window, and Wine's own chatter
  would bury PyInstaller's log;
* Windows 10's ``bcryptprimitives.dll``, which Wine 8 lacks, compiled into the prefix
  (``PROCESS_PRNG_C``): the MCP SDK's pydantic-core and rpds-py are Rust, and Rust's standard
  library (1.78 on) imports its ``ProcessPrng``, so without it they fail to load ("DLL load
  failed") while PyInstaller collects them and in a test's PC. Real Windows 10 and 11 have it, so
  the stub never carries it (PyInstaller leaves system32's DLLs out).
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tarfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from llmpack.builder import llama_source
from llmpack.builder.windows.pins import WindowsBuildError

MINGW = "x86_64-w64-mingw32"
MINGW_CC = f"{MINGW}-gcc-posix"       # the posix-threads flavour: llama.cpp uses std::thread
MINGW_CXX = f"{MINGW}-g++-posix"
WINE_DLLS = Path("/usr/lib/x86_64-linux-gnu/wine/x86_64-windows")

# command -> the Debian package that provides it
DEBIAN_PACKAGES = {
    "wine": "wine64", MINGW_CC: "gcc-mingw-w64-x86-64-posix", MINGW_CXX: "g++-mingw-w64-x86-64-posix",
    f"{MINGW}-dlltool": "binutils-mingw-w64-x86-64", f"{MINGW}-objdump": "binutils-mingw-w64-x86-64",
    "gendef": "mingw-w64-tools", "glslc": "glslc", "cmake": "cmake", "ninja": "ninja-build",
}


def require(*commands: str) -> None:
    """Fail with one line naming the Debian packages to install when a command is missing."""
    missing = sorted({DEBIAN_PACKAGES.get(c, c) for c in commands if shutil.which(c) is None})
    if missing:
        raise WindowsBuildError("making a Windows program on Linux needs " + ", ".join(missing)
                                + f": sudo apt-get install {' '.join(missing)}")


@functools.cache
def mingw_version() -> str:
    """The cross compiler's full version, part of every cache key it builds for (asked once:
    the stub key, the DLL key and the bootloader key each need it)."""
    require(MINGW_CC)
    out = subprocess.run([MINGW_CC, "--version"], capture_output=True, text=True, check=True).stdout
    return out.splitlines()[0].strip()


def dll_imports(path: Path) -> list[str]:
    """The DLLs a PE file imports, as its import table names them."""
    require(f"{MINGW}-objdump")
    out = subprocess.run([f"{MINGW}-objdump", "-p", str(path)], capture_output=True, text=True, check=True).stdout
    return [line.split(":", 1)[1].strip() for line in out.splitlines() if "DLL Name:" in line]


def apply_patches(root: Path, patches: tuple[tuple[str, str, str], ...], owner: str) -> None:
    """Replace exact text in files under `root`, each (file, old, new) matching exactly once, so a
    new upstream version that moved the text stops the build instead of building something else
    (PyInstaller's bootloader; llama.cpp's patches are patch files: apply_patch_files)."""
    for rel, old, new in patches:
        path = root / rel
        text = path.read_text("utf-8")
        if text.count(old) != 1:
            raise WindowsBuildError(f"{path} does not hold the text llmpack patches there; update PATCHES in {owner}")
        path.write_text(text.replace(old, new), "utf-8")


def apply_patch_files(root: Path, files: list[Path]) -> None:
    """llama_source.apply_patch_files, failing as a Windows build step."""
    try:
        llama_source.apply_patch_files(root, files)
    except llama_source.SourceError as exc:
        raise WindowsBuildError(str(exc)) from None


@contextmanager
def unpacked(sdist: Path, root: Path, step: str) -> Iterator[Path]:
    """`sdist` extracted into a private work folder under `root`, removed however the step ends."""
    work = root / f".work-{step}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def install_files(dest: Path, files: dict[str, Path | str]) -> None:
    """Make `dest` hold exactly `files` (name -> file to copy, or text), all at once: they are
    written to a sibling folder that then replaces `dest`, so a cache step is whole or absent."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, content in files.items():
        if isinstance(content, Path):
            shutil.copy2(content, tmp / name)
        else:
            (tmp / name).write_text(content, "utf-8")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


# ProcessPrng (bcryptprimitives.dll, Windows 10+): the system's random bytes, from the
# RtlGenRandom (advapi32's SystemFunction036) that every Wine has.
PROCESS_PRNG_C = r"""
#include <windows.h>
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length) {
        ULONG n = length > 0x40000000 ? 0x40000000 : (ULONG)length;
        if (!SystemFunction036(data, n)) return FALSE;
        data += n;
        length -= n;
    }
    return TRUE;
}
"""


def windows_path(path: Path | str) -> str:
    """A Linux path as Windows programs under Wine see it: Wine maps / to drive Z:."""
    return "Z:" + str(Path(path).resolve()).replace("/", "\\")


class Wine:
    """A Wine prefix (a Windows 10 user profile) and how to run programs in it."""

    def __init__(self, prefix: Path):
        self.prefix = prefix

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        for var in ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "LLMPACK_CACHE", "LLMPACK_DATA_DIR"):
            env.pop(var, None)   # Wine passes the Linux environment on to Windows programs
        env.update(WINEPREFIX=str(self.prefix), WINEDEBUG="-all", DISPLAY="", WINEDLLOVERRIDES="mscoree,mshtml=")
        return env

    def ensure(self) -> "Wine":
        """Create the prefix once (about 10 s), set to Windows 10."""
        require("wine")
        if (self.prefix / "system.reg").is_file() and (self.prefix / ".llmpack-win10").is_file():
            self._add_process_prng()
            return self
        self.prefix.mkdir(parents=True, exist_ok=True)
        env = self.env()
        run = dict(env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        for _ in range(2):   # a fresh prefix's wineboot failed once in a CI run, without a word; again, it worked
            proc = subprocess.run(["wineboot", "-i"], **run)
            if proc.returncode == 0:
                break
            subprocess.run(["wineserver", "-k"], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        else:
            raise WindowsBuildError(f"Wine could not create its prefix {self.prefix} (wineboot exited "
                                    f"{proc.returncode} twice): {proc.stdout.decode('utf-8', 'replace')[-500:]}")
        subprocess.run(["wine", "reg", "add", r"HKCU\Software\Wine", "/v", "Version", "/d", "win10", "/f"],
                       check=True, **run)
        subprocess.run(["wineserver", "-w"], env=env, timeout=120)   # registry written to disk
        (self.prefix / ".llmpack-win10").write_text("")
        self._add_process_prng()
        return self

    def _add_process_prng(self) -> None:
        """bcryptprimitives.dll in the prefix's system32 where this Wine has none (above)."""
        dll = self.prefix / "drive_c" / "windows" / "system32" / "bcryptprimitives.dll"
        if (WINE_DLLS / "bcryptprimitives.dll").is_file() or dll.is_file():
            return
        require(MINGW_CC)
        source = self.prefix / "process_prng.c"
        source.write_text(PROCESS_PRNG_C)
        proc = subprocess.run([MINGW_CC, "-shared", "-O2", "-static-libgcc", "-o", str(dll), str(source), "-ladvapi32"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise WindowsBuildError(f"compiling bcryptprimitives.dll for Wine failed: {proc.stderr.strip()[-500:]}")

    def shutdown(self) -> None:
        """End every Windows process of this prefix, and its wineserver."""
        subprocess.run(["wineserver", "-k"], env=self.env(), stdin=subprocess.DEVNULL, capture_output=True, timeout=60)

    def local_appdata(self) -> Path:
        """%LOCALAPPDATA% of the prefix's user, as a Linux path."""
        users = self.prefix / "drive_c" / "users"
        user = os.environ.get("USER") or ("root" if os.geteuid() == 0 else "")
        candidates = [users / user] if user else []
        candidates += sorted(p for p in users.glob("*") if p.name != "Public") if users.is_dir() else []
        for home in candidates:
            if (home / "AppData" / "Local").is_dir():
                return home / "AppData" / "Local"
        raise WindowsBuildError(f"the Wine prefix {self.prefix} has no user profile; delete it and try again")

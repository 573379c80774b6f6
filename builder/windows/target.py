"""The Windows x64 stub target: what :func:`llmpack.builder.stub.build_stub` needs to freeze a
Windows stub here, and the key that says when the cached one is stale.

The key is computed from the inputs' pins and this package's own sources, without building
anything, so a cached stub is found at once; :meth:`WindowsTarget.prepare` builds what is
missing (llama.cpp's DLLs, the bootloader, the build interpreter, the Wine prefix), each step
cached on its own and printing its time.
"""
from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

from llmpack.builder.stub_bundle import BuildEnv
from llmpack.builder.windows.bootloader import bootloader_key, build_bootloader
from llmpack.builder.windows.llama_dlls import build_dlls, dlls_key
from llmpack.builder.windows.pins import LLAMA_CPP, PYTHON_VERSION
from llmpack.builder.windows.python_env import build_python, python_key
from llmpack.builder.windows.tools import Wine, require, windows_path
from llmpack.paths import cache_dir


def windows_root() -> Path:
    return cache_dir() / "windows"


def wine() -> Wine:
    """The prefix PyInstaller and the self-test run in (kept with the cache)."""
    return Wine(windows_root() / "wine-prefix")


def _package_sources_hash() -> str:
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")) + [Path(__file__).with_name("requirements.txt")]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


class WindowsTarget:
    name = "windows-x64"
    platform = "win_amd64"
    python = PYTHON_VERSION
    exe_suffix = ".exe"

    def inputs(self) -> tuple[str, str]:
        boot = bootloader_key()
        label = f"llama{LLAMA_CPP.version}-{dlls_key()[:10]}"
        return label, f"windows {python_key(boot)} {boot} {_package_sources_hash()}"

    def info(self) -> dict:
        return {"llama_cpp_version": LLAMA_CPP.version}

    def prepare(self, quiet: bool) -> BuildEnv:
        require("wine")
        root = windows_root()
        started = time.monotonic()
        log = (lambda msg: None) if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
        log("llmpack: making the Windows runtime stub here (once per llmpack version; each step is cached)")
        dlls = build_dlls(root, quiet=quiet, log=log)
        run_exe = build_bootloader(root, log=log)
        python = build_python(root, run_exe, bootloader_key(), log=log)
        box = wine().ensure()
        log(f"llmpack: Windows toolchain ready after {time.monotonic() - started:.0f} s; freezing with PyInstaller under Wine")
        return BuildEnv(python_cmd=("wine", windows_path(python / "python.exe")), lib_dir=dlls, env=box.env(),
                        run_prefix=("wine",), host_path=windows_path)

"""llama.cpp for Windows x64, cross-compiled here with mingw-w64: ``llama.dll``, ``ggml.dll``,
``ggml-base.dll``, one ``ggml-cpu-<variant>.dll`` per x86-64 level, ``ggml-vulkan.dll`` and
``ggml-rpc.dll`` (llama.cpp's RPC backend: `--rpc` and `chat.exe --rpc-worker`; it imports ws2_32)
and ``mtmd.dll`` (llama.cpp's multimodal library: pictures for `--mmproj` models, loaded by
``llama_cpp.mtmd_cpp`` as ``mtmd.dll`` or ``libmtmd.dll``; llama.cpp's ``LLAMA_BUILD_MTMD`` builds
it without its CLI tools, which would need llama-common).

The same vendored llama.cpp and the same backend layout as the Linux wheel (./dev):
GGML_BACKEND_DL with every CPU variant and Vulkan, so the runtime's ``load_backends`` picks the
CPU kernels and the GPU on the recipient's PC. What mingw needs beyond ordinary flags:

* ``THREAD_POWER_THROTTLING_STATE``: ggml-cpu.c uses it and Debian's mingw-w64 10 headers lack it
  (known upstream, llama.cpp PR #20759): :data:`SHIM` defines it, force-included into C files;
* ``-Wa,-muse-unaligned-vector-move``: GCC aligns the Windows stack to 16 bytes but spills AVX
  registers with aligned 32-byte moves (GCC bug 54412), which crash; koboldcpp and llama.cpp's
  old Makefile build their Windows DLLs the same way;
* ``-static`` with ``-static-libgcc -static-libstdc++ -Wl,--exclude-libs,ALL``: the DLLs import
  only Windows' own DLLs (no libstdc++-6.dll, libgomp-1.dll or libwinpthread-1.dll to ship), and
  each keeps its private copy of those runtimes out of its export table, where winpthread's
  symbols would otherwise clash between DLLs. OpenMP needs one more push: CMake's FindOpenMP
  hands the linker the full path of ``libgomp.dll.a``, which ``-static`` cannot override, so
  ``OpenMP_gomp_LIBRARY`` names the static ``libgomp.a``;
* empty ``CMAKE_SHARED_MODULE_PREFIX``/``CMAKE_SHARED_LIBRARY_PREFIX``: mingw names modules
  ``libggml-cpu-haswell.dll``, but ggml's loader and llama-cpp-python look for ``ggml-*.dll``
  and ``llama.dll`` on Windows;
* no ``sapphirerapids`` (AMX) CPU variant: GCC 12 for mingw emits 32-bit index registers in
  AMX tile loads (``long`` is 32 bits on Windows), which the assembler rejects; upstream leaves it
  out of MSVC builds too, and llmpack never picks AMX on Windows (runtime/hardware/amx_probe.py);
* Vulkan: Debian has no mingw Vulkan loader, so an import library is made with ``dlltool``
  from the export list of Wine's ``vulkan-1.dll`` (the same API every Windows GPU driver's
  ``vulkan-1.dll`` exports). ggml-vulkan's shader generator is built with the host compiler.

The result is cached in ``<cache>/windows/llama-<key>/`` under a key of every input: the sdist's
hash, llmpack's patch files to it (builder/patches/*.patch, through llama_source.key()) and the
Windows-only ones (builder/patches/windows/*.patch: no AMX variant), the flags, the shim, the
compiler's version and the Vulkan headers' pins.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from llmpack.builder import llama_source
from llmpack.builder.build_progress import describe
from llmpack.builder.stub_run import tail, watched
from llmpack.builder.vulkan_headers import PINS as VULKAN_HEADER_PINS
from llmpack.builder.vulkan_headers import HeadersError, ensure_headers
from llmpack.builder.windows.pins import LLAMA_CPP, WindowsBuildError, fetch_sdist
from llmpack.builder.windows.tools import (MINGW, MINGW_CC, MINGW_CXX, WINE_DLLS, apply_patch_files, dll_imports,
                                           install_files, mingw_version, require, unpacked)
from llmpack.progress import Bar

SHIM = """\
/* Force-included by llmpack into ggml's C files: mingw-w64 10 lacks these (Windows 10 1709 SDK). */
#ifndef THREAD_POWER_THROTTLING_CURRENT_VERSION
typedef struct _THREAD_POWER_THROTTLING_STATE { unsigned long Version, ControlMask, StateMask; } THREAD_POWER_THROTTLING_STATE;
#define THREAD_POWER_THROTTLING_CURRENT_VERSION 1
#define THREAD_POWER_THROTTLING_EXECUTION_SPEED 0x1
#endif
"""

TOOLCHAIN = f"""\
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR AMD64)
set(CMAKE_C_COMPILER {MINGW_CC})
set(CMAKE_CXX_COMPILER {MINGW_CXX})
set(CMAKE_RC_COMPILER {MINGW}-windres)
set(CMAKE_FIND_ROOT_PATH /usr/{MINGW})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
"""

LINK_FLAGS = "-static-libgcc -static-libstdc++ -static -Wl,--exclude-libs,ALL"
CMAKE_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON", "-DGGML_VULKAN=ON", "-DGGML_RPC=ON", "-DGGML_OPENMP=ON",
    "-DGGML_RPC_RDMA=OFF",   # no RDMA transport (issue 36): llmpack never uses it; ggml's CMake forces it off on Windows too
    "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_COMMON=OFF", "-DLLAMA_BUILD_APP=OFF",
    # mtmd without video: its video helper runs an ffmpeg program, which a Windows PC does not have
    # and llmpack never asks for (its mtmd_helper_video_* functions stay, answering "not supported")
    "-DLLAMA_BUILD_MTMD=ON", "-DMTMD_VIDEO=OFF",
    "-DCMAKE_SHARED_MODULE_PREFIX=", "-DCMAKE_SHARED_LIBRARY_PREFIX=",
    "-DCMAKE_CXX_FLAGS=-Wa,-muse-unaligned-vector-move",
    f"-DCMAKE_SHARED_LINKER_FLAGS={LINK_FLAGS}", f"-DCMAKE_MODULE_LINKER_FLAGS={LINK_FLAGS}",
    f"-DCMAKE_EXE_LINKER_FLAGS={LINK_FLAGS}",
)
C_FLAGS = "-Wa,-muse-unaligned-vector-move"          # plus -include <shim>, added at build time
# builder/patches/windows/: applied after llama_source's patches, to the Windows build only
PATCHES = llama_source.PATCHES / "windows"
# What a DLL may import: Windows itself, the GPU driver's Vulkan loader, and each other.
ALLOWED_IMPORTS = re.compile(r"^(kernel32|advapi32|msvcrt|user32|shell32|ole32|bcrypt|ws2_32|api-ms-win-.*|"
                             r"vulkan-1|ggml.*|(lib)?llama)\.dll$", re.IGNORECASE)


def dlls_key() -> str:
    text = json.dumps({"sdist": LLAMA_CPP.sha256, "cmake": CMAKE_ARGS, "cflags": C_FLAGS, "shim": SHIM,
                       "patches": llama_source.files_key(llama_source.patch_files(PATCHES)),
                       "sources": llama_source.key(),
                       "toolchain": TOOLCHAIN, "compiler": mingw_version(), "vulkan": VULKAN_HEADER_PINS},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_dlls(root: Path, *, quiet: bool = False, log=print) -> Path:
    """`root/llama-<key>/` with the DLLs, built once (minutes: docs/PORTABILITY.md has the figure)."""
    require(MINGW_CC, MINGW_CXX, f"{MINGW}-dlltool", "gendef", "glslc", "cmake", "ninja")
    dest = root / f"llama-{dlls_key()}"
    if (dest / "BUILD.json").is_file():
        return dest
    started = time.monotonic()
    with unpacked(fetch_sdist(LLAMA_CPP, root / "sources"), root, "llama") as work:
        src = work / f"llama_cpp_python-{LLAMA_CPP.version}" / "vendor" / "llama.cpp"
        apply_patch_files(src, llama_source.patch_files() + llama_source.patch_files(PATCHES))
        (work / "toolchain.cmake").write_text(TOOLCHAIN)
        (work / "shim.h").write_text(SHIM)
        try:
            headers = ensure_headers(root.parent, log=log)
        except HeadersError as exc:
            raise WindowsBuildError(str(exc)) from None
        vulkan_lib = _vulkan_import_library(work)
        build = work / "build"
        configure = ["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja",
                     f"-DCMAKE_TOOLCHAIN_FILE={work / 'toolchain.cmake'}", *CMAKE_ARGS,
                     f"-DCMAKE_C_FLAGS=-include {work / 'shim.h'} {C_FLAGS}",
                     f"-DVulkan_INCLUDE_DIR={headers / 'include'}", f"-DVulkan_LIBRARY={vulkan_lib}",
                     f"-DSPIRV-Headers_DIR={headers / 'share/cmake/SPIRV-Headers'}",
                     f"-DVulkan_GLSLC_EXECUTABLE={shutil.which('glslc')}",
                     f"-DOpenMP_gomp_LIBRARY={_static_libgomp()}"]
        # ccache (ggml's CMake uses it when found) sees paths under `work` as relative ones, so a
        # rebuild in another work folder (a new patch) compiles only what changed
        env = {**os.environ, "CCACHE_BASEDIR": str(work), "CCACHE_NOHASHDIR": "1"}
        _run(configure, work / "configure.log", "configuring llama.cpp for Windows", env)
        _ninja(build, work / "build.log", env, quiet=quiet)
        dlls = sorted((build / "bin").glob("*.dll"))
        _check(dlls)
        seconds = round(time.monotonic() - started)
        record = json.dumps({"seconds": seconds, "cmake": CMAKE_ARGS, "compiler": mingw_version(),
                             "dlls": [d.name for d in dlls]}, indent=1)
        install_files(dest, {**{d.name: d for d in dlls}, "BUILD.json": record})
    log(f"llmpack: llama.cpp for Windows built in {seconds // 60} min {seconds % 60} s: {dest}")
    return dest


def _static_libgomp() -> str:
    path = subprocess.run([MINGW_CC, "-print-file-name=libgomp.a"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(path):
        raise WindowsBuildError(f"{MINGW_CC} has no static libgomp.a: sudo apt-get install gcc-mingw-w64-x86-64-posix")
    return path


def _vulkan_import_library(work: Path) -> Path:
    """libvulkan-1.a for mingw, from the exports of Wine's vulkan-1.dll."""
    dll = WINE_DLLS / "vulkan-1.dll"
    if not dll.is_file():
        raise WindowsBuildError(f"{dll} is missing; the Vulkan import library is made from it: "
                                "sudo apt-get install wine64")
    shutil.copyfile(dll, work / "vulkan-1.dll")
    subprocess.run(["gendef", "vulkan-1.dll"], cwd=work, check=True, capture_output=True)
    lib = work / "libvulkan-1.a"
    subprocess.run([f"{MINGW}-dlltool", "-d", "vulkan-1.def", "-D", "vulkan-1.dll", "-l", str(lib)], cwd=work,
                   check=True, capture_output=True)
    return lib


def _check(dlls: list[Path]) -> None:
    """The build made the DLLs the runtime loads, and they import nothing that is not on every PC."""
    names = {d.name for d in dlls}
    wanted = {"ggml.dll", "ggml-base.dll", "ggml-vulkan.dll", "ggml-rpc.dll", "ggml-cpu-x64.dll", "ggml-cpu-haswell.dll"}
    for lib in ("llama", "mtmd"):                                              # llama-cpp-python takes either name
        wanted.add(f"lib{lib}.dll" if f"lib{lib}.dll" in names else f"{lib}.dll")
    if not wanted <= names:
        raise WindowsBuildError(f"the cross-build made {sorted(names)}, missing {sorted(wanted - names)}")
    for dll in dlls:
        bad = [i for i in dll_imports(dll) if not ALLOWED_IMPORTS.match(i)]
        if bad:
            raise WindowsBuildError(f"{dll.name} imports {', '.join(bad)}, which a Windows PC may not have "
                                    "(a static link flag is missing)")


def _run(cmd: list[str], log_path: Path, what: str, env: dict[str, str]) -> None:
    with open(log_path, "wb") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env).returncode
    if rc != 0:
        raise WindowsBuildError(f"{what} failed (exit {rc}):\n" + tail(log_path))


def _ninja(build: Path, log_path: Path, env: dict[str, str], *, quiet: bool) -> None:
    """cmake --build with a bar fed by ninja's [done/total] lines, noting the part each step builds."""
    step = re.compile(rb"^\[(\d+)/(\d+)\]")
    bar = Bar("compiling llama.cpp for Windows (once; about 10 min on 2 cores)", total=1.0, unit="",
              enabled=not quiet)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        with watched(proc, bar):
            for line in proc.stdout:
                log.write(line)
                m = step.match(line)
                if m:
                    bar.set_fraction(int(m.group(1)) / max(1, int(m.group(2))))
                    what = describe(line[m.end():].decode("utf-8", "replace").strip())
                    if what:
                        bar.set_note(what)
            proc.wait()
    if proc.returncode != 0:
        raise WindowsBuildError(f"compiling llama.cpp for Windows failed (exit {proc.returncode}):\n" + tail(log_path))

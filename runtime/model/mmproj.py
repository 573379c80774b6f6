"""Projector files (mmproj GGUF, for pictures, sound or both): checking one, and finding one next to a model.

A vision model in GGUF form is two files: the language model and its projector (llama.cpp's
`--mmproj`), published side by side as `mmproj-<model>-f16.gguf` or similar. llmpack takes the
projector only when told (`--mmproj FILE`): one found beside the model is named in a line that
says how to use it, never loaded silently, because a projector made for another model of the
same width would load and then describe pictures as nonsense.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from llmpack.runtime.model.gguf_check import validate_gguf


@dataclass(frozen=True)
class ProjectorInfo:
    path: Path
    name: str | None               # general.name
    projector_type: str | None     # clip.projector_type (gemma3, mlp, qwen2vl_merger, qwen2a, ultravox, ...)
    size: int                      # bytes
    image_size: int | None         # the tower's input side, in pixels (None: it reads sound only)
    hears: bool = False            # it has an audio encoder (clip.has_audio_encoder)

    @property
    def reads(self) -> str:
        """What it takes, as `inspect` and the start-up line say it: "images", "sound" or both."""
        kinds = [k for k, has in (("images", self.image_size is not None), ("sound", self.hears)) if has]
        return " and ".join(kinds) or "images"


def check_mmproj(path: str | os.PathLike[str], offset: int = 0, length: int | None = None) -> ProjectorInfo:
    """The header of a projector file, bounds-checked; GGUFError (one line) when it is not one."""
    header = validate_gguf(path, offset, length, expect="mmproj")
    kv = header.kv
    proj = kv.get("clip.projector_type") or kv.get("clip.vision.projector_type") or kv.get("clip.audio.projector_type")
    name = kv.get("general.name")
    side = kv.get("clip.vision.image_size")
    return ProjectorInfo(Path(path), name if isinstance(name, str) else None, proj if isinstance(proj, str) else None,
                         header.region_length, side if isinstance(side, int) else None,
                         kv.get("clip.has_audio_encoder") is True)


def projectors_beside(model: str | os.PathLike[str]) -> list[Path]:
    """mmproj*.gguf files in the model's folder (case-insensitive), sorted; the model itself excluded."""
    model = Path(model)
    try:
        entries = list(model.parent.iterdir())
    except OSError:
        return []
    return sorted(p for p in entries if p.name.lower().startswith("mmproj") and p.name.lower().endswith(".gguf")
                  and p.is_file() and p.name != model.name)


def beside_hint(model: str | os.PathLike[str]) -> str | None:
    """The line `run` and `build` print when a projector sits beside a model they were not given
    one for (None when there is none)."""
    found = projectors_beside(model)
    if not found:
        return None
    names = ", ".join(p.name for p in found)
    return (f"{names} {'is' if len(found) == 1 else 'are'} next to the model: a vision projector, not used "
            f"unless you pass --mmproj {found[0]} (then the model can read images)")

"""Where a model's bytes are: a whole GGUF file, or a GGUF region inside a bigger file.

A built program stores its model uncompressed at a 64 KiB-aligned offset (builder/packfile.py),
and llama.cpp can load a GGUF that starts at an offset of an open file
(`llama_model_load_from_file_ptr`), so a built program serves its model from its own bytes: no
copy in the per-user cache (docs/PORTABILITY.md, "Disk use"). `ModelFile` carries that region
from the builder's extraction step (which decides) through serving to the engine (which opens it).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelFile:
    path: Path
    offset: int = 0                # where the GGUF starts inside `path`
    length: int | None = None      # its size (None: to the end of the file)
    sha256: str | None = None      # known for built programs: saved chats are kept by it
    mmproj: ModelFile | None = None   # the vision projector a built program carries (builder/mmproj.py)

    @property
    def in_place(self) -> bool:
        """The GGUF is a region of a bigger file (a built program), read where it is."""
        return self.offset > 0

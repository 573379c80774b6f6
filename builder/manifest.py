"""The manifest of a built executable: what model it holds and how to serve it.

Stored as UTF-8 JSON (keys sorted) just before PyInstaller's archive; packfile.py documents the
byte layout and shows an example. ``ModelBlob`` is the model entry, ``Manifest`` the whole
record; :meth:`Manifest.from_dict` refuses an entry that does not add up (sizes, frames, names),
so a damaged or hand-edited manifest cannot point extraction anywhere unexpected.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from llmpack import __version__

FORMAT_VERSION = 1           # of the whole layout (trailer + manifest); see packfile.py
MMPROJ_KEY = "mmproj"        # the vision projector's entry, shaped like "model" (builder/mmproj.py)


@dataclass(frozen=True)
class ModelBlob:
    sha256: str
    size: int                      # raw GGUF bytes
    stored_size: int               # bytes in the container (== size unless zstd)
    offset: int = 0                # absolute offset in the executable (0 in a sidecar file)
    compression: str = "none"      # "none" | "zstd"
    frames: tuple = ()             # zstd: ((offset from model start, stored len, raw len), ...)
    location: str = "embedded"     # "embedded" | "sidecar"
    file: str | None = None        # sidecar: file name next to the executable


@dataclass
class Manifest:
    model: ModelBlob
    recipe: dict = field(default_factory=dict)
    defaults: dict = field(default_factory=dict)  # ctx, parallel, gpu_layers, system, name
    llmpack_version: str = ""
    llama_cpp_version: str | None = None
    built_at: str = ""
    stub_sha256: str = ""
    extra: dict = field(default_factory=dict)     # other manifest_extra keys, kept verbatim
    format_version: int = FORMAT_VERSION
    manifest_offset: int = 0                      # from the trailer, not stored in the JSON
    archive_offset: int = 0

    def to_dict(self) -> dict:
        m = self.model
        model = {"location": m.location, "file": m.file, "offset": m.offset, "size": m.size,
                 "stored_size": m.stored_size, "sha256": m.sha256, "compression": m.compression,
                 "frames": [list(f) for f in m.frames]}
        return {**self.extra, "format_version": self.format_version, "model": model,
                "recipe": self.recipe, "defaults": self.defaults,
                "llmpack_version": self.llmpack_version, "llama_cpp_version": self.llama_cpp_version,
                "built_at": self.built_at, "stub_sha256": self.stub_sha256}

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True).encode("utf-8")

    @classmethod
    def from_dict(cls, d: dict) -> "Manifest":
        """ValueError (or KeyError/TypeError) when the model entry is missing or inconsistent."""
        d = dict(d)
        m = d.pop("model")
        frames = tuple((int(a), int(b), int(c)) for a, b, c in m.get("frames") or ())
        blob = ModelBlob(sha256=str(m["sha256"]), size=int(m["size"]), stored_size=int(m["stored_size"]),
                         offset=int(m["offset"]), compression=m["compression"], frames=frames,
                         location=m.get("location", "embedded"), file=m.get("file"))
        ok = (len(blob.sha256) == 64 and all(c in "0123456789abcdef" for c in blob.sha256)
              and blob.compression in ("none", "zstd") and blob.location in ("embedded", "sidecar")
              and min(blob.size, blob.stored_size, blob.offset) >= 0
              and (blob.location == "embedded" or _plain_name(blob.file))
              and (blob.compression == "none" and blob.stored_size == blob.size
                   or blob.compression == "zstd" and sum(f[2] for f in frames) == blob.size
                   and sum(f[1] for f in frames) == blob.stored_size))
        if not ok:
            raise ValueError("inconsistent model entry")
        known = {k: d.pop(k) for k in ("recipe", "defaults", "llmpack_version", "llama_cpp_version",
                                       "built_at", "stub_sha256", "format_version") if k in d}
        return cls(model=blob, extra=d, **known)


def new_manifest(blob: ModelBlob, manifest_extra: dict | None, stub_sha: str) -> Manifest:
    """The manifest `llmpack build` writes: `manifest_extra` supplies recipe, defaults,
    llama_cpp_version, built_at and any other keys (kept verbatim); the rest is llmpack's."""
    extra = dict(manifest_extra or {})
    clash = {"format_version", "model", "stub_sha256", "llmpack_version"} & extra.keys()
    if clash:
        raise ValueError(f"manifest_extra may not set {sorted(clash)}")
    built_at = extra.pop("built_at", None) or _now()
    return Manifest(model=blob, recipe=extra.pop("recipe", None) or {},
                    defaults=extra.pop("defaults", None) or {}, llmpack_version=__version__,
                    llama_cpp_version=extra.pop("llama_cpp_version", None), built_at=built_at,
                    stub_sha256=stub_sha, extra=extra)


def _now() -> str:
    """UTC build time; SOURCE_DATE_EPOCH (reproducible builds) takes precedence."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = datetime.fromtimestamp(int(epoch), timezone.utc) if epoch else datetime.now(timezone.utc)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and not set(name) & set("/\\:\0")

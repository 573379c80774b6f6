"""The vision projector (mmproj GGUF) inside a built program, at run time.

`llmpack build --mmproj FILE` stores the projector raw right after the model, 64 KiB aligned, and
records it in the manifest under "mmproj" in the model entry's shape (location, offset, size,
sha256; or, with --sidecar, the file `mmproj-<program>.gguf` beside the program).

Unlike the model, the projector cannot be read where it lies inside the program: llama.cpp's
clip loader takes only a file name (mtmd_init_from_file; clip.cpp reads it with fopen and an
ifstream at absolute offsets), with no file-pointer or offset variant such as the text model's
llama_model_load_from_file_ptr. So the first launch copies it, sha256-checked, to the user's cache
as <sha256>.gguf exactly like a compressed model (builder/extract.py), and later launches find it
there. A projector is small next to its model (Gemma 3 4B's: 851 MB beside 2.5 GB).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from llmpack.builder.extract import extract_model
from llmpack.builder.manifest import MMPROJ_KEY, Manifest, ModelBlob
from llmpack.builder.packfile import PackError, read_manifest
from llmpack.progress import ProgressArg, human_bytes


def mmproj_blob(manifest: Manifest) -> ModelBlob | None:
    """The manifest's projector entry, checked like the model's; None when the program has none."""
    entry = (manifest.extra or {}).get(MMPROJ_KEY)
    if entry is None:
        return None
    try:
        blob = Manifest.from_dict({"model": entry}).model
    except (KeyError, TypeError, ValueError):
        raise PackError("the program's manifest has a damaged vision projector entry; rebuild it") from None
    if blob.compression != "none":
        raise PackError("the program's vision projector is stored compressed, which this llmpack cannot read")
    return blob


def mmproj_source(exe_path, manifest: Manifest, progress: ProgressArg = None) -> Path | None:
    """The verified projector file this launch loads: the sidecar file, or the cached copy of the
    embedded one (made on first use); None when the program has no projector."""
    blob = mmproj_blob(manifest)
    if blob is None:
        return None
    return extract_model(exe_path, replace(manifest, model=blob), progress=progress)


def vision_report(path) -> dict:
    """What `inspect` says about images for a model file or a built program: the projector it
    holds (and where), or the projectors lying beside a plain model, or none."""
    # lazy: the GGUF header reader (gguf, numpy) only for `inspect`, not a built program's start
    from llmpack.runtime.model.mmproj import beside_hint, check_mmproj, projectors_beside

    path = Path(path)
    try:
        manifest = read_manifest(path)
    except PackError:
        manifest = None
    if manifest is not None:
        blob = mmproj_blob(manifest)
        if blob is None:
            return {"projector": None, "line": "none: this program reads text only (build with --mmproj to add images)"}
        where = f"beside it as {blob.file}" if blob.location == "sidecar" else f"embedded at byte {blob.offset}"
        info = check_mmproj(path.parent / blob.file) if blob.location == "sidecar" \
            else check_mmproj(path, blob.offset, blob.size)
        return {"projector": {"type": info.projector_type, "name": info.name, "size": blob.size,
                              "sha256": blob.sha256, "location": blob.location},
                "line": f"images: projector {info.projector_type} ({human_bytes(blob.size)}), {where}"}
    hint = beside_hint(path)
    return {"projector": None, "beside": [p.name for p in projectors_beside(path)],
            "line": hint or "none beside the model (a vision model needs its mmproj file: --mmproj FILE)"}

"""The vision projector (mmproj GGUF) inside a built program, at run time.

`llmpack build --mmproj FILE` stores the projector raw right after the model, 64 KiB aligned, and
records it in the manifest under "mmproj" in the model entry's shape (location, offset, size,
sha256; or, with --sidecar, the file `mmproj-<program>.gguf` beside the program).

Like the model, the projector is read where it lies inside the program: llama.cpp's clip loader
takes only a file name upstream, so llmpack patches in `mtmd_init_from_file_at` (a file name and
the GGUF's offset; builder/llama_source.py), and the launch checks its sha256 once, as it does the
model's (builder/extract.py, ``<sha256>.inplace.ok``). Where the installed mtmd library lacks that
function (a llama-cpp-python llmpack did not build), the first launch copies the projector,
sha256-checked, to the user's cache as <sha256>.gguf, like a compressed model, instead.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from llmpack.builder.extract import extract_model, model_source
from llmpack.builder.manifest import MMPROJ_KEY, Manifest, ModelBlob
from llmpack.builder.packfile import PackError, read_manifest
from llmpack.progress import ProgressArg, human_bytes
from llmpack.runtime.model.source import ModelFile


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


def mmproj_source(exe_path, manifest: Manifest, progress: ProgressArg = None) -> ModelFile | None:
    """Where this launch reads the projector from, verified: the program itself at its offset, the
    sidecar file, or the cached copy where this llama.cpp cannot read it in place; None when the
    program has none."""
    blob = mmproj_blob(manifest)
    if blob is None:
        return None
    # lazy: asking mtmd loads llama.cpp, which only a launch that serves the model needs
    from llmpack.runtime.engine.projector import reads_in_place

    as_model = replace(manifest, model=blob)
    if blob.location == "embedded" and reads_in_place():
        return model_source(exe_path, as_model, progress=progress)
    return ModelFile(extract_model(exe_path, as_model, progress=progress), sha256=blob.sha256)


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
        where = f"beside it as {blob.file}" if blob.location == "sidecar" else f"embedded at byte {blob.offset}, read in place"
        info = check_mmproj(path.parent / blob.file) if blob.location == "sidecar" \
            else check_mmproj(path, blob.offset, blob.size)
        return {"projector": {"type": info.projector_type, "name": info.name, "size": blob.size,
                              "sha256": blob.sha256, "location": blob.location},
                "line": f"{info.reads}: projector {info.projector_type} ({human_bytes(blob.size)}), {where}"}
    hint = beside_hint(path)
    return {"projector": None, "beside": [p.name for p in projectors_beside(path)],
            "line": hint or "none beside the model (a vision model needs its mmproj file: --mmproj FILE)"}


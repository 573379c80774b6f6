"""`llmpack build --mmproj`: the projector is packed after the model (or put beside the program
with --sidecar), recorded in the manifest, read by llama.cpp in place (verified once) at run time,
shown by `inspect`, and removed by --forget. A projector lying beside a model is named, never
packed silently."""
from __future__ import annotations

import hashlib
from argparse import Namespace
from pathlib import Path

import pytest
from helpers.stubs import archive, elf_stub  # noqa: F401 - the fake stub fixtures (a real bootloader)
from vision_ggufs import write_tiny_mmproj

from llmpack.builder import packfile
from llmpack.builder.build import BuildError, build_executable
from llmpack.builder.forget import model_files
from llmpack.builder.inspect import cmd_inspect
from llmpack.builder.mmproj import mmproj_blob, mmproj_source, vision_report
from llmpack.builder.packfile import PackError
from llmpack.runtime.model.gguf_check import GGUFError
from llmpack.runtime.model.mmproj import check_mmproj
from llmpack.runtime.model.source import ModelFile


@pytest.fixture
def vision_pair(tiny_model_factory, tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "download"
    folder.mkdir()
    model = folder / "tiny-vlm-Q8_0.gguf"
    model.write_bytes(tiny_model_factory().read_bytes())
    return model, write_tiny_mmproj(folder / "mmproj-tiny-vlm-f16.gguf", n_embd_text=64)


def test_the_projector_is_packed_after_the_model_and_read_in_place(
        elf_stub, vision_pair, tmp_path, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("LLMPACK_CACHE", str(tmp_path / "cache"))
    model, mmproj = vision_pair
    out = tmp_path / "chat"
    result = build_executable(model, out, stub=elf_stub, mmproj=mmproj, progress=False)
    manifest = packfile.read_manifest(out)
    blob = mmproj_blob(manifest)
    data = out.read_bytes()
    assert blob.offset % 65536 == 0 and blob.offset >= manifest.model.offset + manifest.model.size
    assert data[blob.offset:blob.offset + blob.size] == mmproj.read_bytes()
    assert blob.sha256 == hashlib.sha256(mmproj.read_bytes()).hexdigest()
    assert blob.offset + blob.size <= manifest.manifest_offset
    assert result.manifest.to_dict() == manifest.to_dict()
    # llama.cpp (with llmpack's mtmd_init_from_file_at) reads it inside the program: checked once, no copy
    src = mmproj_source(out, manifest)
    assert src == ModelFile(out, blob.offset, blob.size, blob.sha256)
    assert mmproj_source(out, manifest) == src
    kept = model_files(manifest)                  # --forget removes what the check left
    assert [p.name for p in kept if p.name.startswith(blob.sha256)] == [f"{blob.sha256}.inplace.ok"]
    assert "projector mlp" in vision_report(out)["line"] and "read in place" in vision_report(out)["line"]


def test_a_damaged_projector_inside_the_program_is_one_line(
        elf_stub, vision_pair, tmp_path, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("LLMPACK_CACHE", str(tmp_path / "cache"))
    model, mmproj = vision_pair
    out = tmp_path / "chat"
    build_executable(model, out, stub=elf_stub, mmproj=mmproj, progress=False)
    manifest = packfile.read_manifest(out)
    blob = mmproj_blob(manifest)
    with open(out, "r+b") as f:
        f.seek(blob.offset + blob.size - 10)
        f.write(b"\xff" * 10)
    with pytest.raises(PackError, match="corrupted"):
        mmproj_source(out, manifest)


def test_without_llmpacks_loader_the_projector_is_copied_once(elf_stub, vision_pair, tmp_path, monkeypatch) -> None:  # noqa: F811
    """A llama-cpp-python llmpack did not build has no mtmd_init_from_file_at: the projector is
    then copied, sha256-checked, to the cache on the first launch and found there after."""
    import llmpack.runtime.engine.projector as projector

    monkeypatch.setenv("LLMPACK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(projector, "reads_in_place", lambda: False)
    model, mmproj = vision_pair
    out = tmp_path / "chat"
    build_executable(model, out, stub=elf_stub, mmproj=mmproj, progress=False)
    manifest = packfile.read_manifest(out)
    blob = mmproj_blob(manifest)
    src = mmproj_source(out, manifest)
    assert src.offset == 0 and src.path.name == f"{blob.sha256}.gguf"
    assert src.path.read_bytes() == mmproj.read_bytes()
    assert mmproj_source(out, manifest) == src and src.path in model_files(manifest)


def test_a_sidecar_build_puts_the_projector_beside_the_program(elf_stub, vision_pair, tmp_path) -> None:  # noqa: F811
    model, mmproj = vision_pair
    out = tmp_path / "dist" / "chat"
    result = build_executable(model, out, stub=elf_stub, mmproj=mmproj, sidecar=True, progress=False)
    blob = mmproj_blob(result.manifest)
    assert blob.location == "sidecar" and blob.file == "mmproj-chat.gguf"
    assert (out.parent / "mmproj-chat.gguf").read_bytes() == mmproj.read_bytes()
    assert mmproj_source(out, packfile.read_manifest(out)) == ModelFile(out.parent / "mmproj-chat.gguf", sha256=blob.sha256)


def test_a_projector_beside_the_model_is_named_not_packed(
        elf_stub, vision_pair, tmp_path, capsys) -> None:  # noqa: F811
    model, mmproj = vision_pair
    out = tmp_path / "chat"
    build_executable(model, out, stub=elf_stub, progress=False)
    err = capsys.readouterr().err
    assert f"{mmproj.name} is next to the model" in err and f"--mmproj {mmproj}" in err
    assert mmproj_blob(packfile.read_manifest(out)) is None
    assert vision_report(out)["line"].startswith("none: this program reads text only")
    assert vision_report(model)["beside"] == [mmproj.name]
    cmd_inspect(Namespace(model=str(model), ctx=None, json=False))
    assert f"{mmproj.name} is next to the model" in capsys.readouterr().out


def test_wrong_files_for_mmproj_are_one_line(elf_stub, vision_pair, tmp_path) -> None:  # noqa: F811
    model, mmproj = vision_pair
    with pytest.raises(GGUFError, match="not a vision projector"):
        build_executable(model, tmp_path / "chat", stub=elf_stub, mmproj=model, progress=False)
    with pytest.raises(BuildError, match="--mmproj .*no such file"):
        build_executable(model, tmp_path / "chat", stub=elf_stub, mmproj=tmp_path / "nope.gguf", progress=False)
    with pytest.raises(GGUFError, match="vision projector.*not a language model"):
        build_executable(mmproj, tmp_path / "chat", stub=elf_stub, progress=False)
    assert check_mmproj(mmproj).projector_type == "mlp"
    assert not (tmp_path / "chat").exists()

"""`llmpack build --mmproj` with an audio projector: packed after the model like a vision one,
shown by `inspect` as taking sound, and read by llama.cpp inside the program, where it hears."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from audio_ggufs import ROWS_PER_WINDOW, tone, write_tiny_audio_mmproj, write_tiny_audio_model
from helpers.stubs import archive, elf_stub  # noqa: F401 - the fake stub fixtures (a real bootloader)

from llmpack.builder import packfile
from llmpack.builder.build import build_executable
from llmpack.builder.mmproj import mmproj_blob, vision_report
from llmpack.runtime.engine.config import EngineConfig
from llmpack.runtime.engine.model_runner import ModelRunner
from llmpack.runtime.engine.projector import Projector, reads_in_place


def test_an_audio_projector_is_packed_shown_and_heard_in_place(elf_stub, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("LLMPACK_CACHE", str(tmp_path / "cache"))
    model = write_tiny_audio_model(tmp_path / "tiny-audio.gguf")
    mmproj = write_tiny_audio_mmproj(tmp_path / "mmproj-audio.gguf", n_embd_text=64)
    out = tmp_path / "hears"
    build_executable(model, out, stub=elf_stub, mmproj=mmproj, progress=False)
    blob = mmproj_blob(packfile.read_manifest(out))
    line = vision_report(out)["line"]
    assert line.startswith("sound: projector qwen2a") and "read in place" in line, line
    assert reads_in_place(), "this llama.cpp lacks llmpack's mtmd_init_from_file_at"
    runner = ModelRunner(EngineConfig(str(model), n_ctx=2048, n_threads=2))
    proj = Projector(out, runner, n_threads=2, offset=blob.offset)   # inside the program, as a built file loads it
    try:
        assert proj.kinds == {"audio"} and proj.sample_rate == 16000
        mm = proj.prompt(["hear ", tone(1.0), " this"], bos=[])
        rows = proj.encode(mm.spans[0])
        assert rows.shape == (ROWS_PER_WINDOW, 64) and np.isfinite(rows).all()
    finally:
        proj.close()
        runner.close()

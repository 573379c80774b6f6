"""The test-made vision model is real to llama.cpp: its clip loader accepts the tiny projector,
mtmd splits a prompt into text and image chunks, and the tower encodes an image into rows of
the text model's width that depend on the picture."""
from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp as lc
import numpy as np
import pytest
from llama_cpp import mtmd_cpp as mtmd
from picture_files import png
from vision_ggufs import write_tiny_mmproj

from llmpack.runtime.engine.config import EngineConfig
from llmpack.runtime.engine.model_runner import ModelRunner
from llmpack.runtime.engine.media import MEDIA_TOKEN
from llmpack.runtime.engine.projector import Projector, ProjectorLoadError
from llmpack.runtime.media.images import ImageError


@pytest.fixture(scope="module")
def runner(tiny_model: Path):
    r = ModelRunner(EngineConfig(str(tiny_model), n_ctx=512, n_threads=2))
    yield r
    r.close()


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory) -> Path:
    return write_tiny_mmproj(tmp_path_factory.mktemp("vision") / "mmproj-tiny.gguf", n_embd_text=64)


def test_mtmd_loads_tokenizes_and_encodes_the_tiny_projector(runner: ModelRunner, mmproj: Path) -> None:
    """Straight through llama-cpp-python's mtmd binding, nothing of ours in between."""
    params = mtmd.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.warmup = False, 2, False
    ctx = mtmd.mtmd_init_from_file(str(mmproj).encode(), runner.model, params)
    assert ctx, "llama.cpp's clip loader refused the tiny projector"
    try:
        assert mtmd.mtmd_support_vision(ctx) and not mtmd.mtmd_decode_use_mrope(ctx)
        data = png(50, 30, seed=1)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        bmp = mtmd.mtmd_helper_bitmap_init_from_buf(ctx, buf, len(data), False)
        assert bmp and (mtmd.mtmd_bitmap_get_nx(bmp), mtmd.mtmd_bitmap_get_ny(bmp)) == (50, 30)
        text = f"look {mtmd.mtmd_default_marker().decode()} here".encode()
        inp = mtmd.mtmd_input_text(text, len(text), True, True)
        chunks = mtmd.mtmd_input_chunks_init()
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bmp)
        assert mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), bitmaps, 1) == 0
        kinds = [mtmd.mtmd_input_chunk_get_type(mtmd.mtmd_input_chunks_get(chunks, i))
                 for i in range(mtmd.mtmd_input_chunks_size(chunks))]
        assert kinds == [0, 1, 0]                      # text, image, text
        image = mtmd.mtmd_input_chunks_get(chunks, 1)
        assert mtmd.mtmd_input_chunk_get_n_tokens(image) == 16   # (32 / 8) ** 2 patches
        assert mtmd.mtmd_encode_chunk(ctx, image) == 0
        rows = np.ctypeslib.as_array(mtmd.mtmd_get_output_embd(ctx), shape=(16 * 64,)).reshape(16, 64)
        assert np.isfinite(rows).all() and rows.std() > 0.01
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bmp)
    finally:
        mtmd.mtmd_free(ctx)


def test_projector_prompt_puts_placeholders_where_the_image_goes(runner: ModelRunner, mmproj: Path) -> None:
    proj = Projector(mmproj, runner, n_threads=2)
    try:
        mm = proj.prompt(["the picture ", png(seed=1), " shows"], bos=[1])
        assert mm.token_ids[0] == 1 and len(mm.spans) == 1
        img = mm.spans[0]
        assert mm.token_ids[img.start:img.end] == [MEDIA_TOKEN] * 16
        assert MEDIA_TOKEN not in mm.token_ids[:img.start] + mm.token_ids[img.end:]
        assert mm.token_ids[1:img.start] == runner.tokenize("the picture ", False, False)
        a = proj.encode(img)
        b = proj.encode(proj.prompt(["x", png(seed=2), "y"], bos=[]).spans[0])
        assert a.shape == b.shape == (16, 64) and not np.allclose(a, b), "two pictures, same rows"
        same = proj.prompt(["other words ", png(seed=1), "!"], bos=[]).spans[0]
        assert same.digest == img.digest          # the picture is named by its pixels
        assert np.array_equal(proj.encode(same), a)
        with pytest.raises(ImageError, match="damaged or cut off"):
            proj.prompt(["x", png(seed=1)[:-40], "y"], bos=[])
    finally:
        proj.close()


def test_a_projector_for_another_model_is_refused(runner: ModelRunner, tmp_path: Path) -> None:
    wrong = write_tiny_mmproj(tmp_path / "mmproj-wide.gguf", n_embd_text=96)
    with pytest.raises(ProjectorLoadError, match="made for another model"):
        Projector(wrong, runner, n_threads=2)
    with pytest.raises(ProjectorLoadError, match="does not exist"):
        Projector(tmp_path / "missing.gguf", runner)
    assert lc.llama_model_n_embd(runner.model) == 64

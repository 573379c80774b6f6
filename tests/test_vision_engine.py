"""Images through the engine with the test-made vision model (tests/vision_ggufs.py): their rows
count as prompt tokens, really reach the model, are cached by the picture, share steps with text
streams without changing them, and leave the block manager and llama.cpp's memory agreeing."""
from __future__ import annotations

from pathlib import Path

import pytest
from engine_invariants import check_consistency
from helpers.sampling import greedy
from picture_files import gif, jpeg, png, webp
from test_engine import assert_same_or_near_tie
from vision_ggufs import write_tiny_mmproj

from llmpack.runtime.engine.engine import EngineConfig, LLMEngine, PromptTooLongError
from llmpack.runtime.media.images import ImageError
from llmpack.runtime.engine.sampling_params import InvalidParameterError
from llmpack.runtime.llm import collect

IMAGE_ROWS = 16          # the tiny projector: 32 x 32 pixels in 8 x 8 patches


@pytest.fixture(scope="module")
def vlm(tiny_model: Path, tmp_path_factory) -> LLMEngine:
    mmproj = write_tiny_mmproj(tmp_path_factory.mktemp("vlm") / "mmproj-tiny.gguf", n_embd_text=64)
    eng = LLMEngine(EngineConfig(str(tiny_model), n_ctx=1024, max_num_seqs=16, n_threads=2, gpu_layers=0,
                                 mmproj_path=str(mmproj)))
    yield eng
    eng.shutdown()


@pytest.fixture(autouse=True)
def consistent(vlm: LLMEngine):
    yield
    vlm.wait_idle()
    check_consistency(vlm)
    assert vlm.stats().kv_blocks_used == 0


def ask(vlm: LLMEngine, *parts, **kw):
    prompt = vlm.mm.projector.prompt(list(parts), vlm.bos_prefix)
    return collect(vlm.add_request(prompt, greedy(**kw)))


def test_image_rows_count_as_prompt_tokens(vlm: LLMEngine) -> None:
    text_only = collect(vlm.add_request(vlm.tokenize_prompt("what is in the picture ? the answer is"), greedy()))
    with_image = ask(vlm, "what is in the picture ", png(seed=11), "? the answer is")
    assert with_image.num_prompt_tokens == text_only.num_prompt_tokens + IMAGE_ROWS
    assert len(with_image.outputs[0].token_ids) == 12


def test_two_pictures_give_different_greedy_continuations(vlm: LLMEngine) -> None:
    a = ask(vlm, "describe ", png(seed=1), " it is", max_tokens=16).outputs[0].token_ids
    b = ask(vlm, "describe ", png(seed=2), " it is", max_tokens=16).outputs[0].token_ids
    again = ask(vlm, "describe ", png(seed=1), " it is", max_tokens=16).outputs[0].token_ids
    assert a != b, "the image rows did not reach the model"
    assert a == again


def test_every_format_decodes_to_the_same_picture(vlm: LLMEngine) -> None:
    """PNG, WebP (lossless) and GIF of one picture are the same pixels: the same digest, so the
    second and later prompts reuse the first one's encoding and KV."""
    digests = {vlm.mm.projector.prompt([f"x{i}", data, "y"], []).spans[0].digest
               for i, data in enumerate([png(seed=5), webp(seed=5)])}
    assert len(digests) == 1
    assert ask(vlm, "a photo ", jpeg(seed=5), " of").outputs[0].token_ids
    assert ask(vlm, "a photo ", gif(seed=5), " of").outputs[0].token_ids


def test_the_same_picture_next_turn_hits_the_cache_and_is_not_encoded_again(vlm: LLMEngine) -> None:
    turn1 = ["a long conversation about the weather and the sea " * 3, png(seed=21), " what is it ?"]
    encodes = vlm.mm.projector.encodes
    first = ask(vlm, *turn1)
    assert vlm.mm.projector.encodes == encodes + 1
    second = ask(vlm, *turn1, " and what colour ?")
    assert vlm.mm.projector.encodes == encodes + 1, "the picture was encoded again"
    img = vlm.mm.projector.prompt(turn1, vlm.bos_prefix).spans[0]
    assert second.num_cached_tokens >= img.end - vlm.config.block_size
    assert first.num_cached_tokens < img.start + vlm.config.block_size
    # another picture at the same place shares only the text before it
    other = ask(vlm, turn1[0], png(seed=22), turn1[2])
    assert other.num_cached_tokens <= img.start
    assert vlm.mm.projector.encodes == encodes + 2


def test_an_image_stream_among_eight_text_streams_leaves_their_text_unchanged(vlm: LLMEngine) -> None:
    prompts = [vlm.tokenize_prompt(f"the {w} of the world is") for w in
               ("water", "time", "people", "number", "word", "way", "day", "part")]
    params = greedy(24, logprobs=5)
    alone = [collect(vlm.add_request(p, params)).outputs[0] for p in prompts]
    image_prompt = vlm.mm.projector.prompt(["tell me ", png(64, 48, seed=31), " now"], vlm.bos_prefix)
    streams = [vlm.add_request(image_prompt, params)] + [vlm.add_request(p, params) for p in prompts]
    together = [collect(s).outputs[0] for s in streams]
    assert_same_or_near_tie(alone, together[1:])
    assert len(together[0].token_ids) == 24


def test_bad_images_and_impossible_prompts_are_refused_and_the_engine_goes_on(vlm: LLMEngine) -> None:
    proj = vlm.mm.projector
    with pytest.raises(ImageError, match="cut off"):
        proj.prompt(["x", jpeg(seed=1)[:300], "y"], [])
    with pytest.raises(InvalidParameterError, match="ends with an image"):
        vlm.add_request(proj.prompt(["look ", png(seed=1)], vlm.bos_prefix), greedy())
    too_many = ["many:"] + [part for i in range(70) for part in (png(seed=40 + i), ",")]
    with pytest.raises(PromptTooLongError):
        vlm.add_request(proj.prompt(too_many, vlm.bos_prefix), greedy())
    assert ask(vlm, "still ", png(seed=1), " here").outputs[0].token_ids


def test_a_projector_inside_a_bigger_file_is_read_where_it_lies(vlm: LLMEngine, tiny_model: Path, tmp_path) -> None:
    """As in a built program: the projector starts 64 KiB-aligned after other bytes (here, another
    projector, so reading from the file's start would load the wrong weights), and llama.cpp reads
    it there through llmpack's mtmd_init_from_file_at; the answer equals the separate file's."""
    from llmpack.runtime.engine.projector import reads_in_place

    assert reads_in_place(), "the installed llama.cpp lacks llmpack's patch (builder/llama_source.py): ./dev setup"
    decoy = write_tiny_mmproj(tmp_path / "decoy.gguf", n_embd_text=64, seed=9).read_bytes()
    wanted = write_tiny_mmproj(tmp_path / "wanted.gguf", n_embd_text=64).read_bytes()   # the fixture's projector
    offset = -(-len(decoy) // 65536) * 65536
    program = tmp_path / "program"
    program.write_bytes(decoy + bytes(offset - len(decoy)) + wanted + b"trailer")
    parts = ["describe ", png(seed=1), " it is"]

    def answer(path: Path, offset: int = 0) -> list[int]:
        eng = LLMEngine(EngineConfig(str(tiny_model), n_ctx=512, max_num_seqs=4, n_threads=2, gpu_layers=0,
                                     mmproj_path=str(path), mmproj_offset=offset))
        try:
            prompt = eng.mm.projector.prompt(parts, eng.bos_prefix)
            return collect(eng.add_request(prompt, greedy(max_tokens=16))).outputs[0].token_ids
        finally:
            eng.shutdown()

    assert answer(program, offset) == ask(vlm, *parts, max_tokens=16).outputs[0].token_ids
    assert answer(program) != answer(program, offset), "the decoy answers alike: the test could not tell"

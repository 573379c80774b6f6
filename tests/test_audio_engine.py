"""Sound through the engine, against llama.cpp's own reading: the same prompt and clip through
llmpack's engine and through mtmd_helper_eval_chunks (llama.cpp's helper, on a context of its own)
reach the same next-token distribution and greedy text. On a plain model a clip's rows take one
position each; on an M-RoPE model (the Qwen2.5-Omni shape: a qwen2vl text model that hears) they
take one position per row in all four sections (mtmd's set_position_mrope_1d), and a clip's 750
rows are read over several steps of at most n_ubatch rows each."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from audio_ggufs import ROWS_PER_WINDOW, tone, wav_bytes, write_tiny_audio_mmproj, write_tiny_audio_model
from mtmd_reference import mtmd_reference as reference
from test_engine import assert_same_or_near_tie
from vision_ggufs import write_tiny_qwen2vl_model

from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.llm import collect

N_CTX = 2048


def mtmd_reference(eng: LLMEngine, mmproj: Path, text: str, clip: bytes, n: int) -> tuple[list[int], list[int], np.ndarray]:
    """llama.cpp's own reading of `text` (one <clip> marker) and the sound file `clip`: its prompt's
    text tokens, its greedy continuation and the first token's log-probabilities, through
    mtmd_helper_bitmap_init_from_buf (miniaudio), mtmd_tokenize and mtmd_helper_eval_chunks."""
    return reference(eng, mmproj, text, clip, n, marker="<clip>", n_ctx=N_CTX)


@pytest.mark.parametrize("text_model", ["llama", "qwen2vl (M-RoPE)"])
def test_the_engine_hears_a_clip_as_llama_cpps_own_helper_does(text_model: str, tmp_path: Path) -> None:
    model = (write_tiny_audio_model(tmp_path / "tiny.gguf") if text_model == "llama"
             else write_tiny_qwen2vl_model(tmp_path / "tiny-qwen2vl.gguf", n_ctx_train=4096))
    mmproj = write_tiny_audio_mmproj(tmp_path / "mmproj-audio.gguf", n_embd_text=64)
    eng = LLMEngine(EngineConfig(str(model), n_ctx=N_CTX, n_ubatch=256, n_threads=2, gpu_layers=0,
                                 mmproj_path=str(mmproj), speculative="off"))
    try:
        assert eng.mm.projector.mrope == (text_model != "llama")
        clip = wav_bytes(tone(2.0, 440))
        pcm = np.frombuffer(clip[44:], "<i2").astype(np.float32) / 32768     # what miniaudio reads from it
        mm = eng.media_prompt(["listen ", pcm, " it is the"])
        (span,) = mm.spans
        assert span.kind == "audio" and span.n_tokens == span.n_pos == ROWS_PER_WINDOW and span.grid is None
        ref_text, ref_tokens, ref_first = mtmd_reference(eng, mmproj, "listen <clip> it is the", clip, 12)
        assert mm.token_ids[:span.start] + mm.token_ids[span.end:] == ref_text        # the same prompt
        params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=5)
        out = collect(eng.add_request(mm, params)).outputs[0]                      # 750 rows: 3 steps of 256
        first = out.logprobs[0]
        assert first.token_id == ref_tokens[0]
        gaps = [abs(lp - ref_first[tok]) for tok, _, lp in first.top]
        assert max(gaps) < 1e-3, f"first-token log-probabilities differ from llama.cpp's own by {max(gaps):.3f}"

        class Ref:   # the reference in the shape assert_same_or_near_tie reads
            token_ids, logprobs = ref_tokens, out.logprobs
        assert_same_or_near_tie([Ref], [out])
    finally:
        eng.shutdown()

"""llama.cpp's own reading of a prompt with one picture or clip, the reference the engine tests
compare against: the same weights on a context of their own, the media file through
mtmd_helper_bitmap_init_from_buf (stb, miniaudio), mtmd_tokenize and mtmd_helper_eval_chunks, one
sequence, nothing of llmpack's in between."""
from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp as lc
import numpy as np
from llama_cpp import mtmd_cpp as mtmd

from llmpack.runtime.engine.engine import LLMEngine


def mtmd_reference(eng: LLMEngine, mmproj: Path, text: str, media: bytes, n: int, *, marker: str, n_ctx: int,
                   mrope: bool = False) -> tuple[list[int], list[int], np.ndarray]:
    """`text` (with one `marker` where `media` goes): its prompt's text tokens, its greedy
    continuation of `n` tokens and the first token's log-probabilities. `mrope`: the projector must
    place rows by M-RoPE (a check that the reference is the kind of model the test means)."""
    cparams = lc.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_threads, cparams.n_threads_batch = n_ctx, 512, 2, 2
    ctx = lc.llama_init_from_model(eng.runner.model, cparams)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.warmup, params.print_timings = False, 2, False, False
    mctx = mtmd.mtmd_init_from_file(str(mmproj).encode(), eng.runner.model, params)
    chunks = mtmd.mtmd_input_chunks_init()
    batch = lc.llama_batch_init(1, 0, 1)
    try:
        assert ctx and mctx and (not mrope or mtmd.mtmd_decode_use_mrope(mctx))
        buf = (ctypes.c_uint8 * len(media)).from_buffer_copy(media)
        bmp = mtmd.mtmd_helper_bitmap_init_from_buf(mctx, buf, len(media), False)
        raw = text.replace(marker, mtmd.mtmd_default_marker().decode()).encode()
        inp = mtmd.mtmd_input_text(raw, len(raw), True, True)
        assert mtmd.mtmd_tokenize(mctx, chunks, ctypes.byref(inp), (mtmd.mtmd_bitmap_p_ctypes * 1)(bmp), 1) == 0
        mtmd.mtmd_bitmap_free(bmp)
        text_ids: list[int] = []
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == 0:
                k = ctypes.c_size_t()
                text_ids += mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(k))[:k.value]
        n_past = lc.llama_pos(0)
        assert mtmd.mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, 512, True, ctypes.byref(n_past)) == 0
        out: list[int] = []
        first = None
        for _ in range(n):
            row = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, -1), shape=(eng.n_vocab,)).astype(np.float64)
            if first is None:
                first = row - row.max() - np.log(np.exp(row - row.max()).sum())
            out.append(int(row.argmax()))
            batch.n_tokens = 1
            batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.logits[0] = out[-1], n_past.value, 1, True
            batch.seq_id[0][0] = 0
            assert lc.llama_decode(ctx, batch) == 0
            n_past.value += 1
        return text_ids, out, first
    finally:
        lc.llama_batch_free(batch)
        mtmd.mtmd_input_chunks_free(chunks)
        if mctx:
            mtmd.mtmd_free(mctx)
        if ctx:
            lc.llama_free(ctx)

"""Embeddings from a second llama.cpp context on the served model, created on first use.

The chat engine's context keeps its KV cache for generation; embeddings need a context with
`embeddings` on, so they get their own - on the same loaded weights (no second copy of the
model), and only once someone asks, so a chat-only user pays nothing for it.

Pooling is the model's own (mean, CLS, last token) when its GGUF says; a generative model that
says nothing is mean-pooled. Vectors are L2-normalised, as OpenAI's are.

Requests run on HTTP threads, and ctypes lets them run llama.cpp in parallel, so the context,
its batch and its memory are used under one lock: requests take turns, each decoding as many
inputs as fit in one batch per llama_decode.
"""
from __future__ import annotations

import os
import threading

import numpy as np

import llama_cpp as lc

from llmpack.errors import LlmpackError

MAX_SEQS = 16         # inputs decoded together in one llama_decode
POOLING_NAMES = {lc.LLAMA_POOLING_TYPE_MEAN: "mean", lc.LLAMA_POOLING_TYPE_CLS: "cls",
                 lc.LLAMA_POOLING_TYPE_LAST: "last"}


class EmbeddingError(LlmpackError):
    """An input cannot be embedded (too long) or the model cannot embed (HTTP 400)."""


class Embedder:
    def __init__(self, model, n_ctx: int, n_threads: int | None = None) -> None:
        self.model = model                   # the engine's llama_model (shared weights)
        self.n_ctx = n_ctx                   # longest input, in tokens
        self.n_threads = n_threads or max(1, os.cpu_count() or 1)
        self.n_embd = lc.llama_model_n_embd(model)
        self.ctx = None
        self.pooling: str | None = None
        self._lock = threading.Lock()

    def _open(self) -> None:
        params = lc.llama_context_default_params()
        params.embeddings = True
        params.n_ctx = params.n_batch = params.n_ubatch = self.n_ctx   # a whole input in one ubatch
        params.n_seq_max = MAX_SEQS
        params.kv_unified = True
        params.n_threads = params.n_threads_batch = self.n_threads
        params.no_perf = True
        params.pooling_type = lc.LLAMA_POOLING_TYPE_UNSPECIFIED
        ctx = lc.llama_init_from_model(self.model, params)
        if ctx and lc.llama_pooling_type(ctx) not in POOLING_NAMES:   # none (or rank): mean-pool
            lc.llama_free(ctx)
            params.pooling_type = lc.LLAMA_POOLING_TYPE_MEAN
            ctx = lc.llama_init_from_model(self.model, params)
        if not ctx:
            raise EmbeddingError("llama.cpp could not create the embeddings context (out of memory?)")
        self.pooling = POOLING_NAMES[lc.llama_pooling_type(ctx)]
        self.ctx = ctx
        self.mem = lc.llama_get_memory(ctx)
        self.batch = lc.llama_batch_init(self.n_ctx, 0, 1)

    def embed(self, inputs: list[list[int]]) -> np.ndarray:
        """One L2-normalised float32 vector per input (a list of token ids), in order."""
        for i, ids in enumerate(inputs):
            if not ids:
                raise EmbeddingError(f"input {i} is empty")
            if len(ids) > self.n_ctx:
                raise EmbeddingError(f"input {i} is {len(ids)} tokens long; at most {self.n_ctx} can be embedded")
        out = np.empty((len(inputs), self.n_embd), dtype=np.float32)
        with self._lock:
            if self.ctx is None:
                self._open()
            group: list[int] = []
            used = 0
            for i, ids in enumerate(inputs):
                if group and (used + len(ids) > self.n_ctx or len(group) == MAX_SEQS):
                    self._decode(inputs, group, out)
                    group, used = [], 0
                group.append(i)
                used += len(ids)
            if group:
                self._decode(inputs, group, out)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)

    def _decode(self, inputs: list[list[int]], group: list[int], out: np.ndarray) -> None:
        lc.llama_memory_clear(self.mem, True)
        b, n = self.batch, 0
        for seq, i in enumerate(group):
            for pos, token in enumerate(inputs[i]):
                b.token[n], b.pos[n], b.n_seq_id[n] = token, pos, 1
                b.seq_id[n][0] = seq
                b.logits[n] = True
                n += 1
        b.n_tokens = n
        rc = lc.llama_decode(self.ctx, b)
        if rc != 0:
            raise EmbeddingError(f"llama_decode failed with status {rc} while embedding")
        for seq, i in enumerate(group):
            ptr = lc.llama_get_embeddings_seq(self.ctx, seq)
            if not ptr:
                raise EmbeddingError("the model produced no pooled embedding")
            out[i] = np.ctypeslib.as_array(ptr, shape=(self.n_embd,))

    def close(self) -> None:
        with self._lock:
            if self.ctx is not None:
                lc.llama_batch_free(self.batch)
                lc.llama_free(self.ctx)
                self.ctx = None

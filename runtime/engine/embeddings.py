"""Embeddings from a second llama.cpp context on the served model, created on first use.

The chat engine's context keeps its KV cache for generation; embeddings need a context with
`embeddings` on, so they get their own - on the same loaded weights (no second copy of the
model), and only once someone asks, so a chat-only user pays nothing for it.

Pooling is the model's own (mean, CLS, last token) when its GGUF says; a generative model that
says nothing is mean-pooled. Vectors are L2-normalised, as OpenAI's are.

Requests run on HTTP threads, and ctypes lets them run llama.cpp in parallel, so the context,
its batch and its memory are used under one lock: requests take turns; each packs up to
MAX_SEQS inputs into the same llama_decode calls. The decoding itself runs on one thread of the
Embedder's own: ggml's OpenMP keeps a team of n_threads - 1 threads for every thread that ever
computes a graph, so decoding on each of waitress's 128+ threads left up to 128 teams idle behind
(found by the protocol fuzz, issue 46: the server's thread count grew with each embeddings call).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from llmpack.runtime.engine.client import EmbeddingError
from llmpack.runtime.engine.model_runner import model_meta
from llmpack.runtime.hardware.bindings import lc

MAX_SEQS = 16         # inputs decoded together
CHUNK = 64            # tokens per llama_decode when we pool (see _open)
POOLING_NAMES = {lc.LLAMA_POOLING_TYPE_MEAN: "mean", lc.LLAMA_POOLING_TYPE_CLS: "cls",
                 lc.LLAMA_POOLING_TYPE_LAST: "last"}


class Embedder:
    def __init__(self, model, n_ctx: int, n_threads: int | None = None) -> None:
        self.model = model                   # the engine's llama_model (shared weights)
        self.n_ctx = n_ctx                   # longest input, in tokens
        self.n_threads = n_threads or max(1, os.cpu_count() or 1)
        self.n_embd = lc.llama_model_n_embd(model)
        self.ctx = None
        self.pooling: str | None = None
        self._lock = threading.Lock()
        self._decoder = ThreadPoolExecutor(1, thread_name_prefix="llmpack-embed")   # see the module's docstring

    def _model_pooling(self) -> int | None:
        """The pooling the GGUF declares (embedding models do; chat models don't)."""
        arch = model_meta(self.model, "general.architecture")
        try:
            value = int(model_meta(self.model, f"{arch}.pooling_type") or "") if arch else None
        except ValueError:
            return None
        return value if value in POOLING_NAMES else None

    def _open(self) -> None:
        pooling = self._model_pooling()
        params = lc.llama_context_default_params()
        params.embeddings = True
        params.n_ctx = self.n_ctx
        # With its own pooling (often bidirectional attention) a whole input must fit one ubatch.
        # Without, we mean-pool per-token embeddings ourselves, in small batches: llama.cpp
        # computes every token's logits in embeddings mode, and a 262k vocabulary makes that
        # 1 MiB of buffer per token of batch.
        params.n_batch = params.n_ubatch = self.n_ctx if pooling is not None else CHUNK
        params.n_seq_max = MAX_SEQS
        params.kv_unified = True
        params.n_threads = params.n_threads_batch = self.n_threads
        params.no_perf = True
        params.pooling_type = pooling if pooling is not None else lc.LLAMA_POOLING_TYPE_NONE
        ctx = lc.llama_init_from_model(self.model, params)
        if not ctx:
            raise EmbeddingError("llama.cpp could not create the embeddings context (out of memory?)")
        self.pooling = POOLING_NAMES[pooling] if pooling is not None else "mean"
        self.own_pooling = pooling is not None
        self.ctx = ctx
        self.mem = lc.llama_get_memory(ctx)
        self.batch = lc.llama_batch_init(params.n_batch, 0, 1)
        self.n_batch = params.n_batch

    def embed(self, inputs: list[list[int]]) -> np.ndarray:
        """One L2-normalised float32 vector per input (a list of token ids), in order."""
        for i, ids in enumerate(inputs):
            if not ids:
                raise EmbeddingError(f"input {i} is empty")
            if len(ids) > self.n_ctx:
                raise EmbeddingError(f"input {i} is {len(ids)} tokens long; at most {self.n_ctx} can be embedded")
        out = np.zeros((len(inputs), self.n_embd), dtype=np.float64)
        self._decoder.submit(self._decode, inputs, out).result()
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    def _decode(self, inputs: list[list[int]], out: np.ndarray) -> None:
        with self._lock:
            if self.ctx is None:
                self._open()
            group: list[int] = []
            used = 0
            for i, ids in enumerate(inputs):
                if group and (used + len(ids) > self.n_ctx or len(group) == MAX_SEQS):
                    self._run(inputs, group, out)
                    group, used = [], 0
                group.append(i)
                used += len(ids)
            if group:
                self._run(inputs, group, out)

    def _run(self, inputs: list[list[int]], group: list[int], out: np.ndarray) -> None:
        """Decode a group of inputs (one llama.cpp sequence each) and pool them into out."""
        lc.llama_memory_clear(self.mem, True)
        rows = [(seq, pos, t) for seq, i in enumerate(group) for pos, t in enumerate(inputs[i])]
        for start in range(0, len(rows), self.n_batch):
            chunk = rows[start:start + self.n_batch]
            b = self.batch
            for n, (seq, pos, token) in enumerate(chunk):
                b.token[n], b.pos[n], b.n_seq_id[n], b.logits[n] = token, pos, 1, True
                b.seq_id[n][0] = seq
            b.n_tokens = len(chunk)
            rc = lc.llama_decode(self.ctx, b)
            if rc != 0:
                raise EmbeddingError(f"llama_decode failed with status {rc} while embedding")
            if not self.own_pooling:   # sum each token's embedding into its input's row
                per_token = np.ctypeslib.as_array(lc.llama_get_embeddings(self.ctx), shape=(len(chunk), self.n_embd))
                seqs = np.fromiter((seq for seq, _, _ in chunk), dtype=np.int64, count=len(chunk))
                np.add.at(out, np.asarray(group)[seqs], per_token)
        for seq, i in enumerate(group):
            if self.own_pooling:
                ptr = lc.llama_get_embeddings_seq(self.ctx, seq)
                if not ptr:
                    raise EmbeddingError("the model produced no pooled embedding")
                out[i] = np.ctypeslib.as_array(ptr, shape=(self.n_embd,))
            else:
                out[i] /= len(inputs[i])

    def close(self) -> None:
        with self._lock:
            if self.ctx is not None:
                lc.llama_batch_free(self.batch)
                lc.llama_free(self.ctx)
                self.ctx = None
        self._decoder.shutdown(wait=False)

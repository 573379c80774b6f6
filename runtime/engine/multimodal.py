"""Pictures and sound inside the engine: encoding them off the engine thread, scheduling their
rows, and decoding them into the same paged KV cache as text.

How an image travels (vLLM's design, on llama.cpp; a clip of sound travels the same way, as one
causal span of rows per 30-second window, decoded over as many steps as its rows need):
- The request thread tokenizes the prompt with the projector (projector.Projector.prompt): the
  image becomes `n_tokens` placeholder ids (MEDIA_TOKEN) in token_ids, and a media.MediaSpan.
- The engine thread, when it first sees the request, looks the prompt up in the prefix cache
  (no side effects) and hands every image the cache does not cover to the encoder thread here,
  which runs the vision tower while other streams keep decoding. An image already encoded (the
  same picture, by its pixels' digest) comes from a small LRU of embeddings instead.
- The scheduler asks `limit()` how many of a sequence's next tokens may go into this step: a
  chunk never ends inside an image that must be decoded whole (Gemma 3 attends both ways
  inside an image), never starts an image whose rows are not encoded yet, and holds at most one
  image, at its start. So a step's image rows can be decoded first, one llama_decode per image
  with the rows as `embd` (llama.cpp's batch takes tokens or embeddings, not both), and then all
  text rows of the step in one llama_decode whose logits are sampled as before.
- The prefix cache keys a block by its token ids *and* the digest of every image with rows in it
  (MultimodalPrompt.block_extra), so the next turn of a chat with the same photo reuses its KV
  and encodes nothing, and two different photos never share KV. A cache hit may end inside an
  image: the rest of its rows are decoded from its embeddings (the LRU), in one decode when the
  image is non-causal; the cached rows' K/V were computed seeing the whole image, so the
  rest sees exactly what it saw the first time.
- Positions are token indices, except with M-RoPE (the Qwen2-VL family, as llama.cpp's
  mtmd_helper_eval_chunks places them): an image's rows get 4 positions each, a grid at one
  temporal position (MediaSpan.mrope_positions), and advance the sequence's position by the
  image's n_pos (max(nx, ny)), not its n_tokens; text after it continues from there.
  Sequence.position maps a token index to its position, and every KV range the block manager
  and the runner hand llama.cpp goes through it (docs/ARCHITECTURE.md, "Images and positions in
  the block tables"). llama.cpp cannot tell one row of such an image from another by position,
  so the image is decoded whole and neither a cache hit nor a chunk ends inside it
  (MultimodalPrompt.resumable).
"""
from __future__ import annotations

import ctypes
import queue
import threading
import traceback
from typing import TYPE_CHECKING, Callable

import numpy as np

from llmpack.lru import LruCache
from llmpack.runtime.engine.media import MEDIA_TOKEN, MediaSpan, MultimodalPrompt
from llmpack.runtime.engine.model_runner import DecodeError
from llmpack.runtime.engine.projector import Projector, ProjectorLoadError
from llmpack.runtime.engine.sampling_params import InvalidParameterError
from llmpack.runtime.media.audio import AudioError
from llmpack.runtime.media.images import ImageError
from llmpack.runtime.hardware.bindings import lc

if TYPE_CHECKING:
    from llmpack.runtime.engine.block_manager import BlockManager
    from llmpack.runtime.engine.config import EngineConfig
    from llmpack.runtime.engine.model_runner import ModelRunner
    from llmpack.runtime.engine.sequence import Request, ScheduledChunk, Sequence

EMBD_CACHE_BYTES = 256 * 2**20     # encoded images kept for a later turn or a recompute
# text models whose M-RoPE image rows this engine places (llama.cpp's arch for Qwen2-VL and
# Qwen2.5-VL alike); Qwen3-VL's rows are wider than its n_embd (deepstack) and are not handled
MROPE_ARCHS = ("qwen2vl",)


def embedding_cache(max_bytes: int = EMBD_CACHE_BYTES) -> LruCache[bytes, np.ndarray]:
    """Encoded images by digest, least recently used evicted first, up to a byte budget."""
    return LruCache(max_bytes, weigh=lambda rows: rows.nbytes)


class Multimodal:
    """The engine's media side: one projector, one encoder thread, and the hooks the engine,
    scheduler and block manager call. Everything but the encoder thread's loop runs on the
    engine thread."""

    def __init__(self, projector: Projector, runner: "ModelRunner", wakeup: Callable[[], None]) -> None:
        self.projector = projector
        self.runner = runner
        self._wakeup = wakeup
        self.cache = embedding_cache()
        self._jobs: queue.SimpleQueue[tuple[MediaSpan, Request] | None] = queue.SimpleQueue()
        self.failures: queue.SimpleQueue[tuple[Request, str]] = queue.SimpleQueue()   # the engine drains it
        self.encode_seconds = 0.0          # time the encoder spent (benchmarks)
        self._batch = None                 # llama_batch of embedding rows, made on first use
        self._thread = threading.Thread(target=self._encoder, name="llmpack-media-encoder", daemon=True)
        self._thread.start()

    # ---- encoder thread -----------------------------------------------------------------
    def _encoder(self) -> None:
        import time   # lazy: only the encoder thread times itself

        while True:
            job = self._jobs.get()
            if job is None:
                return
            span, req = job
            try:
                rows = self.cache.get(span.digest)
                if rows is None:
                    t0 = time.perf_counter()
                    rows = self.projector.encode(span)
                    self.encode_seconds += time.perf_counter() - t0
                    self.cache.put(span.digest, rows)
                span.embd = rows
            except Exception as exc:  # noqa: BLE001 - one bad image fails its request, not the engine
                traceback.print_exc()
                self.failures.put((req, f"the {span.kind} could not be encoded: {exc}"))
            self._wakeup()

    def request_encode(self, span: MediaSpan, req: "Request") -> None:
        if span.embd is not None or span.queued:
            return
        rows = self.cache.get(span.digest)
        if rows is not None:
            span.embd = rows
            return
        span.queued = True
        self._jobs.put((span, req))

    # ---- engine thread: admission -------------------------------------------------------
    def on_arrival(self, seq: "Sequence", bm: "BlockManager") -> None:
        """Start encoding every image of seq's prompt the prefix cache does not cover."""
        mm: MultimodalPrompt | None = seq.request.mm
        if mm is None:
            return
        cached_tokens = len(bm.match_prefix(seq)) * bm.block_size
        for span in mm.spans:
            if span.end > cached_tokens:
                self.request_encode(span, seq.request)

    def failed(self) -> list[tuple["Request", str]]:
        """Requests whose image the encoder could not encode since the last call, and why."""
        out = []
        while True:
            try:
                out.append(self.failures.get_nowait())
            except queue.Empty:
                return out

    # ---- scheduler hooks ----------------------------------------------------------------
    def limit(self, seq: "Sequence", start: int, n: int) -> int:
        """How many of the n tokens from `start` seq may compute this step (0: wait)."""
        mm = seq.request.mm
        if mm is None or start >= len(mm.token_ids):
            return n
        span = mm.span_at(start)
        if span is not None:                 # the chunk begins with a span's rows
            if span.embd is None:
                self.request_encode(span, seq.request)     # after a preemption, or a trimmed cache hit
                return 0
            if span.whole and n < span.end - start:
                return 0                     # the rest of it in one decode, in a step with room for it
            first_text = min(span.end, start + n)
        else:
            first_text = start
        nxt = next((i.start for i in mm.spans if i.start >= first_text), None)
        if nxt is not None and nxt < start + n:
            n = nxt - start                  # stop before the next span: it starts a chunk of its own
        return n

    # ---- engine thread: one step --------------------------------------------------------
    def decode_media(self, chunks: "list[ScheduledChunk]") -> list[int]:
        """Decode the picture or sound rows at the head of each chunk (one llama_decode each) and return,
        per chunk, the index of its first text token."""
        text_starts: list[int] = []
        for c in chunks:
            mm = c.seq.request.mm
            span = mm.span_at(c.start) if mm is not None else None
            if span is None:
                text_starts.append(c.start)
                continue
            end = min(span.end, c.start + c.num_tokens)
            rows = span.embd[c.start - span.start:end - span.start]
            pos = self._positions(span, c.seq.position, c.start, len(rows))
            try:
                self.decode_embd(rows, pos, c.seq.llama_seq, span.non_causal)
            except Exception:
                self.undo_media(chunks[:len(text_starts)], text_starts)   # the step fails whole
                raise
            text_starts.append(end)
        return text_starts

    def _positions(self, span: MediaSpan, position: Callable[[int], int], start: int, n: int) -> int | np.ndarray:
        """Where rows start..start+n of `span` go: their first position, or with M-RoPE all 4 x n of
        them, as mtmd's helper places them (a picture's grid; sound one after another in every
        section, set_position_mrope_1d)."""
        if span.grid is not None:
            return span.mrope_positions(position(span.start))
        if not self.projector.mrope:
            return start
        return np.tile(np.arange(position(start), position(start) + n, dtype=np.int32), 4)

    def decode_embd(self, rows: np.ndarray, pos0: int | np.ndarray, seq_id: int, non_causal: bool = False) -> None:
        """One llama_decode over embedding rows (an image's) at positions pos0.. of one sequence, or
        at the 4 x n M-RoPE positions `pos0` holds, section-major; no logits. `non_causal`: the rows
        attend to each other both ways (Gemma 3), so all are in it."""
        r = self.runner
        n = len(rows)
        if not 0 < n <= r.n_batch:
            raise ValueError(f"a batch holds 1 to {r.n_batch} rows, got {n}")
        if self._batch is None:
            self._batch = lc.llama_batch_init(r.n_batch, r.n_embd, 1)
            self._own_pos = ctypes.cast(self._batch.pos, ctypes.c_void_p).value
            self._pos4 = np.zeros(4 * r.n_batch, dtype=np.int32)
        b = self._batch
        b.n_tokens = n
        ctypes.memmove(b.embd, np.ascontiguousarray(rows, dtype=np.float32).ctypes.data, rows.size * 4)
        mrope = isinstance(pos0, np.ndarray)
        for i in range(n):
            b.pos[i], b.n_seq_id[i], b.logits[i] = 0 if mrope else pos0 + i, 1, False
            b.seq_id[i][0] = seq_id
        if mrope:   # llama_batch_init made room for one position a row: lend it 4 x n for this call
            if len(pos0) != 4 * n:
                raise ValueError(f"M-RoPE rows take 4 positions each: {len(pos0)} for {n} rows")
            self._pos4[:4 * n] = pos0
            b.pos = ctypes.cast(self._pos4.ctypes.data, ctypes.POINTER(lc.llama_pos))
        if non_causal:
            lc.llama_set_causal_attn(r.ctx, False)
        try:
            rc = lc.llama_decode(r.ctx, b)
        finally:
            if mrope:   # by address: a pointer read from the struct is a view of the field itself
                b.pos = ctypes.cast(self._own_pos, ctypes.POINTER(lc.llama_pos))   # llama_batch_free frees it
            if non_causal:
                lc.llama_set_causal_attn(r.ctx, True)
        if rc != 0:
            raise DecodeError(rc)

    def undo_media(self, chunks: "list[ScheduledChunk]", text_starts: list[int]) -> None:
        """Remove the picture or sound rows decode_media put in llama.cpp (the step failed after it)."""
        for c, t0 in zip(chunks, text_starts):
            if t0 > c.start:
                self.runner.seq_rm(c.seq.llama_seq, c.seq.position(c.start), c.seq.position(t0))

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)
        self.projector.close()
        if self._batch is not None:
            lc.llama_batch_free(self._batch)
            self._batch = None


def media_prompt(mm: "Multimodal | None", parts: list, bos: list[int]) -> MultimodalPrompt:
    """A chat's rendered text, pictures and sound made into a prompt, on the caller's thread (the
    engine's `media_prompt`): ImageError or AudioError when the model cannot read one of them."""
    if mm is None:
        kind = "sound" if any(isinstance(part, np.ndarray) for part in parts) else "pictures"
        error = AudioError if kind == "sound" else ImageError
        raise error(f"this model reads text only: it was started without a projector (--mmproj), so it cannot "
                    f"read {kind}")
    return mm.projector.prompt(parts, bos)


def load_multimodal(config: "EngineConfig", runner: "ModelRunner", wakeup: Callable[[], None]) -> Multimodal | None:
    """The engine's media side for config.mmproj_path (None without one)."""
    if not config.mmproj_path:
        return None
    projector = Projector(config.mmproj_path, runner, config.n_threads, use_gpu=runner.gpu_layers > 0,
                          offset=config.mmproj_offset)
    arch = runner.meta("general.architecture")
    # mtmd takes M-RoPE from the text model's rope type, whatever the projector: the two agree
    if projector.mrope and arch not in MROPE_ARCHS:
        projector.close()
        raise ProjectorLoadError(
            f"{config.mmproj_path} places image rows with M-RoPE, and llmpack's engine does that for "
            f"Qwen2-VL and Qwen2.5-VL only, not for this {arch} model (Qwen3-VL's rows carry extra "
            f"layers' inputs). Gemma 3, LLaVA-style, SmolVLM, Pixtral and most other vision models work")
    return Multimodal(projector, runner, wakeup)


def check_media_fit(mm: MultimodalPrompt, n_batch: int) -> list[int]:
    """Refuse, on the caller's thread, a prompt the engine could not run: a picture with more rows
    than one step holds (sound is causal and may be decoded over several steps, unless its model
    says otherwise), or a prompt that ends in a picture or clip (there is no text to sample after).
    Returns the prompt's token ids."""
    for i, span in enumerate(mm.spans):
        if span.n_tokens > n_batch and (span.kind == "image" or span.whole):
            what = "a smaller image" if span.kind == "image" else "a shorter clip"
            raise InvalidParameterError(f"{span.kind} {i + 1}", f"becomes {span.n_tokens} tokens, more than the "
                                        f"{n_batch} one step of this server reads; send {what}")
    if mm.token_ids and mm.token_ids[-1] == MEDIA_TOKEN:
        what = "an image" if mm.spans[-1].kind == "image" else "a sound clip"
        raise InvalidParameterError("prompt", f"ends with {what}; put some text after it")
    return list(mm.token_ids)

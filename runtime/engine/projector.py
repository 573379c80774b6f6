"""A model's projector (the mmproj GGUF: a vision encoder, an audio encoder or both), through
llama.cpp's mtmd library.

One projector reads pictures and sound alike. mtmd does three things for us: it preprocesses a
picture (raw RGB, decoded in a sandboxed child by runtime/media/pictures.py) or a clip into a
bitmap and then into chunks (a picture resized, normalised, split into tiles as the projector
wants; sound as a log-mel spectrogram in 30-second windows), it says how many embedding rows each
chunk becomes in the text model's sequence, and it runs the encoder and projector (`encode`),
leaving those rows in its output buffer. Everything after that - where the
rows go in the KV cache, when they are decoded, what is cached - is the engine's
(runtime/engine/multimodal.py), so pictures and sound share the block tables, the prefix cache and
the token budget with text (media.MediaSpan).

A picture comes as raw RGB (or its file's bytes, decoded in the sandbox on the way); sound comes as
mono float32 PCM at the model's rate, already decoded in the sandbox child (runtime/media/audio.py):
no picture or audio decoder runs in this process.

Threads: `prompt()` runs on request threads (preprocessing takes a while, and must not hold up
the engine); `encode()` runs on the encoder thread only. mtmd_tokenize takes a const context, so
preprocessing may overlap an encode; encodes are serialised.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from llmpack.errors import LlmpackError
from llmpack.runtime.engine.media import MEDIA_TOKEN, MediaSpan, MultimodalPrompt
from llmpack.runtime.engine.model_runner import _route_llama_log
from llmpack.runtime.media.audio import AudioError
from llmpack.runtime.media.images import ImageError
from llmpack.runtime.media.pictures import Picture
from llmpack.runtime.media.pictures import decode as decode_picture

if TYPE_CHECKING:
    from llmpack.runtime.engine.model_runner import ModelRunner

__all__ = ["Projector", "ProjectorLoadError", "reads_in_place"]
_TEXT_CHUNK, _IMAGE_CHUNK, _AUDIO_CHUNK = 0, 1, 2   # mtmd_input_chunk_type
_KINDS = {_IMAGE_CHUNK: "image", _AUDIO_CHUNK: "audio"}


class ProjectorLoadError(LlmpackError):
    pass


class _Mtmd:
    """llama.cpp's mtmd library (llama_cpp.mtmd_cpp), loaded when a projector is first used: a text
    model never loads it, and a llama-cpp-python built without it (LLAVA_BUILD=OFF) still serves
    text models. Every built file has it (the stub's self-test loads it)."""

    _lib = None

    def __getattr__(self, name: str):
        if _Mtmd._lib is None:
            try:
                from llama_cpp import mtmd_cpp   # lazy: loading it needs the mtmd library, only for images
            except (OSError, ImportError) as exc:
                raise ProjectorLoadError(f"this build of llmpack cannot read pictures (llama.cpp's mtmd library is "
                                         f"missing: {exc}); start it without --mmproj") from None
            _Mtmd._lib = mtmd_cpp
        return getattr(_Mtmd._lib, name)


mtmd = _Mtmd()


def _init_at():
    """llmpack's `mtmd_init_from_file_at` (builder/llama_source.py patches it into llama.cpp):
    the projector read where it lies inside a built program. None where the installed mtmd library
    lacks it (a llama-cpp-python llmpack did not build), so the caller copies the projector out."""
    lib = getattr(mtmd, "_libmtmd", None)
    fn = getattr(lib, "mtmd_init_from_file_at", None) if lib is not None else None
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p, mtmd.mtmd_context_params]
    fn.restype = ctypes.c_void_p
    return fn


def reads_in_place() -> bool:
    """Whether a projector inside a built program can be loaded where it is (no copy to the cache)."""
    try:
        return _init_at() is not None
    except ProjectorLoadError:
        return False


class _Chunk:
    """Our own copy of one mtmd chunk (mtmd_input_chunk_copy), freed when its span goes."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __del__(self) -> None:
        if self.ptr:
            mtmd.mtmd_input_chunk_free(ctypes.c_void_p(self.ptr))
            self.ptr = 0


class Projector:
    """An mmproj GGUF loaded against the text model `runner` holds (their widths must agree).
    `kinds`: what it reads ("image", "audio"); `sample_rate`: the sound it takes, 0 if it cannot hear."""

    def __init__(self, path: str | os.PathLike, runner: "ModelRunner", n_threads: int | None = None,
                 use_gpu: bool = False, offset: int = 0) -> None:
        self.path = str(path)
        if not Path(self.path).is_file():
            raise ProjectorLoadError(f"the projector file {self.path} does not exist")
        _route_mtmd_log()
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.print_timings = False
        params.n_threads = n_threads or max(1, os.cpu_count() or 1)
        params.warmup = False
        if offset:   # inside a built program (builder/mmproj.py decided, having checked reads_in_place)
            init_at = _init_at()
            if init_at is None:
                raise ProjectorLoadError("this llama.cpp cannot read a projector inside another file; "
                                         "rebuild llmpack's runtime (./dev setup)")
            self.ctx = init_at(os.fsencode(self.path), offset, runner.model, params)
        else:
            self.ctx = mtmd.mtmd_init_from_file(os.fsencode(self.path), runner.model, params)
        if not self.ctx:
            raise ProjectorLoadError(
                f"llama.cpp could not load the projector {self.path}: it is not an mmproj GGUF, or it was made "
                f"for another model (its output width must match the model's). Set LLMPACK_DEBUG=1 to see why.")
        self.kinds = frozenset(kind for kind, has in (("image", mtmd.mtmd_support_vision(self.ctx)),
                                                      ("audio", mtmd.mtmd_support_audio(self.ctx))) if has)
        if not self.kinds:
            self.close()
            raise ProjectorLoadError(f"{self.path} is a projector with neither a vision nor an audio encoder")
        self.sample_rate = int(mtmd.mtmd_get_audio_sample_rate(self.ctx)) if "audio" in self.kinds else 0
        self.mrope = bool(mtmd.mtmd_decode_use_mrope(self.ctx))
        self.n_embd = runner.n_embd
        self._encode_lock = threading.Lock()
        self.encodes = 0                  # images encoded so far (the cache tests count them)

    # ---- request threads ------------------------------------------------------------------
    def bitmap(self, picture: "Picture | bytes", media_type: str | None = None) -> tuple[int, bytes]:
        """An mtmd bitmap (the caller frees it) and its digest, from a decoded Picture or from bytes,
        which are decoded first in a sandboxed child (pictures.decode): the bitmap is built from raw
        RGB, so no picture file reaches llama.cpp's own decoder (stb_image) in this process."""
        if not isinstance(picture, Picture):
            picture = decode_picture(picture, media_type)
        nx, ny, pixels = picture.width, picture.height, picture.rgb
        bmp = mtmd.mtmd_bitmap_init(nx, ny, ctypes.cast(ctypes.c_char_p(pixels), ctypes.POINTER(ctypes.c_uint8)))
        if not bmp:
            raise ImageError(f"llama.cpp could not take the {nx} x {ny} picture")
        digest = hashlib.sha256(nx.to_bytes(4, "little") + ny.to_bytes(4, "little") + pixels).digest()
        mtmd.mtmd_bitmap_set_id(bmp, digest.hex().encode())
        return bmp, digest

    def audio_bitmap(self, pcm: np.ndarray) -> int:
        """An mtmd bitmap of mono float32 PCM at this model's rate (the caller frees it), named by the
        samples and the rate. The sound was decoded elsewhere (the sandbox child): here it is only copied."""
        if "audio" not in self.kinds:
            raise AudioError("this model's projector has no audio encoder: it cannot hear")
        pcm = np.ascontiguousarray(pcm, dtype=np.float32)
        if pcm.ndim != 1 or pcm.size == 0:
            raise AudioError("the audio holds no samples")
        bmp = mtmd.mtmd_bitmap_init_from_audio(pcm.size, pcm.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        if not bmp:
            raise AudioError("llama.cpp could not take the audio")
        digest = hashlib.sha256(b"pcm" + self.sample_rate.to_bytes(4, "little") + pcm.tobytes()).digest()
        mtmd.mtmd_bitmap_set_id(bmp, digest.hex().encode())
        return bmp

    def prompt(self, parts: Sequence[str | tuple[str, bool] | Picture | bytes | tuple[bytes, str] | np.ndarray],
               bos: list[int]) -> MultimodalPrompt:
        """Tokenize a rendered prompt given as text pieces (a str, whose special tokens are
        parsed, or (text, parse_special)), pictures (a decoded Picture, or bytes or (bytes, media type),
        decoded in the sandbox) and sound (mono float32 PCM at `sample_rate`, a numpy array), in order.
        `bos`: ids to put first unless the text already starts with them.
        Raises ImageError or AudioError for a picture or clip that cannot be used."""
        bitmaps: list[int] = []
        c_parts = []
        keep = []
        try:
            for part in parts:
                p = mtmd.mtmd_input_part()
                if isinstance(part, np.ndarray):
                    bitmaps.append(self.audio_bitmap(part))
                    p.bitmap = bitmaps[-1]
                elif isinstance(part, str) or (isinstance(part, tuple) and isinstance(part[0], str)):
                    piece, special = (part, True) if isinstance(part, str) else part
                    raw = piece.encode("utf-8", errors="replace")
                    text = mtmd.mtmd_input_text(raw, len(raw), False, special)
                    keep += [raw, text]
                    p.text = ctypes.pointer(text)
                else:
                    if "image" not in self.kinds:
                        raise ImageError("this model's projector has no vision encoder: it cannot see pictures")
                    data, media_type = part if isinstance(part, tuple) else (part, None)
                    bmp, _ = self.bitmap(data, media_type)   # a Picture, or bytes decoded in the sandbox
                    bitmaps.append(bmp)
                    p.bitmap = bmp
                keep.append(p)
                c_parts.append(ctypes.pointer(p))
            array = (ctypes.POINTER(mtmd.mtmd_input_part) * len(c_parts))(*c_parts)
            chunks = mtmd.mtmd_input_chunks_init()
            try:
                rc = mtmd.mtmd_tokenize_from_parts(self.ctx, chunks, array, len(c_parts), False)
                if rc != 0:
                    error = AudioError if any(isinstance(part, np.ndarray) for part in parts) else ImageError
                    raise error(f"llama.cpp could not prepare the picture(s) or sound for this model (error {rc})")
                return self._collect(chunks, bos)
            finally:
                mtmd.mtmd_input_chunks_free(chunks)
        finally:
            for bmp in bitmaps:
                mtmd.mtmd_bitmap_free(bmp)

    def _collect(self, chunks, bos: list[int]) -> MultimodalPrompt:
        ids: list[int] = []
        spans: list[MediaSpan] = []
        seen: dict[str, int] = {}        # a clip longer than one window (or a tiled picture) has one id per chunk
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            kind = mtmd.mtmd_input_chunk_get_type(chunk)
            if kind == _TEXT_CHUNK:
                n = ctypes.c_size_t()
                ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                ids += ptr[:n.value]
            elif kind in _KINDS:
                if not ids and bos:
                    ids += bos
                n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
                name = mtmd.mtmd_input_chunk_get_id(chunk).decode()
                k = seen[name] = seen.get(name, -1) + 1
                digest = bytes.fromhex(name)
                if k:                    # the k-th window of the same clip: rows of their own
                    digest = hashlib.sha256(digest + k.to_bytes(4, "little")).digest()
                copy = _Chunk(mtmd.mtmd_input_chunk_copy(chunk))
                spans.append(MediaSpan(digest, len(ids), n_tokens, mtmd.mtmd_input_chunk_get_n_pos(chunk), copy,
                                       bool(mtmd.mtmd_decode_use_non_causal(self.ctx, chunk)),
                                       grid=self._grid(chunk, n_tokens) if kind == _IMAGE_CHUNK else None,
                                       kind=_KINDS[kind]))
                ids += [MEDIA_TOKEN] * n_tokens
            else:
                raise ImageError("this model's projector produced a kind of input llmpack does not handle")
        if bos and ids[:len(bos)] != bos:
            ids[:0] = bos
            for span in spans:
                span.start += len(bos)
        return MultimodalPrompt(ids, spans)

    def _grid(self, chunk, n_tokens: int) -> tuple[int, int] | None:
        """An M-RoPE image's grid of rows (mtmd_image_tokens_get_nx / _ny); None for other models."""
        if not self.mrope:
            return None
        tokens = mtmd.mtmd_input_chunk_get_tokens_image(chunk)
        nx, ny = mtmd.mtmd_image_tokens_get_nx(tokens), mtmd.mtmd_image_tokens_get_ny(tokens)
        if nx * ny != n_tokens:
            raise ImageError(f"llama.cpp laid this image out as {nx} x {ny} rows but made {n_tokens} of them; "
                             f"llmpack cannot place it")
        return nx, ny

    # ---- encoder thread -----------------------------------------------------------------
    def encode(self, span: MediaSpan) -> np.ndarray:
        """Run the encoder and projector on one picture or window of sound: its (n_tokens, n_embd) rows."""
        with self._encode_lock:
            rc = mtmd.mtmd_encode_chunk(self.ctx, ctypes.c_void_p(span.chunk.ptr))
            if rc != 0:
                raise RuntimeError(f"llama.cpp could not encode the {span.kind} (error {rc})")
            ptr = mtmd.mtmd_get_output_embd(self.ctx)
            rows = np.ctypeslib.as_array(ptr, shape=(span.n_tokens * self.n_embd,)).copy()
            self.encodes += 1
        return rows.reshape(span.n_tokens, self.n_embd)

    def close(self) -> None:
        if getattr(self, "ctx", None):
            mtmd.mtmd_free(self.ctx)
            self.ctx = None


def _route_mtmd_log() -> None:
    """mtmd and its helpers log every image they read to stderr; send it where llama.cpp's own log
    goes (model_runner: errors with LLMPACK_DEBUG=1, everything with --verbose)."""
    callback = getattr(_route_llama_log, "callback", None)
    if callback is not None:
        mtmd.mtmd_log_set(callback, ctypes.c_void_p(0))
        mtmd.mtmd_helper_log_set(callback, ctypes.c_void_p(0))

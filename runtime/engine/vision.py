"""A model's image projector (the mmproj GGUF), through llama.cpp's mtmd library.

mtmd does three things for us: it preprocesses a bitmap (raw RGB, decoded in a sandboxed child
by pictures.py) into an "image chunk" (resized, normalised, split into tiles as the projector wants), it says how
many embedding rows the chunk becomes in the text model's sequence, and it runs the vision tower
and projector (`encode`), leaving those rows in its output buffer. Everything after that -
where the rows go in the KV cache, when they are decoded, what is cached - is the engine's
(runtime/engine/multimodal.py), so images share the block tables, the prefix cache and the
token budget with text.

Threads: `prompt()` runs on request threads (decoding and preprocessing an image takes a while,
and must not hold up the engine); `encode()` runs on the encoder thread only. mtmd_tokenize
takes a const context, so preprocessing may overlap an encode; encodes are serialised.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from llmpack.errors import LlmpackError
from llmpack.runtime.engine.images import ImageError
from llmpack.runtime.engine.pictures import Picture
from llmpack.runtime.engine.pictures import decode as decode_picture

from llmpack.runtime.engine.model_runner import _route_llama_log

if TYPE_CHECKING:
    from llmpack.runtime.engine.model_runner import ModelRunner

IMAGE_TOKEN = -1      # the placeholder id of an image's rows in a sequence's token_ids (never a real token)
_TEXT_CHUNK, _IMAGE_CHUNK = 0, 1   # mtmd_input_chunk_type


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


@dataclass(eq=False)
class ImageSpan:
    """One image in a prompt: `n_tokens` embedding rows starting at token index `start`.
    `digest` names its pixels (sha256 of the decoded RGB and its size): two prompts with the same
    picture share the prefix cache and the encoder cache whatever file format carried it."""
    digest: bytes
    start: int
    n_tokens: int
    n_pos: int                   # positions it advances (fewer than n_tokens with M-RoPE)
    chunk: int                   # our own copy of mtmd's chunk (freed with the span)
    non_causal: bool             # its rows must be decoded together, attending both ways (Gemma 3)
    embd: np.ndarray | None = None   # (n_tokens, n_embd) float32 once encoded (set by the encoder thread)
    queued: bool = False             # handed to the encoder (engine thread only)
    grid: tuple[int, int] | None = None   # M-RoPE: its rows as nx columns by ny rows (None: one position each)

    @property
    def end(self) -> int:
        return self.start + self.n_tokens

    def mrope_positions(self, pos0: int) -> np.ndarray:
        """The 4 positions of every row for llama_batch.pos, section-major ([t..., y..., x..., z...]),
        as mtmd's helper sets them (mtmd_image_tokens_get_decoder_pos, set_position_mrope_2d): row i
        of the nx-wide grid at temporal position pos0, height pos0 + i // nx, width pos0 + i % nx."""
        nx, _ = self.grid
        i = np.arange(self.n_tokens, dtype=np.int32)
        return np.concatenate([np.full(self.n_tokens, pos0, np.int32), pos0 + i // nx, pos0 + i % nx,
                               np.zeros(self.n_tokens, np.int32)])

    def __del__(self) -> None:
        if self.chunk:
            mtmd.mtmd_input_chunk_free(ctypes.c_void_p(self.chunk))
            self.chunk = 0


@dataclass(eq=False)
class MultimodalPrompt:
    """A tokenized prompt with images: token_ids holds IMAGE_TOKEN at every image row."""
    token_ids: list[int]
    images: list[ImageSpan]

    def __len__(self) -> int:   # a prompt's length, as for a list of token ids
        return len(self.token_ids)

    def position(self, index: int) -> int:
        """The position llama.cpp keeps for token `index` (the temporal one, with M-RoPE): its index,
        except that each M-RoPE image before it advanced the position by its n_pos (max(nx, ny))
        instead of its n_tokens, and all rows of an M-RoPE image share the image's first position.
        Tokens past the prompt (generated text) continue from the last image's shift."""
        shift = 0
        for img in self.images:
            if index < img.start:
                break
            if index < img.end and img.grid is not None:
                return img.start + shift
            if index >= img.end:
                shift += img.n_pos - img.n_tokens
        return index + shift

    def resumable(self, index: int) -> int:
        """The last token index at or before `index` from which a sequence can be computed on: an
        M-RoPE image's rows all sit at one position, so llama.cpp cannot tell its first rows' cells
        from its last ones' and a cache hit or a chunk must not end inside one."""
        for img in self.images:
            if img.grid is not None and img.start < index < img.end:
                return img.start
        return index

    def image_at(self, index: int) -> ImageSpan | None:
        """The image whose rows include token index `index`, if any."""
        for img in self.images:
            if img.start <= index < img.end:
                return img
        return None

    def block_extra(self, k: int, block_size: int) -> bytes:
        """What the prefix cache must know about block k beyond its token ids: the digest and
        start of every image with rows in it, so that two different pictures never share KV."""
        lo, hi = k * block_size, (k + 1) * block_size
        return b"".join(img.digest + img.start.to_bytes(4, "little")
                        for img in self.images if img.start < hi and img.end > lo)


class Projector:
    """An mmproj GGUF loaded against the text model `runner` holds (their widths must agree)."""

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
        if not mtmd.mtmd_support_vision(self.ctx):
            self.close()
            raise ProjectorLoadError(f"{self.path} is a projector without a vision encoder (audio only?)")
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

    def prompt(self, parts: Sequence[str | tuple[str, bool] | Picture | bytes | tuple[bytes, str]],
               bos: list[int]) -> MultimodalPrompt:
        """Tokenize a rendered prompt given as text pieces (a str, whose special tokens are
        parsed, or (text, parse_special)) and images (raw bytes, or (bytes, media type)), in order.
        `bos`: ids to put first unless the text already starts with them.
        Raises ImageError for an image that cannot be used."""
        bitmaps: list[int] = []
        c_parts = []
        keep = []
        try:
            for part in parts:
                p = mtmd.mtmd_input_part()
                if isinstance(part, str) or (isinstance(part, tuple) and isinstance(part[0], str)):
                    piece, special = (part, True) if isinstance(part, str) else part
                    raw = piece.encode("utf-8", errors="replace")
                    text = mtmd.mtmd_input_text(raw, len(raw), False, special)
                    keep += [raw, text]
                    p.text = ctypes.pointer(text)
                else:
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
                    raise ImageError(f"llama.cpp could not prepare the image(s) for this model (error {rc})")
                return self._collect(chunks, bos)
            finally:
                mtmd.mtmd_input_chunks_free(chunks)
        finally:
            for bmp in bitmaps:
                mtmd.mtmd_bitmap_free(bmp)

    def _collect(self, chunks, bos: list[int]) -> MultimodalPrompt:
        ids: list[int] = []
        images: list[ImageSpan] = []
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            kind = mtmd.mtmd_input_chunk_get_type(chunk)
            if kind == _TEXT_CHUNK:
                n = ctypes.c_size_t()
                ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                ids += ptr[:n.value]
            elif kind == _IMAGE_CHUNK:
                if not ids and bos:
                    ids += bos
                n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
                copy = mtmd.mtmd_input_chunk_copy(chunk)
                digest = bytes.fromhex(mtmd.mtmd_input_chunk_get_id(chunk).decode())
                images.append(ImageSpan(digest, len(ids), n_tokens, mtmd.mtmd_input_chunk_get_n_pos(chunk),
                                        copy, bool(mtmd.mtmd_decode_use_non_causal(self.ctx, chunk)),
                                        grid=self._grid(chunk, n_tokens)))
                ids += [IMAGE_TOKEN] * n_tokens
            else:
                raise ImageError("this model's projector produced a kind of input llmpack does not handle (audio?)")
        if bos and ids[:len(bos)] != bos:
            ids[:0] = bos
            for img in images:
                img.start += len(bos)
        return MultimodalPrompt(ids, images)

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
    def encode(self, span: ImageSpan) -> np.ndarray:
        """Run the vision tower and projector on one image: its (n_tokens, n_embd) rows."""
        with self._encode_lock:
            rc = mtmd.mtmd_encode_chunk(self.ctx, ctypes.c_void_p(span.chunk))
            if rc != 0:
                raise RuntimeError(f"llama.cpp could not encode the image (error {rc})")
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

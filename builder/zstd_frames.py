"""A model stored as independent zstd frames (``llmpack build --compress``).

Each frame is a complete zstd frame (content size and checksum included) of at most
``FRAME_SIZE`` raw bytes; the manifest lists ``[offset from model start, stored length, raw
length]`` for each (layout: packfile.py). Independent frames let both sides use every core:
frames are compressed and decompressed on a thread pool and written in order.
"""
from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, Callable, Protocol

from llmpack.builder.hashing import Hasher, read_exact
from llmpack.builder.manifest import ModelBlob
from llmpack.builder.packfile import PackError

FRAME_SIZE = 16 * 1024 * 1024
ZSTD_LEVEL = 3
AUTO_MAX_RATIO = 0.90        # --compress auto: only when the model shrinks below 90 %
MAX_WORKERS = 8


class Sink(Protocol):
    """Where frames go: a sequential writer that knows its position."""

    pos: int

    def write(self, data: bytes) -> None: ...


def zstd() -> Any:
    """The zstandard module (a dependency), imported on first use: uncompressed models never need it."""
    import zstandard   # lazy: only --compress and compressed models need it

    return zstandard


def _workers() -> int:
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


def choose_compression(model_path: Path, size: int, compress: str) -> str:
    """"none" or "zstd" for --compress none|zstd|auto; auto compresses 16 samples of 1 MiB."""
    if compress not in ("none", "zstd", "auto"):
        raise ValueError(f"compress must be 'none', 'zstd' or 'auto', not {compress!r}")
    if compress != "auto":
        return compress
    cctx = zstd().ZstdCompressor(level=ZSTD_LEVEL)
    sample, n = 1024 * 1024, 16
    raw = packed = 0
    with open(model_path, "rb") as f:
        for i in range(n):
            f.seek((size - sample) * i // (n - 1) if size > sample else 0)
            chunk = f.read(sample)
            raw, packed = raw + len(chunk), packed + len(cctx.compress(chunk))
            if size <= sample:
                break
    return "zstd" if packed < AUTO_MAX_RATIO * raw else "none"


def write_frames(src: BinaryIO, size: int, out: Sink, bar: Callable[[int], None]) -> ModelBlob:
    """Compress `size` bytes of `src` into independent frames written to `out`, in order."""
    lib, local = zstd(), threading.local()

    def compress(buf: bytes) -> bytes:
        if not hasattr(local, "c"):
            local.c = lib.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, write_content_size=True)
        return local.c.compress(buf)

    workers = _workers()
    base, frames, pending, hasher = out.pos, [], deque(), Hasher()

    def flush_one() -> None:
        fut, raw_len = pending.popleft()
        data = fut.result()
        frames.append((out.pos - base, len(data), raw_len))
        out.write(data)
        bar(raw_len)

    with ThreadPoolExecutor(workers) as pool:
        for start in range(0, size, FRAME_SIZE):
            buf = read_exact(src, min(FRAME_SIZE, size - start))
            hasher.update(buf)
            pending.append((pool.submit(compress, buf), len(buf)))
            if len(pending) >= 2 * workers:
                flush_one()
        while pending:
            flush_one()
    return ModelBlob(sha256=hasher.hexdigest(), size=size, stored_size=out.pos - base,
                     compression="zstd", frames=tuple(frames))


def read_frames(exe_path: Path, m: ModelBlob, write: Callable[[bytes], object], bar: Callable[[int], None]) -> str:
    """Decompress the model's frames from `exe_path` to `write`, in order; returns their sha256.
    A frame whose declared or actual size is wrong is reported before it can size a buffer."""
    lib, local = zstd(), threading.local()
    opened: list[BinaryIO] = []

    def decompress(off: int, stored: int, raw: int) -> bytes:
        if not hasattr(local, "f"):
            local.f, local.d = open(exe_path, "rb"), lib.ZstdDecompressor()
            opened.append(local.f)
        local.f.seek(m.offset + off)
        frame = local.f.read(stored)
        try:  # check the declared size before letting it size the output buffer
            ok = lib.get_frame_parameters(frame).content_size == raw
            data = local.d.decompress(frame) if ok else b""
        except lib.ZstdError:
            data = b""
        if len(data) != raw:
            raise PackError(f"the model inside {exe_path} is corrupted (a zstd frame is damaged); "
                            "re-download or rebuild it")
        return data

    workers, pending, hasher = _workers(), deque(), Hasher()
    try:
        with ThreadPoolExecutor(workers) as pool:
            for i, frame in enumerate(m.frames):
                pending.append(pool.submit(decompress, *frame))
                while pending and (len(pending) > 2 * workers or i == len(m.frames) - 1):
                    data = pending.popleft().result()
                    hasher.update(data)
                    write(data)
                    bar(len(data))
    finally:
        for f in opened:
            f.close()
    return hasher.hexdigest()

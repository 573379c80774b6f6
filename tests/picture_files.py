"""Image files for the vision tests, good and hostile, made here (Pillow for the codecs, raw
bytes for what no encoder would write)."""
from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def _picture(width: int, height: int, seed: int) -> Image.Image:
    """A picture with structure (a gradient and a seeded pattern), different for each seed."""
    im = Image.new("RGB", (width, height))
    px = im.load()
    for y in range(height):
        for x in range(width):
            v = (x * 7 + y * 13 + seed * 101) % 256
            px[x, y] = (v, (x * y + seed * 57) % 256, ((x ^ y) * (seed + 3)) % 256)
    return im


def _save(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def png(width: int = 32, height: int = 32, seed: int = 0) -> bytes:
    return _save(_picture(width, height, seed), "PNG")


def jpeg(width: int = 32, height: int = 32, seed: int = 0) -> bytes:
    return _save(_picture(width, height, seed), "JPEG", quality=90)


def webp(width: int = 32, height: int = 32, seed: int = 0) -> bytes:
    return _save(_picture(width, height, seed), "WEBP", lossless=True)


def gif(width: int = 32, height: int = 32, seed: int = 0) -> bytes:
    return _save(_picture(width, height, seed), "GIF")


def gif_frames(n_frames: int, width: int, height: int) -> bytes:
    """An animated GIF of n_frames tiny frames, written block by block (Pillow would merge
    identical frames)."""
    out = bytearray(b"GIF89a" + struct.pack("<HHBBB", width, height, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff")
    lzw = bytes([2, 2, 0x4C, 0x01, 0])   # min code size 2, one sub-block: a 2x2 image of colour 0
    for _ in range(n_frames):
        out += b"\x21\xf9\x04\x00\x01\x00\x00\x00"                              # graphic control
        out += b"\x2c" + struct.pack("<HHHHB", 0, 0, min(width, 2), min(height, 2), 0) + lzw
    out += b"\x3b"
    return bytes(out)


def bomb_png(width: int, height: int) -> bytes:
    """A valid PNG that declares width x height pixels of black, compressed to almost nothing:
    decoded, it would take width * height bytes."""
    # Compressing width * height zero bytes would take seconds: after a full flush deflate forgets
    # what came before, so one compressed segment of `rows` rows can be repeated as it is.
    rows = 64
    segment_raw = b"\x00" * ((width + 1) * rows)           # filter byte + grey pixels, per row
    comp = zlib.compressobj(9)
    head = comp.compress(segment_raw) + comp.flush(zlib.Z_FULL_FLUSH)
    segment = comp.compress(segment_raw) + comp.flush(zlib.Z_FULL_FLUSH)
    tail_raw = b"\x00" * ((width + 1) * (height % rows))
    n = (width + 1) * height
    # adler32 of n zero bytes: a = 1, b = n (mod 65521); written by hand for the same reason
    body = head + segment * (height // rows - 1) + comp.compress(tail_raw) + comp.flush(zlib.Z_FINISH)[:-4] \
        + struct.pack(">I", ((n % 65521) << 16) | 1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body) + chunk(b"IEND", b"")

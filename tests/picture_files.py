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


# ---------------------------------------------------------------- the bomb set (issue 36)
def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _zeros_deflated(n: int) -> bytes:
    """A zlib stream of n zero bytes, made in milliseconds: one compressed 1 MiB segment after a
    full flush is repeated as it is (deflate forgets what came before a full flush)."""
    step = 1 << 20
    if n < 2 * step:
        return zlib.compress(b"\x00" * n, 9)
    comp = zlib.compressobj(9)
    head = comp.compress(b"\x00" * step) + comp.flush(zlib.Z_FULL_FLUSH)
    segment = comp.compress(b"\x00" * step) + comp.flush(zlib.Z_FULL_FLUSH)
    k, rest = divmod(n, step)
    tail = comp.compress(b"\x00" * rest) + comp.flush(zlib.Z_FINISH)[:-4]
    return head + segment * (k - 1) + tail + struct.pack(">I", ((n % 65521) << 16) | 1)


def zlib_bomb_png(width: int = 1024, height: int = 1024, inflated: int = 514 << 20) -> bytes:
    """A PNG that declares a small grey picture, whose image data inflates to `inflated` bytes of
    zeros: the first (width + 1) * height make the picture, the rest is the bomb (522 KB of file
    for 514 MiB). stb_image inflates it all before it looks at the size."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", _zeros_deflated(inflated)) \
        + _chunk(b"IEND", b"")


def _sof(width: int, height: int) -> bytes:
    return b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"


def multi_sof_jpeg(after_scan: bool = False) -> bytes:
    """A 56-byte JPEG whose first frame header says 8 x 8 and whose second says 12000 x 12000,
    before the scan or after it (a decoder that reads on after the first scan meets the second)."""
    scan = b"\xff\xda" + struct.pack(">HBBBBBB", 8, 1, 1, 0x00, 0, 63, 0) + b"\x00" * 8
    comment = b"\xff\xfe" + struct.pack(">H", 6) + b"bomb"
    if after_scan:
        return b"\xff\xd8" + comment + _sof(8, 8) + scan + _sof(12000, 12000) + b"\xff\xd9"
    return b"\xff\xd8" + comment + _sof(8, 8) + _sof(12000, 12000) + scan + b"\xff\xd9"


def gif_screen_bomb(width: int = 30000, height: int = 30000, n_frames: int = 5000) -> bytes:
    """A GIF whose logical screen is huge (a decoder allocates it whole, 4 bytes a pixel) and
    which has many tiny frames."""
    return gif_frames(n_frames, width, height)


def gif_frame_outside(width: int = 10, height: int = 10, frame: int = 20000) -> bytes:
    """A small GIF whose second frame declares itself frame x frame pixels."""
    data = bytearray(gif_frames(2, width, height))
    second = data.index(b"\x2c", data.index(b"\x2c") + 1)
    data[second + 5:second + 9] = struct.pack("<HH", frame, frame)
    return bytes(data)


def _riff(chunks: bytes) -> bytes:
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WEBP" + chunks


def _webp_chunk(fourcc: bytes, data: bytes) -> bytes:
    return fourcc + struct.pack("<I", len(data)) + data + (b"\x00" if len(data) & 1 else b"")


def webp_canvas_bomb(width: int = 16000, height: int = 16000) -> bytes:
    """An extended WebP whose canvas is width x height around a 1 x 1 picture."""
    still = webp(1, 1)
    vp8x = b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return _riff(_webp_chunk(b"VP8X", vp8x) + still[12:])


def webp_frame_outside(canvas: int = 16, frame: int = 12000) -> bytes:
    """An animated WebP with a 16 x 16 canvas whose one frame declares frame x frame pixels."""
    vp8x = b"\x02\x00\x00\x00" + (canvas - 1).to_bytes(3, "little") + (canvas - 1).to_bytes(3, "little")
    anim = b"\x00\x00\x00\x00" + b"\x00\x00"
    anmf = b"\x00" * 6 + (frame - 1).to_bytes(3, "little") * 2 + b"\x00" * 4 + webp(1, 1)[12:]
    return _riff(_webp_chunk(b"VP8X", vp8x) + _webp_chunk(b"ANIM", anim) + _webp_chunk(b"ANMF", anmf))


def photo(width: int = 1024, height: int = 768) -> bytes:
    """A photo-sized JPEG: smooth gradients and noise, as a camera's."""
    import numpy as np   # lazy: only the photo needs it

    rng = np.random.default_rng(5)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], axis=-1)
    pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    return _save(Image.fromarray(pixels, "RGB"), "JPEG", quality=88)

"""A picture's bytes to raw RGB pixels, decoded in a sandboxed child, never in the server.

The decoders behind a picture (stb_image inside llama.cpp, libpng/libjpeg/libwebp behind
Pillow) are large C parsers fed by strangers, and llama.cpp's stb_image decodes in-process
with no memory limit: a 522 KB PNG whose zlib stream inflated to 514 MiB went through it. So:

Every picture takes the media room's one path (decoder.py):

* the header and structure are checked first, in the server (images.check_image: format,
  pixel and side limits, one JPEG frame, animation frames inside the picture), which is cheap and
  refuses most bad pictures without starting anything;
* the decode is a job of the sandbox's worker pool (runtime/sandbox/pool.py): a warm child under
  a memory cap (MEMORY_BYTES) and a deadline (TIME_LIMIT_S). There the checks run again, a PNG's
  data is inflated with a cap (no more than its declared pixels need: Pillow and libpng stop
  there; stb_image inflates it all), and Pillow decodes the first frame only, its own
  decompression-bomb check set to our MAX_IMAGE_PIXELS;
* at most WORKERS pictures decode at once (the pool's slots are the semaphore); a picture that
  waits longer than TIME_LIMIT_S for one is DecoderBusy;
* the child hands back width, height and RGB bytes, which the parent checks against the header
  (a worker that a hostile file took over can still only send pixels of the declared size), and
  the projector builds its bitmap from them (mtmd_bitmap_init): no stranger's byte reaches
  stb_image in the server process.

Sound (audio.py) takes the same path: PCM instead of RGB.
"""
from __future__ import annotations

import io
import warnings
import zlib
from dataclasses import dataclass

from llmpack.runtime.media.decoder import Decoder
from llmpack.runtime.media.errors import MediaBusy
from llmpack.runtime.media.images import IMAGE, MAX_IMAGE_PIXELS, PNG_CHANNELS, ImageError, ImageInfo, check_image

MEMORY_BYTES = 1 << 30       # address space of one decoder child: an 8K RGBA picture and its RGB copy fit
TIME_LIMIT_S = 15.0          # to wait for a free decoder, and again to decode (a normal photo takes < 1 s)
WORKERS = 2                  # pictures decoded at once, in the whole server
INFLATE_STEP = 1 << 20       # a PNG's data is inflated this much at a time, and thrown away
_PILLOW = {"png": "PNG", "jpeg": "JPEG", "gif": "GIF", "webp": "WEBP"}


class DecoderBusy(ImageError, MediaBusy):
    """Every picture decoder stayed busy for TIME_LIMIT_S: the server is overloaded, not the picture bad."""


@dataclass(frozen=True, slots=True, eq=False)
class Picture:
    """A decoded picture: `width` x `height` pixels, 3 bytes (R, G, B) each, row by row."""
    format: str
    width: int
    height: int
    rgb: bytes


def _accept(info: ImageInfo, asked: dict, answer: dict, rgb: bytes) -> Picture:
    """The child's pixels, if they are the picture its header declared."""
    width, height = answer.get("width"), answer.get("height")
    if (width, height) != (info.width, info.height) or len(rgb) != info.width * info.height * 3:
        raise ImageError(f"the {info.format.upper()} image decoded to {width} x {height} pixels, not the "
                         f"{info.width} x {info.height} its header says: it is damaged")
    return Picture(info.format, width, height, rgb)


DECODER: Decoder[ImageInfo, Picture] = Decoder(
    f"{__name__}:decode_job", IMAGE, check=check_image, accept=_accept, busy=DecoderBusy,
    send=("a smaller picture", "a smaller or simpler picture"), others="other pictures",
    workers=WORKERS, memory=MEMORY_BYTES, max_answer=MAX_IMAGE_PIXELS * 3, time_limit=TIME_LIMIT_S)


def decode(data: bytes, media_type: str | None = None) -> Picture:
    """The picture in `data` as RGB pixels, or ImageError with a sentence that names the problem
    (DecoderBusy when no decoder came free)."""
    return DECODER.decode(data, media_type)


# ---------------------------------------------------------------- in the child
def decode_job(head: dict, data: bytes) -> tuple[dict, bytes]:
    """The worker's side: check, inflate-check a PNG, decode the first frame with Pillow."""
    info = check_image(data, head.get("declared") or None)
    if info.format == "png":
        _png_inflates_to_its_size(data, info.width, info.height)
    from PIL import Image   # lazy: only the decoder child loads Pillow

    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    name = info.format.upper()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)   # past our limit: an error, not a warning
            with Image.open(io.BytesIO(data), formats=[_PILLOW[info.format]]) as im:
                if im.size != (info.width, info.height):
                    raise ImageError(f"the {name} image says it is {info.width} x {info.height} pixels in one place "
                                     f"and {im.width} x {im.height} in another: it is damaged or crafted")
                im.load()                                                   # the first frame only
                rgb = _to_rgb(im)
    except (OSError, ValueError, SyntaxError, EOFError, zlib.error, Image.DecompressionBombError,
            Image.DecompressionBombWarning) as exc:
        raise ImageError(f"the {name} image could not be decoded: it is damaged or cut off ({exc})") from None
    return {"width": rgb.width, "height": rgb.height}, rgb.tobytes()


def _to_rgb(im):
    """RGB as stb_image gives it: alpha dropped, grey repeated, 16-bit samples cut to their high byte."""
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        im = im.point(lambda v: v * (1 / 256)).convert("L") if im.mode == "I" else \
            im.convert("I").point(lambda v: v * (1 / 256)).convert("L")
    return im.convert("RGB")


def _png_inflates_to_its_size(data: bytes, width: int, height: int) -> None:
    """Refuse a PNG whose image data inflates to more bytes than its pixels need: the zlib bomb
    (a few hundred KB of IDAT that inflate to hundreds of MB). The data is inflated INFLATE_STEP
    at a time and thrown away, so the check costs at most the picture's own size in time and
    INFLATE_STEP in memory."""
    depth, colour, interlace = data[24], data[25], data[28]
    bits = PNG_CHANNELS[colour] * depth
    passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
    need = 0
    for x0, y0, dx, dy in passes:
        w, h = (width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy
        if w > 0 and h > 0:
            need += h * (1 + (w * bits + 7) // 8)
    inflater, seen, pos = zlib.decompressobj(), 0, 8
    while pos + 8 <= len(data):
        length, kind = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4:pos + 8]
        if kind == b"IDAT":
            chunk = data[pos + 8:pos + 8 + length]
            while True:
                try:
                    out = inflater.decompress(chunk, INFLATE_STEP)
                except zlib.error as exc:
                    raise ImageError(f"the PNG image is damaged: its image data does not inflate ({exc})") from None
                seen += len(out)
                if seen > need:
                    raise ImageError(f"the PNG's image data inflates to more than the {need:,} bytes its {width} x "
                                     f"{height} pixels need (a decompression bomb); send an ordinary picture")
                chunk = inflater.unconsumed_tail
                if not chunk and not out:
                    break
        elif kind == b"IEND":
            return
        pos += 12 + length


_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))

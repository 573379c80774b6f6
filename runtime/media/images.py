"""Checking an image's bytes before anything decodes them: format, size and integrity.

An image reaches us from a stranger (a chat page, an API call), and the decoders behind it
(zlib, libjpeg-turbo, libwebp and Pillow's own; stb_image inside llama.cpp) trust their input: a 40 kB PNG can declare
30000 x 30000 pixels and make a decoder allocate 2.7 GB, and a JPEG cut off mid-transfer decodes
to a grey smear without complaint. So the headers are read here, in plain Python, and anything
outside the limits below is refused with a sentence that names the problem, before a single
pixel is decoded. Every limit lives here once.

The header is not the whole story: a decoder trusts the *last* word of a file, so the structure
is walked too. A JPEG with a second start-of-frame marker (a small first frame, a 12000 x 12000
second one), an animation frame that reaches outside its picture, more frames than MAX_FRAMES or
a JPEG of more than MAX_JPEG_SCANS scans (each scan is another pass over every pixel) is refused
here. Decoding itself happens in a child process under a memory cap (pictures.py), which also
checks that a PNG's data inflates to no more than its pixels need. The first look (size, signature,
the media type's agreement) is the one every kind of media takes (header.py).
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from llmpack.runtime.media.errors import MediaError
from llmpack.runtime.media.header import Kind, check_header

MAX_IMAGE_BYTES = 20 * 1024 * 1024       # per image, as OpenAI's API
MAX_IMAGE_PIXELS = 7680 * 4320           # 8K UHD: more than any phone camera, and ~100 MB as RGB
MAX_IMAGE_SIDE = 16384
MAX_GIF_FRAMES = 1000                    # only the first frame is used; a longer animation is refused
MAX_FRAMES = MAX_GIF_FRAMES              # the same cap for APNG and animated WebP
MAX_JPEG_SCANS = 500                     # a progressive JPEG has about 10 (libjpeg-turbo's own scan limit: 500)
MEDIA_TYPES = {"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/webp": "webp",
               "image/gif": "gif"}


class ImageError(MediaError):
    """This image cannot be used; the message says why in words a person can act on."""


@dataclass(frozen=True, slots=True)
class ImageInfo:
    format: str          # png | jpeg | webp | gif
    width: int
    height: int


def sniff(data: bytes) -> str | None:
    """The format the bytes really are, by their signature (never by a name or a media type)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def check_image(data: bytes, media_type: str | None = None) -> ImageInfo:
    """Read the header of a PNG, JPEG, WebP or GIF and check it against the limits; raises
    ImageError otherwise. `media_type` (from a data: URL) must agree with the bytes."""
    fmt = check_header(data, IMAGE, media_type)
    try:
        width, height = _READERS[fmt](data)
    except (struct.error, IndexError, ValueError) as exc:
        raise ImageError(f"the {fmt.upper()} image is damaged or cut off ({exc})") from None
    if width <= 0 or height <= 0:
        raise ImageError(f"the {fmt.upper()} image says it is {width} x {height} pixels")
    if max(width, height) > MAX_IMAGE_SIDE or width * height > MAX_IMAGE_PIXELS:
        raise ImageError(f"the image is {width} x {height} pixels; the limit is {MAX_IMAGE_PIXELS / 1e6:.0f} "
                         f"megapixels and {MAX_IMAGE_SIDE} pixels a side: scale it down first")
    return ImageInfo(fmt, width, height)


def _png(data: bytes) -> tuple[int, int]:
    if data[12:16] != b"IHDR":
        raise ValueError("no IHDR header")
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    if depth not in PNG_DEPTHS.get(colour, ()):
        raise ValueError(f"bit depth {depth} with colour type {colour} is not a PNG")
    pos, seen_data, frames = 8, False, 0
    while pos + 8 <= len(data):                  # walk the chunks: the file must reach IEND
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if pos + 12 + length > len(data):
            raise ValueError(f"chunk {kind.decode('latin-1')!r} runs past the end of the file")
        seen_data |= kind == b"IDAT"
        if kind == b"fcTL":                      # an APNG frame: only the first (the default image) is used
            frames += 1
            if frames > MAX_FRAMES:
                raise ImageError(f"the animated PNG has more than {MAX_FRAMES} frames; send a still image")
            w, h, x, y = struct.unpack(">IIII", data[pos + 12:pos + 28])
            _frame_inside("animated PNG", frames, x, y, w, h, width, height)
        if kind == b"IEND":
            if not seen_data:
                raise ValueError("no image data")
            return width, height
        pos += 12 + length
    raise ValueError("no IEND chunk")


PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}   # colour type -> depths
PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}

_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")   # in entropy-coded data: a marker, not stuffing or RSTn


def _jpeg(data: bytes) -> tuple[int, int]:
    """The one frame's size; every marker up to the end of the image is read, so that a second
    frame header (which stb_image or libjpeg might act on) cannot hide behind the first scan."""
    pos, size, scans = 2, None, 0
    while True:
        if pos + 2 > len(data):
            raise ValueError("no end-of-image marker")
        if data[pos] != 0xFF:
            raise ValueError(f"no marker at byte {pos}")
        marker = data[pos + 1]
        if marker == 0xFF:                       # fill byte
            pos += 1
            continue
        if marker == 0xD9:                       # end of image
            if size is None or not scans:
                raise ValueError("no image data")
            return size
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        if marker == 0xD8:
            raise ValueError(f"a second start-of-image marker at byte {pos}")
        (length,) = struct.unpack(">H", data[pos + 2:pos + 4])
        if length < 2 or pos + 2 + length > len(data):
            raise ValueError("a header segment runs past the end of the file")
        if marker in _SOF or marker == 0xDE:     # a frame header (0xDE: a hierarchical JPEG's DHP)
            if size is not None:
                raise ImageError(f"the JPEG declares a second frame (another start-of-frame marker at byte {pos}); "
                                 f"only ordinary single-frame JPEGs are taken: re-save the picture as a plain JPEG")
            height, width = struct.unpack(">HH", data[pos + 5:pos + 9])
            size = (width, height)
        pos += 2 + length
        if marker == 0xDA:                       # start of scan: the entropy-coded data follows
            scans += 1
            if size is None:
                raise ValueError("no frame header before the image data")
            if scans > MAX_JPEG_SCANS:
                raise ImageError(f"the JPEG has more than {MAX_JPEG_SCANS} scans, each another pass over the whole "
                                 f"picture; re-save it as a plain JPEG")
            found = _MARKER.search(data, pos)
            if found is None:
                raise ValueError("no end-of-image marker")
            pos = found.start()


def _gif(data: bytes) -> tuple[int, int]:
    width, height, flags = struct.unpack("<HHB", data[6:11])
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    frames = 0
    while True:
        block = data[pos]
        if block == 0x3B:                        # trailer
            break
        if block == 0x21:                        # extension: label, then sub-blocks
            pos = _skip_sub_blocks(data, pos + 2)
        elif block == 0x2C:                      # image descriptor, local table, LZW data
            frames += 1
            if frames > MAX_GIF_FRAMES:
                raise ImageError(f"the GIF has more than {MAX_GIF_FRAMES} frames; only still images and short "
                                 f"animations are taken (the first frame is used): send a still image")
            left, top, w, h = struct.unpack("<HHHH", data[pos + 1:pos + 9])
            _frame_inside("GIF", frames, left, top, w, h, width, height)
            local = data[pos + 9]
            pos += 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0)
            pos = _skip_sub_blocks(data, pos + 1)
        else:
            raise ValueError(f"unknown block 0x{block:02x} at byte {pos}")
    if frames == 0:
        raise ValueError("no frames")
    return width, height


def _skip_sub_blocks(data: bytes, pos: int) -> int:
    while True:
        n = data[pos]
        pos += 1 + n
        if n == 0:
            return pos


def _webp(data: bytes) -> tuple[int, int]:
    (riff_size,) = struct.unpack("<I", data[4:8])
    if riff_size + 8 > len(data):
        raise ValueError("the file is shorter than its header says")
    kind = data[12:16]
    if kind != b"VP8X":
        return _webp_bitstream(kind, data[20:30])
    w = int.from_bytes(data[24:27], "little") + 1
    h = int.from_bytes(data[27:30], "little") + 1
    animated = bool(data[20] & 0x02)
    pos, frames = 12, 0
    while pos + 8 <= riff_size + 8:              # the chunks: the picture or its frames must fit the canvas
        fourcc, size = data[pos:pos + 4], int.from_bytes(data[pos + 4:pos + 8], "little")
        if pos + 8 + size > riff_size + 8:
            raise ValueError(f"chunk {fourcc.decode('latin-1')!r} runs past the end of the file")
        if fourcc == b"ANMF":
            frames += 1
            if frames > MAX_FRAMES:
                raise ImageError(f"the animated WebP has more than {MAX_FRAMES} frames; send a still image")
            f = data[pos + 8:pos + 20]
            x, y = int.from_bytes(f[0:3], "little") * 2, int.from_bytes(f[3:6], "little") * 2
            fw, fh = int.from_bytes(f[6:9], "little") + 1, int.from_bytes(f[9:12], "little") + 1
            _frame_inside("animated WebP", frames, x, y, fw, fh, w, h)
        elif fourcc in (b"VP8 ", b"VP8L") and not animated:
            if _webp_bitstream(fourcc, data[pos + 8:pos + 18]) != (w, h):
                raise ImageError(f"the WebP's picture is not the {w} x {h} pixels its canvas declares: "
                                 f"it is damaged or crafted")
        pos += 8 + size + (size & 1)
    return w, h


def _webp_bitstream(kind: bytes, head: bytes) -> tuple[int, int]:
    """The size a VP8 or VP8L bitstream declares; `head` is its first 10 bytes."""
    if kind == b"VP8L":
        if head[0] != 0x2F:
            raise ValueError("bad VP8L signature")
        bits = int.from_bytes(head[1:5], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8 ":
        if head[3:6] != b"\x9d\x01\x2a":
            raise ValueError("bad VP8 start code")
        w, h = struct.unpack("<HH", head[6:10])
        return w & 0x3FFF, h & 0x3FFF
    raise ValueError(f"unknown WebP chunk {kind!r}")


def _frame_inside(what: str, k: int, x: int, y: int, w: int, h: int, width: int, height: int) -> None:
    """An animation frame must lie inside the picture its header declares: a decoder sizes its
    buffers by the frame, so a 65535 x 65535 frame in a 10 x 10 GIF is a bomb the header hides."""
    if w <= 0 or h <= 0 or x + w > width or y + h > height:
        raise ImageError(f"frame {k} of the {what} is {w} x {h} pixels at ({x}, {y}), outside its {width} x {height} "
                         f"picture; send a still image")


_READERS = {"png": _png, "jpeg": _jpeg, "gif": _gif, "webp": _webp}
IMAGE = Kind("image", "images", "image", "PNG, JPEG, WebP or GIF", MAX_IMAGE_BYTES, MEDIA_TYPES, sniff, ImageError)

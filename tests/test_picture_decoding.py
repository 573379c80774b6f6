"""Pictures are decoded in a sandboxed child under a memory cap (runtime/media/pictures.py), the
structure tricks are refused before any decoder runs (runtime/media/images.py), and the pixels
that come back are the ones llama.cpp's own decoder would have made."""
from __future__ import annotations

import ctypes
import struct
import threading
import zlib

import pytest
from llama_cpp import mtmd_cpp as mtmd
from PIL import Image
from picture_files import (_chunk, gif, gif_frame_outside, gif_frames, gif_screen_bomb, jpeg, multi_sof_jpeg, photo,
                           png, webp, webp_canvas_bomb, webp_frame_outside, zlib_bomb_png)

from llmpack.runtime.media import pictures
from llmpack.runtime.media.images import ImageError, check_image
from llmpack.runtime.sandbox.pool import Pool


@pytest.mark.parametrize("after_scan", [False, True])
def test_a_jpeg_with_a_second_frame_header_is_refused(after_scan: bool) -> None:
    data = multi_sof_jpeg(after_scan)
    assert len(data) == 56
    with pytest.raises(ImageError, match="declares a second frame"):
        check_image(data)


def test_a_jpeg_of_a_thousand_scans_is_refused() -> None:
    good = jpeg(16, 16)
    sos = good.index(b"\xff\xda")
    end = good.rindex(b"\xff\xd9")
    scans = good[sos:end] * 600                          # the same scan again and again
    with pytest.raises(ImageError, match="more than 500 scans"):
        check_image(good[:sos] + scans + b"\xff\xd9")


def test_animation_frames_must_lie_inside_the_picture() -> None:
    with pytest.raises(ImageError, match=r"frame 2 of the GIF is 20000 x 20000 pixels at \(0, 0\), outside its 10 x 10"):
        check_image(gif_frame_outside())
    with pytest.raises(ImageError, match="frame 1 of the animated WebP is 12000 x 12000 pixels"):
        check_image(webp_frame_outside())
    with pytest.raises(ImageError, match="not the 16000 x 16000 pixels its canvas declares"):
        check_image(webp_canvas_bomb())


def test_an_apng_frame_outside_its_picture_is_refused() -> None:
    good = png(8, 8)
    iend = good.rindex(b"IEND") - 4
    actl = _chunk(b"acTL", struct.pack(">II", 1, 0))
    fctl = _chunk(b"fcTL", struct.pack(">IIIIIHHBB", 0, 9000, 9000, 0, 0, 1, 1, 0, 0))
    with pytest.raises(ImageError, match="frame 1 of the animated PNG is 9000 x 9000 pixels"):
        check_image(good[:33] + actl + fctl + good[33:iend] + good[iend:])


def test_a_png_zlib_bomb_is_refused_without_inflating_it() -> None:
    data = zlib_bomb_png()
    assert len(data) < 600_000 and check_image(data).width == 1024   # the header alone passes
    with pytest.raises(ImageError, match=r"inflates to more than the 1,049,600 bytes its 1024 x 1024 pixels need"):
        pictures.decode(data)


def test_a_png_that_inflates_to_exactly_its_size_is_taken() -> None:
    data = zlib_bomb_png(300, 200, inflated=(300 + 1) * 200)
    picture = pictures.decode(data)
    assert (picture.width, picture.height) == (300, 200) and picture.rgb == bytes(300 * 200 * 3)


def _stb(data: bytes) -> tuple[int, int, bytes]:
    """What llama.cpp's own decoder (stb_image, through mtmd's helper) makes of `data`."""
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    bmp = mtmd.mtmd_helper_bitmap_init_from_buf(None, buf, len(data), False)
    assert bmp
    try:
        nx, ny = mtmd.mtmd_bitmap_get_nx(bmp), mtmd.mtmd_bitmap_get_ny(bmp)
        return nx, ny, ctypes.string_at(mtmd.mtmd_bitmap_get_data(bmp), mtmd.mtmd_bitmap_get_n_bytes(bmp))
    finally:
        mtmd.mtmd_bitmap_free(bmp)


def _png_of(mode: str, size=(40, 24)) -> bytes:
    import io

    im = Image.open(io.BytesIO(png(*size, seed=3))).convert("RGBA" if mode == "RGBA" else "RGB")
    if mode == "L;16":
        im = im.convert("L").point(lambda v: v * 257).convert("I;16")   # the 16-bit grey of each byte
    elif mode != "RGBA":
        im = im.convert(mode)
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("name, data", [("png", png(40, 24, seed=3)), ("gif", gif(40, 24, seed=3)),
                                        ("grey png", _png_of("L")), ("rgba png", _png_of("RGBA")),
                                        ("palette png", _png_of("P")), ("16-bit grey png", _png_of("L;16"))])
def test_lossless_pictures_decode_to_the_pixels_llama_cpp_would_make(name: str, data: bytes) -> None:
    picture = pictures.decode(data)
    assert (picture.width, picture.height, picture.rgb) == _stb(data), name


def test_webp_and_jpeg_decode_and_a_photo_too() -> None:
    lossless = pictures.decode(webp(40, 24, seed=3))
    assert lossless.rgb == pictures.decode(png(40, 24, seed=3)).rgb
    shot = pictures.decode(photo(), "image/jpeg")
    assert (shot.format, shot.width, shot.height, len(shot.rgb)) == ("jpeg", 1024, 768, 1024 * 768 * 3)


def test_a_picture_cut_off_inside_its_data_is_refused_by_the_decoder() -> None:
    good = png(64, 64, seed=4)
    idat = good.index(b"IDAT")
    length = struct.unpack(">I", good[idat - 4:idat])[0]
    short = good[idat + 4:idat + 4 + length // 2]          # half the data, in a chunk with a right CRC
    data = good[:idat - 4] + _chunk(b"IDAT", short) + good[idat + 8 + length:]
    with pytest.raises(ImageError, match="PNG image could not be decoded: it is damaged or cut off"):
        pictures.decode(data)
    assert zlib.decompressobj().decompress(short)            # the header check alone cannot see it


def test_at_most_two_pictures_decode_at_once() -> None:
    decoders = pictures.DECODER.pool
    decoders.peak_busy = 0
    data = [photo(1024 + 8 * i, 768) for i in range(6)]
    done: list[int] = []
    threads = [threading.Thread(target=lambda d=d: done.append(pictures.decode(d).width)) for d in data]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(done) == [1024 + 8 * i for i in range(6)]
    assert decoders.peak_busy == pictures.WORKERS == 2


def test_a_picture_past_the_memory_cap_is_refused_and_the_next_one_decodes(monkeypatch) -> None:
    """A 4000 x 4000 grey PNG is 16 MB of grey, 64 MB in Pillow's RGB and 48 MB of answer: more than
    a decoder capped at 160 MB of address space has, once Python and Pillow are in it."""
    small = Pool(f"{pictures.__name__}:decode_job", workers=1, memory=160 << 20, max_answer=pictures.MAX_IMAGE_PIXELS * 3)
    monkeypatch.setattr(pictures.DECODER, "pool", small)
    try:
        with pytest.raises(ImageError, match=r"needs more memory to decode than llmpack allows"):
            pictures.decode(zlib_bomb_png(4000, 4000, inflated=4001 * 4000))
        assert pictures.decode(png(seed=9)).width == 32
        assert small.started == 2
    finally:
        small.close()


def test_the_rest_of_the_bomb_set_is_refused_by_its_header() -> None:
    for data, words in [(gif_screen_bomb(), "more than 1000 frames"),
                        (gif_frames(3, 30000, 30000), "30000 x 30000 pixels"),
                        (webp(64, 64)[:-20], "WEBP image is damaged or cut off")]:
        with pytest.raises(ImageError, match=words):
            pictures.decode(data)


def _one_decoder_taken(monkeypatch) -> tuple[Pool, object]:
    pool = Pool(f"{pictures.__name__}:decode_job", workers=1, memory=pictures.MEMORY_BYTES,
                max_answer=pictures.MAX_IMAGE_PIXELS * 3)
    monkeypatch.setattr(pictures.DECODER, "pool", pool)
    monkeypatch.setattr(pictures.DECODER, "time_limit", 0.3)
    return pool, pool._idle.get()                 # its one slot, held as a long decode would


def test_a_picture_that_finds_every_decoder_busy_is_told_to_try_again(monkeypatch) -> None:
    pool, slot = _one_decoder_taken(monkeypatch)
    try:
        with pytest.raises(pictures.DecoderBusy, match="decoding other pictures .* try again in a moment"):
            pictures.decode(png())
        pool._idle.put(slot)
        assert pictures.decode(png()).width == 32
    finally:
        pool.close()

"""images.check_image: the header checks that keep hostile or broken images away from the
decoders. Each bad input gets one sentence that names the problem."""
from __future__ import annotations

import pytest
from picture_files import bomb_png, gif_frames, jpeg, png, webp

from llmpack.runtime.media.images import MAX_GIF_FRAMES, ImageError, check_image


@pytest.mark.parametrize("fmt, make", [("png", png), ("jpeg", jpeg), ("webp", webp)])
def test_good_images_report_their_size(fmt, make) -> None:
    info = check_image(make(40, 24))
    assert (info.format, info.width, info.height) == (fmt, 40, 24)


def test_a_short_gif_is_taken() -> None:
    info = check_image(gif_frames(3, 10, 7))
    assert (info.format, info.width, info.height) == ("gif", 10, 7)


def test_a_decompression_bomb_is_refused_from_its_header() -> None:
    data = bomb_png(30000, 30000)
    assert len(data) < 2_000_000          # small file, huge picture
    with pytest.raises(ImageError, match=r"30000 x 30000 pixels; the limit is \d+ megapixels"):
        check_image(data)


def test_a_truncated_jpeg_is_refused() -> None:
    data = jpeg(64, 64)
    with pytest.raises(ImageError, match="JPEG image is damaged or cut off"):
        check_image(data[: len(data) * 2 // 3])


def test_a_truncated_png_is_refused() -> None:
    data = png(64, 64)
    with pytest.raises(ImageError, match="PNG image is damaged or cut off"):
        check_image(data[:-30])


def test_a_gif_with_ten_thousand_frames_is_refused() -> None:
    with pytest.raises(ImageError, match=f"more than {MAX_GIF_FRAMES} frames"):
        check_image(gif_frames(10_000, 2, 2))


def test_the_media_type_must_match_the_bytes() -> None:
    with pytest.raises(ImageError, match="labelled image/png but is a JPEG image"):
        check_image(jpeg(8, 8), "image/png")
    with pytest.raises(ImageError, match="must be PNG, JPEG, WebP or GIF, not image/svg\\+xml"):
        check_image(png(8, 8), "image/svg+xml")


def test_not_an_image() -> None:
    with pytest.raises(ImageError, match="not a PNG, JPEG, WebP or GIF"):
        check_image(b"%PDF-1.7 hello")
    with pytest.raises(ImageError, match="empty"):
        check_image(b"")

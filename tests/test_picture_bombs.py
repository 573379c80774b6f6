"""The picture bomb set through the real server's API (issue 36): each hostile picture is one 400
that names the problem and the part, refused in under a second and with under 100 MB of extra
memory in the server and its decoder children together, while a photo still gets an answer.

Memory is each process's peak resident set (VmHWM), reset before each picture (clear_refs 5),
minus what it held before: a spike that came and went still counts."""
from __future__ import annotations

import base64
import struct
import time
from pathlib import Path

import pytest
from picture_files import (_chunk, gif_frame_outside, gif_screen_bomb, multi_sof_jpeg, photo, png, webp,
                           webp_canvas_bomb, webp_frame_outside, zlib_bomb_png)
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server, wait_idle
from vision_ggufs import write_tiny_mmproj

from llmpack.runtime.media import pictures

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="peak memory is read from Linux /proc")

PART = "messages[0].content[1]"
EXTRA_BYTES = 100 << 20
SECONDS = 1.0


def _cut_png() -> bytes:
    """A PNG whose image data stops half-way, in a chunk with a right CRC: only a decoder sees it."""
    good = png(64, 64, seed=4)
    idat = good.index(b"IDAT")
    length = struct.unpack(">I", good[idat - 4:idat])[0]
    return good[:idat - 4] + _chunk(b"IDAT", good[idat + 4:idat + 4 + length // 2]) + good[idat + 8 + length:]


BOMBS = {
    "PNG zlib bomb (522 KB inflating to 514 MiB)": (zlib_bomb_png(), "image/png", "a decompression bomb"),
    "JPEG with a second 12000 x 12000 frame header": (multi_sof_jpeg(), "image/jpeg", "declares a second frame"),
    "JPEG with a second frame header after its scan": (multi_sof_jpeg(True), "image/jpeg", "declares a second frame"),
    "GIF with a 30000 x 30000 screen and 5000 frames": (gif_screen_bomb(), "image/gif", "more than 1000 frames"),
    "GIF whose second frame is 20000 x 20000": (gif_frame_outside(), "image/gif", "outside its 10 x 10 picture"),
    "WebP with a 16000 x 16000 canvas": (webp_canvas_bomb(), "image/webp", "16000 x 16000 pixels its canvas declares"),
    "animated WebP with a 12000 x 12000 frame": (webp_frame_outside(), "image/webp", "outside its 16 x 16 picture"),
    "PNG cut off inside its data": (_cut_png(), "image/png", "could not be decoded: it is damaged or cut off"),
    "truncated WebP": (webp(64, 64)[:-20], "image/webp", "WEBP image is damaged or cut off"),
}


@pytest.fixture(scope="module")
def vision_server(tiny_chat_model: Path, tmp_path_factory):
    mmproj = write_tiny_mmproj(tmp_path_factory.mktemp("picture-bombs") / "mmproj-tiny.gguf", n_embd_text=64)
    with live_server(tiny_chat_model, "--mmproj", str(mmproj), "--ctx", "512") as srv:
        yield srv


def _ask(srv, data: bytes, media_type: str):
    url = f"data:{media_type};base64," + base64.b64encode(data).decode()
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is in the picture ?"},
                                             {"type": "image_url", "image_url": {"url": url}}]}]
    return srv.post("/v1/chat/completions", {"messages": messages, "max_tokens": 4, "temperature": 0})


def _kb(pid: int | str, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith(key + ":"))
    return int(line.split()[1]) << 10


def _extra_memory(pids: list, send) -> tuple[int, float, object]:
    """Send, and return the most memory any of `pids` held above what it held before (summed),
    the seconds it took, and the answer."""
    before = {}
    for pid in pids:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")                                   # the peak starts again from now
        before[pid] = _kb(pid, "VmRSS")
    start = time.monotonic()
    answer = send()
    seconds = time.monotonic() - start
    return sum(max(_kb(pid, "VmHWM") - before[pid], 0) for pid in pids), seconds, answer


def test_a_photo_gets_an_answer(vision_server) -> None:
    r = _ask(vision_server, photo(), "image/jpeg")
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] > 16


@pytest.mark.parametrize("case", list(BOMBS))
def test_each_bomb_is_one_quick_400_that_names_it(vision_server, case: str) -> None:
    data, media_type, words = BOMBS[case]
    assert _ask(vision_server, png(seed=1), "image/png").status_code == 200     # a warm decoder child
    children = pictures.DECODER.pool.pids()
    assert children, "no decoder child to measure"
    extra, seconds, r = _extra_memory(["self", *children], lambda: _ask(vision_server, data, media_type))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert words in err["message"] and err["param"] == PART and err["code"] == "bad_image", err
    assert seconds < SECONDS, f"{case}: refused after {seconds:.2f} s"
    assert extra < EXTRA_BYTES, f"{case}: {extra / 2**20:.0f} MB of extra memory"
    assert set(children) <= set(pictures.DECODER.pool.pids()), "a decoder child died: the checks should refuse it"
    print(f"{case}: {seconds * 1000:.0f} ms, {extra / 2**20:.1f} MB extra, {len(data):,} bytes")
    wait_idle(vision_server.engine)
    assert _ask(vision_server, png(seed=2), "image/png").status_code == 200


def test_a_busy_decoder_is_a_503_that_names_the_part(vision_server, monkeypatch) -> None:
    from test_picture_decoding import _one_decoder_taken

    pool, slot = _one_decoder_taken(monkeypatch)
    try:
        r = _ask(vision_server, png(seed=5), "image/png")
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["code"] == "pictures_busy" and err["param"] == PART and "try again" in err["message"], err
    finally:
        pool._idle.put(slot)
        pool.close()

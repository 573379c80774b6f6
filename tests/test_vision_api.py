"""OpenAI image_url parts over HTTP: `llmpack run MODEL --mmproj FILE` with the test-made vision
model. Images count in usage, a second turn with the same photo is served from the cache, and
every bad image is one 400 that names the part, after which the engine serves on."""
from __future__ import annotations

import base64
from pathlib import Path

import pytest
from engine_invariants import check_consistency
from picture_files import bomb_png, gif_frames, jpeg, png, webp
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server, wait_idle
from vision_ggufs import write_tiny_mmproj

IMAGE_ROWS = 16


@pytest.fixture(scope="module")
def vision_server(tiny_chat_model: Path, tmp_path_factory):
    mmproj = write_tiny_mmproj(tmp_path_factory.mktemp("vision-api") / "mmproj-tiny.gguf", n_embd_text=64)
    with live_server(tiny_chat_model, "--mmproj", str(mmproj), "--ctx", "512") as srv:
        yield srv


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode()


def image_message(*images: str, text: str = "what is in the picture ?") -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         *({"type": "image_url", "image_url": {"url": u}} for u in images)]}]


def chat(srv, messages, **kw):
    return srv.post("/v1/chat/completions", {"messages": messages, "max_tokens": 8, "temperature": 0, **kw})


def test_image_tokens_count_in_usage_and_a_second_turn_hits_the_cache(vision_server) -> None:
    plain = chat(vision_server, [{"role": "user", "content": "what is in the picture ?"}]).json()
    picture = data_url(png(seed=7))
    encodes = vision_server.engine.mm.projector.encodes
    first = chat(vision_server, image_message(picture)).json()
    assert first["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"] + IMAGE_ROWS + 1   # + the joining "\n"
    turn2 = image_message(picture) + [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                                      {"role": "user", "content": "and the colour ?"}]
    second = chat(vision_server, turn2).json()
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= plain["usage"]["prompt_tokens"] + IMAGE_ROWS - 16, second["usage"]
    assert vision_server.engine.mm.projector.encodes == encodes + 1, "the same photo was encoded twice"


def test_two_pictures_answer_differently_and_formats_agree(vision_server) -> None:
    def answer(url: str) -> str:
        return chat(vision_server, image_message(url, text="describe"), max_tokens=16).json()["choices"][0]["message"]["content"]

    a, b = answer(data_url(png(seed=1))), answer(data_url(png(seed=2)))
    assert a != b
    assert answer(data_url(webp(seed=1), "image/webp")) == a      # lossless: the same pixels
    assert answer(data_url(jpeg(seed=1), "image/jpeg"))


BAD = {
    "decompression bomb": (data_url(bomb_png(9000, 9000)), "9000 x 9000 pixels"),
    "30000 x 30000": (data_url(bomb_png(30000, 30000)), "30000 x 30000 pixels"),
    "truncated JPEG": (data_url(jpeg(64, 64)[:900], "image/jpeg"), "damaged or cut off"),
    "10,000-frame GIF": (data_url(gif_frames(10_000, 2, 2), "image/gif"), "more than 1000 frames"),
    "wrong media type": (data_url(jpeg(), "image/png"), "labelled image/png but is a JPEG"),
    "not an image type": (data_url(b"<svg/>", "image/svg+xml"), "not image/svg+xml"),
    "http URL": ("https://example.com/cat.png", "not fetched (this server works offline)"),
    "bad base64": ("data:image/png;base64,@@@@", "not valid base64"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_images_are_one_clear_400_and_the_engine_serves_on(vision_server, case: str) -> None:
    url, words = BAD[case]
    r = chat(vision_server, image_message(url))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert words in err["message"] and err["param"] == "messages[0].content[1]", err
    wait_idle(vision_server.engine)
    check_consistency(vision_server.engine)
    assert vision_server.engine.stats().num_running == 0
    assert chat(vision_server, image_message(data_url(png(seed=3)))).status_code == 200


def test_more_images_than_a_request_or_the_context_holds_is_one_400(vision_server, tiny_chat_model, tmp_path) -> None:
    urls = [data_url(png(seed=50 + i)) for i in range(17)]
    r = chat(vision_server, image_message(*urls))
    assert r.status_code == 400 and "at most 16 images" in r.json()["error"]["message"]
    mmproj = write_tiny_mmproj(tmp_path / "mmproj-tiny.gguf", n_embd_text=64)
    with live_server(tiny_chat_model, "--mmproj", str(mmproj), "--ctx", "256") as small:
        r = chat(small, image_message(*urls[:16]))                 # 16 x 16 rows + text > 256
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
        assert "maximum context length is 256 tokens" in r.json()["error"]["message"]
        check_consistency(small.engine)
        assert chat(small, image_message(urls[0])).status_code == 200


def test_a_text_only_model_refuses_images_naming_the_part(chat_server) -> None:
    r = chat(chat_server, image_message(data_url(png())))
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "messages[0].content[1]" and err["code"] == "model_not_vision"
    assert "this model reads text only" in err["message"] and "--mmproj" in err["message"]

"""Pictures through the Anthropic and Ollama wire formats, sent by their official clients
(`anthropic`, `ollama`) to `llmpack run MODEL --mmproj FILE` with the test-made vision model.

Anthropic: image blocks {"type": "image", "source": {"type": "base64", "media_type", "data"}}.
Ollama: messages[].images (and /api/generate's images), bare base64 with no media type, so the
server tells PNG from JPEG by the bytes. The pictures must reach the projector (two pictures,
two greedy answers), count in the usage, be served from the cache on the next turn, and a
refusal must be the format's own error shape naming the block as the client sent it."""
from __future__ import annotations

import base64
from pathlib import Path

import anthropic
import ollama
import pytest
from picture_files import jpeg, png
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer, live_server
from vision_ggufs import write_tiny_mmproj

IMAGE_ROWS = 16      # the test projector's rows per picture (tests/vision_ggufs.py)
# Anthropic's SDK no longer types the sampling fields; the API still takes them.


@pytest.fixture(scope="module")
def vision_server(tiny_chat_model: Path, tmp_path_factory):
    mmproj = write_tiny_mmproj(tmp_path_factory.mktemp("vision-clients") / "mmproj-tiny.gguf", n_embd_text=64)
    with live_server(tiny_chat_model, "--mmproj", str(mmproj), "--ctx", "512") as srv:
        yield srv


def _anthropic(srv: LiveServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.url, api_key="not-needed", max_retries=0, timeout=120)


def _ollama(srv: LiveServer) -> ollama.Client:
    return ollama.Client(host=srv.url, timeout=120)


def image_block(data: bytes, media_type: str = "image/png") -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": base64.b64encode(data).decode()}}


def ask_anthropic(srv: LiveServer, *blocks: dict, system: str | None = None, max_tokens: int = 12):
    content = [{"type": "text", "text": "describe the picture"}, *blocks]
    extra = {"system": system} if system else {}
    return _anthropic(srv).messages.create(model="m", max_tokens=max_tokens, extra_body={"temperature": 0},
                                           messages=[{"role": "user", "content": content}], **extra)


def ask_ollama(srv: LiveServer, *images: bytes) -> ollama.ChatResponse:
    return _ollama(srv).chat(model="m", options={"temperature": 0, "num_predict": 12},
                             messages=[{"role": "user", "content": "describe the picture", "images": list(images)}])


def test_anthropic_image_blocks_reach_the_model_count_and_are_cached(vision_server) -> None:
    plain = ask_anthropic(vision_server)
    first = ask_anthropic(vision_server, image_block(png(seed=11)))
    other = ask_anthropic(vision_server, image_block(png(seed=12)))
    assert first.content[0].text != other.content[0].text          # the pictures' rows arrived
    prompt = lambda u: u.input_tokens + u.cache_read_input_tokens  # noqa: E731
    assert prompt(first.usage) == prompt(plain.usage) + IMAGE_ROWS + 1, first.usage   # + the joining "\n"
    counted = _anthropic(vision_server).messages.count_tokens(model="m", messages=[
        {"role": "user", "content": [{"type": "text", "text": "describe the picture"}, image_block(png(seed=11))]}])
    assert counted.input_tokens == prompt(first.usage)
    encodes = vision_server.engine.mm.projector.encodes
    again = ask_anthropic(vision_server, image_block(png(seed=11)))
    assert again.content[0].text == first.content[0].text
    assert again.usage.cache_read_input_tokens >= prompt(plain.usage) + IMAGE_ROWS - 16, again.usage
    assert vision_server.engine.mm.projector.encodes == encodes, "the same picture was encoded again"
    jpg = ask_anthropic(vision_server, image_block(jpeg(seed=11), "image/jpeg"))
    assert jpg.stop_reason in ("end_turn", "max_tokens")


def test_anthropic_bad_image_blocks_are_its_error_shape_naming_the_block(vision_server, chat_server) -> None:
    with pytest.raises(anthropic.BadRequestError) as text_only:     # system first: the name stays the client's
        ask_anthropic(chat_server, image_block(png()), system="Be brief.")
    err = text_only.value.body
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error", err
    assert err["error"]["message"].startswith("messages.0.content.1 is an image, but this model reads text only")
    assert "--mmproj" in err["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as mislabelled:
        ask_anthropic(vision_server, image_block(png()), image_block(jpeg(), "image/png"))
    assert mislabelled.value.body["error"]["message"] == \
        "messages.0.content.2: the data is labelled image/png but is a JPEG image"
    assert ask_anthropic(vision_server, image_block(png(seed=3))).content[0].text   # the engine serves on


def test_ollama_images_reach_the_model_whatever_their_format(vision_server) -> None:
    a, b = ask_ollama(vision_server, png(seed=21)), ask_ollama(vision_server, png(seed=22))
    assert a.message.content != b.message.content
    plain = _ollama(vision_server).chat(model="m", options={"temperature": 0, "num_predict": 1},
                                        messages=[{"role": "user", "content": "describe the picture"}])
    assert a.prompt_eval_count == plain.prompt_eval_count + IMAGE_ROWS + 1
    assert ask_ollama(vision_server, jpeg(seed=21)).message.content   # no media type: told by its bytes
    gen = _ollama(vision_server).generate(model="m", prompt="describe the picture", images=[png(seed=21)],
                                          options={"temperature": 0, "num_predict": 12})
    assert gen.response == a.message.content


def test_ollama_refusals_name_the_picture(vision_server, chat_server) -> None:
    with pytest.raises(ollama.ResponseError) as text_only:
        ask_ollama(chat_server, png())
    assert text_only.value.status_code == 400
    assert text_only.value.error.startswith("messages[0].images[0] is an image, but this model reads text only")
    with pytest.raises(ollama.ResponseError) as not_a_picture:
        _ollama(vision_server).generate(model="m", prompt="hi", system="Be brief.", images=[png(), b"GIF-ish text"])
    assert not_a_picture.value.error == "images[1]: this is not a PNG, JPEG, WebP or GIF image"

"""A phone photo is the same request on every API that takes pictures (issue 38): one ~10 MB body
carrying one 7.5 MB picture reaches OpenAI's, Anthropic's, Ollama's and the Responses route, and a
model without a projector answers each with the same refusal naming the picture, never a 413 from
one room's smaller body limit (the limit is the route's: security.carries_files)."""
from __future__ import annotations

import base64
import os

import pytest
import requests

from server_fixtures import *  # noqa: F401,F403

PHOTO = b"\xff\xd8\xff\xe0" + os.urandom(int(7.5 * 1024 * 1024))   # a JPEG's first bytes, then a phone photo's worth
B64 = base64.b64encode(PHOTO).decode()
FILLER = "Notes from the trip. " * 90_000   # the rest of the ~10 MB: a long conversation beside the photo


def bodies() -> dict[str, tuple[str, dict]]:
    return {
        "openai": ("/v1/chat/completions", {"model": "m", "messages": [
            {"role": "user", "content": FILLER},
            {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                         {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + B64}}]}]}),
        "anthropic": ("/v1/messages", {"model": "m", "max_tokens": 8, "messages": [
            {"role": "user", "content": FILLER}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                                                      "data": B64}}]}]}),
        "ollama": ("/api/chat", {"model": "m", "stream": False, "messages": [
            {"role": "user", "content": FILLER},
            {"role": "user", "content": "what is this?", "images": [B64]}]}),
        "responses": ("/v1/responses", {"model": "m", "input": [
            {"role": "user", "content": FILLER},
            {"role": "user", "content": [{"type": "input_text", "text": "what is this?"},
                                         {"type": "input_image", "image_url": "data:image/jpeg;base64," + B64}]}]}),
    }


@pytest.mark.parametrize("room", ["openai", "anthropic", "ollama", "responses"])
def test_the_same_photo_gets_the_same_answer_on_every_api(chat_server, room: str) -> None:
    path, body = bodies()[room]
    data = requests.models.complexjson.dumps(body).encode()
    assert 9 * 1024 * 1024 < len(data) < 12 * 1024 * 1024     # over the 8 MiB of a text-only route
    r = requests.post(chat_server.url + path, data=data, headers={"Content-Type": "application/json"}, timeout=120)
    assert r.status_code == 400, (room, r.status_code, r.text[:300])
    text = r.text
    assert "request_too_large" not in text and "larger than" not in text
    assert "this model reads text only" in text and "--mmproj" in text, text[:500]


def test_a_text_only_route_keeps_the_smaller_limit(chat_server) -> None:
    data = b'{"model": "m", "prompt": "' + b"x" * (9 * 1024 * 1024) + b'"}'
    r = requests.post(chat_server.url + "/v1/completions", data=data, headers={"Content-Type": "application/json"},
                      timeout=60)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

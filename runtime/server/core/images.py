"""Images in chat messages: OpenAI `image_url` parts, for a model started with a vision projector.

    {"type": "image_url", "image_url": {"url": "data:image/png;base64,...", "detail": "auto"}}

Only `data:` URLs are taken (PNG, JPEG, WebP, GIF's first frame): this server works offline and
fetches nothing, so an http(s) URL is a 400 that says so. A model without a projector refuses
any image with a 400 naming the part. At most MAX_IMAGES go in one request. Each image's header
is checked (runtime/engine/images.py), then it is decoded to raw RGB in a sandboxed child under a
memory cap (runtime/engine/pictures.py) while its part is read, so a bad picture is a 400 that
names its part, and a busy decoder a 503.

How an image reaches the engine: `take_image_parts` replaces each image part with a marker (a
random string per request, so no user text can forge one), the chat template renders the
conversation as usual, and `image_prompt` cuts the rendered text at the markers and hands text
and pictures to the projector (vision.Projector.prompt), which tokenizes the text and turns each
picture into its rows. Nothing is stored: a refused request leaves no trace.
"""
from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmpack.runtime.chat import untrusted
from llmpack.runtime.engine.images import MAX_IMAGE_BYTES, ImageError, sniff
from llmpack.runtime.engine.pictures import DecoderBusy, Picture
from llmpack.runtime.engine.pictures import decode as decode_picture
from llmpack.runtime.server.core.errors import ApiError, bad
from llmpack.runtime.server.core.served_model import ServedModel

if TYPE_CHECKING:
    from llmpack.runtime.engine.client import MultimodalPrompt

MAX_IMAGES = 16          # per request; each is also limited in bytes and pixels (engine/images.py)
NO_PROJECTOR = ("this model reads text only: it was started without a vision projector, so it cannot see images "
                "(start llmpack with --mmproj FILE, the mmproj*.gguf published with a vision model)")


@dataclass
class Images:
    marker: str
    items: list[Picture]               # decoded, in the order they appear
    where: list[str]                   # "messages[i].content[j]" of each, for 400s


def take_image_parts(messages: Any, model: ServedModel, param: str = "messages",
                     names: dict[tuple[int, int], str] | None = None) -> tuple[Any, Images | None]:
    """`messages` with every image part replaced by the marker text (each user message with
    images becomes one string), and the images; (messages, None) when there are none. `names`
    holds the client's own name of part j of messages[i] where its wire format moved it (an
    Anthropic block, an Ollama `images` entry), so a 400 names what the client sent."""
    names = names or {}
    if not isinstance(messages, list):
        return messages, None
    found = Images("<llmpack-image-" + secrets.token_hex(8) + ">", [], [])
    out = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list) or not any(_is_image(p) for p in content):
            out.append(m)
            continue
        if m.get("role") != "user":
            first = next(j for j, p in enumerate(content) if _is_image(p))
            where = names.get((i, first), f"{param}[{i}]")
            raise bad(where, f"{where} is an image; images can only be in user messages")
        pieces: list[Any] = []
        for j, part in enumerate(content):
            where = names.get((i, j), f"{param}[{i}].content[{j}]")
            if _is_image(part):
                if not model.engine.vision:
                    raise bad(where, f"{where} is an image, but {NO_PROJECTOR}", "model_not_vision")
                if len(found.items) == MAX_IMAGES:      # before decoding one more
                    raise bad(param, f"at most {MAX_IMAGES} images per request; send fewer pictures", "too_many_images")
                found.items.append(_decode(part.get("image_url"), where))
                found.where.append(where)
                pieces.append({"type": "text", "text": found.marker})
            else:
                pieces.append(part)
        out.append({**m, "content": pieces})
    return (out, found) if found.items else (messages, None)


def image_prompt(model: ServedModel, text: str, images: Images, param: str = "messages") -> MultimodalPrompt:
    """The rendered prompt `text` with its markers replaced by the pictures' rows."""
    pieces = text.split(images.marker)
    if len(pieces) - 1 != len(images.items):
        raise bad(param, f"the chat template kept {len(pieces) - 1} of the {len(images.items)} images; this model's "
                         "template cannot show pictures where they were put")
    parts: list[Any] = []
    for k, piece in enumerate(pieces):   # attachments' text stays plain text (chat/untrusted.py)
        parts += [(text, not plain) for text, plain in untrusted.spans(piece)]
        if k < len(images.items):
            parts.append(images.items[k])
    try:
        return model.engine.image_prompt(parts)
    except ImageError as exc:
        raise bad(param, f"an image could not be used: {exc}", "bad_image") from None


def base64_image_part(b64: str) -> dict:
    """An image part for a bare base64 picture, which comes with no media type (Ollama's
    `images`): labelled by what its first bytes are. Bytes that are no picture are labelled PNG,
    and the check then says they are not an image; a whole data: URL is taken as it is."""
    if b64.startswith("data:"):
        return {"type": "image_url", "image_url": {"url": b64}}
    try:
        head = base64.b64decode(b64[:16], validate=True)      # 12 bytes: every signature sniff reads
    except (binascii.Error, ValueError):
        head = b""                                             # _decode names the bad base64
    return {"type": "image_url", "image_url": {"url": f"data:image/{sniff(head) or 'png'};base64,{b64}"}}


def _is_image(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in ("image_url", "input_image")


def _decode(spec: Any, where: str) -> Picture:
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str):
        raise bad(where, f"{where} must be {{\"type\": \"image_url\", \"image_url\": {{\"url\": \"data:image/png;"
                         "base64,...\"}}}}")
    if url.lower().startswith(("http://", "https://")):
        raise bad(where, f"{where}: image URLs are not fetched (this server works offline); send the picture itself "
                         "as a data: URL, data:image/png;base64,...", "image_url_not_data")
    head, sep, payload = url.partition(",")
    if not sep or not head.lower().startswith("data:") or not head.lower().endswith(";base64"):
        raise bad(where, f"{where}: the image must be a data URL: data:image/png;base64,... (PNG, JPEG, WebP or GIF)")
    if len(payload) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise ApiError(413, f"{where}: the image is larger than {MAX_IMAGE_BYTES >> 20} MB; send a smaller one",
                       param=where, code="image_too_large")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise bad(where, f"{where}: the data URL is not valid base64") from None
    media_type = head[5:-7].split(";")[0].strip().lower()
    try:
        return decode_picture(data, media_type)
    except DecoderBusy as exc:
        raise ApiError(503, f"{where}: {exc}", param=where, code="pictures_busy") from None
    except ImageError as exc:
        raise bad(where, f"{where}: {exc}", "bad_image") from None

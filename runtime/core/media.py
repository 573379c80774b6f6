"""Pictures and sound in chat messages: every room's parts as one `MediaItem`, for a model started
with a projector that sees or hears (--mmproj).

    OpenAI     {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}
               {"type": "input_audio", "input_audio": {"data": "<base64>", "format": "wav"}}
    Responses  {"type": "input_image", "image_url": "data:..."}, {"type": "input_audio", ...}
    Anthropic  {"type": "image", "source": {"type": "base64", "media_type": ..., "data": ...}}
    Ollama     "images": ["<base64>", ...]

Each room puts a `MediaItem(kind, data, mime, where)` where the client's picture or clip was, the
object itself (OpenAI's parts are the core's own message shape, which `LLM.chat` takes too: read
here by `openai_item`); `data` is the payload as the client sent it (a data: URL or base64) and
`where` the client's name of the part, so a 400 names what it sent. A client cannot send a
MediaItem: JSON has no such thing, so every item was made by a room from the client's own part.
Only data is taken: this server works offline and fetches nothing, so an http(s) URL is a 400
that says so. A model that cannot see (or hear) refuses the part with a 400 naming it and saying
what is needed, before anything is decoded.

How a part reaches the engine: `take_media_parts` replaces each media part with a marker (a
random string per request, so no user text can forge one), checks each item and decodes it in a
sandboxed child under a memory cap (runtime/media: pictures to RGB, sound to PCM, on one path; the
server runs no picture or audio decoder; a busy decoder is a 503), the chat
template renders the conversation as usual, and `media_prompt` cuts the rendered text at the
markers and hands text, pictures and PCM to the projector (EngineClient.media_prompt), which
tokenizes the text and turns each picture or clip into its rows. Nothing is stored: a refused
request leaves no trace.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import secrets
from typing import TYPE_CHECKING, Any

import numpy as np

from llmpack.lru import LruCache
from llmpack.runtime.chat import untrusted
from llmpack.runtime.media import audio
from llmpack.runtime.media.audio import FORMATS, MAX_AUDIO_BYTES, AudioError
from llmpack.runtime.media.errors import MediaBusy, MediaError
from llmpack.runtime.media.images import MAX_IMAGE_BYTES, ImageError, sniff
from llmpack.runtime.media.pictures import Picture
from llmpack.runtime.media.pictures import decode as decode_picture
from llmpack.runtime.core.errors import ApiError, bad
from llmpack.runtime.core.served_model import ServedModel

MAX_IMAGES = 16          # per request; each is also limited in bytes and pixels (media/images.py)
MAX_CLIPS = 8            # sound clips per request; each is limited in bytes and length (media/audio.py)
NO_PROJECTOR = ("this model reads text only: it was started without a vision projector, so it cannot see images "
                "(start llmpack with --mmproj FILE, the mmproj*.gguf published with a vision model)")
NO_EARS = ("this model cannot hear: it was started without an audio projector, so it cannot take sound "
           "(start llmpack with --mmproj FILE, the mmproj*.gguf published with an audio model such as Ultravox, "
           "Qwen2-Audio or Voxtral)")
NO_EYES = ("this model hears but cannot see: its projector has no vision encoder (start llmpack with the --mmproj "
           "of a vision model to send pictures)")
if TYPE_CHECKING:
    from llmpack.runtime.engine.media import MultimodalPrompt



@dataclasses.dataclass(frozen=True)
class MediaItem:
    """One picture or clip as a room found it: `data` is the payload as sent (a data: URL or bare
    base64), `mime` the media type or format the client declared (None: told by the bytes)."""
    kind: str            # image | audio
    data: str
    mime: str | None
    where: str           # the client's name of the part ("messages[0].content[1]", "messages.0.content.1")


@dataclasses.dataclass
class Media:
    marker: str
    items: list[Any]                   # a decoded Picture, or a clip's float32 PCM, in order
    where: list[str]                   # where each came from, for 400s


def openai_item(part: Any, where: str) -> MediaItem | None:
    """OpenAI's own parts (the core's message shape) as a MediaItem; None for any other part."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in ("image_url", "input_image"):
        spec = part.get("image_url")
        return MediaItem("image", spec.get("url") if isinstance(spec, dict) else spec, None, where)
    if kind == "input_audio":
        spec = part.get("input_audio")
        spec = spec if isinstance(spec, dict) else {}
        return MediaItem("audio", spec.get("data"), spec.get("format"), where)
    return None


def take_media_parts(messages: Any, model: ServedModel, param: str = "messages") -> tuple[Any, Media | None]:
    """`messages` with every picture or clip replaced by the marker text (each user message with
    media becomes one string), and the media, checked and decoded; (messages, None) when there are none."""
    if not isinstance(messages, list):
        return messages, None
    found = Media("<llmpack-media-" + secrets.token_hex(8) + ">", [], [])
    out = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        items = [p if isinstance(p, MediaItem) else openai_item(p, f"{param}[{i}].content[{j}]")
                 for j, p in enumerate(content)] if isinstance(content, list) else []
        if not any(items):
            out.append(m)
            continue
        if m.get("role") != "user":
            first = next(item for item in items if item)
            raise bad(first.where, f"{first.where} is {_a(first.kind)}; {_plural(first.kind)} can only be in "
                                   f"user messages")
        pieces: list[Any] = []
        for part, item in zip(content, items):
            if item is None:
                pieces.append(part)
                continue
            if sum(isinstance(x, Picture) for x in found.items) == MAX_IMAGES and item.kind == "image":
                raise bad(param, f"at most {MAX_IMAGES} images per request; send fewer pictures", "too_many_images")
            if sum(isinstance(x, np.ndarray) for x in found.items) == MAX_CLIPS and item.kind == "audio":
                raise bad(param, f"at most {MAX_CLIPS} sound clips per request; send fewer", "too_many_clips")
            found.items.append(_read(item, model))   # checked, then decoded in a sandboxed child
            found.where.append(item.where)
            pieces.append({"type": "text", "text": found.marker})
        out.append({**m, "content": pieces})
    return (out, found) if found.items else (messages, None)


def media_prompt(model: ServedModel, text: str, media: Media, param: str = "messages") -> MultimodalPrompt:
    """The rendered prompt `text` with its markers replaced by the pictures' and clips' rows."""
    pieces = text.split(media.marker)
    if len(pieces) - 1 != len(media.items):
        raise bad(param, f"the chat template kept {len(pieces) - 1} of the {len(media.items)} pictures and clips; this "
                         "model's template cannot show them where they were put")
    parts: list[Any] = []
    for k, piece in enumerate(pieces):   # attachments' text stays plain text (chat/untrusted.py)
        parts += [(text, not plain) for text, plain in untrusted.spans(piece)]
        if k < len(media.items):
            parts.append(media.items[k])
    try:
        return model.engine.media_prompt(parts)
    except ImageError as exc:
        raise bad(param, f"an image could not be used: {exc}", "bad_image") from None
    except AudioError as exc:
        raise bad(param, f"a sound clip could not be used: {exc}", "bad_audio") from None


def base64_image_item(b64: str, where: str) -> MediaItem:
    """A bare base64 picture, which comes with no media type (Ollama's `images`): labelled by what
    its first bytes are. Bytes that are no picture are labelled PNG, and the check then says they are
    not an image; a whole data: URL is taken as it is."""
    if b64.startswith("data:"):
        return MediaItem("image", b64, None, where)
    try:
        head = base64.b64decode(b64[:16], validate=True)      # 12 bytes: every signature sniff reads
    except (binascii.Error, ValueError):
        head = b""                                             # _payload names the bad base64
    return MediaItem("image", f"data:image/{sniff(head) or 'png'};base64,{b64}", None, where)


# ---------------------------------------------------------------- checking and decoding
_CODES = {"image": ("bad_image", "pictures_busy"), "audio": ("bad_audio", "audio_busy")}   # 400, 503


def _read(item: MediaItem, model: ServedModel) -> Any:
    """What the engine takes for one item, after the model's ability, the size and the format."""
    where, kinds = item.where, model.engine.media_kinds
    if item.kind == "image" and "image" not in kinds:
        why = NO_PROJECTOR if not kinds else NO_EYES
        raise bad(where, f"{where} is an image, but {why}", "model_not_vision")
    if item.kind == "audio" and "audio" not in kinds:
        raise bad(where, f"{where} is a sound clip, but {NO_EARS}", "model_not_audio")
    bad_code, busy_code = _CODES[item.kind]
    try:
        return _image(item) if item.kind == "image" else _audio(item, model.engine.audio_sample_rate,
                                                                 model.files.clips)
    except MediaBusy as exc:
        raise ApiError(503, f"{where}: {exc}", param=where, code=busy_code) from None
    except MediaError as exc:
        raise bad(where, f"{where}: {exc}", bad_code) from None


def _image(item: MediaItem) -> Picture:
    url, where = item.data, item.where
    if not isinstance(url, str):
        raise bad(where, f"{where} must be {{\"type\": \"image_url\", \"image_url\": {{\"url\": \"data:image/png;"
                         "base64,...\"}}}}")
    if url.lower().startswith(("http://", "https://")):
        raise bad(where, f"{where}: image URLs are not fetched (this server works offline); send the picture itself "
                         "as a data: URL, data:image/png;base64,...", "image_url_not_data")
    head, sep, payload = url.partition(",")
    if not sep or not head.lower().startswith("data:") or not head.lower().endswith(";base64"):
        raise bad(where, f"{where}: the image must be a data URL: data:image/png;base64,... (PNG, JPEG, WebP or GIF)")
    data = _payload(payload, where, MAX_IMAGE_BYTES, "image")
    return decode_picture(data, head[5:-7].split(";")[0].strip().lower())


def _audio(item: MediaItem, rate: int, clips: LruCache[bytes, np.ndarray]) -> np.ndarray:
    """`clips`: the app's last decoded clips (core/files.py), by content and rate: a chat re-sends them."""
    where, fmt, payload = item.where, item.mime, item.data
    if not isinstance(payload, str) or not isinstance(fmt, str):
        raise bad(where, f"{where} must be {{\"type\": \"input_audio\", \"input_audio\": {{\"data\": \"<base64>\", "
                         f"\"format\": \"wav\"}}}} (wav, mp3 or flac)")
    if fmt.lower() not in FORMATS:
        raise bad(where, f"{where}: the audio format must be wav, mp3 or flac, not {fmt!r}", "bad_audio")
    if payload.startswith("data:"):      # a data: URL where base64 was expected: taken, as llama-server does not
        payload = payload.partition(",")[2]
    data = _payload(payload, where, MAX_AUDIO_BYTES, "audio")
    key = hashlib.sha256(rate.to_bytes(4, "little") + data).digest()
    audio.check_audio(data, fmt)         # the label is checked every time, even for a clip decoded before
    pcm = clips.get(key)
    if pcm is None:
        pcm = audio.decode(data, fmt, rate)
        clips.put(key, pcm)
    return pcm


def _payload(payload: str, where: str, limit: int, kind: str) -> bytes:
    if len(payload) > limit * 4 // 3 + 4:
        raise ApiError(413, f"{where}: the {kind} is larger than {limit >> 20} MB; send a smaller one",
                       param=where, code=f"{kind}_too_large")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        what = "the data URL is" if kind == "image" else "the audio data is"
        raise bad(where, f"{where}: {what} not valid base64") from None


def _a(kind: str) -> str:
    return "an image" if kind == "image" else "a sound clip"


def _plural(kind: str) -> str:
    return "images" if kind == "image" else "sound clips"

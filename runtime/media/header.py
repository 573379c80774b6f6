"""The one first look at a stranger's picture or clip: not empty, within its size cap, and of a
format we take, told by its signature (never by a name or a media type), which must agree with
what the client said it sent. Nothing here decodes a pixel or a sample, so it runs in the server,
before any decoder child is asked, and most bad inputs stop here.

Each kind of media describes itself once in a `Kind` (images.IMAGE, audio.AUDIO), and
`check_header` words every refusal from it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llmpack.runtime.media.errors import MediaError


@dataclass(frozen=True)
class Kind:
    """What one kind of media accepts, and how its sentences name it."""
    noun: str                                   # "image", "audio": "the image is empty"
    plural: str                                 # "images", "audio": "images must be PNG, ..."
    thing: str                                  # what the bytes are called: "is a JPEG image", "is a WAV file"
    formats: str                                # the formats taken, as a person reads them: "WAV, MP3 or FLAC"
    max_bytes: int
    labels: dict[str, str]                      # what a client may declare (lower case) -> the format
    sniff: Callable[[bytes], str | None]        # the format the bytes are, by their signature
    error: type[MediaError]


def check_header(data: bytes, kind: Kind, declared: str | None = None) -> str:
    """The format of `data` (one of `kind.labels`' values), or `kind.error` with a sentence that
    names the problem. `declared` (a media type, or a format's name where the kind takes one) must
    agree with the bytes."""
    if not data:
        raise kind.error(f"the {kind.noun} is empty")
    if len(data) > kind.max_bytes:
        raise kind.error(f"the {kind.noun} is {len(data) / 2**20:.1f} MiB; the limit is {kind.max_bytes >> 20} MiB")
    found = kind.sniff(data)
    if declared is not None:
        label = kind.labels.get(declared.lower())
        if label is None:
            raise kind.error(f"{kind.plural} must be {kind.formats}, not {declared}")
        if found is not None and found != label:
            said = declared if "/" in declared else declared.upper()
            raise kind.error(f"the data is labelled {said} but is a {found.upper()} {kind.thing}")
    if found is None:
        raise kind.error(f"this is not a {kind.formats} {kind.thing}")
    return found

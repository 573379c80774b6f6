"""The errors of the media room: a picture or clip that cannot be used, and a decoder too busy to try.

Pictures (images.ImageError) and sound (audio.AudioError) each have their own, so a message can say
"an image" or "a sound clip"; both are a MediaError, and their busy kinds are also a MediaBusy, so
the core answers every kind the same way: 400 for the input, 503 for the server's load.
"""
from __future__ import annotations

from llmpack.errors import LlmpackError


class MediaError(LlmpackError):
    """This picture or clip cannot be used; the message says why in words a person can act on."""


class MediaBusy(MediaError):
    """Every decoder of its kind stayed busy until the deadline: the server is overloaded, not the input bad."""

"""A prompt with pictures or sound in it, as the engine carries it: data only, no llama.cpp.

The projector (projector.Projector) turns each picture or clip into a MediaSpan: `n_tokens` rows of
the text model's sequence that it fills with embeddings instead of token ids, one KV cell each,
and the placeholder MEDIA_TOKEN at those rows in `token_ids`. Everything downstream - block
tables, the prefix cache, the scheduler's budget, positions - treats a span the same whatever it
came from; only its `kind` ("image" or "audio"), for messages, and its layout tell them apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

MEDIA_TOKEN = -1      # the placeholder id of a span's rows in a sequence's token_ids (never a real token)


@dataclass(eq=False)
class MediaSpan:
    """One picture or clip in a prompt: `n_tokens` embedding rows starting at token index `start`.
    `digest` names its content (a picture's decoded RGB and size, a clip's PCM and rate, plus which
    window of it this is): two prompts with the same picture or sound share the prefix cache and
    the encoder cache whatever file format carried it."""
    digest: bytes
    start: int
    n_tokens: int
    n_pos: int                   # positions it advances (fewer than n_tokens with M-RoPE)
    chunk: Any                   # the projector's own copy of mtmd's chunk (freed with the span); 0 in tests
    non_causal: bool             # its rows must be decoded together, attending both ways (Gemma 3)
    embd: np.ndarray | None = None   # (n_tokens, n_embd) float32 once encoded (set by the encoder thread)
    queued: bool = False             # handed to the encoder (engine thread only)
    grid: tuple[int, int] | None = None   # M-RoPE: its rows as nx columns by ny rows (None: one position each)
    kind: str = "image"              # image | audio: how messages name it

    @property
    def end(self) -> int:
        return self.start + self.n_tokens

    @property
    def whole(self) -> bool:
        """Its rows must be decoded in one llama_decode: they attend both ways, or sit at one position."""
        return self.non_causal or self.grid is not None

    def mrope_positions(self, pos0: int) -> np.ndarray:
        """The 4 positions of every row for llama_batch.pos, section-major ([t..., y..., x..., z...]),
        as mtmd's helper sets them (mtmd_image_tokens_get_decoder_pos, set_position_mrope_2d): row i
        of the nx-wide grid at temporal position pos0, height pos0 + i // nx, width pos0 + i % nx."""
        nx, _ = self.grid
        i = np.arange(self.n_tokens, dtype=np.int32)
        return np.concatenate([np.full(self.n_tokens, pos0, np.int32), pos0 + i // nx, pos0 + i % nx,
                               np.zeros(self.n_tokens, np.int32)])


@dataclass(eq=False)
class MultimodalPrompt:
    """A tokenized prompt with pictures or sound: token_ids holds MEDIA_TOKEN at every span's rows."""
    token_ids: list[int]
    spans: list[MediaSpan]

    def __len__(self) -> int:   # a prompt's length, as for a list of token ids
        return len(self.token_ids)

    def position(self, index: int) -> int:
        """The position llama.cpp keeps for token `index` (the temporal one, with M-RoPE): its index,
        except that each M-RoPE image before it advanced the position by its n_pos (max(nx, ny))
        instead of its n_tokens, and all rows of an M-RoPE image share the image's first position.
        Tokens past the prompt (generated text) continue from the last image's shift."""
        shift = 0
        for span in self.spans:
            if index < span.start:
                break
            if index < span.end and span.grid is not None:
                return span.start + shift
            if index >= span.end:
                shift += span.n_pos - span.n_tokens
        return index + shift

    def resumable(self, index: int) -> int:
        """The last token index at or before `index` from which a sequence can be computed on: an
        M-RoPE image's rows all sit at one position, so llama.cpp cannot tell its first rows' cells
        from its last ones' and a cache hit or a chunk must not end inside one."""
        for span in self.spans:
            if span.grid is not None and span.start < index < span.end:
                return span.start
        return index

    def span_at(self, index: int) -> MediaSpan | None:
        """The span whose rows include token index `index`, if any."""
        for span in self.spans:
            if span.start <= index < span.end:
                return span
        return None

    def block_extra(self, k: int, block_size: int) -> bytes:
        """What the prefix cache must know about block k beyond its token ids: the digest and
        start of every span with rows in it, so that two different pictures or clips never share KV."""
        lo, hi = k * block_size, (k + 1) * block_size
        return b"".join(span.digest + span.start.to_bytes(4, "little")
                        for span in self.spans if span.start < hi and span.end > lo)

"""`EngineClient`: everything the server (and the offline API) may call on the engine.

The server depends on this protocol and on nothing else of the engine, as vLLM's API server
depends on its `EngineClient`: `LLMEngine` implements it in-process, tests/fake_engine.py
implements it with no model (the protocol tests), and a remote engine (a Ray Serve replica)
can implement it over a connection. Every method may be called from any thread.

Like vLLM's engine/protocol.py it holds the protocol and the data types and errors it carries,
nothing that runs a model: importing it loads no llama.cpp (tests/test_layers.py checks), so a
front-end that only speaks to an engine stays light.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Protocol, Sequence, runtime_checkable

from llmpack.errors import LlmpackError
from llmpack.runtime.engine.outputs import RequestOutput
from llmpack.runtime.engine.request import EngineDeadError, PromptTooLongError, QueueFullError
from llmpack.runtime.engine.sampling_params import InvalidParameterError, SamplingParams
from llmpack.runtime.media.images import ImageError
from llmpack.runtime.structured.grammar import GrammarError

# The errors a client of the engine handles, importable from here with the protocol.
__all__ = ["EngineClient", "OutputStream", "EmbeddingError", "EngineDeadError", "GrammarError", "ImageError",
           "InvalidParameterError", "PromptTooLongError", "QueueFullError"]

if TYPE_CHECKING:
    import numpy as np

    from llmpack.runtime.engine.outputs import EngineStats
    from llmpack.runtime.engine.media import MultimodalPrompt   # built by the engine (media_prompt), only passed back
    from llmpack.runtime.media.pictures import Picture


class EmbeddingError(LlmpackError):
    """An input cannot be embedded (too long) or the model cannot embed (HTTP 400). Defined here, not in
    embeddings.py, so that a client catches it without loading llama.cpp."""


class OutputStream(Protocol):
    """One submitted request's RequestOutput deltas; the last has finished=True. A stream never
    waits in silence on a dead engine: it ends with the engine's failure as its error."""

    request_id: str

    def __iter__(self) -> Iterator[RequestOutput]: ...

    def abort(self) -> None: ...


@runtime_checkable
class EngineClient(Protocol):
    n_ctx: int                   # the context llama.cpp gave us, in tokens
    n_vocab: int
    max_model_len: int           # the longest sequence (prompt + reply) the engine accepts
    bos_prefix: list[int]        # what the tokenizer puts in front of any text (usually [BOS])
    backend: dict | None         # where the model runs, for /health and the start-up line

    @property
    def failure(self) -> str | None:
        """Why the engine stopped, once it has (every request then fails); None while it serves."""

    @property
    def media_kinds(self) -> frozenset[str]:
        """What the model reads besides text: "image" (it sees), "audio" (it hears); the projector it
        was started with (--mmproj) says which. Empty for a text-only model."""

    @property
    def audio_sample_rate(self) -> int:
        """The rate of the PCM `media_prompt` takes for sound (16000 for Whisper encoders); 0 if it cannot hear."""

    def media_prompt(self, parts: "Sequence[str | tuple[str, bool] | Picture | tuple[bytes, str] | np.ndarray]") -> MultimodalPrompt:
        """A rendered prompt given as text pieces, pictures (a decoded Picture, or (bytes, media type),
        decoded in the sandbox) and sound (mono float32 PCM at audio_sample_rate, decoded in the sandbox)
        in order, as a prompt for add_request. Raises ImageError or AudioError for a picture or clip
        that cannot be used (or a model that cannot see or hear)."""

    def add_request(self, prompt: str | list[int] | MultimodalPrompt, params: SamplingParams | None = None,
                    request_id: str | None = None, prompt_progress: bool = False,
                    cache_salt: str | None = None) -> OutputStream:
        """Submit: queue a request and return its stream. Raises PromptTooLongError,
        QueueFullError, EngineDeadError, InvalidParameterError or GrammarError before queueing.
        `cache_salt`: requests with different salts never share prefix-cache blocks."""

    def abort(self, request_id: str) -> None: ...

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...

    def tokenize_prompt(self, text: str) -> list[int]:
        """A rendered prompt's ids, with the model's BOS added only where the text lacks it."""

    def token_bytes(self, token: int, special: bool = False) -> bytes: ...

    def check_grammar(self, gbnf: str) -> None:
        """Raise GrammarError when llama.cpp cannot parse the GBNF (checked before any request uses it)."""

    def embed(self, inputs: Sequence[list[int]]) -> list["np.ndarray"]:
        """L2-normalised embeddings of tokenized inputs (EmbeddingError when one cannot be embedded)."""

    def stats(self) -> "EngineStats": ...

    def shutdown(self) -> None: ...

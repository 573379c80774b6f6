"""llmpack: one GGUF model -> one double-clickable, offline chat app and OpenAI-compatible server.

The offline API mirrors vLLM's::

    from llmpack import LLM, SamplingParams
    llm = LLM("model.gguf")
    outputs = llm.generate(["Hello"], SamplingParams(max_tokens=32))

Heavy imports (llama.cpp) happen lazily so `llmpack inspect` stays instant.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover
    from llmpack.runtime.llm import LLM
    from llmpack.runtime.engine.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "LLM":
        from llmpack.runtime.llm import LLM   # lazy: llama.cpp loads only when the offline API is used

        return LLM
    if name == "SamplingParams":
        from llmpack.runtime.engine.sampling_params import SamplingParams   # lazy: as LLM

        return SamplingParams
    raise AttributeError(name)

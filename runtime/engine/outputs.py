"""What the engine hands back: a stream of RequestOutput per request.

In a stream, each RequestOutput carries *deltas*: `outputs` lists only the samples (by `index`)
that produced new text or finished at this step. `LLM.generate` accumulates them into the
final, vLLM-shaped result where each CompletionOutput holds the whole text. A request submitted
with `prompt_progress=True` may also receive outputs whose `outputs` is empty: prefill progress
(`num_processed_prompt_tokens` of `num_prompt_tokens`) while a long prompt is read in chunks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmpack.runtime.engine.latency import HistogramSnapshot


@dataclass(slots=True)
class TokenLogprob:
    token_id: int
    token: str                                   # the token's text piece
    logprob: float
    top: list[tuple[int, str, float]] = field(default_factory=list)  # (token_id, piece, logprob), best first


@dataclass(slots=True)
class CompletionOutput:
    index: int                                   # which of the n samples
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None             # None while running; "stop" | "length" | "abort"
    stop_reason: str | int | None = None         # the stop string or token id that ended it, if any
    logprobs: list[TokenLogprob] | None = None


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    outputs: list[CompletionOutput]
    finished: bool = False                       # all n samples finished
    prompt: str | None = None
    prompt_token_ids: list[int] = field(default_factory=list)
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0                   # prompt tokens served from the prefix cache
    num_generated_tokens: int = 0                # so far, summed over the n samples
    time_to_first_token: float | None = None     # seconds from add_request to the first token
    error: str | None = None                     # set when the engine failed this request
    # Prompt tokens whose KV is ready (prefix-cache hits included): equals num_prompt_tokens from
    # the first generated token on. A request added with prompt_progress=True also gets an output
    # with no `outputs` after every step that advanced its prefill without finishing it.
    num_processed_prompt_tokens: int = 0


@dataclass(slots=True)
class EngineStats:
    """The engine's counters and gauges at one moment (LLMEngine.stats()): what /health, /metrics and
    the Ray router read."""
    num_running: int
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int
    prompt_tokens_total: int
    generation_tokens_total: int
    requests_finished_total: int
    speculative: str = "off"
    spec_draft_tokens_total: int = 0
    spec_accepted_tokens_total: int = 0
    failed_steps_total: int = 0
    step_seconds: "HistogramSnapshot | None" = None        # how long steps take
    token_gap_seconds: "HistogramSnapshot | None" = None   # between a sequence's consecutive tokens
    target_gap_s: float = 0.0                              # the bound on a step's time while anyone decodes (0: off)
    prompt_tok_s: float = 0.0                              # the prompt speed the scheduler measured

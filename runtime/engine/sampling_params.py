"""Per-request sampling parameters, in vLLM's shape, validated once at the door.

Every range a request's sampling values must keep is written here, once: SamplingParams checks
itself when it is made (the offline API's door; the server's is runtime/core/params.py,
which turns wire values into these types, builds a SamplingParams and names the client's own field
in the 400). The engine then trusts a SamplingParams and checks nothing again."""
from __future__ import annotations

from dataclasses import dataclass, field

from llmpack.errors import LlmpackError


class InvalidParameterError(LlmpackError, ValueError):
    """A sampling parameter is out of range; the message names the parameter (HTTP 400)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param, self.reason = param, message


# How long a reply may be when the request does not say (max_tokens): each door's default, here once.
COMPLETION_MAX_TOKENS = 16           # /v1/completions and SamplingParams(), as OpenAI and vLLM
CHAT_MAX_TOKENS: int | None = None   # chat (the API, the page, LLM.chat): until the turn ends or the context is full
CONTINUE_MAX_TOKENS = 256            # the page's Complete mode: a base model rarely stops by itself
# Below this temperature sampling is greedy, as in vLLM (_SAMPLING_EPS): dividing logits by a
# temperature near the smallest float gives inf, and 0 * inf turns the best token's weight into NaN.
GREEDY_BELOW = 1e-5
MAX_STOPS = 16        # stop strings per request (a chat's include the model's own end-of-turn strings)
MAX_LOGPROBS = 20     # top alternatives per token, as OpenAI's API


@dataclass(slots=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0          # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0                    # 0 or -1 = disabled
    min_p: float = 0.0
    seed: int | None = None           # None = random; sample i of n uses seed + i
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    penalty_last_n: int = 64
    max_tokens: int | None = COMPLETION_MAX_TOKENS   # None = until the context is full
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None       # return this many top alternatives per token (0 = chosen token only)
    include_stop_str_in_output: bool = False
    grammar: str | None = None        # GBNF (root rule "root") the output must match; see runtime/structured/grammar.py

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.validate()

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    def validate(self) -> None:
        def check(ok: bool, param: str, message: str) -> None:
            if not ok:
                raise InvalidParameterError(param, message)

        check(isinstance(self.n, int) and 1 <= self.n <= 128, "n", f"must be an integer from 1 to 128, got {self.n!r}")
        check(0.0 <= self.temperature <= 100.0, "temperature", f"must be between 0 and 100, got {self.temperature}")
        check(0.0 < self.top_p <= 1.0, "top_p", f"must be in (0, 1], got {self.top_p}")
        check(isinstance(self.top_k, int) and self.top_k >= -1, "top_k", f"must be -1, 0 or a positive integer, got {self.top_k!r}")
        check(0.0 <= self.min_p <= 1.0, "min_p", f"must be in [0, 1], got {self.min_p}")
        check(-2.0 <= self.presence_penalty <= 2.0, "presence_penalty", f"must be in [-2, 2], got {self.presence_penalty}")
        check(-2.0 <= self.frequency_penalty <= 2.0, "frequency_penalty", f"must be in [-2, 2], got {self.frequency_penalty}")
        check(0.0 < self.repetition_penalty <= 10.0, "repetition_penalty", f"must be in (0, 10], got {self.repetition_penalty}")
        check(self.max_tokens is None or (isinstance(self.max_tokens, int) and self.max_tokens >= 1),
              "max_tokens", f"must be a positive integer, got {self.max_tokens!r}")
        check(self.seed is None or isinstance(self.seed, int), "seed", f"must be an integer, got {self.seed!r}")
        check(all(isinstance(s, str) and s for s in self.stop) and len(self.stop) <= MAX_STOPS,
              "stop", f"must be up to {MAX_STOPS} non-empty strings")
        check(all(isinstance(t, int) and t >= 0 for t in self.stop_token_ids), "stop_token_ids", "must be token ids")
        check(self.logprobs is None or (isinstance(self.logprobs, int) and 0 <= self.logprobs <= MAX_LOGPROBS),
              "logprobs", f"must be an integer from 0 to {MAX_LOGPROBS}, got {self.logprobs!r}")
        check(self.grammar is None or (isinstance(self.grammar, str) and bool(self.grammar.strip())),
              "grammar", "must be non-empty GBNF text")

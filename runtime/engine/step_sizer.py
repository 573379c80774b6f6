"""What one engine step costs on this computer, for this model, learned as it runs: the measure
the scheduler sizes steps by while someone is decoding (Sarathi-Serve's stall-free batching,
with the budget set by a time target instead of a fixed token count).

Every sequence that is decoding waits for the whole step its next token is in. On a CPU a
2,048-token step of prompt takes seconds, so a step's prompt tokens are limited to what fits in
`target_s` (EngineConfig.target_gap_ms) next to the decode rows. The model of a step is the
simplest that holds on llama.cpp:

    step seconds = decode part (the running sequences' one row each, weights read once)
                 + extra tokens / prompt speed (prompt chunks, picture rows, speculative drafts)

- `decode_s`: a moving average of the steps that held decode rows and (almost) nothing else;
- `tok_s`: the prompt speed, a ratio of moving sums (tokens over seconds, so a big step weighs
  more than a small one) over the steps that held extra tokens, their decode part taken off.

If `decode_s` is off by some amount, the speed measured next to it is off the opposite way, and
the step still settles at the target (budget = (target - decode_s) x tok_s): the two errors
cancel. Both start conservative (slow prompts, a decode part of half the target); the first
step with no one decoding - every server's first prompt - measures the speed for real.
"""
from __future__ import annotations

SEED_TOK_S = 100.0          # prompt tokens per second assumed before any is measured (slow on purpose)
SEED_WEIGHT_S = 0.1         # how many seconds of evidence the seed is worth
ALPHA = 0.2                 # weight of each new step in the moving averages
MIN_SAMPLE = 16             # a step with fewer extra tokens says more about decoding than about prompts
MIN_PROMPT_TOKENS = 32      # prompts always advance at least this much, however slow decoding is
# ... and at least as much time as the decode part: where decoding alone nearly fills the target (a
# slow or busy machine, many streams) a step then takes at most twice the decode part - the streams
# at worst halve their speed while a document is read - and the document is read at half the speed
# it would be alone, not a tenth (a 2-core machine at load 6 measured 60-150 ms of decode part
# against 90 prompt tokens/s: 200 ms left room for 5-13 tokens a step)


class StepSizer:
    """Sizes a step's prompt tokens to a target time, from what this machine's steps measured (module
    docstring). Not speculative.StepCost, which times decode-only steps by row count to choose
    draft lengths."""

    def __init__(self, tok_s: float = SEED_TOK_S, decode_s: float | None = None, learn: bool = True) -> None:
        """`learn=False` keeps the given speed and decode time (tests inject them: the budget is
        then a pure function of the target and the step's decode rows)."""
        self._tokens = tok_s * SEED_WEIGHT_S
        self._seconds = SEED_WEIGHT_S
        self.decode_s = decode_s            # None until a decode step is seen
        self.learn = learn
        self.steps_seen = 0
        self.prompt_samples = 0             # steps that taught the prompt speed: 0 means tok_s is the seed

    @property
    def tok_s(self) -> float:
        """The prompt speed, tokens per second."""
        return self._tokens / self._seconds

    @property
    def measured_tok_s(self) -> float:
        """The prompt speed this machine showed, or 0 before any step measured one: the seed is a
        cautious guess for sizing steps, not a figure to tell a person how long a file will take."""
        return self.tok_s if self.prompt_samples or not self.learn else 0.0

    def decode_estimate(self, target_s: float) -> float:
        return self.decode_s if self.decode_s is not None else target_s / 2

    def prompt_tokens(self, target_s: float) -> int:
        """How many extra tokens (prompt, picture rows, drafts) a step with decode rows may hold to
        take about `target_s` seconds."""
        decode_s = self.decode_estimate(target_s)
        room = max(target_s - decode_s, decode_s)
        return max(MIN_PROMPT_TOKENS, int(room * self.tok_s))

    def observe(self, decode_rows: int, extra_tokens: int, seconds: float) -> None:
        """Learn from one step that held `decode_rows` decode rows and `extra_tokens` other tokens
        and took `seconds` from scheduling to its outputs."""
        if not self.learn or seconds <= 0:
            return
        self.steps_seen += 1
        if decode_rows and extra_tokens < MIN_SAMPLE:
            base = max(0.0, seconds - extra_tokens / self.tok_s)
            self.decode_s = base if self.decode_s is None else (1 - ALPHA) * self.decode_s + ALPHA * base
            return
        if extra_tokens < MIN_SAMPLE:
            return
        decode_part = (self.decode_s or 0.0) if decode_rows else 0.0
        extra_s = max(seconds - decode_part, 0.1 * seconds)
        self.prompt_samples += 1
        self._tokens = (1 - ALPHA) * self._tokens + ALPHA * extra_tokens
        self._seconds = (1 - ALPHA) * self._seconds + ALPHA * extra_s

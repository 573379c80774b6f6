"""What one engine step costs on this computer, for this model, learned as it runs: the measure
the scheduler sizes steps by while someone is decoding (Sarathi-Serve's stall-free batching,
with the budget set by time instead of a fixed token count).

Every sequence that is decoding waits for the whole step its next token is in. On a CPU a
2,048-token step of prompt takes seconds, so while anyone decodes a step's prompt tokens are
limited to what fits in a time. The model of a step is a straight line, fitted to the recent
steps by least squares:

    step seconds = a                  the weights read once, Python's share of the step
                 + b x decode rows    each row's logits (Qwen2.5 0.5B: 136 M multiply-adds a row)
                 + p (if a chunk)     a prompt chunk's one pass over the whole KV cache
                 + c x extra tokens   prompt chunks, picture rows

Measured on 2 cores (benchmarks/step_cost.py; docs/BENCHMARKS.md, 'mixed'): Qwen2.5 0.5B with
4 decode rows and a chunk 1,024 tokens into a document, a + 4b ~ 63 ms, p ~ 70 ms, c ~ 7.5 ms.
So a 32-token chunk reads at ~100 tokens/s and a 512-token one at ~135: one number for "the
prompt speed", learned from the small chunks, kept the budget at its floor; the line does not.

A step aims at the target gap (`target_s`, --target-gap-ms), as Sarathi-Serve sizes its budget by
the latency goal. A step's fixed part (a + b x rows + p) is paid however few prompt tokens it
holds, and on a CPU a bigger chunk reads each token faster besides (benchmarks/step_cost.py), so a
shorter step reads documents slower and gets less done in all. Aiming shorter than the bound (ten
times the decode part, until 2026-12-06) lost on Gemma both ways: documents' first word later and
fewer tokens a second than at the bound (docs/BENCHMARKS.md, 'mixed'). A stream waits one step per
token, so the bound is what it feels while someone's document is read; the steps overshoot their
aim by about a tenth at p99.

The line starts from a slow guess (100 tokens/s); the first prompt read with nobody decoding -
every server's first - measures the real speed, and each step after refines it. Old steps are
forgotten (FORGET) so the fit follows the cache filling up and the machine getting busier. What
a line cannot follow - each chunk of a document attends to more of it than the last, a document's
reply decoding costs more than a chat's - the steps with a prompt measure as they go: `error_s`,
how much longer than the line said they took lately, is taken off the next step's time (a late
step counts more than an early one: every stream waits for it). So the steps settle near the
target even where the line is wrong (the old sizer's one speed had that; a Qwen run without it
took 0.75-1.0 s a step aiming at 0.7). It lags a cost that keeps growing (a
model machine: +7 % late in a document, +12 % without it). The chunk's depth as a fifth term of
the line, with the engine telling where each chunk starts, was tried: it aimed no better on a model
machine and made the real steps shorter (docs/BENCHMARKS.md, 'mixed').
"""
from __future__ import annotations

import numpy as np

SEED_TOK_S = 100.0          # prompt tokens per second assumed before any is measured (slow on purpose)
SEED_DECODE_S = 0.05        # the decode part assumed before any step is measured
FORGET = 0.95               # each step's weight in the fit shrinks by this at every newer step (~20 steps)
PRIOR = 0.1                 # the seed's weight, in steps: enough to keep the fit defined, not to hold it
ERROR_ALPHA = 0.2           # the weight of each new step with a prompt in error_s ...
ERROR_ALPHA_LATE = 0.5      # ... and of one that took longer than that already allowed for: a late step is
                            # what a stream feels, so the next one is made shorter at once, a longer one slowly
MIN_SAMPLE = 16             # fewer extra tokens (speculative drafts) cost like decode rows, not like a chunk
MIN_PROMPT_TOKENS = 32      # prompts always advance at least this much, however slow decoding is
# A step's prompt tokens get at least as much time as the decode part: where decoding alone nearly
# fills the target (a slow or busy machine, many streams) a step then takes at most twice the decode
# part - the streams at worst halve their speed while a document is read - and the document is read
# at half the speed it would be alone, not a tenth.


class StepSizer:
    """Sizes a step's prompt tokens to a time, from what this machine's steps measured (module
    docstring). Not speculative.StepCost, which times decode-only steps by row count to choose
    draft lengths."""

    def __init__(self, tok_s: float = SEED_TOK_S, decode_s: float = SEED_DECODE_S, chunk_s: float = 0.0,
                 learn: bool = True) -> None:
        """The seed line: a step of r decode rows and n prompt tokens takes decode_s + chunk_s +
        n / tok_s (the rows' part is decode_s whatever r). `learn=False` keeps it (tests inject
        it: the budget is then a pure function of the target)."""
        self._seed = np.array([decode_s, 0.0, chunk_s, 1.0 / tok_s])
        self.coef = self._seed.copy()          # a, b, p, c
        self._xx = np.zeros((4, 4))            # the forgotten sums of x x^T and x y (least squares)
        self._xy = np.zeros(4)
        self.learn = learn
        self.error_s = 0.0                     # recent steps with a prompt: seconds taken past the line's
        self.steps_seen = 0
        self.prompt_samples = 0                # steps that taught the prompt's cost: 0 means c is the seed

    # ---- what a step costs --------------------------------------------------------------------
    @staticmethod
    def _row(decode_rows: int, extra_tokens: int) -> np.ndarray:
        if extra_tokens < MIN_SAMPLE:          # drafts: logits rows beside the decode rows
            return np.array([1.0, decode_rows + extra_tokens, 0.0, 0.0])
        return np.array([1.0, decode_rows, 1.0, extra_tokens])

    def predict(self, decode_rows: int, extra_tokens: int) -> float:
        """Seconds a step of `decode_rows` rows and `extra_tokens` prompt tokens takes, by the fit."""
        return float(self._row(decode_rows, extra_tokens) @ self.coef)

    def decode_s(self, decode_rows: int) -> float:
        """The decode part: a step of these rows alone."""
        a, b, _, _ = self.coef
        return max(0.0, a + b * decode_rows)

    def fixed_s(self, decode_rows: int) -> float:
        """What a step with these rows and a prompt chunk costs before its first prompt token."""
        return self.decode_s(decode_rows) + max(0.0, float(self.coef[2]))

    @property
    def tok_s(self) -> float:
        """The prompt speed at the margin: a long prompt's tokens per second, fixed costs aside. Where
        recent chunks were all about one size, the fit cannot tell p from c: the seed's pull keeps p
        near 0 and c takes it all, so this tends to err slow (documents/ sizes reading by it)."""
        return 1.0 / max(float(self.coef[3]), 1e-7)

    @property
    def measured_tok_s(self) -> float:
        """The prompt speed this machine showed, or 0 before any step measured one: the seed is a
        cautious guess for sizing steps, not a figure to tell a person how long a file will take."""
        return self.tok_s if self.prompt_samples or not self.learn else 0.0

    # ---- the budget ---------------------------------------------------------------------------
    def prompt_tokens(self, target_s: float, decode_rows: int = 1) -> int:
        """How many extra tokens (prompt, picture rows, drafts) a step with `decode_rows` decode rows
        may hold to take about target_s seconds."""
        decode_s = self.decode_s(decode_rows)
        room = max(target_s - self.fixed_s(decode_rows) - self.error_s, decode_s)
        return max(MIN_PROMPT_TOKENS, int(room * self.tok_s + 1e-6))   # (0.3 - 0.07) x 1000 is 229.99...9

    # ---- learning -----------------------------------------------------------------------------
    def observe(self, decode_rows: int, extra_tokens: int, seconds: float) -> None:
        """Learn from one step that held `decode_rows` decode rows and `extra_tokens` other tokens
        and took `seconds` from scheduling to its outputs."""
        if not self.learn or seconds <= 0:
            return
        self.steps_seen += 1
        if extra_tokens >= MIN_SAMPLE:
            self.prompt_samples += 1
            miss = seconds - self.predict(decode_rows, extra_tokens)        # before the fit sees this step
            alpha = ERROR_ALPHA_LATE if miss > self.error_s else ERROR_ALPHA
            self.error_s = (1 - alpha) * self.error_s + alpha * miss
        x = self._row(decode_rows, extra_tokens)
        self._xx = FORGET * self._xx + np.outer(x, x)
        self._xy = FORGET * self._xy + x * seconds
        # least squares pulled (weakly) towards the seed: where recent steps say nothing about a
        # coefficient (decode rows never varied, no chunk for a while) it drifts back to the seed
        prior = PRIOR * np.eye(4)
        coef = np.linalg.solve(self._xx + prior, self._xy + prior @ self._seed)
        coef[3] = max(coef[3], 1e-7)           # a token never costs nothing (noise must not open the gate)
        self.coef = coef

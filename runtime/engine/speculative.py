"""Speculative decoding by n-gram prompt lookup (llama.cpp's `ngram` types, vLLM's `[ngram]`).

A reply that quotes its prompt (answers about an attached document, a code file rewritten with
small edits) repeats long runs of tokens the sequence already holds. The drafter finds the
latest earlier occurrence of the sequence's last `MAX_N`..`MIN_N` tokens and proposes the
tokens that followed it; the target model checks all of them in the same llama_decode as the
sequence's next token, so every accepted draft token is a token generated without a step.

Verification keeps the output exactly what the model would have produced without drafting:
- greedy: a draft token is accepted while it is the row's argmax; the first row that disagrees
  gives the next token (so output is token-for-token the same as without drafting, up to the
  batch-size rounding llama.cpp's kernels have anyway);
- sampled: the standard rejection rule for a deterministic draft: accept draft token x with
  probability p(x) under the target's (temperature, top-k, top-p, min-p) distribution; on
  rejection draw from p with x removed, renormalised. The tokens emitted are distributed
  exactly as the target's samples (tests/test_speculative.py checks it statistically).

Modes (EngineConfig.speculative): "off"; "ngram" drafts whenever a match exists; "auto" (the
default) also stops drafting for a sequence whose acceptance stays low, for every sequence while
more than BUSY_ROWS sequences decode together (a full batch already keeps the cores busy: extra
rows would cost throughput), and whenever drafting turns out slower than not drafting on this
machine. That last rule is measured, not assumed: a draft row costs a whole row of the output
layer, and on a CPU with a large vocabulary (Gemma 3's 262k tokens) nine rows cost several times
one (docs/BENCHMARKS.md), while on a GPU they cost about as much as one. So "auto" keeps the
tokens per second of steps with and without drafts (every PLAIN_EVERY-th step decodes without
them) and pauses drafting for PAUSE_STEPS steps when it does not pay.
Sequences with penalties, a grammar, logprobs or n > 1 never draft (their sampling state would
have to be rewound).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llmpack.runtime.engine.sequence import Sequence

MAX_N, MIN_N = 4, 2        # n-gram lengths looked up, longest first
MAX_DRAFT = 8              # tokens proposed per step
BUSY_ROWS = 4              # auto: no drafting while more sequences than this decode together
PROBE = 24                 # auto: judge a sequence's acceptance after this many drafted tokens...
MIN_ACCEPTANCE = 0.35      # ...and stop drafting for it below this rate
PLAIN_EVERY = 8            # auto: one step in this many decodes without drafts, to keep its speed known
PAUSE_STEPS = 256          # auto: steps without drafting once drafting measured slower
MIN_SAMPLES = 3            # auto: steps of each kind measured before comparing
EMA = 0.3                  # weight of the newest step in the speed averages


@dataclass(slots=True)
class SpecState:
    """One sequence's n-gram index and acceptance record."""
    rng: np.random.Generator
    index: dict[tuple[int, ...], int] = field(default_factory=dict)   # n-gram -> end of its latest occurrence
    indexed: int = 0           # token_ids[:indexed] have their n-grams in `index`
    drafted: int = 0
    accepted: int = 0
    off: bool = False


class NgramDrafter:
    def __init__(self, mode: str, max_draft_rows: int) -> None:
        self.mode = mode
        # llama.cpp's n_outputs_max less one row per running sequence: the draft rows one step may
        # ask logits for (more aborts the process in llama.cpp's output_reserve)
        self.max_draft_rows = max_draft_rows
        self.rows_left = 0                 # draft rows still allowed in the step being scheduled
        self.drafted_total = 0
        self.accepted_total = 0
        self.steps = 0
        self.paused_until = 0              # auto: no drafting before this step
        # auto: tokens per ms of quiet decode steps (no prefill), by running sequences, plain / drafting
        self.speed: dict[tuple[int, bool], tuple[float, int]] = {}

    # ---- scheduling -----------------------------------------------------------------------
    def start_step(self, num_running: int) -> None:
        """Called before a step is scheduled: how many draft rows it may hold."""
        self.steps += 1
        if self.mode == "off":
            self.rows_left = 0
        elif self.mode == "ngram":
            self.rows_left = self.max_draft_rows
        else:
            quiet = num_running <= BUSY_ROWS and self.steps >= self.paused_until and self.steps % PLAIN_EVERY
            self.rows_left = self.max_draft_rows if quiet else 0

    def observe_step(self, num_running: int, drafted: bool, tokens: int, ms: float) -> None:
        """A decode-only step took `ms` and generated `tokens`: update the speeds "auto" compares,
        and pause drafting when steps with drafts make fewer tokens per ms than steps without."""
        if self.mode != "auto" or num_running > BUSY_ROWS or ms <= 0:
            return
        key = (num_running, drafted)
        rate, n = self.speed.get(key, (0.0, 0))
        self.speed[key] = (tokens / ms if n == 0 else (1 - EMA) * rate + EMA * tokens / ms, n + 1)
        plain, spec = self.speed.get((num_running, False)), self.speed.get((num_running, True))
        if plain and spec and plain[1] >= MIN_SAMPLES and spec[1] >= MIN_SAMPLES and spec[0] < plain[0]:
            self.paused_until = self.steps + PAUSE_STEPS
            del self.speed[(num_running, True)]       # judged afresh after the pause

    def eligible(self, seq: Sequence) -> bool:
        p = seq.request.params
        return not (p.n > 1 or p.logprobs is not None or p.grammar is not None or seq.sampler.has_penalties)

    def draft(self, seq: Sequence, room: int) -> list[int]:
        """Up to MAX_DRAFT tokens that followed the latest earlier occurrence of seq's suffix."""
        if self.rows_left <= 0 or seq.num_output_tokens == 0:
            return []
        state = seq.spec
        if state is None:
            if not self.eligible(seq):
                return []
            state = seq.spec = SpecState(np.random.default_rng(seq.request.seed + seq.index + 0x5bec))
        if state.off:
            return []
        toks = seq.token_ids
        self._index(state, toks)
        p = seq.request.params
        left = len(toks) - seq.num_prompt_tokens
        limit = min(MAX_DRAFT, room, self.rows_left,
                    (p.max_tokens - left - 1) if p.max_tokens is not None else MAX_DRAFT)
        if limit <= 0:
            return []
        for n in range(MAX_N, MIN_N - 1, -1):
            end = state.index.get(tuple(toks[-n:]))
            if end is not None:
                draft = toks[end:end + limit]
                self.rows_left -= len(draft)
                return draft
        return []

    @staticmethod
    def _index(state: SpecState, toks: list[int]) -> None:
        """Add the n-grams that end before the last token (the suffix itself must not match)."""
        for end in range(max(state.indexed, MIN_N), len(toks)):
            for n in range(MIN_N, MAX_N + 1):
                if end >= n:
                    state.index[tuple(toks[end - n:end])] = end
        state.indexed = max(state.indexed, len(toks))

    # ---- verification -----------------------------------------------------------------------
    def verify(self, seq: Sequence, draft: list[int], rows: list[np.ndarray]) -> list[int]:
        """The tokens to append: the accepted prefix of `draft`, then one token from the row
        after it. rows[i] are the logits after draft[:i]."""
        sampler, state = seq.sampler, seq.spec
        out: list[int] = []
        for i, x in enumerate(draft):
            row = rows[i]
            if sampler.chain is None:                       # greedy
                best = int(row.argmax())
                if best != x:
                    out.append(best)
                    break
                out.append(x)
                continue
            ids, p = target_distribution(sampler, row)
            hit = np.flatnonzero(ids == x)
            px = float(p[hit[0]]) if len(hit) else 0.0
            if state.rng.random() < px:
                out.append(x)
                continue
            residual = p.copy()
            if len(hit):
                residual[hit[0]] = 0.0
            out.append(int(ids[state.rng.choice(len(ids), p=residual / residual.sum())]))
            break
        else:
            out.append(sampler.sample(rows[len(draft)]))
        accepted = len(out) - 1
        self._record(state, len(draft), accepted)
        return out

    def _record(self, state: SpecState, drafted: int, accepted: int) -> None:
        state.drafted += drafted
        state.accepted += accepted
        self.drafted_total += drafted
        self.accepted_total += accepted
        if self.mode == "auto" and state.drafted >= PROBE and state.accepted < MIN_ACCEPTANCE * state.drafted:
            state.off = True


def target_distribution(sampler, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The token ids the sampler can draw from `row` and their probabilities (temperature,
    top-k, top-p and min-p applied, as SequenceSampler.sample_free draws)."""
    ids = sampler.kept_tokens(row)
    logits = row[ids].astype(np.float64) / sampler.params.temperature
    w = np.exp(logits - logits.max())
    return ids, w / w.sum()

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
default) drafts only where it is expected to pay, from two measured things:
- what a step costs by its number of rows: `StepCost` keeps each row count's average over the
  decode-only steps the engine runs anyway (and the few with drafts). On a GPU a row costs
  almost nothing next to the step. On a CPU the cost is a staircase with steps of ROW_BLOCK:
  ggml multiplies repacked K-quant weights four rows at a time and each leftover row on its
  own, so 8 rows cost less than 5 or 9, and 16 less than 13 or 17 (docs/BENCHMARKS.md has
  the table). A draft is therefore sized so that the step's rows fill whole blocks;
- how many of k draft tokens are expected to be accepted: from the sequence's last RECORDS
  drafts (every sequence's until it has MIN_RECORDS), since acceptance comes in runs; with
  fewer records, from its acceptance rate p as p + p^2 + ... + p^k.
The draft length k maximises (N + expected extra tokens) / cost(N + k) for a step of N
sequences; when k = 0 wins, nothing is drafted. Until a full draft's step was measured, a draft
is full-length (the probe that measures it). Once every PROBE_EVERY steps while drafting is off, a
probe of up to PROBE_ROWS draft tokens keeps what rows cost measured and gives a sequence whose
record says no a new chance (a failed one costs ~4 steps' time on a 2-core CPU, 8 % of the steps
between probes, until MIN_ACCEPTANCE stops it).
Also off for every sequence while more than BUSY_ROWS decode together, and for a sequence whose
acceptance stays below MIN_ACCEPTANCE.
Sequences with penalties, a grammar, logprobs or n > 1 never draft (their sampling state would
have to be rewound).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np

from llmpack.runtime.engine.sequence import Sequence

MAX_N, MIN_N = 4, 2        # n-gram lengths looked up, longest first
MAX_DRAFT = 15             # tokens proposed per step: with the sequence's own row, 16 rows (four blocks)
ROW_BLOCK = 4              # auto: a step's rows are made a multiple of this (the CPU's cost staircase)
BUSY_ROWS = 4              # auto: no drafting while more sequences than this decode together
PROBE = 24                 # auto: judge a sequence's acceptance after this many drafted tokens...
MIN_ACCEPTANCE = 0.35      # ...and stop drafting for it below this rate
PROBE_EVERY = 48           # auto: steps between probes with drafts while the cost model says no
PROBE_ROWS = 7             # auto: draft tokens in such a probe (with the sequence's row, two blocks)
PRIOR_ACCEPTANCE = 0.6     # auto: p assumed before any draft token was verified
EMA = 0.2                  # weight of the newest step in a row count's average
RECORDS = 32               # auto: past drafts kept per sequence (and for all) to predict the next one's gain
MIN_RECORDS = 4            # auto: fewer than this, and acceptance's rate alone predicts it


def block_sizes(n_seqs: int, limit: int) -> list[int]:
    """The draft lengths up to `limit` that bring a step of n_seqs rows to whole ROW_BLOCKs."""
    return list(range(-n_seqs % ROW_BLOCK or ROW_BLOCK, limit + 1, ROW_BLOCK))


class StepCost:
    """Milliseconds of a decode-only step by its number of rows (logits rows: sequences plus draft
    tokens): each measured row count's recent average, read between measured counts by linear
    interpolation. Not one line: on a CPU the cost is a staircase (one row takes ggml's
    matrix-vector path, more rows are computed in blocks that share each weight load), so a line
    through the 1- and 2-row steps predicts nine rows at ten times one, where a quiet machine
    measured four and a half (docs/BENCHMARKS.md), and auto would never draft."""

    def __init__(self) -> None:
        self.ms: dict[int, float] = {}        # rows -> average ms of steps with that many rows

    def observe(self, rows: int, ms: float) -> None:
        old = self.ms.get(rows)
        self.ms[rows] = ms if old is None else (1 - EMA) * old + EMA * ms

    def estimate(self, rows: int) -> float | None:
        """Expected ms of a step of `rows` rows; None before any step was measured. Past the largest
        measured count, rows are assumed to cost in proportion (the most a row can cost)."""
        if rows in self.ms:
            return self.ms[rows]
        below = max((r for r in self.ms if r < rows), default=None)
        above = min((r for r in self.ms if r > rows), default=None)
        if below is not None and above is not None:
            f = (rows - below) / (above - below)
            return self.ms[below] + f * (self.ms[above] - self.ms[below])
        if below is not None:
            return self.ms[below] * rows / below
        return None if above is None else self.ms[above]

    def best_draft(self, n_seqs: int, gain: Callable[[int], float], limit: int) -> int:
        """The draft length (0..limit) that makes the most tokens per ms in a step of n_seqs
        sequences, one of them drafting k tokens of which gain(k) are expected accepted; only
        lengths that bring the step's rows to a multiple of ROW_BLOCK. Until a step that long was
        measured, the longest such length: the probe that measures what a full draft costs."""
        sizes = block_sizes(n_seqs, limit)
        if not sizes:
            return 0
        base = self.estimate(n_seqs)
        if base is None or max(self.ms) < n_seqs + sizes[-1]:
            return sizes[-1]
        best_k, best_rate = 0, n_seqs / base
        for k in sizes:
            rate = (n_seqs + gain(k)) / self.estimate(n_seqs + k)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k


def geometric_gain(p: float) -> Callable[[int], float]:
    """Expected accepted tokens of a k-token draft when each is accepted with chance p once the
    ones before it were: p + p^2 + ... + p^k."""
    return lambda k: sum(p ** i for i in range(1, k + 1))


def recorded_gain(records: Collection[tuple[int, int]], p: float) -> Callable[[int], float]:
    """Expected accepted tokens of a k-token draft from past drafts (drafted, accepted), which say
    more than one rate where acceptance comes in runs (a quote is copied until the reply departs
    from it): a draft refused after `accepted` tokens would have given min(accepted, k); one
    accepted in full gave at least that many, and is extended past its length with rate p."""
    def gain(k: int) -> float:
        total = 0.0
        for drafted, accepted in records:
            if accepted < drafted or drafted >= k:
                total += min(accepted, k)
            else:
                total += accepted + sum(p ** i for i in range(1, k - accepted + 1))
        return total / len(records)
    return gain


@dataclass(slots=True)
class SpecState:
    """One sequence's n-gram index and acceptance record."""
    rng: np.random.Generator
    index: dict[tuple[int, ...], int] = field(default_factory=dict)   # n-gram -> end of its latest occurrence
    indexed: int = 0           # token_ids[:indexed] have their n-grams in `index`
    drafted: int = 0
    accepted: int = 0
    examined: int = 0          # draft tokens verified up to and including the first rejected one
    records: deque = field(default_factory=lambda: deque(maxlen=RECORDS))   # its last drafts: (drafted, accepted)
    off: bool = False


def acceptance(accepted: int, examined: int) -> float:
    """p, the chance that a draft token is accepted once the ones before it were: accepted over
    examined (a rejection ends a draft's examination), with PRIOR_ACCEPTANCE as two pseudo-counts."""
    return (accepted + 2 * PRIOR_ACCEPTANCE) / (examined + 2)


class NgramDrafter:
    def __init__(self, mode: str, max_draft_rows: int) -> None:
        self.mode = mode
        # llama.cpp's n_outputs_max less one row per running sequence: the draft rows one step may
        # ask logits for (more aborts the process in llama.cpp's output_reserve)
        self.max_draft_rows = max_draft_rows
        self.rows_left = 0                 # draft rows still allowed in the step being scheduled
        self.drafted_total = 0
        self.accepted_total = 0
        self.examined_total = 0
        self.steps = 0
        self.num_running = 0               # sequences in the step being scheduled
        self.last_draft_step = 0           # auto: the last step that held draft rows
        self.cost = StepCost()             # auto: what a decode-only step costs by rows
        self.records: deque = deque(maxlen=RECORDS)   # every sequence's last drafts, for one without its own

    # ---- scheduling -----------------------------------------------------------------------
    def start_step(self, num_running: int) -> None:
        """Called before a step is scheduled: how many draft rows it may hold."""
        self.steps += 1
        self.num_running = num_running
        if self.mode == "off" or (self.mode == "auto" and num_running > BUSY_ROWS):
            self.rows_left = 0
        else:
            self.rows_left = self.max_draft_rows

    def observe_step(self, rows: int, drafted: bool, ms: float) -> None:
        """A decode-only step of `rows` logits rows took `ms`: what "auto" chooses draft lengths by.
        Only steps as small as a drafting one count: the CPU's cost is not linear in rows (one row
        takes ggml's matrix-vector path), and 32-row steps would flatten the line where it matters."""
        if self.mode == "auto" and ms > 0 and rows <= BUSY_ROWS + MAX_DRAFT + 1:
            self.cost.observe(rows, ms)
            if drafted:
                self.last_draft_step = self.steps

    def _auto_limit(self, state: SpecState, limit: int) -> int:
        """How many draft tokens auto proposes for a sequence (0: none), at most `limit`."""
        p = acceptance(state.accepted, state.examined) if state.examined else \
            acceptance(self.accepted_total, self.examined_total)
        records = state.records if len(state.records) >= MIN_RECORDS else self.records
        gain = recorded_gain(records, p) if len(records) >= MIN_RECORDS else geometric_gain(p)
        k = self.cost.best_draft(max(self.num_running, 1), gain, limit)
        if k == 0 and self.steps - self.last_draft_step >= PROBE_EVERY:
            probes = block_sizes(max(self.num_running, 1), min(PROBE_ROWS, limit))
            k = probes[-1] if probes else 0       # keep the cost of draft rows measured
        return k

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
                if self.mode == "auto":
                    limit = min(limit, len(toks) - end)
                    if (limit := self._auto_limit(state, limit)) <= 0:
                        return []
                    self.last_draft_step = self.steps
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
        examined = min(drafted, accepted + 1)
        state.drafted += drafted
        state.accepted += accepted
        state.examined += examined
        self.drafted_total += drafted
        self.accepted_total += accepted
        self.examined_total += examined
        state.records.append((drafted, accepted))
        self.records.append((drafted, accepted))
        if self.mode == "auto" and state.drafted >= PROBE and state.accepted < MIN_ACCEPTANCE * state.drafted:
            state.off = True


def target_distribution(sampler, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The token ids the sampler can draw from `row` and their probabilities (temperature,
    top-k, top-p and min-p applied, as SequenceSampler.sample_free draws)."""
    ids = sampler.kept_tokens(row)
    logits = row[ids].astype(np.float64) / sampler.params.temperature
    w = np.exp(logits - logits.max())
    return ids, w / w.sum()

"""Token sampling that stays exact and cheap at a 262k-token vocabulary.

On a 262k-token vocabulary, llama.cpp's sampler chain run over the whole vocabulary is
expensive per row, and with top_p (it sorts every candidate) it costs more than a whole decode
step of 16 sequences (figures: docs/BENCHMARKS.md, "Sampler"). So each row goes through two
stages:

1. numpy, over the whole row (vectorised, a fraction of a millisecond): penalties are applied to the few
   tokens in the history; the unnormalised probabilities w = exp((logit - max) / T) and
   their sum Z are computed exactly; then top_k, top_p and min_p are applied *exactly*
   without sorting the vocabulary: a threshold on w is lowered in steps until the tokens
   above it are sure to contain the kept set (all of the top k; or enough mass for top_p),
   and only those (typically tens to a few thousand) are sorted. The order is the textbook
   one: top_k, then top_p relative to the top-k set's mass, then min_p. With no truncation
   asked for, the kept set is everything but a tail holding at most 1e-6 of the mass.
   Masses are summed in float64, so a cut that falls on a tie (e.g. 100 equal tokens and
   top_p 0.3) lands where exact arithmetic puts it. Greedy rows are a plain argmax.
2. llama.cpp, over the kept tokens: the sequence's own sampler chain, temperature ->
   dist(seed), draws the token in C via llama_sampler_apply. The chain owns the
   sequence's RNG, so a seed reproduces a sample.
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from llmpack.runtime.engine.grammar_sampler import GrammarConstraint
from llmpack.runtime.engine.outputs import TokenLogprob
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.engine.token_data import TAIL, TOKEN_DATA
from llmpack.runtime.hardware.bindings import lc

_LEVELS = [math.exp(-x) for x in (2, 4, 6, 8, 10, 12, 16, 20, 24, 32)] + [0.0]


class SequenceSampler:
    """The sampling state of one sample (one of a request's n): its llama.cpp chain and penalties."""

    def __init__(self, params: SamplingParams, seed: int, vocab=None, grammar_smpl=None) -> None:
        """`grammar_smpl`: llama.cpp's already parsed grammar sampler for this sample (owned from
        here on), so a request's grammar is parsed once; None: parsed here if there is a grammar."""
        self.params = params
        self.grammar = None   # a GrammarConstraint when the request constrains its output
        if params.grammar is not None:
            self.grammar = GrammarConstraint(params.grammar, vocab, params.stop_token_ids, grammar_smpl)
        self.chain = None
        if not params.greedy:
            chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(params.temperature))
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(seed & 0xFFFFFFFF))
            self.chain = chain
        self.has_penalties = (params.presence_penalty != 0.0 or params.frequency_penalty != 0.0
                              or params.repetition_penalty != 1.0)

    def close(self) -> None:
        if self.grammar is not None:
            self.grammar.close()
        if self.chain is not None:
            lc.llama_sampler_free(self.chain)
            self.chain = None

    def __del__(self) -> None:  # the engine closes explicitly; this is a safety net
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------------------------
    def apply_penalties(self, row: np.ndarray, context: list[int], output: list[int]) -> None:
        """OpenAI presence/frequency penalties over the output, and HF-style repetition
        penalty over the last penalty_last_n tokens of prompt+output. Modifies row in place."""
        p = self.params
        if p.repetition_penalty != 1.0 and context:
            ids = np.unique(np.asarray(context[-p.penalty_last_n:], dtype=np.int64))
            ids = ids[ids >= 0]          # a picture's or clip's rows have placeholder ids (media.MEDIA_TOKEN)
            vals = row[ids]
            row[ids] = np.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
        if (p.presence_penalty or p.frequency_penalty) and output:
            ids, counts = np.unique(np.asarray(output, dtype=np.int64), return_counts=True)
            row[ids] -= p.frequency_penalty * counts + p.presence_penalty

    def kept_tokens(self, row: np.ndarray) -> np.ndarray:
        """Token ids that survive top_k, then top_p (over the top-k set), then min_p - exactly
        the textbook full-sort definition, computed without sorting the vocabulary. Best first."""
        p = self.params
        w = np.exp((row - row.max()) * (1.0 / p.temperature))
        cut: float | None = p.top_p if p.top_p < 1.0 else None
        if p.top_k > 0:
            ids = self._best(w, lambda above: int(above.sum()) >= p.top_k)[:p.top_k]
            mass = float(w[ids].sum(dtype=np.float64))   # top_p is relative to the top-k set's mass
        elif p.min_p > 0.0 and cut is None:
            ids, mass = _by_weight(w, np.flatnonzero(w >= p.min_p)), 0.0      # every token >= min_p
        else:
            mass = float(w.sum(dtype=np.float64))
            if cut is None:                  # no truncation asked for: drop only a negligible tail
                cut = 1.0 - TAIL
            target = cut * mass
            ids = self._best(w, lambda above: float(np.sum(w, where=above, dtype=np.float64)) >= target)
        if cut is not None:                  # the scanned set holds the whole top_p prefix
            ids = ids[:int(np.searchsorted(np.cumsum(w[ids], dtype=np.float64), cut * mass)) + 1]
        if p.min_p > 0.0:
            ids = ids[w[ids] >= p.min_p]
        return ids

    @staticmethod
    def _best(w: np.ndarray, enough) -> np.ndarray:
        """The tokens with the largest w, best first, lowering a threshold on w until
        `enough(mask)` holds for the tokens at or above it."""
        for level in _LEVELS:
            above = w >= level
            if level == 0.0 or enough(above):
                break
        return _by_weight(w, np.flatnonzero(above))

    def sample(self, row: np.ndarray, remaining: int | None = None) -> int:
        """Pick the next token from one (already penalised) logits row; `remaining` is how many
        tokens the sequence may still produce, this one included (a grammar steers to its end)."""
        if self.grammar is not None:
            return self.grammar.sample(self, row, remaining)
        return self.sample_free(row)

    def sample_free(self, row: np.ndarray) -> int:
        """Pick the next token ignoring any grammar; does not modify row."""
        if self.chain is None:
            return int(row.argmax())
        ids = self.kept_tokens(row)
        cand = np.empty(len(ids), dtype=TOKEN_DATA)
        cand["id"] = ids
        cand["logit"] = row[ids]
        cand["p"] = 0.0
        arr = lc.llama_token_data_array(
            data=cand.ctypes.data_as(lc.llama_token_data_p), size=len(cand), selected=-1, sorted=True)
        lc.llama_sampler_apply(self.chain, ctypes.byref(arr))
        return int(cand["id"][arr.selected])


def _by_weight(w: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """ids sorted by w, largest first; ties keep id order (as a stable full sort would)."""
    return ids[np.argsort(-w[ids], kind="stable")]


def compute_logprobs(row: np.ndarray, token: int, top_n: int, piece) -> TokenLogprob:
    """log-softmax of the raw logits row: the chosen token's logprob and the top_n alternatives."""
    best = float(row.max())
    lse = best + math.log(float(np.exp(row - best, dtype=np.float32).sum()))
    top: list[tuple[int, str, float]] = []
    if top_n > 0:
        idx = np.argpartition(row, -top_n)[-top_n:]
        idx = idx[np.argsort(-row[idx])]
        top = [(int(i), piece(int(i)), float(row[i]) - lse) for i in idx]
    return TokenLogprob(token_id=token, token=piece(token), logprob=float(row[token]) - lse, top=top)

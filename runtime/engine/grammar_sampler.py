"""One sequence's grammar: llama.cpp's grammar sampler, used so constrained rows stay cheap.

Running llama.cpp's grammar over a whole 262k-token row costs tens of milliseconds, longer
than the rest of a step's sampling together. So, like llama.cpp's common sampler, a
constrained row is first sampled as if it were free (`SequenceSampler.sample_free`), and only
that one token is checked against the grammar (microseconds). Only when the grammar rejects it
is the row constrained, and then in slices of the most likely tokens first:

* greedy: the best allowed token of the top 64, else of the top 4096, else of the rest is
  exactly the argmax over all allowed tokens, and usually the first slice has it;
* sampled: slices (64, 4096, 32768, the rest) are checked until what was found provably
  contains everything the row's top_k / top_p / min_p can keep (see `_enough`; with no
  truncation, until the unchecked tokens hold at most 1e-6 of the allowed mass, the tail the
  free sampler drops too); then the row, with everything else at -inf, goes through the
  sequence's own top-k/top-p/min_p and RNG. Exact, and usually without the whole row.

Near the length limit (the last `reserve` tokens: as many as the grammar's shortest complete
text has characters, plus a margin) each token is checked against what finishing still needs:
a clone of the grammar is closed the quickest way from after that token (`_need`), and only if
that would not fit in the tokens left is the sequence steered to finish instead: the end
token if the grammar is complete, else the likeliest token made only of closing characters
(`"`, `]`, `}`) the grammar allows, else one made of closers and separators (`,`, `:`: what
leads on to a required part), else the likeliest allowed token. JSON therefore
usually closes before max_tokens cuts it; when it cannot, finish_reason is "length". Steering
as late as that leaves the model its own words for as long as possible: steering from the whole
reserve on made `{"name": "John Smith", "age": 31}` come out as `{"name": "", "age": 3}` in a
forced tool call with max_tokens 60.

llama.cpp aborts the process if its grammar is asked to accept a token it refuses, so only
checked tokens are ever accepted, and end-of-generation tokens are never accepted at all.
"""
from __future__ import annotations

import ctypes
import json
import re
import threading
from typing import Any, Protocol

import numpy as np

from llmpack.runtime.engine.token_data import TAIL, TOKEN_DATA
from llmpack.runtime.hardware.bindings import lc
from llmpack.runtime.structured.grammar import GrammarError, min_length


class FreeSampler(Protocol):
    """What a constraint needs of its sequence's sampler (sampler.SequenceSampler, which owns the
    constraint): its parameters, its llama.cpp chain (None when greedy) and an unconstrained draw."""

    params: Any
    chain: Any

    def sample_free(self, row: np.ndarray) -> int: ...

_SLICES = (64, 4096, 32768)
_TOKEN_REF = re.compile(r"<\[(\d+)\]>")
_LITERAL = re.compile(r'"(?:\\.|[^"\\\n])*"')
_CLOSERS = frozenset('"]}')            # tokens made only of these end strings, arrays, objects
_SEPARATORS = _CLOSERS | frozenset(",:")  # then these move on to the next required part
_BANNED_ATTRS = lc.LLAMA_TOKEN_ATTR_CONTROL | lc.LLAMA_TOKEN_ATTR_UNKNOWN | lc.LLAMA_TOKEN_ATTR_UNUSED


def _enough(p, kept: float, unchecked: float, n_ok: int, best: float, tail: float) -> bool:
    """Have the slices checked so far found every allowed token that the row's truncation can
    keep? Slices come in decreasing weight, so: top_k allowed tokens found; or every unchecked
    token is below min_p of the best allowed one; or the allowed mass found already fills top_p
    of all the mass that could be allowed (with no top_p: all but the free sampler's tail)."""
    if p.top_k > 0 and n_ok >= p.top_k:
        return True
    if p.min_p > 0.0 and p.top_p >= 1.0 and tail < p.min_p * best:
        return True
    cut = p.top_p if p.top_p < 1.0 else 1.0 - TAIL
    return kept >= cut * (kept + unchecked)


class VocabTables:
    """What the grammar code needs to know about every token of a vocabulary, computed once
    (about a second for a 262k vocabulary) and shared read-only by all sequences."""

    _cache: dict[int, "VocabTables"] = {}
    _lock = threading.Lock()

    def __init__(self, vocab) -> None:
        n = lc.llama_vocab_n_tokens(vocab)
        self.n_vocab = n
        attrs = np.fromiter((lc.llama_vocab_get_attr(vocab, t) for t in range(n)), dtype=np.int64, count=n)
        eog = np.fromiter((bool(lc.llama_vocab_is_eog(vocab, t)) for t in range(n)), dtype=bool, count=n)
        # Control tokens read as their markup text to llama.cpp's grammar but detokenize to
        # nothing, so the grammar and the text would disagree: they are never allowed, except
        # the end-of-generation tokens, which the grammar handles itself.
        banned = ((attrs & _BANNED_ATTRS) != 0) & ~eog
        eot = lc.llama_vocab_eot(vocab)
        self.end_id = eot if 0 <= eot < n and eog[eot] else lc.llama_vocab_eos(vocab)
        # Pieces that are not whole UTF-8 characters (byte-fallback tokens) are banned too: the
        # grammar counts code points, but a stray byte reaches the client as U+FFFD, which
        # would break maxLength and friends.
        buf = ctypes.create_string_buffer(256)
        closers, separators, singles = [], [], []
        for t in np.flatnonzero(~banned & ~eog):
            k = lc.llama_token_to_piece(vocab, int(t), buf, len(buf), 0, False)
            try:
                text = buf.raw[:k].decode("utf-8") if 0 < k <= len(buf) else ""
            except UnicodeDecodeError:
                banned[t] = True
                continue
            chars = set(text.strip(" "))
            if chars and chars <= _CLOSERS:
                closers.append((-len(text), int(t)))
            elif chars and chars <= _SEPARATORS:
                separators.append((-len(text), int(t)))
            elif len(text) == 1:
                singles.append((0, int(t)))
        self.banned, self.eog = banned, eog
        # longest first: `_need` closes with the fewest tokens
        self.closers, self.separators, self.singles = (np.asarray([t for _, t in sorted(x)], dtype=np.int32)
                                                       for x in (closers, separators, singles))

    @classmethod
    def get(cls, vocab) -> "VocabTables":
        """The tables of this vocabulary. Keyed by address *and* a sample of pieces, since a
        freed model's address may be reused by the next one loaded (tests load many)."""
        n = lc.llama_vocab_n_tokens(vocab)
        buf = ctypes.create_string_buffer(256)
        sample = [buf.raw[:max(0, lc.llama_token_to_piece(vocab, t, buf, len(buf), 0, True))]
                  for t in [*range(0, n, max(1, n // 64)), *range(max(0, n - 16), n)]]
        key = (ctypes.cast(vocab, ctypes.c_void_p).value or 0, n, hash(tuple(sample)))
        with cls._lock:
            tables = cls._cache.get(key)
            if tables is None:
                tables = cls._cache[key] = VocabTables(vocab)
            return tables


def parse_with_llama(gbnf: str, vocab):
    """Let llama.cpp parse the grammar (it refuses e.g. left recursion) and return its grammar
    sampler, which a GrammarConstraint can take over; also warms the vocabulary tables and the
    grammar's min_length on the caller's thread instead of the engine's."""
    smpl = lc.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
    if not smpl:
        raise GrammarError("llama.cpp could not parse the grammar: check its GBNF syntax "
                           "(and that no rule is left-recursive)")
    VocabTables.get(vocab)
    min_length(gbnf)
    return smpl


def check_with_llama(gbnf: str, vocab) -> None:
    """parse_with_llama, keeping nothing (LLMEngine.check_grammar keeps the parse for the request)."""
    lc.llama_sampler_free(parse_with_llama(gbnf, vocab))


class GrammarConstraint:
    """The grammar state of one sequence."""

    def __init__(self, gbnf: str, vocab, stop_token_ids: list[int], smpl=None) -> None:
        """`smpl`: the grammar as `parse_with_llama` parsed it for this sequence (it is owned
        from here on); None: parse it now."""
        self.tables = VocabTables.get(vocab)
        self.smpl = smpl or lc.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
        if not self.smpl:
            raise GrammarError("llama.cpp could not parse the grammar")
        self.end_ids = {int(t) for t in stop_token_ids} | {self.tables.end_id}
        # A control token the grammar names itself (`<[id]>`, e.g. Mistral's [TOOL_CALLS] in a
        # forced tool call) is the model's own syntax: allowed for this sequence.
        named = [int(t) for t in _TOKEN_REF.findall(gbnf) if int(t) < self.tables.n_vocab]
        self.banned = self.tables.banned
        if named:
            self.banned = self.banned.copy()
            self.banned[named] = False
        self.words = self._literal_tokens(gbnf, vocab)
        # Start closing when the tokens left could be all that the shortest finish needs.
        self.reserve = min_length(gbnf) + 16
        self.checked = 0        # tokens sampled freely and checked
        self.rejected = 0       # of those, refused by the grammar (the row was then constrained)

    def _literal_tokens(self, gbnf: str, vocab) -> np.ndarray:
        """The tokens this model writes the grammar's literals with (keys, names, markers),
        longest first: `_need` spells literals with them, as the model would, rather than one
        character at a time."""
        ids: set[int] = {int(t) for t in _TOKEN_REF.findall(gbnf)}
        for lit in set(_LITERAL.findall(gbnf)):
            try:
                text = json.loads(lit)
            except ValueError:
                continue
            for variant in {text, text.strip('"')} - {""}:    # keys: with and without their quotes
                data = variant.encode("utf-8")
                buf = (lc.llama_token * (len(data) + 8))()
                n = lc.llama_tokenize(vocab, data, len(data), buf, len(buf), False, False)
                ids.update(buf[:max(0, n)])
        ok = [t for t in ids if 0 <= t < self.tables.n_vocab and not self.banned[t] and not self.tables.eog[t]]
        size = ctypes.create_string_buffer(256)
        ok.sort(key=lambda t: -lc.llama_token_to_piece(vocab, t, size, len(size), 0, False))
        return np.asarray(ok, dtype=np.int32)

    def close(self) -> None:
        if self.smpl is not None:
            lc.llama_sampler_free(self.smpl)
            self.smpl = None

    # ---- asking the grammar ---------------------------------------------------------------
    def allowed(self, ids: np.ndarray, smpl=None) -> np.ndarray:
        """Which of `ids` the grammar (or a clone of it, `smpl`) allows next (a bool mask)."""
        cand = np.zeros(len(ids), dtype=TOKEN_DATA)
        cand["id"] = ids
        arr = lc.llama_token_data_array(data=cand.ctypes.data_as(lc.llama_token_data_p), size=len(cand),
                                        selected=-1, sorted=False)
        lc.llama_sampler_apply(smpl or self.smpl, ctypes.byref(arr))
        return np.isfinite(cand["logit"])

    def can_end(self) -> bool:
        return bool(self.allowed(np.asarray([self.tables.end_id]))[0])

    def allows(self, token: int) -> bool:
        if token in self.end_ids or self.tables.eog[token]:
            return self.can_end()
        return not self.banned[token] and bool(self.allowed(np.asarray([token]))[0])

    def accept(self, token: int) -> None:
        if token not in self.end_ids and not self.tables.eog[token]:
            lc.llama_sampler_accept(self.smpl, token)

    # ---- choosing -------------------------------------------------------------------------
    def sample(self, sampler: FreeSampler, row: np.ndarray, remaining: int | None) -> int:
        token = sampler.sample_free(row)
        self.checked += 1
        if not self.allows(token):
            self.rejected += 1
            token = self._constrained(sampler, row)
        # Near the limit, the model's token stands only if the text can still be finished after it.
        if remaining is not None and remaining <= self.reserve and self._need(token, remaining) > remaining - 1:
            token = self._finish(row, remaining)
        self.accept(token)
        return token

    def _need(self, first: int, limit: int) -> int:
        """Tokens needed to finish after `first` (it and the end token included), closing the
        quickest way: the longest allowed closer, else separator, else single character. Run
        on a clone of the grammar; anything over `limit` reads as limit + 1."""
        if first in self.end_ids or self.tables.eog[first]:
            return 1
        clone = lc.llama_sampler_clone(self.smpl)
        try:
            lc.llama_sampler_accept(clone, int(first))
            end = np.asarray([self.tables.end_id])
            for steps in range(1, limit + 1):
                if self.allowed(end, clone)[0]:
                    return steps + 1
                for ids in (self.tables.closers, self.tables.separators, self.words, self.tables.singles):
                    ok = ids[self.allowed(ids, clone)] if len(ids) else ids
                    if len(ok):
                        lc.llama_sampler_accept(clone, int(ok[0]))
                        break
                else:
                    return limit + 1
            return limit + 1
        finally:
            lc.llama_sampler_free(clone)

    def _slices(self, row: np.ndarray):
        """Token ids in slices of decreasing logit: the top 64, the next to 4096, the rest."""
        n = len(row)
        kth = [k for k in _SLICES if k < n]
        order = np.argpartition(-row, [k - 1 for k in kth]) if kth else np.arange(n)
        start = 0
        for end in (*kth, n):
            ids = order[start:end]
            start = end
            yield ids[~self.banned[ids]]

    def _constrained(self, sampler: FreeSampler, row: np.ndarray) -> int:
        if sampler.chain is None:
            return self._best_allowed(row)
        p = sampler.params
        w = np.exp((row - row.max()).astype(np.float64) * (1.0 / p.temperature))
        unchecked = float(w.sum())
        keep, kept_mass, n_ok, best = [], 0.0, 0, 0.0
        for ids in self._slices(row):
            ok = ids[self.allowed(ids)]
            keep.append(ok)
            kept_mass += float(w[ok].sum())
            unchecked -= float(w[ids].sum())
            n_ok += len(ok)
            best = max(best, float(w[ok].max())) if len(ok) else best
            tail = float(w[ids].min()) if len(ids) else 0.0   # every unchecked token weighs at most this
            if n_ok and _enough(p, kept_mass, unchecked, n_ok, best, tail):
                break
        ok = np.concatenate(keep)
        if not len(ok):
            return self.tables.end_id   # the grammar is stuck: end rather than emit garbage
        masked = np.full_like(row, -np.inf)
        masked[ok] = row[ok]
        return sampler.sample_free(masked)

    def _best_allowed(self, row: np.ndarray) -> int:
        for ids in self._slices(row):
            ok = ids[self.allowed(ids)]
            if len(ok):
                return int(ok[np.argmax(row[ok])])
        return self.tables.end_id

    def _finish(self, row: np.ndarray, remaining: int) -> int:
        """The step towards the end that `_need` plans: from the same first group of allowed
        tokens, the likeliest one that still leaves room to finish, else the one it assumed."""
        if self.can_end():
            return self.tables.end_id
        for ids in (self.tables.closers, self.tables.separators, self.words, self.tables.singles):
            ok = ids[self.allowed(ids)] if len(ids) else ids
            if len(ok):
                for t in ok[np.argsort(-row[ok], kind="stable")][:4]:
                    if self._need(int(t), remaining) <= remaining:
                        return int(t)
                return int(ok[0])
        return self._best_allowed(row)

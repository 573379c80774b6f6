"""llama.cpp's parses of the grammars requests are about to use, so that each request's grammar is
parsed once: `LLMEngine.check_grammar` (the server's check) parses and keeps it, the request's
`add_request` takes that parse, and its sequences run on it (n > 1: copies, not new parses).
Called from request threads, hence the lock."""
from __future__ import annotations

import threading
from collections import OrderedDict

from llmpack.runtime.engine.grammar_sampler import parse_with_llama
from llmpack.runtime.hardware.bindings import lc

KEEP = 32     # parses waiting for their request; the oldest is freed past this


class ParsedGrammars:
    def __init__(self, vocab) -> None:
        self.vocab = vocab
        self._parses: OrderedDict[str, int] = OrderedDict()   # gbnf -> llama.cpp's grammar sampler
        self._lock = threading.Lock()

    def check(self, gbnf: str) -> None:
        """Parse `gbnf` now (GrammarError when llama.cpp refuses it) and keep the parse."""
        with self._lock:
            if gbnf in self._parses:
                self._parses.move_to_end(gbnf)
                return
        smpl = parse_with_llama(gbnf, self.vocab)
        with self._lock:
            old = self._parses.pop(gbnf, None)
            self._parses[gbnf] = smpl
            evicted = [self._parses.popitem(last=False)[1] for _ in range(len(self._parses) - KEEP)]
        for s in ([old] if old is not None else []) + evicted:
            lc.llama_sampler_free(s)

    def take(self, gbnf: str, copies: int = 1) -> list:
        """`copies` parses of `gbnf` for one request's samples: check's kept one (or a new one),
        and clones of it made before any token is accepted. The caller owns them."""
        with self._lock:
            smpl = self._parses.pop(gbnf, None)
        if smpl is None:
            smpl = parse_with_llama(gbnf, self.vocab)
        return [smpl] + [lc.llama_sampler_clone(smpl) for _ in range(copies - 1)]

    @staticmethod
    def free(parses: list) -> None:
        for smpl in parses:
            lc.llama_sampler_free(smpl)
        parses.clear()

    def close(self) -> None:
        with self._lock:
            parses = list(self._parses.values())
            self._parses.clear()
        self.free(parses)

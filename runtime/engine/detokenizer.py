"""Incremental detokenization with stop strings that never leak into a stream.

Token pieces are raw bytes; a UTF-8 character may span several tokens. An incremental
decoder holds back an incomplete trailing sequence until its last byte arrives, so no
delta ever carries a broken character. Stop strings are matched on the decoded text;
any tail that could still grow into a stop string is held back until it cannot.
"""
from __future__ import annotations

import codecs


class Detokenizer:
    def __init__(self, stop: list[str], include_stop: bool = False) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stop = [s for s in stop if s]
        self.include_stop = include_stop
        self.text = ""         # everything decoded so far (after a stop: cut at the stop)
        self.emitted = 0       # how much of text has been handed out
        self.stopped_by: str | None = None

    def add(self, piece: bytes) -> str:
        """Feed one token's bytes; returns the text that is now safe to emit."""
        if self.stopped_by is not None:
            return ""
        self.text += self._decoder.decode(piece)
        if self.stop:
            # a stop string can only end inside the newly added text; search a window
            window_start = max(0, self.emitted - max(map(len, self.stop)))
            hit = -1
            for s in self.stop:
                i = self.text.find(s, window_start)
                if i != -1 and (hit == -1 or i < hit):
                    hit, self.stopped_by = i, s
            if hit != -1:
                end = hit + len(self.stopped_by) if self.include_stop else hit
                self.text = self.text[:end]
                return self._take(len(self.text))
            return self._take(len(self.text) - self._held_back())
        return self._take(len(self.text))

    def flush(self) -> str:
        """At the end: whatever was held back (an unfinished character becomes U+FFFD)."""
        if self.stopped_by is None:
            self.text += self._decoder.decode(b"", final=True)
        return self._take(len(self.text))

    def _held_back(self) -> int:
        """Length of the longest tail of text that is a proper prefix of some stop string."""
        longest = 0
        for s in self.stop:
            for k in range(min(len(s) - 1, len(self.text)), longest, -1):
                if self.text.endswith(s[:k]):
                    longest = k
                    break
        return longest

    def _take(self, upto: int) -> str:
        upto = max(upto, self.emitted)
        out = self.text[self.emitted:upto]
        self.emitted = upto
        return out

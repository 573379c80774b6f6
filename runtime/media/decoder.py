"""The one path every picture and clip takes from a stranger's bytes to what the projector reads.

1. the first look, here in the server: the kind's `check` (the size, the signature and the label
   agreeing: header.py; a picture's structure too: images.py), cheap, so most bad inputs never
   reach a child;
2. the decode, as a job of the sandbox's worker pool (runtime/sandbox/pool.py): a warm child under
   a memory cap and a deadline, at most `workers` of one kind at once (the pool's slots are the
   semaphore), its failures in the kind's words (runtime/sandbox/ladder.py);
3. the answer checked against the first look (`accept`): a child that a hostile file took over
   can still only hand back what the header promised (pixels of the declared size, samples no
   longer than the cap).

Pictures (pictures.py: RGB) and sound (audio.py: PCM) are two Decoders; no picture or audio
decoder runs in the server process.
"""
from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

from llmpack.runtime.media.errors import MediaBusy
from llmpack.runtime.media.header import Kind
from llmpack.runtime.sandbox.ladder import Ladder
from llmpack.runtime.sandbox.pool import Pool

Info = TypeVar("Info")
Out = TypeVar("Out")


class Decoder(Generic[Info, Out]):
    """One kind of media decoded in the sandbox: `check(data, declared)` looks first and returns
    what it learnt (with a `format`), the child runs `job` ("module:function") on the bytes, and
    `accept(info, asked, answer, payload)` checks and shapes its answer against what was asked.
    `time_limit` bounds the wait for a free child, and again the decode. The pool's failures are
    the kind's error (`busy` when no child came free), in words that say what to `send` instead
    (for an input too big to decode, for one too slow) and what else the server is decoding (`others`)."""

    def __init__(self, job: str, kind: Kind, *, check: Callable[[bytes, str | None], Info],
                 accept: Callable[[Info, dict, dict, bytes], Out], busy: type[MediaBusy], send: tuple[str, str],
                 others: str, workers: int, memory: int, max_answer: int, time_limit: float) -> None:
        self.check, self.accept, self.time_limit = check, accept, time_limit
        self.pool = Pool(job, workers=workers, memory=memory, max_answer=max_answer)
        what = f"the {{name}} {kind.noun}"
        self.ladder = Ladder(
            kind.error, busy_error=busy,
            memory=f"{what} needs more memory to decode than llmpack allows ({memory >> 20} MiB); send {send[0]}",
            crash=f"{what} could not be decoded: llmpack's decoder failed on it, so the file may be damaged; "
                  "save it again and send that",
            slow=f"decoding {what} took longer than {time_limit:.0f} s, so llmpack gave up; send {send[1]}",
            busy=f"the server is decoding {others} and none finished within {time_limit:.0f} s; try again in a moment")

    def decode(self, data: bytes, declared: str | None = None, **head: Any) -> Out:
        """`data` decoded in a child, or the kind's error with a sentence that names the problem
        (its busy error when no child came free). `head` goes to the job with `declared`."""
        info = self.check(data, declared)        # cheap, here: most bad inputs never reach a child
        asked = {"declared": declared or "", **head}
        answer, payload = self.ladder.run(self.pool, asked, data, time_limit=self.time_limit, name=info.format.upper())
        return self.accept(info, asked, answer, payload)

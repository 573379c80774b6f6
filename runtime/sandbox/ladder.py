"""What a pool's failures mean to the person who sent the bytes, written once for every job.

A job on a stranger's bytes (a document's text, a picture's pixels, a clip's samples) fails in
five ways (pool.py): the job refused the input with its own sentence (`Refused`), the worker ran
out of memory (`OutOfMemory`), its reader crashed on the input (`Crashed`), it ran past the
deadline (`TooSlow`), or no worker came free in time (`Busy`). Each kind of job says the same
things in its own words: "the PNG image needs more memory to decode than llmpack allows (1024
MiB); send a smaller picture". A `Ladder` holds those words and turns the pool's exception into
the caller's error, so the rungs are written here once, not once per kind of input.
"""
from __future__ import annotations

from dataclasses import dataclass

from llmpack.errors import LlmpackError
from llmpack.runtime.sandbox.pool import Busy, Crashed, OutOfMemory, Pool, Refused, TooSlow


@dataclass(frozen=True)
class Ladder:
    """The caller's errors for a pool's failures. The sentences are `str.format` templates filled
    with the words `run` is given (a file's name, a picture's format): `memory` when the worker ran
    out of memory, `crash` when its reader crashed on the input (a damaged file, most likely),
    `slow` past the deadline, `busy` when every worker stayed busy. `busy_error` is raised for the
    last one: the server's load, not the input, so an API can answer 503."""
    error: type[LlmpackError]
    memory: str
    crash: str
    slow: str
    busy: str
    busy_error: type[LlmpackError]

    def run(self, pool: Pool, head: dict, data: bytes, *, time_limit: float, **words: str) -> tuple[dict, bytes]:
        """pool.run, with its failures as this ladder's errors in this ladder's words."""
        try:
            return pool.run(head, data, time_limit=time_limit)
        except Refused as exc:
            raise self.error(str(exc)) from None
        except OutOfMemory:
            raise self.error(self.memory.format(**words)) from None
        except Crashed:
            raise self.error(self.crash.format(**words)) from None
        except TooSlow:
            raise self.error(self.slow.format(**words)) from None
        except Busy:
            raise self.busy_error(self.busy.format(**words)) from None

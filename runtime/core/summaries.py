"""The engine's side of a question about the whole of a long file (documents/overview.py): the
parts' summaries are written by this model, all parts submitted at once so the engine batches
them, and how far the round is can be asked while the chat request waits for it (the page's
"Reading clsguide.pdf to answer about all of it: 12 of 33 pages so far…").

The round runs inside the chat request's preparation, before its reply starts, for every API
room alike; the page learns its progress from `GET /v1/documents/reading` (page/extract_routes.py),
which reads the `ReadingRounds` the app holds (core/files.py).
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager

from llmpack.runtime.chat import untrusted
from llmpack.runtime.core.errors import ApiError
from llmpack.runtime.core.files import ReadingRounds
from llmpack.runtime.core.params import SamplingValues, sampling_params
from llmpack.runtime.core.plan import plan_output
from llmpack.runtime.core.prompt import render_messages, tokenize_prompt
from llmpack.runtime.core.served_model import ServedModel
from llmpack.runtime.documents.index import Indexed
from llmpack.runtime.engine.client import OutputStream
from llmpack.runtime.documents.overview import SUMMARY_TOKENS, Part


IN_FLIGHT = 4   # parts in the engine at once: one being read, the rest queued or writing their summary


class EngineSummariser:
    """documents.overview.Summariser on this served model: greedy summaries of at most
    SUMMARY_TOKENS, each part's text marked untrusted (a file's text is never control tokens)."""

    def __init__(self, model: ServedModel, rounds: ReadingRounds) -> None:
        self.model, self.rounds = model, rounds

    def run(self, prompts: Sequence[str]) -> Iterator[tuple[int, str]]:
        """Keep IN_FLIGHT parts in the engine and read them back in order: the engine reads prompts
        first come, first served, so they end in about that order and the page's count moves
        steadily. Not all at once: another person's prompt would wait behind every part of the
        file (minutes on a CPU), where now it waits behind at most IN_FLIGHT of them."""
        model = self.model
        plan = plan_output(model, None, None, chat=True)
        params = sampling_params(SamplingValues(temperature=0.0, max_tokens=SUMMARY_TOKENS), model, chat=True)
        tag = uuid.uuid4().hex[:12]
        streams: dict[int, OutputStream] = {}

        def submit(i: int) -> None:
            rendered = render_messages(model, [{"role": "user", "content": untrusted.mark(prompts[i])}], plan)
            try:
                streams[i] = model.engine.add_request(tokenize_prompt(model, rendered), params,
                                                      request_id=f"summary-{tag}-{i}")
            except Exception as exc:  # noqa: BLE001 - a full queue, a stopped engine: one line for the client
                raise ApiError(503, f"The server could not read the whole file now ({exc}); ask again shortly, or "
                                    "ask about one part of it.", code="summary_failed", type="server_overloaded",
                               headers={"Retry-After": "5"}) from None

        try:
            for i in range(min(IN_FLIGHT, len(prompts))):
                submit(i)
            for i in range(len(prompts)):
                words = []
                for out in streams[i]:
                    if out.error:
                        raise ApiError(500, f"Summarising part {i + 1} of the file failed: {out.error}",
                                       code="summary_failed", type="server_error")
                    words += [c.text for c in out.outputs]
                del streams[i]
                if i + IN_FLIGHT < len(prompts):
                    submit(i + IN_FLIGHT)
                yield i, untrusted.clean("".join(words))
        finally:   # the request went away, or a part failed: the parts still in the engine stop
            for stream in streams.values():
                try:
                    stream.abort()
                except Exception:  # noqa: BLE001 - a finished stream: nothing to abort
                    pass

    def lock(self, key: str) -> AbstractContextManager:
        return self.rounds.lock(key)

    def progress(self, doc: Indexed, parts: Sequence[Part], done: int) -> None:
        self.rounds.update(doc, parts, done)

    def finished(self, doc: Indexed) -> None:
        self.rounds.finish(doc)

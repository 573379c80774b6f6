"""`FakeEngine`: the `EngineClient` protocol with no model, for the protocol tests (tests/test_core.py).

Tokens are bytes (ids 0-255) plus a few special tokens; the reply to a prompt is scripted
(`reply(prompt_text) -> str`) and streamed a character at a time, honouring max_tokens, stop
strings, stop token ids and n, as the real engine does. It records every request it was given
(`requests`), so a test can see exactly what the core asked of the engine. Each test that uses it
names its live-model twin, which checks the same behaviour against llama.cpp.
"""
from __future__ import annotations

import hashlib
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from llmpack.runtime.engine.client import EngineClient, QueueFullError
from llmpack.runtime.engine.outputs import EngineStats
from llmpack.runtime.engine.outputs import CompletionOutput, RequestOutput
from llmpack.runtime.engine.request import PromptTooLongError
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.structured.grammar import GrammarError

SPECIALS = {"<s>": 256, "</s>": 257, "<|im_start|>": 258, "<|im_end|>": 259}
BOS_ID = SPECIALS["<s>"]


@dataclass
class Submitted:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    prompt_text: str
    cache_salt: str | None = None     # the engine's add_request takes it (prefix-cache isolation)


class FakeStream:
    def __init__(self, engine: "FakeEngine", request_id: str, outputs: list[RequestOutput]) -> None:
        self.engine, self.request_id = engine, request_id
        self._queue: "queue.SimpleQueue[RequestOutput]" = queue.SimpleQueue()
        for out in outputs:
            self._queue.put(out)

    def __iter__(self) -> Iterator[RequestOutput]:
        while True:
            out = self._queue.get(timeout=10)
            yield out
            if out.finished:
                return

    def abort(self) -> None:
        self.engine.aborted.append(self.request_id)


@dataclass
class FakeEngine:
    reply: Callable[[str], str] = lambda prompt: "Hello from the fake engine."
    n_ctx: int = 4096
    n_vocab: int = 256 + len(SPECIALS)
    max_model_len: int = 4096
    bos_prefix: list[int] = field(default_factory=lambda: [BOS_ID])
    backend: dict | None = None
    failure: str | None = None
    queue_full: bool = False
    requests: list[Submitted] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- tokens
    media_kinds: frozenset = frozenset()   # a text-only model: media parts are refused before they reach here
    audio_sample_rate: int = 0

    def media_prompt(self, parts: Any) -> Any:
        raise AssertionError("the server asked a text-only engine for a prompt with pictures or sound")

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        ids: list[int] = [BOS_ID] if add_special else []
        i = 0
        while i < len(text):
            special = next((s for s in SPECIALS if parse_special and text.startswith(s, i)), None)
            if special:
                ids.append(SPECIALS[special])
                i += len(special)
            else:
                ids.extend(text[i].encode("utf-8"))
                i += 1
        return ids

    def tokenize_prompt(self, text: str) -> list[int]:
        ids = self.tokenize(text, add_special=False)
        return ids if ids[:1] == [BOS_ID] else [BOS_ID, *ids]

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        if token < 256:
            return bytes([token])
        name = next(s for s, t in SPECIALS.items() if t == token)
        return name.encode() if special else b""

    def detokenize(self, ids: list[int]) -> str:
        return b"".join(self.token_bytes(t, special=True) for t in ids).decode("utf-8", "replace")

    # ---- requests
    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, prompt_progress: bool = False,
                    cache_salt: str | None = None) -> FakeStream:
        params = params or SamplingParams()
        ids = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        if len(ids) + 1 > self.max_model_len:
            raise PromptTooLongError(len(ids), self.max_model_len)
        if self.queue_full:
            raise QueueFullError("the fake queue is full")
        rid = request_id or f"fake-{len(self.requests)}"
        text = self.detokenize(ids)
        with self._lock:
            self.requests.append(Submitted(rid, ids, params, text, cache_salt))
        return FakeStream(self, rid, self._outputs(rid, ids, params, self.reply(text)))

    def _outputs(self, rid: str, ids: list[int], params: SamplingParams, reply: str) -> list[RequestOutput]:
        """One output per generated token (a character here), each choice cut by a stop string or
        max_tokens, as the engine's detokenizer and scheduler would."""
        text, reason = reply, "stop"
        for stop in params.stop:
            at = text.find(stop)
            if at >= 0:
                text = text[:at + (len(stop) if params.include_stop_str_in_output else 0)]
        if params.max_tokens is not None and len(text) > params.max_tokens:
            text, reason = text[:params.max_tokens], "length"
        steps = max(len(text), 1)
        outs = []
        for step in range(steps):
            last = step == steps - 1
            deltas = [CompletionOutput(index=i, text=text[step:step + 1], token_ids=list(text[step:step + 1].encode()),
                                       finish_reason=reason if last else None) for i in range(params.n)]
            outs.append(RequestOutput(request_id=rid, outputs=deltas, finished=last, prompt=None, prompt_token_ids=ids,
                                      num_prompt_tokens=len(ids), num_generated_tokens=min(step + 1, len(text)) * params.n,
                                      num_processed_prompt_tokens=len(ids)))
        return outs

    def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    # ---- the rest of the protocol
    def check_grammar(self, gbnf: str) -> None:
        if "root" not in gbnf:
            raise GrammarError("the fake engine wants a root rule")

    def embed(self, inputs: list[list[int]]) -> list[np.ndarray]:
        out = []
        for ids in inputs:
            seed = int.from_bytes(hashlib.sha256(bytes(str(ids), "ascii")).digest()[:4], "little")
            v = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
            out.append(v / np.linalg.norm(v))
        return out

    def stats(self) -> EngineStats:
        return EngineStats(0, 0, 0, 32, 0, 0, 0, 0, 0, len(self.requests))

    def shutdown(self) -> None:
        pass


def is_engine_client(engine: object) -> bool:
    return isinstance(engine, EngineClient)

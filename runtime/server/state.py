"""What the server knows while the model prepares and once it serves; thread-safe.

The routes only read `ServerState`: `phase` / `progress` / `message` drive `/health` and the
chat page's loading view, `model` (a `ServedModel`) is set once the engine is ready.
`ActiveRequests` tracks in-flight engine streams so a client that disconnects (waitress's
`waitress.client_disconnected`) or a server shutdown aborts them and frees their KV blocks.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterable

from llmpack.runtime.engine.sampling_params import CHAT_MAX_TOKENS, CONTINUE_MAX_TOKENS, SamplingParams

MESSAGES = {
    "starting": "Starting",
    "extracting": "Unpacking the model (first run only)",
    "loading": "Loading the model into memory",
}


@dataclass
class ServedModel:
    """Everything the routes need about the one model being served."""

    engine: Any                       # LLMEngine
    model_id: str                     # what /v1/models lists and responses echo
    display_name: str
    n_ctx: int
    chat: Any = None                  # ChatFormat, or None when no chat format could be resolved
    system_prompt: str | None = None  # default system prompt (--system, else the recipe's)
    sampling: dict = field(default_factory=dict)   # default sampling values (recipe)
    stop: list[str] = field(default_factory=list)  # stop strings every chat request gets
    stop_token_ids: list[int] = field(default_factory=list)  # the same, as single special tokens
    fingerprint: str = "fp_llmpack"
    model_key: str = "llmpack"        # saved chats and settings belong to it (serving._model_key)
    aliases: frozenset[str] = frozenset()  # names a request's "model" may use (lowercase)
    meta: dict = field(default_factory=dict)
    embedder: Any = None              # runtime.embeddings.Embedder, made by the first /v1/embeddings
    backend: dict | None = None       # where the model runs (CPU variant, GPU, layers): /health's "backend"
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def bos_prefix(self) -> list[int]:
        """The ids the tokenizer puts in front of a prompt (the engine knows)."""
        return self.engine.bos_prefix


PAGE_SAMPLING = ("temperature", "top_p", "top_k", "min_p")   # what the page's Settings show


def request_defaults(model: ServedModel) -> dict[str, Any]:
    """The values a chat request that names none of them is served with (SamplingParams' own,
    then the model's recipe), as /health tells the chat page, which shows them in Settings; and
    how much the page's text-completion mode asks for per "continue"."""
    base = {f.name: f.default for f in fields(SamplingParams) if f.name in PAGE_SAMPLING}
    base.update({k: v for k, v in model.sampling.items() if k in PAGE_SAMPLING})
    return {**base, "max_tokens": CHAT_MAX_TOKENS, "completion_max_tokens": CONTINUE_MAX_TOKENS}


class ServerState:
    def __init__(self, display_name: str | None = None) -> None:
        self._lock = threading.Lock()
        self.display_name = display_name
        self.phase = "starting"       # starting | extracting | loading | ready | error
        self.progress = 0.0
        self.message = MESSAGES["starting"]
        self.model: ServedModel | None = None
        self.ready = threading.Event()
        self.active = ActiveRequests()
        # called with (phase, fraction) after each accepted set_progress, on the caller's thread
        # (the preparing thread): what /health says next, for logs and tests
        self.progress_listeners: list[Callable[[str, float], None]] = []

    def set_progress(self, phase: str, fraction: float, message: str | None = None) -> None:
        with self._lock:
            if self.phase in ("ready", "error"):
                return
            try:
                fraction = min(1.0, max(0.0, float(fraction)))
            except (TypeError, ValueError):
                fraction = 0.0
            self.phase, self.progress = phase, fraction
            self.message = message or MESSAGES.get(phase, phase)
        for listener in list(self.progress_listeners):
            listener(phase, fraction)

    def set_ready(self, model: ServedModel) -> None:
        with self._lock:
            self.model, self.phase, self.progress, self.message = model, "ready", 1.0, "Ready"
        self.ready.set()

    def set_error(self, message: str) -> None:
        with self._lock:
            self.phase, self.message = "error", message
        self.ready.set()

    def health(self, authorized: bool = True) -> tuple[dict, int]:
        """(body, HTTP status). The system prompt is the operator's, not public: it is shown only
        to callers that may use the API (`authorized`: no API key is set, or they sent it)."""
        with self._lock:
            phase, progress, message, model = self.phase, self.progress, self.message, self.model
        if phase == "ready" and model is not None:
            failure = getattr(model.engine, "failure", None)
            if failure is not None:
                return {"status": "error", "message": f"The engine stopped ({failure}); restart llmpack."}, 500
            body = {"status": "ok", "model": model.model_id, "display_name": model.display_name,
                    "n_ctx": model.n_ctx, "system_prompt": model.system_prompt, "sampling": dict(model.sampling),
                    "defaults": request_defaults(model), "base_model": bool(model.meta.get("base_model")),
                    "backend": model.backend}
            if not authorized:
                del body["system_prompt"]
            return body, 200
        if phase == "error":
            return {"status": "error", "message": message}, 500
        return {"status": "loading", "phase": phase, "progress": round(progress, 4),
                "message": message, "display_name": self.display_name}, 503


class ActiveRequests:
    """In-flight engine streams, each with the client's "has it gone away?" check.

    A watcher thread polls the checks a few times a second, so a request whose client left is
    aborted even while it waits in the queue or runs without writing (non-streaming)."""

    def __init__(self, interval: float = 0.2) -> None:
        self._lock = threading.Lock()
        self._entries: dict[int, tuple[Callable[[], bool] | None, list[Any]]] = {}
        self._next = 0
        self._interval = interval
        self._watcher: threading.Thread | None = None
        self._closed = False

    def add(self, streams: Iterable[Any], disconnected: Callable[[], bool] | None) -> int:
        with self._lock:
            self._next += 1
            self._entries[self._next] = (disconnected, list(streams))
            if disconnected is not None and self._watcher is None and not self._closed:
                self._watcher = threading.Thread(target=self._watch, name="llmpack-disconnects", daemon=True)
                self._watcher.start()
            return self._next

    def remove(self, key: int) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def abort_all(self) -> None:
        with self._lock:
            entries = list(self._entries.values())
        for _, streams in entries:
            _abort(streams)

    def close(self) -> None:
        self._closed = True
        self.abort_all()

    def _watch(self) -> None:
        while not self._closed:
            time.sleep(self._interval)
            with self._lock:
                entries = list(self._entries.items())
            for key, (gone, streams) in entries:
                try:
                    left = gone is not None and gone()
                except Exception:  # noqa: BLE001 - a broken check must not kill the watcher
                    left = False
                if left:
                    _abort(streams)
                    self.remove(key)


def _abort(streams: Iterable[Any]) -> None:
    for stream in streams:
        try:
            stream.abort()
        except Exception:  # noqa: BLE001 - aborting twice or after shutdown is harmless
            pass

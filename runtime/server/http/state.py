"""What the server knows while the model prepares and once it serves; thread-safe.

lifecycle/ writes it (the preparing thread's progress, then the ready model or the error); the
routes only read it: `phase` / `progress` / `message` drive `/health` and the chat page's loading
view, `model` (a core `ServedModel`) is set once the engine is ready, `active` holds the
in-flight engine streams that a shutdown or a client's hang-up aborts, and `files` this app's
data folder, document index, sandbox and caches (core/files.py), handed to its model.
"""
from __future__ import annotations

import secrets
import threading
from typing import Callable

from llmpack.progress import human_bytes
from llmpack.runtime.core.active import ActiveRequests
from llmpack.runtime.core.attachments import limits as attachment_limits
from llmpack.runtime.core.files import AppFiles
from llmpack.runtime.core.plan import supports_tools
from llmpack.runtime.core.served_model import ServedModel, request_defaults

MESSAGES = {
    "starting": "Starting",
    "checking": "Checking the model (first run only)",
    "extracting": "Unpacking the model (first run only)",
    "loading": "Loading the model into memory",
}


def speculative_health(stats) -> dict:
    """/health's "speculative": the mode (--speculative) and how its drafts fared so far."""
    return {"mode": stats.speculative, "draft_tokens": stats.spec_draft_tokens_total,
            "accepted_tokens": stats.spec_accepted_tokens_total}


class ServerState:
    def __init__(self, display_name: str | None = None, files: AppFiles | None = None) -> None:
        self._lock = threading.Lock()
        self.files = files or AppFiles()
        self.display_name = display_name
        self.phase = "starting"       # starting | checking | extracting | loading | ready | error
        self.progress = 0.0
        self.message = MESSAGES["starting"]
        self.unpack: dict | None = None   # {"path", "bytes"} while a model is unpacked: /health says where
        self.instance: str | None = None  # the model key a second launch looks for (lifecycle/instance.py)
        # what this server proves it holds (/api/instance); written into its instance lock only
        self.instance_secret = secrets.token_hex(32)
        self.model: ServedModel | None = None
        self.ready = threading.Event()
        self.active = ActiveRequests()
        # called with (phase, fraction) after each accepted set_progress, on the caller's thread
        # (the preparing thread): what /health says next, for logs and tests
        self.progress_listeners: list[Callable[[str, float], None]] = []

    def set_progress(self, phase: str, fraction: float, message: str | None = None) -> None:
        if phase == "extracting" and self.unpack and message is None:
            size = human_bytes(self.unpack["bytes"])   # as the console line says it
            message = f"First start: unpacking the model ({size}) to {self.unpack['path']}; this happens once."
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
        """(body, HTTP status). Details (the model, its settings and system prompt, the unpack
        path, an error's own words) go only to callers that may use the API (`authorized`: no API
        key is set, or they sent it); others learn the phase and progress, as llama-server's
        /health says only whether it is up."""
        body, status = self._health()
        if authorized:
            return body, status
        brief = {k: body[k] for k in ("status", "phase", "progress", "display_name") if k in body}
        if status == 500:
            brief["message"] = "The model could not be served; the server's console says why."
        return brief, status

    def _health(self) -> tuple[dict, int]:
        with self._lock:
            phase, progress, message, model = self.phase, self.progress, self.message, self.model
        if phase == "ready" and model is not None:
            failure = model.engine.failure
            if failure is not None:
                return {"status": "error", "message": f"The engine stopped ({failure}); restart llmpack."}, 500
            body = {"status": "ok", "model": model.model_id, "display_name": model.display_name,
                    "n_ctx": model.n_ctx, "system_prompt": model.system_prompt, "sampling": dict(model.sampling),
                    "defaults": request_defaults(model), "base_model": bool(model.meta.get("base_model")),
                    "backend": model.backend, "speculative": speculative_health(model.engine.stats()),
                    "vision": "image" in model.engine.media_kinds, "hears": "audio" in model.engine.media_kinds,
                    "attachments": attachment_limits(model),
                    # the chat template renders tools itself: the page offers its built-in tools by default
                    "tools": model.chat is not None and supports_tools(model.chat.template)}
            if self.instance:
                body["instance"] = self.instance
            return body, 200
        if phase == "error":
            return {"status": "error", "message": message}, 500
        body = {"status": "loading", "phase": phase, "progress": round(progress, 4),
                "message": message, "display_name": self.display_name}
        if phase == "extracting" and self.unpack:
            body["unpack"] = dict(self.unpack)
        if self.instance:
            body["instance"] = self.instance
        return body, 503

"""What scale/ runs on Ray, handed in from above: the single-machine server, as two factories.

scale/ is a way to run the server, yet it imports nothing of runtime/server/ (tests/test_layers.py:
no room of runtime/ outside server/ reaches into it). The CLI, which knows both, passes a
`ServedApp` (llmpack/ray_server.py `SERVED`): module-level names, which Ray pickles by
reference, so the server's modules load in the replica's and the ingress's own processes.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from llmpack.runtime.model.source import ModelFile

# An answer worded by the server: status, headers (no Content-Length), body.
Worded = tuple[int, list[tuple[str, str]], bytes]


class Gate(Protocol):
    """The single server's guards, run by Ray's ingress on the same routes before it reads a body."""

    def refusal(self, method: str, path: str, headers: Mapping[str, str], host: str,
                length: int | None) -> Worded | None:
        """Host, another web site, the route's body limit by Content-Length, the API key: the
        refusal in the route's own error shape, or None."""

    def body_limit(self, method: str, path: str) -> int:
        """The most bytes the route takes (a body without Content-Length stops there)."""

    def too_large(self, method: str, path: str, headers: Mapping[str, str], limit: int) -> Worded:
        """The 413 a body past `limit` gets, worded as that route words it."""

    def authorized(self, headers: Mapping[str, str]) -> bool:
        """Whether the caller may use the API (no key is set, or it sent the key)."""


@dataclass(frozen=True)
class ServedApp:
    """`replica(model, config, options, warn)`: a WSGI app with the model loaded and its
    engine (`stats()`, `failure`, `shutdown()`); `gate(options)`: the guards for the ingress.
    `options`: host, port, api_key, cors (what the single server's options take)."""
    replica: Callable[[ModelFile, Any, dict, Callable[[str], None]], tuple[Any, Any]]
    gate: Callable[[dict], Gate]

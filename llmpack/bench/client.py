"""One streamed request, timed chunk by chunk, with nothing but the standard library (the
benchmark shares the CPU with the server it measures, so the client stays lean)."""
from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class RequestResult:
    ok: bool = False
    error: str | None = None
    ttft: float | None = None              # seconds from sending to the first content chunk
    e2e: float = 0.0                       # seconds from sending to the end of the stream
    itl: list[float] = field(default_factory=list)   # gaps between content chunks
    output_tokens: int = 0                 # the server's usage.completion_tokens, else content chunks
    prompt_tokens: int | None = None       # the server's usage.prompt_tokens, when it reports usage

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


class Endpoint:
    """Where to send requests: base URL (with or without /v1), model name, API key."""

    def __init__(self, url: str, model: str | None = None, api_key: str | None = None, timeout: float = 600) -> None:
        parts = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port
        self.prefix = parts.path.rstrip("/")
        if self.prefix.endswith("/v1"):
            self.prefix = self.prefix[:-3]
        self.api_key, self.timeout = api_key, timeout
        self.model = model

    def connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def get_json(self, path: str) -> Any:
        conn = self.connection()
        try:
            conn.request("GET", self.prefix + path, headers=self.headers())
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {resp.status}: {_error_text(body)}")
            return json.loads(body)
        finally:
            conn.close()

    def resolve_model(self) -> str:
        """The model to name in requests: as given, else the first one /v1/models lists."""
        if not self.model:
            data = self.get_json("/v1/models").get("data") or []
            if not data:
                raise RuntimeError("the server lists no model at /v1/models; pass --model")
            self.model = data[0]["id"]
        return self.model


def stream_request(ep: Endpoint, path: str, body: dict[str, Any]) -> RequestResult:
    """POST one streaming completion and time its SSE chunks. Never raises: failures are results."""
    res = RequestResult()
    payload = json.dumps({"model": ep.model, **body}).encode()
    conn = ep.connection()
    start = last = time.perf_counter()
    chunks = 0
    try:
        conn.request("POST", ep.prefix + path, body=payload, headers=ep.headers())
        resp = conn.getresponse()
        if resp.status != 200:
            res.error = f"HTTP {resp.status}: {_error_text(resp.read())}"
            return res
        while True:
            line = resp.readline()
            if not line:
                break
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            event = json.loads(data)
            if "error" in event:
                res.error = _error_text(data)
                return res
            if _has_content(event):
                now = time.perf_counter()
                if res.ttft is None:
                    res.ttft = now - start
                else:
                    res.itl.append(now - last)
                last = now
                chunks += 1
            usage = event.get("usage")
            if usage:
                res.output_tokens = int(usage.get("completion_tokens") or 0)
                res.prompt_tokens = usage.get("prompt_tokens")
        res.e2e = time.perf_counter() - start
        res.output_tokens = res.output_tokens or chunks
        res.ok = res.ttft is not None
        if not res.ok:
            res.error = "the stream ended without any content"
    except (OSError, http.client.HTTPException, ValueError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return res


def _has_content(event: dict[str, Any]) -> bool:
    for choice in event.get("choices") or ():
        delta = choice.get("delta")
        if (delta.get("content") or delta.get("reasoning_content")) if delta else choice.get("text"):
            return True
    return False


def _error_text(body: bytes) -> str:
    try:
        err = json.loads(body).get("error")
        message = err.get("message") if isinstance(err, dict) else err
        return str(message)[:300]
    except (ValueError, AttributeError):
        return body[:300].decode("utf-8", "replace")

"""The HTTP door, spoken to directly: one request exactly as written (any path, any Host header),
and the OpenAI error shape every refusal must have."""
from __future__ import annotations

import http.client
import json


def raw(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
        host: str | None = None) -> tuple[int, dict, bytes]:
    """One request exactly as written: no path normalisation, any Host header."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    conn.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
    for k, v in (headers or {}).items():
        conn.putheader(k, v)
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


def error_of(data: bytes) -> dict:
    err = json.loads(data)["error"]
    assert set(err) == {"message", "type", "param", "code"} and isinstance(err["message"], str)
    return err

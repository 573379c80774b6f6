"""Ray's ingress runs the single server's guards before it reads a byte of the body (issue 36):
the same `security.refusal` on the same app's routes (llmpack/ray_server.py's `Gate`), so a
wrong Host, another web site, a body over the route's limit or a missing API key is refused as
`llmpack run` refuses it, in the room's own error shape, and never reaches a replica. The replica
handle here only records what would reach it (the guards are what is under test;
tests/test_ray_serve.py runs the real replicas)."""
from __future__ import annotations

import pytest

from needs import skip_or_fail

try:
    from starlette.requests import Request
    from starlette.testclient import TestClient
except ImportError:
    skip_or_fail("ray[serve] (starlette) is not installed (pip install 'llmpack[ray]')", module=True)

from llmpack.ray_server import SERVED
from llmpack.runtime.scale.deployments import Ingress

PORT = 8000
KEY = "sesame"


class Replicas:
    """What a DeploymentHandle offers the ingress; records every call that reaches it."""

    def __init__(self) -> None:
        self.calls: list = []

    def options(self, **_: object) -> "Replicas":
        return self

    @property
    def handle(self) -> "Replicas":
        return self

    def remote(self, call):
        self.calls.append(call)
        return self

    async def __anext__(self):
        raise RuntimeError("recorded, not answered")


@pytest.fixture
def ingress():
    replicas = Replicas()
    ing = Ingress(replicas, {"host": "127.0.0.1", "port": PORT, "api_key": KEY, "cors": False},
                  SERVED)   # the server's own guards, as `serve --ray` hands them

    async def app(scope, receive, send):
        response = await ing(Request(scope, receive))
        await response(scope, receive, send)

    client = TestClient(app, base_url=f"http://127.0.0.1:{PORT}", raise_server_exceptions=False)   # no lifespan
    yield client, replicas


def test_a_missing_key_is_refused_in_the_rooms_shape(ingress) -> None:
    client, replicas = ingress
    r = client.post("/v1/chat/completions", json={"messages": []})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = client.post("/v1/messages", json={"messages": []})
    assert r.status_code == 401 and r.json()["type"] == "error"   # Anthropic's shape, as `llmpack run` answers
    assert not replicas.calls


def test_a_rebinding_host_and_another_web_site_are_refused(ingress) -> None:
    client, replicas = ingress
    auth = {"Authorization": f"Bearer {KEY}"}
    r = client.post("/v1/chat/completions", json={}, headers={**auth, "Host": f"evil.example:{PORT}"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed"
    r = client.post("/v1/chat/completions", content=b"{}", headers={**auth, "Origin": "https://evil.example",
                                                                     "Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "cross_site_request"
    assert not replicas.calls


def test_a_body_over_the_routes_limit_is_refused_by_its_length_before_the_key(ingress) -> None:
    client, replicas = ingress
    big = b"x" * (9 * 1024 * 1024)   # over a text route's 8 MiB, under the attachments' limit
    r = client.post("/v1/completions", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunks():   # no Content-Length: counted as it arrives, and cut at the same limit
        for _ in range(9):
            yield b"x" * (1024 * 1024)
    r = client.post("/v1/completions", content=chunks(), headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 413
    assert not replicas.calls


def test_a_keyed_request_within_the_limit_reaches_a_replica(ingress) -> None:
    client, replicas = ingress
    photo = b"x" * (9 * 1024 * 1024)   # a route that carries files takes more than a text route
    r = client.post("/v1/messages", content=photo, headers={"x-api-key": KEY})
    assert r.status_code == 503   # the recording replica refuses; what matters is that it was asked
    assert len(replicas.calls) == 1 and len(replicas.calls[0].body) == len(photo)

"""With an API key, the server salts the prefix cache with the key the request used (vLLM's
`cache_salt`): requests under different keys never share cached prompt blocks, so `cached_tokens`
cannot tell one key's user what another's prompts began with. Without a key there is one cache."""
from __future__ import annotations

from fake_engine import FakeEngine
from llmpack.runtime.server.app import create_app
from llmpack.runtime.core.generation import cache_salt_for
from llmpack.runtime.server.http.options import ServerOptions
from test_core import App

HELLO = [{"role": "user", "content": "hello"}]


def served(api_key: str | None) -> App:
    app = App(FakeEngine())
    app.client = create_app(app.state, ServerOptions(api_key=api_key)).test_client()
    return app


def test_requests_under_a_key_carry_that_keys_salt():
    app = served("key-one")
    r = app.client.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2},
                        headers={"Authorization": "Bearer key-one"})
    assert r.status_code == 200, r.get_json()
    assert app.engine.requests[-1].cache_salt == cache_salt_for("key-one")


def test_without_a_key_there_is_no_salt():
    app = served(None)
    assert app.client.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2}).status_code == 200
    assert app.engine.requests[-1].cache_salt is None


def test_salts_differ_per_key_and_reveal_nothing_of_it():
    one, two = cache_salt_for("key-one"), cache_salt_for("key-two")
    assert one != two and cache_salt_for("key-one") == one and cache_salt_for(None) is None
    assert "key-one" not in one and len(one) == 32

"""LiteLLM against the instruct demo model (Qwen2.5-Coder 0.5B Instruct), through each provider a
user of OpenAI, Anthropic or Ollama would point at llmpack: `openai/` (/v1/chat/completions),
`anthropic/` (/v1/messages), `ollama/` (/api/generate) and `ollama_chat/` (/api/chat), each for a
chat, a stream and a tool call.

LiteLLM's Ollama providers post their JSON with no Content-Type header (issue 38): Ollama parses
any body as JSON, and so does llmpack for a body that no browser sent (http/context.py; the
cross-site side is tests/test_cross_site.py). Greedy decoding; each assertion checks what a 0.5B
model gets right (a capital, a tool's argument), never its wording."""
from __future__ import annotations

import json
import os

import pytest

# LiteLLM fetches its model catalogue from GitHub when imported; the suite stays on loopback.
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm  # noqa: E402 - after the offline switches

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer

pytestmark = pytest.mark.instruct

PROVIDERS = ["openai", "anthropic", "ollama", "ollama_chat"]
CAPITAL = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def settings(srv: LiveServer, provider: str) -> dict:
    """What a user gives LiteLLM: the provider's prefix, where the server is, any key."""
    base = srv.url + "/v1" if provider == "openai" else srv.url
    return {"model": f"{provider}/qwen", "api_base": base, "api_key": "not-needed", "temperature": 0,
            "max_tokens": 40, "timeout": 300, "num_retries": 0}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_litellm_chat_and_stream(instruct_server: LiveServer, provider: str):
    reply = litellm.completion(messages=CAPITAL, **settings(instruct_server, provider))
    text = reply.choices[0].message.content
    assert "Paris" in text, text
    chunks = list(litellm.completion(messages=CAPITAL, stream=True, **settings(instruct_server, provider)))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert len([c for c in chunks if c.choices[0].delta.content]) > 1   # it came in pieces
    assert streamed.strip() == text.strip()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_litellm_tool_call(instruct_server: LiveServer, provider: str):
    question = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
    reply = litellm.completion(messages=question, tools=[WEATHER], **settings(instruct_server, provider))
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] == "Paris"

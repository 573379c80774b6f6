"""The server's generation core and the OpenAI room over it, against `FakeEngine` (no model): what
the core asks of the engine, and how the engine's answers and refusals reach the client.

Each test names its live-model twin, which checks the same behaviour against llama.cpp; these run
in milliseconds and show exactly what was submitted, which a live model cannot."""
from __future__ import annotations

import base64
import json
from types import MappingProxyType
from typing import Any

import pytest

from fake_engine import BOS_ID, SPECIALS, FakeEngine, FakeStream

from llmpack.runtime.chat.recipes import ChatFormat, load_recipe
from llmpack.runtime.engine.client import EngineClient
from llmpack.runtime.engine.sampling_params import MAX_LOGPROBS, MAX_STOPS
from llmpack.runtime.server.app import create_app
from llmpack.runtime.core.served_model import describe_model
from llmpack.runtime.server.http.options import ServerOptions
from llmpack.runtime.server.http.state import ServerState

SYSTEM = "You are a fake."
HELLO = [{"role": "user", "content": "Hello!"}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def chatml(sampling: dict[str, float]) -> ChatFormat:
    recipe = load_recipe("chatml")
    return ChatFormat(template=recipe.chat_template, source="recipe:chatml", reason="test", stop=recipe.stop,
                      eot_tokens=recipe.eot_tokens, sampling=MappingProxyType(sampling), system=SYSTEM, recipe=recipe)


class App:
    def __init__(self, engine: FakeEngine, sampling: dict[str, float] | None = None) -> None:
        self.engine = engine
        self.model = describe_model(engine, chatml(sampling or {"temperature": 0.7, "repetition_penalty": 1.1}),
                                    model_id="fake", display_name="Fake")
        self.state = ServerState("Fake")
        self.state.set_ready(self.model)
        self.client = create_app(self.state, ServerOptions()).test_client()

    def post(self, path: str, body: Any) -> Any:
        return self.client.post(path, json=body)

    def chat(self, **body: Any) -> Any:
        return self.post("/v1/chat/completions", {"messages": HELLO, **body})

    def events(self, path: str, body: Any) -> list[Any]:
        resp = self.client.post(path, json={**body, "stream": True})
        assert resp.status_code == 200 and resp.mimetype == "text/event-stream"
        lines = [line[6:] for line in resp.get_data(as_text=True).split("\n\n") if line.startswith("data: ")]
        assert lines[-1] == "[DONE]"
        return [json.loads(line) for line in lines[:-1]]


@pytest.fixture
def app() -> App:
    return App(FakeEngine())


def test_the_fake_and_the_real_engine_are_both_engine_clients():
    from llmpack.runtime.engine.engine import LLMEngine

    assert isinstance(FakeEngine(), EngineClient)
    missing = [name for name in ("add_request", "abort", "tokenize", "tokenize_prompt", "token_bytes", "check_grammar",
                                 "embed", "stats", "shutdown") if not callable(getattr(LLMEngine, name, None))]
    assert not missing


def test_a_chat_gets_the_recipes_defaults_system_prompt_and_turn_stops(app: App):
    """Live twins: test_server.py test_default_system_prompt, test_core_parity.py."""
    r = app.chat()
    assert r.status_code == 200
    assert r.json["choices"][0]["message"] == {"role": "assistant", "content": "Hello from the fake engine."}
    [sent] = app.engine.requests
    assert sent.prompt_ids[0] == BOS_ID and sent.prompt_ids.count(BOS_ID) == 1
    assert sent.prompt_text == ("<s><|im_start|>system\nYou are a fake.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
                                "<|im_start|>assistant\n")
    assert (sent.params.temperature, sent.params.repetition_penalty) == (0.7, 1.1)          # the recipe's
    assert sent.params.stop == ["<|im_end|>", "<|im_start|>"]
    assert sent.params.stop_token_ids == [SPECIALS["<|im_end|>"], SPECIALS["<|im_start|>"]]
    assert sent.params.max_tokens is None                                                  # a chat runs to its end
    assert r.json["usage"]["prompt_tokens"] == len(sent.prompt_ids)


def test_what_the_request_says_wins_over_the_recipe(app: App):
    """Live twin: test_server.py test_sampling_controls."""
    app.chat(temperature=0, max_completion_tokens=5, stop=["fake"],
             messages=[{"role": "system", "content": "Be brief."}, *HELLO])
    [sent] = app.engine.requests
    assert (sent.params.temperature, sent.params.repetition_penalty, sent.params.max_tokens) == (0.0, 1.1, 5)
    assert sent.params.stop == ["fake", "<|im_end|>", "<|im_start|>"]
    assert SYSTEM not in sent.prompt_text and "Be brief." in sent.prompt_text


def test_a_stream_opens_with_the_role_and_its_deltas_make_the_reply(app: App):
    """Live twin: test_server.py test_chat_stream_matches_non_stream."""
    events = app.events("/v1/chat/completions", {"messages": HELLO, "stream_options": {"include_usage": True}})
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["delta"].get("content", "") for e in events[1:] for c in e["choices"])
    assert text == "Hello from the fake engine."
    assert [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]] == ["stop"]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == len(text)


def test_a_reply_that_is_a_tool_call_becomes_tool_calls_whole_and_streamed():
    """Live twins: test_tool_calls.py test_auto_tool_call_is_read_back, ..._streams_text_then_the_call."""
    app = App(FakeEngine(reply=lambda prompt: CALL))
    r = app.chat(tools=[WEATHER])
    choice = r.json["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    assert "get_weather" in app.engine.requests[0].prompt_text          # the tools were offered
    events = app.events("/v1/chat/completions", {"messages": HELLO, "tools": [WEATHER]})
    deltas = [c["delta"] for e in events[1:] for c in e["choices"]]
    assert not any(d.get("content") for d in deltas)                   # nothing of the call leaked as text
    assert [d["tool_calls"][0]["function"]["name"] for d in deltas if "tool_calls" in d] == ["get_weather"]


def test_a_forced_tool_call_sends_a_grammar_the_engine_checked(app: App):
    """Live twin: test_tool_calls.py test_named_choice_forces_that_tool_but_shows_all."""
    app.chat(tools=[WEATHER], tool_choice="required")
    assert "root" in app.engine.requests[0].params.grammar


@pytest.mark.parametrize("body, param", [
    ({"temperature": "hot"}, "temperature"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"messages": []}, "messages"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"unknown": 1}, "unknown"),
])
def test_bad_values_are_a_400_naming_the_field_and_nothing_is_submitted(app: App, body: dict, param: str):
    """Live twin: test_server.py test_bad_parameters_are_400."""
    r = app.post("/v1/chat/completions", {"messages": HELLO, **body})
    assert r.status_code == 400 and r.json["error"]["param"] == param
    assert app.engine.requests == []


@pytest.mark.parametrize("path, body, param, limit", [
    ("/v1/chat/completions", {"messages": HELLO, "stop": [f"s{i}" for i in range(MAX_STOPS + 1)]}, "stop", MAX_STOPS),
    ("/v1/chat/completions", {"messages": HELLO, "logprobs": True, "top_logprobs": MAX_LOGPROBS + 1}, "top_logprobs",
     MAX_LOGPROBS),
    ("/v1/completions", {"prompt": "hi", "logprobs": MAX_LOGPROBS + 1}, "logprobs", MAX_LOGPROBS),
])
def test_each_range_is_sampling_params_and_the_400_names_the_clients_field(app: App, path: str, body: dict,
                                                                            param: str, limit: int):
    """A range is written once (engine/sampling_params.py); the door (core/params.py) names the field as the
    client spelled it, and nothing reaches the engine."""
    r = app.post(path, body)
    assert r.status_code == 400 and r.json["error"]["param"] == param
    assert r.json["error"]["message"].startswith(f"'{param}' ") and str(limit) in r.json["error"]["message"]
    assert app.engine.requests == []


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": HELLO}),
    ("/v1/responses", {"input": "hi"}),
    ("/v1/messages", {"messages": HELLO, "max_tokens": 4}),
    ("/api/chat", {"messages": HELLO}),
])
def test_every_room_refuses_an_unknown_field_by_name_and_submits_nothing(app: App, path: str, body: dict):
    """One rule (core/params.py known_fields), each room's own wording and error shape. Ollama's room
    skips an unknown field instead, as Ollama does (its clients send newer fields and expect an answer)."""
    r = app.post(path, {"model": "m", **body, "temprature": 1})
    if path == "/api/chat":
        assert r.status_code == 200
        app.engine.requests.clear()
    else:
        assert r.status_code == 400 and "temprature" in json.dumps(r.json)
    r = app.post(path, ["not", "an", "object"])
    assert r.status_code == 400 and "JSON object" in json.dumps(r.json)
    assert app.engine.requests == []


@pytest.mark.parametrize("path, body, shape", [
    ("/v1/chat/completions", {"messages": HELLO, "stream": True}, "data: [DONE]"),
    ("/v1/responses", {"input": "hi", "stream": True}, "response.failed"),
    ("/v1/messages", {"messages": HELLO, "max_tokens": 4, "stream": True}, "event: error"),
    ("/api/chat", {"messages": HELLO}, '{"error":"'),
])
def test_a_stream_that_breaks_after_its_200_ends_in_the_rooms_own_error(app: App, monkeypatch, path: str,
                                                                         body: dict, shape: str):
    """One in-stream error tail (http/streaming.py) for every room: its own error event, none of the details."""
    def broken(self):
        raise RuntimeError("a detail the client must not see")
        yield   # a generator, as the engine's stream is

    monkeypatch.setattr(FakeStream, "__iter__", broken)
    r = app.post(path, {"model": "m", **body})
    text = r.get_data(as_text=True)
    assert r.status_code == 200 and shape in text and "Internal server error while generating." in text
    assert "must not see" not in text


def test_the_engines_refusals_become_http_answers():
    """Live twins: test_server_errors.py test_queue_full_is_503, test_prompt_too_long_is_400_with_numbers."""
    full = App(FakeEngine(queue_full=True)).chat()
    assert full.status_code == 503 and full.headers["Retry-After"] == "1" and full.json["error"]["code"] == "queue_full"
    long = App(FakeEngine(max_model_len=8)).chat()
    assert long.status_code == 400 and long.json["error"]["code"] == "context_length_exceeded"
    assert long.json["error"]["param"] == "messages"


def test_a_failed_engine_is_a_500_on_health(app: App):
    """Live twin: test_engine_threads.py (the engine thread dies; every request then fails)."""
    assert app.client.get("/health").json["status"] == "ok"
    app.engine.failure = "injected"
    r = app.client.get("/health")
    assert r.status_code == 500 and "injected" in r.json["message"]


def test_completions_take_text_or_token_ids_and_n(app: App):
    """Live twins: test_server.py test_completions, test_n_choices."""
    r = app.post("/v1/completions", {"prompt": [[72, 105]], "n": 2, "max_tokens": 5})
    assert [c["text"] for c in r.json["choices"]] == ["Hello", "Hello"]
    assert [c["finish_reason"] for c in r.json["choices"]] == ["length", "length"]
    assert app.engine.requests[0].prompt_ids == [72, 105]
    assert app.engine.requests[0].params.stop == []              # no chat: no turn stops
    bad = app.post("/v1/completions", {"prompt": [[72, 999]]})
    assert bad.status_code == 400 and bad.json["error"]["param"] == "prompt"


def test_embeddings_tokenize_and_detokenize_go_through_the_client(app: App):
    """Live twins: test_embeddings.py test_embeddings_shape_batching_and_formats, test_tokenize_and_detokenize."""
    r = app.post("/v1/embeddings", {"input": ["a", "b"], "encoding_format": "base64"})
    vectors = [base64.b64decode(d["embedding"]) for d in r.json["data"]]
    assert len(vectors) == 2 and all(len(v) == 8 * 4 for v in vectors) and vectors[0] != vectors[1]
    ids = app.post("/tokenize", {"content": "<|im_end|>hi"}).json["tokens"]
    assert ids == [SPECIALS["<|im_end|>"], 104, 105]
    assert app.post("/detokenize", {"tokens": ids}).json["content"] == "<|im_end|>hi"
    bad = app.post("/detokenize", {"tokens": [99999]})
    assert bad.status_code == 400 and bad.json["error"]["param"] == "tokens"

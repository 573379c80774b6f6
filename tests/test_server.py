"""The OpenAI-compatible server against the official `openai` SDK and raw HTTP: real engine on a
tiny llama model, real waitress, real sockets."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import SCRIPTED_REPLY, LiveServer, LockStep, live_server, sse_events, stream_post, wait_idle

from llmpack.runtime.engine.config import TARGET_GAP_MS
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.core.prompt import tokenize_prompt

HELLO = [{"role": "user", "content": "hello there"}]


def metric_samples(url: str, **headers: str) -> dict[str, float]:
    """name{labels} -> value, summed over label sets that differ only in model_name."""
    text = requests.get(url + "/metrics", headers=headers, timeout=30).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = {k: v for k, v in s.labels.items() if k != "model_name"}
            key = s.name + (json.dumps(labels, sort_keys=True) if labels else "")
            out[key] = out.get(key, 0.0) + s.value
    return out


# ---- basics --------------------------------------------------------------------------------------
def test_health_and_models(chat_server: LiveServer):
    h = requests.get(chat_server.url + "/health").json()
    assert h["status"] == "ok" and h["model"] == chat_server.model_id and h["n_ctx"] > 0
    assert isinstance(h["sampling"], dict) and "system_prompt" in h
    models = chat_server.openai().models.list().data
    assert [m.id for m in models] == [chat_server.model_id]
    assert models[0].owned_by == "llmpack" and models[0].meta["n_ctx"] == h["n_ctx"]
    one = chat_server.openai().models.retrieve(chat_server.model_id)
    assert one.id == chat_server.model_id


def test_health_tells_the_page_the_defaults_requests_get(chat_server: LiveServer):
    """The chat page shows and uses these (Settings, text completion length); it keeps no copy."""
    h = requests.get(chat_server.url + "/health").json()
    plain = SamplingParams()
    recipe = {k: v for k, v in h["sampling"].items() if k in ("temperature", "top_p", "top_k", "min_p")}
    assert recipe   # the tiny ChatML model matches a recipe: its values win over SamplingParams'
    assert h["defaults"] == {"temperature": plain.temperature, "top_p": plain.top_p, "top_k": plain.top_k,
                             "min_p": plain.min_p, **recipe, "max_tokens": None, "completion_max_tokens": 256}
    r = chat_server.openai().completions.create(model=chat_server.model_id, prompt="Hello", temperature=0)
    assert r.usage.completion_tokens <= plain.max_tokens   # /v1/completions keeps OpenAI's default


def test_chat_completion(chat_server: LiveServer):
    r = chat_server.openai().chat.completions.create(model=chat_server.model_id, messages=HELLO, max_tokens=12)
    assert r.id.startswith("chatcmpl-") and len(r.id) > 20 and r.object == "chat.completion"
    assert r.model == chat_server.model_id and r.system_fingerprint.startswith("fp_llmpack-")
    assert abs(r.created - time.time()) < 60
    (choice,) = r.choices
    assert choice.index == 0 and choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 12 and u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens < u.prompt_tokens   # the last prompt token is always computed


def test_chat_stream_matches_non_stream(chat_server: LiveServer):
    c = chat_server.openai()
    kw = dict(model=chat_server.model_id, messages=HELLO, max_tokens=20, temperature=0)
    whole = c.chat.completions.create(**kw)
    chunks = list(c.chat.completions.create(**kw, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(ch.id == chunks[0].id and ch.object == "chat.completion.chunk" for ch in chunks)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert all(ch.usage is None for ch in chunks)


def test_stream_include_usage(chat_server: LiveServer):
    chunks = list(chat_server.openai().chat.completions.create(
        model=chat_server.model_id, messages=HELLO, max_tokens=8, stream=True, temperature=0,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 8 and last.usage.prompt_tokens > 0
    assert all(ch.usage is None for ch in chunks[:-1])


def test_completions(chat_server: LiveServer):
    c = chat_server.openai()
    r = c.completions.create(model=chat_server.model_id, prompt="the world", max_tokens=10, temperature=0,
                             logprobs=3)
    assert r.id.startswith("cmpl-") and r.object == "text_completion"
    (choice,) = r.choices
    lp = choice.logprobs
    n = r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert all(len(top) <= 3 for top in lp.top_logprobs) and lp.text_offset == sorted(lp.text_offset)
    streamed = list(c.completions.create(model=chat_server.model_id, prompt="the world", max_tokens=10,
                                         temperature=0, stream=True))
    assert "".join(ch.choices[0].text for ch in streamed) == choice.text
    assert streamed[-1].choices[0].finish_reason == choice.finish_reason
    # token-id prompts and batches of prompts
    ids = chat_server.engine.tokenize("the world")
    again = c.completions.create(model=chat_server.model_id, prompt=ids, max_tokens=10, temperature=0)
    assert again.choices[0].text == choice.text
    batch = c.completions.create(model=chat_server.model_id, prompt=["a", "b"], max_tokens=3, n=2)
    assert sorted(ch.index for ch in batch.choices) == [0, 1, 2, 3]


def test_n_choices(chat_server: LiveServer):
    c = chat_server.openai()
    r = c.chat.completions.create(model=chat_server.model_id, messages=HELLO, n=3, max_tokens=6, seed=1)
    assert sorted(ch.index for ch in r.choices) == [0, 1, 2]
    assert all(ch.finish_reason in ("stop", "length") for ch in r.choices)
    chunks = list(c.chat.completions.create(model=chat_server.model_id, messages=HELLO, n=3, max_tokens=6,
                                            stream=True))
    finished = {ch.index for chunk in chunks for ch in chunk.choices if ch.finish_reason}
    assert finished == {0, 1, 2}


def test_chat_logprobs(chat_server: LiveServer):
    r = chat_server.openai().chat.completions.create(
        model=chat_server.model_id, messages=HELLO, max_tokens=6, logprobs=True, top_logprobs=3,
        temperature=0, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 6
    for item in content:
        assert item.logprob <= 0 and isinstance(item.bytes, list) and len(item.top_logprobs) == 3
        assert item.top_logprobs[0].logprob >= item.top_logprobs[-1].logprob


def test_sampling_controls(chat_server: LiveServer):
    c = chat_server.openai()
    kw = dict(model=chat_server.model_id, messages=HELLO, max_tokens=16, extra_body={"ignore_eos": True})
    a = c.chat.completions.create(**kw, temperature=1.0, seed=1234)
    b = c.chat.completions.create(**kw, temperature=1.0, seed=1234)
    assert a.choices[0].message.content == b.choices[0].message.content        # seeded = reproducible
    r = c.chat.completions.create(model=chat_server.model_id, messages=HELLO, max_completion_tokens=5,
                                  temperature=0, top_p=0.9, frequency_penalty=0.5, presence_penalty=0.5,
                                  extra_body={"ignore_eos": True, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1},
                                  user="someone", response_format={"type": "text"}, parallel_tool_calls=False)
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"


def test_stop_strings(scripted_model: Path):
    with live_server(scripted_model) as srv:
        c = srv.openai()
        whole = "".join(SCRIPTED_REPLY)
        r = c.chat.completions.create(model=srv.model_id, messages=HELLO)
        assert r.choices[0].message.content == whole and r.choices[0].finish_reason == "stop"
        r = c.chat.completions.create(model=srv.model_id, messages=HELLO, stop=[" and ", "never"])
        assert r.choices[0].message.content == whole.split(" and ")[0] and r.choices[0].finish_reason == "stop"
        r = c.chat.completions.create(model=srv.model_id, messages=HELLO, stop="bold", stream=True)
        assert "".join(ch.choices[0].delta.content or "" for ch in r if ch.choices) == whole.split("bold")[0]


def test_bos_is_not_doubled(tiny_model_factory):
    """A template that writes the BOS text itself and one that doesn't give the same tokens."""
    from ggufs import BOS_ID, CHATML_TEMPLATE

    path = tiny_model_factory(chat_template="{{ bos_token }}" + CHATML_TEMPLATE)
    with live_server(path) as srv:
        model = srv.state.model
        assert model.bos_prefix == [BOS_ID]
        rendered = model.chat.render(HELLO)
        assert rendered.startswith("<s>")
        ids = tokenize_prompt(model, rendered)
        assert ids[0] == BOS_ID and ids[1] != BOS_ID
        assert ids == tokenize_prompt(model, rendered[len("<s>"):])
        r = srv.openai().chat.completions.create(model=srv.model_id, messages=HELLO, max_tokens=1)
        assert r.usage.prompt_tokens == len(ids)


def test_default_system_prompt(tiny_chat_model: Path):
    with live_server(tiny_chat_model, "--system", "You are terse.") as srv:
        assert requests.get(srv.url + "/health").json()["system_prompt"] == "You are terse."
        c = srv.openai()
        plain = c.chat.completions.create(model=srv.model_id, messages=HELLO, max_tokens=1).usage.prompt_tokens
        explicit = c.chat.completions.create(
            model=srv.model_id, max_tokens=1,
            messages=[{"role": "system", "content": "You are terse."}, *HELLO]).usage.prompt_tokens
        assert plain == explicit   # the default was prepended
        other = c.chat.completions.create(
            model=srv.model_id, max_tokens=1, messages=[{"role": "system", "content": "Hi"}, *HELLO]).usage
        assert other.prompt_tokens < plain   # a request's own system message wins


def test_prefix_cache_reported(chat_server: LiveServer):
    c = chat_server.openai()
    long = [{"role": "user", "content": "the water of the world " * 20}]
    c.chat.completions.create(model=chat_server.model_id, messages=long, max_tokens=1)
    again = c.chat.completions.create(model=chat_server.model_id, messages=long, max_tokens=1)
    assert again.usage.prompt_tokens_details.cached_tokens >= 16


# ---- bad requests through the SDK -------------------------------------------------------------------
@pytest.mark.parametrize("kw, param", [
    ({"extra_body": {"foo": 1}}, "foo"),
    ({"extra_body": {"best_of": 3}}, "best_of"),
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": -1}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 2.5}, "max_tokens"),
    ({"n": 0}, "n"),
    ({"n": True}, "n"),
    ({"top_p": 2}, "top_p"),
    ({"stop": 5}, "stop"),
    ({"seed": "x"}, "seed"),
    ({"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"tools": [{"type": "function", "function": {"name": "no spaces allowed", "parameters": {}}}]}, "tools"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "strnig"}}}}, "response_format"),
    ({"logit_bias": {"1": 5}}, "logit_bias"),
])
def test_bad_parameters_are_400(chat_server: LiveServer, kw, param):
    with pytest.raises(openai.BadRequestError) as info:
        chat_server.openai().chat.completions.create(model=chat_server.model_id, messages=HELLO, **kw)
    err = info.value.body
    assert info.value.status_code == 400 and err["param"] == param and param in err["message"]
    assert err["type"] == "invalid_request_error"


@pytest.mark.parametrize("messages", ["hi", [], [{"role": "wizard", "content": "x"}], [{"role": "user"}],
                                      [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]])
def test_bad_messages_are_400(chat_server: LiveServer, messages):
    with pytest.raises(openai.BadRequestError) as info:
        chat_server.openai().chat.completions.create(model=chat_server.model_id, messages=messages)
    # an image for a text-only model names the part itself (core/images.py)
    assert info.value.body["param"] == ("messages[0].content[0]" if "image_url" in str(messages) else "messages")


def test_any_model_name_is_served_by_the_one_model(chat_server: LiveServer, capsys):
    """Apps that hard-code a name (or make the user type one) still work, as with llama-server:
    the reply names the real model, and the console notes the other name once."""
    client = chat_server.openai()
    for name in ("gpt-4o-mini", "gpt-4o-mini", "GPT-9"):
        reply = client.chat.completions.create(model=name, messages=HELLO, max_tokens=2)
        assert reply.model == chat_server.model_id
    notes = [line for line in capsys.readouterr().err.splitlines() if "requests name the model" in line]
    assert notes == [f"llmpack: requests name the model 'gpt-4o-mini'; this server has one model and answers "
                     f"them with '{chat_server.model_id}'",
                     f"llmpack: requests name the model 'GPT-9'; this server has one model and answers "
                     f"them with '{chat_server.model_id}'"]
    with pytest.raises(openai.NotFoundError) as info:   # a look-up of another id is still "not found"
        client.models.retrieve("gpt-9")
    assert info.value.body["code"] == "model_not_found"


# ---- streaming is really streamed ---------------------------------------------------------------
def test_stream_chunks_reach_client_as_produced(chat_server: LiveServer):
    received: list[str] = []
    body = {"model": chat_server.model_id, "messages": HELLO, "max_tokens": 40, "stream": True,
            "ignore_eos": True, "temperature": 0}
    with LockStep(chat_server.engine) as step, stream_post(chat_server.url + "/v1/chat/completions", body) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        assert "content-length" not in resp.headers
        for data in sse_events(resp):
            if data == "[DONE]":
                break
            delta = json.loads(data)["choices"][0]["delta"].get("content")
            if delta:
                received.append(delta)
                step.seen()
    assert step.requests == 1 and step.held_back == [], "a chunk was not sent until later ones were made"
    assert received == step.emitted and len(received) > 10   # one SSE event per engine output, in order


# ---- concurrency -------------------------------------------------------------------------------
def test_16_concurrent_sdk_streams_and_metrics(chat_server: LiveServer):
    before = metric_samples(chat_server.url)
    results: list[str | Exception] = [None] * 16  # type: ignore[list-item]

    def one(i: int) -> None:
        try:
            stream = chat_server.openai().chat.completions.create(
                model=chat_server.model_id, messages=[{"role": "user", "content": f"hi {i}"}], max_tokens=12,
                stream=True, extra_body={"ignore_eos": True})
            results[i] = "".join(ch.choices[0].finish_reason or "" for ch in stream if ch.choices)
        except Exception as exc:  # noqa: BLE001
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    # random weights may sample the template's end-of-turn token early ("stop")
    assert all(r in ("stop", "length") for r in results), [r for r in results if r not in ("stop", "length")]
    after = metric_samples(chat_server.url)
    grew = lambda name: after.get(name, 0) - before.get(name, 0)  # noqa: E731
    assert sum(grew(f'llmpack:request_success_total{{"finished_reason": "{r}"}}') for r in ("stop", "length")) == 16
    assert grew("llmpack:generation_tokens_total") >= 16
    assert grew("llmpack:prompt_tokens_total") > 0 and grew("llmpack:prefix_cache_queries_total") > 0
    assert grew("llmpack:time_to_first_token_seconds_count") == 16
    assert grew("llmpack:e2e_request_latency_seconds_count") == 16
    assert grew("llmpack:inter_token_latency_seconds_count") > 0
    # the engine's own: the gap between each sequence's tokens, and how long steps take (issue 48)
    assert grew("llmpack:inter_token_gap_seconds_count") >= 16 and grew("llmpack:step_seconds_count") > 0
    assert after["llmpack:step_target_seconds"] == TARGET_GAP_MS / 1e3 and after["llmpack:prompt_tokens_per_second"] > 0
    assert after["llmpack:time_to_first_token_seconds_sum"] > 0
    for name in ("llmpack:num_requests_running", "llmpack:num_requests_waiting", "llmpack:kv_cache_usage_perc",
                 "llmpack:num_preemptions_total", "llmpack:prefix_cache_hits_total"):
        assert name in after


def test_64_concurrent_streaming_connections(chat_server: LiveServer):
    """64 streams open at once (more than the engine's 32 slots: the rest wait in its queue)."""
    n = 64
    barrier = threading.Barrier(n + 1, timeout=300)
    open_at_barrier: list[int] = []
    results: list[object] = [None] * n
    body = {"model": chat_server.model_id, "messages": HELLO, "max_tokens": 32, "stream": True, "ignore_eos": True}

    def one(i: int) -> None:
        try:
            with stream_post(chat_server.url + "/v1/chat/completions", body) as resp:
                events = sse_events(resp)
                first = json.loads(next(events))
                assert first["choices"][0]["delta"]["role"] == "assistant"
                barrier.wait()
                rest = list(events)
                assert rest[-1] == "[DONE]"
                results[i] = json.loads(rest[-2])["choices"][0]["finish_reason"]
        except Exception as exc:  # noqa: BLE001
            results[i] = exc
            barrier.abort()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()                                   # every client holds an open, answered stream
    open_at_barrier.append(len(chat_server.server.server.active_channels))   # waitress's open connections
    for t in threads:
        t.join(300)
    assert all(r in ("stop", "length") for r in results), [r for r in results if r not in ("stop", "length")]
    assert open_at_barrier[0] >= n
    wait_idle(chat_server.engine)

"""`"return_progress": true` (llama-server's extension): while a long prompt is read, over several
engine steps under the token budget, a stream carries `prompt_progress` chunks before the reply.
Real engine on a tiny scripted model, real waitress, real HTTP and the official openai SDK."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from server_fixtures import *  # noqa: F401,F403
from server_fixtures import SCRIPTED_REPLY, LiveServer, live_server, sse_events, stream_post

# ~1,500 tokens of the tiny vocabulary: longer than one step's token budget (512), so its prefill
# takes several engine steps.
LONG = " ".join(["the chat model reads a long paste"] * 110)
PROGRESS_KEYS = {"total", "cache", "processed", "time_ms"}


@pytest.fixture(scope="module")
def server(scripted_model: Path):
    with live_server(scripted_model, "--ctx", "2048") as srv:
        yield srv


def _events(srv: LiveServer, path: str, body: dict) -> list[dict]:
    with stream_post(srv.url + path, body) as resp:
        assert resp.status_code == 200, resp.text
        return [json.loads(e) for e in sse_events(resp) if e != "[DONE]"]


def _text(event: dict) -> str:
    return "".join((c.get("delta") or {}).get("content") or c.get("text") or "" for c in event.get("choices", []))


def _check_progress_then_reply(srv: LiveServer, events: list[dict], obj: str) -> list[dict]:
    progress = [e for e in events if "prompt_progress" in e]
    usage = next(e["usage"] for e in events if e.get("usage"))
    total = usage["prompt_tokens"]
    budget = srv.engine.scheduler.prefill_chunk
    assert total > 2 * budget, "the prompt must need several prefill steps"
    # at least one chunk per engine step that read part of the prompt
    assert len(progress) >= math.ceil(total / budget)
    for e in progress:
        assert set(e) >= {"id", "object", "created", "model", "choices", "prompt_progress"}
        assert e["object"] == obj and e["choices"] == [] and e["model"] == srv.model_id
        assert set(e["prompt_progress"]) == PROGRESS_KEYS
        assert e["prompt_progress"]["total"] == total
    done = [e["prompt_progress"]["processed"] for e in progress]
    assert done == sorted(set(done)), f"not strictly increasing: {done}"
    assert 0 < done[0] < total and done[-1] == total
    times = [e["prompt_progress"]["time_ms"] for e in progress]
    assert times == sorted(times)
    first_text = next(i for i, e in enumerate(events) if _text(e))
    assert events.index(progress[-1]) < first_text   # all progress comes before the reply
    assert "".join(_text(e) for e in events) == "".join(SCRIPTED_REPLY)
    return progress


def test_chat_stream_reports_prompt_progress_before_the_reply(server: LiveServer):
    body = {"messages": [{"role": "user", "content": LONG}], "stream": True, "return_progress": True,
            "stream_options": {"include_usage": True}, "temperature": 0}
    events = _events(server, "/v1/chat/completions", body)
    progress = _check_progress_then_reply(server, events, "chat.completion.chunk")
    assert progress[0]["id"] == events[0]["id"]

    # the same prompt again: most of it comes from the prefix cache, and progress says so
    again = [e["prompt_progress"] for e in _events(server, "/v1/chat/completions", body) if "prompt_progress" in e]
    assert again[0]["cache"] > 0 and again[0]["processed"] >= again[0]["cache"]
    assert again[-1]["processed"] == again[-1]["total"]


def test_completion_stream_reports_prompt_progress(server: LiveServer):
    body = {"prompt": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n" + LONG + "<|im_end|>\n<|im_start|>assistant\n", "stream": True,
            "return_progress": True, "stream_options": {"include_usage": True}, "temperature": 0, "max_tokens": 16}
    _check_progress_then_reply(server, _events(server, "/v1/completions", body), "text_completion")


def test_without_the_flag_the_stream_is_unchanged(server: LiveServer):
    body = {"messages": [{"role": "user", "content": "Once more: " + LONG}], "stream": True, "temperature": 0}
    events = _events(server, "/v1/chat/completions", body)
    assert not [e for e in events if "prompt_progress" in e]
    assert all(e["choices"] for e in events)   # no usage asked: every chunk has a choice


def test_the_openai_sdk_parses_a_stream_with_progress(server: LiveServer):
    client = server.openai()
    stream = client.chat.completions.create(
        model="any", messages=[{"role": "user", "content": "SDK: " + LONG}], stream=True, temperature=0,
        extra_body={"return_progress": True})
    progress, text = [], []
    for chunk in stream:
        extra = chunk.model_extra or {}
        if "prompt_progress" in extra:
            assert chunk.choices == [] and not "".join(text)
            progress.append(extra["prompt_progress"]["processed"])
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
    assert len(progress) >= 2 and progress == sorted(progress)
    assert "".join(text) == "".join(SCRIPTED_REPLY)


def test_return_progress_must_be_a_boolean(server: LiveServer):
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True,
                                             "return_progress": "yes"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "return_progress"

"""Reasoning models through every API: a tiny GGUF with Qwen3's (and DeepSeek-R1's) chat template
whose weights make greedy decoding think first (tests/thinking_model.py). The thinking is split
from the answer in OpenAI chat (`reasoning_content` and `reasoning`), Responses (a reasoning
item), Anthropic (a thinking block) and Ollama (`thinking`), whole and streamed, and kept out of
the next turn's prompt; --reasoning-budget and Anthropic's budget_tokens end it early."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from llmpack.runtime.chat.recipes import load_recipes
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer, live_server, sse_events, stream_post
from thinking_model import ANSWER, R1_CHAIN, THINKING, write_thinking_model

GREEDY = {"temperature": 0, "max_tokens": 40}
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def r1_thinker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_thinking_model(tmp_path_factory.mktemp("r1") / "r1-thinker.gguf",
                                load_recipes()["deepseek-r1"].chat_template, R1_CHAIN)


def test_openai_chat_splits_thinking_in_both_namings(qwen3_thinker: LiveServer):
    msg = qwen3_thinker.post("/v1/chat/completions", {"messages": HI, **GREEDY}).json()["choices"][0]["message"]
    assert (msg["content"], msg["reasoning_content"], msg["reasoning"]) == (ANSWER, THINKING, THINKING)


def test_openai_stream_never_shows_a_tag_and_adds_up(qwen3_thinker: LiveServer):
    resp = stream_post(qwen3_thinker.url + "/v1/chat/completions", {"messages": HI, "stream": True, **GREEDY})
    thinking, answer = "", ""
    for data in sse_events(resp):
        if data == "[DONE]":
            break
        for ch in json.loads(data)["choices"]:
            d = ch["delta"]
            assert d.get("reasoning_content") == d.get("reasoning")
            thinking += d.get("reasoning_content") or ""
            answer += d.get("content") or ""
    assert (thinking, answer) == (THINKING, ANSWER)


def test_responses_has_a_reasoning_item_before_the_message(qwen3_thinker: LiveServer):
    body = qwen3_thinker.post("/v1/responses", {"input": "Hi", "temperature": 0, "max_output_tokens": 40}).json()
    reasoning, message = body["output"]
    assert reasoning["type"] == "reasoning" and reasoning["content"] == [{"type": "reasoning_text", "text": THINKING}]
    assert message["content"][0]["text"] == ANSWER
    assert body["usage"]["output_tokens_details"]["reasoning_tokens"] >= 4


def test_anthropic_thinking_block_and_stream(qwen3_thinker: LiveServer):
    req = {"model": "x", "max_tokens": 40, "temperature": 0, "messages": HI}
    msg = qwen3_thinker.post("/v1/messages", req).json()
    assert msg["content"] == [{"type": "thinking", "thinking": THINKING, "signature": ""},
                              {"type": "text", "text": ANSWER}]
    resp = stream_post(qwen3_thinker.url + "/v1/messages", {**req, "stream": True})
    events = [json.loads(d) for d in sse_events(resp)]
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text"]
    assert "".join(e["delta"].get("thinking", "") for e in events if e["type"] == "content_block_delta") == THINKING


def test_anthropic_thinking_switch_reaches_the_template(qwen3_thinker: LiveServer):
    """Qwen3's `enable_thinking=false` writes an empty think block into the prompt: more tokens."""
    def count(**extra: object) -> int:
        return qwen3_thinker.post("/v1/messages/count_tokens", {"model": "x", "messages": HI, **extra}).json()[
            "input_tokens"]
    assert count(thinking={"type": "disabled"}) > count() == count(thinking={"type": "enabled", "budget_tokens": 9})


def test_anthropic_budget_tokens_ends_the_thinking(qwen3_thinker: LiveServer):
    msg = qwen3_thinker.post("/v1/messages", {"model": "x", "max_tokens": 40, "temperature": 0, "messages": HI,
                                              "thinking": {"type": "enabled", "budget_tokens": 2}}).json()
    assert msg["content"] == [{"type": "thinking", "thinking": "the", "signature": ""},
                              {"type": "text", "text": ANSWER}]


def test_ollama_thinking_whole_and_streamed(qwen3_thinker: LiveServer):
    req = {"model": "x", "messages": HI, "options": {"temperature": 0, "num_predict": 40}}
    msg = qwen3_thinker.post("/api/chat", {**req, "stream": False}).json()["message"]
    assert (msg["thinking"], msg["content"]) == (THINKING, ANSWER)
    lines = [json.loads(x) for x in requests.post(qwen3_thinker.url + "/api/chat", json=req, timeout=60).iter_lines()]
    assert "".join(x["message"].get("thinking", "") for x in lines) == THINKING
    assert "".join(x["message"]["content"] for x in lines) == ANSWER and lines[-1]["done"] is True
    gen = qwen3_thinker.post("/api/generate", {"model": "x", "prompt": "Hi", "stream": False,
                                               "options": {"temperature": 0}}).json()
    assert (gen["thinking"], gen["response"]) == (THINKING, ANSWER)


def test_the_next_turn_leaves_the_thinking_out(qwen3_thinker: LiveServer):
    """The client sends the earlier answer back with its thinking; the prompt must not hold it."""
    history = [*HI, {"role": "assistant", "content": f"<think>{THINKING} secret</think>{ANSWER}"},
               {"role": "user", "content": "Again"}]
    first = qwen3_thinker.post("/v1/messages/count_tokens", {"model": "x", "messages": [
        *HI, {"role": "assistant", "content": ANSWER}, {"role": "user", "content": "Again"}]}).json()
    second = qwen3_thinker.post("/v1/messages/count_tokens", {"model": "x", "messages": history}).json()
    assert first == second


def test_a_template_that_opens_the_thinking_and_the_server_budget(r1_thinker: Path):
    """DeepSeek-R1's prompt ends inside <think>: the output has only the closing tag. With
    --reasoning-budget 2 the thinking is cut after two tokens and the model answers."""
    with live_server(r1_thinker, "--ctx", "512") as srv:
        msg = srv.post("/v1/chat/completions", {"messages": HI, **GREEDY}).json()["choices"][0]["message"]
        assert (msg["reasoning_content"], msg["content"]) == (THINKING, ANSWER)
    with live_server(r1_thinker, "--ctx", "512", "--reasoning-budget", "2") as srv:
        msg = srv.post("/v1/chat/completions", {"messages": HI, **GREEDY}).json()["choices"][0]["message"]
        assert (msg["reasoning_content"], msg["content"]) == ("the tiny", ANSWER)
    with live_server(r1_thinker, "--ctx", "512", "--reasoning-format", "none") as srv:
        msg = srv.post("/v1/chat/completions", {"messages": HI, **GREEDY}).json()["choices"][0]["message"]
        assert msg["content"] == f"{THINKING}</think>{ANSWER}" and "reasoning_content" not in msg


def test_openai_reasoning_effort_and_chat_template_kwargs_reach_the_template(qwen3_thinker: LiveServer):
    def prompt_tokens(**extra: object) -> int:
        resp = qwen3_thinker.post("/v1/chat/completions", {"messages": HI, "max_tokens": 1, **extra})
        return resp.json()["usage"]["prompt_tokens"]
    base = prompt_tokens()
    off = prompt_tokens(reasoning_effort="none")
    assert off == prompt_tokens(chat_template_kwargs={"enable_thinking": False}) > base
    assert prompt_tokens(reasoning_effort="high") == base
    bad = qwen3_thinker.post("/v1/chat/completions", {"messages": HI, "reasoning_effort": "max"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "reasoning_effort"

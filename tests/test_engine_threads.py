"""The engine as request threads see it: many threads at once, and an engine thread that dies.

ctypes releases the GIL inside every llama.cpp call, so request threads really run llama.cpp
in parallel with each other and with the engine thread; and when the engine thread stops, a
caller must hear why instead of waiting forever."""
from __future__ import annotations

import json
import queue
import threading

import pytest
from engine_invariants import check_consistency

from llmpack.runtime.engine.engine import EngineConfig, EngineDeadError, LLMEngine
from llmpack.runtime.llm import collect
from llmpack.runtime.engine.request import RequestStream
from llmpack.runtime.engine.sequence import Request
from llmpack.runtime.engine.sampling_params import SamplingParams

WORDS = "the of and to in is you that it he was for on are as with his they at be this have from".split()


@pytest.fixture()
def engine(tiny_model):
    eng = LLMEngine(EngineConfig(model_path=str(tiny_model), n_ctx=512, max_num_seqs=4, gpu_layers=0))
    eng.on_step = check_consistency
    yield eng
    eng.shutdown()


def distinct_prompts(n: int) -> list[str]:
    """Long enough that tokenizing one takes a while, so calls overlap; no two alike."""
    return [" ".join(WORDS[(i * 7 + j * (i + 3)) % len(WORDS)] for j in range(400)) + f" {i}" for i in range(n)]


def test_threads_tokenizing_at_once_each_get_their_own_tokens(engine):
    prompts = distinct_prompts(16)
    expected = [engine.tokenize(p) for p in prompts]
    assert len({tuple(e) for e in expected}) == len(prompts)
    start = threading.Barrier(len(prompts))
    wrong: list[int] = []

    def work(i: int) -> None:
        start.wait()
        for _ in range(40):
            if engine.tokenize(prompts[i]) != expected[i] or engine.tokenize_prompt(prompts[i]) != expected[i]:
                wrong.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, f"{len(wrong)} of {len(prompts) * 40} tokenizations came back with another prompt's tokens"


def test_requests_submitted_from_many_threads_run_on_their_own_prompts(engine):
    prompts = distinct_prompts(8)
    expected = [engine.tokenize(p) for p in prompts]
    start = threading.Barrier(len(prompts))
    got: dict[int, list[int]] = {}

    def work(i: int) -> None:
        start.wait()
        got[i] = collect(engine.add_request(prompts[i], SamplingParams(temperature=0, max_tokens=1))).prompt_token_ids

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(len(prompts))] == expected


def break_the_engine(engine: LLMEngine, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """A fault in llama_decode, and another inside the handler that would have recovered from it:
    the engine thread itself dies. The fault waits for the returned event, so a test can queue
    every request it wants before the engine dies (else the first step could kill it mid-loop)."""
    go = threading.Event()

    def decode(*args, **kwargs):
        go.wait(30)
        raise RuntimeError("injected llama_decode fault")

    def abort_request(*args, **kwargs):
        raise RuntimeError("injected fault in the failure handler")

    monkeypatch.setattr(engine.runner, "decode", decode)
    monkeypatch.setattr(engine, "_abort_request", abort_request)
    return go


def test_a_dead_engine_thread_ends_every_request_with_an_error(engine, monkeypatch, capfd):
    # one runs, one is queued behind it (max_num_seqs=4 and 5 requests)
    go = break_the_engine(engine, monkeypatch)
    streams = [engine.add_request(f"request {i}", SamplingParams(temperature=0, max_tokens=8)) for i in range(5)]
    go.set()
    for stream in streams:
        last = stream.get(timeout=20)
        assert last.finished and last.error and "injected llama_decode fault" in last.error
        assert last.outputs and all(c.finish_reason == "abort" for c in last.outputs)
    assert not engine.is_alive() and "injected" in engine.failure
    with pytest.raises(EngineDeadError, match="restart"):
        engine.add_request("one more", SamplingParams(max_tokens=4))
    err = capfd.readouterr().err
    assert "the engine stopped" in err and "injected fault in the failure handler" in err


def test_a_stream_notices_an_engine_that_died_without_a_word(engine):
    """Even if the engine thread could not answer its requests (it was killed mid-flight), a
    waiting stream ends with an error instead of blocking forever."""
    engine.shutdown()                              # the thread is gone, and a request it never saw
    req = Request("r1", "hi", [1, 2], SamplingParams(max_tokens=4), seed=0)
    out = RequestStream(engine, req).get(timeout=5)
    assert out.finished and out.error and out.outputs[0].finish_reason == "abort"


def test_queue_empty_still_means_no_output_yet_while_the_engine_lives(engine):
    stream = engine.add_request("hello", SamplingParams(temperature=0, max_tokens=200, ignore_eos=True))
    stream.abort()
    outs = list(stream)
    assert outs[-1].finished and outs[-1].error is None
    with pytest.raises(queue.Empty):
        stream.get(timeout=0.2)


# ---- the same, over HTTP ---------------------------------------------------------------------
def test_a_dead_engine_is_reported_to_clients_health_and_new_requests(tiny_chat_model, monkeypatch):
    import requests
    from server_fixtures import live_server, sse_events, stream_post

    with live_server(tiny_chat_model) as srv:
        assert requests.get(srv.url + "/health").status_code == 200
        break_the_engine(srv.engine, monkeypatch).set()   # one request: nothing to queue first
        body = {"model": srv.model_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
        with stream_post(srv.url + "/v1/chat/completions", {**body, "stream": True}, timeout=30) as resp:
            events = list(sse_events(resp))
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["type"] == "server_error" and "injected llama_decode fault" in error["message"]

        health = requests.get(srv.url + "/health", timeout=10)
        assert health.status_code == 500 and health.json()["status"] == "error"
        assert "injected" in health.json()["message"]

        refused = srv.post("/v1/chat/completions", body, timeout=10)
        assert refused.status_code == 500
        assert refused.json()["error"]["code"] == "engine_failed" and "restart" in refused.json()["error"]["message"]


def test_health_shows_the_system_prompt_only_to_callers_with_the_api_key(tiny_chat_model):
    import requests
    from server_fixtures import live_server

    with live_server(tiny_chat_model, "--system", "Internal rules: never say X.", "--api-key", "k3y") as srv:
        anonymous = requests.get(srv.url + "/health", timeout=10).json()
        assert anonymous["status"] == "ok" and "system_prompt" not in anonymous
        assert "never say X" not in requests.get(srv.url + "/health", timeout=10).text
        keyed = requests.get(srv.url + "/health", headers={"Authorization": "Bearer k3y"}, timeout=10).json()
        assert keyed["system_prompt"] == "Internal rules: never say X."
    with live_server(tiny_chat_model, "--system", "Be brief.") as srv:   # no key: the page needs it
        assert requests.get(srv.url + "/health", timeout=10).json()["system_prompt"] == "Be brief."

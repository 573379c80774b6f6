"""/v1/embeddings (official SDK), /tokenize and /detokenize (llama-server's shapes)."""
from __future__ import annotations

import base64
import threading

import numpy as np
import openai
import pytest
import requests

from server_fixtures import *  # noqa: F401,F403
from ggufs import CHATML_TEMPLATE
from server_fixtures import LiveServer, live_server
from test_server import metric_samples

TEXTS = ["The cat sat on the mat.", "A dog ran in the park.", "hello", "The cat sat on the mat."]


def embed(srv: LiveServer, inputs, **kw) -> np.ndarray:
    r = srv.openai().embeddings.create(model=srv.model_id, input=inputs, **kw)
    assert r.object == "list" and r.model == srv.model_id
    assert [d.index for d in r.data] == list(range(len(r.data)))
    assert r.usage.prompt_tokens == r.usage.total_tokens > 0
    return np.array([d.embedding for d in r.data], dtype=np.float32)


def test_embeddings_shape_batching_and_formats(chat_server: LiveServer):
    assert chat_server.state.model.engine.embedder is None      # nothing is spent on embeddings before the first request
    vecs = embed(chat_server, TEXTS)
    assert vecs.shape == (4, chat_server.state.model.engine.embedder.n_embd)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert np.allclose(vecs[0], vecs[3], atol=1e-5)                  # same text, same vector
    assert not np.allclose(vecs[0], vecs[1], atol=1e-3)
    for i, text in enumerate(TEXTS[:3]):                            # batched == one at a time
        assert np.allclose(embed(chat_server, text)[0], vecs[i], atol=2e-3)
    raw = requests.post(chat_server.url + "/v1/embeddings", json={"input": TEXTS[:2], "encoding_format": "base64"},
                        timeout=60).json()
    decoded = np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in raw["data"]])
    assert np.allclose(decoded, vecs[:2], atol=1e-6)
    ids = requests.post(chat_server.url + "/tokenize", json={"content": TEXTS[2], "add_special": True},
                        timeout=30).json()["tokens"]
    assert np.allclose(embed(chat_server, [ids])[0], vecs[2], atol=1e-5)   # token ids work as input
    assert chat_server.state.model.engine.embedder.pooling == "mean"             # a chat model has no pooling of its own


def test_embeddings_are_counted_and_bad_input_is_400(chat_server: LiveServer):
    before = metric_samples(chat_server.url)
    embed(chat_server, ["one", "two"])
    after = metric_samples(chat_server.url)
    assert after["llmpack:embedding_requests_total"] - before.get("llmpack:embedding_requests_total", 0) == 1
    assert after["llmpack:embedding_inputs_total"] - before.get("llmpack:embedding_inputs_total", 0) == 2
    for body, param in [({"input": []}, "input"), ({"input": [""]}, "input"), ({"input": 5}, "input"),
                        ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
                        ({"input": "x", "dimensions": 8}, "dimensions"), ({"input": [[10**9]]}, "input"),
                        ({"input": "x " * 5000}, "input")]:
        with pytest.raises(openai.BadRequestError) as info:
            chat_server.openai().embeddings.create(model=chat_server.model_id, **body)
        assert info.value.body["param"] == param, body


def test_embedding_while_chatting(chat_server: LiveServer):
    """The embeddings context runs beside the engine; both answer correctly at the same time."""
    alone = embed(chat_server, TEXTS)
    results = []

    def chat():
        r = chat_server.openai().chat.completions.create(model=chat_server.model_id, max_tokens=40,
                                                         messages=[{"role": "user", "content": "hi"}])
        results.append(r.choices[0].finish_reason)

    threads = [threading.Thread(target=chat) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(5):
        assert np.allclose(embed(chat_server, TEXTS), alone, atol=2e-3)
    for t in threads:
        t.join()
    assert len(results) == 4


def test_tokenize_and_detokenize(chat_server: LiveServer):
    url = chat_server.url
    text = "hello world, héllo"
    plain = requests.post(url + "/tokenize", json={"content": text}).json()["tokens"]
    special = requests.post(url + "/tokenize", json={"content": text, "add_special": True}).json()["tokens"]
    assert special[1:] == plain and special[0] == chat_server.engine.bos_prefix[0]
    assert requests.post(url + "/detokenize", json={"tokens": plain}).json()["content"].strip() == text
    pieces = requests.post(url + "/tokenize", json={"content": text, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == plain
    joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert joined.decode().strip() == text   # pieces that split a character come as byte lists
    marker = requests.post(url + "/tokenize", json={"content": "<|im_start|>", "parse_special": True}).json()["tokens"]
    literal = requests.post(url + "/tokenize", json={"content": "<|im_start|>", "parse_special": False}).json()["tokens"]
    assert len(marker) == 1 and len(literal) > 1
    assert requests.post(url + "/tokenize", json={"content": 5}).status_code == 400
    assert requests.post(url + "/detokenize", json={"tokens": [-1]}).status_code == 400


@pytest.mark.demo
def test_demo_model_embeddings_rank_similar_texts(demo_server: LiveServer):
    a, b, c = embed(demo_server, ["I love my cat.", "I adore my kitten.", "Quarterly tax filing deadlines."])
    assert a @ b > a @ c
    assert demo_server.state.model.engine.embedder.pooling == "mean"


def test_a_model_that_declares_its_pooling_gets_it(tiny_model_factory):
    """An embedding GGUF says how to pool (here CLS: the first token's state, which for this
    causal model is the BOS token's whatever follows it)."""
    from gguf import GGUFValueType

    path = tiny_model_factory(chat_template=CHATML_TEMPLATE, extra_kv={"llama.pooling_type": (2, GGUFValueType.UINT32)})
    with live_server(path) as srv:
        a, b = embed(srv, ["hello world", "the cat"])
        assert srv.state.model.engine.embedder.pooling == "cls"
        assert np.allclose(a, b, atol=1e-5)      # same first token, same CLS state

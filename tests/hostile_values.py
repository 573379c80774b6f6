"""The hostile values of the protocol fuzz (issue 46): every route of the single server with a
valid body, the values put in its fields (huge and non-finite numbers, lone surrogates, deep
nesting, invalid UTF-8, 100,000 characters...), every API room's content parts, and the mutations
that make one hostile body from a valid one. Used on real sockets by listener_fuzz.py and through
Flask's client by test_fuzz_routes.py."""
from __future__ import annotations

import json
import random
from typing import Any, Iterator

from llmpack.runtime.server.http.security import CHALLENGE_PATH

CHAT = {"title": "t", "mode": "chat", "created": 1, "updated": 2,
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "stats": {"tokens": 1}}]}
PICTURE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
CLIP = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQAAAAA="   # an empty 16 kHz WAV
# (method, route, a valid body or None): every route of the single server (create_app's url_map;
# test_fuzz_listeners.py checks that none is missing). {id} becomes an id, sometimes a hostile one.
ROUTES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    ("POST", "/v1/completions", {"prompt": "hello", "max_tokens": 2}),
    ("POST", "/v1/embeddings", {"input": "hello"}),
    ("GET", "/v1/models", None),
    ("GET", "/v1/models/{id}", None),
    ("GET", "/v1/documents/reading", None),
    ("POST", "/tokenize", {"content": "hello", "with_pieces": True}),
    ("POST", "/detokenize", {"tokens": [1, 2, 3]}),
    ("POST", "/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                               "instructions": "be brief", "max_output_tokens": 2}),   # stored: the store is fuzzed too
    ("GET", "/v1/responses/{id}", None),
    ("DELETE", "/v1/responses/{id}", None),
    ("POST", "/v1/messages", {"model": "m", "max_tokens": 2, "system": "be brief",
                              "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
    ("POST", "/v1/messages/count_tokens", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False,
                           "options": {"num_predict": 2, "temperature": 0.5}}),
    ("POST", "/api/generate", {"model": "m", "prompt": "hi", "options": {"num_predict": 2}}),
    ("POST", "/api/embed", {"model": "m", "input": ["hello", "world"]}),
    ("POST", "/api/embeddings", {"model": "m", "prompt": "hello"}),
    ("GET", "/api/tags", None),
    ("GET", "/api/ps", None),
    ("GET", "/api/version", None),
    ("POST", "/api/show", {"model": "m"}),
    ("POST", "/api/pull", {"model": "m"}),                  # Ollama's model management: one model, refused
    ("POST", "/api/push", {"model": "m"}),
    ("POST", "/api/create", {"model": "m", "from": "m"}),
    ("POST", "/api/copy", {"source": "m", "destination": "n"}),
    ("DELETE", "/api/delete", {"model": "m"}),
    ("POST", "/api/blobs/{id}", b"blob"),
    ("GET", "/api/chats", None),
    ("GET", "/api/chats/{id}", None),
    ("PUT", "/api/chats/{id}", CHAT),
    ("DELETE", "/api/chats/{id}", None),
    ("GET", "/api/chats/{id}/export", None),
    ("POST", "/api/chats/import", {"format": "llmpack-chat", "version": 1, "model": "m", **CHAT}),
    ("GET", "/api/search", None),
    ("GET", "/api/settings", None),
    ("PUT", "/api/settings", {"system_prompt": "be brief", "temperature": 0.5, "top_k": 40, "max_tokens": None}),
    ("GET", "/api/presets", None),
    ("PUT", "/api/presets", {"presets": [{"name": "Short", "system_prompt": "be brief", "temperature": 0.2}]}),
    ("POST", "/v1/extract", b"name,price\nsoup,3\n"),
    # the page's tools: MCP servers (seeded with none, so no mutation names a host to connect to) and file search
    ("GET", "/api/mcp", None),
    ("PUT", "/api/mcp/servers", {"servers": []}),
    ("POST", "/api/mcp/call", {"server": "x", "tool": "y", "arguments": {"a": 1}}),
    ("POST", "/api/tools/search", {"query": "boiler code", "files": [{"file_id": "doc-" + "0" * 32, "name": "m.txt"}]}),
    ("GET", "/", None),
    ("GET", "/static/{path}", None),
    ("GET", "/favicon.ico", None),
    ("GET", "/health", None),
    ("GET", "/metrics", None),
    ("GET", CHALLENGE_PATH, None),
]
NOT_SUPPORTED = ("/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete", "/api/blobs/")
LENGTHS = ("max_tokens", "max_completion_tokens", "max_output_tokens")   # each API's name for the reply's length
EXTRA_KEYS = ["stream", "n", "stop", "temperature", "top_p", "top_k", "min_p", "seed", "logprobs", "top_logprobs",
              "stream_options", "tools", "tool_choice", "response_format", "json_schema", "grammar", "prompt",
              "messages", "input", "content", "tokens", "add_special", "parse_special", "encoding_format",
              "title", "created", "updated", "mode", "format", "system_prompt", "max_tokens", "x", "images",
              "think", "keep_alive", "presets", "attachments", "sources", "system", "options"]


class Raw:
    """A JSON text written as is: what json.dumps never writes (1e400, NaN, invalid UTF-8, deep nesting)."""
    def __init__(self, text: bytes) -> None:
        self.text = text


HOSTILE: list[Any] = [
    None, True, False, 0, -1, 1, 3, 2**31, 2**53 + 1, 2**63, 2**64, 2**70, -(2**70), 10**400, 0.5, -0.0, 1e-320,
    1e308, -1e308, Raw(b"1e400"), Raw(b"-1e400"), Raw(b"NaN"), Raw(b"Infinity"), Raw(b"-Infinity"),
    "", "x", "\u0000", "\ud800", "\udfff\ud800x", "é" * 100, "🎉" * 50, "a" * 100_000, "<|im_start|>", "{{ 7*7 }}",
    Raw(b'"\xff\xfe\xc3 not utf-8"'), Raw(b'"\xed\xa0\x80"'), [], {}, [None, 1, "x"], [2**70], ["\ud800"],
    {"a": {"b": [1]}}, {"role": "user", "content": 1}, [{"role": "system", "content": "x" * 1000}],
    Raw(b"[" * 50 + b"]" * 50), Raw(b"[" * 5000 + b"]" * 5000), Raw(b'{"a":' * 3000 + b"1" + b"}" * 3000),
]

# Every room's content parts, well formed and not: OpenAI's chat, the Responses API's, Anthropic's.
PARTS: list[Any] = [
    {"type": "text", "text": "hi"}, {"type": "text", "text": 3}, {"type": "text"},
    {"type": "image_url", "image_url": {"url": PICTURE}}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
    {"type": "image_url", "image_url": PICTURE}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}},
    {"type": "image_url", "image_url": {"url": "javascript:alert(1)", "detail": "high"}},
    {"type": "input_audio", "input_audio": {"data": CLIP, "format": "wav"}},
    {"type": "input_audio", "input_audio": {"data": "%%%", "format": "mp3"}}, {"type": "input_audio"},
    {"type": "file", "file": {"file_data": "data:text/plain;base64,aGk=", "filename": "a.txt"}},
    {"type": "file", "file": {"file_id": "file-1"}},
    {"type": "input_text", "text": "hi"}, {"type": "input_image", "image_url": PICTURE},
    {"type": "input_image", "image_url": {"url": PICTURE}}, {"type": "input_file", "file_data": "x", "filename": 1},
    {"type": "output_text", "text": "yo"}, {"type": "refusal", "refusal": "no"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PICTURE.split(",")[1]}},
    {"type": "image", "source": {"type": "base64", "media_type": "image/tiff", "data": "AAAA"}},
    {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}},
    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "a doc"}},
    {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}, {"type": "tool_use", "id": 1, "input": "x"},
    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "r"}]},
    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "image", "source": {}}]},
    {"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "redacted_thinking", "data": "x"},
    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"},
    {"type": "function_call_output", "call_id": "c", "output": {"x": 1}},
    {"type": "no-such-part", "text": "hi"}, {"text": "no type"}, "a bare string", 7, None, [],
]
IMAGES = [[PICTURE.split(",")[1]], ["not base64 @@"], [PICTURE], [1], "AAAA", [""] * 50]   # Ollama's images


def _mutate(value: Any, rng: random.Random) -> Any:
    """The value with one hostile value put somewhere inside it (or in its place)."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice([*value, *rng.sample(EXTRA_KEYS, 3)])
        copy = dict(value)
        copy[key] = _mutate(value[key], rng) if key in value and rng.random() < 0.5 else rng.choice(HOSTILE)
        if rng.random() < 0.1:
            copy.pop(rng.choice(list(copy)), None)
        return copy
    if isinstance(value, list) and value and rng.random() < 0.7:
        copy = list(value)
        i = rng.randrange(len(copy))
        copy[i] = _mutate(copy[i], rng)
        return copy
    return rng.choice(HOSTILE)


def _encode(value: Any) -> bytes:
    raws: list[bytes] = []

    def swap(v: Any) -> Any:
        if isinstance(v, Raw):
            raws.append(v.text)
            return f"@@raw{len(raws) - 1}@@"
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list):
            return [swap(x) for x in v]
        return v

    text = json.dumps(swap(value)).encode()
    for i, raw in enumerate(raws):
        text = text.replace(f'"@@raw{i}@@"'.encode(), raw)
    return text


def bodies(base: dict, n: int, rng: random.Random) -> Iterator[bytes]:
    for i in range(n):
        if i % 20 == 0:
            yield bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))      # junk bytes
        elif i % 20 == 1:
            data = _encode(base)
            yield data[: rng.randint(0, len(data) - 1)]                              # cut short
        elif i % 20 == 2:
            yield _encode(rng.choice(HOSTILE))                                       # not an object
        elif i % 20 in (3, 4) and _has_parts(base):
            yield _encode(_short(_with_parts(base, rng), base))                      # content parts
        else:
            body = base
            for _ in range(rng.randint(1, 3)):
                body = _mutate(body, rng)
            yield _encode(_short(body, base))


def _has_parts(base: dict) -> bool:
    """A request whose first message can hold content parts."""
    listed = base.get("messages", base.get("input"))
    return isinstance(listed, list) and bool(listed) and isinstance(listed[0], dict)


def _with_parts(base: dict, rng: random.Random) -> dict:
    """`base` with its first message's content (Ollama's: its images) replaced by random content parts."""
    parts = [rng.choice(PARTS) for _ in range(rng.randint(1, 4))]
    key = "messages" if "messages" in base else "input"
    first = dict(base[key][0])
    if "options" in base and rng.random() < 0.5:   # Ollama's chat: pictures ride beside the text
        first["images"] = rng.choice(IMAGES)
    else:
        first["content"] = parts if rng.random() < 0.9 else parts[0]
    if rng.random() < 0.2:
        first["role"] = rng.choice(["assistant", "system", "tool", "developer", "x", None])
    return {**base, key: [first, *base[key][1:]]}


def _short(body: Any, base: dict) -> Any:
    """A generation request that would be accepted with a long (or no) length limit gets a short
    one, or its large limit negated (still a hostile number, now one that is refused): generating
    to the end of the context thousands of times is slow and tests nothing more."""
    if not isinstance(body, dict) or not ("messages" in base or "prompt" in base or "max_output_tokens" in base):
        return body
    if "model" in base and "max_tokens" not in base and "options" not in base:   # count_tokens, show, embed
        return body
    body = dict(body)
    if "options" in base:   # Ollama's: options.num_predict
        if isinstance(body.get("options"), dict):
            value = body["options"].get("num_predict")
            if not isinstance(value, int) or isinstance(value, bool) or value > 4 or value < 0:
                body["options"] = {**body["options"], "num_predict": 2}
        return body
    if not any(k in body for k in LENGTHS):
        body["max_output_tokens" if "max_output_tokens" in base else "max_tokens"] = 2
    for key in LENGTHS:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 4:
            body[key] = -value
    return body


def hostile_id(rng: random.Random) -> str:
    return rng.choice(["c1", "c2", "chat_3", "x" * 64, "x" * 65, "bad%20id", "%F0%9F%8E%89", "..", "c-" + "9" * 30,
                       "%FF%FE", "%00", "a%2Fb", "resp_" + "0" * 40, "%C0%AE%C0%AE", "~", "x" * 5000])

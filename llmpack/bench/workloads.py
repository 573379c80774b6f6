"""What a benchmark sends. Prompts are built from common English words, which almost every
tokenizer maps to about one token each, so a prompt of N words is about N tokens on any
server; the token counts that are reported come from the server's own `usage`.

Every request's prompt is distinct from its first word on (no server can answer it from a
prompt cache), except in `chat`, where all requests share one system prompt on purpose:
that is the workload in which a prefix cache pays.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

WORDS = """time year people way day man thing woman life child world school state family student
group country problem hand part place case week company system program question work government
number night point home water room mother area money story fact month lot right study book eye job
word business issue side kind head house service friend father power hour game line end member law
car city community name president team minute idea kid body information back parent face others level
office door health person art war history party result change morning reason research girl guy moment
air teacher force education garden river bread window music paper stone table light market village""".split()


@dataclass(slots=True)
class Workload:
    """`prompts` requests; each is (endpoint, JSON body). Greedy, ignore_eos, so that every
    request asks for exactly `output_len` tokens and servers are compared on equal work."""
    name: str
    description: str
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def words(n: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _sampling(output_len: int) -> dict[str, Any]:
    return {"max_tokens": output_len, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}


def random_prompts(n: int, input_len: int, output_len: int, seed: int = 0) -> Workload:
    rng = random.Random(seed)
    reqs = [("/v1/completions", {"prompt": f"{i}: {words(input_len, rng)}", **_sampling(output_len)})
            for i in range(n)]
    return Workload("random", f"~{input_len}-word random prompts, {output_len}-token replies", reqs)


def shared_system_chat(n: int, system_len: int, output_len: int, seed: int = 0) -> Workload:
    rng = random.Random(seed)
    system = "You are a helpful assistant. Follow these notes. " + words(system_len, rng)
    reqs = [("/v1/chat/completions", {"messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Question {i}: tell me about the {rng.choice(WORDS)} and the {rng.choice(WORDS)}."}],
        **_sampling(output_len)}) for i in range(n)]
    return Workload("chat", f"chats sharing a ~{system_len}-word system prompt, {output_len}-token replies", reqs)


def long_prompt(n: int, input_len: int, output_len: int, seed: int = 0) -> Workload:
    rng = random.Random(seed + 1_000_003)
    reqs = [("/v1/completions", {"prompt": f"Document {i}. {words(input_len, rng)}", **_sampling(output_len)})
            for i in range(n)]
    return Workload("long", f"~{input_len}-word prompts, {output_len}-token replies (TTFT is prefill)", reqs)


def make(name: str, n: int, *, input_len: int = 32, output_len: int = 64, system_len: int = 280,
         long_len: int = 2000, seed: int = 0) -> Workload:
    if name == "random":
        return random_prompts(n, input_len, output_len, seed)
    if name == "chat":
        return shared_system_chat(n, system_len, output_len, seed)
    if name == "long":
        return long_prompt(n, long_len, output_len, seed)
    raise ValueError(f"unknown workload {name!r}: use random, chat or long")


NAMES = ("random", "chat", "long")

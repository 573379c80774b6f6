"""A tiny GGUF that thinks: a reasoning model's chat template, and weights crafted so greedy
decoding writes a fixed chain of tokens, thinking first (`<think>` … `</think>`) and then the
answer, the way Qwen3 does; or, with a chain that starts inside the thinking, the way a
DeepSeek-R1 distill does after its template opened `<think>` itself.

How: every block adds nothing to the residual stream (attention and FFN outputs are zero), so
the last hidden state is the last token's embedding, and the output matrix maps each chain
token's embedding onto the next chain token. The chat template is the real one (the qwen3 and
deepseek-r1 recipes, written from the model cards). Every prompt of these templates ends with a
newline, so the chain starts at "\\n".
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ggufs import EOS_ID, tiny_vocab, write_tiny_model

ADDED = ("<think>", "</think>")   # single tokens, as in Qwen3's and DeepSeek's vocabularies
# Qwen3: the model opens and closes its thinking, then answers.
QWEN3_CHAIN = ("<think>", "the", "▁tiny", "▁model", "</think>", "hello", "▁world")
# DeepSeek-R1: the template already wrote "<think>\n"; the model goes on inside it.
R1_CHAIN = ("the", "▁tiny", "▁model", "</think>", "hello", "▁world")
THINKING, ANSWER = "the tiny model", "hello world"


def token_ids() -> dict[str, int]:
    return {piece: i for i, (piece, _, _) in enumerate(tiny_vocab(ADDED))}


def write_thinking_model(path: str | Path, chat_template: str, chain: Sequence[str] = QWEN3_CHAIN,
                         name: str = "tiny-thinker") -> Path:
    """Write the model; greedy decoding after any prompt that ends in "\\n" writes `chain`, then EOS."""
    ids = token_ids()
    steps = [ids["<0x0A>"], *(ids[p] for p in chain), EOS_ID]
    assert len(set(steps)) == len(steps), "each chain token must occur once: it alone picks the next"
    embedding: dict[str, np.ndarray] = {}

    def weights(tensor: str, data: np.ndarray) -> np.ndarray:
        if tensor == "token_embd.weight":
            embedding["E"] = data
            return data
        if tensor.endswith(("attn_output.weight", "ffn_down.weight")):
            return np.zeros_like(data)       # the blocks leave the residual stream alone
        if tensor == "output_norm.weight":
            return np.ones_like(data)
        if tensor == "output.weight":
            out = np.zeros_like(data)
            table = embedding["E"]
            for cur, nxt in zip(steps, steps[1:]):
                out[nxt] = 3.0 * table[cur] / np.linalg.norm(table[cur])
            return out
        return data

    return write_tiny_model(path, chat_template=chat_template, added_tokens=ADDED, weights=weights, name=name)

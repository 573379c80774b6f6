"""Thread-safe tokenize / detokenize for the HTTP threads (/tokenize, /detokenize, embeddings).

Each call uses its own buffers: ctypes releases the GIL around llama.cpp calls, so a buffer
shared between request threads would be written by two tokenizations at once.
"""
from __future__ import annotations

import ctypes

import llama_cpp as lc


def tokenize(vocab, text: str, add_special: bool, parse_special: bool) -> list[int]:
    data = text.encode("utf-8", errors="replace")
    cap = len(data) + 16
    buf = (lc.llama_token * cap)()
    n = lc.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
    if n < 0:   # -n is the size needed
        cap = -n
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
    return list(buf[:n])


def piece(vocab, token: int, special: bool = True) -> bytes:
    """One token's raw bytes (may be part of a multi-byte character)."""
    buf = ctypes.create_string_buffer(64)
    n = lc.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = lc.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    return buf.raw[:n]


def detokenize(vocab, tokens: list[int], special: bool = True) -> str:
    return b"".join(piece(vocab, t, special) for t in tokens).decode("utf-8", errors="replace")

"""Tiny GGUF models for tests: real llama-architecture files that llama.cpp loads and runs in
milliseconds, plus helpers to corrupt them byte by byte for the validation tests.

The vocabulary is SentencePiece-style ("llama" tokenizer): <unk>, <s>, </s>, two chat control
tokens, the 256 byte-fallback tokens <0x00>..<0xFF> and a few hundred ordinary pieces, so any
text (including multi-byte UTF-8) tokenizes and detokenizes exactly.
"""
from __future__ import annotations

import shutil
import string
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
from gguf.quants import quantize

# A minimal ChatML template, for tests that need an embedded chat template.
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# SentencePiece token types (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6
UNK_ID, BOS_ID, EOS_ID, IM_START_ID, IM_END_ID = 0, 1, 2, 3, 4

_WORDS = """the of and to in is you that it he was for on are as with his they at be this have from
or one had by word but not what all were we when your can said there use an each which she do how
their if will up other about out many then them these so some her would make like him into time has
look two more write go see number no way could people my than first water been call who oil its now
find long down day did get come made may part hello world chat model tiny test token llama""".split()

_DTYPES = {
    "f32": (GGMLQuantizationType.F32, LlamaFileType.ALL_F32),
    "f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
    "q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
}


def tiny_vocab(added: Sequence[str] = ()) -> list[tuple[str, float, int]]:
    """(piece, score, token type) for every token, in id order. `added` tokens (such as Qwen3's
    `<think>`) come last, typed user-defined: llama.cpp reads each as one token and prints it."""
    vocab = [("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("</s>", 0.0, CONTROL),
             ("<|im_start|>", 0.0, CONTROL), ("<|im_end|>", 0.0, CONTROL)]
    vocab += [(f"<0x{b:02X}>", 0.0, BYTE) for b in range(256)]
    pieces: dict[str, None] = {}
    for ch in "▁" + string.ascii_letters + string.digits + string.punctuation:
        pieces[ch] = None
    for word in _WORDS:   # every prefix, so SentencePiece's pairwise merges can build the word
        for w in (word, "▁" + word):
            for end in range(2, len(w) + 1):
                pieces[w[:end]] = None
    # longer pieces score higher, so merges prefer them
    vocab += [(p, -1000.0 + 10 * len(p) - i * 1e-3, NORMAL) for i, p in enumerate(pieces)]
    return vocab + [(p, 0.0, USER_DEFINED) for p in added]


def write_tiny_model(
    path: str | Path, *, arch: str = "llama", n_layer: int = 2, n_embd: int = 64, n_head: int = 4,
    n_head_kv: int = 2, n_ff: int = 128, n_ctx_train: int = 2048, dtype: str = "f32",
    chat_template: str | None = None, seed: int = 0, extra_kv: dict[str, Any] | None = None,
    name: str = "tiny-test-model", added_tokens: Sequence[str] = (),
    weights: Callable[[str, np.ndarray], np.ndarray] | None = None,
) -> Path:
    """Write a random-weight llama model. Only arch="llama" runs in llama.cpp; other names are for
    testing architecture checks. extra_kv adds or overrides metadata (a value of None deletes the
    key; a (value, GGUFValueType) tuple forces the type, else it is inferred). `added_tokens` go
    at the end of the vocabulary (tiny_vocab); `weights(name, random_data)` may return other
    data for a tensor, to craft what the model writes (tests/thinking_model.py)."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}")
    qtype, ftype = _DTYPES[dtype]
    path = Path(path)
    rng = np.random.default_rng(seed)
    vocab = tiny_vocab(added_tokens)
    head_dim = n_embd // n_head

    w = GGUFWriter(path, arch)
    w.add_name(name)
    w.add_file_type(ftype)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(len(vocab))
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([p for p, _, _ in vocab])
    w.add_token_scores([s for _, s, _ in vocab])
    w.add_token_types([t for _, _, t in vocab])
    w.add_unk_token_id(UNK_ID)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for key, value in (extra_kv or {}).items():
        if value is None:
            w.kv_data[0].pop(key, None)
        elif isinstance(value, tuple):
            w.add_key_value(key, value[0], value[1])
        else:
            w.add_key_value(key, value, _infer_type(value))

    def weight(name: str, rows: int, cols: int, scale: float = 0.08) -> None:
        data = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
        if weights is not None:
            data = np.asarray(weights(name, data), dtype=np.float32)
        if qtype == GGMLQuantizationType.Q8_0:
            w.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, data.astype(np.float16) if qtype == GGMLQuantizationType.F16 else data)

    def norm(name: str) -> None:
        data = (1.0 + 0.05 * rng.standard_normal(n_embd)).astype(np.float32)
        w.add_tensor(name, data if weights is None else np.asarray(weights(name, data), dtype=np.float32))

    n_kv = head_dim * n_head_kv
    weight("token_embd.weight", len(vocab), n_embd, scale=0.5)
    for i in range(n_layer):
        norm(f"blk.{i}.attn_norm.weight")
        weight(f"blk.{i}.attn_q.weight", n_embd, n_embd)
        weight(f"blk.{i}.attn_k.weight", n_kv, n_embd)
        weight(f"blk.{i}.attn_v.weight", n_kv, n_embd)
        weight(f"blk.{i}.attn_output.weight", n_embd, n_embd)
        norm(f"blk.{i}.ffn_norm.weight")
        weight(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        weight(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        weight(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    norm("output_norm.weight")
    weight("output.weight", len(vocab), n_embd, scale=0.3)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _infer_type(value: Any) -> GGUFValueType:
    if isinstance(value, bool):
        return GGUFValueType.BOOL
    if isinstance(value, int):
        return GGUFValueType.UINT32 if 0 <= value < 2**32 else GGUFValueType.INT64
    if isinstance(value, float):
        return GGUFValueType.FLOAT32
    if isinstance(value, (list, tuple)):
        return GGUFValueType.ARRAY
    return GGUFValueType.STRING


# ---- corrupting good files -------------------------------------------------------------------
# Offsets are found with gguf.GGUFReader, an independent parser, so the tests do not rely on
# the code under test to locate the bytes they break.

def kv_value_offset(path: str | Path, key: str) -> int:
    """Byte offset of the value of metadata `key` (after its type field). For a string that is
    its u64 length; for an array, its u32 item type followed by the u64 count."""
    field = GGUFReader(path).fields[key]
    return field.offset + 8 + len(key.encode()) + 4


def tensor_info_offsets(path: str | Path, name: str) -> dict[str, int]:
    """Byte offsets of the n_dims, type and data-offset fields of tensor `name`'s header entry."""
    reader = GGUFReader(path)
    t = next(t for t in reader.tensors if t.name == name)
    n_dims = t.field.offset + 8 + len(name.encode())
    ttype = n_dims + 4 + 8 * len(t.shape)
    return {"n_dims": n_dims, "type": ttype, "offset": ttype + 4, "data_start": int(t.data_offset)}


def patched_copy(src: str | Path, dst: str | Path, at: int, data: bytes) -> Path:
    """Copy src to dst and overwrite bytes at `at` with `data`."""
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.seek(at)
        f.write(data)
    return Path(dst)


def truncated_copy(src: str | Path, dst: str | Path, size: int) -> Path:
    """Copy the first `size` bytes of src to dst (an interrupted download)."""
    with open(src, "rb") as f:
        Path(dst).write_bytes(f.read(size))
    return Path(dst)

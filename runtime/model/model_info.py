"""What a GGUF model is and how much memory it needs: the facts `llmpack inspect` reports
(builder/inspect.py formats them) and the figures the engine uses to size the KV cache and decide
GPU offload (`weight_bytes_per_layer`, `kv_bytes_per_token`).

Metadata comes from gguf_check's own header parse rather than gguf.GGUFReader: the parse is
already bounds-checked, and GGUFReader is far slower on a 262k-token vocabulary
(docs/BENCHMARKS.md, "GGUF header parse").
Figures follow llama.cpp's conventions so they can be checked against its load log: "model
params" is the sum of tensor element counts, "file size" the sum of tensor bytes, and the KV
cache holds every layer at full context (llama-cpp-python keeps a full-size SWA cache).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmpack.errors import LlmpackError
from llmpack.runtime.model.base_model import is_base_model
from llmpack.runtime.model.context import DEFAULT_N_CTX
from llmpack.runtime.model.gguf_check import ArrayInfo, GGUFHeader, validate_gguf
from llmpack.runtime.model.naming import NAME_KEYS

# llama_ftype_name() in llama.cpp's src/llama-model-loader.cpp, by general.file_type
FILE_TYPE_NAMES = {
    0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K - Medium", 11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large",
    14: "Q4_K - Small", 15: "Q4_K - Medium", 16: "Q5_K - Small", 17: "Q5_K - Medium", 18: "Q6_K",
    19: "IQ2_XXS - 2.0625 bpw", 20: "IQ2_XS - 2.3125 bpw", 21: "Q2_K - Small", 22: "IQ3_XS - 3.3 bpw",
    23: "IQ3_XXS - 3.0625 bpw", 24: "IQ1_S - 1.5625 bpw", 25: "IQ4_NL - 4.5 bpw", 26: "IQ3_S - 3.4375 bpw",
    27: "IQ3_S mix - 3.66 bpw", 28: "IQ2_S - 2.5 bpw", 29: "IQ2_M - 2.7 bpw", 30: "IQ4_XS - 4.25 bpw",
    31: "IQ1_M - 1.75 bpw", 32: "BF16", 36: "TQ1_0 - 1.69 bpw ternary", 37: "TQ2_0 - 2.06 bpw ternary",
    38: "MXFP4 MoE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}
# llama.cpp picks an end-of-turn token by its text when the file names none (llama-vocab.cpp)
EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
             "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>")
# architectures whose loader calls load_swa_pattern(ml, N): layer il slides iff il % N < N - 1
SWA_PATTERNS = {"gemma2": 2, "gemma3": 6, "gemma-embedding": 6, "cohere2": 4, "gpt-oss": 2}
_LAYER = re.compile(r"blk\.(\d+)\.")


@dataclass
class ModelInfo:
    path: str
    offset: int                      # where the GGUF starts inside `path` (0 for a plain file)
    length: int
    gguf_version: int
    architecture: str
    name: str | None
    parameters: int                  # sum of tensor element counts (llama.cpp's "model params")
    file_type: str                   # llama.cpp's name for general.file_type, e.g. "Q4_K - Medium"
    tensor_types: dict[str, dict[str, int]]   # ggml type -> {"count", "bytes"}
    context_length: int | None       # trained context
    n_layer: int
    n_embd: int | None
    n_head: list[int]                # per layer
    n_head_kv: list[int]             # per layer
    head_dim_k: int | None
    head_dim_v: int | None
    sliding_window: int | None
    swa_layers: list[int] | None     # layers using the sliding window (None: not known)
    vocab_size: int | None
    special_tokens: dict[str, dict[str, Any] | None]  # bos/eos/eot/pad/unk -> {"id", "text"}
    chat_template: str | None = field(repr=False)
    basename: str | None             # general.basename, which recipes match like the name
    naming: dict[str, str]           # the general.* names a display name is made of (runtime.model.naming)
    base_model: bool                 # no chat template and no instruct/chat tag (runtime.base_model)
    weight_bytes: int                # sum of tensor bytes (llama.cpp's "file size")
    weight_bytes_per_layer: list[int]  # tensors named blk.N.*
    non_layer_weight_bytes: int      # token_embd, output, output_norm, ...
    kv_bytes_per_token_per_layer: list[int]
    kv_bytes_per_token: int          # f16 K and V over all layers
    ctx: int                         # context used for the estimate below
    kv_bytes_total: int

    @property
    def bits_per_weight(self) -> float:
        return self.weight_bytes * 8 / self.parameters if self.parameters else 0.0

    def kv_bytes(self, n_ctx: int, bytes_per_element: float = 2.0) -> int:
        """KV cache for n_ctx tokens; bytes_per_element 2 = f16, 34/32 = q8_0."""
        return int(self.kv_bytes_per_token * n_ctx * bytes_per_element / 2)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        template = d.pop("chat_template")
        d.pop("base_model")
        d["has_chat_template"] = template is not None
        d["bits_per_weight"] = round(self.bits_per_weight, 3)
        return d


def read_model_info(path: str | Path, ctx: int | None = None, offset: int = 0,
                    length: int | None = None) -> ModelInfo:
    """Validate the GGUF at path[offset:offset+length] and describe it; raises GGUFError."""
    if ctx is not None and ctx <= 0:
        raise LlmpackError(f"--ctx must be a positive number of tokens, not {ctx}")
    h = validate_gguf(path, offset, length)
    arch, kv = h.architecture, h.kv

    def akey(suffix: str, default: Any = None) -> Any:
        return kv.get(f"{arch}.{suffix}", default)

    n_layer = int(akey("block_count", 0))
    n_embd = akey("embedding_length")
    n_head = _per_layer(akey("attention.head_count", 0), n_layer)
    n_head_kv = _per_layer(akey("attention.head_count_kv", n_head), n_layer)
    head0 = next((n for n in n_head if n), 0)
    default_dim = n_embd // head0 if n_embd and head0 else None
    dim_k, dim_v = akey("attention.key_length", default_dim), akey("attention.value_length", default_dim)
    window = akey("attention.sliding_window")
    swa = _swa_layers(arch, akey("attention.sliding_window_pattern"), n_layer) if window else None
    # f16 K and V that one token adds to each layer's cache (Gemma 4 has other dims on SWA layers)
    full_dims = (dim_k or 0) + (dim_v or 0)
    swa_dims = (akey("attention.key_length_swa", dim_k) or 0) + (akey("attention.value_length_swa", dim_v) or 0)
    swa_set = set(swa or ())
    kv_layer = [n_head_kv[il] * (swa_dims if il in swa_set else full_dims) * 2 for il in range(n_layer)]

    per_layer = [0] * n_layer
    other = 0
    types: dict[str, dict[str, int]] = {}
    for t in h.tensors:
        entry = types.setdefault(t.type.name, {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += t.nbytes
        m = _LAYER.match(t.name)
        if m and int(m.group(1)) < n_layer:
            per_layer[int(m.group(1))] += t.nbytes
        else:
            other += t.nbytes

    ctx_len = akey("context_length")
    use_ctx = ctx or ctx_len or DEFAULT_N_CTX
    kv_token = sum(kv_layer)
    template = kv.get("tokenizer.chat_template")
    return ModelInfo(
        path=str(path), offset=h.region_offset, length=h.region_length, gguf_version=h.version,
        architecture=arch, name=kv.get("general.name"),
        parameters=sum(t.n_elements for t in h.tensors), file_type=_file_type(h),
        tensor_types=dict(sorted(types.items(), key=lambda kv_: -kv_[1]["bytes"])),
        context_length=ctx_len, n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
        head_dim_k=dim_k, head_dim_v=dim_v, sliding_window=window, swa_layers=swa,
        vocab_size=_vocab_size(h), special_tokens=_special_tokens(h), chat_template=template,
        basename=kv.get("general.basename"), naming={k: v for k in NAME_KEYS if isinstance(v := kv.get(k), str)},
        base_model=is_base_model(kv, [Path(path).stem]),
        weight_bytes=sum(t.nbytes for t in h.tensors), weight_bytes_per_layer=per_layer,
        non_layer_weight_bytes=other, kv_bytes_per_token_per_layer=kv_layer,
        kv_bytes_per_token=kv_token, ctx=use_ctx, kv_bytes_total=kv_token * use_ctx,
    )


def _per_layer(value: Any, n_layer: int) -> list[int]:
    """Head counts are a scalar or (e.g. OpenELM, hybrid models) one value per layer."""
    if isinstance(value, ArrayInfo):  # implausibly long; treat as unknown rather than guess
        return [0] * n_layer
    if isinstance(value, list):
        return [int(v) for v in value[:n_layer]] + [0] * (n_layer - len(value))
    return [int(value)] * n_layer


def _swa_layers(arch: str, pattern: Any, n_layer: int) -> list[int] | None:
    """Mirror llama.cpp's load_swa_pattern: a per-layer bool array wins, else N from the file
    or the architecture's default, with layer il sliding iff il % N < N - 1."""
    if isinstance(pattern, list):
        return [il for il, on in enumerate(pattern[:n_layer]) if on]
    n = pattern if isinstance(pattern, int) else SWA_PATTERNS.get(arch)
    if n is None:
        return None
    return [il for il in range(n_layer) if n == 0 or il % n < n - 1]


def _file_type(h: GGUFHeader) -> str:
    ftype = h.kv.get("general.file_type")
    if isinstance(ftype, int):
        return FILE_TYPE_NAMES.get(ftype & ~1024, "unknown, may not work")
    common = Counter(t.type.name for t in h.tensors).most_common(1)
    return f"(guessed) mostly {common[0][0]}" if common else "unknown"


def _vocab_size(h: GGUFHeader) -> int | None:
    tokens = h.kv.get("tokenizer.ggml.tokens")
    if tokens is not None:
        return len(tokens)
    embd = next((t for t in h.tensors if t.name == "token_embd.weight"), None)
    return embd.shape[1] if embd and len(embd.shape) > 1 else None


def _special_tokens(h: GGUFHeader) -> dict[str, dict[str, Any] | None]:
    """bos/eos/eot/pad/unk as {"id", "text"}; with no eot_token_id in the file, the end-of-turn
    token is found by its text the way llama.cpp does it (Gemma's <end_of_turn>, ChatML's <|im_end|>)."""
    kinds = {"bos": "bos_token_id", "eos": "eos_token_id", "eot": "eot_token_id",
             "pad": "padding_token_id", "unk": "unknown_token_id"}
    ids = {k: h.kv.get(f"tokenizer.ggml.{key}") for k, key in kinds.items()}
    if "tokenizer.ggml.tokens" not in h.kv:
        return {k: (None if i is None else {"id": i, "text": None}) for k, i in ids.items()}
    wanted = {i for i in ids.values() if isinstance(i, int)}
    eot_texts = {t.encode() for t in EOT_TEXTS} if ids["eot"] is None else set()
    texts: dict[int, str] = {}
    for i, raw in enumerate(h.iter_strings("tokenizer.ggml.tokens")):   # one pass (docs/BENCHMARKS.md, "GGUF header parse")
        if i in wanted:
            texts[i] = raw.decode("utf-8", "replace")
        if raw in eot_texts:
            ids["eot"], texts[i], eot_texts = i, raw.decode(), set()
    return {k: (None if i is None else {"id": i, "text": texts.get(i)}) for k, i in ids.items()}

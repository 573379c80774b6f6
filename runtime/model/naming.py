"""The name a person sees for a model (the chat page's title and header, `/health`'s
`display_name`) when nobody chose one with `--name`.

`general.name` is whatever the converter wrote, and it often names the file the model was
converted *from*: the Qwen2.5-Coder GGUF of the demo says "Qwen2.5 Coder 0.5B Instruct AWQ" in a
Q4_K_M file. So the name is built from the GGUF naming convention's parts (`general.basename`,
`general.size_label`, `general.finetune`, `general.version`), else from the file name, else from
`general.name`, always without quantization and format tags, words spaced and capitalised:
"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" -> "Qwen2.5 Coder 0.5B Instruct".
"""
from __future__ import annotations

import re
from typing import Any, Mapping

# Quantization and packaging tags: llama.cpp's file types (Q4_K_M, IQ3_XXS, Q8_0, F16, BF16, ...)
# and the formats a name may carry over from its source (AWQ, GPTQ, EXL2, MLX, GGUF, 4bit...).
_QUANT = (r"(?:i?q[1-8](?:_[a-z0-9]+)*|t[qm][12]_0|b?f(?:p)?(?:16|32)|fp8|mxfp4|awq|gptq|exl2|mlx|gguf|ggml"
          r"|int[48]|[248]bit|imatrix|ud)")
_TAG = re.compile(rf"(?i)(?:^|(?<=[-_.\s])){_QUANT}(?=$|[-_.\s])")
_SIZE = re.compile(r"(?i)\d+(?:\.\d+)?[kmbt]|\d+x\d+(?:\.\d+)?[kmbt]")
_HASH = re.compile(r"[0-9a-f]{64}")
_UPPER = {"it": "IT", "moe": "MoE"}
NAME_KEYS = ("general.name", "general.basename", "general.size_label", "general.finetune", "general.version")


def _clean(text: Any) -> str:
    """Tags out, separators to spaces, words capitalised; "" when nothing is left."""
    if not isinstance(text, str):
        return ""
    words = []
    for word in re.split(r"[-_\s]+", _TAG.sub(" ", text)):
        word = word.strip(". ")
        if not word:
            continue
        if _SIZE.fullmatch(word):
            word = word.upper().replace("X", "x")
        elif word.lower() in _UPPER:
            word = _UPPER[word.lower()]
        elif word.islower() and not re.fullmatch(r"v\d.*", word):
            word = word[0].upper() + word[1:]
        words.append(word)
    return " ".join(words)


def human_name(kv: Mapping[str, Any], file_stem: str = "") -> str:
    """A clean name for the model in `kv` (GGUF metadata) stored as `file_stem` (the file's
    name without .gguf; a built program's <sha256> stem says nothing and is skipped)."""
    base = _clean(kv.get("general.basename"))
    if base:
        parts = [base]
        for key in ("general.size_label", "general.finetune", "general.version"):
            part = _clean(kv.get(key))
            if part and part.lower() not in " ".join(parts).lower():
                parts.append(part)
        return " ".join(parts)
    stem = "" if _HASH.fullmatch(file_stem.lower()) else _clean(file_stem)
    if stem and stem.lower() not in ("model", "ggml model"):
        return stem
    return _clean(kv.get("general.name")) or stem or "Local model"

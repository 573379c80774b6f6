"""Is this a *base* model, one that continues text rather than answering?

A model tuned to follow instructions says so: its GGUF embeds a chat template, or its name or
metadata carries a tag such as "Instruct", "-it", "Chat" (general.name, general.basename,
general.finetune, general.tags, the file name). A model with neither is a pretrained base:
wrapped in a chat template it still just continues the transcript, often repeating itself, so
`llmpack build` and the chat page say so and the page offers plain text completion instead.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

# Whole words (split on anything but letters and digits) that mark an instruction/chat tune.
TUNED_WORDS = frozenset({
    "instruct", "instruction", "it", "chat", "sft", "dpo", "rlhf", "orpo", "kto", "assistant", "inst",
    "hermes", "vicuna", "zephyr", "openchat", "tulu", "orca", "alpaca", "thinking", "reasoning", "r1",
})


def _words(text: str) -> set[str]:
    parts = re.split(r"[^a-z0-9]+", text.lower())
    # "Llama-3.2-1B-Instruct" -> instruct; "gemma-3-270m-it" -> it; "Qwen2.5-7B-Chat" -> chat
    return {p for p in parts if p}


def is_tuned_name(names: Iterable[Any]) -> bool:
    for name in names:
        values = name if isinstance(name, (list, tuple)) else [name]
        for value in values:
            if isinstance(value, str) and (_words(value) & TUNED_WORDS or "instruct" in value.lower()):
                return True
    return False


def is_base_model(kv: Mapping[str, Any], names: Iterable[Any] = ()) -> bool:
    """True when the GGUF metadata `kv` has no chat template and neither it nor `names` (e.g.
    the file name, the display name) mark an instruction or chat tune."""
    template = kv.get("tokenizer.chat_template")
    if isinstance(template, str) and template.strip():
        return False
    tagged = [kv.get(k) for k in ("general.name", "general.basename", "general.finetune", "general.tags")]
    return not is_tuned_name([*tagged, *names])

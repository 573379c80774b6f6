"""`llmpack inspect MODEL_OR_BUILT_FILE`: what the model is, which recipe would chat with it, the
memory it needs, and how many layers fit on each GPU of this machine.

It lives in the builder because it also reads built files: the model inside one is found through
the packfile layout (builder/packfile.py), which the runtime does not import.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from llmpack.builder.extract import DiskNeed, disk_need
from llmpack.builder.mmproj import vision_report
from llmpack.builder.packfile import PackError, find_embedded_model, read_manifest
from llmpack.errors import LlmpackError
from llmpack.runtime.chat.recipes import match_recipe
from llmpack.runtime.hardware.placement import fit_report
from llmpack.progress import human_bytes
from llmpack.runtime.model.model_info import ModelInfo, read_model_info


def locate_model(path: str | Path) -> tuple[int, int | None]:
    """(offset, length) of the GGUF inside a built executable, or (0, None) for a plain file."""
    found = find_embedded_model(Path(path))
    return found if found else (0, None)


def launch_disk(path: Path) -> DiskNeed | None:
    """The disk a launch of a built program needs beyond the file (None for a plain GGUF)."""
    try:
        return disk_need(read_manifest(path))
    except PackError:
        return None


def recipe_name(info: ModelInfo) -> str | None:
    """The recipe llmpack would pick for this model, by architecture, names and embedded template."""
    names = [n for n in (info.name, info.basename) if isinstance(n, str)]
    recipe = match_recipe(arch=info.architecture, name=names, chat_template=info.chat_template)
    return None if recipe is None else recipe.name


def human_count(n: int) -> str:
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return str(n)


def format_report(info: ModelInfo, recipe: str | None) -> str:
    def heads(values: list[int]) -> str:
        return str(values[0]) if len(set(values)) <= 1 and values else "per layer " + ",".join(map(str, values))

    tok = ", ".join(f"{k.upper()} {v['id']} {v['text']!r}" for k, v in info.special_tokens.items() if v)
    types = ", ".join(f"{t} x{v['count']} ({human_bytes(v['bytes'])})" for t, v in info.tensor_types.items())
    where = f" (embedded at byte {info.offset})" if info.offset else ""
    lines = [
        f"{Path(info.path).name}{where}",
        f"  model          {info.name or '(unnamed)'} [{info.architecture}], GGUF v{info.gguf_version}",
        f"  recipe         {recipe or 'none matched'}",
        f"  parameters     {human_count(info.parameters)}",
        f"  file type      {info.file_type}, {info.bits_per_weight:.2f} bits per weight",
        f"  tensor types   {types}",
        f"  context        {info.context_length or '?'} tokens (trained)",
        f"  layers         {info.n_layer}, embedding {info.n_embd}, heads {heads(info.n_head)}, "
        f"KV heads {heads(info.n_head_kv)}, head dim {info.head_dim_k}/{info.head_dim_v}",
    ]
    if info.sliding_window:
        swa = info.swa_layers
        which = "pattern unknown" if swa is None else \
            f"{len(swa)} of {info.n_layer} layers; full attention on " \
            f"{', '.join(str(i) for i in range(info.n_layer) if i not in swa) or 'none'}"
        lines.append(f"  sliding window {info.sliding_window} tokens ({which})")
    lines += [
        f"  vocabulary     {info.vocab_size} tokens; {tok or 'no special tokens'}",
        f"  chat template  {'embedded' if info.chat_template else 'none embedded'}",
        "memory",
        f"  weights        {human_bytes(info.weight_bytes)} ({human_bytes(info.non_layer_weight_bytes)} outside "
        f"the layers, up to {human_bytes(max(info.weight_bytes_per_layer, default=0))} per layer)",
        f"  KV cache       {human_bytes(info.kv_bytes_per_token)} per token (f16); "
        f"{human_bytes(info.kv_bytes_total)} at {info.ctx} tokens",
        f"  total          about {human_bytes(info.weight_bytes + info.kv_bytes_total)} plus compute buffers",
    ]
    if info.context_length and info.ctx > info.context_length:
        lines.append(f"  note: {info.ctx} tokens is beyond the trained {info.context_length}; quality may degrade")
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    path = Path(args.model)
    if not path.is_file():
        raise LlmpackError(f"{path}: no such file")
    offset, length = locate_model(path)
    info = read_model_info(path, ctx=args.ctx, offset=offset, length=length)
    recipe = recipe_name(info)
    gpu = fit_report(info)   # loads llama.cpp's backends to see this machine's GPUs
    disk = launch_disk(path)
    vision = vision_report(path)
    if args.json:
        print(json.dumps({**info.to_dict(), "recipe": recipe, "gpu": gpu, "disk": disk.to_dict() if disk else None,
                          "vision": vision}))
    else:
        print(format_report(info, recipe) + "\n" + format_gpu(gpu) + (f"\n{disk.line()}" if disk else "")
              + f"\nvision\n  {vision['line']}")
    return 0


def format_gpu(gpu: dict) -> str:
    """The "gpu" part of `llmpack inspect`: how many layers fit on each GPU of this machine."""
    lines = [f"GPU (layers that fit at {gpu['ctx']} tokens)"]
    for d in gpu["devices"]:
        whole = " + output layer" if d["output_fits"] else ""
        lines.append(f"  {d['id']:<14} {d['name']}: {d['layers_fit']}/{gpu['n_layers']} layers{whole} fit in "
                     f"{human_bytes(d['memory_free'])} free of {human_bytes(d['memory_total'])}")
    if not gpu["devices"]:
        lines.append(f"  none usable: {gpu['note']}; the model runs on the CPU")
    return "\n".join(lines)

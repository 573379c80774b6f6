"""How many layers fit on a GPU (`--gpu-layers auto`, and `llmpack inspect` through placement.fit_report).

Each layer costs its weights (from the GGUF's per-layer tensor sizes) plus its share of the KV
cache at the chosen context; the output layer and a compute reserve come off the top of the
device's free memory. runtime/hardware/placement.py decides where the model runs using this.
"""
from __future__ import annotations

from llmpack.errors import LlmpackError
from llmpack.runtime.hardware.backends import Device
from llmpack.runtime.model.model_info import read_model_info

COMPUTE_RESERVE = 512 * 1024 * 1024   # scratch buffers: docs/BENCHMARKS.md, "GPU compute reserve"
SAFETY_MARGIN = 256 * 1024 * 1024


def fit_gpu_layers(free_bytes: int, layer_bytes: list[int], output_bytes: int,
                   kv_bytes_per_token_per_layer: list[int], n_ctx: int,
                   compute_reserve: int = COMPUTE_RESERVE, margin: int = SAFETY_MARGIN) -> int:
    """Layers (counted from the last, as llama.cpp offloads them) that fit in free_bytes.

    Returns len(layer_bytes) + 1 when everything including the output layer fits (llama.cpp
    counts the output layer as one more), else the number of whole repeating layers."""
    budget = free_bytes - compute_reserve - margin
    n_layer = len(layer_bytes)
    used = 0
    for k in range(n_layer):
        layer = n_layer - 1 - k
        cost = layer_bytes[layer] + kv_bytes_per_token_per_layer[layer] * n_ctx
        if used + cost > budget:
            return k
        used += cost
    return n_layer + 1 if used + output_bytes <= budget else n_layer


def parse_gpu_layers(spec: int | str | None) -> int | str:
    """`--gpu-layers` as given: an int, "all" or "auto" (the default)."""
    if spec is None:
        return "auto"
    if isinstance(spec, str) and spec.strip().lstrip("-").isdigit():
        spec = int(spec)
    if isinstance(spec, int):
        return -1 if spec < 0 else spec
    if spec not in ("auto", "all"):
        raise LlmpackError(f"--gpu-layers must be a number, 'all' or 'auto', not {spec!r}")
    return spec


def fit_on(device: Device, model_path, n_ctx: int, offset: int = 0, length: int | None = None) -> int:
    """Layers of this model (+1 for the output layer) that fit in the device's free memory."""
    info = read_model_info(model_path, ctx=n_ctx, offset=offset, length=length)
    return fit_gpu_layers(device.memory_free, info.weight_bytes_per_layer, info.non_layer_weight_bytes,
                          info.kv_bytes_per_token_per_layer, n_ctx)

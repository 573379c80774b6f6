"""How many layers fit on a GPU (`--gpu-layers auto`, and `llmpack inspect` through placement.fit_report).

Each layer costs its weights (from the GGUF's per-layer tensor sizes) plus its share of the KV
cache at the chosen context; the output layer and a compute reserve come off the top of the
device's free memory. runtime/hardware/placement.py decides where the model runs using this.
"""
from __future__ import annotations

from llmpack.runtime.hardware.backends import Device
from llmpack.runtime.model.model_info import ModelInfo

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


def fit_on(device: Device, info: ModelInfo, n_ctx: int) -> int:
    """Layers of this model (+1 for the output layer) that fit in the device's free memory."""
    return fit_gpu_layers(device.memory_free, info.weight_bytes_per_layer, info.non_layer_weight_bytes,
                          info.kv_bytes_per_token_per_layer, n_ctx)

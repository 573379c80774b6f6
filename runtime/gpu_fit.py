"""How many layers to offload to the GPU (`--gpu-layers N | all | auto`).

`auto` asks llama.cpp's backend registry for the free memory of the first GPU device and
fits as many repeating layers as it can: each layer costs its weights (from the GGUF's
per-layer tensor sizes) plus its share of the KV cache at the chosen context; the output
layer and a compute reserve come off the top. A CPU-only build of llama.cpp has no GPU
device, so `auto` is 0 there.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from llmpack.errors import LlmpackError

COMPUTE_RESERVE = 512 * 1024 * 1024   # scratch buffers; measured 514 MiB at n_batch 512 for a 262k vocabulary
SAFETY_MARGIN = 256 * 1024 * 1024


@dataclass(slots=True)
class GpuDevice:
    name: str
    free: int
    total: int


def gpu_devices() -> list[GpuDevice]:
    """GPU devices llama.cpp can offload to, with their free memory now."""
    import llama_cpp as lc
    from llama_cpp._ggml import libggml

    if not lc.llama_supports_gpu_offload():
        return []
    libggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    libggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    libggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    libggml.ggml_backend_dev_type.restype = ctypes.c_int
    libggml.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    libggml.ggml_backend_dev_name.restype = ctypes.c_char_p
    libggml.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
    libggml.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                                ctypes.POINTER(ctypes.c_size_t)]
    devices = []
    for i in range(libggml.ggml_backend_dev_count()):
        dev = libggml.ggml_backend_dev_get(i)
        if libggml.ggml_backend_dev_type(dev) not in (1, 2):   # GGML_BACKEND_DEVICE_TYPE_GPU / IGPU
            continue
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        libggml.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        devices.append(GpuDevice(libggml.ggml_backend_dev_name(dev).decode(), free.value, total.value))
    return devices


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


def resolve_gpu_layers(spec: int | str | None, model_path, n_ctx: int) -> int:
    """Turn `--gpu-layers` into llama.cpp's n_gpu_layers (-1 = all)."""
    if spec is None:
        spec = "auto"
    if isinstance(spec, str) and spec.strip().lstrip("-").isdigit():
        spec = int(spec)
    if isinstance(spec, int):
        return spec
    if spec not in ("auto", "all"):
        raise LlmpackError(f"--gpu-layers must be a number, 'all' or 'auto', not {spec!r}")
    devices = gpu_devices()
    if not devices:
        return 0
    if spec == "all":
        return -1
    from llmpack.runtime.model_info import read_model_info

    info = read_model_info(model_path, ctx=n_ctx)
    return fit_gpu_layers(devices[0].free, info.weight_bytes_per_layer, info.non_layer_weight_bytes,
                          info.kv_bytes_per_token_per_layer, n_ctx)

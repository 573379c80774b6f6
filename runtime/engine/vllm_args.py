"""vLLM's engine arguments, read the llmpack way, so code written for vLLM's `LLM(...)` runs here.

`LLM(model=path, max_model_len=4096, gpu_memory_utilization=0.95, dtype="half")` is how vLLM's own
docs start. Each vLLM engine argument either does what it means here (`max_model_len` sets the
context, `max_num_seqs` the batch, ...) or is refused with a ValueError that names it and says
why, so a script never runs with a setting silently ignored. A name that is neither vLLM's nor
ours is a TypeError, as Python would raise for any unexpected keyword.
"""
from __future__ import annotations

import os
from dataclasses import fields
from typing import Any

from llmpack.runtime.engine.config import EngineConfig

# dtype: llama.cpp keeps each GGUF tensor in its stored type and computes with half-precision
# KV cache and GPU matmuls; "auto", "half" and "float16" describe exactly that.
HALF_DTYPES = ("auto", "half", "float16")
_LOCAL = "llmpack reads a local GGUF file and downloads nothing; pass the path of the .gguf as model"
_ONE_GPU = "llmpack runs a model on one machine's GPU (splitting layers across devices itself); " \
           "for more machines, serve with --rpc workers"
# vLLM argument -> (value(s) that already mean what llmpack does, why any other value is refused).
# A value of ANY accepts every value: the argument has nothing to change here (said in the reason).
ANY = object()
_FIXED: dict[str, tuple[Any, str]] = {
    "tokenizer": (None, "a GGUF carries its own tokenizer"),
    "tokenizer_mode": ("auto", "a GGUF carries its own tokenizer"),
    "skip_tokenizer_init": (False, "prompts are tokenized with the GGUF's tokenizer"),
    "tokenizer_revision": (None, _LOCAL),
    "revision": (None, _LOCAL),
    "download_dir": (None, _LOCAL),
    "hf_token": (None, _LOCAL),
    "hf_overrides": (None, "a GGUF's metadata is read as it is"),
    "load_format": (("auto", "gguf"), "llmpack loads GGUF files only"),
    "quantization": ((None, "gguf"), "the GGUF's own quantization is used; requantize the file with llama-quantize"),
    "tensor_parallel_size": (1, _ONE_GPU),
    "pipeline_parallel_size": (1, _ONE_GPU),
    "data_parallel_size": (1, _ONE_GPU),
    "distributed_executor_backend": (None, _ONE_GPU),
    "cpu_offload_gb": (0, "llama.cpp offloads whole layers; pass gpu_layers=N to keep the rest on the CPU"),
    "swap_space": (0, "a preempted request is recomputed, never swapped to CPU memory"),
    "kv_cache_dtype": ("auto", "the KV cache is kept in half precision"),
    "kv_cache_memory_bytes": (None, "the KV cache is sized by the context (max_model_len)"),
    "num_gpu_blocks_override": (None, "the KV cache is sized by the context (max_model_len)"),
    "max_seq_len_to_capture": (ANY, "llama.cpp decides its own CUDA graphs; the value changes nothing"),
    "enable_chunked_prefill": (True, "long prompts are always prefilled in chunks between decode steps"),
    "enable_lora": (False, "LoRA adapters are not supported"),
    "max_loras": (None, "LoRA adapters are not supported"),
    "speculative_config": (None, "speculative decoding is not configured through LLM(...)"),
    "compilation_config": (None, "nothing is compiled: llama.cpp's kernels are prebuilt"),
    "logits_processors": (None, "custom logits processors are not supported; use a grammar"),
    "mm_processor_kwargs": (None, "this engine reads text only"),
    "limit_mm_per_prompt": (None, "this engine reads text only"),
    "structured_outputs_config": (None, "structured output is set per request (SamplingParams.grammar)"),
    "pooler_config": (None, "pooling is not configurable"),
    "preemption_mode": (None, "a preempted request is always recomputed"),
    "trust_remote_code": (ANY, "a GGUF holds no code to trust; its chat template always runs sandboxed"),
    "disable_custom_all_reduce": (ANY, "one GPU has no all-reduce to customise"),
    "disable_log_stats": (ANY, "LLM(...) logs no statistics"),
    "disable_async_output_proc": (ANY, "outputs are always processed as they arrive"),
    "runner": (("auto", "generate"), "this engine generates text"),
    "convert": (("auto", "none"), "this engine generates text"),
    "task": (("auto", "generate"), "this engine generates text"),
}
# vLLM argument -> our EngineConfig field, same meaning.
_RENAMED = {"max_model_len": "n_ctx", "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "n_batch",
            "block_size": "block_size", "enable_prefix_caching": "enable_prefix_cache"}
VLLM_ARGS = frozenset(_FIXED) | frozenset(_RENAMED) | {"gpu_memory_utilization", "dtype", "enforce_eager", "seed"}


def _accepted(value: Any, ok: Any) -> bool:
    if ok is ANY:
        return True
    choices = ok if isinstance(ok, tuple) else (ok,)
    return any(value is c if c is None or isinstance(c, bool) else value == c for c in choices)


def engine_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """Split LLM(**kwargs) into EngineConfig keyword arguments and vLLM's global `seed` (the
    default seed of requests that set none). Raises ValueError naming a vLLM argument that cannot
    mean here what it means in vLLM, and TypeError for a name that is not an argument at all."""
    ours = {f.name for f in fields(EngineConfig)} - {"model_path"}
    out: dict[str, Any] = {}
    seed: int | None = None
    for name, value in kwargs.items():
        if name in _RENAMED:
            target = _RENAMED[name]
            if target in kwargs and target != name:
                raise ValueError(f"{name} and {target} both set the same thing; pass one of them")
            if value is not None:
                out[target] = value
        elif name in _FIXED:
            ok, why = _FIXED[name]
            if not _accepted(value, ok):
                raise ValueError(f"{name}={value!r} is not supported: {why}")
        elif name == "dtype":
            if str(value).lower() not in HALF_DTYPES:
                raise ValueError(f"dtype={value!r} is not supported: llama.cpp keeps the GGUF's own weight types "
                                 f"and computes in half precision; use one of {', '.join(HALF_DTYPES)}, or convert "
                                 "the model to a GGUF of the type you want")
        elif name == "gpu_memory_utilization":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
                raise ValueError(f"gpu_memory_utilization must be a fraction in (0, 1], got {value!r}")
            out["gpu_memory_utilization"] = float(value)
        elif name == "enforce_eager":
            if value:   # ggml's CUDA backend reads this once, at its first graph
                os.environ["GGML_CUDA_DISABLE_GRAPHS"] = "1"
        elif name == "seed":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"seed must be an integer, got {value!r}")
            seed = value
        elif name in ours:
            out[name] = value
        else:
            raise TypeError(f"LLM() got an unexpected keyword argument {name!r} (neither one of vLLM's engine "
                            "arguments nor llmpack's)")
    return out, seed

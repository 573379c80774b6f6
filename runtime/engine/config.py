"""The engine's one configuration, and the serving defaults that belong to the engine.

Every default lives here once: the command line (llmpack/cli.py) leaves a flag None when it is
not given and the server's config falls back to these; `llmpack build` records only what was
passed. `ModelRunner` reads the same object; what llama.cpp decides at load time (the batch it
accepts, the sequence slots) lives on the runner, not back in here.
"""
from __future__ import annotations

from dataclasses import dataclass

from llmpack.errors import LlmpackError
from llmpack.runtime.model.context import DEFAULT_N_CTX

MAX_NUM_SEQS = 32               # --parallel
MAX_WAITING = 256               # --max-waiting
GPU_LAYERS = "auto"             # --gpu-layers
FLASH_ATTN = "auto"             # --flash-attn


@dataclass
class EngineConfig:
    model_path: str
    n_ctx: int = DEFAULT_N_CTX
    max_num_seqs: int = MAX_NUM_SEQS   # sequences decoded together
    n_batch: int = 512                 # token budget of one step (prefill chunks + decode tokens)
    block_size: int = 16               # KV tokens per block of the paged cache
    gpu_layers: int | str = GPU_LAYERS   # N, "all" or "auto" (see hardware/placement.py)
    device: str | None = None          # --device: a GPU id such as "Vulkan1", "cpu", or None = auto
    enable_prefix_cache: bool = True
    max_waiting: int = MAX_WAITING     # queued requests beyond which add_request raises QueueFullError
    n_threads: int | None = None       # None = every core
    flash_attn: str = FLASH_ATTN       # "auto" | "on" | "off" (see model_runner.FLASH_ATTN)
    n_seq_max: int = 0                 # llama.cpp sequence ids (running + cached prefixes); 0 = auto
    verbose: bool = False              # llama.cpp's own log on stderr
    model_offset: int = 0              # > 0: the GGUF starts here inside model_path (a built program, read in place)
    model_length: int | None = None    # its size (None: to the end of the file)
    rpc: tuple[str, ...] = ()          # --rpc: "HOST:PORT" of RPC workers whose devices take layers (hardware/rpc.py)

    def __post_init__(self) -> None:
        self.gpu_layers = parse_gpu_layers(self.gpu_layers)


def parse_gpu_layers(spec: int | str | None) -> int | str:
    """`--gpu-layers` as given (or None): an int (-1 = all), "all" or "auto". The command line uses
    it as the flag's type, EngineConfig for callers of the Python API; nothing below parses again."""
    if spec is None:
        return GPU_LAYERS
    if isinstance(spec, str) and spec.strip().lstrip("-").isdigit():
        spec = int(spec)
    if isinstance(spec, int) and not isinstance(spec, bool):
        return -1 if spec < 0 else spec
    if isinstance(spec, str) and spec.strip().lower() in ("auto", "all"):
        return spec.strip().lower()
    raise LlmpackError(f"--gpu-layers must be a number, 'all' or 'auto', not {spec!r}")

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
SPECULATIVE = "auto"            # --speculative: auto | ngram | off (see speculative.py)
N_BATCH = 2048                  # tokens one step may hold, as llama-server's n_batch
N_UBATCH = 512                  # tokens llama.cpp computes at once; also one prompt's chunk per step
SPECULATIVE_MODES = ("auto", "ngram", "off")
TARGET_GAP_MS = 650             # --target-gap-ms: the time a step aims at while anyone decodes (step_sizer.py)


@dataclass
class EngineConfig:
    model_path: str
    n_ctx: int = DEFAULT_N_CTX
    max_num_seqs: int = MAX_NUM_SEQS   # sequences decoded together
    n_batch: int = N_BATCH             # token budget of one step (prefill chunks + decode tokens)
    n_ubatch: int = N_UBATCH           # llama.cpp's micro-batch; the most one prompt advances per step
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
    mmproj_path: str | None = None     # the image projector GGUF (--mmproj); None: text only
    mmproj_offset: int = 0             # > 0: the projector starts here inside mmproj_path (a built program)
    rpc: tuple[str, ...] = ()          # --rpc: "HOST:PORT" of RPC workers whose devices take layers (hardware/rpc.py)
    trace_steps: str | None = None     # a file to append one JSON line per engine step to (see step_trace.py)
    speculative: str = SPECULATIVE     # n-gram prompt-lookup drafting: "auto" | "ngram" | "off"
    gpu_memory_utilization: float = 1.0   # share of the GPU's total memory --gpu-layers auto may fill (vLLM's)
    # while anyone decodes, a step's prompt tokens are limited to what the measured step time fits in
    # at most this long, so no stream waits seconds behind another's prompt (0: n_batch alone decides)
    target_gap_ms: int = TARGET_GAP_MS

    def __post_init__(self) -> None:
        self.gpu_layers = parse_gpu_layers(self.gpu_layers)
        if self.speculative not in SPECULATIVE_MODES:
            raise LlmpackError(f"--speculative must be one of {', '.join(SPECULATIVE_MODES)}, not {self.speculative!r}")
        if self.target_gap_ms < 0:
            raise LlmpackError(f"--target-gap-ms must be 0 (off) or more, not {self.target_gap_ms}")


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

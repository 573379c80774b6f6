"""One llama.cpp model and context, driven through llama-cpp-python's low-level API.

The runner knows nothing about requests or blocks: it loads the model, tokenizes, decodes
one mixed batch (prefill chunks and decode tokens of many sequences) per call, hands out
logits rows, and exposes llama.cpp's per-sequence memory operations to the block manager.

Context choices, and why:
- `kv_unified=True`: every sequence draws cells from one pool of `n_ctx` cells, so a
  sequence can be as long as the whole context and cells can be shared between sequences
  (`seq_cp` shares a cell, it does not copy it) - which is what prefix caching and n>1 need.
- `swa_full=True`: sliding-window layers (Gemma 2/3) keep every cell instead of pruning
  those that slid out of the window, so a cached prefix is still complete when reused.
- flash attention "auto" (on wherever the backend supports it): see FLASH_ATTN below.
- `n_outputs_max = max_num_seqs + DRAFT_ROWS`: llama.cpp sizes its logits buffer as rows x
  vocabulary x 4 bytes (1 MiB per row for a 262k vocabulary) and writes it all when made; a
  step asks for one row per sequence plus speculative draft rows, so reserving n_batch rows
  would waste hundreds of MiB, and a step asking for more than n_outputs_max rows aborts the
  process (a GGML_ASSERT). The buffer starts at n_seq_max rows and grows only when a step
  asks for more, so n_seq_max is kept small too: max_num_seqs + SPARE_SEQ_IDS, not 256. The
  spare ids hold ended sequences' cached prefixes (block_manager's parked ids); each spare
  id costs Gemma 3 1 MiB of resident memory from the start (docs/BENCHMARKS.md, idle RSS).
"""
from __future__ import annotations

import ctypes
import os
from typing import Callable

import numpy as np

from llmpack.errors import LlmpackError
from llmpack.runtime.engine.config import EngineConfig
from llmpack.runtime.engine.llama_batch import BatchPlan, LlamaBatch
from llmpack.runtime.hardware.backends import load_backends
from llmpack.runtime.hardware.bindings import bindings, lc   # bindings: the package's own libllama handle
from llmpack.runtime.hardware.rpc_client import any_registered

_backend_ready = False
# llama_flash_attn_type. Neither setting makes the CPU kernels batch-invariant (a sequence's
# logits move a little with its batch-mates either way; see docs/BENCHMARKS.md), and "on"
# decodes up to ~20 % faster on the CPU at 32 sequences, so "auto" - on wherever supported,
# as in llama-server, vLLM and Ollama - is the default.
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
SPARE_SEQ_IDS = 8    # llama.cpp sequence ids beyond --parallel, for parked prefixes (module docstring)
DRAFT_ROWS = 16      # logits rows beyond one per sequence that a step may ask for (speculative drafts)


class ModelLoadError(LlmpackError):
    pass


class DecodeError(RuntimeError):
    """llama_decode refused a batch; status 1 means llama.cpp found no KV cells for it."""

    def __init__(self, status: int) -> None:
        super().__init__(f"llama_decode failed with status {status}")
        self.status = status


def offloaded_layers(n_gpu_layers: int, n_layer: int, n_layer_all: int, n_devices: int) -> int:
    """How many of the model's `n_layer` repeating layers llama.cpp puts on a GPU, by its own rule
    (llama_model_base::load_tensors): it counts the output layer as layer `n_layer_all` and fills
    the GPU from the top down, so `n_gpu_layers` = N places layers n_layer_all + 1 - N ..
    n_layer_all there (-1: all of them), and none at all when the model got no device. Worked out
    from what we asked for and what the loaded model says, not from llama.cpp's log wording."""
    if n_devices == 0 or n_gpu_layers == 0:
        return 0
    wanted = n_gpu_layers if n_gpu_layers > 0 else n_layer_all + 1
    first_on_gpu = max(n_layer_all + 1 - wanted, 0)
    return max(0, n_layer - first_on_gpu)


def _model_int(model, *names: str) -> int | None:
    """An int32 getter of llama.cpp that llama-cpp-python does not bind, by any of its exported
    names; None when this build has none of them."""
    for name in names:
        fn = getattr(bindings._lib, name, None)
        if fn is not None:
            fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int32
            return int(fn(model))
    return None


def model_devices(model) -> int | None:
    """How many devices llama.cpp gave a loaded model (llama_model_n_devices, exported by the
    vendored llama.cpp from its staging header llama-ext.h, with C++ linkage: hence the mangled
    names for GCC/Clang and MSVC); None when this build lacks it."""
    return _model_int(model, "llama_model_n_devices", "_Z21llama_model_n_devicesPK11llama_model",
                      "?llama_model_n_devices@@YAHPEBUllama_model@@@Z")


class CFile:
    """A C stdio ``FILE *`` open for reading at `offset`, for llama_model_load_from_file_ptr, which
    reads a GGUF from a stream's current position (and mmaps it in place when the GGUF's data
    section is aligned, as a built program's 64 KiB-aligned model is). It comes from the C runtime
    llama.cpp itself was linked with, since a FILE belongs to one C runtime: glibc (or the
    platform's libc) on POSIX, msvcrt.dll on Windows (the mingw-built DLLs import it)."""

    def __init__(self, path: str, offset: int) -> None:
        if os.name == "nt":
            crt = ctypes.CDLL("msvcrt", use_errno=True)
            crt._wfopen.argtypes, crt._wfopen.restype = [ctypes.c_wchar_p, ctypes.c_wchar_p], ctypes.c_void_p
            crt._fseeki64.argtypes, crt._fseeki64.restype = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int], ctypes.c_int
            fp, seek = crt._wfopen(str(path), "rb"), crt._fseeki64
        else:
            crt = ctypes.CDLL(None, use_errno=True)
            crt.fopen.argtypes, crt.fopen.restype = [ctypes.c_char_p, ctypes.c_char_p], ctypes.c_void_p
            crt.fseeko.argtypes, crt.fseeko.restype = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int], ctypes.c_int
            fp, seek = crt.fopen(os.fsencode(path), b"rb"), crt.fseeko
        crt.fclose.argtypes, crt.fclose.restype = [ctypes.c_void_p], ctypes.c_int
        if not fp:
            raise ModelLoadError(f"cannot open {path}: {os.strerror(ctypes.get_errno())}")
        self._crt, self.fp = crt, fp
        if seek(fp, offset, os.SEEK_SET) != 0:
            self.close()
            raise ModelLoadError(f"cannot read {path} at byte {offset}: {os.strerror(ctypes.get_errno())}")

    def close(self) -> None:
        if self.fp:
            self._crt.fclose(self.fp)
            self.fp = None


def _route_llama_log(verbose: bool) -> None:
    """llama.cpp logs every load step to stderr; the product prints its own progress."""

    @lc.llama_log_callback
    def _route(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:  # pragma: no cover
        if verbose or (level == 4 and os.environ.get("LLMPACK_DEBUG")):  # GGML_LOG_LEVEL_ERROR
            os.write(2, text)

    _route_llama_log.callback = _route  # type: ignore[attr-defined]  # keep it alive
    lc.llama_log_set(_route, ctypes.c_void_p(0))


def model_meta(model, key: str) -> str | None:
    """A GGUF metadata value of a loaded llama_model, as text; None when it has no such key."""
    buf = ctypes.create_string_buffer(4096)
    n = lc.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else None


class ModelRunner:
    """Loads cfg.model_path with `n_gpu_layers` on `gpu_device` (the offload plan's; 0 = llama.cpp's
    default devices). llama.cpp's own limits found at load time are attributes here (`n_ctx`,
    `n_batch`, `n_seq_max`), never written back into the config."""

    def __init__(self, cfg: EngineConfig, n_gpu_layers: int = 0, gpu_device: int | list[int] = 0,
                 progress: Callable[[float], bool | None] | None = None,
                 tensor_split: list[float] | None = None) -> None:
        """`gpu_device` may be several devices (a GPU and RPC workers' devices, `--rpc`), in order,
        with `tensor_split` their shares of the offloaded layers (hardware/placement.OffloadPlan)."""
        global _backend_ready
        if not _backend_ready:
            load_backends(gpu=n_gpu_layers != 0)   # GGML_BACKEND_DL: CPU variant (+ GPU backends), before any model
            _route_llama_log(cfg.verbose)
            lc.llama_backend_init()
            _backend_ready = True
        self.cfg = cfg
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        handles = [gpu_device] if isinstance(gpu_device, int) else list(gpu_device)
        if any(handles) and n_gpu_layers != 0:
            self._devices = (ctypes.c_void_p * (len(handles) + 1))(*handles, None)   # NULL-terminated; kept alive
            mparams.devices = ctypes.addressof(self._devices)
        elif any_registered():
            # ggml's registry is process-wide: a model that offloads nothing must not open backends
            # on RPC workers an earlier model of this process registered (a gone one ends the process)
            self._devices = (ctypes.c_void_p * 1)(None)
            mparams.devices = ctypes.addressof(self._devices)
        if tensor_split and n_gpu_layers != 0:
            self._split = (ctypes.c_float * lc.llama_max_devices())(*tensor_split)   # kept alive
            mparams.tensor_split = self._split
        if progress is not None:
            def _on_progress(frac: float, _user: ctypes.c_void_p) -> bool:
                return progress(float(frac)) is not False   # False: llama.cpp abandons the load

            self._progress_cb = lc.llama_progress_callback(_on_progress)
            mparams.progress_callback = self._progress_cb
        self._file: CFile | None = None   # the open built program, while its model is in use
        if cfg.model_offset:
            self._file = CFile(cfg.model_path, cfg.model_offset)
            self.model = lc.llama_model_load_from_file_ptr(self._file.fp, mparams)
        else:
            self.model = lc.llama_model_load_from_file(str(cfg.model_path).encode(), mparams)
        if not self.model:
            if self._file is not None:
                self._file.close()
            raise ModelLoadError(f"llama.cpp could not load {cfg.model_path}; run `llmpack inspect` on it for details")
        self.n_layer = lc.llama_model_n_layer(self.model)
        nextn = _model_int(self.model, "llama_model_n_layer_nextn") or 0   # MTP heads sit above the trunk
        self.n_layer_all = self.n_layer + nextn
        devices = model_devices(self.model)
        # without llama_model_n_devices, trust the plan: it asks for layers only when it found a GPU
        self.gpu_layers = offloaded_layers(n_gpu_layers, self.n_layer, self.n_layer + nextn,
                                           1 if devices is None else devices)
        self.vocab = lc.llama_model_get_vocab(self.model)
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train = lc.llama_model_n_ctx_train(self.model)
        self.n_embd = lc.llama_model_n_embd(self.model)   # the width of an image's rows (multimodal.py)

        cparams = lc.llama_context_default_params()
        cparams.n_ctx = cfg.n_ctx
        cparams.n_batch = cfg.n_batch
        cparams.n_ubatch = min(cfg.n_ubatch, cfg.n_batch)
        self.n_seq_max = cfg.n_seq_max or min(lc.llama_max_parallel_sequences(), cfg.max_num_seqs + SPARE_SEQ_IDS)
        cparams.n_seq_max = self.n_seq_max
        # llama.cpp reserves at least n_seq_max rows, and asserts a step's rows fit n_outputs_max
        self.n_outputs_max = max(self.n_seq_max, cfg.max_num_seqs + DRAFT_ROWS)
        cparams.n_outputs_max = self.n_outputs_max
        threads = cfg.n_threads or max(1, os.cpu_count() or 1)
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = True
        cparams.swa_full = True
        cparams.no_perf = True
        cparams.flash_attn_type = FLASH_ATTN[cfg.flash_attn]
        self.ctx = lc.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            lc.llama_model_free(self.model)
            if self._file is not None:
                self._file.close()
            raise ModelLoadError(
                f"llama.cpp could not create a context of {cfg.n_ctx} tokens; try a smaller --ctx or fewer --gpu-layers")
        self.n_ctx = lc.llama_n_ctx(self.ctx)
        # llama.cpp caps n_batch at the n_ctx asked for (and pads n_ctx up past it): a step with
        # more tokens than its n_batch is a GGML_ASSERT that aborts the process, so the budget
        # every step is planned with (the engine's scheduler reads it here) is llama.cpp's own.
        self.n_batch = min(cfg.n_batch, lc.llama_n_batch(self.ctx))
        self.n_ubatch = min(self.n_batch, lc.llama_n_ubatch(self.ctx))
        self.mem = lc.llama_get_memory(self.ctx)
        self._batch = LlamaBatch(self.n_batch)
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self.vocab))
        self.bos_id = lc.llama_vocab_bos(self.vocab)

    # ---- text ---------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Thread-safe: request threads tokenize at the same time as each other and as the engine
        thread decodes (ctypes drops the GIL inside llama_tokenize), so every call gets its own
        buffer. A shared one let one request run on another user's tokens."""
        data = text.encode("utf-8", errors="replace")
        cap = len(data) + 8     # SPM/BPE never make more tokens than bytes (+ BOS/EOS)
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        return buf[:n]

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        """The raw bytes of one token's piece (may be part of a multi-byte character)."""
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(lc.llama_vocab_is_eog(self.vocab, token))

    def meta(self, key: str) -> str | None:
        return model_meta(self.model, key)

    # ---- decoding -----------------------------------------------------------------------
    def decode(self, plan: BatchPlan) -> None:
        """Run one llama_decode over the plan's (token, position, sequence) rows.

        Only rows with want_logits produce output; read them with logits(n_outputs).
        """
        n = len(plan.tokens)
        if not 0 < n <= self.n_batch:
            raise ValueError(f"a batch holds 1 to {self.n_batch} tokens, got {n}")
        b = self._batch
        b.fill(plan)
        rc = lc.llama_decode(self.ctx, b.struct)
        if rc != 0:
            raise DecodeError(rc)

    def logits(self, n_outputs: int) -> np.ndarray:
        """Every output row of the last decode, in batch order, as one float32 [n_outputs, n_vocab]
        view of llama.cpp's buffer (no copy; valid until the next decode). One ctypes call per
        step: each call releases the GIL, and taking it back from the request threads that the
        step's outputs woke can cost a switch interval (5 ms) per call."""
        ptr = lc.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_outputs, self.n_vocab))

    def logits_row(self, batch_index: int) -> np.ndarray:
        """The logits of one output token of the last decode, by its index in that batch, as a
        float32 view of llama.cpp's buffer (no copy; valid until the next decode)."""
        ptr = lc.llama_get_logits_ith(self.ctx, batch_index)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    # ---- KV memory (per llama.cpp sequence id) ------------------------------------------
    def seq_rm(self, seq_id: int, p0: int, p1: int) -> None:
        lc.llama_memory_seq_rm(self.mem, seq_id, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        lc.llama_memory_seq_cp(self.mem, src, dst, p0, p1)

    def seq_pos_max(self, seq_id: int) -> int:
        return lc.llama_memory_seq_pos_max(self.mem, seq_id)

    def clear(self) -> None:
        lc.llama_memory_clear(self.mem, True)

    def close(self) -> None:
        if getattr(self, "ctx", None):
            lc.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            lc.llama_model_free(self.model)
            self.model = None
        if getattr(self, "_file", None) is not None:
            self._file.close()

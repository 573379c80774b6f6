"""ggml's backends, loaded at run time from the folder that holds them.

llmpack's llama.cpp is built with GGML_BACKEND_DL: libggml.so holds no compute code, and every
backend is a library beside it - one CPU library per x86-64 level (`libggml-cpu-sse42.so` ...
`-zen4.so`) plus `libggml-vulkan.so` (and `libggml-cuda.so` in the CUDA flavour).
llama-cpp-python never loads them (abetlen/llama-cpp-python#2069), and ggml's own search looks
beside the executable, which inside a built file is not where PyInstaller unpacked them.
So `load_backends()` loads them by path, once, before any model, and remembers what happened:

* CPU: each variant reports a score for this CPU (0 = cannot run here); the best one is loaded,
  as ggml's `ggml_backend_load_best` would, except that a variant using AMX is only taken when
  a child process proved the CPU really executes AMX (see amx_probe), and
  `LLMPACK_CPU_VARIANT=haswell` (any variant's name) overrides the choice.
* GPU: every other backend library is loaded; one that cannot load (no Vulkan loader, no driver)
  or finds no device leaves one line in `notes`, and the model runs on the CPU.
* RPC (`libggml-rpc`): loaded too, but it is no GPU: it lists devices only once `--rpc` adds
  another machine's (runtime/hardware/rpc.py), so having none is normal and says nothing.
* A llama.cpp built without GGML_BACKEND_DL (backends compiled in) needs nothing loaded.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from llmpack.errors import LlmpackError
from llmpack.runtime.hardware import dll_search

AMX_VARIANTS = frozenset({"sapphirerapids"})    # ggml's x86 variants built with AMX_TILE/AMX_INT8
_GPU_TYPES = {1: "GPU", 2: "IGPU"}              # enum ggml_backend_dev_type
_PREFIX, _SUFFIX = ("", ".dll") if os.name == "nt" else ("lib", ".dylib" if sys.platform == "darwin" else ".so")
_BACKEND_NAMES = {"vulkan": "Vulkan", "cuda": "CUDA", "hip": "ROCm", "metal": "Metal", "sycl": "SYCL",
                  "opencl": "OpenCL", "rpc": "RPC", "blas": "BLAS"}


class BackendError(LlmpackError):
    pass


@dataclass(slots=True)
class Device:
    """A GPU ggml can offload to."""
    id: str                 # ggml's device name, e.g. "Vulkan0"
    name: str               # its description, e.g. "NVIDIA GeForce RTX 3060"
    memory_total: int
    memory_free: int
    integrated: bool = False
    handle: int = 0         # ggml_backend_dev_t, for llama_model_params.devices

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "memory_total": self.memory_total, "memory_free": self.memory_free}


@dataclass(slots=True)
class Backends:
    lib_dir: str
    dynamic: bool                    # backends are separate libraries (GGML_BACKEND_DL build)
    cpu_variant: str | None          # "haswell", "sse42", ...; None when compiled in
    gpu_backends: list[str] = field(default_factory=list)   # loaded, e.g. ["Vulkan"]
    notes: list[str] = field(default_factory=list)          # one line per GPU backend not usable
    rpc_note: str | None = None      # why llama.cpp's RPC backend (--rpc, rpc-worker) cannot be used; None: it can
    cpu_skipped: list[str] = field(default_factory=list)    # better-scoring CPU variants passed over, and why


def lib_dir() -> Path:
    """The folder with libggml and its backends: llama_cpp/lib of the installed package, which in
    a built file is under PyInstaller's bundle folder (sys._MEIPASS)."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle and (Path(bundle) / "llama_cpp" / "lib").is_dir():
        return Path(bundle) / "llama_cpp" / "lib"
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise BackendError("llama-cpp-python is not installed; run ./dev setup")
    return Path(list(spec.submodule_search_locations)[0]) / "lib"


def _ggml(extra: dict | None = None) -> SimpleNamespace:
    """ggml's backend API (plus `extra`: name -> (argtypes, restype)) as used by the libllama that llama_cpp loaded, typed.

    Linux: looked up through libllama's own handle, not llama_cpp._ggml.libggml: the wheel holds
    copies (libggml.so, libggml.so.0) rather than symlinks, and opening the other copy by path
    gives a second ggml with its own, empty backend registry ("no backends are loaded"); dlsym
    through libllama resolves in libllama's own dependencies. Windows: GetProcAddress does not
    search a DLL's dependencies, and the API is split between ggml.dll (the registry) and
    ggml-base.dll (devices), both already loaded by llama.dll, so each function is taken from
    whichever of the two exports it."""
    from llmpack.runtime.hardware.bindings import bindings as llc   # lazy: loads libllama; `llmpack inspect` and the builder import this module without it

    if os.name == "nt":
        libs = [dll_search.load_own(lib_dir() / name) for name in ("ggml.dll", "ggml-base.dll")]
    else:
        libs = [llc._lib]
    sigs = {"ggml_backend_load": ([ctypes.c_char_p], ctypes.c_void_p),
            "ggml_backend_reg_count": ([], ctypes.c_size_t),
            "ggml_backend_reg_get": ([ctypes.c_size_t], ctypes.c_void_p),
            "ggml_backend_reg_name": ([ctypes.c_void_p], ctypes.c_char_p),
            "ggml_backend_reg_dev_count": ([ctypes.c_void_p], ctypes.c_size_t),
            "ggml_backend_dev_count": ([], ctypes.c_size_t),
            "ggml_backend_dev_get": ([ctypes.c_size_t], ctypes.c_void_p),
            "ggml_backend_dev_type": ([ctypes.c_void_p], ctypes.c_int),
            "ggml_backend_dev_name": ([ctypes.c_void_p], ctypes.c_char_p),
            "ggml_backend_dev_description": ([ctypes.c_void_p], ctypes.c_char_p),
            "ggml_backend_dev_memory": ([ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                         ctypes.POINTER(ctypes.c_size_t)], None),
            "ggml_backend_dev_backend_reg": ([ctypes.c_void_p], ctypes.c_void_p),
            **(extra or {})}
    api = SimpleNamespace()
    for name, (args, res) in sigs.items():
        fn = next((getattr(lib, name) for lib in libs if hasattr(lib, name)), None)
        if fn is None:
            raise BackendError(f"llama.cpp's ggml library has no {name}; reinstall llmpack's llama-cpp-python build")
        fn.argtypes, fn.restype = args, res
        setattr(api, name, fn)
    return api


def _variant(path: Path) -> str:
    return path.name[len(_PREFIX) + len("ggml-cpu-"):].split(_SUFFIX)[0]


def _dlopen_error(path: Path) -> str | None:
    """Why the dynamic loader refuses this library (a missing dependency, a bad file), or None.
    Windows: its imports are looked for in its folder, System32 and ours, never the program's."""
    try:
        dll_search.load_own(path)
    except OSError as exc:
        return str(exc)
    return None


def _score(path: Path) -> int:
    """The variant's own verdict on this CPU (ggml_backend_score: 0 = cannot run here)."""
    try:
        lib = dll_search.load_own(path)
    except OSError:
        return 0
    try:
        score = lib.ggml_backend_score
        score.restype = ctypes.c_int
        return int(score())
    except AttributeError:
        return 0
    finally:
        if os.name != "nt":   # as ggml does: only the chosen variant stays loaded
            import _ctypes   # lazy: dlclose exists on POSIX only

            _ctypes.dlclose(lib._handle)


def _choose_cpu(paths: list[Path], forced: str | None) -> tuple[Path, list[str]]:
    """The CPU variant to load, and the better-scoring ones passed over (with why)."""
    by_name = {_variant(p): p for p in paths}
    if forced:
        if forced not in by_name:
            raise BackendError(f"LLMPACK_CPU_VARIANT={forced}: no such CPU backend; choose one of "
                               f"{', '.join(sorted(by_name))}")
        return by_name[forced], [f"{forced} chosen by LLMPACK_CPU_VARIANT"]
    ranked = sorted(((_score(p), name) for name, p in by_name.items()), reverse=True)
    skipped: list[str] = []
    for score, name in ranked:
        if score <= 0:
            break
        if name in AMX_VARIANTS:
            from llmpack.runtime.hardware.amx_probe import amx_works   # lazy: only CPUs with AMX run the probe

            if not amx_works():
                skipped.append(f"{name}: the CPU advertises AMX but a test child could not run it")
                continue
        return by_name[name], skipped
    names = ", ".join(sorted(by_name)) or "none"
    raise BackendError(f"none of the CPU backends in {paths[0].parent} runs on this CPU (found: {names}); "
                       "this build needs an x86-64 CPU")


def _explain(backend: str, error: str) -> str:
    """One line a user can act on, for a GPU backend library that would not load."""
    first = error.splitlines()[0] if error else "unknown error"
    if "libvulkan.so" in first or "vulkan-1.dll" in first:
        why = "not found" if "cannot open shared object" in first else first.rsplit(": ", 1)[-1]
        return f"no usable Vulkan loader (libvulkan.so.1: {why}); install your GPU driver's Vulkan support"
    missing = re.search(r"(lib[\w.+-]+\.so[\d.]*): cannot open shared object file", first)
    if missing:
        return f"{backend} needs {missing.group(1)}, which is not installed"
    return f"{backend} backend could not be loaded: {first}"


def _load_rpc(g: SimpleNamespace, path: Path, found: Backends) -> None:
    """llama.cpp's RPC backend lists no device until `--rpc` adds a worker (runtime/hardware/rpc.py),
    so it is no GPU backend and, unused, says nothing: only a failure to load is remembered, for
    the one who asks for --rpc or rpc-worker."""
    error = _dlopen_error(path)
    if error is not None:
        found.rpc_note = f"the RPC backend could not be loaded: {error.splitlines()[0]}"
    elif not g.ggml_backend_load(str(path).encode()):
        found.rpc_note = "the RPC backend could not be initialised"


def _load_gpu(g: SimpleNamespace, path: Path, found: Backends) -> None:
    key = path.name[len(_PREFIX) + len("ggml-"):].split(_SUFFIX)[0]
    backend = _BACKEND_NAMES.get(key, key)
    if backend == "RPC":
        return _load_rpc(g, path, found)
    dll_search.preload_system_library(backend)   # Windows: the driver's DLL from System32, by its path
    error = _dlopen_error(path)
    if error is not None:
        found.notes.append(_explain(backend, error))
        return
    reg = g.ggml_backend_load(str(path).encode())
    if not reg:
        found.notes.append(f"{backend} found no working driver (its instance could not be created)")
        return
    found.gpu_backends.append(backend)
    if g.ggml_backend_reg_dev_count(reg) == 0:
        found.notes.append(_no_gpu_note(backend))


def _no_gpu_note(backend: str) -> str:
    """The line for a backend that loaded but lists no device, with the likely reason."""
    if backend == "Vulkan":
        return "Vulkan found no GPU (software renderers such as lavapipe are only used when " \
               "GGML_VK_VISIBLE_DEVICES names them)"
    if backend == "CUDA":   # cudart opens the driver's library itself, so the backend loads without it
        driver = "nvcuda.dll" if os.name == "nt" else "libcuda.so.1"
        if _dlopen_error(Path(dll_search.system_dll(driver))) is not None:
            return f"CUDA found no GPU: no NVIDIA driver ({driver} is not installed)"
        return "CUDA found no GPU: the NVIDIA driver lists none, or is older than the 580 series CUDA 13 needs"
    return f"{backend} found no GPU"


_loaded: Backends | None = None
_gpu_loaded = False           # the GPU (and RPC) backend libraries are loaded too


def _quiet_ggml_log() -> None:
    """ggml logs each library it tries and each device it probes to stderr; the product says
    what matters in one line instead (LLMPACK_DEBUG=1 shows ggml's errors)."""
    from llmpack.runtime.hardware.bindings import lc   # lazy: loads libllama (see _ggml)

    @lc.llama_log_callback
    def _quiet(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:  # pragma: no cover
        if level == 4 and os.environ.get("LLMPACK_DEBUG"):   # GGML_LOG_LEVEL_ERROR
            os.write(2, text)

    _quiet_ggml_log.callback = _quiet  # type: ignore[attr-defined]  # keep it alive
    lc.llama_log_set(_quiet, ctypes.c_void_p(0))


def load_backends(quiet: bool = True, gpu: bool = True) -> Backends:
    """Load the CPU variant and (with `gpu`) the GPU backends once per process; later calls return
    the same. quiet=False leaves llama.cpp's logging as it is (for code that wants its load log).
    gpu=False is for a model that stays on the CPU (--gpu-layers 0, --device cpu): probing Vulkan
    loads every installed driver, and Mesa's software and Radeon drivers bring LLVM with them
    (about 55 MB resident, for nothing); a later call with gpu=True loads the GPU backends then."""
    global _loaded, _gpu_loaded
    dll_search.restrict()   # Windows: no DLL from the program's folder (a no-op once stub_entry did it)
    if _loaded is None:
        _loaded = _load_cpu(quiet)
    if gpu and not _gpu_loaded and _loaded.dynamic:
        g, folder = _ggml(), Path(_loaded.lib_dir)
        skip = {f"{_PREFIX}ggml{_SUFFIX}", f"{_PREFIX}ggml-base{_SUFFIX}"}
        for path in sorted(folder.glob(f"{_PREFIX}ggml-*{_SUFFIX}")):
            if path.name not in skip and not path.name.startswith(f"{_PREFIX}ggml-cpu"):
                _load_gpu(g, path, _loaded)
    _gpu_loaded = _gpu_loaded or gpu
    return _loaded


def gpu_probed() -> bool:
    """Whether load_backends has loaded (and so probed) the GPU backends in this process."""
    return _gpu_loaded


def _load_cpu(quiet: bool) -> Backends:
    folder = lib_dir()
    g = _ggml()
    if quiet:
        _quiet_ggml_log()
    cpu_libs = sorted(folder.glob(f"{_PREFIX}ggml-cpu-*{_SUFFIX}"))
    if not cpu_libs:
        if g.ggml_backend_reg_count() == 0:
            raise BackendError(f"no llama.cpp CPU backend in {folder} (expected {_PREFIX}ggml-cpu-*{_SUFFIX}); "
                               "reinstall llama-cpp-python with ./dev setup")
        return Backends(str(folder), dynamic=False, cpu_variant=None)
    chosen, skipped = _choose_cpu(cpu_libs, os.environ.get("LLMPACK_CPU_VARIANT") or None)
    if not g.ggml_backend_load(str(chosen).encode()):
        raise BackendError(f"the CPU backend {chosen.name} could not be loaded: "
                           f"{_dlopen_error(chosen) or 'its initialisation failed'}")
    return Backends(str(folder), dynamic=True, cpu_variant=_variant(chosen), cpu_skipped=skipped)


def gpu_devices() -> list[Device]:
    """GPU devices ggml can offload to now (after load_backends), with their free memory."""
    load_backends()
    g = _ggml()
    devices = []
    for i in range(g.ggml_backend_dev_count()):
        dev = g.ggml_backend_dev_get(i)
        kind = g.ggml_backend_dev_type(dev)
        if kind not in _GPU_TYPES or _reg_name(g, dev).startswith("RPC"):   # another machine's (--rpc): hardware/rpc.py
            continue
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        g.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        devices.append(Device(g.ggml_backend_dev_name(dev).decode(), g.ggml_backend_dev_description(dev).decode(),
                              total.value, free.value, _GPU_TYPES[kind] == "IGPU", dev))
    return devices


def _reg_name(g: SimpleNamespace, dev: int) -> str:
    reg = g.ggml_backend_dev_backend_reg(dev)
    return (g.ggml_backend_reg_name(reg) or b"").decode() if reg else ""


def pick_device(devices: list[Device], wanted: str | None) -> Device | None:
    """`--device`: a device id ("Vulkan1"), its index among GPUs ("1"), "cpu" for none, or
    auto (None/"auto"): a discrete GPU before an integrated one, then the most free memory.
    In the CUDA flavour one NVIDIA card is listed twice, as CUDA0 and as Vulkan0; auto leaves
    out the Vulkan entry of a card that the vendor's own backend (CUDA, ROCm) also lists, so
    NVIDIA's own kernels and cuBLAS are used, whichever entry reports more free memory."""
    if wanted is None or wanted.lower() == "auto":
        vendor = {d.name for d in devices if not d.id.startswith("Vulkan")}
        candidates = [d for d in devices if not (d.id.startswith("Vulkan") and d.name in vendor)]
        ranked = sorted(candidates, key=lambda d: (d.integrated, -d.memory_free))
        return ranked[0] if ranked else None
    if wanted.lower() == "cpu":
        return None
    for i, dev in enumerate(devices):
        if wanted.lower() in (dev.id.lower(), str(i)):
            return dev
    shown = ", ".join(f"{d.id} ({d.name})" for d in devices) or "none"
    raise BackendError(f"--device {wanted}: no such GPU; devices found: {shown}. Use --device cpu for the CPU")

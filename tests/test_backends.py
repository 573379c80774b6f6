"""Choosing where the model runs: which GPU `--device` picks, the one line shown when a GPU
backend cannot load, /health's `backend` object and the start-up line. The real loading of
backends on emulated CPUs and lavapipe is tests/test_portability.py's."""
from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest
from apps import App

from llmpack.runtime.hardware import backends
from llmpack.runtime.hardware.backends import BackendError, Device, _explain, _no_gpu_note, load_backends, pick_device
from llmpack.runtime.hardware import placement
from llmpack.runtime.hardware.placement import OffloadPlan, backend_report, no_gpu_reason, startup_line

GiB = 1024 ** 3
IGPU = Device("Vulkan0", "Intel(R) UHD Graphics 770", 16 * GiB, 15 * GiB, integrated=True)
SMALL = Device("Vulkan1", "NVIDIA GeForce GTX 1650", 4 * GiB, 3 * GiB)
BIG = Device("Vulkan2", "AMD Radeon RX 7900 XTX", 24 * GiB, 20 * GiB)
HEALTH_KEYS = {"cpu_variant", "devices", "gpu_device", "gpu_layers", "n_layers", "note", "summary", "remote"}


def test_auto_prefers_a_discrete_gpu_then_the_most_free_memory():
    assert pick_device([IGPU, SMALL, BIG], None) is BIG
    assert pick_device([IGPU, SMALL], "auto") is SMALL
    assert pick_device([IGPU], None) is IGPU
    assert pick_device([], None) is None


def test_auto_prefers_cuda_over_vulkan_for_the_same_card():
    # The CUDA flavour loads both backends; each reports the card, with slightly different free memory.
    as_vulkan = Device("Vulkan0", "NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB)
    as_cuda = Device("CUDA0", "NVIDIA GeForce RTX 4090", 24 * GiB, 22 * GiB)
    assert pick_device([as_vulkan, as_cuda], None) is as_cuda
    assert pick_device([IGPU, as_cuda], None) is as_cuda
    assert pick_device([as_vulkan, as_cuda], "vulkan0") is as_vulkan
    # ... but a different, roomier card that only Vulkan drives still wins on free memory
    twin = Device("Vulkan3", "NVIDIA GeForce RTX 3050", 8 * GiB, 7 * GiB)
    small_cuda = Device("CUDA0", "NVIDIA GeForce RTX 3050", 8 * GiB, 7 * GiB)
    assert pick_device([BIG, twin, small_cuda], None) is BIG
    assert pick_device([SMALL, twin, small_cuda], None) is small_cuda


def test_device_by_id_or_index_and_cpu_for_none():
    assert pick_device([IGPU, SMALL, BIG], "vulkan1") is SMALL
    assert pick_device([IGPU, SMALL, BIG], "0") is IGPU
    assert pick_device([IGPU, SMALL, BIG], "cpu") is None


def test_an_unknown_device_lists_the_ones_there_are():
    with pytest.raises(BackendError, match=r"--device Vulkan7: no such GPU; devices found: Vulkan0 \(Intel"):
        pick_device([IGPU, SMALL], "Vulkan7")


def test_a_cuda_backend_with_no_device_says_whether_the_driver_is_there(monkeypatch):
    # The CUDA flavour's backend loads on any PC (cudart opens libcuda itself), then lists no device.
    monkeypatch.setattr(backends, "_dlopen_error", lambda path: f"{path}: cannot open shared object file")
    assert _no_gpu_note("CUDA") == "CUDA found no GPU: no NVIDIA driver (libcuda.so.1 is not installed)"
    monkeypatch.setattr(backends, "_dlopen_error", lambda path: None)
    assert _no_gpu_note("CUDA") == ("CUDA found no GPU: the NVIDIA driver lists none, "
                                    "or is older than the 580 series CUDA 13 needs")
    assert "GGML_VK_VISIBLE_DEVICES names them" in _no_gpu_note("Vulkan")


def test_the_reason_no_gpu_is_used_names_every_gpu_backend(monkeypatch):
    # CUDA flavour on a PC with neither an NVIDIA driver nor a Vulkan loader: both lines, in load order.
    notes = ["CUDA found no GPU: no NVIDIA driver (libcuda.so.1 is not installed)",
             "no usable Vulkan loader (libvulkan.so.1: not found); install your GPU driver's Vulkan support"]
    monkeypatch.setattr(placement, "load_backends",
                        lambda **_: backends.Backends("/lib", True, "haswell", ["CUDA"], notes))
    assert no_gpu_reason() == "; ".join(notes)


@pytest.mark.parametrize("error, line", [
    ("libvulkan.so.1: cannot open shared object file: No such file or directory",
     "no usable Vulkan loader (libvulkan.so.1: not found); install your GPU driver's Vulkan support"),
    ("/lib/x86_64-linux-gnu/libvulkan.so.1: file too short",
     "no usable Vulkan loader (libvulkan.so.1: file too short); install your GPU driver's Vulkan support"),
    ("libcublas.so.12: cannot open shared object file: No such file or directory",
     "CUDA needs libcublas.so.12, which is not installed"),
    ("/opt/app/libggml-vulkan.so: invalid ELF header", "Vulkan backend could not be loaded: "
                                                      "/opt/app/libggml-vulkan.so: invalid ELF header"),
])
def test_a_backend_that_cannot_load_is_one_line_saying_why(error, line):
    backend = "CUDA" if "cublas" in error else "Vulkan"
    assert _explain(backend, error) == line


def test_health_backend_object_has_exactly_the_agreed_keys_on_the_cpu():
    runner = SimpleNamespace(gpu_layers=0, n_layer=18)
    report = backend_report(OffloadPlan(0, None, "--gpu-layers 0 keeps the model on the CPU",
                                        "as --gpu-layers 0 asks"), runner)
    assert set(report) == HEALTH_KEYS
    assert (report["gpu_device"], report["gpu_layers"], report["n_layers"]) == (None, 0, 18)
    assert report["note"] == "--gpu-layers 0 keeps the model on the CPU"
    assert report["cpu_variant"] == load_backends().cpu_variant
    assert startup_line(report) == "llmpack: Running on your processor (as --gpu-layers 0 asks)."
    assert startup_line(report, verbose=True).splitlines()[1] == (
        f"llmpack: CPU backend {report['cpu_variant']}; GPU not used: --gpu-layers 0 keeps the model on the CPU")


def test_no_gpu_is_said_in_plain_words_with_the_technical_reason_behind_verbose(monkeypatch):
    # the CPU-only VM's case: Vulkan loads but lists only software renderers
    vulkan = _no_gpu_note("Vulkan")
    monkeypatch.setattr(placement, "load_backends",
                        lambda **_: backends.Backends("/lib", True, "haswell", ["Vulkan"], [vulkan]))
    monkeypatch.setattr(placement, "gpu_devices", lambda: [])
    plan = placement.plan_offload("auto", "model.gguf", 4096)
    report = backend_report(plan, SimpleNamespace(gpu_layers=0, n_layer=24))
    plain = "Running on your processor (no graphics card found that llmpack can use)."
    assert report["summary"] == plain and report["note"] == vulkan   # /health has both
    line = startup_line(report)
    assert line == f"llmpack: {plain} Start with --verbose for the technical reason."
    assert "lavapipe" not in line and "GGML_VK" not in line
    verbose = startup_line(report, verbose=True).splitlines()
    assert verbose == [f"llmpack: {plain}", f"llmpack: CPU backend haswell; GPU not used: {vulkan}"]


def test_startup_line_names_the_gpu_and_the_layers_on_it():
    report = {"cpu_variant": "zen4", "devices": [SMALL.to_dict(), BIG.to_dict()], "gpu_device": "Vulkan2",
              "gpu_layers": 18, "n_layers": 18, "note": None}
    report["summary"] = backend_report(OffloadPlan(-1, BIG), SimpleNamespace(gpu_layers=18, n_layer=18))["summary"]
    assert startup_line(report) == "llmpack: Running on your graphics card (AMD Radeon RX 7900 XTX)."
    assert startup_line(report, verbose=True).splitlines()[1] == (
        "llmpack: GPU Vulkan2 (AMD Radeon RX 7900 XTX): 18/18 layers; CPU backend zen4")
    partial = backend_report(OffloadPlan(10, BIG), SimpleNamespace(gpu_layers=10, n_layer=18))["summary"]
    assert partial == ("Running on your graphics card (AMD Radeon RX 7900 XTX), 10 of 18 layers; "
                       "the rest on your processor.")


@pytest.mark.parametrize("verbose", [False, True])
def test_the_console_says_where_the_model_runs_in_words_and_verbose_says_why(tiny_model, tmp_path, verbose):
    """`llmpack run` for real: the start-up line is /health's summary; the technical note (on a
    machine without a usable GPU, the Vulkan line about lavapipe) only with --verbose."""
    flags = ["--verbose"] if verbose else []
    app = App([sys.executable, "-m", "llmpack", "run", str(tiny_model), "--no-browser", "--port", "0", *flags],
              {**os.environ, "LLMPACK_DATA_DIR": str(tmp_path)}, tmp_path)
    try:
        app.wait_listening()
        backend = app.wait_healthy()["backend"]
    finally:
        app.stop()
    lines = app.stdout.splitlines()
    assert backend["summary"].startswith("Running on your ")
    assert sum(ln.startswith(f"llmpack: {backend['summary']}") for ln in lines) == 1, app.stdout
    if backend["gpu_layers"] == 0 and backend["note"]:
        assert (backend["note"] in app.stdout) is verbose, app.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_a_model_kept_on_the_cpu_loads_no_gpu_backend(tiny_model):
    """Probing Vulkan maps every installed driver (Mesa's lavapipe and RADV bring LLVM: ~55 MB of
    resident memory); `--gpu-layers 0` needs none of it, and /health then lists no devices."""
    import subprocess   # lazy: only this test starts a child

    code = ("import json; from types import SimpleNamespace as N; "
            "from llmpack.runtime.engine.config import EngineConfig; "
            "from llmpack.runtime.engine.model_runner import ModelRunner; "
            "from llmpack.runtime.hardware.backends import gpu_probed; "
            "from llmpack.runtime.hardware.placement import OffloadPlan, backend_report; "
            f"r = ModelRunner(EngineConfig({str(tiny_model)!r}, n_ctx=256, max_num_seqs=2)); "
            "maps = open('/proc/self/maps').read(); "
            "report = backend_report(OffloadPlan(0, None), N(gpu_layers=0, n_layer=r.n_layer)); "
            "print(json.dumps([gpu_probed(), 'ggml-vulkan' in maps or 'libvulkan' in maps, report['devices']]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[false, false, []]"

"""The runtime runs on the recipient's computer: ggml's CPU variant is chosen at launch (older
CPUs emulated with qemu-user), a Vulkan GPU is used when there is one (Mesa's lavapipe, a
software Vulkan device), and the model comes up on the CPU when there is no Vulkan loader.

These need qemu-user and mesa-vulkan-drivers (.ci/run installs them) and llama.cpp built with
GGML_BACKEND_DL (./dev setup). Without them a test is skipped on a developer machine and FAILS
under CI=true: CI must never pass by not running them.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from doc_files import make_pdf
from needs import LAVAPIPE_ICD, VULKAN_LOADER, skip_or_fail

from llmpack.runtime.hardware import backends

REPO = Path(__file__).resolve().parents[1]
CHILD = REPO / "tests" / "portable_child.py"
PROMPT = "the people of the world"
LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0", "VK_ICD_FILENAMES": str(LAVAPIPE_ICD)}


def need(ok: bool, why: str) -> None:
    if not ok:
        skip_or_fail(why)


@pytest.fixture(scope="module", autouse=True)
def dynamic_backends() -> None:
    need(backends.load_backends().dynamic,
         "llama.cpp was built without GGML_BACKEND_DL (LLMPACK_LLAMA_FLAVOUR=avx2?); run ./dev setup")


def run_child(model: Path, *, qemu_cpu: str | None = None, env: dict | None = None, timeout: float = 900) -> dict:
    cmd = [sys.executable, str(CHILD), str(model), PROMPT]
    child_env = {**os.environ, **(env or {})}
    if qemu_cpu:
        cmd = ["qemu-x86_64", "-cpu", qemu_cpu, *cmd]
        # Some hosts pin OpenBLAS's kernels to their own core (OPENBLAS_CORETYPE=Haswell here, for
        # OpenBLAS's sake); under an emulated older CPU that pin names the wrong core and numpy's
        # import dies with SIGILL before llmpack runs. The emulated machine names its own core.
        if "OPENBLAS_CORETYPE" in child_env:
            child_env["OPENBLAS_CORETYPE"] = qemu_cpu
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env)
    assert proc.returncode == 0, f"{' '.join(cmd[:4])} ... exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def native(tiny_model: Path) -> dict:
    return run_child(tiny_model)


# --------------------------------------------------------------------------- CPU variants
def test_natively_exactly_one_cpu_variant_is_loaded_and_it_scores_on_this_cpu(native):
    assert native["cpu_variant"], native
    assert native["mapped"] == [f"libggml-cpu-{native['cpu_variant']}.so"]
    assert backends._score(Path(backends.lib_dir()) / native["mapped"][0]) > 0
    assert len(native["token_ids"]) == 12


@pytest.mark.needs("qemu")
@pytest.mark.parametrize("qemu_cpu, variant", [("Nehalem", "sse42"), ("Haswell", "haswell")])
def test_an_emulated_older_cpu_gets_its_variant_and_the_same_greedy_tokens(tiny_model, native, qemu_cpu, variant):
    emulated = run_child(tiny_model, qemu_cpu=qemu_cpu)
    assert emulated["cpu_variant"] == variant
    assert emulated["mapped"] == [f"libggml-cpu-{variant}.so"]
    assert emulated["token_ids"] == native["token_ids"]


@pytest.mark.needs("qemu")
def test_pdfium_reads_a_pdf_on_a_cpu_without_avx(tmp_path):
    """PDF attachments are read by PDFium, a native library in pypdfium2's wheel: on a CPU without
    AVX (Nehalem) it reads the same text, so a PDF never crashes an older computer's reader."""
    pdf = tmp_path / "two-pages.pdf"
    pdf.write_bytes(make_pdf(["The harbour office opens at seven.", "Tickets are sold by the gate."]))
    code = ("import sys; from llmpack.runtime.documents import extract as D; "
            "print(D.extract('two-pages.pdf', open(sys.argv[1], 'rb').read()).text)")
    env = {**os.environ, **({"OPENBLAS_CORETYPE": "Nehalem"} if "OPENBLAS_CORETYPE" in os.environ else {})}
    proc = subprocess.run(["qemu-x86_64", "-cpu", "Nehalem", sys.executable, "-c", code, str(pdf)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "The harbour office opens at seven.\n\nTickets are sold by the gate."


def test_a_variant_can_be_forced_and_a_wrong_name_lists_the_choices(tiny_model, native):
    forced = run_child(tiny_model, env={"LLMPACK_CPU_VARIANT": "x64"})
    assert (forced["cpu_variant"], forced["mapped"]) == ("x64", ["libggml-cpu-x64.so"])
    proc = subprocess.run([sys.executable, str(CHILD), str(tiny_model), PROMPT], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "LLMPACK_CPU_VARIANT": "pentium"})
    assert proc.returncode != 0
    assert "LLMPACK_CPU_VARIANT=pentium: no such CPU backend; choose one of" in proc.stderr
    assert "haswell" in proc.stderr and "sse42" in proc.stderr


def test_the_amx_variant_is_only_taken_when_a_child_really_ran_amx(native):
    from llmpack.runtime.hardware.amx_probe import amx_works

    flags = Path("/proc/cpuinfo").read_text()
    works = amx_works()
    if "amx_int8" not in flags:
        assert not works
    assert (native["cpu_variant"] in backends.AMX_VARIANTS) <= works


@pytest.mark.needs("qemu")
def test_the_amx_probe_survives_a_cpu_that_faults_on_amx():
    proc = subprocess.run(["qemu-x86_64", "-cpu", "Haswell", sys.executable, "-c",
                           "from llmpack.runtime.hardware.amx_probe import amx_works; print(amx_works())"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"


# --------------------------------------------------------------------------- Vulkan
class Served:
    """`llmpack run MODEL --no-browser --port 0 FLAGS` (or a built file) as a child process."""

    def __init__(self, cmd: list[str], env: dict, prefix: list[str] = ()) -> None:
        self.proc = subprocess.Popen([*prefix, *cmd, "--no-browser", "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
        self.lines: list[str] = []
        self.url = ""
        deadline = time.monotonic() + 300
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("LLMPACK_LISTENING "):
                self.url = line.split()[1]
                break
        assert self.url, "".join(self.lines)
        while time.monotonic() < deadline:
            health = requests.get(self.url + "/health", timeout=10)
            if health.status_code != 503:
                break
            time.sleep(0.3)
        assert health.status_code == 200, health.text
        self.health = health.json()

    def complete(self, n: int = 8) -> dict:
        body = {"prompt": PROMPT, "max_tokens": n, "temperature": 0, "logprobs": 5, "ignore_eos": True}
        r = requests.post(self.url + "/v1/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["logprobs"]

    def close(self) -> str:
        self.proc.terminate()
        rest, _ = self.proc.communicate(timeout=60)
        return "".join(self.lines) + (rest or "")


def serve(cmd: list[str], extra_env: dict, prefix: list[str] = ()) -> Served:
    return Served(cmd, {**os.environ, **extra_env}, prefix)


def agree(gpu: dict, cpu: dict) -> None:
    """Greedy tokens equal, or where they first differ both runs' top-5 hold both choices (a near-tie
    that float rounding on another device may flip)."""
    for i, (g, c) in enumerate(zip(gpu["tokens"], cpu["tokens"])):
        if g != c:
            assert c in gpu["top_logprobs"][i] and g in cpu["top_logprobs"][i], (i, gpu, cpu)
            gap = abs(gpu["top_logprobs"][i][g] - gpu["top_logprobs"][i][c])
            assert gap < 0.05, f"token {i}: {g!r} vs {c!r} differ by {gap} in log-probability"
            return


@pytest.mark.needs("lavapipe")
def test_lavapipe_takes_every_layer_and_agrees_with_the_cpu(tiny_model):
    run = [sys.executable, "-m", "llmpack", "run", str(tiny_model)]
    gpu = serve([*run, "--gpu-layers", "all", "--verbose"], LAVAPIPE)
    try:
        backend, gpu_lp = gpu.health["backend"], gpu.complete()
    finally:
        gpu_out = gpu.close()
    assert backend["gpu_device"] == "Vulkan0" and backend["note"] is None, backend
    assert backend["gpu_layers"] == backend["n_layers"] == 2
    assert "llvmpipe" in backend["devices"][0]["name"] and backend["devices"][0]["memory_total"] > 0
    assert "llmpack: Running on your graphics card (llvmpipe" in gpu_out   # the line for anyone
    assert "llmpack: GPU Vulkan0 (llvmpipe" in gpu_out and ": 2/2 layers" in gpu_out   # --verbose
    cpu = serve([*run, "--gpu-layers", "0"], LAVAPIPE)
    try:
        assert cpu.health["backend"]["gpu_layers"] == 0
        cpu_lp = cpu.complete()
    finally:
        cpu.close()
    agree(gpu_lp, cpu_lp)


def test_without_a_vulkan_loader_the_model_comes_up_on_the_cpu_and_says_why(tiny_model):
    need(VULKAN_LOADER.exists() and shutil.which("unshare") is not None and os.geteuid() == 0,
         "needs root, unshare and libvulkan.so.1 to hide the loader")
    hide = ["unshare", "-m", "sh", "-c", f"mount --bind /dev/null {VULKAN_LOADER} && exec \"$@\"", "sh"]
    srv = serve([sys.executable, "-m", "llmpack", "run", str(tiny_model), "--gpu-layers", "all", "--verbose"], LAVAPIPE,
                hide)
    try:
        backend = srv.health["backend"]
        srv.complete(2)
    finally:
        out = srv.close()
    assert (backend["gpu_layers"], backend["gpu_device"], backend["devices"]) == (0, None, [])
    # the only line in the default build; the CUDA flavour puts its own line first
    assert "no usable Vulkan loader (libvulkan.so.1: " in backend["note"]
    assert backend["cpu_variant"]
    assert "llmpack: Running on your processor (no graphics card found that llmpack can use)." in out
    assert "no usable Vulkan loader" in out   # --verbose: the technical reason too
    assert "Traceback" not in out


# --------------------------------------------------------------------------- the built file
def _mapped_ggml(pid: int) -> set[str]:
    """Paths of ggml libraries mapped by `pid` or any of its descendants (a onefile app runs
    its Python in a child of the bootloader)."""
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/maps") as maps:
                found |= {line.split(None, 5)[-1].strip() for line in maps if "libggml" in line}
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


@pytest.mark.stub
@pytest.mark.needs("lavapipe")
def test_a_built_file_loads_the_backends_from_its_own_bundle_folder(tiny_model, tmp_path):
    app = tmp_path / "tiny-chat"
    subprocess.run([sys.executable, "-m", "llmpack", "build", str(tiny_model), "-o", str(app)], check=True,
                   capture_output=True, timeout=1800)
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LLMPACK_CACHE": str(tmp_path / "cache"), **LAVAPIPE}
    srv = Served([str(app), "--gpu-layers", "all"], env)
    try:
        backend = srv.health["backend"]
        mapped = _mapped_ggml(srv.proc.pid)
    finally:
        srv.close()
    assert backend["gpu_layers"] == backend["n_layers"] == 2 and backend["gpu_device"] == "Vulkan0", backend
    cpu_libs = [p for p in mapped if "libggml-cpu-" in p]
    assert len(cpu_libs) == 1 and cpu_libs[0].endswith(f"libggml-cpu-{backend['cpu_variant']}.so")
    bundle = Path(cpu_libs[0]).parent
    assert bundle.name == "lib" and bundle.parent.name == "llama_cpp" and bundle.parent.parent.name.startswith("_MEI")
    assert any(p.startswith(str(bundle)) and p.endswith("libggml-vulkan.so") for p in mapped), mapped
    assert not any(str(REPO) in p or "site-packages" in p for p in mapped), mapped

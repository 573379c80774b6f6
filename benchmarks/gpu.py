"""The GPU check, as one prepared run on a CUDA machine (issue 30): `./dev bench gpu`.

1. builds ggml-cuda for this machine's GPU architecture only (nvidia-smi's compute capability),
   plus llama-server, from the same vendored llama.cpp as the wheel (servers.py's source), on
   every core, as a GGML_BACKEND_DL module that the wheel's libggml loads beside its CPU one;
2. runs the engine with --gpu-layers all against the CPU's greedy text (same prompts, 64 tokens);
3. prints 1/16/64-stream tokens/s and TTFT of `llmpack run --gpu-layers all` against llama-server
   -ngl 99 built the same way, with `llmpack bench`'s client, one server idle while the other runs.

Everything has to fit in 9 minutes (a device lease is short): each phase checks the deadline
and the run stops, saying where, rather than overrun. CI never runs this.

    ./dev bench gpu [--dry-run] [--arch 90] [--src PATH/TO/llama.cpp] [--deadline-s 540]

--dry-run prints the plan and the commands without needing a GPU or a compiler. The machine
needs: an NVIDIA driver (nvidia-smi), nvcc (PATH, $CUDA_HOME/bin, or the nvidia-cuda-nvcc wheel
in this venv), cmake, and llama-cpp-python's source unpacked where servers.py keeps it (carry
it, with .venv, to a machine without network).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from servers import VERSION, start_llama_server, start_llmpack  # noqa: E402

from llmpack.paths import cache_dir  # noqa: E402

STREAMS = (1, 16, 64)
CTX = 16384


class OutOfTime(RuntimeError):
    pass


def default_src() -> Path:
    return cache_dir() / "peers" / f"llama.cpp-{VERSION}" / "src" / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"


def gpu_arch() -> str:
    out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap,name", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.splitlines()[0]
    cap, name = (x.strip() for x in out.split(",", 1))
    print(f"GPU: {name}, compute capability {cap}", flush=True)
    return cap.replace(".", "")


def find_nvcc() -> str | None:
    candidates = [shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")]
    venv_nvcc = Path(sys.prefix).glob("lib/python*/site-packages/nvidia/cu*/bin/nvcc")
    candidates += [str(p) for p in venv_nvcc]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def build_commands(src: Path, build: Path, arch: str, nvcc: str) -> list[list[str]]:
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = ["cmake", "-S", str(src), "-B", str(build), *generator, "-DCMAKE_BUILD_TYPE=Release",
                 "-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DBUILD_SHARED_LIBS=ON", "-DGGML_CUDA=ON",
                 "-DGGML_CUDA_NO_VMM=ON", f"-DCMAKE_CUDA_ARCHITECTURES={arch}-real",
                 f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                 "-DLLAMA_BUILD_EXAMPLES=OFF"]
    compile_ = ["cmake", "--build", str(build), "--target", "ggml-cuda", "ggml-cpu", "llama-server",
                "-j", str(os.cpu_count() or 2)]
    return [configure, compile_]


def run_timed(cmd: list[str], deadline: float, what: str) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise OutOfTime(f"no time left for {what}")
    print(f"$ {' '.join(cmd)}", flush=True)
    try:
        subprocess.run(cmd, check=True, timeout=left, stdout=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise OutOfTime(f"{what} did not finish before the deadline") from None


def install_cuda_backend(build: Path) -> Path:
    """Put the built libggml-cuda.so beside the wheel's libggml (runtime/hardware/backends.py loads
    every ggml-* module it finds there)."""
    from llmpack.runtime.hardware.backends import lib_dir

    built = next(build.glob("bin/libggml-cuda.so"), None) or next(build.rglob("libggml-cuda.so"))
    dest = lib_dir() / built.name
    shutil.copy2(built, dest)
    return dest


def greedy_check(model: Path) -> None:
    """The same prompts, greedy, on the CPU and with every layer on the GPU."""
    from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
    from llmpack.runtime.engine.sampling_params import SamplingParams
    from llmpack.runtime.llm import collect

    prompts = ["The capital of France is", "def fibonacci(n):", "Once upon a time,", "Water boils at"]
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    texts = {}
    for label, layers, device in (("cpu", 0, "cpu"), ("gpu", "all", None)):
        eng = LLMEngine(EngineConfig(str(model), n_ctx=2048, max_num_seqs=4, gpu_layers=layers, device=device))
        try:
            print(f"{label}: {eng.backend}", flush=True)
            texts[label] = [collect(eng.add_request(p, params)).outputs[0].token_ids for p in prompts]
        finally:
            eng.shutdown()
    for p, a, b in zip(prompts, texts["cpu"], texts["gpu"]):
        k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        print(f"greedy {p!r}: " + ("identical for 64 tokens" if k is None else f"differs from token {k} on"))


def throughput(model: Path, binary: Path, deadline: float) -> None:
    from llmpack.bench import workloads
    from llmpack.bench.client import Endpoint
    from llmpack.bench.runner import run

    print("| streams | llmpack tok/s (TTFT p50) | llama-server tok/s (TTFT p50) | ratio |", flush=True)
    servers = {}
    try:
        servers["llmpack"] = start_llmpack(model, ctx=CTX, parallel=max(STREAMS), extra=["--gpu-layers", "all"])
        servers["llama-server"] = start_llama_server(binary, model, ctx=CTX, parallel=max(STREAMS), extra=["-ngl", "99"])
        eps = {k: Endpoint(url, timeout=120) for k, (_, url) in servers.items()}
        for ep in eps.values():
            ep.resolve_model()
            run(ep, workloads.make("random", 2, input_len=16, output_len=8, seed=999), 2)
        for n in STREAMS:
            if time.monotonic() > deadline:
                raise OutOfTime(f"stopped before {n} streams")
            got = {k: run(ep, workloads.make("random", n, input_len=16, output_len=128, seed=n), n)
                   for k, ep in eps.items()}
            ours, peer = got["llmpack"], got["llama-server"]
            print(f"| {n} | {ours.output_tok_s:.1f} ({ours.ttft_s.p50:.3f} s) | {peer.output_tok_s:.1f} "
                  f"({peer.ttft_s.p50:.3f} s) | {ours.output_tok_s / peer.output_tok_s:.2f} |", flush=True)
    finally:
        for proc, _ in servers.values():
            proc.terminate()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="print the plan and commands, run nothing")
    ap.add_argument("--arch", default=None, help="CUDA architecture, e.g. 90 (default: this GPU's)")
    ap.add_argument("--src", type=Path, default=None, help="the vendored llama.cpp tree")
    ap.add_argument("--deadline-s", type=float, default=540.0, help="stop after this many seconds (9 minutes)")
    args = ap.parse_args()
    deadline = time.monotonic() + args.deadline_s
    src = args.src or default_src()
    arch = args.arch or ("90" if args.dry_run else gpu_arch())
    nvcc = find_nvcc() or ("nvcc" if args.dry_run else None)
    build = cache_dir() / "peers" / f"build-cuda-{VERSION}-sm{arch}"
    cmds = build_commands(src, build, arch, nvcc or "nvcc")
    if args.dry_run:
        print(f"plan: build sm_{arch} from {src} into {build}; greedy CPU vs GPU; {STREAMS} streams; "
              f"deadline {args.deadline_s:.0f} s")
        for cmd in cmds:
            print("$ " + " ".join(cmd))
        return 0
    if nvcc is None:
        print("llmpack: error: no nvcc found (PATH, $CUDA_HOME/bin, or the nvidia-cuda-nvcc wheel); "
              "install the CUDA toolkit first", file=sys.stderr)
        return 2
    if not (src / "CMakeLists.txt").is_file():
        print(f"llmpack: error: no llama.cpp source at {src}; run `./dev bench servers` once where there is "
              "network (it unpacks it), or pass --src", file=sys.stderr)
        return 2
    from llmpack.demo_models import demo_model_path

    model = demo_model_path("gemma")
    started = time.monotonic()
    try:
        for cmd, what in zip(cmds, ("configuring ggml-cuda", "building ggml-cuda and llama-server")):
            run_timed(cmd, deadline, what)
        print(f"built in {time.monotonic() - started:.0f} s; backend at {install_cuda_backend(build)}", flush=True)
        greedy_check(model)
        throughput(model, build / "bin" / "llama-server", deadline)
    except OutOfTime as exc:
        print(f"llmpack: the GPU check ran out of its {args.deadline_s:.0f} s: {exc}", file=sys.stderr)
        return 3
    print(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

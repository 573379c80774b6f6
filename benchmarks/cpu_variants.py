"""Engine throughput with the multi-variant llama.cpp build (backends loaded at run time, CPU
variant chosen by ggml) against the AVX2-only build it replaces, in the same run.

Both wheels come from the wheelhouse (./dev wheel; LLMPACK_LLAMA_FLAVOUR=avx2 ./dev wheel) and are
unpacked to temporary folders; each measurement is a child process with one of them first on
PYTHONPATH, and the builds alternate round by round so a busy neighbour hurts both alike.
Measured: greedy engine generation on the demo model at 1 and 16 sequences (median over rounds).
Target: multi-variant / AVX2-only >= 0.98.

    ./dev bench cpu_variants [--rounds 5] [--tokens 48]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def find_wheels() -> dict[str, Path]:
    """{"avx2": wheel, "multi": wheel} from the wheelhouse, told apart by their CMAKE_ARGS."""
    root = Path(os.environ.get("LLMPACK_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                / "llmpack") / "wheelhouse"
    found: dict[str, Path] = {}
    for args_file in root.glob("llama_cpp_python-*/CMAKE_ARGS"):
        args = args_file.read_text()
        kind = "multi" if "GGML_BACKEND_DL=ON" in args and "GGML_CUDA=ON" not in args else \
            "avx2" if "GGML_AVX2=ON" in args and "GGML_BACKEND_DL" not in args else None
        wheels = sorted(args_file.parent.glob("llama_cpp_python-*.whl"))
        if kind and wheels:
            found[kind] = wheels[0]
    missing = {"avx2": "LLMPACK_LLAMA_FLAVOUR=avx2 ./dev wheel", "multi": "./dev wheel"}.keys() - found.keys()
    if missing:
        sys.exit(f"no {', '.join(sorted(missing))} wheel in {root}; build it with "
                 + " and ".join({"avx2": "LLMPACK_LLAMA_FLAVOUR=avx2 ./dev wheel", "multi": "./dev wheel"}[m]
                                for m in sorted(missing)))
    return found


def child(tokens: int, sizes: list[int]) -> None:
    """In a child: one engine, one greedy run per size; prints {"variant", size: tok/s}."""
    sys.path.insert(0, str(HERE))
    from engine_throughput import engine_run, prompts_for

    from llmpack.paths import demo_model_path
    from llmpack.runtime.backends import load_backends
    from llmpack.runtime.engine import EngineConfig, LLMEngine
    from llmpack.runtime.sampling_params import SamplingParams

    engine = LLMEngine(EngineConfig(model_path=str(demo_model_path()), n_ctx=4096, max_num_seqs=max(sizes),
                                    gpu_layers=0, enable_prefix_cache=False))
    tokenize = lambda text: engine.tokenize(text, add_special=True)  # noqa: E731
    engine_run(engine, prompts_for(tokenize, 1), SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    greedy = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    result = {str(n): engine_run(engine, prompts_for(tokenize, n), greedy) for n in sizes}
    engine.shutdown()
    print(json.dumps({"variant": load_backends().cpu_variant or "built-in AVX2", **result}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--sizes", default="1,16")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        return child(args.tokens, sizes)
    wheels = find_wheels()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (shared: other jobs may run); "
          f"{args.tokens}-token greedy generations; median of {args.rounds} alternating rounds", flush=True)
    results: dict[str, dict[int, list[float]]] = {k: {n: [] for n in sizes} for k in wheels}
    variant: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for kind, wheel in wheels.items():
            paths[kind] = Path(tmp) / kind
            zipfile.ZipFile(wheel).extractall(paths[kind])
            for lib in (paths[kind] / "llama_cpp" / "lib").iterdir():
                lib.chmod(0o755)
        for _ in range(args.rounds):
            for kind in sorted(wheels):
                env = {**os.environ, "PYTHONPATH": str(paths[kind])}
                out = subprocess.run([sys.executable, __file__, "--child", "--tokens", str(args.tokens),
                                      "--sizes", args.sizes], env=env, capture_output=True, text=True, check=True)
                row = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"  round: {kind:<5} {row}", flush=True)   # partial figures survive an interrupted run
                variant[kind] = row.pop("variant")
                for n in sizes:
                    results[kind][n].append(row[str(n)])
    print(f"{'seqs':>4} | {'AVX2-only tok/s':>15} | {'multi-variant tok/s':>19} ({variant['multi']}) | ratio")
    for n in sizes:
        a, m = statistics.median(results["avx2"][n]), statistics.median(results["multi"][n])
        print(f"{n:>4} | {a:>15.1f} | {m:>19.1f} | {m / a:.3f}")


if __name__ == "__main__":
    main()

"""Engine throughput with the multi-variant llama.cpp build (backends loaded at run time, CPU
variant chosen by ggml) against the AVX2-only build it replaces, in the same run.

Both wheels come from the wheelhouse (./dev wheel; LLMPACK_LLAMA_FLAVOUR=avx2 ./dev wheel) and are
unpacked to temporary folders. Each arm is one long-lived worker process with its wheel first on
PYTHONPATH and its engine loaded once; the parent asks the workers in turn for one greedy run, so
only one of them computes at a time and the two halves of a pair are seconds apart. The figure is
the median over rounds of the per-round ratio (arm / AVX2-only), which cancels the slow drift a
busy neighbour causes; the spread of those ratios is printed with it so a reader can tell a real
difference from noise. The order within a round alternates so neither arm always goes first.

Arms: "avx2" (the old wheel), "multi" (ggml's pick), and "multi:VARIANT" (the multi-variant
wheel with LLMPACK_CPU_VARIANT=VARIANT), e.g. --arms avx2,multi,multi:haswell.
Target: multi / avx2 >= 0.98 at every size.

    ./dev bench cpu_variants [--rounds 10] [--tokens 64] [--sizes 1,16] [--arms avx2,multi]
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

from llmpack.paths import cache_dir

HERE = Path(__file__).resolve().parent
BUILD_HINT = {"avx2": "LLMPACK_LLAMA_FLAVOUR=avx2 ./dev wheel", "multi": "./dev wheel"}


def find_wheels() -> dict[str, Path]:
    """{"avx2": wheel, "multi": wheel} from the wheelhouse, told apart by their CMAKE_ARGS."""
    root = cache_dir() / "wheelhouse"     # where ./dev puts them (both honour LLMPACK_CACHE)
    found: dict[str, Path] = {}
    for args_file in root.glob("llama_cpp_python-*/CMAKE_ARGS"):
        args = args_file.read_text()
        kind = "multi" if "GGML_BACKEND_DL=ON" in args and "GGML_CUDA=ON" not in args else \
            "avx2" if "GGML_AVX2=ON" in args and "GGML_BACKEND_DL" not in args else None
        wheels = sorted(args_file.parent.glob("llama_cpp_python-*.whl"))
        if kind and wheels:
            found[kind] = wheels[0]
    missing = sorted(BUILD_HINT.keys() - found.keys())
    if missing:
        sys.exit(f"no {', '.join(missing)} wheel in {root}; build it with "
                 + " and ".join(BUILD_HINT[m] for m in missing))
    return found


def worker(max_seqs: int) -> None:
    """In a child: load one engine, then answer {"n", "tokens"} lines with {"tok_s"} lines.

    llama.cpp may print to fd 1, so results go to a private copy of it and fd 1 joins stderr."""
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.path.insert(0, str(HERE))
    from engine_throughput import engine_run, prompts_for

    from llmpack.demo_models import demo_model_path
    from llmpack.runtime.hardware.backends import load_backends
    from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
    from llmpack.runtime.engine.sampling_params import SamplingParams

    engine = LLMEngine(EngineConfig(model_path=str(demo_model_path("gemma")), n_ctx=4096, max_num_seqs=max_seqs,
                                    gpu_layers=0, enable_prefix_cache=False))
    tokenize = lambda text: engine.tokenize(text, add_special=True)  # noqa: E731
    engine_run(engine, prompts_for(tokenize, 1), SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    reply.write(json.dumps({"variant": load_backends().cpu_variant or "built-in AVX2"}) + "\n")
    for line in sys.stdin:
        ask = json.loads(line)
        greedy = SamplingParams(temperature=0, max_tokens=ask["tokens"], ignore_eos=True)
        reply.write(json.dumps({"tok_s": engine_run(engine, prompts_for(tokenize, ask["n"]), greedy)}) + "\n")
    engine.shutdown()


class Arm:
    """One worker process: a wheel folder on PYTHONPATH and, optionally, a forced CPU variant."""

    def __init__(self, name: str, wheel_dir: Path, variant: str | None, max_seqs: int, log: Path):
        env = {**os.environ, "PYTHONPATH": str(wheel_dir)}
        env.pop("LLMPACK_CPU_VARIANT", None)
        if variant:
            env["LLMPACK_CPU_VARIANT"] = variant
        self.name, self.log = name, log
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", "--max-seqs", str(max_seqs)],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log.open("w"), text=True)
        self.variant = self._read()["variant"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            tail = self.log.read_text()[-2000:]
            sys.exit(f"worker {self.name} died (exit {self.proc.wait()}); its log ends:\n{tail}")
        return json.loads(line)

    def run(self, n: int, tokens: int) -> float:
        self.proc.stdin.write(json.dumps({"n": n, "tokens": tokens}) + "\n")
        self.proc.stdin.flush()
        return self._read()["tok_s"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def quartiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 4:
        return min(xs), max(xs)
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--sizes", default="1,16")
    ap.add_argument("--arms", default="avx2,multi")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--max-seqs", type=int, default=16, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.max_seqs)
    sizes = [int(s) for s in args.sizes.split(",")]
    names = args.arms.split(",")
    if names[0] != "avx2":
        sys.exit("--arms must start with avx2: every ratio is against the AVX2-only build")
    wheels = find_wheels()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {cpu_model()} (shared: other jobs may run); "
          f"{args.tokens}-token greedy generations; {args.rounds} rounds, arms asked in turn", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for kind, wheel in wheels.items():
            zipfile.ZipFile(wheel).extractall(Path(tmp) / kind)
            for lib in (Path(tmp) / kind / "llama_cpp" / "lib").iterdir():
                lib.chmod(0o755)
        arms = [Arm(name, Path(tmp) / name.split(":")[0], name.partition(":")[2] or None, max(sizes),
                    Path(tmp) / f"{name.replace(':', '_')}.log") for name in names]
        speeds = {(a.name, n): [] for a in arms for n in sizes}
        ratios = {(a.name, n): [] for a in arms[1:] for n in sizes}
        for r in range(args.rounds):
            for n in sizes:
                order = arms if r % 2 == 0 else arms[::-1]
                got = {a.name: a.run(n, args.tokens) for a in order}
                for a in arms:
                    speeds[a.name, n].append(got[a.name])
                for a in arms[1:]:
                    ratios[a.name, n].append(got[a.name] / got["avx2"])
            print(f"  round {r + 1}: " + "  ".join(f"{a.name}@{n}={speeds[a.name, n][-1]:.1f}"
                                                  for n in sizes for a in arms), flush=True)
        for a in arms:
            a.close()
    print(f"\n{'arm':<16} {'variant':<16} {'seqs':>4} {'tok/s (median)':>14} {'ratio (median)':>14} "
          f"{'ratio IQR':>13}")
    for a in arms:
        for n in sizes:
            med = statistics.median(speeds[a.name, n])
            if a.name == "avx2":
                print(f"{a.name:<16} {a.variant:<16} {n:>4} {med:>14.1f} {'1':>14} {'':>13}")
                continue
            lo, hi = quartiles(ratios[a.name, n])
            print(f"{a.name:<16} {a.variant:<16} {n:>4} {med:>14.1f} {statistics.median(ratios[a.name, n]):>14.3f} "
                  f"{lo:>6.3f}-{hi:.3f}")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()

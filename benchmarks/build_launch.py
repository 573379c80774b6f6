"""How long `llmpack build` and a built program's launch take, against their natural baselines.

    ./dev bench build_launch            (or: .venv/bin/python benchmarks/build_launch.py)

* build: `llmpack build DEMO -o OUT` (a fresh process, cached stub) vs `cp DEMO OUT`, median of 3.
  Target: build <= 1.5 x cp.
* launch-to-ready (until GET /health answers 200): the built demo program's first launch (empty
  cache: the model is checked once and read in place), its later launches, and `llmpack run
  DEMO.gguf`, median of 3; and what the first launch wrote to the cache.
  Target: a later launch <= 1.2 x llmpack run.
* stop: from SIGINT (Ctrl+C) to exit, for those same later launches and `llmpack run`.
  Target: <= 1.2 x llmpack run (tests/test_build_demo.py only checks that it stops at all).
* the runtime stub's size (and how long it took to build, when this run built it).

Prints figures; it is not a test. Uses the real demo model (Gemma 3 270M Q4_K_M).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from llmpack.builder.stub import get_stub, stub_info
from llmpack.demo_models import demo_model_path


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def evict(path: Path) -> None:
    """Drop one file's pages from the page cache (a cold read next time) without touching others."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def launch_to_ready(cmd: list[str], env: dict, cwd: Path, timeout: float = 300,
                    stops: list[float] | None = None, kill_group: bool = False) -> float:
    """Seconds from starting `cmd` until /health says 200; then stops it with SIGINT (to its
    whole process group with `kill_group`, as a console's Ctrl+C: what Wine needs) and appends
    the seconds from SIGINT to exit to `stops`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=cwd,
                            start_new_session=True)
    try:
        url = None
        for line in proc.stdout:
            if line.startswith("LLMPACK_LISTENING "):
                url = line.split()[1]
                break
        if url is None:
            raise RuntimeError(f"{cmd[0]} exited ({proc.wait()}) without listening")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if requests.get(url + "/health", timeout=5).status_code == 200:
                    return time.perf_counter() - t0
            except requests.RequestException:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"{cmd[0]} never became ready")
    finally:
        t_stop = time.perf_counter()
        if stop(proc, kill_group, 30) and stops is not None:
            stops.append(time.perf_counter() - t_stop)


def stop(proc: subprocess.Popen, group: bool, timeout: float) -> bool:
    """SIGINT (to the whole process group with `group`, as a console's Ctrl+C); SIGKILL after
    `timeout` seconds. True when it stopped on its own."""
    if group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    opts = ap.parse_args()
    n = opts.repeat

    model = demo_model_path("gemma")
    t = time.perf_counter()
    stub = get_stub()
    stub_seconds = time.perf_counter() - t
    info = stub_info(stub)
    tmp = Path(tempfile.mkdtemp(prefix="llmpack-bench-"))
    print(f"demo model  {model} ({model.stat().st_size / 1e6:.1f} MB)")
    print(f"stub        {stub} ({stub.stat().st_size / 1e6:.1f} MB; "
          + (f"built now in {stub_seconds:.0f} s" if stub_seconds > 5 else
             f"cached, built in {info.get('build_seconds', '?')} s") + ")")
    print(f"scratch     {tmp}")
    try:
        # ------------------------------------------------------------------ build vs cp
        out, copy = tmp / "gemma-chat", tmp / "copy.gguf"
        build_cmd = [sys.executable, "-m", "llmpack", "build", str(model), "-o", str(out), "--stub", str(stub)]
        inner: list[float] = []

        def build() -> None:
            done = subprocess.run(build_cmd, check=True, capture_output=True, text=True)
            inner.append(float(done.stdout.split(" in ", 1)[1].split(" s", 1)[0]))   # "wrote X (..) in N s"

        def fmt(xs):
            return ", ".join(f"{x:.2f}" for x in xs)

        figures = {}
        for cache in ("warm", "cold"):
            cps, builds, hashes = [], [], []
            inner.clear()
            subprocess.run(["cat", str(model), str(stub)], check=True, stdout=subprocess.DEVNULL)   # warm up
            for _ in range(n):
                for target, fn, sink in ((copy, lambda: subprocess.run(["cp", str(model), str(copy)], check=True), cps),
                                         (out, build, builds),
                                         (None, lambda: subprocess.run(["sha256sum", str(model)], check=True,
                                                                       stdout=subprocess.DEVNULL), hashes)):
                    if target is not None:
                        target.unlink(missing_ok=True)
                    os.sync()
                    if cache == "cold":
                        evict(model)
                        evict(stub)
                    sink.append(timed(fn))
            cp_s, build_s, hash_s = (statistics.median(x) for x in (cps, builds, hashes))
            figures[cache] = (cp_s, build_s)
            print(f"\n{cache} page cache (median of {n})")
            print(f"  llmpack build   {build_s:.2f} s   ({fmt(builds)}; "
                  f"inside the process {statistics.median(inner):.2f} s)")
            print(f"  cp              {cp_s:.2f} s   ({fmt(cps)})")
            print(f"  sha256sum       {hash_s:.2f} s   ({fmt(hashes)})   the manifest needs the model's sha256")
            print(f"  build / cp      {build_s / cp_s:.2f} x   (target <= 1.5)")
        print(f"  output {out.stat().st_size / 1e6:.1f} MB = stub {stub.stat().st_size / 1e6:.1f} MB + model")
        cp_s, build_s = figures["warm"]

        # ------------------------------------------------------------------ launch-to-ready
        home = tmp / "home"
        home.mkdir()
        run_dir = tmp / "run"
        run_dir.mkdir()
        flags = ["--no-browser", "--port", "0"]

        xdg = tmp / "xdg-run"   # a private runtime folder: no other running copy of the demo is found there
        xdg.mkdir(mode=0o700)

        def env_for(cache: Path) -> dict:
            return {"HOME": str(home), "PATH": "/usr/bin:/bin", "LLMPACK_CACHE": str(cache), "XDG_RUNTIME_DIR": str(xdg)}

        firsts = []
        for i in range(n):
            cache = tmp / f"cache-first-{i}"
            firsts.append(launch_to_ready([str(out), *flags], env_for(cache), run_dir))
        later_cache = tmp / "cache-first-0"
        written = sum(f.stat().st_blocks * 512 for f in later_cache.rglob("*") if f.is_file())
        run_env = {**os.environ, "LLMPACK_CACHE": str(tmp / "cache-run")}
        run_cmd = [sys.executable, "-m", "llmpack", "run", str(model), *flags]
        laters, runs, later_stops, run_stops = [], [], [], []
        for _ in range(n):   # interleaved, so drifting machine load hits both alike
            laters.append(launch_to_ready([str(out), *flags], env_for(later_cache), run_dir, stops=later_stops))
            runs.append(launch_to_ready(run_cmd, run_env, run_dir, stops=run_stops))
        first_s, later_s, run_s = (statistics.median(x) for x in (firsts, laters, runs))
        stop_s, run_stop_s = statistics.median(later_stops), statistics.median(run_stops)

        print(f"\nlaunch-to-ready (/health 200), median of {n}")
        print(f"  first launch             {first_s:.2f} s   ({fmt(firsts)}); wrote {written / 1e3:,.0f} kB to the cache")
        print(f"  later launch             {later_s:.2f} s   ({fmt(laters)})")
        print(f"  llmpack run model.gguf   {run_s:.2f} s   ({fmt(runs)})")
        print(f"  later / run              {later_s / run_s:.2f} x   (target <= 1.2)")
        print(f"  first / run              {first_s / run_s:.2f} x")
        print(f"\nstop after SIGINT, median of {n}")
        print(f"  built program            {stop_s:.2f} s   ({fmt(later_stops)})")
        print(f"  llmpack run model.gguf   {run_stop_s:.2f} s   ({fmt(run_stops)})")
        print(f"  program / run            {stop_s / run_stop_s:.2f} x   (target <= 1.2)")
        print(f"\ntargets: build <= 1.5 x cp {'met' if build_s <= 1.5 * cp_s else 'MISSED'} (warm), "
              f"{'met' if figures['cold'][1] <= 1.5 * figures['cold'][0] else 'MISSED'} (cold); "
              f"later launch <= 1.2 x run {'met' if later_s <= 1.2 * run_s else 'MISSED'}; "
              f"stop <= 1.2 x run {'met' if stop_s <= 1.2 * run_stop_s else 'MISSED'}")
        return 0
    finally:
        if not opts.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

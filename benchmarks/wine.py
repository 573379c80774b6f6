"""The Windows chat.exe under Wine against the same model's Linux file, on this machine, in one run.

    ./dev bench wine [-n 3] [--tokens 64]

* launch-to-ready (GET /health 200): the Windows file's first launch in a fresh Wine prefix (it
  unpacks the model to %LOCALAPPDATA%) and its later launches, against the Linux file's.
* decode speed: one greedy stream of --tokens tokens, tokens/s from the server's own usage
  figures over wall time, Windows / Linux ratio (median of -n).
* the Windows stub's size, and how long it took to build (from its record).

Both files hold the same model and pick their CPU kernels the same way (the AMX variant is never
built for Windows, so compare with LLMPACK_CPU_VARIANT unset on a CPU without AMX, or set it to
the same variant for both). Prints figures; it is not a test. Reported in docs/PORTABILITY.md;
no target.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from build_launch import launch_to_ready, stop
from llmpack.builder.stub import get_stub, stub_info
from llmpack.builder.windows.target import WindowsTarget
from llmpack.builder.windows.tools import Wine
from llmpack.demo_models import demo_model_path

PROMPT = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]


def decode_rate(cmd: list[str], env: dict, cwd: Path, tokens: int) -> tuple[float, str]:
    """tokens/s of one greedy reply of `tokens` tokens, and the CPU variant the server chose."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=cwd,
                            start_new_session=True)
    try:
        url = next(line.split()[1] for line in proc.stdout if line.startswith("LLMPACK_LISTENING "))
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                health = requests.get(url + "/health", timeout=5)
                if health.status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.1)
        body = {"messages": PROMPT, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
        requests.post(url + "/v1/chat/completions", json={**body, "max_tokens": 4}, timeout=300)   # warm-up
        t = time.perf_counter()
        r = requests.post(url + "/v1/chat/completions", json=body, timeout=600).json()
        took = time.perf_counter() - t
        return r["usage"]["completion_tokens"] / took, health.json()["backend"]["cpu_variant"]
    finally:
        stop(proc, True, 60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    opts = ap.parse_args()
    model = demo_model_path("gemma")
    win_stub, linux_stub = get_stub(target=WindowsTarget()), get_stub()
    info = stub_info(win_stub)
    tmp = Path(tempfile.mkdtemp(prefix="llmpack-bench-wine-"))
    try:
        exe, elf = tmp / "chat.exe", tmp / "chat"
        for out, stub in ((exe, win_stub), (elf, linux_stub)):
            subprocess.run([sys.executable, "-m", "llmpack", "build", str(model), "-o", str(out), "--stub", str(stub)],
                           check=True, capture_output=True)
        print(f"Windows stub  {win_stub.stat().st_size / 1e6:.1f} MB, built in {info.get('build_seconds', '?')} s "
              f"(PyInstaller step; the toolchain steps print their own times)")
        flags = ["--no-browser", "--port", "0"]
        linux_env = {"HOME": str(tmp), "PATH": "/usr/bin:/bin", "LLMPACK_CACHE": str(tmp / "linux-cache")}
        firsts, laters, linux = [], [], []
        for i in range(opts.repeat):
            pc = Wine(tmp / f"prefix-{i}").ensure()
            firsts.append(launch_to_ready(["wine", str(exe), *flags], pc.env(), tmp, kill_group=True))
            laters.append(launch_to_ready(["wine", str(exe), *flags], pc.env(), tmp, kill_group=True))
            linux.append(launch_to_ready([str(elf), *flags], linux_env, tmp))
        med = statistics.median
        print(f"\nlaunch-to-ready, median of {opts.repeat}")
        print(f"  Windows under Wine, first (fresh prefix, unpacks)  {med(firsts):.2f} s")
        print(f"  Windows under Wine, later                          {med(laters):.2f} s")
        print(f"  Linux file, later                                  {med(linux):.2f} s")
        pc = Wine(tmp / "prefix-0")
        rates_w, rates_l, variants = [], [], set()
        for _ in range(opts.repeat):   # interleaved: drifting load hits both alike
            rate, v = decode_rate(["wine", str(exe), *flags], pc.env(), tmp, opts.tokens)
            rates_w.append(rate)
            variants.add(f"Windows {v}")
            rate, v = decode_rate([str(elf), *flags], linux_env, tmp, opts.tokens)
            rates_l.append(rate)
            variants.add(f"Linux {v}")
        print(f"\ndecode, {opts.tokens} tokens, one stream, median of {opts.repeat} ({', '.join(sorted(variants))})")
        print(f"  Windows under Wine  {med(rates_w):.1f} tok/s   ({', '.join(f'{r:.1f}' for r in rates_w)})")
        print(f"  Linux file          {med(rates_l):.1f} tok/s   ({', '.join(f'{r:.1f}' for r in rates_l)})")
        print(f"  Windows / Linux     {med(w / lx for w, lx in zip(rates_w, rates_l)):.2f} x   (reported, not a target)")
        return 0
    finally:
        for prefix in tmp.glob("prefix-*"):
            Wine(prefix).shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

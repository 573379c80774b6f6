"""What the RPC key costs: model load and greedy tokens/s through one `llmpack rpc-worker` on
127.0.0.1, with the key handshake (llmpack's build) against the same build with the key left out
of both sides (ggml's key unset: llama.cpp's own behaviour), measured in the same run, alternating.

The handshake runs once per connection (two HMAC-SHA256 each side) and nothing is added per
message, so the ratios should sit at 1.00 within noise; issue 36 asks for under 5%. Each round is
a fresh worker and a fresh head process, so every load opens its connections anew.

    ./dev bench rpc_key [--rounds 3] [--tokens 64]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

KEY = "bench-key-0123456789abcdef0123456789"


def _no_key() -> None:
    """Leave ggml's key unset on this side (and skip the Python handshake): the unkeyed baseline."""
    from llmpack.runtime.hardware import rpc_key

    rpc_key.install = lambda *_: None
    rpc_key.prove = lambda *_: None


def worker(port: int, keyed: bool) -> None:
    if not keyed:
        _no_key()
    from llmpack.runtime.hardware.rpc_worker import serve_worker

    serve_worker(port=port, threads=1, say=lambda line: print(line, flush=True))


def head(model: str, port: int, keyed: bool, tokens: int) -> None:
    if not keyed:
        _no_key()
    from llmpack.runtime.engine.sampling_params import SamplingParams
    from llmpack.runtime.llm import LLM

    started = time.perf_counter()
    llm = LLM(model, n_ctx=512, gpu_layers="all", rpc=(f"127.0.0.1:{port}",))
    load = time.perf_counter() - started
    greedy = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    llm.generate("Warm up", SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    started = time.perf_counter()
    out = llm.generate("The quick brown fox", greedy)[0].outputs[0].token_ids
    rate = len(out) / (time.perf_counter() - started)
    llm.close()
    print(json.dumps({"load_s": load, "tokens_per_s": rate, "tokens": list(out)}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round(model: Path, keyed: bool, tokens: int, env: dict) -> dict:
    port = free_port()
    me = [sys.executable, __file__]
    proc = subprocess.Popen([*me, "--worker", str(port), "--keyed", str(int(keyed))], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "lending" in proc.stdout.readline() + proc.stdout.readline()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        out = subprocess.run([*me, "--head", str(model), str(port), "--keyed", str(int(keyed)), "--tokens",
                              str(tokens)], env=env, capture_output=True, text=True, timeout=600)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        assert out.returncode == 0 and lines, out.stdout[-2000:] + out.stderr[-2000:]
        return json.loads(lines[-1])
    finally:
        proc.kill()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--worker", type=int)
    ap.add_argument("--head", nargs=2)
    ap.add_argument("--keyed", type=int, default=1)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, bool(args.keyed))
    if args.head:
        return head(args.head[0], int(args.head[1]), bool(args.keyed), args.tokens)

    from ggufs import write_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        model = write_tiny_model(Path(tmp) / "bench.gguf", n_layer=8, n_embd=512, n_head=8, n_head_kv=4,
                                 n_ff=2048, seed=1)
        key = Path(tmp) / "key"
        key.write_text(KEY)
        key.chmod(0o600)
        env = {**os.environ, "LLMPACK_RPC_KEY_FILE": str(key)}
        runs: dict[bool, list[dict]] = {True: [], False: []}
        for _ in range(args.rounds):
            for keyed in (False, True):
                runs[keyed].append(one_round(model, keyed, args.tokens, env))
        assert runs[True][0]["tokens"] == runs[False][0]["tokens"], "the key changed the greedy text"
        size = model.stat().st_size >> 20
        print(f"model {size} MiB over 127.0.0.1, {args.rounds} rounds each, {args.tokens} greedy tokens, "
              f"load {os.getloadavg()[0]:.1f} (1-min average), {os.cpu_count()} CPUs")
        for what, unit in (("load_s", "s"), ("tokens_per_s", "tokens/s")):
            keyed, plain = (statistics.median(r[what] for r in runs[k]) for k in (True, False))
            print(f"{what:>13}: keyed {keyed:8.3f} {unit}, unkeyed {plain:8.3f} {unit}, keyed/unkeyed {keyed / plain:.3f}")


if __name__ == "__main__":
    main()

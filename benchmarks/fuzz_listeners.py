"""The full protocol fuzz of issue 46: at least 10,000 seeded hostile requests across every HTTP
route of the single server (`llmpack run`) and of Ray's ingress (`serve --ray`), over real
sockets (tests/listener_fuzz.py says what is sent), then the checks of tests/test_fuzz_listeners.py:
no 5xx, no answer without a message, nothing past its deadline; afterwards the same greedy text,
no thread or file descriptor more, memory within 10 % of where it was.

    ./dev bench fuzz_listeners [REQUESTS] [--no-ray]

CI runs a slice of the same stream (tests/test_fuzz_listeners.py, tests/test_ray_security.py);
this is the long run, minutes on 2 cores. Exits 1 on any problem.
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import listener_fuzz as F  # noqa: E402
import listener_process as P  # noqa: E402
from ggufs import CHATML_TEMPLATE, write_tiny_model  # noqa: E402

SEED = 46
REQUESTS = 10_000


def fuzz(name: str, srv: P.Served, n: int, pids: list[int]) -> list[str]:
    """The run against one listener; what went wrong, as lines."""
    target = srv.target
    greedy = P.greedy_text(target)
    F.run(target, 300, SEED + 1)   # warm: each route down its lazy paths
    time.sleep(3)
    before = {pid: srv.vitals(pid) for pid in pids}
    start = time.monotonic()
    report = F.run(target, n, SEED, progress=lambda k: print(f"  {name}: {k} sent", flush=True))
    print(f"{name}: {report.summary()} in {time.monotonic() - start:.0f} s", flush=True)
    wrong = [f"{name}: {p}" for p in report.problems[:50]]
    time.sleep(15)   # connections closed, replaced workers started
    for pid, was in before.items():
        now = srv.vitals(pid)
        print(f"{name}: pid {pid} before {was}, after {now}", flush=True)
        if now["threads"] > was["threads"] or now["fds"] > was["fds"] or now["rss_kib"] > was["rss_kib"] * 1.10:
            wrong.append(f"{name}: pid {pid} grew: before {was}, after {now}")
    if P.greedy_text(target) != greedy:
        wrong.append(f"{name}: the greedy reply changed after the fuzz")
    return wrong


def replicas(session: int) -> list[int]:
    """The Ray Serve replica processes of `serve --ray`'s session (ingress and model)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == session and \
                        (entry / "cmdline").read_bytes().startswith(b"ray::ServeReplica"):
                    out.append(int(entry.name))
            except (OSError, ProcessLookupError):
                continue
    return out


def main() -> int:
    n = int(next((a for a in sys.argv[1:] if a.isdigit()), REQUESTS))
    root = Path(tempfile.mkdtemp(prefix="llmpack-fuzz-"))
    wrong = []
    try:
        model = write_tiny_model(root / "chat.gguf", chat_template=CHATML_TEMPLATE, seed=3)
        print(os.popen("uptime").read().strip(), flush=True)
        with P.served(["run", str(model), "--no-browser", "--port", "0", "--ctx", "256", "--parallel", "4"],
                      {"LLMPACK_DATA_DIR": str(root / "single")}) as srv:
            wrong += fuzz("single server", srv, n, [srv.proc.pid])
        if "--no-ray" not in sys.argv:
            (root / "home").mkdir()
            env = {"LLMPACK_DATA_DIR": str(root / "ray"), "HOME": str(root / "home"), "RAY_USAGE_STATS_ENABLED": "0"}
            with socket.socket() as s:   # Ray Serve's proxy takes no port 0
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            with P.served(["serve", "--ray", str(model), "--threads", "1", "--port", str(port)], env) as srv:
                wrong += fuzz("Ray ingress", srv, n, replicas(srv.proc.pid))
        print(os.popen("uptime").read().strip(), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(wrong) if wrong else "fuzz_listeners: no problem", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

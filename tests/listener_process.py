"""A listener for the protocol fuzz's tests (listener_fuzz.py): `llmpack run` or `serve --ray` in a
process of its own, its threads, descriptors and memory (`Served.vitals`), a well-formed call and a
greedy chat through it, and slow clients that drip their headers or bodies."""
from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from listener_fuzz import DEADLINE_S, Case, Target, raw_request, send

def json_call(target: Target, method: str, path: str, body: Any = None, timeout: float = DEADLINE_S) -> Any:
    """A well-formed request; its JSON answer (AssertionError on anything but a 200)."""
    data = b"" if body is None else json.dumps(body).encode()
    headers = {"Host": target.hostname, "Connection": "close", "Content-Type": "application/json",
               **target.api_headers, **(target.page_headers if path.startswith("/api/") else {})}
    answer = send(target, Case("ok", method, path, raw_request(method, path, headers, data, length=len(data)), data),
                  timeout)
    assert answer.status == 200, (path, answer.status, answer.body[:500])
    return json.loads(answer.body)


GREEDY = {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 24, "temperature": 0,
          "seed": 1}


def greedy_text(target: Target) -> str:
    """A normal chat, greedy: the same text before and after the fuzz, or the engine was harmed."""
    return json_call(target, "POST", "/v1/chat/completions", GREEDY)["choices"][0]["message"]["content"]


# ---------------------------------------------------------------- slow clients
class SlowClients:
    """`loris` connections that send their headers a byte at a time and `bodies` that announce a
    body and send it a byte at a time: held open while other users are served."""

    def __init__(self, target: Target, loris: int, bodies: int, path: str = "/v1/chat/completions",
                 every_s: float = 0.5) -> None:
        self.target, self.every_s, self._stop = target, every_s, threading.Event()
        head = raw_request("POST", path, {"Host": target.hostname, "Content-Type": "application/json",
                                       **target.api_headers}, b"", length=1000)
        self.plans = [(head, 0) for _ in range(loris)] + [(head, len(head)) for _ in range(bodies)]
        self.socks: list[socket.socket] = []
        self.thread = threading.Thread(target=self._drip, daemon=True)

    def __enter__(self) -> SlowClients:
        for head, sent in self.plans:
            sock = socket.create_connection((self.target.host, self.target.port), timeout=10)
            sock.sendall(head[:sent])
            self.socks.append(sock)
        self.offsets = [sent for _, sent in self.plans]
        self.thread.start()
        return self

    def _drip(self) -> None:
        while not self._stop.wait(self.every_s):
            for k, sock in enumerate(self.socks):
                head = self.plans[k][0]
                data = head + b"{" * 999
                try:
                    sock.send(data[self.offsets[k]:self.offsets[k] + 1])
                    self.offsets[k] += 1
                except OSError:
                    pass

    def open(self) -> int:
        """How many of the slow connections the server still holds open."""
        alive = 0
        for sock in self.socks:
            try:
                sock.setblocking(False)
                alive += sock.recv(1, socket.MSG_PEEK) != b""
            except BlockingIOError:
                alive += 1
            except OSError:
                pass
            finally:
                sock.setblocking(True)
        return alive

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self.thread.join(10)
        for sock in self.socks:
            sock.close()


# ---------------------------------------------------------------- the listener, in a process of its own
START_S = 240


class Served:
    """An llmpack command that listens (`run`, `serve --ray`) in a child process of its own session."""

    def __init__(self, proc: subprocess.Popen, target: Target, output: list[str]) -> None:
        self.proc, self.target, self.output = proc, target, output

    def vitals(self, pid: int | None = None) -> dict[str, int]:
        """Threads, open file descriptors and resident memory (KiB) of the server's process (or `pid`)."""
        pid = pid or self.proc.pid
        status = Path(f"/proc/{pid}/status").read_text()

        def number(name: str) -> int:
            return int(re.search(rf"^{name}:\s+(\d+)", status, re.M).group(1))

        return {"threads": number("Threads"), "fds": len(os.listdir(f"/proc/{pid}/fd")), "rss_kib": number("VmRSS")}


@contextlib.contextmanager
def served(args: list[str], env: dict[str, str]) -> Iterator[Served]:
    """`python -m llmpack ARGS` until it prints LLMPACK_LISTENING and /health says ok; stopped
    (SIGINT to its session, as Ctrl+C) when the block ends."""
    proc = subprocess.Popen([sys.executable, "-m", "llmpack", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **env}, start_new_session=True)
    token, out, started = None, [], time.monotonic()
    try:
        for line in proc.stdout:
            out.append(line)
            token = token or (re.search(r"\?token=(\S+)", line) or [None, None])[1]
            if line.startswith("LLMPACK_LISTENING"):
                break
            assert time.monotonic() - started < START_S, "".join(out)[-3000:]
        url = re.search(r"http://([\d.]+):(\d+)", out[-1] if out else "")
        assert url and proc.poll() is None, "".join(out)[-3000:]
        page = {"X-Llmpack-Chat": "1", "X-Llmpack-Token": token} if token else {}
        target = Target(url[1], int(url[2]), page_headers=page)
        threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True).start()   # an unread pipe blocks it
        while b'"ok"' not in send(target, Case("ok", "GET", "/health", raw_request(
                "GET", "/health", {"Host": target.hostname, "Connection": "close"}, b""))).body:
            assert time.monotonic() - started < START_S and proc.poll() is None, "".join(out)[-3000:]
            time.sleep(0.2)
        yield Served(proc, target, out)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 2)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(30)

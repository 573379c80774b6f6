"""Built programs as child processes, for the tests that run them (tests/test_build.py on this
computer, tests/test_windows.py under Wine): the CLI, a minimal environment, and :class:`App`,
which starts a program, reads its console and talks to its server."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from llmpack.runtime.server.http.state import MESSAGES

UNPACKING = MESSAGES["extracting"]   # the console line of the extraction phase (compressed builds)
CHECKING = MESSAGES["checking"]      # ... of the one-time check of a model read in place
# The console line of each phase (llmpack/progress.py, off a terminal), printed as it begins:
# unpacking once the first bytes are written, loading once the server starts reading the model.
PHASE_LINES = {phase: f"llmpack: {MESSAGES[phase]}..." for phase in ("extracting", "checking", "loading")}
# --verbose: the model file is read into memory, llama.cpp loads it next (serving.build_model)
FILE_READ = "llmpack: read the model file into memory"
READY = "llmpack: model ready"       # the console line once /health is 200 (server/lifecycle/server.py)
LOAD_FAILED = "llmpack: error: could not load the model"
CHAT = [{"role": "user", "content": "hello there"}]


def llmpack_cli(*args: str, check: bool = True, env: dict | None = None, timeout: float = 600,
                cwd: Path | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "llmpack", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)
    if check:
        assert proc.returncode == 0, f"llmpack {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
    return proc


def minimal_env(tmp: Path, **extra: str) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    # XDG_RUNTIME_DIR: the instance lock files and browser redirect files of this test only (0700, as
    # the real one is: platformdirs falls back to a shared folder, with a warning, otherwise)
    run = tmp / "xdg-run"
    run.mkdir(mode=0o700, parents=True, exist_ok=True)
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", "LLMPACK_CACHE": str(tmp / "cache"),
            "XDG_RUNTIME_DIR": str(tmp / "xdg-run"), **extra}


class App:
    """A built executable (or `llmpack demo`) running as a child process."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env, cwd=cwd, start_new_session=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        self._ready = threading.Event()
        self._said = threading.Condition()   # notified on every line of either stream
        self._readers = [threading.Thread(target=self._pump, args=(self.proc.stdout, self.out, True), daemon=True),
                         threading.Thread(target=self._pump, args=(self.proc.stderr, self.err, False), daemon=True)]
        for t in self._readers:
            t.start()
        self.url = ""

    def _pump(self, stream, sink: list[str], announce: bool) -> None:
        for line in stream:
            sink.append(line)
            if announce:
                self._lines.put(line)
            if line.startswith(READY):
                self._ready.set()
            with self._said:
                self._said.notify_all()
        with self._said:   # the stream ended: a waiter checks whether the program exited
            self._said.notify_all()

    def wait_listening(self, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=0.5)
            except queue.Empty:
                assert self.proc.poll() is None, f"exited early ({self.proc.returncode}):\n{self.stderr}"
                continue
            if line.startswith("LLMPACK_LISTENING "):
                self.url = line.split()[1].rstrip("/")
                assert self.url.startswith("http://127.0.0.1:")
                return self.url
        raise AssertionError(f"no LLMPACK_LISTENING line in {timeout} s:\n{self.stdout}\n{self.stderr}")

    def wait_answering(self, timeout: float = 60) -> int:
        """Until /health answers at all (the server loop runs, so Ctrl+C is handled by it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                return requests.get(self.url + "/health", timeout=5).status_code
            except requests.RequestException:
                time.sleep(0.05)
        raise AssertionError(f"/health never answered:\n{self.stderr}")

    def wait_healthy(self, timeout: float = 300) -> dict:
        """Until the program says the model is ready (its console line, not /health polled on a
        clock), then /health, which must be 200 from then on. A load error fails at once."""
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.5):
            assert self.proc.poll() is None, f"exited ({self.proc.returncode}):\n{self.stderr}"
            assert LOAD_FAILED not in self.stderr, self.stderr
            assert time.monotonic() < deadline, f"no {READY!r} line in {timeout} s:\n{self.stdout}\n{self.stderr}"
        r = requests.get(self.url + "/health", timeout=30)
        assert r.status_code == 200, f"{READY!r} was printed but /health says {r.status_code}: {r.text}"
        return r.json()

    def wait_line(self, start: str, timeout: float = 120) -> str:
        """Until the program prints a line (on either stream) that starts with `start`, as
        wait_healthy waits for "model ready"; "model ready" or a load error first fails at once."""
        deadline = time.monotonic() + timeout

        def found() -> str | None:
            return next((ln for ln in self.out + self.err if ln.startswith(start)), None)

        with self._said:
            while (line := found()) is None:
                assert self.proc.poll() is None, f"exited ({self.proc.returncode}):\n{self.stderr}"
                assert not self._ready.is_set(), f"ready without a {start!r} line:\n{self.stdout}\n{self.stderr}"
                assert LOAD_FAILED not in self.stderr, self.stderr
                assert time.monotonic() < deadline, f"no {start!r} line in {timeout} s:\n{self.stdout}\n{self.stderr}"
                self._said.wait(0.5)
        return line

    def wait_phase(self, phase: str, timeout: float = 120) -> None:
        """Until the program says `phase` (extracting, loading) has begun: its console line."""
        self.wait_line(PHASE_LINES[phase], timeout)

    def chat(self, messages=CHAT, max_tokens: int = 16) -> dict:
        r = requests.post(self.url + "/v1/chat/completions", timeout=120,
                          json={"messages": messages, "max_tokens": max_tokens, "temperature": 0})
        assert r.status_code == 200, r.text
        return r.json()

    def stop(self, group: bool = False, timeout: float = 15) -> int:
        """SIGINT to the program (or, like a terminal's Ctrl+C, to its whole process group)."""
        if group:
            os.killpg(self.proc.pid, signal.SIGINT)
        else:
            self.proc.send_signal(signal.SIGINT)
        return self.wait_exit(timeout, after="SIGINT")

    def wait_exit(self, timeout: float, after: str = "") -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"still running {timeout} s {'after ' + after if after else 'later'}:\n"
                                 f"{self.stderr}") from None
        for r in self._readers:
            r.join(5)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)


def launch(exe: Path, tmp: Path, *flags: str, env: dict | None = None) -> App:
    run_dir = tmp / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    return App([str(exe), "--no-browser", "--port", "0", *flags], env or minimal_env(tmp), run_dir)


def cached_model(tmp: Path, sha: str) -> Path:
    return tmp / "cache" / "models" / f"{sha}.gguf"


def assert_clean_exit(app: App, rc: int) -> None:
    """Exit 0 after SIGINT (App.stop waits at most 15 s: a hang, not a speed limit; how fast
    a program stops is measured by benchmarks/build_launch.py)."""
    assert rc == 0, f"exit code {rc}:\n{app.stderr}"
    assert "Traceback" not in app.stderr + app.stdout, app.stderr
    assert "llmpack: stopped" in app.stdout



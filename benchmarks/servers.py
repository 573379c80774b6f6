"""The servers the benchmarks start: `llmpack run` (start_llmpack) and llama-server.

llama-server, the C++ peer, is built from the very llama.cpp that our llama-cpp-python vendors,
with the same portable CMake flags as ./dev's wheel, so a comparison measures the serving
layers and not two different llama.cpps.

The build (about 10 minutes on 2 cores) is cached as
  <llmpack cache>/peers/llama-server-<llama-cpp-python version>-<flags key>
where the flags key is ./dev's (sha256 of the CMake flags), and found there afterwards.
LLMPACK_LLAMA_SERVER=/path/to/llama-server uses another binary instead.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from pathlib import Path

from llmpack.paths import cache_dir

VERSION = "0.3.36"     # llama-cpp-python, as pinned in pyproject.toml
PORTABLE_CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
                       "-DGGML_AVX512=OFF -DLLAMA_CURL=OFF")     # the same as ./dev


def cmake_args() -> str:
    return os.environ.get("LLMPACK_CMAKE_ARGS", PORTABLE_CMAKE_ARGS)


def binary_path() -> Path:
    key = hashlib.sha256(cmake_args().encode()).hexdigest()[:12]
    return cache_dir() / "peers" / f"llama-server-{VERSION}-{key}"


def find_llama_server() -> Path | None:
    override = os.environ.get("LLMPACK_LLAMA_SERVER")
    if override:
        return Path(override)
    path = binary_path()
    return path if path.is_file() else None


def build_llama_server(log=print) -> Path:
    """Download llama-cpp-python's sdist with pip, build its vendored llama.cpp's llama-server."""
    target = binary_path()
    work = cache_dir() / "peers" / f"llama.cpp-{VERSION}"
    sdist_dir, src_dir = work / "sdist", work / "src"
    build_dir = work / f"build-{target.name.rsplit('-', 1)[1]}"
    if not any(sdist_dir.glob("*.tar.gz")):
        log(f"downloading llama-cpp-python {VERSION}'s source with pip")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        f"llama-cpp-python=={VERSION}", "-d", str(sdist_dir)], check=True)
    llama_cpp = src_dir / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    if not llama_cpp.is_dir():
        with tarfile.open(next(sdist_dir.glob("*.tar.gz"))) as tar:
            tar.extractall(src_dir, filter="data")
    log(f"building llama-server from {llama_cpp} ({cmake_args()}); about 10 minutes on 2 cores")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", "-S", str(llama_cpp), "-B", str(build_dir), *generator, "-DCMAKE_BUILD_TYPE=Release",
                    *cmake_args().split(), "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", str(os.cpu_count() or 2)],
                   check=True)
    built = build_dir / "bin" / "llama-server"
    tmp = target.with_suffix(".tmp")
    shutil.copy2(built, tmp)
    os.replace(tmp, target)
    return target


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_llama_server(binary: Path, model: Path, *, ctx: int, parallel: int, threads: int | None = None,
                       flash_attn: str = "auto", extra: list[str] = ()) -> tuple[subprocess.Popen, str]:
    """`llama-server -c ctx -np parallel -kvu -t threads` on a free port; waits for /health."""
    port = free_port()
    cmd = [str(binary), "-m", str(model), "-c", str(ctx), "-np", str(parallel), "-kvu",
           "-t", str(threads or os.cpu_count() or 2), "-fa", flash_attn,
           "--host", "127.0.0.1", "--port", str(port), "--no-webui", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url, "llama-server")
    return proc, url


def start_llmpack(model: Path, *, ctx: int, parallel: int, extra: list[str] = ()) -> tuple[subprocess.Popen, str]:
    """`llmpack run` on the CPU on a free port, in a child process; waits for /health."""
    proc = subprocess.Popen([sys.executable, "-m", "llmpack", "run", str(model), "--no-browser", "--port", "0",
                             "--ctx", str(ctx), "--parallel", str(parallel), "--gpu-layers", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("LLMPACK_LISTENING"):
            url = line.split()[1].rstrip("/")
            break
    else:
        raise RuntimeError(f"llmpack run exited: {proc.stderr.read()[-2000:]}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    wait_healthy(proc, url, "llmpack run")
    return proc, url


def wait_healthy(proc: subprocess.Popen, url: str, name: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            raise RuntimeError(f"{name} exited with status {proc.returncode}:\n{err}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    if proc.stderr:   # keep its log from filling the pipe
                        threading.Thread(target=proc.stderr.read, daemon=True).start()
                    return
        except OSError:
            pass
        time.sleep(0.25)
    proc.terminate()
    raise RuntimeError(f"{name} did not become healthy within {timeout:.0f} s")


if __name__ == "__main__":
    path = find_llama_server() or build_llama_server()
    print(path)

"""`llmpack stub`, `llmpack build`, `llmpack demo` and what a built executable does, for real:
the PyInstaller runtime stub (built once, cached by its key), real executables, real HTTP.

Built programs run from a temporary folder with a minimal environment (no venv on PATH, no
PYTHONPATH, HOME and LLMPACK_CACHE in the temporary folder), so a pass shows they do not lean
on the developer's Python. The byte layout and its refusal paths are tests/test_packfile.py's;
the demo model's file is tests/test_build_demo.py, --forget and a second launch
tests/test_build_relaunch.py.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from ggufs import CHATML_TEMPLATE
from tmpfs import on_small_tmpfs
from llmpack.builder import packfile
from llmpack.builder import stub as stub_module
from llmpack.builder.stub import exe_name, get_stub, stub_info, stub_key
from llmpack.progress import human_bytes
from apps import CHECKING, UNPACKING, assert_clean_exit, cached_model, launch, llmpack_cli, minimal_env
from helpers.built import *  # noqa: F401,F403 - tiny_gguf, tiny_exe, tiny_zstd_exe: fixtures

pytestmark = pytest.mark.stub


def same_sources(stub: Path) -> None:
    if stub_key() != stub.parent.name:
        pytest.fail("llmpack's sources changed during this test session (the stub key moved on); run it again")


# --------------------------------------------------------------------------- the stub


def test_stub_is_cached_under_its_key(stub, monkeypatch):
    same_sources(stub)
    key = stub_key()
    assert stub.name == exe_name() and stub.parent.name == key
    assert key.startswith("0.") and f"py{sys.version_info[0]}.{sys.version_info[1]}" in key
    info = stub_info(stub)
    assert info["key"] == key and info["llama_cpp_version"] and info["size"] == stub.stat().st_size
    monkeypatch.setattr(stub_module, "build_stub", lambda *a, **k: pytest.fail("rebuilt a cached stub"))
    assert get_stub() == stub   # cached: no rebuild
    # lean: no test or build tools inside (they would cost every launch)
    from PyInstaller.archive.readers import CArchiveReader

    names = set(CArchiveReader(str(stub)).toc)
    libs = {n for n in names if n.startswith("llama_cpp/lib/")}
    assert {"llama_cpp/lib/libllama.so", "llama_cpp/lib/libggml.so", "llama_cpp/lib/libmtmd.so"} <= libs
    # libraries stored uncompressed (faster launches): 14 CPU variants + Vulkan + mtmd, and Pillow for the
    # sandboxed picture decoder (issue 36): 158.5 MB measured on 2026-12-04
    assert stub.stat().st_size < 175e6


def test_llmpack_stub_prints_and_copies(stub, tmp_path):
    same_sources(stub)
    proc = llmpack_cli("stub", "-o", str(tmp_path / "my-stub"))
    assert str(stub) in proc.stdout and "MiB" in proc.stdout
    assert (tmp_path / "my-stub").read_bytes() == stub.read_bytes()
    assert os.access(tmp_path / "my-stub", os.X_OK)


def test_the_bare_stub_explains_itself(stub, tmp_path):
    proc = subprocess.run([str(stub)], capture_output=True, text=True, timeout=120,
                          env=minimal_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2
    assert "runtime stub" in proc.stderr and "llmpack build" in proc.stderr and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- a tiny model end to end


def test_tiny_executable_serves_its_model_in_place_and_checks_it_once(tiny_exe, tiny_gguf, tmp_path):
    """The model is read from the program's own bytes (llama_model_load_from_file_ptr): the cache
    gets a marker of the one sha256 check, never a copy of the model (issue 20)."""
    sha = hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    app = launch(tiny_exe, tmp_path)
    try:
        app.wait_listening()
        health = app.wait_healthy()
        # the defaults recorded by `llmpack build`
        assert health["display_name"] == "Tiny Chat" and health["n_ctx"] == 512
        assert health["system_prompt"] == "Be brief."
        reply = app.chat()
        first_answer = reply["choices"][0]["message"]["content"]
        assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["role"] == "assistant"
        assert reply["usage"]["completion_tokens"] > 0
        models = requests.get(app.url + "/v1/models", timeout=30).json()
        assert models["data"][0]["id"] == "Tiny Chat"
    finally:
        rc = app.stop()
    assert_clean_exit(app, rc)
    assert CHECKING in app.stderr and UNPACKING not in app.stderr + app.stdout   # first run: checked once...
    models = tmp_path / "cache" / "models"
    assert sorted(p.name for p in models.iterdir()) == [f"{sha}.inplace.ok"]   # ...and no copy
    marker = models / f"{sha}.inplace.ok"
    assert json.loads(marker.read_text())["path"] == str(tiny_exe.resolve())
    before = marker.stat()

    # ...and never again; command-line flags beat the recorded defaults
    app = launch(tiny_exe, tmp_path, "--name", "Renamed", "--ctx", "256")
    try:
        app.wait_listening()
        health = app.wait_healthy()
        assert health["display_name"] == "Renamed" and health["n_ctx"] == 256
        assert app.chat()["choices"][0]["message"]["content"] == first_answer   # the same model, greedy
    finally:
        rc = app.stop(group=True)   # a terminal's Ctrl+C: every process of the program gets it
    assert_clean_exit(app, rc)
    assert CHECKING not in app.stderr
    after = marker.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(p.name for p in models.iterdir()) == [f"{sha}.inplace.ok"]


def test_a_compressed_build_says_where_it_unpacks_and_how_big(tiny_zstd_exe, tiny_gguf, tmp_path):
    """The console says it in one plain line before unpacking, and /health's loading body carries
    `"unpack": {"path", "bytes"}` (the page's loading card shows its message)."""
    sha, size = hashlib.sha256(tiny_gguf.read_bytes()).hexdigest(), tiny_gguf.stat().st_size
    models = tmp_path / "cache" / "models"
    models.mkdir(parents=True)
    lock = models / f"{sha}.gguf.lock"   # held, so the launch stays in its unpacking step while /health is read
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    app = launch(tiny_zstd_exe, tmp_path)
    try:
        app.wait_listening()
        deadline = time.monotonic() + 60
        while not lock_waiters(lock):
            assert time.monotonic() < deadline, app.stderr
            time.sleep(0.05)
        health = requests.get(app.url + "/health", timeout=5).json()
        os.close(fd)
        fd = -1
        app.wait_healthy()
    finally:
        if fd >= 0:
            os.close(fd)
        rc = app.stop()
    assert_clean_exit(app, rc)
    line = f"llmpack: first start: unpacking the model ({human_bytes(size)}) to {models}; this happens once."
    assert line in app.stdout.splitlines(), app.stdout
    assert health["phase"] == "extracting" and health["unpack"] == {"path": str(models), "bytes": size}
    assert health["message"] == f"First start: unpacking the model ({human_bytes(size)}) to {models}; this happens once."
    assert hashlib.sha256(cached_model(tmp_path, sha).read_bytes()).hexdigest() == sha


def test_info_help_and_extract_to(tiny_exe, tiny_gguf, tmp_path):
    env = minimal_env(tmp_path)
    proc = subprocess.run([str(tiny_exe), "--info"], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    # the disk a launch needs beyond the file: none, the model is read in place
    assert info.pop("disk") == {"how": "in place", "bytes": 0, "path": None, "present": False}
    assert info == packfile.read_manifest(tiny_exe).to_dict()
    assert info["model"]["sha256"] == hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    assert info["defaults"] == {"ctx": 512, "parallel": 4, "gpu_layers": None, "system": "Be brief.",
                                "name": "Tiny Chat"}
    assert info["recipe"]["chat_template"] == CHATML_TEMPLATE and "<|im_end|>" in info["recipe"]["stop"]
    assert info["llama_cpp_version"] and info["source_model"]["file"] == tiny_gguf.name
    assert not (tmp_path / "cache" / "models").exists() or not any((tmp_path / "cache" / "models").iterdir())

    proc = subprocess.run([str(tiny_exe), "--help"], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0 and "--api-key" in proc.stdout and "--extract-to" in proc.stdout
    assert "Tiny Chat" in proc.stdout

    proc = subprocess.run([str(tiny_exe), "--extract-to", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).read_bytes() == tiny_gguf.read_bytes()


def test_a_compressed_build_unpacks_to_the_same_model(tiny_zstd_exe, tiny_gguf, tmp_path):
    out = tiny_zstd_exe
    m = packfile.read_manifest(out).model
    assert m.compression == "zstd" and m.stored_size < m.size
    proc = subprocess.run([str(out), "--extract-to", str(tmp_path / "x")], capture_output=True, text=True,
                          timeout=120, env=minimal_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).read_bytes() == tiny_gguf.read_bytes()
    proc = subprocess.run([str(out), "--info"], capture_output=True, text=True, timeout=120,
                          env=minimal_env(tmp_path), cwd=tmp_path)
    models = tmp_path / "cache" / "models"
    assert json.loads(proc.stdout)["disk"] == {"how": "unpack", "bytes": m.size, "present": False,
                                               "path": str(models / f"{m.sha256}.gguf")}


def test_a_damaged_copy_is_refused_in_one_line(tiny_exe, tmp_path):
    bad = tmp_path / "damaged-chat"
    shutil.copyfile(tiny_exe, bad)
    os.chmod(bad, 0o755)
    m = packfile.read_manifest(bad).model
    with open(bad, "r+b") as f:   # flip bytes in the middle of the model
        f.seek(m.offset + m.size // 2)
        chunk = f.read(64)
        f.seek(m.offset + m.size // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))
    app = launch(bad, tmp_path)
    rc = app.wait_exit(60)
    assert rc == 2, app.stderr
    errors = [line for line in app.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "corrupted" in errors[0] and "damaged-chat" in errors[0], app.stderr
    assert "Traceback" not in app.stderr + app.stdout
    models = tmp_path / "cache" / "models"
    assert not models.exists() or not list(models.glob("*.gguf*")), list(models.iterdir())

    # a file whose end is missing (trailer gone) is refused before anything listens
    cut = tmp_path / "cut-chat"
    cut.write_bytes(tiny_exe.read_bytes()[:-64])
    os.chmod(cut, 0o755)
    proc = subprocess.run([str(cut), "--no-browser", "--port", "0"], capture_output=True, text=True, timeout=120,
                          env=minimal_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "LLMPACK_LISTENING" not in proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and "incomplete" in proc.stderr, proc.stderr


def lock_waiters(lock: Path) -> set[int]:
    """Pids waiting for an flock on `lock`, from /proc/locks ("N: -> FLOCK ADVISORY WRITE pid maj:min:ino ...")."""
    ino, waiting = lock.stat().st_ino, set()
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if len(parts) > 6 and parts[1] == "->" and parts[2] == "FLOCK" and int(parts[6].split(":")[2]) == ino:
            waiting.add(int(parts[5]))
    return waiting


def test_two_first_launches_at_once_unpack_the_model_once(tiny_zstd_exe, tiny_gguf, tmp_path):
    """Two launches of a new (compressed) program at the same moment, the second with
    --new-instance (without it, it would open the first one's page once that listens). The test
    holds the extraction lock until both wait for it, so they really race for it when it is released."""
    sha = hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    models = tmp_path / "cache" / "models"
    models.mkdir(parents=True)
    lock = models / f"{sha}.gguf.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    apps = [launch(tiny_zstd_exe, tmp_path / f"launch-{i}", "--new-instance", env=minimal_env(tmp_path))
            for i in range(2)]
    try:
        for app in apps:
            app.wait_listening()
        deadline = time.monotonic() + 60
        while len(lock_waiters(lock)) < 2:
            assert time.monotonic() < deadline, f"the launches never waited for the lock: {lock_waiters(lock)}"
            time.sleep(0.05)
        os.close(fd)   # both race for it now
        fd = -1
        for app in apps:
            assert app.wait_healthy()["status"] == "ok"
            assert app.chat()["usage"]["completion_tokens"] > 0
    finally:
        if fd >= 0:
            os.close(fd)
        codes = [app.stop() for app in apps]
    for app, rc in zip(apps, codes):
        assert_clean_exit(app, rc)
    # one unpacked (and said so), the other waited for it and used its file
    assert sum("llmpack: first start: unpacking the model" in app.stdout for app in apps) == 1
    assert sorted(p.name for p in models.iterdir()) == [f"{sha}.gguf", f"{sha}.gguf.ok"]   # no temp, no lock
    assert hashlib.sha256((models / f"{sha}.gguf").read_bytes()).hexdigest() == sha


def test_a_full_cache_disk_is_one_clear_line(tiny_zstd_exe, tmp_path):
    """The cache folder is a 256 KiB tmpfs (in a mount namespace of its own: no root needed,
    nothing left mounted); the model of a compressed build does not fit."""
    cache = tmp_path / "cache"
    cache.mkdir()
    proc = subprocess.run(on_small_tmpfs(cache, "256k", [str(tiny_zstd_exe), "--no-browser", "--port", "0"]),
                          capture_output=True, text=True, timeout=120, env=minimal_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, proc.stderr
    assert "not enough disk space" in errors[0] and str(cache / "models") in errors[0] and "LLMPACK_CACHE" in errors[0]
    assert "MiB needed" in errors[0] and "Traceback" not in proc.stdout + proc.stderr


def test_an_unusable_cache_folder_is_one_clear_line(tiny_exe, tmp_path):
    (tmp_path / "a-file").write_text("in the way")
    cache = tmp_path / "a-file" / "cache"
    proc = subprocess.run([str(tiny_exe), "--no-browser", "--port", "0"], capture_output=True, text=True,
                          timeout=120, env=minimal_env(tmp_path, LLMPACK_CACHE=str(cache)), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and f"cannot use the folder {cache}" in errors[0] and "LLMPACK_CACHE" in errors[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_inspect_reads_a_built_executable(tiny_exe):
    proc = llmpack_cli("inspect", str(tiny_exe))
    assert "embedded at byte" in proc.stdout and "tiny-test-model" in proc.stdout
    assert "disk: the model is read from this file where it is; a launch writes no copy" in proc.stdout
    data = json.loads(llmpack_cli("inspect", str(tiny_exe), "--json").stdout)
    assert data["offset"] == packfile.read_manifest(tiny_exe).model.offset
    assert data["disk"] == {"how": "in place", "bytes": 0, "path": None, "present": False}


def test_build_refusals_are_one_line(tiny_gguf, tiny_exe, stub, tmp_path):
    proc = llmpack_cli("build", str(tiny_gguf), "-o", str(tmp_path / "app.exe"), "--stub", str(stub), check=False)
    assert proc.returncode == 2 and "Windows" in proc.stderr and "Traceback" not in proc.stderr
    proc = llmpack_cli("build", str(tiny_exe), "-o", str(tmp_path / "again"), "--stub", str(stub), check=False)
    assert proc.returncode == 2 and "already a program made by llmpack" in proc.stderr
    assert not (tmp_path / "app.exe").exists() and not (tmp_path / "again").exists()


def test_a_full_output_disk_is_one_line_and_leaves_no_partial_file(tiny_gguf, stub, tmp_path):
    """-o into a 1 MiB tmpfs (the stub alone is ~76 MB); what the folder holds afterwards is
    listed inside the mount namespace, before the tmpfs goes away."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    build = [sys.executable, "-m", "llmpack", "build", str(tiny_gguf), "-o", str(out_dir / "app"), "--stub", str(stub)]
    then_list = ["sh", "-c", '"$@"; rc=$?; echo "left: $(ls -A "$0")"; exit $rc', str(out_dir), *build]
    proc = subprocess.run(on_small_tmpfs(out_dir, "1m", then_list), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("llmpack: error: the disk filled up while writing")
    assert str(out_dir / "app") in proc.stderr and "MiB needed" in proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "left:"


def test_sidecar_build_runs(tiny_gguf, stub, tmp_path):
    out = tmp_path / "side" / "tiny-side"
    llmpack_cli("build", str(tiny_gguf), "-o", str(out), "--sidecar", "--recipe", "chatml", "--stub", str(stub))
    assert (out.parent / "tiny-side.gguf").read_bytes() == tiny_gguf.read_bytes()
    assert out.stat().st_size < stub.stat().st_size + 1e6
    app = launch(out, tmp_path)
    try:
        app.wait_listening()
        app.wait_healthy()
        assert app.chat()["usage"]["completion_tokens"] > 0
    finally:
        rc = app.stop()
    assert_clean_exit(app, rc)

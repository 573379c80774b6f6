"""Spec for llmpack.builder.extract: the model of a built file, extracted once into the cache and
verified (sha256, then a `.ok` marker), reused without reading it again, never mistaken for valid
when an extraction was interrupted, made once when two launches extract at the same time, and a
full disk is one clear line that leaves nothing behind.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from llmpack.builder import extract
from tmpfs import on_small_tmpfs
from helpers.stubs import *  # noqa: F401,F403 - the stubs and the model: fixtures


def test_extract_once_then_reuse_without_reading(packed, model, tmp_path, monkeypatch):
    out, manifest = packed
    monkeypatch.setenv("LLMPACK_CACHE", str(tmp_path / "cache"))
    calls = []
    path = extract.extract_model(out, manifest, progress=lambda done, total: calls.append(done))
    assert path == tmp_path / "cache" / "models" / f"{manifest.model.sha256}.gguf"
    assert path.read_bytes() == model.read_bytes()
    assert calls and calls[-1] == model.stat().st_size
    assert Path(str(path) + ".ok").is_file()
    mtime = path.stat().st_mtime_ns

    # proof that the second launch does not read the model: damage it inside the executable
    data = bytearray(out.read_bytes())
    data[manifest.model.offset + 10] ^= 0xFF
    out.write_bytes(bytes(data))
    calls.clear()
    assert extract.extract_model(out, manifest, progress=lambda d, t: calls.append(d)) == path
    assert calls == [] and path.stat().st_mtime_ns == mtime


def test_interrupted_extraction_is_not_mistaken_for_valid(packed, model, tmp_path):
    out, manifest = packed
    dest = tmp_path / "models"
    dest.mkdir()
    sha = manifest.model.sha256
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (dest / f"{sha}.gguf.tmp-{dead.pid}").write_bytes(b"partial")
    (dest / f"{sha}.gguf.tmp-{os.getppid()}").write_bytes(b"someone else, still running")
    final = dest / f"{sha}.gguf"
    final.write_bytes(model.read_bytes()[:1000])  # truncated, no marker
    assert extract.extract_model(out, manifest, dest).read_bytes() == model.read_bytes()
    assert not (dest / f"{sha}.gguf.tmp-{dead.pid}").exists()
    assert (dest / f"{sha}.gguf.tmp-{os.getppid()}").exists()

    # right size, wrong bytes, marker stale (mtime changed): re-verified and replaced
    bad = bytearray(model.read_bytes())
    bad[5] ^= 1
    final.write_bytes(bytes(bad))
    assert extract.extract_model(out, manifest, dest).read_bytes() == model.read_bytes()

    # crash between rename and marker: the complete file is verified once, not copied again
    os.unlink(str(final) + ".ok")
    calls = []
    mtime = final.stat().st_mtime_ns
    assert extract.extract_model(out, manifest, dest, progress=lambda d, t: calls.append(d)) == final
    assert calls and final.stat().st_mtime_ns == mtime and Path(str(final) + ".ok").is_file()


def test_two_extractions_at_once_make_one_verified_file(packed, model, tmp_path):
    """Two first launches at once: the second waits for the first and uses its file."""
    out, manifest = packed
    dest = tmp_path / "models"
    first_copying, release = threading.Event(), threading.Event()
    copied: dict[str, list[int]] = {"first": [], "second": []}

    def first_progress(done: int, total: int) -> None:
        copied["first"].append(done)
        first_copying.set()
        assert release.wait(60)

    results: dict[str, Path | BaseException] = {}

    def run(name: str, progress) -> None:
        try:
            results[name] = extract.extract_model(out, manifest, dest, progress=progress)
        except BaseException as exc:  # noqa: BLE001 - reported below
            results[name] = exc

    first = threading.Thread(target=run, args=("first", first_progress))
    first.start()
    assert first_copying.wait(60)
    second = threading.Thread(target=run, args=("second", lambda d, t: copied["second"].append(d)))
    second.start()
    second.join(1.0)
    assert second.is_alive(), "the second extraction did not wait for the first"
    release.set()
    first.join(60)
    second.join(60)
    final = dest / f"{manifest.model.sha256}.gguf"
    assert results == {"first": final, "second": final}
    assert copied["second"] == []                      # it found the first one's verified file
    assert final.read_bytes() == model.read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == [final.name, final.name + ".ok"]   # no temp or lock file


FULL_DISK = r"""
import json, shutil, subprocess, sys
from llmpack.builder import extract, packfile
exe, dest, lie = sys.argv[1], sys.argv[2], sys.argv[3] == "lie"
if lie:   # a filesystem that reports more free space than it has, or another program filling it
    shutil.disk_usage = lambda path: shutil._ntuple_diskusage(1 << 40, 0, 1 << 40)
try:
    extract.extract_model(exe, packfile.read_manifest(exe), dest)
    result = {"error": None}
except packfile.PackError as exc:
    result = {"error": str(exc)}
import os
result["left"] = sorted(os.listdir(dest))
print(json.dumps(result))
"""


@pytest.mark.parametrize("when", ["checked before writing", "filled while writing"])
def test_a_full_disk_is_one_clear_line_and_leaves_nothing(packed, tmp_path, when):
    """The cache folder is a 1 MiB tmpfs (a mount namespace of its own: no root needed, nothing
    left mounted); the model is 3 MiB."""
    out, _ = packed
    dest = tmp_path / "cache"
    dest.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK)
    lie = "lie" if when == "filled while writing" else "honest"
    proc = subprocess.run(on_small_tmpfs(dest, "1m", [sys.executable, str(script), str(out), str(dest), lie]),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    error = result["error"]
    assert error and "\n" not in error and str(dest) in error and "LLMPACK_CACHE" in error
    assert ("not enough disk space" if when == "checked before writing" else "the disk filled up") in error
    assert result["left"] == []


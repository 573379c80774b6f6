"""The demo model (Gemma 3 270M) in a built file, for real: it chats with its model read in
place and starts again without checking it, Ctrl+C while the model is checked or loads stops
cleanly, and `llmpack demo` builds, launches and forwards Ctrl+C. The tiny model's file is
tests/test_build.py."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from llmpack.builder import packfile
from apps import CHECKING, FILE_READ, UNPACKING, App, assert_clean_exit, cached_model, launch, llmpack_cli

pytestmark = pytest.mark.stub


@pytest.fixture(scope="module")
def demo_exe(demo_model, stub, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("built-demo") / "gemma-chat"
    proc = llmpack_cli("build", str(demo_model), "-o", str(out), "--stub", str(stub))
    assert "base model no chat template and no instruct/chat tag: it continues text" in proc.stdout
    return out


# --------------------------------------------------------------------------- the demo model


@pytest.mark.demo
def test_demo_executable_chats_in_place_and_starts_again_without_checking(demo_exe, demo_model, tmp_path):
    m = packfile.read_manifest(demo_exe)
    assert m.recipe["name"] == "gemma" and m.defaults["name"] and m.extra["base_model"] is True
    app = launch(demo_exe, tmp_path)
    try:
        app.wait_listening()
        assert app.wait_healthy()["base_model"] is True   # the chat page shows its notice
        reply = app.chat([{"role": "user", "content": "What is the capital of France? One word."}], max_tokens=24)
        text = reply["choices"][0]["message"]["content"]
        assert text.strip() and "<end_of_turn>" not in text
    finally:
        rc = app.stop()
    assert_clean_exit(app, rc)
    assert CHECKING in app.stderr and UNPACKING not in app.stderr
    assert not cached_model(tmp_path, m.model.sha256).exists()   # read in place: no 253 MB copy
    marker = tmp_path / "cache" / "models" / f"{m.model.sha256}.inplace.ok"
    before = marker.stat()

    app = launch(demo_exe, tmp_path)
    try:
        app.wait_listening()
        app.wait_healthy()
    finally:
        rc = app.stop(group=True)
    assert_clean_exit(app, rc)
    assert CHECKING not in app.stderr
    assert (marker.stat().st_ino, marker.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


@pytest.mark.demo
@pytest.mark.parametrize("phase", ["checking", "loading"])
def test_ctrl_c_while_the_model_is_checked_or_loads_stops_cleanly(demo_exe, phase, tmp_path):
    """A Ctrl+C during the first seconds is a normal thing to do. The load runs in a thread inside
    llama.cpp: exiting under it once aborted the program ("FATAL: exception not rethrown", exit 134).
    The first check and the load are abandoned, not finished first, and nothing is left half done.
    (Stopping an unpacking, of a compressed build, is the same code path: Stopping from its progress.)"""
    for run in range(3):   # not retries: every run must pass (the abort came only now and then)
        tmp = tmp_path / str(run)
        app = launch(demo_exe, tmp, *(["--verbose"] if phase == "loading" else []))
        try:
            app.wait_listening()
            app.wait_phase(phase)
            if phase == "loading":
                app.wait_line(FILE_READ)   # the file is in memory: llama.cpp loads it now
        finally:
            rc = app.stop(group=True)
        assert_clean_exit(app, rc)
        assert "could not load" not in app.stderr and "model ready" not in app.stdout, app.stdout + app.stderr
        models = tmp / "cache" / "models"
        left = sorted(p.name for p in models.iterdir()) if models.exists() else []
        assert not [n for n in left if ".tmp" in n or n.endswith(".gguf")], left   # no copy, nothing half written
        for marker in (models / n for n in left if n.endswith(".inplace.ok")):   # a check that finished first
            assert json.loads(marker.read_text())["path"] == str(demo_exe.resolve())


@pytest.mark.demo
def test_llmpack_demo_builds_launches_and_forwards_ctrl_c(demo_model, stub, tmp_path):
    """`llmpack demo` (the README's first command) with the real stub and model linked into a
    private cache, so nothing is rebuilt and the extraction lands in the temporary folder."""
    cache = tmp_path / "cache"
    (cache / "stubs").mkdir(parents=True)
    (cache / "stubs" / stub.parent.name).symlink_to(stub.parent, target_is_directory=True)
    (cache / "demo").mkdir()
    (cache / "demo" / demo_model.name).symlink_to(demo_model)
    out = tmp_path / "here" / "gemma-chat"
    env = {**os.environ, "LLMPACK_CACHE": str(cache)}
    env.pop("PYTHONPATH", None)
    app = App([sys.executable, "-m", "llmpack", "demo", "gemma", "-o", str(out), "--no-browser", "--port", "0"], env,
              tmp_path)
    try:
        app.wait_listening(timeout=600)
        app.wait_healthy()
        assert app.chat(max_tokens=8)["usage"]["completion_tokens"] > 0
    finally:
        rc = app.stop()   # SIGINT to `llmpack demo` only: it must pass it on
    assert_clean_exit(app, rc)
    assert out.is_file() and packfile.read_manifest(out).model.size == demo_model.stat().st_size
    assert "building" in app.stderr

    mtime = out.stat().st_mtime_ns   # up to date: launched as is
    app = App([sys.executable, "-m", "llmpack", "demo", "gemma", "-o", str(out), "--no-browser", "--port", "0"], env,
              tmp_path)
    try:
        app.wait_listening(timeout=120)
        app.wait_answering()
    finally:
        rc = app.stop(group=True)
    assert_clean_exit(app, rc)
    assert "up to date" in app.stderr and out.stat().st_mtime_ns == mtime

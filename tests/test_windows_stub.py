"""The Windows runtime stub made here (builder/windows): what it holds (python.org's CPython, our
mingw-built DLLs, nothing of Wine's), its bootloader compiled here, a model too big for a Windows
program, and the published stub wheel that builds chat.exe with no Windows toolchain at all.
chat.exe under Wine is tests/test_windows.py."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from apps import llmpack_cli
from helpers.windows import python_org_file
from llmpack.builder import packfile
from llmpack.builder.stub import stub_info

pytestmark = pytest.mark.stub


def test_windows_stub_holds_python_orgs_runtime_our_dlls_and_no_wine_files(windows_stub):
    from PyInstaller.archive.readers import CArchiveReader

    info = stub_info(windows_stub)
    assert info["target"] == "windows-x64" and info["platform"] == "win_amd64" and info["python"] == "3.13"
    archive = CArchiveReader(str(windows_stub))
    names = {n.replace("\\", "/") for n in archive.toc}   # the archive keeps Windows separators
    cpu = {n for n in names if re.fullmatch(r"llama_cpp/lib/ggml-cpu-[\w]+\.dll", n)}
    assert {"llama_cpp/lib/libllama.dll", "llama_cpp/lib/ggml.dll", "llama_cpp/lib/ggml-base.dll",
            "llama_cpp/lib/ggml-vulkan.dll", "llama_cpp/lib/ggml-rpc.dll"} <= names
    assert len(cpu) >= 10 and "llama_cpp/lib/ggml-cpu-x64.dll" in cpu and "llama_cpp/lib/ggml-cpu-haswell.dll" in cpu
    assert not any(n.lower().endswith("vulkan-1.dll") for n in names)   # the GPU driver's, never ours
    # python.org's interpreter, byte for byte, and nothing of Wine's (its DLLs say so in their DOS stub)
    assert archive.extract("python313.dll") == python_org_file("python313.dll")
    assert archive.extract("VCRUNTIME140.dll") == python_org_file("vcruntime140.dll")
    assert "ggml.dll" not in names and "ggml-base.dll" not in names   # one ggml only: llama_cpp/lib's
    for name in archive.toc:
        if name.lower().endswith((".dll", ".pyd")):
            assert b"Wine builtin DLL" not in archive.extract(name)[:1024], name


def test_windows_bootloader_is_compiled_here_not_pyinstallers_prebuilt(windows_stub):
    head = windows_stub.read_bytes()[:400_000]
    assert b"Mingw-w64 runtime failure" in head          # mingw's C runtime, linked into our build
    assert head[:2] == b"MZ"


def test_a_model_too_big_for_windows_goes_beside_the_exe_with_one_line(windows_stub, tiny_model_factory, tmp_path):
    """Windows will not start a PE of 4 GiB or more: a bigger result is the program plus the model
    beside it. The model here is a small GGUF grown past 4 GiB with a hole (no disk used)."""
    model = tmp_path / "big.gguf"
    shutil.copyfile(tiny_model_factory(), model)
    with open(model, "r+b") as f:
        f.truncate(4 * 1024**3 + 4096)
    beside = tmp_path / "big.gguf"   # where the sidecar goes: the model already sits there, so it is only checked
    proc = llmpack_cli("build", str(model), "-o", str(tmp_path / "big.exe"), "--stub", str(windows_stub),
                       timeout=900)
    lines = [ln for ln in proc.stderr.splitlines() if "4 GB" in ln]
    assert len(lines) == 1 and "big.gguf" in lines[0] and "both files" in lines[0], proc.stderr
    assert (tmp_path / "big.exe").stat().st_size < 300e6 and beside.is_file()
    assert packfile.read_manifest(tmp_path / "big.exe").model.location == "sidecar"


def test_a_published_stub_wheel_builds_chat_exe_without_wine_or_mingw(windows_stub, demo_model, tmp_path):
    """What a user gets from `pip install llmpack-stub-windows-x64`: `llmpack build -o chat.exe`
    with no Windows toolchain at all (nothing on PATH, an empty cache)."""
    from llmpack.builder.stub_wheel import write_stub_wheel

    wheel = write_stub_wheel(windows_stub, "windows-x64", stub_info(windows_stub), tmp_path / "dist")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    env = {"HOME": str(tmp_path), "PATH": str(tmp_path / "no-tools"), "PYTHONPATH": str(site),
           "LLMPACK_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "chat.exe"
    llmpack_cli("build", str(demo_model), "-o", str(out), env=env)
    assert packfile.read_manifest(out).extra["stub"]["key"] == stub_info(windows_stub)["key"]
    assert not (tmp_path / "cache" / "windows").exists()

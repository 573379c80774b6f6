"""A vision model's chat.exe under Wine: `llmpack build MODEL --mmproj FILE -o vision.exe` on Linux
(the Windows stub with llama.cpp's mtmd.dll, builder/windows/llama_dlls.py), started in a fresh
Windows 10 profile, answering OpenAI image_url parts as the Linux file does: the picture's rows
count in usage, two pictures give two greedy answers, the same picture is served from the cache,
and a WebP (read by Pillow, staged in the Windows stub) is the same pixels as its PNG.

The model is the test-made one (tests/vision_ggufs.py); what a real VLM must see on a real PC is
the checklist in docs/PORTABILITY.md.
"""
from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest
import requests
from apps import llmpack_cli
from picture_files import png, webp
from helpers.windows import *  # noqa: F401,F403 - pc: a fixture
from helpers.windows import ctrl_c, model_files, start
from vision_ggufs import write_tiny_mmproj

from llmpack.builder import packfile
from llmpack.builder.stub import stub_info
from llmpack.builder.windows.llama_dlls import ALLOWED_IMPORTS
from llmpack.builder.windows.tools import dll_imports

pytestmark = pytest.mark.stub

IMAGE_ROWS = 16          # the test projector's rows per picture
ASK = "what is in the picture ?"


@pytest.fixture(scope="module")
def vision_exe(tiny_chat_model, windows_stub, tmp_path_factory) -> Path:
    """The one built file of this module, made by the plain CLI: `.exe` picks the Windows stub."""
    mmproj = write_tiny_mmproj(tmp_path_factory.mktemp("projector") / "mmproj-tiny-f16.gguf", n_embd_text=64)
    out = tmp_path_factory.mktemp("built-win-vision") / "vision.exe"
    proc = llmpack_cli("build", str(tiny_chat_model), "--mmproj", str(mmproj), "-o", str(out))
    assert f"wrote {out}" in proc.stdout, proc.stdout + proc.stderr
    assert stub_info(windows_stub)["target"] == "windows-x64" and out.read_bytes()[:2] == b"MZ"
    return out


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode()


def chat(url: str, *images: str, turns: tuple = ()) -> dict:
    content = [{"type": "text", "text": ASK}, *({"type": "image_url", "image_url": {"url": u}} for u in images)]
    r = requests.post(url + "/v1/chat/completions", timeout=300, json={
        "messages": [{"role": "user", "content": content}, *turns], "max_tokens": 12, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_windows_stub_holds_mtmd_which_imports_only_windows_and_llama(windows_stub, tmp_path):
    """llama_cpp.mtmd_cpp loads llama_cpp\\lib\\libmtmd.dll (or mtmd.dll); with the static runtime
    flags it needs no libstdc++/winpthread DLL a PC lacks."""
    from PyInstaller.archive.readers import CArchiveReader

    archive = CArchiveReader(str(windows_stub))
    (name,) = [n for n in archive.toc if n.replace("\\", "/") in ("llama_cpp/lib/libmtmd.dll", "llama_cpp/lib/mtmd.dll")]
    dll = tmp_path / "libmtmd.dll"
    dll.write_bytes(archive.extract(name))
    imports = {i.lower() for i in dll_imports(dll)}
    assert {"libllama.dll", "ggml.dll", "ggml-base.dll"} <= imports, imports
    assert all(ALLOWED_IMPORTS.match(i) for i in imports), imports   # no libstdc++-6.dll, libwinpthread-1.dll


def test_vision_exe_reads_pictures_under_wine(vision_exe, pc):
    manifest = packfile.read_manifest(vision_exe)
    mmproj_sha = manifest.extra["mmproj"]["sha256"]
    app = start(pc, vision_exe)
    try:
        health = app.wait_healthy()
        assert health["backend"]["cpu_variant"], health
        plain = chat(app.url)
        first = chat(app.url, data_url(png(seed=31)))
        assert first["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"] + IMAGE_ROWS + 1, first["usage"]
        other = chat(app.url, data_url(png(seed=32)))
        answer = first["choices"][0]["message"]["content"]
        assert answer != other["choices"][0]["message"]["content"]     # the picture's rows arrived
        turn2 = ({"role": "assistant", "content": answer}, {"role": "user", "content": "and the colour ?"})
        second = chat(app.url, data_url(png(seed=31)), turns=turn2)
        cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= plain["usage"]["prompt_tokens"] + IMAGE_ROWS - 16, second["usage"]
        same = chat(app.url, data_url(webp(seed=31), "image/webp"))      # lossless WebP: the same pixels
        assert same["choices"][0]["message"]["content"] == answer
        assert same["usage"]["prompt_tokens_details"]["cached_tokens"] >= IMAGE_ROWS, same["usage"]
    finally:
        assert ctrl_c(app) == 0, app.stderr
    # the projector was read inside vision.exe (mtmd_init_from_file_at): checked once, never copied
    kept = [p.name for p in model_files(pc) if p.name.startswith(mmproj_sha)]
    assert kept == [f"{mmproj_sha}.inplace.ok"], kept


def test_info_names_the_projector_under_wine(vision_exe, pc):
    info = subprocess.run(["wine", str(vision_exe), "--info"], capture_output=True, text=True, env=pc.env(),
                          stdin=subprocess.DEVNULL, timeout=300)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["mmproj"]["sha256"] == packfile.read_manifest(vision_exe).extra["mmproj"]["sha256"]

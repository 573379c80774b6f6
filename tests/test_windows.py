"""`llmpack build model.gguf -o chat.exe` on Linux, and that chat.exe under Wine, as a recipient's
Windows PC would run it: the Windows runtime stub made here (builder/windows), a demo-model
program built from it by the ordinary CLI, started in a fresh Wine prefix (a new Windows 10 user
profile), its per-user folders, its console, its server, its refusals, and signing it. The stub
itself is tests/test_windows_stub.py.

Wine runs the very file we would send (PE loader, PyInstaller's bootloader compiled here,
python.org's CPython, the mingw-built llama.cpp DLLs). What needs a real PC (Defender,
SmartScreen, GPU drivers) is the checklist in docs/PORTABILITY.md.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest
import requests

from apps import CHECKING, UNPACKING, App, llmpack_cli
from doc_files import bomb_pdf, endless_pdf, make_docx, make_pdf
from helpers.ports import free_port
from helpers.windows import *  # noqa: F401,F403 - pc, new_pc: fixtures
from helpers.windows import chat_token, ctrl_c, model_files, start, stream_chat
from llmpack.builder import packfile
from llmpack.builder.extract import extract_model
from llmpack.builder.stub import get_stub
from llmpack.builder.windows.tools import Wine, windows_path
from llmpack.runtime.documents.extract import TIME_LIMIT_S, time_limit
from llmpack.runtime.documents.sandbox import GRACE_S, MEMORY_ENV, WORKER_FLAG
from mcp_fixtures import *  # noqa: F401,F403 - friendly_mcp: a fixture

pytestmark = pytest.mark.stub


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def chat_exe(demo_model, windows_stub, tmp_path_factory) -> Path:
    """Built the way the README says, on Linux, with no --stub and no --target: `.exe` is enough."""
    out = tmp_path_factory.mktemp("built-win") / "chat.exe"
    proc = llmpack_cli("build", str(demo_model), "-o", str(out))
    assert f"wrote {out}" in proc.stdout, proc.stdout + proc.stderr
    assert out.read_bytes()[:2] == b"MZ"
    return out


@pytest.fixture(scope="module")
def linux_reply(demo_model, tmp_path_factory) -> str:
    """The same model in the Linux file: the greedy reply the Windows file must start with."""
    out = tmp_path_factory.mktemp("built-linux") / "chat"
    llmpack_cli("build", str(demo_model), "-o", str(out), "--stub", str(get_stub()))
    tmp = tmp_path_factory.mktemp("linux-run")
    (tmp / "xdg-run").mkdir(mode=0o700)   # its own runtime folder: no other running copy is found there
    app = App([str(out), "--no-browser", "--port", str(free_port())],
              {"HOME": str(tmp), "PATH": "/usr/bin:/bin", "LLMPACK_CACHE": str(tmp / "cache"),
               "XDG_RUNTIME_DIR": str(tmp / "xdg-run")}, tmp)
    try:
        app.wait_listening()
        app.wait_healthy()
        return stream_chat(app.url)
    finally:
        app.stop()   # SIGINT: the bootloader passes it on (SIGKILL would leave the Python child running)


# --------------------------------------------------------------------------- chat.exe under Wine


def test_chat_exe_reads_its_model_in_place_and_chats_like_linux(chat_exe, pc, linux_reply):
    """The model is loaded from chat.exe itself (a FILE* of msvcrt.dll, the C runtime our mingw
    DLLs use); %LOCALAPPDATA% gets the marker of its one sha256 check, no copy."""
    sha = packfile.read_manifest(chat_exe).model.sha256
    app = start(pc, chat_exe)
    try:
        health = app.wait_healthy()
        assert health["backend"]["cpu_variant"], health      # ggml's pick for this CPU, by name
        # no display, so no Vulkan driver: the CPU, and one line that says why
        assert health["backend"]["gpu_layers"] == 0 and "Vulkan" in health["backend"]["note"], health
        assert sum("Running on your processor" in ln for ln in app.out) == 1, app.stdout
        assert CHECKING in app.stdout + app.stderr and UNPACKING not in app.stdout + app.stderr
        assert [p.name for p in model_files(pc)] == [f"{sha}.inplace.ok"]
        assert stream_chat(app.url) == linux_reply
        # saved chats live in the Windows per-user data folder
        headers = {"X-Llmpack-Chat": "1", "X-Llmpack-Token": chat_token(app)}
        chat = {"title": "from Wine", "messages": [{"role": "user", "content": "hi"}]}
        r = requests.put(app.url + "/api/chats/wine1", json=chat, headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        assert (pc.local_appdata() / "llmpack" / "chats.sqlite3").is_file()
    finally:
        rc = ctrl_c(app)
    assert rc == 0, app.stderr
    unpacked = model_files(pc)[0].stat().st_mtime_ns

    again = start(pc, chat_exe)
    try:
        again.wait_healthy()
        assert CHECKING not in again.stdout + again.stderr
        assert model_files(pc)[0].stat().st_mtime_ns == unpacked
        headers = {"X-Llmpack-Chat": "1", "X-Llmpack-Token": chat_token(again)}
        saved = requests.get(again.url + "/api/chats/wine1", headers=headers, timeout=30)
        assert saved.status_code == 200 and saved.json()["title"] == "from Wine"
    finally:
        assert ctrl_c(again) == 0, again.stderr


def test_the_pages_mcp_tools_work_in_chat_exe(chat_exe, pc, friendly_mcp):
    """The MCP SDK is in the Windows file as in `llmpack run`, with pywin32, which its stdio client
    imports on Windows: a Streamable HTTP server on this machine is listed and called through the
    built file's proxy (before, chat.exe answered 501 "no MCP support")."""
    app = start(pc, chat_exe)
    try:
        app.wait_healthy()
        headers = {"X-Llmpack-Chat": "1", "X-Llmpack-Token": chat_token(app)}
        listed = requests.put(app.url + "/api/mcp/servers", json={"servers": [{"name": "notes", "url": friendly_mcp}]},
                              headers=headers, timeout=120)
        assert listed.status_code == 200, listed.text
        [notes] = listed.json()["servers"]
        assert notes["status"] == "up", notes
        assert {t["name"] for t in notes["tools"]} == {"add", "secret_word", "shout"}
        answer = requests.post(app.url + "/api/mcp/call", json={"server": "notes", "tool": "add", "arguments": {"a": 2, "b": 40}},
                               headers=headers, timeout=120)
        assert answer.json() == {"text": "42", "is_error": False}
    finally:
        assert ctrl_c(app) == 0, app.stderr


def test_ctrl_c_while_checking_the_model_leaves_nothing_half_done(chat_exe, new_pc):
    pc = new_pc
    app = start(pc, chat_exe)
    try:
        app.wait_phase("checking", timeout=180)
    finally:
        rc = ctrl_c(app)
    assert rc == 0, app.stderr
    assert "Traceback" not in app.stderr
    assert [p.name for p in model_files(pc) if ".tmp-" in p.name or p.suffix in (".gguf", ".ok")] == []


def test_a_second_launch_opens_the_running_one_and_forget_cleans_up(chat_exe, new_pc):
    """Under Windows the lock's process is checked with OpenProcess (os.kill would end it)."""
    pc = new_pc
    env = pc.env()
    app = start(pc, chat_exe)
    try:
        app.wait_answering()
        second = subprocess.run(["wine", str(chat_exe), "--no-browser", "--port", str(free_port())],
                                capture_output=True, text=True, env=env, cwd=chat_exe.parent,
                                stdin=subprocess.DEVNULL, timeout=300)
        assert second.returncode == 0, second.stdout + second.stderr
        assert f"llmpack is already running this chat at {app.url} (--new-instance" in second.stdout, second.stdout
        app.wait_healthy()
        headers = {"X-Llmpack-Chat": "1", "X-Llmpack-Token": chat_token(app)}
        chat = {"title": "forget me", "messages": [{"role": "user", "content": "hi"}]}
        assert requests.put(app.url + "/api/chats/f1", json=chat, headers=headers, timeout=30).status_code == 200
    finally:
        assert ctrl_c(app) == 0, app.stderr
    assert model_files(pc)
    forget = subprocess.run(["wine", str(chat_exe), "--forget", "--yes"], capture_output=True, text=True, env=env,
                            stdin=subprocess.DEVNULL, timeout=300)
    assert forget.returncode == 0 and "Removed " in forget.stdout and "1 saved chat" in forget.stdout, \
        forget.stdout + forget.stderr
    assert model_files(pc) == []


def test_a_tampered_copy_is_refused_with_one_line(chat_exe, new_pc, tmp_path):
    """A PC that receives a damaged copy (nothing unpacked there before)."""
    pc = new_pc
    bad = tmp_path / "chat.exe"
    shutil.copyfile(chat_exe, bad)
    m = packfile.read_manifest(bad).model
    with open(bad, "r+b") as f:
        f.seek(m.offset + m.size // 2)
        byte = f.read(1)
        f.seek(m.offset + m.size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    env = pc.env()
    proc = subprocess.run(["wine", str(bad), "--no-browser", "--port", str(free_port())], capture_output=True,
                          text=True, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=300)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("llmpack: error:")]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(errors) == 1 and "corrupted" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_info_and_extract_to_work_under_wine(chat_exe, pc, tmp_path):
    env = pc.env()
    info = subprocess.run(["wine", str(chat_exe), "--info"], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=300)
    assert info.returncode == 0, info.stderr
    manifest = json.loads(info.stdout)
    assert manifest["model"]["sha256"] == packfile.read_manifest(chat_exe).model.sha256
    out = subprocess.run(["wine", str(chat_exe), "--extract-to", windows_path(tmp_path / "x")], capture_output=True,
                         text=True, env=env, stdin=subprocess.DEVNULL, timeout=300)
    assert out.returncode == 0, out.stderr
    extracted = tmp_path / "x" / f"{manifest['model']['sha256']}.gguf"
    assert hashlib.sha256(extracted.read_bytes()).hexdigest() == manifest["model"]["sha256"]


def extract_workers(pc: Wine) -> dict[int, int]:
    """This prefix's attachment readers (`chat.exe --llmpack-extract-worker`), Linux pid -> its
    anonymous memory in KiB: Wine runs each Windows process as a Linux one, with its command
    line and environment."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd, env = (proc / "cmdline").read_bytes(), (proc / "environ").read_bytes()
            status = (proc / "status").read_text()
        except OSError:
            continue
        if WORKER_FLAG.encode() in cmd and f"WINEPREFIX={pc.prefix}".encode() in env.split(b"\0"):
            found[int(proc.name)] = int(re.search(r"RssAnon:\s+(\d+)", status).group(1))
    return found


def test_attachments_are_read_by_a_child_killed_at_the_deadline_or_the_memory_cap(chat_exe, pc):
    """As on Windows: each attachment is read by `chat.exe --llmpack-extract-worker`, a child
    process kept warm. A PDF page that never ends costs that child, killed at the 20 s deadline;
    a PDF that needs more memory than the cap (LLMPACK_EXTRACT_MEMORY_MB, 64 here) costs another
    (Wine ignores a job object's memory limit: the server watches the child's memory and kills
    it); the next attachment is read at once by a fresh child, and the chat goes on."""
    app = start(pc, chat_exe, env={MEMORY_ENV: "64"})

    def attach(name: str, data: bytes) -> tuple[requests.Response, float]:
        began = time.monotonic()
        r = requests.post(app.url + "/v1/extract", data=data, headers={"X-Filename": name}, timeout=120)
        return r, time.monotonic() - began

    def fresh_worker(gone: set[int]) -> set[int]:
        deadline = time.monotonic() + 10   # the killed Linux process is reaped a moment after the answer
        while set(extract_workers(pc)) & gone and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not set(extract_workers(pc)) & gone, "the killed reader is still running"
        return set(extract_workers(pc))

    try:
        app.wait_healthy()
        assert extract_workers(pc) == {}                       # started on the first attachment
        r, _ = attach("report.pdf", make_pdf(["Page one.", "Page two."]))
        assert r.status_code == 200 and r.json()["text"] == "Page one.\n\nPage two.", r.text
        first = set(extract_workers(pc))
        assert len(first) == 1, extract_workers(pc)
        r, _ = attach("notes.docx", make_docx(["Read by the same child."]))
        assert r.status_code == 200 and r.json()["text"] == "Read by the same child.", r.text
        assert set(extract_workers(pc)) == first               # kept warm, not one process per file

        endless = endless_pdf(moves=10_000)                    # PDFium would need about a minute
        limit = time_limit(len(endless))                       # 20 s and a little more for its size
        r, took = attach("endless.pdf", endless)
        assert r.status_code == 400 and f"took longer than {limit:.0f} s" in r.json()["error"]["message"], r.text
        assert limit - 1 < took < limit + GRACE_S + 5, took    # killed at the deadline, not waited for
        fresh_worker(first)
        r, _ = attach("after.docx", make_docx(["Still here."]))
        assert r.status_code == 200 and r.json()["text"] == "Still here.", r.text
        second = set(extract_workers(pc))
        assert len(second) == 1 and not second & first

        r, took = attach("bomb.pdf", bomb_pdf(200 << 20))      # its page's content unpacks to 200 MB
        assert r.status_code == 400, r.text
        assert "needs more memory to read than llmpack allows (64 MB)" in r.json()["error"]["message"], r.text
        assert took < TIME_LIMIT_S, took
        fresh_worker(second)
        r, _ = attach("last.pdf", make_pdf(["The end."]))
        assert r.status_code == 200 and r.json()["text"] == "The end.", r.text
        assert all(kib < 64 * 1024 for kib in extract_workers(pc).values()), extract_workers(pc)
        assert stream_chat(app.url)                            # the server itself never stopped
    finally:
        assert ctrl_c(app) == 0, app.stderr
    fresh_worker(set(extract_workers(pc)))                     # the readers end with the program


def test_double_click_opens_the_browser_through_windows(chat_exe, pc, tmp_path):
    """Without --no-browser the program asks Windows to open the page (os.startfile through
    Python's webbrowser); Wine hands that to its WineBrowser setting, pointed here at a script
    that writes down what it was given instead of starting a real browser."""
    opened = tmp_path / "opened.txt"
    script = tmp_path / "browser.sh"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" >> {opened}\n")
    script.chmod(0o755)
    env = pc.env()
    for key in ([r"HKCU\Software\Wine\WineBrowser", "/v", "Browsers", "/d", str(script)],
                [r"HKCR\.html", "/ve", "/d", "htmlfile"]):   # as on every Windows; Wine's new prefix lacks it
        subprocess.run(["wine", "reg", "add", *key, "/f"], check=True, env=env, capture_output=True,
                       stdin=subprocess.DEVNULL)
    app = start(pc, chat_exe, browser=True)
    try:
        deadline = time.monotonic() + 60
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert opened.exists(), app.stderr
        target = opened.read_text().strip()
        token = chat_token(app)
        assert target.endswith(".html") and token not in target, target   # the secret is not on a command line
        page = Path(urllib.parse.unquote(urllib.parse.urlsplit(target).path) if "://" in target else target)
        assert f"?token={token}" in page.read_text()                      # the file leads to the token link
    finally:
        assert ctrl_c(app) == 0, app.stderr
    assert not page.exists(), "the redirect file outlives the program"


@pytest.mark.needs("xvfb", "lavapipe")
def test_vulkan_under_wine_offloads_to_lavapipe(chat_exe, pc, tmp_path):
    """Wine's winevulkan hands Vulkan to the host's driver through its display driver: on a
    virtual X screen, Mesa's lavapipe (a software Vulkan GPU, made visible to ggml with
    GGML_VK_VISIBLE_DEVICES) is the Windows program's Vulkan0, and the model's layers go there."""
    screen = subprocess.Popen(["Xvfb", "-displayfd", "1", "-screen", "0", "640x480x24", "-nolisten", "tcp"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        display = ":" + screen.stdout.readline().strip()
        env = {**pc.env(), "DISPLAY": display, "GGML_VK_VISIBLE_DEVICES": "0"}
        app = App(["wine", str(chat_exe), "--no-browser", "--port", str(free_port()), "--gpu-layers", "all"],
                  env, chat_exe.parent)
        try:
            app.wait_listening(timeout=180)
            backend = app.wait_healthy()["backend"]
            assert backend["gpu_device"] == "Vulkan0" and backend["gpu_layers"] == backend["n_layers"] > 0, backend
            assert "llvmpipe" in backend["devices"][0]["name"].lower(), backend
            assert stream_chat(app.url).strip()
        finally:
            assert ctrl_c(app) == 0, app.stderr
    finally:
        screen.terminate()
        screen.wait(10)


# --------------------------------------------------------------------------- signing


@pytest.mark.needs("osslsigncode")
def test_a_signed_chat_exe_verifies_and_its_model_still_checks_out(chat_exe, demo_model, tmp_path):
    ca_key, ca, key, csr, cert, pfx = (tmp_path / n for n in ("ca.key", "ca.pem", "key.pem", "csr.pem",
                                                                "cert.pem", "cert.pfx"))
    ssl = lambda *a: subprocess.run(["openssl", *map(str, a)], check=True, capture_output=True)  # noqa: E731
    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2",
        "-subj", "/CN=llmpack test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=llmpack test signer")
    ext = tmp_path / "ext.cnf"
    ext.write_text("extendedKeyUsage=codeSigning\nkeyUsage=critical,digitalSignature\n")
    ssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert, "-days", "2",
        "-extfile", ext)
    ssl("pkcs12", "-export", "-inkey", key, "-in", cert, "-certfile", ca, "-out", pfx, "-passout", "pass:s3cret")

    out = tmp_path / "signed.exe"
    env = {**os.environ, "LLMPACK_SIGN_PASSWORD": "s3cret"}
    proc = llmpack_cli("build", str(demo_model), "-o", str(out), "--sign-pfx", str(pfx), env=env)
    assert "s3cret" not in proc.stdout + proc.stderr
    verify = subprocess.run(["osslsigncode", "verify", "-CAfile", str(ca), "-in", str(out)],
                            capture_output=True, text=True)
    assert verify.returncode == 0 and "Signature verification: ok" in verify.stdout, verify.stdout + verify.stderr
    manifest = packfile.read_manifest(out)           # the trailer is found in front of the certificate
    assert manifest.model.sha256 == packfile.read_manifest(chat_exe).model.sha256
    assert extract_model(out, manifest, tmp_path / "x").stat().st_size == demo_model.stat().st_size


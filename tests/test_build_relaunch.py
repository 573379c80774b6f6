"""A built file's `--forget` (the model copy and the saved chats removed, after asking) and a second
launch (it opens the running one instead of starting again), for real, on the tiny model."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests

from llmpack.progress import human_bytes
from apps import App, assert_clean_exit, launch, minimal_env
from helpers.built import *  # noqa: F401,F403 - tiny_gguf, tiny_exe, tiny_zstd_exe: fixtures

pytestmark = pytest.mark.stub


# --------------------------------------------------------------------------- --forget and a second launch


def page_token(app: App) -> str:
    """The chat secret the program printed (its page link ends in ?token=...)."""
    line = next(x for x in app.stdout.splitlines() if "chat page at " in x)
    return line.split("?token=", 1)[1].split()[0]


def run_on_a_terminal(cmd: list[str], env: dict, cwd: Path, answer: str | None) -> tuple[int, str]:
    """Run `cmd` with a pseudo-terminal as its console; type `answer` once it asks."""
    import pty

    main, side = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=side, stdout=side, stderr=side, env=env, cwd=cwd, close_fds=True)
    os.close(side)
    seen = b""
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline, seen
        try:
            chunk = os.read(main, 4096)
        except OSError:   # EIO: the program exited and closed the terminal
            break
        if not chunk:
            break
        seen += chunk
        if answer is not None and b"[y/N]" in seen:
            os.write(main, answer.encode() + b"\n")
            answer = None
    os.close(main)
    return proc.wait(60), seen.decode("utf-8", "replace")


def test_forget_removes_the_model_copy_and_the_saved_chats_after_asking(tiny_zstd_exe, tiny_gguf, tmp_path):
    sha = hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    env = minimal_env(tmp_path, LLMPACK_DATA_DIR=str(tmp_path / "data"))
    app = launch(tiny_zstd_exe, tmp_path, env=env)
    try:
        app.wait_listening()
        app.wait_healthy()
        headers = {"X-Llmpack-Token": page_token(app), "X-Llmpack-Chat": "1"}
        chat = {"title": "Keep me?", "messages": [{"role": "user", "content": "hello " * 1000}]}
        assert requests.put(app.url + "/api/chats/c1", json=chat, headers=headers, timeout=30).status_code == 200
        assert requests.put(app.url + "/api/settings", json={"temperature": 0.5}, headers=headers,
                            timeout=30).status_code == 200
        running = subprocess.run([str(tiny_zstd_exe), "--forget", "--yes"], capture_output=True, text=True,
                                 timeout=120, env=env, cwd=tmp_path)   # refused while it serves
        assert running.returncode == 2 and "is running at " + app.url in running.stderr, running.stderr
    finally:
        rc = app.stop()
    assert_clean_exit(app, rc)
    from llmpack.runtime.chats.chats import ChatStore

    store = ChatStore(tmp_path / "data" / "chats.sqlite3")
    store.put("someone-else", {"id": "x", "title": "other model", "mode": "chat", "created": 1, "updated": 1,
                               "messages": []})
    models = tmp_path / "cache" / "models"
    assert (models / f"{sha}.gguf").is_file() and store.usage(sha[:10])[:1] == (1,)

    # no console to ask on: refused, nothing removed
    proc = subprocess.run([str(tiny_zstd_exe), "--forget"], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "add --yes" in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert (models / f"{sha}.gguf").is_file()

    # asked on a terminal: "n" keeps everything, "y" removes it
    total = sum(p.stat().st_size for p in models.iterdir()) + store.usage(sha[:10])[1]
    size_mb = f"({human_bytes(total)})? [y/N]"
    rc, out = run_on_a_terminal([str(tiny_zstd_exe), "--forget"], env, tmp_path, "n")
    assert rc == 1 and f"Remove the unpacked model {models / (sha + '.gguf')} and 1 saved chat and the page " \
                       f"settings of this model in {store.path} {size_mb}" in out, out
    assert (models / f"{sha}.gguf").is_file() and store.usage(sha[:10]) != (0, 0, False)
    rc, out = run_on_a_terminal([str(tiny_zstd_exe), "--forget"], env, tmp_path, "y")
    assert rc == 0 and "Removed the unpacked model" in out, out
    assert sorted(p.name for p in models.iterdir()) == []
    assert store.usage(sha[:10]) == (0, 0, False) and store.usage("someone-else")[0] == 1   # others' chats stay

    proc = subprocess.run([str(tiny_zstd_exe), "--forget", "--yes"], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("Nothing to remove"), proc.stdout + proc.stderr


def test_forget_also_removes_the_copy_an_older_llmpack_unpacked(tiny_exe, tiny_gguf, tmp_path):
    """Before issue 20 every first launch left <sha256>.gguf in the cache, even of an uncompressed
    build: --forget finds and removes that copy too."""
    sha = hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    env = minimal_env(tmp_path, LLMPACK_DATA_DIR=str(tmp_path / "data"))
    models = tmp_path / "cache" / "models"
    subprocess.run([str(tiny_exe), "--extract-to", str(models)], check=True, capture_output=True, env=env,
                   cwd=tmp_path, timeout=120)   # the copy, where and as the old first launch wrote it
    assert (models / f"{sha}.gguf").is_file()
    proc = subprocess.run([str(tiny_exe), "--forget", "--yes"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and f"Removed the unpacked model {models / (sha + '.gguf')}" in proc.stdout, \
        proc.stdout + proc.stderr
    assert list(models.iterdir()) == []


BROWSER_SCRIPT = """#!/bin/sh
# a stand-in browser: records what it was asked to open
printf '%s\\n' "$1" >> "$0.opened"
"""


def test_a_second_launch_opens_the_running_one_instead_of_starting_again(tiny_exe, tiny_gguf, tmp_path):
    sha = hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    browser = tmp_path / "browser.sh"
    browser.write_text(BROWSER_SCRIPT)
    browser.chmod(0o755)
    env = minimal_env(tmp_path, BROWSER=str(browser))
    lock = tmp_path / "xdg-run" / "llmpack" / f"instance-{sha[:10]}.json"
    first = launch(tiny_exe, tmp_path, env=env)
    try:
        first.wait_listening()
        first.wait_answering()
        info = json.loads(lock.read_text())
        ppid = int(Path(f"/proc/{info['pid']}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert ppid == first.proc.pid   # the server process, child of the onefile bootloader
        assert info["port"] == int(first.url.rsplit(":", 1)[1]) and info["key"] == sha[:10]
        assert info["url"] == first.url and oct(lock.stat().st_mode & 0o777) == "0o600"
        assert page_token(first) not in lock.read_text()   # the lock file holds no secret

        second = subprocess.run([str(tiny_exe), "--port", "0"], capture_output=True, text=True, timeout=120,
                                env=env, cwd=tmp_path)
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip() == (f"llmpack is already running this chat at {first.url}: opened it in "
                                         "your browser (--new-instance starts another copy).")
        opened = Path(str(browser) + ".opened")
        deadline = time.monotonic() + 30
        while not opened.exists():
            assert time.monotonic() < deadline, "the browser was never started"
            time.sleep(0.05)
        url = opened.read_text().split()[0]
        assert url == Path(info["redirect"]).as_uri()   # the running one's own redirect file...
        assert f"{first.url}/?token={page_token(first)}" in Path(info["redirect"]).read_text()   # ...to its page

        forced = launch(tiny_exe, tmp_path / "forced", "--new-instance", env=env)
        try:
            assert forced.wait_listening() != first.url   # --new-instance: a second copy after all
        finally:
            assert_clean_exit(forced, forced.stop())
        assert json.loads(lock.read_text())["url"] == first.url   # the extra copy left the lock alone
    finally:
        os.kill(info["pid"], signal.SIGKILL)   # a crash: its lock file stays behind, stale
        first.wait_exit(30)
    assert lock.exists()

    # a stale lock (its process is gone) is replaced; so is one whose process lives but whose
    # /health does not answer for this model (this test's own pid, a port nobody listens on)
    for stale_pid in (info["pid"], os.getpid()):
        if stale_pid == os.getpid():
            lock.write_text(json.dumps({**info, "pid": os.getpid(), "url": "http://127.0.0.1:9", "port": 9}))
        app = launch(tiny_exe, tmp_path / f"after-{stale_pid}", env=env)
        try:
            app.wait_listening()
            app.wait_answering()
            assert json.loads(lock.read_text())["url"] == app.url
        finally:
            rc = app.stop()
        assert_clean_exit(app, rc)
        assert not lock.exists()   # removed when it stopped
